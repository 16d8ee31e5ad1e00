"""Coverage of the held-out accuracy interval (rolling_calib.core.heldout), measured against a known truth.

Simulated runs of two pipelines A and B with ``--seeds`` seeds each. Each run has a quality ``q ~ N(mu_p, 1)``
(``mu_A = 0``, ``mu_B = gap``) and an output offset that persists from the metric's periods to the truth's with
correlation ``rho`` (``o_M, o_T ~ N(0, offset_sd^2)``); each part adds its own noise ``N(0, noise_sd^2)``::

    QL on the metric's periods   = q + o_M^2 + e_M
    CQL on the metric's periods  = q + e'_M              (the offset removed)
    QL on the truth's periods    = q + o_T^2 + e_T       (the ground truth)

The estimand of every interval is the expectation of the point estimate at this number of seeds (held-out
accuracy of QL, of CQL, and their difference), computed by Monte Carlo over ``--truth-reps`` fresh experiments;
the coverage is the share of ``--reps`` other experiments whose interval holds it. Scenarios: ``gain`` (offsets
dominate the seed spread: CQL ranks better), ``none`` (no offsets: the same accuracy) and ``aa`` (no difference
between the pipelines: every accuracy 0.5).

    python bench/heldout_accuracy_coverage.py                 # all scenarios, 20 seeds (a few CPU-minutes)
    python bench/heldout_accuracy_coverage.py --reps 100 --scenarios gain
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rolling_calib.core.heldout import held_out_accuracy, weighted_split_accuracy  # noqa: E402

SCENARIOS = {   # gap (B's mean quality minus A's), offset sd, rho, noise sd
    "gain": (0.8, 1.2, 0.9, 0.3),
    "none": (0.8, 0.0, 0.0, 1.0),
    "aa": (0.0, 1.2, 0.9, 0.3),
}
METRICS = ["ql", "cql"]


def simulate(rng: np.random.Generator, seeds: int, gap: float, offset_sd: float, rho: float,
             noise_sd: float) -> dict[str, dict[str, np.ndarray]]:
    """One experiment: per pipeline, QL and CQL on the metric's periods and the truth on others."""
    out = {}
    for name, mu in (("A", 0.0), ("B", gap)):
        q = rng.normal(mu, 1.0, seeds)
        o_m = rng.normal(0.0, offset_sd, seeds)
        o_t = rho * o_m + np.sqrt(1 - rho**2) * rng.normal(0.0, offset_sd, seeds)
        out[name] = {"ql": q + o_m**2 + rng.normal(0, noise_sd, seeds),
                     "cql": q + rng.normal(0, noise_sd, seeds),
                     "truth": q + o_t**2 + rng.normal(0, noise_sd, seeds)}
    return out


def estimand(rng: np.random.Generator, seeds: int, params: tuple, reps: int) -> np.ndarray:
    """Expected point estimate (QL, CQL, CQL - QL) by Monte Carlo over fresh experiments."""
    vals = np.empty((reps, 2))
    ones = {"A": np.ones(seeds), "B": np.ones(seeds)}
    for r in range(reps):
        v = simulate(rng, seeds, *params)
        vals[r] = weighted_split_accuracy(v, ones, [("A", "B")], metrics=METRICS, ground_truth="truth",
                                          n_splits=20, rng=rng)[0]
    mean = vals.mean(axis=0)
    return np.array([mean[0], mean[1], mean[1] - mean[0]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds per pipeline (default 20)")
    parser.add_argument("--reps", type=int, default=200, help="experiments whose intervals are checked (default 200)")
    parser.add_argument("--truth-reps", type=int, default=4000, help="experiments of the Monte Carlo truth (default 4000)")
    parser.add_argument("--n-boot", type=int, default=200, help="bootstrap replicates per interval (default 200)")
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"held-out accuracy intervals (95%, cluster bootstrap of seeds, {args.n_boot} replicates x 20 splits), "
          f"{args.seeds} seeds per pipeline, {args.reps} experiments per scenario")
    print(f"{'scenario':<9} {'quantity':<10} {'truth':>7} {'mean est.':>9} {'coverage':>9} {'mean width':>10}")
    for name in args.scenarios:
        t0 = time.process_time()
        rng = np.random.default_rng([args.seed, list(SCENARIOS).index(name)])
        params = SCENARIOS[name]
        truth = estimand(rng, args.seeds, params, args.truth_reps)
        hits, ests, widths = np.zeros(3), np.zeros(3), np.zeros(3)
        for r in range(args.reps):
            table = held_out_accuracy(simulate(rng, args.seeds, *params), [("A", "B")], metrics=METRICS,
                                      ground_truth="truth", baseline="ql", n_boot=args.n_boot, n_splits=20,
                                      boot_splits=20, seed=r)
            rows = table[table["pair"] == "A vs B"].set_index("metric").loc[["ql", "cql", "cql - ql"]]
            lo, hi, est = rows["ci_low"].to_numpy(), rows["ci_high"].to_numpy(), rows["accuracy"].to_numpy()
            hits += (lo <= truth) & (truth <= hi)
            ests += est
            widths += hi - lo
        for k, q in enumerate(("QL", "CQL", "CQL - QL")):
            print(f"{name:<9} {q:<10} {truth[k]:>7.3f} {ests[k] / args.reps:>9.3f} {hits[k] / args.reps:>9.1%} "
                  f"{widths[k] / args.reps:>10.3f}")
        print(f"{'':<9} ({time.process_time() - t0:.0f} CPU-s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
