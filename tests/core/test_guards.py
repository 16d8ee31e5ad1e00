"""Guards: scale mismatch, degenerate seeds, no skill, and where the seed variance comes from."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rolling_calib.core.guards import (
    DEGENERATE_LIMIT,
    moments,
    scale_check,
    seed_spread,
    seed_variance_components,
    skill_check,
)

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


def _market(rng, n=5000):
    x = rng.normal(0, 1, n)
    y = 0.0115 * (0.05 * x + rng.normal(0, 1, n))      # daily returns, std ~0.0115, weakly predictable
    return x, y


def test_rank_normalised_predictions_scored_raw_are_a_scale_mismatch():
    rng = np.random.default_rng(0)
    x, y = _market(rng)
    # a model trained on CSRankNorm labels of 25 stocks: level ~0.069, spread ~0.2 (normalised units)
    p = 0.069 + 0.2 * x + rng.normal(0, 0.05, x.size)
    check = scale_check(p, y)
    assert check.mismatch
    assert check.spread_ratio > 100 and check.level_ratio > 10
    assert check.level_share + check.spread_share > 0.95
    assert abs(check.slope) < 0.01
    text = check.finding(unit="return")
    assert text.startswith("QL 0.0") and "return²" in text and "prediction variance" in text


def test_a_conditional_mean_forecast_is_not_a_mismatch():
    rng = np.random.default_rng(1)
    x, y = _market(rng)
    y = 0.0115 * (0.3 * x + rng.normal(0, 1, x.size))
    p = 0.0115 * 0.3 * x                       # E[y | x]
    check = scale_check(p, y)
    assert not check.mismatch
    assert check.slope == pytest.approx(1.0, abs=0.3)
    assert check.spread_ratio < 0.2


@given(arrays(np.float64, 12, elements=finite), arrays(np.float64, 12, elements=finite))
@settings(max_examples=200, deadline=None)
def test_ql_splits_into_level_spread_label_and_covariance(p, y):
    m = moments(p, y)
    ql = float(np.mean((y - p) ** 2))
    recomposed = (m.mean_p - m.mean_y) ** 2 + m.var_p + m.var_y - 2 * m.cov
    assert m.ql == pytest.approx(ql, rel=1e-7, abs=1e-6)
    assert recomposed == pytest.approx(ql, rel=1e-7, abs=1e-6)


@given(arrays(np.float64, 7, elements=finite), arrays(np.float64, 7, elements=finite), st.integers(1, 6))
@settings(max_examples=100, deadline=None)
def test_moments_add_up_over_parts(p, y, cut):
    whole = moments(p, y)
    parts = moments(p[:cut], y[:cut]) + moments(p[cut:], y[cut:])
    for field in whole.__dataclass_fields__:
        assert getattr(parts, field) == pytest.approx(getattr(whole, field), rel=1e-9, abs=1e-6)
    assert scale_check(pooled=parts).ql == pytest.approx(scale_check(p, y).ql, rel=1e-7, abs=1e-6)


def test_identical_and_nearly_identical_seeds_are_degenerate():
    rng = np.random.default_rng(2)
    base = rng.normal(0, 1, 500)
    same = seed_spread(np.vstack([base, base, base]))
    assert same.identical and same.degenerate and same.max_abs_difference == 0.0
    near = seed_spread(np.vstack([base, base + 1e-10 * rng.normal(0, 1, 500)]))
    assert not near.identical and near.degenerate and near.relative_spread < DEGENERATE_LIMIT
    real = seed_spread(np.vstack([base, base + 0.1 * rng.normal(0, 1, 500)]))
    assert not real.degenerate and real.relative_spread == pytest.approx(
        np.vstack([base, base + 0.1 * rng.normal(0, 1, 500)]).std(axis=0).mean() / base.std(), rel=0.3)
    with pytest.raises(ValueError, match="seeds >= 2"):
        seed_spread(base[None, :])


def test_skill_needs_positive_ic_and_a_loss_below_the_mean_predictor():
    assert skill_check(ql=[1.0, 1.1], baseline_ql=2.0, ic=[0.01, 0.02]).skill
    negative = skill_check(ql=[1.0, 1.1], baseline_ql=2.0, ic=[-0.01, -0.02])
    assert not negative.skill and negative.positive_ic is False and negative.beats_mean
    worse = skill_check(ql=[2.1, 2.2], baseline_ql=2.0, ic=[0.01, 0.02])
    assert not worse.skill and not worse.beats_mean
    no_ic = skill_check(ql=[1.0], baseline_ql=2.0)
    assert no_ic.skill and no_ic.positive_ic is None


def _runs(rng, offsets, scales, comove, periods=3, n=400):
    y = [rng.normal(0, 1, n) for _ in range(periods)]
    f = [rng.normal(0, 1, n) for _ in range(periods)]
    return [[moments(o + s * f[k] + c * y[k], y[k]) for k in range(periods)]
            for o, s, c in zip(offsets, scales, comove)]


def test_offset_only_seeds_are_all_offset():
    rng = np.random.default_rng(3)
    c = seed_variance_components(_runs(rng, offsets=[0.0, 0.4, 0.9, 1.3], scales=[0.2] * 4, comove=[0.1] * 4))
    assert c.dominant == "offset" and c.offset == pytest.approx(1.0, abs=1e-6)
    assert c.cause() == "what a bias correction leaves does not vary between seeds"   # the offsets were all of it


def test_comovement_seeds_are_named_as_such():
    rng = np.random.default_rng(4)
    c = seed_variance_components(_runs(rng, offsets=[0.0] * 4, scales=[0.05] * 4, comove=[0.0, 0.2, 0.4, 0.6]))
    assert c.dominant == "comovement" and c.residual_comovement > 0.9
    assert c.cause().startswith("what a bias correction cannot remove (each seed's residual spread around its period "
                                "bias) varies mostly with how their predictions co-move with the label")


def test_noise_scale_seeds_are_named_as_such():
    rng = np.random.default_rng(6)
    c = seed_variance_components(_runs(rng, offsets=[0.0] * 4, scales=[0.1, 0.5, 0.9, 1.3], comove=[0.2] * 4))
    assert c.residual_scale > 0.9 and "mostly with the scale of their prediction noise" in c.cause()


@given(st.integers(0, 10_000))
@settings(max_examples=50, deadline=None)
def test_shares_add_up_to_one(seed):
    rng = np.random.default_rng(seed)
    k = 5
    runs = _runs(rng, offsets=rng.normal(0, 0.3, k), scales=rng.uniform(0, 1, k), comove=rng.normal(0, 0.3, k), n=50)
    c = seed_variance_components(runs)
    assert c.offset + c.scale + c.comovement == pytest.approx(1.0, abs=1e-6)


def test_components_refuse_ragged_runs():
    rng = np.random.default_rng(5)
    runs = _runs(rng, offsets=[0, 1], scales=[1, 1], comove=[0, 0])
    with pytest.raises(ValueError, match="same non-zero number of periods"):
        seed_variance_components([runs[0], runs[1][:1]])


# --------------------------------------------------------------------------- issue 29: constant predictions, identical pipelines
def test_constant_check_by_hand():
    from rolling_calib.core.guards import constant_check

    c = constant_check(np.array([2, 1, 2, 1]), np.array([0.5, 0.1, 0.5, 0.1]))   # unsorted times, one value each
    assert c.constant and c.n_times == 2 and c.n_rows == 4 and c.max_range == 0.0 and c.mean_prediction == 0.3
    c = constant_check(np.array([1, 1, 2, 2]), np.array([0.5, 0.5, 0.1, 0.4]))
    assert not c.constant and abs(c.max_range - 0.3) < 1e-15
    with pytest.raises(ValueError, match="same length"):
        constant_check(np.array([1, 2]), np.array([0.5]))


@given(st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=30), st.integers(1, 5))
def test_constant_check_finds_any_variation_inside_a_timestamp(values, n_times):
    from rolling_calib.core.guards import constant_check

    p = np.array(values)
    times = np.arange(len(p)) % n_times
    expected = all(np.ptp(p[times == t]) <= 1e-7 * np.abs(p).max() for t in np.unique(times))
    assert constant_check(times, p).constant == expected


def test_same_predictions_to_float_rounding():
    from rolling_calib.core.guards import same_predictions

    p = np.linspace(-1, 1, 50)
    assert same_predictions(p, p.astype(np.float32).astype(np.float64))         # float32 rounding: the same
    assert not same_predictions(p, p + 1e-4)
    assert not same_predictions(p, p[:-1])
