"""The sequential path of a run ``--until-decided``: recorded in the store, read by compare, the report and MLflow.

``rolling-calib run CONFIG --until-decided`` (:mod:`rolling_calib.experiment.until_decided`)
writes ``STORE/sequential.json`` (one atomic write) after every look: one :class:`SequentialPath`
-- the stopping rule and the question it answered, every look at every pair, per pair the look it
stopped at and why, the seeds each pipeline used, and the compute against the full grid (units and
CPU-seconds) -- through its :meth:`~SequentialPath.to_dict` (the one JSON conversion,
:mod:`rolling_calib.core.jsonable`). This module reads it back (:func:`read_path`, a path written
before the rule and the question were values included) and says it in the three places that show a
store: a short section of ``compare`` (:meth:`~SequentialPath.format`), a table of the report
(:meth:`~SequentialPath.rows`), flat tags and metrics for MLflow (:meth:`~SequentialPath.tags`,
:meth:`~SequentialPath.metrics`).

Example
-------
>>> look = Look(("a", "b"), 3, 1.0, 2.58, 0.99, -1.0, -1.5, -0.5, "better", "interval excludes 0")
>>> path = SequentialPath(metric="ql", rule=StoppingRule(first=3, max_seeds=10), question=Question(),
...                       orientation="lower", seed_order=tuple(range(10)), done=True,
...                       looks=(NumberedLook(1, look),), open=(), seeds_used={"a": 3, "b": 3},
...                       units=UnitCount(used=12, full_grid=40, trained_by_this_run=12),
...                       cpu_used=120.0, cpu_full_grid_estimate=400.0)
>>> print(path.format().splitlines()[2])
  a vs b: a better (a - b = -1, lower is better; [-1.5, -0.5] at the spent level 0.9900) at look 1 (3 seeds per pipeline): interval excludes 0
>>> path.metrics()["sequential_units_fraction"]
0.3
>>> SequentialPath.from_dict(path.to_dict()) == path
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from rolling_calib.core import store_layout
from rolling_calib.analysis.json_record import read_record, write_record
from rolling_calib.core.jsonable import jsonable
from rolling_calib.core.question import Question
from rolling_calib.core.sequential import Look
from rolling_calib.core.stopping import DEFAULT_RULE, StoppingRule

__all__ = ["SEQUENTIAL_FILE", "SPENT_LEVEL", "BatchRecord", "NumberedLook", "SequentialPath", "UnitCount", "read_path",
           "stop_phrase", "write_path"]

#: What "spent level" means, said once wherever a look's level is shown.
SPENT_LEVEL = ("spent level: the confidence of a look's interval; the looks share the error rate 1 - confidence "
               "(alpha spending), so a pair decided at any look keeps that error rate over all of them")


def stop_phrase(look: Look, *, orientation: str, unit: str = "") -> str:
    """What a look concluded, naming the winner, with the difference (first minus second) and its interval.

    Parameters
    ----------
    look : Look
        A look at the pair ``(a, b)``; ``outcome`` is ``"better"`` when ``a`` is better, ``"worse"``
        when ``b`` is, else ``"equivalent"``, ``"undetermined"`` or ``"open"``.
    orientation : {"lower", "higher"}
        The metric's direction (named in the phrase).
    unit : str
        The metric's unit (:meth:`~rolling_calib.core.metric_table.Metric.unit`, e.g. ``"bp²"``; ``""``: unitless),
        written after the difference and the interval.

    Examples
    --------
    >>> look = Look(("a", "b"), 5, 1.0, 2.6, 0.9908, -0.47, -0.63, -0.31, "better", "interval excludes 0")
    >>> stop_phrase(look, orientation="lower", unit="bp²")
    'a better (a - b = -0.47 bp², lower is better; [-0.63, -0.31] bp² at the spent level 0.9908)'
    >>> stop_phrase(Look(("a", "b"), 5, 1.0, 2.6, 0.9908, 0.01, -0.2, 0.22, "undetermined", "futility"),
    ...             orientation="higher")
    'undetermined (a - b = 0.01, higher is better; [-0.2, 0.22] at the spent level 0.9908)'
    """
    a, b = look.pair
    head = {"better": f"{a} better", "worse": f"{b} better"}.get(look.outcome, look.outcome)
    if not math.isfinite(look.difference):
        return head
    u = f" {unit}" if unit else ""
    return (f"{head} ({a} - {b} = {look.difference:.4g}{u}, {orientation} is better; "
            f"[{look.ci_low:.4g}, {look.ci_high:.4g}]{u} at the spent level {look.level:.4f})")

#: The path's file in a store.
SEQUENTIAL_FILE = store_layout.SEQUENTIAL


@dataclass(frozen=True)
class NumberedLook:
    """One look at one pair and its number among that pair's looks (1, 2, ...)."""

    number: int
    look: Look

    @property
    def pair(self) -> str:
        """``"a vs b"``."""
        return " vs ".join(self.look.pair)

    def to_dict(self) -> dict[str, Any]:
        return {**self.look.to_dict(), "look": int(self.number)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NumberedLook:
        return cls(number=int(data["look"]), look=Look.from_dict(data))


@dataclass(frozen=True)
class UnitCount:
    """Units (pipeline x seed x window) the path used, the full grid's, and those this run trained."""

    used: int
    full_grid: int
    trained_by_this_run: int

    @property
    def fraction(self) -> float:
        """``used / full_grid`` (NaN for an empty grid)."""
        return self.used / self.full_grid if self.full_grid else math.nan

    def to_dict(self) -> dict[str, int]:
        return {"used": int(self.used), "full_grid": int(self.full_grid),
                "trained_by_this_run": int(self.trained_by_this_run)}


@dataclass(frozen=True)
class BatchRecord:
    """One batch the run asked for: pipeline, seeds, when it was asked for and complete (UTC), units it trained."""

    pipeline: str
    seeds: tuple[int, ...]
    asked_at: str
    complete_at: str | None = None
    trained: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pipeline": self.pipeline, "seeds": [int(s) for s in self.seeds],
                               "asked_at": self.asked_at}
        if self.complete_at is not None:
            out["complete_at"] = self.complete_at
        if self.trained is not None:
            out["trained"] = int(self.trained)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchRecord:
        return cls(pipeline=str(data["pipeline"]), seeds=tuple(int(s) for s in data["seeds"]),
                   asked_at=str(data["asked_at"]), complete_at=data.get("complete_at"),
                   trained=None if data.get("trained") is None else int(data["trained"]))


