"""Race a sweep to a best set, and the seed-aware model confidence set.

A sweep runs ``K`` configurations, each over the same seeds and the same days (a
:class:`~rolling_calib.core.verdict.LossPanel` each). Two questions have two answers here:

:func:`race` -- *which configurations can still be the best, with as few seeds as possible?*
Seeds are revealed ``rule.first``, then ``rule.batch`` at a time (as
:func:`rolling_calib.core.sequential.replay` reveals them for pairs), and after every look each
configuration still in the race is compared with the others still in it by **multiple comparisons
with the best** (Hsu 1996, MCB): configuration ``i`` is eliminated once, for some ``j`` still in
the race, the one-sided bound on ``i``'s disadvantage excludes 0::

    lower is better:   (M_i - M_j) - t_nu(1 - p_L) sqrt(V_ij) > 0       (i decided worse than j)

where ``M`` are the means over seeds of the runs' means, ``V_ij`` the verdict's variance of the
pair's difference (:func:`rolling_calib.core.variance.crossed_variance` of the paired
differential, for the question's target, exactly as :func:`rolling_calib.core.verdict.decide`
counts it) and ``nu_ij`` its degrees of freedom. The largest such bound is attained against the
current best by mean when the pairs' variances are alike, so this is Hsu's rule "each against the
best of the others". **Error control.** Each comparison is one-sided at ``alpha / (K - 1)``
(Bonferroni over the ``K - 1`` comparisons of the truly best configuration with the others; Hsu
uses Dunnett's equicorrelated quantile, which needs equal variances), and that share is spent
over the looks by the rule's spending function on the planned information fraction
``u_L = k_L / max_seeds`` (:func:`rolling_calib.core.sequential.planned_fraction`): ``c_L`` are the
two-sided group-sequential boundaries at ``2 alpha / (K - 1)``
(:func:`rolling_calib.core.sequential.boundaries`), each side of which spends ``alpha / (K - 1)``,
and ``p_L = 1 - Phi(c_L)`` is the look's one-sided nominal level, read with the verdict's own
Student t (as the pairs' rule reads it). A truly best configuration ``b`` is eliminated only if
one of its ``K - 1`` comparisons crosses its boundary at some look, so::

    P(b eliminated) <= sum_{j != b} alpha / (K - 1) = alpha

With several configurations tied for the best the guarantee is Hsu's: the best set keeps at least
one of them with probability ``>= 1 - alpha`` (each tied one alone is eliminated less often than
``alpha``; ``bench/racing_replay.py`` measures both rates).

**Seed variance** (``rule.seed_variance``). ``pair`` (the default): ``V_ij`` and ``nu_ij`` are the pair's own,
``k - 1`` degrees of freedom at ``k`` seeds, so at 3-7 seeds a comparison's t has 2-6 and nothing closer than
about 10 standard errors (of the 20-seed difference) can be eliminated. ``pooled``: the seed part of every
comparison at a look is ``S / k`` with ``S`` twice the two-way residual mean square of the configurations x
seeds table of run means of the ``K'`` configurations the look compares (:func:`_pooled_seed_variance`),
on ``(K' - 1)(k - 1)`` degrees of freedom; the market-time part (future target) stays the pair's. ``S`` is
the mean of the pairs' own per-seed variances, so each t is exact when they are alike (the configurations'
seed variances equal, seeds paired alike across them) and liberal for the pairs of a configuration whose
seed variance is larger than the others' (measured in ``docs/racing.md``); with two configurations it is
the pair's own. The futility chances then read the pooled degrees of freedom at ``max_seeds``
(``(K' - 1)(max_seeds - 1)``, with the look's ``K'``).

**Step-down** (``comparisons="step-down"``). MCB's guarantee is about *one* best: with ``T`` tied
for the best, each is eliminated with chance ``<= alpha`` but some one of them with chance up to
``T alpha`` (with 12 identical configurations, 27% of the races eliminated one of them,
``docs/racing.md``). Closed testing of the hypotheses ``H_i`` "``i`` is a best" (the intersection
``H_J``, every one of ``J`` tied for the best, tested by Bonferroni over its ``|J| (K - 1)``
one-sided comparisons) gives Holm's shortcut: with ``r`` configurations not yet eliminated each
comparison is one-sided at ``alpha / (r (K - 1))``, re-checked at the same look after every
elimination. Then ``P(any truly best eliminated) <= alpha`` whatever the ties (strong control),
spent over the looks as above (the shares only grow, Maurer and Bretz 2013); the first
elimination needs the all-pairs share ``alpha / (K (K - 1))``, and the last ones ``alpha / (2 (K - 1))``.

**Stops.** A pair of configurations still in the race is *settled* -- it can no longer eliminate
either side -- when its two-sided interval at the look's level lies inside ``(-margin, margin)``
(``rule.margin``: equivalent), when the market-time part alone keeps it over the gap even with
every seed (undecidable, judged at the gap's optimistic end as the pairs' rule judges it), or when
its predictive chance of a decision by ``max_seeds`` (at the last planned look's level) is below
``rule.futility`` (futile). A *configuration* stops receiving seeds when its own predictive chance
to be eliminated by ``max_seeds`` -- one side of the pair's chance, against whichever configuration
still compared with it through an unsettled pair is most likely to eliminate it -- is below
``rule.futility``, unless it is the most likely eliminator of one that keeps running (a
configuration that cannot be eliminated gets seeds only to eliminate others, and one eliminator
per configuration is enough: MCB may eliminate ``i`` against any ``j``). A stopped configuration
stays in the best set and is never compared again. These stops never eliminate anything: every
elimination is a crossing that the same comparison at the same look would have made with every
configuration given every seed, so withholding seeds only removes chances to eliminate and cannot
raise the error rate (it lowers power). The race ends when one configuration is left, when no
configuration still compared can be eliminated (the set cannot shrink), or when the budget is
spent.

:func:`model_confidence_set` -- *which configurations are not distinguishable from the best, at
the seeds run?* Hansen, Lunde and Nason's (2011) elimination with the range statistic, on each
pair's verdict (its difference and variance for the question's target, seeds counted with their
persistent offsets; the market-time part too for the future target) instead of a bootstrap of
seed-averaged days, which cannot see a seed's persistent offset (with 5 identical configurations
and seed offsets of 0.3 of a run's spread it excluded one in 59% of sweeps at a nominal 5%, issue
35). For the set ``M`` still in, with ``m = |M| (|M| - 1) / 2`` pairs::

    p_ij = 2 P(t_{nu_ij} > |D_ij| / sqrt(V_ij))         (the verdict's two-sided p-value)
    P_M  = min(1, m min_{i, j in M} p_ij)                (Bonferroni bound on the range statistic)

While ``P_M < alpha`` the configuration worst against another (the largest z-equivalent of its
disadvantage) is eliminated; each one's MCS p-value is the largest ``P_M`` up to its elimination,
and the set is those with a p-value ``>= alpha``. The Bonferroni bound holds whatever the pairs'
dependence; a Gaussian or studentized-range law of the maximum with each pair's own estimated
variance does not hold its level at 3-10 seeds (5 identical configurations, 300 sweeps each: the
Gaussian law of the contrasts excluded one in 15% at 3 seeds and 7% at 10, Games-Howell's
studentized range in 14% and 8%, nominal 5%): the maximum picks the pairs whose few-seed variance
is low by chance, and a covariance of ``K`` means estimated from ``k < K`` seeds is singular.

Examples
--------
Six configurations, 20 seeds, 60 days; two are best, the others 1 to 4 run spreads worse:

>>> rng = np.random.default_rng(0)
>>> day = rng.normal(0, 0.2, 60)
>>> def panel(shift):
...     return LossPanel.from_arrays(seeds=range(20), total=10 + day + shift + rng.normal(0, 1, (20, 1))
...                                  + rng.normal(0, 1, (20, 60)))
>>> panels = {n: panel(s) for n, s in zip("abcdef", (0, 0, 1, 2, 3, 4))}
>>> r = race(panels, rule=StoppingRule(first=3, batch=2, max_seeds=20), question=Question(target="period"),
...          orientation="lower", order_seed=0)
>>> "a" in r.best_set and "b" in r.best_set, sorted(r.eliminated)[-2:], r.fraction_of_grid < 1
(True, ['e', 'f'], True)
>>> model_confidence_set(panels, question=Question(target="period"), orientation="lower").excluded[-2:]
['e', 'f']
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from rolling_calib.core.jsonable import fields_dict, jsonable
from rolling_calib.core.question import DEFAULT_QUESTION, QUESTION, Question
from rolling_calib.core.sequential import _time_alone_covers, boundaries, planned_fraction
from rolling_calib.core.stopping import DEFAULT_RULE, STOPPING_RULE, StoppingRule
from rolling_calib.core.validation import SEED, Options, validate_params
from rolling_calib.core.variance import CrossedVariance, crossed_variance, influence, min_df, welch_df
from rolling_calib.core.verdict import LossPanel, _t_quantile

__all__ = ["COMPARISONS", "RACE_STOPS", "SETTLED", "Elimination", "ModelConfidenceSet", "RaceLook", "RaceResult",
           "model_confidence_set", "race"]

_ORIENTATION = Options("lower", "higher")
#: How a race shares its error rate: ``best`` (Hsu's MCB, ``alpha / (K - 1)`` one-sided per comparison),
#: ``all-pairs`` (Bonferroni over every pair, two-sided ``alpha / m``, ``m = K (K - 1) / 2``: the pairs' rule's
#: correction, ``alpha / (K (K - 1))`` per side; the baseline ``bench/racing_replay.py`` measures MCB against) or
#: ``step-down`` (closed testing of "i is a best": ``alpha / (r (K - 1))`` with ``r`` configurations not eliminated).
COMPARISONS = Options("best", "all-pairs", "step-down")
#: Why a race ended ("settled": no configuration still compared can be eliminated).
RACE_STOPS = ("one left", "settled", "budget")
#: Why a pair still in the race was settled (it can no longer eliminate either side).
SETTLED = ("equivalent", "undecidable", "futile")


# --------------------------------------------------------------------------- panels and pairs
def _common(panels: Mapping[str, LossPanel], *, what: str) -> tuple[list[str], np.ndarray]:
    """The names, and the seeds every panel ran (sorted); refuses panels on different days."""
    if not isinstance(panels, Mapping) or len(panels) < 2:
        raise ValueError(f"panels: expected a mapping of at least 2 configuration names to LossPanel, found "
                         f"{type(panels).__name__} of {len(panels) if hasattr(panels, '__len__') else '?'}")
    names = list(panels)
    first = names[0]
    for n in names:
        if not isinstance(panels[n], LossPanel):
            raise ValueError(f"panels[{n!r}]: expected a LossPanel, found {type(panels[n]).__name__}")
        if not np.array_equal(panels[n].times, panels[first].times):
            raise ValueError(f"panels[{n!r}]: expected the days of {first!r} ({panels[first].n_times} time units, "
                             f"{what} compares configurations on the same days), found {panels[n].n_times} "
                             "other time units")
    common = np.array(sorted(set.intersection(*(set(p.seeds.tolist()) for p in panels.values()))), dtype=np.int64)
    return names, common


def _rows(panel: LossPanel, seeds: np.ndarray) -> LossPanel:
    """The panel's rows of ``seeds``, in that order."""
    where = {int(s): i for i, s in enumerate(panel.seeds.tolist())}
    return panel.select(seeds=np.array([where[int(s)] for s in seeds], dtype=np.int64))


