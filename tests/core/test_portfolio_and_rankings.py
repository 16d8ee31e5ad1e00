"""The portfolio figures (Qlib's risk_analysis, pure) by hand and against Qlib's own, and identical rankings."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rolling_calib.core.guards import same_predictions, same_rankings
from rolling_calib.core.portfolio import cumulative, over_seeds, risk_analysis

returns = st.lists(st.floats(min_value=-0.2, max_value=0.2, allow_nan=False, allow_subnormal=False),
                   min_size=2, max_size=60)


def test_risk_by_hand():
    r = [0.01, -0.02, 0.005, 0.0]
    risk = risk_analysis(r, n=238)
    mean = -0.00125
    std = float(np.std(r, ddof=1))
    assert risk.mean == pytest.approx(mean) and risk.std == pytest.approx(std)
    assert risk.annualized_return == pytest.approx(238 * mean)
    assert risk.information_ratio == pytest.approx(mean / std * math.sqrt(238))
    assert risk.max_drawdown == pytest.approx(-0.02)   # cumsum 0.01, -0.01, -0.005, -0.005: peak 0.01 -> -0.01
    compounded = risk_analysis([0.1, -0.5, 0.2], mode="product", n=3)
    assert compounded.annualized_return == pytest.approx(1.1 * 0.5 * 1.2 - 1)   # N = T: the whole period
    assert compounded.max_drawdown == pytest.approx(-0.5)


@settings(max_examples=60, deadline=None)
@given(returns, st.sampled_from(["sum", "product"]))
def test_risk_equals_qlibs_risk_analysis(values, mode):
    from qlib.contrib.evaluate import risk_analysis as qlib_risk

    assume(np.ptp(values) > 1e-6)   # a constant series has no information ratio (Qlib divides by a rounding-noise std)
    series = pd.Series(values, index=pd.bdate_range("2017-01-02", periods=len(values)))
    theirs = qlib_risk(series, freq="day", mode=mode)["risk"]
    ours = risk_analysis(values, mode=mode)
    for field in ("mean", "std", "annualized_return", "information_ratio", "max_drawdown"):
        expected = float(theirs[field])
        got = getattr(ours, field)
        assert got == pytest.approx(expected, rel=1e-9, abs=1e-12), field


def test_cumulative_and_over_seeds():
    assert cumulative([0.1, 0.1]).tolist() == pytest.approx([0.1, 0.2])
    assert cumulative([0.1, 0.1], mode="product").tolist() == pytest.approx([0.1, 0.21])
    s = over_seeds([1.0, 2.0, 3.0, float("nan")], confidence=0.95)
    assert (s.mean, s.std, s.n_seeds) == (2.0, 1.0, 3)
    assert s.ci_high - s.mean == pytest.approx(4.302652729911275 / math.sqrt(3))   # t_{0.975, 2} std / sqrt(3)
    with pytest.raises(ValueError, match="expected finite daily returns"):
        risk_analysis([0.1, float("nan")])


def test_same_rankings_fires_on_a_monotone_map_and_float_noise_not_on_a_swap():
    rng = np.random.default_rng(0)
    times = np.repeat(np.arange(50), 25)
    p = rng.normal(size=times.size)
    assert same_rankings(times, p, 0.05 * p + 3.0) and not same_predictions(p, 0.05 * p + 3.0)
    assert same_rankings(times, p, np.tanh(p))
    assert same_rankings(times, p, p + 1e-18)                    # the 1.7e-18: float noise
    swapped = p.copy()
    i, j = 3, 4                                                   # two rows of timestamp 0 trade places
    swapped[i], swapped[j] = p[j], p[i]
    assert not same_rankings(times, p, swapped)
    ties = np.round(p, 1)                                         # ties in one must be ties in the other
    assert same_rankings(times, ties, 2 * ties) and not same_rankings(times, ties, 2 * ties + 1e-3 * p)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(-40, 40).map(lambda k: k / 8), min_size=2, max_size=40), st.floats(0.01, 10),
       st.floats(-10, 10))
def test_same_rankings_property_any_increasing_affine_map(values, scale, shift):
    # values on a grid of 1/8: every step survives the map (>= 0.00125) far above the tie tolerance
    # (IDENTICAL_RTOL of the largest value, <= 6e-5 here); a step below it is a tie by definition (hypothesis found
    # 1e-5 on [0, 1e-5] mapped to 6e-7 on values near 1, and 4.4e-58 + 1 == 0 + 1)
    p = np.asarray(values)
    times = np.arange(p.size) % 3
    assert same_rankings(times, p, scale * p + shift)


@settings(max_examples=120, deadline=None)
@given(st.integers(1, 12), st.integers(2, 30), st.integers(0, 2**32 - 1), st.sampled_from(["same", "swap", "noise"]),
       st.sampled_from(["shuffled", "ascending", "ascending datetimes", "datetimes with NaT"]))
def test_same_rankings_probe_never_changes_the_answer(n_times, per_time, seed, kind, layout):
    """The probe of a few timestamps only ends early on a "no" that the full check gives too (rows in any order;
    in time order the probe's rows are the first ones)."""
    from rolling_calib.core.guards import IDENTICAL_RTOL, _same_order

    rng = np.random.default_rng(seed)
    times = np.repeat(np.arange(n_times), per_time)
    if layout == "shuffled":
        rng.shuffle(times)
    elif layout != "ascending":
        times = times.astype("datetime64[m]")
        if layout == "datetimes with NaT":
            times[0] = np.datetime64("NaT")
    x = np.round(rng.normal(size=times.size), 1)                   # ties
    y = {"same": 3 * x + 1, "swap": 3 * x + 1, "noise": x + rng.normal(0, 0.3, times.size)}[kind]
    if kind == "swap":                                              # one swap in the last timestamp only
        rows = np.flatnonzero(times == times.max()) if times.dtype.kind != "M" else np.flatnonzero(
            times == np.datetime64(n_times - 1, "m"))
        y[rows[[0, -1]]] = y[rows[[-1, 0]]]
    full = _same_order(times, x, y, IDENTICAL_RTOL * np.abs(x).max(), IDENTICAL_RTOL * np.abs(y).max())
    assert same_rankings(times, x, y) == full
