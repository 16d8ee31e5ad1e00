"""Races to a best set and the seed-aware model confidence set (rolling_calib.core.racing), on small panels."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from rolling_calib.core.question import Question
from rolling_calib.core.racing import model_confidence_set, race
from rolling_calib.core.stopping import StoppingRule
from rolling_calib.core.verdict import LossPanel
from rolling_calib.simulation.race_sim import simulate_sweep
from rolling_calib.simulation.verdict_sim import PanelModel, estimator_sd

PERIOD = Question(target="period")


def _panels(shifts, *, seeds=6, days=20, seed=0, offset_sd=0.5):
    rng = np.random.default_rng(seed)
    day = rng.normal(0, 0.3, days)
    return {f"c{i}": LossPanel.from_arrays(seeds=range(seeds), total=5 + day + s + rng.normal(0, offset_sd, (seeds, 1))
                                           + rng.normal(0, 1, (seeds, days)))
            for i, s in enumerate(shifts)}


@settings(max_examples=25, deadline=None)
@given(shifts=st.lists(st.floats(-3, 3), min_size=2, max_size=5), seed=st.integers(0, 10_000),
       target=st.sampled_from(["period", "future"]), orientation=st.sampled_from(["lower", "higher"]),
       seed_variance=st.sampled_from(["pair", "pooled"]))
def test_a_race_accounts_for_every_configuration_and_never_empties_the_best_set(shifts, seed, target, orientation,
                                                                               seed_variance):
    rule = StoppingRule(first=2, batch=2, max_seeds=6, seed_variance=seed_variance)
    panels = _panels(shifts, seed=seed)
    r = race(panels, rule=rule, question=Question(target=target), orientation=orientation, order_seed=seed)
    assert r.best_set and set(r.best_set) | set(r.eliminated) == set(panels)
    assert not set(r.best_set) & set(r.eliminated)
    assert all(2 <= n <= 6 for n in r.seeds_used.values())
    assert all(1 <= look <= len(r.looks) for look in r.eliminated.values())
    spent = [look.seeds_spent for look in r.looks]
    assert spent == sorted(spent) and spent[-1] == sum(r.seeds_used.values())
    assert r.looks[-1].stop == r.stop and all(not look.stop for look in r.looks[:-1])
    assert 0 < r.fraction_of_grid <= 1
    for before, after in zip(r.looks, r.looks[1:]):     # a configuration that stopped never gets seeds again
        assert not {n for n, _ in before.stopped} & set(after.compared)
        assert set(after.compared) <= set(before.compared) & set(before.kept)
    json.dumps(r.to_dict())


@settings(max_examples=15, deadline=None)
@given(k=st.integers(2, 6), seed=st.integers(0, 10_000))
def test_identical_copies_eliminate_nobody_and_settle_at_once(k, seed):
    base = _panels([0.0], seed=seed)["c0"]
    panels = {f"c{i}": base for i in range(k)}
    r = race(panels, rule=StoppingRule(first=3, batch=1, max_seeds=6), question=PERIOD, orientation="lower",
             order_seed=seed)
    assert r.best_set == tuple(panels) and r.eliminated == {}
    assert len(r.looks) == 1 and r.stop == "settled"      # no pair can ever be decided: futile at look 1


@pytest.mark.parametrize("shift", [1.0, 2.0])
def test_a_configuration_that_cannot_be_eliminated_stops_while_the_others_race_on(shift):
    """``m`` is a copy of the best ``a`` (their pair settles at once): it can only eliminate ``z``, which ``a`` does as
    well, so it gets no seeds after the first look (before issue 35's change its open pair with ``z`` kept it running
    as long as ``z``), is never eliminated, and ``a`` runs on as ``z``'s eliminator."""
    p = _panels([0.0, shift], seeds=12, seed=0)
    r = race({"a": p["c0"], "m": p["c0"], "z": p["c1"]}, rule=StoppingRule(first=3, batch=2, max_seeds=12),
             question=PERIOD, orientation="lower", order_seed=0)
    assert r.seeds_used["m"] == 3 and [n for n, _ in r.looks[0].stopped] == ["m"]
    assert "futile" in r.looks[0].stopped[0][1] and "m" in r.best_set
    assert "z" in r.eliminated and r.seeds_used["z"] > 3 and r.seeds_used["a"] == r.seeds_used["z"]


