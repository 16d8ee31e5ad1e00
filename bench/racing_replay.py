"""Races and model confidence sets, measured: sweeps simulated from variance components, replayed.

Replays :func:`rolling_calib.core.racing.race` -- seeds revealed ``--first``, then ``--batch`` at a
time; each configuration eliminated once decided worse than another still in the race (Hsu's MCB:
one-sided at alpha / (K - 1), spent over the looks); the race stopped once the set cannot shrink --
on sweeps simulated from a pair's variance components
(:func:`rolling_calib.simulation.race_sim.simulate_sweep`; a built-in preset, ``--model FILE`` or
``--from-store DIR``) with the configurations' true gaps to the best in standard errors of a pair's
difference at the full grid (``--max-seeds`` seeds). Beside it, the baseline: the same race with
Bonferroni over every pair (``comparisons="all-pairs"``: two-sided alpha / m, m = K (K - 1) / 2, the
pairs' rule's correction), and the step-down form (``comparisons="step-down"``: closed testing of "i is
a best", alpha / (r (K - 1)) with r configurations not eliminated); ``--methods`` picks among them.
``--futility`` is the race's threshold: a configuration stops receiving seeds once its chance to be
eliminated by ``--max-seeds`` is below it. ``--seed-variance pooled`` pools each look's seed variance over
the configurations it compares (``StoppingRule.seed_variance``); ``--best-scale R`` gives the truly best
configurations ``R`` times the others' seed sd (the pooled variance's level when seed variances differ).
``--seed-variance known`` is an **oracle**, not a rule any race can run: every comparison's seed part is the
model's true per-seed variance on unlimited degrees of freedom (:func:`known_seed_variance`), so what is left is
the noise of the gaps' estimates themselves: the bound on what any estimate of the seed variance can reach.

Sweep shapes (``--sweeps``; gaps in SE):

* ``tied4``: 12 configurations, 4 tied for the best, then 1, 2, 2.5, 3, 3.5, 4, 5, 6;
* ``one_best``: 12 configurations, one best, then 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 8;
* ``null``: 12 identical configurations (every elimination is an error);
* ``paper24``: 24 configurations like the paper profile's grid (workflows/paper/paper.yaml), 2 tied for
  the best and 22 spread from 0.5 to 12 SE (an assumed spread: the paper's true gaps are unknown).

Per shape and method it prints, each with its Monte Carlo standard error (over sweeps):

* **a best eliminated**: the share of sweeps that eliminated at least one truly best configuration
  (the family-wise error the issue asks to hold at 5%; with ties MCB guarantees the next one);
* **every best eliminated**: the share that eliminated all of them (Hsu's MCB guarantee: <= alpha);
* **eliminated by gap**: the share of the configurations 0-2, 2-4 and >= 4 SE worse that were eliminated;
* **seeds to**: the share of the seeds spent that went to the best ones and to each gap class, and the
  mean seeds per configuration of each gap;
* **seeds / grid**: seeds trained over the grid's (every configuration at ``--max-seeds``), and the
  CPU-hours that saves on the paper grid (``--paper-cpu-hours`` for 10 seeds of its 24 pipelines,
  ``bench/estimate_paper_compute.py``; scaled to the grid's seeds).

Then the model confidence sets on ``--mcs-configs`` identical configurations with persistent seed
offsets of ``--offsets`` (sd, the preset's other components kept): the share of sweeps whose set
excluded at least one (nominal ``1 - confidence``), for the seed-aware set
(:func:`rolling_calib.core.racing.model_confidence_set`) and the old seed-blind one (Hansen's MCS on
seed-averaged daily losses, :func:`rolling_calib.core.verdict.seed_averaged_confidence_set`).

Usage (from the repository root; the tables in docs/racing.md)::

    nice -n 19 python bench/racing_replay.py --reps 60 --mcs-reps 0 --target period
    nice -n 19 python bench/racing_replay.py --reps 60 --mcs-reps 0 --methods best --futility 0.1
    nice -n 15 python bench/racing_replay.py --reps 150 --mcs-reps 0 --methods best --seed-variance pooled
    nice -n 15 python bench/racing_replay.py --reps 150 --mcs-reps 0 --methods best --seed-variance pooled \
        --best-scale 1.7 --sweeps tied4
    python bench/racing_replay.py --from-store runs/store --metric ql --sweeps tied4 --reps 50 --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rolling_calib.core import racing  # noqa: E402
from rolling_calib.core.question import Question  # noqa: E402
from rolling_calib.core.racing import model_confidence_set, race  # noqa: E402
from rolling_calib.core.resampling import Resampling  # noqa: E402
from rolling_calib.core.stopping import StoppingRule  # noqa: E402
from rolling_calib.core.tables import format_table  # noqa: E402
from rolling_calib.core.verdict import seed_averaged_confidence_set  # noqa: E402
from rolling_calib.simulation.race_sim import simulate_sweep  # noqa: E402
from rolling_calib.simulation.verdict_sim import PanelModel, estimator_sd  # noqa: E402

SWEEPS: dict[str, list[float]] = {
    "tied4": [0, 0, 0, 0, 1, 2, 2.5, 3, 3.5, 4, 5, 6],
    "one_best": [0, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 8],
    "null": [0] * 12,
    "paper24": [0, 0, 0.5, 1, 1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4, 4, 4.5, 5, 5, 6, 6, 7, 8, 9, 10, 12],
}
METHODS = ("best", "all-pairs", "step-down")
GAP_CLASSES = (("0-2 SE", 0.0, 2.0), ("2-4 SE", 2.0, 4.0), (">= 4 SE", 4.0, math.inf))
#: Classes of the seeds' destination: the best ones, then the gap classes.
SPENT_CLASSES = ("best",) + tuple(c for c, _, _ in GAP_CLASSES)
#: The paper grid's CPU-hours at 10 seeds per pipeline (docs/gpu.md, bench/estimate_paper_compute.py).
PAPER_CPU_HOURS = 844.0
PAPER_SEEDS = 10


def _spent_class(gap: float) -> str:
    """Which of :data:`SPENT_CLASSES` a configuration ``gap`` SE from the best is in."""
    return "best" if gap == 0 else next(c for c, lo, hi in GAP_CLASSES if lo <= gap < hi)


def _rate(x: list[float]) -> tuple[float, float]:
    """Mean and Monte Carlo SE of per-sweep values (NaN-free)."""
    arr = np.asarray([v for v in x if math.isfinite(v)], dtype=float)
    if arr.size == 0:
        return math.nan, math.nan
    return float(arr.mean()), float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else math.nan


#: How the tables name the oracle's seed variance.
ORACLE_LABEL = "known (an oracle: the model's true one; no race can run it)"
#: The oracle's degrees of freedom: the seed part known (a t on this many is the normal to 1e-8).
KNOWN_DF = 1e9


@contextlib.contextmanager
def known_seed_variance(model: PanelModel, *, n_days: int) -> Iterator[float]:
    """An oracle for the bench: while open, a race whose rule pools the seed variance (``seed_variance="pooled"``)
    takes every comparison's seed part from the model instead of the data -- the true per-seed variance of a pair's
    run-mean difference, ``S = 2 v_run`` (:func:`rolling_calib.simulation.verdict_sim.estimator_sd` at one seed),
    on :data:`KNOWN_DF` degrees of freedom. No race on real runs knows ``S``: this measures how far the frontier
    (power against seeds) can move with a perfect seed variance, the limit of every estimate of it. Exact only when
    every configuration has the model's seed variance (``best_scale`` 1). Yields ``S``.

    >>> from bench.verdict_calibration import PRESETS
    >>> with known_seed_variance(PRESETS["seed_dominated"], n_days=125) as S:
    ...     round(S, 5), racing._pooled_seed_variance(np.zeros((3, 4))) == (S, KNOWN_DF)
    (0.29604, True)
    >>> racing._pooled_seed_variance(np.zeros((3, 4)))      # restored: the data's own again
    (0.0, 6.0)
    """
    S = estimator_sd(model, n_seeds=1, n_days=n_days, target="period") ** 2
    with mock.patch.object(racing, "_pooled_seed_variance", lambda means: (S, KNOWN_DF)):
        yield S


def replay_sweeps(model: PanelModel, gaps: list[float], *, reps: int, n_days: int, rule: StoppingRule,
                  target: str, seed: int, progress: str = "", methods: tuple[str, ...] = METHODS,
                  best_scale: float = 1.0) -> list[dict[str, Any]]:
    """``reps`` simulated sweeps, each raced by every method: per sweep and method, what was eliminated and the seeds.

    ``best_scale``: the truly best configurations' seed parts scaled by it (their seed variance ``best_scale^2``
    times the others'): unlike seed variances, where a pooled seed variance is too small for the best's pairs.
    Gaps stay in SE of a pair of the model's (scale 1) configurations."""
    se = estimator_sd(model, n_seeds=rule.max_seeds, n_days=n_days, target=target)
    rng = np.random.default_rng(seed)
    question = Question(target=target)
    records = []
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=reps, desc=progress, unit="sweep", file=sys.stderr)
    for i in range(reps):
        panels, _ = simulate_sweep(model, deltas=[g * se for g in gaps], n_seeds=rule.max_seeds, n_days=n_days,
                                   rng=rng, centre_period=target == "period",
                                   seed_scales=[best_scale if g == 0 else 1.0 for g in gaps])
        names = list(panels)
        rec: dict[str, Any] = {"gaps": dict(zip(names, gaps))}
        for method in methods:
            r = race(panels, rule=rule, question=question, orientation="lower", order_seed=i, comparisons=method)
            rec[method] = {"eliminated": sorted(r.eliminated), "fraction": r.fraction_of_grid,
                           "looks": len(r.looks), "stop": r.stop, "seeds": dict(r.seeds_used)}
        records.append(rec)
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    return records


