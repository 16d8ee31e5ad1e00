"""bench/real_minute_evidence.py's pure parts: the A/A relabelling, the spike-in control and the tables.

The training and the analysis of the stores are what the bench measures (docs/evidence.md); here, on a few
rows, that the A/A control takes the base's seeds 20.. and nothing else, that a table lands between its
markers (or the doc is refused in one line), and the spike-in control's parts: the offsets (hand-computed, and as
properties: none at size 0, one per pipeline, seed and window), the true difference, and the premise in the
library's metric (an offset constant inside a window leaves CQL unchanged there).
"""

from __future__ import annotations

import doctest
import math
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

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


# --------------------------------------------------------------------------- the spike-in control

def _runs_frame(keys: list[tuple[str, int, int]], rows_per_key: int = 3, prediction: float | None = None):
    rows = [{"pipeline": p, "seed": s, "window": w,
             "prediction": prediction if prediction is not None else 0.01 * i + 0.001 * j}
            for i, (p, s, w) in enumerate(keys) for j in range(rows_per_key)]
    return pd.DataFrame(rows)


def test_bench_doctests_pass(rme):
    """The spike's, the analyte's and the persistence table's examples (bench/ is not among the doctest paths)."""
    result = doctest.testmod(rme, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 8 and result.failed == 0


def test_offset_scale_hand_computed(rme):
    # 2 s^4 = k V: V = 8, k = 1 -> s^4 = 4 -> s = sqrt(2); k = 3, V = 2/3 -> s^4 = 1 -> s = 1
    assert rme.offset_scale(8.0, 1.0) == pytest.approx(math.sqrt(2.0), rel=1e-15)
    assert rme.offset_scale(2.0 / 3.0, 3.0) == pytest.approx(1.0, rel=1e-15)
    assert rme.offset_scale(5.0, 0.0) == 0.0
    with pytest.raises(ValueError, match="expected >= 0"):
        rme.offset_scale(-1.0, 1.0)


def test_spike_adds_the_documented_draw_to_every_row_of_its_key(rme):
    """Hand-computed: each row gets scale * N(0,1) from the stream [seed, crc32(pipeline), run seed, window]."""
    frame = _runs_frame([("base", 0, 0), ("base", 0, 1), ("h64", 3, 0)], rows_per_key=2)
    out = rme.spike(frame, scale=0.5, seed=7)
    for (p, s, w), rows in frame.groupby(["pipeline", "seed", "window"]).groups.items():
        z = np.random.default_rng([7, zlib.crc32(p.encode()), s, w]).standard_normal()
        assert np.allclose(out.loc[rows, "prediction"], frame.loc[rows, "prediction"] + 0.5 * z, rtol=0, atol=1e-15)
    assert out.drop(columns="prediction").equals(frame.drop(columns="prediction"))   # nothing else moves


def test_spike_offsets_have_the_stated_spread(rme):
    keys = pd.DataFrame([{"pipeline": p, "seed": s, "window": w} for p in "abcd" for s in range(500) for w in (0, 1)])
    o = rme.spike_offsets(keys, scale=2.0, seed=38)["offset"]
    assert len(o) == 4000
    assert abs(o.mean()) < 4 * 2.0 / math.sqrt(4000) and abs(o.std() / 2.0 - 1) < 0.05


_keys = hs.lists(hs.tuples(hs.sampled_from(["base", "wd1e-3", "h64"]), hs.integers(0, 39), hs.integers(0, 3)),
                 min_size=1, max_size=12, unique=True)


@settings(max_examples=60, deadline=None)
@given(keys=_keys, seed=hs.integers(0, 2**31 - 1))
def test_spike_zero_is_the_identity(rme, keys, seed):
    frame = _runs_frame(keys)
    assert rme.spike(frame, scale=0.0, seed=seed).equals(frame)


@settings(max_examples=60, deadline=None)
@given(keys=_keys, seed=hs.integers(0, 2**31 - 1), scale=hs.floats(1e-6, 1e3), order=hs.randoms())
def test_spike_is_constant_per_key_and_does_not_depend_on_the_other_rows(rme, keys, seed, scale, order):
    frame = _runs_frame(keys, rows_per_key=3, prediction=0.0)
    out = rme.spike(frame, scale=scale, seed=seed)
    per_key = out.groupby(["pipeline", "seed", "window"])["prediction"].nunique()
    assert (per_key == 1).all()                        # one offset per (pipeline, seed, window)
    shuffled = frame.sample(frac=1.0, random_state=order.randint(0, 2**31 - 1))
    alone = rme.spike(shuffled.iloc[: max(1, len(shuffled) // 2)], scale=scale, seed=seed)
    assert np.array_equal(alone["prediction"].to_numpy(), out.loc[alone.index, "prediction"].to_numpy())


@settings(max_examples=40, deadline=None)
@given(offsets=hs.lists(hs.floats(-1.0, 1.0), min_size=2, max_size=2), data_seed=hs.integers(0, 2**16))
def test_cql_inside_a_window_ignores_a_constant_offset(offsets, data_seed):
    """The control's premise, in the library's metric: an offset constant inside a training window cancels from
    CQL in every week but the window's first after a refit, and adds itself to QL."""
    from rolling_calib.core.calibration import Calibration
    from rolling_calib.core.metrics import rolling_calibrated_quadratic_loss

    rng = np.random.default_rng(data_seed)
    dates = pd.bdate_range("2018-03-05", "2018-04-20")               # weeks W10..W16
    t = np.repeat(dates.values, 4)
    windows = (t >= np.datetime64("2018-04-02")).astype(int)          # the refit starts W14
    y, p = rng.standard_normal(t.size), 0.1 * rng.standard_normal(t.size)
    cal = Calibration(period="week")
    clean = rolling_calibrated_quadratic_loss(p, y, t, calibration=cal, windows=windows).table
    spiked = rolling_calibrated_quadratic_loss(p + np.asarray(offsets)[windows], y, t, calibration=cal,
                                               windows=windows).table
    scored = clean["scored"].to_numpy(dtype=bool) & ~clean["refit_first"].to_numpy(dtype=bool)
    assert np.allclose(spiked["cql"][scored], clean["cql"][scored], rtol=0, atol=1e-12)
    assert not np.allclose(spiked["ql"], clean["ql"], rtol=0, atol=1e-12) or max(map(abs, offsets)) < 1e-6


def test_analyte_is_kept_by_cql_and_goes_to_the_named_pipelines_only(rme):
    runs = pd.DataFrame({"pipeline": ["a", "b", "b"], "seed": [0, 0, 1], "ql": [1.0, 2.0, 3.0],
                         "ql_scored": [1.0, 2.0, 3.0], "cql": [0.5, 1.5, 2.5]})
    days = pd.DataFrame({"pipeline": ["a", "b"], "rows": [4, 5], "sse_ql": [4.0, 5.0], "sse_cql": [np.nan, 2.0]})
    r, d = rme.with_analyte(runs, days, ["b"], 0.25)
    assert r["ql"].tolist() == [1.0, 2.25, 3.25] and r["cql"].tolist() == [0.5, 1.75, 2.75]
    assert d["sse_ql"].tolist() == [4.0, 6.25] and math.isnan(d["sse_cql"][0]) and d["sse_cql"][1] == 3.25
    assert runs["ql"].tolist() == [1.0, 2.0, 3.0]                       # the input is not changed


def test_spike_table_reads_the_cells(rme):
    ci = {"accuracy": 0.6, "low": 0.5, "high": 0.7}
    diff = {"accuracy": 0.1, "low": -0.05, "high": 0.2}
    held = {"mean over pairs": {"ql": ci, "cql": ci, "cql - ql": diff}}
    cell = {"analyte": 1.0, "analyte_loss": 3e-4, "spike": 3.0, "offset_std": 0.02,
            "ql_variance_inflation": {"seeds": 3.5, "march": 5.0}, "std_ratio": {"a": 0.5, "b": 0.9},
            "held_out": {"seeds": held, "seeds and time": held},
            "verdicts": {"a vs b": {"ql": {"winner": None, "seeds_needed": None},
                                    "cql": {"winner": "a", "seeds_needed": 12}}}}
    table = rme.spike_table({"cells": [cell]})
    row = table.splitlines()[2]
    for text in ("1 (0.0003)", "3 (0.02)", "3.50; 5.00", "0.50-0.90", "0.60 [0.50, 0.70] -> 0.60 [0.50, 0.70]",
                 "+0.10 [-0.05, +0.20]", "0 / 1", "> 1000 / 12; CQL fewer in 1 of 1"):
        assert text in row, text
