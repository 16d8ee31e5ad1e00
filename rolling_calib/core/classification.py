"""Calibrated classification losses: binary log loss and NCE with a logit shift, multiclass with a temperature.

docs/method.md §2.3 to 2.5, as pure functions on arrays (checked by :mod:`rolling_calib.core.array_checks`).
Probabilities must lie in ``[0, 1]``; before taking logarithms they are clipped to
``[EPS, 1 - EPS]`` with ``EPS = numpy.finfo(float64).eps`` (about 2.2e-16), the same clipping
scikit-learn's ``log_loss`` applies to float64 input.

Functions
---------
Binary classification
    :func:`log_loss`, :func:`fit_logit_shift`, :func:`fit_logit_shift_rows`, :func:`calibrated_log_loss`,
    :func:`normalized_cross_entropy`, :func:`calibrated_normalized_cross_entropy`.
Multiclass
    :func:`multiclass_log_loss`, :func:`fit_temperature`, :func:`temperature_scaled_log_loss`.

Example
-------
>>> round(calibrated_log_loss([0.5, 0.5, 0.5, 0.5, 0.25], [1, 1, 1, 0, 1], bias_part=[0, 1, 2, 3]), 6)
0.693147
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rolling_calib.core.array_checks import as_float_1d, bias_mask, check_lengths, describe_bad, plain

__all__ = [
    "EPS",
    "log_loss",
    "fit_logit_shift",
    "fit_logit_shift_rows",
    "calibrated_log_loss",
    "normalized_cross_entropy",
    "calibrated_normalized_cross_entropy",
    "multiclass_log_loss",
    "fit_temperature",
    "temperature_scaled_log_loss",
]

#: Clipping epsilon for probabilities before logarithms: ``p -> clip(p, EPS, 1 - EPS)``.
EPS: float = float(np.finfo(np.float64).eps)


def _reject(name: str, arr: np.ndarray, bad: np.ndarray, *, expected: str, found: str) -> np.ndarray:
    """``arr``, or a ValueError naming how many entries ``bad`` marks and the first of them."""
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}: expected {expected}, found {int(bad.sum())} {found}, "
                         f"the first at position {first}: {plain(arr[first])!r}")
    return arr


def _as_probabilities(name: str, values: Any) -> np.ndarray:
    """Finite 1-D probabilities in [0, 1] (no clipping yet)."""
    arr = as_float_1d(name, values)
    return _reject(name, arr, (arr < 0.0) | (arr > 1.0), expected="probabilities in [0, 1]", found="outside")


def _as_binary_labels(name: str, values: Any) -> np.ndarray:
    """Finite 1-D labels that are exactly 0 or 1, as float64."""
    arr = as_float_1d(name, values)
    return _reject(name, arr, (arr != 0.0) & (arr != 1.0), expected="binary labels 0 or 1", found="other value(s)")


def _logits_from(name: str, values: Any, *, from_logits: bool) -> np.ndarray:
    """Logits from probabilities (clipped to [EPS, 1-EPS]) or validated logits."""
    if from_logits:
        return as_float_1d(name, values)
    p = np.clip(_as_probabilities(name, values), EPS, 1.0 - EPS)
    return np.log(p) - np.log1p(-p)


# ---------------------------------------------------------------------------
# Binary log loss
# ---------------------------------------------------------------------------
def _binary_log_loss_from_logits(z: np.ndarray, y: np.ndarray) -> float:
    """Mean of ``log(1 + exp(z)) - y * z`` (= cross-entropy of sigmoid(z)), computed stably."""
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def log_loss(probabilities: Any, labels: Any, *, from_logits: bool = False) -> float:
    """Binary log loss (cross-entropy), lower is better.

    ``LL = -1/n * sum_i [y_i log p_i + (1 - y_i) log(1 - p_i)]``

    Probabilities are clipped to ``[EPS, 1 - EPS]`` first (as scikit-learn does
    for float64). With ``from_logits=True`` the first argument holds logits
    ``z_i`` and ``p_i = sigmoid(z_i)`` is applied in a numerically stable form
    without clipping.

    Example
    -------
    >>> round(log_loss([0.5, 0.5], [0, 1]), 6)   # log 2
    0.693147
    """
    z = _logits_from("probabilities", probabilities, from_logits=from_logits)
    y = _as_binary_labels("labels", labels)
    check_lengths(probabilities=z, labels=y)
    return _binary_log_loss_from_logits(z, y)


def _solve_logit_shift(z: np.ndarray, y: np.ndarray) -> float:
    """Scalar ``c*`` for 1-D logits ``z`` and labels ``y`` (see :func:`_solve_logit_shift_rows`)."""
    return float(_solve_logit_shift_rows(z[None, :], y[None, :])[0])


def _solve_logit_shift_rows(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per row ``r``: root of ``f_r(c) = sum_i sigmoid(z_ri - c) - sum_i y_ri`` (f_r is decreasing).

    Safeguarded Newton, vectorised over rows: each row keeps a bracket ``[lo, hi]``
    with ``f(lo) > 0 > f(hi)``; a Newton step leaving the bracket is replaced by
    bisection. Stops per row when the step is below ``4 * EPS * max(1, |c|)``.
    """
    y = np.broadcast_to(y, z.shape)
    rows, n = z.shape
    target = y.sum(axis=1)
    degenerate = (target <= 0.0) | (target >= n)
    if degenerate.any():
        r = int(np.flatnonzero(degenerate)[0])
        which = "0" if target[r] <= 0.0 else "1"
        where = "" if rows == 1 else f" (row {r} of {rows})"
        raise ValueError(
            f"labels: every label of the bias part is {which}{where}, so the logit shift that calibrates it "
            f"is infinite; expected both classes in the bias part"
        )
    prior = np.log(target) - np.log(n - target)                 # logit of the positive rate
    # At c = lo every z_i - c > logit(ybar), so every q_i > ybar and f(lo) > 0; symmetrically f(hi) < 0.
    lo = z.min(axis=1) - prior - 1.0
    hi = z.max(axis=1) - prior + 1.0
    c = np.clip(np.median(z, axis=1) - prior, lo, hi)
    active = np.arange(rows)
    for _ in range(200):
        if active.size == 0:
            break
        ca = c[active]
        q = 0.5 * (1.0 + np.tanh(0.5 * (z[active] - ca[:, None])))   # sigmoid, stable
        value = q.sum(axis=1) - target[active]
        slope = (q * (1.0 - q)).sum(axis=1)
        lo[active] = np.where(value > 0.0, ca, lo[active])
        hi[active] = np.where(value < 0.0, ca, hi[active])
        with np.errstate(divide="ignore", invalid="ignore"):
            candidate = ca + value / slope
        outside = ~((candidate > lo[active]) & (candidate < hi[active]))
        candidate = np.where(outside, 0.5 * (lo[active] + hi[active]), candidate)
        candidate = np.where(value == 0.0, ca, candidate)
        tol = 4.0 * EPS * np.maximum(1.0, np.abs(ca))
        done = (value == 0.0) | (np.abs(candidate - ca) <= tol) | (hi[active] - lo[active] <= tol)
        c[active] = candidate
        active = active[~done]
    return c


