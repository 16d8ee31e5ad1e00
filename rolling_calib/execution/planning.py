"""Plan policy: what a run trains, under which config hash, with which seeds, within which bounds.

:func:`plan_run` turns a validated experiment into a picklable :class:`RunPlan`: the windows
from the store calendar, one :class:`PipelinePlan` per pipeline (its resolved Qlib task, the
hash of everything that shapes its numbers, the description of its labels), the seeds (a
workflow's own seed taken as seed 0), and the notes of what the plan decided. Every contract the
runner relies on (:func:`rolling_calib.qlib_adapter.training.check_runner_contract`, the zoo's
rules, the bounds of :mod:`rolling_calib.config.bounds`) is checked here, before anything trains
or is written. Executing the plan: :mod:`rolling_calib.execution.runner`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from rolling_calib.config.bounds import check_pipeline_name, check_unit_count, check_unit_memory, parse_seeds
from rolling_calib.config.experiment import ExperimentConfig, RollingConfig
from rolling_calib.config.schedule_defaults import segment_departures
from rolling_calib.core.fingerprint import stable_hash
from rolling_calib.core.label import Label, storage_kind
from rolling_calib.core.schedule import Window
from rolling_calib.core.validation import ConfigError
from rolling_calib.execution import store as st
from rolling_calib.execution.backtests import backtest_hash
from rolling_calib.execution.units import UnitKey
from rolling_calib.qlib_adapter.backtest import backtest_record, resolve_backtest, without_backtests
from rolling_calib.qlib_adapter.labels import describe_labels, label_purge
from rolling_calib.qlib_adapter.memory import UnitMemory, unit_memory
from rolling_calib.qlib_adapter.session import store_calendar, store_freq
from rolling_calib.qlib_adapter.task_spec import import_class
from rolling_calib.qlib_adapter.training import check_runner_contract, unit_task
from rolling_calib.qlib_adapter.zoo import (
    ZOO_RULES_VERSION,
    check_booster_params,
    check_model_keywords,
    check_validation_rows,
    check_zoo_task,
    model_traits,
)

__all__ = ["PipelinePlan", "RunPlan", "current_data", "data_signature_now", "default_threads", "plan_run"]

#: The ``rolling:`` section's defaults (one place: :class:`~rolling_calib.config.experiment.RollingConfig`).
_ROLLING_DEFAULTS = {"label": storage_kind(RollingConfig.label), "stack_seeds": RollingConfig.stack_seeds}


@dataclass(frozen=True)
class PipelinePlan:
    """One pipeline of a run: its resolved Qlib task, config hash, the description of its labels, and its backtest.

    ``backtest`` is the workflow's backtest resolved for the store
    (:meth:`~rolling_calib.qlib_adapter.backtest.BacktestSpec.to_dict`; None: the task has none, or
    the store is not daily), run once per seed over the joined windows; ``backtest_hash`` hashes
    its settings apart from ``config_hash`` (which leaves the backtest records out), so a changed
    backtest setting re-runs the backtests, not the units.
    """

    name: str
    task: dict
    config_hash: str
    labels: dict[str, Label] = field(default_factory=dict)   # "raw" (and "learn" for a DataHandlerLP handler)
    backtest: dict | None = None
    backtest_hash: str | None = None
    backtest_refused: str | None = None   # why the workflow's backtest is not run (the guard), said in the plan


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
    data_universe : tuple of str
        The universe the identity covers (:func:`~rolling_calib.execution.store.task_universe`).
    data_signature : str
        The files' paths, sizes and times when the identity was taken
        (:func:`~rolling_calib.execution.store.data_signature`): each unit checks the data it reads
        against it (:func:`current_data`).
    notes : tuple of str
        What the runner decided for this plan: a workflow's own seed taken as seed 0, a
        compatibility class, a pretrained base model, extra segments (printed before the run).
    purge : dict
        ``{"bars", "why"}``: the bars dropped at the end of every training and validation segment
        before the next one (``rolling.purge``; recorded in the manifest and printed with the plan).
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
    label: str  # rolling.label: test labels raw (DK_R) or learn-processed (DK_L)
    stack_seeds: int  # rolling.stack_seeds: seeds of a window trained as one stack (fixed groups of seeds)
    notes: tuple[str, ...] = ()  # what the runner decided for this plan (printed before the run, kept in its summary)
    data_universe: tuple[str, ...] = ()
    data_signature: str = ""
    purge: dict = field(default_factory=lambda: {"bars": 0, "why": "not purged"})  # bars dropped before each next segment

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
def _hashed(rolling: RollingConfig, option: str) -> object:
    """The value of a rolling option the hash sees (``label``: the kind a unit stores first, auto's is raw's)."""
    value = getattr(rolling, option)
    return storage_kind(value) if option == "label" else value


def _pipeline_hash(task: dict, windows: Sequence[Window], rolling: RollingConfig, data: dict, n_threads: int) -> str:
    """Hash of everything that shapes a pipeline's numbers.

    The resolved task without its backtest records (:func:`~rolling_calib.qlib_adapter.backtest.without_backtests`:
    the backtest runs once per seed, under its own hash), the exact windows and mode, the data identity
    (not its path) and the torch thread count: threads change the floating-point summation order,
    so 1 and 2 threads give predictions that differ in the 6th digit. For a model of Qlib's
    zoo also the version of the rules that write seeds and threads into its unit task
    (:data:`~rolling_calib.qlib_adapter.zoo.ZOO_RULES_VERSION`): units trained under other rules
    are recomputed, not mixed in.
    """
    schedule = {
        "windows": [w.to_dict() for w in windows],
        "mode": rolling.mode,
        "finetune_on": rolling.finetune_on,
    }
    for option, default in _ROLLING_DEFAULTS.items():  # label: a default leaves existing stores' hashes unchanged;
        if (value := _hashed(rolling, option)) != default:  # stack_seeds: stacked fits agree with single ones to
            schedule[option] = value                      # rounding, not to the bit
    if not str(task["model"].get("module_path", "")).startswith("rolling_calib"):  # Qlib's zoo: its unit rules
        schedule["zoo_rules"] = ZOO_RULES_VERSION  # (our models' hashes, and so existing stores, unchanged)
    data_id = {k: v for k, v in data.items() if k != "path"}
    return stable_hash({"task": without_backtests(task), "schedule": schedule, "data": data_id,
                        "n_threads": int(n_threads)})


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
    notes = [*getattr(config, "notes", ()), *notes]   # the schedule chosen for a file without rolling: (issue 29)
    if n_threads < 1:
        raise ValueError(f"n_threads: expected >= 1, found {n_threads}")
    label, stack_seeds = storage_kind(config.rolling.label), config.rolling.stack_seeds
    for name in dict.fromkeys(names):  # before the calendar is read: refusals come in well under a second
        check_runner_contract(config.pipeline_task(name), mode=config.rolling.mode, label=label,
                              stack_seeds=stack_seeds, where=f"{where}: pipelines.{name}")
        notes += [f"{name}: {note}" for note in check_zoo_task(config.pipeline_task(name), f"{where}: pipelines.{name}")]
        notes += _seedless_note(name, config.pipeline_task(name), seed_list, where)
        notes += _reweighter_note(name, config.pipeline_task(name), where)
        notes += [f"{name}: {n}" for n in check_model_keywords(config.pipeline_task(name), f"{where}: pipelines.{name}")]
        check_booster_params(config.pipeline_task(name), f"{where}: pipelines.{name}")
    calendar = store_calendar(config.qlib_init)
    purge = _purge(config, list(dict.fromkeys(names)))
    windows = tuple(config.rolling.windows(calendar, purge=purge["bars"]))
    notes += _departures(config, windows, purge["bars"])
    _check_bounds(config, list(dict.fromkeys(names)), n_seeds=len(seed_list), calendar=calendar, windows=windows,
                  workers=workers, where=where)
    for name in dict.fromkeys(names):  # knowable before training: each window's task, validation rows vs a batch
        task = config.pipeline_task(name)
        applied = [unit_task(task, w, seed=seed_list[0], n_threads=n_threads, where=f"{where}: pipelines.{name}")[1]
                   for w in windows][0]  # every window's task is built once here: its segments are checked
        notes += [f"{name}: {applied['compat']}"] if "compat" in applied else []
        check_validation_rows(task, windows, freq=store_freq(config.qlib_init), where=f"{where}: pipelines.{name}")
    universe = tuple(st.task_universe(config.task))
    data = _data_identity(config, universe)
    signature = _data_signature(data, universe)
    experiment = config.to_dict()
    plans = []
    span = (windows[0].test.start, windows[-1].test.end)
    said: dict[str, list[str]] = {}   # backtest note -> the pipelines it is about (one line when all share it)
    for name in dict.fromkeys(names):
        task = config.pipeline_task(name)
        spec = resolve_backtest(task, freq=store_freq(config.qlib_init), where=f"{where}: pipelines.{name}",
                                test_span=span, anchor=lambda key: _anchor(config, key))
        refused = spec.refused if spec is not None else None
        if refused is not None:   # the guard: a strategy that holds the whole universe is not backtested
            said.setdefault(f"the backtest is not run: {refused}", []).append(name)
            spec = None
        if spec is not None:
            for note in spec.notes:
                said.setdefault(note, []).append(name)
        elif refused is None and backtest_record(task) is not None and store_freq(config.qlib_init) != "day":
            notes.append(f"{name}: the backtest ({backtest_record(task)[1].get('class')}) is not run: it backtests "
                         f"daily bars and the store holds {store_freq(config.qlib_init)} bars")
        backtest = spec.to_dict() if spec is not None else None
        plans.append(PipelinePlan(name, task, _pipeline_hash(task, windows, config.rolling, data, n_threads),
                                  labels=describe_labels(task).labels, backtest=backtest,
                                  backtest_hash=backtest_hash(backtest, data) if backtest is not None else None,
                                  backtest_refused=refused))
    every = list(dict.fromkeys(names))
    notes += [note if owners == every else f"{', '.join(owners)}: {note}" for note, owners in said.items()]
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
        data_universe=universe,
        data_signature=signature,
        purge=purge,
    )


def _purge(config: ExperimentConfig, names: Sequence[str]) -> dict:
    """``{"bars", "why"}``: the bars dropped before each next segment (``rolling.purge``; ``auto``: the largest
    look-ahead of the pipelines' labels, :func:`~rolling_calib.qlib_adapter.labels.label_purge`)."""
    if config.rolling.purge != "auto":
        return {"bars": int(config.rolling.purge), "why": "rolling.purge"}
    found = {name: label_purge(config.pipeline_task(name)) for name in names}
    name = max(found, key=lambda n: found[n][0])
    bars, why = found[name]
    return {"bars": int(bars), "why": f"rolling.purge auto: {why}"}


def _departures(config: ExperimentConfig, windows: Sequence[Window], purge: int) -> list[str]:
    """How the run departs from a Qlib workflow's own segments (a task with a Qlib handler and train, valid and test
    segments), one note each (:func:`~rolling_calib.config.schedule_defaults.segment_departures`)."""
    handler = config.task.get("dataset", {}).get("kwargs", {}).get("handler")
    if not (isinstance(handler, dict) and str(handler.get("module_path", "")).startswith("qlib")):
        return []
    r = config.rolling
    step = f"{r.step_days} trading days" if r.step_days else f"{r.step_months} month(s)"
    return segment_departures(config.task, windows, mode=r.mode, valid_months=r.valid_months, step=step, purge=purge)


def _anchor(config: ExperimentConfig, key: str) -> str | None:
    """The YAML anchor a task key repeats (``port_analysis_config``), or None (configs built without a file)."""
    of = getattr(config, "anchor_of", None)
    return of(key) if of is not None else None


def _check_bounds(config: ExperimentConfig, names: list[str], *, n_seeds: int, calendar: pd.DatetimeIndex,
                  windows: Sequence[Window], workers: int, where: str) -> None:
    """The resource bounds of :mod:`rolling_calib.config.bounds`: pipeline names (a sweep's grid names its own),
    units of the run, the estimated memory of each pipeline's largest unit per worker."""
    for name in names:
        check_pipeline_name(name, where)
    check_unit_count(pipelines=len(names), seeds=n_seeds, windows=len(windows), where=where)
    for name in names:
        check_unit_memory(_unit_memory(config, config.pipeline_task(name), calendar, windows, config.rolling.stack_seeds),
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


def _data_stores(data: dict) -> list[Path]:
    """The provider directories a data identity covers: the store, then each other-frequency store (none: no path)."""
    if not data.get("path"):
        return []
    return [Path(data["path"]), *(Path(d["path"]) for d in (data.get("other_stores") or {}).values())]


def _data_signature(data: dict, universe: Sequence[str]) -> str:
    """:func:`~rolling_calib.execution.store.data_signature` of every store of ``data``, joined."""
    return "+".join(st.data_signature(path, instruments=universe) for path in _data_stores(data))


def data_signature_now(plan: RunPlan) -> str:
    """The plan's data files' signature now (:func:`~rolling_calib.execution.store.data_signature`: a ``stat`` each)."""
    return _data_signature(plan.data, plan.data_universe)


def current_data(plan: RunPlan) -> tuple[str, dict]:
    """``(signature, identity)`` of the plan's data as it is now: what a unit about to read it records.

    The plan's identity when the files' paths, sizes and times are as at planning (a ``stat`` each);
    otherwise the content is fingerprinted again (:func:`~rolling_calib.execution.store.data_identity`),
    so a ``touch`` gives the plan's identity back and a changed byte a new one.
    """
    signature = data_signature_now(plan)
    if signature == plan.data_signature:
        return signature, plan.data
    stores = _data_stores(plan.data)
    if not stores:
        return signature, plan.data
    data = st.data_identity(stores[0], instruments=plan.data_universe)
    others = plan.data.get("other_stores") or {}
    if others:
        data["other_stores"] = {freq: st.data_identity(Path(d["path"]), instruments=plan.data_universe)
                                for freq, d in others.items()}
    return signature, data


def _seedless_note(name: str, task: dict, seeds: Sequence[int], where: str) -> list[str]:
    """A note naming a model that takes no seed when the run has several seeds (its seeds are the same run)."""
    traits = model_traits(import_class(dict(task["model"]), "task.model", where))
    if traits.seed_param is not None or len(seeds) < 2:
        return []
    return [f"{name}: {traits.name} takes no seed (seed_param: null in its sidecars): its {len(seeds)} seeds differ "
            "only through the global random generators, which it may not use"]


def _reweighter_note(name: str, task: dict, where: str) -> list[str]:
    """Where the task's ``reweighter`` goes: to ``fit`` when it takes one (as Qlib's trainer), else said unused."""
    if task.get("reweighter") is None:
        return []
    import inspect

    cls = import_class(dict(task["model"]), "task.model", where)
    rw = task["reweighter"].get("class", "the reweighter") if isinstance(task["reweighter"], dict) else "the reweighter"
    if "reweighter" in inspect.signature(cls.fit).parameters:
        return [f"{name}: task.reweighter {rw} is passed to {cls.__qualname__}.fit (as Qlib's trainer passes it)"]
    return [f"{name}: task.reweighter {rw} is not used: {cls.__qualname__}.fit takes no reweighter (Qlib's trainer "
            f"drops it too)"]


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
