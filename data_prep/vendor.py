"""Reading vendor minute-bar or daily-bar files (CSV or Parquet) into one normalised polars frame.

Accepted layouts
----------------
* **Files**: ``*.csv``, ``*.csv.gz``, ``*.txt`` (comma separated, header on line 1) and
  ``*.parquet``; a directory stands for the files in it (sorted by name).
* **Symbols**: one file per symbol (the symbol is ``--symbol`` or the file name without its data
  suffix, upper-cased: ``AAPL.csv`` -> ``AAPL``, ``BRK.B.csv`` -> ``BRK.B``;
  ``FileInfo.symbol_from`` says which, the ingest report names every symbol taken from a file
  name, and a name ending in an interval or date tag such as ``ACN_1MIN`` gets a hint to pass
  ``--symbol``: the tag is never guessed away, :func:`stem_tag`) or one long file with a symbol column
  (``--symbol-col``, default ``symbol``; used whenever the file has that column). A symbol is a
  name, never a path: one that cannot name a feature folder (``BRK/B``, ``../x``, ``.``, a
  control character ...; :func:`data_prep.symbols.symbol_problem`) is refused with
  :class:`ValueError` naming the file, the line and the character, in every mode.
* **Time**: a separate date and time-of-day column (``--date-col``/``--time-col``, default
  ``date``/``ToD`` as in the shared 2018 sample; times ``HH:MM:SS`` or ``HH:MM``); a single timestamp column
  (``--datetime-col``) as text with or without a zone offset; or epoch milliseconds
  (``--epoch-ms-col``, always UTC). Naive times are read in ``--tz`` (default
  America/New_York). Everything is converted to naive New York local time, Qlib's convention.
  A naive time that does not exist or is ambiguous in ``--tz`` (daylight-saving change) is
  a ``bad_timestamp``. A timestamp column mixing naive and zoned times is refused, naming the
  first line of each kind.
* **Daily bars** (``freq="day"``, or detected when a file has a date column with dates only and
  no time-of-day column): the date column (``--date-col``, or ``--datetime-col``) holds
  ``YYYY-MM-DD`` (``YYYY-MM-DD 00:00:00`` and typed date columns are accepted too); ``ts`` is the
  date at midnight. Anything else (a time of day, text that is no date) is a ``bad_timestamp``.
* **Values**: ``open, high, low, close, volume`` and optionally ``vwap`` (column names mappable);
  text is stripped and parsed as float; empty text, ``NaN`` and nulls are missing values.

Unreadable files
----------------
An empty file, a truncated or corrupt ``.csv.gz`` or Parquet file, and a row with more fields
than the header are :class:`ValueError` naming the file (and the line where it can be found),
never a polars traceback.

Line numbers
------------
``_line`` is the 1-based physical line of a CSV row, the header being line 1 (so the first
data row is line 2); for Parquet it is the 1-based row number. Reports and errors use it.

Example
-------
>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "AAPL.csv"
>>> _ = p.write_text("date,ToD,open,high,low,close,volume\\n2018-02-16,09:30:00,1,2,0.5,1.5,100\\n")
>>> df, info = read_vendor_file(p, file_index=0, columns=ColumnMap())
>>> df.select("symbol", "_line", "ts", "close").row(0)
('AAPL', 2, datetime.datetime(2018, 2, 16, 9, 30), 1.5)
"""

from __future__ import annotations

import csv
import gzip
import io
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from data_prep.symbols import ALLOWED_PUNCTUATION, symbol_problem

__all__ = ["ColumnMap", "FileInfo", "VALUE_FIELDS", "NY_TZ", "FREQS", "detect_freq", "list_sources", "read_vendor_file",
           "file_stem", "stem_tag"]

NY_TZ = "America/New_York"
#: Fields read from vendor files (``vwap`` optional).
VALUE_FIELDS: tuple[str, ...] = ("open", "high", "low", "close", "volume", "vwap")
_NAIVE_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f",
                  "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M")
