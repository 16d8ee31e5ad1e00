"""The data each unit read, recorded per unit and checked across units (issue 39: a data store changed during a run
gave units of two data versions recorded as one, and compare then said every score came from the old data).

* fast: sidecars recording different data (as a run across a data change writes them): compare's first note is a
  warning naming which units read which data, and which is the data now in the directory;
* end to end (real Qlib minute store, the minute LSTM, one run plan): seed 0 trained, a close changed, seed 1
  trained under the same plan: each unit's sidecar records what it read, ``run`` warns, ``compare`` names them.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rolling_calib.cli import main
from rolling_calib.execution import store as st
from rolling_calib.execution.units import UnitKey

from runner_helpers import write_fake_store


def _change_a_close(data: Path) -> None:
    close = data / "features" / "aapl" / "close.1min.bin"
    values = np.fromfile(close, dtype="<f4")
    values[len(values) // 2] *= 1.05
    values.tofile(close)


def _compare_notes(store: Path, capsys) -> list[str]:
    capsys.readouterr()
    assert main(["compare", "--store", str(store), "--n-boot", "50", "--json"]) == 0
    return json.loads(capsys.readouterr().out)["notes"]


def _read(key: UnitKey, data: dict, store: Path, *, changed: bool = False) -> None:
    side = st.read_sidecar(store, key)
    side["data"] = data
    if changed:
        side["data_changed_while_training"] = True
    st.atomic_write_json(st.unit_paths(store, key).sidecar, side)


def test_units_of_two_data_versions_are_named_in_compares_warning(tmp_path, tiny_data, capsys):
    store, data = tmp_path / "store", tmp_path / "data"
    write_fake_store(store, pipelines={"a": {"bias_sd": 1.0}, "b": {"bias_sd": 0.5}}, seeds=2)
    shutil.copytree(tiny_data, data)
    before = st.data_identity(data)
    st.write_manifest(store, pipelines={}, extra={"data": before})   # the run's data, as run records it
    assert not any("WARNING" in n for n in _compare_notes(store, capsys))
    _change_a_close(data)
    after = st.data_identity(data)
    for key in (UnitKey("b", 1, 0), UnitKey("b", 1, 1), UnitKey("a", 1, 1)):   # trained after the change
        _read(key, after, store)
    notes = _compare_notes(store, capsys)
    old, new = (f"{d['files']}/{d['features']}" for d in (before, after))
    assert notes[0] == (
        f"WARNING: the units read 2 versions of the data (it changed during a run): (1) data {old}: a seed 0 (w00, "
        f"w01), a seed 1 (w00), b seed 0 (w00, w01); (2) data {new}, the data now in {data}: a seed 1 (w01), b seed 1 "
        f"(w00, w01). Their scores are not of one experiment; re-run 'rolling-calib run' on this store to recompute "
        f"the units on the current data ('files' covers the calendar and universe files, 'features' every feature "
        f"file's content)")
    _read(UnitKey("a", 0, 0), after, store, changed=True)   # its files changed while it trained
    notes = _compare_notes(store, capsys)
    assert notes[0].startswith("WARNING: the units read 3 versions of the data")
    assert f"(2) data {new}, changed while these units trained: a seed 0 (w00); (3) data {new}, the data now" in notes[0]


@pytest.mark.slow
def test_a_run_across_a_data_change_records_and_names_it(tmp_path, tiny_data, capsys):
    from test_runner_e2e import tiny_experiment

    from rolling_calib.config.experiment import load_experiment
    from rolling_calib.execution.executors import LocalExecutor
    from rolling_calib.execution.runner import plan_run, run_plan

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    config = load_experiment(tiny_experiment(tmp_path, data))
    plan = plan_run(config, store=tmp_path / "store", pipelines=["wd0"])    # seeds 0 and 1, two windows each
    first = run_plan(dataclasses.replace(plan, seeds=(0,)), executor=LocalExecutor(workers=1), progress=False)
    assert first.other_data == [] and first.data_warning() is None
    _change_a_close(data)                                                   # the data changes during the run
    capsys.readouterr()
    summary = run_plan(plan, executor=LocalExecutor(workers=1), progress=False)
    seed1 = [UnitKey("wd0", 1, 0), UnitKey("wd0", 1, 1)]
    assert (summary.ran, summary.skipped, summary.other_data) == (2, 2, seed1)
    assert capsys.readouterr().err.strip().splitlines()[-1] == summary.data_warning()
    assert summary.data_warning().startswith("WARNING: the data changed during this run: 2 of its 2 unit(s) read "
                                             "other data than the run planned with (wd0__seed1__w00, wd0__seed1__w01)")
    now = st.data_identity(data, instruments=plan.data_universe)   # over the universe the task reads, as run
    for key in plan.keys():
        side = st.sidecar(plan.store, key)
        expected = now if key.seed == 1 else plan.data
        assert side.data is not None and side.data.same_content(expected) and not side.data_changed_while_training
        assert side.started_at is not None and side.started_at < side.finished_at
    assert now["features"] != plan.data["features"]
    notes = _compare_notes(plan.store, capsys)
    assert notes[0].startswith(f"WARNING: the units read 2 versions of the data (it changed during a run): (1) data "
                               f"{plan.data['files']}/{plan.data['features']}: wd0 seed 0 (w00, w01); (2) data "
                               f"{now['files']}/{now['features']}, the data now in {data}: wd0 seed 1 (w00, w01).")
