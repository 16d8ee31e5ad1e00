"""Crash safety of a SQLite tracking database: check it, repair it, serialise its writers.

MLflow creates its SQLite schema in ~65 alembic migrations whose DDL is committed one
statement at a time, so a ``kill -9`` or a full disk during creation (or an upgrade) leaves
a half-built schema: some tables exist, ``alembic_version`` names an intermediate revision
(or none), and every later open fails for good (``table registered_models already exists``,
``table _alembic_tmp_runs already exists``, ``out-of-date database schema``, ...).

:func:`repair_tracking_db` runs before each logging (under :func:`tracking_db_lock`) and
classifies the file:

* absent, empty, or a complete MLflow database at this MLflow's head revision: left alone;
* not a readable SQLite database, or ``PRAGMA quick_check`` fails: moved aside;
* MLflow tables without an ``alembic_version`` revision (creation interrupted), or at the
  head revision but with tables missing: moved aside;
* an older revision known to this MLflow (an interrupted migration, or a database written by
  an older MLflow): a copy is upgraded; if that succeeds the copy replaces the database and
  the original is kept as ``<db>.pre-upgrade-<UTC timestamp>``, otherwise the database is
  moved aside (a full disk during the copy or upgrade changes nothing: the next logging retries);
* a revision this MLflow does not know (written by a newer MLflow): left alone, and
  :class:`NewerSchemaError` says so (MLflow's own message calls it "out-of-date" and suggests an
  upgrade that cannot work);
* a SQLite file without any MLflow table: left alone.

"Moved aside" means renamed to ``<db>.broken-<UTC timestamp>`` (with its ``-journal`` /
``-wal`` / ``-shm`` files) so MLflow creates a fresh database; nothing is deleted.
Re-logging re-creates every run from the result store, which holds the results.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sqlite3
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rolling_calib.core.file_lock import exclusive_file_lock, lock_holder
from rolling_calib.core.store_layout import db_lock_path
from rolling_calib.tracking import mlflow_compat

__all__ = ["DbRepair", "NewerSchemaError", "TrackingBusyError", "repair_tracking_db", "sqlite_path", "tracking_db_lock"]

_SIDECARS = ("-journal", "-wal", "-shm")


class TrackingBusyError(RuntimeError):
    """Another process kept the tracking database's lock longer than the timeout."""


class NewerSchemaError(RuntimeError):
    """The database was written by a newer MLflow than the installed one (its schema revision is unknown here)."""