def test_futility_zero_gives_seeds_to_every_configuration_in_an_open_pair():
    """No futility: nothing stops until eliminated or its pairs settle, so every kept configuration runs the budget."""
    panels = _panels([0.0, 0.05, 0.1], seeds=8, seed=4)
    r = race(panels, rule=StoppingRule(first=3, batch=2, max_seeds=8, futility=0.0), question=PERIOD,
             orientation="lower", order_seed=0)
    assert all(r.seeds_used[n] == 8 for n in r.best_set) and r.stop == "budget"


def test_a_copy_made_worse_by_a_constant_is_eliminated_at_the_first_look():
    base = _panels([0.0], seed=3)["c0"]
    worse = LossPanel.from_arrays(seeds=base.seeds, total=base.total + 0.1, weight=base.weight)
    r = race({"a": base, "b": worse, "c": base}, rule=StoppingRule(first=3, max_seeds=6), question=PERIOD,
             orientation="lower", order_seed=0)
    assert r.eliminated == {"b": 1} and r.best_set == ("a", "c")
    gone = r.looks[0].eliminated[0]
    assert gone.name == "b" and gone.by in ("a", "c") and gone.difference == pytest.approx(0.1)


@pytest.mark.parametrize("seed", range(8))
def test_two_configurations_at_one_look_are_the_one_sided_paired_t_test(seed):
    """K = 2, one look at the full grid: alpha / (K - 1) = 5% one-sided, spent at u = 1: scipy's paired t test."""
    panels = _panels([0.0, 0.25 * seed], seeds=8, seed=seed)
    r = race(panels, rule=StoppingRule(first=8, max_seeds=8), question=PERIOD, orientation="lower", order_seed=0)
    means = {n: p.run_means() for n, p in panels.items()}
    p = stats.ttest_rel(means["c1"], means["c0"], alternative="greater").pvalue
    if abs(p - 0.05) > 0.005:     # away from the edge (the boundary is found numerically)
        assert ("c1" in r.eliminated) == (p < 0.05)
    assert "c0" not in r.eliminated or stats.ttest_rel(means["c0"], means["c1"], alternative="greater").pvalue < 0.05


def test_higher_is_better_mirrors_lower_is_better():
    panels = _panels([0.0, 0.5, 2.0, 3.0], seeds=10, seed=1)
    mirrored = {n: LossPanel.from_arrays(seeds=p.seeds, total=-p.total, weight=p.weight) for n, p in panels.items()}
    rule = StoppingRule(first=3, batch=2, max_seeds=10)
    a = race(panels, rule=rule, question=PERIOD, orientation="lower", order_seed=4)
    b = race(mirrored, rule=rule, question=PERIOD, orientation="higher", order_seed=4)
    assert (a.best_set, a.eliminated, a.seeds_used) == (b.best_set, b.eliminated, b.seeds_used)


def test_all_pairs_eliminates_no_more_than_step_down_and_step_down_no_more_than_the_best_comparisons():
    panels = _panels([0.0, 0.6, 0.9, 1.2, 3.0], seeds=12, seed=2)
    rule = StoppingRule(first=3, batch=3, max_seeds=12, futility=0.0)
    best = race(panels, rule=rule, question=PERIOD, orientation="lower", order_seed=0)
    pairs = race(panels, rule=rule, question=PERIOD, orientation="lower", order_seed=0, comparisons="all-pairs")
    step = race(panels, rule=rule, question=PERIOD, orientation="lower", order_seed=0, comparisons="step-down")
    assert best.settings["comparison_alpha"] == pytest.approx(0.05 / 4)
    assert pairs.settings["comparison_alpha"] == pytest.approx(0.05 / 20)
    assert step.settings["comparison_alpha"] == pytest.approx(0.05 / 20)     # starts at all pairs' share
    assert set(pairs.eliminated) <= set(step.eliminated) <= set(best.eliminated)


