"""Measured compute estimate of the full docs/method.md §3.3 sweep (workflows/paper/paper.yaml) on this machine.

Method (samples/s x samples):

1. **Count the paper's samples** from the real NYSE calendar (``exchange_calendars`` via
   ``data_prep.session_minutes``, 2012-01 .. 2018-12) and the paper's schedule (the
   runner's own ``rolling_windows``: 8 windows, train 2012-2014, fine-tune every 6 months):
   per window, the labelled bars of its train / valid / test segments (a bar is labelled
   when ``label_horizon`` more bars of its session follow), divided by the dataset's
   ``sample_stride`` (train, valid) or ``test_stride`` (test), times 25 instruments; and
   the bars the handler loads (fit start .. test end) times 25.
2. **Time a partial run at the paper's model sizes**: a synthetic 25-symbol store of the
   same shape is built (or ``--store`` names an existing one) and read through the real Qlib
   handler/dataset. For every distinct (hidden_size, num_layers, batch_size) of the 24
   pipelines, ``--batches`` training batches (after one warm-up batch) and an evaluation pass
   over ``--eval-samples`` samples of ``--measure-start .. --measure-end`` (default
   2018-01-02 .. 2018-01-19) are timed with ``--threads`` torch threads -> train samples/s,
   eval samples/s.
3. **Time data loading at a realistic size**: after those (so Qlib's one-off first-call costs
   are paid), the in-process cache is cleared and the handler + dataset of a whole
   ``--load-start .. --load-end`` range (default 2016-01-01 .. 2017-12-31, two years: about
   4.9 M bars for 25 symbols; a paper unit loads 3.5 to 7 years) are built, as a unit's ``build``
   step does (read every field, build the panel, fit the normalisation); the process CPU time
   gives **loaded bars per CPU-second**. (Timing one small first load and scaling it linearly
   overstates loading about 10x: that load is mostly fixed costs.)
4. **Multiply**: per unit (pipeline, seed, window)
   ``epochs x train / train_sps + epochs x valid / eval_sps + test / eval_sps``
   (model CPU-seconds) ``+ bars_loaded / bars_per_cpu_s`` (loading CPU-seconds), with
   ``epochs`` = ``n_epochs`` for window 0 and ``finetune_epochs`` after (an upper bound: early
   stopping can only shorten it), summed over 8 windows x 10 seeds x 24 pipelines.

Prints the per-pipeline table, CPU-hours (one thread per unit; model and loading apart), the
wall time on this machine with one unit per core, and the commands to run the sweep on a GPU
machine and on a Ray cluster. GPU-hours are printed only when a GPU throughput is given
(``--gpu-train-sps``: training samples per second of one GPU, summed over the seeds it trains at
once -- ``samples_per_s`` of ``bench/bench_stacked.py --device cuda --json`` at the paper size,
for one seed or a stack; ``--gpu-eval-sps``: its prediction rate, ``predict_samples_per_s`` there,
default the training rate, which overstates prediction time). Every model shape is given the
base shape's rate ``x`` (base flops per sample / the shape's), i.e. the same share of the GPU's
matmul rate (``--gpu-rate-by same`` gives every shape the same samples/s); loading stays on CPU.
``--gpu-only`` skips the CPU timings (seconds instead of minutes: the sample counts and the
GPU-hours alone). Measured under whatever load the machine has: re-run on a quiet machine.

Usage::

    nice -n 10 .venv/bin/python bench/estimate_paper_compute.py [--batches 2] [--threads 1]
        [--store qlib_data/us25 --load-start 2012-01-01 --load-end 2015-06-30]
        [--gpu-train-sps 40000 --gpu-eval-sps 150000 [--gpu-only]] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "workflows" / "paper" / "paper.yaml"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=PAPER, help="the paper sweep YAML (default workflows/paper/paper.yaml)")
    p.add_argument("--store", type=Path, default=None,
                   help="an existing 25-symbol minute store to time on (default: build a synthetic stand-in "
                        "covering the measure and load ranges in a temp dir)")
    p.add_argument("--measure-start", default="2018-01-02", help="first day of the model-timing range")
    p.add_argument("--measure-end", default="2018-01-19", help="last day of the model-timing range")
    p.add_argument("--load-start", default="2016-01-01", help="first day of the timed data load (a realistic window)")
    p.add_argument("--load-end", default="2017-12-31", help="last day of the timed data load")
    p.add_argument("--batches", type=int, default=2, help="timed training batches per model shape (after 1 warm-up)")
    p.add_argument("--eval-samples", type=int, default=20000, help="timed evaluation samples per model shape")
    p.add_argument("--threads", type=int, default=1, help="torch threads per unit (the sweep's default is 1)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="units in parallel for the wall-time line")
    p.add_argument("--gpu-train-sps", type=float, default=None, metavar="S",
                   help="training samples/s of one unit on one GPU (with --gpu-eval-sps: also print GPU-hours)")
    p.add_argument("--gpu-eval-sps", type=float, default=None, metavar="S",
                   help="prediction samples/s on one GPU (default: the training rate, an upper bound on the time)")
    p.add_argument("--gpu-rate-by", choices=("flops", "same"), default="flops",
                   help="how --gpu-*-sps (measured at the base shape) carries to the other shapes: scaled by flops "
                        "per sample (default) or the same for every shape")
    p.add_argument("--gpu-only", action="store_true", help="GPU-hours only: skip the CPU timings (needs --gpu-train-sps)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    if args.gpu_eval_sps is not None and args.gpu_train_sps is None:
        p.error("--gpu-eval-sps needs --gpu-train-sps")
    if args.gpu_only and args.gpu_train_sps is None:
        p.error("--gpu-only needs --gpu-train-sps")
    if args.gpu_train_sps is not None and args.gpu_eval_sps is None:
        args.gpu_eval_sps = args.gpu_train_sps
    for name in ("gpu_train_sps", "gpu_eval_sps"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')}: expected > 0")
    return args


# --------------------------------------------------------------------------- sample counts
def segment_counts(calendar, segment, *, label_horizon: int, stride: int) -> tuple[int, float]:
    """(bars in the segment, labelled bars / stride) for one instrument."""
    import numpy as np
    import pandas as pd

    mask = (calendar >= segment.start) & (calendar <= segment.end)
    bars = calendar[mask]
    if len(bars) == 0:
        return 0, 0.0
    days = bars.normalize()
    session_len = pd.Series(1, index=days).groupby(level=0).transform("size").to_numpy()
    full_days = calendar.normalize()
    # position within the session counted on the whole calendar (a segment may start mid-session)
    pos_all = pd.Series(1, index=full_days).groupby(level=0).cumcount().to_numpy() - 0
    len_all = pd.Series(1, index=full_days).groupby(level=0).transform("size").to_numpy()
    labelled = (pos_all[mask] < len_all[mask] - label_horizon)
    del session_len
    return len(bars), float(np.count_nonzero(labelled)) / stride


def paper_counts(config, *, n_instruments: int) -> list[dict]:
    """Per window: samples of train / valid / test and bars loaded, for all instruments."""
    from data_prep import session_minutes

    task = config.task
    dkw = task["dataset"]["kwargs"]
    hkw = dkw["handler"]["kwargs"]
    horizon = int(hkw.get("label_horizon", 10))
    sample_stride, test_stride = int(dkw.get("sample_stride", 1)), int(dkw.get("test_stride", 1))
    first = f"{config.rolling.initial_train_start}-01"
    last = (__import__("pandas").Period(config.rolling.end, "M").end_time.normalize()).strftime("%Y-%m-%d")
    calendar = session_minutes(first, last)
    windows = config.rolling.windows(calendar)
    out = []
    for w in windows:
        _, train = segment_counts(calendar, w.train, label_horizon=horizon, stride=sample_stride)
        _, valid = segment_counts(calendar, w.valid, label_horizon=horizon, stride=sample_stride)
        _, test = segment_counts(calendar, w.test, label_horizon=horizon, stride=test_stride)
        start = min(w.fit.start, w.train.start)
        loaded = int(((calendar >= start) & (calendar <= w.test.end)).sum())
        out.append({"window": w.index, "train": train * n_instruments, "valid": valid * n_instruments,
                    "test": test * n_instruments, "bars_loaded": loaded * n_instruments,
                    "test_segment": list(w.test.as_tuple())})
    return out


# --------------------------------------------------------------------------- timing
def shape_of(task: dict) -> tuple[int, int, int]:
    kw = task["model"]["kwargs"]
    return int(kw["hidden_size"]), int(kw["num_layers"]), int(kw["batch_size"])


def time_shapes(shapes, *, config, args) -> dict:
    """Train/eval samples/s per model shape on ``--measure-start .. --measure-end``."""
    import numpy as np

    from rolling_calib.qlib_adapter.dataset import (
        MinuteTSDataset,
        MinuteWindowSampler,
        clear_cache,
    )
    from rolling_calib.qlib_adapter.model import RollingLSTM

    dkw = config.task["dataset"]["kwargs"]
    hkw = dict(dkw["handler"]["kwargs"])
    hkw.update(start_time=args.measure_start, end_time=f"{args.measure_end} 15:59:00",
               fit_start_time=args.measure_start, fit_end_time=f"{args.measure_end} 15:59:00")
    handler = {**dkw["handler"], "kwargs": hkw}
    clear_cache()
    ds = MinuteTSDataset(handler=handler, segments={"train": (args.measure_start, f"{args.measure_end} 15:59:00")},
                         step_len=int(dkw.get("step_len", 60)), sample_stride=1)
    train = ds.prepare("train")
    panel = train.panel
    rng = np.random.default_rng(0)
    results = {}
    for hidden, layers, batch in sorted(shapes):
        model = RollingLSTM(hidden_size=hidden, num_layers=layers, batch_size=batch, n_threads=args.threads, seed=0)
        y = train.labels
        model.label_mean, model.label_std = float(y.mean()), float(y.std()) or 1.0
        need = batch * (args.batches + 1)
        if len(train) < need:
            raise SystemExit(f"--measure-start/--measure-end: {len(train)} samples, need {need}; widen the range")
        picks = np.sort(rng.choice(len(train), size=need, replace=False))
        warm = MinuteWindowSampler(panel, train.positions[picks[:batch]], step_len=train.step_len, norm=train.norm)
        timed = MinuteWindowSampler(panel, train.positions[picks[batch:]], step_len=train.step_len, norm=train.norm)
        model._train_epoch(warm, np.random.default_rng(1))
        t = time.perf_counter()
        model._train_epoch(timed, np.random.default_rng(2))
        train_sps = len(timed) / (time.perf_counter() - t)
        n_eval = min(args.eval_samples, len(train))
        ev = MinuteWindowSampler(panel, train.positions[:n_eval], step_len=train.step_len, norm=train.norm)
        t = time.perf_counter()
        model._eval_loss(ev)
        eval_sps = n_eval / (time.perf_counter() - t)
        results[(hidden, layers, batch)] = {"train_sps": train_sps, "eval_sps": eval_sps}
        print(f"  timed hidden={hidden:<4d} layers={layers} batch={batch:<5d} train {train_sps:>9,.0f} samples/s"
              f"   eval {eval_sps:>9,.0f} samples/s", file=sys.stderr)
    return results


def time_loading(*, config, start: str, end: str) -> dict:
    """CPU and wall seconds of one unit's data build over ``start .. end`` (cache cleared first).

    Builds the handler + dataset the way a unit's ``build`` step does: every field of every
    instrument read through Qlib, the panel (labels, repairs), the normalisation fitted on the
    range's first 85% (a window's training span). Call it after a first load in this process,
    so Qlib's one-off costs (imports, calendar, instrument list) are not counted.
    """
    import pandas as pd

    from rolling_calib.qlib_adapter.dataset import MinuteTSDataset, clear_cache

    dkw = config.task["dataset"]["kwargs"]
    lo, hi = pd.Timestamp(start), pd.Timestamp(f"{end} 15:59:00")
    fit_end = (lo + (hi - lo) * 0.85).normalize()
    hkw = dict(dkw["handler"]["kwargs"])
    hkw.update(start_time=str(lo), end_time=str(hi), fit_start_time=str(lo), fit_end_time=str(fit_end))
    clear_cache()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    ds = MinuteTSDataset(handler={**dkw["handler"], "kwargs": hkw},
                         segments={"train": (str(lo), str(fit_end)), "test": (str(fit_end), str(hi))},
                         step_len=int(dkw.get("step_len", 60)), sample_stride=int(dkw.get("sample_stride", 1)),
                         test_stride=int(dkw.get("test_stride", 1)))
    panel = ds.handler.panel
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    bars = len(panel.instruments) * panel.n_minutes
    clear_cache()
    return {"range": [start, end], "instruments": len(panel.instruments), "bars": bars, "cpu_s": cpu, "wall_s": wall,
            "bars_per_cpu_s": bars / cpu, "bars_per_s": bars / wall}


# --------------------------------------------------------------------------- estimate
def model_seconds(windows: list[dict], *, task: dict, train_sps: float, eval_sps: float) -> list[float]:
    """Per window: seconds of training (epochs x train), validation (epochs x valid) and test prediction."""
    kw = task["model"]["kwargs"]
    out = []
    for w in windows:
        epochs = int(kw["n_epochs"]) if w["window"] == 0 else int(kw["finetune_epochs"])
        out.append(epochs * w["train"] / train_sps + epochs * w["valid"] / eval_sps + w["test"] / eval_sps)
    return out


def load_seconds(windows: list[dict], *, bars_per_cpu_s: float) -> list[float]:
    """Per window: CPU-seconds to load the bars the unit's handler reads."""
    return [w["bars_loaded"] / bars_per_cpu_s for w in windows]


