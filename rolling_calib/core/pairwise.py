"""Compare pipelines from per-run scores: pairwise accuracy, bootstrap intervals, seed budget.

Implements docs/method.md §1 on plain arrays: every pipeline has been run several
times (seeds) and every run has one score per metric (lower is better), e.g.
``{"ql": [...], "cql": [...]}``. Nothing here knows about Qlib, torch or runners.

* :func:`pairwise_accuracy` -- ``Acc = 1/(m n) sum_i sum_j (1[a_i < b_j] + 1/2 1[a_i = b_j])``,
  the Mann-Whitney U statistic of the two samples scaled to [0, 1].
* :func:`pairwise_accuracy_ci` -- the same with a seeded percentile-bootstrap interval.
* :func:`compare_pair` -- decide which pipeline is better by a ground-truth metric,
  then report the accuracy of every metric in that direction.
* :func:`summarize_runs`, :func:`summarize_pipelines` -- runs, mean, std, standard error.
* :func:`variance_reduction`, :func:`seed_budget` -- std ratio calibrated/vanilla and the
  number of vanilla runs needed to match the calibrated metric's standard error.

Example
-------
>>> pairwise_accuracy([1.0, 2.0], [2.0, 3.0])   # pairs: (1,2) (1,3) (2,3) win, (2,2) tie
0.875
>>> seed_budget(2.0, 1.0, 10)
40.0
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rolling_calib.core.question import DEFAULT_QUESTION, QUESTION, Question
from rolling_calib.core.resampling import DEFAULT, RESAMPLING, Resampling
from rolling_calib.core.validation import (
    POSITIVE_INT,
    STANDARD_DEVIATION,
    validate_params,
)
from rolling_calib.core.jsonable import fields_dict

__all__ = [
    "CALIBRATION_BLIND_SPOT",
    "PairwiseAccuracy",
    "PairComparison",
    "VarianceReduction",
    "pairwise_accuracy",
    "pairwise_accuracy_ci",
    "compare_pair",
    "summarize_runs",
    "summarize_pipelines",
    "variance_reduction",
    "seed_budget",
]


#: docs/method.md §4, the known limitation, worded for reports that rank pipelines by a calibrated metric.
CALIBRATION_BLIND_SPOT: str = (
    "A calibrated metric cannot see an improvement that is itself a calibration improvement: if one "
    "pipeline's only advantage is a better-calibrated output bias, calibrating both removes that advantage. "
    "Check the vanilla metric's ranking before dismissing such a pipeline."
)


def _as_scores(name: str, values: Any) -> np.ndarray:
    """Finite, non-empty 1-D float64 array of per-run scores, or ``ValueError``."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: expected numbers, found values that are not numeric ({exc})") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of per-run scores, found shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name}: expected at least one run, found 0")
    bad = ~np.isfinite(arr)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}: expected finite scores, found {float(arr[first])!r} at run {first} ({int(bad.sum())} bad)")
    return arr


def _win_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``W[i, j] = 1`` if ``a_i < b_j``, ``1/2`` on a tie, else ``0``."""
    return (a[:, None] < b[None, :]) + 0.5 * (a[:, None] == b[None, :])


def pairwise_accuracy(scores_better: Any, scores_worse: Any) -> float:
    """Probability that a run of the better pipeline scores lower than a run of the worse one.

    ``Acc = 1/(m n) * sum_i sum_j (1[a_i < b_j] + 1/2 * 1[a_i = b_j])`` for scores
    ``a`` (m runs of the pipeline believed better) and ``b`` (n runs of the other);
    lower scores are better. Equal to ``U / (m n)`` where ``U`` is SciPy's
    Mann-Whitney statistic of ``b`` against ``a``. Computed in ``O((m + n) log n)``
    with sorted search.

    Example
    -------
    >>> pairwise_accuracy([1.0, 1.0], [1.0, 2.0])
    0.75
    """
    a = _as_scores("scores_better", scores_better)
    b = np.sort(_as_scores("scores_worse", scores_worse))
    right = np.searchsorted(b, a, side="right")   # b_j <= a_i
    left = np.searchsorted(b, a, side="left")     # b_j <  a_i
    wins = (b.size - right).sum()
    ties = (right - left).sum()
    return float((wins + 0.5 * ties) / (a.size * b.size))


@dataclass(frozen=True)
class PairwiseAccuracy:
    """Pairwise accuracy with a percentile-bootstrap confidence interval.

    ``accuracy`` is the point estimate on all runs; ``[ci_low, ci_high]`` the
    central ``confidence`` interval of ``n_boot`` bootstrap replicates drawn with
    ``numpy.random.default_rng(seed)``; ``n_a``/``n_b`` are the run counts;
    ``higher_is_better``: a run scores better with a higher value (IC) rather than a lower one.
    """

    accuracy: float
    ci_low: float
    ci_high: float
    n_a: int
    n_b: int
    confidence: float
    n_boot: int
    seed: int
    higher_is_better: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain dictionary (JSON-friendly: NaN and inf as None)."""
        return fields_dict(self)


