"""``rolling-calib sweep --until-decided`` races the configurations, end to end on the tiny real experiment.

Real Qlib store, LSTM, runner and local pool. The race is a function of the store: a sweep whose
store already holds some units (a killed run's: the first seed and part of the second) trains only
what it lacks and lands on the same race as a fresh store; the sweep's JSON, its report and
``compare`` show the race look by look and the listed pair's verdict; and ``sweep`` without
``--no-tracking`` puts the race in a real MLflow (SQLite) database, read back with MLflow's client.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import warnings
from pathlib import Path

import pytest
from sweep_helpers import tiny_experiment

from rolling_calib.analysis.race_record import read_race
from rolling_calib.cli import main

pytestmark = pytest.mark.slow

PIPELINES = {"wd0": {}, "wdbig": {"task.model.kwargs.weight_decay": 0.5}, "h4": {"task.model.kwargs.hidden_size": 4}}
RACE = ("--until-decided", "--first", "2", "--batch", "1", "--max-seeds", "3", "--futility", "0")


def _argv(config, store, *extra) -> list[str]:
    return ["sweep", str(config), "--store", str(store), "--workers", "1", "--no-progress", "--n-boot", "100",
            "--json", *extra]


def _sweep(capsys, config, store, *extra):
    assert main(_argv(config, store, "--no-tracking", *extra)) == 0
    return json.loads(capsys.readouterr().out)


def _shape(race: dict) -> dict:
    """What a race decided, without its floats: looks (seeds, kept, eliminated by whom, settled), end, seeds."""
    return {"looks": [(lk["seeds"], lk["compared"], lk["kept"], [(e["name"], e["by"]) for e in lk["eliminated"]],
                       lk["settled"], lk["seeds_spent"], lk["stop"]) for lk in race["looks"]],
            **{k: race[k] for k in ("best_set", "eliminated", "seeds_used", "stop")}}


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return tiny_experiment(tmp_path_factory.mktemp("race"), pipelines=PIPELINES, compare=[["wd0", "wdbig"]])


@pytest.fixture(scope="module")
def raced(config, tmp_path_factory):
    """A fresh store raced by ``sweep --until-decided`` (no tracking), and the sweep's JSON."""
    store = tmp_path_factory.mktemp("fresh") / "store"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(_argv(config, store, "--no-tracking", *RACE)) == 0
    return store, json.loads(out.getvalue())


def test_a_sweep_races_and_resumes_to_the_same_race(config, raced, tmp_path, capsys):
    store, fresh = raced
    race = fresh["race"]["race"]
    assert set(race["best_set"]) | set(race["eliminated"]) == set(PIPELINES)
    assert race["stop"] in ("one left", "settled", "budget") and race["settings"]["seed_order"] == [0, 1, 2]
    assert race["looks"][0]["seeds"] == 2 and race["looks"][0]["compared"] == list(PIPELINES)
    used = sum(race["seeds_used"].values())
    assert fresh["run"]["units_ran"] == 2 * used == fresh["race"]["units"]["used"]      # 2 windows per seed
    assert fresh["race"]["units"]["full_grid"] == 2 * 3 * 3
    assert {r["pipeline"]: r["n_runs"] for r in fresh["ranking"]} == race["seeds_used"]
    pairs = fresh["race_pairs"]
    assert [{p["a"], p["b"]} for p in pairs] == [{"wd0", "wdbig"}] and pairs[0]["metric"] == "ql"
    assert pairs[0]["ci_low"] <= pairs[0]["difference"] <= pairs[0]["ci_high"]

    # a killed run's store: seed 0 of every configuration and one window of wd0's seed 1, nothing else
    resumed = tmp_path / "resumed"
    shutil.copytree(store, resumed)
    for unit in (resumed / "units").glob("*/seed*/w*"):
        if unit.parent.name != "seed0" and not (unit.parts[-3] == "wd0" and unit.parent.name == "seed1"
                                                and unit.name.startswith("w00")):
            unit.unlink()
    (resumed / "race.json").unlink()
    again = _sweep(capsys, config, resumed, *RACE)
    assert again["run"]["units_ran"] == 2 * used - 7 and again["run"]["units_skipped"] == 7
    assert _shape(again["race"]["race"]) == _shape(race)
    for a, b in zip(again["race"]["race"]["looks"], race["looks"]):
        assert a["level"] == pytest.approx(b["level"], rel=1e-12)
        assert [e["difference"] for e in a["eliminated"]] == pytest.approx([e["difference"] for e in b["eliminated"]],
                                                                          rel=1e-9)

    # the report, the text output and compare say the race look by look
    md = (resumed / "sweep_report" / "sweep.md").read_text()
    assert "## Race (sweep --until-decided)" in md and "- look 1: 2 seeds each (one-sided" in md
    assert json.loads((resumed / "sweep_report" / "sweep.json").read_text())["race"] == again["race"]
    assert read_race(resumed).race.best_set == tuple(race["best_set"])
    assert main(["compare", "--store", str(resumed), "--n-boot", "100"]) == 0
    text = capsys.readouterr().out
    assert "Race by QL (3 configurations" in text and "  look 1: 2 seeds each" in text


