"""GRU on ``TSDatasetH`` + Alpha158: the runner's predictions equal ``qrun``'s for the same seed and window.

``qrun`` runs the unit's own Qlib task (the window's dates and segments, seed 0, one thread:
``rolling_calib.execution.runner.unit_task``) as an ordinary workflow YAML, in this environment
(``qrun`` needs an MLflow that still takes its default ``./mlruns`` store: the pin in
``pyproject.toml``). The predictions of ``SignalRecord`` (``pred.pkl``) are compared with the
store's unit bit for bit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from daily_helpers import build_daily_store
from zoo_helpers import gru_experiment, run

from rolling_calib.execution.reader import read_unit
from rolling_calib.execution.executors import UnitKey
from rolling_calib.execution.runner import unit_task

pytestmark = pytest.mark.slow


def qrun_command() -> list[str]:
    """``qrun`` next to the interpreter (the console script pyqlib installs), else its module."""
    script = shutil.which("qrun", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-c", "import sys; from qlib.cli.run import run; sys.exit(run())"]


def test_gru_alpha158_predictions_equal_qrun_for_the_same_seed_and_window(tmp_path):
    daily = build_daily_store(tmp_path / "qlib_day")
    plan, summary = run(gru_experiment(tmp_path, daily), tmp_path / "store")
    assert summary.ran == 1
    task, _ = unit_task(plan.pipeline("gru_ts").task, plan.windows[0], seed=0, n_threads=1)
    task["record"] = [{"class": "SignalRecord", "module_path": "qlib.workflow.record_temp",
                       "kwargs": {"model": "<MODEL>", "dataset": "<DATASET>"}}]
    workdir = tmp_path / "qrun"
    workdir.mkdir()
    (workdir / "gru.yaml").write_text(yaml.safe_dump({"qlib_init": plan.qlib_init, "task": task}, sort_keys=False))
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")  # the unit ran with one torch thread
    proc = subprocess.run([*qrun_command(), "gru.yaml"], cwd=workdir, capture_output=True, text=True, timeout=300,
                          env=env)
    hint = ("\nMLflow >= 3.13 refuses qrun's default ./mlruns store: pyproject.toml pins mlflow < 3.13 (re-run make)"
            if "filesystem tracking backend" in proc.stderr else "")
    assert proc.returncode == 0, proc.stderr[-3000:] + hint
    found = list(workdir.glob("mlruns/*/*/artifacts/pred.pkl"))
    assert len(found) == 1, "qrun's SignalRecord kept no predictions"
    pred = pd.read_pickle(found[0])["score"]
    ours = read_unit(plan.store, UnitKey("gru_ts", 0, 0)).set_index(["datetime", "instrument"])["prediction"]
    joined = ours.to_frame().join(pred.rename("qrun"), how="inner")
    assert len(joined) == len(ours)  # every stored prediction (labelled rows) is one qrun made
    assert np.array_equal(joined["prediction"].to_numpy(), joined["qrun"].to_numpy())  # bit for bit
