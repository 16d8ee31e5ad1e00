"""Rank many configurations from their per-seed scores: tables, pairwise matrix, runs to separate.

Input everywhere is a *runs table*: one row per (configuration, seed) with one
column per metric, lower is better (losses) -- exactly the ``.runs`` frame of
``rolling_calib.analysis.scoring.score_store`` (columns ``pipeline, seed, ql, cql, ...``).

* :func:`rank_configurations` -- mean, standard deviation and a Student-t
  confidence interval of the mean for every configuration and metric, and its
  rank per metric.
* :func:`pairwise_matrix` -- ``accuracy[i, j]`` = probability that one run of
  configuration ``i`` beats (scores lower than) one run of configuration ``j``,
  i.e. the probability of improvement of docs/method.md §1, with bootstrap
  intervals (via :func:`rolling_calib.core.pairwise.pairwise_accuracy_ci`).
* :func:`indistinguishable` -- the pairs whose interval contains 0.5.
* :func:`runs_to_separate_top_two` -- how many runs (seeds) per configuration
  each metric needs before the top two configurations' means are separated
  (not :func:`rolling_calib.core.pairwise.seed_budget`, the vanilla runs that
  match the calibrated metric's standard error).

The matrix as a picture: :func:`rolling_calib.reporting.figures.plot_pairwise_heatmap`.

Pure numpy/pandas/scipy: nothing here knows about Qlib, torch, Ray or MLflow.

Example
-------
>>> import pandas as pd
>>> runs = pd.DataFrame({"pipeline": ["a", "a", "b", "b"], "seed": [0, 1, 0, 1],
...                      "cql": [1.0, 2.0, 3.0, 1.5], "ql": [1.0, 2.0, 3.0, 4.0]})
>>> m = pairwise_matrix(runs, metric="cql", resampling=Resampling(n_boot=200))
>>> float(m.accuracy[0, 1])   # a beats b in 3 of the 4 pairs
0.75
>>> rank_configurations(runs)[["pipeline", "cql_rank", "ql_rank"]].to_dict("list")
{'pipeline': ['a', 'b'], 'cql_rank': [1, 2], 'ql_rank': [1, 2]}
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from rolling_calib.core.question import DEFAULT_QUESTION, QUESTION, Question
from rolling_calib.core.resampling import DEFAULT, RESAMPLING, Resampling
from rolling_calib.core.validation import (
    CONFIDENCE,
    STANDARD_DEVIATION,
    validate_params,
)
from rolling_calib.core.jsonable import jsonable

__all__ = [
    "PairwiseMatrix",
    "RunsToSeparate",
    "scores_by_config",
    "rank_configurations",
    "pairwise_matrix",
    "indistinguishable",
    "top_group",
    "runs_to_separate",
    "runs_to_separate_top_two",
]


# --------------------------------------------------------------------------- input
def _check_runs(runs: pd.DataFrame, *, metrics: Sequence[str], config_col: str) -> None:
    """Raise ``ValueError`` naming the missing column or the non-finite score."""
    if not isinstance(runs, pd.DataFrame):
        raise ValueError(f"runs: expected a pandas DataFrame, found {type(runs).__name__}")
    for column in (config_col, *metrics):
        if column not in runs.columns:
            raise ValueError(
                f"runs: missing column {column!r}; expected columns {[config_col, *metrics]}, "
                f"found {list(runs.columns)}"
            )
    if runs.empty:
        raise ValueError("runs: the table is empty; expected one row per (configuration, seed)")
    for metric in metrics:
        values = pd.to_numeric(runs[metric], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(values)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"runs: column {metric!r} row {row} (configuration "
                f"{runs[config_col].iloc[row]!r}): expected a finite number, found {runs[metric].iloc[row]!r}"
            )


def scores_by_config(
    runs: pd.DataFrame, *, metric: str, config_col: str = "pipeline", order: Sequence[str] | None = None
) -> dict[str, np.ndarray]:
    """Per-configuration arrays of one metric, in ``order`` (default: first appearance).

    Examples
    --------
    >>> runs = pd.DataFrame({"pipeline": ["b", "a", "b"], "ql": [1.0, 2.0, 3.0]})
    >>> {k: v.tolist() for k, v in scores_by_config(runs, metric="ql").items()}
    {'b': [1.0, 3.0], 'a': [2.0]}
    """
    _check_runs(runs, metrics=[metric], config_col=config_col)
    names = list(pd.unique(runs[config_col].astype(str))) if order is None else [str(n) for n in order]
    groups = {str(k): g[metric].to_numpy(dtype=float) for k, g in runs.groupby(runs[config_col].astype(str))}
    missing = [name for name in names if name not in groups]
    if missing:
        raise ValueError(f"runs: configuration(s) {missing} have no runs; found {sorted(groups)}")
    return {name: groups[name] for name in names}


# --------------------------------------------------------------------------- ranking
@validate_params({"confidence": CONFIDENCE})
def mean_interval(values: np.ndarray, *, confidence: float) -> tuple[float, float]:
    """Student-t interval of the mean: ``mean ± t_{(1+c)/2, n-1} · s / sqrt(n)``.

    ``s`` is the sample standard deviation (ddof=1). With fewer than two values
    the interval is ``(nan, nan)``.

    Examples
    --------
    >>> lo, hi = mean_interval(np.array([1.0, 2.0, 3.0]), confidence=0.95)
    >>> round(lo, 4), round(hi, 4)   # 2 ± 4.3027 · 1/sqrt(3)
    (-0.4841, 4.4841)
    """
    values = np.asarray(values, dtype=float)
    n = values.size
    if n < 2:
        return (math.nan, math.nan)
    half = stats.t.ppf((1 + confidence) / 2, n - 1) * values.std(ddof=1) / math.sqrt(n)
    centre = float(values.mean())
    return (centre - float(half), centre + float(half))


@validate_params({"question": QUESTION})
def rank_configurations(
    runs: pd.DataFrame,
    *,
    metrics: Sequence[str] = ("cql", "ql"),
    config_col: str = "pipeline",
    question: Question = DEFAULT_QUESTION,
) -> pd.DataFrame:
    """One row per configuration: mean, std, t-interval of the mean and rank, per metric.

    ``<m>_rank`` is 1 for the lowest mean of metric ``m`` (ties share the lower
    rank, ``method="min"``). Rows are sorted by the first metric's rank, then
    by name.

    Parameters
    ----------
    runs : DataFrame
        One row per (configuration, seed); lower scores are better.
    metrics : sequence of str
        Metric columns to rank by, the first one orders the table.
    config_col : str
        Column naming the configuration.
    question : Question
        Its ``confidence`` is the level of the interval of the mean over seeds (see :func:`mean_interval`;
        a t interval: nothing is drawn).

    Returns
    -------
    DataFrame
        Columns ``config_col, n_runs`` then, per metric ``m``: ``m_mean, m_std,
        m_ci_low, m_ci_high, m_rank``.
    """
    if not metrics:
        raise ValueError("metrics: expected at least one metric column, found none")
    _check_runs(runs, metrics=metrics, config_col=config_col)
    rows: list[dict[str, Any]] = []
    for name, group in runs.groupby(runs[config_col].astype(str), sort=True):
        row: dict[str, Any] = {config_col: name, "n_runs": len(group)}
        for metric in metrics:
            values = group[metric].to_numpy(dtype=float)
            low, high = mean_interval(values, confidence=question.confidence)
            row[f"{metric}_mean"] = float(values.mean())
            row[f"{metric}_std"] = float(values.std(ddof=1)) if values.size > 1 else math.nan
            row[f"{metric}_ci_low"] = low
            row[f"{metric}_ci_high"] = high
        rows.append(row)
    table = pd.DataFrame(rows)
    for metric in metrics:
        table[f"{metric}_rank"] = table[f"{metric}_mean"].rank(method="min").astype(int)
    return table.sort_values([f"{metrics[0]}_rank", config_col], kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------------- pairwise matrix
@dataclass(frozen=True)
class PairwiseMatrix:
    """Probability-of-improvement matrix of one metric over configurations.

    ``accuracy[i, j]`` is the share of run pairs (one run of ``names[i]``, one of
    ``names[j]``) in which ``i`` scores lower than ``j`` (ties count 1/2):
    ``1/(m·n) Σ_a Σ_b 1[s_i,a < s_j,b]``. The diagonal is NaN. The matrix is
    complementary: ``accuracy[j, i] = 1 - accuracy[i, j]``, and the interval of
    ``(j, i)`` is ``(1 - ci_high[i, j], 1 - ci_low[i, j])`` from the same
    bootstrap. Cell ``(i, j)`` with ``i < j`` is bootstrapped with seed
    ``seed + i * k + j`` (``k`` = number of configurations).
    """

    names: tuple[str, ...]
    metric: str
    accuracy: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    n_runs: tuple[int, ...]
    confidence: float
    n_boot: int
    seed: int

    def to_frame(self) -> pd.DataFrame:
        """Long table: one row per ordered pair ``(a, b)`` with ``a != b``."""
        rows = []
        for i, a in enumerate(self.names):
            for j, b in enumerate(self.names):
                if i != j:
                    rows.append(
                        {
                            "a": a,
                            "b": b,
                            "metric": self.metric,
                            "accuracy": float(self.accuracy[i, j]),
                            "ci_low": float(self.ci_low[i, j]),
                            "ci_high": float(self.ci_high[i, j]),
                        }
                    )
        return pd.DataFrame(rows)

    def to_table(self, *, digits: int = 2) -> pd.DataFrame:
        """Square table of ``"acc [low, high]"`` strings, rows beat columns."""
        cells = [
            [
                "" if i == j else (
                    f"{self.accuracy[i, j]:.{digits}f} [{self.ci_low[i, j]:.{digits}f}, {self.ci_high[i, j]:.{digits}f}]"
                )
                for j in range(len(self.names))
            ]
            for i in range(len(self.names))
        ]
        return pd.DataFrame(cells, index=list(self.names), columns=list(self.names))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (NaN on the diagonal becomes ``None``)."""
        return jsonable({
            "names": list(self.names),
            "metric": self.metric,
            "accuracy": self.accuracy,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "n_runs": list(self.n_runs),
            "confidence": self.confidence,
            "n_boot": self.n_boot,
            "seed": self.seed,
        })


