"""Validation and repair of one symbol's vendor minute bars (vectorised, polars).

Kinds of anomaly
----------------
Every anomaly found is one row of the *issues* table (file, line, symbol, kind, field,
expected, found, action). Errors make the default mode refuse and ``--strict`` stop; with
``--repair`` they are fixed as listed. Warnings are reported in every mode and change nothing.

=======================  =========  ===========================================================
kind                     severity   ``--repair`` action
=======================  =========  ===========================================================
bad_timestamp            error      row dropped (time unparseable, or nonexistent/ambiguous in --tz)
missing_value            error      row dropped (empty, NA, N/A, NaN, null, None or - in open, high,
                                    low, close, volume, symbol; one issue per field: a *cell*)
unparseable_value        error      row dropped (text that is not a number, e.g. 12k; per cell)
non_finite_value         error      row dropped (inf, -inf, 1e400: never stored; per cell)
off_minute               error      row dropped (time not on a whole minute, e.g. 09:30:30)
non_session_day          error      row dropped (weekend, holiday, unscheduled closure)
future_bar               error      row dropped (a date after today in New York: no session of it is
                                    past, so no bar of it can exist; the calendar never runs to it)
pre_market               error      row dropped (before 09:30)
closing_auction          error      row dropped (the 16:00 bar, 13:00 on early-close days: the
                                    closing-auction print, not a one-minute interval; policy of
                                    :mod:`data_prep.trading_calendar`)
post_market              error      row dropped (after 16:00)
after_early_close        error      row dropped (13:01..15:59 on a 13:00 early-close day)
non_positive_price       error      row dropped (open/high/low/close <= 0; per cell)
negative_volume          error      row dropped (volume < 0)
exact_duplicate          error      later copies dropped, the first kept
conflicting_duplicate    error      every copy dropped: no way to tell which is right; the
                                    minute becomes missing (NaN)
unsorted                 error      row moved: bars are sorted by time (stable); "dropped" when the
                                    row is dropped for another reason (e.g. a duplicate). A row is
                                    unsorted when its time is earlier than the latest time of the
                                    earlier *kept* rows of its file: a row dropped anyway (an
                                    off-minute or duplicate row) never makes later rows unsorted
price_spike              error      row dropped: one or more of its prices is > ``max_spike`` (3)
                                    times, or < 1/``max_spike`` of, both neighbouring bars' closes
                                    in the session (a 10x typo in one field, or a whole bar scaled);
                                    dropped instead of widening high/low to the bad value
ohlc_inconsistent        error      row dropped: low > min(open, close) or high < max(open, close)
                                    or low > high. One rule changes values instead: when low <= high
                                    and open and close lie within one tick (``OHLC_TICK``: $0.01, or
                                    $0.0001 below $1) of [low, high], open and close are clamped into
                                    [low, high]; high and low -- the bar's extremes -- are never
                                    changed, so a repair cannot invent a high or a low from a typo
vwap_outside_range       error      vwap clipped into [low, high] (the vendor's high and low)
missing_vwap             warning    vwap derived as (high + low + close) / 3 (vendor vwap column present,
                                    value empty)
stale_prices             warning    kept; a run of >= ``stale_minutes`` (30) consecutive bars in
                                    a session with an unchanged close
price_jump               warning    kept; the open of a bar moves by more than ``max_jump`` (1.5x
                                    either way, ``|log return| > ln 1.5``) from the previous bar's
                                    close: overnight (first bar of a session) or within a session;
                                    names the split ratio that fits within 2% (7:1, 3:2, 1:10 ...)
                                    when one does (such a move counts from ``max_jump / 1.02``), with
                                    the line to pass only when both price levels hold and the volume
                                    per bar scales inversely; otherwise "unexplained jump of X% on
                                    DATE; if it is a corporate action, give its factor"
missing_minutes          warning    kept as missing (NaN in the store); counted per session
missing_session          warning    kept as missing; one issue per NYSE session without any bar
                                    between the symbol's first and last bar (also in missing_minutes)
outside_requested_range  warning    dropped (a bar before --start or after --end)
=======================  =========  ===========================================================

A row can carry several kinds (a duplicated 16:00 bar is ``exact_duplicate`` and
``closing_auction``); each is counted. A row dropped for any reason is dropped once. Every value
``--repair`` changes is one issue row per field with ``action`` ``changed``, ``found`` the old
value and ``new`` the value written (``new`` is empty for every other action); an
``ohlc_inconsistent`` row that is dropped lists all four prices in ``found``.

Example
-------
>>> import polars as pl, datetime as dt
>>> df = pl.DataFrame({"_file": [0, 0], "_line": [2, 3], "symbol": ["X", "X"],
...     "ts": [dt.datetime(2018, 2, 16, 9, 30), dt.datetime(2018, 2, 16, 16, 0)],
...     "_ts_text": ["2018-02-16 09:30:00", "2018-02-16 16:00:00"],
...     "open": [1.0, 1.0], "high": [1.0, 1.0], "low": [1.0, 1.0], "close": [1.0, 1.0], "volume": [5.0, 9.0]})
>>> res = validate_symbol(df, "X", files=["X.csv"], time_field="date,ToD")
>>> res.issues.select("kind", "_line").rows()
[('closing_auction', 3)]
"""

from __future__ import annotations

import dataclasses
import math
from datetime import time as dt_time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from data_prep.trading_calendar import sessions as nyse_sessions

__all__ = [
    "ERROR_KINDS",
    "WARNING_KINDS",
    "CELL_KINDS",
    "KIND_ACTIONS",
    "ISSUE_SCHEMA",
    "ValidationResult",
    "session_table",
    "validate_symbol",
    "missing_minutes",
    "split_ratio",
    "split_tolerance",
    "KnownActions",
    "timezone_hints",
    "inside_counts",
    "timezone_hint",
    "session_in_place",
    "interval_label",
]

PRICE_FIELDS = ("open", "high", "low", "close")

#: error kinds, in the order they are checked
ERROR_KINDS: tuple[str, ...] = (
    "bad_timestamp",
    "missing_value",
    "unparseable_value",
    "non_finite_value",
    "off_minute",
    "non_session_day",
    "future_bar",
    "pre_market",
    "closing_auction",
    "post_market",
    "after_early_close",
    "non_positive_price",
    "negative_volume",
    "exact_duplicate",
    "conflicting_duplicate",
    "unsorted",
    "price_spike",
    "ohlc_inconsistent",
    "vwap_outside_range",
)
WARNING_KINDS: tuple[str, ...] = (
    "missing_vwap", "stale_prices", "price_jump", "missing_minutes", "missing_session", "outside_requested_range",
)
#: kinds reported once per *field* (cell) of a row, not once per row
CELL_KINDS: tuple[str, ...] = ("missing_value", "unparseable_value", "non_finite_value", "non_positive_price")
#: text read as a missing value (case-insensitive, stripped), besides the empty string
MISSING_TOKENS: tuple[str, ...] = ("na", "n/a", "#n/a", "nan", "null", "none", "nil", "-", "--")

#: what ``--repair`` does to a row of each kind
KIND_ACTIONS: dict[str, str] = {
    **{k: "dropped" for k in ERROR_KINDS},
    "unsorted": "moved",
    "ohlc_inconsistent": "dropped",
    "vwap_outside_range": "changed",
    "missing_vwap": "changed",
    "stale_prices": "kept",
    "price_jump": "kept",
    "missing_minutes": "kept",
    "missing_session": "kept",
    "outside_requested_range": "dropped",
}

ISSUE_SCHEMA = {
    "_file": pl.Int32,
    "_line": pl.Int64,
    "symbol": pl.String,
    "kind": pl.String,
    "field": pl.String,
    "expected": pl.String,
    "found": pl.String,
    "action": pl.String,
    "first_copy": pl.Boolean,
    "new": pl.String,
}
#: Largest gap by which ``--repair`` clamps an open or close into [low, high]: one tick, $0.01 at
#: or above $1 and $0.0001 below (the US minimum price increments of Reg NMS rule 612).
OHLC_TICK: tuple[float, float] = (0.01, 0.0001)


@dataclass
class ValidationResult:
    """Outcome of validating one symbol.

    Attributes
    ----------
    issues : polars.DataFrame
        One row per anomaly (schema :data:`ISSUE_SCHEMA`).
    clean : polars.DataFrame
        The repaired bars, sorted by ``ts``: ``_file, _line, ts`` and the value fields (what
        ``--repair`` would write; for other modes it is only used when ``issues`` has no error).
    rows_in : int
    intervals : list of (int, int, int)
        ``(file index, modal spacing in seconds, bars)`` of the bars of each file whose modal
        spacing of consecutive bars within a session is not one minute (see :func:`bar_intervals`);
        empty for one-minute data. The ingest refuses such files.
    """

    issues: pl.DataFrame
    clean: pl.DataFrame
    rows_in: int
    intervals: list[tuple[int, int, int]] = dataclasses.field(default_factory=list)


