"""Qlib's own models and datasets through the rolling schedule (real provider, no mocks).

* ``LGBModel`` (``qlib.contrib.model.gbdt``) + ``Alpha158`` on a daily store built from the real
  shared daily bars ``us-equities-daily-2013-2018`` (tests/shared_data.py finds them; or, without them, a synthetic
  random walk): 2 pipelines x 2 seeds x 2 windows, scratch mode, then fine-tune mode (``finetune``
  of the pickled previous model), labels raw and learn-processed, and ``compare`` with IC columns.
* Qlib's ``LSTM`` (no ``load_state``, no ``finetune``) in fine-tune mode: refused at plan time,
  before any training, and by ``rolling-calib run`` with exit status 2 in a few seconds.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from rolling_calib.analysis.comparison import compare_store
from rolling_calib.analysis.scoring import score_store
from rolling_calib.config.experiment import load_experiment
from rolling_calib.core.validation import ConfigError
from rolling_calib.execution import store as st
from rolling_calib.execution.reader import read_unit
from rolling_calib.execution.executors import LocalExecutor, UnitKey
from rolling_calib.execution.runner import check_store_coverage, plan_run, run_plan, window_task
from rolling_calib.core.resampling import Resampling

from runner_helpers import REPO

pytestmark = pytest.mark.slow

from daily_helpers import SYMBOLS, build_daily_store


@pytest.fixture(scope="module")
def daily_store(tmp_path_factory) -> Path:
    return build_daily_store(tmp_path_factory.mktemp("daily") / "qlib_day")


def lgb_experiment(tmp: Path, store: Path, *, name: str = "lgb.yaml", **rolling) -> Path:
    """LGBModel + Alpha158 on the daily store: evaluate Jul-Dec 2014 in two 3-month windows."""
    handler = {"class": "Alpha158", "module_path": "qlib.contrib.data.handler",
               "kwargs": {"instruments": "all", "start_time": "2013-02-01", "end_time": "2015-03-31",
                          "fit_start_time": "2013-02-01", "fit_end_time": "2014-05-31"}}
    doc = {
        "qlib_init": {"provider_uri": str(store), "logging_level": "WARNING"},
        "task": {
            "model": {"class": "LGBModel", "module_path": "qlib.contrib.model.gbdt",
                      "kwargs": {"loss": "mse", "learning_rate": 0.1, "num_leaves": 8, "num_boost_round": 20,
                                 "early_stopping_rounds": 5, "num_threads": 1, "verbosity": -1}},
            "dataset": {"class": "DatasetH", "module_path": "qlib.data.dataset",
                        "kwargs": {"handler": handler,
                                   "segments": {"train": ["2013-02-01", "2014-05-31"], "valid": ["2014-06-01", "2014-06-30"],
                                                "test": ["2014-07-01", "2014-12-31"]}}},
        },
        "rolling": {"initial_train_start": "2013-02", "start": "2014-07", "end": "2014-12", "step_months": 3,
                    "valid_months": 1, "mode": "scratch", "seeds": 2, **rolling},
        "pipelines": {"lr10": {}, "lr01": {"task.model.kwargs.learning_rate": 0.01}},
        "compare": [["lr10", "lr01"]],
    }
    path = tmp / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def lgb_run(tmp_path_factory, daily_store):
    tmp = tmp_path_factory.mktemp("zoo")
    config = load_experiment(lgb_experiment(tmp, daily_store))
    plan = plan_run(config, store=tmp / "store")
    t0 = time.perf_counter()
    summary = run_plan(plan, executor=LocalExecutor(workers=1), progress=False)
    return config, plan, summary, time.perf_counter() - t0


# --------------------------------------------------------------------------- LGBModel + Alpha158, daily
def test_day_store_resolves_and_windows_use_its_sessions(lgb_run, daily_store):
    config, plan, _, _ = lgb_run
    assert config.qlib_init["provider_uri"] == {"day": str(daily_store.resolve())}
    assert config.store_dir == daily_store.resolve()
    w0, w1 = plan.windows
    assert w0.test.as_tuple() == ("2014-07-01 00:00:00", "2014-09-30 00:00:00")
    assert w1.test.as_tuple() == ("2014-10-01 00:00:00", "2014-12-31 00:00:00")
    # the label Ref($close, -2)/Ref($close, -1) - 1 looks 2 sessions ahead: they are purged (rolling.purge: auto)
    assert w0.valid.as_tuple() == ("2014-06-02 00:00:00", "2014-06-26 00:00:00")
    task = window_task(plan.pipeline("lr10").task, w1, seed=1, n_threads=1)
    # LGBModel hands its kwargs to LightGBM: the unit's seed goes to LightGBM's seed, its threads to num_threads
    assert task["model"]["kwargs"]["seed"] == 1 and task["model"]["kwargs"]["num_threads"] == 1
    assert "n_threads" not in task["model"]["kwargs"]
    assert task["dataset"]["kwargs"]["handler"]["kwargs"]["fit_end_time"] == "2014-08-27 00:00:00"


def test_lgb_alpha158_scratch_run_fills_the_store(lgb_run):
    _, plan, summary, wall = lgb_run
    assert summary.ran == 8 and summary.skipped == 0
    check_store_coverage(plan)
    manifest = st.read_manifest(plan.store)
    assert manifest["pipelines"]["lr10"]["label"] == "raw"
    assert manifest["experiment"]["rolling"]["label"] == "auto"   # scored raw: Alpha158 has no learn processor
    for key in plan.keys():
        frame = read_unit(plan.store, key)
        w = plan.windows[key.window]
        assert frame["datetime"].min() == w.test.start and frame["datetime"].max() == w.test.end
        assert set(frame["instrument"]) == set(SYMBOLS)
        side = st.read_sidecar(plan.store, key)
        assert side["seeds"] == {"global": {"random": key.seed, "numpy": key.seed, "torch": key.seed},
                                 "model_kwarg": key.seed}
        assert side["seed_param"] == "seed" and side["threads"] == {"torch": 1, "num_threads": 1}
        assert side["label"] == "raw" and side["started_from"] is None
        with open(st.unit_paths(plan.store, key).checkpoint, "rb") as fh:  # scratch: the pickled model is kept
            assert type(pickle.load(fh)).__name__ == "LGBModel"
    # the raw label is Alpha158's Ref($close, -2) / Ref($close, -1) - 1, read back from the store
    frame = read_unit(plan.store, UnitKey("lr10", 0, 0))
    assert frame["label"].abs().median() < 0.05
    print(f"LGBModel + Alpha158: 8 units in {wall:.1f} s")


def test_compare_shows_ic_beside_ql_and_cql(lgb_run):
    _, plan, _, _ = lgb_run
    assert score_store(plan.store).label.kind == "learn"   # --label auto: Alpha158's learn processors changed it
    scores = score_store(plan.store, label="raw")
    assert {"ic", "icir", "rank_ic"} <= set(scores.runs.columns)
    assert scores.runs[["ic", "rank_ic"]].abs().max().max() <= 1
    assert scores.label.kind == "raw" and scores.label.unit == "return"
    comparison = compare_store(scores, resampling=Resampling(n_boot=100))
    assert set(comparison.pairs[0].accuracies) >= {"ql", "cql", "ic", "icir", "rank_ic"}
    text = comparison.format()
    assert "IC mean" in text and "Acc IC" in text and "raw label: Ref($close, -2)/Ref($close, -1) - 1, plain return" in text
    assert comparison.to_dict()["label"] == "raw"


def test_lgb_finetune_continues_the_pickled_model_with_learn_labels(tmp_path, daily_store):
    config = load_experiment(lgb_experiment(tmp_path, daily_store, mode="finetune", seeds=1, label="learn"))
    plan = plan_run(config, store=tmp_path / "store", pipelines=["lr10"])
    assert plan.label == "learn"
    run_plan(plan, executor=LocalExecutor(workers=1), progress=False)
    w0 = st.read_sidecar(plan.store, UnitKey("lr10", 0, 0))
    w1 = st.read_sidecar(plan.store, UnitKey("lr10", 0, 1))
    assert w1["started_from"] == {"checkpoint": w0["checkpoint"], "sha256": w0["checkpoint_sha256"]}
    trees = []
    for w in (0, 1):
        with open(st.unit_paths(plan.store, UnitKey("lr10", 0, w)).checkpoint, "rb") as fh:
            trees.append(pickle.load(fh).model.num_trees())
    assert trees[1] == trees[0] + 10  # window 0's booster plus Qlib's 10 finetune rounds
    frame = read_unit(plan.store, UnitKey("lr10", 0, 0))
    per_day = frame.groupby("datetime")["label"]
    assert np.allclose(per_day.mean(), 0, atol=1e-5)  # Alpha158's learn processor: CSZScoreNorm of the label
    assert st.read_manifest(plan.store)["pipelines"]["lr10"]["label"] == "learn"


# --------------------------------------------------------------------------- Qlib's records and recorder
def _records(benchmark: str) -> list[dict]:
    port = {"strategy": {"class": "TopkDropoutStrategy", "module_path": "qlib.contrib.strategy",
                         "kwargs": {"signal": "<PRED>", "topk": 2, "n_drop": 1}},
            "backtest": {"start_time": None, "end_time": None, "account": 1000000, "benchmark": benchmark,
                         "exchange_kwargs": {"deal_price": "close", "open_cost": 0.0005, "close_cost": 0.0015,
                                             "min_cost": 5}}}
    return [{"class": "SignalRecord", "module_path": "qlib.workflow.record_temp",
             "kwargs": {"model": "<MODEL>", "dataset": "<DATASET>"}},
            {"class": "SigAnaRecord", "module_path": "qlib.workflow.record_temp",
             "kwargs": {"ana_long_short": False, "ann_scaler": 252}},
            {"class": "PortAnaRecord", "module_path": "qlib.workflow.record_temp", "kwargs": {"config": port}}]


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory, daily_store):
    """lr10 with a backtest against AAPL (in the store), lr01 against SH000300 (not): 2 workers, one SQLite DB."""
    tmp = tmp_path_factory.mktemp("records")
    path = lgb_experiment(tmp, daily_store)
    doc = yaml.safe_load(path.read_text())
    doc["task"]["record"] = _records("AAPL")
    doc["pipelines"]["lr01"]["task.record"] = _records("SH000300")
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    plan = plan_run(load_experiment(path), store=tmp / "store")
    t0 = time.perf_counter()
    run_plan(plan, executor=LocalExecutor(workers=2), progress=False)
    return plan, time.perf_counter() - t0


def test_records_run_per_unit_in_a_qlib_recorder_readable_with_R(recorded_run):
    import qlib
    from qlib.workflow import R

    plan, wall = recorded_run
    uri = f"sqlite:///{plan.store / 'mlflow.db'}"
    qlib.init(provider_uri={"day": str(plan.qlib_init["provider_uri"]["day"])}, region="us", kernels=1,
              exp_manager={"class": "MLflowExpManager", "module_path": "qlib.workflow.expm",
                           "kwargs": {"uri": uri, "default_exp_name": "rolling"}})
    ids = set()
    for key in plan.keys():
        side = st.read_sidecar(plan.store, key)["qlib_recorder"]
        assert side["experiment_name"] == key.pipeline and side["recorder_name"] == key.slug()
        ids.add(side["recorder_id"])
        rec = R.get_recorder(recorder_id=side["recorder_id"], experiment_name=key.pipeline)
        assert rec.name == key.slug() and rec.status == "FINISHED"
        pred, label = rec.load_object("pred.pkl"), rec.load_object("label.pkl")
        frame = read_unit(plan.store, key).set_index(["datetime", "instrument"])
        joined = pred["score"].to_frame().join(frame, how="inner")
        assert len(joined) == len(frame) and np.allclose(joined["score"], joined["prediction"])
        assert np.allclose(label.iloc[:, 0].reindex(frame.index), frame["label"])  # the raw label
        assert {"IC", "ICIR", "Rank IC", "Rank ICIR"} <= set(side["metrics"])
        assert np.isclose(side["metrics"]["IC"], rec.list_metrics()["IC"])
        assert type(rec.load_object("params.pkl")).__name__ == "LGBModel"
        # the backtest runs once per seed over the joined windows (STORE/backtests), not per unit
        assert side["records"] == ["SignalRecord", "SigAnaRecord"] and side["skipped"] == []
    assert len(ids) == 8
    manifest = st.read_manifest(plan.store)
    assert manifest["pipelines"]["lr10"]["backtest"]["spec"]["benchmark"] == "AAPL"   # in the store
    assert manifest["pipelines"]["lr01"]["backtest"]["spec"]["benchmark"].startswith("the equal-weighted universe")
    assert sorted(p.name for p in (plan.store / "backtests").glob("*/seed*.parquet")) == ["seed0.parquet",
                                                                                         "seed0.parquet",
                                                                                         "seed1.parquet",
                                                                                         "seed1.parquet"]
    assert (plan.store / "mlartifacts").is_dir() and not (REPO / "mlruns").exists()
    print(f"LGBModel + Alpha158 with records, 8 units on 2 workers: {wall:.1f} s")


# --------------------------------------------------------------------------- refusal before training
LSTM_TASK = {
    "model": {"class": "LSTM", "module_path": "qlib.contrib.model.pytorch_lstm",
              "kwargs": {"d_feat": 6, "hidden_size": 8, "num_layers": 1, "n_epochs": 1, "batch_size": 256}},
}


def lstm_experiment(tmp: Path, data: Path, mode: str) -> Path:
    """Qlib's LSTM + Alpha360 on the tiny minute store (1-minute Alpha360 features)."""
    handler = {"class": "Alpha360", "module_path": "qlib.contrib.data.handler",
               "kwargs": {"instruments": "all", "freq": "1min", "start_time": "2018-01-02", "end_time": "2018-04-30",
                          "fit_start_time": "2018-01-02", "fit_end_time": "2018-02-28"}}
    doc = {
        "qlib_init": {"provider_uri": {"1min": str(data)}, "logging_level": "WARNING"},
        "task": dict(LSTM_TASK, dataset={"class": "DatasetH", "module_path": "qlib.data.dataset",
                                         "kwargs": {"handler": handler, "segments": {"train": ["2018-01-02", "2018-01-31"],
                                                                                     "test": ["2018-03-01", "2018-04-30"]}}}),
        "rolling": {"initial_train_start": "2018-01", "start": "2018-03", "end": "2018-04", "step_months": 1,
                    "valid_months": 1, "mode": mode, "seeds": 1},
    }
    path = tmp / f"lstm_{mode}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_finetune_of_a_model_without_load_state_or_finetune_is_refused_at_plan_time(tmp_path, tiny_data):
    config = load_experiment(lstm_experiment(tmp_path, tiny_data, "finetune"))
    with pytest.raises(ConfigError) as info:  # before the calendar is read or anything trains
        plan_run(config, store=tmp_path / "store")
    message = str(info.value)
    assert "qlib.contrib.model.pytorch_lstm.LSTM" in message and "mode: scratch" in message
    assert not (tmp_path / "store").exists()


def test_run_command_refuses_it_with_exit_2_before_training(tmp_path, tiny_data):
    path = lstm_experiment(tmp_path, tiny_data, "finetune")
    proc = subprocess.run([sys.executable, "-m", "rolling_calib.cli", "run", str(path), "--store", str(tmp_path / "store"),
                           "--no-tracking"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "LSTM" in proc.stderr and "mode: scratch" in proc.stderr
    assert not (tmp_path / "store" / "units").exists()
