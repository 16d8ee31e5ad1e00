"""The Qlib internals rolling-calib relies on, in one place (the upgrade risk, named and tested).

Qlib offers no public API for five things the adapter needs; it reaches them only through here:

* :func:`recorder_provider`: the ``QlibRecorder`` registered in ``qlib.workflow.R`` (``R._provider``;
  ``None`` before ``qlib.init``), to reuse a workflow's experiment manager and to silence a model's
  recorder logging outside ``qrun`` (its methods ``log_metrics``, ``log_params``, ``set_tags``,
  ``get_recorder``: :data:`RECORDER_LOGGING`);
* :func:`qlib_init_keys`: the arguments ``qlib.init`` takes (``qlib.config._default_config``,
  ``MODE_CONF["client"]`` and ``_default_region_config``), to refuse a typo in ``qlib_init``;
* :func:`lgb_finetune_broken`: whether ``LGBModel.finetune`` still has pyqlib 0.9.7's bug (it unpacks
  ``_prepare_data``'s list of pairs as one pair), read from its source text;
* :func:`lgb_finetune`: that ``finetune`` as Qlib's later fix runs it, through ``LGBModel``'s private
  ``_prepare_data`` (the one way to the ``lgb.Dataset`` of the train segment that ``fit`` builds);
* :func:`logged_epoch`: the epoch of Qlib's torch models' log record ``"Epoch%d:"`` (TRA: ``"Epoch %d:"``),
  for the progress lines (:data:`EPOCH_MESSAGES`).

``tests/qlib_adapter/test_qlib_compat.py`` checks each assumption against the installed Qlib; a failing
check names the assumption and the installed version (:func:`assumption_broken`). Tested with pyqlib 0.9.7.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

__all__ = ["EPOCH_MESSAGES", "LGB_FINETUNE_BUG", "RECORDER_LOGGING", "assumption_broken", "lgb_finetune",
           "lgb_finetune_broken", "logged_epoch", "qlib_init_keys", "qlib_version", "recorder_provider"]

#: The messages Qlib's torch models log when an epoch starts, with the epoch (from 0) as their one argument.
EPOCH_MESSAGES = ("Epoch%d:", "Epoch %d:")
#: The recorder methods a model calls to log a training curve (dropped while no Qlib experiment is active).
RECORDER_LOGGING = ("log_metrics", "log_params", "set_tags")
#: The line of pyqlib 0.9.7's ``LGBModel.finetune`` that always fails (Qlib's main branch takes ``ds_l[0]``).
LGB_FINETUNE_BUG = "dtrain, _ = self._prepare_data("


def qlib_version() -> str:
    """The installed Qlib's version."""
    import qlib

    return qlib.__version__


def assumption_broken(assumption: str, found: str) -> str:
    """The message of a Qlib internal that no longer behaves as this module assumes.

    >>> assumption_broken("x is a dict", "a list").startswith("Qlib ")
    True
    """
    return (f"Qlib {qlib_version()}: {assumption} no longer holds (found {found}); adapt "
            "rolling_calib/qlib_adapter/qlib_compat.py to this Qlib, or install the Qlib it was tested with (pyqlib 0.9.7)")


def recorder_provider() -> Any | None:
    """The ``QlibRecorder`` registered in ``qlib.workflow.R`` (its ``exp_manager``, its logging methods), or ``None``."""
    from qlib.workflow import R

    return getattr(R, "_provider", None)  # Qlib's Wrapper: None until something is registered


def qlib_init_keys() -> set[str]:
    """The arguments ``qlib.init`` takes: Qlib's defaults, the client mode's, and every region's."""
    from qlib.config import MODE_CONF, _default_config, _default_region_config

    keys = set(_default_config) | set(MODE_CONF["client"]) | {"clear_mem_cache", "skip_if_reg"}
    return keys | set().union(*(set(v) for v in _default_region_config.values()))


def lgb_finetune_broken(model_class: type) -> bool:
    """Whether ``model_class.finetune`` still holds pyqlib 0.9.7's failing line (:data:`LGB_FINETUNE_BUG`).

    ``False`` where its source cannot be read (then Qlib's own ``finetune`` runs, as for any model).
    """
    try:
        return LGB_FINETUNE_BUG in inspect.getsource(model_class.finetune)
    except (OSError, TypeError):
        return False


def lgb_finetune(model: Any, dataset: Any, reweighter: Any = None) -> None:
    """``LGBModel.finetune(dataset)`` as Qlib's main branch runs it, for a pyqlib whose own is broken (0.9.7).

    pyqlib 0.9.7's ``LGBModel.finetune`` unpacks ``_prepare_data``'s list of ``(lgb.Dataset, name)``
    pairs as if it were one pair (``dtrain, _ = self._prepare_data(...)``), so it always fails;
    Qlib's main branch takes ``ds_l[0]``. This runs that fixed version: 10 more boosting rounds on the
    train segment from the previous window's booster (``init_model``), as Qlib does. ``_prepare_data``
    is private (pyqlib 0.9.7, ``qlib/contrib/model/gbdt.py``): it is the only way to the train
    segment's ``lgb.Dataset`` built as ``fit`` builds it (its label column, ``reweighter``, ``DK_L``);
    ``tests/qlib_adapter/test_qlib_compat.py`` checks it still returns ``[(lgb.Dataset, name), ...]``.
    Call it only where :func:`lgb_finetune_broken` is true (else call ``model.finetune``).
    """
    import lightgbm as lgb

    dtrain, _ = model._prepare_data(dataset, reweighter)[0]
    if dtrain.data is not None and len(dtrain.data) == 0:  # not constructed: lgb.train adds the init scores
        raise ValueError("Empty data from dataset, please check your dataset config.")
    model.model = lgb.train(model.params, dtrain, num_boost_round=10, init_model=model.model, valid_sets=[dtrain],
                            valid_names=["train"], callbacks=[lgb.log_evaluation(period=20)])


def logged_epoch(record: logging.LogRecord) -> int | None:
    """The epoch (counted from 1) a Qlib torch model's ``"Epoch%d:"`` record announces, else ``None``.

    >>> logged_epoch(logging.makeLogRecord({"msg": "Epoch%d:", "args": (4,)}))
    5
    >>> logged_epoch(logging.makeLogRecord({"msg": "training...", "args": ()})) is None
    True
    """
    args = record.args if isinstance(record.args, tuple) else ()
    if record.msg in EPOCH_MESSAGES and len(args) == 1 and isinstance(args[0], int):
        return args[0] + 1
    return None
