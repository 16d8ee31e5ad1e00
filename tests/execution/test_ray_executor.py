"""RayExecutor against a real local Ray runtime (2 CPUs), with deterministic work functions.

One runtime is shared by the module (starting Ray costs seconds).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray")

import ray_helpers  # noqa: E402
from ray_helpers import StoreWork, chain_tasks  # noqa: E402

from rolling_calib.execution.executors import LocalExecutor, UnitFailedError, UnitKey, UnitTask  # noqa: E402
from rolling_calib.execution.ray_executor import RayExecutor, _start_local_runtime  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_runtime():
    """A real local Ray runtime with 2 CPUs, shared by this module's tests."""
    if ray.is_initialized():
        ray.shutdown()
    # Ray workers cannot import modules from tests/: ship the helpers by value.
    ray.cloudpickle.register_pickle_by_value(ray_helpers)
    # The product's start path: a start-up that times out on a loaded machine is tried again.
    _start_local_runtime(ray.init, ray.shutdown, {"num_cpus": 2, "include_dashboard": False,
                                                  "object_store_memory": 100 * 1024 * 1024, "log_to_driver": False})
    yield
    ray.shutdown()
    ray.cloudpickle.unregister_pickle_by_value(ray_helpers)


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="max_retries"):
        RayExecutor(max_retries=-1)
    with pytest.raises(ValueError, match="num_cpus"):
        RayExecutor(num_cpus=0)
    with pytest.raises(ValueError, match="threads_per_unit"):
        RayExecutor(threads_per_unit=0)


def test_empty_and_invalid_task_lists():
    assert RayExecutor().run([], str) == {}  # no runtime needed for nothing
    dup = [UnitTask(UnitKey("a", 0, 0)), UnitTask(UnitKey("a", 0, 0))]
    with pytest.raises(ValueError, match="duplicate"):
        RayExecutor().run(dup, str)


def test_same_results_as_local_executor_and_dependency_order(ray_runtime, tmp_path):
    tasks = chain_tasks(pipelines=("a", "b"), seeds=2, windows=3)
    local_dir, ray_dir = tmp_path / "local", tmp_path / "ray"
    local_dir.mkdir()
    ray_dir.mkdir()
    local = LocalExecutor(workers=1).run(tasks, StoreWork(str(local_dir)))

    seen: list[UnitKey] = []
    work = StoreWork(str(ray_dir), sleep_s=0.05)
    got = RayExecutor(max_retries=0).run(tasks, work, on_done=lambda key, _: seen.append(key))

    assert got == local  # same numbers, including the values folded in from predecessors
    assert sorted(seen) == sorted(task.key for task in tasks)
    for task in tasks:
        if task.after is not None:
            mine = json.loads(work.unit_path(task.key).read_text())
            before = json.loads(work.unit_path(task.after).read_text())
            assert mine["start_ns"] >= before["end_ns"], f"{task.key} started before {task.after} ended"
    # on_done saw each chain in window order
    for pipeline in ("a", "b"):
        for seed in range(2):
            windows = [k.window for k in seen if (k.pipeline, k.seed) == (pipeline, seed)]
            assert windows == [0, 1, 2]


def test_injected_failure_is_retried(ray_runtime, tmp_path):
    tasks = chain_tasks(pipelines=("a",), seeds=2, windows=2)
    flaky = UnitKey("a", 1, 1).slug()
    work = StoreWork(str(tmp_path), fail_once=(flaky,))
    got = RayExecutor(max_retries=2).run(tasks, work)
    assert set(got) == {task.key for task in tasks}
    assert (tmp_path / f"{flaky}.attempts").read_text() == "2"
    assert (tmp_path / f"{UnitKey('a', 0, 1).slug()}.attempts").read_text() == "1"
    clean = tmp_path / "clean"
    clean.mkdir()
    assert got == LocalExecutor().run(tasks, StoreWork(str(clean)))


