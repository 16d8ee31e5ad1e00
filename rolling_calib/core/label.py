"""What a unit's predictions were scored against: the label, described as one value.

A Qlib data handler gives two labels: the *raw* one (``DK_R``: the label expression as loaded)
and the *learned* one (``DK_L``: after the handler's processors, e.g. ``CSRankNorm`` ranks each
date's labels and maps them to a normal score). A :class:`Label` records which one (``kind``),
its expression, the processors that changed its values, its unit and its scale, so that every
table, figure and report states the unit of its numbers (a loss in bp², in squared plain returns,
or in squared normalised scores) instead of assuming one.

Units:

* ``bp``: basis points of a return, ``1e4 * (close[t+h]/close[t] - 1)`` (the minute label);
* ``return``: a plain return, e.g. Qlib's Alpha158/Alpha360 ``Ref($close, -2)/Ref($close, -1) - 1``;
* ``normalised``: a processed label (cross-sectional rank or z-score): no return unit;
* ``unknown``: a label whose expression is not known (a handler this library does not recognise).

Examples
--------
>>> raw = Label(kind="raw", expression="1e4 * (close[t+10]/close[t] - 1)", unit="bp", scale=1e4)
>>> raw.describe(), raw.loss_unit
('raw label: 10-minute forward return, bp', 'bp²')
>>> learn = Label(kind="learn", expression="Ref($close, -2)/Ref($close, -1) - 1", processors=("CSRankNorm",),
...               unit="normalised")
>>> learn.describe()
'learned label: Ref($close, -2)/Ref($close, -1) - 1 after CSRankNorm, normalised'
>>> Label.from_dict(learn.to_dict()) == learn
True
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rolling_calib.core.validation import AnyOf, InstanceOf, Interval, Options, Worded, check

__all__ = ["LABEL_CHOICE", "LABEL_CHOICES", "LABEL_KIND", "LABEL_KINDS", "LABEL_UNITS", "Label", "auto_label_kind",
           "describe_choice", "storage_kind"]

#: Which label a unit is scored against: the handler's raw label (``DK_R``) or its learn-processed one (``DK_L``).
LABEL_KINDS: tuple[str, ...] = ("raw", "learn")
#: What one unit of a stored label value is (see the module docstring).
LABEL_UNITS: tuple[str, ...] = ("bp", "return", "normalised", "unknown")
#: A label kind, as options (``--label``, ``label=``) and :class:`Label` check it.
LABEL_KIND = Worded(Options(*LABEL_KINDS), "'raw' or 'learn'")
#: What ``--label`` / ``rolling.label`` may ask for: a kind, or ``auto`` (the learned label when a learn
#: processor changed it, the raw label otherwise: :func:`auto_label_kind`).
LABEL_CHOICES: tuple[str, ...] = ("auto", *LABEL_KINDS)
#: A label choice, as options (``--label``, ``rolling.label``) check it.
LABEL_CHOICE = Worded(Options(*LABEL_CHOICES), "'auto', 'raw' or 'learn'")
_UNIT = Worded(Options(*LABEL_UNITS), "one of " + ", ".join(repr(u) for u in LABEL_UNITS))
_SCALE = Worded(AnyOf((Options(None), Interval(float, 0, None, closed="neither"))), "None or a number > 0")
_EXPRESSION = AnyOf((Options(None), InstanceOf(str, "a string")), what="None or a string")
#: The scale a unit implies: stored value per unit of plain return (None: no return scale).
_SCALES: dict[str, float | None] = {"bp": 1e4, "return": 1.0, "normalised": None, "unknown": None}
_LOSS_UNITS = {"bp": "bp²", "return": "return²", "normalised": "normalised²", "unknown": "label unit²"}
_UNIT_WORDS = {"bp": "bp", "return": "plain return", "normalised": "normalised", "unknown": "unit unknown"}
_MINUTE_RETURN = re.compile(r"^1e4 \* \(close\[t\+(\d+)\]/close\[t\] - 1\)$")


@dataclass(frozen=True, kw_only=True)
class Label:
    """One label of a pipeline: which kind, what expression, which processors, what unit.

    Attributes
    ----------
    kind : "raw" or "learn"
    expression : str or None
        The handler's label expression (``None``: not known).
    processors : tuple of str
        Class names of the processors that changed the label's values, in the order they ran
        (empty for the raw label; ``DropnaLabel`` drops rows and changes no value).
    unit : "bp", "return", "normalised" or "unknown"
    scale : float or None
        Stored value per unit of plain return (1e4 for bp, 1.0 for return); ``None`` for a
        normalised or unknown label. Defaults to the unit's.
    """

    kind: str
    expression: str | None = None
    processors: tuple[str, ...] = ()
    unit: str = "unknown"
    scale: float | None = None

    def __post_init__(self) -> None:
        check("kind", self.kind, LABEL_KIND)
        check("expression", self.expression, _EXPRESSION)
        check("unit", self.unit, _UNIT)
        object.__setattr__(self, "processors", tuple(str(p) for p in self.processors))
        if self.scale is None and _SCALES[self.unit] is not None:
            object.__setattr__(self, "scale", _SCALES[self.unit])
        check("scale", self.scale, _SCALE)

    @property
    def loss_unit(self) -> str:
        """The unit of a squared error of this label: ``'bp²'``, ``'return²'``, ``'normalised²'``."""
        return _LOSS_UNITS[self.unit]

    def describe(self) -> str:
        """One line of plain words: which label, what it is, its unit.

        >>> Label(kind="raw", expression="Ref($close, -2)/Ref($close, -1) - 1", unit="return").describe()
        'raw label: Ref($close, -2)/Ref($close, -1) - 1, plain return'
        >>> Label(kind="raw").describe()
        'raw label: expression unknown, unit unknown'
        """
        which = "raw label" if self.kind == "raw" else "learned label"
        what = "expression unknown" if self.expression is None else self.expression
        minute = _MINUTE_RETURN.match(self.expression or "")
        if minute:
            what = f"{minute.group(1)}-minute forward return"
        if self.processors:
            what += f" after {', '.join(self.processors)}"
        return f"{which}: {what}, {_UNIT_WORDS[self.unit]}"

    def same_values(self, other: Label) -> bool:
        """Whether this label and ``other`` hold the same values (same expression, same processors, both known).

        >>> a = Label(kind="raw", expression="x", unit="return")
        >>> a.same_values(Label(kind="learn", expression="x", unit="return")), a.same_values(Label(kind="learn"))
        (True, False)
        """
        return (self.expression is not None and self.expression == other.expression
                and self.processors == other.processors and self.unit == other.unit)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (recorded in manifests and unit sidecars)."""
        return {"kind": self.kind, "expression": self.expression, "processors": list(self.processors),
                "unit": self.unit, "scale": self.scale}

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> Label:
        """The label of :meth:`to_dict`'s form (``ValueError`` naming a bad field)."""
        if not isinstance(mapping, Mapping):
            raise ValueError(f"label: expected a mapping, found {type(mapping).__name__}")
        unknown = [k for k in mapping if k not in ("kind", "expression", "processors", "unit", "scale")]
        if unknown:
            raise ValueError(f"label: unknown field {unknown[0]!r} (expected kind, expression, processors, unit, scale)")
        return cls(**{k: (tuple(v) if k == "processors" else v) for k, v in mapping.items()})


