"""How far can a verdict on data like yours be trusted? Measured false decisions, coverage and power.

Simulates pairs of loss panels (seeds x trading days) from a generative model of variance
components (:class:`rolling_calib.simulation.verdict_sim.PanelModel`: market effect, per-seed offset,
seed x window offset, seed x day noise, the pipelines' daily interaction, regime drift, common
random numbers), estimated from your store (``--from-store``), read from a YAML file (``--model``)
or one of the built-in presets (``--preset``), and prints per cell (seeds, days, target, drift) and
method -- the verdict (``decide``) beside a paired t test on run means, Welch's t, Diebold-Mariano
on the seed-averaged daily differential and an rliable-style seed bootstrap -- the false-decision
rate (true difference 0), the coverage of the 95% interval, and the power at a true difference of 2
and 3 standard errors, each with its Monte Carlo standard error (MC SE). A summary per cell says
whether the verdict holds its level (false decisions <= 5% + 2 MC SE) and how its power compares
with the best method that holds its level there.

``--aa`` adds A/A splits of the store's pipelines (one pipeline's seeds split at random into two
halves, decided against each other: at most 5% should be decided). ``--seeds-needed`` checks that
``seeds_needed`` keeps its word: after a 5-seed pilot, the stated probability against the observed
share of follow-ups (same days, the pilot's seeds plus new ones) that decide the pair.

Usage (from the repository root)::

    python bench/verdict_calibration.py --preset time_dominated --reps 300 --out calib.md
    python bench/verdict_calibration.py --from-store demo_out/store --metric ql --aa --seeds-needed
    python bench/verdict_calibration.py --model my_model.yaml --cells 5x125,10x250 --drift none --json

The presets are built by hand from issue 26's description of the real stores (the daily Qlib
LSTM-Alpha360 store is not shipped): ``seed_dominated`` (daily QL: persistent per-seed offsets
dominate) and ``time_dominated`` (daily IC, the demo's minute QL: the daily interaction dominates;
seed x day noise 12x the interaction's variance, so the seed-averaged differential at 3 seeds has 5x
the true market-time variance, at 20 seeds 1.6x).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rolling_calib.core.question import Question  # noqa: E402
from rolling_calib.core.tables import format_table, sig  # noqa: E402
from rolling_calib.simulation.verdict_sim import (  # noqa: E402
    METHODS,
    TARGETS,
    Cell,
    PanelModel,
    aa_splits,
    calibrate,
    check_seeds_needed,
    estimate_model,
)

#: Hand-built models (units: the metric's own; only ratios matter). See the module docstring.
PRESETS: dict[str, PanelModel] = {
    "seed_dominated": PanelModel(market_sd=5.0, seed_sd=0.3, window_sd=0.1, window_days=125, noise_sd=2.45,
                                 interaction_sd=1.0, interaction_phi=0.1),
    "time_dominated": PanelModel(market_sd=5.0, seed_sd=0.03, window_sd=0.05, window_days=125, noise_sd=2.45,
                                 interaction_sd=1.0, interaction_phi=0.1),
}
DEFAULT_CELLS = "3x60,3x125,3x250,5x60,5x125,5x250,10x60,10x125,10x250,20x60,20x125,20x250"
DEFAULT_DRIFT = "none,40:4,110:4"
LEVEL = 0.05          # nominal false-decision rate at 95%


class UsageError(ValueError):
    """Bad input: printed as one line, exit 2."""


# --------------------------------------------------------------------------- parsing
def parse_cells(text: str) -> list[tuple[int, int]]:
    """``"3x60,5x125"`` -> ``[(3, 60), (5, 125)]`` (seeds per pipeline x days)."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        parts = item.lower().split("x")
        if len(parts) != 2 or not all(p.isdigit() for p in parts) or int(parts[0]) < 2 or int(parts[1]) < 4:
            raise UsageError(f"--cells: expected SEEDSxDAYS items such as 5x125 (seeds >= 2, days >= 4), found {item!r}")
        out.append((int(parts[0]), int(parts[1])))
    if not out:
        raise UsageError("--cells: expected at least one SEEDSxDAYS item, found none")
    return out