def test_permanent_failure_names_unit_and_keeps_completed_units(ray_runtime, tmp_path):
    tasks = chain_tasks(pipelines=("a",), seeds=2, windows=3)
    bad = UnitKey("a", 0, 1)
    work = StoreWork(str(tmp_path), fail_always=(bad.slug(),))
    with pytest.raises(UnitFailedError, match=bad.slug()) as info:
        RayExecutor(max_retries=1).run(tasks, work)
    assert "injected failure" in str(info.value)
    assert (tmp_path / f"{bad.slug()}.attempts").read_text() == "2"  # first try + 1 retry
    assert not work.unit_path(bad).exists()
    assert not work.unit_path(UnitKey("a", 0, 2)).exists()  # its successor never ran
    completed = info.value.completed
    assert UnitKey("a", 0, 0) in completed
    for key in completed:  # every reported unit is in the store with the reported value
        assert json.loads(work.unit_path(key).read_text())["value"] == completed[key]


def test_worker_threads_are_capped(ray_runtime):
    def threads(_key):
        import os

        return os.environ["OMP_NUM_THREADS"]

    got = RayExecutor(threads_per_unit=1).run([UnitTask(UnitKey("a", 0, 0))], threads)
    assert got == {UnitKey("a", 0, 0): "1"}


def test_store_files_are_written_by_workers(ray_runtime, tmp_path):
    tasks = chain_tasks(pipelines=("p",), seeds=1, windows=2)
    RayExecutor().run(tasks, StoreWork(str(tmp_path)))
    assert sorted(p.name for p in Path(tmp_path).glob("*.json")) == ["p__seed0__w00.json", "p__seed0__w01.json"]


def test_units_report_their_progress_to_the_driver(ray_runtime):
    """Given on_progress, each unit's reports come back through a Ray queue; without it, units report nothing."""
    from ray_helpers import ReportingWork

    tasks = chain_tasks(pipelines=("a",), seeds=2, windows=2)
    events = []
    assert all(RayExecutor().run(tasks, ReportingWork(epochs=2), on_progress=events.append).values())
    for task in tasks:
        mine = [(e.stage, e.epoch, e.epochs) for e in events if e.slug == task.key.slug()]
        assert mine == [("starting", None, None), ("fitting", 1, 2), ("fitting", 2, 2)], task.key
    assert not any(RayExecutor().run(tasks, ReportingWork(epochs=2)).values())


# --------------------------------------------------------------------------- with the real runner
@pytest.fixture(scope="module")
def tiny_plans(tmp_path_factory):
    """A tiny real experiment planned twice (local store, Ray store), both with 1 torch thread."""
    from sweep_helpers import tiny_experiment

    from rolling_calib.config.experiment import load_experiment
    from rolling_calib.execution.runner import plan_run

    root = tmp_path_factory.mktemp("ray_e2e")
    config = load_experiment(tiny_experiment(root, seeds=2))
    return {name: plan_run(config, store=root / name, n_threads=1) for name in ("local", "ray", "flaky")}


def _unit_frames(plan):
    from rolling_calib.execution.reader import read_unit

    return {key: read_unit(plan.store, key) for key in plan.keys()}


@pytest.fixture(scope="module")
def local_run(tiny_plans):
    """The tiny plan run once by the local executor (the reference numbers)."""
    from rolling_calib.execution.runner import run_plan

    summary = run_plan(tiny_plans["local"], executor=LocalExecutor(workers=1), progress=False)
    return summary, _unit_frames(tiny_plans["local"])


def test_runner_on_ray_gives_the_local_numbers(ray_runtime, tiny_plans, local_run):
    from rolling_calib.analysis.scoring import score_store
    from rolling_calib.execution.runner import run_plan

    local, local_frames = local_run
    remote = run_plan(tiny_plans["ray"], executor=RayExecutor(max_retries=0), progress=False)
    assert remote.ran == local.ran == 4
    assert {k: r.ql for k, r in remote.results.items()} == {k: r.ql for k, r in local.results.items()}
    ray_frames = _unit_frames(tiny_plans["ray"])
    for key, frame in local_frames.items():
        pd.testing.assert_frame_equal(ray_frames[key], frame, check_exact=True)
    cols = ["pipeline", "seed", "ql", "ql_scored", "cql"]
    pd.testing.assert_frame_equal(score_store(tiny_plans["ray"].store).runs[cols],
                                  score_store(tiny_plans["local"].store).runs[cols], check_exact=True)
    # a second Ray run finds everything complete
    again = run_plan(tiny_plans["ray"], executor=RayExecutor(), progress=False)
    assert again.ran == 0 and again.skipped == 4


