"""Rolling CQL at scale: ours vs a pandas groupby baseline vs a plain polars version vs reading the inputs once.

Inputs (generated in each measuring process, not timed): 25 instruments, every weekday of
2015-2018 (1043 days), bars evenly spaced over 09:30-16:00, rows in time order with the
instruments interleaved (the order of a store unit). 10 M rows are minute bars (384 a day);
100 M rows are the same span ten times denser (~6 s bars). Arrays: predictions and labels
float64, timestamps datetime64[ns], instruments a pandas Categorical (int8 codes): 2.33 GiB
at 100 M rows.

Cases: monthly pooled bias (the paper's rule), monthly per-instrument bias, 20-trading-day
periods with pooled bias, and the monthly pooled rule with the bias fitted on the previous 20
trading days (``bias_window=20``; ours only). Implementations:

* ``ours``: :func:`rolling_calib.core.metrics.rolling_calibrated_quadratic_loss`;
* ``ours-minute``: the same with the timestamps at minute resolution (``datetime64[m]``, converted
  before the clock starts): any ``datetime64`` unit is read as it is, so this should cost what
  ``ours`` costs (the table ends with the ratio per case);
* ``pandas``: a DataFrame of the arrays, ``groupby`` of the period (and instrument) means,
  the previous period's mean mapped back to every row through the group numbers;
* ``polars``: the same plan in lazy polars (group means, shift, join, mean of squares);
* ``read-once``: one reduction over every input array (the memory-bandwidth limit).

Every variant runs in a fresh subprocess: CPU seconds (``time.process_time``, all threads) and
wall seconds of the call alone; peak memory is the process's ``ru_maxrss``, which includes the
resident inputs: the peak is reset (Linux ``/proc/self/clear_refs``) after the inputs are built,
so input generation does not count (where the reset is refused the generation, written to stay
near the inputs' own size, is part of the peak and the table says so). ``x ours`` is CPU time
over ours, ``x limit`` CPU time over read-once, ``peak/input`` the peak over the input bytes,
``added GiB`` the peak minus the resident memory just before the call (what the call itself needs;
the interpreter with numpy and pandas loaded holds about 0.1 GiB besides the inputs).
The CQL of every implementation is printed so that they can be checked against each other.

Usage::

    .venv/bin/python bench/bench_metric.py                 # 10 M rows
    .venv/bin/python bench/bench_metric.py --full          # 10 M and 100 M rows (a few minutes)
    .venv/bin/python bench/bench_metric.py --rows 30e6 --skip pandas --json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
N_INSTRUMENTS = 25
CASES = {
    "month/pooled": {"period": "month", "bias": "pooled"},
    "month/per_instrument": {"period": "month", "bias": "per_instrument"},
    "20d/pooled": {"period": 20, "bias": "pooled"},
    "month/pooled/window20": {"period": "month", "bias": "pooled", "bias_window": 20},
}
IMPLS = ("ours", "ours-minute", "pandas", "polars", "read-once")
#: Cases the baselines implement (the bias window is ours only).
BASELINE_CASES = ("month/pooled", "month/per_instrument", "20d/pooled")


# --------------------------------------------------------------------------- inputs
def make_inputs(n_rows: int):
    """Arrays of the benchmark (see the module docstring), built without temporaries of their size."""
    import numpy as np
    import pandas as pd

    m = N_INSTRUMENTS
    days = pd.bdate_range("2015-01-01", "2018-12-31").values.astype("datetime64[ns]").view(np.int64)
    ticks = n_rows // m
    per_day = -(-ticks // len(days))
    step = (6 * 3600 + 1800) * 10**9 // per_day
    tick = np.arange(ticks, dtype=np.int64)
    ts = np.repeat(days[tick // per_day] + (9 * 3600 + 1800) * 10**9 + (tick % per_day) * step, m)
    ts = ts.view("datetime64[ns]")
    del tick
    codes = np.tile(np.arange(m, dtype=np.int8), ticks)
    instruments = pd.Categorical.from_codes(codes, [f"S{i:02d}" for i in range(m)], validate=False)
    rng = np.random.default_rng(0)
    p = rng.standard_normal(len(ts))
    y = rng.standard_normal(len(ts))
    block = 1 << 20
    for s in range(0, len(ts), block):  # label = 0.3 p + noise + a per-instrument offset + a drift by month
        e = s + block
        y[s:e] += 0.3 * p[s:e] + 0.02 * codes[s:e] + 1e-3 * (ts[s:e].astype("datetime64[M]").astype(np.int64) % 12)
    return {"p": p, "y": y, "ts": ts, "instruments": instruments, "codes": codes, "per_day": per_day}


def input_bytes(data) -> int:
    return data["p"].nbytes + data["y"].nbytes + data["ts"].nbytes + data["codes"].nbytes


# --------------------------------------------------------------------------- implementations
def run_ours(data, case):
    from rolling_calib.core.calibration import Calibration
    from rolling_calib.core.metrics import rolling_calibrated_quadratic_loss

    return rolling_calibrated_quadratic_loss(data["p"], data["y"], data["ts"], instruments=data["instruments"],
                                             calibration=Calibration(**case)).cql


def run_pandas(data, case):
    """The plain pandas way: groupby means, previous period by shift, mapped back per row."""
    import numpy as np
    import pandas as pd

    df = pd.DataFrame({"p": data["p"], "y": data["y"], "ts": data["ts"], "inst": data["instruments"]}, copy=False)
    df["r"] = df["y"] - df["p"]
    if case["period"] == "month":
        df["period"] = df["ts"].dt.to_period("M")
    else:
        df["period"] = pd.factorize(df["ts"].dt.normalize(), sort=True)[0] // case["period"]
    keys = ["period"] if case["bias"] == "pooled" else ["period", "inst"]
    grouped = df.groupby(keys, observed=True, sort=True)
    mean = grouped["r"].mean()
    previous = mean.shift(1) if case["bias"] == "pooled" else mean.groupby(level="inst", observed=True).shift(1)
    c = previous.to_numpy()[grouped.ngroup().to_numpy()]
    scored = ~np.isnan(c)
    return float(((df["r"].to_numpy()[scored] - c[scored]) ** 2).mean())


def run_polars(data, case):
    """The same plan in lazy polars."""
    import polars as pl

    df = pl.DataFrame(
        {
            "p": data["p"],
            "y": data["y"],
            "ts": pl.Series(data["ts"].view("int64")).cast(pl.Datetime("ns")),
            "inst": data["codes"],
        }
    )
    lf = df.lazy().with_columns((pl.col("y") - pl.col("p")).alias("r"))
    if case["period"] == "month":
        lf = lf.with_columns(pl.col("ts").dt.truncate("1mo").alias("period"))
    else:
        lf = lf.with_columns(((pl.col("ts").dt.date().rank("dense").cast(pl.Int64) - 1) // case["period"]).alias("period"))
    keys = ["period"] if case["bias"] == "pooled" else ["period", "inst"]
    stats = lf.group_by(keys).agg(pl.col("r").mean().alias("mean")).sort(keys)
    shifted = pl.col("mean").shift(1) if case["bias"] == "pooled" else pl.col("mean").shift(1).over("inst")
    stats = stats.with_columns(shifted.alias("c")).select([*keys, "c"])
    out = (
        lf.join(stats, on=keys, how="inner")
        .filter(pl.col("c").is_not_null())
        .select(((pl.col("r") - pl.col("c")) ** 2).mean())
        .collect()
    )
    return float(out.item())


def run_read_once(data, case):
    """Touch every input array once (one reduction each)."""
    import numpy as np

    return float(np.add.reduce(data["p"]) + np.add.reduce(data["y"]) + np.add.reduce(data["ts"].view(np.int64))
                 + np.add.reduce(data["codes"], dtype=np.int64))


RUNNERS = {"ours": run_ours, "ours-minute": run_ours, "pandas": run_pandas, "polars": run_polars,
           "read-once": run_read_once}


def child(impl: str, case_name: str, n_rows: int) -> dict:
    data = make_inputs(n_rows)
    runner, case = RUNNERS[impl], CASES[case_name]
    if impl == "ours-minute":  # the same bars at minute resolution (same dates, so the same CQL)
        data["ts"] = data["ts"].astype("datetime64[m]")
    if impl.startswith("ours"):  # import cost is not the metric's
        import rolling_calib.core.metrics  # noqa: F401
    elif impl == "polars":
        import polars  # noqa: F401
    with open("/proc/self/statm") as fh:
        before = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30
    reset = reset_peak()
    w0, c0 = time.perf_counter(), time.process_time()
    value = runner(data, case)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return {
        "impl": impl, "case": case_name, "rows": len(data["p"]), "cpu_s": cpu, "wall_s": wall,
        "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "before_gib": before,
        "input_gib": input_bytes(data) / 2**30, "per_day": data["per_day"], "value": value, "peak_reset": reset,
    }


def reset_peak() -> bool:
    """Reset the process's peak RSS to its current RSS (Linux ``clear_refs``), so that ``ru_maxrss``
    measures the call with its inputs resident, not the input generation; False where not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------- driver
