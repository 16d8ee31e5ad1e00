"""Compute to a verdict: seeds in batches, each pair stopped once it is decided, with error rates that hold.

A comparison looks at its pipelines after every batch of seeds (the *looks*). Looking again and
stopping at the first decision inflates the false-decision rate (replayed on the real daily store:
27% of identical pairs decided at a nominal 5%). This module spends the error rate over the looks
instead, and stops a pair for four reasons:

``better`` / ``worse``
    the verdict's interval (:func:`rolling_calib.core.verdict.decide`, same target and t quantile)
    at the look's *spent* level excludes 0;
``equivalent``
    (only with a ``margin``) that interval lies inside ``(-margin, margin)``;
``undecidable``
    the market-time part alone (seed noise removed) keeps the interval over the gap even with
    infinitely many seeds, at the gap's optimistic end (the measured gap plus one standard error
    of the seeds' part at this look): more seeds cannot help;
``undetermined``
    the budget is spent, or (futility) the predictive chance of deciding by ``max_seeds`` is below
    ``futility`` (20%): :func:`rolling_calib.core.verdict.predictive_probability`, which averages
    over the gap's uncertainty at this look (the seeds still to come, on the same days).

**Error control across looks: alpha spending** (Lan and DeMets 1983), by default with the
Hwang-Shih-DeCani function ``alpha(u) = alpha (1 - exp(-gamma u)) / (1 - exp(-gamma))``, ``gamma = -2``
(between Pocock's early stops and O'Brien-Fleming's late ones), or the O'Brien-Fleming-type function
``alpha(u) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(u))`` (``StoppingRule.spending``), on the *planned
information fraction* ``u_j = k_j / max_seeds`` (:func:`planned_fraction`: exact for the seeds'
part and the period target; below the true fraction, so conservative, when the future target's
market-time part, measured on the same days at every look, adds to every look alike). Seeds are
added to the same days, so for nested seed sets ``Cov(D_i, D_j) = Var(D_j)`` (``i < j``): the
standardised statistics have the canonical joint law of a Brownian motion observed at the
information times ``V_max / V_j``. The boundary ``c_j`` solves ``P(|Z_1| <= c_1, ..., |Z_{j-1}| <= c_{j-1}, |Z_j| > c_j) =
alpha(u_j) - alpha(u_{j-1})`` under that law (the Armitage-McPherson-Rowe recursion, numerically
integrated on a grid), and
the look's verdict uses the t quantile at the nominal level ``2 (1 - Phi(c_j))`` -- the verdict's
own Student t with its degrees of freedom. The futility and undecidable stops are non-binding: they
only ever stop a pair *without* a decision, so they cannot raise the false-decision rate.

The rule's settings (seeds at the first look, per look and at most, spending, futility, margin)
are one :class:`~rolling_calib.core.stopping.StoppingRule`; the question the stops answer (target,
and ``1 - alpha`` spent over the looks) one :class:`~rolling_calib.core.question.Question`.

**Across pairs: Bonferroni** -- each pair spends ``alpha / m`` for ``m`` pairs (valid under any
dependence between pairs; conservative when pairs share pipelines).

Assumptions: the verdict's interval is valid at a fixed sample (measured by
``bench/verdict_calibration.py``); the information fraction is the planned one, never an
estimate (an estimated fraction from 2 degrees of freedom spent too much early); seeds are exchangeable (a random order of the seeds is a random
sample).

Examples
--------
Two pipelines 1 standard deviation of a run apart, 20 seeds each; A/A (identical) too:

>>> from rolling_calib.core.verdict import LossPanel
>>> rng = np.random.default_rng(0)
>>> day = rng.normal(0, 0.2, 60)
>>> def panel(shift):
...     return LossPanel.from_arrays(seeds=range(20), total=10 + day + shift + rng.normal(0, 1, (20, 1))
...                                  + rng.normal(0, 1, (20, 60)))
>>> r = replay({"a": panel(-2.0), "b": panel(0.0)}, rule=StoppingRule(first=3, batch=2, max_seeds=20))
>>> r.outcomes[("a", "b")], r.seeds_used["a"] < 20
('better', True)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from rolling_calib.core.jsonable import fields_dict, jsonable
from rolling_calib.core.question import DEFAULT_QUESTION, QUESTION, Question
from rolling_calib.core.stopping import DEFAULT_RULE, FUTILITY, SPENDINGS, STOPPING_RULE, StoppingRule
from rolling_calib.core.validation import SEED, Options, validate_params
from rolling_calib.core.verdict import UNDECIDABLE_CONFIDENCE, LossPanel, decide, predictive_probability, time_part_low

__all__ = ["FUTILITY", "OUTCOMES", "SPENDING", "Look", "SequentialResult", "SequentialState", "StoppingRule",
           "boundaries", "hwang_shih_decani_spending", "obrien_fleming_spending", "planned_fraction", "replay"]

#: What a pair can end as (``a`` against ``b``).
OUTCOMES = ("better", "worse", "equivalent", "undecidable", "undetermined")
_GRID = 401
#: The spending functions by name (the names a :class:`StoppingRule` may give: :data:`SPENDINGS`).
SPENDING: dict[str, Any] = {}
_ORIENTATION = Options("lower", "higher")


def hwang_shih_decani_spending(u: float, alpha: float, gamma: float = -2.0) -> float:
    """Hwang-Shih-DeCani spending ``alpha (1 - exp(-gamma u)) / (1 - exp(-gamma))`` (gamma -2: between Pocock's
    early stops and O'Brien-Fleming's late ones).

    >>> round(hwang_shih_decani_spending(1.0, 0.05), 6), round(hwang_shih_decani_spending(0.25, 0.05), 5)
    (0.05, 0.00508)
    """
    if u <= 0:
        return 0.0
    u = min(u, 1.0)
    return float(alpha * (1.0 - math.exp(-gamma * u)) / (1.0 - math.exp(-gamma)))


def obrien_fleming_spending(u: float, alpha: float) -> float:
    """Lan-DeMets O'Brien-Fleming-type spending ``2 - 2 Phi(z_{1-alpha/2} / sqrt(u))`` (0 at 0, ``alpha`` at 1).

    >>> round(obrien_fleming_spending(1.0, 0.05), 6), round(obrien_fleming_spending(0.25, 0.05), 6)
    (0.05, 8.9e-05)
    """
    if u <= 0:
        return 0.0
    u = min(u, 1.0)
    return float(2.0 - 2.0 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(u)))


SPENDING.update({"obrien-fleming": obrien_fleming_spending, "hwang-shih-decani": hwang_shih_decani_spending})
assert set(SPENDING) == set(SPENDINGS), "every spending a StoppingRule may name has a function here"


@functools.lru_cache(maxsize=4096)
def _state(fractions: tuple[float, ...], alpha: float, spending: str) -> tuple[tuple[float, ...], Any, Any, float]:
    """Armitage-McPherson-Rowe recursion on a grid: the boundaries so far, the continuation grid of the score
    ``S_j = Z_j sqrt(u_j)`` (Brownian motion at the information times), its sub-density over the paths not
    yet stopped, and the error spent. Cached by prefix, so each new look adds one step."""
    from scipy.optimize import brentq

    if not fractions:
        return (), None, None, 0.0
    bounds, grid, dens, spent = _state(fractions[:-1], alpha, spending)
    u = fractions[-1]
    prev_u = fractions[-2] if len(fractions) > 1 else 0.0
    target = SPENDING[spending](u, alpha) - spent
    delta = max(u - prev_u, 1e-12)
    sd = math.sqrt(delta)
    if target <= 1e-15:
        c = math.inf
    elif grid is None:
        c = float(stats.norm.isf(target / 2))
    else:
        def cross(c_: float) -> float:
            edge = c_ * math.sqrt(u)
            tail = stats.norm.sf((edge - grid) / sd) + stats.norm.cdf((-edge - grid) / sd)
            return float(np.trapz(dens * tail, grid)) - target

        c = 0.0 if cross(0.0) < 0 else float(brentq(cross, 0.0, 40.0, xtol=1e-8))
    edge = c * math.sqrt(u) if math.isfinite(c) else 10.0 * math.sqrt(u)
    new_grid = np.linspace(-edge, edge, _GRID)
    if grid is None:
        new_dens = stats.norm.pdf(new_grid, scale=math.sqrt(u))
    else:
        kernel = np.exp(-0.5 * ((new_grid[:, None] - grid[None, :]) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))
        new_dens = np.trapz(kernel * dens[None, :], grid, axis=1)
    return bounds + (c,), new_grid, new_dens, spent + (target if math.isfinite(c) else 0.0)


def _boundaries(fractions: tuple[float, ...], alpha: float, spending: str) -> tuple[float, ...]:
    return _state(fractions, alpha, spending)[0]


def boundaries(fractions: Any, *, alpha: float = 0.05, spending: str = "obrien-fleming") -> np.ndarray:
    """Two-sided z boundaries at the information ``fractions`` (increasing, last <= 1) spending ``alpha``.

    >>> b = boundaries([0.25, 0.5, 0.75, 1.0])
    >>> b.round(2).tolist()     # Lan-DeMets O'Brien-Fleming type: strict early, near 1.96 at the end
    [3.92, 2.77, 2.3, 2.04]
    """
    fr = tuple(float(min(max(f, 1e-9), 1.0)) for f in np.atleast_1d(fractions))
    if any(b < a for a, b in zip(fr, fr[1:])):
        fr = tuple(np.maximum.accumulate(fr))
    return np.asarray(_boundaries(fr, float(alpha), spending))


@dataclass(frozen=True)
class Look:
    """One look at one pair: seeds per pipeline, the verdict's difference and spent-level interval."""

    pair: tuple[str, str]
    seeds: int
    fraction: float
    boundary: float
    level: float
    difference: float
    ci_low: float
    ci_high: float
    outcome: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (the pair as ``"a vs b"``, NaN and inf as None)."""
        return {**fields_dict(self, exclude=("pair",)), "pair": " vs ".join(self.pair)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Look:
        """The look :meth:`to_dict` recorded (a None number read back as inf: an unspent boundary)."""
        nums = {k: (math.inf if data.get(k) is None and k == "boundary" else
                    math.nan if data.get(k) is None else float(data[k]))
                for k in ("fraction", "boundary", "level", "difference", "ci_low", "ci_high")}
        pair = data["pair"]
        return cls(pair=tuple(pair.split(" vs ", 1)) if isinstance(pair, str) else tuple(pair),
                   seeds=int(data["seeds"]), outcome=str(data["outcome"]), why=str(data.get("why", "")), **nums)


@dataclass(frozen=True)
class SequentialResult:
    """Result of :func:`replay`: per pair the outcome, the look it stopped at and why; seeds per pipeline.

    Attributes
    ----------
    outcomes : dict[(str, str), str]
        One of :data:`OUTCOMES`, ``a`` against ``b``.
    stopped : dict[(str, str), Look]
        The look each pair stopped at.
    seeds_used : dict[str, int]
        Seeds each pipeline ran.
    full_grid : int
        ``max_seeds``: seeds per pipeline without stopping.
    looks : list of Look
        Every look at every pair, in order.
    settings : dict
        The rule, the question and the rest of the comparison's settings, as recorded.
    """

    outcomes: dict[tuple[str, str], str]
    stopped: dict[tuple[str, str], Look]
    seeds_used: dict[str, int]
    full_grid: int
    looks: list[Look] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def fraction_of_grid(self) -> float:
        """Seeds run over the full grid's (every pipeline at ``max_seeds``)."""
        return sum(self.seeds_used.values()) / (self.full_grid * len(self.seeds_used))

    def to_dict(self) -> dict[str, Any]:
        return jsonable({
            "outcomes": {f"{a} vs {b}": o for (a, b), o in self.outcomes.items()},
            "stopped": {f"{a} vs {b}": look.to_dict() for (a, b), look in self.stopped.items()},
            "seeds_used": self.seeds_used, "full_grid": self.full_grid,
            "fraction_of_grid": self.fraction_of_grid, "settings": self.settings,
        })


