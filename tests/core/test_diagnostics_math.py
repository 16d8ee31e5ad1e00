"""rolling_calib.core.diagnostics: the seed-variance split, offsets, persistence, the verdict.

Values are checked against hand computations and against the raw residuals they summarise;
hypothesis checks the identity ``Var(QL) = Var(B) + Var(S) + 2 Cov(B, S)`` on random inputs.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rolling_calib.core import diagnostics as D
from rolling_calib.core.resampling import Resampling

SETTINGS = settings(max_examples=80, deadline=None)


# --------------------------------------------------------------------------- hand-computed values
def test_split_by_hand():
    # seed 0: bias 1 in both periods, residual variance 1; seed 1: no bias, variance 3 then 1.
    # weights 1 and 3: B = [1, 0], S = [1, (3 + 3) / 4 = 1.5], QL = [2, 1.5]
    s = D.split_seed_variance(bias=[[1.0, 1.0], [0.0, 0.0]], ql=[[2.0, 2.0], [3.0, 1.0]], weights=[1, 3])
    assert s.bias_part.tolist() == [1.0, 0.0]
    assert s.spread_part.tolist() == [1.0, 1.5]
    assert s.ql.tolist() == [2.0, 1.5]
    # two seeds: Var = (a - b)^2 / 2, Cov = (a1 - b1)(a2 - b2) / 2
    assert s.var_ql == pytest.approx(0.125)
    assert s.var_bias == pytest.approx(0.5)
    assert s.var_spread == pytest.approx(0.125)
    assert s.cov == pytest.approx(-0.25)
    assert (s.frac_bias, s.frac_spread, s.frac_cov) == pytest.approx((4.0, 1.0, -4.0))
    assert s.std_ql == pytest.approx(math.sqrt(0.125)) and s.std_spread == pytest.approx(math.sqrt(0.125))


def test_split_matches_the_raw_residuals():
    """B, S and QL from per-period summaries equal the same quantities computed row by row."""
    rng = np.random.default_rng(4)
    sizes = [5, 9, 7]
    residuals = [[rng.normal(rng.normal(0, 2), rng.uniform(0.5, 2), n) for n in sizes] for _ in range(4)]
    bias = [[e.mean() for e in run] for run in residuals]
    ql = [[np.mean(e**2) for e in run] for run in residuals]
    s = D.split_seed_variance(bias, ql, weights=sizes)
    for r, run in enumerate(residuals):
        allrows = np.concatenate(run)
        centred = np.concatenate([e - e.mean() for e in run])
        squared_bias = np.concatenate([np.full(e.size, e.mean() ** 2) for e in run])
        assert s.ql[r] == pytest.approx(np.mean(allrows**2))
        assert s.spread_part[r] == pytest.approx(np.mean(centred**2))
        assert s.bias_part[r] == pytest.approx(np.mean(squared_bias))
    assert s.var_ql == pytest.approx(np.var([np.mean(np.concatenate(run) ** 2) for run in residuals], ddof=1))


def test_split_with_per_seed_weights():
    s = D.split_seed_variance([[1.0, 0.0], [1.0, 0.0]], [[1.0, 1.0], [1.0, 1.0]], weights=[[1, 1], [3, 1]])
    assert s.bias_part.tolist() == [0.5, 0.75]
    assert s.spread_part.tolist() == [0.5, 0.25]


def test_split_to_dict_is_json():
    s = D.split_seed_variance([[0.0], [0.0]], [[1.0], [1.0]], weights=[1])
    out = s.to_dict()
    assert out["frac_bias"] is None and out["var_ql"] == 0.0
    json.dumps(out, allow_nan=False)


def test_offsets_and_refits_by_hand():
    o = D.seed_offsets([[1.0, 4.0, 0.0], [3.0, 0.0, 0.0], [2.0, 2.0, 3.0]])
    assert o.tolist() == [[-1.0, 2.0, -1.0], [1.0, -2.0, -1.0], [0.0, 0.0, 2.0]]
    assert D.refit_boundaries([3, 3, 3]).tolist() == [False, False, False]
    assert D.refit_boundaries([0, 1, 1, 2]).tolist() == [False, True, False, True]


def test_persistence_by_hand():
    # seed offsets [2, 1, -1] and [-2, -1, 1]; refit before period 2
    p = D.offset_persistence([[2.0, 1.0, -1.0], [-2.0, -1.0, 1.0]], refit=[False, False, True])
    assert (p.n_pairs, p.n_within, p.n_across) == (4, 2, 2)
    assert p.corr_within == pytest.approx(1.0)          # (2,1), (-2,-1)
    assert p.corr_across == pytest.approx(-1.0)         # (1,-1), (-1,1)
    assert p.corr == pytest.approx((2 + 2 - 1 - 1) / math.sqrt((4 + 4 + 1 + 1) * (1 + 1 + 1 + 1)))
    assert (p.level_within, p.change_within) == pytest.approx((1.0, 1.0))
    assert (p.level_across, p.change_across) == pytest.approx((1.0, 4.0))
    assert (p.level, p.change) == pytest.approx((1.0, 2.5))
    assert not p.previous_predicts


def test_persistence_of_constant_offsets_and_without_refits():
    p = D.offset_persistence([[1.5, 1.5, 1.5, 1.5], [-1.5, -1.5, -1.5, -1.5]], refit=[False] * 4)
    assert p.corr_within == pytest.approx(1.0) and p.change == 0.0 and p.level == pytest.approx(2.25)
    assert p.previous_predicts
    assert p.n_across == 0 and math.isnan(p.corr_across) and math.isnan(p.change_across)
    assert p.to_dict()["corr_across"] is None


def test_persistence_of_zero_offsets_is_nan():
    p = D.offset_persistence(np.zeros((3, 3)), refit=[False, True, False])
    assert math.isnan(p.corr) and p.level == 0.0 and p.change == 0.0


def test_prediction_spread_by_hand():
    s = D.prediction_spread([[0.0, 2.0], [2.0, 2.0], [4.0, 2.0]], [[1.0, 2.0], [3.0, 2.0], [5.0, 2.0]])
    assert s.mean_spread == pytest.approx((2.0 + 0.0) / 2)   # std over seeds per period: 2 and 0
    assert s.scale == pytest.approx(15.0 / 6)
    assert s.scale_spread == pytest.approx(1.0)


def test_correction_fractions():
    assert D.correction_fractions(4.0, 1.0, 2.0) == (0.75, 0.5)
    assert D.correction_fractions(1.0, 1.2, 1.5) == pytest.approx((-0.2, -0.5))
    assert all(math.isnan(v) for v in D.correction_fractions(0.0, 0.0, 0.0))
    assert all(math.isnan(v) for v in D.correction_fractions(math.nan, 0.0, 0.0))


# --------------------------------------------------------------------------- the assessment
def _ratio(r: float, lo: float, hi: float) -> D.StdRatio:
    return D.StdRatio(r, lo, hi, 0.95, 2000, 0)


def _persistence(within: float, across: float) -> D.OffsetPersistence:
    return D.OffsetPersistence(corr=within, corr_within=within, corr_across=across, n_pairs=10, n_within=8,
                               n_across=2, level=1.0, change=0.5, level_within=1.0, change_within=0.4,
                               level_across=1.0, change_across=2.0)


def test_helps_only_when_it_narrows_and_keeps_the_order():
    helps = D.assess_calibration(removable=0.93, removed=0.9, ratio=_ratio(0.1, 0.05, 0.2), keeps_order=True,
                                 order_detail="CQL 95%, QL 2..K 80%")
    assert helps.helps is True and helps.headline == "Calibration helps here"
    assert "0.10x QL 2..K's" in helps.text and "[0.05, 0.20]" in helps.text and "CQL 95%, QL 2..K 80%" in helps.text
    worse_order = D.assess_calibration(removable=0.93, removed=0.9, ratio=_ratio(0.1, 0.05, 0.2), keeps_order=False)
    assert worse_order.helps is False and "orders the pipelines worse" in worse_order.headline
    unchecked = D.assess_calibration(removable=0.93, removed=0.9, ratio=_ratio(0.1, 0.05, 0.2), keeps_order=None)
    assert unchecked.helps is None and "cannot be checked" in unchecked.headline


def test_does_not_help_when_the_interval_reaches_one():
    widens = D.assess_calibration(removable=0.04, removed=-0.12, ratio=_ratio(1.12, 1.02, 1.3), keeps_order=True)
    assert widens.helps is False and widens.headline == "Calibration does not help here"
    assert "it added 12%" in widens.text
    unclear = D.assess_calibration(removable=0.3, removed=0.1, ratio=_ratio(0.9, 0.7, 1.1), keeps_order=True)
    assert unclear.helps is False and unclear.headline == "Calibration does not clearly help here"


def test_a_scale_mismatch_overrides_a_narrower_spread():
    a = D.assess_calibration(removable=0.95, removed=0.93, ratio=_ratio(0.07, 0.05, 0.1), keeps_order=True,
                             scale_mismatch="QL here measures the level of the predictions")
    assert a.helps is False and "different scales" in a.headline
    assert a.reasons[0].startswith("QL here measures the level of the predictions")


def test_reasons_come_from_the_measurements():
    """Persistence reasons carry the measured correlations; a cause string is passed through as measured."""
    reset = D.assess_calibration(removable=0.8, removed=0.3, ratio=_ratio(0.8, 0.6, 0.95), keeps_order=True,
                                 persistence=_persistence(0.95, -0.4), cause="seeds differ mostly in X (70%)")
    assert "-0.40 across a refit against 0.95 inside a window" in reset.text
    assert "seeds differ mostly in X (70%)" in reset.text
    drift = D.assess_calibration(removable=0.4, removed=-0.1, ratio=_ratio(1.1, 0.9, 1.3), keeps_order=None,
                                 persistence=_persistence(0.1, math.nan))
    assert "even inside a window (correlation 0.10)" in drift.text and "refit" not in drift.text
    flat = D.assess_calibration(removable=math.nan, removed=math.nan, ratio=_ratio(math.nan, math.nan, math.nan),
                                keeps_order=None)
    assert flat.headline.startswith("No verdict")


def test_std_ratio_interval_by_hand_and_with_a_seed():
    r = D.std_ratio_interval([1.0, 2.0, 4.0, 7.0], [1.0, 1.5, 2.5, 4.0], resampling=Resampling(n_boot=500, seed=3))
    assert r.ratio == pytest.approx(np.std([1.0, 1.5, 2.5, 4.0], ddof=1) / np.std([1.0, 2.0, 4.0, 7.0], ddof=1))
    assert r.ci_low <= r.ratio <= r.ci_high
    assert r == D.std_ratio_interval([1.0, 2.0, 4.0, 7.0], [1.0, 1.5, 2.5, 4.0], resampling=Resampling(n_boot=500, seed=3))
    with pytest.raises(ValueError, match="at least 2 seeds"):
        D.std_ratio_interval([1.0], [1.0])


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"bias": [[1.0, 2.0]], "ql": [[2.0, 5.0]], "weights": [1, 1]}, "at least 2 seeds"),
        ({"bias": [[1.0], [2.0]], "ql": [[2.0, 5.0], [1.0, 1.0]], "weights": [1]}, "expected shape"),
        ({"bias": [[1.0], [np.nan]], "ql": [[2.0], [1.0]], "weights": [1]}, "finite values, found nan at seed 1"),
        ({"bias": [[1.0], [0.0]], "ql": [[2.0], [1.0]], "weights": [-1]}, "weights >= 0"),
        ({"bias": [[1.0], [0.0]], "ql": [[2.0], [1.0]], "weights": [[1], [0]]}, "a seed with none"),
        ({"bias": [1.0, 0.0], "ql": [2.0, 1.0], "weights": [1]}, "2-D array"),
        ({"bias": [[1.0], [0.0]], "ql": [[2.0], [1.0]], "weights": [1, 2]}, "one weight per period"),
    ],
)
def test_split_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        D.split_seed_variance(**kwargs)


def test_persistence_rejects_mismatched_refits():
    with pytest.raises(ValueError, match="one flag per period"):
        D.offset_persistence([[0.0, 1.0], [0.0, -1.0]], refit=[False])


# --------------------------------------------------------------------------- properties
@st.composite
def panels(draw):
    """Per-period bias, residual variance (>= 0) and row counts of 2-8 seeds over 1-6 periods."""
    m = draw(st.integers(2, 8))
    k = draw(st.integers(1, 6))
    bias = draw(hnp.arrays(np.float64, (m, k), elements=st.floats(-20, 20, allow_nan=False)))
    var = draw(hnp.arrays(np.float64, (m, k), elements=st.floats(0, 50, allow_nan=False)))
    rows = draw(hnp.arrays(np.int64, k, elements=st.integers(1, 1000)))
    return bias, var, rows


@SETTINGS
@given(panels())
def test_decomposition_identity_holds(panel):
    bias, var, rows = panel
    s = D.split_seed_variance(bias, bias**2 + var, rows)
    scale = 1.0 + float(np.max(bias**2 + var)) ** 2
    assert s.var_ql == pytest.approx(s.var_bias + s.var_spread + 2 * s.cov, abs=1e-9 * scale)
    np.testing.assert_allclose(s.ql, s.bias_part + s.spread_part, rtol=1e-12, atol=1e-9)
    if s.var_ql > 1e-6 * scale:
        assert s.frac_bias + s.frac_spread + s.frac_cov == pytest.approx(1.0, abs=1e-6)


@SETTINGS
@given(panels())
def test_no_bias_part_when_seeds_share_each_periods_bias(panel):
    bias, var, rows = panel
    shared = np.broadcast_to(bias[:1], bias.shape)          # every seed has seed 0's bias in every period
    s = D.split_seed_variance(shared, shared**2 + var, rows)
    assert s.var_bias == 0.0 and s.cov == 0.0
    assert s.var_ql == pytest.approx(s.var_spread, abs=1e-9 * (1.0 + float(np.max(shared**2 + var)) ** 2))


@SETTINGS
@given(panels())
def test_no_spread_part_when_seeds_share_the_residual_variance(panel):
    bias, var, rows = panel
    shared = np.broadcast_to(var[:1], var.shape)
    s = D.split_seed_variance(bias, bias**2 + shared, rows)
    assert s.var_spread == pytest.approx(0.0, abs=1e-9 * (1.0 + float(np.max(shared))) ** 2)
    assert s.var_ql == pytest.approx(s.var_bias, abs=1e-9 * (1.0 + float(np.max(bias**2 + shared))) ** 2)


@SETTINGS
@given(panels(), st.lists(st.booleans(), min_size=6, max_size=6))
def test_offsets_average_zero_and_persistence_is_bounded(panel, flags):
    bias, _, _ = panel
    o = D.seed_offsets(bias)
    np.testing.assert_allclose(o.mean(axis=0), 0.0, atol=1e-12 * (1 + np.abs(bias).max()))
    refit = np.array(flags[: bias.shape[1]])
    refit[0] = False
    p = D.offset_persistence(o, refit)
    assert p.n_within + p.n_across == p.n_pairs == bias.shape[0] * (bias.shape[1] - 1)
    for corr in (p.corr, p.corr_within, p.corr_across):
        assert math.isnan(corr) or -1 - 1e-9 <= corr <= 1 + 1e-9
    if p.n_pairs:
        # (o_k - o_{k-1})^2 = o_k^2 + o_{k-1}^2 - 2 o_k o_{k-1}, averaged over the pairs
        prev, cur = o[:, :-1], o[:, 1:]
        assert p.change == pytest.approx(np.mean(cur**2) + np.mean(prev**2) - 2 * np.mean(prev * cur), abs=1e-9 * (1 + np.abs(bias).max()) ** 2)
