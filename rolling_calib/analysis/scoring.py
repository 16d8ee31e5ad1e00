"""Score a result store: QL and the monthly rolling CQL per run, then compare pipelines.

A *run* is one seed of one pipeline: its windows' predictions merged over the
whole evaluation period. For every run :func:`score_store` computes, through
:func:`rolling_calib.core.metrics.rolling_calibrated_quadratic_loss` (docs/method.md §2.2)::

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

This module reads Parquet files and calls the pure metric functions; it knows
nothing of Qlib or torch.

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
from rolling_calib.core.ranking_ic import (
    PreparedLabels,
    information_coefficients_arrays,
    prepare_labels,
)
from rolling_calib.core.schedule import CoverageError, Window
from rolling_calib.core.validation import (
    BIAS_MODE,
    CALIBRATION_PERIOD,
    CALIBRATION_SOURCE,
    CONFIDENCE,
    N_BOOT,
    SEED,
    validate_params,
)
from rolling_calib.execution import store as st
from rolling_calib.execution.units import UnitKey

__all__ = [
    "RUN_COLUMNS",
    "PERIOD_COLUMNS",
    "METRICS",
    "StoreScores",
    "StoreComparison",
    "MissingValidationError",
    "RunData",
    "load_run",
    "read_run_data",
    "score_run",
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
    period, bias : str
        The calibration rule used.
    incomplete : list of str
        Runs left out because a unit is missing or stale (``"pipeline/seed3: w01 missing"``).
    compare : list of (str, str)
        Pairs recorded in the store manifest (from the experiment's ``compare:``).
    """

    store: Path
    runs: pd.DataFrame
    periods: pd.DataFrame
    period: str | int
    bias: str
    incomplete: list[str] = field(default_factory=list)
    compare: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    label: str = "raw"  # rolling.label the store was run with: raw or learn-processed labels
    source: str = "previous"  # where each period's bias comes from: previous period or the window's validation

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


def _windows(entry: dict) -> list[Window]:
    return [Window.from_dict(w) for w in entry["windows"]]


def _run_windows(store: Path, manifest: dict, pipeline: str) -> list[Window]:
    """The pipeline's windows from the manifest; ``CoverageError`` when two test segments overlap."""
    entry = manifest["pipelines"].get(pipeline)
    if entry is None:
        raise ValueError(f"{store / st.MANIFEST}: no pipeline {pipeline!r} (have: {', '.join(manifest['pipelines'])})")
    windows = _windows(entry)
    for prev, nxt in itertools.pairwise(windows):
        if nxt.test.start <= prev.test.end:
            raise CoverageError(f"{store}: windows {prev.index} and {nxt.index} overlap")
    return windows


def load_run(store: str | Path, pipeline: str, seed: int, *, manifest: dict | None = None) -> pd.DataFrame:
    """Merged predictions of one run, checked for coverage.

    Every window's unit must be complete with the pipeline's current config hash;
    each unit's rows must lie inside its window's test segment, and the merged
    frame must have no duplicate (datetime, instrument).

    Raises
    ------
    ValueError
        A unit is missing or stale (message names it).
    CoverageError
        Rows outside their window, overlapping windows or duplicates.
    """
    store = Path(store)
    manifest = st.read_manifest(store) if manifest is None else manifest
    windows = _run_windows(store, manifest, pipeline)
    entry = manifest["pipelines"][pipeline]
    frames = []
    for w in windows:
        key = UnitKey(pipeline, int(seed), w.index)
        side = st.read_sidecar(store, key)
        if side is None or not st.unit_paths(store, key).parquet.is_file():
            raise ValueError(f"{store}: unit {key.slug()} is missing")
        if side.get("config_hash") != entry["config_hash"]:
            raise ValueError(f"{store}: unit {key.slug()} is stale (config hash {side.get('config_hash')}, expected {entry['config_hash']})")
        frame = st.read_unit(store, key)
        outside = ~w.test.contains(frame["datetime"])
        if outside.any():
            raise CoverageError(f"{st.unit_paths(store, key).parquet}: {int(outside.sum())} rows outside test segment {w.test.as_tuple()}")
        frames.append(frame)
    merged = pd.concat(frames, ignore_index=True)
    dup = merged.duplicated(["datetime", "instrument"])
    if dup.any():
        raise CoverageError(f"{store}: run {pipeline}/seed{seed} has {int(dup.sum())} duplicate (datetime, instrument) rows")
    return merged


