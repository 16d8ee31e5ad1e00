"""When is one pipeline better? Per-window verdicts, the across-windows test and the fluctuation warning.

A verdict over a whole evaluation period (:func:`rolling_calib.core.verdict.decide`) says whether
``A`` beat ``B`` on those days. Under drift the question is also *when*. Everything here works on
the two pipelines' :class:`~rolling_calib.core.verdict.LossPanel` of one metric and splits their
common days into blocks (the refit windows of a rolling schedule, or calendar months), given by
the first time label of each block.

**Per-window verdicts** (:func:`window_verdicts`). In each block ``j`` of ``q``, the period
verdict (over seeds, on that block's days: the paired or Welch t interval of the runs' block means)
gives a difference ``D_j``, its variance ``V_j`` and degrees of freedom ``nu_j``; its two-sided
p-value is ``p_j = 2 P(t_{nu_j} > |D_j| / sqrt(V_j))``. The ``q`` decisions are one family: Holm's
step-down procedure (Holm 1979) controls the chance of *any* false decision across the windows at
``alpha = 1 - confidence``. With the p-values sorted, ``p_(1) <= ... <= p_(q)``, the Holm-adjusted
p-values are::

    p~_(i) = max_{l <= i} min(1, (q - l + 1) p_(l))

and window ``j`` is decided (better or worse, by the sign of ``D_j``) when ``p~_j <= alpha``. Its
interval is drawn at the level Holm spent on it, ``1 - alpha p_j / p~_j`` (``1 - alpha / (q - i +
1)`` unless the step-down carried an earlier window's adjusted p-value), so it excludes 0 exactly
when the window is decided. These intervals are not simultaneous; the decisions are.

**Across windows** (:func:`across_windows`). After Ibragimov and Mueller (2010): each window's
difference ``D_j`` is one observation and ``t = mean(D) / sqrt(V)`` is referred to Student's t with
``q - 1`` degrees of freedom, valid whatever the dependence *inside* a window, provided the windows'
estimates are nearly independent and normal (heteroskedastic allowed: for ``alpha <= 0.083`` and
``2 <= q <= 14`` the test is conservative, Bakirov and Szekely 2006). But the same seeds run in every
window: a seed's persistent offset (and its pipeline's) is in every window's difference, so the ``q``
differences share a part and their plain sample variance misses it (measured: 12% of null pairs
decided at 4 windows where persistent offsets dominate). The windows x seeds table ``X_{s,j}`` (a
seed's difference in window ``j``; unpaired: each pipeline's own table) is a crossed design,
``X_{s,j} = mu + a_s + b_j + e_{s,j}``, and the variance of ``mean(D) = mean_{s,j} X_{s,j}`` is
``s_seed^2 / k + s_window^2 / q + s_resid^2 / (k q)``, estimated without bias by::

    V = s_D^2 / q + max(s_R^2 / k - MS_e / (k q), 0)

(``s_D^2``: the windows' differences' variance, Ibragimov-Mueller's part; ``s_R^2``: the variance of
the seeds' row means ``R_s = mean_j X_{s,j}``; ``MS_e``: the table's residual mean square with ``(k -
1)(q - 1)`` degrees of freedom, the part of ``s_R^2 / k`` the windows' part already counts), with
``min(q - 1, k - 1)`` degrees of freedom (:func:`rolling_calib.core.variance.min_df`: conservative
for a sum of variance estimates). The seeds' part is :func:`shared_seed_part`; one set of windows'
mean, variance and degrees of freedom is :func:`windows_mean`.

What remains is the *market's* contribution to the windows: a regime of the drift that runs across a
refit boundary is in both windows' differences, so adjacent windows correlate (with Markov-switching
regimes of mean length ``R`` and windows of ``L`` days, the regimes' part of adjacent windows'
differences correlates ``R (1 - e^{-L/R})^2 / (2 (L - R (1 - e^{-L/R})))``: 0.54 at ``L = R``, 0.33 at
``2R``, 0.22 at ``3R``), and one t over all ``q`` windows (``method="all"``) is liberal even where the
regimes' mean length is shorter than a window (measured: 8.6% of null pairs decided at 4 windows of 125
days on regimes of mean 110 days). **If every regime is shorter than one window**, windows ``j`` and
``j + 2`` share no regime, so the odd-numbered windows (1st, 3rd, ...) are independent groups, and so
are the even-numbered ones. The test (``method="halves"``, the default) runs the t above on each half
apart at ``alpha / 2`` (``q_h`` windows, ``min(q_h - 1, k - 1)`` degrees of freedom, the seeds' part
from the half's own columns) and combines them by Bonferroni: "better" when one half's interval lies
on the first pipeline's side of 0 and neither on the other's; its interval is the two halves'
intersection (it covers the windows' common expected difference with probability at least ``1 -
alpha``); ``p = min(1, 2 min(p_odd, p_even))``. That assumption is about every regime, not their mean:
with Markov-switching regimes of mean ``R`` a share ``e^{-L/R}`` of them outlast an ``L``-day window
(a third at ``L = 1.14 R``), so where it is not met the level is measured, not promised
(``bench/across_calibration.py``). Each half needs 2 windows: with fewer than :data:`MIN_WINDOWS` = 4
windows it is not made ("not enough windows"); at 4-5 windows a half has 1-2 degrees of freedom at
``alpha / 2`` and decides only large differences. The lag-1 correlation of the windows' differences
is reported beside it (``adjacent_correlation``), a check too noisy at 4-8 windows to decide on. It
is a claim about the population of windows (what to expect of a new window), not about these days.

**Fluctuation warning** (:func:`fluctuation_test`): did the relative performance change? After
Giacomini and Rossi (2010), the rolling mean over ``m`` days of the seed-averaged differential
``d_t = mean_s L^A_{s,t} - mean_s L^B_{s,t}`` is set against a simultaneous band around the
whole period's mean::

    R_t = (1/m) sum_{i=t-m+1..t} (d_i - dbar),      warn when  max_t |R_t| > h

Under a stable pair (no change of the common part's mean) ``d_t = dbar + g_t + n_t``: ``g`` the
pipelines' common daily difference, stationary, with long-run variance ``LRV_g``, and ``n`` the seeds'
noise in the seed average (their day noise and their offsets per refit window). The band ``h`` is the
``confidence`` quantile of ``max_t |R*_t|`` over ``n_sim`` draws of the null
``d*_t = sigma* z_t + n*_t``:

* ``z_t``: independent standard normal days, so ``R*`` is the discrete Brownian bridge functional of
  Giacomini and Rossi's limit (centred on the period's mean); ``sigma*^2 = max(LRV_g + se z', 0)``,
  the HAC scale drawn within its standard error (:func:`local_lrv`: Bartlett with Andrews' bandwidth,
  the seeds' own noise removed as in :func:`rolling_calib.core.variance.crossed_variance`, each series
  demeaned inside blocks of about ``m / 2`` days so that a change of the mean does not inflate the
  scale that judges it);
* ``n*_t``: the seeds' noise drawn from the seeds' own deviations from their mean, with normal
  multipliers per seed and refit window (:func:`seed_noise_draws`): its window offsets, day noise and
  serial dependence counted as they are (seed-aware).

The asymptotic critical values of the uncentred statistic are those of Giacomini and Rossi (2010,
Table 1; :func:`fluctuation_critical_value` reproduces them by simulation). The result is a
*warning* with the first date the path left the band (and, when it did, the least-squares break date
``argmax_k |sum_{i<=k} (d_i - dbar)|``), never a verdict. Its false-alarm rate on stable pairs and
its power against a one-time reversal are measured by ``bench/when_calibration.py``.

Examples
--------
Two pipelines, 4 seeds, 120 days in 4 windows of 30; A is better by 0.5 in the first half only:

>>> rng = np.random.default_rng(0)
>>> shift = np.r_[np.full(60, -0.5), np.zeros(60)]
>>> a = LossPanel.from_arrays(seeds=range(4), total=10 + shift + rng.normal(0, 0.3, (4, 120)))
>>> b = LossPanel.from_arrays(seeds=range(4), total=10 + rng.normal(0, 0.3, (4, 120)))
>>> w = when(a, b, starts=[0, 30, 60, 90], names=("A", "B"), metric="ql")
>>> [v.outcome for v in w.windows]
['better', 'better', 'undetermined', 'undetermined']
>>> w.consistency()
'A better in 2 of 4 refit windows, worse in 0, undetermined in 2'
>>> w.across.outcome, w.fluctuation.fired, w.fluctuation.break_at
('undetermined', True, 60)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special, stats

from rolling_calib.core.jsonable import fields_dict
from rolling_calib.core.question import DEFAULT_QUESTION, QUESTION, Question
from rolling_calib.core.resampling import DEFAULT, RESAMPLING, Resampling
from rolling_calib.core.validation import (
    CONFIDENCE,
    SEED,
    WHEN,
    AnyOf,
    Interval,
    Options,
    Worded,
    validate_params,
)
from rolling_calib.core.variance import (
    CrossedVariance,
    andrews_bandwidth,
    crossed_variance,
    influence,
    min_df,
    welch_df,
)
from rolling_calib.core.verdict import LossPanel, _align, time_label

__all__ = [
    "BLOCK_WORDS",
    "GR_TABLE_5PCT",
    "MIN_WINDOWS",
    "AcrossHalf",
    "AcrossWindows",
    "Fluctuation",
    "When",
    "WindowVerdict",
    "across_windows",
    "difference",
    "fluctuation_critical_value",
    "fluctuation_test",
    "holm",
    "local_lrv",
    "p_value",
    "seed_noise_draws",
    "shared_seed_part",
    "when",
    "window_tables",
    "window_verdicts",
    "windows_mean",
    "WindowsMean",
]

#: Fewest windows the across-windows test is made with (two odd- and two even-numbered windows, each half a t test).
MIN_WINDOWS = 4
#: Giacomini and Rossi (2010), Table 1: two-sided 5% critical values of the (uncentred) Fluctuation test,
#: by ``mu = m / T``. Checked by :func:`fluctuation_critical_value` (tests/core/test_when.py).
GR_TABLE_5PCT = {0.1: 3.393, 0.2: 3.179, 0.3: 3.012, 0.4: 2.890, 0.5: 2.779, 0.6: 2.634, 0.7: 2.560, 0.8: 2.433,
                 0.9: 2.248}
_ORIENTATION = Options("lower", "higher")
_MU = Worded(Interval(float, 0, 1, closed="neither"), "a share of the days strictly between 0 and 1")
_N_SIM = Worded(Interval(int, 100, 1_000_000), "an int from 100 to 1000000 (simulated paths)")
_OUTCOMES = ("better", "worse", "undetermined")
_WINDOW_DAYS = Worded(AnyOf((Options(None), Interval(int, 2, None))), "None or a number of days >= 2")
#: How a block is named in words (:data:`rolling_calib.core.validation.WHEN_BLOCKS`).
BLOCK_WORDS = {"windows": ("refit window", "refit windows"), "months": ("month", "months")}


# --------------------------------------------------------------------------- multiple testing
def holm(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's (1979) adjusted p-values: ``p~_(i) = max_{l <= i} min(1, (q - l + 1) p_(l))``, in the given order.

    A family decided where ``p~ <= alpha`` makes a false decision with probability at most ``alpha``
    under any dependence between the tests.

    >>> holm([0.01, 0.04, 0.03, 0.2]).tolist()
    [0.04, 0.09, 0.09, 0.2]
    """
    p = np.asarray(p_values, dtype=np.float64)
    q = p.size
    if q == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    steps = np.minimum(1.0, (q - np.arange(q)) * p[order])
    adjusted = np.empty(q)
    adjusted[order] = np.maximum.accumulate(steps)
    return adjusted


