"""One writer per store: a second writer is refused with the holder named; a dead holder's lock is taken over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from signal_helpers import popen

from rolling_calib.execution.lock import LOCK_FILE, StoreLock, StoreLockedError, clean_orphan_temporaries

REPO = Path(__file__).resolve().parents[2]

HOLD = (
    "import sys, time\n"
    "from rolling_calib.execution.lock import StoreLock\n"
    "with StoreLock(sys.argv[1]):\n"
    "    print('held', flush=True)\n"
    "    time.sleep(60)\n"
)


def _holder(store: Path) -> subprocess.Popen:
    # killed with SIGKILL (no disposition stops it); started as every signalled child is (signal_helpers)
    proc = popen([sys.executable, "-c", HOLD, str(store)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_second_writer_is_refused_with_the_holder_named(tmp_path):
    proc = _holder(tmp_path)
    try:
        # the holder sleeps 60 s: a lock that waited instead of refusing would hang here
        with pytest.raises(StoreLockedError) as info:
            with StoreLock(tmp_path):
                pass
        assert proc.poll() is None, "refused while the holder still runs"
        message = str(info.value)
        assert f"pid {proc.pid}" in message and "started" in message and str(tmp_path) in message
    finally:
        proc.kill()
        proc.wait()


def test_lock_of_a_killed_process_is_taken_over_and_reported(tmp_path):
    proc = _holder(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert str(proc.pid) in (tmp_path / LOCK_FILE).read_text(), "kill -9 leaves the holder's details behind"
    with pytest.warns(UserWarning, match=f"took over the lock .*pid {proc.pid}"):
        with StoreLock(tmp_path) as lock:
            assert lock.took_over["pid"] == proc.pid
            assert lock.holder()["pid"] == os.getpid()
    with StoreLock(tmp_path) as lock:  # a clean release leaves nothing to take over
        assert lock.took_over is None


def test_lock_is_reentrant_in_one_process(tmp_path):
    with StoreLock(tmp_path):
        with StoreLock(tmp_path):
            pass
        assert StoreLock(tmp_path).holder()["pid"] == os.getpid(), "inner release must keep the outer lock"
    assert StoreLock(tmp_path).holder() == {}


def test_orphan_temporaries_are_cleaned(tmp_path):
    unit_dir = tmp_path / "units" / "p" / "seed0"
    unit_dir.mkdir(parents=True)
    orphan = unit_dir / ".w00.parquet.abc123.tmp"
    orphan.write_bytes(b"half")
    keep = unit_dir / "w00.parquet"
    keep.write_bytes(b"whole")
    assert clean_orphan_temporaries(tmp_path) == [orphan]
    assert not orphan.exists() and keep.exists()
