"""Meta-evaluation math: pairwise accuracy per metric with direction by the ground truth, split-seed agreement."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from rolling_calib.core.metaeval import meta_evaluate, pair_directions, pairwise_meta, split_seed_agreement
from rolling_calib.core.resampling import Resampling


def test_direction_by_mean_ground_truth_and_hand_accuracy():
    scores = {"a": {"ql": [3.0, 3.0], "m": [1.0, 4.0]}, "b": {"ql": [1.0, 2.0], "m": [2.0, 3.0]}}
    assert pair_directions(scores) == [("b", "a", 1.5, False)]
    table = pairwise_meta(scores, metrics=["ql", "m"], resampling=Resampling(n_boot=50))
    # m: b = [2, 3] vs a = [1, 4]: 2<4, 3<4 win, 2>1, 3>1 lose -> 2/4
    assert table.set_index("metric")["accuracy"].to_dict() == {"ql": 1.0, "m": 0.5}
    assert (table["ci_low"] <= table["accuracy"]).all() and (table["accuracy"] <= table["ci_high"]).all()


def test_split_agreement_perfect_and_reversed():
    s = {"a": {"ql": [1.0, 1.1, 0.9, 1.0], "good": [0.0] * 4, "bad": [9.0] * 4},
         "b": {"ql": [2.0, 2.1, 1.9, 2.0], "good": [1.0] * 4, "bad": [0.0] * 4}}
    out = split_seed_agreement(s, metrics=["good", "bad"], n_splits=20, seed=3).set_index("metric")
    assert out.loc["good", "split_tau"] == 1.0 and out.loc["good", "split_concordance"] == 1.0
    assert out.loc["bad", "split_tau"] == -1.0 and out.loc["bad", "split_concordance"] == 0.0


def test_errors():
    with pytest.raises(ValueError, match="at least 2 pipelines"):
        split_seed_agreement({"a": {"ql": [1.0, 2.0]}}, metrics=["ql"])
    with pytest.raises(ValueError, match="fewer than 2 runs"):
        split_seed_agreement({"a": {"ql": [1.0]}, "b": {"ql": [1.0, 2.0]}}, metrics=["ql"])
    with pytest.raises(ValueError, match="no metric 'm'"):
        pairwise_meta({"a": {"ql": [1.0]}, "b": {"ql": [2.0]}}, metrics=["m"])
    with pytest.raises(ValueError, match="different numbers of runs"):
        pairwise_meta({"a": {"ql": [1.0], "m": [1.0, 2.0]}, "b": {"ql": [2.0], "m": [1.0]}}, metrics=["m"])
    with pytest.raises(ValueError, match="no scores for 'c'"):
        pair_directions({"a": {"ql": [1.0]}, "b": {"ql": [2.0]}}, [("a", "c")])


@settings(max_examples=30, deadline=None)
@given(seed=hs.integers(0, 1000), shift=hs.floats(-5, 5, allow_nan=False))
def test_properties_same_seed_same_result_and_shift_invariance(seed, shift):
    rng = np.random.default_rng(seed)
    scores = {n: {"ql": rng.normal(i, 1.0, 6), "m": rng.normal(i, 0.5, 6)} for i, n in enumerate("abc")}
    one = meta_evaluate(scores, metrics=["ql", "m"], n_splits=10, split_seed=seed, resampling=Resampling(n_boot=50))
    two = meta_evaluate(scores, metrics=["ql", "m"], n_splits=10, split_seed=seed, resampling=Resampling(n_boot=50))
    assert one.to_dict() == two.to_dict()
    moved = {n: {"ql": v["ql"], "m": v["m"] + shift} for n, v in scores.items()}   # a common shift changes no order
    three = meta_evaluate(moved, metrics=["ql", "m"], n_splits=10, split_seed=seed, resampling=Resampling(n_boot=50))
    assert three.summary["mean_accuracy"].tolist() == one.summary["mean_accuracy"].tolist()
    assert ((one.summary["mean_accuracy"] >= 0) & (one.summary["mean_accuracy"] <= 1)).all()
    assert one.summary["n_pairs"].tolist() == [3, 3]