def fit_logit_shift_rows(logits: Any, labels: Any) -> np.ndarray:
    """One logit shift per row: :func:`fit_logit_shift` vectorised over many models.

    Parameters
    ----------
    logits : array-like of shape (runs, n)
        Row ``r`` holds model ``r``'s logits on the same ``n`` bias-part rows.
    labels : array-like of shape (n,) or (runs, n)
        Binary labels (shared by all rows when 1-D).

    Returns
    -------
    numpy.ndarray of shape (runs,)
        ``c*_r`` with ``sum_i sigmoid(z_ri - c*_r) = sum_i y_ri``.

    Example
    -------
    >>> fit_logit_shift_rows([[0.0, 0.0], [1.0, 1.0]], [1, 0]).tolist()
    [0.0, 1.0]
    """
    try:
        z = np.asarray(logits, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"logits: expected numbers, found values that are not numeric ({exc})") from exc
    if z.ndim != 2 or z.shape[1] == 0:
        raise ValueError(f"logits: expected a 2-D array (runs, rows >= 1), found shape {z.shape}")
    if not np.all(np.isfinite(z)):
        raise ValueError(f"logits: expected finite numbers, found {describe_bad(z)}")
    y = np.asarray(labels)
    if y.ndim == 1:
        y = _as_binary_labels("labels", y)
        if y.size != z.shape[1]:
            raise ValueError(f"mismatched lengths: labels has {y.size}, logits has {z.shape[1]} columns; expected equal")
    else:
        if y.shape != z.shape:
            raise ValueError(f"mismatched lengths: labels has shape {y.shape}, logits has {z.shape}; expected equal")
        y = _as_binary_labels("labels", y.ravel()).reshape(z.shape)
    return _solve_logit_shift_rows(z, y)


