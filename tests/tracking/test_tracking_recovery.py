"""Crash-safe MLflow tracking, against real SQLite databases (no mocks of MLflow).

A ``kill -9`` or a full disk during MLflow's schema creation used to break the tracking
database for good (``table registered_models already exists`` on every later run). Here the
faults are made real and deterministic: a child process ``os._exit(9)``s at the K-th schema
statement or at the first params of a run, or hits a file-size limit (``RLIMIT_FSIZE``, the
disk-full case); the next logging must repair or re-create the database, say so, and end with
every run loadable through ``MlflowClient``. Tracking failures never fail the orchestration.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from runner_helpers import write_fake_store

from rolling_calib.analysis.scoring import score_store
from rolling_calib.experiment.flow import track
from rolling_calib.tracking import mlflow_log
from rolling_calib.tracking.mlflow_log import (
    TrackingRepairWarning,
    default_tracking_uri,
    log_store,
    safe_log_store,
    track_store,
)
from rolling_calib.tracking.sqlite_db import (
    repair_tracking_db,
    sqlite_path,
    tracking_db_lock,
)

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.slow

REPO = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
N_RUNS = 14  # 2 pipelines + 4 seeds + 8 windows

#: Child process: log the store with ``safe_log_store`` and die like ``kill -9`` (``os._exit``,
#: no clean-up, hot journal left behind) at the K-th SQL statement of a kind (``schema``: DDL and
#: alembic bookkeeping; ``params``: a run's params; ``registered_models``: schema statements
#: counted from the one after ``CREATE TABLE registered_models``; ``between_migrations``: the
#: statement after the K-th ``UPDATE alembic_version``).
KILL_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from sqlalchemy import event
    from sqlalchemy.engine import Engine
    store, kind, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
    schema = ("CREATE", "ALTER", "DROP", "INSERT INTO ALEMBIC", "UPDATE ALEMBIC")
    prefixes = {"params": ("INSERT INTO PARAMS",)}.get(kind, schema)
    seen, armed = [0], [kind != "registered_models"]

    @event.listens_for(Engine, "before_cursor_execute")
    def _kill(conn, cursor, statement, parameters, context, executemany):
        text = statement.lstrip().upper()
        if kind == "between_migrations":  # right after the K-th migration was recorded
            seen[0] += text.startswith("UPDATE ALEMBIC_VERSION")
            if seen[0] == k and not text.startswith("UPDATE ALEMBIC_VERSION"):
                os._exit(9)
        elif not armed[0]:
            armed[0] = text.startswith("CREATE TABLE REGISTERED_MODELS")
        elif text.startswith(prefixes):
            seen[0] += 1
            if seen[0] == k:
                os._exit(9)

    from rolling_calib.analysis.scoring import score_store
    from rolling_calib.tracking import safe_log_store
    safe_log_store(score_store(store))
    print("statements", seen[0])
    """
)

#: Child process: log the store with every file capped at LIMIT bytes (writes past it fail with
#: EFBIG, as on a full disk); prints the outcome as JSON.
DISK_FULL_SCRIPT = textwrap.dedent(
    """
    import json, resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.RLIM_INFINITY))
    from rolling_calib.analysis.scoring import score_store
    from rolling_calib.tracking import safe_log_store
    outcome = safe_log_store(score_store(sys.argv[1]))
    print(json.dumps({"ok": outcome.ok, "uri": outcome.uri, "message": outcome.message}))
    """
)


def child(script: str, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], check=False, capture_output=True,
                          text=True, timeout=300, cwd=REPO, env=env)


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "store"
    write_fake_store(path, pipelines={"a": {}, "b": {}}, seeds=2)
    return path


@pytest.fixture(scope="module")
def schema_statements(tmp_path_factory):
    """How many schema statements this MLflow runs to create a database (~400 for MLflow 3)."""
    store = tmp_path_factory.mktemp("count") / "store"
    write_fake_store(store, pipelines={"a": {}}, seeds=1)
    done = child(KILL_SCRIPT, store, "schema", 0)
    assert done.returncode == 0, done.stderr[-3000:]
    count = int(done.stdout.split("statements")[-1])
    assert count > 50
    return count


def assert_fully_logged(uri: str, n: int = N_RUNS) -> list:
    """Every run is present once, complete (rc.version) and FINISHED, read by a fresh client."""
    client = MlflowClient(tracking_uri=uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, max_results=1000)
    keys = [r.data.tags["rc.key"] for r in runs]
    assert len(runs) == n and len(set(keys)) == n
    assert all("rc.version" in r.data.tags and r.info.status == "FINISHED" for r in runs)
    windows = [r for r in runs if r.data.tags["rc.level"] == "window"]
    assert windows and all(r.data.metrics["rows"] > 0 and r.data.params["predictions"] for r in windows)
    with sqlite3.connect(sqlite_path(uri)) as con:  # in the file itself, not in a store cached by this process
        assert con.execute("SELECT count(*) FROM runs WHERE lifecycle_stage = 'active'").fetchone()[0] == n
    return runs