#: The first date exchange_calendars' NYSE schedule covers: a bar dated before it is on no known session.
FIRST_SESSION_DAY = np.datetime64("1886-01-01")


def last_past_day() -> np.datetime64:
    """Today's date in New York: a bar dated after it cannot exist yet (``future_bar``).

    >>> bool(last_past_day() >= np.datetime64("2026-01-01"))
    True
    """
    from datetime import datetime
    from zoneinfo import ZoneInfo

    return np.datetime64(datetime.now(ZoneInfo("America/New_York")).date(), "D")


def session_table(start_day, end_day) -> pl.DataFrame:
    """NYSE sessions between two dates as ``day`` (Int32 days since 1970), ``open_min``, ``close_min``.

    ``open_min``/``close_min`` are minutes after midnight New York time (570 / 960, 780 on early closes).
    """
    end_day = min(np.datetime64(end_day, "D"), last_past_day())  # no session after today is past
    start_day = max(np.datetime64(start_day, "D"), FIRST_SESSION_DAY)  # earlier dates: no session known
    if end_day < start_day:
        return pl.DataFrame(schema={"day": pl.Int32, "open_min": pl.Int32, "close_min": pl.Int32})
    sess = nyse_sessions(start_day, end_day)
    day = sess.dates.astype("datetime64[D]").astype(np.int64).astype(np.int32)
    open_min = (sess.open_local - sess.dates.astype("datetime64[m]")).astype(np.int64).astype(np.int32)
    close_min = (sess.close_local - sess.dates.astype("datetime64[m]")).astype(np.int64).astype(np.int32)
    return pl.DataFrame({"day": day, "open_min": open_min, "close_min": close_min})


def _issue(
    frame: pl.DataFrame, kind: str, field: str | pl.Expr, expected: str | pl.Expr, found: pl.Expr,
    *, first_copy: pl.Expr | bool = False, new: pl.Expr | None = None, action: str | None = None,
) -> pl.DataFrame:
    """Issue rows of ``frame``'s rows; ``new``: the value written (``action`` ``changed``), ``action``:
    the action when it is not the kind's (:data:`KIND_ACTIONS`)."""
    def lit(x):
        return pl.lit(x, dtype=pl.String) if isinstance(x, str) else x.cast(pl.String)

    return frame.select(
        pl.col("_file").cast(pl.Int32),
        pl.col("_line").cast(pl.Int64),
        pl.col("symbol").cast(pl.String),
        pl.lit(kind, dtype=pl.String).alias("kind"),
        lit(field).alias("field"),
        lit(expected).alias("expected"),
        lit(found).alias("found"),
        pl.lit(action or KIND_ACTIONS[kind], dtype=pl.String).alias("action"),
        (first_copy if isinstance(first_copy, pl.Expr) else pl.lit(first_copy)).alias("first_copy"),
        (pl.lit(None, dtype=pl.String) if new is None else new.cast(pl.String)).alias("new"),
    )


def _quoted(expr: pl.Expr) -> pl.Expr:
    return pl.concat_str([pl.lit("'"), expr.fill_null(""), pl.lit("'")])


def _fmt(expr: pl.Expr) -> pl.Expr:
    return expr.cast(pl.String)


class _Checks:
    """Collects (condition, issue description) pairs and evaluates them in one pass.

    ``flush`` counts every pending condition in a single ``select``; only conditions that hit
    are filtered into issue rows, so clean data costs one scan.
    """

    def __init__(self) -> None:
        self.pending: list[tuple] = []
        self.parts: list[pl.DataFrame] = []

    def add(self, cond: pl.Expr, kind: str, field, expected, found, *, first_copy=False, new=None,
            action=None) -> None:
        self.pending.append((cond, kind, field, expected, found, dict(first_copy=first_copy, new=new, action=action)))

    def flush(self, df: pl.DataFrame) -> None:
        if not self.pending:
            return
        hits = df.select([c[0].fill_null(False).any().alias(f"c{i}") for i, c in enumerate(self.pending)]).row(0)
        for hit, (cond, kind, field, expected, found, extra) in zip(hits, self.pending):
            if hit:
                self.parts.append(_issue(df.filter(cond), kind, field, expected, found, **extra))
        self.pending.clear()


def validate_symbol(
    df: pl.DataFrame,
    symbol: str,
    *,
    files: Sequence[str],
    time_field: str | Sequence[str],
    stale_minutes: int = 30,
    sessions: pl.DataFrame | None = None,
    max_jump: float = 1.5,
    max_spike: float = 3.0,
    actions: KnownActions | None = None,
) -> ValidationResult:
    """Find every anomaly of one symbol's rows and compute the repaired bars.

    The check families run in the order of :data:`ERROR_KINDS`: parse problems, session
    membership, value ranges, duplicates, order within a file, price spikes against the
    neighbouring bars, then (on the rows that survive) OHLC consistency and vwap range; on the
    repaired bars: stale prices, price jumps and missing sessions.

    Parameters
    ----------
    df : polars.DataFrame
        Rows of one symbol in file then line order, as :func:`data_prep.vendor.read_vendor_file`
        returns them (all files concatenated).
    symbol : str
    files : sequence of str
        File paths by ``_file`` index (for duplicate messages).
    time_field : str or sequence of str
        Name of the time column(s) (one for all files, or one per file index).
    stale_minutes : int
        Minimum run of unchanged closes reported as ``stale_prices``.
    sessions : polars.DataFrame, optional
        :func:`session_table` covering the data's dates (computed when omitted).
    max_jump : float
        A bar's open more than ``max_jump`` times (or less than ``1/max_jump`` of) the previous
        bar's close is a ``price_jump`` (default 1.5: ``|log return| > ln 1.5``).
    max_spike : float
        A price more than ``max_spike`` times (or less than ``1/max_spike`` of) both neighbouring
        bars' closes is a ``price_spike`` (default 3).
    actions : KnownActions, optional
        The symbol's corporate actions given with ``--adjustments``: a jump they explain is not
        reported, and the advice of the others names the file.

    Returns
    -------
    ValidationResult
    """
    if stale_minutes < 2:
        raise ValueError(f"stale_minutes: expected an integer >= 2, found {stale_minutes}")
    for name, value in (("max_jump", max_jump), ("max_spike", max_spike)):
        if not (math.isfinite(value) and value > 1):
            raise ValueError(f"{name}: expected a ratio > 1 (e.g. 1.5), found {value}")
    rows_in = df.height
    fields = [f for f in ("open", "high", "low", "close", "volume", "vwap") if f in df.columns]
    if sessions is None:
        sessions = _sessions_of(df)
    df = _with_calendar(df, sessions)
    scan = _Scan.start(df, files, time_field)
    vwap_missing = _check_parse(scan, df, fields)
    _check_sessions(scan)
    _check_ranges(scan, fields)
    df = scan.settle(_check_duplicates(scan, df, fields, files))
    df = _check_unsorted(scan, df)
    df = _check_spikes(scan, df, max_spike)
    df = _repair_ohlc(scan, df)
    df = _repair_vwap(scan, df, fields, vwap_missing)
    clean = (
        df.filter(~pl.col("_drop"))
        .select(["_file", "_line", "ts", *fields])
        .sort("ts", maintain_order=True)
    )
    # warnings on the repaired bars: stale prices, price jumps, whole sessions missing
    warnings = [
        _stale_runs(clean, symbol, stale_minutes),
        _price_jumps(clean, symbol, max_jump, actions),
        _missing_sessions(clean, symbol, sessions, scan.tf_date),
    ]
    issues = _collect_issues(scan.checks.parts + warnings, df, symbol)
    return ValidationResult(issues=issues, clean=clean, rows_in=rows_in, intervals=bar_intervals(df.select("_file", "ts")))