def summarise(records: list[dict[str, Any]], methods: tuple[str, ...] = METHODS) -> list[dict[str, Any]]:
    """Per method: a best eliminated, every best eliminated, eliminated by gap class, seeds over the grid, and the
    share of the seeds spent that went to each gap class (the best ones as ``0 SE``)."""
    rows = []
    for method in methods:
        any_best, all_best, fraction = [], [], []
        by_class: dict[str, list[float]] = {c: [] for c, _, _ in GAP_CLASSES}
        spent: dict[str, float] = {c: 0.0 for c in SPENT_CLASSES}
        stops: dict[str, int] = {}
        by_gap: dict[float, list[float]] = {}
        for rec in records:
            for n, k in rec[method]["seeds"].items():
                by_gap.setdefault(rec["gaps"][n], []).append(k)
            gaps, out = rec["gaps"], set(rec[method]["eliminated"])
            best = [n for n, g in gaps.items() if g == 0]
            any_best.append(float(any(n in out for n in best)))
            all_best.append(float(all(n in out for n in best)))
            fraction.append(rec[method]["fraction"])
            for c, lo, hi in GAP_CLASSES:
                names = [n for n, g in gaps.items() if g > 0 and lo <= g < hi]
                if names:
                    by_class[c].append(sum(n in out for n in names) / len(names))
            stops[rec[method]["stop"]] = stops.get(rec[method]["stop"], 0) + 1
            for n, k in rec[method]["seeds"].items():
                spent[_spent_class(gaps[n])] += k
        row: dict[str, Any] = {"method": method, "n": len(records)}
        row["a_best_eliminated"], row["a_best_mcse"] = _rate(any_best)
        row["every_best_eliminated"], row["every_best_mcse"] = _rate(all_best)
        for c, _, _ in GAP_CLASSES:
            row[f"eliminated {c}"], row[f"eliminated {c} mcse"] = _rate(by_class[c])
        row["seeds_fraction"], row["seeds_fraction_mcse"] = _rate(fraction)
        row["stops"] = stops
        total = sum(spent.values())
        row["seeds_share"] = {c: v / total for c, v in spent.items()}
        row["seeds_by_gap"] = {g: float(np.mean(v)) for g, v in sorted(by_gap.items())}
        rows.append(row)
    return rows