def fit_logit_shift(probabilities: Any, labels: Any, *, from_logits: bool = False) -> float:
    """Logit shift ``c*`` of the calibrated log loss (docs/method.md §2.3).

    Sign convention: ``q_i = g_c(p_i) = sigmoid(logit(p_i) - c)``, so a positive
    ``c`` lowers every probability. ``c*`` minimises the convex objective

    ``L(c) = -sum_i [y_i log g_c(p_i) + (1 - y_i) log(1 - g_c(p_i))]``

    whose derivative is ``L'(c) = sum_i (y_i - q_i)``; at ``c*`` the adjusted
    predictions are calibrated in aggregate: ``sum_i q_i = sum_i y_i``. The root
    is found by safeguarded Newton iteration (bisection fallback) to machine
    precision. Both classes must be present (otherwise ``c*`` is infinite).

    Example
    -------
    >>> round(fit_logit_shift([0.5, 0.5, 0.5, 0.5], [1, 0, 0, 0]), 6)   # log(1/1) - log(1/3)
    1.098612
    """
    z = _logits_from("probabilities", probabilities, from_logits=from_logits)
    y = _as_binary_labels("labels", labels)
    check_lengths(probabilities=z, labels=y)
    return _solve_logit_shift(z, y)


def calibrated_log_loss(
    probabilities: Any, labels: Any, *, bias_part: Any, from_logits: bool = False
) -> float:
    """Calibrated log loss (docs/method.md §2.3).

    Fit ``c*`` on the bias part with :func:`fit_logit_shift`, shift the remaining
    part's logits, ``q_i = sigmoid(logit(p_i) - c*)``, and return the log loss of
    ``q`` on the remaining part. Unchanged (up to rounding) when a constant is
    added to every logit.

    Example
    -------
    >>> p = [0.5, 0.5, 0.5, 0.5, 0.25]
    >>> y = [1, 1, 1, 0, 1]
    >>> round(calibrated_log_loss(p, y, bias_part=[0, 1, 2, 3]), 6)   # q = sigmoid(log 1/3 + log 3) = 1/2
    0.693147
    """
    z = _logits_from("probabilities", probabilities, from_logits=from_logits)
    y = _as_binary_labels("labels", labels)
    n = check_lengths(probabilities=z, labels=y)
    mask = bias_mask(bias_part, n)
    c = _solve_logit_shift(z[mask], y[mask])
    return _binary_log_loss_from_logits(z[~mask] - c, y[~mask])


def _background_entropy(y: np.ndarray) -> float:
    """Log loss of the constant predictor ``ybar``: ``-(ybar log ybar + (1-ybar) log(1-ybar))``."""
    ybar = float(y.mean())
    if ybar <= 0.0 or ybar >= 1.0:
        raise ValueError(
            f"labels: the scored labels are all {int(ybar)}, so the background log loss is 0 and the "
            f"normalized cross-entropy is undefined; expected both classes"
        )
    return -(ybar * math.log(ybar) + (1.0 - ybar) * math.log1p(-ybar))


def normalized_cross_entropy(probabilities: Any, labels: Any, *, from_logits: bool = False) -> float:
    """Normalized cross-entropy (docs/method.md §2.5).

    ``NCE = LL(p, y) / H(ybar)``, ``H(ybar) = -(ybar log ybar + (1 - ybar) log(1 - ybar))``,
    with ``ybar`` the positive rate of the labels scored. Below 1 means better than
    always predicting the background rate.

    Example
    -------
    >>> normalized_cross_entropy([0.5, 0.5], [0, 1])
    1.0
    """
    z = _logits_from("probabilities", probabilities, from_logits=from_logits)
    y = _as_binary_labels("labels", labels)
    check_lengths(probabilities=z, labels=y)
    return _binary_log_loss_from_logits(z, y) / _background_entropy(y)


