"""The LSTM pieces shared by :class:`~rolling_calib.qlib_adapter.model.RollingLSTM`'s fit and the seed stack.

:mod:`rolling_calib.qlib_adapter.model` (one model, ``fit``) and
:mod:`rolling_calib.qlib_adapter.stacked` (several seeds as one stack, ``fit_stack``) both build
on this module and neither imports the other:

* ``LSTMModel``: Qlib's own network (``qlib.contrib.model.pytorch_lstm_ts.LSTMModel``);
* :class:`BatchFeed`: batches cut on the host and moved to the device (overlapped on a GPU);
* :class:`DeviceWindows`: a segment's bars, positions and labels moved to the device once, each
  batch's windows cut there by index (the GPU never waits for the host); :func:`plan_feed`
  chooses between the two (:data:`FEEDS`) and says why;
* :class:`EarlyStopping`: the best validation loss of a fit, its epoch and its weights;
* :class:`FitProgress`: a fit's epochs (and batches of long epochs) told to a plain callback
  (:data:`FitReport`; the runner's unit installs one to draw the console's per-unit line);
* :class:`LSTMCore`: the life cycle of one fit every model goes through, stacked or not: a fresh
  network for its seed (:meth:`~LSTMCore.new_network`), a fresh optimiser
  (:meth:`~LSTMCore.reset_for_fit`), the label scale of the training segment
  (:meth:`~LSTMCore.fit_scales`), and the record of the fit (:meth:`~LSTMCore.record_fit`).

Example
-------
>>> feed = BatchFeed(lambda lo: (np.zeros((2, 3), np.float32), np.arange(2.0)), [0, 2], device=torch.device("cpu"))
>>> [tuple(x.shape) for x, _ in feed]
[(2, 3), (2, 3)]
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from qlib.data.dataset.handler import DataHandlerLP
from qlib.log import get_module_logger
from qlib.model.base import Model

from rolling_calib.qlib_adapter.dataset import FEATURE_NAMES, MinuteTSDataset, MinuteWindowSampler

_CLOSE, _VOLUME = FEATURE_NAMES.index("close"), FEATURE_NAMES.index("volume")

__all__ = ["BATCH_REPORT_MIN", "EVAL_CHUNK", "FEEDS", "RESIDENT_MAX_BYTES", "RESIDENT_SHARE", "BatchFeed",
           "DeviceWindows", "EarlyStopping", "FitProgress", "FitReport", "LSTMCore", "LSTMModel", "epoch_bar",
           "plan_feed"]


def _import_qlib_lstm() -> type:
    """Import Qlib's LSTM network without its package's notes about optional models.

    ``qlib.contrib.model`` prints "ModuleNotFoundError. CatBoostModel are skipped ..." to
    stdout for every optional booster that is not installed; those lines say nothing about
    this model and would break ``--json`` output. Any other line is passed on to stderr.
    """
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        from qlib.contrib.model.pytorch_lstm_ts import LSTMModel as qlib_lstm
    for line in captured.getvalue().splitlines():
        if line.strip() and "skipped" not in line:
            print(line, file=sys.stderr)
    return qlib_lstm


LSTMModel = _import_qlib_lstm()

#: Samples scored per chunk when a whole segment is evaluated or predicted.
EVAL_CHUNK = 8192

_logger = get_module_logger("rolling_calib.qlib_adapter.model")


@dataclass
class EarlyStopping:
    """The best validation loss of a fit so far, its epoch and a copy of its weights.

    :meth:`step` records one epoch and says when ``patience`` epochs in a row did not improve
    on the best (``patience`` 0: never stop early).
    """

    patience: int
    loss: float = np.inf
    epoch: int = -1
    state: dict | None = None
    stale: int = 0

    def step(self, epoch: int, loss: float, snapshot: Callable[[], dict]) -> bool:
        """Record ``epoch``'s validation ``loss``; ``snapshot()`` gives the weights to keep when it is the best."""
        if loss < self.loss:
            self.loss, self.epoch, self.stale = loss, epoch, 0
            self.state = snapshot()
            return False
        self.stale += 1
        if self.patience and self.stale >= self.patience:
            _logger.info(f"early stop at epoch {epoch}")
            return True
        return False


