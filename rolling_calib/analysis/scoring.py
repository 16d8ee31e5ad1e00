"""Score a result store: QL and the monthly rolling CQL per run, then compare pipelines.

A *run* is one seed of one pipeline: its windows' predictions merged over the
whole evaluation period. For every run :func:`score_store` computes, through
:func:`rolling_calib.core.metrics.rolling_calibrated_quadratic_loss` (docs/method.md §2.2)::

    c_k  = mean over month k-1 of (y - p)            (pooled over instruments by default)
    CQL  = mean over months 2..K of (y - (p + c_k))^2
    QL   = mean over months 1..K of (y - p)^2        (``ql``)
    QL'  = mean over months 2..K of (y - p)^2        (``ql_scored``: same rows as CQL)

and, through :func:`rolling_calib.core.ranking_ic.daily_information_coefficients`, IC, ICIR and
Rank IC (mean over test dates of the cross-sectional Pearson / Spearman correlation of
prediction and label; ICIR = mean / std of the daily IC), and per trading day the sums the
verdicts resample (:mod:`rolling_calib.analysis.panels`). Where the workflow has a backtest, the
run's daily backtest report (:func:`rolling_calib.execution.reader.read_backtest`: strategy,
benchmark and cost over the joined windows) gives its mean daily excess return without and with
cost (``excess_return``, ``excess_return_cost``; higher is better) and the days they are judged on.
:func:`rolling_calib.analysis.comparison.compare_store` turns the scores into the comparison of
the ``compare`` command.

The calibration rule is one :class:`~rolling_calib.core.calibration.Calibration` and the label
one :class:`~rolling_calib.core.label.Label` (which kind, what it is, its unit), both carried by
the results. Runs are read by :mod:`rolling_calib.execution.reader` (the one store reader); this
module calls the pure metric functions and knows nothing of Qlib or torch.

Example
-------
>>> scores = score_store(example_store, progress=False)    # a store of 2 pipelines x 3 seeds
>>> scores.runs[["pipeline", "seed"]].value_counts().sort_index().tolist()
[1, 1, 1, 1, 1, 1]
>>> list(scores.periods["period"].unique())
['2018-01', '2018-02', '2018-03', '2018-04']
>>> scores.days.groupby("pipeline")["seed"].nunique().tolist()     # per-day summaries of every run
[3, 3]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rolling_calib.analysis.panels import DAY_COLUMNS, SeedSpreadCollector, run_days
from rolling_calib.core import metrics
from rolling_calib.core.calibration import Calibration
from rolling_calib.core.guards import ConstantCheck, SeedSpread
from rolling_calib.core.label import LABEL_CHOICE, Label, describe_choice
from rolling_calib.core.ranking_ic import (
    DailyIC,
    PreparedLabels,
    daily_information_coefficients,
    prepare_labels,
)
from rolling_calib.core.schedule import CoverageError
from rolling_calib.core.validation import (
    check,
)
from rolling_calib.analysis.integrity import store_notes
from rolling_calib.execution import store as st
from rolling_calib.execution.reader import (
    MissingLabelError,
    MissingValidationError,
    RunData,
    read_backtest,
    read_run,
)
from rolling_calib.core.metric_table import LOSS_METRICS, SCORE_METRICS

__all__ = [
    "RUN_COLUMNS",
    "PERIOD_COLUMNS",
    "METRICS",
    "RunScore",
    "StoreScores",
    "rolling_cql",
    "score_run",
    "score_store",
]

RUN_COLUMNS = ("pipeline", "seed", "ql", "ql_scored", "cql", "n_all", "n_scored", "ic", "icir", "rank_ic",
               "cql_refit_first", "cql_rest", "ql_refit_first", "ql_rest", "excess_return", "excess_return_cost")
#: Per (pipeline, seed, date) of a run's backtest: the daily report over its joined windows.
BACKTEST_COLUMNS = ("pipeline", "seed", "date", "return", "bench", "cost", "turnover", "excess_return",
                    "excess_return_cost")
PERIOD_COLUMNS = ("pipeline", "seed", "period", "start", "rows", "bias", "ql", "cql", "scored")
#: Losses compared per pair (:data:`~rolling_calib.core.metric_table.METRIC_TABLE`); ``ql`` (all months) is the
#: ground truth that sets the direction.
METRICS = LOSS_METRICS
#: Ranking metrics per run (higher is better), compared beside QL and CQL.
IC_METRICS = SCORE_METRICS


@dataclass
class StoreScores:
    """Per-run and per-period scores of a store.

    Attributes
    ----------
    store : Path
    runs : DataFrame
        One row per (pipeline, seed): ``pipeline, seed, ql, ql_scored, cql, n_all, n_scored``.
    periods : DataFrame
        One row per (pipeline, seed, period): ``pipeline, seed, period, start, rows, bias,
        ql, cql, scored`` (plus ``end`` and ``mean_residual``); ``bias`` is the ``c_k``
        applied in that period (NaN in the first).
    calibration : Calibration
        The calibration rule the runs were scored with.
    label : Label
        The label they were scored against (its kind, expression, processors and unit).
    incomplete : list of str
        Runs left out because a unit is missing or stale (``"pipeline/seed3: w01 missing"``).
    compare : list of (str, str)
        Pairs recorded in the store manifest (from the experiment's ``compare:``).
    notes : list of str
        What the reader should know (mixed configurations, rows without the label, unknown units).
    days : DataFrame
        One row per (pipeline, seed, trading day): :data:`~rolling_calib.analysis.panels.DAY_COLUMNS`
        (losses, correlations and moments per day; what the verdicts resample).
    seed_spread : dict
        Per pipeline, how different its seeds' predictions of the same rows are
        (:class:`~rolling_calib.core.guards.SeedSpread`; None when unknown).
    learned_labels : dict
        Per pipeline, the label its model learned (the ``learn`` description).
    models : dict
        Per pipeline, the model class (``module.Class``) from the recorded task.
    label_choice : str
        The label asked for (``auto``, ``raw`` or ``learn``; ``label`` is the kind it resolved to).
    constant : dict
        Per pipeline, a :class:`~rolling_calib.core.guards.ConstantCheck` when every run predicts one value
        per timestamp (the model learned nothing), else None.
    identical : list of (str, str)
        Pairs of pipelines whose runs of the same seed rank the same rows the same way every day
        (identical predictions, or predictions that differ by float noise or a monotone map).
    backtests : DataFrame
        One row per (pipeline, seed, day) of the runs' backtests (:data:`BACKTEST_COLUMNS`; empty
        when the workflow has none).
    backtest_specs : dict
        Per pipeline with a backtest, what it is (``BacktestSpec.to_dict()``: strategy, benchmark,
        cost model, where in the task it comes from).
    """

    store: Path
    runs: pd.DataFrame
    periods: pd.DataFrame
    calibration: Calibration = field(default_factory=Calibration)
    label: Label = field(default_factory=lambda: Label(kind="raw"))
    incomplete: list[str] = field(default_factory=list)
    compare: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    days: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(DAY_COLUMNS)))
    seed_spread: dict[str, SeedSpread | None] = field(default_factory=dict)
    learned_labels: dict[str, Label] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    label_choice: str = ""

    @property
    def label_scope(self) -> str:
        """The scored label in words, and why ``--label auto`` chose it (the scope line and the headline)."""
        return describe_choice(self.label, self.label_choice)
    constant: dict[str, ConstantCheck | None] = field(default_factory=dict)
    identical: list[tuple[str, str]] = field(default_factory=list)
    identical_values: list[tuple[str, str]] = field(default_factory=list)   # of ``identical``: the same values too
    backtests: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(BACKTEST_COLUMNS)))
    backtest_specs: dict[str, dict] = field(default_factory=dict)

    @property
    def pipelines(self) -> list[str]:
        """Pipelines with at least one complete run, in store order."""
        return list(dict.fromkeys(self.runs["pipeline"]))

    @property
    def seeds_per_pipeline(self) -> dict[str, int]:
        """Complete runs (seeds) per pipeline, in store order."""
        counts = self.runs.groupby("pipeline", sort=False)["seed"].nunique()
        return {str(n): int(counts[n]) for n in self.pipelines}

    def scores_of(self, pipeline: str) -> dict[str, np.ndarray]:
        """``{metric: per-seed values}`` of one pipeline, seeds ascending."""
        rows = self.runs[self.runs["pipeline"] == pipeline].sort_values("seed")
        if rows.empty:
            raise ValueError(f"pipeline {pipeline!r}: no complete runs in {self.store} (have: {', '.join(self.pipelines)})")
        return {m: rows[m].to_numpy(dtype=float) for m in (*METRICS, *IC_METRICS) if m in rows}


def rolling_cql(run: RunData, calibration: Calibration) -> metrics.RollingCQL:
    """:func:`~rolling_calib.core.metrics.rolling_calibrated_quadratic_loss` of one run (refit periods flagged).

    ``source='validation'`` needs the run read with its validation predictions (``read_run(..., validation=True)``).
    """
    t, v = run.test, run.valid
    per = calibration.bias == "per_instrument"
    extra: dict[str, Any] = {}
    if calibration.source == "validation":
        if v is None:
            raise MissingValidationError("source='validation': the run was read without its validation predictions")
        extra = dict(valid_predictions=v.prediction, valid_labels=v.label, valid_windows=v.window,
                     valid_instruments=v.instruments if per else None)
    return metrics.rolling_calibrated_quadratic_loss(
        t.prediction, t.label, t.datetime, calibration=calibration, instruments=t.instruments if per else None,
        windows=t.window, **extra)


def score_store(
    store: st.Store | str | Path,
    *,
    calibration: Calibration | None = None,
    label: str | None = None,
    pipelines: Sequence[str] | None = None,
    progress: bool = False,
) -> StoreScores:
    """Score every complete run of a store.

    Parameters
    ----------
    store : Store or path
        A store written by :func:`rolling_calib.execution.runner.run_plan` (a path is opened).
    calibration : Calibration, optional
        The calibration rule (docs/method.md §2.2: monthly periods, one pooled bias from the previous
        month). Default: the rule the store's experiment declared (its ``rolling.calibration``).
        ``source='validation'`` needs the windows' validation predictions (stores written since
        they are kept; older stores are refused, naming the fix).
    label : {"raw", "learn"}, optional
        The label to score against (``"auto"``: the learned one when a learn processor changed it,
        else the raw one). Default: the store's ``rolling.label``. Units store both
        where they differ, so the other kind is scored without retraining; a store whose units
        hold one label only refuses the other, naming the fix.
    pipelines : sequence of str, optional
        Restrict to these pipelines (default: all in the manifest).
    progress : bool
        Show a tqdm bar over runs (one run = all windows of one seed, read from Parquet).

    Returns
    -------
    StoreScores

    Raises
    ------
    ValueError
        Unknown pipelines, a label kind the units do not hold, or no complete run at all.
    """
    store = st.Store.of(store)
    calibration = store.manifest.calibration if calibration is None else calibration
    if not isinstance(calibration, Calibration):
        raise ValueError(f"calibration: expected a Calibration, found {type(calibration).__name__} {calibration!r}")
    choice = check("label", store.manifest.label_kind if label is None else label, LABEL_CHOICE)
    names = store.select(pipelines)
    kind = store.label_kind(names, choice)
    scored = _score_runs(store, names, calibration=calibration, kind=kind, progress=progress)
    scores = _store_scores(store, names, scored, calibration=calibration, kind=kind)
    scores.label_choice = choice
    scores.notes[:0] = store_notes(store, names)   # data changed after training, unchecked units
    return scores


@dataclass(frozen=True)
class RunScore:
    """One run's scores (:func:`score_run`): its :data:`RUN_COLUMNS` row, period table and per-day summaries."""

    row: dict[str, Any]
    table: pd.DataFrame
    days: pd.DataFrame
    unlabelled: int
    test: Any   # the run's test arrays (:class:`~rolling_calib.execution.reader.RunArrays`)
    daily: DailyIC | None = None   # its IC pass (whose prediction ranges give the constant-prediction check)


