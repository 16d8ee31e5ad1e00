"""Vendor ingest: one test per kind of bad input for --strict and --repair, formats, report, default mode."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import polars as pl
import pytest

from data_helpers import clean_day_rows, write_vendor_csv
from data_prep import qlib_store
from data_prep.ingest import IngestOptions, StrictError, ValidationFailed, ingest
from data_prep.ingest_report import write_report
from data_prep.vendor import ColumnMap

DAY = "2018-02-16"  # a Friday; 2018-02-19 is Presidents' Day


def _opts(mode: str, **kw) -> IngestOptions:
    return IngestOptions(mode=mode, **kw)


def _set(rows, i, col, value):
    """Return rows with field ``col`` (0=date, 1=ToD, 2..6=o,h,l,c,v) of row ``i`` replaced."""
    rows = [list(r) for r in rows]
    rows[i][col] = value
    return [tuple(r) for r in rows]


# Each case: rows builder -> (rows, kind, strict line, strict field, repair action, kinds count)
def _case_rows(kind: str):
    base = clean_day_rows(DAY, n=390, seed=1)
    r10 = list(base[10])
    if kind == "bad_timestamp":
        return _set(base, 10, 1, "09:4O:00"), 12, "date,ToD"
    if kind == "missing_value":
        return _set(base, 10, 5, ""), 12, "close"
    if kind == "unparseable_value":
        return _set(base, 10, 6, "12k"), 12, "volume"
    if kind == "off_minute":
        return _set(base, 10, 1, "09:40:30"), 12, "ToD"
    if kind == "non_session_day":
        return base + [("2018-02-19", "10:00:00", *r10[2:])], 392, "date"
    if kind == "pre_market":
        return [(DAY, "09:29:00", *r10[2:])] + base, 2, "ToD"
    if kind == "closing_auction":
        return base + [(DAY, "16:00:00", *r10[2:])], 392, "ToD"
    if kind == "post_market":
        return base + [(DAY, "16:05:00", *r10[2:])], 392, "ToD"
    if kind == "after_early_close":
        early = clean_day_rows("2018-07-03", n=210, seed=1)
        return early + [("2018-07-03", "13:30:00", *r10[2:])], 212, "ToD"
    if kind == "non_positive_price":
        return _set(base, 10, 4, 0.0), 12, "low"
    if kind == "negative_volume":
        return _set(base, 10, 6, -5.0), 12, "volume"
    if kind == "exact_duplicate":
        return base[:11] + [base[10]] + base[11:], 13, "date,ToD"
    if kind == "conflicting_duplicate":
        other = tuple(r10[:6] + [r10[6] + 1.0])
        return base[:11] + [other] + base[11:], 13, "date,ToD"
    if kind == "unsorted":
        return base[:10] + [base[11], base[10]] + base[12:], 13, "date,ToD"
    if kind == "ohlc_inconsistent":
        return _set(base, 10, 3, round(min(r10[2], r10[5]) - 0.5, 4)), 12, "high"
    raise AssertionError(kind)


ROW_KINDS = [
    "bad_timestamp", "missing_value", "unparseable_value", "off_minute", "non_session_day", "pre_market",
    "closing_auction", "post_market", "after_early_close", "non_positive_price", "negative_volume",
    "exact_duplicate", "conflicting_duplicate", "unsorted", "ohlc_inconsistent",
]  # fmt: skip


@pytest.mark.parametrize("kind", ROW_KINDS)
def test_strict_stops_at_the_problem_naming_file_line_field_expected_found(tmp_path, kind):
    rows, line, field = _case_rows(kind)
    src = write_vendor_csv(tmp_path / "AAA.csv", rows)
    with pytest.raises(StrictError) as info:
        ingest([src], tmp_path / "store", options=_opts("strict"))
    err = info.value
    assert (err.kind, err.line, err.field, err.file) == (kind, line, field, str(src))
    msg = str(err)
    assert msg.startswith(f"{src}: line {line}: field '{field}': expected ") and ", found " in msg
    assert not (tmp_path / "store").exists()  # nothing written


@pytest.mark.parametrize("kind", ROW_KINDS)
def test_repair_fixes_and_reports_every_row(tmp_path, kind):
    rows, line, _ = _case_rows(kind)
    src = write_vendor_csv(tmp_path / "AAA.csv", rows)
    res = ingest([src], tmp_path / "store", options=_opts("repair"))
    issues = res.report.issues
    mine = issues.filter(pl.col("kind") == kind)
    expected_count = 2 if kind == "conflicting_duplicate" else 1
    assert mine.height == expected_count, issues
    assert set(issues.get_column("kind")) == {kind}
    assert line in mine.get_column("_line").to_list()
    start, close = qlib_store.read_feature(res.store, "AAA", "close")
    cal = qlib_store.read_calendar(res.store)
    stored = pd.Series(close, index=cal[start : start + len(close)])
    n_rows = len(rows)
    action = mine.get_column("action")[0]
    if kind == "unsorted":
        assert action == "moved" and res.bars_written == n_rows and stored.is_monotonic_increasing is not None
        assert np.all(np.isfinite(close)) and len(close) == 390
    else:  # an OHLC-inconsistent bar too: dropped, never widened to the bad value (issue 19)
        assert action == "dropped"
        dropped = expected_count
        assert res.bars_written == n_rows - dropped
        assert sum(res.report.rows_dropped().values()) == dropped
    if kind in ("bad_timestamp", "missing_value", "unparseable_value", "off_minute", "non_positive_price",
                "negative_volume", "conflicting_duplicate", "ohlc_inconsistent"):
        # the bar becomes missing: NaN in the store, and counted as a missing minute
        assert np.isnan(stored.loc[pd.Timestamp(f"{DAY} 09:40")])
        assert res.report.missing_minutes["AAA"] == {DAY: 1}


def test_vwap_outside_range_is_clipped_in_repair_and_named_in_strict(tmp_path):
    rows = clean_day_rows(DAY, n=390, seed=2)
    rows = [r + (round((r[3] + r[4] + r[5]) / 3, 4),) for r in rows]
    rows = _set(rows, 10, 7, rows[10][3] + 1.0)
    header = "date,ToD,open,high,low,close,volume,vwap"
    src = write_vendor_csv(tmp_path / "VW.csv", rows, header=header)
    with pytest.raises(StrictError) as info:
        ingest([src], tmp_path / "s1", options=_opts("strict"))
    assert (info.value.kind, info.value.line, info.value.field) == ("vwap_outside_range", 12, "vwap")
    res = ingest([src], tmp_path / "s2", options=_opts("repair"))
    _, vwap = qlib_store.read_feature(res.store, "VW", "vwap")
    assert vwap[10] == np.float32(rows[10][3])  # clipped to high
    assert vwap[11] == np.float32(rows[11][7])  # vendor vwap kept


def test_stale_prices_are_a_warning_in_every_mode(tmp_path):
    rows = clean_day_rows(DAY, n=390, seed=3)
    flat = rows[100][5]
    rows = [r if not 100 <= i < 140 else (r[0], r[1], flat, flat, flat, flat, r[6]) for i, r in enumerate(rows)]
    src = write_vendor_csv(tmp_path / "ST.csv", rows)
    for mode in ("strict", "validate", "repair"):
        res = ingest([src], tmp_path / mode, options=_opts(mode))
        stale = res.report.issues.filter(pl.col("kind") == "stale_prices")
        assert stale.height == 1 and stale.get_column("_line")[0] == 100 + 2  # row 100 is line 102
        assert "unchanged for 40 bars" in stale.get_column("found")[0]
        assert res.bars_written == 390


def test_missing_minutes_counted_per_session_in_every_mode(tmp_path):
    rows = clean_day_rows(DAY, n=390, seed=4)
    rows = rows[:10] + rows[13:] + clean_day_rows("2018-02-20", n=390, seed=5)[1:]
    src = write_vendor_csv(tmp_path / "MM.csv", rows)
    for mode in ("strict", "validate", "repair"):
        res = ingest([src], tmp_path / mode, options=_opts(mode))
        assert res.report.missing_minutes["MM"] == {DAY: 3, "2018-02-20": 1}
        assert res.report.totals() == {"missing_minutes": 4}


def test_requested_range_drops_and_reports_rows_outside(tmp_path):
    rows = clean_day_rows(DAY, n=390, seed=4) + clean_day_rows("2018-02-20", n=390, seed=5)
    src = write_vendor_csv(tmp_path / "RR.csv", rows)
    res = ingest([src], tmp_path / "s", options=_opts("repair", end=DAY))
    assert res.report.totals() == {"outside_requested_range": 390}
    assert len(qlib_store.read_calendar(res.store)) == 390


def test_default_mode_refuses_with_every_problem_and_writes_nothing(tmp_path):
    rows, _, _ = _case_rows("closing_auction")
    rows = _set(rows, 20, 6, -1.0)
    src = write_vendor_csv(tmp_path / "DF.csv", rows)
    with pytest.raises(ValidationFailed) as info:
        ingest([src], tmp_path / "store", options=_opts("validate"))
    assert info.value.report.totals() == {"closing_auction": 1, "negative_volume": 1}
    assert not (tmp_path / "store").exists()
    clean = write_vendor_csv(tmp_path / "OK.csv", clean_day_rows(DAY, seed=9))
    res = ingest([clean], tmp_path / "store", options=_opts("validate"))
    assert res.bars_written == 390 and res.report.totals() == {}


def test_report_json_and_markdown_list_counts_and_every_row(tmp_path):
    rows, _, _ = _case_rows("exact_duplicate")
    rows = rows + [(DAY, "16:00:00", 1.0, 1.0, 1.0, 1.0, 5.0)]
    src = write_vendor_csv(tmp_path / "RP.csv", rows)
    res = ingest([src], tmp_path / "store", options=_opts("repair"))
    written = write_report(res.report, tmp_path / "rep")
    assert [p.name for p in written] == ["rep.json", "rep.md"]
    doc = json.loads(written[0].read_text())
    assert doc["counts"]["RP"] == {"closing_auction": 1, "exact_duplicate": 1}
    assert doc["rows_dropped"] == {"RP": 2}
    assert {(i["file"], i["line"], i["kind"], i["action"]) for i in doc["issues"]} == {
        (str(src), 13, "exact_duplicate", "dropped"), (str(src), 393, "closing_auction", "dropped")}
    md = written[1].read_text()
    assert "| RP | 392 | 390 | 1 | 1 |" in md and f"| {src} | 393 | RP | closing_auction |" in md


def test_parquet_long_file_with_symbol_column_and_zoned_timestamps(tmp_path):
    rows = clean_day_rows(DAY, n=390, seed=6)
    ts_utc = pd.to_datetime([f"{r[0]} {r[1]}" for r in rows]).tz_localize("America/New_York").tz_convert("UTC")
    df = pd.DataFrame({
        "ticker": ["x1"] * 390 + ["X2"] * 390,
        "time": [t.isoformat() for t in ts_utc] * 2,
        "o": [r[2] for r in rows] * 2, "h": [r[3] for r in rows] * 2, "l": [r[4] for r in rows] * 2,
        "c": [r[5] for r in rows] * 2, "v": [r[6] for r in rows] * 2,
    })
    df.to_parquet(tmp_path / "long.parquet")
    cols = ColumnMap(symbol="ticker", datetime="time", open="o", high="h", low="l", close="c", volume="v")
    res = ingest([tmp_path / "long.parquet"], tmp_path / "store", options=_opts("strict", columns=cols))
    assert sorted(res.report.rows_in) == ["X1", "X2"] and res.bars_written == 780
    cal = qlib_store.read_calendar(res.store)
    assert str(cal[0]) == f"{DAY} 09:30:00"
    _, close = qlib_store.read_feature(res.store, "X2", "close")
    np.testing.assert_array_equal(close, np.array([r[5] for r in rows], dtype=np.float32))


def test_epoch_milliseconds_and_naive_times_in_another_zone(tmp_path):
    rows = clean_day_rows(DAY, n=390, seed=7)
    ny = pd.to_datetime([f"{r[0]} {r[1]}" for r in rows]).tz_localize("America/New_York")
    base = {"open": [r[2] for r in rows], "high": [r[3] for r in rows], "low": [r[4] for r in rows],
            "close": [r[5] for r in rows], "volume": [r[6] for r in rows]}
    pd.DataFrame({"ms": (ny.asi8 // 10**6), **base}).to_csv(tmp_path / "EP.csv", index=False)
    res = ingest([tmp_path / "EP.csv"], tmp_path / "s1", options=_opts("strict", columns=ColumnMap(epoch_ms="ms")))
    assert res.bars_written == 390 and str(qlib_store.read_calendar(res.store)[-1]) == f"{DAY} 15:59:00"
    london = ny.tz_convert("Europe/London").tz_localize(None)
    pd.DataFrame({"datetime": london.strftime("%Y-%m-%d %H:%M:%S"), **base}).to_csv(tmp_path / "LN.csv", index=False)
    res = ingest([tmp_path / "LN.csv"], tmp_path / "s2",
                 options=_opts("strict", tz="Europe/London", columns=ColumnMap(datetime="datetime")))
    assert res.bars_written == 390 and str(qlib_store.read_calendar(res.store)[0]) == f"{DAY} 09:30:00"


def test_missing_column_and_bad_options_are_clear_value_errors(tmp_path):
    p = tmp_path / "NC.csv"
    p.write_text("date,ToD,open,high,low,close\n2018-02-16,09:30:00,1,1,1,1\n")
    with pytest.raises(ValueError, match=r"NC.csv: line 1: expected value column\(s\) \['volume'\]"):
        ingest([p], tmp_path / "s", options=_opts("repair"))
    with pytest.raises(ValueError, match="tz: expected an IANA zone"):
        IngestOptions(tz="Mars/Olympus")
    with pytest.raises(ValueError, match="mode: expected one of"):
        IngestOptions(mode="lenient")
    with pytest.raises(ValueError, match="expected an existing file or directory"):
        ingest([tmp_path / "nope.csv"], tmp_path / "s")


def test_missing_vwap_is_derived_and_reported_in_every_mode(tmp_path):
    rows = clean_day_rows(DAY, n=390, seed=8)
    rows = [r + (round((r[3] + r[4] + r[5]) / 3 + 0.001, 4),) for r in rows]
    rows = _set(rows, 10, 7, "")
    src = write_vendor_csv(tmp_path / "MV.csv", rows, header="date,ToD,open,high,low,close,volume,vwap")
    for mode in ("strict", "repair"):
        res = ingest([src], tmp_path / mode, options=_opts(mode))
        mv = res.report.issues.filter(pl.col("kind") == "missing_vwap")
        assert mv.get_column("_line").to_list() == [12] and mv.get_column("action").to_list() == ["changed"]
        _, vwap = qlib_store.read_feature(res.store, "MV", "vwap")
        r = rows[10]
        assert vwap[10] == np.float32((r[3] + r[4] + r[5]) / 3) and vwap[11] == np.float32(rows[11][7])
