"""Unit keys: one (pipeline, seed, window) unit of a rolling grid, and what it waits for.

A :class:`StackKey` names several seeds of one (pipeline, window) trained as one seed stack
(``rolling.stack_seeds``); executors schedule it like a unit, and it writes one unit per seed.

Examples
--------
>>> UnitKey("base", 3, 1).slug()
'base__seed3__w01'
>>> StackKey("base", (0, 1, 2), 1).slug(), StackKey("base", (0, 1, 2), 1).units()[2]
('base__seeds0-1-2__w01', UnitKey(pipeline='base', seed=2, window=1))
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StackKey", "UnitKey", "UnitTask"]


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
class StackKey:
    """Several seeds of one pipeline's window, trained as one seed stack."""

    pipeline: str
    seeds: tuple[int, ...]
    window: int

    def units(self) -> list[UnitKey]:
        """The units this stack writes, in seed order."""
        return [UnitKey(self.pipeline, seed, self.window) for seed in self.seeds]

    def slug(self) -> str:
        """File-system-safe name, e.g. ``'base__seeds0-1-2__w01'``."""
        return f"{self.pipeline}__seeds{'-'.join(str(s) for s in self.seeds)}__w{self.window:02d}"


@dataclass(frozen=True)
class UnitTask:
    """A unit (or seed stack) and the one it must wait for (``None`` when it can start at once)."""

    key: UnitKey | StackKey
    after: UnitKey | StackKey | None = None
