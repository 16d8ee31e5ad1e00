"""Each unit's library output in a log file beside the unit; the console keeps progress and our messages.

Qlib logs every epoch and every handler step, LightGBM prints from C++, torch and pandas warn: a
few thousand lines for a handful of units, which bury the progress bar. While a unit trains,
:func:`unit_log` sends all of it to ``STORE/units/<pipeline>/seed<k>/wNN.log``:

file descriptors 1 and 2 are pointed at the file: what C/C++ code prints (LightGBM, XGBoost,
CatBoost, OpenMP) and what Python writes to ``sys.stdout`` / ``sys.stderr`` (``print``, ``warnings``,
``tqdm``, the logging handlers Qlib installs), since those streams write to the same descriptors.
The stream objects themselves are left alone, so a logging handler created during the unit
(Qlib's, on its first ``qlib.init`` in a worker) keeps working afterwards. Python's streams are
flushed before and after, and both descriptors are restored. The file is rewritten by each attempt of the unit (it describes the last
one); its path is named when the unit fails (:func:`attach_log`).

Example
-------
>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "w00.log")
>>> with unit_log(path):
...     _ = os.write(1, b"from C code\\n")
>>> open(path).read()
'from C code\\n'
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["attach_log", "unit_log"]


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()


@contextlib.contextmanager
def unit_log(path: str | os.PathLike) -> Iterator[Path]:
    """Send everything written to stdout/stderr (Python and C level) to ``path`` while the block runs."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    try:
        with open(path, "wb", buffering=0) as raw:
            for fd in saved:
                os.dup2(raw.fileno(), fd)
            try:
                yield path
            finally:
                _flush()
    finally:
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)


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
