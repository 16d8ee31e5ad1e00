"""Seed-stacked training: the K seeds of one (pipeline, window) trained together, on one of two kernels.

The seeds of a configuration are independent networks of the same shape (Qlib's ``LSTMModel``:
a stacked LSTM and a linear head on the last step). :func:`fit_stack` trains K
:class:`~rolling_calib.qlib_adapter.model.RollingLSTM` models (same hyperparameters, their own
seeds) together and leaves each model exactly as its own ``fit`` would: weights, normalisation,
label scale, ``last_fit_info``. Two kernels (:data:`STACK_KERNELS`):

* ``bmm`` -- :class:`StackedLSTM` holds the K members' weights as tensors with a leading seed axis.
  Per layer one batched GEMM projects every time step's input for all members; each step then
  adds the recurrent term with one batched GEMM over the seeds (``baddbmm_`` in place) and applies
  the gates (PyTorch's ``nn.LSTM`` exactly, order i, f, g, o) in five elementwise kernels::

      gates_t = x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh          (per member k, batched over k)
      c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g);   h_t = sigmoid(o) * tanh(c_t)
      output = h_T W_fc^T + b_fc

  Its backward is written by hand (:class:`_StackedLayer`): one batched GEMM per step for the
  recurrent gradient, every weight gradient in one batched GEMM over all steps. That is how it
  runs on a CPU. On a GPU, where a step of some 20 small kernels launched from Python left the
  device idle (at the paper's size some 6,500 PyTorch calls per training step, 2,528 of them
  kernel launches, for 60 steps x 2 layers), it runs every layer as :class:`_FusedStack` (per step
  one batched GEMM and PyTorch's fused LSTM cell kernel; the same mathematics) and replays each
  training step -- forward, backward, clipping, optimiser -- from a CUDA graph
  (:class:`_GraphedStep`), its matmuls in TF32 exactly when cuDNN's are (the one-seed path's
  precision). :meth:`_BmmKernel.describe` says what ran; the sidecar keeps it.
* ``streams`` -- each member keeps its own network and optimiser; on a GPU each member's step
  (cuDNN's LSTM, loss, backward, clip, optimiser) goes to its own CUDA stream, so the members'
  small kernels run side by side; on a CPU they run in turn.

:func:`choose_kernel` picks one per size (``stack_kernel: auto``: a short timing probe on a GPU, a
fixed kernel on a CPU) and the choice is recorded in each model's ``last_fit_info["stack"]`` (and
so in every unit's sidecar). Batches come from the feed :func:`~rolling_calib.qlib_adapter.lstm_core.plan_feed`
picks: cut on the device from segments moved there once, or on the host.

The steps of a fit both paths share (a fresh network and optimiser, the label scale, the record
of the fit, the batch feeds, early stopping) are :mod:`rolling_calib.qlib_adapter.lstm_core`'s, so
this module and the model's do not import each other. Each member keeps

* its own initialisation (each model builds Qlib's ``LSTMModel`` under its own seed; ``bmm``
  copies those weights),
* its own data order (``numpy.random.default_rng([seed, fit_count])``, one permutation per
  epoch, as the unstacked fit draws it),
* its own label standardisation, early stopping and epoch count; a member that stops is taken
  out of the stack (its weights and optimiser state rows are dropped), so the others carry on
  without computing it,
* its own dropout stream, seeded ``seed + 7919 * (fit_count + 1)`` (``bmm``: a generator per
  member; ``streams`` on a CPU: that generator's state swapped in around the member's step, the
  unstacked fit's stream; ``streams`` is refused on a GPU with dropout between layers, where cuDNN
  draws every network's masks from one shared state), so a member's numbers do not depend on
  which seeds share its stack.

The optimisers (Adam, AdamW, SGD), L2 weight decay and value clipping act elementwise, and the
``bmm`` loss is the sum of the members' mean losses, so each member receives exactly its own
gradient: mathematically the stack is K independent fits. Numerically ``bmm`` is not
bit-identical to the unstacked ``RollingLSTM.fit`` (``nn.LSTM``'s kernels sum in another order);
the two agree to float rounding, and the tests compare their predictions to a tolerance.
``streams`` runs the unstacked fit's own operations: on a CPU the same bits. Both are
deterministic on CPU (same seeds and stack size -> the same bits).

Where each wins: ``bench/bench_stacked.py`` prints both against one seed at a time. On a CPU with
one thread per worker the work is throughput-bound and ``nn.LSTM``'s fused cell beats the
hand-written one (hence :data:`CPU_KERNEL`); on a GPU one small LSTM leaves the device idle, which
both kernels fill in their own way.

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

import contextlib
import copy
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from rolling_calib.qlib_adapter.dataset import MinuteTSDataset, MinuteWindowSampler
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

__all__ = ["CPU_KERNEL", "PROBE_STEPS", "STACK_KERNELS", "StackedLSTM", "can_stack", "check_stackable",
           "choose_kernel", "fit_stack", "make_kernel", "stack_residents", "start_stack"]

#: Settings every member of a stack must share (the seed is what differs).
_SHARED_SETTINGS = ("d_feat", "hidden_size", "num_layers", "dropout", "lr", "batch_size", "weight_decay",
                    "early_stop", "loss", "optimizer", "device", "grad_clip", "n_epochs", "finetune_epochs")

#: A model's ``stack_kernel`` settings (:func:`choose_kernel` decides ``"auto"``).
STACK_KERNELS = ("auto", "bmm", "streams")
#: The kernel ``"auto"`` takes on a CPU (fixed, so a CPU stack's numbers never depend on a timing):
#: ``streams`` there runs the members' own ``nn.LSTM`` one after another, the unstacked fit's numbers
#: bit for bit, and was faster than ``bmm`` at both benched sizes (``bench/bench_stacked.py``, docs/gpu.md).
CPU_KERNEL = "streams"
#: Timed training steps of each kernel in the probe of :func:`choose_kernel` (after its warm-up steps).
PROBE_STEPS = 3
_PROBED: dict[tuple, dict] = {}


# ------------------------------------------------------------------------------ the batched LSTM layer
_GATE_ORDERS: dict[tuple[int, torch.device], torch.Tensor] = {}


def _gate_order(hidden: int, device: torch.device) -> torch.Tensor:
    """Rows of ``nn.LSTM``'s gates (i, f, g, o) in the order (i, f, o, g): one sigmoid over 3H, one tanh over H.

    Swapping the last two blocks is its own inverse (the same index maps gradients back). Made
    once per size and device: a host-to-device copy at every layer call would make the host
    wait for the GPU's queue.
    """
    key = (hidden, device)
    if key not in _GATE_ORDERS:
        _GATE_ORDERS[key] = torch.cat([torch.arange(0, 2 * hidden), torch.arange(3 * hidden, 4 * hidden),
                                       torch.arange(2 * hidden, 3 * hidden)]).to(device)
    return _GATE_ORDERS[key]


def _layer_steps(x: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor, bias: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The recurrence of one layer for K members at once; its activations ``(act, c, tanh c, h)``.

    ``x`` ``(K, T, B, F)``; ``w_ih`` ``(K, 4H, F)``, ``w_hh`` ``(K, 4H, H)``, ``bias`` ``(K, 1, 4H)``
    in gate order (i, f, o, g). The input projection of every time step is one batched GEMM;
    each step adds its recurrent term with one batched GEMM in place (``baddbmm_``), then
    applies the gates with five elementwise kernels writing into preallocated buffers.
    ``h[:, 0]`` and ``c[:, 0]`` are the zero initial state; ``h[:, 1:]`` is the layer's output.
    """
    k, steps, batch, feat = x.shape
    hidden = w_hh.shape[-1]
    three = 3 * hidden
    act = torch.baddbmm(bias, x.reshape(k, steps * batch, feat), w_ih.transpose(1, 2)).view(k, steps, batch, 4 * hidden)
    h = x.new_empty(k, steps + 1, batch, hidden)
    c = x.new_empty(k, steps + 1, batch, hidden)
    h[:, 0].zero_()
    c[:, 0].zero_()
    tc = x.new_empty(k, steps, batch, hidden)
    w_hh_t = w_hh.transpose(1, 2)
    for t in range(steps):
        a = act[:, t]
        if t:
            a.baddbmm_(h[:, t], w_hh_t)
        a[..., :three].sigmoid_()
        a[..., three:].tanh_()
        torch.mul(a[..., hidden : 2 * hidden], c[:, t], out=c[:, t + 1])
        c[:, t + 1].addcmul_(a[..., :hidden], a[..., three:])
        torch.tanh(c[:, t + 1], out=tc[:, t])
        torch.mul(a[..., 2 * hidden : three], tc[:, t], out=h[:, t + 1])
    return act, c, tc, h


