"""Vanilla and calibrated evaluation metrics: pure functions on arrays.

This module implements METHOD section 2: the calibrated-metric framework. Every
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
    if not np.all(np.isfinite(arr)):
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
    """Calibrated quadratic loss (METHOD 2.1).

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
        QL of the period, NaN when unscored), ``scored`` (bool).
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

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dictionary (the table as a list of records, timestamps as ISO strings)."""
        table = self.table.copy()
        for column in ("start", "end"):
            table[column] = table[column].map(lambda t: t.isoformat())
        records = [
            {key: (None if isinstance(val, float) and math.isnan(val) else val) for key, val in rec.items()}
            for rec in table.to_dict(orient="records")
        ]
        return {
            "cql": self.cql,
            "ql_scored": self.ql_scored,
            "ql_all": self.ql_all,
            "n_scored": self.n_scored,
            "n_all": self.n_all,
            "period": self.period,
            "bias": self.bias,
            "bias_window": self.bias_window,
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


@dataclass(frozen=True)
class _Periods:
    """Row-to-period assignment: ``codes`` (per row, 0..K-1 in time order) and per-period metadata."""

    codes: np.ndarray          # int64, per row
    labels: list[str]          # per period
    starts: pd.DatetimeIndex   # per period
    previous: np.ndarray       # int64, per period: index of the period before it, -1 if it has no rows / none
    rule: str


_NS_PER_DAY = 86_400 * 10**9


def _day_numbers(ts: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of naive datetime64[ns] values (floor division: fast, exact)."""
    return ts.view(np.int64) // _NS_PER_DAY


def _assign_calendar(ts: np.ndarray, period: str) -> _Periods:
    """Assign rows to calendar months, ISO weeks (Monday start) or quarters."""
    days = _day_numbers(ts)
    if period == "week":
        raw = (days + 3) // 7                  # 1970-01-01 is a Thursday: weeks start on Monday
    else:
        # calendar arithmetic on the (few) distinct days only, then a table look-up per row
        first_day = int(days.min())
        span = np.arange(first_day, int(days.max()) + 1)
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


def _assign_trading_days(ts: np.ndarray, n_days: int) -> _Periods:
    """Assign rows to consecutive groups of ``n_days`` distinct dates present in the data."""
    days = _day_numbers(ts)
    lo = int(days.min())
    offset = days - lo
    present = np.bincount(offset) > 0
    rank = np.cumsum(present) - 1                # date slot -> trading-day number
    codes = (rank[offset] // n_days).astype(np.int64)
    dates = np.flatnonzero(present) + lo         # distinct dates, sorted
    group_first = dates[::n_days]
    group_last = dates[np.minimum(np.arange(len(group_first)) * n_days + n_days - 1, len(dates) - 1)]
    starts = pd.DatetimeIndex(group_first.astype("datetime64[D]"))
    ends = pd.DatetimeIndex(group_last.astype("datetime64[D]"))
    labels = [f"{a:%Y-%m-%d}..{b:%Y-%m-%d}" for a, b in zip(starts, ends)]
    previous = np.arange(len(labels), dtype=np.int64) - 1
    return _Periods(codes=codes, labels=labels, starts=starts.as_unit("ns"), previous=previous, rule=f"{n_days} trading days")


def _assign_periods(ts: np.ndarray, period: str | int) -> _Periods:
    """Periods of ``ts``; ``period`` has passed :data:`~rolling_calib.core.validation.CALIBRATION_PERIOD`."""
    if isinstance(period, str):
        return _assign_calendar(ts, period)
    return _assign_trading_days(ts, int(period))


def _scored_periods(periods: _Periods, score_periods: Iterable[str | int] | None) -> np.ndarray:
    """Boolean per period: which periods are scored."""
    k = len(periods.labels)
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
    {"period": CALIBRATION_PERIOD, "bias": BIAS_MODE, "bias_window": BIAS_WINDOW, "missing_instrument": FALLBACK}
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
) -> RollingCQL:
    """Time-rolling calibrated quadratic loss (METHOD 2.2).

    Rows are cut into periods ``1..K`` (calendar months by default). For a
    scored period ``k`` the bias is the mean residual of the period before it,
    ``c_k = mean_{i in k-1} (y_i - p_i)``, every prediction of period ``k`` is
    shifted, ``q_i = p_i + c_k``, and

    ``CQL = sum_{scored k} sum_{i in k} (y_i - q_i)^2 / n_scored``.

    ``QL`` is reported over the same rows and over all rows. The computation is
    vectorised (``numpy.bincount`` over period codes); it handles millions of rows.

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
    """
    p = _as_float_1d("predictions", predictions)
    y = _as_float_1d("labels", labels)
    n = _check_lengths(predictions=p, labels=y)
    ts = _as_timestamps(timestamps, n)
    if bias == "per_instrument":
        if instruments is None:
            raise ValueError("instruments: required when bias='per_instrument', found None")
        inst_codes, uniques = _instrument_codes(instruments, n)
    else:
        inst_codes, uniques = np.zeros(n, dtype=np.int64), np.array(["(pooled)"], dtype=object)
    periods = _assign_periods(ts, period)
    scored = _scored_periods(periods, score_periods)
    residual = y - p
    bias_table = _fit_bias_table(periods, scored, ts, inst_codes, uniques, residual, bias=bias,
                                 bias_window=bias_window, missing_instrument=missing_instrument)
    return _score_periods(periods, scored, ts, inst_codes, residual, bias_table, bias=bias, bias_window=bias_window)


