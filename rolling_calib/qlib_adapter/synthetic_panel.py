"""Random-walk minute bars in memory: data of the right shape for timing and checking the model, no store.

The benches of the GPU paths (``bench/bench_stacked.py``, ``bench/bench_gpu_feed.py``) and the
device checks time the network and its feed; what the bars say does not matter there, their
shape does (instruments x minutes x 6 channels, sessions of 390 minutes, a 10-bar label). This
module makes such bars without Qlib's provider, a store or an exchange calendar, so those runs
need neither (a device machine without the data stack still runs them). It is not a market
model: for realistic synthetic data use ``rolling-calib data synth`` (:mod:`data_prep.synthetic`).

Per instrument ``i`` and minute ``t`` of ``days`` weekday sessions 09:30-15:59::

    log close[t] = log close[t-1] + 1e-3 * z[t],   z ~ N(0, 1) drawn from default_rng(seed)
    open[t] = close[t-1];  high/low = max/min(open, close) * (1 +/- 2e-4 |z'|);  vwap = (high + low + close) / 3
    volume ~ round(exp(N(6, 1)))

then :func:`~rolling_calib.qlib_adapter.dataset.build_panel_from_grids` (the store's own repair and
label code) makes the :class:`~rolling_calib.qlib_adapter.dataset.BarPanel`.

Examples
--------
>>> panel = random_walk_panel(instruments=2, days=10, seed=0)
>>> len(panel.instruments), panel.n_minutes, panel.values.shape
(2, 3900, (7800, 6))
>>> ds = panel_dataset(panel, step_len=20)
>>> x, y = ds.prepare("train").batch(np.arange(4))
>>> x.shape
(4, 20, 6)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rolling_calib.qlib_adapter.dataset import (BarPanel, MinutePanelHandler, MinuteTSDataset,
                                                build_panel_from_grids)

__all__ = ["random_walk_panel", "panel_dataset"]

#: Minutes of one regular session (09:30 .. 15:59).
SESSION_MINUTES = 390


def random_walk_panel(*, instruments: int = 5, days: int = 40, start: str = "2018-01-02", seed: int = 0,
                      label_horizon: int = 10) -> BarPanel:
    """``instruments`` random-walk symbols (``S000``, ``S001``, ...) over ``days`` weekday sessions (module doc)."""
    if instruments < 1 or days < 1:
        raise ValueError(f"instruments, days: expected >= 1, found {instruments}, {days}")
    sessions = pd.bdate_range(start, periods=days)
    minutes = pd.timedelta_range("09:30:00", periods=SESSION_MINUTES, freq="1min")
    times = pd.DatetimeIndex((sessions.values[:, None] + minutes.values[None, :]).ravel(), name="datetime")
    rng = np.random.default_rng(seed)
    shape = (instruments, len(times))
    close = 100.0 * np.exp(np.cumsum(1e-3 * rng.standard_normal(shape), axis=1))
    open_ = np.concatenate([close[:, :1], close[:, :-1]], axis=1)
    spread = 1 + 2e-4 * np.abs(rng.standard_normal(shape))
    high, low = np.maximum(open_, close) * spread, np.minimum(open_, close) / spread
    grids = {"open": open_, "high": high, "low": low, "close": close, "vwap": (high + low + close) / 3,
             "volume": np.round(np.exp(rng.normal(6.0, 1.0, shape)))}
    names = [f"S{i:03d}" for i in range(instruments)]
    return build_panel_from_grids(names, times, {k: v.astype(np.float32) for k, v in grids.items()},
                                  label_horizon=label_horizon)


def panel_dataset(panel: BarPanel, *, step_len: int = 60, sample_stride: int = 1, test_stride: int = 1,
                  train_share: float = 0.7, valid_share: float = 0.1) -> MinuteTSDataset:
    """A :class:`MinuteTSDataset` over ``panel``: the first ``train_share`` of its sessions train, then valid, then test.

    The normalisation is fitted on the train segment (the handler's ``fit_*`` range), as a
    window of the runner fits it.
    """
    days = pd.DatetimeIndex(panel.times.normalize().unique())
    n_train = max(1, int(len(days) * train_share))
    n_valid = max(1, int(len(days) * valid_share))
    if n_train + n_valid >= len(days):
        raise ValueError(f"panel: expected more than {n_train + n_valid} sessions for train, valid and test, "
                         f"found {len(days)}")

    def end_of(day: pd.Timestamp) -> str:
        return str(day + pd.Timedelta(hours=23, minutes=59))

    segments = {"train": (str(days[0]), end_of(days[n_train - 1])),
                "valid": (str(days[n_train]), end_of(days[n_train + n_valid - 1])),
                "test": (str(days[n_train + n_valid]), end_of(days[-1]))}
    handler = MinutePanelHandler(panel=panel, fit_start_time=segments["train"][0], fit_end_time=segments["train"][1],
                                 window=step_len)
    return MinuteTSDataset(handler=handler, segments=segments, step_len=step_len, sample_stride=sample_stride,
                           test_stride=test_stride)
