"""The raw and the learned label of a Qlib task, described from its handler config (no data loaded).

A Qlib ``DataHandlerLP`` keeps its data three ways: raw (``DK_R``, the loaded expressions), infer
(``DK_I``) and learn (``DK_L``). The learned label is the raw one after the handler's processors,
in Qlib's order: ``shared_processors``, then ``infer_processors`` when ``process_type`` is
``"append"`` (the default), then ``learn_processors``. :func:`describe_labels` reads that chain from
the handler's arguments (or the class's defaults, e.g. Alpha158's ``DropnaLabel`` +
``CSZScoreNorm(fields_group="label")``) and keeps the processors that change label values: those
whose ``fields_group`` covers the label (``"label"``, a list holding it, or ``None``: every
column) other than the ones that only drop rows or columns (``DropnaLabel``, ``DropCol`` ...).

The label expression comes from the handler: ``1e4 * (close[t+h]/close[t] - 1)`` for
:class:`~rolling_calib.qlib_adapter.dataset.MinuteBarHandler` (unit bp), the handler's ``label``
argument or its class's ``get_label_config()`` for Qlib's handlers
(``Ref($close, -2)/Ref($close, -1) - 1`` for Alpha158/Alpha360: unit return).

Examples
--------
>>> alpha360 = {"dataset": {"kwargs": {"handler": {"class": "Alpha360", "module_path": "qlib.contrib.data.handler",
...     "kwargs": {"learn_processors": [{"class": "DropnaLabel"},
...                                     {"class": "CSRankNorm", "kwargs": {"fields_group": "label"}}],
...                "infer_processors": [{"class": "RobustZScoreNorm", "kwargs": {"fields_group": "feature"}}]}}}}}
>>> d = describe_labels(alpha360)
>>> d.labels["raw"].describe()
'raw label: Ref($close, -2)/Ref($close, -1) - 1, plain return'
>>> d.labels["learn"].describe()
'learned label: Ref($close, -2)/Ref($close, -1) - 1 after CSRankNorm, normalised'
>>> minute = {"dataset": {"kwargs": {"handler": {"class": "MinuteBarHandler",
...     "module_path": "rolling_calib.qlib_adapter.dataset", "kwargs": {"label_horizon": 10}}}}}
>>> describe_labels(minute).labels["learn"].describe()
'learned label: 10-minute forward return, bp'
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rolling_calib.core.label import LABEL_KINDS, Label
from rolling_calib.core.validation import ConfigError
from rolling_calib.qlib_adapter.task_spec import import_class

__all__ = ["LabelDescription", "describe_labels", "label_processors", "label_purge"]

#: Processors that drop rows or columns (or rename ids) and change no label value.
KEEPS_VALUES = frozenset({"DropnaLabel", "DropnaProcessor", "DropnaFeature", "DropCol", "FilterCol",
                          "HashStockFormat", "TimeRangeFlt"})
#: Processors that repair values (NaN, inf) and keep the label's unit; any other value-changing one normalises.
KEEPS_UNIT = frozenset({"Fillna", "ProcessInf", "CSZFillna"})
_RATIO_RETURN = re.compile(r"^\s*Ref\(\s*\$\w+\s*,\s*-?\d+\s*\)\s*/\s*Ref\(\s*\$\w+\s*,\s*-?\d+\s*\)\s*-\s*1\s*$")


@dataclass(frozen=True)
class LabelDescription:
    """The labels of a task (``"raw"`` always, ``"learn"`` for a ``DataHandlerLP``) and what could not be told."""

    labels: dict[str, Label]
    notes: list[str] = field(default_factory=list)


def describe_labels(task: Mapping[str, Any]) -> LabelDescription:
    """Both labels of ``task`` (a Qlib task: ``dataset.kwargs.handler``), from its config alone."""
    handler = (task.get("dataset") or {}).get("kwargs", {}).get("handler")
    if not isinstance(handler, Mapping):
        return _unknown(f"the dataset's handler is {type(handler).__name__}, not a class spec")
    from qlib.data.dataset.handler import DataHandlerLP

    try:
        cls = import_class(dict(handler), "task.dataset.kwargs.handler", "task")
    except ConfigError as exc:
        return _unknown(f"its handler class cannot be imported ({exc})")
    kwargs = dict(handler.get("kwargs") or {})
    expression, unit, notes = _expression(cls, kwargs)
    raw = Label(kind="raw", expression=expression, unit=unit)
    if not issubclass(cls, DataHandlerLP):
        return LabelDescription({"raw": raw}, notes)
    processors = label_processors(cls, kwargs)
    normalised = any(p not in KEEPS_UNIT for p in processors)
    learn = Label(kind="learn", expression=expression, processors=processors,
                  unit="normalised" if normalised else unit)
    return LabelDescription({"raw": raw, "learn": learn}, notes)


def _unknown(why: str) -> LabelDescription:
    labels = {kind: Label(kind=kind) for kind in LABEL_KINDS}
    return LabelDescription(labels, [f"label expression and unit unknown: {why}"])


def _expression(cls: type, kwargs: Mapping[str, Any]) -> tuple[str | None, str, list[str]]:
    """``(expression, unit, notes)`` of the handler's raw label."""
    from rolling_calib.qlib_adapter.dataset import MinuteBarHandler

    if issubclass(cls, MinuteBarHandler):
        horizon = int(kwargs.get("label_horizon", _default(cls, "label_horizon", 10)))
        return f"1e4 * (close[t+{horizon}]/close[t] - 1)", "bp", []
    config = kwargs.get("label")
    if config is None:
        loader = kwargs.get("data_loader")
        if isinstance(loader, Mapping):
            config = ((loader.get("kwargs") or {}).get("config") or {}).get("label")
    if config is None and callable(getattr(cls, "get_label_config", None)):
        try:
            config = cls.get_label_config(cls.__new__(cls))   # Qlib's handlers: a constant, no state read
        except Exception:  # noqa: BLE001 - a handler whose label needs its state: unknown, said below
            config = None
    expressions = _label_expressions(config)
    if not expressions:
        return None, "unknown", [f"label expression of {cls.__qualname__} unknown (no label argument, no "
                                 f"get_label_config()); its unit is unknown"]
    expression = "; ".join(expressions)
    if all(_RATIO_RETURN.match(e) for e in expressions):
        return expression, "return", []
    return expression, "unknown", [f"label {expression!r} of {cls.__qualname__} is not a plain return "
                                   f"(Ref($x, -a)/Ref($x, -b) - 1); its unit is unknown"]