@dataclass(frozen=True)
class SequentialPath:
    """What a run ``--until-decided`` did, look by look (module docstring).

    Attributes
    ----------
    metric : str
        The metric that decided (one of :data:`~rolling_calib.core.metric_table.DECIDE_BY`).
    rule : StoppingRule
        The stopping rule.
    question : Question
        What every look answered: the target, and ``1 - confidence`` spent over the looks and pairs.
    orientation : {"lower", "higher"}
        The metric's direction.
    seed_order : tuple of int
        The order in which seeds were revealed (the run's seed list).
    done : bool
        Every pair stopped.
    looks : tuple of NumberedLook
        Every look at every pair, by look number then the pair's place.
    open : tuple of str
        The pairs not stopped yet (``"a vs b"``; a run interrupted before the end).
    seeds_used : dict[str, int]
        Seeds each pipeline used.
    units : UnitCount
    cpu_used, cpu_full_grid_estimate : float, float or None
        Training CPU-seconds of the units used, and the full grid's estimate from their mean (None
        when no unit recorded its time).
    schedule : tuple of BatchRecord
        How the run went: each batch asked for, when, and what this run trained of it (with the CPU
        seconds, the only part that is not the same on every run).
    unit : str
        The metric's unit against the run's label (e.g. ``"bp²"``; ``""``: unitless, or a path written
        before the unit was recorded).
    """

    metric: str
    rule: StoppingRule
    question: Question
    orientation: str
    seed_order: tuple[int, ...]
    done: bool
    looks: tuple[NumberedLook, ...]
    open: tuple[str, ...]
    seeds_used: dict[str, int]
    units: UnitCount
    cpu_used: float = 0.0
    cpu_full_grid_estimate: float | None = None
    schedule: tuple[BatchRecord, ...] = field(default_factory=tuple)
    unit: str = ""

    # ----------------------------------------------------------------------- derived
    @property
    def stopped(self) -> dict[str, NumberedLook]:
        """Per stopped pair (``"a vs b"``, in the order they stopped) the look it stopped at."""
        return {nl.pair: nl for nl in self.looks if nl.look.outcome != "open"}

    @property
    def outcomes(self) -> dict[str, str]:
        """Per stopped pair its outcome (``better``, ``worse``, ``equivalent``, ``undecidable``, ``undetermined``)."""
        return {pair: nl.look.outcome for pair, nl in self.stopped.items()}

    @property
    def looks_done(self) -> int:
        """Looks taken: the most any pair had."""
        return max((nl.number for nl in self.looks), default=0)

    @property
    def full_grid(self) -> int:
        """Seeds per pipeline without stopping: the rule's ``max_seeds``."""
        return self.rule.max_seeds

    def settings(self) -> dict[str, Any]:
        """The rule, the question, the direction and the pairs' correction, as recorded."""
        return {"rule": self.rule.to_dict(), "question": self.question.to_dict(), "orientation": self.orientation,
                "pairs": "Bonferroni"}

    # ----------------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        """The path as ``sequential.json`` holds it (through :func:`~rolling_calib.core.jsonable.jsonable`)."""
        cpu: dict[str, Any] = {"used": float(self.cpu_used)}
        if self.cpu_full_grid_estimate is not None:
            cpu["full_grid_estimate"] = float(self.cpu_full_grid_estimate)
        return jsonable({
            "metric": self.metric,
            "unit": self.unit,
            "settings": self.settings(),
            "seed_order": list(self.seed_order),
            "done": self.done,
            "looks_done": self.looks_done,
            "outcomes": self.outcomes,
            "open": list(self.open),
            "stopped": {pair: nl.to_dict() for pair, nl in self.stopped.items()},
            "looks": [nl.to_dict() for nl in self.looks],
            "seeds_used": dict(self.seeds_used),
            "full_grid": self.full_grid,
            "units": self.units.to_dict(),
            "cpu_seconds": cpu,
            "schedule": [b.to_dict() for b in self.schedule],
        })

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SequentialPath:
        """The path :meth:`to_dict` wrote; also one written before the rule and the question were values (their
        settings flat: ``first, batch, max_seeds, confidence, target, margin, futility, spending``)."""
        settings = data.get("settings") or {}
        rule = StoppingRule.from_dict(settings.get("rule", settings))
        question = Question.from_dict(settings.get("question", settings))
        cpu = data.get("cpu_seconds") or {}
        estimate = cpu.get("full_grid_estimate")
        return cls(
            metric=str(data["metric"]), rule=rule, question=question,
            orientation=str(settings.get("orientation", "lower")),
            seed_order=tuple(int(s) for s in data.get("seed_order", [])), done=bool(data.get("done")),
            looks=tuple(NumberedLook.from_dict(d) for d in data.get("looks", [])),
            open=tuple(data.get("open", [])), seeds_used={str(k): int(v) for k, v in data["seeds_used"].items()},
            units=UnitCount(**{k: int(v) for k, v in data["units"].items()}),
            cpu_used=float(cpu.get("used", 0.0)), cpu_full_grid_estimate=None if estimate is None else float(estimate),
            schedule=tuple(BatchRecord.from_dict(b) for b in data.get("schedule", [])),
            unit=str(data.get("unit", "")),
        )

    # ----------------------------------------------------------------------- what compare, the report and MLflow show
    def rows(self) -> list[dict[str, Any]]:
        """One row per pair: outcome, look it stopped at, seeds per pipeline there, spent level, why."""
        rows = [{"pair": pair, "outcome": nl.look.outcome, "look": nl.number, "seeds": nl.look.seeds,
                 "level": nl.look.level, "why": nl.look.why} for pair, nl in self.stopped.items()]
        rows += [{"pair": pair, "outcome": "open", "look": None, "seeds": None, "level": None,
                  "why": "not stopped yet (the run was interrupted; re-run the command to go on)"} for pair in self.open]
        return rows

    def format(self) -> str:
        """The ``compare`` section: per pair where and why it stopped, seeds used against the full grid, compute saved."""
        lines = [f"Sequential path (run --until-decided, decided by {self.metric.upper()}, {self.looks_done} "
                 f"look(s); error rates held over the looks):"]
        lines.append("  per pair, a against b:")
        for r in self.rows():
            if r["look"] is None:
                lines.append(f"  {r['pair']}: {r['outcome']}: {r['why']}")
                continue
            nl = self.stopped[r["pair"]]
            lines.append(f"  {r['pair']}: {stop_phrase(nl.look, orientation=self.orientation, unit=self.unit)} at look {r['look']} "
                         f"({r['seeds']} seeds per pipeline): {r['why']}")
        used = ", ".join(f"{n} {k}" for n, k in self.seeds_used.items())
        units = self.units
        lines.append(f"  seeds used: {used} of {self.full_grid} each; units {units.used} of the full grid's "
                     f"{units.full_grid} ({units.fraction:.0%}), {units.full_grid - units.used} saved")
        if self.cpu_full_grid_estimate:
            lines.append(f"  compute: {self.cpu_used:.0f} CPU-s of an estimated {self.cpu_full_grid_estimate:.0f} "
                         f"for the full grid ({self.cpu_full_grid_estimate - self.cpu_used:.0f} CPU-s saved)")
        lines.append(f"  question: {self.question.describe()}; rule: {self.rule.describe()}")
        lines.append(f"  {SPENT_LEVEL}")
        return "\n".join(lines)

    def seeds_note(self, seeds_in_store: Mapping[str, int]) -> str:
        """A line when the store holds more seeds than the path used (``""`` otherwise).

        The verdict table of ``compare`` and the report uses every seed in the store; the path stopped
        earlier. Only the path's outcome holds its error rate over its looks; the table's holds only if
        the store's seed count was fixed before any look.

        >>> path = SequentialPath("ql", DEFAULT_RULE, Question(), "lower", (0, 1), True, (), (), {"a": 5, "b": 5},
        ...                       UnitCount(10, 40, 10))
        >>> path.seeds_note({"a": 10, "b": 10})[:78]
        'The verdict table uses every seed in the store (a 10, b 10); the until-decided'
        >>> path.seeds_note({"a": 5, "b": 5})
        ''
        """
        more = {n: int(seeds_in_store[n]) for n in self.seeds_used
                if n in seeds_in_store and int(seeds_in_store[n]) > self.seeds_used[n]}
        if not more:
            return ""
        store = ", ".join(f"{n} {int(seeds_in_store[n])}" for n in self.seeds_used if n in seeds_in_store)
        used = ", ".join(f"{n} {k}" for n, k in self.seeds_used.items())
        return (f"The verdict table uses every seed in the store ({store}); the until-decided path below stopped at "
                f"{used} seeds. The path's outcome holds its error rate over its looks; the table's holds only if "
                f"the store's seed count was fixed before any look, not grown after the path stopped.")

    def tags(self) -> dict[str, str]:
        """MLflow tags: the rule and the question, per pair its outcome, the look it stopped at and why."""
        tags = {"sequential.metric": str(self.metric), "sequential.done": str(bool(self.done)),
                **{f"sequential.rule.{k}": str(v) for k, v in self.rule.to_dict().items()},
                **{f"sequential.question.{k}": str(v) for k, v in self.question.to_dict().items()}}
        for r in self.rows():
            slug = r["pair"].replace(" ", "_")
            tags[f"sequential.{slug}.outcome"] = r["outcome"]
            tags[f"sequential.{slug}.why"] = str(r["why"])[:250]
            if r["look"] is not None:
                tags[f"sequential.{slug}.look"] = str(r["look"])
        return tags

    def metrics(self) -> dict[str, float]:
        """MLflow metrics: units and CPU-seconds used against the full grid, seeds per pipeline."""
        units = self.units
        out = {"sequential_units_used": float(units.used), "sequential_units_full_grid": float(units.full_grid),
               "sequential_units_fraction": units.fraction, "sequential_looks": float(self.looks_done)}
        if self.cpu_full_grid_estimate:
            out["sequential_cpu_s_saved"] = float(self.cpu_full_grid_estimate - self.cpu_used)
        for name, k in self.seeds_used.items():
            out[f"sequential_seeds_used.{name}"] = float(k)
        return out


def write_path(store: str | Path, path: SequentialPath) -> Path:
    """Write the path into ``STORE/sequential.json`` (atomically: a reader sees the old path or the new one)."""
    return write_record(Path(store) / SEQUENTIAL_FILE, path)


def read_path(store: str | Path) -> SequentialPath | None:
    """The recorded path of ``store`` (None: the store was not run ``--until-decided``).

    Raises
    ------
    ValueError
        The file is not JSON, or not a sequential path (named, with the fix).
    """
    return read_record(Path(store) / SEQUENTIAL_FILE, SequentialPath.from_dict, what="sequential path",
                       fix="re-run the same `rolling-calib run --until-decided` command to write it again (it reuses "
                           "every trained unit)")
