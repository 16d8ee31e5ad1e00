"""Meta-evaluation of metric variants: which metric ranks pipelines like the ground truth, from fewer seeds.

Pure functions on per-run scores ``{pipeline: {metric: values over runs}}`` (runs in the same
order for every metric of a pipeline). Lower is better for every metric.

Pairwise accuracy per compared pair (docs/method.md §3)
    The direction is set by the ground truth averaged over *all* runs:
    ``better = argmin_{A, B} mean_r GT_r``. For each metric ``M``
    ``Acc_M = 1/(m n) sum_i sum_j (1[M_{better,i} < M_{worse,j}] + 1/2 1[=])`` with a seeded
    percentile-bootstrap interval (:func:`rolling_calib.core.pairwise.pairwise_accuracy_ci`),
    and the mean of ``Acc_M`` over the pairs.

Split-seed accuracy (the primary accuracy)
    The direction of a pair measured on the same seeds as the metric flatters every metric that
    shares their noise. Repeated ``n_splits`` times with a recorded seed: each pipeline's runs are
    shuffled and cut into halves ``H1`` (``floor(r/2)`` runs) and ``H2`` (the rest); the pair's
    direction is set by the mean ground truth over ``H2`` only, and the metric's pairwise accuracy
    is counted over the ``H1 x H1`` run pairs against it. ``split_accuracy`` is the mean over the
    splits (a split whose ``H2`` means tie counts 1/2), ``split_low``/``split_high`` the 2.5% and
    97.5% quantiles over the splits (how much the estimate moves with the split, not an interval
    of the true accuracy).

Split-seed check
    Repeated ``n_splits`` times with a recorded seed: the runs of every pipeline are shuffled
    and cut into halves ``H1`` (``floor(r/2)`` runs) and ``H2`` (the rest). Pipelines are ranked
    by ``mean_{H1} M`` and by ``mean_{H2} GT``; the agreement is Kendall's tau-b of the two
    rankings over all pipelines and the concordance over the compared pairs,
    ``C = mean_{(a, b)} (1[sign(M_a - M_b) = sign(GT_a - GT_b)] + 1/2 1[either is a tie])``.
    Both are averaged over the splits (tau over the splits where it is defined). A metric that
    removes seed noise the ground truth's *ranking* does not depend on agrees better on held-out
    seeds than the ground truth itself measured on the same half.

Example
-------
>>> scores = {"a": {"ql": [1.0, 2.0, 1.5, 1.2], "cql": [1.0, 1.1, 1.0, 1.1]},
...           "b": {"ql": [2.0, 1.1, 2.5, 2.2], "cql": [2.0, 2.1, 2.0, 2.1]}}
>>> result = meta_evaluate(scores, metrics=["ql", "cql"], resampling=Resampling(n_boot=200), n_splits=50)
>>> result.summary[["metric", "mean_accuracy", "split_concordance"]].round(3).values.tolist()
[['ql', 0.781, 0.82], ['cql', 1.0, 0.86]]
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from rolling_calib.core.pairwise import pairwise_accuracy_ci
from rolling_calib.core.question import DEFAULT_QUESTION, QUESTION, Question
from rolling_calib.core.resampling import DEFAULT, RESAMPLING, Resampling
from rolling_calib.core.validation import POSITIVE_INT, SEED, validate_params
from rolling_calib.core.jsonable import jsonable

__all__ = ["MetaEvaluation", "meta_evaluate", "pair_directions", "pairwise_meta", "split_seed_accuracy",
           "split_seed_agreement"]

PAIR_COLUMNS = ("better", "worse", "gap", "tie", "metric", "accuracy", "ci_low", "ci_high")


def _scores(scores: Mapping[str, Mapping[str, Any]], metrics: Sequence[str], ground_truth: str) -> dict[str, dict[str, np.ndarray]]:
    """Validated copies: finite 1-D arrays, the same number of runs for every metric of a pipeline."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, values in scores.items():
        arrays = {}
        for metric in dict.fromkeys([ground_truth, *metrics]):
            if metric not in values:
                raise ValueError(f"scores[{name!r}]: no metric {metric!r} (have: {', '.join(values)})")
            arr = np.asarray(values[metric], dtype=np.float64)
            if arr.ndim != 1 or arr.size == 0:
                raise ValueError(f"scores[{name!r}][{metric!r}]: expected a non-empty 1-D array, found shape {arr.shape}")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"scores[{name!r}][{metric!r}]: expected finite numbers, found {arr.tolist()[:5]}")
            arrays[metric] = arr
        sizes = {m: a.size for m, a in arrays.items()}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"scores[{name!r}]: metrics have different numbers of runs {sizes}; expected one per run")
        out[name] = arrays
    return out


