"""The result store: one Parquet file per (pipeline, seed, window), a manifest, checkpoints.

Layout of a store directory ``STORE`` (the file names are written once, in
:class:`rolling_calib.core.store_layout.StoreLayout`)::

    STORE/manifest.json                          what was run: per pipeline its config hash, resolved
                                                 Qlib task, schedule (windows), seeds; library versions;
                                                 data identity; experiment config; history of runs
                                                 (wall time, units ran/skipped, executor, threads)
    STORE/units/<pipeline>/seed<k>/w<NN>.parquet predictions of one unit: columns
                                                 datetime, instrument, prediction, label (the label
                                                 kind rolling.label names), and label_learn (or
                                                 label_raw) when the other label differs on some row
    STORE/units/<pipeline>/seed<k>/w<NN>.json    sidecar: config hash, seed, window, rows, rows dropped,
                                                 timings, checkpoint path, checkpoint it started from,
                                                 label_columns (label kind -> column) and labels
                                                 (the description of each label kind); xxh3 and sha256
                                                 (valid_xxh3, valid_sha256) of the unit's Parquet files
    STORE/checkpoints/<pipeline>/seed<k>/w<NN>.pt model state after the unit (fine-tuning starts here)
    STORE/backtests/<pipeline>/seed<k>.parquet   the workflow's backtest of one seed over its joined windows: per
                                                 day return, bench, cost, turnover, excess returns without and
                                                 with cost (:mod:`rolling_calib.execution.backtests`)
    STORE/backtests/<pipeline>/seed<k>.json      its sidecar: backtest hash (the backtest settings), the units'
                                                 checksums it was run on, sha256 of the Parquet file
    STORE/stale/<pipeline>/<hash>/seed<k>/...    units of an older config, moved aside (never reused)
    STORE/corrupt/<pipeline>/<time>/seed<k>/...  damaged units (checksum mismatch, unreadable), moved
                                                 aside by ``run`` before it recomputes them
    STORE/mlflow.db                              MLflow tracking (written by ``rolling_calib.tracking.mlflow_log``)

Rules:

* Every file is written to a temporary name in its own directory and moved in place
  with ``os.replace``; the sidecar is written last, so a unit is *complete* exactly when
  its sidecar exists, names the current config hash, and its Parquet file exists
  (:func:`unit_status`, the one place that rule is written).
  A run killed at any moment (even ``kill -9``) leaves only complete units or debris
  that the next run overwrites. A write that fails (disk full, read-only) raises
  :class:`StoreWriteError`: one line naming the file, the free space and the fix.
* The sidecar records two checksums of the unit's Parquet bytes: XXH3-128 (``xxh3``, and
  ``valid_xxh3`` of ``wNN.valid.parquet``), which every read verifies (about 25 GB/s here, against
  1.7 GB/s for SHA-256), and SHA-256 (``sha256``, ``valid_sha256``), the content's identity
  (backtests key on it) and what units written before ``xxh3`` are read against;
  :func:`unit_damage` checks both. A unit whose bytes do not match, or whose
  file is not readable Parquet, is *corrupt* (:func:`unit_status`): every reader stops
  with :class:`CorruptUnitError` naming the file and the fix, and ``run`` moves it to
  ``STORE/corrupt/`` and recomputes it. Units written before the checksums (neither ``xxh3``
  nor ``sha256``) are read as before; only a file whose Parquet footer is unreadable is corrupt then.
* Each pipeline's *config hash* covers its resolved Qlib task (model, dataset,
  handler), the rolling schedule (exact window boundaries and mode) and the data
  identity (calendar and instrument files, feature file sizes). A unit whose sidecar
  names another hash is *stale*: the runner moves it (with its checkpoint) to
  ``STORE/stale/`` and recomputes it. The torch thread count per unit is part of the
  hash (it changes the floating-point summation order); the number of workers and
  the executor are not, so a run resumed with other ``--workers`` reuses its units.

Readers take one value, the :class:`Store` handle (``Store.open(path)``): the directory and its manifest
typed (:class:`~rolling_calib.execution.manifest.Manifest`; each sidecar a
:class:`~rolling_calib.execution.manifest.Sidecar`). The unit files are read by
:mod:`rolling_calib.execution.reader` (the one reader). This module knows nothing of Qlib or torch.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import io
import json
import os
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import xxhash

from data_prep.atomic import WriteFailed, atomic_write_bytes, atomic_write_text, describe_os_error
from rolling_calib.core import store_layout
from rolling_calib.core.label import LABEL_CHOICE, Label, auto_label_kind
from rolling_calib.core.store_layout import StoreLayout
from rolling_calib.execution.manifest import Checksum, CorruptStoreFileError, Manifest, PipelineRecord, Sidecar
from rolling_calib.execution.units import UnitKey

__all__ = [
    "MANIFEST",
    "UNIT_COLUMNS",
    "atomic_write_text",
    "atomic_write_json",
    "atomic_write_parquet",
    "write_unit_parquet",
    "StoreWriteError",
    "NO_SPACE_ERRNOS",
    "write_failure",
    "corrupt_fix",
    "unreadable_parquet",
    "CorruptUnitError",
    "sha256_bytes",
    "xxh3_bytes",
    "UnitFileChecksums",
    "file_sha256",
    "verify_unit_bytes",
    "unit_damage",
    "checkpoint_damage",
    "move_corrupt",
    "UNIT_CHECKSUMS",
    "task_universe",
    "unit_paths",
    "UnitPaths",
    "BACKTESTS",
    "backtest_paths",
    "CorruptStoreFileError",
    "NoManifestError",
    "append_history",
    "read_manifest",
    "write_manifest",
    "read_sidecar",
    "UnitStatus",
    "sidecar",
    "unit_status",
    "is_complete",
    "move_stale",
    "Store",
    "Manifest",
    "PipelineRecord",
    "Sidecar",
    "library_versions",
    "data_identity",
    "data_signature",
]

MANIFEST = store_layout.MANIFEST
UNIT_COLUMNS = ("datetime", "instrument", "prediction", "label")
FORMAT_VERSION = 1
#: Manifest key of a store created with unit checksums: there, a sidecar without a checksum (``xxh3``, ``sha256``)
#: was edited (an error).
UNIT_CHECKSUMS = "unit_checksums"


# --------------------------------------------------------------------------- atomic writes
#: A store file could not be written (disk full, quota, read-only, permissions): the one error of a refused
#: write, :class:`data_prep.atomic.WriteFailed` (one line naming the file, what happened, the free space on its
#: file system and the fix). Nothing half-written is left in place, so the unit being written stays incomplete.
StoreWriteError = WriteFailed

#: OS errors that mean the file system takes no more writes (never a problem of the data read).
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


def write_failure(exc: OSError, path: str | os.PathLike) -> StoreWriteError | None:
    """The :class:`StoreWriteError` of ``exc`` raised while writing ``path`` (a model's checkpoint, say) when
    it is a full or read-only file system (:data:`NO_SPACE_ERRNOS`); ``None`` for other OS errors.

    >>> print(str(write_failure(OSError(errno.ENOSPC, "No space left on device"), "/tmp/w00.pt")).split(" (")[0])
    /tmp/w00.pt: cannot write: the disk is full
    """
    if exc.errno not in NO_SPACE_ERRNOS:
        return None
    return StoreWriteError(describe_os_error(exc, path), path=path)


def atomic_write_json(path: str | os.PathLike, data: Any) -> Path:
    """Write ``data`` as indented, key-sorted JSON atomically."""
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    """``frame`` (no index) as the bytes of a Parquet file (pyarrow; the same bytes ``to_parquet`` writes to a file)."""
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False, engine="pyarrow")
    return buffer.getvalue()


def atomic_write_parquet(path: str | os.PathLike, frame: pd.DataFrame) -> Path:
    """Write ``frame`` (no index) as Parquet atomically."""
    return atomic_write_bytes(path, parquet_bytes(frame))


@dataclass(frozen=True)
class UnitFileChecksums:
    """The checksums of a unit file's bytes as written (:func:`write_unit_parquet`): what its sidecar records."""

    sha256: str
    xxh3: str

    def fields(self, *, prefix: str = "") -> dict[str, str]:
        """The sidecar's fields: ``{prefix + "sha256": ..., prefix + "xxh3": ...}`` (``prefix="valid_"`` for the
        validation file)."""
        return {f"{prefix}sha256": self.sha256, f"{prefix}xxh3": self.xxh3}


def write_unit_parquet(path: str | os.PathLike, frame: pd.DataFrame) -> UnitFileChecksums:
    """Write a unit's table as Parquet atomically; the checksums of the bytes written (for the sidecar).

    The checksums are of the bytes handed to the file system, so damage done on the way to
    the disk or later is caught by every reader (:func:`verify_unit_bytes`).
    """
    data = parquet_bytes(frame)
    checksums = UnitFileChecksums(sha256=sha256_bytes(data), xxh3=xxh3_bytes(data))   # (before the file exists)
    atomic_write_bytes(path, data)
    return checksums


# --------------------------------------------------------------------------- checksums
def sha256_bytes(data: bytes | memoryview) -> str:
    """Hex SHA-256 of ``data``.

    >>> sha256_bytes(b"")[:16]
    'e3b0c44298fc1c14'
    """
    return hashlib.sha256(data).hexdigest()


def xxh3_bytes(data: Any) -> str:
    """Hex XXH3-128 of ``data`` (``bytes`` or any buffer; the xxhash package).

    >>> xxh3_bytes(b"")
    '99aa06d3014798d86001c324468d497f'
    """
    return xxhash.xxh3_128_hexdigest(data)


#: Per checksum kind: its name in messages and the function of the bytes.
_DIGESTS = {"xxh3": ("XXH3-128", xxh3_bytes), "sha256": ("SHA-256", sha256_bytes)}


def file_sha256(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's content (read in chunks)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


# --------------------------------------------------------------------------- paths
@dataclass(frozen=True)
class UnitPaths:
    """Files of one unit (``parquet``, ``valid_parquet``, ``sidecar``, ``checkpoint``), absolute.

    ``valid_parquet`` holds the validation-segment predictions (a separate file, so readers of the
    test predictions are unchanged; the sidecar's ``valid_rows`` says whether it belongs to the unit).
    """

    parquet: Path
    sidecar: Path
    checkpoint: Path
    valid_parquet: Path

    def relative_checkpoint(self, store: Path) -> str:
        """Checkpoint path relative to the store (as recorded in sidecars)."""
        return os.path.relpath(self.checkpoint, store)

    @property
    def log(self) -> Path:
        """The unit's library output (Qlib's, LightGBM's, torch's; ``wNN.log`` beside the sidecar)."""
        return self.sidecar.with_suffix(".log")

    @property
    def base_model(self) -> Path:
        """A pretrained base network the unit trained first (GATs, IGMTF: ``wNN.base.pt`` beside its checkpoint)."""
        return self.checkpoint.with_name(self.checkpoint.stem + ".base.pt")


def unit_paths(store: str | os.PathLike, key: UnitKey) -> UnitPaths:
    """Where unit ``key`` lives in ``store`` (:class:`~rolling_calib.core.store_layout.StoreLayout`).

    Examples
    --------
    >>> unit_paths("S", UnitKey("wd0", 3, 1)).parquet.as_posix()
    'S/units/wd0/seed3/w01.parquet'
    """
    return _unit_paths(os.fspath(store), key)


@functools.lru_cache(maxsize=4096)
def _unit_paths(store: str, key: UnitKey) -> UnitPaths:
    """:func:`unit_paths`, kept for the store's units: a pure function of its arguments (no file is looked at),
    and the reader and the integrity notes ask for each unit's paths several times in one scoring."""
    layout = StoreLayout(Path(store))
    units, stem = layout.unit_dir(key.pipeline, key.seed), f"w{key.window:02d}"
    return UnitPaths(
        parquet=units / f"{stem}.parquet",
        sidecar=units / f"{stem}.json",
        checkpoint=layout.checkpoint_dir(key.pipeline, key.seed) / f"{stem}.pt",
        valid_parquet=units / f"{stem}.valid.parquet",
    )


#: The folder of the per-seed backtests (``STORE/backtests/<pipeline>/seed<k>.parquet`` and ``.json``).
BACKTESTS = store_layout.BACKTESTS


def backtest_paths(store: str | os.PathLike, pipeline: str, seed: int) -> tuple[Path, Path]:
    """``(parquet, sidecar)`` of one seed's backtest over its joined windows.

    >>> [p.as_posix() for p in backtest_paths("S", "wd0", 3)]
    ['S/backtests/wd0/seed3.parquet', 'S/backtests/wd0/seed3.json']
    """
    return StoreLayout(Path(store)).backtest_paths(pipeline, seed)


# --------------------------------------------------------------------------- manifest
class NoManifestError(ValueError):
    """``STORE/manifest.json`` does not exist: a new store (for writing) or not a store (for reading)."""


def read_manifest(store: str | os.PathLike) -> dict:
    """Read ``STORE/manifest.json`` as the JSON object it is (what :func:`write_manifest` merges into).

    Readers take the typed :class:`Store` (:meth:`Store.open`), which parses this object.

    Raises
    ------
    NoManifestError
        The file does not exist.
    CorruptStoreFileError
        The file exists but is not a manifest (broken JSON, wrong shape), naming the file and line.
    """
    path = StoreLayout(Path(store)).manifest
    if not path.is_file():
        raise NoManifestError(f"{path}: no manifest; is {Path(store)} a rolling-calib store (made by 'rolling-calib run')?")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        line = f":{exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise CorruptStoreFileError(
            f"{path}{line}: invalid JSON in manifest: {getattr(exc, 'msg', exc)} (the manifest records every "
            "pipeline and the run history, so it is never overwritten: restore it, or move the store aside)"
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("pipelines"), dict):
        raise CorruptStoreFileError(f"{path}: expected a manifest with a 'pipelines' mapping, found {type(data).__name__}")
    return data


def write_manifest(store: str | os.PathLike, *, pipelines: Mapping[str, Mapping[str, Any]], extra: Mapping[str, Any]) -> dict:
    """Merge ``pipelines`` entries into the manifest (other pipelines are kept) and write it.

    Only a missing manifest starts a new one; a corrupt one raises :class:`CorruptStoreFileError`
    (overwriting it would lose the other pipelines and the run history).

    Parameters
    ----------
    store : path
    pipelines : mapping
        ``{name: {"config_hash", "task", "windows", "seeds", ...}}`` for the pipelines of this run;
        seeds are merged with those already recorded when the hash is unchanged.
    extra : mapping
        Top-level fields (experiment config, versions, data identity) of this run.
    """
    store = Path(store)
    try:
        manifest = read_manifest(store)
    except NoManifestError:
        manifest = {"format": FORMAT_VERSION, UNIT_CHECKSUMS: True, "pipelines": {}}  # every unit records its checksums
    for name, entry in pipelines.items():
        old = manifest["pipelines"].get(name)
        new = dict(entry)
        if old and old.get("config_hash") == new.get("config_hash"):
            new["seeds"] = sorted(set(old.get("seeds", [])) | set(new.get("seeds", [])))
        manifest["pipelines"][name] = new
    manifest.update(dict(extra))
    manifest["format"] = FORMAT_VERSION
    atomic_write_json(StoreLayout(store).manifest, manifest)
    return manifest


def append_history(store: str | os.PathLike, entry: Mapping[str, Any]) -> dict:
    """Append one run's record to the manifest's ``history`` (the one place that writes it)."""
    manifest = read_manifest(store)
    manifest.setdefault("history", []).append(dict(entry))
    atomic_write_json(StoreLayout(Path(store)).manifest, manifest)
    return manifest


# --------------------------------------------------------------------------- units
def read_sidecar(store: str | os.PathLike, key: UnitKey) -> dict | None:
    """The unit's sidecar as its JSON object, or ``None`` when it does not exist (:func:`sidecar` types it).

    Sidecars are written atomically and last, so a broken one is damage, not a half-written
    unit: it raises ``ValueError`` naming the file instead of being taken for an absent unit.
    """
    return _read_sidecar_at(unit_paths(store, key).sidecar)


def _read_sidecar_at(path: Path) -> dict | None:
    """:func:`read_sidecar` of the sidecar file ``path``."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptStoreFileError(
            f"{path}: corrupt unit sidecar ({getattr(exc, 'msg', exc)}); delete the unit's files "
            f"({path.parent}/{path.stem}.*) to recompute it"
        ) from exc
    if not isinstance(data, dict):
        raise CorruptStoreFileError(f"{path}: corrupt unit sidecar (expected a JSON object, found {type(data).__name__})")
    return data


def sidecar(store: str | os.PathLike, key: UnitKey) -> Sidecar | None:
    """The unit's :class:`~rolling_calib.execution.manifest.Sidecar`, or ``None`` when it does not exist."""
    path = unit_paths(store, key).sidecar
    data = _read_sidecar_at(path)
    return None if data is None else Sidecar.from_dict(data, source=str(path))


class CorruptUnitError(CorruptStoreFileError):
    """A unit's file does not match the checksum its sidecar records, or is not readable Parquet.

    The message names the file, what is wrong and the fix (``run`` moves the unit to
    ``STORE/corrupt/`` and recomputes it). Never taken for a missing unit.
    """


def corrupt_fix(store: str | os.PathLike) -> str:
    """What to do about a corrupt unit of ``store`` (the one wording of the fix)."""
    return (f"re-run 'rolling-calib run CONFIG --store {store}' to recompute it (run moves the damaged unit to "
            f"{StoreLayout(Path(store)).corrupt}/ first)")


def _checked(store: str | os.PathLike, path: Path, data: Any, expected: Checksum, what: str) -> str | None:
    """Why ``data`` (the bytes of ``path``: ``bytes`` or any buffer) is damage against the recorded checksum
    ``expected`` (None: it matches)."""
    name, digest = _DIGESTS[expected.kind]
    found = digest(data)
    if found == expected.digest:
        return None
    return (f"{path}: corrupt {what}: its {name} is {found[:16]}..., the unit's sidecar records "
            f"{expected.digest[:16]}... ({len(data)} bytes now; the file changed after it was written); "
            f"{corrupt_fix(store)}")


def verify_unit_bytes(store: str | os.PathLike, path: Path, data: Any, expected: Checksum | None, *,
                      what: str = "unit file") -> None:
    """Check ``data`` (the bytes of ``path``: ``bytes`` or any buffer, e.g. the file mapped) against the checksum
    its sidecar records (:meth:`~rolling_calib.execution.manifest.Sidecar.read_checksum`: XXH3-128, or SHA-256
    for a unit written before XXH3 was recorded).

    ``expected`` None (a unit written before the checksums): nothing to check. The reader
    (:mod:`rolling_calib.execution.reader`) parses the same buffer it passes here: the bytes
    hashed are the bytes parsed.

    Raises
    ------
    CorruptUnitError
        The bytes do not match (naming the file, the two checksums and the fix).

    Examples
    --------
    >>> verify_unit_bytes("store", Path("w00.parquet"), b"", Checksum("xxh3", xxh3_bytes(b"")))   # matches
    >>> verify_unit_bytes("store", Path("w00.parquet"), b"x", Checksum("sha256", sha256_bytes(b"")))
    Traceback (most recent call last):
    ...
    rolling_calib.execution.store.CorruptUnitError: w00.parquet: corrupt unit file: its SHA-256 is 2d711642b726b044..., ...
    """
    if expected is not None:
        damage = _checked(store, Path(path), data, expected, what)
        if damage:
            raise CorruptUnitError(damage)


def unreadable_parquet(store: str | os.PathLike, path: Path, exc: BaseException) -> CorruptUnitError:
    """The error for a unit file pyarrow cannot decode (truncated, flipped bytes in a unit without a checksum)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return CorruptUnitError(f"{path}: corrupt unit file: not readable as Parquet ({type(exc).__name__}: {text}); "
                            f"{corrupt_fix(store)}")


def unit_damage(store: str | os.PathLike, key: UnitKey, side: Sidecar, *, checksums: bool | None = None) -> str | None:
    """Why unit ``key``'s files are damaged (``None``: they are sound). Reads them whole.

    Checks the Parquet file (and ``wNN.valid.parquet`` when its sidecar records its checksums)
    against every recorded checksum (XXH3-128 and SHA-256). A unit without a recorded checksum is
    checked for a readable Parquet footer only (a truncated file), the most that can be told without
    one; unless the store was created with checksums (``checksums``: its manifest's
    ``unit_checksums``, read when None): then the missing checksum is damage.
    """
    paths = unit_paths(store, key)
    files = [(paths.parquet, side.checksums(), "unit file")]
    if side.checksums(valid=True):
        files.append((paths.valid_parquet, side.checksums(valid=True), "validation file"))
    for path, expected, what in files:
        if not path.is_file():
            return f"{path}: the {what} its sidecar records is missing; {corrupt_fix(store)}"
        if expected:
            data = path.read_bytes()
            damage = next((d for c in expected if (d := _checked(store, path, data, c, what))), None)
            if damage:
                return damage
            continue
        if what == "unit file" and (_records_checksums(store) if checksums is None else checksums):
            return _missing_checksum(store, key)
        import pyarrow.parquet as pq

        try:
            pq.read_metadata(path)
        except Exception as exc:  # pyarrow raises ArrowInvalid / OSError for a broken footer
            return str(unreadable_parquet(store, path, exc))
    return None


def _records_checksums(store: str | os.PathLike) -> bool:
    """Whether ``store`` was created with unit checksums (its manifest says so); read only for a unit without one."""
    try:
        return bool(read_manifest(store).get(UNIT_CHECKSUMS))
    except (NoManifestError, CorruptStoreFileError):
        return False


def _missing_checksum(store: str | os.PathLike, key: UnitKey) -> str:
    return (f"{unit_paths(store, key).sidecar}: expected a checksum of the unit's bytes (xxh3 or sha256; this store "
            f"was created with checksums: every unit records one), found none: the key was removed or the sidecar "
            f"replaced, so the unit is not read unchecked; {corrupt_fix(store)}")


def checkpoint_damage(store: str | os.PathLike, key: UnitKey, side: Sidecar | None) -> str | None:
    """Why unit ``key``'s checkpoint cannot be fine-tuned from (missing, or not the bytes its sidecar records).

    The sidecar's ``checkpoint_sha256`` holds the first 16 hex digits of the SHA-256.
    """
    path = unit_paths(store, key).checkpoint
    if not path.is_file():
        return f"{path}: the checkpoint of unit {key.slug()} is missing (the next window fine-tunes from it)"
    recorded = side.checkpoint_sha256 if side is not None else None
    if not recorded:
        return None
    found = file_sha256(path)[: len(str(recorded))]
    if found != recorded:
        return (f"{path}: corrupt checkpoint of unit {key.slug()}: its SHA-256 is {found}..., the sidecar records "
                f"{recorded}... (the next window fine-tunes from it)")
    return None


@dataclass(frozen=True)
class UnitStatus:
    """Whether a unit is complete (``state``: ``"complete"``, ``"missing"``, ``"stale"`` or ``"corrupt"``) and its sidecar.

    The rule, written here only: a unit is complete when its sidecar exists, names the pipeline's
    config hash, its Parquet file exists, and its files match the checksums the sidecar records
    (:func:`unit_damage`; ``damage`` says why not). A corrupt unit is never complete and never
    missing: readers stop on it, ``run`` moves it aside and recomputes it. A corrupt sidecar is not
    a status: reading it raises.
    """

    key: UnitKey
    state: str
    sidecar: Sidecar | None
    expected_hash: str
    damage: str = ""

    @property
    def complete(self) -> bool:
        return self.state == "complete"

    def problem(self, store: str | os.PathLike) -> str:
        """Why the unit is not complete, as the scoring notes say it (``""`` when it is)."""
        if self.state == "stale":
            found = self.sidecar.config_hash if self.sidecar is not None else None
            return f"{store}: unit {self.key.slug()} is stale (config hash {found}, expected {self.expected_hash})"
        if self.state == "corrupt":
            return self.damage
        return "" if self.complete else f"{store}: unit {self.key.slug()} is missing"


def unit_status(store: str | os.PathLike, key: UnitKey, config_hash: str, *, verify: bool = True,
                checksums: bool | None = None) -> UnitStatus:
    """The :class:`UnitStatus` of ``key`` against the pipeline's current ``config_hash``.

    ``verify``: check the unit's files against their recorded checksums (:func:`unit_damage`,
    one read of each file). The store reader passes ``False`` because it checks the same
    bytes as it reads them (:func:`verify_unit_bytes`); every other caller verifies.
    ``checksums``: whether the store was created with checksums (read from its manifest when None).

    Raises :class:`CorruptStoreFileError` for a sidecar that exists but cannot be read.
    """
    side = sidecar(store, key)
    damage = None
    if side is None or not unit_paths(store, key).parquet.is_file():
        state = "missing"
    elif side.config_hash != config_hash:
        state = "stale"
    else:
        damage = unit_damage(store, key, side, checksums=checksums) if verify else None
        state = "corrupt" if damage else "complete"
    return UnitStatus(key=key, state=state, sidecar=side, expected_hash=str(config_hash), damage=damage or "")


def is_complete(store: str | os.PathLike, key: UnitKey, config_hash: str) -> bool:
    """True when the unit is complete (:func:`unit_status`)."""
    return unit_status(store, key, config_hash).complete


def _move_unit(store: Path, key: UnitKey, dest: Path) -> Path:
    """Move the unit's files (Parquet, validation Parquet, checkpoint, sidecar last) into ``dest``."""
    paths = unit_paths(store, key)
    dest.mkdir(parents=True, exist_ok=True)
    for path in (paths.parquet, paths.valid_parquet, paths.checkpoint, paths.base_model, paths.log,
                 paths.sidecar):  # sidecar last: the commit marker
        if path.exists():
            shutil.move(str(path), str(dest / path.name))
    return dest


