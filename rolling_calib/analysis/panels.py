"""Per-run, per-day summaries of a store: what the verdicts resample and the guards measure.

For every run (pipeline, seed) :func:`run_days` turns the run's scores into one row per trading
day (the date of the predictions' timestamps):

* ``rows``, ``sse_ql`` (``sum (y - p)^2``) and ``sse_cql`` (``sum (y - p - c)^2`` with the day's
  calibration bias; NaN on days CQL does not score), from the rolling metric
  (:attr:`~rolling_calib.core.metrics.RollingCQL.days`): a run's QL is ``sum sse_ql / sum rows``;
* ``ic_sum``, ``ic_n`` (and ``rank_ic_sum``, ``rank_ic_n``): the sum and number of the day's
  defined cross-sectional correlations (one per timestamp: each bar on a minute store, each
  session on a daily one), so a run's IC is ``sum ic_sum / sum ic_n``;
* the moments ``n, sp, sy, spp, syy, spy`` of (prediction, label) pairs
  (:class:`~rolling_calib.core.guards.Moments`), for the scale and skill guards and the split of
  the seed variance;
* ``excess_return``, ``excess_return_cost`` and ``bt_days`` (1 on a day the run's backtest
  reports, else 0): the daily excess return of the workflow's backtest over the joined windows,
  without and with its trading cost (NaN when the run has no backtest), so a run's mean daily
  excess return is ``sum excess_return / sum bt_days``. A backtest day without labelled
  predictions gets a row of its own (no rows, NaN losses).

:class:`SeedSpreadCollector` measures, per pipeline, how different its seeds' predictions of the
same rows are (:func:`~rolling_calib.core.guards.seed_spread`) in one pass over the runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rolling_calib.core.guards import (
    DEGENERATE_LIMIT,
    MOMENT_FIELDS,
    ConstantCheck,
    SeedSpread,
    constant_check,
    constant_check_of_ranges,
    same_predictions,
    same_rankings,
)
from rolling_calib.core.metrics import RollingCQL
from rolling_calib.core.ranking_ic import DailyIC
from rolling_calib.execution.reader import RunArrays

__all__ = ["BACKTEST_DAY_COLUMNS", "DAY_COLUMNS", "MOMENT_COLUMNS", "SeedSpreadCollector", "run_days", "with_backtest"]

MOMENT_COLUMNS = MOMENT_FIELDS
#: Rows per block of the per-day products and the running seed statistics (scratch arrays that stay in cache).
_BLOCK = 1 << 16
#: The backtest's day columns (:func:`with_backtest`).
BACKTEST_DAY_COLUMNS = ("excess_return", "excess_return_cost", "bt_days")
DAY_COLUMNS = ("pipeline", "seed", "date", "period", "rows", "sse_ql", "sse_cql", "ic_sum", "ic_n", "rank_ic_sum",
               "rank_ic_n", *MOMENT_COLUMNS, *BACKTEST_DAY_COLUMNS)


def _day_codes(times: np.ndarray, days: np.ndarray) -> np.ndarray:
    """Index into ``days`` (sorted datetime64[D]) of every timestamp's date."""
    return np.searchsorted(days.astype("datetime64[D]").view(np.int64),
                           times.astype("datetime64[D]").view(np.int64))


