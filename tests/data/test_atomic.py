"""Atomic writes (data_prep.atomic, the one implementation): all or nothing, fsynced, no temp files left behind,
umask-respecting modes, one error type naming the file; unit logs written the same way."""

from __future__ import annotations

import errno
import os
import pickle
import stat
from pathlib import Path

import pytest

from data_prep import atomic
from data_prep.atomic import WriteFailed, atomic_write, atomic_write_text


def test_replaces_the_whole_file(tmp_path):
    target = tmp_path / "sub" / "result.json"
    atomic_write_text(target, "old")
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert [p.name for p in target.parent.iterdir()] == ["result.json"]


def test_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "unit.parquet"
    atomic_write_text(target, "complete")

    def half_then_crash(tmp: str) -> None:
        Path(tmp).write_text("half")
        raise OSError("disk full")

    with pytest.raises(WriteFailed, match=f"^{target}: cannot write \\(disk full; ") as caught:
        atomic_write(target, half_then_crash)
    assert caught.value.path == target
    assert target.read_text() == "complete"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unit.parquet"]


def test_mode_follows_umask_not_mkstemp(tmp_path):
    old = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "report.md", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_every_write_is_fsynced_before_the_rename(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else fd)
        return real_fsync(fd)

    monkeypatch.setattr(atomic.os, "fsync", recording_fsync)
    atomic_write_text(tmp_path / "a.txt", "x")
    assert len(synced) == 1 and (not isinstance(synced[0], str) or Path(synced[0]).name.startswith(".a.txt."))


def test_the_write_error_crosses_a_process_pool_whole(tmp_path):
    exc = WriteFailed(atomic.describe_os_error(OSError(errno.ENOSPC, "No space left on device"), tmp_path / "w.pt"),
                      path=tmp_path / "w.pt")
    exc.args = (f"{exc.args[0]} (library output: w00.log)",)
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is WriteFailed and back.args == exc.args and back.path == exc.path
    assert back.problem.errno == errno.ENOSPC


def test_the_store_and_data_prep_raise_the_same_error_type():
    from data_prep import qlib_store
    from rolling_calib.execution import store

    assert store.StoreWriteError is WriteFailed is qlib_store.WriteFailed


def test_a_unit_log_appears_whole_when_the_unit_ends_and_is_kept_when_it_fails(tmp_path):
    from rolling_calib.execution.unit_log import unit_log

    log = tmp_path / "w00.log"
    log.write_text("previous attempt\n")
    with unit_log(log):
        os.write(1, b"from C\n")
        print("from Python")
        assert log.read_text() == "previous attempt\n"   # the old log until this one is complete
    assert log.read_text() == "from C\nfrom Python\n"
    with pytest.raises(RuntimeError, match="boom"), unit_log(log):
        print("failing attempt")
        raise RuntimeError("boom")
    assert log.read_text() == "failing attempt\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w00.log"]


SLOW_WRITE = (
    "import signal, sys, time\n"
    "from pathlib import Path\n"
    "from data_prep.atomic import atomic_write\n"
    "def slow(tmp):\n"
    "    Path(tmp).write_text('half a report')\n"
    "    print('writing', flush=True)\n"
    "    time.sleep(SLEEP)\n"
    "atomic_write(Path(sys.argv[1]) / 'report.html', slow)\n"
)


def _slow_write(tmp_path: Path, *, sleep: float = 600, ignore: str = ""):
    """A process writing ``report.html`` atomically, paused mid-write (``sleep`` s) once it printed "writing".

    It starts with the signals a test sends at their default actions (as from a terminal), wherever the test
    runner was started (``signal_helpers``); ``ignore``: a signal it ignores itself first (as under ``nohup``).
    """
    import subprocess
    import sys

    from signal_helpers import popen

    script = SLOW_WRITE.replace("SLEEP", repr(sleep))
    if ignore:
        script = f"import signal\nsignal.signal(signal.{ignore}, signal.SIG_IGN)\n" + script
    repo = Path(__file__).resolve().parents[2]
    proc = popen([sys.executable, "-c", script, str(tmp_path)], cwd=repo, stdout=subprocess.PIPE,
                 stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONPATH": str(repo)})
    assert proc.stdout.readline().strip() == "writing"
    return proc


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_process_ended_by_a_signal_mid_write_leaves_no_temporary_file(tmp_path, signame):
    """Issue 30: a killed ``report`` left a hidden ``.report.html.*.tmp``; only kill -9 can now."""
    import signal

    proc = _slow_write(tmp_path)
    try:
        assert [p.name for p in tmp_path.iterdir()][0].startswith(".report.html.")  # the temporary file, mid-write
        proc.send_signal(getattr(signal, signame))
        code = proc.wait(timeout=120)
    finally:
        proc.kill()
    assert code != 0
    assert list(tmp_path.iterdir()) == []


def test_a_signal_the_user_ignored_stays_ignored(tmp_path):
    """Under ``nohup`` (SIGHUP ignored, inherited) the write is not ended by SIGHUP: the handler is only installed
    over a default action, so the file is written whole and no temporary is left."""
    import signal

    proc = _slow_write(tmp_path, sleep=2, ignore="SIGHUP")
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=120) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
    assert (tmp_path / "report.html").read_text() == "half a report"



#: The loop of the test below, run in a child process: an interrupt at every line may land inside a lazy import
#: of the standard library and leave a half-imported module behind (it broke later tests in the same process).
_EVERY_LINE = r"""
import os, sys
from pathlib import Path
from data_prep import atomic
from data_prep.atomic import atomic_write_text

folder = Path(sys.argv[1])
target = folder / "unit.json"
atomic_write_text(target, "old")
n = landed = 0
while True:
    n += 1
    count = [0]

    def trace(frame, event, arg):
        if event == "line":
            count[0] += 1
            if count[0] == n:
                raise KeyboardInterrupt(f"at line event {n}")
        return trace

    sys.settrace(trace)
    try:
        atomic_write_text(target, "new")
    except KeyboardInterrupt:
        landed += 1
    finally:
        sys.settrace(None)
    assert target.read_text() in ("old", "new"), n
    assert sorted(p.name for p in folder.iterdir()) == ["unit.json"], (n, sorted(p.name for p in folder.iterdir()))
    assert not [t for t in atomic._IN_FLIGHT if os.path.exists(t)], n
    atomic._IN_FLIGHT.clear()
    if count[0] < n:      # the write ran to its end before the n-th line: every place was tried
        break
    atomic_write_text(target, "old")
print(landed)
"""


def test_an_interrupt_anywhere_in_a_write_leaves_the_old_file_or_the_new_and_no_temporary(tmp_path):
    """Every Python line of the write (ours and the standard library's it calls) is a place an asynchronous
    exception may land: wherever it lands, the target holds the old or the new content and no temporary file is
    left (a name may stay counted in flight when the exception lands in the last bookkeeping line; its file is
    gone). In a child process (:data:`_EVERY_LINE`)."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _EVERY_LINE, str(tmp_path)], cwd=repo, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(repo)}, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) >= 10    # the write has at least this many lines where it can be interrupted