def _decide_look(a: LossPanel, b: LossPanel, names: tuple[str, str], *, alpha: float, rule: StoppingRule,
                 previous: tuple[float, ...], orientation: str, question: Question) -> tuple[Look, tuple[float, ...]]:
    """The verdict at this look: information fraction, spent boundary, outcome (``alpha``: the pair's share)."""
    k = min(a.n_seeds, b.n_seeds)
    max_seeds, margin, futility, spending = rule.max_seeds, rule.margin, rule.futility, rule.spending
    v = decide(a, b, names=names, orientation=orientation, question=question)   # the parts (its level unused)
    cv = v.variance
    u = planned_fraction(k, max_seeds)
    fractions = previous + (u,)
    c = float(boundaries(fractions, alpha=alpha, spending=spending)[-1])
    level = 1.0 - 2.0 * float(stats.norm.sf(c)) if math.isfinite(c) else 1.0 - 1e-12
    level = min(max(level, 1e-6), 1.0 - 1e-12)
    half = cv.half_width(level)          # the verdict's own t interval, at the spent level
    d = v.difference
    low, high = d - half, d + half
    lower_wins = orientation == "lower"
    outcome, why = "open", ""
    if (high < 0 if lower_wins else low > 0):
        outcome, why = "better", f"interval at the spent level {level:.4f} excludes 0"
    elif (low > 0 if lower_wins else high < 0):
        outcome, why = "worse", f"interval at the spent level {level:.4f} excludes 0"
    elif margin is not None and -margin < low and high < margin:
        outcome, why = "equivalent", f"interval at the spent level {level:.4f} inside ±{margin:g}"
    elif k >= max_seeds:
        outcome, why = "undetermined", f"budget of {max_seeds} seeds spent"
    else:
        # non-binding stops, judged at an optimistic gap: the measured one plus one standard error of the seeds
        final_level = 1.0 - alpha
        optimistic = abs(d) + math.sqrt(max(cv.var_seeds, 0.0))
        chance = predictive_probability(gap=d, n=max_seeds, k=k, per_seed_var=cv.per_seed_var,
                                        time_variance=cv.var_time, time_df=cv.df_time, confidence=final_level)
        if _time_alone_covers(cv, n_days=min(a.total.shape[1], b.total.shape[1]), level=final_level,
                              gap=optimistic):
            outcome, why = "undecidable", ("the market-time part alone keeps the interval over the gap, even at "
                                           "the gap's optimistic end")
        elif chance < futility:
            outcome, why = "undetermined", (f"{chance:.0%} predictive chance to decide by {max_seeds} seeds "
                                            "(futility)")
    look = Look(names, k, u, c, level, d, low, high, outcome, why)
    return look, fractions


