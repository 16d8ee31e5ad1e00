"""One writer per result store: an advisory lock held for the whole run.

``STORE/.lock`` is locked with :class:`filelock.FileLock` (an ``fcntl.flock`` on Unix) and
holds the holder's process id, host, start time and command. A second writer is refused at
once with the holder named. The operating system releases the lock when its process dies,
however it dies (``kill -9`` included), so a stale lock file of a dead process is taken over
without guessing from process ids; the take-over is reported.

The lock is re-entrant within a process (the runner and the orchestration around it can
both hold it) and is not inherited by worker processes, which never write the manifest.

Examples
--------
>>> import tempfile
>>> store = Path(tempfile.mkdtemp())
>>> with StoreLock(store) as lock:
...     lock.holder()["pid"] == os.getpid()
True
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from rolling_calib.core import store_layout

__all__ = ["LOCK_FILE", "StoreLock", "StoreLockedError", "StorePathError", "check_store_path", "clean_orphan_temporaries",
           "store_path_problem"]

LOCK_FILE = store_layout.LOCK

_HELD: dict[Path, tuple[FileLock, int]] = {}  # store -> (lock, depth), this process's locks
_GUARD = threading.Lock()


class StoreLockedError(RuntimeError):
    """Another process is writing into the store; the message names it (pid, host, start time, command)."""


class StorePathError(ValueError):
    """The store path cannot hold a result store (a regular file, a read-only file system ...): one line, exit 2."""


def store_path_problem(store: Path, exc: OSError) -> str:
    """One line saying why ``store`` cannot be created or locked, from the ``OSError`` that said so.

    >>> store_path_problem(Path("/x/runs"), OSError(30, "Read-only file system"))
    '/x/runs: cannot write a result store here: read-only file system; choose a writable directory for --store'
    """
    import errno

    first_file = next((p for p in [store, *store.parents] if p.exists() and not p.is_dir()), None)
    if first_file is not None:
        what = (f"it is a regular file, not a directory" if first_file == store
                else f"{first_file} is a regular file, not a directory")
    elif exc.errno == errno.EROFS:
        what = "read-only file system"
    elif exc.errno in (errno.EACCES, errno.EPERM):
        what = "permission denied"
    elif exc.errno == errno.ENOSPC:
        what = "no space left on the device"
    else:
        what = (exc.strerror or str(exc)).lower()
    return f"{store}: cannot write a result store here: {what}; choose a writable directory for --store"


def check_store_path(store: str | os.PathLike) -> Path:
    """``store`` when a result store can be created or opened there, else :class:`StorePathError` (nothing is created).

    The store itself or its nearest existing parent must be a directory this process may write in.

    >>> import tempfile
    >>> file = Path(tempfile.mkdtemp()) / "f"; _ = file.write_text("")
    >>> check_store_path(file / "runs")
    Traceback (most recent call last):
    ...
    rolling_calib.execution.lock.StorePathError: .../f/runs: cannot write a result store here: .../f is a regular file, not a directory; choose a writable directory for --store
    """
    import errno

    store = Path(store).absolute()
    existing = next(p for p in [store, *store.parents] if p.exists() or p == p.parent)
    if not existing.is_dir():
        raise StorePathError(store_path_problem(store, OSError(errno.ENOTDIR, "Not a directory")))
    if not os.access(existing, os.W_OK | os.X_OK):
        code = errno.EROFS if _read_only(existing) else errno.EACCES
        raise StorePathError(store_path_problem(store, OSError(code, os.strerror(code))))
    return store


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "a process that left no details"
    return (f"pid {holder.get('pid')} on host {holder.get('host')}, started {holder.get('started_at')}"
            f" ({holder.get('command', '?')})")


class StoreLock:
    """Context manager holding the store's writer lock.

    Parameters
    ----------
    store : path
        The result store (created if absent).

    Raises
    ------
    StoreLockedError
        When another process holds the lock.
    """

    def __init__(self, store: str | os.PathLike) -> None:
        self.store = Path(store).resolve()
        self.path = self.store / LOCK_FILE
        self.took_over: dict[str, Any] | None = None

    def holder(self) -> dict[str, Any]:
        """The details the current (or last) holder wrote into the lock file (``{}`` if none)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError:
            return {"details": text[:200]}
        return data if isinstance(data, dict) else {}

    def __enter__(self) -> StoreLock:
        with _GUARD:
            if self.store in _HELD:
                lock, depth = _HELD[self.store]
                _HELD[self.store] = (lock, depth + 1)
                return self
            lock = FileLock(self.path, thread_local=False)  # one holder per process, depth counted in _HELD
            try:
                self.store.mkdir(parents=True, exist_ok=True)
                lock.acquire(blocking=False)
            except Timeout:  # (a TimeoutError, so an OSError: caught first)
                raise StoreLockedError(
                    f"{self.store}: another run is writing into this store: {_describe(self.holder())}. "
                    f"Wait for it to finish, or use another --store (lock file: {self.path})"
                ) from None
            except OSError as exc:  # a regular file, a read-only file system, no permission: one line
                raise StorePathError(store_path_problem(self.store, exc)) from None
            previous = self.holder()
            if previous:  # the lock was free, yet details remain: their process died without releasing
                self.took_over = previous
                warnings.warn(f"{self.store}: took over the lock left by a process that is gone "
                              f"({_describe(previous)})", stacklevel=2)
            details = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": _now(),
                       "command": " ".join(sys.argv)[:300]}
            try:
                _write_in_place(self.path, json.dumps(details))
            except OSError as exc:
                lock.release()
                raise StorePathError(store_path_problem(self.store, exc)) from None
            _HELD[self.store] = (lock, 1)
        return self

    def __exit__(self, *exc_info: object) -> None:
        with _GUARD:
            lock, depth = _HELD[self.store]
            if depth > 1:
                _HELD[self.store] = (lock, depth - 1)
                return
            del _HELD[self.store]
            _write_in_place(self.path, "")  # a clean release leaves no details, nothing to take over
            lock.release()


def _write_in_place(path: Path, text: str) -> None:
    """Replace the lock file's content, same inode (a renamed file would no longer be the locked one)."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def clean_orphan_temporaries(store: str | os.PathLike) -> list[Path]:
    """Delete the hidden ``.NAME.*.tmp`` files that killed atomic writes left in ``store``; returns them.

    Call only while holding :class:`StoreLock`: then no other writer can own them.
    """
    removed = []
    for path in Path(store).rglob(".*.tmp"):
        if path.is_file():
            path.unlink()
            removed.append(path)
    return removed
