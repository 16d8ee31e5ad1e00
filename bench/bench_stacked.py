"""Seed stacks against one seed at a time: samples per second, share of the matmul rate, GPU busy, per size and K.

For K seeds of one configuration (``--seeds``, default 1, 4, 10, 20), one training epoch over the
same ``--samples`` windows per seed, three ways:

* ``one_at_a_time`` (the reference path): K ``RollingLSTM`` models, each ``_train_epoch`` in turn
  (Qlib's ``LSTMModel``: ``nn.LSTM``, cuDNN on a GPU, + linear head);
* ``bmm``: the K models as one seed stack on the batched kernel (every step one batched GEMM over
  the seeds, hand-written backward; :mod:`rolling_calib.qlib_adapter.stacked`);
* ``streams``: the K models' own ``nn.LSTM`` on K CUDA streams (on a CPU: one after another).

Each path gets its batches from the feed ``--feed`` picks (``auto``: cut on the device from
segments moved there once on a GPU, on the host on a CPU; :func:`~rolling_calib.qlib_adapter.lstm_core.plan_feed`).
Figures, best of ``--rounds`` (the paths alternating, after one warm-up epoch each):

* samples per second summed over the K seeds (per CPU-second on CPU, ``torch.set_num_threads(--threads)``;
  per wall-second with the device synchronised on CUDA), and each stack's ratio to one at a time;
* the share of the device's float32 matmul rate it reaches: ``samples/s x flops per sample / rate``,
  with ``6 (in + H) 4H`` flops per sample, step and layer for forward and backward (plus the
  head), and the rate of ``torch.mm`` on 2048 x 2048 float32 measured in the same run;
* GPU busy (CUDA): the union of the GPU's kernel intervals in one more epoch run under
  ``torch.profiler`` (CUPTI), divided by the best unprofiled epoch's wall time;
* the prediction rate of one model (``predict``, forward only, chunks of 8,192), for
  ``bench/estimate_paper_compute.py --gpu-eval-sps``.

The data is a random-walk panel in memory (``--instruments`` x ``--days`` sessions of 390
minutes; :mod:`rolling_calib.qlib_adapter.synthetic_panel`): no Qlib store, so it runs where
only the model's code is installed. Sizes:

* ``demo``: ``workflows/demo.yaml`` (hidden 16, 1 layer, batch 512, 30 steps);
* ``paper``: ``workflows/base.yaml`` (hidden 64, 2 layers, batch 2000, 60 steps).

``--rows PATH:SIZE:K[:PRECISION],...`` times one path per row instead, in the order given (the
device script ``bench/gpu_check_stack.sh`` puts the most informative first), each row under
``--row-limit`` seconds (a row over it is recorded as such and the next one runs), the JSON
rewritten after every row. ``PATH`` is a path or ``bmm_eager`` (the bmm kernel without its CUDA
graph); ``PRECISION`` ``default`` (torch's settings: cuDNN's LSTM in TF32, and the bmm kernel's
matmuls with it) or ``ieee`` (cuDNN's TF32 off for the row, so the bmm kernel's too): both sides of
a ratio compute at the same precision, and each row says which (``precision``, ``kernel_run``).
Every stack row's ratio is to the ``one_at_a_time`` row of its size and precision (one seed at a
time has the same rate per sample for any K).

Usage::

    nice -n 10 .venv/bin/python bench/bench_stacked.py [--device cpu|cuda] [--seeds 1,4,10,20]
        [--sizes demo,paper] [--samples 16000] [--threads 1] [--feed auto] [--json] [--out FILE]
    .venv/bin/python bench/bench_stacked.py --device cuda --rows bmm:paper:10,one_at_a_time:paper:1 \
        [--row-limit 25] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

SIZES = {
    "demo": dict(hidden_size=16, num_layers=1, batch_size=512, step_len=30),
    "paper": dict(hidden_size=64, num_layers=2, batch_size=2000, step_len=60),
}
PATHS = ("one_at_a_time", "bmm", "streams")
#: What a ``--rows`` row may time: the paths, and ``bmm_eager`` (the bmm kernel without its CUDA graph).
ROW_PATHS = (*PATHS, "bmm_eager")
PRECISIONS = ("default", "ieee")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common(p)
    p.add_argument("--paths", default=",".join(PATHS), help=f"what to time ({', '.join(PATHS)})")
    p.add_argument("--rounds", type=int, default=2, help="alternating timed rounds; the best of each path is kept")
    p.add_argument("--no-profile", action="store_true", help="skip the profiled epoch (GPU busy)")
    p.add_argument("--rows", default=None,
                   help="instead of sizes x seeds x paths: rows PATH:SIZE:K[:PRECISION], comma-separated, run in this "
                        f"order (PATH one of {', '.join(ROW_PATHS)}; PRECISION default (torch's TF32 settings) or ieee "
                        "(cuDNN's TF32 off, so the stack's matmuls too)); each stack row's ratio to the one_at_a_time row "
                        "of its size and precision")
    p.add_argument("--row-limit", type=float, default=0.0,
                   help="seconds per --rows row (0: none); a row over it is recorded as such and the next one runs")
    return p.parse_args(argv)


def add_common(p: argparse.ArgumentParser) -> None:
    """The options both GPU benches take."""
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--sizes", default="demo,paper", help=f"model sizes ({', '.join(SIZES)})")
    p.add_argument("--seeds", default="1,4,10,20", help="stack sizes K")
    p.add_argument("--samples", type=int, default=16000, help="training windows per seed and epoch")
    p.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    p.add_argument("--feed", default="auto", help="auto, resident or host (lstm_core.FEEDS)")
    p.add_argument("--instruments", type=int, default=5, help="symbols of the in-memory panel")
    p.add_argument("--days", type=int, default=40, help="sessions of the in-memory panel")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--out", default=None, help="also write the JSON here, rewritten after every row")


# ------------------------------------------------------------------------------ shared pieces
def flops_per_sample(size: dict, d_feat: int = 6) -> float:
    """Training flops of one sample: forward + backward (about 3x forward) of the LSTM and its head."""
    hidden, steps = size["hidden_size"], size["step_len"]
    forward = 0.0
    for layer in range(size["num_layers"]):
        width = d_feat if layer == 0 else hidden
        forward += steps * 2 * 4 * hidden * (width + hidden)
    return 3 * (forward + 2 * hidden)


def clock(device: str):
    """Seconds: wall with the device synchronised (CUDA), else process CPU time."""
    import torch

    if device.startswith("cuda"):
        def now() -> float:
            torch.cuda.synchronize()
            return time.perf_counter()
        return now
    return time.process_time


def matmul_rate(device: str, n: int = 2048, *, tf32: bool = False) -> float:
    """Float32 flops per second of ``torch.mm`` on ``n x n`` matrices here (per CPU-second on CPU); best of 3.

    ``tf32``: with ``torch.backends.cuda.matmul.allow_tf32`` on for the measurement (CUDA; a CPU ignores it).
    """
    import torch

    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    now = clock(device)
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        torch.mm(a, b)
        best = float("inf")
        for _ in range(3):
            t0 = now()
            torch.mm(a, b)
            best = min(best, now() - t0)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    return 2 * n**3 / best


def sampler(size: dict, samples: int, *, instruments: int, days: int):
    """``samples`` training windows of ``size``'s length, evenly spread over an in-memory panel's train segment."""
    import numpy as np

    from rolling_calib.qlib_adapter.dataset import MinuteWindowSampler
    from rolling_calib.qlib_adapter.synthetic_panel import panel_dataset, random_walk_panel

    ds = panel_dataset(random_walk_panel(instruments=instruments, days=days, seed=0), step_len=size["step_len"])
    full = ds.prepare("train")
    if len(full) < samples:
        raise SystemExit(f"--samples {samples}: the panel has {len(full)} training windows; raise --days or --instruments")
    pick = np.linspace(0, len(full) - 1, samples).astype(np.int64)
    return MinuteWindowSampler(full.panel, full.positions[pick], step_len=size["step_len"], norm=full.norm,
                               label=full.label)


def models(size: dict, seeds, device: str, *, feed: str):
    """Fresh ``RollingLSTM`` models of ``size``, one per seed (the first carries ``feed``)."""
    from rolling_calib.qlib_adapter.model import RollingLSTM

    kw = {k: v for k, v in size.items() if k != "step_len"}
    out = [RollingLSTM(**kw, seed=s, device=device, n_epochs=1) for s in seeds]
    for m in out:
        m.feed = feed
    return out


def one_at_a_time_epoch(size: dict, seeds, data, device: str, *, feed: str):
    """A callable running one epoch of each of ``seeds``' models in turn (after one warm-up epoch); its feed plan."""
    import numpy as np

    from rolling_calib.qlib_adapter.lstm_core import plan_feed

    ms = models(size, seeds, device, feed=feed)
    for m in ms:
        m.fit_scales(data)
    plan = plan_feed(feed, ms[0].device, [data])
    resident = ms[0].resident(data) if plan["mode"] == "resident" else None  # the same labels for every seed

    def epoch() -> None:
        for m in ms:
            m._train_epoch(data, np.random.default_rng([m.seed, 0]), resident=resident)

    epoch()
    return epoch, plan


