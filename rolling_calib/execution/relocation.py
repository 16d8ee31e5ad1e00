"""Stores that move: point a store's MLflow database (Qlib's recorders, rolling-calib's tracking) at its own files.

MLflow records each experiment's artifact location and each run's artifact URI as absolute
``file://`` URIs (``file:///OLD/STORE/mlartifacts/<experiment>/<run>/artifacts``). After ``mv`` of
the store, Qlib's ``R.get_recorder(...).load_object("pred.pkl")`` raises; after ``cp -r``, MLflow
pointed at the copy silently reads (and logs into) the original store's files.
:func:`repoint_store_db` rewrites every location under some other store's ``mlartifacts`` to this
store's, with plain SQL on ``STORE/mlflow.db`` (MLflow need not be installed), under the lock every
writer of that database takes (``<db>.lock``). ``run``, ``compare``, ``report`` and ``diagnose`` call it
on the store they open, and ``rolling-calib relocate --store DIR`` does it alone (before opening a moved
store with Qlib's ``R`` or ``mlflow ui`` directly).

Examples
--------
>>> import sqlite3, tempfile
>>> store = Path(tempfile.mkdtemp())
>>> with contextlib.closing(sqlite3.connect(store / "mlflow.db")) as con, con:
...     _ = con.execute("CREATE TABLE experiments (experiment_id INTEGER, artifact_location TEXT)")
...     _ = con.execute("CREATE TABLE runs (run_uuid TEXT, artifact_uri TEXT)")
...     _ = con.execute("INSERT INTO experiments VALUES (1, 'file:///old/place/mlartifacts')")
...     _ = con.execute("INSERT INTO runs VALUES ('r', 'file:///old/place/mlartifacts/r/artifacts')")
>>> moved = repoint_store_db(store)
>>> moved.old, moved.experiments, moved.runs
(('file:///old/place/mlartifacts',), 1, 1)
>>> with contextlib.closing(sqlite3.connect(store / "mlflow.db")) as con:
...     con.execute("SELECT artifact_uri FROM runs").fetchone()[0] == (store.resolve() / "mlartifacts").as_uri() + "/r/artifacts"
True
>>> repoint_store_db(store) is None   # already the store's own
True
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from rolling_calib.core.file_lock import exclusive_file_lock

__all__ = ["Repointed", "repoint_note", "repoint_store_db", "store_artifact_root"]

_ROOT_NAME = "mlartifacts"


@dataclass(frozen=True)
class Repointed:
    """What :func:`repoint_store_db` changed: the old roots, experiments and runs re-pointed, the new root."""

    db: Path
    old: tuple[str, ...]
    new: str
    experiments: int
    runs: int

    def line(self) -> str:
        """One line for the console."""
        return (f"{self.db}: the store moved: {self.experiments} MLflow experiment(s) and {self.runs} run(s) "
                f"re-pointed from {', '.join(self.old)} to {self.new}")


def store_artifact_root(store: str | os.PathLike) -> str:
    """``file:///STORE/mlartifacts``: where a store's MLflow artifacts live (absolute, as MLflow needs).

    >>> store_artifact_root("/data/store")
    'file:///data/store/mlartifacts'
    """
    return (Path(store).resolve() / _ROOT_NAME).as_uri()


def _root_of(location: str | None) -> str | None:
    """The ``file://.../mlartifacts`` root a location lies under (None: not a store's artifact location).

    >>> _root_of("file:///a/b/mlartifacts/3/abc/artifacts"), _root_of("file:///a/b/mlartifacts"), _root_of("s3://x")
    ('file:///a/b/mlartifacts', 'file:///a/b/mlartifacts', None)
    """
    if not location or not location.startswith("file://"):
        return None
    marker = f"/{_ROOT_NAME}"
    at = location.find(marker + "/")
    if at < 0:
        return location if location.endswith(marker) else None
    return location[:at + len(marker)]


def repoint_store_db(store: str | os.PathLike, *, timeout: float = 300.0, locked: bool = False) -> Repointed | None:
    """Point ``STORE/mlflow.db``'s artifact locations under another store's ``mlartifacts`` at this store's.

    Returns what changed, or None (no database, or nothing pointed elsewhere). Locations outside any
    store's ``mlartifacts`` (an ``exp_manager`` of the workflow's own, S3) are left as they are.
    ``locked``: the caller holds the database's lock already (the lock is not taken twice).
    """
    db = Path(store).resolve() / "mlflow.db"
    if not db.is_file():
        return None
    new = store_artifact_root(store)
    lock = contextlib.nullcontext() if locked else exclusive_file_lock(
        db.with_name(db.name + ".lock"), timeout=timeout,
        busy=lambda: TimeoutError(f"{db}: another process held the database's lock for {timeout:.0f} s"))
    with lock:
        with contextlib.closing(sqlite3.connect(db, timeout=timeout)) as con, con:
            tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not {"experiments", "runs"} <= tables:
                return None
            found = [loc for (loc,) in con.execute("SELECT artifact_location FROM experiments")]
            found += [uri for (uri,) in con.execute("SELECT artifact_uri FROM runs")]
            old = sorted({root for root in map(_root_of, found) if root is not None and root != new})
            experiments = runs = 0
            for root in old:
                n = len(root)
                experiments += con.execute(
                    "UPDATE experiments SET artifact_location = ? || substr(artifact_location, ?) "
                    "WHERE substr(artifact_location, 1, ?) = ? AND (length(artifact_location) = ? "
                    "OR substr(artifact_location, ?, 1) = '/')", (new, n + 1, n, root, n, n + 1)).rowcount
                runs += con.execute(
                    "UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) "
                    "WHERE substr(artifact_uri, 1, ?) = ? AND (length(artifact_uri) = ? "
                    "OR substr(artifact_uri, ?, 1) = '/')", (new, n + 1, n, root, n, n + 1)).rowcount
    return Repointed(db=db, old=tuple(old), new=new, experiments=experiments, runs=runs) if old else None


def repoint_note(store: str | os.PathLike) -> str | None:
    """:func:`repoint_store_db` for a command that only reads the store: the line to print, or None.

    A database it cannot rewrite (a read-only copy, a locked or damaged file) is named, not fatal:
    the command's own work needs no MLflow.
    """
    try:
        moved = repoint_store_db(store, timeout=30.0)
    except (sqlite3.Error, OSError, TimeoutError) as exc:
        return (f"{Path(store) / 'mlflow.db'}: could not re-point its artifact locations at this store "
                f"({type(exc).__name__}: {exc}); rolling-calib relocate --store {store} retries")
    return moved.line() if moved is not None else None
