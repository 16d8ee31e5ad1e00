"""Stable content hashes of plain configuration objects."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["stable_hash"]


def stable_hash(obj: Any) -> str:
    """SHA-256 (first 16 hex digits) of ``obj``'s canonical JSON (sorted keys).

    Examples
    --------
    >>> stable_hash({"b": 1, "a": [1, 2]}) == stable_hash({"a": [1, 2], "b": 1})
    True
    """
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


