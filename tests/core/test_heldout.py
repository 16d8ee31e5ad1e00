"""rolling_calib.core.heldout: held-out pairwise accuracy, run weights, and its bootstrap interval."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolling_calib.core.heldout import MEAN_ROW, held_out_accuracy, weighted_split_accuracy
from rolling_calib.core.metaeval import split_seed_accuracy


def _exact(values, metric, truth="t"):
    """Expected held-out accuracy of one pair (a, b) over every split, enumerated (equal runs, no weights)."""
    a, b = values["a"], values["b"]
    na, nb = a[truth].size, b[truth].size
    accs = []
    for ha in itertools.combinations(range(na), na // 2):
        for hb in itertools.combinations(range(nb), nb // 2):
            ra, rb = sorted(set(range(na)) - set(ha)), sorted(set(range(nb)) - set(hb))
            ga, gb = a[truth][ra].mean(), b[truth][rb].mean()
            if ga == gb:
                accs.append(0.5)
                continue
            xa, xb = a[metric][list(ha)], b[metric][list(hb)]
            better, worse = (xa, xb) if ga < gb else (xb, xa)
            d = better[:, None] - worse[None, :]
            accs.append(float(np.mean((d < 0) + 0.5 * (d == 0))))
    return float(np.mean(accs))


VALUES = {"a": {"t": np.array([1.0, 3.0, 2.0, 0.5]), "m": np.array([0.2, 1.5, 0.1, 0.9])},
          "b": {"t": np.array([2.5, 1.5, 2.0, 3.0]), "m": np.array([1.0, 0.3, 0.8, 1.2])}}


def test_the_estimate_converges_to_the_enumerated_expectation_and_agrees_with_split_seed_accuracy():
    exact = _exact(VALUES, "m")
    ones = {"a": np.ones(4), "b": np.ones(4)}
    ours = weighted_split_accuracy(VALUES, ones, [("a", "b")], metrics=["m"], ground_truth="t", n_splits=4000,
                                   rng=np.random.default_rng(1))[0, 0]
    theirs = split_seed_accuracy(VALUES, [("a", "b")], metrics=["m"], ground_truth="t",
                                 n_splits=4000)["split_accuracy"].iloc[0]
    assert ours == pytest.approx(exact, abs=0.02)
    assert theirs == pytest.approx(exact, abs=0.02)


def test_a_run_drawn_twice_counts_twice_and_stays_in_one_half():
    """Weights 2 and 0 on a 3-run pipeline equal the pipeline with that run written out twice, kept together."""
    v = {"a": {"t": np.array([1.0, 2.0, 9.0]), "m": np.array([0.0, 5.0, 9.0])},
         "b": {"t": np.array([3.0, 3.0]), "m": np.array([1.0, 1.0])}}
    counts = {"a": np.array([2.0, 1.0, 0.0]), "b": np.array([1.0, 1.0])}
    got = weighted_split_accuracy(v, counts, [("a", "b")], metrics=["m"], ground_truth="t", n_splits=4000,
                                  rng=np.random.default_rng(0))[0, 0]
    # a's halves by whole runs within floor(3 / 2) = 1 of weight: {run 1} | {run 0 (x2)} half the time, else the
    # first half would exceed the weight, so run 0 goes second: H1 = {run 1}, H2 = {run 0, run 0} -> truth 1 < 3
    # (a better): m 5 vs 1 -> 0; or H1 = {run 0} with weight 2 > 1 is taken only when it is first: k = 1 run, so
    # H1 = {run 0 (x2)}, H2 = {run 1}: truth 2 < 3, m 0 vs 1 -> 1. Each order half of the time.
    assert got == pytest.approx(0.5, abs=0.03)


def test_the_accuracy_does_not_depend_on_how_the_pair_is_named():
    one = held_out_accuracy(VALUES, [("a", "b")], metrics=["m"], ground_truth="t", n_boot=20, seed=3)
    two = held_out_accuracy(VALUES, [("b", "a")], metrics=["m"], ground_truth="t", n_boot=20, seed=3)
    assert one["accuracy"].iloc[0] == pytest.approx(two["accuracy"].iloc[0])


def test_differences_against_the_baseline_and_the_mean_over_pairs():
    rng = np.random.default_rng(4)
    v = {n: {"t": rng.normal(mu, 1, 8), "ql": rng.normal(mu, 1, 8), "cql": rng.normal(mu, 0.3, 8)}
         for n, mu in (("base", 0.0), ("x", 0.5), ("y", 1.0))}
    t = held_out_accuracy(v, [("base", "x"), ("base", "y")], metrics=["ql", "cql"], ground_truth="t",
                          baseline="ql", n_boot=50, seed=0).set_index(["pair", "metric"])
    for pair in ("base vs x", "base vs y", MEAN_ROW):
        assert t.loc[(pair, "cql - ql"), "accuracy"] == pytest.approx(
            t.loc[(pair, "cql"), "accuracy"] - t.loc[(pair, "ql"), "accuracy"])
        assert t.loc[(pair, "cql"), "ci_low"] <= t.loc[(pair, "cql"), "ci_high"]
    for m in ("ql", "cql"):
        assert t.loc[(MEAN_ROW, m), "accuracy"] == pytest.approx(
            (t.loc[("base vs x", m), "accuracy"] + t.loc[("base vs y", m), "accuracy"]) / 2)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=3, max_size=6), st.lists(st.floats(-5, 5), min_size=3, max_size=6),
       st.integers(0, 100))
def test_every_accuracy_and_bound_lies_in_0_1(xa, xb, seed):
    v = {"a": {"t": np.array(xa), "m": np.array(xa[::-1])}, "b": {"t": np.array(xb), "m": np.array(xb)}}
    t = held_out_accuracy(v, [("a", "b")], metrics=["m"], ground_truth="t", n_boot=10, n_splits=10, seed=seed)
    assert ((t["accuracy"] >= 0) & (t["accuracy"] <= 1) & (t["ci_low"] >= 0) & (t["ci_high"] <= 1)).all()


def test_bad_input_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="baseline: expected one of the metrics"):
        held_out_accuracy(VALUES, [("a", "b")], metrics=["m"], ground_truth="t", baseline="ql")
    with pytest.raises(ValueError, match="no scores for c"):
        held_out_accuracy(VALUES, [("a", "c")], metrics=["m"], ground_truth="t")
    with pytest.raises(ValueError, match=r"expected >= 2 finite values"):
        held_out_accuracy({"a": {"t": [1.0], "m": [1.0]}, "b": VALUES["b"]}, [("a", "b")], metrics=["m"],
                          ground_truth="t")
