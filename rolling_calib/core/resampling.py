"""The resampling settings as one value, and the random draws made from them.

:class:`Resampling` holds every bootstrap setting of the project: the replicates ``n_boot``,
the interval level ``confidence``, the ``seed`` of every draw and the mean ``block_size`` of
the stationary bootstrap over market time (None: chosen from the data). It owns their defaults
and their declared constraints (:mod:`rolling_calib.core.validation`), checked when the value is
made, and it owns the draws:

* **seed bootstrap** (:meth:`Resampling.seed_counts`): how often each of ``size`` runs is drawn
  in every replicate (runs resampled with replacement);
* **stationary blocks of time units** (:meth:`Resampling.time_counts`): Politis and Romano's
  stationary bootstrap, the draws of :class:`arch.bootstrap.StationaryBootstrap` (the same
  indices for the same seed and block length: :func:`stationary_counts`). The uniforms and start
  indices of a time axis of ``n_times`` units are drawn **once** per value and axis
  (:class:`TimeDraws`) and every pair, metric and block length reuses them;
* **half-splits of seeds** (:meth:`Resampling.half_split`).

The replicates are bounded above (:data:`MAX_N_BOOT`): the time draws hold ``2 * n_boot *
n_times`` numbers in memory (16 bytes each), so ``n_boot = 100_000`` over 250 trading days is
400 MB; a larger value is refused where it is given (``--n-boot``), with the bound named.

Examples
--------
>>> r = Resampling(n_boot=500, seed=1)
>>> r.to_dict()
{'n_boot': 500, 'confidence': 0.95, 'seed': 1, 'block_size': None, 'target': 'period'}
>>> r.seed_counts(3, rng=r.rng()).shape
(500, 3)
>>> c = r.time_counts(10, block_size=3.0)
>>> c.shape, bool((c.sum(axis=1) == 10).all())
((500, 10), True)
>>> Resampling(n_boot=0)
Traceback (most recent call last):
...
ValueError: n_boot: expected a positive int <= 100000 (the replicates are held in memory), found 0
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rolling_calib.core.question import DEFAULT_QUESTION
from rolling_calib.core.validation import (
    BLOCK_LENGTH,
    BLOCK_SIZE,
    CONFIDENCE,
    MAX_N_BOOT,
    N_BOOT,
    POSITIVE_INT,
    SEED,
    TARGET,
    InstanceOf,
    check,
    validate_params,
)

__all__ = ["DEFAULT", "MAX_N_BOOT", "RESAMPLING", "Resampling", "TimeDraws", "stationary_counts"]


@dataclass(frozen=True)
class TimeDraws:
    """The random numbers of ``n_boot`` stationary-bootstrap replicates of a time axis of ``n_times`` units.

    Drawn as :class:`arch.bootstrap.StationaryBootstrap` draws them (per replicate: the start
    indices ``starts``, then the uniforms ``u``, from one generator), so that for any mean block
    length :meth:`counts` gives the replicates arch gives for that length and seed. A block
    continues at unit ``t`` when ``u[t] > 1 / block_size`` (the next unit, wrapping round),
    else a new block starts at ``starts[t]``.
    """

    starts: np.ndarray   # (n_boot, n_times) int64
    u: np.ndarray        # (n_boot, n_times) float64

    @classmethod
    def draw(cls, n_times: int, n_boot: int, *, rng: np.random.Generator) -> TimeDraws:
        starts = np.empty((int(n_boot), int(n_times)), dtype=np.int64)
        u = np.empty((int(n_boot), int(n_times)), dtype=np.float64)
        for i in range(int(n_boot)):
            starts[i] = rng.integers(int(n_times), size=int(n_times), dtype=np.int64)
            u[i] = rng.random(int(n_times))
        return cls(starts, u)

    @property
    def n_times(self) -> int:
        return int(self.starts.shape[1])

    def positions(self, block_size: float) -> np.ndarray:
        """The resampled unit index of every replicate and position, shape ``(n_boot, n_times)``."""
        n_boot, n = self.starts.shape
        t = np.arange(n)
        new_block = self.u <= 1.0 / float(block_size)
        new_block[:, 0] = True
        start_at = np.maximum.accumulate(np.where(new_block, t, 0), axis=1)   # where the current block began
        first = np.take_along_axis(self.starts, start_at, axis=1)
        return (first + (t - start_at)) % n

    def counts(self, block_size: float) -> np.ndarray:
        """How often each unit appears in each replicate, shape ``(n_boot, n_times)`` (rows sum to ``n_times``)."""
        pos = self.positions(block_size)
        n_boot, n = pos.shape
        flat = pos + n * np.arange(n_boot)[:, None]
        return np.bincount(flat.ravel(), minlength=n_boot * n).reshape(n_boot, n).astype(np.float64)


@validate_params({"n_times": POSITIVE_INT, "n_boot": N_BOOT, "block_size": BLOCK_LENGTH})
def stationary_counts(n_times: int, n_boot: int, *, block_size: float, rng: np.random.Generator) -> np.ndarray:
    """How often each time unit appears in each stationary-bootstrap replicate, shape ``(n_boot, n_times)``.

    The replicates :class:`arch.bootstrap.StationaryBootstrap` (mean block length ``block_size``,
    generator ``rng``) draws of the unit indices ``0..n_times-1``; each row sums to ``n_times``.

    >>> c = stationary_counts(10, 3, block_size=3.0, rng=np.random.default_rng(0))
    >>> c.shape, c.sum(axis=1).astype(int).tolist()
    ((3, 10), [10, 10, 10])
    """
    return TimeDraws.draw(n_times, n_boot, rng=rng).counts(block_size)


@dataclass(frozen=True)
class Resampling:
    """Every bootstrap setting, checked when made; the draws (module docstring).

    Attributes
    ----------
    n_boot : int
        Bootstrap replicates of every interval (at most :data:`MAX_N_BOOT`).
    confidence : float
        Level of every interval and verdict.
    seed : int
        Seed of every random draw (recorded with the results).
    block_size : float or None
        Mean block length (time units) of the stationary bootstrap over market time; None:
        chosen from the data (Politis-White) for every differential.
    target : {"period", "future"}
        The question every verdict answers: over seeds on the evaluated days (the days fixed; the
        default, :data:`rolling_calib.core.question.DEFAULT_QUESTION`'s), or over seeds and the
        market's future (the market-time process a source of chance beside the seeds).
    """

    n_boot: int = 2000
    confidence: float = 0.95
    seed: int = 0
    block_size: float | None = None
    target: str = DEFAULT_QUESTION.target
    _time_draws: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)
    _time_counts: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    #: Each field's declared constraint.
    CONSTRAINTS = {"n_boot": N_BOOT, "confidence": CONFIDENCE, "seed": SEED, "block_size": BLOCK_SIZE,
                   "target": TARGET}

    def __post_init__(self) -> None:
        for name, constraint in self.CONSTRAINTS.items():
            check(name, getattr(self, name), constraint)

    def replace(self, **changes: Any) -> Resampling:
        """A copy with ``changes`` (checked); the draws are not shared with the copy."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The settings as recorded with every result."""
        return {"n_boot": int(self.n_boot), "confidence": float(self.confidence), "seed": int(self.seed),
                "block_size": None if self.block_size is None else float(self.block_size), "target": self.target}

    def describe(self) -> str:
        """``"2000 resamples, seed 0"`` (for reports)."""
        return f"{self.n_boot} resamples, seed {self.seed}"

    # ----------------------------------------------------------------------- draws
    def rng(self, offset: int = 0) -> np.random.Generator:
        """``numpy.random.default_rng(seed + offset)``: the generator of one family of draws."""
        return np.random.default_rng(int(self.seed) + int(offset))

    def seed_counts(self, size: int, *, rng: np.random.Generator) -> np.ndarray:
        """How often each of ``size`` runs is drawn in each of ``n_boot`` resamples, shape ``(n_boot, size)``."""
        idx = self.seed_indices(size, rng=rng)
        flat = idx + size * np.arange(self.n_boot)[:, None]
        return np.bincount(flat.ravel(), minlength=self.n_boot * size).reshape(self.n_boot, size).astype(np.float64)

    def seed_indices(self, size: int, *, rng: np.random.Generator) -> np.ndarray:
        """Run indices of ``n_boot`` resamples with replacement, shape ``(n_boot, size)``."""
        return rng.integers(0, size, size=(self.n_boot, size))

    def time_draws(self, n_times: int) -> TimeDraws:
        """The stationary-bootstrap draws of a time axis of ``n_times`` units, made once per value and axis."""
        n = int(n_times)
        if n not in self._time_draws:
            self._time_draws[n] = TimeDraws.draw(n, self.n_boot, rng=self.rng())
        return self._time_draws[n]

    def time_counts(self, n_times: int, block_size: float) -> np.ndarray:
        """:func:`stationary_counts` of ``n_times`` units with seed :attr:`seed`, from the shared :meth:`time_draws`.

        Computed once per axis and block length (read-only; its transpose is C-contiguous, the layout
        a product ``values (k, T) @ counts.T`` is fast in).
        """
        key = (int(n_times), float(block_size))
        if key not in self._time_counts:
            counts = np.ascontiguousarray(self.time_draws(n_times).counts(block_size).T).T
            counts.flags.writeable = False
            self._time_counts[key] = counts
        return self._time_counts[key]

    @staticmethod
    def half_split(size: int, *, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """A random half of ``range(size)`` and the rest (the first half has ``size // 2`` indices)."""
        order = rng.permutation(size)
        return order[: size // 2], order[size // 2:]


#: The defaults, for functions that are given no :class:`Resampling`.
DEFAULT = Resampling()
#: The declared constraint of every ``resampling=`` argument.
RESAMPLING = InstanceOf(Resampling, "a Resampling value")
