r"""Stylised facts of a one-minute store: the numbers that say whether a market looks real.

:func:`stylized_facts` reads a Qlib minute store (``close`` and ``volume`` of every
instrument in ``instruments/all.txt``) over a date range and returns one number per fact
(:data:`FACTS`); :func:`format_facts` prints one or several results side by side.
``rolling-calib data facts STORE [STORE ...]`` is the command-line front.

Notation
========
For one stock, ``c_t`` is the close of calendar bar ``t`` (``NaN`` when the bar is missing or
not positive), ``l_t = log c_t``, ``d(t)`` the session of ``t`` and ``k(t)`` its minute in the
session (09:30 -> 0). ``l^ff_t`` is ``l`` forward-filled *within the session* (a missing bar
is a flat bar at the last close; nothing is filled across the close or from before the
session's first bar). Every return below lies inside one session: a return whose two ends
fall in different sessions is not formed (never across the close, no overnight gaps).

* 1-minute return ``r_t = l_t - l_{t-1}``: both bars present, ``k(t) - k(t-1) = 1``.
* label (the project's target, ``rolling_calib``'s ``compute_labels``):
  ``y_t = exp(l^ff_{t+10} - l_t) - 1``: ``c_t`` present, bar ``t+10`` in the same session.
* past-return average ``x_t = (l^ff_t - l^ff_{t-60}) / 60``, i.e. the mean of the past 60
  one-minute returns: ``c_t`` present, bar ``t-60`` in the same session.
* 10-minute returns on the grid ``R_t = l^ff_t - l^ff_{t-10}`` for ``k(t) = 10, 20, ...``
  (non-overlapping, aligned on the open).

Facts
=====
``ret10_std_bp``
    :math:`\mathrm{median}_i\, 10^4\,\mathrm{std}(y_{i,\cdot})`: median over stocks of the
    standard deviation of the 10-minute forward return, in basis points.
``ac1_ret1``
    :math:`\mathrm{mean}_i\, \mathrm{corr}(r_{i,t}, r_{i,t-1})`: lag-1 autocorrelation of
    1-minute returns per stock (pairs of consecutive returns in one session), mean over stocks.
``ac1_ret10``
    :math:`\mathrm{mean}_i\, \mathrm{corr}(R_{i,t}, R_{i,t-10})`: the same for the
    non-overlapping 10-minute returns.
``predictability``
    :math:`\mathrm{corr}(x_{i,t}, y_{i,t})` pooled over every stock and bar where both exist
    (one Pearson correlation of the stacked pairs): how well the recent past return predicts
    the next 10-minute return. Both ends inside one session by construction.
``mean_pair_corr``
    Mean over pairs ``i < j`` of :math:`\mathrm{corr}(r_{i,\cdot}, r_{j,\cdot})` (Pearson,
    over the bars where both returns exist): co-movement of the stocks.
``volume_absret_corr``
    :math:`\mathrm{mean}_i\, \rho_S(v_{i,t}, |r_{i,t}|)`: Spearman rank correlation per stock of
    the bar's volume with its absolute 1-minute return (bars with both), mean over stocks.
    Rank-based, so heavy tails and the log do not matter.
``intraday_vol_ratio``
    :math:`\mathrm{median}_i\, \mathrm{std}(r_{i,t} : 10{:}00 \le t < 10{:}30) /
    \mathrm{std}(r_{i,t} : 12{:}00 \le t < 14{:}00)`: how fast the morning volatility decays.
``daily_vol_max_min`` and ``daily_vol_p95_p5``
    With :math:`v_{i,d} = \sqrt{\mathrm{mean}_{t \in d}\, r_{i,t}^2}` the realised volatility
    of stock ``i`` on session ``d`` (per minute, so early closes compare) and
    :math:`\bar v_d = \mathrm{mean}_i v_{i,d}`: ``max_d v̄_d / min_d v̄_d`` and the robust
    ``P95_d(v̄) / P5_d(v̄)`` (linear-interpolated percentiles). The max/min grows with the
    number of sessions; the percentile ratio hardly does.
``label_drift``
    :math:`\mathrm{mean}_m\, \bar y_m^2 / \mathrm{var}(y)`, with :math:`\bar y_m` the mean of
    ``y`` over every stock and bar of calendar month ``m`` (each month counts once, partial
    months included) and :math:`\mathrm{var}(y)` the pooled variance: how far the label's
    mean drifts from month to month, relative to its noise.

Memory: one stock's arrays at a time plus the 1-minute return matrix (float32) for the
pairwise correlations.

Example
-------
>>> import tempfile
>>> from data_prep.synthetic import build_synthetic_store
>>> d = build_synthetic_store(tempfile.mkdtemp(), start="2018-03-01", end="2018-03-09", symbols=["AAPL", "F"])
>>> f = stylized_facts(d)
>>> f["symbols"], f["sessions"], 0.0 < f["ret10_std_bp"] < 100.0
(2, 7, True)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from data_prep import qlib_store

__all__ = ["FACTS", "HORIZON", "PAST_WINDOW", "FactSpec", "compute_facts", "format_facts", "stylized_facts"]

#: Bars of the forward return (the label's horizon).
HORIZON = 10
#: Bars of the past-return average used for ``predictability``.
PAST_WINDOW = 60
_MORNING = (30, 60)  # minutes of session: 10:00 <= t < 10:30
_MIDDAY = (150, 270)  # 12:00 <= t < 14:00


@dataclass(frozen=True)
class FactSpec:
    """One row of the facts table: key in the result, printed label, number format."""

    key: str
    label: str
    fmt: str


#: The facts, in printing order (formulas in the module docstring).
FACTS: tuple[FactSpec, ...] = (
    FactSpec("ret10_std_bp", "10-min return std per stock, median (bp)", "{:.1f}"),
    FactSpec("ac1_ret1", "lag-1 autocorr, 1-min returns", "{:+.3f}"),
    FactSpec("ac1_ret10", "lag-1 autocorr, 10-min returns", "{:+.3f}"),
    FactSpec("predictability", "corr(mean past 60 1-min returns, next 10-min return)", "{:+.3f}"),
    FactSpec("mean_pair_corr", "mean pairwise corr, 1-min returns", "{:.3f}"),
    FactSpec("volume_absret_corr", "Spearman corr(volume, |1-min return|)", "{:.3f}"),
    FactSpec("intraday_vol_ratio", "std 10:00-10:30 / std 12:00-14:00", "{:.2f}"),
    FactSpec("daily_vol_max_min", "daily vol max/min (cross-stock mean)", "{:.2f}"),
    FactSpec("daily_vol_p95_p5", "daily vol P95/P5 (cross-stock mean)", "{:.2f}"),
    FactSpec("label_drift", "mean (monthly label mean)^2 / label var", "{:.2e}"),
)

#: Not a fact of the bars: the oracle IC a synthetic store's ``meta.json`` records (data_prep.synthetic), over
#: the whole store (not --start/--end), printed under the facts.
_ORACLE_FACT = FactSpec("oracle_ic", "oracle IC of the 10-min label, whole store (meta.json)", "{:+.4f}")


# ---------------------------------------------------------------------------- helpers
def _corr(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation over the pairs where both are finite (NaN with < 3 pairs or no variance)."""
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3:
        return math.nan
    a, b = a[ok] - a[ok].mean(), b[ok] - b[ok].mean()
    den = math.sqrt(float(a @ a) * float(b @ b))
    return float(a @ b) / den if den > 0 else math.nan


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3:
        return math.nan
    ra = pd.Series(a[ok]).rank().to_numpy()
    rb = pd.Series(b[ok]).rank().to_numpy()
    return _corr(ra, rb)