def add_simulation_output_args(p: argparse.ArgumentParser, *, reps: int) -> None:
    """``--reps`` (simulated pairs per cell), ``--seed``, ``--out`` and ``--json``: the options every calibration
    script of the per-window verdicts shares (``when_calibration.py``, ``across_calibration.py``).

    >>> p = argparse.ArgumentParser(); add_simulation_output_args(p, reps=7)
    >>> a = p.parse_args([]); (a.reps, a.seed, a.out, a.json)
    (7, 0, None, False)
    """
    p.add_argument("--reps", type=int, default=reps, help=f"simulated pairs per cell (default {reps})")
    p.add_argument("--seed", type=int, default=0, help="seed of every draw (default 0)")
    p.add_argument("--out", metavar="FILE", help="also write the tables as Markdown")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


def parse_drift(text: str) -> list[tuple[float | None, float]]:
    """``"none,40:4"`` -> ``[(None, 0.0), (40.0, 4.0)]`` (regime days : drift ratio)."""
    out: list[tuple[float | None, float]] = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        if item.lower() == "none":
            out.append((None, 0.0))
            continue
        try:
            days, ratio = (float(x) for x in item.split(":"))
        except ValueError:
            days = ratio = math.nan
        if not (days > 1 and ratio >= 0 and math.isfinite(days) and math.isfinite(ratio)):
            raise UsageError(f"--drift: expected 'none' or REGIME_DAYS:DRIFT_RATIO items such as 40:4 (days > 1, "
                             f"ratio >= 0), found {item!r}")
        out.append((days, ratio))
    return out or [(None, 0.0)]


def load_model(path: str) -> PanelModel:
    import yaml

    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{file}: no such file (--model expects a YAML mapping of PanelModel fields)")
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise UsageError(f"{file}{line}: invalid YAML: {getattr(exc, 'problem', exc)}") from exc
    if not isinstance(data, dict):
        raise UsageError(f"{file}: expected a mapping of PanelModel fields, found {type(data).__name__}")
    try:
        return PanelModel.from_dict(data, where=str(file))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{file}: {exc}") from exc


def model_of_args(args: Any) -> tuple[PanelModel, str]:
    """The model a replay bench simulates from (``--model FILE``, ``--from-store DIR`` with ``--metric``, else
    ``--preset``) and the words that name its source; a bad choice is a :class:`UsageError`."""
    if args.model:
        return load_model(args.model), args.model
    if args.from_store:
        model = model_from_store(args.from_store, metric=args.metric)[0]
        return model, f"store {args.from_store} ({args.metric}: {model})"
    if args.preset not in PRESETS:
        raise UsageError(f"--preset: expected one of {', '.join(sorted(PRESETS))}, found {args.preset!r}")
    return PRESETS[args.preset], f"preset {args.preset}"


def store_panels(store: str, metric: str, pair: list[str] | None) -> tuple[dict[str, Any], str, int, dict]:
    """The store's LossPanel per pipeline for ``metric`` (the analysis layer's), the orientation, the window."""
    from rolling_calib.analysis.scoring import score_store
    from rolling_calib.analysis.verdicts import loss_panel
    from rolling_calib.core.metric_table import METRIC_TABLE
    from rolling_calib.execution import store as st

    scores = score_store(store, pipelines=pair, progress=sys.stderr.isatty())
    days = scores.days
    panels = {name: p for name in scores.pipelines if (p := loss_panel(days, name, metric)) is not None}
    if len(panels) < 1:
        raise UsageError(f"{store}: no pipeline has days of metric {metric!r}")
    step = st.Store.open(store).manifest.rolling.get("step_months")
    per_month = days["date"].nunique() / max(days["period"].nunique(), 1)
    window = max(int(round((step or 1) * per_month)), 1)
    info = {"step_months": step, "days_per_month": per_month}
    return panels, METRIC_TABLE[metric].orientation, window, info


