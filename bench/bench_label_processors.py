"""Learn processors on the minute label: our per-minute kernels vs Qlib's own processors, seconds.

Loads a minute store's panel through ``MinuteBarHandler`` (default: a fresh 25-stock, one-year
synthetic store, 2017-07..2018-06), then times, on the panel's whole label (every calendar minute of
every instrument):

* ``ours``: ``apply_label_processors`` (the handler's ``DK_L`` label), per processor chain;
* ``qlib``: Qlib's own processor on the handler's frame ``(datetime, instrument) x [label]``
  (``CSZScoreNorm`` runs a Python function per minute: by default it is timed on the first
  ``--qlib-minutes`` minutes and scaled to the panel linearly; ``--qlib-minutes 0`` times it in full).

and checks that both give the same numbers where both ran (max |difference|).

Usage::

    nice -n 10 .venv/bin/python bench/bench_label_processors.py [--store DIR] [--start 2017-07-01 --end 2018-06-30]
        [--qlib-minutes 5000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

CHAINS = {
    "CSRankNorm": [{"class": "CSRankNorm", "kwargs": {"fields_group": "label"}}],
    "CSZScoreNorm": [{"class": "CSZScoreNorm", "kwargs": {"fields_group": "label"}}],
    "CSZScoreNorm(robust)": [{"class": "CSZScoreNorm", "kwargs": {"fields_group": "label", "method": "robust"}}],
    "DropnaLabel+CSRankNorm": ["DropnaLabel", {"class": "CSRankNorm", "kwargs": {"fields_group": "label"}}],
}


def _handler(store: Path):
    from data_prep import init_qlib
    from data_prep.qlib_store import read_meta
    from rolling_calib.qlib_adapter.dataset import MinuteBarHandler

    init_qlib(store)
    cal = read_meta(store)["calendar"]
    return MinuteBarHandler(instruments="us25", start_time=cal["first"], end_time=cal["last"], window=30,
                            norm_samples=2000)


def _time_qlib(configs: list, frame, n_minutes: int):
    """Seconds of Qlib's processors on ``frame`` (on its first ``n_minutes`` minutes, scaled to all), their output, the rows."""
    from qlib.data.dataset import processor as processor_module
    from qlib.utils import init_instance_by_config

    times = frame.index.get_level_values("datetime").unique()
    part = frame if not 0 < n_minutes < len(times) else frame.loc[: times[n_minutes - 1]]
    used = part.index.get_level_values("datetime").nunique()
    out = part.copy()
    t0 = time.perf_counter()
    for config in configs:
        out = init_instance_by_config(config, processor_module, accept_types=processor_module.Processor)(out)
    return (time.perf_counter() - t0) * len(times) / used, out, part.index


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=None, help="a Qlib minute store (default: a fresh synthetic one, removed after)")
    parser.add_argument("--start", default="2017-07-01")
    parser.add_argument("--end", default="2018-06-30")
    parser.add_argument("--qlib-minutes", type=int, default=5000,
                        help="time Qlib's CSZScoreNorm on this many minutes and scale (0: all)")
    args = parser.parse_args()

    import numpy as np
    from qlib.data.dataset.handler import DataHandlerLP

    from data_prep import build_synthetic_store
    from rolling_calib.qlib_adapter.label_processors import apply_label_processors, build_label_processors

    tmp = None
    store = Path(args.store) if args.store else None
    if store is None:
        tmp = Path(tempfile.mkdtemp(prefix="bench_labels_"))
        store = build_synthetic_store(tmp / "store", start=args.start, end=args.end, seed=0)
    try:
        handler = _handler(store)
        panel = handler.panel
        frame = handler.fetch(col_set=DataHandlerLP.CS_RAW, data_key=DataHandlerLP.DK_R)[["label"]]
        n_i, n_t = panel.label.shape
        print(f"panel                     {n_i} instruments x {n_t:,} minutes = {n_i * n_t:,} bars")
        for name, configs in CHAINS.items():
            procs = build_label_processors(configs)
            t0 = time.perf_counter()
            ours = apply_label_processors(panel.label, panel.times, panel.instruments, procs)
            t_ours = time.perf_counter() - t0
            minutes = args.qlib_minutes if "CSZScoreNorm" in name else 0
            t_qlib, by_qlib, rows = _time_qlib(configs, frame, minutes)
            want = by_qlib[("label", "LABEL0")].reindex(rows).to_numpy(np.float64)
            got = ours.T.reshape(-1)[: len(rows)].astype(np.float64)  # datetime-major, as the frame
            same_nan = bool((np.isnan(got) == np.isnan(want)).all())
            diff = float(np.nanmax(np.abs(got - want)))
            scaled = "" if not 0 < minutes < n_t else f" (timed on {minutes:,} minutes, scaled)"
            print(f"{name:<25} ours {t_ours:6.2f} s   qlib {t_qlib:7.1f} s{scaled}   "
                  f"max |ours - qlib| {diff:.1e}, NaN where qlib's: {same_nan}")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
