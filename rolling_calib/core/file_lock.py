"""An exclusive advisory lock on a file, waited for up to a timeout (``fcntl.flock``).

The operating system drops the lock when its holder dies (``kill -9`` included), so a lock file
left behind never blocks anyone.

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
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["exclusive_file_lock"]


@contextlib.contextmanager
def exclusive_file_lock(path: Path, *, timeout: float, busy: Callable[[], Exception],
                        poll: float = 0.1) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if absent); raise ``busy()`` after ``timeout`` seconds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise busy() from None
                time.sleep(poll)
        yield
    finally:
        os.close(fd)  # releases the lock