@validate_params({"question": QUESTION, "resampling": RESAMPLING})
def pairwise_matrix(
    runs: pd.DataFrame,
    *,
    metric: str = "cql",
    config_col: str = "pipeline",
    order: Sequence[str] | None = None,
    question: Question = DEFAULT_QUESTION,
    resampling: Resampling = DEFAULT,
) -> PairwiseMatrix:
    """Pairwise accuracy (probability of improvement) of every configuration over every other.

    Parameters
    ----------
    runs : DataFrame
        One row per (configuration, seed) with a ``metric`` column (lower is better).
    metric : str
        Score column.
    config_col : str
        Column naming the configuration.
    order : sequence of str, optional
        Row/column order (default: order of first appearance in ``runs``).
    question : Question
        Its ``confidence`` is the intervals' level.
    resampling : Resampling
        Bootstrap resamples and base seed (see :class:`PairwiseMatrix` for how cells are seeded).

    Returns
    -------
    PairwiseMatrix

    Examples
    --------
    >>> runs = pd.DataFrame({"pipeline": ["a", "a", "b", "b"], "cql": [1.0, 2.0, 3.0, 1.5]})
    >>> pairwise_matrix(runs, metric="cql", resampling=Resampling(n_boot=100)).accuracy.round(2).tolist()
    [[nan, 0.75], [0.25, nan]]
    """
    from rolling_calib.core.pairwise import pairwise_accuracy_ci

    groups = scores_by_config(runs, metric=metric, config_col=config_col, order=order)
    names = tuple(groups)
    k = len(names)
    accuracy = np.full((k, k), np.nan)
    low = np.full((k, k), np.nan)
    high = np.full((k, k), np.nan)
    for i in range(k):
        for j in range(i + 1, k):
            result = pairwise_accuracy_ci(
                groups[names[i]], groups[names[j]], question=question,
                resampling=resampling.replace(seed=resampling.seed + i * k + j))
            accuracy[i, j], low[i, j], high[i, j] = result.accuracy, result.ci_low, result.ci_high
            accuracy[j, i], low[j, i], high[j, i] = 1 - result.accuracy, 1 - result.ci_high, 1 - result.ci_low
    return PairwiseMatrix(
        names=names,
        metric=metric,
        accuracy=accuracy,
        ci_low=low,
        ci_high=high,
        n_runs=tuple(len(groups[name]) for name in names),
        confidence=question.confidence,
        n_boot=resampling.n_boot,
        seed=resampling.seed,
    )


