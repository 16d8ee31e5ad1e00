"""Progress inside units: what each running unit does, drawn under the run's "units" bar, and the run's ETA.

A unit runs in a worker process (the local pool, Ray) or in this one (``--workers 1``), with its
stdout and stderr in its log file (:mod:`rolling_calib.execution.unit_log`); it never draws
anything itself. It sends small :class:`UnitEvent` records through a channel the executor sets up,
and the parent draws them::

    worker:  execute_unit -> unit_reporter(key) -> train_window(progress=...) -> model.fit(report=...)
             each stage ("starting", "building", "fitting", "predicting", "saving", "writing"), each
             epoch, and the batches of long epochs (at most every MIN_INTERVAL s) -> UnitEvent -> the sink
             (what each kind of model tells: rolling_calib.qlib_adapter.training)
    channel: --workers 1: the sink is the board itself (same process, same thread)
             local pool:  a multiprocessing queue; each worker installs it at start (pool initializer),
                          a thread of the parent relays what arrives (:func:`relay`)
             Ray:         a ``ray.util.queue.Queue`` actor; each task installs it, the driver drains it
                          while it waits for units
    parent:  ProgressBoard: the "units" bar (position 0) and one line per running unit under it
             ("wd0 seed3 w01: fitting epoch 2/5, batch 120/400 [01:12]"), removed when the unit ends;
             the ETA of the whole run from the units finished in this run (:func:`eta_seconds`); the
             units' times and the ETA count on every second between reports

The lines under the bar are drawn only when stderr is a terminal (positioned lines make a mess of a
log file; there the units bar shows the ETA as before); ``--no-progress`` and ``--json`` turn every
bar off, and then no channel is set up and units report nothing. Reporting never changes a number:
it reads no result and draws no random number.

Example
-------
>>> events = []
>>> with installed(events.append):
...     report = unit_reporter(UnitKey("wd0", 3, 1))
...     report("fitting", epoch=2, epochs=5, batch=0, batches=400)
>>> [e.stage for e in events], events[-1].line()
(['starting', 'fitting'], 'wd0 seed3 w01: fitting epoch 2/5 [00:00]')
>>> unit_reporter(UnitKey("wd0", 3, 1)) is None   # nothing installed: no reporting, no cost
True
"""

from __future__ import annotations

import contextlib
import os
import queue as queue_module
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from rolling_calib.execution.units import StackKey, UnitKey, WindowKey

__all__ = ["MIN_INTERVAL", "ProgressBoard", "UnitEvent", "eta_seconds", "install", "install_queue", "installed",
           "relay", "unit_label", "unit_reporter"]

#: Seconds between two events of one unit within the same stage and epoch (a new stage or epoch is always sent).
MIN_INTERVAL = 0.5

#: The units bar: tqdm's own bar without its naive remaining time and rate (the ETA is in the postfix).
UNITS_BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"


def _interval(seconds: float) -> str:
    """``MM:SS`` or ``H:MM:SS``, as tqdm writes its elapsed time."""
    from tqdm.std import tqdm

    return tqdm.format_interval(max(0.0, seconds))


def _seconds(seconds: float) -> str:
    """A unit's time: seconds to one decimal under a minute, else as :func:`_interval`.

    >>> _seconds(0.84), _seconds(41.2), _seconds(185)
    ('0.8s', '41.2s', '03:05')
    """
    return f"{seconds:.1f}s" if seconds < 60 else _interval(seconds)


def unit_label(key: UnitKey | StackKey) -> str:
    """What a unit's line starts with.

    >>> unit_label(UnitKey("wd0", 3, 1)), unit_label(StackKey("wd0", (0, 1), 2))
    ('wd0 seed3 w01', 'wd0 seeds0-1 w02')
    """
    if isinstance(key, (StackKey, WindowKey)):
        return f"{key.pipeline} seeds{'-'.join(map(str, key.seeds))} w{key.window:02d}"
    return f"{key.pipeline} seed{key.seed} w{key.window:02d}"


