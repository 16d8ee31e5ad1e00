"""Guards: measurements that say when a comparison's numbers are about the wrong thing.

A precise number about the wrong thing is worse than none (docs/method.md §4, §5). Each guard
here is a pure function of predictions, labels or per-run summaries; it returns what it
measured and whether the problem is present, and the analysis layer turns that into a warning
with what to do. Thresholds are declared once, below, with their reason.

**Scale mismatch** (:func:`scale_check`). With population moments over the scored rows::

    QL = (mean p - mean y)^2 + var(p) + var(y) - 2 cov(p, y)

A forecast of the label's conditional mean ``E[y | x]`` has the label's mean and never varies
more than the label (``var(E[y|x]) <= var(y)``). Predictions whose mean sits more than one
label standard deviation from the label's mean (``level_ratio = (mean p - mean y)^2 / var(y) >
1``) or whose standard deviation is more than twice the label's (``spread_ratio = var(p) / var(y)
> 4``: more than any conditional-mean forecast, with room for a noisy fit) are on another scale:
QL then measures their level or spread, not their skill. ``level_share`` and
``spread_share`` are those two terms as fractions of QL (``label_share = var(y) / QL`` the
label's own), and ``slope = cov(p, y) / var(p)``
is the regression slope of the label on the prediction (about 1 for a well-scaled forecast).

**Degenerate seeds** (:func:`seed_spread`). Runs of one pipeline whose predictions are
identical (or nearly: the mean over rows of the between-seed std, relative to the std of the
predictions, below ``DEGENERATE_LIMIT``) have no seed variance: pairwise accuracies over seed
pairs are then 0 or 1 by construction and mean nothing.

**Constant predictions** (:func:`constant_check`). A run whose predictions are the same for every
row of each timestamp (the cross-section's range at most ``CONSTANT_RTOL`` of the largest
prediction, float32 rounding) has learned nothing from the features: e.g. a booster stopped early
before its first split. Its seeds then agree too, but not because the model ignores the seed.

**Identical pipelines** (:func:`same_predictions`, :func:`same_rankings`). Two pipelines whose runs
predict the same values on the same rows (to ``IDENTICAL_RTOL`` of the largest prediction) are one
model under two names, e.g. a hyperparameter the model ignored: their verdict is "no difference" by
construction. So are two whose predictions order every timestamp's cross-section the same way (ties
included, to the same float rounding), whatever their values: e.g. two boosters stopped at their
first round whose leaves differ by a learning rate. Their rank IC and any backtest that trades on
the ranking (Qlib's ``TopkDropoutStrategy``) cannot differ; an IC difference is float noise or the
monotone map between them.

**No skill** (:func:`skill_check`). A pipeline whose mean IC is at or below 0, or whose QL is
no lower than the loss of predicting the label's mean for every row (``var(y)``), does not
predict.

**Where the seed variance comes from** (:func:`seed_variance_components`). Per run ``r`` and
period ``k`` (row weights ``w_k``, ``sum_k w_k = 1``), regress the predictions on the label inside
the period, ``p = a + b y + e`` (``b = cov(p, y) / var(y)``); QL over the periods splits exactly
into three parts::

    QL_r = B_r + T_r + N_r,   B = sum_k w_k bias_rk^2                  (offset: the mean residual)
                              T = sum_k w_k var_k(y) (1 - b_rk)^2        (co-movement with the label)
                              N = sum_k w_k var_k(e_r)                   (scale of the prediction noise)

Each part's share of the seed variance is ``Cov(part, QL) / Var(QL)``; the shares add up to 1 (a
share can be negative, or above 1, when parts move against each other). A bias correction can
only remove the offset part; what it leaves, ``T + N``, is split the same way into the shares of
co-movement and noise scale of *its* seed variance (what :meth:`VarianceComponents.cause` reports).

Examples
--------
>>> y = np.array([0.01, -0.02, 0.015, -0.005])
>>> check = scale_check(y * 0 + 0.07, y)      # a rank-normalised level scored against raw returns
>>> check.mismatch, round(check.level_share, 3)
(True, 0.963)
>>> scale_check(0.3 * y, y).mismatch
False
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rolling_calib.core.jsonable import fields_dict

__all__ = [
    "CONSTANT_RTOL",
    "DEGENERATE_LIMIT",
    "IDENTICAL_RTOL",
    "same_rankings",
    "LEVEL_LIMIT",
    "MOMENT_FIELDS",
    "SPREAD_LIMIT",
    "ConstantCheck",
    "Moments",
    "ScaleCheck",
    "SeedSpread",
    "SkillCheck",
    "VarianceComponents",
    "constant_check",
    "constant_check_of_ranges",
    "moments",
    "same_predictions",
    "scale_check",
    "seed_spread",
    "seed_variance_components",
    "skill_check",
]

#: ``(mean p - mean y)^2 / var(y)`` above which predictions sit on another level than the label.
LEVEL_LIMIT: float = 1.0
#: ``var(p) / var(y)`` above which predictions are on another scale: their std more than twice the label's
#: (a conditional-mean forecast never varies more than the label; a factor of two leaves room for noisy fits).
SPREAD_LIMIT: float = 4.0
#: Mean between-seed std of the predictions relative to their std, below which seeds are degenerate.
DEGENERATE_LIMIT: float = 1e-6
#: Largest cross-sectional range of a timestamp's predictions, relative to the largest |prediction|, of a
#: constant run (float32 rounding: 2**-23 ~ 1.2e-7).
CONSTANT_RTOL: float = 1e-7
#: Largest |difference| of two pipelines' predictions of the same rows, relative to the largest |prediction|,
#: below which they are the same model (float rounding of one computation done twice).
IDENTICAL_RTOL: float = 1e-6
#: The sums :class:`Moments` holds, in order.
MOMENT_FIELDS = ("n", "sp", "sy", "spp", "syy", "spy")


def _pct(frac: float) -> str:
    """A share as a percentage with enough digits to tell 99.99% from 100%."""
    if not math.isfinite(frac):
        return "n/a"
    pct = 100 * frac
    return f"{pct:.1f}%" if 1 <= pct <= 99 else f"{pct:.3g}%"


def _vector(name: str, values: Any) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).ravel()
    if not np.isfinite(arr).all():
        raise ValueError(f"{name}: expected finite values, found {int((~np.isfinite(arr)).sum())} that are not")
    return arr


# --------------------------------------------------------------------------- moments
@dataclass(frozen=True)
class Moments:
    """Sufficient statistics of (prediction, label) pairs: ``n`` and the sums of ``p, y, p^2, y^2, p y``.

    They add: the moments of several runs or days are the sums of theirs (``a + b``).
    """

    n: float
    sp: float
    sy: float
    spp: float
    syy: float
    spy: float

    def __add__(self, other: Moments) -> Moments:
        return Moments(*(getattr(self, f) + getattr(other, f) for f in self.__dataclass_fields__))

    @property
    def mean_p(self) -> float:
        return self.sp / self.n

    @property
    def mean_y(self) -> float:
        return self.sy / self.n

    @property
    def var_p(self) -> float:
        return max(self.spp / self.n - self.mean_p ** 2, 0.0)

    @property
    def var_y(self) -> float:
        return max(self.syy / self.n - self.mean_y ** 2, 0.0)

    @property
    def cov(self) -> float:
        return self.spy / self.n - self.mean_p * self.mean_y

    @property
    def ql(self) -> float:
        """``mean((y - p)^2)``."""
        return (self.syy - 2 * self.spy + self.spp) / self.n


def moments(predictions: Any, labels: Any) -> Moments:
    """:class:`Moments` of paired arrays.

    >>> m = moments([1.0, 2.0], [1.0, 4.0])
    >>> m.n, m.ql, m.cov
    (2.0, 2.0, 0.75)
    """
    p, y = _vector("predictions", predictions), _vector("labels", labels)
    if p.size != y.size or p.size == 0:
        raise ValueError(f"predictions, labels: expected equal non-zero lengths, found {p.size} and {y.size}")
    return Moments(float(p.size), float(p.sum()), float(y.sum()), float(p @ p), float(y @ y), float(p @ y))


# --------------------------------------------------------------------------- scale
@dataclass(frozen=True)
class ScaleCheck:
    """Result of :func:`scale_check` (see the module docstring)."""

    n: int
    mean_prediction: float
    mean_label: float
    std_prediction: float
    std_label: float
    ql: float
    level_share: float
    spread_share: float
    label_share: float
    level_ratio: float
    spread_ratio: float
    slope: float
    mismatch: bool

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)

    def finding(self, *, unit: str = "") -> str:
        """What was measured, in words: QL split into its four terms, with their shares of QL.

        ``QL = (mean p - mean y)^2 + var(p) + var(y) - 2 cov(p, y)``; the shares add up to 100%.
        """
        u = f" {unit}²" if unit else ""
        cov2 = self.std_label ** 2 + self.std_prediction ** 2 + self.level_share * self.ql - self.ql
        terms = [("squared gap between mean prediction and mean label", self.level_share * self.ql),
                 ("prediction variance", self.std_prediction ** 2), ("label variance", self.std_label ** 2)]
        parts = " + ".join(f"{name} {v:.3g} ({_pct(v / self.ql)})" for name, v in terms)
        return (f"QL {self.ql:.4g}{u} = {parts} - 2 x covariance {cov2:.3g} ({_pct(cov2 / self.ql)}); mean prediction "
                f"{self.mean_prediction:.3g} against a mean label of {self.mean_label:.3g}, prediction std "
                f"{self.std_prediction:.3g} against a label std of {self.std_label:.3g}; regression slope of label on "
                f"prediction {self.slope:.3g}")


def scale_check(predictions: Any = None, labels: Any = None, *, pooled: Moments | None = None) -> ScaleCheck:
    """Are predictions and labels on the same scale? (see the module docstring)

    Parameters
    ----------
    predictions, labels : array-like, optional
        Paired values; or
    pooled : Moments, optional
        Their sufficient statistics (e.g. summed over every run of a pipeline).

    Returns
    -------
    ScaleCheck
        ``mismatch`` when ``level_ratio > LEVEL_LIMIT`` (1) or ``spread_ratio > SPREAD_LIMIT`` (4).
    """
    m = pooled if pooled is not None else moments(predictions, labels)
    ql = m.ql
    var_y, var_p = m.var_y, m.var_p
    gap2 = (m.mean_p - m.mean_y) ** 2
    nan = math.nan
    level_ratio = gap2 / var_y if var_y > 0 else (math.inf if gap2 > 0 else nan)
    spread_ratio = var_p / var_y if var_y > 0 else (math.inf if var_p > 0 else nan)
    return ScaleCheck(
        n=int(m.n), mean_prediction=m.mean_p, mean_label=m.mean_y, std_prediction=math.sqrt(var_p),
        std_label=math.sqrt(var_y), ql=ql,
        level_share=gap2 / ql if ql > 0 else nan, spread_share=var_p / ql if ql > 0 else nan,
        label_share=var_y / ql if ql > 0 else nan,
        level_ratio=level_ratio, spread_ratio=spread_ratio,
        slope=m.cov / var_p if var_p > 0 else nan,
        mismatch=bool(level_ratio > LEVEL_LIMIT or spread_ratio > SPREAD_LIMIT),
    )


# --------------------------------------------------------------------------- seeds
@dataclass(frozen=True)
class SeedSpread:
    """Result of :func:`seed_spread`."""

    n_seeds: int
    n_rows: int
    max_abs_difference: float
    relative_spread: float
    identical: bool
    degenerate: bool

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


def seed_spread(predictions: Any) -> SeedSpread:
    """How different are the seeds' predictions of the same rows?

    Parameters
    ----------
    predictions : array, shape (n_seeds, n_rows)
        Row ``s``: seed ``s``'s predictions, the same rows in the same order for every seed.

    Returns
    -------
    SeedSpread
        ``max_abs_difference = max |p_s - p_0|``; ``relative_spread = mean_rows std_s(p) /
        std(p)`` (ddof 0; 0 when the predictions do not vary at all); ``identical`` when the
        maximum difference is 0; ``degenerate`` when ``relative_spread < DEGENERATE_LIMIT``.

    Examples
    --------
    >>> seed_spread([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]).identical
    True
    >>> round(seed_spread([[1.0, 2.0, 3.0], [1.5, 2.0, 2.5]]).relative_spread, 4)
    0.2582
    """
    p = np.asarray(predictions, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] < 2 or p.shape[1] == 0:
        raise ValueError(f"predictions: expected (seeds >= 2, rows >= 1), found shape {p.shape}")
    if not np.isfinite(p).all():
        raise ValueError("predictions: expected finite values")
    diff = float(np.abs(p - p[0]).max())
    scale = float(p.std())
    rel = float(p.std(axis=0).mean() / scale) if scale > 0 else 0.0
    return SeedSpread(n_seeds=int(p.shape[0]), n_rows=int(p.shape[1]), max_abs_difference=diff,
                      relative_spread=rel, identical=diff == 0.0, degenerate=rel < DEGENERATE_LIMIT)


# --------------------------------------------------------------------------- constant predictions, identical pipelines
@dataclass(frozen=True)
class ConstantCheck:
    """Result of :func:`constant_check`."""

    n_rows: int
    n_times: int
    max_range: float
    mean_prediction: float
    constant: bool

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


def constant_check(times: Any, predictions: Any) -> ConstantCheck:
    """Do the predictions vary across the rows of any timestamp?

    Parameters
    ----------
    times : array, shape (n,)
        Each row's timestamp (any sortable values).
    predictions : array, shape (n,)

    Returns
    -------
    ConstantCheck
        ``max_range``: the largest ``max - min`` of one timestamp's predictions; ``constant`` when it is
        at most ``CONSTANT_RTOL`` times the largest ``|prediction|`` (every row of each timestamp gets
        the same value: the model ignores its features).

    Examples
    --------
    >>> constant_check([1, 1, 2, 2], [0.3, 0.3, 0.1, 0.1]).constant      # a constant per day: learned nothing
    True
    >>> c = constant_check([1, 1, 2, 2], [0.3, 0.2, 0.1, 0.1])
    >>> c.constant, round(c.max_range, 6)
    (False, 0.1)
    """
    t, p = np.asarray(times), np.asarray(predictions, dtype=np.float64)
    if t.shape != p.shape or p.ndim != 1 or p.size == 0:
        raise ValueError(f"times, predictions: expected two 1-d arrays of the same length >= 1, found {t.shape}, "
                         f"{p.shape}")
    if not np.isfinite(p).all():
        raise ValueError("predictions: expected finite values")
    if t.size > 1 and not bool(np.all(t[1:] >= t[:-1])):
        order = np.argsort(t, kind="stable")
        t, p = t[order], p[order]
    starts = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])
    return constant_check_of_ranges(np.maximum.reduceat(p, starts) - np.minimum.reduceat(p, starts), p)


def constant_check_of_ranges(ranges: Any, predictions: Any) -> ConstantCheck:
    """:func:`constant_check` from each timestamp's range ``max - min`` of the predictions, already measured.

    The IC pass sorts every timestamp's predictions (Rank IC), so their ranges come with it
    (:attr:`~rolling_calib.core.ranking_ic.DailyIC.prediction_range`); for rows in time order (as the
    store reader gives them) the result is :func:`constant_check`'s, value for value (the same maximum of
    the same differences, the same mean).

    >>> constant_check_of_ranges([0.0, 0.0], [0.3, 0.3, 0.1, 0.1]) == constant_check([1, 1, 2, 2], [0.3, 0.3, 0.1, 0.1])
    True
    """
    r, p = np.asarray(ranges, dtype=np.float64), np.asarray(predictions, dtype=np.float64)
    if r.size == 0 or p.size == 0:
        raise ValueError(f"ranges, predictions: expected at least one timestamp and one row, found {r.size}, {p.size}")
    widest = float(r.max())
    return ConstantCheck(n_rows=int(p.size), n_times=int(r.size), max_range=widest, mean_prediction=float(p.mean()),
                         constant=widest <= CONSTANT_RTOL * float(np.abs(p).max()))


def same_predictions(a: Any, b: Any) -> bool:
    """Whether two pipelines' predictions of the same rows are equal to float rounding (``IDENTICAL_RTOL``).

    >>> same_predictions([1.0, 2.0], [1.0, 2.0 + 1e-9]), same_predictions([1.0, 2.0], [1.0, 2.1])
    (True, False)
    """
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        return False
    if x.size == 0:
        return False
    scale = max(float(np.abs(x).max()), float(np.abs(y).max()))
    return float(np.abs(x - y).max()) <= IDENTICAL_RTOL * scale


def same_rankings(times: Any, a: Any, b: Any) -> bool:
    """Whether two pipelines' predictions of the same rows order each timestamp's cross-section the same way.

    Rows are sorted by time, then ``a`` (then ``b``); within a timestamp every step between
    neighbours must be a tie in both (at most ``IDENTICAL_RTOL`` of each side's largest prediction)
    or a rise in both. Float noise below that tolerance is a tie; any monotone map keeps the ranking.

    >>> t = np.array([0, 0, 0, 1, 1])
    >>> p = np.array([0.1, 0.3, 0.2, 0.5, 0.4])
    >>> same_rankings(t, p, 2 * p - 1), same_rankings(t, p, p + np.array([0, 1e-12, 0, 0, 0]))
    (True, True)
    >>> same_rankings(t, p, np.array([0.3, 0.1, 0.2, 0.5, 0.4]))
    False
    """
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    when = np.asarray(times)
    if x.shape != y.shape or x.shape != when.shape or x.size == 0:
        return False
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        return False
    tol_x = IDENTICAL_RTOL * float(np.abs(x).max())
    tol_y = IDENTICAL_RTOL * float(np.abs(y).max())
    # A few whole timestamps first: two pipelines that rank differently almost always do so there, and the
    # check on whole timestamps (with the full arrays' tolerances) is the same check, so a "no" is final.
    probe = np.unique(when[:_PROBE_ROWS])[:_PROBE_TIMES]
    if _ascending(when):   # those timestamps' rows are the first ones: a slice, not a pass over every row
        n_few = int(np.searchsorted(when, probe[-1], side="right"))
        few: slice | np.ndarray = slice(0, n_few)
    else:
        few = np.isin(when, probe)
        n_few = int(few.sum())
    if n_few < when.size and not _same_order(when[few], x[few], y[few], tol_x, tol_y):
        return False
    return _same_order(when, x, y, tol_x, tol_y)


def _ascending(when: np.ndarray) -> bool:
    """Whether ``when`` never decreases and holds no NaT (datetimes compared as their int64 ticks; NaT, the
    smallest tick, can only lead an ascending run of ticks)."""
    if when.dtype.kind in "mM":
        return not np.isnat(when[0]) and bool((when.view(np.int64)[1:] >= when.view(np.int64)[:-1]).all())
    with np.errstate(invalid="ignore"):
        return bool((when[1:] >= when[:-1]).all())


#: :func:`same_rankings` checks the first ``_PROBE_TIMES`` timestamps among the first ``_PROBE_ROWS`` rows first.
_PROBE_ROWS, _PROBE_TIMES = 4096, 4


def _same_order(when: np.ndarray, x: np.ndarray, y: np.ndarray, tol_x: float, tol_y: float) -> bool:
    """Within each timestamp, every step between neighbours (sorted by ``x``, then ``y``) is a tie in both or a
    rise in both (:func:`same_rankings`)."""
    order = np.lexsort((y, x, when))
    same_time = when[order][1:] == when[order][:-1]
    dx, dy = np.diff(x[order])[same_time], np.diff(y[order])[same_time]
    tie_x, tie_y = dx <= tol_x, np.abs(dy) <= tol_y
    return bool(np.array_equal(tie_x, tie_y) and (dy[~tie_x] > tol_y).all())


# --------------------------------------------------------------------------- skill
@dataclass(frozen=True)
class SkillCheck:
    """Result of :func:`skill_check`."""

    ic_mean: float
    ql_mean: float
    baseline_ql: float
    positive_ic: bool | None
    beats_mean: bool
    skill: bool

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


def skill_check(*, ql: Sequence[float], baseline_ql: float, ic: Sequence[float] | None = None) -> SkillCheck:
    """Does a pipeline predict? IC above 0 and QL below the loss of predicting the label's mean.

    Parameters
    ----------
    ql : per-seed QL
    baseline_ql : float
        QL of predicting the label's mean for every row: the label's variance over the same rows.
    ic : per-seed mean IC, optional

    Examples
    --------
    >>> skill_check(ql=[9.0, 9.2], baseline_ql=10.0, ic=[0.02, 0.03]).skill
    True
    >>> skill_check(ql=[10.5, 10.6], baseline_ql=10.0, ic=[0.01, 0.02]).skill
    False
    """
    q = _vector("ql", ql)
    ic_mean = float(np.mean(_vector("ic", ic))) if ic is not None and len(ic) else math.nan
    positive = None if math.isnan(ic_mean) else bool(ic_mean > 0)
    beats = bool(q.mean() < baseline_ql)
    return SkillCheck(ic_mean=ic_mean, ql_mean=float(q.mean()), baseline_ql=float(baseline_ql),
                      positive_ic=positive, beats_mean=beats, skill=bool(beats and positive is not False))


# --------------------------------------------------------------------------- variance components
@dataclass(frozen=True)
class VarianceComponents:
    """Result of :func:`seed_variance_components`.

    ``offset``, ``comovement``, ``scale``: shares of the seed variance of QL (they add up to 1).
    ``residual_comovement``, ``residual_scale``: shares of the seed variance of what a per-period
    bias correction leaves (``T + N``, the residual spread), from co-movement and noise scale (they
    add up to 1; NaN when the residual spread does not vary).
    """

    offset: float
    scale: float
    comovement: float
    var_ql: float
    n_seeds: int
    residual_comovement: float = math.nan
    residual_scale: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)

    @property
    def dominant(self) -> str:
        """``"offset"``, ``"scale"`` or ``"comovement"``: the largest share of the seed variance of QL."""
        shares = {"offset": self.offset, "scale": self.scale, "comovement": self.comovement}
        return max(shares, key=lambda k: shares[k])

    def cause(self) -> str:
        """What a bias correction cannot remove, and where its seed variance comes from, in words.

        "Mostly" only when one share is above one half and neither is outside [-10%, 110%] (shares
        that offset each other are reported as such; a few percent either way is sampling noise).
        """
        if not (math.isfinite(self.residual_comovement) and math.isfinite(self.residual_scale)):
            return "what a bias correction leaves does not vary between seeds"
        words = {"residual_comovement": "how their predictions co-move with the label",
                 "residual_scale": "the scale of their prediction noise"}
        shares = {k: getattr(self, k) for k in words}
        top, other = sorted(shares, key=lambda k: -shares[k])
        head = "what a bias correction cannot remove (each seed's residual spread around its period bias) varies"
        if any(v < -0.1 or v > 1.1 for v in shares.values()):
            return (f"{head} with {words[top]} ({shares[top]:.0%}) and {words[other]} ({shares[other]:.0%}), "
                    f"which move against each other (the two shares sum to 100%; one passes 100% when the "
                    f"other's part offsets it)")
        if shares[top] > 0.5:
            return f"{head} mostly with {words[top]} ({shares[top]:.0%}), not {words[other]} ({shares[other]:.0%})"
        return f"{head} with {words[top]} ({shares[top]:.0%}) and {words[other]} ({shares[other]:.0%})"


def seed_variance_components(runs: Sequence[Sequence[Moments]]) -> VarianceComponents:
    """Split the seed variance of QL into offset, scale and co-movement (module docstring).

    Parameters
    ----------
    runs : sequence over seeds of sequences over periods of :class:`Moments`
        The same periods for every seed.

    Examples
    --------
    Seeds that differ only by a constant shift of their predictions:

    >>> y = np.array([0.0, 1.0, -1.0, 0.5])
    >>> runs = [[moments(0.5 * y + s, y)] for s in (0.0, 0.3, 0.6)]
    >>> c = seed_variance_components(runs)
    >>> [round(x, 6) + 0.0 for x in (c.offset, c.scale, c.comovement)]
    [1.0, 0.0, 0.0]
    """
    if len(runs) < 2:
        raise ValueError(f"runs: expected at least 2 seeds, found {len(runs)}")
    k = {len(r) for r in runs}
    if len(k) != 1 or 0 in k:
        raise ValueError(f"runs: expected the same non-zero number of periods for every seed, found {sorted(k)}")
    terms = np.empty((len(runs), 3))
    for i, periods in enumerate(runs):
        w = np.array([m.n for m in periods], dtype=np.float64)
        w /= w.sum()
        var_y = np.array([m.var_y for m in periods])
        cov = np.array([m.cov for m in periods])
        slope = np.divide(cov, var_y, out=np.zeros_like(cov), where=var_y > 0)
        noise = np.maximum(np.array([m.var_p for m in periods]) - slope * cov, 0.0)
        terms[i] = (w @ np.array([(m.mean_y - m.mean_p) ** 2 for m in periods]),
                    w @ (var_y * (1 - slope) ** 2), w @ noise)
    ql = terms.sum(axis=1)
    var = float(np.var(ql, ddof=1))
    if not var > 0:
        return VarianceComponents(math.nan, math.nan, math.nan, var, len(runs))
    centred = ql - ql.mean()
    shares = (terms - terms.mean(axis=0)).T @ centred / (len(runs) - 1) / var
    residual = terms[:, 1] + terms[:, 2]
    var_r = float(np.var(residual, ddof=1))
    if var_r > 1e-12 * float(np.mean(residual) ** 2 + var):   # beyond rounding: the residual spread varies
        rc = residual - residual.mean()
        r_shares = (terms[:, 1:] - terms[:, 1:].mean(axis=0)).T @ rc / (len(runs) - 1) / var_r
    else:
        r_shares = np.array([math.nan, math.nan])
    return VarianceComponents(offset=float(shares[0]), comovement=float(shares[1]), scale=float(shares[2]),
                              var_ql=var, n_seeds=len(runs), residual_comovement=float(r_shares[0]),
                              residual_scale=float(r_shares[1]))