def planned_fraction(k: int, max_seeds: int) -> float:
    """The information fraction of a look at ``k`` of ``max_seeds`` planned seeds: ``k / max_seeds`` (at most 1).

    It is the seeds' part's exact fraction (``V_max / V_k = (S / max) / (S / k)``) and the period
    target's whole one. For the future target the market-time part, measured on the same days at
    every look, adds the same information to each look, so the true fraction
    ``(S/max + v_time) / (S/k + v_time)`` is larger: ``k / max`` understates it, which spends less
    at the early looks and computes the boundaries under correlations ``sqrt(u_i / u_j)`` below the
    true ones -- conservative. The estimated fraction (the same ratio from this look's 2-degree-of-
    freedom seed variance) is not used: it is largest exactly when the seed variance is low by
    chance, and spent too much at the first look (measured in docs/pair_levels.md).

    >>> planned_fraction(3, 20), planned_fraction(20, 20), planned_fraction(25, 20)
    (0.15, 1.0, 1.0)
    """
    return float(min(k / max_seeds, 1.0))




def _time_alone_covers(cv: Any, *, n_days: int, level: float, gap: float) -> bool:
    """Whether the market-time part alone keeps the final interval over ``gap``, judged cautiously.

    With every seed the seeds' noise is removed exactly, so the final verdict's market-time part
    has the degrees of freedom of its time estimate alone (``T / (1 + 2m/3)`` for the kernel,
    ``B - 1`` for month blocks), not this look's (which count the few seeds' noise removal and can
    fall to 1: ``t_1 = 12.7``). The part itself is taken at its lower confidence bound
    ``v df / chi2_df(UNDECIDABLE_CONFIDENCE)``, so a noisy early estimate cannot stop a pair that
    more seeds would decide (measured with ``bench/sequential_replay.py``: with this look's
    degrees of freedom and point estimate, 13% of pairs 6 standard errors apart stopped as
    undecidable on the time-dominated preset)::

        t_{nu_inf}(level) sqrt(v_low) >= gap

    >>> from rolling_calib.core.variance import crossed_variance
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(0, 1.0, 120) + rng.normal(0, 0.1, (4, 120))
    >>> cv = crossed_variance(x, target="future")
    >>> _time_alone_covers(cv, n_days=120, level=0.95, gap=0.01), _time_alone_covers(cv, n_days=120, level=0.95, gap=1.0)
    (True, False)
    """
    if not cv.var_time > 0:
        return False
    v_low = time_part_low(cv.var_time, cv.df_time)
    df_limit = (cv.n_blocks - 1.0) if cv.drift else n_days / (1.0 + 2.0 * cv.bandwidth / 3.0)
    return float(stats.t.ppf(0.5 + level / 2, max(df_limit, 1.0))) * math.sqrt(v_low) >= gap


