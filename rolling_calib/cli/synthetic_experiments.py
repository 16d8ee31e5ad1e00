"""``rolling-calib synthetic linear|logistic``: the source's synthetic experiments (docs/method.md §3.1, §3.2).

Prints Acc (mean +- standard error over rounds) of the vanilla metric on the whole
evaluation set, of the vanilla metric on the remaining part only, and of the
calibrated metric, with the mean and standard deviation of each over pipeline A's
runs. ``--json`` prints one JSON object instead; the progress bar goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rolling_calib.cli.errors import command_errors
from rolling_calib.cli.options import add_output_arguments, checked, show_progress

_DESCRIPTION = {
    "linear": (
        "Synthetic linear regression (docs/method.md §3.1): OLS pipelines A (20 features) vs B (19), "
        "scored by quadratic loss (QL) and calibrated quadratic loss (CQL)."
    ),
    "logistic": (
        "Synthetic logistic regression (docs/method.md §3.2): logistic pipelines A (20 features) vs B (19), "
        "scored by log loss (LL) and calibrated log loss (CLL)."
    ),
}

_EPILOG = (
    "Defaults are the full protocol: 100 rounds x 100 runs per pipeline. Every round draws one "
    "evaluation set and fresh training sets; the same --seed gives the same numbers."
)


def _param(name: str, convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse ``type=``: ``convert``, then check against the experiment's declared constraint for ``name``.

    The table (:data:`rolling_calib.simulation.synthetic_experiments.PARAMETERS`) is imported only
    when the option is given, so ``--help`` stays light.
    """

    def parse(text: str) -> Any:
        from rolling_calib.simulation.synthetic_experiments import PARAMETERS

        return checked(PARAMETERS[name], convert)(text)

    parse.__name__ = convert.__name__
    return parse


def _add_common(parser: argparse.ArgumentParser, *, n_bias: int) -> None:
    run = parser.add_argument_group("protocol")
    run.add_argument("--rounds", type=_param("rounds", int), default=100, help="rounds to repeat (default: 100)")
    run.add_argument("--runs", type=_param("runs", int), default=100, help="runs per pipeline and round, >= 2 (default: 100)")
    run.add_argument("--seed", type=_param("seed", int), default=0, help="master random seed (default: 0)")
    data = parser.add_argument_group("data")
    data.add_argument("--dims", type=_param("dims", int), default=20, help="features of pipeline A (default: 20)")
    data.add_argument("--features-b", type=_param("features_b", int), default=19, help="features of pipeline B, the first ones (default: 19)")
    data.add_argument("--beta", type=_param("beta", float), default=1.0, help="every true coefficient (default: 1.0)")
    data.add_argument("--x-mean", type=_param("x_mean", float), default=-0.05, help="mean of every feature (default: -0.05)")
    data.add_argument("--x-std", type=_param("x_std", float), default=0.25, help="standard deviation of every feature (default: 0.25)")
    data.add_argument("--n-train", type=_param("n_train", int), default=1000, help="training samples per run (default: 1000)")
    data.add_argument("--n-bias", type=_param("n_bias", int), default=n_bias, help=f"bias part of the evaluation set (default: {n_bias})")
    data.add_argument("--n-remaining", type=_param("n_remaining", int), default=10000, help="remaining part of the evaluation set (default: 10000)")


def _add_output(parser: argparse.ArgumentParser) -> None:
    out = add_output_arguments(parser, json_prints="one object instead of the table")
    out.add_argument("--rounds-csv", type=Path, metavar="PATH",
                     help="also write the per-round table to this CSV file (written atomically)")
    out.add_argument("--plot", type=Path, metavar="PATH",
                     help="also save a figure of the per-round accuracies and spreads (.png, .pdf or .svg)")


def register(subparsers) -> None:
    """Add the ``synthetic`` command with its ``linear`` and ``logistic`` experiments."""
    parser = subparsers.add_parser(
        "synthetic",
        help="run the synthetic linear / logistic experiments (vanilla vs calibrated metric accuracy)",
        description="Run the source's synthetic experiments: how often one run of each of two pipelines is "
        "ranked correctly by the vanilla metric and by the calibrated metric.",
        epilog=_EPILOG,
    )
    parser.set_defaults(func=handler)
    experiments = parser.add_subparsers(title="experiments", dest="experiment", metavar="EXPERIMENT", required=True)
    linear = experiments.add_parser("linear", help="OLS, QL vs CQL (docs/method.md §3.1)", description=_DESCRIPTION["linear"], epilog=_EPILOG)
    _add_common(linear, n_bias=1000)
    noise = linear.add_argument_group("noise")
    noise.add_argument("--noise-mean", type=_param("noise_mean", float), default=1.0, help="mean of the label noise (default: 1.0)")
    noise.add_argument("--noise-std", type=_param("noise_std", float), default=2.0, help="standard deviation of the label noise (default: 2.0)")
    _add_output(linear)
    linear.set_defaults(func=handler)
    logistic = experiments.add_parser("logistic", help="logistic regression, LL vs CLL (docs/method.md §3.2)",
                                      description=_DESCRIPTION["logistic"], epilog=_EPILOG)
    _add_common(logistic, n_bias=2000)
    fit = logistic.add_argument_group("fit")
    fit.add_argument("--l2", type=_param("l2", float), default=0.0,
                     help="L2 penalty (l2/2)*||coefficients||^2, scikit-learn's C = 1/l2 (default: 0, maximum likelihood)")
    _add_output(logistic)
    logistic.set_defaults(func=handler)


def _write_csv_atomically(frame, path: Path) -> None:
    from data_prep.atomic import atomic_write

    atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False))


@command_errors(lambda args: f"synthetic {args.experiment}")
def handler(args: argparse.Namespace) -> int:
    """Run the chosen experiment, print the table (or JSON); 2 on bad parameters."""
    from rolling_calib.simulation.synthetic_experiments import run_linear_experiment, run_logistic_experiment

    common = dict(
        rounds=args.rounds, runs=args.runs, seed=args.seed, dims=args.dims, features_b=args.features_b,
        beta=args.beta, x_mean=args.x_mean, x_std=args.x_std, n_train=args.n_train,
        n_bias=args.n_bias, n_remaining=args.n_remaining, progress=show_progress(args),
    )
    started = time.perf_counter()
    if args.experiment == "linear":
        result = run_linear_experiment(noise_mean=args.noise_mean, noise_std=args.noise_std, **common)
    else:
        result = run_logistic_experiment(l2=args.l2, **common)
    elapsed = time.perf_counter() - started
    if args.rounds_csv is not None:
        _write_csv_atomically(result.rounds, args.rounds_csv)
    if args.plot is not None:
        from rolling_calib.reporting.figures import plot_rounds, save_figure

        save_figure(plot_rounds(result), args.plot, dpi=120)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=False))
    else:
        print(result.format_table())
        if args.rounds_csv is not None or args.plot is not None:
            print()
        for label, path in (("per-round table", args.rounds_csv), ("figure", args.plot)):
            if path is not None:
                print(f"{label} written to {path}")
    print(f"wall time {elapsed:.1f} s", file=sys.stderr)
    return 0
