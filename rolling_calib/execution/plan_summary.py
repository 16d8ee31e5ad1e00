"""What a run will do, before it does it: units, windows with their dates, data size, estimated compute.

``rolling-calib run --dry-run`` (and ``sweep --dry-run``) print this and train nothing; a real run
prints the same plan first (stderr). The estimate follows the method of
``bench/estimate_paper_compute.py``: measured throughput times the work left. The work of a unit
is the rows its window reads (instruments x bars from the normaliser's fit start to the test end);
the throughput is measured on this store's completed units of the same pipeline (else of the same
model class): their rows over their seconds (build + fit + predict, from the sidecars). Without a
completed unit nothing has been measured and the plan says so (the estimate appears after the
first unit, or with ``--dry-run`` again then) rather than guessing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rolling_calib.core.jsonable import fields_dict
from rolling_calib.core.schedule import Window
from rolling_calib.execution import store as st
from rolling_calib.execution.manifest import Sidecar
from rolling_calib.execution.planning import RunPlan

__all__ = ["PlanSummary", "format_plan", "plan_summary", "skipped_records", "window_rows"]


@dataclass(frozen=True)
class PlanSummary:
    """Result of :func:`plan_summary` (JSON: :meth:`to_dict`)."""

    store: str
    pipelines: list[str]
    seeds: list[int]
    mode: str
    units: int
    done: int
    instruments: int
    windows: list[dict[str, Any]]
    workers: int
    notes: list[str] = field(default_factory=list)   # the plan's notes (e.g. the schedule chosen for the file)
    purge: dict[str, Any] = field(default_factory=dict)   # bars dropped before each next segment, and why
    # per pipeline: units left, measured rows/s (None: not measured), from what, estimated seconds left
    estimate: dict[str, dict[str, Any]] = field(default_factory=dict)
    # run --until-decided: the grid above is the worst case; what the first look trains and how it goes on
    until_decided: str = ""

    @property
    def left(self) -> int:
        return self.units - self.done

    def cpu_seconds(self) -> float | None:
        """Estimated CPU-seconds of the units left (None: some pipeline with units left is not measured)."""
        parts = [e["seconds_left"] for e in self.estimate.values() if e["units_left"]]
        return None if any(p is None for p in parts) else float(sum(parts))

    def to_dict(self) -> dict[str, Any]:
        return {**fields_dict(self), "left": self.left, "cpu_seconds": self.cpu_seconds()}


def window_rows(window: Window, calendar: pd.DatetimeIndex, instruments: int) -> dict[str, int]:
    """Rows of each segment of ``window``: bars of the calendar inside it times ``instruments``.

    ``read`` spans the normaliser's fit start to the test end (what the unit loads).

    >>> from rolling_calib.core.schedule import Segment
    >>> cal = pd.bdate_range("2018-01-01", "2018-03-30")
    >>> seg = lambda a, b: Segment(pd.Timestamp(a), pd.Timestamp(b))
    >>> w = Window(0, seg("2018-01-01", "2018-01-31"), seg("2018-01-01", "2018-01-31"), None, seg("2018-02-01", "2018-02-28"))
    >>> window_rows(w, cal, 10)
    {'train': 230, 'valid': 0, 'test': 200, 'read': 430}
    """
    def count(start: pd.Timestamp, end: pd.Timestamp) -> int:   # a Segment holds its first and last bar
        return int(((calendar >= start) & (calendar <= end)).sum()) * instruments

    return {"train": count(window.train.start, window.train.end),
            "valid": 0 if window.valid is None else count(window.valid.start, window.valid.end),
            "test": count(window.test.start, window.test.end),
            "read": count(window.fit.start, window.test.end)}


def _instruments(qlib_init: dict, task: dict) -> int:
    """Instruments the task's universe lists in the store (``instruments/<market>.txt``; 0 when unknown)."""
    uri = qlib_init.get("provider_uri")
    root = Path(next(iter(uri.values())) if isinstance(uri, dict) else uri).expanduser()
    market = (st.task_universe(task) or ["all"])[0]
    path = root / "instruments" / f"{market.lower()}.txt"
    if not path.is_file():
        return 0
    return len({line.split("\t")[0].upper() for line in path.read_text().splitlines() if line.strip()})


def _sidecars(plan: RunPlan) -> dict[Any, Sidecar]:
    """The sidecars of the plan's units that are complete under the current hashes (files not verified: the run
    verifies them before it skips one)."""
    out = {}
    for key in plan.keys():
        try:
            status = st.unit_status(plan.store, key, plan.pipeline(key.pipeline).config_hash, verify=False)
        except (OSError, ValueError):   # a broken sidecar: the run moves it aside and recomputes the unit
            continue
        if status.complete and status.sidecar is not None:
            out[key] = status.sidecar
    return out


def _measured(done: dict[Any, Sidecar], rows: dict[int, int]) -> dict[str, list[tuple[int, float]]]:
    """Per pipeline, (rows read, seconds) of its completed units in the store."""
    out: dict[str, list[tuple[int, float]]] = {}
    for key, record in done.items():
        seconds = record.compute_seconds or 0.0
        if seconds > 0 and rows.get(key.window):
            out.setdefault(key.pipeline, []).append((rows[key.window], seconds))
    return out


