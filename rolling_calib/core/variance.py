"""The variance of a difference of pipelines over crossed seeds x time units, each part counted once.

A pair of pipelines ``A`` and ``B`` is scored per seed ``s`` and time unit ``t`` (a trading day).
With ``M_s`` a run's row-weighted mean over its units, the difference of the pipelines' means is
``D = mean_s M^A_s - mean_s M^B_s``. Its chance comes from a crossed design: the seeds (a
persistent offset per run, an offset per run and refit window, day-to-day noise of each run)
and the days (what the market did to both pipelines' difference). The generative view is::

    x_{s,t} = delta + g_t + c_s + c_{s,w(t)} + e_{s,t}

(``g``: the pipelines' common per-day difference, serially dependent and possibly drifting;
``c``: seed parts; ``e``: seed x day noise). Two questions have two answers:

``target="period"`` (the default question's) -- over seeds, on the evaluated days (the days are the population: a
fixed backtest, a competition). Given the days, the runs are independent, so::

    V_period = s_R^2 / k            (paired: R_s = M^A_s - M^B_s; unpaired: s_A^2/k_A + s_B^2/k_B)

(infinite when a pipeline has one run: its seed variance cannot be measured) with ``k - 1`` (or
Welch's) degrees of freedom: the paired t test on run means, exact for Gaussian runs. No
"sometimes pool" pre-test: pooling the runs with their day noise (``(k - 1) T`` degrees of
freedom) when they vary no more than it explains is valid only when a run's mean is nothing
but its day noise (``lambda = 1``, lambda: a run mean's variance over its day-noise part); at
``lambda > 1`` its error has a floor that no nominal level removes, which matters most where a
sequential rule tests far below 5% (measured: ``bench/pair_levels.py``, docs/pair_levels.md).

``target="future"`` -- over seeds *and* the market-time process: what to expect on new
periods, if the market's drift is shorter than the horizon the estimators below see.
``V_future = V_period + V_time`` where ``V_time = LRV_g / T`` is the long-run variance of
the *common* part ``g`` only. The seed-averaged differential ``xbar_t = mean_s x_{s,t}`` still
carries the seeds' day-to-day noise (variance ``sigma_e^2 / k`` a day), already counted in
``V_period``; it is removed with the seeds' deviations ``u_{s,t} = x_{s,t} - xbar_t``: for any
quadratic estimator ``Q`` of a long-run variance (a kernel, batch means), ``E Q(u_s) = (k-1)/k Q(noise)``
so::

    Q(g) = Q(xbar) - sum_s Q(u_s) / (k (k - 1))

Two such estimators are computed on the time-demeaned, weight-linearised series (``z_{s,t} =
T (total_{s,t} - M_s weight_{s,t}) / sum_t weight_{s,t}``, so ``mean_t z_{s,t} = 0`` and a run's
mean over resampled days moves by the mean of its ``z``):

* *short memory*: Bartlett (Newey-West) ``Omega = gamma_0 + 2 sum_{h=1..m} (1 - h/(m+1)) gamma_h``,
  ``m`` from Andrews' AR(1) plug-in rule ``m = 1.1447 (alpha T)^(1/3)``, ``alpha =
  4 rho^2 / ((1 - rho)^2 (1 + rho)^2)``, ``rho`` the lag-1 autocorrelation of ``g`` (noise removed,
  so a noisy differential does not hide it); degrees of freedom ``T / (1 + 2m/3)``;
* *months*: batch means over ``B`` contiguous blocks of ``block_days`` units (default 21, a
  month of trading days): ``V_long = (S^2_B(xbar) - sum_s S^2_B(u_s) / (k (k-1))) / B``, ``B - 1``
  degrees of freedom.

**Drift check.** A differential that drifts between regimes of months is nearly invisible to a
short-memory estimator. When the month-scale estimate exceeds the short one beyond the 95%
quantile of ``F(B - 1, nu_short)`` (``V_long / V_short``), the time part is taken from the
month-scale blocks with ``B - 1`` degrees of freedom and the result says so (``drift=True``).

Degrees of freedom: of a difference of two estimates (the time part's noise removal) and of
the two pipelines' seed parts (unpaired), Welch-Satterthwaite's
``nu = (sum v_i)^2 / sum (v_i^2 / nu_i)``; of the future target's sum ``V_seeds + V_time`` the
smaller of the two (:func:`min_df`), since Satterthwaite's there is liberal at 3-5 seeds.

Examples
--------
Six paired seeds, 120 days, a persistent seed offset and day noise; the common part is white:

>>> rng = np.random.default_rng(0)
>>> g = rng.normal(0, 1.0, 120)
>>> x = g + rng.normal(0, 0.5, (6, 1)) + rng.normal(0, 2.0, (6, 120))
>>> p = crossed_variance(x, target="period")
>>> f = crossed_variance(x, target="future")
>>> p.var_time, round(p.df, 1)
(0.0, 5.0)
>>> f.var_time > 0, f.var > p.var, f.drift
(True, True, False)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy import stats

from rolling_calib.core.validation import TARGETS

__all__ = [
    "BLOCK_DAYS",
    "TARGETS",
    "CrossedVariance",
    "andrews_bandwidth",
    "bartlett_lrv",
    "batch_means_variance",
    "crossed_variance",
    "influence",
    "min_df",
    "welch_df",
]

#: Default block of the month-scale estimate: a month of trading days.
BLOCK_DAYS = 21
#: Level of the drift check (the F test of month-scale against short-memory variance).
DRIFT_LEVEL = 0.95


# --------------------------------------------------------------------------- building blocks
def influence(total: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run means ``M_s`` and their per-unit influence ``z_{s,t}`` (time-demeaned, weight-linearised).

    ``M_s = sum_t total / sum_t weight``; ``z_{s,t} = T (total_{s,t} - M_s weight_{s,t}) / W_s``
    with ``W_s = sum_t weight_{s,t}``, so ``mean_t z_{s,t} = 0`` and, for equal weights,
    ``z_{s,t} = total_{s,t} / weight_{s,t} - M_s``.

    >>> m, z = influence(np.array([[1.0, 3.0, 8.0]]), np.array([[1.0, 1.0, 2.0]]))
    >>> m.tolist(), z.round(6).tolist()
    ([3.0], [[-1.5, 0.0, 1.5]])
    """
    total = np.asarray(total, dtype=np.float64)
    weight = np.asarray(weight, dtype=np.float64)
    w_sum = weight.sum(axis=1, keepdims=True)
    means = total.sum(axis=1, keepdims=True) / w_sum
    z = total.shape[1] * (total - means * weight) / w_sum
    return means[:, 0], z


