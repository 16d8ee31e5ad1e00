"""rolling_calib.analysis.diagnostics on fake stores (synthetic predictions, no training).

``write_fake_store`` draws one output bias per seed (``bias_sd``) that is the same in every
window: with a large ``bias_sd`` the seeds differ by their offset, which a bias correction
removes; with ``bias_sd = 0`` they differ only by noise, which it cannot.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from runner_helpers import rewrite_unit, write_fake_store

from rolling_calib.analysis.diagnostics import diagnose_store, run_period_stats
from rolling_calib.core.calibration import Calibration
from rolling_calib.analysis.scoring import score_store
from rolling_calib.execution.reader import read_unit
from rolling_calib.execution.units import UnitKey
from rolling_calib.core.resampling import Resampling

PIPES = {"wild": {"bias_sd": 3.0, "noise": 1.0}, "flat": {"bias_sd": 0.0, "noise": 1.0}}
SEEDS = 5


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    store = tmp_path_factory.mktemp("diag") / "store"
    windows, frames = write_fake_store(store, pipelines=PIPES, seeds=SEEDS)
    return store, windows, frames


@pytest.fixture(scope="module")
def diagnosis(fake):
    return diagnose_store(fake[0])


def _month_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per calendar month, the slow obvious way: rows, mean residual, QL, mean and std of predictions."""
    month = frame["datetime"].dt.to_period("M").astype(str)
    resid = frame["label"] - frame["prediction"]
    return pd.DataFrame({
        "rows": resid.groupby(month).size(),
        "bias": resid.groupby(month).mean(),
        "ql": (resid**2).groupby(month).mean(),
        "var": resid.groupby(month).var(ddof=0),
        "mean_prediction": frame["prediction"].groupby(month).mean(),
        "prediction_std": frame["prediction"].groupby(month).std(ddof=0),
    })


def test_a_large_seed_bias_is_removed_but_the_order_cannot_be_checked(diagnosis):
    """5 seeds with a bias sd of 3: CQL removes most of the seed spread; QL cannot tell wild from flat at 95%,
    so there is no ordering to keep, and the assessment says so instead of claiming a gain."""
    wild = diagnosis.of("wild")
    assert wild.removable > 0.9 and wild.removed > 0.9
    assert wild.split.frac_bias > 0.9
    assert wild.assessment.narrows and wild.std_ratio.ci_high < 1
    assert wild.assessment.keeps_order is None and wild.assessment.helps is None
    assert "cannot be checked on these runs" in wild.verdict and "there is no ordering to keep" in wild.verdict
    assert wild.components.dominant == "offset" and "could remove at most 9" in wild.verdict
    assert wild.persistence.corr_within > 0.9 and wild.persistence.corr_across > 0.9
    assert wild.persistence.previous_predicts


def test_calibration_erases_a_difference_that_is_only_a_bias(tmp_path):
    """'biased' differs from 'plain' only by its seeds' output bias (16 seeds: QL separates them): CQL narrows the
    seeds and erases the very difference the ground truth sees (docs/method.md §4); the held-out check says so."""
    store = tmp_path / "store"
    write_fake_store(store, pipelines={"plain": {"bias_sd": 0.0, "noise": 1.0}, "biased": {"bias_sd": 2.0, "noise": 1.0}},
                     seeds=16, rng_seed=0)
    d = diagnose_store(store, resampling=Resampling(n_boot=500)).of("biased")
    assert d.assessment.narrows and d.assessment.keeps_order is False and d.assessment.helps is False
    assert d.verdict.startswith("Calibration narrows the seed spread but orders the pipelines worse than QL")


def test_calibration_helps_when_the_pipelines_differ_beyond_their_bias(tmp_path):
    """Seeds with an output bias, pipelines that differ in their noise: CQL narrows and keeps the order."""
    store = tmp_path / "store"
    write_fake_store(store, pipelines={"sharp": {"bias_sd": 1.0, "noise": 1.0}, "blunt": {"bias_sd": 1.0, "noise": 2.0}},
                     seeds=8, rng_seed=1)
    d = diagnose_store(store, resampling=Resampling(n_boot=500))
    for p in d.pipelines:
        assert p.assessment.helps is True, p.verdict
        assert p.verdict.startswith("Calibration helps here: CQL's seed std is ")


