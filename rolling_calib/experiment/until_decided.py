"""Compute to a verdict, live: ``rolling-calib run CONFIG --until-decided``.

Trains ``rule.first`` seeds of every pipeline, then looks: scores the runs the look needs that were
not scored before (:class:`~rolling_calib.analysis.seed_panels.GrowingPanels`: each run read and
scored once, the panels grow by the new batch's seeds), builds each pipeline's
:class:`~rolling_calib.core.verdict.LossPanel` of the seeds trained so far, and lets the stopping
rule (:class:`rolling_calib.core.sequential.SequentialState`, the same object
:func:`~rolling_calib.core.sequential.replay` runs on finished panels) judge every open pair; then
trains the next ``rule.batch`` seeds only of the pipelines still in an open pair, until every pair
has stopped (better, worse, equivalent, undecidable, undetermined) or reached ``rule.max_seeds``.
The settings are one :class:`UntilDecided`: the :class:`~rolling_calib.core.stopping.StoppingRule`
and the metric that decides; the :class:`~rolling_calib.core.question.Question` the stops answer
is the comparison's.

The seeds are revealed in the order of the run's seed list (``0, 1, 2, ...``; the rule assumes
seeds are exchangeable, so this order is as good as a random one). Every look trains ordinary
units (seed ``s`` of pipeline ``p``, window ``w``, the pipeline's usual config hash), so the run
is resumable and bit-identical like any other: re-running the same command reuses the units,
replays the same looks on the same numbers and goes on where it stopped; a store that already
holds the full grid trains nothing. After every look the path (a
:class:`~rolling_calib.analysis.sequential_path.SequentialPath`: rule, question, looks, outcomes,
seeds used, compute against the full grid) is written to ``STORE/sequential.json`` with the one
atomic write (:func:`rolling_calib.analysis.sequential_path.write_path`).

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
                            RunOptions(store=Path("runs/demo"),
                                       until_decided=UntilDecided(rule=StoppingRule(max_seeds=10))))
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from rolling_calib.analysis.race_record import RaceRecord
from rolling_calib.analysis.seed_panels import GrowingPanels
from rolling_calib.analysis.sequential_path import (BatchRecord, NumberedLook, SequentialPath, UnitCount, stop_phrase,
                                                    write_path)
from rolling_calib.analysis.verdicts import VERDICT_METRICS
from rolling_calib.config.experiment import ExperimentConfig
from rolling_calib.core.label import Label
from rolling_calib.core.metric_table import BACKTEST_METRICS, DECIDE_BY, METRIC_TABLE
from rolling_calib.core.question import Question
from rolling_calib.core.sequential import SequentialState
from rolling_calib.core.stopping import DEFAULT_RULE, STOPPING_RULE, StoppingRule
from rolling_calib.core.validation import ConfigError, Constraint, Options, Worded, check
from rolling_calib.execution import store as st
from rolling_calib.execution.executors import Executor
from rolling_calib.execution.runner import Batch, RunPlan, RunSummary, run_batches
from rolling_calib.execution.units import UnitKey

__all__ = ["DECIDE_BY", "STOPS", "StoppingRule", "UntilDecided", "run_until_decided"]

#: What stops a run ``--until-decided``: the pairs' sequential rule, or a race of the pipelines to a best set.
STOPS = ("pairs", "race")

@dataclass(frozen=True, kw_only=True)
class UntilDecided:
    """A run ``--until-decided``: the stopping rule and the metric whose verdict stops a pair.

    Attributes
    ----------
    rule : StoppingRule
        Seeds at the first look, per look and at most (the full grid); spending, futility, margin.
    decide_by : {"ql", "cql", "ic", "excess_return", "excess_return_cost"}
        The metric whose verdict stops a pair (the excess returns: the workflow's backtest, run after
        each batch of seeds completes).
    stops : {"pairs", "race"}
        ``pairs``: the pairs' sequential rule over the experiment's ``compare`` pairs (or all pairs),
        :func:`run_until_decided`; ``race``: race the pipelines to a best set (each against the
        best, :func:`rolling_calib.experiment.race_live.run_race`; ``sweep``'s default).

    Examples
    --------
    >>> UntilDecided(rule=StoppingRule(max_seeds=10)).rule.first, UntilDecided().rule.max_seeds
    (3, 20)
    """

    rule: StoppingRule = DEFAULT_RULE
    decide_by: str = "ql"
    stops: str = "pairs"

    #: Each field's declared constraint.
    CONSTRAINTS: ClassVar[dict[str, Constraint]] = {
        "rule": STOPPING_RULE, "decide_by": Worded(Options(*DECIDE_BY), "'ql', 'cql' or 'ic'"),
        "stops": Options(*STOPS)}

    def __post_init__(self) -> None:
        for name, constraint in self.CONSTRAINTS.items():
            check(name, getattr(self, name), constraint)


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


def _path(state: SequentialState, plan: RunPlan, until: UntilDecided, *, ran: int,
          schedule: list[dict[str, Any]], unit: str) -> SequentialPath:
    """The run's :class:`SequentialPath` so far: rule, question, looks, seeds, units and CPU-s.

    ``schedule``: each batch asked for (pipeline, seeds) with when it was asked for and complete
    (UTC) and how many of its units this run trained: how the run went, the only part (with the
    CPU seconds) that is not the same on every run.
    """
    rule = until.rule
    used = state.used() if state.done else {n: min(state.n_seeds[n], rule.max_seeds) for n in state.names}
    numbers: dict[tuple[str, str], int] = {}
    looks = []
    for look in state.looks:
        numbers[look.pair] = numbers.get(look.pair, 0) + 1
        looks.append(NumberedLook(numbers[look.pair], look))
    n_windows = len(plan.windows)
    seconds = _unit_seconds(plan, used)
    return SequentialPath(
        metric=until.decide_by, rule=rule, question=state.question, orientation=state.orientation,
        seed_order=tuple(plan.seeds), done=state.done, looks=tuple(looks),
        open=tuple(" vs ".join(p) for p in state.open_pairs), seeds_used=used,
        units=UnitCount(used=sum(used.values()) * n_windows, full_grid=len(state.names) * rule.max_seeds * n_windows,
                        trained_by_this_run=ran),
        cpu_used=float(sum(seconds)),
        cpu_full_grid_estimate=float(np.mean(seconds) * len(state.names) * rule.max_seeds * n_windows)
        if seconds else None,
        schedule=tuple(BatchRecord.from_dict(entry) for entry in schedule),
        unit=unit,
    )


def run_until_decided(config: ExperimentConfig, plan: RunPlan, *, until: UntilDecided, executor: Executor,
                      question: Question, progress: bool) -> tuple[RunSummary, SequentialPath | RaceRecord]:
    """Train the seeds of ``plan`` (its full grid: ``until.rule.max_seeds`` seeds) look by look until every pair
    has stopped (``until.stops == "pairs"``) or the race has ended (``"race"``:
    :func:`rolling_calib.experiment.race_live.run_race`); every look answers ``question``.

    The caller holds the store's lock. Returns the summary of everything this call trained
    (``skipped``: units of the path that were already complete) and the path it recorded (the
    race's :class:`~rolling_calib.analysis.race_record.RaceRecord` for a race).

    Raises
    ------
    rolling_calib.core.validation.ConfigError
        ``rolling.stack_seeds > 1`` (a stack's members are fixed groups of the full seed list: a
        look that trains part of a group would give other numbers than the full grid).
    """
    if plan.stack_seeds > 1:
        raise ConfigError(f"{config.path or 'experiment'}: rolling.stack_seeds: --until-decided trains seeds in "
                          f"batches and needs 1, found {plan.stack_seeds}")
    if until.decide_by not in VERDICT_METRICS:
        raise ValueError(f"--decide-by: {until.decide_by!r} has no verdict")
    names = [p.name for p in plan.pipelines]
    pairs = [tuple(p) for p in config.compare if p[0] in names and p[1] in names] or None
    state = SequentialState(names, rule=until.rule, question=question,
                            orientation=METRIC_TABLE[until.decide_by].orientation, pairs=pairs)
    unbacktested = [p.name for p in plan.pipelines if p.backtest is None]
    if until.decide_by in BACKTEST_METRICS and unbacktested:   # before anything trains
        raise ConfigError(f"{config.path or 'experiment'}: --decide-by {until.decide_by}: the backtest's excess "
                          f"return decides, but {', '.join(unbacktested)} has no backtest (no PortAnaRecord in "
                          f"task.record, a minute store, or a strategy that holds the whole universe: see the plan's "
                          f"notes)")
    if until.stops == "race":
        from rolling_calib.experiment.race_live import run_race

        return run_race(config, plan, rule=until.rule, metric=until.decide_by, executor=executor, question=question,
                        progress=progress)
    t0 = time.perf_counter()
    driver = _Driver(config, plan, state, until, progress=progress)
    summary = run_batches(plan, executor=executor, next_batches=driver.next_batches, progress=progress)
    if not state.done:
        raise RuntimeError(f"until-decided: the run ended with pair(s) open: "
                           f"{', '.join(' vs '.join(p) for p in state.open_pairs)}")
    path = _path(state, plan, until, ran=summary.ran, schedule=driver.schedule, unit=driver.unit)
    write_path(plan.store, path)
    summary = summary.until_decided(units_used=path.units.used, seconds=time.perf_counter() - t0,
                                    note=f"until-decided: {path.units.used} of the full grid's "
                                         f"{path.units.full_grid} units")
    return summary, path


class _Driver:
    """The stopping rule between the runner's batches: judge each pair whose next look's seeds are in, ask for more.

    ``complete[name]``: the plan's first seeds of ``name`` complete in the store (its batches
    complete in order: a batch is asked for only after a look read the one before it);
    ``asked[name]``: the seeds asked for so far; ``panels``: every run scored once, the look's
    panels grown from them.
    """

    def __init__(self, config: ExperimentConfig, plan: RunPlan, state: SequentialState, until: UntilDecided, *,
                 progress: bool) -> None:
        self.config, self.plan, self.state, self.until, self.progress = config, plan, state, until, progress
        self.complete = {n: 0 for n in state.names}
        self.asked = {n: 0 for n in state.names}
        self.ran = 0
        self.schedule: list[dict[str, Any]] = []   # per batch: when it was asked for and complete (UTC), in order
        self._panels: GrowingPanels | None = None   # made at the first look (the runner writes the manifest first)
        self._unit: str | None = None

    def panels(self) -> GrowingPanels:
        if self._panels is None:
            self._panels = GrowingPanels(self.plan.store, pipelines=self.state.names, metric=self.until.decide_by,
                                         calibration=self.config.rolling.calibration, label=self.config.rolling.label)
        return self._panels

    @property
    def unit(self) -> str:
        """The deciding metric's unit against the label the looks score (e.g. ``"bp²"``; ``""`` for the IC metrics),
        read once the store's manifest is written, as ``compare`` reads it."""
        if self._unit is None:
            kind = self.panels().kind
            label = st.Store.open(self.plan.store).labels(self.state.names[0])[0].get(kind, Label(kind=kind))
            self._unit = METRIC_TABLE[self.until.decide_by].unit(label)
        return self._unit

    def _batch_words(self, batch: Batch) -> str:
        """``"wd0 seed(s) 3..4 (2 of them already in the store)"``: what a batch asks for and what it will train."""
        pipe = self.plan.pipeline(batch.pipeline)
        have = sum(all(st.is_complete(self.plan.store, UnitKey(batch.pipeline, seed, w), pipe.config_hash)
                       for w in range(len(self.plan.windows))) for seed in batch.seeds)
        there = (" (all already in the store)" if have == len(batch.seeds) else
                 f" ({have} of them already in the store)" if have else "")
        return f"{batch.pipeline} seed(s) {batch.seeds[0]}..{batch.seeds[-1]}{there}"

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
            try:
                panels = self.panels().panels({n: self.plan.seeds[:self.complete[n]] for n in names})
            except ValueError as exc:
                raise ValueError(f"until-decided: {exc} (read after its batch was trained)") from exc
            for pair in ready:
                look = state.look_pair(pair, panels)
                if self.progress and look.outcome != "open":
                    print(f"until-decided: {' vs '.join(look.pair)}: "
                          f"{stop_phrase(look, orientation=state.orientation, unit=self.unit)} at {look.seeds} seeds ({look.why})",
                          flush=True)
        out = []
        for name in state.open_names:
            need = state.n_seeds[name]
            if self.asked[name] < need:
                out.append(Batch(name, tuple(self.plan.seeds[self.asked[name]:need])))
                self.schedule.append({"pipeline": name, "seeds": list(out[-1].seeds), "asked_at": _now()})
                self.asked[name] = need
        if ready:
            write_path(self.plan.store, _path(state, self.plan, self.until, ran=self.ran, schedule=self.schedule,
                                              unit=self.unit))
        if self.progress and out:
            print(f"until-decided: next look needs {', '.join(self._batch_words(b) for b in out)}", flush=True)
        return out