def step_len(task: dict) -> int:
    return int(task["dataset"]["kwargs"].get("step_len", 60))


def gpu_rates(task: dict, *, base: dict, args: argparse.Namespace) -> tuple[float, float]:
    """``--gpu-train-sps``/``--gpu-eval-sps`` (measured at ``base``'s shape) carried to ``task``'s shape.

    ``--gpu-rate-by flops``: ``rate x flops(base) / flops(task)`` (the same share of the matmul
    rate); ``same``: the rates as given.
    """
    from bench_stacked import flops_per_sample

    scale = 1.0
    if args.gpu_rate_by == "flops":
        def flops(t: dict) -> float:
            h, l, _ = shape_of(t)
            return flops_per_sample({"hidden_size": h, "num_layers": l, "step_len": step_len(t)})
        scale = flops(base) / flops(task)
    return args.gpu_train_sps * scale, args.gpu_eval_sps * scale


def gpu_hours(windows: list[dict], *, task: dict, base: dict, args: argparse.Namespace, seeds: int) -> float:
    """GPU-hours of one pipeline's ``seeds`` seeds over ``windows`` (model compute; loading stays on CPU)."""
    train_sps, eval_sps = gpu_rates(task, base=base, args=args)
    return seeds * sum(model_seconds(windows, task=task, train_sps=train_sps, eval_sps=eval_sps)) / 3600


