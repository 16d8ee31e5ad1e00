"""rolling_calib.analysis.diagnostics.time_split_scores: metrics on some periods, the ground truth on others."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from runner_helpers import write_fake_store

from rolling_calib.analysis.diagnostics import time_split_scores
from rolling_calib.analysis.scoring import score_store


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    store = tmp_path_factory.mktemp("split") / "store"
    _, frames = write_fake_store(store, pipelines={"a": {"bias_sd": 2.0, "noise": 1.0}, "b": {"bias_sd": 0.5,
                                                                                              "noise": 2.0}},
                                 seeds=4, rng_seed=3)
    return store, frames


def _by_hand(frame: pd.DataFrame, metric: list[str], truth: list[str]) -> tuple[float, float, float]:
    """QL and CQL (previous month's mean residual) on the metric months after the first, QL on the truth months."""
    month = frame["datetime"].dt.to_period("M").astype(str)
    resid = frame["label"] - frame["prediction"]
    bias = resid.groupby(month).mean()
    months = sorted(month.unique())
    scored = [m for prev, m in zip(months, months[1:]) if m in metric and prev in metric]
    rows = month.isin(scored)
    shift = month[rows].map({m: bias[prev] for prev, m in zip(months, months[1:])})
    return (float((resid[rows] ** 2).mean()), float(((resid[rows] - shift) ** 2).mean()),
            float((resid[month.isin(truth)] ** 2).mean()))


@pytest.mark.parametrize("metric, truth", [(["2018-01", "2018-02"], ["2018-03", "2018-04"]),
                                           (["2018-03", "2018-04"], ["2018-01", "2018-02"]),
                                           (["2018-01", "2018-02", "2018-03"], ["2018-04"])])
def test_the_split_matches_the_months_computed_from_the_predictions(fake, metric, truth):
    store, frames = fake
    values = time_split_scores(score_store(store), metric_periods=metric, truth_periods=truth)
    for name in ("a", "b"):
        assert values[name]["seed"].tolist() == [0, 1, 2, 3]
        for i, seed in enumerate(values[name]["seed"]):
            ql, cql, gt = _by_hand(frames[(name, int(seed))], metric, truth)
            assert values[name]["ql"][i] == pytest.approx(ql, rel=1e-9)
            assert values[name]["cql"][i] == pytest.approx(cql, rel=1e-9)
            assert values[name]["truth"][i] == pytest.approx(gt, rel=1e-9)


def test_a_metric_period_whose_bias_would_come_from_the_truth_is_left_out(fake):
    """2018-03's CQL takes 2018-02's bias: with 2018-02 in the truth, 2018-03 is not scored."""
    store, frames = fake
    scores = score_store(store)
    values = time_split_scores(scores, metric_periods=["2018-01", "2018-03", "2018-04"], truth_periods=["2018-02"])
    frame = frames[("a", 0)]
    month = frame["datetime"].dt.to_period("M").astype(str)
    resid = frame["label"] - frame["prediction"]
    assert values["a"]["ql"][0] == pytest.approx(float((resid[month == "2018-04"] ** 2).mean()), rel=1e-9)


def test_bad_splits_are_refused_with_the_periods_named(fake):
    scores = score_store(fake[0])
    with pytest.raises(ValueError, match="expected disjoint sets, found 2018-02 in both"):
        time_split_scores(scores, metric_periods=["2018-01", "2018-02"], truth_periods=["2018-02"])
    with pytest.raises(ValueError, match="found unknown 2018-09"):
        time_split_scores(scores, metric_periods=["2018-01", "2018-02"], truth_periods=["2018-09"])
    with pytest.raises(ValueError, match="no period whose previous period is among them"):
        time_split_scores(scores, metric_periods=["2018-01", "2018-03"], truth_periods=["2018-02"])
