"""The options of the ``rolling-calib`` commands, each declared once: one grammar for every command.

* ``--store DIR`` is the result store of every command that reads or writes one (``run``, ``sweep``,
  ``compare``, ``report``, ``diagnose``, ``metaeval``); ``compare``, ``report``, ``diagnose`` and
  ``metaeval`` still accept it as the old positional ``STORE`` (hidden from ``--help``; both at once are
  refused). ``demo`` writes everything under ``--out DIR``; the ``data`` commands take Qlib data directories.
* Every command takes ``--json`` (the result as JSON on stdout, nothing else there) and ``--no-progress``.
* An option shared by several commands (``--workers``, ``--seeds``, ``--pipelines``, the calibration rule, the
  question, the bootstrap, the stopping rule, ``--set``, ``--device``, tracking ...) is added by one function
  here, so its name, default and help are the same wherever it appears (``tests/cli/test_cli_grammar.py``
  compares every command's ``--help``); a command offers only the options that act in it.
* Defaults and constraints come from the values the options build, never retyped: ``--target --confidence``
  from :class:`~rolling_calib.core.question.Question`, ``--n-boot --boot-seed`` from
  :class:`~rolling_calib.core.resampling.Resampling`, ``--first --batch --max-seeds --spending --futility
  --margin`` from :class:`~rolling_calib.core.stopping.StoppingRule`.

The functions that turn the parsed options into the library's option objects
(:class:`~rolling_calib.execution.factory.ExecutorOptions`, ``--set`` overrides, a
:class:`~rolling_calib.core.calibration.Calibration`, a ``Question``, a ``Resampling``, a ``StoppingRule``)
live here too, so the commands cannot drift apart.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from data_prep.cli import JSON_HELP, NO_PROGRESS_HELP, add_output_options, show_progress
from rolling_calib.config.overrides import parse_set
from rolling_calib.core.calibration import CALIBRATION_FIELDS, Calibration
from rolling_calib.core.label import LABEL_CHOICES
from rolling_calib.core.metric_table import DECIDE_BY
from rolling_calib.core.question import DEFAULT_QUESTION, Question
from rolling_calib.core.portfolio import ACCUMULATION
from rolling_calib.core.resampling import DEFAULT as RESAMPLING_DEFAULTS
from rolling_calib.core.resampling import Resampling
from rolling_calib.core.stopping import DEFAULT_RULE, SEED_VARIANCES, SPENDINGS, StoppingRule
from rolling_calib.core.validation import (
    TARGETS,
    WHEN_BLOCKS,
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
from rolling_calib.core.validation import GPUS, RETRIES, SEED_COUNT, THREADS, WORKERS  # upper bounds (issue 30)
from rolling_calib.execution.factory import EXECUTORS, ExecutorOptions

__all__ = ["CommandParser", "DEFAULT_WORKERS", "JSON_HELP", "NO_PROGRESS_HELP", "STORE_HELP",
           "add_bootstrap_arguments", "add_calibration_arguments", "add_dry_run_argument", "add_execution_arguments",
           "add_out_argument", "add_output_arguments", "add_output_options", "add_overrides_argument",
           "add_pipelines_argument", "add_question_arguments", "add_rule_arguments", "add_scoring_arguments",
           "add_seeds_argument", "add_store_argument", "add_tracking_arguments", "add_until_decided_arguments",
           "add_when_argument", "add_workers_argument", "calibration_from_args", "checked", "compare_options",
           "executor_options", "overrides", "question_from_args", "resampling_from_args", "score_and_compare",
           "score_with_options", "show_progress", "until_decided_from_args"]

#: Units run at once by default, by every command that runs units (``run``, ``sweep``, ``demo``): two
#: (this project's CI machines have two cores), fewer on a one-core machine.
DEFAULT_WORKERS: int = min(2, os.cpu_count() or 1)

#: The help of ``--store``, the same for every command that takes a result store.
STORE_HELP = ("result store directory: run and sweep write the units into it (created if absent); "
              "compare, report, diagnose and metaeval read them")


class CommandParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` that runs its command's checks across options after parsing.

    argparse checks one option at a time; a check in :attr:`checks` sees the whole namespace (``--store``
    against the old positional store), may complete it, and returns what is wrong or ``None``. Options in
    :attr:`shown_required` are shown as required in the usage line although argparse does not enforce them
    (a check does). ``add_subparsers`` builds sub-parsers of the parent's class, so every parser of the
    ``rolling-calib`` tree is one.

    Examples
    --------
    >>> parser = CommandParser(prog="compare")
    >>> add_store_argument(parser, positional_alias=True)
    >>> parser.format_usage().strip()
    'usage: compare [-h] --store DIR'
    >>> parser.parse_args(["runs/demo"]).store
    'runs/demo'
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checks: list[Callable[[argparse.Namespace], str | None]] = []
        self.shown_required: list[argparse.Action] = []

    def parse_known_args(self, args=None, namespace=None):  # noqa: D102 - argparse's
        namespace, extras = super().parse_known_args(args, namespace)
        for check in self.checks:
            problem = check(namespace)
            if problem is not None:
                self.error(problem)
        return namespace, extras

    def format_usage(self) -> str:  # noqa: D102 - argparse's
        with self._required_shown():
            return super().format_usage()

    def format_help(self) -> str:  # noqa: D102 - argparse's
        with self._required_shown():
            return super().format_help()

    @contextlib.contextmanager
    def _required_shown(self) -> Iterator[None]:
        saved = [action.required for action in self.shown_required]
        for action in self.shown_required:
            action.required = True
        try:
            yield
        finally:
            for action, required in zip(self.shown_required, saved):
                action.required = required


def add_store_argument(parser: CommandParser, *, required: bool = True, positional_alias: bool = False,
                       many: bool = False) -> None:
    """``--store DIR``, the result store (``required`` unless the command has a default, as ``sweep``).

    ``positional_alias``: also accept the store as a positional argument, the old form of ``compare``,
    ``report``, ``diagnose`` and ``metaeval`` (hidden from ``--help``); both at once are refused.
    ``many``: ``--store`` may be given more than once (the command's description says what several
    mean); ``args.stores`` holds them all, ``args.store`` the first.
    """
    action = parser.add_argument("--store", metavar="DIR", default=None, required=required and not positional_alias,
                                 action="append" if many else "store", type=store_dir, help=STORE_HELP)
    if positional_alias:
        parser.add_argument("old_store", nargs="?", default=None, metavar="STORE", help=argparse.SUPPRESS)
        parser.shown_required.append(action)
        parser.checks.append(_one_store)
    if many:
        parser.checks.append(_many_stores)


def store_dir(text: str) -> str:
    """``--store``'s ``type=``: a directory's name; an empty one is refused (it would be the current directory).

    >>> store_dir("runs/demo")
    'runs/demo'
    >>> store_dir("")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a directory, found an empty path (it would mean the current directory): name the store's directory, e.g. --store runs/demo
    """
    if not text:
        raise argparse.ArgumentTypeError("expected a directory, found an empty path (it would mean the current "
                                         "directory): name the store's directory, e.g. --store runs/demo")
    return text


def _many_stores(args: argparse.Namespace) -> str | None:
    """``args.stores``: every ``--store`` given; ``args.store``: the first.

    >>> ns = argparse.Namespace(store=["a", "b"]); _many_stores(ns), ns.stores, ns.store
    (None, ['a', 'b'], 'a')
    """
    given = args.store if isinstance(args.store, list) else [args.store] if args.store is not None else []
    args.stores, args.store = given, (given[0] if given else None)
    return None


def _one_store(args: argparse.Namespace) -> str | None:
    """Move the old positional store to ``args.store``; what is wrong when it is given twice or not at all.

    >>> ns = argparse.Namespace(store=None, old_store="runs/a")
    >>> _one_store(ns), ns.store
    (None, 'runs/a')
    >>> _one_store(argparse.Namespace(store="runs/a", old_store="runs/b"))
    'the store is given twice (--store runs/a and runs/b): give it once, as --store DIR'
    """
    old = vars(args).pop("old_store", None)
    if old is not None and args.store is not None:
        given = " --store ".join(args.store) if isinstance(args.store, list) else args.store
        return f"the store is given twice (--store {given} and {old}): give it once, as --store DIR"
    if old is not None:
        args.store = old
    return "the following arguments are required: --store" if args.store is None else None


def add_output_arguments(parser: argparse.ArgumentParser, *, json_prints: str):
    """The "output" group with ``--json`` and ``--no-progress``; its description says what ``--json`` prints."""
    group = parser.add_argument_group("output", f"With --json: {json_prints}.")
    add_output_options(group)
    return group


def add_out_argument(parser, *, what: str, default: str | None = None, default_words: str | None = None) -> None:
    """``--out DIR``: where a command writes ``what``; its default (``default``, or ``default_words`` where it
    depends on other options) differs by command and is said in its help."""
    parser.add_argument("--out", metavar="DIR", default=default, help=f"{what} (default: {default_words or default})")


def add_dry_run_argument(parser) -> None:
    """``--dry-run``: print the plan (units, windows with their dates, rows, estimated compute) and train nothing."""
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan (units, windows with their dates, data size, compute estimated from "
                             "the store's measured throughput) and train nothing; a real run prints it first")


def add_pipelines_argument(container) -> None:
    """``--pipelines NAME ...``."""
    container.add_argument("--pipelines", nargs="+", metavar="NAME", help="only these pipelines (default: all)")


def add_seeds_argument(container) -> None:
    """``--seeds N``: seeds ``0..N-1`` of every pipeline."""
    container.add_argument("--seeds", type=checked(SEED_COUNT, int), default=None, metavar="N",
                           help="seeds 0..N-1 of every pipeline (default: the config's rolling.seeds)")


def add_overrides_argument(parser: argparse.ArgumentParser) -> None:
    """``--set KEY=VALUE`` (repeatable) and ``--device``."""
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value by dotted key, read with YAML rules (5e-6 is a float; "
                             "[A, B] a list), e.g. qlib_init.provider_uri=/data/us25; a YAML anchor reaches its "
                             "aliases: benchmark=AAPL, port_analysis_config.strategy.kwargs.topk=5 (repeatable)")
    parser.add_argument("--device", default=None, metavar="DEV",
                        help="model device for every pipeline: cpu, cuda, cuda:N, auto "
                             "(same as --set task.model.kwargs.device=DEV; default: the YAML's)")


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--set`` and ``--device`` overrides of ``args`` as ``{dotted key: value}``."""
    out = parse_set(args.overrides)
    if getattr(args, "device", None) is not None:
        out["task.model.kwargs.device"] = args.device
    return out