def gpu_only(args: argparse.Namespace, tmp: Path) -> int:
    """The paper's sample counts and GPU-hours, with no CPU timing (``--gpu-only``).

    The config is read against ``--store``, else a one-symbol, one-week synthetic store in ``tmp``
    (the counts come from the NYSE calendar, not the store).
    """
    from data_prep import DEFAULT_SYMBOLS, build_synthetic_store
    from rolling_calib.config.experiment import load_experiment

    store = args.store.resolve() if args.store is not None else build_synthetic_store(
        tmp / "qlib", start=args.measure_start, end=args.measure_start, symbols=list(DEFAULT_SYMBOLS[:1]), seed=0)
    config = load_experiment(args.config, overrides={"qlib_init.provider_uri": str(store)}, check_store=False)
    windows = paper_counts(config, n_instruments=len(DEFAULT_SYMBOLS))
    seeds = len(config.rolling.seeds)
    rows = []
    for name in config.pipelines:
        task = config.pipeline_task(name)
        h, l, b = shape_of(task)
        train_sps, eval_sps = gpu_rates(task, base=config.task, args=args)
        rows.append({"pipeline": name, "hidden_size": h, "num_layers": l, "batch_size": b,
                     "gpu_train_samples_per_s": train_sps, "gpu_eval_samples_per_s": eval_sps,
                     "pipeline_gpu_hours": gpu_hours(windows, task=task, base=config.task, args=args, seeds=seeds)})
    total = sum(r["pipeline_gpu_hours"] for r in rows)
    samples = {k: sum(w[k] for w in windows) for k in ("train", "valid", "test", "bars_loaded")}
    result = {"config": str(args.config), "windows": len(windows), "seeds": seeds, "pipelines": len(rows),
              "units": len(rows) * seeds * len(windows), "samples_per_seed": samples,
              "gpu": {"train_samples_per_s": args.gpu_train_sps, "eval_samples_per_s": args.gpu_eval_sps,
                      "rate_by": args.gpu_rate_by, "gpu_hours": total}, "pipelines_detail": rows}
    if args.json:
        print(json.dumps(result, indent=2, default=str))
        return 0
    print(f"{len(rows)} pipelines x {seeds} seeds x {len(windows)} windows = {result['units']} units; per seed of a "
          f"pipeline: train {samples['train']:,.0f} samples (x epochs), valid {samples['valid']:,.0f}, "
          f"test {samples['test']:,.0f}")
    print(f"{'pipeline':<8} {'hidden':>6} {'layers':>6} {'train/s':>10} {'GPU-h':>7}")
    for r in rows:
        print(f"{r['pipeline']:<8} {r['hidden_size']:>6} {r['num_layers']:>6} {r['gpu_train_samples_per_s']:>10,.0f} "
              f"{r['pipeline_gpu_hours']:>7.2f}")
    print(f"GPU: {total:,.2f} GPU-hours of model compute at {args.gpu_train_sps:,.0f} train / {args.gpu_eval_sps:,.0f} "
          f"predict samples/s at the base shape (other shapes {'scaled by flops per sample' if args.gpu_rate_by == 'flops' else 'at the same rate'}); "
          "data loading is CPU work beside it (the full run prints its CPU-hours)")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="paper_estimate_") as tmp:  # the stand-in store, removed after
        return gpu_only(args, Path(tmp)) if args.gpu_only else estimate(args, Path(tmp))


