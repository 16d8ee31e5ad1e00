"""``rolling-calib run CONFIG --store DIR``: the grid pipelines x seeds x windows into a result store."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from rolling_calib.cli.errors import command_errors
from rolling_calib.cli.options import (
    add_dry_run_argument,
    add_execution_arguments,
    add_output_arguments,
    add_overrides_argument,
    add_pipelines_argument,
    add_question_arguments,
    add_seeds_argument,
    add_store_argument,
    add_tracking_arguments,
    add_until_decided_arguments,
    compare_options,
    executor_options,
    overrides,
    show_progress,
    until_decided_from_args,
)


def _failure_line(exc, args: argparse.Namespace) -> str:
    """What ``run`` says when units failed: a store that takes no more writes in one line, else the failure and its cause."""
    from rolling_calib.execution.store import StoreWriteError

    if exc.failures and isinstance(exc.failures[0][1], StoreWriteError):   # the file, the free space and the fix
        key, first = exc.failures[0]
        return f"{first} (unit {key.slug()} not stored; {len(exc.completed)} unit(s) completed and kept in {args.store})"
    return (f"{exc} (cause: {exc.__cause__!r}); completed units are kept in {args.store}: fix the cause and re-run "
            "to resume")


@command_errors("run", unit_failure=_failure_line)
def handle(args: argparse.Namespace) -> int:
    """Library chatter (Qlib prints on import) goes to stderr; stdout carries only the result."""
    with contextlib.redirect_stdout(sys.stderr):
        result = _run(args)
    print(json.dumps(result, indent=2) if args.json else result)
    return 0


def _run(args: argparse.Namespace) -> dict | str:
    from rolling_calib.config import load_experiment
    from rolling_calib.execution.plan_summary import format_plan, skipped_records
    from rolling_calib.experiment.flow import RunOptions, plan_experiment, run_experiment

    executor = executor_options(args, quiet=args.json)
    config = load_experiment(args.config, overrides=overrides(args))
    options = RunOptions(store=args.store, pipelines=args.pipelines, seeds=args.seeds, executor=executor,
                         tracking_uri=args.tracking_uri, track=not args.no_tracking, score=False,
                         progress=show_progress(args), show_plan=not args.json,
                         until_decided=until_decided_from_args(args), compare=compare_options(args))
    if args.dry_run:   # the plan only: nothing trained, nothing written
        summary = plan_experiment(config, options)
        return summary.to_dict() if args.json else format_plan(summary) + "\n(dry run: nothing trained)"
    if not args.json:
        print(f"{args.config} -> {args.store} ({args.executor}, {executor.workers or 1} worker(s), "
              f"{args.threads} thread(s) each)", file=sys.stderr)
    outcome = run_experiment(config, options)
    summary = outcome.summary
    result = summary.to_dict()
    if options.until_decided is not None:
        from rolling_calib.analysis.sequential_path import read_path

        path = read_path(outcome.plan.store)
        result["sequential"] = path.to_dict() if path is not None else None
    skipped = skipped_records(outcome.plan.store, list(summary.results))   # why a workflow record did not run
    result["skipped_records"] = skipped
    if outcome.tracking_uri is not None:
        result["tracking_uri"] = outcome.tracking_uri
    if outcome.tracking_message:
        result["tracking_message"] = outcome.tracking_message
    if args.json:
        return result
    corrupt = (f"{len(summary.corrupt_moved)} corrupt moved to {outcome.plan.store / 'corrupt'}/ and recomputed, "
               if summary.corrupt_moved else "")
    bt = summary.backtests
    backtests = (f"{len(bt.ran)} backtest(s) over the joined windows ran ({bt.seconds:.1f} s), {bt.skipped} already "
                 f"complete, " if bt.ran or bt.skipped else "")
    text = (
        f"done: {summary.ran} unit(s) ran, {summary.skipped} already complete, {summary.stale_moved} stale moved aside, "
        f"{corrupt}{backtests}"
        f"{result['rows_dropped_unlabelled']} prediction(s) without a label dropped, {summary.seconds:.1f} s.\n"
        + "".join(f"{line}\n" for line in skipped) +
        f"Next: rolling-calib compare --store {outcome.plan.store}"
    )
    if result.get("sequential"):
        from rolling_calib.analysis.sequential_path import SequentialPath

        text += "\n" + SequentialPath.from_dict(result["sequential"]).format()
    if outcome.tracking_uri is not None:
        text += f"\nMLflow: {outcome.tracking_uri}"
    if outcome.tracking_message:  # a repaired tracking database, or why tracking failed
        text += f"\n{outcome.tracking_message}"
    return text


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "run",
        help="train the rolling grid (pipelines x seeds x windows) into a result store",
        description=(
            "Validate CONFIG (a Qlib workflow YAML with rolling:, pipelines: and compare: sections)\n"
            "before any training, then train and predict every (pipeline, seed, window) unit not yet\n"
            "in the store, on a local process pool or Ray. Each unit's predictions are written\n"
            "atomically to STORE/units/<pipeline>/seed<k>/w<NN>.parquet. Re-running skips completed\n"
            "units, resumes an interrupted run with the same numbers, and moves units whose\n"
            "configuration changed to STORE/stale/ before recomputing them. Once a seed's windows are\n"
            "complete, the workflow's backtest (its PortAnaRecord config) runs once on the seed's joined\n"
            "predictions over the schedule's test days (STORE/backtests/); a changed backtest setting\n"
            "re-runs the backtests only."
        ),
        epilog=(
            "Examples:\n"
            "  rolling-calib run workflows/demo.yaml --store demo_out/store --workers 2\n"
            "  rolling-calib run workflows/demo.yaml --store demo_out/store --dry-run   (the plan, nothing trained)\n"
            "  rolling-calib run workflows/method33.yaml --store runs/m33 --pipelines wd0 wd5e-6 --seeds 10\n"
            "  rolling-calib run workflows/base.yaml --store runs/b --set qlib_init.provider_uri=/data/us25\n"
            "  rolling-calib run workflows/base.yaml --store runs/g --device cuda --set rolling.stack_seeds=10\n"
            "      (a window's 10 seeds trained as one stack: for GPUs; slower than one at a time on CPU)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", metavar="CONFIG", help="experiment YAML (e.g. workflows/demo.yaml)")
    add_store_argument(parser)
    add_pipelines_argument(parser)
    add_seeds_argument(parser)
    add_overrides_argument(parser)
    add_execution_arguments(parser)
    add_dry_run_argument(parser)
    add_tracking_arguments(parser)
    add_until_decided_arguments(parser)
    add_question_arguments(parser)
    add_output_arguments(parser, json_prints="the run summary")
    parser.set_defaults(func=handle)
