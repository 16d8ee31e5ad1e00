"""What the MLflow runs of a store say, on a real MLflow (SQLite) database (issue 39):

* their start and end are the units' training, not the logging (before: every run lasted ~0.1 s);
* after a pipeline's config changed, the runs of its older config (and the Qlib recorders of its older
  units) are no longer active under the same names: tagged ``rc.stale``, renamed, deleted.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pytest

from rolling_calib.analysis.scoring import score_store
from rolling_calib.execution import store as st
from rolling_calib.execution.units import UnitKey

from runner_helpers import write_fake_store

pytest.importorskip("mlflow")
from mlflow.entities import ViewType  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from rolling_calib.tracking.mlflow_log import track_store  # noqa: E402

PIPES = {"a": {"bias_sd": 1.0}, "b": {"bias_sd": 0.5}}
T0 = pd.Timestamp("2026-01-05 10:00:00", tz="UTC")


def _track(store: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return track_store(score_store(store))


def _edit_sidecars(store: Path, edit) -> None:
    """Rewrite every unit's sidecar with ``edit(key, sidecar)`` (the store's own write)."""
    opened = st.Store.open(store)
    for entry in opened.pipelines.values():
        for key in entry.units():
            side = st.read_sidecar(store, key)
            edit(key, side)
            st.atomic_write_json(opened.unit_paths(key).sidecar, side)


def _trained(key: UnitKey, side: dict) -> None:
    """Unit k of a seed trained for (10 + window) minutes, one after another from T0 (90 s for old sidecars)."""
    start = T0 + pd.Timedelta(hours=key.seed) + pd.Timedelta(minutes=30 * key.window)
    side["finished_at"] = (start + pd.Timedelta(minutes=10 + key.window)).isoformat()
    if key.pipeline == "b" and key.seed == 1:   # written before units recorded started_at: finished_at less total_s
        side["timings"] = {"total_s": 90.0}
    else:
        side["started_at"] = start.isoformat()


def _ms(when: pd.Timestamp) -> int:
    return int(when.timestamp() * 1000)


@pytest.fixture
def store(tmp_path) -> Path:
    write_fake_store(tmp_path / "store", pipelines=PIPES, seeds=2)
    return tmp_path / "store"


def _runs(store: Path, *, deleted: bool = False) -> list:
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    view = ViewType.DELETED_ONLY if deleted else ViewType.ACTIVE_ONLY
    ids = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(ids, run_view_type=view, max_results=1000)


def test_runs_last_as_long_as_the_training(store):
    _track(store)                                   # logged once without training times (old sidecars)
    _edit_sidecars(store, _trained)
    summary = _track(store)
    assert summary.relogged == 8 + 4 + 2            # the window runs, seeds and pipelines: again with their times
    runs = {r.data.tags["mlflow.runName"]: r.info for r in _runs(store)}
    start, end = T0 + pd.Timedelta(hours=1, minutes=30), T0 + pd.Timedelta(hours=1, minutes=41)
    assert (runs["a seed1 w01"].start_time, runs["a seed1 w01"].end_time) == (_ms(start), _ms(end))
    old = runs["b seed1 w01"]                       # no started_at: finished_at less its 90 s
    assert (old.start_time, old.end_time) == (_ms(end - pd.Timedelta(seconds=90)), _ms(end))
    seed = runs["a seed0"]                          # a seed spans its units, a pipeline its seeds
    assert (seed.start_time, seed.end_time) == (_ms(T0), _ms(T0 + pd.Timedelta(minutes=41)))
    assert (runs["a"].start_time, runs["a"].end_time) == (_ms(T0), _ms(T0 + pd.Timedelta(hours=1, minutes=41)))
    active = {r.info.run_id for r in _runs(store)}
    assert all(r.data.tags["mlflow.parentRunId"] in active for r in _runs(store) if "mlflow.parentRunId" in r.data.tags)
    again = _track(store)                           # nothing changed: nothing relogged
    assert (again.relogged, again.created, again.updated) == (0, 0, 0)


def test_runs_of_an_older_config_are_no_longer_active_under_its_names(store):
    from mlflow.tracking import MlflowClient

    first = _track(store)
    client = MlflowClient(first.tracking_uri)
    recorders = client.create_experiment("a", artifact_location=st.Store.open(store).layout.artifact_uri)
    old = client.create_run(recorders, run_name="a__seed0__w00", tags={"pipeline": "a", "config_hash": "hash-a"})
    # the config of pipeline "a" changed: run moved its units aside and retrained them under the new hash
    manifest = st.read_manifest(store)
    manifest["pipelines"]["a"]["config_hash"] = "hash-a2"
    st.atomic_write_json(store / "manifest.json", manifest)
    _edit_sidecars(store, lambda key, side: side.update(config_hash="hash-a2") if key.pipeline == "a" else None)
    client.create_run(recorders, run_name="a__seed0__w00", tags={"pipeline": "a", "config_hash": "hash-a2"})
    summary = _track(store)
    assert summary.stale == 1 + 2 + 4 + 1           # pipeline, seeds, windows of the old config, its Qlib recorder
    active = [r.data.tags["mlflow.runName"] for r in _runs(store)]
    for name in ("a", "a seed0", "a seed1 w01", "a__seed0__w00", "b", "b seed1"):
        assert active.count(name) == 1, (name, sorted(active))
    deleted = {r.info.run_id: r for r in _runs(store, deleted=True)}
    assert old.info.run_id in deleted and len(deleted) == summary.stale
    for run in deleted.values():
        assert run.data.tags["mlflow.runName"].endswith(" [stale]")
        assert run.data.tags["rc.stale"] == (f"config changed: a is config hash-a2 now; this run is of config hash-a "
                                             f"(its units were moved to {store.resolve() / 'stale' / 'a' / 'hash-a'}/ "
                                             f"and retrained)")
    assert _track(store).stale == 0                 # retired once