def mcs_replays(model: PanelModel, *, offsets: list[float], n_configs: int, seeds: list[int], reps: int,
                n_days: int, target: str, n_boot: int, seed: int, progress: bool) -> list[dict[str, Any]]:
    """Identical configurations with persistent seed offsets: how often each set excludes at least one."""
    rows = []
    question = Question(target=target)
    for offset in offsets:
        m = PanelModel(**{**model.to_dict(), "seed_sd": float(offset)})
        for k in seeds:
            rng = np.random.default_rng([seed, int(round(offset * 1000)), k])
            aware, blind = [], []
            it = range(reps)
            if progress:
                from tqdm import tqdm
                it = tqdm(it, desc=f"MCS offset {offset:g}, {k} seeds", unit="sweep", file=sys.stderr)
            for i in it:
                panels, _ = simulate_sweep(m, deltas=[0.0] * n_configs, n_seeds=k, n_days=n_days, rng=rng,
                                           centre_period=target == "period")
                res = Resampling(n_boot=n_boot, seed=i)
                aware.append(float(bool(model_confidence_set(panels, question=question,
                                                             orientation="lower").excluded)))
                per_day = np.stack([p.unit_means().mean(axis=0) for p in panels.values()], axis=1)
                blind.append(float(bool(seed_averaged_confidence_set(per_day, list(panels), question=question,
                                                                     resampling=res).excluded)))
            for method, hits in (("seed-aware", aware), ("seed-averaged (old)", blind)):
                p, se = _rate(hits)
                rows.append({"offset_sd": offset, "seeds": k, "method": method, "excluded_one": p, "mcse": se,
                             "n": reps})
    return rows


