"""Score a result store: QL and the monthly rolling CQL per run, then compare pipelines.

A *run* is one seed of one pipeline: its windows' predictions merged over the
whole evaluation period. For every run :func:`score_store` computes, through
:func:`rolling_calib.core.metrics.rolling_calibrated_quadratic_loss` (METHOD 2.2)::

    c_k  = mean over month k-1 of (y - p)            (pooled over instruments by default)
    CQL  = mean over months 2..K of (y - (p + c_k))^2
    QL   = mean over months 1..K of (y - p)^2        (``ql``)
    QL'  = mean over months 2..K of (y - p)^2        (``ql_scored``: same rows as CQL)

and, through :func:`rolling_calib.core.ranking_ic.information_coefficients_arrays`, IC, ICIR and
Rank IC (mean over test dates of the cross-sectional Pearson / Spearman correlation of
prediction and label; ICIR = mean / std of the daily IC). :func:`compare_store` turns the
per-run scores into the comparison of the ``compare`` command: per pipeline the mean and
standard deviation of each metric and the seed budget, per pair the pairwise accuracy of
QL, CQL and the IC metrics (direction by QL, the ground truth; for the IC metrics, where
higher is better, accuracy = P(IC_better > IC_worse)) with bootstrap intervals.

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
>>> comparison = compare_store(scores, n_boot=200)
>>> sorted(comparison.summary["pipeline"])
['wd0', 'wd1e-3']
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rolling_calib.core import metrics
from rolling_calib.core import pairwise as cmp
from rolling_calib.core.calibration import Calibration
from rolling_calib.core.label import LABEL_KIND, Label
from rolling_calib.core.ranking_ic import (
    PreparedLabels,
    information_coefficients_arrays,
    prepare_labels,
)
from rolling_calib.core.schedule import CoverageError
from rolling_calib.core.validation import CONFIDENCE, N_BOOT, SEED, check, validate_params
from rolling_calib.analysis.integrity import store_notes
from rolling_calib.execution import store as st
from rolling_calib.execution.reader import MissingLabelError, MissingValidationError, RunData, read_run

__all__ = [
    "RUN_COLUMNS",
    "PERIOD_COLUMNS",
    "METRICS",
    "StoreScores",
    "StoreComparison",
    "rolling_cql",
    "score_store",
    "compare_store",
]

RUN_COLUMNS = ("pipeline", "seed", "ql", "ql_scored", "cql", "n_all", "n_scored", "ic", "icir", "rank_ic",
               "cql_refit_first", "cql_rest", "ql_refit_first", "ql_rest")
PERIOD_COLUMNS = ("pipeline", "seed", "period", "start", "rows", "bias", "ql", "cql", "scored")
#: Metrics compared per pair; ``ql`` (all months) is the ground truth that sets the direction.
METRICS = ("ql", "ql_scored", "cql")
#: Ranking metrics per run (higher is better), compared beside QL and CQL.
IC_METRICS = ("ic", "icir", "rank_ic")


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
    """

    store: Path
    runs: pd.DataFrame
    periods: pd.DataFrame
    calibration: Calibration = field(default_factory=Calibration)
    label: Label = field(default_factory=lambda: Label(kind="raw"))
    incomplete: list[str] = field(default_factory=list)
    compare: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def pipelines(self) -> list[str]:
        """Pipelines with at least one complete run, in store order."""
        return list(dict.fromkeys(self.runs["pipeline"]))

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
    store: str | Path,
    *,
    calibration: Calibration | None = None,
    label: str | None = None,
    pipelines: Sequence[str] | None = None,
    progress: bool = False,
) -> StoreScores:
    """Score every complete run of a store.

    Parameters
    ----------
    store : path
        A store written by :func:`rolling_calib.execution.runner.run_plan`.
    calibration : Calibration, optional
        The calibration rule (METHOD 2.2: monthly periods, one pooled bias from the previous
        month). Default: the rule the store's experiment declared (its ``rolling.calibration``).
        ``source='validation'`` needs the windows' validation predictions (stores written since
        they are kept; older stores are refused, naming the fix).
    label : {"raw", "learn"}, optional
        The label to score against. Default: the store's ``rolling.label``. Units store both
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
    store = Path(store)
    manifest = st.read_manifest(store)
    calibration = st.recorded_calibration(manifest) if calibration is None else calibration
    if not isinstance(calibration, Calibration):
        raise ValueError(f"calibration: expected a Calibration, found {type(calibration).__name__} {calibration!r}")
    kind = check("label", st.recorded_label_kind(manifest) if label is None else label, LABEL_KIND)
    names = selected_pipelines(store, manifest, pipelines)
    scored = _score_runs(store, manifest, names, calibration=calibration, kind=kind, progress=progress)
    scores = _store_scores(store, manifest, names, scored, calibration=calibration, kind=kind)
    scores.notes[:0] = store_notes(store, manifest, names)   # data changed after training, unchecked units
    return scores


def selected_pipelines(store: Path, manifest: dict, pipelines: Sequence[str] | None) -> list[str]:
    """``pipelines`` (default: every pipeline of the manifest), refusing names the store does not have."""
    names = list(manifest["pipelines"]) if pipelines is None else list(pipelines)
    unknown = [n for n in names if n not in manifest["pipelines"]]
    if unknown:
        raise ValueError(f"--pipelines: {', '.join(unknown)} not in {store} (have: {', '.join(manifest['pipelines'])})")
    return names


@dataclass
class _ScoredRuns:
    """What :func:`_score_runs` gives: a :data:`RUN_COLUMNS` row and a period table per complete run."""

    rows: list[dict[str, Any]]
    tables: list[pd.DataFrame]
    incomplete: list[str]
    unlabelled: int = 0   # rows left out because they have no value of the label scored


def _score_runs(store: Path, manifest: dict, names: Sequence[str], *, calibration: Calibration, kind: str,
                progress: bool) -> _ScoredRuns:
    """Read and score every recorded seed of ``names``; a run with a missing or stale unit is listed as incomplete."""
    from tqdm.auto import tqdm

    scored = _ScoredRuns(rows=[], tables=[], incomplete=[])
    labels: dict[str, PreparedLabels] = {}   # the last run's labels: the next seed usually has the same
    runs = [(name, int(seed)) for name in names for seed in manifest["pipelines"][name].get("seeds", [])]
    validation = calibration.source == "validation"
    for name, seed in tqdm(runs, desc="scoring runs", unit="run", disable=not progress, leave=False):
        try:
            data = read_run(store, name, seed, manifest=manifest, label=kind, validation=validation)
        except (CoverageError, st.CorruptStoreFileError, MissingLabelError, MissingValidationError):
            raise  # damage, or a label / validation predictions the store lacks: stop, naming the store and the fix
        except ValueError as exc:  # a missing or stale unit: report the run as incomplete
            scored.incomplete.append(f"{name}/seed{seed}: {exc}")
            continue
        result = rolling_cql(data, calibration)
        scored.unlabelled += data.test.dropped
        t = data.test
        scored.rows.append(_run_row(name, seed, result, ranking_ic_columns(t.prediction, t.label, t.datetime, cache=labels)))
        scored.tables.append(result.table.assign(pipeline=name, seed=seed))
    return scored


def _run_row(name: str, seed: int, result: metrics.RollingCQL, ic: dict[str, float]) -> dict[str, Any]:
    """One :data:`RUN_COLUMNS` row: the run's QL/CQL ``result`` and its IC metrics (:func:`ranking_ic_columns`)."""
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


