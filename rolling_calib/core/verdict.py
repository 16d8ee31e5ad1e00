"""Deciding between two pipelines: better, worse or undetermined, resting on seeds *and* market time.

A comparison of two pipelines ``A`` and ``B`` under a metric (lower is better for a loss, higher
for a score such as IC) has two sources of chance (docs/method.md §5): the seeds each pipeline
happened to run with, and the sample of market time both were evaluated on. Everything here works
on a :class:`LossPanel` per pipeline: per seed ``s`` and time unit ``t`` (a trading day) the sum
of the metric over the unit's rows, ``total[s, t]``, and their number, ``weight[s, t]``. A run's
value is the row-weighted mean over its time units, and a pipeline's is the mean over its seeds::

    M_s   = sum_t total[s, t] / sum_t weight[s, t]          (one run: QL, CQL, ... of seed s)
    D     = mean_s M^A_s - mean_s M^B_s                      (difference of means; < 0: A lower)

**Interval: seeds and blocks of time.** The difference has two variance components. Market time:
the time units are resampled with a stationary bootstrap (Politis-Romano blocks of random length,
mean ``block_size``, drawn by :class:`arch.bootstrap.StationaryBootstrap`, so serial dependence
inside blocks is kept) -- the same units for both pipelines, since both were scored on the same
days -- and ``var_time`` is the variance of ``D`` over the replicates (seeds fixed). Seeds: runs
are independent draws, so the seed component is the unbiased ``var_seeds = s_A^2 / k_A + s_B^2 /
k_B`` (the sample variances of the run values ``M_s``), or, when both pipelines ran the same seeds
(*paired*: seed ``i`` of A against seed ``i`` of B, common random numbers), ``s_d^2 / k`` of the
per-seed differences ``d_s = M^A_s - M^B_s``. The interval is::

    D -/+ t_nu(1 - alpha/2) sqrt(var_seeds + var_time)

with ``nu`` the Welch-Satterthwaite degrees of freedom of the two parts (``k - 1`` or Welch's for
the seeds, the number of time blocks ``T / block_size`` minus 1 for time). A percentile bootstrap
over 5-10 seeds would be too narrow (it covered 0 in 80% of null cases at 95% in our tests): with
few seeds the t quantile matters. Each part keeps the interaction of seed and time once, so the
interval errs on the wide side. The larger part names the dominant source of uncertainty.

**Verdict.** ``better`` (A is better) when the interval lies entirely on A's side of 0,
``worse`` when it lies on B's side, ``undetermined`` otherwise.

**Diebold-Mariano.** On the seed-averaged loss differential per time unit
``d_t = mean_s L^A_{s,t} - mean_s L^B_{s,t}`` (``L = total / weight``): ``DM = mean(d) /
sqrt(LRV / T)`` with the long-run variance from a Bartlett (Newey-West) kernel
(:class:`arch.covariance.kernel.Bartlett`, automatic bandwidth), scaled by the
Harvey-Leybourne-Newbold factor ``sqrt((T - 1) / T)`` and referred to Student's t with ``T - 1``
degrees of freedom (two-sided p-value).

**Seeds needed.** With ``z`` the normal quantile of the confidence, ``S`` the seed variance of one
run's difference (``s_A^2 + s_B^2`` unpaired, the variance of the paired differences when paired)
and ``v_time`` the time-sampling variance of ``D``, the interval half-width with ``n`` seeds per
pipeline is about ``z sqrt(S / n + v_time)``; it excludes the measured gap ``|D|`` once::

    n > z^2 S / (D^2 - z^2 v_time)        (no n suffices when D^2 <= z^2 v_time)

Examples
--------
Two pipelines, 4 seeds, 60 days; A's loss is lower by 0.5 every day, seeds add noise:

>>> rng = np.random.default_rng(0)
>>> base = rng.normal(10.0, 1.0, size=60)
>>> a = LossPanel.from_arrays(seeds=range(4), total=base + rng.normal(0, 0.1, (4, 60)) - 0.5)
>>> b = LossPanel.from_arrays(seeds=range(4), total=base + rng.normal(0, 0.1, (4, 60)))
>>> v = decide(a, b, names=("A", "B"), resampling=Resampling(n_boot=500, seed=1))
>>> v.outcome, v.winner, round(v.difference, 2)
('better', 'A', -0.51)
>>> v.paired, v.dominant_uncertainty
(True, 'time')
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from scipy import stats

from rolling_calib.core.resampling import DEFAULT, RESAMPLING, Resampling, stationary_counts
from rolling_calib.core.validation import BLOCK_SIZE, CONFIDENCE, Options, validate_params
from rolling_calib.core.jsonable import fields_dict

__all__ = [
    "BLOCK_SIZE",
    "OUTCOMES",
    "ConfidenceSet",
    "DieboldMariano",
    "LossPanel",
    "SeedsNeeded",
    "Verdict",
    "decide",
    "diebold_mariano",
    "model_confidence_set",
    "seeds_needed",
    "stationary_counts",
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


# --------------------------------------------------------------------------- resampling
def _replicate_means(panel: LossPanel, unit_counts: np.ndarray) -> np.ndarray:
    """The pipeline's mean (over its seeds) on every time replicate, units weighted by ``unit_counts`` (T, B)."""
    tot = panel.total @ unit_counts              # (k, B)
    w = panel.weight @ unit_counts               # (k, B); > 0 since every unit kept has rows for every seed
    return (tot / w).mean(axis=0)


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
@dataclass(frozen=True)
class SeedsNeeded:
    """Seeds per pipeline the metric needs to decide the pair (:func:`seeds_needed`).

    ``n`` is None when no number of seeds can decide it (``reason`` says why: the gap is
    zero, or inside the time-sampling uncertainty alone).
    """

    n: int | None
    reason: str
    seed_variance: float
    time_variance: float
    gap: float
    z: float

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


