"""Qlib task specs (``class``/``module_path``/``kwargs``): import the classes, check their arguments, merge bases."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import logging
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rolling_calib.core.validation import ConfigError, check, expect, reject_unknown

__all__ = [
    "CLASS_SPEC_KEYS",
    "OPTIONAL_PACKAGES",
    "STRICT_PACKAGES",
    "TASK_KEYS",
    "AcceptedKwargs",
    "accepted_kwargs",
    "accepted_parameters",
    "check_kwargs",
    "import_class",
    "merge_base_config",
    "resolve_module_files",
    "validate_task",
]

_LOG = logging.getLogger(__name__)

TASK_KEYS = frozenset({"model", "dataset", "record", "reweighter"})
#: Packages some of Qlib's model classes import that rolling-calib's core install lacks: what to do.
OPTIONAL_PACKAGES = {
    "catboost": "install the model zoo's extra: pip install 'rolling-calib[zoo]' (CatBoost, XGBoost)",
    "xgboost": "install the model zoo's extra: pip install 'rolling-calib[zoo]' (CatBoost, XGBoost)",
    "tensorflow": ("this model needs TensorFlow 1.x (Qlib's TFT: tensorflow-gpu 1.15, Python <= 3.7), which cannot "
                   "be installed beside torch 2.x on Python >= 3.10: it cannot run under rolling-calib"),
}
CLASS_SPEC_KEYS = frozenset({"class", "module_path", "kwargs"})


def merge_base_config(base: dict, override: dict) -> dict:
    """Qlib's own ``update_config``: how ``qrun`` merges a ``BASE_CONFIG_PATH`` file with its includer."""
    from qlib.utils.data import update_config

    return update_config(base, override)


def _import_module(module_path: str) -> Any:
    """A module by dotted name, or by ``.py`` file path as ``qrun`` takes it (Qlib's ``get_module_by_module_path``)."""
    if not module_path.endswith(".py"):
        return importlib.import_module(module_path)
    import os

    if not os.path.isfile(module_path):
        raise FileNotFoundError(module_path)
    from qlib.utils import get_module_by_module_path

    return get_module_by_module_path(module_path)


def resolve_module_files(node: Any, *, bases: tuple[Any, ...]) -> Any:
    """``node`` with every relative ``module_path: something.py`` made absolute (a copy; anything else unchanged).

    ``qrun`` imports such a file relative to the current directory; here the current directory is
    tried first, then each of ``bases`` (the workflow file's directory), so a benchmark workflow
    that names ``multi_freq_handler.py`` beside it runs from anywhere and in worker processes.
    """
    import os

    if isinstance(node, list):
        return [resolve_module_files(item, bases=bases) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: resolve_module_files(value, bases=bases) for key, value in node.items()}
    path = out.get("module_path")
    if isinstance(path, str) and path.endswith(".py") and not os.path.isabs(os.path.expanduser(path)):
        for base in (os.getcwd(), *map(str, bases)):
            candidate = os.path.join(base, path)
            if os.path.isfile(candidate):
                out["module_path"] = os.path.abspath(candidate)
                break
    return out


def import_class(spec: Any, key: str, where: str) -> type:
    """Import the class a ``{class, module_path, kwargs}`` spec names; ``ConfigError`` naming the key otherwise."""
    expect(spec, dict, key, "a mapping with class, module_path and kwargs", where)
    reject_unknown(spec, CLASS_SPEC_KEYS, f"{key}.", where)
    for part in ("class", "module_path"):
        if not isinstance(spec.get(part), str):
            raise ConfigError(f"{where}: {key}.{part}: expected a string, found {spec.get(part)!r}")
    if not isinstance(spec.get("kwargs", {}), dict):
        raise ConfigError(f"{where}: {key}.kwargs: expected a mapping, found {type(spec['kwargs']).__name__}")
    try:
        module = _import_module(spec["module_path"])
    except FileNotFoundError as exc:
        raise ConfigError(f"{where}: {key}.module_path: file not found: {spec['module_path']}") from exc
    except ImportError as exc:
        hint = OPTIONAL_PACKAGES.get((getattr(exc, "name", None) or "").split(".")[0])
        raise ConfigError(f"{where}: {key}.module_path: cannot import {spec['module_path']!r}: {exc}"
                          + (f"; {hint}" if hint else "")) from exc
    cls = getattr(module, spec["class"], None)
    if cls is None:
        raise ConfigError(f"{where}: {key}.class: {spec['module_path']} has no class {spec['class']!r}")
    if not inspect.isclass(cls):
        raise ConfigError(f"{where}: {key}.class: expected a class, found {type(cls).__name__} "
                          f"{spec['module_path']}.{spec['class']}")
    return cls