def add_workers_argument(container) -> None:
    """``--workers K``: units at once, the same default for every command that runs units."""
    container.add_argument(
        "--workers", type=checked(WORKERS, int), default=DEFAULT_WORKERS, metavar="K",
        help=f"units run at once: processes of the local pool, or the CPUs of a Ray runtime started here "
             f"(default {DEFAULT_WORKERS} = min(2, CPU cores); a Ray cluster joined with --address ignores it)")


def add_execution_arguments(parser: argparse.ArgumentParser) -> None:
    """Executor, workers, threads and the Ray options (cluster address, retries, GPUs per unit)."""
    group = parser.add_argument_group("execution")
    group.add_argument("--executor", choices=EXECUTORS, default="local", help="local process pool (default) or Ray")
    add_workers_argument(group)
    group.add_argument("--threads", type=checked(THREADS, int), default=1, metavar="T",
                       help="torch threads per unit (default 1; scale with --workers instead). Part of the config "
                            "hash: a different count changes the last digits, so units are recomputed")
    group.add_argument("--address", default=None, metavar="ADDR",
                       help="Ray cluster to join ('auto', 'host:6379', 'ray://host:10001'); default: start a local one")
    group.add_argument("--max-retries", type=checked(RETRIES, int), default=2, metavar="N",
                       help="Ray: retries of a failed unit before the run stops (default 2)")
    group.add_argument("--gpus-per-unit", type=checked(GPUS, float), default=0.0, metavar="G",
                       help="Ray: GPUs reserved per unit with --device cuda (e.g. 0.25 packs 4 units per GPU)")