def _store_scores(store: Path, manifest: dict, names: Sequence[str], scored: _ScoredRuns, *,
                  calibration: Calibration, kind: str) -> StoreScores:
    """Assemble :class:`StoreScores` from the scored runs (refusing a store with no complete run)."""
    if not scored.rows:
        detail = "; ".join(scored.incomplete[:5]) or "no seeds recorded"
        raise ValueError(f"{store}: no complete run to score ({detail})")
    periods = pd.concat(scored.tables, ignore_index=True)
    ordered = list(PERIOD_COLUMNS) + [c for c in periods.columns if c not in PERIOD_COLUMNS]
    pairs = [tuple(p) for p in manifest.get("compare", []) if p[0] in names and p[1] in names]
    scored_names = [n for n in names if any(r["pipeline"] == n for r in scored.rows)]
    label, label_notes = _scored_label(manifest, scored_names, kind)
    notes = _mixed_config_notes(manifest, scored_names) + label_notes
    if scored.unlabelled:
        notes.append(f"{scored.unlabelled} prediction row(s) without a value of the {kind} label (e.g. dropped by "
                     f"DropnaLabel) were left out of the scores")
    return StoreScores(
        store=store,
        runs=pd.DataFrame(scored.rows, columns=list(RUN_COLUMNS)),
        periods=periods[ordered],
        calibration=calibration,
        label=label,
        incomplete=scored.incomplete,
        compare=pairs,  # type: ignore[arg-type]
        notes=notes,
    )