_ZONED_FORMATS = tuple(f + "%z" for f in _NAIVE_FORMATS)
#: Bar frequencies a vendor file can hold: one-minute bars or daily bars.
FREQS: tuple[str, ...] = ("1min", "day")
_DATE_ONLY = r"^\s*\d{4}-\d{2}-\d{2}\s*$"
_DAILY_FORMATS = ("%Y-%m-%d", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S")
_SUFFIXES = (".csv", ".csv.gz", ".txt", ".parquet", ".pq")


@dataclass(frozen=True)
class ColumnMap:
    """Names of the vendor's columns.

    ``datetime`` or ``epoch_ms``, when given, replace the ``date`` + ``time`` pair.
    """

    symbol: str = "symbol"
    date: str = "date"
    time: str = "ToD"
    datetime: str | None = None
    epoch_ms: str | None = None
    open: str = "open"
    high: str = "high"
    low: str = "low"
    close: str = "close"
    volume: str = "volume"
    vwap: str = "vwap"

    def field_column(self, field: str) -> str:
        """Vendor column of a value field."""
        return getattr(self, field)


@dataclass(frozen=True)
class FileInfo:
    """What was read from one file."""

    path: str
    index: int
    rows: int
    symbols: tuple[str, ...]
    time_field: str  # column name(s) of the time, for messages
    has_vwap: bool
    line_offset: int  # line of the first data row (2 for CSV, 1 for Parquet)
    zoned: bool = False  # the times carry their own zone (zoned text, epoch ms, zoned Parquet column)
    hint: str | None = None  # time-zone hint set by the ingest when most bars fall outside the session
    freq: str = "1min"  # "1min" or "day" (given, or detected by :func:`detect_freq`)
    symbol_from: str = "column"  # where the symbol came from: "column", "--symbol" or "file name"


def list_sources(sources: Iterable[str | Path]) -> list[Path]:
    """Expand files and directories into a sorted, de-duplicated file list.

    Raises
    ------
    ValueError
        When a path does not exist or a directory holds no readable file.
    """
    out: list[Path] = []
    for src in sources:
        p = Path(src)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.name.lower().endswith(_SUFFIXES))
            if not found:
                raise ValueError(f"{p}: expected files named *.csv, *.csv.gz, *.txt or *.parquet, found none")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise ValueError(f"{p}: expected an existing file or directory, found nothing at that path")
    seen: set[Path] = set()
    unique = []
    for f in out:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique


def _is_parquet(path: Path) -> bool:
    return path.name.lower().endswith((".parquet", ".pq"))


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message (polars appends hints about its own options)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def _ragged_line(path: Path) -> tuple[int, int, int] | None:
    """``(line, header fields, fields found)`` of the first row with more fields than the header."""
    opener = gzip.open if _is_gzip(path) else open
    try:
        with opener(path, "rb") as raw, io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                return None
            for row in reader:
                if len(row) > len(header):
                    return reader.line_num, len(header), len(row)
    except (OSError, EOFError, zlib.error, csv.Error):
        return None
    return None


def _read_raw(path: Path) -> tuple[pl.DataFrame, int]:
    if _is_parquet(path):
        try:
            return pl.read_parquet(path), 1
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise _unreadable_parquet(path, exc) from exc
    try:
        df = pl.read_csv(path, infer_schema=False, has_header=True, truncate_ragged_lines=False)
    except pl.exceptions.NoDataError as exc:
        raise ValueError(f"{path}: line 1: expected a header line of comma-separated column names, "
                         "found an empty file") from exc
    except (OSError, EOFError, zlib.error) as exc:
        what = "gzip-compressed CSV" if _is_gzip(path) else "CSV file"
        raise ValueError(f"{path}: expected a complete {what}, found a truncated or corrupt one "
                         f"({_first_line(exc)}); fetch the file again") from exc
    except pl.exceptions.PolarsError as exc:
        ragged = _ragged_line(path)
        if ragged is not None:
            line, n_header, n_found = ragged
            raise ValueError(
                f"{path}: line {line}: expected {n_header} comma-separated fields as in the header (line 1), "
                f"found {n_found}; remove the extra field(s), or quote a value that contains a comma"
            ) from exc
        raise ValueError(f"{path}: expected a UTF-8 comma-separated file with a header line, found one that "
                         f"cannot be read: {_first_line(exc)}") from exc
    return df, 2