@dataclass(frozen=True)
class DbRepair:
    """A tracking database that was moved aside (``recreated``) or upgraded on a copy (``upgraded``)."""

    action: str  # "recreated" | "upgraded"
    database: Path
    moved_to: Path  # the original file, kept
    reason: str

    @property
    def message(self) -> str:
        if self.action == "upgraded":
            return (f"tracking database {self.database} {self.reason}; upgraded it to the current MLflow schema "
                    f"(the original is kept as {self.moved_to})")
        return (f"tracking database {self.database} was not a complete MLflow database ({self.reason}); "
                f"moved it aside to {self.moved_to} and logging into a fresh {self.database}")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (``None`` for other URIs and in-memory databases).

    Examples
    --------
    >>> sqlite_path("sqlite:////data/run1/mlflow.db")
    PosixPath('/data/run1/mlflow.db')
    >>> sqlite_path("http://localhost:5000") is None, sqlite_path("sqlite:///:memory:") is None
    (True, True)
    """
    prefix = "sqlite:///"
    if not uri.startswith(prefix):
        return None
    rest = uri[len(prefix):].split("?", 1)[0]
    if rest in ("", ":memory:") or rest.startswith("file:"):
        return None
    return Path(rest).absolute()


@contextlib.contextmanager
def tracking_db_lock(db: Path, *, timeout: float = 300.0) -> Iterator[None]:
    """Exclusive ``flock`` on ``<db>.lock``: one process checks, repairs and logs at a time.

    The operating system drops the lock when its holder dies (``kill -9`` included).

    Raises
    ------
    TrackingBusyError
        The lock stayed taken for ``timeout`` seconds.
    """
    lock = db_lock_path(db)

    def busy() -> TrackingBusyError:
        holder = lock_holder(lock)
        return TrackingBusyError(f"tracking database {db} is busy: another process has been logging into it "
                                 f"for {timeout:.0f} s{f' ({holder})' if holder else ''}; the units are stored, "
                                 f"re-run to log them")

    def waiting(holder: str) -> None:  # one line before a wait of up to `timeout` seconds, never silent
        print(f"tracking database {db} is locked by {holder or 'another process'}; waiting up to {timeout:.0f} s "
              f"(lock file {lock})", file=sys.stderr, flush=True)

    with exclusive_file_lock(lock, timeout=timeout, busy=busy, poll=0.2, waiting=waiting):
        yield


# --------------------------------------------------------------------------- inspection
@dataclass(frozen=True)
class _State:
    problem: str | None = None  # why the file must be moved aside; None: usable as it is
    old_revision: str | None = None  # an older revision known to this MLflow: try an upgrade
    newer_revision: str | None = None  # a revision this MLflow does not know: a newer MLflow wrote it


def _inspect(db: Path) -> _State:
    """Classify the file (see the module docstring). Locked / busy / I/O errors propagate."""
    try:
        # a normal read-write connection: a hot journal left by a killed writer is rolled back here
        con = sqlite3.connect(db, timeout=30)
        try:
            check = [row[0] for row in con.execute("PRAGMA quick_check")]
            tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            versions = ([row[0] for row in con.execute("SELECT version_num FROM alembic_version")]
                        if "alembic_version" in tables else [])
        finally:
            con.close()
    except sqlite3.OperationalError:
        raise  # locked, busy, disk I/O, cannot open: nothing a repair fixes
    except sqlite3.DatabaseError as exc:  # not a database, malformed image
        return _State(problem=f"not a readable SQLite database: {exc}")
    if check != ["ok"]:
        return _State(problem=f"integrity check failed: {'; '.join(check[:3])}")
    tables = {t for t in tables if not t.startswith("sqlite_")}
    data_tables = {t for t in tables if t != "alembic_version"}
    if not data_tables and not versions:
        return _State()  # empty: MLflow creates the schema
    head, expected, scripts = mlflow_compat.schema()
    if not versions:
        if not data_tables & expected:
            return _State()  # some other SQLite database: not ours to move
        return _State(problem=f"schema creation was interrupted: {len(data_tables)} table(s) but no "
                              "alembic_version revision")
    if len(versions) > 1:
        return _State(problem=f"alembic_version holds {len(versions)} revisions")
    (version,) = versions
    if version == head:
        missing = sorted(expected - tables)
        if missing:
            return _State(problem=f"at revision {head} but {len(missing)} table(s) missing: "
                                  f"{', '.join(missing[:5])}")
        return _State()
    try:
        scripts.get_revision(version)
    except Exception:  # noqa: BLE001 - unknown to this MLflow (a newer one wrote it): left alone
        return _State(newer_revision=version)
    return _State(old_revision=version)


# --------------------------------------------------------------------------- repair
def _aside_name(db: Path, kind: str) -> Path:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = db.with_name(f"{db.name}.{kind}-{stamp}")
    n = 1
    while target.exists():
        target = db.with_name(f"{db.name}.{kind}-{stamp}-{n}")
        n += 1
    return target


def _move_aside(db: Path, target: Path) -> None:
    """Rename the database and its journal files (a stale journal must never meet a fresh database)."""
    os.replace(db, target)
    for suffix in _SIDECARS:
        side = db.with_name(db.name + suffix)
        if side.exists():
            os.replace(side, target.with_name(target.name + suffix))


_RESOURCE_ERRORS = ("disk is full", "disk i/o error", "no space left", "database is locked", "unable to open",
                    "readonly database", "out of memory")


def _resource_error(exc: BaseException) -> bool:
    """A full disk, a lock, an I/O error: says nothing about the schema (try again, move nothing)."""
    return isinstance(exc, OSError) or any(marker in str(exc).lower() for marker in _RESOURCE_ERRORS)


def _upgrade_copy(db: Path) -> tuple[Path | None, str | None]:
    """Upgrade a copy of ``db`` to the head revision: (the upgraded copy, None) or (None, why not).

    A full disk (or another resource error) while copying or upgrading propagates: the
    database is then neither upgraded nor moved, and the next logging tries again.
    """
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    tmp = db.with_name(f"{db.name}.upgrading-{os.getpid()}")
    keep = False
    try:
        tmp.unlink(missing_ok=True)
        src, dst = sqlite3.connect(db, timeout=30), sqlite3.connect(tmp)
        try:
            src.backup(dst)
        finally:
            src.close()
            dst.close()
        engine = sqlalchemy.create_engine(f"sqlite:///{tmp}", poolclass=NullPool)
        try:
            mlflow_compat.upgrade_db(engine)
        except Exception as exc:  # a half-applied migration makes the copy useless
            if _resource_error(exc):
                raise
            return None, (str(exc).splitlines() or [type(exc).__name__])[0]
        finally:
            engine.dispose()
        state = _inspect(tmp)
        if state.problem is not None or state.old_revision is not None:
            return None, state.problem or f"still at revision {state.old_revision} after upgrading"
        keep = True
        return tmp, None
    finally:
        if not keep:
            for path in [tmp, *(tmp.with_name(tmp.name + s) for s in _SIDECARS)]:
                path.unlink(missing_ok=True)


def repair_tracking_db(db: Path) -> DbRepair | None:
    """Make ``db`` usable by MLflow (call it under :func:`tracking_db_lock`); ``None``: nothing to do.

    See the module docstring for what is moved aside, upgraded or left alone.
    """
    db = Path(db)
    if not db.is_file() or db.stat().st_size == 0:
        return None
    state = _inspect(db)
    if state.newer_revision is not None:
        raise NewerSchemaError(
            f"{db} was written by a newer MLflow: its schema revision {state.newer_revision} is unknown to the "
            f"installed MLflow {mlflow_compat.mlflow_version()}; open it with the MLflow that wrote it, or log to another "
            "database (--tracking-uri); the file is left as it is")
    if state.problem is None and state.old_revision is None:
        return None
    if state.old_revision is not None:
        upgraded, error = _upgrade_copy(db)
        if upgraded is not None:
            kept = _aside_name(db, "pre-upgrade")
            _move_aside(db, kept)
            os.replace(upgraded, db)
            mlflow_compat.forget_cached_stores(db)
            return DbRepair("upgraded", db, kept, f"was at an out-of-date MLflow schema revision {state.old_revision}")
        reason = f"a schema migration from revision {state.old_revision} was interrupted: {error}"
    else:
        reason = state.problem
    target = _aside_name(db, "broken")
    _move_aside(db, target)
    mlflow_compat.forget_cached_stores(db)
    return DbRepair("recreated", db, target, reason)


