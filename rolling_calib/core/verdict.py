"""Deciding between two pipelines: better, worse or undetermined, over seeds on the evaluated days (or the market's future).

A comparison of two pipelines ``A`` and ``B`` under a metric (lower is better for a loss, higher
for a score such as IC) has two sources of chance (docs/method.md §5): the seeds each pipeline
happened to run with, and the sample of market time both were evaluated on. Everything here works
on a :class:`LossPanel` per pipeline: per seed ``s`` and time unit ``t`` (a trading day) the sum
of the metric over the unit's rows, ``total[s, t]``, and their number, ``weight[s, t]``. A run's
value is the row-weighted mean over its time units, and a pipeline's is the mean over its seeds::

    M_s   = sum_t total[s, t] / sum_t weight[s, t]          (one run: QL, CQL, ... of seed s)
    D     = mean_s M^A_s - mean_s M^B_s                      (difference of means; < 0: A lower)

**Interval: seeds, and market time counted once.** The difference's variance comes from
:func:`rolling_calib.core.variance.crossed_variance` (formulas there), which answers the
:class:`~rolling_calib.core.question.Question`'s ``target``:

* ``"period"`` (:data:`~rolling_calib.core.question.DEFAULT_QUESTION`'s): over seeds, on the evaluated days
  (a fixed backtest): ``var_time = 0`` and the interval is the paired (or Welch) t interval of the run means
  (``var_seeds`` below). Its level holds in every drift cell the calibration harness measures, so it is the
  headline; the verdict names its days (``days``).
* ``"future"``: over seeds *and* the market-time process, what to expect on new periods.
  ``var_seeds`` is the unbiased between-run variance of the difference (``s_d^2 / k`` of
  the per-seed differences ``d_s = M^A_s - M^B_s`` when both pipelines ran the same seeds --
  *paired*, common random numbers -- else ``s_A^2 / k_A + s_B^2 / k_B``); it already holds each
  run's day-to-day noise. ``var_time`` is the long-run variance of the pipelines' *common*
  per-day difference only: the seed-averaged differential's, less the seeds' own noise
  (estimated from the seeds' deviations), by a Bartlett kernel whose bandwidth is chosen on the
  noise-removed autocorrelation, or, when a drift check finds more variance at the scale of
  months, by month-scale batch means. It rests on an assumption: that the market's drift is
  shorter than the horizon that estimate sees. Regimes of 40-110 days make it decide up to 24% of
  identical pairs at 95%, and no estimator from the evaluated days alone does better
  (``bench/drift_identifiability.py``); reports show it beside the headline, as that assumption.

The interval is ``D -/+ t_nu(1 - alpha/2) sqrt(var_seeds + var_time)`` (``1 - alpha``: the question's
``confidence``; analytic: no bootstrap replicate is drawn) with ``nu`` the
Welch-Satterthwaite degrees of freedom of the parts (``k - 1`` for the seeds; ``T / (1 + 2m/3)``
for a Bartlett bandwidth ``m``, ``B - 1`` for ``B`` month blocks). Its error rates are measured,
not assumed: ``bench/verdict_calibration.py`` simulates panels from a store's own variance
components and prints false decisions, coverage and power beside the standard tests. The larger
part names the dominant source of uncertainty.

**Verdict.** ``better`` (A is better) when the interval lies entirely on A's side of 0,
``worse`` when it lies on B's side, ``undetermined`` otherwise.

**Diebold-Mariano** (a time-series detail, not the verdict). On the seed-averaged loss
differential per time unit ``d_t = mean_s L^A_{s,t} - mean_s L^B_{s,t}`` (``L = total /
weight``): ``DM = mean(d) / sqrt(LRV / T)`` with the long-run variance from a Bartlett
(Newey-West) kernel (:class:`arch.covariance.kernel.Bartlett`, automatic bandwidth), scaled by
the Harvey-Leybourne-Newbold factor ``sqrt((T - 1) / T)`` and referred to Student's t with
``T - 1`` degrees of freedom (two-sided p-value). It treats the seed-averaged differential as the
only randomness: persistent seed offsets make it decide pairs that seeds alone separate, so it is
reported beside the time-series details, never as the verdict's p-value.

**Seeds needed** (:func:`seeds_needed`): the seeds per pipeline that give the pair an 80% chance
of being decided if the true gap equals the measured one, from the same t-based interval with
the seeds' part shrinking as ``1/n`` and the market-time part fixed; with the chance allowing for
this run's own uncertainty about the gap, and the count if the gap were half. "No number of
seeds can decide it" only when the market-time part alone exceeds the gap, never beside a
decided verdict.

Examples
--------
Two pipelines, 4 seeds, 60 days; A's loss is lower by 0.5 every day, seeds add noise:

>>> rng = np.random.default_rng(0)
>>> base = rng.normal(10.0, 1.0, size=60)
>>> a = LossPanel.from_arrays(seeds=range(4), total=base + rng.normal(0, 0.1, (4, 60)) - 0.5)
>>> b = LossPanel.from_arrays(seeds=range(4), total=base + rng.normal(0, 0.1, (4, 60)))
>>> v = decide(a, b, names=("A", "B"))
>>> v.outcome, v.winner, round(v.difference, 2)
('better', 'A', -0.51)
>>> v.paired, v.dominant_uncertainty      # the market moved both alike: only the seeds' noise is left
(True, 'seeds')
>>> decide(a, b, question=Question(target="period", confidence=0.9)).question.describe()
'over seeds, on the evaluated days (target period), at 90% confidence'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from scipy import special, stats

from rolling_calib.core.jsonable import fields_dict
from rolling_calib.core.question import DEFAULT_QUESTION, QUESTION, Question
from rolling_calib.core.resampling import DEFAULT, RESAMPLING, Resampling
from rolling_calib.core.validation import CONFIDENCE, TRADING_DAYS, Options, validate_params
from rolling_calib.core.variance import BLOCK_DAYS, CrossedVariance, crossed_variance, influence, welch_df

__all__ = [
    "optimistic_gap",
    "time_part_low",
    "time_label",
    "decide_probability",
    "predictive_probability",
    "OUTCOMES",
    "ConfidenceSet",
    "DieboldMariano",
    "LossPanel",
    "SeedsNeeded",
    "Verdict",
    "decide",
    "diebold_mariano",
    "seed_averaged_confidence_set",
    "seeds_needed",
]

#: What a verdict says of pipeline A against B.
OUTCOMES = ("better", "worse", "undetermined")
_ORIENTATION = Options("lower", "higher")


# --------------------------------------------------------------------------- panels
def _matrix(name: str, values: Any, shape: tuple[int, int] | None = None) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 1 and shape is not None and arr.shape == (shape[1],):
        arr = np.broadcast_to(arr, shape).copy()
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array (seeds x time units), found shape {arr.shape}")
    if shape is not None and arr.shape != shape:
        raise ValueError(f"{name}: expected shape {shape} (seeds x time units), found {arr.shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        s, t = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name}: expected finite values, found {float(arr[s, t])!r} at seed row {s}, time unit {t}")
    return arr


@dataclass(frozen=True)
class LossPanel:
    """One pipeline's metric per seed and time unit, as sums and weights (see the module docstring).

    Attributes
    ----------
    seeds : ndarray of int, shape (k,)
        The seed of every row.
    times : ndarray, shape (T,)
        The label of every time unit (dates; any comparable values), ascending.
    total : ndarray, shape (k, T)
        Sum of the metric over the unit's rows (a loss's squared errors; a per-date score itself).
    weight : ndarray, shape (k, T)
        Rows behind ``total`` (1 per unit for a metric that is a mean over dates, such as IC).
    """

    seeds: np.ndarray
    times: np.ndarray
    total: np.ndarray
    weight: np.ndarray

    @classmethod
    def from_arrays(cls, *, seeds: Sequence[int] | np.ndarray, total: Any, weight: Any = None,
                    times: Sequence[Any] | np.ndarray | None = None) -> LossPanel:
        """A checked panel; ``weight`` defaults to 1 per unit, ``times`` to ``0..T-1``.

        >>> p = LossPanel.from_arrays(seeds=[0, 1], total=[[2.0, 4.0], [6.0, 8.0]], weight=[1, 2])
        >>> p.run_means().tolist()
        [2.0, 4.666666666666667]
        """
        tot = _matrix("total", total)
        w = _matrix("weight", np.ones(tot.shape[1]) if weight is None else weight, tot.shape)
        if (w < 0).any():
            raise ValueError("weight: expected rows >= 0 per seed and time unit, found a negative weight")
        seed_arr = np.asarray(list(seeds), dtype=np.int64)
        if seed_arr.shape != (tot.shape[0],):
            raise ValueError(f"seeds: expected {tot.shape[0]} seeds (one per row of total), found {seed_arr.size}")
        if len(set(seed_arr.tolist())) != seed_arr.size:
            raise ValueError(f"seeds: expected distinct seeds, found {seed_arr.tolist()}")
        t = np.arange(tot.shape[1]) if times is None else np.asarray(times)
        if t.shape != (tot.shape[1],):
            raise ValueError(f"times: expected {tot.shape[1]} labels (one per column of total), found {t.size}")
        empty = np.flatnonzero(w.sum(axis=1) <= 0)
        if empty.size:
            raise ValueError(f"weight: seed {int(seed_arr[empty[0]])} has no rows in any time unit")
        return cls(seeds=seed_arr, times=t, total=tot, weight=w)

    @property
    def n_seeds(self) -> int:
        return int(self.total.shape[0])

    @property
    def n_times(self) -> int:
        return int(self.total.shape[1])

    def run_means(self) -> np.ndarray:
        """Per seed, the row-weighted mean over all time units (``M_s``)."""
        return self.total.sum(axis=1) / self.weight.sum(axis=1)

    def unit_means(self) -> np.ndarray:
        """Per seed and time unit, ``total / weight`` (NaN where a unit has no rows)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.weight > 0, self.total / np.where(self.weight > 0, self.weight, 1.0), np.nan)

    def select(self, *, seeds: np.ndarray | None = None, times: np.ndarray | None = None) -> LossPanel:
        """The panel restricted to the given seed rows and time columns (boolean or integer indices)."""
        rows = np.arange(self.n_seeds) if seeds is None else np.asarray(seeds)
        cols = np.arange(self.n_times) if times is None else np.asarray(times)
        return LossPanel(seeds=self.seeds[rows], times=self.times[cols],
                         total=self.total[np.ix_(_ix(rows, self.n_seeds), _ix(cols, self.n_times))],
                         weight=self.weight[np.ix_(_ix(rows, self.n_seeds), _ix(cols, self.n_times))])


