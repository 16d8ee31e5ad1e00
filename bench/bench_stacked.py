"""Seed-stacked training vs one seed at a time: samples per second per seed, at the demo's and the paper's sizes.

For K = 1, 4 and 10 seeds of one configuration, one training epoch over the same samples
(``--samples`` windows of a synthetic minute store, read through Qlib's provider):

* **unstacked** (the reference path): K ``RollingLSTM`` models, each ``_train_epoch`` in turn
  (Qlib's ``LSTMModel``: ``nn.LSTM`` + linear head);
* **stacked**: the same K models as one :class:`rolling_calib.qlib_adapter.stacked.StackedLSTM`
  trained by the stacked epoch of ``fit_stack`` (each seed its own order, labels, optimiser rows).

Figures: samples per CPU-second summed over the K seeds (CPU; ``torch.set_num_threads(--threads)``),
or per wall-second with the device synchronised (CUDA), and the ratio stacked / unstacked (best of
``--rounds``, the two paths alternating). A ratio above 1 means stacking wins at that size. The
limit: the network's arithmetic (``6 (in + H) 4H`` flops per sample, step and layer for forward
and backward, plus the head) at the rate this device multiplies large float32 matrices
(``torch.mm`` of 2048 x 2048, measured), printed as the fraction of it each path reaches. Sizes:

* ``demo``: ``workflows/demo.yaml`` (hidden 16, 1 layer, batch 512, 30 steps);
* ``paper``: ``workflows/base.yaml`` (hidden 64, 2 layers, batch 2000, 60 steps).

Usage::

    nice -n 10 .venv/bin/python bench/bench_stacked.py [--device cpu|cuda] [--seeds 1,4,10]
        [--sizes demo,paper] [--samples 4000] [--threads 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

SIZES = {
    "demo": dict(hidden_size=16, num_layers=1, batch_size=512, step_len=30),
    "paper": dict(hidden_size=64, num_layers=2, batch_size=2000, step_len=60),
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--seeds", default="1,4,10", help="stack sizes K to measure")
    p.add_argument("--sizes", default="demo,paper", help=f"model sizes ({', '.join(SIZES)})")
    p.add_argument("--samples", type=int, default=4000, help="training windows per epoch and seed")
    p.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    p.add_argument("--store", default=None, help="minute store (default: a small synthetic one in a temp dir)")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds; the best of each path is kept")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return p.parse_args(argv)


def flops_per_sample(size: dict, d_feat: int = 6) -> float:
    """Training flops of one sample: forward + backward (about 3x forward) of the LSTM and its head."""
    hidden, steps = size["hidden_size"], size["step_len"]
    forward = 0.0
    for layer in range(size["num_layers"]):
        width = d_feat if layer == 0 else hidden
        forward += steps * 2 * 4 * hidden * (width + hidden)
    return 3 * (forward + 2 * hidden)


def matmul_rate(device: str, n: int = 2048) -> float:
    """Float32 flops per second of ``torch.mm`` on ``n x n`` matrices here (per CPU-second on CPU)."""
    import torch

    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    now = _clock(device)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(3):
        t0 = now()
        torch.mm(a, b)
        best = min(best, now() - t0)
    return 2 * n**3 / best


def _sampler(size: dict, samples: int):
    """``samples`` training windows (evenly spread over the store) of ``size``'s window length."""
    import numpy as np

    from rolling_calib.qlib_adapter.dataset import MinuteTSDataset, MinuteWindowSampler

    handler = {"class": "MinuteBarHandler", "module_path": "rolling_calib.qlib_adapter.dataset",
               "kwargs": dict(instruments="us25", start_time="2018-01-02", end_time="2018-02-28",
                              fit_start_time="2018-01-02", fit_end_time="2018-02-28", window=size["step_len"])}
    ds = MinuteTSDataset(handler=handler, segments={"train": ("2018-01-02", "2018-02-28")},
                         step_len=size["step_len"], sample_stride=1)
    full = ds.prepare("train")
    pick = np.linspace(0, len(full) - 1, min(samples, len(full))).astype(np.int64)
    return ds, MinuteWindowSampler(full.panel, full.positions[pick], step_len=size["step_len"], norm=full.norm)


def _models(size: dict, seeds, device: str):
    from rolling_calib.qlib_adapter.model import RollingLSTM

    kw = {k: v for k, v in size.items() if k != "step_len"}
    return [RollingLSTM(**kw, seed=s, device=device, n_epochs=1) for s in seeds]


