"""Atomic file writes, the one implementation: a reader sees the old file or the new one, never half of one.

Every file this project writes (the Qlib binary store, unit Parquet files, sidecars, manifests,
checkpoints, unit logs, reports, plots) goes through :func:`atomic_file` (or its callback form
:func:`atomic_write`): the content is written to a temporary file in the target's directory
(same file system), flushed to the disk (``fsync``), then renamed over the target with
``os.replace``. A write that raises removes its temporary file, and so does a process ended by
SIGTERM, SIGHUP or SIGINT mid-write (a signal handler removes the temporary files in flight, then
ends the process as the signal would have; installed once, from the main thread, only where the
signal still has its default action) or by ``sys.exit`` (``atexit``). Only ``kill -9`` can leave a
hidden ``.NAME.*.tmp`` file, which no reader ever opens (``run`` clears them from its store).

A write the operating system refuses (disk full, quota, read-only, permissions) raises
:class:`WriteFailed`: one line naming the file, what happened, the free space of its file
system and the fix (:func:`describe_os_error`).

The file mode follows the process umask (like ``open``), not ``mkstemp``'s private 0600, so
stores on a shared file system stay readable by the cluster's other users.

This module depends on the standard library only (numpy arrays are written when given); it sits
in ``data_prep``, the lowest package, so that ``data_prep`` and every layer of ``rolling_calib``
above the pure core use the same write.

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
import contextlib
import errno
import os
import re
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["OSProblem", "WriteFailed", "describe_os_error", "atomic_file", "atomic_write", "atomic_write_bytes",
           "atomic_write_text"]


@dataclass(frozen=True)
class OSProblem:
    """What an OS error while writing a file means (:func:`describe_os_error`).

    Attributes: ``head`` (the file, what happened, the free space), ``fix`` (what to do),
    ``errno`` (``None`` when neither the exception nor its text gives one) and ``free`` (bytes
    free to this user on the file's file system, ``None`` when it cannot be measured).
    """

    head: str
    fix: str
    errno: int | None
    free: int | None

    @property
    def message(self) -> str:
        return f"{self.head}; {self.fix}"


class WriteFailed(ValueError):
    """A file could not be written (disk full, quota, permissions, read-only): one line naming it.

    Attributes: ``path`` (the file) and ``problem`` (:class:`OSProblem`: ``head``, ``fix``,
    ``errno``, ``free``). Nothing half-written is left in place (the write was atomic).
    """

    def __init__(self, problem: OSProblem, *, path: str | os.PathLike):
        super().__init__(problem.message)
        self.path, self.problem = Path(path), problem

    def __reduce__(self) -> tuple[Any, ...]:  # crosses a process pool or Ray with its attributes
        return (_rebuild_write_failed, (self.problem, str(self.path), self.args))


def _rebuild_write_failed(problem: OSProblem, path: str, args: tuple) -> WriteFailed:
    exc = WriteFailed(problem, path=path)
    exc.args = args  # a note added on the way (the unit's log file) is kept
    return exc


#: What an OS error code means for a write, and what to do about it.
_WRITE_ERRORS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("the disk is full", "free space there, or write to another disk"),
    errno.EDQUOT: ("the disk quota is exceeded", "free space within your quota, or write to another disk"),
    errno.EACCES: ("permission denied", "make the directory writable, or write elsewhere"),
    errno.EPERM: ("operation not permitted", "make the directory writable, or write elsewhere"),
    errno.EROFS: ("the file system is read-only", "write to a writable file system"),
}
_OS_ERROR_IN_TEXT = re.compile(r"os error (\d+)")  # polars / Rust: "No space left on device (os error 28)"


def _free_bytes(path: Path) -> int | None:
    """Bytes free to this user on the file system holding ``path`` (its nearest existing parent)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def _size_text(n: int) -> str:
    """``1536`` -> ``1.5 KiB``.

    >>> _size_text(0), _size_text(17161), _size_text(3 * 2**30)
    ('0 B', '16.8 KiB', '3.0 GiB')
    """
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def describe_os_error(exc: BaseException, path: str | os.PathLike, *, nbytes: int | None = None,
                      fix: str | None = None, verb: str = "cannot write") -> OSProblem:
    """What ``exc`` (raised while writing ``path``) means: the file, the cause, the free space, the fix.

    ``nbytes`` (the size being written) lets a failure without an error code be recognised as a
    full disk when less than that is free.

    >>> p = describe_os_error(OSError(errno.ENOSPC, "No space left on device"), "/tmp/x.bin")
    >>> p.head.startswith("/tmp/x.bin: cannot write: the disk is full (No space left on device; "), p.errno, p.fix
    (True, 28, 'free space there, or write to another disk, then re-run')
    """
    text = str(exc.strerror if isinstance(exc, OSError) and exc.strerror else exc).strip() or type(exc).__name__
    code = exc.errno if isinstance(exc, OSError) and exc.errno else None
    if code is None and (m := _OS_ERROR_IN_TEXT.search(text)):
        code = int(m.group(1))
    free = _free_bytes(Path(path).parent)
    if code is None and nbytes is not None and free is not None and free < nbytes:
        code = errno.ENOSPC
    what, default_fix = _WRITE_ERRORS.get(code, (None, "check the file system"))
    where = f"{_size_text(free)} free on its file system" if free is not None else "free space unknown"
    head = f"{path}: {verb}: {what} ({text}; {where})" if what else f"{path}: {verb} ({text}; {where})"
    return OSProblem(head, f"{fix or default_fix}, then re-run", code, free)


#: Temporary files being written by this process (removed by the signal handler and at exit).
_IN_FLIGHT: set[str] = set()
_INSTALLED: list[bool] = []
_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def _remove_in_flight() -> None:
    for tmp in list(_IN_FLIGHT):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
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


def _remove_quietly(tmp: str | None) -> None:
    if tmp is not None and os.path.exists(tmp):
        with contextlib.suppress(OSError):
            os.unlink(tmp)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, *, nbytes: int | None = None) -> Iterator[str]:
    """Yield a temporary file's path to fill; when the block ends, fsync it and rename it to ``path``.

    Parameters
    ----------
    path : path-like
        The target; its parent directory is created if needed.
    nbytes : int, optional
        The size being written (named in a :class:`WriteFailed` when the disk is too small).

    Raises
    ------
    WriteFailed
        The OS refused the write (the block's own ``OSError`` included); the temporary file is removed
        and ``path`` keeps what it held before.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "log.txt"
    >>> with atomic_file(target) as tmp:
    ...     with open(tmp, "w") as fh:
    ...         _ = fh.write("line\\n")
    ...     target.exists()
    False
    >>> target.read_text()
    'line\\n'
    """
    target = Path(path)
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _install_cleanup()
        # The name is held and counted in flight before the file exists: an exception raised asynchronously at any
        # point after (a Ray cancel's KeyboardInterrupt, a signal handler's) finds it and removes the file.
        # tempfile.mkstemp creates the file before it returns the name: an exception in between left the file behind.
        tmp = str(target.parent / f".{target.name}.{os.urandom(8).hex()}.tmp")
        _IN_FLIGHT.add(tmp)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)   # the umask applies, as for open()
        except FileExistsError:   # another writer's file (a 64-bit random name): never removed by this one
            _IN_FLIGHT.discard(tmp)
            tmp = None
            raise
        os.close(fd)
        yield tmp
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        _remove_quietly(tmp)
        raise WriteFailed(describe_os_error(exc, target, nbytes=nbytes), path=target) from exc
    except BaseException:  # KeyboardInterrupt (SIGINT) and SystemExit included
        _remove_quietly(tmp)
        raise
    finally:
        if tmp is not None:
            _IN_FLIGHT.discard(tmp)


