"""Store bookkeeping of a run: which units are pending, the manifest, coverage of the evaluation period.

What the runner reads from and records in the store around the units it trains:
:func:`pending_units` (complete, stale and damaged units; fine-tune chains), :func:`write_run_manifest`
(every pipeline's hashes, task, schedule and labels), :func:`check_store_coverage` (each
(pipeline, seed) tiles its test segments exactly). The files and their rules:
:mod:`rolling_calib.execution.store`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rolling_calib.core.fingerprint import stable_hash
from rolling_calib.core.schedule import CoverageError, check_coverage
from rolling_calib.execution import store as st
from rolling_calib.execution.planning import RunPlan
from rolling_calib.execution.units import UnitKey
from rolling_calib.qlib_adapter.session import store_calendar

__all__ = ["CorruptMove", "pending_units", "write_run_manifest", "check_store_coverage"]


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
        damage = st.checkpoint_damage(plan.store, before.key, before.sidecar)
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


def write_run_manifest(plan: RunPlan) -> None:
    """Record the plan in ``STORE/manifest.json``: per pipeline its hashes, task, windows, seeds and labels."""
    shared_hash = _shared_hash(plan)
    entries = {
        p.name: {
            "config_hash": p.config_hash,
            "shared_hash": shared_hash,
            "task": p.task,
            "windows": [w.to_dict() for w in plan.windows],
            "purge": dict(plan.purge),
            "mode": plan.mode,
            "seeds": list(plan.seeds),
            "calibration": plan.experiment["rolling"]["calibration"],
            "label": plan.label,
            "labels": {kind: lab.to_dict() for kind, lab in p.labels.items()},
            "backtest": ({"hash": p.backtest_hash, "spec": p.backtest} if p.backtest is not None else
                         {"hash": None, "spec": None, "refused": p.backtest_refused} if p.backtest_refused else None),
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
                first, last = pd.Timestamp(side.first_prediction), pd.Timestamp(side.last_prediction)
                if first < w.test.start or last > w.test.end:
                    raise CoverageError(f"coverage: unit {key.slug()} has predictions outside {w.test.as_tuple()}")
                if first.normalize() != w.test.start.normalize() or last.normalize() != w.test.end.normalize():
                    raise CoverageError(
                        f"coverage: unit {key.slug()} predicts {first} .. {last}, "
                        f"not the whole test segment {w.test.as_tuple()} (first and last session)"
                    )
