"""One error handler for every command: an expected failure is one line on stderr and an exit status.

A command's handler is decorated with :func:`command_errors`; what it raises becomes::

    rolling-calib COMMAND: error: <the message>

with exit status 2 for bad input and refusals (``ValueError`` and its kinds: ``ConfigError``, a
corrupt store file, a write the OS refused, :class:`~data_prep.atomic.WriteFailed`; a store locked
by another run) and 1 for units that failed while training (``UnitFailedError``: the completed
units are kept). An ``OSError`` becomes a line only where the command says what it was writing
(``write_error``); anything else is a bug and keeps its traceback. ``rolling_calib.cli.main``
handles what every command shares (a missing optional dependency, Ctrl-C).

Examples
--------
>>> import argparse
>>> @command_errors("example")
... def handle(args):
...     raise ValueError("--n-boot: expected an integer >= 1, found 0")
>>> import contextlib, io
>>> err = io.StringIO()
>>> with contextlib.redirect_stderr(err):
...     code = handle(argparse.Namespace())
>>> code, err.getvalue()
(2, 'rolling-calib example: error: --n-boot: expected an integer >= 1, found 0\\n')
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

__all__ = ["command_errors"]

Handler = Callable[[argparse.Namespace], int]


def command_errors(
    command: str | Callable[[argparse.Namespace], str],
    *,
    unit_failure: Callable[[Exception, argparse.Namespace], str] | None = None,
    write_error: Callable[[OSError, argparse.Namespace], str | None] | None = None,
) -> Callable[[Handler], Handler]:
    """Decorate a command's handler: its expected errors become one line ``rolling-calib COMMAND: error: ...``.

    Parameters
    ----------
    command : str or callable
        The command's name in the message (a callable receives the parsed arguments: ``synthetic linear``).
    unit_failure : callable, optional
        The message of a ``UnitFailedError`` (exit status 1), from the error and the arguments; default: the
        error's own message.
    write_error : callable, optional
        The message of an ``OSError`` met while the command writes its output (exit status 2); an ``OSError``
        it gives no message for (``None``: not the command's output), or any without it, propagates.

    Returns
    -------
    callable
        The decorator.
    """

    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        def handle(args: argparse.Namespace) -> int:
            try:
                return int(handler(args) or 0)
            except (ValueError, RuntimeError, OSError) as exc:
                outcome = _outcome(exc, args, unit_failure, write_error)
                if outcome is None:
                    raise
                code, message = outcome
                name = command(args) if callable(command) else command
                print(f"rolling-calib {name}: error: {message}", file=sys.stderr)
                return code

        return handle

    return decorate


def _outcome(exc: Exception, args: argparse.Namespace, unit_failure, write_error) -> tuple[int, str] | None:
    """Exit status and message of ``exc``, or ``None`` when it is not a failure the command expects."""
    from rolling_calib.execution.executors import UnitFailedError
    from rolling_calib.execution.lock import StoreLockedError

    if isinstance(exc, UnitFailedError):
        return 1, unit_failure(exc, args) if unit_failure is not None else str(exc)
    if isinstance(exc, (ValueError, StoreLockedError)):
        return 2, str(exc)
    if isinstance(exc, OSError) and write_error is not None and (message := write_error(exc, args)) is not None:
        return 2, message
    return None
