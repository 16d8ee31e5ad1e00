"""Cost of the store's content fingerprint (every byte of the calendar and feature files a run reads).

Prints, on a full-scale store (25 symbols x 2012-2018, ~17 M minute bars; built into a temporary
directory unless --store is given): the wall and CPU seconds of ``data_identity`` (full content),
of the previous sampled fingerprint (three 64 KiB samples per file, which missed changed values:
the baseline), and of reading the same bytes once without hashing (the hardware limit), with the
fingerprint's throughput and its fraction of the read-once speed. Run twice in a row the files are
in the page cache, which is the common case (the store was just written or read).

Usage::

    .venv/bin/python bench/bench_fingerprint.py [--store DIR] [--repeat 3]
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import tempfile
import time
from pathlib import Path


def sampled_identity(root: Path) -> str:
    """The previous fingerprint: path, size and three 64 KiB samples of every feature file."""
    sample, chunk = hashlib.sha256(), 1 << 16
    for path in sorted((root / "features").rglob("*.bin")):
        size = path.stat().st_size
        sample.update(f"{path.relative_to(root).as_posix()}:{size};".encode())
        with open(path, "rb") as fh:
            for offset in sorted({0, max(0, size // 2 - chunk // 2), max(0, size - chunk)}):
                fh.seek(offset)
                sample.update(fh.read(chunk))
    return sample.hexdigest()[:16]


def read_once(root: Path) -> int:
    """Read every feature byte once into a reused buffer (no hashing): the limit."""
    buf, total = bytearray(1 << 23), 0
    view = memoryview(buf)
    for path in sorted((root / "features").rglob("*.bin")):
        with open(path, "rb", buffering=0) as fh:
            while n := fh.readinto(view):
                total += n
    return total


def timed(fn, repeat: int) -> tuple[float, float, object]:
    best_wall = best_cpu = float("inf")
    out = None
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        best_wall = min(best_wall, time.perf_counter() - w0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best_wall, best_cpu, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=None, help="an existing Qlib minute store (default: build one)")
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions; the best is printed (default 3)")
    args = parser.parse_args()

    from rolling_calib.execution.store import data_identity

    tmp = None
    store = args.store
    if store is None:
        from data_prep import build_synthetic_store

        tmp = Path(tempfile.mkdtemp(prefix="bench_fp_"))
        store = build_synthetic_store(tmp / "us25", start="2012-01-01", end="2018-12-31", seed=0, progress=False)
    try:
        read_once(store)  # warm the page cache for every measurement alike
        wall_full, cpu_full, ident = timed(lambda: data_identity(store, instruments=["us25"]), args.repeat)
        wall_sample, cpu_sample, _ = timed(lambda: sampled_identity(store), args.repeat)
        wall_read, cpu_read, n_bytes = timed(lambda: read_once(store), args.repeat)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    gib = ident["feature_bytes"] / 2**30
    print(f"store: {ident['feature_files']} feature files, {gib:.3f} GiB read in full")
    print(f"content fingerprint (sha256 of every byte): {wall_full:.3f} s wall, {cpu_full:.3f} CPU-s, "
          f"{gib / wall_full:.2f} GiB/s")
    print(f"baseline, sampled fingerprint (3 x 64 KiB per file): {wall_sample:.3f} s wall, {cpu_sample:.3f} CPU-s "
          f"(the full fingerprint costs {wall_full / wall_sample:.1f}x the sampled one)")
    print(f"limit, read once without hashing: {wall_read:.3f} s wall, {cpu_read:.3f} CPU-s "
          f"({n_bytes / 2**30 / wall_read:.2f} GiB/s); fingerprint at {wall_read / wall_full:.0%} of that speed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
