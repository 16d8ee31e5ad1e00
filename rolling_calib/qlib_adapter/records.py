"""Qlib's records and recorder for one unit: the task's ``record`` templates inside ``R.start``.

What ``qrun`` does after ``model.fit`` (``qlib.model.trainer._exe_task``), per unit of the rolling
schedule: one Qlib recorder (an MLflow run) per unit, in an experiment named after the pipeline,
the run named after the unit (``lr10__seed0__w01``)::

    with R.start(experiment_name=pipeline, recorder_name=unit):
        R.set_tags(unit=..., pipeline=..., seed=..., window=..., config_hash=...)
        R.log_params(model and dataset settings); R.save_objects(**{"params.pkl": model})
        for record in fill_placeholder(task["record"], {"<MODEL>": model, "<DATASET>": dataset}):
            init_instance_by_config(record, recorder=R.get_recorder(), ...).generate()

so ``R.get_recorder(recorder_id=..., experiment_name=pipeline).load_object("pred.pkl")`` (and
``"label.pkl"``, ``"sig_analysis/ic.pkl"``, ...) work on our runs; the recorder id is in the unit's
sidecar. ``SignalRecord`` gets the predictions the runner already made (the model is not asked
to predict the test segment twice), so ``pred.pkl`` equals the store's ``prediction`` column.

Decisions
---------
* **Where**: ``sqlite:///STORE/mlflow.db`` (the database ``rolling-calib`` tracking logs into), with
  artifacts in ``STORE/mlartifacts``. When the workflow's ``qlib_init`` names its own
  ``exp_manager``, Qlib's recorder is used as configured. Otherwise Qlib's default (a ``./mlruns``
  file store, which MLflow 3 refuses) is replaced by ``MLflowExpManager`` on the SQLite URI.
* **Concurrency**: units run in parallel processes; every recorder write (from ``R.start`` to
  its end, experiment creation included) holds an exclusive ``flock`` on ``<db>.lock`` -- the
  lock the tracking layer takes -- so one process writes the SQLite database at a time
  (MLflow's schema creation and SQLite's writer lock are not safe to race). Training runs
  outside the lock.
* **Daily stores only**: Qlib's record templates are daily tools (``SigAnaRecord``'s daily IC with
  ``ann_scaler: 252``, ``PortAnaRecord``'s day-step backtest); on a minute store they are not run
  and the sidecar says so (the predictions are in the result store; ``compare`` scores them).
* **PortAnaRecord (and its subclasses, ``MultiPassPortAnaRecord``) is not run per unit**: one
  window of one seed is not what a Qlib user compares. As Qlib's own rolling does
  (``qlib.contrib.rolling.base.Rolling``: the records run on the joined predictions), the backtest
  runs once per seed over the joined windows, with the dates of the schedule
  (:mod:`rolling_calib.execution.backtests`, :mod:`rolling_calib.qlib_adapter.backtest`);
  :func:`unit_records` are the records a unit runs.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rolling_calib.core.file_lock import exclusive_file_lock, lock_holder
from rolling_calib.core.store_layout import ARTIFACTS_NOTE, StoreLayout, db_lock_path
from rolling_calib.qlib_adapter.qlib_compat import recorder_provider

__all__ = ["RecorderSpec", "record_configs", "run_records", "store_recorder_uri", "unit_records"]

_LOG = logging.getLogger(__name__)
_DEFAULT_MODULE = "qlib.workflow.record_temp"


@dataclass(frozen=True)
class RecorderSpec:
    """Where and as what one unit's Qlib recorder is written.

    Attributes
    ----------
    store : Path
        The result store (``mlflow.db`` and ``mlartifacts/`` go there by default).
    experiment_name : str
        The pipeline.
    recorder_name : str
        The unit (``UnitKey.slug()``: ``lr10__seed0__w01``).
    tags : dict
        Set on the recorder (unit, pipeline, seed, window, config hash).
    """

    store: Path
    experiment_name: str
    recorder_name: str
    tags: dict = field(default_factory=dict)

    @property
    def uri(self) -> str:
        return store_recorder_uri(self.store)

    @property
    def database(self) -> Path:
        return StoreLayout(Path(self.store)).tracking_db


def store_recorder_uri(store: str | os.PathLike) -> str:
    """``sqlite:///STORE/mlflow.db`` (absolute path)."""
    return StoreLayout(Path(store)).tracking_uri


