"""A Qlib-compatible LSTM return predictor for rolling retraining.

:class:`RollingLSTM` is a :class:`qlib.model.base.Model` built around Qlib's own
network (``qlib.contrib.model.pytorch_lstm_ts.LSTMModel``: a stacked LSTM and a
linear head on the last step). The steps of a fit it shares with the seed stack
(:mod:`rolling_calib.qlib_adapter.stacked`) are :class:`~rolling_calib.qlib_adapter.lstm_core.LSTMCore`'s. A workflow YAML names it by
``module_path: rolling_calib.qlib_adapter.model`` / ``class: RollingLSTM`` and Qlib's
``init_instance_by_config`` builds it; it keeps Qlib's ``fit(dataset)`` /
``predict(dataset)`` contract on :class:`rolling_calib.qlib_adapter.dataset.MinuteTSDataset`.

Differences from Qlib's ``LSTM`` (each one deliberate):

* **Unknown keyword arguments are rejected** (``TypeError`` naming them); Qlib's
  silently swallows them, so e.g. ``weight_decay`` had no effect there.
* **weight_decay** is the L2 coefficient handed to the optimiser
  (``torch.optim.Adam(..., weight_decay=wd)`` adds ``wd * w`` to every gradient).
* **Warm start**: :meth:`load_state` loads a previous window's checkpoint; the next
  :meth:`fit` then fine-tunes for ``finetune_epochs`` (fresh optimiser state)
  instead of training ``n_epochs`` from a fresh initialisation.
* **One recorded seed** drives initialisation (``torch.manual_seed(seed)``), dropout and
  the shuffling of training samples (``numpy.random.default_rng([seed, fit_count])``); on
  CPU the same seed (and the same ``n_threads``) gives bit-identical predictions, also in
  another process (``torch.use_deterministic_algorithms(True)`` is switched on for CPU
  models). On GPU, cuDNN's LSTM is not bit-reproducible; results agree to rounding.
* **Early stopping never crashes**: the validation part is scored in full, in
  chunks (no ``drop_last``), so a valid part smaller than one batch works; with an
  empty valid part early stopping is off and the last epoch is kept.
* **Label scale**: the network learns a standardised label
  ``(y - mean) / std`` (stats of the training segment), and :meth:`predict` returns
  ``mean + std * output`` -- predictions are in the label's units (basis points; the learned
  label's units when the handler has ``learn_processors``: the model trains and early-stops on
  ``dataset.prepare(..., data_key=DK_L)``, as Qlib's models do).

Loss: mean squared error on the standardised label,
``L = mean_i (f(x_i) - (y_i - m) / s)^2`` (+ the optimiser's L2 term).

Usage (needs a Qlib minute store; ``tests/qlib_adapter/test_model_lstm.py`` runs it on a tiny one)::

    model = RollingLSTM(hidden_size=16, num_layers=1, n_epochs=2, seed=3)
    model.fit(dataset)
    pred = model.predict(dataset)          # Series, index (datetime, instrument), bp
    model.save_state("w00.pt")

Examples
--------
>>> RollingLSTM(hidden_size=0)
Traceback (most recent call last):
...
ValueError: hidden_size: expected an integer in [1, 16384] (units: memory grows with its square), found int 0
"""

from __future__ import annotations

import copy
import io
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from qlib.log import get_module_logger

from data_prep.atomic import atomic_write_bytes
from rolling_calib.core.validation import (BATCH, EPOCHS, FEATURES, LAYERS, SEED, THREADS, WIDTH, AnyOf, Constraint,
                                           Interval, Options, validate_params)
from rolling_calib.qlib_adapter.dataset import MinuteTSDataset, MinuteWindowSampler, WindowNorm
from rolling_calib.qlib_adapter.lstm_core import (
    EVAL_CHUNK,
    BatchFeed,
    DeviceWindows,
    EarlyStopping,
    FitProgress,
    FitReport,
    LSTMCore,
    epoch_bar,
    plan_feed,
)


