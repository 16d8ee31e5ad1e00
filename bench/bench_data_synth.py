"""Full-scale synthetic market: wall time and peak memory of generating + writing the store.

Target (issue 3): 25 symbols x 2012-2018 (about 17 million bars) in under 3 minutes with a
peak resident memory under 6 GiB.

Usage::

    nice -n 10 .venv/bin/python bench/bench_data_synth.py [--out DIR] [--start 2012-01-01 --end 2018-12-31] [--seed 0]

Prints one line per figure; the peak is ``resource.getrusage`` ``ru_maxrss`` of this process and
of its (waited-for) children.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path


def peak_rss_gib() -> float:
    """Peak resident set size of this process and its children, GiB (Linux reports KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024**2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="store directory (default: a temporary one, removed after)")
    parser.add_argument("--start", default="2012-01-01")
    parser.add_argument("--end", default="2018-12-31")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from data_prep import build_synthetic_store
    from data_prep.qlib_store import read_meta

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench_synth_"))
    t0 = time.perf_counter()
    build_synthetic_store(out, start=args.start, end=args.end, seed=args.seed, progress=True)
    wall = time.perf_counter() - t0
    meta = read_meta(out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"rows written          {meta['total_rows']:,} bars ({len(meta['symbols'])} symbols, {meta['calendar']['bars']:,} calendar minutes)")
    print(f"store size            {size / 1024**2:,.0f} MiB")
    print(f"wall time             {wall:.1f} s   (target < 180 s)")
    print(f"throughput            {meta['total_rows'] / wall:,.0f} bars/s")
    print(f"peak memory (maxrss)  {peak_rss_gib():.2f} GiB   (target < 6 GiB)")
    if args.out is None:
        shutil.rmtree(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
