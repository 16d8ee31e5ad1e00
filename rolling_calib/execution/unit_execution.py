"""Unit execution: train one unit (or one seed stack) with Qlib and write it into the store.

A *unit* is one window of one seed of one pipeline; :func:`execute_unit` trains it with Qlib's
own machinery (:func:`rolling_calib.qlib_adapter.training.train_window`) and writes it::

    task   = the pipeline's Qlib task with this window's dates (and seed, where the model takes one)
    random / numpy / torch global seeds = the unit's seed (recorded in the sidecar)
    model  = init_instance_by_config(task["model"])      # RollingLSTM, Qlib's LGBModel, LSTM, ...
    data   = init_instance_by_config(task["dataset"])    # MinuteTSDataset, DatasetH(Alpha158), ...
    fine-tune mode, window k >= 1: model.load_state(checkpoint k-1), or finetune() of the pickled model k-1
    model.fit(data); p = model.predict(data, "test")
    y = data.prepare("test", col_set="label", data_key=DK_R)   # DK_L with rolling.label: learn
    y' = the other kind (DK_L / DK_R), kept as column label_learn / label_raw where it differs from y
    write units/<pipeline>/seed<k>/w<NN>.parquet, checkpoint, sidecar (atomically, sidecar last)

Everything here runs in a worker process (local pool or Ray); the library output of a unit goes
to its log file (:mod:`rolling_calib.execution.unit_log`). Which units run, and when:
:mod:`rolling_calib.execution.runner`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rolling_calib.core.schedule import CoverageError, Window
from rolling_calib.core.store_layout import StoreLayout
from rolling_calib.execution import store as st
from rolling_calib.execution.manifest import DataRecord
from rolling_calib.execution.planning import RunPlan, current_data, data_signature_now
from rolling_calib.execution.progress import unit_reporter
from rolling_calib.execution.unit_log import attach_log, unit_log
from rolling_calib.execution.units import StackKey, UnitKey, WindowKey
from rolling_calib.qlib_adapter.records import RecorderSpec
from rolling_calib.qlib_adapter.training import base_model_path, train_window, train_window_stack, unit_task
from rolling_calib.qlib_adapter.zoo import pretrained_base

__all__ = ["UnitResult", "execute_unit", "execute_stack", "execute_window", "execute"]


@dataclass(frozen=True)
class UnitResult:
    """What a worker reports back for one unit (small; the data is in the store)."""

    key: UnitKey
    rows: int
    seconds: float
    ql: float
    dropped: int = 0  # predictions without a finite label (not stored), counted
    #: The data the unit read was not the plan's (the data changed during the run), or changed while it trained.
    other_data: bool = False


@dataclass(frozen=True)
class _DataRead:
    """The data a unit read: its identity when training started, and whether its files changed until it ended."""

    identity: dict
    signature: str
    started_at: str
    changed: bool = False

    @classmethod
    def start(cls, plan: RunPlan) -> _DataRead:
        signature, identity = current_data(plan)
        return cls(identity, signature, pd.Timestamp.now(tz="UTC").isoformat())

    def end(self, plan: RunPlan) -> _DataRead:
        """The same, told whether the files changed while the unit trained (their signature again: no file read)."""
        return dataclasses.replace(self, changed=data_signature_now(plan) != self.signature)

    def differs(self, plan: RunPlan) -> bool:
        """Whether the unit's data is not the plan's (other content, or changed while it trained)."""
        return self.changed or any(self.identity.get(k) != plan.data.get(k) for k in DataRecord.CONTENT)



def _sha256(path: Path) -> str:
    """The sidecar's short checksum of a checkpoint (the first 16 hex digits of its SHA-256)."""
    return st.file_sha256(path)[:16]


