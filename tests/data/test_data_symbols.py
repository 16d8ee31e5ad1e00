"""A symbol is a name, never a path (issue 19, item 1): the probes of the issue on ``--symbol`` and on a long
file's symbol column, the one mapping symbol -> feature folder (Qlib's ``code_to_fname``, lower-cased) read back
through Qlib's own provider, and the containment check of every store write."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_helpers import clean_day_rows, qlib_read, write_vendor_csv
from data_prep import qlib_store
from data_prep.ingest import IngestOptions, ingest
from data_prep.symbols import (
    ALLOWED_PUNCTUATION, QLIB_PREFIX, check_distinct, fname_to_symbol, symbol_problem, symbol_to_fname,
)
from rolling_calib.cli import main

DAY = "2018-02-16"
LONG_HEADER = "symbol,date,ToD,open,high,low,close,volume"
#: The probes of issue 19, item 1.
PROBES = ["../../victim/features/aapl", "../../../ESCAPED", ".", "BRK/B"]


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path -> sha256): what a refused ingest must leave unchanged."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def world(tmp_path):
    """A committed victim store beside the target store, both three levels below ``tmp_path``."""
    base = tmp_path / "a" / "b" / "c"
    src = write_vendor_csv(tmp_path / "src" / "AAPL.csv", clean_day_rows(DAY, seed=1))
    ingest([src], base / "victim", options=IngestOptions(mode="strict"))
    return tmp_path, base


@pytest.mark.parametrize("probe", PROBES)
def test_a_path_like_symbol_in_a_long_file_is_refused_and_nothing_is_written(world, probe, capsys):
    tmp_path, base = world
    rows = [(probe, *r) for r in clean_day_rows(DAY, seed=2)[:2]]
    long = write_vendor_csv(tmp_path / "src" / "long.csv", [("MSFT", *r) for r in clean_day_rows(DAY, seed=3)[:3]]
                            + rows, header=LONG_HEADER)
    before = _tree(tmp_path)
    victim_close = qlib_store.read_feature(base / "victim", "AAPL", "close")[1].copy()
    code = main(["data", "ingest", str(long), "--out", str(base / "store"), "--repair", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"error: {long}: line 5: field 'symbol': expected a symbol") and repr(probe) in err
    assert len(err.strip().splitlines()) == 1
    assert _tree(tmp_path) == before  # the victim store, and everything else, byte for byte
    assert not (base / "store").exists()
    np.testing.assert_array_equal(qlib_store.read_feature(base / "victim", "AAPL", "close")[1], victim_close)
    assert qlib_store.store_info(base / "victim")["instruments"]["all"] == ["AAPL"]


@pytest.mark.parametrize("probe", PROBES)
def test_a_path_like_symbol_option_is_refused_and_nothing_is_written(world, probe, capsys):
    tmp_path, base = world
    src = write_vendor_csv(tmp_path / "src" / "ONE.csv", [r[:2] + (1.0, 1.0, 1.0, 1.0, 9.0)
                                                          for r in clean_day_rows(DAY, seed=2)[:2]])
    before = _tree(tmp_path)
    code = main(["data", "ingest", str(src), "--symbol", probe, "--out", str(base / "store"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("error: --symbol: expected a symbol") and repr(probe) in err
    assert _tree(tmp_path) == before and not (base / "store").exists()
    with pytest.raises(ValueError, match=r"--symbol: expected a symbol"):  # the API refuses it too
        ingest([src], base / "store", options=IngestOptions(mode="repair", symbol=probe))
    assert _tree(tmp_path) == before


def test_the_refusal_names_the_character_and_suggests_the_dotted_class():
    assert symbol_problem("BRK/B") == ("character '/' (U+002F) at position 4 is not allowed (a path separator); "
                                       "write the class with a dot: BRK.B")
    assert "U+0000" in symbol_problem("A\x00B") and "control character" in symbol_problem("A\nB")
    assert "a space" in symbol_problem("A B") and "drive" in symbol_problem("C:X")
    for bad in ("", ".", "..", "...", ".X", "X.", "_qlib_con", "CON.B", "NA", "NULL", "X" * 65):
        assert symbol_problem(bad) is not None, bad
    for good in ("AAPL", "BRK.B", "BF-B", "^GSPC", "ES=F", "M&T", "CON", "LPT1", "A_1MIN", "X" * 64):
        assert symbol_problem(good) is None, good


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(list("ABCZ019" + ALLOWED_PUNCTUATION) + ["CON", "LPT1", "NUL", "AUX", "/", "\x00"]),
                min_size=1, max_size=6).map("".join))
def test_the_mapping_is_qlibs_code_to_fname_lower_cased_and_reversible(symbol):
    from qlib.utils import code_to_fname

    if symbol_problem(symbol) is not None:
        with pytest.raises(ValueError):
            symbol_to_fname(symbol)
        return
    fname = symbol_to_fname(symbol)
    assert fname == code_to_fname(symbol).lower()  # the folder Qlib's provider opens
    assert fname_to_symbol(fname) == symbol
    assert fname not in ("", ".", "..") and "/" not in fname and "\\" not in fname


def test_distinct_symbols_never_share_a_folder():
    with pytest.raises(ValueError, match=r"'AAPL' and 'aapl' \(both features/aapl\)"):
        check_distinct(["AAPL", "aapl"], where="x")
    check_distinct(["CON", "CONN", "BRK.B", "BRKB"], where="x")
    assert symbol_problem(QLIB_PREFIX.upper() + "CON") is not None  # would share _qlib_con with CON


def test_dotted_class_and_device_name_symbols_are_read_back_through_qlib(tmp_path):
    syms = ["BRK.B", "CON", "^GSPC"]
    rows = clean_day_rows(DAY, seed=4)
    long = write_vendor_csv(tmp_path / "long.csv", [(s, *r) for s in syms for r in rows], header=LONG_HEADER)
    res = ingest([long], tmp_path / "store", options=IngestOptions(mode="strict", universe="MyUni"))
    assert sorted(p.name for p in (res.store / "features").iterdir()) == ["^gspc", "_qlib_con", "brk.b"]
    assert (res.store / "instruments" / "myuni.txt").is_file()  # Qlib opens instruments/<name.lower()>.txt
    df = qlib_read(res.store, syms, ["close"], DAY, f"{DAY} 23:59")
    for s in syms:
        np.testing.assert_array_equal(df.xs(s, level="instrument")["close"].to_numpy(),
                                      np.array([r[5] for r in rows], dtype=np.float32))
    from qlib.data import D

    assert sorted(D.list_instruments(D.instruments("MyUni"), freq="1min", as_list=True)) == sorted(syms)


def test_a_universe_name_is_a_file_name_never_a_path(tmp_path):
    with pytest.raises(ValueError, match=r"--universe: expected a name .* found '\.\./x'"):
        IngestOptions(universe="../x")
    with pytest.raises(ValueError, match="--universe"):
        IngestOptions(universe="a/b")


def test_every_store_write_is_checked_to_lie_inside_the_store(tmp_path):
    store, outside = tmp_path / "store", tmp_path / "outside"
    (store / "features").mkdir(parents=True)
    outside.mkdir()
    (store / "features" / "aapl").symlink_to(outside, target_is_directory=True)  # a link out of the store
    with pytest.raises(ValueError, match="outside the store"):
        qlib_store.write_feature(store, "AAPL", "close", 0, np.ones(3), "1min")
    assert list(outside.iterdir()) == []
    for part in ("..", ".", "", "a/b", "a\x00b"):
        with pytest.raises(ValueError, match="expected a file name inside the store"):
            qlib_store.store_file(store, "features", part, "close.1min.bin")
    with pytest.raises(ValueError, match="expected a symbol"):
        qlib_store.feature_path(store, "../../victim", "close", "1min")


def test_synthetic_symbols_are_names_too(tmp_path):
    from data_prep import build_synthetic_store

    with pytest.raises(ValueError, match=r"symbols: expected a symbol .* found '\.\./X'"):
        build_synthetic_store(tmp_path / "s", start="2018-01-02", end="2018-01-03", symbols=["AAPL", "../x"])
    assert not (tmp_path / "s").exists()