def _lag(a: np.ndarray, lag: int, ok: np.ndarray) -> np.ndarray:
    """``a[t - lag]`` where ``ok[t]`` (bar ``t - lag`` is ``lag`` minutes earlier in the session), else NaN."""
    out = np.full(a.shape, np.nan)
    out[lag:] = a[:-lag]
    out[~ok] = np.nan
    return out


def _lead(a: np.ndarray, lead: int, ok: np.ndarray) -> np.ndarray:
    """``a[t + lead]`` where ``ok[t]`` (bar ``t + lead`` is ``lead`` minutes later in the session), else NaN."""
    out = np.full(a.shape, np.nan)
    out[:-lead] = a[lead:]
    out[~ok] = np.nan
    return out


def _steps_back(session: np.ndarray, minute: np.ndarray, lag: int) -> np.ndarray:
    """``ok[t]``: bar ``t - lag`` exists, in the same session, exactly ``lag`` minutes earlier."""
    ok = np.zeros(len(session), dtype=bool)
    if len(session) > lag:
        ok[lag:] = (session[lag:] == session[:-lag]) & (minute[lag:] - minute[:-lag] == lag)
    return ok


def _ffill_in_session(x: np.ndarray, session: np.ndarray) -> np.ndarray:
    """Forward fill of ``x`` that never crosses a session boundary."""
    idx = np.where(np.isfinite(x), np.arange(len(x)), -1)
    np.maximum.accumulate(idx, out=idx)
    out = np.full(len(x), np.nan)
    have = idx >= 0
    same = np.zeros(len(x), dtype=bool)
    same[have] = session[idx[have]] == session[have]
    out[same] = x[idx[same]]
    return out


