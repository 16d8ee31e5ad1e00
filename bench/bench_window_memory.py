"""Peak memory of one training window at full scale (25 symbols, three years of minute bars).

Loads the per-bar data of ``--years`` years of the 25-stock universe through Qlib's provider
(:class:`rolling_calib.qlib_adapter.dataset.MinuteBarHandler`), fits the feature normalisation on the
training range, prepares the train / valid / test samplers of one rolling window (train = all
but the last 6 months, valid = the last 5 trading days of train, test = the 6 months after),
and trains ``--batches`` batches of the LSTM (a full epoch would only add time, not memory:
windows are cut per batch). Prints the peak resident memory (``ru_maxrss``) and what a
materialised ``(N, step_len * 6)`` float32 feature frame of the training segment would weigh
for comparison.

It needs a full-scale store: with ``--store`` missing, one is built with
``data_prep.build_synthetic_store`` (25 symbols, ``--start`` .. ``--end``; about a minute per
three years, written once and reused).

Usage::

    nice -n 10 .venv/bin/python bench/bench_window_memory.py [--store bench_out/store_full]
        [--start 2012-01-01 --end 2014-12-31] [--sample-stride 1] [--batches 3] [--json]

Run it in its own process: ``ru_maxrss`` is a process-lifetime peak.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path


def peak_rss_gib() -> float:
    """Peak resident set size of this process, GiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def current_rss_gib() -> float:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 1024**3


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", default="bench_out/store_full", help="full-scale minute store (built if missing)")
    p.add_argument("--start", default="2012-01-01", help="first date of the window's data")
    p.add_argument("--end", default="2014-12-31", help="last date of the window's data (3 years)")
    p.add_argument("--test-months", type=int, default=6, help="months at the end used as the test segment")
    p.add_argument("--step-len", type=int, default=60)
    p.add_argument("--sample-stride", type=int, default=1)
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--num-layers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=2000)
    p.add_argument("--batches", type=int, default=3, help="training batches run (memory does not grow with more)")
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import numpy as np
    import pandas as pd

    from data_prep import build_synthetic_store, init_qlib

    store = Path(args.store)
    built = False
    t0 = time.perf_counter()
    if not (store / "calendars" / "1min.txt").exists():
        print(f"building the full-scale store in {store} ...", flush=True)
        build_synthetic_store(store, start=args.start, end=args.end, seed=0, progress=True)
        built = True
    build_s = time.perf_counter() - t0
    rss_before = current_rss_gib()
    init_qlib(store)

    from rolling_calib.qlib_adapter.dataset import MinuteTSDataset
    from rolling_calib.qlib_adapter.model import RollingLSTM

    end = pd.Timestamp(args.end)
    test_start = (end - pd.DateOffset(months=args.test_months)).normalize() + pd.Timedelta(days=1)
    train_end = test_start - pd.Timedelta(days=1)
    valid_start = train_end - pd.Timedelta(days=7)
    t1 = time.perf_counter()
    handler = {"class": "MinuteBarHandler", "module_path": "rolling_calib.qlib_adapter.dataset",
               "kwargs": dict(instruments="us25", start_time=args.start, end_time=args.end,
                              fit_start_time=args.start, fit_end_time=str(valid_start.date()),
                              window=args.step_len)}
    ds = MinuteTSDataset(handler=handler, step_len=args.step_len, sample_stride=args.sample_stride,
                         segments={"train": (args.start, str((valid_start - pd.Timedelta(days=1)).date())),
                                   "valid": (str(valid_start.date()), str(train_end.date())),
                                   "test": (str(test_start.date()), args.end)})
    peak_handler = peak_rss_gib()
    train, valid, test = ds.prepare(["train", "valid", "test"])
    load_s = time.perf_counter() - t1
    rss_loaded = current_rss_gib()
    peak_prepared = peak_rss_gib()
    model = RollingLSTM(hidden_size=args.hidden_size, num_layers=args.num_layers, batch_size=args.batch_size,
                        n_threads=1, seed=0)
    y = train.labels
    model.label_mean, model.label_std = float(y.mean()), float(y.std())
    rng = np.random.default_rng(0)
    sub = train.__class__(train.panel, train.positions[rng.permutation(len(train))[: args.batches * args.batch_size]],
                          step_len=train.step_len, norm=train.norm)
    t2 = time.perf_counter()
    model._train_epoch(sub, rng)
    train_s = time.perf_counter() - t2
    panel = ds.handler.panel
    materialised = len(train) * args.step_len * 6 * 4 / 1024**3
    result = {
        "store": str(store), "store_built_now": built, "store_build_seconds": round(build_s, 1),
        "range": [args.start, args.end], "instruments": len(panel.instruments), "minutes": panel.n_minutes,
        "bars": len(panel.instruments) * panel.n_minutes,
        "samples": {"train": len(train), "valid": len(valid), "test": len(test)},
        "per_bar_array_gib": panel.values.nbytes / 1024**3,
        "materialised_train_frame_would_be_gib": materialised,
        "load_and_prepare_seconds": round(load_s, 1),
        "train_batches": args.batches, "train_seconds": round(train_s, 1),
        "rss_before_load_gib": round(rss_before, 3), "rss_after_load_gib": round(rss_loaded, 3),
        "peak_rss_after_handler_gib": round(peak_handler, 3),
        "peak_rss_after_prepare_gib": round(peak_prepared, 3),
        "peak_rss_gib": round(peak_rss_gib(), 3),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"window data           {result['bars']:,} bars ({result['instruments']} symbols x "
              f"{result['minutes']:,} minutes, {args.start} .. {args.end})")
        print(f"samples               train {len(train):,}  valid {len(valid):,}  test {len(test):,}")
        print(f"per-bar array         {result['per_bar_array_gib']:.2f} GiB  (a materialised (N, {args.step_len * 6}) "
              f"train frame would be {materialised:.1f} GiB)")
        print(f"load + prepare        {load_s:.1f} s")
        print(f"rss after load        {rss_loaded:.2f} GiB   (before loading: {rss_before:.2f} GiB)")
        print(f"peak after handler    {peak_handler:.2f} GiB;  after prepare {peak_prepared:.2f} GiB")
        print(f"peak memory (maxrss)  {result['peak_rss_gib']:.2f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
