"""``rolling-calib compare --store DIR``: the verdict per pair and metric, the guards' warnings, then the numbers behind them."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from rolling_calib.analysis.race_record import read_race
from rolling_calib.analysis.sequential_path import read_path
from rolling_calib.cli.errors import command_errors
from rolling_calib.cli.options import (
    add_output_arguments,
    add_scoring_arguments,
    add_store_argument,
    compare_across_stores,
    score_and_compare,
)


@command_errors("compare")
def handle(args: argparse.Namespace) -> int:
    with contextlib.redirect_stdout(sys.stderr):  # library chatter must not corrupt --json
        path = race = None
        if len(args.stores) > 1:   # the pipelines of several stores, evaluated on the same days
            comparison = compare_across_stores(args, args.stores)
        else:
            scores, comparison = score_and_compare(args)
            path = read_path(scores.store)
            race = read_race(scores.store)
    note = path.seeds_note(scores.seeds_per_pipeline) if path else ""
    if args.json:
        sequential = {"sequential": {**path.to_dict(), "seeds_note": note}} if path else {}
        print(json.dumps({**comparison.to_dict(), **sequential, **({"race": race.to_dict()} if race else {})},
                         indent=2))
    else:
        print(comparison.format())
        if path:   # the store was run --until-decided: where and why each pair stopped, compute saved
            print("\n" + (note + "\n" if note else "") + path.format())
        if race:   # the store was raced (sweep --until-decided): the race look by look
            print("\n" + race.format())
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare pipelines in a result store: a verdict per pair and metric (QL, CQL, IC, Rank IC, the "
             "backtest's daily excess return), warnings",
        description=(
            "Score every run (pipeline x seed) of a store with the plain quadratic loss (QL), the rolling "
            "calibrated quadratic loss (CQL, the store's calibration rule unless given) and Qlib's IC, ICIR "
            "and Rank IC. Then print one line that answers (which pipeline is better by QL, by how much, how "
            "sure) and, per pair and metric, the verdict: better, worse or undetermined at --confidence, the "
            "difference of means in the label's unit with its interval over seeds on the evaluated days "
            "(--target period, the default, named with its days) or over seeds and the market's future "
            "(--target future; each source of chance counted once), the other target's verdict beside it (the "
            "future one holds only if the market's drift is shorter than the horizon its interval sees), the "
            "dominant source of uncertainty, how much pairing seeds narrowed it and the seeds per pipeline that "
            "give an 80% chance to decide; when each pipeline was better (the verdict inside each refit window "
            "or month, --when, Holm across them; the test across windows; the fluctuation warning with the date "
            "the relative performance changed); the guards' warnings (scale "
            "mismatch, constant predictions, identical pipelines, degenerate seeds, no skill, undetermined ground "
            "truth); per pipeline the mean and std "
            "over seeds of every metric, the std ratio CQL / QL and the seed budget; where the workflow has a "
            "backtest (Qlib's PortAnaRecord config, run once per seed over the joined windows), verdicts on its "
            "daily excess return without and with cost and per pipeline its annualized excess return, information "
            "ratio and max drawdown over seeds (--accumulate: Qlib's sum or compounded); and per pair the "
            "pairwise accuracies with bootstrap intervals, shown only where the ground truth (QL) is "
            "determined and the seeds differ. Give --store more than once to compare the pipelines of several "
            "stores evaluated on the same days (e.g. LightGBM in one, an LSTM in another)."
        ),
        epilog=("Examples: rolling-calib compare --store runs/demo --pipelines wd0 wd1e-4 --json; "
                "rolling-calib compare --store runs/lgb --store runs/lstm"),
    )
    add_store_argument(parser, positional_alias=True, many=True)
    add_scoring_arguments(parser)
    add_output_arguments(parser, json_prints="the comparison (what the tables show)")
    parser.set_defaults(func=handle)