@dataclass(frozen=True)
class UnitEvent:
    """One report of a running unit: its stage, epoch ``epoch`` of ``epochs``, batch ``batch`` of ``batches``.

    ``elapsed``: seconds since the unit started, measured where it runs. ``None``: not known
    (a model that reports no epochs; an epoch too short to report its batches).
    """

    slug: str
    label: str
    stage: str
    elapsed: float
    epoch: int | None = None
    epochs: int | None = None
    batch: int | None = None
    batches: int | None = None

    def line(self, elapsed: float | None = None) -> str:
        """The unit's line under the units bar (``elapsed``: the unit's time now, default: when it reported).

        >>> UnitEvent("s", "wd0 seed3 w01", "fitting", 72.4, epoch=2, epochs=5, batch=120, batches=400).line()
        'wd0 seed3 w01: fitting epoch 2/5, batch 120/400 [01:12]'
        """
        text = f"{self.label}: {self.stage}"
        if self.epoch is not None:
            text += f" epoch {self.epoch}" + (f"/{self.epochs}" if self.epochs else "")
        if self.batch:  # 0: the epoch just started
            text += f", batch {self.batch}" + (f"/{self.batches}" if self.batches else "")
        return f"{text} [{_interval(self.elapsed if elapsed is None else elapsed)}]"


# --------------------------------------------------------------------------- the unit's side
_sink: Callable[[UnitEvent], None] | None = None


def install(sink: Callable[[UnitEvent], None] | None) -> None:
    """Send this process's unit events to ``sink`` (None: report nothing)."""
    global _sink
    _sink = sink


def install_queue(channel: Any) -> None:
    """Send this process's unit events into ``channel`` (a local pool worker's initializer)."""
    install(channel.put_nowait)


@contextlib.contextmanager
def installed(sink: Callable[[UnitEvent], None] | None) -> Iterator[None]:
    """:func:`install` ``sink`` while the block runs (None: leave things as they are)."""
    if sink is None:
        yield
        return
    before = _sink
    install(sink)
    try:
        yield
    finally:
        install(before)


def unit_reporter(key: UnitKey | StackKey) -> Callable[..., None] | None:
    """The :data:`~rolling_calib.qlib_adapter.training.UnitProgress` of the unit ``key`` starting now, or None.

    None when nothing is installed (no bars to draw): the unit then reports nothing. The reporter
    reports ``"starting"`` at once (a fresh worker imports Qlib and torch before the first stage).
    """
    return None if _sink is None else _Reporter(key, _sink)