def _nan_ratio(a: float, b: float) -> float:
    return a / b if np.isfinite(a) and np.isfinite(b) and b > 0 else math.nan


# ---------------------------------------------------------------------------- computation
@dataclass(frozen=True)
class _Bars:
    """Where every calendar bar sits (shared by all stocks): session, minute, month and the in-session masks."""

    n_t: int
    session: np.ndarray  # session number of each bar
    n_sess: int
    minute: np.ndarray  # minute of the session (09:30 -> 0)
    month_id: np.ndarray  # calendar-month number of each bar
    n_month: int
    back1: np.ndarray  # bar t-1 is one minute earlier in the session
    back10: np.ndarray  # bar t-10 likewise (HORIZON)
    back60: np.ndarray  # bar t-60 likewise (PAST_WINDOW)
    fwd10: np.ndarray  # bar t+10 is ten minutes later in the session
    grid10: np.ndarray  # a 10-minute grid return ends at t
    back_grid: np.ndarray  # ... and the previous grid return exists
    morning: np.ndarray
    midday: np.ndarray


@dataclass(frozen=True)
class _Series:
    """One stock's return series over the calendar bars (module docstring notation)."""

    r1: np.ndarray  # 1-minute returns r_t
    y: np.ndarray  # labels y_t
    x: np.ndarray  # past-return averages x_t
    grid_ret: np.ndarray  # 10-minute grid returns R_t


@dataclass
class _Scan:
    """Per-stock numbers and pooled sums from one pass over the stocks (filled in place by :func:`_scan_stocks`)."""

    r1: np.ndarray  # (N, T) float32 1-minute returns, for the pairwise correlations
    std10: np.ndarray
    ac1: np.ndarray
    ac10: np.ndarray
    vcorr: np.ndarray
    shape: np.ndarray
    rv: np.ndarray  # (N, sessions) realised volatility
    pool: np.ndarray  # n, sum x, sum y, sum xx, sum yy, sum xy
    month_sum: np.ndarray
    month_n: np.ndarray
    y_tot: np.ndarray  # sum y, sum yy, n


