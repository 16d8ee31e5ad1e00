"""Report (HTML + Markdown) and the compare/report commands on a synthetic store."""

from __future__ import annotations

import base64
import json
import re

import pytest

from rolling_calib.cli import main
from rolling_calib.analysis.comparison import compare_store
from rolling_calib.analysis.scoring import score_store
from rolling_calib.reporting.document import CAVEAT, write_report

from runner_helpers import write_fake_store

PIPES = {"calm": {"bias_sd": 0.2}, "wild": {"bias_sd": 2.0}}


@pytest.fixture(scope="module")
def fake_store(tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    write_fake_store(store, pipelines=PIPES, seeds=4)
    return store


def test_write_report_is_self_contained_and_holds_the_numbers(fake_store, tmp_path):
    scores = score_store(fake_store)
    comparison = compare_store(scores, n_boot=200)
    paths = write_report(scores, comparison, tmp_path / "rep")
    html = paths["html"].read_text()
    md = paths["markdown"].read_text()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(images) == 3
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    assert "<img" in html and 'src="http' not in html and "<script" not in html
    for name in ("spread.png", "bias.png", "monthly.png"):
        assert f"]({name})" in md and (tmp_path / "rep" / name).stat().st_size > 1000
    summary = comparison.summary.set_index("pipeline")
    for pipeline in PIPES:
        for column in ("ql_mean", "cql_mean", "cql_std"):
            value = f"{summary.loc[pipeline, column]:.4f}"
            assert value in html and value in md
    acc = comparison.pairs[0].accuracies["cql"]
    assert f"{acc.accuracy:.3f} [{acc.ci_low:.3f}, {acc.ci_high:.3f}]" in md
    assert "METHOD 4" in md and "METHOD 4" in html and CAVEAT.split(":")[0] in html
    assert paths["runs_csv"].read_text().startswith("pipeline,seed,ql,ql_scored,cql,n_all,n_scored")


def test_compare_command_json(fake_store, capsys):
    assert main(["compare", str(fake_store), "--json", "--n-boot", "100"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {p["pipeline"] for p in data["pipelines"]} == set(PIPES)
    assert data["pairs"][0]["better"] == "calm"
    assert set(data["pairs"][0]["accuracies"]) == {"ql", "ql_scored", "cql", "ic", "icir", "rank_ic"}


def test_compare_command_table_and_pipeline_filter(fake_store, capsys):
    assert main(["compare", str(fake_store), "--pipelines", "calm", "wild", "--period", "week", "--n-boot", "50"]) == 0
    out = capsys.readouterr().out
    assert "calibration: week" in out and "Acc CQL" in out


def test_compare_command_bad_store_is_a_clear_error(tmp_path, capsys):
    assert main(["compare", str(tmp_path)]) == 2
    assert "no manifest" in capsys.readouterr().err


def test_report_command_writes_files(fake_store, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["report", str(fake_store), "--out", str(out), "--n-boot", "50"]) == 0
    assert (out / "report.html").is_file() and (out / "report.md").is_file()
    assert str(out / "report.html") in capsys.readouterr().out


def test_report_says_whether_calibration_can_help(fake_store, tmp_path):
    """The report carries each pipeline's seed-variance verdict, the same text `diagnose` prints."""
    from rolling_calib.analysis.diagnostics import diagnose_store

    out = tmp_path / "r"
    assert main(["report", str(fake_store), "--out", str(out), "--n-boot", "50"]) == 0
    md = (out / "report.md").read_text()
    assert "## Can calibration help here?" in md
    for d in diagnose_store(fake_store).pipelines:
        assert f"- {d.pipeline}: {d.verdict}" in md
    assert "Can calibration help here?" in (out / "report.html").read_text()
