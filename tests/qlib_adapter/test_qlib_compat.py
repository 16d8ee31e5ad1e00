"""Each Qlib internal ``rolling_calib.qlib_adapter.qlib_compat`` relies on still behaves as assumed.

On a Qlib upgrade that breaks one, the failing test names the assumption and the installed Qlib version
(``assumption_broken``), so the fix is to adapt ``qlib_compat.py``, not to guess.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import logging

import pytest

pytest.importorskip("qlib")

from rolling_calib.qlib_adapter import qlib_compat  # noqa: E402
from rolling_calib.qlib_adapter.qlib_compat import assumption_broken  # noqa: E402

#: Qlib's torch models whose epochs the progress lines show (they log "Epoch%d:" when an epoch starts).
EPOCH_LOGGING_MODELS = ("pytorch_lstm", "pytorch_gru", "pytorch_alstm", "pytorch_alstm_ts", "pytorch_lstm_ts",
                        "pytorch_gru_ts", "pytorch_gats", "pytorch_tcn", "pytorch_transformer", "pytorch_tra")


def test_r_keeps_the_registered_recorder_in_provider():
    from qlib.workflow import R

    saved = R.__dict__.get("_provider", None)
    sentinel = object()
    try:
        R.register(sentinel)
        assert qlib_compat.recorder_provider() is sentinel, assumption_broken(
            "qlib.workflow.R.register(recorder) keeps the recorder in R._provider", repr(qlib_compat.recorder_provider()))
    finally:
        R.__dict__["_provider"] = saved


def test_the_recorder_has_the_logging_methods_that_are_silenced():
    from qlib.workflow import QlibRecorder

    missing = [name for name in (*qlib_compat.RECORDER_LOGGING, "get_recorder", "exp_manager")
               if not hasattr(QlibRecorder, name) and name not in inspect.signature(QlibRecorder).parameters]
    assert not missing, assumption_broken("QlibRecorder has log_metrics, log_params, set_tags, get_recorder and "
                                          "exp_manager", f"none of {missing}")


def test_qlib_init_keys_come_from_qlibs_defaults():
    keys = qlib_compat.qlib_init_keys()
    needed = {"provider_uri", "region", "logging_level", "exp_manager", "kernels", "expression_cache",
              "dataset_cache", "trade_unit", "limit_threshold", "deal_price"}
    assert needed <= keys, assumption_broken("qlib.config._default_config, MODE_CONF['client'] and "
                                             "_default_region_config hold qlib.init's arguments",
                                             f"no {sorted(needed - keys)}")


def test_the_lgb_finetune_bug_is_recognised_in_its_source():
    from qlib.contrib.model.gbdt import LGBModel

    try:
        source = inspect.getsource(LGBModel.finetune)
    except (OSError, TypeError) as exc:
        pytest.fail(assumption_broken("LGBModel.finetune's source can be read (the check for 0.9.7's bug)", repr(exc)))
    broken = qlib_compat.lgb_finetune_broken(LGBModel)
    assert broken == (qlib_compat.LGB_FINETUNE_BUG in source)
    if qlib_compat.qlib_version() == "0.9.7":
        assert broken, assumption_broken("pyqlib 0.9.7's LGBModel.finetune holds 'dtrain, _ = self._prepare_data('",
                                         "another line")
    if broken:  # the workaround replays Qlib's later fix: _prepare_data must return [(lgb.Dataset, name), ...]
        prepare = inspect.getsource(LGBModel._prepare_data)
        assert "ds_l.append" in prepare or "ds_l = []" in prepare, assumption_broken(
            "LGBModel._prepare_data returns a list of (lgb.Dataset, name) pairs", "another body")


def _logged_messages(module_name: str) -> set[str]:
    """The first (string) argument of every ``*.info(...)`` call in a Qlib model module's source."""
    tree = ast.parse(inspect.getsource(importlib.import_module(f"qlib.contrib.model.{module_name}")))
    return {node.args[0].value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "info"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)}


@pytest.mark.parametrize("module_name", EPOCH_LOGGING_MODELS)
def test_qlibs_torch_models_log_the_epoch_messages_progress_reads(module_name):
    pytest.importorskip("torch")
    messages = _logged_messages(module_name)
    assert messages & set(qlib_compat.EPOCH_MESSAGES), assumption_broken(
        f"qlib.contrib.model.{module_name} logs 'Epoch%d:' (or 'Epoch %d:') with the epoch when one starts",
        f"{sorted(m for m in messages if 'poch' in m) or 'no epoch message'}")


def test_an_epoch_record_as_qlib_logs_it_is_read():
    """The record Qlib's ``self.logger.info("Epoch%d:", step)`` creates gives the epoch counted from 1."""
    from qlib.log import get_module_logger

    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(qlib_compat.logged_epoch(record))

    logger = get_module_logger("LSTM")
    handler = Keep()
    logging.getLogger("qlib").addHandler(handler)
    try:
        logger.setLevel(logging.INFO)
        logger.info("Epoch%d:", 0)
        logger.info("train %.6f, valid %.6f", 0.1, 0.2)
    finally:
        logging.getLogger("qlib").removeHandler(handler)
    assert seen == [1, None], assumption_broken("Qlib's module loggers propagate to the 'qlib' logger", f"{seen}")