def _checked_inputs(times, close, volume) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(bar times as datetime64[m], close (N, T), volume or None)``, refusing misaligned input."""
    t64 = np.asarray(pd.DatetimeIndex(times).to_numpy(), dtype="datetime64[m]")
    close = np.atleast_2d(np.asarray(close, dtype=np.float64))
    n_t = close.shape[1]
    if len(t64) != n_t:
        raise ValueError(f"close: expected {len(t64)} columns (one per bar time), found {n_t}")
    if len(t64) > 1 and np.any(np.diff(t64.astype(np.int64)) <= 0):
        raise ValueError("times: expected strictly increasing bar times")
    vol = None if volume is None else np.atleast_2d(np.asarray(volume, dtype=np.float64))
    if vol is not None and vol.shape != close.shape:
        raise ValueError(f"volume: expected shape {close.shape} like close, found {vol.shape}")
    return t64, close, vol


def _bar_layout(t64: np.ndarray) -> _Bars:
    """:class:`_Bars` of the sorted bar times ``t64``."""
    n_t = len(t64)
    day = t64.astype("datetime64[D]")
    session = np.unique(day, return_inverse=True)[1].reshape(-1)
    minute = (t64 - day).astype(np.int64) - (9 * 60 + 30)
    month_id = np.unique(t64.astype("datetime64[M]"), return_inverse=True)[1].reshape(-1)
    back10 = _steps_back(session, minute, HORIZON)
    fwd10 = np.zeros(n_t, dtype=bool)
    fwd10[:-HORIZON or None] = back10[HORIZON:] if n_t > HORIZON else False
    grid10 = back10 & (minute % HORIZON == 0)
    return _Bars(
        n_t=n_t,
        session=session,
        n_sess=int(session.max()) + 1 if n_t else 0,
        minute=minute,
        month_id=month_id,
        n_month=int(month_id.max()) + 1 if n_t else 0,
        back1=_steps_back(session, minute, 1),
        back10=back10,
        back60=_steps_back(session, minute, PAST_WINDOW),
        fwd10=fwd10,
        grid10=grid10,
        back_grid=_steps_back(session, minute, 2 * HORIZON) & grid10,
        morning=(minute >= _MORNING[0]) & (minute < _MORNING[1]),
        midday=(minute >= _MIDDAY[0]) & (minute < _MIDDAY[1]),
    )


def _stock_series(c: np.ndarray, bars: _Bars) -> _Series:
    """Returns, labels and past-return averages of one stock's closes ``c``."""
    lc = np.where(c > 0, np.log(np.where(c > 0, c, 1.0)), np.nan)
    lff = _ffill_in_session(lc, bars.session)
    return _Series(
        r1=lc - _lag(lc, 1, bars.back1),
        y=np.expm1(_lead(lff, HORIZON, bars.fwd10) - lc),
        x=(lc - _lag(lff, PAST_WINDOW, bars.back60)) / PAST_WINDOW,
        grid_ret=np.where(bars.grid10, lff - _lag(lff, HORIZON, bars.back10), np.nan),
    )


# ------------------------------------------------- per-stock parts of each fact family
def _ret10_std_bp(y: np.ndarray) -> float:
    """``ret10_std_bp`` of one stock: std of its labels in bp (NaN with < 2 labels)."""
    return 1e4 * np.nanstd(y) if np.isfinite(y).sum() > 1 else math.nan


def _autocorrelations(s: _Series, bars: _Bars) -> tuple[float, float]:
    """``(ac1_ret1, ac1_ret10)`` of one stock."""
    ac1 = _corr(s.r1, _lag(s.r1, 1, bars.back1))
    ac10 = _corr(s.grid_ret, np.where(bars.back_grid, _lag(s.grid_ret, HORIZON, bars.back10), np.nan))
    return ac1, ac10


def _volume_absret(v: np.ndarray, r1: np.ndarray) -> float:
    """``volume_absret_corr`` of one stock (negative volumes count as missing)."""
    return _spearman(np.where(v >= 0, v, np.nan), np.abs(r1))


