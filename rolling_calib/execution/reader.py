"""The one reader of a result store's unit files: a run's predictions and labels as arrays.

Scoring, diagnostics, meta-evaluation, the report and tracking read units only through this
module. A *run* is one seed of one pipeline: its windows' units merged over the evaluation span.
:func:`read_run` checks what every number relies on:

* every window's unit is complete (:func:`rolling_calib.execution.store.unit_status`);
* each unit's rows lie inside its window's test segment, windows do not overlap, and no
  (datetime, instrument) pair repeats;
* the requested label kind is stored (``label`` holds the kind ``rolling.label`` names; a second
  column ``label_learn`` / ``label_raw`` the other kind where it differs, as the sidecar's
  ``label_columns`` records). Rows without a value of the requested label (a learned label that
  ``DropnaLabel`` dropped) are left out and counted (``RunArrays.dropped``).

A run's backtest (the workflow's backtest over its joined windows, ``STORE/backtests/``) is read
by :func:`read_backtest`, checked against its sidecar's hashes and checksum the same way;
:func:`read_predictions` gives the joined predictions it runs on (every row, labelled or not).

Every unit file is opened by :func:`_open_parquet` (one place, so a check of the file's
content applies to every read): it maps the file into memory, checks its bytes against the SHA-256
the unit's sidecar records and parses that buffer; a mismatch or an undecodable file raises
:class:`~rolling_calib.execution.store.CorruptUnitError` naming the file and the fix (a unit
written before the checksums is read unchecked). Units are read with column projection, instrument ids as
dictionary codes, without a per-run DataFrame; units with time-zone-aware or non-timestamp dates
go through pandas instead (the same checks).

Every function takes the store as one value, the :class:`~rolling_calib.execution.store.Store` handle
(a path is opened once: its manifest read and parsed).

Example
-------
>>> store = Store.open(example_store)
>>> run = read_run(store, "wd0", 0)
>>> len(run.test.prediction) == len(run.test.label), run.label, run.test.dropped
(True, 'raw', 0)
>>> load_run(example_store, "wd0", 0).columns.tolist()
['datetime', 'instrument', 'prediction', 'label']
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rolling_calib.core.schedule import CoverageError, Window
from rolling_calib.execution import store as st
from rolling_calib.execution.manifest import Checksum, Sidecar
from rolling_calib.execution.store import Store
from rolling_calib.execution.units import UnitKey

__all__ = ["MissingLabelError", "MissingValidationError", "RunArrays", "RunData", "load_run", "read_backtest",
           "read_predictions", "read_run", "read_unit", "run_windows"]


class MissingValidationError(ValueError):
    """A store without validation-period predictions was asked for ``source='validation'``."""


class MissingLabelError(ValueError):
    """A unit does not hold the label kind asked for (the message names the store and the fix)."""


@dataclass
class RunArrays:
    """One run's predictions as arrays (no per-run frame).

    ``codes`` index ``names`` (the instrument ids, in the order the units' dictionaries list them);
    -1 marks a missing id. ``label`` holds the requested label kind; ``dropped`` counts the rows
    left out because they have no value of it.
    """

    datetime: np.ndarray
    prediction: np.ndarray
    label: np.ndarray
    codes: np.ndarray
    names: np.ndarray
    window: np.ndarray | None = None   # index of the window (model) of every row
    dropped: int = 0

    @property
    def instruments(self) -> pd.Categorical:
        return pd.Categorical.from_codes(self.codes, categories=pd.Index(self.names))

    def frame(self) -> pd.DataFrame:
        """The columns of :func:`load_run` as a frame over the arrays (no copy of the numbers)."""
        return pd.DataFrame({"datetime": self.datetime, "instrument": self.instruments,
                             "prediction": self.prediction, "label": self.label}, copy=False)


@dataclass
class RunData:
    """One run's test predictions (``test``), its windows' validation predictions if asked (``valid``), the label kind."""

    test: RunArrays
    valid: RunArrays | None = None
    label: str = "raw"


# --------------------------------------------------------------------------- layout
def run_windows(store: Store, pipeline: str) -> list[Window]:
    """The pipeline's windows from the manifest; ``CoverageError`` when two test segments overlap."""
    windows = list(store.pipeline(pipeline).windows)
    for prev, nxt in itertools.pairwise(windows):
        if nxt.test.start <= prev.test.end:
            raise CoverageError(f"{store.root}: windows {prev.index} and {nxt.index} overlap")
    return windows


def _column_of(store: Store, key: UnitKey, side: Sidecar, kind: str) -> str:
    """The column holding label ``kind`` in unit ``key`` (:class:`MissingLabelError` naming the fix if none)."""
    columns = side.columns(store.manifest.stored_label_kind)
    if kind in columns:
        return columns[kind]
    have = ", ".join(columns)
    raise MissingLabelError(
        f"{store.root}: unit {key.slug()} holds no {kind} label (it holds: {have}; it was written before both labels "
        f"were stored, or its handler has no {kind} label); score it with --label {next(iter(columns))}, or re-run "
        f"the store (rolling-calib run, which retrains its units) to store the {kind} label")


# --------------------------------------------------------------------------- one unit file
def _open_parquet(store: Path, path: Path, *, expected: Checksum | None, columns: list[str] | None, dictionary: bool,
                  what: str = "unit file", required: tuple[str, ...] | None = None):
    """The one place a unit's Parquet file is opened: the pyarrow table of ``columns`` (all when None).

    The file is mapped into memory (its pages in the page cache, not copied), its bytes checked
    against the checksum its sidecar records (``expected``: XXH3-128, or SHA-256; None for a unit written before the
    checksums) and that same buffer parsed: one pass over the file's bytes, and the bytes hashed
    are the bytes parsed (the store replaces a file by renaming a new one over it, never in place,
    so a mapped file does not change while it is read). ``dictionary``: read ``instrument`` as
    dictionary codes. Refuses a file without the unit columns (``required``: other columns, for
    another kind of file).

    Raises
    ------
    CorruptUnitError
        The bytes do not match ``expected``, or pyarrow cannot decode them (truncated file,
        damaged page); the message names the file and the fix.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    # mapped, not read: a read copies every byte into a fresh bytes object first. Closing the map leaves any
    # buffer pyarrow still holds valid (each holds the mapping until it is freed).
    with pa.memory_map(str(path)) as mapped:
        data = mapped.read_buffer()
        st.verify_unit_bytes(store, path, data, expected, what=what)
        try:
            source = pq.ParquetFile(pa.BufferReader(data), read_dictionary=["instrument"] if dictionary else None)
            names = source.schema_arrow.names
        except Exception as exc:  # ArrowInvalid, OSError ("Corrupt snappy compressed data"), ...: name the file
            raise st.unreadable_parquet(store, path, exc) from exc
        wanted = list(required) if required is not None else list(st.UNIT_COLUMNS) if columns is None else columns
        missing = [c for c in wanted if c not in names]
        if missing:
            raise ValueError(f"{path}: expected columns {', '.join(wanted)}, missing {', '.join(missing)}")
        try:
            return source.read(columns=columns)
        except Exception as exc:
            raise st.unreadable_parquet(store, path, exc) from exc


def read_unit(store: Store | str | Path, key: UnitKey, *, column: str = "label", sidecar: Sidecar | None = None
              ) -> pd.DataFrame:
    """One unit's predictions as a frame: :data:`~rolling_calib.execution.store.UNIT_COLUMNS`, ``label`` from ``column``.

    A second label column may hold NaN where that label has no value (:func:`load_run` leaves such rows out).
    The file is checked against the checksum of ``sidecar`` (read when not given). ``store``: the handle or the
    store's directory (a unit is read without its manifest).
    """
    root = store.root if isinstance(store, Store) else Path(store)
    path = st.unit_paths(root, key).parquet
    if not path.is_file():
        raise ValueError(f"{path}: unit file missing (run 'rolling-calib run' to complete the store)")
    side = (st.sidecar(root, key) or Sidecar()) if sidecar is None else sidecar
    frame = _open_parquet(root, path, expected=side.read_checksum(), columns=None, dictionary=False).to_pandas()
    if column not in frame.columns:
        raise ValueError(f"{path}: expected a column {column!r}, found {', '.join(frame.columns)}")
    if column != "label":
        frame = frame.assign(label=frame[column])
    return frame[list(st.UNIT_COLUMNS)]


class _LegacyRead(Exception):
    """A unit whose columns the array reader does not take as they are (time zones, non-timestamp dates)."""


def _read_unit_arrays(store: Path, path: Path, names: dict[Any, int], column: str, *, expected: Checksum | None,
                      what: str = "unit file") -> tuple[np.ndarray, ...]:
    """Datetime, prediction, label (from ``column``) and instrument codes of one unit file; ``names`` collects ids.

    ``expected``: the file's recorded checksum (:func:`_open_parquet` checks it).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    table = _open_parquet(store, path, expected=expected, columns=["datetime", "instrument", "prediction", column],
                          dictionary=True, what=what)
    when = table.column("datetime")
    if not pa.types.is_timestamp(when.type) or when.type.tz is not None:
        raise _LegacyRead(path)
    ids = table.column("instrument").combine_chunks()
    if not pa.types.is_dictionary(ids.type):
        ids = ids.dictionary_encode()
    remap = np.array([names.setdefault(v, len(names)) for v in ids.dictionary.to_pylist()] + [-1], dtype=np.int32)
    if not ids.indices.null_count and np.array_equal(remap[:-1], np.arange(len(remap) - 1)):
        codes = ids.indices.to_numpy().astype(np.int32, copy=False)   # the run's codes already: no gather
    else:
        codes = remap[pc.fill_null(ids.indices, -1).to_numpy()]   # a missing id (-1) picks the -1 at the end
    label = table.column(column).to_numpy(zero_copy_only=False)
    return (when.to_numpy(), table.column("prediction").to_numpy(), label, codes)


