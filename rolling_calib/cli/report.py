"""``rolling-calib report --store DIR``: self-contained HTML (and Markdown) report with tables and plots."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from rolling_calib.cli.errors import command_errors
from rolling_calib.cli.options import (
    add_out_argument,
    add_output_arguments,
    add_scoring_arguments,
    add_store_argument,
    score_and_compare,
)
from rolling_calib.core.store_layout import StoreLayout


def _diagnosis(store: str, scores, comparison):
    """The seed-variance verdicts, when every diagnosed pipeline has two runs or more (else ``None``: no spread to split)."""
    from rolling_calib.analysis.diagnostics import diagnose_store

    if scores.runs.groupby("pipeline")["seed"].nunique().max() < 2:
        return None
    return diagnose_store(store, scores=scores, question=comparison.question, resampling=comparison.resampling)


def _out(args: argparse.Namespace) -> Path:
    return Path(args.out) if args.out else StoreLayout(Path(args.store)).report


def _write_error(exc: OSError, args: argparse.Namespace) -> str:
    """A read-only store, --out under a file (a full disk: the atomic write names the file itself)."""
    return (f"cannot write the report to {_out(args)}: {exc.strerror or exc} ({exc.filename or _out(args)}); "
            "pass --out DIR to write it elsewhere")


@command_errors("report", write_error=_write_error)
def handle(args: argparse.Namespace) -> int:
    from rolling_calib.reporting.document import write_report

    with contextlib.redirect_stdout(sys.stderr):  # library chatter must not corrupt --json
        scores, comparison = score_and_compare(args)
        paths = write_report(scores, comparison, _out(args), diagnosis=_diagnosis(args.store, scores, comparison))
    if args.json:
        print(json.dumps({k: str(v) for k, v in paths.items()}, indent=2))
    else:
        print(f"report: {paths['html']}\nmarkdown: {paths['markdown']}")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        help="write an HTML + Markdown report of a result store",
        description=(
            "Write report.html (self-contained: plots embedded) and report.md (with PNG files) for a "
            "result store, with CSV tables beside them. It opens with the verdict per pair and metric, then "
            "the warnings, whether calibration can help, IC / Rank IC, the backtest's annualized excess return, "
            "information ratio and max drawdown over seeds (where the workflow has a backtest), QL and CQL per "
            "pipeline, the pairwise accuracies, and the figures: probability of improvement, the cumulative "
            "excess-return curves, paired per-seed differences, the loss differential per period and the seed "
            "offsets (refits marked), the seed spread and the bias."
        ),
        epilog="Example: rolling-calib report --store runs/demo --out runs/demo/report",
    )
    add_store_argument(parser, positional_alias=True)
    add_out_argument(parser, what="report directory", default_words="STORE/report")
    add_scoring_arguments(parser)
    add_output_arguments(parser, json_prints="the paths of the written files")
    parser.set_defaults(func=handle)
