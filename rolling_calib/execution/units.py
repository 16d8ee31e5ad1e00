"""Unit keys: one (pipeline, seed, window) unit of a rolling grid, and what it waits for.

A :class:`StackKey` names several seeds of one (pipeline, window) trained as one seed stack
(``rolling.stack_seeds``); executors schedule it like a unit, and it writes one unit per seed.
A :class:`WindowKey` names several seeds of one (pipeline, window) trained one after another in
one worker, each as its own unit (the same numbers): they share the window's data set, built once
(:mod:`rolling_calib.qlib_adapter.dataset_cache`).

Examples
--------
>>> UnitKey("base", 3, 1).slug()
'base__seed3__w01'
>>> StackKey("base", (0, 1, 2), 1).slug(), StackKey("base", (0, 1, 2), 1).units()[2]
('base__seeds0-1-2__w01', UnitKey(pipeline='base', seed=2, window=1))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = ["StackKey", "UnitKey", "UnitTask", "WindowKey"]


@dataclass(frozen=True, order=True)
class UnitKey:
    """Identifies one unit of work: a window of a seed of a pipeline."""

    pipeline: str
    seed: int
    window: int

    def slug(self) -> str:
        """File-system-safe name, e.g. ``'base__seed3__w01'``."""
        return f"{self.pipeline}__seed{self.seed}__w{self.window:02d}"


@dataclass(frozen=True, order=True)
class _SeedGroup:
    """Several seeds of one pipeline's window (the kinds below differ in how a worker trains them)."""

    pipeline: str
    seeds: tuple[int, ...]
    window: int
    #: The slug's word before the seeds.
    TAG: ClassVar[str] = "seeds"

    def units(self) -> list[UnitKey]:
        """The units this group writes, in seed order (the order they train)."""
        return [UnitKey(self.pipeline, seed, self.window) for seed in self.seeds]

    def slug(self) -> str:
        """File-system-safe name, e.g. ``'base__seeds0-1-2__w01'``."""
        return f"{self.pipeline}__{self.TAG}{'-'.join(str(s) for s in self.seeds)}__w{self.window:02d}"


@dataclass(frozen=True, order=True)
class StackKey(_SeedGroup):
    """Several seeds of one pipeline's window, trained as one seed stack.

    >>> StackKey("base", (0, 1, 2), 1).slug()
    'base__seeds0-1-2__w01'
    """

    TAG: ClassVar[str] = "seeds"


@dataclass(frozen=True, order=True)
class WindowKey(_SeedGroup):
    """Several seeds of one pipeline's window, trained one after another in one worker (one unit each).

    >>> WindowKey("base", (0, 1), 2).slug(), WindowKey("base", (0, 1), 2).units()[1]
    ('base__seq0-1__w02', UnitKey(pipeline='base', seed=1, window=2))
    >>> WindowKey("base", (0, 1), 2) == StackKey("base", (0, 1), 2)
    False
    """

    TAG: ClassVar[str] = "seq"


@dataclass(frozen=True)
class UnitTask:
    """A unit (or seed stack, or a window's seeds) and the task it must wait for (``None``: it can start at once)."""

    key: UnitKey | StackKey | WindowKey
    after: UnitKey | StackKey | WindowKey | None = None
