"""The demo command end to end at tiny size: data generated, 2 workers, comparison printed, report written."""

from __future__ import annotations

import json

import pytest
import yaml

from rolling_calib.cli import main
from rolling_calib.core.tables import sig
from rolling_calib.core.resampling import Resampling

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
    assert text.index("Verdicts at 95%") < text.index("Can calibration help here?")   # the answer first
    assert "wd0" in text and "wd1e-2" in text
    assert "Can calibration help here?" in text and "std CQL / QL 2..K [95%]" in text  # the assessment: a table
    assert "needs 3 seeds" in text   # 2 seeds: no statement on the offsets' persistence
    assert "CQL's seed std is" not in text and "INFO" not in text   # the sentences are in the report
    assert (out / "qlib_data" / "calendars" / "1min.txt").read_text().startswith("2018-01-02 09:30:00")
    html = (out / "report" / "report.html").read_text()
    assert html.index("<h1>") < html.index("<table") < html.index("<h2>Losses per pipeline")   # opens with the verdicts
    assert "docs/method.md §4" in html and html.count("data:image/png;base64,") == 7   # with the "when" figure
    assert str(out) not in html and (out / "report" / "verdicts.csv").is_file()
    sidecars = sorted((out / "store" / "units").rglob("w*.json"))
    assert len(sidecars) == 8
    assert len({json.loads(p.read_text())["pid"] for p in sidecars}) >= 2  # really ran on a process pool

    # second call: data and units are reused, the numbers are the same
    assert main(args[:-2] + ["--n-boot", "100", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert {p["pipeline"] for p in again["pipelines"]} == {"wd0", "wd1e-2"}
    for pair in again["pairs"]:
        assert sig(pair["verdicts"]["ql"]["difference"]) in text       # the same verdicts, the units reused
    assert [c["name"] for c in again["cases"]] == ["custom"]


def test_demo_help_reads_well(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    out = capsys.readouterr().out
    assert "--workers" in out and "--seeds" in out and "synthetic" in out


@pytest.mark.slow
def test_the_two_cases_name_the_scale_mismatch_and_rescore_the_learned_label(tmp_path):
    """Case 2 trains on CSRankNorm labels: scored raw, the guard fires; re-scored learned (no retraining), it does not."""
    from rolling_calib.experiment.demo import DemoCase, run_demo

    tiny = _tiny_demo_config(tmp_path)
    doc = yaml.safe_load(tiny.read_text())
    doc["task"]["dataset"]["kwargs"]["handler"]["kwargs"]["learn_processors"] = [
        {"class": "DropnaLabel"}, {"class": "CSRankNorm", "kwargs": {"fields_group": "label"}}]
    rank = tmp_path / "tiny_rank.yaml"
    rank.write_text(yaml.safe_dump(doc))
    cases = (DemoCase("raw_label", "case 1", tiny, "store", "report"),
             DemoCase("normalised_label", "case 2", rank, "store_csrank", "report_csrank"))
    result = run_demo(tmp_path / "out", workers=1, seeds=2, cases=cases, progress=False, track=False, resampling=Resampling(n_boot=100))
    first, second = result.cases
    kinds = [{w.kind for w in c.comparison.warnings} for c in result.cases]
    assert "scale_mismatch" not in kinds[0] and "scale_mismatch" not in kinds[1]   # label auto: the learned label
    assert first.learned is None and first.raw is None   # learned == raw: nothing to re-score
    assert second.comparison.label.kind == "learn" and second.learned is second.comparison
    assert second.raw is not None and "scale_mismatch" in {w.kind for w in second.raw.warnings}
    html = (tmp_path / "out" / "report_csrank" / "report.html").read_text()
    assert "<h1>case 2 (learned label, normalised)</h1>" in html      # the report carries the learned-label verdicts
    assert "<h1>case 1 (raw label, bp)</h1>" in (tmp_path / "out" / "report" / "report.html").read_text()
