"""Every calibration option is reachable from the YAML and from the command line, built into one Calibration."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from rolling_calib.analysis.scoring import score_store
from rolling_calib.cli import main
from rolling_calib.cli.options import add_scoring_arguments, calibration_from_args
from rolling_calib.config.experiment import ConfigError, load_experiment, read_rolling
from rolling_calib.core.calibration import Calibration
from rolling_calib.core.resampling import Resampling
from runner_helpers import REPO, write_fake_store

ROLLING = {"initial_train_start": "2018-01", "start": "2018-03", "end": "2018-04", "step_months": 1, "seeds": 2}


def _yaml(tmp_path: Path, calibration: dict) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"rolling": {**ROLLING, "calibration": calibration}}))
    return path


def test_yaml_takes_every_option_and_checks_it(tmp_path):
    cal = read_rolling(_yaml(tmp_path, {"period": 5, "bias": "per_instrument", "bias_window": 3,
                                        "missing_instrument": "pooled"})).calibration
    assert cal == Calibration(period=5, bias="per_instrument", bias_window=3, missing_instrument="pooled")
    for bad, key in [({"bias_window": 0}, "bias_window"), ({"missing_instrument": "skip"}, "missing_instrument"),
                     ({"windows": 2}, "windows")]:
        path = _yaml(tmp_path, bad)
        with pytest.raises(ConfigError, match=f"^{path}: .*rolling.calibration.{key}"):
            read_rolling(path)
    path = _yaml(tmp_path, {"source": "validation", "bias_window": 2})
    with pytest.raises(ConfigError, match=rf"^{path}: rolling.calibration.bias_window: must be None with source='validation'"):
        read_rolling(path)


def test_set_reaches_the_options_a_file_leaves_at_their_defaults(tiny_data, tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"BASE_CONFIG_PATH": str(REPO / "workflows" / "base.yaml"),
                                    "qlib_init": {"provider_uri": {"1min": str(tiny_data)}}, "rolling": ROLLING}))
    cfg = load_experiment(path, overrides={"rolling.calibration.bias_window": 4,
                                           "rolling.calibration.missing_instrument": "pooled"})
    assert cfg.rolling.calibration == Calibration(bias_window=4, missing_instrument="pooled")
    assert cfg.to_dict()["rolling"]["calibration"] == {"period": "month", "bias": "pooled", "bias_window": 4,
                                                       "missing_instrument": "pooled"}


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_scoring_arguments(parser)
    return parser.parse_args(list(argv))


def test_command_line_options_change_the_recorded_rule():
    recorded = Calibration(period="week", bias_window=5)
    assert calibration_from_args(_args(), recorded) == recorded   # nothing given: the store's rule
    got = calibration_from_args(_args("--bias", "per_instrument", "--missing-instrument", "pooled",
                                      "--bias-window", "3", "--period", "20"), recorded)
    assert got == Calibration(period=20, bias="per_instrument", bias_window=3, missing_instrument="pooled")
    assert calibration_from_args(_args("--source", "validation", "--bias-window", "none"), recorded) == Calibration(
        period="week", source="validation")
    with pytest.raises(ValueError, match="bias_window: must be None with source='validation'"):
        calibration_from_args(_args("--source", "validation"), recorded)
    assert _args("--label", "learn").label == "learn"
    for bad in (["--bias-window", "0"], ["--missing-instrument", "skip"], ["--label", "both"]):
        with pytest.raises(SystemExit):
            _args(*bad)


def test_compare_scores_with_the_options_given(tmp_path, capsys):
    write_fake_store(tmp_path, pipelines={"a": {"bias_sd": 1.0}, "b": {"bias_sd": 0.5}}, seeds=3)
    argv = ["compare", "--store", str(tmp_path), "--json", "--n-boot", "50", "--bias", "per_instrument", "--bias-window", "3",
            "--missing-instrument", "pooled"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["period"], printed["bias"], printed["source"]) == ("month", "per_instrument", "previous")
    expected = score_store(tmp_path, calibration=Calibration(bias="per_instrument", bias_window=3,
                                                             missing_instrument="pooled")).runs
    assert [r["cql_mean"] for r in printed["pipelines"]] == [expected[expected.pipeline == p]["cql"].mean() for p in "ab"]
    default = score_store(tmp_path).runs
    assert printed["pipelines"][0]["cql_mean"] != default[default.pipeline == "a"]["cql"].mean()
    assert main(["metaeval", "--store", str(tmp_path), "--json", "--n-boot", "20", "--splits", "5", "--variants", "cql",
                 "--period", "week"]) == 0
    weekly = json.loads(capsys.readouterr().out)
    assert [m["metric"] for m in weekly["metrics"]] == ["ql", "cql"]
    # the variants change the base rule given: "cql" is then the weekly CQL, "cql_per_instrument" weekly per instrument
    from rolling_calib.analysis.metaeval import metaeval_store

    week = Calibration(period="week")
    runs = metaeval_store(tmp_path, calibration=week, variants=["cql", "cql_per_instrument"], n_splits=5, resampling=Resampling(n_boot=20)).runs
    assert runs["cql"].tolist() == score_store(tmp_path, calibration=week).runs["cql"].tolist()
    per = score_store(tmp_path, calibration=week.replace(bias="per_instrument")).runs["cql"].tolist()
    assert runs["cql_per_instrument"].tolist() == per
