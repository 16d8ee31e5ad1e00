"""The demo: synthetic market -> rolling grid -> verdicts -> report, in minutes on a laptop, in two cases.

:func:`run_demo` does what ``rolling-calib demo`` (the README's main command) does:

1. build the synthetic 25-stock minute market into ``OUT/qlib_data`` if it is absent
   (exactly the months ``workflows/demo.yaml``'s schedule needs), with a persistent predictable component
   (``workflows/demo_market.yaml``: oracle IC about 0.11) that the models learn;
2. for each of :data:`DEMO_CASES`, run the reduced but real schedule of its workflow -- two
   pipelines (weight decay 0 vs 1e-2) x 10 seeds (the file's ``rolling.seeds``) x two 3-month
   windows (window 1 fine-tunes window 0's model on the new months), six evaluation months -- on a
   local process pool, into its store; score it, give the verdicts and write its report:

   * case 1 (``workflows/demo.yaml``, ``OUT/store``, ``OUT/report``): trained and scored on the raw
     10-minute return (bp);
   * case 2 (``workflows/demo_csrank.yaml``, ``OUT/store_csrank``, ``OUT/report_csrank``): the same
     pair trained on Qlib's CSRankNorm label, as Qlib's benchmark workflows train, and scored (and
     reported) against the label the models learned (``rolling.label: auto``); then re-scored against
     the raw return, as Qlib's SignalRecord keeps it (both labels are stored: no retraining), where the
     scale-mismatch guard names the wrong comparison.

Each case's answer is handed to ``on_case`` as soon as the case is done (the CLI prints it then).

Re-running resumes: completed units are reused (the stores' config hashes match).

Usage (minutes of training; ``tests/cli/test_demo_command.py`` runs it at tiny size)::

    result = run_demo("demo_out", workers=2)
    [case.store.name for case in result.cases]      # ['store', 'store_csrank']
    result.cases[1].learned.warnings                 # the learned-label comparison: no scale mismatch
    result.cases[1].raw.warnings                     # against the raw return: the scale mismatch
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rolling_calib.config.workflows import packaged_workflow
from rolling_calib.core.question import DEFAULT_QUESTION, Question
from rolling_calib.core.resampling import DEFAULT as RESAMPLING_DEFAULTS
from rolling_calib.core.resampling import Resampling

__all__ = ["DEMO_CASES", "DEMO_CONFIG", "CaseResult", "DemoCase", "DemoResult", "ensure_demo_data", "run_demo"]

#: The demo's first experiment file: ``workflows/demo.yaml`` as installed with the package (importlib.resources).
DEMO_CONFIG = packaged_workflow("demo.yaml")
#: The demo's market parameters (``data synth --signal persistent --params`` this file).
DEMO_MARKET = packaged_workflow("demo_market.yaml")


@dataclass(frozen=True)
class DemoCase:
    """One case of the demo: its workflow file and where its store and report go (under the demo's directory)."""

    name: str
    title: str
    config: Path
    store: str
    report: str


#: The demo's two cases (see the module docstring).
DEMO_CASES = (
    DemoCase("raw_label", "Case 1: trained and scored on the raw 10-minute return", DEMO_CONFIG, "store", "report"),
    DemoCase("normalised_label", "Case 2: trained on CSRankNorm labels (as Qlib's benchmarks), scored against the "
             "label the models learned", packaged_workflow("demo_csrank.yaml"), "store_csrank", "report_csrank"),
)


@dataclass
class CaseResult:
    """What one case produced: its store, comparison, diagnosis and report, and (when the models learned a
    processed label) the comparison re-scored against that learned label."""

    case: DemoCase
    store: Path
    comparison: object  # rolling_calib.analysis.comparison.StoreComparison
    report: dict[str, Path]
    diagnosis: object = None  # rolling_calib.analysis.diagnostics.StoreDiagnosis
    learned: object = None  # StoreComparison against the learned label, when it differs from the raw one
    learned_diagnosis: object = None
    raw: object = None  # StoreComparison against the raw label, when the case was scored against the learned one
    tracking_uri: str | None = None
    tracking_message: str | None = None
    seconds: float = 0.0


@dataclass
class DemoResult:
    """What the demo produced: its data and one :class:`CaseResult` per case (``store``, ``comparison``,
    ``report``, ``diagnosis``, ``tracking_uri`` and ``tracking_message`` are the first case's)."""

    data_dir: Path
    cases: list[CaseResult]
    seconds: float
    data_built: bool
    settings: dict = field(default_factory=dict)

    @property
    def store(self) -> Path:
        return self.cases[0].store

    @property
    def comparison(self) -> object:
        return self.cases[0].comparison

    @property
    def report(self) -> dict[str, Path]:
        return self.cases[0].report

    @property
    def diagnosis(self) -> object:
        return self.cases[0].diagnosis

    @property
    def tracking_uri(self) -> str | None:
        return self.cases[0].tracking_uri

    @property
    def tracking_message(self) -> str | None:
        return self.cases[0].tracking_message


def ensure_demo_data(data_dir: Path, *, config: Path = DEMO_CONFIG, seed: int = 0, progress: bool = True,
                     market: Path | None = DEMO_MARKET, signal: str = "persistent") -> bool:
    """Build the synthetic store covering the demo schedule unless it exists with the demo's market; True if built.

    The market is ``data synth --signal SIGNAL --params MARKET`` (default: persistent,
    ``workflows/demo_market.yaml``): models learn it, so the first verdict ranks forecasting models. ``market``
    None: the signal's own parameters. A store built with other parameters is rebuilt.
    """
    import pandas as pd

    from data_prep import build_synthetic_store, qlib_store
    from data_prep.synthetic import load_market_params, market_params
    from rolling_calib.config.experiment import read_rolling

    params = load_market_params(market, signal=signal) if market is not None else market_params(signal)
    if (data_dir / "calendars" / "1min.txt").is_file() and \
            qlib_store.read_meta(data_dir).get("params") == params.as_dict():
        return False
    rolling = read_rolling(config)
    start = pd.Period(rolling.initial_train_start, "M").start_time.date()
    end = pd.Period(rolling.end, "M").end_time.date()
    build_synthetic_store(data_dir, start=str(start), end=str(end), seed=seed, params=params, progress=progress)
    return True


def run_demo(
    out_dir: str | Path = "demo_out",
    *,
    workers: int = 2,
    seeds: int | None = None,
    cases: Sequence[DemoCase] = DEMO_CASES,
    question: Question = DEFAULT_QUESTION,
    resampling: Resampling = RESAMPLING_DEFAULTS,
    progress: bool = True,
    track: bool = True,
    on_case: Callable[[CaseResult], None] | None = None,
    market: Path | None = DEMO_MARKET,
    signal: str = "persistent",
) -> DemoResult:
    """Run the whole demo; see the module docstring.

    Parameters
    ----------
    out_dir : path
        Receives ``qlib_data/`` and each case's store and report.
    workers : int
        Local worker processes (one torch thread each).
    seeds : int, optional
        Seeds per pipeline, >= 2 for a standard deviation (default: the file's ``rolling.seeds``,
        10 in ``workflows/demo.yaml`` as in docs/method.md §3.3).
    cases : sequence of DemoCase
        The cases to run (default :data:`DEMO_CASES`); the first case's file sizes the data.
    question : Question
        What the verdicts answer (target, confidence of every interval).
    resampling : Resampling
        Bootstrap settings of the pairwise accuracies' intervals.
    progress : bool
        Progress bars for data generation and units.
    track : bool
        Log each store to MLflow (``STORE/mlflow.db``).
    on_case : callable, optional
        Called with each case's result as soon as that case is done (before the next one trains).
    market, signal :
        The synthetic market (``data synth --signal SIGNAL --params MARKET``; ``market`` None: the
        signal's own parameters, e.g. ``signal="drifting"``, the market of demos before issue 28).
    """
    if seeds is not None and seeds < 2:
        raise ValueError(f"seeds: expected >= 2 (a spread needs two runs), found {seeds}")
    if not cases:
        raise ValueError("cases: expected at least one demo case, found none")
    t0 = time.perf_counter()
    out = Path(out_dir).resolve()
    data_dir = out / "qlib_data"
    built = ensure_demo_data(data_dir, config=Path(cases[0].config), progress=progress, market=market, signal=signal)
    results = []
    for case in cases:
        results.append(_run_case(case, out, data_dir, workers=workers, seeds=seeds, question=question,
                                 resampling=resampling, progress=progress, track=track))
        if on_case is not None:
            on_case(results[-1])
    return DemoResult(data_dir=data_dir, cases=results, seconds=time.perf_counter() - t0, data_built=built,
                      settings={"workers": workers, "n_boot": resampling.n_boot, "seeds": seeds,
                                "question": question.to_dict(), "resampling": resampling.to_dict()})


def _run_case(case: DemoCase, out: Path, data_dir: Path, *, workers: int, seeds: int | None, question: Question,
              resampling: Resampling, progress: bool, track: bool) -> CaseResult:
    """Train, score, compare and report one case; re-score against the learned label when it differs."""
    from rolling_calib.config import load_experiment
    from rolling_calib.execution.factory import ExecutorOptions
    from rolling_calib.experiment.flow import CompareOptions, RunOptions, run_experiment

    t0 = time.perf_counter()
    experiment = load_experiment(case.config, overrides={"qlib_init.provider_uri": str(data_dir)})
    if seeds is None and len(experiment.rolling.seeds) < 2:
        raise ValueError(f"{case.config}: rolling.seeds: expected >= 2 seeds (a spread needs two runs), "
                         f"found {len(experiment.rolling.seeds)}")
    outcome = run_experiment(experiment, RunOptions(
        store=out / case.store, seeds=seeds, progress=progress, track=track,
        compare=CompareOptions(question=question, resampling=resampling),
        report=out / case.report, report_title=case.title, executor=ExecutorOptions(workers=workers, threads=1)))
    learned, learned_diagnosis = _learned(outcome, question=question, resampling=resampling, progress=progress)
    raw = _raw(outcome, question=question, resampling=resampling, progress=progress)
    return CaseResult(case=case, store=outcome.plan.store, comparison=outcome.comparison, report=outcome.report or {},
                      diagnosis=outcome.diagnosis, learned=learned, learned_diagnosis=learned_diagnosis, raw=raw,
                      tracking_uri=outcome.tracking_uri, tracking_message=outcome.tracking_message,
                      seconds=time.perf_counter() - t0)


def _raw(outcome, *, question: Question, resampling: Resampling, progress: bool) -> object:
    """The comparison against the raw label, when the case was scored against the learned one (else None)."""
    from rolling_calib.analysis.comparison import compare_store
    from rolling_calib.analysis.scoring import score_store

    scores = outcome.scores
    if scores is None or scores.label.kind != "learn":
        return None
    raw = score_store(outcome.plan.store, calibration=scores.calibration, label="raw", pipelines=scores.pipelines,
                      progress=progress)
    return compare_store(raw, question=question, resampling=resampling)


def _learned(outcome, *, question: Question, resampling: Resampling, progress: bool) -> tuple[object, object]:
    """The comparison and diagnosis against the learned label, when the models learned a processed one."""
    from rolling_calib.analysis.comparison import compare_store
    from rolling_calib.analysis.diagnostics import diagnose_store
    from rolling_calib.analysis.scoring import score_store

    scores = outcome.scores
    if scores is not None and scores.label.kind == "learn":   # scored against it already (rolling.label: auto)
        return outcome.comparison, outcome.diagnosis
    if scores is None or all(
            lab.unit != "normalised" for lab in scores.learned_labels.values()):
        return None, None
    learned = score_store(outcome.plan.store, calibration=scores.calibration, label="learn",
                          pipelines=scores.pipelines, progress=progress)
    return (compare_store(learned, question=question, resampling=resampling),
            diagnose_store(outcome.plan.store, scores=learned, question=question, resampling=resampling))