def score_run(frame: pd.DataFrame, *, period: str | int = "month", bias: str = "pooled") -> metrics.RollingCQL:
    """QL and rolling CQL of one merged run (columns ``datetime, instrument, prediction, label``)."""
    return metrics.rolling_calibrated_quadratic_loss(
        frame["prediction"].to_numpy(dtype=float),
        frame["label"].to_numpy(dtype=float),
        frame["datetime"].to_numpy(),
        instruments=frame["instrument"].to_numpy(),
        period=period,
        bias=bias,
    )


@dataclass
class _RunArrays:
    """One run's predictions as arrays, read from its units with column projection (no per-run frame).

    ``codes`` index ``names`` (the instrument ids, in the order the units' dictionaries list them);
    -1 marks a missing id.
    """

    datetime: np.ndarray
    prediction: np.ndarray
    label: np.ndarray
    codes: np.ndarray
    names: np.ndarray
    window: np.ndarray | None = None   # index of the window (model) of every row

    @property
    def instruments(self) -> pd.Categorical:
        return pd.Categorical.from_codes(self.codes, categories=pd.Index(self.names))

    def frame(self) -> pd.DataFrame:
        """The columns of :func:`load_run` as a frame over the arrays (no copy of the numbers)."""
        return pd.DataFrame({"datetime": self.datetime, "instrument": self.instruments,
                             "prediction": self.prediction, "label": self.label}, copy=False)


class _LegacyRead(Exception):
    """A unit whose columns the array reader does not take as they are (time zones, non-timestamp dates)."""


def _read_unit_arrays(path: Path, names: dict[Any, int]) -> tuple[np.ndarray, ...]:
    """Datetime, prediction, label and instrument codes of one unit file; ``names`` collects the ids."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    source = pq.ParquetFile(path, read_dictionary=["instrument"])
    missing = [c for c in st.UNIT_COLUMNS if c not in source.schema_arrow.names]
    if missing:
        raise ValueError(f"{path}: expected columns {', '.join(st.UNIT_COLUMNS)}, missing {', '.join(missing)}")
    table = source.read(columns=list(st.UNIT_COLUMNS))
    when = table.column("datetime")
    if not pa.types.is_timestamp(when.type) or when.type.tz is not None:
        raise _LegacyRead(path)
    ids = table.column("instrument").combine_chunks()
    if not pa.types.is_dictionary(ids.type):
        ids = ids.dictionary_encode()
    remap = np.array([names.setdefault(v, len(names)) for v in ids.dictionary.to_pylist()] + [-1], dtype=np.int32)
    codes = remap[pc.fill_null(ids.indices, -1).to_numpy()]   # a missing id (-1) picks the -1 at the end
    return (when.to_numpy(), table.column("prediction").to_numpy(), table.column("label").to_numpy(), codes)


def _rows_outside(times: np.ndarray, window: Window) -> int:
    """Rows of ``times`` outside the window's test segment (bounds first: one pass when all are inside)."""
    ticks = times.view(np.int64)
    if not len(ticks):
        return 0
    unit = np.datetime_data(times.dtype)[0]
    first, last = (pd.Timestamp(np.datetime64(int(v), unit)) for v in (ticks.min(), ticks.max()))
    if first >= window.test.start and last <= window.test.end:
        return 0
    return int((~window.test.contains(times)).sum())


def _duplicate_rows(times: np.ndarray, codes: np.ndarray) -> int:
    """Rows repeating an earlier (datetime, instrument) pair of the same unit.

    Rows sorted by datetime, then instrument code (the order units are written in) are
    recognised in a few passes; otherwise the pairs are sorted as one integer key.
    """
    t = times.view(np.int64)
    if len(t) < 2:
        return 0
    # in order: every row is at a later time, or at the same time with a higher code
    in_order = (t[1:] == t[:-1]) & (codes[1:] > codes[:-1])
    in_order |= t[1:] > t[:-1]
    if in_order.all():
        return 0
    lo, span, width = int(t.min()), int(t.max()) - int(t.min()), int(codes.max()) + 2
    if (span + 1) * width < 2**62:
        key = (t - lo) * width + (codes.astype(np.int64) + 1)
        key.sort()
        return int((key[1:] == key[:-1]).sum())
    return int(pd.DataFrame({"t": t, "c": codes}).duplicated().sum())


