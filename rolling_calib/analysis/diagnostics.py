"""Seed-variance diagnostics of a result store: can calibration help on these runs?

For every pipeline with at least two complete runs, :func:`diagnose_store` reads the
per-period table of :func:`~rolling_calib.analysis.scoring.score_store` (mean residual and
QL per run and period) and each run's predictions (:func:`~rolling_calib.execution.reader.read_run`,
the rows scored against the same label: mean and std of the predictions per period, and the
training window of each period's first row), then computes with :mod:`rolling_calib.core.diagnostics`:

* the split of ``Var_seeds(QL2..K)`` into a bias part ``Var(B)``, a spread part ``Var(S)``
  and ``2 Cov(B, S)``, where per run ``QL2..K = B + S``, ``B`` = row-weighted mean over the
  scored periods of the squared mean residual, ``S`` = of the residual variance around it;
* the bound of the best possible per-period bias correction, ``std(S)``, beside
  ``std(QL2..K)`` and ``std(CQL)``, and ``X = 1 - std(S)/std(QL2..K)``,
  ``Y = 1 - std(CQL)/std(QL2..K)``;
* the seed spread of the mean prediction beside the scale (std) of the predictions;
* the persistence of each seed's offset (mean residual minus the seeds' mean) from one
  period to the next, inside a training window and across a refit (a period whose first row
  belongs to another window than the previous period's first row), and the squared offset
  against its squared change;
* the ratio ``std(CQL) / std(QL2..K)`` with a bootstrap interval over seeds, the shares of the
  seed variance from offset, scale and co-movement with the label
  (:func:`rolling_calib.core.guards.seed_variance_components`), and, over the compared pairs the
  ground truth separates, whether CQL's held-out pairwise accuracy (runs of half of the seeds
  against the direction of QL on the other half) is at least QL's (on the label the models learned);
* the assessment (:func:`rolling_calib.core.diagnostics.assess_calibration`): calibration helps
  only when CQL narrows the seed spread *and* keeps the ordering, and no scale mismatch is
  measured; every reason comes from these measurements.

The split uses each period's pooled mean residual (the rule of docs/method.md §2.2), whatever bias mode
CQL is scored with.

Example
-------
>>> d = diagnose_store(example_store)      # 2 pipelines x 3 seeds, per-seed output bias
>>> [p.pipeline for p in d.pipelines]
['wd0', 'wd1e-3']
>>> wd0 = d.of("wd0")
>>> abs(wd0.split.var_ql - (wd0.split.var_bias + wd0.split.var_spread + 2 * wd0.split.cov)) < 1e-12
True
>>> wd0.refits                             # windows of 2 months: the model is refitted in March
['2018-03']
>>> wd0.assessment.narrows, wd0.assessment.keeps_order    # 3 seeds: too few to split for the ordering check
(True, None)
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

from rolling_calib.analysis.scoring import StoreScores, score_store
from rolling_calib.analysis.verdicts import GuardWarning, guard_warnings, scale_findings, stopping_points
from rolling_calib.core import diagnostics as dg
from rolling_calib.core.guards import Moments, VarianceComponents, seed_variance_components
from rolling_calib.core.metaeval import split_seed_accuracy
from rolling_calib.core.calibration import Calibration
from rolling_calib.core.label import Label
from rolling_calib.core.question import DEFAULT_QUESTION, QUESTION, Question
from rolling_calib.core.resampling import DEFAULT, RESAMPLING, Resampling
from rolling_calib.core.validation import validate_params
from rolling_calib.core.schedule import Window
from rolling_calib.execution import store as st
from rolling_calib.execution.reader import MissingLabelError, read_run
from rolling_calib.core.jsonable import jsonable

__all__ = ["MAX_DEFAULT_PAIRS", "PipelineDiagnosis", "StoreDiagnosis", "diagnose_store", "run_period_stats",
           "time_split_scores"]

#: Without recorded ``compare:`` pairs, every pair is differenced only up to this many pipelines.
MAX_DEFAULT_PAIRS = 4
OFFSET_COLUMNS = ("seed", "period", "start", "mean_residual", "offset", "window", "refit")


def _std(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1)) if values.size > 1 else math.nan


def _num(value: float, digits: int = 4) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}g}"


def _pct(value: float) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{round(value * 100)}%"


#: Seeds a statement about the offsets' persistence needs: with 2 seeds each offset is minus the other's
#: (offsets are deviations from the seeds' mean), so consecutive offsets correlate +-1 by construction.
MIN_PERSISTENCE_SEEDS = 3

@dataclass
class PipelineDiagnosis:
    """Seed-variance diagnostics of one pipeline.

    Attributes
    ----------
    pipeline : str
    seeds : list of int
        The complete runs, ascending.
    periods, scored_periods : list of str
        Labels of every period (time order) and of those CQL scores (``2..K``).
    refits : list of str
        Periods whose first row belongs to another training window than the previous period's.
    split : SeedVarianceSplit
        ``Var(QL2..K) = Var(B) + Var(S) + 2 Cov(B, S)`` over the seeds.
    std_cql : float
        Seed std of CQL (ddof = 1).
    removable, removed : float
        ``X = 1 - std(S)/std(QL2..K)`` (the best per-period bias correction) and
        ``Y = 1 - std(CQL)/std(QL2..K)`` (the rolling CQL; negative: it added spread).
    spread : PredictionSpread
        Seed spread of the mean prediction beside the scale of the predictions.
    persistence : OffsetPersistence
        Consecutive periods' offsets: correlation and squared level vs squared change.
    offsets : DataFrame
        One row per (seed, period): ``seed, period, start, mean_residual, offset, window, refit``.
    verdict : str
        The assessment in one line (``assessment.text``).
    label : Label
        The label the runs were scored against (the offsets are in its unit).
    assessment : CalibrationAssessment
        Whether calibration helps these runs, with the measured reasons.
    std_ratio : StdRatio
        ``std(CQL) / std(QL2..K)`` with its bootstrap interval over seeds.
    components : VarianceComponents or None
        Shares of the seed variance of QL2..K from offset, scale and co-movement with the label.
    """

    pipeline: str
    seeds: list[int]
    periods: list[str]
    scored_periods: list[str]
    refits: list[str]
    split: dg.SeedVarianceSplit
    std_cql: float
    removable: float
    removed: float
    spread: dg.PredictionSpread
    persistence: dg.OffsetPersistence
    offsets: pd.DataFrame
    verdict: str
    label: Label
    assessment: dg.CalibrationAssessment | None = None
    std_ratio: dg.StdRatio | None = None
    components: VarianceComponents | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (NaN as None; the offsets as records with ISO dates)."""
        offsets = self.offsets.assign(start=self.offsets["start"].map(lambda t: t.isoformat()))
        return jsonable({
            "pipeline": self.pipeline,
            "seeds": list(self.seeds),
            "periods": list(self.periods),
            "scored_periods": list(self.scored_periods),
            "refits": list(self.refits),
            "variance_split": self.split.to_dict(),
            "std": {"ql_scored": self.split.std_ql, "oracle_bias_correction": self.split.std_spread,
                    "cql": self.std_cql},
            "removable": self.removable,
            "removed": self.removed,
            "prediction_spread": self.spread.to_dict(),
            "persistence": self.persistence.to_dict(),
            "offsets": offsets.to_dict(orient="records"),
            "verdict": self.verdict,
            "assessment": None if self.assessment is None else self.assessment.to_dict(),
            "std_ratio": None if self.std_ratio is None else self.std_ratio.to_dict(),
            "variance_components": None if self.components is None else self.components.to_dict(),
        })

    def format(self) -> str:
        """A block of plain text for the terminal."""
        s, p, sp = self.split, self.persistence, self.spread
        lines = [
            f"{self.pipeline}: {len(self.seeds)} seeds, {len(self.scored_periods)} scored periods "
            f"({self.scored_periods[0]}..{self.scored_periods[-1]}), refits before: {', '.join(self.refits) or 'none'}",
            f"  Var_seeds(QL2..K) {_num(s.var_ql)} = bias part {_num(s.var_bias)} ({_pct(s.frac_bias)})"
            f" + spread part {_num(s.var_spread)} ({_pct(s.frac_spread)}) + 2 Cov {_num(2 * s.cov)} ({_pct(s.frac_cov)})",
            f"  std over seeds: QL2..K {_num(s.std_ql)} | best per-period bias correction {_num(s.std_spread)}"
            f" | CQL {_num(self.std_cql)}",
            f"  mean prediction: seed spread {_num(sp.mean_spread)} vs prediction std {_num(sp.scale)}"
            f" (seed spread of the prediction std {_num(sp.scale_spread)})",
            f"  offset persistence (corr of consecutive periods): inside a window {_num(p.corr_within, 3)}"
            f" ({p.n_within} pairs), across a refit {_num(p.corr_across, 3)} ({p.n_across} pairs)",
            f"  offset^2 {_num(p.level)} vs change^2 {_num(p.change)}: the previous period "
            + ("predicts this one" if p.previous_predicts else "does not predict this one"),
        ]
        if self.components is not None and math.isfinite(self.components.var_ql):
            c = self.components
            lines.append(f"  seed variance of QL2..K by source: offset {_pct(c.offset)}, scale {_pct(c.scale)}, "
                         f"co-movement with the label {_pct(c.comovement)}")
        lines.append(f"  Verdict: {self.verdict}")
        return "\n".join(lines)


