"""Daily-bar ingest: ``rolling-calib data ingest SRC --out DIR [--freq day]`` writes a Qlib ``day`` store.

Real input: the shared daily CSVs ``us-equities-daily-2013-2018`` (tests/shared_data.py finds them; read through Qlib's
own provider, no mocks); small hand-made files for the validation kinds.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from data_prep import qlib_store
from data_prep.ingest import IngestError, IngestOptions, StoreConflict, StrictError, ValidationFailed, ingest
from data_prep.trading_calendar import sessions
from shared_data import DAILY, needs_shared

SYMBOLS = ("AAPL", "F", "XOM")
REPO = Path(__file__).resolve().parents[2]

needs_daily = needs_shared(DAILY.name)


def _copy(tmp: Path, symbols=SYMBOLS) -> Path:
    src = tmp / "src"
    src.mkdir()
    for sym in symbols:
        shutil.copy(DAILY / f"{sym}.csv", src / f"{sym}.csv")
    return src


@pytest.fixture(scope="module")
def real_day_store(tmp_path_factory) -> Path:
    if not DAILY.is_dir():
        pytest.skip("the real daily CSVs are not on this machine")
    tmp = tmp_path_factory.mktemp("daily")
    src = _copy(tmp)
    res = ingest([src], tmp / "store")  # frequency detected: a date column of dates, no time column
    assert res.freq == "day" and not res.appended
    assert res.report.error_count() == 0
    return tmp / "store"


@needs_daily
def test_real_daily_csvs_give_a_committed_qlib_day_store(real_day_store):
    store = real_day_store
    assert qlib_store.store_freq(store) == "day"
    assert not (store / "calendars" / "1min.txt").exists()
    lines = (store / "calendars" / "day.txt").read_text().splitlines()
    expected = [str(d) for d in sessions("2013-02-08", "2018-02-07").dates]
    assert lines == expected and len(lines) == 1259  # every NYSE session of the range
    spans = (store / "instruments" / "all.txt").read_text().splitlines()
    assert spans == [f"{s}\t2013-02-08\t2018-02-07" for s in SYMBOLS]
    assert sorted(p.name for p in (store / "features" / "aapl").iterdir()) == [
        f"{f}.day.bin" for f in sorted(qlib_store.FIELDS)]
    assert qlib_store.check_committed(store) == store.resolve()
    marker = (store / "COMMITTED").read_text()
    assert '"freq": "day"' in marker
    info = qlib_store.store_info(store)
    assert info["freq"] == "day" and info["calendar"]["sessions"] == 1259
    assert info["meta"]["freq"] == "day" and info["meta"]["calendar"]["last"] == "2018-02-07"


@needs_daily
def test_qlib_reads_the_daily_store_with_the_csv_values(real_day_store):
    import qlib
    from qlib.data import D

    qlib.init(provider_uri={"day": str(real_day_store)}, region="us", expression_cache=None, dataset_cache=None,
              kernels=1)
    assert len(D.calendar(freq="day")) == 1259
    got = D.features(["AAPL", "XOM"], ["$open", "$high", "$low", "$close", "$volume", "$vwap", "$factor"],
                     "2014-06-02", "2014-06-30", freq="day")
    for sym in ("AAPL", "XOM"):
        csv = pd.read_csv(DAILY / f"{sym}.csv", parse_dates=["date"]).set_index("date").loc["2014-06-02":"2014-06-30"]
        frame = got.xs(sym, level="instrument")
        assert list(frame.index) == list(csv.index)
        for f in ("open", "high", "low", "close", "volume"):
            assert np.array_equal(frame[f"${f}"].to_numpy(), csv[f].to_numpy().astype("float32"))
        typical = ((csv["high"] + csv["low"] + csv["close"]) / 3).to_numpy().astype("float32")
        assert np.array_equal(frame["$vwap"].to_numpy(), typical)
        assert (frame["$factor"] == 1).all()


@needs_daily
def test_cli_ingest_freq_day_and_info(tmp_path):
    src = _copy(tmp_path, ("F",))
    out = tmp_path / "store"
    cli = [sys.executable, "-m", "rolling_calib.cli", "data"]
    proc = subprocess.run(cli + ["ingest", str(src), "--out", str(out), "--freq", "day", "--no-progress"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "wrote 1,259 daily bars (1259 sessions)" in proc.stdout
    proc = subprocess.run(cli + ["info", str(out)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "freq        day" in proc.stdout and "1,259 sessions, 2013-02-08 .. 2018-02-07" in proc.stdout


@needs_daily
def test_append_of_later_sessions_equals_one_ingest(tmp_path):
    src = pd.read_csv(DAILY / "XOM.csv", dtype=str)
    whole, a, b = tmp_path / "whole", tmp_path / "a", tmp_path / "b"
    for d in (whole, a, b):
        d.mkdir()
    src.to_csv(whole / "XOM.csv", index=False)
    src.iloc[:700].to_csv(a / "XOM.csv", index=False)
    src.iloc[650:].to_csv(b / "XOM.csv", index=False)  # overlapping sessions agree
    ingest([whole], tmp_path / "one")
    ingest([a], tmp_path / "two")
    res = ingest([b], tmp_path / "two")
    assert res.appended and res.freq == "day" and res.new_sessions == 1259 - 700
    for rel in ("calendars/day.txt", "instruments/all.txt", "features/xom/close.day.bin", "features/xom/volume.day.bin"):
        assert (tmp_path / "one" / rel).read_bytes() == (tmp_path / "two" / rel).read_bytes(), rel
    changed = src.iloc[650:].copy()
    changed.iloc[0, changed.columns.get_loc("volume")] = "12345"
    changed.to_csv(b / "XOM.csv", index=False)
    with pytest.raises(StoreConflict, match="volume"):
        ingest([b], tmp_path / "two")


# --------------------------------------------------------------------------- validation of daily bars
HEADER = "date,open,high,low,close,volume\n"
GOOD = [  # 2018-01-02 .. 2018-01-12: 9 NYSE sessions
    ("2018-01-02", 10, 10.5, 9.8, 10.2, 1000), ("2018-01-03", 10.2, 10.6, 10.0, 10.4, 1100),
    ("2018-01-04", 10.4, 10.7, 10.1, 10.3, 900), ("2018-01-05", 10.3, 10.5, 10.0, 10.1, 950),
    ("2018-01-08", 10.1, 10.4, 9.9, 10.2, 990), ("2018-01-09", 10.2, 10.5, 10.0, 10.3, 1010),
    ("2018-01-10", 10.3, 10.6, 10.1, 10.5, 1020), ("2018-01-11", 10.5, 10.8, 10.3, 10.6, 1030),
    ("2018-01-12", 10.6, 10.9, 10.4, 10.8, 1040),
]


def _write(path: Path, rows) -> Path:
    path.write_text(HEADER + "".join(",".join(str(v) for v in r) + "\n" for r in rows))
    return path


def test_daily_anomalies_are_found_reported_and_repaired(tmp_path):
    rows = list(GOOD)
    rows[1] = ("2018-01-03", 10.2, 10.0, 10.0, 10.4, 1100)  # high below close: ohlc_inconsistent
    rows[3] = ("2018-01-05", 10.3, 10.5, 10.0, "inf", 950)  # non_finite_value
    rows[5] = ("2018-01-09", 20.4, 21.0, 20.2, 20.6, 1010)  # price_jump overnight (x2 for one session: no split)
    rows.insert(7, ("2018-01-10", 10.3, 10.6, 10.1, 10.5, 1020))  # exact_duplicate
    rows.append(("2018-01-13", 10.8, 10.9, 10.7, 10.8, 10))  # a Saturday: non_session_day
    rows.append(("2018-01-16 09:30:00", 10.8, 10.9, 10.7, 10.8, 10))  # a time of day: bad_timestamp
    rows.append(("2018-01-17", -1, 10.9, 10.7, 10.8, 10))  # non_positive_price
    src = _write(tmp_path / "ABC.csv", rows)
    with pytest.raises(ValidationFailed) as info:
        ingest([src], tmp_path / "store", options=IngestOptions(freq="day"))
    totals = info.value.report.totals()
    assert totals == {"ohlc_inconsistent": 1, "non_finite_value": 1, "price_jump": 2, "exact_duplicate": 1,
                      "non_session_day": 1, "bad_timestamp": 1, "non_positive_price": 1,
                      "missing_session": 2}, totals  # 2018-01-03 and 2018-01-05 (their only bars are dropped)
    assert not (tmp_path / "store").exists()
    issues = info.value.report.issues
    jump, back = issues.filter(issues["kind"] == "price_jump").rows(named=True)
    assert "at 2018-01-09 after close 10.2 at 2018-01-08" in jump["found"] and "split" in jump["found"]
    assert jump["found"].endswith("not a split: prices are back at the earlier level at 2018-01-10 (close 10.5), 1 "
                                  "bar(s) after the jump; a bad tick or a vendor error?")  # not "a 1:2 split" (issue 19)
    assert back["found"].endswith("not a split: a return to the level of 2018-01-08 (close 10.2) after 1 bar(s) off it; "
                                  "a bad tick or a vendor error?")
    bad = issues.filter(issues["kind"] == "bad_timestamp").row(0, named=True)
    assert bad["_line"] == 13 and "a date like" in bad["expected"] and "09:30" in bad["found"]
    dup = issues.filter(issues["kind"] == "exact_duplicate").row(0, named=True)
    assert "one row per session" in dup["expected"]

    with pytest.raises(StrictError) as strict:
        ingest([src], tmp_path / "store", options=IngestOptions(mode="strict"))  # detected as daily
    assert "line 3" in str(strict.value) and "high" in str(strict.value)

    res = ingest([src], tmp_path / "store", options=IngestOptions(mode="repair"))
    assert res.freq == "day" and res.bars_written == 7  # 9 good sessions minus the non-finite and the OHLC ones
    cal = qlib_store.read_calendar(tmp_path / "store")
    assert [str(d.date()) for d in cal] == [r[0] for r in GOOD]
    start, high = qlib_store.read_feature(tmp_path / "store", "ABC", "high")
    assert start == 0 and np.isnan(high[1])  # dropped, never widened to the close (issue 19)
    assert np.isnan(qlib_store.read_feature(tmp_path / "store", "ABC", "close")[1][3])  # the dropped session


def test_daily_and_minute_files_are_not_mixed(tmp_path):
    day = _write(tmp_path / "ABC.csv", GOOD)
    minute = tmp_path / "XYZ.csv"
    minute.write_text("date,ToD,open,high,low,close,volume\n2018-01-02,09:30:00,1,1,1,1,1\n")
    with pytest.raises(IngestError, match="one frequency"):
        ingest([day, minute], tmp_path / "store")
    ingest([minute], tmp_path / "minute", options=IngestOptions(mode="repair"))
    with pytest.raises(StoreConflict, match="minute store"):
        ingest([day], tmp_path / "minute")
    assert qlib_store.store_freq(tmp_path / "minute") == "1min"