def _read_run(store: Path, pipeline: str, seed: int, *, manifest: dict) -> _RunArrays:
    """:func:`load_run` as arrays: the same checks and errors, Parquet read with column projection.

    Raises ``_LegacyRead`` for units the arrays do not represent as they are (then use :func:`load_run`).
    """
    windows = _run_windows(store, manifest, pipeline)
    entry = manifest["pipelines"][pipeline]
    names: dict[Any, int] = {}
    parts = []
    window_ids: list[np.ndarray] = []
    duplicates = 0
    for w in windows:
        key = UnitKey(pipeline, int(seed), w.index)
        side = st.read_sidecar(store, key)
        path = st.unit_paths(store, key).parquet
        if side is None or not path.is_file():
            raise ValueError(f"{store}: unit {key.slug()} is missing")
        if side.get("config_hash") != entry["config_hash"]:
            raise ValueError(f"{store}: unit {key.slug()} is stale (config hash {side.get('config_hash')}, expected {entry['config_hash']})")
        part = _read_unit_arrays(path, names)
        outside = _rows_outside(part[0], w)
        if outside:
            raise CoverageError(f"{path}: {outside} rows outside test segment {w.test.as_tuple()}")
        # windows do not overlap and rows lie in their window: duplicates can only be within a unit
        duplicates += _duplicate_rows(part[0], part[3])
        parts.append(part)
        window_ids.append(np.full(len(part[0]), w.index, dtype=np.int64))
    if duplicates:
        raise CoverageError(f"{store}: run {pipeline}/seed{seed} has {duplicates} duplicate (datetime, instrument) rows")
    if len({p[0].dtype for p in parts}) > 1:
        raise _LegacyRead(store)
    columns = [np.concatenate([p[i] for p in parts]) for i in range(4)]
    return _RunArrays(datetime=columns[0], prediction=columns[1].astype(float, copy=False),
                      label=columns[2].astype(float, copy=False), codes=columns[3],
                      names=np.array(list(names), dtype=object), window=np.concatenate(window_ids))


class MissingValidationError(ValueError):
    """A store without validation-period predictions was asked for ``source='validation'``."""


@dataclass
class RunData:
    """One run's test predictions (``test``) and, when asked for, its windows' validation predictions (``valid``)."""

    test: _RunArrays
    valid: _RunArrays | None = None

    def rolling_cql(self, *, period: str | int = "month", bias: str = "pooled", source: str = "previous") -> metrics.RollingCQL:
        """:func:`~rolling_calib.core.metrics.rolling_calibrated_quadratic_loss` of the run (refit periods flagged)."""
        t, v = self.test, self.valid
        per = bias == "per_instrument"
        extra: dict[str, Any] = {}
        if source == "validation":
            if v is None:
                raise MissingValidationError("source='validation': the run was read without its validation predictions")
            extra = dict(valid_predictions=v.prediction, valid_labels=v.label, valid_windows=v.window,
                         valid_instruments=v.instruments if per else None)
        return metrics.rolling_calibrated_quadratic_loss(
            t.prediction, t.label, t.datetime, instruments=t.instruments if per else None, period=period, bias=bias,
            source=source, windows=t.window, **extra)


def _frame_arrays(frame: pd.DataFrame, windows: Sequence[Window]) -> _RunArrays:
    """A frame of :func:`load_run` as arrays (instrument codes, the window of every row)."""
    codes, names = pd.factorize(frame["instrument"], use_na_sentinel=True)
    window = np.full(len(frame), -1, dtype=np.int64)
    for w in windows:
        window[np.asarray(w.test.contains(frame["datetime"]))] = w.index
    return _RunArrays(datetime=frame["datetime"].to_numpy(), prediction=frame["prediction"].to_numpy(dtype=float),
                      label=frame["label"].to_numpy(dtype=float), codes=codes.astype(np.int32),
                      names=np.asarray(names, dtype=object), window=window)


