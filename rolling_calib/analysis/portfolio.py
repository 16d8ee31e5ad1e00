"""The portfolio row per pipeline: annualized excess return, information ratio and max drawdown over seeds.

For each run with a backtest (:attr:`StoreScores.backtests <rolling_calib.analysis.scoring.StoreScores>`:
the workflow's strategy over the joined windows), the daily excess return without and with the
trading cost goes through :func:`rolling_calib.core.portfolio.risk_analysis` (Qlib's
``risk_analysis``: the same accumulation ``mode`` and annualisation scaler); each figure is then
summarised over the pipeline's seeds (:func:`rolling_calib.core.portfolio.over_seeds`: mean, std and
the Student-t interval over seeds). Every figure carries what it is about: the strategy, the
benchmark, the cost model, the accumulation mode and the scaler (:class:`PortfolioSummary`).

:func:`excess_curves` gives the cumulative excess-return curve of every run and the mean curve
per pipeline, for the report's figure.

Example
-------
>>> days = pd.DataFrame({"pipeline": "a", "seed": [0, 0, 1, 1], "date": pd.to_datetime(["2017-01-03",
...     "2017-01-04"] * 2), "excess_return": [0.01, 0.0, 0.02, -0.01], "excess_return_cost": [0.009, -0.001,
...     0.019, -0.011]})
>>> summary = portfolio_summary(days, {"a": {"strategy": "TopkDropoutStrategy(topk=5, n_drop=1)",
...                                          "benchmark": "SPY", "cost": "close 0.15%"}})
>>> round(summary.rows[0]["annualized_return"]["mean"], 4)     # 238 days x 0.5% a day, both seeds
1.19
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rolling_calib.core.portfolio import QLIB_DAY_SCALER, RISK_FIELDS, cumulative, over_seeds, risk_analysis
from rolling_calib.core.validation import ACCUMULATION, ANNUALIZATION, CONFIDENCE, validate_params

__all__ = ["COST_KINDS", "FIGURE_TITLES", "PortfolioSummary", "excess_curves", "portfolio_summary", "summary_columns"]

#: The two excess returns: without the trading cost (``return - bench``) and with it (``return - bench - cost``).
COST_KINDS = {"without": "excess_return", "with": "excess_return_cost"}
#: How each figure is printed.
FIGURE_TITLES = {"annualized_return": "annualized excess return", "information_ratio": "information ratio",
                 "max_drawdown": "max drawdown"}


@dataclass(frozen=True)
class PortfolioSummary:
    """Per pipeline and cost kind, each figure of :data:`~rolling_calib.core.portfolio.RISK_FIELDS` over seeds.

    Attributes
    ----------
    rows : list of dict
        ``{"pipeline", "cost": "without"|"with", "n_seeds", "days", figure: SeedSummary dict, ...,
        "per_seed": {seed: {figure: value}}}``.
    specs : dict
        Per pipeline, its backtest in words (``strategy``, ``benchmark``, ``cost``).
    mode : str
        How returns accumulate (``sum``: Qlib's default; ``product``: compounded).
    n : float
        Days per year of the annualisation (Qlib's 238).
    confidence : float
        Level of the intervals (over seeds).
    """

    rows: list[dict[str, Any]]
    specs: dict[str, dict[str, str]] = field(default_factory=dict)
    mode: str = "sum"
    n: float = QLIB_DAY_SCALER
    confidence: float = 0.95

    @property
    def pipelines(self) -> list[str]:
        return list(dict.fromkeys(r["pipeline"] for r in self.rows))

    def row(self, pipeline: str, cost: str) -> dict[str, Any] | None:
        """The row of ``pipeline`` and cost kind ``"without"`` / ``"with"`` (None: no backtest)."""
        return next((r for r in self.rows if r["pipeline"] == pipeline and r["cost"] == cost), None)

    def scope(self, pipeline: str | None = None) -> str:
        """What the figures are about, in words: the backtest (of ``pipeline``, else of all when they agree),
        the accumulation and the annualisation."""
        specs = [self.specs[pipeline]] if pipeline in self.specs else list(self.specs.values())
        described = {_spec_words(s) for s in specs}
        head = next(iter(described)) if len(described) == 1 else "per pipeline (see below)"
        return (f"{head}; returns accumulated by {self.mode} ({'Qlib default' if self.mode == 'sum' else 'compounded'}), "
                f"annualised with {self.n:g} days a year (Qlib's risk_analysis)")

    def to_dict(self) -> dict[str, Any]:
        """Per pipeline: the backtest, mode, scaler, and per cost kind each figure over seeds (``compare --json``)."""
        out: dict[str, Any] = {}
        for name in self.pipelines:
            entry: dict[str, Any] = {"strategy": self.specs.get(name, {}).get("strategy"),
                                     "benchmark": self.specs.get(name, {}).get("benchmark"),
                                     "cost_model": self.specs.get(name, {}).get("cost"),
                                     "mode": self.mode, "annualization_days": self.n, "confidence": self.confidence,
                                     "interval": "Student-t over seeds on the evaluated days (another seed, the "
                                                 "same market; the verdicts add the market's future)"}
            for cost in COST_KINDS:
                row = self.row(name, cost)
                if row is not None:
                    entry[f"{cost}_cost"] = {k: v for k, v in row.items() if k not in ("pipeline", "cost")}
            out[name] = entry
        return out


def _spec_words(spec: Mapping[str, str]) -> str:
    return f"{spec.get('strategy', '?')}; benchmark {spec.get('benchmark', '?')}; cost {spec.get('cost', '?')}"


def _finite(value: float) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


@validate_params({"mode": ACCUMULATION, "n": ANNUALIZATION, "confidence": CONFIDENCE})
def portfolio_summary(backtests: pd.DataFrame, specs: Mapping[str, Mapping[str, Any]], *, mode: str = "sum",
                      n: float = QLIB_DAY_SCALER, confidence: float = 0.95) -> PortfolioSummary:
    """Qlib's risk figures of every run's daily excess return, summarised over each pipeline's seeds.

    Parameters
    ----------
    backtests : DataFrame
        ``pipeline, seed, date, excess_return, excess_return_cost`` (one row per run and day).
    specs : mapping
        Per pipeline, its backtest in words (``strategy``, ``benchmark``, ``cost``).
    mode : {"sum", "product"}
        How returns accumulate (Qlib's ``risk_analysis(mode=...)``).
    n : float
        Days per year (Qlib's day scaler by default).
    confidence : float
        Level of the Student-t intervals over seeds.
    """
    rows = []
    if backtests is not None and not backtests.empty:
        for name, runs in backtests.groupby("pipeline", sort=False):
            for cost, column in COST_KINDS.items():
                per_seed = {}
                for seed, run in runs.groupby("seed"):
                    series = run.sort_values("date")[column].to_numpy(dtype=float)
                    per_seed[int(seed)] = risk_analysis(series, n=n, mode=mode)  # type: ignore[arg-type]
                row: dict[str, Any] = {"pipeline": str(name), "cost": cost, "n_seeds": len(per_seed),
                                       "days": int(max(r.days for r in per_seed.values()))}
                for figure in RISK_FIELDS:
                    row[figure] = over_seeds([getattr(r, figure) for r in per_seed.values()],
                                             confidence=confidence).to_dict()
                row["per_seed"] = {seed: {figure: _finite(getattr(r, figure)) for figure in RISK_FIELDS}
                                   for seed, r in per_seed.items()}
                rows.append(row)
    words = {name: {k: str(spec.get(k, "?")) for k in ("strategy", "benchmark", "cost")} for name, spec in specs.items()}
    return PortfolioSummary(rows=rows, specs=words, mode=mode, n=float(n), confidence=confidence)


@validate_params({"mode": ACCUMULATION})
def excess_curves(backtests: pd.DataFrame, *, cost: str = "with", mode: str = "sum") -> pd.DataFrame:
    """Cumulative excess return per run and day, and the pipelines' mean curve (``seed`` -1).

    Columns ``pipeline, seed, date, cumulative``; the mean curve is the cumulative of the mean daily
    excess return over the pipeline's seeds (the same days for every seed of a pipeline).

    >>> bt = pd.DataFrame({"pipeline": "a", "seed": [0, 0, 1, 1], "date": pd.to_datetime(["2017-01-03",
    ...     "2017-01-04"] * 2), "excess_return": [0.01, 0.0, 0.03, 0.0], "excess_return_cost": 0.0})
    >>> excess_curves(bt, cost="without").query("seed == -1")["cumulative"].round(3).tolist()
    [0.02, 0.02]
    """
    column = COST_KINDS[cost]
    out = []
    if backtests is None or backtests.empty:
        return pd.DataFrame(columns=["pipeline", "seed", "date", "cumulative"])
    for (name, seed), run in backtests.groupby(["pipeline", "seed"], sort=False):
        run = run.sort_values("date")
        out.append(pd.DataFrame({"pipeline": name, "seed": int(seed), "date": run["date"].to_numpy(),
                                 "cumulative": cumulative(run[column].to_numpy(dtype=float), mode=mode)}))  # type: ignore[arg-type]
    for name, runs in backtests.groupby("pipeline", sort=False):
        mean = runs.groupby("date")[column].mean().sort_index()
        out.append(pd.DataFrame({"pipeline": name, "seed": -1, "date": mean.index.to_numpy(),
                                 "cumulative": cumulative(mean.to_numpy(dtype=float), mode=mode)}))  # type: ignore[arg-type]
    return pd.concat(out, ignore_index=True)


def summary_columns(summary: PortfolioSummary, pipeline: str) -> dict[str, float]:
    """The pipeline's figures as ``<figure>[_cost]_mean`` / ``_std`` columns (compare's summary, MLflow's pipeline run).

    >>> s = PortfolioSummary(rows=[{"pipeline": "a", "cost": "with", "information_ratio": {"mean": 0.5, "std": 0.1},
    ...     "annualized_return": {"mean": 0.02, "std": 0.01}, "max_drawdown": {"mean": -0.1, "std": 0.02}}])
    >>> summary_columns(s, "a")["information_ratio_cost_mean"]
    0.5
    """
    out: dict[str, float] = {}
    for cost in COST_KINDS:
        row = summary.row(pipeline, cost)
        if row is None:
            continue
        suffix = "_cost" if cost == "with" else ""
        for figure in RISK_FIELDS:
            for stat in ("mean", "std"):
                value = row[figure].get(stat)
                out[f"{figure}{suffix}_{stat}"] = float(value) if value is not None else np.nan
    return out
