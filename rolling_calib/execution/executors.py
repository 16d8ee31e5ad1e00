"""Executors: run the (pipeline, seed, window) units of a rolling grid.

A *unit* is one training window of one seed of one pipeline. Units of the same
(pipeline, seed) may depend on each other: a fine-tuned window starts from the
weights of its predecessor, so it must wait until that unit has finished. The
executor only schedules; the work itself (train, predict, write the unit's result
atomically into the store) is a picklable callable ``work(key) -> result`` given
by the runner. Because every unit writes its own result before it reports back,
an executor that stops half-way never loses a completed unit.

Progress inside units: given ``on_progress``, an executor carries the
:class:`~rolling_calib.execution.progress.UnitEvent` records its units send
(:func:`~rolling_calib.execution.progress.unit_reporter`) back to this process and calls
``on_progress(event)`` with each (from another thread for the local pool); without it, units
report nothing.

Stops (inside :func:`stop_signals`, as every command runs): the first SIGTERM or Ctrl-C cancels the queued
units at once and lets the running ones finish, saying on stderr what it waits for
(:func:`waiting_line`); a second signal ends the running units at once, so only complete units stay in
the store (a unit's sidecar is written last). The local pool's workers end with the run, even one
killed with ``kill -9`` (:func:`end_with_parent`).

Two executors share this contract:

* :class:`LocalExecutor` -- a local process pool (the default).
* ``rolling_calib.execution.ray_executor.RayExecutor`` -- a Ray cluster.

Example
-------
>>> tasks = [UnitTask(UnitKey("a", 0, 0)), UnitTask(UnitKey("a", 0, 1), after=UnitKey("a", 0, 0))]
>>> results = LocalExecutor(workers=1).run(tasks, str)
>>> results[UnitKey("a", 0, 1)]
"UnitKey(pipeline='a', seed=0, window=1)"
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from rolling_calib.core.validation import Interval, check
from rolling_calib.execution.progress import UnitEvent, install_queue, installed, relay

#: Worker processes are forked from a clean server process, never from this one: a process that
#: already ran OpenMP code (LightGBM, BLAS) cannot be forked safely (the child's thread pool hangs).
_POOL_CONTEXT = multiprocessing.get_context("forkserver")
from rolling_calib.execution.units import UnitKey, UnitTask


#: Called in the parent process after each unit finishes: ``(key, result)``.
ProgressCallback = Callable[[UnitKey, Any], None]
#: Called in the parent process with each report of a running unit.
EventCallback = Callable[[UnitEvent], None]
#: Called in the parent process after each unit finishes (after ``on_done``): ``(key, result)`` -> more tasks to run
#: in the same run, submitted at once while the other units go on (a run that grows as results come in).
FeedCallback = Callable[[UnitKey, Any], Sequence[UnitTask]]


class Executor(Protocol):
    """Runs ``work`` once per task, respecting ``after`` dependencies."""

    def run(
        self,
        tasks: Sequence[UnitTask],
        work: Callable[[UnitKey], Any],
        *,
        on_done: ProgressCallback | None = None,
        on_progress: EventCallback | None = None,
        feed: FeedCallback | None = None,
    ) -> dict[UnitKey, Any]:
        """Return ``{key: work(key)}`` for every task (and every task ``feed`` adds); raise if any unit failed."""
        ...


class UnitFailedError(RuntimeError):
    """One or more units raised; the message names every failed unit, the first cause is chained.

    ``failures`` holds ``[(key, exception), ...]`` of every unit that failed, in the
    order they were seen; ``completed`` holds ``{key: result}`` of the units that did
    finish (their results are in the store, so a re-run resumes after them).
    """

    def __init__(self, message: str, *, completed: dict[UnitKey, Any] | None = None,
                 failures: Sequence[tuple[UnitKey, BaseException]] = ()) -> None:
        super().__init__(message)
        self.completed: dict[UnitKey, Any] = dict(completed or {})
        self.failures: list[tuple[UnitKey, BaseException]] = list(failures)


class RunStopped(KeyboardInterrupt):
    """A stop signal (SIGTERM or SIGINT) ended the run: queued units were cancelled, the running ones finished or
    (after a second signal) ended.

    A ``KeyboardInterrupt`` (a ``BaseException``): no ``except Exception`` of a unit or a library
    swallows it, and code that handles Ctrl-C handles SIGTERM alike. ``signum`` is the signal (the exit status is ``128 + signum``: 143, 130); the
    counts say what became of the units; :meth:`line` is the one line the command prints.

    >>> RunStopped(signal.SIGTERM, completed=1, finished=2, cancelled=5).line()
    'stopped by SIGTERM: 3 unit(s) completed and kept (2 of them finished after the signal), 5 queued unit(s) cancelled; the same command resumes'
    """

    def __init__(self, signum: int, *, completed: int = 0, finished: int = 0, cancelled: int = 0,
                 ended: int = 0, units: bool = True) -> None:
        super().__init__(signum)
        self.signum, self.completed, self.finished = int(signum), completed, finished
        self.cancelled, self.ended, self.units = cancelled, ended, units

    @property
    def exit_status(self) -> int:
        """The shell's status of a process ended by the signal: 143 for SIGTERM, 130 for SIGINT."""
        return 128 + self.signum

    def line(self) -> str:
        """One line: which signal, what was kept, cancelled and ended."""
        name = signal.Signals(self.signum).name
        if not self.units:  # stopped outside the units' loop (planning, scoring): nothing of units to say
            return f"stopped by {name}"
        kept = self.completed + self.finished
        after = f" ({self.finished} of them finished after the signal)" if self.finished else ""
        ended = (f", {self.ended} running unit(s) ended (nothing of them kept)"
                 if self.ended else "")
        return (f"stopped by {name}: {kept} unit(s) completed and kept{after}, {self.cancelled} queued unit(s) "
                f"cancelled{ended}; the same command resumes")


