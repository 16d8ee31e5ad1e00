"""A process running units on the real local pool, for the stop tests: it is signalled or killed while units run.

``python -c "import stop_helpers; stop_helpers.main()" DIR SECONDS UNITS [ray]`` (with ``tests/`` on
``PYTHONPATH``) runs ``UNITS`` independent units on ``LocalExecutor(workers=2)`` (or on a local Ray runtime of 2
CPUs) inside ``stop_signals()``, as ``rolling-calib`` does, and ends as the command does: the stop line on
stderr, exit status 128 + signal. Each unit (:class:`SlowUnit`) writes ``DIR/<unit>.started`` (its worker's
pid) when it starts, waits until the test writes ``DIR/go`` (at most ``SECONDS``) and then writes
``DIR/<unit>.done`` atomically: a ``.done`` file is a complete unit, and nothing else is.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rolling_calib.execution.executors import LocalExecutor, RunStopped, UnitKey, UnitTask, stop_signals


@dataclass(frozen=True)
class SlowUnit:
    """A unit that runs until ``folder/go`` exists, at most ``seconds`` (it looks every 0.05 s)."""

    folder: str
    seconds: float

    def __call__(self, key: UnitKey) -> int:
        folder = Path(self.folder)
        (folder / f"{key.slug()}.started").write_text(str(os.getpid()))
        end = time.monotonic() + self.seconds
        while not (folder / "go").exists() and time.monotonic() < end:
            time.sleep(0.05)
        tmp = folder / f".{key.slug()}.tmp"
        tmp.write_text("complete")
        tmp.replace(folder / f"{key.slug()}.done")
        return os.getpid()


def started(folder: Path) -> dict[str, int]:
    """``{unit: worker pid}`` of the units that started."""
    return {p.name.removesuffix(".started"): int(p.read_text() or 0) for p in folder.glob("*.started")
            if p.read_text()}


def done(folder: Path) -> set[str]:
    """The units that completed."""
    return {p.name.removesuffix(".done") for p in folder.glob("*.done")}


def main() -> None:
    folder, seconds, units = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    tasks = [UnitTask(UnitKey("a", seed, 0)) for seed in range(units)]
    try:
        with stop_signals():
            _executor(sys.argv[4] if len(sys.argv) > 4 else "local").run(tasks, SlowUnit(folder, seconds))
    except RunStopped as stop:
        print(f"rolling-calib: {stop.line()}", file=sys.stderr, flush=True)
        sys.exit(stop.exit_status)
    print("all units done", flush=True)


def _executor(kind: str):
    """The local pool (2 workers), or a real Ray runtime of 2 CPUs started inside ``stop_signals()`` (``ray.init``
    runs within it, as in ``rolling-calib run --executor ray``)."""
    if kind == "local":
        return LocalExecutor(workers=2)
    import ray

    from rolling_calib.execution.ray_executor import RayExecutor

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])   # Ray's workers do not have tests/ on their path
    return RayExecutor(num_cpus=2, max_retries=0, log_to_driver=False)
