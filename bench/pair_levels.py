"""Issue 35's pair-level checks: the sequential rule's and the fixed verdict's false decisions, and "none suffices".

Pairs are simulated from :class:`rolling_calib.simulation.verdict_sim.PanelModel` on ``--days`` days
(default 125) with ``max_seeds`` = 20 seeds per pipeline, at two ratios ``lambda`` of a run mean's
variance to its day-noise part (``lambda = 1 + seed_sd^2 T / noise_sd^2``; ``noise_sd`` = 1):

* ``lambda = 1``: no persistent seed offsets (the only case the old "sometimes pool" pre-test was valid in);
* ``lambda = 10``: persistent seed offsets dominate (the pooling-prone case; the demo store sits near 9).

Each model has a market-time part (the pipelines' daily interaction, white) whose variance of the
mean equals the seeds' part at 20 seeds, so the future target's two parts are of one size at the
full grid and the seeds' part dominates at 3-5 seeds (where Satterthwaite's degrees of freedom were
liberal). Per ``lambda`` x target it measures, each with its Monte Carlo standard error:

* the sequential rule (:func:`rolling_calib.core.sequential.replay`, batch 2, 20 seeds at most,
  first look at 3 or 5 seeds): the share of identical pairs decided (nominal 5%), and the shares of
  pairs 1 standard error apart (of the 20-seed difference) decided in the wrong and the right direction;
* the fixed verdict (:func:`rolling_calib.core.verdict.decide` at 95%) on the first 3 and 5 seeds of
  the identical pairs: the share decided (nominal 5%);
* "none suffices" (``--none-reps``): :func:`rolling_calib.simulation.verdict_sim.check_seeds_needed` on
  5-seed pilots of a pair 2 standard errors apart (of the pilot's difference), future target, on a
  model whose market-time part equals the seeds' part at 5 seeds: among pilots that say "no number
  of seeds can decide it", the share that 60 seeds decide in the right direction (the word was wrong).
* the "none" scan (``--none-scan-reps``): the same pilots (same seed, same draws), the rule re-applied at
  several one-sided levels of the gap's optimistic end (the product's is ``(1 - confidence) / 2``, checked
  against what the product said), each with how often "none" is said, the share of those that 60 seeds and
  that unlimited seeds decide (the truth at infinity: the verdict on the seed-free differential of these
  days), "none" among the pilots that 60 seeds decide (the issue's own measure: its audit found 36.7%),
  "none" among the pilots that unlimited seeds decide (the claim's own error rate) and the power of
  "none" (said among the pilots no number of seeds decides).

For the period target the days' common part is removed from the truth (the pair is identical on
these days). Everything is seeded (``--seed``); the command that regenerates docs/pair_levels.md::

    nice -n 19 python bench/pair_levels.py --reps 300 --none-reps 300 --seed 0

Run it from another checkout's root (``git archive``) to measure that code: the script imports the
``rolling_calib`` of the repository it sits in.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rolling_calib.core.question import Question  # noqa: E402
from rolling_calib.core.sequential import replay  # noqa: E402
from rolling_calib.core.stopping import StoppingRule  # noqa: E402
from rolling_calib.core.variance import crossed_variance  # noqa: E402
from rolling_calib.core.verdict import LossPanel, decide, time_part_low  # noqa: E402
from rolling_calib.simulation.verdict_sim import (PanelModel, _simulate, check_seeds_needed,  # noqa: E402
                                                  estimator_sd, simulate_pair)
from scipy import stats  # noqa: E402

MAX_SEEDS = 20
BATCH = 2
FIRSTS = (3, 5)
FIXED = (3, 5)


def model_for(lam: float, *, n_days: int, time_like_seeds: int = MAX_SEEDS) -> PanelModel:
    """``lambda`` = run-mean variance over its day-noise part; market-time part = the seeds' part at ``time_like_seeds``.

    >>> m = model_for(10.0, n_days=125)
    >>> round(1 + m.seed_sd ** 2 * 125 / m.noise_sd ** 2, 6)
    10.0
    """
    seed_sd = math.sqrt((lam - 1.0) / n_days)
    v_run = seed_sd ** 2 + 1.0 / n_days
    interaction_sd = math.sqrt(n_days * 2.0 * v_run / time_like_seeds)
    return PanelModel(seed_sd=seed_sd, noise_sd=1.0, interaction_sd=interaction_sd)


def _pair(model: PanelModel, *, n_days: int, delta: float, target: str,
          rng: np.random.Generator) -> tuple[LossPanel, LossPanel]:
    a, b, truth = simulate_pair(model, n_seeds=MAX_SEEDS, n_days=n_days, delta=delta, rng=rng)
    if target == "period":          # the period's truth is delta + the days' common part: centre it
        shift = truth["period"] - truth["future"]
        b = LossPanel.from_arrays(seeds=b.seeds, total=b.total + shift * b.weight, weight=b.weight, times=b.times)
    return a, b


def _sequential(a: LossPanel, b: LossPanel, *, first: int, target: str) -> str:
    r = replay({"a": a, "b": b}, rule=StoppingRule(first=first, batch=BATCH, max_seeds=MAX_SEEDS),
               question=Question(target=target), order_seed=0)
    return r.outcomes[("a", "b")]


def _fixed(a: LossPanel, b: LossPanel, *, k: int, target: str) -> str:
    idx = a.seeds[:k]
    return decide(a.select(seeds=idx), b.select(seeds=idx), names=("a", "b"), question=Question(target=target)).outcome


def _rate(hits: list[bool]) -> tuple[float, float]:
    x = np.asarray(hits, dtype=float)
    if x.size == 0:
        return math.nan, math.nan
    p = float(x.mean())
    return p, math.sqrt(p * (1 - p) / x.size)


def cell(lam: float, target: str, *, reps: int, n_days: int, seed: int) -> dict[str, Any]:
    """Every rate of one ``lambda`` x target cell."""
    model = model_for(lam, n_days=n_days)
    se = estimator_sd(model, n_seeds=MAX_SEEDS, n_days=n_days, target=target)
    rng = np.random.default_rng([seed, int(lam * 10), ("future", "period").index(target)])
    null: dict[str, list[bool]] = {f"seq{f}": [] for f in FIRSTS} | {f"fixed{k}": [] for k in FIXED}
    wrong: dict[str, list[bool]] = {f"seq{f}": [] for f in FIRSTS}
    power: dict[str, list[bool]] = {f"seq{f}": [] for f in FIRSTS}
    for _ in range(reps):
        a, b = _pair(model, n_days=n_days, delta=0.0, target=target, rng=rng)
        for f in FIRSTS:
            null[f"seq{f}"].append(_sequential(a, b, first=f, target=target) in ("better", "worse"))
        for k in FIXED:
            null[f"fixed{k}"].append(_fixed(a, b, k=k, target=target) in ("better", "worse"))
        a, b = _pair(model, n_days=n_days, delta=-1.0 * se, target=target, rng=rng)   # A truly lower: "better"
        for f in FIRSTS:
            outcome = _sequential(a, b, first=f, target=target)
            wrong[f"seq{f}"].append(outcome == "worse")
            power[f"seq{f}"].append(outcome == "better")
    out: dict[str, Any] = {"lambda": lam, "target": target, "reps": reps}
    for name, hits in null.items():
        out[f"{name}_decided"], out[f"{name}_decided_mcse"] = _rate(hits)
    for name, hits in wrong.items():
        out[f"{name}_wrong"], out[f"{name}_wrong_mcse"] = _rate(hits)
    for name, hits in power.items():
        out[f"{name}_power"], out[f"{name}_power_mcse"] = _rate(hits)
    return out


def none_check(*, reps: int, n_days: int, seed: int) -> dict[str, Any]:
    """``check_seeds_needed``'s "none" share and its wrong rate (60 seeds decide) on the time-heavy lambda-10 model."""
    model = model_for(10.0, n_days=n_days, time_like_seeds=5)
    r = check_seeds_needed(model, pilot=5, effect_in_se=2.0, n_rep=reps, seed=seed, question=Question(target="future"),
                           n_days=n_days, max_seeds=60, none_check_seeds=60)
    return {"reps": reps, "pilots_undecided": reps - r.decided_pilots, "n_none": r.n_none,
            "none_wrong": r.none_decided, "none_wrong_mcse": r.none_decided_mc_se}


