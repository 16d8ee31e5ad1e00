"""Compute to a verdict, live: ``rolling-calib run CONFIG --until-decided``.

Trains ``first`` seeds of every pipeline, then looks: scores the store, builds each pipeline's
:class:`~rolling_calib.core.verdict.LossPanel` of the seeds trained so far, and lets the stopping
rule (:class:`rolling_calib.core.sequential.SequentialState`, the same object
:func:`~rolling_calib.core.sequential.replay` runs on finished panels) judge every open pair; then
trains the next ``batch`` seeds only of the pipelines still in an open pair, until every pair has
stopped (better, worse, equivalent, undecidable, undetermined) or reached ``max_seeds``.

The seeds are revealed in the order of the run's seed list (``0, 1, 2, ...``; the rule assumes
seeds are exchangeable, so this order is as good as a random one). Every look trains ordinary
units (seed ``s`` of pipeline ``p``, window ``w``, the pipeline's usual config hash), so the run
is resumable and bit-identical like any other: re-running the same command reuses the units,
replays the same looks on the same numbers and goes on where it stopped; a store that already
holds the full grid trains nothing. After every look the path (settings, looks, outcomes, seeds
used, compute against the full grid) is written to ``STORE/sequential.json`` with the one atomic
write (:func:`rolling_calib.analysis.sequential_path.write_path`).

No lockstep: a pair's look ``k`` reads exactly the first ``first + (k - 1) * batch`` seeds of its
two pipelines (:meth:`~rolling_calib.core.sequential.SequentialState.look_pair`), so it is taken as
soon as those two pipelines' batches are in the store, whatever the other pipelines are doing; a
pair still open asks for its pipelines' next batch at once, and the executor (local pool or Ray)
submits those units while the other units run (:func:`rolling_calib.execution.runner.run_batches`).
Only the schedule changes: every look reads the same seeds as when the looks run one after another,
so the outcomes, the path and every unit's bytes are the same (``tests/execution/test_until_decided_ray.py``
checks it against the lockstep replay on Ray).

Usage (trains; ``tests/execution/test_until_decided.py`` runs it on a tiny store)::

    result = run_experiment(load_experiment("workflows/demo.yaml"),
                            RunOptions(store=Path("runs/demo"), until_decided=UntilDecided(max_seeds=10)))
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rolling_calib.analysis.scoring import score_store
from rolling_calib.analysis.sequential_path import write_path
from rolling_calib.analysis.verdicts import VERDICT_METRICS, loss_panel
from rolling_calib.config.experiment import ExperimentConfig
from rolling_calib.core.metric_table import METRIC_TABLE
from rolling_calib.core.resampling import Resampling
from rolling_calib.core.sequential import FUTILITY, SequentialState
from rolling_calib.core.validation import ConfigError
from rolling_calib.core.verdict import LossPanel
from rolling_calib.execution import store as st
from rolling_calib.execution.executors import Executor
from rolling_calib.execution.runner import Batch, RunPlan, RunSummary, run_batches
from rolling_calib.execution.units import UnitKey

__all__ = ["DECIDE_BY", "UntilDecided", "run_until_decided"]

#: Metrics a run can be decided by.
DECIDE_BY = ("ql", "cql", "ic")


@dataclass(frozen=True, kw_only=True)
class UntilDecided:
    """The stopping rule's settings of a run ``--until-decided``.

    Attributes
    ----------
    first, batch, max_seeds : int
        Seeds per pipeline at the first look, added per look, and the budget (the full grid).
    decide_by : {"ql", "cql", "ic"}
        The metric whose verdict stops a pair.
    margin : float or None
        Equivalence margin in the metric's unit (None: no equivalence stop).
    futility : float
        Stop a pair undetermined when its predictive chance to decide by ``max_seeds`` is below this
        (:data:`rolling_calib.core.sequential.FUTILITY`; 0: never).

    Examples
    --------
    >>> UntilDecided(max_seeds=10).first, UntilDecided().max_seeds
    (3, 20)
    """

    first: int = 3
    batch: int = 2
    max_seeds: int = 20
    decide_by: str = "ql"
    margin: float | None = None
    futility: float = FUTILITY

    def __post_init__(self) -> None:
        if self.decide_by not in DECIDE_BY:
            raise ValueError(f"--decide-by: expected one of {', '.join(DECIDE_BY)}, found {self.decide_by!r}")
        if self.first < 2 or self.batch < 1 or self.max_seeds < self.first:
            raise ValueError(f"--first >= 2, --batch >= 1 and --max-seeds >= --first expected, found "
                             f"--first {self.first}, --batch {self.batch}, --max-seeds {self.max_seeds}")
        if self.margin is not None and not self.margin > 0:
            raise ValueError(f"--margin: expected a positive number in the metric's unit, found {self.margin}")
        if not 0 <= self.futility <= 1:
            raise ValueError(f"--futility: expected a probability in [0, 1], found {self.futility}")


def _panels(days, plan: RunPlan, wanted: Mapping[str, int], metric: str) -> dict[str, LossPanel]:
    """Each wanted pipeline's panel of its first ``n`` seeds of the plan, rows in the plan's seed order."""
    panels = {}
    for name, n in wanted.items():
        panel = loss_panel(days, name, metric)
        seeds = plan.seeds[:n]
        have = [] if panel is None else panel.seeds.tolist()
        missing = [s for s in seeds if s not in have]
        if missing:
            raise ValueError(f"until-decided: {name} has no scored {metric} for seed(s) "
                             f"{', '.join(map(str, missing))} after training them")
        panels[name] = panel.select(seeds=np.array([have.index(s) for s in seeds]))
    return panels


def _unit_seconds(plan: RunPlan, used: Mapping[str, int]) -> list[float]:
    """The recorded training time (``total_s``) of every unit the path used."""
    out = []
    for name, n in used.items():
        for seed in plan.seeds[:n]:
            for w in plan.windows:
                side = st.sidecar(plan.store, UnitKey(name, seed, w.index))
                if side is not None and side.seconds is not None:
                    out.append(side.seconds)
    return out


def _now() -> str:
    return pd.Timestamp.now(tz="UTC").isoformat()


def _path(state: SequentialState, plan: RunPlan, rule: UntilDecided, *, ran: int, schedule: list[dict]) -> dict:
    """The JSON path: settings, looks, per pair its stop (with the look's number), seeds, units and CPU-s.

    ``schedule``: each batch asked for (pipeline, seeds) with when it was asked for and complete
    (UTC) and how many of its units this run trained: how the run went, the only part (with the
    CPU seconds) that is not the same on every run.
    """
    used = state.used() if state.done else {n: min(state.n_seeds[n], rule.max_seeds) for n in state.names}
    looks_of: dict[tuple[str, str], int] = {}
    looks = []
    for look in state.looks:
        looks_of[look.pair] = looks_of.get(look.pair, 0) + 1
        looks.append({**dataclasses.asdict(look), "pair": " vs ".join(look.pair), "look": looks_of[look.pair]})
    n_windows = len(plan.windows)
    units_used = sum(used.values()) * n_windows
    full_units = len(state.names) * rule.max_seeds * n_windows
    seconds = _unit_seconds(plan, used)
    cpu = {"used": float(sum(seconds))}
    if seconds:
        cpu["full_grid_estimate"] = float(np.mean(seconds) * full_units)
    return {
        "metric": rule.decide_by,
        "settings": state.settings(),
        "seed_order": list(plan.seeds),
        "done": state.done,
        "looks_done": state.n_looks,
        "outcomes": {" vs ".join(p): o for p, o in state.outcomes.items()},
        "open": [" vs ".join(p) for p in state.open_pairs],
        "stopped": {" vs ".join(p): {**dataclasses.asdict(look), "look": looks_of[p]}
                    for p, look in state.stopped.items()},
        "looks": looks,
        "seeds_used": used,
        "full_grid": rule.max_seeds,
        "units": {"used": units_used, "full_grid": full_units, "trained_by_this_run": ran},
        "cpu_seconds": cpu,
        "schedule": [dict(entry) for entry in schedule],
    }


def run_until_decided(config: ExperimentConfig, plan: RunPlan, *, rule: UntilDecided, executor: Executor,
                      resampling: Resampling, progress: bool) -> tuple[RunSummary, dict]:
    """Train the seeds of ``plan`` (its full grid: ``max_seeds`` seeds) look by look until every pair has stopped.

    The caller holds the store's lock. Returns the summary of everything this call trained
    (``skipped``: units of the path that were already complete) and the path it recorded.

    Raises
    ------
    rolling_calib.core.validation.ConfigError
        ``rolling.stack_seeds > 1`` (a stack's members are fixed groups of the full seed list: a
        look that trains part of a group would give other numbers than the full grid).
    """
    if plan.stack_seeds > 1:
        raise ConfigError(f"{config.path or 'experiment'}: rolling.stack_seeds: --until-decided trains seeds in "
                          f"batches and needs 1, found {plan.stack_seeds}")
    names = [p.name for p in plan.pipelines]
    pairs = [tuple(p) for p in config.compare if p[0] in names and p[1] in names] or None
    state = SequentialState(names, first=rule.first, batch=rule.batch, max_seeds=rule.max_seeds,
                            confidence=resampling.confidence, target=resampling.target,
                            orientation=METRIC_TABLE[rule.decide_by].orientation, margin=rule.margin, pairs=pairs,
                            futility=rule.futility)
    if rule.decide_by not in VERDICT_METRICS:
        raise ValueError(f"--decide-by: {rule.decide_by!r} has no verdict")
    t0 = time.perf_counter()
    driver = _Driver(config, plan, state, rule, progress=progress)
    summary = run_batches(plan, executor=executor, next_batches=driver.next_batches, progress=progress)
    if not state.done:
        raise RuntimeError(f"until-decided: the run ended with pair(s) open: "
                           f"{', '.join(' vs '.join(p) for p in state.open_pairs)}")
    path = _path(state, plan, rule, ran=summary.ran, schedule=driver.schedule)
    write_path(plan.store, path)
    units_used = path["units"]["used"]
    summary = RunSummary(store=plan.store, ran=summary.ran, skipped=units_used - summary.ran,
                         stale_moved=summary.stale_moved, seconds=time.perf_counter() - t0,
                         results=summary.results, corrupt_moved=summary.corrupt_moved,
                         notes=plan.notes + (f"until-decided: {units_used} of the full grid's "
                                             f"{path['units']['full_grid']} units", ))
    return summary, path


class _Driver:
    """The stopping rule between the runner's batches: judge each pair whose next look's seeds are in, ask for more.

    ``complete[name]``: the plan's first seeds of ``name`` complete in the store (its batches
    complete in order: a batch is asked for only after a look read the one before it);
    ``asked[name]``: the seeds asked for so far.
    """

    def __init__(self, config: ExperimentConfig, plan: RunPlan, state: SequentialState, rule: UntilDecided, *,
                 progress: bool) -> None:
        self.config, self.plan, self.state, self.rule, self.progress = config, plan, state, rule, progress
        self.complete = {n: 0 for n in state.names}
        self.asked = {n: 0 for n in state.names}
        self.ran = 0
        self.schedule: list[dict] = []   # per batch: when it was asked for and complete (UTC), in asking order

    def next_batches(self, batch: Batch | None, trained: int) -> list[Batch]:
        """Record ``batch`` complete, take every look it makes possible, and ask for the next batches."""
        state = self.state
        if batch is not None:
            self.complete[batch.pipeline] = self.plan.seeds.index(batch.seeds[-1]) + 1
            self.ran += trained
            entry = next(e for e in self.schedule if e["pipeline"] == batch.pipeline
                         and e["seeds"] == list(batch.seeds))
            entry.update(complete_at=_now(), trained=trained)
        ready = [p for p in state.open_pairs if all(self.complete[n] >= state.next_seeds(p) for n in p)]
        if ready:
            names = [n for n in state.names if any(n in p for p in ready)]
            scores = score_store(self.plan.store, calibration=self.config.rolling.calibration,
                                 label=self.config.rolling.label, pipelines=names)
            panels = _panels(scores.days, self.plan, {n: self.complete[n] for n in names}, self.rule.decide_by)
            for pair in ready:
                look = state.look_pair(pair, panels)
                if self.progress and look.outcome != "open":
                    print(f"until-decided: {' vs '.join(look.pair)}: {look.outcome} at {look.seeds} seeds "
                          f"({look.why})", flush=True)
        out = []
        for name in state.open_names:
            need = state.n_seeds[name]
            if self.asked[name] < need:
                out.append(Batch(name, tuple(self.plan.seeds[self.asked[name]:need])))
                self.schedule.append({"pipeline": name, "seeds": list(out[-1].seeds), "asked_at": _now()})
                self.asked[name] = need
        if ready:
            write_path(self.plan.store, _path(state, self.plan, self.rule, ran=self.ran, schedule=self.schedule))
        if self.progress and out:
            print(f"until-decided: training {', '.join(f'{b.pipeline} seed(s) {b.seeds[0]}..{b.seeds[-1]}' for b in out)}",
                  flush=True)
        return out
