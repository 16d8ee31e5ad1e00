"""How random draws are made, as one value: :class:`Resampling` (``n_boot``, ``seed``, ``block_size``).

:class:`Resampling` holds the bootstrap settings of the project: the replicates ``n_boot``, the
``seed`` of every draw and the mean ``block_size`` of the stationary bootstrap the model confidence
set draws over market time (None: chosen from the data). What a result answers -- the target
population and the confidence level of its intervals -- is not a resampling setting: it is the
:class:`~rolling_calib.core.question.Question` every verdict and interval takes beside it. The value
owns its defaults and its declared constraints (:mod:`rolling_calib.core.validation`), checked when
it is made, and it owns the draws:

* **seed bootstrap** (:meth:`Resampling.seed_counts`, :meth:`Resampling.seed_indices`): how often
  each of ``size`` runs is drawn in every replicate (runs resampled with replacement);
* **half-splits of seeds** (:meth:`Resampling.half_split`).

The stationary bootstrap over market time is :class:`arch.bootstrap.MCS`'s own
(:func:`rolling_calib.core.verdict.model_confidence_set`, the only user of ``block_size``); the
verdicts' intervals are analytic and draw nothing.

The replicates are bounded above (:data:`MAX_N_BOOT`): a seed bootstrap holds ``n_boot`` rows of
counts per run and the model confidence set ``n_boot`` resampled loss means per configuration, so
the bound keeps them in memory; a larger value is refused where it is given (``--n-boot``), with the
bound named.

Examples
--------
>>> r = Resampling(n_boot=500, seed=1)
>>> r.to_dict()
{'n_boot': 500, 'seed': 1, 'block_size': None}
>>> r.seed_counts(3, rng=r.rng()).shape
(500, 3)
>>> Resampling(n_boot=0)
Traceback (most recent call last):
...
ValueError: n_boot: expected a positive int <= 100000 (the replicates are held in memory), found 0
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from rolling_calib.core.validation import (
    BLOCK_SIZE,
    MAX_N_BOOT,
    N_BOOT,
    SEED,
    Constraint,
    InstanceOf,
    check,
)

__all__ = ["DEFAULT", "MAX_N_BOOT", "RESAMPLING", "Resampling"]


@dataclass(frozen=True)
class Resampling:
    """How draws are made, checked when made; the draws (module docstring).

    Attributes
    ----------
    n_boot : int
        Bootstrap replicates of every bootstrap interval (at most :data:`MAX_N_BOOT`).
    seed : int
        Seed of every random draw (recorded with the results).
    block_size : float or None
        Mean block length (time units) of the stationary bootstrap of the model confidence set
        (:func:`rolling_calib.core.verdict.model_confidence_set`); None: chosen from the data
        (Politis-White).
    """

    n_boot: int = 2000
    seed: int = 0
    block_size: float | None = None

    #: Each field's declared constraint.
    CONSTRAINTS: ClassVar[dict[str, Constraint]] = {"n_boot": N_BOOT, "seed": SEED, "block_size": BLOCK_SIZE}

    def __post_init__(self) -> None:
        for name, constraint in self.CONSTRAINTS.items():
            check(name, getattr(self, name), constraint)

    def replace(self, **changes: Any) -> Resampling:
        """A copy with ``changes`` (checked)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The settings as recorded with every result (JSON, MLflow).

        >>> Resampling(block_size=5).to_dict()
        {'n_boot': 2000, 'seed': 0, 'block_size': 5.0}
        """
        return {"n_boot": int(self.n_boot), "seed": int(self.seed),
                "block_size": None if self.block_size is None else float(self.block_size)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Resampling:
        """The value :meth:`to_dict` recorded (keys it does not know are ignored).

        >>> Resampling.from_dict({"n_boot": 300, "seed": 2, "block_size": None, "confidence": 0.9})
        Resampling(n_boot=300, seed=2, block_size=None)
        """
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})

    def describe(self) -> str:
        """``"2000 resamples, seed 0"`` (for reports).

        >>> Resampling(n_boot=300, seed=2, block_size=5).describe()
        '300 resamples, seed 2, mean block 5 days'
        """
        block = "" if self.block_size is None else f", mean block {self.block_size:g} days"
        return f"{self.n_boot} resamples, seed {self.seed}{block}"

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

    @staticmethod
    def half_split(size: int, *, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """A random half of ``range(size)`` and the rest (the first half has ``size // 2`` indices)."""
        order = rng.permutation(size)
        return order[: size // 2], order[size // 2:]


#: The defaults, for functions that are given no :class:`Resampling`.
DEFAULT = Resampling()
#: The declared constraint of every ``resampling=`` argument.
RESAMPLING = InstanceOf(Resampling, "a Resampling value")
