"""Experiment config: loading, overrides, and every kind of bad config failing before training."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rolling_calib.config.experiment import ConfigError, apply_overrides, load_experiment, read_rolling

from runner_helpers import REPO

WORKFLOWS = REPO / "workflows"


def _write(tmp_path: Path, data: dict, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _good(tiny_data: Path) -> dict:
    return {
        "BASE_CONFIG_PATH": str(WORKFLOWS / "base.yaml"),
        "qlib_init": {"provider_uri": {"1min": str(tiny_data)}},
        "rolling": {"initial_train_start": "2018-01", "start": "2018-03", "end": "2018-04", "step_months": 1, "seeds": 2},
        "pipelines": {"a": {}, "b": {"task.model.kwargs.weight_decay": 1.0e-4}},
        "compare": [["a", "b"]],
    }


def _load(tmp_path, data, **kw):
    return load_experiment(_write(tmp_path, data), **kw)


def test_good_config_loads_with_base_and_overrides(tiny_data, tmp_path):
    cfg = _load(tmp_path, _good(tiny_data))
    assert cfg.rolling.seeds == (0, 1) and cfg.rolling.step_months == 1 and cfg.rolling.start == "2018-03"
    assert list(cfg.pipelines) == ["a", "b"]  # the base file's pipelines are replaced, not merged
    assert cfg.pipeline_task("b")["model"]["kwargs"]["weight_decay"] == 1.0e-4
    assert cfg.pipeline_task("a")["model"]["kwargs"]["weight_decay"] == 0.0
    assert cfg.store_dir == tiny_data.resolve()
    assert cfg.compare == [("a", "b")]
    assert cfg.to_dict()["rolling"]["seeds"] == [0, 1]


def test_shipped_workflows_parse(tiny_data):
    over = {"qlib_init.provider_uri": str(tiny_data)}
    m33 = load_experiment(WORKFLOWS / "method33.yaml", overrides=over, check_store=False)
    assert len(m33.pipelines) == 24 and len(m33.compare) == 25
    assert m33.pipeline_task("l6")["model"]["kwargs"]["num_layers"] == 6
    assert m33.rolling.step_months == 6 and m33.rolling.seeds == tuple(range(10))
    demo = load_experiment(WORKFLOWS / "demo.yaml", overrides=over, check_store=False)
    assert list(demo.pipelines) == ["wd0", "wd1e-2"] and demo.rolling.seeds == tuple(range(10))
    real = load_experiment(WORKFLOWS / "real2018.yaml", overrides=over, check_store=False)
    assert real.rolling.calibration.period == "week"
    assert read_rolling(WORKFLOWS / "demo.yaml").end == "2018-06"


def test_apply_overrides_dotted_paths():
    cfg = {"task": {"model": {"kwargs": {"lr": 0.1}}}, "rolling": {"seeds": 3}}
    out = apply_overrides(cfg, {"task.model.kwargs.lr": 0.01, "task.model.kwargs.dropout": 0.1, "rolling.seeds": 5})
    assert out == {"task": {"model": {"kwargs": {"lr": 0.01, "dropout": 0.1}}}, "rolling": {"seeds": 5}}
    assert cfg["task"]["model"]["kwargs"] == {"lr": 0.1}  # input untouched
    with pytest.raises(ConfigError, match=r"unknown key 'task\.modle\.kwargs\.lr' \('task' has no 'modle'; it has: model\)"):
        apply_overrides(cfg, {"task.modle.kwargs.lr": 1})
    with pytest.raises(ConfigError, match=r"unknown key 'rolling\.seeds\.x' \('rolling\.seeds' is a int"):
        apply_overrides(cfg, {"rolling.seeds.x": 1})


def test_unknown_top_level_key(tiny_data, tmp_path):
    data = _good(tiny_data) | {"rollin": {}}
    with pytest.raises(ConfigError, match=r"exp\.yaml: unknown key 'rollin'"):
        _load(tmp_path, data)


def test_unknown_rolling_key(tiny_data, tmp_path):
    data = _good(tiny_data)
    data["rolling"]["step_month"] = 2
    with pytest.raises(ConfigError, match=r"unknown key 'rolling\.step_month'"):
        _load(tmp_path, data)


def test_unknown_model_kwarg_checked_against_the_class_signature(tiny_data, tmp_path):
    data = _good(tiny_data)
    data["pipelines"]["b"] = {"task.model.kwargs.wieght_decay": 1e-4}
    with pytest.raises(ConfigError, match=r"pipelines\.b -> task\.model\.kwargs\.wieght_decay: RollingLSTM has no such argument"):
        _load(tmp_path, data)


def test_unknown_handler_kwarg(tiny_data, tmp_path):
    data = _good(tiny_data)
    data["task"] = {"dataset": {"kwargs": {"handler": {"kwargs": {"label_horizn": 5}}}}}
    with pytest.raises(ConfigError, match=r"task\.dataset\.kwargs\.handler\.kwargs\.label_horizn: MinuteBarHandler has no such argument"):
        _load(tmp_path, data)


def test_unknown_override_path_in_pipeline(tiny_data, tmp_path):
    data = _good(tiny_data)
    data["pipelines"]["b"] = {"task.modle.kwargs.lr": 0.1}
    with pytest.raises(ConfigError, match=r"pipelines\.b: unknown key 'task\.modle\.kwargs\.lr'"):
        _load(tmp_path, data)


def test_wrong_type_in_rolling(tiny_data, tmp_path):
    data = _good(tiny_data)
    data["rolling"]["step_months"] = "six"
    with pytest.raises(ConfigError, match=r"rolling\.step_months: expected an integer in \[1, 1200\] \(months: a century\), found str 'six'"):
        _load(tmp_path, data)


def test_wrong_type_of_model_kwarg(tiny_data, tmp_path):
    data = _good(tiny_data)
    data["pipelines"]["b"] = {"task.model.kwargs.hidden_size": "big"}
    with pytest.raises(ConfigError, match=r"task\.model\.kwargs\.hidden_size: expected int .* found str 'big'"):
        _load(tmp_path, data)


def test_bad_choice(tiny_data, tmp_path):
    data = _good(tiny_data)
    data["rolling"]["calibration"] = {"period": "fortnight"}
    with pytest.raises(ConfigError, match=r"rolling\.calibration\.period: expected 'month', 'week'"):
        _load(tmp_path, data)


def test_calibration_period_quarter_validates(tiny_data, tmp_path):
    data = _good(tiny_data)
    data["rolling"]["calibration"] = {"period": "quarter"}
    cfg = _load(tmp_path, data)
    assert cfg.rolling.calibration.period == "quarter" and cfg.rolling.calibration.bias == "pooled"


def test_yaml_cli_and_metrics_accept_the_same_periods(tmp_path):
    """One table of calibration periods: the YAML, ``compare --period`` and the metric agree."""
    import argparse

    from rolling_calib.cli.options import add_scoring_arguments
    from rolling_calib.core.calibration import Calibration
    from rolling_calib.core.metrics import rolling_calibrated_quadratic_loss
    from rolling_calib.core.validation import CALIBRATION_PERIODS

    parser = argparse.ArgumentParser()
    add_scoring_arguments(parser)
    days = [f"{d:%Y-%m-%d}" for d in __import__("pandas").bdate_range("2015-01-01", "2015-12-31")]
    rolling = {"initial_train_start": "2014-01", "start": "2015-01", "end": "2015-06"}
    assert set(CALIBRATION_PERIODS) == {"month", "week", "quarter"}
    for period in [*CALIBRATION_PERIODS, 5]:
        path = _write(tmp_path, {"rolling": {**rolling, "calibration": {"period": period}}})
        assert read_rolling(path).calibration.period == period
        assert parser.parse_args(["--period", str(period)]).period == period
        rule = Calibration(period=period)
        assert rolling_calibrated_quadratic_loss([0.0] * len(days), [1.0] * len(days), days, calibration=rule).cql == 0.0
    for period in ("fortnight", 0):
        path = _write(tmp_path, {"rolling": {**rolling, "calibration": {"period": period}}})
        with pytest.raises(ConfigError, match=r"rolling\.calibration\.period: expected"):
            read_rolling(path)
        with pytest.raises(SystemExit):
            parser.parse_args(["--period", str(period)])
        with pytest.raises(ValueError, match=r"^period: expected"):
            Calibration(period=period)


def test_missing_data_directory(tiny_data, tmp_path):
    data = _good(tiny_data)
    data["qlib_init"]["provider_uri"] = {"1min": str(tmp_path / "nowhere")}
    with pytest.raises(ConfigError, match=r"qlib_init\.provider_uri: data directory not found: .*nowhere"):
        _load(tmp_path, data)


def test_dates_outside_the_store(tiny_data, tmp_path):
    data = _good(tiny_data)
    data["rolling"]["end"] = "2018-08"
    with pytest.raises(ConfigError, match=r"rolling\.end: 2018-08 ends after the store's last bar 2018-04-30 15:59"):
        _load(tmp_path, data)
    data = _good(tiny_data)
    data["rolling"]["initial_train_start"] = "2017-11"
    with pytest.raises(ConfigError, match=r"rolling\.initial_train_start: 2017-11 begins before the store's first bar"):
        _load(tmp_path, data)


def test_unknown_universe(tiny_data, tmp_path):
    data = _good(tiny_data)
    data["task"] = {"dataset": {"kwargs": {"handler": {"kwargs": {"instruments": "sp500"}}}}}
    with pytest.raises(ConfigError, match=r"instruments: universe 'sp500' not in the store"):
        _load(tmp_path, data)


def test_compare_names_unknown_pipeline(tiny_data, tmp_path):
    data = _good(tiny_data)
    data["compare"] = [["a", "zz"]]
    with pytest.raises(ConfigError, match=r"compare\[0\]: unknown pipeline 'zz'"):
        _load(tmp_path, data)


def test_missing_pipeline_file_and_base_file(tiny_data, tmp_path):
    data = _good(tiny_data)
    data["pipelines"] = ["pipelines/none.yaml"]
    with pytest.raises(ConfigError, match=r"pipelines\[0\]: pipeline file not found: .*none\.yaml"):
        _load(tmp_path, data)
    data = _good(tiny_data)
    data["BASE_CONFIG_PATH"] = "missing_base.yaml"
    with pytest.raises(ConfigError, match=r"BASE_CONFIG_PATH: file not found: .*missing_base\.yaml"):
        _load(tmp_path, data)


def test_yaml_syntax_error_names_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("rolling:\n  start: [2018-01\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\d+: invalid YAML"):
        load_experiment(path)


def test_run_command_reports_config_error_before_training(tiny_data, tmp_path, capsys):
    from rolling_calib.cli import main

    data = _good(tiny_data)
    data["rolling"]["mode"] = "warm"
    code = main(["run", str(_write(tmp_path, data)), "--store", str(tmp_path / "store"), "--no-tracking"])
    assert code == 2
    assert "rolling.mode: expected one of finetune, scratch, found 'warm'" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()


def test_yaml_is_read_as_qrun_reads_it(tmp_path):
    """ruamel's safe loader, as qrun: 1e-3 is a float, and a duplicated key is an error naming both lines."""
    from rolling_calib.config.experiment import load_yaml

    good = tmp_path / "good.yaml"
    good.write_text("task:\n  model:\n    kwargs:\n      lr: 1e-3\n      wd: 5.0e-6\n")
    assert load_yaml(good) == {"task": {"model": {"kwargs": {"lr": 0.001, "wd": 5e-6}}}}
    dup = tmp_path / "dup.yaml"
    dup.write_text("task:\n  model:\n    kwargs:\n      lr: 1e-3\n      lr: 2e-3\n")
    with pytest.raises(ConfigError, match=r"dup.yaml:5: duplicate key: \"lr\" .*\(first at line 4\)"):
        load_yaml(dup)


