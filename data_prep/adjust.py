"""Split and dividend back-adjustment, and Qlib's ``$factor``.

Input: a CSV of corporate actions, header ``symbol,date,split_ratio,dividend`` and optionally
``factor`` (``split_ratio`` new shares per old share, e.g. ``7`` for a 7:1 split, empty = 1;
``dividend`` cash per share, empty = 0; ``date`` the ex-date; ``factor`` the vendor's multiplier
``m`` of the event, used as given when present).

For an event with ex-date ``e`` the multiplier applied to every bar **before** ``e`` is::

    m = (1 / split_ratio) * (1 - dividend / C)

with ``C`` the raw close of the session right before ``e`` (the CRSP convention). That close must be
in the data: an event whose reference session the bars do not cover (e.g. an ex-date after the
last bar, or a gap before it) needs its ``factor`` given, or it is refused; the close of another
day is never used in its place. The factor of a bar is the
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

_COLUMNS = ("symbol", "date", "split_ratio", "dividend")  # and optionally "factor"


def read_adjustments(path: str | Path) -> dict[str, list[tuple[np.datetime64, float, float, float]]]:
    """Read a corporate-actions CSV into ``{symbol: [(ex_date, split_ratio, dividend, factor), ...]}``.

    ``factor`` is NaN where the file gives none (it is then computed from the data).

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
    events: dict[str, list[tuple[np.datetime64, float, float, float]]] = {}
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
            ("factor", np.nan, lambda v: v > 0, "a multiplier > 0"),
        ):
            text = (row.get(name) or "").strip()
            try:
                v = float(text) if text else default
            except ValueError:
                raise ValueError(f"{path}: line {line}: field '{name}': expected {expect}, found {text!r}") from None
            if text and (not np.isfinite(v) or not ok(v)):
                raise ValueError(f"{path}: line {line}: field '{name}': expected {expect}, found {text!r}")
            values[name] = v
        events.setdefault(sym, []).append((date, values["split_ratio"], values["dividend"], values["factor"]))
    return {s: sorted(e) for s, e in events.items()}


def factor_series(ts: np.ndarray, close: np.ndarray, events, *, symbol: str = "") -> np.ndarray:
    """Back-adjustment factor of every bar (see the module docstring for the formula).

    Parameters
    ----------
    ts : numpy.ndarray of datetime64
        Bar times, sorted.
    close : numpy.ndarray
        Raw closes (for dividend multipliers).
    events : iterable of (ex_date, split_ratio, dividend[, factor])
        ``factor`` (NaN or absent: computed) is the event's multiplier as the vendor gives it.
    symbol : str
        For messages.

    Raises
    ------
    ValueError
        When a dividend's reference close (the session before its ex-date) is not in the data
        and no factor is given, or the dividend is not smaller than that close.
    """
    ts = np.asarray(ts, dtype="datetime64[m]")
    days = ts.astype("datetime64[D]")
    factor = np.ones(len(ts))
    for event in events:
        ex_date, split, dividend = event[:3]
        given = float(event[3]) if len(event) > 3 else np.nan
        before = days < np.datetime64(ex_date, "D")
        n_before = int(before.sum())
        if n_before == 0:
            continue
        if np.isfinite(given):
            factor[before] *= given
            continue
        m = 1.0 / split
        if dividend > 0:
            c = float(close[n_before - 1])
            _check_reference_session(days[n_before - 1], ex_date, symbol=symbol, dividend=dividend)
            if not dividend < c:
                raise ValueError(
                    f"adjustments{' ' + symbol if symbol else ''}: dividend on {ex_date}: expected an amount below "
                    f"the previous close {c}, found {dividend}"
                )
            m *= 1.0 - dividend / c
        factor[before] *= m
    return factor


def _check_reference_session(last_day: np.datetime64, ex_date, *, symbol: str, dividend: float) -> None:
    """The last bar before the ex-date must lie on the session right before it (whose close is the reference)."""
    from data_prep.trading_calendar import sessions

    ex = np.datetime64(ex_date, "D")
    previous = sessions(ex - np.timedelta64(14, "D"), ex - np.timedelta64(1, "D")).dates
    reference = previous[-1] if len(previous) else None
    if reference is None or last_day != reference:
        raise ValueError(
            f"adjustments{' ' + symbol if symbol else ''}: dividend {dividend} ex {ex}: the reference price is the "
            f"close of {reference} (the session before the ex-date), which the data does not hold (its last bar "
            f"before the ex-date is on {last_day}); give the event's multiplier in a 'factor' column of the "
            f"adjustments file, or ingest bars up to {reference}"
        )


def apply_factor(frame: pl.DataFrame, factor: np.ndarray) -> pl.DataFrame:
    """Adjust prices (x factor) and volume (/ factor) and add the ``factor`` column."""
    f = pl.Series("factor", factor)
    price_cols = [c for c in ("open", "high", "low", "close", "vwap") if c in frame.columns]
    return frame.with_columns(
        *[(pl.col(c) * f).alias(c) for c in price_cols],
        (pl.col("volume") / f).alias("volume"),
        f,
    )
