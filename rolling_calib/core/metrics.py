"""The regression metrics of docs/method.md §2: QL, CQL and the time-rolling CQL, pure functions on arrays.

Every function takes plain arrays (anything :func:`numpy.asarray` accepts), checks them
(:mod:`rolling_calib.core.array_checks`) and returns numbers or a small result object. It knows
nothing of Qlib, torch or any runner. The rolling metric's calibration rule is one
:class:`~rolling_calib.core.calibration.Calibration` value; its computation (one streaming pass
over the rows) is :mod:`rolling_calib.core.rolling_engine`. The classification losses
(log loss, NCE, temperature scaling) are :mod:`rolling_calib.core.classification`.

Conventions
-----------
* Losses are "lower is better".
* A *bias part* is given either as a boolean mask of the same length as the data
  or as an integer index (non-negative positions, no duplicates). The *remaining
  part* is every row not in the bias part. Both must be non-empty.
* Non-finite values (NaN, +-inf) are rejected with :class:`ValueError`; nothing is
  silently dropped.

Functions
---------
:func:`quadratic_loss`, :func:`fit_mean_residual`, :func:`calibrated_quadratic_loss`,
:func:`rolling_calibrated_quadratic_loss` (result :class:`RollingCQL`).

Example
-------
>>> import numpy as np
>>> p = np.array([0.0, 1.0, 2.0, 3.0])
>>> y = np.array([1.0, 2.0, 3.0, 5.0])
>>> quadratic_loss(p, y)
1.75
>>> calibrated_quadratic_loss(p, y, bias_part=[0, 1])   # c* = 1, q = p + 1 on rows 2, 3
0.5
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from rolling_calib.core.array_checks import as_float_1d, bias_mask, check_lengths
from rolling_calib.core.calibration import Calibration
from rolling_calib.core.rolling_engine import RollingScores, rolling_scores

__all__ = [
    "RollingCQL",
    "quadratic_loss",
    "fit_mean_residual",
    "calibrated_quadratic_loss",
    "rolling_calibrated_quadratic_loss",
]

#: The paper's rule (docs/method.md §2.2): monthly periods, one pooled bias from the previous month.
PAPER_CALIBRATION = Calibration()


# ---------------------------------------------------------------------------
# Quadratic loss
# ---------------------------------------------------------------------------
def quadratic_loss(predictions: Any, labels: Any) -> float:
    """Mean squared error (the vanilla quadratic loss, QL).

    ``QL = 1/n * sum_i (y_i - p_i)^2``

    Parameters
    ----------
    predictions, labels : array-like of shape (n,)
        Finite numbers, same length, n >= 1.

    Returns
    -------
    float

    Example
    -------
    >>> quadratic_loss([0.0, 2.0], [1.0, 1.0])
    1.0
    """
    p = as_float_1d("predictions", predictions)
    y = as_float_1d("labels", labels)
    check_lengths(predictions=p, labels=y)
    return float(np.mean((y - p) ** 2))


def fit_mean_residual(predictions: Any, labels: Any) -> float:
    """Bias term of the calibrated quadratic loss: the mean residual.

    ``c* = 1/n * sum_i (y_i - p_i)``; adding ``c*`` to every prediction makes the
    mean residual zero, and ``c*`` minimises ``sum_i (y_i - p_i - c)^2`` over ``c``.

    Example
    -------
    >>> fit_mean_residual([0.0, 1.0], [1.0, 3.0])
    1.5
    """
    p = as_float_1d("predictions", predictions)
    y = as_float_1d("labels", labels)
    check_lengths(predictions=p, labels=y)
    return float(np.mean(y - p))


def calibrated_quadratic_loss(predictions: Any, labels: Any, *, bias_part: Any) -> float:
    """Calibrated quadratic loss (docs/method.md §2.1).

    ``c* = mean_{i in B} (y_i - p_i)``, ``q_i = p_i + c*`` and
    ``CQL = mean_{i in R} (y_i - q_i)^2`` where ``B`` is the bias part and ``R``
    the remaining part (every row not in ``B``).

    Parameters
    ----------
    predictions, labels : array-like of shape (n,)
        Finite numbers, same length.
    bias_part : boolean mask of shape (n,) or integer index
        Rows used to fit ``c*``; the other rows are scored. Neither part may be empty.

    Returns
    -------
    float

    Example
    -------
    >>> calibrated_quadratic_loss([0.0, 0.0, 0.0], [2.0, 1.0, 3.0], bias_part=[True, False, False])
    1.0
    """
    p = as_float_1d("predictions", predictions)
    y = as_float_1d("labels", labels)
    n = check_lengths(predictions=p, labels=y)
    mask = bias_mask(bias_part, n)
    residual = y - p
    c = float(np.mean(residual[mask]))
    return float(np.mean((residual[~mask] - c) ** 2))


# ---------------------------------------------------------------------------
# Rolling (time) calibrated quadratic loss
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class RollingCQL(RollingScores):
    """Result of :func:`rolling_calibrated_quadratic_loss`.

    Attributes
    ----------
    table : pandas.DataFrame
        One row per period that has rows, in time order. Columns:
        ``period`` (label such as ``'2015-02'``), ``start`` (Timestamp where the
        period starts), ``end`` (last timestamp seen in it), ``rows`` (int),
        ``mean_residual`` (mean of ``y - p`` in the period: the bias the *next*
        period receives under pooled bias), ``bias`` (the ``c_k`` applied;
        for per-instrument bias the row-weighted mean of the applied biases;
        NaN when unscored), ``ql`` (plain QL of the period), ``cql`` (calibrated
        QL of the period, NaN when unscored), ``scored`` (bool), ``refit_first`` (bool: the
        period holds the first date of a window, i.e. it is the first period after a (re)fit;
        False everywhere when no ``windows`` were given).
    cql : float
        Mean of ``(y - q)^2`` over all rows of the scored periods (row-weighted,
        not a mean of monthly means).
    ql_scored : float
        Plain QL over the same rows as ``cql``.
    ql_all : float
        Plain QL over every row of every period.
    n_scored, n_all : int
        Row counts behind ``cql``/``ql_scored`` and ``ql_all``.
    calibration : Calibration
        The calibration rule the result was computed with.
    rule : str
        The period rule in words (``'month'``, ``'week'``, ``'quarter'`` or ``'<N> trading days'``).
    cql_refit_first, ql_refit_first, n_refit_first : float, float, int
        CQL and plain QL over the scored rows of the ``refit_first`` periods (NaN, 0 when none).
    cql_rest, ql_rest, n_rest : float, float, int
        The same over the other scored periods (NaN, 0 when none).
    days : pandas.DataFrame
        One row per date present: ``date`` (datetime64[D]), ``period``, ``rows``, ``sse_ql``
        (``sum (y - p)^2``), ``sse_cql`` (``sum (y - q)^2``, NaN on unscored dates) and
        ``residual_sum``; the days of a period add up to its sums. The verdicts resample them.
    """

    calibration: Calibration = field(kw_only=True)  # the other fields: RollingScores's

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dictionary (the table as a list of records, timestamps as ISO strings)."""
        table = self.table.copy()
        for column in ("start", "end"):
            table[column] = table[column].map(lambda t: t.isoformat())
        records = [
            {key: (None if isinstance(val, float) and math.isnan(val) else val) for key, val in rec.items()}
            for rec in table.to_dict(orient="records")
        ]
        def num(value: float) -> float | None:
            return None if math.isnan(value) else value

        return {
            "cql": self.cql,
            "ql_scored": self.ql_scored,
            "ql_all": self.ql_all,
            "n_scored": self.n_scored,
            "n_all": self.n_all,
            "period": self.rule,
            "bias": self.calibration.bias,
            "bias_window": self.calibration.bias_window,
            "source": self.calibration.source,
            "missing_instrument": self.calibration.missing_instrument,
            "refit_first": {"cql": num(self.cql_refit_first), "ql": num(self.ql_refit_first), "rows": self.n_refit_first},
            "rest": {"cql": num(self.cql_rest), "ql": num(self.ql_rest), "rows": self.n_rest},
            "periods": records,
        }