def executor_options(args: argparse.Namespace, *, quiet: bool) -> ExecutorOptions:
    """The :class:`ExecutorOptions` of ``args`` (``ValueError`` naming a bad option)."""
    return ExecutorOptions(kind=args.executor, workers=args.workers, threads=args.threads, address=args.address,
                           max_retries=args.max_retries, gpus_per_unit=float(args.gpus_per_unit),
                           log_to_driver=not quiet)


def add_tracking_arguments(parser: argparse.ArgumentParser, *, uri: bool = True) -> None:
    """``--tracking-uri`` (``uri``) / ``--no-tracking``."""
    group = parser.add_argument_group("tracking (MLflow)").add_mutually_exclusive_group()
    if uri:
        group.add_argument("--tracking-uri", default=None, metavar="URI",
                           help="MLflow tracking URI to log the store to (default sqlite:///STORE/mlflow.db)")
    group.add_argument("--no-tracking", action="store_true", help="do not log to MLflow")


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


#: Where a rule option left out comes from: the store's recorded rule (compare, report, diagnose), or the
#: default rule whatever the store recorded (metaeval, whose variants each change one thing of it).
_RULE_BASE = {
    False: "An option left out keeps the store's recorded value: its config's rolling.label and rolling.calibration, "
           "which is the default rule (the paper's) unless the config changed it.",
    True: "The base rule the metric variants change: an option left out is the default rule (the paper's), whatever "
          "the store recorded, so that each variant means what its name says; --label left out is the store's "
          "rolling.label.",
}


