"""NYSE minute calendar facts (exchange_calendars XNYS, Qlib's naive New York convention)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from data_prep.trading_calendar import FULL_SESSION_MINUTES, minute_of_session, session_minutes, sessions


def _dates(idx: pd.DatetimeIndex) -> list[str]:
    return sorted({str(d) for d in idx.date})


def test_hurricane_sandy_closure_2012_10_29_and_30():
    idx = session_minutes("2012-10-26", "2012-11-01")
    assert _dates(idx) == ["2012-10-26", "2012-10-31", "2012-11-01"]
    assert len(idx) == 3 * FULL_SESSION_MINUTES


def test_bush_day_of_mourning_2018_12_05_closed():
    s = sessions("2018-12-03", "2018-12-07")
    assert [str(d) for d in s.dates] == ["2018-12-03", "2018-12-04", "2018-12-06", "2018-12-07"]


def test_early_close_2013_07_03_ends_at_12_59_and_independence_day_closed():
    idx = session_minutes("2013-07-02", "2013-07-05")
    day = idx[idx.normalize() == pd.Timestamp("2013-07-03")]
    assert len(day) == 210
    assert (str(day[0]), str(day[-1])) == ("2013-07-03 09:30:00", "2013-07-03 12:59:00")
    assert "2013-07-04" not in _dates(idx)
    assert len(idx) == 390 + 210 + 390


@pytest.mark.parametrize("good_friday", ["2012-04-06", "2015-04-03", "2018-03-30"])
def test_good_friday_is_a_holiday(good_friday):
    assert good_friday not in _dates(session_minutes(pd.Timestamp(good_friday) - pd.Timedelta(days=3), good_friday))


def test_full_session_is_390_bars_labelled_0930_to_1559_naive():
    idx = session_minutes("2018-01-02", "2018-01-02")
    assert idx.tz is None
    assert len(idx) == 390
    assert (str(idx[0]), str(idx[-1])) == ("2018-01-02 09:30:00", "2018-01-02 15:59:00")
    assert np.all(np.diff(idx.asi8) == 60 * 10**9)
    assert minute_of_session(idx).tolist() == list(range(390))


def test_dst_change_keeps_new_york_local_times():
    # 2018-03-11 US clocks spring forward; bars stay 09:30 local on both sides
    idx = session_minutes("2018-03-09", "2018-03-12")
    firsts = idx[minute_of_session(idx) == 0]
    assert [str(t) for t in firsts] == ["2018-03-09 09:30:00", "2018-03-12 09:30:00"]


def test_full_2012_2018_span_counts():
    # sessions per year from the NYSE's published holiday lists (2012: Sandy, 2018: Bush mourning)
    s = sessions("2012-01-01", "2018-12-31")
    years = s.dates.astype("datetime64[Y]").astype(int) + 1970
    assert np.bincount(years - 2012).tolist() == [250, 252, 252, 252, 252, 251, 251]
    # 13:00 early closes: July 3rd, day after Thanksgiving, Christmas Eve when on a weekday
    assert set(s.n_minutes.tolist()) == {210, 390}
    assert [str(d) for d in s.dates[s.early_close]] == [
        "2012-07-03", "2012-11-23", "2012-12-24", "2013-07-03", "2013-11-29", "2013-12-24",
        "2014-07-03", "2014-11-28", "2014-12-24", "2015-11-27", "2015-12-24", "2016-11-25",
        "2017-07-03", "2017-11-24", "2018-07-03", "2018-11-23", "2018-12-24",
    ]  # fmt: skip
    assert len(session_minutes("2012-01-01", "2018-12-31")) == 1760 * 390 - 17 * 180 == 683_340


def test_bad_range_is_a_clear_value_error():
    with pytest.raises(ValueError, match="end: expected a date on or after start"):
        sessions("2018-02-01", "2018-01-01")
    with pytest.raises(ValueError, match="start: expected a date"):
        sessions("not-a-date", "2018-01-01")