@dataclass(frozen=True)
class _Parts:
    """One configuration's run means and per-unit influence over its first ``k`` seeds."""

    means: np.ndarray
    z: np.ndarray


def _parts(panel: LossPanel, k: int) -> _Parts:
    m, z = influence(panel.total[:k], panel.weight[:k])
    return _Parts(m, z)


def _pair(a: _Parts, b: _Parts, target: str,
          pooled: tuple[float, float] | None = None) -> tuple[float, CrossedVariance]:
    """``mean(a) - mean(b)`` and the verdict's variance of it: the paired differential of
    :func:`rolling_calib.core.verdict.decide` (``d_s + z^a - z^b``) through ``crossed_variance``; with
    ``pooled`` (``(S, nu)`` of :func:`_pooled_seed_variance`) its seed part is ``S / k`` on ``nu`` degrees of
    freedom instead of the pair's own (the market-time part stays the pair's)."""
    d_s = a.means - b.means
    cv = crossed_variance(d_s[:, None] + (a.z - b.z), target=target)
    if pooled is None or math.isinf(cv.var):
        return float(d_s.mean()), cv
    per_seed, nu = pooled
    k = d_s.size
    var_seeds = per_seed / k
    df = nu if target == "period" else min_df([(var_seeds, nu), (cv.var_time, cv.df_time)])
    return float(d_s.mean()), dataclasses.replace(cv, var=var_seeds + cv.var_time, df=df, var_seeds=var_seeds,
                                                  df_seeds=nu, per_seed_var=per_seed)