SCAN_LEVELS = (0.1, 0.05, 0.025, 0.01, 0.005)


def none_scan(*, reps: int, n_days: int, seed: int, levels: tuple[float, ...] = SCAN_LEVELS,
              pilot: int = 5, follow: int = 60) -> dict[str, Any]:
    """The "none" rule at several one-sided levels ``a`` of the gap's optimistic end, on ``none_check``'s pilots.

    A pilot (undecided at ``pilot`` seeds) says "none" at level ``a`` when
    ``t_nu_time(1 - alpha/2) sqrt(v_low) >= |gap| + t_{k-1}(1 - a) sqrt(S / k)`` (the product's rule is
    ``a = alpha / 2``; ``v_low`` as :func:`rolling_calib.core.verdict.time_part_low`). The truth at
    infinity: the verdict's interval on the seed-free differential of the same days (``delta + c_t``)
    excludes 0.
    """
    model = model_for(10.0, n_days=n_days, time_like_seeds=pilot)
    question = Question(target="future")
    conf = float(question.confidence)
    truth = 2.0 * estimator_sd(model, n_seeds=pilot, n_days=n_days, target="future")
    rng = np.random.default_rng(int(seed))     # the draws of check_seeds_needed(seed=seed): the same pilots
    seeds = np.arange(follow)
    recs: list[tuple[float, bool, bool]] = []     # (z, decidable at infinity, decided by `follow` seeds)
    decidable_all = mismatch = decided_follow_all = 0
    for _ in range(reps):
        a, b, common = _simulate(model, 1, follow, n_days, rng)
        inf = crossed_variance(np.vstack([common[0] + truth] * 2), target="future")
        decidable = abs(truth + float(common[0].mean())) > inf.half_width(conf)
        decidable_all += decidable
        pa = LossPanel.from_arrays(seeds=seeds, total=a[0] + truth)
        pb = LossPanel.from_arrays(seeds=seeds, total=b[0])
        idx = np.arange(pilot)
        v = decide(pa.select(seeds=idx), pb.select(seeds=idx), question=question)
        later = decide(pa, pb, question=question).outcome == "worse"    # every pilot: the issue's denominator
        decided_follow_all += later
        if v.outcome != "undetermined":
            continue
        cv = v.variance
        t_time = float(stats.t.ppf(0.5 + conf / 2, cv.df_time)) if cv.var_time > 0 else 0.0
        half = t_time * math.sqrt(max(time_part_low(cv.var_time, cv.df_time), 0.0))
        z = (half - abs(v.difference)) / math.sqrt(cv.per_seed_var / pilot) if cv.per_seed_var > 0 else math.inf
        product_none = v.seeds_needed.reason.startswith("no number of seeds")
        mismatch += product_none != (z >= float(stats.t.ppf(0.5 + conf / 2, pilot - 1)))
        recs.append((z, bool(decidable), bool(later)))
    undecidable_all = reps - decidable_all
    rows = []
    for lev in levels:
        m = float(stats.t.ppf(1 - lev, pilot - 1))
        said = [r for r in recs if r[0] >= m]
        n = len(said)
        w60, winf = _rate([r[2] for r in said]), _rate([r[1] for r in said])
        given = sum(r[2] for r in said) / max(decided_follow_all, 1)
        rows.append({"level": lev, "multiplier": m, "said": n, "said_share": n / reps,
                     "wrong60": w60[0], "wrong60_mcse": w60[1], "wrong_inf": winf[0], "wrong_inf_mcse": winf[1],
                     "error_given_decidable": sum(r[1] for r in said) / max(decidable_all, 1),
                     "none_given_follow": given,
                     "none_given_follow_mcse": math.sqrt(given * (1 - given) / max(decided_follow_all, 1)),
                     "power": (n - sum(r[1] for r in said)) / max(undecidable_all, 1),
                     "product": abs(lev - (1 - conf) / 2) < 1e-12})
    return {"reps": reps, "seed": seed, "undecided": len(recs), "decidable_inf": decidable_all,
            "decided_follow": decided_follow_all,
            "undecidable_inf": undecidable_all, "product_mismatches": mismatch, "rows": rows}