@validate_params({"question": QUESTION, "resampling": RESAMPLING})
def pairwise_accuracy_ci(scores_better: Any, scores_worse: Any, *, question: Question = DEFAULT_QUESTION,
                         resampling: Resampling = DEFAULT, higher_is_better: bool = False) -> PairwiseAccuracy:
    """Pairwise accuracy with a seeded percentile-bootstrap confidence interval.

    Each replicate resamples the run indices of A (``m`` draws with replacement)
    and of B (``n`` draws) independently and recomputes the accuracy:
    ``Acc* = c_A^T W c_B / (m n)`` with ``W`` the m x n win matrix and ``c_A``,
    ``c_B`` the resampled run counts (vectorised over replicates). The interval
    is the ``(1 - confidence)/2`` and ``(1 + confidence)/2`` quantiles of the
    replicates (``confidence``: the question's; the runs' seeds are the only chance resampled, on the
    evaluated days, whatever its ``target``). Same ``resampling`` (its ``n_boot``, ``seed``) -> same
    replicates.
    With ``higher_is_better`` (a score such as IC) a run beats another with a higher value:
    the accuracy is ``P(better > worse)``, computed as that of the negated scores.

    Example
    -------
    >>> r = pairwise_accuracy_ci([1.0, 2.0, 3.0], [2.5, 3.5, 4.5], resampling=Resampling(n_boot=500, seed=1))
    >>> round(r.accuracy, 4), r.ci_low <= r.accuracy <= r.ci_high
    (0.8889, True)
    """
    sign = -1.0 if higher_is_better else 1.0
    a = sign * _as_scores("scores_better", scores_better)
    b = sign * _as_scores("scores_worse", scores_worse)
    m, n = a.size, b.size
    w = _win_matrix(a, b)
    point = float(w.mean())
    rng = resampling.rng()
    counts_a = resampling.seed_counts(m, rng=rng)
    counts_b = resampling.seed_counts(n, rng=rng)
    replicates = np.sum((counts_a @ w) * counts_b, axis=1) / (m * n)   # c_A^T W c_B per replicate
    alpha = (1.0 - question.confidence) / 2.0
    low, high = np.quantile(replicates, [alpha, 1.0 - alpha])
    return PairwiseAccuracy(
        accuracy=point, ci_low=float(low), ci_high=float(high), n_a=m, n_b=n,
        confidence=float(question.confidence), n_boot=int(resampling.n_boot), seed=int(resampling.seed),
        higher_is_better=bool(higher_is_better),
    )


