"""Sweep grids: ``--grid KEY=V1,V2,...`` over YAML kwarg paths -> one pipeline per grid point.

A sweep takes an experiment YAML (see ``rolling_calib.config.experiment.load_experiment``)
and a grid such as ``hidden_size=32,64,128`` and ``weight_decay=0,5e-6``. Every
point of the grid's Cartesian product becomes one *pipeline* (a name plus the
dotted-path overrides it applies to the YAML); all of them run with the same
seeds through the same runner and executors as ``rolling-calib run``, into one
store; then :mod:`rolling_calib.core.ranking` ranks them by CQL and QL, builds the
pairwise-accuracy matrix, finds the indistinguishable pairs and the runs needed to separate the top two.

Grid syntax (``--grid KEY=V1,V2,...``)
    ``KEY`` is either a full dotted path that exists in the YAML
    (``task.model.kwargs.hidden_size``) or a short name resolved, in this
    order, against ``task.model.kwargs``, ``task.dataset.kwargs``,
    and ``task.dataset.kwargs.handler.kwargs`` (first that has the key wins).
    Only paths under ``task`` can be swept: a pipeline is a set of overrides
    of the Qlib task (the schedule and seeds are shared by all of them). Values are split on commas and read with YAML scalar rules,
    plus scientific notation without a dot: ``32`` -> int, ``5e-6`` and
    ``0.5`` -> float, ``true`` -> bool, ``null`` -> None, anything else a str.

Example
-------
>>> cfg = {"task": {"model": {"kwargs": {"hidden_size": 64, "weight_decay": 0.0}}}}
>>> grid = parse_grid(["hidden_size=32,64", "weight_decay=0,5e-6"], config=cfg)
>>> grid
{'task.model.kwargs.hidden_size': [32, 64], 'task.model.kwargs.weight_decay': [0, 5e-06]}
>>> [p.name for p in expand_grid(grid)]
['hidden_size=32,weight_decay=0', 'hidden_size=32,weight_decay=5e-06', 'hidden_size=64,weight_decay=0', 'hidden_size=64,weight_decay=5e-06']
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rolling_calib.config.overrides import parse_value
from rolling_calib.qlib_adapter.task_spec import validate_task

__all__ = [
    "SHORT_NAME_PREFIXES",
    "Pipeline",
    "expand_grid",
    "format_value",
    "parse_grid",
    "parse_value",
    "resolve_key",
    "sweep_experiment",
]

#: Where a short grid key (no dot) is looked up, in order.
SHORT_NAME_PREFIXES: tuple[str, ...] = (
    "task.model.kwargs",
    "task.dataset.kwargs",
    "task.dataset.kwargs.handler.kwargs",
)

_MISSING = object()


@dataclass(frozen=True)
class Pipeline:
    """One grid point: a readable ``name`` and the dotted-path ``overrides`` it applies."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)


