"""MLflow tracking of a real run store (SQLite backend), read back through MlflowClient;
and Qlib's own recorder logging into the same database."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sweep_helpers import tiny_experiment

from rolling_calib.config.experiment import load_experiment
from rolling_calib.analysis.scoring import score_store
from rolling_calib.execution.executors import LocalExecutor
from rolling_calib.execution.runner import plan_run, run_plan
from rolling_calib.execution.store import unit_paths
from rolling_calib.tracking.mlflow_log import (
    PER_SEED,
    PER_WINDOW,
    _recorder_link,
    default_tracking_uri,
    flatten_config,
    log_store,
    track_store,
)

from rolling_calib.execution.manifest import Sidecar  # noqa: E402

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run_store(tmp_path_factory):
    """A real store: pipelines wd0 / wd1e-3 x 2 seeds x 2 windows, run by the local executor."""
    root = tmp_path_factory.mktemp("tracking")
    path = tiny_experiment(root, seeds=2, pipelines={"wd0": {}, "wd1e-3": {"task.model.kwargs.weight_decay": 1e-3}})
    config = load_experiment(path)
    store = root / "store"
    run_plan(plan_run(config, store=store, n_threads=1), executor=LocalExecutor(workers=2), progress=False)
    return {"root": root, "config": config, "store": store, "yaml": path}


def runs_by_level(client, experiment_id):
    runs = client.search_runs([experiment_id], max_results=1000)
    out = {"comparison": [], "pipeline": [], "seed": [], "window": []}
    for run in runs:
        out[run.data.tags["rc.level"]].append(run)
    return runs, out


def test_parent_and_nested_runs_with_metrics_equal_to_the_scores(run_store):
    store = run_store["store"]
    uri = default_tracking_uri(store)
    assert uri == f"sqlite:///{store.resolve()}/mlflow.db"
    log_store(score_store(store), tracking_uri=uri)
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tiny-sweep")  # the YAML's experiment_name
    assert experiment is not None
    runs, level = runs_by_level(client, experiment.experiment_id)
    assert (len(level["pipeline"]), len(level["seed"]), len(level["window"])) == (2, 4, 8)
    parents = {r.data.tags["rc.pipeline"]: r for r in level["pipeline"]}
    by_id = {r.info.run_id: r for r in runs}
    scores = score_store(store)
    periods = scores.periods.sort_values(["pipeline", "seed", "start"])

    # parent: the resolved configuration as params (window dates and seed "per window/seed"), config hash as tag,
    # seed mean of the metrics
    wd = parents["wd1e-3"]
    assert wd.data.params["task.model.kwargs.weight_decay"] == "0.001"
    assert wd.data.params["task.model.kwargs.hidden_size"] == "8"
    assert wd.data.params["task.dataset.kwargs.handler.kwargs.instruments"] == "us25"
    dated = [k for k in wd.data.params if k.startswith("task.dataset.kwargs.segments.") or k.endswith(
        ("kwargs.start_time", "kwargs.end_time", "kwargs.fit_start_time", "kwargs.fit_end_time"))]
    assert all(wd.data.params[k] == PER_WINDOW for k in dated)   # not window 0's dates
    assert wd.data.params.get("task.model.kwargs.seed", PER_SEED) == PER_SEED
    assert wd.data.params["rolling.step_months"] == "1" and wd.data.params["rolling.calibration.period"] == "month"
    assert wd.data.tags["rc.config_hash"] == __import__("json").loads((store / "manifest.json").read_text())[
        "pipelines"]["wd1e-3"]["config_hash"]
    mine = scores.runs[scores.runs.pipeline == "wd1e-3"]
    assert wd.data.metrics["cql_mean"] == pytest.approx(mine["cql"].mean(), rel=1e-12)
    assert wd.data.metrics["ql_std"] == pytest.approx(mine["ql"].std(ddof=1), rel=1e-12)

    # seed runs: nested under their pipeline, the full resolved configuration with their seed, overall metrics
    # and per-month series
    for run in level["seed"]:
        pipeline, seed = run.data.tags["rc.pipeline"], int(run.data.params["seed"])
        assert run.data.params.get("task.model.kwargs.seed", str(seed)) == str(seed)
        config = {k: v for k, v in parents[pipeline].data.params.items() if k.startswith(("task.", "rolling.", "data."))}
        own = {"task.model.kwargs.seed": str(seed)} if "task.model.kwargs.seed" in config else {}
        assert {k: run.data.params[k] for k in config} == {**config, **own}
        assert run.data.metrics["ic"] == pytest.approx(
            scores.runs.set_index(["pipeline", "seed"]).loc[(pipeline, seed), "ic"], rel=1e-12)
        assert run.data.tags["mlflow.parentRunId"] == parents[pipeline].info.run_id
        row = scores.runs[(scores.runs.pipeline == pipeline) & (scores.runs.seed == seed)].iloc[0]
        for metric in ("ql", "ql_scored", "cql"):
            assert run.data.metrics[metric] == pytest.approx(row[metric], rel=1e-12)
        months = periods[(periods.pipeline == pipeline) & (periods.seed == seed)]
        ql_hist = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "ql_month"))
        assert ql_hist == [(i, pytest.approx(v, rel=1e-12)) for i, v in enumerate(months["ql"])]
        cql_hist = client.get_metric_history(run.info.run_id, "cql_month")
        assert [(m.step, m.value) for m in cql_hist] == [(1, pytest.approx(months["cql"].iloc[1], rel=1e-12))]

    # window runs: nested under their seed run, dates, pointer to the stored predictions
    for run in level["window"]:
        parent = by_id[run.data.tags["mlflow.parentRunId"]]
        assert parent.data.tags["rc.level"] == "seed" and parent.data.params["seed"] == run.data.params["seed"]
        path = Path(run.data.params["predictions"])
        from rolling_calib.execution.executors import UnitKey

        key = UnitKey(run.data.tags["rc.pipeline"], int(run.data.params["seed"]), int(run.data.params["window"]))
        assert not path.is_absolute() and store / path == unit_paths(store, key).parquet and (store / path).is_file()
        assert run.data.params["test_start"].startswith(("2018-02-01", "2018-03-01"))
        assert len(client.get_metric_history(run.info.run_id, "ql_month")) == 1  # one month per window
        names = {a.path for a in client.list_artifacts(run.info.run_id)}   # a minute store: no Qlib recorder
        assert names == {"pred.pkl", "label.pkl"} and "rc.qlib_recorder_id" not in run.data.tags
    # no machine path in any param or tag
    for run in runs:
        for value in (*run.data.params.values(), *run.data.tags.values()):
            assert str(store.resolve()) not in value and str(run_store["root"]) not in value
        assert run.data.tags["rc.store"] == "store"


def test_relogging_is_idempotent_and_adds_new_seeds(run_store, tmp_path):
    uri = f"sqlite:///{tmp_path / 'separate.db'}"
    first = track_store(score_store(run_store["store"]), tracking_uri=uri, experiment="exp-a")
    assert (first.created, first.updated, first.unchanged) == (14, 0, 0)
    again = track_store(score_store(run_store["store"]), tracking_uri=uri, experiment="exp-a")
    assert (again.created, again.updated, again.unchanged) == (0, 0, 14)
    assert again.run_ids == first.run_ids
    # a third seed lands in the store: 1 seed run + 2 window runs per pipeline are new,
    # each pipeline's parent is updated (its seed statistics changed)
    plan = plan_run(run_store["config"], store=run_store["store"], seeds=[2], n_threads=1)
    run_plan(plan, executor=LocalExecutor(workers=1), progress=False)
    more = track_store(score_store(run_store["store"]), tracking_uri=uri, experiment="exp-a")
    assert (more.created, more.updated, more.unchanged) == (6, 2, 12)
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("exp-a")
    assert len(client.search_runs([exp.experiment_id], max_results=1000)) == 20
    parent = client.get_run(more.run_ids[next(k for k in more.run_ids if k.startswith("wd0|") and k.count("|") == 1)])
    assert parent.data.metrics["n_seeds"] == 3


def test_flatten_config():
    task = {"model": {"class": "M", "kwargs": {"lr": 0.01, "layers": [1, 2]}},
            "dataset": {"class": "D", "kwargs": {"segments": {"x": 1}, "handler": {"class": "H", "kwargs": {"w": "x" * 9000}}}}}
    params = flatten_config(task)
    assert params["model.kwargs.lr"] == "0.01" and params["model.kwargs.layers"] == "[1, 2]"
    assert params["dataset.kwargs.segments.x"] == "1" and len(params["dataset.kwargs.handler.kwargs.w"]) == 500


def test_recorder_link_names_the_qlib_recorder_only_when_it_holds_pred_pkl():
    side = {"qlib_recorder": {"experiment_name": "h64", "experiment_id": "3", "recorder_id": "abc",
                              "records": ["SignalRecord", "SigAnaRecord"]}}
    assert _recorder_link(Sidecar.from_dict(side)) == {"rc.qlib_recorder_id": "abc", "rc.qlib_experiment": "h64",
                                                       "rc.qlib_experiment_id": "3"}
    minute = {"qlib_recorder": {"records": [], "skipped": [{"class": "SignalRecord", "reason": "1min"}]}}
    assert _recorder_link(Sidecar.from_dict(minute)) == {} and _recorder_link(Sidecar()) == {}


def test_missing_store_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no manifest"):
        log_store(score_store(tmp_path), tracking_uri=f"sqlite:///{tmp_path / 'x.db'}")


def test_qlib_recorder_writes_to_the_same_database(run_store):
    """Qlib's MLflowExpManager + R.start/R.log_metrics against the tracking DB (own process:
    qlib.init is process-global)."""
    uri = default_tracking_uri(run_store["store"])
    log_store(score_store(run_store["store"]), tracking_uri=uri)
    client = MlflowClient(tracking_uri=uri)
    ours = client.get_experiment_by_name("tiny-sweep")
    windows = [r for r in client.search_runs([ours.experiment_id], max_results=1000)
               if r.data.tags["rc.level"] == "window"]
    window_ids = [r.info.run_id for r in windows]
    script = textwrap.dedent(
        f"""
        import qlib
        from qlib.workflow import R
        qlib.init(provider_uri={str(run_store['root'] / 'qlib')!r}, region="us",
                  exp_manager={{"class": "MLflowExpManager", "module_path": "qlib.workflow.expm",
                               "kwargs": {{"uri": {uri!r}, "default_exp_name": "qlib-default"}}}})
        with R.start(experiment_name="qlib-recorder", recorder_name="check"):
            R.log_params(model="RollingLSTM")
            R.log_metrics(ic=0.125, step=0)
            R.set_tags(source="qlib")
        # our window runs, read as Qlib recorders: pred.pkl / label.pkl as SignalRecord writes them
        import json, pickle
        out = {{}}
        for run_id in {window_ids!r}:
            rec = R.get_recorder(recorder_id=run_id, experiment_name="tiny-sweep")
            out[run_id] = (rec.load_object("pred.pkl"), rec.load_object("label.pkl"))
        pickle.dump(out, open({str(run_store["root"] / "loaded.pkl")!r}, "wb"))
        """
    )
    # cwd: Qlib creates its experiments with MLflow's default artifact root, ./mlruns
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=run_store["root"]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    import pickle

    import numpy as np

    from rolling_calib.execution.reader import read_unit
    from rolling_calib.execution.units import UnitKey

    loaded = pickle.loads((run_store["root"] / "loaded.pkl").read_bytes())
    for run in windows:
        pred, label = loaded[run.info.run_id]
        key = UnitKey(run.data.tags["rc.pipeline"], int(run.data.tags["rc.seed"]), int(run.data.tags["rc.window"]))
        unit = read_unit(run_store["store"], key)
        assert list(pred.columns) == ["score"] and list(pred.index.names) == ["datetime", "instrument"]
        assert list(label.columns) == ["LABEL0"] and label.index.equals(pred.index)
        assert np.array_equal(pred["score"].to_numpy(), unit["prediction"].to_numpy())
        assert np.array_equal(label["LABEL0"].to_numpy(), unit["label"].to_numpy())   # the raw label (bp)
        assert (pred.index.get_level_values("datetime") == unit["datetime"].to_numpy()).all()
    qexp = client.get_experiment_by_name("qlib-recorder")
    assert qexp is not None
    (qrun,) = client.search_runs([qexp.experiment_id])
    assert qrun.data.metrics["ic"] == 0.125 and qrun.data.params["model"] == "RollingLSTM"
    # our runs are still there, and re-logging after Qlib wrote is still idempotent
    ours = client.get_experiment_by_name("tiny-sweep")
    assert len(client.search_runs([ours.experiment_id], max_results=1000)) >= 14
    assert track_store(score_store(run_store["store"]), tracking_uri=uri).created == 0


def test_windows_without_a_validation_segment_are_logged(tmp_path):
    """valid_months: 0 (as in workflows/real2018.yaml) leaves windows without a valid segment."""
    path = tiny_experiment(tmp_path, seeds=1, valid_months=0)
    store = tmp_path / "store"
    run_plan(plan_run(load_experiment(path), store=store, n_threads=1), executor=LocalExecutor(workers=1), progress=False)
    uri = default_tracking_uri(store)
    log_store(score_store(store), tracking_uri=uri)
    client = MlflowClient(tracking_uri=uri)
    _, level = runs_by_level(client, client.get_experiment_by_name("tiny-sweep").experiment_id)
    assert len(level["window"]) == 2
    assert {r.data.params["valid_start"] for r in level["window"]} == {"none"}
    assert all(r.data.params["test_start"].startswith("2018-0") for r in level["window"])


def test_tracking_failure_never_fails_run_experiment_and_the_next_run_logs(run_store, tmp_path, monkeypatch):
    """A full disk during logging: run_experiment still returns the scored results and says why
    tracking failed; the next run_experiment logs everything (the store's units are all complete)."""
    from rolling_calib.execution.factory import ExecutorOptions
    from rolling_calib.experiment.flow import RunOptions, run_experiment
    from rolling_calib.tracking import mlflow_log

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    uri = f"sqlite:///{tmp_path / 'orchestrated.db'}"
    options = RunOptions(store=run_store["store"], tracking_uri=uri, executor=ExecutorOptions(workers=1),
                         progress=False)
    monkeypatch.setattr(mlflow_log, "_log_window", full_disk)
    failed = run_experiment(run_store["config"], options)
    assert failed.scores is not None and len(failed.scores.runs) >= 4 and failed.summary.ran == 0
    assert failed.tracking_uri is None
    assert failed.tracking_message.startswith("tracking failed: OSError: [Errno 28] No space left on device; "
                                              f"results are in {run_store['store'].resolve()}; re-run")
    monkeypatch.undo()
    done = run_experiment(run_store["config"], options)
    assert done.tracking_uri == uri and done.tracking_message is None
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("tiny-sweep").experiment_id], max_results=1000)
    assert len(runs) == len(done.scores.runs) * 3 + 3  # comparison, 2 parents, per seed: 1 seed run + 2 windows
    assert all("rc.version" in r.data.tags and r.info.status == "FINISHED" for r in runs)


