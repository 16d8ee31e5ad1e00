"""The shared real 2018 sample: --repair lists every anomaly it contains, --strict names the first."""

from __future__ import annotations

import numpy as np
import pandas as pd
import polars as pl
import pytest

from data_helpers import SHARED_SAMPLE, qlib_read
from shared_data import needs_shared
from data_prep import session_minutes
from data_prep.ingest import IngestOptions, StrictError, ValidationFailed, ingest
from data_prep.ingest_report import write_report

pytestmark = needs_shared(SHARED_SAMPLE.name)


@pytest.fixture(scope="module")
def pandas_view():
    """Independent pandas reading of the sample: the facts the report must contain."""
    out = {}
    for f in sorted(SHARED_SAMPLE.glob("*.csv")):
        df = pd.read_csv(f)
        df["dt"] = pd.to_datetime(df["date"] + " " + df["ToD"])
        out[f.stem] = df
    return out


@pytest.fixture(scope="module")
def repaired(tmp_path_factory):
    d = tmp_path_factory.mktemp("real")
    res = ingest([SHARED_SAMPLE], d / "store", options=IngestOptions(mode="repair"))
    write_report(res.report, d / "report")
    return res


def test_repair_report_counts_match_an_independent_reading(repaired, pandas_view):
    counts = repaired.report.counts()
    cal = session_minutes("2018-02-16", "2018-04-20")
    assert set(counts) == set(pandas_view) and len(pandas_view) == 24
    for sym, df in pandas_view.items():
        c = counts[sym]
        assert c.get("closing_auction", 0) == int((df["ToD"] == "16:00:00").sum())
        assert c.get("exact_duplicate", 0) == int(df.duplicated(subset=["dt"] + list(df.columns[2:7])).sum())
        assert c.get("conflicting_duplicate", 0) == 0
        # a row is unsorted when earlier than the latest earlier *kept* row (not a 16:00 bar, not a copy):
        # DIS's appended copy of its 2018-04-20 15:59 bar is behind only the dropped 16:00 bar (3,901, was 3,902)
        kept = (df["ToD"] != "16:00:00") & ~df.duplicated(subset=["dt"])
        behind = df["dt"] < df["dt"].where(kept).cummax().ffill().shift(1)
        assert c.get("unsorted", 0) == int(behind.sum())
        present = pd.DatetimeIndex(df["dt"]).unique()
        assert c.get("missing_minutes", 0) == int((~cal.isin(present)).sum())
        kinds = set(c) - {"closing_auction", "exact_duplicate", "unsorted", "missing_minutes"}
        assert not kinds, (sym, kinds)
    totals = repaired.report.totals()
    assert totals["closing_auction"] == 24 * 44 + 10  # DIS repeats ten 16:00 bars
    assert repaired.bars_written + sum(repaired.report.rows_dropped().values()) == sum(repaired.report.rows_in.values())


def test_repaired_store_reads_back_through_qlib(repaired, pandas_view):
    got = qlib_read(repaired.store, ["AAPL", "DIS"], ["close", "volume"], "2018-02-16", "2018-04-20 23:59")
    for sym in ("AAPL", "DIS"):
        df = pandas_view[sym].drop_duplicates(subset=["dt"]).set_index("dt").sort_index()
        df = df[df["ToD"] != "16:00:00"]
        g = got.loc[sym].dropna()
        assert g.index.equals(pd.DatetimeIndex(df.index))
        np.testing.assert_array_equal(g["close"].to_numpy(np.float32), df["close"].to_numpy(np.float32))
        assert g.index.max() == pd.Timestamp("2018-04-20 15:59")


def test_report_lists_every_dropped_row_with_file_and_line(repaired):
    issues = repaired.report.issues
    dropped = issues.filter(pl.col("action") == "dropped").unique(["_file", "_line"])
    assert dropped.height == sum(repaired.report.rows_dropped().values()) == 1066 + 3903 - 10


def test_strict_fails_naming_the_first_anomaly(tmp_path):
    with pytest.raises(StrictError) as info:
        ingest([SHARED_SAMPLE], tmp_path / "store", options=IngestOptions(mode="strict"))
    e = info.value
    assert e.file.endswith("AAPL.csv") and e.line == 392 and e.field == "ToD" and e.kind == "closing_auction"
    assert "found '2018-02-16 16:00:00'" in str(e)


def test_default_mode_refuses_the_sample(tmp_path):
    with pytest.raises(ValidationFailed) as info:
        ingest([SHARED_SAMPLE / "DIS.csv"], tmp_path / "store", options=IngestOptions())
    assert info.value.report.totals()["exact_duplicate"] == 3903
    assert not (tmp_path / "store").exists()
