"""Ingest speed and peak memory on the full synthetic set, against Qlib's dump_bin.py and a pandas baseline.

Steps: generate the synthetic market (25 symbols x 2012-2018 by default, about 17 M minute bars),
write it as one long Parquet file (``symbol, datetime, open, high, low, close, volume``; missing
minutes absent, as a vendor delivers them) and, for Qlib's script, as one Parquet file per symbol
(``date, open, high, low, close, volume, vwap, factor``: the same seven fields, vwap the typical
price, factor 1), then run, each in its own process so that its peak memory is its own:

* ``data_prep.ingest`` (polars, vectorised validation, symbol by symbol through spill files,
  NumPy binary writer), in the default validate mode;
* Qlib's ``scripts/dump_bin.py dump_all --freq 1min`` (no validation; calendar = union of the
  timestamps), with ``--max_workers`` = the CPU count: read from the Qlib checkout ``--qlib-repo DIR``
  names (a clone or its git directory; the script is not part of the pyqlib wheel, and this project
  holds no copy of it); skipped, and said so, without one;
* the baseline below: the same conversion done the plain pandas way (``read_parquet``,
  per-symbol ``groupby``, the same validation checks with pandas idioms, ``reindex`` on the
  calendar, ``Series.values.tofile``).

Printed per implementation: CPU seconds (user + system of the process and of the worker
processes it waited for, from ``wait4``), wall seconds, peak RSS (``ru_maxrss``: the largest
single process) and, sampled every 0.1 s, the peak of the summed RSS of the process tree (what a
multi-process run like dump_bin's really holds); then the speed ratios, our peak as a share of
the 3 GiB target, and whether the stores agree (ours and the pandas baseline on every value;
ours and dump_bin's on every bar of dump_bin's calendar). CPU seconds are the figures to compare
on a shared machine; wall times vary with load.

Usage::

    nice -n 10 .venv/bin/python bench/bench_data_ingest.py [--start 2012-01-01 --end 2018-12-31] [--symbols N]
        [--qlib-repo PATH/TO/qlib] [--skip-baseline] [--skip-dump-bin]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # run as a script: the repository's packages
    sys.path.insert(0, str(_ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/qlib_checkout.py

TARGET_GIB = 3.0
FIELDS7 = ("open", "high", "low", "close", "volume", "vwap", "factor")


def make_sources(long_path: Path, per_symbol_dir: Path | None, *, start: str, end: str, symbols, seed: int) -> int:
    """Write the synthetic market as one long Parquet file (and one file per symbol for dump_bin); the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from data_prep.synthetic import _profile, simulate_market, simulate_symbol

    market = simulate_market(start, end, seed=seed, sectors=[_profile(s).sector for s in symbols])
    times = market.minutes.astype("datetime64[us]")
    writer, rows = None, 0
    if per_symbol_dir is not None:
        per_symbol_dir.mkdir(parents=True, exist_ok=True)
    for sym in symbols:
        cols = simulate_symbol(sym, market)
        keep = ~np.isnan(cols["close"])
        values = {f: cols[f][keep] for f in ("open", "high", "low", "close", "volume")}
        table = pa.table({
            "symbol": pa.array([sym] * int(keep.sum()), type=pa.string()),
            "datetime": pa.array(times[keep]),
            **{f: pa.array(v) for f, v in values.items()},
        })
        writer = writer or pq.ParquetWriter(long_path, table.schema)
        writer.write_table(table)
        rows += table.num_rows
        if per_symbol_dir is not None:
            vwap = (values["high"] + values["low"] + values["close"]) / 3
            pq.write_table(pa.table({"date": pa.array(times[keep]), **{f: pa.array(v) for f, v in values.items()},
                                     "vwap": pa.array(vwap), "factor": pa.array(np.ones(len(vwap)))}),
                           per_symbol_dir / f"{sym}.parquet")
    writer.close()
    return rows


def make_long_parquet(path: Path, *, start: str, end: str, symbols, seed: int) -> int:
    """Write the synthetic market as one long Parquet file; returns the row count."""
    return make_sources(path, None, start=start, end=end, symbols=symbols, seed=seed)