@dataclass(frozen=True)
class PairComparison:
    """Outcome of :func:`compare_pair`.

    Attributes
    ----------
    better, worse : str
        Pipeline names, ordered by the ground-truth metric's mean (lower is better).
    ground_truth : str
        The metric that decided the direction.
    ground_truth_gap : float
        ``mean(worse) - mean(better)`` of the ground-truth metric (>= 0; 0 is a tie,
        in which case the first pipeline is called "better" and ``tie`` is True).
    accuracies : dict[str, PairwiseAccuracy]
        Pairwise accuracy of each metric in the better -> worse direction.
    means : dict[str, dict[str, float]]
        ``means[pipeline][metric]``.
    tie : bool
    """

    better: str
    worse: str
    ground_truth: str
    ground_truth_gap: float
    accuracies: dict[str, PairwiseAccuracy]
    means: dict[str, dict[str, float]] = field(default_factory=dict)
    tie: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dictionary."""
        return {
            "better": self.better,
            "worse": self.worse,
            "ground_truth": self.ground_truth,
            "ground_truth_gap": self.ground_truth_gap,
            "tie": self.tie,
            "means": {k: dict(v) for k, v in self.means.items()},
            "accuracies": {k: v.to_dict() for k, v in self.accuracies.items()},
        }


@validate_params({"question": QUESTION, "resampling": RESAMPLING})
def compare_pair(
    name_a: str,
    scores_a: Mapping[str, Any],
    name_b: str,
    scores_b: Mapping[str, Any],
    *,
    ground_truth: str = "ql",
    metrics: Sequence[str] | None = None,
    question: Question = DEFAULT_QUESTION,
    resampling: Resampling = DEFAULT,
    higher_is_better: Collection[str] = (),
) -> PairComparison:
    """Compare two pipelines: direction by the ground truth, then accuracy of each metric.

    The pipeline with the lower mean of ``ground_truth`` (default ``'ql'``, the
    vanilla loss) is "better"; for every metric, :func:`pairwise_accuracy_ci`
    of better vs worse is reported at the ``question``'s confidence. All metrics use the same
    ``resampling`` (its seed) (so with equal run counts the replicates resample the same runs for
    every metric).

    Parameters
    ----------
    name_a, name_b : str
        Pipeline names (must differ).
    scores_a, scores_b : mapping metric -> per-run scores
        Lower is better. Must both hold ``ground_truth`` and every metric compared.
    metrics : sequence of str, optional
        Metrics to report; default: the metrics present in both, in ``scores_a`` order.
    higher_is_better : collection of str
        The metrics where a higher value is better (IC; :data:`rolling_calib.core.metric_table.METRIC_TABLE`
        says which); the others, and the ground truth, are losses.

    Example
    -------
    >>> c = compare_pair("a", {"ql": [2.0, 3.0], "cql": [1.0, 1.1]},
    ...                  "b", {"ql": [1.0, 2.5], "cql": [0.9, 0.95]}, resampling=Resampling(n_boot=100))
    >>> c.better, c.accuracies["cql"].accuracy
    ('b', 1.0)
    """
    if name_a == name_b:
        raise ValueError(f"name_b: expected a pipeline name different from name_a, found {name_b!r} twice")
    if metrics is None:
        metrics = [k for k in scores_a if k in scores_b]
    metrics = list(metrics)
    if not metrics:
        raise ValueError(
            f"metrics: expected at least one metric present in both pipelines, found {sorted(scores_a)} "
            f"for {name_a!r} and {sorted(scores_b)} for {name_b!r}"
        )
    for metric in dict.fromkeys([ground_truth, *metrics]):
        for name, scores in ((name_a, scores_a), (name_b, scores_b)):
            if metric not in scores:
                raise ValueError(f"scores for {name!r}: metric {metric!r} is missing; found {sorted(scores)}")
    arrays = {
        name: {m: _as_scores(f"scores for {name!r}, metric {m!r}", scores[m]) for m in dict.fromkeys([ground_truth, *metrics])}
        for name, scores in ((name_a, scores_a), (name_b, scores_b))
    }
    mean_a = float(arrays[name_a][ground_truth].mean())
    mean_b = float(arrays[name_b][ground_truth].mean())
    better, worse = (name_a, name_b) if mean_a <= mean_b else (name_b, name_a)
    accuracies = {
        m: pairwise_accuracy_ci(arrays[better][m], arrays[worse][m], question=question, resampling=resampling,
                                higher_is_better=m in higher_is_better)
        for m in metrics
    }
    means = {name: {m: float(v.mean()) for m, v in arrays[name].items()} for name in (name_a, name_b)}
    return PairComparison(
        better=better, worse=worse, ground_truth=ground_truth,
        ground_truth_gap=abs(mean_a - mean_b), accuracies=accuracies, means=means, tie=mean_a == mean_b,
    )


def summarize_runs(scores: Mapping[str, Any]) -> pd.DataFrame:
    """Runs, mean, sample standard deviation (ddof=1) and standard error per metric.

    ``std = sqrt(sum (x - mean)^2 / (runs - 1))`` (NaN with one run),
    ``sem = std / sqrt(runs)``.

    Returns
    -------
    pandas.DataFrame indexed by metric with columns ``runs, mean, std, sem``.

    Example
    -------
    >>> summarize_runs({"ql": [1.0, 3.0]}).loc["ql", ["runs", "mean", "std"]].tolist()
    [2.0, 2.0, 1.4142135623730951]
    """
    if not scores:
        raise ValueError("scores: expected at least one metric, found none")
    rows = []
    for metric, values in scores.items():
        x = _as_scores(f"scores, metric {metric!r}", values)
        std = float(np.std(x, ddof=1)) if x.size > 1 else math.nan
        rows.append({"metric": metric, "runs": x.size, "mean": float(x.mean()), "std": std, "sem": std / math.sqrt(x.size)})
    return pd.DataFrame(rows).set_index("metric")


def summarize_pipelines(scores_by_pipeline: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """:func:`summarize_runs` for several pipelines, stacked: columns ``pipeline, metric, runs, mean, std, sem``.

    Example
    -------
    >>> summarize_pipelines({"a": {"ql": [1.0, 3.0]}, "b": {"ql": [2.0, 2.0]}})["std"].tolist()
    [1.4142135623730951, 0.0]
    """
    if not scores_by_pipeline:
        raise ValueError("scores_by_pipeline: expected at least one pipeline, found none")
    frames = [summarize_runs(scores).reset_index().assign(pipeline=name) for name, scores in scores_by_pipeline.items()]
    return pd.concat(frames, ignore_index=True)[["pipeline", "metric", "runs", "mean", "std", "sem"]]


@validate_params({"std_vanilla": STANDARD_DEVIATION, "std_calibrated": STANDARD_DEVIATION, "runs": POSITIVE_INT})
def seed_budget(std_vanilla: float, std_calibrated: float, runs: int) -> float:
    """Vanilla runs needed for the calibrated metric's standard error of the mean with ``runs`` runs.

    ``SE = std / sqrt(runs)``, so matching ``std_v / sqrt(n_v) = std_c / sqrt(runs)``
    gives ``n_v = runs * (std_vanilla / std_calibrated)^2`` (a real number; round up
    to plan runs). Infinite when ``std_calibrated`` is 0 and ``std_vanilla`` is not.

    Example
    -------
    >>> round(seed_budget(0.3, 0.1, 10), 9)
    90.0
    """
    if std_calibrated == 0:
        if std_vanilla == 0:
            raise ValueError("std_calibrated: both standard deviations are 0, so the budget ratio is undefined")
        return math.inf
    return float(runs * (std_vanilla / std_calibrated) ** 2)


@dataclass(frozen=True)
class VarianceReduction:
    """Standard deviations of a vanilla and a calibrated metric over one pipeline's runs.

    ``std_ratio = std_calibrated / std_vanilla``; ``seed_budget`` = vanilla runs
    needed to match the calibrated metric's standard error with ``runs`` runs.
    """

    vanilla: str
    calibrated: str
    runs: int
    std_vanilla: float
    std_calibrated: float
    std_ratio: float
    seed_budget: float

    def to_dict(self) -> dict[str, Any]:
        """Plain dictionary (JSON-friendly: NaN and inf as None)."""
        return fields_dict(self)


def variance_reduction(
    scores: Mapping[str, Any], *, vanilla: str = "ql", calibrated: str = "cql"
) -> VarianceReduction:
    """Std ratio calibrated/vanilla and seed budget for one pipeline's runs (needs >= 2 runs).

    Example
    -------
    >>> v = variance_reduction({"ql": [1.0, 3.0], "cql": [1.0, 2.0]})
    >>> v.std_ratio, v.seed_budget
    (0.5, 8.0)
    """
    for metric in (vanilla, calibrated):
        if metric not in scores:
            raise ValueError(f"scores: metric {metric!r} is missing; found {sorted(scores)}")
    v = _as_scores(f"scores, metric {vanilla!r}", scores[vanilla])
    c = _as_scores(f"scores, metric {calibrated!r}", scores[calibrated])
    if v.size != c.size:
        raise ValueError(f"mismatched lengths: {vanilla!r} has {v.size} runs, {calibrated!r} has {c.size}; expected equal")
    if v.size < 2:
        raise ValueError(f"scores: expected at least 2 runs for a standard deviation, found {v.size}")
    std_v = float(np.std(v, ddof=1))
    std_c = float(np.std(c, ddof=1))
    ratio = std_c / std_v if std_v > 0 else (math.nan if std_c == 0 else math.inf)
    budget = seed_budget(std_v, std_c, v.size) if (std_v > 0 or std_c > 0) else math.nan
    return VarianceReduction(
        vanilla=vanilla, calibrated=calibrated, runs=int(v.size), std_vanilla=std_v,
        std_calibrated=std_c, std_ratio=ratio, seed_budget=budget,
    )
