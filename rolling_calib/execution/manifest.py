"""What a store records, typed: its manifest (:class:`Manifest`) and each unit's sidecar (:class:`Sidecar`).

The JSON files stay as every version of rolling-calib wrote them (``STORE/manifest.json``, ``wNN.json``:
see :mod:`rolling_calib.execution.store`); these values are how code reads them. Each field is parsed
once, here, from the forms manifests and sidecars have held (fields added later are optional and
take the value their absence meant), and a field of the wrong type is one line naming the file, the
field, what was expected and what was found (:class:`ManifestFieldError`). The raw mapping stays on
the value (``raw``) for the one writer that merges into it and for logging it whole.

Examples
--------
>>> m = Manifest.from_dict({"pipelines": {"a": {"config_hash": "h", "seeds": [0, 1], "windows": [{"index": 0}]}},
...                         "compare": [["a", "b"]]}, source="STORE/manifest.json")
>>> m.pipelines["a"].seeds, m.pipelines["a"].window_indices, m.compare, m.label_kind
((0, 1), (0,), (('a', 'b'),), 'raw')
>>> Manifest.from_dict({"pipelines": {"a": {"seeds": "x"}}}, source="m.json")
Traceback (most recent call last):
...
rolling_calib.execution.manifest.ManifestFieldError: m.json: pipelines.a.seeds: expected a list of integers, found 'x'
>>> Sidecar.from_dict({"config_hash": "h", "timings": {"total_s": 2.5}, "sha256": "ab"}).seconds
2.5
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pandas as pd

from rolling_calib.core.calibration import Calibration
from rolling_calib.core.label import LABEL_KINDS, Label, storage_kind
from rolling_calib.core.schedule import Window
from rolling_calib.execution.units import UnitKey

__all__ = ["CHECKSUM_KINDS", "Checksum", "CorruptStoreFileError", "DataRecord", "Manifest", "ManifestFieldError",
           "PipelineRecord", "Sidecar"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class CorruptStoreFileError(ValueError):
    """A store file exists but cannot be read (manifest, sidecar); the message names it. Never taken for absent."""


class ManifestFieldError(CorruptStoreFileError):
    """A manifest or sidecar field holds a value of the wrong type (the message names file, field, expected, found)."""


def _bad(source: str, name: str, expected: str, found: Any) -> ManifestFieldError:
    shown = repr(found)
    return ManifestFieldError(f"{source}: {name}: expected {expected}, found {shown[:80]}")


def _mapping(data: Mapping[str, Any], key: str, source: str, name: str) -> Mapping[str, Any]:
    value = data.get(key)
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise _bad(source, name, "a mapping", value)
    return value


def _text(data: Mapping[str, Any], key: str, source: str, name: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, (dict, list)):
        raise _bad(source, name, "a string", value)
    return str(value)


def _int(value: Any, source: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _bad(source, name, "an integer", value)
    try:
        out = int(value)
    except ValueError:
        raise _bad(source, name, "an integer", value) from None
    if isinstance(value, float) and out != value:
        raise _bad(source, name, "an integer", value)
    return out


def _number(data: Mapping[str, Any], key: str) -> float | None:
    """A number field, ``None`` when absent or not a finite-or-not number (sidecars are written by this code)."""
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


# --------------------------------------------------------------------------- the data's identity
@dataclass(frozen=True)
class DataRecord:
    """The content fingerprint of the Qlib data a run read (:func:`rolling_calib.execution.store.data_identity`).

    ``files`` covers the calendars and universe files, ``features`` every feature file's content;
    ``path`` is where the data was (not part of the identity).

    >>> a = DataRecord.from_dict({"path": "/d", "files": "f1", "features": "x1", "feature_files": 2, "feature_bytes": 8})
    >>> a.same_content(DataRecord.from_dict({"path": "/e", "files": "f1", "features": "x1", "feature_files": 2,
    ...                                      "feature_bytes": 8})), a.short
    (True, 'f1/x1')
    """

    path: str | None
    files: str | None
    features: str | None
    feature_files: int | None = None
    feature_bytes: int | None = None
    raw: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, compare=False, repr=False)

    #: The fields that describe the content (``path`` is where it was, not what).
    CONTENT = ("files", "features", "feature_files", "feature_bytes")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "data", name: str = "data") -> DataRecord:
        if not isinstance(data, Mapping):
            raise _bad(source, name, "a mapping", data)

        def count(key: str) -> int | None:
            return None if data.get(key) is None else _int(data[key], source, f"{name}.{key}")

        return cls(path=_text(data, "path", source, f"{name}.path"), files=_text(data, "files", source, f"{name}.files"),
                   features=_text(data, "features", source, f"{name}.features"),
                   feature_files=count("feature_files"), feature_bytes=count("feature_bytes"), raw=data)

    @property
    def recorded(self) -> bool:
        """Whether it holds a fingerprint (stores written by hand record none)."""
        return self.features is not None

    def content(self) -> tuple[Any, ...]:
        return tuple(getattr(self, k) for k in self.CONTENT)

    def same_content(self, other: DataRecord | Mapping[str, Any] | None) -> bool:
        if other is None:
            return False
        other = other if isinstance(other, DataRecord) else DataRecord.from_dict(other)
        return self.content() == other.content()

    @property
    def short(self) -> str:
        """``files/features``: the fingerprint in a few characters (what warnings name)."""
        return f"{self.files}/{self.features}"

    def changes(self, other: DataRecord) -> list[str]:
        """``["features a -> b", ...]``: the content fields that differ from ``other``'s."""
        return [f"{k} {getattr(self, k)} -> {getattr(other, k)}" for k in self.CONTENT
                if getattr(self, k) != getattr(other, k)]