def pandas_baseline(src: Path, out: Path) -> int:
    """Straightforward pandas conversion with the same checks; returns bars written."""
    from data_prep import qlib_store
    from data_prep.trading_calendar import session_minutes, sessions

    df = pd.read_parquet(src)
    df["datetime"] = pd.to_datetime(df["datetime"])
    first, last = df["datetime"].min().normalize(), df["datetime"].max().normalize()
    cal = session_minutes(first, last)
    sess = sessions(first, last)
    sess_df = pd.DataFrame({
        "day": pd.to_datetime(sess.dates),
        "open": pd.to_datetime(sess.open_local),
        "close": pd.to_datetime(sess.close_local),
    })
    written = 0
    spans = {}
    for sym, g in df.groupby("symbol", sort=True):
        g = g.copy()
        g["day"] = g["datetime"].dt.normalize()
        g = g.merge(sess_df, on="day", how="left")
        bad = g[["open_x", "high", "low", "close_x", "volume"]].isna().any(axis=1)
        bad |= g["open_y"].isna()  # not a session day
        bad |= (g["datetime"] < g["open_y"]) | (g["datetime"] >= g["close_y"])  # outside the session (incl. close bar)
        bad |= g["datetime"].dt.second != 0
        bad |= (g[["open_x", "high", "low", "close_x"]] <= 0).any(axis=1) | (g["volume"] < 0)
        bad |= g.duplicated(subset=["datetime"], keep="first")
        g = g[~bad].sort_values("datetime")
        g["high"] = g[["open_x", "high", "low", "close_x"]].max(axis=1)
        g["low"] = g[["open_x", "high", "low", "close_x"]].min(axis=1)
        g["vwap"] = (g["high"] + g["low"] + g["close_x"]) / 3
        g["factor"] = 1.0
        g = g.rename(columns={"open_x": "open", "close_x": "close"}).set_index("datetime")
        dense = g[["open", "high", "low", "close", "volume", "vwap", "factor"]].reindex(cal)
        first_i = int(cal.get_loc(g.index[0]))
        last_i = int(cal.get_loc(g.index[-1]))
        for field in dense.columns:
            path = qlib_store.feature_path(out, sym, field)
            path.parent.mkdir(parents=True, exist_ok=True)
            vals = dense[field].iloc[first_i : last_i + 1].to_numpy(dtype="<f4")
            np.concatenate([[np.float32(first_i)], vals]).astype("<f4").tofile(path)
        spans[sym] = (cal[first_i], cal[last_i])
        written += len(g)
    (out / "calendars").mkdir(parents=True, exist_ok=True)
    (out / "calendars" / "1min.txt").write_text("\n".join(cal.strftime("%Y-%m-%d %H:%M:%S")) + "\n")
    qlib_store.write_instruments(out, "all", spans)
    return written


def cpu_seconds() -> float:
    """User + system CPU time of this process (all threads) so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ---------------------------------------------------------------------------- child processes
def _child(kind: str, src: Path, out: Path) -> None:
    """Run one implementation in this (child) process; print its bars written as JSON."""
    if kind == "ours":
        from data_prep.ingest import IngestOptions, ingest
        from data_prep.vendor import ColumnMap

        res = ingest([src], out, options=IngestOptions(mode="validate", columns=ColumnMap(datetime="datetime")))
        bars = res.bars_written
    else:
        bars = pandas_baseline(src, out)
    print(json.dumps({"bars": bars}))


@dataclass
class Run:
    """What one implementation's process used."""

    label: str
    cpu: float
    wall: float
    maxrss_gib: float  # ru_maxrss: the largest single process of the tree
    tree_gib: float | None  # sampled peak of the summed RSS of the process tree
    output: str
    rc: int


def _sample_tree(pid: int, stop: threading.Event, peak: list) -> None:
    try:
        import psutil
    except ImportError:
        peak.append(None)
        return
    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return
    best = 0
    while not stop.is_set():
        try:
            total = sum(p.memory_info().rss for p in (root, *root.children(recursive=True)))
            best = max(best, total)
        except psutil.Error:
            pass
        stop.wait(0.1)
    peak.append(best)


