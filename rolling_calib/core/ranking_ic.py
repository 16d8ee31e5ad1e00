"""Information coefficients of one run: IC, ICIR and Rank IC (pure NumPy / pandas).

For every test date ``t`` (a bar: a session of a daily store, a minute of a minute store)
with instruments ``i = 1..n_t``, predictions ``p_ti`` and labels ``y_ti``::

    IC_t      = corr(p_t., y_t.)                    Pearson, across instruments
    RankIC_t  = corr(rank(p_t.), rank(y_t.))        Spearman (average ranks for ties)
    IC        = mean_t IC_t
    ICIR      = mean_t IC_t / std_t IC_t            (std with ddof=1)
    Rank IC   = mean_t RankIC_t

Dates with fewer than 2 instruments or a constant prediction or label (an undefined
correlation) are left out of the means; rows with a non-finite value (or no date) are
dropped first. Higher is better for all three, unlike the losses QL and CQL.

Rows are grouped by date where the dates change when they are in order (as units are
written: by datetime, then instrument), else through a sort of the date codes. Sums per
date run over a (dates, instruments) view when every date has as many rows, else over
``np.add.reduceat`` segments; ranks come from a row-wise argsort of that matrix (padded
with +inf for dates of different sizes), a block of dates at a time. A run's Rank IC takes
the label ranks in the order that sorts its predictions (whose ranks are then the fixed
``1..n``), so its ranks are never put back in row order; ranks are half-integers, so the
sums are exact and the values the same as ranking both sides in row order. The label side
(grouping, per-date label moments, label ranks) depends on the labels and dates only:
:func:`prepare_labels` computes it once for all runs that share them (the seeds of a
pipeline), :func:`information_coefficients_arrays` adds one run's predictions.

Example
-------
>>> import pandas as pd
>>> frame = pd.DataFrame({
...     "datetime": pd.to_datetime(["2020-01-02"] * 3 + ["2020-01-03"] * 3),
...     "prediction": [0.1, 0.2, 0.3, 0.3, 0.1, 0.2],
...     "label": [1.0, 2.0, 4.0, 1.0, 3.0, 2.0]})
>>> s = information_coefficients(frame)
>>> round(s.ic, 4), round(s.rank_ic, 4), s.n_dates
(-0.009, 0.0, 2)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["DailyIC", "ICSummary", "PreparedLabels", "daily_ic", "daily_information_coefficients",
           "information_coefficients", "information_coefficients_arrays", "prepare_labels"]


@dataclass(frozen=True)
class ICSummary:
    """IC, ICIR and Rank IC of one run, and the number of dates they average over."""

    ic: float
    icir: float
    rank_ic: float
    n_dates: int

    def to_dict(self) -> dict[str, float | int]:
        """``{"ic", "icir", "rank_ic", "ic_dates"}`` (the columns of a runs table)."""
        return {"ic": self.ic, "icir": self.icir, "rank_ic": self.rank_ic, "ic_dates": self.n_dates}


class _Groups:
    """Rows in date order: date ``g`` is the rows ``starts[g] .. starts[g] + counts[g] - 1``.

    When every date has the same number of rows (``width``), sums run over the rows of a
    (dates, width) view; otherwise over ``np.add.reduceat`` segments.
    """

    __slots__ = ("counts", "n", "starts", "width")

    def __init__(self, starts: np.ndarray, n: int) -> None:
        self.starts = starts
        self.n = n
        self.counts = np.diff(np.append(starts, n))
        c = self.counts
        self.width = int(c[0]) if c.size and (c == c[0]).all() else 0

    def __len__(self) -> int:
        return len(self.starts)

    def sum(self, v: np.ndarray) -> np.ndarray:
        if self.width:
            return v.reshape(-1, self.width).sum(axis=1)
        return np.add.reduceat(v, self.starts)

    def dot(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Per date ``sum(a * b)``."""
        if self.width:
            return np.einsum("ij,ij->i", a.reshape(-1, self.width), b.reshape(-1, self.width))
        return np.add.reduceat(a * b, self.starts)

    def centred(self, v: np.ndarray, mean: np.ndarray) -> np.ndarray:
        """``v`` minus the mean of its date."""
        if self.width:
            return (v.reshape(-1, self.width) - mean[:, None]).ravel()
        return v - np.repeat(mean, self.counts)


