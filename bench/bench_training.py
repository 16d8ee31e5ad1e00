"""Training throughput: our RollingLSTM path vs Qlib's own ``pytorch_lstm_ts.LSTM`` + ``TSDatasetH``.

Both paths train on the same synthetic minute store (same instruments and range, read through
Qlib's provider), with the same network (Qlib's ``LSTMModel``: ``d_feat=6``, same hidden size,
layers), batch size, window (``step_len``) and torch thread count, one prediction time per bar
(sample stride 1):

* **ours** -- :class:`rolling_calib.qlib_adapter.dataset.MinuteTSDataset` (windows cut per batch by index
  arithmetic on a contiguous per-bar array) and ``RollingLSTM._train_epoch``;
* **qlib** -- a ``DataHandlerLP`` with a ``QlibDataLoader`` of the six per-bar fields
  (``$open/$close`` ... ``$vwap/$close``, ``Log($volume+1)``; label ``Ref($close,-10)/$close-1``,
  ``Fillna`` / ``DropnaLabel`` processors), ``TSDatasetH(step_len)``, and
  ``qlib.contrib.model.pytorch_lstm_ts.LSTM.train_epoch`` over its own torch ``DataLoader``
  (``n_jobs=0``: both paths in one process).

Two figures per path:

* ``train_epoch`` -- one training epoch over the whole range (the network's forward/backward
  plus batch assembly: the like-for-like figure);
* ``batch assembly`` -- the same epoch's batches cut and collated without the network (the
  part of the path that is ours: windows by index arithmetic vs per-sample ``__getitem__``
  plus torch collation);
* ``fit`` -- one epoch of each model's own ``fit`` on train = all but the last ``--valid-days``
  sessions, valid = those sessions (Qlib's ``fit`` also re-scores the whole training set every
  epoch; ours keeps the running training loss). Samples/s = training samples / fit time.

Data set-up times (load + index) are printed separately.

Usage::

    nice -n 10 .venv/bin/python bench/bench_training.py [--store DIR] [--symbols AAPL,F,MSFT]
        [--start 2018-01-02 --end 2018-01-12] [--hidden-size 64 --num-layers 2 --batch-size 2000]
        [--step-len 60] [--threads 1] [--epochs 2] [--json]

Prints samples/s of both paths and the ratio ours / qlib.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", default=None, help="minute store (default: build a small synthetic one in a temp dir)")
    p.add_argument("--symbols", default="AAPL,F,MSFT", help="comma-separated symbols for the built store")
    p.add_argument("--start", default="2018-01-02")
    p.add_argument("--end", default="2018-01-12")
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--num-layers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=2000)
    p.add_argument("--step-len", type=int, default=60)
    p.add_argument("--threads", type=int, default=1, help="torch threads for both paths")
    p.add_argument("--epochs", type=int, default=2,
                   help="rounds; each round times one epoch and one fit of each path, alternating (best kept)")
    p.add_argument("--valid-days", type=int, default=2,
                   help="last sessions used as valid in the fit figure (Qlib's fit crashes if valid < one batch)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return p.parse_args(argv)


def _ours(args, instruments) -> dict:
    """Set up our path; returns callables for one training epoch and one fit."""
    import numpy as np

    from rolling_calib.qlib_adapter.dataset import MinuteTSDataset, MinuteWindowSampler, clear_cache
    from rolling_calib.qlib_adapter.model import RollingLSTM

    clear_cache()
    t0 = time.perf_counter()
    handler = {"class": "MinuteBarHandler", "module_path": "rolling_calib.qlib_adapter.dataset",
               "kwargs": dict(instruments=instruments, start_time=args.start, end_time=args.end,
                              fit_start_time=args.start, fit_end_time=args.end, window=args.step_len)}
    ds = MinuteTSDataset(handler=handler, segments={"train": (args.start, args.end)},
                         step_len=args.step_len, sample_stride=1)
    full = ds.prepare("train")
    setup = time.perf_counter() - t0
    # whole batches only, like Qlib's drop_last=True
    n_used = (len(full) // args.batch_size) * args.batch_size
    train = MinuteWindowSampler(full.panel, full.positions[:n_used], step_len=full.step_len, norm=full.norm)
    model = RollingLSTM(hidden_size=args.hidden_size, num_layers=args.num_layers, batch_size=args.batch_size,
                        n_threads=args.threads, seed=0)
    y = train.labels
    model.label_mean, model.label_std = float(y.mean()), float(y.std())
    rng = np.random.default_rng(0)

    def epoch() -> None:
        model._train_epoch(train, rng)

    def assemble() -> None:
        order = rng.permutation(len(train))
        for lo in range(0, len(order), args.batch_size):
            train.batch(order[lo : lo + args.batch_size])

    def fit() -> int:
        fit_ds = MinuteTSDataset(handler=handler, step_len=args.step_len, sample_stride=1,
                                 segments={"train": (args.start, args.train_end),
                                           "valid": (args.valid_start, args.end)})
        m = RollingLSTM(hidden_size=args.hidden_size, num_layers=args.num_layers, batch_size=args.batch_size,
                        n_threads=args.threads, seed=0, n_epochs=1)
        m.fit(fit_ds)
        return m.last_fit_info["n_train"]

    return {"samples": n_used, "setup_seconds": setup, "epoch": epoch, "fit": fit, "assemble": assemble}


def _qlib(args, instruments) -> dict:
    """Set up Qlib's path (TSDatasetH + pytorch_lstm_ts.LSTM); same callables."""
    import numpy as np
    import torch
    from qlib.contrib.model.pytorch_lstm_ts import LSTM
    from qlib.data.dataset import TSDatasetH
    from qlib.data.dataset.handler import DataHandlerLP
    from qlib.model.utils import ConcatDataset
    from torch.utils.data import DataLoader

    end = f"{args.end} 23:59"
    t0 = time.perf_counter()
    fields = ["$open/$close", "$high/$close", "$low/$close", "$close/Ref($close,1)", "$vwap/$close",
              "Log($volume+1)"]
    handler = DataHandlerLP(
        instruments=instruments, start_time=args.start, end_time=end,
        data_loader={"class": "QlibDataLoader", "kwargs": {"config": {
            "feature": (fields, ["OPEN", "HIGH", "LOW", "CLOSE", "VWAP", "VOLUME"]),
            "label": (["Ref($close,-10)/$close-1"], ["LABEL0"])}, "freq": "1min"}},
        infer_processors=[{"class": "Fillna", "kwargs": {"fields_group": "feature"}}],
        learn_processors=[{"class": "DropnaLabel"}],
    )
    ds = TSDatasetH(handler=handler, segments={"train": (args.start, end)}, step_len=args.step_len)
    dl_train = ds.prepare("train", col_set=["feature", "label"], data_key=DataHandlerLP.DK_L)
    dl_train.config(fillna_type="ffill+bfill")
    setup = time.perf_counter() - t0
    torch.set_num_threads(args.threads)
    model = LSTM(d_feat=6, hidden_size=args.hidden_size, num_layers=args.num_layers, batch_size=args.batch_size,
                 n_jobs=0, GPU=-1, seed=0)
    loader = DataLoader(ConcatDataset(dl_train, np.ones(len(dl_train))), batch_size=args.batch_size,
                        shuffle=True, num_workers=0, drop_last=True)
    n_used = (len(dl_train) // args.batch_size) * args.batch_size

    def epoch() -> None:
        model.train_epoch(loader)

    def assemble() -> None:
        for data, _weight in loader:
            data[:, :, 0:-1].float()

    def fit() -> int:
        fit_ds = TSDatasetH(handler=handler, step_len=args.step_len,
                            segments={"train": (args.start, f"{args.train_end} 23:59"),
                                      "valid": (args.valid_start, end)})
        m = LSTM(d_feat=6, hidden_size=args.hidden_size, num_layers=args.num_layers, batch_size=args.batch_size,
                 n_jobs=0, GPU=-1, seed=0, n_epochs=1)
        with tempfile.TemporaryDirectory() as tmp:
            m.fit(fit_ds, save_path=str(Path(tmp) / "qlib_lstm.pt"))
        return len(fit_ds.prepare("train", col_set=["feature", "label"], data_key=DataHandlerLP.DK_L))

    return {"samples": n_used, "setup_seconds": setup, "epoch": epoch, "fit": fit, "assemble": assemble}


def _interleaved(paths: dict, rounds: int) -> dict:
    """Time every path's epoch and fit, alternating paths each round; keep the best of each."""
    out = {name: {"epoch_seconds": float("inf"), "fit_seconds": float("inf"), "assemble_seconds": float("inf")}
           for name in paths}
    for _ in range(rounds):
        for name, p in paths.items():
            t = time.perf_counter()
            p["assemble"]()
            out[name]["assemble_seconds"] = min(out[name]["assemble_seconds"], time.perf_counter() - t)
        for name, p in paths.items():
            t = time.perf_counter()
            p["epoch"]()
            out[name]["epoch_seconds"] = min(out[name]["epoch_seconds"], time.perf_counter() - t)
        for name, p in paths.items():
            t = time.perf_counter()
            n_fit = p["fit"]()
            out[name]["fit_seconds"] = min(out[name]["fit_seconds"], time.perf_counter() - t)
            out[name]["fit_samples"] = n_fit
    for name, p in paths.items():
        r = out[name]
        r.update(samples=p["samples"], setup_seconds=p["setup_seconds"],
                 samples_per_s=p["samples"] / r["epoch_seconds"],
                 assemble_samples_per_s=p["samples"] / r["assemble_seconds"],
                 fit_samples_per_s=r["fit_samples"] / r["fit_seconds"])
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    from data_prep import build_synthetic_store, init_qlib

    symbols = [s.strip().upper() for s in args.symbols.split(",") if s.strip()]
    store = Path(args.store) if args.store else build_synthetic_store(
        Path(tempfile.mkdtemp(prefix="bench_training_")), start=args.start, end=args.end, symbols=symbols, seed=0)
    init_qlib(store)
    from data_prep import sessions

    dates = [str(d) for d in sessions(args.start, args.end).dates]
    if len(dates) <= args.valid_days:
        raise ValueError(f"--start/--end: expected more than --valid-days={args.valid_days} sessions, found {len(dates)}")
    args.train_end, args.valid_start = dates[-args.valid_days - 1], dates[-args.valid_days]
    res = _interleaved({"ours": _ours(args, symbols), "qlib": _qlib(args, symbols)}, args.epochs)
    ours, qlib_ = res["ours"], res["qlib"]
    ratio = ours["samples_per_s"] / qlib_["samples_per_s"]
    fit_ratio = ours["fit_samples_per_s"] / qlib_["fit_samples_per_s"]
    assemble_ratio = ours["assemble_samples_per_s"] / qlib_["assemble_samples_per_s"]
    result = {"store": str(store), "symbols": symbols, "start": args.start, "end": args.end,
              "hidden_size": args.hidden_size, "num_layers": args.num_layers, "batch_size": args.batch_size,
              "step_len": args.step_len, "threads": args.threads, "ours": ours, "qlib": qlib_,
              "ratio_ours_over_qlib": ratio, "fit_ratio_ours_over_qlib": fit_ratio,
              "batch_assembly_ratio_ours_over_qlib": assemble_ratio}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"setup (load + index)   ours {ours['setup_seconds']:.2f} s   qlib {qlib_['setup_seconds']:.2f} s")
        print(f"training samples/s     ours {ours['samples_per_s']:,.0f}   qlib {qlib_['samples_per_s']:,.0f}"
              f"   ({ours['samples']:,} vs {qlib_['samples']:,} samples per epoch)")
        print(f"batch assembly /s      ours {ours['assemble_samples_per_s']:,.0f}   "
              f"qlib {qlib_['assemble_samples_per_s']:,.0f}   (windows cut + normalised, no network)")
        print(f"fit samples/s          ours {ours['fit_samples_per_s']:,.0f}   qlib {qlib_['fit_samples_per_s']:,.0f}"
              f"   (one epoch of each fit, {ours['fit_samples']:,} vs {qlib_['fit_samples']:,} training samples)")
        print(f"ratio ours / qlib      train epoch {ratio:.2f}x   fit {fit_ratio:.2f}x   "
              f"batch assembly {assemble_ratio:.1f}x   (hidden {args.hidden_size}, layers {args.num_layers}, "
              f"batch {args.batch_size}, step_len {args.step_len}, threads {args.threads})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
