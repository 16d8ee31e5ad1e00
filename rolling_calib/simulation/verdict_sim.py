"""How far can a verdict be trusted on data like yours? Simulated loss panels and measured error rates.

A generative model of two pipelines' per-day loss panels (:class:`PanelModel`), a simulator
(:func:`simulate_pair`), a method-of-moments estimator of the model from two real panels
(:func:`estimate_model`), the baseline intervals a verdict is compared with, and the harness that
measures false decisions, coverage and power of :func:`rolling_calib.core.verdict.decide` beside
them (:func:`calibrate`), A/A splits of a real panel (:func:`aa_splits`) and a check that
``seeds_needed`` keeps its word (:func:`check_seeds_needed`). ``bench/verdict_calibration.py`` is
the command line.

**The model.** Pipeline ``P`` in {A, B}, seed ``s``, trading day ``t``, window ``j(t) = t //
window_days`` (the refit step)::

    L^P_{s,t} = level + m_t + (+/-) c_t / 2 + delta [P = A] + u^P_s + w^P_{s,j(t)} + e^P_{s,t}

* ``m_t ~ N(0, market_sd^2)``: the market effect, common to both pipelines and every seed; it is in
  each pipeline's losses and cancels in the paired differential;
* ``u^P_s ~ N(0, seed_sd^2)``: a persistent per-seed offset (per pipeline);
* ``w^P_{s,j} ~ N(0, window_sd^2)``: a seed x window offset (a refit's luck, constant over its window);
* ``e^P_{s,t} ~ N(0, noise_sd^2)``: seed x day noise;
* ``c_t = g_t + r_t``: the differential's common per-day part (``+c_t/2`` in A, ``-c_t/2`` in B).
  ``g_t`` is the pipelines' daily interaction, a stationary AR(1) with marginal sd
  ``interaction_sd`` and coefficient ``interaction_phi`` (0: independent days); ``r_t`` is the
  drift: regimes that switch on each day with probability ``1 / regime_days`` (Markov switching,
  so regime lengths are geometric with mean ``regime_days``), the level drawn afresh per regime
  from ``N(0, sigma_r^2)``. Its autocorrelation is ``(1 - 1/regime_days)^h``, so its long-run
  variance (``T`` times the variance of a mean over ``T`` days, for large ``T``) is
  ``sigma_r^2 (2 regime_days - 1)``. **``drift_ratio``** is that long-run variance divided by the
  daily interaction's variance ``interaction_sd^2``::

      sigma_r^2 = drift_ratio * interaction_sd^2 / (2 regime_days - 1)

  so ``drift_ratio = 4`` means the regimes add four times as much to the variance of a long mean
  as the daily interaction itself does (with ``interaction_phi = 0``).
* **Pairing.** Seed ``i`` of A is compared with seed ``i`` of B. With ``crn_* = 0`` they share
  nothing else; with ``crn_seed``, ``crn_window``, ``crn_noise`` ``> 0`` (common random numbers:
  same seed, same initialisation or data order) seed ``i``'s offsets ``u``, window offsets ``w``
  and day noise ``e`` in A and B have those correlations (real stores differ by part: the demo's
  minute QL has about 0.97 for the window offsets and 0.6 for the day noise).

**Truths.** ``future``: ``delta`` (the expected difference over seeds and the market-time process);
``period``: ``delta + mean_t c_t`` (the expected difference over seeds on the simulated days).

**Standard error of an effect.** :func:`estimator_sd`: the sd of ``D = mean_s(run mean of A) -
mean_s(run mean of B)`` under the target, analytically from the model: ``2 (1 - rho) v_run / k``,
with ``2 (1 - rho) v_run = 2 [(1 - crn_seed) seed_sd^2 + (1 - crn_window) window_sd^2 sum_j (L_j / T)^2
+ (1 - crn_noise) noise_sd^2 / T]`` for ``period`` (``L_j`` the windows' lengths), plus
the variance of ``mean_t c_t`` (AR(1) and regime parts) for ``future``.

Examples
--------
>>> m = PanelModel(seed_sd=1.0, noise_sd=2.0, interaction_sd=0.5)
>>> a, b, truth = simulate_pair(m, n_seeds=4, n_days=30, delta=0.2, rng=np.random.default_rng(0))
>>> a.total.shape, truth["future"]
((4, 30), 0.2)
>>> round(estimator_sd(m, n_seeds=4, n_days=30, target="period"), 4)    # sqrt(2 (1 + 4/30) / 4)
0.7528
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from scipy import signal, stats

from rolling_calib.core.validation import CONFIDENCE, SEED, TARGETS, Interval, Options, validate_params
from rolling_calib.core.jsonable import fields_dict
from rolling_calib.core.question import DEFAULT_QUESTION, QUESTION, Question
from rolling_calib.core.resampling import RESAMPLING, Resampling
from rolling_calib.core.verdict import LossPanel, decide, diebold_mariano

__all__ = [
    "METHODS",
    "TARGETS",
    "AASplits",
    "Cell",
    "PanelModel",
    "SeedsNeededCheck",
    "aa_splits",
    "calibrate",
    "check_seeds_needed",
    "dm_interval",
    "estimate_model",
    "estimator_sd",
    "paired_t_interval",
    "seed_bootstrap_interval",
    "simulate_pair",
    "welch_interval",
]

#: The verdict's two questions (see :func:`rolling_calib.core.verdict.decide`).
#: Methods measured by :func:`calibrate`, in table order.
METHODS = ("decide", "paired_t", "welch_t", "dm", "seed_bootstrap")
_TARGET = Options(*TARGETS)
_POS_INT = Interval(int, 1, None)
_SEED_BOOT = Resampling(n_boot=1000)   # the seed-bootstrap baseline's replicates (fast enough for the harness)


# --------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class PanelModel:
    """Variance components of a pair's per-day loss panels (the module docstring defines each).

    Attributes
    ----------
    level : float
        Mean loss of B (A adds ``delta``).
    market_sd : float
        Market effect per day, common to both pipelines and all seeds.
    seed_sd : float
        Persistent per-seed offset, per pipeline.
    window_sd : float
        Seed x window offset; ``window_days`` is the window length (the refit step) in days.
    window_days : int
    noise_sd : float
        Seed x day noise.
    interaction_sd : float
        Marginal sd of the pipelines' daily interaction (the differential's common per-day part).
    interaction_phi : float
        Its AR(1) coefficient, in (-1, 1).
    regime_days : float or None
        Mean regime length of the drift (None: no drift).
    drift_ratio : float
        Long-run variance of the regime component over ``interaction_sd^2`` (0: no drift).
    crn_seed, crn_window, crn_noise : float
        Correlation in [0, 1) of seed ``i``'s offset, window offsets and day noise in A and B
        (common random numbers).
    """

    level: float = 0.0
    market_sd: float = 0.0
    seed_sd: float = 0.0
    window_sd: float = 0.0
    window_days: int = 21
    noise_sd: float = 1.0
    interaction_sd: float = 0.0
    interaction_phi: float = 0.0
    regime_days: float | None = None
    drift_ratio: float = 0.0
    crn_seed: float = 0.0
    crn_window: float = 0.0
    crn_noise: float = 0.0

    def __post_init__(self) -> None:
        for name in ("market_sd", "seed_sd", "window_sd", "noise_sd", "interaction_sd", "drift_ratio"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: expected a finite number >= 0, found {value!r}")
        if not (isinstance(self.window_days, (int, np.integer)) and self.window_days >= 1):
            raise ValueError(f"window_days: expected an integer >= 1, found {self.window_days!r}")
        if not -1 < self.interaction_phi < 1:
            raise ValueError(f"interaction_phi: expected a number in (-1, 1), found {self.interaction_phi!r}")
        if self.regime_days is not None and not self.regime_days > 1:
            raise ValueError(f"regime_days: expected None or a number > 1, found {self.regime_days!r}")
        for name in ("crn_seed", "crn_window", "crn_noise"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 <= value < 1):
                raise ValueError(f"{name}: expected a number in [0, 1), found {value!r}")

    @property
    def regime_sd(self) -> float:
        """``sigma_r``: sd of a regime's level (0 without drift)."""
        if self.regime_days is None or self.drift_ratio == 0:
            return 0.0
        return math.sqrt(self.drift_ratio * self.interaction_sd ** 2 / (2 * self.regime_days - 1))

    def with_drift(self, regime_days: float | None, drift_ratio: float) -> PanelModel:
        """The same model with another drift (``regime_days=None``: none)."""
        return replace(self, regime_days=regime_days, drift_ratio=float(drift_ratio) if regime_days else 0.0)

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], *, where: str = "model") -> PanelModel:
        """A model from a mapping of its fields (a YAML file's); unknown keys are refused."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{where}: unknown key '{unknown[0]}' (allowed: {', '.join(sorted(known))})")
        return cls(**values)


# --------------------------------------------------------------------------- simulation
def _window_lengths(n_days: int, window_days: int) -> np.ndarray:
    n_win = -(-n_days // window_days)
    return np.array([min(window_days, n_days - j * window_days) for j in range(n_win)], dtype=np.float64)


def _mean_var(n_days: int, phi: float) -> float:
    """Variance of the mean of ``n_days`` of a unit-variance series with autocorrelation ``phi^h``."""
    if phi == 0:
        return 1.0 / n_days
    h = np.arange(1, n_days)
    return float((n_days + 2 * np.sum((n_days - h) * phi ** h)) / n_days ** 2)


@validate_params({"n_seeds": _POS_INT, "n_days": _POS_INT, "target": _TARGET})
def estimator_sd(model: PanelModel, *, n_seeds: int, n_days: int, target: str = DEFAULT_QUESTION.target) -> float:
    """The sd of the difference of means ``D`` under ``target`` (module docstring), from the model.

    >>> m = PanelModel(seed_sd=0.0, noise_sd=0.0, interaction_sd=1.0)
    >>> estimator_sd(m, n_seeds=3, n_days=100), round(estimator_sd(m, n_seeds=3, n_days=100, target="future"), 3)
    (0.0, 0.1)
    """
    lengths = _window_lengths(n_days, model.window_days)
    v_run = (1.0 - model.crn_seed) * model.seed_sd ** 2 \
        + (1.0 - model.crn_window) * model.window_sd ** 2 * float(np.sum((lengths / n_days) ** 2)) \
        + (1.0 - model.crn_noise) * model.noise_sd ** 2 / n_days
    var = 2.0 * v_run / n_seeds
    if target == "future":
        var += model.interaction_sd ** 2 * _mean_var(n_days, model.interaction_phi)
        if model.regime_sd > 0:
            var += model.regime_sd ** 2 * _mean_var(n_days, 1.0 - 1.0 / float(model.regime_days))
    return math.sqrt(var)


def _ar1(rng: np.random.Generator, shape: tuple[int, int], sd: float, phi: float) -> np.ndarray:
    """Stationary AR(1) paths along the last axis, marginal sd ``sd``."""
    x = rng.normal(0.0, sd, shape)
    if phi == 0 or sd == 0:
        return x
    x[:, 1:] *= math.sqrt(1.0 - phi * phi)
    return signal.lfilter([1.0], [1.0, -phi], x, axis=-1)


def _regime_paths(rng: np.random.Generator, shape: tuple[int, int], sd: float,
                  regime_days: float) -> tuple[np.ndarray, np.ndarray]:
    """Markov-switching levels and each day's regime (0, 1, ... along the last axis): switch with probability
    ``1/regime_days`` per day, new level ``N(0, sd^2)``."""
    switch = rng.random(shape) < 1.0 / regime_days
    switch[:, 0] = True
    segment = np.cumsum(switch, axis=1) - 1
    levels = rng.normal(0.0, sd, shape)
    return np.take_along_axis(levels, segment, axis=1), segment


def _regimes(rng: np.random.Generator, shape: tuple[int, int], sd: float, regime_days: float) -> np.ndarray:
    """Markov-switching levels (:func:`_regime_paths`)."""
    return _regime_paths(rng, shape, sd, regime_days)[0]


def _paired(rng: np.random.Generator, shape: tuple[int, ...], sd: float, rho: float) -> tuple[np.ndarray, np.ndarray]:
    """A's and B's draws of one per-seed part, ``N(0, sd^2)`` each, correlation ``rho``."""
    if sd == 0:
        return np.zeros(shape), np.zeros(shape)
    xa, xb = rng.normal(0.0, sd, shape), rng.normal(0.0, sd, shape)
    if rho > 0:
        shared = rng.normal(0.0, sd, shape)
        r, s = math.sqrt(rho), math.sqrt(1.0 - rho)
        xa, xb = r * shared + s * xa, r * shared + s * xb
    return xa, xb


def _per_seed(rng: np.random.Generator, model: PanelModel, n_rep: int, n_seeds: int,
              n_days: int) -> tuple[np.ndarray, np.ndarray]:
    """A's and B's per-seed parts ``u + w + e``, each of shape ``(n_rep, n_seeds, n_days)``."""
    ea, eb = _paired(rng, (n_rep, n_seeds, n_days), model.noise_sd, model.crn_noise)
    ua, ub = _paired(rng, (n_rep, n_seeds, 1), model.seed_sd, model.crn_seed)
    n_win = -(-n_days // model.window_days)
    wa, wb = _paired(rng, (n_rep, n_seeds, n_win), model.window_sd, model.crn_window)
    day_window = np.arange(n_days) // model.window_days
    return ea + ua + wa[:, :, day_window], eb + ub + wb[:, :, day_window]


def _simulate(model: PanelModel, n_rep: int, n_seeds: int, n_days: int,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n_rep`` replicates without ``delta``: A's and B's losses ``(n_rep, k, T)`` and ``c_t`` ``(n_rep, T)``."""
    shape = (n_rep, n_days)
    market = model.level + (rng.normal(0.0, model.market_sd, shape) if model.market_sd > 0 else np.zeros(shape))
    common = _ar1(rng, shape, model.interaction_sd, model.interaction_phi)
    if model.regime_sd > 0:
        common = common + _regimes(rng, shape, model.regime_sd, float(model.regime_days))
    own_a, own_b = _per_seed(rng, model, n_rep, n_seeds, n_days)
    a = market[:, None, :] + common[:, None, :] / 2 + own_a
    b = market[:, None, :] - common[:, None, :] / 2 + own_b
    return a, b, common


