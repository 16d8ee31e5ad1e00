"""Demo-scale rolling run: local process pool vs Ray, wall times (and a check that the numbers agree).

Runs the real schedule of ``workflows/demo.yaml`` (synthetic 25-stock minute market,
2 pipelines x ``--seeds`` seeds x 2 windows, window 1 fine-tuned from window 0) twice
into two fresh stores, with the same ``--workers`` and one torch thread per unit:

* **local** -- ``LocalExecutor(workers=K)`` (the baseline);
* **ray**   -- ``RayExecutor(num_cpus=K)`` on a Ray runtime it starts locally; the time
  to start Ray is printed separately from the run.

Then both stores are scored (QL, CQL per run) and compared: on CPU they must be equal.
Prints both wall times and the ratio ray / local (below 1 means Ray is faster). On one
machine Ray can only add overhead (start-up, worker imports, scheduling); it pays off
when a cluster has more cores than one machine.

Usage::

    nice -n 10 .venv/bin/python bench/bench_ray.py [--data demo_out/qlib_data] [--seeds 5] [--workers 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=ROOT / "demo_out" / "qlib_data",
                   help="demo minute store (built here if absent, as 'rolling-calib demo' does)")
    p.add_argument("--seeds", type=int, default=5, help="seeds per pipeline (demo: 5)")
    p.add_argument("--workers", type=int, default=2, help="parallel units for both executors")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import pandas as pd
    import ray

    from rolling_calib.config.experiment import load_experiment
    from rolling_calib.experiment.demo import DEMO_CONFIG, ensure_demo_data
    from rolling_calib.analysis.scoring import score_store
    from rolling_calib.execution.executors import LocalExecutor
    from rolling_calib.execution.ray_executor import RayExecutor
    from rolling_calib.execution.runner import plan_run, run_plan

    ensure_demo_data(args.data, progress=False)
    config = load_experiment(DEMO_CONFIG, overrides={"qlib_init.provider_uri": str(args.data.resolve())})
    tmp = Path(tempfile.mkdtemp(prefix="bench_ray_"))
    plans = {name: plan_run(config, store=tmp / name, seeds=args.seeds, n_threads=1) for name in ("local", "ray")}
    units = len(plans["local"].keys())
    print(f"demo: {units} units ({len(config.pipelines)} pipelines x {args.seeds} seeds x "
          f"{len(plans['local'].windows)} windows), {args.workers} workers, stores under {tmp}", file=sys.stderr)

    t = time.perf_counter()
    run_plan(plans["local"], executor=LocalExecutor(workers=args.workers), progress=False)
    local_s = time.perf_counter() - t

    executor = RayExecutor(num_cpus=args.workers, log_to_driver=False)
    t = time.perf_counter()
    executor.connect()
    ray_start_s = time.perf_counter() - t
    t = time.perf_counter()
    run_plan(plans["ray"], executor=executor, progress=False)
    ray_s = time.perf_counter() - t
    executor.shutdown()
    assert not ray.is_initialized()

    cols = ["pipeline", "seed", "ql", "ql_scored", "cql"]
    a = score_store(plans["local"].store).runs[cols]
    b = score_store(plans["ray"].store).runs[cols]
    equal = a.equals(b)
    max_diff = float((a[["ql", "ql_scored", "cql"]] - b[["ql", "ql_scored", "cql"]]).abs().to_numpy().max())
    result = {"units": units, "workers": args.workers, "local_seconds": local_s, "ray_start_seconds": ray_start_s,
              "ray_run_seconds": ray_s, "ray_total_seconds": ray_start_s + ray_s,
              "ratio_ray_over_local": (ray_start_s + ray_s) / local_s, "same_numbers": equal,
              "max_abs_difference": max_diff, "stores": str(tmp)}
    del pd
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"local pool   {local_s:8.1f} s   ({units} units, {args.workers} workers)")
        print(f"ray          {ray_start_s + ray_s:8.1f} s   (start {ray_start_s:.1f} s + run {ray_s:.1f} s)")
        print(f"ratio ray / local  {result['ratio_ray_over_local']:.2f}x")
        print(f"same numbers (QL, CQL of every run): {equal} (max |difference| {max_diff:.3g})")
    return 0 if equal else 1


if __name__ == "__main__":
    raise SystemExit(main())
