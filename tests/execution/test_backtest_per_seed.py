"""The workflow's backtest once per seed over the joined windows (issue 36), real Qlib throughout (no mocks).

A Qlib-format workflow with its anchors (``benchmark: &benchmark``, ``port_analysis_config: &port_analysis_config``,
``config: *port_analysis_config``) on a daily store of 6 stocks: LGBModel + Alpha158, 2 pipelines x 2 seeds x 2
windows. Checked: one backtest per seed, equal to Qlib's own ``PortAnaRecord`` run on the same joined predictions;
the purge in the manifest; ``--set`` of a backtest setting through the anchors re-runs the backtests only; the
guard on a ``topk`` that holds the whole universe (named before training, not backtested); compare's portfolio
rows, excess-return verdicts and report.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from daily_helpers import SYMBOLS, build_daily_store
from rolling_calib.analysis.comparison import compare_store
from rolling_calib.analysis.scoring import score_store
from rolling_calib.config.experiment import load_experiment
from rolling_calib.core.portfolio import risk_analysis
from rolling_calib.core.resampling import Resampling
from rolling_calib.execution import store as st
from rolling_calib.execution.executors import LocalExecutor, UnitKey
from rolling_calib.execution.reader import load_run, read_backtest, read_predictions
from rolling_calib.execution.runner import plan_run, run_plan

pytestmark = pytest.mark.slow

WORKFLOW = """\
qlib_init: {{provider_uri: "{provider}", logging_level: WARNING}}
market: &market all
benchmark: &benchmark SH000300
data_handler_config: &data_handler_config
    start_time: 2013-02-01
    end_time: 2015-03-31
    fit_start_time: 2013-02-01
    fit_end_time: 2014-05-31
    instruments: *market
port_analysis_config: &port_analysis_config
    strategy:
        class: TopkDropoutStrategy
        module_path: qlib.contrib.strategy
        kwargs: {{signal: <PRED>, topk: 3, n_drop: 1}}
    backtest:
        start_time: 2014-07-01
        end_time: 2014-12-31
        account: 1000000
        benchmark: *benchmark
        exchange_kwargs: {{limit_threshold: 0.095, deal_price: close, open_cost: 0.0005, close_cost: 0.0015, min_cost: 5}}
task:
    model:
        class: LGBModel
        module_path: qlib.contrib.model.gbdt
        kwargs: {{loss: mse, learning_rate: 0.1, num_leaves: 8, num_boost_round: 20, early_stopping_rounds: 5,
                 num_threads: 1, verbosity: -1, colsample_bytree: 0.8}}
    dataset:
        class: DatasetH
        module_path: qlib.data.dataset
        kwargs:
            handler: {{class: Alpha158, module_path: qlib.contrib.data.handler, kwargs: *data_handler_config}}
            segments:
                train: [2013-02-01, 2014-05-31]
                valid: [2014-06-01, 2014-06-30]
                test: [2014-07-01, 2014-12-31]
    record:
        - {{class: SignalRecord, module_path: qlib.workflow.record_temp, kwargs: {{model: <MODEL>, dataset: <DATASET>}}}}
        - {{class: PortAnaRecord, module_path: qlib.workflow.record_temp, kwargs: {{config: *port_analysis_config}}}}
rolling: {{initial_train_start: 2013-02, start: 2014-07, end: 2014-12, step_months: 3, valid_months: 1, mode: scratch,
          seeds: 2}}
pipelines:
    lr10: {{}}
    lr01: {{task.model.kwargs.learning_rate: 0.01}}