@pytest.mark.parametrize("override, message", [
    ({"task.model.kwargs.batch_size": 0}, r"pipelines\.b -> task\.model\.kwargs\.batch_size: expected an integer in \[1, 1048576\] \(samples per batch: memory grows with it\), found int 0"),
    ({"task.model.kwargs.lr": -0.01}, r"task\.model\.kwargs\.lr: expected a number > 0, found float -0\.01"),
    ({"task.model.kwargs.device": "cuda"}, r"task\.model\.kwargs\.device: expected a device name.*torch sees no GPU"),
])
def test_out_of_range_model_values_fail_before_any_training(tiny_data, tmp_path, override, message):
    """The model's declared constraints are checked when the YAML is loaded, not in the first unit."""
    import torch

    if "device" in str(override) and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    data = _good(tiny_data)
    data["pipelines"]["b"] = override
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, data)


def test_a_module_path_that_names_a_function_is_a_config_error(tiny_data, tmp_path):
    data = _good(tiny_data)
    data["task"] = {"model": {"class": "system", "module_path": "os", "kwargs": {}}}
    with pytest.raises(ConfigError, match=r"task\.model\.class: expected a class, found builtin_function_or_method os\.system"):
        _load(tmp_path, data)


def test_cli_run_exits_2_on_an_out_of_range_value(tiny_data, tmp_path, capsys):
    from rolling_calib.cli import main

    path = _write(tmp_path, _good(tiny_data))
    assert main(["run", str(path), "--store", str(tmp_path / "store"), "--no-tracking",
                 "--set", "task.model.kwargs.batch_size=0"]) == 2
    assert "task.model.kwargs.batch_size: expected an integer in [1, 1048576] (samples per batch: memory grows with it), found int 0" in capsys.readouterr().err
    assert not (tmp_path / "store").exists(), "nothing may be written before the config is valid"