def test_without_a_seed_bias_a_correction_cannot_help(diagnosis):
    flat = diagnosis.of("flat")
    assert flat.removable < 0.25
    assert flat.assessment.helps is False and not flat.assessment.narrows
    assert flat.verdict.startswith("Calibration does not")
    assert flat.components is not None and flat.components.dominant != "offset"
    assert flat.split.frac_spread > 0.5


def test_split_matches_hand_computation(fake, diagnosis):
    _, _, frames = fake
    wild = diagnosis.of("wild")
    assert wild.seeds == list(range(SEEDS))
    assert wild.periods == ["2018-01", "2018-02", "2018-03", "2018-04"]
    assert wild.scored_periods == wild.periods[1:]
    b, s, q = [], [], []
    for seed in wild.seeds:
        t = _month_table(frames[("wild", seed)]).loc[wild.scored_periods]
        w = t["rows"] / t["rows"].sum()
        b.append(float((w * t["bias"] ** 2).sum()))
        s.append(float((w * t["var"]).sum()))
        q.append(float((w * t["ql"]).sum()))
    np.testing.assert_allclose(wild.split.bias_part, b, rtol=1e-9)
    np.testing.assert_allclose(wild.split.spread_part, s, rtol=1e-9)
    np.testing.assert_allclose(wild.split.ql, q, rtol=1e-9)
    assert wild.split.var_bias == pytest.approx(np.var(b, ddof=1))
    assert wild.split.var_spread == pytest.approx(np.var(s, ddof=1))
    assert wild.split.cov == pytest.approx(np.cov(b, s, ddof=1)[0, 1])
    assert wild.split.var_ql == pytest.approx(wild.split.var_bias + wild.split.var_spread + 2 * wild.split.cov)


def test_ql_and_cql_agree_with_the_scores(fake, diagnosis):
    """QL2..K = B + S per run is the scored QL; pooled CQL = S + the weighted mean of (bias_k - bias_k-1)^2."""
    scores = score_store(fake[0])
    for p in diagnosis.pipelines:
        runs = scores.runs[scores.runs["pipeline"] == p.pipeline].sort_values("seed")
        np.testing.assert_allclose(p.split.ql, runs["ql_scored"], rtol=1e-9)
        assert p.std_cql == pytest.approx(np.std(runs["cql"], ddof=1))
        assert p.split.std_ql == pytest.approx(np.std(runs["ql_scored"], ddof=1))
        table = scores.periods[scores.periods["pipeline"] == p.pipeline]
        for r, seed in enumerate(p.seeds):
            t = table[table["seed"] == seed].sort_values("start")
            jump = np.diff(t["mean_residual"].to_numpy()) ** 2
            rows = t["rows"].to_numpy()[1:]
            expected = p.split.spread_part[r] + float((rows * jump).sum() / rows.sum())
            assert runs["cql"].iloc[r] == pytest.approx(expected, rel=1e-9)


def test_prediction_spread_offsets_and_refits(fake, diagnosis):
    _, windows, frames = fake
    wild = diagnosis.of("wild")
    tables = [_month_table(frames[("wild", seed)]) for seed in wild.seeds]
    mean_pred = np.array([t["mean_prediction"] for t in tables])
    pred_std = np.array([t["prediction_std"] for t in tables])
    assert wild.spread.mean_spread == pytest.approx(np.std(mean_pred, axis=0, ddof=1).mean())
    assert wild.spread.scale == pytest.approx(pred_std.mean())
    # per-seed bias sd 3 against a prediction std of about sqrt(0.25 * 9 + 1 + ...) ~ 1.8
    assert wild.spread.mean_spread > wild.spread.scale / 2
    bias = np.array([t["bias"] for t in tables])
    offsets = wild.offsets.pivot(index="seed", columns="period", values="offset").to_numpy()
    np.testing.assert_allclose(offsets, bias - bias.mean(axis=0), atol=1e-12)
    assert list(wild.offsets.columns) == ["seed", "period", "start", "mean_residual", "offset", "window", "refit"]
    # two windows of two months: the model changes between February and March
    assert len(windows) == 2
    assert wild.refits == ["2018-03"]
    assert wild.offsets.groupby("period")["window"].first().tolist() == [0, 0, 1, 1]
    assert (wild.persistence.n_within, wild.persistence.n_across) == (2 * SEEDS, SEEDS)