def record_configs(task: Mapping[str, Any]) -> list[dict]:
    """The task's ``record`` templates as a list (Qlib accepts one mapping too)."""
    records = task.get("record") or []
    return [records] if isinstance(records, Mapping) else [dict(r) for r in records]


def unit_records(task: Mapping[str, Any]) -> list[dict]:
    """The record templates a unit runs: the task's, without its backtest (run once per seed over the joined windows).

    >>> [r["class"] for r in unit_records({"record": [{"class": "SignalRecord"}, {"class": "PortAnaRecord"}]})]
    ['SignalRecord']
    """
    return [c for c in record_configs(task) if not _is_backtest(c)]


def _class_name(config: Mapping[str, Any] | Any) -> str:
    if isinstance(config, Mapping):
        return str(config.get("class", "?"))
    return type(config).__name__


def _is_backtest(config: Mapping[str, Any]) -> bool:
    """Whether a record template is Qlib's backtest: ``PortAnaRecord`` or a subclass (``MultiPassPortAnaRecord``)."""
    from qlib.utils import get_callable_kwargs
    from qlib.workflow.record_temp import PortAnaRecord

    if _class_name(config) == "PortAnaRecord":
        return True
    try:
        cls, _ = get_callable_kwargs(dict(config), default_module=_DEFAULT_MODULE)
    except (AttributeError, ImportError, ValueError, TypeError):
        return False
    return isinstance(cls, type) and issubclass(cls, PortAnaRecord)


@contextlib.contextmanager
def _db_lock(db: Path, *, timeout: float = 600.0) -> Iterator[None]:
    """Exclusive ``flock`` on ``<db>.lock`` (the lock :mod:`rolling_calib.tracking.sqlite_db` takes)."""
    lock = db_lock_path(db)

    def busy() -> TimeoutError:
        holder = lock_holder(lock)
        return TimeoutError(f"{db}: another process held the tracking database's lock for {timeout:.0f} s"
                            + (f" ({holder})" if holder else ""))

    def waiting(holder: str) -> None:  # into the unit's log: who it waits for, and for how long
        print(f"{db} is locked by {holder or 'another process'}; waiting up to {timeout:.0f} s", file=sys.stderr,
              flush=True)

    with exclusive_file_lock(lock, timeout=timeout, busy=busy, waiting=waiting):
        yield


def _exp_manager(qlib_init: Mapping[str, Any], spec: RecorderSpec):
    """Qlib's experiment manager for this unit; ``(manager, owned)`` -- owned: ours on the store's SQLite."""
    from qlib.workflow import QlibRecorder, R
    from qlib.workflow.expm import MLflowExpManager

    if qlib_init.get("exp_manager"):  # the workflow's own choice, registered by qlib.init
        return recorder_provider().exp_manager, False
    current = getattr(recorder_provider(), "exp_manager", None)  # None before anything is registered
    if not (isinstance(current, MLflowExpManager) and current.default_uri == spec.uri):
        R.register(QlibRecorder(MLflowExpManager(uri=spec.uri, default_exp_name=spec.experiment_name)))
    return recorder_provider().exp_manager, True


def _ensure_experiment(manager, spec: RecorderSpec) -> None:
    """Create the pipeline's experiment with its artifacts in ``STORE/mlartifacts`` (not ``./mlruns``)."""
    client = manager.client
    if client.get_experiment_by_name(spec.experiment_name) is None:
        experiment_id = client.create_experiment(spec.experiment_name,
                                                 artifact_location=StoreLayout(Path(spec.store)).artifact_uri)
        client.set_experiment_tag(experiment_id, "mlflow.note.content", ARTIFACTS_NOTE)   # its description in the UI


