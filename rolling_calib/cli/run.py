"""``rolling-calib run CONFIG --store DIR``: the grid pipelines x seeds x windows into a result store."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys


def parse_set(items: list[str] | None) -> dict:
    """``KEY=VALUE`` pairs (VALUE read as YAML: numbers, booleans, lists) -> overrides."""
    import yaml

    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set: expected KEY=VALUE with a dotted KEY, found {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def make_executor(args: argparse.Namespace):
    """The executor named by ``--executor`` (local process pool or Ray)."""
    if args.executor == "local":
        from rolling_calib.execution.executors import LocalExecutor

        return LocalExecutor(workers=args.workers)
    try:
        from rolling_calib.execution.ray_executor import RayExecutor
    except ImportError as exc:
        raise ValueError(f"--executor ray: the Ray executor is not available: {exc}") from exc
    return RayExecutor(args.address, max_retries=args.max_retries, num_cpus=args.workers if args.address is None else None,
                       threads_per_unit=args.threads, log_to_driver=not args.json)


def handle(args: argparse.Namespace) -> int:
    """Library chatter (Qlib prints on import) goes to stderr; stdout carries only the result."""
    with contextlib.redirect_stdout(sys.stderr):
        code, result = _run(args)
    if result is not None:
        print(json.dumps(result, indent=2) if args.json else result)
    return code


def _run(args: argparse.Namespace) -> tuple[int, object]:
    from rolling_calib.config.experiment import ConfigError, load_experiment
    from rolling_calib.execution.executors import UnitFailedError
    from rolling_calib.execution.runner import plan_run, run_plan

    try:
        if args.workers < 1:
            raise ValueError(f"--workers: expected >= 1, found {args.workers}")
        overrides = parse_set(args.set)
        config = load_experiment(args.config, overrides=overrides)
        if args.threads < 1:
            raise ValueError(f"--threads: expected >= 1, found {args.threads}")
        plan = plan_run(config, store=args.store, pipelines=args.pipelines, seeds=args.seeds, n_threads=args.threads)
        executor = make_executor(args)
    except (ConfigError, ValueError) as exc:
        print(f"rolling-calib run: error: {exc}", file=sys.stderr)
        return 2, None
    n_units = len(plan.keys())
    if not args.json:
        print(
            f"{len(plan.pipelines)} pipeline(s) x {len(plan.seeds)} seed(s) x {len(plan.windows)} window(s) "
            f"= {n_units} units -> {plan.store} ({args.executor}, {args.workers} worker(s), {args.threads} thread(s) each)",
            file=sys.stderr,
        )
    try:
        summary = run_plan(plan, executor=executor, progress=not args.json)
    except UnitFailedError as exc:
        print(f"rolling-calib run: error: {exc} (cause: {exc.__cause__!r}); completed units are kept, re-run to resume",
              file=sys.stderr)
        return 1, None
    result = summary.to_dict()
    if not args.no_tracking:
        from rolling_calib.tracking.mlflow_log import default_tracking_uri, log_store

        uri = args.tracking_uri or default_tracking_uri(plan.store)
        log_store(plan.store, tracking_uri=uri)
        result["tracking_uri"] = uri
    if args.json:
        return 0, result
    text = (
        f"done: {summary.ran} unit(s) ran, {summary.skipped} already complete, {summary.stale_moved} stale moved aside, "
        f"{result['rows_dropped_unlabelled']} prediction(s) without a label dropped, {summary.seconds:.1f} s.\n"
        f"Next: rolling-calib compare {plan.store}"
    )
    if "tracking_uri" in result:
        text += f"\nMLflow: {result['tracking_uri']}"
    return 0, text


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
            "configuration changed to STORE/stale/ before recomputing them."
        ),
        epilog=(
            "Examples:\n"
            "  rolling-calib run workflows/demo.yaml --store demo_out/store --workers 2\n"
            "  rolling-calib run workflows/method33.yaml --store runs/m33 --pipelines wd0 wd5e-6 --seeds 10\n"
            "  rolling-calib run workflows/base.yaml --store runs/b --set qlib_init.provider_uri=/data/us25"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", metavar="CONFIG", help="experiment YAML (e.g. workflows/demo.yaml)")
    parser.add_argument("--store", required=True, metavar="DIR", help="result store directory (created if absent)")
    parser.add_argument("--pipelines", nargs="+", metavar="NAME", help="run only these pipelines (default: all)")
    parser.add_argument("--seeds", type=int, metavar="N", help="seeds 0..N-1 (default: rolling.seeds of CONFIG)")
    parser.add_argument("--workers", type=int, default=1, metavar="K", help="parallel units (processes or Ray CPUs; default 1)")
    parser.add_argument("--threads", type=int, default=1, metavar="T",
                        help="torch threads per unit (default 1; scale with --workers instead). Part of the "
                        "config hash: a different count changes the last digits, so units are recomputed")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="override a config value by dotted key, e.g. rolling.seeds=3 (repeatable)")
    parser.add_argument("--executor", choices=("local", "ray"), default="local", help="where units run (default local)")
    parser.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray runtime)")
    parser.add_argument("--max-retries", type=int, default=2, metavar="N", help="Ray: retries of a failed unit (default 2)")
    tracking = parser.add_mutually_exclusive_group()
    tracking.add_argument("--tracking-uri", default=None, metavar="URI",
                          help="MLflow tracking URI (default sqlite:///STORE/mlflow.db)")
    tracking.add_argument("--no-tracking", action="store_true", help="do not log the store to MLflow")
    parser.add_argument("--json", action="store_true", help="print the run summary as JSON (no progress bar)")
    parser.set_defaults(func=handle)
