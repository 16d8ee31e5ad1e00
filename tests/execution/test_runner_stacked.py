"""``rolling.stack_seeds``: the runner trains fixed seed groups as one stack, per-seed units, same numbers on resume.

Real Qlib store, real model, local pool; the unstacked run of the same experiment is the reference.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rolling_calib.config.experiment import load_experiment
from rolling_calib.core.validation import ConfigError
from rolling_calib.execution import store as st
from rolling_calib.execution.reader import read_unit
from rolling_calib.execution.executors import LocalExecutor
from rolling_calib.execution.runner import plan_run, run_plan
from rolling_calib.execution.units import StackKey, UnitTask
from sweep_helpers import tiny_experiment

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same 3-seed experiment run unstacked and with stacks of 2 (groups (0, 1) and (2,))."""
    root = tmp_path_factory.mktemp("stacked")
    path = tiny_experiment(root, seeds=3)
    plain = plan_run(load_experiment(path), store=root / "plain")
    stacked = plan_run(load_experiment(path, overrides={"rolling.stack_seeds": 2}), store=root / "stacked")
    run_plan(plain, executor=LocalExecutor(workers=1), progress=False)
    summary = run_plan(stacked, executor=LocalExecutor(workers=1), progress=False)
    return path, plain, stacked, summary


def test_stacked_run_writes_every_unit_and_records_its_stack(runs):
    _, plain, stacked, summary = runs
    assert stacked.seed_groups() == [(0, 1), (2,)]
    assert summary.ran == 6 and summary.skipped == 0
    assert stacked.pipelines[0].config_hash != plain.pipelines[0].config_hash  # not the same bits: not the same hash
    for key in stacked.keys():
        side = st.read_sidecar(stacked.store, key)
        assert side["seed_stack"] == ([0, 1] if key.seed < 2 else [2])
        assert side["timings"]["shared_by_stack"] == ["build_s", "fit_s", "total_s"]
        # the sidecar says how the stack computed: the CPU's fixed kernel, batches cut on the host
        assert side["fit_path"]["stack"]["kernel"] == "streams" and side["fit_path"]["feed"]["mode"] == "host"
    for key in plain.keys():
        path = st.read_sidecar(plain.store, key)["fit_path"]
        assert path["device"] == "cpu" and path["feed"]["mode"] == "host" and "stack" not in path


def test_stacked_units_match_the_unstacked_reference(runs):
    _, plain, stacked, _ = runs
    for key in plain.keys():
        a, b = read_unit(plain.store, key), read_unit(stacked.store, key)
        pd.testing.assert_frame_equal(a[["datetime", "instrument", "label"]], b[["datetime", "instrument", "label"]])
        scale = float(a["prediction"].std())
        np.testing.assert_allclose(b["prediction"], a["prediction"], rtol=0, atol=1e-4 * scale)


def test_resumed_stacked_run_ends_with_the_same_numbers(runs, tmp_path):
    path, _, reference, _ = runs
    plan = plan_run(load_experiment(path, overrides={"rolling.stack_seeds": 2}), store=tmp_path / "store")
    run_plan(plan, executor=LocalExecutor(workers=1), progress=False)
    # a stack interrupted between the writes of its members: seed 1's window 1 never finished
    st.unit_paths(plan.store, plan.keys()[3]).sidecar.unlink()
    assert plan.keys()[3].seed == 1 and plan.keys()[3].window == 1
    again = run_plan(plan, executor=LocalExecutor(workers=1), progress=False)
    assert again.ran == 2 and again.skipped == 4  # the whole stack (0, 1) of window 1 is retrained
    for key in plan.keys():
        pd.testing.assert_frame_equal(read_unit(plan.store, key), read_unit(reference.store, key))


def test_stacks_wait_for_their_predecessor_window(runs):
    from rolling_calib.execution.runner import _tasks

    _, _, stacked, _ = runs
    tasks = _tasks(stacked, stacked.keys())
    assert tasks[:2] == [UnitTask(StackKey("base", (0, 1), 0)),
                         UnitTask(StackKey("base", (0, 1), 1), after=StackKey("base", (0, 1), 0))]
    assert len(tasks) == 4


def test_stacking_a_model_without_fit_stack_is_refused_at_plan_time(runs):
    path, *_ = runs
    lgb = {"task.model": {"class": "LGBModel", "module_path": "qlib.contrib.model.gbdt", "kwargs": {}}}
    config = load_experiment(path, overrides={"rolling.stack_seeds": 2, "rolling.mode": "scratch", **lgb})
    with pytest.raises(ConfigError, match="stack_seeds: 2 trains the seeds of a window as one stack.*LGBModel has none"):
        plan_run(config, store=path.parent / "never")
    assert not (path.parent / "never").exists()



def test_unit_seconds_of_a_stack_are_shares_of_its_time():
    from rolling_calib.execution.unit_execution import UnitResult, _split_time
    from rolling_calib.execution.units import UnitKey

    results = [UnitResult(UnitKey("p", seed, 1), rows=10, seconds=99.0, ql=0.5) for seed in (0, 1, 2)]
    parts = _split_time(results, 7.5)
    assert [r.seconds for r in parts] == [2.5, 2.5, 2.5]
    assert [(r.key, r.rows, r.ql) for r in parts] == [(r.key, r.rows, r.ql) for r in results]