def _read_valid(store: Path, pipeline: str, seed: int, *, manifest: dict) -> _RunArrays:
    """The validation predictions of every window of a run (``wNN.valid.parquet``).

    Raises :class:`MissingValidationError` naming the store when a unit has none.
    """
    entry = manifest["pipelines"][pipeline]
    names: dict[Any, int] = {}
    parts, window_ids = [], []
    for w in _windows(entry):
        key = UnitKey(pipeline, int(seed), w.index)
        side = st.read_sidecar(store, key) or {}
        path = st.unit_paths(store, key).valid_parquet
        if side.get("valid_rows") is None or not path.is_file():
            why = ("its windows have no validation segment" if w.valid is None else
                   "it was written before validation predictions were stored")
            raise MissingValidationError(
                f"{store}: source 'validation' needs each window's validation-period predictions, but unit "
                f"{key.slug()} has none ({why}); use source 'previous' (compare --source previous), or re-run "
                f"the store with a valid segment in rolling: to store them")
        try:
            part = _read_unit_arrays(path, names)
        except _LegacyRead:
            frame = pd.read_parquet(path)
            part = (frame["datetime"].dt.tz_localize(None).to_numpy() if frame["datetime"].dt.tz is not None
                    else frame["datetime"].to_numpy(), frame["prediction"].to_numpy(), frame["label"].to_numpy(),
                    np.array([names.setdefault(v, len(names)) for v in frame["instrument"]], dtype=np.int32))
        parts.append(part)
        window_ids.append(np.full(len(part[0]), w.index, dtype=np.int64))
    columns = [np.concatenate([p[i] for p in parts]) for i in range(4)]
    return _RunArrays(datetime=columns[0], prediction=columns[1].astype(float, copy=False),
                      label=columns[2].astype(float, copy=False), codes=columns[3],
                      names=np.array(list(names), dtype=object), window=np.concatenate(window_ids))


def read_run_data(store: str | Path, pipeline: str, seed: int, *, manifest: dict | None = None,
                  validation: bool = False) -> RunData:
    """One run's predictions as arrays (:func:`load_run`'s checks), with its validation predictions if asked.

    Raises
    ------
    ValueError
        A unit is missing or stale; :class:`MissingValidationError` (a ``ValueError``) when
        ``validation`` is set and a unit has no stored validation predictions.
    CoverageError
        Rows outside their window, overlapping windows or duplicates.
    """
    store = Path(store)
    manifest = st.read_manifest(store) if manifest is None else manifest
    try:
        test = _read_run(store, pipeline, seed, manifest=manifest)
    except _LegacyRead:  # time-zone-aware or non-timestamp dates: through pandas
        frame = load_run(store, pipeline, seed, manifest=manifest)
        test = _frame_arrays(frame, _windows(manifest["pipelines"][pipeline]))
        test.datetime = frame["datetime"]  # keeps the time zone: dates are read in local time
    valid = _read_valid(store, pipeline, seed, manifest=manifest) if validation else None
    return RunData(test=test, valid=valid)


@validate_params({"period": CALIBRATION_PERIOD, "bias": BIAS_MODE, "source": CALIBRATION_SOURCE})
def score_store(
    store: str | Path,
    *,
    period: str | int = "month",
    bias: str = "pooled",
    pipelines: Sequence[str] | None = None,
    progress: bool = False,
    source: str = "previous",
) -> StoreScores:
    """Score every complete run of a store.

    Parameters
    ----------
    store : path
        A store written by :func:`rolling_calib.execution.runner.run_plan`.
    period : "month", "week", "quarter" or int
        Calibration period (docs/method.md §2.2: month).
    bias : "pooled" or "per_instrument"
    source : "previous" or "validation"
        Bias from the previous period (docs/method.md §2.2) or from each window's own validation
        predictions (stores written since they are kept; older stores are refused).
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
        A ``period`` or ``bias`` outside the declared choices, unknown pipelines, or no
        complete run at all.
    """
    store = Path(store)
    manifest = st.read_manifest(store)
    names = selected_pipelines(store, manifest, pipelines)
    scored = _score_runs(store, manifest, names, period=period, bias=bias, source=source, progress=progress)
    return _store_scores(store, manifest, names, scored, period=period, bias=bias, source=source)


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


def _score_runs(store: Path, manifest: dict, names: Sequence[str], *, period: str | int, bias: str, source: str,
                progress: bool) -> _ScoredRuns:
    """Read and score every recorded seed of ``names``; a run with a missing or stale unit is listed as incomplete."""
    from tqdm.auto import tqdm

    scored = _ScoredRuns(rows=[], tables=[], incomplete=[])
    labels: dict[str, PreparedLabels] = {}   # the last run's labels: the next seed usually has the same
    runs = [(name, int(seed)) for name in names for seed in manifest["pipelines"][name].get("seeds", [])]
    for name, seed in tqdm(runs, desc="scoring runs", unit="run", disable=not progress, leave=False):
        try:
            data = read_run_data(store, name, seed, manifest=manifest)
        except (CoverageError, st.CorruptStoreFileError):
            raise
        except ValueError as exc:  # a missing or stale unit: report the run as incomplete
            scored.incomplete.append(f"{name}/seed{seed}: {exc}")
            continue
        if source == "validation":  # a unit without validation predictions stops the scoring, naming the store
            data.valid = _read_valid(store, name, seed, manifest=manifest)
        result = data.rolling_cql(period=period, bias=bias, source=source)
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