@dataclass
class _Scan:
    """What the check families of one symbol share.

    ``checks`` collects the issues, ``drop`` is the condition of every row dropped so far;
    ``ts_text`` quotes a row's time for messages and ``tf_expr``/``tf_date``/``tf_time`` name
    its time column(s): in "date,ToD" layouts the date column is named for day problems, the
    time column for the rest.
    """

    checks: _Checks
    ts_ok: pl.Expr
    ts_text: pl.Expr
    tf_expr: pl.Expr
    tf_date: pl.Expr
    tf_time: pl.Expr
    drop: pl.Expr

    @classmethod
    def start(cls, df: pl.DataFrame, files: Sequence[str], time_field: str | Sequence[str]) -> _Scan:
        tf = [time_field] * (len(files) or 1) if isinstance(time_field, str) else list(time_field)
        raw_ts = pl.col("_ts_text") if "_ts_text" in df.columns else pl.col("ts").dt.strftime("%Y-%m-%d %H:%M:%S")
        return cls(
            checks=_Checks(),
            ts_ok=pl.col("ts").is_not_null(),
            ts_text=_quoted(raw_ts),
            tf_expr=_by_file(tf),
            tf_date=_by_file([t.split(",")[0] for t in tf]),
            tf_time=_by_file([t.split(",")[-1] for t in tf]),
            drop=pl.lit(False),
        )

    def settle(self, df: pl.DataFrame) -> pl.DataFrame:
        """Evaluate the drop condition so far once, as column ``_dropped``; later checks build on it."""
        df = df.with_columns(self.drop.fill_null(False).alias("_dropped"))
        self.drop = pl.col("_dropped")
        return df

    def reject(self, cond: pl.Expr, kind: str, field, expected, found, *, first_copy=False,
               drop: pl.Expr | None = None) -> None:
        """An issue whose rows are dropped (``drop``: the dropping condition, default ``cond``)."""
        self.checks.add(cond, kind, field, expected, found, first_copy=first_copy)
        self.drop = self.drop | (cond if drop is None else drop)


def _by_file(names: list[str]) -> pl.Expr:
    """``names[_file]`` of every row (``"time"`` for an unknown file index)."""
    return pl.col("_file").replace_strict(list(range(len(names))), names, return_dtype=pl.String, default="time")


def _txt_of(df: pl.DataFrame, f: str) -> pl.Expr:
    """The raw text of field ``f`` (null when the file had typed columns)."""
    return pl.col(f"_txt_{f}") if f"_txt_{f}" in df.columns else pl.lit(None, dtype=pl.String)


