"""PyTorch calls and kernel-launching calls per training step of the bmm seed stack (CPU, torch.profiler).

Why the step-by-step ``bmm`` kernel was host-bound on a GPU: every call below is a trip through
Python and PyTorch's dispatcher (some 10-20 us on a device machine's host), and every compute
call is a GPU kernel launch. The step is ``_BmmKernel``'s (forward, hand-written backward, value
clipping, Adam) on K members at the paper's shape (hidden 64, 2 layers, 60 steps) with a batch of
``--batch`` windows (the count does not depend on the batch). ``--fused``: the layers a GPU runs
(:class:`~rolling_calib.qlib_adapter.stacked._FusedStack`); here its reference cell runs in place of
PyTorch's fused CUDA cell kernel, and each call of it is counted as the one call and launch it is
on a GPU.

Usage::

    nice -n 10 .venv/bin/python bench/count_stack_calls.py [--members 1] [--batch 8] [--fused]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

#: Top-level ATen calls that launch no kernel (views, metadata, allocation).
NO_KERNEL = {"aten::select", "aten::slice", "aten::view", "aten::as_strided", "aten::transpose", "aten::expand",
             "aten::unsqueeze", "aten::squeeze", "aten::reshape", "aten::_reshape_alias", "aten::alias", "aten::t",
             "aten::permute", "aten::detach", "aten::lift_fresh", "aten::empty", "aten::empty_like",
             "aten::empty_strided", "aten::new_empty", "aten::resize_", "aten::chunk", "aten::split", "aten::item",
             "aten::_local_scalar_dense"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--members", type=int, default=1, help="K, members of the stack")
    p.add_argument("--batch", type=int, default=8, help="windows per member and batch")
    p.add_argument("--fused", action="store_true", help="the fused layers (what a GPU runs)")
    args = p.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile

    from rolling_calib.qlib_adapter import stacked as stk
    from rolling_calib.qlib_adapter.lstm_core import LSTMModel
    from rolling_calib.qlib_adapter.model import RollingLSTM

    torch.set_num_threads(1)
    steps, hidden, layers = 60, 64, 2
    nets = []
    for seed in range(args.members):
        torch.manual_seed(seed)
        nets.append(LSTMModel(d_feat=6, hidden_size=hidden, num_layers=layers))
    kernel = stk._BmmKernel(nets, lead=RollingLSTM(hidden_size=hidden, num_layers=layers), generators=None)
    kernel.stack.fused = args.fused
    cell = "fused cell"
    for name in ("_cell_forward_reference", "_cell_backward_reference"):  # one call, as on a GPU
        def counted(*a, _f=getattr(stk, name)):
            with torch.profiler.record_function(cell):
                return _f(*a)
        setattr(stk, name, counted)
    x, y = torch.randn(args.members, args.batch, steps, 6), torch.randn(args.members, args.batch)
    for _ in range(2):
        kernel.train_step(x, y)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        kernel.train_step(x, y)
    def outermost(e) -> bool:
        parent = e.cpu_parent
        while parent is not None:
            if parent.name.startswith("aten::") or parent.name == cell:
                return False
            parent = parent.cpu_parent
        return True

    top = Counter(e.name for e in prof.events() if (e.name.startswith("aten::") or e.name == cell) and outermost(e))
    calls, launching = sum(top.values()), sum(v for k, v in top.items() if k not in NO_KERNEL)
    n = 10
    t0 = time.perf_counter()
    for _ in range(n):
        kernel.train_step(x, y)
    seconds = (time.perf_counter() - t0) / n
    print(f"{'fused' if args.fused else 'step-by-step'} layers, K={args.members}, {steps} steps x {layers} layers: "
          f"{calls} top-level PyTorch calls per training step, {launching} of them launch a kernel "
          f"({launching / (steps * layers):.0f} per layer and step); host time {seconds * 1e3:.0f} ms per step here")
    print("most frequent:", ", ".join(f"{k.removeprefix('aten::')} {v}" for k, v in top.most_common(12)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
