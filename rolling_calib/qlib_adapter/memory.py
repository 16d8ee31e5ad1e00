"""The memory one unit needs, estimated from its model's and dataset's shapes before anything trains.

For :class:`~rolling_calib.qlib_adapter.model.RollingLSTM` on
:class:`~rolling_calib.qlib_adapter.dataset.MinuteTSDataset` (float32 throughout, 4 bytes a value)::

    bars       = instruments x calendar minutes the handler loads (fit start .. test end, the longest window)
    panel      = bars x 28 x 4 B + 300 MiB                            (the per-bar array, labels, and what loading
                                                                       them through Qlib's provider holds)
    P          = sum over layers l of 4 h (d_l + h + 2) + h + 1      (LSTM weights and biases, linear head; d_1 = d_feat)
    parameters = P x 4 B x 5                                          (weights, gradients, Adam's two moments,
                                                                       the best epoch's copy kept for early stopping)
    batch      = batch_size x step_len x (d_feat + 20 h num_layers) x 4 B
                                                                      (the input window and, per step, layer and
                                                                       hidden unit, what torch's LSTM keeps for and
                                                                       allocates in the backward pass)
    predict    = max(batch_size, EVAL_CHUNK) x step_len x (d_feat + 2 h) x 4 B
    total      = panel + stack_seeds x (parameters + batch) + predict

The constants are measured (``bench/bench_window_memory.py``, 25 symbols, hidden 64, 2 layers, batch 2000,
step 60, CPU): loading and preparing 2.44 M bars (2014) grew the process by 0.58 GiB, 7.31 M bars (2012-2014)
by 1.09 GiB (28 values a bar, and 0.3 GiB whatever the size); three training batches by 1.16 and 1.00 GiB
(about 20 values per step, layer and hidden unit). The estimate is of the order of the peak, not a bound: it
exists to refuse shapes that cannot fit.

A seed stack (``rolling.stack_seeds``) fits its seeds side by side, so the model terms scale with it.
Other models (Qlib's ``LGBModel``, ``LSTM``, ...) have no estimate here (``None``): their memory
is not told from a few shapes.

Example
-------
>>> task = {"model": {"class": "RollingLSTM", "module_path": "rolling_calib.qlib_adapter.model",
...                   "kwargs": {"hidden_size": 64, "num_layers": 2}},
...         "dataset": {"class": "MinuteTSDataset", "module_path": "rolling_calib.qlib_adapter.dataset",
...                     "kwargs": {"handler": {}, "step_len": 60}}}
>>> est = unit_memory(task, instruments=25, bars=300_000, stack_seeds=1)
>>> est.describe()
'batch 1.1 GiB, panel 1.1 GiB, predict 251.2 MiB, parameters 1011.3 KiB'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["UnitMemory", "format_bytes", "lstm_parameters", "unit_memory"]

#: Bytes of a float32 value.
_F32 = 4
#: float32 values per bar while the panel is loaded and held (measured slope between 2.44 M and 7.31 M bars;
#: 6 features and 1 label are kept, the rest is the load through Qlib's provider), and what loading holds
#: whatever the size (the measured intercept).
_PANEL_VALUES = 28
_PANEL_FIXED = 300 * 2**20
#: Copies of the parameters while training: weights, gradients, Adam's two moments, the best epoch's.
_PARAM_COPIES = 5
#: float32 values per step, layer and hidden unit of a training batch (measured: 1.00-1.16 GiB for 2000 x 60
#: steps, hidden 64, 2 layers; the 4 gates, cell and hidden state kept for backward, and what backward allocates).
_LSTM_SAVED = 20


@dataclass(frozen=True)
class UnitMemory:
    """The estimated bytes of one unit, by part (``panel``, ``parameters``, ``batch``, ``predict``), and the
    option that sets each part (``knobs``)."""

    parts: dict[str, int]
    knobs: dict[str, str]

    @property
    def total(self) -> int:
        return int(sum(self.parts.values()))

    @property
    def largest(self) -> str:
        return max(self.parts, key=self.parts.__getitem__)

    def describe(self) -> str:
        """``panel 1.2 GiB, parameters 3.0 KiB, ...`` (largest first)."""
        ordered = sorted(self.parts.items(), key=lambda kv: -kv[1])
        return ", ".join(f"{name} {format_bytes(value)}" for name, value in ordered)


def format_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KiB``; TiB beyond.

    >>> format_bytes(512), format_bytes(3 * 2**30), format_bytes(2**60)
    ('512 B', '3.0 GiB', '1048576.0 TiB')
    """
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _kwargs(cls: type, given: Mapping[str, Any]) -> dict[str, Any]:
    """The class's keyword defaults with ``given`` on top."""
    from rolling_calib.qlib_adapter.task_spec import accepted_parameters

    out = {name: p.default for name, p in accepted_parameters(cls).items() if p.default is not p.empty}
    out.update(given)
    return out


