"""Held-out pairwise accuracy with an interval: how often a metric on some runs ranks like a truth it never saw.

Pure functions on per-run values ``{pipeline: {metric: values over runs}}`` (runs in the same order for
every metric of a pipeline; lower is better). The *ground truth* is one of the metrics, measured where the
metrics under test were not: on other runs (seeds) and, when the caller computed it so, on other periods
of market time (:func:`rolling_calib.analysis.diagnostics.time_split_scores`).

Held-out accuracy (docs/method.md §1, §5)
    One split cuts each pipeline's runs at random into halves ``H1`` (``floor(r/2)`` runs) and ``H2``
    (the rest). The pair's direction is set by the mean ground truth over ``H2``; a metric's accuracy is
    ``P(M_better,i < M_worse,j)`` over the ``H1 x H1`` run pairs (ties 1/2; a tie of the ``H2`` means
    counts 1/2). The estimate is the mean over ``n_splits`` random splits: the same number as
    :func:`rolling_calib.core.metaeval.split_seed_accuracy`.

Interval over seeds (a cluster bootstrap)
    Each replicate draws every pipeline's runs with replacement (as many as it has) and repeats the
    held-out accuracy on the draw with ``boot_splits`` random splits, where a run drawn several times
    stays in one half with its multiplicity as its weight (so no run is ever on both sides of a split: a
    duplicate in both halves would let a seed's own noise set the direction it is scored against). The
    interval is the percentile interval of the replicates (a draw with a single distinct run is drawn again:
    it cannot be split). It is given for every metric, for the
    difference of each metric against ``baseline`` (the paired difference within each replicate), and for
    the mean over the pairs (the pairs share pipelines: their replicates share draws). Its coverage is
    measured by simulation in ``bench/heldout_accuracy_coverage.py``, not assumed.

Example
-------
>>> scores = {"a": {"truth": [1.0, 1.1, 0.9, 1.0, 1.2, 0.8], "m": [0.0, 0.1, 0.0, 0.1, 0.2, 0.0]},
...           "b": {"truth": [2.0, 2.1, 1.9, 2.0, 2.2, 1.8], "m": [1.0, 1.1, 1.0, 1.1, 1.2, 1.0]}}
>>> t = held_out_accuracy(scores, [("a", "b")], metrics=["m"], ground_truth="truth", n_boot=50)
>>> t[["pair", "metric", "accuracy", "ci_low", "ci_high"]].values.tolist()
[['a vs b', 'm', 1.0, 1.0, 1.0], ['mean over pairs', 'm', 1.0, 1.0, 1.0]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from rolling_calib.core.validation import CONFIDENCE, POSITIVE_INT, SEED, validate_params

__all__ = ["HELD_OUT_COLUMNS", "MEAN_ROW", "held_out_accuracy", "weighted_split_accuracy"]

#: Columns of :func:`held_out_accuracy`'s table.
HELD_OUT_COLUMNS = ("pair", "a", "b", "metric", "accuracy", "ci_low", "ci_high", "n_splits", "n_boot")
#: ``pair`` of the rows that average over the pairs.
MEAN_ROW = "mean over pairs"


def _values(scores: Mapping[str, Mapping[str, Any]], names: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
    """Validated float arrays: finite, 1-D, one value per run for every metric of a pipeline, >= 2 runs."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for pipeline, values in scores.items():
        arrays = {}
        for name in names:
            if name not in values:
                raise ValueError(f"scores[{pipeline!r}]: no metric {name!r} (have: {', '.join(values)})")
            arr = np.asarray(values[name], dtype=np.float64)
            if arr.ndim != 1 or arr.size < 2 or not np.all(np.isfinite(arr)):
                raise ValueError(f"scores[{pipeline!r}][{name!r}]: expected >= 2 finite values in a 1-D array, "
                                 f"found {arr.tolist()[:5]}")
            arrays[name] = arr
        sizes = {m: a.size for m, a in arrays.items()}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"scores[{pipeline!r}]: metrics have different numbers of runs {sizes}; expected one per run")
        out[pipeline] = arrays
    return out


