"""The calibration rule of the rolling calibrated quadratic loss (METHOD 2.2), as one value.

A :class:`Calibration` says how CQL shifts each period's predictions before scoring them:
the period (``month``, ``week``, ``quarter`` or N trading days), the bias mode (one pooled
bias, or one per instrument), where each period's bias is fitted (the previous period, or each
window's own validation predictions), the days it is fitted on (``bias_window``) and what happens
to an instrument without rows to fit on (``missing_instrument``). It is built once, from
``rolling.calibration`` of an experiment file, a store's manifest or the command line, and passed
unchanged to the metric, the scoring of a store, the diagnostics, the meta-evaluation, the report
and tracking. Its constraints are the declared ones of :mod:`rolling_calib.core.validation`,
checked when it is made.

Examples
--------
>>> cal = Calibration()
>>> cal.describe()
'monthly periods, one pooled bias from the previous month'
>>> cal.to_dict()                        # the form recorded in manifests (and hashed): defaults of newer options left out
{'period': 'month', 'bias': 'pooled'}
>>> Calibration.from_dict({"period": 20, "bias": "per_instrument", "missing_instrument": "pooled"}).describe()
'periods of 20 trading days, one bias per instrument from the previous period (pooled where an instrument has none)'
>>> cal.replace(source="validation").to_dict()
{'period': 'month', 'bias': 'pooled', 'source': 'validation'}
>>> Calibration(period="fortnight")
Traceback (most recent call last):
...
ValueError: period: expected 'month', 'week', 'quarter' or a positive int, found 'fortnight'
>>> Calibration(source="validation", bias_window=5)
Traceback (most recent call last):
...
ValueError: bias_window: must be None with source='validation' (the bias comes from each window's validation predictions), found 5
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rolling_calib.core.validation import (
    BIAS_MODE,
    BIAS_WINDOW,
    CALIBRATION_PERIOD,
    CALIBRATION_SOURCE,
    FALLBACK,
    ConfigError,
    Constraint,
    check,
    reject_unknown,
)

__all__ = ["CALIBRATION_FIELDS", "Calibration"]

#: Every option of the rule and its declared constraint, in the order of :meth:`Calibration.to_dict`.
CALIBRATION_FIELDS: dict[str, Constraint] = {
    "period": CALIBRATION_PERIOD,
    "bias": BIAS_MODE,
    "source": CALIBRATION_SOURCE,
    "bias_window": BIAS_WINDOW,
    "missing_instrument": FALLBACK,
}
#: Options that came after the first stores: left out of :meth:`Calibration.to_dict` at their defaults,
#: so manifests (and the shared config hash computed from them) of existing stores stay as they are.
_LEFT_OUT_AT_DEFAULT = ("source", "bias_window", "missing_instrument")
_PERIOD_WORDS = {"month": ("monthly", "month"), "week": ("weekly", "week"), "quarter": ("quarterly", "quarter")}


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """How the rolling CQL calibrates each period (METHOD 2.2); validated when made.

    Attributes
    ----------
    period : "month", "week", "quarter" or int
        Calibration period; an int ``N`` means consecutive groups of N trading days (dates present).
    bias : "pooled" or "per_instrument"
        One bias per period for all instruments (the paper's rule) or one per instrument.
    source : "previous" or "validation"
        Fit each period's bias on the previous period (the paper's rule) or on each window's own
        predictions over its validation segment (aligned with retraining).
    bias_window : int or None
        Fit the bias on the N trading days before each period instead of the whole previous
        period (``source='previous'`` only).
    missing_instrument : "error" or "pooled"
        Per-instrument bias, an instrument without rows to fit on: raise, or use the pooled bias.
    """

    period: str | int = "month"
    bias: str = "pooled"
    source: str = "previous"
    bias_window: int | None = None
    missing_instrument: str = "error"

    def __post_init__(self) -> None:
        for name, constraint in CALIBRATION_FIELDS.items():
            check(name, getattr(self, name), constraint)
        if self.source == "validation" and self.bias_window is not None:
            raise ValueError(f"bias_window: must be None with source='validation' (the bias comes from each window's "
                             f"validation predictions), found {self.bias_window!r}")

    # ------------------------------------------------------------------ forms
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form in a stable key order; ``source``, ``bias_window`` and ``missing_instrument`` only
        when they differ from their defaults (so the recorded form, and every hash of it, of a rule
        that existing stores could express is unchanged)."""
        out: dict[str, Any] = {"period": self.period, "bias": self.bias}
        defaults = Calibration()
        for name in _LEFT_OUT_AT_DEFAULT:
            if getattr(self, name) != getattr(defaults, name):
                out[name] = getattr(self, name)
        return out

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any] | None, *, where: str | None = None,
                  prefix: str = "") -> Calibration:
        """The rule of a mapping (``rolling.calibration`` of a YAML file, a manifest, :meth:`to_dict`).

        Missing keys take their defaults (old manifests hold ``{period, bias}`` or ``{period, bias,
        source}``; ``None`` or ``{}`` is the paper's rule). Unknown keys and values outside the
        declared constraints are refused; with ``where`` (a file) as
        :class:`~rolling_calib.core.validation.ConfigError` naming ``where`` and ``prefix + key``.

        >>> Calibration.from_dict({"period": "week", "bias": "pooled", "source": "previous"}) == Calibration(period="week")
        True
        >>> Calibration.from_dict({"bias": "median"}, where="exp.yaml", prefix="rolling.calibration.")
        Traceback (most recent call last):
        ...
        rolling_calib.core.validation.ConfigError: exp.yaml: rolling.calibration.bias: expected 'pooled' or 'per_instrument', found 'median'
        """
        mapping = {} if mapping is None else mapping
        if not isinstance(mapping, Mapping):
            message = f"{prefix.rstrip('.') or 'calibration'}: expected a mapping, found {type(mapping).__name__}"
            raise ConfigError(f"{where}: {message}") if where is not None else ValueError(message)
        if where is not None:
            reject_unknown(mapping, set(CALIBRATION_FIELDS), prefix, where)
        else:
            unknown = [k for k in mapping if k not in CALIBRATION_FIELDS]
            if unknown:
                raise ValueError(f"{prefix}{unknown[0]}: unknown calibration option (allowed: "
                                 f"{', '.join(CALIBRATION_FIELDS)})")
        for name, constraint in CALIBRATION_FIELDS.items():
            if name in mapping:
                check(f"{prefix}{name}", mapping[name], constraint, where=where)
        try:
            return cls(**dict(mapping))
        except ValueError as exc:  # the cross-field rule
            if where is None:
                raise
            raise ConfigError(f"{where}: {prefix}{exc}") from exc

    def replace(self, **changes: Any) -> Calibration:
        """A copy with ``changes``, checked like a new rule.

        >>> Calibration().replace(period="week").describe()
        'weekly periods, one pooled bias from the previous week'
        """
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ words
    def describe(self) -> str:
        """One line of plain words for reports and tables.

        >>> Calibration(period="week", source="validation").describe()
        "weekly periods, one pooled bias from each window's validation predictions"
        >>> Calibration(bias_window=5).describe()
        'monthly periods, one pooled bias from the 5 trading days before each period'
        """
        if isinstance(self.period, str):
            periods, name = _PERIOD_WORDS[self.period][0] + " periods", _PERIOD_WORDS[self.period][1]
        else:
            periods, name = f"periods of {self.period} trading days", "period"
        bias = "one pooled bias" if self.bias == "pooled" else "one bias per instrument"
        if self.source == "validation":
            where = "from each window's validation predictions"
        elif self.bias_window is not None:
            where = f"from the {self.bias_window} trading days before each period"
        else:
            where = f"from the previous {name}"
        fallback = " (pooled where an instrument has none)" if (
            self.bias == "per_instrument" and self.missing_instrument == "pooled") else ""
        return f"{periods}, {bias} {where}{fallback}"
