"""Every numeric option and config value has an upper bound, checked at parse time and named (issue 30 item 4),
YAML alias expansion and document size are limited at read, and step_len is checked against the window at plan time."""

from __future__ import annotations

import argparse

import pytest

from rolling_calib.cli import build_parser, main
from rolling_calib.config.experiment import ConfigError, load_experiment
from rolling_calib.config.qrun_yaml import MAX_DOCUMENT_BYTES, load_yaml, parse_scalar
from rolling_calib.simulation.synthetic_experiments import run_linear_experiment
from rolling_calib.execution.factory import ExecutorOptions

from runner_helpers import REPO

DEMO = REPO / "workflows" / "demo.yaml"
TINY = ["rolling.initial_train_start=2018-01", "rolling.start=2018-03", "rolling.end=2018-04",
        "rolling.step_months=1", "rolling.seeds=1"]


def _overrides(tiny_data, *extra: str) -> dict:
    pairs = [f"qlib_init.provider_uri={tiny_data}", *TINY, *extra]
    return {key: parse_scalar(value) for key, value in (p.split("=", 1) for p in pairs)}


@pytest.mark.parametrize(("key", "value", "bound"), [
    ("task.model.kwargs.hidden_size", "100000000", "[1, 16384]"),
    ("task.model.kwargs.num_layers", "100000", "[1, 256]"),
    ("task.model.kwargs.n_epochs", "1000000000", "[0, 10000]"),
    ("task.model.kwargs.finetune_epochs", "1000000000", "[0, 10000]"),
    ("task.model.kwargs.early_stop", "1000000000", "[0, 10000]"),
    ("task.model.kwargs.batch_size", "100000000000", "[1, 1048576]"),
    ("task.model.kwargs.seed", "100000000000", "below 2**32"),
    ("task.model.kwargs.n_threads", "100000", "[1, 1024]"),
    ("task.dataset.kwargs.step_len", "100000000", "[1, 1000000]"),
    ("task.dataset.kwargs.sample_stride", "100000000", "[1, 1000000]"),
    ("task.dataset.kwargs.handler.kwargs.window", "100000000", "[1, 1000000]"),
    ("task.dataset.kwargs.handler.kwargs.norm_samples", "100000000", "[1, 1000000]"),
    ("task.dataset.kwargs.handler.kwargs.label_horizon", "100000000", "[1, 1000000]"),
    ("rolling.step_months", "100000", "[1, 1200]"),
    ("rolling.valid_months", "100000", "[0, 1200]"),
    ("rolling.stack_seeds", "100000", "[1, 10000]"),
    ("rolling.calibration.period", "100000000", "at most 5040"),
    ("rolling.calibration.bias_window", "100000000", "at most 5040"),
    ("rolling.seeds", "100000000", "at most 10000"),
])
def test_config_values_beyond_their_bound_are_refused_naming_key_and_bound(key, value, bound, tiny_data):
    with pytest.raises(ConfigError) as info:
        load_experiment(DEMO, overrides=_overrides(tiny_data, f"{key}={value}"), check_store=False)
    message = str(info.value)
    assert key.split(".")[-1] in message and bound in message and value in message, message
    assert "\n" not in message