class _Reporter:
    """Stamps a unit's reports (its key, its elapsed time), sends a new stage or epoch at once, the rest at most every
    :data:`MIN_INTERVAL` seconds. A sink that fails stops the reporting (with a warning, in the unit's log), never the unit."""

    def __init__(self, key: UnitKey | StackKey, sink: Callable[[UnitEvent], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.slug, self.label, self.sink, self.clock = key.slug(), unit_label(key), sink, clock
        self.t0 = clock()
        self._sent_at, self._sent_step = -float("inf"), None
        self("starting")

    def __call__(self, stage: str, *, epoch: int | None = None, epochs: int | None = None, batch: int | None = None,
                 batches: int | None = None) -> None:
        if self.sink is None:
            return
        now = self.clock()
        if (stage, epoch) == self._sent_step and now - self._sent_at < MIN_INTERVAL:
            return
        event = UnitEvent(self.slug, self.label, stage, now - self.t0, epoch, epochs, batch, batches)
        try:
            self.sink(event)
        except Exception as exc:  # noqa: BLE001 -- the console's lines are not worth a unit
            warnings.warn(f"progress of unit {self.slug}: reporting stopped ({type(exc).__name__}: {exc})", stacklevel=2)
            self.sink = None
            return
        self._sent_at, self._sent_step = now, (stage, epoch)


# --------------------------------------------------------------------------- the channel of a local pool
@contextlib.contextmanager
def relay(channel: Any, on_event: Callable[[UnitEvent], None], *, poll: float = 0.1) -> Iterator[None]:
    """Call ``on_event`` for each event arriving in ``channel`` (a multiprocessing queue), from a thread, while the block runs.

    What arrived before the block ends is relayed before it returns (the pool's workers have
    exited by then, so their queues are flushed).
    """
    stop = threading.Event()

    def pump() -> None:
        while True:
            try:
                on_event(channel.get(timeout=poll))
            except queue_module.Empty:
                if stop.is_set():
                    return

    thread = threading.Thread(target=pump, name="unit-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


# --------------------------------------------------------------------------- the parent's side
def eta_seconds(times: Mapping[str, Sequence[float]], left: Mapping[str, int], workers: int) -> float | None:
    """Seconds until the run ends, from the wall times of the units finished in this run.

    ``ETA = sum_p mean_p * left_p / min(workers, sum_p left_p)``: ``mean_p`` the mean wall time of
    pipeline ``p``'s finished units (the mean of all finished units for a pipeline with none yet),
    ``left_p`` its units not finished, ``workers`` the units that run at once. None before any unit finished.

    Examples
    --------
    >>> eta_seconds({"a": [10.0, 20.0]}, {"a": 4, "b": 2}, workers=2)   # (15 * 4 + 15 * 2) / 2
    45.0
    >>> eta_seconds({"a": [10.0], "b": [100.0]}, {"a": 1, "b": 1}, workers=4)   # 2 left: 2 at once
    55.0
    >>> eta_seconds({}, {"a": 3}, workers=1) is None
    True
    """
    finished = [t for ts in times.values() for t in ts]
    if not finished:
        return None
    overall = sum(finished) / len(finished)
    n_left = sum(left.values())
    if n_left == 0:
        return 0.0
    work = sum(n * (sum(times[p]) / len(times[p]) if times.get(p) else overall) for p, n in left.items())
    return work / max(1, min(workers, n_left))


class ProgressBoard:
    """The run's console: the "units" bar, a line per running unit under it (terminals only), the run's ETA.

    Parameters
    ----------
    total : int
        Units of the plan.
    done : int
        Units already complete (skipped).
    left : mapping
        Units to run, per pipeline.
    workers : int or None
        Units that run at once (None: the most seen running at once).
    enabled : bool
        Draw anything at all (``--no-progress`` / ``--json``: False).
    nested : bool, optional
        Draw the lines of running units (default: when stderr is a terminal).
    file : text stream, optional
        Where to draw (default: a duplicate of stderr's descriptor when ``nested``: a unit run in this
        process has descriptor 2 in its log file; else stderr, as tqdm does).

    :meth:`on_event` may be called from another thread than :meth:`unit_done`; a lock orders them.
    """

    def __init__(self, *, total: int, done: int, left: Mapping[str, int], workers: int | None, enabled: bool,
                 nested: bool | None = None, file: TextIO | None = None) -> None:
        from tqdm.auto import tqdm

        self._tqdm = tqdm
        self.enabled = bool(enabled)
        self.nested = self.enabled and (_is_terminal(sys.stderr) if nested is None else bool(nested))
        self._own_file = file is None and self.nested
        self.file = _dup_stderr() if self._own_file else file
        self.bar = tqdm(total=total, initial=done, desc="units", unit="unit", disable=not self.enabled,
                        dynamic_ncols=True, file=self.file, bar_format=UNITS_BAR_FORMAT)
        self.workers, self.left = workers, Counter(left)
        self.times: dict[str, list[float]] = {}
        self.lines: dict[str, Any] = {}       # slug -> tqdm line of a running unit
        self.positions: dict[str, int] = {}   # slug -> its line's row under the bar (1, 2, ...)
        self.finished: set[str] = set()
        self._lock = threading.RLock()
        self._eta: tuple[float, float] | None = None   # (ETA in s, when it was computed)
        self._most_running = 0
        self._latest: dict[str, tuple[UnitEvent, float]] = {}   # slug -> its last report, when it came
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="progress-ticker", daemon=True)
        if self.nested:  # the units' times and the ETA count on between reports
            self._ticker.start()

    def __enter__(self) -> ProgressBoard:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def on_event(self, event: UnitEvent) -> None:
        """Draw a running unit's report on its line (a new line for a unit that just started)."""
        with self._lock:
            if not self.nested or event.slug in self.finished:  # a late report of a unit already done
                return
            line = self.lines.get(event.slug)
            if line is None:
                self.positions[event.slug] = position = self._free_position()
                line = self._tqdm(total=None, position=position, leave=False, bar_format="  {desc}",
                                  file=self.file, dynamic_ncols=True)
                self.lines[event.slug] = line
                self._most_running = max(self._most_running, len(self.lines))
            self._latest[event.slug] = (event, time.monotonic())
            line.set_description_str(event.line(), refresh=True)
            self._show_eta()

    def unit_done(self, key: UnitKey | StackKey, times: Sequence[tuple[str, float]]) -> None:
        """A task finished: its units' ``(pipeline, wall seconds)``; its line goes, the bar and the ETA move."""
        with self._lock:
            self.finished.add(key.slug())
            line = self.lines.pop(key.slug(), None)
            self.positions.pop(key.slug(), None)
            self._latest.pop(key.slug(), None)
            if line is not None:
                line.close()
            for pipeline, seconds in times:
                self.times.setdefault(pipeline, []).append(float(seconds))
                self.left[pipeline] = max(0, self.left[pipeline] - 1)
            eta = eta_seconds(self.times, self.left, self._workers())
            self._eta = None if eta is None else (eta, time.monotonic())
            self.bar.update(len(times))
            self._show_eta()

    def add(self, *, total: int, done: int, left: Mapping[str, int]) -> None:
        """Units added to the run while it goes on (a fed run's next batch): ``total`` of them, ``done`` complete already."""
        with self._lock:
            self.bar.total = (self.bar.total or 0) + total
            self.bar.update(done)
            self.left.update(left)
            self.bar.refresh()

    def eta_text(self) -> str:
        """The ETA shown on the units bar (empty before a unit finished).

        ``ETA MM:SS (mean 41.2s/unit, K at once)``, counted down between finished units (the mean alone
        once no unit is left).
        """
        if self._eta is None:
            return ""
        eta, at = self._eta
        finished = [t for ts in self.times.values() for t in ts]
        mean = f"mean {_seconds(sum(finished) / len(finished))}/unit"
        if not sum(self.left.values()):
            return mean
        return f"ETA {_interval(eta - (time.monotonic() - at))} ({mean}, {self._workers()} at once)"

    def close(self) -> None:
        """Remove every line and close the bar (and the stream it opened)."""
        self._stop.set()
        if self._ticker.is_alive():
            self._ticker.join()
        with self._lock:
            for line in self.lines.values():
                line.close()
            self.lines.clear()
            self.positions.clear()
            self.bar.close()
            if self._own_file:
                with contextlib.suppress(OSError):
                    self.file.close()

    def _tick(self, every: float = 1.0) -> None:
        """Redraw the running units' lines with their time now, and the ETA, every ``every`` seconds."""
        while not self._stop.wait(every):
            with self._lock:
                now = time.monotonic()
                for slug, (event, received) in self._latest.items():
                    self.lines[slug].set_description_str(event.line(event.elapsed + now - received), refresh=True)
                self._show_eta()

    def _workers(self) -> int:
        return max(1, self.workers or self._most_running)

    def _free_position(self) -> int:
        """The first row under the bar no running unit holds."""
        taken = set(self.positions.values())
        return next(pos for pos in range(1, len(taken) + 2) if pos not in taken)

    def _show_eta(self) -> None:
        text = self.eta_text()
        if text:
            self.bar.set_postfix_str(text, refresh=True)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _dup_stderr() -> TextIO:
    """A stream on a copy of stderr's descriptor (still the terminal while a unit's descriptor 2 is its log)."""
    return os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1, encoding="utf-8", errors="replace")