def model_from_store(store: str, *, metric: str = "ql", pair: list[str] | None = None,
                     window_days: int | None = None) -> tuple[PanelModel, dict[str, Any], str, dict[str, Any]]:
    """The :class:`PanelModel` of a store's pair (its first two pipelines unless ``pair``), by the method of moments.

    Returns the model, the store's panels, the metric's orientation and a description of the source (store, metric,
    pair, window, seeds and days), for every bench that simulates from a store.
    """
    if not Path(store).is_dir():
        raise UsageError(f"{store}: no such directory (--from-store expects a result store)")
    panels, orientation, window, info = store_panels(store, metric, pair)
    names = pair or list(panels)[:2]
    if len(names) < 2 or any(n not in panels for n in names):
        raise UsageError(f"{store}: expected two pipelines with {metric} days, found {sorted(panels)}")
    window = window_days or window
    model = estimate_model(panels[names[0]], panels[names[1]], window_days=window)
    source = {"store": store, "metric": metric, "pair": names, "window_days": window, **info,
              "n_seeds": [panels[n].n_seeds for n in names], "n_days": [panels[n].n_times for n in names]}
    return model, panels, orientation, source


# --------------------------------------------------------------------------- tables
def _pct(value: float | None, se: float | None = None) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{100 * value:.1f}%" if se is None else f"{100 * value:.1f}% ±{100 * se:.1f}"


def cell_key(r: dict) -> tuple:
    return (r["n_seeds"], r["n_days"], r["target"], r["drift"])


def method_table(rows: list[dict], style: str) -> str:
    """Per cell, target and method: false decisions, coverage, power at 2 and 3 SE (with MC SE)."""
    by: dict[tuple, dict[float, dict]] = defaultdict(dict)
    for r in rows:
        by[(*cell_key(r), r["method"])][r["effect_in_se"]] = r
    out = []
    for (k, T, target, drift, method), eff in by.items():
        null = eff.get(0.0)
        out.append([k, T, target, drift, method,
                    _pct(null["decided"], null["decided_mc_se"]) if null else "n/a",
                    _pct(null["coverage"], null["coverage_mc_se"]) if null else "n/a",
                    *(_pct(eff[e]["power"], eff[e]["power_mc_se"]) if e in eff else "n/a" for e in (2.0, 3.0))])
    return format_table(out, ["seeds", "days", "target", "drift", "method", "false decisions", "coverage",
                              "power 2 SE", "power 3 SE"], style=style)