def _pairs(names: Sequence[str], pairs: Sequence[tuple[str, str]] | None) -> list[tuple[str, str]]:
    if pairs is None:
        return list(itertools.combinations(names, 2))
    for a, b in pairs:
        for name in (a, b):
            if name not in names:
                raise ValueError(f"pair ({a}, {b}): no scores for {name!r} (have: {', '.join(names)})")
    return [(a, b) for a, b in pairs]


def pair_directions(scores: Mapping[str, Mapping[str, Any]], pairs: Sequence[tuple[str, str]] | None = None,
                    *, ground_truth: str = "ql") -> list[tuple[str, str, float, bool]]:
    """``(better, worse, gap, tie)`` per pair: better has the lower mean ground truth over all runs.

    ``gap = mean GT_worse - mean GT_better >= 0``; on a tie the pair keeps its order.

    Example
    -------
    >>> pair_directions({"a": {"ql": [2.0, 2.0]}, "b": {"ql": [1.0, 2.0]}})
    [('b', 'a', 0.5, False)]
    """
    s = _scores(scores, [], ground_truth)
    out = []
    for a, b in _pairs(list(s), pairs):
        ma, mb = float(s[a][ground_truth].mean()), float(s[b][ground_truth].mean())
        better, worse = (b, a) if mb < ma else (a, b)
        out.append((better, worse, abs(ma - mb), ma == mb))
    return out


@validate_params({"question": QUESTION, "resampling": RESAMPLING})
def pairwise_meta(scores: Mapping[str, Mapping[str, Any]], pairs: Sequence[tuple[str, str]] | None = None, *,
                  metrics: Sequence[str], ground_truth: str = "ql", question: Question = DEFAULT_QUESTION,
                  resampling: Resampling = DEFAULT) -> pd.DataFrame:
    """Pairwise accuracy of every metric on every pair, direction by the mean ground truth.

    Returns a frame with columns ``better, worse, gap, tie, metric, accuracy, ci_low, ci_high``
    (one row per pair and metric); the intervals at the ``question``'s confidence.

    Example
    -------
    >>> pairwise_meta({"a": {"ql": [1.0, 3.0]}, "b": {"ql": [2.0, 4.0]}}, metrics=["ql"],
    ...               resampling=Resampling(n_boot=50))[
    ...     ["better", "worse", "accuracy"]].values.tolist()
    [['a', 'b', 0.75]]
    """
    s = _scores(scores, metrics, ground_truth)
    rows = []
    for better, worse, gap, tie in pair_directions(s, pairs, ground_truth=ground_truth):
        for metric in metrics:
            acc = pairwise_accuracy_ci(s[better][metric], s[worse][metric], question=question, resampling=resampling)
            rows.append((better, worse, gap, tie, metric, acc.accuracy, acc.ci_low, acc.ci_high))
    return pd.DataFrame(rows, columns=list(PAIR_COLUMNS))


def _accuracy_against(m_better: np.ndarray, m_worse: np.ndarray) -> float:
    """``P(M_better < M_worse)`` over all run pairs, ties 1/2."""
    diff = m_better[:, None] - m_worse[None, :]
    return float(np.mean((diff < 0) + 0.5 * (diff == 0)))