def measure(impl: str, case: str, n_rows: int) -> dict:
    cmd = [sys.executable, __file__, "--child", impl, case, str(n_rows)]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        return {"impl": impl, "case": case, "rows": n_rows, "error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(results: list[dict]) -> None:
    by_rows: dict[int, list[dict]] = {}
    for r in results:
        by_rows.setdefault(r["rows"], []).append(r)
    for rows, group in by_rows.items():
        ok = [r for r in group if "error" not in r]
        head = ok[0] if ok else {"input_gib": float("nan"), "per_day": "?"}
        print(f"\n{rows:,} rows: {N_INSTRUMENTS} instruments x 1043 weekdays x {head['per_day']} bars a day; "
              f"input {head['input_gib']:.2f} GiB"
              + ("" if all(r.get("peak_reset") for r in ok) else " (peaks include input generation)"))
        line = (f"{'case':<24}{'impl':<11}{'CPU-s':>8}{'wall-s':>8}{'x ours':>8}{'x limit':>9}{'peak GiB':>10}"
                f"{'peak/input':>11}{'added GiB':>10}  CQL")
        print(line)
        print("-" * (len(line) + 18))
        limit = next((r["cpu_s"] for r in ok if r["impl"] == "read-once"), float("nan"))
        for case in CASES:
            rows_of_case = [r for r in group if r["case"] == case]
            ours = next((r["cpu_s"] for r in rows_of_case if r["impl"] == "ours" and "error" not in r), float("nan"))
            for r in rows_of_case:
                if "error" in r:
                    print(f"{case:<24}{r['impl']:<11}  failed: {' '.join(r['error'])}")
                else:
                    value = "" if r["impl"] == "read-once" else f"{r['value']:.12g}"
                    print(f"{case:<24}{r['impl']:<11}{r['cpu_s']:>8.2f}{r['wall_s']:>8.2f}{r['cpu_s'] / ours:>8.2f}"
                          f"{r['cpu_s'] / limit:>9.1f}{r['peak_gib']:>10.2f}{r['peak_gib'] / r['input_gib']:>11.2f}"
                          f"{max(0.0, r['peak_gib'] - r['before_gib']):>10.2f}  {value}")
                case = ""
        for case in CASES:
            ns = next((r for r in group if r["case"] == case and r["impl"] == "ours" and "error" not in r), None)
            minute = next((r for r in group if r["case"] == case and r["impl"] == "ours-minute" and "error" not in r), None)
            if ns and minute:
                print(f"{case}: minute-resolution timestamps {minute['cpu_s']:.3f} CPU-s, nanosecond {ns['cpu_s']:.3f} "
                      f"CPU-s: {minute['cpu_s'] / ns['cpu_s']:.2f}x")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        print(json.dumps(child(argv[1], argv[2], int(argv[3]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, action="append", help="row counts (default 10e6; repeatable)")
    parser.add_argument("--full", action="store_true", help="also 100 M rows (a few minutes, ~14 GiB for pandas)")
    parser.add_argument("--skip", action="append", default=[], choices=IMPLS, help="leave out an implementation")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated cases (default: all)")
    parser.add_argument("--json", action="store_true", help="also print the raw results as JSON")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in (args.rows or [10e6])] + ([100_000_000] if args.full else [])
    cases = [c for c in args.cases.split(",") if c]
    results = []
    for n_rows in sizes:
        for impl in IMPLS:
            if impl in args.skip:
                continue
            for case in cases if impl != "read-once" else cases[:1]:
                if impl in ("pandas", "polars") and case not in BASELINE_CASES:
                    continue
                result = measure(impl, case, n_rows)
                print(f"  {n_rows:>11,} {case:<24}{impl:<10}"
                      + (f"{result['cpu_s']:.2f} CPU-s" if "error" not in result else "failed"), file=sys.stderr)
                results.append(result)
    report(results)
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
