"""A raced sweep in MLflow (issue 35): what ``STORE/race.json`` says is on the comparison run and the pipeline runs.

The race is run on small synthetic panels (no training) under the names of a fake store's pipelines
and written where ``sweep --until-decided`` writes it; the store is then tracked into a real MLflow
(SQLite) database and every logged value is read back with MLflow's client and checked against the
record. Names carry ``=`` as a ``--grid`` sweep's do (MLflow refuses ``=`` in a key).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from rolling_calib.analysis.comparison import compare_store
from rolling_calib.analysis.race_record import RaceRecord, read_race, write_race
from rolling_calib.analysis.scoring import score_store
from rolling_calib.core.question import Question
from rolling_calib.core.racing import race
from rolling_calib.core.resampling import Resampling
from rolling_calib.core.stopping import StoppingRule
from rolling_calib.core.verdict import LossPanel

from runner_helpers import write_fake_store

pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402

from rolling_calib.tracking.mlflow_log import track_store  # noqa: E402

NAMES = ("lr=0.003", "lr=0.1", "lr=1")
QUESTION = Question(target="period", confidence=0.9)


def _record(shifts=(0.0, 0.0, 6.0), *, rule=StoppingRule(first=3, batch=2, max_seeds=9), trained=12) -> RaceRecord:
    """The race of three synthetic configurations (the third ``shifts[2]`` worse), under the store's names."""
    rng = np.random.default_rng(1)
    day = rng.normal(0, 0.3, 20)
    panels = {name: LossPanel.from_arrays(seeds=range(rule.max_seeds), total=5 + day + s
                                          + rng.normal(0, 0.3, (rule.max_seeds, 1))
                                          + rng.normal(0, 1, (rule.max_seeds, 20)))
              for name, s in zip(NAMES, shifts)}
    result = race(panels, rule=rule, question=QUESTION, orientation="lower", seed_order=range(rule.max_seeds))
    return RaceRecord(race=result, metric="ql", unit="bp²", windows=2, trained_by_this_run=trained)


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    store = tmp_path_factory.mktemp("race") / "store"
    write_fake_store(store, pipelines={n: {"bias_sd": 0.5} for n in NAMES}, seeds=2)
    scores = score_store(store)
    return store, scores, compare_store(scores, question=QUESTION, resampling=Resampling(n_boot=50))


def _track(store: Path, scores, comparison):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return track_store(scores, comparison=comparison, tracking_uri=f"sqlite:///{store / 'mlflow.db'}")


def _runs(store: Path, level: str) -> list:
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    ids = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(ids, filter_string=f"tags.`rc.level` = '{level}'", max_results=1000)


def _history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def _check(store: Path, record: RaceRecord) -> str:
    """Every value the race logged equals the record's; returns the comparison run's id."""
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    (run,) = _runs(store, "comparison")
    params, tags, rid = run.data.params, run.data.tags, run.info.run_id
    rule, question = record.race.settings["rule"], record.race.settings["question"]
    assert params["race.question.target"] == question["target"] == "period"
    assert float(params["race.question.confidence"]) == question["confidence"] == 0.9
    for field in ("first", "batch", "max_seeds", "spending", "futility", "margin", "seed_variance"):
        assert params[f"race.rule.{field}"] == str(rule[field])
    assert params["race.metric"] == "ql" and params["race.comparisons"] == record.race.settings["comparisons"]
    looks = record.race.looks
    assert _history(client, rid, "race_kept") == [(lk.look, len(lk.kept)) for lk in looks]
    assert _history(client, rid, "race_eliminated") == [(lk.look, len(lk.eliminated)) for lk in looks]
    assert _history(client, rid, "race_seeds_spent") == [(lk.look, lk.seeds_spent) for lk in looks]
    assert _history(client, rid, "race_seeds") == [(lk.look, lk.seeds) for lk in looks]
    for name, k in record.race.seeds_used.items():
        assert run.data.metrics[f"race_seeds_used.{name.replace('=', '_')}"] == k
    assert run.data.metrics["race_units_used"] == record.units_used
    assert tags["race.best_set"] == ", ".join(record.race.best_set) and tags["race.stop"] == record.race.stop
    eliminated = {k[len("race.eliminated."):]: v for k, v in tags.items() if k.startswith("race.eliminated.")}
    assert eliminated == {n.replace("=", "_"): str(k) for n, k in record.race.eliminated.items()}
    local = client.download_artifacts(rid, "race.json", str(store.parent / f"dl-{rid}"))
    assert json.loads(Path(local).read_text()) == record.to_dict()
    pipelines = {r.data.tags["rc.pipeline"]: r.data.tags for r in _runs(store, "pipeline")}
    assert set(pipelines) == set(NAMES)
    for name, ptags in pipelines.items():
        k = record.race.eliminated.get(name)
        assert ptags["rc.race"] == (f"eliminated at look {k}" if k else "kept")
        assert ptags["rc.race_seeds"] == str(record.race.seeds_used[name])
    return rid


def test_the_race_is_on_the_comparison_run_and_a_rerun_updates_it_in_place(scored):
    store, scores, comparison = scored
    record = _record()
    assert record.race.eliminated == {"lr=1": 1} and record.race.stop        # something to see: one out at look 1
    write_race(store, record)
    assert read_race(store) == record
    first = _track(store, scores, comparison)
    assert first.created == 1 + 3 * (1 + 2 + 2 * 2)     # comparison; per pipeline: itself, 2 seeds, 4 windows
    rid = _check(store, record)

    # The same sweep run again: the finished race is replayed, trains nothing and writes race.json again.
    write_race(store, RaceRecord(race=record.race, metric="ql", unit="bp²", windows=2, trained_by_this_run=0))
    again = _track(store, scores, comparison)
    assert (again.created, again.updated, again.relogged) == (0, 0, 0)
    assert _check(store, record) == rid                  # one comparison run, its looks once each

    # Another race on the same store (another rule): the comparison run is logged afresh, the old looks gone.
    other = _record(rule=StoppingRule(first=2, batch=1, max_seeds=7))
    assert other.identity() != record.identity()
    write_race(store, other)
    third = _track(store, scores, comparison)
    assert third.relogged == 1 and third.created == 1
    assert _check(store, other) != rid