class SequentialState:
    """The stopping rule between looks: which pairs are open, how many seeds each pipeline has, the looks so far.

    One implementation of the rule for :func:`replay` (finished panels, seeds revealed in a random
    order) and for a live run (``rolling-calib run --until-decided``: the seeds trained so far).
    :meth:`wanted` says how many seeds each pipeline needs at the next look; :meth:`look` judges
    every open pair on the panels of those seeds and plans the next batch (``rule.batch`` more
    seeds for every pipeline that is still in an open pair, up to ``rule.max_seeds``).

    Parameters
    ----------
    names : sequence of str
        The pipelines.
    rule : StoppingRule
        Seeds at the first look, per look and at most; spending, futility, margin.
    question : Question
        The target every look's verdict answers; ``1 - confidence`` is spent over the looks and
        the pairs.
    orientation, pairs
        As in :func:`replay`.

    Examples
    --------
    >>> s = SequentialState(["a", "b"], rule=StoppingRule(first=3, batch=2, max_seeds=5))
    >>> s.wanted(), s.done
    ({'a': 3, 'b': 3}, False)
    """

    @validate_params({"rule": STOPPING_RULE, "question": QUESTION, "orientation": _ORIENTATION})
    def __init__(self, names: Any, *, rule: StoppingRule = DEFAULT_RULE, question: Question = DEFAULT_QUESTION,
                 orientation: str = "lower", pairs: list[tuple[str, str]] | None = None) -> None:
        names = list(names)
        self.names = names
        self.pairs = (list(map(tuple, pairs)) if pairs is not None
                      else [(a, b) for i, a in enumerate(names) for b in names[i + 1:]])
        self.rule, self.question, self.orientation = rule, question, orientation
        self.alpha = (1.0 - question.confidence) / max(len(self.pairs), 1)   # the pair's share of 1 - confidence
        self.n_seeds = {n: rule.seeds_at(1) for n in names}
        self.fractions: dict[tuple[str, str], tuple[float, ...]] = {p: () for p in self.pairs}
        self.pair_looks: dict[tuple[str, str], int] = {p: 0 for p in self.pairs}
        self.outcomes: dict[tuple[str, str], str] = {}
        self.stopped: dict[tuple[str, str], Look] = {}
        self.looks: list[Look] = []
        self._order: list[tuple[int, int]] = []   # (look number, pair index) of each of ``looks``

    @property
    def n_looks(self) -> int:
        """Looks taken so far: the most any pair has had (a lockstep run's number of looks)."""
        return max(self.pair_looks.values(), default=0)

    @property
    def open_pairs(self) -> list[tuple[str, str]]:
        """The pairs not stopped yet."""
        return [p for p in self.pairs if p not in self.outcomes]

    @property
    def open_names(self) -> list[str]:
        """The pipelines in an open pair (the ones that get the next batch)."""
        wanted = {n for p in self.open_pairs for n in p}
        return [n for n in self.names if n in wanted]

    @property
    def done(self) -> bool:
        """Every pair stopped."""
        return not self.open_pairs

    def wanted(self) -> dict[str, int]:
        """Seeds per pipeline the next look needs: ``{name: n}`` for the pipelines in an open pair."""
        return {n: self.n_seeds[n] for n in self.open_names}

    def seeds_at(self, look: int) -> int:
        """Seeds per pipeline at a pair's look number ``look`` (:meth:`StoppingRule.seeds_at`)."""
        return self.rule.seeds_at(look)

    def next_seeds(self, pair: tuple[str, str]) -> int:
        """Seeds of each of its pipelines the open ``pair``'s next look reads."""
        return self.seeds_at(self.pair_looks[pair] + 1)

    def look(self, panels: Mapping[str, LossPanel]) -> list[Look]:
        """Judge every open pair on ``panels`` (each pipeline's first :meth:`wanted` seeds, in the order
        they were revealed: only the first ``n`` rows of a panel are read), then plan the next batch.

        Returns
        -------
        list of Look
            This look's verdict on each pair that was open.
        """
        if self.done:
            raise ValueError("every pair has stopped: no look left")
        return [self.look_pair(pair, panels) for pair in self.open_pairs]

    def look_pair(self, pair: tuple[str, str], panels: Mapping[str, LossPanel]) -> Look:
        """Judge one open pair at its next look (:meth:`next_seeds` seeds of each side), then plan its pipelines.

        A pair's look ``k`` reads exactly the first ``first + (k - 1) * batch`` seeds of both sides
        and the pair's own earlier looks, whatever the other pairs did: judging the pairs one at a
        time as their seeds arrive (a live run that does not wait for every pipeline) gives the
        same looks as :meth:`look` judging them together. ``looks``, ``outcomes`` and ``stopped``
        are kept in that order (look number, then the pair's place in ``pairs``) either way.

        Examples
        --------
        >>> from rolling_calib.core.verdict import LossPanel
        >>> rng = np.random.default_rng(1)
        >>> panels = {n: LossPanel.from_arrays(seeds=range(6), total=rng.normal(10 + shift, 1, (6, 30)))
        ...           for n, shift in (("a", 0.0), ("b", 0.0), ("c", -5.0))}
        >>> rule = StoppingRule(first=3, batch=2, max_seeds=6)
        >>> together = SequentialState(list(panels), rule=rule)
        >>> while not together.done:
        ...     _ = together.look(panels)
        >>> apart = SequentialState(list(panels), rule=rule)
        >>> while not apart.done:
        ...     _ = apart.look_pair(apart.open_pairs[-1], panels)   # the last open pair first
        >>> apart.looks == together.looks and apart.outcomes == together.outcomes
        True
        """
        pair = tuple(pair)
        if pair not in self.pair_looks:
            raise ValueError(f"pair {pair!r}: not one of this rule's pairs")
        if pair in self.outcomes:
            raise ValueError(f"pair {' vs '.join(pair)}: stopped ({self.outcomes[pair]}): no look left")
        a, b = pair
        number = self.pair_looks[pair] + 1
        k = self.seeds_at(number)
        for n in pair:
            if panels[n].n_seeds < k:
                raise ValueError(f"panel {n!r}: expected at least {k} seeds at look {number}, "
                                 f"found {panels[n].n_seeds}")
        look, self.fractions[pair] = _decide_look(
            panels[a].select(seeds=np.arange(k)), panels[b].select(seeds=np.arange(k)), pair, alpha=self.alpha,
            rule=self.rule, previous=self.fractions[pair], orientation=self.orientation, question=self.question)
        self.pair_looks[pair] = number
        where = (number, self.pairs.index(pair))
        at = sum(1 for o in self._order if o < where)
        self._order.insert(at, where)
        self.looks.insert(at, look)
        if look.outcome != "open":
            self.outcomes[pair], self.stopped[pair] = look.outcome, look
            stops = sorted(self.stopped, key=lambda p: (self.pair_looks[p], self.pairs.index(p)))
            self.outcomes = {p: self.outcomes[p] for p in stops}
            self.stopped = {p: self.stopped[p] for p in stops}
        open_pairs = self.open_pairs
        for n in pair:   # the seeds each pipeline's next look needs: its open pairs' furthest next look
            nexts = [self.next_seeds(p) for p in open_pairs if n in p]
            if nexts:
                self.n_seeds[n] = max(nexts)
        return look

    def used(self) -> dict[str, int]:
        """Seeds each pipeline ran: what its last look read (its count stops growing when its pairs stop)."""
        seen = {n: 0 for n in self.names}
        for look in self.looks:
            for n in look.pair:
                seen[n] = max(seen[n], look.seeds)
        first = self.rule.seeds_at(1)
        return {n: max(seen[n], first) for n in self.names}

    def settings(self) -> dict[str, Any]:
        """The rule's settings (recorded with its result): the rule, the question, the direction, the pairs' correction.

        >>> SequentialState(["a", "b"]).settings()["question"]
        {'target': 'period', 'confidence': 0.95}
        """
        return {"rule": self.rule.to_dict(), "question": self.question.to_dict(), "orientation": self.orientation,
                "pairs": "Bonferroni"}

    def result(self, **settings: Any) -> SequentialResult:
        """The :class:`SequentialResult` so far (``settings`` added to the rule's)."""
        return SequentialResult(outcomes=dict(self.outcomes), stopped=dict(self.stopped), seeds_used=self.used(),
                                full_grid=self.rule.max_seeds, looks=list(self.looks),
                                settings={**self.settings(), **settings})


