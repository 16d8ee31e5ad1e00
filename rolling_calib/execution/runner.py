"""The runner: plan the grid pipelines x seeds x windows, execute units, fill the store.

Qlib is driven only through the adapter (:mod:`rolling_calib.qlib_adapter`, the one layer that imports
it), which the units call; the runner plans, schedules and records. A run has three concerns, one module each:

* plan policy -- :mod:`rolling_calib.execution.planning`: :func:`plan_run` builds the picklable
  :class:`RunPlan` (windows, config hashes, seeds, labels) and checks every contract the runner
  relies on before any unit trains (:func:`rolling_calib.qlib_adapter.training.check_runner_contract`:
  a model that can neither load a checkpoint nor ``finetune`` is refused in fine-tune mode);
* unit execution -- :mod:`rolling_calib.execution.unit_execution`: :func:`execute_unit` trains one
  window of one seed of one pipeline with Qlib's own machinery and writes it into the store
  (:mod:`rolling_calib.execution.store`), sidecar last;
* store bookkeeping -- :mod:`rolling_calib.execution.bookkeeping`: pending, stale and damaged units,
  the manifest, coverage of the evaluation period;
* the per-seed backtests -- :mod:`rolling_calib.execution.backtests`: once a seed's windows are
  complete, the workflow's backtest over its joined predictions (re-run only when a backtest
  setting or one of its units changed).

This module runs a plan: :func:`run_plan` holds the store's lock, schedules the pending units
(or seed stacks) on an executor with their fine-tune dependencies, draws the progress board and
records the run's history. The names of the three modules stay importable from here.

Both labels of every pipeline are described at plan time from its handler config
(:func:`rolling_calib.qlib_adapter.labels.describe_labels`) and recorded in the manifest
(``pipelines.<name>.labels``) and in every unit's sidecar (``labels``, and ``label_columns``:
which column holds which kind).

Usage (trains; ``tests/execution/test_runner_e2e.py`` runs it on a tiny store)::

    plan = plan_run(load_experiment("workflows/demo.yaml"), store=Path("runs/demo"))
    summary = run_plan(plan, executor=LocalExecutor(workers=2))
    summary.ran, summary.skipped          # (40, 0)
"""

from __future__ import annotations

