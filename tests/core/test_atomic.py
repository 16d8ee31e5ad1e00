"""Atomic writes: all or nothing, no temp files left behind, umask-respecting modes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rolling_calib.core.atomic import atomic_write, atomic_write_text


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

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, half_then_crash)
    assert target.read_text() == "complete"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unit.parquet"]


def test_mode_follows_umask_not_mkstemp(tmp_path):
    old = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "report.md", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


SLOW_WRITE = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from rolling_calib.core.atomic import atomic_write\n"
    "def slow(tmp):\n"
    "    Path(tmp).write_text('half a report')\n"
    "    print('writing', flush=True)\n"
    "    time.sleep(60)\n"
    "atomic_write(Path(sys.argv[1]) / 'report.html', slow)\n"
)


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_process_ended_by_a_signal_mid_write_leaves_no_temporary_file(tmp_path, signame):
    """Issue 30: a killed ``report`` left a hidden ``.report.html.*.tmp``; only kill -9 can now."""
    import signal
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WRITE, str(tmp_path)], cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONPATH": str(repo)})
    assert proc.stdout.readline().strip() == "writing"
    assert [p.name for p in tmp_path.iterdir()][0].startswith(".report.html.")  # the temporary file, mid-write
    proc.send_signal(getattr(signal, signame))
    code = proc.wait(timeout=60)
    assert code != 0
    assert list(tmp_path.iterdir()) == []