def score_run(store: st.Store | str | Path, name: str, seed: int, *, calibration: Calibration, kind: str,
              cache: dict[str, PreparedLabels] | None = None) -> RunScore:
    """Read and score one run (``name``, ``seed``): what :func:`score_store` computes for each of its runs.

    ``store`` is the store's handle (a path is opened); ``kind`` the label kind already resolved
    (``raw`` or ``learn``); ``cache`` keeps the last run's prepared labels across calls
    (:func:`daily_ic`). The reader's errors propagate (a missing or stale unit is a ``ValueError``).
    """
    store = st.Store.of(store)
    data = read_run(store, name, seed, label=kind, validation=calibration.source == "validation")
    backtest = _run_backtest(store, name, seed, _ScoredRuns([], [], []))
    return _score_data(name, seed, data, calibration, cache, backtest=backtest)


def _score_data(name: str, seed: int, data: RunData, calibration: Calibration,
                cache: dict[str, PreparedLabels] | None, *, backtest: pd.DataFrame | None = None) -> RunScore:
    """The scores of one run already read (``backtest``: its daily backtest report, None without one)."""
    result = rolling_cql(data, calibration)
    t = data.test
    daily = daily_ic(t.prediction, t.label, t.datetime, cache=cache)
    summary = daily.summary()
    return RunScore(row=_run_row(name, seed, result, {"ic": summary.ic, "icir": summary.icir,
                                                      "rank_ic": summary.rank_ic, **_excess(backtest)}),
                    table=result.table.assign(pipeline=name, seed=seed),
                    days=run_days(name, seed, result, t, daily, backtest=backtest), unlabelled=data.test.dropped,
                    test=t, daily=daily)
