"""Resource bounds checked before anything trains: seeds, pipeline names, units, memory per unit.

Each bound is declared once here; a value beyond it is a :class:`ConfigError` naming the key,
the bound and the value (``rolling-calib run`` exits 2 with nothing written):

* ``rolling.seeds`` (a count or a list) holds at most :data:`MAX_SEEDS` seeds, each in
  ``0 .. 2**32 - 1`` (numpy's seeding range: every unit seeds numpy with its seed);
* a run holds at most :data:`MAX_UNITS` units (pipelines x seeds x windows);
* a pipeline name is 1 to :data:`MAX_NAME` characters of letters, digits and ``._+-=,@~%``, not
  starting with ``.`` (it names a directory of the store and an MLflow experiment);
* one unit's estimated memory (:func:`rolling_calib.qlib_adapter.memory.unit_memory`) fits in the
  memory available on this machine divided by the parallel workers (:func:`check_unit_memory`).

Examples
--------
>>> parse_seeds(3, "rolling.seeds", "exp.yaml")
(0, 1, 2)
>>> parse_seeds(1_000_000_000, "rolling.seeds", "exp.yaml")
Traceback (most recent call last):
...
rolling_calib.core.validation.ConfigError: exp.yaml: rolling.seeds: expected at most 10000 seeds, found a count of 1000000000
>>> print(pipeline_name_problem("wd 5e-6"))
expected a name of letters, digits and ._+-=,@~% (it names a store directory), found ' ' in 'wd 5e-6'
"""

from __future__ import annotations

import os
from typing import Any

from rolling_calib.core.validation import ConfigError, Interval, Worded, explain

__all__ = ["MAX_NAME", "MAX_SEEDS", "MAX_UNITS", "NAME_CHARACTERS", "UNIT_SEED", "available_memory",
           "check_pipeline_name", "check_unit_count", "check_unit_memory", "parse_seeds", "pipeline_name_problem"]

#: Seeds of one experiment (10 in docs/method.md §3.3; thousands already mean days of training).
MAX_SEEDS = 10_000
#: One seed: numpy's legacy seeding (``np.random.seed``) takes 0 .. 2**32 - 1.
UNIT_SEED = Worded(Interval(int, 0, 2**32 - 1), "a non-negative integer seed below 2**32")
#: Units of one run: pipelines x seeds x windows (each is a trained model and four store files).
MAX_UNITS = 1_000_000
#: Characters of a pipeline name: it is a directory of the store and an MLflow experiment name.
MAX_NAME = 100
#: Characters a pipeline name may hold besides letters and digits.
NAME_CHARACTERS = "._+-=,@~%"


def parse_seeds(value: Any, key: str, where: str) -> tuple[int, ...]:
    """``N`` -> seeds ``0..N-1``; a list of distinct seeds is taken as is; both bounded (:data:`MAX_SEEDS`, :data:`UNIT_SEED`)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ConfigError(f"{where}: {key}: expected a count >= 1 or a list of seeds, found {value}")
        if value > MAX_SEEDS:
            raise ConfigError(f"{where}: {key}: expected at most {MAX_SEEDS} seeds, found a count of {value}")
        return tuple(range(value))
    if isinstance(value, (list, tuple)) and value:
        if len(value) > MAX_SEEDS:
            raise ConfigError(f"{where}: {key}: expected at most {MAX_SEEDS} seeds, found a list of {len(value)}")
        for i, seed in enumerate(value):
            problem = explain(seed, UNIT_SEED)
            if problem is not None:
                raise ConfigError(f"{where}: {key}[{i}]: {problem}")
        if len(set(value)) != len(value):
            raise ConfigError(f"{where}: {key}: expected distinct seeds, found {list(value)}")
        return tuple(int(s) for s in value)
    raise ConfigError(f"{where}: {key}: expected a count >= 1 or a list of non-negative integer seeds, found {value!r}")


def pipeline_name_problem(name: Any) -> str | None:
    """Why ``name`` cannot name a pipeline (``None``: it can).

    >>> pipeline_name_problem("hidden_size=64,lr=0.001") is None
    True
    >>> print(pipeline_name_problem("x" * 300))
    expected a name of at most 100 characters (it names a store directory), found 300 characters: 'xxxxxxxxxxxxxxxxxxxx...'
    """
    if not isinstance(name, str) or not name:
        return f"expected a non-empty string, found {name!r}"
    if len(name) > MAX_NAME:
        return (f"expected a name of at most {MAX_NAME} characters (it names a store directory), found {len(name)} "
                f"characters: {name[:20] + '...'!r}")
    bad = [c for c in name if not (c.isalnum() or c in NAME_CHARACTERS)]
    if bad:
        return (f"expected a name of letters, digits and {NAME_CHARACTERS} (it names a store directory), found "
                f"{bad[0]!r} in {name!r}")
    if name.startswith("."):
        return f"expected a name not starting with '.' (a hidden directory), found {name!r}"
    return None


def check_pipeline_name(name: Any, where: str) -> str:
    """``name`` when it can name a pipeline, else :class:`ConfigError` naming it and the rule."""
    problem = pipeline_name_problem(name)
    if problem is not None:
        raise ConfigError(f"{where}: pipelines: invalid pipeline name: {problem}")
    return name


def check_unit_count(*, pipelines: int, seeds: int, windows: int, where: str) -> int:
    """The number of units of a run, refused above :data:`MAX_UNITS`."""
    units = pipelines * seeds * windows
    if units > MAX_UNITS:
        raise ConfigError(f"{where}: expected at most {MAX_UNITS} units in one run, found {units} "
                          f"({pipelines} pipeline(s) x {seeds} seed(s) x {windows} window(s)); "
                          f"run fewer seeds or pipelines at a time (--seeds, --pipelines)")
    return units


def available_memory() -> int | None:
    """Bytes of memory available to new work on this machine (``MemAvailable`` of /proc/meminfo; else ``None``)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_unit_memory(estimate: Any, *, workers: int, where: str, available: int | None = None) -> None:
    """Refuse a unit whose estimated memory exceeds this machine's available memory divided by ``workers``.

    ``estimate``: a :class:`~rolling_calib.qlib_adapter.memory.UnitMemory` (``None``: no estimate, no check);
    ``available``: bytes (default :func:`available_memory`; ``None`` there: no check).
    """
    available = available_memory() if available is None else available
    if estimate is None or available is None:
        return
    budget = available // max(1, workers)
    if estimate.total > budget:
        from rolling_calib.qlib_adapter.memory import format_bytes

        largest = estimate.largest
        raise ConfigError(
            f"{where}: one unit needs about {format_bytes(estimate.total)} ({estimate.describe()}), more than the "
            f"{format_bytes(budget)} available to each of {workers} worker(s) ({format_bytes(available)} available on this "
            f"machine); the largest part, {largest}, is set by {estimate.knobs[largest]}: reduce it, or run "
            f"fewer workers (--workers)")