def test_offsets_that_reset_at_the_refit_are_named(tmp_path):
    """Flip every seed's offset in the second window: the bound stays, CQL loses, the verdict says why."""
    store = tmp_path / "store"
    write_fake_store(store, pipelines={"reset": {"bias_sd": 3.0, "noise": 1.0}}, seeds=SEEDS, rng_seed=2)
    for seed in range(SEEDS):
        first = read_unit(store, UnitKey("reset", seed, 0))
        bias = float((first["prediction"] - 0.5 * first["label"]).mean())
        key = UnitKey("reset", seed, 1)
        second = read_unit(store, key)
        second["prediction"] = second["prediction"] - 2.0 * bias
        rewrite_unit(store, key, second)
    d = diagnose_store(store).of("reset")
    assert d.persistence.corr_within > 0.9
    assert d.persistence.corr_across < -0.9
    assert d.persistence.change_across > d.persistence.level_across
    assert d.removable > 0.9 and d.removed < d.removable - 0.2
    assert f"{d.persistence.corr_across:.2f} across a refit" in d.verdict
    assert "the first period after a refit is corrected with the old model's bias" in d.verdict


def test_to_dict_is_plain_json_and_format_reads(diagnosis):
    out = json.loads(json.dumps(diagnosis.to_dict(), allow_nan=False))
    assert [p["pipeline"] for p in out["pipelines"]] == [p.pipeline for p in diagnosis.pipelines]
    wild = next(p for p in out["pipelines"] if p["pipeline"] == "wild")
    assert set(wild["variance_split"]) >= {"var_ql", "var_bias", "var_spread", "cov", "frac_bias", "frac_spread", "frac_cov"}
    assert set(wild["std"]) == {"ql_scored", "oracle_bias_correction", "cql"}
    assert wild["refits"] == ["2018-03"] and len(wild["offsets"]) == 4 * SEEDS
    assert wild["offsets"][0]["start"] == "2018-01-01T00:00:00"
    assert out["paired_differences"][0]["a"] == "wild" and len(out["paired_differences"][0]["seeds"]) == SEEDS
    text = diagnosis.format()
    assert "Var_seeds(QL2..K)" in text and "best per-period bias correction" in text
    for p in diagnosis.pipelines:
        assert f"Verdict: {p.verdict}" in text


def test_paired_differences(fake, diagnosis):
    diff = diagnosis.paired_differences("wild", "flat")
    runs = diagnosis.runs.set_index(["pipeline", "seed"])
    assert diff["seed"].tolist() == list(range(SEEDS))
    for row in diff.itertuples():
        assert row.cql == pytest.approx(runs.loc[("wild", row.seed), "cql"] - runs.loc[("flat", row.seed), "cql"])
        assert row.ql_scored == pytest.approx(runs.loc[("wild", row.seed), "ql_scored"] - runs.loc[("flat", row.seed), "ql_scored"])
    with pytest.raises(ValueError, match="was not diagnosed"):
        diagnosis.paired_differences("wild", "nope")


def test_restricting_pipelines_and_pairs(fake):
    d = diagnose_store(fake[0], pipelines=["flat"])
    assert [p.pipeline for p in d.pipelines] == ["flat"] and d.pairs == []
    with pytest.raises(ValueError, match="was not diagnosed"):
        diagnose_store(fake[0], pipelines=["flat"], pairs=[("flat", "wild")])


def test_a_single_seed_is_refused(tmp_path):
    write_fake_store(tmp_path / "one", pipelines={"solo": {"bias_sd": 1.0}}, seeds=1)
    with pytest.raises(ValueError, match="no pipeline has 2 complete runs"):
        diagnose_store(tmp_path / "one")


def test_run_period_stats_rejects_rows_before_the_first_period():
    frame = pd.DataFrame({"datetime": pd.to_datetime(["2017-12-29"]), "prediction": [1.0]})
    with pytest.raises(ValueError, match="precede the first period start"):
        run_period_stats(frame, pd.to_datetime(["2018-01-01"]))


def test_weekly_periods(fake):
    d = diagnose_store(fake[0], calibration=Calibration(period="week")).of("wild")
    assert len(d.periods) > 10 and d.refits and math.isfinite(d.removable)
    s = d.split
    assert s.var_ql == pytest.approx(s.var_bias + s.var_spread + 2 * s.cov)