def _pct(x: float, se: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:.1%} ±{se:.1%}"


def race_table(rows: list[dict[str, Any]]) -> str:
    body = [[r["method"], _pct(r["a_best_eliminated"], r["a_best_mcse"]),
             _pct(r["every_best_eliminated"], r["every_best_mcse"])]
            + [_pct(r[f"eliminated {c}"], r[f"eliminated {c} mcse"]) for c, _, _ in GAP_CLASSES]
            + [_pct(r["seeds_fraction"], r["seeds_fraction_mcse"]),
               " / ".join(f"{v:.0%}" for v in r["seeds_share"].values()),
               ", ".join(f"{k} {v}" for k, v in sorted(r["stops"].items()))] for r in rows]
    return format_table(body, ["comparisons", "a best eliminated", "every best eliminated"]
                        + [f"eliminated {c}" for c, _, _ in GAP_CLASSES]
                        + ["seeds / grid", "seeds to " + " / ".join(SPENT_CLASSES), "stops"])


def mcs_table(rows: list[dict[str, Any]]) -> str:
    body = [[r["offset_sd"], r["seeds"], r["method"], _pct(r["excluded_one"], r["mcse"])] for r in rows]
    return format_table(body, ["seed offset sd", "seeds", "model confidence set", "excluded at least one"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="racing_replay.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--preset", default="seed_dominated", help="built-in model (seed_dominated, time_dominated)")
    src.add_argument("--model", metavar="FILE", help="a YAML of PanelModel fields")
    src.add_argument("--from-store", metavar="DIR", help="estimate the model from a store's first pair")
    parser.add_argument("--metric", default="ql", choices=["ql", "cql", "ic", "rank_ic"],
                        help="with --from-store: the metric whose panels are modelled (default ql)")
    parser.add_argument("--sweeps", default="tied4,one_best,null,paper24",
                        help=f"sweep shapes, comma-separated (of {', '.join(SWEEPS)}; default all)")
    parser.add_argument("--reps", type=int, default=100, help="sweeps per shape (default 100)")
    parser.add_argument("--days", type=int, default=125, help="trading days per simulated sweep (default 125)")
    parser.add_argument("--first", type=int, default=3, help="seeds per configuration at the first look (default 3)")
    parser.add_argument("--batch", type=int, default=2, help="seeds added per look (default 2)")
    parser.add_argument("--max-seeds", type=int, default=20, help="the grid's seeds per configuration (default 20)")
    parser.add_argument("--futility", type=float, default=StoppingRule().futility,
                        help="the race's futility threshold: a configuration stops receiving seeds once its chance "
                             "to be eliminated by --max-seeds is below this (default %(default)s, the rule's)")
    parser.add_argument("--seed-variance", default=StoppingRule().seed_variance, choices=["pair", "pooled", "known"],
                        help="each comparison's seed variance: the pair's own seeds, or pooled over the configurations "
                             "a look compares (default %(default)s, the rule's); known: an oracle, the model's true "
                             "seed variance (no race can run it: the bound on what any estimate reaches)")
    parser.add_argument("--best-scale", type=float, default=1.0,
                        help="scale of the truly best configurations' seed parts (their seed variance this squared "
                             "times the others'; default 1: alike)")
    parser.add_argument("--methods", default=",".join(METHODS),
                        help=f"error shares to race with, comma-separated (of {', '.join(METHODS)}; default all)")
    parser.add_argument("--target", default="period", choices=["future", "period"],
                        help="the question's target (default period)")
    parser.add_argument("--mcs-reps", type=int, default=200, help="sweeps per MCS cell (default 200; 0: none)")
    parser.add_argument("--mcs-configs", type=int, default=5, help="identical configurations per MCS sweep (default 5)")
    parser.add_argument("--mcs-seeds", default="5,20", help="seeds per configuration of the MCS sweeps (default 5,20)")
    parser.add_argument("--offsets", default="0,0.1,0.3", help="persistent seed offset sd of the MCS sweeps")
    parser.add_argument("--n-boot", type=int, default=1000,
                        help="stationary-bootstrap replicates of each seed-averaged (old) set (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulation (recorded)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    from bench.verdict_calibration import UsageError, model_of_args

    try:
        model, source = model_of_args(args)
        methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
        for m in methods:
            if m not in METHODS:
                raise UsageError(f"--methods: expected names of {', '.join(METHODS)}, found {m!r}")
        if not 0.0 <= args.futility <= 1.0:
            raise UsageError(f"--futility: expected a probability in [0, 1], found {args.futility}")
        shapes = [s.strip() for s in args.sweeps.split(",") if s.strip()]
        for s in shapes:
            if s not in SWEEPS:
                raise UsageError(f"--sweeps: expected names of {', '.join(SWEEPS)}, found {s!r}")
    except UsageError as exc:
        print(f"racing_replay: {exc}", file=sys.stderr)
        return 2
    if not (math.isfinite(args.best_scale) and args.best_scale > 0):
        print(f"racing_replay: --best-scale: expected a finite number > 0, found {args.best_scale}", file=sys.stderr)
        return 2
    known = args.seed_variance == "known"
    if known and args.best_scale != 1.0:
        print("racing_replay: --seed-variance known: the oracle knows one seed variance for every configuration; "
              f"expected --best-scale 1, found {args.best_scale:g}", file=sys.stderr)
        return 2
    rule = StoppingRule(first=args.first, batch=args.batch, max_seeds=args.max_seeds, futility=args.futility,
                        seed_variance="pooled" if known else args.seed_variance)
    out: dict[str, Any] = {"source": source, "model": model.to_dict(), "settings": vars(args),
                           "rule": rule.to_dict(), "races": {}, "mcs": []}
    for k, shape in enumerate(shapes):
        t = time.perf_counter()
        with known_seed_variance(model, n_days=args.days) if known else contextlib.nullcontext():
            records = replay_sweeps(model, SWEEPS[shape], reps=args.reps, n_days=args.days, rule=rule,
                                    target=args.target, seed=args.seed + k, progress="" if args.json else shape,
                                    methods=methods, best_scale=args.best_scale)
        rows = summarise(records, methods)
        paper_grid_h = PAPER_CPU_HOURS * args.max_seeds / PAPER_SEEDS
        for r in rows:
            r["paper_cpu_hours_saved"] = (1.0 - r["seeds_fraction"]) * paper_grid_h
        out["races"][shape] = {"gaps_se": SWEEPS[shape], "rows": rows, "seconds": time.perf_counter() - t}
    if args.mcs_reps > 0:
        t = time.perf_counter()
        out["mcs"] = mcs_replays(model, offsets=[float(x) for x in args.offsets.split(",")],
                                 n_configs=args.mcs_configs, seeds=[int(x) for x in args.mcs_seeds.split(",")],
                                 reps=args.mcs_reps, n_days=args.days, target=args.target, n_boot=args.n_boot,
                                 seed=args.seed, progress=not args.json)
        out["mcs_seconds"] = time.perf_counter() - t
    out["wall_seconds"] = time.perf_counter() - t0
    if args.json:
        print(json.dumps(out, default=str))
        return 0
    print(f"Races on {source}: {args.reps} sweeps per shape, {args.days} days, first {args.first}, batch "
          f"{args.batch}, max {args.max_seeds} seeds, futility {args.futility:g}, seed variance "
          f"{ORACLE_LABEL if known else args.seed_variance}, "
          f"best's seed scale {args.best_scale:g}, target {args.target}, 95% (MC SE after ±)")
    for shape, block in out["races"].items():
        print(f"\n{shape}: {len(block['gaps_se'])} configurations, gaps {block['gaps_se']} SE "
              f"({block['seconds']:.0f} s)")
        print(race_table(block["rows"]))
        for r in block["rows"]:
            print(f"  {r['method']}: mean seeds per configuration by gap (SE): "
                  + ", ".join(f"{g:g}: {v:.1f}" for g, v in r["seeds_by_gap"].items()))
            print(f"  {r['method']}: {r['seeds_fraction']:.1%} of the grid's seeds; on the paper grid at "
                  f"{args.max_seeds} seeds ({PAPER_CPU_HOURS * args.max_seeds / PAPER_SEEDS:.0f} CPU-h) that saves "
                  f"about {r['paper_cpu_hours_saved']:.0f} CPU-h")
    if out["mcs"]:
        print(f"\nModel confidence sets: {args.mcs_configs} identical configurations, {args.mcs_reps} sweeps per "
              f"cell ({args.n_boot} bootstrap replicates for the old set), nominal {1 - 0.95:.0%} "
              f"({out['mcs_seconds']:.0f} s)")
        print(mcs_table(out["mcs"]))
    print(f"({out['wall_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