def move_stale(store: str | os.PathLike, key: UnitKey, config_hash: str) -> Path | None:
    """Move the unit's files aside when its sidecar names another hash; returns where they went."""
    store = Path(store)
    side = sidecar(store, key)
    if side is None or side.config_hash == config_hash:
        return None
    dest = StoreLayout(store).stale / key.pipeline / str(side.config_hash or "unknown") / f"seed{key.seed}"
    return _move_unit(store, key, dest)


def move_corrupt(store: str | os.PathLike, key: UnitKey, *, why: str) -> Path:
    """Move a damaged unit's files to ``STORE/corrupt/<pipeline>/<UTC time>/seed<k>/`` with ``wNN.why.txt``; where they went.

    Nothing is deleted: the damaged bytes stay for inspection. The unit is then missing, and recomputed.
    """
    store = Path(store)
    now = time.time_ns()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now // 10**9)) + f".{now % 10**9:09d}Z"
    dest = StoreLayout(store).corrupt / key.pipeline / stamp / f"seed{key.seed}"
    _move_unit(store, key, dest)
    atomic_write_text(dest / f"w{key.window:02d}.why.txt", why + "\n")
    return dest


# --------------------------------------------------------------------------- the store handle
@dataclass(frozen=True)
class Store:
    """An opened result store: its directory and its manifest, typed; what every reader of a store takes.

    ``Store.open(path)`` reads and parses ``STORE/manifest.json`` once (:class:`NoManifestError`,
    :class:`CorruptStoreFileError` naming the file and field); the handle then answers what the
    manifest records (:attr:`manifest`: pipelines, experiment, data identity, pairs) and where the
    files are (:attr:`layout`, :meth:`unit_paths`), and reads units' sidecars and statuses against
    each pipeline's recorded config hash. Unit files themselves are read by
    :mod:`rolling_calib.execution.reader`, which checks their bytes against their checksums.
    The handle is a snapshot: a ``run`` that writes the store afterwards needs a new one.

    Examples
    --------
    >>> store = Store.open(example_store)
    >>> store.select(None), store.pipeline("wd0").seeds
    (['wd0', 'wd1e-3'], (0, 1, 2))
    >>> store.complete_units("wd0")[1]        # every unit complete: no notes
    []
    >>> Store.of(store) is store
    True
    """

    root: Path
    manifest: Manifest

    @classmethod
    def open(cls, root: str | os.PathLike) -> Store:
        """Read ``root``'s manifest (see the class docstring for the errors)."""
        root = Path(root)
        return cls(root, Manifest.from_dict(read_manifest(root), source=str(StoreLayout(root).manifest)))

    @classmethod
    def of(cls, store: Store | str | os.PathLike) -> Store:
        """``store`` itself when it is a handle, else the store at that path opened."""
        return store if isinstance(store, Store) else cls.open(store)

    @property
    def layout(self) -> StoreLayout:
        return StoreLayout(self.root)

    @property
    def pipelines(self) -> Mapping[str, PipelineRecord]:
        return self.manifest.pipelines

    def pipeline(self, name: str) -> PipelineRecord:
        """The recorded pipeline ``name`` (``ValueError`` naming the manifest and the pipelines it has)."""
        entry = self.manifest.pipelines.get(name)
        if entry is None:
            raise ValueError(f"{self.layout.manifest}: no pipeline {name!r} (have: {', '.join(self.manifest.pipelines)})")
        return entry

    def select(self, pipelines: Iterable[str] | None) -> list[str]:
        """``pipelines`` (default: every pipeline of the manifest), refusing names the store does not have."""
        names = list(self.manifest.pipelines) if pipelines is None else list(pipelines)
        unknown = [n for n in names if n not in self.manifest.pipelines]
        if unknown:
            raise ValueError(f"--pipelines: {', '.join(unknown)} not in {self.root} "
                             f"(have: {', '.join(self.manifest.pipelines)})")
        return names

    def pairs(self, among: Iterable[str]) -> list[tuple[str, str]]:
        """The pairs the experiment's ``compare:`` recorded whose pipelines are both in ``among``."""
        kept = set(among)
        return [p for p in self.manifest.compare if p[0] in kept and p[1] in kept]

    # ---- units
    def unit_paths(self, key: UnitKey) -> UnitPaths:
        return unit_paths(self.root, key)

    def sidecar(self, key: UnitKey) -> Sidecar | None:
        return sidecar(self.root, key)

    def unit_status(self, key: UnitKey, *, verify: bool = True) -> UnitStatus:
        """:func:`unit_status` of ``key`` against its pipeline's recorded config hash."""
        return unit_status(self.root, key, self.pipeline(key.pipeline).config_hash, verify=verify,
                           checksums=self.manifest.unit_checksums)

    def complete_units(self, pipeline: str) -> tuple[list[UnitKey], list[str]]:
        """The complete units of every recorded seed and window of ``pipeline``, and a note per incomplete one.

        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> _ = write_manifest(root, pipelines={"a": {"config_hash": "h", "seeds": [0], "windows": [{"index": 0}]}},
        ...                    extra={})
        >>> Store.open(root).complete_units("a")[1] == [f"{root}: unit a__seed0__w00 is missing"]
        True
        """
        done, notes = [], []
        for key in self.pipeline(pipeline).units():
            status = self.unit_status(key)
            if status.complete:
                done.append(status.key)
            else:
                notes.append(status.problem(self.root))
        return done, notes

    def sidecars(self, pipelines: Iterable[str]) -> dict[UnitKey, Sidecar | None]:
        """The sidecar of every recorded unit of ``pipelines`` (``None``: none written), read once."""
        return {key: self.sidecar(key) for name in pipelines for key in self.pipeline(name).units()}

    def unchecked_units(self, pipelines: Iterable[str], sides: Mapping[UnitKey, Sidecar | None] | None = None) -> int:
        """How many existing units of ``pipelines`` were written before checksums (a sidecar without a checksum).

        ``sides``: their sidecars already read (:meth:`sidecars`).

        Raises
        ------
        CorruptUnitError
            The store was created with checksums (manifest ``unit_checksums``), yet a sidecar holds
            no checksum: the key was removed or the sidecar replaced, so the unit is not read unchecked.
        """
        count = 0
        sides = self.sidecars(pipelines) if sides is None else sides
        for name in pipelines:
            for key in self.pipeline(name).units():
                side = sides.get(key)
                if side is not None and not side.checksums():
                    if self.manifest.unit_checksums:
                        raise CorruptUnitError(_missing_checksum(self.root, key))
                    count += 1
        return count

    # ---- labels
    def label_kind(self, pipelines: Iterable[str], label: str | None) -> str:
        """The label kind to score ``pipelines`` against: ``label``, else the store's ``rolling.label``; ``auto`` resolved.

        ``auto`` (:func:`~rolling_calib.core.label.auto_label_kind`): the learned label when a learn
        processor changed any of the pipelines' labels, the raw label otherwise. ``ValueError`` for
        another word.
        """
        from rolling_calib.core.validation import check

        choice = check("label", self.manifest.label_kind if label is None else label, LABEL_CHOICE)
        if choice != "auto":
            return choice
        return auto_label_kind(self.labels(name)[0].get("learn") for name in pipelines)

    def labels(self, pipeline: str) -> tuple[dict[str, Label], list[str]]:
        """The description of each label kind of ``pipeline``, and notes on how it was obtained.

        Stores record them per pipeline (``labels``). For a store written before that, they are
        described from the pipeline's recorded task (its handler's class and arguments,
        :func:`rolling_calib.qlib_adapter.labels.describe_labels`); what cannot be told from it is
        ``expression None``, ``unit 'unknown'``, with a note (no note when the task tells everything).
        """
        entry = self.pipeline(pipeline)
        recorded = entry.labels
        if recorded:
            return recorded, []
        from rolling_calib.qlib_adapter.labels import describe_labels

        described = describe_labels(dict(entry.task))
        return described.labels, [f"{pipeline}: {note} (the store was written before labels were recorded)"
                                  for note in described.notes]