def add_rule_arguments(parser: argparse.ArgumentParser, *, paper_defaults: bool = False) -> None:
    """``--label`` and the calibration rule (``--period --bias --source --bias-window --missing-instrument``).

    Each option left out keeps the store's recorded value (``paper_defaults``: the default rule, the paper's, for
    ``metaeval``, whose variants change it; the group's description says which); :func:`calibration_from_args`
    builds the rule. The options read the same in every command: "default rule" is the paper's.
    """
    group = parser.add_argument_group("calibration rule and label", _RULE_BASE[paper_defaults])
    group.add_argument(
        "--label", choices=LABEL_CHOICES, default=None,
        help="score against the handler's raw label, its learn-processed one, or auto: the learned one when a "
        "learn processor changed it, else the raw one (units store both where they differ, so no retraining)")
    group.add_argument(
        "--period", type=_period, default=None, metavar="PERIOD",
        help=f"calibration period: {', '.join(CALIBRATION_PERIODS)} or N trading days (docs/method.md §2.2; "
        "default rule: month)")
    group.add_argument(
        "--bias", choices=BIAS_MODES, default=None,
        help="one bias per period for all instruments (pooled) or one per instrument (default rule: pooled)")
    group.add_argument(
        "--source", choices=CALIBRATION_SOURCES, default=None,
        help="where each period's bias comes from: the previous period (previous) or each window's "
        "own predictions over its validation segment (validation: no period is corrected with another "
        "model's bias; needs a store that kept them) (default rule: previous)")
    group.add_argument(
        "--bias-window", type=_bias_window, default=None, metavar="N",
        help="fit each period's bias on the N trading days before it instead of the whole previous period "
        "('none': the previous period; source previous only) (default rule: none)")
    group.add_argument(
        "--missing-instrument", choices=FALLBACKS, default=None,
        help="per-instrument bias, an instrument without rows to fit on: stop with an error, or use the pooled "
        "bias for it (default rule: error)")


def add_calibration_arguments(parser: argparse.ArgumentParser, *, paper_defaults: bool = False) -> None:
    """``--pipelines`` with the rule and label options: which runs of a store, scored with which rule and label."""
    add_pipelines_argument(parser)
    add_rule_arguments(parser, paper_defaults=paper_defaults)


def calibration_from_args(args: argparse.Namespace, recorded: Calibration) -> Calibration:
    """The rule of a command: ``recorded`` (the store's, or the paper's) with the options given on the command line.

    >>> ns = argparse.Namespace(period="week", bias=None, source=None, bias_window=None, missing_instrument=None)
    >>> calibration_from_args(ns, Calibration(bias="per_instrument")).describe()
    'weekly periods, one bias per instrument from the previous week'
    """
    given = {name: getattr(args, name, None) for name in CALIBRATION_FIELDS}   # --bias-window sets bias_window ...
    changes = {name: (None if value == "none" else value) for name, value in given.items() if value is not None}
    return recorded.replace(**changes)


#: The question options (the fields of :class:`~rolling_calib.core.question.Question`, defaults and constraints
#: taken from it): name -> (flag, keyword arguments of ``add_argument``).
_QUESTION: dict[str, tuple[str, dict[str, Any]]] = {
    "target": ("--target", dict(choices=TARGETS, default=DEFAULT_QUESTION.target,
                                help="what the headline verdicts answer: period = over seeds on the evaluated days "
                                     "(a fixed backtest; holds its level under drift), future = over seeds and the "
                                     "market's future (what to expect on new periods, if the market's drift is "
                                     "shorter than the horizon its interval sees); the other is shown beside it "
                                     f"(default {DEFAULT_QUESTION.target})")),
    "confidence": ("--confidence", dict(type=checked(CONFIDENCE, float), default=DEFAULT_QUESTION.confidence,
                                        metavar="LEVEL",
                                        help="confidence level of every interval; a verdict decides when its interval "
                                             f"excludes 0 (default {DEFAULT_QUESTION.confidence})")),
}


