"""The per-unit memory estimate (issue 19, item 6): its parameter count is torch's, its refusal names the knob."""

from __future__ import annotations

import pytest

from rolling_calib.config.bounds import check_unit_memory
from rolling_calib.core.validation import ConfigError
from rolling_calib.qlib_adapter.lstm_core import LSTMModel
from rolling_calib.qlib_adapter.memory import lstm_parameters, unit_memory


def _task(model: dict | None = None, **dataset) -> dict:
    return {"model": {"class": "RollingLSTM", "module_path": "rolling_calib.qlib_adapter.model", "kwargs": model or {}},
            "dataset": {"class": "MinuteTSDataset", "module_path": "rolling_calib.qlib_adapter.dataset",
                        "kwargs": {"handler": {}, **dataset}}}


@pytest.mark.parametrize(("d_feat", "hidden", "layers"), [(6, 64, 2), (6, 8, 1), (3, 17, 3)])
def test_the_parameter_count_is_torchs(d_feat, hidden, layers):
    network = LSTMModel(d_feat=d_feat, hidden_size=hidden, num_layers=layers)
    assert lstm_parameters(d_feat=d_feat, hidden_size=hidden, num_layers=layers) == sum(
        p.numel() for p in network.parameters())


def test_defaults_are_the_classes_and_the_model_terms_scale_with_the_stack():
    one = unit_memory(_task(), instruments=25, bars=1000, stack_seeds=1)
    explicit = unit_memory(_task({"hidden_size": 64, "num_layers": 2, "batch_size": 2000}, step_len=60),
                           instruments=25, bars=1000, stack_seeds=1)
    four = unit_memory(_task(), instruments=25, bars=1000, stack_seeds=4)
    assert one.parts == explicit.parts
    assert four.parts["parameters"] == 4 * one.parts["parameters"] and four.parts["batch"] == 4 * one.parts["batch"]
    assert four.parts["panel"] == one.parts["panel"] and four.parts["predict"] == one.parts["predict"]


def test_other_models_have_no_estimate():
    task = _task()
    task["model"] = {"class": "LGBModel", "module_path": "qlib.contrib.model.gbdt", "kwargs": {}}
    assert unit_memory(task, instruments=25, bars=1000) is None
    check_unit_memory(None, workers=4, where="exp.yaml", available=1)   # no estimate: no refusal


def test_the_refusal_divides_the_memory_by_the_workers():
    estimate = unit_memory(_task(), instruments=25, bars=300_000)
    check_unit_memory(estimate, workers=1, where="exp.yaml", available=2 * estimate.total)
    with pytest.raises(ConfigError, match=r"^exp.yaml: one unit needs about 2\.5 GiB \(batch 1\.1 GiB, panel 1\.1 GiB, "
                                          r".*more than the 2\.5 GiB available to each of 2 worker\(s\) .*the largest "
                                          r"part, batch, is set by task.model.kwargs.batch_size, task.dataset.kwargs."
                                          r"step_len, hidden_size, num_layers: reduce it, or run fewer workers"):
        check_unit_memory(estimate, workers=2, where="exp.yaml", available=2 * estimate.total - 2)