def library_versions() -> dict[str, str]:
    """Versions of the libraries that shape the numbers (recorded in the manifest)."""
    import platform
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in ("rolling-calib", "numpy", "pandas", "torch", "pyqlib", "pyarrow", "scipy", "exchange_calendars"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


def _universe_symbols(root: Path, instruments: Iterable[str]) -> list[str] | None:
    """Symbols (lower case, as Qlib names feature folders) of the named universes or symbols; None: all."""
    symbols: set[str] = set()
    for name in instruments:
        universe = root / "instruments" / f"{name}.txt"
        if universe.is_file():
            for line in universe.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    symbols.add(line.split("\t")[0].strip().lower())
        else:
            symbols.add(str(name).lower())
    return sorted(symbols) if symbols else None


def task_universe(task: Mapping[str, Any]) -> list[str]:
    """The universe a task's handler reads (``instruments`` when it names one), as :func:`data_identity` takes it.

    >>> task_universe({"dataset": {"kwargs": {"handler": {"kwargs": {"instruments": "us25"}}}}})
    ['us25']
    >>> task_universe({})
    []
    """
    market = (task.get("dataset") or {}).get("kwargs", {}).get("handler", {}).get("kwargs", {}).get("instruments")
    return [market] if isinstance(market, str) else []


def _identity_files(root: Path, instruments: Iterable[str]) -> tuple[list[str], list[Path]]:
    """The files a data identity covers: calendars and named universe files (relative), feature files (absolute)."""
    instruments = list(instruments)
    names = sorted(p.relative_to(root).as_posix() for p in (root / "calendars").glob("*.txt")) if (root / "calendars").is_dir() else []
    meta = [*names, *(f"instruments/{name}.txt" for name in instruments)]
    features = root / "features"
    symbols = _universe_symbols(root, instruments)
    folders = sorted(features.iterdir()) if features.is_dir() else []
    if symbols is not None:
        folders = [f for f in folders if f.name.lower() in symbols]
    return meta, [path for folder in folders for path in sorted(folder.glob("*.bin"))]


def data_identity(provider_dir: str | os.PathLike, *, instruments: Iterable[str] = ()) -> dict[str, Any]:
    """Content fingerprint of the data a run reads: every byte of its calendar, universe and feature files.

    ``files`` hashes the calendars and the named universe files; ``features`` hashes, for
    every feature file (``features/<symbol>/*.bin``) of the universe's symbols (all symbols
    when no universe is named), its path and its whole content. Any changed value changes
    the identity, and with it the config hash of every unit that read it (the unit is then
    stale and recomputed). ``meta.json`` is left out on purpose: it records generation
    timings, which differ between two builds of identical data.

    Parameters
    ----------
    provider_dir : path
        The Qlib store.
    instruments : iterable of str
        Universe names (``instruments/<name>.txt``) or symbols the run reads.

    Returns
    -------
    dict
        ``path``, ``files`` and ``features`` (16 hex digits each), ``feature_files`` and ``feature_bytes``.
    """
    root = Path(provider_dir)
    meta, feature_files = _identity_files(root, instruments)
    digest = hashlib.sha256()
    for rel in meta:
        path = root / rel
        digest.update(rel.encode())
        if path.is_file():
            digest.update(path.read_bytes())
    content = hashlib.sha256()
    features = root / "features"
    n_bytes = 0
    for path in feature_files:
        with open(path, "rb") as fh:
            file_hash = hashlib.file_digest(fh, "sha256").digest()
        content.update(f"{path.relative_to(features).as_posix()}:".encode() + file_hash)
        n_bytes += path.stat().st_size
    return {"path": str(root), "files": digest.hexdigest()[:16], "features": content.hexdigest()[:16],
            "feature_files": len(feature_files), "feature_bytes": n_bytes}


def data_signature(provider_dir: str | os.PathLike, *, instruments: Iterable[str] = ()) -> str:
    """A cheap check that the files of :func:`data_identity` are as they were: their paths, sizes and mtimes.

    No file is read (one ``stat`` each, a few milliseconds for the minute store where the content
    fingerprint takes about 0.4 CPU-s). Equal signatures mean the content fingerprint is unchanged
    unless a file was rewritten to the same size within the same nanosecond timestamp; a different
    signature (``touch``, a rebuild) is settled by the content fingerprint.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / "calendars").mkdir(); _ = (root / "calendars" / "day.txt").write_text("2020-01-02\\n")
    >>> before = data_signature(root)
    >>> _ = (root / "calendars" / "day.txt").write_text("2020-01-02\\n2020-01-03\\n")
    >>> data_signature(root) == before
    False
    """
    root = Path(provider_dir)
    meta, feature_files = _identity_files(root, instruments)
    digest = hashlib.sha256()
    for path in [*(root / rel for rel in meta), *feature_files]:
        try:
            info = path.stat()
            digest.update(f"{path.relative_to(root).as_posix()}:{info.st_size}:{info.st_mtime_ns};".encode())
        except OSError:
            digest.update(f"{path.relative_to(root).as_posix()}:absent;".encode())
    return digest.hexdigest()[:16]
