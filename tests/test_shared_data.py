"""One place finds the shared data (tests/shared_data.py): the variable first, then ``shared/`` above the checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from shared_data import ENV, REPO_ROOT, find_shared


def test_the_variable_wins_then_the_nearest_shared_folder_above(tmp_path):
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "a" / "shared").mkdir(parents=True)           # no data/ inside: not a shared root
    repo = tmp_path / "a" / "b" / "repo"
    assert find_shared({}, repo) == tmp_path / "shared"
    (tmp_path / "a" / "b" / "shared" / "data").mkdir(parents=True)
    assert find_shared({}, repo) == tmp_path / "a" / "b" / "shared"            # the nearest
    assert find_shared({ENV: str(tmp_path / "shared")}, repo) == tmp_path / "shared"
    assert find_shared({ENV: str(tmp_path / "none")}, repo) is None           # named but absent: not guessed
    assert find_shared({}, Path("/")) is None or (Path("/shared/data")).is_dir()


def test_a_test_that_needs_absent_data_skips_saying_where_it_looked(tmp_path):
    """In a fresh interpreter with the variable pointing nowhere: the skip reason names the variable."""
    test = tmp_path / "test_needs.py"
    test.write_text("from shared_data import needs_shared\n\n@needs_shared('us-equities-daily-2013-2018')\n"
                    "def test_x():\n    raise AssertionError('ran')\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(test)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={"PYTHONPATH": f"{REPO_ROOT / 'tests'}", ENV: str(tmp_path / "nowhere"),
                               "PATH": "/usr/bin:/bin"})
    assert "1 skipped" in proc.stdout, proc.stdout + proc.stderr
    assert f"shared data set us-equities-daily-2013-2018 not found (${ENV}={tmp_path / 'nowhere'})" in proc.stdout
