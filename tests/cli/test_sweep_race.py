"""``rolling-calib sweep --until-decided`` races the configurations, end to end on the tiny real experiment.

Real Qlib store, LSTM, runner and local pool. The race is a function of the store: a sweep whose
store already holds some units (a killed run's: the first seed and part of the second) trains only
what it lacks and lands on the same race as a fresh store; the sweep's JSON, its report and
``compare`` show the race look by look and the listed pair's verdict.
"""

from __future__ import annotations

import json
import shutil

import pytest
from sweep_helpers import tiny_experiment

from rolling_calib.analysis.race_record import read_race
from rolling_calib.cli import main

pytestmark = pytest.mark.slow

PIPELINES = {"wd0": {}, "wdbig": {"task.model.kwargs.weight_decay": 0.5}, "h4": {"task.model.kwargs.hidden_size": 4}}
RACE = ("--until-decided", "--first", "2", "--batch", "1", "--max-seeds", "3", "--futility", "0")


def _sweep(capsys, config, store, *extra):
    argv = ["sweep", str(config), "--store", str(store), "--workers", "1", "--no-tracking", "--no-progress",
            "--n-boot", "100", "--json", *extra]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _shape(race: dict) -> dict:
    """What a race decided, without its floats: looks (seeds, kept, eliminated by whom, settled), end, seeds."""
    return {"looks": [(lk["seeds"], lk["compared"], lk["kept"], [(e["name"], e["by"]) for e in lk["eliminated"]],
                       lk["settled"], lk["seeds_spent"], lk["stop"]) for lk in race["looks"]],
            **{k: race[k] for k in ("best_set", "eliminated", "seeds_used", "stop")}}


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return tiny_experiment(tmp_path_factory.mktemp("race"), pipelines=PIPELINES, compare=[["wd0", "wdbig"]])


def test_a_sweep_races_and_resumes_to_the_same_race(config, tmp_path, capsys):
    fresh = _sweep(capsys, config, tmp_path / "fresh", *RACE)
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
    shutil.copytree(tmp_path / "fresh", resumed)
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
