"""Shared helpers for the data-layer tests (tests/test_data_*.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

#: The shared real sample, relative to the repository root.
REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_SAMPLE = REPO_ROOT / ".." / "shared" / "data" / "us-equities-1min-2018"

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