def stacked_epoch(size: dict, seeds, data, device: str, *, kernel: str, feed: str, background: bool | None = None,
                  graph: bool = True):
    """A callable running one stacked epoch on ``kernel`` (after one warm-up epoch); its feed plan.

    ``background``: the host feed's thread (:class:`~rolling_calib.qlib_adapter.lstm_core.BatchFeed`; None: its default).
    ``graph``: the bmm kernel's CUDA graph (``RollingLSTM.stack_graph``). The callable's ``kernel``
    attribute is the kernel (its ``describe()`` says how it ran).
    """
    from rolling_calib.qlib_adapter import stacked as stk
    from rolling_calib.qlib_adapter.lstm_core import plan_feed

    ms = models(size, seeds, device, feed=feed)
    ms[0].feed_background = background
    ms[0].stack_graph = graph
    members = stk.start_stack(ms, data)
    ker = stk.make_kernel(kernel, members, ms[0])
    plan = plan_feed(feed, ms[0].device, [data], label_rows=len(ms))
    resident = stk.stack_residents(members, [data])[0] if plan["mode"] == "resident" else None

    def epoch() -> None:
        stk._train_epoch(ker, members, data, ms[0], resident=resident)

    epoch.kernel = ker
    epoch()
    return epoch, plan


def gpu_busy(epoch, best_wall: float) -> dict:
    """One more epoch under ``torch.profiler``: the union of its GPU kernel intervals / ``best_wall`` (CUDA only)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            epoch()
            torch.cuda.synchronize()
            profiled = time.perf_counter() - t0
    except Exception as exc:  # the profiler (CUPTI) is not everywhere: the other figures stand without it
        return {"gpu_busy": None, "profile_error": f"{type(exc).__name__}: {exc}"}
    spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                   if e.device_type == DeviceType.CUDA and not e.name.startswith("Memcpy"))
    union, end = 0.0, float("-inf")
    for a, b in spans:
        if b > end:
            union += b - max(a, end)
            end = b
    kernel_s = union / 1e6
    return {"gpu_busy": min(1.0, kernel_s / best_wall), "gpu_kernel_s": kernel_s, "kernels": len(spans),
            "profiled_epoch_s": profiled, "gpu_busy_profiled": kernel_s / profiled}


def predict_rate(size: dict, data, device: str, *, feed: str) -> float:
    """Samples per second of ``predict`` over ``data`` (forward only, best of 2 after a warm-up)."""
    import numpy as np
    import torch

    from rolling_calib.qlib_adapter.lstm_core import EVAL_CHUNK, DeviceWindows, plan_feed

    m = models(size, [0], device, feed=feed)[0]
    m.lstm_model.eval()
    now = clock(device)
    resident = DeviceWindows(data, m.device) if plan_feed(feed, m.device, [data], label_rows=0)["mode"] == "resident" else None

    def run() -> None:
        with torch.inference_mode():
            for lo in range(0, len(data), EVAL_CHUNK):
                hi = min(lo + EVAL_CHUNK, len(data))
                x = (resident.windows(torch.arange(lo, hi, device=m.device)) if resident is not None
                     else torch.from_numpy(data.batch(np.arange(lo, hi))[0]).to(m.device))
                m.lstm_model(x).reshape(-1).double().cpu()

    run()
    best = float("inf")
    for _ in range(2):
        t0 = now()
        run()
        best = min(best, now() - t0)
    return len(data) / best


def device_name(device: str, threads: int) -> str:
    import torch

    return torch.cuda.get_device_name() if device.startswith("cuda") else f"CPU, {threads} thread(s)"


def write_json(path: str | None, result: dict) -> None:
    """Write ``result`` to ``path`` atomically (a partial run leaves its rows so far)."""
    if path is None:
        return
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(tmp, target)


def check_device(args: argparse.Namespace, name: str) -> int | None:
    """Exit code 2 (with a line saying why) when ``--device cuda`` has no GPU; None when the device is there."""
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"{name}: --device cuda, but torch sees no GPU here (torch.cuda.is_available() is False); nothing measured")
        return 2
    return None


# ------------------------------------------------------------------------------ this bench
def measure(size_name: str, k: int, data, *, args: argparse.Namespace, limit: float, paths) -> dict:
    """One epoch of K seeds on each path (alternating, best of ``--rounds``); samples/s over the seeds."""
    size = SIZES[size_name]
    now = clock(args.device)
    seeds = list(range(k))
    runs, plans = {}, {}
    for name in paths:
        if name == "one_at_a_time":
            runs[name], plans[name] = one_at_a_time_epoch(size, seeds, data, args.device, feed=args.feed)
        else:
            runs[name], plans[name] = stacked_epoch(size, seeds, data, args.device, kernel=name, feed=args.feed)
    best = {name: float("inf") for name in runs}
    for _ in range(args.rounds):
        for name, epoch in runs.items():
            t0 = now()
            epoch()
            best[name] = min(best[name], now() - t0)
    n, flops = k * len(data), flops_per_sample(size)
    out = {"size": size_name, "seeds": k, "samples_per_seed": len(data), "feed": plans[paths[0]]["mode"]}
    for name in runs:
        row = {"epoch_s": best[name], "samples_per_s": n / best[name], "fraction_of_matmul_rate": n / best[name] * flops / limit}
        if "one_at_a_time" in runs and name != "one_at_a_time":
            row["vs_one_at_a_time"] = best["one_at_a_time"] / best[name]
        if args.device.startswith("cuda") and not args.no_profile:
            row.update(gpu_busy(runs[name], best[name]))
        if hasattr(runs[name], "kernel"):
            row["kernel_run"] = runs[name].kernel.describe()
        out[name] = row
    del runs
    return out


# ------------------------------------------------------------------------------ --rows: one path per row
class RowTimeout(BaseException):
    """A ``--rows`` row ran past ``--row-limit`` (a BaseException: no ``except Exception`` on the way swallows it)."""


def parse_rows(spec: str) -> list[tuple[str, str, int, str]]:
    """``PATH:SIZE:K[:PRECISION]`` items -> ``(path, size, k, precision)``; a bad item is named.

    >>> parse_rows("bmm:paper:10,one_at_a_time:paper:1:ieee")
    [('bmm', 'paper', 10, 'default'), ('one_at_a_time', 'paper', 1, 'ieee')]
    >>> parse_rows("bmm:huge:10")
    Traceback (most recent call last):
    ...
    SystemExit: --rows item 'bmm:huge:10': expected PATH:SIZE:K[:PRECISION] with SIZE one of demo, paper
    """
    rows = []
    for item in (i.strip() for i in spec.split(",") if i.strip()):
        parts = item.split(":")
        ok = (len(parts) in (3, 4) and parts[0] in ROW_PATHS and parts[1] in SIZES and parts[2].isdigit()
              and int(parts[2]) > 0 and (len(parts) == 3 or parts[3] in PRECISIONS))
        if not ok:
            raise SystemExit(f"--rows item {item!r}: expected PATH:SIZE:K[:PRECISION] with "
                             + (f"SIZE one of {', '.join(SIZES)}" if len(parts) > 1 and parts[1] not in SIZES else
                                f"PATH one of {', '.join(ROW_PATHS)}, K >= 1, PRECISION one of {', '.join(PRECISIONS)}"))
        rows.append((parts[0], parts[1], int(parts[2]), parts[3] if len(parts) == 4 else "default"))
    return rows


@contextlib.contextmanager
def row_limit(seconds: float):
    """Raise :class:`RowTimeout` in this (main) thread after ``seconds`` (0: no limit)."""
    if seconds <= 0:
        yield
        return

    def expire(signum, frame):
        raise RowTimeout(f"over the row limit of {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def precision(name: str):
    """``ieee``: cuDNN's TF32 off for the row (the stack follows it); ``default``: torch's settings as they are."""
    import torch

    before = torch.backends.cudnn.allow_tf32
    if name == "ieee":
        torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = before


def measure_row(path: str, size_name: str, k: int, data, *, args: argparse.Namespace, limit: float):
    """One path's epoch of K seeds: best of ``--rounds`` after a warm-up epoch, how the kernel ran; and the epoch."""
    import torch

    size = SIZES[size_name]
    seeds = list(range(k))
    if path == "one_at_a_time":
        epoch, plan = one_at_a_time_epoch(size, seeds, data, args.device, feed=args.feed)
    else:
        epoch, plan = stacked_epoch(size, seeds, data, args.device, kernel=path.removesuffix("_eager"), feed=args.feed,
                                    graph=not path.endswith("_eager"))
    now = clock(args.device)
    best = float("inf")
    for _ in range(args.rounds):
        t0 = now()
        epoch()
        best = min(best, now() - t0)
    n = k * len(data)
    row = {"epoch_s": best, "samples_per_s": n / best, "fraction_of_matmul_rate": n / best * flops_per_sample(size) / limit,
           "feed": plan["mode"],
           "precision": {"cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
                         "matmul_allow_tf32_outside_the_stack": bool(torch.backends.cuda.matmul.allow_tf32)}}
    if hasattr(epoch, "kernel"):
        row["kernel_run"] = epoch.kernel.describe()
    return row, epoch