def _scored_label(manifest: dict, names: Sequence[str], kind: str) -> tuple[Label, list[str]]:
    """The :class:`Label` of kind ``kind`` the pipelines were scored against (the first's), and notes.

    A note says so when the pipelines' labels differ, or where a label could not be described.
    """
    described, notes = {}, []
    for name in names:
        labels, why = st.pipeline_labels(manifest, name)
        described[name] = labels.get(kind, Label(kind=kind))
        notes += why
    first = described[names[0]]
    differing = [n for n, lab in described.items() if lab != first]
    if differing:
        notes.append(f"the pipelines are scored against different labels: {'; '.join(f'{n}: {lab.describe()}' for n, lab in described.items())}; "
                     f"their losses are in different units and not comparable")
    return first, notes


def ranking_ic_columns(prediction: np.ndarray, label: np.ndarray, dates: Any, *,
                       cache: dict[str, PreparedLabels] | None = None) -> dict[str, float]:
    """``ic``, ``icir``, ``rank_ic`` of one merged run's arrays (:mod:`rolling_calib.core.ranking_ic`).

    ``cache`` (a dict kept across runs) holds the last run's
    :func:`~rolling_calib.core.ranking_ic.prepare_labels`: a run whose labels and dates hold
    the same values (another seed of the pipeline, usually another pipeline) reuses their
    date grouping, centring and ranks.
    """
    prepared = None if cache is None else cache.get("labels")
    if prepared is None or not prepared.matches(label, dates):
        prepared = prepare_labels(label, dates, copy=False)   # the run's arrays are not changed afterwards
        if cache is not None:
            cache["labels"] = prepared
    summary = information_coefficients_arrays(prediction, prepared)
    return {"ic": summary.ic, "icir": summary.icir, "rank_ic": summary.rank_ic}


def _mixed_config_notes(manifest: dict, names: Sequence[str]) -> list[str]:
    """A note when the scored pipelines were trained by runs of different experiments (base task, schedule, data)."""
    groups: dict[str, list[str]] = {}
    for name in names:
        shared = manifest["pipelines"].get(name, {}).get("shared_hash")
        if shared is not None:
            groups.setdefault(shared, []).append(name)
    if len(groups) < 2:
        return []
    described = "; ".join(f"{', '.join(members)} (shared config {h})" for h, members in groups.items())
    return [f"pipelines come from runs with different shared settings (base task, schedule, calibration, data "
            f"or threads): {described}. Their differences are not only their own overrides; re-run them "
            f"together from one experiment file to compare like with like."]


