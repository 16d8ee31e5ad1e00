"""The verdict between two pipelines: seeds and market time counted once, both targets, Diebold-Mariano, seeds
needed, model confidence set."""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm
from arch.covariance.kernel import Bartlett
from hypothesis import given, settings
from hypothesis import strategies as st

from rolling_calib.core.variance import andrews_bandwidth, bartlett_lrv
from rolling_calib.core.verdict import (
    LossPanel,
    decide,
    decide_probability,
    diebold_mariano,
    model_confidence_set,
    seeds_needed,
)
from rolling_calib.core.question import Question
from rolling_calib.core.resampling import Resampling


def _panels(rng, *, k=6, T=80, effect=0.0, seed_sd=0.2, time_sd=1.0, shared_seed=False, ar=0.5, interaction_sd=0.0):
    """Two pipelines' daily losses: a common AR(1) market-time path, per-seed offsets, noise, and a per-day
    interaction (what the market does to a only: the differential's market-time part)."""
    e = rng.normal(0, time_sd, T)
    path = np.empty(T)
    path[0] = e[0]
    for t in range(1, T):
        path[t] = ar * path[t - 1] + e[t]
    seed_a = rng.normal(0, seed_sd, (k, 1))
    seed_b = seed_a.copy() if shared_seed else rng.normal(0, seed_sd, (k, 1))
    a = 10 + path + seed_a + effect + rng.normal(0, 0.05, (k, T)) + rng.normal(0, interaction_sd, T)
    b = 10 + path + seed_b + rng.normal(0, 0.05, (k, T))
    return LossPanel.from_arrays(seeds=range(k), total=a), LossPanel.from_arrays(seeds=range(k), total=b)


def test_difference_is_the_row_weighted_mean_per_run_then_over_seeds():
    total_a = np.array([[2.0, 9.0], [4.0, 3.0]])
    weight = np.array([1.0, 3.0])
    a = LossPanel.from_arrays(seeds=[0, 1], total=total_a, weight=weight)
    b = LossPanel.from_arrays(seeds=[0, 1], total=np.array([[1.0, 3.0], [1.0, 3.0]]), weight=weight)
    v = decide(a, b)
    # runs of a: (2 + 9) / 4 = 2.75, (4 + 3) / 4 = 1.75 -> 2.25; runs of b: 1.0 -> difference 1.25
    assert v.difference == pytest.approx(1.25)
    assert v.means == pytest.approx((2.25, 1.0))


def test_time_variance_with_one_seed_is_the_bartlett_lrv_of_the_differential():
    """With one seed per pipeline there is no seed noise to remove: the time part is the Bartlett LRV / T,
    bandwidth by Andrews' rule on the lag-1 autocorrelation, checked against statsmodels' Newey-West."""
    rng = np.random.default_rng(5)
    e = rng.normal(0, 1.0, 121)
    d = 0.1 + e[1:] + 0.6 * e[:-1]                 # MA(1): lag-1 autocorrelation about 0.44
    a = LossPanel.from_arrays(seeds=[0], total=d[None, :] + 1.0)
    b = LossPanel.from_arrays(seeds=[7], total=np.ones((1, 120)))
    v = decide(a, b, question=Question(target="future"))
    x = d - d.mean()
    rho = (x[1:] * x[:-1]).sum() / (x * x).sum()
    m = andrews_bandwidth(rho, 120)
    fit = sm.OLS(d, np.ones_like(d)).fit(cov_type="HAC", cov_kwds={"maxlags": m, "use_correction": False})
    assert m == v.variance.bandwidth and m >= 1
    assert v.var_time == pytest.approx(fit.bse[0] ** 2, rel=1e-9)
    assert v.var_time == pytest.approx(bartlett_lrv(d, m) / 120, rel=1e-12)
    assert not v.paired and v.var_seeds == 0.0 and v.dominant_uncertainty == "time"
    nu = 120 / (1 + 2 * m / 3)                      # Bartlett's degrees of freedom
    half = __import__("scipy").stats.t.ppf(0.975, nu) * math.sqrt(v.var_time)
    assert (v.ci_low, v.ci_high) == pytest.approx((d.mean() - half, d.mean() + half))


def test_period_target_with_one_run_of_a_pipeline_is_undetermined_and_says_why():
    """Over seeds on these days, one run per pipeline measures no seed variance: the interval is unbounded
    (before the default became the period target, such a verdict decided with a zero-width interval)."""
    d = np.random.default_rng(5).normal(0.5, 1.0, (1, 60))
    a = LossPanel.from_arrays(seeds=[0], total=d + 1.0)
    b = LossPanel.from_arrays(seeds=[7], total=np.ones((1, 60)))
    v = decide(a, b)
    assert v.target == "period" and v.outcome == "undetermined"
    assert (v.ci_low, v.ci_high) == (-math.inf, math.inf)
    assert v.seeds_needed.n is None and "at least 2 seeds per pipeline" in v.seeds_needed.reason