class _StackedLayer(torch.autograd.Function):
    """One LSTM layer of K members: forward by :func:`_layer_steps`, backward by hand (BPTT).

    Backward walks the steps in reverse with one batched GEMM per step (the recurrent gradient
    ``dh_{t-1} = dG_t W_hh``) and elementwise gate derivatives, then computes every weight
    gradient in one batched GEMM over all steps (``dW_ih = dG^T x``, ``dW_hh = dG^T h_{t-1}``,
    ``db = sum dG``), as cuDNN does, instead of a graph of some 25 autograd nodes per step.
    """

    @staticmethod
    def forward(ctx, x, w_ih, w_hh, b_ih, b_hh, last_only: bool):  # noqa: D102 - see the class
        order = _gate_order(w_hh.shape[-1], x.device)
        w_ih_p, w_hh_p = w_ih[:, order], w_hh[:, order]
        act, c, tc, h = _layer_steps(x, w_ih_p, w_hh_p, (b_ih + b_hh)[:, order].unsqueeze(1))
        ctx.last_only, ctx.order = last_only, order
        ctx.tensors = (x, w_ih_p, w_hh_p, act, c, tc, h)
        return h[:, -1].clone() if last_only else h[:, 1:]

    @staticmethod
    def backward(ctx, grad_out):  # noqa: D102 - see the class
        x, w_ih, w_hh, act, c, tc, h = ctx.tensors
        k, steps, batch, feat = x.shape
        hidden = w_hh.shape[-1]
        three = 3 * hidden
        d_act = torch.empty_like(act)
        dc = act.new_zeros(k, batch, hidden)
        one = act.new_ones(())
        dh = grad_out.clone() if ctx.last_only else grad_out[:, -1].clone()
        for t in reversed(range(steps)):
            a, d, tct = act[:, t], d_act[:, t], tc[:, t]
            torch.mul(dh, tct, out=d[..., 2 * hidden : three])                              # dL/do
            dc.addcmul_(dh * a[..., 2 * hidden : three], torch.addcmul(one, tct, tct, value=-1))  # dL/dc_t
            torch.mul(dc, a[..., three:], out=d[..., :hidden])                              # dL/di
            torch.mul(dc, c[:, t], out=d[..., hidden : 2 * hidden])                         # dL/df
            torch.mul(dc, a[..., :hidden], out=d[..., three:])                              # dL/dg
            dc.mul_(a[..., hidden : 2 * hidden])                                            # dL/dc_{t-1}
            s = a[..., :three]
            d[..., :three].mul_(torch.addcmul(s, s, s, value=-1))                           # sigmoid' = s - s^2
            d[..., three:].mul_(torch.addcmul(one, a[..., three:], a[..., three:], value=-1))  # tanh' = 1 - g^2
            if t:
                dh = torch.bmm(d, w_hh) if ctx.last_only else torch.baddbmm(grad_out[:, t - 1], d, w_hh)
        flat = d_act.view(k, steps * batch, 4 * hidden)
        need = ctx.needs_input_grad
        g_x = torch.bmm(flat, w_ih).view(k, steps, batch, feat) if need[0] else None
        g_ih = torch.bmm(flat.transpose(1, 2), x.reshape(k, steps * batch, feat))[:, ctx.order] if need[1] else None
        g_hh = None
        if need[2]:
            g_hh = (torch.bmm(d_act[:, 1:].reshape(k, (steps - 1) * batch, 4 * hidden).transpose(1, 2),
                              h[:, 1:steps].reshape(k, (steps - 1) * batch, hidden))[:, ctx.order]
                    if steps > 1 else w_hh.new_zeros(w_hh.shape))
        g_b = flat.sum(dim=1)[:, ctx.order] if need[3] or need[4] else None
        return g_x, g_ih, g_hh, g_b, None if g_b is None else g_b.clone(), None


