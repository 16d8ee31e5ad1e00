"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Every result rolling-calib writes (unit Parquet files, sidecars, checkpoints, reports,
plots) goes through :func:`atomic_write`: the content is written to a temporary file in
the target's directory (same file system), flushed, then renamed over the target with
``os.replace``. A write that raises removes its temporary file; a process killed mid-write
(``kill -9``) can leave a hidden ``.NAME.*.tmp`` file, which no reader ever opens.

The file mode follows the process umask (like ``open``), not ``mkstemp``'s private 0600, so
stores on a shared file system stay readable by the cluster's other users.

This module depends on the standard library only.

Example
-------
>>> import pathlib, tempfile
>>> target = pathlib.Path(tempfile.mkdtemp()) / "hello.txt"
>>> _ = atomic_write(target, lambda tmp: pathlib.Path(tmp).write_text("hi"))
>>> target.read_text()
'hi'
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_text"]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Fill a temporary file with ``write(tmp_path)``, then rename it to ``path``.

    Parameters
    ----------
    path : path-like
        The target; its parent directory is created if needed.
    write : callable
        Receives the temporary file's path (a ``str``) and writes the whole content to it.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))