def test_step_down_relaxes_the_share_after_each_elimination():
    """Holm's step-down over "i is a best": with r configurations left each comparison is one-sided at
    alpha / (r (K - 1)). ``b``'s paired t against ``a`` (per-seed offsets 1.5 +- 1, t_5 = 3.35) is between
    t_5(1 - 0.05 / 6) = 3.53 and t_5(1 - 0.05 / 4) = 3.16: all pairs keep it; step-down eliminates the far worse ``c``
    at alpha / (3 * 2), then ``b`` at alpha / (2 * 2) at the same look."""
    base = _panels([0.0], seeds=6, seed=5)["c0"]
    offsets = 1.5 + np.array([1.0, -1.0, 1.0, -1.0, 1.0, -1.0])[:, None]
    near = LossPanel.from_arrays(seeds=base.seeds, total=base.total + offsets)
    far = LossPanel.from_arrays(seeds=base.seeds, total=base.total + 20.0 + offsets)
    rule = StoppingRule(first=6, max_seeds=6)
    step = race({"a": base, "b": near, "c": far}, rule=rule, question=PERIOD, orientation="lower", order_seed=0,
                comparisons="step-down")
    levels = [float(e.why.split("one-sided ")[1].split("%")[0]) for e in step.looks[0].eliminated]
    assert [e.name for e in step.looks[0].eliminated] == ["c", "b"] and levels[0] > levels[1]
    assert levels == pytest.approx([100 * (1 - 0.05 / 6), 100 * (1 - 0.05 / 4)], abs=1e-4)
    pairs = race({"a": base, "b": near, "c": far}, rule=rule, question=PERIOD, orientation="lower", order_seed=0,
                 comparisons="all-pairs")
    assert pairs.eliminated == {"c": 1}


def test_a_race_refuses_panels_it_cannot_compare():
    panels = _panels([0.0, 1.0], seeds=4)
    with pytest.raises(ValueError, match="max_seeds: expected at most the 4 seeds every configuration ran"):
        race(panels, rule=StoppingRule(first=3, max_seeds=6), question=PERIOD, orientation="lower", order_seed=0)
    other = panels["c1"].select(times=np.arange(10))
    with pytest.raises(ValueError, match=r"panels\['c1'\]: expected the days of 'c0'"):
        race({"c0": panels["c0"], "c1": other}, rule=StoppingRule(first=2, max_seeds=4), question=PERIOD,
             orientation="lower", order_seed=0)
    with pytest.raises(ValueError, match="panels: expected a mapping of at least 2"):
        race({"c0": panels["c0"]}, question=PERIOD, orientation="lower", order_seed=0)
    with pytest.raises(ValueError, match="^comparisons: expected one of 'best', 'all-pairs'"):
        race(panels, question=PERIOD, orientation="lower", order_seed=0, comparisons="pairs")


# --------------------------------------------------------------------------- model confidence set
@pytest.mark.parametrize("seed", range(6))
def test_two_configurations_the_set_is_the_two_sided_paired_t_test(seed):
    panels = _panels([0.0, 0.3 * seed], seeds=6, seed=10 + seed)
    mcs = model_confidence_set(panels, question=PERIOD, orientation="lower")
    means = {n: p.run_means() for n, p in panels.items()}
    p = stats.ttest_rel(means["c0"], means["c1"]).pvalue
    worse = "c1" if means["c1"].mean() > means["c0"].mean() else "c0"
    assert mcs.pvalues[worse] == pytest.approx(p, rel=1e-9) and mcs.eliminated == [worse]
    assert bool(mcs.excluded) == (p < 0.05)


def test_three_configurations_hand_computed_pvalues():
    """P_M = min(1, m min p_ij): 3 pairs, then 1; each configuration's p-value the running maximum."""
    panels = _panels([0.0, 0.4, 1.5], seeds=5, seed=3)
    means = {n: p.run_means() for n, p in panels.items()}
    p = {(a, b): stats.ttest_rel(means[a], means[b]).pvalue for a, b in (("c0", "c1"), ("c0", "c2"), ("c1", "c2"))}
    mcs = model_confidence_set(panels, question=PERIOD, orientation="lower")
    first, second = mcs.eliminated
    rest = [n for n in panels if n != first]
    step1 = min(1.0, 3 * min(p.values()))
    step2 = max(step1, p[tuple(sorted(rest))])
    assert mcs.pvalues[first] == pytest.approx(step1) and mcs.pvalues[second] == pytest.approx(step2)