def calibrated_normalized_cross_entropy(
    probabilities: Any, labels: Any, *, bias_part: Any, from_logits: bool = False
) -> float:
    """Calibrated NCE: :func:`calibrated_log_loss` divided by ``H(ybar)`` of the remaining part.

    Example
    -------
    >>> p = [0.5, 0.5, 0.5, 0.5, 0.25, 0.25]
    >>> y = [1, 1, 1, 0, 1, 0]
    >>> calibrated_normalized_cross_entropy(p, y, bias_part=[0, 1, 2, 3])   # q = 1/2 on the remaining rows
    1.0
    """
    z = _logits_from("probabilities", probabilities, from_logits=from_logits)
    y = _as_binary_labels("labels", labels)
    n = check_lengths(probabilities=z, labels=y)
    mask = bias_mask(bias_part, n)
    c = _solve_logit_shift(z[mask], y[mask])
    rest = ~mask
    return _binary_log_loss_from_logits(z[rest] - c, y[rest]) / _background_entropy(y[rest])


# ---------------------------------------------------------------------------
# Multiclass: log loss and temperature scaling
# ---------------------------------------------------------------------------
def _as_class_scores(name: str, values: Any, *, from_logits: bool) -> np.ndarray:
    """Validated (n, K) logits; probabilities are clipped to [EPS, 1] and logged."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: expected numbers, found values that are not numeric ({exc})") from exc
    if arr.ndim != 2 or arr.shape[1] < 2:
        raise ValueError(f"{name}: expected a 2-D array (rows, classes >= 2), found shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: expected finite numbers, found {describe_bad(arr)}")
    if from_logits:
        return arr
    outside = (arr < 0.0) | (arr > 1.0)
    if outside.any():
        r, c = np.argwhere(outside)[0]
        raise ValueError(f"{name}: expected probabilities in [0, 1], found {plain(arr[r, c])!r} at row {r}, class {c}")
    sums = arr.sum(axis=1)
    off = np.abs(sums - 1.0) > 1e-6
    if off.any():
        r = int(np.flatnonzero(off)[0])
        raise ValueError(f"{name}: expected each row to sum to 1 (within 1e-6), found {plain(sums[r])!r} at row {r}")
    return np.log(np.clip(arr, EPS, 1.0))


def _as_class_labels(name: str, values: Any, n_classes: int) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of class indices, found shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        as_float = np.asarray(arr, dtype=np.float64)
        if not np.all(np.isfinite(as_float)) or np.any(as_float != np.round(as_float)):
            raise ValueError(f"{name}: expected integer class indices, found dtype {arr.dtype} with non-integer values")
        arr = as_float
    arr = arr.astype(np.int64)
    bad = (arr < 0) | (arr >= n_classes)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}: expected class indices in [0, {n_classes - 1}], found {arr[first]} at position {first}")
    return arr


def _multiclass_nll(z: np.ndarray, y: np.ndarray) -> float:
    """Mean of ``logsumexp(z_i) - z_{i, y_i}``."""
    zmax = z.max(axis=1, keepdims=True)
    lse = zmax[:, 0] + np.log(np.exp(z - zmax).sum(axis=1))
    return float(np.mean(lse - z[np.arange(len(y)), y]))


def multiclass_log_loss(probabilities: Any, labels: Any, *, from_logits: bool = False) -> float:
    """Multiclass log loss: ``-1/n * sum_i log p_{i, y_i}``.

    ``probabilities`` has shape (n, K), rows summing to 1 (clipped below at
    ``EPS`` before the log); with ``from_logits=True`` it holds logits and the
    softmax is applied stably. ``labels`` are class indices ``0..K-1``.

    Example
    -------
    >>> round(multiclass_log_loss([[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]], [0, 2]), 6)   # log 2
    0.693147
    """
    z = _as_class_scores("probabilities", probabilities, from_logits=from_logits)
    y = _as_class_labels("labels", labels, z.shape[1])
    check_lengths(probabilities=z, labels=y)
    return _multiclass_nll(z, y)


def _solve_inverse_temperature(z: np.ndarray, y: np.ndarray) -> float:
    """Minimise ``N(b) = sum_i [logsumexp(b z_i) - b z_{i,y_i}]`` over ``b = 1/T > 0`` (convex in b)."""
    picked = z[np.arange(len(y)), y]

    def grad_hess(b: float) -> tuple[float, float]:
        s = b * z
        s = s - s.max(axis=1, keepdims=True)
        w = np.exp(s)
        w /= w.sum(axis=1, keepdims=True)
        mean = (w * z).sum(axis=1)
        var = (w * z * z).sum(axis=1) - mean * mean
        return float(np.sum(mean - picked)), float(np.sum(np.maximum(var, 0.0)))

    g0, _ = grad_hess(0.0)
    if g0 >= 0.0:
        raise ValueError(
            "probabilities: on the bias part the scores are no better than uniform, so the fitted "
            "temperature is infinite (1/T <= 0); expected scores that favour the true class on average"
        )
    # As b -> inf the gradient tends to sum_i (max_k z_ik - z_{i,y_i}) >= 0; when that is 0 every row
    # already ranks its true class first and N keeps decreasing: no finite minimiser.
    if float(np.sum(z.max(axis=1) - picked)) <= 0.0:
        raise ValueError(
            "probabilities: the bias part is separated perfectly (the true class has the top score on every "
            "row), so the fitted temperature tends to 0; expected at least one misranked row"
        )
    lo, hi = 0.0, 1.0
    while grad_hess(hi)[0] < 0.0:
        lo, hi = hi, hi * 2.0
    b = 0.5 * (lo + hi)
    for _ in range(200):
        g, h = grad_hess(b)
        if g == 0.0:
            return b
        if g < 0.0:
            lo = b
        else:
            hi = b
        candidate = b - g / h if h > 0.0 else math.inf
        if not (lo < candidate < hi):
            candidate = 0.5 * (lo + hi)
        if abs(candidate - b) <= 4.0 * EPS * max(1.0, b):
            return candidate
        b = candidate
    return b  # pragma: no cover


def fit_temperature(probabilities: Any, labels: Any, *, from_logits: bool = True) -> float:
    """Temperature ``T > 0`` minimising the NLL of ``softmax(z / T)`` (docs/method.md §2.4).

    Solved for ``b = 1/T``: ``N(b) = sum_i [logsumexp(b z_i) - b z_{i, y_i}]`` is
    convex in ``b``; its derivative is ``sum_i (E_{softmax(b z_i)}[z] - z_{i, y_i})``.
    Safeguarded Newton on ``b`` to machine precision. By default the input is
    logits; with ``from_logits=False`` probabilities are turned into ``log p``.

    Example
    -------
    >>> z = [[2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [2.0, 0.0]]   # right 3 times of 4
    >>> round(fit_temperature(z, [0, 1, 0, 1]), 6)          # sigmoid(2/T) = 3/4 -> T = 2 / log 3
    1.820478
    """
    z = _as_class_scores("probabilities", probabilities, from_logits=from_logits)
    y = _as_class_labels("labels", labels, z.shape[1])
    check_lengths(probabilities=z, labels=y)
    return 1.0 / _solve_inverse_temperature(z, y)


def temperature_scaled_log_loss(
    probabilities: Any, labels: Any, *, bias_part: Any, from_logits: bool = True
) -> float:
    """Calibrated multiclass log loss: fit ``T`` on the bias part, score ``softmax(z / T)`` on the rest.

    ``T* = argmin_T sum_{i in B} -log softmax(z_i / T)_{y_i}``;
    result ``= -1/|R| * sum_{i in R} log softmax(z_i / T*)_{y_i}``.

    Example
    -------
    >>> z = [[2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [2.0, 0.0], [2.0, 0.0]]
    >>> round(temperature_scaled_log_loss(z, [0, 1, 0, 1, 0], bias_part=[0, 1, 2, 3]), 6)   # -log(3/4)
    0.287682
    """
    z = _as_class_scores("probabilities", probabilities, from_logits=from_logits)
    y = _as_class_labels("labels", labels, z.shape[1])
    n = check_lengths(probabilities=z, labels=y)
    mask = bias_mask(bias_part, n)
    b = _solve_inverse_temperature(z[mask], y[mask])
    return _multiclass_nll(z[~mask] * b, y[~mask])
