"""Tracking logs exactly the scores a command computed: a store run with ``calibration.source: validation``.

Before issue 16 tracking scored the store again with only the recorded period and bias, so such a
store logged the previous-period CQL to MLflow while ``compare`` printed the validation-source one.
A real run (tiny LSTM, real Qlib store, real MLflow SQLite database), no mocks.
"""

from __future__ import annotations

import json

import pytest
import yaml
from sweep_helpers import tiny_experiment

from rolling_calib.analysis.scoring import score_store
from rolling_calib.cli import main
from rolling_calib.tracking.mlflow_log import default_tracking_uri

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

pytestmark = pytest.mark.slow


def test_a_validation_source_store_logs_the_cql_compare_prints(tmp_path, capsys):
    path = tiny_experiment(tmp_path, seeds=2, pipelines={"wd0": {}, "wd1e-3": {"task.model.kwargs.weight_decay": 1e-3}})
    doc = yaml.safe_load(path.read_text())
    doc["rolling"]["calibration"] = {"source": "validation"}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    store = tmp_path / "store"
    assert main(["run", str(path), "--store", str(store), "--workers", "1", "--json"]) == 0   # tracks by default
    ran = json.loads(capsys.readouterr().out)
    assert ran["tracking_uri"] == default_tracking_uri(store)

    assert main(["compare", "--store", str(store), "--json", "--n-boot", "50"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["source"] == "validation"
    assert main(["compare", "--store", str(store), "--json", "--n-boot", "50", "--source", "previous"]) == 0
    previous = json.loads(capsys.readouterr().out)

    client = MlflowClient(tracking_uri=ran["tracking_uri"])
    runs = client.search_runs([client.get_experiment_by_name("tiny-sweep").experiment_id], max_results=1000)
    parents = {r.data.tags["rc.pipeline"]: r for r in runs if r.data.tags["rc.level"] == "pipeline"}
    for row, other in zip(printed["pipelines"], previous["pipelines"]):
        logged = parents[row["pipeline"]]
        for metric in ("cql", "ql", "ql_scored"):
            assert logged.data.metrics[f"{metric}_mean"] == row[f"{metric}_mean"]   # exactly, not approximately
            assert logged.data.metrics[f"{metric}_std"] == row[f"{metric}_std"]
        assert row["cql_mean"] != other["cql_mean"]   # the two rules differ here: the check can tell them apart
        assert logged.data.tags["rc.calibration"] == "monthly periods, one pooled bias from each window's validation predictions"
        assert logged.data.tags["rc.label"] == "raw label: 10-minute forward return, bp"
    scores = score_store(store).runs.set_index(["pipeline", "seed"])
    seeds = [r for r in runs if r.data.tags["rc.level"] == "seed"]
    assert len(seeds) == 4
    for run in seeds:
        row = scores.loc[(run.data.tags["rc.pipeline"], int(run.data.params["seed"]))]
        assert run.data.metrics["cql"] == row["cql"] and run.data.metrics["n_scored"] == row["n_scored"]
