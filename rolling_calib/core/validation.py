"""Declared option constraints, the shared choice tables, and precise messages.

Each option's constraint is declared once, as a value (in the spirit of scikit-learn's
``validate_params``), and checked by one function, so every layer (YAML, CLI, metrics)
words its errors the same way::

    <name>: expected <what the constraint describes>, found <type> <value>

and a configuration error adds the file in front: ``<file>: <dotted key>: expected ...``.
A :class:`Worded` constraint keeps a message's established words and shows the value bare.

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
    "ACCUMULATION",
    "ACCUMULATIONS",
    "ANNUALIZATION",
    "BIAS_MODE",
    "BIAS_MODES",
    "BIAS_WINDOW",
    "BLOCK_LENGTH",
    "BLOCK_SIZE",
    "CALIBRATION_PERIOD",
    "CALIBRATION_PERIODS",
    "CALIBRATION_SOURCE",
    "CALIBRATION_SOURCES",
    "CONFIDENCE",
    "FALLBACK",
    "FALLBACKS",
    "FINETUNE_ON",
    "MAX_N_BOOT",
    "TARGET",
    "TARGETS",
    "WHEN",
    "WHEN_BLOCKS",
    "MODES",
    "NON_NEGATIVE_INT",
    "N_BOOT",
    "POSITIVE_INT",
    "SEED",
    "STANDARD_DEVIATION",
    "TRADING_DAYS",
    "TRAIN_WINDOWS",
    "AllOf",
    "AnyOf",
    "ConfigError",
    "Constraint",
    "InstanceOf",
    "Interval",
    "Options",
    "Worded",
    "as_tuple",
    "check",
    "describe_found",
    "expect",
    "explain",
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

    def found(self, value: Any) -> str:
        """How a message shows a rejected ``value``: ``"<type> <repr>"`` (see :class:`Worded`)."""
        return describe_found(value)

    def blame(self, value: Any) -> Constraint:
        """The constraint a message about rejected ``value`` names: this one (see :class:`AnyOf`, :class:`AllOf`)."""
        return self

    def in_kind(self, value: Any) -> bool:
        """Whether ``value`` is of the kind this constraint bounds (a number of the interval's kind)."""
        return False


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

    def in_kind(self, value: Any) -> bool:
        return _is_int(value) if self.kind is int else _is_real(value)

    def accepts(self, value: Any) -> bool:
        if not self.in_kind(value):
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

    With ``narrow=True`` a value of the kind of exactly one alternative (an integer
    for an integer interval) is reported against that alternative alone.

    Examples
    --------
    >>> AnyOf((Options(None), Interval(int, 1, None))).describe()
    'one of None or an integer >= 1'
    >>> check("period", 0, CALIBRATION_PERIOD)
    Traceback (most recent call last):
    ...
    ValueError: period: expected a positive number of trading days, at most 5040 (20 years), found 0
    """

    constraints: tuple[Constraint, ...]
    what: str | None = None
    narrow: bool = False

    def accepts(self, value: Any) -> bool:
        return any(c.accepts(value) for c in self.constraints)

    def describe(self) -> str:
        return self.what or " or ".join(c.describe() for c in self.constraints)

    def in_kind(self, value: Any) -> bool:
        return any(c.in_kind(value) for c in self.constraints)

    def blame(self, value: Any) -> Constraint:
        if self.narrow:
            kin = [c for c in self.constraints if c.in_kind(value)]
            if len(kin) == 1:
                return kin[0].blame(value)
        return self


@dataclass(frozen=True)
class AllOf(Constraint):
    """Every one of several constraints, checked in order; a message names the first that fails.

    Examples
    --------
    >>> std = AllOf((Worded(Interval(float, None, None), "a finite number"), Interval(float, 0, None)))
    >>> check("x_std", float("nan"), std)
    Traceback (most recent call last):
    ...
    ValueError: x_std: expected a finite number, found nan
    >>> check("x_std", -1.0, std)
    Traceback (most recent call last):
    ...
    ValueError: x_std: expected a number >= 0, found float -1.0
    """

    constraints: tuple[Constraint, ...]

    def accepts(self, value: Any) -> bool:
        return all(c.accepts(value) for c in self.constraints)

    def describe(self) -> str:
        return " and ".join(c.describe() for c in self.constraints)

    def in_kind(self, value: Any) -> bool:
        return all(c.in_kind(value) for c in self.constraints)

    def blame(self, value: Any) -> Constraint:
        for c in self.constraints:
            if not c.accepts(value):
                return c.blame(value)
        return self


@dataclass(frozen=True)
class Worded(Constraint):
    """``constraint`` in the project's established words: ``what`` describes it and the value found is shown bare.

    Keeps a precise message (``"n_boot: expected a positive int, found 0"``) while the rule is
    declared once; a narrower constraint blamed inside (see :class:`AnyOf`) keeps its own words.

    Examples
    --------
    >>> check("n_boot", 0, POSITIVE_INT)
    Traceback (most recent call last):
    ...
    ValueError: n_boot: expected a positive int, found 0
    """

    constraint: Constraint
    what: str

    def accepts(self, value: Any) -> bool:
        return self.constraint.accepts(value)

    def describe(self) -> str:
        return self.what

    def found(self, value: Any) -> str:
        return repr(value.item() if hasattr(value, "item") and type(value).__module__ == "numpy" else value)

    def in_kind(self, value: Any) -> bool:
        return self.constraint.in_kind(value)

    def blame(self, value: Any) -> Constraint:
        inner = self.constraint.blame(value)
        return self if inner is self.constraint else inner


def _either(values: tuple[Any, ...], last: str | None = None) -> str:
    """``"'a', 'b' or 'c'"``: the choices as messages list them (``last`` replaces the final "or" term)."""
    words = [repr(v) for v in values]
    if last is not None:
        return f"{', '.join(words)} or {last}"
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


# --------------------------------------------------------------------------- the shared choice tables
#: Counts and seeds in the project's words (``"a positive int"``, ``"a non-negative int"``).
POSITIVE_INT = Worded(Interval(int, 1, None), "a positive int")
NON_NEGATIVE_INT = Worded(Interval(int, 0, None), "a non-negative int")
#: Bootstrap settings (the fields of :class:`rolling_calib.core.resampling.Resampling`). The replicates are
#: bounded by the memory they take: a seed bootstrap holds ``n_boot`` rows of counts per run, the model
#: confidence set ``n_boot`` resampled means per configuration.
MAX_N_BOOT = 100_000
N_BOOT = Worded(Interval(int, 1, MAX_N_BOOT), f"a positive int <= {MAX_N_BOOT} (the replicates are held in memory)")
#: The level of every interval (a field of :class:`rolling_calib.core.question.Question`).
CONFIDENCE = Worded(Interval(float, 0, 1, closed="neither"), "a number strictly between 0 and 1")
SEED = Worded(Interval(int, 0, 2**32 - 1), "a non-negative integer seed below 2**32 (numpy's seeding range)")
#: ``block_size`` (the model confidence set's stationary bootstrap): None (chosen from the data by
#: :func:`arch.bootstrap.optimal_block_length`) or a mean length >= 1.
BLOCK_LENGTH = Worded(Interval(float, 1, None), "a mean block length >= 1 (time units)")
BLOCK_SIZE = Worded(AnyOf((Options(None), BLOCK_LENGTH)), "None or a mean block length >= 1 (time units)")
#: How a backtest's daily returns accumulate (Qlib's ``risk_analysis(mode=...)``): summed (Qlib's default) or compounded.
ACCUMULATIONS = ("sum", "product")
ACCUMULATION = Options(*ACCUMULATIONS)
#: Periods per year of an annualisation (Qlib's day scaler is 238).
ANNUALIZATION = Worded(Interval(float, 0, 100_000, closed="right"), "a number of periods per year in (0, 100000]")
#: The populations a verdict's claim is about (the ``target`` of :class:`rolling_calib.core.question.Question`):
#: over seeds and the market's future, or over seeds on the evaluated days.
TARGETS = ("future", "period")
TARGET = Worded(Options(*TARGETS), "future (over seeds and the market's future) or period (over seeds, on these days)")
#: What a "when" block is: each refit window of the schedule, or each calendar month.
WHEN_BLOCKS = ("windows", "months")
WHEN = Worded(Options(*WHEN_BLOCKS), "windows (each refit window) or months (each calendar month)")
#: A standard deviation (of scores over runs).
STANDARD_DEVIATION = Worded(Interval(float, 0, None), "a finite standard deviation >= 0")

#: Calendar calibration periods (docs/method.md §2.2); an integer N means N trading days.
CALIBRATION_PERIODS: tuple[str, ...] = ("month", "week", "quarter")
#: A number of trading days (a calibration period or a bias window).
TRADING_DAYS = Worded(Interval(int, 1, 5040), "a positive number of trading days, at most 5040 (20 years)")
#: A calibration period, for YAML (``rolling.calibration.period``), CLI (``--period``) and metrics alike.
CALIBRATION_PERIOD = Worded(
    AnyOf((Options(*CALIBRATION_PERIODS), TRADING_DAYS), narrow=True),
    _either(CALIBRATION_PERIODS, last="a positive int"),
)
#: How the bias is pooled: one offset per period, or one per instrument and period.
BIAS_MODES: tuple[str, ...] = ("pooled", "per_instrument")
BIAS_MODE = Worded(Options(*BIAS_MODES), _either(BIAS_MODES))
#: Days the bias is fitted on: ``None`` (the previous period) or a number of trading days.
BIAS_WINDOW = Worded(AnyOf((Options(None), TRADING_DAYS)), "None or a positive number of trading days, at most 5040")
#: Where a period's bias comes from: the previous calendar period (the paper), or the same model's
#: predictions over its window's validation segment (aligned with retraining).
CALIBRATION_SOURCES: tuple[str, ...] = ("previous", "validation")
CALIBRATION_SOURCE = Worded(Options(*CALIBRATION_SOURCES), _either(CALIBRATION_SOURCES))
#: Per-instrument bias, instrument without rows to fit on: raise, or use the pooled bias.
FALLBACKS: tuple[str, ...] = ("error", "pooled")
FALLBACK = Worded(Options(*FALLBACKS), _either(FALLBACKS))
#: Rolling retraining: fine-tune the previous window's model, or train each window from scratch.
MODES: tuple[str, ...] = ("finetune", "scratch")
#: Training span of a window: all history since the first month, or the last N months.
TRAIN_WINDOWS: tuple[str, ...] = ("expanding", "sliding")
#: What a fine-tuned window trains on: the new months only, or its whole training span.
FINETUNE_ON: tuple[str, ...] = ("new", "window")


# --------------------------------------------------------------------------- upper bounds
@dataclass(frozen=True)
class Bounded(Interval):
    """An :class:`Interval` with both ends whose description names what its upper bound guards (memory or time)."""

    why: str = ""

    def describe(self) -> str:
        shown = str if self.kind is int else (lambda x: f"{x:g}")
        noun = "an integer" if self.kind is int else "a number"
        return f"{noun} in [{shown(self.lo)}, {shown(self.hi)}] ({self.why})"


def at_most(lo: int, hi: int, why: str, *, kind: type = int) -> Constraint:
    """A count in ``[lo, hi]`` whose message names the bound and what it costs (memory or time).

    Every numeric option and config value has an upper bound: beyond it the run would ask for more
    memory or time than any machine gives, and a number that large is a typo.

    Examples
    --------
    >>> explain(10**9, at_most(1, 1024, "processes on one machine"))
    'expected an integer in [1, 1024] (processes on one machine), found int 1000000000'
    """
    return Bounded(kind, lo, hi, why=why)


#: Processes or torch threads of one machine (each holds a unit's memory; 1024 is beyond any CPU count).
WORKERS = at_most(1, 1024, "processes on one machine")
THREADS = at_most(1, 1024, "threads per unit")
#: Retries of a failed unit (each retry costs a unit's training time).
RETRIES = at_most(0, 100, "retries of one unit, each a unit's training time")
#: GPUs reserved per Ray unit.
GPUS = at_most(0, 64, "GPUs reserved per unit", kind=float)
#: Random splits of a meta-evaluation (each scores every pipeline once).
SPLITS = at_most(1, 100_000, "splits, each scoring every pipeline")
#: Months of a rolling step, validation segment or sliding window (a century).
MONTHS = at_most(1, 1200, "months: a century")
#: Trading days of a rolling step (``rolling.step_days``; Qlib's rolling steps 20 or 40): a century of sessions.
SESSIONS = at_most(1, 25_200, "trading days: a century")
#: Bars between a segment's last training row and the next segment (``rolling.purge``): "auto" or a count.
PURGE = AnyOf((Options("auto"), at_most(0, 1_000_000, "bars purged: ten years of minute bars")),
              what="'auto' (the label's look-ahead) or an integer in [0, 1000000] (bars)", narrow=True)
#: Bars of a sample (label horizon, window, step_len, strides, normalisation sample): a year of minutes is 98 280.
BARS = at_most(1, 1_000_000, "bars: ten years of minute bars; memory grows with it")
#: Training epochs (time grows linearly; 10 000 epochs of the smallest window are days).
EPOCHS = at_most(0, 10_000, "epochs: time grows with it")
#: Model widths (hidden units, input features): memory and time grow with their square.
WIDTH = at_most(1, 16_384, "units: memory grows with its square")
#: Recurrent layers (memory and time grow linearly).
LAYERS = at_most(1, 256, "layers: memory and time grow with it")
#: Samples of one minibatch (2**20: the memory estimate is checked against the machine separately).
BATCH = at_most(1, 2**20, "samples per batch: memory grows with it")
#: Synthetic experiments: rounds and runs repeat the whole protocol; samples and features set the memory.
REPEATS = at_most(1, 1_000_000, "repetitions: time grows with it")
SAMPLES = at_most(1, 10_000_000, "samples: memory grows with it")
FEATURES = at_most(1, 10_000, "features: memory grows with samples x features")
#: Seeds of one run (each a trained model per window; as ``rolling.seeds``).
SEED_COUNT = at_most(1, 10_000, "seeds, each a trained model per window")

__all__ += ["BARS", "BATCH", "EPOCHS", "FEATURES", "GPUS", "LAYERS", "MONTHS", "PURGE", "REPEATS", "RETRIES", "SAMPLES",
            "SEED_COUNT", "SESSIONS", "SPLITS", "THREADS", "WIDTH", "WORKERS", "at_most"]


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
    problem = explain(value, constraint)
    if problem is None:
        return value
    message = f"{name}: {problem}"
    if where is not None:
        raise ConfigError(f"{where}: {message}")
    raise ValueError(message)


def explain(value: Any, constraint: Constraint) -> str | None:
    """``"expected <describe>, found <value>"`` when ``constraint`` rejects ``value``, else ``None``.

    The text :func:`check` puts after the name (argparse ``type=`` helpers show it as is).

    Examples
    --------
    >>> explain("fortnight", CALIBRATION_PERIOD)
    "expected 'month', 'week', 'quarter' or a positive int, found 'fortnight'"
    >>> explain("week", CALIBRATION_PERIOD) is None
    True
    """
    if constraint.accepts(value):
        return None
    culprit = constraint.blame(value)
    return f"expected {culprit.describe()}, found {culprit.found(value)}"


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
