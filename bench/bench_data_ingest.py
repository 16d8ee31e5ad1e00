"""Ingest throughput on the full synthetic set, against a straightforward pandas implementation.

Steps: generate the synthetic market (25 symbols x 2012-2018 by default), write it as one
long Parquet file (``symbol, datetime, open, high, low, close, volume``; missing minutes
absent, as a vendor delivers them), then time

* ``data_prep.ingest`` (polars, vectorised validation, NumPy binary writer), and
* the baseline below: the same conversion done the plain pandas way (``read_parquet``,
  per-symbol ``groupby``, the same validation checks with pandas idioms, ``reindex`` on the
  calendar, ``Series.values.tofile``),

and print rows/s of each and the speed-up ratio. Both stores are compared value by value.

Usage::

    nice -n 10 .venv/bin/python bench/bench_data_ingest.py [--start 2012-01-01 --end 2018-12-31] [--symbols N]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd


def make_long_parquet(path: Path, *, start: str, end: str, symbols, seed: int) -> int:
    """Write the synthetic market as one long Parquet file; returns the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from data_prep.synthetic import _profile, simulate_market, simulate_symbol

    market = simulate_market(start, end, seed=seed, sectors=[_profile(s).sector for s in symbols])
    times = market.minutes.astype("datetime64[us]")
    writer, rows = None, 0
    for sym in symbols:
        cols = simulate_symbol(sym, market)
        keep = ~np.isnan(cols["close"])
        table = pa.table({
            "symbol": pa.array([sym] * int(keep.sum()), type=pa.string()),
            "datetime": pa.array(times[keep]),
            **{f: pa.array(cols[f][keep]) for f in ("open", "high", "low", "close", "volume")},
        })
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
        rows += table.num_rows
    writer.close()
    return rows


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", default="2012-01-01")
    parser.add_argument("--end", default="2018-12-31")
    parser.add_argument("--symbols", type=int, default=25, help="first N of the 25 default symbols")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-baseline", action="store_true")
    args = parser.parse_args()

    from data_prep import DEFAULT_SYMBOLS, qlib_store
    from data_prep.ingest import IngestOptions, ingest

    tmp = Path(tempfile.mkdtemp(prefix="bench_ingest_"))
    try:
        src = tmp / "bars.parquet"
        t = time.perf_counter()
        rows = make_long_parquet(src, start=args.start, end=args.end, symbols=DEFAULT_SYMBOLS[: args.symbols],
                                 seed=args.seed)
        print(f"source                {rows:,} rows, {src.stat().st_size / 1024**2:,.0f} MiB Parquet "
              f"(made in {time.perf_counter() - t:.1f} s)")
        cols = __import__("data_prep.vendor", fromlist=["ColumnMap"]).ColumnMap(datetime="datetime")
        t, c = time.perf_counter(), cpu_seconds()
        res = ingest([src], tmp / "store", options=IngestOptions(mode="validate", columns=cols), progress=False)
        ours, ours_cpu = time.perf_counter() - t, cpu_seconds() - c
        print(f"data_prep.ingest      {ours:.1f} s wall ({ours_cpu:.1f} s CPU), {rows / ours:,.0f} rows/s, "
              f"{res.bars_written:,} bars written")
        print(f"peak memory (maxrss)  {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2:.2f} GiB (so far)")
        if not args.skip_baseline:
            t, c = time.perf_counter(), cpu_seconds()
            n_base = pandas_baseline(src, tmp / "baseline")
            base, base_cpu = time.perf_counter() - t, cpu_seconds() - c
            print(f"pandas baseline       {base:.1f} s wall ({base_cpu:.1f} s CPU), {rows / base:,.0f} rows/s, "
                  f"{n_base:,} bars written")
            print(f"speed-up              {base / ours:.2f}x wall, {base_cpu / ours_cpu:.2f}x CPU "
                  "(pandas / data_prep; the machine is shared, wall times vary with load)")
            same = all(
                np.array_equal(qlib_store.read_feature(tmp / "store", s, f)[1],
                               qlib_store.read_feature(tmp / "baseline", s, f)[1], equal_nan=True)
                for s in DEFAULT_SYMBOLS[: args.symbols] for f in qlib_store.FIELDS
            )
            print(f"stores identical      {same}")
        print(f"peak memory (maxrss)  {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2:.2f} GiB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
