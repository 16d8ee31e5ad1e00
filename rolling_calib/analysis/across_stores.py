"""Pipelines of several stores compared as one: ``compare --store A --store B``.

Each store is scored with the same calibration rule and label choice (:func:`score_store`); the
scores are joined into one :class:`~rolling_calib.analysis.scoring.StoreScores` whose pipelines are
every store's (a name two stores share is prefixed with its store's directory name:
``lgb_store/lr10``). Verdicts pair days across pipelines, so the stores must have been evaluated
on the same trading days, and against labels of the same unit: otherwise one line says how they
differ, and nothing is compared. The same store given twice (under any path: a symbolic link, a
relative path) is refused (:func:`check_distinct`): it would compare every pipeline with itself.

Examples
--------
>>> _renamed({"a": ["x", "y"], "b": ["y", "z"]})
{'a': {'x': 'x', 'y': 'a/y'}, 'b': {'y': 'b/y', 'z': 'z'}}
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from rolling_calib.analysis.scoring import StoreScores, score_store
from rolling_calib.core.calibration import Calibration
from rolling_calib.execution.store import Store

__all__ = ["check_distinct", "score_stores"]


def _same_directory(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:   # one does not exist: the store's own error names it
        return a.resolve() == b.resolve()


def check_distinct(stores: Sequence[Store | str | os.PathLike]) -> None:
    """``ValueError`` (one line) when two of ``stores`` are the same directory.

    >>> import tempfile
    >>> here = Path(tempfile.mkdtemp())
    >>> (here / "link").symlink_to(here / "store", target_is_directory=True)
    >>> (here / "store").mkdir()
    >>> check_distinct([here / "store", here / "link"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: --store: .../store and .../link are the same store (.../store): it would be compared with itself; ...
    """
    paths = [s.root if isinstance(s, Store) else Path(s) for s in stores]
    for i, a in enumerate(paths):
        for b in paths[i + 1:]:
            if _same_directory(a, b):
                raise ValueError(f"--store: {a} and {b} are the same store ({a.resolve()}): it would be compared with "
                                 f"itself; give each store once (the pipelines of one store: compare --store {a})")


def _renamed(pipelines: Mapping[str, Sequence[str]]) -> dict[str, dict[str, str]]:
    """Per store, its pipelines' names in the joined scores (prefixed by the store where two stores share one)."""
    counts = Counter(name for names in pipelines.values() for name in names)
    return {store: {n: (f"{store}/{n}" if counts[n] > 1 else n) for n in names} for store, names in pipelines.items()}


def _days(scores: StoreScores) -> pd.DatetimeIndex:
    return pd.DatetimeIndex(sorted(pd.to_datetime(scores.days["date"]).unique()))


def _span(days: pd.DatetimeIndex) -> str:
    return f"{days[0]:%Y-%m-%d}..{days[-1]:%Y-%m-%d}, {len(days)} days" if len(days) else "no days"


def score_stores(
    stores: Sequence[Store | str | os.PathLike],
    *,
    calibration: Calibration | Callable[[Path], Calibration],
    label: str | None = None,
    progress: bool = False,
) -> StoreScores:
    """Score each store and join the scores; ``ValueError`` (one line) when the days or the labels differ.

    ``calibration``: one rule, or a function of the store's directory giving its rule (the CLI: the options,
    else the first store's recorded rule). The same store twice is refused (:func:`check_distinct`).
    """
    check_distinct(stores)
    opened = [Store.of(s) for s in stores]
    paths = [s.root for s in opened]
    names = [p.name or str(p) for p in paths]
    if len(set(names)) < len(names):
        names = [f"{i}:{n}" for i, n in enumerate(names)]
    each = [score_store(s, calibration=calibration(s.root) if callable(calibration) else calibration, label=label,
                        progress=progress) for s in opened]
    first_days = _days(each[0])
    for path, scores in zip(paths[1:], each[1:]):
        days = _days(scores)
        if not days.equals(first_days):
            only = len(days.difference(first_days)) + len(first_days.difference(days))
            raise ValueError(f"--store: {paths[0]} and {path} were evaluated on different days ({_span(first_days)} "
                             f"vs {_span(days)}; {only} day(s) in one only): compare stores over the same test days")
        if scores.label != each[0].label:
            raise ValueError(f"--store: {paths[0]} is scored against the {each[0].label.describe()}, {path} against "
                             f"the {scores.label.describe()}: their losses are not comparable; give --label raw "
                             "(or learn) so that both are scored against the same label")
    rename = _renamed({n: s.pipelines for n, s in zip(names, each)})

    def joined(frames: list[pd.DataFrame]) -> pd.DataFrame:
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def frames(attr: str) -> pd.DataFrame:
        out = []
        for n, s in zip(names, each):
            frame = getattr(s, attr).copy()
            frame["pipeline"] = frame["pipeline"].map(lambda p, n=n: rename[n].get(p, p))
            out.append(frame)
        return joined(out)

    def merged(attr: str) -> dict:
        return {rename[n].get(k, k): v for n, s in zip(names, each) for k, v in getattr(s, attr).items()}

    stores_note = "; ".join(f"{p}: {', '.join(rename[n][q] for q in s.pipelines)}"
                            for p, n, s in zip(paths, names, each))
    notes = [f"compared across stores, evaluated on the same {len(first_days)} days ({stores_note})"]
    notes += [note for s in each for note in s.notes]
    return StoreScores(
        store=paths[0], runs=frames("runs"), periods=frames("periods"), calibration=each[0].calibration,
        label=each[0].label, incomplete=[i for s in each for i in s.incomplete], compare=[],
        notes=list(dict.fromkeys(notes)), days=frames("days"), seed_spread=merged("seed_spread"),
        learned_labels=merged("learned_labels"), models=merged("models"), label_choice=each[0].label_choice,
        backtests=frames("backtests"), backtest_specs=merged("backtest_specs"),
    )
