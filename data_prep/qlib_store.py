"""Qlib's binary provider layout, written and read at speed.

Layout of a store directory (what ``qlib.init(provider_uri={"1min": DIR}, region="us")`` reads)::

    DIR/calendars/1min.txt                 one bar per line, "YYYY-MM-DD HH:MM:SS", naive NY time
    DIR/instruments/all.txt                "SYMBOL<TAB>first bar<TAB>last bar" per symbol
    DIR/instruments/us25.txt               same, for the named universe (METHOD 3.3's 25 stocks)
    DIR/features/<symbol>/<field>.1min.bin little-endian float32; value 0 is the index in the
                                           calendar of the first bar, then one value per bar
    DIR/meta.json                          how the store was made (source, seed, counts, ...)

Feature directories are lower-case (``features/aapl/close.1min.bin``): Qlib lower-cases the
instrument name when it opens a feature file; the instrument files keep the upper-case symbol.
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

Atomic writes: every file is written to a temporary name in its directory and moved in place
with ``os.replace``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "FREQ",
    "FIELDS",
    "UNIVERSE_NAME",
    "META_FILE",
    "atomic_write_bytes",
    "atomic_write_text",
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
]

FREQ = "1min"
#: Fields written for every symbol (Qlib's handlers read $open ... $vwap, $factor).
FIELDS: tuple[str, ...] = ("open", "high", "low", "close", "volume", "vwap", "factor")
#: Name of the universe file of METHOD 3.3's 25 stocks.
UNIVERSE_NAME = "us25"
META_FILE = "meta.json"


# ---------------------------------------------------------------------------- atomic writes
def atomic_write_bytes(path: Path, data: bytes | np.ndarray) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same directory, then ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, np.ndarray):
                data.tofile(fh)
            else:
                fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


# ---------------------------------------------------------------------------- calendar
def format_calendar(minutes: pd.DatetimeIndex | np.ndarray) -> np.ndarray:
    """Format bar times as Qlib's calendar lines ``"YYYY-MM-DD HH:MM:SS"`` (vectorised).

    Example
    -------
    >>> format_calendar(pd.DatetimeIndex(["2018-01-02 09:30"])).tolist()
    ['2018-01-02 09:30:00']
    """
    import polars as pl

    values = pl.Series("t", np.asarray(minutes, dtype="datetime64[us]"))
    return values.dt.strftime("%Y-%m-%d %H:%M:%S").to_numpy()


def write_calendar(store: Path, minutes: pd.DatetimeIndex) -> Path:
    """Write ``calendars/1min.txt``; returns its path."""
    path = Path(store) / "calendars" / f"{FREQ}.txt"
    lines = format_calendar(minutes)
    atomic_write_text(path, "\n".join(lines.tolist()) + ("\n" if len(lines) else ""))
    return path


def read_calendar(store: Path) -> pd.DatetimeIndex:
    """Read ``calendars/1min.txt`` back as a naive DatetimeIndex (empty if the file is absent)."""
    path = Path(store) / "calendars" / f"{FREQ}.txt"
    if not path.exists():
        return pd.DatetimeIndex([], name="datetime")
    text = path.read_text(encoding="utf-8").split()
    # lines are "date time": split() yields date and time tokens alternately
    if len(text) % 2:
        raise ValueError(f"{path}: expected lines 'YYYY-MM-DD HH:MM:SS', found an odd token count {len(text)}")
    joined = np.char.add(np.char.add(np.array(text[0::2]), "T"), np.array(text[1::2]))
    return pd.DatetimeIndex(joined.astype("datetime64[s]").astype("datetime64[ns]"), name="datetime")


# ---------------------------------------------------------------------------- instruments
def write_instruments(store: Path, name: str, spans: Mapping[str, tuple[pd.Timestamp, pd.Timestamp]]) -> Path:
    """Write ``instruments/<name>.txt`` with one ``SYMBOL<TAB>start<TAB>end`` line per symbol."""
    path = Path(store) / "instruments" / f"{name}.txt"
    lines = [
        f"{sym}\t{pd.Timestamp(a):%Y-%m-%d %H:%M:%S}\t{pd.Timestamp(b):%Y-%m-%d %H:%M:%S}"
        for sym, (a, b) in spans.items()
    ]
    atomic_write_text(path, "\n".join(lines) + ("\n" if lines else ""))
    return path


def read_instruments(store: Path, name: str = "all") -> dict[str, tuple[pd.Timestamp, pd.Timestamp]]:
    """Read ``instruments/<name>.txt`` into ``{symbol: (first bar, last bar)}`` (empty if absent)."""
    path = Path(store) / "instruments" / f"{name}.txt"
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
def feature_path(store: Path, symbol: str, field: str) -> Path:
    """Path of one feature file (Qlib lower-cases instrument and field names)."""
    return Path(store) / "features" / symbol.lower() / f"{field.lower()}.{FREQ}.bin"


def write_feature(store: Path, symbol: str, field: str, start_index: int, values: np.ndarray) -> Path:
    """Write one feature file: ``[start_index, values...]`` as little-endian float32."""
    values = np.asarray(values, dtype="<f4")
    buf = np.empty(len(values) + 1, dtype="<f4")
    buf[0] = start_index
    buf[1:] = values
    path = feature_path(store, symbol, field)
    atomic_write_bytes(path, buf)
    return path


def read_feature(store: Path, symbol: str, field: str) -> tuple[int, np.ndarray]:
    """Read one feature file; returns ``(start_index, float32 values)``."""
    path = feature_path(store, symbol, field)
    raw = np.fromfile(path, dtype="<f4")
    if raw.size == 0:
        raise ValueError(f"{path}: expected a start index and values, found an empty file")
    return int(raw[0]), raw[1:]


def write_symbol(store: Path, symbol: str, start_index: int, columns: Mapping[str, np.ndarray]) -> None:
    """Write every field of one symbol, all starting at ``start_index`` with equal length."""
    lengths = {field: len(v) for field, v in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"{symbol}: expected equal-length fields, found lengths {lengths}")
    for field, values in columns.items():
        write_feature(store, symbol, field, start_index, values)


# ---------------------------------------------------------------------------- metadata
def write_meta(store: Path, meta: Mapping) -> Path:
    """Write ``meta.json`` (sorted keys, indented) atomically."""
    path = Path(store) / META_FILE
    atomic_write_text(path, json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    return path


def read_meta(store: Path) -> dict:
    """Read ``meta.json`` (empty dict when absent)."""
    path = Path(store) / META_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


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
    """
    import qlib

    store = Path(store_dir).expanduser().resolve()
    cal = store / "calendars" / f"{FREQ}.txt"
    if not cal.exists():
        raise ValueError(f"{store}: expected a Qlib minute store with calendars/{FREQ}.txt, found none")
    options = dict(
        provider_uri={FREQ: str(store)},
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
    ValueError
        When ``store_dir`` holds no ``calendars/1min.txt``.
    """
    store = Path(store_dir)
    if not (store / "calendars" / f"{FREQ}.txt").exists():
        raise ValueError(f"{store}: expected a Qlib minute store with calendars/{FREQ}.txt, found none")
    cal = read_calendar(store)
    days = np.unique(np.asarray(cal, dtype="datetime64[D]")) if len(cal) else np.array([])
    instruments = {
        p.stem: sorted(read_instruments(store, p.stem)) for p in sorted((store / "instruments").glob("*.txt"))
    }
    fields = sorted(
        {p.name.split(".")[0] for p in (store / "features").glob(f"*/*.{FREQ}.bin")}
    ) if (store / "features").exists() else []
    meta = read_meta(store)
    return {
        "store": str(store),
        "source": meta.get("source", "unknown"),
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
