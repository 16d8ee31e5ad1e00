"""The one table of the metrics a store is scored with: name, title, unit and direction.

Every table, verdict, figure, report and MLflow run names a metric from here (in the spirit of
torchmetrics, where a metric declares ``higher_is_better``):

* ``name``: the key in scores, JSON and CSV files (``"ql"``);
* ``title``: how tables and figures print it (``"QL"``);
* ``unit``: a loss is in the squared unit of the label it was scored against
  (:attr:`rolling_calib.core.label.Label.loss_unit`, e.g. ``"bp²"``); the IC metrics are unitless;
  the backtest's daily excess return is a return (a fraction) per day;
* ``higher_is_better``: False for a loss (QL, CQL), True for a score (IC, ICIR, Rank IC, the daily
  excess return of the workflow's backtest with and without its trading cost).

Examples
--------
>>> from rolling_calib.core.label import Label
>>> METRIC_TABLE["cql"].title, METRIC_TABLE["cql"].unit(Label(kind="raw", unit="bp"))
('CQL', 'bp²')
>>> METRIC_TABLE["rank_ic"].higher_is_better, METRIC_TABLE["rank_ic"].unit(Label(kind="raw", unit="bp"))
(True, '')
>>> title("ql_scored"), title("something_else")
('QL 2..K', 'something_else')
>>> METRIC_TABLE["excess_return_cost"].title, METRIC_TABLE["excess_return_cost"].unit(Label(kind="raw", unit="bp"))
('Excess return w/ cost', 'per day')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rolling_calib.core.label import Label

__all__ = ["ALL_METRICS", "BACKTEST_METRICS", "COMPARED_METRICS", "DECIDE_BY", "LOSS_METRICS", "METRIC_TABLE", "SCORE_METRICS",
           "Metric", "title"]


@dataclass(frozen=True)
class Metric:
    """One metric's name, title, direction, and whether it is a loss in the label's squared unit (else ``fixed_unit``)."""

    name: str
    title: str
    higher_is_better: bool
    squared_loss: bool
    fixed_unit: str = ""

    @property
    def orientation(self) -> Literal["lower", "higher"]:
        """``"higher"`` when a higher value is better, else ``"lower"`` (as :func:`~rolling_calib.core.verdict.decide` takes it)."""
        return "higher" if self.higher_is_better else "lower"

    def unit(self, label: Label) -> str:
        """The unit of the metric's values when scored against ``label`` (``""``: unitless)."""
        return label.loss_unit if self.squared_loss else self.fixed_unit


#: Every metric a store is scored with, in the order tables show them.
METRIC_TABLE: dict[str, Metric] = {m.name: m for m in (
    Metric("ql", "QL", higher_is_better=False, squared_loss=True),
    Metric("ql_scored", "QL 2..K", higher_is_better=False, squared_loss=True),
    Metric("cql", "CQL", higher_is_better=False, squared_loss=True),
    Metric("ic", "IC", higher_is_better=True, squared_loss=False),
    Metric("icir", "ICIR", higher_is_better=True, squared_loss=False),
    Metric("rank_ic", "Rank IC", higher_is_better=True, squared_loss=False),
    # the workflow's backtest (PortAnaRecord's config) once per seed over the joined windows: strategy minus benchmark
    Metric("excess_return", "Excess return", higher_is_better=True, squared_loss=False, fixed_unit="per day"),
    Metric("excess_return_cost", "Excess return w/ cost", higher_is_better=True, squared_loss=False,
           fixed_unit="per day"),
)}
#: The losses (lower is better) and the scores (higher is better).
LOSS_METRICS: tuple[str, ...] = tuple(n for n, m in METRIC_TABLE.items() if not m.higher_is_better)
SCORE_METRICS: tuple[str, ...] = tuple(n for n, m in METRIC_TABLE.items() if m.higher_is_better)
ALL_METRICS: tuple[str, ...] = tuple(METRIC_TABLE)
#: The metrics of the workflow's backtest (the daily excess return, without and with the trading cost).
BACKTEST_METRICS: tuple[str, ...] = ("excess_return", "excess_return_cost")
#: The metrics a run ``--until-decided`` can be decided by.
DECIDE_BY: tuple[str, ...] = ("ql", "cql", "ic", *BACKTEST_METRICS)
#: The metrics pairwise accuracies are shown for (QL 2..K is CQL's own reference, not compared on its own).
COMPARED_METRICS: tuple[str, ...] = tuple(n for n in METRIC_TABLE if n != "ql_scored")


def title(name: str) -> str:
    """The metric's title, or ``name`` itself for a metric not in the table (a metaeval variant)."""
    return METRIC_TABLE[name].title if name in METRIC_TABLE else name