@validate_params({"rule": STOPPING_RULE, "question": QUESTION, "orientation": _ORIENTATION, "order_seed": SEED})
def replay(panels: Mapping[str, LossPanel], *, rule: StoppingRule = DEFAULT_RULE,
           question: Question = DEFAULT_QUESTION, orientation: str = "lower", order_seed: int = 0,
           pairs: list[tuple[str, str]] | None = None) -> SequentialResult:
    """Replay the stopping rule on finished panels: seeds revealed ``rule.first``, then ``rule.batch`` at a time.

    Parameters
    ----------
    panels : dict[str, LossPanel]
        Each pipeline's finished panel (its seeds in any order; every pipeline should hold the same
        seeds, so pairs are compared seed for seed).
    rule : StoppingRule
        Seeds per pipeline at the first look, added per look, and the budget; spending, futility, margin.
    question : Question
        The target every look answers; ``confidence`` is ``1 - alpha`` over all looks and pairs.
    orientation : {"lower", "higher"}
    order_seed : int
        Seed of the random order in which seeds are revealed (the same order for every pipeline).
    pairs : list of (str, str), optional
        Default: every pair of pipelines.

    Returns
    -------
    SequentialResult
    """
    names = list(panels)
    state = SequentialState(names, rule=rule, question=question, orientation=orientation, pairs=pairs)
    max_seeds = rule.max_seeds
    common = set.intersection(*(set(p.seeds.tolist()) for p in panels.values()))
    if len(common) < max_seeds:
        raise ValueError(f"max_seeds: expected at most the {len(common)} seeds every pipeline ran, found {max_seeds}")
    seeds = np.random.default_rng(order_seed).permutation(sorted(common))[:max_seeds]
    ordered = {n: p.select(seeds=np.array([int(np.flatnonzero(p.seeds == s)[0]) for s in seeds]))
               for n, p in panels.items()}
    while not state.done:
        state.look(ordered)
    return state.result(order_seed=order_seed)