def _hhmm(minutes: pl.Expr) -> pl.Expr:
    """Minutes after midnight as ``HH:MM``."""
    return pl.concat_str([
        (minutes // 60).cast(pl.String).str.zfill(2), pl.lit(":"), (minutes % 60).cast(pl.String).str.zfill(2),
    ])


def _sessions_of(df: pl.DataFrame) -> pl.DataFrame:
    """:func:`session_table` over the dates of ``df``'s parsed times (empty when none)."""
    ts_non_null = df.get_column("ts").drop_nulls()
    if ts_non_null.len():
        return session_table(ts_non_null.min().date(), ts_non_null.max().date())
    return pl.DataFrame(schema={"day": pl.Int32, "open_min": pl.Int32, "close_min": pl.Int32})


def _with_calendar(df: pl.DataFrame, sessions: pl.DataFrame) -> pl.DataFrame:
    """Calendar position of every parsed time: ``_day``, ``_mod`` (minute of day), ``_offmin``, the session's minutes."""
    return df.with_columns(
        pl.col("ts").dt.date().cast(pl.Int32).alias("_day"),
        (pl.col("ts").dt.hour().cast(pl.Int32) * 60 + pl.col("ts").dt.minute().cast(pl.Int32)).alias("_mod"),
        ((pl.col("ts").dt.second() != 0) | (pl.col("ts").dt.microsecond() != 0)).alias("_offmin"),
    ).join(sessions.rename({"day": "_day"}), on="_day", how="left", maintain_order="left")


def _check_parse(scan: _Scan, df: pl.DataFrame, fields: list[str]) -> pl.Expr:
    """bad_timestamp, missing_value, unparseable_value, non_finite_value; returns the missing-vwap condition.

    Empty text and the :data:`MISSING_TOKENS` (``NA``, ``N/A``, ``null`` ...) are missing values,
    not unparseable ones; ``inf``/``-inf`` (and numbers beyond float range) are non-finite.
    A missing vwap is not dropped (it is derived); a non-finite vwap is.
    """
    scan.reject(~scan.ts_ok, "bad_timestamp", scan.tf_expr,
                "a time like 2018-02-16 09:30:00 that exists in the source zone", scan.ts_text)
    if df.get_column("symbol").is_null().any() or (df.get_column("symbol") == "").any():
        no_sym = pl.col("symbol").is_null() | (pl.col("symbol") == "")
        scan.reject(no_sym, "missing_value", "symbol", "a symbol", pl.lit("''"))
    vwap_missing = pl.lit(False)
    for f in fields:
        col = df.get_column(f)
        has_null, has_nan, has_inf = col.null_count() > 0, bool(col.is_nan().any()), bool(col.is_infinite().any())
        txt = _txt_of(df, f)
        if has_null or has_nan:  # (a clean column skips the text checks: the common case, and the costly one)
            empty_txt = txt.is_null() | txt.str.strip_chars().str.to_lowercase().is_in(("",) + MISSING_TOKENS)
            is_missing = pl.col(f).is_nan() | (pl.col(f).is_null() & empty_txt)
            if f != "vwap":
                scan.reject(is_missing, "missing_value", f, "a number",
                            pl.when(pl.col(f).is_nan()).then(pl.lit("NaN")).otherwise(_quoted(txt)))
            else:  # vwap is optional per row: derived when empty (reported for kept rows by _repair_ohlc)
                vwap_missing = is_missing
            if has_null:
                scan.reject(pl.col(f).is_null() & ~empty_txt, "unparseable_value", f, "a number", _quoted(txt))
        if has_inf:
            scan.reject(pl.col(f).is_infinite(), "non_finite_value", f, "a finite number",
                        pl.when(txt.is_null()).then(_fmt(pl.col(f))).otherwise(_quoted(txt)))
    return vwap_missing


def _check_sessions(scan: _Scan) -> None:
    """off_minute, non_session_day, pre_market, closing_auction, post_market, after_early_close."""
    ts_ok = scan.ts_ok
    in_sess_day = pl.col("open_min").is_not_null()
    early = pl.col("close_min") < 960
    last_bar = _hhmm(pl.col("close_min") - 1)
    close_hhmm = _hhmm(pl.col("close_min"))
    today = last_past_day()
    future = pl.col("_day") > int(today.astype(np.int64))
    session_checks = [
        ("off_minute", ts_ok & pl.col("_offmin"), scan.tf_time, pl.lit("a time on a whole minute (seconds 00)")),
        ("non_session_day", ts_ok & ~in_sess_day & ~future, scan.tf_date,
         pl.lit("a date that is an NYSE session (not a weekend, holiday or closure)")),
        ("future_bar", ts_ok & future, scan.tf_date,
         pl.lit(f"a date on or before today, {today} (New York): no later session is past")),
        ("pre_market", ts_ok & in_sess_day & (pl.col("_mod") < pl.col("open_min")), scan.tf_time,
         pl.lit("a bar starting at or after 09:30")),
        ("closing_auction", ts_ok & in_sess_day & (pl.col("_mod") == pl.col("close_min")) & ~pl.col("_offmin"),
         scan.tf_time,
         pl.concat_str([pl.lit("a bar starting at or before "), last_bar, pl.lit(" (the "), close_hhmm,
                        pl.lit(" bar is the closing-auction print, not a one-minute bar)")])),
        ("post_market", ts_ok & in_sess_day & ~early & (pl.col("_mod") > pl.col("close_min")), scan.tf_time,
         pl.lit("a bar starting at or before 15:59 (no post-market bars)")),
        ("after_early_close", ts_ok & in_sess_day & early & (pl.col("_mod") > pl.col("close_min")), scan.tf_time,
         pl.concat_str([pl.lit("a bar starting at or before "), last_bar, pl.lit(" (early close at "), close_hhmm,
                        pl.lit(")")])),
    ]
    for kind, cond, fld, expected in session_checks:
        scan.reject(cond, kind, fld, expected, scan.ts_text)


def _check_ranges(scan: _Scan, fields: list[str]) -> None:
    """non_positive_price (open, high, low, close, vwap), negative_volume."""
    for f in [f for f in PRICE_FIELDS + ("vwap",) if f in fields]:
        cond = (pl.col(f) <= 0) & pl.col(f).is_finite()  # -inf is non_finite_value
        scan.reject(cond, "non_positive_price", f, "a price > 0", _fmt(pl.col(f)), drop=cond.fill_null(False))
    neg_vol = pl.col("volume") < 0
    scan.reject(neg_vol, "negative_volume", "volume", "a volume >= 0", _fmt(pl.col("volume")),
                drop=neg_vol.fill_null(False))


def _check_duplicates(scan: _Scan, df: pl.DataFrame, fields: list[str], files: Sequence[str]) -> pl.DataFrame:
    """exact_duplicate, conflicting_duplicate among rows with a time; file order decides the first copy."""
    name_of = {i: f for i, f in enumerate(files)}
    df = _duplicate_columns(df, fields)
    where_first = pl.concat_str([
        pl.lit("line "), pl.col("_first_line").cast(pl.String),
        pl.when(pl.col("_first_file") != pl.col("_file"))
        .then(pl.lit(" of ") + pl.col("_first_file").replace_strict(list(name_of), list(name_of.values()),
                                                                    return_dtype=pl.String, default="?"))
        .otherwise(pl.lit("")),
    ])
    exact = scan.ts_ok & (pl.col("_ncopies") > 1) & (pl.col("_nver") == 1) & ~pl.col("_is_first")
    scan.reject(exact, "exact_duplicate", scan.tf_expr,
                pl.concat_str([pl.lit("one row per minute; an identical row is at "), where_first]),
                pl.concat_str([pl.lit("a copy of "), where_first, pl.lit(" for "), scan.ts_text]))
    scan.reject(
        scan.ts_ok & (pl.col("_nver") > 1), "conflicting_duplicate", scan.tf_expr,
        pl.when(pl.col("_is_first")).then(pl.lit("one row per minute (this is the first of several differing rows)"))
        .otherwise(pl.concat_str([pl.lit("one row per minute; a different row is at "), where_first])),
        pl.concat_str([pl.col("_ncopies").cast(pl.String), pl.lit(" differing rows for "), scan.ts_text]),
        first_copy=pl.col("_is_first"),
    )
    return df


def _check_unsorted(scan: _Scan, df: pl.DataFrame) -> pl.DataFrame:
    """unsorted: a time earlier than the latest time of the earlier *kept* rows of the same file (moved).

    Only rows that no other check drops set the running maximum: an off-minute, out-of-session
    or duplicate row with a late time does not make the good rows after it unsorted.
    """
    kept_ts = pl.when(~scan.drop.fill_null(False)).then(pl.col("ts"))
    prev_max = kept_ts.cum_max().forward_fill().shift(1)
    df = df.with_columns(
        (prev_max.over("_file") if df.get_column("_file").n_unique() > 1 else prev_max).alias("_prev_max"),
    )
    unsorted = scan.ts_ok & (pl.col("ts") < pl.col("_prev_max"))
    scan.checks.add(unsorted, "unsorted", scan.tf_expr,
                    pl.concat_str([pl.lit("a time after "), pl.col("_prev_max").dt.strftime("%Y-%m-%d %H:%M:%S"),
                                   pl.lit(" (rows sorted by time)")]), scan.ts_text)
    return df


def _check_spikes(scan: _Scan, df: pl.DataFrame, max_spike: float) -> pl.DataFrame:
    """price_spike: a kept bar with a price > ``max_spike`` x, or < 1/``max_spike`` of, both neighbours' closes.

    Neighbours are the kept bars just before and after in time within the same session (for the
    first/last bar of a session: the two bars after/before it). Comparing with *both* keeps a
    bad neighbour from blaming a good bar, and a real move (a level that persists) from being
    blamed: only an isolated bar or field stands out. The row is dropped, so ``--repair`` never
    widens high/low to a typo.
    """
    kept = ~scan.drop.fill_null(False) & scan.ts_ok
    bars = df.with_row_index("_r").filter(kept).select("_r", "ts", "_day", *PRICE_FIELDS).sort("ts", maintain_order=True)
    if bars.height < 3:
        return df
    c, d = pl.col("close"), pl.col("_day")

    def near(k: int) -> pl.Expr:
        return pl.when(d.shift(k) == d).then(c.shift(k))

    ref_a, ref_b = pl.coalesce(near(1), near(-2)), pl.coalesce(near(-1), near(2))
    lo, hi = pl.min_horizontal(ref_a, ref_b), pl.max_horizontal(ref_a, ref_b)
    both = ref_a.is_not_null() & ref_b.is_not_null()
    out = {f: both & ((pl.col(f) > max_spike * hi) | (pl.col(f) < lo / max_spike)) for f in PRICE_FIELDS}
    flagged = bars.with_columns(ref_a.alias("_ra"), ref_b.alias("_rb"), *[v.alias(f"_o_{f}") for f, v in out.items()])
    flagged = flagged.filter(pl.any_horizontal([pl.col(f"_o_{f}") for f in PRICE_FIELDS]))
    if not flagged.height:
        return df
    rows, field_txt, found_txt = [], [], []
    for r in flagged.iter_rows(named=True):
        bad = [f for f in PRICE_FIELDS if r[f"_o_{f}"]]
        ref = math.sqrt(r["_ra"] * r["_rb"])
        factor = r[bad[0]] / ref
        scale = f"{factor:.3g}x" if factor >= 1 else f"1/{1 / factor:.3g}"
        rows.append(r["_r"])
        field_txt.append(",".join(bad))
        found_txt.append(
            ", ".join(f"{f} {r[f]:g}" for f in bad) + f" at {r['ts']:%Y-%m-%d %H:%M} ({scale} the neighbouring bars' "
            f"closes {r['_ra']:g} and {r['_rb']:g}" + ("; the whole bar is scaled)" if len(bad) == 4 else
                                                       "; the bar's other prices agree with them)"))
    info = pl.DataFrame({"_r": pl.Series(rows, dtype=pl.UInt32), "_spike_field": field_txt, "_spike_found": found_txt})
    df = df.with_row_index("_r").join(info, on="_r", how="left", maintain_order="left").drop("_r")
    scan.reject(pl.col("_spike_field").is_not_null(), "price_spike", pl.col("_spike_field"),
                f"prices within {max_spike:g}x either way of the neighbouring bars' closes (--max-spike)",
                pl.col("_spike_found"))
    return df


def _repair_ohlc(scan: _Scan, df: pl.DataFrame) -> pl.DataFrame:
    """Settle the drops (``_drop``); ohlc_inconsistent on the kept rows: dropped, or open/close clamped.

    A kept bar is consistent when ``low <= min(open, close)`` and ``max(open, close) <= high``.
    An inconsistent bar is dropped unless ``low <= high`` and open and close each lie within one
    tick (:data:`OHLC_TICK`) of ``[low, high]``; then they are clamped into it. ``high`` and
    ``low`` are never changed: a typo in one field can only remove its bar, never become the
    bar's extreme (a high typed as 100 under an open of 174.46 is not stored as a low of 100).
    """
    df = df.with_columns(scan.drop.fill_null(False).alias("_drop"))
    o, h, lo, c = (pl.col(f) for f in PRICE_FIELDS)
    tick = pl.when(h >= 1).then(pl.lit(OHLC_TICK[0])).otherwise(pl.lit(OHLC_TICK[1])) * (1 + 1e-9)  # float rounding
    bad_hi, bad_lo = h < pl.max_horizontal(o, c, lo), lo > pl.min_horizontal(o, c, h)
    near = (lo <= h) & (o <= h + tick) & (o >= lo - tick) & (c <= h + tick) & (c >= lo - tick)
    df = df.with_columns(((bad_hi | bad_lo) & ~pl.col("_drop")).fill_null(False).alias("_ohlc"))
    df = df.with_columns((pl.col("_ohlc") & near).alias("_clamp"))
    dropped = pl.col("_ohlc") & ~pl.col("_clamp")
    four = pl.concat_str([pl.lit("open "), _fmt(o), pl.lit(", high "), _fmt(h), pl.lit(", low "), _fmt(lo),
                          pl.lit(", close "), _fmt(c)])
    scan.checks.add(dropped & bad_hi, "ohlc_inconsistent", "high",
                    pl.concat_str([pl.lit("high >= max(open, close, low) = "), _fmt(pl.max_horizontal(o, c, lo))]),
                    four)
    scan.checks.add(dropped & ~bad_hi, "ohlc_inconsistent", "low",
                    pl.concat_str([pl.lit("low <= min(open, close, high) = "), _fmt(pl.min_horizontal(o, c, h))]),
                    four)
    for f in ("open", "close"):
        off = pl.col("_clamp") & ((pl.col(f) > h) | (pl.col(f) < lo))
        scan.checks.add(off, "ohlc_inconsistent", f,
                        pl.concat_str([pl.lit(f"{f} within [low, high] = ["), _fmt(lo), pl.lit(", "), _fmt(h),
                                       pl.lit("] (off by at most one tick: clamped; high and low kept)")]),
                        _fmt(pl.col(f)), new=pl.col(f).clip(lo, h), action="changed")
    scan.checks.flush(df)
    return df.with_columns(
        (pl.col("_drop") | dropped).alias("_drop"),
        *[pl.when(pl.col("_clamp")).then(pl.col(f).clip(lo, h)).otherwise(pl.col(f)).alias(f) for f in ("open", "close")],
    ).drop("_ohlc", "_clamp")


def _repair_vwap(scan: _Scan, df: pl.DataFrame, fields: list[str], vwap_missing: pl.Expr) -> pl.DataFrame:
    """missing_vwap and vwap_outside_range on the kept rows (after the OHLC repair); vwap clipped into [low, high]."""
    if "vwap" not in fields:
        return df
    kept = ~pl.col("_drop")
    typical = (pl.col("high") + pl.col("low") + pl.col("close")) / 3.0
    scan.checks.add(kept & vwap_missing.fill_null(False), "missing_vwap", "vwap",
                    "a number (derived as (high + low + close) / 3)",
                    pl.when(pl.col("vwap").is_nan()).then(pl.lit("NaN")).otherwise(_quoted(_txt_of(df, "vwap"))),
                    new=typical)
    out_vwap = kept & pl.col("vwap").is_not_null() & ((pl.col("vwap") < pl.col("low")) | (pl.col("vwap") > pl.col("high")))
    scan.checks.add(out_vwap, "vwap_outside_range", "vwap",
                    pl.concat_str([pl.lit("a vwap within [low, high] = ["), _fmt(pl.col("low")), pl.lit(", "),
                                   _fmt(pl.col("high")), pl.lit("]")]), _fmt(pl.col("vwap")),
                    new=pl.col("vwap").clip(pl.col("low"), pl.col("high")))
    scan.checks.flush(df)
    return df.with_columns(pl.col("vwap").clip(pl.col("low"), pl.col("high")))


def _collect_issues(parts: list[pl.DataFrame], df: pl.DataFrame, symbol: str) -> pl.DataFrame:
    """One issues table sorted by file and line; an out-of-order row that is dropped anyway says "dropped"."""
    issues = pl.concat([p.cast(ISSUE_SCHEMA) for p in parts if p.height], how="vertical") if any(
        p.height for p in parts) else pl.DataFrame(schema=ISSUE_SCHEMA)
    if issues.height:
        issues = issues.with_columns(pl.lit(symbol).alias("symbol")).sort(["_file", "_line"], maintain_order=True)
    if issues.filter(pl.col("kind") == "unsorted").height:
        dropped = df.filter(pl.col("_drop")).select("_file", "_line", pl.lit(True).alias("_dropped"))
        issues = issues.join(dropped, on=["_file", "_line"], how="left", maintain_order="left").with_columns(
            pl.when((pl.col("kind") == "unsorted") & pl.col("_dropped").fill_null(False))
            .then(pl.lit("dropped")).otherwise(pl.col("action")).alias("action")
        ).drop("_dropped")
    return issues


def _duplicate_columns(df: pl.DataFrame, fields: list[str]) -> pl.DataFrame:
    """Add ``_nver, _ncopies, _first_line, _first_file, _is_first`` (per timestamp).

    Window functions over ``ts`` are costly on millions of rows, so they run only on the
    rows whose timestamp occurs more than once (none, in clean data).
    """
    defaults = [
        pl.lit(1, dtype=pl.UInt32).alias("_nver"),
        pl.lit(1, dtype=pl.UInt32).alias("_ncopies"),
        pl.col("_line").alias("_first_line"),
        pl.col("_file").alias("_first_file"),
        pl.lit(True).alias("_is_first"),
    ]
    ts = df.get_column("ts")
    if ts.null_count() == 0:
        t = ts.to_physical().to_numpy()
        if t.size < 2 or bool(np.all(t[1:] > t[:-1])):  # strictly increasing: no duplicates (fast path)
            return df.with_columns(defaults)
    dup_mask = ts.is_duplicated() & ts.is_not_null()
    if not dup_mask.any():
        return df.with_columns(defaults)
    df = df.with_row_index("_row")
    sub = df.filter(dup_mask).select(
        "_row",
        pl.struct(fields).n_unique().over("ts").cast(pl.UInt32).alias("_nver"),
        pl.len().over("ts").cast(pl.UInt32).alias("_ncopies"),
        pl.col("_line").first().over("ts").alias("_first_line"),
        pl.col("_file").first().over("ts").alias("_first_file"),
        (pl.int_range(pl.len()).over("ts") == 0).alias("_is_first"),
    )
    out = df.with_columns(defaults).update(sub, on="_row", how="left")
    return out.drop("_row")


def _stale_runs(clean: pl.DataFrame, symbol: str, stale_minutes: int) -> pl.DataFrame:
    if clean.height < stale_minutes:
        return pl.DataFrame(schema=ISSUE_SCHEMA)
    close = clean.get_column("close").to_numpy()
    day = clean.get_column("ts").to_numpy().astype("datetime64[D]")
    same = np.zeros(len(close) + 2, dtype=np.int8)  # same[i+1]: bar i repeats bar i-1's close
    same[2:-1] = (close[1:] == close[:-1]) & (day[1:] == day[:-1])
    edges = np.diff(same)
    starts = np.flatnonzero(edges == 1)  # first repeating bar; the run starts one bar earlier
    ends = np.flatnonzero(edges == -1)  # one past the last repeating bar
    length = ends - starts + 1
    keep = length >= stale_minutes
    first, last = starts[keep] - 1, ends[keep] - 1
    if not len(first):
        return pl.DataFrame(schema=ISSUE_SCHEMA)
    runs = clean[first.tolist()].select("_file", "_line", pl.col("ts").alias("t0"), pl.col("close").alias("c")).with_columns(
        pl.Series("n", length[keep]),
        clean.get_column("ts")[last.tolist()].alias("t1"),
        pl.lit(symbol).alias("symbol"),
    )
    return _issue(
        runs, "stale_prices", "close",
        f"a close that changes within {stale_minutes} consecutive bars",
        pl.concat_str([pl.lit("close "), _fmt(pl.col("c")), pl.lit(" unchanged for "), pl.col("n").cast(pl.String),
                       pl.lit(" bars, "), pl.col("t0").dt.strftime("%Y-%m-%d %H:%M"), pl.lit(" to "),
                       pl.col("t1").dt.strftime("%H:%M")]),
    )


#: common split ratios ``(new shares, old shares)``: a 7:1 split multiplies prices by 1/7
SPLIT_RATIOS: tuple[tuple[int, int], ...] = (
    (3, 2), (2, 1), (5, 2), (3, 1), (4, 1), (5, 1), (6, 1), (7, 1), (8, 1), (10, 1), (15, 1), (20, 1),
    (1, 2), (1, 3), (1, 4), (1, 5), (1, 8), (1, 10), (1, 15), (1, 20), (1, 25), (1, 50),
)
#: Bounds of the split-fit tolerance (:func:`split_tolerance`). The upper one is below half the
#: smallest log gap between two :data:`SPLIT_RATIOS` (ln(8/7) / 2 = 6.7%): no move fits two ratios.
SPLIT_TOLERANCE: tuple[float, float] = (0.02, 0.06)
#: How far the volume per bar after a split may be from the volume before times the split's share
#: ratio ``N/M``, as a fraction of ``|ln N/M|``: a half means closer to the split than to no change
#: (AAPL's real 7:1 of 2014 traded x4.6 per share, its pre-split week busy).
VOLUME_TOLERANCE = 0.5
#: Sessions with bars after (and before) a jump over which a split's new (and old) price level must hold.
LEVEL_SESSIONS = 5
#: Fewest overnight moves a tolerance is measured from (fewer: the lower bound of :data:`SPLIT_TOLERANCE`).
_MIN_MOVES = 20


@dataclass(frozen=True)
class KnownActions:
    """The corporate actions given with ``--adjustments`` for one symbol: the file and its events.

    ``events``: ``(ex_date, split_ratio, dividend, factor)`` as :func:`data_prep.adjust.read_adjustments`
    returns them (``factor`` NaN when the file gives none).
    """

    file: str
    events: tuple = ()


def split_ratio(price_ratio: float, tolerance: float = 0.02) -> str | None:
    """The split ``N:M`` whose price factor ``M/N`` is closest to ``price_ratio``, if ``|ln(price_ratio N/M)| <= tolerance``.

    Example
    -------
    >>> split_ratio(1 - 0.856), split_ratio(10.1), split_ratio(0.8), split_ratio(127.58 / 499.23, 0.03)
    ('7:1', '1:10', None, '4:1')
    """
    if not (price_ratio > 0 and math.isfinite(price_ratio)):
        return None
    best = min(SPLIT_RATIOS, key=lambda nm: abs(math.log(price_ratio * nm[0] / nm[1])))
    return f"{best[0]}:{best[1]}" if abs(math.log(price_ratio * best[0] / best[1])) <= tolerance else None


def split_tolerance(open_: np.ndarray, close: np.ndarray, day: np.ndarray, max_jump: float) -> float:
    """How far a move may be from a split's price factor and still fit it: the symbol's own overnight moves.

    ``tol = clip(q99(|ln(open_t / close_{t-1})|), 2%, 6%)`` over the overnight moves (first bar of a
    session against the last bar before it) within ``max_jump``: on the day of a split the
    market moves too (AAPL's 4:1 split of 2020-08-31 opened 2.2% above a quarter of the last
    close). With fewer than 20 such moves, 2%.

    >>> day = np.arange(60).astype("datetime64[D]")
    >>> close = np.full(60, 100.0); open_ = close * np.exp(np.resize([0.01, -0.03], 60))
    >>> round(split_tolerance(open_, close, day, 1.5), 4), split_tolerance(open_[:5], close[:5], day[:5], 1.5)
    (0.03, 0.02)
    """
    overnight = day[1:] != day[:-1]
    moves = np.abs(np.log(open_[1:][overnight] / close[:-1][overnight]))
    moves = moves[np.isfinite(moves) & (moves <= math.log(max_jump))]
    if moves.size < _MIN_MOVES:
        return SPLIT_TOLERANCE[0]
    return float(np.clip(np.quantile(moves, 0.99), *SPLIT_TOLERANCE))


@dataclass(frozen=True)
class _Bars:
    """One symbol's repaired bars as arrays, for the jump checks."""

    open: np.ndarray
    close: np.ndarray
    ts: np.ndarray  # datetime64[m]
    session: np.ndarray  # index of the bar's session among the symbol's sessions with bars
    volume: np.ndarray | None = None  # None: the file has no volume

    @classmethod
    def of(cls, clean: pl.DataFrame) -> _Bars:
        ts = clean.get_column("ts").to_numpy().astype("datetime64[m]")
        session = np.unique(ts.astype("datetime64[D]"), return_inverse=True)[1].reshape(-1)
        volume = clean.get_column("volume").to_numpy().astype(np.float64) if "volume" in clean.columns else None
        return cls(clean.get_column("open").to_numpy(), clean.get_column("close").to_numpy(), ts, session, volume)

    def when(self, i: int) -> str:
        return str(self.ts[i]).replace("T", " ")


def _level_break(bars: _Bars, i: int) -> str | None:
    """Why the jump into bar ``i`` is no split: prices go back, or it is a return; ``None`` when both levels hold.

    The levels are split at the geometric mean of the close before and the open after the jump.
    Looked at over :data:`LEVEL_SESSIONS` sessions with bars after the jump (from the jump on) and
    before it: a split's new level holds after it and its old level held before it.
    """
    pre, post = bars.close[i - 1], bars.open[i]
    mid, up = math.sqrt(pre * post), post > pre
    s = bars.session
    ahead = slice(i, int(np.searchsorted(s, s[i] + LEVEL_SESSIONS)))
    back = np.flatnonzero((bars.close[ahead] > mid) != up)
    if back.size:
        j = i + int(back[0])
        return (f"not a split: prices are back at the earlier level at {bars.when(j)} (close {bars.close[j]:g}), "
                f"{j - i} bar(s) after the jump; a bad tick or a vendor error?")
    behind = slice(int(np.searchsorted(s, s[i - 1] - LEVEL_SESSIONS + 1)), i)
    off = np.flatnonzero((bars.close[behind] > mid) == up)
    if off.size:
        k = behind.start + int(off[-1])
        return (f"not a split: a return to the level of {bars.when(k)} (close {bars.close[k]:g}) after "
                f"{i - 1 - k} bar(s) off it; a bad tick or a vendor error?")
    return None


def volume_evidence(bars: _Bars, i: int, split: str) -> tuple[bool, str]:
    """Whether the volume around the jump into bar ``i`` fits the ``split`` (``N:M``), and the words saying so.

    A split of ``N`` new shares per ``M`` old multiplies the volume by ``N/M``: the median volume per
    bar over :data:`LEVEL_SESSIONS` sessions from the jump on, against the same before it, must be
    within ``VOLUME_TOLERANCE x |ln N/M|`` of ``N/M`` in log: closer to the split than to no change. A crash on unchanged
    volume is no split; a file without volume (or with none traded) gives no evidence.

    >>> day = np.repeat(np.arange(10).astype("datetime64[D]").astype("datetime64[m]"), 1)
    >>> bars = _Bars(np.r_[[100.0] * 5, [50.0] * 5], np.r_[[100.0] * 5, [50.0] * 5], day, np.arange(10),
    ...              np.r_[[1000.0] * 5, [2100.0] * 5])
    >>> volume_evidence(bars, 5, "2:1")
    (True, 'volume per bar x2.10 (a 2:1 split gives x2)')
    >>> volume_evidence(_Bars(bars.open, bars.close, day, bars.session, np.full(10, 1000.0)), 5, "2:1")
    (False, 'volume per bar x1.00 where a 2:1 split gives x2')
    """
    want = _split_n(split)
    if bars.volume is None:
        return False, f"no volume to confirm it (a {split} split gives volume x{want:g})"
    s = bars.session
    after = bars.volume[i:int(np.searchsorted(s, s[i] + LEVEL_SESSIONS))]
    before = bars.volume[int(np.searchsorted(s, s[i - 1] - LEVEL_SESSIONS + 1)):i]
    v_after, v_before = float(np.median(after)) if after.size else 0.0, float(np.median(before)) if before.size else 0.0
    if not (v_after > 0 and v_before > 0 and math.isfinite(v_after) and math.isfinite(v_before)):
        return False, f"no volume traded to confirm it (a {split} split gives volume x{want:g})"
    found = v_after / v_before
    tolerance = VOLUME_TOLERANCE * abs(math.log(want))
    if abs(math.log(found / want)) <= tolerance:
        return True, f"volume per bar x{found:.2f} (a {split} split gives x{want:g})"
    return False, f"volume per bar x{found:.2f} where a {split} split gives x{want:g}"


def _split_advice(symbol: str, date: str, ratio: float, split: str | None, tol: float,
                  actions: KnownActions | None, volume: tuple[bool, str] | None = None) -> str | None:
    """What to do about a lasting jump: the split that fits and ``--adjustments``; ``None``: the file explains it.

    A paste-ready line is offered only with evidence: the price ratio within the tolerance of a
    common split, both price levels holding (checked before), and the volume fitting (``volume``,
    :func:`volume_evidence`). Otherwise the jump is unexplained, and its factor is asked for.
    """
    given = [e for e in (actions.events if actions else ()) if str(np.datetime64(e[0], "D")) == date]
    for _, split_n, dividend, factor in given:
        expected = factor if np.isfinite(factor) else 1.0 / split_n
        if abs(math.log(ratio / expected)) <= tol:
            return None  # the split given with --adjustments explains it: back-adjusted, nothing to say
    unexplained = (f"unexplained jump of {100 * (ratio - 1):+.1f}% on {date}; if it is a corporate action, give its "
                   f"factor in --adjustments (symbol,date,split_ratio,dividend,factor)")
    if split and volume is not None and not volume[0]:
        near = (f"prices near a {split} split (x{_factor_text(split)}, off it by "
                f"{100 * math.log(ratio * _split_n(split)):+.1f}%, tolerance {100 * tol:.1f}%) but {volume[1]}")
        if given:
            listed = ", ".join(f"split_ratio {e[1]:g}" + (f" factor {e[3]:g}" if np.isfinite(e[3]) else "") for e in given)
            return f"{near}; --adjustments {actions.file} gives {symbol} {listed} on {date}, which the move does not fit"
        return f"{near}: {unexplained}"
    fit = (f"fits a {split} split (prices x{_factor_text(split)}), off it by {100 * math.log(ratio * _split_n(split)):+.1f}% "
           f"(tolerance {100 * tol:.1f}%)" + (f", {volume[1]}" if volume is not None else "")) if split else (
        f"no common split ratio fits (tolerance {100 * tol:.1f}%, the symbol's 99th-percentile overnight move)")
    if given:
        listed = ", ".join(f"split_ratio {e[1]:g}" + (f" factor {e[3]:g}" if np.isfinite(e[3]) else "") for e in given)
        return f"{fit}; --adjustments {actions.file} gives {symbol} {listed} on {date}, which the move does not fit"
    if not split:
        return f"{fit}: {unexplained}"
    line = f"'{symbol},{date},{_split_n(split):g},'"
    if actions is not None:
        return f"{fit}; --adjustments {actions.file} has no event of {symbol} on {date}: add the line {line}"
    return f"{fit}: pass it in --adjustments (the line {line}), or check the vendor's adjustment"


def _split_n(split: str) -> float:
    """``"7:1"`` -> 7.0 (new shares per old share: the adjustments file's ``split_ratio``)."""
    n, m = split.split(":")
    return int(n) / int(m)


def _price_jumps(clean: pl.DataFrame, symbol: str, max_jump: float,
                 actions: KnownActions | None = None) -> pl.DataFrame:
    """price_jump (warning): a bar's open beyond ``max_jump`` x either way of the previous bar's close.

    A move that fits a split ratio within the symbol's tolerance (:func:`split_tolerance`) counts
    from ``max_jump / e^tol``, so that a 3:2 split (x2/3) is reported with the default 1.5. The
    split is named only when the new level holds after the jump and the old one held before it
    (:func:`_level_break`): a bad session that comes back is said to be one. A split given in
    ``--adjustments`` (``actions``) on the jump's date that fits the move is not reported.
    """
    if clean.height < 2:
        return pl.DataFrame(schema=ISSUE_SCHEMA)
    lim = math.log(max_jump)
    with np.errstate(divide="ignore", invalid="ignore"):
        moves = np.log(clean.get_column("open").to_numpy()[1:] / clean.get_column("close").to_numpy()[:-1])
    if not np.any(np.abs(moves) > lim - SPLIT_TOLERANCE[1]):  # the common case: nothing near a jump
        return pl.DataFrame(schema=ISSUE_SCHEMA)
    bars = _Bars.of(clean)
    tol = split_tolerance(bars.open, bars.close, bars.ts.astype("datetime64[D]"), max_jump)
    rows, expected, found = [], [], []
    for i in (np.flatnonzero(np.abs(moves) > lim - tol) + 1).tolist():
        ratio = bars.open[i] / bars.close[i - 1]
        split = split_ratio(ratio, tol)
        if not (abs(math.log(ratio)) > lim or split is not None):
            continue
        overnight = bars.session[i] != bars.session[i - 1]
        story = _level_break(bars, i) or _split_advice(symbol, str(bars.ts[i].astype("datetime64[D]")), ratio, split,
                                                        tol, actions, split and volume_evidence(bars, i, split))
        if story is None:
            continue
        rows.append(i)
        found.append(f"open {bars.open[i]:g} at {bars.when(i)} after close {bars.close[i - 1]:g} at "
                     f"{bars.when(i - 1)}: {100 * (ratio - 1):+.1f}% {'overnight' if overnight else 'within the session'}"
                     f"; {story}")
        expected.append(f"an {'overnight move' if overnight else 'move between consecutive bars'} within "
                        f"{max_jump:g}x either way (|log return| <= ln {max_jump:g}; --max-jump)")
    if not rows:
        return pl.DataFrame(schema=ISSUE_SCHEMA)
    j = clean[rows].with_columns(pl.Series("_exp", expected), pl.Series("_found", found), pl.lit(symbol).alias("symbol"))
    return _issue(j, "price_jump", "open", pl.col("_exp"), pl.col("_found"))


def _factor_text(split: str) -> str:
    n, m = split.split(":")
    return f"1/{n}" if m == "1" else m if n == "1" else f"{m}/{n}"


def _missing_sessions(clean: pl.DataFrame, symbol: str, sessions: pl.DataFrame, tf_date: pl.Expr) -> pl.DataFrame:
    """missing_session (warning): NYSE sessions without any bar between the symbol's first and last bar.

    One issue per session, at the line of the first bar after it.
    """
    if clean.height < 2:
        return pl.DataFrame(schema=ISSUE_SCHEMA)
    day = clean.get_column("ts").dt.date().cast(pl.Int32).to_numpy()
    all_days = sessions.get_column("day").to_numpy()
    span = all_days[(all_days >= day[0]) & (all_days <= day[-1])]
    gone = np.setdiff1d(span, day)
    if not gone.size:
        return pl.DataFrame(schema=ISSUE_SCHEMA)
    nxt = np.searchsorted(day, gone, side="right")  # first bar after the missing session
    after = clean[nxt.tolist()].select("_file", "_line", pl.col("ts").alias("t1"))
    before = clean.get_column("ts")[(nxt - 1).tolist()].alias("t0")
    frame = after.with_columns(
        before, pl.Series("gone", gone.astype("datetime64[D]")).cast(pl.Date), pl.lit(symbol).alias("symbol"),
    )
    return _issue(
        frame, "missing_session", tf_date,
        "bars on every NYSE session between the symbol's first and last bar",
        pl.concat_str([pl.lit("no bar on "), pl.col("gone").dt.strftime("%Y-%m-%d"),
                       pl.lit(" (a whole session; bars stop at "), pl.col("t0").dt.strftime("%Y-%m-%d %H:%M"),
                       pl.lit(" and resume at "), pl.col("t1").dt.strftime("%Y-%m-%d %H:%M"), pl.lit(")")]),
    )


def bar_intervals(df: pl.DataFrame, *, min_spacings: int = 10, share: float = 0.9) -> list[tuple[int, int, int]]:
    """Files whose bars are not one-minute bars: ``[(file index, modal spacing in seconds, bars)]``.

    The spacing is the time between consecutive distinct bar times within a session (day) of
    each file; its mode is the bar interval. A file is listed when the mode is not 60 s and at
    least ``share`` of the spacings are whole multiples of it (5-minute bars: every spacing is
    5, 10, ... minutes; sparse one-minute bars have a mode of 60 s or scattered spacings), with
    at least ``min_spacings`` spacings to judge from. A file with one bar per day on at least
    ``share`` of ``min_spacings`` or more days holds daily bars (spacing 86400).

    Example
    -------
    >>> import datetime as dt
    >>> ts = [dt.datetime(2018, 2, 16, 9, 30) + dt.timedelta(minutes=5 * i) for i in range(20)]
    >>> bar_intervals(pl.DataFrame({"_file": [0] * 20, "ts": ts}))
    [(0, 300, 20)]
    """
    out = []
    t = df.select("_file", "ts").drop_nulls()
    files = t.get_column("_file").to_numpy()
    us = t.get_column("ts").dt.cast_time_unit("us").to_physical().to_numpy()
    one_file = files.size == 0 or bool((files == files[0]).all())
    for fi in ([int(files[0])] if files.size else []) if one_file else sorted(set(files.tolist())):
        x = us if one_file else us[files == fi]
        x = np.unique(x) if x.size > 1 and bool((x[1:] <= x[:-1]).any()) else x  # sorted, distinct
        if x.size <= min_spacings:
            continue
        day = x // 86_400_000_000
        same = day[1:] == day[:-1]
        per_day = np.diff(np.append(np.flatnonzero(np.concatenate([[True], ~same])), x.size))  # bars per day
        if per_day.size >= min_spacings and np.count_nonzero(per_day == 1) >= share * per_day.size:
            out.append((int(fi), 86400, int(x.size)))
            continue
        sp = (np.diff(x)[same]) / 1e6
        if sp.size < min_spacings:
            continue
        values, counts = np.unique(sp, return_counts=True)
        mode = float(values[np.argmax(counts)])  # the smallest of equally frequent spacings
        if mode == 60 or mode <= 0 or mode != int(mode):
            continue
        if np.count_nonzero(sp % mode == 0) >= share * sp.size:
            out.append((int(fi), int(mode), int(x.size)))
    return out


def interval_label(seconds: int) -> str:
    """``300`` -> ``5-minute``, ``30`` -> ``30-second``, ``3600`` -> ``1-hour``, ``86400`` -> ``daily``."""
    if seconds == 86400:
        return "daily"
    if seconds % 3600 == 0:
        return f"{seconds // 3600}-hour"
    if seconds % 60 == 0:
        return f"{seconds // 60}-minute"
    return f"{seconds}-second"


#: zones tried when most bars fall outside the session
_HINT_ZONES = ("UTC", "America/New_York", "America/Chicago", "America/Los_Angeles", "Europe/London")
_NY = "America/New_York"


def _inside(t: pl.DataFrame, sessions: pl.DataFrame) -> pl.DataFrame:
    """``t`` (with ``ts``, New York naive) plus ``_in``: inside a session, 09:30-16:00 inclusive."""
    t = t.with_columns(
        pl.col("ts").dt.date().cast(pl.Int32).alias("_day"),
        (pl.col("ts").dt.hour().cast(pl.Int32) * 60 + pl.col("ts").dt.minute().cast(pl.Int32)).alias("_mod"),
    ).join(sessions.rename({"day": "_day"}), on="_day", how="left", maintain_order="left")
    inside = (pl.col("_mod") >= pl.col("open_min")) & (pl.col("_mod") <= pl.col("close_min"))
    return t.with_columns(inside.fill_null(False).alias("_in")).drop("_day", "_mod", "open_min", "close_min")


def _inside_share(ts: pl.Series) -> float:
    """Share of (New York naive) times inside a session, 09:30-16:00 inclusive."""
    ts = ts.drop_nulls()
    if not ts.len():
        return 0.0
    sess = session_table(ts.min().date(), ts.max().date())
    return float(_inside(pl.DataFrame({"ts": ts}), sess).get_column("_in").mean())


def timezone_hints(
    data: pl.DataFrame, files: Sequence[str], *, tz: str, zoned: Sequence[bool], threshold: float = 0.5,
    min_bars: int = 20, sample: int = 20_000, sessions: pl.DataFrame | None = None,
) -> dict[int, str]:
    """A hint per file when most of its bars fall outside the session in the assumed zone.

    ``data`` has ``_file`` and ``ts`` (naive New York times, as read with ``--tz tz``). For a file
    with more than ``threshold`` of its bars outside 09:30-16:00 New York time, the zones of
    :data:`_HINT_ZONES` are tried on its naive times; the one that puts most bars inside the
    session is named (``pass --tz UTC``). Files whose times carry a zone (``zoned``) get a hint
    that ``--tz`` does not apply. ``sessions``: :func:`session_table` covering ``data`` (computed
    when omitted). A file read in batches gets the same hint from :func:`inside_counts` and
    :func:`timezone_hint`.

    Returns
    -------
    dict
        ``{file index: hint text}``.
    """
    hints: dict[int, str] = {}
    t = data.select("_file", "ts").drop_nulls("ts")
    if not t.height:
        return hints
    per_file = _inside(t, _sessions_of(t) if sessions is None else sessions).group_by("_file").agg(
        pl.len().alias("n"), pl.col("_in").mean().alias("share"),
    ).filter((pl.col("n") >= min_bars) & (pl.col("share") < 1 - threshold)).sort("_file")
    for fi, n, share_in in per_file.iter_rows():
        ts = t.filter(pl.col("_file") == fi).get_column("ts").head(sample)
        hints[fi] = _hint_text(ts, share_in, files[fi], tz=tz, zoned=zoned[fi], threshold=threshold, n=n)
    return hints


def inside_counts(data: pl.DataFrame) -> dict[int, tuple[int, int]]:
    """``{file index: (bars with a time, bars inside a session)}`` of ``data`` (``_file``, ``ts``).

    Inside: 09:30-16:00 New York time on an NYSE session, as :func:`timezone_hints` counts; sums
    over the batches of a file give the file's counts.
    """
    t = data.select("_file", "ts").drop_nulls("ts")
    if not t.height:
        return {}
    agg = _inside(t, _sessions_of(t)).group_by("_file").agg(pl.len().alias("n"), pl.col("_in").sum().alias("k"))
    return {int(fi): (int(n), int(k)) for fi, n, k in agg.iter_rows()}


def timezone_hint(ts: pl.Series, n: int, n_inside: int, file: str, *, tz: str, zoned: bool,
                  threshold: float = 0.5, min_bars: int = 20, sample: int = 20_000) -> str | None:
    """The :func:`timezone_hints` hint of one file from its counts (:func:`inside_counts`) and its
    first times (``ts``: the file's non-null times in line order, at least its first ``sample``); None: no hint."""
    if n < min_bars or not n_inside / n < 1 - threshold:
        return None
    return _hint_text(ts.head(sample), n_inside / n, file, tz=tz, zoned=zoned, threshold=threshold, n=n)


#: Share of the busiest 6.5 hours' bars the regular session must hold for a file's session pattern to count as
#: in place (its bars outside are extended hours, not a time-zone shift).
_ALIGNED_SHARE = 0.9


def session_in_place(ts: pl.Series) -> bool:
    """Whether the regular session 09:30-16:00 (New York) is the busiest 6.5 hours of the day of these bars.

    The bars per minute of the day are counted; the 390-minute window starting at 09:30 must
    hold at least 90% of the bars of the busiest 390-minute window. Extended-hours bars
    (04:00-09:29, 16:01-20:00) in the right zone keep the session in place (the regular hours
    are the busiest); a file in another zone moves the busy block by whole hours.

    >>> import datetime as dt
    >>> day = dt.datetime(2018, 2, 16)
    >>> ext = pl.Series([day + dt.timedelta(minutes=m) for m in range(4 * 60, 20 * 60)])  # 04:00-19:59
    >>> utc = pl.Series([day + dt.timedelta(minutes=m) for m in range(14 * 60 + 30, 21 * 60)])  # 14:30-20:59
    >>> session_in_place(ext), session_in_place(utc)
    (True, False)
    """
    mod = (ts.dt.hour().cast(pl.Int32) * 60 + ts.dt.minute().cast(pl.Int32)).drop_nulls().to_numpy()
    if not mod.size:
        return False
    windows = np.convolve(np.bincount(mod, minlength=1440), np.ones(390, dtype=np.int64), mode="valid")
    return bool(windows[570] >= _ALIGNED_SHARE * windows.max())


def _extended_hours_text(ts: pl.Series, share_in: float, file: str, n: int | None) -> str:
    """The hint of a file whose bars outside the regular session are pre- and post-market bars."""
    times = ts.drop_nulls().dt.time()
    outside = times.filter((times < dt_time(9, 30)) | (times > dt_time(16, 0)))
    count = f"{round(n * (1 - share_in)):,} of {n:,}" if n else f"{round(100 * (1 - share_in))}% of the"
    span = f", {outside.min():%H:%M} to {outside.max():%H:%M}" if outside.len() else ""
    return (f"extended-hours bars: {count} bars of {file} fall outside the regular session 09:30-16:00 {_NY}{span}, "
            "and the regular session holds the busiest 6.5 hours of its bars: pre- and post-market bars, not a time-zone "
            "problem (pre_market / post_market rows, dropped by --repair)")


def _hint_text(ts: pl.Series, share_in: float, file: str, *, tz: str, zoned: bool, threshold: float,
               n: int | None = None) -> str:
    """The hint of a file with ``share_in`` of its ``n`` bars inside the session; ``ts``: its first times.

    Bars outside the session with the session still the busiest hours (:func:`session_in_place`)
    are extended-hours bars: said so, with no time-zone hint.
    """
    if session_in_place(ts):
        return _extended_hours_text(ts, share_in, file, n)
    head = f"{round(100 * (1 - share_in))}% of {file}'s bars fall outside 09:30-16:00 {_NY}"
    if zoned:
        return (head + "; its timestamps carry their own zone (epoch milliseconds are UTC), so --tz does not "
                "apply: check the vendor's time convention")
    local = ts if tz == _NY else ts.dt.replace_time_zone(_NY).dt.convert_time_zone(tz).dt.replace_time_zone(None)
    best, best_share = None, share_in
    for zone in _HINT_ZONES:
        if zone == tz:
            continue
        moved = local.dt.replace_time_zone(zone, ambiguous="earliest", non_existent="null")
        share = _inside_share(moved.dt.convert_time_zone(_NY).dt.replace_time_zone(None))
        if share > best_share:
            best, best_share = zone, share
    if tz != _NY:
        head += f" (naive times read as --tz {tz})"
    if best is not None and best_share >= 1 - threshold:
        what = "UTC" if best == "UTC" else f"in {best}"
        return (f"{head}; are the timestamps {what}? pass --tz {best} "
                f"({round(100 * best_share)}% of them would fall inside)")
    return f"{head}; check the zone of its naive timestamps (--tz ZONE, now {tz})"


def missing_minutes(clean_ts: np.ndarray | None, calendar: np.ndarray, *, index: np.ndarray | None = None) -> dict[str, int]:
    """Count calendar minutes without a bar per session, over the symbol's own span.

    Parameters
    ----------
    clean_ts : numpy.ndarray of datetime64
        The symbol's bar times (sorted, unique, on the calendar).
    calendar : numpy.ndarray of datetime64[m]
        The store calendar.
    index : numpy.ndarray of int, optional
        Positions of the bars in ``calendar`` when already known (then ``clean_ts`` is unused).

    Returns
    -------
    dict
        ``{"YYYY-MM-DD": missing count}`` for sessions between the symbol's first and last
        session with at least one missing minute (a session without any bar counts all its
        minutes).

    Example
    -------
    >>> cal = np.array(["2018-01-02T09:30", "2018-01-02T09:31", "2018-01-03T09:30"], dtype="datetime64[m]")
    >>> missing_minutes(cal[:2], cal)
    {}
    >>> missing_minutes(cal[[0, 2]], cal)
    {'2018-01-02': 1}
    """
    cal = np.asarray(calendar, dtype="datetime64[m]")
    if index is None:
        ts = np.asarray(clean_ts, dtype="datetime64[m]")
        if ts.size == 0 or cal.size == 0:
            return {}
        idx = np.searchsorted(cal, ts)
        idx = idx[(idx < cal.size) & (cal[np.minimum(idx, cal.size - 1)] == ts)]
    else:
        idx = np.asarray(index)
    if idx.size == 0 or cal.size == 0:
        return {}
    days = cal.astype("datetime64[D]")
    first_day, last_day = days[idx.min()], days[idx.max()]
    span = (days >= first_day) & (days <= last_day)
    present = np.zeros(cal.size, dtype=bool)
    present[idx] = True
    miss = span & ~present
    if not miss.any():
        return {}
    u, counts = np.unique(days[miss], return_counts=True)
    return {str(d): int(c) for d, c in zip(u, counts)}