@dataclass(frozen=True)
class _Side:
    """One variable of the correlations: its values centred per date, their sum of squares, undefined dates."""

    centred: np.ndarray
    ss: np.ndarray
    constant: np.ndarray   # bool per date: fewer than 2 rows, or a spread below _TINY of its scale


_TINY = 1e-12
#: Dates of a (dates, instruments) matrix are ranked and centred a block at a time: about this many values
#: (a few hundred KiB per temporary, so the scratch arrays stay in cache and reuse the same memory).
_RANK_BLOCK = 1 << 15


def _side(v: np.ndarray, g: _Groups) -> _Side:
    """Centre ``v`` (finite, rows in date order) per date: ``IC_t`` is ``dot(dx, dy) / sqrt(sxx * syy)``.

    A date is constant when its sum of squares is at most ``(1e-12 * mean |v|)^2 * count``;
    that test needs the mean ``|v|`` only of dates under the bound ``max |v|`` gives.
    """
    count = g.counts
    mean = g.sum(v) / count
    d = g.centred(v, mean)
    ss = g.dot(d, d)
    return _Side(d, ss, _constant_dates(v, g, ss))


def _constant_dates(v: np.ndarray, g: _Groups, ss: np.ndarray) -> np.ndarray:
    """Bool per date: fewer than 2 rows, or the sum of squares ``ss`` at most ``(1e-12 * mean |v|)^2 * count``."""
    count = g.counts
    constant = count < 2
    if v.size:
        big = max(float(v.max()), -float(v.min()))
        near = np.flatnonzero(ss <= (_TINY * big * (1.0 + 1e-6)) ** 2 * count)
        if near.size:  # rare: the exact test on those dates
            scale = g.sum(np.abs(v))[near] / count[near]
            constant[near] |= ss[near] <= (_TINY * scale) ** 2 * count[near]
    return constant


def _correlation(x: _Side, y: _Side, g: _Groups) -> np.ndarray:
    """Pearson correlation per date (NaN where undefined)."""
    return _clipped(g.dot(x.centred, y.centred), x.ss, x.constant, y.ss, y.constant)


def _clipped(dot: np.ndarray, ss: np.ndarray, constant: np.ndarray, y_ss: np.ndarray, y_constant: np.ndarray
             ) -> np.ndarray:
    """``dot / sqrt(ss * y_ss)``, NaN on the dates where either side is constant, clipped to [-1, 1]."""
    with np.errstate(invalid="ignore", divide="ignore"):
        r = dot / np.sqrt(ss * y_ss)
    r[constant | y_constant] = np.nan
    return np.clip(r, -1.0, 1.0)