def test_out_of_range_dataset_values_fail_before_any_training(tiny_data, tmp_path):
    data = _good(tiny_data)
    data["pipelines"]["b"] = {"task.dataset.kwargs.step_len": 0}
    with pytest.raises(ConfigError, match=r"task\.dataset\.kwargs\.step_len: expected an integer in \[1, 1000000\] \(bars: ten years of minute bars; memory grows with it\), found int 0"):
        _load(tmp_path, data)
    data["pipelines"]["b"] = {"task.dataset.kwargs.handler.kwargs.window": -5}
    with pytest.raises(ConfigError, match=r"handler\.kwargs\.window: expected an integer in \[1, 1000000\] \(bars: .*\), found int -5"):
        _load(tmp_path, data)


def test_calibration_source(tiny_data, tmp_path):
    data = _good(tiny_data)
    cfg = _load(tmp_path, data)
    assert cfg.rolling.calibration.source == "previous"
    assert "source" not in cfg.to_dict()["rolling"].get("calibration", {})   # the default is recorded as before
    data["rolling"]["calibration"] = {"source": "validation"}
    cfg = _load(tmp_path, data)
    assert cfg.rolling.calibration.source == "validation"
    assert cfg.to_dict()["rolling"]["calibration"]["source"] == "validation"
    data["rolling"]["calibration"] = {"source": "later"}
    with pytest.raises(ConfigError, match=r"rolling\.calibration\.source: expected 'previous' or 'validation'"):
        _load(tmp_path, data)
    data["rolling"]["calibration"] = {"source": "validation"}
    data["rolling"]["valid_months"] = 0
    with pytest.raises(ConfigError, match=r"source: 'validation' needs a validation segment"):
        _load(tmp_path, data)