def atomic_write(path: str | os.PathLike, write: Callable[[str], None], *, nbytes: int | None = None) -> Path:
    """Fill a temporary file with ``write(tmp_path)``, then rename it to ``path`` (:func:`atomic_file`).

    Parameters
    ----------
    path : path-like
        The target; its parent directory is created if needed.
    write : callable
        Receives the temporary file's path (a ``str``) and writes the whole content to it.
    nbytes : int, optional
        The size being written, when known.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    WriteFailed
        The OS refused the write.
    """
    with atomic_file(path, nbytes=nbytes) as tmp:
        write(tmp)
    return Path(path)


def _write_data(fh: Any, data: Any) -> None:
    """The low-level write of :func:`atomic_write_bytes` (a seam for tests that fill the disk).

    Arrays are written through the Python file, not ``ndarray.tofile``: numpy's own buffered
    write loses the error of its last buffer on a full disk (an array smaller than the buffer is
    then silently not written) and reports the others without an error code.
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        fh.write(data)
    else:  # a numpy array
        import numpy as np

        fh.write(memoryview(np.ascontiguousarray(data)).cast("B"))


def atomic_write_bytes(path: str | os.PathLike, data: Any) -> Path:
    """Write ``data`` (bytes, or a numpy array's buffer) to ``path`` atomically; :class:`WriteFailed` when refused."""
    nbytes = len(data) if isinstance(data, (bytes, bytearray)) else data.nbytes

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            _write_data(fh, data)

    return atomic_write(path, write, nbytes=nbytes)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))