@dataclass
class StoreComparison:
    """The ``compare`` command's result.

    Attributes
    ----------
    summary : DataFrame
        Per pipeline: ``runs``, ``<metric>_mean`` and ``<metric>_std`` for ql, ql_scored
        and cql, ``std_ratio`` (std CQL / std QL over the same rows, months 2..K) and
        ``seed_budget`` (runs of that QL needed to match the standard error CQL reaches
        with ``runs`` runs: ``runs * (std_QL / std_CQL)^2``).
    pairs : list of PairComparison
        Direction by ``ql``; accuracy of ql, ql_scored and cql with bootstrap intervals.
    calibration : Calibration
        The calibration rule of the scores; ``label`` : Label, the label they were scored against.
    n_boot, confidence, seed : bootstrap settings.
    """

    summary: pd.DataFrame
    pairs: list[cmp.PairComparison]
    n_boot: int
    confidence: float
    seed: int
    calibration: Calibration = field(default_factory=Calibration)
    label: Label = field(default_factory=lambda: Label(kind="raw"))
    incomplete: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (for ``--json``): the rule's ``period``, ``bias``, ``source`` and the ``label`` kind first."""

        def clean(value: Any) -> Any:
            if isinstance(value, float) and not math.isfinite(value):
                return None
            if isinstance(value, (np.integer,)):
                return int(value)
            if isinstance(value, (np.floating,)):
                return clean(float(value))
            return value

        return {
            "period": self.calibration.period,
            "bias": self.calibration.bias,
            "source": self.calibration.source,
            "label": self.label.kind,
            "bootstrap": {"n_boot": self.n_boot, "confidence": self.confidence, "seed": self.seed},
            "pipelines": [{k: clean(v) for k, v in rec.items()} for rec in self.summary.to_dict(orient="records")],
            "pairs": [_clean_nested(p.to_dict()) for p in self.pairs],
            "incomplete_runs": list(self.incomplete),
            "notes": list(self.notes),
        }

    def format(self) -> str:
        """Plain-text tables for the terminal."""
        lines = [f"Per pipeline (calibration: {self.calibration.describe()}; {self.label.describe()}; "
                 f"losses in {self.label.loss_unit}; std over seeds, ddof=1)"]
        head = (
            f"{'pipeline':<16}{'runs':>5}{'QL mean':>12}{'QL std':>10}{'QL2..K mean':>13}{'QL2..K std':>11}"
            f"{'CQL mean':>12}{'CQL std':>10}{'std ratio':>10}{'seed budget':>12}"
        )
        lines += [head, "-" * len(head)]
        for r in self.summary.itertuples(index=False):
            lines.append(
                f"{r.pipeline:<16}{r.runs:>5}{_fmt(r.ql_mean, 12, 4)}{_fmt(r.ql_std, 10, 4)}"
                f"{_fmt(r.ql_scored_mean, 13, 4)}{_fmt(r.ql_scored_std, 11, 4)}"
                f"{_fmt(r.cql_mean, 12, 4)}{_fmt(r.cql_std, 10, 4)}{_fmt(r.std_ratio, 10, 3)}{_fmt(r.seed_budget, 12, 1)}"
            )
        if "ic_mean" in self.summary.columns:
            head = f"{'pipeline':<16}{'IC mean':>12}{'IC std':>10}{'ICIR mean':>12}{'ICIR std':>10}{'RankIC mean':>13}{'RankIC std':>11}"
            lines += ["", head, "-" * len(head)]
            for r in self.summary.itertuples(index=False):
                lines.append(f"{r.pipeline:<16}{_fmt(r.ic_mean, 12, 4)}{_fmt(r.ic_std, 10, 4)}{_fmt(r.icir_mean, 12, 3)}"
                             f"{_fmt(r.icir_std, 10, 3)}{_fmt(r.rank_ic_mean, 13, 4)}{_fmt(r.rank_ic_std, 11, 4)}")
        lines.append(
            "QL: all evaluation periods; QL2..K: the periods CQL scores (same rows); std ratio = CQL std / QL2..K std;\n"
            "seed budget = runs of QL2..K needed to reach the standard error CQL has with the runs above;\n"
            "IC / Rank IC: mean over test dates of the cross-sectional Pearson / Spearman correlation; ICIR = mean / std "
            "of the daily IC (higher is better)."
        )
        if self.pairs:
            lines += ["", f"Pairs (direction by QL; pairwise accuracy with {self.confidence:.0%} bootstrap interval, {self.n_boot} resamples)"]
            shown = [m for m in ("ql", "cql", *IC_METRICS) if all(m in p.accuracies for p in self.pairs)]
            titles = {"ql": "Acc QL", "cql": "Acc CQL", "ic": "Acc IC", "icir": "Acc ICIR", "rank_ic": "Acc RankIC"}
            head = f"{'better':<16}{'worse':<16}{'QL gap':>10}  " + "".join(f"{titles[m]:<22}" for m in shown)
            lines += [head, "-" * len(head)]
            for p in self.pairs:
                cells = []
                for m in shown:
                    a = p.accuracies[m]
                    cells.append(f"{a.accuracy:.3f} [{a.ci_low:.3f}, {a.ci_high:.3f}]".ljust(22))
                tie = " (tie)" if p.tie else ""
                lines.append(f"{p.better:<16}{p.worse:<16}{p.ground_truth_gap:>10.4f}  {''.join(cells)}{tie}")
            if any(m in IC_METRICS for m in shown):
                lines.append("Acc IC, ICIR, RankIC: P(metric of the better-by-QL pipeline > the worse one's).")
        if self.incomplete:
            lines += ["", f"Left out {len(self.incomplete)} incomplete run(s):"] + [f"  {s}" for s in self.incomplete]
        if self.notes:
            lines += [""] + [f"Note: {note}" for note in self.notes]
        return "\n".join(lines)


