"""bench/real_minute_evidence.py's pure parts: the A/A relabelling and the tables written between markers.

The training and the analysis of the stores are what the bench measures (docs/evidence.md); here, on a few
rows, that the A/A control takes the base's seeds 20.. and nothing else, and that a table lands between its
markers (or the doc is refused in one line).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def rme():
    sys.path.insert(0, str(BENCH))
    try:
        import real_minute_evidence
        yield real_minute_evidence
    finally:
        sys.path.remove(str(BENCH))


@dataclass(frozen=True)
class _Scores:
    """The fields of StoreScores that with_aa reads and replaces."""

    runs: pd.DataFrame
    periods: pd.DataFrame
    days: pd.DataFrame
    compare: list
    learned_labels: dict = field(default_factory=dict)
    models: dict = field(default_factory=dict)
    seed_spread: dict = field(default_factory=dict)
    constant: dict = field(default_factory=dict)


def _frame(seeds: dict[str, range]) -> pd.DataFrame:
    return pd.DataFrame([{"pipeline": p, "seed": s, "ql": float(s)} for p, r in seeds.items() for s in r])


def test_aa_takes_the_base_seeds_from_the_split_renumbered(rme):
    seeds = {"base": range(6), "wd": range(3)}
    scores = _Scores(runs=_frame(seeds), periods=_frame(seeds), days=_frame(seeds), compare=[("base", "wd")],
                     models={"base": "lstm", "wd": "lstm"})
    aa = rme.with_aa(scores, split=3)
    runs = aa.runs
    assert sorted(runs.loc[runs["pipeline"] == "base", "seed"]) == [0, 1, 2]
    assert sorted(runs.loc[runs["pipeline"] == rme.AA, "seed"]) == [0, 1, 2]
    # seed 3 of the base is seed 0 of the A/A pipeline (its values travel with it)
    assert runs.loc[(runs["pipeline"] == rme.AA) & (runs["seed"] == 0), "ql"].item() == 3.0
    assert sorted(runs.loc[runs["pipeline"] == "wd", "seed"]) == [0, 1, 2]
    assert aa.compare == [("base", "wd"), ("base", rme.AA)]
    assert aa.models[rme.AA] == "lstm"
    assert len(aa.days) == len(scores.days) and len(aa.periods) == len(scores.periods)


def test_no_aa_without_seeds_past_the_split(rme):
    seeds = {"base": range(3)}
    scores = _Scores(runs=_frame(seeds), periods=_frame(seeds), days=_frame(seeds), compare=[])
    assert rme.with_aa(scores, split=3) is None


def test_table_written_between_its_markers(rme, tmp_path):
    doc = tmp_path / "evidence.md"
    doc.write_text("head\n<!-- real-minute-skill:begin -->\nold\n<!-- real-minute-skill:end -->\ntail\n")
    rme._write_doc(doc, "skill", "| a |\n|---|\n| 1 |")
    assert doc.read_text() == ("head\n<!-- real-minute-skill:begin -->\n| a |\n|---|\n| 1 |\n"
                               "<!-- real-minute-skill:end -->\ntail\n")
    with pytest.raises(SystemExit, match="real-minute-pairs:begin"):
        rme._write_doc(doc, "pairs", "x")