def _unreadable_parquet(path: Path, exc: BaseException) -> ValueError:
    return ValueError(f"{path}: expected a Parquet file, found one that cannot be read: {_first_line(exc)}")


@dataclass
class _Source:
    """A file opened for reading: its columns, and its rows in batches.

    ``head`` has the file's columns: read whole (CSV, or any file read without batches) it is the
    whole file, read in batches (Parquet) it has no rows. ``batches`` yields ``(first row, raw
    frame)`` in file order; ``column(name)`` reads one column of the whole file (None when ``head``
    is the whole file).
    """

    head: pl.DataFrame
    line_offset: int
    batches: Callable[[], Iterator[tuple[int, pl.DataFrame]]]
    column: Callable[[str], pl.DataFrame] | None = None


def _open_source(path: Path, batch_rows: int | None) -> _Source:
    """Open ``path``: whole, or (Parquet, ``batch_rows`` given) whole row groups adding up to about ``batch_rows`` rows."""
    if batch_rows is None or not _is_parquet(path):
        raw, line_offset = _read_raw(path)
        return _Source(raw, line_offset, lambda: iter([(0, raw)]))
    try:
        import pyarrow.parquet as pq

        head = pl.scan_parquet(path).clear().collect()
        meta = pq.ParquetFile(path).metadata
        groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    except Exception as exc:  # polars, pyarrow and OS errors alike: the file cannot be read
        raise _unreadable_parquet(path, exc) from exc

    def read(lazy: pl.LazyFrame) -> pl.DataFrame:
        try:
            return lazy.collect()
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise _unreadable_parquet(path, exc) from exc

    def batches() -> Iterator[tuple[int, pl.DataFrame]]:
        spans, start, n = [], 0, 0
        for size in groups:
            n += size
            if n >= batch_rows:
                spans.append((start, n))
                start, n = start + n, 0
        if n or not spans:
            spans.append((start, n))
        for first, length in spans:
            yield first, read(pl.scan_parquet(path).slice(first, length)) if length else head

    return _Source(head, 1, batches, lambda name: read(pl.scan_parquet(path).select(name)))


