"""Stores that move: point a store's MLflow database (Qlib's recorders, rolling-calib's tracking) at its own files.

MLflow records each experiment's artifact location and each run's artifact URI as absolute
``file://`` URIs (``file:///OLD/STORE/mlartifacts/<run>/artifacts``). After ``mv`` of the store,
Qlib's ``R.get_recorder(...).load_object("pred.pkl")`` raises and ``mlflow ui`` says "Failed to
download artifacts"; after ``cp -r``, MLflow pointed at the copy silently reads (and logs into) the
original store's files.

:func:`foreign_roots` finds the artifact roots a database names that are not this store's (a
read, nothing written); :func:`repoint_store_db` rewrites each location under one of them to
this store's ``mlartifacts``, through :func:`~rolling_calib.tracking.mlflow_compat.set_artifact_locations`
(MLflow's API cannot change them), under the lock every writer of that database takes
(``<db>.lock``). A location's root is found exactly: an experiment's location *is* its root
(``.../mlartifacts``, or ``.../mlartifacts/<experiment id>`` under a default root), a run's URI is
its root followed by ``/<run id>/artifacts`` (or ``/<experiment id>/<run id>/artifacts``), so a store
kept under a folder that is itself named ``mlartifacts`` is never taken for another.
``run``, ``compare``, ``report``, ``diagnose`` and ``metaeval`` call :func:`repoint_note` on the store
they open; ``ls`` says which stores need it (:func:`relocation_note`); ``rolling-calib relocate
--store DIR`` does it alone (before opening a moved store with Qlib's ``R`` or ``mlflow ui``). A store
that cannot be written (a read-only mount, no permission) is refused at once, in one line, without
waiting on the lock (:class:`StoreNotWritableError`).

Examples
--------
>>> import sqlite3, tempfile
>>> store = Path(tempfile.mkdtemp())
>>> with contextlib.closing(sqlite3.connect(store / "mlflow.db")) as con, con:
...     _ = con.execute("CREATE TABLE experiments (experiment_id INTEGER, artifact_location TEXT)")
...     _ = con.execute("CREATE TABLE runs (run_uuid TEXT, experiment_id INTEGER, artifact_uri TEXT)")
...     _ = con.execute("INSERT INTO experiments VALUES (1, 'file:///old/mlartifacts/place/mlartifacts')")
...     _ = con.execute("INSERT INTO runs VALUES ('r', 1, 'file:///old/mlartifacts/place/mlartifacts/r/artifacts')")
>>> foreign_roots(store)
['file:///old/mlartifacts/place/mlartifacts']
>>> moved = repoint_store_db(store)
>>> moved.old, moved.experiments, moved.runs
(('file:///old/mlartifacts/place/mlartifacts',), 1, 1)
>>> with contextlib.closing(sqlite3.connect(store / "mlflow.db")) as con:
...     con.execute("SELECT artifact_uri FROM runs").fetchone()[0] == store_artifact_root(store) + "/r/artifacts"
True
>>> repoint_store_db(store) is None   # already the store's own
True
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from rolling_calib.core.file_lock import exclusive_file_lock
from rolling_calib.core.store_layout import ARTIFACTS, StoreLayout
from rolling_calib.tracking import mlflow_compat

__all__ = ["Repointed", "StoreNotWritableError", "foreign_roots", "relocation_note", "repoint_note",
           "repoint_store_db", "store_artifact_root"]

_MARK = f"/{ARTIFACTS}"


class StoreNotWritableError(ValueError):
    """The store's database cannot be rewritten (read-only file system, no permission): one line, no wait."""


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
    return StoreLayout(Path(store)).artifact_uri


def _root(prefix: str, experiment_id: str) -> str | None:
    """``prefix`` when it is an artifact root (``.../mlartifacts``), or ``.../mlartifacts/<experiment id>``'s root."""
    if prefix.endswith(_MARK):
        return prefix
    head, _, tail = prefix.rpartition("/")
    return head if tail == experiment_id and head.endswith(_MARK) else None


def _experiment_root(location: str, experiment_id: str) -> str | None:
    """The ``file://.../mlartifacts`` root of an experiment's artifact location (None: not a store's).

    >>> _experiment_root("file:///a/mlartifacts/b/mlartifacts", "1"), _experiment_root("file:///a/b/mlartifacts/4", "4")
    ('file:///a/mlartifacts/b/mlartifacts', 'file:///a/b/mlartifacts')
    >>> _experiment_root("file:///a/mlartifacts/b", "1") is None, _experiment_root("s3://x/mlartifacts", "1") is None
    (True, True)
    """
    if not location.startswith("file://"):
        return None
    return _root(location.rstrip("/"), experiment_id)


def _run_root(uri: str, run_id: str, experiment_id: str) -> str | None:
    """The ``file://.../mlartifacts`` root of a run's artifact URI ``<root>[/<experiment id>]/<run id>/artifacts``.

    >>> _run_root("file:///a/mlartifacts/s/mlartifacts/r1/artifacts", "r1", "1")
    'file:///a/mlartifacts/s/mlartifacts'
    >>> _run_root("file:///a/s/mlartifacts/1/r1/artifacts", "r1", "1"), _run_root("file:///a/r1/artifacts", "r1", "1")
    ('file:///a/s/mlartifacts', None)
    """
    tail = f"/{run_id}/artifacts"
    if not uri.startswith("file://") or not uri.endswith(tail):
        return None
    return _root(uri[: -len(tail)], experiment_id)


