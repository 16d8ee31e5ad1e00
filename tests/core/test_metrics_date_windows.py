"""The window of every date (``_date_windows``: runs of rows of one date and window) against a
row-by-row implementation, on rows in time order and shuffled, with and without a time zone."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rolling_calib.core import rolling_engine as E


def _inputs(ts, windows):
    n = len(ts)
    clock = E._clock(ts, n)
    table = E._day_table(np.zeros(n), np.ones(n), clock, None)
    return clock, table


def _row_by_row(windows, clock, table):
    """Every row's date and window code; the date's window must be the same for all its rows."""
    codes, names = pd.factorize(np.asarray(windows), use_na_sentinel=True)
    day = clock.wall(0, len(clock.ticks)) // clock.per_day
    dates = np.searchsorted(table.days, day)
    out = np.full(len(table.days), -1, dtype=np.int64)
    for d, c in zip(dates, codes):
        if c < 0 or (out[d] >= 0 and out[d] != c):
            return None, names
        out[d] = c
    return out, np.asarray(names)


def _case(rng, tz, ids_kind):
    days = pd.bdate_range("2021-01-04", periods=25)
    minutes = [d + pd.Timedelta(hours=14, minutes=int(m)) for d in days for m in rng.choice(300, 4, replace=False)]
    ts = pd.DatetimeIndex(sorted(minutes))
    if tz:
        ts = ts.tz_localize("UTC").tz_convert(tz)
    per_date = np.repeat(np.arange(len(days)) // 6, 1)   # a window per 6 dates
    date_of_row = np.repeat(np.arange(len(days)), 4)
    windows = per_date[date_of_row]
    if ids_kind == "str":
        windows = np.array([f"w{w}" for w in windows], dtype=object)
    elif ids_kind == "float":
        windows = windows.astype(float) * 1.5
    return ts, windows


@pytest.mark.parametrize("tz", [None, "America/New_York"])
@pytest.mark.parametrize("ids_kind", ["int", "str", "float"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_date_windows_match_row_by_row(tz, ids_kind, shuffle):
    rng = np.random.default_rng(1)
    ts, windows = _case(rng, tz, ids_kind)
    if shuffle:
        perm = rng.permutation(len(ts))
        ts, windows = ts[perm], windows[perm]
    clock, table = _inputs(ts, windows)
    got, names = E._date_windows(windows, clock, table)
    want, want_names = _row_by_row(windows, clock, table)
    np.testing.assert_array_equal(got, want)
    assert list(names) == list(want_names)   # first-seen order


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_date_of_two_windows_and_missing_ids_are_refused(shuffle):
    rng = np.random.default_rng(2)
    ts, windows = _case(rng, None, "float")
    windows = windows.copy()
    windows[5] = windows[0] + 7.0          # one row of date 1 in another window
    order = rng.permutation(len(ts)) if shuffle else np.arange(len(ts))
    clock, table = _inputs(ts[order], windows[order])
    with pytest.raises(ValueError, match=r"date 2021-01-05 has rows of windows"):
        E._date_windows(windows[order], clock, table)
    windows[5] = np.nan
    with pytest.raises(ValueError, match=f"missing value at position {int(np.flatnonzero(order == 5)[0])}"):
        E._date_windows(windows[order], clock, table)