def _store_scores(store: Path, manifest: dict, names: Sequence[str], scored: _ScoredRuns, *, period: str | int,
                  bias: str, source: str) -> StoreScores:
    """Assemble :class:`StoreScores` from the scored runs (refusing a store with no complete run)."""
    if not scored.rows:
        detail = "; ".join(scored.incomplete[:5]) or "no seeds recorded"
        raise ValueError(f"{store}: no complete run to score ({detail})")
    periods = pd.concat(scored.tables, ignore_index=True)
    ordered = list(PERIOD_COLUMNS) + [c for c in periods.columns if c not in PERIOD_COLUMNS]
    pairs = [tuple(p) for p in manifest.get("compare", []) if p[0] in names and p[1] in names]
    return StoreScores(
        store=store,
        runs=pd.DataFrame(scored.rows, columns=list(RUN_COLUMNS)),
        periods=periods[ordered],
        period=period,
        bias=bias,
        incomplete=scored.incomplete,
        compare=pairs,  # type: ignore[arg-type]
        notes=_mixed_config_notes(manifest, [n for n in names if any(r["pipeline"] == n for r in scored.rows)]),
        label=recorded_label(manifest),
        source=source,
    )


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


def recorded_label(manifest: dict) -> str:
    """The ``rolling.label`` a store was run with (``raw`` for stores from before the option)."""
    return str(manifest.get("experiment", {}).get("rolling", {}).get("label", "raw"))


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
    period, bias : calibration rule; n_boot, confidence, seed : bootstrap settings.
    """

    summary: pd.DataFrame
    pairs: list[cmp.PairComparison]
    period: str | int
    bias: str
    n_boot: int
    confidence: float
    seed: int
    incomplete: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    label: str = "raw"
    source: str = "previous"

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (for ``--json``)."""

        def clean(value: Any) -> Any:
            if isinstance(value, float) and not math.isfinite(value):
                return None
            if isinstance(value, (np.integer,)):
                return int(value)
            if isinstance(value, (np.floating,)):
                return clean(float(value))
            return value

        return {
            "period": self.period,
            "bias": self.bias,
            "source": self.source,
            "label": self.label,
            "bootstrap": {"n_boot": self.n_boot, "confidence": self.confidence, "seed": self.seed},
            "pipelines": [{k: clean(v) for k, v in rec.items()} for rec in self.summary.to_dict(orient="records")],
            "pairs": [_clean_nested(p.to_dict()) for p in self.pairs],
            "incomplete_runs": list(self.incomplete),
            "notes": list(self.notes),
        }

    def format(self) -> str:
        """Plain-text tables for the terminal."""
        source = "" if self.source == "previous" else f", bias from each window's {self.source} predictions"
        lines = [f"Per pipeline (calibration: {self.period}, bias {self.bias}{source}; labels: {self.label}; "
                 "std over seeds, ddof=1)"]
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
        period=scores.period,
        bias=scores.bias,
        n_boot=n_boot,
        confidence=confidence,
        seed=seed,
        incomplete=list(scores.incomplete),
        notes=list(scores.notes),
        label=scores.label,
        source=scores.source,
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


def recorded_source(store: str | Path) -> str:
    """The calibration ``source`` the store's experiment declared (``previous``, the paper's, if none)."""
    manifest = st.read_manifest(store)
    return str(manifest.get("experiment", {}).get("rolling", {}).get("calibration", {}).get("source", "previous"))


def recorded_calibration(store: str | Path) -> tuple[str | int, str]:
    """The calibration (period, bias) the store's experiment declared; the paper's (month, pooled) if none.

    Raises the store's errors (no manifest, a corrupt one) naming the file.
    """
    manifest = st.read_manifest(store)
    calibration = manifest.get("experiment", {}).get("rolling", {}).get("calibration", {})
    return calibration.get("period", "month"), calibration.get("bias", "pooled")
