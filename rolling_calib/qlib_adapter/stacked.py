"""Seed-stacked training: the K seeds of one (pipeline, window) as one batched computation.

The seeds of a configuration are independent networks of the same shape. :class:`StackedLSTM`
holds the weights of K copies of Qlib's ``LSTMModel`` (a stacked LSTM and a linear head on the
last step) as tensors with a leading seed axis and runs them together: per layer, one batched
matrix product projects every time step's input (``baddbmm`` over the K members), then one
batched product per time step adds the recurrent term; the gates follow PyTorch's ``nn.LSTM``
exactly (order i, f, g, o)::

    gates_t = x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh          (per member k, batched over k)
    c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g);   h_t = sigmoid(o) * tanh(c_t)
    output = h_T W_fc^T + b_fc

:func:`fit_stack` trains K :class:`~rolling_calib.qlib_adapter.model.RollingLSTM` models (same
hyperparameters, their own seeds) as one stack and leaves each model exactly as its own
``fit`` would: weights, normalisation, label scale, ``last_fit_info``. The steps of a fit both
share (a fresh network and optimiser, the label scale, the record of the fit, the batch feed,
early stopping) are :mod:`rolling_calib.qlib_adapter.lstm_core`'s, so this module and the
model's do not import each other. Each member keeps

* its own initialisation (each model builds Qlib's ``LSTMModel`` under its own seed, and the
  stack copies those weights),
* its own data order (``numpy.random.default_rng([seed, fit_count])``, one permutation per
  epoch, as the unstacked fit draws it),
* its own label standardisation, early stopping and epoch count; a member that stops is taken
  out of the stack (its weights and optimiser state rows are dropped), so the others carry on
  without computing it,
* its own dropout stream (a generator per member, seeded ``seed + 7919 * (fit_count + 1)``), so a
  member's numbers do not depend on which seeds share its stack.

The optimisers (Adam, AdamW, SGD), L2 weight decay and value clipping act elementwise, and the
stacked loss is the sum of the members' mean losses, so each member receives exactly its own
gradient: mathematically the stack is K independent fits. Numerically it is not bit-identical to
the unstacked ``RollingLSTM.fit`` (``nn.LSTM``'s kernel sums in another order); the two agree to
float rounding at the first step, and the tests compare their predictions to a tolerance. The
unstacked path is the reference; the stacked path is itself deterministic on CPU (same seeds
and stack size -> the same bits).

Where it wins: stacking shares the per-step overheads and fills a GPU that one small LSTM
leaves idle; on CPU with one thread per worker the work is throughput-bound and the hand-written
cell is slower than ``nn.LSTM``'s fused one (``bench/bench_stacked.py`` prints both).

Examples
--------
>>> import torch
>>> from rolling_calib.qlib_adapter.lstm_core import LSTMModel
>>> members = []
>>> for seed in (0, 1, 2):
...     _ = torch.manual_seed(seed)
...     members.append(LSTMModel(d_feat=6, hidden_size=8, num_layers=2))
>>> stack = StackedLSTM(members)
>>> x = torch.randn(3, 5, 10, 6)                      # (members, batch, steps, features)
>>> out = stack(x)
>>> out.shape
torch.Size([3, 5])
>>> ref = torch.stack([m(x[k]).reshape(-1) for k, m in enumerate(members)])
>>> bool(torch.allclose(out, ref, atol=1e-6))
True
>>> sorted(stack.member_state_dict(1)) == sorted(members[1].state_dict())
True
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from rolling_calib.qlib_adapter.dataset import MinuteTSDataset, MinuteWindowSampler
from rolling_calib.qlib_adapter.lstm_core import (
    EVAL_CHUNK,
    BatchFeed,
    EarlyStopping,
    FitProgress,
    FitReport,
    LSTMCore,
    epoch_bar,
)

__all__ = ["StackedLSTM", "can_stack", "check_stackable", "fit_stack", "start_stack"]

#: Settings every member of a stack must share (the seed is what differs).
_SHARED_SETTINGS = ("d_feat", "hidden_size", "num_layers", "dropout", "lr", "batch_size", "weight_decay",
                    "early_stop", "loss", "optimizer", "device", "grad_clip", "n_epochs", "finetune_epochs")


class StackedLSTM(torch.nn.Module):
    """K independent copies of Qlib's ``LSTMModel`` (same shape) evaluated as one batched computation.

    Parameters
    ----------
    members : sequence of qlib.contrib.model.pytorch_lstm_ts.LSTMModel
        The networks to stack (their weights are copied; the members are not changed).

    Notes
    -----
    ``forward(x)`` takes ``x`` of shape ``(K, B, T, d_feat)`` (each member its own batch) or
    ``(B, T, d_feat)`` (one batch for every member) and returns ``(K, B)``. Parameters are named
    like the members' (``rnn.weight_ih_l0`` -> ``rnn__weight_ih_l0``) with a leading member axis.
    """

    def __init__(self, members: Sequence[torch.nn.Module]) -> None:
        super().__init__()
        if not members:
            raise ValueError("members: expected at least one network, found none")
        first = members[0]
        rnn = first.rnn
        if not (rnn.batch_first and not rnn.bidirectional and rnn.bias and getattr(rnn, "proj_size", 0) == 0):
            raise ValueError("members: expected Qlib LSTMModel networks (batch_first, one direction, with bias, no projection)")
        self.hidden_size, self.num_layers, self.dropout = rnn.hidden_size, rnn.num_layers, float(rnn.dropout)
        self.names = tuple(name for name, _ in first.named_parameters())
        shapes = {name: p.shape for name, p in first.named_parameters()}
        for k, member in enumerate(members):
            theirs = {name: p.shape for name, p in member.named_parameters()}
            if theirs != shapes:
                raise ValueError(f"members[{k}]: expected the shapes of members[0] {dict(shapes)}, found {theirs}")
        for name in self.names:
            stacked = torch.stack([dict(m.named_parameters())[name].detach() for m in members]).clone()
            self.register_parameter(self._key(name), torch.nn.Parameter(stacked))
        self.generators: list[torch.Generator] | None = None  # per-member dropout streams (set by fit_stack)

    @staticmethod
    def _key(name: str) -> str:
        return name.replace(".", "__")

    def weight(self, name: str) -> torch.nn.Parameter:
        """The stacked parameter of member parameter ``name`` (e.g. ``"rnn.weight_hh_l0"``), shape ``(K, ...)``."""
        return getattr(self, self._key(name))

    @property
    def n_members(self) -> int:
        """K, the number of members now in the stack."""
        return int(self.weight(self.names[0]).shape[0])

    def member_state_dict(self, k: int) -> dict[str, torch.Tensor]:
        """Member ``k``'s weights as an ``LSTMModel`` state dict (copies, on the stack's device)."""
        return {name: self.weight(name)[k].detach().clone() for name in self.names}

    def keep(self, rows: Sequence[int], optimizer: torch.optim.Optimizer | None = None) -> None:
        """Keep only members ``rows`` (in that order), in place; their optimiser state rows too.

        The parameters stay the same objects (their data is replaced), so ``optimizer`` keeps
        working; its per-element state (Adam's moments, SGD's momentum) is cut to the same rows.
        """
        index = torch.as_tensor(list(rows), dtype=torch.long, device=self.weight(self.names[0]).device)
        before = self.n_members
        for name in self.names:
            p = self.weight(name)
            p.data = p.data.index_select(0, index)
            p.grad = None
            if optimizer is not None:
                state = optimizer.state.get(p, {})
                for slot, value in list(state.items()):
                    if torch.is_tensor(value) and value.dim() > 0 and value.shape[0] == before:
                        state[slot] = value.index_select(0, index)
        if self.generators is not None:
            self.generators = [self.generators[i] for i in rows]

    def _dropout(self, seq: torch.Tensor) -> torch.Tensor:
        """Inverted dropout between layers, each member's mask from its own generator."""
        if not self.training or self.dropout == 0:
            return seq
        keep = 1.0 - self.dropout
        masks = []
        for k in range(seq.shape[0]):
            gen = None if self.generators is None else self.generators[k]
            masks.append(torch.empty(seq.shape[1:], device=seq.device, dtype=seq.dtype).bernoulli_(keep, generator=gen))
        return seq * torch.stack(masks) / keep

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Outputs ``(K, B)`` for inputs ``(K, B, T, F)`` or shared inputs ``(B, T, F)``."""
        k_members, hidden = self.n_members, self.hidden_size
        if x.dim() == 3:
            x = x.unsqueeze(0).expand(k_members, -1, -1, -1)
        _, batch, steps, _ = x.shape
        seq = x.transpose(1, 2)  # (K, T, B, F): one contiguous slab per time step after the projection
        h = x.new_zeros(k_members, batch, hidden)
        for layer in range(self.num_layers):
            w_ih, w_hh = self.weight(f"rnn.weight_ih_l{layer}"), self.weight(f"rnn.weight_hh_l{layer}")
            bias = (self.weight(f"rnn.bias_ih_l{layer}") + self.weight(f"rnn.bias_hh_l{layer}")).unsqueeze(1)
            projected = torch.baddbmm(bias, seq.reshape(k_members, steps * batch, -1), w_ih.transpose(1, 2))
            w_hh_t = w_hh.transpose(1, 2)
            h = x.new_zeros(k_members, batch, hidden)
            c = x.new_zeros(k_members, batch, hidden)
            outputs = []
            last = layer == self.num_layers - 1
            for step in projected.reshape(k_members, steps, batch, 4 * hidden).unbind(1):
                i, f, g, o = torch.baddbmm(step, h, w_hh_t).chunk(4, dim=-1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                if not last:
                    outputs.append(h)
            if not last:
                seq = self._dropout(torch.stack(outputs, dim=1))
        head = torch.baddbmm(self.weight("fc_out.bias").unsqueeze(1), h, self.weight("fc_out.weight").transpose(1, 2))
        return head.squeeze(-1)


def can_stack(model_cls: type) -> bool:
    """Whether :func:`fit_stack` can train models of ``model_cls`` (those built on :class:`LSTMCore`).

    >>> from qlib.model.base import Model
    >>> can_stack(LSTMCore), can_stack(Model)
    (True, False)
    """
    return isinstance(model_cls, type) and issubclass(model_cls, LSTMCore)


def check_stackable(models: Sequence[LSTMCore]) -> None:
    """``ValueError`` unless ``models`` differ only in their seeds (and fit state); names the first difference.

    >>> from rolling_calib.qlib_adapter.model import RollingLSTM
    >>> check_stackable([RollingLSTM(hidden_size=8, seed=0), RollingLSTM(hidden_size=16, seed=1)])
    Traceback (most recent call last):
    ...
    ValueError: seed stack: every member must share hidden_size; seed 0 has 8, seed 1 has 16
    """
    if not models:
        raise ValueError("seed stack: expected at least one model, found none")
    ref = models[0].hyperparameters()
    for model in models[1:]:
        mine = model.hyperparameters()
        for name in _SHARED_SETTINGS:
            if mine[name] != ref[name]:
                raise ValueError(f"seed stack: every member must share {name}; seed {models[0].seed} has {ref[name]}, "
                                 f"seed {model.seed} has {mine[name]}")
    seeds = [m.seed for m in models]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seed stack: expected distinct seeds, found {seeds}")


class _Member:
    """The bookkeeping of one model during a stacked fit."""

    def __init__(self, model: LSTMCore, *, warm: bool, n_epochs: int, device: torch.device) -> None:
        self.model, self.warm, self.n_epochs = model, warm, n_epochs
        self.rng = np.random.default_rng([model.seed, model.fit_count])
        self.stopping = EarlyStopping(patience=model.early_stop)
        self.hist: dict[str, list[float]] = {"train": [], "valid": []}
        self.final_state: dict[str, torch.Tensor] | None = None
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(model.seed + 7919 * (model.fit_count + 1))

    def standardise(self, y: np.ndarray) -> np.ndarray:
        """The label as this member's network learns it (:meth:`LSTMCore.standardise`)."""
        return self.model.standardise(y)


