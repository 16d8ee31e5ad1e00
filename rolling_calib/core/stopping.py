"""When to stop adding seeds, as one value: :class:`StoppingRule`.

A comparison run in batches of seeds (``rolling-calib run --until-decided``, the replay of
:func:`rolling_calib.core.sequential.replay`, the racing of many configurations) looks at its pairs
after every batch and stops each pair once it is decided. The rule's settings travel as one frozen
value that owns its defaults and declares each constraint once (:mod:`rolling_calib.core.validation`),
checked when the value is made:

``first``
    seeds per pipeline at the first look (a verdict needs 2);
``batch``
    seeds added per look to the pipelines still in an open pair;
``max_seeds``
    the budget per pipeline (the full grid), at least ``first``;
``spending``
    the alpha-spending function that holds the error rate over the looks
    (:data:`SPENDINGS`; Hwang-Shih-DeCani with gamma -2 by default);
``futility``
    stop a pair undetermined when its predictive chance to decide by ``max_seeds`` is below
    this (0: never);
``margin``
    equivalence margin in the metric's unit: a pair whose interval lies inside ``(-margin,
    margin)`` stops as equivalent (None: no equivalence stop); finite and > 0;
``seed_variance``
    where a race (:func:`rolling_calib.core.racing.race`) takes each comparison's seed variance from
    (:data:`SEED_VARIANCES`): ``pair``, the pair's own ``k`` per-seed differences (``k - 1`` degrees of
    freedom); ``pooled``, the configurations x seeds table of run means of every configuration the
    look compares (two-way residual mean square, ``(K - 1)(k - 1)`` degrees of freedom), valid when
    the configurations' seed variances are alike (its level under unlike ones: ``docs/racing.md``).
    With two configurations the two are the same number; a pair's rule reads only the pair's own.

What the stops answer -- the target population and the confidence level spent over the looks --
is the :class:`~rolling_calib.core.question.Question` taken beside the rule; which metric decides
and in which direction is the comparison's.

Examples
--------
>>> rule = StoppingRule(first=3, batch=2, max_seeds=10)
>>> rule.to_dict()     # doctest: +NORMALIZE_WHITESPACE
{'first': 3, 'batch': 2, 'max_seeds': 10, 'spending': 'hwang-shih-decani', 'futility': 0.2, 'margin': None,
 'seed_variance': 'pair'}
>>> rule.seeds_at(look=4)
9
>>> StoppingRule(first=5, max_seeds=4)
Traceback (most recent call last):
...
ValueError: max_seeds: expected an integer >= first (5), found 4
>>> StoppingRule(margin=float("inf"))
Traceback (most recent call last):
...
ValueError: margin: expected None or a finite number > 0 (in the metric's unit), found inf
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from rolling_calib.core.validation import (
    SEED_COUNT,
    AnyOf,
    Constraint,
    InstanceOf,
    Interval,
    Options,
    Worded,
    at_most,
    check,
)

__all__ = ["DEFAULT_RULE", "FIRST_SEEDS", "FUTILITY", "MARGIN", "PROBABILITY", "SEED_VARIANCES", "SEED_VARIANCE_NAME",
           "SPENDINGS", "SPENDING_NAME", "STOPPING_RULE", "StoppingRule"]

#: The alpha-spending functions a rule may name (their formulas: :mod:`rolling_calib.core.sequential`).
SPENDINGS = ("hwang-shih-decani", "obrien-fleming")
SPENDING_NAME = Worded(Options(*SPENDINGS), "'hwang-shih-decani' or 'obrien-fleming'")
#: Where a race's comparisons take their seed variance from: the pair's own seeds, or pooled over the look's table.
SEED_VARIANCES = ("pair", "pooled")
SEED_VARIANCE_NAME = Worded(Options(*SEED_VARIANCES), "'pair' or 'pooled'")
#: Seeds per pipeline at the first look: a verdict needs two.
FIRST_SEEDS = at_most(2, 10_000, "seeds, each a trained model per window; a verdict needs 2")
#: A probability (the futility threshold).
PROBABILITY = Worded(Interval(float, 0, 1), "a probability in [0, 1]")
#: The equivalence margin: None, or a finite number > 0 in the metric's unit.
MARGIN = Worded(AnyOf((Options(None), Interval(float, 0, None, closed="neither"))),
                "None or a finite number > 0 (in the metric's unit)")
#: Default futility threshold.
FUTILITY = 0.20


@dataclass(frozen=True, kw_only=True)
class StoppingRule:
    """When a pair stops and how many seeds each look adds (module docstring).

    Attributes
    ----------
    first, batch, max_seeds : int
        Seeds per pipeline at the first look, added per look, and the budget.
    spending : {"hwang-shih-decani", "obrien-fleming"}
        Alpha spending over the looks.
    futility : float
        Stop undetermined when the predictive chance to decide by ``max_seeds`` is below this.
    margin : float or None
        Equivalence margin in the metric's unit (None: no equivalence stop).
    seed_variance : {"pair", "pooled"}
        A race's seed variance per comparison: the pair's own, or pooled over the configurations compared.
    """

    first: int = 3
    batch: int = 2
    max_seeds: int = 20
    spending: str = "hwang-shih-decani"
    futility: float = FUTILITY
    margin: float | None = None
    seed_variance: str = "pair"

    #: Each field's declared constraint; beside them, ``max_seeds >= first``.
    CONSTRAINTS: ClassVar[dict[str, Constraint]] = {
        "first": FIRST_SEEDS, "batch": SEED_COUNT, "max_seeds": SEED_COUNT, "spending": SPENDING_NAME,
        "futility": PROBABILITY, "margin": MARGIN, "seed_variance": SEED_VARIANCE_NAME,
    }

    def __post_init__(self) -> None:
        for name, constraint in self.CONSTRAINTS.items():
            check(name, getattr(self, name), constraint)
        check("max_seeds", self.max_seeds, Worded(Interval(int, self.first, None),
                                                  f"an integer >= first ({self.first})"))

    def replace(self, **changes: Any) -> StoppingRule:
        """A copy with ``changes`` (checked)."""
        return dataclasses.replace(self, **changes)

    def seeds_at(self, look: int) -> int:
        """Seeds per pipeline a pair's look number ``look`` (1, 2, ...) reads: ``first + (look - 1) * batch``, capped.

        >>> StoppingRule(first=3, batch=2, max_seeds=6).seeds_at(3)
        6
        """
        return min(self.first + (int(look) - 1) * self.batch, self.max_seeds)

    def to_dict(self) -> dict[str, Any]:
        """The rule as recorded with every result (``sequential.json``, MLflow, the bench's output)."""
        return {"first": int(self.first), "batch": int(self.batch), "max_seeds": int(self.max_seeds),
                "spending": self.spending, "futility": float(self.futility),
                "margin": None if self.margin is None else float(self.margin), "seed_variance": self.seed_variance}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StoppingRule:
        """The value :meth:`to_dict` recorded (keys it does not know are ignored: a path's flat settings read too).

        >>> StoppingRule.from_dict({"first": 2, "batch": 1, "max_seeds": 4, "confidence": 0.95}).max_seeds
        4
        """
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})

    def describe(self) -> str:
        """The rule in words, for reports.

        >>> StoppingRule(margin=0.5).describe()
        '3 seeds per pipeline first, then 2 per look up to 20; hwang-shih-decani spending; futility 20%; equivalence margin ±0.5'
        """
        margin = "no equivalence stop" if self.margin is None else f"equivalence margin ±{self.margin:g}"
        pooled = "; seed variance pooled over the configurations" if self.seed_variance == "pooled" else ""
        return (f"{self.first} seeds per pipeline first, then {self.batch} per look up to {self.max_seeds}; "
                f"{self.spending} spending; futility {self.futility:.0%}; {margin}{pooled}")


#: The defaults, for functions that are given no :class:`StoppingRule`.
DEFAULT_RULE = StoppingRule()
#: The declared constraint of every ``rule=`` argument.
STOPPING_RULE = InstanceOf(StoppingRule, "a StoppingRule value")
