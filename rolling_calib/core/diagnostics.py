"""Seed-variance diagnostics: why do runs of one pipeline differ, and can a bias correction help?

Everything here works on per-run, per-period summaries held as 2-D arrays of shape
``(n_seeds, n_periods)``: row ``r`` is one run (seed) of a pipeline, column ``k`` one
calibration period (docs/method.md §2.2: a calendar month), the same periods for every seed.

**The split of the seed variance.** For run ``r`` and period ``k`` with residuals
``e = y - p`` over the period's rows::

    bias_rk = mean(e)                       (the period's mean residual)
    var_rk  = mean((e - bias_rk)^2)         (what is left once that bias is removed)
    QL_rk   = mean(e^2) = bias_rk^2 + var_rk          (exact)

QL over the scored periods (``QL2..K``, the rows CQL scores) is the row-weighted mean of
``QL_rk``, so with weights ``w_rk`` (the period's rows)::

    QL_r = B_r + S_r,   B_r = sum_k w_rk bias_rk^2 / sum_k w_rk,   S_r = sum_k w_rk var_rk / sum_k w_rk
    Var_seeds(QL) = Var(B) + Var(S) + 2 Cov(B, S)                  (ddof = 1 throughout)

``B`` is the bias part, ``S`` the spread part. ``S_r`` is what the *best possible
per-period bias correction* (subtracting each period's own mean residual, an oracle)
would leave, so ``std(S)`` bounds what a bias correction can do to the seed spread::

    X = 1 - std(S) / std(QL2..K)      (the most a bias correction can remove)
    Y = 1 - std(CQL) / std(QL2..K)    (what the rolling CQL removed; Y < 0: it added spread)

A pooled rolling correction leaves ``CQL_r = S_r + D_r`` with ``D_r`` the row-weighted
mean of ``(bias_rk - bias_r,k-1)^2``, so it narrows the seeds like the oracle only when
``D`` is small. The bound is one of the oracle, not a strict inequality on a sample: with
few seeds a ``D`` that happens to move against ``S`` can make ``Y`` exceed ``X`` a little.

**Offsets and their persistence.** A seed's offset in period ``k`` is its mean residual
minus the mean over seeds, ``o_rk = bias_rk - mean_r bias_rk``. CQL corrects period ``k``
with period ``k-1``'s bias, so across seeds it can only remove spread when offsets
persist: it replaces ``o_k`` by ``o_k - o_{k-1}``, which is smaller on average only when
``E[(o_k - o_{k-1})^2] < E[o_k^2]`` (for equal variances: correlation above 1/2).
:func:`offset_persistence` measures both, separately for consecutive periods inside one
training window and across a refit.

The functions know nothing of stores or Qlib; :mod:`rolling_calib.analysis.diagnostics`
assembles their inputs from a result store.

Example
-------
Two seeds, two periods of equal size; seed 0 is shifted by 1 in both periods, the
residual spread around the bias is the same (1) for both seeds:

>>> split = split_seed_variance(bias=[[1.0, 1.0], [0.0, 0.0]], ql=[[2.0, 2.0], [1.0, 1.0]], weights=[1, 1])
>>> split.ql.tolist(), split.bias_part.tolist(), split.spread_part.tolist()
([2.0, 1.0], [1.0, 0.0], [1.0, 1.0])
>>> split.var_ql, split.var_bias, split.var_spread, split.cov
(0.5, 0.5, 0.0, 0.0)
>>> correction_fractions(split.std_ql, split.std_spread, std_cql=0.0)
(1.0, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rolling_calib.core.question import DEFAULT_QUESTION, QUESTION, Question
from rolling_calib.core.resampling import DEFAULT, RESAMPLING, Resampling
from rolling_calib.core.validation import validate_params
from rolling_calib.core.jsonable import fields_dict

__all__ = [
    "LOW_PERSISTENCE",
    "SeedVarianceSplit",
    "OffsetPersistence",
    "PredictionSpread",
    "split_seed_variance",
    "seed_offsets",
    "refit_boundaries",
    "offset_persistence",
    "prediction_spread",
    "correction_fractions",
    "CalibrationAssessment",
    "StdRatio",
    "assess_calibration",
    "std_ratio_interval",
]

#: Correlation of consecutive offsets below which the previous period is a poor guess of the next.
LOW_PERSISTENCE: float = 0.5

# --------------------------------------------------------------------------- input checks
def _as_matrix(name: str, values: Any) -> np.ndarray:
    """A finite 2-D float64 array ``(n_seeds, n_periods)`` with at least one period, or ``ValueError``."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: expected numbers, found values that are not numeric ({exc})") from exc
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array (seeds x periods), found shape {arr.shape}")
    if arr.shape[1] == 0:
        raise ValueError(f"{name}: expected at least one period, found 0")
    bad = ~np.isfinite(arr)
    if bad.any():
        r, k = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name}: expected finite values, found {float(arr[r, k])!r} at seed {r}, period {k}")
    return arr