@validate_params({"n_seeds": _POS_INT, "n_days": Interval(int, 2, None)})
def simulate_pair(model: PanelModel, *, n_seeds: int, n_days: int, delta: float,
                  rng: np.random.Generator) -> tuple[LossPanel, LossPanel, dict[str, float]]:
    """One simulated pair: A's and B's panels (seeds ``0..k-1`` in both: paired) and both truths.

    Returns
    -------
    a, b : LossPanel
        ``n_seeds`` x ``n_days`` losses (weight 1 per day).
    truth : dict
        ``{"future": delta, "period": delta + mean_t c_t}``.

    >>> a, b, t = simulate_pair(PanelModel(interaction_sd=1.0, noise_sd=0.0), n_seeds=2, n_days=50, delta=0.0,
    ...                         rng=np.random.default_rng(1))
    >>> bool(np.isclose(t["period"], (a.total - b.total).mean()))    # no seed noise: the realized mean
    True
    """
    a, b, common = _simulate(model, 1, n_seeds, n_days, rng)
    seeds = np.arange(n_seeds)
    truth = {"future": float(delta), "period": float(delta + common[0].mean())}
    return (LossPanel.from_arrays(seeds=seeds, total=a[0] + delta), LossPanel.from_arrays(seeds=seeds, total=b[0]),
            truth)


