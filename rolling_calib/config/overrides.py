"""The one ``--set KEY=VALUE`` parser: values read as ``qrun``'s YAML reads them (YAML 1.2)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rolling_calib.config.qrun_yaml import parse_scalar

__all__ = ["parse_set", "parse_value"]


def parse_value(text: str) -> Any:
    """Read one value as a workflow file's value is read (:func:`rolling_calib.config.qrun_yaml.parse_scalar`):
    a scalar, or a YAML flow list of scalars (``[AAPL, MSFT]``: a benchmark of several codes, a list of seeds).

    Examples
    --------
    >>> [parse_value(t) for t in ["32", "5e-6", "0.5", "true", "null", "adam"]]
    [32, 5e-06, 0.5, True, None, 'adam']
    >>> parse_value("[AAPL, MSFT]"), parse_value("[]")
    (['AAPL', 'MSFT'], [])
    >>> parse_value("{a: 1}")
    Traceback (most recent call last):
    ...
    ValueError: expected a scalar or a list of scalars ([a, b]), found '{a: 1}'
    """
    stripped = text.strip()
    value = parse_scalar(stripped)
    if isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value)):
        raise ValueError(f"expected a scalar or a list of scalars ([a, b]), found {stripped!r}")
    return value


def parse_set(items: Sequence[str] | None) -> dict[str, Any]:
    """``["KEY=VALUE", ...]`` -> ``{dotted key: value}`` for :func:`rolling_calib.config.experiment.apply_overrides`.

    Examples
    --------
    >>> parse_set(["task.model.kwargs.weight_decay=5e-6", "rolling.seeds=3"])
    {'task.model.kwargs.weight_decay': 5e-06, 'rolling.seeds': 3}
    >>> parse_set(["seeds"])
    Traceback (most recent call last):
    ...
    ValueError: --set 'seeds': expected KEY=VALUE with a dotted KEY
    """
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set {item!r}: expected KEY=VALUE with a dotted KEY")
        try:
            out[key.strip()] = parse_value(value)
        except ValueError as exc:
            raise ValueError(f"--set {item!r}: {exc}") from exc
    return out