def test_set_may_add_a_rolling_option_left_at_its_default_but_not_a_misspelt_one():
    from rolling_calib.config.experiment import apply_overrides
    from rolling_calib.core.validation import ConfigError

    assert apply_overrides({"rolling": {"seeds": 3}}, {"rolling.stack_seeds": 3})["rolling"]["stack_seeds"] == 3
    with pytest.raises(ConfigError, match="unknown key 'rolling.stak_seeds'"):
        apply_overrides({"rolling": {"seeds": 3}}, {"rolling.stak_seeds": 3})


def _with_learn_processors(tiny_data: Path, processors: list, key: str = "learn_processors") -> dict:
    data = _good(tiny_data)
    data["task"] = {"dataset": {"kwargs": {"handler": {"kwargs": {key: processors}}}}}
    return data


def test_learn_processors_are_qlibs_key_on_the_handler(tiny_data, tmp_path):
    rank = {"class": "CSRankNorm", "kwargs": {"fields_group": "label"}}
    cfg = _load(tmp_path, _with_learn_processors(tiny_data, ["DropnaLabel", rank]))
    assert cfg.pipeline_task("b")["dataset"]["kwargs"]["handler"]["kwargs"]["learn_processors"] == ["DropnaLabel", rank]


@pytest.mark.parametrize("processors, message", [
    (["CSRnkNorm"], r"found \[0\] 'CSRnkNorm', which Qlib cannot build \(AttributeError: module "
                    r"'qlib\.data\.dataset\.processor' has no attribute 'CSRnkNorm'\)"),
    ([{"class": "CSRankNorm", "module_path": "qlib.no_such_module"}], r"found \[0\] .*which Qlib cannot build \(ModuleNotFoundError"),
    (["DropnaLabel", {"class": "RobustZScoreNorm", "kwargs": {"fields_group": "feature", "fit_start_time": None,
                                                               "fit_end_time": None}}],
     r"found \[1\] RobustZScoreNorm with fields_group 'feature': a feature processor \(MinuteBarHandler normalises its "
     r"features itself, with its window norm fitted on fit_start_time\.\.fit_end_time\)"),
    ([{"class": "CSZScoreNorm"}], r"found \[0\] CSZScoreNorm with fields_group None acts on every column"),
    ("CSRankNorm", r"found str 'CSRankNorm'"),
])
def test_learn_processors_other_than_label_ones_fail_at_load(tiny_data, tmp_path, processors, message):
    with pytest.raises(ConfigError, match=r"exp\.yaml: task\.dataset\.kwargs\.handler\.kwargs\.learn_processors: expected "
                                          r"Qlib label processors \(fields_group 'label', nothing fitted.*" + message):
        _load(tmp_path, _with_learn_processors(tiny_data, processors))