def summary(rows: list[dict]) -> list[dict[str, Any]]:
    """Per cell and target: does decide hold its level, and its power against the best valid method."""
    by: dict[tuple, dict[str, dict[float, dict]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        by[cell_key(r)][r["method"]][r["effect_in_se"]] = r
    out = []
    for key, methods in by.items():
        n_rep = next(iter(next(iter(methods.values())).values()))["n_rep"]
        limit = LEVEL + 2 * math.sqrt(LEVEL * (1 - LEVEL) / n_rep)
        valid = {m: e for m, e in methods.items() if 0.0 in e and e[0.0]["decided"] <= limit}
        row: dict[str, Any] = dict(zip(("n_seeds", "n_days", "target", "drift"), key))
        d = methods.get("decide", {})
        row["decide_false"] = d[0.0]["decided"] if 0.0 in d else None
        row["decide_holds_level"] = "decide" in valid
        row["valid_methods"] = sorted(valid)
        for e in (2.0, 3.0):
            best = max(((m, v[e]["power"]) for m, v in valid.items() if e in v), key=lambda x: x[1], default=None)
            mine = d[e]["power"] if e in d else None
            row[f"best_{e:g}se"] = best
            ratio = (mine / best[1]) if (best and mine is not None and best[1] > 0) else None
            row[f"ratio_{e:g}se"] = ratio
            # delta method, the two powers taken as independent (they share replicates: this errs wide)
            row[f"ratio_{e:g}se_mc_se"] = None if ratio is None or mine == 0 else ratio * math.sqrt(
                (d[e]["power_mc_se"] / mine) ** 2 + (methods[best[0]][e]["power_mc_se"] / best[1]) ** 2)
        row["ok"] = bool(row["decide_holds_level"] and all(
            row[f"ratio_{e:g}se"] is None or row[f"ratio_{e:g}se"] >= 0.9 - 1e-12 for e in (2.0, 3.0)))
        row["limit"] = limit
        out.append(row)
    return out


def summary_table(rows: list[dict], style: str) -> str:
    out = []
    for s in summary(rows):
        best = [f"{b[0]} {_pct(b[1])}" if b else "n/a" for b in (s["best_2se"], s["best_3se"])]
        ratios = [f"{s[f'ratio_{e}se']:.2f} ±{s[f'ratio_{e}se_mc_se']:.2f}" if s[f"ratio_{e}se"] is not None
                  and s[f"ratio_{e}se_mc_se"] is not None else sig(s[f"ratio_{e}se"], 3) for e in (2, 3)]
        out.append([s["n_seeds"], s["n_days"], s["target"], s["drift"], _pct(s["decide_false"]),
                    "yes" if s["decide_holds_level"] else "NO", best[0], ratios[0], best[1], ratios[1],
                    "pass" if s["ok"] else "FAIL"])
    return format_table(out, ["seeds", "days", "target", "drift", "decide false", "level held",
                              "best valid @2SE", "decide/best @2SE", "best valid @3SE", "decide/best @3SE", "done-when"],
                        style=style)


def aa_table(results: dict[str, dict[str, Any]], style: str) -> str:
    out = []
    for name, per_target in results.items():
        for target, r in per_target.items():
            out.append([name, target, r["seeds_per_half"], r["n_splits"],
                        *(_pct(r["decided"][m], r["mc_se"][m]) for m in ("decide", "welch_t", "dm"))])
    return format_table(out, ["pipeline", "target", "seeds per half", "splits", "decide", "Welch t", "DM"],
                        style=style)


def seeds_needed_table(results: dict[str, dict[str, Any]], style: str) -> str:
    out = []
    for target, r in results.items():
        for b in r["bins"]:
            out.append([target, f"[{b['low']:.1f}, {b['high']:.1f})", b["n"], _pct(b["stated"]), _pct(b["assurance"]),
                        _pct(b["observed"], b["observed_mc_se"]), _pct(b["observed_any"])])
        out.append([target, "all named", r["n_named"], _pct(r["stated_mean"]), _pct(r["assurance_mean"]),
                    _pct(r["observed_share"], r["observed_share_mc_se"]), ""])
        out.append([target, "no number of seeds", r["n_none"], "", "",
                    f"{_pct(r['none_decided'], r['none_decided_mc_se'])} by {r['none_check_seeds']} seeds", ""])
        out.append([target, f"more than {r['max_seeds']}", r["n_beyond"], "", "", "", ""])
        out.append([target, "pilot already decided", r["decided_pilots"], "", "", "", ""])
    return format_table(out, ["target", "stated probability", "pilots", "mean stated", "mean assurance",
                              "observed (right way)", "observed (any way)"], style=style)


# --------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="verdict_calibration.py",
        description="Measure how far the verdict (better / worse / undetermined) can be trusted on data like yours: "
                    "simulate pairs from a model of your store's variance components and count false decisions, "
                    "coverage and power of the verdict beside a paired t test, Welch's t, Diebold-Mariano and a "
                    "seed bootstrap.",
        epilog="Examples: --preset time_dominated --reps 300 --out calib.md | "
               "--from-store demo_out/store --metric ql --aa --seeds-needed",
    )
    src = p.add_argument_group("where the model comes from (one of)")
    one = src.add_mutually_exclusive_group(required=True)
    one.add_argument("--from-store", metavar="DIR", help="estimate the model from a result store (read only)")
    one.add_argument("--model", metavar="FILE", help="a YAML mapping of PanelModel fields (seed_sd, noise_sd, ...)")
    one.add_argument("--preset", choices=sorted(PRESETS), help="a hand-built model (see the script's docstring)")
    src.add_argument("--metric", default="ql", choices=("ql", "cql", "ic", "rank_ic"),
                     help="with --from-store: the metric whose panels are modelled (default: ql)")
    src.add_argument("--pair", nargs=2, metavar=("A", "B"),
                     help="with --from-store: the two pipelines (default: the store's first two)")
    src.add_argument("--window-days", type=int, metavar="N",
                     help="with --from-store: the refit window in days (default: the store's step_months x its "
                          "trading days per month)")
    sim = p.add_argument_group("the simulation")
    sim.add_argument("--cells", default=DEFAULT_CELLS, metavar="KxT,...",
                     help=f"seeds per pipeline x days (default: {DEFAULT_CELLS})")
    sim.add_argument("--drift", default=DEFAULT_DRIFT, metavar="SPEC,...",
                     help="drift variants of every cell: 'none' or REGIME_DAYS:DRIFT_RATIO (the regimes' long-run "
                          f"variance over the daily interaction's variance); default: {DEFAULT_DRIFT}")
    sim.add_argument("--targets", default=",".join(TARGETS), metavar="T,...",
                     help="future (over seeds and the market's future), period (over seeds, on these days); default: both")
    sim.add_argument("--reps", type=int, default=300, metavar="N",
                     help="replicates per cell (default: 300; MC SE of a 5%% rate: 1.3 points)")
    sim.add_argument("--seed", type=int, default=0, help="seed of every random draw (default: 0)")
    sim.add_argument("--confidence", type=float, default=0.95, help="confidence of every interval (default: 0.95)")
    chk = p.add_argument_group("further checks")
    chk.add_argument("--aa", action="store_true", help="A/A splits of each of the store's pipelines (with --from-store)")
    chk.add_argument("--aa-splits", type=int, default=200, metavar="N", help="random splits per pipeline (default: 200)")
    chk.add_argument("--seeds-needed", action="store_true",
                     help="check seeds_needed: pilots (5 seeds, a true difference of 1 SE) followed up with the seeds "
                          "the verdict names, on the same days; --reps pilots per target")
    chk.add_argument("--seeds-needed-pilot", type=int, default=5, metavar="K",
                     help="seeds per pipeline of each pilot (default: 5)")
    chk.add_argument("--seeds-needed-effect", type=float, default=1.0, metavar="SE",
                     help="the true difference, in standard errors of the pilot's estimate (default: 1)")
    chk.add_argument("--seeds-needed-days", type=int, metavar="T",
                     help="days of the seeds-needed check (default: the store's days with --from-store, else 125)")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print everything as JSON instead of tables")
    out.add_argument("--out", metavar="FILE.md", help="also write the tables as Markdown to this file")
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    out.add_argument("--skip-calibration", action="store_true", help="only the further checks (--aa, --seeds-needed)")
    return p


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tqdm import tqdm

    def bar(desc: str):
        if args.no_progress or args.json:
            return None
        return lambda it: tqdm(it, desc=desc, file=sys.stderr, leave=False)

    if args.reps < 2:
        raise UsageError(f"--reps: expected an integer >= 2, found {args.reps}")
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    bad = [t for t in targets if t not in TARGETS]
    if bad or not targets:
        raise UsageError(f"--targets: expected future and/or period, found {args.targets!r}")
    cells = parse_cells(args.cells)
    drifts = parse_drift(args.drift)
    result: dict[str, Any] = {"settings": {k: v for k, v in vars(args).items()}}
    panels: dict[str, Any] = {}
    orientation = "lower"
    if args.from_store:
        if not Path(args.from_store).is_dir():
            raise UsageError(f"{args.from_store}: no such directory (--from-store expects a result store)")
        model, panels, orientation, source = model_from_store(args.from_store, metric=args.metric, pair=args.pair,
                                                              window_days=args.window_days)
        result["source"] = source
    elif args.model:
        model = load_model(args.model)
        result["source"] = {"model": args.model}
    else:
        model = PRESETS[args.preset]
        result["source"] = {"preset": args.preset}
    result["model"] = model.to_dict()
    if not args.skip_calibration:
        cell_objs = [Cell(k, T, d, r) for d, r in drifts for k, T in cells]
        t0 = time.perf_counter()
        result["rows"] = calibrate(model, cells=cell_objs, n_rep=args.reps, seed=args.seed, targets=targets,
                                   confidence=args.confidence, progress=bar("cells"))
        result["summary"] = summary(result["rows"])
        result["seconds"] = time.perf_counter() - t0
    if args.aa:
        if not panels:
            raise UsageError("--aa: needs --from-store (A/A splits are of a real store's pipelines)")
        result["aa"] = {name: {t: aa_splits(p, n_splits=args.aa_splits, seed=args.seed,
                                            question=Question(target=t, confidence=args.confidence),
                                            orientation=orientation).to_dict() for t in targets}
                        for name, p in panels.items() if p.n_seeds >= 4}
    if args.seeds_needed:
        days = args.seeds_needed_days or (min(result["source"]["n_days"]) if panels else 125)
        if days < 4:
            raise UsageError(f"--seeds-needed-days: expected an integer >= 4, found {days}")
        if args.seeds_needed_pilot < 2 or not math.isfinite(args.seeds_needed_effect):
            raise UsageError(f"--seeds-needed-pilot: expected an integer >= 2 and a finite --seeds-needed-effect, "
                             f"found {args.seeds_needed_pilot} and {args.seeds_needed_effect}")
        result["seeds_needed"] = {t: check_seeds_needed(model, pilot=args.seeds_needed_pilot,
                                                        effect_in_se=args.seeds_needed_effect, n_rep=args.reps,
                                                        seed=args.seed,
                                                        question=Question(target=t, confidence=args.confidence),
                                                        n_days=days,
                                                        progress=bar(f"seeds needed ({t})")).to_dict()
                                  for t in targets}
    return result


def render(result: dict[str, Any], style: str) -> str:
    parts = []
    src = result["source"]
    model = ", ".join(f"{k}={sig(v, 3) if isinstance(v, float) else v}" for k, v in result["model"].items())
    parts.append(f"Model ({', '.join(f'{k}={v}' for k, v in src.items())}): {model}")
    if "rows" in result:
        n_rep = result["rows"][0]["n_rep"] if result["rows"] else 0
        parts.append(f"Calibration: {n_rep} replicates per cell ({result['seconds']:.0f} s); ± is the Monte Carlo "
                     f"standard error; power = decided in the right direction at a true difference of 2 or 3 "
                     f"standard errors of the estimate under the target.")
        parts.append(method_table(result["rows"], style))
        parts.append("Per cell: does the verdict hold its level (false decisions <= 5% + 2 MC SE), and its power "
                     "over the best method that holds its level (done-when: >= 0.9; ± its MC SE by the delta method; pass/FAIL "
                     "on the point estimates).")
        parts.append(summary_table(result["rows"], style))
    if "aa" in result:
        parts.append("A/A splits: one pipeline's seeds split at random into two halves, decided against each "
                     "other (share decided; at most 5% expected).")
        parts.append(aa_table(result["aa"], style))
    if "seeds_needed" in result:
        sn = next(iter(result["seeds_needed"].values()))
        parts.append(f"Seeds needed: {sn['n_rep']} pilots of {sn['pilot']} seeds on {sn['n_days']} days at a true "
                     f"difference of {sn['effect_in_se']:g} SE; the follow-up with the named number of seeds per "
                     "pipeline on the same days (the pilot's seeds plus new ones). Done-when: the stated probability "
                     "within 10 points of the observed share; 'no number of seeds' never where "
                     f"{sn['none_check_seeds']} seeds decide 90%.")
        parts.append(seeds_needed_table(result["seeds_needed"], style))
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = run(args)
    except UsageError as exc:
        print(f"verdict_calibration.py: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=1, default=lambda o: None if isinstance(o, float) and not math.isfinite(o)
                         else str(o)))
    else:
        print(render(result, "text"))
    if args.out:
        Path(args.out).write_text(render(result, "markdown"), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