# --------------------------------------------------------------------------- keyword arguments
#: Packages whose classes refuse unknown keyword arguments themselves: their ``**kwargs`` only
#: collects names to reject with a precise message, or to hand to their Qlib base, never a sink.
STRICT_PACKAGES = ("rolling_calib",)

#: Methods of a ``**kwargs`` dict that only read it (a name read there still goes on to the base).
_READING_METHODS = frozenset({"get", "keys", "items", "values", "copy", "__contains__", "__getitem__"})
#: Builtins that only read a ``**kwargs`` dict passed to them (``set(kwargs) - allowed``).
_READING_BUILTINS = frozenset({"set", "frozenset", "sorted", "list", "tuple", "dict", "len", "bool", "iter",
                               "repr", "str", "any", "all"})


@dataclass(frozen=True)
class AcceptedKwargs:
    """What a class's ``__init__`` chain accepts as keyword arguments.

    Attributes
    ----------
    params : dict of str to inspect.Parameter
        Named parameters along the chain (a subclass's first), with their defaults.
    consumed : frozenset of str
        Names a ``**kwargs`` takes out before forwarding the rest (``kwargs.pop("label", ...)``).
    open_via : str or None
        Where unknown names go when the chain has a ``**kwargs`` sink (``"LGBModel.__init__(**kwargs)
        passes them to self.params.update(...)"``): any name is then accepted. ``None``: a strict
        signature, and a name outside ``params`` and ``consumed`` is a ``TypeError`` waiting to happen.
    """

    params: dict[str, inspect.Parameter]
    consumed: frozenset[str] = frozenset()
    open_via: str | None = None

    def names(self) -> list[str]:
        """Every name known to be accepted, in signature order."""
        return list(self.params) + sorted(self.consumed - set(self.params))


def _is_super_init(call: ast.Call) -> bool:
    """``super().__init__(...)`` or ``super(Cls, self).__init__(...)``."""
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr == "__init__" and isinstance(func.value, ast.Call)
            and isinstance(func.value.func, ast.Name) and func.value.func.id == "super")


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _kwargs_use(init: Any, var_kw: str) -> tuple[frozenset[str], str | None]:
    """How ``init`` uses its ``**var_kw`` dict: ``(consumed names, sink)``.

    ``sink`` is ``None`` when the dict provably goes on to ``super().__init__(**var_kw)`` and
    is otherwise only read or has literal names taken out (``var_kw.pop("label", ...)``,
    ``del var_kw["x"]``): names the base refuses then fail. Otherwise ``sink`` says where the
    names may go (another call, ``self.params.update(var_kw)``, nowhere: they are ignored),
    and any name is accepted. Read from the source; no source means a sink.
    """
    try:
        source = textwrap.dedent(inspect.getsource(init))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return frozenset(), "has no readable source"
    fn = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if fn is None:
        return frozenset(), "has no readable source"
    parents = {child: node for node in ast.walk(fn) for child in ast.iter_child_nodes(node)}
    consumed: set[str] = set()
    forwarded = False
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Name) and node.id == var_kw):
            continue
        parent = parents.get(node)
        if isinstance(node.ctx, ast.Store):
            return frozenset(), f"rebinds {var_kw}"
        if isinstance(parent, ast.keyword) and parent.arg is None:  # **var_kw in a call
            call = parents[parent]
            if isinstance(call, ast.Call) and _is_super_init(call):
                forwarded = True
                continue
            return frozenset(), f"passes them to {ast.unparse(call.func)}(...)"
        if isinstance(parent, ast.Attribute):  # var_kw.method(...)
            call = parents.get(parent)
            if not (isinstance(call, ast.Call) and call.func is parent):
                return frozenset(), f"uses {var_kw}.{parent.attr}"
            if parent.attr == "pop" and _literal(call.args[0] if call.args else None) is not None:
                consumed.add(_literal(call.args[0]))  # type: ignore[arg-type]
                continue
            if parent.attr in _READING_METHODS:
                continue
            return frozenset(), f"calls {var_kw}.{parent.attr}(...)"
        if isinstance(parent, ast.Subscript) and parent.value is node:
            if isinstance(parent.ctx, ast.Del):
                name = _literal(parent.slice)
                if name is None:
                    return frozenset(), f"deletes computed names from {var_kw}"
                consumed.add(name)
            continue  # reading or adding a name
        if isinstance(parent, ast.Compare) or (isinstance(parent, ast.For) and parent.iter is node):
            continue  # "x" in var_kw, for k in var_kw
        if (isinstance(parent, ast.Call) and node in parent.args and isinstance(parent.func, ast.Name)
                and parent.func.id in _READING_BUILTINS):
            continue  # set(var_kw), sorted(var_kw), ...
        if isinstance(parent, ast.Call) and node in parent.args:
            return frozenset(), f"passes them to {ast.unparse(parent.func)}(...)"
        return frozenset(), f"uses {var_kw} in '{ast.unparse(parent) if parent is not None else var_kw}'"
    if not forwarded:
        return frozenset(), "ignores the names it does not take" if consumed else "ignores them"
    return frozenset(consumed), None


