"""Inside the local pool's loop the first stop signal is recorded, never raised inside ``concurrent.futures``'
locks (``stops_polled``): the loop raises it where it looks, and a stop recorded after its last look is raised on
leaving. In this process, with SIGTERM (which no way of starting the suite ignores; set to its default here)."""

from __future__ import annotations

import os
import signal

import pytest

from rolling_calib.execution.executors import (
    RunStopped,
    raise_pending_stop,
    stop_now_requested,
    stop_signals,
    stops_polled,
)


@pytest.fixture
def default_sigterm():
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, before)


def _signal_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    signal.pthread_sigmask(signal.SIG_BLOCK, [])   # a call into C: the handler has run when it returns


def test_the_first_signal_is_raised_where_the_loop_looks(default_sigterm):
    with stop_signals(), stops_polled():
        _signal_self()                       # recorded: no exception here
        with pytest.raises(RunStopped) as stop:
            raise_pending_stop()
        assert stop.value.signum == signal.SIGTERM
        raise_pending_stop()                 # raised once only
        assert not stop_now_requested()


def test_a_stop_after_the_last_look_is_raised_on_leaving(default_sigterm):
    with stop_signals():
        with pytest.raises(RunStopped), stops_polled():
            _signal_self()


def test_outside_the_loop_the_first_signal_raises_where_the_main_thread_is(default_sigterm):
    with stop_signals():
        with pytest.raises(RunStopped):
            _signal_self()
            for _ in range(1000):            # the handler runs at the next bytecode boundaries at the latest
                pass
