r"""Ingest vendor minute or daily bars into a Qlib store: read, validate, repair, adjust, write, append.

Daily bars
----------
``--freq day`` (or detected: a file whose time is one date column holding dates only, with no
time-of-day column; :func:`data_prep.vendor.detect_freq`) writes a Qlib ``day`` store:
``calendars/day.txt`` (the NYSE sessions from the first to the last date), ``instruments/*.txt``
with dates, ``features/<sym>/<field>.day.bin``, published with the same commit marker. The
minute path's checks that apply to one bar per session run unchanged (unparseable, missing and
non-finite values, non-positive prices, negative volume, exact and conflicting duplicates,
unsorted rows, OHLC consistency, vwap range, price jumps between consecutive sessions with the
split ratio that fits, whole missing sessions, dates that are no NYSE session); the per-minute
ones (minute grid, pre/post market, closing auction, bar interval, missing minutes, stale runs,
intraday spikes, time-zone hints) do not apply. A date with a time of day, or files of both
frequencies in one ingest, are refused; so is appending daily bars to a minute store (or back).

Modes
-----
* **default (validate)**: validate everything; if any *error* kind is found, write nothing,
  raise :class:`ValidationFailed` carrying the full report (the CLI prints the summary and
  exits 1). A clean source is written.
* ``--strict``: stop at the first error in file order (files sorted by name, then line) with
  :class:`StrictError`, whose message names the file, the 1-based line (CSV header = line 1),
  the field, what was expected and what was found.
* ``--repair``: fix what is safe (see the table in :mod:`data_prep.validate`: drop
  unparseable, non-finite, out-of-session, non-positive, duplicated rows; drop *all* copies of a
  conflicting duplicate; drop a bar with a price spike against both neighbours (``--max-spike``)
  rather than widen high/low to it; sort; drop an OHLC-inconsistent bar -- only an open or close
  within one tick of [low, high] is clamped into it, high and low are never changed; clip vwap)
  and report every row dropped, changed or moved, with file, line and reason, and every value
  changed with its old (``found``) and new (``new``) value.

Warnings (missing minutes per session, whole missing sessions by date, stale-price runs, price
jumps beyond ``--max-jump`` with the split ratio that fits, or the level they go back to) are
reported in every mode and never stop an ingest: the store represents them faithfully (NaN bars;
repeated prices). When most of a file's bars fall outside the session, the report (and a
``--strict`` error) carries a hint: extended-hours bars when the regular session is still the
busiest part of the day, else the ``--tz`` that fits (:func:`data_prep.validate.timezone_hint`).
A symbol taken from a file's name is said in the report; one with a tag like ``_1MIN`` or
``_2018`` gets a hint to pass ``--symbol`` (it is never guessed).

In every mode, bars that are not one-minute bars (the modal spacing of consecutive bars within a
session per symbol and file is 5 minutes, 30 seconds, one bar per session ...) are refused with
an :class:`IngestError` naming the file, the interval found and the number of bars.

Decisions
---------
* **16:00 bar**: a vendor's bar stamped at the close (16:00, or 13:00 on early-close days) is
  the closing-auction print, not a 09:30..15:59 one-minute interval; it is an anomaly of kind
  ``closing_auction`` (dropped by ``--repair``, counted per symbol). Folding it into the 15:59
  bar would mix the auction's volume into continuous trading; dropping it keeps every stored
  bar a true one-minute interval.
* **vwap**: the vendor's ``vwap`` column when present; otherwise, and for rows whose vwap is
  empty, the typical price ``(high + low + close) / 3`` (after the OHLC repair). Recorded in
  ``meta.json`` and the report.
* **Calendar**: the exchange's minutes from the first to the last session date of the clean
  data (or ``--start``/``--end``), never the union of file timestamps; missing bars are NaN.
* **Adjustment**: with ``--adjustments`` prices are back-adjusted and ``$factor`` written
  (:mod:`data_prep.adjust`); without, prices are stored as delivered with ``factor = 1``.

Incremental update
------------------
When ``--out`` already holds a store, new sessions are appended: feature files are extended
(history bytes unchanged), the calendar and instrument spans are extended. Before anything is
written, every new bar that falls inside the stored range is compared with the stored float32
value: any difference (including a value where the store has NaN) refuses the whole update
with :class:`StoreConflict`. Data starting before the store's first session is refused too
(history is not rewritten).

Crash safety
------------
A store is published as a whole (:func:`data_prep.qlib_store.staged_write`): a new store or an
update is written into ``DIR.staging-<pid>`` (an update: a hard-linked copy of the store whose
changed files are written as new files), the commit marker ``DIR/COMMITTED`` is written last,
and the directories are swapped with two renames. Killed at any point, the ingest leaves the
previous store (or none) with the staging directory beside it; readers (``rolling-calib data
info``, :func:`data_prep.init_qlib`, an experiment's ``qlib_init``) refuse the store, naming it,
and re-running the same command clears the leftovers and writes the same bytes an
uninterrupted run writes (``meta.json`` differs only in its time stamp). Stores left broken by
an interrupted ingest of an older version are completed by re-running it where that is
well defined (see ``_stored_calendar``): a new store without instrument files is written anew,
an append whose calendar already runs past every instrument is redone from the calendar
length ``meta.json`` records; anything else is refused.

Memory
------
The ingest holds one symbol's rows at a time, never the whole delivery. Every file is read once
(a Parquet file whole row groups at a time, about a million rows; a CSV file whole) and its
normalised rows are parked by symbol in a spill directory (uncompressed Arrow IPC files under the
system temporary directory, ``TMPDIR``; removed when the ingest ends, whatever the outcome, and
by the next ingest when a killed one left it). Each symbol is then validated from its parts (with
the columns of every file, as if all rows were one frame) and its clean bars parked again; once
the report allows writing and the calendar is known, each symbol's feature files are written from
them, one symbol at a time. Peak memory is about one symbol's rows in validation plus the
calendar (0.6 GiB for 17 M minute bars of 25 symbols, 2012-2018, where holding every row took
2.4 GiB; ``bench/bench_data_ingest.py``), and the bytes written are those of validating every
row at once. The spill directory needs about the size of the data as read (roughly 60 bytes a
bar from typed Parquet columns, more with the CSV text kept for messages).

Example
-------
>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "ABC.csv").write_text("date,ToD,open,high,low,close,volume\n"
...     "2018-02-16,09:30:00,10,10.5,9.5,10.2,100\n2018-02-16,16:00:00,10.2,10.2,10.2,10.2,900\n")
>>> res = ingest([d / "ABC.csv"], d / "store", options=IngestOptions(mode="repair"))
>>> res.report.totals(), res.bars_written
({'closing_auction': 1, 'missing_minutes': 389}, 1)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl

from data_prep import qlib_store
from data_prep.adjust import apply_factor, factor_series, read_adjustments
from data_prep.ingest_report import IngestReport, write_report
from data_prep.symbols import check_symbol, safe_component
from data_prep.trading_calendar import session_minutes
from data_prep.trading_calendar import sessions as nyse_sessions
from data_prep.validate import (
    ERROR_KINDS,
    ISSUE_SCHEMA,
    KnownActions,
    inside_counts,
    interval_label,
    missing_minutes,
    session_table,
    timezone_hint,
    validate_symbol,
)
from data_prep.vendor import NY_TZ, ColumnMap, list_sources, read_vendor_file, stem_tag

__all__ = [
    "IngestOptions",
    "IngestResult",
    "IngestError",
    "StrictError",
    "ValidationFailed",
    "StoreConflict",
    "ingest",
    "write_report",
    "VWAP_RULE",
]

VWAP_RULE = "vwap = (high + low + close) / 3 (typical price) where the vendor gives none"
CLOSE_BAR_RULE = (
    "16:00 (13:00 on early closes) bars are closing-auction prints, not one-minute intervals: "
    "kind closing_auction, dropped by --repair"
)
_MODES = ("validate", "strict", "repair")
DAILY_RULE = "daily bars: one bar per NYSE session, stored at the session date (calendars/day.txt)"
#: Daily bars are validated as bars at the session's open (09:30): every session check passes
#: for a session date and flags any other date; this offset is removed before writing.
_DAY_OPEN = pl.duration(minutes=9 * 60 + 30)


class IngestError(ValueError):
    """Base class of ingest failures (a ValueError: the input is bad)."""


class StrictError(IngestError):
    """First problem found in ``--strict`` mode.

    Attributes: ``file, line, field, expected, found, kind`` and ``hint`` (a time-zone hint for
    the file, or None; appended to the message).
    """

    def __init__(self, *, file: str, line: int, field: str, expected: str, found: str, kind: str,
                 hint: str | None = None):
        self.file, self.line, self.field, self.expected, self.found, self.kind = file, line, field, expected, found, kind
        self.hint = hint
        super().__init__(f"{file}: line {line}: field '{field}': expected {expected}, found {found} [{kind}]"
                         + (f"\nhint: {hint}" if hint else ""))


class ValidationFailed(IngestError):
    """Errors found in the default (validate) mode; ``report`` lists them all."""

    def __init__(self, report: IngestReport):
        self.report = report
        super().__init__(
            f"{report.error_count():,} problems found; nothing written "
            "(use --repair to fix what is safe, --strict to stop at the first, --report FILE for every row)"
        )


class StoreConflict(IngestError):
    """An incremental update disagrees with what the store holds; nothing was written."""


#: Upper bounds of the ingest options (a run of unchanged closes a year long; a price ratio of 1000x).
MAX_STALE_MINUTES = 100_000
MAX_RATIO = 1000.0

@dataclass(frozen=True)
class IngestOptions:
    """Options of :func:`ingest` (the CLI's flags).

    Attributes
    ----------
    mode : {"validate", "strict", "repair"}
    tz : str
        Zone of naive timestamps in the files.
    start, end : str or None
        Store calendar range (default: the clean data's first and last session).
    columns : ColumnMap
    symbol : str or None
        Symbol of single-symbol files (default: file stem).
    adjustments : str or None
        Corporate-actions CSV.
    universe : str or None
        Extra universe file name for the ingested symbols.
    stale_minutes : int
        Minimum unchanged-close run reported as ``stale_prices``.
    max_jump : float
        A bar's open beyond ``max_jump`` x either way of the previous close is a ``price_jump``
        warning (default 1.5: ``|log return| > ln 1.5``, sized for liquid US stocks).
    max_spike : float
        A price beyond ``max_spike`` x either way of both neighbouring bars' closes is a
        ``price_spike`` error (default 3).
    """

    mode: str = "validate"
    tz: str = NY_TZ
    start: str | None = None
    end: str | None = None
    columns: ColumnMap = field(default_factory=ColumnMap)
    symbol: str | None = None
    adjustments: str | None = None
    universe: str | None = None
    stale_minutes: int = 30
    max_jump: float = 1.5
    max_spike: float = 3.0
    freq: str | None = None

    def __post_init__(self):
        if self.freq not in (None, *qlib_store.FREQS):
            raise ValueError(f"freq: expected one of {', '.join(qlib_store.FREQS)} (or none: detected from the "
                             f"files), found {self.freq!r}")
        if self.mode not in _MODES:
            raise ValueError(f"mode: expected one of {_MODES}, found {self.mode!r}")
        if not 2 <= self.stale_minutes <= MAX_STALE_MINUTES:
            raise ValueError(f"stale_minutes: expected an integer in [2, {MAX_STALE_MINUTES}] (a year of minute bars), "
                             f"found {self.stale_minutes}")
        for name in ("max_jump", "max_spike"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 1 < value <= MAX_RATIO):
                raise ValueError(f"{name}: expected a ratio > 1 and at most {MAX_RATIO:g} (e.g. 1.5), found {value!r}")
        if self.symbol is not None:
            check_symbol(self.symbol.strip().upper(), where="--symbol", shown=self.symbol)
        if self.universe is not None:
            safe_component(self.universe, what="--universe")
        try:
            pd.Timestamp("2018-01-02").tz_localize(self.tz)
        except Exception as exc:  # noqa: BLE001 - re-raised with context
            raise ValueError(f"tz: expected an IANA zone like America/New_York, found {self.tz!r}") from exc

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> IngestOptions:
        """Build from the ``rolling-calib data ingest`` arguments."""
        mode = "strict" if args.strict else "repair" if args.repair else "validate"
        cols = ColumnMap(
            symbol=args.symbol_col, date=args.date_col, time=args.time_col, datetime=args.datetime_col,
            epoch_ms=args.epoch_ms_col, open=args.open_col, high=args.high_col, low=args.low_col,
            close=args.close_col, volume=args.volume_col, vwap=args.vwap_col,
        )
        return cls(mode=mode, tz=args.tz, start=args.start, end=args.end, columns=cols, symbol=args.symbol,
                   adjustments=args.adjustments, universe=args.universe,
                   stale_minutes=args.stale_minutes, max_jump=getattr(args, "max_jump", 1.5),
                   max_spike=getattr(args, "max_spike", 3.0), freq=getattr(args, "freq", None))


@dataclass
class IngestResult:
    """What an ingest wrote."""

    store: Path
    report: IngestReport
    appended: bool
    new_sessions: int
    bars_written: int
    seconds: float
    freq: str = "1min"
    already_stored: int = 0  # bars of the input already in the store with the same values (kept, not rewritten)

    def summary(self) -> dict:
        """JSON-ready summary."""
        return {
            "store": str(self.store),
            "freq": self.freq,
            "mode": self.report.mode,
            "appended": self.appended,
            "new_sessions": self.new_sessions,
            "bars_written": self.bars_written,
            "bars_already_stored": self.already_stored,
            "rows_read": sum(self.report.rows_in.values()),
            "rows_dropped": sum(self.report.rows_dropped().values()),
            "rows_changed": sum(self.report.rows_changed().values()),
            "totals": self.report.totals(),
            "seconds": round(self.seconds, 3),
        }

    def summary_line(self) -> str:
        """One line for the terminal."""
        kind = "daily bars" if self.freq == "day" else "bars"
        stored = f"; {self.already_stored:,} already stored with the same values" if self.already_stored else ""
        what = f"appended {self.bars_written:,} {kind} ({self.new_sessions} new sessions{stored})" if self.appended else (
            f"wrote {self.bars_written:,} {kind} ({self.new_sessions} sessions)")
        return f"{what} to {self.store} in {self.seconds:.1f} s"


# ---------------------------------------------------------------------------- reading
#: Rows of a Parquet file read at a time (whole row groups); a CSV file is read whole.
_BATCH_ROWS = 1 << 20
#: First times of a file kept for its time-zone hint (:func:`data_prep.validate.timezone_hint`).
_HINT_SAMPLE = 20_000


#: Name of an ingest's spill directory in the system temporary directory: ``<prefix><pid>-<random>``.
_SPILL_PREFIX = "rolling-calib-ingest-"


def _spill_directory() -> tempfile.TemporaryDirectory:
    """A new spill directory (removed when the ingest ends), after removing those of killed ingests."""
    for old in Path(tempfile.gettempdir()).glob(f"{_SPILL_PREFIX}*-*"):
        pid = old.name[len(_SPILL_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not qlib_store._pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return tempfile.TemporaryDirectory(prefix=f"{_SPILL_PREFIX}{os.getpid()}-")


class _Spill:
    """Frames parked on disk by key between the passes of an ingest (uncompressed Arrow IPC files).

    Every file is read once and its rows parked by symbol; each symbol is then validated, and
    later written, from its own parts: memory holds one batch or one symbol, never every row.
    """

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.parts: dict[str, list[tuple[Path, tuple[pl.Expr, ...]]]] = {}
        self._count = 0

    def put(self, key: str, frame: pl.DataFrame, *constants: pl.Expr) -> None:
        """Park ``frame`` under ``key``; ``constants`` (literal columns left out of the file) are put back when read.

        A write that fails (the temporary directory's disk full ...) raises
        :class:`data_prep.qlib_store.WriteFailed` naming the file, its free space and ``TMPDIR``.
        """
        path = qlib_store.store_file(self.root, f"{self._count:07d}.arrow")
        self._count += 1
        try:
            frame.write_ipc(path, compression="uncompressed")
        except OSError as exc:
            path.unlink(missing_ok=True)
            problem = qlib_store.describe_os_error(
                exc, path, nbytes=frame.estimated_size(),
                fix=(f"set TMPDIR to a directory on a disk with room for about the size of the data as read "
                     f"(the ingest's spill files; now {tempfile.gettempdir()})"))
            raise qlib_store.WriteFailed(problem, path=path) from exc
        self.parts.setdefault(key, []).append((path, constants))

    def symbols(self) -> list[str]:
        return sorted(self.parts)

    def get(self, key: str) -> list[pl.DataFrame]:
        """The frames parked under ``key``, in the order they were put."""
        return [pl.read_ipc(path).with_columns(*constants) for path, constants in self.parts.get(key, [])]

    def take(self, key: str) -> list[pl.DataFrame]:
        """:meth:`get`, then forget ``key`` and remove its files."""
        frames = self.get(key)
        for path, _ in self.parts.pop(key, []):
            with contextlib.suppress(OSError):  # still mapped on some systems: removed with the directory
                path.unlink()
        return frames


@dataclass
class _FileHint:
    """A file's counts for its time-zone hint, summed over its batches."""

    bars: int = 0
    inside: int = 0
    first: list = field(default_factory=list)  # its first non-null times, in line order
    kept: int = 0

    def add(self, df: pl.DataFrame) -> None:
        for n, k in inside_counts(df).values():
            self.bars, self.inside = self.bars + n, self.inside + k
        if self.kept < _HINT_SAMPLE:
            ts = df.get_column("ts").drop_nulls().head(_HINT_SAMPLE - self.kept)
            self.first.append(ts)
            self.kept += ts.len()

    def hint(self, info, tz: str) -> str | None:
        if not self.bars:
            return None
        return timezone_hint(pl.concat(self.first), self.bars, self.inside, info.path, tz=tz, zoned=info.zoned,
                             sample=_HINT_SAMPLE)


@dataclass
class _Read:
    """What the reading pass found; the rows themselves are parked by symbol in a :class:`_Spill`."""

    infos: list = field(default_factory=list)
    columns: pl.DataFrame | None = None  # no rows: the columns of every file, as concatenating them gives
    ts_range: list = field(default_factory=lambda: [None, None])  # first and last time read
    hints: dict = field(default_factory=dict)  # time-zone hint by file index

    def add_batch(self, df: pl.DataFrame, hint: _FileHint, spill: _Spill) -> None:
        ts = df.get_column("ts")
        lo, hi = ts.min(), ts.max()
        if lo is not None:
            self.ts_range = [lo if self.ts_range[0] is None else min(lo, self.ts_range[0]),
                             hi if self.ts_range[1] is None else max(hi, self.ts_range[1])]
        hint.add(df)
        if not df.height:
            return
        file_index = pl.lit(df.get_column("_file")[0], dtype=pl.Int32).alias("_file")
        for (sym,), part in _split_by_symbol(df.with_columns(pl.col("symbol").fill_null(""))).items():
            spill.put(sym, part.drop("_file", "symbol"), file_index, pl.lit(sym, dtype=pl.String).alias("symbol"))


def _read_all(files: Sequence[Path], options: IngestOptions, progress: bool, spill: _Spill) -> _Read:
    """Read every file in batches, parking its rows by symbol in ``spill``."""
    from tqdm.auto import tqdm

    read = _Read()
    for i, f in enumerate(tqdm(files, desc="read", unit="file", disable=not progress)):
        hint = _FileHint()
        head, info = read_vendor_file(f, file_index=i, columns=options.columns, tz=options.tz, symbol=options.symbol,
                                      freq=options.freq, sink=lambda df, h=hint: read.add_batch(df, h, spill),
                                      batch_rows=_BATCH_ROWS)
        read.infos.append(info)
        read.columns = head if read.columns is None else pl.concat([read.columns, head], how="diagonal_relaxed")
        text = hint.hint(info, options.tz) if info.freq != "day" else None
        if text is not None:
            read.hints[i] = text
    return read


def _read_and_validate(files: Sequence[Path], options: IngestOptions, progress: bool, spill_dir: Path,
                       events: dict | None = None):
    """``(checked symbols, file infos, freq)``; the rows go through spill files under ``spill_dir``.

    ``events``: the ``--adjustments`` events by symbol (a price jump they explain is not reported).
    """
    raw = _Spill(spill_dir / "read")
    read = _read_all(files, options, progress, raw)
    freq = _one_freq(read.infos)
    if not sum(i.rows for i in read.infos):
        what = "daily bars" if freq == "day" else "minute bars"
        raise IngestError(f"{', '.join(str(f) for f in files)}: expected {what}, found no data rows")
    checked = _validate_all(read, raw, _Spill(spill_dir / "clean"), options, progress, daily=freq == "day",
                            events=events or {})
    return checked, read.infos, freq


def _one_freq(infos) -> str:
    """The frequency every file holds; files of both frequencies in one ingest are refused."""
    freqs = {i.freq for i in infos}
    if len(freqs) > 1:
        day = next(i.path for i in infos if i.freq == "day")
        minute = next(i.path for i in infos if i.freq != "day")
        raise IngestError(f"expected files of one frequency, found daily bars in {day} (a date column only) and "
                          f"minute bars in {minute}; ingest them into separate stores, or pass --freq")
    return freqs.pop() if freqs else "1min"


def _daily_texts(issues: pl.DataFrame) -> pl.DataFrame:
    """Issue texts of daily bars: session dates, not the 09:30 they were validated at."""
    if not issues.height:
        return issues
    date_time = r"(\d{4}-\d{2}-\d{2})[ T]09:30(:00)?"
    return issues.with_columns(
        pl.when(pl.col("kind") == "bad_timestamp").then(pl.col("found"))  # the file's own text
        .otherwise(pl.col("found").str.replace_all(date_time, "$1")).alias("found"),
        pl.when(pl.col("kind") == "bad_timestamp").then(pl.lit("a date like 2018-02-16 (daily bars: no time of day)"))
        .otherwise(pl.col("expected").str.replace_all(date_time, "$1").str.replace_all("per minute", "per session")
                   .str.replace_all("between consecutive bars", "between consecutive sessions"))
        .alias("expected"),
    )


@dataclass
class _Checked:
    """The validation of every symbol: issues and counts here, the clean bars parked in ``clean``."""

    clean: _Spill
    issues: list = field(default_factory=list)  # per symbol with any, in symbol order
    rows_in: dict = field(default_factory=dict)
    ts_range: list = field(default_factory=lambda: [None, None])  # first and last clean bar (before --start/--end)
    outside: dict = field(default_factory=dict)  # bars outside --start/--end by symbol (_file, _line, ts)

    def add(self, sym: str, res, options: IngestOptions, daily: bool) -> None:
        issues = _daily_texts(res.issues) if daily else res.issues
        if issues.height:
            self.issues.append(issues)
        self.rows_in[sym] = res.rows_in
        if not sym:  # rows without a symbol: reported, never written
            return
        clean = res.clean
        if clean.height:
            ts = clean.get_column("ts")
            lo, hi = ts.min(), ts.max()
            self.ts_range = [lo if self.ts_range[0] is None else min(lo, self.ts_range[0]),
                             hi if self.ts_range[1] is None else max(hi, self.ts_range[1])]
        clean, outside = _range_split(clean, options)
        if outside.height:
            self.outside[sym] = outside
        if clean.height:
            self.clean.put(sym, clean.drop("_file", "_line"))  # what is written: ts and the values


def _validate_all(read: _Read, raw: _Spill, clean: _Spill, options: IngestOptions, progress: bool,
                  daily: bool = False, events: dict | None = None) -> _Checked:
    """Validate symbol by symbol from the rows parked in ``raw``; the clean bars are parked in ``clean``.

    Also sets each file's time-zone hint in ``read.infos`` (replaced in place) when most of its
    bars fall outside the session, and refuses bars that are not one-minute bars
    (:func:`_refuse_intervals`).
    """
    from tqdm.auto import tqdm

    lo, hi = read.ts_range
    if lo is not None:
        sessions = session_table(lo.date(), hi.date())
    else:
        sessions = pl.DataFrame(schema={"day": pl.Int32, "open_min": pl.Int32, "close_min": pl.Int32})
    infos = read.infos
    if not daily:
        for k, hint in read.hints.items():
            infos[k] = dataclasses.replace(infos[k], hint=hint)
    files = [i.path for i in infos]
    time_fields = [i.time_field for i in infos]
    checked, intervals = _Checked(clean), {}
    for sym in tqdm(raw.symbols(), desc="validate", unit="symbol", disable=not progress):
        frame = pl.concat([read.columns, *raw.take(sym)], how="diagonal_relaxed")  # every file's columns
        if daily:
            frame = frame.with_columns(pl.col("ts") + _DAY_OPEN)
        res = validate_symbol(frame, sym, files=files, time_field=time_fields,
                              stale_minutes=options.stale_minutes, sessions=sessions,
                              max_jump=options.max_jump, max_spike=options.max_spike,
                              actions=KnownActions(options.adjustments, tuple((events or {}).get(sym, ())))
                              if options.adjustments else None)
        del frame
        intervals[sym] = res.intervals
        checked.add(sym, res, options, daily)
        del res
    if not daily:
        _refuse_intervals(intervals, files)
    return checked


def _refuse_intervals(intervals: dict, files: Sequence[str]) -> None:
    """Bars that are not one-minute bars (5-minute, hourly, 30-second ...) are refused in every mode.

    Stored as one-minute bars they would pass as one-minute data with the minutes between missing.
    """
    bad = [(fi, sec, n, sym) for sym, found in intervals.items() for fi, sec, n in found]
    if not bad:
        return
    fi, sec, n, sym = bad[0]
    label = interval_label(sec)
    if sec == 86400:
        how = "one bar per session"
    else:
        spacing = f"{sec // 60} minutes" if sec % 60 == 0 else f"{sec} seconds"
        how = f"the modal spacing of consecutive bars within a session is {spacing}"
    more = f"; {len(bad) - 1} more file/symbol pair(s) like it" if len(bad) > 1 else ""
    raise IngestError(
        f"{files[fi]}: expected one-minute bars (the store's frequency), found {label} bars ({n:,} bars of {sym}: "
        f"{how}, {'coarser' if sec > 60 else 'finer'} than one minute{more}). Nothing written: {_interval_fix(sec)}"
    )


def _interval_fix(seconds: int) -> str:
    """What to do with bars of another interval than one minute (coarser bars cannot become minute bars).

    >>> _interval_fix(300)[:62]
    'a one-minute store needs one-minute bars, and 5-minute bars ca'
    """
    if seconds == 86400:
        return "ingest daily bars into a daily store of their own (--freq day), or leave the file out"
    if seconds > 60:
        return (f"a one-minute store needs one-minute bars, and {interval_label(seconds)} bars cannot be turned into "
                "them (the prices inside each bar are gone); ingest the vendor's one-minute files, or leave the file out")
    return ("aggregate them to one-minute bars first (open of the first, highest high, lowest low, close of the last, "
            "summed volume), or leave the file out")


def _split_by_symbol(data: pl.DataFrame) -> dict[tuple[str], pl.DataFrame]:
    """Rows of each symbol, in file order. Zero-copy slices when each symbol is one contiguous
    block (one file per symbol, or a long file grouped by symbol); ``partition_by`` otherwise."""
    runs = data.get_column("symbol").rle()
    values = runs.struct.field("value")
    if values.n_unique() == len(values):
        lengths = runs.struct.field("len").to_numpy()
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        return {(v,): data.slice(int(o), int(n)) for v, o, n in zip(values.to_list(), offsets, lengths)}
    return data.partition_by("symbol", as_dict=True, maintain_order=True)


def _first_error(issues: pl.DataFrame) -> pl.DataFrame:
    errs = issues.filter(pl.col("kind").is_in(list(ERROR_KINDS)) & ~pl.col("first_copy"))
    return errs.sort(["_file", "_line"]).head(1)


def _range_split(clean: pl.DataFrame, options: IngestOptions) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(bars inside --start/--end, the others' _file, _line, ts)``; a bound not given does not cut."""
    if options.start is None and options.end is None:
        return clean, clean.clear().select("_file", "_line", "ts")
    day = pl.col("ts").dt.date()
    outside = pl.lit(False)
    if options.start is not None:
        outside = outside | (day < pd.Timestamp(options.start).date())
    if options.end is not None:
        outside = outside | (day > pd.Timestamp(options.end).date())
    return clean.filter(~outside), clean.filter(outside).select("_file", "_line", "ts")


def _range_issues(bad: pl.DataFrame, sym: str, lo, hi) -> pl.DataFrame:
    """Issues of the bars outside the requested range ``lo`` .. ``hi`` (dates)."""
    return bad.select(
        pl.col("_file").cast(pl.Int32), pl.col("_line").cast(pl.Int64), pl.lit(sym).alias("symbol"),
        pl.lit("outside_requested_range").alias("kind"), pl.lit("time").alias("field"),
        pl.lit(f"a bar between {lo} and {hi}").alias("expected"),
        pl.col("ts").dt.strftime("%Y-%m-%d %H:%M:%S").alias("found"), pl.lit("dropped").alias("action"),
        pl.lit(False).alias("first_copy"), pl.lit(None, dtype=pl.String).alias("new"),
    )


# ---------------------------------------------------------------------------- main entry
def ingest(
    sources: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    *,
    options: IngestOptions = IngestOptions(),
    progress: bool = False,
) -> IngestResult:
    """Validate vendor files and write (or extend) a Qlib minute store.

    Parameters
    ----------
    sources : sequence of path
        Files and/or directories.
    out_dir : path
        Store directory; an existing store is extended (incremental update).
    options : IngestOptions
    progress : bool
        tqdm bars over files and symbols.

    Returns
    -------
    IngestResult

    Raises
    ------
    StrictError
        ``mode="strict"`` and a problem was found.
    ValidationFailed
        ``mode="validate"`` and error-kind anomalies were found.
    StoreConflict
        The update overlaps the store with different values, or starts before it.
    data_prep.qlib_store.StoreNotCommittedError
        ``out_dir`` holds a store left broken by an older version that cannot be completed in
        place (an interrupted write of this version is always completed by re-running it).
    data_prep.qlib_store.StoreBusyError
        Another live process is writing ``out_dir``.
    IngestError
        A file could not be written or another OS error (disk full, quota, permissions, a
        read-only file system): one line naming the file, the free space of its file system and
        the fix; nothing is published (the store is as it was).
    ValueError
        Unreadable files, missing columns, bad options (naming the file and what was expected).
    """
    t0 = time.perf_counter()
    store = Path(out_dir)
    files = list_sources(sources)
    existed = store.exists()
    try:
        return _ingest(files, store, options, progress, t0)
    except (qlib_store.WriteFailed, OSError) as exc:
        raise IngestError(_os_failure(exc, store, existed)) from exc


def _os_failure(exc: OSError | qlib_store.WriteFailed, store: Path, existed: bool) -> str:
    """One line for a disk full, quota, permission or other OS error during an ingest: file, free space, fix.

    Whatever failed, nothing was published: a failed write leaves the store as it was (the
    staging directory is removed, :func:`data_prep.qlib_store.staged_write`).
    """
    state = f"{store} is unchanged" if existed else f"no store was created at {store}"
    if isinstance(exc, qlib_store.WriteFailed):
        problem = exc.problem
    else:
        problem = qlib_store.describe_os_error(exc, exc.filename or store, verb="failed",
                                               fix="free space or fix the permissions there, or ingest into "
                                                   "another --out directory")
    return f"{problem.head}; nothing published ({state}): {problem.fix}"


def _ingest(files: list[Path], store: Path, options: IngestOptions, progress: bool, t0: float) -> IngestResult:
    """:func:`ingest` once the sources are listed (OS errors are translated by the caller)."""
    events = read_adjustments(options.adjustments) if options.adjustments else {}
    with _spill_directory() as spill_dir:
        checked, infos, freq = _read_and_validate(files, options, progress, Path(spill_dir), events)
        issues, rows_in = checked.issues, checked.rows_in
        lo_day, hi_day = _requested_range(checked, options, issues)
        if freq == "day":
            issues = [_daily_texts(i) for i in issues]
        report = _new_report(options, infos, issues, rows_in, freq)
        _stop_on_errors(report, options, infos)
        if lo_day is None:
            raise IngestError("every row was dropped; nothing to write (see the report)")

        prepared = _Prepared(checked.clean, events, daily=freq == "day")
        calendar = _calendar(lo_day, hi_day, freq)
        written, appended, new_sessions, already = _write_store(store, calendar, prepared, options, events, report,
                                                                infos, freq)
    return IngestResult(store=store, report=report, appended=appended, new_sessions=new_sessions,
                        bars_written=sum(written.values()), seconds=time.perf_counter() - t0, freq=freq,
                        already_stored=already)


def _calendar(lo_day, hi_day, freq: str) -> pd.DatetimeIndex:
    """The store calendar: the NYSE's minutes (``1min``) or session dates (``day``) from ``lo_day`` to ``hi_day``."""
    if freq == "day":
        return pd.DatetimeIndex(nyse_sessions(lo_day, hi_day).dates.astype("datetime64[ns]"), name="datetime")
    return session_minutes(lo_day, hi_day)


def _requested_range(checked: _Checked, options: IngestOptions, issues: list[pl.DataFrame]):
    """First and last calendar day: the clean data's, or ``--start``/``--end`` (``None`` when nothing is left).

    With ``--start``/``--end``, the bars outside (left out of the clean bars by :func:`_range_split`)
    are reported in ``issues`` (updated in place).
    """
    lo, hi = checked.ts_range
    lo_day = lo.date() if lo is not None else None
    hi_day = hi.date() if hi is not None else None
    if options.start is not None:
        lo_day = pd.Timestamp(options.start).date()
    if options.end is not None:
        hi_day = pd.Timestamp(options.end).date()
    for sym, bad in checked.outside.items():
        issues.append(_range_issues(bad, sym, lo_day, hi_day).cast(ISSUE_SCHEMA))
    return lo_day, hi_day


def _new_report(options: IngestOptions, infos, issues: list[pl.DataFrame], rows_in: dict[str, int],
                freq: str = "1min") -> IngestReport:
    """The report of every anomaly found (written counts are filled in by :func:`_finish_report`)."""
    return IngestReport(
        mode=options.mode,
        files=[{"path": i.path, "rows": i.rows, "symbols": list(i.symbols)} for i in infos],
        issues=pl.concat(issues) if issues else pl.DataFrame(schema=ISSUE_SCHEMA),
        rows_in=rows_in,
        rows_out={},
        notes=[DAILY_RULE if freq == "day" else CLOSE_BAR_RULE, VWAP_RULE if not all(i.has_vwap for i in infos) else "vwap from the vendor; " + VWAP_RULE,
               "adjusted with " + options.adjustments if options.adjustments else "prices as delivered, factor = 1"],
        hints=[i.hint for i in infos if i.hint] + _stem_hints(infos),
        symbols_from_names=_symbols_from_names(infos, options.columns.symbol),
    )


def _named_files(infos) -> list[tuple[str, str]]:
    """``(file name, symbol)`` of the files whose symbol is their file name."""
    return [(Path(i.path).name, i.symbols[0]) for i in infos if i.symbol_from == "file name" and i.symbols]


def _symbols_from_names(infos, column: str, shown: int = 5) -> list[str]:
    """One line naming the symbols taken from file names (none when every symbol came from a column or --symbol)."""
    named = _named_files(infos)
    if not named:
        return []
    listed = ", ".join(f"{name} -> {sym}" for name, sym in named[:shown])
    more = f" and {len(named) - shown} more" if len(named) > shown else ""
    return [f"symbols taken from file names (no '{column}' column, no --symbol) for {len(named)} file(s): {listed}{more}"]


def _stem_hints(infos) -> list[str]:
    """A hint per file whose name-taken symbol ends in an interval or date tag (``ACN_1MIN``): pass --symbol."""
    out = []
    for name, sym in _named_files(infos):
        tag = stem_tag(sym)
        if tag:
            out.append(f"symbol {sym} taken from the file name {name}: {tag!r} looks like an interval or date tag, "
                       f"not part of a ticker; pass --symbol {sym[: -len(tag)]} (one file at a time) or rename the file")
    return out


def _stop_on_errors(report: IngestReport, options: IngestOptions, infos) -> None:
    """``--strict``: raise :class:`StrictError` at the first error; default mode: :class:`ValidationFailed`."""
    if options.mode == "strict":
        first = _first_error(report.issues)
        if first.height:
            r = first.row(0, named=True)
            raise StrictError(file=infos[r["_file"]].path, line=r["_line"], field=r["field"], expected=r["expected"],
                              found=r["found"], kind=r["kind"], hint=infos[r["_file"]].hint)
    elif options.mode == "validate" and report.error_count():
        raise ValidationFailed(report)


class _Prepared:
    """The bars to write, ``(symbol, frame)`` in symbol order, prepared from the spill when iterated.

    vwap filled with the typical price, back-adjusted with ``factor``; daily bars moved back from
    the session open the checks ran at to the session date. Iterable more than once (an update is
    checked, then written); one symbol's bars in memory at a time.
    """

    def __init__(self, clean: _Spill, events: dict, daily: bool = False):
        self.clean, self.events, self.daily = clean, events, daily

    def __iter__(self):
        for sym in self.clean.symbols():
            frame = _prepare_frame(pl.concat(self.clean.get(sym)), sym, self.events.get(sym))
            if self.daily:
                frame = frame.with_columns(pl.col("ts") - _DAY_OPEN)
            yield sym, frame


def _prepare_frame(frame: pl.DataFrame, sym: str, events) -> pl.DataFrame:
    """One symbol's bars to write: vwap filled with the typical price, back-adjusted with ``factor``."""
    if "vwap" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias("vwap"))
    frame = frame.with_columns(
        pl.col("vwap").fill_nan(None).fill_null((pl.col("high") + pl.col("low") + pl.col("close")) / 3.0)
    )
    if events:
        ts_np = frame.get_column("ts").to_numpy().astype("datetime64[m]")
        factor = factor_series(ts_np, frame.get_column("close").to_numpy(), events, symbol=sym)
        return apply_factor(frame, factor)
    return frame.with_columns(pl.lit(1.0).alias("factor"))


def _finish_report(report: IngestReport, written: dict[str, int], calendar: pd.DatetimeIndex,
                   missing: dict[str, dict], freq: str = "1min") -> None:
    """Bars written, missing minutes per symbol and session (counted on the store calendar as each
    symbol was placed: :func:`_missing_on`), the calendar written."""
    report.rows_out = written
    if freq != "day":  # daily: whole missing sessions are the missing_session warnings
        report.missing_minutes = missing
    report.calendar = {"first": str(calendar[0]) if len(calendar) else None,
                       "last": str(calendar[-1]) if len(calendar) else None,
                       "sessions": int(len(np.unique(calendar.normalize()))), "bars": int(len(calendar))}


# ---------------------------------------------------------------------------- writing
class _CalendarIndex:
    """O(1) minute -> calendar position lookup (a dense table over the calendar's minute span)."""

    def __init__(self, calendar_m: np.ndarray):
        self.calendar = calendar_m
        self.base = calendar_m[0]
        offsets = (calendar_m - self.base).astype(np.int64)
        self.table = np.full(int(offsets[-1]) + 1, -1, dtype=np.int32)
        self.table[offsets] = np.arange(len(calendar_m), dtype=np.int32)

    def locate(self, ts_m: np.ndarray) -> np.ndarray:
        off = (ts_m - self.base).astype(np.int64)
        ok = (off >= 0) & (off < len(self.table))
        idx = np.full(len(ts_m), -1, dtype=np.int64)
        idx[ok] = self.table[off[ok]]
        return idx


def _values_on(calendar: _CalendarIndex, frame: pl.DataFrame) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    ts = frame.get_column("ts").to_numpy().astype("datetime64[m]")
    idx = calendar.locate(ts)
    if np.any(idx < 0):
        raise IngestError(f"internal: bar {ts[idx < 0][0]} is not on the store calendar")  # validated away before
    cols = {f: frame.get_column(f).to_numpy() for f in qlib_store.FIELDS}
    return idx, cols


def _dense(idx: np.ndarray, cols: dict[str, np.ndarray], first: int, last: int) -> dict[str, np.ndarray]:
    out = {}
    for f, v in cols.items():
        arr = np.full(last - first + 1, np.nan, dtype="<f4")
        arr[idx - first] = v
        out[f] = arr
    return out


def _write_store(store: Path, calendar: pd.DatetimeIndex, prepared: _Prepared, options, events,
                 report: IngestReport, infos, freq: str = "1min"):
    """Write a new store or extend the stored one, published as a whole; ``(written, appended, new sessions)``.

    Everything is written into a staging copy (:func:`data_prep.qlib_store.staged_write`), the
    report is completed and ``meta.json`` written there, then the commit marker, then the copy is
    swapped into place. A kill at any point leaves the previous store (or none) and the staging
    directory: readers refuse the store until the same command is run again, which clears the
    leftovers and redoes the whole write (same bytes as an uninterrupted run).
    """
    old_cal = _stored_calendar(store, freq)
    plan = _plan_append(store, old_cal, calendar, prepared, events, freq) if len(old_cal) else None
    with qlib_store.staged_write(store, keep=plan is not None, writer="data_prep.ingest") as out:
        if plan is None:
            written, new_sessions, store_cal, missing = _write_fresh(out, calendar, prepared, options, freq)
        else:
            written, new_sessions, store_cal, missing = _append(out, plan, options, freq)
        _finish_report(report, written, calendar, missing, freq)
        _update_meta(out, report, plan is not None, options, infos, store_cal, freq)
    return written, plan is not None, new_sessions, (plan.already if plan is not None else 0)


def _stored_calendar(store: Path, freq: str = "1min") -> pd.DatetimeIndex:
    """The calendar of the store to extend (empty: write a new store), after clearing interrupted writes.

    Leftovers of an interrupted write of this version are cleared first
    (:func:`data_prep.qlib_store.recover_interrupted`): the store is then the last committed one.
    A store without a valid commit marker (an older version's) is extended when consistent. Of
    the states an interrupted older ingest leaves, these are completed by re-running it:

    * calendar written, no instrument file and no ``meta.json`` (a new store): written anew;
    * calendar running past every instrument (an append killed after its calendar), with
      ``meta.json`` recording the calendar before it: the calendar is taken back to that length
      (feature values beyond it are dropped as leftovers) and the append redone;
    * only ``meta.json`` or a universe file behind ``instruments/all.txt``: extended (rewritten).

    Anything else is refused with :class:`data_prep.qlib_store.StoreNotCommittedError`.
    """
    qlib_store.recover_interrupted(store)
    stored = qlib_store.store_freq(store, default=None)
    if stored is not None and stored != freq:
        names = {"1min": "minute", "day": "daily"}
        raise StoreConflict(f"{store}: expected a {names[freq]} store (calendars/{freq}.txt) to extend with "
                            f"{names[freq]} bars, found a {names[stored]} store (calendars/{stored}.txt); "
                            "ingest into another directory")
    st = qlib_store.store_status(store)
    if not st.has_calendar:
        return pd.DatetimeIndex([], name="datetime")
    if st.committed or st.kind in ("meta_stale", "instruments_stale"):
        return qlib_store.read_calendar(store)
    if st.resume_bars is not None:
        return qlib_store.read_calendar(store)[: st.resume_bars]
    if st.kind == "no_instruments" and not st.has_meta:
        return pd.DatetimeIndex([], name="datetime")
    raise qlib_store.StoreNotCommittedError(
        f"{st.path}: the store was not completely written ({st.problem}) and cannot be completed in place; "
        "remove it and ingest every delivery again"
    )


def _write_fresh(store: Path, calendar: pd.DatetimeIndex, prepared: _Prepared, options, freq: str = "1min"):
    """Write every symbol (one at a time), the calendar, the instruments; ``(written, sessions, calendar, missing)``."""
    cal_m = calendar.to_numpy().astype("datetime64[m]")
    cix = _CalendarIndex(cal_m)
    store.mkdir(parents=True, exist_ok=True)
    spans, written, missing = {}, {}, {}
    for sym, frame in prepared:
        idx, cols = _values_on(cix, frame)
        del frame
        missing[sym] = _missing_on(cal_m, idx, freq)
        first, last = int(idx[0]), int(idx[-1])
        qlib_store.write_symbol(store, sym, first, _dense(idx, cols, first, last), freq)
        spans[sym] = (calendar[first], calendar[last])
        written[sym] = len(idx)
    qlib_store.write_calendar(store, calendar, freq)
    qlib_store._fault_point("ingest:calendar_written")
    _write_instruments(store, spans, options, freq)
    return written, int(len(np.unique(calendar.normalize()))), calendar, missing


def _missing_on(cal_m: np.ndarray, idx: np.ndarray, freq: str) -> dict | None:
    """Missing minutes per session of one symbol placed at ``idx`` on the store calendar (None for daily bars)."""
    return None if freq == "day" else missing_minutes(None, cal_m, index=idx)


def _write_instruments(store: Path, spans: dict, options, freq: str = "1min") -> None:
    from data_prep.synthetic import DEFAULT_SYMBOLS

    spans = dict(sorted(spans.items()))
    qlib_store.write_instruments(store, "all", spans, freq)
    qlib_store.write_instruments(store, qlib_store.UNIVERSE_NAME,
                                 {s: v for s, v in spans.items() if s in DEFAULT_SYMBOLS}, freq)
    if options.universe:
        qlib_store.write_instruments(store, options.universe, {s: v for s, v in spans.items()}, freq)


@dataclass
class _AppendPlan:
    """An update checked against the stored history (nothing written yet)."""

    full: pd.DatetimeIndex
    n_old: int
    old_spans: dict
    starts: dict  # stored start index by symbol (None: new to the store)
    missing: dict
    prepared: _Prepared
    already: int = 0  # bars of the update already stored with the same values (a re-ingest)


def _plan_append(store: Path, old_cal: pd.DatetimeIndex, calendar: pd.DatetimeIndex, prepared, events,
                 freq: str = "1min") -> _AppendPlan:
    """Check an update against the store (reads only): :class:`StoreConflict` on any disagreement."""
    full = _extended_calendar(store, old_cal, calendar, freq)
    cal_m = full.to_numpy().astype("datetime64[m]")
    cix = _CalendarIndex(cal_m)
    n_old = len(old_cal)
    old_spans = qlib_store.read_instruments(store, "all")
    conflicts: list[str] = []
    starts, missing, already = {}, {}, 0
    for sym, frame in prepared:
        idx, cols = _values_on(cix, frame)
        del frame
        already += int(np.count_nonzero(idx < n_old)) if qlib_store.feature_path(store, sym, "close").exists() else 0
        missing[sym] = _missing_on(cal_m, idx, freq)
        if sym in old_spans and events.get(sym):
            conflicts += _late_actions(sym, events[sym], old_cal[-1].normalize())
        start = None
        if qlib_store.feature_path(store, sym, "close").exists():
            start, _ = qlib_store.read_feature(store, sym, "close")
            conflicts += _overlap_conflicts(store, sym, idx, cols, start, n_old, cal_m)
        starts[sym] = start
    if conflicts:
        raise StoreConflict(
            f"{store}: the update overlaps stored history with different values; nothing written. "
            f"{len(conflicts)} conflicts, first: " + "; ".join(conflicts[:5])
        )
    return _AppendPlan(full, n_old, old_spans, starts, missing, prepared, already)


def _append(out: Path, plan: _AppendPlan, options, freq: str = "1min"):
    """Write a checked update into ``out`` (a hard-linked copy of the store: files are replaced, never extended)."""
    full, n_old = plan.full, plan.n_old
    cix = _CalendarIndex(full.to_numpy().astype("datetime64[m]"))
    written, spans = {}, dict(plan.old_spans)
    for sym, frame in plan.prepared:  # prepared again from the spill: one symbol in memory at a time
        idx, cols = _values_on(cix, frame)
        del frame
        written[sym] = _append_symbol(out, sym, idx, cols, plan.starts[sym], n_old, full, spans, freq)
    qlib_store.write_calendar(out, full, freq)
    qlib_store._fault_point("ingest:calendar_written")
    _write_instruments(out, spans, options, freq)
    new_sessions = int(len(np.unique(full[n_old:].normalize()))) if len(full) > n_old else 0
    return written, new_sessions, full, plan.missing


def _extended_calendar(store: Path, old_cal: pd.DatetimeIndex, calendar: pd.DatetimeIndex,
                       freq: str = "1min") -> pd.DatetimeIndex:
    """The store calendar extended to cover ``calendar`` (refused if it starts before the store)."""
    old_first, old_last = old_cal[0].normalize(), old_cal[-1].normalize()
    new_first = calendar[0].normalize()
    if new_first < old_first:
        raise StoreConflict(
            f"{store}: expected new data on or after the store's first session {old_first.date()}, found bars from "
            f"{new_first.date()} (history is not rewritten; ingest into a new store)"
        )
    full = _calendar(old_first, max(old_last, calendar[-1].normalize()), freq)
    if not full[: len(old_cal)].equals(old_cal):
        what = "session" if freq == "day" else "minute"
        raise StoreConflict(f"{store}/calendars/{freq}.txt: expected the NYSE {what} calendar, found a different one")
    return full


def _late_actions(sym: str, events, old_last: pd.Timestamp) -> list[str]:
    """A conflict when a stored symbol has corporate actions after its stored history."""
    late = [str(e[0]) for e in events if pd.Timestamp(e[0]) > old_last]
    if not late:
        return []
    message = (f"{sym}: corporate action(s) on {late} after the stored history would change its "
               "adjustment factors (re-ingest from scratch)")
    return [message]


def _overlap_conflicts(store: Path, sym: str, idx: np.ndarray, cols: dict[str, np.ndarray], start: int, n_old: int,
                       cal_m: np.ndarray) -> list[str]:
    """Where new bars inside the stored range differ from the stored float32 values (first per symbol)."""
    out = []
    overlap = idx < n_old
    if np.any(idx[overlap] < start):
        t = cal_m[idx[overlap][idx[overlap] < start][0]]
        out.append(f"{sym}: bar {t} is before the symbol's first stored bar (history is not rewritten)")
    for f in qlib_store.FIELDS:
        s0, stored = qlib_store.read_feature(store, sym, f)
        stored = stored[: max(n_old - s0, 0)]
        pos = idx[overlap] - s0
        inside = (pos >= 0) & (pos < len(stored))
        new_v = cols[f][overlap][inside].astype("<f4")
        old_v = stored[pos[inside]]
        differ = ~((new_v == old_v) | (np.isnan(new_v) & np.isnan(old_v)))
        if differ.any():
            k = int(np.argmax(differ))
            t = cal_m[idx[overlap][inside][k]]
            out.append(f"{sym}: {t} field '{f}': stored {old_v[k]!r}, new {new_v[k]!r}")
            break
    return out


def _append_symbol(store: Path, sym: str, idx: np.ndarray, cols: dict[str, np.ndarray], start: int | None,
                   n_old: int, full: pd.DatetimeIndex, spans: dict, freq: str = "1min") -> int:
    """Write one symbol's new bars (a new symbol: whole files); updates ``spans``; the bars written."""
    if start is None:  # a symbol new to the store
        first, last = int(idx[0]), int(idx[-1])
        if first < n_old:
            raise StoreConflict(f"{sym}: new symbol with bars inside the stored range; ingest into a new store")
        qlib_store.write_symbol(store, sym, first, _dense(idx, cols, first, last), freq)
        spans[sym] = (full[first], full[last])
        return len(idx)
    tail = idx >= n_old
    if not tail.any():
        return 0
    last = int(idx[-1])
    for f in qlib_store.FIELDS:
        _append_feature(store, sym, f, idx[tail], cols[f][tail], last, n_old, freq)
    first_t = spans.get(sym, (full[int(idx[0])], None))[0]
    spans[sym] = (first_t, full[last])
    return int(tail.sum())


def _append_feature(store: Path, sym: str, f: str, positions: np.ndarray, values: np.ndarray, last: int,
                    n_old: int, freq: str = "1min") -> None:
    """Extend one feature file up to calendar position ``last`` (NaN where no bar), history bytes unchanged.

    The file is written anew (atomically): in a staging copy it is a hard link to the published
    store's file, which must not change. Values beyond the stored calendar (left by an
    interrupted append of an older version) are dropped first.
    """
    path = qlib_store.feature_path(store, sym, f, freq)
    raw = np.fromfile(path, dtype="<f4")
    if raw.size == 0:
        raise ValueError(f"{path}: expected a start index and values, found an empty file")
    s0 = int(raw[0])
    allowed = max(n_old - s0, 0)  # values that belong to the stored calendar
    size = min(raw.size - 1, allowed)
    block = np.full(last - (s0 + size) + 1, np.nan, dtype="<f4")
    block[positions - (s0 + size)] = values
    qlib_store.atomic_write_bytes(path, np.concatenate([raw[: size + 1], block]))


def _update_meta(store: Path, report: IngestReport, appended: bool, options: IngestOptions, infos,
                 cal: pd.DatetimeIndex, freq: str = "1min") -> None:
    meta = qlib_store.read_meta(store) if appended else {}
    appended = appended and bool(meta)  # an older version's new store killed before its meta.json: start it
    entry = {
        "when": pd.Timestamp.now(tz="UTC").isoformat(timespec="seconds"),
        "mode": options.mode,
        "files": [i.path for i in infos],
        "tz": options.tz,
        "bars_written": report.rows_out,
        "totals": report.totals(),
    }
    if not appended:
        meta = {
            "source": "vendor",
            "generator": "data_prep.ingest",
            "fields": list(qlib_store.FIELDS),
            "vwap": VWAP_RULE,
            "close_bar_policy": DAILY_RULE if freq == "day" else CLOSE_BAR_RULE,
            "price_adjustment": ("back-adjusted with " + options.adjustments) if options.adjustments
            else "as delivered, factor = 1",
            "updates": [],
        }
        if freq == "day":
            meta["freq"] = "day"
    meta.setdefault("updates", []).append(entry)
    fmt = "%Y-%m-%d" if freq == "day" else "%Y-%m-%d %H:%M:%S"
    meta["calendar"] = {"bars": len(cal), "first": cal[0].strftime(fmt), "last": cal[-1].strftime(fmt)}
    meta["symbols"] = sorted(qlib_store.read_instruments(store, "all"))
    qlib_store.write_meta(store, meta)

