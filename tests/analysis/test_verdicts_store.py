"""Verdicts and guards on stores: the compare --json contract, numbers recomputed from the runs, each guard."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from runner_helpers import write_fake_store

from rolling_calib.analysis.comparison import compare_store
from rolling_calib.analysis.scoring import score_store
from rolling_calib.cli import main
from rolling_calib.core.question import Question
from rolling_calib.core.resampling import Resampling

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden_tiny_demo"
VERDICT_KEYS = {"winner", "difference", "ci_low", "ci_high", "dominant_uncertainty"}


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory) -> Path:
    """The tiny demo store of the golden fixture (2 pipelines x 2 seeds, our LSTM on the synthetic market)."""
    store = tmp_path_factory.mktemp("golden") / "store"
    shutil.copytree(GOLDEN / "store", store)
    return store


@pytest.fixture(scope="module")
def skilled_store(tmp_path_factory) -> Path:
    """Predictions = 0.5 label + seed bias + noise: models with skill; 'wild' has a wider seed bias."""
    store = tmp_path_factory.mktemp("skilled") / "store"
    write_fake_store(store, pipelines={"calm": {"bias_sd": 0.1, "noise": 1.0}, "wild": {"bias_sd": 1.0, "noise": 1.5}},
                     seeds=6, instruments=("AAA", "BBB", "CCC", "DDD"))
    return store


def _compare_json(store: Path, capsys, *extra: str) -> dict:
    capsys.readouterr()
    assert main(["compare", "--store", str(store), "--json", "--n-boot", "200", *extra]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_compare_json_carries_verdicts_and_warnings(demo_store, capsys):
    out = _compare_json(demo_store, capsys)
    assert isinstance(out["warnings"], list)
    for w in out["warnings"]:
        assert set(w) >= {"kind", "pipelines", "message"} and w["message"]
    for pair in out["pairs"]:
        assert isinstance(pair["ground_truth_determined"], bool)
        assert {"ql", "cql"} <= set(pair["verdicts"])
        for metric, v in pair["verdicts"].items():
            assert VERDICT_KEYS <= set(v), metric
            assert v["dominant_uncertainty"] in ("seeds", "time")
            assert v["winner"] in (None, pair["better"], pair["worse"])
            assert v["ci_low"] <= v["difference"] <= v["ci_high"]
        assert pair["ground_truth_determined"] == (pair["verdicts"]["ql"]["winner"] is not None)


def test_verdict_differences_are_the_runs_means(skilled_store):
    scores = score_store(skilled_store)
    comparison = compare_store(scores, resampling=Resampling(n_boot=200))
    runs = scores.runs.set_index("pipeline")
    for pv in comparison.verdicts:
        for metric, v in pv.verdicts.items():
            a = runs.loc[pv.better, metric].to_numpy(dtype=float)
            b = runs.loc[pv.worse, metric].to_numpy(dtype=float)
            assert v.difference == pytest.approx(a.mean() - b.mean(), rel=1e-10, abs=1e-13), metric


def test_per_day_summaries_add_up_to_each_run(skilled_store):
    scores = score_store(skilled_store)
    days = scores.days.groupby(["pipeline", "seed"]).sum(numeric_only=True)
    scored = scores.days[scores.days["sse_cql"].notna()].groupby(["pipeline", "seed"])[["rows", "sse_cql"]].sum()
    runs = scores.runs.set_index(["pipeline", "seed"])
    np.testing.assert_allclose(days["sse_ql"] / days["rows"], runs["ql"], rtol=1e-12)
    np.testing.assert_allclose(scored["sse_cql"] / scored["rows"], runs["cql"], rtol=1e-12)
    np.testing.assert_allclose(days["ic_sum"] / days["ic_n"], runs["ic"], rtol=1e-12)
    np.testing.assert_allclose(days["n"], days["rows"])
    ql_from_moments = (days["syy"] - 2 * days["spy"] + days["spp"]) / days["n"]
    np.testing.assert_allclose(ql_from_moments, runs["ql"], rtol=1e-9)


def test_no_skill_is_named_on_models_that_do_not_predict(demo_store, skilled_store, capsys):
    demo = _compare_json(demo_store, capsys)
    no_skill = [w for w in demo["warnings"] if w["kind"] == "no_skill"]
    assert len(no_skill) == 1 and set(no_skill[0]["pipelines"]) == {"wd0", "wd1e-2"}
    for name, measured in no_skill[0]["measured"].items():
        assert not measured["skill"]
        assert f"{measured['ic_mean']:.3g}" in no_skill[0]["message"] or measured["positive_ic"]
    skilled = _compare_json(skilled_store, capsys)
    assert "no_skill" not in {w["kind"] for w in skilled["warnings"]}


def test_an_undetermined_ground_truth_hides_the_accuracies(tmp_path, capsys):
    """Two pipelines drawn alike: the QL gap is inside its interval; accuracies are not shown as numbers."""
    store = tmp_path / "store"
    write_fake_store(store, pipelines={"a": {"bias_sd": 1.0}, "b": {"bias_sd": 1.0}}, seeds=3, rng_seed=4)
    out = _compare_json(store, capsys)
    pair = out["pairs"][0]
    assert pair["ground_truth_determined"] is False and pair["verdicts"]["ql"]["winner"] is None
    assert "undetermined_ground_truth" in {w["kind"] for w in out["warnings"]}
    capsys.readouterr()
    assert main(["compare", "--store", str(store), "--n-boot", "200"]) == 0
    text = capsys.readouterr().out
    assert "not shown because the ground truth (QL) is undetermined" in text
    assert text.index("Verdicts at 95%") < text.index("Per pipeline")


def test_text_output_leads_with_the_verdicts_in_the_labels_unit(demo_store, capsys):
    capsys.readouterr()
    assert main(["compare", "--store", str(demo_store), "--n-boot", "200"]) == 0
    text = capsys.readouterr().out
    first = text.index("Verdicts at 95%")
    assert first < text.index("Warnings:") < text.index("Per pipeline") < text.index("Pairwise accuracy")
    assert "bp²" in text and "bp^2" not in text


def test_confidence_changes_the_verdicts_level(skilled_store):
    scores = score_store(skilled_store)
    boot = Resampling(n_boot=200)
    narrow = compare_store(scores, question=Question(confidence=0.5), resampling=boot).verdicts[0].verdicts["ql"]
    wide_comparison = compare_store(scores, question=Question(confidence=0.99), resampling=boot)
    wide = wide_comparison.verdicts[0].verdicts["ql"]
    assert wide.ci_high - wide.ci_low > narrow.ci_high - narrow.ci_low
    assert wide.confidence == 0.99 and wide.question == Question(confidence=0.99)
    data = wide_comparison.to_dict()   # both values recorded, each through its own to_dict
    assert data["question"] == {"target": "period", "confidence": 0.99, "claim": "over seeds, on these days"}
    assert data["bootstrap"] == {"n_boot": 200, "seed": 0, "block_size": None}
    assert data["pairs"][0]["verdicts"]["ql"]["question"] == {"target": "period", "confidence": 0.99}


def test_future_verdicts_say_how_far_their_market_time_part_sees(skilled_store):
    """The horizon line comes from the future verdicts' own bandwidths and days: the headline ones under --target
    future, those shown beside the period headline otherwise (the same numbers)."""
    scores = score_store(skilled_store)
    future = compare_store(scores, question=Question(target="future"), resampling=Resampling(n_boot=200))
    period = compare_store(scores, question=Question(target="period"), resampling=Resampling(n_boot=200))
    cvs = [v.variance for pv in future.verdicts for v in pv.verdicts.values() if v.variance.var_time > 0]
    assert cvs, "the fake store's verdicts have a market-time part"
    horizon = max(cv.block_days if cv.drift else cv.bandwidth + 1 for cv in cvs)
    days = min(v.n_times for pv in future.verdicts for v in pv.verdicts.values() if v.variance.var_time > 0)
    text = future.format()
    assert f"persistence up to {horizon} trading day(s) of the {days} evaluated" in text
    assert f"persistence up to {horizon} trading day(s) of the {days} evaluated" in period.format()
    beside = [v.variance for pv in period.verdicts for v in pv.beside.values() if v.variance.var_time > 0]
    assert [cv.bandwidth for cv in beside] == [cv.bandwidth for cv in cvs]


def test_the_default_headline_is_the_period_verdict_with_its_days_and_the_future_beside_it(skilled_store, capsys):
    """Issue 37: the verdict shown first holds its level under drift (over seeds, on these days) and names its
    days; the claim about the market's future is beside it, as the assumption it rests on."""
    out = _compare_json(skilled_store, capsys)
    assert out["question"]["target"] == "period" and "target" not in out["bootstrap"]
    assert out["question"]["claim"] == "over seeds, on these days"
    ql = out["pairs"][0]["verdicts"]["ql"]
    assert ql["question"]["target"] == "period" and ql["days"] == ["2018-01-02", "2018-04-30"]
    assert ql["variance"]["var_time"] == 0.0
    beside = ql["beside"]
    assert beside["target"] == "future" and "drift is shorter than the horizon" in beside["claim"]
    assert beside["outcome"] in ("better", "worse", "undetermined") and beside["ci_high"] - beside["ci_low"] > 0
    horizons = [v["beside"]["horizon_days"] for v in out["pairs"][0]["verdicts"].values()]
    assert any(h is not None and h >= 1 for h in horizons)     # the market-time parts that were measured
    assert out["headline"].endswith(".") and "over seeds, on these 82 days (2018-01-02..2018-04-30)" in out["headline"]
    text = compare_store(score_store(skilled_store), resampling=Resampling(n_boot=200)).format()
    assert text.splitlines()[0] == out["headline"]
    assert "Verdicts at 95%, over seeds, on these 82 days (2018-01-02..2018-04-30)" in text
    assert "future, if drift < horizon" in text
    future = _compare_json(skilled_store, capsys, "--target", "future")
    assert future["pairs"][0]["verdicts"]["ql"]["question"]["target"] == "future"
    assert future["pairs"][0]["verdicts"]["ql"]["beside"]["target"] == "period"


