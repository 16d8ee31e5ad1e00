"""Wall time of the synthetic experiments (docs/method.md §3.1, §3.2) against a per-run scikit-learn loop.

Runs the full protocols (default 100 rounds x 100 runs per pipeline) with the
vectorised implementation in ``rolling_calib.simulation.synthetic_experiments`` and prints the wall times
and the result tables. The baseline is the straightforward implementation: one
scikit-learn fit and one metric call per run (``LinearRegression`` /
``LogisticRegression(C=inf)``, BLAS held to one thread as in the vectorised
run), on the same random draws; it is timed on a few
rounds only and *extrapolated* to the full protocol (the output says so), and its
numbers are compared with the vectorised ones on those rounds.

Targets (issue 2): linear under 2 minutes, logistic under 5 minutes on a 2-core machine.

Usage::

    nice -n 10 .venv/bin/python bench/bench_synthetic.py [--rounds 100] [--runs 100] [--baseline-rounds 2]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from scipy.special import expit
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.metrics import log_loss, mean_squared_error
from threadpoolctl import threadpool_limits

from rolling_calib.core import classification as C
from rolling_calib.core import metrics as M
from rolling_calib.simulation import synthetic_experiments as S
from rolling_calib.core.pairwise import pairwise_accuracy


def naive_round(seed_seq: np.random.SeedSequence, *, runs: int, params: dict, logistic: bool) -> dict[str, float]:
    """One round, one scikit-learn fit per run (same draw order as ``rolling_calib.simulation.synthetic_experiments``)."""
    rng = np.random.default_rng(seed_seq)
    d, nb = params["dims"], params["n_bias"]
    beta = np.full(d, params["beta"])

    def feats(shape):
        return params["x_mean"] + params["x_std"] * rng.standard_normal(shape)

    def labels(x):
        if logistic:
            prob = expit(x @ beta)
            return (rng.random(prob.shape) < prob).astype(float)
        return x @ beta + params["noise_mean"] + params["noise_std"] * rng.standard_normal(x.shape[:-1])

    x_eval = feats((nb + params["n_remaining"], d))
    y_eval = labels(x_eval)
    mask = np.arange(len(y_eval)) < nb
    scores = {}
    for name, k in (("A", d), ("B", params["features_b"])):
        x = feats((runs, params["n_train"], d))
        y = labels(x)
        out: dict[str, list[float]] = {key: [] for key in S.SCORES}
        for r in range(runs):
            if logistic:
                p = LogisticRegression(C=np.inf, max_iter=1000).fit(x[r, :, :k], y[r]).predict_proba(x_eval[:, :k])[:, 1]
                out["vanilla"].append(log_loss(y_eval, p, labels=[0, 1]))
                out["vanilla_remaining"].append(log_loss(y_eval[~mask], p[~mask], labels=[0, 1]))
                out["calibrated"].append(C.calibrated_log_loss(p, y_eval, bias_part=mask))
            else:
                p = LinearRegression().fit(x[r, :, :k], y[r]).predict(x_eval[:, :k])
                out["vanilla"].append(mean_squared_error(y_eval, p))
                out["vanilla_remaining"].append(mean_squared_error(y_eval[~mask], p[~mask]))
                out["calibrated"].append(M.calibrated_quadratic_loss(p, y_eval, bias_part=mask))
        scores[name] = {key: np.asarray(v) for key, v in out.items()}
    row = {f"acc_{key}": pairwise_accuracy(scores["A"][key], scores["B"][key]) for key in S.SCORES}
    for key in S.SCORES:
        row[f"{key}_mean"] = float(scores["A"][key].mean())
    return row


def bench(experiment: str, *, rounds: int, runs: int, seed: int, baseline_rounds: int) -> None:
    run = S.run_linear_experiment if experiment == "linear" else S.run_logistic_experiment
    started = time.perf_counter()
    result = run(rounds=rounds, runs=runs, seed=seed, progress=True)
    wall = time.perf_counter() - started
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"=== {experiment}: vectorised, {rounds} rounds x {runs} runs: wall time {wall:.1f} s "
          f"({wall / rounds:.3f} s per round; {os.cpu_count()} CPUs, load average {load})")
    print(result.format_table())

    if baseline_rounds > 0:
        params = result.params
        children = np.random.SeedSequence(seed).spawn(rounds)[:baseline_rounds]
        started = time.perf_counter()
        with threadpool_limits(limits=1, user_api="blas"):   # same BLAS setting as the vectorised run: a fair ratio
            rows = [naive_round(c, runs=runs, params=params, logistic=experiment == "logistic") for c in children]
        naive = time.perf_counter() - started
        per_round = naive / baseline_rounds
        extrapolated = per_round * rounds
        diffs = [abs(row[k] - result.rounds.iloc[i][k]) for i, row in enumerate(rows) for k in row]
        print(f"--- baseline (per-run scikit-learn loop), timed on {baseline_rounds} round(s) and EXTRAPOLATED "
              f"to {rounds}: {per_round:.2f} s per round -> ~{extrapolated:.0f} s; "
              f"speed-up of the vectorised version ~{extrapolated / wall:.1f}x")
        print(f"    agreement on those rounds: max |difference| of Acc and A's means = {max(diffs):.2e}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100, help="rounds (default: 100, the full protocol)")
    parser.add_argument("--runs", type=int, default=100, help="runs per pipeline (default: 100)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default: 0)")
    parser.add_argument("--baseline-rounds", type=int, default=2, help="rounds of the per-run baseline to time (0: skip)")
    parser.add_argument("--only", choices=["linear", "logistic"], help="run one experiment only")
    args = parser.parse_args()
    for experiment in ("linear", "logistic"):
        if args.only in (None, experiment):
            bench(experiment, rounds=args.rounds, runs=args.runs, seed=args.seed, baseline_rounds=args.baseline_rounds)


if __name__ == "__main__":
    main()
