"""Each unit's library output in a log file beside the unit; the console keeps progress and our messages.

Qlib logs every epoch and every handler step, LightGBM prints from C++, torch and pandas warn: a
few thousand lines for a handful of units, which bury the progress bar. While a unit trains,
:func:`unit_log` sends all of it to ``STORE/units/<pipeline>/seed<k>/wNN.log``:

file descriptors 1 and 2 are pointed at the file (what C/C++ code prints: LightGBM, XGBoost,
CatBoost, OpenMP), and ``sys.stdout`` / ``sys.stderr`` are replaced by streams writing to those
descriptors *by number* (``print``, ``warnings``, ``tqdm``, the logging handlers Qlib installs:
also when something, such as pytest, had replaced the streams). A logging handler created during
the unit (Qlib's, on its first ``qlib.init`` in a worker) keeps such a stream, which writes to
the console again once the descriptors are restored. Everything is flushed before and after. The file is
rewritten by each attempt of the unit (it describes the last one), atomically like every file of the store
(:mod:`data_prep.atomic`: a temporary file renamed into place when the unit ends); its path is named when
the unit fails (:func:`attach_log`).

Example
-------
>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "w00.log")
>>> with unit_log(path):
...     _ = os.write(1, b"from C code\\n")
...     print("from Python")
>>> open(path).read()
'from C code\\nfrom Python\\n'
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from data_prep.atomic import atomic_file

__all__ = ["attach_log", "unit_log"]


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()


@contextlib.contextmanager
def unit_log(path: str | os.PathLike) -> Iterator[Path]:
    """Send everything written to stdout/stderr (Python and C level) to ``path`` while the block runs.

    The log is written like every other file of the store (:func:`data_prep.atomic.atomic_file`): into a
    hidden temporary file beside ``path``, which is fsynced and renamed to ``path`` when the block ends,
    also when it raises (the log then describes the failed attempt, and the error names it). A run
    killed meanwhile leaves the previous attempt's log in place and an orphan temporary file.
    """
    path = Path(path)
    failure: BaseException | None = None
    with atomic_file(path) as tmp:
        with _redirected(tmp):
            try:
                yield path
            except BaseException as exc:  # the log of a failed unit is kept: its error names it
                failure = exc
    if failure is not None:
        raise failure


@contextlib.contextmanager
def _redirected(file: str) -> Iterator[None]:
    """File descriptors 1 and 2, ``sys.stdout``/``sys.stderr`` and the console's logging handlers into ``file``."""
    _flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    streams = sys.stdout, sys.stderr
    try:
        with open(file, "wb", buffering=0) as raw:
            for fd in saved:
                os.dup2(raw.fileno(), fd)
            sys.stdout, sys.stderr = (open(fd, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
                                      for fd in (1, 2))
            moved = _move_handlers({id(s): sys.stderr for s in (*streams, sys.__stdout__, sys.__stderr__)})
            try:
                yield
            finally:
                _flush()
                for handler, stream in moved:
                    handler.setStream(stream)
                sys.stdout, sys.stderr = streams
    finally:
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)


def _move_handlers(targets: dict[int, object]) -> list[tuple[logging.StreamHandler, object]]:
    """Point every logging stream handler that writes to a console stream (by identity) at its replacement.

    Handlers keep the stream object they were created with (Qlib's, made at ``qlib.init``), so swapping
    ``sys.stderr`` alone would not reach them. Returns ``[(handler, old stream)]`` to restore.
    """
    loggers = [logging.getLogger(), *(v for v in logging.Logger.manager.loggerDict.values()
                                      if isinstance(v, logging.Logger))]
    moved = []
    for handler in {h for lg in loggers for h in lg.handlers}:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler) \
                and id(handler.stream) in targets:
            moved.append((handler, handler.setStream(targets[id(handler.stream)])))
    return moved


def attach_log(exc: BaseException, path: str | os.PathLike) -> BaseException:
    """Name the unit's log file in a failing unit's exception (a note, also shown by ``str`` of the message).

    The note goes into ``args`` (kept when the exception crosses a process pool or Ray), so the
    run's error names the file to read.
    """
    note = f"(library output: {path})"
    if exc.args and isinstance(exc.args[0], str) and note not in exc.args[0]:
        exc.args = (f"{exc.args[0]} {note}", *exc.args[1:])
    elif not exc.args:
        exc.args = (note,)
    return exc