import dataclasses
import sys
import time
import warnings
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from rolling_calib.execution import store as st
from rolling_calib.execution.backtests import BacktestSummary, run_backtests
from rolling_calib.execution.bookkeeping import CorruptMove, check_store_coverage, pending_units, write_run_manifest
from rolling_calib.execution.executors import Executor, UnitKey, UnitTask
from rolling_calib.execution.lock import StoreLock, clean_orphan_temporaries
from rolling_calib.execution.planning import PipelinePlan, RunPlan, default_threads, plan_run
from rolling_calib.execution.progress import ProgressBoard
from rolling_calib.execution.unit_execution import UnitResult, execute, execute_stack, execute_unit
from rolling_calib.execution.units import StackKey, WindowKey
from rolling_calib.qlib_adapter.training import unit_task, window_task

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
    "Batch",
    "run_batches",
    "check_store_coverage",
    "default_threads",
    "pending_units",
    "CorruptMove",
    "unit_task",
]


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
    backtests: BacktestSummary = field(default_factory=BacktestSummary)  # the per-seed backtests run and skipped

    def until_decided(self, *, units_used: int, seconds: float, note: str) -> RunSummary:
        """This batch run's summary as an until-decided run's: ``units_used`` units the rule read (those not
        trained by this run ``skipped``), its total ``seconds``, and ``note`` after the plan's notes."""
        return dataclasses.replace(self, skipped=units_used - self.ran, seconds=seconds, notes=self.notes + (note,))

    @property
    def other_data(self) -> list[UnitKey]:
        """Units of this run that read other data than the plan's (the data changed during the run)."""
        return sorted(k for k, r in self.results.items() if r.other_data)

    def data_warning(self) -> str | None:
        """The warning when units of this run read other data than the run planned with (else None)."""
        other = self.other_data
        if not other:
            return None
        named = ", ".join(k.slug() for k in other[:6]) + (f" and {len(other) - 6} more" if len(other) > 6 else "")
        return (f"WARNING: the data changed during this run: {len(other)} of its {self.ran} unit(s) read other data "
                f"than the run planned with ({named}); 'rolling-calib compare' names which units read which data. "
                f"Re-run 'rolling-calib run' on {self.store} to recompute every unit on the current data")

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (for ``rolling-calib run --json``)."""
        return {
            "store": str(self.store),
            "notes": list(self.notes),
            "units_ran": self.ran,
            "units_skipped": self.skipped,
            "stale_units_moved": self.stale_moved,
            "corrupt_units_moved": [k.slug() for k in self.corrupt_moved],
            "units_read_other_data": [k.slug() for k in self.other_data],
            "seconds": round(self.seconds, 3),
            **self.backtests.to_dict(),
            "rows_dropped_unlabelled": sum(r.dropped for r in self.results.values()),
            "units": [
                {"unit": k.slug(), "rows": r.rows, "rows_dropped_unlabelled": r.dropped,
                 "seconds": round(r.seconds, 3), "ql": r.ql}
                for k, r in sorted(self.results.items())
            ],
        }



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


def _prepare_store(plan: RunPlan, *, progress: bool) -> None:
    """Before any unit: sweep an interrupted write's temporaries, print the plan's notes.

    (A moved or copied store's MLflow database is re-pointed at its own files by the caller, which holds the
    store's lock: :func:`rolling_calib.experiment.flow.run_experiment`.)
    """
    orphans = clean_orphan_temporaries(plan.store)
    if orphans:
        warnings.warn(f"{plan.store}: removed {len(orphans)} temporary file(s) left by an interrupted write "
                      f"(e.g. {orphans[0]})", stacklevel=4)
    if progress:
        for note in plan.notes:
            print(f"note: {note}", file=sys.stderr)


def _planned_tasks(plan: RunPlan, executor: Executor) -> tuple[list[UnitTask], list[UnitKey], int, list]:
    """Write the plan's manifest, move stale and corrupt units aside (each corrupt one said on stderr) and cut the
    pending units into tasks: ``(tasks, units they write, stale count, corrupt moves)``."""
    write_run_manifest(plan)
    pending, _, stale, corrupt = pending_units(plan)
    for move in corrupt:
        print(f"rolling-calib run: {move.line()}", file=sys.stderr)
    tasks = _tasks(plan, pending, parallel=_parallel_units(executor))
    return tasks, [unit for t in tasks for unit in _units_of(t.key)], stale, corrupt


def _run_locked(plan: RunPlan, *, executor: Executor, progress: bool) -> RunSummary:
    t0 = time.perf_counter()
    _prepare_store(plan, progress=progress)
    tasks, units, stale, corrupt = _planned_tasks(plan, executor)
    skipped = len(plan.keys()) - len(units)  # a stack retrains its complete members too (same numbers)
    if tasks and hasattr(executor, "connect"):  # Ray says what it starts before the bars are drawn, not across them
        executor.connect()
    with ProgressBoard(total=len(plan.keys()), done=skipped, left=Counter(u.pipeline for u in units),
                       workers=_parallel_units(executor), enabled=progress) as board:

        def on_done(key: UnitKey | StackKey, result: UnitResult | tuple[UnitResult, ...]) -> None:
            finished = result if isinstance(result, tuple) else (result,)
            board.unit_done(key, [(r.key.pipeline, r.seconds) for r in finished])

        lines = {"on_progress": board.on_event} if board.nested else {}  # executors of old take on_done only
        outcome = executor.run(tasks, partial(execute, plan), on_done=on_done, **lines) if tasks else {}
    results = {r.key: r for value in outcome.values() for r in (value if isinstance(value, tuple) else (value,))}
    check_store_coverage(plan)
    backtests = run_backtests(plan, progress=progress)   # each seed's windows joined, the workflow's backtest once
    summary = RunSummary(
        store=plan.store,
        ran=len(results),
        skipped=skipped,
        stale_moved=stale,
        seconds=time.perf_counter() - t0,
        results=dict(results),
        corrupt_moved=[move.key for move in corrupt],
        notes=plan.notes,
        backtests=backtests,
    )
    _record_history(plan, summary, executor)
    _say_data_warning(summary)
    return summary


def _say_data_warning(summary: RunSummary) -> None:
    """Print :meth:`RunSummary.data_warning` on stderr (a loud line, whatever the progress setting)."""
    warning = summary.data_warning()
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Batch:
    """Seeds of one pipeline a fed run trains together, every window of each (a look's batch of ``--until-decided``).

    >>> Batch("wd0", (3, 4)).keys(2)
    [UnitKey(pipeline='wd0', seed=3, window=0), UnitKey(pipeline='wd0', seed=3, window=1), UnitKey(pipeline='wd0', seed=4, window=0), UnitKey(pipeline='wd0', seed=4, window=1)]
    """

    pipeline: str
    seeds: tuple[int, ...]

    def keys(self, n_windows: int) -> list[UnitKey]:
        """The batch's units, seed-major."""
        return [UnitKey(self.pipeline, s, w) for s in self.seeds for w in range(n_windows)]


#: ``next_batches(batch, trained)``: told that ``batch`` is complete in the store (``trained`` of its units by
#: this run; ``(None, 0)`` at the start), returns the batches to train next.
NextBatches = Callable[[Batch | None, int], Sequence[Batch]]


def run_batches(plan: RunPlan, *, executor: Executor, next_batches: NextBatches, progress: bool = True) -> RunSummary:
    """Run the units of ``plan`` batch by batch, each batch asked for as the batches before it complete.

    ``next_batches(None, 0)`` names the first batches; each time a batch is complete in the store
    (its units trained, or complete already) and its coverage checked, ``next_batches(batch,
    trained)`` names more, whose units go to the executor at once while the other units run
    (the executor's ``feed``: no lockstep). A batch trains exactly the units :func:`run_plan`
    would for the plan cut to its pipeline and seeds (stale and damaged units moved aside and
    recomputed alike), so the store ends the same as when the batches run one after another.
    The run ends when nothing runs and no batch is asked for.

    Returns
    -------
    RunSummary
        Of every unit of every batch (``skipped``: complete already).
    """
    with StoreLock(plan.store):
        return _run_batches_locked(plan, executor=executor, next_batches=next_batches, progress=progress)


def _run_batches_locked(plan: RunPlan, *, executor: Executor, next_batches: NextBatches,
                        progress: bool) -> RunSummary:
    t0 = time.perf_counter()
    _prepare_store(plan, progress=progress)
    waiting: dict[Batch, set[UnitKey]] = {}   # batch -> its units still running or queued
    batch_of: dict[UnitKey, Batch] = {}
    counts = {"skipped": 0, "stale": 0}
    corrupt: list[CorruptMove] = []
    seeds: dict[int, None] = {}
    added: list[tuple[int, int, Counter]] = []   # (total, done, left) of the batches before the board is drawn
    board: ProgressBoard | None = None

    def sub_plan(batch: Batch) -> RunPlan:
        return dataclasses.replace(plan, pipelines=(plan.pipeline(batch.pipeline),), seeds=tuple(batch.seeds))

    def schedule(batches: Sequence[Batch]) -> list[UnitTask]:
        tasks: list[UnitTask] = []
        todo = deque(batches)
        while todo:
            batch = todo.popleft()
            sub = sub_plan(batch)
            seeds.update(dict.fromkeys(batch.seeds))
            new, units, stale, moved = _planned_tasks(sub, executor)
            done = len(sub.keys()) - len(units)
            counts["skipped"] += done
            counts["stale"] += stale
            corrupt.extend(moved)
            if board is None:
                added.append((len(sub.keys()), done, Counter(u.pipeline for u in units)))
            else:
                board.add(total=len(sub.keys()), done=done, left=Counter(u.pipeline for u in units))
            if units:
                waiting[batch] = set(units)
                batch_of.update(dict.fromkeys(units, batch))
                tasks += new
            else:
                check_store_coverage(sub)
                backtest(sub)
                todo.extend(next_batches(batch, 0))
        return tasks

    trained: Counter = Counter()
    backtests = BacktestSummary()

    def backtest(sub: RunPlan) -> None:   # a batch complete: its seeds' backtests before the look that reads them
        done = run_backtests(sub, progress=progress)
        backtests.ran.extend(done.ran)
        backtests.skipped += done.skipped
        backtests.seconds += done.seconds

    def feed(key: UnitKey | StackKey, result: UnitResult | tuple[UnitResult, ...]) -> list[UnitTask]:
        complete = []
        for r in result if isinstance(result, tuple) else (result,):
            batch = batch_of.pop(r.key)
            trained[batch] += 1
            waiting[batch].discard(r.key)
            if not waiting[batch]:
                del waiting[batch]
                complete.append(batch)
        more: list[Batch] = []
        for batch in complete:
            check_store_coverage(sub_plan(batch))
            backtest(sub_plan(batch))
            more += next_batches(batch, trained.pop(batch))
        return schedule(more)

    tasks = schedule(next_batches(None, 0))
    if tasks and hasattr(executor, "connect"):
        executor.connect()
    total = sum(a[0] for a in added)
    with ProgressBoard(total=total, done=sum(a[1] for a in added), left=sum((a[2] for a in added), Counter()),
                       workers=_parallel_units(executor), enabled=progress) as board:

        def on_done(key: UnitKey | StackKey, result: UnitResult | tuple[UnitResult, ...]) -> None:
            finished = result if isinstance(result, tuple) else (result,)
            board.unit_done(key, [(r.key.pipeline, r.seconds) for r in finished])

        lines = {"on_progress": board.on_event} if board.nested else {}
        outcome = executor.run(tasks, partial(execute, plan), on_done=on_done, feed=feed, **lines) if tasks else {}
    results = {r.key: r for value in outcome.values() for r in (value if isinstance(value, tuple) else (value,))}
    if waiting:   # every unit ran: a batch still waiting would be a bookkeeping error
        raise RuntimeError(f"run_batches: batch(es) {', '.join(b.pipeline for b in waiting)} never completed")
    summary = RunSummary(store=plan.store, ran=len(results), skipped=counts["skipped"], stale_moved=counts["stale"],
                         seconds=time.perf_counter() - t0, results=dict(results),
                         corrupt_moved=[move.key for move in corrupt], notes=plan.notes, backtests=backtests)
    _record_history(dataclasses.replace(plan, seeds=tuple(seeds)), summary, executor)
    _say_data_warning(summary)
    return summary


def _units_of(key: UnitKey | StackKey) -> list[UnitKey]:
    """The units a task writes."""
    return key.units() if isinstance(key, (StackKey, WindowKey)) else [key]


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


def _tasks(plan: RunPlan, pending: Sequence[UnitKey], *, parallel: int | None = None) -> list[UnitTask]:
    """The executor's tasks for ``pending`` units: the units themselves, a window's seeds, or their seed stacks.

    With ``stack_seeds > 1`` a stack (fixed seed group, :meth:`RunPlan.seed_groups`) is scheduled
    for a window when any of its units is pending, and retrains all its members, so that the
    pending ones get the numbers an uninterrupted run gives them. In fine-tune mode a task waits
    for the task of its predecessor window when that one is scheduled too.

    Otherwise, given ``parallel`` (units the executor runs at once), the pending seeds of a window
    go to one worker together (:class:`~rolling_calib.execution.units.WindowKey`: one after another,
    each its own unit, the window's data set built once): fixed chunks of the seed list, as large as
    leaves at least two tasks per worker to start with (:func:`_chunk_size`). Without it, one task per unit.
    """
    if plan.stack_seeds == 1 and parallel is None:
        pending_set = set(pending)
        return [UnitTask(key, after=before if (before := plan.predecessor(key)) in pending_set else None)
                for key in pending]
    wanted = {(key.pipeline, key.window, key.seed) for key in pending}
    if plan.stack_seeds > 1:
        groups, make = plan.seed_groups(), StackKey
    else:
        cells = Counter((key.pipeline, key.window) for key in pending)   # pending seeds per (pipeline, window)
        at_once = len({p for p, _ in cells}) if plan.mode == "finetune" else len(cells)
        size = _chunk_size(max(cells.values(), default=1), at_once=at_once, parallel=parallel)
        groups = [tuple(plan.seeds[i:i + size]) for i in range(0, len(plan.seeds), size)]
        make = WindowKey
    tasks, scheduled = [], {}
    for p in plan.pipelines:
        for group in groups:
            for w in plan.windows:
                members = group if make is StackKey else tuple(s for s in group if (p.name, w.index, s) in wanted)
                if not any((p.name, w.index, seed) in wanted for seed in members):
                    continue
                key = make(p.name, members, w.index) if make is StackKey or len(members) > 1 else \
                    UnitKey(p.name, members[0], w.index)   # one seed: the unit itself
                before = scheduled.get((p.name, group, w.index - 1))
                tasks.append(UnitTask(key, after=before if plan.mode == "finetune" else None))
                scheduled[(p.name, group, w.index)] = key
    return tasks


def _chunk_size(seeds: int, *, at_once: int, parallel: int) -> int:
    """Seeds of a window per task: the most that leave ``2 * parallel`` tasks startable at once (1 when none do).

    ``at_once``: (pipeline, window) cells whose tasks can start together (the pipelines in fine-tune
    mode, where window k waits for k - 1; pipelines x windows from scratch).

    >>> _chunk_size(10, at_once=4, parallel=2), _chunk_size(10, at_once=1, parallel=2), _chunk_size(3, at_once=8, parallel=2)
    (10, 3, 3)
    """
    for size in range(max(seeds, 1), 0, -1):
        if at_once * -(-seeds // size) >= 2 * parallel:
            return size
    return 1


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
