"""Argument groups shared by the commands that run experiments (``run``, ``sweep``, ``demo``).

Each option is declared once here, and turned into the library's option objects
(:class:`~rolling_calib.execution.factory.ExecutorOptions`, ``--set`` overrides) by
one function, so the commands cannot drift apart.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rolling_calib.config.overrides import parse_set
from rolling_calib.core.calibration import CALIBRATION_FIELDS, Calibration
from rolling_calib.core.label import LABEL_KINDS
from rolling_calib.core.validation import (
    BIAS_MODES,
    CALIBRATION_PERIOD,
    CALIBRATION_PERIODS,
    CALIBRATION_SOURCES,
    CONFIDENCE,
    FALLBACKS,
    N_BOOT,
    SEED,
    TRADING_DAYS,
    Constraint,
    explain,
)
from rolling_calib.execution.factory import EXECUTORS, ExecutorOptions

__all__ = ["add_calibration_arguments", "add_execution_arguments", "add_overrides_argument", "add_rule_arguments",
           "add_scoring_arguments", "add_tracking_arguments", "calibration_from_args", "checked", "executor_options",
           "overrides", "score_and_compare", "score_with_options"]


def add_overrides_argument(parser: argparse.ArgumentParser) -> None:
    """``--set KEY=VALUE`` (repeatable) and ``--device``."""
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value by dotted key, read with YAML scalar rules "
                             "(5e-6 is a float), e.g. qlib_init.provider_uri=/data/us25 (repeatable)")
    parser.add_argument("--device", default=None, metavar="DEV",
                        help="model device for every pipeline: cpu, cuda, cuda:N, auto "
                             "(same as --set task.model.kwargs.device=DEV; default: the YAML's)")


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--set`` and ``--device`` overrides of ``args`` as ``{dotted key: value}``."""
    out = parse_set(args.overrides)
    if getattr(args, "device", None) is not None:
        out["task.model.kwargs.device"] = args.device
    return out


def add_execution_arguments(parser: argparse.ArgumentParser, *, workers_help: str,
                            workers_default: int | None) -> None:
    """Executor, workers, threads and the Ray options (cluster address, retries, GPUs per unit)."""
    group = parser.add_argument_group("execution")
    group.add_argument("--executor", choices=EXECUTORS, default="local", help="local process pool (default) or Ray")
    group.add_argument("--workers", type=int, default=workers_default, metavar="K", help=workers_help)
    group.add_argument("--threads", type=int, default=1, metavar="T",
                       help="torch threads per unit (default 1; scale with --workers instead). Part of the config "
                            "hash: a different count changes the last digits, so units are recomputed")
    group.add_argument("--address", default=None, metavar="ADDR",
                       help="Ray cluster to join ('auto', 'host:6379', 'ray://host:10001'); default: start a local one")
    group.add_argument("--max-retries", type=int, default=2, metavar="N",
                       help="Ray: retries of a failed unit before the run stops (default 2)")
    group.add_argument("--gpus-per-unit", type=float, default=0.0, metavar="G",
                       help="Ray: GPUs reserved per unit with --device cuda (e.g. 0.25 packs 4 units per GPU)")


def executor_options(args: argparse.Namespace, *, quiet: bool) -> ExecutorOptions:
    """The :class:`ExecutorOptions` of ``args`` (``ValueError`` naming a bad option)."""
    return ExecutorOptions(kind=args.executor, workers=args.workers, threads=args.threads, address=args.address,
                           max_retries=args.max_retries, gpus_per_unit=float(args.gpus_per_unit),
                           log_to_driver=not quiet)


