"""The batch feed: how much of a training epoch the GPU is busy, with batches cut on the device or on the host.

For K seeds (``--seeds``, default 1, 4, 10, 20; K = 1 is one ``RollingLSTM``, K > 1 a seed stack on
``--kernel``) and each size, one training epoch over the same ``--samples`` windows per seed:

* ``compute_only``: the epoch's batches cut beforehand and already on the device, then the
  training steps alone (forward, backward, clip, optimiser): the time the device needs anyway;
* ``resident``: the segment moved to the device once, each batch gathered and normalised there
  by index (:class:`~rolling_calib.qlib_adapter.lstm_core.DeviceWindows`; ``feed: auto`` on a GPU);
* ``background``: batches cut on the host by a producer thread into pinned memory while the
  device computes, copied ``non_blocking`` (:class:`~rolling_calib.qlib_adapter.lstm_core.BatchFeed`);
* ``inline``: the same host cut, each batch when asked.

Busy = compute_only time / epoch time (1.0: the feed never keeps the device waiting); on CUDA
also the profiler's view of the resident epoch (GPU kernel time / wall time,
``bench_stacked.gpu_busy``). Samples per second over the K seeds and the share of the float32
matmul rate (measured in the same run) for every feed. Times are wall seconds with the device
synchronised on CUDA, process CPU seconds on CPU (where the run only checks that the bench works).
Data: a random-walk panel in memory (no Qlib store), as ``bench_stacked.py``.

Usage::

    .venv/bin/python bench/bench_gpu_feed.py --device cuda [--sizes demo,paper] [--seeds 1,4,10,20]
        [--samples 16000] [--kernel auto|bmm|streams] [--json] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys

from bench_stacked import (SIZES, add_common, check_device, clock, device_name, flops_per_sample, gpu_busy, matmul_rate,
                           models, one_at_a_time_epoch, sampler, stacked_epoch, write_json)

FEEDS = ("compute_only", "resident", "background", "inline")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common(p)
    p.set_defaults(device="cuda")
    p.add_argument("--kernel", default="auto", help="the stacks' kernel: auto (choose_kernel), bmm or streams")
    p.add_argument("--no-profile", action="store_true", help="skip the profiled epoch (CUDA)")
    return p.parse_args(argv)


def _timed(fn, device: str) -> float:
    now = clock(device)
    t0 = now()
    fn()
    return now() - t0


def compute_only(size: dict, seeds, data, device: str, *, kernel: str):
    """A callable running the epoch's training steps on batches cut beforehand and resident on the device."""
    import numpy as np
    import torch

    from rolling_calib.qlib_adapter import stacked as stk

    ms = models(size, seeds, device, feed="resident")
    members = stk.start_stack(ms, data)
    resident = stk.stack_residents(members, [data])[0]
    orders = torch.from_numpy(np.stack([m.rng.permutation(len(data)) for m in members])).to(ms[0].device)
    slots = torch.arange(len(ms), device=ms[0].device)
    batches = [(resident.windows(idx.reshape(-1)).view(len(ms), -1, data.step_len, 6), resident.labels[slots[:, None], idx])
               for idx in (orders[:, lo : lo + size["batch_size"]] for lo in range(0, len(data), size["batch_size"]))]
    if len(ms) == 1:   # one model: RollingLSTM._train_epoch's steps, on its own network and optimiser
        m = ms[0]

        def steps() -> None:
            m.lstm_model.train()
            total = torch.zeros((), dtype=torch.float64, device=m.device)
            for x, y in batches:
                loss = torch.mean((m.lstm_model(x[0]).reshape(-1) - y[0]) ** 2)
                m.train_optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_value_(m.lstm_model.parameters(), m.grad_clip)
                m.train_optimizer.step()
                total += loss.detach().double() * y.shape[1]
            float(total)
    else:
        ker = stk.make_kernel(kernel, members, ms[0])

        def steps() -> None:
            totals = torch.zeros(len(ms), dtype=torch.float64, device=ms[0].device)
            for x, y in batches:
                totals += ker.train_step(x, y).double() * y.shape[1]
            totals.cpu()

    steps()
    return steps


def measure(size_name: str, k: int, data, *, args: argparse.Namespace, limit: float) -> dict:
    size = SIZES[size_name]
    seeds = list(range(k))
    kernel = args.kernel
    if k > 1 and kernel == "auto":
        from rolling_calib.qlib_adapter.stacked import choose_kernel

        lead = models(size, seeds[:1], args.device, feed="auto")[0]
        choice = choose_kernel("auto", lead, members=k, batch=min(size["batch_size"], len(data)), steps=size["step_len"])
        kernel = choice["kernel"]
    out = {"size": size_name, "seeds": k, "samples_per_seed": len(data), "kernel": None if k == 1 else kernel}
    runs = {"compute_only": compute_only(size, seeds, data, args.device, kernel=kernel)}
    for feed, background in (("resident", None), ("background", True), ("inline", False)):
        mode = "resident" if feed == "resident" else "host"
        if k > 1:
            runs[feed], _ = stacked_epoch(size, seeds, data, args.device, kernel=kernel, feed=mode, background=background)
        elif feed == "resident":
            runs[feed], _ = one_at_a_time_epoch(size, seeds, data, args.device, feed=mode)
        else:
            runs[feed] = _with_background(size, seeds, data, args.device, background)
    n, flops = k * len(data), flops_per_sample(size)
    times = {name: _timed(run, args.device) for name, run in runs.items()}
    for name, seconds in times.items():
        out[name] = {"epoch_s": seconds, "samples_per_s": n / seconds, "fraction_of_matmul_rate": n / seconds * flops / limit,
                     "busy": times["compute_only"] / seconds}
    if args.device.startswith("cuda") and not args.no_profile:
        out["resident"].update(gpu_busy(runs["resident"], times["resident"]))
    return out


def _with_background(size: dict, seeds, data, device: str, background: bool):
    """One model's epoch on the host feed with its producer thread on or off (after a warm-up epoch)."""
    import numpy as np

    m = models(size, seeds, device, feed="host")[0]
    m.fit_scales(data)
    m.feed_background = background

    def epoch() -> None:
        m._train_epoch(data, np.random.default_rng([m.seed, 0]))

    epoch()
    return epoch


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if (code := check_device(args, "bench_gpu_feed")) is not None:
        return code
    torch.set_num_threads(args.threads)
    limit = matmul_rate(args.device)
    result = {"bench": "bench_gpu_feed", "device": device_name(args.device, args.threads), "torch": torch.__version__,
              "matmul_flops_per_s": limit, "rows": []}
    unit = "CPU-s" if args.device == "cpu" else "s"
    for size_name in args.sizes.split(","):
        data = sampler(SIZES[size_name], args.samples, instruments=args.instruments, days=args.days)
        for k in (int(s) for s in args.seeds.split(",")):
            row = measure(size_name, k, data, args=args, limit=limit)
            result["rows"].append(row)
            write_json(args.out, result)
            if not args.json:
                what = "one model" if k == 1 else f"stack of {k} ({row['kernel']})"
                print(f"{size_name:5s} {what}: " + "  ".join(
                    f"{feed} {row[feed]['samples_per_s']:,.0f}/{unit} (busy {row[feed]['busy']:.0%}"
                    + (f", profiled {row[feed]['gpu_busy']:.0%}" if row[feed].get("gpu_busy") is not None else "")
                    + f", {row[feed]['fraction_of_matmul_rate']:.1%} of mm)" for feed in FEEDS), flush=True)
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['device']}; samples/{unit} over the K seeds; busy = compute-only time / epoch time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