#: What a fit given ``report`` calls: ``report(epoch=i, epochs=n, batch=j, batches=m)`` -- epoch ``i`` of ``n``
#: (1-based), ``j`` of its ``m`` batches done (0 when the epoch starts). A plain function: the runner's unit
#: passes one that forwards to the console's bars (:mod:`rolling_calib.execution.progress`).
FitReport = Callable[..., None]

#: Epochs of more batches than this report every batch too (the receiver decides how often it passes them on).
BATCH_REPORT_MIN = 50


class FitProgress:
    """A fit's epochs and, for epochs of more than :data:`BATCH_REPORT_MIN` batches, its batches, told to ``report``.

    With ``report`` None every method returns at once: no reporting, no cost. Reporting reads
    nothing the fit computes and draws no random numbers, so a fit's numbers are the same with
    and without it.

    Parameters
    ----------
    report : FitReport or None
    epochs : int
        Epochs planned (early stopping may end the fit sooner).
    batches : int
        Training batches per epoch, ``ceil(samples / batch_size)``.

    Examples
    --------
    >>> seen = []
    >>> fp = FitProgress(lambda **kw: seen.append((kw["epoch"], kw["batch"])), epochs=2, batches=60)
    >>> fp.epoch(0); fp.batch(1); fp.epoch(1)
    >>> seen
    [(1, 0), (1, 1), (2, 0)]
    >>> FitProgress(lambda **kw: seen.append(kw), epochs=2, batches=50).on_batch is None  # short epochs: no batches
    True
    """

    def __init__(self, report: FitReport | None, *, epochs: int, batches: int) -> None:
        self.report, self.epochs, self.batches = report, int(epochs), int(batches)
        self._epoch = 0
        #: What the training loop calls after batch ``j`` (1-based), or None: epochs too short to report batches.
        self.on_batch: Callable[[int], None] | None = (
            self.batch if report is not None and self.batches > BATCH_REPORT_MIN else None)

    def epoch(self, epoch: int) -> None:
        """Epoch ``epoch`` (0-based) starts."""
        self._epoch = epoch + 1
        if self.report is not None:
            self.report(epoch=self._epoch, epochs=self.epochs, batch=0, batches=self.batches)

    def batch(self, done: int) -> None:
        """``done`` batches of the current epoch are trained."""
        if self.report is not None:
            self.report(epoch=self._epoch, epochs=self.epochs, batch=int(done), batches=self.batches)


def epoch_bar(n_epochs: int, enabled: bool):
    """A tqdm bar over the epochs of one fit; shown only when ``enabled`` and stderr is a terminal."""
    from tqdm.auto import tqdm

    return tqdm(total=n_epochs, desc="fit", unit="epoch", leave=False, disable=None if enabled else True)