@dataclass
class _ScoredRuns:
    """What :func:`_score_runs` gives: a :data:`RUN_COLUMNS` row and a period table per complete run."""

    rows: list[dict[str, Any]]
    tables: list[pd.DataFrame]
    incomplete: list[str]
    unlabelled: int = 0   # rows left out because they have no value of the label scored
    days: list[pd.DataFrame] = field(default_factory=list)
    spread: SeedSpreadCollector = field(default_factory=SeedSpreadCollector)
    backtests: list[pd.DataFrame] = field(default_factory=list)
    missing_backtests: list[str] = field(default_factory=list)   # runs whose backtest is missing, stale or outdated


def _score_runs(store: st.Store, names: Sequence[str], *, calibration: Calibration, kind: str,
                progress: bool) -> _ScoredRuns:
    """Read and score every recorded seed of ``names``; a run with a missing or stale unit is listed as incomplete."""
    from tqdm.auto import tqdm

    scored = _ScoredRuns(rows=[], tables=[], incomplete=[])
    labels: dict[str, PreparedLabels] = {}   # the last run's labels: the next seed usually has the same
    runs = [(name, seed) for name in names for seed in store.pipeline(name).seeds]
    validation = calibration.source == "validation"
    for name, seed in tqdm(runs, desc="scoring runs", unit="run", disable=not progress, leave=False):
        try:
            data = read_run(store, name, seed, label=kind, validation=validation)
        except (CoverageError, st.CorruptStoreFileError, MissingLabelError, MissingValidationError):
            raise  # damage, or a label / validation predictions the store lacks: stop, naming the store and the fix
        except ValueError as exc:  # a missing or stale unit: report the run as incomplete
            scored.incomplete.append(f"{name}/seed{seed}: {exc}")
            continue
        backtest = _run_backtest(store, name, seed, scored)
        run = _score_data(name, seed, data, calibration, labels, backtest=backtest)
        scored.unlabelled += run.unlabelled
        scored.rows.append(run.row)
        scored.tables.append(run.table)
        scored.days.append(run.days)
        scored.spread.add(name, run.test, seed, run.daily)   # the constant-prediction check from the IC pass
    return scored