def _ix(index: np.ndarray, n: int) -> np.ndarray:
    return np.flatnonzero(index) if index.dtype == bool else index.astype(np.int64)


def _align(a: LossPanel, b: LossPanel) -> tuple[LossPanel, LossPanel, int]:
    """Both panels on the time units where every seed of both has rows; returns them and the units dropped."""
    common, ia, ib = np.intersect1d(a.times, b.times, return_indices=True)
    keep = (a.weight[:, ia] > 0).all(axis=0) & (b.weight[:, ib] > 0).all(axis=0)
    dropped = a.n_times + b.n_times - 2 * int(keep.sum())
    if keep.sum() < 2:
        raise ValueError(f"the two panels share {int(keep.sum())} time unit(s) where every seed has rows; "
                         "expected at least 2 (were they scored on the same evaluation period?)")
    return a.select(times=ia[keep]), b.select(times=ib[keep]), dropped


# --------------------------------------------------------------------------- block length
def _block_size(differential: np.ndarray) -> float:
    """Mean block length for the stationary bootstrap of ``differential`` (Politis-White, at least 1)."""
    from arch.bootstrap import optimal_block_length

    if differential.size < 10 or np.ptp(differential) == 0:   # too short to estimate a dependence length
        return 1.0
    value = float(optimal_block_length(differential)["stationary"].iloc[0])
    return float(min(max(value, 1.0), len(differential))) if math.isfinite(value) else 1.0


