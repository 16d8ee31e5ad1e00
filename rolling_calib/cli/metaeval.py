"""``rolling-calib metaeval --store DIR``: which metric variant ranks the store's pipelines like the ground truth."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from rolling_calib.cli.errors import command_errors
from rolling_calib.cli.options import (
    add_bootstrap_arguments,
    add_calibration_arguments,
    add_output_arguments,
    add_question_arguments,
    add_store_argument,
    calibration_from_args,
    checked,
    open_store,
    question_from_args,
    resampling_from_args,
    show_progress,
)
from rolling_calib.core.calibration import Calibration
from rolling_calib.core.validation import SEED, SPLITS


@command_errors("metaeval")
def handle(args: argparse.Namespace) -> int:
    from rolling_calib.analysis.metaeval import metaeval_store

    with contextlib.redirect_stdout(sys.stderr):  # library chatter must not corrupt --json
        store = open_store(args.store)
        base = calibration_from_args(args, Calibration())   # the variants change the paper's rule
        result = metaeval_store(store, calibration=base, label=args.label, pipelines=args.pipelines,
                                variants=args.variants, question=question_from_args(args),
                                resampling=resampling_from_args(args),
                                n_splits=args.splits, split_seed=args.split_seed,
                                progress=show_progress(args))
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.format())
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "metaeval",
        help="meta-evaluate metric variants on a store: pairwise accuracy and split-seed agreement",
        description=(
            "Score every run with each metric variant (QL, QL2..K, CQL pooled / per instrument, period month / "
            "week / 20 trading days, bias source previous / validation when the store kept validation "
            "predictions), then per compared pair (the store's compare pairs, else all pairs) the pairwise "
            "accuracy of each variant with a bootstrap interval, the direction set by the mean QL over all "
            "seeds, and the average over pairs; and a split-seed check: rank the pipelines by each variant on "
            "half of the seeds and by QL on the other half (Kendall tau, fraction of pairs ordered alike), "
            "averaged over random half-splits."
        ),
        epilog="Example: rolling-calib metaeval --store runs/demo --json",
    )
    add_store_argument(parser, positional_alias=True)
    add_calibration_arguments(parser, paper_defaults=True)   # the base rule the CQL variants change
    parser.add_argument("--variants", nargs="+", default=None, metavar="NAME",
                        help="metric variants (default: all: ql ql_scored cql cql_per_instrument cql_week cql_20d "
                             "cql_validation cql_validation_per_instrument)")
    add_question_arguments(parser, only=("confidence",))   # no verdict here: no --target
    add_bootstrap_arguments(parser)
    parser.add_argument("--splits", type=checked(SPLITS, int), default=200, metavar="N",
                        help="random half-splits of the seeds (default 200)")
    parser.add_argument("--split-seed", type=checked(SEED, int), default=0, metavar="SEED",
                        help="seed of the half-splits, recorded in the output (default 0)")
    add_output_arguments(parser, json_prints="the meta-evaluation (what the tables show)")
    parser.set_defaults(func=handle)