def _require(df: pl.DataFrame, path: Path, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(
            f"{path}: line 1: expected {what} column(s) {missing}, found columns {df.columns} "
            "(map them with the --*-col options)"
        )


_NAIVE_SHAPE = r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?"
_ZONE_SUFFIX = r"(Z|[+-]\d{2}(:?\d{2})?)$"


def _zoned_text(df: pl.DataFrame, path: Path, column: str, raw: pl.Expr, line_offset: int, tz: str) -> bool:
    """Whether the text timestamps carry a zone; a column mixing naive and zoned times is refused.

    Text of neither shape (garbage) does not count: it becomes a ``bad_timestamp``.
    """
    kinds = df.select(
        raw.str.contains(_NAIVE_SHAPE + "$").alias("naive"),
        raw.str.contains(_NAIVE_SHAPE + _ZONE_SUFFIX).alias("zoned"),
    )
    naive, zoned = kinds.get_column("naive").fill_null(False), kinds.get_column("zoned").fill_null(False)
    if naive.any() and zoned.any():
        i, k = int(naive.arg_true()[0]), int(zoned.arg_true()[0])
        text = df.get_column(column).cast(pl.String)
        raise ValueError(
            f"{path}: column '{column}' mixes naive and zoned timestamps: line {i + line_offset} has {text[i]!r} "
            f"(no zone: it would be read in --tz {tz}) and line {k + line_offset} has {text[k]!r} (with a zone); "
            "expected one convention per file"
        )
    return bool(zoned.any())


def _timestamp_expr(
    df: pl.DataFrame, path: Path, cols: ColumnMap, tz: str, line_offset: int = 2,
    column_data: Callable[[str], pl.DataFrame] | None = None,
) -> tuple[pl.Expr, pl.Expr | None, str, bool]:
    """Return (naive New York datetime expr, raw text expr or None for typed columns, time field name, zoned).

    ``df`` gives the file's columns (and, without ``column_data``, its rows); ``column_data(name)``
    returns one column of the whole file, for the naive/zoned check of a text timestamp column.
    """
    if cols.epoch_ms:
        _require(df, path, [cols.epoch_ms], "epoch-milliseconds")
        col = pl.col(cols.epoch_ms)
        num = col.cast(pl.Int64, strict=False) if df.schema[cols.epoch_ms] == pl.String else col.cast(pl.Int64)
        ts = num.cast(pl.Datetime("ms")).dt.replace_time_zone("UTC")
        text = col if df.schema[cols.epoch_ms] == pl.String else None
        return _to_ny_naive(ts), text, cols.epoch_ms, True
    else:
        if cols.datetime:
            _require(df, path, [cols.datetime], "timestamp")
            field = cols.datetime
            dtype = df.schema[cols.datetime]
            text = pl.col(cols.datetime).cast(pl.String)
            if isinstance(dtype, pl.Datetime):  # typed: no text needed (messages format the time)
                ts = pl.col(cols.datetime)
                if dtype.time_zone is None:
                    return _localize(ts, tz), None, field, False
                return _to_ny_naive(ts), None, field, True
            raw = text.str.strip_chars()
            whole = df if column_data is None else column_data(cols.datetime)
            if _zoned_text(whole, path, cols.datetime, raw, line_offset, tz):
                zoned = raw.str.replace(r"Z$", "+00:00")
                ts = pl.coalesce([zoned.str.to_datetime(fmt, strict=False, time_unit="us", time_zone="UTC")
                                  for fmt in _ZONED_FORMATS])
                return _to_ny_naive(ts), text, field, True
            ts = pl.coalesce([raw.str.to_datetime(fmt, strict=False, time_unit="us") for fmt in _NAIVE_FORMATS])
        else:
            _require(df, path, [cols.date, cols.time], "date and time")
            field = f"{cols.date},{cols.time}"
            text = pl.concat_str([pl.col(cols.date).cast(pl.String), pl.col(cols.time).cast(pl.String)], separator=" ")
            ts = _date_time_expr(df if column_data is None else column_data(cols.time), cols.time, text)
        return _localize(ts, tz), text, field, False


_HHMM = r"^\s*\d{1,2}:\d{2}\s*$"


def _date_time_expr(df: pl.DataFrame, time_col: str, text: pl.Expr) -> pl.Expr:
    """Naive times from ``"date time"`` text: ``HH:MM:SS``, and ``HH:MM`` when the time column holds any."""
    ts = text.str.strip_chars().str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False, time_unit="us")
    column = df.get_column(time_col)
    if column.dtype == pl.String and bool(column.str.contains(_HHMM).any()):
        ts = pl.coalesce([ts, text.str.strip_chars().str.to_datetime("%Y-%m-%d %H:%M", strict=False, time_unit="us")])
    return ts


def detect_freq(raw: pl.DataFrame, cols: ColumnMap, *, share: float = 0.9) -> str:
    """``"day"`` when the time is one date column holding dates only, else ``"1min"``.

    Daily: no epoch-milliseconds column, no time-of-day column (``cols.time``) in the file, and
    at least ``share`` of the non-empty values of the date column (``cols.datetime`` when given,
    else ``cols.date``) read ``YYYY-MM-DD`` (or the column is a typed date).

    >>> detect_freq(pl.DataFrame({"date": ["2018-01-02"], "close": ["1"]}), ColumnMap())
    'day'
    >>> detect_freq(pl.DataFrame({"date": ["2018-01-02"], "ToD": ["09:30:00"]}), ColumnMap())
    '1min'
    """
    if cols.epoch_ms:
        return "1min"
    col = cols.datetime or cols.date
    if col not in raw.columns or (cols.datetime is None and cols.time in raw.columns):
        return "1min"
    dtype = raw.schema[col]
    if dtype == pl.Date:
        return "day"
    if dtype != pl.String:
        return "1min"
    text = raw.get_column(col).drop_nulls()
    text = text.filter(text.str.strip_chars() != "")
    if text.len() == 0:
        return "1min"
    return "day" if text.str.contains(_DATE_ONLY).sum() >= share * text.len() else "1min"