def rolling_calibrated_quadratic_loss(
    predictions: Any,
    labels: Any,
    timestamps: Any,
    *,
    calibration: Calibration = PAPER_CALIBRATION,
    instruments: Any = None,
    score_periods: Iterable[str | int] | None = None,
    windows: Any = None,
    valid_predictions: Any = None,
    valid_labels: Any = None,
    valid_windows: Any = None,
    valid_instruments: Any = None,
) -> RollingCQL:
    """Time-rolling calibrated quadratic loss (docs/method.md §2.2).

    Rows are cut into periods ``1..K`` (calendar months by default). For a
    scored period ``k`` the bias is the mean residual of the period before it,
    ``c_k = mean_{i in k-1} (y_i - p_i)``, every prediction of period ``k`` is
    shifted, ``q_i = p_i + c_k``, and

    ``CQL = sum_{scored k} sum_{i in k} (y_i - q_i)^2 / n_scored``.

    With ``source='validation'`` (calibration aligned with retraining) the bias of a
    row of window ``w`` is fitted on the same model's predictions over ``w``'s
    validation segment, ``c_w = mean_{i in valid(w)} (y_i - p_i)`` (per instrument:
    ``c_{w,j}``), so no period is corrected with another model's bias; every period
    is scored by default (each has its window's bias).

    Given ``windows`` (the window of every row), the periods holding a window's first
    date are flagged ``refit_first`` (the first period after each (re)fit) and CQL and
    QL are also reported over those periods and over the rest::

        CQL_refit = sum_{scored k, refit_first} sum_{i in k} (y_i - q_i)^2 / n_refit
        CQL_rest  = sum_{scored k, not refit_first} sum_{i in k} (y_i - q_i)^2 / n_rest

    ``QL`` is reported over the same rows and over all rows. One blocked pass over
    the rows collects per date and instrument the rows, residual sums and centred
    sums of squares; every period rule and bias source is computed from these
    (``sum (r - c)^2 = M2 + n (mean - c)^2`` per cell), so the memory needed beyond
    the inputs is a few block-sized buffers and tables of dates x instruments.

    Parameters
    ----------
    predictions, labels : array-like of shape (n,)
        Finite numbers.
    timestamps : array-like of shape (n,)
        Anything :class:`pandas.DatetimeIndex` accepts; ``datetime64`` arrays of any unit that
        divides a day are read as they are (no conversion). Time-zone-aware values are
        grouped by their local wall-clock date (e.g. New York trading dates).
    calibration : Calibration, keyword-only
        The rule (:class:`~rolling_calib.core.calibration.Calibration`; default the paper's):
        ``period`` ``'month'`` (calendar months), ``'week'`` (ISO weeks starting Monday),
        ``'quarter'``, or ``N``: consecutive groups of ``N`` distinct dates present in the data
        (N trading days); ``bias`` ``'pooled'`` (one ``c_k`` for all instruments) or
        ``'per_instrument'`` (``c_{k,j}`` from instrument ``j``'s rows); ``source``
        ``'previous'`` (the previous period, or the ``bias_window`` trading days before the
        period's first date, fewer where the history is shorter) or ``'validation'`` (each
        window's validation predictions: needs ``windows`` and the ``valid_*`` arrays);
        ``missing_instrument``: with per-instrument bias, an instrument with rows in a scored
        period but none in the rows its bias is fitted on raises (``'error'``) or gets the
        pooled bias (``'pooled'``).
    instruments : array-like of shape (n,), optional, keyword-only
        Instrument id per row; required for ``bias='per_instrument'``.
    score_periods : iterable of str or int, optional, keyword-only
        Periods to score, as labels (``'2015-03'``) or 0-based positions in the
        table. Default: every period but the first (``2..K``); every period with
        ``source='validation'``.
    windows : array-like of shape (n,), optional, keyword-only
        Window (model) id of every row; all rows of a date must share one window.
    valid_predictions, valid_labels, valid_windows : array-like of shape (n_v,), optional
        The models' validation-segment predictions, labels and window ids
        (``source='validation'``); ids not in ``windows`` are ignored.
    valid_instruments : array-like of shape (n_v,), optional
        Instrument of every validation row (``bias='per_instrument'``).

    Returns
    -------
    RollingCQL

    Raises
    ------
    ValueError
        Mismatched lengths, non-finite values, NaT timestamps, an unknown option,
        or a scored period with no rows to fit its bias on (by default the
        previous *calendar* period for month/week/quarter: a month without rows
        is not skipped).

    Example
    -------
    >>> ts = ["2015-01-05", "2015-01-06", "2015-02-02", "2015-02-03"]
    >>> r = rolling_calibrated_quadratic_loss([0, 0, 0, 0], [1, 1, 1, 2], ts)
    >>> r.cql, r.ql_scored, r.ql_all   # c_2 = 1: residuals of February become 0 and 1
    (0.5, 2.5, 1.75)
    >>> list(r.table["period"])
    ['2015-01', '2015-02']

    Bias from each window's validation predictions (window 0 covers January, window 1
    February; their validation residuals average 1 and 2):

    >>> r = rolling_calibrated_quadratic_loss(
    ...     [0, 0, 0, 0], [1, 1, 1, 2], ts, windows=[0, 0, 1, 1], calibration=Calibration(source="validation"),
    ...     valid_predictions=[0, 0, 0], valid_labels=[1, 2, 2], valid_windows=[0, 1, 1])
    >>> r.cql, r.cql_refit_first, list(r.table["bias"]), list(r.table["refit_first"])
    (0.25, 0.25, [1.0, 2.0], [True, True])
    """
    p = as_float_1d("predictions", predictions)
    y = as_float_1d("labels", labels)
    check_lengths(predictions=p, labels=y)
    if not isinstance(calibration, Calibration):
        raise ValueError(f"calibration: expected a rolling_calib.core.calibration.Calibration, found "
                         f"{type(calibration).__name__} {calibration!r}")
    scores = rolling_scores(p, y, timestamps, calibration=calibration, instruments=instruments,
                            score_periods=score_periods, windows=windows, valid_predictions=valid_predictions,
                            valid_labels=valid_labels, valid_windows=valid_windows,
                            valid_instruments=valid_instruments)
    return RollingCQL(calibration=calibration, **{f.name: getattr(scores, f.name) for f in fields(scores)})