# --------------------------------------------------------------------------- per-window verdicts
@dataclass(frozen=True)
class WindowVerdict:
    """One window's period verdict under Holm's control of the family (module docstring).

    Attributes
    ----------
    index : int
        Position of the window (0-based, in time order).
    label : str
        The window's name (``w00``, ``2018-03``).
    start, end : date or time label
        The first and last of its days that both pipelines were scored on.
    n_times : int
        Those days.
    outcome : {"better", "worse", "undetermined"}
        What the window says of ``a`` against ``b`` after Holm's adjustment.
    winner : str or None
    difference : float
        ``mean(a) - mean(b)`` on the window's days (the metric's own sign).
    ci_low, ci_high : float
        The interval at ``level`` (excludes 0 exactly when the window is decided).
    level : float
        ``1 - alpha p / p_holm``: the level Holm spent on this window.
    p_value, p_holm : float
        The window's own two-sided p-value and Holm's adjusted one.
    n_seeds : (int, int)
    """

    index: int
    label: str
    start: Any
    end: Any
    n_times: int
    outcome: str
    winner: str | None
    difference: float
    ci_low: float
    ci_high: float
    level: float
    p_value: float
    p_holm: float
    n_seeds: tuple[int, int]

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


def difference(a: LossPanel, b: LossPanel, *, target: str,
               pair_seeds: bool = True) -> tuple[float, CrossedVariance, bool]:
    """``mean(a) - mean(b)``, its :class:`~rolling_calib.core.variance.CrossedVariance` and whether it is paired:
    the interval :func:`rolling_calib.core.verdict.decide` rests on, without its extras (Diebold-Mariano, seeds
    to decide), for the many small verdicts of the windows and of the harness. The panels must be aligned.

    Paired (seed ``i`` against seed ``i``) when both ran the same seeds (at least 2): ``d_s = M^A_s - M^B_s``
    and the per-day influence ``z^A - z^B``; else the two pipelines' runs apart (Welch).

    >>> a = LossPanel.from_arrays(seeds=[0, 1, 2], total=[[1.0, 2.0], [2.0, 2.0], [3.0, 3.0]])
    >>> b = LossPanel.from_arrays(seeds=[0, 1, 2], total=[[1.0, 1.0], [1.0, 1.0], [2.0, 2.0]])
    >>> d, cv, paired = difference(a, b, target="period")
    >>> round(d, 4), paired, round(cv.var, 4)      # s_d^2 / k of d_s = (0.5, 1, 1)
    (0.8333, True, 0.0278)
    """
    ma, za = influence(a.total, a.weight)
    paired = bool(pair_seeds and a.n_seeds >= 2 and set(a.seeds.tolist()) == set(b.seeds.tolist()))
    if paired:
        order = np.argsort(b.seeds)[np.searchsorted(np.sort(b.seeds), a.seeds)]
        mb, zb = influence(b.total[order], b.weight[order])
        d_s = ma - mb
        return float(d_s.mean()), crossed_variance(d_s[:, None] + (za - zb), target=target), True
    mb, _ = influence(b.total, b.weight)
    cv = crossed_variance(a=(a.total, a.weight), b=(b.total, b.weight), target=target)
    return float(ma.mean() - mb.mean()), cv, False


