"""Qlib's rolling in the schedule: steps in trading days (``step_days``) and the label horizon purged (``purge``)."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolling_calib.core.schedule import rolling_windows

DAYS = pd.bdate_range("2015-01-01", "2017-12-31")   # one bar a session, as a daily store


def test_step_days_cut_the_span_into_sessions_qlib_style():
    ws = rolling_windows(DAYS, initial_train_start="2015-01", start="2017-01", end="2017-03", step_days=20,
                         valid_months=2, mode="scratch")
    sessions = [int(((DAYS >= w.test.start) & (DAYS <= w.test.end)).sum()) for w in ws]
    assert sessions[:-1] == [20] * (len(ws) - 1) and 0 < sessions[-1] <= 20
    assert sum(sessions) == int(((DAYS >= "2017-01-01") & (DAYS <= "2017-03-31")).sum())
    w = ws[1]   # tests from its first session; valid = the 2 months before that date, train everything before
    assert w.test.start == DAYS[DAYS >= "2017-01-01"][20]
    assert w.valid.start == DAYS[DAYS >= w.test.start - pd.DateOffset(months=2)][0]
    assert w.valid.end == DAYS[DAYS < w.test.start][-1] and w.train.end == DAYS[DAYS < w.valid.start][-1]


def test_purge_drops_the_label_horizon_before_every_next_segment():
    plain = rolling_windows(DAYS, initial_train_start="2015-01", start="2017-01", end="2017-06", step_months=3)
    purged = rolling_windows(DAYS, initial_train_start="2015-01", start="2017-01", end="2017-06", step_months=3,
                             purge=2)
    for a, b in zip(plain, purged):
        assert a.test == b.test and a.valid.start == b.valid.start and a.fit.start == b.fit.start
        pos = DAYS.get_loc
        assert pos(a.fit.end) - pos(b.fit.end) == 2 and pos(a.valid.end) - pos(b.valid.end) == 2
        assert pos(a.train.end) - pos(b.train.end) == 2


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(0, 5), st.integers(0, 3), st.sampled_from(["finetune", "scratch"]))
def test_no_training_or_validation_bar_within_purge_of_the_next_segment(step, purge, valid, mode):
    if mode == "finetune":
        step = max(step, 5)   # fine-tuned on the new bars only: a step of a few sessions may hold none (refused)
    try:
        ws = rolling_windows(DAYS, initial_train_start="2015-01", start="2016-07", end="2016-12", step_days=step,
                             valid_months=valid, mode=mode, purge=purge)
    except ValueError as exc:   # a fine-tune window whose new bars the purge removes entirely is refused, by name
        assert mode == "finetune" and "the calendar has no bars in" in str(exc) and "purged" in str(exc), exc
        return
    pos = DAYS.get_loc
    for w in ws:
        after_train = w.valid.start if w.valid is not None else w.test.start
        assert pos(after_train) - pos(w.train.end) > purge and pos(after_train) - pos(w.fit.end) > purge
        if w.valid is not None:
            assert pos(w.test.start) - pos(w.valid.end) > purge
    for prev, nxt in zip(ws, ws[1:]):   # the test segments still tile the span
        assert pos(nxt.test.start) == pos(prev.test.end) + 1


def test_options_are_checked():
    with pytest.raises(ValueError, match=r"rolling.step_days: expected an integer in \[1, 25200\]"):
        rolling_windows(DAYS, initial_train_start="2015-01", start="2017-01", end="2017-03", step_days=0)
    with pytest.raises(ValueError, match=r"rolling.purge: expected 'auto' \(the label's look-ahead\) or an integer"):
        rolling_windows(DAYS, initial_train_start="2015-01", start="2017-01", end="2017-03", purge="two")
