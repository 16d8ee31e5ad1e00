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

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rolling_calib.analysis.json_record import read_record, write_record
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

    Examples
    --------
    A race of two configurations that eliminated ``b`` at its first look; its MLflow tags (:meth:`tags`) and its
    first metrics (:meth:`metrics`):

    >>> look = RaceLook(look=1, seeds=3, fraction=0.3, boundary=3.0, level=0.996, best="a", compared=("a", "b"),
    ...                 kept=("a",), eliminated=(Elimination("b", "a", 6.0, 4.9, ""),), settled=(), seeds_spent=6,
    ...                 stop="one left")
    >>> result = RaceResult(best_set=("a",), eliminated={"b": 1}, seeds_used={"a": 3, "b": 3}, looks=(look,),
    ...                     full_grid=9, stop="one left")
    >>> record = RaceRecord(race=result, metric="ql", unit="", windows=2)
    >>> record.tags()
    {'race.stop': 'one left', 'race.best_set': 'a', 'race.eliminated.b': '1', 'race.eliminated_by.b': 'a'}
    >>> record.metrics()[:3]
    [('race_kept', 1.0, 1), ('race_eliminated', 1.0, 1), ('race_seeds_spent', 6.0, 1)]
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

    def identity(self) -> dict[str, Any]:
        """What the race is, without what the run that wrote it trained (a re-run of a finished race trains
        nothing and writes the same race with ``trained_by_this_run`` 0): :meth:`to_dict` less that count.

        >>> from rolling_calib.core.racing import RaceResult
        >>> result = RaceResult(best_set=("a", "b"), eliminated={}, seeds_used={"a": 3, "b": 3}, looks=(),
        ...                     full_grid=9, stop="settled")
        >>> first, again = (RaceRecord(race=result, metric="ql", unit="", windows=2, trained_by_this_run=n)
        ...                 for n in (12, 0))
        >>> first.identity() == again.identity(), first.to_dict() == again.to_dict(), first.identity()["units"]
        (True, False, {'used': 12, 'full_grid': 36})
        """
        data = self.to_dict()
        data["units"].pop("trained_by_this_run")
        return data

    def params(self) -> dict[str, str]:
        """MLflow params: the question the race answered, its stopping rule and how it compares.

        ``race.question.target``, ``race.question.confidence``, ``race.rule.<field>`` (``first``, ``batch``,
        ``max_seeds``, ``spending``, ``futility``, ``margin``, ``seed_variance``), ``race.metric``,
        ``race.orientation``,
        ``race.comparisons`` (best, all-pairs or step-down), ``race.comparison_alpha`` (one comparison's share of
        ``1 - confidence``, before the looks spend it) and ``race.configurations``.

        Examples
        --------
        >>> from rolling_calib.core.racing import RaceResult
        >>> result = RaceResult(best_set=("a",), eliminated={"b": 1}, seeds_used={"a": 3, "b": 3}, looks=(),
        ...                     full_grid=9, stop="one left",
        ...                     settings={"rule": {"first": 3, "margin": None}, "question": {"target": "period",
        ...                               "confidence": 0.95}, "comparisons": "best", "configurations": 2})
        >>> RaceRecord(race=result, metric="ql", unit="", windows=2).params()
        {'race.metric': 'ql', 'race.question.target': 'period', 'race.question.confidence': '0.95', 'race.rule.first': '3', 'race.rule.margin': 'None', 'race.comparisons': 'best', 'race.configurations': '2'}
        """
        settings = self.race.settings
        out = {"race.metric": self.metric}
        out.update({f"race.question.{k}": str(v) for k, v in settings.get("question", {}).items()})
        out.update({f"race.rule.{k}": str(v) for k, v in settings.get("rule", {}).items()})
        out.update({f"race.{k}": str(settings[k]) for k in ("orientation", "comparisons", "comparison_alpha",
                                                             "configurations") if k in settings})
        return out

    def standing(self, name: str) -> str:
        """Where the race left configuration ``name``: ``"kept"`` (in the best set) or ``"eliminated at look k"``;
        ``""`` while the race waits for seeds, or for a name it did not race.

        >>> from rolling_calib.core.racing import RaceResult
        >>> record = RaceRecord(race=RaceResult(best_set=("a",), eliminated={"b": 2}, seeds_used={"a": 5, "b": 5},
        ...                                     looks=(), full_grid=9, stop="one left"), metric="ql", unit="", windows=2)
        >>> record.standing("a"), record.standing("b"), record.standing("z")
        ('kept', 'eliminated at look 2', '')
        """
        if not self.race.stop:
            return ""
        if name in self.race.eliminated:
            return f"eliminated at look {int(self.race.eliminated[name])}"
        return "kept" if name in self.race.best_set else ""

    def tags(self) -> dict[str, str]:
        """MLflow tags: how the race ended, the best set, and each eliminated configuration with its look.

        ``race.stop`` (:data:`~rolling_calib.core.racing.RACE_STOPS`, ``"waiting"`` while it waits for seeds),
        ``race.best_set`` (the names kept, comma-separated), ``race.eliminated.<name>`` = the look that eliminated
        it (``1``, ``2``, ...) and ``race.eliminated_by.<name>`` = the configuration it was decided worse than.
        The class's example shows them.
        """
        out = {"race.stop": self.race.stop or "waiting", "race.best_set": ", ".join(self.race.best_set)}
        by = {e.name: e.by for look in self.race.looks for e in look.eliminated}
        for name, look in self.race.eliminated.items():
            out[f"race.eliminated.{name}"] = str(int(look))
            if name in by:
                out[f"race.eliminated_by.{name}"] = by[name]
        return out

    def metrics(self) -> list[tuple[str, float, int]]:
        """MLflow metrics as ``(key, value, step)``: per look (step = the look's number, 1, 2, ...) ``race_kept``
        (configurations still in the race after it), ``race_eliminated`` (eliminated at it), ``race_seeds_spent``
        (seeds trained so far over all configurations), ``race_seeds`` (seeds per configuration it read) and
        ``race_level`` (its one-sided confidence); at step 0 ``race_looks``, ``race_seeds_used.<name>``,
        ``race_fraction_of_grid``, ``race_units_used`` and ``race_units_full_grid``. The class's example shows them.
        """
        out: list[tuple[str, float, int]] = []
        for look in self.race.looks:
            step = int(look.look)
            out += [("race_kept", float(len(look.kept)), step), ("race_eliminated", float(len(look.eliminated)), step),
                    ("race_seeds_spent", float(look.seeds_spent), step), ("race_seeds", float(look.seeds), step),
                    ("race_level", float(look.level), step)]
        out.append(("race_looks", float(len(self.race.looks)), 0))
        out += [(f"race_seeds_used.{name}", float(k), 0) for name, k in self.race.seeds_used.items()]
        if self.race.seeds_used and self.race.full_grid:
            out.append(("race_fraction_of_grid", float(self.race.fraction_of_grid), 0))
        out += [("race_units_used", float(self.units_used), 0), ("race_units_full_grid", float(self.units_full_grid), 0)]
        return out


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
    return write_record(Path(store) / RACE_FILE, record)


def read_race(store: str | Path) -> RaceRecord | None:
    """The race recorded in ``store`` (None: the store was not raced).

    Raises
    ------
    ValueError
        The file is not JSON, or not a race record (named, with the fix).
    """
    return read_record(Path(store) / RACE_FILE, RaceRecord.from_dict, what="race record",
                       fix="re-run the same `rolling-calib sweep --until-decided` command to write it again (it reuses "
                           "every trained unit)")
