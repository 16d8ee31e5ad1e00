"""Child processes that a test sends signals to start with every such signal at its default action.

A process inherits the signals its parent *ignores* (a caught signal is reset at ``exec``): a test runner
started with ``&`` from a script ignores SIGINT, one started under ``nohup`` ignores SIGHUP, and a child
that keeps an ignored signal ignored (as it rightly does: Python itself, ``data_prep.atomic``, ``rolling-calib
run``) then never receives the signal the test sends (issue 41). Every test that starts a process and
signals it passes :func:`default_signals` as ``preexec_fn`` (or uses :func:`popen`), so the child starts as
it would from a terminal, wherever the suite itself was started.

``preexec_fn`` runs in the child between ``fork`` and ``exec``; it only calls ``signal.signal``, which
takes no lock another thread of the test process could hold.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from typing import Any

#: The signals tests send to the processes they start (SIGKILL cannot be ignored, so it needs nothing).
SENT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def default_signals() -> None:
    """``preexec_fn`` of a child a test signals: each of :data:`SENT_SIGNALS` at its default action."""
    for sig in SENT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def popen(cmd: Sequence[str], **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(cmd, **kwargs)`` with :func:`default_signals` as its ``preexec_fn``."""
    return subprocess.Popen(list(cmd), preexec_fn=default_signals, **kwargs)