def _pooled_seed_variance(means: np.ndarray) -> tuple[float, float]:
    """A pair's per-seed variance pooled over a configurations x seeds table of run means ``M`` (``K x k``), and its
    degrees of freedom: the two-way residual mean square (seeds paired across configurations)::

        e_cs = M_cs - M_c. - M_.s + M_..,     S = 2 sum e_cs^2 / ((K - 1)(k - 1)),     nu = (K - 1)(k - 1)

    ``S`` is the mean over the ``K (K - 1) / 2`` pairs of their own per-seed variances ``s^2(M_a - M_b)``, so it is
    unbiased for each pair's when their variances are alike (sphericity; exact t then), and with two
    configurations it is the pair's own.

    >>> M = np.array([[1.0, 2.0, 4.0], [0.0, 0.0, 0.0]])
    >>> S, nu = _pooled_seed_variance(M)
    >>> round(S, 6), nu, round(float(np.var(M[0] - M[1], ddof=1)), 6)
    (2.333333, 2.0, 2.333333)
    >>> M = np.random.default_rng(0).normal(size=(4, 5))
    >>> own = [np.var(M[a] - M[b], ddof=1) for a in range(4) for b in range(a + 1, 4)]
    >>> round(_pooled_seed_variance(M)[0] - float(np.mean(own)), 12), _pooled_seed_variance(M)[1]
    (0.0, 12.0)
    """
    K, k = means.shape
    e = means - means.mean(axis=1, keepdims=True) - means.mean(axis=0, keepdims=True) + means.mean()
    nu = float((K - 1) * (k - 1))
    return (2.0 * float((e * e).sum()) / nu if nu > 0 else math.inf), nu