def _block_rows(g: _Groups) -> int:
    """Dates per block of a (dates, width) matrix: about :data:`_RANK_BLOCK` values."""
    return max(1, _RANK_BLOCK // max(g.width, 1))


def _block_ss(v: np.ndarray, mean: np.ndarray, g: _Groups) -> np.ndarray:
    """Per date ``sum((v - mean)^2)`` of an equal-width grouping, a block of dates at a time (``g.dot`` of the
    centred values, without keeping them)."""
    rows, width = len(g), g.width
    vm, ss, step = v.reshape(rows, width), np.empty(rows), _block_rows(g)
    for lo in range(0, rows, step):
        d = vm[lo:lo + step] - mean[lo:lo + step, None]
        ss[lo:lo + step] = np.einsum("ij,ij->i", d, d)
    return ss


def _pearson(x: np.ndarray, labels: PreparedLabels) -> np.ndarray:
    """``_correlation(_side(x, g), _side(label, g), g)`` without keeping centred copies (the same numbers).

    When every date has as many rows, ``x`` and the labels are centred a block of dates at a time
    (:data:`_RANK_BLOCK` values) and each block's sums of squares and products taken there: the
    same per-date operations in the same order, on cache-sized scratch. The labels' per-date
    means, sums of squares and constant dates are computed once (:attr:`PreparedLabels.moments`),
    in the first run's pass over the blocks.
    """
    g = labels.groups
    if not g.width:
        return _correlation(_side(x, g), labels.value, g)
    rows, width = len(g), g.width
    known = labels._moments   # None: the labels' first run takes their moments in the same pass
    y = labels.grouped
    y_mean, y_ss = (g.sum(y) / g.counts, np.empty(rows)) if known is None else known[:2]
    mean = g.sum(x) / g.counts
    xm, ym = x.reshape(rows, width), y.reshape(rows, width)
    ss, dot, step = np.empty(rows), np.empty(rows), _block_rows(g)
    for lo in range(0, rows, step):
        hi = min(lo + step, rows)
        d = xm[lo:hi] - mean[lo:hi, None]
        ss[lo:hi] = np.einsum("ij,ij->i", d, d)
        dy = ym[lo:hi] - y_mean[lo:hi, None]
        if known is None:
            y_ss[lo:hi] = np.einsum("ij,ij->i", dy, dy)   # what _block_ss computes, on the same blocks
        dot[lo:hi] = np.einsum("ij,ij->i", d, dy)
    if known is None:
        known = labels._moments = (y_mean, y_ss, _constant_dates(y, g, y_ss))
    return _clipped(dot, ss, _constant_dates(x, g, ss), known[1], known[2])


def _tie_average(tie: np.ndarray) -> np.ndarray:
    """Average 1-based ranks of sorted rows from ``tie[:, j]`` = (entry ``j + 1`` equals entry ``j``)."""
    k, width = tie.shape[0], tie.shape[1] + 1
    pos = np.arange(width)
    opens = np.ones((k, width), dtype=bool)
    opens[:, 1:] = ~tie
    closes = np.ones((k, width), dtype=bool)
    closes[:, :-1] = ~tie
    first = np.maximum.accumulate(np.where(opens, pos, 0), axis=1)
    last = np.minimum.accumulate(np.where(closes, pos, width - 1)[:, ::-1], axis=1)[:, ::-1]
    return (first + last) / 2.0 + 1.0


#: Low bits of a packed sort key that carry the column (:func:`_row_order`): rows up to 32 wide.
_COLUMN_BITS = 5
_POSITIVE_BITS = np.int64(0x7FFF_FFFF_FFFF_FFFF)


def _row_order(block: np.ndarray, *, scratch: tuple[np.ndarray, np.ndarray] | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ascending order and its sorted values: ``(at, s)``, ``at`` flat positions in ``block``.

    ``np.argsort`` along short rows sorts them one at a time; ``np.sort`` of int64 rows runs vectorised
    (2.8 against 7.5 ms for 24,000 rows of 25 here). So each value becomes an int64 key that orders
    as the value does -- its IEEE bits, the non-sign bits flipped when negative -- and the key's low
    :data:`_COLUMN_BITS` bits are replaced by the column, so that one integer sort yields the order.
    Dropping those bits can only put values that differ in their last 5 bits (a relative 7e-15
    apart) in the order of their columns: every row is checked ascending on the values themselves
    and the rows that are not are argsorted. The result is a sorted order of every
    row, as ``np.argsort`` gives (the same average ranks; among equal values the order may differ).
    Finite values and +inf (padding), as the rankers hold. ``scratch``: two int64 arrays of at least
    ``block``'s shape that ``at`` and ``s`` are written into (fresh memory costs its page faults, as
    much as the sort).

    >>> b = np.array([[3.0, -0.0, 0.0, -1.5], [2.0, np.nextafter(2.0, 3.0), 2.0, 1.0]])
    >>> at, s = _row_order(b)      # the second row: one ulp apart, put right by the check
    >>> s.tolist()
    [[-1.5, -0.0, 0.0, 3.0], [1.0, 2.0, 2.0, 2.0000000000000004]]
    >>> bool((np.take(b, at) == s).all())
    True
    """
    rows, width = block.shape
    offsets = (np.arange(rows) * width)[:, None]
    if width > 1 << _COLUMN_BITS:
        at = np.argsort(block, axis=1) + offsets
        return at, np.take(block, at)
    if scratch is None:
        scratch = (np.empty(block.shape, np.int64), np.empty(block.shape, np.int64))
    key, tmp = (a.reshape(-1)[:block.size].reshape(block.shape) for a in scratch)
    np.copyto(key.view(np.float64), block)      # (-0.0 keys below +0.0: an order of equal values, which is fine)
    np.right_shift(key, 63, out=tmp)
    np.bitwise_and(tmp, _POSITIVE_BITS, out=tmp)
    np.bitwise_xor(key, tmp, out=key)                   # negatives: every bit but the sign flipped
    np.bitwise_and(key, ~np.int64((1 << _COLUMN_BITS) - 1), out=key)
    np.bitwise_or(key, np.arange(width, dtype=np.int64), out=key)
    key.sort(axis=1)
    np.bitwise_and(key, (1 << _COLUMN_BITS) - 1, out=key)
    np.add(key, offsets, out=key)
    s = np.take(block, key, out=tmp.view(np.float64), mode="clip")   # (in range: "clip" only skips a copy)
    descending = s[:, 1:] < s[:, :-1]
    if descending.any():
        bad = np.flatnonzero(descending.any(axis=1))
        key[bad] = np.argsort(block[bad], axis=1) + offsets[bad]
        s[bad] = np.take(block, key[bad])
    return key, s


def _sorted_blocks(m: np.ndarray, counts: np.ndarray | None):
    """Per block of rows of ``m``: ``(lo, hi, at, s, tie)``.

    ``at`` holds the block's flat positions of each row's values in ascending order
    (:func:`_row_order`), ``s`` those values, ``tie[:, j]`` whether entry ``j + 1`` of a sorted row
    equals entry ``j`` (padding, past ``counts``, ties nothing). ``at`` and ``s`` are scratch that the
    next block overwrites.
    """
    rows, width = m.shape
    step = max(1, _RANK_BLOCK // max(width, 1))
    scratch = (np.empty((min(step, rows), width), np.int64), np.empty((min(step, rows), width), np.int64))
    for lo in range(0, rows, step):
        hi = min(lo + step, rows)
        block = m[lo:hi]
        at, s = _row_order(block, scratch=scratch)   # (written into scratch: used before the next block)
        tie = s[:, 1:] == s[:, :-1]
        if counts is not None:
            tie &= np.arange(1, width) < counts[lo:hi, None]
        yield lo, hi, at, s, tie


def _tied_rows(tie: np.ndarray) -> np.ndarray:
    return np.flatnonzero(tie.any(axis=1)) if tie.any() else np.empty(0, dtype=np.int64)


def _row_ranks(m: np.ndarray, counts: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Centred average ranks within each row of ``m`` and the rows with ties.

    Row ``g`` holds ``counts[g]`` values then +inf padding (``counts`` None: no padding); a
    value's rank (1-based, ties share their mean) less the row's mean rank ``(count + 1) / 2``.
    Rows are ranked a block at a time (:data:`_RANK_BLOCK`).
    """
    rows, width = m.shape
    step = np.arange(1.0, width + 1.0)
    half = np.full(rows, (width + 1) / 2.0) if counts is None else (counts + 1) / 2.0
    out = np.empty(m.shape)
    tied_all = []
    same = np.tile(step - half[0], max(1, _RANK_BLOCK // max(width, 1))) if counts is None else None
    for lo, hi, at, _, tie in _sorted_blocks(m, counts):
        flat = out[lo:hi].reshape(-1)
        at_flat = at.reshape(-1)   # (a 1-d index and 1-d values: twice as fast as broadcasting one row)
        flat[at_flat] = same[:at_flat.size] if same is not None else (step - half[lo:hi, None]).reshape(-1)
        tied = _tied_rows(tie)
        if tied.size:
            flat[at[tied]] = _tie_average(tie[tied]) - half[lo + tied, None]
            tied_all.append(tied + lo)
    return out, (np.concatenate(tied_all) if tied_all else np.empty(0, dtype=np.int64))


def _rank_side(v: np.ndarray, g: _Groups) -> _Side:
    """:func:`_side` of the within-date average ranks of ``v`` (finite, rows in date order).

    The ranks of a date of ``n`` rows average ``(n + 1) / 2``; without ties their sum of
    squares about it is ``n (n^2 - 1) / 12``. Both are exact in floating point (ranks are
    half-integers), as the sums they replace are. Ranks come from a row-wise argsort of the
    (dates, instruments) matrix, padded with +inf when dates have different numbers of rows
    (unless padding would more than double it: then one lexsort).
    """
    count = g.counts
    half = (count + 1) / 2.0
    tied: np.ndarray | None = None
    if g.width:
        d, tied = _row_ranks(v.reshape(-1, g.width), None)
        d = d.reshape(-1)
    elif len(g) * int(count.max()) <= 2 * g.n + 4096:
        rows = np.repeat(np.arange(len(g)), count)
        cols = np.arange(g.n) - np.repeat(g.starts, count)
        padded = np.full((len(g), int(count.max())), np.inf)
        padded[rows, cols] = v
        d = _row_ranks(padded, count)[0][rows, cols]
    else:
        d = g.centred(_average_ranks_by_group(v, np.repeat(np.arange(len(g)), count)), half)
    if tied is None:
        ss = g.dot(d, d)
    else:
        c = count.astype(float)
        ss = c * (c * c - 1.0) / 12.0
        if tied.size:
            sub = d.reshape(-1, g.width)[tied]
            ss[tied] = np.einsum("ij,ij->i", sub, sub)
    constant = (count < 2) | (ss <= (_TINY * half) ** 2 * count)
    return _Side(d, ss, constant)


def _average_ranks_by_group(x: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """1-based average ranks of ``x`` within each group of ``codes`` (ties share their mean rank).

    One ``lexsort`` by (group, value); a tie run's rank is the mean of its first and last
    position in the group, ``(first + last) / 2 + 1``.
    """
    n = len(x)
    if n == 0:
        return np.empty(0)
    order = _group_value_order(x, codes)
    xs, cs = x[order], codes[order]
    new_group = np.empty(n, dtype=bool)
    new_group[0] = True
    np.not_equal(cs[1:], cs[:-1], out=new_group[1:])
    new_run = new_group.copy()
    new_run[1:] |= xs[1:] != xs[:-1]
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(n), 0))
    run_id = np.cumsum(new_run) - 1
    run_first = np.flatnonzero(new_run)
    run_last = np.append(run_first[1:], n) - 1
    run_rank = (run_first + run_last) / 2.0 - group_start[run_first] + 1.0
    ranks = np.empty(n)
    ranks[order] = run_rank[run_id]
    return ranks


def _group_value_order(x: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The permutation sorting rows by (group, value): ``np.lexsort((x, codes))``.

    Fast path for the common layout (rows grouped by date in order, every date with the same
    number of instruments): a row-wise argsort of the (dates, instruments) matrix.
    """
    n = len(x)
    counts = np.bincount(codes)
    m = int(counts[0]) if counts.size else 0
    if m and n == m * counts.size and (counts == m).all() and (np.diff(codes) >= 0).all():
        within = np.argsort(x.reshape(-1, m), axis=1, kind="stable")
        return (within + (np.arange(counts.size) * m)[:, None]).ravel()
    return np.lexsort((x, codes))


def _column(values: Any) -> np.ndarray:
    """A 1-d NumPy array of ``values`` (a Series or Index through ``to_numpy``)."""
    arr = values.to_numpy() if isinstance(values, (pd.Series, pd.Index)) else np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"expected a 1-d array, found shape {arr.shape}")
    return arr


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shapes, dtypes and values (NaN equal to NaN); a few leading values first."""
    if a is b:
        return True
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "mM":
        a, b = a.view(np.int64), b.view(np.int64)
    nan = a.dtype.kind in "fc"
    if not np.array_equal(a[:64], b[:64], equal_nan=nan):
        return False
    differ = a != b
    if not nan or not differ.any():
        return not differ.any()
    return bool(np.isnan(a[differ]).all() and np.isnan(b[differ]).all())


class PreparedLabels:
    """The label side of the correlations, computed once for every run that shares it.

    The runs of a store (every seed of a pipeline, usually every pipeline) predict the same
    labels on the same dates: their within-date grouping, centred labels and label ranks are
    the same. Build with :func:`prepare_labels`; :meth:`matches` says whether other arrays
    hold the same values (then the object can be reused for them).
    """

    def __init__(self, label: np.ndarray, dates: np.ndarray, keep: np.ndarray | None,
                 order: np.ndarray | None, groups: _Groups, uniques: np.ndarray) -> None:
        self.label, self.dates = label, dates
        self.keep, self.order = keep, order   # rows kept (None: all), their permutation into date order (None: in order)
        self.groups, self.uniques = groups, uniques
        self._grouped = self.aligned(label)
        self._value: _Side | None = None
        self._rank: _Side | None = None
        self._moments: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.label)

    def aligned(self, values: np.ndarray) -> np.ndarray:
        """``values`` (one per input row) restricted to the kept rows, in date order."""
        out = values if self.keep is None else values[self.keep]
        return out if self.order is None else out[self.order]

    @property
    def grouped(self) -> np.ndarray:
        """The kept labels in date order."""
        return self._grouped

    @property
    def moments(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per date (equal-width groupings): mean label, sum of squared deviations, constant flag.

        What :attr:`value` holds but the centred labels, which :func:`_pearson` recomputes a block at a time.
        """
        if self._moments is None:
            g, y = self.groups, self._grouped
            mean = g.sum(y) / g.counts
            ss = _block_ss(y, mean, g)
            self._moments = (mean, ss, _constant_dates(y, g, ss))
        return self._moments

    @property
    def value(self) -> _Side:
        if self._value is None:
            self._value = _side(self._grouped, self.groups)
        return self._value

    @property
    def rank(self) -> _Side:
        if self._rank is None:
            self._rank = _rank_side(self._grouped, self.groups)
        return self._rank

    def matches(self, label: Any, dates: Any) -> bool:
        """Whether ``label`` and ``dates`` hold the values these labels were prepared from."""
        y = _column(label)
        if y.dtype != np.float64:
            y = y.astype(float)
        return _same(self.label, y) and _same(self.dates, _column(dates))


def _date_layout(dates: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None, _Groups, np.ndarray]:
    """Rows kept (None: all; rows without a date leave too), their order by date, the groups and the dates.

    Sorted numeric or datetime64 dates (the order units are written in) are grouped at the
    places they change; others through ``pd.factorize`` and a stable sort of the codes.
    """
    kind = dates.dtype.kind
    if kind in "mM":
        keep &= ~np.isnat(dates)
    kept = dates if keep.all() else dates[keep]
    mask = None if kept is dates else keep
    if kind in "mMiub":
        key = kept.view(np.int64) if kind in "mM" else kept
        if (key[1:] >= key[:-1]).all():
            starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size else np.empty(0, dtype=np.int64)
            return mask, None, _Groups(starts, len(key)), kept[starts]
    codes, uniques = pd.factorize(kept, sort=True)
    if (codes < 0).any():   # a missing date: the row leaves
        inner = codes >= 0
        mask = np.flatnonzero(keep)[inner] if mask is not None else inner
        codes = codes[inner]
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]]) if codes.size else np.empty(0, dtype=np.int64)
    return mask, order, _Groups(starts, len(codes)), np.asarray(uniques)


def prepare_labels(label: Any, dates: Any, *, copy: bool = True) -> PreparedLabels:
    """The label side of :func:`information_coefficients_arrays`.

    Rows with a non-finite label or a missing date are left out. The labels and dates are
    kept for :meth:`PreparedLabels.matches`: copied, unless ``copy`` is False (the caller
    does not change the arrays afterwards).

    Examples
    --------
    >>> labels = prepare_labels([1.0, 2.0, np.nan, 3.0], np.array([5, 5, 5, 6]))
    >>> labels.uniques.tolist(), labels.groups.counts.tolist()
    ([5, 6], [2, 1])
    >>> labels.matches([1.0, 2.0, np.nan, 3.0], [5, 5, 5, 6])
    True
    """
    y = np.array(_column(label), dtype=float, copy=copy or None)
    d = _column(dates)
    d = d.copy() if copy else d
    if len(d) != len(y):
        raise ValueError(f"mismatched lengths: dates has {len(d)} rows, label has {len(y)}")
    keep, order, groups, uniques = _date_layout(d, np.isfinite(y))
    return PreparedLabels(y, d, keep, order, groups, uniques)


def _aligned_predictions(prediction: Any, labels: PreparedLabels) -> tuple[np.ndarray, PreparedLabels]:
    """The predictions on the labels' kept rows, in date order; rows with a non-finite prediction leave both."""
    p = _column(prediction).astype(float, copy=False)
    if len(p) != len(labels):
        raise ValueError(f"mismatched lengths: prediction has {len(p)} rows, label has {len(labels)}")
    x = labels.aligned(p)
    if not np.isfinite(x).all():
        labels = prepare_labels(np.where(np.isfinite(p), labels.label, np.nan), labels.dates, copy=False)
        x = labels.aligned(p)
    return x, labels


def _rank_correlation(x: np.ndarray, y: _Side, g: _Groups) -> tuple[np.ndarray, np.ndarray | None]:
    """Spearman correlation per date of ``x`` (finite, rows in date order) with the label ranks ``y``.

    The same values as ``_correlation(_rank_side(x, g), y, g)``, without putting ``x``'s ranks
    back in row order: after a row-wise argsort of ``x``'s (dates, instruments) matrix the
    ``k``-th smallest value of a date has rank ``k + 1`` (tie runs: their mean), so
    ``sum(rank_x * rank_y)`` is the label ranks gathered in ``x``'s sorted order times that
    fixed vector. Centred ranks are half-integers and their products and sums exact in
    floating point, in any order: the values are bit-identical. Dates of different sizes use
    the +inf padded matrix (padding ties nothing and meets a 0 label rank); when padding would
    more than double it, the general path.

    Also returns each date's range of ``x`` (its largest minus its smallest value, read off the
    sorted rows; ``None`` on the general path): what the constant-prediction guard measures.
    """
    count = g.counts
    if g.width:
        rows, width = len(g), g.width
        m, yd, counts = x.reshape(rows, width), y.centred.reshape(rows, width), None
    elif len(g) * int(count.max()) <= 2 * g.n + 4096:
        rows, width = len(g), int(count.max())
        at_row = np.repeat(np.arange(rows), count)
        at_col = np.arange(g.n) - np.repeat(g.starts, count)
        m = np.full((rows, width), np.inf)
        m[at_row, at_col] = x
        yd = np.zeros((rows, width))
        yd[at_row, at_col] = y.centred
        counts = count
    else:
        return _correlation(_rank_side(x, g), y, g), None
    half = (count + 1) / 2.0
    c = count.astype(float)
    ss = c * (c * c - 1.0) / 12.0             # sum of squared centred ranks without ties
    dot = np.empty(rows)
    spread = np.empty(rows)
    last = None if counts is None else counts - 1   # the last real value of a padded row
    step = np.arange(1.0, width + 1.0)
    for lo, hi, at, s, tie in _sorted_blocks(m, counts):
        top = s[:, -1] if last is None else s[np.arange(hi - lo), last[lo:hi]]
        np.subtract(top, s[:, 0], out=spread[lo:hi])
        ys = np.take(yd[lo:hi], at, out=s)    # the label ranks in x's sorted order
        if counts is None:
            dot[lo:hi] = np.einsum("ij,j->i", ys, step - half[0])   # (a BLAS matvec is slower here)
        else:
            dot[lo:hi] = np.einsum("ij,ij->i", ys, step - half[lo:hi, None])
        tied = _tied_rows(tie)
        if tied.size:
            ranks = _tie_average(tie[tied]) - half[lo + tied, None]
            if counts is not None:
                ranks[np.arange(width) >= counts[lo + tied, None]] = 0.0
            dot[lo + tied] = np.einsum("ij,ij->i", ranks, ys[tied])
            ss[lo + tied] = np.einsum("ij,ij->i", ranks, ranks)
    return _clipped(dot, ss, (count < 2) | (ss <= (_TINY * half) ** 2 * count), y.ss, y.constant), spread


def _daily_values(x: np.ndarray, labels: PreparedLabels, method: str) -> np.ndarray:
    g = labels.groups
    if not len(g):
        return np.empty(0)
    if method == "spearman":
        return _rank_correlation(x, labels.rank, g)[0]
    return _pearson(x, labels)


def _frame_columns(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    missing = [c for c in ("datetime", "prediction", "label") if c not in frame.columns]
    if missing:
        raise ValueError(f"frame: expected columns datetime, prediction, label; missing {', '.join(missing)}")
    return (frame["prediction"].to_numpy(dtype=float), frame["label"].to_numpy(dtype=float),
            frame["datetime"].to_numpy())


def daily_ic(frame: pd.DataFrame, *, method: str = "pearson") -> pd.Series:
    """Cross-sectional correlation of ``prediction`` and ``label`` per ``datetime``.

    Parameters
    ----------
    frame : DataFrame
        Columns ``datetime``, ``prediction``, ``label`` (one row per date and instrument).
    method : {"pearson", "spearman"}
        ``"spearman"`` correlates the within-date average ranks.

    Returns
    -------
    Series
        Indexed by date, sorted; NaN where the correlation is undefined.

    Examples
    --------
    >>> f = pd.DataFrame({"datetime": [1, 1, 1, 2, 2], "prediction": [1.0, 2, 3, 5, 5],
    ...                   "label": [3.0, 2, 1, 0, 1]})
    >>> daily_ic(f).tolist()
    [-1.0, nan]
    """
    if method not in ("pearson", "spearman"):
        raise ValueError(f"method: expected 'pearson' or 'spearman', found {method!r}")
    p, y, dates = _frame_columns(frame)
    x, labels = _aligned_predictions(p, prepare_labels(y, dates, copy=False))
    values = _daily_values(x, labels, method)
    return pd.Series(values, index=pd.Index(labels.uniques, name="datetime"), name=f"ic_{method}")


def information_coefficients(frame: pd.DataFrame) -> ICSummary:
    """IC, ICIR and Rank IC of one merged run (see the module docstring for the formulas).

    Returns NaN values (and ``n_dates`` 0) when no date has a defined correlation; ICIR is
    NaN with fewer than 2 such dates or a constant daily IC.

    Examples
    --------
    >>> f = pd.DataFrame({"datetime": [1, 1, 1, 2, 2, 2], "prediction": [1.0, 2, 3, 1, 2, 3],
    ...                   "label": [1.0, 2, 3, 3, 1, 2]})
    >>> s = information_coefficients(f)
    >>> s.ic, round(s.icir, 4), s.rank_ic
    (0.25, 0.2357, 0.25)
    """
    p, y, dates = _frame_columns(frame)
    return information_coefficients_arrays(p, prepare_labels(y, dates, copy=False))


@dataclass(frozen=True)
class DailyIC:
    """The cross-sectional correlations of one run per date (NaN where undefined).

    ``dates`` are the labels' date keys in order; ``ic`` the Pearson and ``rank_ic`` the
    Spearman correlation of prediction and label on each. ``prediction_range``: each date's
    largest minus smallest prediction, when every row of the input was correlated (no row left
    out for a non-finite value or a missing date) and ranked on the (dates, instruments) matrix;
    else ``None``.
    """

    dates: np.ndarray
    ic: np.ndarray
    rank_ic: np.ndarray
    prediction_range: np.ndarray | None = None

    def summary(self) -> ICSummary:
        """IC (mean of the finite daily IC), ICIR (mean / std, ddof 1), Rank IC, number of dates."""
        ic, rank = self.ic[np.isfinite(self.ic)], self.rank_ic[np.isfinite(self.rank_ic)]
        if ic.size == 0:
            return ICSummary(math.nan, math.nan, math.nan, 0)
        std = float(ic.std(ddof=1)) if ic.size > 1 else math.nan
        icir = float(ic.mean()) / std if std and math.isfinite(std) and std > 0 else math.nan
        return ICSummary(float(ic.mean()), icir, float(rank.mean()) if rank.size else math.nan, int(ic.size))


def daily_information_coefficients(prediction: Any, labels: PreparedLabels) -> DailyIC:
    """Pearson and Spearman correlation of ``prediction`` with the prepared labels, per date.

    Examples
    --------
    >>> labels = prepare_labels([1.0, 2, 3, 3, 1, 2], [1, 1, 1, 2, 2, 2])
    >>> d = daily_information_coefficients([1.0, 2, 3, 1, 2, 3], labels)
    >>> d.dates.tolist(), d.ic.tolist(), d.rank_ic.tolist()
    ([1, 2], [1.0, -0.5], [1.0, -0.5])
    """
    x, labels = _aligned_predictions(prediction, labels)
    if not len(labels.groups):
        return DailyIC(labels.uniques, np.empty(0), np.empty(0))
    rank_ic, spread = _rank_correlation(x, labels.rank, labels.groups)
    return DailyIC(labels.uniques, _daily_values(x, labels, "pearson"), rank_ic,
                   prediction_range=spread if labels.keep is None else None)


def information_coefficients_arrays(prediction: Any, labels: PreparedLabels) -> ICSummary:
    """:func:`information_coefficients` of one run's ``prediction`` array and its :func:`prepare_labels`.

    ``labels`` can serve every run with the same labels and dates (their ranks are computed once).

    Examples
    --------
    >>> labels = prepare_labels([1.0, 2, 3, 3, 1, 2], [1, 1, 1, 2, 2, 2])
    >>> information_coefficients_arrays([1.0, 2, 3, 1, 2, 3], labels).rank_ic
    0.25
    """
    return daily_information_coefficients(prediction, labels).summary()

