"""The per-pipeline seed statistics of ``score_store`` (:class:`SeedSpreadCollector`), against direct formulas."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolling_calib.analysis import panels
from rolling_calib.analysis.panels import SeedSpreadCollector
from rolling_calib.core.guards import seed_spread
from rolling_calib.execution.reader import RunArrays

NAMES = np.array(["AAA", "BBB", "CCC", "DDD"], dtype=object)


def _run(p: np.ndarray, names: np.ndarray = NAMES, codes: np.ndarray | None = None) -> RunArrays:
    n = len(p)
    times = np.repeat(np.arange(n // 4).astype("datetime64[m]").astype("datetime64[ns]"), 4)
    codes = np.tile(np.arange(4, dtype=np.int32), n // 4) if codes is None else codes
    return RunArrays(datetime=times, prediction=p, label=np.zeros(n), codes=codes, names=names)


@pytest.mark.parametrize("block", [7, 1 << 16])
def test_running_seed_statistics_are_the_whole_array_welford_bit_for_bit(block, monkeypatch):
    monkeypatch.setattr(panels, "_BLOCK", block)
    rng = np.random.default_rng(3)
    seeds = [rng.normal(size=400) * (1 + k) for k in range(5)]
    collector = SeedSpreadCollector()
    for k, p in enumerate(seeds):
        collector.add("a", _run(p), k)
    mean, m2, widest = seeds[0].copy(), np.zeros(400), 0.0   # the update on whole arrays
    for k, p in enumerate(seeds[1:], start=2):
        delta = p - mean
        mean += delta / k
        m2 += delta * (p - mean)
        widest = max(widest, float(np.abs(p - seeds[0]).max()))
    state = collector._state["a"]
    assert state.mean.tobytes() == mean.tobytes() and state.m2.tobytes() == m2.tobytes()
    got, want = collector.result("a"), seed_spread(np.stack(seeds))
    assert got.max_abs_difference == widest == want.max_abs_difference
    assert got.relative_spread == pytest.approx(want.relative_spread, rel=1e-12)
    assert (got.n_seeds, got.n_rows, got.identical) == (5, 400, False)


def test_identical_pairs_compare_instrument_names_not_codes():
    rng = np.random.default_rng(4)
    p = rng.normal(size=40)
    base = _run(p)
    order = np.array([2, 0, 3, 1])                  # the same names listed in another order: other codes
    shuffled = _run(p, names=NAMES[order], codes=np.argsort(order).astype(np.int32)[base.codes])
    renamed = _run(p, names=np.array(["AAA", "BBB", "CCC", "EEE"], dtype=object))
    collector = SeedSpreadCollector()
    for name, run in (("a", base), ("b", shuffled), ("c", renamed), ("d", _run(p + 1.0))):
        collector.add(name, run, 0)
    assert collector.identical_pairs()[1] == [("a", "b")]
    assert collector.identical_pairs()[0] == [("a", "b"), ("a", "d"), ("b", "d")]   # d: shifted, the same ranking


def test_identical_rankings_fire_the_guard_whatever_the_float_noise():
    from rolling_calib.analysis.verdicts import guard_warnings
    from rolling_calib.core.label import Label

    rng = np.random.default_rng(5)
    p = rng.normal(size=400)
    collector = SeedSpreadCollector()
    collector.add("lr0.2", _run(0.2 * p - 1e-9), 0)   # a booster at its first round: the leaves times the rate
    collector.add("lr0.05", _run(0.05 * p - 1e-9 + 1e-18), 0)
    collector.add("other", _run(rng.normal(size=400)), 0)
    assert collector.identical_pairs()[0] == [("lr0.2", "lr0.05")] and collector.identical_pairs()[1] == []
    warnings = guard_warnings(days=_days(), runs=_runs(), pipelines=["lr0.2", "lr0.05"], label=Label(kind="raw"),
                              learned={}, seed_spread={}, models={}, identical=collector.identical_pairs()[0],
                              identical_values=collector.identical_pairs()[1])
    found = [w for w in warnings if w.kind == "identical_pipelines"]
    assert len(found) == 1 and found[0].measured["same_values"] is False
    assert "rank the same rows in the same order at every timestamp" in found[0].message
    assert "TopkDropoutStrategy" in found[0].message


def _days():
    import pandas as pd

    from rolling_calib.analysis.panels import DAY_COLUMNS

    rows = [{c: 1.0 for c in DAY_COLUMNS} | {"pipeline": name, "seed": 0, "date": pd.Timestamp("2017-01-03"),
                                             "period": "2017-01"} for name in ("lr0.2", "lr0.05")]
    return pd.DataFrame(rows)


def _runs():
    import pandas as pd

    return pd.DataFrame({"pipeline": ["lr0.2", "lr0.05"], "seed": [0, 0], "ql": [1.0, 1.0], "ic": [0.1, 0.1]})


def test_identical_pairs_treat_a_missing_code_as_numpy_indexing_does():
    p = np.arange(8.0)
    codes = np.array([0, 1, 2, -1, 0, 1, 2, 3], dtype=np.int32)        # -1 indexes the last name
    last = codes.copy()
    last[3] = 3
    collector = SeedSpreadCollector()
    collector.add("a", _run(p, codes=codes), 0)
    collector.add("b", _run(p, codes=last), 0)
    collector.add("c", _run(p, codes=np.where(codes < 0, 0, codes).astype(np.int32)), 0)
    assert collector.identical_pairs()[1] == [("a", "b")]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["AAA", "BBB", "CCC", "DDD"]), min_size=0, max_size=4, unique=True),
       st.lists(st.sampled_from(["AAA", "BBB", "CCC", "DDD"]), min_size=0, max_size=4, unique=True),
       st.integers(0, 2**32 - 1), st.integers(0, 12), st.booleans())
def test_same_ids_is_the_row_by_row_comparison_of_names(names_a, names_b, seed, n, same_codes):
    """``_same_ids`` (codes compared directly when the names agree, else looked up) against the definition:
    ``names_a[codes_a] == names_b[codes_b]`` row by row (a code of -1 indexes the last name, as NumPy does)."""
    from rolling_calib.analysis.panels import _same_ids

    rng = np.random.default_rng(seed)
    na, nb = np.array(names_a, dtype=object), np.array(names_b, dtype=object)
    ca = rng.integers(-1, max(len(na), 1), n).astype(np.int32)
    cb = ca.copy() if same_codes and len(nb) >= len(na) else rng.integers(-1, max(len(nb), 1), n).astype(np.int32)
    ia = na[ca] if len(na) else ca
    ib = nb[cb] if len(nb) else cb
    expected = bool(np.array_equal(ia, ib))
    assert _same_ids((na, ca), (nb, cb)) == expected
    assert _same_ids((na, ca), (na.copy(), ca.copy()))
