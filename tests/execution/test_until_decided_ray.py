"""``--until-decided`` on a real local Ray runtime (2 CPUs) and on the local pool (2 workers), real Qlib units, no
mocks: no lockstep, same store.

Two pairs: ``fa vs fb`` (fast units) and ``sa vs sb`` (the same models with many more epochs:
slow units). The fast pair's second look must not wait for the slow pair's first: its next batch
is asked for (and submitted) while slow units of the first look are still running. And the store
must be the one the lockstep schedule gives (every look's batch trained before any look is
taken): the same units with the same bytes, the same looks, outcomes and seeds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ray = pytest.importorskip("ray")

from rolling_calib.analysis.scoring import score_store  # noqa: E402
from rolling_calib.analysis.sequential_path import SequentialPath, read_path  # noqa: E402
from rolling_calib.analysis.verdicts import loss_panel  # noqa: E402
from rolling_calib.config.experiment import load_experiment  # noqa: E402
from rolling_calib.core.sequential import SequentialState  # noqa: E402
from rolling_calib.core.stopping import StoppingRule  # noqa: E402
from rolling_calib.execution.executors import LocalExecutor  # noqa: E402
from rolling_calib.execution.factory import ExecutorOptions  # noqa: E402
from rolling_calib.execution.ray_executor import _start_local_runtime  # noqa: E402
from rolling_calib.execution.runner import plan_run, run_plan  # noqa: E402
from rolling_calib.experiment.flow import RunOptions, run_experiment  # noqa: E402
from rolling_calib.experiment.until_decided import UntilDecided  # noqa: E402

from sweep_helpers import tiny_experiment  # noqa: E402

pytestmark = pytest.mark.slow

SLOW = {"task.model.kwargs.n_epochs": 12, "task.model.kwargs.finetune_epochs": 12,
        "task.model.kwargs.early_stop": 100}
PIPELINES = {"fa": {}, "fb": {"task.model.kwargs.weight_decay": 0.5},
             "sa": dict(SLOW), "sb": {**SLOW, "task.model.kwargs.weight_decay": 0.5}}
COMPARE = [["fa", "fb"], ["sa", "sb"]]
RULE = UntilDecided(rule=StoppingRule(first=2, batch=1, max_seeds=4, futility=0.0))


@pytest.fixture(scope="module")
def ray_runtime():
    """A real local Ray runtime with 2 CPUs."""
    if ray.is_initialized():
        ray.shutdown()
    # The product's start path: a start-up that times out on a loaded machine is tried again.
    _start_local_runtime(ray.init, ray.shutdown, {"num_cpus": 2, "include_dashboard": False,
                                                  "object_store_memory": 100 * 1024 * 1024, "log_to_driver": False})
    yield
    ray.shutdown()


@pytest.fixture
def executor(request):
    """``ExecutorOptions`` of the run: Ray (on the module's runtime) or the local pool, 2 units at once."""
    if request.param == "ray":
        request.getfixturevalue("ray_runtime")
        return ExecutorOptions(kind="ray", workers=2, log_to_driver=False)
    return ExecutorOptions(kind="local", workers=2)


_LOCKSTEP: dict[str, tuple[SequentialState, dict[str, str]]] = {}


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return load_experiment(tiny_experiment(tmp_path_factory.mktemp("until_ray"), pipelines=PIPELINES,
                                           compare=COMPARE))


def _units(store: Path) -> dict[str, str]:
    return {str(p.relative_to(store)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((store / "units").rglob("w*.parquet"))}


def _lockstep(config, store: Path, path: SequentialPath) -> SequentialState:
    """The lockstep schedule: every look's batch trained (run_plan) before the look is taken, all pairs at once."""
    plan = plan_run(config, store=store, seeds=RULE.rule.max_seeds, n_threads=1)
    names = [p.name for p in plan.pipelines]
    state = SequentialState(names, pairs=[tuple(p) for p in COMPARE], rule=path.rule, question=path.question,
                            orientation=path.orientation)
    while not state.done:
        wanted = state.wanted()
        n = max(wanted.values())
        sub = dataclasses.replace(plan, pipelines=tuple(p for p in plan.pipelines if p.name in wanted),
                                  seeds=plan.seeds[:n])
        run_plan(sub, executor=LocalExecutor(workers=2), progress=False)
        days = score_store(store, pipelines=list(wanted)).days
        panels = {}
        for name, k in wanted.items():
            panel = loss_panel(days, name, RULE.decide_by)
            have = panel.seeds.tolist()
            panels[name] = panel.select(seeds=np.array([have.index(s) for s in plan.seeds[:k]]))
        state.look(panels)
    return state


@pytest.mark.parametrize("executor", ["ray", "local"], indirect=True)
def test_run_submits_as_results_come_in_and_ends_as_lockstep(executor, config, tmp_path_factory):
    store = tmp_path_factory.mktemp("until") / executor.kind
    options = RunOptions(store=store, executor=executor, track=False, score=False, progress=False, until_decided=RULE)
    result = run_experiment(config, options)
    path = read_path(store)
    assert path.done and path.rule == RULE.rule

    # no lockstep: the fast pair's second-look batch was asked for before the slow pair's first look was in
    def finished(name: str, seeds: range) -> list[pd.Timestamp]:
        return [pd.Timestamp(json.loads((store / "units" / name / f"seed{s}" / f"w{w:02d}.json").read_text())
                             ["finished_at"]) for s in seeds for w in range(2)]

    asked = {(e.pipeline, e.seeds): pd.Timestamp(e.asked_at) for e in path.schedule}
    assert ("fa", (2,)) in asked and ("fb", (2,)) in asked       # the fast pair had a second look
    slow_first_look_done = max(finished("sa", range(2)) + finished("sb", range(2)))
    assert asked[("fa", (2,))] < slow_first_look_done
    assert all(pd.Timestamp(e.complete_at) >= pd.Timestamp(e.asked_at) for e in path.schedule)

    # the lockstep schedule on the local pool: the same units, bytes, looks, outcomes and seeds
    settings = json.dumps(path.settings(), sort_keys=True)
    if settings not in _LOCKSTEP:   # trained once for both executors
        lockstep = tmp_path_factory.mktemp("lockstep")
        _LOCKSTEP[settings] = _lockstep(config, lockstep, path), _units(lockstep)
    reference, reference_units = _LOCKSTEP[settings]
    assert _units(store) == reference_units
    assert path.seeds_used == reference.used()
    assert path.outcomes == {" vs ".join(p): o for p, o in reference.outcomes.items()}
    assert [nl.look for nl in path.looks] == reference.looks     # every look, read back from the JSON
    assert path.looks_done == reference.n_looks
    assert result.summary.ran == path.units.used == len([f for f in _units(store) if ".valid." not in f])