# ------------------------------------------------------------------------------ the fused-cell stack (CUDA)
def _cell_forward_reference(gates: torch.Tensor, hidden_gates: torch.Tensor, cx: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What ``aten::_thnn_fused_lstm_cell`` computes, in plain tensor operations (any device).

    ``gates``, ``hidden_gates`` ``(N, 4H)`` (gate order i, f, g, o, as ``nn.LSTM``), ``cx`` ``(N, H)``;
    returns ``(hy, cy, workspace)`` with the activated gates as the workspace::

        i, f, o = sigmoid(.), g = tanh(.) of gates + hidden_gates
        cy = f * cx + i * g;   hy = o * tanh(cy);   workspace = [i, f, g, o]
    """
    i, f, g, o = (gates + hidden_gates).chunk(4, dim=1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    cy = f * cx + i * g
    return o * torch.tanh(cy), cy, torch.cat([i, f, g, o], dim=1)


def _cell_backward_reference(grad_hy: torch.Tensor, grad_cy: torch.Tensor | None, cx: torch.Tensor,
                             cy: torch.Tensor, workspace: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What ``aten::_thnn_fused_lstm_cell_backward_impl`` computes: the gates' and ``cx``'s gradients.

    ``grad_cy`` None counts as zero. With ``s = tanh(cy)`` and ``dc = grad_hy o (1 - s^2) + grad_cy``::

        d_i = dc g i (1 - i),  d_f = dc cx f (1 - f),  d_g = dc i (1 - g^2),  d_o = grad_hy s o (1 - o)
        d_cx = dc f
    """
    i, f, g, o = workspace.chunk(4, dim=1)
    s = torch.tanh(cy)
    dc = grad_hy * o * (1 - s * s)
    if grad_cy is not None:
        dc = dc + grad_cy
    d_gates = torch.cat([dc * g * (1 - i) * i, dc * cx * (1 - f) * f, dc * i * (1 - g * g),
                         grad_hy * s * (1 - o) * o], dim=1)
    return d_gates, dc * f


def _cell_forward(gates, hidden_gates, cx):
    """The LSTM cell of one step: PyTorch's fused CUDA kernel on a GPU (one kernel), its reference elsewhere."""
    if gates.is_cuda:
        return torch.ops.aten._thnn_fused_lstm_cell(gates, hidden_gates, cx)
    return _cell_forward_reference(gates, hidden_gates, cx)


def _cell_backward(grad_hy, grad_cy, cx, cy, workspace):
    """The cell's backward (:func:`_cell_backward_reference`): the fused CUDA kernel on a GPU."""
    if workspace.is_cuda:
        d_gates, d_cx, _ = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace, False)
        return d_gates, d_cx
    return _cell_backward_reference(grad_hy, grad_cy, cx, cy, workspace)


