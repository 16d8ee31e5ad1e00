"""The ingest reads in batches and works symbol by symbol: same store, report and errors as one whole-data pass.

The reference here is the whole-data pipeline the ingest replaced: every file read whole
(``read_vendor_file`` without a sink), all rows concatenated, split by symbol and validated with
one session table over the whole range. The ingest instead reads Parquet a few row groups at a
time, parks each symbol's rows on disk and validates and writes one symbol at a time.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pytest

from data_helpers import clean_day_rows
from data_prep import ingest as ingest_mod
from data_prep import qlib_store
from data_prep.ingest import IngestOptions, ValidationFailed, ingest
from data_prep.validate import session_table, validate_symbol
from data_prep.vendor import ColumnMap, read_vendor_file

DAYS = ("2018-02-14", "2018-02-15", "2018-02-16")
SYMBOLS = ("AAA", "BBB", "CCC")
COLS = ColumnMap(datetime="datetime")


def _bars(day: str, sym: str, seed: int, n: int = 390) -> pd.DataFrame:
    rows = clean_day_rows(day, n=n, price=50.0 + 10 * seed, seed=seed)
    return pd.DataFrame({
        "symbol": sym,
        "datetime": pd.to_datetime([f"{r[0]} {r[1]}" for r in rows]),
        **{f: [float(r[k]) for r in rows] for k, f in enumerate(("open", "high", "low", "close", "volume"), start=2)},
    })


def _dirty_long_files(tmp_path: Path) -> list[Path]:
    """Two long Parquet files, symbols interleaved in time order, small row groups, with anomalies;
    AAA and BBB are in both files, CCC only in the second, a few rows have no symbol."""
    frames = [_bars(d, s, seed=10 * i + j) for i, d in enumerate(DAYS) for j, s in enumerate(SYMBOLS)]
    df = pd.concat(frames).sort_values(["datetime", "symbol"], kind="stable").reset_index(drop=True)
    extra = df.iloc[[5, 700]].copy()  # exact duplicates
    conflict = df.iloc[[40]].copy()
    conflict["close"] *= 1.02  # conflicting duplicate
    auction = df.iloc[[90]].copy()
    auction["datetime"] = auction["datetime"].dt.normalize() + pd.Timedelta(hours=16)  # closing auction
    df.loc[300, "volume"] = -1.0  # negative volume
    df.loc[310, "high"] = df.loc[310, "high"] * 10  # price spike
    df.loc[320, "low"] = df.loc[320, "high"] + 0.5  # OHLC inconsistent
    nosym = df.iloc[[400]].copy()
    nosym["symbol"] = None
    df = pd.concat([df, extra, conflict, auction, nosym]).reset_index(drop=True)
    df.iloc[[600, 601]] = df.iloc[[601, 600]].to_numpy()  # unsorted
    first = df[df["datetime"] < pd.Timestamp(DAYS[1]) + pd.Timedelta(hours=12)]
    first = first[first["symbol"].isin(["AAA", "BBB"]) | first["symbol"].isna()]
    second = df.drop(first.index)
    paths = [tmp_path / "in" / "a.parquet", tmp_path / "in" / "b.parquet"]
    paths[0].parent.mkdir()
    pl.from_pandas(first).write_parquet(paths[0], row_group_size=97)
    pl.from_pandas(second).write_parquet(paths[1], row_group_size=250)
    return paths


def _whole_data_reference(files: list[Path]) -> tuple[pl.DataFrame, dict, dict]:
    """``(issues, rows_in, clean by symbol)`` of the whole-data pass."""
    frames = [read_vendor_file(f, file_index=i, columns=COLS)[0] for i, f in enumerate(files)]
    data = pl.concat(frames, how="diagonal_relaxed").with_columns(pl.col("symbol").fill_null(""))
    ts = data.get_column("ts").drop_nulls()
    sessions = session_table(ts.min().date(), ts.max().date())
    names = [str(f) for f in files]
    issues, rows_in, clean = [], {}, {}
    for (sym,), frame in sorted(data.partition_by("symbol", as_dict=True, maintain_order=True).items()):
        res = validate_symbol(frame, sym, files=names, time_field=["datetime"] * len(files), sessions=sessions)
        if res.issues.height:
            issues.append(res.issues)
        rows_in[sym] = res.rows_in
        if sym:
            clean[sym] = res.clean
    return pl.concat(issues), rows_in, clean


def _store_bytes(store: Path) -> dict[str, bytes]:
    out = {}
    for p in sorted(store.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            if p.name == qlib_store.META_FILE:
                meta = json.loads(data)
                for u in meta["updates"]:
                    u.pop("when")
                data = json.dumps(meta, sort_keys=True).encode()
            out[str(p.relative_to(store))] = data
    return out


def test_batched_read_is_the_whole_file_read(tmp_path):
    """Parquet read row groups at a time: same rows, line numbers and file info as one read."""
    df = pd.concat([_bars(DAYS[0], s, seed=k) for k, s in enumerate(SYMBOLS)])
    df["symbol"] = [s if i < 500 else f" {s.lower()}" for i, s in enumerate(df["symbol"])]  # normalised in part
    df["datetime"] = df["datetime"].dt.strftime("%Y-%m-%d %H:%M:%S")  # text times
    path = tmp_path / "long.parquet"
    pl.from_pandas(df).write_parquet(path, row_group_size=64)
    whole, info = read_vendor_file(path, file_index=3, columns=COLS)
    parts: list[pl.DataFrame] = []
    empty, batched = read_vendor_file(path, file_index=3, columns=COLS, sink=parts.append, batch_rows=150)
    assert len(parts) > 5 and empty.height == 0 and empty.schema == whole.schema
    assert pl.concat(parts).equals(whole) and batched == info
    assert parts[1].get_column("_line")[0] == parts[0].height + 1  # Parquet lines are row numbers, 1-based


def test_batched_read_detects_daily_bars_and_refuses_mixed_zones_like_the_whole_read(tmp_path):
    daily = pd.DataFrame({"date": ["2018-02-14", "2018-02-15", "2018-02-16"] * 50, "open": 1.0, "high": 1.0,
                          "low": 1.0, "close": 1.0, "volume": 1.0})
    path = tmp_path / "D.parquet"
    pl.from_pandas(daily).write_parquet(path, row_group_size=20)
    assert read_vendor_file(path, file_index=0, columns=ColumnMap(), freq=None,
                            sink=lambda df: None, batch_rows=30)[1].freq == "day"
    mixed = _bars(DAYS[0], "AAA", seed=1)
    text = mixed["datetime"].dt.strftime("%Y-%m-%dT%H:%M:%S").tolist()
    mixed["datetime"] = text[:300] + [t + "-05:00" for t in text[300:]]  # zoned only in later row groups
    path = tmp_path / "MIX.parquet"
    pl.from_pandas(mixed).write_parquet(path, row_group_size=100)
    with pytest.raises(ValueError) as whole:
        read_vendor_file(path, file_index=0, columns=COLS)
    with pytest.raises(ValueError) as batched:
        read_vendor_file(path, file_index=0, columns=COLS, sink=lambda df: None, batch_rows=100)
    assert str(batched.value) == str(whole.value) and "line 1 has" in str(whole.value)


def test_symbol_by_symbol_ingest_is_the_whole_data_pass(tmp_path, monkeypatch):
    """Several files, interleaved symbols, symbols spanning files and batches: the store and the
    report of the symbol-by-symbol ingest are those of validating all rows at once."""
    files = _dirty_long_files(tmp_path)
    opts = IngestOptions(mode="repair", columns=COLS)
    monkeypatch.setattr(ingest_mod, "_BATCH_ROWS", 200)  # several batches per file
    small = ingest(files, tmp_path / "small", options=opts)
    monkeypatch.setattr(ingest_mod, "_BATCH_ROWS", 10**9)  # each file in one batch
    whole = ingest(files, tmp_path / "whole", options=opts)
    assert _store_bytes(small.store) == _store_bytes(whole.store)
    assert small.report.to_dict() == whole.report.to_dict()

    issues, rows_in, clean = _whole_data_reference(files)
    assert small.report.issues.equals(issues)
    assert small.report.rows_in == rows_in and set(rows_in) == {"", *SYMBOLS}
    kinds = set(issues.get_column("kind"))
    assert {"exact_duplicate", "conflicting_duplicate", "closing_auction", "negative_volume", "price_spike",
            "ohlc_inconsistent", "unsorted", "missing_value"} <= kinds
    cal = qlib_store.read_calendar(small.store).to_numpy()
    for sym, frame in clean.items():
        start, close = qlib_store.read_feature(small.store, sym, "close")
        pos = np.searchsorted(cal, frame.get_column("ts").to_numpy()) - start
        np.testing.assert_array_equal(close[pos], frame.get_column("close").to_numpy().astype("<f4"))
        assert int(np.isfinite(close).sum()) == frame.height == small.report.rows_out[sym]


def test_spill_files_are_removed_after_success_and_refusal(tmp_path, monkeypatch):
    files = _dirty_long_files(tmp_path)
    spill_root = tmp_path / "tmp"
    spill_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill_root))
    with pytest.raises(ValidationFailed):
        ingest(files, tmp_path / "store", options=IngestOptions(columns=COLS))
    assert not (tmp_path / "store").exists() and os.listdir(spill_root) == []
    res = ingest(files, tmp_path / "store", options=IngestOptions(mode="repair", columns=COLS, start=DAYS[1]))
    assert res.report.totals()["outside_requested_range"] > 0 and os.listdir(spill_root) == []


def test_files_with_different_columns_are_validated_with_every_files_columns(tmp_path):
    """A symbol found only in a file without a vwap column is validated as in the concatenation of
    every file (its vwap column present and empty), as the whole-data pass did."""
    a = _bars(DAYS[0], "AAA", seed=1)
    a["vwap"] = (a["high"] + a["low"] + a["close"]) / 3
    b = _bars(DAYS[0], "BBB", seed=2)
    for df, name in ((a, "A.csv"), (b, "B.csv")):
        df = df.assign(date=df["datetime"].dt.strftime("%Y-%m-%d"), ToD=df["datetime"].dt.strftime("%H:%M:%S"))
        df.drop(columns=["symbol", "datetime"]).to_csv(tmp_path / name, index=False)
    files = [tmp_path / "A.csv", tmp_path / "B.csv"]
    res = ingest(files, tmp_path / "store", options=IngestOptions(mode="repair"))
    frames = [read_vendor_file(f, file_index=i, columns=ColumnMap())[0] for i, f in enumerate(files)]
    data = pl.concat(frames, how="diagonal_relaxed")
    sessions = session_table(DAYS[0], DAYS[0])
    expected = [validate_symbol(g, s, files=[str(f) for f in files], time_field="date,ToD", sessions=sessions).issues
                for (s,), g in sorted(data.partition_by("symbol", as_dict=True, maintain_order=True).items())]
    assert res.report.issues.equals(pl.concat([e for e in expected if e.height]))
    assert res.report.totals().get("missing_vwap") == 390  # BBB's bars: vwap derived, as before


def test_time_zone_hints_of_files_read_in_batches(tmp_path, monkeypatch):
    from data_prep.validate import timezone_hints

    files = _dirty_long_files(tmp_path)
    opts = IngestOptions(mode="repair", columns=COLS, tz="UTC")
    monkeypatch.setattr(ingest_mod, "_BATCH_ROWS", 150)
    res = ingest(files, tmp_path / "store", options=opts)
    frames = [read_vendor_file(f, file_index=i, columns=COLS, tz="UTC")[0] for i, f in enumerate(files)]
    expected = timezone_hints(pl.concat(frames), [str(f) for f in files], tz="UTC", zoned=[False, False])
    assert len(expected) == 2 and res.report.hints == [expected[0], expected[1]]
    assert "pass --tz America/New_York" in expected[0]


def test_spill_directories_of_killed_ingests_are_removed_by_the_next(tmp_path, monkeypatch):
    import subprocess
    import sys

    files = _dirty_long_files(tmp_path)
    spill_root = tmp_path / "tmp"
    spill_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill_root))
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = spill_root / f"{ingest_mod._SPILL_PREFIX}{int(done.stdout)}-x1"  # a finished process: killed ingest
    live = spill_root / f"{ingest_mod._SPILL_PREFIX}{os.getppid()}-x2"  # a running process: its ingest goes on
    for d in (dead, live):
        (d / "read").mkdir(parents=True)
    ingest(files, tmp_path / "store", options=IngestOptions(mode="repair", columns=COLS))
    assert sorted(os.listdir(spill_root)) == [live.name]
