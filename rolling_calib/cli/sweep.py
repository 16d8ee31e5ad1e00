"""``rolling-calib sweep``: run a grid of configurations x seeds x windows, then rank them.

Heavy libraries (Qlib, torch, Ray, MLflow, matplotlib) are imported inside the handler.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rolling_calib.cli.errors import command_errors
from rolling_calib.cli.options import (
    add_bootstrap_arguments,
    add_dry_run_argument,
    add_execution_arguments,
    add_out_argument,
    add_output_arguments,
    add_overrides_argument,
    add_question_arguments,
    add_seeds_argument,
    add_store_argument,
    add_tracking_arguments,
    add_until_decided_arguments,
    compare_options,
    executor_options,
    overrides,
    question_from_args,
    resampling_from_args,
    show_progress,
    until_decided_from_args,
)
from rolling_calib.core.jsonable import jsonable

DESCRIPTION = """\
Run every configuration of a grid (or the experiment's own pipelines when no --grid
is given) with the same seeds and rolling windows, through the same runner and
executors as 'rolling-calib run', then rank them.

Output: every configuration ranked by CQL and by QL with t-intervals of the mean;
the matrix of pairwise accuracies (P(a run of row beats a run of column), the
probability of improvement) with bootstrap intervals, as a table and a heatmap;
the pairs that are statistically indistinguishable (interval contains 0.5); the
seeds each metric needs to separate the top two; and the experiment's listed
compare pairs. Written to --out as sweep.md, sweep.json and pairwise_<metric>.png.

