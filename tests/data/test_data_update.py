"""Ingest into a store: Qlib round trip, incremental update, overlap conflicts, resume, adjustments."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from data_helpers import clean_day_rows, qlib_read, write_vendor_csv
from data_prep import FIELDS, qlib_store
from data_prep.ingest import IngestOptions, StoreConflict, ingest

REPAIR = IngestOptions(mode="repair")
D1, D2, D3 = "2018-02-15", "2018-02-16", "2018-02-20"


def _csv(path, days, seed=0, drop=()):
    rows = []
    for k, d in enumerate(days):
        rows += clean_day_rows(d, seed=seed + k)
    rows = [r for i, r in enumerate(rows) if i not in set(drop)]
    return write_vendor_csv(path, rows), rows


def _files(store):
    return {p.relative_to(store).as_posix(): p.read_bytes() for p in sorted(store.rglob("*.bin"))}


def test_round_trip_through_qlib_equals_source_float32(tmp_path):
    src, rows = _csv(tmp_path / "RT.csv", [D1, D2], drop=(5, 400))
    store = ingest([src], tmp_path / "store", options=REPAIR).store
    got = qlib_read(store, ["RT"], FIELDS, D1, f"{D2} 23:59").loc["RT"]
    ts = pd.to_datetime([f"{r[0]} {r[1]}" for r in rows])
    assert len(got) == 780 and got.loc[ts].notna().all().all() and got.isna().sum()["close"] == 2
    vals = np.array([r[2:] for r in rows], dtype=np.float64)
    for j, f in enumerate(["open", "high", "low", "close", "volume"]):
        np.testing.assert_array_equal(got.loc[ts, f].to_numpy(np.float32), vals[:, j].astype(np.float32))
    typical = ((vals[:, 1] + vals[:, 2] + vals[:, 3]) / 3).astype(np.float32)
    np.testing.assert_array_equal(got.loc[ts, "vwap"].to_numpy(np.float32), typical)
    assert (got.loc[ts, "factor"] == 1.0).all()


def test_incremental_update_appends_without_rewriting_history(tmp_path):
    src1, _ = _csv(tmp_path / "A1" / "UP.csv", [D1, D2])
    store = ingest([src1], tmp_path / "store", options=REPAIR).store
    before = _files(store)
    cal_before = (store / "calendars" / "1min.txt").read_text()
    # second delivery: repeats D2 identically and adds D3
    rows2 = clean_day_rows(D2, seed=1) + clean_day_rows(D3, seed=7)
    src2 = write_vendor_csv(tmp_path / "A2" / "UP.csv", rows2)
    res = ingest([src2], store, options=REPAIR)
    assert res.appended and res.new_sessions == 1 and res.bars_written == 390
    after = _files(store)
    for name, old in before.items():
        assert after[name][: len(old)] == old  # history bytes untouched
        assert len(after[name]) == len(old) + 4 * 390
    assert (store / "calendars" / "1min.txt").read_text().startswith(cal_before)
    assert qlib_store.read_instruments(store)["UP"][1] == pd.Timestamp(f"{D3} 15:59")
    got = qlib_read(store, ["UP"], ["close"], D1, f"{D3} 23:59").loc["UP"]
    assert len(got) == 3 * 390 and got.loc[f"{D3} 09:30", "close"] == np.float32(rows2[390][5])
    assert len(qlib_store.read_meta(store)["updates"]) == 2


def test_overlap_that_conflicts_is_refused_and_nothing_changes(tmp_path):
    src1, _ = _csv(tmp_path / "UP.csv", [D1, D2])
    store = ingest([src1], tmp_path / "store", options=REPAIR).store
    before = _files(store)
    rows2 = clean_day_rows(D2, seed=1) + clean_day_rows(D3, seed=7)
    rows2[100] = rows2[100][:6] + (rows2[100][6] + 1.0,)  # a different volume for a stored minute
    src2 = write_vendor_csv(tmp_path / "b" / "UP.csv", rows2)
    with pytest.raises(StoreConflict, match=rf"UP: {D2}T11:10 field 'volume': stored"):
        ingest([src2], store, options=REPAIR)
    assert _files(store) == before
    early = write_vendor_csv(tmp_path / "c" / "UP.csv", clean_day_rows("2018-02-14", seed=3))
    with pytest.raises(StoreConflict, match="history is not rewritten"):
        ingest([early], store, options=REPAIR)


def test_interrupted_append_resumes_to_the_same_bytes(tmp_path):
    rows2 = clean_day_rows(D2, seed=1) + clean_day_rows(D3, seed=7)
    stores = []
    for name in ("clean", "crashed"):
        d = tmp_path / name
        src1, _ = _csv(d / "UP.csv", [D1, D2])
        store = ingest([src1], d / "store", options=REPAIR).store
        if name == "crashed":  # a previous append wrote feature bytes but died before the calendar
            with open(qlib_store.feature_path(store, "UP", "close"), "ab") as fh:
                np.full(77, 123.0, dtype="<f4").tofile(fh)
        ingest([write_vendor_csv(d / "new" / "UP.csv", rows2)], store, options=REPAIR)
        stores.append(_files(store))
    assert stores[0] == stores[1]


def test_split_and_dividend_back_adjustment_and_factor(tmp_path):
    rows = clean_day_rows(D1, seed=0, price=100.0) + clean_day_rows(D2, seed=1, price=50.0)
    src = write_vendor_csv(tmp_path / "SP.csv", rows)
    adj = tmp_path / "actions.csv"
    last_close_d1 = rows[389][5]
    adj.write_text(f"symbol,date,split_ratio,dividend\nSP,{D2},2,\nSP,{D2},,0.5\n")
    store = ingest([src], tmp_path / "store", options=IngestOptions(mode="repair", adjustments=str(adj))).store
    _, factor = qlib_store.read_feature(store, "SP", "factor")
    _, close = qlib_store.read_feature(store, "SP", "close")
    _, volume = qlib_store.read_feature(store, "SP", "volume")
    expected = 0.5 * (1 - 0.5 / last_close_d1)
    np.testing.assert_allclose(factor[:390], expected, rtol=1e-6)
    assert np.all(factor[390:] == 1.0)
    np.testing.assert_allclose(close[:390], np.array([r[5] for r in rows[:390]]) * expected, rtol=1e-6)
    np.testing.assert_allclose(volume[:390], np.array([r[6] for r in rows[:390]]) / expected, rtol=1e-6)
    np.testing.assert_array_equal(close[390:], np.array([r[5] for r in rows[390:]], dtype=np.float32))
    bad = tmp_path / "bad.csv"
    bad.write_text("symbol,date,split_ratio,dividend\nSP,2018-02-16,-2,\n")
    with pytest.raises(ValueError, match=r"bad.csv: line 2: field 'split_ratio': expected a ratio > 0, found '-2'"):
        ingest([src], tmp_path / "s2", options=IngestOptions(mode="repair", adjustments=str(bad)))
