"""``rolling-calib demo``: the whole method on the embedded synthetic market, in minutes."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path


def handle(args: argparse.Namespace) -> int:
    from rolling_calib.config.experiment import ConfigError
    from rolling_calib.experiment.demo import DEMO_CONFIG, run_demo

    try:
        with contextlib.redirect_stdout(sys.stderr):  # library chatter must not corrupt --json
            result = run_demo(args.out, workers=args.workers, seeds=args.seeds, config=args.config or DEMO_CONFIG,
                              n_boot=args.n_boot, progress=not args.json, track=not args.no_tracking)
    except (ConfigError, ValueError) as exc:
        print(f"rolling-calib demo: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        data = result.comparison.to_dict()
        data.update(store=str(result.store), report={k: str(v) for k, v in result.report.items()},
                    seconds=round(result.seconds, 1), tracking_uri=result.tracking_uri,
                    tracking_message=result.tracking_message, diagnosis=result.diagnosis.to_dict())
        print(json.dumps(data, indent=2))
        return 0
    print()
    print(result.comparison.format())
    print()
    print("Can calibration help here? (rolling-calib diagnose STORE for the full seed-variance split)")
    for diagnosis in result.diagnosis.pipelines:
        print(f"  {diagnosis.pipeline}: {diagnosis.verdict}")
    print()
    print(f"data:   {result.data_dir}{' (generated)' if result.data_built else ' (reused)'}")
    print(f"store:  {result.store}")
    print(f"report: {result.report['html']}  (Markdown: {result.report['markdown']})")
    if result.tracking_uri is not None:
        print(f"MLflow: {result.tracking_uri} (browse: mlflow ui --backend-store-uri {result.tracking_uri})")
    if result.tracking_message:  # a repaired tracking database, or why tracking failed
        print(result.tracking_message)
    print(f"wall time: {result.seconds:.1f} s")
    return 0


def register(subparsers) -> None:
    from rolling_calib.config.workflows import workflows_dir

    try:
        workflows = workflows_dir()
    except FileNotFoundError:  # an install without its data: `demo` then reports it; the other commands work
        workflows = Path("workflows")
    parser = subparsers.add_parser(
        "demo",
        help="run the whole method on a synthetic market in a few minutes (start here)",
        description=(
            "Generate the synthetic 25-stock minute market if absent, train a reduced but real rolling "
            "schedule (2 pipelines x SEEDS seeds x 2 windows, 6 evaluation months, fine-tuning between "
            "windows) on a local process pool, print the QL-vs-CQL comparison and write the HTML report. "
            "Re-running reuses the data and completed units."
        ),
        epilog=(f"The experiment files (the repository's workflows/) are installed in {workflows}. "
                f"Scale up: rolling-calib run {workflows / 'method33.yaml'} --store runs/m33 --workers 8 "
                "(see README)."),
    )
    parser.add_argument("--out", default="demo_out", metavar="DIR", help="output directory (default demo_out)")
    parser.add_argument("--workers", type=int, default=2, metavar="K", help="worker processes (default 2)")
    parser.add_argument("--seeds", type=int, default=None, metavar="N",
                        help="seeds per pipeline (default: the file's rolling.seeds, 10 in the demo file, "
                             "as in docs/method.md §3.3)")
    parser.add_argument("--config", default=None, metavar="YAML",
                        help=f"experiment file (default {workflows / 'demo.yaml'})")
    parser.add_argument("--n-boot", type=int, default=2000, metavar="N", help="bootstrap resamples (default 2000)")
    parser.add_argument("--no-tracking", action="store_true", help="do not log the store to MLflow")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON (no progress bars)")
    parser.set_defaults(func=handle)
