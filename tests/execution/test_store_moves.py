"""Stores that move, end to end on a real run: LGBModel + Alpha158 with Qlib's SignalRecord (a Qlib recorder per
unit) and rolling-calib's MLflow tracking, both in STORE/mlflow.db. After ``mv`` of the store, ``relocate`` (or
``compare``/``report`` themselves) point the database's artifact locations at the moved store: Qlib's
``R.get_recorder(...).load_object('pred.pkl')`` reads the moved files; after ``cp -r``, the copy reads and logs
into its own files, never the original's.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import yaml

from rolling_calib.cli import main
from rolling_calib.execution import store as st
from rolling_calib.execution.reader import read_unit
from rolling_calib.execution.units import UnitKey

from daily_helpers import build_daily_store

pytestmark = pytest.mark.slow


def _experiment(tmp: Path, data: Path) -> Path:
    handler = {"class": "Alpha158", "module_path": "qlib.contrib.data.handler",
               "kwargs": {"instruments": "all", "start_time": "2013-02-01", "end_time": "2015-03-31",
                          "fit_start_time": "2013-02-01", "fit_end_time": "2014-05-31"}}
    doc = {
        "qlib_init": {"provider_uri": str(data), "logging_level": "WARNING"},
        "task": {
            "model": {"class": "LGBModel", "module_path": "qlib.contrib.model.gbdt",
                      "kwargs": {"loss": "mse", "learning_rate": 0.1, "num_leaves": 8, "num_boost_round": 10,
                                 "early_stopping_rounds": 5, "num_threads": 1, "verbosity": -1}},
            "dataset": {"class": "DatasetH", "module_path": "qlib.data.dataset",
                        "kwargs": {"handler": handler,
                                   "segments": {"train": ["2013-02-01", "2014-05-31"],
                                                "valid": ["2014-06-01", "2014-06-30"],
                                                "test": ["2014-07-01", "2014-09-30"]}}},
            "record": [{"class": "SignalRecord", "module_path": "qlib.workflow.record_temp",
                        "kwargs": {"model": "<MODEL>", "dataset": "<DATASET>"}}],
        },
        "rolling": {"initial_train_start": "2013-02", "start": "2014-07", "end": "2014-09", "step_months": 3,
                    "valid_months": 1, "mode": "scratch", "seeds": 2},
        "pipelines": {"lr10": {}, "lr01": {"task.model.kwargs.learning_rate": 0.01}},
        "compare": [["lr10", "lr01"]],
    }
    path = tmp / "lgb.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _locations(store: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(store / "mlflow.db")) as con:
        return ([loc for (loc,) in con.execute("SELECT artifact_location FROM experiments WHERE experiment_id > 0")]
                + [uri for (uri,) in con.execute("SELECT artifact_uri FROM runs")])


@pytest.fixture(scope="module")
def moved(tmp_path_factory):
    """A run with Qlib recorders and tracking, then ``mv`` of its store; returns (old path, new path)."""
    tmp = tmp_path_factory.mktemp("moves")
    data = build_daily_store(tmp / "qlib_day")
    old = tmp / "store"
    code, out, err = _cli(["run", str(_experiment(tmp, data)), "--store", str(old), "--workers", "1", "--json"])
    assert code == 0, err
    assert json.loads(out)["tracking_uri"] == f"sqlite:///{old.resolve() / 'mlflow.db'}"
    assert all(loc.startswith(old.resolve().as_uri() + "/mlartifacts") for loc in _locations(old))
    new = tmp / "elsewhere" / "moved_store"
    new.parent.mkdir()
    shutil.move(old, new)
    return old, new


def test_relocate_then_qlib_R_loads_pred_pkl_from_the_moved_store(moved):
    import qlib
    from qlib.workflow import R

    old, new = moved
    code, out, err = _cli(["relocate", "--store", str(new), "--json"])
    assert code == 0, err
    result = json.loads(out)
    assert result["moved_from"] == [old.resolve().as_uri() + "/mlartifacts"] and result["runs"] >= 4
    assert all(loc.startswith((new.resolve() / "mlartifacts").as_uri()) for loc in _locations(new))
    assert _cli(["relocate", "--store", str(new)])[1].strip().endswith("are already its own ("
                                                                       f"{(new.resolve() / 'mlartifacts').as_uri()})")
    manifest = st.read_manifest(new)
    qlib.init(provider_uri={"day": str(manifest["experiment"]["qlib_init"]["provider_uri"]["day"])}, region="us",
              kernels=1, exp_manager={"class": "MLflowExpManager", "module_path": "qlib.workflow.expm",
                                      "kwargs": {"uri": f"sqlite:///{new / 'mlflow.db'}", "default_exp_name": "x"}})
    for key in (UnitKey("lr10", 0, 0), UnitKey("lr01", 1, 0)):
        side = st.read_sidecar(new, key)["qlib_recorder"]
        rec = R.get_recorder(recorder_id=side["recorder_id"], experiment_name=key.pipeline)
        pred = rec.load_object("pred.pkl")
        frame = read_unit(new, key).set_index(["datetime", "instrument"])
        joined = pred["score"].to_frame().join(frame, how="inner")
        assert len(joined) == len(frame) and np.allclose(joined["score"], joined["prediction"])
    assert not old.exists()


def test_compare_and_report_on_a_copy_use_the_copys_files_only(moved, tmp_path):
    _, new = moved
    copy = tmp_path / "copy"
    shutil.copytree(new, copy)
    assert all(loc.startswith((new.resolve() / "mlartifacts").as_uri()) for loc in _locations(copy))
    code, out, err = _cli(["compare", "--store", str(copy), "--json", "--n-boot", "50"])
    assert code == 0, err
    assert f"note: {(copy / 'mlflow.db').resolve()}: the store moved: " in err
    assert {p["pipeline"] for p in json.loads(out)["pipelines"]} == {"lr10", "lr01"}
    assert all(loc.startswith((copy.resolve() / "mlartifacts").as_uri()) for loc in _locations(copy))
    before = sorted(p.relative_to(new) for p in (new / "mlartifacts").rglob("*"))
    code, _, err = _cli(["report", "--store", str(copy), "--out", str(tmp_path / "rep"), "--n-boot", "50"])
    assert code == 0, err
    assert sorted(p.relative_to(new) for p in (new / "mlartifacts").rglob("*")) == before   # the original untouched
    assert all(loc.startswith((copy.resolve() / "mlartifacts").as_uri()) for loc in _locations(copy))
