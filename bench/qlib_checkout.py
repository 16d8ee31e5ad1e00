"""Files of a Qlib checkout the user points to (``--qlib-repo DIR``): a working tree or a (bare) git directory.

The project holds only what it wrote; a Qlib file a script needs (``scripts/dump_bin.py``, the
benchmark workflows) is read from the user's Qlib checkout, and :func:`blob_ids` lets
``bench/check_no_qlib_copies.py`` prove that no file of this repository is one of Qlib's.

Examples
--------
>>> import subprocess, tempfile, pathlib
>>> repo = pathlib.Path(tempfile.mkdtemp())
>>> _ = subprocess.run(["git", "init", "-q", str(repo)], check=True)
>>> _ = (repo / "scripts").mkdir(), (repo / "scripts" / "dump_bin.py").write_text("print('dump')\\n")
>>> read_file(repo, "scripts/dump_bin.py")
b"print('dump')\\n"
"""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["is_git_dir", "commit", "read_file", "blob_ids", "git_blob_id"]


def _git(repo: Path, *args: str) -> str:
    where = ["--git-dir", str(repo)] if is_git_dir(repo) else ["-C", str(repo)]
    return subprocess.run(["git", *where, *args], capture_output=True, text=True, check=True).stdout


def is_git_dir(repo: Path) -> bool:
    """Whether ``repo`` is a git directory itself (bare, or a ``.git``) rather than a working tree."""
    return (Path(repo) / "HEAD").is_file() and (Path(repo) / "objects").is_dir()


def commit(repo: Path) -> str:
    """The checkout's commit (``unknown`` for a working tree outside git)."""
    try:
        return _git(Path(repo), "rev-parse", "HEAD").strip()
    except subprocess.CalledProcessError:
        return "unknown"


def read_file(repo: Path, path: str) -> bytes:
    """The bytes of ``path`` (relative to the repository root) in the checkout; FileNotFoundError naming both."""
    repo = Path(repo)
    if not is_git_dir(repo):
        target = repo / path
        if not target.is_file():
            raise FileNotFoundError(f"{repo}: no {path} (expected a Qlib checkout: git clone https://github.com/microsoft/qlib)")
        return target.read_bytes()
    done = subprocess.run(["git", "--git-dir", str(repo), "show", f"HEAD:{path}"], capture_output=True)
    if done.returncode != 0:
        raise FileNotFoundError(f"{repo}: no {path} at HEAD (expected a Qlib git directory)")
    return done.stdout


def git_blob_id(data: bytes) -> str:
    """Git's id of a file with content ``data`` (equal ids: byte-identical files).

    >>> git_blob_id(b"")
    'e69de29bb2d1d6434b8b29ae775ad8c2e48c5391'
    """
    import hashlib

    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def blob_ids(repo: Path) -> set[str]:
    """Ids of every file content in the checkout: for a git repository, every blob of its history; else its files."""
    repo = Path(repo)
    if is_git_dir(repo) or (repo / ".git").exists():
        out = _git(repo, "cat-file", "--batch-all-objects", "--batch-check")
        return {line.split()[0] for line in out.splitlines() if line.split()[1:2] == ["blob"]}
    return {git_blob_id(p.read_bytes()) for p in repo.rglob("*") if p.is_file()}
