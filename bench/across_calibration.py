"""The across-windows test under drift: level and power of four tests side by side, on whole refit windows.

Simulates paired seeds x windows tables from a model of variance components (a preset, ``--model`` YAML or
``--from-store``, as ``bench/verdict_calibration.py``) in drift cells (regimes of ``--drift`` days x drift
ratio; Markov switching, so a regime's length is geometric with that mean), ``--windows`` refit windows of
``--window-days`` days, and prints per cell, each with its Monte Carlo standard error
(:func:`rolling_calib.simulation.when_sim.calibrate_across` says what each column counts):

* ``halves`` (the product's): Ibragimov-Mueller on the odd- and the even-numbered windows apart at
  ``alpha / 2`` each (Bonferroni), the seeds' shared offsets counted; valid where every regime is shorter
  than one window;
* ``all``: one Ibragimov-Mueller test over all the windows, seeds counted (the product's before);
* ``pairs``: the same over windows twice as long (adjacent windows merged);
* ``bound``: ``all`` with the windows' variance part inflated by ``(2q - 1) / (q - 1)``, the worst lag-1
  correlation (1/2) a sequence that is independent beyond adjacent windows can have;

false decisions under the future null (all draws, and among the draws whose regimes were all at most one
window long: the halves' assumption met; ``--fixed`` adds cells whose regimes are all exactly one window long,
at a uniform phase, where it is met by every draw; ``--straddle`` the same with every window cut in half by a
regime's end, the most adjacent windows can share under it), and power at a true difference of 2 and 3
standard errors of the mean difference (future target, the regimes included). Then the done-when check: each
test within 5% + 2 MC SE in the cells whose regimes' mean length is shorter than a window (or every regime
one window long, or no drift).

Usage (from the repository root)::

    python bench/across_calibration.py --preset time_dominated --reps 2000
    python bench/across_calibration.py --preset time_dominated --window-days 125 --drift 110:4 --reps 4000
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.verdict_calibration import (  # noqa: E402
    PRESETS,
    UsageError,
    add_simulation_output_args,
    load_model,
    model_from_store,
    parse_drift,
)
from rolling_calib.core.tables import format_table  # noqa: E402
from rolling_calib.simulation.when_sim import ACROSS_METHODS, WhenCell, calibrate_across  # noqa: E402

LEVEL = 0.05
EFFECTS = (2.0, 3.0)
NAMES = {"halves": "halves (Bonferroni)", "all": "all windows (before)", "pairs": "merged pairs",
         "bound": "lag-1 bound"}


def _ints(text: str, flag: str, low: int) -> list[int]:
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        if not item.isdigit() or int(item) < low:
            raise UsageError(f"{flag}: expected whole numbers >= {low} separated by commas, found {item!r}")
        out.append(int(item))
    if not out:
        raise UsageError(f"{flag}: expected at least one number, found {text!r}")
    return out


def _pct(p: float, se: float | None = None) -> str:
    if p is None or not math.isfinite(p):
        return "n/a"
    return f"{100 * p:.1f}%" + (f" ±{100 * se:.1f}" if se is not None and math.isfinite(se) else "")


def _limit(n: int) -> float:
    return LEVEL + 2 * math.sqrt(LEVEL * (1 - LEVEL) / n)


def table(rows: list[dict[str, Any]], methods: list[str], style: str) -> str:
    """One line per cell and test: false decisions (all draws; draws whose regimes all fit in a window), power."""
    body = []
    for r in rows:
        shorter = ("n/a" if not r["regime_days"] else
                   "every regime = window" if r["drift"].endswith(("fixed", "straddle"))
                   else "yes" if r["regime_days"] < r["window_days"] else "no")
        for m in methods:
            body.append([r["n_seeds"], r["window_days"], r["n_windows"], r["drift"], shorter, NAMES[m],
                         _pct(r[m], r[f"{m}_mc_se"]),
                         f"{_pct(r[f'{m}_within'], r[f'{m}_within_mc_se'])} (n={r['n_within']})",
                         *(_pct(r[f"{m}_power_{e:g}"], r[f"{m}_power_{e:g}_mc_se"]) for e in EFFECTS)])
    return format_table(body, ["seeds", "window (days)", "windows", "drift", "regimes' mean < window", "test",
                               "false decisions", "false, every regime <= window", "power 2 SE", "power 3 SE"],
                        style=style)


def checks(rows: list[dict[str, Any]], methods: list[str]) -> list[str]:
    """Each test's level where the windows are longer than the regimes' mean (or no drift), and elsewhere."""
    out = []
    shorter = [r for r in rows if not r["regime_days"] or r["regime_days"] < r["window_days"]
               or r["drift"].endswith(("fixed", "straddle"))]
    longer = [r for r in rows if r not in shorter]
    for m in methods:
        bad = [r for r in shorter if r[m] > _limit(r["n_rep"])]
        out.append(f"{NAMES[m]}: within 5% + 2 MC SE in {len(shorter) - len(bad)} of {len(shorter)} cells whose "
                   f"regimes' mean is shorter than a window (or every regime one window long, or no drift; max "
                   f"{_pct(max((r[m] for r in shorter), default=math.nan))})"
                   + (": FAIL in " + ", ".join(f"{r['window_days']}d x{r['n_windows']} {r['drift']} "
                                               f"({_pct(r[m], r[f'{m}_mc_se'])})" for r in bad) if bad else "")
                   + (f"; where the regimes' mean is longer: {_pct(min(r[m] for r in longer))}-"
                      f"{_pct(max(r[m] for r in longer))}" if longer else ""))
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="across_calibration.py", description=__doc__.split("\n\n")[0],
                                epilog="Example: --preset time_dominated --window-days 62,125 --windows 4,8 "
                                       "--reps 2000")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", choices=sorted(PRESETS), default="time_dominated",
                     help="a hand-built model (default time_dominated)")
    src.add_argument("--model", metavar="YAML", help="a YAML mapping of PanelModel fields")
    src.add_argument("--from-store", metavar="DIR", help="estimate the model from a store's first pair")
    p.add_argument("--metric", default="ql", help="with --from-store: the metric (default ql)")
    p.add_argument("--seeds", type=int, default=20, help="seeds per pipeline (default 20)")
    p.add_argument("--window-days", default="62,125", metavar="DAYS,...",
                   help="refit window lengths in days (default 62,125)")
    p.add_argument("--windows", default="4,8", metavar="Q,...",
                   help="numbers of whole windows, even and >= 4 (default 4,8)")
    p.add_argument("--drift", default="none,40:1,40:4,110:1,110:4", metavar="SPEC,...",
                   help="none or REGIME_DAYS:DRIFT_RATIO items (default none,40:1,40:4,110:1,110:4)")
    p.add_argument("--fixed", default="1,4", metavar="RATIO,...",
                   help="also cells whose regimes are exactly one window long (the halves' assumption at its "
                        "edge), at these drift ratios ('' for none; default 1,4)")
    p.add_argument("--straddle", default="", metavar="RATIO,...",
                   help="also cells whose regimes are exactly one window long and cut every window in half (the "
                        "worst case the halves' assumption allows), at these drift ratios (default none)")
    p.add_argument("--methods", default=",".join(ACROSS_METHODS), metavar="NAME,...",
                   help=f"tests to measure, of {', '.join(ACROSS_METHODS)} (default all four)")
    add_simulation_output_args(p, reps=2000)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.reps < 2 or args.seeds < 2:
            raise UsageError(f"--reps and --seeds: expected >= 2, found {args.reps} and {args.seeds}")
        lengths = _ints(args.window_days, "--window-days", 2)
        counts = _ints(args.windows, "--windows", 4)
        if any(q % 2 for q in counts):
            raise UsageError(f"--windows: expected even numbers of windows, found {args.windows!r}")
        drifts = parse_drift(args.drift)
        fixed, straddle = ([r for _, r in parse_drift(",".join(f"2:{x.strip()}" for x in text.split(",")
                                                                if x.strip()))] if text.strip() else []
                           for text in (args.fixed, args.straddle))
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        if not methods or set(methods) - set(ACROSS_METHODS):
            raise UsageError(f"--methods: expected some of {', '.join(ACROSS_METHODS)}, found {args.methods!r}")
        if args.from_store:
            model, _, _, source = model_from_store(args.from_store, metric=args.metric)
        elif args.model:
            model, source = load_model(args.model), {"model": args.model}
        else:
            model, source = PRESETS[args.preset], {"preset": args.preset}
    except (UsageError, ValueError, OSError) as exc:
        print(f"across_calibration.py: error: {exc}", file=sys.stderr)
        return 2
    from tqdm import tqdm

    grid = [cell for L in lengths for q in counts
            for cell in ([WhenCell(args.seeds, L * q, d, r, L) for d, r in drifts]
                         + [WhenCell(args.seeds, L * q, float(L), r, L, regimes="fixed") for r in fixed]
                         + [WhenCell(args.seeds, L * q, float(L), r, L, regimes="straddle") for r in straddle])]
    started = time.perf_counter()
    rows = calibrate_across(model, cells=grid, n_rep=args.reps, seed=args.seed, effects_in_se=EFFECTS,
                            methods=methods, progress=lambda it: tqdm(it, desc="cells", file=sys.stderr, leave=False))
    seconds = time.perf_counter() - started
    if args.json:
        print(json.dumps({"source": source, "model": model.to_dict(), "rows": rows, "seconds": seconds}, indent=1,
                         default=lambda o: None))
        return 0
    head = (f"Model ({', '.join(f'{k}={v}' for k, v in source.items())}): "
            + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in model.to_dict().items())
            + f"\n{args.reps} pairs per cell, seed {args.seed} ({seconds:.0f} s); ± is the Monte Carlo standard "
              f"error; the limit 5% + 2 MC SE is {_pct(_limit(args.reps))}; power: decided the right way at a true "
              "difference of 2 / 3 standard errors of the mean difference (future target).")
    for style, sink in (("text", sys.stdout), ("markdown", None)):
        text = "\n\n".join([head, table(rows, methods, style), "\n".join(f"- {c}" for c in checks(rows, methods))])
        if sink is not None:
            sink.write(text + "\n")
        elif args.out:
            Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
