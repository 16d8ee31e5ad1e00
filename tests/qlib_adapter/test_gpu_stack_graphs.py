"""The bmm seed stack's CUDA path: the fused cell, the fused layers, training steps replayed from a CUDA graph.

Every test here needs a CUDA GPU (skipped elsewhere; ``bench/gpu_check_stack.sh`` runs them on the
device machine). The same code's CPU side is tested in ``test_stacked.py``: the fused layers with
their reference cell (against the step layers, and ``gradcheck``), and the graph's bookkeeping with
the CUDA calls replaced.

Tolerances (float32): the fused CUDA cell against its reference, elementwise, ``1e-5``; the fused
layers against the step layers, IEEE matmuls, outputs ``rtol 1e-5`` and gradients ``rtol 1e-4, atol
1e-5`` (sums in another order); graphed against eager steps, IEEE matmuls, ``rtol 1e-5, atol 1e-6``
(the same kernels; the graph's memory may change cuBLAS's choice of algorithm); a fit against each
seed's own cuDNN fit and against the CPU stack, ``1e-2`` of the predictions' std after 2 epochs (the
deviations are recorded as junit properties, ``tests.xml``).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from rolling_calib.qlib_adapter.lstm_core import LSTMModel
from rolling_calib.qlib_adapter.model import RollingLSTM
from rolling_calib.qlib_adapter.stacked import (StackedLSTM, _BmmKernel, _cell_backward, _cell_backward_reference,
                                                _cell_forward, _cell_forward_reference, fit_stack, fused_cell_ready)
from rolling_calib.qlib_adapter.synthetic_panel import panel_dataset, random_walk_panel

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
CUDA = torch.device("cuda")


@contextlib.contextmanager
def ieee():
    """cuDNN's and cuBLAS's float32 in IEEE for the test (the bmm kernel follows cuDNN's flag)."""
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


def _members(seeds, hidden=16, layers=2):
    out = []
    for seed in seeds:
        torch.manual_seed(seed)
        out.append(LSTMModel(d_feat=6, hidden_size=hidden, num_layers=layers))
    return out


def test_the_fused_cuda_cell_computes_its_reference():  # pragma: no cover - GPU machine
    ready, why = fused_cell_ready(CUDA)
    assert ready, why
    gen = torch.Generator(device=CUDA).manual_seed(1)
    n, hidden = 3 * 500, 16
    gates = torch.randn(n, 4 * hidden, generator=gen, device=CUDA)
    zero = gates.new_zeros(1, 4 * hidden).expand(n, 4 * hidden)     # as the layers pass the recurrent half
    cx = torch.randn(n, hidden, generator=gen, device=CUDA)
    wide = torch.randn(n, 3 * hidden, generator=gen, device=CUDA)
    ghy, gcy = wide[:, hidden : 2 * hidden], torch.randn(n, hidden, generator=gen, device=CUDA)  # ghy strided
    got, ref = _cell_forward(gates, zero, cx), _cell_forward_reference(gates, zero, cx)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    for grad_cy in (gcy, None):
        for a, b in zip(_cell_backward(ghy, grad_cy, cx, got[1], got[2]),
                        _cell_backward_reference(ghy, grad_cy, cx, ref[1], ref[2])):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("layers", [1, 2])
def test_the_fused_layers_on_cuda_compute_what_the_step_layers_compute(layers):  # pragma: no cover - GPU machine
    members = _members([0, 1, 2], layers=layers)
    steps, fused = StackedLSTM(members).to(CUDA), StackedLSTM(members).to(CUDA)
    fused.fused = True
    gen = torch.Generator(device=CUDA).manual_seed(2)
    x, y = torch.randn(3, 64, 12, 6, generator=gen, device=CUDA), torch.randn(3, 64, generator=gen, device=CUDA)
    with ieee():
        for net in (steps, fused):
            ((net(x) - y) ** 2).mean(dim=1).sum().backward()
        torch.testing.assert_close(fused(x), steps(x), rtol=1e-5, atol=1e-6)
    for name in steps.names:
        torch.testing.assert_close(fused.weight(name).grad, steps.weight(name).grad, rtol=1e-4, atol=1e-5)


def test_graphed_steps_on_cuda_equal_eager_steps():  # pragma: no cover - GPU machine
    """Warm-up, capture and replays, the partial batch, a member leaving (a new capture): the graph's steps are
    the eager steps' (same kernels), and the graph was used."""
    with ieee():
        lead = RollingLSTM(hidden_size=16, num_layers=2, lr=1e-2, device="cuda")
        nets = _members([0, 1, 2])
        graphed = _BmmKernel(nets, lead=lead, generators=None)
        lead.stack_graph = False
        eager = _BmmKernel(nets, lead=lead, generators=None)
        assert eager.graph is None and graphed.graph is not None and graphed.stack.fused, graphed.describe()
        gen = torch.Generator(device=CUDA).manual_seed(6)
        batches = [(torch.randn(3, n, 12, 6, generator=gen, device=CUDA), torch.randn(3, n, generator=gen, device=CUDA))
                   for n in (64,) * 6 + (17,)]
        for epoch in range(2):
            if epoch == 1:
                for kernel in (graphed, eager):
                    kernel.keep([2, 0])
                batches = [(x[[2, 0]], y[[2, 0]]) for x, y in batches]
            for x, y in batches:
                torch.testing.assert_close(graphed.train_step(x, y), eager.train_step(x, y), rtol=1e-5, atol=1e-6)
        for name in eager.stack.names:
            torch.testing.assert_close(graphed.stack.weight(name), eager.stack.weight(name), rtol=1e-5, atol=1e-6)
    info = graphed.describe()
    assert info["graph"] == {"captures": 2, "replayed_steps": 8, "eager_steps": 6, "failure": None}, info
    assert info["cell"].startswith("fused") and info["matmul"] == "ieee"


@pytest.fixture(scope="module")
def memory_dataset():
    return panel_dataset(random_walk_panel(instruments=3, days=12, seed=5), step_len=20, sample_stride=3,
                         test_stride=5)


def _models(seeds, device, kernel=None):
    models = [RollingLSTM(seed=s, device=device, hidden_size=8, num_layers=2, n_epochs=2, batch_size=256, lr=3e-3,
                          n_threads=1, early_stop=5) for s in seeds]
    if kernel is not None:
        models[0].stack_kernel = kernel
    return models


def test_a_bmm_stack_on_cuda_replays_graphs_and_matches_one_seed_at_a_time_and_the_cpu(
        memory_dataset, record_property):  # pragma: no cover - GPU machine
    gpu = fit_stack(_models((1, 2), "cuda", "bmm"), memory_dataset)
    own = [m.fit(memory_dataset) for m in _models((1, 2), "cuda")]
    cpu = fit_stack(_models((1, 2), "cpu", "bmm"), memory_dataset)
    info = gpu[0].last_fit_info["stack"]
    assert info["cell"].startswith("fused") and info["graph"]["failure"] is None and info["graph"]["replayed_steps"] > 0, info
    assert info["matmul"] == ("tf32" if torch.backends.cudnn.allow_tf32 else "ieee")
    for name, refs in (("vs_own_cuda_fit", own), ("vs_cpu_stack", cpu)):
        worst = 0.0
        for ref, got in zip(refs, gpu):
            pa, pb = ref.predict(memory_dataset).values, got.predict(memory_dataset).values
            dev = float(np.max(np.abs(pb - pa)) / np.std(pa))
            worst = max(worst, dev)
            assert dev <= 1e-2, (name, dev)
            assert np.corrcoef(pa, pb)[0, 1] > 0.9999
        record_property(f"max_abs_dev_over_std_{name}", worst)
