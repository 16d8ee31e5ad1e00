"""Bars dated after today are refused by --strict and dropped and counted by --repair: five bars dated 2031 in a
2018 minute file no longer give a calendar running to 2031 (issue 30 item 3)."""

from __future__ import annotations

import pytest

from data_helpers import clean_day_rows, write_vendor_csv
from data_prep.ingest import IngestOptions, StrictError, ingest
from rolling_calib.cli import main

FUTURE = "2031-03-04"  # a Tuesday, an NYSE session in exchange_calendars' schedule


def _file(tmp_path):
    rows = clean_day_rows("2018-02-16", seed=1) + clean_day_rows("2018-02-20", seed=2, price=100.0)
    rows += [(FUTURE,) + r[1:] for r in clean_day_rows(FUTURE, seed=3, n=5, price=100.0)]
    return write_vendor_csv(tmp_path / "AAPL.csv", rows)


def test_repair_drops_and_counts_future_bars_and_the_calendar_ends_in_2018(tmp_path):
    res = ingest([_file(tmp_path)], tmp_path / "store", options=IngestOptions(mode="repair"))
    assert res.report.totals().get("future_bar") == 5
    calendar = (tmp_path / "store" / "calendars" / "1min.txt").read_text().split("\n")
    assert calendar[-1].startswith("2018-02-20 15:59") or calendar[-2].startswith("2018-02-20 15:59")
    assert not any(line.startswith("2031") for line in calendar)
    assert res.bars_written == 780


def test_strict_refuses_a_future_bar_naming_file_line_and_today(tmp_path, capsys):
    src = _file(tmp_path)
    with pytest.raises(StrictError):
        ingest([src], tmp_path / "store", options=IngestOptions(mode="strict"))
    code = main(["data", "ingest", str(src), "--out", str(tmp_path / "s2"), "--strict", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err  # the data commands exit 1 on data errors (as every strict refusal)
    assert f"{src}: line 782: field 'date': expected a date on or before today" in err[0] and "[future_bar]" in err[0]
    assert not (tmp_path / "s2").exists()