# --------------------------------------------------------------------------- Diebold-Mariano
@dataclass(frozen=True)
class DieboldMariano:
    """Result of :func:`diebold_mariano` (``statistic`` and ``p_value`` NaN when the variance is 0)."""

    statistic: float
    p_value: float
    mean_differential: float
    long_run_variance: float
    bandwidth: float
    n_periods: int

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


def diebold_mariano(differential: Any, *, bandwidth: float | None = None) -> DieboldMariano:
    """Diebold-Mariano test of a zero mean loss differential, HAC variance, HLN small-sample correction.

    ``DM = mean(d) / sqrt(LRV / T) * sqrt((T - 1) / T)``, ``LRV`` from a Bartlett kernel
    (``gamma_0 + 2 sum_{j>=1} (1 - j / (bw + 1)) gamma_j``; bandwidth chosen automatically when
    None), two-sided p-value from Student's t with ``T - 1`` degrees of freedom.

    Examples
    --------
    >>> d = np.array([1.0, -1.0] * 20) + 0.5
    >>> r = diebold_mariano(d, bandwidth=0)
    >>> round(r.mean_differential, 3), round(r.long_run_variance, 3), r.p_value < 0.01
    (0.5, 1.0, True)
    """
    from arch.covariance.kernel import Bartlett

    d = np.asarray(differential, dtype=np.float64)
    if d.ndim != 1 or d.size < 3 or not np.isfinite(d).all():
        raise ValueError(f"differential: expected a finite 1-D series of at least 3 periods, found shape {d.shape}")
    n = d.size
    mean = float(d.mean())
    if np.ptp(d) == 0:
        return DieboldMariano(math.nan, math.nan, mean, 0.0, math.nan, n)
    kernel = Bartlett(d, bandwidth=bandwidth)
    lrv = float(np.asarray(kernel.cov.long_run).ravel()[0])
    bw = float(kernel.bandwidth)
    if not lrv > 0:
        return DieboldMariano(math.nan, math.nan, mean, lrv, bw, n)
    stat = mean / math.sqrt(lrv / n) * math.sqrt((n - 1) / n)
    p = float(2 * stats.t.sf(abs(stat), df=n - 1))
    return DieboldMariano(float(stat), p, mean, lrv, bw, n)


# --------------------------------------------------------------------------- seeds needed
#: Default chance a recommended seed count gives the pair of being decided.
POWER = 0.8
#: Largest seed count :func:`seeds_needed` searches.
MAX_SEEDS = 1000


@dataclass(frozen=True)
class SeedsNeeded:
    """Seeds per pipeline that give the pair a stated chance of being decided (:func:`seeds_needed`).

    ``n`` is None when no count up to ``MAX_SEEDS`` reaches the chance; ``reason`` says why (the
    gap is 0; the market-time part alone, seed noise removed, exceeds the gap; or the count is
    beyond the search). ``probability`` is the chance of deciding with ``n`` seeds if the true gap
    equals the measured one; ``assurance`` the same chance averaged over the pilot's own
    uncertainty about the gap (what a follow-up on the same days should expect);
    ``n_half_gap`` the count if the true gap were half the measured one.
    """

    n: int | None
    reason: str
    probability: float
    assurance: float
    power: float
    per_seed_var: float
    time_variance: float
    time_df: float
    gap: float
    n_half_gap: int | None
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


def _threshold(*, n: int, per_seed_var: float, time_variance: float, time_df: float,
               confidence: float) -> tuple[float, float] | None:
    """``(t_nu(n) sqrt(V(n)), sqrt(V(n)))``: the gap the verdict's interval must exceed with ``n`` seeds per
    pipeline, and the sd of the difference (None when ``V(n)`` is 0). ``V(n) = S / n + v_time``, ``nu(n)``
    Welch-Satterthwaite of ``(S / n, n - 1)`` and ``(v_time, nu_time)``."""
    v = per_seed_var / n + time_variance
    if not v > 0:
        return None
    nu = welch_df([(per_seed_var / n, n - 1.0), (time_variance, time_df)])
    sd = math.sqrt(v)
    return _t_quantile(0.5 + confidence / 2, nu) * sd, sd