def ratios(rows: list[dict]) -> list[dict]:
    """Each stack row's samples/s over the one_at_a_time row's of the same size and precision (any K: per sample)."""
    base = {(r["size"], r["precision_setting"]): r for r in rows if r["path"] == "one_at_a_time" and "samples_per_s" in r}
    out = []
    for r in rows:
        ref = base.get((r["size"], r["precision_setting"]))
        if r["path"] != "one_at_a_time" and "samples_per_s" in r and ref is not None:
            out.append({"row": r["row"], "vs_one_at_a_time": r["samples_per_s"] / ref["samples_per_s"], "baseline": ref["row"]})
    return out


def run_rows(args: argparse.Namespace, result: dict, limit: float, unit: str) -> None:
    """The ``--rows`` rows in order, each under ``--row-limit``; the JSON rewritten after every row."""
    import torch

    data: dict = {}
    for path, size_name, k, prec in parse_rows(args.rows):
        label = f"{path}:{size_name}:{k}:{prec}"
        row = {"row": label, "path": path, "size": size_name, "seeds": k, "precision_setting": prec}
        t0 = time.perf_counter()
        try:
            if size_name not in data:  # once per size, outside the row's limit
                data[size_name] = sampler(SIZES[size_name], args.samples, instruments=args.instruments, days=args.days)
            row["samples_per_seed"] = len(data[size_name])
            with row_limit(args.row_limit), precision(prec):
                timed, epoch = measure_row(path, size_name, k, data[size_name], args=args, limit=limit)
                row.update(timed)
                if args.device.startswith("cuda") and not args.no_profile:
                    write_json(args.out, {**result, "rows": [*result["rows"], row]})  # the timing, should the profiler fail
                    row.update(gpu_busy(epoch, row["epoch_s"]))
                del epoch
        except (RowTimeout, Exception) as exc:  # recorded; the next row runs
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        row["row_s"] = round(time.perf_counter() - t0, 2)
        if args.device.startswith("cuda"):
            with contextlib.suppress(Exception):
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
        result["rows"].append(row)
        result["ratios"] = ratios(result["rows"])
        write_json(args.out, result)
        if not args.json:
            print(describe_row(row, unit), flush=True)
    for size_name, d in data.items():  # last: the rows matter more
        try:
            with row_limit(args.row_limit):
                result["predict_samples_per_s"][size_name] = predict_rate(SIZES[size_name], d, args.device, feed=args.feed)
        except (RowTimeout, Exception) as exc:
            result["predict_samples_per_s"][size_name] = None
            result.setdefault("errors", []).append(f"predict {size_name}: {type(exc).__name__}: {exc}")
        write_json(args.out, result)
    if not args.json:
        for r in result["ratios"]:
            print(f"{r['row']}: {r['vs_one_at_a_time']:.2f}x {r['baseline']}", flush=True)