def add_question_arguments(parser: argparse.ArgumentParser, *, only: tuple[str, ...] = tuple(_QUESTION)) -> None:
    """``--target`` and ``--confidence``: the :class:`~rolling_calib.core.question.Question` every verdict answers
    (``only``: the ones that act in the command, by destination name)."""
    group = parser.add_argument_group("question", "What the verdicts and intervals answer.")
    for name in only:
        flag, kwargs = _QUESTION[name]
        group.add_argument(flag, **kwargs)


def question_from_args(args: argparse.Namespace) -> Question:
    """The one :class:`~rolling_calib.core.question.Question` of a command; an option it does not take keeps its
    default.

    >>> question_from_args(argparse.Namespace(target="period", confidence=0.9)).describe()
    'over seeds, on the evaluated days (target period), at 90% confidence'
    """
    return Question(**{name: getattr(args, name) for name in _QUESTION if hasattr(args, name)})


#: The bootstrap options (the fields of :class:`~rolling_calib.core.resampling.Resampling`, defaults and
#: constraints taken from it): name -> (flag, keyword arguments of ``add_argument``).
_BOOTSTRAP: dict[str, tuple[str, dict[str, Any]]] = {
    "n_boot": ("--n-boot", dict(type=checked(N_BOOT, int), default=RESAMPLING_DEFAULTS.n_boot, metavar="N",
                                help="bootstrap resamples of every bootstrap interval (default "
                                     f"{RESAMPLING_DEFAULTS.n_boot})")),
    "boot_seed": ("--boot-seed", dict(type=checked(SEED, int), default=RESAMPLING_DEFAULTS.seed, metavar="SEED",
                                      help=f"bootstrap seed, recorded in the output (default "
                                           f"{RESAMPLING_DEFAULTS.seed})")),
}
#: :class:`~rolling_calib.core.resampling.Resampling` field -> destination of its option.
_RESAMPLING_DEST = {"n_boot": "n_boot", "seed": "boot_seed"}


def resampling_from_args(args: argparse.Namespace) -> Resampling:
    """The one :class:`~rolling_calib.core.resampling.Resampling` of a command, from its bootstrap options.

    An option the command does not take keeps its default.

    >>> resampling_from_args(argparse.Namespace(n_boot=300, boot_seed=2)).to_dict()
    {'n_boot': 300, 'seed': 2, 'block_size': None}
    """
    return Resampling(**{name: getattr(args, dest) for name, dest in _RESAMPLING_DEST.items() if hasattr(args, dest)})


def add_bootstrap_arguments(parser: argparse.ArgumentParser, *, only: tuple[str, ...] = ("n_boot", "boot_seed")) -> None:
    """``--n-boot`` and ``--boot-seed`` (``only``: the ones that act in the command, by destination name).

    ``--block-size`` is offered by no command: the only stationary bootstrap over market time, the
    seed-averaged model confidence set, is a bench baseline now (the sweep's set is seed-aware and analytic)."""
    group = parser.add_argument_group("bootstrap", "How the bootstrap intervals draw (the verdicts' intervals are "
                                                   "analytic and draw nothing).")
    for name in only:
        flag, kwargs = _BOOTSTRAP[name]
        group.add_argument(flag, **kwargs)


def compare_options(args: argparse.Namespace):
    """The :class:`~rolling_calib.experiment.flow.CompareOptions` of a command that runs and compares (``run``,
    ``sweep``): its question and bootstrap options (the defaults for those it does not take)."""
    from rolling_calib.experiment.flow import CompareOptions

    return CompareOptions(question=question_from_args(args), resampling=resampling_from_args(args))


def add_when_argument(parser: argparse.ArgumentParser) -> None:
    """``--when {windows,months}``: the blocks of the per-window verdicts."""
    parser.add_argument("--when", choices=WHEN_BLOCKS, default=WHEN_BLOCKS[0],
                        help="when was each pipeline better: the verdict over seeds inside each refit window of "
                             "the schedule (windows) or each calendar month (months), Holm across them, with the "
                             "test across windows and the fluctuation warning (default windows)")


