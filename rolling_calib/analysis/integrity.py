"""What a reader of a store must be told about the store itself: unchecked units, the data the units read.

``compare``, ``report``, ``diagnose`` and ``metaeval`` read a store's units through the one reader,
which checks every unit's bytes against the checksum its sidecar records (XXH3-128; SHA-256 for units
written before XXH3 was recorded; a mismatch stops them,
naming the file). What it cannot stop on is said here, once per store:

* units written before the checksums were recorded (sidecars without ``xxh3`` or ``sha256``) are read
  unchecked: :func:`checksum_note` counts them;
* the data the units read. Each unit's sidecar records the content fingerprint of the data it read
  (``data``: :func:`rolling_calib.execution.store.data_identity` of the provider directory, over
  the universe the task reads; units written before that record none and read the run's, the
  manifest's ``data``). Units of one store that read different data (the data changed during a
  run, or while a unit trained) are a loud warning naming which units read which data
  (:class:`DataCheck`); so is data changed after training: the directory is fingerprinted again
  when it is reachable (about 0.4 CPU-s for the full minute store), and the scores are of
  predictions made from other data than it now holds; ``run`` would recompute every unit.

:func:`store_notes` gives both as the notes a command prints.

Example
-------
>>> print(check_data(st.Store.open(example_store)).state)   # a store written by hand: no data record
unrecorded
>>> version = DataVersion(DataRecord("/d", "f1", "x1"), (UnitKey("a", 0, 0), UnitKey("a", 0, 1), UnitKey("b", 2, 0)))
>>> version.describe()
'a seed 0 (w00, w01), b seed 2 (w00)'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rolling_calib.execution import store as st
from rolling_calib.execution.manifest import DataRecord, Sidecar
from rolling_calib.execution.units import UnitKey

__all__ = ["DataCheck", "DataVersion", "check_data", "checksum_note", "data_versions", "store_notes"]

#: Units a warning names one by one; more are counted.
_NAMED_UNITS = 24


@dataclass(frozen=True)
class DataVersion:
    """One version of the data and the units that read it (``changed``: the data changed while they trained)."""

    data: DataRecord
    units: tuple[UnitKey, ...]
    changed: bool = False

    def describe(self) -> str:
        """The units, by pipeline and seed: ``wd0 seed 0 (w00, w01), wd0 seed 1 (w00)``."""
        groups: dict[tuple[str, int], list[int]] = {}
        for key in self.units[:_NAMED_UNITS]:
            groups.setdefault((key.pipeline, key.seed), []).append(key.window)
        text = ", ".join(f"{p} seed {s} ({', '.join(f'w{w:02d}' for w in ws)})" for (p, s), ws in groups.items())
        more = len(self.units) - _NAMED_UNITS
        return text + (f" and {more} more unit(s)" if more > 0 else "")


def data_versions(store: st.Store, pipelines: Sequence[str],
                  sides: Mapping[UnitKey, Sidecar | None] | None = None) -> list[DataVersion]:
    """The data versions the current units of ``pipelines`` read, the run's (the manifest's) first.

    A unit that records no fingerprint (written before units recorded one) read the run's.
    Units whose data changed while they trained are a version of their own. ``sides``: the units'
    sidecars already read (:meth:`~rolling_calib.execution.store.Store.sidecars`).
    """
    sides = store.sidecars(pipelines) if sides is None else sides
    run = store.manifest.data
    groups: dict[tuple, tuple[DataRecord, bool, list[UnitKey]]] = {}
    if run is not None and run.recorded:
        groups[(run.content(), False)] = (run, False, [])
    for name in pipelines:
        entry = store.pipeline(name)
        for key in entry.units():
            side = sides.get(key)
            if side is None or side.config_hash != entry.config_hash:
                continue   # missing or stale: not read (the reader names it)
            data = side.data if side.data is not None and side.data.recorded else run
            if data is None or not data.recorded:
                continue
            changed = side.data_changed_while_training
            groups.setdefault((data.content(), changed), (data, changed, []))[2].append(key)
    return [DataVersion(data, tuple(units), changed) for data, changed, units in groups.values()
            if units or (data is run and len(groups) == 1)]


@dataclass(frozen=True)
class DataCheck:
    """The data a store's units read, against each other and against that directory now.

    ``state``: ``"unchanged"``, ``"changed"`` (the directory holds other data than every unit read),
    ``"mixed"`` (the units read several versions of the data), ``"unreachable"`` (the directory the
    manifest names does not exist here) or ``"unrecorded"`` (no fingerprint recorded). ``versions``:
    the versions and their units; ``current`` the directory's fingerprint now (None unless measured).
    """

    state: str
    path: str | None
    versions: tuple[DataVersion, ...] = ()
    current: DataRecord | None = None

    @property
    def recorded(self) -> DataRecord | None:
        """The data the units read (the first version: the run's)."""
        return self.versions[0].data if self.versions else None

    @property
    def warning(self) -> str | None:
        """The loud warning when the units read several versions of the data, or other data than it now is."""
        if self.state == "mixed":
            return self._mixed()
        if self.state != "changed" or self.recorded is None or self.current is None:
            return None
        return (f"WARNING: the data changed after training: {self.path} is not the data these units were trained "
                f"on ({'; '.join(self.recorded.changes(self.current))}; 'files' covers the calendar and universe "
                f"files, 'features' every feature file's content). The scores are of predictions made from the old "
                f"data; re-run 'rolling-calib run' on this store to recompute the units on the current data, or "
                f"restore the data")

    def _mixed(self) -> str:
        parts = []
        for i, version in enumerate(self.versions, 1):
            what = [f"data {version.data.short}"]
            if version.changed:
                what.append("changed while these units trained")
            if self.current is not None and version.data.same_content(self.current) and not version.changed:
                what.append(f"the data now in {self.path}")
            parts.append(f"({i}) {', '.join(what)}: {version.describe()}")
        now = ("" if self.current is None or any(v.data.same_content(self.current) for v in self.versions)
               else f"; {self.path} now holds none of them (data {self.current.short})")
        return (f"WARNING: the units read {len(self.versions)} versions of the data (it changed during a run): "
                f"{'; '.join(parts)}{now}. Their scores are not of one experiment; re-run 'rolling-calib run' on "
                f"this store to recompute the units on the current data ('files' covers the calendar and universe "
                f"files, 'features' every feature file's content)")

    @property
    def note(self) -> str | None:
        """Why the data could not be checked against its directory (else ``None``)."""
        if self.current is None and self.path is not None and self.state in ("unreachable", "mixed"):
            return (f"the data the units were trained on ({self.path}) is not reachable from here: whether it "
                    f"changed after training was not checked")
        return None   # "unrecorded": stores written by hand (tests, benches); every run records the fingerprint


def check_data(store: st.Store, pipelines: Sequence[str] | None = None,
               sides: Mapping[UnitKey, Sidecar | None] | None = None) -> DataCheck:
    """The data versions the units of ``pipelines`` (default: all) read, and the provider directory now.

    The directory is fingerprinted as ``run`` did at training, over the universe the experiment's task
    reads (:func:`~rolling_calib.execution.store.task_universe`), so the same data gives the same fingerprint.
    """
    versions = tuple(data_versions(store, store.select(pipelines), sides))
    if not versions:
        return DataCheck("unrecorded", None)
    path = versions[0].data.path
    current = None
    if path and Path(path).is_dir():
        current = DataRecord.from_dict(st.data_identity(path, instruments=st.task_universe(store.manifest.task)))
    if len(versions) > 1 or versions[0].changed:
        return DataCheck("mixed", path, versions, current)
    if current is None:
        return DataCheck("unreachable", path, versions)
    return DataCheck("unchanged" if versions[0].data.same_content(current) else "changed", path, versions, current)


def checksum_note(store: st.Store, pipelines: Sequence[str],
                  sides: Mapping[UnitKey, Sidecar | None] | None = None) -> str | None:
    """One note when units of ``pipelines`` were written before checksums were recorded (else ``None``)."""
    n = store.unchecked_units(pipelines, sides)
    if not n:
        return None
    return (f"{n} unit(s) of {store.root} were written before checksums were recorded (their sidecars hold no "
            f"checksum): they are read without a check of their bytes (a truncated file is still caught). Recompute "
            f"them to record checksums: move {store.layout.units} aside and re-run 'rolling-calib run' on this store")


def store_notes(store: st.Store, pipelines: Sequence[str]) -> list[str]:
    """What a command reading ``pipelines`` of ``store`` prints about the store: the data warning first, then notes."""
    sides = store.sidecars(pipelines)   # read once for both
    data = check_data(store, pipelines, sides)
    return [n for n in (data.warning, data.note, checksum_note(store, pipelines, sides)) if n]