def _autocov(x: np.ndarray, max_lag: int) -> np.ndarray:
    """``gamma_h = (1/T) sum_t x_t x_{t+h}`` for ``h = 0..max_lag`` along the last axis (x demeaned)."""
    T = x.shape[-1]
    out = np.empty(x.shape[:-1] + (max_lag + 1,))
    for h in range(max_lag + 1):
        out[..., h] = (x[..., : T - h] * x[..., h:]).sum(axis=-1) / T
    return out


def _bartlett(gammas: np.ndarray, m: int) -> np.ndarray:
    h = np.arange(1, m + 1)
    w = 1.0 - h / (m + 1.0)
    return gammas[..., 0] + 2.0 * (gammas[..., 1: m + 1] * w).sum(axis=-1)


def bartlett_lrv(x: Any, bandwidth: int) -> float:
    """Bartlett (Newey-West) long-run variance of a series, ``gamma_0 + 2 sum_h (1 - h/(m+1)) gamma_h``.

    The series is demeaned first; ``gamma_h`` divides by ``T``.

    >>> round(bartlett_lrv([1.0, -1.0] * 50, 0), 6), round(bartlett_lrv([1.0, -1.0] * 50, 1), 6)
    (1.0, 0.01)
    """
    arr = np.asarray(x, dtype=np.float64)
    arr = arr - arr.mean()
    m = int(min(max(bandwidth, 0), arr.size - 1))
    return float(_bartlett(_autocov(arr, m), m))