def test_dry_run_plans_the_race_worst_case_and_the_first_look(config, tmp_path, capsys):
    assert main(["sweep", str(config), "--store", str(tmp_path / "s"), "--dry-run", *RACE]) == 0
    out = capsys.readouterr().out
    assert "a race of the 3 configurations to a best set" in out
    assert "the grid above (3 seeds, 9 seeds in all) is the worst case" in out
    assert "the first look needs seeds 0..1 of every configuration (12 unit(s))" in out
    assert not (tmp_path / "s").exists()
    assert main(["sweep", str(config), "--store", str(tmp_path / "s"), "--dry-run", "--stops", "pairs", *RACE]) == 0
    assert "undecided pair, decided by QL" in capsys.readouterr().out


def test_a_raced_sweep_logs_its_race_to_mlflow_end_to_end(config, raced, tmp_path, capsys):
    """``sweep --until-decided`` with tracking (the default ``sqlite:///STORE/mlflow.db``) on the raced store: it
    trains nothing (the race replays on the store's units), and MLflow's client reads back the race on the
    comparison run and each configuration's tag, equal to ``STORE/race.json``."""
    MlflowClient = pytest.importorskip("mlflow.tracking").MlflowClient
    store = tmp_path / "store"
    shutil.copytree(raced[0], store)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(_argv(config, store, *RACE)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run"]["units_ran"] == 0
    record = read_race(store)
    race = record.race
    assert out["race"]["race"]["best_set"] == list(race.best_set) == raced[1]["race"]["race"]["best_set"]

    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    ids = [e.experiment_id for e in client.search_experiments()]
    (comparison,) = client.search_runs(ids, filter_string="tags.`rc.level` = 'comparison'")
    params, tags, metrics = comparison.data.params, comparison.data.tags, comparison.data.metrics
    assert tags["race.best_set"] == ", ".join(race.best_set) and tags["race.stop"] == race.stop
    assert params["race.metric"] == "ql" and params["race.comparisons"] == "best"
    assert params["race.rule.max_seeds"] == "3" and params["race.rule.futility"] == "0.0"
    assert {k: v for k, v in tags.items() if k.startswith("race.eliminated.")} == {
        f"race.eliminated.{n}": str(k) for n, k in race.eliminated.items()}
    history = sorted((m.step, m.value) for m in client.get_metric_history(comparison.info.run_id, "race_kept"))
    assert history == [(lk.look, len(lk.kept)) for lk in race.looks]
    assert metrics["race_units_used"] == record.units_used == out["race"]["units"]["used"]
    local = client.download_artifacts(comparison.info.run_id, "race.json", str(tmp_path / "dl"))
    assert json.loads(Path(local).read_text()) == json.loads((store / "race.json").read_text())
    pipelines = client.search_runs(ids, filter_string="tags.`rc.level` = 'pipeline'")
    assert {r.data.tags["rc.pipeline"]: (r.data.tags["rc.race"], r.data.tags["rc.race_seeds"]) for r in pipelines} \
        == {n: (f"eliminated at look {race.eliminated[n]}" if n in race.eliminated else "kept",
                str(race.seeds_used[n])) for n in PIPELINES}