def plain_mlflow_open(uri: str) -> subprocess.CompletedProcess:
    """MLflow alone (fresh process, no repair) opening the database."""
    return child(f"from mlflow.tracking import MlflowClient; MlflowClient(tracking_uri={uri!r}).search_experiments()")


# --------------------------------------------------------------------------- broken schemas
def test_half_created_schema_fails_plain_mlflow_and_is_moved_aside_and_relogged(store):
    uri = default_tracking_uri(store)
    db = sqlite_path(uri)
    killed = child(KILL_SCRIPT, store, "registered_models", 1)  # killed inside the registered_models migration
    assert killed.returncode == 9, killed.stderr[-3000:]
    broken = plain_mlflow_open(uri)
    assert broken.returncode != 0 and "table registered_models already exists" in broken.stderr  # the issue

    with pytest.warns(TrackingRepairWarning) as caught:
        log_store(score_store(store), tracking_uri=uri)
    (moved,) = store.glob("mlflow.db.broken-*")
    (message,) = [str(w.message) for w in caught if w.category is TrackingRepairWarning]
    assert f"tracking database {db} was not a complete MLflow database" in message
    assert "a schema migration from revision" in message and "registered_models already exists" in message
    assert f"moved it aside to {moved}" in message and f"logging into a fresh {db}" in message
    with sqlite3.connect(moved) as con:  # the broken file is kept as it was
        assert "registered_models" in {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    assert_fully_logged(uri)
    assert plain_mlflow_open(uri).returncode == 0
    again = track_store(score_store(store), tracking_uri=uri)
    assert (again.created, again.unchanged, again.repair) == (0, N_RUNS, None)


@pytest.mark.parametrize("fraction", [0.5, 0.99])  # ~6 %: the registered_models test
def test_kill_9_during_schema_creation_is_repaired_on_the_next_logging(store, schema_statements, fraction):
    k = max(1, int(schema_statements * fraction))
    killed = child(KILL_SCRIPT, store, "schema", k)
    assert killed.returncode == 9, killed.stderr[-3000:]
    uri = default_tracking_uri(store)

    outcome = safe_log_store(score_store(store))
    assert outcome.ok and outcome.uri == uri
    assert outcome.repaired_from is not None and outcome.repaired_from.is_file()
    assert outcome.repaired_from.parent == store and outcome.repaired_from.name.startswith(
        ("mlflow.db.broken-", "mlflow.db.pre-upgrade-"))
    assert str(outcome.repaired_from) in outcome.message and str(sqlite_path(uri)) in outcome.message
    assert outcome.summary.created == N_RUNS
    assert_fully_logged(uri)
    assert plain_mlflow_open(uri).returncode == 0
    assert safe_log_store(score_store(store)).message is None  # healthy now: nothing to say


@pytest.mark.parametrize("migrations", [40])
def test_kill_9_between_two_migrations_is_finished_by_upgrading_a_copy(store, migrations):
    killed = child(KILL_SCRIPT, store, "between_migrations", migrations)
    assert killed.returncode == 9, killed.stderr[-3000:]
    uri = default_tracking_uri(store)
    db = sqlite_path(uri)
    with sqlite3.connect(db) as con:
        (revision,) = con.execute("SELECT version_num FROM alembic_version").fetchone()

    outcome = safe_log_store(score_store(store))
    assert outcome.ok and outcome.repaired_from.name.startswith("mlflow.db.pre-upgrade-")
    assert outcome.message == (f"tracking database {db} was at an out-of-date MLflow schema revision {revision}; "
                               f"upgraded it to the current MLflow schema (the original is kept as "
                               f"{outcome.repaired_from})")
    assert not list(store.glob("mlflow.db.upgrading-*"))
    assert_fully_logged(uri)
    assert plain_mlflow_open(uri).returncode == 0


def test_kill_9_between_creating_a_run_and_logging_it_relogs_that_run(store):
    killed = child(KILL_SCRIPT, store, "params", 3)  # dies at the third run's params
    assert killed.returncode == 9, killed.stderr[-3000:]
    uri = default_tracking_uri(store)
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    half = [r for r in runs if "rc.version" not in r.data.tags]
    assert len(runs) == 3 and len(half) == 1 and half[0].info.status == "RUNNING"

    outcome = safe_log_store(score_store(store))
    assert outcome.ok and outcome.message is None  # the database itself was fine
    s = outcome.summary
    assert (s.created, s.updated, s.unchanged, s.relogged) == (N_RUNS - 2, 0, 2, 1)
    assert half[0].info.run_id not in {r.info.run_id for r in assert_fully_logged(uri)}


def test_unreadable_file_is_moved_aside_even_with_mlflow_connections_open_in_this_process(store):
    db = sqlite_path(default_tracking_uri(store))
    log_store(score_store(store), tracking_uri=default_tracking_uri(store))  # MLflow caches a store and an engine of db
    db.write_bytes(b"half a page of garbage " * 300)
    outcome = safe_log_store(score_store(store))
    assert outcome.ok and "not a readable SQLite database" in outcome.message
    assert outcome.repaired_from.read_bytes() == b"half a page of garbage " * 300
    assert_fully_logged(outcome.uri)


@pytest.mark.parametrize("when", ["schema", "runs"])
def test_disk_full_during_logging_leaves_results_and_the_next_logging_completes(store, tmp_path, when):
    uri = default_tracking_uri(store)
    db = sqlite_path(uri)
    if when == "schema":
        limit = 400_000  # fills up about a third of the way through the schema creation
    else:
        reference = tmp_path / "reference.db"
        MlflowClient(tracking_uri=f"sqlite:///{reference}").search_experiments()
        os.replace(reference, db)  # a complete empty schema; room for a few runs only
        limit = db.stat().st_size + 40_000
    done = child(DISK_FULL_SCRIPT, store, limit)
    assert done.returncode == 0, done.stderr[-3000:]
    failed = json.loads(done.stdout.strip().splitlines()[-1])
    assert failed["ok"] is False and failed["uri"] is None
    assert failed["message"].startswith("tracking failed: ") and "disk I/O error" in failed["message"]
    assert failed["message"].endswith(f"results are in {store}; re-run `rolling-calib run` (or call log_store) "
                                      "to log them")

    outcome = safe_log_store(score_store(store))
    assert outcome.ok, outcome.message
    assert_fully_logged(uri)
    if when == "schema":
        assert outcome.repaired_from is not None and str(outcome.repaired_from) in outcome.message
    else:  # SQLite rolled the failed transaction back: the database was fine, some runs were there
        assert outcome.message is None and 0 < outcome.summary.unchanged < N_RUNS


# --------------------------------------------------------------------------- left alone
def test_other_sqlite_databases_and_newer_schemas_are_left_alone(store, tmp_path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE measurements (x REAL)")
    assert repair_tracking_db(other) is None and other.is_file()

    uri = default_tracking_uri(store)
    db = sqlite_path(uri)
    assert plain_mlflow_open(uri).returncode == 0  # a child creates it: this process caches no verified store
    with sqlite3.connect(db) as con:  # as written by a newer MLflow than this one
        con.execute("UPDATE alembic_version SET version_num = 'ffffffffffff'")
    outcome = safe_log_store(score_store(store))
    assert not outcome.ok and outcome.uri is None and outcome.repaired_from is None
    assert outcome.message.startswith("tracking failed: NewerSchemaError: ") and "ffffffffffff" in outcome.message
    assert "newer MLflow" in outcome.message and "out-of-date" not in outcome.message
    assert not list(store.glob("mlflow.db.*-*"))  # nothing moved


# --------------------------------------------------------------------------- never blocks a run
def test_a_failure_mid_logging_does_not_fail_the_orchestration_and_the_next_logging_completes(store, monkeypatch):
    calls = []
    original = mlflow_log._log_window

    def full_disk_after_the_first_window(*args, **kwargs):
        if calls:
            raise OSError(28, "No space left on device")
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(mlflow_log, "_log_window", full_disk_after_the_first_window)
    outcome = track(score_store(store), tracking_uri=None, experiment_name="recovery")  # what run_experiment calls
    assert not outcome.ok and outcome.uri is None
    assert outcome.message == (f"tracking failed: OSError: [Errno 28] No space left on device; results are in "
                               f"{store.resolve()}; re-run `rolling-calib run` (or call log_store) to log them")

    monkeypatch.undo()
    again = track(score_store(store), tracking_uri=None, experiment_name="recovery")
    assert again.ok and again.message is None and again.uri == default_tracking_uri(store)
    assert (again.summary.created, again.summary.unchanged) == (N_RUNS - 3, 3)  # parent, seed, first window
    assert_fully_logged(again.uri)


def test_a_busy_database_is_reported_not_waited_for_forever(store):
    db = sqlite_path(default_tracking_uri(store))
    with tracking_db_lock(db):
        outcome = safe_log_store(score_store(store), lock_timeout=0.5)
    assert not outcome.ok and "is busy: another process has been logging into it" in outcome.message
    assert safe_log_store(score_store(store)).ok


def test_sqlite_path():
    assert sqlite_path("sqlite:////abs/m.db") == Path("/abs/m.db")
    assert sqlite_path("sqlite:///rel/m.db?timeout=5") == Path("rel/m.db").absolute()
    assert sqlite_path("sqlite://") is None and sqlite_path("postgresql://h/db") is None