class BatchFeed:
    """Batches ``cut(start)`` for each of ``starts``, as tensors on ``device``, in order.

    On a GPU (``background`` None or True) a producer thread cuts the next ``depth`` batches
    into pinned (page-locked) host memory while the device computes the current one, and each
    batch is copied with ``non_blocking=True``: the CPU feed and the GPU overlap. On CPU the
    batches are cut when asked (``torch.from_numpy``, no copy): a second thread would only
    compete with the training thread for the worker's core. Either way the batches are the same
    (the tests compare both). An exception in the producer is raised in the consumer.

    Parameters
    ----------
    cut : callable
        ``cut(start) -> (x, y)`` NumPy arrays of one batch.
    starts : iterable
        Batch starts, in the order the batches are used.
    device : torch.device
    background : bool, optional
        Cut in a producer thread (default: on CUDA devices only).
    depth : int
        Batches cut ahead (background only).

    Attributes
    ----------
    wait_seconds : float
        Time the consumer spent waiting for a batch (the feed's stall; background only).

    Examples
    --------
    >>> feed = BatchFeed(lambda lo: (np.full((2, 3), lo, np.float32), np.arange(2.0)), range(0, 6, 3),
    ...                  device=torch.device("cpu"), background=True)
    >>> [float(x[0, 0]) for x, _ in feed]
    [0.0, 3.0]
    """

    _END = object()

    def __init__(self, cut: Callable[[int], tuple[np.ndarray, np.ndarray]], starts: Iterable[int], *,
                 device: torch.device, background: bool | None = None, depth: int = 2) -> None:
        self.cut, self.starts, self.device = cut, list(starts), torch.device(device)
        self.background = self.device.type == "cuda" if background is None else bool(background)
        self.depth = int(depth)
        self.wait_seconds = 0.0

    def _tensors(self, x: np.ndarray, y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        xt, yt = torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(np.ascontiguousarray(y))
        if self.device.type == "cuda":
            xt, yt = xt.pin_memory(), yt.pin_memory()
        return xt, yt

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if not self.background:
            for start in self.starts:
                xt, yt = self._tensors(*self.cut(start))
                yield xt.to(self.device), yt.to(self.device)
            return
        ready: queue.Queue = queue.Queue(maxsize=self.depth)
        stop = threading.Event()
        producer = threading.Thread(target=self._produce, args=(ready, stop), name="BatchFeed", daemon=True)
        producer.start()
        try:
            while True:
                t0 = time.perf_counter()
                item = ready.get()
                self.wait_seconds += time.perf_counter() - t0
                if item is self._END:
                    return
                if isinstance(item, BaseException):
                    raise item
                xt, yt = item
                yield xt.to(self.device, non_blocking=True), yt.to(self.device, non_blocking=True)
        finally:
            stop.set()
            while producer.is_alive():  # unblock a producer waiting on a full queue
                with contextlib.suppress(queue.Empty):
                    ready.get(timeout=0.01)
            producer.join()

    def _produce(self, ready: queue.Queue, stop: threading.Event) -> None:
        """Cut every batch into ``ready`` (then the end marker); an exception is handed over as the item."""
        try:
            for start in self.starts:
                if stop.is_set():
                    return
                item = self._tensors(*self.cut(start))
                while not stop.is_set():
                    with contextlib.suppress(queue.Full):
                        ready.put(item, timeout=0.05)
                        break
            item = self._END
        except BaseException as exc:  # handed to the consumer, which raises it
            item = exc
        while not stop.is_set():
            with contextlib.suppress(queue.Full):
                ready.put(item, timeout=0.05)
                return


#: A model's ``feed`` settings: ``"auto"`` (resident on a GPU when it fits the budget, else the host feed),
#: ``"resident"`` (:class:`DeviceWindows`, any device) or ``"host"`` (:class:`BatchFeed`). Same batches either way.
FEEDS = ("auto", "resident", "host")
#: The most device memory a fit's resident segments may take under ``feed: auto`` ...
RESIDENT_MAX_BYTES = 4 * 2**30
#: ... and at most this share of the device's free memory when the fit starts (units may share a GPU).
RESIDENT_SHARE = 0.25


class DeviceWindows:
    """A sampler's windows and labels kept on ``device``; a batch is cut there by index, with no host copy.

    The bars a segment's windows reach (per instrument: ``step_len - 1`` bars before its first
    sample to its last sample), the samples' positions in them and the labels are moved to the
    device once. :meth:`windows` then does on the device what
    :meth:`~rolling_calib.qlib_adapter.dataset.MinuteWindowSampler.batch` does on the host, with
    the same float32 operations in the same order::

        w[b, k] = values[max(pos[b] - (T-1) + k, first bar of pos[b]'s instrument)]
        w[:, :, :5] -= w[:, -1:, close];  w[:, :, volume] -= w[:, -1:, volume]
        w = nan_to_num(clip((w - center) / scale, -clip, clip), nan=0)

    so a batch is the host feed's, bit for bit (tested on CPU; on a GPU the same IEEE operations).

    Parameters
    ----------
    sampler : MinuteWindowSampler
    device : torch.device
    labels : ndarray, optional
        The labels the batches carry, float32, ``(n,)`` or ``(members, n)`` in sample order
        (e.g. each member's standardised label); None: windows only (prediction).

    Examples
    --------
    >>> from rolling_calib.qlib_adapter.synthetic_panel import panel_dataset, random_walk_panel
    >>> s = panel_dataset(random_walk_panel(instruments=2, days=10), step_len=20).prepare("train")
    >>> dw = DeviceWindows(s, torch.device("cpu"), labels=s.labels)
    >>> idx = np.array([5, 0, 17])
    >>> bool((dw.windows(torch.as_tensor(idx)).numpy() == s.batch(idx)[0]).all())
    True
    """

    def __init__(self, sampler: MinuteWindowSampler, device: torch.device, labels: np.ndarray | None = None) -> None:
        rows, pos, first = self._layout(sampler)
        t = sampler.step_len
        self.device, self.step_len, self.n = torch.device(device), t, len(sampler)
        self.values = torch.from_numpy(np.ascontiguousarray(sampler.panel.values[rows])).to(self.device)
        self.pos = torch.from_numpy(pos).to(self.device)
        self.first = torch.from_numpy(first).to(self.device)
        self.offsets = torch.arange(-(t - 1), 1, dtype=torch.int64, device=self.device)
        self.center = torch.from_numpy(np.ascontiguousarray(sampler.norm.center[-t:])).to(self.device)
        self.scale = torch.from_numpy(np.ascontiguousarray(sampler.norm.scale[-t:])).to(self.device)
        self.clip = float(sampler.norm.clip)
        self.labels = None if labels is None else torch.from_numpy(np.ascontiguousarray(labels)).to(self.device)

    @staticmethod
    def _layout(sampler: MinuteWindowSampler) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Panel rows to keep, each sample's position among them, and its instrument's first kept row.

        Per instrument ``i``: rows ``lo_i .. hi_i`` with ``lo_i = max(first bar of i, min pos - (T-1))``.
        A window clamps at its instrument's first loaded bar; when ``lo_i`` is later than that bar no
        window of the segment reaches before ``lo_i``, so clamping at the kept first row is the same.
        """
        positions, n_min, t = sampler.positions, sampler.panel.n_minutes, sampler.step_len
        if len(positions) == 0:
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, empty
        inst = positions // n_min
        order = np.unique(inst)
        lo = np.full(order.max() + 1, np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(order.max() + 1, -1, dtype=np.int64)
        np.minimum.at(lo, inst, positions)
        np.maximum.at(hi, inst, positions)
        lo, hi = np.maximum(order * n_min, lo[order] - (t - 1)), hi[order]
        sizes = hi - lo + 1
        start = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        rows = np.concatenate([np.arange(a, b + 1, dtype=np.int64) for a, b in zip(lo, hi)])
        k = np.searchsorted(order, inst)
        return rows, positions - lo[k] + start[k], start[k]

    @staticmethod
    def nbytes(sampler: MinuteWindowSampler, label_rows: int = 1) -> int:
        """Device bytes a :class:`DeviceWindows` of ``sampler`` takes (bars, positions, labels)."""
        rows = len(DeviceWindows._layout(sampler)[0])
        return rows * sampler.panel.values.shape[1] * 4 + len(sampler) * (16 + 4 * label_rows)

    def windows(self, idx: torch.Tensor) -> torch.Tensor:
        """Normalised windows ``(len(idx), step_len, 6)`` float32 of samples ``idx`` (a long tensor on the device)."""
        pos, first = self.pos[idx], self.first[idx]
        w = self.values[torch.maximum(pos[:, None] + self.offsets, first[:, None])]
        last = w[:, -1:, :].clone()
        w[:, :, :5] -= last[:, :, _CLOSE : _CLOSE + 1]
        w[:, :, _VOLUME] -= last[:, :, _VOLUME]
        w -= self.center
        w /= self.scale
        w.clamp_(-self.clip, self.clip)
        return torch.nan_to_num_(w, nan=0.0)


def plan_feed(setting: str, device: torch.device, samplers: Iterable[MinuteWindowSampler], *,
              label_rows: int = 1) -> dict:
    """Which feed a fit on ``samplers`` uses, and why: ``{"mode": "resident" | "host", ...}`` (kept in the sidecar).

    ``setting`` is one of :data:`FEEDS`. ``auto``: resident on a CUDA device when the segments'
    :meth:`DeviceWindows.nbytes` fit ``min(RESIDENT_MAX_BYTES, RESIDENT_SHARE x free device
    memory)``; the host feed on CPU (the worker's own thread cuts batches; nothing to overlap) and
    for larger segments.

    >>> plan_feed("auto", torch.device("cpu"), [])["mode"]
    'host'
    >>> plan_feed("fast", torch.device("cpu"), [])
    Traceback (most recent call last):
    ...
    ValueError: feed: expected one of ('auto', 'resident', 'host'), found 'fast'
    """
    if setting not in FEEDS:
        raise ValueError(f"feed: expected one of {FEEDS}, found {setting!r}")
    need = int(sum(DeviceWindows.nbytes(s, label_rows) for s in samplers if not s.empty))
    plan = {"setting": setting, "bytes": need}
    if setting != "auto":
        return {"mode": setting, **plan, "reason": "set"}
    if device.type != "cuda":
        return {"mode": "host", **plan, "reason": "auto: not a GPU"}
    free, _ = torch.cuda.mem_get_info(device)
    budget = int(min(RESIDENT_MAX_BYTES, RESIDENT_SHARE * free))
    fits = need <= budget
    return {"mode": "resident" if fits else "host", **plan, "budget_bytes": budget,
            "reason": f"auto: {need / 2**20:.0f} MiB {'within' if fits else 'over'} the budget {budget / 2**20:.0f} MiB"}


class LSTMCore(Model):
    """The steps of one fit shared by ``RollingLSTM.fit`` and the seed stack (:func:`~rolling_calib.qlib_adapter.stacked.fit_stack`).

    A base class: the attributes these methods read are set by
    :class:`~rolling_calib.qlib_adapter.model.RollingLSTM`'s constructor (``d_feat``,
    ``hidden_size``, ``num_layers``, ``dropout``, ``seed``, ``device``, ``n_threads``,
    ``optimizer``, ``lr``, ``weight_decay``, ``finetune_epochs``, ``n_epochs`` and the fit state)
    and its :meth:`hyperparameters`.
    """

    def hyperparameters(self) -> dict:  # pragma: no cover - every model built on the core defines it
        """The constructor's keyword arguments (what a checkpoint records; the stack compares them)."""
        raise NotImplementedError

    def apply_threads(self) -> None:
        """``torch.set_num_threads(n_threads)`` (when set) and deterministic kernels (process-wide).

        CPU: any non-deterministic kernel raises. CUDA: cuBLAS is deterministic only with a fixed
        workspace (``CUBLAS_WORKSPACE_CONFIG=:4096:8``, set here unless the user set it, before the
        process's first cuBLAS call), cuDNN's deterministic algorithms are chosen, and a kernel with no
        deterministic implementation warns instead of raising. Without the workspace setting a CUDA fit
        after a CPU fit in one process raised (``use_deterministic_algorithms`` is process-wide).
        """
        if self.n_threads is not None:
            torch.set_num_threads(self.n_threads)
        if self.device.type == "cuda":
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
            torch.use_deterministic_algorithms(True, warn_only=True)
        else:
            # CPU kernels used here are deterministic; this makes any non-deterministic one raise.
            torch.use_deterministic_algorithms(True)

    def new_network(self) -> None:
        """A freshly initialised network: the same weights for the same ``seed``."""
        torch.manual_seed(self.seed)
        self.lstm_model = LSTMModel(d_feat=self.d_feat, hidden_size=self.hidden_size,
                                    num_layers=self.num_layers, dropout=self.dropout).to(self.device)

    def make_optimizer(self, params: Iterable[torch.nn.Parameter] | None = None, *,
                       capturable: bool = False) -> torch.optim.Optimizer:
        """This model's optimiser over ``params`` (default: its network's parameters).

        ``capturable``: Adam's and AdamW's step count kept on the device, so that a CUDA graph can
        capture the step (PyTorch's ``capturable=True``; the same update, its bias correction
        computed on the device in float32). SGD keeps no step count and needs nothing.
        """
        params = self.lstm_model.parameters() if params is None else params
        if self.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.lr, weight_decay=self.weight_decay, capturable=capturable)
        if self.optimizer == "adamw":
            return torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay, capturable=capturable)
        return torch.optim.SGD(params, lr=self.lr, weight_decay=self.weight_decay)

    def fit_segments(self, dataset: MinuteTSDataset, reweighter: Any) -> tuple[MinuteWindowSampler, MinuteWindowSampler]:
        """Check :meth:`fit`'s arguments; the ``train`` (not empty) and ``valid`` samples."""
        if reweighter is not None:
            raise ValueError("reweighter: RollingLSTM does not support sample reweighting; pass None")
        if not isinstance(dataset, MinuteTSDataset):
            raise ValueError(f"dataset: expected a rolling_calib.qlib_adapter.dataset.MinuteTSDataset, found {type(dataset).__name__}")
        self.apply_threads()
        # Qlib's convention: a model learns from the handler's learn data (learn-processed labels)
        train = dataset.prepare("train", data_key=DataHandlerLP.DK_L)
        valid = dataset.prepare("valid", data_key=DataHandlerLP.DK_L)
        if train.empty:
            raise ValueError(f"dataset segment 'train' = {dataset.segments.get('train')}: expected labelled bars, found none")
        if self.d_feat != len(FEATURE_NAMES):
            raise ValueError(f"d_feat: the minute dataset has {len(FEATURE_NAMES)} channels per bar "
                             f"{list(FEATURE_NAMES)}, found d_feat={self.d_feat}")
        return train, valid

    def reset_for_fit(self, warm: bool) -> int:
        """A fresh network unless warm-started, always a fresh optimiser; the epochs this fit runs.

        Fine-tuning starts the optimiser (Adam's moments) anew, as documented.
        """
        if not warm:
            self.new_network()
            self.epochs_trained = 0
        self.train_optimizer = self.make_optimizer()
        return self.finetune_epochs if warm else self.n_epochs

    def fit_scales(self, train: MinuteWindowSampler) -> None:
        """Normalisation refitted on this window's training segment.

        Features: the handler's norm (fitted on its fit range); label scale (``label_scaling:
        standardise``, the default): mean and std of the train labels (a zero std becomes 1); with
        ``label_scaling: none`` the network learns the label as it is (mean 0, scale 1), so its
        output bias is the label's own level, learned from scratch by every seed.
        """
        self.norm = train.norm
        if getattr(self, "label_scaling", "standardise") == "none":
            self.label_mean, self.label_std = 0.0, 1.0
            return
        y = train.labels.astype(np.float64)
        self.label_mean = float(np.mean(y))
        std = float(np.std(y))
        self.label_std = std if std > 0 else 1.0

    def record_fit(self, *, warm: bool, n_epochs: int, hist: dict[str, list[float]], stopping: EarlyStopping,
                   n_train: int, n_valid: int, t0: float) -> None:
        """Count the fit (epochs, fits) and describe it in :attr:`last_fit_info`."""
        use_valid = n_valid > 0
        epochs_run = len(hist["train"])
        self.epochs_trained += epochs_run
        self.fit_count += 1
        self.fitted = True
        self.warm_started = False
        self.last_fit_info = {
            "seed": self.seed,
            "warm_start": warm,
            "epochs_planned": n_epochs,
            "epochs_run": epochs_run,
            "best_epoch": stopping.epoch if use_valid else epochs_run - 1,
            "early_stopping": "on" if use_valid else "off: empty valid segment",
            "best_valid_loss": float(stopping.loss) if use_valid else None,
            "train_loss": hist["train"],
            "valid_loss": hist["valid"],
            "n_train": n_train,
            "n_valid": n_valid,
            "label_mean": self.label_mean,
            "label_std": self.label_std,
            "fit_seconds": round(time.perf_counter() - t0, 3),
            "device": str(self.device),
        }

    def standardise(self, y: np.ndarray) -> np.ndarray:
        """The label as the network learns it: ``(y - label_mean) / label_std`` (the training segment's scale)."""
        return (y - self.label_mean) / self.label_std
