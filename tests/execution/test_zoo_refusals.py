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
