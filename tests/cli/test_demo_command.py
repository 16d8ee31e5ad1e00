"""The demo command end to end at tiny size: data generated, 2 workers, comparison printed, report written."""

from __future__ import annotations

import json

import pytest
import yaml

from rolling_calib.cli import main
from rolling_calib.core.tables import sig

from runner_helpers import REPO

pytestmark = pytest.mark.slow


def _tiny_demo_config(tmp_path):
    """workflows/demo.yaml shrunk: 4 months of data, 2 one-month windows, a 4-unit LSTM."""
    doc = {
        "BASE_CONFIG_PATH": str(REPO / "workflows" / "demo.yaml"),
        "task": {
            "model": {"kwargs": {"hidden_size": 4, "n_epochs": 1}},
            "dataset": {"kwargs": {"step_len": 10, "sample_stride": 120, "test_stride": 60,
                                   "handler": {"kwargs": {"window": 10, "norm_samples": 3000}}}},
        },
        "rolling": {"initial_train_start": "2018-01", "start": "2018-03", "end": "2018-04", "step_months": 1},
    }
    path = tmp_path / "tiny_demo.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_demo_generates_data_runs_two_workers_and_reports(tmp_path, capsys):
    config = _tiny_demo_config(tmp_path)
    out = tmp_path / "demo_out"
    args = ["demo", "--out", str(out), "--seeds", "2", "--workers", "2", "--config", str(config), "--n-boot", "100"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "(generated)" in text and "wall time:" in text
    assert "Acc CQL" in text and "wd0" in text and "wd1e-2" in text
    assert "Can calibration help here?" in text and "CQL's seed std is" in text  # the assessment, per pipeline
    assert (out / "qlib_data" / "calendars" / "1min.txt").read_text().startswith("2018-01-02 09:30:00")
    html = (out / "report" / "report.html").read_text()
    assert html.index("<h1>") < html.index("<table") < html.index("<h2>Losses per pipeline")   # opens with the verdicts
    assert "docs/method.md §4" in html and html.count("data:image/png;base64,") == 6
    assert str(out) not in html and (out / "report" / "verdicts.csv").is_file()
    sidecars = sorted((out / "store" / "units").rglob("w*.json"))
    assert len(sidecars) == 8
    assert len({json.loads(p.read_text())["pid"] for p in sidecars}) >= 2  # really ran on a process pool

    # second call: data and units are reused, the numbers are the same
    assert main(args[:-2] + ["--n-boot", "100", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert {p["pipeline"] for p in again["pipelines"]} == {"wd0", "wd1e-2"}
    for row in again["pipelines"]:
        assert sig(row["cql_mean"]) in text


def test_demo_help_reads_well(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    out = capsys.readouterr().out
    assert "--workers" in out and "--seeds" in out and "synthetic" in out
