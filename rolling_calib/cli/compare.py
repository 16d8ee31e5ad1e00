"""``rolling-calib compare --store DIR``: QL vs CQL per pipeline and pairwise accuracies per pair."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from rolling_calib.cli.errors import command_errors
from rolling_calib.cli.options import add_output_arguments, add_scoring_arguments, add_store_argument, score_and_compare


@command_errors("compare")
def handle(args: argparse.Namespace) -> int:
    with contextlib.redirect_stdout(sys.stderr):  # library chatter must not corrupt --json
        _, comparison = score_and_compare(args)
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
        epilog="Example: rolling-calib compare --store runs/demo --pipelines wd0 wd1e-4 --json",
    )
    add_store_argument(parser, positional_alias=True)
    add_scoring_arguments(parser)
    add_output_arguments(parser, json_prints="the comparison (what the tables show)")
    parser.set_defaults(func=handle)