def _intraday_ratio(r1: np.ndarray, bars: _Bars) -> float:
    """``intraday_vol_ratio`` of one stock: morning std over midday std."""
    return _nan_ratio(np.nanstd(r1[bars.morning]) if np.isfinite(r1[bars.morning]).sum() > 1 else math.nan,
                      np.nanstd(r1[bars.midday]) if np.isfinite(r1[bars.midday]).sum() > 1 else math.nan)


def _session_rv(r1: np.ndarray, bars: _Bars) -> np.ndarray:
    """Realised volatility per minute of one stock on every session (NaN without returns)."""
    have = np.isfinite(r1)
    sq = np.bincount(bars.session[have], weights=r1[have] ** 2, minlength=bars.n_sess)
    cnt = np.bincount(bars.session[have], minlength=bars.n_sess)
    return np.where(cnt > 0, np.sqrt(sq / np.maximum(cnt, 1)), np.nan)


def _pool_terms(x: np.ndarray, y: np.ndarray) -> tuple:
    """One stock's ``(n, sum x, sum y, sum xx, sum yy, sum xy)`` over the bars with both ``x`` and ``y``."""
    both = np.isfinite(x) & np.isfinite(y)
    xb, yb = x[both], y[both]
    return (both.sum(), xb.sum(), yb.sum(), xb @ xb, yb @ yb, xb @ yb)


def _label_terms(y: np.ndarray, bars: _Bars) -> tuple[np.ndarray, np.ndarray, tuple]:
    """One stock's label sums per month, label counts per month and ``(sum y, sum yy, n)``."""
    hy = np.isfinite(y)
    month_sum = np.bincount(bars.month_id[hy], weights=y[hy], minlength=bars.n_month)
    month_n = np.bincount(bars.month_id[hy], minlength=bars.n_month)
    return month_sum, month_n, (y[hy].sum(), y[hy] @ y[hy], hy.sum())


def _scan_stocks(close: np.ndarray, vol: np.ndarray | None, bars: _Bars) -> _Scan:
    """One pass over the stocks (one stock's arrays at a time): every per-stock number and pooled sum."""
    n_sym = close.shape[0]
    std10, ac1, ac10, vcorr, shape = (np.full(n_sym, np.nan) for _ in range(5))
    scan = _Scan(r1=np.full((n_sym, bars.n_t), np.nan, dtype=np.float32), std10=std10, ac1=ac1, ac10=ac10,
                 vcorr=vcorr, shape=shape, rv=np.full((n_sym, bars.n_sess), np.nan), pool=np.zeros(6),
                 month_sum=np.zeros(bars.n_month), month_n=np.zeros(bars.n_month), y_tot=np.zeros(3))
    for i in range(n_sym):
        s = _stock_series(close[i], bars)
        scan.r1[i] = s.r1
        scan.std10[i] = _ret10_std_bp(s.y)
        scan.ac1[i], scan.ac10[i] = _autocorrelations(s, bars)
        if vol is not None:
            scan.vcorr[i] = _volume_absret(vol[i], s.r1)
        scan.shape[i] = _intraday_ratio(s.r1, bars)
        scan.rv[i] = _session_rv(s.r1, bars)
        scan.pool += _pool_terms(s.x, s.y)
        month_sum, month_n, y_terms = _label_terms(s.y, bars)
        scan.month_sum += month_sum
        scan.month_n += month_n
        scan.y_tot += y_terms
    return scan


# ------------------------------------------------- pooled facts
def _nan_median(a: np.ndarray) -> float:
    return float(np.nanmedian(a)) if np.isfinite(a).any() else math.nan


def _nan_mean(a: np.ndarray) -> float:
    return float(np.nanmean(a)) if np.isfinite(a).any() else math.nan