@dataclass
class StoreDiagnosis:
    """The ``diagnose`` command's result: one :class:`PipelineDiagnosis` per pipeline with >= 2 runs.

    Attributes
    ----------
    store : Path
    calibration : Calibration
        The rule the runs were scored with; ``label``: the Label they were scored against.
    pipelines : list of PipelineDiagnosis
    runs : DataFrame
        Per-run scores (``pipeline, seed, ql, ql_scored, cql, ...``) of the diagnosed pipelines.
    pairs : list of (str, str)
        Pairs for the paired per-seed differences (the store's ``compare:`` pairs, else all).
    skipped, incomplete, notes : list of str
    question, resampling : Question, Resampling
        What the std ratio's interval and the ground-truth verdicts answer; the bootstrap's settings.
    """

    store: Path
    pipelines: list[PipelineDiagnosis]
    runs: pd.DataFrame
    calibration: Calibration = field(default_factory=Calibration)
    label: Label = field(default_factory=lambda: Label(kind="raw"))
    pairs: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[GuardWarning] = field(default_factory=list)
    question: Question = DEFAULT_QUESTION
    resampling: Resampling = DEFAULT

    def of(self, pipeline: str) -> PipelineDiagnosis:
        """The diagnosis of one pipeline (``ValueError`` naming the diagnosed ones)."""
        for diagnosis in self.pipelines:
            if diagnosis.pipeline == pipeline:
                return diagnosis
        raise ValueError(f"pipeline {pipeline!r} was not diagnosed (diagnosed: {', '.join(p.pipeline for p in self.pipelines)})")

    def paired_differences(self, a: str, b: str) -> pd.DataFrame:
        """Seed ``i`` of ``a`` minus seed ``i`` of ``b``: columns ``seed, ql_scored, cql`` (seeds both have)."""
        for name in (a, b):
            self.of(name)
        runs = self.runs.set_index(["pipeline", "seed"])
        left, right = runs.loc[a], runs.loc[b]
        seeds = sorted(set(left.index) & set(right.index))
        diff = left.loc[seeds, ["ql_scored", "cql"]] - right.loc[seeds, ["ql_scored", "cql"]]
        return diff.reset_index().rename(columns={"index": "seed"})

    def _pair_summary(self, a: str, b: str) -> dict[str, Any]:
        diff = self.paired_differences(a, b)
        out: dict[str, Any] = {"a": a, "b": b, "seeds": [int(s) for s in diff["seed"]]}
        for column in ("ql_scored", "cql"):
            values = diff[column].to_numpy(dtype=float)
            out[column] = {"mean": float(values.mean()) if values.size else math.nan, "std": _std(values)}
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (for ``--json``)."""
        return jsonable({
            "store": str(self.store),
            "period": self.calibration.period,
            "bias": self.calibration.bias,
            "question": self.question.to_dict(),
            "bootstrap": self.resampling.to_dict(),
            "pipelines": [p.to_dict() for p in self.pipelines],
            "paired_differences": [self._pair_summary(a, b) for a, b in self.pairs],
            "skipped": list(self.skipped),
            "incomplete_runs": list(self.incomplete),
            "notes": list(self.notes),
            "warnings": [w.to_dict() for w in self.warnings],
        })

    def table(self) -> str:
        """"Can calibration help here?" in a few lines: per pipeline the answer, CQL's seed std against QL 2..K's
        with its interval, the best any per-period bias correction could do, and how persistent the offsets are
        (shown from 3 seeds: with 2, each seed's offset is minus the other's). The sentences are in the report.
        """
        from rolling_calib.core.tables import format_table

        rows = []
        for d in self.pipelines:
            helps = {True: "yes", False: "no", None: "no verdict"}[d.assessment.helps if d.assessment else None]
            ratio = d.std_ratio
            if ratio is None or not math.isfinite(ratio.ratio):
                std = "-"
            elif math.isfinite(ratio.ci_low) and math.isfinite(ratio.ci_high):
                std = f"{ratio.ratio:.2f} [{ratio.ci_low:.2f}, {ratio.ci_high:.2f}]"
            else:
                std = f"{ratio.ratio:.2f}"
            best = (f"-{d.removable:.0%} std" if d.removable >= 0 else f"+{-d.removable:.0%} std") \
                if math.isfinite(d.removable) else "-"
            corr = d.persistence.corr if d.persistence is not None else math.nan
            persist = (f"{corr:.2f}" if math.isfinite(corr) else "-") if len(d.seeds) >= MIN_PERSISTENCE_SEEDS \
                else f"needs {MIN_PERSISTENCE_SEEDS} seeds"
            rows.append([d.pipeline, helps, std, best, persist])
        return format_table(rows, ["pipeline", "calibration helps?", f"std CQL / QL 2..K [{self.question.confidence:.0%}]",
                                   "best bias correction", "offset persistence"])

    def format(self) -> str:
        """Plain text for the terminal: the warnings and each pipeline's verdict first, then the split behind it."""
        lines = [f"Can calibration help here? (calibration: {self.calibration.describe()}; {self.label.describe()}; "
                 f"std over seeds, ddof=1)"]
        lines += [f"- {d.pipeline}: {d.verdict}" for d in self.pipelines]
        if self.warnings:
            lines += ["", "Warnings:"] + [f"- [{w.kind}] {w.message}" for w in self.warnings]
        lines += ["", "Seed-variance split per pipeline", ""]
        for diagnosis in self.pipelines:
            lines += [diagnosis.format(), ""]
        if self.pairs:
            lines.append("Paired seed differences (seed i of A minus seed i of B): mean, std over seeds")
            for a, b in self.pairs:
                s = self._pair_summary(a, b)
                lines.append(
                    f"  {a} - {b} ({len(s['seeds'])} seeds): QL2..K {_num(s['ql_scored']['mean'])} +- "
                    f"{_num(s['ql_scored']['std'])}, CQL {_num(s['cql']['mean'])} +- {_num(s['cql']['std'])}"
                )
            lines.append("")
        lines.append(
            "B: squared mean residual per period, S: residual variance around it (QL2..K = B + S per run); "
            "the best per-period bias correction leaves S.\nOffset: a seed's mean residual minus the seeds' mean; "
            "CQL corrects period k with period k-1's, so it narrows the seeds only when change^2 < offset^2."
        )
        if self.skipped:
            lines += ["", "Skipped:"] + [f"  {s}" for s in self.skipped]
        if self.incomplete:
            lines += ["", f"Left out {len(self.incomplete)} incomplete run(s):"] + [f"  {s}" for s in self.incomplete]
        if self.notes:
            lines += [""] + [f"Note: {n}" for n in self.notes]
        return "\n".join(lines).rstrip() + "\n"


