"""Sanity checks of vendor bars beyond single rows: bar interval, whole missing sessions, time-zone hints,
non-finite values, price spikes and jumps (split ratios), report labels (cells vs rows, NA), the order check,
and clean errors for unreadable files."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pandas as pd
import polars as pl
import pytest

from data_helpers import clean_day_rows, write_vendor_csv
from data_prep import qlib_store
from data_prep.ingest import IngestError, IngestOptions, StrictError, ValidationFailed, ingest
from data_prep.validate import split_ratio
from data_prep.vendor import ColumnMap
from rolling_calib.cli import main

DAY, DAY2, DAY3 = "2018-02-16", "2018-02-20", "2018-02-21"  # 2018-02-19 is Presidents' Day


def _opts(mode: str, **kw) -> IngestOptions:
    return IngestOptions(mode=mode, **kw)


def _set(rows, i, col, value):
    rows = [list(r) for r in rows]
    rows[i][col] = value
    return [tuple(r) for r in rows]


def _kinds(res) -> dict[str, int]:
    return res.report.totals()


def _issues(res, kind: str) -> pl.DataFrame:
    return res.report.issues.filter(pl.col("kind") == kind)


# ---------------------------------------------------------------------------- case 5: interval, sessions, zone
@pytest.mark.parametrize("mode", ["validate", "strict", "repair"])
def test_five_minute_bars_are_refused_naming_file_interval_and_bars(tmp_path, mode):
    rows = [r for d, seed in ((DAY, 1), (DAY2, 2)) for r in clean_day_rows(d, seed=seed)[::5]]  # 78 bars a day
    src = write_vendor_csv(tmp_path / "FIVE.csv", rows)
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "store", options=_opts(mode))
    msg = str(info.value)
    assert msg.startswith(f"{src}: expected one-minute bars (the store's frequency), found 5-minute bars")
    assert "156 bars of FIVE" in msg and "5 minutes" in msg and "Nothing written" in msg
    assert not (tmp_path / "store").exists()


def test_daily_and_30_second_bars_are_refused_too(tmp_path):
    days = pd.bdate_range("2018-03-01", periods=15)
    daily = [(d.strftime("%Y-%m-%d"), "09:30:00", 10.0, 10.5, 9.5, 10.2, 1e6) for d in days]  # no holiday in range
    src = write_vendor_csv(tmp_path / "D.csv", daily)
    with pytest.raises(IngestError, match=r"D.csv: expected one-minute bars .*found daily bars \(15 bars of D: one bar per session"):
        ingest([src], tmp_path / "s1", options=_opts("repair"))
    t0 = pd.Timestamp(f"{DAY} 09:30")
    half = [(DAY, (t0 + pd.Timedelta(seconds=30 * i)).strftime("%H:%M:%S"), 10.0, 10.5, 9.5, 10.2, 100.0) for i in range(60)]
    src = write_vendor_csv(tmp_path / "H.csv", half)
    with pytest.raises(IngestError, match=r"found 30-second bars \(60 bars of H: .*30 seconds, finer than one minute"):
        ingest([src], tmp_path / "s2", options=_opts("repair"))


def test_sparse_one_minute_bars_are_not_mistaken_for_a_coarser_interval(tmp_path):
    rng = np.random.default_rng(0)
    rows = clean_day_rows(DAY, seed=3)
    keep = sorted(rng.choice(390, size=150, replace=False))  # an illiquid symbol: gaps of 1, 2, 3 ... minutes
    src = write_vendor_csv(tmp_path / "SP.csv", [rows[i] for i in keep])
    res = ingest([src], tmp_path / "s", options=_opts("repair"))
    assert res.bars_written == 150


@pytest.mark.parametrize("mode", ["validate", "strict", "repair"])
def test_a_whole_missing_session_is_reported_by_date(tmp_path, mode):
    rows = clean_day_rows(DAY, seed=1) + clean_day_rows(DAY3, seed=3)  # DAY2 (a session) has no bar
    src = write_vendor_csv(tmp_path / "MS.csv", rows)
    res = ingest([src], tmp_path / "store", options=_opts(mode))
    ms = _issues(res, "missing_session")
    assert ms.height == 1
    r = ms.row(0, named=True)
    assert (r["_line"], r["field"], r["action"]) == (392, "date", "kept")  # the first bar after the gap
    assert r["found"] == f"no bar on {DAY2} (a whole session; bars stop at {DAY} 15:59 and resume at {DAY3} 09:30)"
    assert res.report.missing_minutes["MS"] == {DAY2: 390}  # still counted as minutes too
    assert _kinds(res) == {"missing_minutes": 390, "missing_session": 1}
    assert "missing_session                 1 sessions" in res.report.summary_text()


def _utc_rows(seed: int = 5) -> list[tuple]:
    """One session written in naive UTC (New York + 5 h in February)."""
    out = []
    for r in clean_day_rows(DAY, seed=seed):
        t = pd.Timestamp(f"{r[0]} {r[1]}") + pd.Timedelta(hours=5)
        out.append((t.strftime("%Y-%m-%d"), t.strftime("%H:%M:%S"), *r[2:]))
    return out


def test_utc_timestamps_read_as_new_york_get_a_tz_hint(tmp_path, capsys):
    src = write_vendor_csv(tmp_path / "AAPL.csv", _utc_rows())
    hint = (f"77% of {src}'s bars fall outside 09:30-16:00 America/New_York; are the timestamps UTC? "
            "pass --tz UTC (100% of them would fall inside)")
    res = ingest([src], tmp_path / "s1", options=_opts("repair"))
    assert res.report.hints == [hint]
    assert f"  hint: {hint}" in res.report.summary_text() and hint in res.report.to_markdown()
    with pytest.raises(StrictError) as info:
        ingest([src], tmp_path / "s2", options=_opts("strict"))
    assert info.value.hint == hint and str(info.value).endswith(f"\nhint: {hint}")
    with pytest.raises(ValidationFailed) as info:
        ingest([src], tmp_path / "s3", options=_opts("validate"))
    assert info.value.report.hints == [hint]
    # the option the hint names is the CLI's: read as UTC, the file is clean
    code = main(["data", "ingest", str(src), "--out", str(tmp_path / "s4"), "--tz", "UTC", "--strict", "--no-progress"])
    assert code == 0
    res = ingest([src], tmp_path / "s5", options=_opts("strict", tz="UTC"))
    assert res.bars_written == 390 and res.report.hints == [] and res.report.totals() == {}


def test_zoned_timestamps_outside_the_session_get_a_hint_that_tz_does_not_apply(tmp_path):
    rows = clean_day_rows(DAY, seed=6)
    # epoch milliseconds written from naive New York times as if they were UTC: 5 hours early
    ms = pd.to_datetime([f"{r[0]} {r[1]}" for r in rows]).tz_localize("UTC").asi8 // 10**6
    pd.DataFrame({"ms": ms, "open": [r[2] for r in rows], "high": [r[3] for r in rows], "low": [r[4] for r in rows],
                  "close": [r[5] for r in rows], "volume": [r[6] for r in rows]}).to_csv(tmp_path / "EP.csv", index=False)
    res = ingest([tmp_path / "EP.csv"], tmp_path / "s", options=_opts("repair", columns=ColumnMap(epoch_ms="ms")))
    (hint,) = res.report.hints
    assert hint == (f"77% of {tmp_path / 'EP.csv'}'s bars fall outside 09:30-16:00 America/New_York; its timestamps "
                    "carry their own zone (epoch milliseconds are UTC), so --tz does not apply: check the vendor's "
                    "time convention")


# ---------------------------------------------------------------------------- case 6: inf, spikes, jumps
@pytest.mark.parametrize("value", ["inf", "-inf", "1e400", "Infinity"])
def test_non_finite_values_are_errors_and_never_stored(tmp_path, value):
    rows = clean_day_rows(DAY, seed=2)
    rows = [r + (round((r[3] + r[4] + r[5]) / 3, 4),) for r in rows]
    rows = _set(rows, 10, 3, value)  # high
    rows = _set(rows, 20, 7, "inf")  # vwap
    src = write_vendor_csv(tmp_path / "INF.csv", rows, header="date,ToD,open,high,low,close,volume,vwap")
    with pytest.raises(StrictError) as info:
        ingest([src], tmp_path / "s1", options=_opts("strict"))
    e = info.value
    assert (e.kind, e.line, e.field) == ("non_finite_value", 12, "high")
    assert str(e) == f"{src}: line 12: field 'high': expected a finite number, found '{value}' [non_finite_value]"
    res = ingest([src], tmp_path / "s2", options=_opts("repair"))
    nf = _issues(res, "non_finite_value")
    assert nf.select("_line", "field", "action").rows() == [(12, "high", "dropped"), (22, "vwap", "dropped")]
    assert _kinds(res) == {"non_finite_value": 2, "missing_minutes": 2}
    for f in ("high", "vwap", "close"):
        _, v = qlib_store.read_feature(res.store, "INF", f)
        assert not np.isinf(v).any() and np.isnan(v[10]) and np.isnan(v[20])


def test_repair_drops_a_ten_times_typo_in_one_field_instead_of_widening(tmp_path):
    rows = clean_day_rows(DAY, seed=3)
    r = rows[50]
    rows = _set(rows, 50, 3, round(r[3] * 10, 4))  # high 10x: open/low/close and the neighbours agree
    r = rows[80]
    rows = _set(rows, 80, 5, round(r[5] * 10, 4))  # close 10x: used to widen high to it
    src = write_vendor_csv(tmp_path / "TY.csv", rows)
    res = ingest([src], tmp_path / "store", options=_opts("repair"))
    sp = _issues(res, "price_spike")
    assert sp.select("_line", "field", "action").rows() == [(52, "high", "dropped"), (82, "close", "dropped")]
    found = sp.get_column("found")[0]
    assert re.match(rf"high {rows[50][3]:g} at {DAY} 10:20 \(\d+(\.\d+)?x the neighbouring bars' closes ", found), found
    assert "the bar's other prices agree with them" in found
    assert _kinds(res) == {"price_spike": 2, "missing_minutes": 2}  # no ohlc_inconsistent, nothing widened
    _, high = qlib_store.read_feature(res.store, "TY", "high")
    assert np.nanmax(high) < 2 * rows[0][3] and np.isnan(high[50]) and np.isnan(high[80])
    with pytest.raises(StrictError) as info:
        ingest([src], tmp_path / "s2", options=_opts("strict"))
    assert (info.value.kind, info.value.line, info.value.field) == ("price_spike", 52, "high")


def test_a_whole_bar_scaled_ten_times_is_a_price_spike(tmp_path):
    rows = clean_day_rows(DAY, seed=4)
    rows = [r if i != 200 else (*r[:2], *(round(v * 10, 4) for v in r[2:6]), r[6]) for i, r in enumerate(rows)]
    src = write_vendor_csv(tmp_path / "WB.csv", rows)
    res = ingest([src], tmp_path / "store", options=_opts("repair"))
    sp = _issues(res, "price_spike")
    assert sp.select("_line", "field", "action").rows() == [(202, "open,high,low,close", "dropped")]
    assert "the whole bar is scaled" in sp.get_column("found")[0]
    assert _kinds(res) == {"price_spike": 1, "missing_minutes": 1}
    with pytest.raises(ValidationFailed):
        ingest([src], tmp_path / "s2", options=_opts("validate"))
    # a threshold above the factor lets it through
    res = ingest([src], tmp_path / "s3", options=_opts("repair", max_spike=20.0))
    assert "price_spike" not in _kinds(res)


@pytest.mark.parametrize(
    ("factor", "fits"),
    [(1 / 7, "fits a 7:1 split (prices x1/7)"), (0.5, "fits a 2:1 split (prices x1/2)"),
     (2 / 3, "fits a 3:2 split (prices x2/3)"), (10.0, "fits a 1:10 split (prices x10)"),
     (0.6, "no common split ratio fits")],
)
def test_an_overnight_jump_is_a_warning_naming_the_split_ratio_that_fits(tmp_path, factor, fits):
    d1 = clean_day_rows(DAY, seed=1, price=100.0)
    d2 = clean_day_rows(DAY2, seed=2, price=round(d1[-1][5] * factor, 4))
    d2 = [row[:6] + (round(row[6] / factor),) for row in d2]  # a split scales the volume inversely (issue 30)
    src = write_vendor_csv(tmp_path / "SPL.csv", d1 + d2)
    for mode in ("strict", "validate", "repair"):
        res = ingest([src], tmp_path / mode, options=_opts(mode))
        assert _kinds(res) == {"price_jump": 1} and res.bars_written == 780
    r = _issues(res, "price_jump").row(0, named=True)
    assert (r["symbol"], r["_line"], r["field"], r["action"]) == ("SPL", 392, "open", "kept")
    pct = 100 * (d2[0][2] / d1[-1][5] - 1)
    assert r["found"].startswith(f"open {d2[0][2]:g} at {DAY2} 09:30 after close {d1[-1][5]:g} at {DAY} 15:59: "
                                 f"{pct:+.1f}% overnight; {fits}")
    assert r["expected"] == "an overnight move within 1.5x either way (|log return| <= ln 1.5; --max-jump)"
    res = ingest([src], tmp_path / "wide", options=_opts("repair", max_jump=12.0))
    assert _kinds(res) == {}


def test_the_issue_case_minus_85_6_percent_is_a_7_to_1_split():
    assert split_ratio(1 - 0.856) == "7:1" and split_ratio(0.5 * 1.019) == "2:1" and split_ratio(0.5 * 1.03) is None
    assert split_ratio(10.1) == "1:10" and split_ratio(4.0) == "1:4" and split_ratio(1.2) is None


def test_a_jump_within_a_session_is_reported_and_the_cli_takes_the_thresholds(tmp_path, capsys):
    rows = clean_day_rows(DAY, seed=5, n=200) + [r[:6] + (2 * r[6],) for r in clean_day_rows(DAY, seed=6, n=390, price=50.0)[200:]]
    src = write_vendor_csv(tmp_path / "IJ.csv", rows)
    res = ingest([src], tmp_path / "s1", options=_opts("repair"))
    r = _issues(res, "price_jump").row(0, named=True)
    assert r["_line"] == 202 and "% within the session" in r["found"] and "fits a 2:1 split" in r["found"]
    code = main(["data", "ingest", str(src), "--out", str(tmp_path / "s2"), "--repair", "--max-jump", "3",
                 "--max-spike", "5", "--no-progress", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["totals"] == {}
    with pytest.raises(ValueError, match=r"max_jump: expected a ratio > 1"):
        IngestOptions(max_jump=0.5)


# ---------------------------------------------------------------------------- case 10: labels, NA, unsorted
def test_na_is_a_missing_value_and_cells_are_not_counted_as_rows(tmp_path):
    rows = clean_day_rows(DAY, seed=7)
    for i, token in zip((10, 11, 12), ("NA", "N/A", "null")):
        for col in (2, 3, 4, 5):
            rows = _set(rows, i, col, token)
    rows = _set(rows, 13, 5, "")
    rows = _set(rows, 14, 6, "12k")  # text that is not a number stays unparseable
    src = write_vendor_csv(tmp_path / "NAS.csv", rows)  # (a symbol NA is refused: pandas reads it as missing)
    res = ingest([src], tmp_path / "s", options=_opts("repair"))
    rep = res.report
    assert rep.totals() == {"missing_value": 13, "unparseable_value": 1, "missing_minutes": 5}
    assert rep.rows_by_kind() == {"missing_value": 4, "unparseable_value": 1}
    assert sum(rep.rows_dropped().values()) == 5
    mv = _issues(res, "missing_value")
    assert mv.filter(pl.col("_line") == 12).get_column("found").to_list() == ["'NA'"] * 4
    text = rep.summary_text()
    assert re.search(r"missing_value\s+13 cells in 4 rows\s+of\s+1 symbols", text), text
    assert re.search(r"unparseable_value\s+1 cells in 1 rows", text), text
    doc = rep.to_dict()
    assert doc["rows_by_kind"]["missing_value"] == 4 and doc["units"]["missing_value"] == "cells"
    assert doc["units"]["closing_auction"] == "rows" and "count cells" in rep.to_markdown()


def test_one_off_minute_row_does_not_make_the_good_rows_after_it_unsorted(tmp_path):
    rows = clean_day_rows(DAY, seed=8)
    rows = rows[:11] + [(DAY, "11:40:30", *rows[10][2:])] + rows[11:]  # line 13: a stray, off-minute time
    src = write_vendor_csv(tmp_path / "OM.csv", rows)
    res = ingest([src], tmp_path / "s", options=_opts("repair"))
    assert _kinds(res) == {"off_minute": 1}  # was also 'unsorted 120 rows': 09:41 .. 11:40
    assert _issues(res, "off_minute").get_column("_line").to_list() == [13] and res.bars_written == 390


def test_a_late_duplicate_after_a_dropped_row_is_not_unsorted_but_a_displaced_good_row_is(tmp_path):
    rows = clean_day_rows(DAY, seed=9)
    moved = rows[30]
    rows = rows[:30] + rows[31:40] + [moved] + rows[40:]  # the 10:00 bar placed after 10:09
    src = write_vendor_csv(tmp_path / "MV.csv", rows)
    res = ingest([src], tmp_path / "s", options=_opts("repair"))
    un = _issues(res, "unsorted")
    assert un.select("_line", "action").rows() == [(41, "moved")] and res.bars_written == 390
    assert un.get_column("expected")[0] == f"a time after {DAY} 10:09:00 (rows sorted by time)"


# ---------------------------------------------------------------------------- case 8: unreadable files
def test_an_empty_csv_is_a_clean_error(tmp_path, capsys):
    p = tmp_path / "EMPTY.csv"
    p.write_text("")
    with pytest.raises(ValueError) as info:
        ingest([p], tmp_path / "s", options=_opts("repair"))
    assert str(info.value) == f"{p}: line 1: expected a header line of comma-separated column names, found an empty file"
    code = main(["data", "ingest", str(p), "--out", str(tmp_path / "s"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"error: {p}: line 1:") and "Traceback" not in err


def test_a_truncated_csv_gz_is_a_clean_error(tmp_path):
    rows = clean_day_rows(DAY, seed=1) + clean_day_rows(DAY2, seed=2)
    text = "\n".join(["date,ToD,open,high,low,close,volume"] + [",".join(map(str, r)) for r in rows]) + "\n"
    blob = gzip.compress(text.encode())
    p = tmp_path / "TR.csv.gz"
    p.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ValueError) as info:
        ingest([p], tmp_path / "s", options=_opts("repair"))
    msg = str(info.value)
    assert msg.startswith(f"{p}: expected a complete gzip-compressed CSV, found a truncated or corrupt one (")
    assert msg.endswith("; fetch the file again")


def test_an_extra_field_names_its_line_and_no_polars_option(tmp_path):
    rows = clean_day_rows(DAY, seed=1)
    rows[55] = rows[55] + ("oops",)  # line 57
    src = write_vendor_csv(tmp_path / "EX.csv", rows)
    with pytest.raises(ValueError) as info:
        ingest([src], tmp_path / "s", options=_opts("repair"))
    msg = str(info.value)
    assert msg.startswith(f"{src}: line 57: expected 7 comma-separated fields as in the header (line 1), found 8")
    assert "truncate_ragged_lines" not in msg


def test_a_corrupt_parquet_file_is_a_clean_error(tmp_path):
    p = tmp_path / "BAD.parquet"
    p.write_bytes(b"not parquet")
    with pytest.raises(ValueError, match=r"BAD.parquet: expected a Parquet file, found one that cannot be read: "):
        ingest([p], tmp_path / "s", options=_opts("repair"))


def test_mixing_naive_and_zoned_timestamps_names_the_first_line_of_each(tmp_path):
    rows = clean_day_rows(DAY, seed=1)
    ny = pd.to_datetime([f"{r[0]} {r[1]}" for r in rows]).tz_localize("America/New_York")
    stamps = [t.strftime("%Y-%m-%d %H:%M:%S") for t in ny]
    for i in range(130, 390):
        stamps[i] = ny[i].tz_convert("UTC").isoformat()  # from line 132 on, zoned
    df = pd.DataFrame({"datetime": stamps, "open": [r[2] for r in rows], "high": [r[3] for r in rows],
                       "low": [r[4] for r in rows], "close": [r[5] for r in rows], "volume": [r[6] for r in rows]})
    df.to_csv(tmp_path / "MX.csv", index=False)
    with pytest.raises(ValueError) as info:
        ingest([tmp_path / "MX.csv"], tmp_path / "s", options=_opts("repair", columns=ColumnMap(datetime="datetime")))
    assert str(info.value) == (
        f"{tmp_path / 'MX.csv'}: column 'datetime' mixes naive and zoned timestamps: line 2 has '{DAY} 09:30:00' "
        f"(no zone: it would be read in --tz America/New_York) and line 132 has '{stamps[130]}' (with a zone); "
        "expected one convention per file"
    )
    # a zoned file with one garbage time is not "mixed": that row is a bad_timestamp
    df["datetime"] = [t.tz_convert("UTC").isoformat() for t in ny]
    df.loc[5, "datetime"] = "garbage"
    df.to_csv(tmp_path / "ZG.csv", index=False)
    res = ingest([tmp_path / "ZG.csv"], tmp_path / "s2", options=_opts("repair", columns=ColumnMap(datetime="datetime")))
    assert _kinds(res) == {"bad_timestamp": 1, "missing_minutes": 1}
