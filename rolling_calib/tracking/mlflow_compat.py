"""The MLflow internals rolling-calib relies on, in one place (the upgrade risk, named and tested).

MLflow offers no public API to inspect or upgrade a SQLite tracking database's schema, or to drop the
stores and engines it caches per URI. :mod:`rolling_calib.tracking.sqlite_db` needs all three to
repair a database a killed run left half-built; it reaches them only through this module:

* :func:`schema`: the head revision of MLflow's alembic migrations (``mlflow.store.db.utils.
  _get_latest_schema_revision``), the tables MLflow's SQLAlchemy models define (``mlflow.store.db.
  base_sql_model.Base.metadata``) and alembic's script directory of the migrations
  (``mlflow.store.db.utils._get_alembic_config``);
* :func:`upgrade_db`: MLflow's own migration of a database to the head revision
  (``mlflow.store.db.utils._upgrade_db``);
* :func:`forget_cached_stores`: the stores MLflow caches per URI (``TrackingStoreRegistry.
  _get_store_with_resolved_uri`` and ``ModelRegistryStoreRegistry``'s, both ``functools.lru_cache``)
  and the engines its SQLAlchemy stores keep per database (``SqlAlchemyStore._engine_map``).

``tests/tracking/test_mlflow_compat.py`` checks each assumption against the installed MLflow; a
failing check names the assumption and the installed version (:func:`assumption_broken`). Tested
with MLflow 3.12.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

__all__ = ["assumption_broken", "forget_cached_stores", "mlflow_version", "schema", "upgrade_db"]


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
