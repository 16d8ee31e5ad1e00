"""When is one pipeline better: per-window verdicts under Holm, the Ibragimov-Mueller test across windows and the
seed-aware fluctuation warning, each checked against an independent implementation or a known truth."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from statsmodels.stats.multitest import multipletests

from rolling_calib.core.question import Question
from rolling_calib.core.resampling import Resampling
from rolling_calib.core.verdict import LossPanel, decide
from rolling_calib.simulation.verdict_sim import PanelModel, _simulate
from rolling_calib.core.when import (
    GR_TABLE_5PCT,
    across_windows,
    difference,
    fluctuation_critical_value,
    fluctuation_test,
    holm,
    local_lrv,
    when,
    window_verdicts,
)


def _pair(rng, *, k=4, T=120, shift=None, sd=0.3):
    shift = np.zeros(T) if shift is None else shift
    a = LossPanel.from_arrays(seeds=range(k), total=10 + shift + rng.normal(0, sd, (k, T)))
    b = LossPanel.from_arrays(seeds=range(k), total=10 + rng.normal(0, sd, (k, T)))
    return a, b


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12))
@settings(max_examples=20, deadline=None)  # statsmodels' multipletests takes ~0.1 s a call
def test_holm_matches_statsmodels(p):
    assert holm(p) == pytest.approx(multipletests(p, method="holm")[1], abs=1e-12)


def test_each_window_is_the_period_verdict_of_its_days_and_holm_decides_the_family():
    rng = np.random.default_rng(3)
    a, b = _pair(rng, shift=np.r_[np.full(30, -0.4), np.zeros(90)])
    windows = window_verdicts(a, b, starts=[0, 30, 60, 90], names=("A", "B"))
    assert [w.label for w in windows] == ["w00", "w01", "w02", "w03"]
    assert [(w.start, w.end, w.n_times) for w in windows] == [(0, 29, 30), (30, 59, 30), (60, 89, 30), (90, 119, 30)]
    p = []
    for w in windows:
        idx = np.arange(w.start, w.end + 1)
        v = decide(a.select(times=idx), b.select(times=idx), question=Question(target="period"))
        assert w.difference == pytest.approx(v.difference)          # the same interval as the verdict's
        half = (w.ci_high - w.ci_low) / 2
        assert half == pytest.approx(stats.t.ppf(0.5 + w.level / 2, v.degrees_of_freedom) * math.sqrt(v.var_seeds))
        t = abs(v.difference) / math.sqrt(v.var_seeds)
        assert w.p_value == pytest.approx(2 * stats.t.sf(t, v.degrees_of_freedom))
        p.append(w.p_value)
    assert [w.p_holm for w in windows] == pytest.approx(list(multipletests(p, method="holm")[1]))
    assert [w.outcome for w in windows] == ["better" if ph <= 0.05 else "undetermined" for ph in
                                            multipletests(p, method="holm")[1]]
    assert windows[0].outcome == "better" and windows[0].winner == "A"


@given(st.integers(0, 10_000))
@settings(max_examples=40, deadline=None)
def test_a_window_interval_excludes_zero_exactly_when_holm_decides_it(seed):
    rng = np.random.default_rng(seed)
    shift = np.repeat(rng.normal(0, 0.15, 6), 20)
    a, b = _pair(rng, k=3, T=120, shift=shift)
    for w in window_verdicts(a, b, starts=list(range(0, 120, 20))):
        excludes = w.ci_low > 0 or w.ci_high < 0
        assert excludes == (w.outcome != "undetermined")
        assert w.level >= 0.95 - 1e-12


def test_the_family_holds_its_level_across_windows_under_the_null():
    """No window differs: the chance that any of 6 windows is decided is at most 5% (Holm), while deciding each
    window at 95% alone would decide some window in about 1 - 0.95^6 = 26% of pairs."""
    rng = np.random.default_rng(11)
    any_holm = any_raw = 0
    n = 300
    for _ in range(n):
        a, b = _pair(rng, k=5, T=120)
        ws = window_verdicts(a, b, starts=list(range(0, 120, 20)))
        any_holm += any(w.outcome != "undetermined" for w in ws)
        any_raw += any(w.p_value <= 0.05 for w in ws)
    assert any_holm / n <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / n)
    assert any_raw / n > 0.15


def test_across_windows_is_the_one_sample_t_test_of_the_windows_differences():
    d = np.array([-0.3, -0.1, -0.25, 0.05, -0.2])
    r = across_windows(d, names=("A", "B"), method="all")
    ref = stats.ttest_1samp(d, 0.0)
    assert r.statistic == pytest.approx(ref.statistic) and r.p_value == pytest.approx(ref.pvalue)
    assert r.degrees_of_freedom == 4 and r.n_windows == 5
    half = stats.t.ppf(0.975, 4) * d.std(ddof=1) / math.sqrt(5)
    assert (r.ci_low, r.ci_high) == pytest.approx((d.mean() - half, d.mean() + half))
    assert r.outcome == ("better" if r.ci_high < 0 else "undetermined")
    scores = across_windows(-d, names=("A", "B"), orientation="higher", method="all")
    assert scores.outcome == r.outcome and scores.winner == r.winner


def test_fewer_than_four_windows_say_not_enough_windows():
    r = across_windows([-1.0, -1.1, -0.9])
    assert r.outcome == "not enough windows" and r.winner is None
    assert "not enough windows (3 < 4)" in r.describe()


def test_across_windows_holds_its_level_for_independent_windows():
    rng = np.random.default_rng(5)
    n = 2000
    decided = sum(across_windows(rng.normal(0, 1, 5) * rng.uniform(0.5, 2, 5)).outcome != "undetermined"
                  for _ in range(n))
    assert decided / n <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / n)     # heteroskedastic windows: conservative


@pytest.mark.parametrize("mu", [0.1, 0.5, 0.9])
def test_the_simulated_limit_reproduces_giacomini_and_rossis_table(mu):
    """Uncentred, two-sided 5%: within 3% of Table 1 of Giacomini and Rossi (2010) (their grid is coarser: the
    simulated values lie 0.3-2% above theirs)."""
    value = fluctuation_critical_value(mu, centred=False, n_sim=6000, n_grid=1000, seed=1)
    assert value == pytest.approx(GR_TABLE_5PCT[mu], rel=0.03)


def test_local_lrv_is_the_bartlett_lrv_of_white_noise_and_ignores_a_mean_shift():
    rng = np.random.default_rng(2)
    x = rng.normal(0, 2.0, 5000)
    assert local_lrv(x, [], block=100)[0] == pytest.approx(4.0, rel=0.08)
    assert local_lrv(x + np.r_[np.zeros(2500), np.full(2500, 3.0)], [], block=100)[0] == pytest.approx(4.0, rel=0.1)
    e = rng.normal(0, 1, 5001)
    ma = e[1:] + 0.5 * e[:-1]                       # MA(1): long-run variance (1 + 0.5)^2 = 2.25
    lrv, se = local_lrv(ma, [], block=200)
    assert lrv == pytest.approx(2.25, rel=0.1) and 0.05 < se / lrv < 0.2


def test_local_lrv_removes_the_seeds_noise():
    """The common part g (white, variance 1) under seed noise of variance 9 per seed and day: the estimate is
    g's (on average over 200 panels), not the seed average's 1 + 9/5."""
    rng = np.random.default_rng(8)
    est = []
    for _ in range(200):
        x = rng.normal(0, 1, 250) + rng.normal(0, 3.0, (5, 250))
        d = x.mean(axis=0)
        est.append(local_lrv(d, [x - d], block=50)[0])
    assert np.mean(est) == pytest.approx(1.0, abs=0.12)


def _stable_rate(model, *, k, T, reps, seed=0, rev=0.0):
    rng = np.random.default_rng(seed)
    a, b, _ = _simulate(model, reps, k, T, rng)
    starts = list(range(0, T, model.window_days))
    shift = np.r_[np.full(T // 2, rev), np.full(T - T // 2, -rev)]
    fired = 0
    for r in range(reps):
        f = fluctuation_test(LossPanel.from_arrays(seeds=range(k), total=a[r] + shift),
                             LossPanel.from_arrays(seeds=range(k), total=b[r]), starts=starts,
                             resampling=Resampling(n_boot=400, seed=r))
        fired += f.fired
    return fired / reps


def test_the_fluctuation_warning_holds_its_level_on_stable_pairs_with_strong_seed_window_offsets():
    """Seed x window offsets move the seed-averaged differential in steps at each refit: a band that ignored them
    fires often; the seed-aware band holds 5% (within 2 MC SE, 150 stable pairs)."""
    model = PanelModel(seed_sd=0.3, window_sd=1.0, window_days=30, noise_sd=1.0, interaction_sd=0.3,
                       interaction_phi=0.1)
    rate = _stable_rate(model, k=5, T=120, reps=150)
    assert rate <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 150)


def test_the_fluctuation_warning_sees_a_one_time_reversal_and_dates_it():
    rng = np.random.default_rng(4)
    a, b = _pair(rng, k=5, T=200, shift=np.r_[np.full(100, -0.5), np.full(100, 0.5)], sd=1.0)
    f = fluctuation_test(a, b, window_days=40, resampling=Resampling(n_boot=1000, seed=0))
    assert f.fired and f.p_value < 0.01 and f.statistic > f.half_width
    assert 80 <= f.break_at <= 120 and f.left_at is not None
    assert f.seed_aware and 0 <= f.share_seed <= 1 and f.window_days == 40 and f.mu == 0.2
    assert len(f.times) == len(f.rolling) == 161 and f.rolling[0] < f.center - f.half_width
    assert "changed" in f.describe(("A", "B")) and f"at {f.left_at}" in f.describe(("A", "B"))


def test_one_seed_per_pipeline_is_not_seed_aware_and_says_so():
    rng = np.random.default_rng(6)
    a, b = _pair(rng, k=1, T=100)
    f = fluctuation_test(a, b)
    assert not f.seed_aware and f.share_seed == 0.0 and f.window_days == 25


def test_when_bundles_the_three_and_records_itself():
    rng = np.random.default_rng(0)
    a, b = _pair(rng, shift=np.r_[np.full(60, -0.5), np.zeros(60)])
    w = when(a, b, starts=[0, 30, 60, 90], labels=["w00", "w01", "w02", "w03"], names=("A", "B"),
             question=Question(confidence=0.9))
    assert w.counts() == (2, 0, 2) and w.confidence == 0.9
    assert w.consistency() == "A better in 2 of 4 refit windows, worse in 0, undetermined in 2"
    d = w.to_dict()
    assert set(d) >= {"metric", "a", "b", "blocks", "consistency", "windows", "across_windows", "fluctuation"}
    assert d["windows"][0]["start"] == 0 and d["windows"][0]["outcome"] == "better"
    assert d["across_windows"]["n_windows"] == 4 and d["fluctuation"]["fired"] is True
    months = when(a, b, starts=[0, 60], blocks="months", names=("A", "B"))
    assert months.across.outcome == "not enough windows" and "of 2 months" in months.consistency()


def test_unsorted_starts_are_refused():
    a, b = _pair(np.random.default_rng(1), T=40)
    with pytest.raises(ValueError, match="ascending"):
        window_verdicts(a, b, starts=[20, 0])


@pytest.mark.parametrize("target", ["period", "future"])
@pytest.mark.parametrize("same_seeds", [True, False])
def test_difference_is_the_interval_decide_rests_on(target, same_seeds):
    rng = np.random.default_rng(9)
    a = LossPanel.from_arrays(seeds=range(4), total=rng.normal(0, 1, (4, 60)), weight=rng.integers(1, 5, (4, 60)))
    b = LossPanel.from_arrays(seeds=range(4) if same_seeds else range(10, 15), total=rng.normal(0, 1, (4 + (not same_seeds), 60)))
    v = decide(a, b, question=Question(target=target))
    center, cv, paired = difference(a, b, target=target)
    assert paired == v.paired == same_seeds
    assert center == pytest.approx(v.difference, abs=1e-12)
    assert (center - cv.half_width(0.95), center + cv.half_width(0.95)) == pytest.approx((v.ci_low, v.ci_high))