# --------------------------------------------------------------------------- estimation
@dataclass(frozen=True)
class _Anova:
    """Nested two-way random-effects estimates of one ``k x T`` panel: seed, seed x window, seed x day."""

    seed_var: float
    window_var: float
    noise_var: float
    ms_seed: float       # T * variance of the run means (what the seed part of a verdict sees)
    col_means: np.ndarray


def _anova(y: np.ndarray, window_days: int) -> _Anova:
    k, T = y.shape
    lengths = _window_lengths(T, window_days)
    J = lengths.size
    col = y.mean(axis=0)
    row = y.mean(axis=1)
    grand = float(y.mean())
    resid = y - row[:, None] - col[None, :] + grand
    win = np.arange(T) // window_days
    sums = np.zeros((k, J))
    np.add.at(sums.T, win, resid.T)
    wmeans = sums / lengths
    ss_within = float(((resid - wmeans[:, win]) ** 2).sum())
    ms_within = ss_within / max((k - 1) * (T - J), 1)
    ms_sw = float((lengths * wmeans ** 2).sum()) / max((k - 1) * (J - 1), 1) if J > 1 else ms_within
    n0 = (T - float((lengths ** 2).sum()) / T) / (J - 1) if J > 1 else 1.0
    window_var = max((ms_sw - ms_within) / n0, 0.0) if J > 1 else 0.0
    ms_seed = T * float(np.var(row, ddof=1)) if k > 1 else 0.0
    coef_w = float((lengths ** 2).sum()) / T
    seed_var = max((ms_seed - ms_within - coef_w * window_var) / T, 0.0)
    return _Anova(seed_var, window_var, ms_within, ms_seed, col)