def _t_quantile(q: float, df: float) -> float:
    """``stats.t.ppf(q, df)`` for ``0 < q < 1`` through :func:`scipy.special.stdtrit`, the function it evaluates
    (the same number; NaN for ``df <= 0`` or NaN as there), without the distribution object's argument handling:
    :func:`seeds_needed` asks for it a few hundred times a comparison.

    >>> _t_quantile(0.975, 9.0) == float(stats.t.ppf(0.975, 9.0))
    True
    """
    return float(special.stdtrit(df, q)) if df > 0 else math.nan


def _decide_probability(gap: float, n: int, per_seed_var: float, time_variance: float, time_df: float,
                        confidence: float) -> float:
    """:func:`decide_probability` without its argument checks (for the bisection of :func:`seeds_needed`);
    ``Phi`` is :func:`scipy.special.ndtr`, what ``stats.norm.cdf`` evaluates (the same number)."""
    thr = _threshold(n=n, per_seed_var=per_seed_var, time_variance=time_variance, time_df=time_df,
                     confidence=confidence)
    if thr is None:
        return 1.0 if gap != 0 else 0.0
    sd = thr[1]
    return float(special.ndtr((abs(gap) - thr[0]) / sd) + special.ndtr((-abs(gap) - thr[0]) / sd))


@validate_params({"confidence": CONFIDENCE})
def decide_probability(*, gap: float, n: int, per_seed_var: float, time_variance: float, time_df: float,
                       confidence: float) -> float:
    """Chance that ``n`` seeds per pipeline decide a true gap ``gap`` (normal approximation).

    With ``V(n) = S / n + v_time`` and ``nu(n)`` Welch-Satterthwaite of ``(S / n, n - 1)`` and
    ``(v_time, nu_time)``, the verdict decides when ``|D| > t_nu(n) sqrt(V(n))``::

        P = Phi(|gap| / sqrt(V) - t) + Phi(-|gap| / sqrt(V) - t)

    >>> round(decide_probability(gap=1.0, n=10, per_seed_var=1.0, time_variance=0.0, time_df=math.inf,
    ...                          confidence=0.95), 3)
    0.816
    """
    return _decide_probability(gap, n, per_seed_var, time_variance, time_df, confidence)


@validate_params({"confidence": CONFIDENCE})
def predictive_probability(*, gap: float, n: int, k: int, per_seed_var: float, time_variance: float,
                           time_df: float, confidence: float) -> float:
    """Chance that a follow-up with ``n`` seeds (the pilot's ``k`` plus ``n - k`` new) on the same days
    decides, averaging over the pilot's uncertainty (flat prior on the gap on these days)::

        D_n | pilot ~ N(D_k, S (n - k) / (k n))       (S: per-seed variance)

    and deciding when ``|D_n| > t_nu(n) sqrt(S / n + v_time)``.

    >>> round(predictive_probability(gap=1.0, n=10, k=10, per_seed_var=1.0, time_variance=0.0, time_df=math.inf,
    ...                              confidence=0.95), 3)      # nothing left to learn: 1 > t_9 sqrt(0.1)
    1.0
    """
    limits = _threshold(n=n, per_seed_var=per_seed_var, time_variance=time_variance, time_df=time_df,
                        confidence=confidence)
    if limits is None:
        return 1.0 if gap != 0 else 0.0
    thr = limits[0]
    spread = math.sqrt(max(per_seed_var * (n - k) / (k * n), 0.0)) if k > 0 and n > k else 0.0
    if spread == 0.0:
        return float(abs(gap) > thr)
    return float(stats.norm.sf((thr - gap) / spread) + stats.norm.cdf((-thr - gap) / spread))


#: One-sided confidence of the lower bound on the market-time part that "no number of seeds can decide it" (and the
#: sequential rule's ``undecidable`` stop) use: the part at ``v df / chi2_df(UNDECIDABLE_CONFIDENCE)``.
UNDECIDABLE_CONFIDENCE = 0.90


def time_part_low(time_variance: float, time_df: float) -> float:
    """The market-time part at its lower confidence bound ``v df / chi2_df(UNDECIDABLE_CONFIDENCE)`` (``v`` at inf df).

    >>> round(time_part_low(0.01, 30.0), 6), time_part_low(0.01, math.inf)
    (0.007452, 0.01)
    """
    if not (math.isfinite(time_df) and time_df > 0):
        return float(time_variance)
    return float(time_variance) * time_df / float(stats.chi2.ppf(UNDECIDABLE_CONFIDENCE, time_df))


@validate_params({"confidence": CONFIDENCE})
def optimistic_gap(gap: float, *, per_seed_var: float, k_pilot: int, confidence: float) -> float:
    """The gap's optimistic end: the far end of its seeds' interval, ``|gap| + t_{k-1}(1 - alpha/2) sqrt(S / k)``.

    ``k = k_pilot`` seeds per pipeline measured the gap; ``|gap|`` when ``k_pilot`` is below 2 (not
    stated: the gap taken as exact). A small gap measured on few seeds may be a larger one: one
    standard error above it still let "no number of seeds" be wrong in about a quarter of the
    5-seed pilots that 60 seeds decide (docs/pair_levels.md).

    >>> round(optimistic_gap(-0.5, per_seed_var=4.0, k_pilot=4, confidence=0.95), 4)   # 0.5 + t_3 * 1
    3.6824
    >>> optimistic_gap(0.5, per_seed_var=4.0, k_pilot=0, confidence=0.95)
    0.5
    """
    if k_pilot < 2:
        return abs(float(gap))
    t = float(stats.t.ppf(0.5 + confidence / 2, k_pilot - 1))
    return abs(float(gap)) + t * math.sqrt(max(per_seed_var, 0.0) / k_pilot)