class _Predicted:
    """The trained model, whose ``predict(dataset, "test")`` returns the predictions already made."""

    def __init__(self, model: Any, dataset: Any, predictions: Any):
        self._model, self._dataset, self._predictions = model, dataset, predictions

    @property
    def __class__(self):  # isinstance checks and messages see the model's class
        return type(self._model)

    def predict(self, dataset: Any, segment: Any = "test", **kwargs):
        if dataset is self._dataset and segment == "test" and not kwargs:
            return self._predictions.copy()
        if isinstance(segment, str) and not kwargs:  # as qrun calls it (Qlib's _ts models take no segment)
            from rolling_calib.qlib_adapter.zoo import predict_segment

            return predict_segment(self._model, dataset, segment)
        return self._model.predict(dataset, segment=segment, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._model, name)


def run_records(
    spec: RecorderSpec,
    task: Mapping[str, Any],
    *,
    model: Any,
    dataset: Any,
    predictions: Any,
    qlib_init: Mapping[str, Any],
    freq: str,
) -> dict:
    """Run the task's record templates for one unit inside a Qlib recorder; returns the sidecar entry.

    The records are :func:`unit_records` (the backtest runs once per seed, not here); a failing
    record fails the unit. The entry: ``experiment_name``, ``experiment_id``, ``recorder_id``,
    ``recorder_name``, ``uri``, ``records`` (classes generated), ``skipped`` (empty), ``metrics``
    (what the records logged: ``IC``, ``Rank IC``, ...) and ``seconds``. On a minute store nothing
    runs and the entry is ``{"skipped": [...], "records": []}`` with the reason.
    """
    from qlib.utils import fill_placeholder, flatten_dict, init_instance_by_config
    from qlib.workflow import R

    t0 = time.perf_counter()
    configs = unit_records(task)
    if freq != "day":
        reason = (f"not run on a {freq} store: Qlib's record templates are daily tools; the predictions are in the "
                  "result store")
        return {"records": [], "skipped": [{"class": _class_name(c), "reason": reason} for c in configs]}
    manager, owned = _exp_manager(qlib_init, spec)
    proxy = _Predicted(model, dataset, predictions)
    done: list[str] = []
    skipped: list[dict] = []
    lock = _db_lock(spec.database) if owned else contextlib.nullcontext()
    with lock:
        if owned:
            _ensure_experiment(manager, spec)
        with R.start(experiment_name=spec.experiment_name, recorder_name=spec.recorder_name):
            rec = R.get_recorder()
            R.set_tags(**{k: str(v) for k, v in spec.tags.items()})
            params = flatten_dict({"model": task["model"], "dataset": {"class": task["dataset"].get("class"),
                                                                        "segments": task["dataset"]["kwargs"].get("segments")}})
            R.log_params(**{k: str(v)[:500] for k, v in params.items()})
            R.save_objects(**{"params.pkl": model})
            for config in fill_placeholder(copy.deepcopy(configs), {"<MODEL>": proxy, "<DATASET>": dataset}):
                record = init_instance_by_config(config, recorder=rec, default_module=_DEFAULT_MODULE,
                                                 try_kwargs={"model": proxy, "dataset": dataset})
                record.generate()
                done.append(_class_name(config))
        # after R.start ends: Qlib logs metrics asynchronously and flushes them when the run ends
        metrics = {k: float(v) for k, v in rec.list_metrics().items()}
        out = {"experiment_name": spec.experiment_name, "experiment_id": str(rec.experiment_id),
               "recorder_id": rec.id, "recorder_name": spec.recorder_name, "uri": manager.uri}
    out.update(records=done, skipped=skipped, metrics=metrics, seconds=round(time.perf_counter() - t0, 3))
    return out
