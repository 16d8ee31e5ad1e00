"""``rolling-calib diagnose --store DIR``: can calibration help on these runs? Seed-variance diagnostics per pipeline."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from rolling_calib.cli.errors import command_errors
from rolling_calib.cli.options import (
    add_bootstrap_arguments,
    add_calibration_arguments,
    add_output_arguments,
    add_question_arguments,
    add_store_argument,
    question_from_args,
    resampling_from_args,
    score_with_options,
    show_progress,
)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.+" else "_" for c in name)


def _write_figures(diagnosis, directory: Path) -> list[Path]:
    """One offsets figure per pipeline, one paired-differences figure per pair."""
    from rolling_calib.reporting.figures import plot_paired_differences, plot_seed_offsets, save_figure

    written = []
    for p in diagnosis.pipelines:
        written.append(save_figure(plot_seed_offsets(p), directory / f"offsets_{_slug(p.pipeline)}.png"))
    for a, b in diagnosis.pairs:
        written.append(save_figure(plot_paired_differences(diagnosis, a, b),
                                   directory / f"paired_{_slug(a)}_vs_{_slug(b)}.png"))
    return written


def _write_error(exc: OSError, args: argparse.Namespace) -> str | None:
    """--figures under a file (a full disk or a read-only directory: the atomic write names the file itself);
    ``None`` for an error that is not about the figures (it propagates)."""
    if args.figures is None or (exc.filename and not Path(exc.filename).is_relative_to(Path(args.figures))):
        return None
    return f"cannot write figures to {args.figures}: {exc}"


@command_errors("diagnose", write_error=_write_error)
def handle(args: argparse.Namespace) -> int:
    from rolling_calib.analysis.diagnostics import diagnose_store

    with contextlib.redirect_stdout(sys.stderr):  # library chatter must not corrupt --json
        scores = score_with_options(args, progress=show_progress(args))  # the rule and label options as compare
        diagnosis = diagnose_store(args.store, pipelines=args.pipelines, scores=scores,
                                   progress=show_progress(args), question=question_from_args(args),
                                   resampling=resampling_from_args(args))
    written = _write_figures(diagnosis, Path(args.figures)) if args.figures is not None else []
    if args.json:
        out = diagnosis.to_dict()
        if args.figures is not None:
            out["figures"] = [str(p) for p in written]
        print(json.dumps(out, indent=2))
    else:
        print(diagnosis.format(), end="")
        if written:
            print(f"Figures: {', '.join(str(p) for p in written)}")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "diagnose",
        help="can calibration help on these runs? split the seed variance into bias and spread",
        description=(
            "Per pipeline: split the seed variance of QL over periods 2..K into a bias part (squared "
            "per-period mean residual), a spread part (residual variance around it) and their covariance; "
            "the seed std the best per-period bias correction would leave beside those of QL and CQL; "
            "the seed spread of the mean prediction beside the predictions' scale; how well each seed's "
            "offset persists from one period to the next inside a training window and across a refit; "
            "and a one-line verdict: how much of the seed std a bias correction can remove, and how much "
            "CQL removed."
        ),
        epilog="Example: rolling-calib diagnose --store runs/demo --json",
    )
    add_store_argument(parser, positional_alias=True)
    add_calibration_arguments(parser)
    add_question_arguments(parser)
    add_bootstrap_arguments(parser)
    parser.add_argument("--figures", metavar="DIR", default=None,
                        help="also write PNG figures to DIR: each pipeline's offsets per seed over time "
                             "(refits marked) and each pair's per-seed differences")
    add_output_arguments(parser, json_prints="the diagnosis (and the figures written)")
    parser.set_defaults(func=handle)
