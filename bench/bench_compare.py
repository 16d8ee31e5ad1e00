"""Scoring and comparing a store of many runs vs the time to read its Parquet files.

Builds (once, under ``--store``) a synthetic result store through the real store API (each
unit's sidecar records the checksums of its Parquet file, as the runner's do; ``compare`` checks
the XXH3-128 as it reads):
``--pipelines`` x ``--seeds`` runs, each of ``--months`` monthly windows (one unit each) of
every NYSE session minute for 25 instruments, rows in (datetime, instrument) order as the
runner writes them. Then, with the files in the page cache, each in a fresh subprocess (CPU
seconds of all threads, wall seconds, peak ``ru_maxrss``):

* ``read-once``: every unit's Parquet file read with pyarrow, all columns (the limit);
* ``compare``: what the ``compare`` command does, ``compare_store(score_store(store))``
  (monthly pooled rolling CQL; QL; IC, ICIR and Rank IC per run; bootstrap of every pair),
  with its CPU time split into reading the units (``rolling_calib.execution.reader``: projection, checks, merge),
  the rolling metric, the IC metrics and ``compare_store``. ``--labels`` says which runs share
  their labels: ``per-pipeline`` (the default) draws one label series per pipeline, which its
  seeds share, as the seeds of every store the runner writes do (a pipeline's labels come from
  its data handler, whatever the seed); ``shared``: every run the same labels (pipelines with one
  handler and label, the common case); ``per-run``: every run labels of its own, so the IC metrics
  rank and centre the labels for every run (no real store has this: the worst case, the bench's
  only store before 2026-11-29);
* ``pandas-read``: the previous reading path per run, ``load_run`` (``pandas.read_parquet``
  per unit, concatenation, ``duplicated``) then the rolling metric on its frame (QL and CQL only);
* ``polars``: a plain polars version of the scores (``scan_parquet`` of a run's units, month
  means, shift, join; QL and CQL only), then the mean and standard deviation per pipeline.

Usage::

    .venv/bin/python bench/bench_compare.py [--store bench_out/compare_store] [--pipelines 4]
        [--seeds 8] [--months 3] [--labels per-pipeline] [--n-boot 2000] [--skip polars] [--repeat 5] [--json]

``BENCH_CODE=DIR`` measures the code of another checkout (e.g. the one before a change) with this script.
The last line before the JSON is ``compare / read-once``, the ratio of CPU seconds (``x_read`` in ``--json``).
``--repeat N`` runs every variant N times, interleaved, each in a fresh process, and reports each variant's median
run (the ratio of the medians; each repeat's ratio beside it): one process's CPU seconds vary by 10-20% on an idle
machine, more than a change worth measuring.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
INSTRUMENTS = tuple(f"S{i:02d}" for i in range(25))
IMPLS = ("read-once", "compare", "pandas-read", "polars")
#: Which runs share their labels (``--labels``): every run, each pipeline's seeds, or none.
LABEL_SHARING = ("per-pipeline", "shared", "per-run")


# --------------------------------------------------------------------------- the store
def build_store(store: Path, *, pipelines: int, seeds: int, months: int, labels: str) -> None:
    """Synthetic units (``prediction = 0.5 label + seed bias + noise``) written through the store API.

    ``labels``: which runs share their label draws (:data:`LABEL_SHARING`); ``per-run`` draws the
    same random numbers in the same order as the bench's store before ``--labels``.
    """
    import numpy as np
    import pandas as pd

    from data_prep import session_minutes
    from rolling_calib.core.schedule import rolling_windows
    from rolling_calib.execution import store as st
    from rolling_calib.execution.units import UnitKey

    start = pd.Period("2018-01", "M")
    end = start + months - 1
    calendar = session_minutes("2017-10-01", end.end_time.date())
    windows = rolling_windows(calendar, initial_train_start="2017-10", start=str(start), end=str(end), step_months=1)
    rng = np.random.default_rng(0)
    entries = {}
    drawn: dict[Any, np.ndarray] = {}

    def label_of(pipeline: int, window: int, n: int) -> np.ndarray:
        key = {"shared": window, "per-pipeline": (pipeline, window)}.get(labels)
        if key is None:
            return rng.normal(0.0, 3.0, n)
        if key not in drawn:
            drawn[key] = rng.normal(0.0, 3.0, n)
        return drawn[key]

    for p in range(pipelines):
        name = f"p{p}"
        entries[name] = {"config_hash": f"hash-{name}", "task": {}, "windows": [w.to_dict() for w in windows],
                         "mode": "finetune", "seeds": list(range(seeds))}
        for seed in range(seeds):
            bias = rng.normal(0.0, 0.5 + p)
            for w in windows:
                times = calendar[(calendar >= w.test.start) & (calendar <= w.test.end)]
                n = len(times) * len(INSTRUMENTS)
                label = label_of(p, w.index, n)
                frame = pd.DataFrame({
                    "datetime": np.repeat(times.values, len(INSTRUMENTS)),
                    "instrument": np.tile(np.array(INSTRUMENTS, dtype=object), len(times)),
                    "prediction": 0.5 * label + bias + rng.normal(0.0, 1.0 + 0.2 * p, n),
                    "label": label,
                })
                key = UnitKey(name, seed, w.index)
                paths = st.unit_paths(store, key)
                checksums = st.write_unit_parquet(paths.parquet, frame[list(st.UNIT_COLUMNS)])
                st.atomic_write_json(paths.sidecar, {"config_hash": f"hash-{name}", "rows": n, **checksums.fields()})
    st.write_manifest(store, pipelines=entries, extra={"compare": [[f"p{i}", f"p{i + 1}"] for i in range(pipelines - 1)]})


def unit_files(store: Path) -> list[Path]:
    return sorted((store / "units").rglob("*.parquet"))


# --------------------------------------------------------------------------- variants
def run_read_once(store: Path, args) -> dict:
    import pyarrow.parquet as pq

    rows = 0
    for path in unit_files(store):
        rows += pq.read_table(path).num_rows
    return {"rows": rows}


def run_compare(store: Path, args) -> dict:
    """compare_store(score_store(...)) with the CPU time of its parts."""
    from rolling_calib.analysis import comparison as comparison_module
    from rolling_calib.analysis import scoring
    from rolling_calib.core import metrics
    from rolling_calib.execution import reader

    spent: dict[str, float] = {"read units": 0.0, "rolling CQL": 0.0, "IC metrics": 0.0}

    def timed(label, fn):
        def wrapper(*a, **k):
            c0 = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                spent[label] += time.process_time() - c0
        return wrapper

    reader._read_test = timed("read units", reader._read_test)
    metrics.rolling_calibrated_quadratic_loss = timed("rolling CQL", metrics.rolling_calibrated_quadratic_loss)
    scoring.daily_ic = timed("IC metrics", scoring.daily_ic)
    c0 = time.process_time()
    scores = scoring.score_store(store)
    c1 = time.process_time()
    try:
        from rolling_calib.core.resampling import Resampling
        boot = {"resampling": Resampling(n_boot=args.n_boot)}
    except ImportError:   # the code before issue 25 (loose keywords), to measure it with the same script
        boot = {"n_boot": args.n_boot}
    comparison = comparison_module.compare_store(scores, **boot)
    spent["compare_store"] = time.process_time() - c1
    spent["rest of score_store"] = (c1 - c0) - spent["read units"] - spent["rolling CQL"] - spent["IC metrics"]
    return {"runs": len(scores.runs), "rows": int(scores.runs["n_all"].sum()), "parts": spent,
            "cql_mean": float(comparison.summary["cql_mean"].iloc[0])}


def run_pandas_read(store: Path, args) -> dict:
    from rolling_calib.core.metrics import rolling_calibrated_quadratic_loss
    from rolling_calib.execution.reader import load_run
    from rolling_calib.execution.store import Store

    opened = Store.open(store)
    cql = []
    for name, entry in opened.pipelines.items():
        for seed in entry.seeds:
            frame = load_run(opened, name, seed)
            cql.append(rolling_calibrated_quadratic_loss(frame["prediction"].to_numpy(dtype=float),
                                                         frame["label"].to_numpy(dtype=float),
                                                         frame["datetime"].to_numpy()).cql)
    return {"runs": len(cql), "cql_first": cql[0]}


def run_polars(store: Path, args) -> dict:
    import polars as pl

    from rolling_calib.execution.store import Store

    opened = Store.open(store)
    rows = []
    for name, entry in opened.pipelines.items():
        for seed in entry.seeds:
            files = sorted(str(p) for p in opened.layout.unit_dir(name, seed).glob("*.parquet"))
            lf = (pl.scan_parquet(files).select(["datetime", "prediction", "label"])
                  .with_columns((pl.col("label") - pl.col("prediction")).alias("r"),
                                pl.col("datetime").dt.truncate("1mo").alias("month")))
            bias = lf.group_by("month").agg(pl.col("r").mean().alias("mean")).sort("month")
            bias = bias.with_columns(pl.col("mean").shift(1).alias("c")).select(["month", "c"])
            out = (lf.join(bias, on="month")
                   .select((pl.col("r") ** 2).mean().alias("ql"),
                           ((pl.col("r") - pl.col("c")) ** 2).filter(pl.col("c").is_not_null()).mean().alias("cql"))
                   .collect())
            rows.append({"pipeline": name, "seed": seed, "ql": out["ql"][0], "cql": out["cql"][0]})
    summary = pl.DataFrame(rows).group_by("pipeline").agg(pl.col("cql").mean(), pl.col("cql").std().alias("cql_std"))
    return {"runs": len(rows), "cql_first": rows[0]["cql"], "pipelines": summary.height}


RUNNERS = {"read-once": run_read_once, "compare": run_compare, "pandas-read": run_pandas_read, "polars": run_polars}


def child(impl: str, store: Path, args) -> dict:
    import importlib

    import pyarrow.parquet as pq

    # import costs are not the work's (arch, imported by the verdicts, imports statsmodels and matplotlib: ~1.5 CPU-s;
    # the qlib adapter, ~0.05 CPU-s here, most of it gym: `rolling-calib` has gym imported at start, and importing the
    # adapter there costs 0.007 CPU-s; the scoring describes this synthetic store's labels through it)
    for module in {"compare": ["rolling_calib.analysis.scoring", "rolling_calib.analysis.comparison", "arch.bootstrap",
                               "arch.covariance.kernel", "rolling_calib.qlib_adapter.labels"],
                   "pandas-read": ["rolling_calib.analysis.scoring"],
                   "polars": ["polars", "rolling_calib.execution.store"]}.get(impl, []):
        importlib.import_module(module)

    pq.read_table(unit_files(store)[0])  # start pyarrow's pools and threads outside the timing
    w0, c0 = time.perf_counter(), time.process_time()
    out = RUNNERS[impl](store, args)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return {"impl": impl, "cpu_s": cpu, "wall_s": wall,
            "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, **out}


def median_run(runs: list[dict]) -> dict:
    """One variant's figures over its repeats: the run of median CPU seconds (an odd count: a real run; even: the
    upper middle one), with every repeat's CPU seconds beside it (``cpu_s_repeats``); the first error if any failed."""
    bad = [r for r in runs if "error" in r]
    if bad:
        return bad[0]
    ordered = sorted(runs, key=lambda r: r["cpu_s"])
    return {**ordered[len(ordered) // 2], "cpu_s_repeats": [r["cpu_s"] for r in runs]}


def ratio_per_repeat(runs_of: dict[str, list[dict]]) -> list[float]:
    """``compare`` over ``read-once`` CPU seconds in each repeat (the two measured next to each other)."""
    pairs = zip(runs_of.get("compare", []), runs_of.get("read-once", []))
    return [c["cpu_s"] / r["cpu_s"] for c, r in pairs if "error" not in c and "error" not in r]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=str(ROOT / "bench_out" / "compare_store"),
                        help="store directory (built when missing; the parameters are part of its name)")
    parser.add_argument("--pipelines", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--months", type=int, default=3, help="evaluation months per run (one unit each)")
    parser.add_argument("--labels", default="per-pipeline", choices=LABEL_SHARING,
                        help="which runs share their labels: each pipeline's seeds (as in every store the runner "
                             "writes), every run, or none (the worst case)")
    parser.add_argument("--n-boot", type=int, default=2000)
    parser.add_argument("--skip", action="append", default=[], choices=IMPLS)
    parser.add_argument("--repeat", type=int, default=1,
                        help="fresh processes per variant, interleaved; each figure is the median of them")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat: expected an integer >= 1, found {args.repeat}")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    suffix = "" if args.labels == "per-run" else f"_{args.labels}-labels"   # (per-run: the name the store had before)
    store = Path(f"{args.store}_{args.pipelines}x{args.seeds}x{args.months}m{suffix}")
    if args.child:
        print(json.dumps(child(args.child, store, args)))
        return 0
    first_sidecar = next(iter(sorted((store / "units").rglob("w*.json"))), None) if store.is_dir() else None
    if first_sidecar is not None and "xxh3" not in json.loads(first_sidecar.read_text()):
        print(f"bench_compare: {store} was built before units recorded their XXH3-128 (its reads would verify the "
              f"SHA-256, as units written then are): remove it, or name another --store", file=sys.stderr)
        return 2
    if not (store / "manifest.json").is_file():
        t0 = time.perf_counter()
        print(f"building {store} ...", file=sys.stderr, flush=True)
        build_store(store, pipelines=args.pipelines, seeds=args.seeds, months=args.months, labels=args.labels)
        print(f"  built in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    files = unit_files(store)
    size = sum(p.stat().st_size for p in files)
    for path in files:  # warm the page cache: every variant reads from memory
        path.read_bytes()
    code = Path(os.environ.get("BENCH_CODE", ROOT))   # the checkout whose code is measured (default: this one)
    env = dict(os.environ, PYTHONPATH=str(code) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs_of: dict[str, list[dict]] = {impl: [] for impl in IMPLS if impl not in args.skip}
    for rep in range(args.repeat):   # interleaved, so a slow spell of the machine touches every variant alike
        for impl in runs_of:
            cmd = [sys.executable, __file__, *argv, "--child", impl]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if out.returncode != 0:
                runs_of[impl].append({"impl": impl, "error": (out.stderr.strip().splitlines() or ["?"])[-1]})
            else:
                runs_of[impl].append(json.loads(out.stdout.strip().splitlines()[-1]))
            last = runs_of[impl][-1]
            print(f"  {rep + 1}/{args.repeat} {impl:<12}" + (f"{last['cpu_s']:.2f} CPU-s" if "error" not in last
                                                              else "failed"), file=sys.stderr)
    results = [median_run(runs) for runs in runs_of.values()]
    limit = next((r["cpu_s"] for r in results if r["impl"] == "read-once" and "error" not in r), float("nan"))
    rows = next((r["rows"] for r in results if "rows" in r), 0)
    runs = args.pipelines * args.seeds
    print(f"\nstore: {runs} runs ({args.pipelines} pipelines x {args.seeds} seeds), {len(files)} unit files, "
          f"{rows:,} rows, {size / 2**20:.0f} MiB of Parquet; labels {args.labels}")
    head = f"{'variant':<14}{'CPU-s':>8}{'wall-s':>8}{'x read':>8}{'peak GiB':>10}"
    print(head)
    print("-" * len(head))
    for r in results:
        if "error" in r:
            print(f"{r['impl']:<14}  failed: {r['error']}")
            continue
        print(f"{r['impl']:<14}{r['cpu_s']:>8.2f}{r['wall_s']:>8.2f}{r['cpu_s'] / limit:>8.1f}{r['peak_gib']:>10.2f}")
        for part, cpu in r.get("parts", {}).items():
            print(f"  {part:<22}{cpu:>8.2f} CPU-s")
    for r in results:   # the ratio to one read pass (the limit), for --json
        if "error" not in r:
            r["x_read"] = r["cpu_s"] / limit
    compare = next((r for r in results if r["impl"] == "compare" and "error" not in r), None)
    if compare is not None:
        ratios = ratio_per_repeat(runs_of)
        spread = (f"; per repeat {', '.join(f'{x:.2f}' for x in ratios)}, median {statistics.median(ratios):.2f}x"
                  if len(ratios) > 1 else "")
        print(f"\ncompare / read-once: {compare['x_read']:.2f}x (CPU seconds{', medians of ' + str(args.repeat) + ' fresh processes each' if args.repeat > 1 else ''}{spread})")
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
