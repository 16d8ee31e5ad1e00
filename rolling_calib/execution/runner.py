"""The runner: plan the grid pipelines x seeds x windows, execute units, fill the store.

This is the only layer that drives Qlib. A *unit* is one window of one seed of one
pipeline; :func:`execute_unit` trains it with Qlib's own machinery and writes it
into the store (see :mod:`rolling_calib.execution.store`)::

    task   = the pipeline's Qlib task with this window's dates (and seed, where the model takes one)
    random / numpy / torch global seeds = the unit's seed (recorded in the sidecar)
    model  = init_instance_by_config(task["model"])      # RollingLSTM, Qlib's LGBModel, LSTM, ...
    data   = init_instance_by_config(task["dataset"])    # MinuteTSDataset, DatasetH(Alpha158), ...
    fine-tune mode, window k >= 1: model.load_state(checkpoint k-1), or finetune() of the pickled model k-1
    model.fit(data); p = model.predict(data, "test")
    y = data.prepare("test", col_set="label", data_key=DK_R)   # DK_L with rolling.label: learn
    y' = the other kind (DK_L / DK_R), kept as column label_learn / label_raw where it differs from y
    write units/<pipeline>/seed<k>/w<NN>.parquet, checkpoint, sidecar (atomically, sidecar last)

Both labels of every pipeline are described at plan time from its handler config
(:func:`rolling_calib.qlib_adapter.labels.describe_labels`) and recorded in the manifest
(``pipelines.<name>.labels``) and in every unit's sidecar (``labels``, and ``label_columns``:
which column holds which kind).

:func:`plan_run` checks every contract this relies on before any unit trains
(:func:`rolling_calib.qlib_adapter.training.check_runner_contract`): a model that can
neither load a checkpoint nor ``finetune`` is refused in fine-tune mode.

Usage (trains; ``tests/execution/test_runner_e2e.py`` runs it on a tiny store)::

    plan = plan_run(load_experiment("workflows/demo.yaml"), store=Path("runs/demo"))
    summary = run_plan(plan, executor=LocalExecutor(workers=2))
    summary.ran, summary.skipped          # (40, 0)
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rolling_calib.execution import store as st
from rolling_calib.execution.lock import StoreLock, clean_orphan_temporaries
from rolling_calib.config.bounds import check_pipeline_name, check_unit_count, check_unit_memory, parse_seeds
from rolling_calib.config.experiment import ExperimentConfig
from rolling_calib.core.fingerprint import stable_hash
from rolling_calib.core.label import Label
from rolling_calib.core.validation import ConfigError
from rolling_calib.qlib_adapter.labels import describe_labels
from rolling_calib.qlib_adapter.memory import UnitMemory, unit_memory
from rolling_calib.qlib_adapter.session import store_calendar, store_freq
from rolling_calib.qlib_adapter.records import RecorderSpec
from rolling_calib.qlib_adapter.task_spec import import_class
from rolling_calib.qlib_adapter.training import (
    base_model_path,
    check_runner_contract,
    train_window,
    train_window_stack,
    unit_task,
    window_task,
)
from rolling_calib.qlib_adapter.zoo import (
    ZOO_RULES_VERSION,
    check_booster_params,
    check_validation_rows,
    check_zoo_task,
    model_traits,
    pretrained_base,
)
from rolling_calib.execution.executors import Executor, UnitKey, UnitTask
from rolling_calib.execution.progress import ProgressBoard, unit_reporter
from rolling_calib.execution.unit_log import attach_log, unit_log
from rolling_calib.execution.units import StackKey
from rolling_calib.core.schedule import CoverageError, Window, check_coverage

__all__ = [
    "PipelinePlan",
    "RunPlan",
    "UnitResult",
    "RunSummary",
    "plan_run",
    "window_task",
    "execute_unit",
    "execute_stack",
    "run_plan",
    "check_store_coverage",
    "default_threads",
    "pending_units",
    "CorruptMove",
    "unit_task",
]


@dataclass(frozen=True)
class PipelinePlan:
    """One pipeline of a run: its resolved Qlib task, config hash and the description of its labels."""

    name: str
    task: dict
    config_hash: str
    labels: dict[str, Label] = field(default_factory=dict)   # "raw" (and "learn" for a DataHandlerLP handler)


@dataclass(frozen=True)
class RunPlan:
    """Everything a worker needs to execute any unit of a run (picklable).

    Attributes
    ----------
    store : Path
        The result store.
    qlib_init : dict
        ``qlib.init`` arguments (the minute store).
    pipelines : tuple of PipelinePlan
    seeds : tuple of int
    windows : tuple of Window
    mode : str
        ``"finetune"`` (window k starts from window k-1's checkpoint) or ``"scratch"``.
    n_threads : int
        Torch threads per unit (default 1; recorded in the config hash because the
        thread count changes floating-point summation order).
    experiment : dict
        The validated experiment (recorded in the manifest).
    data : dict
        Data identity of the store (and of a second-frequency store, ``other_stores``).
    notes : tuple of str
        What the runner decided for this plan: a workflow's own seed taken as seed 0, a
        compatibility class, a pretrained base model, extra segments (printed before the run).
    """

    store: Path
    qlib_init: dict
    pipelines: tuple[PipelinePlan, ...]
    seeds: tuple[int, ...]
    windows: tuple[Window, ...]
    mode: str
    n_threads: int
    experiment: dict
    data: dict
    label: str = "raw"  # rolling.label: test labels raw (DK_R) or learn-processed (DK_L)
    stack_seeds: int = 1  # rolling.stack_seeds: seeds of a window trained as one stack (fixed groups of seeds)
    notes: tuple[str, ...] = ()  # what the runner decided for this plan (printed before the run, kept in its summary)

    def pipeline(self, name: str) -> PipelinePlan:
        """The plan of pipeline ``name``."""
        for p in self.pipelines:
            if p.name == name:
                return p
        raise KeyError(f"pipeline {name!r} is not in this plan ({', '.join(p.name for p in self.pipelines)})")

    def keys(self) -> list[UnitKey]:
        """All units, pipeline-major, then seed, then window."""
        return [UnitKey(p.name, s, w.index) for p in self.pipelines for s in self.seeds for w in self.windows]

    def seed_groups(self) -> list[tuple[int, ...]]:
        """The seeds cut into the fixed stacks of ``stack_seeds`` (in ``seeds`` order; one seed each when 1).

        The groups never depend on what is already in the store, so a resumed run trains every
        stack with the same members (and so the same numbers) as an uninterrupted one.
        """
        size = self.stack_seeds
        return [tuple(self.seeds[i : i + size]) for i in range(0, len(self.seeds), size)]

    def predecessor(self, key: UnitKey) -> UnitKey | None:
        """The unit whose checkpoint ``key`` starts from (fine-tune mode), else ``None``."""
        if self.mode != "finetune" or key.window == 0:
            return None
        return UnitKey(key.pipeline, key.seed, key.window - 1)


@dataclass(frozen=True)
class UnitResult:
    """What a worker reports back for one unit (small; the data is in the store)."""

    key: UnitKey
    rows: int
    seconds: float
    ql: float
    dropped: int = 0  # predictions without a finite label (not stored), counted


@dataclass
class RunSummary:
    """Outcome of :func:`run_plan`."""

    store: Path
    ran: int
    skipped: int
    stale_moved: int
    seconds: float
    results: dict[UnitKey, UnitResult] = field(default_factory=dict)
    corrupt_moved: list[UnitKey] = field(default_factory=list)  # damaged units moved to STORE/corrupt/, recomputed
    notes: tuple[str, ...] = ()  # the plan's notes (:attr:`RunPlan.notes`)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (for ``rolling-calib run --json``)."""
        return {
            "store": str(self.store),
            "notes": list(self.notes),
            "units_ran": self.ran,
            "units_skipped": self.skipped,
            "stale_units_moved": self.stale_moved,
            "corrupt_units_moved": [k.slug() for k in self.corrupt_moved],
            "seconds": round(self.seconds, 3),
            "rows_dropped_unlabelled": sum(r.dropped for r in self.results.values()),
            "units": [
                {"unit": k.slug(), "rows": r.rows, "rows_dropped_unlabelled": r.dropped,
                 "seconds": round(r.seconds, 3), "ql": r.ql}
                for k, r in sorted(self.results.items())
            ],
        }


def default_threads(workers: int) -> int:
    """Torch threads per unit so that ``workers`` processes share this machine's cores.

    ``rolling-calib run`` uses 1 thread per unit by default instead: the thread count
    is part of the config hash (it changes floating-point summation order), so a value
    that depends on the machine would make a store resumed elsewhere recompute.

    Examples
    --------
    >>> default_threads(os.cpu_count() or 1)
    1
    """
    return max(1, (os.cpu_count() or 1) // max(1, workers))


# --------------------------------------------------------------------------- planning
def _pipeline_hash(task: dict, windows: Sequence[Window], rolling: dict, data: dict, n_threads: int) -> str:
    """Hash of everything that shapes a pipeline's numbers.

    The resolved task, the exact windows and mode, the data identity (not its path)
    and the torch thread count: threads change the floating-point summation order,
    so 1 and 2 threads give predictions that differ in the 6th digit. For a model of Qlib's
    zoo also the version of the rules that write seeds and threads into its unit task
    (:data:`~rolling_calib.qlib_adapter.zoo.ZOO_RULES_VERSION`): units trained under other rules
    are recomputed, not mixed in.
    """
    schedule = {
        "windows": [w.to_dict() for w in windows],
        "mode": rolling["mode"],
        "finetune_on": rolling["finetune_on"],
    }
    if rolling.get("label", "raw") != "raw":  # the default leaves the hashes of existing stores unchanged
        schedule["label"] = rolling["label"]
    if rolling.get("stack_seeds", 1) != 1:  # stacked fits agree with single ones to rounding, not to the bit
        schedule["stack_seeds"] = rolling["stack_seeds"]
    if not str(task["model"].get("module_path", "")).startswith("rolling_calib"):  # Qlib's zoo: its unit rules
        schedule["zoo_rules"] = ZOO_RULES_VERSION  # (our models' hashes, and so existing stores, unchanged)
    data_id = {k: v for k, v in data.items() if k != "path"}
    return stable_hash({"task": task, "schedule": schedule, "data": data_id, "n_threads": int(n_threads)})


def plan_run(
    config: ExperimentConfig,
    *,
    store: str | os.PathLike,
    pipelines: Sequence[str] | None = None,
    seeds: int | Sequence[int] | None = None,
    n_threads: int = 1,
    workers: int = 1,
) -> RunPlan:
    """Build the (picklable) plan of a run: windows from the store calendar, hashes, units.

    Parameters
    ----------
    config : ExperimentConfig
        A validated experiment (:func:`rolling_calib.config.experiment.load_experiment`).
    store : path
        The result store directory (created by :func:`run_plan`).
    pipelines : sequence of str, optional
        Subset of the config's pipelines (default: all).
    seeds : int or sequence of int, optional
        ``N`` means seeds ``0..N-1``; default: the config's ``rolling.seeds``.
    n_threads : int
        Torch threads per unit (part of the config hash: it changes the last digits).
    workers : int
        Units trained at once on this machine: each gets the available memory divided by them
        (:func:`rolling_calib.config.bounds.check_unit_memory`).

    Raises
    ------
    ValueError
        Unknown pipeline names or bad seeds.
    ConfigError
        A bound of :mod:`rolling_calib.config.bounds` is exceeded (seeds, pipeline names, units,
        the estimated memory of one unit), before anything is written.
    ConfigError
        A pipeline's task breaks a contract the runner relies on (e.g. fine-tune mode with a
        model that has neither ``load_state`` nor ``finetune``), before anything trains.
    """
    names = list(config.pipelines) if pipelines is None else list(pipelines)
    unknown = [n for n in names if n not in config.pipelines]
    if unknown:
        raise ValueError(f"--pipelines: unknown pipeline(s) {', '.join(unknown)}; known: {', '.join(config.pipelines)}")
    if not names:
        raise ValueError("--pipelines: expected at least one pipeline")
    where = str(config.path) if config.path else "experiment"
    seed_list, notes = _seed_list(config, names, seeds, where)
    if n_threads < 1:
        raise ValueError(f"n_threads: expected >= 1, found {n_threads}")
    label = getattr(config.rolling, "label", "raw")
    stack_seeds = int(getattr(config.rolling, "stack_seeds", 1))
    for name in dict.fromkeys(names):  # before the calendar is read: refusals come in well under a second
        check_runner_contract(config.pipeline_task(name), mode=config.rolling.mode, label=label,
                              stack_seeds=stack_seeds, where=f"{where}: pipelines.{name}")
        notes += [f"{name}: {note}" for note in check_zoo_task(config.pipeline_task(name), f"{where}: pipelines.{name}")]
        notes += _seedless_note(name, config.pipeline_task(name), seed_list, where)
        check_booster_params(config.pipeline_task(name), f"{where}: pipelines.{name}")
    calendar = store_calendar(config.qlib_init)
    windows = tuple(config.rolling.windows(calendar))
    _check_bounds(config, list(dict.fromkeys(names)), n_seeds=len(seed_list), calendar=calendar, windows=windows,
                  workers=workers, where=where)
    for name in dict.fromkeys(names):  # knowable before training: each window's task, validation rows vs a batch
        task = config.pipeline_task(name)
        applied = [unit_task(task, w, seed=seed_list[0], n_threads=n_threads, where=f"{where}: pipelines.{name}")[1]
                   for w in windows][0]  # every window's task is built once here: its segments are checked
        notes += [f"{name}: {applied['compat']}"] if "compat" in applied else []
        check_validation_rows(task, windows, freq=store_freq(config.qlib_init), where=f"{where}: pipelines.{name}")
    data = _data_identity(config, st.task_universe(config.task))
    experiment = config.to_dict()
    plans = []
    for name in dict.fromkeys(names):
        task = config.pipeline_task(name)
        plans.append(PipelinePlan(name, task, _pipeline_hash(task, windows, experiment["rolling"], data, n_threads),
                                  labels=describe_labels(task).labels))
    return RunPlan(
        store=Path(store).resolve(),
        qlib_init=copy.deepcopy(config.qlib_init),
        pipelines=tuple(plans),
        seeds=seed_list,
        windows=windows,
        mode=config.rolling.mode,
        n_threads=int(n_threads),
        experiment=experiment,
        data=data,
        label=label,
        stack_seeds=stack_seeds,
        notes=tuple(dict.fromkeys(notes)),
    )


def _check_bounds(config: ExperimentConfig, names: list[str], *, n_seeds: int, calendar: pd.DatetimeIndex,
                  windows: Sequence[Window], workers: int, where: str) -> None:
    """The resource bounds of :mod:`rolling_calib.config.bounds`: pipeline names (a sweep's grid names its own),
    units of the run, the estimated memory of each pipeline's largest unit per worker."""
    for name in names:
        check_pipeline_name(name, where)
    check_unit_count(pipelines=len(names), seeds=n_seeds, windows=len(windows), where=where)
    stack_seeds = int(getattr(config.rolling, "stack_seeds", 1))
    for name in names:
        check_unit_memory(_unit_memory(config, config.pipeline_task(name), calendar, windows, stack_seeds),
                          workers=workers, where=f"{where}: pipelines.{name}")


def _unit_memory(config: ExperimentConfig, task: dict, calendar: pd.DatetimeIndex, windows: Sequence[Window],
                 stack_seeds: int) -> UnitMemory | None:
    """The estimated memory of the pipeline's largest unit (its longest window; ``None``: no estimate for its model)."""
    spans = [(min(w.fit.start, w.train.start), w.test.end) for w in windows]
    bars = max(int(((calendar >= start) & (calendar <= end)).sum()) for start, end in spans)
    universe = st.task_universe(task)
    instruments = (_universe_size(config.store_dir, universe[0]) if universe else
                   len((task["dataset"].get("kwargs", {}).get("handler", {}).get("kwargs", {}).get("instruments") or [])))
    return unit_memory(task, instruments=instruments, bars=bars, stack_seeds=stack_seeds)


def _universe_size(provider: Path, name: str) -> int:
    """Instruments of universe ``name`` (lines of ``instruments/<name>.txt``; 1 when it names a symbol)."""
    path = Path(provider) / "instruments" / f"{name}.txt"
    if not path.is_file():
        return 1
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def _data_identity(config: ExperimentConfig, instruments: Sequence[str]) -> dict:
    """The store's data identity; a multi-frequency ``provider_uri``'s other stores under ``other_stores``."""
    data = st.data_identity(config.store_dir, instruments=instruments)
    others = {freq: path for freq, path in config.qlib_init["provider_uri"].items() if Path(path) != config.store_dir}
    if others:
        data["other_stores"] = {freq: st.data_identity(Path(path), instruments=instruments)
                                for freq, path in others.items()}
    return data


def _seedless_note(name: str, task: dict, seeds: Sequence[int], where: str) -> list[str]:
    """A note naming a model that takes no seed when the run has several seeds (its seeds are the same run)."""
    traits = model_traits(import_class(dict(task["model"]), "task.model", where))
    if traits.seed_param is not None or len(seeds) < 2:
        return []
    return [f"{name}: {traits.name} takes no seed (seed_param: null in its sidecars): its {len(seeds)} seeds differ "
            "only through the global random generators, which it may not use"]


def _written_seed(task: dict, where: str) -> tuple[str, int] | None:
    """``(argument, value)`` of the seed a task's model writes itself (TabNet's ``seed: 993``), or ``None``."""
    param = model_traits(import_class(dict(task["model"]), "task.model", where)).seed_param
    value = task["model"].get("kwargs", {}).get(param) if param else None
    return (param, value) if isinstance(value, int) and not isinstance(value, bool) else None


def _seed_list(config: ExperimentConfig, names: Sequence[str], seeds: int | Sequence[int] | None,
               where: str) -> tuple[tuple[int, ...], list[str]]:
    """The run's seeds and a note on the workflow's own seed.

    ``N`` seeds (``rolling.seeds: N`` or ``--seeds N``) are ``0..N-1``, or ``S..S+N-1`` when the
    workflow's model writes its own seed ``S`` (seed 0 of the rolling seeds is the workflow's own:
    TabNet's ``seed: 993`` gives 993, 994, ...). An explicit list is used as given, and replaces the
    written seed (said in the note). Pipelines that write different seeds are refused: the rolling
    seeds replace the model's seed in every unit.
    """
    seed_list = tuple(config.rolling.seeds) if seeds is None else parse_seeds(seeds, "--seeds", "command line")
    written = {name: _written_seed(config.pipeline_task(name), where) for name in dict.fromkeys(names)}
    if len(set(written.values())) > 1:
        raise ConfigError(f"{where}: pipelines write different model seeds ({', '.join(f'{n}: {w}' for n, w in written.items())}); "
                          "every unit's seed is a rolling seed: set rolling.seeds (or --seeds) instead")
    own = next(iter(written.values()), None)
    if own is None:
        return seed_list, []
    param, value = own
    if seed_list == tuple(range(len(seed_list))):
        if value == 0:  # seeds 0..N-1 either way: nothing to say (workflows/base.yaml writes seed: 0)
            return seed_list, []
        seed_list = tuple(value + i for i in range(len(seed_list)))
        return seed_list, [f"the workflow's own seed (task.model.kwargs.{param}: {value}) is seed 0 of the rolling "
                           f"seeds: {', '.join(map(str, seed_list))}"]
    return seed_list, [f"the workflow's own seed (task.model.kwargs.{param}: {value}) is replaced by the rolling seeds "
                       f"{', '.join(map(str, seed_list))}"]


# --------------------------------------------------------------------------- one unit
def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


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


def execute_unit(plan: RunPlan, key: UnitKey) -> UnitResult:
    """Train, predict and store one unit; safe to call in any worker process.

    Parameters
    ----------
    plan : RunPlan
    key : UnitKey

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
    report = unit_reporter(key)  # None unless the run draws the units' lines (rolling_calib.execution.progress)
    paths = st.unit_paths(plan.store, key)
    warm_start, start_from = _warm_start(plan, key)
    task, applied = unit_task(plan.pipeline(key.pipeline).task, plan.windows[key.window], seed=key.seed,
                              n_threads=plan.n_threads)
    try:
        with unit_log(paths.log), _checkpoint_writes(paths.checkpoint):
            trained = train_window(plan.qlib_init, task, warm_start=warm_start, checkpoint=paths.checkpoint,
                                   seed=key.seed, label=plan.label, recorder=_recorder_spec(plan, key),
                                   threads=plan.n_threads, progress=report)
    except st.StoreWriteError:
        raise   # one line naming the file already: the library output is beside the point
    except Exception as exc:
        raise attach_log(exc, paths.log)
    if report is not None:
        report("writing")
    return _store_unit(plan, key, task=task, trained=trained, start_from=start_from, t0=t0, applied=applied)


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
    results = [_store_unit(plan, key, task=task, trained=one, start_from=start_from, t0=t0, seed_stack=stack.seeds,
                           applied=applied, log=log)
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


def _execute(plan: RunPlan, key: UnitKey | StackKey) -> UnitResult | tuple[UnitResult, ...]:
    """The executors' ``work``: one unit, or one seed stack."""
    return execute_stack(plan, key) if isinstance(key, StackKey) else execute_unit(plan, key)


def _recorder_spec(plan: RunPlan, key: UnitKey) -> RecorderSpec:
    return RecorderSpec(plan.store, experiment_name=key.pipeline, recorder_name=key.slug(),
                        tags={"unit": key.slug(), "pipeline": key.pipeline, "seed": key.seed, "window": key.window,
                              "config_hash": plan.pipeline(key.pipeline).config_hash})


def _store_unit(plan: RunPlan, key: UnitKey, *, task: dict, trained: Any, start_from: dict | None, t0: float,
                applied: dict, seed_stack: tuple[int, ...] | None = None, log: Path | None = None) -> UnitResult:
    """Write one trained unit (predictions, validation predictions, sidecar last); its result."""
    window = plan.windows[key.window]
    paths = st.unit_paths(plan.store, key)
    t_start = time.perf_counter()
    frame, dropped = _unit_frame(trained.predictions, trained.labels, window, key)
    valid = _valid_frame(trained, window, key)
    frame, valid, label_columns = _with_other_label(plan.label, trained, frame, valid, key)
    checksums = {"sha256": st.write_unit_parquet(paths.parquet, frame)}
    if valid is not None:
        checksums["valid_sha256"] = st.write_unit_parquet(paths.valid_parquet, valid)
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
    }
    if seed_stack is not None:
        timings["shared_by_stack"] = ["build_s", "fit_s", "total_s"]
    sidecar = _sidecar(plan, key, task=task, trained=trained, frame=frame, dropped=dropped, valid=valid, ql=ql,
                       start_from=start_from, timings=timings, applied=applied, log=log or paths.log)
    sidecar["label_columns"] = label_columns
    sidecar.update(checksums)  # the SHA-256 of the Parquet bytes: every reader checks them
    sidecar["labels"] = {kind: lab.to_dict() for kind, lab in plan.pipeline(key.pipeline).labels.items()}
    if seed_stack is not None:
        sidecar["seed_stack"] = list(seed_stack)
    st.atomic_write_json(paths.sidecar, sidecar)  # last: marks the unit complete
    return UnitResult(key=key, rows=int(len(frame)), seconds=t_end - t0, ql=ql, dropped=int(dropped))


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
    damage = st.checkpoint_damage(plan.store, previous, status.sidecar or {})
    if damage is not None:  # damaged after this run checked it: the next run recomputes it (pending_units)
        raise RuntimeError(f"unit {key.slug()}: cannot fine-tune from {damage}; re-run to recompute "
                           f"{previous.slug()} and the windows after it (run moves it to {plan.store / 'corrupt'}/ first)")
    return prev_paths.checkpoint, {"checkpoint": prev_paths.relative_checkpoint(plan.store),
                                   "sha256": _sha256(prev_paths.checkpoint)}


def _sidecar(plan: RunPlan, key: UnitKey, *, task: dict, trained: Any, frame: pd.DataFrame, dropped: int,
             valid: pd.DataFrame | None, ql: float, start_from: dict | None, timings: dict, applied: dict,
             log: Path) -> dict:
    """The unit's sidecar record (written last: its presence marks the unit complete).

    ``seed_param``: the model's argument that carried the unit's seed (``None``: the model takes no
    seed, so its seeds differ only through the global generators); ``threads``: the thread settings
    applied (``torch`` and the model's own thread arguments); ``compat``: the compatibility class
    used instead of Qlib's, and why; ``pretrained_base``: the base network trained for this unit.
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


# --------------------------------------------------------------------------- the grid
@dataclass(frozen=True)
class CorruptMove:
    """A damaged unit that :func:`pending_units` moved to ``STORE/corrupt/`` (``dest``) to recompute it, and why."""

    key: UnitKey
    dest: Path
    why: str

    def line(self) -> str:
        """The line ``run`` prints for it."""
        return f"{self.why.split('; re-run')[0]}; moved to {self.dest}/ and recomputed"


def pending_units(plan: RunPlan) -> tuple[list[UnitKey], int, int, list[CorruptMove]]:
    """Units still to run, units already complete, stale units moved aside, and damaged units moved aside.

    A unit is complete by :func:`rolling_calib.execution.store.unit_status` (its sidecar names
    the pipeline's current config hash and its files match their recorded checksums). Units
    of another hash are moved to ``STORE/stale/`` first; corrupt units (checksum mismatch,
    unreadable Parquet) to ``STORE/corrupt/`` (:func:`~rolling_calib.execution.store.move_corrupt`),
    and recomputed. In fine-tune mode every window after a missing one is pending too (its
    starting checkpoint will change), and the complete unit a pending window fine-tunes from
    is recomputed as well when its checkpoint is missing or damaged (moved to ``STORE/corrupt/``).

    Returns
    -------
    (list of UnitKey, int, int, list of CorruptMove)
        Pending units in plan order, the number skipped, the number of stale units moved aside,
        the corrupt units moved aside.
    """
    pending: list[UnitKey] = []
    skipped = stale = 0
    moved: list[CorruptMove] = []
    for p in plan.pipelines:
        for seed in plan.seeds:
            statuses = []
            for w in plan.windows:
                key = UnitKey(p.name, seed, w.index)
                if st.move_stale(plan.store, key, p.config_hash) is not None:
                    stale += 1
                status = st.unit_status(plan.store, key, p.config_hash)
                if status.state == "corrupt":
                    moved.append(CorruptMove(key, st.move_corrupt(plan.store, key, why=status.damage), status.damage))
                statuses.append(status)
            todo = _seed_pending(plan, statuses, moved)
            pending += todo
            skipped += len(statuses) - len(todo)
    return pending, skipped, stale, moved


def _seed_pending(plan: RunPlan, statuses: Sequence[st.UnitStatus], moved: list[CorruptMove]) -> list[UnitKey]:
    """The pending units of one (pipeline, seed) from its windows' statuses (fine-tune: see :func:`pending_units`).

    A complete unit whose checkpoint a pending window needs and cannot use (missing, damaged)
    is moved to ``STORE/corrupt/`` (appended to ``moved``) and becomes pending itself.
    """
    if plan.mode != "finetune":
        return [s.key for s in statuses if not s.complete]
    first = next((i for i, s in enumerate(statuses) if not s.complete), len(statuses))
    while 0 < first < len(statuses):
        before = statuses[first - 1]
        damage = st.checkpoint_damage(plan.store, before.key, before.sidecar or {})
        if damage is None:
            break
        why = f"{damage}; {st.corrupt_fix(plan.store)}"
        moved.append(CorruptMove(before.key, st.move_corrupt(plan.store, before.key, why=why), why))
        first -= 1
    return [s.key for s in statuses[first:]]


def _shared_hash(plan: RunPlan) -> str:
    """Hash of what every pipeline of this run shares: base task, schedule, calibration, data, threads.

    Pipelines recorded under different shared hashes were trained by runs of different
    experiments; ``compare`` notes it (their differences are not only their own overrides).
    """
    shared = {k: v for k, v in plan.experiment.items() if k not in ("pipelines", "compare", "experiment_name", "path")}
    data = {k: v for k, v in plan.data.items() if k != "path"}
    return stable_hash({"experiment": shared, "data": data, "n_threads": plan.n_threads})


def _write_manifest(plan: RunPlan) -> None:
    shared_hash = _shared_hash(plan)
    entries = {
        p.name: {
            "config_hash": p.config_hash,
            "shared_hash": shared_hash,
            "task": p.task,
            "windows": [w.to_dict() for w in plan.windows],
            "mode": plan.mode,
            "seeds": list(plan.seeds),
            "calibration": plan.experiment["rolling"]["calibration"],
            "label": plan.label,
            "labels": {kind: lab.to_dict() for kind, lab in p.labels.items()},
        }
        for p in plan.pipelines
    }
    st.write_manifest(
        plan.store,
        pipelines=entries,
        extra={
            "experiment": plan.experiment,
            "versions": st.library_versions(),
            "data": plan.data,
            "qlib_init": plan.qlib_init,
            "compare": plan.experiment.get("compare", []),
            "updated_at": pd.Timestamp.now(tz="UTC").isoformat(),
        },
    )


def run_plan(plan: RunPlan, *, executor: Executor, progress: bool = True) -> RunSummary:
    """Run every unit of ``plan`` that is not complete yet, then check coverage.

    Completed units whose sidecar names the pipeline's current config hash are
    skipped; stale ones are moved to ``STORE/stale/`` and recomputed. In fine-tune
    mode a unit waits for its predecessor (``UnitTask.after``), and a missing
    window forces the later windows of that seed to be recomputed.

    Parameters
    ----------
    plan : RunPlan
    executor : Executor
        ``LocalExecutor(workers=K)`` or ``RayExecutor(...)``.
    progress : bool
        Show the tqdm bar of units with the run's ETA (:class:`~rolling_calib.execution.progress.ProgressBoard`)
        and, when stderr is a terminal, a line under it per running unit (stage, epoch, batch).

    Returns
    -------
    RunSummary

    Raises
    ------
    rolling_calib.execution.executors.UnitFailedError
        When a unit fails (completed units stay in the store).
    rolling_calib.core.schedule.CoverageError
        When the merged predictions of a (pipeline, seed) leave a gap or overlap.
    rolling_calib.execution.lock.StoreLockedError
        When another process is writing into the store (it is named).
    """
    with StoreLock(plan.store):
        return _run_locked(plan, executor=executor, progress=progress)


def _run_locked(plan: RunPlan, *, executor: Executor, progress: bool) -> RunSummary:
    t0 = time.perf_counter()
    orphans = clean_orphan_temporaries(plan.store)
    if orphans:
        warnings.warn(f"{plan.store}: removed {len(orphans)} temporary file(s) left by an interrupted write "
                      f"(e.g. {orphans[0]})", stacklevel=3)
    _write_manifest(plan)
    if progress:
        for note in plan.notes:
            print(f"note: {note}", file=sys.stderr)
    pending, skipped, stale, corrupt = pending_units(plan)
    for move in corrupt:
        print(f"rolling-calib run: {move.line()}", file=sys.stderr)
    tasks = _tasks(plan, pending)
    units = [unit for t in tasks for unit in (t.key.units() if isinstance(t.key, StackKey) else [t.key])]
    skipped = len(plan.keys()) - len(units)  # a stack retrains its complete members too (same numbers)
    if tasks and hasattr(executor, "connect"):  # Ray says what it starts before the bars are drawn, not across them
        executor.connect()
    with ProgressBoard(total=len(plan.keys()), done=skipped, left=Counter(u.pipeline for u in units),
                       workers=_parallel_units(executor), enabled=progress) as board:

        def on_done(key: UnitKey | StackKey, result: UnitResult | tuple[UnitResult, ...]) -> None:
            finished = result if isinstance(result, tuple) else (result,)
            board.unit_done(key, [(r.key.pipeline, r.seconds) for r in finished])

        lines = {"on_progress": board.on_event} if board.nested else {}  # executors of old take on_done only
        outcome = executor.run(tasks, partial(_execute, plan), on_done=on_done, **lines) if tasks else {}
    results = {r.key: r for value in outcome.values() for r in (value if isinstance(value, tuple) else (value,))}
    check_store_coverage(plan)
    summary = RunSummary(
        store=plan.store,
        ran=len(results),
        skipped=skipped,
        stale_moved=stale,
        seconds=time.perf_counter() - t0,
        results=dict(results),
        corrupt_moved=[move.key for move in corrupt],
        notes=plan.notes,
    )
    _record_history(plan, summary, executor)
    return summary


def _parallel_units(executor: Executor) -> int | None:
    """Units the executor runs at once, where it says (local pool: ``workers``; Ray started here: its CPUs per unit).

    None (a Ray cluster joined as it is): the progress board counts the units it sees running at once.

    >>> from rolling_calib.execution.executors import LocalExecutor
    >>> _parallel_units(LocalExecutor(workers=3))
    3
    """
    workers = getattr(executor, "workers", None)
    if workers:
        return int(workers)
    cpus, per_unit = getattr(executor, "num_cpus", None), getattr(executor, "cpus_per_unit", None)
    return max(1, int(cpus // per_unit)) if cpus and per_unit else None


def _tasks(plan: RunPlan, pending: Sequence[UnitKey]) -> list[UnitTask]:
    """The executor's tasks for ``pending`` units: the units themselves, or their seed stacks.

    With ``stack_seeds > 1`` a stack (fixed seed group, :meth:`RunPlan.seed_groups`) is scheduled
    for a window when any of its units is pending, and retrains all its members, so that the
    pending ones get the numbers an uninterrupted run gives them. In fine-tune mode a task waits
    for the task of its predecessor window when that one is scheduled too.
    """
    if plan.stack_seeds == 1:
        pending_set = set(pending)
        return [UnitTask(key, after=before if (before := plan.predecessor(key)) in pending_set else None)
                for key in pending]
    wanted = {(key.pipeline, key.window, key.seed) for key in pending}
    tasks, scheduled = [], set()
    for p in plan.pipelines:
        for group in plan.seed_groups():
            for w in plan.windows:
                if not any((p.name, w.index, seed) in wanted for seed in group):
                    continue
                key = StackKey(p.name, group, w.index)
                before = StackKey(p.name, group, w.index - 1)
                tasks.append(UnitTask(key, after=before if plan.mode == "finetune" and before in scheduled else None))
                scheduled.add(key)
    return tasks


def _record_history(plan: RunPlan, summary: RunSummary, executor: Executor) -> None:
    """Append this run's timing to the manifest's ``history`` (unit timings are in the sidecars)."""
    unit_seconds = [r.seconds for r in summary.results.values()]
    st.append_history(
        plan.store,
        {
            "finished_at": pd.Timestamp.now(tz="UTC").isoformat(),
            "pipelines": [p.name for p in plan.pipelines],
            "seeds": list(plan.seeds),
            "units_ran": summary.ran,
            "units_skipped": summary.skipped,
            "stale_units_moved": summary.stale_moved,
            "wall_s": round(summary.seconds, 3),
            "unit_s_total": round(float(sum(unit_seconds)), 3),
            "unit_s_max": round(float(max(unit_seconds, default=0.0)), 3),
            "executor": type(executor).__name__,
            "workers": getattr(executor, "workers", None),
            "n_threads": plan.n_threads,
        },
    )


def check_store_coverage(plan: RunPlan) -> None:
    """Check that each (pipeline, seed)'s units tile the evaluation period exactly.

    The windows' test segments must tile the calendar (no gap, no overlap); every
    unit must be complete with rows only inside its own test segment (so merged
    predictions never overlap), and its first and last predictions must lie in its
    first and last test sessions (so no window is silently cut short).
    """
    calendar = store_calendar(plan.qlib_init)
    check_coverage(plan.windows, calendar)
    for p in plan.pipelines:
        for seed in plan.seeds:
            for w in plan.windows:
                key = UnitKey(p.name, seed, w.index)
                status = st.unit_status(plan.store, key, p.config_hash)
                if not status.complete:
                    raise CoverageError(f"coverage: unit {key.slug()} is missing from {plan.store}")
                side = status.sidecar
                first, last = pd.Timestamp(side["first_prediction"]), pd.Timestamp(side["last_prediction"])
                if first < w.test.start or last > w.test.end:
                    raise CoverageError(f"coverage: unit {key.slug()} has predictions outside {w.test.as_tuple()}")
                if first.normalize() != w.test.start.normalize() or last.normalize() != w.test.end.normalize():
                    raise CoverageError(
                        f"coverage: unit {key.slug()} predicts {first} .. {last}, "
                        f"not the whole test segment {w.test.as_tuple()} (first and last session)"
                    )