def _t_bound(cv: CrossedVariance, tail: float) -> float:
    """``t_nu(1 - tail) sqrt(V)``: the one-sided margin at nominal tail ``tail`` (inf: nothing measurable)."""
    if not cv.var > 0:
        return 0.0 if tail > 0 else math.inf
    if math.isinf(cv.var) or tail <= 0:
        return math.inf
    return float(stats.t.isf(tail, cv.df)) * math.sqrt(cv.var)


# --------------------------------------------------------------------------- the race
@dataclass(frozen=True)
class Elimination:
    """One configuration decided worse than another at a look.

    Attributes
    ----------
    name, by : str
        The eliminated configuration, and the one it was decided worse than (the largest bound).
    difference : float
        ``mean(name) - mean(by)`` in the metric's sign and unit.
    bound : float
        One-sided bound on ``name``'s disadvantage (``difference - t sqrt(V)`` for lower is better,
        ``-(difference + t sqrt(V))`` for higher): > 0.
    why : str
    """

    name: str
    by: str
    difference: float
    bound: float
    why: str

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


@dataclass(frozen=True)
class RaceLook:
    """One look of a race.

    Attributes
    ----------
    look : int
        1, 2, ...
    seeds : int
        Seeds per configuration each comparison read at this look.
    fraction, boundary : float
        Planned information fraction ``seeds / max_seeds`` and the z boundary of the look.
    level : float
        One-sided confidence of this look's bounds (``1 - p_L``; step-down: of its last pass, after the look's
        eliminations relaxed the share; each elimination's ``why`` names the level it was decided at).
    best : str
        The best configuration by mean among those compared.
    compared : tuple of str
        The configurations given this look's seeds (those in an unsettled pair).
    kept : tuple of str
        Every configuration still in the race after the look.
    eliminated : tuple of Elimination
    settled : tuple of (str, str, str)
        Pairs settled at this look: ``(a, b, reason)`` with a reason of :data:`SETTLED`.
    seeds_spent : int
        Seeds trained so far over all configurations (one seed: one configuration's model per window).
    stop : str
        ``""``, or why the race ended here (:data:`RACE_STOPS`).
    stopped : tuple of (str, str)
        Configurations still in the race that get no more seeds from this look on: ``(name, why)`` (futile: their
        chance to be eliminated by ``max_seeds`` is below ``rule.futility``; or every pair they are in settled).
    """

    look: int
    seeds: int
    fraction: float
    boundary: float
    level: float
    best: str
    compared: tuple[str, ...]
    kept: tuple[str, ...]
    eliminated: tuple[Elimination, ...]
    settled: tuple[tuple[str, str, str], ...]
    seeds_spent: int
    stop: str = ""
    stopped: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = fields_dict(self, exclude=("eliminated",))
        out["eliminated"] = [e.to_dict() for e in self.eliminated]
        return out