def scan_markdown(scan: dict[str, Any]) -> str:
    lines = [f"\"None\" scan: {scan['reps']} pilots (seed {scan['seed']}), {scan['undecided']} undecided at 5 seeds; "
             f"unlimited seeds decide {scan['decidable_inf']}, decide none of {scan['undecidable_inf']}; 60 seeds "
             f"decide {scan['decided_follow']} (right direction); the scan's rule at the product's level disagreed "
             f"with the product on {scan['product_mismatches']} pilots.", "",
             "| gap's end: one-sided level (t_4 multiplier) | \"none\" said | wrong: 60 seeds decide | "
             "wrong: unlimited seeds decide | \"none\" among pilots 60 seeds decide (the issue's measure) | "
             "\"none\" among pilots unlimited seeds decide | power of \"none\" |",
             "|---|---|---|---|---|---|---|"]
    for r in scan["rows"]:
        tag = " (product)" if r["product"] else ""
        lines.append(f"| {r['level']:g} ({r['multiplier']:.2f}){tag} | {r['said']} ({r['said_share']:.2%}) | "
                     f"{_pct(r['wrong60'], r['wrong60_mcse'])} | {_pct(r['wrong_inf'], r['wrong_inf_mcse'])} | "
                     f"{r['none_given_follow']:.2%} ± {r['none_given_follow_mcse']:.2%} | "
                     f"{r['error_given_decidable']:.2%} | {r['power']:.1%} |")
    return "\n".join(lines)


