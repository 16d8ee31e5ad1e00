"""The NYSE minute calendar in Qlib's convention.

Source of truth is ``exchange_calendars``' ``XNYS`` calendar: its sessions carry every
holiday, every unscheduled closure (e.g. Hurricane Sandy, 2012-10-29/30; the national day
of mourning for President G. H. W. Bush, 2018-12-05) and every early close (13:00, e.g.
2013-07-03).

Convention (Qlib's minute convention)
-------------------------------------
* Times are **naive New York local times** (no zone), as Qlib's ``calendars/1min.txt``
  stores them.
* A bar is labelled by the minute it **starts**: a full session has 390 bars,
  09:30, 09:31, ..., 15:59; an early-close session (13:00) has 210 bars, 09:30 ... 12:59.
* A vendor's **16:00 bar** (or 13:00 on an early-close day) is the closing-auction print
  that happens at the close, not a one-minute trading interval. The policy applied
  everywhere (ingest and store) is: it is **outside the session** and is reported as
  ``closing_auction`` (a separate anomaly kind, so it can be told apart from genuine
  after-hours prints); with ``--repair`` it is dropped, and counted. See
  :mod:`data_prep.ingest`.
* The store's calendar is the exchange's minutes over the requested date range, never the
  union of the timestamps found in files.

Example
-------
>>> idx = session_minutes("2013-07-03", "2013-07-03")
>>> len(idx), str(idx[0]), str(idx[-1])
(210, '2013-07-03 09:30:00', '2013-07-03 12:59:00')
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = [
    "EXCHANGE",
    "FULL_SESSION_MINUTES",
    "Sessions",
    "sessions",
    "session_minutes",
    "minute_of_session",
]

#: exchange_calendars code of the New York Stock Exchange.
EXCHANGE = "XNYS"
#: bars in a full regular session (09:30 .. 15:59).
FULL_SESSION_MINUTES = 390
_TZ = "America/New_York"


@functools.lru_cache(maxsize=4)
def _xnys(first_year: int, last_year: int):
    import exchange_calendars as xcals

    return xcals.get_calendar(EXCHANGE, start=f"{first_year}-01-01", end=f"{last_year}-12-31")


def _calendar_for(start: pd.Timestamp, end: pd.Timestamp):
    # A fixed wide span keeps the cache hit rate high; widen when asked for more.
    first = min(1990, start.year)
    last = max(2035, end.year)
    return _xnys(first, last)


@dataclass(frozen=True)
class Sessions:
    """Trading sessions of a date range, in New York local time.

    Attributes
    ----------
    dates : numpy.ndarray of datetime64[D]
        Session dates.
    open_local, close_local : numpy.ndarray of datetime64[m]
        Naive New York local open and close of every session (close is exclusive: the last
        bar starts one minute before it).
    n_minutes : numpy.ndarray of int64
        Bars per session (390 on a full day, 210 on a 13:00 early close).
    """

    dates: np.ndarray
    open_local: np.ndarray
    close_local: np.ndarray
    n_minutes: np.ndarray

    def __len__(self) -> int:
        return len(self.dates)

    @property
    def early_close(self) -> np.ndarray:
        """Boolean mask of sessions shorter than a full day."""
        return self.n_minutes < FULL_SESSION_MINUTES


def _to_date(value, name: str) -> pd.Timestamp:
    try:
        ts = pd.Timestamp(value)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name}: expected a date like '2012-01-03', found {value!r}") from exc
    if ts.tzinfo is not None:
        ts = ts.tz_convert(_TZ).tz_localize(None)
    return ts.normalize()


def sessions(start, end) -> Sessions:
    """Return the NYSE sessions whose date lies in ``[start, end]`` (both inclusive).

    Parameters
    ----------
    start, end : date-like
        First and last calendar date (anything ``pandas.Timestamp`` accepts).

    Returns
    -------
    Sessions
        Dates, naive New York open/close and the number of one-minute bars per session,
        ``n = (close - open) / 1 min``.

    Examples
    --------
    >>> s = sessions("2012-10-26", "2012-11-01")   # Hurricane Sandy closed 10-29 and 10-30
    >>> [str(d) for d in s.dates]
    ['2012-10-26', '2012-10-31', '2012-11-01']
    """
    start_ts, end_ts = _to_date(start, "start"), _to_date(end, "end")
    if end_ts < start_ts:
        raise ValueError(f"end: expected a date on or after start {start_ts.date()}, found {end_ts.date()}")
    cal = _calendar_for(start_ts, end_ts)
    sched = cal.schedule.loc[start_ts:end_ts]
    open_local = sched["open"].dt.tz_convert(_TZ).dt.tz_localize(None).to_numpy().astype("datetime64[m]")
    close_local = sched["close"].dt.tz_convert(_TZ).dt.tz_localize(None).to_numpy().astype("datetime64[m]")
    dates = sched.index.to_numpy().astype("datetime64[D]")
    n = (close_local - open_local).astype(np.int64)
    return Sessions(dates=dates, open_local=open_local, close_local=close_local, n_minutes=n)


def _minutes_of(sess: Sessions) -> np.ndarray:
    total = int(sess.n_minutes.sum())
    if total == 0:
        return np.empty(0, dtype="datetime64[m]")
    starts = np.repeat(sess.open_local, sess.n_minutes)
    offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(sess.n_minutes) - sess.n_minutes, sess.n_minutes)
    return starts + offsets.astype("timedelta64[m]")


def session_minutes(start, end) -> pd.DatetimeIndex:
    """Return every one-minute bar of the NYSE sessions in ``[start, end]``.

    Bars are naive New York local times labelled by their start minute: 09:30 .. 15:59
    (390 per full session) or 09:30 .. 12:59 on 13:00 early closes (210).

    Parameters
    ----------
    start, end : date-like
        First and last calendar date, inclusive.

    Returns
    -------
    pandas.DatetimeIndex
        Sorted, unique, naive (``datetime64[ns]``), named ``"datetime"``.

    Examples
    --------
    >>> idx = session_minutes("2018-12-04", "2018-12-06")   # 12-05: Bush day of mourning
    >>> len(idx) == 2 * 390
    True
    """
    minutes = _minutes_of(sessions(start, end))
    return pd.DatetimeIndex(minutes.astype("datetime64[ns]"), name="datetime")


def minute_of_session(index: pd.DatetimeIndex) -> np.ndarray:
    """Return the 0-based bar number within its session (09:30 -> 0, 15:59 -> 389).

    Example
    -------
    >>> minute_of_session(pd.DatetimeIndex(["2018-01-02 09:30", "2018-01-02 15:59"])).tolist()
    [0, 389]
    """
    values = np.asarray(index, dtype="datetime64[m]").astype(np.int64)
    minute_of_day = values % (24 * 60)
    return (minute_of_day - (9 * 60 + 30)).astype(np.int64)
