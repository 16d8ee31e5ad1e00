"""Checks of the array arguments every metric takes: finite 1-D numbers, equal lengths, a bias part.

One message format for every metric (:mod:`rolling_calib.core.metrics`,
:mod:`rolling_calib.core.classification`): the argument's name, what was expected, what was found
(with the position of the first offending value).

Examples
--------
>>> as_float_1d("labels", [1, 2.5]).tolist()
[1.0, 2.5]
>>> as_float_1d("labels", [1.0, float("nan")])
Traceback (most recent call last):
...
ValueError: labels: expected finite numbers, found 1 non-finite value(s), the first at position 1: nan
>>> bias_mask([0, 2], 4).tolist()
[True, False, True, False]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["as_float_1d", "bias_mask", "check_lengths", "describe_bad", "plain"]


def describe_bad(values: np.ndarray) -> str:
    """Describe the first non-finite entry of ``values`` for an error message."""
    bad = np.flatnonzero(~np.isfinite(values.ravel()))
    first = int(bad[0])
    return f"{bad.size} non-finite value(s), the first at position {first}: {plain(values.ravel()[first])!r}"


def plain(value: Any) -> Any:
    """A numpy scalar as the matching Python scalar (for readable error messages)."""
    return value.item() if isinstance(value, np.generic) else value


def as_float_1d(name: str, values: Any) -> np.ndarray:
    """Return ``values`` as a finite 1-D float64 array or raise ``ValueError``."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: expected numbers, found values that are not numeric ({exc})") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, found shape {arr.shape}")
    # A sum is finite only if every term is (NaN and inf propagate): one pass, no temporary.
    # A non-finite sum of finite terms (overflow) falls through to the exact check.
    with np.errstate(over="ignore", invalid="ignore"):
        finite_sum = math.isfinite(float(np.add.reduce(arr)))
    if not finite_sum and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: expected finite numbers, found {describe_bad(arr)}")
    return arr


def check_lengths(**arrays: np.ndarray) -> int:
    """Check that all arrays have the same first dimension; return it."""
    lengths = {name: len(arr) for name, arr in arrays.items()}
    if len(set(lengths.values())) > 1:
        found = ", ".join(f"{name} has {n}" for name, n in lengths.items())
        raise ValueError(f"mismatched lengths: {found}; expected all equal")
    n = next(iter(lengths.values()))
    if n == 0:
        raise ValueError(f"{', '.join(lengths)}: expected at least one row, found 0")
    return n


def bias_mask(bias_part: Any, n: int) -> np.ndarray:
    """Convert a boolean mask or an integer index into a boolean mask of length ``n``.

    Raises ``ValueError`` when the mask has the wrong length, an index is out of
    range or repeated, or either the bias part or the remaining part is empty.
    """
    arr = np.asarray(bias_part)
    if arr.ndim != 1:
        raise ValueError(f"bias_part: expected a 1-D boolean mask or integer index, found shape {arr.shape}")
    if arr.dtype == bool:
        if arr.size != n:
            raise ValueError(f"bias_part: boolean mask has length {arr.size}, expected {n} (the number of rows)")
        mask = arr.copy()
    elif arr.size == 0 or np.issubdtype(arr.dtype, np.integer):
        idx = arr.astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            bad = idx[(idx < 0) | (idx >= n)][0]
            raise ValueError(f"bias_part: index {int(bad)} is out of range; expected positions in [0, {n - 1}]")
        mask = np.zeros(n, dtype=bool)
        mask[idx] = True
        if int(mask.sum()) != idx.size:
            raise ValueError(f"bias_part: index has {idx.size - int(mask.sum())} repeated position(s); expected unique positions")
    else:
        raise ValueError(f"bias_part: expected a boolean mask or an integer index, found dtype {arr.dtype}")
    n_bias = int(mask.sum())
    if n_bias == 0:
        raise ValueError("bias_part: the bias part is empty; expected at least one row to fit the bias on")
    if n_bias == n:
        raise ValueError("bias_part: the bias part covers every row, so the remaining part to score is empty")
    return mask
