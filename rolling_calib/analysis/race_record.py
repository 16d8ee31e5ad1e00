"""The record of a sweep raced live (``sweep --until-decided``): ``STORE/race.json``, and the race in words.

:func:`rolling_calib.experiment.race_live.run_race` writes a :class:`RaceRecord` after every look
(atomically); ``sweep`` and ``compare`` read it back and print the race look by look
(:func:`format_race`), one line a look (:func:`look_line`): its seeds and level, the
configurations kept, those eliminated (by whom, the difference in the metric's unit and the
bound), the pairs settled and why, and the seeds spent against the grid's worst case.

Example
-------
>>> from rolling_calib.core.racing import Elimination, RaceLook
>>> look = RaceLook(look=2, seeds=5, fraction=0.25, boundary=3.1, level=0.999, best="a", compared=("a", "b", "c"),
...                 kept=("a", "b"), eliminated=(Elimination("c", "a", 0.012, 0.004, ""),),
...                 settled=(("a", "b", "futile"),), seeds_spent=15, stop="settled")
>>> print(look_line(look, metric="ql", unit="bp²", configurations=3, full_grid=20))
look 2: 5 seeds each (one-sided 99.9% bounds): kept a, b; eliminated c (worse than a, the best by mean, by 0.012 bp² QL; bound 0.004 bp² > 0); settled a ~ b (futile); 15 of the grid's 60 seeds spent; race over: settled
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_prep.atomic import atomic_write_text
from rolling_calib.core.jsonable import jsonable
from rolling_calib.core.racing import Elimination, RaceLook, RaceResult

__all__ = ["RACE_FILE", "RaceRecord", "format_race", "look_line", "race_from_dict", "read_race", "write_race"]

#: The race's file in the store.
RACE_FILE = "race.json"

_STOP_WORDS = {"one left": "one configuration left", "settled": "the set cannot shrink: every pair left is settled",
               "budget": "the seed budget is spent"}


@dataclass(frozen=True)
class RaceRecord:
    """A live race and what it ran on.

    Attributes
    ----------
    race : RaceResult
        The race so far (``race.stop`` empty while it waits for seeds).
    metric : str
        The metric that decides (``ql``, ``cql``, ``ic``, ...).
    unit : str
        The metric's unit (``""``: unitless).
    windows : int
        Rolling windows per seed (one seed of one configuration: ``windows`` units).
    trained_by_this_run : int
        Units the run that wrote the record trained (the rest were in the store already).
    """

    race: RaceResult
    metric: str
    unit: str
    windows: int
    trained_by_this_run: int = 0

    @property
    def units_used(self) -> int:
        """Units the race read: seeds used over every configuration x windows."""
        return int(sum(self.race.seeds_used.values())) * self.windows

    @property
    def units_full_grid(self) -> int:
        """Units of the full grid (every configuration at ``max_seeds``)."""
        return len(self.race.seeds_used) * self.race.full_grid * self.windows

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"metric": self.metric, "unit": self.unit, "windows": self.windows,
                         "units": {"used": self.units_used, "full_grid": self.units_full_grid,
                                   "trained_by_this_run": self.trained_by_this_run},
                         "race": self.race.to_dict()})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RaceRecord:
        return cls(race=race_from_dict(data["race"]), metric=str(data["metric"]), unit=str(data["unit"]),
                   windows=int(data["windows"]), trained_by_this_run=int(data["units"]["trained_by_this_run"]))

    def format(self) -> str:
        """The race in words: one line a look, then the best set and the compute against the grid."""
        return "\n".join(format_race(self.race, metric=self.metric, unit=self.unit, windows=self.windows))


def race_from_dict(data: dict[str, Any]) -> RaceResult:
    """The :class:`RaceResult` of :meth:`RaceResult.to_dict` (a round trip)."""
    looks = tuple(RaceLook(**{**look, "compared": tuple(look["compared"]), "kept": tuple(look["kept"]),
                              "eliminated": tuple(Elimination(**e) for e in look["eliminated"]),
                              "settled": tuple(tuple(s) for s in look["settled"]),
                              "stopped": tuple(tuple(s) for s in look.get("stopped", ()))})
                  for look in data["looks"])
    return RaceResult(best_set=tuple(data["best_set"]), eliminated=dict(data["eliminated"]),
                      seeds_used=dict(data["seeds_used"]), looks=looks, full_grid=int(data["full_grid"]),
                      stop=str(data["stop"]), settings=dict(data["settings"]), pending=dict(data.get("pending", {})))


def _amount(value: float, *, metric: str, unit: str) -> str:
    return f"{value:.4g}{' ' + unit if unit else ''} {metric.upper()}"


def look_line(look: RaceLook, *, metric: str, unit: str, configurations: int, full_grid: int) -> str:
    """One look in one line: seeds, level, kept, eliminated (by whom, the difference, the bound), settled, the
    configurations that get no more seeds (kept in the best set), seeds spent.

    (Example: the module docstring.)
    """
    among = "" if set(look.compared) >= set(look.kept) else f" of {', '.join(look.compared)}"
    head = f"look {look.look}: {look.seeds} seeds each{among} (one-sided {look.level:.1%} bounds)"
    parts = [f"kept {', '.join(look.kept)}"]
    if look.eliminated:
        parts.append("eliminated " + ", ".join(
            f"{e.name} (worse than {e.by}{', the best by mean,' if e.by == look.best else ''} by "
            f"{_amount(abs(e.difference), metric=metric, unit=unit)}; bound {e.bound:.3g}{' ' + unit if unit else ''} > 0)"
            for e in look.eliminated))
    if look.settled:
        parts.append("settled " + ", ".join(f"{a} ~ {b} ({why})" for a, b, why in look.settled))
    if look.stopped:
        parts.append("no more seeds for " + ", ".join(f"{n} ({why})" for n, why in look.stopped))
    parts.append(f"{look.seeds_spent} of the grid's {configurations * full_grid} seeds spent")
    if look.stop:
        parts.append(f"race over: {look.stop}")
    return head + ": " + "; ".join(parts)


def format_race(result: RaceResult, *, metric: str, unit: str, windows: int | None = None) -> list[str]:
    """The race look by look, then its end: the best set, the eliminated, the seeds against the grid."""
    K = len(result.seeds_used)
    rule = result.settings.get("rule", {})
    conf = result.settings.get("question", {}).get("confidence")
    lines = [f"Race by {metric.upper()} ({K} configurations; each against the best, Hsu's MCB"
             + (f", {1 - conf:.0%} chance of eliminating the best over all looks" if conf is not None else "")
             + (f"; seeds {rule['first']}, then {rule['batch']} a look, at most {rule['max_seeds']}" if rule else "")
             + "):"]
    lines += ["  " + look_line(look, metric=metric, unit=unit, configurations=K, full_grid=result.full_grid)
              for look in result.looks]
    if not result.stop:
        lines.append(f"  waiting: the next look needs "
                     + ", ".join(f"{n} seeds 0..{k - 1}" for n, k in result.pending.items()))
        return lines
    spent = sum(result.seeds_used.values())
    lines.append(f"  best set: {', '.join(result.best_set)} ({_STOP_WORDS.get(result.stop, result.stop)})")
    if result.eliminated:
        lines.append("  eliminated: " + ", ".join(f"{n} at look {k}" for n, k in result.eliminated.items()))
    lines.append(f"  seeds: {spent} of the grid's {K * result.full_grid} ({result.fraction_of_grid:.0%}); per "
                 "configuration " + ", ".join(f"{n} {k}" for n, k in result.seeds_used.items())
                 + (f"; units {spent * windows} of {K * result.full_grid * windows}" if windows else ""))
    return lines


def write_race(store: str | Path, record: RaceRecord) -> Path:
    """Write the record into ``STORE/race.json`` (atomically: a reader sees the old record or the new one)."""
    return atomic_write_text(Path(store) / RACE_FILE, json.dumps(record.to_dict(), indent=2, sort_keys=True) + "\n")


def read_race(store: str | Path) -> RaceRecord | None:
    """The race recorded in ``store`` (None: the store was not raced).

    Raises
    ------
    ValueError
        The file is not JSON, or not a race record (named, with the fix).
    """
    file = Path(store) / RACE_FILE
    if not file.is_file():
        return None
    fix = "re-run the same `rolling-calib sweep --until-decided` command to write it again (it reuses every trained unit)"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{file}: not a JSON race record ({exc}); {fix}") from exc
    try:
        return RaceRecord.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{file}: not a race record ({type(exc).__name__}: {exc}); {fix}") from exc