def _aligned_means(a: LossPanel, b: LossPanel) -> tuple[np.ndarray, np.ndarray, bool]:
    """Per-day losses of both on their common days, and whether they are paired (same seeds)."""
    common, ia, ib = np.intersect1d(a.times, b.times, return_indices=True)
    ya, yb = a.unit_means()[:, ia], b.unit_means()[:, ib]
    keep = np.isfinite(ya).all(axis=0) & np.isfinite(yb).all(axis=0)
    ya, yb = ya[:, keep], yb[:, keep]
    if ya.shape[1] < 4:
        raise ValueError(f"the two panels share {ya.shape[1]} days where every seed has rows; expected at least 4")
    if a.n_seeds < 2 or b.n_seeds < 2:
        raise ValueError(f"seeds: expected at least 2 seeds per pipeline, found {a.n_seeds} and {b.n_seeds}")
    paired = a.n_seeds == b.n_seeds and set(a.seeds.tolist()) == set(b.seeds.tolist())
    if paired:
        yb = yb[np.argsort(b.seeds)[np.searchsorted(np.sort(b.seeds), a.seeds)]]
    return ya, yb, paired


def _acov1(x: np.ndarray) -> float:
    x = x - x.mean()
    return float(np.dot(x[1:], x[:-1]) / x.size)


@validate_params({"window_days": _POS_INT})
def estimate_model(a: LossPanel, b: LossPanel, *, window_days: int) -> PanelModel:
    """The :class:`PanelModel` of a real pair, by the method of moments (no drift: ``regime_days=None``).

    Per pipeline a nested two-way random-effects ANOVA (seeds crossed with days, days nested in
    windows of ``window_days``) gives the seed, seed x window and seed x day variances (their mean
    over the two pipelines is the model's). When both ran the same seeds (paired), the same ANOVA of
    the per-seed differential ``A - B`` gives the differential's parts, and each part's correlation
    ``crn_* = 1 - var_D / (var_A + var_B)`` (clipped to [0, 0.95]; 0 where the part is 0). The daily
    interaction's variance is the variance of the seed-averaged differential over days less its
    seed-related part; its AR(1) coefficient the lag-1 autocovariance, less the part the seed x
    window offsets put there, over that variance. The market effect's variance is that of the two
    pipelines' mean loss over days less its seed-related part. Slow drift is not separated from the
    interaction (one period of one market cannot tell them apart); the harness adds it by hand.

    Examples
    --------
    >>> truth = PanelModel(seed_sd=1.0, noise_sd=2.0, interaction_sd=0.5, window_days=10)
    >>> a, b, _ = simulate_pair(truth, n_seeds=40, n_days=200, delta=0.0, rng=np.random.default_rng(0))
    >>> m = estimate_model(a, b, window_days=10)
    >>> round(m.seed_sd, 1), round(m.noise_sd, 1), round(m.interaction_sd, 1)   # 40 seeds: seed_sd within ~11%
    (0.9, 2.0, 0.5)
    """
    ya, yb, paired = _aligned_means(a, b)
    ka, kb = ya.shape[0], yb.shape[0]
    T = ya.shape[1]
    fa, fb = _anova(ya, window_days), _anova(yb, window_days)
    seed_var = (fa.seed_var + fb.seed_var) / 2
    window_var = (fa.window_var + fb.window_var) / 2
    noise_var = (fa.noise_var + fb.noise_var) / 2
    crn = {"seed": 0.0, "window": 0.0, "noise": 0.0}
    dbar = fa.col_means - fb.col_means
    if paired:
        fd = _anova(ya - yb, window_days)
        for part in crn:
            both = getattr(fa, f"{part}_var") + getattr(fb, f"{part}_var")
            if both > 0:
                crn[part] = float(min(max(1.0 - getattr(fd, f"{part}_var") / both, 0.0), 0.95))
        noise_d, window_d = fd.noise_var / ka, fd.window_var / ka
    else:
        noise_d = noise_var * (1 / ka + 1 / kb)
        window_d = window_var * (1 / ka + 1 / kb)
    lengths = _window_lengths(T, window_days)
    inter_var = max(float(np.var(dbar, ddof=1)) - noise_d - window_d, 0.0)
    same_window = (T - lengths.size) / (T - 1)
    phi = 0.0
    if inter_var > 0:
        phi = float(np.clip((_acov1(dbar) - window_d * same_window) / inter_var, -0.95, 0.95))
    mean_loss = (fa.col_means + fb.col_means) / 2
    k_eff = ka if paired else 2.0 / (1 / ka + 1 / kb)
    seed_part = noise_var * (1 + crn["noise"]) + window_var * (1 + crn["window"])
    market_var = max(float(np.var(mean_loss, ddof=1)) - seed_part / (2 * k_eff), 0.0)
    return PanelModel(level=float(yb.mean()), market_sd=math.sqrt(market_var), seed_sd=math.sqrt(seed_var),
                      window_sd=math.sqrt(window_var), window_days=int(window_days), noise_sd=math.sqrt(noise_var),
                      interaction_sd=math.sqrt(inter_var), interaction_phi=phi,
                      crn_seed=crn["seed"], crn_window=crn["window"], crn_noise=crn["noise"])