@functools.cache
def accepted_kwargs(cls: type) -> AcceptedKwargs:
    """The keyword arguments ``cls(...)`` accepts, following ``**kwargs`` through the MRO.

    Walks ``cls.__mro__``: each ``__init__``'s named parameters are accepted. A ``__init__``
    without ``**kwargs`` ends the chain (strict). One whose ``**kwargs`` provably goes on to
    ``super().__init__(**kwargs)`` (after taking literal names out: ``kwargs.pop("label")``)
    continues the walk with the next class. Any other ``**kwargs`` is a sink: the names go
    somewhere this check cannot follow (``LGBModel`` hands them to LightGBM, Qlib's ``ALSTM``
    ignores them, ``Dataset`` passes them to ``setup_data``), so any name is accepted.

    Classes of :data:`STRICT_PACKAGES` (ours) refuse unknown names themselves; their
    ``**kwargs`` is followed to the base but never treated as a sink.

    Examples
    --------
    >>> class Base:
    ...     def __init__(self, a=1): ...
    >>> class Handler(Base):
    ...     __module__ = "somelib"  # a class of rolling_calib would be strict whatever its body
    ...     def __init__(self, b=2, **kwargs):
    ...         kwargs.pop("label", None)
    ...         super().__init__(**kwargs)
    >>> acc = accepted_kwargs(Handler)
    >>> acc.names(), acc.open_via
    (['b', 'a', 'label'], None)
    >>> class Model:
    ...     __module__ = "somelib"
    ...     def __init__(self, loss="mse", **kwargs):
    ...         self.params = {"loss": loss}
    ...         self.params.update(kwargs)
    >>> accepted_kwargs(Model).open_via
    'Model.__init__(**kwargs) passes them to self.params.update(...)'
    """
    own = cls.__module__.split(".")[0] in STRICT_PACKAGES
    params: dict[str, inspect.Parameter] = {}
    consumed: set[str] = set()
    for klass in cls.__mro__:
        if klass is object:
            break
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            sig = inspect.signature(init)
        except (TypeError, ValueError):
            if own:
                break
            return AcceptedKwargs(params, frozenset(consumed), f"{klass.__qualname__}.__init__ has no signature")
        var_kw = None
        for i, (name, p) in enumerate(sig.parameters.items()):
            if p.kind is inspect.Parameter.VAR_KEYWORD:
                var_kw = name
            elif p.kind is not inspect.Parameter.VAR_POSITIONAL and not (i == 0 and name == "self"):
                params.setdefault(name, p)
        if var_kw is None:
            break
        if own:
            continue
        taken, sink = _kwargs_use(init, var_kw)
        if sink is not None:
            return AcceptedKwargs(params, frozenset(consumed), f"{klass.__qualname__}.__init__(**{var_kw}) {sink}")
        consumed |= taken
    return AcceptedKwargs(params, frozenset(consumed), None)


def accepted_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """Named keyword parameters of ``cls.__init__``; through ``**kwargs`` also those of its bases.

    See :func:`accepted_kwargs`, which also says whether names beyond these are accepted.
    """
    return dict(accepted_kwargs(cls).params)


def _scalar_kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return "str" if isinstance(value, str) else None