def p_value(center: float, cv: CrossedVariance) -> float:
    """Two-sided p-value of ``center`` under its own t reference (1 when its variance is unknown).

    >>> from rolling_calib.core.variance import crossed_variance
    >>> cv = crossed_variance(np.array([[0.0, 2.0], [1.0, 1.0], [2.0, 2.0]]), target="period")   # runs 1, 1, 2: t = 3
    >>> round(p_value(1.0, cv), 3)
    0.095
    """
    if math.isinf(cv.var) or math.isnan(cv.var):
        return 1.0
    if not cv.var > 0:
        return 0.0 if center != 0 else 1.0
    return float(2.0 * stats.t.sf(abs(center) / math.sqrt(cv.var), cv.df))


def _blocks(times: np.ndarray, starts: Sequence[Any]) -> np.ndarray:
    """The block of every time label: the last start at or before it (times before the first start: block 0)."""
    edges = np.asarray(list(starts))
    if edges.size == 0:
        return np.zeros(times.size, dtype=np.int64)
    if edges.size > 1 and not (edges[1:] > edges[:-1]).all():
        raise ValueError("starts: expected the blocks' first time labels in ascending order, found them unsorted")
    return np.maximum(np.searchsorted(edges, times, side="right") - 1, 0)


@validate_params({"orientation": _ORIENTATION, "question": QUESTION})
def window_verdicts(a: LossPanel, b: LossPanel, *, starts: Sequence[Any], labels: Sequence[str] | None = None,
                    names: tuple[str, str] = ("A", "B"), metric: str = "ql", orientation: str = "lower",
                    question: Question = DEFAULT_QUESTION) -> list[WindowVerdict]:
    """The period verdict inside each block, decided under Holm's family-wise control (module docstring).

    Parameters
    ----------
    a, b : LossPanel
        The two pipelines' panels of one metric (aligned on their common days first).
    starts : sequence
        The first time label of each block, ascending (comparable with the panels' ``times``).
    labels : sequence of str, optional
        The blocks' names (default ``w00, w01, ...``).
    names, metric, orientation :
        As for :func:`rolling_calib.core.verdict.decide`.
    question : Question
        Its ``confidence`` is the family's: ``alpha = 1 - confidence`` bounds the chance of any false
        decision across the windows. The per-window question is always the period one.

    Returns
    -------
    list of WindowVerdict
        The blocks with at least 2 common days, in time order.
    """
    a, b, _ = _align(a, b)
    block = _blocks(a.times, starts)
    names_of = list(labels) if labels is not None else [f"w{j:02d}" for j in range(max(len(starts), 1))]
    alpha = question.alpha
    found: list[tuple[int, float, CrossedVariance, np.ndarray]] = []
    for j in np.unique(block):
        idx = np.flatnonzero(block == j)
        if idx.size < 2:
            continue
        center, cv, _ = difference(a.select(times=idx), b.select(times=idx), target="period")
        found.append((int(j), center, cv, idx))
    p = np.array([p_value(center, cv) for _, center, cv, _ in found])
    adjusted = holm(p)
    out = []
    low_wins = orientation == "lower"
    for (j, center, cv, idx), pj, ph in zip(found, p, adjusted):
        decided = ph <= alpha and math.isfinite(center) and center != 0
        outcome = "undetermined" if not decided else ("better" if (center < 0) == low_wins else "worse")
        level = 1.0 - alpha * (pj / ph if ph > 0 else 1.0)
        half = cv.half_width(level)
        out.append(WindowVerdict(
            index=len(out), label=names_of[j] if j < len(names_of) else f"w{j:02d}",
            start=time_label(a.times[idx[0]]), end=time_label(a.times[idx[-1]]), n_times=int(idx.size),
            outcome=outcome, winner={"better": names[0], "worse": names[1]}.get(outcome),
            difference=center, ci_low=float(center - half), ci_high=float(center + half),
            level=float(level), p_value=float(pj), p_holm=float(ph), n_seeds=(a.n_seeds, b.n_seeds)))
    return out


# --------------------------------------------------------------------------- across windows
def window_tables(a: LossPanel, b: LossPanel, *, starts: Sequence[Any]) -> list[np.ndarray]:
    """The seeds x windows tables of run means the across-windows test counts the seeds' shared part with.

    Paired (the same seeds, at least 2; :func:`difference`'s rule): one table, ``X_{s,j} = M^A_{s,j} -
    M^B_{s,j}`` (each run's row-weighted mean over window ``j``'s common days); else each pipeline's own
    ``M^P_{s,j}``. The windows are :func:`window_verdicts`' (at least 2 common days), in time order, so the
    columns' means are its windows' differences.

    >>> a = LossPanel.from_arrays(seeds=[0, 1], total=[[1.0, 3.0, 2.0, 2.0], [3.0, 5.0, 4.0, 4.0]])
    >>> b = LossPanel.from_arrays(seeds=[0, 1], total=np.zeros((2, 4)))
    >>> [t.tolist() for t in window_tables(a, b, starts=[0, 2])]
    [[[2.0, 2.0], [4.0, 4.0]]]
    """
    a, b, _ = _align(a, b)
    block = _blocks(a.times, starts)
    columns: list[list[np.ndarray]] = []
    paired = bool(a.n_seeds >= 2 and set(a.seeds.tolist()) == set(b.seeds.tolist()))
    order = np.argsort(b.seeds)[np.searchsorted(np.sort(b.seeds), a.seeds)] if paired else None
    for j in np.unique(block):
        idx = np.flatnonzero(block == j)
        if idx.size < 2:
            continue
        ma, _ = influence(a.total[:, idx], a.weight[:, idx])
        mb, _ = influence(b.total[:, idx], b.weight[:, idx])
        columns.append([ma - mb[order]] if paired else [ma, mb])
    if not columns:
        return []
    return [np.stack([c[side] for c in columns], axis=1) for side in range(len(columns[0]))]


def shared_seed_part(tables: Sequence[np.ndarray]) -> tuple[float, float]:
    """The seeds' part of the variance of the windows' mean difference, and its degrees of freedom.

    For each table ``X`` (seeds x windows, ``k x q``; unpaired: one per pipeline, their parts added)::

        s_R^2 / k - MS_e / (k q),     MS_e = sum_{s,j} (X_{s,j} - R_s - C_j + Xbar)^2 / ((k - 1)(q - 1))

    with ``R_s``, ``C_j`` the row and column means: in the crossed design ``X_{s,j} = mu + a_s + b_j +
    e_{s,j}``, ``E[s_R^2 / k] = s_seed^2 / k + s_resid^2 / (k q)`` and ``E[MS_e] = s_resid^2``, so it
    estimates ``s_seed^2 / k``, what the windows' own variance ``s_D^2 / q`` leaves out. Floored at 0; a
    table with one seed or one window adds nothing (it cannot be measured). Degrees of freedom: ``k - 1``
    (Welch-Satterthwaite over two tables).

    >>> x = np.array([[1.0, 3.0, 2.0, 2.0], [3.0, 3.0, 4.0, 6.0]])    # s_R^2 / k = 1, MS_e / (k q) = 1/6
    >>> v, df = shared_seed_part([x])
    >>> round(v, 6), df
    (0.833333, 1.0)
    """
    parts = []
    for x in tables:
        x = np.asarray(x, dtype=np.float64)
        k, q = x.shape
        if k < 2 or q < 2:
            continue
        rows, cols = x.mean(axis=1), x.mean(axis=0)
        resid = x - rows[:, None] - cols[None, :] + x.mean()
        ms_e = float((resid ** 2).sum()) / ((k - 1) * (q - 1))
        parts.append((max(float(np.var(rows, ddof=1)) / k - ms_e / (k * q), 0.0), k - 1.0))
    if not parts:
        return 0.0, math.inf
    var = sum(v for v, _ in parts)
    return var, (welch_df(parts) if var > 0 else min(nu for _, nu in parts))


