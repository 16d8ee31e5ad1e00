"""The time-rolling calibrated quadratic loss (METHOD 2.2): hand-computed tables and a loop reference."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rolling_calib.core import rolling_engine
from rolling_calib.core.calibration import Calibration
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
    r = rolling_cql(P, Y, TS, instruments=INST, calibration=Calibration(bias="per_instrument"))
    # Feb: A 3 - 2 = 1, B 1 - 0 = 1; Mar: A 2 - 3 = -1, B 0 - 1 = -1 -> all squares 1
    assert r.cql == pytest.approx(1.0, rel=1e-14)
    np.testing.assert_allclose(r.table["bias"], [np.nan, 1.0, 2.0], rtol=1e-14)   # row-weighted mean c
    assert r.calibration.bias == "per_instrument"


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
    r = rolling_cql([0.0] * 4, [1.0, 2.0, 4.0, 0.0], ts, calibration=Calibration(period="week"))
    assert list(r.table["period"]) == ["2015-W01", "2015-W02", "2015-W03"]
    assert list(r.table["start"]) == list(pd.to_datetime(["2014-12-29", "2015-01-05", "2015-01-12"]))
    # W02 bias 1 -> residuals 1, 3; W03 bias 3 -> residual -3
    assert r.cql == pytest.approx((1 + 9 + 9) / 3)


def test_quarters():
    ts = pd.to_datetime(["2015-03-31", "2015-04-01", "2015-06-30"])
    r = rolling_cql([0.0] * 3, [1.0, 2.0, 0.0], ts, calibration=Calibration(period="quarter"))
    assert list(r.table["period"]) == ["2015Q1", "2015Q2"]
    assert r.cql == pytest.approx((1 + 1) / 2)


def test_n_trading_days_counts_distinct_dates_present():
    # dates Fri 2, Mon 5, Tue 6 (weekend absent): groups of 2 trading days -> {2, 5}, {6}
    ts = pd.to_datetime(["2015-01-02 10:00", "2015-01-02 11:00", "2015-01-05 10:00", "2015-01-06 10:00"])
    r = rolling_cql([0.0] * 4, [1.0, 1.0, 4.0, 0.0], ts, calibration=Calibration(period=2))
    assert list(r.table["rows"]) == [3, 1]
    assert list(r.table["period"]) == ["2015-01-02..2015-01-05", "2015-01-06..2015-01-06"]
    assert r.cql == pytest.approx(4.0)   # bias 2 -> residual -2
    assert r.rule == "2 trading days"


def test_missing_instrument_error_or_pooled_fallback():
    inst = INST.copy()
    inst[6] = "C"   # C appears in March only
    with pytest.raises(ValueError, match=r"instrument 'C' has rows in scored period 2015-03 but the month before it has none"):
        rolling_cql(P, Y, TS, instruments=inst, calibration=Calibration(bias="per_instrument"))
    r = rolling_cql(P, Y, TS, instruments=inst, calibration=Calibration(bias="per_instrument", missing_instrument="pooled"))
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
    r = rolling_cql(p, y, ts, instruments=inst,
                    calibration=Calibration(bias="per_instrument" if per_instrument else "pooled"))
    assert r.cql == pytest.approx(_loop_reference(p, y, ts, inst, per_instrument), rel=1e-12)
    assert list(r.table["period"]) == [f"2015-0{m}" for m in range(1, 7)]


def test_bias_window_of_previous_trading_days_hand_computed():
    # window 1: Feb's bias from 2015-01-30 (B, residual 0), Mar's from 2015-02-27 (B, residual 1)
    one = rolling_cql(P, Y, TS, calibration=Calibration(bias_window=1))
    assert one.cql == pytest.approx(((3 - 0) ** 2 + (1 - 0) ** 2 + (2 - 1) ** 2 + (0 - 1) ** 2) / 4)
    assert one.calibration.bias_window == 1 and one.to_dict()["bias_window"] == 1
    # window 2: Feb from 01-20 (3) and 01-30 (0) -> 1.5; Mar from 02-02 (3) and 02-27 (1) -> 2
    two = rolling_cql(P, Y, TS, calibration=Calibration(bias_window=2))
    assert two.cql == pytest.approx((1.5**2 + 0.5**2 + 0**2 + 2**2) / 4)
    np.testing.assert_allclose(two.table["bias"], [np.nan, 1.5, 2.0])
    # per instrument, window 1: A has no row on the day before Feb or Mar
    with pytest.raises(ValueError, match=r"instrument 'A' has rows in scored period 2015-02 but the 1 trading day\(s\) before it have none"):
        rolling_cql(P, Y, TS, instruments=INST, calibration=Calibration(bias="per_instrument", bias_window=1))
    fallback = rolling_cql(P, Y, TS, instruments=INST,
                           calibration=Calibration(bias="per_instrument", bias_window=1, missing_instrument="pooled"))
    assert fallback.cql == pytest.approx((9 + 1 + 1 + 1) / 4)
    # a long window uses all the history there is
    assert rolling_cql(P, Y, TS, calibration=Calibration(bias_window=1000), score_periods=["2015-02"]).cql == rolling_cql(P, Y, TS, score_periods=["2015-02"]).cql


def test_bias_window_equal_to_trading_day_period_is_the_default_rule():
    rng = np.random.default_rng(3)
    days = pd.bdate_range("2015-01-01", periods=40)
    ts = days[np.sort(rng.integers(0, 40, 300))]
    inst = rng.choice(["X", "Y"], 300)
    p, y = rng.normal(size=300), rng.normal(size=300)
    for bias in ("pooled", "per_instrument"):
        base = rolling_cql(p, y, ts, instruments=inst, calibration=Calibration(bias=bias, period=5, missing_instrument="pooled"))
        window = rolling_cql(p, y, ts, instruments=inst,
                             calibration=Calibration(bias=bias, period=5, bias_window=5, missing_instrument="pooled"))
        assert window.cql == pytest.approx(base.cql, rel=1e-13)
        pd.testing.assert_frame_equal(window.table, base.table, rtol=1e-13)


# ---------------------------------------------------------------------------
# The per-date sufficient statistics (one blocked pass) against a row-wise reference
# ---------------------------------------------------------------------------
def _rowwise_reference(p, y, ts, inst, *, period, bias, bias_window, missing_instrument):
    """The definition row by row: each row of a scored period gets its ``c`` and its ``(y - p - c)^2``.

    Periods come from pandas calendar periods (months, ISO weeks, quarters) or from ranking the
    distinct dates present (N trading days). Returns ``(cql, ql_scored, ql_all, table)``; raises
    ``IndexError`` when there is one period only and ``LookupError`` where a scored period (every
    period but the first) has no rows to fit on.
    """
    ts = pd.DatetimeIndex(ts)
    if ts.tz is not None:
        ts = ts.tz_localize(None)
    date = ts.normalize()
    dates = np.array(sorted(set(date)))
    day_rank = pd.Series(np.arange(len(dates)), index=dates)[date].to_numpy()
    if isinstance(period, int):
        key = day_rank // period
        previous_key = {k: k - 1 for k in set(key)}
    else:
        freq = {"month": "M", "week": "W-SUN", "quarter": "Q"}[period]
        key = ts.to_period(freq)
        previous_key = {k: k - 1 for k in set(key)}
    order = sorted(set(key))
    if len(order) < 2:
        raise IndexError("one period only")
    resid = y - p
    sq_cal, sq_scored, rows = [], [], []
    for pos, k in enumerate(order):
        now = np.flatnonzero(key == k)
        row = {"rows": now.size, "mean_residual": resid[now].mean(), "ql": np.mean(resid[now] ** 2),
               "end": ts[now].max(), "bias": np.nan, "cql": np.nan, "scored": pos > 0}
        if pos > 0:
            if bias_window is None:
                source = key == previous_key[k]
            else:
                first = day_rank[now].min()
                source = (day_rank < first) & (day_rank >= first - bias_window)
            if not source.any():
                raise LookupError(k)
            pooled_c = resid[source].mean()
            c = np.empty(now.size)
            for j, i in enumerate(now):
                mine = source & (inst == inst[i])
                if bias == "pooled":
                    c[j] = pooled_c
                elif mine.any():
                    c[j] = resid[mine].mean()
                elif missing_instrument == "pooled":
                    c[j] = pooled_c
                else:
                    raise LookupError(k)
            errors = (resid[now] - c) ** 2            # row by row
            row.update(bias=c.mean(), cql=errors.mean())
            sq_cal.extend(errors)
            sq_scored.extend(resid[now] ** 2)
        rows.append(row)
    return float(np.mean(sq_cal)), float(np.mean(sq_scored)), float(np.mean(resid**2)), pd.DataFrame(rows)


def _check_against_reference(p, y, ts, inst, *, instruments=None, rtol=1e-12, **kwargs):
    cal = Calibration(**kwargs)
    try:
        expected = _rowwise_reference(p, y, ts, inst, **kwargs)
    except IndexError:
        with pytest.raises(ValueError, match="every row falls in one"):
            rolling_cql(p, y, ts, instruments=inst if instruments is None else instruments, calibration=cal)
        return None
    except LookupError:
        with pytest.raises(ValueError, match="no rows to fit a bias on|no per-instrument bias can be fitted"):
            rolling_cql(p, y, ts, instruments=inst if instruments is None else instruments, calibration=cal)
        return None
    got = rolling_cql(p, y, ts, instruments=inst if instruments is None else instruments, calibration=cal)
    cql, ql_scored, ql_all, table = expected
    # CQL comes from per-period sums (sum r^2 - 2 b sum r + n b^2): when the calibrated residuals
    # nearly vanish, its error is rounding of the squared residuals' scale, not of the result
    assert got.cql == pytest.approx(cql, rel=rtol, abs=1e-13 * max(ql_scored, 1e-300))
    assert got.ql_scored == pytest.approx(ql_scored, rel=rtol)
    assert got.ql_all == pytest.approx(ql_all, rel=rtol)
    assert got.n_all == len(p) and got.n_scored == int(table["rows"][1:].sum())
    t = got.table
    assert list(t["rows"]) == list(table["rows"]) and list(t["scored"]) == list(table["scored"])
    assert list(t["end"]) == list(table["end"])
    scale = max(1.0, float(np.max((y - p) ** 2)))
    for column in ("mean_residual", "bias", "ql", "cql"):
        np.testing.assert_allclose(t[column], table[column], rtol=rtol, atol=rtol * 0.1 * scale, err_msg=column)
    return got


def _random_panel(rng, n, *, days=90, instruments="XYZW", ordered=False):
    dates = pd.bdate_range("2015-01-01", periods=days)
    ts = dates[rng.integers(0, len(dates), n)] + pd.to_timedelta(rng.integers(0, 86_400, n), unit="s")
    if ordered:
        ts = ts.sort_values()
    inst = rng.choice(list(instruments), n)
    p = rng.normal(size=n)
    y = p + rng.normal(loc=0.3, size=n) + (inst == instruments[0])
    return p, y, ts.values, inst


RULES = ["month", "week", "quarter", 1, 7]


@pytest.mark.parametrize("block", [None, 64])
@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("period", RULES)
def test_matches_rowwise_reference_every_rule(period, ordered, block, monkeypatch):
    """Every period rule x bias mode x bias source, rows in time order or shuffled, one block or many."""
    if block is not None:
        monkeypatch.setattr(rolling_engine, "_BLOCK", block)
    rng = np.random.default_rng(11)
    p, y, ts, inst = _random_panel(rng, 1500, days=200 if period == "quarter" else 90, ordered=ordered)
    for bias in ("pooled", "per_instrument"):
        for window in (None, 1, 4):
            for fallback in ("error", "pooled"):
                _check_against_reference(p, y, ts, inst, period=period, bias=bias, bias_window=window,
                                         missing_instrument=fallback)


@pytest.mark.parametrize(
    "convert",
    [
        pytest.param(lambda ts, inst: (ts, pd.Categorical(inst)), id="categorical"),
        pytest.param(lambda ts, inst: (pd.Series(ts), pd.Series(inst, dtype="category")), id="series"),
        pytest.param(lambda ts, inst: (ts.astype("datetime64[s]"), pd.factorize(inst)[0] + 7), id="seconds-int-ids"),
        pytest.param(lambda ts, inst: (ts.astype("datetime64[us]"), pd.factorize(inst)[0].astype(np.uint8)), id="us-uint8"),
        pytest.param(lambda ts, inst: (pd.DatetimeIndex(ts).tz_localize("America/New_York"), list(inst)), id="tz-list"),
        pytest.param(lambda ts, inst: ([str(t) for t in pd.DatetimeIndex(ts)], inst.astype(object)), id="strings"),
    ],
)
def test_input_kinds_give_the_same_result(convert, monkeypatch):
    """Timestamps and ids are read without copies where possible; the numbers do not depend on it."""
    monkeypatch.setattr(rolling_engine, "_BLOCK", 97)
    rng = np.random.default_rng(5)
    p, y, ts, inst = _random_panel(rng, 800)
    ts_in, inst_in = convert(ts, inst)
    for period in ("month", 5):
        for bias in ("pooled", "per_instrument"):
            kwargs = {"period": period, "bias": bias, "bias_window": None, "missing_instrument": "pooled"}
            got = rolling_cql(p, y, ts_in, instruments=inst_in, calibration=Calibration(**kwargs))
            base = _check_against_reference(p, y, ts, inst, **kwargs)
            assert got.cql == pytest.approx(base.cql, rel=1e-13)
            pd.testing.assert_frame_equal(got.table, base.table, rtol=1e-13)


def test_missing_instrument_error_names_the_first_seen_instrument():
    # D and E (ids given as categories in reverse order) have no rows in January; D appears first
    ts = pd.to_datetime(["2015-01-05", "2015-01-06", "2015-02-02", "2015-02-03", "2015-02-04"])
    inst = ["A", "A", "A", "D", "E"]
    for ids in (inst, pd.Categorical(inst, categories=["E", "D", "A"])):
        with pytest.raises(ValueError, match=r"instrument 'D' has rows in scored period 2015-02 .* \(2 such"):
            rolling_cql([0.0] * 5, [1.0] * 5, ts, instruments=ids, calibration=Calibration(bias="per_instrument"))


@pytest.mark.parametrize("dense_cells", [None, 0])
def test_dates_far_apart_and_large_offsets_stay_exact(dense_cells, monkeypatch):
    """Few dates over centuries (dates numbered before the pass) and residuals far from zero.

    With residuals near 1e6 and spread near 1 the rounding of any mean (ours or the reference's) is
    about 1e-10, so the comparison allows 1e-8: what must not happen is the loss of all digits that
    sums of squares (sum r^2 - n mean^2) would suffer here.
    """
    if dense_cells is not None:  # number the dates present before the pass, however few cells
        monkeypatch.setattr(rolling_engine, "_MAX_DENSE_CELLS", dense_cells)
    ts = pd.to_datetime(["1800-01-02", "1800-01-03", "1800-02-03", "2200-03-01", "2200-04-01", "2200-04-02"])
    inst = np.array(["A", "B", "A", "B", "A", "B"])
    rng = np.random.default_rng(2)
    p = rng.normal(size=6)
    y = p + 1e6 + rng.normal(size=6)
    for bias in ("pooled", "per_instrument"):
        _check_against_reference(p, y, ts.values, inst, period="month", bias=bias, bias_window=2,
                                 missing_instrument="pooled", rtol=1e-8)
    # a shift of 1e6 in every residual leaves CQL as it was, to the rounding of the residuals themselves
    far = rolling_cql(p, y, ts, score_periods=[1, 3], calibration=Calibration(bias_window=2))
    near = rolling_cql(p, y - 1e6, ts, score_periods=[1, 3], calibration=Calibration(bias_window=2))
    assert far.cql == pytest.approx(near.cql, rel=1e-8)


@st.composite
def _panels(draw):
    n = draw(st.integers(min_value=2, max_value=60))
    day = draw(hnp.arrays(np.int64, n, elements=st.integers(0, 120)))
    second = draw(hnp.arrays(np.int64, n, elements=st.integers(0, 86_399)))
    inst = draw(hnp.arrays(np.int64, n, elements=st.integers(0, 3)))
    p = draw(hnp.arrays(np.float64, n, elements=st.floats(-10, 10)))
    y = draw(hnp.arrays(np.float64, n, elements=st.floats(-10, 10)))
    ts = (np.datetime64("2015-01-01", "s") + day * 86_400 + second).astype("datetime64[ns]")
    return p, y, ts, np.array(["a", "b", "c", "d"])[inst]


@settings(max_examples=150, deadline=None)
@given(panel=_panels(), period=st.sampled_from(RULES), bias=st.sampled_from(["pooled", "per_instrument"]),
       window=st.sampled_from([None, 1, 3]), fallback=st.sampled_from(["error", "pooled"]),
       block=st.sampled_from([3, 1 << 18]))
def test_matches_rowwise_reference_hypothesis(panel, period, bias, window, fallback, block):
    p, y, ts, inst = panel
    saved = rolling_engine._BLOCK
    rolling_engine._BLOCK = block
    try:
        _check_against_reference(p, y, ts, inst, period=period, bias=bias, bias_window=window,
                                 missing_instrument=fallback)
    finally:
        rolling_engine._BLOCK = saved


@st.composite
def _minute_panels(draw):
    """Rows at whole minutes (so every unit from minutes to nanoseconds holds them exactly), any order."""
    n = draw(st.integers(min_value=2, max_value=60))
    minute = draw(hnp.arrays(np.int64, n, elements=st.integers(0, 200 * 1_440)))
    inst = draw(hnp.arrays(np.int64, n, elements=st.integers(0, 3)))
    p = draw(hnp.arrays(np.float64, n, elements=st.floats(-10, 10)))
    y = draw(hnp.arrays(np.float64, n, elements=st.floats(-10, 10)))
    ts = np.datetime64("2015-01-01T00:00", "m") + minute
    return p, y, ts, np.array(["a", "b", "c", "d"])[inst]


@settings(max_examples=100, deadline=None)
@given(panel=_minute_panels(), period=st.sampled_from(RULES), bias=st.sampled_from(["pooled", "per_instrument"]),
       window=st.sampled_from([None, 2]), unit=st.sampled_from(["m", "s", "ms", "us", "5m", "h"]))
def test_any_datetime64_unit_gives_the_nanosecond_result(panel, period, bias, window, unit):
    """Minute-, second-, ... resolution timestamps are read as they are, and score exactly as nanoseconds do."""
    p, y, ts, inst = panel
    if unit == "5m":
        ts = ts - (ts.astype(np.int64) % 5)          # whole 5-minute ticks
    if unit == "h":
        ts = ts - (ts.astype(np.int64) % 60)
    cal = Calibration(period=period, bias=bias, bias_window=window, missing_instrument="pooled")
    try:
        ref = rolling_cql(p, y, ts.astype("datetime64[ns]"), instruments=inst, calibration=cal)
    except ValueError as exc:
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            rolling_cql(p, y, ts.astype(f"datetime64[{unit}]"), instruments=inst, calibration=cal)
        return
    got = rolling_cql(p, y, ts.astype(f"datetime64[{unit}]"), instruments=inst, calibration=cal)
    assert (got.cql, got.ql_scored, got.ql_all, got.n_scored) == (ref.cql, ref.ql_scored, ref.ql_all, ref.n_scored)
    pd.testing.assert_frame_equal(got.table, ref.table, check_exact=True)


def test_days_and_months_units_are_read_too():
    days = np.array(["2015-01-05", "2015-01-06", "2015-02-02", "2015-02-03"], dtype="datetime64[D]")
    for ts in (days, days.astype("datetime64[M]")):   # days are read as they are; months converted by numpy
        ns = rolling_cql([0.0] * 4, [1.0, 1.0, 1.0, 2.0], ts.astype("datetime64[ns]"))
        got = rolling_cql([0.0] * 4, [1.0, 1.0, 1.0, 2.0], ts)
        assert got.cql == ns.cql
        pd.testing.assert_frame_equal(got.table, ns.table, check_exact=True)
