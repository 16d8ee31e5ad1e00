"""The result store: one Parquet file per (pipeline, seed, window), a manifest, checkpoints.

Layout of a store directory ``STORE``::

    STORE/manifest.json                          what was run: per pipeline its config hash, resolved
                                                 Qlib task, schedule (windows), seeds; library versions;
                                                 data identity; experiment config; history of runs
                                                 (wall time, units ran/skipped, executor, threads)
    STORE/units/<pipeline>/seed<k>/w<NN>.parquet predictions of one unit: columns
                                                 datetime, instrument, prediction, label (label and
                                                 prediction in basis points of 10-minute forward return)
    STORE/units/<pipeline>/seed<k>/w<NN>.json    sidecar: config hash, seed, window, rows, rows dropped,
                                                 timings, checkpoint path, checkpoint it started from
    STORE/checkpoints/<pipeline>/seed<k>/w<NN>.pt model state after the unit (fine-tuning starts here)
    STORE/stale/<pipeline>/<hash>/seed<k>/...    units of an older config, moved aside (never reused)
    STORE/mlflow.db                              MLflow tracking (written by ``rolling_calib.tracking.mlflow_log``)

Rules:

* Every file is written to a temporary name in its own directory and moved in place
  with ``os.replace``; the sidecar is written last, so a unit is *complete* exactly when
  its sidecar exists, names the current config hash, and its Parquet file exists.
  A run killed at any moment (even ``kill -9``) leaves only complete units or debris
  that the next run overwrites.
* Each pipeline's *config hash* covers its resolved Qlib task (model, dataset,
  handler), the rolling schedule (exact window boundaries and mode) and the data
  identity (calendar and instrument files, feature file sizes). A unit whose sidecar
  names another hash is *stale*: the runner moves it (with its checkpoint) to
  ``STORE/stale/`` and recomputes it. The torch thread count per unit is part of the
  hash (it changes the floating-point summation order); the number of workers and
  the executor are not, so a run resumed with other ``--workers`` reuses its units.

This module knows nothing of Qlib or torch.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rolling_calib.core.atomic import atomic_write
from rolling_calib.execution.units import UnitKey

__all__ = [
    "MANIFEST",
    "UNIT_COLUMNS",
    "atomic_write_text",
    "atomic_write_json",
    "atomic_write_parquet",
    "unit_paths",
    "UnitPaths",
    "CorruptStoreFileError",
    "NoManifestError",
    "append_history",
    "read_manifest",
    "write_manifest",
    "read_sidecar",
    "is_complete",
    "move_stale",
    "read_unit",
    "library_versions",
    "data_identity",
]

MANIFEST = "manifest.json"
UNIT_COLUMNS = ("datetime", "instrument", "prediction", "label")
FORMAT_VERSION = 1


# --------------------------------------------------------------------------- atomic writes
def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (see :mod:`rolling_calib.core.atomic`)."""
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def atomic_write_json(path: str | os.PathLike, data: Any) -> Path:
    """Write ``data`` as indented, key-sorted JSON atomically."""
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def atomic_write_parquet(path: str | os.PathLike, frame: pd.DataFrame) -> Path:
    """Write ``frame`` (no index) as Parquet atomically."""
    return atomic_write(path, lambda tmp: frame.to_parquet(tmp, index=False, engine="pyarrow"))


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


def unit_paths(store: str | os.PathLike, key: UnitKey) -> UnitPaths:
    """Where unit ``key`` lives in ``store``.

    Examples
    --------
    >>> unit_paths("S", UnitKey("wd0", 3, 1)).parquet.as_posix()
    'S/units/wd0/seed3/w01.parquet'
    """
    store = Path(store)
    tail = Path(key.pipeline) / f"seed{key.seed}"
    stem = f"w{key.window:02d}"
    return UnitPaths(
        parquet=store / "units" / tail / f"{stem}.parquet",
        sidecar=store / "units" / tail / f"{stem}.json",
        checkpoint=store / "checkpoints" / tail / f"{stem}.pt",
        valid_parquet=store / "units" / tail / f"{stem}.valid.parquet",
    )


# --------------------------------------------------------------------------- manifest
class CorruptStoreFileError(ValueError):
    """A store file exists but cannot be read (manifest, sidecar); the message names it. Never taken for absent."""


class NoManifestError(ValueError):
    """``STORE/manifest.json`` does not exist: a new store (for writing) or not a store (for reading)."""