def _daily_expr(df: pl.DataFrame, path: Path, cols: ColumnMap) -> tuple[pl.Expr, pl.Expr | None, str]:
    """(date at midnight, raw text or None, field name) of a daily file; non-dates and times of day -> null."""
    col = cols.datetime or cols.date
    _require(df, path, [col], "date")
    dtype = df.schema[col]
    if dtype == pl.Date:
        return pl.col(col).cast(pl.Datetime("us")), None, col
    if isinstance(dtype, pl.Datetime):
        ts = pl.col(col).dt.replace_time_zone(None).dt.cast_time_unit("us")
        return pl.when(ts.dt.time() == pl.time(0)).then(ts), None, col
    text = pl.col(col).cast(pl.String)
    raw = text.str.strip_chars()
    ts = pl.coalesce([raw.str.to_datetime(fmt, strict=False, time_unit="us") for fmt in _DAILY_FORMATS])
    return pl.when(ts.dt.time() == pl.time(0)).then(ts), text, col


def _localize(ts: pl.Expr, tz: str) -> pl.Expr:
    """Naive times in ``tz`` -> naive New York times (null when nonexistent or ambiguous in ``tz``).

    For New York itself the values are unchanged, so the costly zone round trip is skipped;
    :func:`_null_dst_gaps` then nulls the only times it could reject (01:00-02:59 on change days).
    """
    if tz == NY_TZ:
        return ts.dt.cast_time_unit("us")
    return _to_ny_naive(ts.dt.replace_time_zone(tz, ambiguous="null", non_existent="null"))


def _null_dst_gaps(df: pl.DataFrame) -> pl.DataFrame:
    hour = pl.col("ts").dt.hour()
    risky = hour.is_in([1, 2]).fill_null(False)
    if not df.select(risky.any()).item():
        return df
    checked = _to_ny_naive(pl.col("ts").dt.replace_time_zone(NY_TZ, ambiguous="null", non_existent="null"))
    return df.with_columns(pl.when(risky).then(checked).otherwise(pl.col("ts")).alias("ts"))


def _to_ny_naive(ts: pl.Expr) -> pl.Expr:
    return ts.dt.convert_time_zone(NY_TZ).dt.replace_time_zone(None).dt.cast_time_unit("us")


def _symbol_expr(raw: pl.DataFrame, path: Path, columns: ColumnMap, symbol: str | None) -> pl.Expr:
    """The symbol column (stripped, upper-cased), or ``symbol`` / the file name's stem for single-symbol files."""
    if columns.symbol in raw.columns:
        sym = pl.col(columns.symbol).cast(pl.String)
        names = raw.get_column(columns.symbol).cast(pl.String).unique().drop_nulls()
        if not (names == names.str.strip_chars().str.to_uppercase()).all():  # normalise only when needed
            sym = sym.str.strip_chars().str.to_uppercase()
        return sym
    return pl.lit(_single_symbol(path, symbol))


def file_stem(path: str | Path) -> str:
    """A data file's name without its data suffix (``.csv``, ``.csv.gz``, ``.txt``, ``.parquet``, ``.pq``).

    >>> file_stem("d/BRK.B.csv"), file_stem("AAPL.csv.gz"), file_stem("ACN_1MIN.CSV"), file_stem("x.y")
    ('BRK.B', 'AAPL', 'ACN_1MIN', 'x')
    """
    name = Path(path).name
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name.split(".")[0]


