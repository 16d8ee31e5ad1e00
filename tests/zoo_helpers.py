"""Small experiments naming Qlib's model-zoo classes, on a daily store (shared by the zoo tests)."""

from __future__ import annotations

from pathlib import Path

import yaml

from rolling_calib.config.experiment import load_experiment
from rolling_calib.execution.executors import LocalExecutor
from rolling_calib.execution.runner import plan_run, run_plan

#: Evaluate Oct-Dec 2014 in one window, validate on Aug-Sep (6 stocks x ~42 sessions), train from 2013-06.
ROLLING = {"initial_train_start": "2013-06", "start": "2014-10", "end": "2014-12", "step_months": 3,
           "valid_months": 2, "mode": "scratch", "seeds": 1}
SEGMENTS = {"train": ["2013-06-03", "2014-07-31"], "valid": ["2014-08-01", "2014-09-30"],
            "test": ["2014-10-01", "2014-12-31"]}
#: Eight Alpha158 columns for the time-series models (d_feat 8).
FEATURES = ["KMID", "KLEN", "ROC5", "MA5", "STD5", "CORR5", "RSQR10", "VSTD5"]


def alpha158(*, columns: list[str] | None = None) -> dict:
    """Qlib's Alpha158 handler; with ``columns``, only those features, robustly normalised (as for the _ts models)."""
    kwargs: dict = {"instruments": "all"}
    if columns:
        kwargs["infer_processors"] = [
            {"class": "FilterCol", "kwargs": {"fields_group": "feature", "col_list": columns}},
            {"class": "RobustZScoreNorm", "kwargs": {"fields_group": "feature", "clip_outlier": True}},
            {"class": "Fillna", "kwargs": {"fields_group": "feature"}},
        ]
        kwargs["learn_processors"] = [{"class": "DropnaLabel"},
                                      {"class": "CSRankNorm", "kwargs": {"fields_group": "label"}}]
    return {"class": "Alpha158", "module_path": "qlib.contrib.data.handler", "kwargs": kwargs}


def experiment(tmp: Path, store: Path, model: dict, *, name: str, handler: dict | None = None,
               dataset: str = "DatasetH", dataset_kwargs: dict | None = None, segments: dict | None = None,
               **rolling) -> Path:
    """A one-window experiment of ``model`` on the daily store (written YAML, read as any workflow)."""
    doc = {
        "qlib_init": {"provider_uri": {"day": str(store)}, "region": "us"},
        "task": {"model": model,
                 "dataset": {"class": dataset, "module_path": "qlib.data.dataset",
                             "kwargs": {"handler": handler or alpha158(), "segments": segments or SEGMENTS,
                                        **(dataset_kwargs or {})}}},
        "rolling": {**ROLLING, **rolling},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run(path: Path, store: Path, **plan_kwargs):
    plan = plan_run(load_experiment(path), store=store, **plan_kwargs)
    summary = run_plan(plan, executor=LocalExecutor(workers=1), progress=False)
    return plan, summary


#: Qlib's GRU for TSDatasetH (a _ts model: predict(dataset) takes no segment), tiny.
GRU_TS = {"class": "GRU", "module_path": "qlib.contrib.model.pytorch_gru_ts",
          "kwargs": {"d_feat": len(FEATURES), "hidden_size": 8, "num_layers": 1, "dropout": 0.0, "n_epochs": 2,
                     "lr": 1e-3, "early_stop": 5, "batch_size": 64, "metric": "loss", "loss": "mse", "n_jobs": 20,
                     "GPU": 0}}


def gru_experiment(tmp: Path, store: Path) -> Path:
    return experiment(tmp, store, GRU_TS, name="gru_ts", handler=alpha158(columns=FEATURES), dataset="TSDatasetH",
                      dataset_kwargs={"step_len": 5})