With --until-decided the seeds train look by look and the configurations race to a
best set (each against the best; --stops pairs: the pairs' rule instead): the output
starts with the race, one line a look (kept, eliminated by whom and by how much, pairs
settled and why, seeds spent of the grid's), and the ranking rests on the seeds the race
used; the race is in STORE/race.json, sweep.json and MLflow (on the comparison run:
params race.*, metrics per look, rc.race on each configuration's run).

Completed units are kept in --store (without it: runs/<CONFIG name without .yaml>-sweep):
an interrupted sweep resumes where it stopped with the same numbers."""

EPILOG = """\
grid keys:
  a short name (hidden_size) is looked up under task.model.kwargs, then
  task.dataset.kwargs, then task.dataset.kwargs.handler.kwargs; any other key
  must be a full dotted path under task (task.model.kwargs.lr). Values follow
  YAML scalar rules: 32 -> int, 5e-6 -> float, true -> bool, adam -> str.

examples:
  rolling-calib sweep workflows/demo.yaml --grid hidden_size=8,16 --grid weight_decay=0,5e-6 --seeds 3
  rolling-calib sweep workflows/paper/paper.yaml --executor ray --address auto \\
      --store /shared/runs/paper --set qlib_init.provider_uri=/shared/qlib_data/us25
  rolling-calib sweep workflows/paper/paper.yaml --device cuda --workers 4 --json
"""


def register(subparsers) -> None:
    """Add the ``sweep`` parser."""
    parser = subparsers.add_parser(
        "sweep",
        help="run a grid of configurations with many seeds and rank them (CQL and QL, pairwise matrix)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", type=Path, metavar="CONFIG", help="experiment YAML (Qlib workflow + rolling + pipelines)")
    add_store_argument(parser, required=False)   # default runs/<CONFIG stem>-sweep, said in the description
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                        help="values of one kwarg to sweep; repeat for more keys (Cartesian product)")
    add_seeds_argument(parser)
    add_overrides_argument(parser)
    add_out_argument(parser, what="report directory", default_words="STORE/sweep_report")
    add_execution_arguments(parser)
    add_dry_run_argument(parser)
    add_question_arguments(parser)
    add_bootstrap_arguments(parser)
    add_tracking_arguments(parser)
    add_until_decided_arguments(parser, race=True)
    add_output_arguments(parser, json_prints="the ranking, the matrices, the run and the written files instead of "
                                             "the tables")
    parser.set_defaults(func=handle)


def _store(args: argparse.Namespace) -> Path:
    return Path(args.store) if args.store else Path("runs") / f"{Path(args.config).stem}-sweep"


def _failure(exc: Exception, args: argparse.Namespace) -> str:
    return f"{exc}\ncompleted units are kept in {_store(args)}: fix the cause and re-run to resume"


@command_errors("sweep", unit_failure=_failure)
def handle(args: argparse.Namespace) -> int:
    """Run the sweep; returns the exit status.

    Everything the libraries print while working goes to stderr, so that stdout
    holds only the results (tables, or JSON with ``--json``).
    """
    import contextlib

    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        return _sweep(args, real_stdout)


def _sweep(args: argparse.Namespace, stdout) -> int:
    from rolling_calib.analysis.sweep import analyse_sweep, format_sweep
    from rolling_calib.config.grid import expand_grid, parse_grid, sweep_experiment
    from rolling_calib.config import load_experiment
    from rolling_calib.execution.plan_summary import format_plan
    from rolling_calib.experiment.flow import RunOptions, plan_experiment, run_experiment
    from rolling_calib.reporting.sweep_report import write_sweep_report

    executor = executor_options(args, quiet=args.json)
    config = load_experiment(args.config, overrides=overrides(args))
    pipelines = expand_grid(parse_grid(args.grid, config={"task": config.task})) if args.grid else None
    experiment = sweep_experiment(config, pipelines)
    store = _store(args)
    options = RunOptions(store=store, seeds=args.seeds, executor=executor, tracking_uri=args.tracking_uri,
                         track=not args.no_tracking, progress=show_progress(args), show_plan=not args.json,
                         until_decided=until_decided_from_args(args), compare=compare_options(args))
    print(f"sweep: {len(experiment.pipelines)} configurations -> {store}", file=sys.stderr)
    if args.dry_run:   # the plan only: nothing trained, nothing written
        summary = plan_experiment(experiment, options)
        text = json.dumps(jsonable(summary.to_dict()), indent=2) if args.json else \
            format_plan(summary) + "\n(dry run: nothing trained)"
        print(text, file=stdout)
        return 0
    outcome = run_experiment(experiment, options)
    plan, summary = outcome.plan, outcome.summary
    runs = outcome.scores.runs[outcome.scores.runs["seed"].isin(plan.seeds)]
    days = outcome.scores.days[outcome.scores.days["seed"].isin(plan.seeds)]
    if outcome.race is not None:   # the seeds the race read (seeds 0..n-1 of each), not others the store may hold
        used = outcome.race.race.seeds_used
        runs, days = (frame[frame["seed"] < frame["pipeline"].map(used).fillna(0)] for frame in (runs, days))
    result = analyse_sweep(runs, pairs=experiment.compare, question=question_from_args(args),
                           resampling=resampling_from_args(args), days=days, label=outcome.scores.label)
    if outcome.race is not None:
        result.race = outcome.race
        result.race_pairs = _listed_verdicts(runs, days, experiment.compare, metric=outcome.race.metric,
                                             label=outcome.scores.label, question=question_from_args(args))
    paths = write_sweep_report(result, Path(args.out) if args.out else plan.store / "sweep_report")
    tracking_uri = outcome.tracking_uri
    if args.json:
        payload = result.to_dict()
        payload["run"] = {"store": str(plan.store), "units_ran": summary.ran, "units_skipped": summary.skipped,
                          "seconds": round(summary.seconds, 3), "executor": args.executor}
        payload["files"] = {"json": str(paths["json"]), "markdown": str(paths["markdown"]),
                            "heatmaps": {m: str(p) for m, p in paths["heatmaps"].items()}}
        payload["tracking_uri"] = tracking_uri
        payload["tracking_message"] = outcome.tracking_message
        print(json.dumps(jsonable(payload), indent=2), file=stdout)
    else:
        print(format_sweep(result, style="text"), file=stdout)
        print(f"units: {summary.ran} ran, {summary.skipped} already in the store ({summary.seconds:.1f} s)", file=stdout)
        print(f"report: {paths['markdown']}, {paths['json']}, " + ", ".join(str(p) for p in paths["heatmaps"].values()),
              file=stdout)
        if tracking_uri is not None:
            print(f"MLflow: {tracking_uri} (browse: mlflow ui --backend-store-uri {tracking_uri})", file=stdout)
        if outcome.tracking_message:  # a repaired tracking database, or why tracking failed
            print(outcome.tracking_message, file=stdout)
    stdout.flush()
    return 0


def _listed_verdicts(runs, days, listed, *, metric: str, label, question) -> list[dict]:
    """The verdicts by ``metric`` of the experiment's ``compare`` pairs after a race, on the seeds the race read
    (better first, by mean; empty without pairs)."""
    from rolling_calib.analysis.verdicts import decide_pair
    from rolling_calib.core.metric_table import METRIC_TABLE

    spec = METRIC_TABLE[metric]
    means = runs.groupby("pipeline")[metric].mean() if metric in runs.columns else None
    out = []
    for a, b in listed:
        if means is not None and a in means and b in means and (means[b] < means[a]) == (spec.orientation == "lower"):
            a, b = b, a
        v = decide_pair(days, a, b, label=label, question=question, metrics=(metric,)).verdicts.get(metric)
        if v is None:
            continue
        full = v.to_dict()
        out.append({"a": a, "b": b, "metric": metric, "outcome": v.outcome, "winner": v.winner,
                    "difference": full["difference"], "ci_low": full["ci_low"], "ci_high": full["ci_high"],
                    "n_seeds": full["n_seeds"], "unit": spec.unit(label)})
    return out