def _plan(found: mlflow_compat.ArtifactLocations, new: str) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """The new locations of the experiments and runs under another root, and the old roots."""
    experiments, runs, old = {}, {}, set()
    exp_of = {}
    for experiment_id, location in found.experiments:
        root = _experiment_root(location, experiment_id)
        exp_of[experiment_id] = root
        if root is not None and root != new:
            experiments[experiment_id] = new + location.rstrip("/")[len(root):]
            old.add(root)
    for run_id, experiment_id, uri in found.runs:
        root = _run_root(uri, run_id, experiment_id)
        if root is not None and root != new:
            runs[run_id] = new + uri[len(root):]
            old.add(root)
    return experiments, runs, sorted(old)


def _read(db: Path) -> mlflow_compat.ArtifactLocations | None:
    """The database's artifact locations, read-only (``None``: no database, or no MLflow tables)."""
    if not db.is_file():
        return None
    with contextlib.closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=30.0)) as con:
        return mlflow_compat.artifact_locations(con)


def foreign_roots(store: str | os.PathLike) -> list[str]:
    """The artifact roots ``STORE/mlflow.db`` names that are not this store's: after ``mv`` or ``cp -r``.

    Nothing is written. Locations outside any store's ``mlartifacts`` (an ``exp_manager`` of the
    workflow's own, S3) are not counted.
    """
    layout = StoreLayout(Path(store))
    found = _read(layout.tracking_db)
    return [] if found is None else _plan(found, layout.artifact_uri)[2]


def _not_writable(db: Path) -> str | None:
    """Why ``db`` (and its lock beside it) cannot be rewritten here (None: it can)."""
    lock = StoreLayout(db.parent).tracking_db_lock
    for path in (db, db.parent, *([lock] if lock.exists() else [])):   # the directory: SQLite's journal goes there
        if not os.access(path, os.W_OK):
            try:
                read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
            except OSError:
                read_only = False
            return (f"{path}: {os.strerror(errno.EROFS if read_only else errno.EACCES).lower()}")
    return None


def repoint_store_db(store: str | os.PathLike, *, timeout: float = 300.0, locked: bool = False) -> Repointed | None:
    """Point ``STORE/mlflow.db``'s artifact locations under another store's ``mlartifacts`` at this store's.

    Returns what changed, or None (no database, or nothing pointed elsewhere). Locations outside any
    store's ``mlartifacts`` (an ``exp_manager`` of the workflow's own, S3) are left as they are.
    ``locked``: the caller holds the database's lock already (the lock is not taken twice).

    Raises
    ------
    StoreNotWritableError
        Locations point elsewhere but the database cannot be written (checked before any lock is waited for).
    """
    layout = StoreLayout(Path(store).resolve())
    db, new = layout.tracking_db, layout.artifact_uri
    found = _read(db)
    if found is None or not _plan(found, new)[2]:
        return None
    why = _not_writable(db)
    if why is not None:
        raise StoreNotWritableError(
            f"{db}: its MLflow artifact locations point at {', '.join(_plan(found, new)[2])} (the store was moved or "
            f"copied) and cannot be re-pointed here ({why}); copy the store somewhere writable and run "
            f"'rolling-calib relocate --store COPY' there")
    lock = contextlib.nullcontext() if locked else exclusive_file_lock(
        layout.tracking_db_lock, timeout=timeout,
        busy=lambda: TimeoutError(f"{db}: another process held the database's lock for {timeout:.0f} s"))
    with lock, contextlib.closing(sqlite3.connect(db, timeout=timeout)) as con, con:
        found = mlflow_compat.artifact_locations(con)   # again, under the lock
        if found is None:
            return None
        experiments, runs, old = _plan(found, new)
        if not old:
            return None
        n_exp, n_runs = mlflow_compat.set_artifact_locations(con, experiments=experiments, runs=runs)
    return Repointed(db=db, old=tuple(old), new=new, experiments=n_exp, runs=n_runs)


def repoint_note(store: str | os.PathLike) -> str | None:
    """:func:`repoint_store_db` for a command that only reads the store: the line to print, or None.

    A database it cannot rewrite (a read-only copy, a locked or damaged file) is named with what that
    means and the fix, not fatal: the command's own work needs no MLflow.
    """
    try:
        moved = repoint_store_db(store, timeout=30.0)
    except StoreNotWritableError as exc:
        return (f"{exc}; until then MLflow and Qlib's R read (or fail to read: 'Failed to download artifacts') "
                f"the artifacts there, not this store's")
    except (sqlite3.Error, OSError, TimeoutError) as exc:
        return (f"{StoreLayout(Path(store)).tracking_db}: could not re-point its artifact locations at this store "
                f"({type(exc).__name__}: {exc}); rolling-calib relocate --store {store} retries")
    return moved.line() if moved is not None else None


def relocation_note(store: str | os.PathLike) -> str | None:
    """What ``ls`` says of a store whose database names another store's artifacts (None: its own, or none).

    A read: nothing is rewritten (``ls`` walks many stores).
    """
    try:
        roots = foreign_roots(store)
    except sqlite3.Error as exc:
        return f"its MLflow database cannot be read ({type(exc).__name__}: {exc})"
    if not roots:
        return None
    return (f"moved or copied: its MLflow database points at {', '.join(roots)}; run 'rolling-calib relocate "
            f"--store {store}' before opening it with mlflow ui or Qlib's R")
