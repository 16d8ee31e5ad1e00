"""``rolling-calib run --until-decided`` end to end on a tiny real Qlib store (real provider, real model, no mocks).

A run that stops at its first look trains only ``--first`` seeds; re-running the same command
after losing a unit recomputes that unit bit for bit and replays the same looks; a run with more
looks trains only the seeds its open pairs need; compare shows the recorded path.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from rolling_calib.analysis.sequential_path import read_path
from rolling_calib.cli import main

from sweep_helpers import tiny_experiment

pytestmark = pytest.mark.slow

PIPELINES = {"wd0": {}, "wdbig": {"task.model.kwargs.weight_decay": 0.5}}


def _units(store: Path) -> dict[str, str]:
    """Every unit's prediction file -> its SHA-256."""
    return {str(p.relative_to(store)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((store / "units").rglob("w*.parquet")) if not p.name.endswith(".valid.parquet")}


def _run(capsys, config: Path, store: Path, *extra: str) -> dict:
    argv = ["run", str(config), "--store", str(store), "--until-decided", "--workers", "1", "--no-tracking",
            "--no-progress", "--json", *extra]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> Path:
    return tiny_experiment(tmp_path_factory.mktemp("until"), pipelines=PIPELINES, compare=[["wd0", "wdbig"]])


def test_stops_at_the_first_look_and_resumes_bit_identically(experiment, tmp_path, capsys):
    store = tmp_path / "store"
    args = ("--first", "3", "--batch", "2", "--max-seeds", "6", "--margin", "1e9")   # equivalent at look 1
    first = _run(capsys, experiment, store, *args)
    path = read_path(store)
    assert path.outcomes == {"wd0 vs wdbig": "equivalent"} and path.done and path.looks_done == 1
    assert path.seeds_used == {"wd0": 3, "wdbig": 3} and path.rule.margin == 1e9
    assert path.unit == "bp²" and first["sequential"]["unit"] == "bp²"   # the raw label in bp: QL in bp²
    assert path.units.to_dict() == {"used": 12, "full_grid": 24, "trained_by_this_run": 12}
    assert first["units_ran"] == 12 and first["sequential"]["outcomes"] == path.outcomes
    assert first["sequential"]["settings"]["question"] == {"target": "period", "confidence": 0.95}   # the default
    units = _units(store)
    assert sorted({k.split("/")[2] for k in units}) == ["seed0", "seed1", "seed2"]   # seeds 3..5 never trained
    # lose a unit, re-run the same command: that unit only, the same bytes, the same looks
    (store / "units" / "wdbig" / "seed2" / "w01.json").unlink()
    (store / "units" / "wdbig" / "seed2" / "w01.parquet").unlink()
    again = _run(capsys, experiment, store, *args)
    assert again["units_ran"] == 1 and again["units_skipped"] == 11
    assert _units(store) == units
    assert read_path(store).looks == path.looks
    # and once more: nothing to train
    assert _run(capsys, experiment, store, *args)["units_ran"] == 0


def test_more_looks_train_only_the_seeds_the_open_pairs_need(experiment, tmp_path, capsys):
    store = tmp_path / "store"
    out = _run(capsys, experiment, store, "--first", "2", "--batch", "1", "--max-seeds", "4", "--futility", "0")
    path = read_path(store)
    used = path.seeds_used
    assert used["wd0"] == used["wdbig"] == path.stopped["wd0 vs wdbig"].look.seeds
    assert path.looks_done == used["wd0"] - 1 >= 2                # looks at 2, 3, ... seeds (no futility stop)
    assert [nl.look.seeds for nl in path.looks] == list(range(2, used["wd0"] + 1))
    assert out["units_ran"] == path.units.used == 2 * 2 * used["wd0"]
    trained = {k.split("/")[2] for k in _units(store)}
    assert trained == {f"seed{s}" for s in range(used["wd0"])}
    assert [nl.look.outcome for nl in path.looks][:-1] == ["open"] * (path.looks_done - 1)
    assert main(["compare", "--store", str(store), "--n-boot", "100"]) == 0
    text = capsys.readouterr().out
    assert "Sequential path" in text and f"units {path.units.used} of the full grid's 16" in text


def test_until_decided_refuses_seeds(experiment, tmp_path, capsys):
    argv = ["run", str(experiment), "--store", str(tmp_path / "s"), "--until-decided", "--seeds", "3", "--no-tracking"]
    assert main(argv) == 2
    assert "--seeds" in capsys.readouterr().err


def test_sweep_until_decided_stops_every_pair_of_the_grid_with_the_pairs_rule(experiment, tmp_path, capsys):
    store = tmp_path / "sweep"   # --stops pairs: the pairs' rule (sweep races by default: tests/cli/test_sweep_race.py)
    argv = ["sweep", str(experiment), "--grid", "hidden_size=4,8", "--store", str(store), "--until-decided",
            "--stops", "pairs", "--first", "2", "--max-seeds", "3", "--margin", "1e9", "--workers", "1",
            "--no-tracking", "--json"]
    assert main(argv) == 0
    capsys.readouterr()
    path = read_path(store)
    assert path.done and set(path.outcomes.values()) == {"equivalent"}
    assert set(path.seeds_used.values()) == {2} and path.units.used == 2 * 2 * 2
    assert not (store / "race.json").exists()


def test_deciding_by_the_excess_return_needs_a_backtest_before_anything_trains(experiment, tmp_path, capsys):
    argv = ["run", str(experiment), "--store", str(tmp_path / "store"), "--until-decided", "--decide-by",
            "excess_return_cost", "--workers", "1", "--no-tracking", "--no-progress"]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--decide-by excess_return_cost: the backtest's excess return decides, but wd0, wdbig has no backtest" in err
    assert not list((tmp_path / "store").glob("units/*/*/*.parquet"))