@settings(max_examples=20, deadline=None)
@given(shifts=st.lists(st.floats(-2, 2), min_size=2, max_size=5), seed=st.integers(0, 10_000),
       target=st.sampled_from(["period", "future"]))
def test_the_set_is_never_empty_and_its_pvalues_are_probabilities(shifts, seed, target):
    panels = _panels(shifts, seeds=4, seed=seed)
    mcs = model_confidence_set(panels, question=Question(target=target), orientation="lower")
    assert mcs.included and set(mcs.included) | set(mcs.excluded) == set(panels)
    assert all(0 < p <= 1 for p in mcs.pvalues.values())
    assert all(mcs.pvalues[n] < 0.05 for n in mcs.excluded)
    json.dumps(mcs.to_dict())


def test_the_set_counts_persistent_seed_offsets():
    """Identical configurations whose seeds carry large persistent offsets: no evidence against any."""
    panels = _panels([0.0] * 5, seeds=5, seed=7, offset_sd=3.0)
    mcs = model_confidence_set(panels, question=PERIOD, orientation="lower")
    assert mcs.excluded == [] and min(mcs.pvalues.values()) > 0.05


def test_the_set_drops_the_clearly_worse():
    panels = _panels([0.0, 0.0, 6.0], seeds=6, seed=1)
    mcs = model_confidence_set(panels, question=PERIOD, orientation="lower")
    assert mcs.excluded == ["c2"] and mcs.eliminated[0] == "c2"


# --------------------------------------------------------------------------- the simulated sweep
def test_every_pair_of_a_simulated_sweep_has_the_pair_models_standard_error():
    model = PanelModel(seed_sd=0.4, window_sd=0.2, window_days=10, noise_sd=1.0, interaction_sd=0.5,
                       interaction_phi=0.3, crn_seed=0.5)
    rng = np.random.default_rng(0)
    diffs = []
    for _ in range(600):
        panels, truth = simulate_sweep(model, deltas=[0.0, 0.0, 0.0], n_seeds=3, n_days=40, rng=rng)
        means = [p.run_means().mean() for p in panels.values()]
        diffs.append([means[0] - means[1], means[1] - means[2]])
    sd = np.asarray(diffs).std(axis=0, ddof=1)
    expected = estimator_sd(model, n_seeds=3, n_days=40, target="future")
    assert sd == pytest.approx([expected, expected], rel=0.1)     # MC SE of an sd from 600 draws: about 3%


def test_a_centred_sweep_has_the_period_truth_of_its_deltas():
    panels, truth = simulate_sweep(PanelModel(interaction_sd=1.0, noise_sd=0.0), deltas=[0.0, 2.0], n_seeds=2,
                                   n_days=30, rng=np.random.default_rng(1), centre_period=True)
    assert truth["period"] == pytest.approx(truth["future"])
    assert math.isclose(panels["c1"].total.mean() - panels["c0"].total.mean(), 2.0)


# --------------------------------------------------------------------------- pooled seed variance (issue 35)
def test_the_pooled_seed_variance_is_twice_the_two_way_residual_mean_square_of_a_least_squares_fit():
    """Independent implementation: ordinary least squares of the run means on configuration and seed dummies."""
    from rolling_calib.core.racing import _pooled_seed_variance

    rng = np.random.default_rng(7)
    K, k = 5, 4
    M = rng.normal(size=(K, k)) + rng.normal(size=(1, k)) + np.arange(K)[:, None]
    X = np.hstack([np.kron(np.eye(K), np.ones((k, 1))), np.kron(np.ones((K, 1)), np.eye(k))[:, 1:]])
    coef, *_ = np.linalg.lstsq(X, M.ravel(), rcond=None)
    resid = M.ravel() - X @ coef
    S, nu = _pooled_seed_variance(M)
    assert nu == (K - 1) * (k - 1) and S == pytest.approx(2 * float(resid @ resid) / nu, rel=1e-12)