def _rows_outside(times: np.ndarray, window: Window, *, ordered: bool = False) -> int:
    """Rows of ``times`` outside the window's test segment (bounds first: one pass when all are inside).

    ``ordered``: the times are known to be ascending (:func:`_in_written_order`), so the bounds are the first
    and last rows (no pass at all when every row is inside).
    """
    ticks = times.view(np.int64)
    if not len(ticks):
        return 0
    unit = np.datetime_data(times.dtype)[0]
    bounds = (ticks[0], ticks[-1]) if ordered else (ticks.min(), ticks.max())
    first, last = (pd.Timestamp(np.datetime64(int(v), unit)) for v in bounds)
    if first >= window.test.start and last <= window.test.end:
        return 0
    return int((~window.test.contains(times)).sum())


def _in_written_order(times: np.ndarray, codes: np.ndarray) -> bool:
    """Whether every row is at a later time than the one before, or at the same time with a higher instrument code:
    the order units are written in (then no (datetime, instrument) pair repeats, and the times ascend)."""
    t = times.view(np.int64)
    if len(t) < 2:
        return True
    in_order = (t[1:] == t[:-1]) & (codes[1:] > codes[:-1])
    in_order |= t[1:] > t[:-1]
    return bool(in_order.all())


def _duplicate_rows(times: np.ndarray, codes: np.ndarray, *, ordered: bool | None = None) -> int:
    """Rows repeating an earlier (datetime, instrument) pair of the same unit.

    Rows in the order units are written in (:func:`_in_written_order`; ``ordered``: that check's
    result when already known) have none; otherwise the pairs are sorted as one integer key.
    """
    t = times.view(np.int64)
    if len(t) < 2 or (_in_written_order(times, codes) if ordered is None else ordered):
        return 0
    lo, span, width = int(t.min()), int(t.max()) - int(t.min()), int(codes.max()) + 2
    if (span + 1) * width < 2**62:
        key = (t - lo) * width + (codes.astype(np.int64) + 1)
        key.sort()
        return int((key[1:] == key[:-1]).sum())
    return int(pd.DataFrame({"t": t, "c": codes}).duplicated().sum())


