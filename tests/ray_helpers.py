"""Shared pieces for the Ray tests: one small real Ray runtime and picklable work functions.

The work functions are classes with plain fields so Ray can ship them to its
workers; the test module registers this module for pickling by value (the Ray
workers do not have ``tests/`` on their import path).
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from data_prep.atomic import atomic_write

from rolling_calib.execution.executors import UnitKey, UnitTask


def chain_tasks(pipelines: tuple[str, ...] = ("a", "b"), seeds: int = 2, windows: int = 3) -> list[UnitTask]:
    """Tasks of a small rolling grid: window k of a (pipeline, seed) waits for window k-1."""
    tasks = []
    for pipeline in pipelines:
        for seed in range(seeds):
            for window in range(windows):
                after = UnitKey(pipeline, seed, window - 1) if window else None
                tasks.append(UnitTask(UnitKey(pipeline, seed, window), after))
    return tasks


def key_seed(key: UnitKey) -> int:
    """A stable integer seed for a unit (``hash()`` of a str differs between processes)."""
    return zlib.crc32(key.slug().encode())


@dataclass(frozen=True)
class StoreWork:
    """Deterministic stand-in for ``execute_unit``: draws numbers from the unit's seed,
    folds in its predecessor's stored result (like fine-tuning does), writes a JSON file
    per unit atomically, and records start/end times so tests can check the order."""

    store: str
    sleep_s: float = 0.0
    fail_once: tuple[str, ...] = ()
    fail_always: tuple[str, ...] = ()
    attempts_dir: str = field(default="")

    def unit_path(self, key: UnitKey) -> Path:
        return Path(self.store) / f"{key.slug()}.json"

    def __call__(self, key: UnitKey) -> float:
        started = time.time_ns()
        attempts = Path(self.attempts_dir or self.store) / f"{key.slug()}.attempts"
        count = int(attempts.read_text()) + 1 if attempts.exists() else 1
        attempts.write_text(str(count))
        if key.slug() in self.fail_always or (key.slug() in self.fail_once and count == 1):
            raise RuntimeError(f"injected failure in {key.slug()} (attempt {count})")
        previous = 0.0
        if key.window > 0:
            prev_path = self.unit_path(UnitKey(key.pipeline, key.seed, key.window - 1))
            previous = json.loads(prev_path.read_text())["value"]  # fails if not yet written
        value = float(np.random.default_rng(key_seed(key)).normal()) + 0.5 * previous
        time.sleep(self.sleep_s)
        record = {"value": value, "start_ns": started, "end_ns": time.time_ns()}
        # the project's atomic write: a cancel (KeyboardInterrupt in the task) between the temporary file and the
        # rename removes the temporary file, as a real unit's write does
        atomic_write(self.unit_path(key), lambda tmp: Path(tmp).write_text(json.dumps(record)))
        return value


@dataclass(frozen=True)
class FlakyUnit:
    """The runner's real ``execute_unit`` that raises on the first attempt of one unit
    (a marker file in ``marker_dir`` remembers the attempt across Ray workers)."""

    plan: object
    fail_once: str
    marker_dir: str

    def __call__(self, key: UnitKey):
        from rolling_calib.execution.runner import execute_unit

        if key.slug() == self.fail_once:
            marker = Path(self.marker_dir) / f"{key.slug()}.failed"
            if not marker.exists():
                marker.write_text("injected")
                raise RuntimeError(f"injected failure in {key.slug()}")
        return execute_unit(self.plan, key)


@dataclass(frozen=True)
class ReportingWork:
    """A unit that reports ``epochs`` epochs when the executor listens (``unit_reporter`` is not None);
    returns whether it had a reporter."""

    epochs: int = 2

    def __call__(self, key: UnitKey) -> bool:
        from rolling_calib.execution.progress import unit_reporter

        report = unit_reporter(key)
        for epoch in range(1, self.epochs + 1):
            if report is not None:
                report("fitting", epoch=epoch, epochs=self.epochs)
        return report is not None