def add_scoring_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``compare`` and ``report``: the pipelines, the calibration rule, the question, the
    bootstrap, how the backtests' returns accumulate and ``--when``."""
    add_calibration_arguments(parser)
    add_question_arguments(parser)
    add_bootstrap_arguments(parser)
    parser.add_argument("--accumulate", choices=list(ACCUMULATION), default="sum",
                        help="how the backtests' daily excess returns accumulate in annualized return and max "
                             "drawdown: sum (Qlib's risk_analysis default) or product (compounded)")
    add_when_argument(parser)


def open_store(path: str):
    """The :class:`~rolling_calib.execution.store.Store` a reading command opens, its MLflow files made its own.

    A moved or copied store's database is re-pointed at the store's own artifacts (a line on stderr
    says so), or, when that cannot be done here (read-only), a line says what MLflow then reads and
    the fix (:func:`~rolling_calib.tracking.relocation.repoint_note`).
    """
    from rolling_calib.execution.store import Store
    from rolling_calib.tracking.relocation import repoint_note

    store = Store.open(path)   # a store, named in the error when not
    if (note := repoint_note(store.root)) is not None:
        print(f"note: {note}", file=sys.stderr)
    return store


def score_with_options(args: argparse.Namespace, *, progress: bool):
    """:func:`~rolling_calib.analysis.scoring.score_store` with the rule and label options (else the store's)."""
    from rolling_calib.analysis.scoring import score_store

    store = open_store(args.store)
    calibration = calibration_from_args(args, store.manifest.calibration)
    return score_store(store, calibration=calibration, label=args.label, pipelines=args.pipelines, progress=progress)


def compare_across_stores(args: argparse.Namespace, stores: list[str]):
    """``compare --store A --store B``: the joined scores of the stores compared (the same days, the same label)."""
    from rolling_calib.analysis.across_stores import check_distinct, score_stores
    from rolling_calib.analysis.comparison import compare_store

    if args.pipelines is not None:
        raise ValueError("--pipelines: not with several --store (every pipeline of each store is compared)")
    check_distinct(stores)   # the same store twice compares it with itself
    opened = [open_store(path) for path in stores]
    calibration = calibration_from_args(args, opened[0].manifest.calibration)
    scores = score_stores(opened, calibration=calibration, label=args.label, progress=show_progress(args))
    return compare_store(scores, question=question_from_args(args), resampling=resampling_from_args(args),
                         accumulation=args.accumulate, when=getattr(args, "when", WHEN_BLOCKS[0]))


def score_and_compare(args: argparse.Namespace):
    """Score the store and compare pipelines with the scoring options of ``args`` (``compare``, ``report``)."""
    from rolling_calib.analysis.comparison import compare_store

    from rolling_calib.execution.inventory import record_last_verdicts

    scores = score_with_options(args, progress=show_progress(args))
    comparison = compare_store(scores, question=question_from_args(args), resampling=resampling_from_args(args),
                               accumulation=args.accumulate, when=getattr(args, "when", WHEN_BLOCKS[0]))
    record_last_verdicts(args.store, comparison.verdict_rows(), label=scores.label_scope,   # what ls shows
                         calibration=scores.calibration.describe())
    return scores, comparison


#: The stopping rule's options (the fields of :class:`~rolling_calib.core.stopping.StoppingRule`, defaults and
#: constraints taken from it): field -> (flag, metavar, converter, what it sets).
_STOPPING: dict[str, tuple[str, str | None, Any, str]] = {
    "first": ("--first", "N", int, "seeds per pipeline at the first look"),
    "batch": ("--batch", "N", int, "seeds added per look"),
    "max_seeds": ("--max-seeds", "N", int, "seed budget per pipeline: seeds 0..N-1"),
    "spending": ("--spending", None, str, "alpha spending over the looks"),
    "futility": ("--futility", "P", float, "stop a pair undetermined when its predictive chance to decide by "
                                           "--max-seeds is below P (0: never)"),
    "margin": ("--margin", "X", float, "equivalence margin in the metric's unit: a pair whose interval lies inside "
                                       "(-X, X) stops as equivalent"),
    "seed_variance": ("--seed-variance", None, str, "a race's seed variance per comparison: pair (the pair's own "
                                                   "seeds) or pooled (over the configurations a look compares; "
                                                   "valid when their seed variances are alike, docs/racing.md)"),
}
#: The rule's options only a race reads (``sweep``; ``run --until-decided`` runs the pairs' rule, which ignores them).
_RACE_ONLY = ("seed_variance",)
#: The rule's options that take one of a few names.
_STOPPING_CHOICES: dict[str, tuple[str, ...]] = {"spending": SPENDINGS, "seed_variance": SEED_VARIANCES}


