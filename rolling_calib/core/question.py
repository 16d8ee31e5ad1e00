"""What a verdict answers, as one value: :class:`Question` (``target``, ``confidence``).

Every verdict, interval, seeds-needed estimate and stopping decision answers a question, apart from
how its random draws are made (:class:`rolling_calib.core.resampling.Resampling`):

* ``target`` -- the population the claim is about:

  ``"period"`` (default)
      over seeds, on the evaluated days: the days are fixed (a fixed backtest), only training
      randomness is a source of chance. Its level holds in every drift cell the calibration
      harness measures (docs/verdict_calibration.md), so it is the headline;
  ``"future"``
      over seeds *and* the market's future: the market-time process is a source of chance beside
      the seeds (what to expect on new periods). It rests on an assumption the evaluated days
      cannot check: that the market's drift is shorter than the horizon its long-run variance sees
      (regimes of months make it decide up to 24% of identical pairs at 95%); reports show it beside
      the headline, as that assumption;

* ``confidence`` -- the level of every interval and ``1 - alpha`` of every decision.

The value owns its defaults and its declared constraints (:mod:`rolling_calib.core.validation`),
checked when it is made, and records itself with every result (:meth:`Question.to_dict`).

Examples
--------
>>> q = Question(target="period", confidence=0.9)
>>> q.to_dict()
{'target': 'period', 'confidence': 0.9}
>>> q.alpha
0.1
>>> Question(target="tomorrow")
Traceback (most recent call last):
...
ValueError: target: expected future (over seeds and the market's future) or period (over seeds, on these days), found 'tomorrow'
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from rolling_calib.core.validation import CONFIDENCE, TARGET, Constraint, InstanceOf, check

__all__ = ["DEFAULT_QUESTION", "QUESTION", "Question"]


@dataclass(frozen=True)
class Question:
    """What every verdict answers: the ``target`` population and the ``confidence`` level (module docstring).

    Attributes
    ----------
    target : {"period", "future"}
        Over seeds on the evaluated days (default), or over seeds and the market's future.
    confidence : float
        Level of every interval; ``alpha = 1 - confidence`` of every decision.
    """

    target: str = "period"
    confidence: float = 0.95

    #: Each field's declared constraint.
    CONSTRAINTS: ClassVar[dict[str, Constraint]] = {"target": TARGET, "confidence": CONFIDENCE}

    def __post_init__(self) -> None:
        for name, constraint in self.CONSTRAINTS.items():
            check(name, getattr(self, name), constraint)

    @property
    def alpha(self) -> float:
        """``1 - confidence``: the error rate a decision spends.

        >>> round(Question(confidence=0.99).alpha, 10)
        0.01
        """
        return round(1.0 - float(self.confidence), 12)

    def replace(self, **changes: Any) -> Question:
        """A copy with ``changes`` (checked)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The question as recorded with every result (JSON, MLflow, the report's scope line)."""
        return {"target": self.target, "confidence": float(self.confidence)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Question:
        """The value :meth:`to_dict` recorded (keys it does not know are ignored).

        >>> Question.from_dict({"target": "period", "confidence": 0.9, "n_boot": 2000})
        Question(target='period', confidence=0.9)
        """
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})

    def describe(self) -> str:
        """The claim in words, for reports.

        >>> Question(target="period").describe()
        'over seeds, on the evaluated days (target period), at 95% confidence'
        """
        where = ("over seeds and the market's future" if self.target == "future"
                 else "over seeds, on the evaluated days")
        return f"{where} (target {self.target}), at {self.confidence:.0%} confidence"


#: The defaults, for functions that are given no :class:`Question`.
DEFAULT_QUESTION = Question()
#: The declared constraint of every ``question=`` argument.
QUESTION = InstanceOf(Question, "a Question value")