def _pct(x: float, se: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:.1%} ± {se:.1%}"


def markdown(cells: list[dict[str, Any]], none: dict[str, Any] | None) -> str:
    head = ("| lambda | target | seq. first 3: A/A decided | seq. first 5: A/A decided | seq. first 3: wrong dir. (1 SE) "
            "| seq. first 5: wrong dir. (1 SE) | seq. first 3: right dir. (1 SE) | seq. first 5: right dir. (1 SE) "
            "| fixed 3 seeds: A/A decided | fixed 5 seeds: A/A decided |")
    lines = [head, "|" + "---|" * 10]
    for c in cells:
        lines.append(f"| {c['lambda']:g} | {c['target']} | " + " | ".join(
            _pct(c[f"{n}"], c[f"{n}_mcse"]) for n in ("seq3_decided", "seq5_decided", "seq3_wrong", "seq5_wrong",
                                                     "seq3_power", "seq5_power", "fixed3_decided", "fixed5_decided")) + " |")
    if none is not None:
        lines.append("")
        lines.append(f"\"None suffices\": {none['n_none']} of {none['reps']} pilots said it "
                     f"({none['pilots_undecided']} undecided at the pilot); wrong (60 seeds decide): "
                     f"{_pct(none['none_wrong'], none['none_wrong_mcse'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--reps", type=int, default=300, help="pairs per cell and effect (default 300)")
    p.add_argument("--none-reps", type=int, default=300, help="pilots of the 'none suffices' check (0: skip)")
    p.add_argument("--none-scan-reps", type=int, default=0,
                   help="pilots of the 'none' scan over the gap bound's level (0: skip; the same pilots as --none-reps)")
    p.add_argument("--days", type=int, default=125, help="trading days per pair (default 125)")
    p.add_argument("--lambdas", default="1,10", help="ratios of run-mean variance to day noise (default 1,10; \"\": only the 'none suffices' check)")
    p.add_argument("--targets", default="future,period")
    p.add_argument("--seed", type=int, default=0, help="seed of every draw (recorded)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the Markdown table")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    cells = [cell(float(lam), t, reps=args.reps, n_days=args.days, seed=args.seed)
             for lam in filter(None, args.lambdas.split(",")) for t in args.targets.split(",")]
    none = none_check(reps=args.none_reps, n_days=args.days, seed=args.seed) if args.none_reps > 0 else None
    scan = none_scan(reps=args.none_scan_reps, n_days=args.days, seed=args.seed) if args.none_scan_reps > 0 else None
    elapsed = time.perf_counter() - t0
    if args.json:
        print(json.dumps({"cells": cells, "none": none, "scan": scan, "seconds": elapsed, "seed": args.seed}, indent=1))
    else:
        print(markdown(cells, none))
        if scan is not None:
            print("\n" + scan_markdown(scan))
        print(f"\n({elapsed:.0f} s; seed {args.seed}; {args.reps} pairs per cell and effect)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
