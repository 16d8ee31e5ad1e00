"""The waiting file lock (the tracking database's): busy after the timeout, acquired once freed, freed by kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from signal_helpers import popen

from rolling_calib.core.file_lock import exclusive_file_lock, lock_holder

REPO = Path(__file__).resolve().parents[2]

HOLD = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from rolling_calib.core.file_lock import exclusive_file_lock\n"
    "with exclusive_file_lock(Path(sys.argv[1]), timeout=5, busy=lambda: TimeoutError('busy')):\n"
    "    print('held', flush=True)\n"
    "    sys.stdin.readline()\n"  # holds until told to let go (or killed)
)


class Busy(Exception):
    pass


def _holder(lock: Path) -> subprocess.Popen:
    # killed with SIGKILL (no disposition stops it); started as every signalled child is (signal_helpers)
    proc = popen([sys.executable, "-c", HOLD, str(lock)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                 text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_held_lock_raises_busy_after_the_timeout(tmp_path):
    lock = tmp_path / "db.lock"
    proc = _holder(lock)
    try:
        with pytest.raises(Busy):
            with exclusive_file_lock(lock, timeout=0.3, busy=Busy, poll=0.05):
                pass
        assert proc.poll() is None, "busy while the holder still holds"
    finally:
        proc.kill()
        proc.wait()


def test_a_waiter_gets_the_lock_once_the_holder_lets_go(tmp_path):
    lock = tmp_path / "db.lock"
    proc = _holder(lock)
    proc.stdin.write("release\n")  # the holder lets go while we wait (the timeout is far away)
    proc.stdin.flush()
    with exclusive_file_lock(lock, timeout=60, busy=Busy, poll=0.05):
        assert proc.wait(timeout=60) == 0


def test_a_killed_holder_frees_the_lock(tmp_path):
    lock = tmp_path / "sub" / "db.lock"  # the directory is created
    proc = _holder(lock)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert lock.exists(), "the lock file stays behind"
    with exclusive_file_lock(lock, timeout=0, busy=Busy):
        pass


def test_a_waiter_is_told_who_holds_the_lock_before_it_waits(tmp_path):
    """Issue 30: run waited up to 300 s on the tracking lock without a word; now the holder is named first."""
    lock = tmp_path / "db.lock"
    proc = _holder(lock)
    told: list[str] = []
    try:
        with pytest.raises(Busy):
            with exclusive_file_lock(lock, timeout=0.3, busy=Busy, poll=0.05, waiting=told.append):
                pass
    finally:
        proc.kill()
        proc.wait()
    assert len(told) == 1 and told[0].startswith(f"pid {proc.pid} on host ") and "exclusive_file_lock" not in told[0]
    assert lock_holder(lock).startswith(f"pid {proc.pid}")  # killed: the details stay, the lock is free
    with exclusive_file_lock(lock, timeout=0, busy=Busy, waiting=told.append):
        assert lock_holder(lock).startswith(f"pid {os.getpid()} ")
    assert len(told) == 1 and lock_holder(lock) == ""  # a clean release leaves no holder


def test_the_tracking_lock_says_who_holds_it_and_how_long_it_waits(tmp_path, capsys):
    from rolling_calib.tracking.sqlite_db import TrackingBusyError, tracking_db_lock

    db = tmp_path / "mlflow.db"
    proc = _holder(tmp_path / "mlflow.db.lock")
    try:
        with pytest.raises(TrackingBusyError, match=rf"busy: .* for 0 s \(pid {proc.pid} on host "):
            with tracking_db_lock(db, timeout=0.2):
                pass
    finally:
        proc.kill()
        proc.wait()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"tracking database {db} is locked by pid {proc.pid} on host ")
    assert "waiting up to 0 s" in err[0]
