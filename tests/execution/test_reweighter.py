"""The task's ``reweighter`` reaches ``model.fit``, as Qlib's trainer passes it (issue 36; real Qlib, no mocks).

Qlib's ``LinearModel`` (ridge) on Alpha158, one window of a daily store of 6 stocks: with a real
``qlib.data.dataset.weight.Reweighter`` subclass (later days weigh more) the fit changes; without, it is
ridge as before. The plan says where the reweighter goes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from daily_helpers import build_daily_store
from rolling_calib.config.experiment import load_experiment
from rolling_calib.execution.executors import LocalExecutor, UnitKey
from rolling_calib.execution.reader import read_unit
from rolling_calib.execution.runner import plan_run, run_plan

pytestmark = pytest.mark.slow

HELPER = Path(__file__).resolve().parents[1] / "fixtures" / "recent_heavier.py"


def test_the_reweighter_is_passed_to_fit(tmp_path):
    store = build_daily_store(tmp_path / "qlib_day")
    handler = {"class": "Alpha158", "module_path": "qlib.contrib.data.handler",
               "kwargs": {"instruments": "all", "start_time": "2013-02-01", "end_time": "2015-03-31",
                          "fit_start_time": "2013-02-01", "fit_end_time": "2014-05-31",
                          "infer_processors": [{"class": "Fillna", "kwargs": {"fields_group": "feature"}}]}}
    doc = {
        "qlib_init": {"provider_uri": str(store), "logging_level": "WARNING"},
        "task": {
            "model": {"class": "LinearModel", "module_path": "qlib.contrib.model.linear",
                      "kwargs": {"estimator": "ridge", "alpha": 0.05}},
            "dataset": {"class": "DatasetH", "module_path": "qlib.data.dataset",
                        "kwargs": {"handler": handler, "segments": {"train": ["2013-06-01", "2014-08-31"],
                                                                    "valid": ["2014-09-01", "2014-09-30"],
                                                                    "test": ["2014-10-01", "2014-12-31"]}}},
            "reweighter": {"class": "RecentHeavier", "module_path": str(HELPER), "kwargs": {"power": 3.0}},
        },
        "rolling": {"initial_train_start": "2013-06", "start": "2014-10", "end": "2014-12", "step_months": 3,
                    "mode": "scratch", "seeds": 1},
        "pipelines": {"weighted": {}, "plain": {"task.reweighter": None}},
    }
    path = tmp_path / "linear.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    plan = plan_run(load_experiment(path), store=tmp_path / "store")
    assert "weighted: task.reweighter RecentHeavier is passed to LinearModel.fit (as Qlib's trainer passes it)" \
        in plan.notes
    assert not any(n.startswith("plain: task.reweighter") for n in plan.notes)
    run_plan(plan, executor=LocalExecutor(workers=1), progress=False)
    weighted = read_unit(plan.store, UnitKey("weighted", 0, 0))["prediction"].to_numpy()
    plain = read_unit(plan.store, UnitKey("plain", 0, 0))["prediction"].to_numpy()
    assert weighted.shape == plain.shape and np.isfinite(weighted).all()
    assert not np.allclose(weighted, plain, rtol=1e-6, atol=0)   # the weights changed the ridge fit