#: A file stem's tail that names an interval or a date, not a share class (``ACN_1MIN``, ``AAPL-daily``, ``F_2018``).
_STEM_TAG = re.compile(
    r"[_\-. ](\d+ ?(MIN|MINS|MINUTE|MINUTES|M|H|HR|HOUR|HOURS|D|DAY|DAYS|S|SEC|SECOND|SECONDS)|MIN|MINUTE|MINUTES|"
    r"MINUTELY|HOUR|HOURLY|DAY|DAILY|TICK|TICKS|BAR|BARS|INTRADAY|OHLC|OHLCV|(19|20)\d{2}([-_]?\d{2}){0,2})$",
    re.IGNORECASE,
)


def stem_tag(stem: str) -> str | None:
    """The interval or date tag at the end of a file stem (``"_1MIN"`` of ``ACN_1MIN``), or ``None``.

    >>> stem_tag("ACN_1MIN"), stem_tag("AAPL-daily"), stem_tag("F_2018-06"), stem_tag("BRK.B"), stem_tag("BF-B")
    ('_1MIN', '-daily', '_2018-06', None, None)
    """
    m = _STEM_TAG.search(stem)
    return m.group(0) if m and m.start() > 0 else None


def _single_symbol(path: Path, symbol: str | None) -> str:
    """The symbol of a single-symbol file: ``symbol`` (``--symbol``) or the file name's stem, stripped, upper-cased."""
    return (symbol if symbol is not None else file_stem(path)).strip().upper()


def _symbol_from(head: pl.DataFrame, columns: ColumnMap, symbol: str | None) -> str:
    return "column" if columns.symbol in head.columns else "--symbol" if symbol is not None else "file name"


def _check_symbols(df: pl.DataFrame, raw: pl.DataFrame, path: Path, columns: ColumnMap, origin: str,
                   seen: set[str]) -> None:
    """Refuse a symbol that cannot name a feature folder, naming the file, line and character.

    Empty symbols are left to the validation (``missing_value``: reported, never written).
    """
    names = set(df.get_column("symbol").drop_nulls().unique().to_list())
    new = names - seen - {""}
    for sym in sorted(new):
        problem = symbol_problem(sym)
        if problem is None:
            continue
        where = {"column": f"field '{columns.symbol}'", "--symbol": "--symbol",
                 "file name": f"the symbol taken from the file name {path.name} (no '{columns.symbol}' column, no "
                              "--symbol)"}[origin]
        if origin == "column":
            first = int(df.get_column("symbol").eq(sym).arg_true()[0])
            text = raw.get_column(columns.symbol).cast(pl.String)[first]
            where = f"line {int(df.get_column('_line')[first])}: {where}"
        else:
            text = sym
        raise ValueError(f"{path}: {where}: expected a symbol (letters, digits and "
                         f"{' '.join(ALLOWED_PUNCTUATION)}; a name, never a path), found {text!r}: {problem}; "
                         "nothing written")
    seen.update(names)


def _value_exprs(raw: pl.DataFrame, columns: ColumnMap, has_vwap: bool) -> list[pl.Expr]:
    """Each value field as Float64 (null when missing or unparseable) and, for text columns, ``_txt_<field>``."""
    exprs = []
    for field in VALUE_FIELDS:
        if field == "vwap" and not has_vwap:
            continue
        col = columns.field_column(field)
        if raw.schema[col] == pl.String:
            stripped = pl.col(col).str.strip_chars()
            exprs.append(stripped.cast(pl.Float64, strict=False).alias(field))
            exprs.append(pl.col(col).alias(f"_txt_{field}"))
        else:  # typed column: no text to keep (a missing value is null or NaN)
            exprs.append(pl.col(col).cast(pl.Float64).alias(field))
    return exprs


def _normalise(raw: pl.DataFrame, path: Path, file_index: int, lines: pl.Expr, sym: pl.Expr, values: list[pl.Expr],
               time_field: str, dst: bool) -> pl.DataFrame:
    """The normalised frame of a batch of raw rows (``dst``: null the times a New York DST change skips)."""
    exprs = [pl.lit(file_index, dtype=pl.Int32).alias("_file"), lines, sym.alias("symbol"), *values]
    try:
        df = raw.select(exprs)
    except pl.exceptions.PolarsError as exc:
        raise ValueError(f"{path}: could not read the time column(s) {time_field}: {exc}") from exc
    return _null_dst_gaps(df) if dst else df


