"""End to end on a tiny synthetic Qlib store (real provider, real model, no mocks).

One module-scoped run trains 2 pipelines x 2 seeds x 2 windows; the tests then check
window boundaries and coverage, fine-tuning from the predecessor's checkpoint, weight
decay reaching the model, resume after an interruption (same numbers), skip on re-run,
stale-config detection, determinism, and the compare/report commands on the result.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from rolling_calib.execution import store as st
from rolling_calib.execution.reader import read_unit
from rolling_calib.core.calibration import Calibration
from rolling_calib.config.experiment import load_experiment
from rolling_calib.analysis.comparison import compare_store
from rolling_calib.analysis.scoring import score_store
from rolling_calib.core.tables import sig
from rolling_calib.execution.executors import LocalExecutor, UnitKey
from rolling_calib.execution.runner import check_store_coverage, pending_units, plan_run, run_plan, window_task
from rolling_calib.core.resampling import Resampling

from runner_helpers import REPO
from signal_helpers import popen

pytestmark = pytest.mark.slow

#: Tiny model and sampling: every unit trains in about a second.
TINY = {
    "task.model.kwargs.hidden_size": 4,
    "task.model.kwargs.num_layers": 1,
    "task.model.kwargs.n_epochs": 2,
    "task.model.kwargs.finetune_epochs": 1,
    "task.model.kwargs.batch_size": 256,
    "task.model.kwargs.early_stop": 2,
    "task.dataset.kwargs.step_len": 10,
    "task.dataset.kwargs.sample_stride": 30,
    "task.dataset.kwargs.test_stride": 15,
    "task.dataset.kwargs.handler.kwargs.window": 10,
    "task.dataset.kwargs.handler.kwargs.norm_samples": 3000,
}


def tiny_experiment(tmp: Path, data: Path, **extra) -> Path:
    """An experiment file over base.yaml: Jan-Apr 2018, evaluate Mar-Apr, 1-month windows."""
    doc = {
        "BASE_CONFIG_PATH": str(REPO / "workflows" / "base.yaml"),
        "qlib_init": {"provider_uri": {"1min": str(data)}, "logging_level": "WARNING"},
        "rolling": {"initial_train_start": "2018-01", "start": "2018-03", "end": "2018-04",
                    "step_months": 1, "valid_months": 1, "seeds": 2},
        "pipelines": {"wd0": dict(TINY), "wdbig": dict(TINY, **{"task.model.kwargs.weight_decay": 0.5})},
        "compare": [["wd0", "wdbig"]],
    }
    doc.update(extra)
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, tiny_data):
    tmp = tmp_path_factory.mktemp("e2e")
    config = load_experiment(tiny_experiment(tmp, tiny_data))
    plan = plan_run(config, store=tmp / "store")
    summary = run_plan(plan, executor=LocalExecutor(workers=1), progress=False)
    return config, plan, summary


def test_windows_have_exact_minute_boundaries(full_run):
    _, plan, _ = full_run
    w0, w1 = plan.windows
    assert w0.train.as_tuple() == ("2018-01-02 09:30:00", "2018-01-31 15:59:00")
    assert w0.valid.as_tuple() == ("2018-02-01 09:30:00", "2018-02-28 15:59:00")
    assert w0.test.as_tuple() == ("2018-03-01 09:30:00", "2018-03-29 15:59:00")  # 03-30: Good Friday
    assert w1.train.as_tuple() == ("2018-02-01 09:30:00", "2018-02-28 15:59:00")  # fine-tune: the new month
    assert w1.valid.as_tuple() == ("2018-03-01 09:30:00", "2018-03-29 15:59:00")
    assert w1.test.as_tuple() == ("2018-04-02 09:30:00", "2018-04-30 15:59:00")
    task = window_task(plan.pipeline("wd0").task, w1, seed=1, n_threads=1)
    assert task["dataset"]["kwargs"]["segments"]["test"] == ["2018-04-02 09:30:00", "2018-04-30 15:59:00"]
    assert task["dataset"]["kwargs"]["handler"]["kwargs"]["fit_start_time"] == "2018-01-02 09:30:00"
    assert task["model"]["kwargs"]["seed"] == 1


def test_store_layout_coverage_and_manifest(full_run):
    _, plan, summary = full_run
    assert summary.ran == 8 and summary.skipped == 0
    manifest = st.read_manifest(plan.store)
    assert set(manifest["pipelines"]) == {"wd0", "wdbig"}
    assert manifest["versions"]["pyqlib"] == "0.9.7" and "torch" in manifest["versions"]
    assert manifest["pipelines"]["wd0"]["config_hash"] != manifest["pipelines"]["wdbig"]["config_hash"]
    first = manifest["history"][0]
    assert first["units_ran"] == 8 and first["wall_s"] > 0 and first["executor"] == "LocalExecutor"
    for key in plan.keys():
        frame = read_unit(plan.store, key)
        w = plan.windows[key.window]
        assert list(frame.columns) == ["datetime", "instrument", "prediction", "label"]
        assert frame["datetime"].min().date() == w.test.start.date()
        assert frame["datetime"].max().date() == w.test.end.date()
        assert w.test.contains(frame["datetime"]).all()
        assert set(frame["instrument"]) == {"AAPL", "F", "MSFT"}
        side = st.read_sidecar(plan.store, key)
        assert side["rows"] == len(frame) and side["seed"] == key.seed and side["timings"]["total_s"] > 0
    check_store_coverage(plan)  # raises on a gap or overlap
    merged = pd.concat([read_unit(plan.store, UnitKey("wd0", 0, w)) for w in (0, 1)])
    assert not merged.duplicated(["datetime", "instrument"]).any()


def test_finetune_starts_from_previous_window_checkpoint(full_run):
    _, plan, _ = full_run
    w0 = st.read_sidecar(plan.store, UnitKey("wd0", 1, 0))
    w1 = st.read_sidecar(plan.store, UnitKey("wd0", 1, 1))
    assert w0["started_from"] is None
    assert w1["started_from"] == {"checkpoint": w0["checkpoint"], "sha256": w0["checkpoint_sha256"]}


def test_weight_decay_reaches_the_model(full_run):
    import torch

    _, plan, _ = full_run
    ckpt = torch.load(plan.store / st.read_sidecar(plan.store, UnitKey("wdbig", 0, 0))["checkpoint"], weights_only=True)
    assert ckpt["meta"]["kwargs"]["weight_decay"] == 0.5
    same_seed = [read_unit(plan.store, UnitKey(p, 0, 0))["prediction"] for p in ("wd0", "wdbig")]
    assert not same_seed[0].equals(same_seed[1])
    # a strong L2 penalty shrinks the weights
    norms = {}
    for p in ("wd0", "wdbig"):
        state = torch.load(plan.store / st.read_sidecar(plan.store, UnitKey(p, 0, 0))["checkpoint"], weights_only=True)
        norms[p] = sum(float(v.float().norm()) for v in state["weights"].values())
    assert norms["wdbig"] < norms["wd0"]


def test_rerun_skips_completed_units(full_run):
    _, plan, first = full_run
    again = run_plan(plan, executor=LocalExecutor(workers=1), progress=False)
    assert again.ran == 0 and again.skipped == 8


class _StopAfter(LocalExecutor):
    """A local executor whose process 'dies' after ``limit`` units (the rest never run)."""

    def __init__(self, limit: int) -> None:
        super().__init__(workers=1)
        self.limit = limit

    def run(self, tasks, work, *, on_done=None):
        done = []

        def counted(key):
            if len(done) >= self.limit:
                raise KeyboardInterrupt("simulated interruption")
            done.append(key)
            return work(key)

        return super().run(tasks, counted, on_done=on_done)


def test_interrupted_run_resumes_with_identical_numbers(full_run, tiny_data, tmp_path):
    config, reference, _ = full_run
    plan = plan_run(config, store=tmp_path / "store", pipelines=["wd0"])
    with pytest.raises(KeyboardInterrupt):
        run_plan(plan, executor=_StopAfter(3), progress=False)
    assert sum(st.is_complete(plan.store, k, plan.pipeline("wd0").config_hash) for k in plan.keys()) == 3
    resumed = run_plan(plan, executor=LocalExecutor(workers=1), progress=False)
    assert resumed.skipped == 3 and resumed.ran == 1
    for key in plan.keys():  # same seeds -> bit-identical predictions, however the run was cut
        pd.testing.assert_frame_equal(read_unit(plan.store, key), read_unit(reference.store, key))


def test_kill_9_mid_run_then_resume(full_run, tiny_data, tmp_path):
    config, reference, _ = full_run
    exp = tiny_experiment(tmp_path, tiny_data)
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "rolling_calib.cli", "run", str(exp), "--store", str(store), "--pipelines", "wd0",
           "--workers", "1", "--no-tracking", "--json"]   # one process: the kill stops every unit at once
    proc = popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)   # signalled: signal_helpers
    first = st.unit_paths(store, UnitKey("wd0", 0, 0)).sidecar
    deadline = time.time() + 120
    while not first.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert first.exists(), "the subprocess never completed a unit"
    plan = plan_run(config, store=store, pipelines=["wd0"])
    before = sum(st.is_complete(store, k, plan.pipeline("wd0").config_hash) for k in plan.keys())
    assert before < 4
    resumed = run_plan(plan, executor=LocalExecutor(workers=1), progress=False)
    assert resumed.skipped == before and resumed.ran == 4 - before
    for key in plan.keys():
        pd.testing.assert_frame_equal(read_unit(store, key), read_unit(reference.store, key))
    assert not list(store.rglob("*.tmp"))


def test_changed_config_never_reuses_stale_units(full_run, tiny_data, tmp_path):
    _, reference, _ = full_run
    changed = load_experiment(tiny_experiment(tmp_path, tiny_data),
                              overrides={"pipelines.wd0": dict(TINY, **{"task.model.kwargs.lr": 0.01})})
    plan = plan_run(changed, store=reference.store, pipelines=["wd0", "wdbig"])
    assert plan.pipeline("wdbig").config_hash == reference.pipeline("wdbig").config_hash
    assert plan.pipeline("wd0").config_hash != reference.pipeline("wd0").config_hash
    copy_store = tmp_path / "copy"
    import shutil

    shutil.copytree(reference.store, copy_store)
    plan = plan_run(changed, store=copy_store, pipelines=["wd0", "wdbig"])
    pending, skipped, stale, corrupt = pending_units(plan)
    assert sorted(k.pipeline for k in pending) == ["wd0"] * 4
    assert skipped == 4 and stale == 4 and corrupt == []
    assert len(list((copy_store / "stale" / "wd0").rglob("w0[0-9].parquet"))) == 4
    assert not st.unit_paths(copy_store, UnitKey("wd0", 0, 0)).parquet.exists()


def test_scratch_mode_retrains_window_1(full_run, tiny_data, tmp_path):
    _, reference, _ = full_run
    path = tiny_experiment(tmp_path, tiny_data)
    config = load_experiment(path, overrides={"rolling.mode": "scratch", "rolling.seeds": 1})
    plan = plan_run(config, store=tmp_path / "scratch", pipelines=["wd0"])
    assert plan.windows[1].train.as_tuple() == ("2018-01-02 09:30:00", "2018-02-28 15:59:00")  # expanding
    run_plan(plan, executor=LocalExecutor(workers=1), progress=False)
    assert st.read_sidecar(plan.store, UnitKey("wd0", 0, 1))["started_from"] is None
    pd.testing.assert_frame_equal(  # window 0 is the same training in both modes
        read_unit(plan.store, UnitKey("wd0", 0, 0)), read_unit(reference.store, UnitKey("wd0", 0, 0))
    )
    assert not read_unit(plan.store, UnitKey("wd0", 0, 1))["prediction"].equals(
        read_unit(reference.store, UnitKey("wd0", 0, 1))["prediction"]
    )


def test_scores_compare_and_report_on_the_run(full_run, tmp_path, capsys):
    from rolling_calib.cli import main

    _, plan, _ = full_run
    scores = score_store(plan.store)
    assert len(scores.runs) == 4 and (scores.runs["n_all"] > scores.runs["n_scored"]).all()
    assert list(scores.periods["period"].unique()) == ["2018-03", "2018-04"]
    comparison = compare_store(scores, resampling=Resampling(n_boot=100))
    assert main(["compare", "--store", str(plan.store), "--json", "--n-boot", "100"]) == 0
    data = json.loads(capsys.readouterr().out)
    by_name = {p["pipeline"]: p for p in data["pipelines"]}
    want = comparison.summary.set_index("pipeline")
    assert by_name["wd0"]["cql_mean"] == pytest.approx(want.loc["wd0", "cql_mean"])
    assert main(["report", "--store", str(plan.store), "--out", str(tmp_path / "rep"), "--n-boot", "100"]) == 0
    assert sig(want.loc['wdbig', 'ql_mean']) in (tmp_path / "rep" / "report.html").read_text()


def test_corrupt_manifest_stops_run_and_report_with_the_file_named(full_run, tiny_data, tmp_path, capsys):
    """Only a missing manifest is a new store: a corrupt one is never overwritten (it holds every pipeline)."""
    import shutil

    from rolling_calib.cli import main

    _, plan, _ = full_run
    store = tmp_path / "store"
    shutil.copytree(plan.store, store)
    manifest = store / st.MANIFEST
    text = manifest.read_text()
    manifest.write_text(text[: len(text) // 2])  # truncated, as by a full disk outside our atomic writes
    exp = tiny_experiment(tmp_path, tiny_data)
    assert main(["run", str(exp), "--store", str(store), "--pipelines", "wd0", "--no-tracking"]) == 2
    err = capsys.readouterr().err
    assert f"{manifest}:" in err and "invalid JSON in manifest" in err
    assert manifest.read_text() == text[: len(text) // 2], "the corrupt manifest must be left as it was"
    assert main(["report", "--store", str(store), "--out", str(tmp_path / "rep"), "--n-boot", "50"]) == 2
    assert f"{manifest}:" in capsys.readouterr().err
    assert not (tmp_path / "rep" / "report.html").exists()


def test_corrupt_sidecar_is_an_error_not_a_missing_unit(full_run, tmp_path):
    import shutil

    _, plan, _ = full_run
    store = tmp_path / "store"
    shutil.copytree(plan.store, store)
    key = UnitKey("wd0", 0, 1)
    st.unit_paths(store, key).sidecar.write_text('{"config_hash": ')
    with pytest.raises(st.CorruptStoreFileError, match="w01.json: corrupt unit sidecar"):
        st.is_complete(store, key, plan.pipeline("wd0").config_hash)
    with pytest.raises(st.CorruptStoreFileError, match="corrupt unit sidecar"):
        score_store(store)


def test_changed_data_makes_units_stale(full_run, tiny_data, tmp_path):
    """Values changed in the middle of a feature file (where a sampled fingerprint looks at nothing) are seen."""
    import shutil

    import numpy as np

    _, plan, _ = full_run
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    store = tmp_path / "store"
    shutil.copytree(plan.store, store)
    exp = tiny_experiment(tmp_path, data)
    before = plan_run(load_experiment(exp), store=store, pipelines=["wd0"])
    assert before.pipeline("wd0").config_hash == plan.pipeline("wd0").config_hash, "a byte-identical copy is the same data"
    close = data / "features" / "aapl" / "close.1min.bin"
    values = np.fromfile(close, dtype="<f4")
    middle = slice(len(values) // 2 - 3000, len(values) // 2 + 3000)
    values[middle] *= 1.5
    values.tofile(close)
    after = plan_run(load_experiment(exp), store=store, pipelines=["wd0"])
    assert after.pipeline("wd0").config_hash != before.pipeline("wd0").config_hash
    assert after.data["features"] != before.data["features"]
    pending, skipped, stale, corrupt = pending_units(after)
    assert len(pending) == 4 and skipped == 0 and stale == 4 and corrupt == []


def test_pipelines_of_one_run_share_one_shared_hash(full_run):
    _, plan, _ = full_run
    entries = st.read_manifest(plan.store)["pipelines"]
    hashes = {entries[name]["shared_hash"] for name in ("wd0", "wdbig")}
    assert len(hashes) == 1 and compare_store(score_store(plan.store, progress=False), resampling=Resampling(n_boot=50)).notes == []


def test_units_keep_validation_predictions_for_source_validation(full_run):
    import pandas as pd

    from rolling_calib.execution.units import UnitKey

    _, plan, _ = full_run
    for w in plan.windows:
        key = UnitKey("wd0", 0, w.index)
        side = st.read_sidecar(plan.store, key)
        frame = pd.read_parquet(st.unit_paths(plan.store, key).valid_parquet)
        assert side["valid_rows"] == len(frame) > 0
        assert list(frame.columns) == list(st.UNIT_COLUMNS)
        assert w.valid.contains(frame["datetime"]).all()
    scores = score_store(plan.store, calibration=Calibration(source="validation"))
    assert (scores.runs["n_scored"] == scores.runs["n_all"]).all()
    assert scores.runs["cql_refit_first"].notna().all()
