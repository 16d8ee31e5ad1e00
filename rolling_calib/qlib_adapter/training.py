"""One rolling window through Qlib's own machinery: the window's task, then fit, predict, label.

::

    task   = the pipeline's Qlib task with this window's dates and this unit's seed
    model  = init_instance_by_config(task["model"])      # e.g. rolling_calib.qlib_adapter.model.RollingLSTM
    data   = init_instance_by_config(task["dataset"])    # e.g. MinuteTSDataset(MinuteBarHandler)
    warm start: model.load_state(previous window's checkpoint)
    model.fit(data); p = model.predict(data, "test"); y = data.labels("test"); model.save_state(checkpoint)
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rolling_calib.core.schedule import Window
from rolling_calib.qlib_adapter.session import init_qlib_once

__all__ = ["TrainedWindow", "train_window", "window_task"]


@dataclass(frozen=True)
class TrainedWindow:
    """What one trained window returns: test predictions, test labels and timings (seconds)."""

    predictions: pd.Series | pd.DataFrame
    labels: pd.Series | pd.DataFrame
    build_s: float
    fit_s: float
    predict_s: float


def window_task(task: dict, window: Window, *, seed: int, n_threads: int) -> dict:
    """The Qlib task of one unit: the pipeline's task with this window's dates and seed.

    Sets the handler's ``start_time``/``end_time`` (fit start to test end) and
    ``fit_start_time``/``fit_end_time`` (the window's fit span), the dataset's
    ``segments`` (exact first/last minute bars) and the model's ``seed`` and ``n_threads``.
    """
    out = copy.deepcopy(task)
    model_kwargs = out["model"].setdefault("kwargs", {})
    model_kwargs["seed"] = int(seed)
    model_kwargs["n_threads"] = int(n_threads)
    dkw = out["dataset"].setdefault("kwargs", {})
    hkw = dkw["handler"].setdefault("kwargs", {})
    start = min(window.fit.start, window.train.start)
    hkw["start_time"] = start.isoformat(sep=" ")
    hkw["end_time"] = window.test.end.isoformat(sep=" ")
    hkw["fit_start_time"] = window.fit.start.isoformat(sep=" ")
    hkw["fit_end_time"] = window.fit.end.isoformat(sep=" ")
    dkw["segments"] = {"train": list(window.train.as_tuple()), "test": list(window.test.as_tuple())}
    if window.valid is not None:  # no valid segment: the model keeps its last epoch
        dkw["segments"]["valid"] = list(window.valid.as_tuple())
    return out



def train_window(
    qlib_init: Mapping[str, Any],
    task: Mapping[str, Any],
    *,
    warm_start: Path | None,
    checkpoint: Path,
) -> TrainedWindow:
    """Build the task's model and dataset, fit (from ``warm_start`` if given), predict the test segment.

    Parameters
    ----------
    qlib_init : mapping
        ``qlib.init`` arguments (Qlib is initialised once per process).
    task : mapping
        One window's Qlib task (:func:`window_task`).
    warm_start : path or None
        Checkpoint of the previous window to fine-tune from (``model.load_state``).
    checkpoint : path
        Where the trained model's state is written (``model.save_state``, atomic).
    """
    from qlib.utils import init_instance_by_config

    t0 = time.perf_counter()
    init_qlib_once(qlib_init)
    model = init_instance_by_config(copy.deepcopy(dict(task["model"])))
    dataset = init_instance_by_config(copy.deepcopy(dict(task["dataset"])))
    t_built = time.perf_counter()
    if warm_start is not None:
        model.load_state(warm_start)
    model.fit(dataset)
    t_fit = time.perf_counter()
    predictions = model.predict(dataset, segment="test")
    labels = dataset.labels("test")
    t_pred = time.perf_counter()
    model.save_state(checkpoint)  # atomic
    return TrainedWindow(predictions, labels, t_built - t0, t_fit - t_built, t_pred - t_fit)
