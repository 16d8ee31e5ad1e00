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
import json
import os
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock, Timeout

__all__ = ["exclusive_file_lock", "lock_holder"]


def lock_holder(path: Path) -> str:
    """Who holds the lock at ``path``, as its holder wrote it (pid, host, start, command); ``""`` when unknown."""
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return ""
    if not isinstance(data, dict) or "pid" not in data:
        return ""
    return f"pid {data.get('pid')} on host {data.get('host')}, since {data.get('since')} ({data.get('command', '?')})"


def _write_holder(path: Path) -> None:
    """Write this process's details into the held lock file, in place (a renamed file would no longer be the locked one)."""
    import datetime as dt

    details = {"pid": os.getpid(), "host": socket.gethostname(),
               "since": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
               "command": " ".join(sys.argv)[:200]}
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, json.dumps(details).encode())
        finally:
            os.close(fd)
    except OSError:  # the details are a courtesy to waiters; the lock is held either way
        pass


@contextlib.contextmanager
def exclusive_file_lock(path: Path, *, timeout: float, busy: Callable[[], Exception],
                        poll: float = 0.1, waiting: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if absent); raise ``busy()`` after ``timeout`` seconds.

    When the lock is taken, ``waiting`` is called once, before waiting, with who holds it (:func:`lock_holder`,
    written by every holder into the lock file), so a caller can say who it waits for and for how long.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, timeout=timeout, thread_local=False)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if waiting is not None:
            waiting(lock_holder(path))
        try:
            lock.acquire(poll_interval=poll)
        except Timeout:
            raise busy() from None
    _write_holder(path)
    try:
        yield
    finally:
        try:
            os.truncate(path, 0)  # released cleanly: no holder to name
        except OSError:
            pass
        lock.release()
