"""Can any long-run variance from the evaluated days keep a future-target verdict's level under regime drift?

The calibration harness (``bench/verdict_calibration.py``) finds the future-target verdict too
liberal when the pipelines' daily difference drifts between regimes of months (10-24% false
decisions at 95%). This script asks whether a *different* market-time estimator would do better,
on the same simulated panels, or whether the evaluated days simply do not carry the information.
Per cell (seeds x days x drift) it prints the false-decision rate (true difference 0) and the power
at a true difference of 2 standard errors of:

* ``verdict``: :func:`rolling_calib.core.verdict.decide`'s future target (Andrews bandwidth on the
  noise-removed differential, month-block drift check);
* ``floor21_fixedb``: the same seed part, the market-time part by Bartlett with the bandwidth at
  least a month (21 days) and Kiefer-Vogelsang fixed-b critical values (valid for any short memory
  at that bandwidth; Kiefer and Vogelsang 2005, Bartlett two-sided 5%:
  ``cv(b) = 1.96 + 2.9694 b + 0.4160 b^2 - 0.5324 b^3``, ``b = (m + 1) / T``);
* ``oracle_bw_fixedb``: as above with the bandwidth told the truth: twice the mean regime length
  (no estimator can know it; an upper bound on what bandwidth choice can achieve);
* ``dm``: Diebold-Mariano on the seed-averaged differential (Andrews bandwidth, normal quantile);
* ``true_se``: the interval with the true standard error (from the model) and the normal quantile:
  holds its level by construction; its power is the ceiling.

A rule that holds its level where ``verdict`` does not, at a power near ``true_se``'s, would be the
fix; if none does, the evaluated days do not identify the regime variance at these spans, and a
future-target verdict on a drifting differential can only be as good as the assumption of no
drift longer than its bandwidth. The fixed-b critical values are checked here against a simulation
(``--check-fixedb``).

Usage (from the repository root)::

    python bench/drift_identifiability.py --preset time_dominated --reps 200
    python bench/drift_identifiability.py --from-store demo_out/store --cells 20x125,20x250 --drift 40:4
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import optimize, stats

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.verdict_calibration import PRESETS, UsageError, model_from_store, parse_cells, parse_drift  # noqa: E402
from rolling_calib.core import variance as V  # noqa: E402
from rolling_calib.core.tables import format_table  # noqa: E402
from rolling_calib.simulation.verdict_sim import PanelModel, _simulate, estimator_sd  # noqa: E402

METHODS = ("verdict", "floor21_fixedb", "oracle_bw_fixedb", "dm", "true_se")


def kv_bartlett_cv(b: float) -> float:
    """Kiefer-Vogelsang (2005) fixed-b two-sided 5% critical value of the Bartlett-HAC t statistic.

    >>> round(kv_bartlett_cv(0.0), 2), round(kv_bartlett_cv(0.2), 3)
    (1.96, 2.566)
    """
    return 1.96 + 2.9694 * b + 0.4160 * b * b - 0.5324 * b ** 3


def _equivalent_df(b: float) -> float:
    """Student t degrees of freedom whose 97.5% quantile is the fixed-b critical value (for Satterthwaite)."""
    c = kv_bartlett_cv(b)
    if c <= stats.norm.ppf(0.975) + 1e-9:
        return math.inf
    return float(optimize.brentq(lambda nu: stats.t.ppf(0.975, nu) - c, 0.2, 1e8))


def fixedb_variance(x: np.ndarray, *, bandwidth_floor: int) -> tuple[float, float]:
    """Seed part as the verdict's, market-time part by Bartlett at ``max(Andrews, floor)`` (seed noise
    removed) with fixed-b degrees of freedom; returns ``(var, df)`` of the future target."""
    period = V.crossed_variance(x, target="period")
    k, T = x.shape
    z = x - x.mean(axis=1, keepdims=True)
    common = z.mean(axis=0)
    max_lag = max(1, T // 2)
    g_common = V._autocov(common[None, :], max_lag)[0]
    g_noise, _ = V._noise([z - common], lambda u: V._autocov(u, max_lag))
    g = g_common - g_noise
    rho = float(g[1] / g[0]) if g[0] > 0 else 0.0
    m = min(max(V.andrews_bandwidth(rho, T), int(bandwidth_floor)), max_lag)
    v_time = max(float(V._bartlett(g_common, m) - V._bartlett(np.asarray(g_noise), m)), 0.0) / T
    df_time = _equivalent_df((m + 1.0) / T)
    return period.var + v_time, V.welch_df([(period.var, period.df), (v_time, df_time)])


def _dm_decides(x: np.ndarray) -> bool:
    xb = x.mean(axis=0)
    T = xb.size
    rho = float(np.corrcoef(xb[:-1], xb[1:])[0, 1])
    lrv = V.bartlett_lrv(xb, V.andrews_bandwidth(rho, T))
    return abs(xb.mean()) > 1.959964 * math.sqrt(max(lrv, 0.0) / T)


def _decides(method: str, x: np.ndarray, model: PanelModel, true_sd: float) -> bool:
    d = float(x.mean())
    if method == "dm":
        return _dm_decides(x)
    if method == "true_se":
        return abs(d) > 1.959964 * true_sd
    if method == "verdict":
        cv = V.crossed_variance(x, target="future")
        return abs(d) > cv.half_width(0.95)
    floor = 21 if method == "floor21_fixedb" else int(round(2 * (model.regime_days or 10.5)))
    var, df = fixedb_variance(x, bandwidth_floor=floor)
    return abs(d) > float(stats.t.ppf(0.975, df)) * math.sqrt(var)


def run_cell(model: PanelModel, *, n_seeds: int, n_days: int, reps: int, rng: np.random.Generator) -> dict:
    """False decisions (true gap 0) and power at 2 true standard errors per method, with MC SEs."""
    true_sd = estimator_sd(model, n_seeds=n_seeds, n_days=n_days, target="future")
    a, b, _ = _simulate(model, reps, n_seeds, n_days, rng)
    x = a - b
    out = {}
    for method in METHODS:
        null = np.array([_decides(method, x[r], model, true_sd) for r in range(reps)])
        alt = np.array([_decides(method, x[r] + 2.0 * true_sd, model, true_sd) for r in range(reps)])
        out[method] = (null.mean(), alt.mean())
    return out


def check_fixedb(reps: int, rng: np.random.Generator) -> list[list[str]]:
    """Simulated 95% quantile of |t| with Bartlett at b = M/T on white noise (T = 400) vs the formula."""
    T = 400
    x = rng.normal(size=(reps, T))
    rows = []
    for b in (0.05, 0.1, 0.2, 0.35, 0.5):
        m = int(round(b * T)) - 1
        xd = x - x.mean(axis=1, keepdims=True)
        q = V._bartlett(V._autocov(xd, m), m)
        t = np.sqrt(T) * x.mean(axis=1) / np.sqrt(q)
        rows.append([f"{b:g}", f"{np.quantile(np.abs(t), 0.95):.3f}", f"{kv_bartlett_cv(b):.3f}"])
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", choices=sorted(PRESETS), default="time_dominated")
    src.add_argument("--from-store", metavar="DIR", help="estimate the model from a store's first pair (QL)")
    p.add_argument("--cells", default="3x60,20x60,20x125,20x250", metavar="KxT,...")
    p.add_argument("--drift", default="none,40:4,110:4", metavar="SPEC,...")
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--seed", type=int, default=0, help="seed of the simulation (recorded)")
    p.add_argument("--check-fixedb", action="store_true", help="also check the fixed-b critical values by simulation")
    args = p.parse_args(argv)
    try:
        cells = parse_cells(args.cells)
        drifts = parse_drift(args.drift)
        if args.from_store:
            base = model_from_store(args.from_store, metric="ql")[0]
            source = f"store {args.from_store}"
        else:
            base, source = PRESETS[args.preset], f"preset {args.preset}"
    except (UsageError, ValueError, OSError) as exc:
        print(f"drift_identifiability: {exc}", file=sys.stderr)
        return 2
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    if args.check_fixedb:
        print("Fixed-b check (white noise, T = 400, 20,000 paths): 95% quantile of |t| simulated vs Kiefer-Vogelsang")
        print(format_table(check_fixedb(20000, rng), ["b", "simulated", "formula"]))
        print()
    body = []
    for regime_days, ratio in drifts:
        model = base if regime_days is None else base.with_drift(regime_days, ratio)
        label = "none" if regime_days is None else f"{regime_days:g}d x{ratio:g}"
        for k, T in cells:
            res = run_cell(model, n_seeds=k, n_days=T, reps=args.reps, rng=rng)
            mcse = math.sqrt(0.05 * 0.95 / args.reps)
            body.append([k, T, label] + [f"{res[m][0]:.1%} / {res[m][1]:.0%}" for m in METHODS])
            print(f"  {label} {k}x{T} done", file=sys.stderr, flush=True)
    print(f"False decisions / power at 2 true SE, future target, {args.reps} replicates per cell ({source}, seed "
          f"{args.seed}; MC SE of a 5% rate {100 * mcse:.1f} points)")
    print(format_table(body, ["seeds", "days", "drift", *METHODS]))
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