def _fmt(value: float, width: int, digits: int) -> str:
    return f"{'n/a':>{width}}" if value is None or not math.isfinite(value) else f"{value:>{width}.{digits}f}"


def _clean_nested(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _clean_nested(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean_nested(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


@validate_params({"n_boot": N_BOOT, "confidence": CONFIDENCE, "seed": SEED})
def compare_store(
    scores: StoreScores,
    *,
    pipelines: Sequence[str] | None = None,
    pairs: Sequence[tuple[str, str]] | None = None,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> StoreComparison:
    """Summaries per pipeline and pairwise accuracies per pair.

    Parameters
    ----------
    scores : StoreScores
    pipelines : sequence of str, optional
        Pipelines to include (default: all scored).
    pairs : sequence of (str, str), optional
        Pairs to compare. Default: the experiment's ``compare:`` pairs among the
        included pipelines, else every pair.
    n_boot, confidence, seed : bootstrap settings (the seed is recorded).

    Returns
    -------
    StoreComparison
    """
    names = scores.pipelines if pipelines is None else list(pipelines)
    for name in names:
        if name not in scores.pipelines:
            raise ValueError(f"--pipelines: {name!r} has no complete run (scored: {', '.join(scores.pipelines)})")
    rows = []
    for name in names:
        values = scores.scores_of(name)
        row: dict[str, Any] = {"pipeline": name, "runs": int(values["ql"].size)}
        for m in (*METRICS, *IC_METRICS):
            if m not in values:
                continue
            row[f"{m}_mean"] = float(values[m].mean())
            row[f"{m}_std"] = float(values[m].std(ddof=1)) if values[m].size > 1 else math.nan
        if values["ql"].size > 1 and (row["ql_scored_std"] > 0 or row["cql_std"] > 0):
            # same rows on both sides (months 2..K): the variance reduction calibration buys
            vr = cmp.variance_reduction(values, vanilla="ql_scored", calibrated="cql")
            row["std_ratio"], row["seed_budget"] = vr.std_ratio, vr.seed_budget
        else:
            row["std_ratio"], row["seed_budget"] = math.nan, math.nan
        rows.append(row)
    if pairs is None:
        recorded = [p for p in scores.compare if p[0] in names and p[1] in names]
        pairs = recorded or list(itertools.combinations(names, 2))
    comparisons = []
    for a, b in pairs:
        for name in (a, b):
            if name not in names:
                raise ValueError(f"pair ({a}, {b}): pipeline {name!r} is not included (included: {', '.join(names)})")
        comparisons.append(_compare_with_ic(a, scores.scores_of(a), b, scores.scores_of(b),
                                            n_boot=n_boot, confidence=confidence, seed=seed))
    return StoreComparison(
        summary=pd.DataFrame(rows),
        pairs=comparisons,
        calibration=scores.calibration,
        n_boot=n_boot,
        confidence=confidence,
        seed=seed,
        incomplete=list(scores.incomplete),
        notes=list(scores.notes),
        label=scores.label,
    )


def _compare_with_ic(a: str, values_a: dict, b: str, values_b: dict, **boot: Any) -> cmp.PairComparison:
    """:func:`~rolling_calib.core.pairwise.compare_pair` of QL, CQL and the IC metrics (direction by QL).

    ``compare_pair`` counts a lower score as better; the IC metrics enter negated, so their
    accuracy is P(IC_better > IC_worse), and their means are reported with their own sign.
    IC metrics that are not finite for every run of both pipelines are left out.
    """
    ics = [m for m in IC_METRICS if m in values_a and m in values_b
           and np.isfinite(values_a[m]).all() and np.isfinite(values_b[m]).all()]
    flip = {m: f"-{m}" for m in ics}

    def signed(values: dict) -> dict:
        return {**{m: values[m] for m in METRICS}, **{flip[m]: -values[m] for m in ics}}

    pair = cmp.compare_pair(a, signed(values_a), b, signed(values_b), ground_truth="ql",
                            metrics=[*METRICS, *flip.values()], **boot)
    for m, key in flip.items():
        pair.accuracies[m] = pair.accuracies.pop(key)
        for means in pair.means.values():
            means[m] = -means.pop(key)
    return pair
