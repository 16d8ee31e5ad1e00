"""Pairwise accuracy, bootstrap intervals, pipeline comparison and seed budget."""

from __future__ import annotations

import doctest
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats

from rolling_calib.core import pairwise as C
from rolling_calib.core.question import Question
from rolling_calib.core.resampling import Resampling

scores = hnp.arrays(np.float64, st.integers(1, 30), elements=st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.25]))
any_scores = hnp.arrays(np.float64, st.integers(1, 30), elements=st.floats(-1e6, 1e6))


def test_docstring_examples_run():
    result = doctest.testmod(C, raise_on_error=False)
    assert result.attempted > 10
    assert result.failed == 0


def test_pairwise_accuracy_hand_computed():
    # a = (1, 2), b = (2, 3): (1<2) (1<3) (2<3) win, (2=2) tie -> (3 + 0.5) / 4
    assert C.pairwise_accuracy([1.0, 2.0], [2.0, 3.0]) == 0.875
    assert C.pairwise_accuracy([3.0], [1.0, 2.0]) == 0.0
    assert C.pairwise_accuracy([1.0, 1.0], [1.0]) == 0.5


@settings(max_examples=80, deadline=None)
@given(a=st.one_of(scores, any_scores), b=st.one_of(scores, any_scores))
def test_pairwise_accuracy_equals_scaled_mann_whitney_u(a, b):
    # SciPy's U for the first sample counts pairs where it is *larger* (ties 1/2):
    # U(b, a) = #{b_j > a_i} + 1/2 #{b_j = a_i} = our count of "a better".
    u = stats.mannwhitneyu(b, a, alternative="two-sided", method="asymptotic").statistic
    assert C.pairwise_accuracy(a, b) == pytest.approx(u / (a.size * b.size), abs=1e-12)
    assert C.pairwise_accuracy(a, b) + C.pairwise_accuracy(b, a) == pytest.approx(1.0, abs=1e-12)


@settings(max_examples=50, deadline=None)
@given(a=any_scores, b=any_scores, shift=st.floats(-1e3, 1e3))
def test_pairwise_accuracy_depends_only_on_the_order(a, b, shift):
    # exact order-preserving maps in float64 (scaling by a power of two; rebuilding from ranks)
    ranks = stats.rankdata(np.r_[a, b], method="dense")
    assert C.pairwise_accuracy(4.0 * a, 4.0 * b) == C.pairwise_accuracy(a, b)
    assert C.pairwise_accuracy(ranks[: a.size] + shift, ranks[a.size:] + shift) == C.pairwise_accuracy(a, b)
    # negating every score swaps the roles of the two pipelines
    assert C.pairwise_accuracy(-b, -a) == C.pairwise_accuracy(a, b)


def test_bootstrap_matches_loop_over_the_same_resamples():
    rng_data = np.random.default_rng(0)
    a, b = rng_data.normal(size=7), rng_data.normal(0.5, size=9)
    got = C.pairwise_accuracy_ci(a, b, question=Question(confidence=0.9), resampling=Resampling(n_boot=300, seed=11))
    rng = np.random.default_rng(11)                     # same draws, in the documented order
    ia = rng.integers(0, a.size, size=(300, a.size))
    ib = rng.integers(0, b.size, size=(300, b.size))
    reps = [C.pairwise_accuracy(a[ia[r]], b[ib[r]]) for r in range(300)]
    lo, hi = np.quantile(reps, [0.05, 0.95])
    assert (got.ci_low, got.ci_high) == pytest.approx((lo, hi), abs=1e-12)
    assert got.accuracy == C.pairwise_accuracy(a, b)
    assert (got.n_a, got.n_b, got.n_boot, got.seed, got.confidence) == (7, 9, 300, 11, 0.9)


def test_bootstrap_interval_close_to_scipy_bootstrap():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=20), rng.normal(0.4, size=25)
    ours = C.pairwise_accuracy_ci(a, b, resampling=Resampling(n_boot=4000, seed=3))
    ref = stats.bootstrap((a, b), lambda x, y: C.pairwise_accuracy(x, y), vectorized=False, paired=False,
                          n_resamples=4000, method="percentile", random_state=5).confidence_interval
    assert ours.ci_low == pytest.approx(ref.low, abs=0.03)
    assert ours.ci_high == pytest.approx(ref.high, abs=0.03)


def test_bootstrap_is_seeded():
    rng = np.random.default_rng(9)
    a, b = rng.normal(size=15), rng.normal(0.3, size=15)
    r1 = C.pairwise_accuracy_ci(a, b, resampling=Resampling(n_boot=200, seed=4))
    r2 = C.pairwise_accuracy_ci(a, b, resampling=Resampling(n_boot=200, seed=4))
    r3 = C.pairwise_accuracy_ci(a, b, resampling=Resampling(n_boot=200, seed=5))
    assert r1 == r2
    assert (r1.ci_low, r1.ci_high) != (r3.ci_low, r3.ci_high)   # 225 pairs: the seed visibly matters


