"""What the runner reads from Qlib's model classes (no data, no training): seeds, threads, predict, files, batches."""

from __future__ import annotations

import pytest

from rolling_calib.qlib_adapter.task_spec import import_class
from rolling_calib.qlib_adapter.zoo import (
    apply_unit_settings,
    file_reads,
    model_traits,
    partial_batch_evidence,
    saved_params,
)


def cls(module: str, name: str) -> type:
    return import_class({"module_path": module, "class": name}, "task.model", "test")


@pytest.mark.parametrize(("module", "name", "seed", "threads", "segment"), [
    ("qlib.contrib.model.gbdt", "LGBModel", "seed", "num_threads", True),
    ("qlib.contrib.model.double_ensemble", "DEnsembleModel", "seed", "num_threads", True),
    ("qlib.contrib.model.xgboost", "XGBModel", "seed", "nthread", True),
    ("qlib.contrib.model.catboost_model", "CatBoostModel", "random_seed", "thread_count", True),
    ("qlib.contrib.model.linear", "LinearModel", None, None, True),
    ("qlib.contrib.model.pytorch_gru_ts", "GRU", "seed", None, False),
    ("qlib.contrib.model.pytorch_tcts", "TCTS", "seed", None, False),
    ("qlib.contrib.model.pytorch_lstm", "LSTM", "seed", None, True),
    ("rolling_calib.qlib_adapter.model", "RollingLSTM", "seed", "n_threads", True),
])
def test_seed_thread_and_predict_arguments_are_read_from_the_class(module, name, seed, threads, segment):
    traits = model_traits(cls(module, name))
    assert traits.seed_param == seed
    assert (traits.thread_params[0] if traits.thread_params else None) == threads
    assert traits.takes_segment is segment


def test_unit_settings_overwrite_aliases_and_keep_catboost_from_writing_files():
    spec = {"module_path": "qlib.contrib.model.gbdt", "class": "LGBModel",
            "kwargs": {"random_state": 5, "nthread": 20}}
    applied = apply_unit_settings(spec, seed=2, threads=3)
    assert spec["kwargs"] == {"random_state": 2, "nthread": 3, "seed": 2, "num_threads": 3}
    assert applied == {"seed_param": "seed", "threads": {"torch": 3, "num_threads": 3, "nthread": 3}}
    cat = {"module_path": "qlib.contrib.model.catboost_model", "class": "CatBoostModel", "kwargs": {}}
    apply_unit_settings(cat, seed=0, threads=1)
    assert cat["kwargs"] == {"random_seed": 0, "thread_count": 1, "allow_writing_files": False}
    gru = {"module_path": "qlib.contrib.model.pytorch_gru_ts", "class": "GRU", "kwargs": {"n_jobs": 20}}
    assert apply_unit_settings(gru, seed=1, threads=2)["threads"] == {"torch": 2, "n_jobs": 2}


def test_files_a_model_loads_downloads_or_writes_itself():
    assert file_reads(cls("qlib.contrib.model.pytorch_hist", "HIST")) == \
        {"stock2concept": "downloads", "stock_index": "loads", "model_path": "loads"}
    tabnet = cls("qlib.contrib.model.pytorch_tabnet", "TabnetModel")
    assert file_reads(tabnet) == {} and saved_params(tabnet) == ("pretrain_file",)  # written by its pretraining


def test_validation_passes_that_drop_an_incomplete_batch():
    assert "test_epoch skips a batch" in partial_batch_evidence(cls("qlib.contrib.model.pytorch_tcn", "TCN"))
    assert "drop_last=True" in partial_batch_evidence(cls("qlib.contrib.model.pytorch_gru_ts", "GRU"))
    assert partial_batch_evidence(cls("qlib.contrib.model.pytorch_nn", "DNNModelPytorch")) is None  # scores it whole
    assert partial_batch_evidence(cls("qlib.contrib.model.pytorch_gats_ts", "GATs")) is None  # one day a batch


def test_a_subclass_of_portanarecord_is_an_optional_backtest():
    from rolling_calib.qlib_adapter.records import _is_backtest

    module = "qlib.workflow.record_temp"
    assert _is_backtest({"class": "MultiPassPortAnaRecord", "module_path": module})
    assert _is_backtest({"class": "PortAnaRecord"}) and not _is_backtest({"class": "SigAnaRecord", "module_path": module})


def test_igmtf_compat_keeps_a_balanced_universes_days_as_tensors():
    import numpy as np
    import pandas as pd
    import torch
    from qlib.contrib.model.pytorch_igmtf import IGMTF as QlibIGMTF

    from rolling_calib.qlib_adapter.compat import IGMTF, compat_substitute

    index = pd.MultiIndex.from_product([pd.date_range("2020-01-01", periods=4), ["A", "B", "C"]],
                                       names=["datetime", "instrument"])  # 3 stocks every day
    x = pd.DataFrame(np.random.default_rng(0).normal(size=(len(index), 360)), index=index)
    ours, qlibs = (cls_(d_feat=6, hidden_size=4, num_layers=1, seed=1) for cls_ in (IGMTF, QlibIGMTF))
    np.random.seed(5)
    hidden, per_day = ours.get_train_hidden(x)
    np.random.seed(5)
    q_hidden, q_per_day = qlibs.get_train_hidden(x)
    assert hidden.shape == (4,) and all(isinstance(h, torch.Tensor) and h.shape == (3, 4) for h in hidden)
    assert q_hidden.ndim == 3  # Qlib's: numbers, which its forward pass cannot torch.cat
    assert torch.equal(per_day, q_per_day)  # same shuffle, same network: the same hidden states
    assert all(np.array_equal(h.numpy(), q.astype(np.float32)) for h, q in zip(hidden, q_hidden))
    spec, note = compat_substitute({"class": "IGMTF", "module_path": "qlib.contrib.model.pytorch_igmtf", "kwargs": {}})
    assert spec["module_path"] == "rolling_calib.qlib_adapter.compat" and "same number of stocks" in note
