"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Every result rolling-calib writes (unit Parquet files, sidecars, checkpoints, reports,
plots) goes through :func:`atomic_write`: the content is written to a temporary file in
the target's directory (same file system), flushed, then renamed over the target with
``os.replace``. A write that raises removes its temporary file, and so does a process ended by
SIGTERM, SIGHUP or SIGINT mid-write (a signal handler removes the temporary files in flight, then
ends the process as the signal would have; installed once, from the main thread, only where the
signal still has its default action) or by ``sys.exit`` (``atexit``). Only ``kill -9`` can leave a
hidden ``.NAME.*.tmp`` file, which no reader ever opens (``run`` clears them from its store).

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

import atexit
import os
import signal
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_text"]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: Temporary files being written by this process (removed by the signal handler and at exit).
_IN_FLIGHT: set[str] = set()
_INSTALLED: list[bool] = []
_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def _remove_in_flight() -> None:
    for tmp in list(_IN_FLIGHT):
        try:
            os.unlink(tmp)
        except OSError:
            pass
        _IN_FLIGHT.discard(tmp)


def _on_signal(signum: int, frame: object) -> None:
    """Remove the temporary files in flight, then end the process as the signal's default action does."""
    _remove_in_flight()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_cleanup() -> None:
    """Once per process, from the main thread: SIGTERM/SIGHUP with their default action remove temporaries first."""
    if _INSTALLED or threading.current_thread() is not threading.main_thread():
        return
    _INSTALLED.append(True)
    atexit.register(_remove_in_flight)
    for signum in _SIGNALS:
        try:
            if signal.getsignal(signum) == signal.SIG_DFL:
                signal.signal(signum, _on_signal)
        except (ValueError, OSError):  # not the main interpreter, or a signal this platform refuses
            pass


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
    _install_cleanup()
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    _IN_FLIGHT.add(tmp)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:  # KeyboardInterrupt (SIGINT) and SystemExit included
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    finally:
        _IN_FLIGHT.discard(tmp)
    return target


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))
