"""The GPU feed: how much of a training epoch the GPU is busy, with batches cut in the background or in line.

For one training epoch of ``RollingLSTM`` (and of a seed stack of ``--stack`` seeds) on a CUDA
device, over the same ``--samples`` windows of a synthetic minute store:

* ``compute only``: the epoch's batches cut beforehand and resident on the device, then the
  training steps alone (forward, backward, clip, optimiser): the time the GPU needs anyway;
* ``background feed`` (the default on CUDA, :class:`rolling_calib.qlib_adapter.model.BatchFeed`):
  a producer thread cuts the next batches into pinned memory while the device computes, copies
  are ``non_blocking``, the loss is summed on the device and read once per epoch;
* ``inline feed``: the same loop with each batch cut when asked (``feed_background = False``).

Busy fraction = compute-only time / epoch time (1.0: the feed never keeps the GPU waiting).
Times are wall seconds with the device synchronised. Also prints the feed's own wait time.

Usage (needs a CUDA GPU; exits 2 without one)::

    .venv/bin/python bench/bench_gpu_feed.py [--size paper|demo] [--samples 40000] [--stack 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench_stacked import SIZES, _models, _sampler, _stacked_epoch


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="paper", choices=sorted(SIZES))
    p.add_argument("--samples", type=int, default=40000, help="training windows per epoch")
    p.add_argument("--stack", type=int, default=10, help="seeds of the stacked run (0: skip it)")
    p.add_argument("--store", default=None, help="minute store (default: a small synthetic one in a temp dir)")
    p.add_argument("--device", default="cuda", help="cuda (the point); cpu only checks that the bench runs")
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def _synced(fn) -> float:
    import torch

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def _compute_only(model, sampler) -> float:
    """The epoch's training steps with every batch already on the device."""
    import numpy as np
    import torch

    order = np.random.default_rng([model.seed, 0]).permutation(len(sampler))
    batches = []
    for lo in range(0, len(order), model.batch_size):
        x, y = sampler.batch(order[lo : lo + model.batch_size])
        batches.append((torch.from_numpy(x).to(model.device), torch.from_numpy((y - model.label_mean) / model.label_std).to(model.device)))

    def steps() -> None:
        model.lstm_model.train()
        total = torch.zeros((), dtype=torch.float64, device=model.device)
        for xt, yt in batches:
            loss = torch.mean((model.lstm_model(xt).reshape(-1) - yt) ** 2)
            model.train_optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_value_(model.lstm_model.parameters(), model.grad_clip)
            model.train_optimizer.step()
            total += loss.detach().double() * len(yt)
        float(total)

    return _synced(steps)


def measure_single(size: str, sampler, device: str) -> dict:
    import numpy as np

    model = _models(SIZES[size], [0], device)[0]
    model.fit_scales(sampler)
    model._train_epoch(sampler, np.random.default_rng(99))  # warm-up: cuDNN plans, allocator
    compute = _compute_only(model, sampler)
    out = {"compute_only_s": compute}
    for name, background in (("background", True), ("inline", False)):
        model.feed_background = background
        out[f"{name}_s"] = _synced(lambda: model._train_epoch(sampler, np.random.default_rng([model.seed, 0])))
        out[f"{name}_busy"] = compute / out[f"{name}_s"]
    out["samples_per_s_background"] = len(sampler) / out["background_s"]
    return out


def measure_stack(size: str, sampler, k: int, device: str) -> dict:
    out = {}
    for name, background in (("background", True), ("inline", False)):
        out[f"{name}_s"] = _synced(_stacked_epoch(SIZES[size], list(range(k)), sampler, device, background=background))
    out["samples_per_s_background"] = k * len(sampler) / out["background_s"]
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_gpu_feed: torch sees no CUDA GPU here (torch.cuda.is_available() is False); nothing measured")
        return 2
    from data_prep import build_synthetic_store, init_qlib

    store = Path(args.store) if args.store else build_synthetic_store(
        Path(tempfile.mkdtemp(prefix="bench_gpu_feed_")), start="2018-01-01", end="2018-02-28",
        symbols=["AAPL", "F", "MSFT", "JPM", "XOM"], seed=0)
    init_qlib(store)
    _, sampler = _sampler(SIZES[args.size], args.samples)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU (a smoke run: no GPU to keep busy)"
    result = {"device": name, "size": args.size, "samples": len(sampler),
              "single": measure_single(args.size, sampler, args.device)}
    if args.stack:
        result["stack"] = {"seeds": args.stack, **measure_stack(args.size, sampler, args.stack, args.device)}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    s = result["single"]
    print(f"{result['device']}, {args.size} size, {len(sampler)} windows per epoch")
    print(f"one seed: compute only {s['compute_only_s']:.3f} s; background feed {s['background_s']:.3f} s "
          f"(GPU busy {s['background_busy']:.0%}); inline feed {s['inline_s']:.3f} s (busy {s['inline_busy']:.0%}); "
          f"{s['samples_per_s_background']:.0f} samples/s")
    if args.stack:
        t = result["stack"]
        print(f"stack of {t['seeds']}: background feed {t['background_s']:.3f} s, inline {t['inline_s']:.3f} s; "
              f"{t['samples_per_s_background']:.0f} samples/s over all seeds "
              f"({t['samples_per_s_background'] / s['samples_per_s_background']:.2f}x one seed's)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