def _halves(counts: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Boolean masks of the two halves of the runs with ``counts > 0``: whole runs in a random order into the first
    half while its total weight stays within ``floor(sum / 2)`` (at least one run), the rest in the second."""
    present = np.flatnonzero(counts > 0)
    order = rng.permutation(present)
    cum = np.cumsum(counts[order])
    k = max(1, int(np.searchsorted(cum, counts.sum() // 2, side="right")))
    k = min(k, len(order) - 1)
    first = np.zeros(counts.size, dtype=bool)
    first[order[:k]] = True
    second = np.zeros(counts.size, dtype=bool)
    second[order[k:]] = True
    return first, second


def _draw(size: int, rng: np.random.Generator) -> np.ndarray:
    """Multiplicities of ``size`` runs drawn with replacement, drawn again until two distinct runs are in (a split
    needs a run on each side)."""
    while True:
        counts = np.bincount(rng.integers(0, size, size), minlength=size).astype(float)
        if np.count_nonzero(counts) >= 2:
            return counts


def weighted_split_accuracy(values: Mapping[str, Mapping[str, np.ndarray]], counts: Mapping[str, np.ndarray],
                            pairs: Sequence[tuple[str, str]], *, metrics: Sequence[str], ground_truth: str,
                            n_splits: int, rng: np.random.Generator) -> np.ndarray:
    """Mean over ``n_splits`` random splits of the held-out accuracy, runs weighted by ``counts``.

    Returns an array ``(len(pairs), len(metrics))``. With every count 1 this is the estimate of
    :func:`rolling_calib.core.metaeval.split_seed_accuracy` (other random halves, the same expectation).

    >>> v = {"a": {"t": np.array([1.0, 1.0]), "m": np.array([0.0, 2.0])}, "b": {"t": np.array([2.0, 2.0]),
    ...      "m": np.array([1.0, 1.0])}}
    >>> ones = {"a": np.ones(2), "b": np.ones(2)}
    >>> weighted_split_accuracy(v, ones, [("a", "b")], metrics=["m"], ground_truth="t", n_splits=400,
    ...                         rng=np.random.default_rng(0)).round(1).tolist()
    [[0.5]]
    """
    out = np.zeros((len(pairs), len(metrics)))
    for _ in range(int(n_splits)):
        halves = {n: _halves(np.asarray(counts[n]), rng) for n in values}
        for i, (a, b) in enumerate(pairs):
            (a1, a2), (b1, b2) = halves[a], halves[b]
            ca, cb = counts[a], counts[b]
            ga = np.average(values[a][ground_truth][a2], weights=ca[a2])
            gb = np.average(values[b][ground_truth][b2], weights=cb[b2])
            for j, m in enumerate(metrics):
                if ga == gb:
                    out[i, j] += 0.5
                    continue
                (xb, wb), (xw, ww) = ((values[a][m][a1], ca[a1]), (values[b][m][b1], cb[b1]))
                if gb < ga:
                    (xb, wb), (xw, ww) = (xw, ww), (xb, wb)
                diff = xb[:, None] - xw[None, :]
                w = wb[:, None] * ww[None, :]
                out[i, j] += float(np.sum(w * ((diff < 0) + 0.5 * (diff == 0))) / np.sum(w))
    return out / int(n_splits)


@validate_params({"n_boot": POSITIVE_INT, "n_splits": POSITIVE_INT, "boot_splits": POSITIVE_INT,
                  "confidence": CONFIDENCE, "seed": SEED})
def held_out_accuracy(scores: Mapping[str, Mapping[str, Any]], pairs: Sequence[tuple[str, str]], *,
                      metrics: Sequence[str], ground_truth: str, baseline: str | None = None, n_boot: int = 500,
                      n_splits: int = 200, boot_splits: int = 20, confidence: float = 0.95,
                      seed: int = 0) -> pd.DataFrame:
    """Held-out pairwise accuracy of every metric on every pair, with a percentile interval over seeds.

    Parameters
    ----------
    scores : mapping
        ``{pipeline: {metric: per-run values}}``; every metric and the ground truth per run.
    pairs : sequence of (str, str)
        Pairs to score (the direction comes from the ground truth on the held-out halves).
    metrics : sequence of str
        Metrics under test.
    ground_truth : str
        The values the direction is taken from (measured where the metrics were not, by the caller).
    baseline : str, optional
        One of ``metrics``: every other metric also gets the row ``"<metric> - <baseline>"``, the
        difference of their accuracies (the same splits and draws).
    n_boot, boot_splits : int
        Bootstrap replicates, and random splits per replicate.
    n_splits : int
        Random splits of the point estimate.
    confidence : float
    seed : int
        Seed of every random draw (splits and replicates).

    Returns
    -------
    DataFrame
        :data:`HELD_OUT_COLUMNS`: one row per pair and metric (and difference), then the rows
        :data:`MEAN_ROW` averaging over the pairs.

    Raises
    ------
    ValueError
        A pipeline of a pair without scores, a missing metric, fewer than 2 runs, or ``baseline``
        not among ``metrics``.
    """
    if baseline is not None and baseline not in metrics:
        raise ValueError(f"baseline: expected one of the metrics {list(metrics)}, found {baseline!r}")
    pairs = [(str(a), str(b)) for a, b in pairs]
    if not pairs:
        raise ValueError("pairs: expected at least one pair")
    names = sorted({n for pair in pairs for n in pair})
    missing = [n for n in names if n not in scores]
    if missing:
        raise ValueError(f"pairs: no scores for {', '.join(missing)} (have: {', '.join(scores)})")
    values = _values({n: scores[n] for n in names}, [ground_truth, *metrics])
    rng = np.random.default_rng(int(seed))
    ones = {n: np.ones(values[n][ground_truth].size) for n in names}
    point = weighted_split_accuracy(values, ones, pairs, metrics=metrics, ground_truth=ground_truth,
                                    n_splits=n_splits, rng=rng)
    reps = np.empty((int(n_boot), len(pairs), len(metrics)))
    for r in range(int(n_boot)):
        counts = {n: _draw(c.size, rng) for n in names for c in (ones[n],)}
        reps[r] = weighted_split_accuracy(values, counts, pairs, metrics=metrics, ground_truth=ground_truth,
                                          n_splits=boot_splits, rng=rng)
    columns = list(metrics)
    if baseline is not None:
        k = list(metrics).index(baseline)
        others = [j for j, m in enumerate(metrics) if m != baseline]
        point = np.concatenate([point, point[:, others] - point[:, [k]]], axis=1)
        reps = np.concatenate([reps, reps[:, :, others] - reps[:, :, [k]]], axis=2)
        columns += [f"{metrics[j]} - {baseline}" for j in others]
    alpha = 1.0 - float(confidence)
    rows = []
    for label, (a, b), est, rep in [*((f"{a} vs {b}", (a, b), point[i], reps[:, i]) for i, (a, b) in enumerate(pairs)),
                                    (MEAN_ROW, ("", ""), point.mean(axis=0), reps.mean(axis=1))]:
        lo, hi = np.quantile(rep, [alpha / 2, 1 - alpha / 2], axis=0)
        for j, m in enumerate(columns):
            rows.append((label, a, b, m, float(est[j]), float(lo[j]), float(hi[j]), int(n_splits), int(n_boot)))
    return pd.DataFrame(rows, columns=list(HELD_OUT_COLUMNS))