@dataclass(frozen=True)
class WindowsMean:
    """The Ibragimov-Mueller estimate of one set of windows, the seeds' shared part counted (:func:`windows_mean`).

    Attributes
    ----------
    n_windows : int
        ``q``: the windows (their differences finite).
    mean : float
        ``mean(D)``: the unweighted mean of the windows' differences.
    var_windows : float
        ``s_D^2 / q``: Ibragimov and Mueller's variance of the mean from the windows' spread.
    var_seeds : float
        The seeds' offsets every window shares (:func:`shared_seed_part`; 0 without a seeds' table).
    degrees_of_freedom : float
        ``min(q - 1, k - 1)`` where ``var_seeds > 0``, else ``q - 1``.
    seeds_counted : bool
        Whether a table with at least 2 seeds was given.
    """

    n_windows: int
    mean: float
    var_windows: float
    var_seeds: float
    degrees_of_freedom: float
    seeds_counted: bool

    @property
    def se(self) -> float:
        """``sqrt(var_windows + var_seeds)``."""
        return math.sqrt(self.var_windows + self.var_seeds)

    def test(self, level: float) -> tuple[float, float, float, float]:
        """``(t, p, ci_low, ci_high)``: Student's t of ``mean / se`` and its two-sided interval at ``level``."""
        se, mean, df = self.se, self.mean, self.degrees_of_freedom
        if se > 0:   # scipy.special's Student t (as stats.t, without its per-call overhead: the harness calls it often)
            half = float(special.stdtrit(df, 0.5 + level / 2)) * se
            return mean / se, float(2.0 * special.stdtr(df, -abs(mean / se))), mean - half, mean + half
        t = math.copysign(math.inf, mean) if mean else 0.0
        return t, (0.0 if mean else 1.0), mean, mean


def windows_mean(differences: Sequence[float] | np.ndarray,
                 seed_tables: Sequence[np.ndarray] | None = None) -> WindowsMean:
    """The mean of ``q`` windows' differences and its variance, ``V = s_D^2 / q + V_seeds`` (module docstring).

    ``V_seeds`` is :func:`shared_seed_part` of ``seed_tables`` (seeds x windows, whose column means are the
    differences). Degrees of freedom ``min(q - 1, k - 1)`` where ``V_seeds > 0``, else ``q - 1`` (at least 2
    windows).

    >>> x = np.array([[1.0, 3.0, 2.0, 2.0], [3.0, 3.0, 4.0, 6.0]])      # s_D^2 / q = 1/6, V_seeds = 5/6
    >>> w = windows_mean(x.mean(axis=0), [x])
    >>> w.mean, round(w.var_windows, 6), round(w.var_seeds, 6), w.degrees_of_freedom
    (3.0, 0.166667, 0.833333, 1.0)
    """
    d = np.asarray(differences, dtype=np.float64)
    q = int(d.size)
    if q < 2:
        raise ValueError(f"differences: expected at least 2 windows, found {q}")
    tables = [np.asarray(t, dtype=np.float64) for t in (seed_tables or [])]
    if any(t.ndim != 2 or t.shape[1] != q for t in tables):
        raise ValueError(f"seed_tables: expected {q} windows (columns) like the differences, found "
                         f"{[t.shape[-1] for t in tables]}")
    var_seeds, df_seeds = shared_seed_part(tables)
    var_windows = float(d.var(ddof=1)) / q
    df = min_df([(var_windows, q - 1.0), (var_seeds, df_seeds)]) if var_windows > 0 or var_seeds > 0 else q - 1.0
    return WindowsMean(q, float(d.mean()), var_windows, float(var_seeds), float(df),
                       any(t.shape[0] >= 2 for t in tables))


@dataclass(frozen=True)
class AcrossHalf:
    """One half of the windows (every other window) and its test at level ``1 - alpha / 2`` (:func:`across_windows`).

    ``windows``: their positions (0-based, in time order); ``ci_low, ci_high`` the interval at ``level``;
    ``p_value`` the half's own two-sided p-value.
    """

    windows: tuple[int, ...]
    mean: float
    ci_low: float
    ci_high: float
    level: float
    statistic: float
    degrees_of_freedom: float
    p_value: float
    var_windows: float
    var_seeds: float

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


@dataclass(frozen=True)
class AcrossWindows:
    """The across-windows test over the windows' differences (module docstring).

    ``outcome`` is ``"not enough windows"`` below :data:`MIN_WINDOWS`; ``mean`` is the unweighted
    mean of all the windows' differences. ``method`` ``"halves"`` (the default): ``ci_low, ci_high`` is
    the intersection of the two halves' intervals at ``1 - alpha / 2`` each (NaN when they do not
    overlap), ``statistic`` and ``degrees_of_freedom`` the half's with the smaller p-value, ``p_value``
    Bonferroni's ``min(1, 2 min(p_odd, p_even))``; ``method`` ``"all"``: the Ibragimov-Mueller test over
    all windows, ``mean -/+ t_df sqrt(var_windows + var_seeds)``. ``assumption`` says what the claim rests on.

    Attributes
    ----------
    var_windows : float
        ``s_D^2 / q`` of all the windows: Ibragimov and Mueller's variance of the mean from the windows'
        spread (with ``method="halves"`` shown for reference; each half's own is in ``halves``).
    var_seeds : float
        The seeds' offsets every window shares (:func:`shared_seed_part` of all the windows; 0 when no
        seeds' table was given or one seed ran).
    seeds_counted : bool
        Whether the seeds' shared part was estimated (a table with at least 2 seeds was given).
    adjacent_correlation : float
        Lag-1 autocorrelation of the windows' differences (under independence about ``-1/q``, with a
        standard error near ``1/sqrt(q)``: at 4-8 windows only a strong dependence shows).
    method : {"halves", "all"}
    halves : tuple of AcrossHalf
        With ``method="halves"``: the odd- and the even-numbered windows' tests (1st, 3rd, ... and 2nd,
        4th, ...).
    """

    n_windows: int
    outcome: str
    winner: str | None
    mean: float
    ci_low: float
    ci_high: float
    statistic: float
    degrees_of_freedom: float
    p_value: float
    confidence: float
    assumption: str
    var_windows: float = math.nan
    var_seeds: float = 0.0
    seeds_counted: bool = False
    adjacent_correlation: float = math.nan
    method: str = "halves"
    halves: tuple[AcrossHalf, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**fields_dict(self, exclude=("halves",)), "halves": [h.to_dict() for h in self.halves]}

    def describe(self, unit: str = "") -> str:
        """The result in words (``"across windows: A better, mean ... [..]; assumes ..."``)."""
        u = f" {unit}" if unit else ""
        if self.outcome == "not enough windows":
            need = (" on the odd- and the even-numbered windows apart (at least 2 of each)" if self.method == "halves"
                    else "")
            return (f"across windows: not enough windows ({self.n_windows} < {MIN_WINDOWS}) for the "
                    f"Ibragimov-Mueller test{need}")
        head = f"{self.winner} better" if self.winner else "undetermined"
        seeds = ("the seeds' shared offsets counted" if self.seeds_counted else "the seeds' shared offsets not counted")
        if self.method == "halves":
            halves = "; ".join(f"windows {', '.join(str(j + 1) for j in h.windows)}: {_g(h.mean)}{u} "
                               f"[{_g(h.ci_low)}, {_g(h.ci_high)}] at {h.level:.1%}" for h in self.halves)
            interval = (f"[{_g(self.ci_low)}, {_g(self.ci_high)}]{u}" if math.isfinite(self.ci_low)
                        else "no interval: the halves' intervals do not overlap")
            return (f"across windows: {head}, mean of the {self.n_windows} windows' differences {_g(self.mean)}{u}, "
                    f"{interval} (Ibragimov-Mueller on the odd- and the even-numbered windows apart, Bonferroni: "
                    f"{halves}; {seeds}; adjacent windows' differences correlate {_g(self.adjacent_correlation, 2)}; "
                    f"{self.assumption})")
        return (f"across windows: {head}, mean of the {self.n_windows} windows' differences {_g(self.mean)}{u} "
                f"[{_g(self.ci_low)}, {_g(self.ci_high)}]{u} (Ibragimov-Mueller, t with {_g(self.degrees_of_freedom)} "
                f"df, {seeds}; adjacent windows' differences correlate {_g(self.adjacent_correlation, 2)}; "
                f"{self.assumption})")