def run_process(label: str, argv: list[str], env: dict | None = None) -> Run:
    """Run ``argv`` to the end; CPU (its own and its waited-for workers'), wall time and peak memory."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    stop, peak = threading.Event(), []
    sampler = threading.Thread(target=_sample_tree, args=(proc.pid, stop, peak), daemon=True)
    sampler.start()
    chunks: dict[str, str] = {}
    readers = [threading.Thread(target=lambda k=k, s=s: chunks.__setitem__(k, s.read()), daemon=True)
               for k, s in (("out", proc.stdout), ("err", proc.stderr))]
    for r in readers:
        r.start()
    _, status, usage = os.wait4(proc.pid, 0)  # rusage of the child and of the children it waited for
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    stop.set()
    for r in readers:
        r.join()
    sampler.join()
    tree = peak[0] / 1024**3 if peak and peak[0] else None
    return Run(label, usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024**2, tree,
               chunks.get("out", "") + chunks.get("err", ""), proc.returncode)


def _dump_bin(qlib_repo: Path, tmp: Path) -> tuple[Path, str]:
    """Qlib's ``scripts/dump_bin.py`` from the checkout, written into ``tmp`` (a git directory has no tree to run
    it from); the script's path and the checkout's commit."""
    from qlib_checkout import commit, read_file

    script = tmp / "qlib_scripts" / "dump_bin.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_bytes(read_file(qlib_repo, "scripts/dump_bin.py"))
    return script, commit(qlib_repo)


# ---------------------------------------------------------------------------- comparisons
def stores_identical(a: Path, b: Path, symbols) -> bool:
    """Every value of every field equal (NaN = NaN), start indices equal."""
    from data_prep import qlib_store

    for s in symbols:
        for f in qlib_store.FIELDS:
            sa, va = qlib_store.read_feature(a, s, f)
            sb, vb = qlib_store.read_feature(b, s, f)
            if sa != sb or not np.array_equal(va, vb, equal_nan=True):
                return False
    return True


def agrees_with_dump_bin(ours: Path, theirs: Path, symbols) -> bool:
    """Every bar on dump_bin's calendar (the union of the timestamps) equal to ours at that minute."""
    from qlib.utils import code_to_fname

    from data_prep import qlib_store

    cal_o = qlib_store.read_calendar(ours).to_numpy()
    cal_t = qlib_store.read_calendar(theirs, "1min").to_numpy()
    pos = np.searchsorted(cal_o, cal_t)
    if pos.size == 0 or pos[-1] >= cal_o.size or not np.array_equal(cal_o[pos], cal_t):
        return False
    for s in symbols:
        for f in FIELDS7:
            so, vo = qlib_store.read_feature(ours, s, f)
            raw = np.fromfile(theirs / "features" / code_to_fname(s.lower()).lower() / f"{f}.1min.bin", dtype="<f4")
            st, vt = int(raw[0]), raw[1:]
            at = pos[st : st + vt.size] - so
            if at.min() < 0 or at.max() >= vo.size or not np.array_equal(vo[at], vt, equal_nan=True):
                return False
    return True


# ---------------------------------------------------------------------------- main
def _line(run: Run, rows: int) -> str:
    tree = f"{run.tree_gib:6.2f}" if run.tree_gib is not None else "   n/a"
    return (f"{run.label:<22}{run.cpu:9.1f}{run.wall:9.1f}{run.maxrss_gib:10.2f}{tree:>12}"
            f"{rows / run.cpu:14,.0f}")


