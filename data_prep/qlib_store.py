"""Qlib's binary provider layout, written and read at speed.

Layout of a store directory (what ``qlib.init(provider_uri={"1min": DIR}, region="us")`` reads)::

    DIR/calendars/1min.txt                 one bar per line, "YYYY-MM-DD HH:MM:SS", naive NY time
    DIR/instruments/all.txt                "SYMBOL<TAB>first bar<TAB>last bar" per symbol
    DIR/instruments/us25.txt               same, for the named universe (the 25 stocks of docs/method.md §3.3)
    DIR/features/<symbol>/<field>.1min.bin little-endian float32; value 0 is the index in the
                                           calendar of the first bar, then one value per bar
    DIR/meta.json                          how the store was made (source, seed, counts, ...)

A daily store (``rolling-calib data ingest --freq day``) has the same layout with ``day`` in place
of ``1min``: ``calendars/day.txt`` holds one NYSE session date per line (``YYYY-MM-DD``),
``instruments/*.txt`` give dates and the feature files are ``<field>.day.bin`` -- what Qlib's
``scripts/dump_bin.py`` writes and ``qlib.init(provider_uri={"day": DIR})`` reads. Every reader
here takes the frequency from the calendar file present (:func:`store_freq`).

Feature directories are named by :func:`data_prep.symbols.symbol_to_fname` -- Qlib's own
``code_to_fname`` lower-cased (``features/aapl/close.1min.bin``, ``features/brk.b/...``,
``features/_qlib_con/...``), the folder Qlib's provider opens for the instrument; the instrument
files keep the upper-case symbol. A symbol is a name, never a path: one that cannot name a folder
(``BRK/B``, ``..``, an empty one ...) is refused (:func:`data_prep.symbols.symbol_problem`), and
every file is written through :func:`store_file`, which refuses a path that resolves outside the
directory being written (a staging directory, see below).
Every feature file of a symbol starts at the same calendar index and runs to the same end,
aligned to the calendar; missing bars are NaN.

Opening the store with Qlib (pyqlib 0.9.7) -- :func:`init_qlib` does this::

    qlib.init(provider_uri={"1min": str(DIR)}, region="us",
              expression_cache=None, dataset_cache=None, kernels=1)
    D.features(D.instruments("us25"), ["$close"], "2018-01-02", "2018-01-31", freq="1min")

Notes found by running it:

* ``provider_uri`` must be keyed by ``"1min"``; with a single non-"day" key Qlib serves only
  that frequency, so every ``D.*`` call needs ``freq="1min"`` (``D.calendar(freq="1min")``).
* ``D.features`` returns exactly the store calendar's minutes that fall in ``[start, end]``:
  no bars at night, on holidays or after an early close (the calendar has none).
  ``end`` as a bare date means midnight, so use ``"2018-01-31 23:59"`` (or the next date) to
  include the last session's bars.
* Qlib reads the whole calendar file once per process (about 1 s per 700k lines).
* ``kernels=1`` avoids a process pool per call; tests and small stores are faster that way.

Atomic writes (:mod:`data_prep.atomic`): every file is written to a temporary name in its directory,
fsynced, and moved in place with ``os.replace``. A write that fails (disk full, quota, permissions, a read-only file system)
raises :class:`WriteFailed`, one line naming the file, the free space of its file system and
the fix; the temporary file is removed.

Publishing a store as a whole (crash safety)
--------------------------------------------
A store is complete only when ``DIR/COMMITTED`` (:data:`COMMIT_FILE`) matches its files. Writers
(``rolling-calib data ingest``, :func:`data_prep.build_synthetic_store`) never write into
``DIR`` itself: :func:`staged_write` builds the new version in ``DIR.staging-<pid>`` beside it
(an update starts from a hard-linked copy of the current store; every changed file is written
as a new file, so the linked originals are never modified), fsyncs it, writes the commit
marker last, then swaps directories with two renames (``DIR`` -> ``DIR.old-<pid>``,
``DIR.staging-<pid>`` -> ``DIR``) and removes the old one. A kill at any moment leaves either
the previous complete store, or nothing (a new store), plus the staging directory:

* readers (:func:`check_committed`, called by :func:`store_info` / ``rolling-calib data info``,
  :func:`init_qlib` and rolling_calib's ``qlib_init`` loading) refuse a store with a
  ``DIR.staging-*`` directory beside it, or a missing ``DIR`` with ``DIR.old-*`` beside it, with
  :class:`StoreNotCommittedError` naming ``DIR``;
* the next write into ``DIR`` (:func:`recover_interrupted`) puts a moved-aside ``DIR.old-*``
  back when ``DIR`` is missing, deletes the staging leftovers, and starts again: re-running
  the interrupted command gives the same bytes as an uninterrupted run. A leftover whose
  process is still alive is refused (:class:`StoreBusyError`): one writer per store.

The marker is JSON: the calendar's bar count, byte size and last bar and the byte size of
every ``instruments/*.txt``; :func:`check_committed` compares them with the files (a few
``stat`` calls and a 64-byte read), so a store later rewritten by another tool or an older
version no longer counts as committed by its stale marker.

Stores without a (valid) marker -- written by older versions of this package or by hand --
are accepted when they are *consistent* (:func:`store_status`): the calendar's last bar equals
the latest instrument end in ``instruments/all.txt``, every other instrument file agrees with
``all.txt``, and ``meta.json``, when present, records that calendar. Otherwise they are refused
as not completely written (the states an interrupted older ingest leaves: no instrument files,
or a calendar running past every instrument).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from data_prep.atomic import OSProblem, WriteFailed, atomic_write_bytes, atomic_write_text, describe_os_error
from data_prep.symbols import symbol_to_fname

__all__ = [
    "FREQ",
    "FREQS",
    "store_freq",
    "calendar_path",
    "FIELDS",
    "UNIVERSE_NAME",
    "META_FILE",
    "COMMIT_FILE",
    "StoreNotCommittedError",
    "StoreBusyError",
    "StoreStatus",
    "store_status",
    "check_committed",
    "commit_store",
    "recover_interrupted",
    "staged_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "WriteFailed",
    "OSProblem",
    "describe_os_error",
    "store_file",
    "format_calendar",
    "write_calendar",
    "read_calendar",
    "write_instruments",
    "read_instruments",
    "write_feature",
    "read_feature",
    "feature_path",
    "write_symbol",
    "write_meta",
    "read_meta",
    "init_qlib",
    "store_info",
]

FREQ = "1min"
#: Store frequencies: one-minute bars (``calendars/1min.txt``) or daily bars (``calendars/day.txt``,
#: one session date per line, as Qlib's ``scripts/dump_bin.py`` writes it).
FREQS: tuple[str, ...] = ("1min", "day")
_CAL_FORMAT = {"1min": "%Y-%m-%d %H:%M:%S", "day": "%Y-%m-%d"}
#: Fields written for every symbol (Qlib's handlers read $open ... $vwap, $factor).
FIELDS: tuple[str, ...] = ("open", "high", "low", "close", "volume", "vwap", "factor")
#: Name of the universe file of the 25 stocks of docs/method.md §3.3.
UNIVERSE_NAME = "us25"
META_FILE = "meta.json"


# ---------------------------------------------------------------------------- atomic writes
# The one atomic write (fsync, then rename; WriteFailed naming the file): data_prep.atomic.


def store_file(store: str | os.PathLike, *parts: str) -> Path:
    """``store/part/...``, checked to lie inside ``store`` once resolved (symbolic links followed).

    Every file of a store is written through this: a part that is empty, ``.``, ``..`` or holds
    a path separator or NUL, or a path that resolves outside ``store`` (a symbolic link out of
    it), is refused with :class:`ValueError` before anything is written.

    >>> store_file("/tmp/s", "features", "aapl", "close.1min.bin").as_posix()
    '/tmp/s/features/aapl/close.1min.bin'
    >>> store_file("/tmp/s", "features", "..", "x")
    Traceback (most recent call last):
    ...
    ValueError: /tmp/s: expected a file name inside the store, found the path part '..' (nothing is written outside the store)
    """
    root = Path(store)
    for part in parts:
        if part in ("", ".", "..") or any(c in part for c in ("/", "\\", "\x00", os.sep)):
            raise ValueError(f"{root}: expected a file name inside the store, found the path part {part!r} "
                             "(nothing is written outside the store)")
    path = root.joinpath(*parts)
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    if not Path(real).is_relative_to(real_root):
        raise ValueError(f"{path}: resolves to {real}, outside the store {real_root} (a symbolic link?); "
                         "nothing is written outside the store")
    return path


# ---------------------------------------------------------------------------- calendar
def _check_freq(freq: str) -> str:
    if freq not in FREQS:
        raise ValueError(f"freq: expected one of {', '.join(FREQS)}, found {freq!r}")
    return freq


def store_freq(store: str | os.PathLike, default: str | None = FREQ) -> str | None:
    """The store's frequency, from its calendar file (``1min`` or ``day``); ``default`` when it has none.

    A directory holding both calendars is a minute store (``1min`` is looked up first).
    """
    for freq in FREQS:
        if (Path(store) / "calendars" / f"{freq}.txt").is_file():
            return freq
    return default


def _freq_of(store, freq: str | None) -> str:
    return _check_freq(freq) if freq is not None else store_freq(store)


def calendar_path(store: str | os.PathLike, freq: str | None = None) -> Path:
    """``calendars/<freq>.txt`` (``freq`` default: the store's own, else ``1min``)."""
    return Path(store) / "calendars" / f"{_freq_of(store, freq)}.txt"


def format_calendar(minutes: pd.DatetimeIndex | np.ndarray, freq: str = FREQ) -> np.ndarray:
    """Format bar times as Qlib's calendar lines ``"YYYY-MM-DD HH:MM:SS"`` (vectorised).

    Example
    -------
    >>> format_calendar(pd.DatetimeIndex(["2018-01-02 09:30"])).tolist()
    ['2018-01-02 09:30:00']
    """
    import polars as pl

    values = pl.Series("t", np.asarray(minutes, dtype="datetime64[us]"))
    return values.dt.strftime(_CAL_FORMAT[_check_freq(freq)]).to_numpy()


def write_calendar(store: Path, minutes: pd.DatetimeIndex, freq: str = FREQ) -> Path:
    """Write ``calendars/<freq>.txt`` (``1min``: bar times; ``day``: session dates); returns its path."""
    path = store_file(store, "calendars", f"{_check_freq(freq)}.txt")
    lines = format_calendar(minutes, freq)
    atomic_write_text(path, "\n".join(lines.tolist()) + ("\n" if len(lines) else ""))
    return path


def read_calendar(store: Path, freq: str | None = None) -> pd.DatetimeIndex:
    """Read ``calendars/<freq>.txt`` back as a naive DatetimeIndex (empty if the file is absent).

    ``freq`` defaults to the store's own (:func:`store_freq`); a daily calendar's dates are midnights.
    """
    freq = _freq_of(store, freq)
    path = Path(store) / "calendars" / f"{freq}.txt"
    if not path.exists():
        return pd.DatetimeIndex([], name="datetime")
    text = path.read_text(encoding="utf-8").split()
    if freq == "day":
        return pd.DatetimeIndex(np.array(text, dtype="datetime64[D]").astype("datetime64[ns]"), name="datetime")
    # lines are "date time": split() yields date and time tokens alternately
    if len(text) % 2:
        raise ValueError(f"{path}: expected lines 'YYYY-MM-DD HH:MM:SS', found an odd token count {len(text)}")
    joined = np.char.add(np.char.add(np.array(text[0::2]), "T"), np.array(text[1::2]))
    return pd.DatetimeIndex(joined.astype("datetime64[s]").astype("datetime64[ns]"), name="datetime")


# ---------------------------------------------------------------------------- instruments
def write_instruments(store: Path, name: str, spans: Mapping[str, tuple[pd.Timestamp, pd.Timestamp]],
                      freq: str = FREQ) -> Path:
    """Write ``instruments/<name>.txt`` with one ``SYMBOL<TAB>start<TAB>end`` line per symbol (dates for ``day``).

    ``name`` is lower-cased, as Qlib's ``D.instruments(name)`` opens ``<name.lower()>.txt``.
    """
    path = store_file(store, "instruments", f"{name.lower()}.txt")
    fmt = _CAL_FORMAT[_check_freq(freq)]
    lines = [f"{sym}\t{pd.Timestamp(a).strftime(fmt)}\t{pd.Timestamp(b).strftime(fmt)}" for sym, (a, b) in spans.items()]
    atomic_write_text(path, "\n".join(lines) + ("\n" if lines else ""))
    return path


def read_instruments(store: Path, name: str = "all") -> dict[str, tuple[pd.Timestamp, pd.Timestamp]]:
    """Read ``instruments/<name>.txt`` into ``{symbol: (first bar, last bar)}`` (empty if absent)."""
    path = Path(store) / "instruments" / f"{name.lower()}.txt"
    if not path.exists():
        return {}
    spans: dict[str, tuple[pd.Timestamp, pd.Timestamp]] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3:
            raise ValueError(f"{path}:{lineno}: expected 'SYMBOL<TAB>start<TAB>end', found {line!r}")
        spans[parts[0]] = (pd.Timestamp(parts[1]), pd.Timestamp(parts[2]))
    return spans


# ---------------------------------------------------------------------------- features
def feature_path(store: Path, symbol: str, field: str, freq: str | None = None) -> Path:
    """Path of one feature file: ``features/<symbol_to_fname(symbol)>/<field>.<freq>.bin`` (``freq``: the store's own).

    The folder is the one Qlib's provider opens (:func:`data_prep.symbols.symbol_to_fname`); a
    symbol that cannot name a folder is refused with :class:`ValueError`, and the path is
    checked to lie inside ``store`` (:func:`store_file`).

    >>> feature_path("/tmp/s", "BRK.B", "close", "day").as_posix(), feature_path("/tmp/s", "CON", "close", "day").name
    ('/tmp/s/features/brk.b/close.day.bin', 'close.day.bin')
    """
    return store_file(store, "features", symbol_to_fname(symbol), f"{field.lower()}.{_freq_of(store, freq)}.bin")


def write_feature(store: Path, symbol: str, field: str, start_index: int, values: np.ndarray,
                  freq: str = FREQ) -> Path:
    """Write one feature file: ``[start_index, values...]`` as little-endian float32."""
    values = np.asarray(values, dtype="<f4")
    buf = np.empty(len(values) + 1, dtype="<f4")
    buf[0] = start_index
    buf[1:] = values
    path = feature_path(store, symbol, field, freq)
    atomic_write_bytes(path, buf)
    return path


def read_feature(store: Path, symbol: str, field: str, freq: str | None = None) -> tuple[int, np.ndarray]:
    """Read one feature file; returns ``(start_index, float32 values)``."""
    path = feature_path(store, symbol, field, freq)
    raw = np.fromfile(path, dtype="<f4")
    if raw.size == 0:
        raise ValueError(f"{path}: expected a start index and values, found an empty file")
    return int(raw[0]), raw[1:]


def write_symbol(store: Path, symbol: str, start_index: int, columns: Mapping[str, np.ndarray],
                 freq: str = FREQ) -> None:
    """Write every field of one symbol, all starting at ``start_index`` with equal length."""
    lengths = {field: len(v) for field, v in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"{symbol}: expected equal-length fields, found lengths {lengths}")
    for field, values in columns.items():
        write_feature(store, symbol, field, start_index, values, freq)


# ---------------------------------------------------------------------------- metadata
def write_meta(store: Path, meta: Mapping) -> Path:
    """Write ``meta.json`` (sorted keys, indented) atomically."""
    path = store_file(store, META_FILE)
    atomic_write_text(path, json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    return path


def read_meta(store: Path) -> dict:
    """Read ``meta.json`` (empty dict when absent)."""
    path = Path(store) / META_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


# ---------------------------------------------------------------------------- commit and publish
#: Written last into a complete store (see "Publishing a store as a whole" above).
COMMIT_FILE = "COMMITTED"
#: ``DIR.staging-<pid>``: where a write builds the next version of ``DIR``.
STAGING_TAG = ".staging-"
#: ``DIR.old-<pid>``: the previous version of ``DIR`` while it is being replaced.
OLD_TAG = ".old-"
#: Test hook: a writer reaching the fault point named by this variable ends its process at once
#: (``os._exit(FAULT_EXIT_CODE)``, no cleanup, as ``kill -9``). Points: ``ingest:calendar_written``
#: (fresh ingest and append, between the calendar and the instrument files),
#: ``synth:symbol_written`` (after the first symbol's feature files), ``publish:old_moved``
#: (between the two renames of a publish).
FAULT_ENV = "DATA_PREP_FAULT_AT"
FAULT_EXIT_CODE = 75
#: What a store consists of (a new version replaces these; other entries of DIR are kept).
STORE_ENTRIES = ("calendars", "instruments", "features", META_FILE, COMMIT_FILE)
_CAL_LINE = len("YYYY-MM-DD HH:MM:SS\n")
#: Bytes per calendar line, by frequency (the lines have a fixed width).
_CAL_LINES = {"1min": _CAL_LINE, "day": len("YYYY-MM-DD\n")}
_RERUN = "re-run the same 'rolling-calib data ingest' (or 'rolling-calib data synth') command to complete it"


class StoreNotCommittedError(ValueError):
    """A store, or an update of it, was not completely written; readers refuse it (the message names it)."""


class StoreBusyError(ValueError):
    """Another live process is writing the same store."""


def _fault_point(name: str) -> None:
    """Test hook: end the process at once, as a kill would (no cleanup), when ``$DATA_PREP_FAULT_AT == name``."""
    if os.environ.get(FAULT_ENV) == name:
        os._exit(FAULT_EXIT_CODE)


def _real(store: str | os.PathLike) -> Path:
    """The store's real path (symbolic links resolved): staging and old versions sit beside it."""
    return Path(os.path.realpath(Path(store).expanduser()))


def _leftovers(target: Path, tag: str) -> list[Path]:
    """``target<tag><pid>`` directories beside ``target`` (oldest first)."""
    if not target.parent.is_dir():
        return []
    prefix = target.name + tag
    found = []
    for p in target.parent.glob(glob.escape(prefix) + "*"):
        if p.name[len(prefix):].isdigit() and not p.is_symlink():
            try:  # a concurrent publish may remove it meanwhile
                found.append((p.stat().st_mtime, p.name, p)) if p.is_dir() else None
            except FileNotFoundError:
                continue
    return [p for _, _, p in sorted(found)]


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _interrupted_message(target: Path, leftover: Path) -> str:
    return (f"{target}: the store was not completely written (an ingest or build was interrupted, or is still "
            f"running: {leftover.name} is left beside it and no commit was published); {_RERUN}")


def _last_bar(cal_path: Path, size: int) -> str:
    """The calendar's last line (a 64-byte read from its end)."""
    with open(cal_path, "rb") as fh:
        fh.seek(max(size - 64, 0))
        tail = fh.read().decode("utf-8", errors="replace").strip().splitlines()
    return tail[-1].strip() if tail else ""


def _line_width(cal_path: Path) -> int:
    return _CAL_LINES.get(cal_path.stem, _CAL_LINE)


def _bar_at(cal_path: Path, index: int) -> str:
    """Calendar line ``index`` (lines have a fixed width)."""
    width = _line_width(cal_path)
    with open(cal_path, "rb") as fh:
        fh.seek(index * width)
        return fh.read(width - 1).decode("utf-8", errors="replace")


def _marker_record(store: Path, writer: str) -> dict:
    cal = calendar_path(store)
    size = cal.stat().st_size
    inst = store / "instruments"
    record = {
        "format": 1,
        "writer": writer,
        "calendar": {"bars": size // _line_width(cal), "bytes": size, "last": _last_bar(cal, size)},
        "instruments": {p.name: p.stat().st_size for p in sorted(inst.glob("*.txt"))} if inst.is_dir() else {},
    }
    if cal.stem != FREQ:
        record["freq"] = cal.stem
    return record


def _marker_problem(store: Path) -> str | None:
    """``None`` when the commit marker matches the files; otherwise what is wrong."""
    path = store / COMMIT_FILE
    if not path.is_file():
        return f"no commit marker {COMMIT_FILE}"
    try:
        marker = json.loads(path.read_text(encoding="utf-8"))
        recorded_cal, recorded_inst = marker["calendar"], marker["instruments"]
    except (ValueError, KeyError, TypeError):
        return f"an unreadable commit marker {COMMIT_FILE}"
    cal = calendar_path(store)
    size = cal.stat().st_size
    if size != recorded_cal.get("bytes") or _last_bar(cal, size) != recorded_cal.get("last"):
        return (f"a stale commit marker ({COMMIT_FILE} records a calendar of {recorded_cal.get('bytes')} bytes to "
                f"{recorded_cal.get('last')}, calendars/{cal.name} has {size} bytes to {_last_bar(cal, size)})")
    for name, nbytes in recorded_inst.items():
        p = store / "instruments" / name
        found = p.stat().st_size if p.is_file() else None
        if found != nbytes:
            return (f"a stale commit marker ({COMMIT_FILE} records instruments/{name} of {nbytes} bytes, "
                    f"found {'none' if found is None else f'{found} bytes'})")
    return None


@dataclass(frozen=True)
class StoreStatus:
    """What :func:`store_status` found.

    Attributes
    ----------
    path : Path
        The store's real path.
    has_calendar : bool
        ``calendars/1min.txt`` exists (otherwise there is no store here).
    committed : bool
        Readable: a matching commit marker, or no marker and a consistent store.
    interrupted_by : Path or None
        A ``DIR.staging-*`` (or, ``DIR`` missing, a ``DIR.old-*``) directory left by a write.
    problem : str or None
        Why the store is not committed (for messages).
    kind : str or None
        ``"no_instruments"``, ``"calendar_ahead"``, ``"instruments_stale"``, ``"meta_stale"`` or
        ``"broken"``: the consistency check that failed.
    has_meta : bool
        ``meta.json`` exists.
    resume_bars : int or None
        For ``kind == "calendar_ahead"`` (an older version's append killed after writing the
        calendar): the bar count of the calendar before that append, when ``meta.json``
        (written last by every older write) records it and the calendar holds that bar.
    """

    path: Path
    has_calendar: bool
    committed: bool
    interrupted_by: Path | None = None
    problem: str | None = None
    kind: str | None = None
    has_meta: bool = False
    resume_bars: int | None = None


def _timestamp(text) -> pd.Timestamp | None:
    try:
        return pd.Timestamp(text)
    except (ValueError, TypeError):
        return None


def _consistency(store: Path) -> tuple[str | None, str | None, int | None]:
    """``(problem, kind, resume_bars)`` of a store without a valid marker; ``(None, None, None)``: consistent."""
    cal = calendar_path(store)
    width = _line_width(cal)
    size = cal.stat().st_size
    if size == 0:
        return "its calendar is empty", "broken", None
    try:
        last = pd.Timestamp(_last_bar(cal, size))
        spans = read_instruments(store, "all")
        meta = read_meta(store)
    except ValueError as exc:  # unreadable instruments, calendar line or meta.json
        return f"a file could not be read ({exc})", "broken", None
    meta_cal = meta.get("calendar") if isinstance(meta, dict) else None
    meta_cal = meta_cal if isinstance(meta_cal, dict) and "last" in meta_cal else None
    if not spans:
        return "instruments/all.txt lists no instrument", "no_instruments", None
    end = max(b for _, b in spans.values())
    if last > end:
        resume = None
        bars = meta_cal.get("bars") if meta_cal is not None else None
        if (isinstance(bars, int) and 0 < bars * width < size and _timestamp(meta_cal["last"]) == end
                and _timestamp(_bar_at(cal, bars - 1)) == end):
            resume = bars
        return (f"its calendar runs to {last} while every instrument in instruments/all.txt ends by {end}",
                "calendar_ahead", resume)
    if last < end:
        return f"instruments/all.txt runs to {end}, past the calendar's last bar {last}", "broken", None
    for p in sorted((store / "instruments").glob("*.txt")):
        if p.stem == "all":
            continue
        for sym, span in read_instruments(store, p.stem).items():
            if spans.get(sym) != span:
                other = "does not list it" if sym not in spans else f"gives {spans[sym][0]} .. {spans[sym][1]}"
                return (f"instruments/{p.name} gives {sym} {span[0]} .. {span[1]} but instruments/all.txt {other}",
                        "instruments_stale", None)
    if meta_cal is not None and (_timestamp(meta_cal["last"]) != last or meta_cal.get("bars", size // width)
                                 != size // width):
        problem = (f"meta.json records a calendar of {meta_cal.get('bars')} bars to {meta_cal['last']}, the calendar "
                   f"has {size // width} bars to {last}")
        return problem, "meta_stale", None
    return None, None, None


def store_status(store_dir: str | os.PathLike) -> StoreStatus:
    """Whether ``store_dir`` holds a completely written store (reads no feature file).

    Decision for stores without a commit marker (older versions wrote none): such a store is
    accepted when consistent -- the calendar's last bar equals the latest instrument end in
    ``instruments/all.txt``, every other ``instruments/*.txt`` agrees with ``all.txt``, and
    ``meta.json`` (optional: hand-made stores have none) records that calendar -- and refused
    otherwise. A store with a ``DIR.staging-*`` directory beside it is refused whatever it
    holds: a write into it was interrupted (or is running) and the data may be missing an update.
    """
    try:
        return _store_status(store_dir)
    except FileNotFoundError:  # read during a concurrent publish's swap: look again
        return _store_status(store_dir)


def _store_status(store_dir: str | os.PathLike) -> StoreStatus:
    target = _real(store_dir)
    staging = _leftovers(target, STAGING_TAG)
    old = _leftovers(target, OLD_TAG) if not target.exists() else []
    interrupted = (staging or old or [None])[-1]
    cal = calendar_path(target)
    if not cal.is_file():
        return StoreStatus(target, False, False, interrupted, "no calendar", None, (target / META_FILE).is_file())
    has_meta = (target / META_FILE).is_file()
    marker = _marker_problem(target)
    if marker is None:
        return StoreStatus(target, True, interrupted is None, interrupted, None, None, has_meta)
    problem, kind, resume = _consistency(target)
    if problem is None:
        return StoreStatus(target, True, interrupted is None, interrupted, None, None, has_meta)
    return StoreStatus(target, True, False, interrupted, f"{marker}, and {problem}", kind, has_meta, resume)


def check_committed(store_dir: str | os.PathLike, *, require_store: bool = True) -> Path | None:
    """Refuse a store that was not completely written; returns its real path.

    Raises
    ------
    StoreNotCommittedError
        A write into the store was interrupted (a ``DIR.staging-*`` directory beside it), or
        the store has no matching commit marker and is inconsistent (see :func:`store_status`).
    ValueError
        ``require_store`` and there is no ``calendars/1min.txt`` (with ``require_store=False``
        a directory without a store and without leftovers returns ``None``: the caller reports it).
    """
    st = store_status(store_dir)
    if st.interrupted_by is not None:
        raise StoreNotCommittedError(_interrupted_message(st.path, st.interrupted_by))
    if not st.has_calendar:
        if require_store:
            raise ValueError(f"{st.path}: expected a Qlib store with calendars/{FREQ}.txt (minute bars) or "
                             "calendars/day.txt (daily bars), found none")
        return None
    if not st.committed:
        raise StoreNotCommittedError(f"{st.path}: the store was not completely written ({st.problem}: an ingest or "
                                     f"build was interrupted); {_RERUN}")
    return st.path


def _fsync_path(path: Path, directory: bool = False) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def commit_store(store_dir: str | os.PathLike, *, writer: str) -> Path:
    """Flush every file of a finished store to disk, then write its commit marker (the last step)."""
    store = Path(store_dir)
    for root, _, files in os.walk(store):
        for name in files:
            _fsync_path(Path(root) / name)
        _fsync_path(Path(root), directory=True)
    path = store_file(store, COMMIT_FILE)
    atomic_write_text(path, json.dumps(_marker_record(store, writer), indent=2, sort_keys=True) + "\n")
    _fsync_path(path)
    _fsync_path(store, directory=True)
    return path


def recover_interrupted(store_dir: str | os.PathLike) -> list[str]:
    """Clear what an interrupted write left beside ``store_dir``, before writing it again.

    A ``DIR.old-*`` directory with ``DIR`` missing (killed between the two renames of a publish)
    is renamed back to ``DIR``: the previous complete store returns. Staging directories and any
    other ``DIR.old-*`` are deleted. Returns one line per action.

    Raises
    ------
    StoreBusyError
        A leftover belongs to a process that is still running.
    """
    target = _real(store_dir)
    staging, old = _leftovers(target, STAGING_TAG), _leftovers(target, OLD_TAG)
    for p in staging + old:
        pid = int(p.name.rsplit("-", 1)[1])
        if _pid_alive(pid):
            raise StoreBusyError(f"{target}: another process (pid {pid}) is writing this store ({p}); wait for it "
                                 f"to finish, or delete {p} if no such write is running")
    notes = []
    if old and not target.exists():
        os.rename(old[-1], target)
        notes.append(f"restored {target} from {old[-1].name}")
        old = old[:-1]
    for p in staging + old:
        shutil.rmtree(p)
        notes.append(f"removed {p}")
    return notes


def _link_tree(src: Path, dst: Path, skip: tuple[str, ...]) -> None:
    """Hard-link every file of ``src`` into ``dst`` (a copy where links fail), except top-level ``skip``."""
    for entry in sorted(os.listdir(src)):
        if entry in skip:
            continue
        s, d = src / entry, dst / entry
        if s.is_symlink():
            os.symlink(os.readlink(s), d)
        elif s.is_dir():
            d.mkdir()
            _link_tree(s, d, ())
        else:
            try:
                os.link(s, d)
            except OSError:
                shutil.copy2(s, d)


def _publish(staging: Path, target: Path) -> None:
    """Swap ``staging`` into ``target`` with two renames; the previous version is removed after."""
    old = None
    if target.exists():
        old = target.with_name(f"{target.name}{OLD_TAG}{os.getpid()}")
        if old.exists():
            shutil.rmtree(old)
        os.rename(target, old)
        _fault_point("publish:old_moved")
    try:
        os.rename(staging, target)
    except BaseException:
        if old is not None and not target.exists():
            os.rename(old, target)
        raise
    _fsync_path(target.parent, directory=True)
    if old is not None:  # published: a leftover old version is cleared by the next write (recover_interrupted)
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def staged_write(store_dir: str | os.PathLike, *, keep: bool, writer: str) -> Iterator[Path]:
    """Write the next version of a store beside it and publish it as a whole.

    Yields the staging directory ``DIR.staging-<pid>``: with ``keep`` a hard-linked copy of the
    current store (write changed files as new files -- :func:`atomic_write_bytes` does -- never
    in place: the links are the published store's files), otherwise empty but for the entries of
    ``DIR`` that are not part of a store (:data:`STORE_ENTRIES`), which are kept. When the block
    ends normally every file is flushed, the commit marker written (:func:`commit_store`) and the
    staging directory swapped into place; when it raises, the staging directory is deleted and
    ``DIR`` is untouched. Call :func:`recover_interrupted` first.
    """
    target = _real(store_dir)
    if target.exists() and not target.is_dir():
        raise ValueError(f"{target}: expected a store directory, found a file")
    staging = target.with_name(f"{target.name}{STAGING_TAG}{os.getpid()}")
    if staging.exists():
        shutil.rmtree(staging)
    try:
        staging.mkdir(parents=True)
    except PermissionError as exc:
        raise ValueError(f"{target}: cannot create {staging.name} beside it (a store is written beside itself, "
                         f"then swapped in): {exc}") from exc
    try:
        if target.is_dir():
            shutil.copymode(target, staging)
            _link_tree(target, staging, () if keep else STORE_ENTRIES)
            (staging / COMMIT_FILE).unlink(missing_ok=True)
        yield staging
        commit_store(staging, writer=writer)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _publish(staging, target)


# ---------------------------------------------------------------------------- qlib
def init_qlib(store_dir: str | os.PathLike, **kwargs) -> None:
    """Initialise Qlib on a minute store written by this package.

    Equivalent to ``qlib.init(provider_uri={"1min": str(store_dir)}, region="us",
    expression_cache=None, dataset_cache=None, kernels=1, **kwargs)``; keyword arguments
    override these defaults. Afterwards read with ``freq="1min"``::

        from qlib.data import D
        D.features(D.instruments("us25"), ["$close", "$vwap"], "2018-01-02", "2018-01-03", freq="1min")

    Parameters
    ----------
    store_dir : path
        A directory written by :func:`data_prep.build_synthetic_store` or ``rolling-calib data ingest``.
    **kwargs
        Passed on to ``qlib.init``.

    Raises
    ------
    StoreNotCommittedError
        The store was not completely written (:func:`check_committed`).
    ValueError
        ``store_dir`` holds no ``calendars/1min.txt``.
    """
    import qlib

    store = check_committed(store_dir)
    options = dict(
        provider_uri={store_freq(store): str(store)},
        region="us",
        expression_cache=None,
        dataset_cache=None,
        kernels=1,
    )
    options.update(kwargs)
    qlib.init(**options)



def store_info(store_dir: str | os.PathLike) -> dict:
    """Summarise a store: calendar span, instruments per universe file, fields, metadata.

    Raises
    ------
    StoreNotCommittedError
        When the store was not completely written (see :func:`check_committed`).
    ValueError
        When ``store_dir`` holds no ``calendars/1min.txt``.
    """
    check_committed(store_dir)
    store = Path(store_dir)
    freq = store_freq(store)
    cal = read_calendar(store, freq)
    days = np.unique(np.asarray(cal, dtype="datetime64[D]")) if len(cal) else np.array([])
    instruments = {
        p.stem: sorted(read_instruments(store, p.stem)) for p in sorted((store / "instruments").glob("*.txt"))
    }
    fields = sorted(
        {p.name.split(".")[0] for p in (store / "features").glob(f"*/*.{freq}.bin")}
    ) if (store / "features").exists() else []
    meta = read_meta(store)
    return {
        "store": str(store),
        "source": meta.get("source", "unknown"),
        "freq": freq,
        "calendar": {
            "bars": len(cal),
            "sessions": len(days),
            "first": str(cal[0]) if len(cal) else None,
            "last": str(cal[-1]) if len(cal) else None,
        },
        "instruments": instruments,
        "fields": fields,
        "meta": meta,
    }