def _same_kind(default: Any, value: Any) -> bool:
    """Whether ``value`` may replace a parameter's ``default``, judged by the default alone.

    Only scalars are compared (bool, number, string): a string where the default is a number
    is a mistake, but a mapping or list where the default is a string often is not (Qlib's
    ``freq: {feature: 1min, label: day}``, ``instruments: [AAPL, F]``), so it passes. An
    int parameter refuses a float.

    >>> _same_kind(64, "big"), _same_kind(0.1, 1), _same_kind(64, 0.5), _same_kind("day", {"label": "day"})
    (False, True, False, True)
    """
    if default is inspect.Parameter.empty or default is None or value is None:
        return True
    want, got = _scalar_kind(default), _scalar_kind(value)
    if want is None or got is None:
        return True
    if want != got:
        return False
    return not (want == "number" and isinstance(default, int) and isinstance(value, float))


def check_kwargs(cls: type, kwargs: Mapping[str, Any], key: str, where: str) -> None:
    """Unknown keyword arguments of ``cls.__init__`` fail here, not in a worker hours later.

    Only a provably unknown name is refused: one outside a chain of signatures without a
    ``**kwargs`` sink (:func:`accepted_kwargs`). Values of named parameters are checked
    against the kind of their default (:func:`_same_kind`) and, for classes using
    ``@validate_params``, against the declared constraints.
    """
    accepted = accepted_kwargs(cls)
    params = accepted.params
    declared = getattr(cls.__init__, "__rc_constraints__", {})  # a class whose __init__ uses @validate_params
    for name, value in kwargs.items():
        if name not in params:
            if name in accepted.consumed:
                continue
            if accepted.open_via is not None:
                _LOG.debug("%s: %s.kwargs.%s: not checked (%s)", where, key, name, accepted.open_via)
                continue
            raise ConfigError(
                f"{where}: {key}.kwargs.{name}: {cls.__name__} has no such argument "
                f"(it accepts: {', '.join(accepted.names())})"
            )
        default = params[name].default
        if not _same_kind(default, value):
            raise ConfigError(
                f"{where}: {key}.kwargs.{name}: expected {type(default).__name__} (like the default {default!r}), "
                f"found {type(value).__name__} {value!r}"
            )
        if name in declared:  # ranges and choices checked here, before any training
            check(f"{key}.kwargs.{name}", value, declared[name], where=where)


def validate_task(task: Any, where: str, *, prefix: str = "task") -> None:
    """Check a Qlib task: known sections, importable classes, accepted keyword arguments."""
    expect(task, dict, prefix, "a mapping with model and dataset", where)
    reject_unknown(task, TASK_KEYS, f"{prefix}.", where)
    for part in ("model", "dataset"):
        if part not in task:
            raise ConfigError(f"{where}: {prefix}.{part}: missing")
    model_cls = import_class(task["model"], f"{prefix}.model", where)
    check_kwargs(model_cls, task["model"].get("kwargs", {}), f"{prefix}.model", where)
    dataset_cls = import_class(task["dataset"], f"{prefix}.dataset", where)
    dkw = task["dataset"].get("kwargs", {})
    check_kwargs(dataset_cls, {k: v for k, v in dkw.items() if k != "handler"}, f"{prefix}.dataset", where)
    handler = dkw.get("handler")
    if not isinstance(handler, dict):
        raise ConfigError(f"{where}: {prefix}.dataset.kwargs.handler: expected a handler mapping (class, module_path, kwargs)")
    handler_cls = import_class(handler, f"{prefix}.dataset.kwargs.handler", where)
    check_kwargs(handler_cls, handler.get("kwargs", {}), f"{prefix}.dataset.kwargs.handler", where)
    record = task.get("record", [])
    if not isinstance(record, (list, dict)):
        raise ConfigError(f"{where}: {prefix}.record: expected a list of record configs, found {type(record).__name__}")
    if task.get("reweighter") is not None:
        _check_reweighter(task["reweighter"], f"{prefix}.reweighter", where)


def _check_reweighter(spec: Any, key: str, where: str) -> None:
    """A task's ``reweighter`` (what Qlib's trainer passes to ``model.fit``): a class spec of a ``Reweighter``."""
    from qlib.data.dataset.weight import Reweighter

    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: {key}: expected a class spec (class, module_path, kwargs) of a Qlib Reweighter, "
                          f"found {type(spec).__name__}")
    cls = import_class(spec, key, where)
    if not (isinstance(cls, type) and issubclass(cls, Reweighter)):
        raise ConfigError(f"{where}: {key}: expected a subclass of qlib.data.dataset.weight.Reweighter, found "
                          f"{getattr(cls, '__qualname__', cls)}")
    check_kwargs(cls, spec.get("kwargs", {}), key, where)


