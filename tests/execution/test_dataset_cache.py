"""A window's data set built once per worker for its seeds: the same numbers as building it afresh (real Qlib, no mocks).

Each store is trained twice in this process (``LocalExecutor(workers=1)``): with the worker's
dataset cache off (``ROLLING_CALIB_DATASET_CACHE=0``: every unit builds its data set) and on (the
default: a window's second seed reuses the data set its first seed built). The prediction files
must be byte for byte the same, and the sidecars must say which units reused a data set.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from rolling_calib.config.experiment import load_experiment
from rolling_calib.execution.executors import LocalExecutor
from rolling_calib.execution.runner import plan_run, run_plan
from rolling_calib.qlib_adapter.dataset_cache import CACHE_ENV, DatasetCache, worker_cache

from daily_helpers import build_daily_store
from sweep_helpers import tiny_experiment
from zoo_helpers import FEATURES, GRU_TS, alpha158, experiment

pytestmark = pytest.mark.slow

LGB = {"class": "LGBModel", "module_path": "qlib.contrib.model.gbdt",
       "kwargs": {"loss": "mse", "learning_rate": 0.1, "num_leaves": 8, "num_boost_round": 20,
                  "early_stopping_rounds": 5, "num_threads": 1, "verbosity": -1,
                  "bagging_fraction": 0.7, "bagging_freq": 1}}   # bagging: the seeds differ


def _files(store: Path) -> dict[str, str]:
    return {str(p.relative_to(store)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((store / "units").rglob("w*.parquet"))}


def _datasets(store: Path) -> dict[str, str]:
    return {str(p.relative_to(store / "units")): json.loads(p.read_text())["timings"]["dataset"]
            for p in sorted((store / "units").rglob("w*.json"))}


def _fresh_then_cached(config_path: Path, root: Path, monkeypatch) -> tuple[Path, Path]:
    config = load_experiment(config_path)
    stores = root / "fresh", root / "cached"
    for store, size in zip(stores, ("0", "1")):
        monkeypatch.setenv(CACHE_ENV, size)
        worker_cache().clear()
        run_plan(plan_run(config, store=store, n_threads=1), executor=LocalExecutor(workers=1), progress=False)
    worker_cache().clear()
    return stores


@pytest.fixture(scope="module")
def daily_store(tmp_path_factory):
    return build_daily_store(tmp_path_factory.mktemp("daily") / "qlib_day")


@pytest.mark.parametrize("name, model, handler, dataset, kwargs", [
    ("lgb", LGB, alpha158(), "DatasetH", {}),                                          # Qlib's DatasetH
    ("gru_ts", GRU_TS, alpha158(columns=FEATURES), "TSDatasetH", {"step_len": 5}),     # Qlib's TSDatasetH, torch
])
def test_zoo_models_reuse_the_window_data_set_with_the_same_numbers(daily_store, tmp_path, monkeypatch, name,
                                                                    model, handler, dataset, kwargs):
    path = experiment(tmp_path, daily_store, model, name=name, handler=handler, dataset=dataset,
                      dataset_kwargs=kwargs, seeds=2)
    fresh, cached = _fresh_then_cached(path, tmp_path, monkeypatch)
    assert _files(cached) == _files(fresh) and len(_files(fresh)) >= 4     # test and valid files of 2 seeds
    assert _datasets(fresh) == {f"{name}/seed0/w00.json": "built", f"{name}/seed1/w00.json": "built"}
    assert _datasets(cached) == {f"{name}/seed0/w00.json": "built", f"{name}/seed1/w00.json": "reused"}
    seed0, seed1 = (f"{name}/seed{s}/w00.parquet" for s in (0, 1))
    assert _files(fresh)[f"units/{seed0}"] != _files(fresh)[f"units/{seed1}"]      # the seeds do differ


def test_our_lstm_reuses_the_window_data_set_with_the_same_numbers(tmp_path, monkeypatch):
    fresh, cached = _fresh_then_cached(tiny_experiment(tmp_path / "tiny", seeds=2), tmp_path, monkeypatch)
    assert _files(cached) == _files(fresh) and len(_files(fresh)) == 8            # 2 seeds x 2 windows, + valid
    assert set(_datasets(fresh).values()) == {"built"}
    assert _datasets(cached) == {f"base/seed{s}/w{w:02d}.json": "reused" if s else "built"
                                 for s in (0, 1) for w in (0, 1)}


def test_the_cache_keeps_only_shareable_data_sets_and_keys_on_the_data():
    spec = {"class": "DatasetH", "module_path": "qlib.data.dataset", "kwargs": {"handler": {}}}
    tra = {"class": "MTSDatasetH", "module_path": "qlib.contrib.data.dataset", "kwargs": {}}
    assert DatasetCache.shareable(spec) and not DatasetCache.shareable(tra)   # TRA's dataset keeps a memory
    assert DatasetCache.shareable({"class": "MinuteTSDataset", "module_path": "rolling_calib.dataset"})  # old path
    tabnet = {"class": "TabnetModel", "module_path": "qlib.contrib.model.pytorch_tabnet"}
    assert not DatasetCache.shareable(spec, tabnet)                           # it fills its frames in place
    a = DatasetCache.key(spec, qlib_init={"provider_uri": "/d"}, data={"features": "1"})
    assert a != DatasetCache.key(spec, qlib_init={"provider_uri": "/d"}, data={"features": "2"})
    assert a != DatasetCache.key(spec, qlib_init={"provider_uri": "/e"}, data={"features": "1"})
    with pytest.raises(ValueError, match="size"):
        DatasetCache(size=-1)