def _run_backtest(store: st.Store, name: str, seed: int, scored: _ScoredRuns) -> pd.DataFrame | None:
    """The run's daily backtest report (None: the pipeline has none, or it is missing: noted in ``scored``)."""
    try:
        frame = read_backtest(store, name, seed)
    except st.CorruptStoreFileError:
        raise   # damage: stop, naming the file and the fix
    except ValueError as exc:   # missing, stale or outdated: scored without it, and said
        scored.missing_backtests.append(str(exc))
        return None
    if frame is not None:
        scored.backtests.append(frame.assign(pipeline=name, seed=int(seed))[list(BACKTEST_COLUMNS)])
    return frame


def _excess(backtest: pd.DataFrame | None) -> dict[str, float]:
    """The run's mean daily excess return without and with cost (NaN without a backtest)."""
    if backtest is None or backtest.empty:
        return {"excess_return": np.nan, "excess_return_cost": np.nan}
    return {"excess_return": float(backtest["excess_return"].mean()),
            "excess_return_cost": float(backtest["excess_return_cost"].mean())}


def _run_row(name: str, seed: int, result: metrics.RollingCQL, ic: dict[str, float]) -> dict[str, Any]:
    """One :data:`RUN_COLUMNS` row: the run's QL/CQL ``result`` and its IC metrics (:func:`daily_ic`)."""
    row: dict[str, Any] = {
        "pipeline": name,
        "seed": seed,
        "ql": result.ql_all,
        "ql_scored": result.ql_scored,
        "cql": result.cql,
        "n_all": result.n_all,
        "n_scored": result.n_scored,
        "cql_refit_first": result.cql_refit_first,
        "cql_rest": result.cql_rest,
        "ql_refit_first": result.ql_refit_first,
        "ql_rest": result.ql_rest,
    }
    row.update(ic)
    return row


