"""Vanilla and calibrated evaluation metrics: pure functions on arrays.

This module implements docs/method.md §2: the calibrated-metric framework. Every
function takes plain arrays (anything :func:`numpy.asarray` accepts), validates
them, and returns numbers or small result objects. It knows nothing of Qlib,
torch or any runner; pandas is used only for the per-period table of the rolling
metric.

Conventions
-----------
* Losses are "lower is better".
* A *bias part* is given either as a boolean mask of the same length as the data
  or as an integer index (non-negative positions, no duplicates). The *remaining
  part* is every row not in the bias part. Both must be non-empty.
* Non-finite values (NaN, +-inf) are rejected with :class:`ValueError`; nothing is
  silently dropped.
* Probabilities must lie in ``[0, 1]``. Before taking logarithms they are clipped
  to ``[EPS, 1 - EPS]`` with ``EPS = numpy.finfo(float64).eps`` (about 2.2e-16),
  the same clipping scikit-learn's ``log_loss`` applies to float64 input.

Functions
---------
Regression
    :func:`quadratic_loss`, :func:`fit_mean_residual`,
    :func:`calibrated_quadratic_loss`, :func:`rolling_calibrated_quadratic_loss`.
Binary classification
    :func:`log_loss`, :func:`fit_logit_shift`, :func:`fit_logit_shift_rows`, :func:`calibrated_log_loss`,
    :func:`normalized_cross_entropy`, :func:`calibrated_normalized_cross_entropy`.
Multiclass
    :func:`multiclass_log_loss`, :func:`fit_temperature`,
    :func:`temperature_scaled_log_loss`.

Example
-------
>>> import numpy as np
>>> p = np.array([0.0, 1.0, 2.0, 3.0])
>>> y = np.array([1.0, 2.0, 3.0, 5.0])
>>> quadratic_loss(p, y)
1.75
>>> calibrated_quadratic_loss(p, y, bias_part=[0, 1])   # c* = 1, q = p + 1 on rows 2, 3
0.5
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from rolling_calib.core.validation import (
    BIAS_MODE,
    BIAS_WINDOW,
    CALIBRATION_PERIOD,
    CALIBRATION_SOURCE,
    FALLBACK,
    validate_params,
)

__all__ = [
    "EPS",
    "RollingCQL",
    "quadratic_loss",
    "fit_mean_residual",
    "calibrated_quadratic_loss",
    "rolling_calibrated_quadratic_loss",
    "log_loss",
    "fit_logit_shift",
    "fit_logit_shift_rows",
    "calibrated_log_loss",
    "normalized_cross_entropy",
    "calibrated_normalized_cross_entropy",
    "multiclass_log_loss",
    "fit_temperature",
    "temperature_scaled_log_loss",
]

#: Clipping epsilon for probabilities before logarithms: ``p -> clip(p, EPS, 1 - EPS)``.
EPS: float = float(np.finfo(np.float64).eps)


# ---------------------------------------------------------------------------
# Validation helpers
# ---------------------------------------------------------------------------
def _describe_bad(values: np.ndarray) -> str:
    """Describe the first non-finite entry of ``values`` for an error message."""
    bad = np.flatnonzero(~np.isfinite(values.ravel()))
    first = int(bad[0])
    return f"{bad.size} non-finite value(s), the first at position {first}: {_plain(values.ravel()[first])!r}"


def _plain(value: Any) -> Any:
    """A numpy scalar as the matching Python scalar (for readable error messages)."""
    return value.item() if isinstance(value, np.generic) else value


def _as_float_1d(name: str, values: Any) -> np.ndarray:
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
        raise ValueError(f"{name}: expected finite numbers, found {_describe_bad(arr)}")
    return arr


def _check_lengths(**arrays: np.ndarray) -> int:
    """Check that all arrays have the same first dimension; return it."""
    lengths = {name: len(arr) for name, arr in arrays.items()}
    if len(set(lengths.values())) > 1:
        found = ", ".join(f"{name} has {n}" for name, n in lengths.items())
        raise ValueError(f"mismatched lengths: {found}; expected all equal")
    n = next(iter(lengths.values()))
    if n == 0:
        raise ValueError(f"{', '.join(lengths)}: expected at least one row, found 0")
    return n


def _as_probabilities(name: str, values: Any) -> np.ndarray:
    """Finite 1-D probabilities in [0, 1] (no clipping yet)."""
    arr = _as_float_1d(name, values)
    outside = (arr < 0.0) | (arr > 1.0)
    if outside.any():
        first = int(np.flatnonzero(outside)[0])
        raise ValueError(
            f"{name}: expected probabilities in [0, 1], found {int(outside.sum())} outside, "
            f"the first at position {first}: {_plain(arr[first])!r}"
        )
    return arr


def _as_binary_labels(name: str, values: Any) -> np.ndarray:
    """Finite 1-D labels that are exactly 0 or 1, as float64."""
    arr = _as_float_1d(name, values)
    bad = (arr != 0.0) & (arr != 1.0)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{name}: expected binary labels 0 or 1, found {int(bad.sum())} other value(s), "
            f"the first at position {first}: {_plain(arr[first])!r}"
        )
    return arr


def _logits_from(name: str, values: Any, *, from_logits: bool) -> np.ndarray:
    """Logits from probabilities (clipped to [EPS, 1-EPS]) or validated logits."""
    if from_logits:
        return _as_float_1d(name, values)
    p = np.clip(_as_probabilities(name, values), EPS, 1.0 - EPS)
    return np.log(p) - np.log1p(-p)


def _bias_mask(bias_part: Any, n: int) -> np.ndarray:
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


# ---------------------------------------------------------------------------
# Quadratic loss
# ---------------------------------------------------------------------------
def quadratic_loss(predictions: Any, labels: Any) -> float:
    """Mean squared error (the vanilla quadratic loss, QL).

    ``QL = 1/n * sum_i (y_i - p_i)^2``

    Parameters
    ----------
    predictions, labels : array-like of shape (n,)
        Finite numbers, same length, n >= 1.

    Returns
    -------
    float

    Example
    -------
    >>> quadratic_loss([0.0, 2.0], [1.0, 1.0])
    1.0
    """
    p = _as_float_1d("predictions", predictions)
    y = _as_float_1d("labels", labels)
    _check_lengths(predictions=p, labels=y)
    return float(np.mean((y - p) ** 2))


def fit_mean_residual(predictions: Any, labels: Any) -> float:
    """Bias term of the calibrated quadratic loss: the mean residual.

    ``c* = 1/n * sum_i (y_i - p_i)``; adding ``c*`` to every prediction makes the
    mean residual zero, and ``c*`` minimises ``sum_i (y_i - p_i - c)^2`` over ``c``.

    Example
    -------
    >>> fit_mean_residual([0.0, 1.0], [1.0, 3.0])
    1.5
    """
    p = _as_float_1d("predictions", predictions)
    y = _as_float_1d("labels", labels)
    _check_lengths(predictions=p, labels=y)
    return float(np.mean(y - p))


def calibrated_quadratic_loss(predictions: Any, labels: Any, *, bias_part: Any) -> float:
    """Calibrated quadratic loss (docs/method.md §2.1).

    ``c* = mean_{i in B} (y_i - p_i)``, ``q_i = p_i + c*`` and
    ``CQL = mean_{i in R} (y_i - q_i)^2`` where ``B`` is the bias part and ``R``
    the remaining part (every row not in ``B``).

    Parameters
    ----------
    predictions, labels : array-like of shape (n,)
        Finite numbers, same length.
    bias_part : boolean mask of shape (n,) or integer index
        Rows used to fit ``c*``; the other rows are scored. Neither part may be empty.

    Returns
    -------
    float

    Example
    -------
    >>> calibrated_quadratic_loss([0.0, 0.0, 0.0], [2.0, 1.0, 3.0], bias_part=[True, False, False])
    1.0
    """
    p = _as_float_1d("predictions", predictions)
    y = _as_float_1d("labels", labels)
    n = _check_lengths(predictions=p, labels=y)
    mask = _bias_mask(bias_part, n)
    residual = y - p
    c = float(np.mean(residual[mask]))
    return float(np.mean((residual[~mask] - c) ** 2))


# ---------------------------------------------------------------------------
# Rolling (time) calibrated quadratic loss
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class RollingCQL:
    """Result of :func:`rolling_calibrated_quadratic_loss`.

    Attributes
    ----------
    table : pandas.DataFrame
        One row per period that has rows, in time order. Columns:
        ``period`` (label such as ``'2015-02'``), ``start`` (Timestamp where the
        period starts), ``end`` (last timestamp seen in it), ``rows`` (int),
        ``mean_residual`` (mean of ``y - p`` in the period: the bias the *next*
        period receives under pooled bias), ``bias`` (the ``c_k`` applied;
        for per-instrument bias the row-weighted mean of the applied biases;
        NaN when unscored), ``ql`` (plain QL of the period), ``cql`` (calibrated
        QL of the period, NaN when unscored), ``scored`` (bool), ``refit_first`` (bool: the
        period holds the first date of a window, i.e. it is the first period after a (re)fit;
        False everywhere when no ``windows`` were given).
    cql : float
        Mean of ``(y - q)^2`` over all rows of the scored periods (row-weighted,
        not a mean of monthly means).
    ql_scored : float
        Plain QL over the same rows as ``cql``.
    ql_all : float
        Plain QL over every row of every period.
    n_scored, n_all : int
        Row counts behind ``cql``/``ql_scored`` and ``ql_all``.
    period : str
        The period rule used (``'month'``, ``'week'``, ``'quarter'`` or ``'<N> trading days'``).
    bias : str
        ``'pooled'`` or ``'per_instrument'``.
    bias_window : int or None
        Trading days the bias is fitted on (None: the whole previous period).
    source : str
        ``'previous'`` (the bias of the period before) or ``'validation'`` (the bias of each
        window's own validation predictions).
    cql_refit_first, ql_refit_first, n_refit_first : float, float, int
        CQL and plain QL over the scored rows of the ``refit_first`` periods (NaN, 0 when none).
    cql_rest, ql_rest, n_rest : float, float, int
        The same over the other scored periods (NaN, 0 when none).
    """

    table: pd.DataFrame
    cql: float
    ql_scored: float
    ql_all: float
    n_scored: int
    n_all: int
    period: str = "month"
    bias: str = "pooled"
    bias_window: int | None = None
    source: str = "previous"
    cql_refit_first: float = math.nan
    ql_refit_first: float = math.nan
    n_refit_first: int = 0
    cql_rest: float = math.nan
    ql_rest: float = math.nan
    n_rest: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dictionary (the table as a list of records, timestamps as ISO strings)."""
        table = self.table.copy()
        for column in ("start", "end"):
            table[column] = table[column].map(lambda t: t.isoformat())
        records = [
            {key: (None if isinstance(val, float) and math.isnan(val) else val) for key, val in rec.items()}
            for rec in table.to_dict(orient="records")
        ]
        def num(value: float) -> float | None:
            return None if math.isnan(value) else value

        return {
            "cql": self.cql,
            "ql_scored": self.ql_scored,
            "ql_all": self.ql_all,
            "n_scored": self.n_scored,
            "n_all": self.n_all,
            "period": self.period,
            "bias": self.bias,
            "bias_window": self.bias_window,
            "source": self.source,
            "refit_first": {"cql": num(self.cql_refit_first), "ql": num(self.ql_refit_first), "rows": self.n_refit_first},
            "rest": {"cql": num(self.cql_rest), "ql": num(self.ql_rest), "rows": self.n_rest},
            "periods": records,
        }


def _as_timestamps(values: Any, n: int) -> np.ndarray:
    """Timestamps as naive datetime64[ns] (tz-aware input is read in its own wall-clock time)."""
    try:
        index = pd.DatetimeIndex(values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"timestamps: expected datetimes, found values that cannot be read as datetimes ({exc})") from exc
    if len(index) != n:
        raise ValueError(f"mismatched lengths: timestamps has {len(index)}, predictions has {n}; expected all equal")
    if index.tz is not None:
        index = index.tz_localize(None)
    if index.hasnans:
        first = int(np.flatnonzero(index.isna())[0])
        raise ValueError(f"timestamps: expected datetimes, found NaT at position {first}")
    return index.values.astype("datetime64[ns]", copy=False)


# How the rolling metric is computed
# ----------------------------------
# Every period rule (months, weeks, quarters, N trading days) and every bias source (the
# previous period, or the N trading days before a period) is a union of whole dates. So one
# blocked pass over the rows collects, per date present and instrument column, the rows n,
# the residual sum S and the centred sum of squares M2 = sum (r - S/n)^2 (r = y - p), and
# the last timestamp of each date. Everything else is arithmetic on these small tables:
# cells are merged with Chan et al.'s update M2 = M2_a + M2_b + n_a n_b / n (mean_a - mean_b)^2
# and a period cell shifted by a bias c scores sum (r - c)^2 = M2 + n (mean - c)^2, a sum of
# non-negative terms (no cancellation, unlike sum r^2 - 2 c sum r + n c^2). The pass holds
# a few block-sized temporaries and nothing per row.

_NAT = int(np.iinfo(np.int64).min)
#: Clock ticks per day of the datetime64 units read without conversion.
_TICKS_PER_DAY = {"s": 86_400, "ms": 86_400 * 10**3, "us": 86_400 * 10**6, "ns": 86_400 * 10**9}
#: Rows per block of the aggregation pass (its temporaries stay in cache).
_BLOCK = 1 << 18
#: Integer instrument ids spanning at most this many values are used as columns directly.
_MAX_DENSE_IDS = 1 << 16
#: Calendar days x instruments above which (and above 4 cells a row) the dates present are numbered first.
_MAX_DENSE_CELLS = 1 << 22


@dataclass(frozen=True)
class _Clock:
    """Timestamps as int64 ``ticks`` of ``unit`` (a view of the input): wall-clock time, or UTC with ``tz``.

    ``day_lo``/``day_hi`` bound the day numbers (days since 1970-01-01) of the wall-clock dates.
    """

    ticks: np.ndarray
    unit: str
    tz: Any
    day_lo: int
    day_hi: int

    @property
    def per_day(self) -> int:
        return _TICKS_PER_DAY[self.unit]

    def wall(self, start: int, stop: int) -> np.ndarray:
        """Wall-clock ticks of rows ``start:stop`` (a view of the input when there is no time zone)."""
        block = self.ticks[start:stop]
        if self.tz is None:
            return block
        local = pd.DatetimeIndex(block.view(f"datetime64[{self.unit}]")).tz_localize("UTC").tz_convert(self.tz)
        return np.asarray(local.tz_localize(None).asi8)

    def to_ns(self, ticks: np.ndarray) -> np.ndarray:
        """Ticks of this clock as datetime64[ns]."""
        return (ticks * (10**9 * 86_400 // self.per_day)).view("datetime64[ns]")


def _clock(values: Any, n: int) -> _Clock:
    """Read ``timestamps`` without copying datetime64 arrays, Series and indexes (any of s, ms, us, ns)."""
    ticks, unit, tz = None, "ns", None
    if isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype.kind == "M":
        unit, count = np.datetime_data(values.dtype)
        if unit in _TICKS_PER_DAY and count == 1:
            ticks = values.view(np.int64)
    elif isinstance(values, (pd.Series, pd.Index)) and values.dtype.kind == "M":
        array = values.array
        if array.unit in _TICKS_PER_DAY:
            ticks, unit, tz = np.asarray(array.asi8), array.unit, array.tz
    if ticks is None:
        ticks, unit, tz = _as_timestamps(values, n).view(np.int64), "ns", None
    if len(ticks) != n:
        raise ValueError(f"mismatched lengths: timestamps has {len(ticks)}, predictions has {n}; expected all equal")
    lo = int(ticks.min())
    if lo == _NAT:
        first = int(np.flatnonzero(ticks == _NAT)[0])
        raise ValueError(f"timestamps: expected datetimes, found NaT at position {first}")
    per_day = _TICKS_PER_DAY[unit]
    day_lo, day_hi = lo // per_day, int(ticks.max()) // per_day
    if tz is not None:  # UTC ticks: the local date is at most one day either side
        day_lo, day_hi = day_lo - 1, day_hi + 1
    return _Clock(ticks=ticks, unit=unit, tz=tz, day_lo=day_lo, day_hi=day_hi)


@dataclass(frozen=True)
class _Columns:
    """Instrument column of every row, ``codes - offset`` in ``0..len(names) - 1`` (a view of the input)."""

    codes: np.ndarray
    offset: int
    names: np.ndarray

    def block(self, start: int, stop: int) -> np.ndarray:
        block = self.codes[start:stop]
        if self.offset:
            block = block - self.offset
        return block.astype(np.int64) if block.dtype == np.uint64 else block  # uint64 + int64 is float64

    def first_row(self, column: int) -> int:
        """Position of the first row of ``column`` (for error messages: instruments in first-seen order)."""
        return int(np.argmax(self.codes == column + self.offset))


def _instrument_columns(instruments: Any, n: int) -> _Columns:
    """Columns from categorical codes or small-range integers as they are; other ids are factorised."""
    if isinstance(getattr(instruments, "dtype", None), pd.CategoricalDtype):
        cat = instruments if isinstance(instruments, pd.Categorical) else instruments.array
        if len(cat) != n:
            raise ValueError(f"mismatched lengths: instruments has shape ({len(cat)},), predictions has {n}; expected ({n},)")
        codes = np.asarray(cat.codes)
        if codes.min() < 0:
            first = int(np.flatnonzero(codes < 0)[0])
            raise ValueError(f"instruments: expected an id on every row, found a missing value at position {first}")
        return _Columns(codes=codes, offset=0, names=np.asarray(cat.categories))
    inst = np.asarray(instruments)
    if inst.ndim == 1 and len(inst) == n and inst.dtype.kind in "iu":
        lo, hi = int(inst.min()), int(inst.max())
        if hi - lo < _MAX_DENSE_IDS:
            return _Columns(codes=inst, offset=lo, names=np.array(range(lo, hi + 1), dtype=object))
    codes, uniques = _instrument_codes(inst, n)
    return _Columns(codes=codes, offset=0, names=uniques)


def _instrument_codes(instruments: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes ``0..m-1`` per row and the ``m`` distinct instrument ids (first-seen order)."""
    inst = np.asarray(instruments)
    if inst.ndim != 1 or len(inst) != n:
        raise ValueError(f"mismatched lengths: instruments has shape {inst.shape}, predictions has {n}; expected ({n},)")
    codes, uniques = pd.factorize(inst, use_na_sentinel=True)
    if (codes < 0).any():
        first = int(np.flatnonzero(codes < 0)[0])
        raise ValueError(f"instruments: expected an id on every row, found a missing value at position {first}")
    return codes, np.asarray(uniques)


@dataclass(frozen=True)
class _DayTable:
    """Residual statistics per date present (rows, increasing) and instrument column (columns)."""

    days: np.ndarray      # (d,) int64 day numbers (days since 1970-01-01)
    n: np.ndarray         # (d, m) int64 rows
    total: np.ndarray     # (d, m) sum of r = y - p
    m2: np.ndarray        # (d, m) sum of (r - total / n)^2
    last: np.ndarray      # (d,) datetime64[ns]: last timestamp of the date
    columns: np.ndarray   # (m,) input column of each table column (columns without rows are dropped)


def _merge_cells(count: np.ndarray, total: np.ndarray, m2: np.ndarray, at: np.ndarray,
                 n_b: np.ndarray, s_b: np.ndarray, m2_b: np.ndarray) -> None:
    """Fold a block's statistics of the distinct cells ``at`` into the running ones (Chan et al.)."""
    n_a = count[at]
    if not n_a.any():  # cells seen for the first time (the rule for rows in time order)
        count[at], total[at], m2[at] = n_b, s_b, m2_b
        return
    s_a = total[at]
    both = n_a + n_b
    seen = n_a > 0
    delta = s_b / n_b - np.divide(s_a, n_a, out=np.zeros_like(s_a), where=seen)
    m2[at] += m2_b + np.where(seen, delta * delta * (n_a * (n_b / both)), 0.0)
    count[at], total[at] = both, s_a + s_b


def _day_slots(clock: _Clock, n: int, m: int) -> tuple[np.ndarray | None, np.ndarray]:
    """``(slot_of, slot_day)``: the table row of every day offset from ``clock.day_lo`` and the day of every row.

    Every calendar day of the span gets a row (``slot_of`` None: the offset is the row) unless that
    table would be large and sparse; then a first pass numbers the dates present.
    """
    per_day, day0 = clock.per_day, clock.day_lo
    slots = clock.day_hi - day0 + 1
    if slots * m > max(4 * n, _MAX_DENSE_CELLS):  # few dates over a long span: number the dates present first
        present = np.zeros(slots, dtype=bool)
        for start in range(0, n, _BLOCK):
            present[clock.wall(start, start + _BLOCK) // per_day - day0] = True
        return np.cumsum(present) - 1, np.flatnonzero(present) + day0
    return None, np.arange(slots, dtype=np.int64) + day0


@dataclass(frozen=True)
class _DayCells:
    """The day table being filled: flat ``(slot, column)`` cells, the last tick per slot, block buffers."""

    m: int                # columns
    count: np.ndarray     # (slots * m,) rows
    total: np.ndarray     # (slots * m,) sum of residuals
    m2: np.ndarray        # (slots * m,) centred sum of squares
    last: np.ndarray      # (slots,) last wall-clock tick (_NAT: none yet)
    r_buf: np.ndarray     # block buffers: residuals, days, cells, deviations
    d_buf: np.ndarray
    c_buf: np.ndarray
    v_buf: np.ndarray

    @classmethod
    def empty(cls, slots: int, m: int, size: int) -> _DayCells:
        return cls(m=m, count=np.zeros(slots * m, dtype=np.int64), total=np.zeros(slots * m), m2=np.zeros(slots * m),
                   last=np.full(slots, _NAT, dtype=np.int64), r_buf=np.empty(size), d_buf=np.empty(size, np.int64),
                   c_buf=np.empty(size, np.int64), v_buf=np.empty(size))


def _add_block(cells: _DayCells, r: np.ndarray, t: np.ndarray, day: np.ndarray, col: np.ndarray | None) -> None:
    """Fold one block (residuals ``r``, wall ticks ``t``, table rows ``day``, columns ``col``; None: one column)."""
    ordered = not (day[1:] < day[:-1]).any()
    if ordered:  # runs of equal dates: their last timestamps by a segmented maximum
        first = np.flatnonzero(day[1:] != day[:-1])
        first = np.concatenate(([0], first + 1))
        run_day = day[first]
        cells.last[run_day] = np.maximum(cells.last[run_day], np.maximum.reduceat(t, first))
        if cells.m == 1:  # pooled: the runs are the cells, summed in place
            _add_runs(cells, r, first, run_day)
            return
        lo, hi = int(day[0]), int(day[-1])
    else:
        np.maximum.at(cells.last, day, t)
        lo, hi = int(day.min()), int(day.max())
    _add_cells(cells, r, day, col, lo, hi)


def _add_runs(cells: _DayCells, r: np.ndarray, first: np.ndarray, run_day: np.ndarray) -> None:
    """Fold the runs of equal dates starting at ``first`` (one column) into ``cells``."""
    sizes = np.diff(first, append=len(r))
    sums = np.add.reduceat(r, first)
    dev = np.repeat(sums / sizes, sizes)
    np.subtract(r, dev, out=dev)
    np.multiply(dev, dev, out=dev)
    _merge_cells(cells.count, cells.total, cells.m2, run_day, sizes, sums, np.add.reduceat(dev, first))


def _add_cells(cells: _DayCells, r: np.ndarray, day: np.ndarray, col: np.ndarray | None, lo: int, hi: int) -> None:
    """Fold a block whose table rows lie in ``lo..hi`` into ``cells`` by counting its cells."""
    m, k = cells.m, len(r)
    cell = np.subtract(day, lo, out=cells.c_buf[:k])
    if m > 1:
        cell *= m
        cell += col  # type: ignore[arg-type]
    width = (hi - lo + 1) * m
    cnt = np.bincount(cell, minlength=width)
    sums = np.bincount(cell, weights=r, minlength=width)
    dev = np.take(sums / np.maximum(cnt, 1), cell, out=cells.v_buf[:k])
    np.subtract(r, dev, out=dev)
    np.multiply(dev, dev, out=dev)
    sq = np.bincount(cell, weights=dev, minlength=width)
    hit = np.flatnonzero(cnt)
    _merge_cells(cells.count, cells.total, cells.m2, hit + lo * m, cnt[hit], sums[hit], sq[hit])


def _day_table(p: np.ndarray, y: np.ndarray, clock: _Clock, columns: _Columns | None) -> _DayTable:
    """One blocked pass over the rows: :class:`_DayTable` of the residuals ``y - p``."""
    n = len(p)
    m = 1 if columns is None else len(columns.names)
    slot_of, slot_day = _day_slots(clock, n, m)
    slots = len(slot_day)
    cells = _DayCells.empty(slots, m, min(n, _BLOCK))
    for start in range(0, n, _BLOCK):
        stop = min(start + _BLOCK, n)
        k = stop - start
        r = np.subtract(y[start:stop], p[start:stop], out=cells.r_buf[:k])
        t = clock.wall(start, stop)
        day = np.floor_divide(t, clock.per_day, out=cells.d_buf[:k])
        day -= clock.day_lo
        if slot_of is not None:
            day = slot_of[day]
        _add_block(cells, r, t, day, None if m == 1 else columns.block(start, stop))  # type: ignore[union-attr]
    count, total, m2 = cells.count.reshape(slots, m), cells.total.reshape(slots, m), cells.m2.reshape(slots, m)
    rows, cols = np.flatnonzero(count.any(axis=1)), np.flatnonzero(count.any(axis=0))
    keep = np.ix_(rows, cols)
    return _DayTable(days=slot_day[rows], n=count[keep], total=total[keep], m2=m2[keep],
                     last=clock.to_ns(cells.last[rows]), columns=cols)


@dataclass(frozen=True)
class _Periods:
    """Date-to-period assignment: ``codes`` (per date present, 0..K-1 in time order) and per-period metadata."""

    codes: np.ndarray          # int64, per date
    labels: list[str]          # per period
    starts: pd.DatetimeIndex   # per period
    previous: np.ndarray       # int64, per period: index of the period before it, -1 if it has no rows / none
    rule: str

    @property
    def first(self) -> np.ndarray:
        """Index of each period's first date (periods are runs of consecutive dates)."""
        return np.flatnonzero(np.r_[True, self.codes[1:] != self.codes[:-1]])


def _assign_calendar(days: np.ndarray, period: str) -> _Periods:
    """Assign dates (day numbers, increasing) to calendar months, ISO weeks (Monday start) or quarters."""
    if period == "week":
        raw = (days + 3) // 7                  # 1970-01-01 is a Thursday: weeks start on Monday
    else:
        first_day = int(days[0])
        span = np.arange(first_day, int(days[-1]) + 1)
        months = span.astype("datetime64[D]").astype("datetime64[M]").astype(np.int64)
        raw = (months if period == "month" else months // 3)[days - first_day]
    lo = int(raw.min())
    offset = raw - lo
    present = np.bincount(offset) > 0
    rank = np.cumsum(present) - 1                # calendar slot -> period index
    codes = rank[offset].astype(np.int64)
    slots = np.flatnonzero(present)              # calendar slot of each period
    previous = np.where(np.r_[False, present[:-1]][slots], rank[np.maximum(slots - 1, 0)], -1).astype(np.int64)
    absolute = slots + lo
    if period == "week":
        starts = pd.DatetimeIndex((absolute * 7 - 3).astype("datetime64[D]"))
        iso = starts.isocalendar()
        labels = [f"{y:04d}-W{w:02d}" for y, w in zip(iso["year"], iso["week"])]
    elif period == "month":
        starts = pd.DatetimeIndex(absolute.astype("datetime64[M]"))
        labels = [f"{t.year:04d}-{t.month:02d}" for t in starts]
    else:
        starts = pd.DatetimeIndex((absolute * 3).astype("datetime64[M]"))
        labels = [f"{t.year:04d}Q{(t.month - 1) // 3 + 1}" for t in starts]
    return _Periods(codes=codes, labels=labels, starts=starts.as_unit("ns"), previous=previous, rule=period)


def _assign_trading_days(days: np.ndarray, n_days: int) -> _Periods:
    """Assign dates (distinct, increasing) to consecutive groups of ``n_days`` of them."""
    codes = np.arange(len(days), dtype=np.int64) // n_days
    group_first = days[::n_days]
    group_last = days[np.minimum(np.arange(len(group_first)) * n_days + n_days - 1, len(days) - 1)]
    starts = pd.DatetimeIndex(group_first.astype("datetime64[D]"))
    ends = pd.DatetimeIndex(group_last.astype("datetime64[D]"))
    labels = [f"{a:%Y-%m-%d}..{b:%Y-%m-%d}" for a, b in zip(starts, ends)]
    previous = np.arange(len(labels), dtype=np.int64) - 1
    return _Periods(codes=codes, labels=labels, starts=starts.as_unit("ns"), previous=previous, rule=f"{n_days} trading days")


def _assign_periods(days: np.ndarray, period: str | int) -> _Periods:
    """Periods of the dates ``days``; ``period`` has passed :data:`~rolling_calib.core.validation.CALIBRATION_PERIOD`."""
    if isinstance(period, str):
        return _assign_calendar(days, period)
    return _assign_trading_days(days, int(period))


def _scored_periods(periods: _Periods, score_periods: Iterable[str | int] | None, *, first_too: bool = False) -> np.ndarray:
    """Boolean per period: which periods are scored (by default all but the first; all with ``first_too``)."""
    k = len(periods.labels)
    if score_periods is None and first_too:
        return np.ones(k, dtype=bool)
    if score_periods is None:
        if k < 2:
            raise ValueError(
                f"timestamps: every row falls in one {periods.rule} period ({periods.labels[0]}); expected at least "
                f"two periods, since the first only supplies the bias of the second"
            )
        scored = np.ones(k, dtype=bool)
        scored[0] = False
        return scored
    if isinstance(score_periods, (str, bytes)):
        score_periods = [score_periods]
    scored = np.zeros(k, dtype=bool)
    position = {label: i for i, label in enumerate(periods.labels)}
    for item in score_periods:
        if isinstance(item, str):
            if item not in position:
                raise ValueError(
                    f"score_periods: period {item!r} has no rows; expected one of "
                    f"{periods.labels[:3] + (['...'] if k > 3 else [])} (labels of the {periods.rule} periods present)"
                )
            scored[position[item]] = True
        elif isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            if not 0 <= item < k:
                raise ValueError(f"score_periods: position {item} is out of range; expected 0..{k - 1}")
            scored[int(item)] = True
        else:
            raise ValueError(f"score_periods: expected period labels (str) or positions (int), found {item!r}")
    if not scored.any():
        raise ValueError("score_periods: expected at least one period to score, found none")
    return scored


@validate_params(
    {"period": CALIBRATION_PERIOD, "bias": BIAS_MODE, "bias_window": BIAS_WINDOW, "missing_instrument": FALLBACK,
     "source": CALIBRATION_SOURCE}
)
def rolling_calibrated_quadratic_loss(
    predictions: Any,
    labels: Any,
    timestamps: Any,
    *,
    instruments: Any = None,
    period: str | int = "month",
    bias: str = "pooled",
    score_periods: Iterable[str | int] | None = None,
    bias_window: int | None = None,
    missing_instrument: str = "error",
    source: str = "previous",
    windows: Any = None,
    valid_predictions: Any = None,
    valid_labels: Any = None,
    valid_windows: Any = None,
    valid_instruments: Any = None,
) -> RollingCQL:
    """Time-rolling calibrated quadratic loss (docs/method.md §2.2).

    Rows are cut into periods ``1..K`` (calendar months by default). For a
    scored period ``k`` the bias is the mean residual of the period before it,
    ``c_k = mean_{i in k-1} (y_i - p_i)``, every prediction of period ``k`` is
    shifted, ``q_i = p_i + c_k``, and

    ``CQL = sum_{scored k} sum_{i in k} (y_i - q_i)^2 / n_scored``.

    With ``source='validation'`` (calibration aligned with retraining) the bias of a
    row of window ``w`` is fitted on the same model's predictions over ``w``'s
    validation segment, ``c_w = mean_{i in valid(w)} (y_i - p_i)`` (per instrument:
    ``c_{w,j}``), so no period is corrected with another model's bias; every period
    is scored by default (each has its window's bias).

    Given ``windows`` (the window of every row), the periods holding a window's first
    date are flagged ``refit_first`` (the first period after each (re)fit) and CQL and
    QL are also reported over those periods and over the rest::

        CQL_refit = sum_{scored k, refit_first} sum_{i in k} (y_i - q_i)^2 / n_refit
        CQL_rest  = sum_{scored k, not refit_first} sum_{i in k} (y_i - q_i)^2 / n_rest

    ``QL`` is reported over the same rows and over all rows. One blocked pass over
    the rows collects per date and instrument the rows, residual sums and centred
    sums of squares; every period rule and bias source is computed from these
    (``sum (r - c)^2 = M2 + n (mean - c)^2`` per cell), so the memory needed beyond
    the inputs is a few block-sized buffers and tables of dates x instruments.

    Parameters
    ----------
    predictions, labels : array-like of shape (n,)
        Finite numbers.
    timestamps : array-like of shape (n,)
        Anything :class:`pandas.DatetimeIndex` accepts. Time-zone-aware values are
        grouped by their local wall-clock date (e.g. New York trading dates).
    instruments : array-like of shape (n,), optional
        Instrument id per row; required for ``bias='per_instrument'``.
    period : {'month', 'week', 'quarter'} or int, keyword-only
        ``'month'`` (default, the paper's rule), ``'week'`` (ISO weeks starting
        Monday), ``'quarter'``, or ``N``: consecutive groups of ``N`` distinct
        dates present in the data (N trading days).
    bias : {'pooled', 'per_instrument'}, keyword-only
        ``'pooled'`` (default, the paper's rule): one ``c_k`` for all instruments;
        ``'per_instrument'``: ``c_{k,j}`` from instrument ``j``'s rows of period ``k-1``.
    score_periods : iterable of str or int, optional, keyword-only
        Periods to score, as labels (``'2015-03'``) or 0-based positions in the
        table. Default: every period but the first (``2..K``).
    bias_window : int, optional, keyword-only
        Fit ``c_k`` on the ``N`` trading days (distinct dates present in the data)
        before period ``k``'s first date instead of on the whole previous period
        (fewer where the history is shorter). Default ``None``: the previous period.
    missing_instrument : {'error', 'pooled'}, keyword-only
        With per-instrument bias, what to do when an instrument has rows in a
        scored period but none in the rows its bias is fitted on: raise (default)
        or use the pooled bias for it.
    source : {'previous', 'validation'}, keyword-only
        ``'previous'`` (default, the paper's rule): the previous period (or
        ``bias_window`` days); ``'validation'``: each window's validation predictions
        (needs ``windows`` and the ``valid_*`` arrays; ``bias_window`` must be None).
    windows : array-like of shape (n,), optional, keyword-only
        Window (model) id of every row; all rows of a date must share one window.
    valid_predictions, valid_labels, valid_windows : array-like of shape (n_v,), optional
        The models' validation-segment predictions, labels and window ids
        (``source='validation'``); ids not in ``windows`` are ignored.
    valid_instruments : array-like of shape (n_v,), optional
        Instrument of every validation row (``bias='per_instrument'``).

    Returns
    -------
    RollingCQL

    Raises
    ------
    ValueError
        Mismatched lengths, non-finite values, NaT timestamps, an unknown option,
        or a scored period with no rows to fit its bias on (by default the
        previous *calendar* period for month/week/quarter: a month without rows
        is not skipped).

    Example
    -------
    >>> ts = ["2015-01-05", "2015-01-06", "2015-02-02", "2015-02-03"]
    >>> r = rolling_calibrated_quadratic_loss([0, 0, 0, 0], [1, 1, 1, 2], ts)
    >>> r.cql, r.ql_scored, r.ql_all   # c_2 = 1: residuals of February become 0 and 1
    (0.5, 2.5, 1.75)
    >>> list(r.table["period"])
    ['2015-01', '2015-02']

    Bias from each window's validation predictions (window 0 covers January, window 1
    February; their validation residuals average 1 and 2):

    >>> r = rolling_calibrated_quadratic_loss(
    ...     [0, 0, 0, 0], [1, 1, 1, 2], ts, windows=[0, 0, 1, 1], source="validation",
    ...     valid_predictions=[0, 0, 0], valid_labels=[1, 2, 2], valid_windows=[0, 1, 1])
    >>> r.cql, r.cql_refit_first, list(r.table["bias"]), list(r.table["refit_first"])
    (0.25, 0.25, [1.0, 2.0], [True, True])
    """
    p = _as_float_1d("predictions", predictions)
    y = _as_float_1d("labels", labels)
    n = _check_lengths(predictions=p, labels=y)
    clock = _clock(timestamps, n)
    columns = None
    if bias == "per_instrument":
        if instruments is None:
            raise ValueError("instruments: required when bias='per_instrument', found None")
        columns = _instrument_columns(instruments, n)
    if source == "validation" and bias_window is not None:
        raise ValueError(f"bias_window: must be None with source='validation' (the bias comes from each window's "
                         f"validation predictions), found {bias_window!r}")
    table = _day_table(p, y, clock, columns)
    periods = _assign_periods(table.days, period)
    scored = _scored_periods(periods, score_periods, first_too=source == "validation")
    cells = _period_cells(table, periods)
    date_window = window_names = None
    if windows is not None:
        date_window, window_names = _date_windows(windows, clock, table)
    elif source == "validation":
        raise ValueError("windows: required when source='validation' (the window of every row), found None")
    if source == "validation":
        valid = _validation_bias(table, columns, window_names, valid_predictions, valid_labels, valid_windows,
                                 valid_instruments, bias=bias)
        sums = _validation_sums(periods, scored, table, date_window, window_names, valid, columns,  # type: ignore[arg-type]
                                missing_instrument=missing_instrument)
    else:
        bias_table = _fit_bias_table(periods, scored, table, cells, columns, bias=bias,
                                     bias_window=bias_window, missing_instrument=missing_instrument)
        sums = _shifted_sums(scored, cells, bias_table)
    refit = np.zeros(len(periods.labels), dtype=bool)
    if date_window is not None:
        starts = np.flatnonzero(np.r_[True, date_window[1:] != date_window[:-1]])
        refit[periods.codes[starts]] = True
    return _score_periods(periods, scored, table, cells, sums, refit, bias=bias, bias_window=bias_window, source=source)


def _date_windows(windows: Any, clock: _Clock, table: _DayTable) -> tuple[np.ndarray, np.ndarray]:
    """The window code of every date of ``table`` and the window ids (codes index them, first-seen order).

    Works on segments, the runs of rows with the same date and window (a handful per date for
    rows in time order): rows of one segment share their date and their window.

    Raises ``ValueError`` when a date has rows of two windows.
    """
    n = len(clock.ticks)
    ids = np.asarray(windows)
    if ids.ndim != 1 or len(ids) != n:
        raise ValueError(f"mismatched lengths: windows has shape {ids.shape}, predictions has {n}; expected ({n},)")
    if not n:
        return np.full(len(table.days), -1, dtype=np.int64), np.asarray(pd.factorize(ids)[1])
    if ids.dtype.kind in "iufb":   # runs of equal ids; a NaN is a run of its own
        run_start = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        run_code, names = pd.factorize(ids[run_start], use_na_sentinel=True)
    else:
        codes, names = pd.factorize(ids, use_na_sentinel=True)
        run_start = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
        run_code = codes[run_start]
    if (run_code < 0).any():
        raise ValueError(f"windows: expected a window id on every row, found a missing value at position "
                         f"{int(run_start[np.flatnonzero(run_code < 0)[0]])}")
    date_window = np.full(len(table.days), -1, dtype=np.int64)
    ticks = clock.ticks
    if clock.tz is None and not (ticks[1:] < ticks[:-1]).any():   # time order: dates start at midnights
        midnights = np.arange(clock.day_lo + 1, clock.day_hi + 1, dtype=np.int64) * clock.per_day
        seg_start = np.union1d(run_start, np.searchsorted(ticks, midnights))
        seg_start = seg_start[seg_start < n]
        seg_day = ticks[seg_start] // clock.per_day
    else:
        cut = np.zeros(n, dtype=bool)   # first row of every segment
        cut[run_start] = True
        days = []
        for start in range(0, n, _BLOCK):
            day = clock.wall(start, start + _BLOCK) // clock.per_day
            block = cut[start:start + len(day)]
            block[0] = True
            block[1:] |= day[1:] != day[:-1]
            days.append(day[block])
        seg_start, seg_day = np.flatnonzero(cut), np.concatenate(days)
    seg_code = run_code[np.searchsorted(run_start, seg_start, side="right") - 1]
    seg_date = np.searchsorted(table.days, seg_day)
    date_window[seg_date] = seg_code          # some segment's window per date; then every segment must agree
    clash = seg_code != date_window[seg_date]
    if clash.any():
        k = int(np.flatnonzero(clash)[0])
        d = int(seg_date[k])
        raise ValueError(
            f"windows: date {np.datetime64(int(table.days[d]), 'D')} has rows of windows "
            f"{_plain(names[date_window[d]])!r} and {_plain(names[seg_code[k]])!r}; expected every date in one window"
        )
    return date_window, np.asarray(names)


@dataclass(frozen=True)
class _ValidSums:
    """Validation residual sums and counts per window (rows) and table column: (W, m), and pooled (W,)."""

    total: np.ndarray
    n: np.ndarray
    pooled_total: np.ndarray
    pooled_n: np.ndarray


def _validation_bias(table: _DayTable, columns: _Columns | None, window_names: np.ndarray, predictions: Any,
                     labels: Any, windows: Any, instruments: Any, *, bias: str) -> _ValidSums:
    """Residual sums of the validation rows per window (and instrument column of the test table)."""
    if predictions is None or labels is None or windows is None:
        raise ValueError("valid_predictions, valid_labels, valid_windows: required when source='validation' "
                         "(each window's validation predictions), found None")
    vp = _as_float_1d("valid_predictions", predictions)
    vy = _as_float_1d("valid_labels", labels)
    nv = _check_lengths(valid_predictions=vp, valid_labels=vy)
    vw = np.asarray(windows)
    if vw.ndim != 1 or len(vw) != nv:
        raise ValueError(f"mismatched lengths: valid_windows has shape {vw.shape}, valid_predictions has {nv}; expected ({nv},)")
    n_win = len(window_names)
    wcode = pd.Index(window_names).get_indexer(vw)
    keep = wcode >= 0
    r = vy - vp
    pooled_total = np.bincount(wcode[keep], weights=r[keep], minlength=n_win)
    pooled_n = np.bincount(wcode[keep], minlength=n_win)
    m = table.n.shape[1]
    if bias != "per_instrument" or columns is None:
        return _ValidSums(pooled_total[:, None], pooled_n[:, None], pooled_total, pooled_n)
    if instruments is None:
        raise ValueError("valid_instruments: required when source='validation' and bias='per_instrument', found None")
    vi = np.asarray(instruments)
    if vi.ndim != 1 or len(vi) != nv:
        raise ValueError(f"mismatched lengths: valid_instruments has shape {vi.shape}, valid_predictions has {nv}; expected ({nv},)")
    col = pd.Index(columns.names[table.columns]).get_indexer(vi)
    both = keep & (col >= 0)
    cell = wcode[both] * m + col[both]
    total = np.bincount(cell, weights=r[both], minlength=n_win * m).reshape(n_win, m)
    count = np.bincount(cell, minlength=n_win * m).reshape(n_win, m)
    return _ValidSums(total, count, pooled_total, pooled_n)


def _validation_sums(periods: _Periods, scored: np.ndarray, table: _DayTable, date_window: np.ndarray,
                     window_names: np.ndarray, valid: _ValidSums, columns: _Columns | None,
                     *, missing_instrument: str) -> tuple[np.ndarray, np.ndarray]:
    """Per period: ``sum (r - c_w)^2`` and ``sum c_w`` over the scored rows, ``c_w`` from the row's window."""
    date_scored = scored[periods.codes]
    used = date_scored[:, None] & (table.n > 0)
    src_n = valid.n[date_window]                       # (d, m)
    unfit = date_scored & (valid.pooled_n[date_window] == 0)
    if unfit.any():
        d = int(np.flatnonzero(unfit)[0])
        raise ValueError(
            f"valid_predictions: window {_plain(window_names[date_window[d]])!r} has rows in scored period "
            f"{periods.labels[periods.codes[d]]} but no validation predictions to fit its bias on; expected "
            f"validation predictions for every window that is scored"
        )
    with np.errstate(invalid="ignore", divide="ignore"):
        bias_d = valid.total[date_window] / src_n
        pooled_d = valid.pooled_total[date_window] / valid.pooled_n[date_window]
    missing = used & (src_n == 0)
    if missing.any():
        if missing_instrument == "error":
            d = int(np.flatnonzero(missing.any(axis=1))[0])
            jj = min(np.flatnonzero(missing[d]), key=lambda j: columns.first_row(int(table.columns[j])))  # type: ignore[union-attr]
            raise ValueError(
                f"instruments: instrument {_plain(columns.names[table.columns[jj]])!r} has rows in scored period "  # type: ignore[union-attr]
                f"{periods.labels[periods.codes[d]]} but window {_plain(window_names[date_window[d]])!r} has no "
                f"validation predictions of it, so no per-instrument bias can be fitted ({int(missing.sum())} such "
                f"date-instrument cell(s)); pass missing_instrument='pooled' to use the pooled bias there"
            )
        bias_d = np.where(missing, pooled_d[:, None], bias_d)
    mean = table.total / np.maximum(table.n, 1)
    shift = np.where(used, mean - bias_d, 0.0)
    cal = np.where(used, table.m2 + table.n * shift * shift, 0.0).sum(axis=1)
    applied = np.where(used, table.n * bias_d, 0.0).sum(axis=1)
    first = periods.first
    return np.add.reduceat(cal, first), np.add.reduceat(applied, first)


def _shifted_sums(scored: np.ndarray, cells: _PeriodCells, bias_table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per period: ``sum (r - c_{k,j})^2`` and ``sum c_{k,j}`` over the rows of the scored periods
    (a cell of ``n`` rows shifted by ``c`` scores ``M2 + n (mean - c)^2``)."""
    mean = cells.total / np.maximum(cells.n, 1)
    use = (cells.n > 0) & scored[:, None]   # the bias table is finite on these cells
    shift = np.where(use, mean - bias_table, 0.0)
    cal_sum = np.where(use, cells.m2 + cells.n * shift * shift, 0.0).sum(axis=1)
    applied_sum = np.where(use, cells.n * bias_table, 0.0).sum(axis=1)
    return cal_sum, applied_sum


@dataclass(frozen=True)
class _PeriodCells:
    """Residual statistics per period (rows) and instrument column: rows, sums, centred sums of squares."""

    n: np.ndarray       # (k, m) int64
    total: np.ndarray   # (k, m)
    m2: np.ndarray      # (k, m)


def _period_cells(table: _DayTable, periods: _Periods) -> _PeriodCells:
    """Merge the dates of every period: ``M2 = sum_dates M2_d + n_d (mean_d - mean)^2``."""
    first = periods.first
    n = np.add.reduceat(table.n, first, axis=0)
    total = np.add.reduceat(table.total, first, axis=0)
    mean = total / np.maximum(n, 1)
    spread = table.total / np.maximum(table.n, 1) - mean[periods.codes]
    m2 = np.add.reduceat(table.m2 + table.n * spread * spread, first, axis=0)
    return _PeriodCells(n=n, total=total, m2=m2)


def _fit_bias_table(
    periods: _Periods, scored: np.ndarray, table: _DayTable, cells: _PeriodCells, columns: _Columns | None,
    *, bias: str, bias_window: int | None, missing_instrument: str,
) -> np.ndarray:
    """The bias ``c_{k,j}`` of every period ``k`` and instrument column ``j`` (one column when pooled): (k, m)."""
    # Sums and counts of the residuals each period's bias is fitted on, per instrument column: (k, m).
    if bias_window is None:
        has_prev = (periods.previous >= 0)[:, None]
        safe = np.maximum(periods.previous, 0)
        src_sum, src_n = np.where(has_prev, cells.total[safe], 0.0), np.where(has_prev, cells.n[safe], 0)
        source = f"the {periods.rule} before it has"
    else:
        src_sum, src_n = _window_sources(table, periods.first, days=int(bias_window))
        source = f"the {int(bias_window)} trading day(s) before it have"
    pooled_n = src_n.sum(axis=1)
    unfit = scored & (pooled_n == 0)
    if unfit.any():
        first = int(np.flatnonzero(unfit)[0])
        raise ValueError(
            f"score_periods: period {periods.labels[first]} is scored but {source} no rows to fit a bias on; "
            f"expected every scored period to have rows to fit its bias on (leave it out of score_periods)"
        )
    with np.errstate(invalid="ignore", divide="ignore"):
        bias_table = src_sum / src_n
        pooled_bias = src_sum.sum(axis=1) / pooled_n
    if bias != "per_instrument" or columns is None:
        return bias_table
    missing = (cells.n > 0) & scored[:, None] & (src_n == 0)
    if not missing.any():
        return bias_table
    if missing_instrument == "error":
        kk = int(np.flatnonzero(missing.any(axis=1))[0])
        # the instrument seen first among those missing in that period
        jj = min(np.flatnonzero(missing[kk]), key=lambda j: columns.first_row(int(table.columns[j])))
        raise ValueError(
            f"instruments: instrument {_plain(columns.names[table.columns[jj]])!r} has rows in scored period "
            f"{periods.labels[kk]} but {source} none of its rows, so no per-instrument bias can be fitted "
            f"({int(missing.sum())} such instrument-period cell(s)); pass missing_instrument='pooled' "
            f"to use the pooled bias there"
        )
    return np.where(missing, pooled_bias[:, None], bias_table)


def _window_sources(table: _DayTable, first: np.ndarray, *, days: int) -> tuple[np.ndarray, np.ndarray]:
    """Residual sums and counts over the ``days`` dates present before each period's first date
    (``first``: its index among the dates), per instrument column: two (k, m) arrays (fewer days where
    history is shorter)."""
    m = table.n.shape[1]
    # one zero row at the end so every reduceat index is valid
    day_n = np.vstack([table.n, np.zeros((1, m), np.int64)])
    day_sum = np.vstack([table.total, np.zeros((1, m))])
    begin = np.maximum(first - days, 0)
    bounds = np.column_stack([begin, first]).ravel()
    empty = (begin == first)[:, None]
    # reduceat sums rows begin:first for every (begin, first) pair; empty windows are zeroed
    window_sum = np.where(empty, 0.0, np.add.reduceat(day_sum, bounds, axis=0)[::2])
    window_n = np.where(empty, 0, np.add.reduceat(day_n, bounds, axis=0)[::2])
    return window_sum, window_n


def _score_periods(
    periods: _Periods, scored: np.ndarray, table: _DayTable, cells: _PeriodCells,
    sums: tuple[np.ndarray, np.ndarray], refit: np.ndarray, *, bias: str, bias_window: int | None, source: str,
) -> RollingCQL:
    """QL and CQL per period and overall from the period cells and the calibrated sums per period."""
    counts = cells.n.sum(axis=1)
    n = int(counts.sum())
    residual_sum = cells.total.sum(axis=1)
    mean = cells.total / np.maximum(cells.n, 1)
    period_mean = residual_sum / counts
    spread = mean - period_mean[:, None]
    sq_sum = (cells.m2 + cells.n * spread * spread).sum(axis=1) + counts * period_mean * period_mean
    cal_sum, applied_sum = sums
    ends = np.maximum.reduceat(table.last.view(np.int64), periods.first)

    n_scored = int(counts[scored].sum())
    table_out = pd.DataFrame(
        {
            "period": periods.labels,
            "start": periods.starts,
            "end": pd.DatetimeIndex(ends.view("datetime64[ns]")),
            "rows": counts.astype(np.int64),
            "mean_residual": residual_sum / counts,
            "bias": np.where(scored, applied_sum / counts, np.nan),
            "ql": sq_sum / counts,
            "cql": np.where(scored, cal_sum / counts, np.nan),
            "scored": scored,
            "refit_first": refit,
        }
    )

    def part(which: np.ndarray) -> tuple[float, float, int]:
        rows = int(counts[which].sum())
        if rows == 0:
            return math.nan, math.nan, 0
        return float(cal_sum[which].sum() / rows), float(sq_sum[which].sum() / rows), rows

    first_cql, first_ql, first_n = part(scored & refit)
    rest_cql, rest_ql, rest_n = part(scored & ~refit)
    return RollingCQL(
        table=table_out,
        cql=float(cal_sum[scored].sum() / n_scored),
        ql_scored=float(sq_sum[scored].sum() / n_scored),
        ql_all=float(sq_sum.sum() / n),
        n_scored=n_scored,
        n_all=n,
        period=periods.rule,
        bias=bias,
        bias_window=None if bias_window is None else int(bias_window),
        source=source,
        cql_refit_first=first_cql,
        ql_refit_first=first_ql,
        n_refit_first=first_n,
        cql_rest=rest_cql,
        ql_rest=rest_ql,
        n_rest=rest_n,
    )


# ---------------------------------------------------------------------------
# Binary log loss
# ---------------------------------------------------------------------------
def _binary_log_loss_from_logits(z: np.ndarray, y: np.ndarray) -> float:
    """Mean of ``log(1 + exp(z)) - y * z`` (= cross-entropy of sigmoid(z)), computed stably."""
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def log_loss(probabilities: Any, labels: Any, *, from_logits: bool = False) -> float:
    """Binary log loss (cross-entropy), lower is better.

    ``LL = -1/n * sum_i [y_i log p_i + (1 - y_i) log(1 - p_i)]``

    Probabilities are clipped to ``[EPS, 1 - EPS]`` first (as scikit-learn does
    for float64). With ``from_logits=True`` the first argument holds logits
    ``z_i`` and ``p_i = sigmoid(z_i)`` is applied in a numerically stable form
    without clipping.

    Example
    -------
    >>> round(log_loss([0.5, 0.5], [0, 1]), 6)   # log 2
    0.693147
    """
    z = _logits_from("probabilities", probabilities, from_logits=from_logits)
    y = _as_binary_labels("labels", labels)
    _check_lengths(probabilities=z, labels=y)
    return _binary_log_loss_from_logits(z, y)


def _solve_logit_shift(z: np.ndarray, y: np.ndarray) -> float:
    """Scalar ``c*`` for 1-D logits ``z`` and labels ``y`` (see :func:`_solve_logit_shift_rows`)."""
    return float(_solve_logit_shift_rows(z[None, :], y[None, :])[0])


def _solve_logit_shift_rows(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per row ``r``: root of ``f_r(c) = sum_i sigmoid(z_ri - c) - sum_i y_ri`` (f_r is decreasing).

    Safeguarded Newton, vectorised over rows: each row keeps a bracket ``[lo, hi]``
    with ``f(lo) > 0 > f(hi)``; a Newton step leaving the bracket is replaced by
    bisection. Stops per row when the step is below ``4 * EPS * max(1, |c|)``.
    """
    y = np.broadcast_to(y, z.shape)
    rows, n = z.shape
    target = y.sum(axis=1)
    degenerate = (target <= 0.0) | (target >= n)
    if degenerate.any():
        r = int(np.flatnonzero(degenerate)[0])
        which = "0" if target[r] <= 0.0 else "1"
        where = "" if rows == 1 else f" (row {r} of {rows})"
        raise ValueError(
            f"labels: every label of the bias part is {which}{where}, so the logit shift that calibrates it "
            f"is infinite; expected both classes in the bias part"
        )
    prior = np.log(target) - np.log(n - target)                 # logit of the positive rate
    # At c = lo every z_i - c > logit(ybar), so every q_i > ybar and f(lo) > 0; symmetrically f(hi) < 0.
    lo = z.min(axis=1) - prior - 1.0
    hi = z.max(axis=1) - prior + 1.0
    c = np.clip(np.median(z, axis=1) - prior, lo, hi)
    active = np.arange(rows)
    for _ in range(200):
        if active.size == 0:
            break
        ca = c[active]
        q = 0.5 * (1.0 + np.tanh(0.5 * (z[active] - ca[:, None])))   # sigmoid, stable
        value = q.sum(axis=1) - target[active]
        slope = (q * (1.0 - q)).sum(axis=1)
        lo[active] = np.where(value > 0.0, ca, lo[active])
        hi[active] = np.where(value < 0.0, ca, hi[active])
        with np.errstate(divide="ignore", invalid="ignore"):
            candidate = ca + value / slope
        outside = ~((candidate > lo[active]) & (candidate < hi[active]))
        candidate = np.where(outside, 0.5 * (lo[active] + hi[active]), candidate)
        candidate = np.where(value == 0.0, ca, candidate)
        tol = 4.0 * EPS * np.maximum(1.0, np.abs(ca))
        done = (value == 0.0) | (np.abs(candidate - ca) <= tol) | (hi[active] - lo[active] <= tol)
        c[active] = candidate
        active = active[~done]
    return c


def fit_logit_shift_rows(logits: Any, labels: Any) -> np.ndarray:
    """One logit shift per row: :func:`fit_logit_shift` vectorised over many models.

    Parameters
    ----------
    logits : array-like of shape (runs, n)
        Row ``r`` holds model ``r``'s logits on the same ``n`` bias-part rows.
    labels : array-like of shape (n,) or (runs, n)
        Binary labels (shared by all rows when 1-D).

    Returns
    -------
    numpy.ndarray of shape (runs,)
        ``c*_r`` with ``sum_i sigmoid(z_ri - c*_r) = sum_i y_ri``.

    Example
    -------
    >>> fit_logit_shift_rows([[0.0, 0.0], [1.0, 1.0]], [1, 0]).tolist()
    [0.0, 1.0]
    """
    try:
        z = np.asarray(logits, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"logits: expected numbers, found values that are not numeric ({exc})") from exc
    if z.ndim != 2 or z.shape[1] == 0:
        raise ValueError(f"logits: expected a 2-D array (runs, rows >= 1), found shape {z.shape}")
    if not np.all(np.isfinite(z)):
        raise ValueError(f"logits: expected finite numbers, found {_describe_bad(z)}")
    y = np.asarray(labels)
    if y.ndim == 1:
        y = _as_binary_labels("labels", y)
        if y.size != z.shape[1]:
            raise ValueError(f"mismatched lengths: labels has {y.size}, logits has {z.shape[1]} columns; expected equal")
    else:
        if y.shape != z.shape:
            raise ValueError(f"mismatched lengths: labels has shape {y.shape}, logits has {z.shape}; expected equal")
        y = _as_binary_labels("labels", y.ravel()).reshape(z.shape)
    return _solve_logit_shift_rows(z, y)


def fit_logit_shift(probabilities: Any, labels: Any, *, from_logits: bool = False) -> float:
    """Logit shift ``c*`` of the calibrated log loss (docs/method.md §2.3).

    Sign convention: ``q_i = g_c(p_i) = sigmoid(logit(p_i) - c)``, so a positive
    ``c`` lowers every probability. ``c*`` minimises the convex objective

    ``L(c) = -sum_i [y_i log g_c(p_i) + (1 - y_i) log(1 - g_c(p_i))]``

    whose derivative is ``L'(c) = sum_i (y_i - q_i)``; at ``c*`` the adjusted
    predictions are calibrated in aggregate: ``sum_i q_i = sum_i y_i``. The root
    is found by safeguarded Newton iteration (bisection fallback) to machine
    precision. Both classes must be present (otherwise ``c*`` is infinite).

    Example
    -------
    >>> round(fit_logit_shift([0.5, 0.5, 0.5, 0.5], [1, 0, 0, 0]), 6)   # log(1/1) - log(1/3)
    1.098612
    """
    z = _logits_from("probabilities", probabilities, from_logits=from_logits)
    y = _as_binary_labels("labels", labels)
    _check_lengths(probabilities=z, labels=y)
    return _solve_logit_shift(z, y)


def calibrated_log_loss(
    probabilities: Any, labels: Any, *, bias_part: Any, from_logits: bool = False
) -> float:
    """Calibrated log loss (docs/method.md §2.3).

    Fit ``c*`` on the bias part with :func:`fit_logit_shift`, shift the remaining
    part's logits, ``q_i = sigmoid(logit(p_i) - c*)``, and return the log loss of
    ``q`` on the remaining part. Unchanged (up to rounding) when a constant is
    added to every logit.

    Example
    -------
    >>> p = [0.5, 0.5, 0.5, 0.5, 0.25]
    >>> y = [1, 1, 1, 0, 1]
    >>> round(calibrated_log_loss(p, y, bias_part=[0, 1, 2, 3]), 6)   # q = sigmoid(log 1/3 + log 3) = 1/2
    0.693147
    """
    z = _logits_from("probabilities", probabilities, from_logits=from_logits)
    y = _as_binary_labels("labels", labels)
    n = _check_lengths(probabilities=z, labels=y)
    mask = _bias_mask(bias_part, n)
    c = _solve_logit_shift(z[mask], y[mask])
    return _binary_log_loss_from_logits(z[~mask] - c, y[~mask])


def _background_entropy(y: np.ndarray) -> float:
    """Log loss of the constant predictor ``ybar``: ``-(ybar log ybar + (1-ybar) log(1-ybar))``."""
    ybar = float(y.mean())
    if ybar <= 0.0 or ybar >= 1.0:
        raise ValueError(
            f"labels: the scored labels are all {int(ybar)}, so the background log loss is 0 and the "
            f"normalized cross-entropy is undefined; expected both classes"
        )
    return -(ybar * math.log(ybar) + (1.0 - ybar) * math.log1p(-ybar))


def normalized_cross_entropy(probabilities: Any, labels: Any, *, from_logits: bool = False) -> float:
    """Normalized cross-entropy (docs/method.md §2.5).

    ``NCE = LL(p, y) / H(ybar)``, ``H(ybar) = -(ybar log ybar + (1 - ybar) log(1 - ybar))``,
    with ``ybar`` the positive rate of the labels scored. Below 1 means better than
    always predicting the background rate.

    Example
    -------
    >>> normalized_cross_entropy([0.5, 0.5], [0, 1])
    1.0
    """
    z = _logits_from("probabilities", probabilities, from_logits=from_logits)
    y = _as_binary_labels("labels", labels)
    _check_lengths(probabilities=z, labels=y)
    return _binary_log_loss_from_logits(z, y) / _background_entropy(y)


def calibrated_normalized_cross_entropy(
    probabilities: Any, labels: Any, *, bias_part: Any, from_logits: bool = False
) -> float:
    """Calibrated NCE: :func:`calibrated_log_loss` divided by ``H(ybar)`` of the remaining part.

    Example
    -------
    >>> p = [0.5, 0.5, 0.5, 0.5, 0.25, 0.25]
    >>> y = [1, 1, 1, 0, 1, 0]
    >>> calibrated_normalized_cross_entropy(p, y, bias_part=[0, 1, 2, 3])   # q = 1/2 on the remaining rows
    1.0
    """
    z = _logits_from("probabilities", probabilities, from_logits=from_logits)
    y = _as_binary_labels("labels", labels)
    n = _check_lengths(probabilities=z, labels=y)
    mask = _bias_mask(bias_part, n)
    c = _solve_logit_shift(z[mask], y[mask])
    rest = ~mask
    return _binary_log_loss_from_logits(z[rest] - c, y[rest]) / _background_entropy(y[rest])


# ---------------------------------------------------------------------------
# Multiclass: log loss and temperature scaling
# ---------------------------------------------------------------------------
def _as_class_scores(name: str, values: Any, *, from_logits: bool) -> np.ndarray:
    """Validated (n, K) logits; probabilities are clipped to [EPS, 1] and logged."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: expected numbers, found values that are not numeric ({exc})") from exc
    if arr.ndim != 2 or arr.shape[1] < 2:
        raise ValueError(f"{name}: expected a 2-D array (rows, classes >= 2), found shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: expected finite numbers, found {_describe_bad(arr)}")
    if from_logits:
        return arr
    outside = (arr < 0.0) | (arr > 1.0)
    if outside.any():
        r, c = np.argwhere(outside)[0]
        raise ValueError(f"{name}: expected probabilities in [0, 1], found {_plain(arr[r, c])!r} at row {r}, class {c}")
    sums = arr.sum(axis=1)
    off = np.abs(sums - 1.0) > 1e-6
    if off.any():
        r = int(np.flatnonzero(off)[0])
        raise ValueError(f"{name}: expected each row to sum to 1 (within 1e-6), found {_plain(sums[r])!r} at row {r}")
    return np.log(np.clip(arr, EPS, 1.0))


def _as_class_labels(name: str, values: Any, n_classes: int) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of class indices, found shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        as_float = np.asarray(arr, dtype=np.float64)
        if not np.all(np.isfinite(as_float)) or np.any(as_float != np.round(as_float)):
            raise ValueError(f"{name}: expected integer class indices, found dtype {arr.dtype} with non-integer values")
        arr = as_float
    arr = arr.astype(np.int64)
    bad = (arr < 0) | (arr >= n_classes)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}: expected class indices in [0, {n_classes - 1}], found {arr[first]} at position {first}")
    return arr


def _multiclass_nll(z: np.ndarray, y: np.ndarray) -> float:
    """Mean of ``logsumexp(z_i) - z_{i, y_i}``."""
    zmax = z.max(axis=1, keepdims=True)
    lse = zmax[:, 0] + np.log(np.exp(z - zmax).sum(axis=1))
    return float(np.mean(lse - z[np.arange(len(y)), y]))


def multiclass_log_loss(probabilities: Any, labels: Any, *, from_logits: bool = False) -> float:
    """Multiclass log loss: ``-1/n * sum_i log p_{i, y_i}``.

    ``probabilities`` has shape (n, K), rows summing to 1 (clipped below at
    ``EPS`` before the log); with ``from_logits=True`` it holds logits and the
    softmax is applied stably. ``labels`` are class indices ``0..K-1``.

    Example
    -------
    >>> round(multiclass_log_loss([[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]], [0, 2]), 6)   # log 2
    0.693147
    """
    z = _as_class_scores("probabilities", probabilities, from_logits=from_logits)
    y = _as_class_labels("labels", labels, z.shape[1])
    _check_lengths(probabilities=z, labels=y)
    return _multiclass_nll(z, y)


def _solve_inverse_temperature(z: np.ndarray, y: np.ndarray) -> float:
    """Minimise ``N(b) = sum_i [logsumexp(b z_i) - b z_{i,y_i}]`` over ``b = 1/T > 0`` (convex in b)."""
    picked = z[np.arange(len(y)), y]

    def grad_hess(b: float) -> tuple[float, float]:
        s = b * z
        s = s - s.max(axis=1, keepdims=True)
        w = np.exp(s)
        w /= w.sum(axis=1, keepdims=True)
        mean = (w * z).sum(axis=1)
        var = (w * z * z).sum(axis=1) - mean * mean
        return float(np.sum(mean - picked)), float(np.sum(np.maximum(var, 0.0)))

    g0, _ = grad_hess(0.0)
    if g0 >= 0.0:
        raise ValueError(
            "probabilities: on the bias part the scores are no better than uniform, so the fitted "
            "temperature is infinite (1/T <= 0); expected scores that favour the true class on average"
        )
    # As b -> inf the gradient tends to sum_i (max_k z_ik - z_{i,y_i}) >= 0; when that is 0 every row
    # already ranks its true class first and N keeps decreasing: no finite minimiser.
    if float(np.sum(z.max(axis=1) - picked)) <= 0.0:
        raise ValueError(
            "probabilities: the bias part is separated perfectly (the true class has the top score on every "
            "row), so the fitted temperature tends to 0; expected at least one misranked row"
        )
    lo, hi = 0.0, 1.0
    while grad_hess(hi)[0] < 0.0:
        lo, hi = hi, hi * 2.0
    b = 0.5 * (lo + hi)
    for _ in range(200):
        g, h = grad_hess(b)
        if g == 0.0:
            return b
        if g < 0.0:
            lo = b
        else:
            hi = b
        candidate = b - g / h if h > 0.0 else math.inf
        if not (lo < candidate < hi):
            candidate = 0.5 * (lo + hi)
        if abs(candidate - b) <= 4.0 * EPS * max(1.0, b):
            return candidate
        b = candidate
    return b  # pragma: no cover


def fit_temperature(probabilities: Any, labels: Any, *, from_logits: bool = True) -> float:
    """Temperature ``T > 0`` minimising the NLL of ``softmax(z / T)`` (docs/method.md §2.4).

    Solved for ``b = 1/T``: ``N(b) = sum_i [logsumexp(b z_i) - b z_{i, y_i}]`` is
    convex in ``b``; its derivative is ``sum_i (E_{softmax(b z_i)}[z] - z_{i, y_i})``.
    Safeguarded Newton on ``b`` to machine precision. By default the input is
    logits; with ``from_logits=False`` probabilities are turned into ``log p``.

    Example
    -------
    >>> z = [[2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [2.0, 0.0]]   # right 3 times of 4
    >>> round(fit_temperature(z, [0, 1, 0, 1]), 6)          # sigmoid(2/T) = 3/4 -> T = 2 / log 3
    1.820478
    """
    z = _as_class_scores("probabilities", probabilities, from_logits=from_logits)
    y = _as_class_labels("labels", labels, z.shape[1])
    _check_lengths(probabilities=z, labels=y)
    return 1.0 / _solve_inverse_temperature(z, y)


def temperature_scaled_log_loss(
    probabilities: Any, labels: Any, *, bias_part: Any, from_logits: bool = True
) -> float:
    """Calibrated multiclass log loss: fit ``T`` on the bias part, score ``softmax(z / T)`` on the rest.

    ``T* = argmin_T sum_{i in B} -log softmax(z_i / T)_{y_i}``;
    result ``= -1/|R| * sum_{i in R} log softmax(z_i / T*)_{y_i}``.

    Example
    -------
    >>> z = [[2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [2.0, 0.0], [2.0, 0.0]]
    >>> round(temperature_scaled_log_loss(z, [0, 1, 0, 1, 0], bias_part=[0, 1, 2, 3]), 6)   # -log(3/4)
    0.287682
    """
    z = _as_class_scores("probabilities", probabilities, from_logits=from_logits)
    y = _as_class_labels("labels", labels, z.shape[1])
    n = _check_lengths(probabilities=z, labels=y)
    mask = _bias_mask(bias_part, n)
    b = _solve_inverse_temperature(z[mask], y[mask])
    return _multiclass_nll(z[~mask] * b, y[~mask])