@validate_params({"question": QUESTION})
def seeds_needed(*, gap: float, per_seed_var: float, time_variance: float = 0.0, time_df: float = math.inf,
                 question: Question = DEFAULT_QUESTION, power: float = POWER, k_pilot: int = 0,
                 unit: str = "") -> SeedsNeeded:
    """The smallest seeds per pipeline ``n`` whose chance of deciding the pair reaches ``power``.

    The chance is :func:`decide_probability` at the measured gap, with the same Student t and
    degrees of freedom as the verdict, and the seeds' part ``S / n`` shrinking with ``n`` (the seed
    x day noise included) while the market-time part ``v_time`` (seed noise removed) stays. "No
    number of seeds can decide it" is said only when the market-time part alone keeps the interval
    over the gap's optimistic end, the far end of its seeds' interval, with the time part at its
    lower confidence bound (``t_nu_time sqrt(v_low) >= |gap| + t_{k-1} sqrt(S / k_pilot)``,
    :func:`time_part_low`, :func:`optimistic_gap`): a pilot's gap is noisy, and judged at its point estimate "none"
    was wrong in over a third of the pilots where 60 seeds decide (docs/pair_levels.md).

    Parameters
    ----------
    gap : float
        The measured difference of means.
    per_seed_var : float
        ``S``: what one seed per pipeline adds to the variance of the difference.
    time_variance, time_df : float
        The market-time part of the verdict's variance and its degrees of freedom (0 and inf for
        ``target="period"``: the question's target enters through them).
    question : Question
        Its ``confidence`` is the verdict's level.
    power : float
        The chance asked for (0.8).
    k_pilot : int
        Seeds per pipeline already run (for the assurance of a follow-up and the gap's optimistic
        end; 0: not stated, the gap taken as exact).
    unit : str
        The metric's unit, for the reason text.

    Notes
    -----
    "None" is a claim that the verdict with unlimited seeds on these days stays undetermined,
    ``|D_inf| <= t_nu_time sqrt(v_time)``. It is said when both parts are bounded against it: the gap's
    end at one-sided ``alpha / 2`` (``alpha = 1 - confidence``) and the time part at one-sided
    ``1 - UNDECIDABLE_CONFIDENCE``, so (Bonferroni) a pair that unlimited seeds decide draws "none"
    with chance at most about ``alpha / 2 + 1 - UNDECIDABLE_CONFIDENCE`` (0.125 at 95%); measured
    0.26% of such 5-seed pilots. The share of "none" statements that later seeds contradict is
    another quantity: it depends on how many pairs are undecidable to begin with, and a stricter
    gap bound moves it little while "none" is said far less (12.7% +- 2.2 contradicted by 60 seeds
    at one-sided 0.025, 9.2% +- 3.1 at 0.01 with 2.6 times fewer statements; docs/pair_levels.md).

    Examples
    --------
    >>> # k = 5: t_30(0.975) sqrt(0.01 * 30 / chi2_30(0.9)) = 0.176 >= 0.05 + t_4(0.975) sqrt(0.005/5) = 0.138
    >>> seeds_needed(gap=0.05, per_seed_var=0.005, time_variance=0.01, time_df=30.0, k_pilot=5).reason[:60]
    'no number of seeds can decide it: the market-time part alone'
    >>> # 0.176 < 0.05 + t_4(0.975) sqrt(0.02 / 5) = 0.226: the gap may be larger than the time part can hide
    >>> seeds_needed(gap=0.05, per_seed_var=0.02, time_variance=0.01, time_df=30.0, k_pilot=5).reason[:28]
    'more than 1000 seeds per pip'
    >>> seeds_needed(gap=1.0, per_seed_var=4.0).n      # sqrt(n)/2 - t_{n-1} >= z_0.8 first at n = 34
    34
    >>> r = seeds_needed(gap=0.1, per_seed_var=4.0, time_variance=0.01, time_df=30.0)
    >>> r.n is None, r.reason.startswith("no number of seeds")
    (True, True)
    """
    unit_txt = f" {unit}" if unit else ""
    confidence = float(question.confidence)
    args = dict(per_seed_var=float(per_seed_var), time_variance=float(time_variance), time_df=float(time_df),
                confidence=float(confidence))

    def smallest(g: float) -> int | None:
        if g == 0 or not math.isfinite(g):
            return None
        if _decide_probability(g, MAX_SEEDS, **args) < power:
            return None
        lo, hi = 2, MAX_SEEDS           # decide_probability grows with n: bisect (the checks done once)
        while lo < hi:
            mid = (lo + hi) // 2
            if _decide_probability(g, mid, **args) >= power:
                hi = mid
            else:
                lo = mid + 1
        return lo

    g = float(gap)
    n = smallest(g)
    n_half = smallest(g / 2)
    if n is not None:
        prob = _decide_probability(g, n, **args)
        assur = predictive_probability(gap=g, n=max(n, k_pilot), k=k_pilot, **args) if k_pilot else math.nan
        reason = (f"{n} seeds per pipeline give a {prob:.0%} chance to decide a gap of {_g(abs(g))}{unit_txt}"
                  + (f" ({assur:.0%} allowing for this run's own uncertainty about the gap)" if k_pilot else "")
                  + (f"; if the true gap is half of it, {n_half} seeds" if n_half is not None
                     else "; if the true gap is half of it, no seed count suffices"))
        return SeedsNeeded(n, reason, prob, assur, power, float(per_seed_var), float(time_variance),
                           float(time_df), g, n_half, float(confidence))
    if g == 0 or not math.isfinite(g):
        reason = "no number of seeds can decide it: the measured gap is 0"
    else:
        t_time = float(stats.t.ppf(0.5 + confidence / 2, time_df)) if time_variance > 0 else 0.0
        half = t_time * math.sqrt(max(time_part_low(time_variance, time_df), 0.0))
        if half >= optimistic_gap(g, per_seed_var=float(per_seed_var), k_pilot=k_pilot, confidence=confidence):
            reason = (f"no number of seeds can decide it: the market-time part alone (seed noise removed) moves "
                      f"the gap by ±{_g(half)}{unit_txt}, more than the gap of {_g(abs(g))}{unit_txt}")
        else:
            p_max = _decide_probability(g, MAX_SEEDS, **args)
            reason = (f"more than {MAX_SEEDS} seeds per pipeline: even {MAX_SEEDS} give a {p_max:.0%} chance to "
                      f"decide a gap of {_g(abs(g))}{unit_txt}")
    return SeedsNeeded(None, reason, math.nan, math.nan, power, float(per_seed_var), float(time_variance),
                       float(time_df), g, n_half, float(confidence))