def indistinguishable(matrix: PairwiseMatrix) -> list[tuple[str, str]]:
    """Pairs of configurations the data cannot tell apart.

    Rule: ``(a, b)`` is indistinguishable when the interval of
    ``accuracy[a, b]`` contains 0.5 (``ci_low <= 0.5 <= ci_high``), i.e. at the
    matrix's confidence level neither configuration's runs beat the other's
    more often than a coin flip. Each unordered pair is listed once, in
    ``matrix.names`` order.

    Examples
    --------
    >>> runs = pd.DataFrame({"pipeline": list("aabbcc"), "ql": [1, 2, 1.5, 2.5, 9, 10]})
    >>> indistinguishable(pairwise_matrix(runs, metric="ql", resampling=Resampling(n_boot=200)))
    [('a', 'b')]
    """
    pairs = []
    k = len(matrix.names)
    for i in range(k):
        for j in range(i + 1, k):
            if matrix.ci_low[i, j] <= 0.5 <= matrix.ci_high[i, j]:
                pairs.append((matrix.names[i], matrix.names[j]))
    return pairs


def top_group(matrix: PairwiseMatrix, *, best: str) -> list[str]:
    """``best`` and every configuration indistinguishable from it (see :func:`indistinguishable`).

    The configurations a user cannot rule out as the winner at this confidence.
    """
    if best not in matrix.names:
        raise ValueError(f"best: {best!r} is not a configuration of the matrix; found {list(matrix.names)}")
    i = matrix.names.index(best)
    group = [best]
    for j, name in enumerate(matrix.names):
        if j != i and matrix.ci_low[i, j] <= 0.5 <= matrix.ci_high[i, j]:
            group.append(name)
    return group


