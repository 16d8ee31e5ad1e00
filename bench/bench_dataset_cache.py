"""CPU seconds per unit with and without the worker's dataset cache (a window's data set built once for its seeds).

Trains seeds ``0 .. N-1`` of one window of one pipeline of a workflow, one after another in one
process, through the runner's own unit path (:func:`rolling_calib.execution.unit_execution.execute_unit`,
as a worker does), twice, each in a fresh Python process: with the cache off
(``ROLLING_CALIB_DATASET_CACHE=0``: every unit builds its data set) and on (the default: the first
seed builds it, the others reuse it). Prints per unit its CPU seconds (this process's and its
ended children's: Qlib computes features in a process pool), wall
seconds, the build time its sidecar records and whether it built or reused the data set; then
the mean CPU seconds per unit of each and their ratio, and checks that both wrote the same bytes.

Usage::

    python bench/bench_dataset_cache.py rolling_calib/workflows/qlib_zoo/lightgbm.yaml \\
        --set qlib_init.provider_uri.day=/work/main/qlib_data/us25_day --seeds 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _cpu() -> float:
    """CPU seconds of this process and of its ended children (Qlib builds features in a process pool)."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _child(config: str, sets: list[str], store: str, seeds: int, window: int) -> None:
    """Train the units in this process; print one JSON line per unit."""
    from rolling_calib.config.experiment import load_experiment
    from rolling_calib.config.overrides import parse_set
    from rolling_calib.execution.bookkeeping import write_run_manifest
    from rolling_calib.execution.runner import plan_run
    from rolling_calib.execution.unit_execution import execute_unit
    from rolling_calib.execution.units import UnitKey

    overrides = parse_set(sets)
    plan = plan_run(load_experiment(config, overrides=overrides), store=Path(store), seeds=seeds, n_threads=1)
    write_run_manifest(plan)
    name = plan.pipelines[0].name
    for seed in range(seeds):
        c0, w0 = _cpu(), time.perf_counter()
        execute_unit(plan, UnitKey(name, seed, window))
        cpu, wall = _cpu() - c0, time.perf_counter() - w0
        side = json.loads((Path(store) / "units" / name / f"seed{seed}" / f"w{window:02d}.json").read_text())
        print(json.dumps({"seed": seed, "cpu_s": cpu, "wall_s": wall, "build_s": side["timings"]["build_s"],
                          "dataset": side["timings"]["dataset"]}), flush=True)


def _files(store: Path) -> dict[str, str]:
    return {str(p.relative_to(store)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((store / "units").rglob("w*.parquet"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("config")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="override, as for rolling-calib run")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--window", type=int, default=0)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.config, args.sets, args.child, args.seeds, args.window)
        return 0
    root = Path(tempfile.mkdtemp(prefix="bench_dataset_cache_"))
    runs = {}
    for label, size in (("fresh", "0"), ("cached", "1")):
        store = root / label
        cmd = [sys.executable, __file__, args.config, "--seeds", str(args.seeds), "--window", str(args.window),
               "--child", str(store), *(f"--set={s}" for s in args.sets)]
        env = {**os.environ, "ROLLING_CALIB_DATASET_CACHE": size}
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode:
            print(done.stderr[-3000:], file=sys.stderr)
            return done.returncode
        out = done.stdout
        runs[label] = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        print(f"{label} (ROLLING_CALIB_DATASET_CACHE={size}):")
        for r in runs[label]:
            print(f"  seed {r['seed']}: {r['cpu_s']:7.2f} CPU-s  {r['wall_s']:7.2f} wall-s  build {r['build_s']:6.2f} s"
                  f"  data set {r['dataset']}")
    mean = {k: sum(r["cpu_s"] for r in v) / len(v) for k, v in runs.items()}
    same = _files(root / "fresh") == _files(root / "cached")
    print(f"mean CPU-s per unit: fresh {mean['fresh']:.2f}, cached {mean['cached']:.2f} "
          f"(cached/fresh {mean['cached'] / mean['fresh']:.3f}); same prediction bytes: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
