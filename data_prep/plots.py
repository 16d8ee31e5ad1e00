"""A picture of a minute store: price paths, and the intraday shapes of volatility and volume.

``rolling-calib data info DIR --plot FILE.png`` draws three panels from the store's binary
files (no Qlib needed; :func:`store_profiles` computes them, :func:`plot_store_profiles` draws
them into a figure or given axes, :func:`plot_store` does both and saves the file):

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
from data_prep.atomic import atomic_write

__all__ = ["store_profiles", "plot_store_profiles", "plot_store"]


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


def plot_store_profiles(profiles: dict, *, title: str | None = None, ax=None):
    """Draw the three panels of the module docstring from :func:`store_profiles`; returns the Figure.

    Compute first, plot second: ``profiles`` is the dict :func:`store_profiles` returns.
    ``ax=None`` makes a new :class:`matplotlib.figure.Figure` (no pyplot, no backend switch;
    ``title`` becomes its title); otherwise ``ax`` is a sequence of three Axes to draw into and
    ``ax[0].figure`` is returned (the figure's title and layout are left to the caller).
    """
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    if ax is None:
        fig = Figure(figsize=(15, 4.2), layout="constrained")
        axes = list(fig.subplots(1, 3))
        if title:
            fig.suptitle(title)
    else:
        axes = list(np.ravel(np.asarray(ax, dtype=object)))
        if len(axes) != 3 or not all(isinstance(a, Axes) for a in axes):
            raise ValueError(f"ax: expected 3 Axes (one per panel), found {[type(a).__name__ for a in axes]}")
        fig = axes[0].figure
    daily = profiles["daily_close"]
    first = axes[0]
    for sym in daily.columns:
        first.plot(daily.index, daily[sym].to_numpy(), lw=0.8, label=str(sym))
    first.set_yscale("log")
    first.set_title("daily close / first close")
    first.tick_params(axis="x", labelrotation=30)
    labels = [f"{h:02d}:{m:02d}" for h, m in ((9, 30), (11, 0), (12, 30), (14, 0), (15, 30))]
    ticks = [0, 90, 180, 270, 360]
    for panel, key, panel_title in (
        (axes[1], "abs_return", "mean |1-min log return| by minute"),
        (axes[2], "volume", "median volume by minute (midday = 1)"),
    ):
        panel.plot(np.arange(390), profiles[key], lw=1.0)
        panel.set_title(panel_title)
        panel.set_xticks(ticks, labels)
    return fig


def plot_store(store: str | Path, path: str | Path, *, symbols: list[str] | None = None) -> Path:
    """Compute, draw and save the three panels into ``path`` (PNG/PDF/SVG by suffix), atomically.

    Returns ``path`` as a Path.
    """
    stats = store_profiles(store, symbols=symbols)
    fig = plot_store_profiles(
        stats, title=f"{Path(store)}: {stats['daily_close'].shape[1]} symbols, {len(stats['daily_close'])} sessions"
    )
    out = Path(path)
    return atomic_write(out, lambda tmp: fig.savefig(tmp, dpi=110, format=out.suffix.lstrip(".").lower() or "png"))
