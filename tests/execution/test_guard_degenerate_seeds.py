"""A model without randomness: its seeds give identical predictions, and compare says so instead of accuracies.

Qlib's ``LinearModel`` (ordinary least squares) on ``Alpha158``, our own small YAML, on a daily store
ingested from the real daily bars (``tests/data_helpers.small_daily_store``): one window, two seeds.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml
from data_helpers import small_daily_store

from rolling_calib.cli import main

pytestmark = pytest.mark.slow

SPAN = ("2013-09-03", "2014-09-30")


def _run(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


def _experiment(root: Path, provider: Path) -> Path:
    handler = {"class": "Alpha158", "module_path": "qlib.contrib.data.handler",
               "kwargs": {"instruments": "all", "start_time": SPAN[0], "end_time": SPAN[1],
                          "fit_start_time": SPAN[0], "fit_end_time": "2014-05-30",
                          "infer_processors": [{"class": "Fillna", "kwargs": {"fields_group": "feature"}}],
                          "learn_processors": [{"class": "DropnaLabel"}]}}
    doc = {
        "qlib_init": {"provider_uri": str(provider), "logging_level": "WARNING"},
        "task": {
            "model": {"class": "LinearModel", "module_path": "qlib.contrib.model.linear", "kwargs": {"estimator": "ols"}},
            "dataset": {"class": "DatasetH", "module_path": "qlib.data.dataset",
                        "kwargs": {"handler": handler,
                                   "segments": {"train": [SPAN[0], "2014-05-30"], "valid": ["2014-06-02", "2014-06-30"],
                                                "test": ["2014-07-01", "2014-08-29"]}}},
        },
        "rolling": {"initial_train_start": "2013-09", "start": "2014-07", "end": "2014-08", "step_months": 2,
                    "valid_months": 1, "mode": "scratch", "seeds": 2},
        "pipelines": {"ols": {}, "ols_again": {}},
    }
    path = root / "linear.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_identical_seeds_replace_the_accuracies(tmp_path):
    path = _experiment(tmp_path, small_daily_store(tmp_path, span=SPAN))
    store = tmp_path / "store"
    _run(["run", str(path), "--store", str(store), "--workers", "1", "--no-tracking", "--json"])
    out = json.loads(_run(["compare", "--store", str(store), "--json", "--n-boot", "50"]))
    degenerate = [w for w in out["warnings"] if w["kind"] == "degenerate_seeds"]
    assert {w["pipelines"][0] for w in degenerate} == {"ols", "ols_again"}
    for w in degenerate:
        assert w["measured"]["identical"] and w["measured"]["max_abs_difference"] == 0.0
        assert "LinearModel" in w["message"] and "no seed variance" in w["message"]
    text = _run(["compare", "--store", str(store), "--n-boot", "50"])
    assert "not shown because" in text and "degenerate seeds" in text
    assert "1.000 [1.000, 1.000]" not in text    # the meaningless certainty of identical seeds is not printed
    identical = [w for w in out["warnings"] if w["kind"] == "identical_pipelines"]   # issue 29: one model, two names
    assert [w["pipelines"] for w in identical] == [["ols", "ols_again"]]
    assert "one model under two names" in identical[0]["message"]
    assert "identical pipelines" in text          # nor the accuracies of one model under two names


def _lgb_experiment(root: Path, provider: Path) -> Path:
    """LightGBM whose leaves need more rows than the training window holds: it cannot split, so it predicts the
    mean of the label (the real case of issue 29: Alpha158 on 1.5 years of daily bars, stopped at its first
    rounds). A second pipeline learns (small leaves)."""
    doc = yaml.safe_load(_experiment(root, provider).read_text())
    doc["task"]["model"] = {"class": "LGBModel", "module_path": "qlib.contrib.model.gbdt",
                            "kwargs": {"loss": "mse", "num_leaves": 4, "learning_rate": 0.1, "num_threads": 1,
                                       "bagging_fraction": 0.8, "bagging_freq": 1, "early_stopping_rounds": 5,
                                       "num_boost_round": 30}}
    doc["pipelines"] = {"stuck": {"task.model.kwargs.min_data_in_leaf": 100000},
                        "learns": {"task.model.kwargs.min_data_in_leaf": 5}}
    path = root / "lgb.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_a_model_that_learned_nothing_is_named_not_its_seeds(tmp_path):
    """constant_predictions (with the boosting round where it stopped) in place of degenerate_seeds."""
    path = _lgb_experiment(tmp_path, small_daily_store(tmp_path, span=SPAN))
    store = tmp_path / "store"
    _run(["run", str(path), "--store", str(store), "--workers", "1", "--no-tracking", "--json"])
    out = json.loads(_run(["compare", "--store", str(store), "--json", "--n-boot", "50"]))
    kinds = {(w["kind"], tuple(w["pipelines"])) for w in out["warnings"]}
    assert ("constant_predictions", ("stuck",)) in kinds
    assert ("degenerate_seeds", ("stuck",)) not in kinds and ("constant_predictions", ("learns",)) not in kinds
    assert not any(k == "identical_pipelines" for k, _ in kinds)
    warning = next(w for w in out["warnings"] if w["kind"] == "constant_predictions")
    assert warning["measured"]["constant"] and warning["measured"]["max_range"] == 0.0
    assert "predicts a constant" in warning["message"] and "learned nothing" in warning["message"]
    assert "its training stopped at boosting round" in warning["message"]
    text = _run(["compare", "--store", str(store), "--n-boot", "50"])
    assert "stuck predicts a constant (constant predictions)" in text   # its accuracies are not shown
    side = json.loads(next((store / "units" / "stuck").glob("seed*/w*.json")).read_text())
    assert side["stopped_at"].startswith("boosting round")