compare: [[lr10, lr01]]
"""


@pytest.fixture(scope="module")
def daily_store(tmp_path_factory) -> Path:
    return build_daily_store(tmp_path_factory.mktemp("daily_bt") / "qlib_day")


@pytest.fixture(scope="module")
def workflow(tmp_path_factory, daily_store) -> Path:
    path = tmp_path_factory.mktemp("bt_workflow") / "lgb_backtest.yaml"
    path.write_text(WORKFLOW.format(provider=daily_store))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory, workflow):
    config = load_experiment(workflow)
    plan = plan_run(config, store=tmp_path_factory.mktemp("bt_run") / "store")
    summary = run_plan(plan, executor=LocalExecutor(workers=1), progress=False)
    return config, plan, summary


def test_one_backtest_per_seed_over_the_joined_windows(run):
    _, plan, summary = run
    assert summary.ran == 8 and sorted(summary.backtests.ran) == sorted((p, s) for p in ("lr10", "lr01") for s in (0, 1))
    manifest = st.read_manifest(plan.store)
    spec = manifest["pipelines"]["lr10"]["backtest"]["spec"]
    assert spec["strategy"] == "TopkDropoutStrategy(topk=3, n_drop=1)"
    assert spec["benchmark"] == "the equal-weighted universe all (6 instruments)"   # SH000300: not in the store
    assert spec["config"]["backtest"]["benchmark"] == sorted(SYMBOLS)
    first, last = plan.windows[0].test.start, plan.windows[-1].test.end
    for key in plan.keys():   # the units run the other records; the backtest is not theirs
        assert st.read_sidecar(plan.store, key)["qlib_recorder"]["records"] == ["SignalRecord"]
    for name in ("lr10", "lr01"):
        for seed in (0, 1):
            report = read_backtest(plan.store, name, seed)
            assert report["date"].min() == first and report["date"].max() == last   # the schedule's test days
            joined = read_predictions(plan.store, name, seed)
            assert sorted(joined.index.get_level_values("datetime").unique()) == sorted(report["date"])
            assert np.allclose(report["excess_return_cost"], report["return"] - report["bench"] - report["cost"])
    assert any("benchmark: SH000300 is not an instrument of the store" in n for n in plan.notes)


def test_equals_qlibs_own_portanarecord_on_the_same_joined_predictions(run, tmp_path, monkeypatch):
    import qlib
    from qlib.workflow import R
    from qlib.workflow.record_temp import PortAnaRecord

    _, plan, _ = run
    manifest = st.read_manifest(plan.store)
    monkeypatch.chdir(tmp_path)   # MLflow's default artifact location on SQLite is ./mlruns: keep it out of the repo
    uri = f"sqlite:///{tmp_path / 'check.db'}"
    qlib.init(provider_uri={"day": plan.qlib_init["provider_uri"]["day"]}, region="us", kernels=1,
              exp_manager={"class": "MLflowExpManager", "module_path": "qlib.workflow.expm",
                           "kwargs": {"uri": uri, "default_exp_name": "check"}})
    start, end = plan.windows[0].test.start, plan.windows[-1].test.end
    for name, seed in (("lr10", 0), ("lr01", 1)):
        config = manifest["pipelines"][name]["backtest"]["spec"]["config"]
        port = {"strategy": config["strategy"], "executor": config["executor"],
                "backtest": {**config["backtest"], "start_time": start, "end_time": end}}
        labels = load_run(plan.store, name, seed, label="raw").set_index(["datetime", "instrument"])["label"]
        with R.start(experiment_name="check", recorder_name=f"{name}_{seed}"):   # as Qlib's rolling joins them
            R.save_objects(**{"pred.pkl": read_predictions(plan.store, name, seed).to_frame("score"),
                              "label.pkl": labels.to_frame("LABEL0")})
            recorder = R.get_recorder()
            PortAnaRecord(recorder, config=port).generate()
        theirs = recorder.load_object("portfolio_analysis/report_normal_1day.pkl")
        ours = read_backtest(plan.store, name, seed).set_index("date")
        assert list(pd.DatetimeIndex(theirs.index)) == list(ours.index)
        for column in ("return", "bench", "cost", "turnover"):
            assert np.allclose(theirs[column].to_numpy(dtype=float), ours[column].to_numpy(), rtol=1e-12, atol=0), column
        analysis = recorder.load_object("portfolio_analysis/port_analysis_1day.pkl")["risk"]
        for kind, column in (("excess_return_without_cost", "excess_return"), ("excess_return_with_cost",
                                                                                 "excess_return_cost")):
            risk = risk_analysis(ours[column].to_numpy())
            assert risk.information_ratio == pytest.approx(float(analysis[(kind, "information_ratio")]), rel=1e-9)
            assert risk.max_drawdown == pytest.approx(float(analysis[(kind, "max_drawdown")]), rel=1e-9)


def test_manifest_and_plan_record_the_purge(run, daily_store):
    _, plan, _ = run
    assert plan.purge["bars"] == 2 and "Ref($close, -2)/Ref($close, -1) - 1 looks 2 bar(s) ahead" in plan.purge["why"]
    assert st.read_manifest(plan.store)["pipelines"]["lr10"]["purge"] == plan.purge
    sessions = pd.DatetimeIndex(pd.read_csv(daily_store / "calendars" / "day.txt", header=None)[0])
    for w in plan.windows:   # the last 2 sessions before each next segment are left out
        assert sessions.get_loc(w.test.start) - sessions.get_loc(w.valid.end) == 3
        assert sessions.get_loc(w.valid.start) - sessions.get_loc(w.train.end) == 3


def test_compare_has_the_portfolio_rows_and_verdicts_on_the_excess_returns(run, tmp_path):
    from rolling_calib.reporting.document import write_report

    _, plan, _ = run
    scores = score_store(plan.store)
    assert set(scores.backtests["pipeline"]) == {"lr10", "lr01"} and scores.runs["excess_return_cost"].notna().all()
    comparison = compare_store(scores, resampling=Resampling(n_boot=100))
    data = json.loads(json.dumps(comparison.to_dict(), default=str))
    row = data["portfolio"]["lr10"]
    assert row["benchmark"] == "the equal-weighted universe all (6 instruments)" and row["mode"] == "sum"
    assert row["annualization_days"] == 238 and "open 0.05%" in row["cost_model"]
    for cost in ("without_cost", "with_cost"):
        for figure in ("annualized_return", "information_ratio", "max_drawdown"):
            summary = row[cost][figure]
            assert summary["n_seeds"] == 2 and summary["ci_low"] <= summary["mean"] <= summary["ci_high"]
    per_seed = [risk_analysis(read_backtest(plan.store, "lr10", s)["excess_return_cost"].to_numpy()).information_ratio
                for s in (0, 1)]
    assert row["with_cost"]["information_ratio"]["mean"] == pytest.approx(np.mean(per_seed))
    verdicts = data["pairs"][0]["verdicts"]
    assert {"excess_return", "excess_return_cost"} <= set(verdicts)
    assert verdicts["excess_return_cost"]["higher_is_better"] is True and verdicts["excess_return"]["n_seeds"] == [2, 2]
    assert "benchmark the equal-weighted universe all (6 instruments)" in verdicts["excess_return_cost"]["backtest"]
    text = comparison.format()
    assert "Backtest over the joined windows (TopkDropoutStrategy(topk=3, n_drop=1); benchmark the equal-weighted" in text
    assert "Excess return w/ cost" in text and "information ratio" in text
    paths = write_report(scores, comparison, tmp_path / "report")
    html = paths["html"].read_text()
    assert "excess_png" in paths and "Backtest over the joined windows" in html and "information ratio" in html


def test_a_backtest_setting_set_through_the_anchors_reruns_only_the_backtests(run, workflow, tmp_path):
    config, plan, _ = run
    copy = tmp_path / "store"
    shutil.copytree(plan.store, copy)
    before = {key: st.unit_paths(copy, key).sidecar.read_bytes() for key in plan.keys()}
    changed = load_experiment(workflow, overrides={"port_analysis_config.strategy.kwargs.topk": 2,
                                                   "benchmark": "AAPL"})
    record = changed.task["record"][1]["kwargs"]["config"]
    assert record["strategy"]["kwargs"]["topk"] == 2 and record["backtest"]["benchmark"] == "AAPL"   # the aliases
    again = plan_run(changed, store=copy)
    for p, q in zip(plan.pipelines, again.pipelines):
        assert p.config_hash == q.config_hash and p.backtest_hash != q.backtest_hash
    assert again.pipeline("lr10").backtest["benchmark"] == "AAPL"
    summary = run_plan(again, executor=LocalExecutor(workers=1), progress=False)
    assert summary.ran == 0 and summary.skipped == 8 and len(summary.backtests.ran) == 4
    assert {key: st.unit_paths(copy, key).sidecar.read_bytes() for key in plan.keys()} == before
    assert read_backtest(copy, "lr10", 0)["bench"].abs().sum() > 0
    assert run_plan(again, executor=LocalExecutor(workers=1), progress=False).backtests.skipped == 4   # now complete


def test_a_strategy_holding_the_whole_universe_is_named_before_training_and_not_backtested(workflow, tmp_path, capsys):
    from rolling_calib.cli import main

    config = load_experiment(workflow, overrides={"port_analysis_config.strategy.kwargs.topk": len(SYMBOLS)})
    plan = plan_run(config, store=tmp_path / "store")
    assert plan.pipeline("lr10").backtest is None
    why = ("port_analysis_config.strategy.kwargs.topk: TopkDropoutStrategy holds topk=6 stocks of the 6 instruments "
           "of all: it holds the whole universe")
    assert plan.pipeline("lr10").backtest_refused.startswith(why)
    assert any(n.startswith(f"the backtest is not run: {why}") for n in plan.notes)
    code = main(["run", str(workflow), "--store", str(tmp_path / "store"), "--dry-run",
                 "--set", "port_analysis_config.strategy.kwargs.topk=50"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0 and "TopkDropoutStrategy holds topk=50 stocks of the 6 instruments of all: it holds the whole " \
        "universe" in out
    assert "--set port_analysis_config.strategy.kwargs.topk=1" in out and not (tmp_path / "store").exists()


def test_until_decided_by_the_excess_return_backtests_each_batch_before_its_look(workflow, tmp_path, capsys):
    from rolling_calib.analysis.sequential_path import read_path
    from rolling_calib.cli import main

    store = tmp_path / "store"
    argv = ["run", str(workflow), "--store", str(store), "--until-decided", "--decide-by", "excess_return_cost",
            "--first", "2", "--batch", "1", "--max-seeds", "3", "--margin", "1", "--workers", "1", "--no-tracking",
            "--no-progress", "--json", "--set", "rolling.start=2014-10"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    path = read_path(store)
    assert path.metric == "excess_return_cost" and path.outcomes == {"lr10 vs lr01": "equivalent"}
    assert sorted(result["backtests_ran"]) == ["lr01/seed0", "lr01/seed1", "lr10/seed0", "lr10/seed1"]
    assert result["units_ran"] == 4   # 1 window x 2 seeds x 2 pipelines: the first look decided (margin 1 per day)