def _clock(device: str):
    import torch

    if device.startswith("cuda"):
        def now() -> float:
            torch.cuda.synchronize()
            return time.perf_counter()
        return now
    return time.process_time


def _stacked_epoch(size: dict, seeds, sampler, device: str, *, background: bool | None = None):
    """A callable running one stacked epoch of fresh models of ``seeds`` (after one warm-up epoch).

    ``background``: the batch feed's mode (:class:`rolling_calib.qlib_adapter.model.BatchFeed`; None: its default).
    """
    from rolling_calib.qlib_adapter import stacked as stk

    models = _models(size, seeds, device)
    models[0].feed_background = background
    members, stack, optimizer = stk.start_stack(models, sampler)

    def epoch() -> None:
        stk._train_epoch(stack, optimizer, members, sampler, models[0])

    epoch()  # warm-up (allocator, kernels)
    return epoch


def _unstacked_epoch(size: dict, seeds, sampler, device: str):
    """A callable running one epoch of each of ``seeds``' models in turn (after one warm-up epoch)."""
    import numpy as np

    models = _models(size, seeds, device)
    for m in models:
        m.fit_scales(sampler)

    def epoch() -> None:
        for m in models:
            m._train_epoch(sampler, np.random.default_rng([m.seed, 0]))

    epoch()
    return epoch


def measure(size_name: str, k: int, sampler, *, device: str, rounds: int, limit: float) -> dict:
    """One epoch of K seeds, unstacked and stacked (alternating, best of ``rounds``); samples/s over the seeds."""
    size = SIZES[size_name]
    now = _clock(device)
    seeds = list(range(k))
    runs = {"unstacked": _unstacked_epoch(size, seeds, sampler, device),
            "stacked": _stacked_epoch(size, seeds, sampler, device)}
    best = {name: float("inf") for name in runs}
    for _ in range(rounds):
        for name, epoch in runs.items():
            t0 = now()
            epoch()
            best[name] = min(best[name], now() - t0)
    n = k * len(sampler)
    flops = flops_per_sample(size)
    out = {"size": size_name, "seeds": k, "samples_per_seed": len(sampler), "ratio": best["unstacked"] / best["stacked"]}
    for name in runs:
        out[f"{name}_samples_per_s"] = n / best[name]
        out[f"per_seed_{name}"] = len(sampler) / best[name]
        out[f"{name}_fraction_of_limit"] = n / best[name] * flops / limit
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from data_prep import build_synthetic_store, init_qlib

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_stacked: --device cuda, but torch sees no GPU here; nothing measured")
        return 2
    torch.set_num_threads(args.threads)
    store = Path(args.store) if args.store else build_synthetic_store(
        Path(tempfile.mkdtemp(prefix="bench_stacked_")), start="2018-01-01", end="2018-02-28",
        symbols=["AAPL", "F", "MSFT", "JPM", "XOM"], seed=0)
    init_qlib(store)
    limit = matmul_rate(args.device)
    if not args.json:
        print(f"limit: torch.mm float32 2048^2 runs at {limit / 1e9:.1f} GFLOP/s here", flush=True)
    rows = []
    for size_name in args.sizes.split(","):
        _, sampler = _sampler(SIZES[size_name], args.samples)
        for k in (int(s) for s in args.seeds.split(",")):
            rows.append(measure(size_name, k, sampler, device=args.device, rounds=args.rounds, limit=limit))
            if not args.json:
                r = rows[-1]
                unit = "CPU-s" if args.device == "cpu" else "s"
                print(f"{size_name:5s} K={k:2d}: unstacked {r['unstacked_samples_per_s']:8.0f} samples/{unit} "
                      f"({r['per_seed_unstacked']:7.0f} per seed, {r['unstacked_fraction_of_limit']:.0%} of limit), "
                      f"stacked {r['stacked_samples_per_s']:8.0f} ({r['per_seed_stacked']:7.0f} per seed, "
                      f"{r['stacked_fraction_of_limit']:.0%}): stacked/unstacked {r['ratio']:.2f}x", flush=True)
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU, {args.threads} thread(s)"
    if args.json:
        print(json.dumps({"device": device, "matmul_flops_per_s": limit, "rows": rows}, indent=2))
    else:
        print(f"device: {device}; samples/s summed over the K seeds of one epoch ({args.samples} windows per seed)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