def add_tracking_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tracking-uri`` / ``--no-tracking``."""
    group = parser.add_argument_group("tracking (MLflow)").add_mutually_exclusive_group()
    group.add_argument("--tracking-uri", default=None, metavar="URI",
                       help="MLflow tracking URI to log the store to (default sqlite:///STORE/mlflow.db)")
    group.add_argument("--no-tracking", action="store_true", help="do not log the store to MLflow")


def checked(constraint: Constraint, convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type=``: ``convert`` the text, then check it against the declared ``constraint``."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            value = text
        problem = explain(value, constraint)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return value

    parse.__name__ = getattr(convert, "__name__", "value")
    return parse


def _int_or_text(text: str) -> str | int:
    """``"5"`` -> 5, anything else unchanged (a period name)."""
    try:
        return int(text)
    except ValueError:
        return text


#: ``--period``: a name of :data:`~rolling_calib.core.validation.CALIBRATION_PERIODS` or N trading days.
_period = checked(CALIBRATION_PERIOD, _int_or_text)


def _bias_window(text: str) -> int | str:
    """``--bias-window``: N trading days, or ``none`` (the whole previous period)."""
    if text.lower() == "none":
        return "none"
    return checked(TRADING_DAYS, int)(text)


def add_rule_arguments(parser: argparse.ArgumentParser, *, paper_defaults: bool = False) -> None:
    """``--label`` and the calibration rule (``--period --bias --source --bias-window --missing-instrument``).

    Each option left out keeps the store's recorded value (``paper_defaults``: the paper's rule, for
    ``metaeval``, whose variants change it); :func:`calibration_from_args` builds the rule.
    """
    def default(value: str) -> str:
        return f"default: {value}" if paper_defaults else f"default: the store's config, else {value}"

    group = parser.add_argument_group("calibration rule and label")
    group.add_argument(
        "--label", choices=LABEL_KINDS, default=None,
        help="score against the handler's raw label or its learn-processed one (units store both where they "
        "differ, so no retraining; default: the store's rolling.label)")
    group.add_argument(
        "--period", type=_period, default=None, metavar="PERIOD",
        help=f"calibration period: {', '.join(CALIBRATION_PERIODS)} or N trading days (docs/method.md §2.2: month; "
        f"{default('month')})")
    group.add_argument(
        "--bias", choices=BIAS_MODES, default=None,
        help=f"one bias per period for all instruments (pooled, the paper) or one per instrument ({default('pooled')})")
    group.add_argument(
        "--source", choices=CALIBRATION_SOURCES, default=None,
        help="where each period's bias comes from: the previous period (previous, the paper) or each window's "
        "own predictions over its validation segment (validation: no period is corrected with another "
        f"model's bias; needs a store that kept them) ({default('previous')})")
    group.add_argument(
        "--bias-window", type=_bias_window, default=None, metavar="N",
        help="fit each period's bias on the N trading days before it instead of the whole previous period "
        f"('none': the previous period; source previous only) ({default('none')})")
    group.add_argument(
        "--missing-instrument", choices=FALLBACKS, default=None,
        help="per-instrument bias, an instrument without rows to fit on: stop with an error, or use the pooled "
        f"bias for it ({default('error')})")


def add_calibration_arguments(parser: argparse.ArgumentParser) -> None:
    """``--pipelines`` with the rule and label options: which runs of a store, scored with which rule and label."""
    parser.add_argument("--pipelines", nargs="+", metavar="NAME", help="pipelines to include (default: all in the store)")
    add_rule_arguments(parser)


def calibration_from_args(args: argparse.Namespace, recorded: Calibration) -> Calibration:
    """The rule of a command: ``recorded`` (the store's, or the paper's) with the options given on the command line.

    >>> ns = argparse.Namespace(period="week", bias=None, source=None, bias_window=None, missing_instrument=None)
    >>> calibration_from_args(ns, Calibration(bias="per_instrument")).describe()
    'weekly periods, one bias per instrument from the previous week'
    """
    given = {name: getattr(args, name, None) for name in CALIBRATION_FIELDS}   # --bias-window sets bias_window ...
    changes = {name: (None if value == "none" else value) for name, value in given.items() if value is not None}
    return recorded.replace(**changes)


def add_scoring_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``compare`` and ``report``: the calibration rule and the bootstrap."""
    add_calibration_arguments(parser)
    parser.add_argument("--n-boot", type=checked(N_BOOT, int), default=2000, metavar="N",
                        help="bootstrap resamples for the intervals (default 2000)")
    parser.add_argument("--confidence", type=checked(CONFIDENCE, float), default=0.95, help="interval level (default 0.95)")
    parser.add_argument("--boot-seed", type=checked(SEED, int), default=0, metavar="SEED",
                        help="bootstrap seed, recorded in the output (default 0)")


def score_with_options(args: argparse.Namespace, *, progress: bool):
    """:func:`~rolling_calib.analysis.scoring.score_store` with the rule and label options (else the store's)."""
    from rolling_calib.analysis.scoring import score_store
    from rolling_calib.execution import store as st

    calibration = calibration_from_args(args, st.recorded_calibration(st.read_manifest(args.store)))
    return score_store(args.store, calibration=calibration, label=args.label, pipelines=args.pipelines,
                       progress=progress)


def score_and_compare(args: argparse.Namespace):
    """Score the store and compare pipelines with the scoring options of ``args`` (``compare``, ``report``)."""
    from rolling_calib.analysis.comparison import compare_store

    scores = score_with_options(args, progress=not args.json)
    comparison = compare_store(scores, n_boot=args.n_boot, confidence=args.confidence, seed=args.boot_seed)
    return scores, comparison