def test_compare_json_says_when_each_pipeline_was_better_for_every_pair_and_metric(skilled_store, capsys):
    out = _compare_json(skilled_store, capsys)
    assert [w["pair"] for w in out["when"]] == [[p["better"], p["worse"]] for p in out["pairs"]]
    for pair, when in zip(out["pairs"], out["when"]):
        assert set(when["metrics"]) == set(pair["verdicts"])
        for metric, w in when["metrics"].items():
            first = "2018-02-01" if metric == "cql" else "2018-01-02"   # CQL scores months 2..K
            assert [(x["label"], x["start"]) for x in w["windows"]] == [("w00", first), ("w01", "2018-03-01")]
            for x in w["windows"]:
                assert x["outcome"] in ("better", "worse", "undetermined") and x["end"] >= x["start"]
                assert x["ci_low"] <= x["difference"] <= x["ci_high"] and 0.95 <= x["level"] < 1
                assert x["p_holm"] >= x["p_value"]
            assert w["consistency"].startswith(f"{pair['better']} better in ") and "of 2 refit windows" in w["consistency"]
            assert w["across_windows"]["outcome"] == "not enough windows"
            assert w["fluctuation"]["fired"] in (True, False) and w["fluctuation"]["n_sim"] == 200
    months = _compare_json(skilled_store, capsys, "--when", "months")
    ql = months["when"][0]["metrics"]["ql"]
    assert [x["label"] for x in ql["windows"]] == ["2018-01", "2018-02", "2018-03", "2018-04"]
    assert ql["across_windows"]["outcome"] in ("better", "worse", "undetermined")   # 4 months: the test is made
    # on the odd- and the even-numbered months apart (Bonferroni), each half's test in the JSON
    assert ql["across_windows"]["method"] == "halves"
    assert [h["windows"] for h in ql["across_windows"]["halves"]] == [[0, 2], [1, 3]]
    assert [h["level"] for h in ql["across_windows"]["halves"]] == pytest.approx([0.975, 0.975])
    assert "of 4 months" in ql["consistency"]