def test_compare_pair_direction_by_ground_truth_and_json():
    a = {"ql": [2.0, 2.2, 2.1], "cql": [1.50, 1.52, 1.51]}
    b = {"ql": [1.9, 2.3, 1.8], "cql": [1.40, 1.41, 1.42]}   # lower QL mean: b is better
    c = C.compare_pair("a", a, "b", b, resampling=Resampling(n_boot=100, seed=2))
    assert (c.better, c.worse, c.ground_truth, c.tie) == ("b", "a", "ql", False)
    assert c.ground_truth_gap == pytest.approx(np.mean(a["ql"]) - np.mean(b["ql"]))
    assert c.accuracies["cql"].accuracy == 1.0
    assert c.accuracies["ql"].accuracy == pytest.approx(C.pairwise_accuracy(b["ql"], a["ql"]))
    assert list(c.accuracies) == ["ql", "cql"]
    d = json.loads(json.dumps(c.to_dict()))
    assert d["better"] == "b" and d["accuracies"]["cql"]["seed"] == 2 and d["means"]["a"]["ql"] == pytest.approx(2.1)
    # another ground truth flips nothing here but is reported
    c2 = C.compare_pair("a", a, "b", b, ground_truth="cql", metrics=["ql"], resampling=Resampling(n_boot=50))
    assert c2.ground_truth == "cql" and list(c2.accuracies) == ["ql"]


def test_compare_pair_tie_and_errors():
    tie = C.compare_pair("a", {"ql": [1.0, 2.0]}, "b", {"ql": [2.0, 1.0]}, resampling=Resampling(n_boot=10))
    assert tie.tie and tie.better == "a" and tie.ground_truth_gap == 0.0
    with pytest.raises(ValueError, match=r"scores for 'b': metric 'cql' is missing; found \['ql'\]"):
        C.compare_pair("a", {"ql": [1.0], "cql": [1.0]}, "b", {"ql": [2.0]}, metrics=["cql"])
    with pytest.raises(ValueError, match=r"expected a pipeline name different from name_a"):
        C.compare_pair("a", {"ql": [1.0]}, "a", {"ql": [2.0]})
    with pytest.raises(ValueError, match=r"scores for 'a', metric 'ql': expected finite scores, found nan at run 1"):
        C.compare_pair("a", {"ql": [1.0, math.nan]}, "b", {"ql": [2.0]})


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda: C.pairwise_accuracy([], [1.0]), r"scores_better: expected at least one run, found 0"),
        (lambda: C.pairwise_accuracy([1.0], [[1.0]]), r"scores_worse: expected a 1-D array"),
        (lambda: C.pairwise_accuracy([1.0], [math.inf]), r"scores_worse: expected finite scores, found inf at run 0"),
        (lambda: C.pairwise_accuracy_ci([1.0], [2.0], resampling=Resampling(n_boot=0)), r"n_boot: expected a positive int <= 100000 \(the replicates are held in memory\), found 0"),
        (lambda: C.pairwise_accuracy_ci([1.0], [2.0], question=Question(confidence=1.0)), r"confidence: expected a number strictly between 0 and 1"),
        (lambda: C.pairwise_accuracy_ci([1.0], [2.0], resampling=Resampling(seed=-1)), r"seed: expected a non-negative integer seed below 2\*\*32 \(numpy's seeding range\), found -1"),
        (lambda: C.seed_budget(-1.0, 1.0, 10), r"std_vanilla: expected a finite standard deviation >= 0, found -1.0"),
        (lambda: C.seed_budget(1.0, 1.0, 0), r"runs: expected a positive int, found 0"),
        (lambda: C.seed_budget(0.0, 0.0, 5), r"both standard deviations are 0"),
        (lambda: C.summarize_runs({}), r"scores: expected at least one metric"),
        (lambda: C.variance_reduction({"ql": [1.0, 2.0]}), r"scores: metric 'cql' is missing"),
        (lambda: C.variance_reduction({"ql": [1.0, 2.0], "cql": [1.0]}), r"mismatched lengths: 'ql' has 2 runs, 'cql' has 1"),
        (lambda: C.variance_reduction({"ql": [1.0], "cql": [1.0]}), r"expected at least 2 runs"),
    ],
)
def test_compare_rejects_bad_input(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


def test_summaries_and_seed_budget():
    rng = np.random.default_rng(8)
    ql, cql = rng.normal(2.0, 0.3, size=10), rng.normal(1.9, 0.1, size=10)
    s = C.summarize_runs({"ql": ql, "cql": cql})
    assert list(s.index) == ["ql", "cql"]
    assert s.loc["ql", "runs"] == 10
    assert s.loc["ql", "std"] == pytest.approx(np.std(ql, ddof=1), rel=1e-14)
    assert s.loc["cql", "sem"] == pytest.approx(stats.sem(cql), rel=1e-12)
    both = C.summarize_pipelines({"a": {"ql": ql}, "b": {"ql": cql}})
    assert list(both["pipeline"]) == ["a", "b"] and list(both.columns) == ["pipeline", "metric", "runs", "mean", "std", "sem"]
    assert C.seed_budget(0.3, 0.1, 10) == pytest.approx(90.0)
    assert C.seed_budget(1.0, 0.0, 10) == math.inf
    v = C.variance_reduction({"ql": ql, "cql": cql})
    assert v.std_ratio == pytest.approx(np.std(cql, ddof=1) / np.std(ql, ddof=1))
    assert v.seed_budget == pytest.approx(10 / v.std_ratio**2)
    # the budget equalises standard errors: std_v / sqrt(budget) == std_c / sqrt(10)
    assert v.std_vanilla / math.sqrt(v.seed_budget) == pytest.approx(v.std_calibrated / math.sqrt(10))
    assert C.summarize_runs({"x": [1.0]}).loc["x", "std"] != C.summarize_runs({"x": [1.0]}).loc["x", "std"]   # NaN