@dataclass(frozen=True)
class RaceResult:
    """Result of :func:`race`.

    Attributes
    ----------
    best_set : tuple of str
        The configurations never eliminated, in the panels' order.
    eliminated : dict[str, int]
        Each eliminated configuration and the look that eliminated it.
    seeds_used : dict[str, int]
        Seeds each configuration ran (what its last comparison read).
    looks : tuple of RaceLook
    full_grid : int
        ``max_seeds``: seeds per configuration without racing.
    stop : str
        Why the race ended (:data:`RACE_STOPS`); ``""`` while it waits for seeds (``pending``).
    settings : dict
        The rule, the question, the direction, the error control, the seed order.
    pending : dict[str, int]
        Only for a race given ``seed_order`` whose panels lack the next look's seeds: the seeds
        (the first ``k`` of ``seed_order``) each configuration the next look compares needs; the
        race waits there. Empty when the race ended.
    """

    best_set: tuple[str, ...]
    eliminated: dict[str, int]
    seeds_used: dict[str, int]
    looks: tuple[RaceLook, ...]
    full_grid: int
    stop: str
    settings: dict[str, Any] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)

    @property
    def fraction_of_grid(self) -> float:
        """Seeds run over the full grid's (every configuration at ``max_seeds``)."""
        return sum(self.seeds_used.values()) / (self.full_grid * len(self.seeds_used))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (through the project's one conversion)."""
        return jsonable({"best_set": list(self.best_set), "eliminated": self.eliminated,
                         "seeds_used": self.seeds_used, "full_grid": self.full_grid,
                         "fraction_of_grid": self.fraction_of_grid, "stop": self.stop,
                         "looks": [look.to_dict() for look in self.looks], "settings": self.settings,
                         "pending": self.pending})


def _settle(d: float, cv: CrossedVariance, *, k: int, rule: StoppingRule, two_sided_level: float,
            half: float, n_days: int, df_scale: float = 1.0) -> str:
    """Why an undecided pair can no longer eliminate either side (one of :data:`SETTLED`), or ``""``; futile: its
    predictive chance of a decision either way by ``max_seeds`` (the two sides of :func:`_elimination_chance`, what
    :func:`rolling_calib.core.verdict.predictive_probability` computes for the pair's own variance) is below
    ``rule.futility``."""
    if rule.margin is not None and -rule.margin < d - half and d + half < rule.margin:
        return "equivalent"
    if k >= rule.max_seeds or math.isinf(cv.var):
        return ""
    optimistic = abs(d) + math.sqrt(max(cv.var_seeds, 0.0))
    if _time_alone_covers(cv, n_days=n_days, level=two_sided_level, gap=optimistic):
        return "undecidable"
    chance = (_elimination_chance(d, cv, k=k, n=rule.max_seeds, two_sided_level=two_sided_level, df_scale=df_scale)
              + _elimination_chance(-d, cv, k=k, n=rule.max_seeds, two_sided_level=two_sided_level,
                                    df_scale=df_scale))
    return "futile" if chance < rule.futility else ""


def _final_level(rule: StoppingRule, alpha_pair: float) -> float:
    """Two-sided level of the last planned look's bound (``max_seeds`` seeds, after every planned look spent its share):
    ``1 - 2 (1 - Phi(c_last))``, what a pair must clear at the budget. The futility and undecidable stops judge
    the pair's chance at this level, not at the fixed-sample ``1 - 2 alpha_pair``, which the spending makes stricter.

    >>> round(_final_level(StoppingRule(first=20, max_seeds=20), 0.025), 6)     # one look: nothing spent before
    0.95
    """
    looks, k = [], 0
    while k < rule.max_seeds:
        k = rule.seeds_at(len(looks) + 1)
        looks.append(planned_fraction(k, rule.max_seeds))
    c = float(boundaries(looks, alpha=2.0 * alpha_pair, spending=rule.spending)[-1])
    return 1.0 - 2.0 * float(stats.norm.sf(c)) if math.isfinite(c) else 1.0 - 1e-12


def _elimination_chance(gap: float, cv: CrossedVariance, *, k: int, n: int, two_sided_level: float,
                        df_scale: float = 1.0) -> float:
    """Predictive chance that a pair ``gap`` apart (> 0: the first configuration worse) eliminates the first one by
    ``n`` seeds per configuration, at the last planned look's level: one side of
    :func:`rolling_calib.core.verdict.predictive_probability` (the same flat prior on the gap)::

        D_n | look ~ N(D_k, S (n - k) / (k n)),      P = P(D_n > t_nu(n) sqrt(S / n + v_time))

    with ``nu(n)`` Welch-Satterthwaite of ``(S / n, df_scale (n - 1))`` and ``(v_time, nu_time)`` (``df_scale``:
    ``K - 1`` when the seed variance is pooled over ``K`` configurations, 1 for the pair's own).

    >>> cv = crossed_variance(np.random.default_rng(0).normal(0.0, 1.0, (5, 30)), target="period")
    >>> [round(_elimination_chance(g, cv, k=5, n=20, two_sided_level=0.99), 2) for g in (0.0, 0.1, 0.2)]
    [0.05, 0.49, 0.94]
    >>> _elimination_chance(0.2, cv, k=20, n=20, two_sided_level=0.99)   # nothing left to learn
    1.0
    """
    if math.isinf(cv.var):
        return 0.0
    v = cv.per_seed_var / n + cv.var_time
    if not v > 0:
        return float(gap > 0)
    nu = welch_df([(cv.per_seed_var / n, df_scale * (n - 1.0)), (cv.var_time, cv.df_time)])
    limits = (_t_quantile(0.5 + two_sided_level / 2, nu) * math.sqrt(v), math.sqrt(v))
    spread = math.sqrt(max(cv.per_seed_var * (n - k) / (k * n), 0.0)) if 0 < k < n else 0.0
    if spread == 0.0:
        return float(gap > limits[0])
    return float(stats.norm.sf((limits[0] - gap) / spread))


def _share(alpha: float, K: int, kept: int, comparisons: str) -> float:
    """One-sided error share of one comparison (:data:`COMPARISONS`) with ``kept`` of ``K`` configurations not
    eliminated: ``alpha / (K - 1)`` (best), ``alpha / (K (K - 1))`` (all-pairs), ``alpha / (kept (K - 1))`` (step-down).

    >>> _share(0.05, 12, 12, "best"), _share(0.05, 12, 12, "step-down") == _share(0.05, 12, 12, "all-pairs")
    (0.004545454545454546, True)
    >>> _share(0.05, 12, 1, "step-down") == _share(0.05, 12, 12, "best")
    True
    """
    return alpha / ((K - 1) if comparisons == "best" else K * (K - 1) if comparisons == "all-pairs"
                    else max(kept, 1) * (K - 1))


def _eliminations(pairs: Mapping[tuple[str, str], tuple[float, CrossedVariance]], kept: list[str], *, tail: float,
                  sign: float) -> dict[str, tuple[float, str, float]]:
    """MCB at one-sided nominal ``tail``: each configuration of ``kept`` whose one-sided bound against some other one
    of ``kept`` exceeds 0, with its largest bound, that other one and the gap (``sign``: 1 lower is better)."""
    worst: dict[str, tuple[float, str, float]] = {}
    for (a, b), (d, cv) in pairs.items():
        if a not in kept or b not in kept:
            continue
        margin = _t_bound(cv, tail)
        for loser, winner, gap in ((a, b, sign * d), (b, a, -sign * d)):
            bound = gap - margin
            if bound > 0 and bound > worst.get(loser, (0.0, "", 0.0))[0]:
                worst[loser] = (bound, winner, gap)
    return worst


def _next_active(pairs: Mapping[tuple[str, str], tuple[float, CrossedVariance]],
                 settled: Mapping[tuple[str, str], str], kept: list[str], compared: list[str], *, k: int,
                 rule: StoppingRule, sign: float, two_sided_level: float,
                 df_scale: float = 1.0) -> tuple[list[str], list[str], tuple[tuple[str, str], ...]]:
    """Who gets the next look's seeds: ``(live, active, stopped)``.

    A configuration is *live* while its predictive chance to be eliminated by ``max_seeds``
    (:func:`_elimination_chance`, against the configuration still compared most likely to eliminate it, through a
    pair not settled) is at least ``rule.futility``; the next look gives seeds to the live ones and to each one's
    most likely eliminator. Every other configuration still in the race stops receiving seeds (``stopped``: name and
    why) and is never eliminated afterwards: withholding seeds only removes chances to eliminate, so it cannot raise
    the error rate.
    """
    chance: dict[str, tuple[float, str]] = {}
    for (a, b), (d, cv) in pairs.items():
        if a not in kept or b not in kept or (a, b) in settled:
            continue
        for loser, winner, gap in ((a, b, sign * d), (b, a, -sign * d)):
            p = _elimination_chance(gap, cv, k=k, n=rule.max_seeds, two_sided_level=two_sided_level,
                                    df_scale=df_scale)
            if p > chance.get(loser, (-1.0, ""))[0]:
                chance[loser] = (p, winner)
    live = [n for n in compared if n in chance and chance[n][0] >= rule.futility]
    need = set(live) | {chance[n][1] for n in live}
    active = [n for n in compared if n in need]
    stopped = tuple((n, f"futile: {chance[n][0]:.0%} chance to be eliminated by {rule.max_seeds} seeds "
                        f"(against {chance[n][1]})" if n in chance else "every pair it is in settled")
                    for n in compared if n in kept and n not in need)
    return live, active, stopped


@validate_params({"rule": STOPPING_RULE, "question": QUESTION, "orientation": _ORIENTATION, "order_seed": SEED,
                  "comparisons": COMPARISONS})
def race(panels: Mapping[str, LossPanel], *, rule: StoppingRule = DEFAULT_RULE,
         question: Question = DEFAULT_QUESTION, orientation: str = "lower", order_seed: int = 0,
         comparisons: str = "best", seed_order: Sequence[int] | None = None) -> RaceResult:
    """Race configurations to a best set: seeds revealed ``rule.first``, then ``rule.batch`` at a time (module docstring).

    Parameters
    ----------
    panels : mapping of str to LossPanel
        Each configuration's finished panel of one metric: the same days, and at least
        ``rule.max_seeds`` seeds that every configuration ran (compared seed for seed).
    rule : StoppingRule
        Seeds at the first look, per look and at most; the spending function over the looks; the
        futility threshold (of a pair's chance of a decision and of a configuration's chance to be
        eliminated, by ``max_seeds``) and the equivalence margin of the stops.
    question : Question
        The target of every comparison's variance; ``1 - confidence`` bounds the chance of eliminating
        the best configuration over all configurations and looks (with ties: every one of them for
        ``best``; any one of them for ``all-pairs`` and ``step-down``).
    orientation : {"lower", "higher"}
        Lower is better (a loss) or higher (a score such as IC).
    order_seed : int
        Seed of the random order in which seeds are revealed (the same order for every configuration).
    comparisons : {"best", "all-pairs", "step-down"}
        ``best``: each comparison one-sided at ``alpha / (K - 1)`` (MCB); ``all-pairs``: at
        ``alpha / (K (K - 1))`` (Bonferroni over every pair, two-sided ``alpha / m``), the baseline;
        ``step-down``: at ``alpha / (r (K - 1))`` with ``r`` configurations not yet eliminated (closed
        testing: no truly best one eliminated with chance ``> alpha``, whatever the ties).
    seed_order : sequence of int, optional
        Reveal the seeds in this order instead of a random one (``order_seed`` unused): a race run
        live (:mod:`rolling_calib.experiment.race_live`). Each configuration then reads the longest
        prefix of ``seed_order`` its panel holds, and configurations may hold different numbers
        (one eliminated at an earlier look needs no more). When a look would compare a
        configuration that lacks the look's seeds, the race waits: it returns the looks so far,
        ``stop=""`` and ``pending``. Replaying on more seeds later reproduces those looks exactly.

    Returns
    -------
    RaceResult
    """
    names, common = _common(panels, what="a race")
    K, max_seeds = len(names), rule.max_seeds
    if seed_order is not None:
        order, have = _prefixes(panels, seed_order, max_seeds)
        ordered = {n: _rows(panels[n], order[:have[n]]) if have[n] else panels[n] for n in names}
    else:
        if common.size < max_seeds:
            raise ValueError(f"max_seeds: expected at most the {common.size} seeds every configuration ran, "
                             f"found {max_seeds}")
        order = np.random.default_rng(order_seed).permutation(common)[:max_seeds]
        ordered = {n: _rows(panels[n], order) for n in names}
        have = {n: max_seeds for n in names}
    pending: dict[str, int] = {}
    n_days = panels[names[0]].n_times
    sign = 1.0 if orientation == "lower" else -1.0
    kept = list(names)
    active = list(names)      # the configurations given the next look's seeds
    settled: dict[tuple[str, str], str] = {}
    eliminated: dict[str, int] = {}
    used = {n: 0 for n in names}
    fractions: tuple[float, ...] = ()
    looks: list[RaceLook] = []
    number = 0
    while True:
        number += 1
        k = rule.seeds_at(number)
        compared = [n for n in kept if n in active]
        open_pairs = [(a, b) for i, a in enumerate(compared) for b in compared[i + 1:] if (a, b) not in settled]
        if any(have[n] < k for n in compared):   # live: the look's seeds are not all trained yet
            pending, stop = {n: k for n in compared}, ""
            break
        for n in compared:
            used[n] = k
        fractions += (planned_fraction(k, max_seeds),)
        parts = {n: _parts(ordered[n], k) for n in compared}
        means = {n: float(parts[n].means.mean()) for n in compared}
        best = min(compared, key=lambda n: sign * means[n])
        pooled = (_pooled_seed_variance(np.stack([parts[n].means for n in compared]))
                  if rule.seed_variance == "pooled" else None)
        df_scale = float(len(compared) - 1) if pooled is not None else 1.0
        pairs = {p: _pair(parts[p[0]], parts[p[1]], question.target, pooled) for p in open_pairs}
        out: list[Elimination] = []
        while True:     # step-down: each elimination relaxes the others' share (Holm); otherwise one pass
            share = _share(question.alpha, K, len(kept), comparisons)
            c = float(boundaries(fractions, alpha=2.0 * share, spending=rule.spending)[-1])
            tail = float(stats.norm.sf(c)) if math.isfinite(c) else 0.0
            level = 1.0 - tail
            new = _eliminations(pairs, kept, tail=tail, sign=sign)
            for n, (bound, by, gap) in new.items():
                eliminated[n] = number
                out.append(Elimination(n, by, sign * gap, bound, (
                    f"worse than {by}{' (the best by mean)' if by == best else ''} by {abs(gap):.4g}: the "
                    f"one-sided {level:.4%} bound on the gap is {bound:.4g} > 0")))
            kept = [n for n in kept if n not in eliminated]
            if not new or comparisons != "step-down" or len(kept) == 1:
                break
        final_two_sided = _final_level(rule, _share(question.alpha, K, len(kept), comparisons))
        new_settled = []
        half_level = 1.0 - 2.0 * tail
        for (a, b), (d, cv) in pairs.items():
            if a in eliminated or b in eliminated:
                continue
            half = math.inf if tail <= 0 else (cv.half_width(half_level) if cv.var > 0 else 0.0)
            why = _settle(d, cv, k=k, rule=rule, two_sided_level=final_two_sided, half=half, n_days=n_days,
                          df_scale=df_scale)
            if why:
                settled[(a, b)] = why
                new_settled.append((a, b, why))
        live, active, stopped = _next_active(pairs, settled, kept, compared, k=k, rule=rule, sign=sign,
                                             two_sided_level=final_two_sided, df_scale=df_scale)
        stop = ("one left" if len(kept) == 1 else "settled" if not live
                else "budget" if k >= max_seeds else "")
        looks.append(RaceLook(number, k, fractions[-1], c, level, best, tuple(compared), tuple(kept), tuple(out),
                              tuple(new_settled), int(sum(used.values())), stop, () if stop else stopped))
        if stop:
            break
    return RaceResult(best_set=tuple(kept), eliminated=eliminated, seeds_used=dict(used), looks=tuple(looks),
                      full_grid=max_seeds, stop=stop,
                      settings={"rule": rule.to_dict(), "question": question.to_dict(), "orientation": orientation,
                                "configurations": K, "comparisons": comparisons,
                                "comparison_alpha": _share(question.alpha, K, K, comparisons),
                                "order_seed": int(order_seed),
                                **({"seed_order": [int(s) for s in order]} if seed_order is not None else {})},
                      pending=pending)


def _prefixes(panels: Mapping[str, LossPanel], seed_order: Sequence[int],
              max_seeds: int) -> tuple[np.ndarray, dict[str, int]]:
    """The first ``max_seeds`` of ``seed_order``, and how many of them, from the first, each panel holds.

    >>> p = LossPanel(seeds=np.array([2, 0]), times=np.arange(3), total=np.zeros((2, 3)), weight=np.ones((2, 3)))
    >>> order, have = _prefixes({"a": p}, [0, 1, 2], 3)
    >>> order.tolist(), have
    ([0, 1, 2], {'a': 1})
    """
    order = np.array([int(s) for s in seed_order], dtype=np.int64)
    if order.size < max_seeds or np.unique(order).size != order.size:
        raise ValueError(f"seed_order: expected at least max_seeds ({max_seeds}) distinct seeds, found "
                         f"{order.size} ({np.unique(order).size} distinct)")
    order = order[:max_seeds]
    have = {}
    for n, panel in panels.items():
        held = set(panel.seeds.tolist())
        have[n] = next((i for i, s in enumerate(order.tolist()) if s not in held), order.size)
    return order, have


# --------------------------------------------------------------------------- the model confidence set
@dataclass(frozen=True)
class ModelConfidenceSet:
    """Result of :func:`model_confidence_set`: the configurations not distinguishable from the best.

    Attributes
    ----------
    included, excluded : list of str
        In the panels' order.
    pvalues : dict[str, float]
        Each configuration's MCS p-value (included: ``>= 1 - confidence``).
    eliminated : list of str
        The elimination order (the worst first), every configuration but the last.
    question : Question
    orientation : str
    n_seeds, n_days : int
        Seeds per configuration and days the set rests on.
    """

    included: list[str]
    excluded: list[str]
    pvalues: dict[str, float]
    eliminated: list[str]
    question: Question
    orientation: str
    n_seeds: int
    n_days: int
    method: str = "range statistic over the verdict's pairwise t (seeds counted), Bonferroni over the pairs"

    def to_dict(self) -> dict[str, Any]:
        return {**fields_dict(self, exclude=("question",)), "question": self.question.to_dict()}


@validate_params({"question": QUESTION, "orientation": _ORIENTATION})
def model_confidence_set(panels: Mapping[str, LossPanel], *, question: Question = DEFAULT_QUESTION,
                         orientation: str = "lower") -> ModelConfidenceSet:
    """The configurations not distinguishable from the best, over seeds x days panels (module docstring).

    Parameters
    ----------
    panels : mapping of str to LossPanel
        Each configuration's panel of one metric, on the same days; the seeds every configuration
        ran are used (at least 2), compared seed for seed.
    question : Question
        ``target``: the pairwise verdicts' (``period``: seeds on these days; ``future``: seeds and
        the market-time process); ``confidence``: when every configuration is equally good, the set
        keeps them all with at least this probability (Hansen et al.: the best ones, as the worse
        ones' evidence grows). Nothing is drawn: every p-value is the verdict's analytic t.
    orientation : {"lower", "higher"}

    Returns
    -------
    ModelConfidenceSet
    """
    names, common = _common(panels, what="a model confidence set")
    if common.size < 2:
        raise ValueError(f"panels: expected at least 2 seeds that every configuration ran, found {common.size}")
    K, k = len(names), int(common.size)
    parts = {n: _parts(_rows(panels[n], common), k) for n in names}
    sign = 1.0 if orientation == "lower" else -1.0
    P = np.ones((K, K))      # the verdict's two-sided p-value of each pair
    Zs = np.zeros((K, K))    # its z-equivalent, signed: > 0 when i is worse than j
    for i in range(K):
        for j in range(i + 1, K):
            d, cv = _pair(parts[names[i]], parts[names[j]], question.target)
            if cv.var > 0 and math.isfinite(cv.var):
                t = sign * d / math.sqrt(cv.var)
                p = 2.0 * float(stats.t.sf(abs(t), cv.df))
            else:   # no variance to measure: decided by the sign of an exact difference (or not at all)
                t, p = (0.0, 1.0) if d == 0 or math.isinf(cv.var) else (math.copysign(math.inf, sign * d), 0.0)
            z = float(stats.norm.isf(p / 2.0)) * (math.copysign(1.0, t) if t else 0.0)
            P[i, j] = P[j, i] = p
            Zs[i, j], Zs[j, i] = z, -z
    alive = list(range(K))
    pvalues: dict[str, float] = {}
    order = []
    running = 0.0
    while len(alive) > 1:
        idx = np.array(alive)
        m = len(alive) * (len(alive) - 1) // 2
        p_set = min(1.0, m * float(P[np.ix_(idx, idx)][np.triu_indices(len(alive), 1)].min()))
        running = max(running, p_set)
        worst = max(alive, key=lambda i: (Zs[i, idx].max(), i))
        pvalues[names[worst]] = running
        order.append(names[worst])
        alive.remove(worst)
    pvalues[names[alive[0]]] = 1.0
    included = [n for n in names if pvalues[n] >= question.alpha]
    return ModelConfidenceSet(included=included, excluded=[n for n in names if n not in included],
                              pvalues={n: pvalues[n] for n in names}, eliminated=order, question=question,
                              orientation=orientation, n_seeds=k, n_days=panels[names[0]].n_times)
