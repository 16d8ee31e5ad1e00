"""An exclusive lock on a file, waited for up to a timeout: :class:`filelock.FileLock`.

On Unix ``filelock`` takes an ``fcntl.flock``, which the operating system drops when its holder
dies (``kill -9`` included), so a lock file left behind never blocks anyone.

Examples
--------
>>> import tempfile, pathlib
>>> lock = pathlib.Path(tempfile.mkdtemp()) / "db.lock"
>>> with exclusive_file_lock(lock, timeout=1.0, busy=lambda: TimeoutError("busy")):
...     lock.exists()
True
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock, Timeout

__all__ = ["exclusive_file_lock"]


@contextlib.contextmanager
def exclusive_file_lock(path: Path, *, timeout: float, busy: Callable[[], Exception],
                        poll: float = 0.1) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if absent); raise ``busy()`` after ``timeout`` seconds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, timeout=timeout)
    try:
        lock.acquire(poll_interval=poll)
    except Timeout:
        raise busy() from None
    try:
        yield
    finally:
        lock.release()