def _unit_frame(pred: pd.Series | pd.DataFrame, label: pd.Series | pd.DataFrame, window: Window, key: UnitKey) -> tuple[pd.DataFrame, int]:
    """Join predictions and labels into the unit's table; returns it and the rows dropped."""
    if isinstance(pred, pd.DataFrame):
        pred = pred.iloc[:, 0]
    if isinstance(label, pd.DataFrame):
        label = label.iloc[:, 0]
    joined = pd.concat({"prediction": pred.astype("float64"), "label": label.astype("float64")}, axis=1, join="inner")
    names = list(joined.index.names)
    if "datetime" not in names or "instrument" not in names:
        raise ValueError(f"unit {key.slug()}: expected predictions indexed by (datetime, instrument), found {names}")
    frame = joined.reset_index()[list(st.UNIT_COLUMNS)]
    frame["datetime"] = pd.to_datetime(frame["datetime"])
    frame["instrument"] = frame["instrument"].astype(str)
    n_before = len(pred)
    bad_pred = ~np.isfinite(frame["prediction"].to_numpy())
    if bad_pred.any():
        raise ValueError(f"unit {key.slug()}: model returned {int(bad_pred.sum())} non-finite predictions")
    frame = frame[np.isfinite(frame["label"].to_numpy())]
    outside = ~window.test.contains(frame["datetime"])
    if outside.any():
        raise CoverageError(
            f"unit {key.slug()}: {int(outside.sum())} predictions outside the test segment {window.test.as_tuple()}"
        )
    frame = frame.sort_values(["datetime", "instrument"], kind="mergesort").reset_index(drop=True)
    if frame.duplicated(["datetime", "instrument"]).any():
        raise CoverageError(f"unit {key.slug()}: duplicate (datetime, instrument) predictions")
    if frame.empty:
        raise CoverageError(f"unit {key.slug()}: no labelled predictions in test segment {window.test.as_tuple()}")
    return frame, n_before - len(frame)


def _valid_frame(trained: Any, window: Window, key: UnitKey) -> pd.DataFrame | None:
    """The validation predictions as a unit table (columns :data:`~rolling_calib.execution.store.UNIT_COLUMNS`), or None."""
    if trained.valid_predictions is None or trained.valid_labels is None or window.valid is None:
        return None
    try:
        frame, _ = _unit_frame(trained.valid_predictions, trained.valid_labels,
                               dataclasses.replace(window, test=window.valid), key)
    except CoverageError as exc:
        raise CoverageError(f"{exc} (validation segment)") from exc
    return frame


def execute_unit(plan: RunPlan, key: UnitKey, *, report: Any = None) -> UnitResult:
    """Train, predict and store one unit; safe to call in any worker process.

    Parameters
    ----------
    plan : RunPlan
    key : UnitKey
    report : UnitProgress, optional
        Where the unit reports (default: its own reporter, :func:`~rolling_calib.execution.progress.unit_reporter`).

    Returns
    -------
    UnitResult
        Rows written, wall seconds and the unit's plain quadratic loss.

    Notes
    -----
    ``functools.partial(execute_unit, plan)`` is the picklable ``work`` callable that
    executors (local pool, Ray) receive. Qlib is initialised once per process.
    """
    t0 = time.perf_counter()
    if report is None:
        report = unit_reporter(key)  # None unless the run draws the units' lines (rolling_calib.execution.progress)
    paths = st.unit_paths(plan.store, key)
    warm_start, start_from = _warm_start(plan, key)
    task, applied = unit_task(plan.pipeline(key.pipeline).task, plan.windows[key.window], seed=key.seed,
                              n_threads=plan.n_threads)
    read = _DataRead.start(plan)   # the data as this unit reads it (a data set is cached under its identity)
    try:
        with unit_log(paths.log), _checkpoint_writes(paths.checkpoint):
            trained = train_window(plan.qlib_init, task, warm_start=warm_start, checkpoint=paths.checkpoint,
                                   seed=key.seed, label=plan.label, recorder=_recorder_spec(plan, key),
                                   threads=plan.n_threads, progress=report, data=read.identity)
    except st.StoreWriteError:
        raise   # one line naming the file already: the library output is beside the point
    except Exception as exc:
        raise attach_log(exc, paths.log)
    if report is not None:
        report("writing")
    return _store_unit(plan, key, task=task, trained=trained, start_from=start_from, t0=t0, applied=applied,
                       read=read.end(plan))


def execute_stack(plan: RunPlan, stack: StackKey) -> tuple[UnitResult, ...]:
    """Train the seeds of ``stack`` as one seed stack and store one unit per seed (as :func:`execute_unit`).

    Each unit's sidecar records the stack (``seed_stack``); the stack's build and fit times are
    shared by its units (recorded in each sidecar, marked as the stack's); each returned
    result's ``seconds`` is its share of the stack's time, so the run's unit seconds add up.
    """
    t0 = time.perf_counter()
    report = unit_reporter(stack)
    keys = stack.units()
    starts = [_warm_start(plan, key) for key in keys]
    units = [unit_task(plan.pipeline(key.pipeline).task, plan.windows[key.window], seed=key.seed,
                       n_threads=plan.n_threads) for key in keys]
    log = st.unit_paths(plan.store, keys[0]).log  # the stack's output: one log, beside its first unit
    read = _DataRead.start(plan)
    try:
        with unit_log(log), _checkpoint_writes(st.unit_paths(plan.store, keys[0]).checkpoint):
            trained = train_window_stack(
                plan.qlib_init, [task for task, _ in units],
                warm_starts=[warm for warm, _ in starts],
                checkpoints=[st.unit_paths(plan.store, key).checkpoint for key in keys],
                seeds=list(stack.seeds),
                label=plan.label,
                recorders=[_recorder_spec(plan, key) for key in keys],
                threads=plan.n_threads,
                progress=report,
            )
    except st.StoreWriteError:
        raise
    except Exception as exc:
        raise attach_log(exc, log)
    if report is not None:
        report("writing")
    read = read.end(plan)
    results = [_store_unit(plan, key, task=task, trained=one, start_from=start_from, t0=t0, seed_stack=stack.seeds,
                           applied=applied, log=log, read=read)
               for key, (task, applied), one, (_, start_from) in zip(keys, units, trained, starts)]
    return _split_time(results, time.perf_counter() - t0)