def _lag1(d: np.ndarray) -> float:
    """``sum_j (D_j - Dbar)(D_{j+1} - Dbar) / sum_j (D_j - Dbar)^2`` (NaN when the differences do not vary)."""
    c = d - d.mean()
    den = float(c @ c)
    return float(c[:-1] @ c[1:]) / den if d.size >= 2 and den > 0 else math.nan


def _side(lo: float, hi: float, low_wins: bool) -> str:
    """``better`` when ``[lo, hi]`` lies on the first pipeline's side of 0, ``worse`` on the other's."""
    if (hi < 0) if low_wins else (lo > 0):
        return "better"
    if (lo > 0) if low_wins else (hi < 0):
        return "worse"
    return "undetermined"


_ACROSS_METHOD = Options("halves", "all")


@validate_params({"orientation": _ORIENTATION, "confidence": CONFIDENCE, "min_windows": Interval(int, 2, None),
                  "method": _ACROSS_METHOD})
def across_windows(differences: Sequence[float] | np.ndarray, *, seed_tables: Sequence[np.ndarray] | None = None,
                   names: tuple[str, str] = ("A", "B"), orientation: str = "lower",
                   confidence: float = DEFAULT_QUESTION.confidence, min_windows: int = MIN_WINDOWS,
                   unit_name: str = "window", method: str = "halves") -> AcrossWindows:
    """Ibragimov and Mueller's (2010) t test over ``q`` windows' estimates, the seeds' shared part counted.

    ``method="halves"`` (the default): the odd-numbered windows (1st, 3rd, ...) and the even-numbered
    ones (2nd, 4th, ...) are tested apart, each with :func:`windows_mean` (``t_h = mean(D_h) / sqrt(s_{D,h}^2
    / q_h + V_seeds,h)``, ``min(q_h - 1, k - 1)`` degrees of freedom) at level ``1 - alpha / 2``; Bonferroni::

        better  when one half's interval lies on names[0]'s side of 0 and neither lies on the other's,
        interval  I_odd  ∩  I_even   (covers the windows' common expected difference w.p. >= 1 - alpha)

    It is valid where every regime of the drift is shorter than one window: windows ``j`` and ``j + 2``
    then share no regime, so each half's windows are independent apart from the seeds' offsets (which
    ``V_seeds`` counts), whatever adjacent windows share. It needs ``q >= 4`` (two windows a half).
    ``method="all"``: one test over all ``q`` windows (``min(q - 1, k - 1)`` df), valid only where adjacent
    windows are nearly independent too. ``seed_tables``: the seeds x windows tables of :func:`window_tables`,
    whose column means are ``D`` (without them the plain Ibragimov-Mueller test, right only when every window
    ran other seeds).

    >>> r = across_windows([-1.0, -2.0, -1.5, -0.5, -1.2, -1.8], names=("A", "B"))
    >>> r.outcome, r.winner, r.mean, [h.windows for h in r.halves]
    ('better', 'A', -1.3333333333333333, [(0, 2, 4), (1, 3, 5)])
    >>> round(r.halves[0].ci_high, 3), r.halves[0].degrees_of_freedom     # -1.233 + t_{2, 0.9875} 0.1453
    (-0.332, 2.0)
    >>> round(r.halves[1].ci_high, 3), round(r.p_value, 4)                # undecided; p = 2 min(p_odd, p_even)
    (1.485, 0.0272)
    >>> r = across_windows([-1.0, -2.0, -1.5, -0.5], method="all")
    >>> r.outcome, round(r.mean, 3), r.degrees_of_freedom
    ('better', -1.25, 3.0)
    >>> x = np.array([[1.0, 3.0, 2.0, 2.0], [3.0, 3.0, 4.0, 6.0]])      # V = 1/6 + 5/6 = 1: t = 3 with 1 df
    >>> r = across_windows(x.mean(axis=0), seed_tables=[x], method="all")
    >>> round(r.statistic, 6), r.degrees_of_freedom, r.outcome
    (3.0, 1.0, 'undetermined')
    >>> across_windows([-1.0, -2.0, -1.5]).outcome
    'not enough windows'
    """
    d = np.asarray(differences, dtype=np.float64)
    keep = np.isfinite(d)
    d = d[keep]
    q = int(d.size)
    halves = method == "halves"
    needed = max(min_windows, 4) if halves else min_windows
    if halves:
        assumption = (f"assumes every regime of the drift is shorter than one {unit_name}, so that {unit_name}s "
                      f"two apart share none: each half's {unit_name}s are independent apart from the seeds' "
                      f"shared offsets; a claim about a new {unit_name}")
    else:
        assumption = (f"assumes the drift's regimes end within a {unit_name}, so the {unit_name}s' differences are "
                      f"independent apart from the seeds' shared offsets; a claim about a new {unit_name}")
    if q < needed:
        return AcrossWindows(q, "not enough windows", None, float(d.mean()) if q else math.nan, -math.inf,
                             math.inf, math.nan, float(max(q - 1, 0)), math.nan, float(confidence), assumption,
                             method=method)
    tables = [np.asarray(t, dtype=np.float64)[:, keep] for t in (seed_tables or [])]
    if any(t.shape[1] != q for t in tables):
        raise ValueError(f"seed_tables: expected {keep.size} windows (columns) like the differences, found "
                         f"{[t.shape[1] + int((~keep).sum()) for t in tables]}")
    whole = windows_mean(d, tables)
    low_wins = orientation == "lower"
    if not halves:
        t, p, lo, hi = whole.test(confidence)
        outcome = _side(lo, hi, low_wins)
        return AcrossWindows(q, outcome, {"better": names[0], "worse": names[1]}.get(outcome), whole.mean, lo, hi, t,
                             whole.degrees_of_freedom, p, float(confidence), assumption,
                             var_windows=whole.var_windows, var_seeds=whole.var_seeds,
                             seeds_counted=whole.seeds_counted, adjacent_correlation=_lag1(d), method="all")
    level = 1.0 - (1.0 - confidence) / 2.0
    found = []
    for first in (0, 1):
        idx = np.arange(first, q, 2)
        part = windows_mean(d[idx], [t[:, idx] for t in tables])
        t, p, lo, hi = part.test(level)
        found.append(AcrossHalf(tuple(int(j) for j in idx), part.mean, lo, hi, level, t, part.degrees_of_freedom,
                                p, part.var_windows, part.var_seeds))
    sides = {_side(h.ci_low, h.ci_high, low_wins) for h in found} - {"undetermined"}
    outcome = sides.pop() if len(sides) == 1 else "undetermined"
    lo, hi = max(h.ci_low for h in found), min(h.ci_high for h in found)
    if lo > hi:
        lo, hi = math.nan, math.nan
    best = min(found, key=lambda h: h.p_value)
    return AcrossWindows(q, outcome, {"better": names[0], "worse": names[1]}.get(outcome), whole.mean, lo, hi,
                         best.statistic, best.degrees_of_freedom, min(1.0, 2.0 * best.p_value), float(confidence),
                         assumption, var_windows=whole.var_windows, var_seeds=whole.var_seeds,
                         seeds_counted=whole.seeds_counted, adjacent_correlation=_lag1(d), method="halves",
                         halves=tuple(found))