# --------------------------------------------------------------------------- baselines
def _t_interval(center: np.ndarray, se: np.ndarray, df: Any, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    q = stats.t.ppf(0.5 + confidence / 2, df)
    return center - q * se, center + q * se


@validate_params({"confidence": CONFIDENCE})
def paired_t_interval(ma: Any, mb: Any, *, confidence: float = DEFAULT_QUESTION.confidence
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Paired t interval of ``mean(ma - mb)`` over seeds (last axis: seeds; ``k - 1`` degrees of freedom).

    >>> lo, hi = paired_t_interval([1.0, 2.0, 3.0], [0.0, 0.0, 1.0])
    >>> round(float(lo), 3), round(float(hi), 3)      # 1.667 -/+ 4.303 * 0.333
    (0.232, 3.101)
    """
    d = np.asarray(ma, dtype=np.float64) - np.asarray(mb, dtype=np.float64)
    k = d.shape[-1]
    return _t_interval(d.mean(axis=-1), d.std(axis=-1, ddof=1) / math.sqrt(k), k - 1, confidence)


@validate_params({"confidence": CONFIDENCE})
def welch_interval(ma: Any, mb: Any, *, confidence: float = DEFAULT_QUESTION.confidence
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Welch's t interval of ``mean(ma) - mean(mb)`` (independent seeds; last axis: seeds).

    >>> lo, hi = welch_interval([1.0, 2.0, 3.0], [0.0, 1.0, 2.0])
    >>> round(float(lo), 3), round(float(hi), 3)
    (-1.267, 3.267)
    """
    ma, mb = np.asarray(ma, dtype=np.float64), np.asarray(mb, dtype=np.float64)
    ka, kb = ma.shape[-1], mb.shape[-1]
    va, vb = ma.var(axis=-1, ddof=1) / ka, mb.var(axis=-1, ddof=1) / kb
    se2 = va + vb
    with np.errstate(invalid="ignore", divide="ignore"):
        df = np.where(se2 > 0, se2 ** 2 / (va ** 2 / (ka - 1) + vb ** 2 / (kb - 1)), np.inf)
    return _t_interval(ma.mean(axis=-1) - mb.mean(axis=-1), np.sqrt(se2), df, confidence)


@validate_params({"confidence": CONFIDENCE})
def dm_interval(differential: Any, *, confidence: float = DEFAULT_QUESTION.confidence) -> tuple[float, float]:
    """Diebold-Mariano's interval of the mean daily differential: ``mean -/+ t_{T-1} sqrt(LRV / T)``.

    ``LRV`` from :func:`rolling_calib.core.verdict.diebold_mariano` (Bartlett kernel, automatic bandwidth).

    >>> lo, hi = dm_interval(np.random.default_rng(0).normal(0.5, 1.0, 400))
    >>> round(lo, 2), round(hi, 2)
    (0.37, 0.56)
    """
    d = np.asarray(differential, dtype=np.float64)
    r = diebold_mariano(d)
    half = float(stats.t.ppf(0.5 + confidence / 2, d.size - 1)) * math.sqrt(max(r.long_run_variance, 0.0) / d.size)
    return r.mean_differential - half, r.mean_differential + half


@validate_params({"question": QUESTION, "resampling": RESAMPLING})
def seed_bootstrap_interval(ma: Any, mb: Any, *, question: Question = DEFAULT_QUESTION,
                            resampling: Resampling = _SEED_BOOT, rng: np.random.Generator,
                            paired: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """rliable-style percentile bootstrap over seeds of ``mean(ma) - mean(mb)`` (days fixed; last axis: seeds).

    Paired: the per-seed differences are resampled; unpaired: each pipeline's seeds independently.
    ``question``: its ``confidence`` is the interval's level; ``resampling``: its ``n_boot`` (the
    baseline's default: 1000 replicates; the draws come from ``rng``).

    >>> lo, hi = seed_bootstrap_interval([1.0, 2.0, 3.0, 4.0], [0.0] * 4, rng=np.random.default_rng(0))
    >>> 1.0 <= float(lo) < 2.5 < float(hi) <= 4.0
    True
    """
    ma, mb = np.asarray(ma, dtype=np.float64), np.asarray(mb, dtype=np.float64)
    alpha, n_boot = 1.0 - question.confidence, resampling.n_boot
    if paired:
        d = ma - mb
        idx = rng.integers(0, d.shape[-1], (n_boot, d.shape[-1]))
        reps = d[..., idx].mean(axis=-1)
    else:
        ia = rng.integers(0, ma.shape[-1], (n_boot, ma.shape[-1]))
        ib = rng.integers(0, mb.shape[-1], (n_boot, mb.shape[-1]))
        reps = ma[..., ia].mean(axis=-1) - mb[..., ib].mean(axis=-1)
    lo, hi = np.quantile(reps, [alpha / 2, 1 - alpha / 2], axis=-1)
    return lo, hi


# --------------------------------------------------------------------------- the verdict
def _verdict(a: LossPanel, b: LossPanel, question: Question, orientation: str = "lower") -> Any:
    """:func:`~rolling_calib.core.verdict.decide` on the pair for ``question``, at its defaults otherwise."""
    return decide(a, b, orientation=orientation, question=question)


# --------------------------------------------------------------------------- calibration
@dataclass(frozen=True)
class Cell:
    """One cell of the calibration table: seeds per pipeline, days, and the drift (None: the model's own)."""

    n_seeds: int
    n_days: int
    regime_days: float | None = None
    drift_ratio: float = 0.0

    @property
    def drift(self) -> str:
        return "none" if not self.regime_days else f"{self.regime_days:g}d x{self.drift_ratio:g}"


def _rate(hits: np.ndarray) -> tuple[float, float]:
    n = hits.size
    p = float(hits.mean()) if n else math.nan
    return p, math.sqrt(p * (1 - p) / n) if n else math.nan


def _method_intervals(a: np.ndarray, b: np.ndarray, *, confidence: float,
                      rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The baselines' intervals per replicate (shift-invariant: computed once, then moved with the effect)."""
    ma, mb = a.mean(axis=2), b.mean(axis=2)
    d_t = a.mean(axis=1) - b.mean(axis=1)
    dm = np.array([dm_interval(d, confidence=confidence) for d in d_t])
    return {
        "paired_t": paired_t_interval(ma, mb, confidence=confidence),
        "welch_t": welch_interval(ma, mb, confidence=confidence),
        "dm": (dm[:, 0], dm[:, 1]),
        "seed_bootstrap": seed_bootstrap_interval(ma, mb, question=Question(confidence=confidence),
                                                  resampling=_SEED_BOOT, rng=rng),
    }


@validate_params({"n_rep": Interval(int, 2, None), "seed": SEED, "confidence": CONFIDENCE})
def calibrate(model: PanelModel, *, cells: Iterable[Cell | tuple[int, int]], effects_in_se: Sequence[float] = (0, 2, 3),
              n_rep: int = 300, seed: int = 0, targets: Sequence[str] = TARGETS,
              confidence: float = DEFAULT_QUESTION.confidence,
              methods: Sequence[str] = METHODS, progress: Callable[[Iterable], Iterable] | None = None,
              ) -> list[dict[str, Any]]:
    """False decisions, coverage and power of the verdict beside the baselines, per cell, target and effect.

    Per cell ``n_rep`` pairs are simulated once (A's losses shifted by each effect afterwards, so the
    effects and targets share them). For ``future`` the truth is ``delta = effect * se``; for
    ``period`` A is shifted by ``effect * se - mean_t c_t`` per replicate so the period truth is
    ``effect * se`` (0: the null). ``se`` is :func:`estimator_sd` under the target.

    Parameters
    ----------
    model : PanelModel
    cells : iterable of Cell or (n_seeds, n_days)
    effects_in_se : sequence of float
        True differences (A - B, A worse for a loss) in standard errors; 0 is the null.
    n_rep : int
        Replicates per cell (Monte Carlo standard error of a 5% rate: ``sqrt(0.05 * 0.95 / n_rep)``).
    seed : int
        Seed of every draw.
    targets : sequence of {"future", "period"}
        The questions' targets; each is asked at ``confidence`` (one
        :class:`~rolling_calib.core.question.Question` per target, the verdict and every baseline alike).
    confidence : float
    methods : sequence of str
        Any of :data:`METHODS`.
    progress : callable, optional
        Wraps the cells' iterable (a tqdm bar).

    Returns
    -------
    list of dict
        One row per (cell, target, effect, method): ``n_seeds, n_days, drift, regime_days,
        drift_ratio, target, effect_in_se, se, method, decided`` (share with a verdict: the false
        decision rate at effect 0), ``power`` (decided in the right direction), ``wrong_direction``,
        ``coverage`` (the interval holds the truth), each with ``_mc_se``, and ``n_rep``.

    Examples
    --------
    >>> rows = calibrate(PanelModel(seed_sd=1.0), cells=[(3, 20)], effects_in_se=(0,), n_rep=20,
    ...                  targets=("period",), methods=("paired_t",))
    >>> [(r["method"], r["target"], r["n_rep"]) for r in rows]
    [('paired_t', 'period', 20)]
    """
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValueError(f"methods: expected any of {', '.join(METHODS)}, found {bad[0]!r}")
    for t in targets:
        if not _TARGET.accepts(t):
            raise ValueError(f"targets: expected 'future' or 'period', found {t!r}")
    cell_list = [c if isinstance(c, Cell) else Cell(*c) for c in cells]
    rows: list[dict[str, Any]] = []
    root = np.random.SeedSequence(int(seed))
    iterator = progress(cell_list) if progress is not None else cell_list
    for cell, child in zip(iterator, root.spawn(len(cell_list))):
        rng = np.random.default_rng(child)
        m = model if cell.regime_days is None else model.with_drift(cell.regime_days, cell.drift_ratio)
        a, b, common = _simulate(m, n_rep, cell.n_seeds, cell.n_days, rng)
        base = _method_intervals(a, b, confidence=confidence, rng=rng)
        cbar = common.mean(axis=1)
        for target in targets:
            se = estimator_sd(m, n_seeds=cell.n_seeds, n_days=cell.n_days, target=target)
            for effect in effects_in_se:
                truth = effect * se
                shift = np.full(n_rep, truth) if target == "future" else truth - cbar
                intervals = {name: (lo + shift, hi + shift) for name, (lo, hi) in base.items()}
                if "decide" in methods:
                    intervals["decide"] = _decide_intervals(a, b, shift, Question(target=target,
                                                                                  confidence=confidence))
                for name in methods:
                    lo, hi = intervals[name]
                    rows.append(_row(cell, m, target, effect, se, name, lo, hi, truth, n_rep))
    return rows


def _decide_intervals(a: np.ndarray, b: np.ndarray, shift: np.ndarray,
                      question: Question) -> tuple[np.ndarray, np.ndarray]:
    seeds = np.arange(a.shape[1])
    lo, hi = np.empty(a.shape[0]), np.empty(a.shape[0])
    for r in range(a.shape[0]):
        v = _verdict(LossPanel.from_arrays(seeds=seeds, total=a[r] + shift[r]),
                     LossPanel.from_arrays(seeds=seeds, total=b[r]), question)
        lo[r], hi[r] = v.ci_low, v.ci_high
    return lo, hi


def _row(cell: Cell, model: PanelModel, target: str, effect: float, se: float, method: str, lo: np.ndarray,
         hi: np.ndarray, truth: float, n_rep: int) -> dict[str, Any]:
    decided = (lo > 0) | (hi < 0)
    right = lo > 0 if truth > 0 else np.zeros_like(decided) if truth == 0 else hi < 0
    wrong = (hi < 0) if truth > 0 else np.zeros_like(decided) if truth == 0 else lo > 0
    covered = (lo <= truth) & (truth <= hi)
    out: dict[str, Any] = {"n_seeds": cell.n_seeds, "n_days": cell.n_days, "drift": cell.drift,
                           "regime_days": model.regime_days, "drift_ratio": model.drift_ratio, "target": target,
                           "effect_in_se": float(effect), "se": se, "method": method, "n_rep": n_rep}
    for name, hits in (("decided", decided), ("power", right), ("wrong_direction", wrong), ("coverage", covered)):
        out[name], out[f"{name}_mc_se"] = _rate(hits)
    return out


# --------------------------------------------------------------------------- A/A splits
@dataclass(frozen=True)
class AASplits:
    """Result of :func:`aa_splits`: how often one pipeline is decided against itself."""

    n_splits: int
    target: str
    seeds_per_half: int
    decided: dict[str, float]
    mc_se: dict[str, float]
    confidence: float = DEFAULT_QUESTION.confidence

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


@validate_params({"n_splits": _POS_INT, "seed": SEED, "question": QUESTION})
def aa_splits(panel: LossPanel, *, n_splits: int = 100, seed: int = 0, question: Question = DEFAULT_QUESTION,
              orientation: str = "lower") -> AASplits:
    """One pipeline's seeds split at random into two halves, decided against each other; share decided.

    The halves hold different seeds, so the verdict is unpaired. Beside the verdict: Welch's t on
    the run means and Diebold-Mariano on the halves' daily differential (all three at the
    ``question``'s confidence; each should decide at most ``1 - confidence`` of the splits).

    >>> p = LossPanel.from_arrays(seeds=range(6), total=np.random.default_rng(0).normal(0, 1, (6, 40)))
    >>> r = aa_splits(p, n_splits=5, seed=1, question=Question(target="period"))
    >>> r.n_splits, r.seeds_per_half, sorted(r.decided)
    (5, 3, ['decide', 'dm', 'welch_t'])
    """
    if panel.n_seeds < 4:
        raise ValueError(f"panel: expected at least 4 seeds to split into halves of 2, found {panel.n_seeds}")
    rng = np.random.default_rng(int(seed))
    half = panel.n_seeds // 2
    hits: dict[str, list[bool]] = {"decide": [], "welch_t": [], "dm": []}
    for _ in range(n_splits):
        order = rng.permutation(panel.n_seeds)
        x, y = panel.select(seeds=np.sort(order[:half])), panel.select(seeds=np.sort(order[half:2 * half]))
        v = _verdict(x, y, question, orientation)
        hits["decide"].append(v.outcome != "undetermined")
        lo, hi = welch_interval(x.run_means(), y.run_means(), confidence=question.confidence)
        hits["welch_t"].append(bool(lo > 0 or hi < 0))
        d_t = np.nanmean(x.unit_means(), axis=0) - np.nanmean(y.unit_means(), axis=0)
        ok = np.isfinite(d_t)
        lo, hi = dm_interval(d_t[ok], confidence=question.confidence) if ok.sum() >= 3 else (-math.inf, math.inf)
        hits["dm"].append(bool(lo > 0 or hi < 0))
    rates = {k: _rate(np.array(v)) for k, v in hits.items()}
    return AASplits(n_splits=int(n_splits), target=question.target, seeds_per_half=half,
                    decided={k: r[0] for k, r in rates.items()}, mc_se={k: r[1] for k, r in rates.items()},
                    confidence=float(question.confidence))


# --------------------------------------------------------------------------- seeds needed
@dataclass(frozen=True)
class SeedsNeededCheck:
    """Result of :func:`check_seeds_needed`.

    Attributes
    ----------
    bins : list of dict
        Per bin of stated probability (``SeedsNeeded.probability``): ``low, high, n``, ``stated``
        (its mean), ``assurance`` (mean ``SeedsNeeded.assurance`` where the verdict states one: the
        chance allowing for the pilot's own uncertainty), ``observed`` (share of follow-ups with
        ``n`` seeds decided in the right direction), ``observed_mc_se``, ``observed_any`` (decided
        in either direction).
    n_named, n_none, n_beyond : int
        Undecided pilots that named a number of seeds (at most ``max_seeds``); said no number of
        seeds can decide it; named more than ``max_seeds`` or more than the verdict searches.
    none_decided : float
        Of the "no number of seeds" pilots, the share that ``none_check_seeds`` seeds per pipeline
        decide in the right direction (the claim fails where this reaches 90%).
    decided_pilots : int
        Pilots already decided (counted apart; no follow-up).
    stated_mean, assurance_mean, observed_share : float
        Over all named pilots.
    """

    target: str
    pilot: int
    effect_in_se: float
    n_days: int
    n_rep: int
    max_seeds: int
    none_check_seeds: int
    bins: list[dict[str, Any]]
    n_named: int
    n_none: int
    n_beyond: int
    none_decided: float
    none_decided_mc_se: float
    decided_pilots: int
    stated_mean: float
    assurance_mean: float
    observed_share: float
    observed_share_mc_se: float
    confidence: float = DEFAULT_QUESTION.confidence

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


_PROB_BINS = (0.0, 0.5, 0.7, 0.8, 0.9, 1.0001)


@validate_params({"pilot": Interval(int, 2, None), "n_rep": _POS_INT, "seed": SEED, "question": QUESTION,
                  "n_days": Interval(int, 4, None), "max_seeds": Interval(int, 2, None),
                  "none_check_seeds": Interval(int, 2, None)})
def check_seeds_needed(model: PanelModel, *, pilot: int = 5, effect_in_se: float = 1.0, n_rep: int = 200,
                       seed: int = 0, question: Question = DEFAULT_QUESTION, n_days: int = 125, max_seeds: int = 200,
                       none_check_seeds: int = 60, progress: Callable[[Iterable], Iterable] | None = None,
                       ) -> SeedsNeededCheck:
    """Does ``seeds_needed`` keep its word? Pilot, read the number, follow up on the same days, count.

    Per replicate a pair with ``max(max_seeds, none_check_seeds)`` seeds per pipeline is simulated
    on ``n_days`` days with a true difference of ``effect_in_se`` standard errors of the pilot's
    estimate under the ``question``'s target (for ``period``: the truth on these days). The verdict on the first
    ``pilot`` seeds names ``n`` and the probability it states; the follow-up is the verdict on the
    first ``n`` seeds (the pilot's plus new ones, same days), decided in the right direction or
    not. A pilot that says no number of seeds can decide it is followed up with
    ``none_check_seeds`` seeds.

    >>> r = check_seeds_needed(PanelModel(seed_sd=1.0), pilot=3, n_rep=4, n_days=20, max_seeds=10)
    >>> r.n_named + r.n_none + r.n_beyond + r.decided_pilots
    4
    """
    rng = np.random.default_rng(int(seed))
    target = question.target
    se = estimator_sd(model, n_seeds=pilot, n_days=n_days, target=target)
    truth = effect_in_se * se
    n_sim = max(max_seeds, none_check_seeds)
    seeds = np.arange(n_sim)
    stated: list[float] = []
    assurance: list[float] = []
    right: list[bool] = []
    anyway: list[bool] = []
    none_hits: list[bool] = []
    beyond = decided_pilots = 0
    reps = range(n_rep)
    for _ in progress(reps) if progress is not None else reps:
        a, b, common = _simulate(model, 1, n_sim, n_days, rng)
        shift = truth if target == "future" else truth - float(common[0].mean())
        pa = LossPanel.from_arrays(seeds=seeds, total=a[0] + shift)
        pb = LossPanel.from_arrays(seeds=seeds, total=b[0])

        def verdict(n: int) -> Any:
            idx = np.arange(n)
            return _verdict(pa.select(seeds=idx), pb.select(seeds=idx), question)

        v = verdict(pilot)
        if v.outcome != "undetermined":
            decided_pilots += 1
            continue
        sn = v.seeds_needed
        if sn.n is None:
            if str(sn.reason).startswith("no number of seeds"):
                none_hits.append(verdict(none_check_seeds).outcome == "worse")
            else:
                beyond += 1
            continue
        if sn.n > max_seeds:
            beyond += 1
            continue
        w = verdict(max(int(sn.n), 2))
        stated.append(float(getattr(sn, "probability", 0.5)))
        assurance.append(float(getattr(sn, "assurance", math.nan)))
        right.append(w.outcome == "worse")
        anyway.append(w.outcome != "undetermined")
    stated_arr, assur_arr = np.array(stated), np.array(assurance)
    right_arr, any_arr = np.array(right, dtype=bool), np.array(anyway, dtype=bool)
    bins = []
    for lo, hi in zip(_PROB_BINS[:-1], _PROB_BINS[1:]):
        sel = (stated_arr >= lo) & (stated_arr < hi)
        if not sel.any():
            continue
        obs, obs_se = _rate(right_arr[sel])
        bins.append({"low": lo, "high": min(hi, 1.0), "n": int(sel.sum()), "stated": float(stated_arr[sel].mean()),
                     "assurance": _nanmean(assur_arr[sel]), "observed": obs, "observed_mc_se": obs_se,
                     "observed_any": float(any_arr[sel].mean())})
    none_rate, none_se = _rate(np.array(none_hits, dtype=bool))
    share, share_se = _rate(right_arr)
    return SeedsNeededCheck(target=target, pilot=pilot, effect_in_se=float(effect_in_se), n_days=int(n_days),
                            n_rep=int(n_rep), max_seeds=int(max_seeds), none_check_seeds=int(none_check_seeds),
                            bins=bins, n_named=len(stated), n_none=len(none_hits), n_beyond=beyond,
                            none_decided=none_rate, none_decided_mc_se=none_se, decided_pilots=decided_pilots,
                            stated_mean=_nanmean(stated_arr), assurance_mean=_nanmean(assur_arr),
                            observed_share=share, observed_share_mc_se=share_se,
                            confidence=float(question.confidence))


def _nanmean(x: np.ndarray) -> float:
    ok = np.isfinite(x)
    return float(x[ok].mean()) if ok.any() else math.nan
