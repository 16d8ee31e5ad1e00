"""A small real daily Qlib store for the tests of Qlib's daily models (``data ingest`` of daily bars)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from data_prep.ingest import IngestOptions
from shared_data import DAILY  # tests/shared_data.py finds it; absent: random walks

SYMBOLS = ("AAPL", "BAC", "F", "GE", "MSFT", "XOM")
FIELDS = ("open", "high", "low", "close", "volume")


def _bars(symbol: str, rng: np.random.Generator, days: pd.DatetimeIndex) -> pd.DataFrame:
    """One symbol's daily OHLCV: the real file when present, else a random walk on ``days``."""
    path = DAILY / f"{symbol}.csv"
    if path.is_file():
        frame = pd.read_csv(path, dtype=str)
        return frame[(frame["date"] >= f"{days[0]:%Y-%m-%d}") & (frame["date"] <= f"{days[-1]:%Y-%m-%d}")]
    close = 50 * np.exp(np.cumsum(rng.normal(0, 0.015, len(days))))
    spread = np.abs(rng.normal(0, 0.01, len(days))) * close
    opens = close * (1 + rng.normal(0, 0.003, len(days)))
    return pd.DataFrame({"date": days.strftime("%Y-%m-%d"), "open": opens,
                         "high": np.maximum(close + spread, opens), "low": np.minimum(close - spread, opens),
                         "close": close, "volume": rng.integers(100_000, 1_000_000, len(days))})


def build_daily_store(root: Path, *, start: str = "2013-02-01", end: str = "2015-03-31") -> Path:
    """A Qlib ``day`` store written by ``rolling-calib data ingest`` (daily bars detected from the date column).

    ``calendars/day.txt`` (the NYSE sessions), ``instruments/all.txt``, ``features/<symbol>/<field>.day.bin``;
    ``vwap`` is the typical price (H+L+C)/3 and ``factor`` is 1 (the prices are split-adjusted).
    """
    from data_prep.ingest import ingest

    rng = np.random.default_rng(0)
    days = pd.DatetimeIndex([d for d in pd.bdate_range(start, end)])
    src = root.with_name(root.name + "_csv")
    src.mkdir(parents=True)
    for sym in SYMBOLS:
        _bars(sym, rng, days).to_csv(src / f"{sym}.csv", index=False)
    result = ingest([src], root, options=IngestOptions(mode="repair"))  # repair: a random walk may hit a holiday
    assert result.freq == "day"
    return root