def _need_seeds(name: str, arr: np.ndarray) -> None:
    if arr.shape[0] < 2:
        raise ValueError(f"{name}: expected at least 2 seeds (rows) to measure a spread over seeds, found {arr.shape[0]}")


def _same_shape(ref_name: str, ref: np.ndarray, **others: np.ndarray) -> None:
    for name, arr in others.items():
        if arr.shape != ref.shape:
            raise ValueError(f"{name}: expected shape {ref.shape} like {ref_name}, found {arr.shape}")


def _weights(values: Any, shape: tuple[int, int]) -> np.ndarray:
    """Row weights broadcast to ``shape``; non-negative, each seed with a positive total."""
    w = np.asarray(values, dtype=np.float64)
    if w.ndim == 1:
        if w.size != shape[1]:
            raise ValueError(f"weights: expected one weight per period ({shape[1]}), found {w.size}")
        w = np.broadcast_to(w, shape)
    elif w.shape != shape:
        raise ValueError(f"weights: expected shape {shape} or ({shape[1]},), found {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights: expected finite weights >= 0 (rows per period)")
    if np.any(w.sum(axis=1) <= 0):
        raise ValueError("weights: expected every seed to have rows in at least one period, found a seed with none")
    return w


def _var(x: np.ndarray) -> float:
    """Variance over seeds (ddof 1); exactly 0 for equal values (``np.var`` can leave ~1e-30 there)."""
    return 0.0 if np.ptp(x) == 0 else float(np.var(x, ddof=1))


def _cov(x: np.ndarray, y: np.ndarray) -> float:
    """Covariance over seeds (ddof 1); exactly 0 when either side is constant."""
    return 0.0 if np.ptp(x) == 0 or np.ptp(y) == 0 else float(np.cov(x, y, ddof=1)[0, 1])


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.nan