@contextlib.contextmanager
def _checkpoint_writes(checkpoint: Path) -> Iterator[None]:
    """Turn a full or read-only file system met while training (writing ``checkpoint``) into one line naming the file.

    Other errors pass unchanged (a data file that cannot be read is not a full disk).
    """
    try:
        yield
    except OSError as exc:
        named = Path(exc.filename) if exc.filename else None   # a temporary file of an atomic write: its target
        failure = st.write_failure(exc, named if named is not None and not named.name.endswith(".tmp") else checkpoint)
        if failure is None:
            raise
        raise failure from exc


def _split_time(results: Sequence[UnitResult], seconds: float) -> tuple[UnitResult, ...]:
    """``results`` with ``seconds`` shared equally among them (a stack's units: their times sum to the stack's).

    >>> parts = _split_time([UnitResult(UnitKey("p", s, 0), rows=1, seconds=5.0, ql=0.0) for s in (0, 1)], 6.0)
    >>> [r.seconds for r in parts]
    [3.0, 3.0]
    """
    return tuple(dataclasses.replace(result, seconds=seconds / len(results)) for result in results)


def execute_window(plan: RunPlan, key: WindowKey) -> tuple[UnitResult, ...]:
    """Train the seeds of ``key`` one after another in this process, each as :func:`execute_unit` (the same numbers).

    They share the window's data set (built by the first, reused by the others:
    :mod:`rolling_calib.qlib_adapter.dataset_cache`). Each unit is written as it finishes: a
    seed that fails leaves the seeds before it complete in the store.
    """
    report = unit_reporter(key)
    out = []
    for unit in key.units():
        seed_report = None if report is None else _seed_reporter(report, unit.seed)
        out.append(execute_unit(plan, unit, report=seed_report))
    return tuple(out)


def _seed_reporter(report: Any, seed: int) -> Any:
    """``report`` with each stage prefixed by the seed it is about (the units of a :class:`WindowKey` share a line)."""
    def seed_report(stage: str, **kwargs: Any) -> None:
        report(f"seed {seed} {stage}", **kwargs)
    return seed_report


def execute(plan: RunPlan, key: UnitKey | StackKey | WindowKey) -> UnitResult | tuple[UnitResult, ...]:
    """The executors' ``work``: one unit, one seed stack, or a window's seeds one after another."""
    if isinstance(key, StackKey):
        return execute_stack(plan, key)
    if isinstance(key, WindowKey):
        return execute_window(plan, key)
    return execute_unit(plan, key)


def _recorder_spec(plan: RunPlan, key: UnitKey) -> RecorderSpec:
    return RecorderSpec(plan.store, experiment_name=key.pipeline, recorder_name=key.slug(),
                        tags={"unit": key.slug(), "pipeline": key.pipeline, "seed": key.seed, "window": key.window,
                              "config_hash": plan.pipeline(key.pipeline).config_hash})