def _lookup(config: Mapping[str, Any], path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def resolve_key(key: str, *, config: Mapping[str, Any]) -> str:
    """Full dotted path for a grid key; ``ValueError`` when the YAML has no such key.

    Examples
    --------
    >>> resolve_key("hidden_size", config={"task": {"model": {"kwargs": {"hidden_size": 64}}}})
    'task.model.kwargs.hidden_size'
    """
    if "." in key:
        if key.split(".", 1)[0] != "task":
            raise ValueError(
                f"--grid {key}: only paths under 'task' can be swept (a pipeline overrides the Qlib task); "
                "the schedule and seeds are shared by all grid points"
            )
        if _lookup(config, key) is _MISSING:
            raise ValueError(f"--grid {key}: no such path in the experiment YAML (a dotted path must exist there)")
        return key
    for prefix in SHORT_NAME_PREFIXES:
        if _lookup(config, f"{prefix}.{key}") is not _MISSING:
            return f"{prefix}.{key}"
    raise ValueError(
        f"--grid {key}: unknown key; a short name must exist under one of "
        f"{', '.join(SHORT_NAME_PREFIXES)} in the experiment YAML, or give the full dotted path"
    )


def parse_grid(specs: Sequence[str], *, config: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Parse ``KEY=V1,V2,...`` strings into ``{dotted_path: [values]}`` (insertion ordered).

    Parameters
    ----------
    specs : sequence of str
        One string per swept key, as given to ``--grid``.
    config : mapping
        The experiment YAML as a dict (to resolve and check the keys).

    Raises
    ------
    ValueError
        Naming the offending ``--grid`` argument: no ``=``, an empty key, an
        empty value or value list, a value repeated within a key, a key (or two
        keys resolving to the same path) given twice, or a key the YAML lacks.
    """
    grid: dict[str, list[Any]] = {}
    given: dict[str, str] = {}
    for spec in specs:
        if "=" not in spec:
            raise ValueError(f"--grid {spec!r}: expected KEY=V1,V2,... (no '=' found)")
        key, _, values_text = spec.partition("=")
        key = key.strip()
        if not key:
            raise ValueError(f"--grid {spec!r}: expected KEY=V1,V2,..., found an empty KEY")
        if not values_text.strip():
            raise ValueError(f"--grid {spec!r}: expected at least one value after '=', found none")
        path = resolve_key(key, config=config)
        if path in grid:
            raise ValueError(f"--grid {spec!r}: {path} is already swept by --grid {given[path]!r}")
        values = []
        for position, item in enumerate(values_text.split(","), start=1):
            if not item.strip():
                raise ValueError(f"--grid {spec!r}: value {position} is empty (check for a stray comma)")
            try:
                value = parse_value(item)
            except ValueError as exc:
                raise ValueError(f"--grid {spec!r}: value {position} {item.strip()!r}: {exc}") from exc
            if any(_same(value, seen) for seen in values):
                raise ValueError(f"--grid {spec!r}: value {item.strip()!r} appears twice")
            values.append(value)
        grid[path] = values
        given[path] = spec
    return grid


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b or (
        isinstance(a, (int, float)) and isinstance(b, (int, float))
        and not isinstance(a, bool) and not isinstance(b, bool) and a == b
    )


def format_value(value: Any) -> str:
    """Short, file-system-safe text for a value in a pipeline name.

    Examples
    --------
    >>> [format_value(v) for v in [64, 5e-06, 0.0, True, None, "a/b"]]
    ['64', '5e-06', '0.0', 'true', 'null', 'a_b']
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    return re.sub(r"[^A-Za-z0-9._+-]", "_", str(value))


def expand_grid(grid: Mapping[str, Sequence[Any]]) -> list[Pipeline]:
    """The grid's Cartesian product as pipelines named ``short=value,short=value``.

    ``short`` is the last part of the dotted path, or the whole path when two
    swept paths end the same way. The first key varies slowest.
    """
    if not grid:
        raise ValueError("grid: expected at least one swept key, found none")
    lasts = [path.rsplit(".", 1)[-1] for path in grid]
    labels = {path: (last if lasts.count(last) == 1 else path) for path, last in zip(grid, lasts)}
    pipelines = []
    for combo in itertools.product(*grid.values()):
        overrides = dict(zip(grid, combo))
        name = ",".join(f"{labels[path]}={format_value(value)}" for path, value in overrides.items())
        pipelines.append(Pipeline(name=name, overrides=overrides))
    names = [p.name for p in pipelines]
    if len(set(names)) != len(names):
        raise ValueError(f"grid: two grid points format to the same pipeline name; names: {names}")
    return pipelines


# =========================================================================== running and ranking


def sweep_experiment(config: Any, pipelines: Sequence[Pipeline] | None) -> Any:
    """The experiment whose pipelines are the grid points (or the config's own, if no grid).

    Each grid point's overrides are checked like a YAML pipeline's (the Qlib
    classes must accept the values); the config's ``compare`` pairs are kept
    only when the pipelines are the config's own.

    Parameters
    ----------
    config : rolling_calib.config.experiment.ExperimentConfig
    pipelines : sequence of Pipeline or None

    Returns
    -------
    rolling_calib.config.experiment.ExperimentConfig
    """
    import dataclasses

    if pipelines is None:
        return config
    swept = dataclasses.replace(config, pipelines={p.name: dict(p.overrides) for p in pipelines}, compare=[])
    for p in pipelines:
        validate_task(swept.pipeline_task(p.name), str(config.path), prefix=f"--grid point {p.name} -> task")
    return swept
