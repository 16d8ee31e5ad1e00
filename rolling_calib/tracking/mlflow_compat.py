"""The MLflow internals rolling-calib relies on, in one place (the upgrade risk, named and tested).

MLflow offers no public API to inspect or upgrade a SQLite tracking database's schema, to drop the
stores and engines it caches per URI, or to change where an experiment or a run keeps its artifacts.
:mod:`rolling_calib.tracking.sqlite_db` needs the first three to repair a database a killed run left
half-built, :mod:`rolling_calib.tracking.relocation` the last to point a moved store's database at
its own files; they reach them only through this module:

* :func:`schema`: the head revision of MLflow's alembic migrations (``mlflow.store.db.utils.
  _get_latest_schema_revision``), the tables MLflow's SQLAlchemy models define (``mlflow.store.db.
  base_sql_model.Base.metadata``) and alembic's script directory of the migrations
  (``mlflow.store.db.utils._get_alembic_config``);
* :func:`upgrade_db`: MLflow's own migration of a database to the head revision
  (``mlflow.store.db.utils._upgrade_db``);
* :func:`forget_cached_stores`: the stores MLflow caches per URI (``TrackingStoreRegistry.
  _get_store_with_resolved_uri`` and ``ModelRegistryStoreRegistry``'s, both ``functools.lru_cache``)
  and the engines its SQLAlchemy stores keep per database (``SqlAlchemyStore._engine_map``);
* :func:`artifact_locations` and :func:`set_artifact_locations`: the columns MLflow's SQL schema keeps
  them in (``experiments.artifact_location`` by ``experiment_id``, ``runs.artifact_uri`` by
  ``run_uuid``), read and written with plain SQL on the SQLite file (MLflow's API sets them only when
  it creates an experiment or a run, and opening the file through MLflow would migrate its schema).

``tests/tracking/test_mlflow_compat.py`` checks each assumption against the installed MLflow; a
failing check names the assumption and the installed version (:func:`assumption_broken`). Tested
with MLflow 3.12.
"""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ArtifactLocations", "artifact_locations", "assumption_broken", "forget_cached_stores", "mlflow_version",
           "schema", "set_artifact_locations", "upgrade_db"]


def mlflow_version() -> str:
    """The installed MLflow's version."""
    import mlflow

    return mlflow.__version__


def assumption_broken(assumption: str, found: str) -> str:
    """The message of an MLflow internal that no longer behaves as this module assumes.

    >>> assumption_broken("x is a dict", "a list").startswith("MLflow ")
    True
    """
    return (f"MLflow {mlflow_version()}: {assumption} no longer holds (found {found}); adapt "
            "rolling_calib/tracking/mlflow_compat.py to this MLflow, or install the MLflow it was tested with (3.12)")


def schema() -> tuple[str, set[str], Any]:
    """(head revision, tables MLflow's models define, alembic script directory of MLflow's migrations)."""
    import mlflow.store.db.utils as dbu  # also imports every model, filling Base.metadata
    from alembic.script import ScriptDirectory
    from mlflow.store.db.base_sql_model import Base

    return dbu._get_latest_schema_revision(), set(Base.metadata.tables), \
        ScriptDirectory.from_config(dbu._get_alembic_config(db_url=""))


def upgrade_db(engine: Any) -> None:
    """Migrate the database behind the SQLAlchemy ``engine`` to MLflow's head revision (MLflow's own migration)."""
    import mlflow.store.db.utils as dbu

    dbu._upgrade_db(engine)


def _cached_store_lookups() -> list[Any]:
    """MLflow's per-URI store caches (``lru_cache``-wrapped functions)."""
    lookups = []
    with contextlib.suppress(ImportError):
        from mlflow.tracking._tracking_service.registry import TrackingStoreRegistry

        lookups.append(TrackingStoreRegistry._get_store_with_resolved_uri)
    with contextlib.suppress(ImportError):
        from mlflow.tracking._model_registry.registry import ModelRegistryStoreRegistry

        lookups.append(ModelRegistryStoreRegistry._get_store_with_resolved_uri)
    return lookups


def _store_classes() -> list[type]:
    """MLflow's SQLAlchemy store classes (each keeps its engines in ``_engine_map``)."""
    classes = []
    with contextlib.suppress(ImportError):
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        classes.append(SqlAlchemyStore)
    with contextlib.suppress(ImportError):
        from mlflow.store.model_registry.sqlalchemy_store import SqlAlchemyStore as RegistryStore

        classes.append(RegistryStore)
    return classes


def forget_cached_stores(db: Path) -> None:
    """Drop MLflow's cached stores and engines of the SQLite file ``db`` in this process (after it was moved).

    Best effort: an MLflow without these caches has nothing to forget.
    """
    for lookup in _cached_store_lookups():
        with contextlib.suppress(Exception):
            lookup.cache_clear()
    target = Path(db).resolve()
    for cls in _store_classes():
        engines = getattr(cls, "_engine_map", None)  # absent in an MLflow that keeps no engines per class
        if not isinstance(engines, dict):
            continue
        for key, engine in list(engines.items()):
            with contextlib.suppress(Exception):
                database = engine.url.database
                if engine.url.get_backend_name() == "sqlite" and database and Path(database).resolve() == target:
                    engines.pop(key, None)
                    engine.dispose()


# --------------------------------------------------------------------------- artifact locations
@dataclass(frozen=True)
class ArtifactLocations:
    """Where a tracking database's experiments and runs keep their artifacts, as recorded.

    ``experiments``: ``(experiment_id, artifact_location)``; ``runs``: ``(run_uuid, experiment_id,
    artifact_uri)``. ``None`` from :func:`artifact_locations` when the file holds no MLflow tables.
    """

    experiments: tuple[tuple[str, str], ...]
    runs: tuple[tuple[str, str, str], ...]


def artifact_locations(con: sqlite3.Connection) -> ArtifactLocations | None:
    """The artifact locations of the MLflow database open in ``con`` (``None``: not an MLflow database)."""
    tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not {"experiments", "runs"} <= tables:
        return None
    experiments = tuple((str(i), loc) for i, loc in con.execute("SELECT experiment_id, artifact_location FROM experiments")
                        if loc)
    runs = tuple((str(r), str(e), uri) for r, e, uri in con.execute("SELECT run_uuid, experiment_id, artifact_uri FROM runs")
                 if uri)
    return ArtifactLocations(experiments, runs)


def set_artifact_locations(con: sqlite3.Connection, *, experiments: dict[str, str], runs: dict[str, str]) -> tuple[int, int]:
    """Set the artifact location of experiments (by id) and runs (by run uuid); the numbers of rows changed.

    The caller holds the database's writers' lock and commits (``with con:``).
    """
    n_exp = sum(con.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?",
                            (loc, int(i) if str(i).isdigit() else i)).rowcount for i, loc in experiments.items())
    n_runs = sum(con.execute("UPDATE runs SET artifact_uri = ? WHERE run_uuid = ?", (uri, r)).rowcount
                 for r, uri in runs.items())
    return n_exp, n_runs
