"""Do the verdicts under drift hold? The headline, per-window, across-windows and fluctuation outputs, measured.

Simulates pairs of loss panels from a model of variance components (a preset, ``--model`` YAML or
``--from-store``, as ``bench/verdict_calibration.py``) in drift cells (regimes of ``--drift`` days x
drift ratio) and refit windows of ``--windows`` days, and prints per cell, each with its Monte Carlo
standard error (:func:`rolling_calib.simulation.when_sim.calibrate_when` says what each column counts):

* ``headline``: the default verdict (over seeds, on these days) under its own null; ``future``: the
  verdict that was the headline before (over seeds and the market's future) under its null;
* ``per window``: any refit window decided under the per-window null (Holm's family-wise error), and
  without Holm;
* ``across``: the across-windows test (Ibragimov-Mueller on the odd- and the even-numbered windows apart,
  Bonferroni, the seeds' offsets that every window shares counted) under the future null (made with >= 4
  windows), beside one Ibragimov-Mueller test over all the windows (seeds counted; the product's before) and
  the plain one that leaves the seeds' shared part out (the product's before that); ``bench/across_calibration.py``
  measures these tests alone, with their power, on many more pairs;
* ``fluctuation``: the warning's rate (without drift: false alarms on stable pairs), and its power
  against a one-time reversal of 2 and 3 standard errors of a half-period mean difference.

Then the done-when checks: the headline within 5% + 2 MC SE in every drift cell; the across-windows
test within it where the windows are longer than the regimes; the fluctuation warning within it on
stable pairs.

Usage (from the repository root)::

    python bench/when_calibration.py --preset time_dominated --reps 200
    python bench/when_calibration.py --from-store demo_out/store --windows 21,62 --out when.md
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
    parse_cells,
    parse_drift,
)
from rolling_calib.core.tables import format_table  # noqa: E402
from rolling_calib.simulation.when_sim import WhenCell, calibrate_when  # noqa: E402

LEVEL = 0.05
EFFECTS = (2.0, 3.0)


def parse_windows(text: str) -> list[int | None]:
    """``"21,62"`` -> ``[21, 62]``; ``"model"`` -> ``[None]`` (the model's own refit window)."""
    out: list[int | None] = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        if item == "model":
            out.append(None)
        elif item.isdigit() and int(item) >= 2:
            out.append(int(item))
        else:
            raise UsageError(f"--windows: expected refit window lengths in days >= 2 (or 'model'), found {item!r}")
    return out or [None]


def _pct(p: float, se: float | None = None) -> str:
    if p is None or not math.isfinite(p):
        return "n/a"
    return f"{100 * p:.1f}%" + (f" ±{100 * se:.1f}" if se is not None and math.isfinite(se) else "")


def _limit(n_rep: int) -> float:
    return LEVEL + 2 * math.sqrt(LEVEL * (1 - LEVEL) / n_rep)


def table(rows: list[dict[str, Any]], style: str) -> str:
    body = []
    for r in rows:
        across = (_pct(r["across"], r["across_mc_se"]) if r["across_made"] else "not made (< 4 windows)")
        plain = _pct(r["across_plain"], r["across_plain_mc_se"]) if r["across_made"] else "not made"
        whole = _pct(r["across_all"], r["across_all_mc_se"]) if r["across_made"] else "not made"
        body.append([r["n_seeds"], r["n_days"], r["drift"], r["window_days"], r["n_windows"],
                     _pct(r["headline"], r["headline_mc_se"]), _pct(r["future"], r["future_mc_se"]),
                     _pct(r["per_window"], r["per_window_mc_se"]), _pct(r["per_window_raw"], r["per_window_raw_mc_se"]),
                     across + ("" if not r["across_made"] else " (regimes shorter)" if r["regimes_shorter"]
                               else " (regimes longer)" if r["regime_days"] else ""), whole, plain,
                     _pct(r["fluctuation"], r["fluctuation_mc_se"]),
                     *(_pct(r[f"reversal_power_{e:g}"], r[f"reversal_power_{e:g}_mc_se"]) for e in EFFECTS),
                     _pct(r["period_power_2"], r["period_power_2_mc_se"])])
    return format_table(body, ["seeds", "days", "drift", "window", "windows", "headline (period) false",
                               "future false (old default)", "per window: any false (Holm)",
                               "per window: any false (no Holm)", "across windows false",
                               "across: one IM over all windows false", "across: plain IM false (seeds left out)", "fluctuation fires",
                               "reversal power 2 SE", "reversal power 3 SE", "headline power 2 SE"], style=style)


def checks(rows: list[dict[str, Any]]) -> list[str]:
    """The done-when lines: each output's level where it claims to hold it."""
    out = []
    drift = [r for r in rows if r["regime_days"]]
    bad = [r for r in drift if r["headline"] > _limit(r["n_rep"])]
    out.append(f"headline (period) within 5% + 2 MC SE in {len(drift) - len(bad)} of {len(drift)} drift cells "
               f"(max {_pct(max((r['headline'] for r in drift), default=math.nan))})"
               + (": FAIL in " + ", ".join(f"{r['n_seeds']}x{r['n_days']} {r['drift']}" for r in bad) if bad else ""))
    fam = [r for r in rows if r["per_window"] > _limit(r["n_rep"])]
    out.append(f"per-window family (Holm) within 5% + 2 MC SE in {len(rows) - len(fam)} of {len(rows)} cells (max "
               f"{_pct(max(r['per_window'] for r in rows))}; without Holm up to {_pct(max(r['per_window_raw'] for r in rows))})")
    made = [r for r in rows if r["across_made"]]
    shorter = [r for r in made if r["regimes_shorter"] or not r["regime_days"]]
    longer = [r for r in made if r["regime_days"] and not r["regimes_shorter"]]
    held = [r for r in shorter if r["across"] <= _limit(r["n_rep"])]
    out.append(f"across windows within 5% + 2 MC SE where windows are longer than the regimes (or no drift): "
               f"{len(held)} of {len(shorter)} cells (max {_pct(max((r['across'] for r in shorter), default=math.nan))}); "
               f"where the regimes are longer: {_pct(min((r['across'] for r in longer), default=math.nan))}-"
               f"{_pct(max((r['across'] for r in longer), default=math.nan))}; not made in "
               f"{len(rows) - len(made)} cells (< 4 windows); the plain Ibragimov-Mueller test (seeds' shared part left "
               f"out) within it in {sum(r['across_plain'] <= _limit(r['n_rep']) for r in shorter)} of {len(shorter)} "
               f"(max {_pct(max((r['across_plain'] for r in shorter), default=math.nan))}); one test over all the "
               f"windows (seeds counted) in {sum(r['across_all'] <= _limit(r['n_rep']) for r in shorter)} of "
               f"{len(shorter)} (max {_pct(max((r['across_all'] for r in shorter), default=math.nan))})")
    stable = [r for r in rows if not r["regime_days"]]
    ok = [r for r in stable if r["fluctuation"] <= _limit(r["n_rep"])]
    out.append(f"fluctuation warning within 5% + 2 MC SE on stable pairs in {len(ok)} of {len(stable)} cells (max "
               f"{_pct(max((r['fluctuation'] for r in stable), default=math.nan))}); power against a one-time "
               "reversal: " + ", ".join(f"{e:g} SE {_pct(min(r[f'reversal_power_{e:g}'] for r in stable))}-"
                                        f"{_pct(max(r[f'reversal_power_{e:g}'] for r in stable))}" for e in EFFECTS)
               if stable else "no stable cell")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="when_calibration.py", description=__doc__.split("\n\n")[0],
                                epilog="Example: --preset time_dominated --reps 200 --windows 21,62")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", choices=sorted(PRESETS), default="time_dominated",
                     help="a hand-built model (default time_dominated)")
    src.add_argument("--model", metavar="YAML", help="a YAML mapping of PanelModel fields")
    src.add_argument("--from-store", metavar="DIR", help="estimate the model from a store's first pair")
    p.add_argument("--metric", default="ql", help="with --from-store: the metric (default ql)")
    p.add_argument("--cells", default="20x60,20x125,20x250", metavar="KxT,...",
                   help="seeds per pipeline x days (default 20x60,20x125,20x250)")
    p.add_argument("--drift", default="none,40:1,40:4,110:1,110:4", metavar="SPEC,...",
                   help="none or REGIME_DAYS:DRIFT_RATIO items (default none,40:1,40:4,110:1,110:4)")
    p.add_argument("--windows", default="62", metavar="DAYS,...",
                   help="refit window lengths in days, or 'model' (default 62: the demo's 3-month step)")
    p.add_argument("--n-sim", type=int, default=500, help="null paths of each fluctuation test (default 500)")
    add_simulation_output_args(p, reps=200)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.reps < 2 or args.n_sim < 100:
            raise UsageError(f"--reps: expected >= 2 and --n-sim >= 100, found {args.reps} and {args.n_sim}")
        cells = parse_cells(args.cells)
        drifts = parse_drift(args.drift)
        windows = parse_windows(args.windows)
        if args.from_store:
            model, _, _, source = model_from_store(args.from_store, metric=args.metric)
        elif args.model:
            model, source = load_model(args.model), {"model": args.model}
        else:
            model, source = PRESETS[args.preset], {"preset": args.preset}
    except (UsageError, ValueError, OSError) as exc:
        print(f"when_calibration.py: error: {exc}", file=sys.stderr)
        return 2
    from tqdm import tqdm

    grid = [WhenCell(k, T, d, r, w) for w in windows for d, r in drifts for k, T in cells]
    started = time.perf_counter()
    rows = calibrate_when(model, cells=grid, n_rep=args.reps, seed=args.seed, n_sim=args.n_sim, effects_in_se=EFFECTS,
                          progress=lambda it: tqdm(it, desc="cells", file=sys.stderr, leave=False))
    seconds = time.perf_counter() - started
    if args.json:
        print(json.dumps({"source": source, "model": model.to_dict(), "rows": rows, "seconds": seconds}, indent=1,
                         default=lambda o: None))
        return 0
    head = (f"Model ({', '.join(f'{k}={v}' for k, v in source.items())}): "
            + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in model.to_dict().items())
            + f"\n{args.reps} pairs per cell, {args.n_sim} null paths per fluctuation test, seed {args.seed} "
              f"({seconds:.0f} s); ± is the Monte Carlo standard error; the limit 5% + 2 MC SE is "
              f"{_pct(_limit(args.reps))}.")
    for style, sink in (("text", sys.stdout), ("markdown", None)):
        text = "\n\n".join([head, table(rows, style), "\n".join(f"- {c}" for c in checks(rows))]) + "\n"
        if sink is not None:
            sink.write(text)
        elif args.out:
            Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
