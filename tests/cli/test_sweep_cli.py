"""``rolling-calib sweep`` end to end on a tiny real experiment (Qlib store, LSTM, runner, local pool)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sweep_helpers import tiny_experiment

from rolling_calib.cli import build_parser, main
from rolling_calib.analysis.scoring import score_store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """One sweep (2 grid points x 2 seeds x 2 windows) shared by the module's tests."""
    root = tmp_path_factory.mktemp("sweep")
    config = tiny_experiment(root)
    store, out = root / "store", root / "report"
    argv = ["sweep", str(config), "--grid", "hidden_size=4,8", "--seeds", "2", "--store", str(store),
            "--out", str(out), "--workers", "2", "--n-boot", "300", "--json", "--no-progress"]
    return {"root": root, "config": config, "store": store, "out": out, "argv": argv}


def run_json(argv, capsys) -> tuple[int, dict | None]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if code == 0 else None)


def test_sweep_json_ranks_every_grid_point_and_writes_report(swept, capsys):
    code, payload = run_json(swept["argv"], capsys)
    assert code == 0
    names = {"hidden_size=4", "hidden_size=8"}
    assert {row["pipeline"] for row in payload["ranking"]} == names
    assert payload["run"]["units_ran"] == 2 * 2 * 2
    # the ranking is the runner's scores, ranked
    runs = score_store(swept["store"]).runs
    for row in payload["ranking"]:
        mine = runs[runs["pipeline"] == row["pipeline"]]
        assert row["cql_mean"] == pytest.approx(mine["cql"].mean(), rel=1e-12)
        assert row["ql_mean"] == pytest.approx(mine["ql"].mean(), rel=1e-12)
        assert row["n_runs"] == 2
    for metric in ("cql", "ql"):
        matrix = payload["matrices"][metric]
        assert set(matrix["names"]) == names and matrix["n_boot"] == 300
        acc = np.array([[np.nan if v is None else v for v in r] for r in matrix["accuracy"]])
        assert acc[0, 1] + acc[1, 0] == pytest.approx(1.0)
        assert (swept["out"] / f"pairwise_{metric}.png").stat().st_size > 1000
        assert metric in payload["indistinguishable"]
    assert [b["metric"] for b in payload["runs_to_separate"]] == ["cql", "ql"]
    md = (swept["out"] / "sweep.md").read_text()
    assert "## Ranking" in md and "Pairwise accuracy by cql" in md and "## Seeds to decide the top two by ql" in md
    assert "| metric   | verdict " in md and "seeds to decide |" in md     # a Markdown table in sweep.md
    assert json.loads((swept["out"] / "sweep.json").read_text())["ranking"] == payload["ranking"]
    # tracked by default: one MLflow parent run per grid point, in the YAML's experiment
    from mlflow.tracking import MlflowClient

    assert payload["tracking_uri"] == f"sqlite:///{swept['store'].resolve()}/mlflow.db"
    client = MlflowClient(tracking_uri=payload["tracking_uri"])
    experiment = client.get_experiment_by_name("tiny-sweep")
    parents = client.search_runs([experiment.experiment_id], filter_string="tags.`rc.level` = 'pipeline'")
    assert {r.data.tags["rc.pipeline"] for r in parents} == names


def test_rerun_resumes_with_the_same_numbers(swept, capsys):
    first = json.loads((swept["out"] / "sweep.json").read_text())
    code, payload = run_json([*swept["argv"], "--no-tracking"], capsys)
    assert code == 0
    assert payload["run"]["units_ran"] == 0 and payload["run"]["units_skipped"] == 8
    assert payload["ranking"] == first["ranking"] and payload["matrices"] == first["matrices"]


def test_table_output(swept, capsys):
    argv = [a for a in swept["argv"] if a != "--json"] + ["--no-tracking"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "pipeline" in out and "cql_rank" in out and "hidden_size=4" in out and "report:" in out
    assert "| pipeline" not in out                      # text tables in the terminal, Markdown in sweep.md
    assert "Model confidence set by cql" in out


def test_bad_grid_is_a_clear_error(swept, capsys):
    argv = ["sweep", str(swept["config"]), "--grid", "hiden_size=4,8", "--store", str(swept["root"] / "bad")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--grid hiden_size" in err and "unknown key" in err
    assert not (swept["root"] / "bad").exists()
    assert main(["sweep", str(swept["config"]), "--grid", "hidden_size=x", "--store", str(swept["root"] / "bad")]) == 2
    assert "hidden_size" in capsys.readouterr().err  # RollingLSTM's type check, before any training


def test_help_reads_well(capsys):
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["sweep", "--help"])
    text = capsys.readouterr().out
    for option in ("--grid", "--seeds", "--executor", "--address", "--workers", "--out", "--json", "--tracking-uri"):
        assert option in text


def test_runs_table_is_consistent_with_pairwise_counts(swept):
    runs = score_store(swept["store"]).runs
    payload = json.loads((swept["out"] / "sweep.json").read_text())
    m = payload["matrices"]["cql"]
    a, b = m["names"]
    x = runs.loc[runs.pipeline == a, "cql"].to_numpy()
    y = runs.loc[runs.pipeline == b, "cql"].to_numpy()
    wins = (x[:, None] < y[None, :]).mean() + 0.5 * (x[:, None] == y[None, :]).mean()
    assert m["accuracy"][0][1] == pytest.approx(wins)
    assert isinstance(runs, pd.DataFrame)