def test_real_unit_failure_is_retried_on_ray(ray_runtime, tiny_plans, local_run, tmp_path):
    from ray_helpers import FlakyUnit

    plan = tiny_plans["flaky"]
    tasks = chain_tasks(pipelines=("base",), seeds=2, windows=2)
    bad = UnitKey("base", 1, 0)
    results = RayExecutor(max_retries=1).run(tasks, FlakyUnit(plan, bad.slug(), str(tmp_path)))
    assert (tmp_path / f"{bad.slug()}.failed").exists()  # it did fail once
    assert set(results) == {t.key for t in tasks}
    _, local_frames = local_run
    for key, frame in _unit_frames(plan).items():  # same numbers as the clean local run despite the retry
        pd.testing.assert_frame_equal(frame, local_frames[key], check_exact=True)


def test_sweep_command_on_ray_equals_local(ray_runtime, tmp_path, capsys):
    """`rolling-calib sweep --executor ray` (joining the running runtime) ranks exactly like the local pool."""
    import json as _json

    from sweep_helpers import tiny_experiment

    from rolling_calib.cli import main

    config = tiny_experiment(tmp_path / "exp", seeds=1)
    common = ["sweep", str(config), "--grid", "hidden_size=4,6", "--seeds", "1", "--threads", "1",
              "--n-boot", "100", "--no-tracking", "--json", "--no-progress"]
    outputs = {}
    for executor in ("local", "ray"):
        assert main([*common, "--executor", executor, "--store", str(tmp_path / executor)]) == 0
        outputs[executor] = _json.loads(capsys.readouterr().out)
    assert outputs["ray"]["run"]["executor"] == "ray" and outputs["ray"]["run"]["units_ran"] == 4
    assert outputs["ray"]["ranking"] == outputs["local"]["ranking"]
    assert outputs["ray"]["matrices"] == outputs["local"]["matrices"]


def test_seed_stacks_on_ray_give_the_local_stacks_numbers(ray_runtime, tmp_path):
    """``rolling.stack_seeds``: a stack is one Ray task writing its seeds' units, bit for bit as the local pool does."""
    from sweep_helpers import tiny_experiment

    from rolling_calib.config.experiment import load_experiment
    from rolling_calib.execution.runner import plan_run, run_plan

    config = load_experiment(tiny_experiment(tmp_path, seeds=2), overrides={"rolling.stack_seeds": 2})
    local, remote = (plan_run(config, store=tmp_path / name, n_threads=1) for name in ("local", "ray"))
    run_plan(local, executor=LocalExecutor(workers=1), progress=False)
    summary = run_plan(remote, executor=RayExecutor(max_retries=0), progress=False)
    assert summary.ran == 4
    for key, frame in _unit_frames(local).items():
        pd.testing.assert_frame_equal(_unit_frames(remote)[key], frame, check_exact=True)


def test_stop_signal_cancels_outstanding_ray_tasks(ray_runtime, tmp_path):
    """SIGTERM in the driver (as ``rolling-calib run`` handles it): outstanding tasks cancelled, no more units written."""
    import os
    import signal
    import time

    from rolling_calib.execution.executors import RunStopped, stop_signals

    tasks = chain_tasks(pipelines=("a", "b"), seeds=3, windows=2)   # 12 units of 0.5 s on 2 CPUs
    work = StoreWork(str(tmp_path), sleep_s=0.5)
    seen: list[UnitKey] = []

    def stop_after_first(key, _):
        seen.append(key)
        if len(seen) == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(RunStopped) as info, stop_signals():
        RayExecutor(max_retries=0).run(tasks, work, on_done=stop_after_first)
    stop = info.value
    assert stop.signum == signal.SIGTERM and stop.completed >= 1
    assert stop.cancelled >= 1 and stop.completed + stop.cancelled == len(tasks)
    # A cancelled task that was running ends in its sleep or in its write, which removes its temporary file;
    # on a loaded machine that can take seconds: wait (up to 60 s) until no temporary is left.
    deadline = time.monotonic() + 60.0
    time.sleep(2.0)
    while list(tmp_path.glob("*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.5)
    written = sorted(tmp_path.glob("*.json"))
    assert len(written) < len(tasks)                  # the queued units never ran
    assert not list(tmp_path.glob("*.tmp"))
    again = RayExecutor(max_retries=0).run(tasks, work)   # the runtime is still usable: everything runs
    assert set(again) == {t.key for t in tasks}
