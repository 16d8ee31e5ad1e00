"""What is knowable before training is refused before training: exit 2, nothing trained, the reason and the fix.

* a validation segment with fewer rows than one batch of a model whose validation pass drops an
  incomplete batch (Qlib's TCN: it would fail on ``best_param`` after training);
* a model class whose package is missing (XGBoost hidden here): the extra to install;
* HIST, which downloads another market's concept data at fit time and loads a missing file;
* booster parameters the library rejects on this machine (CatBoost's GPU-only Poisson bootstrap on CPU);
* a missing pretrained base the runner cannot train, an extra segment that stands for none of
  train/valid/test, pipelines that write different model seeds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from daily_helpers import build_daily_store
from rolling_calib.config.experiment import load_experiment
from rolling_calib.core.validation import ConfigError
from rolling_calib.execution.runner import plan_run
from runner_helpers import REPO
from zoo_helpers import SEGMENTS, experiment

pytestmark = pytest.mark.slow

ALPHA360 = {"class": "Alpha360", "module_path": "qlib.contrib.data.handler", "kwargs": {"instruments": "all"}}
TCN = {"class": "TCN", "module_path": "qlib.contrib.model.pytorch_tcn",
       "kwargs": {"d_feat": 6, "num_layers": 2, "n_chans": 8, "kernel_size": 3, "n_epochs": 1, "batch_size": 2000}}
XGB = {"class": "XGBModel", "module_path": "qlib.contrib.model.xgboost", "kwargs": {"eval_metric": "rmse", "nthread": 2}}
HIST = {"class": "HIST", "module_path": "qlib.contrib.model.pytorch_hist",
        "kwargs": {"d_feat": 6, "base_model": "LSTM", "model_path": "benchmarks/LSTM/model_lstm_csi300.pkl",
                   "stock2concept": "benchmarks/HIST/qlib_csi300_stock2concept.npy",
                   "stock_index": "benchmarks/HIST/qlib_csi300_stock_index.npy"}}


@pytest.fixture(scope="module")
def daily(tmp_path_factory) -> Path:
    return build_daily_store(tmp_path_factory.mktemp("refusals") / "qlib_day")


def run_cli(path: Path, store: Path, *, prelude: str = "") -> subprocess.CompletedProcess:
    """``rolling-calib run`` in a fresh interpreter (``prelude`` runs first: e.g. hides a package)."""
    code = f"{prelude}\nimport sys\nfrom rolling_calib.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, "run", str(path), "--store", str(store), "--no-tracking"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def test_validation_smaller_than_a_batch_is_refused_with_both_fixes(tmp_path, daily):
    proc = run_cli(experiment(tmp_path, daily, TCN, name="tcn", handler=ALPHA360), tmp_path / "store")
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = " ".join(proc.stderr.split())
    assert "fewer than one batch (batch_size 2000)" in err and "TCN.test_epoch skips a batch" in err
    assert "rolling.valid_months >=" in err and "task.model.kwargs.batch_size <=" in err
    assert not (tmp_path / "store" / "units").exists()


def test_a_missing_model_package_names_the_extra_to_install(tmp_path, daily):
    hide = "import sys; sys.modules['xgboost'] = None; sys.modules.pop('qlib.contrib.model.xgboost', None)"
    proc = run_cli(experiment(tmp_path, daily, XGB, name="xgb"), tmp_path / "store", prelude=hide)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "xgboost" in proc.stderr and "pip install 'rolling-calib[zoo]'" in proc.stderr
    assert not (tmp_path / "store").exists()


def test_hist_which_downloads_another_markets_data_at_fit_time_is_refused(tmp_path, daily):
    proc = run_cli(experiment(tmp_path, daily, HIST, name="hist", handler=ALPHA360), tmp_path / "store")
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = " ".join(proc.stderr.split())
    assert "stock2concept" in err and "downloads it from https://" in err and "give a file for your universe" in err
    assert "stock_index" in err and "loads it at fit time" in err
    assert not (tmp_path / "store" / "units").exists()


def test_a_pretrained_base_the_runner_cannot_train_is_refused(tmp_path, daily):
    gats = {"class": "GATs", "module_path": "qlib.contrib.model.pytorch_gats",
            "kwargs": {"base_model": "Transformer", "model_path": "not/there.pkl"}}
    config = load_experiment(experiment(tmp_path, daily, gats, name="gats", handler=ALPHA360))
    with pytest.raises(ConfigError, match="model_path: not/there.pkl does not exist, and base_model 'Transformer'"):
        plan_run(config, store=tmp_path / "store")


def test_an_extra_segment_that_stands_for_no_rolled_segment_is_refused(tmp_path, daily):
    lgb = {"class": "LGBModel", "module_path": "qlib.contrib.model.gbdt", "kwargs": {"num_boost_round": 5}}
    segments = {**SEGMENTS, "holdout": ["2012-01-01", "2012-06-30"]}
    config = load_experiment(experiment(tmp_path, daily, lgb, name="lgb", segments=segments))
    with pytest.raises(ConfigError, match="segments.holdout: an extra segment must repeat the written dates"):
        plan_run(config, store=tmp_path / "store")


def test_pipelines_writing_different_model_seeds_are_refused(tmp_path, daily):
    import yaml

    lgb = {"class": "LGBModel", "module_path": "qlib.contrib.model.gbdt", "kwargs": {"num_boost_round": 5, "seed": 1}}
    path = experiment(tmp_path, daily, lgb, name="lgb")
    doc = yaml.safe_load(path.read_text())
    doc["pipelines"] = {"a": {}, "b": {"task.model.kwargs.seed": 2}}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="pipelines write different model seeds"):
        plan_run(load_experiment(path), store=tmp_path / "store")


def test_booster_parameters_the_library_rejects_here_are_refused(tmp_path, daily):
    from catboost.utils import get_gpu_device_count

    if get_gpu_device_count() > 0:
        pytest.skip("CatBoost's Poisson bootstrap runs on a GPU")
    catboost = {"class": "CatBoostModel", "module_path": "qlib.contrib.model.catboost_model",
                "kwargs": {"loss": "RMSE", "subsample": 0.88, "thread_count": 20, "bootstrap_type": "Poisson"}}
    config = load_experiment(experiment(tmp_path, daily, catboost, name="cb"))
    with pytest.raises(ConfigError) as err:  # before the calendar is read: no unit, no store
        plan_run(config, store=tmp_path / "store")
    assert "poisson bootstrap is not supported on CPU" in str(err.value)
    assert "bootstrap_type: Bernoulli on CPU" in str(err.value)
    assert not (tmp_path / "store").exists()


# --------------------------------------------------------------------------- issue 29: model keywords a **kwargs swallows
LGB = {"class": "LGBModel", "module_path": "qlib.contrib.model.gbdt",
       "kwargs": {"loss": "mse", "learning_rate": 0.1, "num_leaves": 8, "num_threads": 1}}
LSTM = {"class": "LSTM", "module_path": "qlib.contrib.model.pytorch_lstm",
        "kwargs": {"d_feat": 6, "hidden_size": 8, "num_layers": 1, "n_epochs": 1, "batch_size": 64}}


def _with_pipelines(path: Path, pipelines: dict) -> Path:
    import yaml

    doc = yaml.safe_load(path.read_text())
    doc["pipelines"] = pipelines
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize(("model", "key", "near", "what"), [
    (LGB, "learning_rat", "learning_rate", "lightgbm"),
    (LSTM, "hiden_size", "hidden_size", "LSTM.__init__"),
])
def test_a_model_keyword_typo_is_refused_naming_the_pipeline_and_the_key(tmp_path, daily, model, key, near, what):
    """The cases of issue 29: both models take ``**kwargs``, so the signature check alone lets the typo through."""
    path = _with_pipelines(experiment(tmp_path, daily, model, name="typo", handler=ALPHA360),
                           {"base": {}, "typo": {f"task.model.kwargs.{key}": 0.05}})
    proc = run_cli(path, tmp_path / "store")
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = " ".join(proc.stderr.split())
    assert f"pipelines.typo: task.model.kwargs.{key}: {what} has no parameter '{key}' (did you mean '{near}'?)" in err
    assert not (tmp_path / "store" / "units").exists()


def test_an_ignored_keyword_of_qlibs_own_benchmarks_is_noted_not_refused():
    """Qlib's XGBoost benchmark writes ``n_estimators`` (``xgb.train`` ignores it), its ALSTM ``rnn_type``:
    no close parameter name, so a note; XGBoost's own verdict decides what it ignores (one round)."""
    from rolling_calib.qlib_adapter.zoo import check_model_keywords, unknown_model_keys

    xgb = {"model": {**XGB, "kwargs": {**XGB["kwargs"], "n_estimators": 647, "max_dept": 3, "eta": 0.1}}}
    assert unknown_model_keys(xgb["model"]) == [("n_estimators", "xgboost", None), ("max_dept", "xgboost", "max_depth")]
    with pytest.raises(ConfigError, match=r"cfg: task.model.kwargs.max_dept: xgboost has no parameter 'max_dept' "
                                          r"\(did you mean 'max_depth'\?\)"):
        check_model_keywords(xgb, "cfg")
    del xgb["model"]["kwargs"]["max_dept"]
    assert check_model_keywords(xgb, "cfg") == [
        "task.model.kwargs.n_estimators: xgboost takes no such parameter: it is ignored (as under qrun)"]
    alstm = {"model": {"class": "ALSTM", "module_path": "qlib.contrib.model.pytorch_alstm",
                       "kwargs": {"d_feat": 6, "hidden_size": 8, "rnn_type": "GRU"}}}
    assert check_model_keywords(alstm, "cfg") == [
        "task.model.kwargs.rnn_type: ALSTM.__init__ takes no such parameter: it is ignored (as under qrun)"]
    cat = {"class": "CatBoostModel", "module_path": "qlib.contrib.model.catboost_model",
           "kwargs": {"loss": "RMSE", "learning_rat": 0.1, "depth": 3}}
    assert unknown_model_keys(cat) == [("learning_rat", "catboost", "learning_rate")]