def _detect_source_freq(src: _Source, cols: ColumnMap) -> str:
    """:func:`detect_freq` over the whole file (reading only the date column of a Parquet file)."""
    col = cols.datetime or cols.date
    head = src.head
    if (src.column is None or cols.epoch_ms or col not in head.columns
            or (cols.datetime is None and cols.time in head.columns) or head.schema[col] != pl.String):
        return detect_freq(head, cols)  # the whole file, or a decision its columns settle
    return detect_freq(src.column(col), cols)


def read_vendor_file(
    path: str | Path,
    *,
    file_index: int,
    columns: ColumnMap,
    tz: str = NY_TZ,
    symbol: str | None = None,
    freq: str | None = "1min",
    sink: Callable[[pl.DataFrame], None] | None = None,
    batch_rows: int = 1 << 20,
) -> tuple[pl.DataFrame, FileInfo]:
    """Read one vendor file into the normalised frame the validator works on.

    Parameters
    ----------
    sink : callable, optional
        Streaming: ``sink(frame)`` receives the normalised rows in batches, in line order, and the
        frame returned has the columns but no rows. A Parquet file is then read whole row groups
        at a time (about ``batch_rows`` rows; a CSV file is one batch), so memory holds one batch,
        not the file. The rows, line numbers, checks and errors are those of the whole-file read.

    Returns
    -------
    (polars.DataFrame, FileInfo)
        Columns: ``_file`` (file index), ``_line`` (see module docstring), ``symbol``,
        ``ts`` (naive New York datetime, null when unparseable), ``_ts_text`` (raw text; absent
        for typed timestamp columns),
        and for each present field ``f``: ``f`` (Float64, null when missing or unparseable)
        and ``_txt_f`` (the raw text, for messages; absent for typed Parquet columns).
        ``freq``: ``"1min"``, ``"day"`` (daily bars: ``ts`` is the session date at midnight) or
        ``None`` (detected per file, :func:`detect_freq`); ``FileInfo.freq`` says which.
    """
    path = Path(path)
    src = _open_source(path, batch_rows if sink is not None else None)
    head, line_offset = src.head, src.line_offset
    _require(head, path, [columns.field_column(f) for f in VALUE_FIELDS if f != "vwap"], "value")
    has_vwap = columns.vwap in head.columns
    if freq is None:
        freq = _detect_source_freq(src, columns)
    if freq not in FREQS:
        raise ValueError(f"freq: expected one of {', '.join(FREQS)} or None (detect), found {freq!r}")
    if freq == "day":
        ts, ts_text, time_field = _daily_expr(head, path, columns)
        zoned = False
    else:
        ts, ts_text, time_field, zoned = _timestamp_expr(head, path, columns, tz, line_offset, src.column)
    values = ([ts.alias("ts")] + ([ts_text.alias("_ts_text")] if ts_text is not None else [])
              + _value_exprs(head, columns, has_vwap))
    dst = tz == NY_TZ and not columns.epoch_ms and freq != "day"
    origin = _symbol_from(head, columns, symbol)
    frames, rows, symbols = [], 0, set()
    for first, raw in src.batches():
        lines = (pl.int_range(pl.len(), dtype=pl.Int64) + (line_offset + first)).alias("_line")
        df = _normalise(raw, path, file_index, lines, _symbol_expr(raw, path, columns, symbol), values, time_field, dst)
        _check_symbols(df, raw, path, columns, origin, symbols)
        del raw
        rows += df.height
        if sink is None:
            frames.append(df)
        else:
            sink(df)
            frames = [df.clear()]
        del df
    info = FileInfo(
        path=str(path),
        index=file_index,
        rows=rows,
        symbols=tuple(sorted(symbols)),
        time_field=time_field,
        has_vwap=has_vwap,
        line_offset=line_offset,
        zoned=zoned,
        freq=freq,
        symbol_from=origin,
    )
    return (frames[0] if len(frames) == 1 else pl.concat(frames)), info