def _joined_width(feat: int, hidden: int) -> int:
    """Columns of a layer's joined step input ``[x_t, h_{t-1}, 1]``, padded to a multiple of 4 (16-byte rows)."""
    return -(-(feat + hidden + 1) // 4) * 4


def _joined_weights(w_ih, w_hh, b_ih, b_hh, width: int) -> torch.Tensor:
    """``(K, width, 4H)``: ``[W_ih^T; W_hh^T; b_ih + b_hh; 0]``, so that ``[x_t, h_{t-1}, 1, 0] @ it`` is the gates."""
    k, four_h, feat = w_ih.shape
    pad = w_ih.new_zeros(k, width - feat - w_hh.shape[-1] - 1, four_h)
    return torch.cat([w_ih.transpose(1, 2), w_hh.transpose(1, 2), (b_ih + b_hh).unsqueeze(1), pad], dim=1)


class _FusedStack(torch.autograd.Function):
    """Every layer of K members' LSTM, one fused cell kernel per step; backward by hand. Returns ``h_T`` ``(K, B, H)``.

    Layout: per layer a buffer ``(T, K, B, C)`` of joined step inputs ``[x_t, h_{t-1}, 1, 0...]``
    (:func:`_joined_width`), so that one batched GEMM per step gives all members' gates, biases
    included (:func:`_joined_weights`), contiguous ``(K*B, 4H)`` as the fused cell takes them
    (``aten::_thnn_fused_lstm_cell`` on CUDA, :func:`_cell_forward_reference` elsewhere, with the
    recurrent half passed as a broadcast zero). The cell's ``h_t`` is copied into the next step's
    row and the next layer's buffer. Backward per step: the fused cell backward, one batched GEMM
    for the recurrent (and input) gradient ``[dx_t, dh_{t-1}] = dG_t W^T``, one accumulating
    batched GEMM for every weight and bias gradient ``dW += [x_t, h_{t-1}, 1]^T dG_t``. About 8
    kernel launches per layer and step in all, against 21 for :class:`_StackedLayer`
    (``bench/count_stack_calls.py``), and some 0.6x its memory traffic (bytes counted per step, not
    measured); the same mathematics (tested against it).
    """

    @staticmethod
    def forward(ctx, x, *weights):  # noqa: D102 - see the class
        k, batch, steps, feat = x.shape
        layers, hidden = len(weights) // 4, weights[1].shape[-1]
        widths = [feat] + [hidden] * (layers - 1)
        bufs = [x.new_empty(steps, k, batch, _joined_width(f, hidden)) for f in widths]
        for buf, f in zip(bufs, widths):  # every element is written before it is read
            buf[0, :, :, f : f + hidden].zero_()
            buf[..., f + hidden].fill_(1.0)
            buf[..., f + hidden + 1 :].zero_()
        bufs[0][..., :feat].copy_(x.permute(2, 0, 1, 3))
        joined = [_joined_weights(*weights[4 * n : 4 * n + 4], bufs[n].shape[-1]) for n in range(layers)]
        zero_c = x.new_zeros(k * batch, hidden)
        zero_gates = x.new_zeros(1, 4 * hidden).expand(k * batch, 4 * hidden)
        cells, spaces = [], []
        for n, (buf, w, f) in enumerate(zip(bufs, joined, widths)):
            cx, cs, ws = zero_c, [], []
            for t in range(steps):
                hy, cy, space = _cell_forward(torch.bmm(buf[t], w).view(k * batch, 4 * hidden), zero_gates, cx)
                h3 = hy.view(k, batch, hidden)
                if t + 1 < steps:
                    buf[t + 1, :, :, f : f + hidden].copy_(h3)
                if n + 1 < layers:
                    bufs[n + 1][t, :, :, :hidden].copy_(h3)
                cs.append(cy)
                ws.append(space)
                cx = cy
            cells.append(cs)
            spaces.append(ws)
        ctx.state = (bufs, joined, cells, spaces, widths, zero_c)
        return h3

    @staticmethod
    def backward(ctx, grad_h):  # noqa: D102 - see the class
        bufs, joined, cells, spaces, widths, zero_c = ctx.state
        steps, k, batch, _ = bufs[0].shape
        hidden = grad_h.shape[-1]
        grads: list[torch.Tensor | None] = [None] * (1 + 4 * len(bufs))
        upper: list[torch.Tensor] | None = None  # d loss / d h_t of this layer through the layer above
        for n in reversed(range(len(bufs))):
            buf, w, cs, ws, f = bufs[n], joined[n], cells[n], spaces[n], widths[n]
            need_x = n > 0 or ctx.needs_input_grad[0]
            lo = 0 if need_x else f                     # columns of [x, h] whose gradient is needed
            w_back = w[:, lo : f + hidden].transpose(1, 2)
            lower: list[torch.Tensor] = []
            ghy = (grad_h if upper is None else upper[steps - 1]).reshape(k * batch, hidden)
            gcy = None
            d_w = None
            for t in reversed(range(steps)):
                d_gates, gcx = _cell_backward(ghy, gcy, cs[t - 1] if t else zero_c, cs[t], ws[t])
                g3 = d_gates.view(k, batch, 4 * hidden)
                d_w = torch.bmm(buf[t].transpose(1, 2), g3) if d_w is None else d_w.baddbmm_(buf[t].transpose(1, 2), g3)
                if t == 0 and not need_x:
                    break
                d = torch.bmm(g3, w_back)                                 # (K, B, [f +] H): [dx_t,] dh_{t-1}
                if need_x:
                    lower.append(d[..., :f])
                if t:
                    dh = d[..., f - lo :]
                    ghy = (dh if upper is None else dh + upper[t - 1]).reshape(k * batch, hidden)
                    gcy = gcx
            upper = lower[::-1] if need_x else None
            g_b = d_w[:, f + hidden].contiguous()
            grads[1 + 4 * n : 5 + 4 * n] = [d_w[:, :f].transpose(1, 2).contiguous(),
                                            d_w[:, f : f + hidden].transpose(1, 2).contiguous(), g_b, g_b.clone()]
        if ctx.needs_input_grad[0]:
            grads[0] = torch.stack(upper).permute(1, 2, 0, 3)
        return tuple(grads)


_FUSED_READY: dict[str, tuple[bool, str]] = {}


def fused_cell_ready(device: torch.device) -> tuple[bool, str]:
    """Whether the fused cell kernels work on ``device`` as :func:`_cell_forward_reference` says; and why not.

    Checked once per device on random values (forward and backward, to ``1e-5``); on a CPU the
    reference itself is the cell. A missing or differing kernel makes the bmm kernel keep
    :class:`_StackedLayer` (and the sidecar says so) instead of failing the fit.
    """
    key = str(device)
    if key not in _FUSED_READY:
        if torch.device(device).type != "cuda":
            _FUSED_READY[key] = (True, "the reference cell (not a GPU)")
            return _FUSED_READY[key]
        try:
            gen = torch.Generator(device=device)
            gen.manual_seed(0)
            gates = torch.randn(6, 20, generator=gen, device=device)
            cx, gcy = (torch.randn(6, 5, generator=gen, device=device) for _ in range(2))
            ghy = torch.randn(6, 12, generator=gen, device=device)[:, 7:]   # strided, as _FusedStack passes it
            zero = gates.new_zeros(1, 20).expand(6, 20)                    # the broadcast zero, as it passes
            got = _cell_forward(gates, zero, cx)
            ref = _cell_forward_reference(gates, zero, cx)
            got_b = _cell_backward(ghy, gcy, cx, got[1], got[2])
            ref_b = _cell_backward_reference(ghy, gcy, cx, ref[1], ref[2])
            err = max(float((a - b).abs().max()) for a, b in zip([*got, *got_b], [*ref, *ref_b]))
            ok = err <= 1e-5
            _FUSED_READY[key] = (ok, f"the fused CUDA cell (max difference from its reference {err:.1e})" if ok else
                                 f"the fused CUDA cell differs from its reference by {err:.1e} (over 1e-5)")
        except Exception as exc:  # a torch without the kernel: keep the step-by-step layer
            _FUSED_READY[key] = (False, f"the fused CUDA cell failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    return _FUSED_READY[key]


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
        #: Run the layers as :class:`_FusedStack` (one fused cell kernel per step; the bmm kernel sets it on a
        #: GPU) instead of :class:`_StackedLayer` -- not while training with dropout between layers.
        self.fused = False

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

    def _layer_weights(self, layer: int) -> list[torch.nn.Parameter]:
        return [self.weight(f"rnn.{name}_l{layer}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Outputs ``(K, B)`` for inputs ``(K, B, T, F)`` or shared inputs ``(B, T, F)``."""
        if x.dim() == 3:
            x = x.unsqueeze(0).expand(self.n_members, -1, -1, -1)
        if self.fused and not (self.training and self.dropout > 0 and self.num_layers > 1):
            seq = _FusedStack.apply(x, *(w for layer in range(self.num_layers) for w in self._layer_weights(layer)))
        else:
            seq = x.transpose(1, 2).contiguous()  # (K, T, B, F): every time step one (K, B, F) slab
            for layer in range(self.num_layers):
                last = layer == self.num_layers - 1
                out = _StackedLayer.apply(seq, *self._layer_weights(layer), last)
                seq = out if last else self._dropout(out)
        head = torch.baddbmm(self.weight("fc_out.bias").unsqueeze(1), seq, self.weight("fc_out.weight").transpose(1, 2))
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
    """The bookkeeping of one model during a stacked fit (``slot``: its row in the stack as it started)."""

    def __init__(self, model: LSTMCore, *, slot: int, warm: bool, n_epochs: int, device: torch.device) -> None:
        self.model, self.slot, self.warm, self.n_epochs = model, slot, warm, n_epochs
        self.rng = np.random.default_rng([model.seed, model.fit_count])
        self.stopping = EarlyStopping(patience=model.early_stop)
        self.hist: dict[str, list[float]] = {"train": [], "valid": []}
        self.final_state: dict[str, torch.Tensor] | None = None
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(model.seed + 7919 * (model.fit_count + 1))

    def standardise(self, y: np.ndarray) -> np.ndarray:
        """The label as this member's network learns it (:meth:`LSTMCore.standardise`)."""
        return self.model.standardise(y)


# ------------------------------------------------------------------------------ the kernels
@contextlib.contextmanager
def _cuda_precision(tf32: bool) -> Iterator[None]:
    """The bmm kernel's settings on a GPU, restored after: its float32 matmuls in TF32 or IEEE (``tf32``),
    and no NaN fill of fresh memory under deterministic algorithms (the kernel writes every element it
    allocates before reading it; the fill would only add a memory pass per buffer)."""
    matmul, det = torch.backends.cuda.matmul, torch.utils.deterministic
    before = (matmul.allow_tf32, det.fill_uninitialized_memory)
    matmul.allow_tf32, det.fill_uninitialized_memory = tf32, False
    try:
        yield
    finally:
        matmul.allow_tf32, det.fill_uninitialized_memory = before


class _GraphedStep:
    """A training step ``step(x, y) -> losses`` replayed from a CUDA graph for the batches of one shape.

    The first batch fixes the shape. Its first :attr:`WARMUP` batches run eagerly on a side stream
    (real steps: they initialise the optimiser's state and the libraries' handles, as capture
    requires), the next is captured on that stream into static input buffers and replayed, and
    every later batch of that shape is copied into the buffers and replayed: one launch instead
    of thousands of kernel launches from Python. A batch of another shape (an epoch's last, partial
    batch) runs eagerly; the graph's weights, gradients and optimiser state are the same tensors,
    so eager and replayed steps interleave freely. A capture that fails leaves the steps eager for
    good and says why in :attr:`failure` (and a warning); the batch it was for runs eagerly, so no
    step is lost or repeated. :meth:`reset` (members left the stack: new weight tensors) drops the
    graph; the next batches warm up and capture again.
    """

    WARMUP = 2

    def __init__(self, step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], optimizer: torch.optim.Optimizer,
                 device: torch.device) -> None:
        self.step, self.optimizer, self.device = step, optimizer, device
        self.stream = self._side_stream()
        self.failure: str | None = None
        self.captures = self.replays = self.eager = 0
        self.reset()

    def reset(self) -> None:
        """Forget the graph (and its shape); the next batches warm up and capture anew."""
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self.shape: tuple | None = None
        self.warm = 0

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        shape = (tuple(x.shape), tuple(y.shape))
        if self.failure is not None or (self.shape is not None and shape != self.shape):
            self.eager += 1
            return self.step(x, y)
        if self.graph is None:
            self.shape = shape
            if self.warm < self.WARMUP:
                self.warm += 1
                self.eager += 1
                return self._side_stream_step(x, y)
            try:
                self._capture(x, y)
            except Exception as exc:  # the steps stay eager; this batch too
                self._give_up(exc)
                self.eager += 1
                return self.step(x, y)
        else:
            self.static[0].copy_(x)
            self.static[1].copy_(y)
        self._replay()
        self.replays += 1
        return self.static[2].clone()

    def _side_stream(self) -> torch.cuda.Stream:
        return torch.cuda.Stream(device=self.device)

    def _side_stream_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        here = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(here)
        with torch.cuda.stream(self.stream):
            losses = self.step(x, y)
        here.wait_stream(self.stream)
        losses.record_stream(here)  # read on this stream after the step: not reused before
        return losses

    def _capture(self, x: torch.Tensor, y: torch.Tensor) -> None:
        static_x, static_y = x.clone(), y.clone()
        self.optimizer.zero_grad(set_to_none=True)  # the graph's backward makes the gradients in its own pool
        graph = torch.cuda.CUDAGraph()
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        # thread_local: a feed's producer thread may pin host memory meanwhile (not part of the graph)
        with torch.cuda.graph(graph, stream=self.stream, capture_error_mode="thread_local"):
            losses = self.step(static_x, static_y)
        torch.cuda.current_stream(self.device).wait_stream(self.stream)
        self.graph, self.static = graph, (static_x, static_y, losses)
        self.captures += 1

    def _replay(self) -> None:
        self.graph.replay()

    def _give_up(self, exc: BaseException) -> None:
        cause = exc.__context__ if exc.__context__ is not None else exc
        self.failure = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        if cause is not exc:
            self.failure += f" (during: {type(cause).__name__}: {str(cause).splitlines()[0][:200] if str(cause) else ''})"
        self.graph = self.static = None
        self.optimizer.zero_grad(set_to_none=True)  # gradients made during the capture were never computed
        warnings.warn(f"seed stack: CUDA graph capture failed, training with eager steps: {self.failure}", stacklevel=3)

    def describe(self) -> dict:
        """What happened: captures, replayed and eager steps, and the failure if any (kept in the sidecar)."""
        return {"captures": self.captures, "replayed_steps": self.replays, "eager_steps": self.eager,
                "failure": self.failure}


class _BmmKernel:
    """All members as one :class:`StackedLSTM` and one optimiser: each step one batched GEMM over the seeds.

    On a GPU: the fused cell (:class:`_FusedStack`, when :func:`fused_cell_ready` and no dropout
    between layers), each training step of one batch shape replayed from a CUDA graph
    (:class:`_GraphedStep`; when ``lead.stack_graph`` and no dropout between layers, whose
    per-member generators a graph does not replay), and the matmuls in TF32 exactly when
    ``torch.backends.cudnn.allow_tf32`` lets the one-seed path's cuDNN LSTM use TF32 (the same
    precision as one seed at a time; PyTorch's default: TF32). On a CPU: :class:`_StackedLayer`,
    eager steps, IEEE float32, as before.
    """

    name = "bmm"

    def __init__(self, nets: Sequence[torch.nn.Module], *, lead: LSTMCore,
                 generators: Sequence[torch.Generator] | None) -> None:
        self.stack = StackedLSTM(nets).to(lead.device)
        self.stack.generators = None if generators is None else list(generators)
        self.grad_clip = lead.grad_clip
        self.cuda = lead.device.type == "cuda"
        self.tf32 = self.cuda and bool(torch.backends.cudnn.allow_tf32)
        dropout_between = self.stack.dropout > 0 and self.stack.num_layers > 1
        if not self.cuda:
            self.cell = "steps: not a GPU"
        elif dropout_between:
            self.cell = "steps: dropout between layers"
        else:
            ready, why = fused_cell_ready(lead.device)
            self.stack.fused = ready
            self.cell = f"fused: {why}" if ready else f"steps: {why}"
        self.optimizer = lead.make_optimizer(self.stack.parameters(), capturable=self.cuda)
        self.graph: _GraphedStep | None = None
        if not self.cuda:
            self.graph_off = "not a GPU"
        elif dropout_between:
            self.graph_off = "dropout between layers (per-member generators)"
        elif not getattr(lead, "stack_graph", True):
            self.graph_off = "stack_graph off"
        else:
            self.graph_off = None
            self.graph = _GraphedStep(self._step, self.optimizer, lead.device)

    @property
    def n_members(self) -> int:
        return self.stack.n_members

    @property
    def warmup_steps(self) -> int:
        """Steps before a step runs at its steady speed (the graph's warm-up and capture)."""
        return 1 if self.graph is None else _GraphedStep.WARMUP + 1

    def _scope(self) -> contextlib.AbstractContextManager:
        return _cuda_precision(self.tf32) if self.cuda else contextlib.nullcontext()

    def _step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.stack.train()
        losses = ((self.stack(x) - y) ** 2).mean(dim=1)
        self.optimizer.zero_grad()
        losses.sum().backward()
        if self.grad_clip > 0:
            torch.nn.utils.clip_grad_value_(self.stack.parameters(), self.grad_clip)
        self.optimizer.step()
        return losses.detach()

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One optimiser step of every member on its batch ``x[k]`` ``(K, B, T, F)``, labels ``y`` ``(K, B)``; losses ``(K,)``."""
        with self._scope():
            return self._step(x, y) if self.graph is None else self.graph(x, y)

    def squared_errors(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Each member's sum of squared errors ``(K,)`` (float64) on shared inputs ``x`` ``(B, T, F)``."""
        self.stack.eval()
        with self._scope():
            return ((self.stack(x) - target) ** 2).sum(dim=1).double()

    def describe(self) -> dict:
        """How the kernel ran (kept in the sidecar): cell, CUDA graph, matmul precision."""
        return {"cell": self.cell, "graph": self.graph.describe() if self.graph is not None else f"off: {self.graph_off}",
                "matmul": "tf32" if self.tf32 else "ieee"}

    def eval_chunk(self, batch_size: int) -> int:
        return max(batch_size, EVAL_CHUNK // max(1, self.n_members))

    def state(self, row: int) -> dict[str, torch.Tensor]:
        return self.stack.member_state_dict(row)

    def keep(self, rows: Sequence[int]) -> None:
        self.stack.keep(rows, self.optimizer)
        if self.graph is not None:
            self.graph.reset()  # new weight tensors: the graph's addresses are stale


class _StreamsKernel:
    """Each member its own network (``nn.LSTM``: cuDNN on a GPU) and optimiser, on its own CUDA stream.

    The host issues the members' steps one after another; on a GPU each member's kernels go to its
    own stream (which first waits for the batch), so the members' small kernels run side by side,
    and the default stream waits for all of them before the losses are read. On a CPU there are no
    streams: the members run in turn, the same operations as their unstacked fits (the same bits).
    ``rng_states``: each member's CPU generator state, swapped in around its step (dropout on CPU).
    """

    name = "streams"

    def __init__(self, nets: Sequence[torch.nn.Module], *, optimizers: Sequence[torch.optim.Optimizer],
                 lead: LSTMCore, rng_states: Sequence[torch.Tensor] | None) -> None:
        self.nets, self.optimizers = list(nets), list(optimizers)
        self.rng_states = None if rng_states is None else list(rng_states)
        self.grad_clip, self.device = lead.grad_clip, lead.device
        self.streams = ([torch.cuda.Stream(device=self.device) for _ in self.nets]
                        if self.device.type == "cuda" else None)

    @property
    def n_members(self) -> int:
        return len(self.nets)

    warmup_steps = 1

    def describe(self) -> dict:
        """How the kernel ran (kept in the sidecar): each member's own ``nn.LSTM``, eager steps."""
        on_gpu = self.device.type == "cuda"
        return {"cell": "cudnn: each member's nn.LSTM" if on_gpu else "nn.LSTM: each member's own", "graph": "off: streams",
                "matmul": "tf32" if on_gpu and torch.backends.cudnn.allow_tf32 else "ieee"}

    @contextlib.contextmanager
    def _member(self, k: int) -> Iterator[None]:
        """Member ``k``'s stream (after the work queued so far) and dropout stream."""
        with contextlib.ExitStack() as scope:
            if self.streams is not None:
                stream = self.streams[k]
                stream.wait_stream(torch.cuda.current_stream(self.device))
                scope.enter_context(torch.cuda.stream(stream))
            if self.rng_states is not None:
                outer = torch.get_rng_state()
                torch.set_rng_state(self.rng_states[k])
                scope.callback(torch.set_rng_state, outer)
                yield
                self.rng_states[k] = torch.get_rng_state()
                return
            yield

    def _join(self) -> None:
        if self.streams is not None:
            here = torch.cuda.current_stream(self.device)
            for stream in self.streams:
                here.wait_stream(stream)

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One optimiser step of every member on its batch (as :meth:`_BmmKernel.train_step`)."""
        losses = []
        for k, (net, optimizer) in enumerate(zip(self.nets, self.optimizers)):
            with self._member(k):  # the operations of RollingLSTM._train_epoch, in its order
                net.train()
                loss = torch.mean((net(x[k]).reshape(-1) - y[k]) ** 2)
                optimizer.zero_grad()
                loss.backward()
                if self.grad_clip > 0:
                    torch.nn.utils.clip_grad_value_(net.parameters(), self.grad_clip)
                optimizer.step()
                losses.append(loss.detach())
        self._join()
        return torch.stack(losses)

    def squared_errors(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Each member's sum of squared errors (as :meth:`_BmmKernel.squared_errors`, and as ``RollingLSTM._eval_loss``)."""
        sums = []
        for k, net in enumerate(self.nets):
            with self._member(k):
                net.eval()
                sums.append(((net(x).reshape(-1) - target[k]) ** 2).sum().double())
        self._join()
        return torch.stack(sums)

    def eval_chunk(self, batch_size: int) -> int:
        return max(batch_size, EVAL_CHUNK)  # RollingLSTM._eval_loss's chunks: the same sums

    def state(self, row: int) -> dict[str, torch.Tensor]:
        return {name: value.detach().clone() for name, value in self.nets[row].state_dict().items()}

    def keep(self, rows: Sequence[int]) -> None:
        for name in ("nets", "optimizers", "rng_states", "streams"):
            kept = getattr(self, name)
            if kept is not None:
                setattr(self, name, [kept[i] for i in rows])


def _streams_refused(lead: LSTMCore) -> str | None:
    """Why the streams kernel cannot keep each member's numbers its own here, or None."""
    if lead.device.type == "cuda" and lead.dropout > 0 and lead.num_layers > 1:
        return ("needs dropout 0 or one layer on a GPU (cuDNN's LSTM draws every network's dropout from one "
                "shared state, so a member's masks would depend on its stack)")
    return None


def make_kernel(name: str, members: Sequence[_Member], lead: LSTMCore) -> _BmmKernel | _StreamsKernel:
    """The kernel ``name`` over ``members``' networks (their own optimisers for ``streams``)."""
    nets = [m.model.lstm_model for m in members]
    if name == "bmm":
        return _BmmKernel(nets, lead=lead, generators=[m.generator for m in members])
    dropout_on_cpu = lead.dropout > 0 and lead.num_layers > 1 and lead.device.type == "cpu"
    return _StreamsKernel(nets, optimizers=[m.model.train_optimizer for m in members], lead=lead,
                          rng_states=[m.generator.get_state() for m in members] if dropout_on_cpu else None)


def choose_kernel(setting: str, lead: LSTMCore, *, members: int, batch: int, steps: int) -> dict:
    """The kernel a stack of ``members`` copies of ``lead`` uses, and why (kept in each unit's sidecar).

    ``setting`` (:data:`STACK_KERNELS`): ``"bmm"`` or ``"streams"`` as set; ``"auto"``:
    ``bmm`` where streams cannot keep members apart (:func:`_streams_refused`); on a CPU
    :data:`CPU_KERNEL`; on a GPU the faster of the two in a timing probe -- each kernel's warm-up
    steps (bmm: its CUDA graph's warm-up and capture), then :data:`PROBE_STEPS` timed training
    steps, on random batches of this shape, on throwaway copies of ``lead``'s network (no model,
    generator or optimiser of the fit is touched) -- done once per process and shape. The two agree with one-seed-at-a-time fits to float
    rounding, so the choice moves the numbers by rounding only.

    >>> from rolling_calib.qlib_adapter.model import RollingLSTM
    >>> choose_kernel("auto", RollingLSTM(hidden_size=4), members=3, batch=8, steps=5)["kernel"]
    'streams'
    """
    if setting not in STACK_KERNELS:
        raise ValueError(f"stack_kernel: expected one of {STACK_KERNELS}, found {setting!r}")
    refused = _streams_refused(lead)
    if setting == "streams" and refused:
        raise ValueError(f"stack_kernel: 'streams' {refused}; set 'bmm' or 'auto'")
    if setting != "auto":
        return {"kernel": setting, "setting": setting, "reason": "set"}
    if refused:
        return {"kernel": "bmm", "setting": setting, "reason": f"auto: streams {refused}"}
    if lead.device.type != "cuda":
        return {"kernel": CPU_KERNEL, "setting": setting, "reason": "auto: the CPU's fixed kernel"}
    key = (str(lead.device), lead.d_feat, lead.hidden_size, lead.num_layers, lead.dropout, lead.optimizer, members,
           batch, steps)
    if key not in _PROBED:
        _PROBED[key] = _probe(lead, members=members, batch=batch, steps=steps)
    times = _PROBED[key]
    best = min(times, key=times.get)
    return {"kernel": best, "setting": setting, "reason": "auto: the faster in a timing probe",
            "probe_ms_per_step": {name: round(ms, 3) for name, ms in times.items()},
            "probe_shape": [members, batch, steps, lead.d_feat]}


def _probe(lead: LSTMCore, *, members: int, batch: int, steps: int) -> dict[str, float]:
    """Milliseconds per training step of each kernel on random batches (CUDA; :func:`choose_kernel`)."""
    device = lead.device
    gen = torch.Generator(device=device)
    gen.manual_seed(0)
    x = torch.randn(members, batch, steps, lead.d_feat, generator=gen, device=device)
    y = torch.randn(members, batch, generator=gen, device=device)
    times = {}
    for name in ("bmm", "streams"):
        nets = [copy.deepcopy(lead.lstm_model) for _ in range(members)]
        if name == "bmm":
            kernel: _BmmKernel | _StreamsKernel = _BmmKernel(nets, lead=lead, generators=None)
        else:
            kernel = _StreamsKernel(nets, optimizers=[lead.make_optimizer(n.parameters()) for n in nets], lead=lead,
                                    rng_states=None)
        for _ in range(kernel.warmup_steps):  # bmm: the CUDA graph's warm-up and capture
            kernel.train_step(x, y)
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(PROBE_STEPS):
            kernel.train_step(x, y)
        torch.cuda.synchronize(device)
        times[name] = (time.perf_counter() - t0) / PROBE_STEPS * 1e3
        del kernel, nets
    torch.cuda.empty_cache()
    return times


# ------------------------------------------------------------------------------ the fit
def start_stack(models: Sequence[LSTMCore], train: MinuteWindowSampler) -> list[_Member]:
    """Ready ``models`` for one stacked fit on ``train``: their bookkeeping, in order.

    Each model is reset as its own :meth:`RollingLSTM.fit` resets it (a fresh network unless
    warm-started, a fresh optimiser) and its label scale is fitted on ``train``.
    """
    lead = models[0]
    members = []
    for slot, model in enumerate(models):
        warm = model.warm_started
        n_epochs = model.reset_for_fit(warm)
        if n_epochs > 0 or not warm:
            model.fit_scales(train)
        members.append(_Member(model, slot=slot, warm=warm, n_epochs=n_epochs, device=lead.device))
    return members


def stack_residents(members: Sequence[_Member], samplers: Iterable[MinuteWindowSampler]) -> list[DeviceWindows | None]:
    """Each sampler on the device with every member's standardised labels ``(K, n)`` (None for an empty one)."""
    device = members[0].model.device
    return [None if s.empty else DeviceWindows(s, device, labels=np.stack([m.standardise(s.labels) for m in members]))
            for s in samplers]


def fit_stack(models: Sequence[LSTMCore], dataset: MinuteTSDataset, *, progress: bool = False,
              report: FitReport | None = None) -> list[LSTMCore]:
    """Fit ``models`` (one per seed, same settings) on ``dataset`` as one seed stack; returns them fitted.

    Each model ends as its own :meth:`RollingLSTM.fit` would leave it (fresh, or fine-tuned after
    ``load_state``), with ``last_fit_info["seed_stack"]`` naming the seeds it was trained with,
    ``["stack"]`` the kernel (:func:`choose_kernel`, from the lead model's ``stack_kernel``) and
    ``["feed"]`` where batches were cut (:func:`~rolling_calib.qlib_adapter.lstm_core.plan_feed`,
    from its ``feed``).

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
    choice = choose_kernel(getattr(lead, "stack_kernel", "auto"), lead, members=len(models),
                           batch=min(lead.batch_size, len(train)), steps=train.step_len)
    feed = plan_feed(getattr(lead, "feed", "auto"), lead.device, [train, valid], label_rows=len(models))
    members = start_stack(models, train)
    kernel = make_kernel(choice["kernel"], members, lead)
    residents = stack_residents(members, [train, valid]) if feed["mode"] == "resident" else [None, None]
    active = list(members)
    n_epochs = max(m.n_epochs for m in members)
    tracker = FitProgress(report, epochs=n_epochs, batches=-(-len(train) // lead.batch_size))
    with epoch_bar(n_epochs, progress) as bar:
        for epoch in range(n_epochs):
            active = _retire(kernel, active, [m for m in active if m.n_epochs <= epoch])
            if not active:
                break
            tracker.epoch(epoch)
            train_loss = _train_epoch(kernel, active, train, lead, tracker.on_batch, resident=residents[0])
            valid_loss = _eval_loss(kernel, active, valid, lead, resident=residents[1])
            stopped = []
            for row, member in enumerate(active):
                tr, va = float(train_loss[row]), float(valid_loss[row])
                if not np.isfinite(tr):
                    raise FloatingPointError(
                        f"RollingLSTM.fit (seed stack): training loss became {tr} at epoch {epoch} (seed "
                        f"{member.model.seed}, lr {member.model.lr}); expected a finite loss -- lower lr or check the data")
                member.hist["train"].append(tr)
                member.hist["valid"].append(va)
                if not valid.empty and member.stopping.step(epoch, va, lambda row=row: kernel.state(row)):
                    stopped.append(member)
            bar.set_postfix(members=len(active) - len(stopped), refresh=False)
            bar.update()
            active = _retire(kernel, active, stopped)
    _retire(kernel, active, active)
    choice = {**choice, **kernel.describe()}
    del residents, kernel
    seeds = [m.seed for m in models]
    for member in members:
        model = member.model
        weights = member.stopping.state if member.stopping.state is not None else member.final_state
        if weights is not None:
            model.lstm_model.load_state_dict(weights)
        model.record_fit(warm=member.warm, n_epochs=member.n_epochs, hist=member.hist, stopping=member.stopping,
                          n_train=len(train), n_valid=len(valid), t0=t0)
        model.last_fit_info.update(seed_stack=seeds, stack=choice, feed=feed)
    if lead.device.type == "cuda":
        torch.cuda.empty_cache()
    return list(models)


def _retire(kernel: _BmmKernel | _StreamsKernel, active: list[_Member], leaving: Sequence[_Member]) -> list[_Member]:
    """Take ``leaving`` out of the stack (keeping their current weights); the members that stay."""
    if not leaving:
        return active
    for member in leaving:
        member.final_state = kernel.state(active.index(member))
    staying = [m for m in active if m not in leaving]
    if staying:
        kernel.keep([active.index(m) for m in staying])
    return staying


def _train_epoch(kernel: _BmmKernel | _StreamsKernel, active: Sequence[_Member], train: MinuteWindowSampler,
                 lead: LSTMCore, on_batch: Callable[[int], None] | None = None, *,
                 resident: DeviceWindows | None = None) -> np.ndarray:
    """One epoch of every active member (each its own order); mean training losses, read once at the end.

    Batches are cut on the device from ``resident`` (:func:`stack_residents`), else on the host by a
    :class:`BatchFeed`; the same batches either way. ``on_batch(j)`` is called after batch ``j``
    (1-based) when given.
    """
    orders = [m.rng.permutation(len(train)) for m in active]
    totals = torch.zeros(len(active), dtype=torch.float64, device=lead.device)
    starts = range(0, len(train), lead.batch_size)
    if resident is not None:
        order_t = torch.from_numpy(np.stack(orders)).to(lead.device)
        slots = torch.tensor([m.slot for m in active], device=lead.device)
        k, t, f = len(active), train.step_len, resident.values.shape[1]
        batches: Iterable[tuple[torch.Tensor, torch.Tensor]] = (
            (resident.windows(idx.reshape(-1)).view(k, -1, t, f), resident.labels[slots[:, None], idx])
            for idx in (order_t[:, lo : lo + lead.batch_size] for lo in starts))
    else:
        def cut(lo: int) -> tuple[np.ndarray, np.ndarray]:
            parts = [train.batch(order[lo : lo + lead.batch_size]) for order in orders]
            x = np.stack([p[0] for p in parts])
            y = np.stack([m.standardise(p[1]) for m, p in zip(active, parts)])
            return x, y

        batches = BatchFeed(cut, starts, device=lead.device, background=lead.feed_background)
    for done, (x, y) in enumerate(batches, 1):
        totals += kernel.train_step(x, y).double() * y.shape[1]
        if on_batch is not None:
            on_batch(done)
    return (totals / max(len(train), 1)).cpu().numpy()


def _eval_loss(kernel: _BmmKernel | _StreamsKernel, active: Sequence[_Member], valid: MinuteWindowSampler,
               lead: LSTMCore, *, resident: DeviceWindows | None = None) -> np.ndarray:
    """Every active member's mean squared error over ALL of ``valid`` (NaN when it is empty)."""
    if valid.empty:
        return np.full(len(active), np.nan)
    totals = torch.zeros(len(active), dtype=torch.float64, device=lead.device)
    chunk = kernel.eval_chunk(lead.batch_size)
    slots = torch.tensor([m.slot for m in active], device=lead.device)  # once: an index list would be copied per chunk
    with torch.inference_mode():
        for lo in range(0, len(valid), chunk):
            hi = min(lo + chunk, len(valid))
            if resident is not None:
                x, target = resident.windows(torch.arange(lo, hi, device=lead.device)), resident.labels[slots, lo:hi]
            else:
                xs, y = valid.batch(np.arange(lo, hi))
                x = torch.from_numpy(xs).to(lead.device)
                target = torch.from_numpy(np.stack([m.standardise(y) for m in active])).to(lead.device)
            totals += kernel.squared_errors(x, target)
    return (totals / len(valid)).cpu().numpy()
