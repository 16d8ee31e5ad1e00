"""One rolling window through Qlib's own machinery: the window's task, then fit, predict, label.

Any Qlib model and dataset run here (``RollingLSTM`` + ``MinuteTSDataset``, Qlib's ``LGBModel`` +
``Alpha158``, ``LSTM`` + ``Alpha360``, ...)::

    task   = the pipeline's Qlib task with this window's dates, segments (extra ones too), the unit's
             seed and threads in the model's own arguments (:func:`unit_task`, :mod:`.zoo`)
    torch.set_num_threads(threads)                                 # every unit, whatever the model
    pretrained base network (GATs, IGMTF with a missing model_path): trained first on this window
    random.seed(s); numpy.random.seed(s); torch.manual_seed(s)     # every unit, whatever the model
    model  = init_instance_by_config(task["model"])
    data   = init_instance_by_config(task["dataset"])
    warm start (fine-tune mode, window k >= 1), by what the model offers:
        load_state/save_state  -> model.load_state(checkpoint k-1); model.fit(data)   (ours)
        finetune(dataset)      -> model = unpickle(checkpoint k-1); model.finetune(data)   (LGBModel)
        neither                -> refused at plan time (:func:`check_runner_contract`)
    p = model.predict(data, "test")     (and "valid" when the window has one: stored beside the unit);
        a model whose predict takes no segment (Qlib's _ts models) is called predict(data), as qrun does
    y = data.prepare("test", col_set="label", data_key=DK_R or DK_L)   # rolling.label: raw | learn
    y' = the other of the two (a DataHandlerLP has both), stored beside y where it differs
    checkpoint: model.save_state(path) if it has one, else the pickled model
    task["record"] (daily stores): SignalRecord, SigAnaRecord, PortAnaRecord ... in a Qlib recorder
                                   (:mod:`rolling_calib.qlib_adapter.records`)

Progress: given ``progress`` (a plain function, :data:`UnitProgress`), a window tells it each stage
as it starts (building, pretraining base, fitting, fine-tuning, predicting, saving) and, while
fitting, the epochs: our models (``fit(..., report=)``) their epochs and the batches of long
epochs; Qlib's torch models the epochs they log themselves (``"Epoch%d:"`` at INFO, read from
their log records, :class:`QlibEpochs`: nothing when ``logging_level`` is above INFO); other
models (LightGBM, XGBoost, CatBoost, ...) the stage only. Qlib is not patched, and no number changes.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import logging
import pickle
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from data_prep.atomic import atomic_write
from rolling_calib.core.label import LABEL_KINDS
from rolling_calib.core.schedule import Window
from rolling_calib.core.validation import ConfigError
from rolling_calib.qlib_adapter.dataset_cache import prepared_dataset
from rolling_calib.qlib_adapter.qlib_compat import (
    RECORDER_LOGGING,
    lgb_finetune,
    lgb_finetune_broken,
    logged_epoch,
    recorder_provider,
)
from rolling_calib.qlib_adapter.records import RecorderSpec, run_records, unit_records
from rolling_calib.qlib_adapter.session import init_qlib_once, store_freq
from rolling_calib.qlib_adapter.task_spec import accepted_kwargs, import_class
from rolling_calib.qlib_adapter.zoo import (
    apply_unit_settings,
    extra_segment_rule,
    predict_segment,
    pretrain_base,
    pretrained_base,
    saved_params,
    set_unit_threads,
    stopping_point,
    window_segments,
)

__all__ = ["HANDLER_REQUIRED_TIME_KWARGS", "HANDLER_TIME_KWARGS", "LABEL_SOURCES", "QlibEpochs", "TrainedWindow",
           "UnitProgress", "base_model_path", "check_runner_contract", "fit_path", "set_global_seeds", "train_window",
           "train_window_stack", "unit_task", "warm_start_kind", "window_task"]

#: ``rolling.label``: score against the handler's raw label (``DK_R``) or its learn-processed label (``DK_L``).
LABEL_SOURCES = LABEL_KINDS
#: A unit's progress: ``progress(stage)`` when a stage starts (``"building"``, ``"fitting"``, ``"predicting"``, ...),
#: ``progress("fitting", epoch=i, epochs=n, batch=j, batches=m)`` while a model that reports fits (any of the four
#: may be None: unknown). A plain function; reporting never changes a number.
UnitProgress = Callable[..., None]


def _silent(*args: Any, **kwargs: Any) -> None:
    """The :data:`UnitProgress` of a window nobody watches."""


#: Handler arguments :func:`window_task` sets for every window (the ``fit_*`` ones where the handler takes them).
HANDLER_TIME_KWARGS = ("start_time", "end_time", "fit_start_time", "fit_end_time")
#: Of :data:`HANDLER_TIME_KWARGS`, those every handler must take (a plain ``DataHandlerLP`` takes no ``fit_*``).
HANDLER_REQUIRED_TIME_KWARGS = ("start_time", "end_time")


@dataclass(frozen=True)
class TrainedWindow:
    """What one trained window returns: test predictions, test labels and timings (seconds)."""

    predictions: pd.Series | pd.DataFrame
    labels: pd.Series | pd.DataFrame
    build_s: float
    fit_s: float
    predict_s: float
    seeds: dict = field(default_factory=dict)  # global seeds set before the model was built
    recorder: dict | None = None  # the Qlib recorder of the task's records (:func:`records.run_records`)
    # the validation segment's predictions and labels (None: the task has no valid segment)
    valid_predictions: pd.Series | pd.DataFrame | None = None
    valid_labels: pd.Series | pd.DataFrame | None = None
    # the other label kind (learn when labels are raw, raw when learn; None: the handler has only one)
    other_labels: pd.Series | pd.DataFrame | None = None
    valid_other_labels: pd.Series | pd.DataFrame | None = None
    # where a booster's training stopped, in words (:func:`~rolling_calib.qlib_adapter.zoo.stopping_point`)
    stopped_at: str | None = None
    # the data set was the one an earlier unit of this window built in this process (:mod:`.dataset_cache`)
    dataset_reused: bool = False
    # where and how the model computed (:func:`fit_path`; None: the model does not say)
    fit_path: dict | None = None


def fit_path(model: Any) -> dict | None:
    """Where ``model``'s last fit computed: its ``device``, ``feed`` and seed ``stack`` kernel, as it recorded them.

    Read from ``last_fit_info`` (RollingLSTM and the seed stack record them); None for a model
    that records none. Kept in the unit's sidecar: the feed and the kernel move no number beyond
    float rounding, but a reader can see which ran.

    >>> class M: last_fit_info = {"device": "cuda:0", "feed": {"mode": "resident"}, "train_loss": [1.0]}
    >>> fit_path(M())
    {'device': 'cuda:0', 'feed': {'mode': 'resident'}}
    >>> fit_path(object()) is None
    True
    """
    info = getattr(model, "last_fit_info", None)
    if not isinstance(info, dict):
        return None
    path = {key: info[key] for key in ("device", "feed", "stack") if key in info}
    return path or None


def window_task(task: dict, window: Window, *, seed: int, n_threads: int) -> dict:
    """The Qlib task of one unit: the pipeline's task with this window's dates, seed and threads.

    See :func:`unit_task`, which also returns what was applied.
    """
    return unit_task(task, window, seed=seed, n_threads=n_threads)[0]


def unit_task(task: Mapping[str, Any], window: Window, *, seed: int, n_threads: int,
              where: str = "task") -> tuple[dict, dict]:
    """The Qlib task of one unit, and what the runner applied to it (kept in the unit's sidecar).

    * the handler's ``start_time``/``end_time`` (fit start to test end) and, where it takes them,
      ``fit_start_time``/``fit_end_time`` (the window's fit span; also in the handler's processors
      that name them, e.g. a plain ``DataHandlerLP``'s ``RobustZScoreNorm``);
    * the dataset's ``segments``: train/valid/test of the window (exact first/last bars), and every
      extra segment the dataset declares, following the rolled segment whose written dates it repeats
      (:func:`rolling_calib.qlib_adapter.zoo.window_segments`; TabNet's ``pretrain`` = train);
    * the unit's seed in the model's seed argument and its threads in the thread arguments
      (:func:`rolling_calib.qlib_adapter.zoo.apply_unit_settings`);
    * a compatibility class where Qlib's is broken under the installed torch
      (:func:`rolling_calib.qlib_adapter.compat.compat_substitute`).

    Returns ``(task, applied)``: ``applied`` holds ``seed_param``, ``threads`` and, when used, ``compat``.
    """
    from rolling_calib.qlib_adapter.compat import compat_substitute

    out = copy.deepcopy(dict(task))
    applied = apply_unit_settings(out["model"], seed=seed, threads=n_threads)
    out["model"], note = compat_substitute(out["model"])
    if note is not None:
        applied["compat"] = note
    dkw = out["dataset"].setdefault("kwargs", {})
    _set_handler_times(dkw["handler"], window)
    spans = {"train": window.train.as_tuple(), "valid": window.valid.as_tuple() if window.valid is not None else None,
             "test": window.test.as_tuple()}  # no valid segment: the model keeps its last epoch
    dkw["segments"] = window_segments(dkw.get("segments") or {}, spans, where)
    return out, applied


def _set_handler_times(handler: dict, window: Window) -> None:
    """Set the handler's window times (:func:`unit_task`), each where the handler (or a processor) takes it."""
    handler_cls = import_class(dict(handler), "task.dataset.kwargs.handler", "window_task")
    hkw = handler.setdefault("kwargs", {})
    fit = {"fit_start_time": window.fit.start.isoformat(sep=" "), "fit_end_time": window.fit.end.isoformat(sep=" ")}
    hkw["start_time"] = min(window.fit.start, window.train.start).isoformat(sep=" ")
    hkw["end_time"] = window.test.end.isoformat(sep=" ")
    for name, value in fit.items():
        if _accepts(handler_cls, name):
            hkw[name] = value
    for key, processors in hkw.items():
        if key.endswith("processors") and isinstance(processors, list):
            for proc in processors:
                kwargs = proc.get("kwargs") if isinstance(proc, dict) else None
                if isinstance(kwargs, dict):
                    kwargs.update({name: value for name, value in fit.items() if name in kwargs})


def warm_start_kind(model_cls: type) -> str | None:
    """How a model class continues from the previous window: ``"state"``, ``"finetune"`` or ``None``.

    ``"state"``: it has ``load_state``/``save_state`` (``RollingLSTM``); ``"finetune"``: a
    concrete ``finetune(dataset)`` (Qlib's ``LGBModel``; its checkpoint is the pickled model);
    ``None``: it cannot be fine-tuned (Qlib's ``LSTM``), only trained from scratch.

    >>> class Plain:
    ...     def fit(self, dataset): ...
    >>> class Tunable(Plain):
    ...     def finetune(self, dataset): ...
    >>> warm_start_kind(Plain), warm_start_kind(Tunable)
    (None, 'finetune')
    """
    if callable(getattr(model_cls, "load_state", None)) and callable(getattr(model_cls, "save_state", None)):
        return "state"
    tune = getattr(model_cls, "finetune", None)
    if callable(tune) and not getattr(tune, "__isabstractmethod__", False):
        return "finetune"
    return None


def _accepts(cls: type, name: str) -> bool:
    acc = accepted_kwargs(cls)
    return name in acc.params or name in acc.consumed or acc.open_via is not None


def check_runner_contract(task: Mapping[str, Any], *, mode: str, label: str = "raw", stack_seeds: int = 1,
                          where: str = "task") -> None:
    """Check, before any training, everything :func:`train_window` relies on; ``ConfigError`` otherwise.

    * the model has ``fit`` and ``predict``; in ``mode="finetune"`` it can continue from the
      previous window (:func:`warm_start_kind`): a model that cannot is refused, named, with
      ``mode: scratch`` suggested;
    * the dataset has Qlib's ``prepare`` and takes ``segments``; its extra segments follow a rolled
      one (:func:`rolling_calib.qlib_adapter.zoo.extra_segment_rule`); the handler takes ``start_time``
      and ``end_time`` (:data:`HANDLER_REQUIRED_TIME_KWARGS`);
    * ``label`` is one of :data:`LABEL_SOURCES`; ``"learn"`` needs a ``DataHandlerLP`` handler;
    * ``stack_seeds > 1`` needs a model class the seed stack trains
      (:func:`rolling_calib.qlib_adapter.stacked.can_stack`: :class:`~rolling_calib.qlib_adapter.model.RollingLSTM`).
    """
    from qlib.data.dataset.handler import DataHandlerLP

    if label not in LABEL_SOURCES:
        raise ConfigError(f"{where}: rolling.label: expected one of {', '.join(LABEL_SOURCES)}, found {label!r}")
    model_cls = import_class(dict(task["model"]), "task.model", where)
    name = f"{model_cls.__module__}.{model_cls.__qualname__}"
    for method in ("fit", "predict"):
        if not callable(getattr(model_cls, method, None)):
            raise ConfigError(f"{where}: task.model: {name} has no {method}() method; the runner needs a Qlib model "
                              "with fit(dataset) and predict(dataset[, segment])")
    if mode == "finetune" and warm_start_kind(model_cls) is None:
        raise ConfigError(
            f"{where}: rolling.mode: finetune needs a model that continues from the previous window, but {name} "
            "has neither load_state/save_state nor finetune(dataset); set 'rolling: {mode: scratch}' to retrain "
            "it from scratch every window"
        )
    if stack_seeds > 1:
        from rolling_calib.qlib_adapter.stacked import can_stack

        if not can_stack(model_cls):
            raise ConfigError(
                f"{where}: rolling.stack_seeds: {stack_seeds} trains the seeds of a window as one stack, which needs a "
                f"model the seed stack can fit (rolling_calib's RollingLSTM); {name} has none: set stack_seeds: 1"
            )
    dataset_cls = import_class(dict(task["dataset"]), "task.dataset", where)
    dname = f"{dataset_cls.__module__}.{dataset_cls.__qualname__}"
    if not callable(getattr(dataset_cls, "prepare", None)):
        raise ConfigError(f"{where}: task.dataset: {dname} has no prepare(); the runner needs a Qlib dataset")
    if not _accepts(dataset_cls, "segments"):
        raise ConfigError(f"{where}: task.dataset: {dname} takes no 'segments' argument; the runner sets each "
                          "window's train/valid/test segments through it")
    extra_segment_rule(task["dataset"].get("kwargs", {}).get("segments") or {}, where)
    handler = task["dataset"].get("kwargs", {}).get("handler")
    if isinstance(handler, dict):
        handler_cls = import_class(handler, "task.dataset.kwargs.handler", where)
        hname = f"{handler_cls.__module__}.{handler_cls.__qualname__}"
        missing = [k for k in HANDLER_REQUIRED_TIME_KWARGS if not _accepts(handler_cls, k)]
        if missing:
            raise ConfigError(f"{where}: task.dataset.kwargs.handler: {hname} takes no {', '.join(missing)}; the runner "
                              f"sets {', '.join(HANDLER_REQUIRED_TIME_KWARGS)} (and fit_start_time/fit_end_time where "
                              "the handler takes them) for every window")
        if label == "learn" and not issubclass(handler_cls, DataHandlerLP):
            raise ConfigError(f"{where}: rolling.label: learn needs a DataHandlerLP handler (learn-processed labels); "
                              f"{hname} is not one: use label: raw")


def set_global_seeds(seed: int) -> dict[str, int]:
    """Seed Python's ``random``, NumPy's global generator and torch (CPU and CUDA); returns what was set."""
    import numpy as np
    import torch

    random.seed(int(seed))
    np.random.seed(int(seed))
    torch.manual_seed(int(seed))
    return {"random": int(seed), "numpy": int(seed), "torch": int(seed)}


def _test_labels(dataset: Any, label: str, segment: str = "test") -> pd.Series | pd.DataFrame:
    """Labels of the test (or another) segment through Qlib's dataset API (``DK_R`` raw or ``DK_L`` learn-processed)."""
    from qlib.data.dataset.handler import DataHandlerLP

    key = DataHandlerLP.DK_R if label == "raw" else DataHandlerLP.DK_L
    out = dataset.prepare(segment, col_set="label", data_key=key)
    if not isinstance(out, (pd.Series, pd.DataFrame)):  # a TSDatasetH sampler: the handler's frame instead
        seg = dataset.segments[segment]
        out = dataset.handler.fetch(slice(*seg), col_set="label", data_key=key)
    return out


#: Recorder methods Qlib's models call during fit (``LGBModel.fit``: ``R.log_metrics`` per boosting round).


@contextlib.contextmanager
def _no_recorder_logging():
    """Drop what a model logs to Qlib's recorder ``R`` while no Qlib experiment is active.

    Outside ``qrun`` there is no active recorder, and ``R.log_metrics`` would create a default
    MLflow experiment in ``./mlruns`` (a file store, which current MLflow refuses). A unit's
    numbers live in the result store; training curves are not kept. Under an active
    experiment (a user's ``R.start``), nothing is changed.
    """
    provider = recorder_provider()
    active = getattr(getattr(provider, "exp_manager", None), "active_experiment", None)
    if provider is None or active is not None:
        yield
        return
    for name in RECORDER_LOGGING:
        setattr(provider, name, lambda *args, **kwargs: None)
    provider.get_recorder = lambda *args, **kwargs: _NullRecorder()  # GRU.fit: R.get_recorder().log_metrics
    try:
        yield
    finally:
        for name in (*RECORDER_LOGGING, "get_recorder"):
            provider.__dict__.pop(name, None)


class _NullRecorder:
    """Stands in for Qlib's recorder while none is active: every logging call is dropped."""

    def __getattr__(self, name: str):
        if name in RECORDER_LOGGING:
            return lambda *args, **kwargs: None
        raise AttributeError(f"no Qlib experiment is active: the recorder has no {name!r} here")


def _finetune(model: Any, dataset: Any, reweighter: Any = None) -> None:
    """``model.finetune(dataset)`` (with ``reweighter`` where it takes one); for pyqlib 0.9.7's ``LGBModel`` (whose
    own always fails) the steps of Qlib's later fix (:func:`~rolling_calib.qlib_adapter.qlib_compat.lgb_finetune`)."""
    if lgb_finetune_broken(type(model)):
        lgb_finetune(model, dataset, reweighter)
        return
    takes = reweighter is not None and "reweighter" in inspect.signature(model.finetune).parameters
    model.finetune(dataset, **({"reweighter": reweighter} if takes else {}))


def _save_pickle(model: Any, path: Path) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            pickle.dump(model, fh, protocol=pickle.HIGHEST_PROTOCOL)

    atomic_write(path, write)


def train_window(
    qlib_init: Mapping[str, Any],
    task: Mapping[str, Any],
    *,
    warm_start: Path | None,
    checkpoint: Path,
    seed: int | None = None,
    label: str = "raw",
    recorder: RecorderSpec | None = None,
    threads: int | None = None,
    progress: UnitProgress | None = None,
    data: Mapping[str, Any] | None = None,
) -> TrainedWindow:
    """Build the task's model and dataset, fit (from ``warm_start`` if given), predict the test segment.

    Parameters
    ----------
    qlib_init : mapping
        ``qlib.init`` arguments (Qlib is initialised once per process).
    task : mapping
        One window's Qlib task (:func:`window_task`).
    warm_start : path or None
        Checkpoint of the previous window to fine-tune from (``model.load_state``, or the
        pickled model whose ``finetune(dataset)`` continues it).
    checkpoint : path
        Where the trained model is written (``model.save_state``, else pickled; atomic).
    seed : int, optional
        Seeds ``random``, NumPy and torch before the model is built (:func:`set_global_seeds`).
    label : {"raw", "learn"}
        Test labels from the handler's raw (``DK_R``) or learn-processed (``DK_L``) data.
    recorder : RecorderSpec, optional
        When given and the task has ``record`` templates, they run after the checkpoint is
        written, inside a Qlib recorder (:func:`rolling_calib.qlib_adapter.records.run_records`).
    threads : int, optional
        ``torch.set_num_threads(threads)`` before anything is built (every model; the model's own
        thread arguments are set by :func:`unit_task`).
    progress : UnitProgress, optional
        Told each stage and, while fitting, what the model reports (module docstring); None: nothing.
    data : mapping, optional
        The data identity of the store (:func:`rolling_calib.execution.store.data_identity`): given,
        the dataset comes through this process's cache (:mod:`rolling_calib.qlib_adapter.dataset_cache`:
        built once for the seeds of a window, the same numbers); None: built afresh.

    A model that loads a pretrained base network from a missing ``model_path`` (GATs, IGMTF:
    :func:`rolling_calib.qlib_adapter.zoo.pretrained_base`) first gets one trained here, on this
    window, with the same seed; it is saved beside the checkpoint (``wNN.base.pt``).
    """
    from qlib.utils import init_instance_by_config

    t0 = time.perf_counter()
    progress = progress or _silent
    progress("building")
    init_qlib_once(qlib_init)
    if threads is not None:
        set_unit_threads(threads)
    task, dataset, reused = _with_pretrained_base(task, checkpoint=Path(checkpoint), seed=seed, threads=threads,
                                                  progress=progress, qlib_init=qlib_init, data=data)
    scratch = _ScratchFiles(Path(checkpoint))
    seeding = set_global_seeds(seed) if seed is not None else {}
    model = init_instance_by_config(scratch.model_spec(task["model"]))
    if dataset is None:
        dataset, reused = prepared_dataset(task["dataset"], qlib_init=qlib_init, data=data, model=task["model"])
    t_built = time.perf_counter()
    kind = warm_start_kind(type(model))
    fit_kwargs = reweighter_kwargs(model, task)   # Qlib's trainer: fit(dataset, reweighter=...) where fit takes one
    with _no_recorder_logging(), scratch:
        model = _fit_window(model, dataset, warm_start=warm_start, kind=kind, scratch=scratch, progress=progress,
                            fit_kwargs=fit_kwargs)
        t_fit = time.perf_counter()
        progress("predicting")
        predictions, valid_predictions = _predict_segments(model, dataset)
    labels, valid_labels = _segment_labels(dataset, label)
    other, valid_other = _other_labels(dataset, label)
    t_pred = time.perf_counter()
    progress("saving")
    recorded = _keep(model, task, dataset, predictions, kind=kind, checkpoint=Path(checkpoint), recorder=recorder,
                     qlib_init=qlib_init)
    return TrainedWindow(predictions, labels, t_built - t0, t_fit - t_built, t_pred - t_fit, seeding, recorded,
                         valid_predictions=valid_predictions, valid_labels=valid_labels, other_labels=other,
                         valid_other_labels=valid_other, stopped_at=stopping_point(model), dataset_reused=reused,
                         fit_path=fit_path(model))


def reweighter_kwargs(model: Any, task: Mapping[str, Any]) -> dict[str, Any]:
    """``{"reweighter": ...}`` for ``model.fit`` when the task names one and ``fit`` takes it, else ``{}``.

    What Qlib's trainer does (``qlib.model.trainer._exe_task``: ``auto_filter_kwargs(model.fit)(dataset,
    reweighter=task.get("reweighter"))``); a YAML writes the reweighter as a class spec, built here
    (``init_instance_by_config``, a ``qlib.data.dataset.weight.Reweighter``).
    """
    spec = task.get("reweighter")
    if spec is None or "reweighter" not in inspect.signature(model.fit).parameters:
        return {}
    from qlib.data.dataset.weight import Reweighter
    from qlib.utils import init_instance_by_config

    return {"reweighter": init_instance_by_config(spec, accept_types=Reweighter)}


def _fit_window(model: Any, dataset: Any, *, warm_start: Path | None, kind: str | None, scratch: _ScratchFiles,
                progress: UnitProgress, fit_kwargs: Mapping[str, Any] | None = None) -> Any:
    """Fit ``model`` from scratch, or continue it from ``warm_start`` (``load_state`` + ``fit``, or ``finetune``); the fitted model.

    ``fit_kwargs``: passed to ``fit`` (and ``finetune`` where it takes them): the task's reweighter.
    """
    fit_kwargs = dict(fit_kwargs or {})
    if warm_start is None:
        progress("fitting")
        scratch.fit(model, dataset, progress=progress, **fit_kwargs)
    elif kind == "state":
        model.load_state(warm_start)
        progress("fitting")
        _fit_reported(model, dataset, progress, **fit_kwargs)
    elif kind == "finetune":
        with open(warm_start, "rb") as fh:
            model = pickle.load(fh)  # noqa: S301 -- our own checkpoint of the previous window
        progress("fine-tuning")
        _finetune(model, dataset, **fit_kwargs)
    else:
        raise RuntimeError(f"{type(model).__qualname__} cannot continue from {warm_start}: it has neither "
                           "load_state nor finetune (use rolling.mode: scratch)")
    return model


def _fit_reported(model: Any, dataset: Any, progress: UnitProgress, **kwargs: Any) -> None:
    """``model.fit(dataset, **kwargs)`` with its epochs told to ``progress`` (module docstring: how, per model)."""
    if progress is _silent:
        model.fit(dataset, **kwargs)
    elif "report" in inspect.signature(model.fit).parameters:
        model.fit(dataset, report=functools.partial(progress, "fitting"), **kwargs)
    else:
        with QlibEpochs.watching(functools.partial(progress, "fitting"), epochs=getattr(model, "n_epochs", None)):
            model.fit(dataset, **kwargs)


class QlibEpochs(logging.Handler):
    """Qlib's torch models' epochs, read from the record each logs when an epoch starts (``"Epoch%d:"``).

    LSTM, GRU, ALSTM, GATs, TCN, Transformer, ... call ``self.logger.info("Epoch%d:", step)`` (TRA:
    ``"Epoch %d:"``); this handler, on Qlib's ``qlib`` logger while such a model fits, turns each into
    ``report(epoch=step + 1, epochs=n_epochs)``. Qlib is not patched; its records still reach its own
    handlers (the unit's log). A ``logging_level`` above INFO creates no such record: then nothing is told.

    Examples
    --------
    >>> seen = []
    >>> log = logging.getLogger("qlib.SomeModel")
    >>> log.setLevel(logging.INFO)
    >>> with QlibEpochs.watching(lambda **kw: seen.append(kw), epochs=3):
    ...     log.info("Epoch%d:", 1)
    ...     log.info("training...")
    >>> seen
    [{'epoch': 2, 'epochs': 3}]
    """

    def __init__(self, report: Callable[..., None], epochs: int | None) -> None:
        super().__init__(level=logging.DEBUG)
        self.report, self.epochs = report, epochs

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if (epoch := logged_epoch(record)) is not None:
                self.report(epoch=epoch, epochs=self.epochs)
        except Exception:  # noqa: BLE001 -- progress never fails a unit: logging's own error path
            self.handleError(record)

    @classmethod
    @contextlib.contextmanager
    def watching(cls, report: Callable[..., None], *, epochs: int | None) -> Iterator[None]:
        """Watch Qlib's log records while the block runs."""
        handler, logger = cls(report, epochs), logging.getLogger("qlib")
        logger.addHandler(handler)
        try:
            yield
        finally:
            logger.removeHandler(handler)


def base_model_path(checkpoint: Path) -> Path:
    """Where a unit's pretrained base network is saved: beside its checkpoint (``wNN.base.pt``)."""
    return Path(checkpoint).with_name(Path(checkpoint).stem + ".base.pt")


def _with_pretrained_base(task: Mapping[str, Any], *, checkpoint: Path, seed: int | None,
                          threads: int | None, progress: UnitProgress = _silent, qlib_init: Mapping[str, Any],
                          data: Mapping[str, Any] | None = None) -> tuple[Mapping[str, Any], Any, bool]:
    """``task`` with ``model_path`` pointing at a base network pretrained on this window, where it needs one.

    Returns ``(task, dataset, reused)``: the dataset the pretraining used (the unit's model uses the
    same one; through the cache as in :func:`train_window`), or ``None`` when nothing was pretrained.
    """
    base = pretrained_base(task)
    if base is None:
        return task, None, False
    path = base_model_path(checkpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    progress("pretraining base")
    set_global_seeds(seed if seed is not None else 0)
    dataset, reused = prepared_dataset(task["dataset"], qlib_init=qlib_init, data=data, model=task["model"])
    with _no_recorder_logging():
        pretrain_base(base, dataset, seed=seed if seed is not None else 0, threads=threads or 1, path=path)
    out = copy.deepcopy(dict(task))
    out["model"].setdefault("kwargs", {})["model_path"] = str(path)
    return out, dataset, reused


class _ScratchFiles:
    """Files a Qlib model writes for itself during ``fit``, put beside the unit's checkpoint instead of ``~/tmp``.

    Qlib's torch models save their best parameters to ``fit(save_path=None)`` (a new file in
    ``~/tmp``); TabNet also its pretrained network to ``pretrain_file``. Here they go to
    ``.wNN.<name>.tmp`` beside the checkpoint (same content, so the same numbers) and are removed
    when the fit ends (a killed run's leftovers are swept as orphan temporaries).
    """

    def __init__(self, checkpoint: Path) -> None:
        self._checkpoint, self._paths = checkpoint, []

    def _path(self, name: str) -> str:
        path = self._checkpoint.with_name(f".{self._checkpoint.stem}.{name}.tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        self._paths.append(path)
        return str(path)

    def model_spec(self, spec: Mapping[str, Any]) -> dict:
        """The model spec with every unset self-written file argument pointed beside the checkpoint."""
        out = copy.deepcopy(dict(spec))
        kwargs = out.setdefault("kwargs", {})
        for name in saved_params(import_class(out, "task.model", "train_window")):
            if kwargs.get(name) is None:
                kwargs[name] = self._path(name)
        return out

    def fit(self, model: Any, dataset: Any, *, progress: UnitProgress = _silent, **kwargs: Any) -> None:
        """``model.fit(dataset, **kwargs)``, with ``save_path`` beside the checkpoint where ``fit`` takes one (epochs
        told to ``progress``)."""
        if "save_path" in inspect.signature(model.fit).parameters:
            _fit_reported(model, dataset, progress, save_path=self._path("fit"), **kwargs)
        else:
            _fit_reported(model, dataset, progress, **kwargs)

    def __enter__(self) -> _ScratchFiles:
        return self

    def __exit__(self, *exc: Any) -> None:
        for path in self._paths:
            Path(path).unlink(missing_ok=True)


def _predict_segments(model: Any, dataset: Any) -> tuple[Any, Any]:
    """Test predictions, and the valid segment's when the dataset has one (``source: validation`` calibrates with them).

    Each through :func:`rolling_calib.qlib_adapter.zoo.predict_segment`: as ``qrun`` calls the model.
    """
    has_valid = "valid" in (getattr(dataset, "segments", None) or {})
    return (predict_segment(model, dataset, "test"),
            predict_segment(model, dataset, "valid") if has_valid else None)


def _segment_labels(dataset: Any, label: str) -> tuple[Any, Any]:
    """Test labels, and the valid segment's when the dataset has one (:func:`_test_labels`)."""
    has_valid = "valid" in (getattr(dataset, "segments", None) or {})
    return _test_labels(dataset, label), _test_labels(dataset, label, "valid") if has_valid else None


def _other_labels(dataset: Any, label: str) -> tuple[Any, Any]:
    """The labels of the other kind (:func:`_segment_labels`), or ``(None, None)`` when the handler has one kind only."""
    from qlib.data.dataset.handler import DataHandlerLP

    if not isinstance(getattr(dataset, "handler", None), DataHandlerLP):
        return None, None
    return _segment_labels(dataset, "learn" if label == "raw" else "raw")


def _keep(model: Any, task: Mapping[str, Any], dataset: Any, predictions: Any, *, kind: str | None, checkpoint: Path,
          recorder: RecorderSpec | None, qlib_init: Mapping[str, Any]) -> dict | None:
    """Write the checkpoint (``save_state``, else the pickled model; atomic), then run the task's records, if any."""
    if kind == "state":
        model.save_state(checkpoint)
    else:
        _save_pickle(model, checkpoint)
    if recorder is None or not unit_records(task):
        return None
    return run_records(recorder, task, model=model, dataset=dataset, predictions=predictions,
                       qlib_init=qlib_init, freq=store_freq(qlib_init))


def train_window_stack(
    qlib_init: Mapping[str, Any],
    tasks: Sequence[Mapping[str, Any]],
    *,
    warm_starts: Sequence[Path | None],
    checkpoints: Sequence[Path],
    seeds: Sequence[int],
    label: str = "raw",
    recorders: Sequence[RecorderSpec | None] | None = None,
    threads: int | None = None,
    progress: UnitProgress | None = None,
) -> list[TrainedWindow]:
    """:func:`train_window` for several seeds of one window, their models fitted as one seed stack.

    The tasks differ only in the model's seed. One dataset is built for all of them; each
    seed's model is built under its own global seeds (and loads its own warm start), then the
    seed stack trains them together (:func:`rolling_calib.qlib_adapter.stacked.fit_stack`);
    predictions, labels, checkpoints and
    records follow per seed exactly as in :func:`train_window`. ``build_s`` and ``fit_s`` of
    every returned window are the stack's (shared) times. ``progress`` is told the stack's stages
    and its epochs (and batches of long epochs), as in :func:`train_window`.
    """
    from qlib.utils import init_instance_by_config

    from rolling_calib.qlib_adapter.stacked import fit_stack

    n = len(tasks)
    if not n or not (len(warm_starts) == len(checkpoints) == len(seeds) == n):
        raise ValueError(f"train_window_stack: expected as many warm starts, checkpoints and seeds as tasks ({n})")
    if any(task["dataset"] != tasks[0]["dataset"] for task in tasks):
        raise ValueError("train_window_stack: the tasks of a seed stack must share one dataset (only the seed may differ)")
    recorders = list(recorders) if recorders is not None else [None] * n
    t0 = time.perf_counter()
    progress = progress or _silent
    progress("building")
    init_qlib_once(qlib_init)
    if threads is not None:
        set_unit_threads(threads)
    models, seedings = [], []
    for task, seed, warm_start in zip(tasks, seeds, warm_starts):
        seedings.append(set_global_seeds(seed))
        model = init_instance_by_config(copy.deepcopy(dict(task["model"])))
        if warm_start is not None:
            model.load_state(warm_start)
        models.append(model)
    dataset = init_instance_by_config(copy.deepcopy(dict(tasks[0]["dataset"])))
    t_built = time.perf_counter()
    progress("fitting")
    with _no_recorder_logging():
        fit_stack(models, dataset, report=None if progress is _silent else functools.partial(progress, "fitting"))
    t_fit = time.perf_counter()
    progress("predicting")
    labels, valid_labels = _segment_labels(dataset, label)
    other, valid_other = _other_labels(dataset, label)
    out = []
    for task, model, checkpoint, seeding, recorder in zip(tasks, models, checkpoints, seedings, recorders):
        t_pred0 = time.perf_counter()
        with _no_recorder_logging():
            predictions, valid_predictions = _predict_segments(model, dataset)
        t_pred = time.perf_counter()
        recorded = _keep(model, task, dataset, predictions, kind="state", checkpoint=Path(checkpoint), recorder=recorder,
                         qlib_init=qlib_init)
        out.append(TrainedWindow(predictions, labels, t_built - t0, t_fit - t_built, t_pred - t_pred0, seeding,
                                 recorded, valid_predictions=valid_predictions, valid_labels=valid_labels,
                                 other_labels=other, valid_other_labels=valid_other, fit_path=fit_path(model)))
    return out