def test_the_default_question_is_the_period_and_the_verdict_names_its_days():
    days = np.arange("2018-01-02", "2018-01-22", dtype="datetime64[D]")
    rng = np.random.default_rng(2)
    a = LossPanel.from_arrays(seeds=range(3), total=rng.normal(0, 1, (3, 20)), times=days)
    b = LossPanel.from_arrays(seeds=range(3), total=rng.normal(0, 1, (3, 20)), times=days)
    v = decide(a, b)
    assert v.target == "period" and v.var_time == 0.0
    assert v.days == ("2018-01-02", "2018-01-21") and v.to_dict()["days"] == ["2018-01-02", "2018-01-21"]


def test_period_target_is_the_paired_t_interval_of_run_means():
    stats = __import__("scipy").stats
    rng = np.random.default_rng(8)
    a, b = _panels(rng, k=7, T=50, effect=-0.1)
    v = decide(a, b, question=Question(target="period"))
    d_s = a.run_means() - b.run_means()
    ci = stats.ttest_1samp(d_s, 0.0).confidence_interval(0.95)
    assert v.target == "period" and v.var_time == 0.0 and v.paired
    assert (v.ci_low, v.ci_high) == pytest.approx((ci.low, ci.high), rel=1e-10)
    assert v.to_dict()["question"] == {"target": "period", "confidence": 0.95} and v.question == Question("period")


def test_seed_noise_is_not_counted_twice():
    """Seed x day noise with no common market-time part: the time part is near 0 on average (before the fix it
    was the noise's variance again), and the interval's level holds under both targets."""
    rng = np.random.default_rng(21)
    shares, decided = [], {"future": 0, "period": 0}
    for _ in range(150):
        x = rng.normal(0, 0.3, (5, 1)) + rng.normal(0, 2.0, (5, 120))
        a = LossPanel.from_arrays(seeds=range(5), total=10 + x)
        b = LossPanel.from_arrays(seeds=range(5), total=np.full((5, 120), 10.0))
        v = decide(a, b)
        shares.append(v.var_time / (v.var_seeds + v.var_time))
        for target in decided:
            decided[target] += decide(a, b, question=Question(target=target)).determined
    assert np.mean(shares) < 0.1
    assert all(n / 150 <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 150) for n in decided.values())


def test_seed_part_is_the_unbiased_variance_with_student_t():
    """Without time variation the interval is Welch's t interval of the run values (unpaired) or the paired t."""
    stats = __import__("scipy").stats
    ma, mb = np.array([1.0, 1.4, 0.7, 1.2]), np.array([2.0, 2.5, 1.9])
    a = LossPanel.from_arrays(seeds=[0, 1, 2, 3], total=np.repeat(ma[:, None], 5, axis=1))
    b = LossPanel.from_arrays(seeds=[0, 1, 2], total=np.repeat(mb[:, None], 5, axis=1))
    v = decide(a, b)
    welch = stats.ttest_ind(ma, mb, equal_var=False).confidence_interval(0.95)
    assert not v.paired and v.var_time == pytest.approx(0.0, abs=1e-24)
    assert (v.ci_low, v.ci_high) == pytest.approx((welch.low, welch.high))
    c = LossPanel.from_arrays(seeds=[3, 2, 1, 0], total=np.repeat((ma + 0.5)[::-1, None], 5, axis=1))
    w = decide(a, c)      # seed 3 of c is row 0: pairs are matched by seed, not by row
    assert w.paired and w.difference == pytest.approx(-0.5) and w.ci_high - w.ci_low == pytest.approx(0.0, abs=1e-9)


def test_clear_difference_is_decided_in_both_orientations():
    rng = np.random.default_rng(1)
    a, b = _panels(rng, effect=-1.0)
    v = decide(a, b, names=("fast", "slow"))
    assert (v.outcome, v.winner) == ("better", "fast")
    assert v.ci_high < 0
    w = decide(b, a, names=("slow", "fast"))
    assert (w.outcome, w.winner) == ("worse", "fast")
    # a score where higher is better (IC): the same numbers read the other way round
    s = decide(a, b, names=("fast", "slow"), orientation="higher")
    assert (s.outcome, s.winner) == ("worse", "slow")


def test_no_difference_is_mostly_undetermined():
    """Under the null the interval covers 0 at least as often as its confidence says (it errs wide)."""
    rng = np.random.default_rng(7)
    decided = 0
    runs = 60
    for i in range(runs):
        a, b = _panels(rng, k=5, T=60, effect=0.0)
        decided += decide(a, b).determined
    assert decided / runs <= 0.08


