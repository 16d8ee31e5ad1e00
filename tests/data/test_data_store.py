"""Qlib binary store: layout, round trip through Qlib's own reader, determinism, metadata."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from data_prep import DEFAULT_SYMBOLS, FIELDS, UNIVERSE_NAME, build_synthetic_store, session_minutes
from data_prep import qlib_store
from data_prep.synthetic import generate_bars
from data_helpers import qlib_read

SYMS = ["AAPL", "F", "JPM"]


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    d = tmp_path_factory.mktemp("store")
    return build_synthetic_store(d, start="2013-07-01", end="2013-07-12", symbols=SYMS, seed=3)


def test_default_symbols_are_method_3_3_in_order():
    assert DEFAULT_SYMBOLS[:3] == ("DIS", "VZ", "JPM") and DEFAULT_SYMBOLS[-1] == "CSCO"
    assert len(DEFAULT_SYMBOLS) == 25 == len(set(DEFAULT_SYMBOLS))
    assert FIELDS == ("open", "high", "low", "close", "volume", "vwap", "factor")


def test_layout_and_binary_format(small_store):
    cal_lines = (small_store / "calendars" / "1min.txt").read_text().splitlines()
    expected = session_minutes("2013-07-01", "2013-07-12")
    assert cal_lines == [t.strftime("%Y-%m-%d %H:%M:%S") for t in expected]
    for name in ("all", UNIVERSE_NAME):
        lines = (small_store / "instruments" / f"{name}.txt").read_text().splitlines()
        assert [ln.split("\t")[0] for ln in lines] == SYMS
        assert lines[0].split("\t")[1:] == ["2013-07-01 09:30:00", "2013-07-12 15:59:00"]
    for sym in SYMS:
        for field in FIELDS:
            raw = np.fromfile(small_store / "features" / sym.lower() / f"{field}.1min.bin", dtype="<f4")
            assert raw[0] == 0.0 and len(raw) == len(expected) + 1


def test_round_trip_through_qlib_every_field_equals_source_float32(small_store):
    src = generate_bars(SYMS, start="2013-07-01", end="2013-07-12", seed=3).set_index(["symbol", "datetime"])
    got = qlib_read(small_store, SYMS, FIELDS, "2013-07-01", "2013-07-12 23:59")
    assert len(got) == len(src)
    for sym in SYMS:
        g = got.loc[sym]
        s = src.loc[sym]
        assert g.index.equals(pd.DatetimeIndex(s.index))  # only calendar minutes, incl. the 07-03 early close
        for field in FIELDS:
            np.testing.assert_array_equal(g[field].to_numpy(np.float32), s[field].to_numpy().astype(np.float32))
    assert got[list(FIELDS)].isna().any(axis=1).sum() == src[list(FIELDS)].isna().any(axis=1).sum()


def test_qlib_returns_only_calendar_minutes_across_days_and_early_close(small_store):
    got = qlib_read(small_store, ["AAPL"], ["close"], "2013-07-03", "2013-07-05 23:59")
    times = got.loc["AAPL"].index
    assert len(times) == 210 + 390
    assert times[209] == pd.Timestamp("2013-07-03 12:59") and times[210] == pd.Timestamp("2013-07-05 09:30")


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    a = build_synthetic_store(tmp_path / "a", start="2018-01-02", end="2018-01-05", symbols=["AAPL", "KO"], seed=7)
    b = build_synthetic_store(tmp_path / "b", start="2018-01-02", end="2018-01-05", symbols=["AAPL", "KO"], seed=7)
    c = build_synthetic_store(tmp_path / "c", start="2018-01-02", end="2018-01-05", symbols=["AAPL", "KO"], seed=8)
    path = ("features", "aapl", "close.1min.bin")
    assert a.joinpath(*path).read_bytes() == b.joinpath(*path).read_bytes()
    assert a.joinpath(*path).read_bytes() != c.joinpath(*path).read_bytes()
    # a symbol's path does not depend on which other symbols are generated
    d = build_synthetic_store(tmp_path / "d", start="2018-01-02", end="2018-01-05", symbols=["AAPL"], seed=7)
    assert a.joinpath(*path).read_bytes() == d.joinpath(*path).read_bytes()


def test_metadata_records_seed_params_source_and_counts(small_store):
    meta = json.loads((small_store / "meta.json").read_text())
    assert meta["source"] == "synthetic" and meta["seed"] == 3
    assert meta["symbols"] == SYMS and meta["params"]["t_df"] == 4.0
    n = len(session_minutes("2013-07-01", "2013-07-12"))
    for sym in SYMS:
        assert meta["rows"][sym]["bars"] + meta["rows"][sym]["missing"] == n
    assert meta["total_rows"] == sum(r["bars"] for r in meta["rows"].values())


def test_store_info_summarises(small_store):
    info = qlib_store.store_info(small_store)
    assert info["calendar"]["sessions"] == 9 and info["instruments"]["us25"] == sorted(SYMS)
    assert info["fields"] == sorted(FIELDS)


def test_bad_arguments_are_value_errors(tmp_path):
    with pytest.raises(ValueError, match="symbols: expected distinct"):
        build_synthetic_store(tmp_path, start="2018-01-02", end="2018-01-03", symbols=["AAPL", "AAPL"])
    with pytest.raises(ValueError, match="seed: expected a non-negative integer"):
        build_synthetic_store(tmp_path, start="2018-01-02", end="2018-01-03", symbols=["AAPL"], seed=-1)
    with pytest.raises(ValueError, match="at least one NYSE session"):
        build_synthetic_store(tmp_path, start="2018-01-06", end="2018-01-07", symbols=["AAPL"])
    with pytest.raises(ValueError, match="calendars/1min.txt"):
        qlib_store.init_qlib(tmp_path / "nothing")
