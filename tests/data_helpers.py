"""Shared helpers for the data-layer tests (tests/test_data_*.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from shared_data import DAILY, MINUTE_2018

#: The shared real sample (tests/shared_data.py finds it).
REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_SAMPLE = MINUTE_2018   # found by tests/shared_data.py

PRICE_FIELDS = ("open", "high", "low", "close", "vwap")


def qlib_read(store: Path, symbols, fields, start, end) -> pd.DataFrame:
    """Read ``fields`` back through Qlib's own provider (``D.features``), columns without ``$``."""
    from qlib.data import D

    from data_prep import init_qlib

    init_qlib(store)
    df = D.features(list(symbols), [f"${f}" for f in fields], start, end, freq="1min")
    df.columns = [c.lstrip("$") for c in df.columns]
    return df


def write_vendor_csv(path: Path, rows: list[tuple], header: str = "date,ToD,open,high,low,close,volume") -> Path:
    """Write a small vendor-format CSV (the shared sample's layout) from tuples."""
    lines = [header] + [",".join(str(v) for v in r) for r in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def clean_day_rows(date: str, *, n: int = 390, price: float = 100.0, seed: int = 0) -> list[tuple]:
    """``n`` consistent bars of one session in the vendor layout, starting 09:30."""
    rng = np.random.default_rng(seed)
    rows = []
    p = price
    t0 = pd.Timestamp(f"{date} 09:30")
    for i in range(n):
        o = round(p, 4)
        c = round(p * float(np.exp(rng.normal(0, 5e-4))), 4)
        h = round(max(o, c) + 0.01, 4)
        l = round(min(o, c) - 0.01, 4)
        v = int(rng.integers(1_000, 5_000))
        t = t0 + pd.Timedelta(minutes=i)
        rows.append((date, t.strftime("%H:%M:%S"), o, h, l, c, float(v)))
        p = c
    return rows


#: The real daily bars (tests/shared_data.py finds them); absent: a random walk is used.
SHARED_DAILY = DAILY


def small_daily_store(root: Path, *, symbols=("AAPL", "BAC", "F", "GE", "MSFT", "XOM"),
                      span=("2013-09-03", "2014-09-30")) -> Path:
    """A Qlib day store written by ``data_prep.ingest`` from the real daily bars of ``symbols`` over ``span``.

    Where the shared data is absent, each symbol is a random walk on the same business days.
    """
    from data_prep.ingest import IngestOptions, ingest

    days = pd.bdate_range(*span)
    src = root / "csv"
    src.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for sym in symbols:
        if (SHARED_DAILY / f"{sym}.csv").is_file():
            bars = pd.read_csv(SHARED_DAILY / f"{sym}.csv", dtype=str)
            bars = bars[(bars["date"] >= span[0]) & (bars["date"] <= span[1])]
        else:
            close = 50 * np.exp(np.cumsum(rng.normal(0, 0.015, len(days))))
            bars = pd.DataFrame({"date": days.strftime("%Y-%m-%d"), "open": close, "high": close * 1.01,
                                 "low": close * 0.99, "close": close, "volume": 1_000_000})
        bars.to_csv(src / f"{sym}.csv", index=False)
    result = ingest([src], root / "qlib_day", options=IngestOptions(mode="repair"))
    assert result.freq == "day"
    return root / "qlib_day"
