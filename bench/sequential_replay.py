"""Compute to a verdict, measured: the stopping rule replayed on simulated and real panels.

Replays :func:`rolling_calib.core.sequential.replay` -- seeds revealed ``--first``, then ``--batch``
at a time, each pair stopped once decided, equivalent, undecidable or futile, with alpha spending
over the looks -- on pairs simulated from a variance-component model
(:mod:`rolling_calib.simulation.verdict_sim`: a built-in preset, ``--model FILE`` or ``--from-store DIR``)
at true differences of 0 to 6 standard errors (of the full grid's difference), and, with
``--store DIR``, on a real store's pipelines in many random seed orders. Beside it, the baselines:

* ``full_grid``: every pipeline at ``--max-seeds`` seeds, one verdict (no stopping);
* ``naive``: the verdict at 95% after every batch, stop at the first decision (what peeking does);
* ``bonferroni``: the verdict after every batch at ``1 - alpha / looks``, stop at the first decision
  (a valid but conservative group-sequential baseline).

* ``adastop``: AdaStop (the group-sequential permutation test over seeds, ``pip install adastop``; a bench-only
  extra, left out when it is not installed) on the runs' mean losses: seeds only, no market time.

Per method and true difference it prints the share decided (the false-decision rate at 0), the
wrong-direction rate, the agreement with the full grid's verdict, and the seeds used over the full
grid's, each with its Monte Carlo standard error.

Usage (from the repository root)::

    python bench/sequential_replay.py --preset seed_dominated --reps 200
    python bench/sequential_replay.py --preset time_dominated --reps 200 --json
    python bench/sequential_replay.py --store demo_out/store --orders 50
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
from rolling_calib.core.stopping import StoppingRule  # noqa: E402
from rolling_calib.core.sequential import replay  # noqa: E402
from rolling_calib.core.tables import format_table  # noqa: E402
from rolling_calib.core.verdict import LossPanel, decide  # noqa: E402
from rolling_calib.simulation.verdict_sim import PanelModel, estimator_sd, simulate_pair  # noqa: E402

try:   # AdaStop (Mathieu et al. 2023), the group-sequential permutation test over seeds: a bench-only extra
    from adastop import MultipleAgentsComparator
except ImportError:  # pragma: no cover - `pip install adastop` adds it
    MultipleAgentsComparator = None

METHODS = ("sequential", "naive", "bonferroni", "full_grid") + (("adastop",) if MultipleAgentsComparator else ())


def _sub(panel: LossPanel, order: np.ndarray, n: int) -> LossPanel:
    return panel.select(seeds=order[:n])


def _peek(a: LossPanel, b: LossPanel, *, first: int, batch: int, max_seeds: int, level: float,
          target: str) -> tuple[str, int]:
    """Decide after every batch at a fixed ``level``; stop at the first decision (``naive`` / ``bonferroni``)."""
    order = np.arange(a.n_seeds)
    k = first
    while True:
        v = decide(_sub(a, order, k), _sub(b, order, k), names=("a", "b"),
                   question=Question(target=target, confidence=level))
        if v.outcome != "undetermined" or k >= max_seeds:
            return v.outcome, k
        k = min(k + batch, max_seeds)


def _adastop(a: LossPanel, b: LossPanel, *, batch: int, max_seeds: int, seed: int) -> tuple[str, int]:
    """AdaStop on the runs' mean losses: ``batch`` seeds per interim, ``max_seeds / batch`` interims, two-sided 5%,
    1,000 permutations. It sees seeds only (a run's mean over the days is its evaluation), not market time."""
    n_looks = max(max_seeds // batch, 1)
    comparator = MultipleAgentsComparator(n=batch, K=n_looks, B=1000, alpha=0.05, seed=seed)
    runs = {"a": a.total.sum(axis=1) / a.weight.sum(axis=1), "b": b.total.sum(axis=1) / b.weight.sum(axis=1)}
    for k in range(1, n_looks + 1):
        comparator.partial_compare({n: v[: k * batch] for n, v in runs.items()}, verbose=False)
        if comparator.is_finished:
            break
    decision = list(comparator.decisions.values())[0]
    used = int(max(comparator.n_iters.values()))
    return {"smaller": "better", "larger": "worse"}.get(decision, "undetermined"), used


def _looks(first: int, batch: int, max_seeds: int) -> int:
    return 1 + math.ceil(max(max_seeds - first, 0) / batch)


def replay_pair(a: LossPanel, b: LossPanel, *, first: int, batch: int, max_seeds: int, target: str,
                order_seed: int) -> dict[str, tuple[str, int]]:
    """Every method's ``(outcome, seeds per pipeline used)`` on one pair, seeds in one random order."""
    order = np.random.default_rng(order_seed).permutation(a.n_seeds)[:max_seeds]
    a, b = a.select(seeds=order), b.select(seeds=order)
    out = {}
    r = replay({"a": a, "b": b}, rule=StoppingRule(first=first, batch=batch, max_seeds=max_seeds),
               question=Question(target=target), order_seed=0)
    out["sequential"] = (r.outcomes[("a", "b")], max(r.seeds_used.values()))
    out["naive"] = _peek(a, b, first=first, batch=batch, max_seeds=max_seeds, level=0.95, target=target)
    out["bonferroni"] = _peek(a, b, first=first, batch=batch, max_seeds=max_seeds,
                              level=1 - 0.05 / _looks(first, batch, max_seeds), target=target)
    v = decide(a, b, names=("a", "b"), question=Question(target=target))
    out["full_grid"] = (v.outcome, max_seeds)
    if MultipleAgentsComparator is not None:
        out["adastop"] = _adastop(a, b, batch=batch, max_seeds=max_seeds, seed=order_seed)
    return out


def _decision(outcome: str) -> str:
    """better / worse, or "none" for every way of not deciding (undetermined, undecidable, equivalent)."""
    return outcome if outcome in ("better", "worse") else "none"


def _rate(hits: list[bool]) -> tuple[float, float]:
    x = np.asarray(hits, dtype=float)
    if x.size == 0:
        return math.nan, math.nan
    p = float(x.mean())
    return p, math.sqrt(p * (1 - p) / x.size)


def _wrong(rec: dict[str, Any], method: str, effect: float | str) -> bool:
    """A decision against the true direction; on a real store's pair (``effect`` names it), against the full
    grid's decision (no wrong direction where the full grid did not decide)."""
    outcome = rec[method][0]
    if isinstance(effect, str):
        truth = rec["full_grid"][0]
        return truth in ("better", "worse") and outcome in ("better", "worse") and outcome != truth
    return outcome == ("worse" if effect > 0 else "better") if effect != 0 else False


def summarise(records: list[dict[str, Any]], max_seeds: int) -> list[dict[str, Any]]:
    """Per (effect, method): decided, wrong direction, agreement with the full grid, seeds used / full grid."""
    rows = []
    effects = sorted({r["effect"] for r in records})
    for effect in effects:
        recs = [r for r in records if r["effect"] == effect]
        for m in METHODS:
            decided = [r[m][0] in ("better", "worse") for r in recs]
            wrong = [_wrong(r, m, effect) for r in recs]
            agree = [_decision(r[m][0]) == _decision(r["full_grid"][0]) for r in recs]
            used = np.asarray([r[m][1] / r.get("max_seeds", max_seeds) for r in recs], dtype=float)
            row = {"effect_se": effect, "method": m, "n": len(recs)}
            row["decided"], row["decided_mcse"] = _rate(decided)
            row["wrong_direction"], row["wrong_mcse"] = _rate(wrong)
            row["agreement"], row["agreement_mcse"] = _rate(agree)
            row["seeds_fraction"] = float(used.mean())
            row["seeds_fraction_mcse"] = float(used.std(ddof=1) / math.sqrt(used.size)) if used.size > 1 else math.nan
            outcomes = [r[m][0] for r in recs]
            row["outcomes"] = {o: outcomes.count(o) for o in sorted(set(outcomes))}
            rows.append(row)
    return rows


def simulate(model: PanelModel, *, effects: list[float], reps: int, n_days: int, first: int, batch: int,
             max_seeds: int, target: str, seed: int, progress: bool) -> list[dict[str, Any]]:
    """Replay ``reps`` simulated pairs per effect (in standard errors of the full grid's difference)."""
    rng = np.random.default_rng(seed)
    se = estimator_sd(model, n_seeds=max_seeds, n_days=n_days, target=target)
    records = []
    total = len(effects) * reps
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=total, desc="replays", unit="pair", file=sys.stderr)
    for effect in effects:
        for i in range(reps):
            a, b, truth = simulate_pair(model, n_seeds=max_seeds, n_days=n_days, delta=-effect * se, rng=rng)
            if target == "period":      # the period's truth is delta + the days' common part: centre it
                shift = truth["period"] - truth["future"]
                b = LossPanel.from_arrays(seeds=b.seeds, total=b.total + shift * b.weight, weight=b.weight,
                                          times=b.times)
            rec = replay_pair(a, b, first=first, batch=batch, max_seeds=max_seeds, target=target, order_seed=i)
            rec["effect"] = effect
            records.append(rec)
            if bar is not None:
                bar.update()
    if bar is not None:
        bar.close()
    return records


def store_replays(store: str, *, metric: str, orders: int, first: int, batch: int, max_seeds: int | None,
                  target: str) -> list[dict[str, Any]]:
    """Every pair of a real store, its seeds revealed in ``orders`` random orders (effect = the full grid's)."""
    from rolling_calib.analysis.scoring import score_store
    from rolling_calib.analysis.verdicts import loss_panel

    scores = score_store(store)
    panels = {p: loss_panel(scores.days, p, metric) for p in scores.pipelines}
    panels = {p: v for p, v in panels.items() if v is not None}
    names = list(panels)
    records = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            k = min(panels[a].n_seeds, panels[b].n_seeds)
            m = k if max_seeds is None else min(k, max_seeds)
            for o in range(orders):
                rec = replay_pair(panels[a], panels[b], first=first, batch=batch, max_seeds=m, target=target,
                                  order_seed=o)
                rec["effect"] = f"{a} vs {b}"
                rec["max_seeds"] = m
                records.append(rec)
    return records


def _table(rows: list[dict[str, Any]]) -> str:
    def pct(x: float, se: float) -> str:
        return "n/a" if not math.isfinite(x) else f"{x:.1%} ±{se:.1%}"
    body = [[r["effect_se"], r["method"], pct(r["decided"], r["decided_mcse"]),
             pct(r["wrong_direction"], r["wrong_mcse"]), pct(r["agreement"], r["agreement_mcse"]),
             pct(r["seeds_fraction"], r["seeds_fraction_mcse"]),
             ", ".join(f"{k} {v}" for k, v in r["outcomes"].items())] for r in rows]
    return format_table(body, ["true gap (SE)", "method", "decided", "wrong direction", "agrees with full grid",
                               "seeds / full grid", "outcomes"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sequential_replay.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--preset", default="seed_dominated", help="built-in model (seed_dominated, time_dominated)")
    src.add_argument("--model", metavar="FILE", help="a YAML of PanelModel fields")
    src.add_argument("--from-store", metavar="DIR", help="estimate the model from a store's first pair")
    parser.add_argument("--store", metavar="DIR", help="also replay this store's own pairs in random seed orders")
    parser.add_argument("--metric", default="ql", choices=["ql", "cql", "ic"], help="metric (default ql)")
    parser.add_argument("--effects", default="0,1,2,3,4,6", help="true gaps in SE of the full grid (default 0..6)")
    parser.add_argument("--reps", type=int, default=100, help="pairs per effect (default 100)")
    parser.add_argument("--orders", type=int, default=20, help="seed orders per real pair (default 20)")
    parser.add_argument("--days", type=int, default=125, help="trading days per simulated pair (default 125)")
    parser.add_argument("--first", type=int, default=3)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--max-seeds", type=int, default=20)
    parser.add_argument("--target", default="future", choices=["future", "period"])
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulation (recorded)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    from bench.verdict_calibration import UsageError, model_of_args

    try:
        model, source = model_of_args(args)
    except UsageError as exc:
        print(f"sequential_replay: {exc}", file=sys.stderr)
        return 2
    effects = [float(x) for x in args.effects.split(",")]
    records = simulate(model, effects=effects, reps=args.reps, n_days=args.days, first=args.first,
                       batch=args.batch, max_seeds=args.max_seeds, target=args.target, seed=args.seed,
                       progress=not args.json)
    rows = summarise(records, args.max_seeds)
    store_rows = []
    if args.store:
        store_recs = store_replays(args.store, metric=args.metric, orders=args.orders, first=args.first,
                                   batch=args.batch, max_seeds=args.max_seeds, target=args.target)
        store_rows = summarise(store_recs, args.max_seeds)
    seq = [r for r in rows if r["method"] == "sequential"]
    mean_fraction = float(np.mean([r["seeds_fraction"] for r in seq]))
    out = {"source": source, "model": model.to_dict(), "settings": vars(args), "rows": rows,
           "store_rows": store_rows, "sequential_mean_seeds_fraction": mean_fraction,
           "wall_seconds": time.perf_counter() - t0}
    if args.json:
        print(json.dumps(out, default=str))
        return 0
    print(f"Sequential replay on {source}: {args.reps} pairs per true gap, {args.days} days, first {args.first}, "
          f"batch {args.batch}, max {args.max_seeds} seeds, target {args.target} (MC SE after ±)")
    print(_table(rows))
    print(f"sequential: {mean_fraction:.1%} of the full grid's seeds on average over the true gaps "
          f"{args.effects} SE")
    if store_rows:
        print(f"\nReal store {args.store}: each pair in {args.orders} seed orders (the 'true gap' column names the pair)")
        print(_table(store_rows))
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