def andrews_bandwidth(rho: float, n: int) -> int:
    """Andrews' (1991) AR(1) plug-in bandwidth of the Bartlett kernel, ``ceil(1.1447 (alpha n)^(1/3))``.

    ``alpha = 4 rho^2 / ((1 - rho)^2 (1 + rho)^2)``; ``rho`` is clipped to [-0.97, 0.97]; at
    most ``n - 1``; 0 when ``rho`` is 0.

    >>> andrews_bandwidth(0.0, 250), andrews_bandwidth(0.5, 250), andrews_bandwidth(0.9, 250)
    (0, 9, 33)
    """
    r = float(np.clip(rho, -0.97, 0.97)) if math.isfinite(rho) else 0.0
    if r == 0.0:
        return 0
    alpha = 4 * r * r / ((1 - r) ** 2 * (1 + r) ** 2)
    return int(min(math.ceil(1.1447 * (alpha * n) ** (1 / 3)), max(n - 1, 0)))


def batch_means_variance(x: np.ndarray, n_blocks: int) -> np.ndarray:
    """Sample variance (ddof 1) of the means of ``n_blocks`` contiguous, nearly equal blocks, per row.

    >>> batch_means_variance(np.array([[1.0, 1.0, 3.0, 3.0]]), 2).tolist()
    [2.0]
    """
    arr = np.atleast_2d(np.asarray(x, dtype=np.float64))
    edges = np.linspace(0, arr.shape[-1], n_blocks + 1).round().astype(int)
    means = np.stack([arr[..., lo:hi].mean(axis=-1) for lo, hi in zip(edges[:-1], edges[1:])], axis=-1)
    return means.var(axis=-1, ddof=1)


