"""workflows/base.yaml is an ordinary Qlib workflow: plain ``qrun`` trains and predicts one window."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runner_helpers import REPO

pytestmark = pytest.mark.slow


def test_qrun_runs_base_workflow_for_one_window(tmp_path):
    from data_prep import build_synthetic_store

    data = build_synthetic_store(tmp_path / "data", start="2018-01-01", end="2018-03-31", symbols=["AAPL", "F"], seed=2)
    seg = {"train": ["2018-01-02 09:30:00", "2018-01-31 15:59:00"],
           "valid": ["2018-02-01 09:30:00", "2018-02-28 15:59:00"],
           "test": ["2018-03-01 09:30:00", "2018-03-29 15:59:00"]}
    overlay = {
        "BASE_CONFIG_PATH": str(REPO / "workflows" / "base.yaml"),
        "qlib_init": {"provider_uri": {"1min": str(data)}, "logging_level": "WARNING"},
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
    path = tmp_path / "one_window.yaml"
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