# --------------------------------------------------------------------------- one pipeline
@dataclass(frozen=True)
class PipelineRecord:
    """One pipeline of a manifest: its config hash, task, schedule, seeds and labels.

    ``window_records`` are the windows as recorded (``{"index", "fit", "train", "valid", "test"}``);
    :attr:`windows` parses them (a store written by hand may record indices only).
    """

    name: str
    config_hash: str
    seeds: tuple[int, ...]
    window_records: tuple[Mapping[str, Any], ...]
    task: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    shared_hash: str | None = None
    mode: str | None = None
    label: str | None = None
    calibration: Mapping[str, Any] | None = None
    recorded_labels: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    raw: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, compare=False, repr=False)

    @classmethod
    def from_dict(cls, pipeline: str, data: Any, *, source: str) -> PipelineRecord:
        at = f"pipelines.{pipeline}"
        if not isinstance(data, Mapping):
            raise _bad(source, at, "a mapping", data)
        seeds = data.get("seeds", [])
        if not isinstance(seeds, list):
            raise _bad(source, f"{at}.seeds", "a list of integers", seeds)
        windows = data.get("windows", [])
        if not isinstance(windows, list) or not all(isinstance(w, Mapping) and "index" in w for w in windows):
            raise _bad(source, f"{at}.windows", "a list of windows (mappings with an 'index')", windows)
        for w in windows:
            _int(w["index"], source, f"{at}.windows.index")
        labels = _mapping(data, "labels", source, f"{at}.labels")
        calibration = data.get("calibration")
        return cls(
            name=pipeline, config_hash=str(data.get("config_hash")),
            seeds=tuple(_int(s, source, f"{at}.seeds") for s in seeds), window_records=tuple(windows),
            task=_mapping(data, "task", source, f"{at}.task"), shared_hash=_text(data, "shared_hash", source, f"{at}.shared_hash"),
            mode=_text(data, "mode", source, f"{at}.mode"), label=_text(data, "label", source, f"{at}.label"),
            calibration=calibration if isinstance(calibration, Mapping) else None, recorded_labels=labels, raw=data)

    @functools.cached_property
    def windows(self) -> tuple[Window, ...]:
        """The schedule's windows (:class:`~rolling_calib.core.schedule.Window`)."""
        return tuple(Window.from_dict(dict(w)) for w in self.window_records)

    @property
    def window_indices(self) -> tuple[int, ...]:
        return tuple(int(w["index"]) for w in self.window_records)

    def units(self) -> list[UnitKey]:
        """Every recorded unit: each seed's windows, in seed then window order."""
        return [UnitKey(self.name, seed, index) for seed in self.seeds for index in self.window_indices]

    @property
    def model_class(self) -> str:
        """``module.Class`` of the pipeline's model, from its recorded task (``"unknown"`` when not recorded)."""
        model = self.task.get("model") or {}
        cls = model.get("class") if isinstance(model, Mapping) else None
        return f"{model.get('module_path', '')}.{cls}".lstrip(".") if cls else "unknown"

    @property
    def backtest(self) -> Mapping[str, Any]:
        """The pipeline's backtest as recorded (``spec``, ``hash``; ``refused``: why it was not run), ``{}`` for none."""
        value = self.raw.get("backtest")
        return value if isinstance(value, Mapping) else _EMPTY

    @property
    def labels(self) -> dict[str, Label]:
        """The description of each label kind, as recorded (``{}`` for stores written before labels were recorded)."""
        return {kind: Label.from_dict(value) for kind, value in self.recorded_labels.items() if kind in LABEL_KINDS}


