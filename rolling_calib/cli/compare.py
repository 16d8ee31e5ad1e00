"""``rolling-calib compare STORE``: QL vs CQL per pipeline and pairwise accuracies per pair."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys


def _period(text: str) -> str | int:
    """``month``, ``week``, ``quarter`` or a number of trading days."""
    if text in ("month", "week", "quarter"):
        return text
    try:
        days = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected month, week, quarter or a number of trading days, found {text!r}")
    if days < 1:
        raise argparse.ArgumentTypeError(f"expected a number of trading days >= 1, found {days}")
    return days


def add_scoring_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``compare`` and ``report``."""
    parser.add_argument("--pipelines", nargs="+", metavar="NAME", help="pipelines to include (default: all in the store)")
    parser.add_argument(
        "--period", type=_period, default=None, metavar="PERIOD",
        help="calibration period: month (METHOD 2.2), week, quarter or N trading days "
        "(default: the store's config, else month)",
    )
    parser.add_argument(
        "--bias", choices=("pooled", "per_instrument"), default=None,
        help="one bias per period for all instruments (pooled, the paper) or one per instrument "
        "(default: the store's config, else pooled)",
    )
    parser.add_argument("--n-boot", type=int, default=2000, metavar="N", help="bootstrap resamples for the intervals (default 2000)")
    parser.add_argument("--confidence", type=float, default=0.95, help="interval level (default 0.95)")
    parser.add_argument("--boot-seed", type=int, default=0, metavar="SEED", help="bootstrap seed, recorded in the output (default 0)")


def score_and_compare(args: argparse.Namespace):
    """Score the store and compare pipelines with the options of ``args``."""
    from rolling_calib.execution import store as st
    from rolling_calib.analysis.scoring import compare_store, score_store

    manifest = st.read_manifest(args.store)
    calibration = manifest.get("experiment", {}).get("rolling", {}).get("calibration", {})
    period = args.period or calibration.get("period", "month")
    bias = args.bias or calibration.get("bias", "pooled")
    scores = score_store(args.store, period=period, bias=bias, pipelines=args.pipelines, progress=not args.json)
    comparison = compare_store(scores, n_boot=args.n_boot, confidence=args.confidence, seed=args.boot_seed)
    return scores, comparison


def handle(args: argparse.Namespace) -> int:
    try:
        with contextlib.redirect_stdout(sys.stderr):  # library chatter must not corrupt --json
            _, comparison = score_and_compare(args)
    except ValueError as exc:
        print(f"rolling-calib compare: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(comparison.to_dict(), indent=2))
    else:
        print(comparison.format())
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare pipelines in a result store: QL vs calibrated QL, pairwise accuracy",
        description=(
            "Score every run (pipeline x seed) of a store with the plain quadratic loss (QL) and the "
            "monthly rolling calibrated quadratic loss (CQL), then print per pipeline the mean and std "
            "of both and the seed budget, and per pair the pairwise accuracy of QL and CQL with "
            "bootstrap intervals (direction decided by QL, the ground truth)."
        ),
        epilog="Example: rolling-calib compare runs/demo --pipelines wd0 wd1e-4 --json",
    )
    parser.add_argument("store", metavar="STORE", help="result store written by 'rolling-calib run'")
    add_scoring_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=handle)