def add_until_decided_arguments(parser: argparse.ArgumentParser, *, race: bool = False) -> None:
    """``--until-decided`` and its :class:`~rolling_calib.experiment.until_decided.UntilDecided` (``--decide-by``
    and the :class:`~rolling_calib.core.stopping.StoppingRule`'s options); the rule is checked whole at parse
    time (``--max-seeds`` at least ``--first``). ``race``: also ``--stops {race,pairs}``, race by default
    (``sweep``)."""
    if race:
        words = ("With --until-decided: train --first seeds per configuration, then --batch more per look; by default "
                 "(--stops race) the configurations race to a best set: each is compared with the best of the "
                 "others (Hsu's MCB, one-sided, 1 - --confidence shared over the configurations and spent over the "
                 "looks), eliminated once decided worse, and only configurations still in an unsettled pair get the "
                 "next look's seeds, until one is left, the set cannot shrink or --max-seeds is spent (recorded in "
                 "STORE/race.json); --stops pairs runs the pairs' rule instead (every pair decided, equivalent, "
                 "undecidable or out of --max-seeds; STORE/sequential.json).")
    else:
        words = ("With --until-decided: train --first seeds per pipeline, then --batch more only for pipelines in an "
                 "undecided pair, until every pair is decided, equivalent, undecidable or out of --max-seeds (error "
                 "rates held over the looks: 1 - --confidence spent over them); the path is recorded in "
                 "STORE/sequential.json.")
    group = parser.add_argument_group("compute to a verdict", words)
    group.add_argument("--until-decided", action="store_true",
                       help="stop training seeds once the pairs are decided (sweep: once its race of the "
                            "configurations ends, unless --stops pairs)")
    if race:
        group.add_argument("--stops", choices=["race", "pairs"], default="race",
                           help="race: race the configurations to a best set (default); pairs: the pairs' "
                                "sequential rule over the experiment's compare pairs (all pairs without them)")
    for name, (flag, metavar, convert, what) in _STOPPING.items():
        if name in _RACE_ONLY and not race:
            continue
        default = getattr(DEFAULT_RULE, name)
        shown = ": no equivalence stop" if name == "margin" and default is None else f" {default}"
        kwargs: dict[str, Any] = dict(default=default, help=f"{what} (default{shown})")
        if name in _STOPPING_CHOICES:
            kwargs["choices"] = _STOPPING_CHOICES[name]
        else:
            kwargs.update(type=checked(StoppingRule.CONSTRAINTS[name], convert), metavar=metavar)
        group.add_argument(flag, **kwargs)
    group.add_argument("--decide-by", choices=list(DECIDE_BY), default=DECIDE_BY[0],
                       help=f"metric that decides (default {DECIDE_BY[0]}; excess_return[_cost]: the workflow's "
                            "backtest's daily excess return without [with] cost)")
    if isinstance(parser, CommandParser):
        parser.checks.append(_stopping_rule_problem)


def _stopping_rule(args: argparse.Namespace) -> StoppingRule:
    return StoppingRule(**{name: getattr(args, name) for name in _STOPPING if hasattr(args, name)})


def _stopping_rule_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the rule the options make, in the options' words (None: nothing).

    >>> ns = argparse.Namespace(until_decided=True, first=5, batch=2, max_seeds=4, spending="hwang-shih-decani",
    ...                         futility=0.2, margin=None, seed_variance="pair")
    >>> _stopping_rule_problem(ns)
    '--max-seeds: expected an integer >= first (5), found 4'
    """
    if not getattr(args, "until_decided", False):
        return None
    try:
        _stopping_rule(args)
    except ValueError as exc:
        field, _, rest = str(exc).partition(": ")
        flag = _STOPPING[field][0] if field in _STOPPING else field
        return f"{flag}: {rest}"
    return None


def until_decided_from_args(args: argparse.Namespace):
    """The run's :class:`~rolling_calib.experiment.until_decided.UntilDecided` (None without ``--until-decided``)."""
    if not getattr(args, "until_decided", False):
        return None
    from rolling_calib.experiment.until_decided import UntilDecided

    return UntilDecided(rule=_stopping_rule(args), decide_by=args.decide_by, stops=getattr(args, "stops", "pairs"))