def test_pairing_narrows_when_seeds_are_common_random_numbers():
    rng = np.random.default_rng(3)
    a, b = _panels(rng, k=8, effect=-0.05, seed_sd=1.0, time_sd=0.05, shared_seed=True)
    v = decide(a, b)
    assert v.paired and v.paired_ci is not None
    assert v.pairing_narrowing > 0.5
    assert v.dominant_uncertainty in ("seeds", "time")
    unpaired = decide(a, b, pair_seeds=False)
    assert not unpaired.paired and unpaired.ci_low == pytest.approx(v.unpaired_ci[0])


def test_dominant_uncertainty_follows_the_larger_source():
    rng = np.random.default_rng(4)
    future = Question(target="future")   # the period target has no market-time part: seeds always dominate
    a, b = _panels(rng, seed_sd=3.0, time_sd=0.01)
    assert decide(a, b, pair_seeds=False, question=future).dominant_uncertainty == "seeds"
    a, b = _panels(rng, seed_sd=0.001, time_sd=3.0)      # the market moves both alike: it cancels
    assert decide(a, b, pair_seeds=False, question=future).dominant_uncertainty == "seeds"
    a, b = _panels(rng, seed_sd=0.001, time_sd=3.0, interaction_sd=1.0)
    assert decide(a, b, pair_seeds=False, question=future).dominant_uncertainty == "time"
    assert decide(a, b, pair_seeds=False).dominant_uncertainty == "seeds"


def test_the_verdict_is_deterministic():
    rng = np.random.default_rng(2)
    a, b = _panels(rng)
    assert decide(a, b).to_dict() == decide(a, b).to_dict()     # analytic: no random draw


def test_panels_are_aligned_on_common_time_units():
    a = LossPanel.from_arrays(seeds=[0, 1], total=np.ones((2, 5)), times=np.arange(5))
    b = LossPanel.from_arrays(seeds=[0, 1], total=np.ones((2, 4)), times=np.arange(2, 6))
    v = decide(a, b)
    assert v.n_times == 3 and v.times_dropped == 3
    c = LossPanel.from_arrays(seeds=[0], total=np.ones((1, 3)), times=[10, 11, 12])
    with pytest.raises(ValueError, match="share 0 time unit"):
        decide(a, c)


@pytest.mark.parametrize("kwargs, match", [
    ({"seeds": [0, 0], "total": np.ones((2, 3))}, "distinct seeds"),
    ({"seeds": [0], "total": np.ones((2, 3))}, "expected 2 seeds"),
    ({"seeds": [0], "total": [[1.0, np.nan, 1.0]]}, "finite"),
    ({"seeds": [0], "total": [[1.0, 1.0]], "weight": [0, 0]}, "no rows"),
    ({"seeds": [0], "total": [[1.0, 1.0]], "weight": [1, -1]}, "negative"),
])
def test_bad_panels_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LossPanel.from_arrays(**kwargs)


def test_bad_options_are_refused():
    a = LossPanel.from_arrays(seeds=[0], total=np.ones((1, 4)))
    with pytest.raises(ValueError, match="confidence"):
        decide(a, a, question=Question(confidence=1.5))
    with pytest.raises(ValueError, match="^question: expected a Question value"):
        decide(a, a, question="period")
    with pytest.raises(ValueError, match="orientation"):
        decide(a, a, orientation="up")


# --------------------------------------------------------------------------- Diebold-Mariano
@pytest.mark.parametrize("lags", [0, 2, 5])
def test_diebold_mariano_variance_is_newey_west(lags):
    """The HAC variance equals statsmodels' Newey-West standard error of a mean (an independent implementation)."""
    d = np.random.default_rng(lags).normal(0.2, 1.0, 120)
    r = diebold_mariano(d, bandwidth=lags)
    fit = sm.OLS(d, np.ones_like(d)).fit(cov_type="HAC", cov_kwds={"maxlags": lags, "use_correction": False})
    assert r.long_run_variance / d.size == pytest.approx(fit.bse[0] ** 2, rel=1e-10)
    t = d.mean() / math.sqrt(r.long_run_variance / d.size) * math.sqrt((d.size - 1) / d.size)
    assert r.statistic == pytest.approx(t)