def _fit_bias_table(
    periods: _Periods, scored: np.ndarray, ts: np.ndarray, inst_codes: np.ndarray, uniques: np.ndarray,
    residual: np.ndarray, *, bias: str, bias_window: int | None, missing_instrument: str,
) -> np.ndarray:
    """The bias ``c_{k,j}`` of every period ``k`` and instrument column ``j`` (one column when pooled): (k, m)."""
    k, m = len(periods.labels), len(uniques)
    codes = periods.codes
    # Sums and counts of the residuals each period's bias is fitted on, per instrument column: (k, m).
    if bias_window is None:
        src_sum, src_n = _previous_period_sources(codes, inst_codes, residual, k=k, m=m, previous=periods.previous)
        source = f"the {periods.rule} before it has"
    else:
        src_sum, src_n = _window_sources(ts, periods.starts, inst_codes, residual, m=m, days=int(bias_window))
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
    if bias != "per_instrument":
        return bias_table
    cell_n = np.bincount(codes * m + inst_codes, minlength=k * m).reshape(k, m)
    missing = (cell_n > 0) & scored[:, None] & (src_n == 0)
    if not missing.any():
        return bias_table
    if missing_instrument == "error":
        kk, jj = np.argwhere(missing)[0]
        raise ValueError(
            f"instruments: instrument {_plain(uniques[jj])!r} has rows in scored period {periods.labels[kk]} "
            f"but {source} none of its rows, so no per-instrument bias can be fitted "
            f"({int(missing.sum())} such instrument-period cell(s)); pass missing_instrument='pooled' "
            f"to use the pooled bias there"
        )
    return np.where(missing, pooled_bias[:, None], bias_table)


def _score_periods(
    periods: _Periods, scored: np.ndarray, ts: np.ndarray, inst_codes: np.ndarray, residual: np.ndarray,
    bias_table: np.ndarray, *, bias: str, bias_window: int | None,
) -> RollingCQL:
    """Shift the scored periods' rows by their bias and aggregate QL and CQL per period and overall."""
    codes, k, n = periods.codes, len(periods.labels), len(residual)
    row_scored = scored[codes]
    row_bias = np.where(row_scored, bias_table[codes, inst_codes], 0.0)
    cal = np.where(row_scored, residual - row_bias, 0.0)
    counts = np.bincount(codes, minlength=k)
    sq_sum = np.bincount(codes, weights=residual * residual, minlength=k)
    cal_sum = np.bincount(codes, weights=cal * cal, minlength=k)
    applied_sum = np.bincount(codes, weights=row_bias, minlength=k)
    mean_residual = np.bincount(codes, weights=residual, minlength=k) / counts

    n_scored = int(counts[scored].sum())
    ends = pd.Series(ts).groupby(codes).max()
    table = pd.DataFrame(
        {
            "period": periods.labels,
            "start": periods.starts,
            "end": pd.DatetimeIndex(ends.values),
            "rows": counts.astype(np.int64),
            "mean_residual": mean_residual,
            "bias": np.where(scored, applied_sum / counts, np.nan),
            "ql": sq_sum / counts,
            "cql": np.where(scored, cal_sum / counts, np.nan),
            "scored": scored,
        }
    )
    return RollingCQL(
        table=table,
        cql=float(cal_sum[scored].sum() / n_scored),
        ql_scored=float(sq_sum[scored].sum() / n_scored),
        ql_all=float(sq_sum.sum() / n),
        n_scored=n_scored,
        n_all=n,
        period=periods.rule,
        bias=bias,
        bias_window=None if bias_window is None else int(bias_window),
    )


