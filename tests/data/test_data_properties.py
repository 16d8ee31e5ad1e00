"""Property tests (hypothesis): calendar algebra, and repair undoing shuffles and duplicates."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from data_prep.trading_calendar import minute_of_session, session_minutes, sessions
from data_prep.validate import validate_symbol

dates = st.dates(min_value=dt.date(2005, 1, 1), max_value=dt.date(2024, 12, 31))


@settings(max_examples=40, deadline=None)
@given(start=dates, length=st.integers(0, 45), cut=st.integers(0, 45))
def test_session_minutes_are_ordered_inside_sessions_and_split_cleanly(start, length, cut):
    end = start + dt.timedelta(days=length)
    idx = session_minutes(start, end)
    s = sessions(start, end)
    assert len(idx) == int(s.n_minutes.sum())
    assert idx.is_monotonic_increasing and idx.is_unique
    k = minute_of_session(idx)
    if len(idx):
        assert k.min() == 0 and k.max() <= 389
        assert set(np.unique(idx.normalize()).astype("datetime64[D]")) == set(s.dates)
    mid = start + dt.timedelta(days=min(cut, length))
    left = session_minutes(start, mid)
    right = session_minutes(mid + dt.timedelta(days=1), end) if mid < end else pd.DatetimeIndex([])
    assert left.append(right).equals(idx)


def _clean_frame(n: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    ts = pd.date_range("2018-02-16 09:30", periods=n, freq="1min")
    close = 100 * np.exp(np.cumsum(rng.normal(0, 1e-3, n)))
    open_ = np.concatenate([[100.0], close[:-1]])
    return pl.DataFrame({
        "ts": ts.to_numpy().astype("datetime64[us]"),
        "open": open_, "high": np.maximum(open_, close) + 0.01, "low": np.minimum(open_, close) - 0.01,
        "close": close, "volume": rng.integers(100, 1000, n).astype(float),
    })


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(20, 120),
    seed=st.integers(0, 10**6),
    swaps=st.lists(st.integers(0, 10**6), max_size=8),
    dups=st.lists(st.integers(0, 10**6), max_size=8),
)
def test_repair_restores_the_clean_bars_from_shuffles_and_exact_duplicates(n, seed, swaps, dups):
    clean = _clean_frame(n, seed)
    rows = list(range(n))
    for s in swaps:  # swap neighbours
        i = s % (n - 1)
        rows[i], rows[i + 1] = rows[i + 1], rows[i]
    for d in dups:  # insert an exact copy right after its original
        src = rows[d % len(rows)]
        rows.insert(rows.index(src) + 1, src)
    dirty = clean[rows].with_columns(
        pl.lit(0, dtype=pl.Int32).alias("_file"),
        (pl.int_range(pl.len(), dtype=pl.Int64) + 2).alias("_line"),
        pl.lit("P").alias("symbol"),
    )
    res = validate_symbol(dirty, "P", files=["P.csv"], time_field="date,ToD")
    out = res.clean.select(clean.columns)
    assert out.equals(clean)
    kinds = res.issues.group_by("kind").len().sort("kind").rows()
    counts = dict(kinds)
    assert counts.get("exact_duplicate", 0) == len(dups)
    assert set(counts) <= {"exact_duplicate", "unsorted"}
    # clean times increase with the row number, so a row is out of order when an earlier one is later
    behind = sum(1 for i in range(1, len(rows)) if rows[i] < max(rows[:i]))
    assert counts.get("unsorted", 0) == behind