def test_diebold_mariano_by_hand():
    d = np.array([1.0, 3.0, 2.0, 2.0])
    r = diebold_mariano(d, bandwidth=0)
    # gamma0 = mean((d - 2)^2) = 0.5; DM = 2 / sqrt(0.5 / 4) * sqrt(3 / 4) = 4.898979...
    assert r.long_run_variance == pytest.approx(0.5)
    assert r.statistic == pytest.approx(2 / math.sqrt(0.125) * math.sqrt(0.75))
    assert r.p_value == pytest.approx(2 * __import__("scipy").stats.t.sf(r.statistic, 3))
    flat = diebold_mariano(np.ones(5))
    assert math.isnan(flat.statistic) and flat.long_run_variance == 0.0
    with pytest.raises(ValueError, match="at least 3"):
        diebold_mariano([1.0, 2.0])


def test_diebold_mariano_automatic_bandwidth_is_archs():
    d = np.random.default_rng(9).normal(0, 1, 200)
    assert diebold_mariano(d).bandwidth == pytest.approx(Bartlett(d).bandwidth)


# --------------------------------------------------------------------------- seeds needed
@given(gap=st.floats(0.01, 10), s=st.floats(0.01, 100), v=st.floats(0.0, 1.0), nu=st.floats(2.0, 200.0))
@settings(max_examples=100, deadline=None)
def test_seeds_needed_is_the_smallest_count_with_the_stated_chance(gap, s, v, nu):
    r = seeds_needed(gap=gap, per_seed_var=s, time_variance=v, time_df=nu)
    args = dict(per_seed_var=s, time_variance=v, time_df=nu, confidence=0.95)
    if r.n is None:
        t = __import__("scipy").stats.t.ppf(0.975, nu) if v > 0 else 0.0
        if "market-time part alone" in r.reason:
            assert t * math.sqrt(v) >= gap
        else:
            assert decide_probability(gap=gap, n=1000, **args) < 0.8
        return
    assert r.n >= 2 and r.probability >= 0.8 and r.probability == pytest.approx(decide_probability(gap=gap, n=r.n, **args))
    if r.n > 2:   # one seed fewer is not enough
        assert decide_probability(gap=gap, n=r.n - 1, **args) < 0.8


def test_decide_probability_matches_a_simulation():
    """The stated chance is the share of intervals that exclude 0 when the true gap is the one given."""
    stats = __import__("scipy").stats
    rng = np.random.default_rng(0)
    n, gap, sd = 8, 0.9, 1.0
    d = rng.normal(gap, sd, (20000, n))
    half = stats.t.ppf(0.975, n - 1) * d.std(axis=1, ddof=1) / math.sqrt(n)
    observed = (np.abs(d.mean(axis=1)) > half).mean()
    stated = decide_probability(gap=gap, n=n, per_seed_var=sd ** 2, time_variance=0.0, time_df=math.inf,
                                confidence=0.95)
    assert abs(stated - observed) < 0.04


def test_seeds_needed_says_why_none_suffices():
    r = seeds_needed(gap=0.0, per_seed_var=1.0)
    assert r.n is None and "gap is 0" in r.reason
    r = seeds_needed(gap=0.01, per_seed_var=1.0, time_variance=1e-4, time_df=50.0, unit="bp²")
    assert r.n is None and "market-time part alone" in r.reason and "bp²" in r.reason
    r = seeds_needed(gap=0.01, per_seed_var=100.0, time_variance=1e-8, time_df=50.0)
    assert r.n is None and r.reason.startswith("more than 1000 seeds")


def test_a_decided_verdict_never_says_no_seed_count_suffices():
    rng = np.random.default_rng(1)
    a, b = _panels(rng, effect=-1.0)
    v = decide(a, b)
    assert v.determined and v.seeds_needed.n is not None and "no number" not in v.seeds_needed.reason


# --------------------------------------------------------------------------- model confidence set
def test_model_confidence_set_keeps_the_equally_good_and_drops_the_worse():
    rng = np.random.default_rng(0)
    T = 300
    common = rng.normal(0, 1, (T, 1))
    losses = common + rng.normal(0, 0.5, (T, 5)) + np.array([0.0, 0.0, 0.6, 1.0, 2.0])
    result = model_confidence_set(losses, ["a", "b", "c", "d", "e"], resampling=Resampling(n_boot=500, seed=1))
    assert result.included == ["a", "b"]
    assert result.excluded == ["c", "d", "e"]
    assert all(result.pvalues[n] < 0.05 for n in result.excluded)
    assert all(result.pvalues[n] >= 0.05 for n in result.included)


def test_model_confidence_set_keeps_all_when_none_differ():
    rng = np.random.default_rng(1)
    losses = rng.normal(0, 1, (200, 3))
    losses -= losses.mean(axis=0)            # equal sample means: nothing to tell apart
    assert model_confidence_set(losses, ["x", "y", "z"], resampling=Resampling(n_boot=300, seed=0)).included == ["x", "y", "z"]
    with pytest.raises(ValueError, match="configurations"):
        model_confidence_set(losses, ["x", "y"])
