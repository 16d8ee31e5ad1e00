"""The portfolio row of a Qlib benchmark table, as pure functions: risk of a daily excess-return series, over seeds.

Qlib's ``PortAnaRecord`` reports, for the daily excess return ``r_t`` of a backtest (strategy minus
benchmark, with and without the trading cost), ``qlib.contrib.evaluate.risk_analysis``. With ``T``
days and the annualisation scaler ``N`` (Qlib's ``day`` scaler is 238 trading days)::

    mode "sum" (Qlib's default: returns accumulated by summation)
        mean = (1/T) sum r_t            std = sample std (ddof 1)
        annualized_return = N mean      max_drawdown = min_t (C_t - max_{s<=t} C_s),  C_t = sum_{s<=t} r_s
    mode "product" (compounded)
        G_t = prod_{s<=t} (1 + r_s)     mean = G_T^(1/T) - 1      std = std of log(1 + r_t) (ddof 1)
        annualized_return = G_T^(N/T) - 1                          max_drawdown = min_t (G_t / max_{s<=t} G_s - 1)
    information_ratio = mean / std * sqrt(N)

:func:`risk_analysis` computes these (the same numbers as Qlib's function, checked by the tests);
:func:`over_seeds` summarises one figure over seeds (mean, std, Student-t interval), and
:func:`cumulative` is the curve the report draws. This module is pure NumPy/SciPy: no Qlib.

Examples
--------
>>> r = np.array([0.01, -0.02, 0.005, 0.0])
>>> risk = risk_analysis(r, n=238)
>>> round(risk.annualized_return, 4), round(risk.max_drawdown, 4)
(-0.2975, -0.02)
>>> cumulative(r, mode="sum").round(4).tolist()
[0.01, -0.01, -0.005, -0.005]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from rolling_calib.core.jsonable import fields_dict
from rolling_calib.core.validation import ACCUMULATION as ACCUMULATION_MODE
from rolling_calib.core.validation import ACCUMULATIONS, ANNUALIZATION, CONFIDENCE, validate_params

__all__ = ["ACCUMULATION", "QLIB_DAY_SCALER", "RISK_FIELDS", "Risk", "SeedSummary", "cumulative", "over_seeds",
           "risk_analysis"]

#: Qlib's annualisation scaler of daily returns (``risk_analysis``'s ``day``: 238 trading days a year).
QLIB_DAY_SCALER = 238
#: How returns accumulate (Qlib's ``risk_analysis(mode=...)``): ``sum`` is Qlib's default.
ACCUMULATION = ACCUMULATIONS
#: The figures of :class:`Risk` a table shows, in Qlib's order.
RISK_FIELDS = ("annualized_return", "information_ratio", "max_drawdown")


@dataclass(frozen=True)
class Risk:
    """Qlib's ``risk_analysis`` of one daily return series (module docstring: the formulas)."""

    mean: float
    std: float
    annualized_return: float
    information_ratio: float
    max_drawdown: float
    days: int
    n: float
    mode: str

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


@validate_params({"n": ANNUALIZATION, "mode": ACCUMULATION_MODE})
def risk_analysis(r: Any, *, n: float = QLIB_DAY_SCALER, mode: Literal["sum", "product"] = "sum") -> Risk:
    """Qlib's ``risk_analysis`` of the daily returns ``r`` (NaN-free, in time order).

    Parameters
    ----------
    r : array-like of float
        Daily (excess) returns, as fractions (0.01 is 1%).
    n : float
        Periods per year (Qlib's day scaler 238 by default).
    mode : {"sum", "product"}
        Accumulate by summation (Qlib's default) or by compounding.

    Examples
    --------
    >>> risk_analysis([0.01, 0.01, -0.01], n=252).information_ratio   # 1/3 of a percent a day, std 1.15%
    4.58257569495584
    >>> risk_analysis([0.1, -0.5, 0.2], mode="product").max_drawdown
    -0.5
    """
    x = np.asarray(r, dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"r: expected a non-empty 1-d series of daily returns, found shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"r: expected finite daily returns, found {int((~np.isfinite(x)).sum())} NaN or inf")
    std_of = (lambda v: float(np.std(v, ddof=1))) if x.size > 1 else (lambda v: math.nan)
    if mode == "sum":
        mean, std = float(x.mean()), std_of(x)
        curve = np.cumsum(x)
        annualized = mean * n
        drawdown = float((curve - np.maximum.accumulate(curve)).min())
    else:
        curve = np.cumprod(1.0 + x)
        mean = float(curve[-1] ** (1.0 / x.size) - 1.0)
        std = std_of(np.log1p(x))
        annualized = float(curve[-1] ** (n / x.size) - 1.0)
        drawdown = float((curve / np.maximum.accumulate(curve) - 1.0).min())
    ir = mean / std * math.sqrt(n) if std and math.isfinite(std) and std > 0 else math.nan
    return Risk(mean=mean, std=std, annualized_return=float(annualized), information_ratio=float(ir),
                max_drawdown=drawdown, days=int(x.size), n=float(n), mode=mode)


@validate_params({"mode": ACCUMULATION_MODE})
def cumulative(r: Any, *, mode: Literal["sum", "product"] = "sum") -> np.ndarray:
    """The cumulative return curve of daily returns ``r``: ``cumsum`` (``sum``) or ``cumprod(1 + r) - 1``.

    >>> cumulative([0.1, 0.1], mode="product").round(3).tolist()
    [0.1, 0.21]
    """
    x = np.asarray(r, dtype=float)
    return np.cumsum(x) if mode == "sum" else np.cumprod(1.0 + x) - 1.0


@dataclass(frozen=True)
class SeedSummary:
    """One figure over seeds: ``mean``, ``std`` (ddof 1), and the Student-t interval of the mean at ``confidence``.

    The interval is over seeds on the evaluated days (the seeds' spread only: ``t_{n-1} std / sqrt(n)``);
    NaN bounds with fewer than 2 seeds.
    """

    mean: float
    std: float
    ci_low: float
    ci_high: float
    n_seeds: int
    confidence: float

    def to_dict(self) -> dict[str, Any]:
        return fields_dict(self)


@validate_params({"confidence": CONFIDENCE})
def over_seeds(values: Any, *, confidence: float = 0.95) -> SeedSummary:
    """Mean, std and Student-t interval over seeds of one figure (NaN values left out).

    Examples
    --------
    >>> s = over_seeds([1.0, 2.0, 3.0])
    >>> s.mean, s.std, round(s.ci_low, 3), round(s.ci_high, 3)
    (2.0, 1.0, -0.484, 4.484)
    >>> over_seeds([0.5]).ci_low
    nan
    """
    from scipy import stats

    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return SeedSummary(math.nan, math.nan, math.nan, math.nan, 0, confidence)
    mean = float(x.mean())
    if n < 2:
        return SeedSummary(mean, math.nan, math.nan, math.nan, n, confidence)
    std = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + confidence / 2, df=n - 1)) * std / math.sqrt(n)
    return SeedSummary(mean, std, mean - half, mean + half, n, confidence)