# --------------------------------------------------------------------------- variance split
@dataclass(frozen=True)
class SeedVarianceSplit:
    """Result of :func:`split_seed_variance` (variances over seeds with ddof = 1).

    Attributes
    ----------
    ql, bias_part, spread_part : ndarray, one value per seed
        ``QL_r`` (row-weighted mean of the per-period QL), ``B_r`` and ``S_r``; ``QL_r = B_r + S_r``.
    var_ql, var_bias, var_spread, cov : float
        ``Var(QL)``, ``Var(B)``, ``Var(S)``, ``Cov(B, S)``; ``var_ql = var_bias + var_spread + 2 cov``.
    frac_bias, frac_spread, frac_cov : float
        ``Var(B) / Var(QL)``, ``Var(S) / Var(QL)``, ``2 Cov / Var(QL)`` (they sum to 1; NaN when
        ``Var(QL) = 0``). ``frac_cov`` may be negative, and the other two then exceed 1 together.
    std_ql, std_spread : float
        ``sqrt(var_ql)`` and ``sqrt(var_spread)``: the seed std of QL and what the oracle
        per-period bias correction would leave.
    """

    ql: np.ndarray
    bias_part: np.ndarray
    spread_part: np.ndarray
    var_ql: float
    var_bias: float
    var_spread: float
    cov: float
    frac_bias: float
    frac_spread: float
    frac_cov: float
    std_ql: float
    std_spread: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (per-seed arrays as lists, NaN as None)."""
        return fields_dict(self)


def split_seed_variance(bias: Any, ql: Any, weights: Any) -> SeedVarianceSplit:
    """Split the seed variance of QL over the given periods into a bias part, a spread part and their covariance.

    Parameters
    ----------
    bias : array ``(n_seeds, n_periods)``
        ``bias_rk``: mean residual ``y - p`` of run ``r`` in period ``k``.
    ql : array ``(n_seeds, n_periods)``
        ``QL_rk``: mean of ``(y - p)^2`` of run ``r`` in period ``k``.
    weights : array ``(n_periods,)`` or ``(n_seeds, n_periods)``
        Rows per period (the weights of the row-weighted mean that gives QL over the periods).

    Returns
    -------
    SeedVarianceSplit
        With ``var_rk = QL_rk - bias_rk^2``::

            B_r = sum_k w_rk bias_rk^2 / sum_k w_rk,    S_r = sum_k w_rk var_rk / sum_k w_rk
            QL_r = sum_k w_rk QL_rk / sum_k w_rk  (= B_r + S_r)
            Var(QL) = Var(B) + Var(S) + 2 Cov(B, S)

    Raises
    ------
    ValueError
        Fewer than 2 seeds, mismatched shapes, non-finite values, negative weights or a
        seed without rows.

    Examples
    --------
    Seeds that share every period's bias have no bias part; here they differ in spread only:

    >>> s = split_seed_variance(bias=[[0.5, -0.5], [0.5, -0.5]], ql=[[1.25, 1.25], [2.25, 2.25]], weights=[10, 30])
    >>> s.var_bias, s.var_spread, s.frac_spread
    (0.0, 0.5, 1.0)
    """
    b = _as_matrix("bias", bias)
    q = _as_matrix("ql", ql)
    _same_shape("bias", b, ql=q)
    _need_seeds("bias", b)
    w = _weights(weights, b.shape)
    total = w.sum(axis=1)
    ql_r = (w * q).sum(axis=1) / total
    bias_r = (w * b * b).sum(axis=1) / total
    spread_r = (w * (q - b * b)).sum(axis=1) / total
    var_ql, var_b, var_s = _var(ql_r), _var(bias_r), _var(spread_r)
    cov = _cov(bias_r, spread_r)
    return SeedVarianceSplit(
        ql=ql_r, bias_part=bias_r, spread_part=spread_r,
        var_ql=var_ql, var_bias=var_b, var_spread=var_s, cov=cov,
        frac_bias=_ratio(var_b, var_ql), frac_spread=_ratio(var_s, var_ql), frac_cov=_ratio(2.0 * cov, var_ql),
        std_ql=math.sqrt(var_ql), std_spread=math.sqrt(var_s),
    )


# --------------------------------------------------------------------------- offsets
def seed_offsets(bias: Any) -> np.ndarray:
    """Each seed's offset per period: ``o_rk = bias_rk - mean_r bias_rk`` (its mean residual minus the seeds' mean).

    >>> seed_offsets([[1.0, 2.0], [3.0, 0.0]]).tolist()
    [[-1.0, 1.0], [1.0, -1.0]]
    """
    b = _as_matrix("bias", bias)
    return b - b.mean(axis=0, keepdims=True)


def refit_boundaries(windows: Sequence[int]) -> np.ndarray:
    """``refit[k]``: period ``k`` starts under another model than period ``k-1`` (``refit[0]`` is False).

    ``windows[k]`` is the training window of period ``k``'s first row.

    >>> refit_boundaries([0, 0, 1, 1, 2]).tolist()
    [False, False, True, False, True]
    """
    w = np.asarray(windows)
    if w.ndim != 1:
        raise ValueError(f"windows: expected one window per period (1-D), found shape {w.shape}")
    return np.r_[False, w[1:] != w[:-1]].astype(bool)


@dataclass(frozen=True)
class OffsetPersistence:
    """Result of :func:`offset_persistence`: how well period ``k-1``'s offset predicts period ``k``'s.

    Pairs are ``(o_r,k-1, o_rk)`` for every seed ``r`` and period ``k >= 2``; *within* pairs have
    both periods in one training window, *across* pairs straddle a refit.

    Attributes
    ----------
    corr, corr_within, corr_across : float
        ``sum o_{k-1} o_k / sqrt(sum o_{k-1}^2 sum o_k^2)`` over the pairs (offsets average 0
        over seeds in every period, so this is Pearson's correlation without re-centring).
        NaN without pairs or with all-zero offsets.
    n_pairs, n_within, n_across : int
        Number of (seed, period) pairs behind each.
    level, change : float
        ``mean o_k^2`` and ``mean (o_k - o_{k-1})^2`` over all pairs. A correction with the
        previous period's bias narrows the seeds only when ``change < level``.
    level_within, change_within, level_across, change_across : float
        The same over the within / across pairs (NaN without such pairs).
    """

    corr: float
    corr_within: float
    corr_across: float
    n_pairs: int
    n_within: int
    n_across: int
    level: float
    change: float
    level_within: float
    change_within: float
    level_across: float
    change_across: float

    @property
    def previous_predicts(self) -> bool:
        """``change < level``: the previous period's offset is a useful guess of this one's."""
        return bool(self.change < self.level)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (NaN as None)."""
        out = fields_dict(self)
        out["previous_predicts"] = self.previous_predicts
        return out


def _pair_stats(prev: np.ndarray, cur: np.ndarray) -> tuple[float, float, float]:
    """``(corr, level, change)`` of the pooled pairs; NaN when there are none."""
    if prev.size == 0:
        return math.nan, math.nan, math.nan
    den = math.sqrt(float(np.sum(prev * prev)) * float(np.sum(cur * cur)))
    corr = float(np.sum(prev * cur)) / den if den > 0 else math.nan
    return corr, float(np.mean(cur * cur)), float(np.mean((cur - prev) ** 2))


def offset_persistence(offsets: Any, refit: Any) -> OffsetPersistence:
    """Persistence of the seeds' offsets from one period to the next, inside windows and across refits.

    Parameters
    ----------
    offsets : array ``(n_seeds, n_periods)``
        ``o_rk`` from :func:`seed_offsets`, periods in time order (all periods, the first included:
        it supplies the bias of the second).
    refit : bool array ``(n_periods,)``
        From :func:`refit_boundaries`; ``refit[k]`` puts the pair ``(k-1, k)`` in *across*.

    Returns
    -------
    OffsetPersistence
        ``corr = sum o_{k-1} o_k / sqrt(sum o_{k-1}^2 sum o_k^2)``, ``level = mean o_k^2``,
        ``change = mean (o_k - o_{k-1})^2`` over seeds and periods ``k >= 2``; also per group.

    Examples
    --------
    Two seeds whose offsets keep their sign inside the window and flip at the refit:

    >>> p = offset_persistence([[1.0, 1.0, -1.0], [-1.0, -1.0, 1.0]], refit=[False, False, True])
    >>> p.corr_within, p.corr_across, p.n_within, p.n_across
    (1.0, -1.0, 2, 2)
    >>> p.level, p.change, p.level_across, p.change_across
    (1.0, 2.0, 1.0, 4.0)
    """
    o = _as_matrix("offsets", offsets)
    r = np.asarray(refit, dtype=bool)
    if r.shape != (o.shape[1],):
        raise ValueError(f"refit: expected one flag per period ({o.shape[1]}), found shape {r.shape}")
    prev, cur = o[:, :-1], o[:, 1:]
    across = np.broadcast_to(r[1:], cur.shape)
    corr, level, change = _pair_stats(prev.ravel(), cur.ravel())
    corr_w, level_w, change_w = _pair_stats(prev[~across], cur[~across])
    corr_a, level_a, change_a = _pair_stats(prev[across], cur[across])
    return OffsetPersistence(
        corr=corr, corr_within=corr_w, corr_across=corr_a,
        n_pairs=int(cur.size), n_within=int((~across).sum()), n_across=int(across.sum()),
        level=level, change=change,
        level_within=level_w, change_within=change_w, level_across=level_a, change_across=change_a,
    )


# --------------------------------------------------------------------------- prediction spread
@dataclass(frozen=True)
class PredictionSpread:
    """Result of :func:`prediction_spread`.

    Attributes
    ----------
    mean_spread : float
        Seed spread of the mean prediction: per period the std over seeds (ddof = 1) of each
        run's mean prediction, averaged over periods.
    scale : float
        The scale of the predictions: each run's std of its predictions within a period,
        averaged over runs and periods.
    scale_spread : float
        Seed spread of that scale: per period the std over seeds of the runs' prediction std,
        averaged over periods.
    """

    mean_spread: float
    scale: float
    scale_spread: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (NaN as None)."""
        return fields_dict(self)


def prediction_spread(mean_prediction: Any, prediction_std: Any) -> PredictionSpread:
    """How far apart the seeds' mean predictions are, beside how spread the predictions are.

    Parameters
    ----------
    mean_prediction, prediction_std : arrays ``(n_seeds, n_periods)``
        Per run and period: the mean and the std of the predictions.

    Returns
    -------
    PredictionSpread
        ``mean_spread = mean_k std_r(mean_prediction_rk)``, ``scale = mean_rk prediction_std_rk``,
        ``scale_spread = mean_k std_r(prediction_std_rk)`` (std over seeds with ddof = 1).

    Examples
    --------
    >>> s = prediction_spread([[0.0, 1.0], [2.0, 3.0]], [[1.0, 1.0], [3.0, 3.0]])
    >>> round(s.mean_spread, 6), s.scale, round(s.scale_spread, 6)
    (1.414214, 2.0, 1.414214)
    """
    m = _as_matrix("mean_prediction", mean_prediction)
    s = _as_matrix("prediction_std", prediction_std)
    _same_shape("mean_prediction", m, prediction_std=s)
    _need_seeds("mean_prediction", m)
    return PredictionSpread(
        mean_spread=float(np.std(m, axis=0, ddof=1).mean()),
        scale=float(s.mean()),
        scale_spread=float(np.std(s, axis=0, ddof=1).mean()),
    )


# --------------------------------------------------------------------------- verdict
def correction_fractions(std_ql: float, std_spread: float, std_cql: float) -> tuple[float, float]:
    """``(X, Y)``: the most a bias correction can remove of the seed std of QL2..K, and what CQL removed.

    ``X = 1 - std(S) / std(QL2..K)``, ``Y = 1 - std(CQL) / std(QL2..K)``; both NaN when
    ``std(QL2..K)`` is 0 or not finite. ``Y < 0``: CQL added spread.

    >>> correction_fractions(2.0, 0.5, 2.5)
    (0.75, -0.25)
    """
    if not (math.isfinite(std_ql) and std_ql > 0):
        return math.nan, math.nan
    return 1.0 - std_spread / std_ql, 1.0 - std_cql / std_ql


def _pct(frac: float) -> str:
    return f"{abs(frac) * 100:.0f}%"


#: Seeds below which the std ratio gets no bootstrap interval.
MIN_INTERVAL_SEEDS = 3


@dataclass(frozen=True)
class StdRatio:
    """Result of :func:`std_ratio_interval`: ``std(CQL) / std(QL2..K)`` over seeds and its bootstrap interval."""

    ratio: float
    ci_low: float
    ci_high: float
    confidence: float
    n_boot: int
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


@validate_params({"question": QUESTION, "resampling": RESAMPLING})
def std_ratio_interval(ql: Any, cql: Any, *, question: Question = DEFAULT_QUESTION,
                       resampling: Resampling = DEFAULT) -> StdRatio:
    """``std(CQL) / std(QL2..K)`` over the seeds, with a percentile bootstrap interval (seeds resampled jointly).

    Parameters
    ----------
    ql, cql : arrays ``(n_seeds,)``
        Per seed, QL over CQL's periods and CQL (the same rows).
    question : Question
        Its ``confidence`` is the interval's level.
    resampling : Resampling
        Bootstrap settings (replicates with a zero QL std are left out).

    Examples
    --------
    >>> r = std_ratio_interval([1.0, 2.0, 3.0, 4.0], [1.0, 1.5, 2.0, 2.5], resampling=Resampling(n_boot=200))
    >>> r.ratio, r.ci_high <= 0.5 + 1e-12
    (0.5, True)
    """
    confidence, n_boot, seed = question.confidence, resampling.n_boot, resampling.seed
    q = np.asarray(ql, dtype=np.float64)
    c = np.asarray(cql, dtype=np.float64)
    if q.shape != c.shape or q.ndim != 1 or q.size < 2:
        raise ValueError(f"ql, cql: expected two equal 1-D arrays of at least 2 seeds, found {q.shape} and {c.shape}")
    sq = float(np.std(q, ddof=1))
    ratio = float(np.std(c, ddof=1)) / sq if sq > 0 else math.nan
    if q.size < MIN_INTERVAL_SEEDS:   # two seeds resample to themselves or to a single value: no interval
        return StdRatio(ratio, math.nan, math.nan, float(confidence), int(n_boot), int(seed))
    idx = resampling.seed_indices(q.size, rng=resampling.rng())
    sq_b, sc_b = np.std(q[idx], axis=1, ddof=1), np.std(c[idx], axis=1, ddof=1)
    ok = sq_b > 0
    if not ok.any() or not math.isfinite(ratio):
        return StdRatio(ratio, math.nan, math.nan, float(confidence), int(n_boot), int(seed))
    lo, hi = np.quantile(sc_b[ok] / sq_b[ok], [(1 - confidence) / 2, (1 + confidence) / 2])
    return StdRatio(ratio, float(lo), float(hi), float(confidence), int(n_boot), int(seed))


@dataclass(frozen=True)
class CalibrationAssessment:
    """Can calibration help on these runs? (:func:`assess_calibration`)

    Attributes
    ----------
    helps : bool or None
        True only when CQL narrows the seed spread (its std ratio's interval lies below 1), keeps
        the ordering of the ground truth on held-out seeds and no scale mismatch is measured;
        False when one of these fails; None when the ordering could not be checked.
    headline : str
    reasons : list of str
        Every reason comes from a measurement (numbers in the text).
    narrows : bool or None
    keeps_order : bool or None
    """

    helps: bool | None
    headline: str
    reasons: list[str]
    narrows: bool | None
    keeps_order: bool | None

    @property
    def text(self) -> str:
        return f"{self.headline}: {'; '.join(self.reasons)}." if self.reasons else f"{self.headline}."

    def to_dict(self) -> dict[str, Any]:
        return {"helps": self.helps, "headline": self.headline, "reasons": list(self.reasons),
                "narrows": self.narrows, "keeps_order": self.keeps_order, "text": self.text}


def _spread_reason(removable: float, removed: float, ratio: StdRatio) -> str:
    bound = (f"a per-period bias correction could remove at most {_pct(removable)} of the seed std of QL 2..K"
             if removable >= 0 else f"even the best per-period bias correction would add {_pct(removable)} to the seed std")
    if not math.isfinite(ratio.ratio):
        return bound
    did = "removed" if removed >= 0 else "added"
    interval = (f"{ratio.confidence:.0%} interval over seeds [{ratio.ci_low:.2f}, {ratio.ci_high:.2f}]: "
                if math.isfinite(ratio.ci_high) else "")
    return f"CQL's seed std is {ratio.ratio:.2f}x QL 2..K's ({interval}it {did} {_pct(removed)}); {bound}"


def _persistence_reason(persistence: OffsetPersistence | None) -> list[str]:
    if persistence is None:
        return []
    out = []
    if math.isfinite(persistence.corr_across) and persistence.corr_across < LOW_PERSISTENCE:
        out.append(f"each seed's offset resets at the refits (correlation of consecutive offsets "
                   f"{persistence.corr_across:.2f} across a refit against {persistence.corr_within:.2f} inside a "
                   f"window): the first period after a refit is corrected with the old model's bias")
    elif math.isfinite(persistence.corr_within) and persistence.corr_within < LOW_PERSISTENCE:
        out.append(f"offsets change from period to period even inside a window (correlation "
                   f"{persistence.corr_within:.2f}): the previous period's bias is a poor guess of the next")
    return out


def assess_calibration(*, removable: float, removed: float, ratio: StdRatio, keeps_order: bool | None,
                       order_detail: str = "", scale_mismatch: str = "", cause: str = "",
                       persistence: OffsetPersistence | None = None) -> CalibrationAssessment:
    """Whether calibration helps these runs, and why, from measurements only (docs/method.md §5).

    Parameters
    ----------
    removable, removed : float
        ``X`` and ``Y`` of :func:`correction_fractions`.
    ratio : StdRatio
        ``std(CQL) / std(QL2..K)`` with its interval (:func:`std_ratio_interval`).
    keeps_order : bool or None
        Whether CQL's held-out pairwise accuracy (its runs on half of the seeds against the ground
        truth's direction on the other half, on the label the models learned) is at least QL's;
        None: not checked.
    order_detail : str
        The measurement behind ``keeps_order``, in words.
    scale_mismatch : str
        Non-empty when a scale mismatch was measured (its finding, in words).
    cause : str
        Where the seed variance comes from (:meth:`rolling_calib.core.guards.VarianceComponents.cause`).
    persistence : OffsetPersistence, optional

    Examples
    --------
    >>> r = StdRatio(0.4, 0.3, 0.55, 0.95, 2000, 0)
    >>> a = assess_calibration(removable=0.7, removed=0.6, ratio=r, keeps_order=True, order_detail="CQL 90% vs QL 80%")
    >>> a.helps, a.headline
    (True, 'Calibration helps here')
    >>> b = assess_calibration(removable=0.7, removed=0.6, ratio=r, keeps_order=True, scale_mismatch="QL measures the level")
    >>> b.helps, b.headline
    (False, 'Calibration cannot be shown to help here: predictions and labels are on different scales')
    """
    narrows = None if not math.isfinite(ratio.ci_high) else bool(ratio.ci_high < 1.0)
    reasons = [_spread_reason(removable, removed, ratio)] if math.isfinite(removable) else []
    if cause:
        reasons.append(cause)
    reasons += _persistence_reason(persistence)
    if order_detail:
        reasons.append(order_detail)
    if scale_mismatch:
        reasons.insert(0, f"{scale_mismatch}; whatever CQL does to the seed spread there is a units artefact, not "
                          f"evidence")
        return CalibrationAssessment(False, "Calibration cannot be shown to help here: predictions and labels are "
                                     "on different scales", reasons, narrows, keeps_order)
    if narrows is None:
        why = ("too few seeds for an interval of CQL's seed std against QL's" if math.isfinite(ratio.ratio) else
               "the seeds' QL 2..K does not vary (or cannot be measured)")
        return CalibrationAssessment(None, f"No verdict on calibration: {why}", reasons, narrows, keeps_order)
    if not narrows:
        head = "Calibration does not help here" if ratio.ci_low >= 1.0 or ratio.ratio >= 1.0 else \
            "Calibration does not clearly help here"
        return CalibrationAssessment(False, head, reasons, narrows, keeps_order)
    if keeps_order is None:
        return CalibrationAssessment(None, "Calibration narrows the seed spread here, but whether it keeps the ground "
                                     "truth's ordering cannot be checked on these runs", reasons, narrows, keeps_order)
    if not keeps_order:
        return CalibrationAssessment(False, "Calibration narrows the seed spread but orders the pipelines worse than "
                                     "QL on held-out seeds", reasons, narrows, keeps_order)
    return CalibrationAssessment(True, "Calibration helps here", reasons, narrows, keeps_order)
