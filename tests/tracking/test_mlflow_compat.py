"""Each MLflow internal ``rolling_calib.tracking.mlflow_compat`` relies on still behaves as assumed.

On an MLflow upgrade that breaks one, the failing test names the assumption and the installed MLflow
version (``assumption_broken``), so the fix is to adapt ``mlflow_compat.py``, not to guess.
"""

from __future__ import annotations

import sqlite3

import pytest

pytest.importorskip("mlflow")

from rolling_calib.tracking import mlflow_compat  # noqa: E402
from rolling_calib.tracking.mlflow_compat import assumption_broken  # noqa: E402


def test_the_head_revision_is_the_head_of_mlflows_migration_scripts():
    head, tables, scripts = mlflow_compat.schema()
    assumption = "mlflow.store.db.utils._get_latest_schema_revision() is the head of _get_alembic_config's scripts"
    assert isinstance(head, str) and scripts.get_current_head() == head, \
        assumption_broken(assumption, f"{head!r} vs {scripts.get_current_head()!r}")
    assert {"experiments", "runs", "metrics", "params", "tags"} <= tables, assumption_broken(
        "Base.metadata (mlflow.store.db.base_sql_model) holds the tracking tables", f"{sorted(tables)[:8]}...")


def test_an_older_revision_is_one_of_the_scripts():
    _, _, scripts = mlflow_compat.schema()
    revisions = [s.revision for s in scripts.walk_revisions()]
    assert len(revisions) > 10, assumption_broken("the migrations are alembic revision scripts", f"{len(revisions)}")


def test_upgrade_db_migrates_an_old_database_to_the_head(tmp_path):
    """A database of MLflow's first schema (its initial models, before every migration) is migrated to the head."""
    import sqlalchemy
    from mlflow.store.tracking.dbmodels.initial_models import Base as InitialBase
    from sqlalchemy.pool import NullPool

    db = tmp_path / "mlflow.db"
    engine = sqlalchemy.create_engine(f"sqlite:///{db}", poolclass=NullPool)
    try:
        InitialBase.metadata.create_all(engine)
        mlflow_compat.upgrade_db(engine)
    finally:
        engine.dispose()
    head, tables, _ = mlflow_compat.schema()
    con = sqlite3.connect(db)
    try:
        version = [row[0] for row in con.execute("SELECT version_num FROM alembic_version")]
        present = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()
    assert version == [head], assumption_broken("mlflow.store.db.utils._upgrade_db(engine) migrates to the head",
                                                f"alembic_version {version}")
    assert tables <= present, assumption_broken("_upgrade_db creates every table of Base.metadata",
                                                f"missing {sorted(tables - present)}")


def test_the_store_caches_it_clears_exist():
    lookups = mlflow_compat._cached_store_lookups()
    assert len(lookups) == 2 and all(hasattr(f, "cache_clear") for f in lookups), assumption_broken(
        "TrackingStoreRegistry/ModelRegistryStoreRegistry._get_store_with_resolved_uri are lru_cache functions",
        f"{lookups}")
    classes = mlflow_compat._store_classes()
    assert len(classes) == 2 and all(isinstance(getattr(c, "_engine_map", None), dict) for c in classes), \
        assumption_broken("the SqlAlchemyStore classes keep their engines in a dict _engine_map",
                          f"{[(c.__module__, type(getattr(c, '_engine_map', None)).__name__) for c in classes]}")


def test_forget_cached_stores_drops_the_engine_of_a_moved_database(tmp_path):
    """After a store opened ``db``, forgetting it leaves no engine of ``db`` in MLflow's map (others stay)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    db = tmp_path / "mlflow.db"
    SqlAlchemyStore(f"sqlite:///{db}", str(tmp_path / "artifacts"))
    mine = [k for k, e in SqlAlchemyStore._engine_map.items() if e.url.database and str(db) in str(e.url.database)]
    assert mine, assumption_broken("SqlAlchemyStore(uri) registers its engine in _engine_map",
                                   f"{list(SqlAlchemyStore._engine_map)}")
    mlflow_compat.forget_cached_stores(db)
    assert not [k for k in mine if k in SqlAlchemyStore._engine_map]