@validate_params({"confidence": CONFIDENCE})
def seeds_needed(*, gap: float, seed_variance: float, time_variance: float, confidence: float,
                 unit: str = "") -> SeedsNeeded:
    """``n = ceil(z^2 S / (gap^2 - z^2 v_time))`` seeds per pipeline, or None when none suffices.

    Parameters
    ----------
    gap : float
        The measured difference of means ``D``.
    seed_variance : float
        ``S``: the variance one seed contributes to the difference (``s_A^2 + s_B^2``, or the
        variance of paired differences).
    time_variance : float
        ``v_time``: the variance of ``D`` from resampling market time alone.
    confidence : float
    unit : str
        The metric's unit, for the reason text.

    Examples
    --------
    >>> seeds_needed(gap=1.0, seed_variance=4.0, time_variance=0.0, confidence=0.95).n      # z^2 * 4 / 1 = 15.4
    16
    >>> r = seeds_needed(gap=0.1, seed_variance=4.0, time_variance=0.01, confidence=0.95)
    >>> r.n is None, r.reason.startswith("no number of seeds")
    (True, True)
    """
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    g2 = float(gap) ** 2
    zt2 = z * z * float(time_variance)
    unit_txt = f" {unit}" if unit else ""
    if g2 == 0 or not math.isfinite(g2):
        return SeedsNeeded(None, "no number of seeds can decide it: the measured gap is 0", seed_variance,
                           time_variance, gap, z)
    if g2 <= zt2:
        half = z * math.sqrt(time_variance)
        return SeedsNeeded(None, f"no number of seeds can decide it: resampling market time alone moves the gap by "
                           f"±{_g(half)}{unit_txt}, more than the gap of {_g(abs(gap))}{unit_txt}",
                           seed_variance, time_variance, gap, z)
    n = max(2, math.ceil(z * z * float(seed_variance) / (g2 - zt2)))
    return SeedsNeeded(n, f"{n} seeds per pipeline put the {confidence:.0%} interval's half-width below the gap of "
                       f"{_g(abs(gap))}{unit_txt}", seed_variance, time_variance, gap, z)


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
    paired : bool
        Seed ``i`` of ``a`` compared with seed ``i`` of ``b`` (both ran the same seeds).
    unpaired_ci, paired_ci : (float, float) or None
    pairing_narrowing : float or None
        ``1 - width(paired) / width(unpaired)``: how much pairing narrowed the interval.
    var_seeds, var_time : float
        Variance of ``difference`` from the seeds (unbiased, over runs) and from market time
        (stationary bootstrap of the time units).
    dominant_uncertainty : {"seeds", "time"}
    degrees_of_freedom : float
        Welch-Satterthwaite degrees of freedom of the interval's t quantile.
    diebold_mariano : DieboldMariano
    seeds_needed : SeedsNeeded
    confidence, n_boot, block_size, seed, n_times, n_seeds, times_dropped : settings and sizes
    higher_is_better : bool
    """

    metric: str
    a: str
    b: str
    outcome: str
    winner: str | None
    difference: float
    ci_low: float
    ci_high: float
    paired: bool
    unpaired_ci: tuple[float, float]
    paired_ci: tuple[float, float] | None
    pairing_narrowing: float | None
    var_seeds: float
    var_time: float
    dominant_uncertainty: str
    degrees_of_freedom: float
    diebold_mariano: DieboldMariano
    seeds_needed: SeedsNeeded
    confidence: float
    n_boot: int
    block_size: float
    seed: int
    n_times: int
    n_seeds: tuple[int, int]
    times_dropped: int = 0
    higher_is_better: bool = False
    means: tuple[float, float] = field(default=(math.nan, math.nan))

    @property
    def determined(self) -> bool:
        return self.winner is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (NaN as None)."""
        out = fields_dict(self, exclude=("diebold_mariano", "seeds_needed"))
        out["diebold_mariano"] = self.diebold_mariano.to_dict()
        out["seeds_needed"] = self.seeds_needed.to_dict()
        return out


