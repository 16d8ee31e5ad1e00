"""What a reader of a store must be told about the store itself: unchecked units, data changed since training.

``compare``, ``report``, ``diagnose`` and ``metaeval`` read a store's units through the one reader,
which checks every unit's bytes against the SHA-256 its sidecar records (a mismatch stops them,
naming the file). Two things it cannot stop on are said here, once per store:

* units written before the checksums were recorded (sidecars without ``sha256``) are read
  unchecked: :func:`checksum_note` counts them;
* the data may have changed after training. The manifest records the data's content fingerprint
  at training (``data``: :func:`rolling_calib.execution.store.data_identity` of the provider
  directory, over the universe the task reads). :func:`check_data` fingerprints that directory
  again when it is reachable (about 0.4 CPU-s for the full minute store); a different fingerprint
  is a loud warning (:func:`data_changed_warning`): the scores are of predictions made from the
  old data, and ``run`` would recompute every unit.

:func:`store_notes` gives both as the notes a command prints.

Example
-------
>>> manifest = {"data": {"path": "/nowhere", "files": "a", "features": "b"}, "pipelines": {}}
>>> print(check_data("STORE", manifest).note)
the data the units were trained on (/nowhere) is not reachable from here: whether it changed after training was not checked
>>> check_data(example_store, st.read_manifest(example_store)).state   # a store written by hand: no data record
'unrecorded'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rolling_calib.execution import store as st

__all__ = ["DataCheck", "check_data", "checksum_note", "data_changed_warning", "store_notes"]

#: The fields of a data fingerprint that describe the content (``path`` is where it was, not what).
_CONTENT = ("files", "features", "feature_files", "feature_bytes")


@dataclass(frozen=True)
class DataCheck:
    """The data a store's units were trained on, against that directory now.

    ``state``: ``"unchanged"``, ``"changed"``, ``"unreachable"`` (the directory the manifest names
    does not exist here) or ``"unrecorded"`` (a manifest without a fingerprint). ``recorded`` and
    ``current`` are the fingerprints (``current`` None unless measured).
    """

    state: str
    path: str | None
    recorded: Mapping[str, Any] | None = None
    current: Mapping[str, Any] | None = None

    @property
    def warning(self) -> str | None:
        """The loud warning when the data changed after training (else ``None``)."""
        if self.state != "changed":
            return None
        rec, now = self.recorded or {}, self.current or {}
        changed = [f"{k} {rec.get(k)} -> {now.get(k)}" for k in _CONTENT if rec.get(k) != now.get(k)]
        return (f"WARNING: the data changed after training: {self.path} is not the data these units were trained "
                f"on ({'; '.join(changed)}; 'files' covers the calendar and universe files, 'features' every "
                f"feature file's content). The scores are of predictions made from the old data; re-run "
                f"'rolling-calib run' on this store to recompute the units on the current data, or restore the data")

    @property
    def note(self) -> str | None:
        """Why the data could not be checked (else ``None``)."""
        if self.state == "unreachable":
            return (f"the data the units were trained on ({self.path}) is not reachable from here: whether it "
                    f"changed after training was not checked")
        return None   # "unrecorded": stores written by hand (tests, benches); every run records the fingerprint


def check_data(store: str | Path, manifest: Mapping[str, Any]) -> DataCheck:
    """Fingerprint the provider directory the manifest names, as ``run`` did at training, and compare.

    The universe is the one the experiment's task reads (:func:`~rolling_calib.execution.store.task_universe`),
    as at training, so the same data gives the same fingerprint.
    """
    recorded = manifest.get("data")
    if not isinstance(recorded, Mapping) or "features" not in recorded:
        return DataCheck("unrecorded", None)
    path = recorded.get("path")
    if not path or not Path(path).is_dir():
        return DataCheck("unreachable", str(path) if path else None, recorded)
    universe = st.task_universe((manifest.get("experiment") or {}).get("task") or {})
    current = st.data_identity(path, instruments=universe)
    same = all(recorded.get(k) == current.get(k) for k in _CONTENT)
    return DataCheck("unchanged" if same else "changed", str(path), recorded, current)


def data_changed_warning(store: str | Path, manifest: Mapping[str, Any]) -> str | None:
    """The warning to show when the data changed after training (``None`` when unchanged or not checkable).

    For a ``warnings`` list: ``{"kind": "data_changed", "pipelines": [...], "message": data_changed_warning(...)}``.
    """
    return check_data(store, manifest).warning


def checksum_note(store: str | Path, manifest: Mapping[str, Any], pipelines: Sequence[str]) -> str | None:
    """One note when units of ``pipelines`` were written before checksums were recorded (else ``None``)."""
    n = st.unchecked_units(store, manifest, pipelines)
    if not n:
        return None
    return (f"{n} unit(s) of {store} were written before checksums were recorded (their sidecars hold no sha256): "
            f"they are read without a check of their bytes (a truncated file is still caught). Recompute them to "
            f"record checksums: move {Path(store) / 'units'} aside and re-run 'rolling-calib run' on this store")


def store_notes(store: str | Path, manifest: Mapping[str, Any], pipelines: Sequence[str]) -> list[str]:
    """What a command reading ``pipelines`` of ``store`` prints about the store: the data warning first, then notes."""
    data = check_data(store, manifest)
    return [n for n in (data.warning, data.note, checksum_note(store, manifest, pipelines)) if n]
