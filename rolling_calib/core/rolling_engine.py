"""The streaming engine behind :func:`rolling_calib.core.metrics.rolling_calibrated_quadratic_loss`.

How the rolling metric is computed: every period rule (months, weeks, quarters, N trading
days) and every bias source (the previous period, the N trading days before a period, or each
window's validation predictions) is a union of whole dates. So one blocked pass over the rows
collects, per date present and instrument column, the rows ``n``, the residual sum ``S`` and the
centred sum of squares ``M2 = sum (r - S/n)^2`` (``r = y - p``), and the last timestamp of each
date. Everything else is arithmetic on these small tables: cells are merged with Chan et al.'s
update ``M2 = M2_a + M2_b + n_a n_b / n (mean_a - mean_b)^2`` and a period cell shifted by a bias
``c`` scores ``sum (r - c)^2 = M2 + n (mean - c)^2``, a sum of non-negative terms (no
cancellation, unlike ``sum r^2 - 2 c sum r + n c^2``). The pass holds a few block-sized
temporaries and nothing per row.

Timestamps are read as integer clock ticks without a copy: ``datetime64`` arrays of any unit
that divides a day (days, hours, minutes, seconds, ms, us, ns, and multiples such as 5 minutes),
and pandas datetime Series / indexes (time-zone-aware ones by their local date). Other input goes
through :class:`pandas.DatetimeIndex` once.

Everything here is private to :mod:`rolling_calib.core.metrics` except :func:`rolling_scores`
and its result :class:`RollingScores`.

Example
-------
>>> import numpy as np
>>> from rolling_calib.core.calibration import Calibration
>>> days = np.array(["2015-01-05", "2015-01-06", "2015-02-02", "2015-02-03"], dtype="datetime64[m]")
>>> s = rolling_scores(np.zeros(4), np.array([1.0, 1, 1, 2]), days, calibration=Calibration())
>>> s.cql, s.rule, list(s.table["bias"].round(3).fillna(-1))
(0.5, 'month', [-1.0, 1.0])
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rolling_calib.core.array_checks import as_float_1d, check_lengths, plain
from rolling_calib.core.calibration import Calibration

__all__ = ["RollingScores", "rolling_scores"]


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


_NAT = int(np.iinfo(np.int64).min)
#: Clock ticks per day of the datetime64 units read as they are (a multiple such as ``[5m]`` divides these).
_TICKS_PER_DAY = {"D": 1, "h": 24, "m": 1_440, "s": 86_400, "ms": 86_400 * 10**3, "us": 86_400 * 10**6,
                  "ns": 86_400 * 10**9}
_NS_PER_DAY = _TICKS_PER_DAY["ns"]
#: Rows per block of the aggregation pass (its temporaries stay in cache).
_BLOCK = 1 << 18
#: Integer instrument ids spanning at most this many values are used as columns directly.
_MAX_DENSE_IDS = 1 << 16
#: Calendar days x instruments above which (and above 4 cells a row) the dates present are numbered first.
_MAX_DENSE_CELLS = 1 << 22


@dataclass(frozen=True)
class _Clock:
    """Timestamps as int64 ``ticks`` (``per_day`` to a day; a view of the input): wall-clock time, or UTC with ``tz``.

    ``unit`` is the numpy unit of a tick (``'ns'``, ``'m'``, ``'5m'``); ``day_lo``/``day_hi`` bound the
    day numbers (days since 1970-01-01) of the wall-clock dates.
    """

    ticks: np.ndarray
    unit: str
    per_day: int
    tz: Any
    day_lo: int
    day_hi: int

    def wall(self, start: int, stop: int) -> np.ndarray:
        """Wall-clock ticks of rows ``start:stop`` (a view of the input when there is no time zone)."""
        block = self.ticks[start:stop]
        if self.tz is None:
            return block
        local = pd.DatetimeIndex(block.view(f"datetime64[{self.unit}]")).tz_localize("UTC").tz_convert(self.tz)
        return np.asarray(local.tz_localize(None).asi8)

    def to_ns(self, ticks: np.ndarray) -> np.ndarray:
        """Ticks of this clock as datetime64[ns]."""
        return (ticks * (_NS_PER_DAY // self.per_day)).view("datetime64[ns]")


def _numpy_ticks(values: np.ndarray) -> tuple[np.ndarray, str, int]:
    """``(ticks, unit, ticks per day)`` of a 1-D datetime64 array: a view when its unit divides a day.

    Units that do not (weeks, months, years, odd multiples) are converted to nanoseconds by numpy
    (one pass, no pandas).

    >>> t = np.array(["2018-01-02T09:30", "2018-01-02T09:31"], dtype="datetime64[m]")
    >>> ticks, unit, per_day = _numpy_ticks(t)
    >>> ticks.base is not None, unit, per_day
    (True, 'm', 1440)
    >>> _numpy_ticks(np.array(["2018-01"], dtype="datetime64[M]"))[1:]
    ('ns', 86400000000000)
    """
    unit, count = np.datetime_data(values.dtype)
    ticks = _TICKS_PER_DAY.get(unit)
    if ticks is not None and ticks % count == 0:
        return values.view(np.int64), unit if count == 1 else f"{count}{unit}", ticks // count
    return values.astype("datetime64[ns]").view(np.int64), "ns", _NS_PER_DAY


def _clock(values: Any, n: int) -> _Clock:
    """Read ``timestamps`` without copying datetime64 arrays (any unit dividing a day), Series and indexes."""
    tz = None
    if isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype.kind == "M":
        ticks, unit, per_day = _numpy_ticks(values)
    elif isinstance(values, (pd.Series, pd.Index)) and values.dtype.kind == "M" and values.array.unit in _TICKS_PER_DAY:
        array = values.array
        ticks, unit, per_day, tz = np.asarray(array.asi8), array.unit, _TICKS_PER_DAY[array.unit], array.tz
    else:
        ticks, unit, per_day = _as_timestamps(values, n).view(np.int64), "ns", _NS_PER_DAY
    if len(ticks) != n:
        raise ValueError(f"mismatched lengths: timestamps has {len(ticks)}, predictions has {n}; expected all equal")
    lo = int(ticks.min())
    if lo == _NAT:
        first = int(np.flatnonzero(ticks == _NAT)[0])
        raise ValueError(f"timestamps: expected datetimes, found NaT at position {first}")
    day_lo, day_hi = lo // per_day, int(ticks.max()) // per_day
    if tz is not None:  # UTC ticks: the local date is at most one day either side
        day_lo, day_hi = day_lo - 1, day_hi + 1
    return _Clock(ticks=ticks, unit=unit, per_day=per_day, tz=tz, day_lo=day_lo, day_hi=day_hi)


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


@dataclass(frozen=True)
class RollingScores:
    """What :func:`rolling_scores` computes (:class:`~rolling_calib.core.metrics.RollingCQL` without its rule).

    ``table`` has one row per period (see ``RollingCQL``); ``rule`` names the period rule
    (``'month'``, ``'20 trading days'``); the ``*_refit_first`` / ``*_rest`` parts split the scored
    rows by whether their period opens a window (NaN, 0 when a part is empty).
    """

    table: pd.DataFrame
    cql: float
    ql_scored: float
    ql_all: float
    n_scored: int
    n_all: int
    rule: str
    cql_refit_first: float = math.nan
    ql_refit_first: float = math.nan
    n_refit_first: int = 0
    cql_rest: float = math.nan
    ql_rest: float = math.nan
    n_rest: int = 0
    days: pd.DataFrame | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class _Validation:
    """The validation-segment predictions of ``source='validation'`` (arrays of shape ``(n_v,)``)."""

    predictions: Any = None
    labels: Any = None
    windows: Any = None
    instruments: Any = None


def rolling_scores(p: np.ndarray, y: np.ndarray, timestamps: Any, *, calibration: Calibration,
                   instruments: Any = None, score_periods: Iterable[str | int] | None = None, windows: Any = None,
                   valid_predictions: Any = None, valid_labels: Any = None, valid_windows: Any = None,
                   valid_instruments: Any = None) -> RollingScores:
    """QL and rolling CQL of finite 1-D ``p``, ``y`` of equal length under ``calibration`` (see the module doc).

    The arguments are those of :func:`~rolling_calib.core.metrics.rolling_calibrated_quadratic_loss`
    (which checks ``p`` and ``y`` and documents the rest).
    """
    cal = calibration
    n = len(p)
    clock = _clock(timestamps, n)
    columns = None
    if cal.bias == "per_instrument":
        if instruments is None:
            raise ValueError("instruments: required when bias='per_instrument', found None")
        columns = _instrument_columns(instruments, n)
    table = _day_table(p, y, clock, columns)
    periods = _assign_periods(table.days, cal.period)
    scored = _scored_periods(periods, score_periods, first_too=cal.source == "validation")
    cells = _period_cells(table, periods)
    date_window = window_names = None
    if windows is not None:
        date_window, window_names = _date_windows(windows, clock, table)
    elif cal.source == "validation":
        raise ValueError("windows: required when source='validation' (the window of every row), found None")
    if cal.source == "validation":
        valid = _validation_bias(table, columns, window_names,  # type: ignore[arg-type]
                                 _Validation(valid_predictions, valid_labels, valid_windows, valid_instruments),
                                 bias=cal.bias)
        *sums, date_bias = _validation_sums(periods, scored, table, date_window, window_names, valid,  # type: ignore[arg-type]
                                            columns, missing_instrument=cal.missing_instrument)
    else:
        bias_table = _fit_bias_table(periods, scored, table, cells, columns, bias=cal.bias,
                                     bias_window=cal.bias_window, missing_instrument=cal.missing_instrument)
        sums = _shifted_sums(scored, cells, bias_table)
        used = scored[periods.codes][:, None] & (table.n > 0)
        date_bias = np.where(used, bias_table[periods.codes], np.nan)
    refit = np.zeros(len(periods.labels), dtype=bool)
    if date_window is not None:
        starts = np.flatnonzero(np.r_[True, date_window[1:] != date_window[:-1]])
        refit[periods.codes[starts]] = True
    result = _score_periods(periods, scored, table, cells, tuple(sums), refit)  # type: ignore[arg-type]
    return dataclasses.replace(result, days=_day_scores(table, periods, scored, date_bias))


def _day_scores(table: _DayTable, periods: _Periods, scored: np.ndarray, date_bias: np.ndarray) -> pd.DataFrame:
    """Per date present: rows, ``sum (y - p)^2``, ``sum (y - p - c)^2`` (NaN when unscored) and ``sum (y - p)``.

    The same cell identity as the periods' (``sum (r - c)^2 = M2 + n (mean - c)^2``) per date, so the
    days of a period add up to its sums (to float rounding); the verdicts resample these days.
    """
    mean = table.total / np.maximum(table.n, 1)
    sq = (table.m2 + table.n * mean * mean).sum(axis=1)
    used = np.isfinite(date_bias)
    shift = np.where(used, mean - np.where(used, date_bias, 0.0), 0.0)
    cal = np.where(used, table.m2 + table.n * shift * shift, 0.0).sum(axis=1)
    date_scored = scored[periods.codes]
    return pd.DataFrame({
        "date": table.days.astype("datetime64[D]"),
        "period": np.asarray(periods.labels, dtype=object)[periods.codes],
        "rows": table.n.sum(axis=1).astype(np.int64),
        "sse_ql": sq,
        "sse_cql": np.where(date_scored, cal, np.nan),
        "residual_sum": table.total.sum(axis=1),
    })


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
            f"{plain(names[date_window[d]])!r} and {plain(names[seg_code[k]])!r}; expected every date in one window"
        )
    return date_window, np.asarray(names)


@dataclass(frozen=True)
class _ValidSums:
    """Validation residual sums and counts per window (rows) and table column: (W, m), and pooled (W,)."""

    total: np.ndarray
    n: np.ndarray
    pooled_total: np.ndarray
    pooled_n: np.ndarray


def _validation_bias(table: _DayTable, columns: _Columns | None, window_names: np.ndarray, valid: _Validation,
                     *, bias: str) -> _ValidSums:
    """Residual sums of the validation rows per window (and instrument column of the test table)."""
    predictions, labels, windows, instruments = valid.predictions, valid.labels, valid.windows, valid.instruments
    if predictions is None or labels is None or windows is None:
        raise ValueError("valid_predictions, valid_labels, valid_windows: required when source='validation' "
                         "(each window's validation predictions), found None")
    vp = as_float_1d("valid_predictions", predictions)
    vy = as_float_1d("valid_labels", labels)
    nv = check_lengths(valid_predictions=vp, valid_labels=vy)
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
                     *, missing_instrument: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per period: ``sum (r - c_w)^2`` and ``sum c_w`` over the scored rows, ``c_w`` from the row's window;
    and the bias of every date and column, ``(d, m)``, NaN where no scored row uses one."""
    date_scored = scored[periods.codes]
    used = date_scored[:, None] & (table.n > 0)
    src_n = valid.n[date_window]                       # (d, m)
    unfit = date_scored & (valid.pooled_n[date_window] == 0)
    if unfit.any():
        d = int(np.flatnonzero(unfit)[0])
        raise ValueError(
            f"valid_predictions: window {plain(window_names[date_window[d]])!r} has rows in scored period "
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
                f"instruments: instrument {plain(columns.names[table.columns[jj]])!r} has rows in scored period "  # type: ignore[union-attr]
                f"{periods.labels[periods.codes[d]]} but window {plain(window_names[date_window[d]])!r} has no "
                f"validation predictions of it, so no per-instrument bias can be fitted ({int(missing.sum())} such "
                f"date-instrument cell(s)); pass missing_instrument='pooled' to use the pooled bias there"
            )
        bias_d = np.where(missing, pooled_d[:, None], bias_d)
    mean = table.total / np.maximum(table.n, 1)
    shift = np.where(used, mean - bias_d, 0.0)
    cal = np.where(used, table.m2 + table.n * shift * shift, 0.0).sum(axis=1)
    applied = np.where(used, table.n * bias_d, 0.0).sum(axis=1)
    first = periods.first
    return np.add.reduceat(cal, first), np.add.reduceat(applied, first), np.where(used, bias_d, np.nan)


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
            f"instruments: instrument {plain(columns.names[table.columns[jj]])!r} has rows in scored period "
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
    sums: tuple[np.ndarray, np.ndarray], refit: np.ndarray,
) -> RollingScores:
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
    return RollingScores(
        table=table_out,
        cql=float(cal_sum[scored].sum() / n_scored),
        ql_scored=float(sq_sum[scored].sum() / n_scored),
        ql_all=float(sq_sum.sum() / n),
        n_scored=n_scored,
        n_all=n,
        rule=periods.rule,
        cql_refit_first=first_cql,
        ql_refit_first=first_ql,
        n_refit_first=first_n,
        cql_rest=rest_cql,
        ql_rest=rest_ql,
        n_rest=rest_n,
    )