def _store_scores(store: st.Store, names: Sequence[str], scored: _ScoredRuns, *,
                  calibration: Calibration, kind: str) -> StoreScores:
    """Assemble :class:`StoreScores` from the scored runs (refusing a store with no complete run)."""
    if not scored.rows:
        detail = "; ".join(scored.incomplete[:5]) or "no seeds recorded"
        raise ValueError(f"{store.root}: no complete run to score ({detail})")
    periods = pd.concat(scored.tables, ignore_index=True)
    ordered = list(PERIOD_COLUMNS) + [c for c in periods.columns if c not in PERIOD_COLUMNS]
    pairs = store.pairs(names)
    scored_names = [n for n in names if any(r["pipeline"] == n for r in scored.rows)]
    label, label_notes = _scored_label(store, scored_names, kind)
    notes = _mixed_config_notes(store, scored_names) + label_notes
    refused = {n: store.pipeline(n).backtest.get("refused") for n in scored_names}
    notes += [f"{n}: no backtest figures: the backtest was not run ({why})" for n, why in refused.items() if why]
    if scored.missing_backtests:
        notes.append(f"{len(scored.missing_backtests)} run(s) scored without their backtest (e.g. "
                     f"{scored.missing_backtests[0]}); run 'rolling-calib run' with the same config to backtest them")
    if scored.unlabelled:
        notes.append(f"{scored.unlabelled} prediction row(s) without a value of the {kind} label (e.g. dropped by "
                     f"DropnaLabel) were left out of the scores")
    identical, identical_values = scored.spread.identical_pairs()
    return StoreScores(
        store=store.root,
        runs=pd.DataFrame(scored.rows, columns=list(RUN_COLUMNS)),
        periods=periods[ordered],
        calibration=calibration,
        label=label,
        incomplete=scored.incomplete,
        compare=pairs,  # type: ignore[arg-type]
        notes=notes,
        days=pd.concat(scored.days, ignore_index=True),
        seed_spread={n: scored.spread.result(n) for n in scored_names},
        learned_labels={n: store.labels(n)[0].get("learn", Label(kind="learn")) for n in scored_names},
        models={n: store.pipeline(n).model_class for n in scored_names},
        constant={n: scored.spread.constant(n) for n in scored_names},
        identical=identical,
        identical_values=identical_values,
        backtests=(pd.concat(scored.backtests, ignore_index=True) if scored.backtests
                   else pd.DataFrame(columns=list(BACKTEST_COLUMNS))),
        backtest_specs={n: dict(store.pipeline(n).backtest["spec"]) for n in scored_names
                        if store.pipeline(n).backtest.get("spec")},
    )


def _scored_label(store: st.Store, names: Sequence[str], kind: str) -> tuple[Label, list[str]]:
    """The :class:`Label` of kind ``kind`` the pipelines were scored against (the first's), and notes.

    A note says so when the pipelines' labels differ, or where a label could not be described.
    """
    described, notes = {}, []
    for name in names:
        labels, why = store.labels(name)
        described[name] = labels.get(kind, Label(kind=kind))
        notes += why
    first = described[names[0]]
    differing = [n for n, lab in described.items() if lab != first]
    if differing:
        notes.append(f"the pipelines are scored against different labels: {'; '.join(f'{n}: {lab.describe()}' for n, lab in described.items())}; "
                     f"their losses are in different units and not comparable")
    return first, notes


def daily_ic(prediction: np.ndarray, label: np.ndarray, dates: Any, *,
             cache: dict[str, PreparedLabels] | None = None) -> DailyIC:
    """Per date, IC and Rank IC of one merged run's arrays (:mod:`rolling_calib.core.ranking_ic`).

    ``cache`` (a dict kept across runs) holds the last run's
    :func:`~rolling_calib.core.ranking_ic.prepare_labels`: a run whose labels and dates hold
    the same values (another seed of the pipeline, usually another pipeline) reuses their
    date grouping, centring and ranks. ``.summary()`` gives IC, ICIR and Rank IC.
    """
    prepared = None if cache is None else cache.get("labels")
    if prepared is None or not prepared.matches(label, dates):
        prepared = prepare_labels(label, dates, copy=False)   # the run's arrays are not changed afterwards
        if cache is not None:
            cache["labels"] = prepared
    return daily_information_coefficients(prediction, prepared)


def _mixed_config_notes(store: st.Store, names: Sequence[str]) -> list[str]:
    """A note when the scored pipelines were trained by runs of different experiments (base task, schedule, data)."""
    groups: dict[str, list[str]] = {}
    for name in names:
        shared = store.pipeline(name).shared_hash
        if shared is not None:
            groups.setdefault(shared, []).append(name)
    if len(groups) < 2:
        return []
    described = "; ".join(f"{', '.join(members)} (shared config {h})" for h, members in groups.items())
    return [f"pipelines come from runs with different shared settings (base task, schedule, calibration, data "
            f"or threads): {described}. Their differences are not only their own overrides; re-run them "
            f"together from one experiment file to compare like with like."]