def lstm_parameters(*, d_feat: int, hidden_size: int, num_layers: int) -> int:
    """Parameters of Qlib's ``LSTMModel`` (a stacked ``torch.nn.LSTM`` and a linear head).

    >>> lstm_parameters(d_feat=6, hidden_size=64, num_layers=2)   # torch's count of LSTMModel(6, 64, 2)
    51777
    """
    h = hidden_size
    per_layer = [4 * h * (d_in + h + 2) for d_in in [d_feat] + [h] * (num_layers - 1)]
    return sum(per_layer) + h + 1


def unit_memory(task: Mapping[str, Any], *, instruments: int, bars: int, stack_seeds: int = 1) -> UnitMemory | None:
    """The estimate of the module docstring for ``task`` (``None`` unless RollingLSTM on MinuteTSDataset).

    ``bars``: the calendar minutes the handler loads for the longest window; ``instruments``: the universe's size.
    """
    from rolling_calib.qlib_adapter.dataset import MinuteTSDataset
    from rolling_calib.qlib_adapter.lstm_core import EVAL_CHUNK
    from rolling_calib.qlib_adapter.model import RollingLSTM
    from rolling_calib.qlib_adapter.task_spec import import_class

    model_cls = import_class(task["model"], "task.model", "task")
    dataset_cls = import_class(task["dataset"], "task.dataset", "task")
    if not (issubclass(model_cls, RollingLSTM) and issubclass(dataset_cls, MinuteTSDataset)):
        return None
    m = _kwargs(model_cls, task["model"].get("kwargs") or {})
    d = _kwargs(dataset_cls, task["dataset"].get("kwargs") or {})
    d_feat, h, layers, batch, steps = (int(m["d_feat"]), int(m["hidden_size"]), int(m["num_layers"]),
                                       int(m["batch_size"]), int(d["step_len"]))
    n_params = lstm_parameters(d_feat=d_feat, hidden_size=h, num_layers=layers)
    parts = {
        "panel": instruments * bars * _PANEL_VALUES * _F32 + _PANEL_FIXED,
        "parameters": stack_seeds * n_params * _F32 * _PARAM_COPIES,
        "batch": stack_seeds * batch * steps * (d_feat + _LSTM_SAVED * h * layers) * _F32,
        "predict": max(batch, EVAL_CHUNK) * steps * (d_feat + 2 * h) * _F32,
    }
    knobs = {"panel": "the universe (instruments) and the rolling span (rolling.initial_train_start .. end)",
             "parameters": "task.model.kwargs.hidden_size / num_layers (and rolling.stack_seeds)",
             "batch": "task.model.kwargs.batch_size, task.dataset.kwargs.step_len, hidden_size, num_layers",
             "predict": "task.dataset.kwargs.step_len, task.model.kwargs.hidden_size"}
    return UnitMemory(parts=parts, knobs=knobs)
