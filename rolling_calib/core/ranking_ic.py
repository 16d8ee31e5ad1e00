"""Information coefficients of one run: IC, ICIR and Rank IC (pure NumPy / pandas).

For every test date ``t`` (a bar: a session of a daily store, a minute of a minute store)
with instruments ``i = 1..n_t``, predictions ``p_ti`` and labels ``y_ti``::

    IC_t      = corr(p_t., y_t.)                    Pearson, across instruments
    RankIC_t  = corr(rank(p_t.), rank(y_t.))        Spearman (average ranks for ties)
    IC        = mean_t IC_t
    ICIR      = mean_t IC_t / std_t IC_t            (std with ddof=1)
    Rank IC   = mean_t RankIC_t

Dates with fewer than 2 instruments or a constant prediction or label (an undefined
correlation) are left out of the means; rows with a non-finite value are dropped first.
Higher is better for all three, unlike the losses QL and CQL.

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

import numpy as np
import pandas as pd

__all__ = ["ICSummary", "daily_ic", "information_coefficients"]


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


def _pearson_by_group(x: np.ndarray, y: np.ndarray, codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Pearson correlation of ``x`` and ``y`` within each group (NaN where undefined)."""
    count = np.bincount(codes, minlength=n_groups).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        mx = np.bincount(codes, x, n_groups) / count
        my = np.bincount(codes, y, n_groups) / count
        dx, dy = x - mx[codes], y - my[codes]
        sxy = np.bincount(codes, dx * dy, n_groups)
        sxx = np.bincount(codes, dx * dx, n_groups)
        syy = np.bincount(codes, dy * dy, n_groups)
        r = sxy / np.sqrt(sxx * syy)
    scale_x = np.bincount(codes, np.abs(x), n_groups) / count
    scale_y = np.bincount(codes, np.abs(y), n_groups) / count
    tiny = 1e-12
    undefined = (count < 2) | (sxx <= (tiny * scale_x) ** 2 * count) | (syy <= (tiny * scale_y) ** 2 * count)
    r[undefined] = np.nan
    return np.clip(r, -1.0, 1.0)


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


def _prepared(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Finite rows' predictions, labels, date codes (0..D-1, in date order) and the D dates."""
    missing = [c for c in ("datetime", "prediction", "label") if c not in frame.columns]
    if missing:
        raise ValueError(f"frame: expected columns datetime, prediction, label; missing {', '.join(missing)}")
    p = frame["prediction"].to_numpy(dtype=float)
    y = frame["label"].to_numpy(dtype=float)
    keep = np.isfinite(p) & np.isfinite(y)
    dates = frame["datetime"].to_numpy()
    if not keep.all():
        dates, p, y = dates[keep], p[keep], y[keep]
    codes, uniques = pd.factorize(dates, sort=True)
    return p, y, codes.astype(np.int64, copy=False), np.asarray(uniques)


def _daily(p: np.ndarray, y: np.ndarray, codes: np.ndarray, n_dates: int, method: str) -> np.ndarray:
    if method == "spearman":
        p, y = _average_ranks_by_group(p, codes), _average_ranks_by_group(y, codes)
    return _pearson_by_group(p, y, codes, n_dates) if n_dates else np.empty(0)


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
    p, y, codes, uniques = _prepared(frame)
    values = _daily(p, y, codes, len(uniques), method)
    return pd.Series(values, index=pd.Index(uniques, name="datetime"), name=f"ic_{method}")


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
    p, y, codes, uniques = _prepared(frame)  # one factorisation for both correlations
    ic = _daily(p, y, codes, len(uniques), "pearson")
    rank = _daily(p, y, codes, len(uniques), "spearman")
    ic, rank = ic[np.isfinite(ic)], rank[np.isfinite(rank)]
    if ic.size == 0:
        return ICSummary(math.nan, math.nan, math.nan, 0)
    std = float(ic.std(ddof=1)) if ic.size > 1 else math.nan
    icir = float(ic.mean()) / std if std and math.isfinite(std) and std > 0 else math.nan
    return ICSummary(float(ic.mean()), icir, float(rank.mean()) if rank.size else math.nan, int(ic.size))
