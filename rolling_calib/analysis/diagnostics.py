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
* a one-line verdict (:func:`rolling_calib.core.diagnostics.verdict`).

The split uses each period's pooled mean residual (METHOD 2.2's rule), whatever bias mode
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
>>> wd0.verdict.startswith("Calibration can help:")
True
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
from rolling_calib.core import diagnostics as dg
from rolling_calib.core.calibration import Calibration
from rolling_calib.core.label import Label
from rolling_calib.core.schedule import Window
from rolling_calib.execution import store as st
from rolling_calib.execution.reader import read_run

__all__ = ["MAX_DEFAULT_PAIRS", "PipelineDiagnosis", "StoreDiagnosis", "diagnose_store", "run_period_stats"]

#: Without recorded ``compare:`` pairs, every pair is differenced only up to this many pipelines.
MAX_DEFAULT_PAIRS = 4
OFFSET_COLUMNS = ("seed", "period", "start", "mean_residual", "offset", "window", "refit")


def _clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def _std(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1)) if values.size > 1 else math.nan


def _num(value: float, digits: int = 4) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}g}"


def _pct(value: float) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{round(value * 100)}%"


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
    label : Label
        The label the runs were scored against (the offsets are in its unit).
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

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (NaN as None; the offsets as records with ISO dates)."""
        offsets = self.offsets.assign(start=self.offsets["start"].map(lambda t: t.isoformat()))
        return _clean({
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
            f"  Verdict: {self.verdict}",
        ]
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
        return _clean({
            "store": str(self.store),
            "period": self.calibration.period,
            "bias": self.calibration.bias,
            "pipelines": [p.to_dict() for p in self.pipelines],
            "paired_differences": [self._pair_summary(a, b) for a, b in self.pairs],
            "skipped": list(self.skipped),
            "incomplete_runs": list(self.incomplete),
            "notes": list(self.notes),
        })

    def format(self) -> str:
        """Plain text for the terminal."""
        lines = [f"Seed-variance diagnostics (calibration: {self.calibration.describe()}; {self.label.describe()}; "
                 f"std over seeds, ddof=1)", ""]
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


def _prediction_stats(store: Path, name: str, seeds: Sequence[int], table: pd.DataFrame, common: pd.Index,
                      manifest: dict, label: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seeds x periods: mean and std of the predictions (rows scored against ``label``), and the window of
    each period's first row."""
    windows = [Window.from_dict(w) for w in manifest["pipelines"][name]["windows"]]
    shape = (len(seeds), len(common))
    mean_pred = np.empty(shape)
    pred_std = np.empty(shape)
    win = np.empty(shape, dtype=np.int64)
    for i, seed in enumerate(seeds):
        frame = read_run(store, name, seed, manifest=manifest, label=label).test.frame()
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


def _diagnose_pipeline(store: Path, name: str, scores: StoreScores, manifest: dict,
                       notes: list[str]) -> PipelineDiagnosis:
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
    mean_pred, pred_std, win = _prediction_stats(store, name, seeds, table, common, manifest, scores.label.kind)
    refit = np.logical_or.reduce([dg.refit_boundaries(w) for w in win])
    split = dg.split_seed_variance(b[:, scored], ql[:, scored], rows[:, scored])
    std_cql = _std(runs["cql"].to_numpy(dtype=float))
    removable, removed = dg.correction_fractions(split.std_ql, split.std_spread, std_cql)
    offsets = dg.seed_offsets(b)
    persistence = dg.offset_persistence(offsets, refit)
    return PipelineDiagnosis(
        pipeline=name,
        seeds=seeds,
        periods=labels,
        scored_periods=[lab for lab, s in zip(labels, scored) if s],
        refits=[lab for lab, r in zip(labels, refit) if r],
        split=split,
        std_cql=std_cql,
        removable=removable,
        removed=removed,
        spread=dg.prediction_spread(mean_pred, pred_std),
        persistence=persistence,
        offsets=_offsets_frame(seeds, labels, common, b, offsets, win, refit),
        verdict=dg.verdict(removable, removed, corr_within=persistence.corr_within,
                           corr_across=persistence.corr_across),
        label=scores.label,
    )


def diagnose_store(
    store: str | Path,
    *,
    calibration: Calibration | None = None,
    label: str | None = None,
    pipelines: Sequence[str] | None = None,
    pairs: Sequence[tuple[str, str]] | None = None,
    scores: StoreScores | None = None,
    progress: bool = False,
) -> StoreDiagnosis:
    """Seed-variance diagnostics of every pipeline of a store with at least two complete runs.

    Parameters
    ----------
    store : path
        A result store.
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

    Returns
    -------
    StoreDiagnosis

    Raises
    ------
    ValueError
        Unknown pipelines, no complete run, or no pipeline with two complete runs.
    """
    store = Path(store)
    if scores is None:
        scores = score_store(store, calibration=calibration, label=label, pipelines=pipelines, progress=progress)
    manifest = st.read_manifest(store)
    names = scores.pipelines if pipelines is None else [n for n in pipelines if n in scores.pipelines]
    notes = list(scores.notes)
    if scores.calibration.bias != "pooled":
        notes.append(f"CQL is scored with {scores.calibration.bias} bias; the split and the bound use each period's pooled "
                     f"mean residual, so they bound a pooled correction only")
    done, skipped = [], []
    for name in names:
        n_runs = int((scores.runs["pipeline"] == name).sum())
        if n_runs < 2:
            skipped.append(f"{name}: {n_runs} complete run; a seed spread needs at least 2")
            continue
        done.append(_diagnose_pipeline(store, name, scores, manifest, notes))
    if not done:
        raise ValueError(f"{store}: no pipeline has 2 complete runs to diagnose ({'; '.join(skipped) or 'none scored'})")
    diagnosed = [d.pipeline for d in done]
    if pairs is None:
        pairs = [(a, b) for a, b in scores.compare if a in diagnosed and b in diagnosed]
        if not pairs and len(diagnosed) <= MAX_DEFAULT_PAIRS:
            pairs = list(itertools.combinations(diagnosed, 2))
    else:
        pairs = [(str(a), str(b)) for a, b in pairs]
        for a, b in pairs:
            for name in (a, b):
                if name not in diagnosed:
                    raise ValueError(f"pair ({a}, {b}): {name!r} was not diagnosed (diagnosed: {', '.join(diagnosed)})")
    return StoreDiagnosis(
        store=store,
        calibration=scores.calibration,
        label=scores.label,
        pipelines=done,
        runs=scores.runs[scores.runs["pipeline"].isin(diagnosed)].reset_index(drop=True),
        pairs=list(pairs),
        skipped=skipped,
        incomplete=list(scores.incomplete),
        notes=notes,
    )
