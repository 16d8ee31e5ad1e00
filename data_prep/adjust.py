"""Split and dividend back-adjustment, and Qlib's ``$factor``.

Input: a CSV of corporate actions, header ``symbol,date,split_ratio,dividend``
(``split_ratio`` new shares per old share, e.g. ``7`` for a 7:1 split, empty = 1;
``dividend`` cash per share, empty = 0; ``date`` the ex-date).

For an event with ex-date ``e`` the multiplier applied to every bar **before** ``e`` is::

    m = (1 / split_ratio) * (1 - dividend / C)

with ``C`` the last raw close before ``e`` (the CRSP convention). The factor of a bar is the
product of the multipliers of all later events, so the latest bars have ``factor = 1`` and
history is expressed in today's share units. Qlib's convention is then followed::

    adjusted price  = raw price * factor        (open, high, low, close, vwap)
    adjusted volume = raw volume / factor
    $factor         = factor

Example
-------
>>> import numpy as np
>>> ts = np.array(["2018-01-02T09:30", "2018-01-03T09:30"], dtype="datetime64[m]")
>>> factor_series(ts, np.array([100.0, 50.0]), [(np.datetime64("2018-01-03"), 2.0, 0.0)]).tolist()
[0.5, 1.0]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

__all__ = ["read_adjustments", "factor_series", "apply_factor"]

_COLUMNS = ("symbol", "date", "split_ratio", "dividend")


def read_adjustments(path: str | Path) -> dict[str, list[tuple[np.datetime64, float, float]]]:
    """Read a corporate-actions CSV into ``{symbol: [(ex_date, split_ratio, dividend), ...]}``.

    Raises
    ------
    ValueError
        Naming the file, line, field, what was expected and what was found.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: expected a corporate-actions CSV file, found nothing at that path")
    df = pl.read_csv(path, infer_schema=False)
    missing = [c for c in ("symbol", "date") if c not in df.columns]
    if missing or not ({"split_ratio", "dividend"} & set(df.columns)):
        raise ValueError(f"{path}: line 1: expected columns {list(_COLUMNS)}, found {df.columns}")
    events: dict[str, list[tuple[np.datetime64, float, float]]] = {}
    for i, row in enumerate(df.iter_rows(named=True)):
        line = i + 2
        sym = (row.get("symbol") or "").strip().upper()
        if not sym:
            raise ValueError(f"{path}: line {line}: field 'symbol': expected a symbol, found ''")
        try:
            date = np.datetime64((row.get("date") or "").strip(), "D")
        except ValueError:
            raise ValueError(f"{path}: line {line}: field 'date': expected YYYY-MM-DD, found {row.get('date')!r}") from None
        values = {}
        for name, default, ok, expect in (
            ("split_ratio", 1.0, lambda v: v > 0, "a ratio > 0"),
            ("dividend", 0.0, lambda v: v >= 0, "a cash amount >= 0"),
        ):
            text = (row.get(name) or "").strip()
            try:
                v = float(text) if text else default
            except ValueError:
                raise ValueError(f"{path}: line {line}: field '{name}': expected {expect}, found {text!r}") from None
            if not np.isfinite(v) or not ok(v):
                raise ValueError(f"{path}: line {line}: field '{name}': expected {expect}, found {text!r}")
            values[name] = v
        events.setdefault(sym, []).append((date, values["split_ratio"], values["dividend"]))
    return {s: sorted(e) for s, e in events.items()}


def factor_series(ts: np.ndarray, close: np.ndarray, events) -> np.ndarray:
    """Back-adjustment factor of every bar (see the module docstring for the formula).

    Parameters
    ----------
    ts : numpy.ndarray of datetime64
        Bar times, sorted.
    close : numpy.ndarray
        Raw closes (for dividend multipliers).
    events : iterable of (ex_date, split_ratio, dividend)

    Raises
    ------
    ValueError
        When a dividend is not smaller than the close before its ex-date.
    """
    ts = np.asarray(ts, dtype="datetime64[m]")
    days = ts.astype("datetime64[D]")
    factor = np.ones(len(ts))
    for ex_date, split, dividend in events:
        before = days < np.datetime64(ex_date, "D")
        n_before = int(before.sum())
        if n_before == 0:
            continue
        m = 1.0 / split
        if dividend > 0:
            c = float(close[n_before - 1])
            if not dividend < c:
                raise ValueError(
                    f"adjustments: dividend on {ex_date}: expected an amount below the previous close {c}, found {dividend}"
                )
            m *= 1.0 - dividend / c
        factor[before] *= m
    return factor


def apply_factor(frame: pl.DataFrame, factor: np.ndarray) -> pl.DataFrame:
    """Adjust prices (x factor) and volume (/ factor) and add the ``factor`` column."""
    f = pl.Series("factor", factor)
    price_cols = [c for c in ("open", "high", "low", "close", "vwap") if c in frame.columns]
    return frame.with_columns(
        *[(pl.col(c) * f).alias(c) for c in price_cols],
        (pl.col("volume") / f).alias("volume"),
        f,
    )