def read_manifest(store: str | os.PathLike) -> dict:
    """Read ``STORE/manifest.json``.

    Raises
    ------
    NoManifestError
        The file does not exist.
    CorruptStoreFileError
        The file exists but is not a manifest (broken JSON, wrong shape), naming the file and line.
    """
    path = Path(store) / MANIFEST
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
        manifest = {"format": FORMAT_VERSION, "pipelines": {}}
    for name, entry in pipelines.items():
        old = manifest["pipelines"].get(name)
        new = dict(entry)
        if old and old.get("config_hash") == new.get("config_hash"):
            new["seeds"] = sorted(set(old.get("seeds", [])) | set(new.get("seeds", [])))
        manifest["pipelines"][name] = new
    manifest.update(dict(extra))
    manifest["format"] = FORMAT_VERSION
    atomic_write_json(store / MANIFEST, manifest)
    return manifest


def append_history(store: str | os.PathLike, entry: Mapping[str, Any]) -> dict:
    """Append one run's record to the manifest's ``history`` (the one place that writes it)."""
    manifest = read_manifest(store)
    manifest.setdefault("history", []).append(dict(entry))
    atomic_write_json(Path(store) / MANIFEST, manifest)
    return manifest


# --------------------------------------------------------------------------- units
def read_sidecar(store: str | os.PathLike, key: UnitKey) -> dict | None:
    """The unit's sidecar, or ``None`` when it does not exist.

    Sidecars are written atomically and last, so a broken one is damage, not a half-written
    unit: it raises ``ValueError`` naming the file instead of being taken for an absent unit.
    """
    path = unit_paths(store, key).sidecar
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


def is_complete(store: str | os.PathLike, key: UnitKey, config_hash: str) -> bool:
    """True when the unit's sidecar names ``config_hash`` and its Parquet file exists."""
    side = read_sidecar(store, key)
    return bool(side) and side.get("config_hash") == config_hash and unit_paths(store, key).parquet.is_file()


def move_stale(store: str | os.PathLike, key: UnitKey, config_hash: str) -> Path | None:
    """Move the unit's files aside when its sidecar names another hash; returns where they went."""
    store = Path(store)
    side = read_sidecar(store, key)
    if side is None or side.get("config_hash") == config_hash:
        return None
    paths = unit_paths(store, key)
    dest = store / "stale" / key.pipeline / str(side.get("config_hash", "unknown")) / f"seed{key.seed}"
    dest.mkdir(parents=True, exist_ok=True)
    from rolling_calib.qlib_adapter.training import base_model_path

    for path in (paths.parquet, paths.valid_parquet, paths.checkpoint, base_model_path(paths.checkpoint), paths.log,
                 paths.sidecar):  # sidecar last: the commit marker
        if path.exists():
            shutil.move(str(path), str(dest / path.name))
    return dest


def read_unit(store: str | os.PathLike, key: UnitKey) -> pd.DataFrame:
    """Load one unit's predictions (columns :data:`UNIT_COLUMNS`)."""
    path = unit_paths(store, key).parquet
    if not path.is_file():
        raise ValueError(f"{path}: unit file missing (run 'rolling-calib run' to complete the store)")
    frame = pd.read_parquet(path)
    missing = [c for c in UNIT_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: expected columns {', '.join(UNIT_COLUMNS)}, missing {', '.join(missing)}")
    return frame


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
    import hashlib

    root = Path(provider_dir)
    instruments = list(instruments)
    digest = hashlib.sha256()
    names = sorted(p.relative_to(root).as_posix() for p in (root / "calendars").glob("*.txt")) if (root / "calendars").is_dir() else []
    for rel in [*names, *(f"instruments/{name}.txt" for name in instruments)]:
        path = root / rel
        digest.update(rel.encode())
        if path.is_file():
            digest.update(path.read_bytes())
    content = hashlib.sha256()
    features = root / "features"
    symbols = _universe_symbols(root, instruments)
    folders = sorted(features.iterdir()) if features.is_dir() else []
    if symbols is not None:
        folders = [f for f in folders if f.name.lower() in symbols]
    n_files = n_bytes = 0
    for folder in folders:
        for path in sorted(folder.glob("*.bin")):
            with open(path, "rb") as fh:
                file_hash = hashlib.file_digest(fh, "sha256").digest()
            content.update(f"{path.relative_to(features).as_posix()}:".encode() + file_hash)
            n_files += 1
            n_bytes += path.stat().st_size
    return {"path": str(root), "files": digest.hexdigest()[:16], "features": content.hexdigest()[:16],
            "feature_files": n_files, "feature_bytes": n_bytes}