__all__ = ["RollingLSTM", "STATE_FORMAT"]

#: Version tag written into every checkpoint.
STATE_FORMAT = "rolling_calib.RollingLSTM/1"
_ARCH_KEYS = ("d_feat", "hidden_size", "num_layers")
_OPTIMIZERS = ("adam", "adamw", "sgd", "gd")
_LOSSES = ("mse",)
#: ``label_scaling``: standardise the label with the training segment's mean and std (default), or learn it as it is.
LABEL_SCALINGS = ("standardise", "none")


@dataclass(frozen=True)
class _AnyCase(Constraint):
    """A string naming one of ``options`` in any letter case (``"Adam"`` is ``"adam"``, as in Qlib)."""

    options: Options

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and self.options.accepts(value.lower())

    def describe(self) -> str:
        return self.options.describe() + " (any case)"


#: Declared constraints of the constructor's options (checked in this order before the body runs).
class _Device(Constraint):
    """``'cpu'``, ``'auto'``, or ``'cuda'`` / ``'cuda:N'`` when torch sees a GPU (checked before any training)."""

    def accepts(self, value: Any) -> bool:
        if value in ("cpu", "auto"):
            return True
        if not isinstance(value, str) or not (value == "cuda" or value.startswith("cuda:") and value[5:].isdigit()):
            return False
        return torch.cuda.is_available() and (value == "cuda" or int(value[5:]) < torch.cuda.device_count())

    def describe(self) -> str:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        seen = f"torch sees {gpus} GPU(s) here" if gpus else "torch sees no GPU here (torch.cuda.is_available() is False)"
        return f"a device name: 'cpu', 'auto', 'cuda' or 'cuda:N' ({seen})"


_PARAMS: dict[str, Constraint] = {
    "d_feat": FEATURES,
    "hidden_size": WIDTH,
    "num_layers": LAYERS,
    "n_epochs": EPOCHS,
    "finetune_epochs": EPOCHS,
    "batch_size": BATCH,
    "early_stop": EPOCHS,
    "seed": SEED,
    "n_threads": AnyOf((Options(None), THREADS), what="an integer in [1, 1024] or None"),
    "dropout": Interval(float, 0, 1, closed="left"),
    "lr": Interval(float, 0, None, closed="neither"),
    "weight_decay": Interval(float, 0, None),
    "grad_clip": Interval(float, 0, None),
    "loss": Options(*_LOSSES),
    "optimizer": _AnyCase(Options(*_OPTIMIZERS)),
    "device": _Device(),
    "label_scaling": Options(*LABEL_SCALINGS),
}

_logger = get_module_logger("rolling_calib.qlib_adapter.model")


def _resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu" or device.startswith("cuda"):
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device: {device!r} requested but torch.cuda.is_available() is False")
        return torch.device(device)
    raise ValueError(f"device: expected 'cpu', 'cuda', 'cuda:N' or 'auto', found {device!r}")