def _store_unit(plan: RunPlan, key: UnitKey, *, task: dict, trained: Any, start_from: dict | None, t0: float,
                applied: dict, read: _DataRead, seed_stack: tuple[int, ...] | None = None, log: Path | None = None
                ) -> UnitResult:
    """Write one trained unit (predictions, validation predictions, sidecar last); its result.

    The sidecar records the data the unit read (``data``, its content fingerprint; and
    ``data_changed_while_training`` when its files changed before the unit ended) and when its
    training started (``started_at``; ``finished_at`` when it was written).
    """
    window = plan.windows[key.window]
    paths = st.unit_paths(plan.store, key)
    t_start = time.perf_counter()
    frame, dropped = _unit_frame(trained.predictions, trained.labels, window, key)
    valid = _valid_frame(trained, window, key)
    frame, valid, label_columns = _with_other_label(plan.label, trained, frame, valid, key)
    checksums = st.write_unit_parquet(paths.parquet, frame).fields()
    if valid is not None:
        checksums.update(st.write_unit_parquet(paths.valid_parquet, valid).fields(prefix="valid_"))
    elif paths.valid_parquet.exists():  # a former run's file: not this unit's
        paths.valid_parquet.unlink()
    residual = frame["label"].to_numpy() - frame["prediction"].to_numpy()
    ql = float(np.mean(residual**2))
    t_end = time.perf_counter()
    timings = {
        "build_s": round(trained.build_s, 3),
        "fit_s": round(trained.fit_s, 3),
        "predict_s": round(trained.predict_s, 3),
        "write_s": round(t_end - t_start, 3),
        "total_s": round(t_end - t0, 3),
        "dataset": "reused" if getattr(trained, "dataset_reused", False) else "built",
    }
    if seed_stack is not None:
        timings["shared_by_stack"] = ["build_s", "fit_s", "total_s"]
    sidecar = _sidecar(plan, key, task=task, trained=trained, frame=frame, dropped=dropped, valid=valid, ql=ql,
                       start_from=start_from, timings=timings, applied=applied, log=log or paths.log)
    sidecar["started_at"] = read.started_at
    sidecar["data"] = read.identity
    if read.changed:
        sidecar["data_changed_while_training"] = True
    sidecar["label_columns"] = label_columns
    sidecar.update(checksums)  # XXH3-128 and SHA-256 of the Parquet bytes: reads verify the XXH3, run's status both
    sidecar["labels"] = {kind: lab.to_dict() for kind, lab in plan.pipeline(key.pipeline).labels.items()}
    if seed_stack is not None:
        sidecar["seed_stack"] = list(seed_stack)
    st.atomic_write_json(paths.sidecar, sidecar)  # last: marks the unit complete
    return UnitResult(key=key, rows=int(len(frame)), seconds=t_end - t0, ql=ql, dropped=int(dropped),
                      other_data=read.differs(plan))


def _aligned_labels(labels: Any, frame: pd.DataFrame, key: UnitKey) -> np.ndarray:
    """``labels`` (indexed by datetime and instrument) at the rows of ``frame``; NaN where a row has none."""
    if isinstance(labels, pd.DataFrame):
        labels = labels.iloc[:, 0]
    index = labels.index
    if "datetime" not in index.names or "instrument" not in index.names:
        raise ValueError(f"unit {key.slug()}: expected labels indexed by (datetime, instrument), found {list(index.names)}")
    values = labels.to_numpy(dtype="float64", copy=True)
    values[~np.isfinite(values)] = np.nan
    keyed = pd.Series(values, index=pd.MultiIndex.from_arrays(
        [pd.to_datetime(index.get_level_values("datetime")), index.get_level_values("instrument").astype(str)]))
    if keyed.index.has_duplicates:
        raise CoverageError(f"unit {key.slug()}: duplicate (datetime, instrument) labels")
    return keyed.reindex(pd.MultiIndex.from_arrays([frame["datetime"], frame["instrument"]])).to_numpy()


def _with_other_label(kind: str, trained: Any, frame: pd.DataFrame, valid: pd.DataFrame | None, key: UnitKey
                      ) -> tuple[pd.DataFrame, pd.DataFrame | None, dict[str, str]]:
    """The unit's tables with the other label kind beside ``label`` where it differs, and which column holds which kind.

    ``label`` holds ``kind`` (``rolling.label``). The other kind goes into ``label_<other>`` (test and
    validation tables alike; NaN where it has no value) only when it differs from ``label`` on some
    row; when it equals it everywhere, both kinds map to ``label``; a handler with one kind maps one.
    """
    other = "learn" if kind == "raw" else "raw"
    if trained.other_labels is None:
        return frame, valid, {kind: "label"}
    tables = [(frame, trained.other_labels)] + ([] if valid is None else [(valid, trained.valid_other_labels)])
    aligned = [None if labels is None else _aligned_labels(labels, table, key) for table, labels in tables]
    if all(values is not None and np.array_equal(values, table["label"].to_numpy(), equal_nan=True)
           for values, (table, _) in zip(aligned, tables)):
        return frame, valid, {kind: "label", other: "label"}
    column = f"label_{other}"
    out = [table.assign(**{column: np.full(len(table), np.nan) if values is None else values})
           for values, (table, _) in zip(aligned, tables)]
    return out[0], (out[1] if valid is not None else None), {kind: "label", other: column}


