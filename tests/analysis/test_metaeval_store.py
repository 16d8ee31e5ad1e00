"""Store meta-evaluation, the validation bias source and its refusal on older stores."""

from __future__ import annotations

import json

import pytest

from rolling_calib.analysis.metaeval import metaeval_store
from rolling_calib.analysis.comparison import compare_store
from rolling_calib.analysis.scoring import score_store
from rolling_calib.core.calibration import Calibration
from rolling_calib.execution.reader import MissingValidationError
from rolling_calib.cli import main
from rolling_calib.core.resampling import Resampling
from runner_helpers import write_fake_store

CQL_VARIANTS = ["cql", "cql_per_instrument", "cql_week", "cql_20d"]


def test_per_seed_offsets_calibrated_variants_win(tmp_path):
    write_fake_store(tmp_path, pipelines={"good": {"bias_sd": 1.0, "noise": 1.0}, "bad": {"bias_sd": 1.0, "noise": 1.2}},
                     seeds=8, end="2018-06", valid=True)
    result = metaeval_store(tmp_path, n_splits=50, resampling=Resampling(n_boot=200))
    acc = result.summary.set_index("metric")
    assert "cql_validation" in acc.index and result.notes == []
    for v in [*CQL_VARIANTS, "cql_validation", "cql_validation_per_instrument"]:
        assert acc.loc[v, "mean_accuracy"] > acc.loc["ql", "mean_accuracy"] + 0.2
        assert acc.loc[v, "split_concordance"] >= acc.loc["ql", "split_concordance"]
    assert list(result.pairs[["better", "worse"]].iloc[0]) == ["good", "bad"]


def test_no_offsets_calibrated_variants_do_not_win(tmp_path):
    write_fake_store(tmp_path, pipelines={"good": {"bias_sd": 0.0, "noise": 1.0}, "bad": {"bias_sd": 0.0, "noise": 1.03}},
                     seeds=8, end="2018-06")
    result = metaeval_store(tmp_path, n_splits=50, resampling=Resampling(n_boot=200))
    acc = result.summary.set_index("metric")["mean_accuracy"]
    assert "cql_validation" not in acc.index and "validation-source variants left out" in result.notes[0]
    assert all(acc[v] <= acc["ql"] + 0.1 for v in CQL_VARIANTS)


def test_validation_source_scores_and_refuses_old_stores(tmp_path):
    new, old = tmp_path / "new", tmp_path / "old"
    pipes = {"a": {"bias_sd": 1.0}, "b": {"bias_sd": 1.0}}
    write_fake_store(new, pipelines=pipes, seeds=3, valid=True)
    write_fake_store(old, pipelines=pipes, seeds=3)
    scores = score_store(new, calibration=Calibration(source="validation"))
    assert scores.calibration.source == "validation" and (scores.runs["n_scored"] == scores.runs["n_all"]).all()
    assert scores.runs["cql_refit_first"].notna().all()
    assert compare_store(scores, resampling=Resampling(n_boot=50)).to_dict()["source"] == "validation"
    with pytest.raises(MissingValidationError, match=f"{old}: source 'validation' needs each window's validation"):
        score_store(old, calibration=Calibration(source="validation"))
    assert main(["compare", "--store", str(old), "--source", "validation", "--json"]) == 2


def test_metaeval_cli_json(tmp_path, capsys):
    write_fake_store(tmp_path, pipelines={"a": {"bias_sd": 1.0}, "b": {"bias_sd": 1.0, "noise": 1.5}}, seeds=4)
    assert main(["metaeval", "--store", str(tmp_path), "--json", "--n-boot", "50", "--splits", "10"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["split_seed_check"] == {"n_splits": 10, "seed": 0}
    assert [m["metric"] for m in doc["metrics"]][:3] == ["ql", "ql_scored", "cql"]
    assert main(["metaeval", "--store", str(tmp_path), "--variants", "nope"]) == 2
