"""workflows/base.yaml is an ordinary Qlib workflow: plain ``qrun`` trains and predicts one window, and the
configuration ``qrun`` read (saved in its recorder) is the one rolling-calib reads from the same file."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runner_helpers import REPO

pytestmark = pytest.mark.slow


def test_qrun_runs_base_workflow_for_one_window(tmp_path, monkeypatch):
    from data_prep import build_synthetic_store
    from rolling_calib.config.experiment import _read_with_base

    data = build_synthetic_store(tmp_path / "data", start="2018-01-01", end="2018-03-31", symbols=["AAPL", "F"], seed=2)
    seg = {"train": ["2018-01-02 09:30:00", "2018-01-31 15:59:00"],
           "valid": ["2018-02-01 09:30:00", "2018-02-28 15:59:00"],
           "test": ["2018-03-01 09:30:00", "2018-03-29 15:59:00"]}
    # qrun's reading: the file is a Jinja2 template over the environment, and BASE_CONFIG_PATH is
    # looked up in the current directory before the file's own (conf/base.yaml is shadowed)
    shutil.copy(REPO / "workflows" / "base.yaml", tmp_path / "base.yaml")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "base.yaml").write_text("experiment_name: shadowed\n")
    monkeypatch.setenv("RC_QRUN_LOG_LEVEL", "WARNING")
    overlay = {
        "BASE_CONFIG_PATH": "base.yaml",
        "qlib_init": {"provider_uri": {"1min": str(data)}, "logging_level": "{{ RC_QRUN_LOG_LEVEL }}"},
        "task": {
            "model": {"kwargs": {"hidden_size": 4, "num_layers": 1, "n_epochs": 1, "batch_size": 256}},
            "dataset": {"kwargs": {
                "step_len": 10, "sample_stride": 60, "test_stride": 30, "segments": seg,
                "handler": {"kwargs": {"window": 10, "norm_samples": 2000, "start_time": seg["train"][0],
                                       "end_time": seg["test"][1], "fit_start_time": seg["train"][0],
                                       "fit_end_time": seg["train"][1]}},
            }},
        },
    }
    path = tmp_path / "conf" / "one_window.yaml"
    path.write_text(yaml.safe_dump(overlay))
    qrun = shutil.which("qrun", path=str(Path(sys.executable).parent))
    assert qrun, "qrun (installed with pyqlib) not found next to the interpreter"
    proc = subprocess.run([qrun, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    preds = list(tmp_path.glob("mlruns/*/*/artifacts/pred.pkl"))
    assert len(preds) == 1  # Qlib's SignalRecord saved the window's predictions through the recorder
    import pandas as pd

    pred = pd.read_pickle(preds[0])
    times = pred.index.get_level_values("datetime")
    assert times.min() >= pd.Timestamp(seg["test"][0]) and times.max() <= pd.Timestamp(seg["test"][1])
    assert set(pred.index.get_level_values("instrument")) == {"AAPL", "F"}

    (saved,) = tmp_path.glob("mlruns/*/*/artifacts/config")  # what qrun read, saved by qrun itself
    read_by_qrun = pd.read_pickle(saved)
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning, match="the current directory comes first"):
        ours, _ = _read_with_base(path)
    assert read_by_qrun.pop("BASE_CONFIG_PATH") == "base.yaml"
    # the recorder keeps the task after training, its records' <MODEL>/<DATASET> filled with the objects
    records = [{k: v for k, v in r.items() if k != "kwargs"} for r in read_by_qrun["task"].pop("record")]
    assert records == [{k: v for k, v in r.items() if k != "kwargs"} for r in ours["task"].pop("record")]
    assert ours == read_by_qrun
    assert ours["qlib_init"]["logging_level"] == "WARNING" and ours["experiment_name"] == "rolling-calib"