# --------------------------------------------------------------------------- the verdict
@dataclass(frozen=True)
class Verdict:
    """Result of :func:`decide` for one metric and one pair ``(a, b)``.

    Attributes
    ----------
    metric, a, b : str
    outcome : {"better", "worse", "undetermined"}
        What the interval says of ``a`` against ``b``.
    winner : str or None
        The better pipeline's name; None when undetermined.
    difference : float
        ``mean(a) - mean(b)`` in the metric's own sign (for a score where higher is better, a
        positive difference favours ``a``).
    ci_low, ci_high : float
        The interval of ``difference`` used for the verdict (paired when ``paired``).
    question : Question
        What was answered: the target (over seeds on these days, or over seeds and the market's
        future) and the interval's confidence (also :attr:`target`, :attr:`confidence`).
    paired : bool
        Seed ``i`` of ``a`` compared with seed ``i`` of ``b`` (both ran the same seeds).
    unpaired_ci, paired_ci : (float, float) or None
    pairing_narrowing : float or None
        ``1 - width(paired) / width(unpaired)``: how much pairing narrowed the interval.
    var_seeds, var_time : float
        The variance of ``difference`` from the seeds (with their day-to-day noise) and from market
        time (the common part only, seed noise removed; 0 for ``target="period"``).
    dominant_uncertainty : {"seeds", "time"}
    degrees_of_freedom : float
        Welch-Satterthwaite degrees of freedom of the interval's t quantile.
    variance : CrossedVariance
        The decomposition behind the interval (bandwidth, month blocks, drift check).
    diebold_mariano : DieboldMariano
        The classical test on the seed-averaged differential: a time-series detail, not the verdict
        (it ignores persistent seed offsets).
    seeds_needed : SeedsNeeded
    n_times, n_seeds, times_dropped : sizes
    higher_is_better : bool
    means : (float, float)
        ``mean(a)`` and ``mean(b)`` over their runs.
    days : (first, last)
        The first and last time unit (dates as ``YYYY-MM-DD``) the verdict rests on: the days a period
        verdict is about.
    """

    metric: str
    a: str
    b: str
    outcome: str
    winner: str | None
    difference: float
    ci_low: float
    ci_high: float
    question: Question
    paired: bool
    unpaired_ci: tuple[float, float]
    paired_ci: tuple[float, float] | None
    pairing_narrowing: float | None
    var_seeds: float
    var_time: float
    dominant_uncertainty: str
    degrees_of_freedom: float
    variance: CrossedVariance
    diebold_mariano: DieboldMariano
    seeds_needed: SeedsNeeded
    n_times: int
    n_seeds: tuple[int, int]
    times_dropped: int = 0
    higher_is_better: bool = False
    means: tuple[float, float] = field(default=(math.nan, math.nan))
    days: tuple[Any, Any] = field(default=(None, None))

    @property
    def determined(self) -> bool:
        return self.winner is not None

    @property
    def target(self) -> str:
        """The question's target: ``"future"`` or ``"period"``."""
        return self.question.target

    @property
    def confidence(self) -> float:
        """The question's confidence: the interval's level."""
        return float(self.question.confidence)

    @property
    def drift(self) -> bool:
        """The market-time part came from month-scale blocks (the drift check fired)."""
        return bool(self.variance.drift)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (NaN as None)."""
        out = fields_dict(self, exclude=("diebold_mariano", "seeds_needed", "variance", "question"))
        out["question"] = self.question.to_dict()
        out["variance"] = fields_dict(self.variance)
        out["diebold_mariano"] = self.diebold_mariano.to_dict()
        out["seeds_needed"] = self.seeds_needed.to_dict()
        return out


@validate_params({"orientation": _ORIENTATION, "question": QUESTION, "block_days": TRADING_DAYS})
def decide(a: LossPanel, b: LossPanel, *, names: tuple[str, str] = ("A", "B"), metric: str = "ql",
           orientation: Literal["lower", "higher"] = "lower", question: Question = DEFAULT_QUESTION,
           block_days: int = BLOCK_DAYS, pair_seeds: bool = True, unit: str = "") -> Verdict:
    """Better, worse or undetermined: the verdict on ``a`` against ``b`` (see the module docstring).

    Parameters
    ----------
    a, b : LossPanel
        The two pipelines' panels of one metric; aligned on their common time units.
    names : (str, str)
    metric : str
        Name recorded in the result.
    orientation : {"lower", "higher"}
        ``"lower"``: lower is better (losses); ``"higher"``: higher is better (IC).
    question : Question
        ``confidence``: the interval's level; ``target``: ``"period"`` (over seeds, on the
        evaluated days; the default) or ``"future"`` (over seeds and the market-time process: what
        to expect on new periods, if the drift is shorter than the horizon). The interval is
        analytic: no bootstrap replicate is drawn, so ``decide`` takes no
        :class:`~rolling_calib.core.resampling.Resampling`.
    block_days : int
        Time units per block of the month-scale (drift) estimate (21: a month of trading days).
    pair_seeds : bool
        Compare seed ``i`` with seed ``i`` when both pipelines ran the same seeds.
    unit : str
        The metric's unit, for reason texts.

    Returns
    -------
    Verdict
    """
    confidence, target = float(question.confidence), question.target
    a, b, dropped = _align(a, b)
    ma, mb = a.run_means(), b.run_means()
    d_t = np.nanmean(a.unit_means(), axis=0) - np.nanmean(b.unit_means(), axis=0)
    T = a.n_times
    cv_u = crossed_variance(a=(a.total, a.weight), b=(b.total, b.weight), target=target, block_days=block_days)
    unpaired = _interval(float(ma.mean() - mb.mean()), cv_u, confidence)
    paired = bool(pair_seeds and a.n_seeds >= 2 and set(a.seeds.tolist()) == set(b.seeds.tolist()))
    chosen, cv, paired_iv, narrowing = unpaired, cv_u, None, None
    if paired:
        order = np.argsort(b.seeds)[np.searchsorted(np.sort(b.seeds), a.seeds)]
        _, za = influence(a.total, a.weight)
        _, zb = influence(b.total[order], b.weight[order])
        d_s = ma - mb[order]
        cv = crossed_variance(d_s[:, None] + (za - zb), target=target, block_days=block_days)
        paired_iv = _interval(float(d_s.mean()), cv, confidence)
        width_u = unpaired.high - unpaired.low
        narrowing = 1.0 - (paired_iv.high - paired_iv.low) / width_u if width_u > 0 else None
        chosen = paired_iv
    outcome = _outcome((chosen.low, chosen.high), orientation)
    if math.isinf(cv.var):   # the period target with one run of a pipeline: nothing measures the seeds' variance
        needed = SeedsNeeded(None, "a verdict over seeds needs at least 2 seeds per pipeline: one run's seed "
                             "variance cannot be measured", math.nan, math.nan, POWER, math.nan, 0.0, math.inf,
                             chosen.center, None, float(question.confidence))
    else:
        needed = seeds_needed(gap=chosen.center, per_seed_var=cv.per_seed_var, time_variance=cv.var_time,
                              time_df=cv.df_time, question=question, k_pilot=min(a.n_seeds, b.n_seeds), unit=unit)
    if outcome != "undetermined" and needed.n is None:   # decided already: never "no number of seeds" beside it
        k = min(a.n_seeds, b.n_seeds)
        prob = decide_probability(gap=chosen.center, n=k, per_seed_var=cv.per_seed_var,
                                  time_variance=cv.var_time, time_df=cv.df_time, confidence=confidence)
        needed = replace(needed, n=k, probability=prob,
                         reason=f"decided with {k} seeds per pipeline (the chance to decide again with {k} at "
                                f"this gap is {prob:.0%})")
    return Verdict(
        metric=metric, a=names[0], b=names[1], outcome=outcome,
        winner={"better": names[0], "worse": names[1]}.get(outcome), difference=chosen.center,
        ci_low=chosen.low, ci_high=chosen.high, question=question, paired=paired,
        unpaired_ci=(unpaired.low, unpaired.high),
        paired_ci=None if paired_iv is None else (paired_iv.low, paired_iv.high), pairing_narrowing=narrowing,
        var_seeds=cv.var_seeds, var_time=cv.var_time,
        dominant_uncertainty="seeds" if cv.var_seeds >= cv.var_time else "time",
        degrees_of_freedom=cv.df, variance=cv, diebold_mariano=_dm_or_nan(d_t), seeds_needed=needed,
        n_times=T, n_seeds=(a.n_seeds, b.n_seeds), times_dropped=dropped,
        higher_is_better=orientation == "higher", means=(float(ma.mean()), float(mb.mean())),
        days=(time_label(a.times[0]), time_label(a.times[-1])),
    )


def time_label(value: Any) -> Any:
    """A time label as text when it is a date or timestamp (``2018-01-02``), else as a plain Python value.

    >>> time_label(np.datetime64("2018-01-02T15:30")), time_label(np.int64(3))
    ('2018-01-02', 3)
    """
    if isinstance(value, np.datetime64):
        return str(value.astype("datetime64[D]"))
    if hasattr(value, "strftime"):
        return value.strftime("%Y-%m-%d")
    return value.item() if isinstance(value, np.generic) else value


@dataclass(frozen=True)
class _Interval:
    center: float
    low: float
    high: float


def _interval(center: float, cv: CrossedVariance, confidence: float) -> _Interval:
    """``center -/+ t_nu sqrt(var)`` from the decomposition."""
    half = cv.half_width(confidence)
    return _Interval(center, center - half, center + half)


def _dm_or_nan(d_t: np.ndarray) -> DieboldMariano:
    """:func:`diebold_mariano` of the differential; all NaN when it has fewer than 3 time units."""
    if d_t.size < 3:
        return DieboldMariano(math.nan, math.nan, float(d_t.mean()), math.nan, math.nan, int(d_t.size))
    return diebold_mariano(d_t)


def _outcome(ci: tuple[float, float], orientation: str) -> str:
    """``better`` when the interval lies on a's side of 0 (below for a loss, above for a score)."""
    low_wins = orientation == "lower"
    if (ci[1] < 0) if low_wins else (ci[0] > 0):
        return "better"
    if (ci[0] > 0) if low_wins else (ci[1] < 0):
        return "worse"
    return "undetermined"