def _label_expressions(config: Any) -> list[str]:
    """The expressions of a Qlib label config: ``[expr, ...]``, ``([expr, ...], [name, ...])`` or one string."""
    if isinstance(config, str):
        return [config]
    if isinstance(config, Sequence) and len(config) == 2 and all(isinstance(part, Sequence) and
                                                                  not isinstance(part, str) for part in config):
        config = config[0]
    if isinstance(config, Sequence) and all(isinstance(e, str) for e in config):
        return list(config)
    return []


def _default(cls: type, name: str, fallback: Any) -> Any:
    """The default of ``cls.__init__``'s parameter ``name`` (``fallback`` when it has none)."""
    param = inspect.signature(cls.__init__).parameters.get(name)
    return fallback if param is None or param.default is inspect.Parameter.empty else param.default


def label_processors(cls: type, kwargs: Mapping[str, Any]) -> tuple[str, ...]:
    """Class names of the processors that change the learned label's values, in Qlib's order.

    >>> from qlib.contrib.data.handler import Alpha158
    >>> label_processors(Alpha158, {})                       # Alpha158's default learn processors
    ('CSZScoreNorm',)
    >>> label_processors(Alpha158, {"learn_processors": ["DropnaLabel"], "process_type": "independent",
    ...                             "infer_processors": [{"class": "ZScoreNorm", "kwargs": {}}]})
    ()
    """
    from qlib.data.dataset.handler import DataHandlerLP

    def chain(name: str) -> list:
        value = kwargs.get(name, _default(cls, name, []))
        return list(value or [])

    process_type = kwargs.get("process_type", _default(cls, "process_type", DataHandlerLP.PTYPE_A))
    steps = chain("shared_processors") + (chain("infer_processors") if process_type == DataHandlerLP.PTYPE_A else [])
    steps += chain("learn_processors")
    out = []
    for step in steps:
        name, fields_group = _processor(step)
        if name not in KEEPS_VALUES and _covers_label(fields_group):
            out.append(name)
    return tuple(out)


def _processor(step: Any) -> tuple[str, Any]:
    """``(class name, fields_group)`` of a processor given as a config dict, a class name or an instance."""
    from qlib.data.dataset import processor as qlib_processors

    if isinstance(step, Mapping):
        name, kwargs = str(step.get("class")), dict(step.get("kwargs") or {})
    elif isinstance(step, str):
        name, kwargs = step, {}
    else:  # a Processor instance
        return type(step).__name__, getattr(step, "fields_group", None)
    if "fields_group" in kwargs:
        return name, kwargs["fields_group"]
    cls = getattr(qlib_processors, name, None)
    return name, _default(cls, "fields_group", None) if inspect.isclass(cls) else None


def _covers_label(fields_group: Any) -> bool:
    """Whether a processor's ``fields_group`` includes the label (``None``: every column)."""
    if fields_group is None:
        return True
    if isinstance(fields_group, str):
        return fields_group == "label"
    return "label" in list(fields_group)


def label_purge(task: Mapping[str, Any]) -> tuple[int, str]:
    """Bars a label looks ahead, to purge before the next segment (``rolling.purge: auto``), and why, in words.

    A Qlib label expression's look-ahead is its right extension (Qlib's own ``guess_horizon``:
    2 for ``Ref($close, -2)/Ref($close, -1) - 1``; the largest over several expressions). The
    minute handler's label (:class:`~rolling_calib.qlib_adapter.dataset.MinuteBarHandler`) stays
    inside its session, and segments end at session ends: 0. A label that cannot be read: 0, said.
    Needs Qlib initialised (the expressions are parsed by Qlib).
    """
    from qlib.utils.data import guess_horizon

    from rolling_calib.qlib_adapter.dataset import MinuteBarHandler

    handler = (task.get("dataset") or {}).get("kwargs", {}).get("handler")
    if not isinstance(handler, Mapping):
        return 0, "the handler is not a class spec: its label's look-ahead is unknown (set rolling.purge)"
    try:
        cls = import_class(dict(handler), "task.dataset.kwargs.handler", "task")
    except ConfigError:
        return 0, "the handler class cannot be imported: its label's look-ahead is unknown (set rolling.purge)"
    if issubclass(cls, MinuteBarHandler):
        return 0, "the minute label stays inside its session and segments end at session ends"
    kwargs = dict(handler.get("kwargs") or {})
    expression, _, _ = _expression(cls, kwargs)
    if expression is None:
        return 0, f"the label of {cls.__qualname__} is unknown: nothing purged (set rolling.purge)"
    expressions = expression.split("; ")
    try:
        ahead = max(int(guess_horizon([e])) for e in expressions)
    except Exception as exc:  # noqa: BLE001 -- an expression Qlib cannot parse: said, not purged
        return 0, f"the label {expression!r} could not be parsed ({type(exc).__name__}): nothing purged (set rolling.purge)"
    return max(ahead, 0), f"the label {expression} looks {ahead} bar(s) ahead (Qlib's guess_horizon)"
