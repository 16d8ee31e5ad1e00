"""Clean stops of ``rolling-calib run`` on a real run: SIGTERM (kill, docker stop) and Ctrl-C (SIGINT to the
process group) cancel the queued units at once, let the running ones finish (saying what they wait for), print one
line, exit 143 / 130 and leave no process behind (the forkserver and its workers included) and no half-written unit;
the same command resumes. Under ``timeout`` (which forwards the signal: the run gets it twice) the running units end
at once. The run starts as from a terminal, wherever the tests were started (``signal_helpers``).

The run: the tiny minute LSTM (about a second a unit), 1 pipeline x 4 seeds x 2 windows = 8 units on 2 workers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from signal_helpers import popen

from runner_helpers import REPO

pytestmark = pytest.mark.slow

TINY = {
    "task.model.kwargs.hidden_size": 4, "task.model.kwargs.num_layers": 1, "task.model.kwargs.n_epochs": 2,
    "task.model.kwargs.finetune_epochs": 1, "task.model.kwargs.batch_size": 256, "task.model.kwargs.early_stop": 2,
    "task.dataset.kwargs.step_len": 10, "task.dataset.kwargs.sample_stride": 30, "task.dataset.kwargs.test_stride": 15,
    "task.dataset.kwargs.handler.kwargs.window": 10, "task.dataset.kwargs.handler.kwargs.norm_samples": 3000,
}
UNITS = 8


def _experiment(tmp: Path, data: Path) -> Path:
    doc = {
        "BASE_CONFIG_PATH": str(REPO / "workflows" / "base.yaml"),
        "qlib_init": {"provider_uri": {"1min": str(data)}, "logging_level": "WARNING"},
        "rolling": {"initial_train_start": "2018-01", "start": "2018-03", "end": "2018-04",
                    "step_months": 1, "valid_months": 1, "seeds": 4},
        "pipelines": {"wd0": dict(TINY)},
    }
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _sidecars(store: Path) -> list[Path]:
    return sorted((store / "units").rglob("w*.json")) if (store / "units").exists() else []


def _start(exp: Path, store: Path, *, wrapper: tuple[str, ...] = ()) -> tuple[subprocess.Popen, list[str]]:
    """The run in its own process group (a terminal's job), once it has completed a unit: (process, its command)."""
    cmd = [sys.executable, "-m", "rolling_calib.cli", "run", str(exp), "--store", str(store), "--workers", "2",
           "--no-tracking", "--json"]
    proc = popen([*wrapper, *cmd], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                 start_new_session=True)   # its own process group: SIGINT goes to it as Ctrl-C would
    deadline = time.time() + 300
    while not _sidecars(store) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None and _sidecars(store), "the run ended or never completed a unit"
    return proc, cmd


def _stopped_line(err: str, sig: signal.Signals) -> str:
    lines = [line for line in err.splitlines() if "stopped by" in line]
    assert lines == [err.strip().splitlines()[-1]] and lines[0].startswith(f"rolling-calib: stopped by {sig.name}: "), err
    return lines[0]


def _check_store(store: Path, line: str) -> None:
    """As many complete units (sidecars, written last) as the line says were kept, and no temporary file (a unit a
    second signal ended may have left its Parquet file without a sidecar: an incomplete unit, recomputed)."""
    done = _sidecars(store)
    assert 1 <= len(done) < UNITS   # queued units were cancelled, not trained
    assert int(line.split(": ")[2].split(" unit(s) completed")[0]) == len(done)
    assert not list(store.rglob("*.tmp"))


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stop_signal_cancels_queued_units_and_leaves_nothing_running(tiny_data, tmp_path, sig, status):
    exp, store = _experiment(tmp_path, tiny_data), tmp_path / "store"
    proc, cmd = _start(exp, store)
    tree = psutil.Process(proc.pid).children(recursive=True)   # the forkserver and the pool's workers
    assert len(tree) >= 3
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)          # Ctrl-C: every process of the terminal's group gets it
    else:
        proc.send_signal(sig)             # kill: the main process only
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == status
    assert out == ""
    line = _stopped_line(err, sig)
    gone, alive = psutil.wait_procs(tree, timeout=30)
    assert alive == [], f"processes left after the run exited: {alive}"
    assert "running unit(s) ended" not in line   # one signal: the running units finished
    if "finished after the signal" in line:       # it said what it waited for
        assert f"stopping ({sig.name}): waiting for " in err.split(line)[0]
    _check_store(store, line)
    done = _sidecars(store)
    assert f"{UNITS - len(done)} queued unit(s) cancelled" in line
    parquets = {p.relative_to(store).with_suffix("") for p in (store / "units").rglob("w??.parquet")}
    assert parquets == {p.relative_to(store).with_suffix("") for p in done}   # every unit file has its sidecar

    resumed = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert (summary["units_skipped"], summary["units_ran"]) == (len(done), UNITS - len(done))


@pytest.mark.skipif(not Path("/usr/bin/timeout").exists() and not Path("/bin/timeout").exists(),
                    reason="no timeout command")
def test_ctrl_c_under_timeout_ends_the_running_units_at_once(tiny_data, tmp_path):
    """``timeout 600 rolling-calib run``: Ctrl-C reaches the run from the terminal and from ``timeout`` (forwarded,
    then SIGCONT): the running units end at once, nothing more is written, and the same command resumes."""
    exp, store = _experiment(tmp_path, tiny_data), tmp_path / "store"
    proc, cmd = _start(exp, store, wrapper=("timeout", "600"))
    tree = psutil.Process(proc.pid).children(recursive=True)   # the run, its forkserver and workers
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    line = _stopped_line(err, signal.SIGINT)
    assert "running unit(s) ended (nothing of them kept)" in line, line
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert alive == [], f"processes left after the run exited: {alive}"
    kept = _sidecars(store)
    _check_store(store, line)
    time.sleep(2.0)
    assert _sidecars(store) == kept   # no unit is written after the run exited
    resumed = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["units_skipped"] == len(kept)