# --------------------------------------------------------------------------- assembly
def _naive(values: Any) -> np.ndarray:
    index = pd.DatetimeIndex(values)
    if index.tz is not None:
        index = index.tz_localize(None)
    return index.values.astype("datetime64[ns]")


def run_period_stats(frame: pd.DataFrame, starts: Sequence[pd.Timestamp]) -> pd.DataFrame:
    """Per period of one run: ``rows, mean_prediction, prediction_std`` (ddof 0) and ``first`` (first timestamp).

    ``starts`` are the periods' start timestamps in time order (the ``start`` column of the
    run's period table); a row belongs to the last period that starts at or before it.
    Periods without rows are absent from the result (indexed by period position).

    >>> frame = pd.DataFrame({"datetime": pd.to_datetime(["2018-01-02", "2018-01-03", "2018-02-01"]),
    ...                       "prediction": [1.0, 3.0, 5.0]})
    >>> run_period_stats(frame, pd.to_datetime(["2018-01-01", "2018-02-01"]))[["rows", "mean_prediction", "prediction_std"]]
       rows  mean_prediction  prediction_std
    0     2              2.0             1.0
    1     1              5.0             0.0
    """
    ts = _naive(frame["datetime"])
    edges = _naive(starts)
    codes = np.searchsorted(edges, ts, side="right") - 1
    if (codes < 0).any():
        raise ValueError(f"predictions at {pd.Timestamp(ts[codes < 0].min())} precede the first period start {pd.Timestamp(edges[0])}")
    pred = pd.Series(frame["prediction"].to_numpy(dtype=float))
    grouped = pred.groupby(codes)
    out = pd.DataFrame({
        "rows": grouped.size(),
        "mean_prediction": grouped.mean(),
        "prediction_std": grouped.std(ddof=0),
        "first": pd.Series(ts).groupby(codes).min(),
    })
    out.index.name = None
    return out


