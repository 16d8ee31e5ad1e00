"""Stops of the local pool (issue 39): the first signal says what it waits for, a second one (or ``timeout``'s
forwarded copy) ends the running units at once, ``kill -9`` of the run ends its workers too.

Each test runs the real pool (``LocalExecutor``, forkserver workers) in a child process started as from a
terminal (``signal_helpers``), with units that wait for a file the test writes (``stop_helpers``): nothing
depends on how fast this machine is; every wait is for a file, a line or a process, with a generous limit.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from signal_helpers import popen
from stop_helpers import done, started

from rolling_calib.execution.executors import _POOL_CONTEXT, end_workers

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
#: Seconds any wait of these tests may take (a loaded 2-core machine starts a pool in a few seconds).
PATIENCE = 180.0


def _until(condition, what: str, timeout: float = PATIENCE):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"waited {timeout:.0f} s for {what}")


def _start(folder: Path, *, units: int = 4, wrapper: tuple[str, ...] = (), executor: str = "local") -> subprocess.Popen:
    """The pool process (its own process group, as a terminal's job): ``units`` units that wait for ``folder/go``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(REPO)]), "RAY_USAGE_STATS_ENABLED": "0"}
    return popen([*wrapper, sys.executable, "-c", "import stop_helpers; stop_helpers.main()", str(folder),
                  str(PATIENCE), str(units), executor], cwd=REPO, env=env, stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, text=True, start_new_session=True)


def _two_running(proc: subprocess.Popen, folder: Path) -> list[psutil.Process]:
    """Once both workers run a unit: the run's process tree (the forkserver and the workers)."""
    _until(lambda: len(started(folder)) == 2 or proc.poll() is not None, "two running units")
    assert proc.poll() is None, proc.communicate()
    return psutil.Process(proc.pid).children(recursive=True)


def _stderr_line(proc: subprocess.Popen, needle: str) -> str:
    """The first stderr line holding ``needle`` (reading stderr until it comes)."""
    for line in proc.stderr:
        if needle in line:
            return line.strip()
    raise AssertionError(f"no line with {needle!r} on stderr; exit status {proc.wait()}")


def _ended(proc: subprocess.Popen, tree: list[psutil.Process]) -> tuple[int, str]:
    """The exit status and the rest of stderr; every process of the run has ended."""
    proc.wait(timeout=PATIENCE)   # its output is a few lines: no pipe fills up
    err = proc.stderr.read()
    _, alive = psutil.wait_procs(tree, timeout=PATIENCE)
    assert alive == [], f"processes left after the run: {alive}"
    return proc.returncode, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_first_signal_says_what_it_waits_for_and_the_running_units_finish(tmp_path, sig):
    proc = _start(tmp_path)
    try:
        tree = _two_running(proc, tmp_path)
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)          # Ctrl-C: the whole group (the workers ignore it)
        else:
            proc.send_signal(sig)             # kill: the main process only
        line = _stderr_line(proc, "waiting for")
        assert line.startswith(f"stopping ({sig.name}): waiting for 2 running unit(s) to finish (time unknown"), line
        assert ("Ctrl-C again stops them now" if sig == signal.SIGINT else "a second SIGTERM or Ctrl-C") in line
        (tmp_path / "go").write_text("")      # the running units may finish now
        code, err = _ended(proc, tree)
    finally:
        proc.kill()
    assert code == 128 + sig
    assert err.strip().splitlines()[-1] == (f"rolling-calib: stopped by {sig.name}: 2 unit(s) completed and kept (2 of "
                                            f"them finished after the signal), 2 queued unit(s) cancelled; the same "
                                            f"command resumes")
    assert done(tmp_path) == set(started(tmp_path)) and len(done(tmp_path)) == 2   # queued units never started


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_ends_the_running_units_at_once_and_keeps_nothing_of_them(tmp_path, sig):
    proc = _start(tmp_path)
    try:
        tree = _two_running(proc, tmp_path)
        proc.send_signal(sig)
        _stderr_line(proc, "waiting for")    # the first is being handled: this one is a second signal
        proc.send_signal(sig)
        code, err = _ended(proc, tree)        # without the second signal the units would wait for "go"
    finally:
        proc.kill()
    assert code == 128 + sig
    assert err.strip().splitlines()[-1] == (f"rolling-calib: stopped by {sig.name}: 0 unit(s) completed and kept, "
                                            f"2 queued unit(s) cancelled, 2 running unit(s) ended (nothing of them "
                                            f"kept); the same command resumes")
    assert done(tmp_path) == set() and not list(tmp_path.glob(".*.tmp"))


