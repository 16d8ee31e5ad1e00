"""Result store and evaluation on synthetic prediction frames (no Qlib, no training)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from runner_helpers import rewrite_unit, write_fake_store

from rolling_calib.analysis.comparison import compare_store
from rolling_calib.analysis.scoring import score_store
from rolling_calib.core.calibration import Calibration
from rolling_calib.core.schedule import CoverageError
from rolling_calib.core.tables import sig
from rolling_calib.execution import store as st
from rolling_calib.execution.executors import UnitKey
from rolling_calib.execution.reader import load_run
from rolling_calib.core.resampling import Resampling

PIPES = {"calm": {"bias_sd": 0.2, "noise": 1.0}, "wild": {"bias_sd": 2.0, "noise": 1.5}}


def _hand_cql(frame: pd.DataFrame) -> tuple[float, float, float]:
    """QL (all), QL (months 2..K), CQL computed the slow, obvious way."""
    month = frame["datetime"].dt.to_period("M")
    months = sorted(month.unique())
    resid = frame["label"] - frame["prediction"]
    sq, sq_cal, _n = [], [], 0
    for prev, cur in zip(months, months[1:]):
        c = resid[month == prev].mean()
        rows = month == cur
        sq_cal.extend(((frame["label"][rows] - (frame["prediction"][rows] + c)) ** 2).tolist())
        sq.extend((resid[rows] ** 2).tolist())
    return float((resid**2).mean()), float(np.mean(sq)), float(np.mean(sq_cal))


def test_atomic_writes_leave_no_temp_files(tmp_path):
    st.atomic_write_json(tmp_path / "a" / "x.json", {"b": 1, "a": [1, 2]})
    st.atomic_write_parquet(tmp_path / "a" / "x.parquet", pd.DataFrame({"v": [1.0]}))
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["x.json", "x.parquet"]
    assert json.loads((tmp_path / "a" / "x.json").read_text()) == {"a": [1, 2], "b": 1}


def test_unit_paths_and_completion(tmp_path):
    key = UnitKey("wd0", 2, 1)
    paths = st.unit_paths(tmp_path, key)
    assert paths.parquet == tmp_path / "units" / "wd0" / "seed2" / "w01.parquet"
    assert not st.is_complete(tmp_path, key, "h1")
    st.atomic_write_parquet(paths.parquet, pd.DataFrame({c: [] for c in st.UNIT_COLUMNS}))
    assert not st.is_complete(tmp_path, key, "h1")  # no sidecar yet: not complete
    st.atomic_write_json(paths.sidecar, {"config_hash": "h1"})
    assert st.is_complete(tmp_path, key, "h1")
    assert not st.is_complete(tmp_path, key, "h2")
    dest = st.move_stale(tmp_path, key, "h2")
    assert dest is not None and (dest / "w01.parquet").is_file() and not paths.sidecar.exists()
    assert st.move_stale(tmp_path, key, "h2") is None


def test_manifest_merges_pipelines_and_seeds(tmp_path):
    st.write_manifest(tmp_path, pipelines={"a": {"config_hash": "1", "seeds": [0, 1]}}, extra={"x": 1})
    st.write_manifest(tmp_path, pipelines={"a": {"config_hash": "1", "seeds": [2]}, "b": {"config_hash": "9", "seeds": [0]}}, extra={})
    m = st.read_manifest(tmp_path)
    assert m["pipelines"]["a"]["seeds"] == [0, 1, 2] and m["pipelines"]["b"]["seeds"] == [0] and m["x"] == 1
    st.write_manifest(tmp_path, pipelines={"a": {"config_hash": "2", "seeds": [5]}}, extra={})
    assert st.read_manifest(tmp_path)["pipelines"]["a"]["seeds"] == [5]  # new hash: old seeds are not valid


def test_read_manifest_errors_name_the_file(tmp_path):
    with pytest.raises(ValueError, match="manifest.json: no manifest"):
        st.read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("{bad")
    with pytest.raises(ValueError, match="manifest.json:1: invalid JSON"):
        st.read_manifest(tmp_path)


def test_score_store_matches_hand_computation(tmp_path):
    _, frames = write_fake_store(tmp_path, pipelines=PIPES, seeds=3)
    scores = score_store(tmp_path)
    assert list(scores.runs.columns) == ["pipeline", "seed", "ql", "ql_scored", "cql", "n_all", "n_scored",
                                         "ic", "icir", "rank_ic", "cql_refit_first", "cql_rest",
                                         "ql_refit_first", "ql_rest", "excess_return", "excess_return_cost"]
    assert scores.runs[["excess_return", "excess_return_cost"]].isna().all().all()   # no backtest in this store
    assert set(["pipeline", "seed", "period", "start", "rows", "bias", "ql", "cql", "scored"]) <= set(scores.periods.columns)
    assert len(scores.runs) == 6 and scores.incomplete == []
    for row in scores.runs.itertuples():
        ql, ql_scored, cql = _hand_cql(frames[(row.pipeline, row.seed)])
        assert row.ql == pytest.approx(ql, rel=1e-10)
        assert row.ql_scored == pytest.approx(ql_scored, rel=1e-10)
        assert row.cql == pytest.approx(cql, rel=1e-10)
    # 4 evaluation months per run, the first unscored
    per_run = scores.periods.groupby(["pipeline", "seed"])["scored"].agg(["size", "sum"])
    assert (per_run["size"] == 4).all() and (per_run["sum"] == 3).all()


def test_compare_store_direction_accuracy_and_budget(tmp_path):
    write_fake_store(tmp_path, pipelines=PIPES, seeds=6)
    scores = score_store(tmp_path)
    result = compare_store(scores, resampling=Resampling(n_boot=300, seed=1))
    summary = result.summary.set_index("pipeline")
    calm = scores.scores_of("calm")
    assert summary.loc["calm", "ql_std"] == pytest.approx(np.std(calm["ql"], ddof=1))
    ratio = np.std(calm["ql_scored"], ddof=1) / np.std(calm["cql"], ddof=1)
    assert summary.loc["calm", "seed_budget"] == pytest.approx(6 * ratio**2)
    assert summary.loc["calm", "std_ratio"] == pytest.approx(1 / ratio)
    assert scores.compare == [("calm", "wild")]
    (pair,) = result.pairs
    assert pair.better == "calm"  # less bias spread, less noise: lower QL
    acc = pair.accuracies["cql"]
    assert acc.ci_low <= acc.accuracy <= acc.ci_high
    # the calibrated metric removes the bias spread: CQL separates the pipelines at least as well as QL
    assert acc.accuracy >= pair.accuracies["ql"].accuracy
    data = json.loads(json.dumps(result.to_dict()))
    assert data["pairs"][0]["better"] == "calm" and data["bootstrap"]["seed"] == 1
    text = result.format()
    assert "calm" in text and sig(summary.loc['calm', 'cql_mean']) in text


def test_incomplete_and_stale_runs_are_left_out_and_reported(tmp_path):
    write_fake_store(tmp_path, pipelines=PIPES, seeds=3)
    st.unit_paths(tmp_path, UnitKey("calm", 1, 1)).sidecar.unlink()
    stale = st.read_sidecar(tmp_path, UnitKey("wild", 2, 0))   # a unit of an older configuration (checksum kept)
    st.atomic_write_json(st.unit_paths(tmp_path, UnitKey("wild", 2, 0)).sidecar, {**stale, "config_hash": "old"})
    scores = score_store(tmp_path)
    assert len(scores.runs) == 4
    assert any("calm__seed1__w01 is missing" in s for s in scores.incomplete)
    assert any("wild__seed2__w00 is stale" in s for s in scores.incomplete)


def test_load_run_detects_rows_outside_window_and_duplicates(tmp_path):
    windows, _ = write_fake_store(tmp_path, pipelines={"a": {}}, seeds=1)
    key = UnitKey("a", 0, 1)
    path = st.unit_paths(tmp_path, key).parquet
    frame = pd.read_parquet(path)
    frame.loc[0, "datetime"] = windows[0].test.start  # a row of window 0 inside window 1's file
    rewrite_unit(tmp_path, key, frame)
    with pytest.raises(CoverageError, match="outside test segment"):
        load_run(tmp_path, "a", 0)
    with pytest.raises(CoverageError):
        score_store(tmp_path)


def test_score_store_unknown_pipeline(tmp_path):
    write_fake_store(tmp_path, pipelines={"a": {}}, seeds=1)
    with pytest.raises(ValueError, match="--pipelines: zzz not in"):
        score_store(tmp_path, pipelines=["zzz"])


def test_weekly_and_per_instrument_calibration(tmp_path):
    write_fake_store(tmp_path, pipelines={"a": {}}, seeds=2)
    weekly = score_store(tmp_path, calibration=Calibration(period="week", bias="per_instrument"))
    assert weekly.periods.groupby("seed").size().min() > 12
    assert all(math.isfinite(v) for v in weekly.runs["cql"])


def test_data_identity_tracks_content_not_build_time(tmp_path):
    from data_prep import build_synthetic_store

    def build(name, seed):
        return build_synthetic_store(tmp_path / name, start="2018-01-02", end="2018-01-05", symbols=["AAPL", "F"], seed=seed)

    a, b, c = build("a", 1), build("b", 1), build("c", 2)
    ids = [{k: v for k, v in st.data_identity(d, instruments=["us25"]).items() if k != "path"} for d in (a, b, c)]
    assert ids[0] == ids[1]  # same data rebuilt elsewhere: same identity (meta.json timings ignored)
    assert ids[0]["features"] != ids[2]["features"]  # another seed: other prices, other identity


def test_compare_notes_pipelines_trained_under_different_shared_settings(tmp_path):
    """After a partial re-run under a changed base config, compare says the pipelines mix configurations."""
    write_fake_store(tmp_path, pipelines={"a": {"bias_sd": 1.0}, "b": {"bias_sd": 1.0}}, seeds=3)
    manifest = st.read_manifest(tmp_path)
    assert compare_store(score_store(tmp_path, progress=False), resampling=Resampling(n_boot=50)).notes == []
    manifest["pipelines"]["a"]["shared_hash"] = "1111"
    manifest["pipelines"]["b"]["shared_hash"] = "2222"
    st.atomic_write_json(tmp_path / st.MANIFEST, manifest)
    comparison = compare_store(score_store(tmp_path, progress=False), resampling=Resampling(n_boot=50))
    assert len(comparison.notes) == 1
    assert "a (shared config 1111); b (shared config 2222)" in comparison.notes[0]
    assert "Note: pipelines come from runs with different shared settings" in comparison.format()
    assert comparison.to_dict()["notes"] == comparison.notes


def test_report_that_cannot_be_written_is_a_message_not_a_traceback(tmp_path, capsys):
    from rolling_calib.cli import main

    write_fake_store(tmp_path / "store", pipelines={"a": {}, "b": {}}, seeds=2)
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    assert main(["report", "--store", str(tmp_path / "store"), "--out", str(blocker / "report"), "--n-boot", "50"]) == 2
    err = capsys.readouterr().err
    assert f"cannot write the report to {blocker / 'report'}" in err and "pass --out DIR" in err