def _window_of(times: Sequence[pd.Timestamp], windows: Sequence[Window]) -> np.ndarray:
    """Index of the window whose test segment holds each time (-1: none)."""
    out = np.full(len(times), -1, dtype=np.int64)
    values = pd.DatetimeIndex(times)
    for w in windows:
        out[w.test.contains(values) & (out < 0)] = w.index
    return out


def _common_periods(table: pd.DataFrame, n_seeds: int) -> tuple[pd.DataFrame, pd.Index, int]:
    """``(table, starts, left out)``: one pipeline's period table cut to the periods every seed has, their starts
    in time order, and how many periods were left out."""
    counts = table.groupby("start")["seed"].nunique()
    common = counts.index[counts == n_seeds].sort_values()
    return table[table["start"].isin(common)], common, counts.size - len(common)


def _seed_grid(table: pd.DataFrame, column: str, seeds: Sequence[int], common: pd.Index) -> pd.DataFrame:
    """``column`` of the period table as seeds x period starts."""
    return table.pivot(index="seed", columns="start", values=column).loc[seeds, common]


def _prediction_stats(store: st.Store, name: str, seeds: Sequence[int], table: pd.DataFrame, common: pd.Index,
                      label: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeds x periods: mean and std of the predictions (rows scored against ``label``), and the window of
    each period's first row."""
    windows = list(store.pipeline(name).windows)
    shape = (len(seeds), len(common))
    mean_pred = np.empty(shape)
    pred_std = np.empty(shape)
    win = np.empty(shape, dtype=np.int64)
    for i, seed in enumerate(seeds):
        frame = read_run(store, name, seed, label=label).test.frame()
        starts = table[table["seed"] == seed].sort_values("start")["start"]   # the run's own periods
        stats = run_period_stats(frame, starts.tolist())
        stats.index = pd.DatetimeIndex(starts.to_numpy()[stats.index.to_numpy()])
        stats = stats.loc[common]
        mean_pred[i], pred_std[i] = stats["mean_prediction"], stats["prediction_std"]
        win[i] = _window_of(stats["first"].tolist(), windows)
    return mean_pred, pred_std, win


def _offsets_frame(seeds: Sequence[int], labels: list, common: pd.Index, b: np.ndarray, offsets: np.ndarray,
                   win: np.ndarray, refit: np.ndarray) -> pd.DataFrame:
    """One :data:`OFFSET_COLUMNS` row per seed and period."""
    k = len(common)
    return pd.DataFrame({
        "seed": np.repeat(seeds, k),
        "period": np.tile(labels, len(seeds)),
        "start": np.tile(common.to_numpy(), len(seeds)),
        "mean_residual": b.ravel(),
        "offset": offsets.ravel(),
        "window": win.ravel(),
        "refit": np.tile(refit, len(seeds)),
    }, columns=list(OFFSET_COLUMNS))


@dataclass(frozen=True)
class _StoreChecks:
    """What every pipeline's assessment shares: the ordering check, scale findings, the question, bootstrap settings."""

    keeps_order: bool | None
    order_detail: str
    scale: dict[str, str]
    question: Question
    resampling: Resampling


def _components(scores: StoreScores, name: str, seeds: Sequence[int], scored: Sequence[str]) -> VarianceComponents | None:
    """:func:`~rolling_calib.core.guards.seed_variance_components` over the scored periods (None: < 2 seeds)."""
    days = scores.days[(scores.days["pipeline"] == name) & scores.days["period"].isin(list(scored))]
    sums = days.groupby(["seed", "period"])[["n", "sp", "sy", "spp", "syy", "spy"]].sum()
    try:
        runs = [[Moments(*sums.loc[(seed, period)].to_numpy(dtype=float)) for period in scored] for seed in seeds]
        return seed_variance_components(runs)
    except (KeyError, ValueError):
        return None


def _diagnose_pipeline(store: st.Store, name: str, scores: StoreScores, notes: list[str], checks: _StoreChecks
                       ) -> PipelineDiagnosis:
    """:class:`PipelineDiagnosis` of one pipeline over the periods every seed has (a note when some are left out)."""
    runs = scores.runs[scores.runs["pipeline"] == name].sort_values("seed")
    seeds = [int(s) for s in runs["seed"]]
    table, common, dropped = _common_periods(scores.periods[scores.periods["pipeline"] == name], len(seeds))
    if dropped:
        notes.append(f"{name}: {dropped} period(s) not present in every run are left out of the diagnostics")
    labels = _seed_grid(table, "period", seeds, common).iloc[0].tolist()
    b = _seed_grid(table, "mean_residual", seeds, common).to_numpy(dtype=float)
    ql = _seed_grid(table, "ql", seeds, common).to_numpy(dtype=float)
    rows = _seed_grid(table, "rows", seeds, common).to_numpy(dtype=float)
    scored = _seed_grid(table, "scored", seeds, common).astype(bool).all(axis=0).to_numpy()
    mean_pred, pred_std, win = _prediction_stats(store, name, seeds, table, common, scores.label.kind)
    refit = np.logical_or.reduce([dg.refit_boundaries(w) for w in win])
    split = dg.split_seed_variance(b[:, scored], ql[:, scored], rows[:, scored])
    std_cql = _std(runs["cql"].to_numpy(dtype=float))
    removable, removed = dg.correction_fractions(split.std_ql, split.std_spread, std_cql)
    offsets = dg.seed_offsets(b)
    persistence = dg.offset_persistence(offsets, refit)
    scored_labels = [lab for lab, s in zip(labels, scored) if s]
    ratio = dg.std_ratio_interval(runs["ql_scored"].to_numpy(dtype=float), runs["cql"].to_numpy(dtype=float),
                                  question=checks.question, resampling=checks.resampling)
    components = _components(scores, name, seeds, scored_labels)
    assessment = dg.assess_calibration(
        removable=removable, removed=removed, ratio=ratio, keeps_order=checks.keeps_order,
        order_detail=checks.order_detail, scale_mismatch=checks.scale.get(name, ""),
        cause=components.cause() if components is not None and math.isfinite(components.var_ql) else "",
        persistence=persistence if len(seeds) >= MIN_PERSISTENCE_SEEDS else None)
    return PipelineDiagnosis(
        pipeline=name,
        seeds=seeds,
        periods=labels,
        scored_periods=scored_labels,
        refits=[lab for lab, r in zip(labels, refit) if r],
        split=split,
        std_cql=std_cql,
        removable=removable,
        removed=removed,
        spread=dg.prediction_spread(mean_pred, pred_std),
        persistence=persistence,
        offsets=_offsets_frame(seeds, labels, common, b, offsets, win, refit),
        verdict=assessment.text,
        label=scores.label,
        assessment=assessment,
        std_ratio=ratio,
        components=components,
    )


#: Seeds per pipeline below which the held-out ordering check is not run (halves of 1 run say nothing).
MIN_SPLIT_SEEDS = 4


def _order_check(store: st.Store, scores: StoreScores, names: Sequence[str], pairs: Sequence[tuple[str, str]],
                 *, question: Question, resampling: Resampling, notes: list[str]) -> tuple[bool | None, str]:
    """Does CQL rank the runs of the pairs like the ground truth on held-out seeds at least as often as QL 2..K?

    Checked on the label the models learned (the store is scored against it when it was scored
    against the raw one), on the pairs whose QL verdict is determined: the held-out pairwise accuracy of
    :func:`rolling_calib.core.metaeval.split_seed_accuracy` (each metric's accuracy over the runs of one
    half of the seeds, against the direction of QL on the other half), averaged over those pairs, CQL's
    against QL 2..K's -- the accuracy the evidence tables show, not a concordance of half-seed means.
    """
    counts = scores.runs.groupby("pipeline")["seed"].nunique()
    few = [n for n in names if counts.get(n, 0) < MIN_SPLIT_SEEDS]
    if len(names) < 2 or not pairs:
        return None, "the held-out ordering check needs two pipelines to order"
    if few:
        return None, (f"the held-out ordering check needs {MIN_SPLIT_SEEDS} seeds per pipeline ({', '.join(few)} "
                      f"{'has' if len(few) == 1 else 'have'} fewer)")
    learned, where = scores, "the label scored"
    if scores.label.kind != "learn":
        try:
            learned = score_store(store, calibration=scores.calibration, label="learn", pipelines=list(names))
            where = "the learned label"
        except MissingLabelError:
            notes.append("the store holds no learned label: the held-out ordering check uses the raw label")
    determined = _determined_pairs(learned, pairs, question=question)
    if not determined:
        return None, (f"the ground truth (QL on {where}) does not separate the compared pair(s) at "
                      f"{question.confidence:.0%}: there is no "
                      f"ordering to keep")
    values = {n: learned.scores_of(n) for n in names}
    table = split_seed_accuracy(values, determined, metrics=["ql_scored", "cql"], ground_truth="ql",
                                seed=resampling.seed)
    acc = table.groupby("metric")["split_accuracy"].mean()
    keeps = bool(acc["cql"] >= acc["ql_scored"])
    detail = (f"on held-out seeds ({where}, {int(table['n_splits'].iloc[0])} random halves) CQL's pairwise accuracy "
              f"against the ground truth of the other half is {acc['cql']:.2f}, QL 2..K's {acc['ql_scored']:.2f} "
              f"(mean over the {len(determined)} pair(s) the ground truth separates)")
    return keeps, detail


def _determined_pairs(scores: StoreScores, pairs: Sequence[tuple[str, str]], *,
                      question: Question) -> list[tuple[str, str]]:
    """The pairs whose QL verdict (the ``question`` answered as ``compare`` answers it) is determined on these scores."""
    from rolling_calib.analysis.verdicts import decide_pair

    out = []
    for a, b in pairs:
        verdicts = decide_pair(scores.days, a, b, label=scores.label, question=question, metrics=("ql",))
        if verdicts.ground_truth_determined:
            out.append((a, b))
    return out


@validate_params({"question": QUESTION, "resampling": RESAMPLING})
def diagnose_store(
    store: st.Store | str | Path,
    *,
    calibration: Calibration | None = None,
    label: str | None = None,
    pipelines: Sequence[str] | None = None,
    pairs: Sequence[tuple[str, str]] | None = None,
    scores: StoreScores | None = None,
    progress: bool = False,
    question: Question = DEFAULT_QUESTION,
    resampling: Resampling = DEFAULT,
) -> StoreDiagnosis:
    """Seed-variance diagnostics of every pipeline of a store with at least two complete runs.

    Parameters
    ----------
    store : Store or path
        A result store (a path is opened).
    calibration : Calibration, optional
        The rule for CQL (default: the store's recorded one); ignored when ``scores`` is given.
    label : {"raw", "learn"}, optional
        The label to score against (default: the store's); ignored when ``scores`` is given.
    pipelines : sequence of str, optional
        Restrict to these pipelines (default: all).
    pairs : sequence of (str, str), optional
        Pairs for the paired per-seed differences. Default: the store's ``compare:`` pairs among
        the diagnosed pipelines, else every pair when at most :data:`MAX_DEFAULT_PAIRS` pipelines
        are diagnosed, else none.
    scores : StoreScores, optional
        Scores already computed by :func:`~rolling_calib.analysis.scoring.score_store` for this store.
    progress : bool
        Progress bar while scoring.
    question : Question
        The confidence of the std ratio's interval, and what the verdicts that decide which pairs the
        ground truth separates answer (the same as ``compare``'s, so both decide a pair alike).
    resampling : Resampling
        Replicates and seed of the std ratio's bootstrap; its seed is also the held-out ordering check's.

    Returns
    -------
    StoreDiagnosis

    Raises
    ------
    ValueError
        Unknown pipelines, no complete run, or no pipeline with two complete runs.
    """
    store = st.Store.of(store)
    if scores is None:
        scores = score_store(store, calibration=calibration, label=label, pipelines=pipelines, progress=progress)
    names = scores.pipelines if pipelines is None else [n for n in pipelines if n in scores.pipelines]
    notes = list(scores.notes)
    if scores.calibration.bias != "pooled":
        notes.append(f"CQL is scored with {scores.calibration.bias} bias; the split and the bound use each period's pooled "
                     f"mean residual, so they bound a pooled correction only")
    counts = scores.runs.groupby("pipeline")["seed"].nunique()
    diagnosed = [n for n in names if counts.get(n, 0) >= 2]
    skipped = [f"{n}: {int(counts.get(n, 0))} complete run; a seed spread needs at least 2" for n in names
               if n not in diagnosed]
    if not diagnosed:
        raise ValueError(f"{store.root}: no pipeline has 2 complete runs to diagnose ({'; '.join(skipped) or 'none scored'})")
    pairs = _diagnosed_pairs(scores, diagnosed, pairs)
    keeps, detail = _order_check(store, scores, diagnosed, pairs or scores.compare, question=question,
                                 resampling=resampling, notes=notes)
    scale = {n: text.split(": ", 1)[0] + " (the scale_mismatch warning has the measurements)"
             for n, (_, text) in scale_findings(scores.days, diagnosed, scores.label, scores.learned_labels).items()}
    checks = _StoreChecks(keeps, detail if keeps is not None else f"the ordering was not checked: {detail}", scale,
                          question, resampling)
    if keeps is None:
        notes.append(f"calibration's ordering on held-out seeds was not checked: {detail}")
    done = [_diagnose_pipeline(store, name, scores, notes, checks) for name in diagnosed]
    warnings = guard_warnings(days=scores.days, runs=scores.runs, pipelines=diagnosed, label=scores.label,
                              learned=scores.learned_labels, seed_spread=scores.seed_spread, models=scores.models,
                              constant=scores.constant, identical=scores.identical,
                              identical_values=scores.identical_values,
                              stopped=stopping_points(scores.store, diagnosed))
    return StoreDiagnosis(
        store=store.root,
        calibration=scores.calibration,
        label=scores.label,
        pipelines=done,
        runs=scores.runs[scores.runs["pipeline"].isin(diagnosed)].reset_index(drop=True),
        pairs=list(pairs),
        skipped=skipped,
        incomplete=list(scores.incomplete),
        notes=notes,
        warnings=warnings,
        question=question,
        resampling=resampling,
    )


def _diagnosed_pairs(scores: StoreScores, diagnosed: Sequence[str],
                     pairs: Sequence[tuple[str, str]] | None) -> list[tuple[str, str]]:
    """The pairs for the paired differences: given ones (checked), else the store's, else all of a few pipelines."""
    if pairs is None:
        chosen = [(a, b) for a, b in scores.compare if a in diagnosed and b in diagnosed]
        if not chosen and len(diagnosed) <= MAX_DEFAULT_PAIRS:
            chosen = list(itertools.combinations(diagnosed, 2))
        return chosen
    chosen = [(str(a), str(b)) for a, b in pairs]
    for a, b in chosen:
        for name in (a, b):
            if name not in diagnosed:
                raise ValueError(f"pair ({a}, {b}): {name!r} was not diagnosed (diagnosed: {', '.join(diagnosed)})")
    return chosen


# --------------------------------------------------------------------------- held out in time
def time_split_scores(scores: StoreScores, *, metric_periods: Sequence[str], truth_periods: Sequence[str],
                      pipelines: Sequence[str] | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Per pipeline and run: QL and CQL on some calibration periods, the ground truth (QL) on others.

    From the per-day sums of :attr:`StoreScores.days <rolling_calib.analysis.scoring.StoreScores>`, for
    every run (seed) of a pipeline::

        ql    = sum sse_ql  / sum rows   over M*     (the metric's periods, M* below)
        cql   = sum sse_cql / sum rows   over M*
        truth = sum sse_ql  / sum rows   over T      (every truth period)

    ``M*`` is the periods of ``metric_periods`` whose previous period (in time order) is one of
    ``metric_periods`` too: CQL corrects a period with the previous period's mean residual, so a period
    whose bias would come from a truth period is left out of both metrics (no label of the truth's
    periods reaches them). The truth's periods are not scored by the metrics, so the ground truth is held
    out in time; :func:`rolling_calib.core.heldout.held_out_accuracy` holds it out in seeds as well.

    Parameters
    ----------
    scores : StoreScores
    metric_periods, truth_periods : sequence of str
        Disjoint sets of period labels (``scores.periods["period"]``, e.g. ``2018-W10``).
    pipelines : sequence of str, optional
        Default: every pipeline of ``scores``.

    Returns
    -------
    dict
        ``{pipeline: {"seed", "ql", "cql", "truth"}}``, arrays over the pipeline's runs in seed order.

    Raises
    ------
    ValueError
        Overlapping or unknown periods, or no metric period with its previous period among them.

    Example
    -------
    >>> s = score_store(example_store)          # monthly periods 2018-01..04
    >>> v = time_split_scores(s, metric_periods=["2018-01", "2018-02"], truth_periods=["2018-03", "2018-04"])
    >>> sorted(v), sorted(v["wd0"]), v["wd0"]["ql"].size
    (['wd0', 'wd1e-3'], ['cql', 'ql', 'seed', 'truth'], 3)
    """
    metric, truth = [str(p) for p in metric_periods], [str(p) for p in truth_periods]
    overlap = sorted(set(metric) & set(truth))
    if overlap:
        raise ValueError(f"metric_periods, truth_periods: expected disjoint sets, found {', '.join(overlap)} in both")
    order = scores.periods.groupby("period")["start"].min().sort_values().index.tolist()
    unknown = sorted(set(metric + truth) - set(order))
    if unknown or not metric or not truth:
        raise ValueError(f"metric_periods, truth_periods: expected non-empty sets of the store's periods "
                         f"({', '.join(order)}), found unknown {', '.join(unknown) or 'none'}")
    scored = [p for prev, p in zip(order, order[1:]) if p in metric and prev in metric]
    if not scored:
        raise ValueError(f"metric_periods {', '.join(metric)}: no period whose previous period is among them "
                         f"(CQL needs one to take its bias from)")
    names = scores.pipelines if pipelines is None else list(pipelines)
    sums = scores.days.groupby(["pipeline", "seed", "period"])[["rows", "sse_ql", "sse_cql"]].sum(min_count=1)
    out: dict[str, dict[str, np.ndarray]] = {}
    for name in names:
        table = sums.loc[name]
        seeds = sorted(table.index.get_level_values("seed").unique())
        m = table[table.index.get_level_values("period").isin(scored)].groupby(level="seed").sum(min_count=1)
        t = table[table.index.get_level_values("period").isin(truth)].groupby(level="seed").sum(min_count=1)
        m, t = m.reindex(seeds), t.reindex(seeds)
        out[name] = {"seed": np.asarray(seeds, dtype=np.int64),
                     "ql": (m["sse_ql"] / m["rows"]).to_numpy(dtype=float),
                     "cql": (m["sse_cql"] / m["rows"]).to_numpy(dtype=float),
                     "truth": (t["sse_ql"] / t["rows"]).to_numpy(dtype=float)}
    return out
