"""``--set`` through a Qlib YAML's anchors (issue 36): an anchored value reaches every alias of it, as an edit of the
anchor in the file would; lists are values too."""

from __future__ import annotations

from pathlib import Path

import pytest

from rolling_calib.config.experiment import apply_overrides, load_experiment
from rolling_calib.config.overrides import parse_set
from rolling_calib.config.qrun_yaml import alias_paths, load_yaml_aliases

LIGHTGBM = Path(__file__).resolve().parent / "qlib_format" / "workflow_config_lightgbm_Alpha158.yaml"
ROLLING = {"rolling.initial_train_start": "2013-06", "rolling.start": "2015-01", "rolling.end": "2015-02"}


def test_the_aliases_of_qlibs_lightgbm_file():
    _, aliases = load_yaml_aliases(LIGHTGBM)
    assert aliases[("benchmark",)] == [("port_analysis_config", "backtest", "benchmark")]
    assert aliases[("market",)] == [("data_handler_config", "instruments")]
    assert aliases[("port_analysis_config",)] == [("task", "record", 2, "kwargs", "config")]
    assert aliases[("data_handler_config",)] == [("task", "dataset", "kwargs", "handler", "kwargs")]


def test_set_reaches_the_backtest_and_the_universe_through_the_anchors(tiny_data):
    overrides = parse_set(["benchmark=AAPL", "port_analysis_config.strategy.kwargs.topk=5", "market=all",
                           f"qlib_init.provider_uri={tiny_data}"])
    config = load_experiment(LIGHTGBM, overrides={**overrides, **ROLLING}, check_store=False)
    port = config.task["record"][2]["kwargs"]["config"]
    assert port["backtest"]["benchmark"] == "AAPL" and port["strategy"]["kwargs"] == {"signal": "<PRED>", "topk": 5,
                                                                                      "n_drop": 5}
    assert config.task["dataset"]["kwargs"]["handler"]["kwargs"]["instruments"] == "all"
    # messages name the key the user writes: the record's benchmark is the anchor `benchmark`
    assert config.anchor_of("task.record.2.kwargs.config.backtest.benchmark") == "benchmark"
    assert config.anchor_of("task.record.2.kwargs.config.strategy.kwargs") == "port_analysis_config.strategy.kwargs"
    assert config.anchor_of("task.model.kwargs") is None


def test_an_alias_written_over_by_a_merge_keeps_its_own_value():
    text = "h: &h {a: 1, b: 2}\ntask: {x: {<<: *h, b: 9}}\n"
    aliases = alias_paths(text)
    assert aliases == {("h", "a"): [("task", "x", "a")]}   # b is the merging mapping's own
    cfg = {"h": {"a": 1, "b": 2}, "task": {"x": {"a": 1, "b": 9}}}
    out = apply_overrides(cfg, {"h.a": 5, "h.b": 7}, aliases=aliases)
    assert out["task"]["x"] == {"a": 5, "b": 9} and out["h"] == {"a": 5, "b": 7}


def test_set_takes_lists_and_refuses_mappings():
    assert parse_set(["benchmark=[AAPL, MSFT]", "rolling.seeds=[0, 3]"]) == {"benchmark": ["AAPL", "MSFT"],
                                                                             "rolling.seeds": [0, 3]}
    with pytest.raises(ValueError, match=r"--set 'task=\{a: 1\}': expected a scalar or a list of scalars"):
        parse_set(["task={a: 1}"])