def test_cli_run_repairs_a_broken_tracking_database_and_says_so(run_store, tmp_path, capsys):
    from rolling_calib.cli import main

    db = tmp_path / "cli.db"
    db.write_bytes(b"not an sqlite file " * 100)
    code = main(["run", str(run_store["yaml"]), "--store", str(run_store["store"]), "--tracking-uri", f"sqlite:///{db}"])
    out = capsys.readouterr().out
    assert code == 0, out
    (moved,) = tmp_path.glob("cli.db.broken-*")
    assert f"MLflow: sqlite:///{db}" in out
    assert (f"tracking database {db} was not a complete MLflow database (not a readable SQLite database: file is "
            f"not a database); moved it aside to {moved} and logging into a fresh {db}") in out


def test_pipeline_runs_log_the_verdicts_exactly_as_compare_prints_them(run_store, tmp_path, capsys):
    """``run`` compares after scoring and tracking logs that comparison: the verdicts, intervals, IC and warnings
    on the pipeline runs, ``compare --json`` itself on the comparison run (real run, real SQLite, no mocks)."""
    import json

    from rolling_calib.cli import main

    uri = f"sqlite:///{tmp_path / 'verdicts.db'}"
    assert main(["run", str(run_store["yaml"]), "--store", str(run_store["store"]), "--tracking-uri", uri,
                 "--json"]) == 0
    capsys.readouterr()
    assert main(["compare", "--store", str(run_store["store"]), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    client = MlflowClient(tracking_uri=uri)
    runs, level = runs_by_level(client, client.get_experiment_by_name("tiny-sweep").experiment_id)
    parents = {r.data.tags["rc.pipeline"]: r.data for r in level["pipeline"]}
    assert printed["pairs"]
    for pair in printed["pairs"]:
        a, b = pair["better"], pair["worse"]
        for metric, v in pair["verdicts"].items():
            first, second = parents[a], parents[b]
            assert first.metrics[f"diff.{b}.{metric}"] == v["difference"]          # exactly
            assert (first.metrics[f"ci_low.{b}.{metric}"], first.metrics[f"ci_high.{b}.{metric}"]) == (v["ci_low"],
                                                                                                      v["ci_high"])
            assert second.metrics[f"diff.{a}.{metric}"] == -v["difference"]         # seen from the other side
            assert (second.metrics[f"ci_low.{a}.{metric}"], second.metrics[f"ci_high.{a}.{metric}"]) == (
                -v["ci_high"], -v["ci_low"])
            word = {None: ("undetermined", "undetermined"), a: ("better", "worse"), b: ("worse", "better")}[v["winner"]]
            assert (first.tags[f"verdict.{b}.{metric}"], second.tags[f"verdict.{a}.{metric}"]) == word
            if v["diebold_mariano"]["p_value"] is not None:
                assert first.metrics[f"timeseries_dm_p.{b}.{metric}"] == v["diebold_mariano"]["p_value"]
            other = v["beside"]     # the future claim beside the period headline, as each pipeline reads it
            word = {None: ("undetermined", "undetermined"), a: ("better", "worse"), b: ("worse", "better")}[
                other["winner"]]
            assert (first.tags[f"verdict_future.{b}.{metric}"], second.tags[f"verdict_future.{a}.{metric}"]) == word
    ids = {r.data.tags["rc.pipeline"]: r.info.run_id for r in level["pipeline"]}
    assert printed["when"]
    for when in printed["when"]:     # when each was better: the consistency line, and each window's difference
        a, b = when["pair"]
        for metric, w in when["metrics"].items():
            assert parents[a].tags[f"when.{b}.{metric}"] == w["consistency"]
            assert parents[b].tags[f"when.{a}.{metric}"].startswith(f"{b} better in ")
            assert parents[a].tags[f"across_windows.{b}.{metric}"] in ("better", "worse", "undetermined",
                                                                        "not enough windows")
            assert parents[a].tags[f"fluctuation.{b}.{metric}"] == (
                f"changed at {w['fluctuation']['left_at']}" if w["fluctuation"]["fired"] else "stable")
            history = client.get_metric_history(ids[a], f"window_diff.{b}.{metric}")
            assert sorted((h.step, h.value) for h in history) == [(x["index"], x["difference"]) for x in w["windows"]]
            history = client.get_metric_history(ids[b], f"window_ci_low.{a}.{metric}")
            assert sorted((h.step, h.value) for h in history) == [(x["index"], -x["ci_high"]) for x in w["windows"]]
    for row in printed["pipelines"]:
        for key in ("ic_mean", "ic_std", "rank_ic_mean", "rank_ic_std", "cql_mean", "ql_std"):
            assert parents[row["pipeline"]].metrics[key] == row[key]
    for warning in printed["warnings"]:
        for name in warning["pipelines"]:
            assert parents[name].tags[f"warning.{warning['kind']}"] == warning["message"]
            assert warning["kind"] in parents[name].tags["rc.warnings"].split(",")
    (comparison,) = level["comparison"]
    logged = json.loads(Path(client.download_artifacts(comparison.info.run_id, "comparison.json", str(tmp_path)))
                        .read_text())
    assert logged == printed
    assert comparison.data.params["compare.n_boot"] == "2000"