def test_infer_processors_are_refused_at_load(tiny_data, tmp_path):
    data = _good(tiny_data)
    data["pipelines"]["b"] = {"task.dataset.kwargs.handler.kwargs.infer_processors": [
        {"class": "RobustZScoreNorm", "kwargs": {"fields_group": "feature", "clip_outlier": True}}, "Fillna"]}
    with pytest.raises(ConfigError, match=r"pipelines\.b -> task\.dataset\.kwargs\.handler\.kwargs\.infer_processors: "
                                          r"expected no processors .*found \[RobustZScoreNorm, Fillna\]"):
        _load(tmp_path, data)


def test_cli_run_exits_2_on_a_feature_learn_processor(tiny_data, tmp_path, capsys):
    from rolling_calib.cli import main

    data = _with_learn_processors(tiny_data, [{"class": "CSRankNorm", "kwargs": {"fields_group": "feature"}}])
    code = main(["run", str(_write(tmp_path, data)), "--store", str(tmp_path / "store"), "--no-tracking"])
    assert code == 2
    assert "learn_processors: expected Qlib label processors" in capsys.readouterr().err
    assert not (tmp_path / "store").exists(), "nothing may be written before the config is valid"


def test_demo_csrank_workflow_is_the_demo_on_rank_labels(tiny_data):
    over = {"qlib_init.provider_uri": str(tiny_data)}
    cfg = load_experiment(WORKFLOWS / "demo_csrank.yaml", overrides=over, check_store=False)
    demo = load_experiment(WORKFLOWS / "demo.yaml", overrides=over, check_store=False)
    assert list(cfg.pipelines) == list(demo.pipelines) and cfg.rolling.label == "auto"   # the learned label
    handler = cfg.pipeline_task("wd0")["dataset"]["kwargs"]["handler"]["kwargs"]
    assert handler["learn_processors"] == [{"class": "DropnaLabel"},
                                           {"class": "CSRankNorm", "kwargs": {"fields_group": "label"}}]
    assert {k: v for k, v in handler.items() if k != "learn_processors"} == \
        demo.pipeline_task("wd0")["dataset"]["kwargs"]["handler"]["kwargs"]
