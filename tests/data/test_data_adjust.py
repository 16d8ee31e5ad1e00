"""Dividend back-adjustment uses the close of the session right before the ex-date, never another day's."""

from __future__ import annotations

import numpy as np
import pytest

from data_prep.adjust import factor_series, read_adjustments


def _bars(days: list[str], closes: list[float]) -> tuple[np.ndarray, np.ndarray]:
    return np.array([f"{d}T15:59" for d in days], dtype="datetime64[m]"), np.array(closes, dtype=float)


def test_dividend_uses_the_close_of_the_session_before_the_ex_date():
    # Fri 2014-06-06 is the session before the Mon 2014-06-09 ex-date
    ts, close = _bars(["2014-06-05", "2014-06-06", "2014-06-09"], [600.0, 640.0, 90.0])
    factor = factor_series(ts, close, [(np.datetime64("2014-06-09"), 1.0, 3.29)], symbol="AAPL")
    assert factor.tolist() == pytest.approx([1 - 3.29 / 640.0, 1 - 3.29 / 640.0, 1.0])


def test_an_ex_date_after_the_last_bar_is_refused_instead_of_using_the_last_close():
    """The reported case: data ending 2014-05-30 and an ex-date of 2014-06-09 took the 05-30 close (-6.85%)."""
    ts, close = _bars(["2014-05-29", "2014-05-30"], [635.0, 633.0])
    with pytest.raises(ValueError, match=r"adjustments AAPL: dividend 3.29 ex 2014-06-09: the reference price is the "
                                         r"close of 2014-06-06 .*last bar before the ex-date is on 2014-05-30.*'factor'"):
        factor_series(ts, close, [(np.datetime64("2014-06-09"), 1.0, 3.29)], symbol="AAPL")


def test_a_gap_before_the_ex_date_is_refused():
    ts, close = _bars(["2014-06-04", "2014-06-09"], [600.0, 90.0])  # 06-05 and 06-06 missing
    with pytest.raises(ValueError, match="close of 2014-06-06"):
        factor_series(ts, close, [(np.datetime64("2014-06-09"), 1.0, 3.29)])


def test_a_given_factor_is_used_as_is(tmp_path):
    path = tmp_path / "actions.csv"
    path.write_text("symbol,date,split_ratio,dividend,factor\nAAPL,2014-06-09,7,3.29,0.1428\nAAPL,2014-08-07,,0.47,\n")
    events = read_adjustments(path)["AAPL"]
    assert events[0][3] == 0.1428 and np.isnan(events[1][3])
    ts, close = _bars(["2014-05-30"], [633.0])
    assert factor_series(ts, close, events[:1]).tolist() == [0.1428]
    bad = tmp_path / "bad.csv"
    bad.write_text("symbol,date,split_ratio,dividend,factor\nAAPL,2014-06-09,7,,-1\n")
    with pytest.raises(ValueError, match=r"bad.csv: line 2: field 'factor': expected a multiplier > 0, found '-1'"):
        read_adjustments(bad)


def test_split_without_dividend_needs_no_reference_close():
    ts, close = _bars(["2014-05-30"], [633.0])
    assert factor_series(ts, close, [(np.datetime64("2014-06-09"), 7.0, 0.0)]).tolist() == pytest.approx([1 / 7])