def auto_label_kind(learned: Iterable[Label | None]) -> str:
    """The kind ``label: auto`` scores against: ``"learn"`` when a learn processor changed a pipeline's label.

    ``learned`` holds each scored pipeline's learned label (``None``: its handler has none). Every
    Qlib benchmark trains on a processed label (``CSRankNorm``, ``CSZScoreNorm``): scoring its
    predictions against the raw return would compare numbers of different scales.

    >>> rank = Label(kind="learn", expression="x", processors=("CSRankNorm",), unit="normalised")
    >>> auto_label_kind([rank]), auto_label_kind([Label(kind="learn", expression="x")]), auto_label_kind([None])
    ('learn', 'raw', 'raw')
    """
    return "learn" if any(lab is not None and lab.processors for lab in learned) else "raw"


def storage_kind(choice: str) -> str:
    """The label kind a unit stores in its ``label`` column for ``rolling.label`` ``choice`` (both kinds are kept).

    ``auto`` stores the raw label first, as ``raw`` does, so that the choice changes no unit (and no hash).

    >>> storage_kind("auto"), storage_kind("learn")
    ('raw', 'learn')
    """
    return "raw" if check("label", choice, LABEL_CHOICE) == "auto" else choice


def describe_choice(label: Label, choice: str) -> str:
    """The scope words for a scored label: its description, and why ``auto`` chose it.

    >>> rank = Label(kind="learn", expression="x", processors=("CSRankNorm",), unit="normalised")
    >>> describe_choice(rank, "auto")
    'learned label: x after CSRankNorm, normalised (--label auto: the label the model learned; --label raw for the raw one)'
    >>> describe_choice(Label(kind="raw", expression="x", unit="return"), "auto")
    'raw label: x, plain return (--label auto: no learn processor changed it)'
    >>> describe_choice(Label(kind="raw", expression="x", unit="return"), "raw")
    'raw label: x, plain return'
    """
    if choice != "auto":
        return label.describe()
    why = ("the label the model learned; --label raw for the raw one" if label.kind == "learn"
           else "no learn processor changed it")
    return f"{label.describe()} (--label auto: {why})"