@pytest.mark.skipif(shutil.which("timeout") is None, reason="no timeout command")
def test_ctrl_c_under_timeout_stops_at_once(tmp_path):
    """``timeout 600 CMD``: Ctrl-C reaches the run from the terminal and again from ``timeout``, which forwards it
    (and then sends SIGCONT): the run ends its running units at once and writes no more."""
    proc = _start(tmp_path, wrapper=("timeout", "600"))
    try:
        tree = _two_running(proc, tmp_path)
        os.killpg(proc.pid, signal.SIGINT)    # Ctrl-C in the terminal: timeout, the run and its workers get it
        code, err = _ended(proc, tree)        # without a prompt stop the units would wait for "go"
    finally:
        proc.kill()
    assert code == 130, err
    assert "2 running unit(s) ended" in err.strip().splitlines()[-1], err
    assert done(tmp_path) == set()


def test_kill_9_of_the_run_ends_its_workers(tmp_path):
    """``kill -9`` of the main process: its workers end with it instead of training into an unlocked store."""
    proc = _start(tmp_path)
    try:
        tree = _two_running(proc, tmp_path)
        workers = [psutil.Process(pid) for pid in started(tmp_path).values()]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=PATIENCE)
        _, alive = psutil.wait_procs(tree, timeout=PATIENCE)
    finally:
        proc.kill()
    assert alive == [], f"still running after the run was killed: {alive}"
    assert {w.pid for w in workers} <= {p.pid for p in tree}
    (tmp_path / "go").write_text("")          # nothing is left to finish a unit
    time.sleep(1.0)
    assert done(tmp_path) == set()


def test_sigterm_to_a_ray_driver_stops_as_the_local_pool_does(tmp_path):
    """``ray.init`` replaced the driver's SIGTERM handler: SIGTERM ended in a C++ crash dump (exit 134) with no
    "stopped" line. Now the tasks are cancelled (the running ones never complete), one line, exit 143."""
    pytest.importorskip("ray")
    proc = _start(tmp_path, executor="ray")
    try:
        tree = _two_running(proc, tmp_path)   # a real local Ray runtime of 2 CPUs runs two units
        proc.send_signal(signal.SIGTERM)
        code, err = _ended(proc, tree)
    finally:
        proc.kill()
    assert code == 143, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("rolling-calib: stopped by SIGTERM: 0 unit(s) completed and kept, "
                                                   "4 queued unit(s) cancelled"), err[-3000:]
    (tmp_path / "go").write_text("")          # a unit still running would complete now
    time.sleep(1.0)
    assert done(tmp_path) == set()


def _sleep(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_end_workers_finds_and_ends_the_pools_workers():
    """The one access to the pool's workers (``_processes`` before Python 3.14) still finds them."""
    with cf.ProcessPoolExecutor(max_workers=1, mp_context=_POOL_CONTEXT) as pool:
        worker = psutil.Process(pool.submit(_sleep, 0).result(timeout=PATIENCE))
        busy = pool.submit(_sleep, PATIENCE)
        end_workers(pool)
        with pytest.raises(cf.process.BrokenProcessPool):
            busy.result(timeout=PATIENCE)
    _, alive = psutil.wait_procs([worker], timeout=PATIENCE)
    assert alive == []


def test_stop_signals_counts_later_signals_while_units_run_and_keeps_ignored_ones_ignored():
    """In this process: the first stop signal raises; a later one while units run is only counted (the executor
    acts on it); a signal this process ignores stays ignored; everything is restored after."""
    from rolling_calib.execution.executors import RunStopped, stop_now_requested, stop_signals, units_running

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stop_signals():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            with units_running():
                with pytest.raises(RunStopped):
                    signal.raise_signal(signal.SIGTERM)
                assert not stop_now_requested()
                signal.raise_signal(signal.SIGTERM)     # counted, not raised
                assert stop_now_requested()
            signal.raise_signal(signal.SIGTERM)         # a copy within a second of the first: counted
        with stop_signals():
            assert not stop_now_requested()             # a new command starts afresh
            with pytest.raises(RunStopped):
                signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGCONT)          # what timeout sends after the signal it forwards
            assert stop_now_requested()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert signal.getsignal(signal.SIGTERM) == before[signal.SIGTERM]


def test_a_later_signal_outside_the_units_stops_again(monkeypatch):
    """Past the forwarded copies, a signal during the stop's own clean-up is the user's: it raises again."""
    from rolling_calib.execution import executors

    monkeypatch.setattr(executors, "FORWARDED_WITHIN_S", -1.0)
    with executors.stop_signals():
        with pytest.raises(executors.RunStopped):
            signal.raise_signal(signal.SIGTERM)
        with pytest.raises(executors.RunStopped):
            signal.raise_signal(signal.SIGTERM)
