"""A local Ray runtime whose start-up times out is started again, and what the failed try left is killed.

Ray waits a fixed 30 s for its raylet (``ray/_private/node.py``); a fresh clone's suite on a loaded 2-core
machine hit "The current node timed out during startup". These tests drive the retry with stand-ins for
``ray.init``/``ray.shutdown`` (the retry's own logic); the Ray runtime itself is exercised, unmocked, by
test_ray_executor.py and test_until_decided_ray.py.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from rolling_calib.execution import ray_executor as rx

TIMEOUT = Exception("The current node timed out during startup. This could happen because ...")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] not in "ZX"
    except OSError:
        return False


def test_a_start_up_timeout_is_tried_again_and_warns():
    calls, shutdowns = [], []

    def init(**options):
        calls.append(options)
        if len(calls) < 3:
            raise TIMEOUT

    with pytest.warns(RuntimeWarning, match=r"try 1 of 3: The current node timed out") as record:
        rx._start_local_runtime(init, lambda: shutdowns.append(1), {"num_cpus": 2})
    assert calls == [{"num_cpus": 2}] * 3
    assert len(shutdowns) == 2
    assert [str(w.message).split(":")[0] for w in record] == [
        "Ray's local runtime did not start (try 1 of 3", "Ray's local runtime did not start (try 2 of 3"]


def test_the_last_timeout_is_raised():
    def init(**options):
        raise TIMEOUT

    with pytest.warns(RuntimeWarning), pytest.raises(Exception, match="timed out during startup"):
        rx._start_local_runtime(init, lambda: None, {})


def test_any_other_error_is_raised_at_once():
    calls = []

    def init(**options):
        calls.append(1)
        raise ValueError("num_cpus must be positive")

    with pytest.raises(ValueError, match="num_cpus"):
        rx._start_local_runtime(init, lambda: None, {})
    assert calls == [1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the process tree is read from /proc")
def test_processes_left_by_a_failed_try_are_killed_and_older_ones_kept():
    older = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    left: list[subprocess.Popen] = []

    def init(**options):
        if not left:
            left.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
            raise TIMEOUT

    try:
        with pytest.warns(RuntimeWarning):
            rx._start_local_runtime(init, lambda: None, {})
        assert left[0].wait(timeout=10) == -9          # the failed try's process: killed
        time.sleep(0.1)
        assert _alive(older.pid)                         # one that was there before: untouched
    finally:
        for p in (older, *left):
            p.kill()
            p.wait()