@validate_params({"n_splits": POSITIVE_INT, "seed": SEED})
def split_seed_accuracy(scores: Mapping[str, Mapping[str, Any]], pairs: Sequence[tuple[str, str]] | None = None, *,
                        metrics: Sequence[str], ground_truth: str = "ql", n_splits: int = 200,
                        seed: int = 0) -> pd.DataFrame:
    """Pairwise accuracy of each metric on half of the seeds against the direction of the other half.

    Returns one row per pair (as given) and metric: ``a, b, metric, split_accuracy, split_low,
    split_high, n_splits`` where the accuracy is ``P(M of the H2-better pipeline's run < M of the
    other's)`` over ``H1`` runs (see the module docstring). Every pipeline needs at least 2 runs.

    Example
    -------
    >>> s = {"a": {"ql": [1.0, 1.1, 0.9, 1.0], "m": [0.0, 0.1, 0.0, 0.1]},
    ...      "b": {"ql": [2.0, 2.1, 1.9, 2.0], "m": [1.0, 1.1, 1.0, 1.1]}}
    >>> split_seed_accuracy(s, metrics=["m"], n_splits=20)[["a", "b", "split_accuracy"]].values.tolist()
    [['a', 'b', 1.0]]
    """
    s = _scores(scores, metrics, ground_truth)
    names = list(s)
    few = [n for n in names if s[n][ground_truth].size < 2]
    if few:
        raise ValueError(f"scores: pipelines {', '.join(few)} have fewer than 2 runs; expected >= 2 to split the seeds")
    chosen = _pairs(names, pairs)
    rng = np.random.default_rng(int(seed))
    values: dict[tuple[int, str], list[float]] = {(i, m): [] for i in range(len(chosen)) for m in metrics}
    for _ in range(int(n_splits)):
        halves = {}
        for n in names:
            halves[n] = Resampling.half_split(s[n][ground_truth].size, rng=rng)
        for i, (a, b) in enumerate(chosen):
            ga, gb = s[a][ground_truth][halves[a][1]].mean(), s[b][ground_truth][halves[b][1]].mean()
            for m in metrics:
                ma, mb = s[a][m][halves[a][0]], s[b][m][halves[b][0]]
                if ga == gb:
                    values[(i, m)].append(0.5)
                else:
                    better, worse = (ma, mb) if ga < gb else (mb, ma)
                    values[(i, m)].append(_accuracy_against(better, worse))
    rows = []
    for i, (a, b) in enumerate(chosen):
        for m in metrics:
            v = np.asarray(values[(i, m)])
            lo, hi = np.quantile(v, [0.025, 0.975])
            rows.append((a, b, m, float(v.mean()), float(lo), float(hi), int(n_splits)))
    return pd.DataFrame(rows, columns=["a", "b", "metric", "split_accuracy", "split_low", "split_high", "n_splits"])


def _concordance(x: np.ndarray, y: np.ndarray, pairs: np.ndarray) -> float:
    """Fraction of ``pairs`` (rows of indices) ordered alike by ``x`` and ``y`` (a tie in either counts 1/2)."""
    dx = np.sign(x[pairs[:, 0]] - x[pairs[:, 1]])
    dy = np.sign(y[pairs[:, 0]] - y[pairs[:, 1]])
    return float(np.mean(np.where((dx == 0) | (dy == 0), 0.5, (dx == dy).astype(float))))


@validate_params({"n_splits": POSITIVE_INT, "seed": SEED})
def split_seed_agreement(scores: Mapping[str, Mapping[str, Any]], pairs: Sequence[tuple[str, str]] | None = None, *,
                         metrics: Sequence[str], ground_truth: str = "ql", n_splits: int = 200,
                         seed: int = 0) -> pd.DataFrame:
    """Ranking by each metric on half of the runs vs ranking by the ground truth on the other half.

    Returns one row per metric: ``metric, split_tau`` (mean Kendall tau-b over all pipelines),
    ``split_concordance`` (mean fraction of the ``pairs`` ordered alike), ``n_splits``.
    Every pipeline needs at least 2 runs; at least 2 pipelines are needed.

    Example
    -------
    >>> s = {"a": {"ql": [1.0, 1.0], "m": [0.0, 0.0]}, "b": {"ql": [2.0, 2.0], "m": [1.0, 1.0]}}
    >>> split_seed_agreement(s, metrics=["m"], n_splits=5)[["split_tau", "split_concordance"]].values.tolist()
    [[1.0, 1.0]]
    """
    s = _scores(scores, metrics, ground_truth)
    names = list(s)
    if len(names) < 2:
        raise ValueError(f"scores: expected at least 2 pipelines to rank, found {len(names)}")
    few = [n for n in names if s[n][ground_truth].size < 2]
    if few:
        raise ValueError(f"scores: pipelines {', '.join(few)} have fewer than 2 runs; expected >= 2 to split the seeds")
    index = {n: i for i, n in enumerate(names)}
    pair_idx = np.array([(index[a], index[b]) for a, b in _pairs(names, pairs)], dtype=np.int64).reshape(-1, 2)
    rng = np.random.default_rng(int(seed))
    taus = {m: [] for m in metrics}
    concs = {m: [] for m in metrics}
    for _ in range(int(n_splits)):
        first_half, second_half = {}, {}
        for n in names:
            first_half[n], second_half[n] = Resampling.half_split(s[n][ground_truth].size, rng=rng)
        truth = np.array([s[n][ground_truth][second_half[n]].mean() for n in names])
        for m in metrics:
            ranked = np.array([s[n][m][first_half[n]].mean() for n in names])
            if np.ptp(ranked) > 0 and np.ptp(truth) > 0:
                taus[m].append(float(stats.kendalltau(ranked, truth).statistic))
            if len(pair_idx):
                concs[m].append(_concordance(ranked, truth, pair_idx))
    rows = [(m, float(np.mean(taus[m])) if taus[m] else math.nan,
             float(np.mean(concs[m])) if concs[m] else math.nan, int(n_splits)) for m in metrics]
    return pd.DataFrame(rows, columns=["metric", "split_tau", "split_concordance", "n_splits"])