@pytest.mark.parametrize("target", ["period", "future"])
def test_pooled_with_two_configurations_is_the_pairs_own_variance(target):
    panels = _panels([0.0, 0.4], seeds=10, seed=5)
    rule = StoppingRule(first=3, batch=2, max_seeds=10)
    own = race(panels, rule=rule, question=Question(target=target), orientation="lower", order_seed=1)
    pooled = race(panels, rule=rule.replace(seed_variance="pooled"), question=Question(target=target),
                  orientation="lower", order_seed=1)
    assert (own.best_set, own.eliminated, own.seeds_used) == (pooled.best_set, pooled.eliminated, pooled.seeds_used)
    assert [look.boundary for look in own.looks] == [look.boundary for look in pooled.looks]
    assert pooled.settings["rule"]["seed_variance"] == "pooled"


def test_pooling_eliminates_a_far_worse_configuration_the_pairs_own_two_degrees_of_freedom_cannot():
    """Eight alike configurations, one 5 run spreads worse, at the first look (3 of 20 seeds): its own pairs' t_2
    needs a gap of t_2(1 - p_1) sqrt(S / 3) with p_1 about 1e-4 (about 70 sqrt(S / 3), S about 2); pooled over the
    table (14 degrees of freedom) about 4.6 sqrt(S / 3)."""
    panels = _panels([0.0] * 7 + [5.0], seeds=20, days=30, seed=11, offset_sd=1.0)
    rule = StoppingRule(first=3, batch=2, max_seeds=20)
    own = race(panels, rule=rule, question=PERIOD, orientation="lower", order_seed=0)
    pooled = race(panels, rule=rule.replace(seed_variance="pooled"), question=PERIOD, orientation="lower",
                  order_seed=0)
    assert not own.looks[0].eliminated and [e.name for e in pooled.looks[0].eliminated] == ["c7"]


def test_pooled_race_holds_its_level_on_alike_configurations():
    """A small level check (about 2 s): 6 identical configurations with alike seed variances, one look at 3 seeds,
    at 80% confidence so the error is measurable in 200 races. MCB bounds the chance that one given configuration
    (``c0``) is eliminated by alpha = 20% (Bonferroni over its 5 comparisons, each an exact t on the pooled 10
    degrees of freedom). Measured when the test was written: 15.0% pooled (the pair's own variance: 18.0%); the
    pooled variance taken as the residual mean square alone (half of it, the classic slip): 32.0%, above the
    bound's 25.7%."""
    model = PanelModel(seed_sd=0.3, window_sd=0.1, window_days=60, noise_sd=2.45, interaction_sd=1.0,
                       interaction_phi=0.1)
    rng = np.random.default_rng(35)
    rule = StoppingRule(first=3, max_seeds=3, seed_variance="pooled")
    question = Question(target="period", confidence=0.8)
    hits = []
    for i in range(200):
        panels, _ = simulate_sweep(model, deltas=[0.0] * 6, n_seeds=3, n_days=20, rng=rng, centre_period=True)
        hits.append("c0" in race(panels, rule=rule, question=question, orientation="lower", order_seed=i).eliminated)
    rate = float(np.mean(hits))
    assert rate <= 0.2 + 2 * math.sqrt(0.2 * 0.8 / 200), rate


def test_seed_scales_scale_each_configurations_seed_parts_only():
    m = PanelModel(market_sd=1.0, seed_sd=0.5, noise_sd=1.0, interaction_sd=0.4)
    panels, _ = simulate_sweep(m, deltas=[0.0, 0.0], n_seeds=4, n_days=30, rng=np.random.default_rng(2),
                               seed_scales=[0.0, 2.0])
    assert np.allclose(panels["c0"].total, panels["c0"].total[0])       # no seed part: every seed the same
    assert np.ptp(panels["c1"].total, axis=0).max() > 0
    with pytest.raises(ValueError, match="seed_scales: expected 2 finite numbers >= 0"):
        simulate_sweep(m, deltas=[0.0, 0.0], n_seeds=4, n_days=30, rng=np.random.default_rng(2), seed_scales=[1.0])
