"""Rolling schedule: exact minute boundaries on the real NYSE calendar, tiling, modes."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as hs

from data_prep import session_minutes
from rolling_calib.core.schedule import (
    CoverageError,
    Segment,
    Window,
    check_coverage,
    parse_month,
    rolling_windows,
)


@pytest.fixture(scope="module")
def calendar() -> pd.DatetimeIndex:
    return session_minutes("2014-07-01", "2016-03-31")


def test_paper_schedule_boundaries_are_exact_minutes(calendar):
    ws = rolling_windows(calendar, initial_train_start="2014-07", start="2015-01", end="2015-12", step_months=6)
    assert len(ws) == 2
    w0, w1 = ws
    # 2015-01-01 is a holiday: the first bar is 2015-01-02 09:30; 2015-06-30 closes at 16:00 -> last bar 15:59
    assert w0.test == Segment(pd.Timestamp("2015-01-02 09:30"), pd.Timestamp("2015-06-30 15:59"))
    assert w1.test == Segment(pd.Timestamp("2015-07-01 09:30"), pd.Timestamp("2015-12-31 15:59"))
    # 2014-12-24 is an early close (13:00), 2014-12-31 a full day: valid ends at the last bar of December
    assert w0.valid == Segment(pd.Timestamp("2014-12-01 09:30"), pd.Timestamp("2014-12-31 15:59"))
    assert w0.train == Segment(pd.Timestamp("2014-07-01 09:30"), pd.Timestamp("2014-11-28 12:59"))  # Black Friday
    # fine-tune: window 1 trains on the months since window 0's training ended (Dec 2014 .. May 2015)
    assert w1.train == Segment(pd.Timestamp("2014-12-01 09:30"), pd.Timestamp("2015-05-29 15:59"))
    assert w1.fit.start == pd.Timestamp("2014-07-01 09:30")
    assert w1.valid.start == pd.Timestamp("2015-06-01 09:30")


def test_no_bar_lost_between_test_segments(calendar):
    ws = rolling_windows(calendar, initial_train_start="2014-07", start="2015-01", end="2016-02", step_months=5)
    covered = sum(int(w.test.contains(calendar).sum()) for w in ws)
    expected = int(((calendar >= "2015-01-01") & (calendar < "2016-03-01")).sum())
    assert covered == expected
    assert [w.test.end.month for w in ws] == [5, 10, 2]  # last window clipped to the period end


def test_scratch_expanding_and_sliding(calendar):
    exp = rolling_windows(calendar, initial_train_start="2014-07", start="2015-01", end="2015-12",
                          step_months=3, mode="scratch")
    assert all(w.train.start == pd.Timestamp("2014-07-01 09:30") for w in exp)
    sl = rolling_windows(calendar, initial_train_start="2014-07", start="2015-01", end="2015-12",
                         step_months=3, mode="scratch", train_window="sliding", sliding_months=4)
    assert [w.train.start.strftime("%Y-%m") for w in sl] == ["2014-08", "2014-11", "2015-02", "2015-05"]
    assert all(w.train == w.fit for w in sl)


def test_finetune_on_window_uses_expanding_span(calendar):
    ws = rolling_windows(calendar, initial_train_start="2014-07", start="2015-01", end="2015-12",
                         step_months=6, finetune_on="window")
    assert ws[1].train == ws[1].fit and ws[1].train.start == pd.Timestamp("2014-07-01 09:30")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"start": "2015-01-15"}, "first day of a month"),
        ({"end": "2015-12-30"}, "last day of a month"),
        ({"step_months": 0}, "rolling.step_months"),
        ({"mode": "warm"}, "rolling.mode"),
        ({"train_window": "sliding"}, "rolling.sliding_months"),
        ({"initial_train_start": "2014-12"}, "no training month"),
        ({"valid_months": -1}, "rolling.valid_months"),
        ({"initial_train_start": "2014-01"}, "before the store's first bar"),
        ({"end": "2016-06"}, "after the store's last bar"),
        ({"start": "2016-01", "end": "2015-12"}, "before rolling.start"),
    ],
)
def test_bad_arguments_name_the_field(calendar, kwargs, message):
    args = dict(initial_train_start="2014-07", start="2015-01", end="2015-12")
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        rolling_windows(calendar, **args)


def test_check_coverage_finds_gap_and_overlap(calendar):
    ws = rolling_windows(calendar, initial_train_start="2014-07", start="2015-01", end="2015-12", step_months=6)
    shifted = Window(1, ws[1].fit, ws[1].train, ws[1].valid, Segment(ws[1].test.start + pd.Timedelta("1min"), ws[1].test.end))
    with pytest.raises(CoverageError, match="gap between window 0"):
        check_coverage([ws[0], shifted], calendar)
    early = Window(1, ws[0].fit, ws[0].train, ws[0].valid, Segment(ws[0].test.end, ws[1].test.end))
    with pytest.raises(CoverageError, match="overlap"):
        check_coverage([ws[0], early], calendar)
    with pytest.raises(CoverageError, match="last test bar"):
        check_coverage(ws[:1], calendar, start="2015-01", end="2015-12")


def test_window_round_trips_through_dict(calendar):
    w = rolling_windows(calendar, initial_train_start="2014-07", start="2015-01", end="2015-03", step_months=3)[0]
    assert Window.from_dict(w.to_dict()) == w


def test_parse_month_accepts_dates_on_edges():
    import datetime as dt

    assert str(parse_month(dt.date(2015, 1, 1), field="x")) == "2015-01"
    assert str(parse_month("2016-02-29", field="x", edge="end")) == "2016-02"
    with pytest.raises(ValueError, match="x: expected a month"):
        parse_month(2015, field="x")


@settings(max_examples=40, deadline=None)
@given(
    start=hs.integers(0, 8),
    length=hs.integers(1, 10),
    step=hs.integers(1, 7),
    valid=hs.integers(1, 3),
    mode=hs.sampled_from(["finetune", "scratch"]),
)
def test_property_test_segments_tile_every_bar(start, length, step, valid, mode):
    assume(start + length <= 15)  # the calendar ends 2016-03
    cal = _CAL
    first = pd.Period("2015-01", "M") + start
    last = first + length - 1
    ws = rolling_windows(cal, initial_train_start="2014-07", start=str(first), end=str(last),
                         step_months=step, valid_months=valid, mode=mode)
    inside = (cal >= first.start_time) & (cal < (last + 1).start_time)
    hits = sum(w.test.contains(cal).astype(int) for w in ws)
    assert (hits[inside] == 1).all() and (hits[~inside] == 0).all()
    for w in ws:
        assert w.train.end < w.valid.start <= w.valid.end < w.test.start


_CAL = session_minutes("2014-07-01", "2016-03-31")[::7]


def test_no_validation_months_and_partial_last_month():
    cal = session_minutes("2018-02-16", "2018-04-20")  # the real 2018 sample's span
    ws = rolling_windows(cal, initial_train_start="2018-02", start="2018-03", end="2018-04",
                         step_months=1, valid_months=0)
    assert [w.valid for w in ws] == [None, None]
    assert ws[0].train == Segment(pd.Timestamp("2018-02-16 09:30"), pd.Timestamp("2018-02-28 15:59"))
    assert ws[1].train == Segment(pd.Timestamp("2018-03-01 09:30"), pd.Timestamp("2018-03-29 15:59"))
    assert ws[1].test == Segment(pd.Timestamp("2018-04-02 09:30"), pd.Timestamp("2018-04-20 15:59"))
    assert Window.from_dict(ws[0].to_dict()) == ws[0]
