"""The time-rolling calibrated quadratic loss (METHOD 2.2): hand-computed tables and a loop reference."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from rolling_calib.core.metrics import rolling_calibrated_quadratic_loss as rolling_cql

# Three months, two instruments. Residuals y - p:
#   Jan: A 1, A 3, B 0   -> pooled mean 4/3; A 2, B 0
#   Feb: A 3, B 1        -> pooled mean 2;   A 3, B 1
#   Mar: A 2, B 0
TS = pd.to_datetime(
    ["2015-01-05 09:31", "2015-01-20 15:59", "2015-01-30 10:00",
     "2015-02-02 09:31", "2015-02-27 12:00",
     "2015-03-02 09:31", "2015-03-31 15:59"]
)
INST = np.array(["A", "A", "B", "A", "B", "A", "B"])
P = np.array([0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 2.0])
Y = np.array([1.0, 3.0, 1.0, 4.0, 1.0, 2.0, 2.0])


def test_pooled_monthly_hand_computed():
    r = rolling_cql(P, Y, TS)
    # Feb: c = 4/3 -> 5/3, -1/3 -> squares 25/9 + 1/9; Mar: c = 2 -> 0, -2 -> 0 + 4
    assert r.cql == pytest.approx((26 / 9 + 4) / 4, rel=1e-14)
    assert r.ql_scored == pytest.approx((9 + 1 + 4 + 0) / 4, rel=1e-14)
    assert r.ql_all == pytest.approx((1 + 9 + 0 + 9 + 1 + 4 + 0) / 7, rel=1e-14)
    assert (r.n_scored, r.n_all) == (4, 7)
    t = r.table
    assert list(t["period"]) == ["2015-01", "2015-02", "2015-03"]
    assert list(t["start"]) == list(pd.to_datetime(["2015-01-01", "2015-02-01", "2015-03-01"]))
    assert list(t["end"]) == [TS[2], TS[4], TS[6]]
    assert list(t["rows"]) == [3, 2, 2]
    assert list(t["scored"]) == [False, True, True]
    np.testing.assert_allclose(t["bias"], [np.nan, 4 / 3, 2.0], rtol=1e-14)
    np.testing.assert_allclose(t["mean_residual"], [4 / 3, 2.0, 1.0], rtol=1e-14)
    np.testing.assert_allclose(t["ql"], [10 / 3, 5.0, 2.0], rtol=1e-14)
    np.testing.assert_allclose(t["cql"], [np.nan, 13 / 9, 2.0], rtol=1e-14)
    assert str(t["start"].dtype) == str(t["end"].dtype) == "datetime64[ns]"
    d = json.loads(json.dumps(r.to_dict()))
    assert d["periods"][0]["bias"] is None and d["periods"][1]["start"] == "2015-02-01T00:00:00"


def test_per_instrument_hand_computed():
    r = rolling_cql(P, Y, TS, instruments=INST, bias="per_instrument")
    # Feb: A 3 - 2 = 1, B 1 - 0 = 1; Mar: A 2 - 3 = -1, B 0 - 1 = -1 -> all squares 1
    assert r.cql == pytest.approx(1.0, rel=1e-14)
    np.testing.assert_allclose(r.table["bias"], [np.nan, 1.0, 2.0], rtol=1e-14)   # row-weighted mean c
    assert r.bias == "per_instrument"


def test_score_periods_by_label_and_position():
    by_label = rolling_cql(P, Y, TS, score_periods=["2015-03"])
    by_position = rolling_cql(P, Y, TS, score_periods=[2])
    assert by_label.cql == by_position.cql == pytest.approx(2.0)
    assert by_label.n_scored == 2
    assert list(by_label.table["scored"]) == [False, False, True]


def test_timezone_aware_timestamps_group_by_local_date():
    # 2015-02-01 03:00 UTC is 2015-01-31 22:00 in New York: it belongs to January there.
    ts = pd.DatetimeIndex(["2015-01-15 15:00", "2015-02-01 03:00", "2015-02-10 15:00"], tz="UTC")
    r = rolling_cql([0.0, 0.0, 0.0], [1.0, 3.0, 5.0], ts.tz_convert("America/New_York"))
    assert list(r.table["rows"]) == [2, 1]
    assert r.cql == pytest.approx((5 - 2) ** 2)


def test_weeks_start_on_monday():
    ts = pd.to_datetime(["2015-01-02", "2015-01-05", "2015-01-09", "2015-01-12"])   # Fri, Mon, Fri, Mon
    r = rolling_cql([0.0] * 4, [1.0, 2.0, 4.0, 0.0], ts, period="week")
    assert list(r.table["period"]) == ["2015-W01", "2015-W02", "2015-W03"]
    assert list(r.table["start"]) == list(pd.to_datetime(["2014-12-29", "2015-01-05", "2015-01-12"]))
    # W02 bias 1 -> residuals 1, 3; W03 bias 3 -> residual -3
    assert r.cql == pytest.approx((1 + 9 + 9) / 3)


def test_quarters():
    ts = pd.to_datetime(["2015-03-31", "2015-04-01", "2015-06-30"])
    r = rolling_cql([0.0] * 3, [1.0, 2.0, 0.0], ts, period="quarter")
    assert list(r.table["period"]) == ["2015Q1", "2015Q2"]
    assert r.cql == pytest.approx((1 + 1) / 2)


def test_n_trading_days_counts_distinct_dates_present():
    # dates Fri 2, Mon 5, Tue 6 (weekend absent): groups of 2 trading days -> {2, 5}, {6}
    ts = pd.to_datetime(["2015-01-02 10:00", "2015-01-02 11:00", "2015-01-05 10:00", "2015-01-06 10:00"])
    r = rolling_cql([0.0] * 4, [1.0, 1.0, 4.0, 0.0], ts, period=2)
    assert list(r.table["rows"]) == [3, 1]
    assert list(r.table["period"]) == ["2015-01-02..2015-01-05", "2015-01-06..2015-01-06"]
    assert r.cql == pytest.approx(4.0)   # bias 2 -> residual -2
    assert r.period == "2 trading days"


def test_missing_instrument_error_or_pooled_fallback():
    inst = INST.copy()
    inst[6] = "C"   # C appears in March only
    with pytest.raises(ValueError, match=r"instrument 'C' has rows in scored period 2015-03 but the month before it has none"):
        rolling_cql(P, Y, TS, instruments=inst, bias="per_instrument")
    r = rolling_cql(P, Y, TS, instruments=inst, bias="per_instrument", missing_instrument="pooled")
    # Feb as before (1 + 1); Mar: A 2 - 3 = -1, C uses pooled c = 2: 0 - 2 = -2
    assert r.cql == pytest.approx((1 + 1 + 1 + 4) / 4)


def test_gap_month_cannot_be_scored():
    ts = pd.to_datetime(["2015-01-10", "2015-03-10", "2015-04-10"])
    with pytest.raises(ValueError, match=r"period 2015-03 is scored but the month before it has no rows"):
        rolling_cql([0.0] * 3, [1.0, 2.0, 3.0], ts)
    r = rolling_cql([0.0] * 3, [1.0, 2.0, 3.0], ts, score_periods=["2015-04"])
    assert r.cql == pytest.approx(1.0)


def _loop_reference(p, y, ts, inst, per_instrument):
    """Straightforward per-month loop: the definition written out, for comparison."""
    df = pd.DataFrame({"p": p, "y": y, "month": pd.DatetimeIndex(ts).to_period("M"), "inst": inst})
    months = sorted(df["month"].unique())
    errors = []
    for prev, cur in zip(months, months[1:]):
        before, now = df[df["month"] == prev], df[df["month"] == cur]
        for _, row in now.iterrows():
            if per_instrument:
                sub = before[before["inst"] == row["inst"]]
                c = (sub["y"] - sub["p"]).mean()
            else:
                c = (before["y"] - before["p"]).mean()
            errors.append((row["y"] - row["p"] - c) ** 2)
    return float(np.mean(errors))


@pytest.mark.parametrize("per_instrument", [False, True])
def test_matches_loop_reference_on_shuffled_rows(per_instrument):
    rng = np.random.default_rng(7)
    n = 400
    days = pd.bdate_range("2015-01-01", "2015-06-30")
    ts = days[rng.integers(0, len(days), n)] + pd.to_timedelta(rng.integers(0, 390, n), unit="min")
    inst = rng.choice(["X", "Y", "Z"], n)
    inst[:18] = np.repeat(["X", "Y", "Z"], 6)        # every instrument in every month
    ts = ts.values.copy()
    ts[:18] = np.tile(pd.to_datetime([f"2015-0{m}-10" for m in range(1, 7)]).values, 3)
    p = rng.normal(size=n)
    y = p + rng.normal(loc=0.5, size=n) + (inst == "X")
    r = rolling_cql(p, y, ts, instruments=inst, bias="per_instrument" if per_instrument else "pooled")
    assert r.cql == pytest.approx(_loop_reference(p, y, ts, inst, per_instrument), rel=1e-12)
    assert list(r.table["period"]) == [f"2015-0{m}" for m in range(1, 7)]


def test_bias_window_of_previous_trading_days_hand_computed():
    # window 1: Feb's bias from 2015-01-30 (B, residual 0), Mar's from 2015-02-27 (B, residual 1)
    one = rolling_cql(P, Y, TS, bias_window=1)
    assert one.cql == pytest.approx(((3 - 0) ** 2 + (1 - 0) ** 2 + (2 - 1) ** 2 + (0 - 1) ** 2) / 4)
    assert one.bias_window == 1 and one.to_dict()["bias_window"] == 1
    # window 2: Feb from 01-20 (3) and 01-30 (0) -> 1.5; Mar from 02-02 (3) and 02-27 (1) -> 2
    two = rolling_cql(P, Y, TS, bias_window=2)
    assert two.cql == pytest.approx((1.5**2 + 0.5**2 + 0**2 + 2**2) / 4)
    np.testing.assert_allclose(two.table["bias"], [np.nan, 1.5, 2.0])
    # per instrument, window 1: A has no row on the day before Feb or Mar
    with pytest.raises(ValueError, match=r"instrument 'A' has rows in scored period 2015-02 but the 1 trading day\(s\) before it have none"):
        rolling_cql(P, Y, TS, instruments=INST, bias="per_instrument", bias_window=1)
    fallback = rolling_cql(P, Y, TS, instruments=INST, bias="per_instrument", bias_window=1, missing_instrument="pooled")
    assert fallback.cql == pytest.approx((9 + 1 + 1 + 1) / 4)
    # a long window uses all the history there is
    assert rolling_cql(P, Y, TS, bias_window=1000, score_periods=["2015-02"]).cql == rolling_cql(P, Y, TS, score_periods=["2015-02"]).cql


def test_bias_window_equal_to_trading_day_period_is_the_default_rule():
    rng = np.random.default_rng(3)
    days = pd.bdate_range("2015-01-01", periods=40)
    ts = days[np.sort(rng.integers(0, 40, 300))]
    inst = rng.choice(["X", "Y"], 300)
    p, y = rng.normal(size=300), rng.normal(size=300)
    for bias in ("pooled", "per_instrument"):
        base = rolling_cql(p, y, ts, instruments=inst, bias=bias, period=5, missing_instrument="pooled")
        window = rolling_cql(p, y, ts, instruments=inst, bias=bias, period=5, bias_window=5, missing_instrument="pooled")
        assert window.cql == pytest.approx(base.cql, rel=1e-13)
        pd.testing.assert_frame_equal(window.table, base.table, rtol=1e-13)
