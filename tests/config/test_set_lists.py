"""``--set`` into list items: ``task.record.2.kwargs...`` or ``task.record.PortAnaRecord.kwargs...``."""

from __future__ import annotations

import pytest

from rolling_calib.config.experiment import ConfigError, apply_overrides, load_experiment
from rolling_calib.config.overrides import parse_set

from runner_helpers import REPO

BENCH = REPO / "tests" / "config" / "qlib_format" / "workflow_config_lightgbm_Alpha158.yaml"
BENCHMARK_KEY = "kwargs.config.backtest.benchmark"


@pytest.fixture
def wrapper(tmp_path, tiny_data):
    path = tmp_path / "lgb.yaml"
    path.write_text(f"BASE_CONFIG_PATH: {BENCH}\n"
                    "rolling: {initial_train_start: 2018-01, start: 2018-03, end: 2018-04, step_months: 1, seeds: 1}\n")
    return path


def _load(wrapper, tiny_data, items):
    overrides = {"qlib_init.provider_uri": str(tiny_data), "task.dataset.kwargs.handler.kwargs.instruments": "all"}
    overrides.update(parse_set(items))
    return load_experiment(wrapper, overrides=overrides, check_store=False)


def test_a_record_is_named_by_its_index_or_its_class(wrapper, tiny_data):
    by_index = _load(wrapper, tiny_data, [f"task.record.2.{BENCHMARK_KEY}=AAPL"])
    by_name = _load(wrapper, tiny_data, [f"task.record.PortAnaRecord.{BENCHMARK_KEY}=MSFT"])
    for config, bench in ((by_index, "AAPL"), (by_name, "MSFT")):
        records = config.task["record"]
        assert [r["class"] for r in records] == ["SignalRecord", "SigAnaRecord", "PortAnaRecord"]
        assert records[2]["kwargs"]["config"]["backtest"]["benchmark"] == bench
        assert records[2]["kwargs"]["config"]["backtest"]["account"] == 100000000  # the rest kept as written


def test_an_index_outside_the_list_names_its_items(wrapper, tiny_data):
    with pytest.raises(ConfigError) as err:
        _load(wrapper, tiny_data, [f"task.record.3.{BENCHMARK_KEY}=AAPL"])
    assert ("unknown key 'task.record.3.kwargs.config.backtest.benchmark' ('task.record' is a list of 3 items, "
            "0..2: 0 SignalRecord, 1 SigAnaRecord, 2 PortAnaRecord)") in str(err.value)


def test_an_unknown_class_names_the_items(wrapper, tiny_data):
    with pytest.raises(ConfigError, match=r"no item has class PortRecord; it has 0 SignalRecord, 1 SigAnaRecord, "
                                          r"2 PortAnaRecord"):
        _load(wrapper, tiny_data, [f"task.record.PortRecord.{BENCHMARK_KEY}=AAPL"])


def test_lists_inside_kwargs_and_a_whole_item():
    cfg = {"task": {"dataset": {"kwargs": {"handler": {"kwargs": {"inst_processors": {"feature": [
        {"class": "Resample1minProcessor", "kwargs": {"hour": 14, "minute": 56}}]}}}}}}}
    out = apply_overrides(cfg, {"task.dataset.kwargs.handler.kwargs.inst_processors.feature.0.kwargs.hour": 15})
    assert out["task"]["dataset"]["kwargs"]["handler"]["kwargs"]["inst_processors"]["feature"][0]["kwargs"] == \
        {"hour": 15, "minute": 56}
    doubled = {"record": [{"class": "SigAnaRecord"}, {"class": "SigAnaRecord"}]}
    with pytest.raises(ConfigError, match="two or more items are SigAnaRecord: name one by its index"):
        apply_overrides(doubled, {"record.SigAnaRecord.kwargs": {}})
    assert apply_overrides(doubled, {"record.1": {"class": "SignalRecord"}})["record"][1] == {"class": "SignalRecord"}
    assert cfg["task"]["dataset"]["kwargs"]["handler"]["kwargs"]["inst_processors"]["feature"][0]["kwargs"]["hour"] == 14