def _predictability(pool: np.ndarray) -> float:
    """Pearson correlation from the pooled sums ``(n, sum x, sum y, sum xx, sum yy, sum xy)``."""
    n, sx, sy, sxx, syy, sxy = pool
    cov = sxy - sx * sy / n if n > 2 else math.nan
    den = math.sqrt(max(sxx - sx * sx / n, 0.0) * max(syy - sy * sy / n, 0.0)) if n > 2 else 0.0
    return cov / den if den > 0 else math.nan


def _daily_vol_ratios(rv: np.ndarray, n_sess: int) -> dict[str, float]:
    """``daily_vol_max_min`` and ``daily_vol_p95_p5`` of the per-stock session volatilities ``rv``."""
    daily = np.nanmean(rv, axis=0) if n_sess and np.isfinite(rv).any() else np.array([])
    daily = daily[np.isfinite(daily) & (daily > 0)]
    if len(daily) < 2:
        return {"daily_vol_max_min": math.nan, "daily_vol_p95_p5": math.nan}
    p5, p95 = np.percentile(daily, [5, 95])
    return {"daily_vol_max_min": float(daily.max() / daily.min()), "daily_vol_p95_p5": float(p95 / p5)}


def _label_drift(month_sum: np.ndarray, month_n: np.ndarray, y_tot: np.ndarray) -> float:
    """Mean squared monthly label mean over the pooled label variance."""
    y_sum, y_sq, y_n = y_tot
    var_y = y_sq / y_n - (y_sum / y_n) ** 2 if y_n > 1 else math.nan
    has_month = month_n > 0
    monthly = month_sum[has_month] / month_n[has_month]
    return float(np.mean(monthly**2) / var_y) if has_month.any() and var_y > 0 else math.nan


def compute_facts(times, close: np.ndarray, volume: np.ndarray | None = None) -> dict[str, float]:
    """Stylised facts of minute bars held in memory (the formulas are in the module docstring).

    Parameters
    ----------
    times : array-like of datetime64, shape (T,)
        Naive New York bar times (bar start), sorted; several sessions.
    close : ndarray, shape (N, T)
        Closes of ``N`` stocks (``NaN`` = no bar; non-positive values count as missing).
    volume : ndarray, shape (N, T), optional
        Volumes; without it ``volume_absret_corr`` is NaN.

    Returns
    -------
    dict
        ``{fact key: float}`` for every :data:`FACTS` key (NaN where the data are too short),
        plus ``symbols``, ``sessions`` and ``bars`` (calendar bars) as ints.
    """
    t64, close, vol = _checked_inputs(times, close, volume)
    bars = _bar_layout(t64)
    scan = _scan_stocks(close, vol, bars)
    facts: dict[str, float] = {
        "ret10_std_bp": _nan_median(scan.std10),
        "ac1_ret1": _nan_mean(scan.ac1),
        "ac1_ret10": _nan_mean(scan.ac10),
        "predictability": _predictability(scan.pool),
        "mean_pair_corr": _mean_pair_corr(scan.r1),
        "volume_absret_corr": _nan_mean(scan.vcorr),
        "intraday_vol_ratio": _nan_median(scan.shape),
        **_daily_vol_ratios(scan.rv, bars.n_sess),
        "label_drift": _label_drift(scan.month_sum, scan.month_n, scan.y_tot),
    }
    facts.update(symbols=int(close.shape[0]), sessions=int(bars.n_sess), bars=int(bars.n_t))
    return facts


def _mean_pair_corr(r: np.ndarray) -> float:
    """Mean off-diagonal pairwise-complete Pearson correlation of the rows of ``r``."""
    if r.shape[0] < 2:
        return math.nan
    c = pd.DataFrame(r.T.astype(np.float64)).corr(min_periods=3).to_numpy()
    off = c[np.triu_indices(len(c), 1)]
    off = off[np.isfinite(off)]
    return float(off.mean()) if len(off) else math.nan