def describe_row(row: dict, unit: str) -> str:
    """One text line of a ``--rows`` row."""
    head = f"{row['row']:32s} ({row['row_s']:.0f} s)"
    if "samples_per_s" not in row:
        return f"{head}: {row['error']}"
    text = f"{head}: {row['samples_per_s']:>10,.0f} samples/{unit} ({row['fraction_of_matmul_rate']:.1%} of mm"
    if row.get("gpu_busy") is not None:
        text += f", busy {row['gpu_busy']:.0%}"
    text += f", cuDNN TF32 {'on' if row['precision']['cudnn_allow_tf32'] else 'off'})"
    if "kernel_run" in row:
        run = row["kernel_run"]
        text += f" [cell {run['cell'].split(':')[0]}, matmul {run['matmul']}, graph {run['graph']}]"
    if "error" in row:  # after the timing (the profiled epoch)
        text += f" then {row['error']}"
    return text


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if (code := check_device(args, "bench_stacked")) is not None:
        return code
    torch.set_num_threads(args.threads)
    if args.rows:
        parse_rows(args.rows)  # a bad item stops the run before anything is measured
        limit = matmul_rate(args.device)
        result = {"bench": "bench_stacked", "device": device_name(args.device, args.threads), "torch": torch.__version__,
                  "matmul_flops_per_s": limit, "matmul_flops_per_s_tf32": matmul_rate(args.device, tf32=True),
                  "feed_setting": args.feed, "samples_per_seed": args.samples, "rows": [], "ratios": [],
                  "predict_samples_per_s": {},
                  "note": "fraction_of_matmul_rate: of the IEEE float32 torch.mm rate; precision per row: cuDNN's TF32 "
                          "flag (one_at_a_time, streams) and the stack's matmuls (kernel_run.matmul, which follows it)"}
        unit = "CPU-s" if args.device == "cpu" else "s"
        if not args.json:
            print(f"{result['device']}: torch.mm float32 2048^2 at {limit / 1e12:.2f} TFLOP/{unit} (IEEE), "
                  f"{result['matmul_flops_per_s_tf32'] / 1e12:.2f} (TF32 allowed)", flush=True)
        run_rows(args, result, limit, unit)
        if args.json:
            print(json.dumps(result, indent=2))
        return 0
    paths = [p for p in args.paths.split(",") if p]
    unknown = sorted(set(paths) - set(PATHS))
    if unknown:
        raise SystemExit(f"--paths: expected any of {', '.join(PATHS)}, found {', '.join(unknown)}")
    limit = matmul_rate(args.device)
    result = {"bench": "bench_stacked", "device": device_name(args.device, args.threads), "torch": torch.__version__,
              "matmul_flops_per_s": limit, "feed_setting": args.feed, "rows": [], "predict_samples_per_s": {}}
    unit = "CPU-s" if args.device == "cpu" else "s"
    if not args.json:
        print(f"{result['device']}: torch.mm float32 2048^2 runs at {limit / 1e12:.2f} TFLOP/{unit} here", flush=True)
    for size_name in args.sizes.split(","):
        data = sampler(SIZES[size_name], args.samples, instruments=args.instruments, days=args.days)
        result["predict_samples_per_s"][size_name] = predict_rate(SIZES[size_name], data, args.device, feed=args.feed)
        for k in (int(s) for s in args.seeds.split(",")):
            result["rows"].append(measure(size_name, k, data, args=args, limit=limit, paths=paths))
            write_json(args.out, result)
            if not args.json:
                print(describe(result["rows"][-1], unit), flush=True)
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
        if not args.json:
            print(f"{size_name:5s} predict: {result['predict_samples_per_s'][size_name]:,.0f} samples/{unit} (one model)",
                  flush=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"samples/{unit} summed over the K seeds of one epoch ({args.samples} windows per seed); "
              f"% of the matmul rate; GPU busy = kernel time / epoch wall time")
    return 0


def describe(row: dict, unit: str) -> str:
    """One text line of a row."""
    parts = [f"{row['size']:5s} K={row['seeds']:2d} ({row['feed']} feed):"]
    for name in PATHS:
        if name not in row:
            continue
        r = row[name]
        text = f"{name} {r['samples_per_s']:>10,.0f}/{unit} ({r['fraction_of_matmul_rate']:.1%}"
        if r.get("gpu_busy") is not None:
            text += f", busy {r['gpu_busy']:.0%}"
        text += ")"
        if "vs_one_at_a_time" in r:
            text += f" {r['vs_one_at_a_time']:.2f}x"
        parts.append(text)
    return "  ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
