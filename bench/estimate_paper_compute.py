"""Measured compute estimate of the full METHOD 3.3 sweep (workflows/paper/paper.yaml) on this machine.

Method (samples/s x samples):

1. **Count the paper's samples** from the real NYSE calendar (``exchange_calendars`` via
   ``data_prep.session_minutes``, 2012-01 .. 2018-12) and the paper's schedule (the
   runner's own ``rolling_windows``: 8 windows, train 2012-2014, fine-tune every 6 months):
   per window, the labelled bars of its train / valid / test segments (a bar is labelled
   when ``label_horizon`` more bars of its session follow), divided by the dataset's
   ``sample_stride`` (train, valid) or ``test_stride`` (test), times 25 instruments; and
   the bars the handler loads (fit start .. test end) times 25.
2. **Time a partial run at the paper's model sizes**: a synthetic 25-symbol store of the
   same shape (``--measure-start .. --measure-end``, default 2018-01-02 .. 2018-01-19) is built and read
   through the real Qlib handler/dataset; for every distinct (hidden_size, num_layers,
   batch_size) of the 24 pipelines, ``--batches`` training batches (after one warm-up
   batch) and an evaluation pass over ``--eval-samples`` samples are timed with
   ``--threads`` torch threads -> train samples/s, eval samples/s; data loading is timed
   once -> loaded bars/s.
3. **Multiply**: per unit (pipeline, seed, window)
   ``epochs x train / train_sps + epochs x valid / eval_sps + test / eval_sps + bars / load_rate``
   with ``epochs`` = ``n_epochs`` for window 0 and ``finetune_epochs`` after (an upper bound:
   early stopping can only shorten it), summed over 8 windows x 10 seeds x 24 pipelines.

Prints the per-pipeline table, CPU-hours (one thread per unit), the wall time on this
machine with one unit per core, and the commands to run the sweep on a GPU machine and on a
Ray cluster. Measured under whatever load the machine has: re-run on a quiet machine.

Usage::

    nice -n 10 .venv/bin/python bench/estimate_paper_compute.py [--batches 2] [--threads 1] [--json]
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
    p.add_argument("--measure-start", default="2018-01-02", help="first day of the timed stand-in store")
    p.add_argument("--measure-end", default="2018-01-19", help="last day of the timed stand-in store")
    p.add_argument("--batches", type=int, default=2, help="timed training batches per model shape (after 1 warm-up)")
    p.add_argument("--eval-samples", type=int, default=20000, help="timed evaluation samples per model shape")
    p.add_argument("--threads", type=int, default=1, help="torch threads per unit (the sweep's default is 1)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="units in parallel for the wall-time line")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


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
    return int(len(bars)), float(np.count_nonzero(labelled)) / stride


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


def time_shapes(shapes, *, store: Path, config, args) -> tuple[dict, float]:
    """Train/eval samples/s per shape, and loaded bars/s of the handler."""
    import numpy as np

    from rolling_calib.qlib_adapter.dataset import MinuteTSDataset, MinuteWindowSampler, clear_cache
    from rolling_calib.qlib_adapter.model import RollingLSTM

    dkw = config.task["dataset"]["kwargs"]
    hkw = dict(dkw["handler"]["kwargs"])
    hkw.update(start_time=args.measure_start, end_time=f"{args.measure_end} 15:59:00",
               fit_start_time=args.measure_start, fit_end_time=f"{args.measure_end} 15:59:00")
    handler = {**dkw["handler"], "kwargs": hkw}
    clear_cache()
    t0 = time.perf_counter()
    ds = MinuteTSDataset(handler=handler, segments={"train": (args.measure_start, f"{args.measure_end} 15:59:00")},
                         step_len=int(dkw.get("step_len", 60)), sample_stride=1)
    train = ds.prepare("train")
    load_seconds = time.perf_counter() - t0
    panel = train.panel
    bars_loaded = len(panel.instruments) * panel.n_minutes
    load_rate = bars_loaded / load_seconds
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
    return results, load_rate


# --------------------------------------------------------------------------- estimate
def unit_seconds(windows: list[dict], *, task: dict, rate: dict, load_rate: float) -> list[float]:
    kw = task["model"]["kwargs"]
    out = []
    for w in windows:
        epochs = int(kw["n_epochs"]) if w["window"] == 0 else int(kw["finetune_epochs"])
        seconds = (epochs * w["train"] / rate["train_sps"] + epochs * w["valid"] / rate["eval_sps"]
                   + w["test"] / rate["eval_sps"] + w["bars_loaded"] / load_rate)
        out.append(seconds)
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    from data_prep import DEFAULT_SYMBOLS, build_synthetic_store

    from rolling_calib.config.experiment import load_experiment, stable_hash

    t_all = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="paper_estimate_"))
    print(f"building the timed stand-in store: {len(DEFAULT_SYMBOLS)} symbols, {args.measure_start} .. "
          f"{args.measure_end}", file=sys.stderr)
    store = build_synthetic_store(tmp / "qlib", start=args.measure_start, end=args.measure_end,
                                  symbols=list(DEFAULT_SYMBOLS), seed=0)
    config = load_experiment(args.config, overrides={"qlib_init.provider_uri": str(store)}, check_store=False)
    from data_prep import init_qlib

    init_qlib(store)
    n_inst = len(DEFAULT_SYMBOLS)
    windows = paper_counts(config, n_instruments=n_inst)
    tasks = {name: config.pipeline_task(name) for name in config.pipelines}
    rates, load_rate = time_shapes({shape_of(t) for t in tasks.values()}, store=store, config=config, args=args)
    seeds = len(config.rolling.seeds)
    rows = []
    for name, task in tasks.items():
        secs = unit_seconds(windows, task=task, rate=rates[shape_of(task)], load_rate=load_rate)
        h, l, b = shape_of(task)
        rows.append({"pipeline": name, "hidden_size": h, "num_layers": l, "batch_size": b,
                     "n_epochs": task["model"]["kwargs"]["n_epochs"],
                     "train_samples_per_s": rates[(h, l, b)]["train_sps"],
                     "seed_hours": sum(secs) / 3600, "pipeline_cpu_hours": seeds * sum(secs) / 3600,
                     "task_hash": stable_hash(task)})
    total = sum(r["pipeline_cpu_hours"] for r in rows)
    distinct = {r["task_hash"]: r["pipeline_cpu_hours"] for r in rows}
    total_distinct = sum(distinct.values())
    samples = {k: sum(w[k] for w in windows) for k in ("train", "valid", "test", "bars_loaded")}
    units = len(rows) * seeds * len(windows)
    result = {
        "config": str(args.config), "instruments": n_inst, "windows": len(windows), "seeds": seeds,
        "pipelines": len(rows), "units": units, "threads_per_unit": args.threads,
        "samples_per_seed": samples, "windows_detail": windows, "pipelines_detail": rows,
        "load_bars_per_s": load_rate,
        "cpu_hours": total, "cpu_hours_distinct_tasks": total_distinct, "distinct_tasks": len(distinct),
        "workers": args.workers, "wall_hours_this_machine": total / args.workers,
        "measured_under_load": os.getloadavg()[0], "bench_seconds": time.perf_counter() - t_all,
    }
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
    print(f"\nMETHOD 3.3 as one sweep: {len(rows)} pipelines x {seeds} seeds x {len(windows)} windows = {units} units, "
          f"{n_inst} instruments")
    print(f"samples per seed of a pipeline (all windows): train {samples['train']:,.0f} (x epochs), "
          f"valid {samples['valid']:,.0f} (x epochs), test {samples['test']:,.0f}, bars loaded {samples['bars_loaded']:,.0f}")
    print(f"{'pipeline':<8} {'hidden':>6} {'layers':>6} {'batch':>5} {'epochs':>6} {'train/s':>9} {'h/seed':>7} {'CPU-h':>8}")
    for r in rows:
        print(f"{r['pipeline']:<8} {r['hidden_size']:>6} {r['num_layers']:>6} {r['batch_size']:>5} {r['n_epochs']:>6} "
              f"{r['train_samples_per_s']:>9,.0f} {r['seed_hours']:>7.2f} {r['pipeline_cpu_hours']:>8.1f}")
    print(f"\nestimate: {total:,.0f} CPU-hours at {args.threads} thread/unit "
          f"({total_distinct:,.0f} if the {len(rows) - len(distinct)} pipelines identical to another are run once); "
          f"wall time on this machine with {args.workers} units in parallel: {total / args.workers:,.0f} h "
          f"= {total / args.workers / 24:,.1f} days")
    print(f"(timed under load average {result['measured_under_load']:.1f}; data loading {load_rate:,.0f} bars/s)")
    print("\ncommands:")
    for name, text in commands.items():
        print(f"  [{name}]\n    " + text.replace("\n", "\n    "))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
