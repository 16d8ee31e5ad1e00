"""The project holds only files it wrote: none is byte-identical to a file of Qlib (issue 25, item 6).

Runs ``bench/check_no_qlib_copies.py``'s check against the Qlib checkout ``QLIB_REPO`` names (a clone or
its git directory: every file version in its history); skipped without one. The check itself is tested
on a checkout made here, so it cannot pass vacuously.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from check_no_qlib_copies import copies  # noqa: E402


def test_no_file_is_a_copy_of_a_qlib_file():
    repo = os.environ.get("QLIB_REPO")
    if not repo:
        pytest.skip("set QLIB_REPO to a Qlib checkout (or its git directory) to check for copied files")
    assert copies(Path(repo)) == [], "byte-identical to a Qlib file (the project holds only what it wrote)"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_check_finds_a_copy(tmp_path):
    """A checkout holding one of our files byte for byte is reported (and only that file)."""
    fake = tmp_path / "qlib"
    subprocess.run(["git", "init", "-q", str(fake)], check=True)
    (fake / "scripts").mkdir()
    (fake / "scripts" / "copied.md").write_bytes((ROOT / "tests" / "config" / "qlib_format" / "README.md").read_bytes())
    (fake / "scripts" / "other.py").write_text("print('not ours')\n")
    subprocess.run(["git", "-C", str(fake), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(fake), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
                   check=True)
    assert copies(fake) == ["tests/config/qlib_format/README.md"]
    assert copies(fake / ".git") == ["tests/config/qlib_format/README.md"]