def _var1(x: np.ndarray) -> float:
    return float(np.var(x, ddof=1)) if x.size > 1 else 0.0


# --------------------------------------------------------------------------- model confidence set
@dataclass(frozen=True)
class ConfidenceSet:
    """Result of :func:`seed_averaged_confidence_set`: the configurations not distinguishable from the best."""

    included: list[str]
    excluded: list[str]
    pvalues: dict[str, float]
    confidence: float
    method: str
    block_size: float
    n_boot: int
    seed: int
    n_periods: int

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


@validate_params({"question": QUESTION, "resampling": RESAMPLING})
def seed_averaged_confidence_set(losses: Any, names: Sequence[str], *, question: Question = DEFAULT_QUESTION,
                                 resampling: Resampling = DEFAULT) -> ConfidenceSet:
    """Hansen, Lunde and Nason's model confidence set over seed-averaged per-period losses (:class:`arch.bootstrap.MCS`).

    Seed-blind: the stationary bootstrap resamples days of seed-averaged losses, so a seed's
    persistent offset looks like a real difference (with 5 identical configurations and seed
    offsets of 0.3 of a run's spread it excluded one in 59% of sweeps at a nominal 5%, issue 35).
    Kept as the baseline ``bench/racing_replay.py`` measures the seed-aware set
    (:func:`rolling_calib.core.racing.model_confidence_set`) against.

    Parameters
    ----------
    losses : array, shape (T, m)
        Per time unit, each configuration's loss (seed-averaged); lower is better.
    names : sequence of str
        The ``m`` configurations.
    question : Question
        Its ``confidence`` is ``1 - size`` of the test (the set holds the best configuration with this
        probability). The stationary bootstrap resamples market time, so the set is about the market's
        future whatever the question's ``target``.
    resampling : Resampling
        ``n_boot``, ``block_size`` and ``seed`` of the stationary bootstrap (block size, when None,
        chosen by Politis-White from the differential of each configuration to the cross-sectional
        mean). The same replicates as every other interval (the user's ``--n-boot``).

    Returns
    -------
    ConfidenceSet
        ``included`` in the order of ``names``; ``pvalues`` the MCS p-value of each.

    Examples
    --------
    >>> rng = np.random.default_rng(3)
    >>> L = rng.normal(0, 1, (400, 3)) + np.array([0.0, 0.02, 1.0])
    >>> seed_averaged_confidence_set(L, ["a", "b", "c"], resampling=Resampling(n_boot=300, seed=1)).included
    ['a', 'b']
    """
    from arch.bootstrap import MCS

    arr = np.asarray(losses, dtype=np.float64)
    names = list(names)
    if arr.ndim != 2 or arr.shape[1] != len(names) or arr.shape[0] < 3:
        raise ValueError(f"losses: expected shape (periods >= 3, {len(names)} configurations), found {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("losses: expected finite values")
    confidence, n_boot, block_size, seed = (question.confidence, resampling.n_boot, resampling.block_size,
                                            resampling.seed)
    if block_size is None:
        centred = arr - arr.mean(axis=1, keepdims=True)
        block_size = max(_block_size(centred[:, j]) for j in range(arr.shape[1]))
    mcs = MCS(arr, size=1.0 - confidence, reps=int(n_boot), block_size=int(round(block_size)), method="R",
              bootstrap="stationary", seed=np.random.default_rng(int(seed)))
    mcs.compute()
    included = set(int(i) for i in np.asarray(mcs.included).ravel())
    pv = mcs.pvalues.iloc[:, 0]
    pvalues = {names[int(i)]: float(v) for i, v in pv.items()}
    return ConfidenceSet(
        included=[n for i, n in enumerate(names) if i in included],
        excluded=[n for i, n in enumerate(names) if i not in included],
        pvalues={n: pvalues.get(n, math.nan) for n in names}, confidence=float(confidence), method="R",
        block_size=float(round(block_size)), n_boot=int(n_boot), seed=int(seed), n_periods=int(arr.shape[0]),
    )


# --------------------------------------------------------------------------- helpers
def _g(x: float, digits: int = 3) -> str:
    """``x`` with ``digits`` significant digits."""
    return "n/a" if not math.isfinite(x) else f"{x:.{digits}g}"