def plan_summary(plan: RunPlan, calendar: pd.DatetimeIndex, *, workers: int = 1) -> PlanSummary:
    """What ``plan`` will do on this store: units (done and left), windows, rows, estimated compute."""
    instruments = _instruments(plan.qlib_init, plan.pipelines[0].task)
    rows = {w.index: window_rows(w, calendar, instruments) for w in plan.windows}
    windows = [{**w.to_dict(), "rows": rows[w.index]} for w in plan.windows]
    done = _sidecars(plan)
    done_keys = set(done)
    measured = _measured(done, {i: r["read"] for i, r in rows.items()})
    model = {p.name: str(p.task.get("model", {}).get("class")) for p in plan.pipelines}
    estimate = {}
    for p in plan.pipelines:
        left = [k for k in plan.keys() if k.pipeline == p.name and k not in done_keys]
        own = measured.get(p.name)
        alike = [m for name, ms in measured.items() if model[name] == model[p.name] for m in ms]
        sample, source = (own, "completed units of this pipeline") if own else \
            (alike, f"completed units of another {model[p.name]} pipeline") if alike else (None, None)
        rate = sum(r for r, _ in sample) / sum(s for _, s in sample) if sample else None
        work = sum(rows[k.window]["read"] for k in left)
        estimate[p.name] = {"units_left": len(left), "rows_left": work, "rows_per_s": rate,
                            "measured_on": len(sample) if sample else 0, "source": source,
                            "seconds_left": work / rate if rate else (0.0 if not left else None)}
    return PlanSummary(store=str(plan.store), pipelines=[p.name for p in plan.pipelines], seeds=list(plan.seeds),
                       mode=plan.mode, units=len(plan.keys()), done=len(done_keys), instruments=instruments,
                       windows=windows, workers=max(1, int(workers)), notes=list(plan.notes), estimate=estimate,
                       purge=dict(plan.purge))


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min" if seconds < 7200 else \
        f"{seconds / 3600:.1f} h"


def skipped_records(store: str | Path, keys: Sequence[Any]) -> list[str]:
    """The workflow records (``task.record``) the units ``keys`` skipped, with why, one line per (class, reason).

    From the sidecars' ``qlib_recorder.skipped`` (e.g. Qlib's ``PortAnaRecord`` when the benchmark
    index of a Qlib benchmark YAML is not an instrument of the store).
    """
    counts: dict[tuple[str, str], int] = {}
    for key in keys:
        try:
            side = st.sidecar(store, key)
        except (OSError, ValueError):
            continue
        record = side.qlib_recorder if side is not None else {}
        for item in record.get("skipped") or []:
            k = (str(item.get("class")), str(item.get("reason")))
            counts[k] = counts.get(k, 0) + 1
    return [f"{cls} skipped in {n} unit(s): {reason}" for (cls, reason), n in counts.items()]


def format_plan(summary: PlanSummary, *, notes: bool = True) -> str:
    """The plan as text (what ``run --dry-run`` prints, and a real run prints first; ``notes``: with the plan's
    notes, which a run with progress prints itself)."""
    lines = [f"plan: {len(summary.pipelines)} pipeline(s) ({', '.join(summary.pipelines)}) x {len(summary.seeds)} "
             f"seed(s) x {len(summary.windows)} window(s) = {summary.units} unit(s), {summary.done} already in "
             f"{summary.store}, {summary.left} to train ({summary.mode} mode); {summary.instruments} instrument(s)"]
    if summary.until_decided:
        lines.append(f"  until-decided: {summary.until_decided}")
    lines += [f"  note: {note}" for note in summary.notes] if notes else []
    if summary.purge:
        lines.append(f"  purge: {summary.purge.get('bars', 0)} bar(s) dropped at the end of each train and valid "
                     f"segment before the next ({summary.purge.get('why', '')})")

    def span(seg: list[str]) -> str:   # daily bars: the dates alone
        return "..".join(t.removesuffix(" 00:00:00") for t in seg)

    for w in summary.windows:
        r = w["rows"]
        valid = f"valid {span(w['valid'])} ({r['valid']:,} rows)" if w.get("valid") else "no valid"
        lines.append(f"  w{w['index']:02d}: train {span(w['train'])} ({r['train']:,} rows), {valid}, "
                     f"test {span(w['test'])} ({r['test']:,} rows); reads {r['read']:,} rows")
    for name, e in summary.estimate.items():
        if not e["units_left"]:
            continue
        if e["rows_per_s"] is None:
            lines.append(f"  {name}: {e['units_left']} unit(s), {e['rows_left']:,} rows to read; compute not measured "
                         f"yet (no completed unit of this model in the store): the estimate comes after the first unit")
        else:
            lines.append(f"  {name}: {e['units_left']} unit(s), about {_duration(e['seconds_left'])} of CPU "
                         f"({e['rows_per_s']:,.0f} rows/s measured on {e['measured_on']} {e['source']})")
    total = summary.cpu_seconds()
    if summary.left and total is not None:
        lines.append(f"estimated: {_duration(total)} of unit time, about {_duration(total / summary.workers)} of wall "
                     f"time on {summary.workers} worker(s)")
    return "\n".join(lines)
