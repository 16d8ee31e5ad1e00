"""The one table of the metrics a store is scored with: name, title, unit and direction.

Every table, verdict, figure, report and MLflow run names a metric from here (in the spirit of
torchmetrics, where a metric declares ``higher_is_better``):

* ``name``: the key in scores, JSON and CSV files (``"ql"``);
* ``title``: how tables and figures print it (``"QL"``);
* ``unit``: a loss is in the squared unit of the label it was scored against
  (:attr:`rolling_calib.core.label.Label.loss_unit`, e.g. ``"bp²"``); the IC metrics are unitless;
* ``higher_is_better``: False for a loss (QL, CQL), True for a score (IC, ICIR, Rank IC).

Examples
--------
>>> from rolling_calib.core.label import Label
>>> METRIC_TABLE["cql"].title, METRIC_TABLE["cql"].unit(Label(kind="raw", unit="bp"))
('CQL', 'bp²')
>>> METRIC_TABLE["rank_ic"].higher_is_better, METRIC_TABLE["rank_ic"].unit(Label(kind="raw", unit="bp"))
(True, '')
>>> title("ql_scored"), title("something_else")
('QL 2..K', 'something_else')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rolling_calib.core.label import Label

__all__ = ["ALL_METRICS", "COMPARED_METRICS", "DECIDE_BY", "LOSS_METRICS", "METRIC_TABLE", "SCORE_METRICS", "Metric",
           "title"]


@dataclass(frozen=True)
class Metric:
    """One metric's name, title, direction, and whether it is a loss in the label's squared unit."""

    name: str
    title: str
    higher_is_better: bool
    squared_loss: bool

    @property
    def orientation(self) -> Literal["lower", "higher"]:
        """``"higher"`` when a higher value is better, else ``"lower"`` (as :func:`~rolling_calib.core.verdict.decide` takes it)."""
        return "higher" if self.higher_is_better else "lower"

    def unit(self, label: Label) -> str:
        """The unit of the metric's values when scored against ``label`` (``""``: unitless)."""
        return label.loss_unit if self.squared_loss else ""


#: Every metric a store is scored with, in the order tables show them.
METRIC_TABLE: dict[str, Metric] = {m.name: m for m in (
    Metric("ql", "QL", higher_is_better=False, squared_loss=True),
    Metric("ql_scored", "QL 2..K", higher_is_better=False, squared_loss=True),
    Metric("cql", "CQL", higher_is_better=False, squared_loss=True),
    Metric("ic", "IC", higher_is_better=True, squared_loss=False),
    Metric("icir", "ICIR", higher_is_better=True, squared_loss=False),
    Metric("rank_ic", "Rank IC", higher_is_better=True, squared_loss=False),
)}
#: The losses (lower is better) and the scores (higher is better).
LOSS_METRICS: tuple[str, ...] = tuple(n for n, m in METRIC_TABLE.items() if not m.higher_is_better)
SCORE_METRICS: tuple[str, ...] = tuple(n for n, m in METRIC_TABLE.items() if m.higher_is_better)
ALL_METRICS: tuple[str, ...] = tuple(METRIC_TABLE)
#: The metrics pairwise accuracies are shown for (QL 2..K is CQL's own reference, not compared on its own).
COMPARED_METRICS: tuple[str, ...] = tuple(n for n in METRIC_TABLE if n != "ql_scored")
#: The metrics whose verdict can stop a pair of a run ``--until-decided`` (``--decide-by``).
DECIDE_BY: tuple[str, ...] = ("ql", "cql", "ic")


def title(name: str) -> str:
    """The metric's title, or ``name`` itself for a metric not in the table (a metaeval variant)."""
    return METRIC_TABLE[name].title if name in METRIC_TABLE else name
