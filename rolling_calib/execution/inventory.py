"""The stores under a directory, each in one line: pipelines, seeds, units done / total, the last verdicts.

:func:`find_stores` walks a directory for result stores (a directory holding ``manifest.json``; a
store's own subdirectories are not walked). :func:`store_entry` reads a store's manifest and unit
sidecars (no unit file is opened) and the verdicts ``compare`` or ``report`` last printed for it,
which they record in ``STORE/last_verdicts.json`` (:func:`record_last_verdicts`).

Examples
--------
>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> store = root / "runs" / "demo"
>>> _ = st.write_manifest(store, pipelines={"a": {"config_hash": "h", "seeds": [0, 1],
...                                               "windows": [{"index": 0}, {"index": 1}]}}, extra={})
>>> [p.relative_to(root).as_posix() for p in find_stores(root)]
['runs/demo']
>>> entry = store_entry(store)
>>> entry.pipelines, entry.seeds, entry.done, entry.total, entry.verdicts
(['a'], [0, 1], 0, 4, [])
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rolling_calib.core.store_layout import MANIFEST, StoreLayout
from rolling_calib.execution import store as st

__all__ = ["StoreEntry", "find_stores", "read_last_verdicts", "record_last_verdicts", "store_entry"]


@dataclass(frozen=True)
class StoreEntry:
    """One store as ``ls`` shows it."""

    path: Path
    pipelines: list[str]
    seeds: list[int]
    done: int
    total: int
    verdicts: list[dict[str, str]] = field(default_factory=list)   # {"pair", "metric", "verdict"}
    scored: str = ""   # when and against what the verdicts were computed
    problem: str = ""  # a manifest that could not be read: the reason

    def verdict_text(self) -> str:
        """The pairs' verdicts in a few words: ``a vs b: QL better, CQL undetermined``."""
        by_pair: dict[str, list[str]] = {}
        for row in self.verdicts:
            by_pair.setdefault(row["pair"], []).append(f"{row['metric']} {row['verdict']}")
        return "; ".join(f"{pair}: {', '.join(words)}" for pair, words in by_pair.items()) or "-"


def find_stores(root: str | os.PathLike) -> list[Path]:
    """The result stores under ``root`` (``root`` itself included), sorted by path."""
    found = []
    for here, dirs, files in os.walk(root):
        if MANIFEST in files:
            found.append(Path(here))
            dirs[:] = []   # a store's units, corrupt/ and mlartifacts/ hold no other store
        else:
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    return sorted(found)


def store_entry(store: str | os.PathLike) -> StoreEntry:
    """What ``ls`` says of one store (a manifest it cannot read becomes ``problem``, not an error)."""
    try:
        opened = st.Store.open(store)
    except (ValueError, OSError) as exc:
        return StoreEntry(Path(store), [], [], 0, 0, problem=str(exc))
    pipelines = list(opened.pipelines)
    seeds: set[int] = set()
    done = total = 0
    for name in pipelines:
        entry = opened.pipeline(name)
        seeds |= set(entry.seeds)
        for key in entry.units():
            total += 1
            try:
                done += opened.unit_status(key).complete
            except (ValueError, OSError):   # a damaged sidecar: not done (compare names it)
                pass
    last = read_last_verdicts(store)
    return StoreEntry(opened.root, pipelines, sorted(seeds), done, total, verdicts=list(last.get("verdicts", [])),
                      scored=str(last.get("scored", "")))


def record_last_verdicts(store: str | os.PathLike, rows: Sequence[Mapping[str, Any]], *, label: str,
                         calibration: str) -> Path | None:
    """Record the verdict rows (``pair``, ``metric``, ``verdict``) a command printed; None when the store is read-only."""
    doc = {"scored": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {label}; {calibration}",
           "verdicts": [{"pair": str(r["pair"]), "metric": str(r["metric"]), "verdict": str(r["verdict"])}
                        for r in rows]}
    try:
        return st.atomic_write_json(StoreLayout(Path(store)).last_verdicts, doc)
    except (OSError, ValueError):   # a read-only store: ls shows no verdicts, the command's output is unaffected
        return None


def read_last_verdicts(store: str | os.PathLike) -> dict[str, Any]:
    """The last recorded verdicts (``{}`` when none, or the file is unreadable)."""
    import json

    try:
        doc = json.loads(StoreLayout(Path(store)).last_verdicts.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}
