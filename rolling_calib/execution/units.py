"""Unit keys: one (pipeline, seed, window) unit of a rolling grid, and what it waits for.

Examples
--------
>>> UnitKey("base", 3, 1).slug()
'base__seed3__w01'
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["UnitKey", "UnitTask"]


@dataclass(frozen=True, order=True)
class UnitKey:
    """Identifies one unit of work: a window of a seed of a pipeline."""

    pipeline: str
    seed: int
    window: int

    def slug(self) -> str:
        """File-system-safe name, e.g. ``'base__seed3__w01'``."""
        return f"{self.pipeline}__seed{self.seed}__w{self.window:02d}"


@dataclass(frozen=True)
class UnitTask:
    """A unit and the unit it must wait for (``None`` when it can start at once)."""

    key: UnitKey
    after: UnitKey | None = None