# --------------------------------------------------------------------------- the manifest
@dataclass(frozen=True)
class Manifest:
    """A store's ``manifest.json``: its pipelines and what every run of it recorded."""

    pipelines: Mapping[str, PipelineRecord]
    experiment: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    data: DataRecord | None = None
    versions: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    qlib_init: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    compare: tuple[tuple[str, str], ...] = ()
    unit_checksums: bool = False
    history: tuple[Mapping[str, Any], ...] = ()
    source: str = "manifest.json"
    raw: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, compare=False, repr=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str) -> Manifest:
        """Parse a manifest's JSON object; :class:`ManifestFieldError` naming ``source`` and the field when one is wrong."""
        pipelines = data.get("pipelines")
        if not isinstance(pipelines, Mapping):
            raise _bad(source, "pipelines", "a mapping of pipelines", pipelines)
        compare = data.get("compare") or []
        if not isinstance(compare, list) or not all(isinstance(p, list) and len(p) == 2 for p in compare):
            raise _bad(source, "compare", "a list of pipeline pairs", compare)
        history = data.get("history") or []
        if not isinstance(history, list):
            raise _bad(source, "history", "a list of runs", history)
        recorded = data.get("data")
        return cls(
            pipelines={str(n): PipelineRecord.from_dict(str(n), e, source=source) for n, e in pipelines.items()},
            experiment=_mapping(data, "experiment", source, "experiment"),
            data=None if recorded is None else DataRecord.from_dict(recorded, source=source),
            versions={str(k): str(v) for k, v in _mapping(data, "versions", source, "versions").items()},
            qlib_init=_mapping(data, "qlib_init", source, "qlib_init"),
            compare=tuple((str(a), str(b)) for a, b in compare), unit_checksums=bool(data.get("unit_checksums")),
            history=tuple(history), source=source, raw=data)

    @property
    def rolling(self) -> Mapping[str, Any]:
        """The experiment's ``rolling`` section as recorded."""
        value = self.experiment.get("rolling")
        return value if isinstance(value, Mapping) else _EMPTY

    @property
    def calibration(self) -> Calibration:
        """The calibration rule the store's experiment declared (the paper's rule when it declares none).

        Accepts every form manifests have held (``{period, bias}``, with ``source``, with the later options).
        """
        return Calibration.from_dict(self.rolling.get("calibration") or {})

    @property
    def label_kind(self) -> str:
        """The ``rolling.label`` the store was run with (``raw`` for stores from before the option)."""
        return str(self.rolling.get("label", "raw"))

    @property
    def stored_label_kind(self) -> str:
        """The label kind a unit's ``label`` column holds when its sidecar does not say (``auto`` stored as raw)."""
        return storage_kind(self.label_kind)

    @property
    def experiment_name(self) -> str | None:
        name = self.experiment.get("experiment_name")
        return str(name) if name else None

    @property
    def task(self) -> Mapping[str, Any]:
        """The experiment's base Qlib task as recorded."""
        value = self.experiment.get("task")
        return value if isinstance(value, Mapping) else _EMPTY


# --------------------------------------------------------------------------- one unit's sidecar
#: The checksums a sidecar records of a file's bytes, the one a reader checks first: ``xxh3`` (XXH3-128, about 25
#: GB/s: what every read verifies) and ``sha256`` (SHA-256, about 1.7 GB/s: the content's identity, which backtests
#: and provenance key on). Units written before ``xxh3`` was recorded are read against their ``sha256``.
CHECKSUM_KINDS = ("xxh3", "sha256")


@dataclass(frozen=True)
class Checksum:
    """One recorded checksum of a file's bytes: ``kind`` (one of :data:`CHECKSUM_KINDS`) and its hex ``digest``.

    >>> Checksum("xxh3", "00ff").kind
    'xxh3'
    """

    kind: str
    digest: str

    def __post_init__(self) -> None:
        if self.kind not in CHECKSUM_KINDS:
            raise ValueError(f"kind: expected one of {', '.join(CHECKSUM_KINDS)}, found {self.kind!r}")