def _complete_sidecar(store: Store, key: UnitKey) -> Sidecar:
    """The sidecar of a complete unit; ``ValueError`` naming the unit when it is missing or stale.

    Its files' checksums are checked as they are read (:func:`_open_parquet`), not here: one read.
    """
    status = store.unit_status(key, verify=False)
    if not status.complete:
        raise ValueError(status.problem(store.root))
    return status.sidecar  # type: ignore[return-value]


def _labelled(arrays: RunArrays) -> RunArrays:
    """``arrays`` without the rows that have no label value (NaN), which are counted in ``dropped``."""
    missing = np.isnan(arrays.label)
    if not missing.any():
        return arrays
    keep = ~missing
    return RunArrays(datetime=arrays.datetime[keep], prediction=arrays.prediction[keep], label=arrays.label[keep],
                     codes=arrays.codes[keep], names=arrays.names,
                     window=None if arrays.window is None else arrays.window[keep],
                     dropped=arrays.dropped + int((~keep).sum()))


# --------------------------------------------------------------------------- a run
def _read_test(store: Store, pipeline: str, seed: int, *, kind: str) -> RunArrays:
    """:func:`load_run` as arrays: the same checks and errors, Parquet read with column projection.

    Raises ``_LegacyRead`` for units the arrays do not represent as they are (then use :func:`load_run`).
    """
    windows = run_windows(store, pipeline)
    names: dict[Any, int] = {}
    parts = []
    window_ids: list[int] = []
    duplicates = 0
    for w in windows:
        key = UnitKey(pipeline, int(seed), w.index)
        side = _complete_sidecar(store, key)
        path = store.unit_paths(key).parquet
        part = _read_unit_arrays(store.root, path, names, _column_of(store, key, side, kind),
                                 expected=side.read_checksum())
        ordered = _in_written_order(part[0], part[3])
        outside = _rows_outside(part[0], w, ordered=ordered)
        if outside:
            raise CoverageError(f"{path}: {outside} rows outside test segment {w.test.as_tuple()}")
        # windows do not overlap and rows lie in their window: duplicates can only be within a unit
        duplicates += _duplicate_rows(part[0], part[3], ordered=ordered)
        parts.append(part)
        window_ids.append(w.index)
    if duplicates:
        raise CoverageError(f"{store.root}: run {pipeline}/seed{seed} has {duplicates} duplicate (datetime, instrument) "
                            f"rows")
    if len({p[0].dtype for p in parts}) > 1:
        raise _LegacyRead(store.root)
    return _merged(parts, names, window_ids)