def _percentile(values: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = 1.0 - confidence
    lo, hi = np.quantile(values, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


@validate_params({"orientation": _ORIENTATION, "resampling": RESAMPLING})
def decide(a: LossPanel, b: LossPanel, *, names: tuple[str, str] = ("A", "B"), metric: str = "ql",
           orientation: Literal["lower", "higher"] = "lower", resampling: Resampling = DEFAULT,
           pair_seeds: bool = True, unit: str = "") -> Verdict:
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
    resampling : Resampling
        The interval's level, the stationary-bootstrap replicates of the time units (drawn once per
        time axis by ``resampling`` and shared by every call given the same value), their mean block
        length (None: Politis-White's optimal length for the seed-averaged differential) and seed.
    pair_seeds : bool
        Compare seed ``i`` with seed ``i`` when both pipelines ran the same seeds.
    unit : str
        The metric's unit, for reason texts.

    Returns
    -------
    Verdict
    """
    a, b, dropped = _align(a, b)
    ma, mb = a.run_means(), b.run_means()
    d_t = np.nanmean(a.unit_means(), axis=0) - np.nanmean(b.unit_means(), axis=0)
    confidence = resampling.confidence
    bsize = float(resampling.block_size) if resampling.block_size is not None else _block_size(d_t)
    T = a.n_times
    unit_counts = resampling.time_counts(T, bsize).T   # (T, B), C-contiguous: BLAS is ~100x slower on the transpose
    reps = _replicate_means(a, unit_counts) - _replicate_means(b, unit_counts)
    var_time = float(np.var(reps, ddof=1))
    df_time = max(T / bsize - 1.0, 1.0)
    unpaired = _interval(float(ma.mean() - mb.mean()), *_unpaired_seed_part(ma, mb), var_time, df_time, confidence)
    paired = bool(pair_seeds and a.n_seeds >= 2 and set(a.seeds.tolist()) == set(b.seeds.tolist()))
    chosen, paired_iv, narrowing = unpaired, None, None
    if paired:
        order = np.argsort(b.seeds)[np.searchsorted(np.sort(b.seeds), a.seeds)]
        d_s = ma - mb[order]
        paired_iv = _interval(float(d_s.mean()), _var1(d_s) / d_s.size, d_s.size - 1.0, var_time, df_time, confidence)
        width_u = unpaired.high - unpaired.low
        narrowing = 1.0 - (paired_iv.high - paired_iv.low) / width_u if width_u > 0 else None
        chosen = paired_iv
    outcome = _outcome((chosen.low, chosen.high), orientation)
    var_seeds = chosen.var_seeds
    per_seed = var_seeds * a.n_seeds if paired else _var1(ma) + _var1(mb)   # what one seed per pipeline adds
    return Verdict(
        metric=metric, a=names[0], b=names[1], outcome=outcome,
        winner={"better": names[0], "worse": names[1]}.get(outcome), difference=chosen.center,
        ci_low=chosen.low, ci_high=chosen.high, paired=paired, unpaired_ci=(unpaired.low, unpaired.high),
        paired_ci=None if paired_iv is None else (paired_iv.low, paired_iv.high), pairing_narrowing=narrowing,
        var_seeds=var_seeds, var_time=var_time, dominant_uncertainty="seeds" if var_seeds >= var_time else "time",
        degrees_of_freedom=chosen.df, diebold_mariano=_dm_or_nan(d_t),
        seeds_needed=seeds_needed(gap=chosen.center, seed_variance=per_seed, time_variance=var_time,
                                  confidence=confidence, unit=unit),
        confidence=float(confidence), n_boot=int(resampling.n_boot), block_size=bsize, seed=int(resampling.seed), n_times=T,
        n_seeds=(a.n_seeds, b.n_seeds), times_dropped=dropped, higher_is_better=orientation == "higher",
        means=(float(ma.mean()), float(mb.mean())),
    )


@dataclass(frozen=True)
class _Interval:
    center: float
    low: float
    high: float
    var_seeds: float
    df: float


def _unpaired_seed_part(ma: np.ndarray, mb: np.ndarray) -> tuple[float, float]:
    """``(s_A^2 / k_A + s_B^2 / k_B, Welch's degrees of freedom)``; a side with one run contributes 0."""
    va, vb = _var1(ma) / ma.size, _var1(mb) / mb.size
    parts = [(v, n - 1.0) for v, n in ((va, ma.size), (vb, mb.size)) if v > 0]
    if not parts:
        return 0.0, math.inf
    total = sum(v for v, _ in parts)
    return total, total ** 2 / sum(v * v / df for v, df in parts)


def _interval(center: float, var_seeds: float, df_seeds: float, var_time: float, df_time: float,
              confidence: float) -> _Interval:
    """``center -/+ t_nu sqrt(var_seeds + var_time)``, ``nu`` by Welch-Satterthwaite."""
    total = var_seeds + var_time
    parts = [(v, df) for v, df in ((var_seeds, df_seeds), (var_time, df_time)) if v > 0]
    nu = total ** 2 / sum(v * v / df for v, df in parts) if parts else math.inf
    half = float(stats.t.ppf(0.5 + confidence / 2, nu)) * math.sqrt(total) if total > 0 else 0.0
    return _Interval(center, center - half, center + half, var_seeds, nu)


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
    """Result of :func:`model_confidence_set`: the configurations not distinguishable from the best."""

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


@validate_params({"resampling": RESAMPLING})
def model_confidence_set(losses: Any, names: Sequence[str], *, resampling: Resampling = DEFAULT) -> ConfidenceSet:
    """Hansen, Lunde and Nason's model confidence set over per-period losses (:class:`arch.bootstrap.MCS`).

    Parameters
    ----------
    losses : array, shape (T, m)
        Per time unit, each configuration's loss (seed-averaged); lower is better.
    names : sequence of str
        The ``m`` configurations.
    resampling : Resampling
        ``confidence`` is ``1 - size`` of the test (the set holds the best configuration with this
        probability); ``n_boot``, ``block_size`` and ``seed`` the stationary bootstrap's settings (block
        size as in :func:`decide` when None, from the differential of each configuration to the
        cross-sectional mean). The same replicates as every other interval (the user's ``--n-boot``).

    Returns
    -------
    ConfidenceSet
        ``included`` in the order of ``names``; ``pvalues`` the MCS p-value of each.

    Examples
    --------
    >>> rng = np.random.default_rng(3)
    >>> L = rng.normal(0, 1, (400, 3)) + np.array([0.0, 0.02, 1.0])
    >>> model_confidence_set(L, ["a", "b", "c"], resampling=Resampling(n_boot=300, seed=1)).included
    ['a', 'b']
    """
    from arch.bootstrap import MCS

    arr = np.asarray(losses, dtype=np.float64)
    names = list(names)
    if arr.ndim != 2 or arr.shape[1] != len(names) or arr.shape[0] < 3:
        raise ValueError(f"losses: expected shape (periods >= 3, {len(names)} configurations), found {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("losses: expected finite values")
    confidence, n_boot, block_size, seed = (resampling.confidence, resampling.n_boot, resampling.block_size,
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


