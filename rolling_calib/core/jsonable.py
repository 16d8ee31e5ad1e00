"""The one conversion of results to JSON-ready Python values, used by every ``to_dict``.

:func:`jsonable` turns numpy scalars into Python ones (``np.bool_`` -> ``bool``, ``np.integer``
-> ``int``, ``np.floating`` -> ``float``), a non-finite number (NaN, inf) into ``None``, arrays,
tuples and lists into lists, mappings into dicts (recursively, keys too), timestamps and dates
into ISO 8601 text and paths into text; anything else is returned as it is.
:func:`fields_dict` is a dataclass's fields through it.

Examples
--------
>>> jsonable({"a": np.float64("nan"), "b": (np.int64(2), np.bool_(True)), "c": np.array([[1.5, np.inf]])})
{'a': None, 'b': [2, True], 'c': [[1.5, None]]}
>>> jsonable(pd.Timestamp("2018-01-02"))
'2018-01-02T00:00:00'
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["fields_dict", "jsonable"]


def jsonable(obj: Any) -> Any:
    """``obj`` with every numpy value, non-finite number, container and timestamp made JSON-ready (module docstring)."""
    if obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {jsonable(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.datetime64):
        return None if np.isnat(obj) else pd.Timestamp(obj).isoformat()
    if isinstance(obj, (pd.Timestamp, dt.date, dt.datetime)):
        return None if obj is pd.NaT else obj.isoformat()
    if isinstance(obj, PurePath):
        return str(obj)
    return obj


def fields_dict(obj: Any, *, exclude: Iterable[str] = ()) -> dict[str, Any]:
    """The fields of dataclass instance ``obj`` (but ``exclude``), each through :func:`jsonable`.

    Examples
    --------
    >>> @dataclasses.dataclass
    ... class R:
    ...     x: float
    ...     n: int
    >>> fields_dict(R(float("nan"), np.int64(3)))
    {'x': None, 'n': 3}
    """
    skip = set(exclude)
    return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name not in skip}
