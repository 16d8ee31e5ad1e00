"""The one orchestration path: plan -> execute -> score -> compare -> report -> track.

The store is scored once, with the experiment's calibration rule and label, and compared once
(:class:`CompareOptions`); the report (when asked for) and tracking receive those scores and that
comparison (neither scores nor compares on its own), so MLflow, ``compare`` and the report show
the same numbers, and MLflow holds the report as artifacts of its comparison run.

``rolling-calib run``, ``rolling-calib sweep`` and ``rolling-calib demo`` all call
:func:`run_experiment`; they differ only in what they do with its result (print a
run summary, rank a grid, compare a pair and write the report).

Usage (trains; ``tests/cli`` and ``tests/execution`` run it on tiny stores)::

    result = run_experiment(load_experiment("workflows/demo.yaml"),
                            RunOptions(store=Path("runs/demo"), executor=ExecutorOptions(workers=2)))
    result.summary.ran, len(result.scores.runs)       # (40, 20)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from rolling_calib.analysis.comparison import StoreComparison, compare_store
from rolling_calib.analysis.scoring import StoreScores, score_store
from rolling_calib.config.experiment import ExperimentConfig
from rolling_calib.core.question import DEFAULT_QUESTION, Question
from rolling_calib.core.resampling import DEFAULT as RESAMPLING_DEFAULTS
from rolling_calib.core.resampling import Resampling
from rolling_calib.execution.factory import ExecutorOptions, make_executor
from rolling_calib.execution.lock import StoreLock, check_store_path
from rolling_calib.execution.plan_summary import PlanSummary, format_plan, plan_summary
from rolling_calib.execution.runner import RunPlan, RunSummary, plan_run, run_plan
from rolling_calib.experiment.until_decided import UntilDecided, run_until_decided

if TYPE_CHECKING:
    from rolling_calib.tracking import TrackingOutcome

__all__ = ["CompareOptions", "ExperimentResult", "RunOptions", "UntilDecided", "describe_plan", "plan_experiment",
           "run_experiment", "track"]


@dataclass(frozen=True, kw_only=True)
class CompareOptions:
    """How the runs are compared after scoring (:func:`~rolling_calib.analysis.comparison.compare_store`).

    The pairs are the experiment's ``compare:`` pairs, else every pair. ``question`` (what the verdicts
    answer; also what the stops of a run ``--until-decided`` answer) and ``resampling`` (the bootstrap of
    the pairwise accuracies) are those of ``rolling-calib compare`` (same defaults), so the verdicts
    tracking logs are the ones ``compare`` prints.
    """

    question: Question = DEFAULT_QUESTION
    resampling: Resampling = RESAMPLING_DEFAULTS


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """Where and how an experiment runs.

    Attributes
    ----------
    store : path
        The result store directory.
    pipelines : sequence of str or None
        A subset of the experiment's pipelines (default: all).
    seeds : int, sequence of int or None
        ``N`` means seeds ``0..N-1`` (default: the experiment's ``rolling.seeds``).
    executor : ExecutorOptions
        Local pool or Ray, workers, threads per unit, GPUs per unit.
    tracking_uri : str or None
        MLflow tracking URI (default ``sqlite:///STORE/mlflow.db``); ignored when ``track`` is false.
    track : bool
        Log the store to MLflow after the run.
    score : bool
        Score every run (QL, CQL) after execution (tracking scores them too when this is off:
        ``ExperimentResult.scores`` holds them whenever they were computed).
    progress : bool
        Progress bars.
    compare : CompareOptions or None
        Compare the pipelines after scoring (whenever the runs are scored); tracking logs the
        verdicts, intervals, IC and warnings. None: no comparison.
    report : path or None
        Write the report (:func:`~rolling_calib.reporting.document.write_report`) into this
        directory before tracking (which logs it as artifacts); needs ``compare``.
    until_decided : UntilDecided or None
        Train seeds in batches until every pair is decided, or (``stops="race"``) until the race of the
        pipelines to a best set ends (:mod:`rolling_calib.experiment.until_decided`,
        :mod:`rolling_calib.experiment.race_live`; the race's record is ``ExperimentResult.race``;
        its ``rule.max_seeds`` are the run's seeds, so ``seeds`` must be None); the stops answer
        ``compare.question`` (the default question when ``compare`` is None).
    """

    store: Path
    pipelines: Sequence[str] | None = None
    seeds: int | Sequence[int] | None = None
    executor: ExecutorOptions = field(default_factory=ExecutorOptions)
    tracking_uri: str | None = None
    track: bool = True
    score: bool = True
    progress: bool = True
    show_plan: bool = False  # print the plan (units, windows, rows, estimate: :func:`plan_experiment`) to stderr first
    compare: CompareOptions | None = field(default_factory=CompareOptions)
    report: Path | None = None
    until_decided: UntilDecided | None = None
    report_title: str | None = None   # what the report is (the demo's case); its label is added to it

    def __post_init__(self) -> None:
        check_store_path(self.store)  # a regular file or a read-only file system: one line before anything runs


@dataclass
class ExperimentResult:
    """What one pass of :func:`run_experiment` produced."""

    config: ExperimentConfig
    plan: RunPlan
    summary: RunSummary
    scores: StoreScores | None
    tracking_uri: str | None  # None: not tracked, or tracking failed (see tracking_message)
    tracking_message: str | None = None  # a repaired tracking database, or why tracking failed
    comparison: StoreComparison | None = None
    diagnosis: object = None  # rolling_calib.analysis.diagnostics.StoreDiagnosis, when a report was written
    report: dict[str, Path] | None = None  # the report's files (name -> path), when written
    race: object = None  # rolling_calib.analysis.race_record.RaceRecord, when the run raced (--until-decided, race)


def track(scores: StoreScores, *, tracking_uri: str | None, experiment_name: str,
          comparison: StoreComparison | None = None, report: dict[str, Path] | None = None) -> TrackingOutcome:
    """Log ``scores`` (of ``scores.store``), its comparison and report to MLflow (SQLite in the store by default)
    without ever raising.

    The results are in the store already, so a failed logging (full disk, locked or broken
    database, any MLflow error) does not fail the run: the outcome has ``uri=None`` and a
    message saying how to log later; a broken SQLite database is repaired or re-created first.
    """
    from rolling_calib.tracking import safe_log_store

    return safe_log_store(scores, comparison=comparison, report=report, tracking_uri=tracking_uri,
                          experiment=experiment_name)


def _untracked(store: Path, exc: Exception) -> TrackingOutcome:
    """The outcome of a run whose scores (needed for tracking only) could not be computed: said, not raised."""
    from rolling_calib.tracking import TrackingOutcome

    return TrackingOutcome(uri=None, ok=False, message=f"tracking skipped: the store could not be scored ({exc}); "
                                                       f"results are in {store}")


def describe_plan(plan: RunPlan, options: RunOptions) -> PlanSummary:
    """What ``plan`` will do on its store (:func:`~rolling_calib.execution.plan_summary.plan_summary`); under
    ``--until-decided`` the grid is the worst case and the summary says what the first look trains."""
    from rolling_calib.qlib_adapter.session import store_calendar

    summary = plan_summary(plan, store_calendar(plan.qlib_init), workers=options.executor.workers or 1)
    if options.until_decided is not None:
        rule = options.until_decided.rule
        first = min(rule.first, rule.max_seeds)
        units = len(plan.pipelines) * first * len(plan.windows)
        if options.until_decided.stops == "race":
            K = len(plan.pipelines)
            words = (f"a race of the {K} configurations to a best set (each against the best, Hsu's MCB; one-sided "
                     f"{options.until_decided.decide_by.upper()} bounds at (1 - confidence) / {K - 1} spent over "
                     f"the looks): the grid above ({rule.max_seeds} seeds, {K * rule.max_seeds} seeds in all) is "
                     f"the worst case; the first look needs seeds 0..{first - 1} of every configuration ({units} "
                     f"unit(s)), then {rule.batch} more per look only for configurations that can still be eliminated "
                     f"and the ones most likely to eliminate them")
        else:
            words = (f"the grid above ({rule.max_seeds} seeds) is the worst case; the first look needs seeds "
                     f"0..{first - 1} of every pipeline ({units} unit(s)), then {rule.batch} more per look only for "
                     f"pipelines in an undecided pair, decided by {options.until_decided.decide_by.upper()}")
        summary = replace(summary, until_decided=words)
    return summary


def _plan(config: ExperimentConfig, options: RunOptions) -> RunPlan:
    """The run's grid: under ``--until-decided`` the seeds 0..max-1 of its rule (``--seeds`` refused)."""
    until = options.until_decided
    if until is not None and options.seeds is not None:
        raise ValueError("--seeds: --until-decided trains seeds 0..N-1 of --max-seeds N; drop --seeds")
    plan = plan_run(config, store=options.store, pipelines=options.pipelines,
                    seeds=until.rule.max_seeds if until is not None else options.seeds,
                    n_threads=options.executor.threads, workers=options.executor.workers or 1)
    if until is not None and len(plan.pipelines) < 2:
        raise ValueError(f"--until-decided: stops once the pairs are decided, and {len(plan.pipelines)} pipeline(s) "
                         f"({', '.join(p.name for p in plan.pipelines)}) make no pair; name two or more "
                         f"(--pipelines), or drop --until-decided to train the seeds")
    return plan


def plan_experiment(config: ExperimentConfig, options: RunOptions) -> PlanSummary:
    """The plan :func:`run_experiment` would run, described; nothing is trained or written (``--dry-run``)."""
    return describe_plan(_plan(config, options), options)


def run_experiment(config: ExperimentConfig, options: RunOptions) -> ExperimentResult:
    """Plan the grid, execute the units not yet in the store, score the runs, track them.

    Parameters
    ----------
    config : ExperimentConfig
        A validated experiment (:func:`rolling_calib.config.load_experiment`, or a sweep's grid).
    options : RunOptions

    Returns
    -------
    ExperimentResult

    Raises
    ------
    ValueError
        Bad pipelines or seeds (before any training).
    rolling_calib.execution.executors.UnitFailedError
        Units failed (completed ones stay in the store).
    """
    until = options.until_decided
    race = None
    plan = _plan(config, options)
    if options.show_plan:
        print(format_plan(describe_plan(plan, options), notes=not options.progress), file=sys.stderr, flush=True)
    executor = make_executor(options.executor)
    with StoreLock(plan.store):  # one writer from the first unit to the last tracking row
        _own_mlflow_files(plan.store, progress=options.progress)
        if until is None:
            summary = run_plan(plan, executor=executor, progress=options.progress)
        else:
            question = (options.compare or CompareOptions()).question
            summary, record = run_until_decided(config, plan, until=until, executor=executor, question=question,
                                                progress=options.progress)
            race = record if until.stops == "race" else None
        scores = tracked = None
        if options.score or options.track:
            try:
                scores = score_store(plan.store, calibration=config.rolling.calibration, label=config.rolling.label,
                                     pipelines=[p.name for p in plan.pipelines], progress=options.progress)
            except ValueError as exc:
                if options.score:
                    raise
                tracked = _untracked(plan.store, exc)   # scores for tracking only: tracking never fails a run
        comparison = _compare(scores, options.compare)
        diagnosis, report = _report(plan.store, scores, comparison, options.report, title=options.report_title)
        if options.track and scores is not None:
            tracked = track(scores, tracking_uri=options.tracking_uri, experiment_name=config.experiment_name,
                            comparison=comparison, report=report)
    return ExperimentResult(config=config, plan=plan, summary=summary, scores=scores,
                            tracking_uri=tracked.uri if tracked else None,
                            tracking_message=tracked.message if tracked else None,
                            comparison=comparison, diagnosis=diagnosis, report=report, race=race)


def _own_mlflow_files(store: Path, *, progress: bool) -> None:
    """A moved or copied store: its MLflow database re-pointed at its own files before new recorders log into it."""
    from rolling_calib.tracking.relocation import repoint_store_db

    moved = repoint_store_db(store)
    if progress and moved is not None:
        print(f"note: {moved.line()}", file=sys.stderr)


def _compare(scores: StoreScores | None, options: CompareOptions | None) -> StoreComparison | None:
    """The comparison of the scored pipelines (None without scores or options)."""
    if scores is None or options is None:
        return None
    return compare_store(scores, question=options.question, resampling=options.resampling)


def _report(store: Path, scores: StoreScores | None, comparison: StoreComparison | None,
            out: Path | None, *, title: str | None = None) -> tuple[object, dict[str, Path] | None]:
    """``(diagnosis, report files)``: the report written into ``out`` (``(None, None)`` when not asked for).

    The diagnosis (can calibration help?) needs a pipeline with two seeds; without one the
    report goes without it.
    """
    if out is None or scores is None:
        return None, None
    if comparison is None:
        raise ValueError("report: needs the comparison (RunOptions.compare)")
    from rolling_calib.analysis.diagnostics import diagnose_store
    from rolling_calib.reporting.document import write_report

    enough = scores.runs.groupby("pipeline")["seed"].nunique().max() >= 2
    diagnosis = diagnose_store(store, scores=scores, question=comparison.question,
                               resampling=comparison.resampling) if enough else None
    return diagnosis, write_report(scores, comparison, Path(out), diagnosis=diagnosis, title=title)