def start_stack(models: Sequence[LSTMCore], train: MinuteWindowSampler) -> tuple[list[_Member], StackedLSTM, torch.optim.Optimizer]:
    """Ready ``models`` for one stacked fit on ``train``: their bookkeeping, the stack and its optimiser.

    Each model is reset as its own :meth:`RollingLSTM.fit` resets it (a fresh network unless
    warm-started, a fresh optimiser) and its label scale is fitted on ``train``.
    """
    lead = models[0]
    members = []
    for model in models:
        warm = model.warm_started
        n_epochs = model.reset_for_fit(warm)
        if n_epochs > 0 or not warm:
            model.fit_scales(train)
        members.append(_Member(model, warm=warm, n_epochs=n_epochs, device=lead.device))
    stack = StackedLSTM([m.lstm_model for m in models]).to(lead.device)
    stack.generators = [m.generator for m in members]
    return members, stack, lead.make_optimizer(stack.parameters())


def fit_stack(models: Sequence[LSTMCore], dataset: MinuteTSDataset, *, progress: bool = False,
              report: FitReport | None = None) -> list[LSTMCore]:
    """Fit ``models`` (one per seed, same settings) on ``dataset`` as one seed stack; returns them fitted.

    Each model ends as its own :meth:`RollingLSTM.fit` would leave it (fresh, or fine-tuned after
    ``load_state``), with ``last_fit_info["seed_stack"]`` naming the seeds it was trained with.

    Parameters
    ----------
    models : sequence of RollingLSTM
        Differing only in ``seed`` (:func:`check_stackable`); warm-started ones after ``load_state``.
    dataset : MinuteTSDataset
    progress : bool
        A tqdm bar over the epochs (terminal only).
    report : FitReport, optional
        Called with each epoch of the stack, and each batch of long epochs
        (:class:`~rolling_calib.qlib_adapter.lstm_core.FitProgress`); the numbers do not change.
    """
    check_stackable(models)
    t0 = time.perf_counter()
    lead = models[0]
    train, valid = lead.fit_segments(dataset, None)
    members, stack, optimizer = start_stack(models, train)
    active = list(members)
    n_epochs = max(m.n_epochs for m in members)
    tracker = FitProgress(report, epochs=n_epochs, batches=-(-len(train) // lead.batch_size))
    with epoch_bar(n_epochs, progress) as bar:
        for epoch in range(n_epochs):
            active = _retire(stack, optimizer, active, [m for m in active if m.n_epochs <= epoch])
            if not active:
                break
            tracker.epoch(epoch)
            train_loss = _train_epoch(stack, optimizer, active, train, lead, tracker.on_batch)
            valid_loss = _eval_loss(stack, active, valid, lead)
            stopped = []
            for row, member in enumerate(active):
                tr, va = float(train_loss[row]), float(valid_loss[row])
                if not np.isfinite(tr):
                    raise FloatingPointError(
                        f"RollingLSTM.fit (seed stack): training loss became {tr} at epoch {epoch} (seed "
                        f"{member.model.seed}, lr {member.model.lr}); expected a finite loss -- lower lr or check the data")
                member.hist["train"].append(tr)
                member.hist["valid"].append(va)
                if not valid.empty and member.stopping.step(epoch, va, lambda row=row: stack.member_state_dict(row)):
                    stopped.append(member)
            bar.set_postfix(members=len(active) - len(stopped), refresh=False)
            bar.update()
            active = _retire(stack, optimizer, active, stopped)
    _retire(stack, optimizer, active, active)
    seeds = [m.seed for m in models]
    for member in members:
        model = member.model
        weights = member.stopping.state if member.stopping.state is not None else member.final_state
        if weights is not None:
            model.lstm_model.load_state_dict(weights)
        model.record_fit(warm=member.warm, n_epochs=member.n_epochs, hist=member.hist, stopping=member.stopping,
                          n_train=len(train), n_valid=len(valid), t0=t0)
        model.last_fit_info["seed_stack"] = seeds
    if lead.device.type == "cuda":
        torch.cuda.empty_cache()
    return list(models)


def _retire(stack: StackedLSTM, optimizer: torch.optim.Optimizer, active: list[_Member], leaving: Sequence[_Member]) -> list[_Member]:
    """Take ``leaving`` out of the stack (keeping their current weights); the members that stay."""
    if not leaving:
        return active
    for member in leaving:
        member.final_state = stack.member_state_dict(active.index(member))
    staying = [m for m in active if m not in leaving]
    if staying:
        stack.keep([active.index(m) for m in staying], optimizer)
    return staying


def _train_epoch(stack: StackedLSTM, optimizer: torch.optim.Optimizer, active: Sequence[_Member],
                 train: MinuteWindowSampler, lead: LSTMCore, on_batch: Callable[[int], None] | None = None) -> np.ndarray:
    """One epoch of every active member (each its own order); mean training losses, read once at the end.

    ``on_batch(j)`` is called after batch ``j`` (1-based) when given.
    """
    stack.train()
    orders = [m.rng.permutation(len(train)) for m in active]
    totals = torch.zeros(len(active), dtype=torch.float64, device=lead.device)

    def cut(lo: int) -> tuple[np.ndarray, np.ndarray]:
        parts = [train.batch(order[lo : lo + lead.batch_size]) for order in orders]
        x = np.stack([p[0] for p in parts])
        y = np.stack([m.standardise(p[1]) for m, p in zip(active, parts)])
        return x, y

    feed = BatchFeed(cut, range(0, len(train), lead.batch_size), device=lead.device, background=lead.feed_background)
    for done, (x, y) in enumerate(feed, 1):
        losses = ((stack(x) - y) ** 2).mean(dim=1)
        optimizer.zero_grad()
        losses.sum().backward()
        if lead.grad_clip > 0:
            torch.nn.utils.clip_grad_value_(stack.parameters(), lead.grad_clip)
        optimizer.step()
        totals += losses.detach().double() * y.shape[1]
        if on_batch is not None:
            on_batch(done)
    return (totals / max(len(train), 1)).cpu().numpy()


def _eval_loss(stack: StackedLSTM, active: Sequence[_Member], valid: MinuteWindowSampler, lead: LSTMCore) -> np.ndarray:
    """Every active member's mean squared error over ALL of ``valid`` (NaN when it is empty)."""
    if valid.empty:
        return np.full(len(active), np.nan)
    stack.eval()
    totals = torch.zeros(len(active), dtype=torch.float64, device=lead.device)
    chunk = max(lead.batch_size, EVAL_CHUNK // max(1, len(active)))
    with torch.inference_mode():
        for lo in range(0, len(valid), chunk):
            x, y = valid.batch(np.arange(lo, min(lo + chunk, len(valid))))
            pred = stack(torch.from_numpy(x).to(lead.device))
            target = torch.from_numpy(np.stack([m.standardise(y) for m in active])).to(lead.device)
            totals += ((pred - target) ** 2).sum(dim=1).double()
    return (totals / len(valid)).cpu().numpy()