@dataclass(frozen=True)
class MetaEvaluation:
    """Result of :func:`meta_evaluate`.

    Attributes
    ----------
    pairs : DataFrame
        Per pair and metric: ``better, worse, gap, tie, metric, accuracy, ci_low, ci_high`` (direction
        by all seeds) and ``split_accuracy, split_low, split_high`` (direction by held-out seeds: the
        primary accuracy).
    summary : DataFrame
        Per metric: ``metric, mean_split_accuracy`` (the primary figure), ``mean_accuracy`` (over
        pairs), ``n_pairs``, ``split_tau``, ``split_concordance``, ``n_splits``.
    ground_truth, n_boot, confidence, seed, n_splits, split_seed : settings (recorded: the intervals'
        ``confidence`` apart from the seed bootstrap's ``n_boot`` and ``seed``).
    """

    pairs: pd.DataFrame
    summary: pd.DataFrame
    ground_truth: str
    n_boot: int
    confidence: float
    seed: int
    n_splits: int
    split_seed: int

    def to_dict(self) -> dict[str, Any]:
        return jsonable({
            "ground_truth": self.ground_truth,
            "confidence": self.confidence,
            "bootstrap": {"n_boot": self.n_boot, "seed": self.seed},
            "split_seed_check": {"n_splits": self.n_splits, "seed": self.split_seed},
            "metrics": self.summary.to_dict(orient="records"),
            "pairs": self.pairs.to_dict(orient="records"),
        })


@validate_params({"question": QUESTION, "resampling": RESAMPLING, "n_splits": POSITIVE_INT, "split_seed": SEED})
def meta_evaluate(scores: Mapping[str, Mapping[str, Any]], pairs: Sequence[tuple[str, str]] | None = None, *,
                  metrics: Sequence[str], ground_truth: str = "ql", question: Question = DEFAULT_QUESTION,
                  resampling: Resampling = DEFAULT, n_splits: int = 200, split_seed: int = 0) -> MetaEvaluation:
    """:func:`pairwise_meta` and :func:`split_seed_agreement` of ``metrics`` with the mean accuracy over pairs."""
    table = pairwise_meta(scores, pairs, metrics=metrics, ground_truth=ground_truth, question=question,
                          resampling=resampling)
    directed = [(better, worse) for better, worse, _, _ in pair_directions(scores, pairs, ground_truth=ground_truth)]
    held_out = split_seed_accuracy(scores, directed, metrics=metrics, ground_truth=ground_truth, n_splits=n_splits,
                                   seed=split_seed)
    table = table.merge(held_out.rename(columns={"a": "better", "b": "worse"}).drop(columns="n_splits"),
                        on=["better", "worse", "metric"], how="left")
    split = split_seed_agreement(scores, pairs, metrics=metrics, ground_truth=ground_truth, n_splits=n_splits,
                                 seed=split_seed)
    mean = table.groupby("metric", sort=False)[["split_accuracy", "accuracy"]].mean()
    size = table.groupby("metric", sort=False).size()
    summary = pd.DataFrame({
        "metric": list(metrics),
        "mean_split_accuracy": [float(mean.loc[m, "split_accuracy"]) if m in mean.index else math.nan for m in metrics],
        "mean_accuracy": [float(mean.loc[m, "accuracy"]) if m in mean.index else math.nan for m in metrics],
        "n_pairs": [int(size.loc[m]) if m in size.index else 0 for m in metrics]})
    summary = summary.merge(split, on="metric", how="left")
    return MetaEvaluation(pairs=table, summary=summary, ground_truth=ground_truth, n_boot=int(resampling.n_boot),
                          confidence=float(question.confidence), seed=int(resampling.seed), n_splits=int(n_splits),
                          split_seed=int(split_seed))
