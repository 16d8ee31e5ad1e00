"""A picture of a minute store: price paths, and the intraday shapes of volatility and volume.

``rolling-calib data info DIR --plot FILE.png`` draws three panels from the store's binary
files (no Qlib needed):

1. each symbol's daily close, divided by its first close (log scale);
2. the mean absolute one-minute log return by minute of the session (09:30 .. 15:59), averaged
   over symbols: the U-shape of intraday volatility;
3. the median volume by minute of the session, relative to its midday level: the U-shape of
   volume.

Example
-------
>>> import tempfile, pathlib
>>> from data_prep import build_synthetic_store
>>> d = build_synthetic_store(tempfile.mkdtemp(), start="2018-01-02", end="2018-01-31", symbols=["AAPL", "F"])
>>> stats = store_profiles(d)
>>> sorted(stats), stats["abs_return"].shape
(['abs_return', 'daily_close', 'volume'], (390,))
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from data_prep import qlib_store

__all__ = ["store_profiles", "plot_store"]


def store_profiles(store: str | Path, *, symbols: list[str] | None = None) -> dict:
    """Compute what :func:`plot_store` draws (compute first, plot second).

    Returns
    -------
    dict
        ``daily_close`` (DataFrame, sessions x symbols, normalised to 1 at the first close),
        ``abs_return`` and ``volume`` (arrays of 390 values by minute of the session; volume
        relative to its minutes 150..240 median).
    """
    store = Path(store)
    cal = qlib_store.read_calendar(store)
    if len(cal) == 0:
        raise ValueError(f"{store}: expected a Qlib minute store with calendars/1min.txt, found none")
    symbols = symbols or list(qlib_store.read_instruments(store, "all"))
    minute = ((cal.hour * 60 + cal.minute) - (9 * 60 + 30)).to_numpy()
    day = cal.normalize()
    closes, abs_rets, vols = {}, [], []
    for sym in symbols:
        start, close = qlib_store.read_feature(store, sym, "close")
        _, volume = qlib_store.read_feature(store, sym, "volume")
        idx = slice(start, start + len(close))
        c = pd.Series(close.astype(np.float64), index=cal[idx])
        closes[sym] = c.groupby(day[idx]).last()
        r = np.abs(np.diff(np.log(close.astype(np.float64)), prepend=np.nan))
        r[minute[idx] == 0] = np.nan  # overnight gaps are not intraday returns
        abs_rets.append(pd.Series(r).groupby(minute[idx]).mean())
        vols.append(pd.Series(volume.astype(np.float64)).groupby(minute[idx]).median())
    daily = pd.DataFrame(closes)
    daily = daily / daily.bfill().iloc[0]
    full = pd.RangeIndex(390)
    abs_return = pd.concat(abs_rets, axis=1).mean(axis=1).reindex(full).to_numpy()
    volume = pd.concat(vols, axis=1).mean(axis=1).reindex(full).to_numpy()
    volume = volume / np.nanmedian(volume[150:240])
    return {"daily_close": daily, "abs_return": abs_return, "volume": volume}


def plot_store(store: str | Path, path: str | Path, *, symbols: list[str] | None = None) -> Path:
    """Draw the three panels of the module docstring into ``path`` (PNG/PDF/SVG by suffix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stats = store_profiles(store, symbols=symbols)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    stats["daily_close"].plot(ax=ax, logy=True, legend=False, lw=0.8)
    ax.set_title("daily close / first close")
    ax.set_xlabel("")
    labels = [f"{h:02d}:{m:02d}" for h, m in ((9, 30), (11, 0), (12, 30), (14, 0), (15, 30))]
    ticks = [0, 90, 180, 270, 360]
    for ax, key, title in (
        (axes[1], "abs_return", "mean |1-min log return| by minute"),
        (axes[2], "volume", "median volume by minute (midday = 1)"),
    ):
        ax.plot(np.arange(390), stats[key], lw=1.0)
        ax.set_title(title)
        ax.set_xticks(ticks, labels)
    fig.suptitle(f"{Path(store)}: {stats['daily_close'].shape[1]} symbols, {len(stats['daily_close'])} sessions")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{out.suffix}")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(out)
    return out
