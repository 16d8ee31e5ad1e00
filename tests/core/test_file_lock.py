"""The waiting file lock (the tracking database's): busy after the timeout, acquired once freed, freed by kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rolling_calib.core.file_lock import exclusive_file_lock

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
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
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