def estimate(args: argparse.Namespace, tmp: Path) -> int:
    """Build or open the store, time, multiply, print; ``tmp`` holds a built stand-in store."""
    from data_prep import DEFAULT_SYMBOLS, build_synthetic_store
    from rolling_calib.config.experiment import load_experiment, stable_hash

    t_all = time.perf_counter()
    if args.store is not None:
        store = args.store.resolve()
    else:
        first, last = min(args.measure_start, args.load_start), max(args.measure_end, args.load_end)
        print(f"building the stand-in store: {len(DEFAULT_SYMBOLS)} symbols, {first} .. {last}", file=sys.stderr)
        store = build_synthetic_store(tmp / "qlib", start=first, end=last, symbols=list(DEFAULT_SYMBOLS), seed=0)
    config = load_experiment(args.config, overrides={"qlib_init.provider_uri": str(store)}, check_store=False)
    from data_prep import init_qlib

    init_qlib(store)
    n_inst = len(DEFAULT_SYMBOLS)
    windows = paper_counts(config, n_instruments=n_inst)
    tasks = {name: config.pipeline_task(name) for name in config.pipelines}
    rates = time_shapes({shape_of(t) for t in tasks.values()}, config=config, args=args)
    print(f"  timing a data load of {args.load_start} .. {args.load_end}", file=sys.stderr)
    load = time_loading(config=config, start=args.load_start, end=args.load_end)
    print(f"  loaded {load['bars']:,} bars in {load['cpu_s']:.2f} CPU-s ({load['wall_s']:.2f} s wall): "
          f"{load['bars_per_cpu_s']:,.0f} bars per CPU-second", file=sys.stderr)
    seeds = len(config.rolling.seeds)
    load_secs = load_seconds(windows, bars_per_cpu_s=load["bars_per_cpu_s"])
    gpu = args.gpu_train_sps is not None
    rows = []
    for name, task in tasks.items():
        h, l, b = shape_of(task)
        rate = rates[(h, l, b)]
        model = sum(model_seconds(windows, task=task, train_sps=rate["train_sps"], eval_sps=rate["eval_sps"]))
        row = {"pipeline": name, "hidden_size": h, "num_layers": l, "batch_size": b,
               "n_epochs": task["model"]["kwargs"]["n_epochs"], "train_samples_per_s": rate["train_sps"],
               "eval_samples_per_s": rate["eval_sps"],
               "seed_hours": (model + sum(load_secs)) / 3600,
               "pipeline_model_cpu_hours": seeds * model / 3600,
               "pipeline_load_cpu_hours": seeds * sum(load_secs) / 3600,
               "pipeline_cpu_hours": seeds * (model + sum(load_secs)) / 3600,
               "task_hash": stable_hash(task)}
        if gpu:
            row["pipeline_gpu_hours"] = gpu_hours(windows, task=task, base=config.task, args=args, seeds=seeds)
        rows.append(row)
    total = sum(r["pipeline_cpu_hours"] for r in rows)
    total_model = sum(r["pipeline_model_cpu_hours"] for r in rows)
    total_load = sum(r["pipeline_load_cpu_hours"] for r in rows)
    distinct = {r["task_hash"]: r["pipeline_cpu_hours"] for r in rows}
    total_distinct = sum(distinct.values())
    samples = {k: sum(w[k] for w in windows) for k in ("train", "valid", "test", "bars_loaded")}
    units = len(rows) * seeds * len(windows)
    result = {
        "config": str(args.config), "store": str(store), "instruments": n_inst, "windows": len(windows),
        "seeds": seeds, "pipelines": len(rows), "units": units, "threads_per_unit": args.threads,
        "samples_per_seed": samples, "windows_detail": windows, "pipelines_detail": rows,
        "load": load, "load_bars_per_cpu_s": load["bars_per_cpu_s"],
        "cpu_hours": total, "cpu_hours_model": total_model, "cpu_hours_loading": total_load,
        "cpu_hours_distinct_tasks": total_distinct, "distinct_tasks": len(distinct),
        "workers": args.workers, "wall_hours_this_machine": total / args.workers,
        "measured_under_load": os.getloadavg()[0], "bench_seconds": time.perf_counter() - t_all,
    }
    if gpu:
        total_gpu = sum(r["pipeline_gpu_hours"] for r in rows)
        result["gpu"] = {"train_samples_per_s": args.gpu_train_sps, "eval_samples_per_s": args.gpu_eval_sps,
                         "rate_by": args.gpu_rate_by, "gpu_hours": total_gpu, "cpu_hours_loading": total_load}
    commands = {
        "data": "rolling-calib data synth --out qlib_data/us25 --start 2012-01-01 --end 2018-12-31",
        "cpu": f"rolling-calib sweep {PAPER.relative_to(ROOT)} --store runs/paper --workers {args.workers}",
        "gpu": f"rolling-calib sweep {PAPER.relative_to(ROOT)} --store runs/paper --device cuda --workers 4",
        "ray_cluster": (
            "ray start --head --port=6379   # head node; on each worker: ray start --address=HEAD:6379\n"
            f"rolling-calib sweep {PAPER.relative_to(ROOT)} --executor ray --address auto "
            "--store /shared/runs/paper --set qlib_init.provider_uri=/shared/qlib_data/us25"
        ),
        "ray_gpu_cluster": (
            f"rolling-calib sweep {PAPER.relative_to(ROOT)} --executor ray --address auto --device cuda "
            "--gpus-per-unit 0.25 --store /shared/runs/paper --set qlib_init.provider_uri=/shared/qlib_data/us25"
        ),
    }
    result["commands"] = commands
    if args.json:
        print(json.dumps(result, indent=2, default=str))
        return 0
    print(f"\ndocs/method.md §3.3 as one sweep: {len(rows)} pipelines x {seeds} seeds x {len(windows)} windows = {units} units, "
          f"{n_inst} instruments")
    print(f"samples per seed of a pipeline (all windows): train {samples['train']:,.0f} (x epochs), "
          f"valid {samples['valid']:,.0f} (x epochs), test {samples['test']:,.0f}, bars loaded {samples['bars_loaded']:,.0f}")
    print(f"{'pipeline':<8} {'hidden':>6} {'layers':>6} {'batch':>5} {'epochs':>6} {'train/s':>9} {'h/seed':>7} {'CPU-h':>8}"
          + (f" {'GPU-h':>7}" if gpu else ""))
    for r in rows:
        print(f"{r['pipeline']:<8} {r['hidden_size']:>6} {r['num_layers']:>6} {r['batch_size']:>5} {r['n_epochs']:>6} "
              f"{r['train_samples_per_s']:>9,.0f} {r['seed_hours']:>7.2f} {r['pipeline_cpu_hours']:>8.1f}"
              + (f" {r['pipeline_gpu_hours']:>7.1f}" if gpu else ""))
    print(f"\ndata loading: {load['bars']:,} bars ({load['range'][0]} .. {load['range'][1]}) in {load['cpu_s']:.2f} "
          f"CPU-s = {load['bars_per_cpu_s']:,.0f} bars per CPU-second; {samples['bars_loaded']:,.0f} bars per seed of "
          f"a pipeline -> {total_load:,.1f} CPU-hours for the sweep")
    print(f"estimate: {total:,.0f} CPU-hours at {args.threads} thread/unit ({total_model:,.0f} model + "
          f"{total_load:,.0f} data loading; {total_distinct:,.0f} if the {len(rows) - len(distinct)} pipelines "
          f"identical to another are run once); wall time on this machine with {args.workers} units in parallel: "
          f"{total / args.workers:,.0f} h = {total / args.workers / 24:,.1f} days")
    if gpu:
        g = result["gpu"]
        print(f"GPU: {g['gpu_hours']:,.1f} GPU-hours of model compute at {args.gpu_train_sps:,.0f} train / "
              f"{args.gpu_eval_sps:,.0f} predict samples/s at the base shape (other shapes "
              f"{'scaled by flops per sample' if args.gpu_rate_by == 'flops' else 'at the same rate'}), plus "
              f"{total_load:,.1f} CPU-hours of loading")
    print(f"(timed under load average {result['measured_under_load']:.1f})")
    print("\ncommands:")
    for name, text in commands.items():
        print(f"  [{name}]\n    " + text.replace("\n", "\n    "))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