class RollingLSTM(LSTMCore):
    """Qlib LSTM with L2, warm start, one seed, robust early stopping and bp-scale output.

    Parameters
    ----------
    d_feat : int
        Channels per bar (6: open, high, low, close, vwap, volume).
    hidden_size, num_layers, dropout :
        LSTM size (Qlib's ``LSTMModel``); ``dropout`` between layers.
    n_epochs : int
        Epochs when training from scratch.
    finetune_epochs : int
        Epochs of a warm-started fit (after :meth:`load_state`).
    lr : float
        Learning rate.
    batch_size : int
        Training batch size (samples).
    weight_decay : float
        L2 coefficient given to the optimiser (0 = none).
    early_stop : int
        Stop after this many epochs without a better validation loss (0 = never stop early).
    loss : {"mse"}
    optimizer : {"adam", "adamw", "sgd"} (``"gd"`` is an alias of ``"sgd"``)
    seed : int
        Seeds initialisation, dropout and shuffling.
    device : {"cpu", "cuda", "cuda:N", "auto"}
    n_threads : int, optional
        ``torch.set_num_threads`` for this process (the runner passes 1 per worker).
    grad_clip : float
        Gradients are clipped elementwise to ``[-grad_clip, grad_clip]`` (Qlib: 3.0; 0 = off).
    label_scaling : {"standardise", "none"}
        ``"standardise"`` (default): the network learns ``(y - mean) / std`` of the training segment;
        ``"none"``: the label as it is (its level is learned by the output bias of every seed).

    Attributes
    ----------
    lstm_model : qlib.contrib.model.pytorch_lstm_ts.LSTMModel
        The network.
    fitted, warm_started : bool
        ``warm_started`` is True between :meth:`load_state` and the next :meth:`fit`.
    norm : WindowNorm or None
        Feature normalisation the network was trained with (used by :meth:`predict`).
    label_mean, label_std : float
        Label scale (bp) of the last training segment; ``predict = mean + std * output``.
    epochs_trained, fit_count : int
        Epochs and fits behind the current weights, across warm-started windows.
    last_fit_info : dict
        Seed, warm start, epochs planned/run, best epoch, per-epoch losses, sample counts,
        label scale, wall time and device of the last :meth:`fit`, and its ``feed`` (the plan of
        :func:`~rolling_calib.qlib_adapter.lstm_core.plan_feed`; a seed stack adds ``stack``, its kernel).
    feed : {"auto", "resident", "host"}
        Where batches are cut: on the device from segments moved there once, or on the host
        (``"auto"``: resident on a GPU within the memory budget). Same batches, same numbers.
    stack_kernel : {"auto", "bmm", "streams"}
        The kernel a seed stack of this model uses (:func:`~rolling_calib.qlib_adapter.stacked.fit_stack`).
    stack_graph : bool
        On a GPU, the bmm kernel replays its training steps from a CUDA graph (default True).

    Example
    -------
    >>> m = RollingLSTM(hidden_size=8, num_layers=1, weight_decay=3e-6, seed=1)
    >>> m.train_optimizer.param_groups[0]["weight_decay"]
    3e-06
    >>> RollingLSTM(weight_decy=1e-4)
    Traceback (most recent call last):
    ...
    TypeError: RollingLSTM: unknown keyword argument(s) ['weight_decy']; expected any of d_feat, hidden_size, num_layers, dropout, n_epochs, finetune_epochs, lr, batch_size, weight_decay, early_stop, loss, optimizer, seed, device, n_threads, grad_clip, label_scaling
    """

    @validate_params(_PARAMS)
    def __init__(
        self,
        *,
        d_feat: int = 6,
        hidden_size: int = 64,
        num_layers: int = 2,
        dropout: float = 0.0,
        n_epochs: int = 10,
        finetune_epochs: int = 2,
        lr: float = 1e-3,
        batch_size: int = 2000,
        weight_decay: float = 0.0,
        early_stop: int = 5,
        loss: str = "mse",
        optimizer: str = "adam",
        seed: int = 0,
        device: str = "cpu",
        n_threads: int | None = None,
        grad_clip: float = 3.0,
        label_scaling: str = "standardise",
        **unknown: Any,
    ):
        if unknown:
            raise TypeError(
                f"RollingLSTM: unknown keyword argument(s) {sorted(unknown)}; expected any of "
                "d_feat, hidden_size, num_layers, dropout, n_epochs, finetune_epochs, lr, batch_size, "
                "weight_decay, early_stop, loss, optimizer, seed, device, n_threads, grad_clip, label_scaling"
            )
        # the values were checked against _PARAMS by @validate_params
        self.d_feat = int(d_feat)
        self.hidden_size = int(hidden_size)
        self.num_layers = int(num_layers)
        self.dropout = float(dropout)
        self.n_epochs = int(n_epochs)
        self.finetune_epochs = int(finetune_epochs)
        self.lr = float(lr)
        self.batch_size = int(batch_size)
        self.weight_decay = float(weight_decay)
        self.early_stop = int(early_stop)
        self.loss = loss
        self.optimizer = str(optimizer).lower()
        self.seed = int(seed)
        self.device_name = device
        self.n_threads = n_threads
        self.grad_clip = float(grad_clip)
        self.label_scaling = label_scaling
        self.device = _resolve_device(device)
        self.apply_threads()
        self.new_network()
        self.fitted = False
        self.warm_started = False
        self.norm: WindowNorm | None = None
        self.label_mean = 0.0
        self.label_std = 1.0
        self.epochs_trained = 0  # over the whole life of the weights (all windows)
        self.fit_count = 0
        self.last_fit_info: dict = {}
        self.train_optimizer = self.make_optimizer()
        #: Cut batches in a background thread (None: on CUDA only; see :class:`BatchFeed`). Same batches either way.
        self.feed_background: bool | None = None
        #: Where batches are cut (:data:`~rolling_calib.qlib_adapter.lstm_core.FEEDS`; :func:`plan_feed` decides
        #: ``"auto"``). Not a constructor argument: it changes no number, only where the work is done.
        self.feed: str = "auto"
        #: The seed stack's kernel (``"auto"``, ``"bmm"``, ``"streams"``; :mod:`rolling_calib.qlib_adapter.stacked`).
        self.stack_kernel: str = "auto"
        #: On a GPU, replay the bmm kernel's training steps from a CUDA graph (False: eager steps, the same kernels).
        self.stack_graph: bool = True

    # ------------------------------------------------------------------ configuration
    def hyperparameters(self) -> dict:
        """The constructor's keyword arguments (what a checkpoint records)."""
        return {
            "d_feat": self.d_feat, "hidden_size": self.hidden_size, "num_layers": self.num_layers,
            "dropout": self.dropout, "n_epochs": self.n_epochs, "finetune_epochs": self.finetune_epochs,
            "lr": self.lr, "batch_size": self.batch_size, "weight_decay": self.weight_decay,
            "early_stop": self.early_stop, "loss": self.loss, "optimizer": self.optimizer, "seed": self.seed,
            "device": self.device_name, "n_threads": self.n_threads, "grad_clip": self.grad_clip,
            "label_scaling": self.label_scaling,
        }

    # ------------------------------------------------------------------ training
    def _forward(self, x: np.ndarray) -> torch.Tensor:
        xt = torch.from_numpy(x).to(self.device, non_blocking=True)
        return self.lstm_model(xt).reshape(-1)

    def resident(self, sampler: MinuteWindowSampler) -> DeviceWindows:
        """``sampler``'s windows on this model's device, with its labels as the network learns them."""
        return DeviceWindows(sampler, self.device, labels=self.standardise(sampler.labels))

    def _eval_loss(self, sampler: MinuteWindowSampler, resident: DeviceWindows | None = None) -> float:
        """Mean squared error (standardised label) over ALL samples, chunked; NaN if empty.

        The sum is kept on the device and read once at the end (no per-chunk synchronisation).
        With ``resident`` (``sampler`` on the device) the chunks are cut there.
        """
        if sampler.empty:
            return float("nan")
        self.lstm_model.eval()
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        chunk = max(self.batch_size, EVAL_CHUNK)
        with torch.inference_mode():
            for lo in range(0, len(sampler), chunk):
                hi = min(lo + chunk, len(sampler))
                if resident is not None:
                    idx = torch.arange(lo, hi, device=self.device)
                    pred, yt = self.lstm_model(resident.windows(idx)).reshape(-1), resident.labels[idx]
                else:
                    x, y = sampler.batch(np.arange(lo, hi))
                    pred = self._forward(x)
                    yt = torch.from_numpy(self.standardise(y)).to(self.device)
                total += ((pred - yt) ** 2).sum().double()
        return float(total) / len(sampler)

    def _batches(self, sampler: MinuteWindowSampler, order: np.ndarray,
                 resident: DeviceWindows | None) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        """The epoch's batches ``(x, y)`` on the device, in ``order``: cut there (``resident``) or by a :class:`BatchFeed`."""
        starts = range(0, len(order), self.batch_size)
        if resident is not None:
            order_t = torch.from_numpy(order).to(self.device)
            return ((resident.windows(idx), resident.labels[idx])
                    for idx in (order_t[lo : lo + self.batch_size] for lo in starts))

        def cut(lo: int) -> tuple[np.ndarray, np.ndarray]:
            x, y = sampler.batch(order[lo : lo + self.batch_size])
            return x, self.standardise(y)

        return BatchFeed(cut, starts, device=self.device, background=self.feed_background)

    def _train_epoch(self, sampler: MinuteWindowSampler, rng: np.random.Generator,
                     on_batch: Callable[[int], None] | None = None, resident: DeviceWindows | None = None) -> float:
        """One pass over ``sampler`` in a fresh random order; the mean training loss.

        Batches are cut on the device from ``resident`` (``sampler`` moved there once), else by a
        :class:`BatchFeed` (cut in a background thread while a GPU computes); the same batches
        either way. The loss is summed on the device and read once per epoch. ``on_batch(j)`` is
        called after batch ``j`` (1-based) when given (:attr:`FitProgress.on_batch`).
        """
        self.lstm_model.train()
        order = rng.permutation(len(sampler))
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        for done, (xt, yt) in enumerate(self._batches(sampler, order, resident), 1):
            pred = self.lstm_model(xt).reshape(-1)
            loss = torch.mean((pred - yt) ** 2)
            self.train_optimizer.zero_grad()
            loss.backward()
            if self.grad_clip > 0:
                torch.nn.utils.clip_grad_value_(self.lstm_model.parameters(), self.grad_clip)
            self.train_optimizer.step()
            total += loss.detach().double() * len(yt)
            if on_batch is not None:
                on_batch(done)
        return float(total) / max(len(order), 1)

    def fit(
        self,
        dataset: MinuteTSDataset,
        evals_result: dict | None = None,
        reweighter: Any = None,
        *,
        progress: bool = False,
        report: FitReport | None = None,
    ) -> "RollingLSTM":
        """Train on ``dataset``'s ``train`` segment, early-stopping on ``valid``.

        From scratch: ``n_epochs`` epochs from the seed's initialisation. Warm-started
        (after :meth:`load_state`): ``finetune_epochs`` epochs from the loaded weights.
        The best epoch by validation loss is kept (the last one if ``valid`` is empty).

        Parameters
        ----------
        dataset : MinuteTSDataset
        evals_result : dict, optional
            Filled with ``"train"`` and ``"valid"`` lists of per-epoch losses (standardised MSE).
        reweighter : None
            Not supported (accepted for Qlib's signature; anything but None raises).
        progress : bool
            A tqdm bar over the epochs (shown on a terminal only; off by default).
        report : FitReport, optional
            Called with each epoch, and each batch of epochs over
            :data:`~rolling_calib.qlib_adapter.lstm_core.BATCH_REPORT_MIN` batches
            (:class:`~rolling_calib.qlib_adapter.lstm_core.FitProgress`); the numbers do not change.

        Returns
        -------
        self
        """
        t0 = time.perf_counter()
        train, valid = self.fit_segments(dataset, reweighter)
        warm = self.warm_started
        n_epochs = self.reset_for_fit(warm)
        if n_epochs > 0 or not warm:
            # A warm start with 0 epochs leaves the network untouched: it keeps the statistics it was trained with.
            self.fit_scales(train)
        tracker = FitProgress(report, epochs=n_epochs, batches=-(-len(train) // self.batch_size))
        feed = plan_feed(self.feed, self.device, [train, valid])
        residents = ((self.resident(train), None if valid.empty else self.resident(valid))
                     if feed["mode"] == "resident" else (None, None))
        hist, stopping = self._train_epochs(train, valid, n_epochs, progress=progress, tracker=tracker,
                                            residents=residents)
        del residents
        self.record_fit(warm=warm, n_epochs=n_epochs, hist=hist, stopping=stopping,
                        n_train=len(train), n_valid=len(valid), t0=t0)
        self.last_fit_info["feed"] = feed
        if evals_result is not None:
            evals_result.update(hist)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        return self

    def _train_epochs(
        self, train: MinuteWindowSampler, valid: MinuteWindowSampler, n_epochs: int, *, progress: bool,
        tracker: FitProgress | None = None,
        residents: tuple[DeviceWindows | None, DeviceWindows | None] = (None, None),
    ) -> tuple[dict[str, list[float]], EarlyStopping]:
        """Up to ``n_epochs`` epochs, early-stopping on ``valid``; the best epoch's weights are restored.

        Shuffling draws from ``default_rng([seed, fit_count])``, dropout from the torch seed
        ``seed + 7919 * (fit_count + 1)``: every fit of a unit has its own reproducible streams.
        ``residents``: ``train`` and ``valid`` on the device (:class:`DeviceWindows`), or None each.
        """
        rng = np.random.default_rng([self.seed, self.fit_count])
        torch.manual_seed(self.seed + 7919 * (self.fit_count + 1))  # dropout stream of this fit
        hist: dict[str, list[float]] = {"train": [], "valid": []}
        stopping = EarlyStopping(patience=self.early_stop)
        tracker = tracker or FitProgress(None, epochs=n_epochs, batches=0)
        with epoch_bar(n_epochs, progress) as bar:
            for epoch in range(n_epochs):
                tracker.epoch(epoch)
                tr, va = self._epoch(train, valid, rng, epoch, on_batch=tracker.on_batch, residents=residents)
                hist["train"].append(tr)
                hist["valid"].append(va)
                bar.set_postfix(train=f"{tr:.4g}", valid=f"{va:.4g}", refresh=False)
                bar.update()
                if not valid.empty and stopping.step(epoch, va, lambda: copy.deepcopy(self.lstm_model.state_dict())):
                    break
        if stopping.state is not None:
            self.lstm_model.load_state_dict(stopping.state)
        return hist, stopping

    def _epoch(self, train: MinuteWindowSampler, valid: MinuteWindowSampler, rng: np.random.Generator,
               epoch: int, *, on_batch: Callable[[int], None] | None = None,
               residents: tuple[DeviceWindows | None, DeviceWindows | None] = (None, None)) -> tuple[float, float]:
        """One training epoch; its mean training loss and the validation loss after it (NaN if none)."""
        tr = self._train_epoch(train, rng, on_batch, resident=residents[0])
        va = self._eval_loss(valid, resident=residents[1])
        if not np.isfinite(tr):
            raise FloatingPointError(
                f"RollingLSTM.fit: training loss became {tr} at epoch {epoch} (seed {self.seed}, lr {self.lr}); "
                "expected a finite loss -- lower lr or check the data"
            )
        _logger.info(f"epoch {epoch}: train {tr:.6f} valid {va:.6f}")
        return tr, va

    # ------------------------------------------------------------------ inference
    def predict(self, dataset: MinuteTSDataset, segment: str | slice = "test") -> pd.Series:
        """Predictions in basis points, index ``(datetime, instrument)``, rows/order of ``dataset.labels(segment)``.

        Windows are normalised with the statistics this model was trained with, and cut on the
        device when :attr:`feed` makes the segment resident (:func:`plan_feed`; the same numbers).
        """
        if not self.fitted:
            raise ValueError("RollingLSTM.predict: the model is not fitted yet (call fit or load_state first)")
        sampler = dataset.prepare(segment)
        if self.norm is not None:
            sampler = sampler.with_norm(self.norm)
        out = np.empty(len(sampler), dtype=np.float64)
        self.lstm_model.eval()
        chunk = max(self.batch_size, EVAL_CHUNK)
        resident = (DeviceWindows(sampler, self.device)
                    if plan_feed(self.feed, self.device, [sampler], label_rows=0)["mode"] == "resident" else None)
        with torch.inference_mode():
            for lo in range(0, len(sampler), chunk):
                hi = min(lo + chunk, len(sampler))
                if resident is not None:
                    pred = self.lstm_model(resident.windows(torch.arange(lo, hi, device=self.device))).reshape(-1)
                else:
                    pred = self._forward(sampler.batch(np.arange(lo, hi))[0])
                out[lo:hi] = pred.double().cpu().numpy()
        pred = self.label_mean + self.label_std * out
        return pd.Series(pred, index=sampler.get_index(), name="score")

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict:
        """Everything a checkpoint holds (weights on CPU, normalisation, label scale, metadata)."""
        return {
            "format": STATE_FORMAT,
            "weights": {k: v.detach().cpu() for k, v in self.lstm_model.state_dict().items()},
            "norm": None if self.norm is None else self.norm.to_dict(),
            "label_mean": self.label_mean,
            "label_std": self.label_std,
            "meta": {
                "seed": self.seed,
                "epochs_trained": self.epochs_trained,
                "fit_count": self.fit_count,
                "kwargs": self.hyperparameters(),
                "last_fit": {k: v for k, v in self.last_fit_info.items()},
                "torch": str(torch.__version__),
            },
        }

    def save_state(self, path: str | os.PathLike) -> None:
        """Write the checkpoint atomically (temp file in the same directory, then ``os.replace``).

        The state is serialised in memory and written with Python's file I/O, so a full disk is an
        ``OSError`` with its error code (``torch.save`` to a file says only ``iostream error``), and
        the bytes do not depend on the temporary file's name (the same state gives the same file).
        """
        if not self.fitted:
            raise ValueError("RollingLSTM.save_state: the model is not fitted yet; nothing to save")
        buffer = io.BytesIO()
        torch.save(self.state(), buffer)
        atomic_write_bytes(path, buffer.getvalue())

    def load_state(self, path: str | os.PathLike) -> None:
        """Load a checkpoint written by :meth:`save_state`; the next :meth:`fit` fine-tunes.

        Raises ``ValueError`` naming the file when it is not such a checkpoint or its
        architecture (``d_feat``, ``hidden_size``, ``num_layers``) differs from this model's.
        """
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"{path}: expected a RollingLSTM checkpoint file, found nothing there")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # re-raised with the file named
            raise ValueError(f"{path}: expected a RollingLSTM checkpoint (torch.save), could not read it: {exc}") from exc
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            found = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"{path}: expected checkpoint format {STATE_FORMAT!r}, found {found!r}")
        saved = state["meta"]["kwargs"]
        mine = self.hyperparameters()
        diff = {k: (saved.get(k), mine[k]) for k in _ARCH_KEYS if saved.get(k) != mine[k]}
        if diff:
            raise ValueError(f"{path}: architecture differs from this model (checkpoint, model): {diff}")
        self.lstm_model.load_state_dict(state["weights"])
        self.lstm_model.to(self.device)
        self.norm = None if state["norm"] is None else WindowNorm.from_dict(state["norm"])
        self.label_mean = float(state["label_mean"])
        self.label_std = float(state["label_std"])
        self.epochs_trained = int(state["meta"]["epochs_trained"])
        self.fit_count = int(state["meta"]["fit_count"])
        self.fitted = True
        self.warm_started = True