def _warm_start(plan: RunPlan, key: UnitKey) -> tuple[Path | None, dict | None]:
    """The predecessor's checkpoint to fine-tune from (``None`` for a first or scratch window) and its record."""
    previous = plan.predecessor(key)
    if previous is None:
        return None, None
    prev_paths = st.unit_paths(plan.store, previous)
    status = st.unit_status(plan.store, previous, plan.pipeline(key.pipeline).config_hash, verify=False)
    if not status.complete:
        raise RuntimeError(f"unit {key.slug()}: predecessor {previous.slug()} is not complete; cannot fine-tune")
    damage = st.checkpoint_damage(plan.store, previous, status.sidecar)
    if damage is not None:  # damaged after this run checked it: the next run recomputes it (pending_units)
        raise RuntimeError(f"unit {key.slug()}: cannot fine-tune from {damage}; re-run to recompute "
                           f"{previous.slug()} and the windows after it (run moves it to "
                           f"{StoreLayout(plan.store).corrupt}/ first)")
    return prev_paths.checkpoint, {"checkpoint": prev_paths.relative_checkpoint(plan.store),
                                   "sha256": _sha256(prev_paths.checkpoint)}


def _sidecar(plan: RunPlan, key: UnitKey, *, task: dict, trained: Any, frame: pd.DataFrame, dropped: int,
             valid: pd.DataFrame | None, ql: float, start_from: dict | None, timings: dict, applied: dict,
             log: Path) -> dict:
    """The unit's sidecar record (written last: its presence marks the unit complete).

    ``seed_param``: the model's argument that carried the unit's seed (``None``: the model takes no
    seed, so its seeds differ only through the global generators); ``threads``: the thread settings
    applied (``torch`` and the model's own thread arguments); ``compat``: the compatibility class
    used instead of Qlib's, and why; ``pretrained_base``: the base network trained for this unit;
    ``fit_path``: where the model computed (device, batch feed, seed-stack kernel and why each was chosen).
    """
    window, paths = plan.windows[key.window], st.unit_paths(plan.store, key)
    return {
        "pipeline": key.pipeline,
        "seed": key.seed,
        "window": key.window,
        "config_hash": plan.pipeline(key.pipeline).config_hash,
        "rows": int(len(frame)),
        "rows_dropped_unlabelled": int(dropped),
        "valid_rows": None if valid is None else int(len(valid)),  # rows of wNN.valid.parquet (None: not stored)
        "test": list(window.test.as_tuple()),
        "first_prediction": frame["datetime"].iloc[0].isoformat(sep=" "),
        "last_prediction": frame["datetime"].iloc[-1].isoformat(sep=" "),
        "ql": ql,
        "checkpoint": paths.relative_checkpoint(plan.store),
        "checkpoint_sha256": _sha256(paths.checkpoint),
        "started_from": start_from,
        "n_threads": plan.n_threads,
        "seeds": {"global": trained.seeds,  # the seed the model's own argument (seed_param) received
                  "model_kwarg": task["model"].get("kwargs", {}).get(applied["seed_param"] or "seed")},
        "seed_param": applied["seed_param"],
        "threads": applied["threads"],
        "compat": applied.get("compat"),
        "pretrained_base": _pretrained_record(plan, task, paths),
        "log": os.path.relpath(log, plan.store),
        "label": plan.label,
        "stopped_at": trained.stopped_at,  # where a booster stopped (None: the model does not say)
        "fit_path": getattr(trained, "fit_path", None),  # device, batch feed and seed-stack kernel (None: not said)
        "qlib_recorder": trained.recorder,  # the task's records in a Qlib recorder (None: the task has none)
        "pid": os.getpid(),
        "node": os.environ.get("ROLLING_CALIB_NODE") or os.uname().nodename,  # Ray node ID, else host name
        "timings": timings,
        "finished_at": pd.Timestamp.now(tz="UTC").isoformat(),
    }


def _pretrained_record(plan: RunPlan, task: dict, paths: st.UnitPaths) -> dict | None:
    """The sidecar's ``pretrained_base``: the base network this unit trained first (GATs, IGMTF), or ``None``."""
    base = pretrained_base(task)
    path = base_model_path(paths.checkpoint)
    if base is None or not path.is_file():
        return None
    return {"class": f"{base['model']['module_path']}.{base['model']['class']}", "kwargs": base["model"]["kwargs"],
            "file": os.path.relpath(path, plan.store), "sha256": _sha256(path), "replaces": base["model_path"]}