def _concatenated_columns(parts: list[tuple[np.ndarray, ...]]) -> list[np.ndarray]:
    """``[np.concatenate([p[i] for p in parts]) for i in ...]`` (the same values), the columns side by side in one
    allocation (each 8-byte aligned).

    One block of a run's size instead of one per column, for the allocator: glibc's malloc maps a
    block above its threshold afresh (a page fault per page when first written) and unmaps it when
    freed, and freeing such a block raises the threshold to its size (up to 32 MiB). After one
    run-sized block, the next runs' blocks and the scoring's temporaries come from memory already
    mapped (on the 32-run bench store: 80-120k page faults while scoring, 50-60k with one block).
    """
    width = len(parts[0]) if parts else 4
    dtypes = [np.result_type(*[p[i] for p in parts]) for i in range(width)] if parts else []
    if not parts or any(d.hasobject for d in dtypes):
        return [np.concatenate([p[i] for p in parts]) for i in range(width)]
    n = sum(len(p[0]) for p in parts)
    sizes = [-(-n * d.itemsize // 8) * 8 for d in dtypes]
    block = np.empty(sum(sizes), dtype=np.uint8)
    offsets = np.cumsum([0, *sizes])
    return [np.concatenate([p[i] for p in parts], out=block[offsets[i]:offsets[i] + n * d.itemsize].view(d))
            for i, d in enumerate(dtypes)]


def _merged(parts: list[tuple[np.ndarray, ...]], names: dict[Any, int], window_ids: list[int]) -> RunArrays:
    """One run's arrays from its units' (datetime, prediction, label, codes), in window order, labelled rows only."""
    columns = _concatenated_columns(parts)
    window = np.empty(len(columns[0]), dtype=np.int64)   # each unit's window id over its rows (a fill, not a repeat)
    at = 0
    for index, part in zip(window_ids, parts):
        window[at:at + len(part[0])] = index
        at += len(part[0])
    return _labelled(RunArrays(datetime=columns[0], prediction=columns[1].astype(float, copy=False),
                               label=columns[2].astype(float, copy=False), codes=columns[3],
                               names=np.array(list(names), dtype=object), window=window))


def load_run(store: Store | str | Path, pipeline: str, seed: int, *, label: str | None = None) -> pd.DataFrame:
    """Merged predictions of one run (columns ``datetime, instrument, prediction, label``), checked for coverage.

    Every window's unit must be complete with the pipeline's current config hash; each unit's
    rows must lie inside its window's test segment, and the merged frame must have no duplicate
    (datetime, instrument). ``label``: the kind to read (default: the store's ``rolling.label``);
    rows without a value of it are left out, counted in ``frame.attrs["dropped"]``.

    Raises
    ------
    ValueError
        A unit is missing or stale (message names it); :class:`MissingLabelError` when a unit
        does not hold the label kind.
    CoverageError
        Rows outside their window, overlapping windows or duplicates.
    """
    store = Store.of(store)
    kind = store.label_kind([pipeline], label)
    windows = run_windows(store, pipeline)
    frames = []
    for w in windows:
        key = UnitKey(pipeline, int(seed), w.index)
        side = _complete_sidecar(store, key)
        frame = read_unit(store, key, column=_column_of(store, key, side, kind), sidecar=side)
        outside = ~w.test.contains(frame["datetime"])
        if outside.any():
            raise CoverageError(f"{store.unit_paths(key).parquet}: {int(outside.sum())} rows outside test "
                                f"segment {w.test.as_tuple()}")
        frames.append(frame)
    merged = pd.concat(frames, ignore_index=True)
    dup = merged.duplicated(["datetime", "instrument"])
    if dup.any():
        raise CoverageError(f"{store.root}: run {pipeline}/seed{seed} has {int(dup.sum())} duplicate (datetime, "
                            f"instrument) rows")
    unlabelled = merged["label"].isna()
    if unlabelled.any():
        merged = merged[~unlabelled].reset_index(drop=True)
    merged.attrs["dropped"] = int(unlabelled.sum())
    return merged


def _frame_arrays(frame: pd.DataFrame, windows: list[Window]) -> RunArrays:
    """A frame of :func:`load_run` as arrays (instrument codes, the window of every row)."""
    codes, names = pd.factorize(frame["instrument"], use_na_sentinel=True)
    window = np.full(len(frame), -1, dtype=np.int64)
    for w in windows:
        window[np.asarray(w.test.contains(frame["datetime"]))] = w.index
    return RunArrays(datetime=frame["datetime"].to_numpy(), prediction=frame["prediction"].to_numpy(dtype=float),
                     label=frame["label"].to_numpy(dtype=float), codes=codes.astype(np.int32),
                     names=np.asarray(names, dtype=object), window=window)


def _read_valid(store: Store, pipeline: str, seed: int, *, kind: str) -> RunArrays:
    """The validation predictions of every window of a run (``wNN.valid.parquet``).

    Raises :class:`MissingValidationError` naming the store when a unit has none.
    """
    names: dict[Any, int] = {}
    parts, window_ids = [], []
    for w in store.pipeline(pipeline).windows:
        key = UnitKey(pipeline, int(seed), w.index)
        side = store.sidecar(key) or Sidecar()
        path = store.unit_paths(key).valid_parquet
        if side.valid_rows is None or not path.is_file():
            why = ("its windows have no validation segment" if w.valid is None else
                   "it was written before validation predictions were stored")
            raise MissingValidationError(
                f"{store.root}: source 'validation' needs each window's validation-period predictions, but unit "
                f"{key.slug()} has none ({why}); use source 'previous' (compare --source previous), or re-run "
                f"the store with a valid segment in rolling: to store them")
        column = _column_of(store, key, side, kind)
        expected = side.read_checksum(valid=True)
        try:
            part = _read_unit_arrays(store.root, path, names, column, expected=expected, what="validation file")
        except _LegacyRead:
            frame = _open_parquet(store.root, path, expected=expected, columns=None, dictionary=False,
                                  what="validation file").to_pandas()
            part = (frame["datetime"].dt.tz_localize(None).to_numpy() if frame["datetime"].dt.tz is not None
                    else frame["datetime"].to_numpy(), frame["prediction"].to_numpy(), frame[column].to_numpy(),
                    np.array([names.setdefault(v, len(names)) for v in frame["instrument"]], dtype=np.int32))
        parts.append(part)
        window_ids.append(w.index)
    return _merged(parts, names, window_ids)


def read_run(store: Store | str | Path, pipeline: str, seed: int, *, label: str | None = None,
             validation: bool = False) -> RunData:
    """One run's predictions as arrays (:func:`load_run`'s checks), with its validation predictions if asked.

    Parameters
    ----------
    store : Store or path
        The store (a path is opened: its manifest read).
    pipeline : str
    seed : int
    label : {"raw", "learn"}, optional
        The label kind to read (default: the store's ``rolling.label``).
    validation : bool
        Also read each window's validation predictions (``RunData.valid``).

    Raises
    ------
    ValueError
        A unit is missing or stale; :class:`MissingLabelError` when a unit does not hold the label
        kind; :class:`MissingValidationError` when ``validation`` is set and a unit has no stored
        validation predictions.
    CoverageError
        Rows outside their window, overlapping windows or duplicates.
    """
    store = Store.of(store)
    kind = store.label_kind([pipeline], label)
    try:
        test = _read_test(store, pipeline, seed, kind=kind)
    except _LegacyRead:  # time-zone-aware or non-timestamp dates: through pandas
        frame = load_run(store, pipeline, seed, label=kind)
        test = _frame_arrays(frame, list(store.pipeline(pipeline).windows))
        test.dropped = frame.attrs["dropped"]
        test.datetime = frame["datetime"]  # keeps the time zone: dates are read in local time
    valid = _read_valid(store, pipeline, seed, kind=kind) if validation else None
    return RunData(test=test, valid=valid, label=kind)


# --------------------------------------------------------------------------- the backtest of a run
def read_predictions(store: Store | str | Path, pipeline: str, seed: int) -> pd.Series:
    """One run's predictions joined over its windows, indexed ``(datetime, instrument)``: every row, labelled or not.

    What Qlib's ``RollingEnsemble`` gives a rolling run (the windows' ``pred.pkl`` concatenated in
    time order), with :func:`load_run`'s checks (complete units, rows inside their windows, no
    duplicate row). ``store``: the store's handle (a path is opened: its manifest read).
    """
    store = Store.of(store)
    frames = []
    for w in run_windows(store, pipeline):
        key = UnitKey(pipeline, int(seed), w.index)
        side = _complete_sidecar(store, key)
        path = store.unit_paths(key).parquet
        frame = _open_parquet(store.root, path, expected=side.read_checksum(),
                              columns=["datetime", "instrument", "prediction"], dictionary=False).to_pandas()
        outside = ~w.test.contains(frame["datetime"])
        if outside.any():
            raise CoverageError(f"{path}: {int(outside.sum())} rows outside test segment {w.test.as_tuple()}")
        frames.append(frame)
    joined = pd.concat(frames, ignore_index=True)
    if joined.duplicated(["datetime", "instrument"]).any():
        raise CoverageError(f"{store.root}: run {pipeline}/seed{seed} has duplicate (datetime, instrument) rows")
    series = joined.set_index(["datetime", "instrument"])["prediction"].astype(float).sort_index()
    return series


def read_backtest(store: Store | str | Path, pipeline: str, seed: int) -> pd.DataFrame | None:
    """One run's daily backtest report (:data:`~rolling_calib.qlib_adapter.backtest.BACKTEST_COLUMNS`), or ``None``
    when the pipeline has no backtest (no ``PortAnaRecord``, a minute store, or one the plan did not run).

    ``store``: the store's handle (a path is opened: its manifest read); the report is
    ``STORE/backtests/<pipeline>/seed<k>.parquet`` (:meth:`~rolling_calib.core.store_layout.StoreLayout.backtest_paths`).

    Raises
    ------
    ValueError
        The backtest is missing, stale (a backtest setting changed) or outdated (its units were
        retrained): the message names it and the fix.
    CorruptUnitError
        Its file does not match the SHA-256 its sidecar records, or is not readable Parquet.
    """
    from rolling_calib.execution.backtests import backtest_inputs, backtest_status

    store = Store.of(store)
    entry = store.pipeline(pipeline)
    recorded = entry.backtest
    if not recorded.get("spec"):   # none, or not run (a strategy that holds the whole universe)
        return None
    inputs = backtest_inputs(store.root, pipeline, seed, list(entry.window_indices), entry.config_hash)
    status = backtest_status(store.root, pipeline, seed, expected_hash=recorded["hash"], inputs=inputs, verify=False)
    if not status.complete:
        raise ValueError(status.why)
    path = store.layout.backtest_paths(pipeline, seed)[0]
    recorded_sha = status.sidecar.sha256 if status.sidecar else None
    table = _open_parquet(store.root, path, expected=Checksum("sha256", recorded_sha) if recorded_sha else None,
                          columns=None,
                          dictionary=False, what="backtest file", required=("date", "excess_return",
                                                                            "excess_return_cost"))
    return table.to_pandas()