def _day_sums(times: np.ndarray, days: np.ndarray, rows: np.ndarray):
    """``(values[, other]) -> per-day sums`` of the rows (timestamps ``times``) over the days ``days``.

    ``sums(w)`` sums ``w`` per day, ``sums(w, v)`` the products ``w * v`` (``sums(None)``: the counts).
    When the rows are in time order and each day's rows are where its date says (the counts match
    the rolling metric's ``rows``), each day is a contiguous segment, summed by ``np.add.reduceat``
    (found by one binary search per day: 4x faster than a scatter-add per row), products a block of
    whole days at a time in one cache-sized scratch array (each day's sum is the same); else every
    row's day code and :func:`numpy.bincount`.
    """
    m = len(days)
    t = times.astype("datetime64[ns]", copy=False).view(np.int64)   # a view of ns timestamps, not a copy
    ordered = np.asarray(t)   # positions, not index labels
    if t.size and bool((ordered[1:] >= ordered[:-1]).all()):
        bounds = np.searchsorted(t, days.astype("datetime64[D]").astype("datetime64[ns]").view(np.int64))
        counts = np.diff(np.r_[bounds, t.size])
        if np.array_equal(counts, np.asarray(rows)):
            nonempty = counts > 0
            starts = bounds[nonempty]

            def sums(w: np.ndarray | None, v: np.ndarray | None = None) -> np.ndarray:
                if w is None:
                    return counts.astype(float)
                out = np.zeros(m)
                out[nonempty] = np.add.reduceat(w, starts) if v is None else _segment_product_sums(w, v, starts)
                return out

            return sums
    code = _day_codes(times, days)

    def scattered(w: np.ndarray | None, v: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(code, weights=w if v is None or w is None else w * v, minlength=m).astype(float)

    return scattered


def _segment_product_sums(w: np.ndarray, v: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``np.add.reduceat(w * v, starts)``, the products a block of whole segments at a time."""
    n = len(w)
    ends = np.append(starts[1:], n)
    out = np.empty(len(starts))
    if n == 0 or not (w.dtype == v.dtype == np.float64):
        out[:] = np.add.reduceat(w * v, starts)
        return out
    scratch = np.empty(max(_BLOCK, int((ends - starts).max())))
    j = 0
    while j < len(starts):
        lo = int(starts[j])
        k = max(j + 1, int(np.searchsorted(ends, lo + len(scratch), side="right")))   # whole segments that fit
        hi = int(ends[k - 1])
        block = np.multiply(w[lo:hi], v[lo:hi], out=scratch[:hi - lo])
        out[j:k] = np.add.reduceat(block, starts[j:k] - lo)
        j = k
    return out


def _daily_ic_sums(daily: DailyIC, days: np.ndarray) -> dict[str, np.ndarray]:
    """Per day of ``days``: sums and counts of the finite daily IC and Rank IC."""
    out: dict[str, np.ndarray] = {}
    if daily.dates.size == 0:
        for name in ("ic_sum", "ic_n", "rank_ic_sum", "rank_ic_n"):
            out[name] = np.zeros(len(days))
        return out
    code = _day_codes(np.asarray(daily.dates).astype("datetime64[ns]"), days)
    for name, values in (("ic", daily.ic), ("rank_ic", daily.rank_ic)):
        ok = np.isfinite(values)
        out[f"{name}_sum"] = np.bincount(code[ok], weights=values[ok], minlength=len(days))
        out[f"{name}_n"] = np.bincount(code[ok], minlength=len(days)).astype(float)
    return out


def run_days(pipeline: str, seed: int, result: RollingCQL, arrays: RunArrays, daily: DailyIC | None,
             backtest: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per trading day of a run: its losses, correlations, moments and backtest (module docstring).

    ``backtest``: the run's daily backtest report (``date``, ``excess_return``, ``excess_return_cost``),
    or None (the backtest columns NaN).
    """
    frame = result.days
    if frame is None:
        raise ValueError("result: the rolling metric returned no per-day sums")
    days = frame["date"].to_numpy()
    p, y = arrays.prediction, arrays.label
    m = len(days)
    sums = _day_sums(arrays.datetime, days, frame["rows"].to_numpy())
    moments = {
        "n": sums(None),
        "sp": sums(p),
        "sy": sums(y),
        "spp": sums(p, p),
        "syy": sums(y, y),
        "spy": sums(p, y),
    }
    ic = _daily_ic_sums(daily, days) if daily is not None else {k: np.zeros(m) for k in
                                                                 ("ic_sum", "ic_n", "rank_ic_sum", "rank_ic_n")}
    columns = {"pipeline": pipeline, "seed": int(seed), "date": days, "period": frame["period"].to_numpy(),
               "rows": frame["rows"].to_numpy(), "sse_ql": frame["sse_ql"].to_numpy(),
               "sse_cql": frame["sse_cql"].to_numpy(), **ic, **moments}
    if backtest is None or backtest.empty:   # what with_backtest gives without one, built in one step
        return pd.DataFrame({**columns, **_no_backtest(m)}, columns=list(DAY_COLUMNS))
    return with_backtest(pd.DataFrame(columns), backtest, pipeline=pipeline, seed=seed)[list(DAY_COLUMNS)]


def _no_backtest(n: int) -> dict[str, np.ndarray]:
    """The backtest columns of ``n`` days without a backtest: no excess returns (NaN), no backtest day (0)."""
    return {c: np.full(n, np.nan) if c != "bt_days" else np.zeros(n) for c in BACKTEST_DAY_COLUMNS}


def with_backtest(days: pd.DataFrame, backtest: pd.DataFrame | None, *, pipeline: str, seed: int) -> pd.DataFrame:
    """``days`` (one run) with the backtest's daily excess returns joined by date (module docstring).

    >>> days = pd.DataFrame({"date": pd.to_datetime(["2017-01-03", "2017-01-04"]), "rows": [25.0, 25.0]})
    >>> bt = pd.DataFrame({"date": pd.to_datetime(["2017-01-04", "2017-01-05"]), "excess_return": [0.01, 0.02],
    ...                    "excess_return_cost": [0.009, 0.019]})
    >>> with_backtest(days, bt, pipeline="a", seed=0)[["rows", "excess_return", "bt_days"]].values.tolist()
    [[25.0, nan, 0.0], [25.0, 0.01, 1.0], [0.0, 0.02, 1.0]]
    """
    if backtest is None or backtest.empty:
        return days.assign(**_no_backtest(len(days)))
    out = days.copy()
    key = pd.to_datetime(out["date"]).dt.normalize().to_numpy()
    bt = backtest.assign(_key=pd.to_datetime(backtest["date"]).dt.normalize())
    extra = bt[~bt["_key"].isin(key)]
    if len(extra):   # backtest days without labelled predictions: rows of their own
        add = pd.DataFrame({c: (np.nan if c in ("sse_cql", "period") else 0.0) for c in out.columns if c != "date"},
                           index=range(len(extra)))
        add["date"] = extra["_key"].to_numpy().astype(out["date"].to_numpy().dtype)
        add["pipeline"], add["seed"] = pipeline, int(seed)
        out = pd.concat([out, add[out.columns]], ignore_index=True)
        key = pd.to_datetime(out["date"]).dt.normalize().to_numpy()
        out = out.iloc[np.argsort(key, kind="stable")].reset_index(drop=True)
        key = np.sort(key, kind="stable")
    values = bt.set_index("_key")
    found = pd.Index(values.index).get_indexer(key)
    hit = found >= 0
    for col in ("excess_return", "excess_return_cost"):
        column = np.full(len(out), np.nan)
        column[hit] = values[col].to_numpy(dtype=float)[found[hit]]
        out[col] = column
    out["bt_days"] = hit.astype(float)
    return out


def _welford_update(mean: np.ndarray, m2: np.ndarray, first: np.ndarray, p: np.ndarray, k: int) -> float:
    """Fold the ``k``-th seed's predictions ``p`` into ``mean`` and ``m2`` in place; the largest ``|p - first|``.

    ``delta = p - mean; mean += delta / k; m2 += delta * (p - mean)`` a block of rows at a time
    (the same element-wise operations as on the whole arrays: the same numbers).
    """
    n = len(p)
    widest = 0.0
    delta, step = np.empty(min(n, _BLOCK)), np.empty(min(n, _BLOCK))
    for lo in range(0, n, _BLOCK):
        hi = min(lo + _BLOCK, n)
        pb, d, s = p[lo:hi], delta[:hi - lo], step[:hi - lo]
        np.subtract(pb, mean[lo:hi], out=d)
        np.divide(d, k, out=s)
        mean[lo:hi] += s
        np.subtract(pb, mean[lo:hi], out=s)
        s *= d
        m2[lo:hi] += s
        np.subtract(pb, first[lo:hi], out=d)
        widest = max(widest, float(np.abs(d, out=d).max()))
    return widest


def _same_times(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two runs' timestamps are the same, row by row: ``np.array_equal`` of datetime64 arrays of one unit
    compared as their int64 ticks (3-4x faster; NaT, one tick value, equals NaT: the same rows)."""
    if a.dtype != b.dtype or a.dtype.kind != "M":
        return bool(np.array_equal(a, b))
    return bool(np.array_equal(a.view(np.int64), b.view(np.int64)))


def _same_ids(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool:
    """Whether two runs' rows name the same instruments: ``names_a[codes_a] == names_b[codes_b]`` row by row.

    Compared as codes: ``b``'s names are looked up among ``a``'s once (a code of -1 indexes the last
    name, as NumPy indexing does). Without names the codes themselves are compared.
    """
    (na, ca), (nb, cb) = a, b
    if not len(na) or not len(nb):
        ia = na[ca] if len(na) else ca
        ib = nb[cb] if len(nb) else cb
        return bool(np.array_equal(ia, ib))
    if len(ca) != len(cb):
        return False
    if len(na) == len(nb) and na.tolist() == nb.tolist() and np.array_equal(ca, cb):
        return True   # the same names under the same codes (the usual case: one pass, no lookups)
    where: dict[Any, int] = {}
    for i, name in enumerate(na.tolist()):
        where.setdefault(name, i)
    in_a = np.array([where.get(name, -1) for name in nb.tolist()], dtype=np.int64)   # -1: not among a's names
    first_a = np.array([where[name] for name in na.tolist()], dtype=np.int64)        # a's codes -> first equal name
    return bool(np.array_equal(first_a[ca], in_a[cb]))


@dataclass
class _Welford:
    """Running mean and sum of squared deviations over seeds, per row."""

    times: np.ndarray
    codes: np.ndarray
    mean: np.ndarray
    m2: np.ndarray
    first: np.ndarray
    k: int = 1
    max_diff: float = 0.0
    aligned: bool = True


@dataclass
class SeedSpreadCollector:
    """Per pipeline, the between-seed spread of predictions of the same rows, one run at a time.

    Runs of a pipeline predict the same (datetime, instrument) rows in the same order when they
    share a dataset; a run whose rows differ from the first seed's makes the pipeline's spread
    unknown (None) rather than wrong.
    """

    _state: dict[str, _Welford] = field(default_factory=dict)
    #: per pipeline, every run's :class:`~rolling_calib.core.guards.ConstantCheck`
    _constant: dict[str, list[ConstantCheck]] = field(default_factory=dict)
    #: per pipeline, its first run: (seed, datetimes, (instrument names, codes), predictions), for :meth:`identical_pairs`
    _first: dict[str, tuple[int | None, np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray]] = field(
        default_factory=dict)

    def add(self, pipeline: str, arrays: RunArrays, seed: int | None = None, daily: DailyIC | None = None) -> None:
        """Fold one run in. ``daily``: its IC pass, whose per-timestamp prediction ranges (when it measured them
        on every row) give the constant-prediction check without another pass over the rows."""
        p = arrays.prediction
        checks = self._constant.setdefault(pipeline, [])
        if len(p) and all(c.constant for c in checks):   # one run that varies settles it: no need to look further
            ranges = daily.prediction_range if daily is not None else None
            checks.append(constant_check_of_ranges(ranges, p) if ranges is not None and ranges.size
                          else constant_check(arrays.datetime, p))
        if pipeline not in self._first:
            self._first[pipeline] = (seed, arrays.datetime, (np.asarray(arrays.names), arrays.codes), p)
        state = self._state.get(pipeline)
        if state is None:
            self._state[pipeline] = _Welford(arrays.datetime, arrays.codes, np.array(p, dtype=float), np.zeros(len(p)),
                                             p.copy())
            return
        if not state.aligned:
            return
        if len(p) != len(state.mean) or not (_same_times(arrays.datetime, state.times)
                                              and np.array_equal(arrays.codes, state.codes)):
            state.aligned = False
            return
        state.k += 1
        state.max_diff = max(state.max_diff, _welford_update(state.mean, state.m2, state.first, p, state.k))

    def constant(self, pipeline: str) -> ConstantCheck | None:
        """The pipeline's run with the widest cross-section when every run predicts a constant per timestamp
        (:func:`~rolling_calib.core.guards.constant_check`), else None."""
        checks = self._constant.get(pipeline, [])
        if not checks or not all(c.constant for c in checks):
            return None
        return max(checks, key=lambda c: c.max_range)

    def identical_pairs(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """Pairs of pipelines whose first runs (the same seed) rank the same rows the same way at every timestamp
        (:func:`~rolling_calib.core.guards.same_rankings`), and among them those that predict the same values
        (:func:`~rolling_calib.core.guards.same_predictions`), to float rounding: ``(same rankings, same values)``.

        One pass: the ranking check (a sort per timestamp) runs only for pairs whose values differ.
        """
        names = list(self._first)
        rankings, values = [], []
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                (sa, ta, ia, pa), (sb, tb, ib, pb) = self._first[a], self._first[b]
                if not (sa == sb and len(pa) == len(pb) and _same_times(ta, tb) and _same_ids(ia, ib)):
                    continue
                if same_predictions(pa, pb):
                    rankings.append((a, b))
                    values.append((a, b))
                elif same_rankings(ta, pa, pb):
                    rankings.append((a, b))
        return rankings, values

    def result(self, pipeline: str) -> SeedSpread | None:
        """:class:`~rolling_calib.core.guards.SeedSpread` of the pipeline's seeds (None: fewer than 2, or rows differ)."""
        state = self._state.get(pipeline)
        if state is None or state.k < 2 or not state.aligned:
            return None
        per_row_std = np.sqrt(state.m2 / state.k)          # ddof 0 over seeds, as seed_spread
        # std of all predictions of all seeds: sum over rows of (m2 + k (mean - grand)^2) / (k n)
        grand = state.mean.mean()
        total_var = (state.m2.sum() + state.k * ((state.mean - grand) ** 2).sum()) / (state.k * len(state.mean))
        scale = float(np.sqrt(total_var))
        rel = float(per_row_std.mean() / scale) if scale > 0 else 0.0
        return SeedSpread(n_seeds=state.k, n_rows=len(state.mean), max_abs_difference=state.max_diff,
                          relative_spread=rel, identical=state.max_diff == 0.0, degenerate=rel < DEGENERATE_LIMIT)
