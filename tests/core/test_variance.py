"""The crossed seeds x time variance of a pair's difference: each part counted once, checked by hand,
against independent implementations and by simulation against a known truth."""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm
from arch.covariance.kernel import Bartlett
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from rolling_calib.core.variance import (
    andrews_bandwidth,
    bartlett_lrv,
    batch_means_variance,
    crossed_variance,
    influence,
    welch_df,
)


def test_influence_by_hand_and_its_mean_is_zero():
    total = np.array([[2.0, 9.0], [4.0, 3.0]])
    weight = np.array([[1.0, 3.0], [1.0, 3.0]])
    m, z = influence(total, weight)
    assert m.tolist() == [2.75, 1.75]
    # z = T (total - M w) / W: row 0: 2 (2 - 2.75) / 4 = -0.375, 2 (9 - 8.25) / 4 = 0.375
    assert z[0].tolist() == pytest.approx([-0.375, 0.375])
    assert np.allclose(z.mean(axis=1), 0.0)


@given(st.lists(st.floats(-100, 100), min_size=2, max_size=30))
@settings(max_examples=50, deadline=None)
def test_influence_with_equal_weights_is_the_demeaned_loss(values):
    x = np.array([values])
    m, z = influence(x, np.ones_like(x))
    assert m[0] == pytest.approx(x.mean())
    assert z[0] == pytest.approx(x[0] - x.mean(), abs=1e-9)


@pytest.mark.parametrize("m", [0, 1, 4, 9])
def test_bartlett_lrv_is_newey_west_and_archs(m):
    d = np.random.default_rng(m).normal(0.3, 1.0, 150)
    fit = sm.OLS(d, np.ones_like(d)).fit(cov_type="HAC", cov_kwds={"maxlags": m, "use_correction": False})
    assert bartlett_lrv(d, m) / d.size == pytest.approx(fit.bse[0] ** 2, rel=1e-10)
    arch_lrv = float(np.asarray(Bartlett(d, bandwidth=m).cov.long_run).ravel()[0])
    assert bartlett_lrv(d, m) == pytest.approx(arch_lrv, rel=1e-10)


def test_andrews_bandwidth_by_hand():
    # rho = 0.5: alpha = 4 * 0.25 / (0.25 * 2.25) = 1.777..; 1.1447 * (1.777.. * 250) ** (1/3) = 8.74 -> 9
    assert andrews_bandwidth(0.5, 250) == 9
    assert andrews_bandwidth(0.0, 250) == 0
    assert andrews_bandwidth(float("nan"), 250) == 0
    assert andrews_bandwidth(0.999, 20) <= 19


def test_batch_means_and_welch_by_hand():
    assert batch_means_variance(np.array([[1.0, 1.0, 3.0, 3.0, 5.0, 5.0]]), 3).tolist() == [4.0]
    assert welch_df([(2.0, 3.0), (0.0, 1.0)]) == pytest.approx(3.0)
    assert welch_df([]) == math.inf


def test_period_target_is_the_paired_t_and_welch():
    rng = np.random.default_rng(3)
    x = rng.normal(0.2, 1.0, (6, 1)) + rng.normal(0, 2.0, (6, 40))
    cv = crossed_variance(x, target="period")
    runs = x.mean(axis=1)
    assert cv.var == pytest.approx(runs.var(ddof=1) / 6) and cv.df == 5.0 and cv.var_time == 0.0
    a = rng.normal(0, 1, (4, 30)) + rng.normal(0, 1, (4, 1))
    b = rng.normal(0, 1, (7, 30)) + rng.normal(0, 2, (7, 1))
    cu = crossed_variance(a=(a, np.ones_like(a)), b=(b, np.ones_like(b)), target="period")
    ra, rb = a.mean(axis=1), b.mean(axis=1)
    half = stats.ttest_ind(ra, rb, equal_var=False).confidence_interval(0.95)
    assert cu.half_width(0.95) == pytest.approx((half.high - half.low) / 2, rel=1e-10)


def test_time_part_is_unbiased_for_the_common_part_only():
    """A white common part of sd 1 over T days: E[var_time] = 1 / T whatever the seeds' own noise (sd 3)."""
    rng = np.random.default_rng(11)
    T, k = 200, 5
    vt = []
    for _ in range(300):
        x = rng.normal(0, 1.0, T) + rng.normal(0, 0.5, (k, 1)) + rng.normal(0, 3.0, (k, T))
        vt.append(crossed_variance(x, target="future").var_time_short * T)
    # without the correction the estimate would be 1 + 9 / 5 = 2.8
    assert np.mean(vt) == pytest.approx(1.0, abs=0.15)


def test_unpaired_noise_is_removed_from_both_sides():
    rng = np.random.default_rng(12)
    T = 150
    vt = []
    for _ in range(200):
        g = rng.normal(0, 1.0, T)
        a = 5 + g + rng.normal(0, 2.0, (4, T))
        b = 5 + rng.normal(0, 2.0, (6, T))
        vt.append(crossed_variance(a=(a, np.ones_like(a)), b=(b, np.ones_like(b)), target="future").var_time_short * T)
    assert np.mean(vt) == pytest.approx(1.0, abs=0.2)


def test_drift_check_fires_on_regimes_of_months_and_rarely_on_white_noise():
    rng = np.random.default_rng(13)
    T, k = 250, 5
    fired_white = fired_drift = 0
    for _ in range(100):
        white = rng.normal(0, 1.0, T) + rng.normal(0, 1.0, (k, T))
        fired_white += crossed_variance(white, target="future").drift
        levels = np.repeat(rng.normal(0, 1.0, 5), 50)       # five regimes of 50 days, level sd = daily sd
        drifting = levels + rng.normal(0, 1.0, T) + rng.normal(0, 1.0, (k, T))
        fired_drift += crossed_variance(drifting, target="future").drift
    assert fired_white <= 12          # 5% nominal, 100 draws
    assert fired_drift >= 40          # strong five-regime drift: seen more often than not (measured 59%)
    x = np.repeat(rng.normal(0, 1.0, 5), 50) + rng.normal(0, 1.0, (k, T))
    cv = crossed_variance(x, target="future")
    if cv.drift:
        assert cv.var_time == cv.var_time_months and cv.df_time == cv.n_blocks - 1


def test_bad_target_is_refused():
    with pytest.raises(ValueError, match="target"):
        crossed_variance(np.ones((2, 5)), target="forever")
