"""The shared start of signalled children (issue 41): default actions even when the test runner ignores signals."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys

from signal_helpers import SENT_SIGNALS, default_signals, popen

#: Prints each sent signal's disposition as the child sees it: Python's handler for SIGINT at its default
#: action, SIG_DFL for the others, SIG_IGN where the parent ignored the signal.
SHOW = ("import json, signal\n"
        "def name(h):\n"
        "    return {signal.SIG_IGN: 'ignored', signal.SIG_DFL: 'default', signal.default_int_handler: 'default'}[h]\n"
        f"print(json.dumps({{s: name(signal.getsignal(getattr(signal, s))) for s in {[s.name for s in SENT_SIGNALS]}}}))\n")


@contextlib.contextmanager
def _ignoring(*signals: signal.Signals):
    """This (test) process ignores ``signals`` while inside, as one started by ``cmd &`` or ``nohup`` does."""
    before = {sig: signal.signal(sig, signal.SIG_IGN) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_child_inherits_ignored_signals_unless_reset():
    with _ignoring(signal.SIGINT, signal.SIGHUP):
        inherited = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True, check=True)
        reset = subprocess.run([sys.executable, "-c", SHOW], capture_output=True, text=True, check=True,
                               preexec_fn=default_signals)
        proc = popen([sys.executable, "-c", SHOW], stdout=subprocess.PIPE, text=True)
        out, _ = proc.communicate(timeout=120)
    assert json.loads(inherited.stdout) == {"SIGINT": "ignored", "SIGTERM": "default", "SIGHUP": "ignored"}
    assert json.loads(reset.stdout) == json.loads(out) == {s.name: "default" for s in SENT_SIGNALS}