def _instrument_codes(instruments: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes ``0..m-1`` per row and the ``m`` distinct instrument ids (first-seen order)."""
    inst = np.asarray(instruments)
    if inst.ndim != 1 or len(inst) != n:
        raise ValueError(f"mismatched lengths: instruments has shape {inst.shape}, predictions has {n}; expected ({n},)")
    codes, uniques = pd.factorize(inst, use_na_sentinel=True)
    if (codes < 0).any():
        first = int(np.flatnonzero(codes < 0)[0])
        raise ValueError(f"instruments: expected an id on every row, found a missing value at position {first}")
    return codes.astype(np.int64), np.asarray(uniques)


def _previous_period_sources(
    codes: np.ndarray, inst_codes: np.ndarray, residual: np.ndarray, *, k: int, m: int, previous: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Residual sums and counts of the period before each period, per instrument column: two (k, m) arrays."""
    cell = codes * m + inst_codes
    cell_n = np.bincount(cell, minlength=k * m).reshape(k, m)
    cell_sum = np.bincount(cell, weights=residual, minlength=k * m).reshape(k, m)
    has_prev = (previous >= 0)[:, None]
    safe = np.maximum(previous, 0)
    return np.where(has_prev, cell_sum[safe], 0.0), np.where(has_prev, cell_n[safe], 0)


def _window_sources(
    ts: np.ndarray, starts: pd.DatetimeIndex, inst_codes: np.ndarray, residual: np.ndarray, *, m: int, days: int
) -> tuple[np.ndarray, np.ndarray]:
    """Residual sums and counts over the ``days`` trading days (dates present in the data) before each
    period's first date, per instrument column: two (k, m) arrays (fewer days where history is shorter)."""
    day = _day_numbers(ts)
    lo = int(day.min())
    offset = day - lo
    present = np.bincount(offset) > 0
    rank = (np.cumsum(present) - 1)[offset]
    n_days = int(present.sum())
    present_days = np.flatnonzero(present) + lo
    cell = rank * m + inst_codes
    # one zero row at the end so every reduceat index is valid
    day_n = np.vstack([np.bincount(cell, minlength=n_days * m).reshape(n_days, m), np.zeros((1, m), np.int64)])
    day_sum = np.vstack([np.bincount(cell, weights=residual, minlength=n_days * m).reshape(n_days, m), np.zeros((1, m))])
    first = np.searchsorted(present_days, starts.values.astype("datetime64[D]").astype(np.int64), side="left")
    begin = np.maximum(first - days, 0)
    bounds = np.column_stack([begin, first]).ravel()
    empty = (begin == first)[:, None]
    # reduceat sums rows begin:first for every (begin, first) pair; empty windows are zeroed
    window_sum = np.where(empty, 0.0, np.add.reduceat(day_sum, bounds, axis=0)[::2])
    window_n = np.where(empty, 0, np.add.reduceat(day_n, bounds, axis=0)[::2])
    return window_sum, window_n


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
    """Logit shift ``c*`` of the calibrated log loss (METHOD 2.3).

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
    """Calibrated log loss (METHOD 2.3).

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
    """Normalized cross-entropy (METHOD 2.5).

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
    """Temperature ``T > 0`` minimising the NLL of ``softmax(z / T)`` (METHOD 2.4).

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
