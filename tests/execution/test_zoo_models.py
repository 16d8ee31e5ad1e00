"""Qlib's model zoo through the rolling schedule: a representative handful, tiny, on a real daily store.

Each experiment names the same Qlib classes as a benchmark workflow of ``examples/benchmarks`` (written
here, small): GRU on ``TSDatasetH`` + Alpha158 (a ``_ts`` model: ``predict(dataset)`` without a
segment), TabNet with its pretraining segments, LightGBM with ``subsample``/``colsample_bytree`` and
2 seeds, XGBoost and CatBoost (seed and thread arguments of their libraries), Qlib's MLP (the
compatibility class), GATs (a base LSTM pretrained per unit), a plain ``DataHandlerLP``. The qrun
comparison of GRU is in ``test_zoo_qrun.py``; refusals before training in ``test_zoo_refusals.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from daily_helpers import SYMBOLS, build_daily_store
from rolling_calib.execution import store as st
from rolling_calib.execution.reader import read_unit
from rolling_calib.execution.executors import UnitKey
from rolling_calib.execution.runner import unit_task
from runner_helpers import REPO
from zoo_helpers import FEATURES, SEGMENTS, alpha158, experiment, gru_experiment, run

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def daily(tmp_path_factory) -> Path:
    return build_daily_store(tmp_path_factory.mktemp("zoo_daily") / "qlib_day")


# --------------------------------------------------------------------------- GRU on TSDatasetH (a _ts model)
def test_gru_on_tsdataseth_predicts_through_predict_dataset(tmp_path, daily):
    # on a pool worker (a fresh process, as `run --workers 2` uses): in this process an earlier test's qlib.init
    # may have set Qlib's loggers (level, stream), and the log-file check below would depend on the test order
    from rolling_calib.config import load_experiment
    from rolling_calib.execution.executors import LocalExecutor
    from rolling_calib.execution.runner import plan_run, run_plan

    plan = plan_run(load_experiment(gru_experiment(tmp_path, daily)), store=tmp_path / "store")
    summary = run_plan(plan, executor=LocalExecutor(workers=2), progress=False)
    assert summary.ran == 1
    key = UnitKey("gru_ts", 0, 0)
    frame = read_unit(plan.store, key)
    assert set(frame["instrument"]) == set(SYMBOLS) and np.isfinite(frame["prediction"]).all()
    assert frame["prediction"].std() > 0
    side = st.read_sidecar(plan.store, key)
    assert side["seed_param"] == "seed" and side["seeds"]["model_kwarg"] == 0
    # torch threads and the DataLoader's worker processes (n_jobs 20 in the workflow) follow --threads
    assert side["threads"] == {"torch": 1, "n_jobs": 1}
    assert side["valid_rows"] > 0  # the valid segment predicted through predict(view whose test is valid)
    log = plan.store / side["log"]
    assert log.is_file() and "GRU" in log.read_text()  # Qlib's training log went to the unit's log file
    assert not list(st.unit_paths(plan.store, key).checkpoint.parent.glob(".*.tmp"))  # fit's scratch file removed


# --------------------------------------------------------------------------- LightGBM: 2 seeds, the workflow's own seed, logs
LGB = {"class": "LGBModel", "module_path": "qlib.contrib.model.gbdt",
       "kwargs": {"loss": "mse", "colsample_bytree": 0.8879, "subsample": 0.8789, "learning_rate": 0.2,
                  "num_leaves": 8, "num_boost_round": 20, "num_threads": 20, "seed": 7}}


def test_lightgbm_two_seeds_give_two_runs_and_its_output_goes_to_the_unit_log(tmp_path, daily):
    path = experiment(tmp_path, daily, LGB, name="lgb", seeds=2)
    store = tmp_path / "store"
    proc = subprocess.run([sys.executable, "-m", "rolling_calib.cli", "run", str(path), "--store", str(store),
                           "--no-tracking", "--json"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    # the workflow's own seed (7) is seed 0 of the rolling seeds: 7, 8 -- and the run says so
    assert any("seed 0 of the rolling seeds: 7, 8" in note for note in summary["notes"])
    a, b = (read_unit(store, UnitKey("lgb", seed, 0)) for seed in (7, 8))
    assert a[["datetime", "instrument"]].equals(b[["datetime", "instrument"]])
    assert not np.array_equal(a["prediction"].to_numpy(), b["prediction"].to_numpy())  # seed-dependent (colsample)
    for seed in (7, 8):
        side = st.read_sidecar(store, UnitKey("lgb", seed, 0))
        assert side["seed_param"] == "seed" and side["seeds"]["model_kwarg"] == seed
        assert side["threads"] == {"torch": 1, "num_threads": 1}  # the workflow's 20 threads follow --threads
        log = (store / side["log"]).read_text()
        assert "valid's l2" in log  # LightGBM's evaluation lines are in the unit's log ...
    assert "valid's l2" not in proc.stderr  # ... not on the console


# --------------------------------------------------------------------------- TabNet: its pretraining segments
TABNET = {"class": "TabnetModel", "module_path": "qlib.contrib.model.pytorch_tabnet",
          "kwargs": {"d_feat": 158, "pretrain": True, "seed": 993, "n_d": 4, "n_a": 4, "n_steps": 2, "n_epochs": 1,
                     "pretrain_n_epochs": 1, "batch_size": 128, "vbs": 64, "early_stop": 2}}


def test_tabnet_pretrains_on_its_extra_segments_which_follow_train_and_valid(tmp_path, daily):
    segments = {"pretrain": SEGMENTS["train"], "pretrain_validation": SEGMENTS["valid"], **SEGMENTS}
    path = experiment(tmp_path, daily, TABNET, name="tabnet", segments=segments)
    plan, summary = run(path, tmp_path / "store")
    assert plan.seeds == (993,)  # the workflow's seed is seed 0
    assert any("segment pretrain follows train" in n for n in plan.notes)
    task, _ = unit_task(plan.pipeline("tabnet").task, plan.windows[0], seed=993, n_threads=1)
    seg = task["dataset"]["kwargs"]["segments"]
    assert seg["pretrain"] == seg["train"] == list(plan.windows[0].train.as_tuple())
    assert seg["pretrain_validation"] == seg["valid"] == list(plan.windows[0].valid.as_tuple())
    assert summary.ran == 1
    side = st.read_sidecar(plan.store, UnitKey("tabnet", 993, 0))
    assert side["seed_param"] == "seed" and side["seeds"]["model_kwarg"] == 993
    checkpoints = st.unit_paths(plan.store, UnitKey("tabnet", 993, 0)).checkpoint.parent
    assert not list(checkpoints.glob(".*.tmp"))  # its pretrain_file and fit file were beside the unit, then removed


# --------------------------------------------------------------------------- XGBoost and CatBoost
XGB = {"class": "XGBModel", "module_path": "qlib.contrib.model.xgboost",
       "kwargs": {"eval_metric": "rmse", "colsample_bytree": 0.8, "eta": 0.3, "max_depth": 3, "subsample": 0.8,
                  "nthread": 20}}
CATBOOST = {"class": "CatBoostModel", "module_path": "qlib.contrib.model.catboost_model",
            "kwargs": {"loss": "RMSE", "learning_rate": 0.3, "depth": 3, "thread_count": 20}}


@pytest.mark.parametrize(("model", "seed_param", "threads"), [
    (XGB, "seed", {"torch": 1, "nthread": 1}),
    (CATBOOST, "random_seed", {"torch": 1, "thread_count": 1}),
])
def test_boosters_get_the_unit_seed_and_threads_in_their_own_parameters(tmp_path, daily, model, seed_param, threads):
    name = model["class"].lower()
    plan, summary = run(experiment(tmp_path, daily, model, name=name), tmp_path / "store", seeds=[0, 1])
    assert summary.ran == 2
    frames = [read_unit(plan.store, UnitKey(name, seed, 0))["prediction"].to_numpy() for seed in (0, 1)]
    assert np.isfinite(frames[0]).all()
    for seed in (0, 1):
        side = st.read_sidecar(plan.store, UnitKey(name, seed, 0))
        assert side["seed_param"] == seed_param and side["threads"] == threads
    task, _ = unit_task(plan.pipeline(name).task, plan.windows[0], seed=1, n_threads=1)
    assert task["model"]["kwargs"][seed_param] == 1
    if model is XGB:  # row and column subsampling: the seed changes the trees
        assert not np.array_equal(*frames)
    assert not (REPO / "catboost_info").exists() and not (tmp_path / "catboost_info").exists()


# --------------------------------------------------------------------------- Qlib's MLP: the compatibility class
MLP = {"class": "DNNModelPytorch", "module_path": "qlib.contrib.model.pytorch_nn",
       "kwargs": {"loss": "mse", "lr": 0.01, "optimizer": "adam", "max_steps": 20, "eval_steps": 10,
                  "batch_size": 64, "GPU": 0, "weight_decay": 0.0002,
                  "pt_model_kwargs": {"input_dim": 158, "layers": [8]}}}


def test_qlib_mlp_runs_through_its_compatibility_class_which_the_run_names(tmp_path, daily):
    plan, summary = run(experiment(tmp_path, daily, MLP, name="mlp"), tmp_path / "store")
    assert summary.ran == 1
    assert any("compat.DNNModelPytorch replaces qlib.contrib.model.pytorch_nn.DNNModelPytorch" in n for n in plan.notes)
    side = st.read_sidecar(plan.store, UnitKey("mlp", 0, 0))
    assert "ReduceLROnPlateau" in side["compat"] and side["seed_param"] == "seed"
    assert np.isfinite(read_unit(plan.store, UnitKey("mlp", 0, 0))["prediction"]).all()


# --------------------------------------------------------------------------- GATs: a base LSTM pretrained per unit
GATS_TS = {"class": "GATs", "module_path": "qlib.contrib.model.pytorch_gats_ts",
           "kwargs": {"d_feat": len(FEATURES), "hidden_size": 8, "num_layers": 1, "dropout": 0.0, "n_epochs": 1,
                      "lr": 1e-3, "early_stop": 2, "metric": "loss", "loss": "mse", "base_model": "LSTM",
                      "model_path": "benchmarks/LSTM/not_here.pkl", "batch_size": 64, "GPU": 0, "n_jobs": 0}}


def test_gats_loads_a_base_lstm_the_unit_trained_first_on_its_own_window(tmp_path, daily):
    path = experiment(tmp_path, daily, GATS_TS, name="gats", handler=alpha158(columns=FEATURES),
                      dataset="TSDatasetH", dataset_kwargs={"step_len": 5})
    plan, summary = run(path, tmp_path / "store")
    assert any("model_path benchmarks/LSTM/not_here.pkl does not exist" in n and "pytorch_lstm_ts.LSTM" in n
               for n in plan.notes)
    assert summary.ran == 1
    side = st.read_sidecar(plan.store, UnitKey("gats", 0, 0))
    base = side["pretrained_base"]
    assert base["class"] == "qlib.contrib.model.pytorch_lstm_ts.LSTM"
    assert base["kwargs"]["hidden_size"] == 8 and base["kwargs"]["batch_size"] == 64
    assert "metric" not in base["kwargs"]  # GATs' metric is its own (IGMTF's "ic" is unknown to Qlib's LSTM)
    assert (plan.store / base["file"]).is_file()
    import torch

    weights = torch.load(plan.store / base["file"])
    assert weights["rnn.weight_ih_l0"].shape == (4 * 8, len(FEATURES))  # an LSTM of GATs' sizes


# --------------------------------------------------------------------------- a plain DataHandlerLP
PLAIN_HANDLER = {
    "class": "DataHandlerLP", "module_path": "qlib.data.dataset.handler",
    "kwargs": {"instruments": "all",
               "data_loader": {"class": "QlibDataLoader", "kwargs": {"freq": "day", "config": {
                   "feature": [["($close-$open)/$open", "Std($close/Ref($close, 1)-1, 5)", "Corr($close, $volume, 10)"],
                               ["KMID", "VOL5", "CV10"]],
                   "label": [["Ref($close, -2)/Ref($close, -1) - 1"], ["LABEL0"]]}}},
               "infer_processors": [{"class": "RobustZScoreNorm",
                                     "kwargs": {"fields_group": "feature", "fit_start_time": "2013-06-03",
                                                "fit_end_time": "2014-07-31"}},
                                    {"class": "Fillna", "kwargs": {"fields_group": "feature"}}],
               "learn_processors": [{"class": "DropnaLabel"},
                                    {"class": "CSZScoreNorm", "kwargs": {"fields_group": "label"}}]}}
LINEAR = {"class": "LinearModel", "module_path": "qlib.contrib.model.linear", "kwargs": {"estimator": "ols"}}


def test_a_plain_datahandlerlp_runs_with_its_processors_fitted_on_the_window(tmp_path, daily):
    plan, summary = run(experiment(tmp_path, daily, LINEAR, name="plain", handler=PLAIN_HANDLER), tmp_path / "store")
    assert summary.ran == 1
    task, applied = unit_task(plan.pipeline("plain").task, plan.windows[0], seed=0, n_threads=1)
    hkw = task["dataset"]["kwargs"]["handler"]["kwargs"]
    assert "fit_start_time" not in hkw  # DataHandlerLP takes none; its processor does, and gets the window's
    fit = plan.windows[0].fit
    assert hkw["infer_processors"][0]["kwargs"]["fit_end_time"] == fit.end.isoformat(sep=" ")
    assert applied["seed_param"] is None  # OLS takes no seed: the verdicts can name it
    assert st.read_sidecar(plan.store, UnitKey("plain", 0, 0))["seed_param"] is None
