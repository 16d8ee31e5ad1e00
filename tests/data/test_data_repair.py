"""``--repair`` never widens a bar to a typo (issue 19, item 4): the exact cases of the issue, the one-tick clamp,
and every changed value listed with its old and new value."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from data_helpers import clean_day_rows, write_vendor_csv
from data_prep import qlib_store
from data_prep.ingest import IngestOptions, StrictError, ingest
from data_prep.ingest_report import write_report

DAY = "2018-02-16"
ROW = 200  # the bar under test: line 202


def _rows_with(bar: tuple[float, float, float, float], *, price: float = 174.4, seed: int = 11):
    """A session of consistent bars near ``price`` whose bar ``ROW`` has prices ``bar`` (open, high, low, close)."""
    rows = clean_day_rows(DAY, price=price, seed=seed)
    rows[ROW] = (*rows[ROW][:2], *bar, rows[ROW][6])
    return rows


def _stored(store, field: str) -> np.ndarray:
    start, values = qlib_store.read_feature(store, "AAPL", field)
    assert start == 0
    return values


def _ohlc(res) -> pl.DataFrame:
    return res.report.issues.filter(pl.col("kind") == "ohlc_inconsistent")


def test_a_high_typed_as_100_drops_the_bar_instead_of_storing_a_low_of_100(tmp_path):
    src = write_vendor_csv(tmp_path / "AAPL.csv", _rows_with((174.46, 100.0, 174.43, 174.46)))
    res = ingest([src], tmp_path / "store", options=IngestOptions(mode="repair"))
    issue = _ohlc(res).row(0, named=True)
    assert _ohlc(res).height == 1
    assert (issue["_line"], issue["field"], issue["action"], issue["new"]) == (ROW + 2, "high", "dropped", None)
    assert issue["found"] == "open 174.46, high 100.0, low 174.43, close 174.46"
    assert issue["expected"] == "high >= max(open, close, low) = 174.46"
    low, high = _stored(res.store, "low"), _stored(res.store, "high")
    assert np.isnan(low[ROW]) and np.isnan(high[ROW])  # the minute is missing, not a fake 43% drop
    assert np.nanmin(low) > 170 and res.bars_written == 389
    assert res.report.missing_minutes["AAPL"] == {DAY: 1} and res.report.rows_dropped() == {"AAPL": 1}


def test_an_open_above_the_high_drops_the_bar_instead_of_making_it_the_high(tmp_path):
    src = write_vendor_csv(tmp_path / "AAPL.csv", _rows_with((180.0, 174.55, 174.40, 174.50)))
    res = ingest([src], tmp_path / "store", options=IngestOptions(mode="repair"))
    issue = _ohlc(res).row(0, named=True)
    assert (issue["field"], issue["action"]) == ("high", "dropped")
    assert issue["found"] == "open 180.0, high 174.55, low 174.4, close 174.5"
    high = _stored(res.store, "high")
    assert np.isnan(high[ROW]) and np.nanmax(high) < 176  # no new high of 180
    with pytest.raises(StrictError, match=r"line 202: field 'high': expected high >= max\(open, close, low\) = 180.0, "
                                          r"found open 180.0, high 174.55, low 174.4, close 174.5 \[ohlc_inconsistent\]"):
        ingest([src], tmp_path / "strict", options=IngestOptions(mode="strict"))


def test_a_low_above_the_high_is_dropped(tmp_path):
    src = write_vendor_csv(tmp_path / "AAPL.csv", _rows_with((174.45, 174.40, 174.50, 174.45)))
    res = ingest([src], tmp_path / "store", options=IngestOptions(mode="repair"))
    assert _ohlc(res).select("field", "action").rows() == [("high", "dropped")]
    assert np.isnan(_stored(res.store, "close")[ROW])


@pytest.mark.parametrize(
    ("bar", "field", "old", "new", "price"),
    [((174.56, 174.55, 174.40, 174.50), "open", "174.56", "174.55", 174.4),  # open one cent above the high
     ((174.45, 174.55, 174.40, 174.39), "close", "174.39", "174.4", 174.4),  # close one cent below the low
     ((0.5121, 0.5120, 0.5100, 0.5110), "open", "0.5121", "0.512", 0.51)],  # below $1 the tick is $0.0001
)
def test_an_open_or_close_one_tick_outside_the_range_is_clamped_and_listed_old_and_new(tmp_path, bar, field, old,
                                                                                      new, price):
    src = write_vendor_csv(tmp_path / "AAPL.csv", _rows_with(bar, price=price))
    res = ingest([src], tmp_path / "store", options=IngestOptions(mode="repair"))
    issue = _ohlc(res).row(0, named=True)
    assert _ohlc(res).height == 1
    assert (issue["field"], issue["action"], issue["found"], issue["new"]) == (field, "changed", old, new)
    assert "off by at most one tick: clamped; high and low kept" in issue["expected"]
    assert _stored(res.store, field)[ROW] == np.float32(float(new))
    assert _stored(res.store, "high")[ROW] == np.float32(bar[1]) and _stored(res.store, "low")[ROW] == np.float32(bar[2])
    assert res.report.rows_changed() == {"AAPL": 1} and res.bars_written == 390


def test_two_ticks_outside_the_range_is_dropped_not_clamped(tmp_path):
    src = write_vendor_csv(tmp_path / "AAPL.csv", _rows_with((174.57, 174.55, 174.40, 174.50)))
    res = ingest([src], tmp_path / "store", options=IngestOptions(mode="repair"))
    assert _ohlc(res).select("field", "action").rows() == [("high", "dropped")]


def test_the_report_lists_every_changed_value_with_old_and_new(tmp_path):
    rows = clean_day_rows(DAY, seed=12)
    rows = [r + (round((r[3] + r[4] + r[5]) / 3, 4),) for r in rows]
    o, h, lo, c = rows[10][2:6]
    rows[10] = (*rows[10][:2], round(h + 0.01, 4), h, lo, c, rows[10][6], rows[10][7])  # open one tick above high
    rows[20] = (*rows[20][:7], round(rows[20][3] + 1.0, 4))  # vwap above the high: clipped
    rows[30] = (*rows[30][:7], "")  # vwap missing: derived
    src = write_vendor_csv(tmp_path / "VW.csv", rows, header="date,ToD,open,high,low,close,volume,vwap")
    res = ingest([src], tmp_path / "store", options=IngestOptions(mode="repair"))
    doc = json.loads(write_report(res.report, tmp_path / "rep.json")[0].read_text())
    changed = [(i["line"], i["kind"], i["field"], i["found"], i["new"]) for i in doc["issues"] if i["action"] == "changed"]
    typical = (rows[30][3] + rows[30][4] + rows[30][5]) / 3
    assert changed == [(12, "ohlc_inconsistent", "open", str(round(h + 0.01, 4)), str(h)),
                       (22, "vwap_outside_range", "vwap", str(rows[20][7]), str(rows[20][3])),
                       (32, "missing_vwap", "vwap", "''", str(typical))]
    assert all(i["new"] is None for i in doc["issues"] if i["action"] != "changed")
    md = write_report(res.report, tmp_path / "rep.md")[0].read_text()
    assert "| found | action | new |" in md and f"| {round(h + 0.01, 4)} | changed | {h} |" in md