class _StopState:
    """What :func:`stop_signals` has seen: the stop signals received (with their times), whether units run.

    ``units_running``: an executor runs units (:func:`units_running`); it reads :func:`stop_now_requested` and
    ends its running units at once. ``continued``: SIGCONT came after a stop signal (what GNU ``timeout`` sends
    after the signal it forwards). ``polled``: inside :func:`stops_polled`, the first stop signal is recorded, not
    raised; ``raised``: its :class:`RunStopped` was raised (by the handler or by :func:`raise_pending_stop`).
    """

    def __init__(self) -> None:
        self.received: list[tuple[int, float]] = []   # (signal, time.monotonic())
        self.units_running = False
        self.continued = False
        self.polled = False    # an executor's loop looks for the first stop itself (:func:`stops_polled`)
        self.raised = False    # the first stop signal's RunStopped has been raised


_STOP = _StopState()

#: Seconds after the first stop signal in which further ones outside the units count as copies of it (a wrapper
#: such as GNU ``timeout`` forwards the signal the terminal already sent to the group: two or three come at once).
FORWARDED_WITHIN_S = 1.0


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """SIGTERM and SIGINT stop the command in this (main) thread while inside; restored after.

    The first stop signal raises :class:`RunStopped` where the main thread is (inside :func:`stops_polled`, where
    the executor's loop next looks). A later one, while an executor
    runs units (:func:`units_running`), is only counted: the executor ends its running units at once
    (:func:`stop_now_requested`), leaving no half-written unit. Outside the units a later one raises again,
    unless it came within :data:`FORWARDED_WITHIN_S` of the first (a forwarded copy of the same stop must not
    cut the stop's own clean-up short). A stop signal followed by SIGCONT counts as two: GNU ``timeout`` sends
    SIGCONT after the signal it forwards, and two signals sent at once may reach a process as one.

    A signal this process ignores (``cmd &`` in a script ignores SIGINT) stays ignored, as Python itself
    leaves it. Outside the main thread (where Python cannot set handlers) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _STOP.__init__()

    def stop(signum: int, frame: Any) -> None:
        now = time.monotonic()
        _STOP.received.append((signum, now))
        if len(_STOP.received) == 1:
            if _STOP.polled:   # the executor's loop raises it where it looks (raise_pending_stop)
                return
            _STOP.raised = True
            raise RunStopped(signum, units=False)
        if not _STOP.units_running and now - _STOP.received[0][1] > FORWARDED_WITHIN_S:
            raise RunStopped(signum, units=False)

    def continued(signum: int, frame: Any) -> None:
        if _STOP.received:
            _STOP.continued = True

    handlers: dict[int, Any] = {sig: stop for sig in (signal.SIGTERM, signal.SIGINT)
                                if signal.getsignal(sig) is not signal.SIG_IGN}
    if hasattr(signal, "SIGCONT"):
        handlers[signal.SIGCONT] = continued
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _STOP.__init__()


@contextlib.contextmanager
def units_running() -> Iterator[None]:
    """An executor runs units while inside: a second stop signal is theirs to act on (:func:`stop_signals`)."""
    before = _STOP.units_running
    _STOP.units_running = True
    try:
        yield
    finally:
        _STOP.units_running = before


@contextlib.contextmanager
def stops_polled() -> Iterator[None]:
    """Inside, the first stop signal is recorded, not raised where the main thread happens to be.

    An exception raised from a signal handler inside ``concurrent.futures`` or ``threading`` can leave one of
    their locks held (between a lock's ``__enter__`` and the ``with`` block that releases it): the pool's manager
    thread then waits on it for ever and the run never ends (seen once in CI under ``timeout``, where three
    signals come at once). Inside, the executor's loop calls :func:`raise_pending_stop` between its waits;
    on leaving normally a stop recorded since the last look is raised.
    """
    before = _STOP.polled
    _STOP.polled = True
    try:
        yield
    finally:
        _STOP.polled = before
    raise_pending_stop()


def raise_pending_stop() -> None:
    """Raise the first stop signal's :class:`RunStopped` if it came and was only recorded (:func:`stops_polled`)."""
    if _STOP.received and not _STOP.raised:
        _STOP.raised = True
        raise RunStopped(_STOP.received[0][0], units=False)


def stop_now_requested() -> bool:
    """True once a second stop signal came (or SIGCONT after the first): end the running units at once."""
    return len(_STOP.received) >= 2 or (bool(_STOP.received) and _STOP.continued)


def waiting_line(signum: int, running: Sequence[float], finished: Sequence[float], *, units: int | None = None) -> str:
    """The line printed at the first stop signal while units still run.

    ``running``: seconds each running task has run; ``finished``: wall seconds of the tasks finished in this
    run; ``units``: the units of the running tasks (a seed stack trains several; default one each). The time
    left is ``max_i max(0, mean(finished) - running_i)`` (they run at once); unknown before a task finished.

    Examples
    --------
    >>> waiting_line(signal.SIGINT, [3.0, 10.0], [12.0, 14.0])
    'stopping (SIGINT): waiting for 2 running unit(s) to finish, about 10 s (units of this run took 13 s on average); Ctrl-C again stops them now, keeping only complete units'
    >>> waiting_line(signal.SIGTERM, [3.0], [])
    'stopping (SIGTERM): waiting for 1 running unit(s) to finish (time unknown: no unit finished in this run yet); a second SIGTERM or Ctrl-C stops them now, keeping only complete units'
    """
    name = signal.Signals(signum).name
    if finished:
        mean = sum(finished) / len(finished)
        left = max((max(0.0, mean - seconds) for seconds in running), default=0.0)
        about = f", about {left:.0f} s (units of this run took {mean:.0f} s on average)"
    else:
        about = " (time unknown: no unit finished in this run yet)"
    again = "Ctrl-C again" if signum == signal.SIGINT else f"a second {name} or Ctrl-C"
    count = len(running) if units is None else units
    return (f"stopping ({name}): waiting for {count} running unit(s) to finish{about}; "
            f"{again} stops them now, keeping only complete units")


def end_with_parent() -> None:
    """This process (a pool worker) ends as soon as the process that started it ends, however that ended.

    A run killed with ``kill -9`` cannot stop its workers itself, and a pool's worker only notices at its next
    unit: without this it would go on training into a store whose lock is gone. A daemon thread waits on the
    parent's sentinel (``multiprocessing.parent_process().sentinel``: readable once the run has ended; the
    worker's own parent is the forkserver, which outlives the run while workers are alive, so
    ``prctl(PR_SET_PDEATHSIG)`` would not fire), then ends this process with SIGTERM (SIGKILL where SIGTERM is
    ignored): an atomic write in flight removes its temporary file first (:mod:`data_prep.atomic`). A process
    not started by :mod:`multiprocessing` has no such parent: nothing to watch.
    """
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    signum = signal.SIGKILL if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN else signal.SIGTERM

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os.kill(os.getpid(), signum)

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()


def _worker_init(channel: Any) -> None:
    """A pool worker: it ends with its parent; Ctrl-C (SIGINT to the whole process group) is the parent's to
    handle; it reports to ``channel``.

    tqdm's bars in a worker write to the unit's log, so they need no lock shared across processes: a thread
    lock replaces the one tqdm would create (a named semaphore that a worker ended by a second stop signal
    could not remove: Python's resource tracker then warned about it after the run's last line).
    """
    end_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from tqdm.std import tqdm

    tqdm.set_lock(threading.RLock())
    if channel is not None:
        install_queue(channel)


def end_workers(pool: cf.ProcessPoolExecutor) -> None:
    """End the worker processes of ``pool`` at once (SIGTERM): their running units stop where they are.

    Python 3.14 offers ``ProcessPoolExecutor.terminate_workers()``; before it, the workers are reachable only
    through the pool's private ``_processes`` (``{pid: Process}``, in CPython since 3.2): this is the one place
    that reads it (``tests/execution/test_stop_units.py`` checks that it still finds and ends the workers).
    """
    terminate = getattr(pool, "terminate_workers", None)
    if terminate is not None:
        terminate()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()


def as_run_stopped(exc: BaseException) -> RunStopped | None:
    """``exc`` as a :class:`RunStopped`, or None for anything other than a stop.

    A plain ``KeyboardInterrupt`` is the first stop signal :func:`stop_signals` received (Ray's ``wait`` turns
    the :class:`RunStopped` raised in it into a ``KeyboardInterrupt``), else SIGINT's.
    """
    if isinstance(exc, RunStopped):
        return exc
    if not isinstance(exc, KeyboardInterrupt):
        return None
    return RunStopped(_STOP.received[0][0] if _STOP.received else signal.SIGINT, units=False)


class DependencyQueue:
    """Hands out tasks whose predecessor has finished; shared by every executor.

    Example
    -------
    >>> a0, a1 = UnitKey("a", 0, 0), UnitKey("a", 0, 1)
    >>> queue = DependencyQueue([UnitTask(a0), UnitTask(a1, after=a0)])
    >>> [t.key.window for t in queue.take_ready()]
    [0]
    >>> queue.mark_done(a0); [t.key.window for t in queue.take_ready()]
    [1]
    >>> queue.add([UnitTask(UnitKey("a", 1, 0), after=a0)]); [t.key.seed for t in queue.take_ready()]
    [1]
    """

    def __init__(self, tasks: Sequence[UnitTask]) -> None:
        check_tasks(tasks)
        self._waiting: dict[UnitKey, list[UnitTask]] = {}
        self._ready: list[UnitTask] = []
        self._known: set = set()
        self._done: set = set()
        self._put(tasks)

    def _put(self, tasks: Sequence[UnitTask]) -> None:
        for task in tasks:
            self._known.add(task.key)
            if task.after is None or task.after in self._done:
                self._ready.append(task)
            else:
                self._waiting.setdefault(task.after, []).append(task)

    def add(self, tasks: Sequence[UnitTask]) -> None:
        """Schedule more tasks while the run goes on (a ``feed``'s); they may wait for any task of the run.

        Raises ``ValueError`` for a key already scheduled or a dependency the run does not know.
        """
        tasks = list(tasks)
        check_tasks(tasks, known=self._known)
        again = [t.key for t in tasks if t.key in self._known]
        if again:
            raise ValueError(f"tasks: {again[0]} is scheduled already")
        self._put(tasks)

    def take_ready(self) -> list[UnitTask]:
        """Return (and remove) every task that may start now, in submission order."""
        ready, self._ready = self._ready, []
        return ready

    def mark_done(self, key: UnitKey) -> None:
        """Release the tasks that waited for ``key``."""
        self._done.add(key)
        self._ready.extend(self._waiting.pop(key, []))

    def left(self) -> int:
        """Units of the tasks not handed out yet (ready or waiting for a predecessor, down the whole chain)."""
        return (units_in(t.key for t in self._ready)
                + sum(units_in(t.key for t in tasks) for tasks in self._waiting.values()))


def units_in(keys: Any) -> int:
    """Units the tasks of ``keys`` write (a seed stack or a window's seeds: one per seed).

    >>> from rolling_calib.execution.units import StackKey
    >>> units_in([UnitKey("a", 0, 0), StackKey("a", (1, 2), 0)])
    3
    """
    return sum(len(key.units()) if hasattr(key, "units") else 1 for key in keys)


def failure_error(
    failures: Sequence[tuple[UnitKey, BaseException]],
    completed: dict[UnitKey, Any],
    *,
    detail: str = "",
) -> UnitFailedError:
    """The error every executor raises when units fail for good; it names all of them.

    Examples
    --------
    >>> err = failure_error([(UnitKey("a", 0, 1), ValueError("boom")), (UnitKey("b", 2, 0), OSError("disk"))], {})
    >>> print(err)
    2 units failed; first: unit a__seed0__w01 failed: ValueError: boom; also: b__seed2__w00 (OSError: disk); 0 unit(s) completed and kept in the store
    """
    (key, exc), rest = failures[0], failures[1:]
    first = f"unit {key.slug()} failed{detail}: {type(exc).__name__}: {exc}"
    head = f"{len(failures)} units failed; first: {first}" if rest else first
    also = "; also: " + ", ".join(f"{k.slug()} ({type(e).__name__}: {e})" for k, e in rest) if rest else ""
    return UnitFailedError(
        f"{head}{also}; {len(completed)} unit(s) completed and kept in the store",
        completed=completed,
        failures=failures,
    )


def check_tasks(tasks: Sequence[UnitTask], *, known: set | frozenset = frozenset()) -> None:
    """Raise ``ValueError`` for duplicate keys or a dependency outside the task list (and ``known``).

    A dependency on a unit that is not in ``tasks`` is allowed only when the runner
    already completed it; the runner removes such dependencies before scheduling.
    ``known``: the tasks a run scheduled before (tasks a ``feed`` adds may wait for them).
    """
    keys = [task.key for task in tasks]
    if len(set(keys)) != len(keys):
        raise ValueError("tasks: duplicate unit keys")
    known = set(keys) | set(known)
    for task in tasks:
        if task.after is not None and task.after not in known:
            raise ValueError(f"tasks: {task.key} waits for {task.after}, which is not scheduled")


#: Seconds between two looks of the pool's loop for a stop signal (the first, and a second while the running units
#: finish).
STOP_POLL_S = 0.2


class _UnitClock:
    """Wall times of the pool's tasks, measured in this process: from submission (a worker is free, so it starts)."""

    def __init__(self) -> None:
        self.started: dict[cf.Future, float] = {}
        self.finished: list[float] = []   # seconds of each task finished in this run

    def start(self, future: cf.Future) -> None:
        self.started[future] = time.monotonic()

    def stop(self, future: cf.Future) -> None:
        self.finished.append(time.monotonic() - self.started.pop(future))

    def running(self, futures: Any) -> list[float]:
        """Seconds each of ``futures`` has run."""
        now = time.monotonic()
        return [now - self.started[future] for future in futures]


class LocalExecutor:
    """Run units on a local process pool (``workers=1`` runs them in this process).

    Parameters
    ----------
    workers : int
        Number of worker processes. With 1, units run sequentially in the calling
        process, which is the easiest to debug and profile.
    """

    def __init__(self, *, workers: int = 1) -> None:
        self.workers = check("workers", workers, Interval(int, 1, None))

    def __repr__(self) -> str:
        return f"LocalExecutor(workers={self.workers})"

    def run(
        self,
        tasks: Sequence[UnitTask],
        work: Callable[[UnitKey], Any],
        *,
        on_done: ProgressCallback | None = None,
        on_progress: EventCallback | None = None,
        feed: FeedCallback | None = None,
    ) -> dict[UnitKey, Any]:
        """Return ``{key: work(key)}`` for every task; ``on_progress`` gets the units' reports (module docstring).

        ``feed(key, result)``, called after each unit finishes, returns tasks to add to the run: they
        are given to the pool as soon as a worker is free, while the other units go on.
        """
        queue = DependencyQueue(tasks)
        results: dict[UnitKey, Any] = {}

        def keep(key: UnitKey, result: Any) -> None:
            results[key] = result
            if on_done is not None:
                on_done(key, result)
            queue.mark_done(key)

        def finish(key: UnitKey, result: Any) -> None:
            keep(key, result)
            if feed is not None:
                queue.add(feed(key, result))

        if self.workers == 1:
            with installed(on_progress):  # same process: the reports go straight to on_progress
                return self._run_here(queue, work, results, finish)

        failures: list[tuple[UnitKey, BaseException]] = []
        channel = _POOL_CONTEXT.Queue() if on_progress is not None else None
        waiting: list[UnitTask] = []  # ready units not yet given to the pool: a stop cancels them at once
        running: dict[cf.Future, UnitKey] = {}
        clock = _UnitClock()
        with (units_running(),   # outermost: a second stop signal is counted until the pool is shut down
              stops_polled(),    # no signal raises inside the pool's locks: the loop looks every STOP_POLL_S
              relay(channel, on_progress) if channel is not None else contextlib.nullcontext(),
              cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=_POOL_CONTEXT, initializer=_worker_init,
                                     initargs=(channel,)) as pool):
            try:
                while True:
                    waiting += queue.take_ready()
                    while waiting and not failures and len(running) < self.workers:  # after a failure, only
                        task = waiting.pop(0)                                         # the running units finish
                        future = pool.submit(work, task.key)
                        running[future] = task.key
                        clock.start(future)
                    if not running:
                        break
                    done, _ = cf.wait(running, timeout=STOP_POLL_S, return_when=cf.FIRST_COMPLETED)
                    raise_pending_stop()
                    for future in done:
                        key = running.pop(future)
                        clock.stop(future)
                        try:
                            result = future.result()
                        except Exception as exc:  # re-raised below, after the running units finish
                            failures.append((key, exc))
                            continue
                        finish(key, result)
            except BaseException as exc:
                stop = as_run_stopped(exc)
                if stop is None:
                    raise
                raise self._stop(pool, running, clock, stop, completed=units_in(results),
                                 queued=units_in(t.key for t in waiting) + queue.left(),
                                 finish=keep) from None
        if failures:
            raise failure_error(failures, results) from failures[0][1]
        return results

    @staticmethod
    def _stop(pool: cf.ProcessPoolExecutor, running: dict[cf.Future, UnitKey], clock: _UnitClock, stop: RunStopped,
              *, completed: int, queued: int, finish: Callable[[UnitKey, Any], None]) -> RunStopped:
        """After a stop signal: nothing more starts; the running units finish, and the line says what it waits for.

        A second stop signal (:func:`stop_now_requested`; a ``KeyboardInterrupt`` where :func:`stop_signals` is not
        installed) ends the running units at once: their workers are ended, so their sidecars (written last) are
        never written and a re-run recomputes them.
        """
        finished = ended = 0

        def harvest(done: Iterable[cf.Future]) -> None:
            nonlocal finished
            for future in done:
                key = running.pop(future)
                if future.exception() is None:
                    finish(key, future.result())
                    finished += units_in([key])

        if running and not stop_now_requested():
            print(waiting_line(stop.signum, clock.running(running), clock.finished, units=units_in(running.values())),
                  file=sys.stderr, flush=True)
        try:
            while running and not stop_now_requested():
                harvest(cf.wait(list(running), timeout=STOP_POLL_S, return_when=cf.FIRST_COMPLETED)[0])
        except BaseException as again:
            if as_run_stopped(again) is None:
                raise
        harvest([future for future in running if future.done()])   # complete already: kept, not ended
        if running:
            ended = units_in(running.values())
            end_workers(pool)
        pool.shutdown(wait=True, cancel_futures=True)
        return RunStopped(stop.signum, completed=completed, finished=finished, cancelled=queued, ended=ended)

    @staticmethod
    def _run_here(queue: DependencyQueue, work: Callable[[UnitKey], Any], results: dict[UnitKey, Any],
                  finish: Callable[[UnitKey, Any], None]) -> dict[UnitKey, Any]:
        """Run every task in this process, one at a time, in dependency order."""
        ready = queue.take_ready()
        while ready:
            task = ready.pop(0)
            try:
                result = work(task.key)
            except Exception as exc:
                raise failure_error([(task.key, exc)], results) from exc
            except BaseException as exc:  # a stop signal: the unit in hand ends (its sidecar is never written)
                stop = as_run_stopped(exc)
                if stop is None:
                    raise
                raise RunStopped(stop.signum, completed=units_in(results),
                                 cancelled=units_in(t.key for t in ready) + queue.left(),
                                 ended=1) from None
            finish(task.key, result)
            ready.extend(queue.take_ready())
        return results