def _report(runs: dict[str, Run], rows: int, target_gib: float) -> None:
    print(f"{'':<22}{'CPU s':>9}{'wall s':>9}{'peak GiB':>10}{'tree GiB':>12}{'rows/CPU-s':>14}")
    for run in runs.values():
        print(_line(run, rows))
    ours = runs["ours"]
    for key, name in (("dump_bin", "dump_bin.py"), ("pandas", "pandas")):
        if key in runs:
            other = runs[key]
            print(f"speed-up vs {name:<11}{other.cpu / ours.cpu:6.1f}x CPU, {other.wall / ours.wall:.1f}x wall "
                  f"({name} / data_prep.ingest)")
    print(f"peak vs target        {ours.maxrss_gib:.2f} GiB = {100 * ours.maxrss_gib / target_gib:.0f}% of "
          f"{target_gib:g} GiB ({'under' if ours.maxrss_gib < target_gib else 'OVER'} the target)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", default="2012-01-01")
    parser.add_argument("--end", default="2018-12-31")
    parser.add_argument("--symbols", type=int, default=25, help="first N of the 25 default symbols")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-baseline", action="store_true", help="no pandas baseline")
    parser.add_argument("--qlib-repo", type=Path, default=None,
                        help="a Qlib checkout or git directory: its scripts/dump_bin.py is the baseline")
    parser.add_argument("--dump-bin-workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--skip-dump-bin", action="store_true")
    parser.add_argument("--child", nargs=3, metavar=("KIND", "SRC", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return 0

    from data_prep import DEFAULT_SYMBOLS

    symbols = DEFAULT_SYMBOLS[: args.symbols]
    tmp = Path(tempfile.mkdtemp(prefix="bench_ingest_"))
    try:
        dump_bin, qlib_commit = (None, None) if args.skip_dump_bin or args.qlib_repo is None else \
            _dump_bin(args.qlib_repo.resolve(), tmp)
        src, per_symbol = tmp / "bars.parquet", tmp / "per_symbol"
        t = time.perf_counter()
        rows = make_sources(src, per_symbol if dump_bin else None, start=args.start, end=args.end, symbols=symbols,
                            seed=args.seed)
        print(f"source                {rows:,} rows ({len(symbols)} symbols, {args.start} .. {args.end}), "
              f"{src.stat().st_size / 1024**2:,.0f} MiB long Parquet (made in {time.perf_counter() - t:.1f} s)")
        me = [sys.executable, str(Path(__file__).resolve()), "--child"]
        runs = {"ours": run_process("data_prep.ingest", [*me, "ours", str(src), str(tmp / "store")])}
        if dump_bin is None:
            print("dump_bin.py           skipped" if args.skip_dump_bin else
                  "dump_bin.py           skipped: pass --qlib-repo DIR (a Qlib checkout: git clone "
                  "https://github.com/microsoft/qlib) to compare with Qlib's scripts/dump_bin.py")
        else:
            digest = hashlib.sha256(dump_bin.read_bytes()).hexdigest()[:12]
            print(f"dump_bin.py           {args.qlib_repo} at {qlib_commit[:12]} (sha256 {digest}), "
                  f"--max_workers {args.dump_bin_workers}")
            runs["dump_bin"] = run_process("Qlib dump_bin.py", [
                sys.executable, str(dump_bin), "dump_all", "--data_path", str(per_symbol), "--qlib_dir",
                str(tmp / "dump_bin"), "--freq", "1min", "--date_field_name", "date", "--file_suffix", ".parquet",
                "--max_workers", str(args.dump_bin_workers)])
        if not args.skip_baseline:
            runs["pandas"] = run_process("pandas baseline", [*me, "pandas", str(src), str(tmp / "baseline")])
        for run in runs.values():
            if run.rc != 0:
                print(f"{run.label} failed (exit {run.rc}):\n{run.output[-3000:]}")
                return 1
        bars = {k: json.loads(r.output.strip().splitlines()[-1])["bars"] for k, r in runs.items() if k != "dump_bin"}
        print(f"bars written          {', '.join(f'{k} {v:,}' for k, v in bars.items())}")
        _report(runs, rows, TARGET_GIB)
        if "pandas" in runs:
            print(f"stores identical      {stores_identical(tmp / 'store', tmp / 'baseline', symbols)} "
                  "(data_prep.ingest vs pandas, every value)")
        if "dump_bin" in runs:
            print(f"agrees with dump_bin  {agrees_with_dump_bin(tmp / 'store', tmp / 'dump_bin', symbols)} "
                  "(every bar on dump_bin's calendar, 7 fields)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