@dataclass(frozen=True)
class Sidecar:
    """A unit's sidecar (``wNN.json``): what the unit is (config hash), its files' checksums, how it was trained.

    Every field is optional: sidecars written before a field existed lack it. ``data`` is the
    fingerprint of the data the unit read (recorded since units record it; ``None`` before: the
    manifest's is the run's); ``started_at``/``finished_at`` are ISO times (UTC).
    """

    config_hash: str | None = None
    sha256: str | None = None
    valid_sha256: str | None = None
    xxh3: str | None = None
    valid_xxh3: str | None = None
    valid_rows: int | None = None
    label: str | None = None
    label_columns: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    checkpoint: str | None = None
    checkpoint_sha256: str | None = None
    qlib_recorder: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    rows: int | None = None
    ql: float | None = None
    seconds: float | None = None
    #: Seconds spent building the data set, fitting and predicting (``timings``: build_s + fit_s + predict_s);
    #: None when the sidecar records none of them.
    compute_seconds: float | None = None
    first_prediction: str | None = None
    last_prediction: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    stopped_at: str | None = None
    data: DataRecord | None = None
    data_changed_while_training: bool = False
    raw: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, compare=False, repr=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "sidecar") -> Sidecar:
        timings = data.get("timings") if isinstance(data.get("timings"), Mapping) else _EMPTY
        columns = data.get("label_columns")
        recorded = data.get("data")
        rows, valid_rows = data.get("rows"), data.get("valid_rows")
        return cls(
            config_hash=_text(data, "config_hash", source, "config_hash"), sha256=_text(data, "sha256", source, "sha256"),
            valid_sha256=_text(data, "valid_sha256", source, "valid_sha256"),
            xxh3=_text(data, "xxh3", source, "xxh3"), valid_xxh3=_text(data, "valid_xxh3", source, "valid_xxh3"),
            valid_rows=None if valid_rows is None else _int(valid_rows, source, "valid_rows"),
            label=_text(data, "label", source, "label"),
            label_columns=({str(k): str(v) for k, v in columns.items()} if isinstance(columns, Mapping) and columns
                           else _EMPTY),
            checkpoint=_text(data, "checkpoint", source, "checkpoint"),
            checkpoint_sha256=_text(data, "checkpoint_sha256", source, "checkpoint_sha256"),
            qlib_recorder=data.get("qlib_recorder") if isinstance(data.get("qlib_recorder"), Mapping) else _EMPTY,
            rows=None if rows is None else _int(rows, source, "rows"), ql=_number(data, "ql"),
            seconds=_number(timings, "total_s"),
            compute_seconds=(sum(v for k in ("build_s", "fit_s", "predict_s") if (v := _number(timings, k)) is not None)
                             if any(_number(timings, k) is not None for k in ("build_s", "fit_s", "predict_s"))
                             else None),
            first_prediction=_text(data, "first_prediction", source, "first_prediction"),
            last_prediction=_text(data, "last_prediction", source, "last_prediction"),
            started_at=_text(data, "started_at", source, "started_at"),
            finished_at=_text(data, "finished_at", source, "finished_at"),
            stopped_at=_text(data, "stopped_at", source, "stopped_at"),
            data=DataRecord.from_dict(recorded, source=source) if isinstance(recorded, Mapping) else None,
            data_changed_while_training=bool(data.get("data_changed_while_training")), raw=data)

    def checksums(self, *, valid: bool = False) -> tuple[Checksum, ...]:
        """The recorded checksums of the unit's Parquet file (``valid``: of ``wNN.valid.parquet``), in
        :data:`CHECKSUM_KINDS` order (the one a read verifies first); empty for a unit written before checksums.

        >>> Sidecar(sha256="ab", xxh3="cd").checksums()
        (Checksum(kind='xxh3', digest='cd'), Checksum(kind='sha256', digest='ab'))
        >>> Sidecar(sha256="ab").checksums(valid=True)
        ()
        """
        prefix = "valid_" if valid else ""
        return tuple(Checksum(kind, digest) for kind in CHECKSUM_KINDS if (digest := getattr(self, prefix + kind)))

    def read_checksum(self, *, valid: bool = False) -> Checksum | None:
        """The checksum every read of the file verifies: the first of :meth:`checksums` (None: none recorded)."""
        found = self.checksums(valid=valid)
        return found[0] if found else None

    def columns(self, store_label_kind: str) -> dict[str, str]:
        """Which column of the unit holds which label kind (``{"raw": "label", "learn": "label_learn"}``).

        Recorded since both labels are stored; older units hold one label, in ``label``, of the kind
        their sidecar (else the store's ``rolling.label``, ``store_label_kind``) names.

        >>> Sidecar(label="raw").columns("learn")
        {'raw': 'label'}
        """
        if self.label_columns:
            return dict(self.label_columns)
        return {str(self.label or store_label_kind): "label"}

    def training_span(self) -> tuple[pd.Timestamp, pd.Timestamp] | None:
        """When the unit trained (UTC): ``started_at`` .. ``finished_at``; older sidecars: ``finished_at`` less its
        total seconds. ``None`` when it records neither."""
        if not self.finished_at:
            return None
        end = pd.Timestamp(self.finished_at)
        if self.started_at:
            return pd.Timestamp(self.started_at), end
        return (end - pd.Timedelta(seconds=self.seconds), end) if self.seconds is not None else None