# --------------------------------------------------------------------------- the fluctuation test
@validate_params({"mu": _MU, "confidence": CONFIDENCE, "n_sim": _N_SIM, "n_grid": Interval(int, 20, 100_000),
                  "seed": SEED})
def fluctuation_critical_value(mu: float, *, confidence: float = 0.95, centred: bool = True, n_sim: int = 20_000,
                               n_grid: int = 2000, seed: int = 0) -> float:
    """The limiting critical value of ``sup_tau |W(tau) - W(tau - mu)| / sqrt(mu)``, simulated.

    ``W`` is a Brownian motion (``centred=False``: Giacomini and Rossi's 2010 Fluctuation test of equal
    performance at every point, their Table 1, :data:`GR_TABLE_5PCT`) or a Brownian bridge
    ``B(tau) - tau B(1)`` (``centred=True``: the rolling mean set against the period's own mean, the
    change this module warns of), on ``n_grid`` steps, ``n_sim`` paths, seed ``seed``.

    >>> round(fluctuation_critical_value(0.5, centred=False, n_sim=4000, n_grid=500), 1)   # Table 1: 2.779
    2.8
    """
    rng = np.random.default_rng(int(seed))
    m = max(int(round(mu * n_grid)), 1)
    out = []
    chunk = max(1, min(n_sim, 2_000_000 // n_grid))
    done = 0
    while done < n_sim:
        size = min(chunk, n_sim - done)
        z = rng.standard_normal((size, n_grid)) / math.sqrt(n_grid)
        w = np.concatenate([np.zeros((size, 1)), np.cumsum(z, axis=1)], axis=1)
        inc = w[:, m:] - w[:, :-m]
        if centred:
            inc = inc - (m / n_grid) * w[:, -1:]
        out.append(np.abs(inc).max(axis=1) / math.sqrt(m / n_grid))
        done += size
    return float(np.quantile(np.concatenate(out), confidence))


@dataclass(frozen=True)
class Fluctuation:
    """Result of :func:`fluctuation_test`: a warning, never a verdict (module docstring).

    Attributes
    ----------
    window_days : int
        ``m``: days of the rolling mean.
    mu : float
        ``m / T``.
    center : float
        ``dbar``: the whole period's mean differential (the band's centre).
    half_width : float
        ``h``: the band's half-width, in the metric's unit (``confidence`` quantile of the simulated sup).
    statistic : float
        ``max_t |R_t|`` observed.
    p_value : float
        Share of simulated paths with a sup at least as large (0: none of the ``n_sim``).
    fired : bool
        The path left the band.
    left_at : time label or None
        The last day of the first rolling window whose mean left the band.
    break_at : time label or None
        When fired: the first day after the least-squares break date.
    times : list
        The last day of each rolling window (labels as text).
    rolling : list of float
        ``dbar + R_t``: the rolling mean of the differential at each of ``times``.
    lrv_common, lrv_se, share_seed : float
        ``LRV_g`` (the HAC scale of the common part, seed noise removed, :func:`local_lrv`), its standard
        error (each simulated path draws its scale as ``max(LRV_g + lrv_se z, 0)``), and the seed noise's
        share of the simulated sup's variance (0 when the seeds' noise could not be separated: one seed on
        a side).
    seed_aware : bool
        The seeds' noise was drawn from their deviations (at least 2 seeds per pipeline).
    n_sim, seed, confidence : settings
    asymptotic_cv : float
        For reference: the limit's critical value at the same ``mu`` (the Brownian bridge functional, in
        units of ``sqrt(LRV / m)``).
    """

    window_days: int
    mu: float
    center: float
    half_width: float
    statistic: float
    p_value: float
    fired: bool
    left_at: Any
    break_at: Any
    times: list = field(repr=False)
    rolling: list = field(repr=False)
    lrv_common: float = math.nan
    lrv_se: float = math.nan
    share_seed: float = math.nan
    seed_aware: bool = True
    n_sim: int = 0
    seed: int = 0
    confidence: float = 0.95
    asymptotic_cv: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)

    def describe(self, names: tuple[str, str], unit: str = "") -> str:
        """The warning in words, or that the relative performance stayed inside the band."""
        u = f" {unit}" if unit else ""
        band = f"{_g(self.center)} ± {_g(self.half_width)}{u}"
        if not self.fired:
            return (f"stable: the {self.window_days}-day rolling mean of {names[0]} - {names[1]} stayed inside its "
                    f"{self.confidence:.0%} simultaneous band ({band}; {_p(self.p_value, self.n_sim)})")
        where = f"; the least-squares break is at {self.break_at}" if self.break_at is not None else ""
        return (f"the relative performance changed: the {self.window_days}-day rolling mean of {names[0]} - "
                f"{names[1]} left its {self.confidence:.0%} simultaneous band ({band}) at {self.left_at} "
                f"({_p(self.p_value, self.n_sim)}){where}. A verdict over the whole period averages regimes that "
                "differ.")


def _rolling_sup(y: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """``R_t`` (rolling mean over ``m`` of ``y - mean(y)``, along the last axis) and ``max_t |R_t|``."""
    c = y - y.mean(axis=-1, keepdims=True)
    s = np.cumsum(c, axis=-1)
    s = np.concatenate([np.zeros(s.shape[:-1] + (1,)), s], axis=-1)
    r = (s[..., m:] - s[..., :-m]) / m
    return r, np.abs(r).max(axis=-1)


def _seed_deviations(a: LossPanel, b: LossPanel) -> tuple[np.ndarray, list[np.ndarray], np.ndarray | None]:
    """``d_t`` (seed-averaged differential per day), the seeds' deviations per side (paired: one side, the
    per-seed differential's) and the paired differential (None when unpaired)."""
    la, lb = a.unit_means(), b.unit_means()
    paired = a.n_seeds >= 2 and set(a.seeds.tolist()) == set(b.seeds.tolist())
    if paired:
        order = np.argsort(b.seeds)[np.searchsorted(np.sort(b.seeds), a.seeds)]
        x = la - lb[order]
        d = x.mean(axis=0)
        return d, [x - d], x
    d = la.mean(axis=0) - lb.mean(axis=0)
    return d, [la - la.mean(axis=0), -(lb - lb.mean(axis=0))], None


def _demean_blocks(x: np.ndarray, block: int) -> np.ndarray:
    """``x`` less its mean over contiguous blocks of ``block`` units along the last axis (a last block
    shorter than half of one joins the one before)."""
    T = x.shape[-1]
    edges = list(range(0, T, block)) + [T]
    if len(edges) > 2 and edges[-1] - edges[-2] < block / 2:
        del edges[-2]
    out = np.array(x, dtype=np.float64, copy=True)
    for lo, hi in zip(edges[:-1], edges[1:]):
        out[..., lo:hi] -= out[..., lo:hi].mean(axis=-1, keepdims=True)
    return out


def _acov(x: np.ndarray, max_lag: int) -> np.ndarray:
    """``gamma_h = (1/T) sum_t x_t x_{t+h}``, ``h = 0..max_lag``, summed over the rows of a 2-D ``x``."""
    x = np.atleast_2d(x)
    T = x.shape[-1]
    return np.array([(x[:, : T - h] * x[:, h:]).sum() / T for h in range(max_lag + 1)])


def local_lrv(d: np.ndarray, devs: Sequence[np.ndarray], *, block: int) -> tuple[float, float]:
    """The long-run variance of the differential's common part, robust to a change of its mean, and its
    standard error.

    Each series is demeaned within contiguous blocks of ``block`` days (so a shift of the mean, the
    alternative the fluctuation test looks for, does not inflate the scale that judges it); the seeds'
    noise is removed as in :func:`rolling_calib.core.variance.crossed_variance`
    (``Q(g) = Q(dbar) - sum_s Q(u_s) / (k (k - 1))`` per side; ``devs``: the seeds' deviations, none when
    they cannot be separated); Bartlett with Andrews' bandwidth ``M`` on the noise-removed lag-1
    autocorrelation (at most ``block // 4``), scaled by ``block / (block - M - 1)`` for the means removed.
    Standard error: each of the two estimates ``Q`` has ``nu_Q = (T - blocks) / (1 + 2M/3)`` degrees of
    freedom (the noise's ``nu_Q (k - 1)``), so ``se^2 = 2 Q(dbar)^2 / nu_Q + 2 Q_noise^2 / (nu_Q (k - 1))``.

    >>> rng = np.random.default_rng(1)
    >>> x = rng.normal(0, 1.0, 2000)
    >>> shifted = x + np.r_[np.zeros(1000), np.ones(1000)]
    >>> [round(local_lrv(y, [], block=100)[0], 1) for y in (x, shifted)]     # the shift does not move it
    [1.0, 1.0]
    """
    d = np.asarray(d, dtype=np.float64)
    T = d.size
    block = int(min(max(block, 4), T))
    max_lag = max(1, min(T - 1, block // 4))
    n_blocks = max(T // block, 1)
    g_common = _acov(_demean_blocks(d, block), max_lag)
    g_noise = np.zeros(max_lag + 1)
    df_noise = math.inf
    for u in devs:
        k = u.shape[0]
        g_noise += _acov(_demean_blocks(u, block), max_lag) / (k * (k - 1))
        df_noise = min(df_noise, k - 1.0)
    g = g_common - g_noise
    rho = float(g[1] / g[0]) if g[0] > 0 else 0.0
    M = min(andrews_bandwidth(rho, T), max_lag)
    w = np.r_[1.0, 2.0 * (1.0 - np.arange(1, M + 1) / (M + 1.0))]
    factor = block / max(block - M - 1, 1)
    q_common, q_noise = float(w @ g_common[: M + 1]) * factor, float(w @ g_noise[: M + 1]) * factor
    nu = max(T - n_blocks, 1) / (1.0 + 2.0 * M / 3.0)
    var = 2.0 * q_common ** 2 / nu + (2.0 * q_noise ** 2 / (nu * df_noise) if devs else 0.0)
    return max(q_common - q_noise, 0.0), math.sqrt(var)


def seed_noise_draws(devs: Sequence[np.ndarray], block: np.ndarray, *, n_sim: int,
                     rng: np.random.Generator) -> np.ndarray:
    """``n_sim`` draws of the seeds' noise in the seed-averaged differential, from the seeds' deviations.

    Per side (``u``: ``k`` seeds x ``T`` days, deviations from the side's seed mean) and block ``j``
    of days (a refit window), the deviations split into each seed's block mean ``ubar_{s,j}`` (its
    offset in that window) and the rest ``r_{s,t}``; a draw is::

        n*_t = sqrt(k / (k - 1)) (1/k) [ sqrt((k - 1) / X_j) sum_s z_{s,j} ubar_{s,j} + sum_s z'_{s,t|j} r_{s,t} ]

    with independent standard normal multipliers ``z``, ``z'`` per seed and block and ``X_j`` a
    chi-square with ``k - 1`` degrees of freedom: the window offsets' mean drawn from its predictive
    Student t (its scale is estimated from ``k`` seeds only), the day-to-day rest with its own serial
    structure. Blocks are independent, as the seeds' refits are.

    >>> u = np.array([[1.0, 1.0, -1.0, -1.0], [-1.0, -1.0, 1.0, 1.0]])
    >>> seed_noise_draws([u], np.array([0, 0, 1, 1]), n_sim=3, rng=np.random.default_rng(0)).shape
    (3, 4)
    """
    T = int(block.size)
    _, index = np.unique(block, return_inverse=True)   # blocks as 0..J-1
    J = int(index.max()) + 1 if T else 0
    counts = np.bincount(index, minlength=J)
    out = np.zeros((n_sim, T))
    for u in devs:   # element-wise products summed over seeds: no BLAS call (its threads cost more than the work)
        k = u.shape[0]
        scale = math.sqrt(k / (k - 1.0)) / k
        ubar = np.stack([np.bincount(index, weights=row, minlength=J) for row in u]) / counts   # (k, J)
        rest = u - ubar[:, index]
        t_factor = np.sqrt((k - 1.0) / rng.chisquare(k - 1.0, size=(n_sim, J)))
        offset = np.einsum("isj,sj->ij", rng.standard_normal((n_sim, k, J)), ubar) * t_factor   # (n_sim, J)
        z = rng.standard_normal((n_sim, k, J))[:, :, index]                                    # (n_sim, k, T)
        out += scale * (offset[:, index] + np.einsum("ist,st->it", z, rest))
    return out


def _default_window(n_times: int, window_days: int | None) -> int:
    """``m``: the given days (e.g. a refit window's), else a quarter of the period; within [10%, 50%] of it."""
    m = int(window_days) if window_days else int(math.ceil(0.25 * n_times))
    return int(min(max(m, math.ceil(0.1 * n_times), 2), max(n_times // 2, 2)))


@validate_params({"window_days": _WINDOW_DAYS, "question": QUESTION, "resampling": RESAMPLING})
def fluctuation_test(a: LossPanel, b: LossPanel, *, window_days: int | None = None,
                     starts: Sequence[Any] | None = None, question: Question = DEFAULT_QUESTION,
                     resampling: Resampling = DEFAULT) -> Fluctuation:
    """Did the relative performance change? The seed-aware fluctuation test (module docstring).

    Parameters
    ----------
    a, b : LossPanel
        The two pipelines' panels of one metric (aligned on their common days).
    window_days : int, optional
        ``m``, the rolling window (days); default a quarter of the period. Kept within 10-50% of the
        days (Giacomini and Rossi's table spans ``mu`` 0.1-0.9).
    starts : sequence, optional
        The refit windows' first time labels: the seeds' noise is redrawn independently per refit window
        (a seed's offset is constant inside one); default blocks of ``m`` days.
    question : Question
        ``confidence``: the band's simultaneous level (the warning fires in ``1 - confidence`` of stable
        pairs).
    resampling : Resampling
        ``n_boot`` simulated null paths and their ``seed`` (recorded).

    Returns
    -------
    Fluctuation
    """
    a, b, _ = _align(a, b)
    T = a.n_times
    if T < 8:
        raise ValueError(f"the two panels share {T} days; the fluctuation test needs at least 8")
    m = _default_window(T, window_days)
    d, devs, x = _seed_deviations(a, b)
    seed_aware = all(u.shape[0] >= 2 for u in devs)
    lrv, lrv_se = local_lrv(d, devs if seed_aware else [], block=max(m // 2, 10))
    n_sim = int(resampling.n_boot)
    rng = np.random.default_rng(int(resampling.seed))
    # the common part's scale is estimated: each path draws it within its standard error
    scale = np.sqrt(np.maximum(lrv + lrv_se * rng.standard_normal(n_sim), 0.0))
    common = scale[:, None] * rng.standard_normal((n_sim, T))
    noise = np.zeros((n_sim, T))
    if seed_aware:
        noise = seed_noise_draws(devs, _blocks(a.times, starts) if starts is not None else np.arange(T) // m,
                                 n_sim=n_sim, rng=rng)
    _, sup_null = _rolling_sup(common + noise, m)
    _, sup_common = _rolling_sup(common, m)
    h = float(np.quantile(sup_null, question.confidence, method="higher"))
    r, sup = _rolling_sup(d, m)
    fired = bool(sup > h)
    ends = a.times[m - 1:]
    left_at = time_label(ends[int(np.flatnonzero(np.abs(r) > h)[0])]) if fired else None
    break_at = None
    if fired:
        s = np.cumsum(d - d.mean())[:-1]
        break_at = time_label(a.times[int(np.argmax(np.abs(s))) + 1])
    var_null, var_common = float(np.var(sup_null)), float(np.var(sup_common))
    share = max(1.0 - var_common / var_null, 0.0) if seed_aware and var_null > 0 else 0.0
    return Fluctuation(
        window_days=m, mu=m / T, center=float(d.mean()), half_width=h, statistic=float(sup),
        p_value=float(np.mean(sup_null >= sup)), fired=fired, left_at=left_at, break_at=break_at,
        times=[time_label(t) for t in ends], rolling=(d.mean() + r).tolist(), lrv_common=float(lrv), lrv_se=float(lrv_se),
        share_seed=float(share), seed_aware=seed_aware, n_sim=n_sim, seed=int(resampling.seed),
        confidence=float(question.confidence),
        asymptotic_cv=_asymptotic_cv(m / T, question.confidence))


def _asymptotic_cv(mu: float, confidence: float) -> float:
    """The centred limit's critical value at ``mu`` (small fixed simulation, cached per value)."""
    key = (round(mu, 3), round(confidence, 4))
    if key not in _CV_CACHE:
        _CV_CACHE[key] = fluctuation_critical_value(min(max(key[0], 0.01), 0.99), confidence=key[1], n_sim=2000,
                                                    n_grid=400, seed=0)
    return _CV_CACHE[key]


_CV_CACHE: dict[tuple[float, float], float] = {}


# --------------------------------------------------------------------------- all of it, for one pair and metric
@dataclass(frozen=True)
class When:
    """When ``a`` was better than ``b`` under one metric: per window, across windows, and the fluctuation warning.

    ``blocks`` is what a window is (``"windows"``: the schedule's refit windows; ``"months"``).
    """

    metric: str
    a: str
    b: str
    blocks: str
    confidence: float
    windows: list[WindowVerdict]
    across: AcrossWindows
    fluctuation: Fluctuation | None
    fluctuation_error: str | None = None

    def counts(self) -> tuple[int, int, int]:
        """Windows where ``a`` was better, worse, undetermined."""
        return tuple(sum(w.outcome == o for w in self.windows) for o in _OUTCOMES)  # type: ignore[return-value]

    def consistency(self) -> str:
        """``"A better in 5 of 8 refit windows, worse in 0, undetermined in 3"``."""
        better, worse, undetermined = self.counts()
        return (f"{self.a} better in {better} of {len(self.windows)} {BLOCK_WORDS[self.blocks][1]}, worse in "
                f"{worse}, undetermined in {undetermined}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form: ``metric, a, b, blocks, consistency, windows, across_windows, fluctuation``."""
        return {"metric": self.metric, "a": self.a, "b": self.b, "blocks": self.blocks,
                "confidence": float(self.confidence), "consistency": self.consistency(),
                "family_wise": f"Holm, {self.confidence:.0%} across the {len(self.windows)} "
                               f"{BLOCK_WORDS[self.blocks][1]}",
                "windows": [w.to_dict() for w in self.windows], "across_windows": self.across.to_dict(),
                "fluctuation": None if self.fluctuation is None else self.fluctuation.to_dict(),
                **({"fluctuation_error": self.fluctuation_error} if self.fluctuation_error else {})}


@validate_params({"orientation": _ORIENTATION, "question": QUESTION, "resampling": RESAMPLING, "blocks": WHEN,
                  "fluctuation_days": _WINDOW_DAYS})
def when(a: LossPanel, b: LossPanel, *, starts: Sequence[Any], labels: Sequence[str] | None = None,
         blocks: str = "windows", names: tuple[str, str] = ("A", "B"), metric: str = "ql",
         orientation: str = "lower", question: Question = DEFAULT_QUESTION, resampling: Resampling = DEFAULT,
         fluctuation_days: int | None = None) -> When:
    """Per-window verdicts (Holm), the across-windows test and the fluctuation warning of one pair and metric.

    ``fluctuation_days`` is the rolling window of the fluctuation test (default: the median block's
    days). See :func:`window_verdicts`, :func:`across_windows` and :func:`fluctuation_test`.
    """
    windows = window_verdicts(a, b, starts=starts, labels=labels, names=names, metric=metric,
                              orientation=orientation, question=question)
    across = across_windows([w.difference for w in windows], seed_tables=window_tables(a, b, starts=starts),
                            names=names, orientation=orientation, confidence=question.confidence,
                            unit_name=BLOCK_WORDS[blocks][0])
    m = fluctuation_days or (int(np.median([w.n_times for w in windows])) if windows else None)
    flux, error = None, None
    try:
        flux = fluctuation_test(a, b, window_days=m if m and m >= 2 else None, starts=starts, question=question,
                                resampling=resampling)
    except ValueError as exc:   # too few days
        error = str(exc)
    return When(metric=metric, a=names[0], b=names[1], blocks=blocks, confidence=float(question.confidence),
                windows=windows, across=across, fluctuation=flux, fluctuation_error=error)


def _p(p: float, n_sim: int) -> str:
    """``p = 0.031``, or ``p < 1/n_sim`` when no simulated path reached the statistic."""
    return f"p < {1 / n_sim:.2g}" if p == 0 and n_sim else f"p = {p:.3g}"


def _g(x: float, digits: int = 3) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:.{digits}g}"