# --------------------------------------------------------------------------- runs to separate
@dataclass(frozen=True)
class RunsToSeparate:
    """Runs (seeds) per configuration a metric needs to separate two configurations.

    ``runs_needed = ceil(z² · (std_a² + std_b²) / gap²)`` (at least 2), where
    ``z`` is the standard normal ``(1 + confidence) / 2`` quantile and ``gap`` is
    the difference of the observed means: the smallest ``n`` for which the
    normal interval of the difference of two means of ``n`` runs each,
    ``gap ± z · sqrt((std_a² + std_b²) / n)``, excludes 0 -- assuming the
    observed stds and gap are the true ones. ``inf`` when the gap is 0.
    """

    metric: str
    a: str
    b: str
    gap: float
    std_a: float
    std_b: float
    runs_needed: float
    runs_observed: int
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``inf`` becomes ``None``)."""
        out = dict(self.__dict__)
        out["runs_needed"] = None if not math.isfinite(self.runs_needed) else int(self.runs_needed)
        return out


@validate_params({"std_a": STANDARD_DEVIATION, "std_b": STANDARD_DEVIATION, "confidence": CONFIDENCE})
def runs_to_separate(*, gap: float, std_a: float, std_b: float, confidence: float) -> float:
    """``ceil(z² (std_a² + std_b²) / gap²)``, at least 2; ``inf`` for a zero gap.

    Examples
    --------
    >>> runs_to_separate(gap=0.1, std_a=0.1, std_b=0.1, confidence=0.95)   # 1.96² · 2 = 7.68
    8
    """
    if gap == 0:
        return math.inf
    z = stats.norm.ppf((1 + confidence) / 2)
    return max(2, math.ceil(z**2 * (std_a**2 + std_b**2) / gap**2 - 1e-12))


@validate_params({"question": QUESTION})
def runs_to_separate_top_two(
    runs: pd.DataFrame,
    *,
    metrics: Sequence[str] = ("cql", "ql"),
    by: str = "ql",
    config_col: str = "pipeline",
    question: Question = DEFAULT_QUESTION,
) -> list[RunsToSeparate]:
    """Runs (seeds) each metric needs to separate the two best configurations.

    The top two are chosen once, by the mean of the reference metric ``by``
    (default ``"ql"``, the ground truth of docs/method.md §3.3), so every metric is
    asked to separate the same pair; then each metric's number is
    :func:`runs_to_separate` with that metric's gap and stds, at the ``question``'s confidence
    (a normal approximation: nothing is drawn).

    Returns
    -------
    list of RunsToSeparate
        One per metric, in ``metrics`` order.
    """
    confidence = question.confidence
    table = rank_configurations(runs, metrics=list(dict.fromkeys([by, *metrics])), config_col=config_col,
                                question=question)
    if len(table) < 2:
        raise ValueError(f"runs: need at least two configurations to separate, found {len(table)}")
    top = table.sort_values([f"{by}_mean", config_col]).iloc[:2]
    a, b = (str(top[config_col].iloc[0]), str(top[config_col].iloc[1]))
    needed = []
    for metric in metrics:
        row_a, row_b = top.iloc[0], top.iloc[1]
        std_a, std_b = float(row_a[f"{metric}_std"]), float(row_b[f"{metric}_std"])
        if not (math.isfinite(std_a) and math.isfinite(std_b)):
            raise ValueError(f"runs: {metric!r} needs at least two runs of {a!r} and {b!r} to estimate a std")
        gap = float(row_b[f"{metric}_mean"] - row_a[f"{metric}_mean"])
        needed.append(
            RunsToSeparate(
                metric=metric,
                a=a,
                b=b,
                gap=gap,
                std_a=std_a,
                std_b=std_b,
                runs_needed=runs_to_separate(gap=gap, std_a=std_a, std_b=std_b, confidence=confidence),
                runs_observed=int(min(row_a["n_runs"], row_b["n_runs"])),
                confidence=confidence,
            )
        )
    return needed