def welch_df(parts: list[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variance estimates ``[(v_i, nu_i)]``.

    Parts with ``v_i <= 0`` are left out; ``inf`` when none remains.

    >>> round(welch_df([(1.0, 4.0), (1.0, 4.0)]), 6)
    8.0
    """
    kept = [(v, nu) for v, nu in parts if v > 0 and nu > 0]
    if not kept:
        return math.inf
    return sum(v for v, _ in kept) ** 2 / sum(v * v / nu for v, nu in kept)


# --------------------------------------------------------------------------- the decomposition
@dataclass(frozen=True)
class CrossedVariance:
    """Result of :func:`crossed_variance`: the difference's variance and its parts.

    Attributes
    ----------
    target : {"future", "period"}
    var : float
        ``var_seeds + var_time`` (``var_time`` is 0 for ``target="period"``).
    df : float
        Degrees of freedom of ``var``: ``df_seeds`` for ``"period"``; for ``"future"`` the smaller of
        ``df_seeds`` and ``df_time`` among the parts that are positive (:func:`min_df`).
    var_seeds, df_seeds : float
        ``s_R^2 / k`` (or Welch's two-sample form) and its degrees of freedom.
    var_time, df_time : float
        The common market-time part (seed noise removed); 0 and inf for ``"period"``.
    per_seed_var : float
        What one seed per pipeline adds: ``k var_seeds`` paired, ``s_A^2 + s_B^2`` unpaired.
    var_time_short, var_time_months : float
        The two time estimates (short-memory kernel; month-scale batch means; NaN when fewer
        than 3 blocks).
    bandwidth : int
        Bartlett bandwidth of the short-memory estimate (time units).
    block_days, n_blocks : int
        Month-scale block length and count.
    drift : bool
        The month-scale variance exceeded the short-memory one (the F check): the time part
        comes from the blocks.
    drift_ratio, drift_p : float
        ``var_time_months / var_time_short`` and its F-test p-value (NaN when not computed).
    noise_share : float
        Share of the seed-averaged differential's short-memory variance that was the seeds'
        own day-to-day noise (removed from the time part).
    """

    target: str
    var: float
    df: float
    var_seeds: float
    df_seeds: float
    var_time: float
    df_time: float
    per_seed_var: float
    var_time_short: float
    var_time_months: float
    bandwidth: int
    block_days: int
    n_blocks: int
    drift: bool
    drift_ratio: float
    drift_p: float
    noise_share: float

    def half_width(self, confidence: float) -> float:
        """``t_nu(1 - alpha/2) sqrt(var)`` (0 when ``var`` is 0; inf when it cannot be measured)."""
        if not self.var > 0:
            return 0.0
        if math.isinf(self.var):
            return math.inf
        return float(stats.t.ppf(0.5 + confidence / 2, self.df)) * math.sqrt(self.var)


def _seed_part(runs: list[np.ndarray]) -> tuple[float, float, float]:
    """``(var_seeds, df, per_seed_var)`` of the run means, one array per side (one when paired, two when not).

    ``s^2 / k`` per side with ``k - 1`` degrees of freedom, summed (Welch-Satterthwaite's degrees
    of freedom for two sides); ``per_seed_var`` is what one seed per side adds (``sum s^2``).

    >>> v, df, s = _seed_part([np.array([1.0, 2.0, 3.0])])
    >>> round(v, 6), df, s
    (0.333333, 2.0, 1.0)
    """
    parts = [(float(np.var(r, ddof=1)) / r.size, r.size - 1.0, float(np.var(r, ddof=1))) if r.size >= 2
             else (0.0, math.inf, 0.0) for r in runs]
    return sum(p[0] for p in parts), welch_df([(p[0], p[1]) for p in parts]), sum(p[2] for p in parts)


def _noise(groups: list[np.ndarray], q: Any) -> tuple[np.ndarray | float, float]:
    """``sum_s Q(u_s) / (k (k - 1))`` summed over the groups (sides) with at least 2 seeds, and the
    smallest ``k - 1`` (for degrees of freedom)."""
    total: Any = 0.0
    dfs = []
    for u in groups:
        k = u.shape[0]
        if k < 2:
            continue
        total = total + q(u).sum(axis=0) / (k * (k - 1))
        dfs.append(k - 1.0)
    return total, (min(dfs) if dfs else math.inf)


def crossed_variance(x: Any = None, *, target: Literal["future", "period"],
                     a: tuple[np.ndarray, np.ndarray] | None = None, b: tuple[np.ndarray, np.ndarray] | None = None,
                     block_days: int = BLOCK_DAYS) -> CrossedVariance:
    """The variance of a pair's difference of means over seeds (and market time), each part once.

    Either ``x``, a paired differential panel (seeds x time units, equal weights: ``x[s, t] =
    L^A_{s,t} - L^B_{s,t}``), or ``a`` and ``b``, each ``(total, weight)`` of one pipeline
    (seeds x time units, the same time units; paired when both have the same number of rows and
    ``paired`` order is given by the caller -- pass the difference as ``x`` to pair).
    See the module docstring for the formulas.

    Parameters
    ----------
    x : array (k, T), optional
        Paired per-seed differential per time unit.
    target : {"future", "period"}
        The question's target (:attr:`rolling_calib.core.question.Question.target`; no default here:
        the caller's question says it).
    a, b : (total, weight), optional
        Unpaired pipelines, each ``(k_p, T)`` arrays.
    block_days : int
        Block length of the month-scale estimate (time units).

    Returns
    -------
    CrossedVariance
    """
    if target not in TARGETS:
        raise ValueError(f"target: expected one of {', '.join(TARGETS)}, found {target!r}")
    if x is not None:
        xs = np.asarray(x, dtype=np.float64)
        runs = [xs.mean(axis=1)]
        z_groups = [xs - runs[0][:, None]]
        common = z_groups[0].mean(axis=0)
    else:
        if a is None or b is None:
            raise ValueError("crossed_variance: give x (paired) or both a and b (unpaired)")
        ma, za = influence(*a)
        mb, zb = influence(*b)
        z_groups = [za, zb]
        runs = [ma, mb]
        common = za.mean(axis=0) - zb.mean(axis=0)
    var_seeds, df_seeds, per_seed = _seed_part(runs)
    T = common.size
    if target == "period" and min(z.shape[0] for z in z_groups) < 2:   # one run: no seed variance to measure
        return CrossedVariance(target, math.inf, math.inf, math.inf, math.inf, 0.0, math.inf, math.nan,
                               math.nan, math.nan, 0, int(block_days), 0, False, math.nan, math.nan, math.nan)
    if target == "period" or T < 3:
        return CrossedVariance(target, var_seeds, df_seeds, var_seeds, df_seeds, 0.0, math.inf, per_seed,
                               math.nan, math.nan, 0, int(block_days), 0, False, math.nan, math.nan, math.nan)
    devs = [z - z.mean(axis=0, keepdims=True) for z in z_groups]

    # short memory: autocovariances of the common part with the seeds' noise removed
    max_lag = min(T - 1, max(1, int(T // 2)))
    g_common = _autocov(common[None, :], max_lag)[0]
    g_noise, df_noise_k = _noise(devs, lambda u: _autocov(u, max_lag))
    g = g_common - g_noise
    rho = float(g[1] / g[0]) if g[0] > 0 else 0.0
    m = min(andrews_bandwidth(rho, T), max_lag)
    q_common = float(_bartlett(g_common, m))
    q_noise = float(_bartlett(np.asarray(g_noise) if np.ndim(g_noise) else np.zeros(max_lag + 1), m))
    nu_q = T / (1.0 + 2.0 * m / 3.0)
    v_short = max(q_common - q_noise, 0.0) / T
    df_short = _difference_df(q_common, nu_q, q_noise, nu_q * df_noise_k)
    noise_share = q_noise / q_common if q_common > 0 else math.nan

    # months: batch means of the common part, the seeds' noise removed the same way
    n_blocks = int(T // max(int(block_days), 1))
    v_long, df_long, ratio, p_drift, drift = math.nan, math.nan, math.nan, math.nan, False
    if n_blocks >= 3:
        bm_common = float(batch_means_variance(common[None, :], n_blocks)[0])
        bm_noise, _ = _noise(devs, lambda u: batch_means_variance(u, n_blocks))
        v_long = max(bm_common - float(bm_noise), 0.0) / n_blocks
        df_long = n_blocks - 1.0
        if v_short > 0:
            ratio = v_long / v_short
            p_drift = float(stats.f.sf(ratio, df_long, max(df_short, 1.0)))
            drift = bool(p_drift < 1.0 - DRIFT_LEVEL)
        elif v_long > 0:
            ratio, p_drift, drift = math.inf, 0.0, True
    var_time, df_time = (v_long, df_long) if drift else (v_short, df_short)
    var = var_seeds + var_time
    df = min_df([(var_seeds, df_seeds), (var_time, df_time)])
    return CrossedVariance(target, var, df, var_seeds, df_seeds, var_time, df_time, per_seed, v_short,
                           v_long, m, int(block_days), n_blocks, drift, ratio, p_drift, noise_share)


def min_df(parts: list[tuple[float, float]]) -> float:
    """The smallest degrees of freedom among the parts with a positive variance (inf when none has one).

    The sum ``v_1 + v_2`` of independent variance estimates is referred to a t with
    ``min(nu_1, nu_2)`` degrees of freedom, not Welch-Satterthwaite's
    ``(v_1 + v_2)^2 / (v_1^2/nu_1 + v_2^2/nu_2)``: Satterthwaite's weights are the noisy estimates
    themselves, so when the seed part (``k - 1 = 2`` degrees of freedom at 3 seeds) is low by chance
    it gives the t the time part's many degrees of freedom just when the interval is too short
    (liberal when persistent seed offsets dominate: measured in docs/pair_levels.md). For scaled
    chi-square parts the minimum is conservative whatever their true ratio (the Hsu-Scheffe rule
    for the Behrens-Fisher problem; Mickey and Brown 1966), at the price of power when the part
    with fewer degrees of freedom is the small one.

    >>> min_df([(1.0, 2.0), (0.5, 40.0)]), min_df([(0.0, 2.0), (0.5, 40.0)]), min_df([(0.0, 2.0)])
    (2.0, 40.0, inf)
    """
    dfs = [float(nu) for v, nu in parts if v > 0]
    return min(dfs) if dfs else math.inf


def _difference_df(v1: float, nu1: float, v2: float, nu2: float) -> float:
    """Degrees of freedom of ``v1 - v2`` (Satterthwaite), at least 1."""
    diff = v1 - v2
    if not diff > 0:
        return 1.0
    denom = v1 * v1 / nu1 + (v2 * v2 / nu2 if nu2 > 0 and math.isfinite(nu2) else 0.0)
    return max(diff * diff / denom, 1.0) if denom > 0 else math.inf