@pytest.mark.parametrize(("argv", "bound"), [
    (["run", "w.yaml", "--store", "s", "--workers", "100000"], "[1, 1024]"),
    (["run", "w.yaml", "--store", "s", "--threads", "100000"], "[1, 1024]"),
    (["run", "w.yaml", "--store", "s", "--max-retries", "100000"], "[0, 100]"),
    (["run", "w.yaml", "--store", "s", "--gpus-per-unit", "1e9"], "[0, 64]"),
    (["run", "w.yaml", "--store", "s", "--gpus-per-unit", "nan"], "[0, 64]"),
    (["run", "w.yaml", "--store", "s", "--seeds", "1000000000"], "[1, 10000]"),
    (["compare", "--store", "s", "--period", "100000000"], "at most 5040"),
    (["compare", "--store", "s", "--bias-window", "100000000"], "at most 5040"),
    (["metaeval", "--store", "s", "--splits", "1000000000"], "[1, 100000]"),
    (["metaeval", "--store", "s", "--split-seed", "100000000000"], "below 2**32"),
    (["data", "synth", "--out", "d", "--seed", "100000000000"], "[0, 4294967295]"),
    (["data", "ingest", "x.csv", "--out", "d", "--stale-minutes", "100000000"], "[2, 100000]"),
    (["data", "ingest", "x.csv", "--out", "d", "--max-jump", "1e300"], "(1, 1000]"),
    (["data", "ingest", "x.csv", "--out", "d", "--max-spike", "inf"], "(1, 1000]"),
    (["synthetic", "linear", "--rounds", "1000000000"], "[1, 1000000]"),
    (["synthetic", "linear", "--n-train", "1000000000000"], "[1, 10000000]"),
    (["synthetic", "linear", "--dims", "1000000000"], "[1, 10000]"),
])
def test_options_beyond_their_bound_are_refused_at_parse_time(argv, bound, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert bound in err and "error: argument" in err, err
    assert list(tmp_path.iterdir()) == []


def test_executor_options_bounded_in_the_library_too():
    for kwargs in ({"workers": 10**6}, {"threads": 10**6}, {"max_retries": 10**6}, {"gpus_per_unit": 1e9}):
        with pytest.raises(ValueError, match=r"expected (an integer|a number) in \["):
            ExecutorOptions(**kwargs)


def test_synthetic_experiment_memory_product_is_bounded_before_drawing():
    with pytest.raises(ValueError, match=r"one round's arrays need .* GiB, expected at most 4 GiB"):
        run_linear_experiment(rounds=1, runs=100_000, dims=10_000, features_b=10, n_train=10_000_000)


def test_an_alias_bomb_under_model_kwargs_is_refused_in_one_line(tmp_path):
    lines = ["task:", "  model:", "    kwargs:", "      a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"      a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=r"bomb\.yaml: task\.model\.kwargs\.a\d: expected at most 100000 values "
                                          r"with every alias expanded") as info:
        load_yaml(path, template=True)
    assert "\n" not in str(info.value)


def test_a_document_too_large_or_too_deep_is_refused(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * (MAX_DOCUMENT_BYTES + 1) + "\n")
    with pytest.raises(ConfigError, match=r"big\.yaml: expected a workflow file of at most 1048576 bytes"):
        load_yaml(big)
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 100 + "]" * 100 + "\n")
    with pytest.raises(ConfigError, match=r"deep\.yaml: a(\.0)+: expected at most 64 nesting levels"):
        load_yaml(deep)
    deeper = tmp_path / "deeper.yaml"
    deeper.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match=r"deeper\.yaml"):
        load_yaml(deeper)


def test_the_duplicate_key_error_names_the_first_occurrence_not_the_mapping(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("a: 1\ntask:\n  z: 0\n  x: 1\n  y: 2\n  x: 3\n")
    with pytest.raises(ConfigError, match=r"dup\.yaml:6: duplicate key: \"x\" .*\(first at line 4\)"):
        load_yaml(path)


def test_step_len_longer_than_the_window_is_refused_at_plan_time(tiny_data, tmp_path, capsys):
    store = tmp_path / "store"
    argv = ["run", str(DEMO), "--store", str(store), "--no-tracking"]
    for pair in [f"qlib_init.provider_uri={tiny_data}", *TINY, "task.dataset.kwargs.step_len=5000"]:
        argv += ["--set", pair]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("rolling-calib run: error: ") and len([e for e in err if "error" in e]) == 1
    assert ("task.dataset.kwargs.step_len: expected at most the handler's window 30" in err[-1]
            and "found 5000" in err[-1]), err
    assert not store.exists()
