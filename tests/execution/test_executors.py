"""The local executor: dependency order, results, failures, process pool."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

import pytest

from rolling_calib.execution.executors import LocalExecutor, UnitFailedError, UnitKey, UnitTask, check_tasks


def _record(log_dir: str, key: UnitKey) -> str:
    """Work function: write a marker with a monotonic stamp, return the slug."""
    stamp = time.monotonic_ns()
    Path(log_dir, key.slug()).write_text(str(stamp))
    return key.slug()


def _fail_on(bad: UnitKey, log_dir: str, key: UnitKey) -> str:
    if key == bad:
        raise RuntimeError("boom")
    return _record(log_dir, key)


def _fail_always(log_dir: str, key: UnitKey) -> str:
    raise RuntimeError(f"boom in {key.slug()}")


def _chain_tasks(pipelines=("a", "b"), seeds=(0, 1), windows=3) -> list[UnitTask]:
    tasks = []
    for pipeline in pipelines:
        for seed in seeds:
            for window in range(windows):
                key = UnitKey(pipeline, seed, window)
                after = UnitKey(pipeline, seed, window - 1) if window else None
                tasks.append(UnitTask(key, after))
    return tasks


@pytest.mark.parametrize("workers", [1, 2])
def test_every_unit_runs_once_after_its_predecessor(tmp_path, workers):
    tasks = _chain_tasks()
    done_order: list[UnitKey] = []
    results = LocalExecutor(workers=workers).run(
        tasks, functools.partial(_record, str(tmp_path)), on_done=lambda k, r: done_order.append(k)
    )
    assert set(results) == {t.key for t in tasks}
    assert all(results[k] == k.slug() for k in results)
    assert sorted(done_order) == sorted(t.key for t in tasks)
    stamps = {t.key: int((tmp_path / t.key.slug()).read_text()) for t in tasks}
    for task in tasks:
        if task.after is not None:
            assert stamps[task.after] < stamps[task.key], f"{task.key} ran before {task.after}"
            assert done_order.index(task.after) < done_order.index(task.key)


@pytest.mark.parametrize("workers", [1, 2])
def test_failure_names_the_unit_and_keeps_completed_work(tmp_path, workers):
    tasks = _chain_tasks(pipelines=("a",), seeds=(0,), windows=3)
    bad = UnitKey("a", 0, 1)
    with pytest.raises(UnitFailedError, match="a__seed0__w01") as info:
        LocalExecutor(workers=workers).run(tasks, functools.partial(_fail_on, bad, str(tmp_path)))
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "1 unit(s) completed" in str(info.value)
    assert set(info.value.completed) == {UnitKey("a", 0, 0)}
    assert (tmp_path / "a__seed0__w00").exists()
    assert not (tmp_path / "a__seed0__w02").exists(), "a successor of a failed unit must not run"


def test_other_chains_finish_when_one_unit_fails(tmp_path):
    """A failure stops new submissions; units already running or independent of it are kept."""
    tasks = [UnitTask(UnitKey("a", 0, 0)), UnitTask(UnitKey("b", 0, 0))]
    bad = UnitKey("a", 0, 0)
    with pytest.raises(UnitFailedError) as info:
        LocalExecutor(workers=2).run(tasks, functools.partial(_fail_on, bad, str(tmp_path)))
    assert set(info.value.completed) == {UnitKey("b", 0, 0)}
    assert (tmp_path / "b__seed0__w00").exists()


def test_pool_really_uses_other_processes(tmp_path):
    tasks = [UnitTask(UnitKey("p", s, 0)) for s in range(4)]
    pids = LocalExecutor(workers=2).run(tasks, functools.partial(_pid))
    assert os.getpid() not in set(pids.values())


def _pid(key: UnitKey) -> int:
    return os.getpid()


def test_bad_task_lists_are_rejected():
    a0 = UnitKey("a", 0, 0)
    with pytest.raises(ValueError, match="duplicate"):
        check_tasks([UnitTask(a0), UnitTask(a0)])
    with pytest.raises(ValueError, match="not scheduled"):
        check_tasks([UnitTask(UnitKey("a", 0, 1), after=a0)])
    with pytest.raises(ValueError, match="workers"):
        LocalExecutor(workers=0)


def test_slug_is_stable():
    assert UnitKey("wd5e-6", 3, 7).slug() == "wd5e-6__seed3__w07"


def test_every_failed_unit_is_reported(tmp_path):
    """Two units fail while running side by side: the error names both, the first cause is chained."""
    tasks = [UnitTask(UnitKey("a", 0, 0)), UnitTask(UnitKey("b", 0, 0))]
    with pytest.raises(UnitFailedError) as info:
        LocalExecutor(workers=2).run(tasks, functools.partial(_fail_always, str(tmp_path)))
    message = str(info.value)
    assert message.startswith("2 units failed; first: unit ")
    assert "a__seed0__w00" in message and "b__seed0__w00" in message
    assert [key for key, _ in info.value.failures] in ([UnitKey("a", 0, 0), UnitKey("b", 0, 0)],
                                                       [UnitKey("b", 0, 0), UnitKey("a", 0, 0)])
    assert all(isinstance(exc, RuntimeError) for _, exc in info.value.failures)
    assert info.value.__cause__ is info.value.failures[0][1]