# ---------------------------------------------------------------------------- store front
def _load(store: Path, start, end, symbols: Sequence[str] | None):
    cal = qlib_store.read_calendar(store)
    if len(cal) == 0:
        raise ValueError(f"{store}: expected a minute store with calendars/1min.txt, found none")
    spans = qlib_store.read_instruments(store, "all")
    names = list(spans) if symbols is None else [s.upper() for s in symbols]
    unknown = [s for s in names if s not in spans]
    if unknown:
        raise ValueError(f"symbols: expected instruments of {store}, found unknown {unknown}")
    if not names:
        raise ValueError(f"{store}: expected instruments in instruments/all.txt, found none")
    lo = 0 if start is None else int(cal.searchsorted(pd.Timestamp(start).normalize(), side="left"))
    hi = len(cal) if end is None else int(cal.searchsorted(pd.Timestamp(end).normalize() + pd.Timedelta(days=1), side="left"))
    if hi <= lo:
        raise ValueError(f"start/end: expected a range holding bars of {store}, found none in {start}..{end}")
    close = np.full((len(names), hi - lo), np.nan)
    volume = np.full((len(names), hi - lo), np.nan)
    for i, sym in enumerate(names):
        for arr, field in ((close, "close"), (volume, "volume")):
            first, values = qlib_store.read_feature(store, sym, field)
            a, b = max(first, lo), min(first + len(values), hi)
            if b > a:
                arr[i, a - lo:b - lo] = values[a - first:b - first]
    return cal[lo:hi], names, close, volume


def stylized_facts(store, *, start=None, end=None, symbols: Sequence[str] | None = None) -> dict:
    """Read a minute store and compute its stylised facts (:func:`compute_facts`).

    Parameters
    ----------
    store : path
        Qlib minute store (``calendars/1min.txt``, ``instruments/all.txt``, ``features/``).
    start, end : date-like, optional
        Inclusive range of calendar dates (default: the whole calendar).
    symbols : sequence of str, optional
        Default: every instrument of ``instruments/all.txt``.

    Returns
    -------
    dict
        ``store, start, end`` (first and last date with bars) and the :func:`compute_facts` dict.
    """
    path = Path(store)
    times, _names, close, volume = _load(path, start, end, symbols)
    facts = compute_facts(times, close, volume)
    meta = qlib_store.read_meta(path) or {}
    oracle = meta.get("oracle_ic")
    return {"store": str(path), "start": str(times[0].date()), "end": str(times[-1].date()), **facts,
            "signal": meta.get("signal", "drifting" if meta.get("generator") == "data_prep.synthetic" else None),
            "oracle_ic": math.nan if oracle is None else float(oracle)}


def format_facts(results: Mapping[str, Mapping] | Sequence[Mapping]) -> str:
    """Text table of one or several :func:`stylized_facts` results, one column each.

    ``results``: ``{column title: facts}`` or a sequence of facts (titled by their store's name).
    """
    if not isinstance(results, Mapping):
        results = {Path(str(r.get("store", f"#{i}"))).name or f"#{i}": r for i, r in enumerate(results)}
    titles = list(results)
    rows = [["fact", *titles]]
    rows.append(["dates", *(f"{r.get('start', '?')}..{r.get('end', '?')}" for r in results.values())])
    rows.append(["symbols x sessions", *(f"{r.get('symbols', '?')} x {r.get('sessions', '?')}" for r in results.values())])
    rows.append(["signal (synthetic store's meta.json)", *(str(r.get("signal") or "-") for r in results.values())])
    for spec in (*FACTS, _ORACLE_FACT):
        cells = []
        for r in results.values():
            v = r.get(spec.key, math.nan)
            cells.append("nan" if v is None or not np.isfinite(v) else spec.fmt.format(v))
        rows.append([spec.label, *cells])
    widths = [max(len(row[j]) for row in rows) for j in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(widths[j]) if j == 0 else cell.rjust(widths[j]) for j, cell in enumerate(row))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
