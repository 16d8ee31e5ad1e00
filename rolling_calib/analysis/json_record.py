"""One way to keep a typed record in a store as JSON: written atomically, read back typed, a bad file named.

A record is a value with ``to_dict()`` (through :func:`rolling_calib.core.jsonable.jsonable`) and a
``from_dict`` that rebuilds it; :func:`write_record` writes it (a reader sees the old file or the new one,
never half of one) and :func:`read_record` reads it: ``None`` where the file does not exist, a
``ValueError`` naming the file, what it should hold and the fix where it exists but is not that record
(a corrupt file is never taken for an absent one). Used by ``STORE/sequential.json``
(:mod:`rolling_calib.analysis.sequential_path`) and ``STORE/race.json`` (:mod:`rolling_calib.analysis.race_record`).

Examples
--------
>>> import tempfile
>>> from dataclasses import dataclass
>>> @dataclass
... class Note:
...     text: str
...     def to_dict(self): return {"text": self.text}
...     @classmethod
...     def from_dict(cls, d): return cls(text=d["text"])
>>> folder = Path(tempfile.mkdtemp())
>>> _ = write_record(folder / "note.json", Note("hi"))
>>> read_record(folder / "note.json", Note.from_dict, what="note", fix="write it again")
Note(text='hi')
>>> read_record(folder / "none.json", Note.from_dict, what="note", fix="write it again") is None
True
>>> _ = (folder / "note.json").write_text("{}")
>>> read_record(folder / "note.json", Note.from_dict, what="note", fix="write it again")
Traceback (most recent call last):
...
ValueError: .../note.json: not a note (KeyError: 'text'); write it again
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from data_prep.atomic import atomic_write_text

__all__ = ["read_record", "write_record"]

T = TypeVar("T")


class _Record(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


def write_record(file: str | Path, record: _Record) -> Path:
    """Write ``record.to_dict()`` as indented JSON with sorted keys into ``file``, atomically."""
    return atomic_write_text(Path(file), json.dumps(record.to_dict(), indent=2, sort_keys=True) + "\n")


def read_record(file: str | Path, from_dict: Callable[[dict[str, Any]], T], *, what: str, fix: str) -> T | None:
    """The record in ``file`` (``from_dict`` of its JSON), or None where ``file`` does not exist.

    Raises
    ------
    ValueError
        ``file`` is not JSON, or ``from_dict`` refuses it: "<file>: not a <what> (...); <fix>".
    """
    file = Path(file)
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{file}: not a JSON {what} ({exc}); {fix}") from exc
    try:
        return from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{file}: not a {what} ({type(exc).__name__}: {exc}); {fix}") from exc
