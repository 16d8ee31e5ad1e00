"""Declared option constraints, the shared choice tables, and precise messages.

Each option's constraint is declared once, as a value (in the spirit of scikit-learn's
``validate_params``), and checked by one function, so every layer (YAML, CLI, metrics)
words its errors the same way::

    <name>: expected <what the constraint describes>, found <type> <value>

and a configuration error adds the file in front: ``<file>: <dotted key>: expected ...``.

Examples
--------
>>> check("n_boot", 200, Interval(int, 1, None))
200
>>> check("n_boot", True, Interval(int, 1, None))
Traceback (most recent call last):
...
ValueError: n_boot: expected an integer >= 1, found bool True
>>> check("period", "quarter", CALIBRATION_PERIOD)
'quarter'
>>> check("confidence", 1.5, Interval(float, 0, 1, closed="neither"))
Traceback (most recent call last):
...
ValueError: confidence: expected a number in (0, 1), found float 1.5
>>> @validate_params({"n": Interval(int, 1, None)})
... def draws(*, n):
...     return n
>>> draws(n=0)
Traceback (most recent call last):
...
ValueError: n: expected an integer >= 1, found int 0
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "BIAS_MODES",
    "CALIBRATION_PERIOD",
    "CALIBRATION_PERIODS",
    "FINETUNE_ON",
    "MODES",
    "TRAIN_WINDOWS",
    "AnyOf",
    "ConfigError",
    "Constraint",
    "InstanceOf",
    "Interval",
    "Options",
    "as_tuple",
    "check",
    "describe_found",
    "expect",
    "reject_unknown",
    "validate_params",
]


class ConfigError(ValueError):
    """A configuration problem; the message names the file and the dotted key."""


def describe_found(value: Any) -> str:
    """``"<type> <repr>"`` as messages print what was found.

    Examples
    --------
    >>> describe_found(0.5)
    'float 0.5'
    """
    return f"{type(value).__name__} {value!r}"


class Constraint:
    """A declared constraint: :meth:`accepts` a value and :meth:`describes` itself for messages."""

    def accepts(self, value: Any) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - interface
        raise NotImplementedError


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class Interval(Constraint):
    """A number in an interval; ``kind`` is ``int`` (booleans excluded) or ``float`` (any real, not bool).

    ``closed`` is one of ``"both"``, ``"left"``, ``"right"``, ``"neither"``; ``None`` bounds are open-ended.
    Floats must be finite unless ``allow_inf``.

    Examples
    --------
    >>> Interval(int, 1, None).describe()
    'an integer >= 1'
    >>> Interval(float, 0, 1, closed="left").describe()
    'a number in [0, 1)'
    >>> Interval(float, 0, None, closed="neither").accepts(0.0)
    False
    """

    kind: type
    lo: float | None
    hi: float | None
    closed: Literal["both", "left", "right", "neither"] = "both"
    allow_inf: bool = False

    def accepts(self, value: Any) -> bool:
        if not (_is_int(value) if self.kind is int else _is_real(value)):
            return False
        if self.kind is not int and not self.allow_inf and not math.isfinite(float(value)):
            return False
        if isinstance(value, float) and math.isnan(value):
            return False
        lo_ok = self.lo is None or (value >= self.lo if self.closed in ("both", "left") else value > self.lo)
        hi_ok = self.hi is None or (value <= self.hi if self.closed in ("both", "right") else value < self.hi)
        return lo_ok and hi_ok

    def describe(self) -> str:
        noun = "an integer" if self.kind is int else "a number"
        left_closed = self.closed in ("both", "left")
        right_closed = self.closed in ("both", "right")
        if self.lo is not None and self.hi is not None:
            return f"{noun} in {'[' if left_closed else '('}{self.lo:g}, {self.hi:g}{']' if right_closed else ')'}"
        if self.lo is not None:
            return f"{noun} {'>=' if left_closed else '>'} {self.lo:g}"
        if self.hi is not None:
            return f"{noun} {'<=' if right_closed else '<'} {self.hi:g}"
        return f"a finite {noun[2:] if noun.startswith('a ') else noun[3:]}" if self.kind is not int else noun


@dataclass(frozen=True)
class Options(Constraint):
    """One of a fixed set of values.

    Examples
    --------
    >>> Options("pooled", "per_instrument").describe()
    "one of 'pooled', 'per_instrument'"
    """

    values: tuple[Any, ...]

    def __init__(self, *values: Any) -> None:
        object.__setattr__(self, "values", tuple(values))

    def accepts(self, value: Any) -> bool:
        return any(value == v and type(value) is type(v) for v in self.values)

    def describe(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self.values)


@dataclass(frozen=True)
class InstanceOf(Constraint):
    """An instance of ``types`` (a bool is not an int unless ``bool`` is listed); ``what`` words it."""

    types: type | tuple[type, ...]
    what: str

    def accepts(self, value: Any) -> bool:
        return isinstance(value, self.types) and not (isinstance(value, bool) and bool not in as_tuple(self.types))

    def describe(self) -> str:
        return self.what


@dataclass(frozen=True)
class AnyOf(Constraint):
    """Any one of several constraints.

    Examples
    --------
    >>> CALIBRATION_PERIOD.describe()
    "one of 'month', 'week', 'quarter' or an integer >= 1 (trading days)"
    """

    constraints: tuple[Constraint, ...]
    what: str | None = None

    def accepts(self, value: Any) -> bool:
        return any(c.accepts(value) for c in self.constraints)

    def describe(self) -> str:
        return self.what or " or ".join(c.describe() for c in self.constraints)


# --------------------------------------------------------------------------- the shared choice tables
#: Calendar calibration periods (METHOD 2.2); an integer N means N trading days.
CALIBRATION_PERIODS: tuple[str, ...] = ("month", "week", "quarter")
CALIBRATION_PERIOD = AnyOf(
    (Options(*CALIBRATION_PERIODS), Interval(int, 1, None)),
    what="one of 'month', 'week', 'quarter' or an integer >= 1 (trading days)",
)
#: How the bias is pooled: one offset per period, or one per instrument and period.
BIAS_MODES: tuple[str, ...] = ("pooled", "per_instrument")
#: Rolling retraining: fine-tune the previous window's model, or train each window from scratch.
MODES: tuple[str, ...] = ("finetune", "scratch")
#: Training span of a window: all history since the first month, or the last N months.
TRAIN_WINDOWS: tuple[str, ...] = ("expanding", "sliding")
#: What a fine-tuned window trains on: the new months only, or its whole training span.
FINETUNE_ON: tuple[str, ...] = ("new", "window")


# --------------------------------------------------------------------------- checking
def check(name: str, value: Any, constraint: Constraint, *, where: str | None = None) -> Any:
    """Return ``value`` if ``constraint`` accepts it, else raise with the one message format.

    Parameters
    ----------
    name : str
        The option's name (a dotted key for configuration files).
    value : object
    constraint : Constraint
    where : str, optional
        The file (or other source) the value came from; then a :class:`ConfigError` is raised.

    Raises
    ------
    ValueError or ConfigError
        ``"[<where>: ]<name>: expected <describe>, found <type> <value>"``.
    """
    if constraint.accepts(value):
        return value
    message = f"{name}: expected {constraint.describe()}, found {describe_found(value)}"
    if where is not None:
        raise ConfigError(f"{where}: {message}")
    raise ValueError(message)


def validate_params(constraints: Mapping[str, Constraint]) -> Callable:
    """Decorator: check the named arguments of every call against their declared constraints.

    Arguments not named in ``constraints`` are not checked; the check runs before the body.
    """

    def decorate(func: Callable) -> Callable:
        signature = inspect.signature(func)
        unknown = set(constraints) - set(signature.parameters)
        if unknown:
            raise TypeError(f"validate_params: {func.__qualname__} has no parameter(s) {sorted(unknown)}")

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            for name, constraint in constraints.items():
                check(name, bound.arguments[name], constraint)
            return func(*args, **kwargs)

        wrapper.__rc_constraints__ = dict(constraints)  # type: ignore[attr-defined]
        return wrapper

    return decorate


def expect(value: Any, types: type | tuple[type, ...], key: str, what: str, where: str) -> Any:
    """Type check of one configuration value: ``check(key, value, InstanceOf(types, what), where=where)``."""
    return check(key, value, InstanceOf(types, what), where=where)


def as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    """``types`` as a tuple."""
    return types if isinstance(types, tuple) else (types,)


def reject_unknown(section: Mapping, allowed: frozenset[str] | set[str], prefix: str, where: str) -> None:
    """Raise :class:`ConfigError` naming the first key of ``section`` not in ``allowed``."""
    for key in section:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key '{prefix}{key}' (allowed: {', '.join(sorted(allowed))})")
