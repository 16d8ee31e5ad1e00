"""Race a sweep live: ``rolling-calib sweep CONFIG --until-decided`` (``--stops race``, the default).

The race (:func:`rolling_calib.core.racing.race`: each configuration against the best, Hsu's MCB,
spent over the looks) run while the seeds train. The live race is a function of what the store
holds, so a killed run resumes to the same units and the same answer:

1. train the first look's seeds (``rule.first``, seeds ``0..first-1`` of the run's seed list) of
   every configuration;
2. replay the race on the seeds trained so far, revealed in the natural seed order
   (``race(..., seed_order=plan.seeds)``); it takes every look whose seeds are all in and says
   what the next look needs (``RaceResult.pending``: the configurations still in an unsettled pair
   and the seeds ``0..k-1`` each must have);
3. train exactly those units (the ones already complete are skipped), and go to 2 until the race
   ends (one configuration left, the set cannot shrink, or the budget ``rule.max_seeds`` spent).

A configuration eliminated at an earlier look keeps the seeds it had: only the kept ones get the
next look's. Every look reads exactly the first ``k`` seeds of the configurations it compares, so
re-running the command replays the same looks on the same numbers (the runs are read and scored
once, :class:`~rolling_calib.analysis.seed_panels.GrowingPanels`) and goes on where it stopped.
After every look the race so far is written to ``STORE/race.json``
(:func:`rolling_calib.analysis.race_record.write_race`); with ``progress`` each look is printed in
one line (:func:`rolling_calib.analysis.race_record.look_line`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from rolling_calib.analysis.race_record import RaceRecord, look_line, write_race
from rolling_calib.analysis.seed_panels import GrowingPanels
from rolling_calib.config.experiment import ExperimentConfig
from rolling_calib.core.metric_table import METRIC_TABLE
from rolling_calib.core.question import QUESTION, Question
from rolling_calib.core.racing import RaceResult, race
from rolling_calib.core.stopping import STOPPING_RULE, StoppingRule
from rolling_calib.core.validation import Options, validate_params
from rolling_calib.core.verdict import LossPanel
from rolling_calib.execution import store as st
from rolling_calib.execution.executors import Executor
from rolling_calib.execution.runner import Batch, RunPlan, RunSummary, run_batches

__all__ = ["next_look", "run_race"]


@validate_params({"rule": STOPPING_RULE, "question": QUESTION, "orientation": Options("lower", "higher")})
def next_look(panels: Mapping[str, LossPanel], *, rule: StoppingRule, question: Question, orientation: str,
              seed_order: Sequence[int]) -> tuple[RaceResult, dict[str, tuple[int, ...]]]:
    """The race on the seeds in ``panels`` and the seeds to train next: ``(race so far, {name: seeds})``.

    ``panels`` hold, per configuration, the seeds trained so far (a prefix of ``seed_order``; they
    may differ in number). The second value names, for each configuration the next look compares,
    the seeds of ``seed_order`` it lacks (empty when the race ended or nothing is missing).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> def panel(shift, n):
    ...     return LossPanel(seeds=np.arange(n), times=np.arange(30), total=shift + rng.normal(size=(n, 30)),
    ...                      weight=np.ones((n, 30)))
    >>> rule = StoppingRule(first=3, batch=2, max_seeds=7)
    >>> result, need = next_look({"a": panel(0.0, 3), "b": panel(0.0, 3), "c": panel(0.0, 3)}, rule=rule,
    ...                          question=Question(), orientation="lower", seed_order=range(7))
    >>> len(result.looks), result.stop, sorted(need.values())
    (1, '', [(3, 4), (3, 4)])
    """
    result = race(panels, rule=rule, question=question, orientation=orientation, seed_order=list(seed_order))
    order = list(seed_order)
    need = {}
    for name, k in result.pending.items():
        held = set(panels[name].seeds.tolist())
        missing = tuple(s for s in order[:k] if s not in held)
        if missing:
            need[name] = missing
    return result, need


def run_race(config: ExperimentConfig, plan: RunPlan, *, rule: StoppingRule, metric: str, executor: Executor,
             question: Question, progress: bool) -> tuple[RunSummary, RaceRecord]:
    """Train the seeds of ``plan`` look by look as the race asks for them, until it ends (module docstring).

    The caller holds the store's lock and checked the plan (``stack_seeds`` 1, a verdict metric).
    Returns the summary of everything this call trained (``skipped``: units the race read that were
    already complete) and the race's record (also in ``STORE/race.json``).
    """
    t0 = time.perf_counter()
    driver = _Driver(config, plan, rule=rule, metric=metric, question=question, progress=progress)
    summary = run_batches(plan, executor=executor, next_batches=driver.next_batches, progress=progress)
    record = driver.record
    if record is None or not record.race.stop:
        raise RuntimeError("until-decided: the race ended its batches before it ended "
                           f"({'no look taken' if record is None else 'waiting for ' + str(record.race.pending)})")
    record = RaceRecord(race=record.race, metric=metric, unit=record.unit, windows=record.windows,
                        trained_by_this_run=driver.ran)
    write_race(plan.store, record)
    summary = summary.until_decided(units_used=record.units_used, seconds=time.perf_counter() - t0,
                                    note=f"until-decided (race): {record.units_used} of the full grid's "
                                         f"{record.units_full_grid} units")
    return summary, record


class _Driver:
    """The race between the runner's batches: once a look's batches are all in, replay the race and ask for the next.

    ``complete[name]``: the plan's first seeds of ``name`` complete in the store, as this run
    confirmed them (batch by batch: a resumed run re-confirms them, skipping their units).
    """

    def __init__(self, config: ExperimentConfig, plan: RunPlan, *, rule: StoppingRule, metric: str,
                 question: Question, progress: bool) -> None:
        self.config, self.plan, self.rule, self.metric = config, plan, rule, metric
        self.question, self.progress = question, progress
        self.names = [p.name for p in plan.pipelines]
        self.complete = {n: 0 for n in self.names}
        self.asked = {n: 0 for n in self.names}
        self.ran = 0
        self.shown = 0
        self.record: RaceRecord | None = None
        self._panels: GrowingPanels | None = None
        self._unit: str | None = None

    def panels(self) -> GrowingPanels:
        if self._panels is None:
            self._panels = GrowingPanels(self.plan.store, pipelines=self.names, metric=self.metric,
                                         calibration=self.config.rolling.calibration, label=self.config.rolling.label)
        return self._panels

    def unit(self) -> str:
        """The metric's unit on this store's label (``""`` when the label does not say)."""
        if self._unit is None:
            growing = self.panels()
            label = st.Store.open(self.plan.store).labels(self.names[0])[0].get(growing.kind)
            self._unit = METRIC_TABLE[self.metric].unit(label) if label is not None else ""
        return self._unit

    def _ask(self, need: Mapping[str, int]) -> list[Batch]:
        out = []
        for name in self.names:
            k = need.get(name, 0)
            if self.asked[name] < k:
                out.append(Batch(name, tuple(self.plan.seeds[self.asked[name]:k])))
                self.asked[name] = k
        return out

    def next_batches(self, batch: Batch | None, trained: int) -> list[Batch]:
        """Record ``batch`` complete; once the look's batches are all in, replay the race and ask for the next."""
        if batch is not None:
            self.complete[batch.pipeline] = self.plan.seeds.index(batch.seeds[-1]) + 1
            self.ran += trained
        if batch is None:
            return self._ask({n: min(self.rule.first, self.rule.max_seeds) for n in self.names})
        if any(self.asked[n] > self.complete[n] for n in self.names):
            return []   # the look's other batches are still running
        wanted = {n: self.plan.seeds[:self.complete[n]] for n in self.names}
        try:
            panels = self.panels().panels(wanted)
        except ValueError as exc:
            raise ValueError(f"until-decided: {exc} (read after its batch was trained)") from exc
        result, need = next_look(panels, rule=self.rule, question=self.question,
                                 orientation=METRIC_TABLE[self.metric].orientation, seed_order=self.plan.seeds)
        self.record = RaceRecord(race=result, metric=self.metric, unit=self.unit(), windows=len(self.plan.windows),
                                 trained_by_this_run=self.ran)
        write_race(self.plan.store, self.record)
        if self.progress:
            for look in result.looks[self.shown:]:
                print("race: " + look_line(look, metric=self.metric, unit=self.record.unit,
                                           configurations=len(self.names), full_grid=result.full_grid), flush=True)
            self.shown = len(result.looks)
        if result.stop:
            return []
        out = self._ask({n: k for n, k in result.pending.items()})
        if self.progress and out:
            print("race: next look needs " + ", ".join(
                f"{b.pipeline} seed {b.seeds[0]}" if len(b.seeds) == 1 else
                f"{b.pipeline} seeds {b.seeds[0]}..{b.seeds[-1]}" for b in out), flush=True)
        if not out:   # cannot happen: pending names seeds no configuration holds yet
            raise RuntimeError(f"until-decided: the race waits for {result.pending} but every seed is trained")
        return out
