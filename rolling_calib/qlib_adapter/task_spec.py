"""Qlib task specs (``class``/``module_path``/``kwargs``): import the classes, check their arguments, merge bases."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from rolling_calib.core.validation import ConfigError, check, expect, reject_unknown

__all__ = ["TASK_KEYS", "CLASS_SPEC_KEYS", "accepted_parameters", "check_kwargs", "import_class",
           "merge_base_config", "validate_task"]

TASK_KEYS = frozenset({"model", "dataset", "record"})
CLASS_SPEC_KEYS = frozenset({"class", "module_path", "kwargs"})


def merge_base_config(base: dict, override: dict) -> dict:
    """Qlib's own ``update_config``: how ``qrun`` merges a ``BASE_CONFIG_PATH`` file with its includer."""
    from qlib.utils.data import update_config

    return update_config(base, override)


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
        module = importlib.import_module(spec["module_path"])
    except ImportError as exc:
        raise ConfigError(f"{where}: {key}.module_path: cannot import {spec['module_path']!r}: {exc}") from exc
    cls = getattr(module, spec["class"], None)
    if cls is None:
        raise ConfigError(f"{where}: {key}.class: {spec['module_path']} has no class {spec['class']!r}")
    if not inspect.isclass(cls):
        raise ConfigError(f"{where}: {key}.class: expected a class, found {type(cls).__name__} "
                          f"{spec['module_path']}.{spec['class']}")
    return cls



def accepted_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """Named keyword parameters of ``cls.__init__``; through ``**kwargs`` also those of its bases.

    A class that forwards ``**kwargs`` to its Qlib base (``DatasetH``, ``DataHandlerLP``)
    accepts the base's named parameters too; anything else is a typo.
    """
    params: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            sig = inspect.signature(init)
        except (TypeError, ValueError):
            break
        forwards = False
        for name, p in sig.parameters.items():
            if p.kind is inspect.Parameter.VAR_KEYWORD:
                forwards = True
            elif name != "self" and p.kind is not inspect.Parameter.VAR_POSITIONAL:
                params.setdefault(name, p)
        if not forwards:
            break
    return params



def check_kwargs(cls: type, kwargs: Mapping[str, Any], key: str, where: str) -> None:
    """Unknown keyword arguments of ``cls.__init__`` fail here, not in a worker hours later."""
    params = accepted_parameters(cls)
    known = list(params)
    declared = getattr(cls.__init__, "__rc_constraints__", {})  # a class whose __init__ uses @validate_params
    for name, value in kwargs.items():
        if name not in params:
            raise ConfigError(
                f"{where}: {key}.kwargs.{name}: {cls.__name__} has no such argument (it accepts: {', '.join(known)})"
            )
        default = params[name].default
        if default is not inspect.Parameter.empty and default is not None and value is not None:
            numeric = (int, float)
            if isinstance(default, bool) != isinstance(value, bool) and (isinstance(default, bool) or isinstance(value, bool)):
                ok = False
            elif isinstance(default, numeric) and not isinstance(default, bool):
                ok = isinstance(value, numeric) and (isinstance(default, float) or isinstance(value, int))
            elif isinstance(default, str):
                ok = isinstance(value, str)
            else:
                ok = True
            if not ok:
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


