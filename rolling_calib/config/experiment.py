"""Experiment configuration: a Qlib workflow YAML plus ``rolling:``, ``pipelines:`` and ``compare:``.

An experiment file is an ordinary Qlib workflow (``qrun`` runs its ``task`` for one
window) with three extra top-level sections that only rolling-calib reads::

    qlib_init: {provider_uri: {1min: qlib_data/us25}, region: us, kernels: 1}
    task:
      model:   {class: RollingLSTM, module_path: rolling_calib.qlib_adapter.model, kwargs: {...}}
      dataset: {class: MinuteTSDataset, module_path: rolling_calib.qlib_adapter.dataset, kwargs: {handler: {...}, segments: {...}}}
      record:  [...]                      # used by qrun only
    rolling:                              # see RollingConfig
      initial_train_start: 2012-01
      start: 2015-01                      # first evaluated month
      end: 2018-12                        # last evaluated month
      step_months: 6
      mode: finetune                      # or scratch
      seeds: 10
      calibration: {period: month, bias: pooled}   # source, bias_window, missing_instrument too
    pipelines:                            # name -> dotted overrides of the task (or files holding such maps)
      wd0: {}
      wd5e-6: {task.model.kwargs.weight_decay: 5.0e-6}
    compare: [[wd5e-6, wd0]]              # pairs (A, B) to compare

Like ``qrun``, a file may start from another with ``BASE_CONFIG_PATH: base.yaml``
(merged with Qlib's own ``update_config``), so variants never copy a full YAML; its
``pipelines`` and ``compare`` sections, when present, replace the base's instead of
merging into them.
``pipelines:`` may also be a list of small files (``workflows/pipelines/*.yaml``),
each holding ``pipelines:`` and optionally ``compare:``.

A Qlib workflow is read as ``qrun`` reads it: Qlib's ``examples/benchmarks/*/workflow_config*.yaml``
validate unchanged once a ``rolling:`` section is added (e.g. by a small file with
``BASE_CONFIG_PATH``; ``tests/config/qlib_format`` holds four workflows in their format). qrun's ``sys:``
section is followed (``path`` and ``rel_path``, relative to the file, appended to ``sys.path``),
and a ``module_path`` naming a ``.py`` file is found in the current directory, as ``qrun``
finds it, else beside the file (:func:`rolling_calib.qlib_adapter.task_spec.resolve_module_files`).
In detail:

* top-level keys other than :data:`TOP_LEVEL_KEYS` (``market``, ``benchmark``,
  ``data_handler_config``, ``port_analysis_config``: YAML anchors) are ignored, as ``qrun``
  ignores them, and listed in a debug log.
  Only a near miss of one of our own keys (``rollin``, ``pipeline``, ``Compare``) is refused,
  since it is almost certainly a typo that would otherwise drop a section silently;
* without ``pipelines:`` the file is one configuration, its task unchanged, named after
  the file's stem (``workflow_config_lstm_Alpha360``; ``base`` if the stem is not a valid
  pipeline name), so runs of several single-configuration files stay apart by name;
* ``rolling:`` is required: it is what rolling-calib adds; its absence is reported with a
  snippet to paste, dated from the task's own ``segments`` where it has them;
* keyword arguments are refused only when provably unknown: classes whose ``__init__``
  chain ends in a ``**kwargs`` sink (Qlib's ``LGBModel`` hands them to LightGBM, ``ALSTM``
  ignores them) accept any name; see
  :func:`rolling_calib.qlib_adapter.task_spec.accepted_kwargs`.

:func:`load_experiment` validates everything before any training starts: unknown
keys in our sections (named by their full dotted path), wrong types, a missing data directory,
months outside the store's calendar, and model / dataset / handler keyword
arguments that the classes do not accept (checked against their signatures).

The file is read as ``qrun`` reads it (:mod:`rolling_calib.config.qrun_yaml`: a Jinja2
template over environment variables, then ruamel.yaml's YAML 1.2). Relative paths are
resolved as ``qrun`` resolves them: ``provider_uri`` against the current directory,
``BASE_CONFIG_PATH`` against the current directory first, then the including file's
directory; pipeline files (ours) against the including file's directory.
"""

from __future__ import annotations

import copy
import difflib
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rolling_calib.config.bounds import check_pipeline_name, parse_seeds, pipeline_name_problem
from rolling_calib.core.calibration import Calibration
from rolling_calib.config.qrun_yaml import Aliases, find_base, load_yaml, load_yaml_aliases
from rolling_calib.core.fingerprint import stable_hash
from rolling_calib.core.schedule import (
    ROLLING_OPTIONS,
    Window,
    check_rolling_options,
    parse_month,
    rolling_windows,
)
from rolling_calib.core.validation import (
    ConfigError,
    expect,
    reject_unknown,
)
from rolling_calib.qlib_adapter.session import (
    resolve_qlib_init,
    store_calendar,
    store_freq,
    store_path,
)
from rolling_calib.qlib_adapter.task_spec import merge_base_config, resolve_module_files, validate_task

__all__ = [
    "ConfigError",
    "RollingConfig",
    "ExperimentConfig",
    "apply_overrides",
    "load_experiment",
    "load_yaml",
    "read_rolling",
    "stable_hash",
    "validate_task",
]

#: The top-level keys rolling-calib reads. Other keys are ignored as ``qrun`` ignores them
#: (YAML anchors such as ``market``/``data_handler_config``, settings of other tools), except
#: near misses of these, which are typos (see :func:`_check_top_level`).
TOP_LEVEL_KEYS = frozenset({"qlib_init", "task", "rolling", "pipelines", "compare", "experiment_name", "BASE_CONFIG_PATH"})
#: Top-level keys ``qrun`` itself reads and rolling-calib does not (``sys``: ``sys.path`` additions).
QRUN_KEYS = frozenset({"sys"})
REPLACED_KEYS = ("pipelines", "compare")
#: The name of a file's one pipeline when its stem cannot name one (see :func:`_single_pipeline`).
SINGLE_PIPELINE = "base"


def _optional_leaves() -> dict[str, frozenset[str]]:
    """Options an override may add where the file leaves them at their defaults (``--set rolling.stack_seeds=4``)."""
    return {"rolling": frozenset(RollingConfig.__dataclass_fields__),
            "rolling.calibration": frozenset(Calibration.__dataclass_fields__)}


_LOG = logging.getLogger(__name__)


# --------------------------------------------------------------------------- overrides
def apply_overrides(cfg: Mapping[str, Any], overrides: Mapping[str, Any], *, source: str = "overrides",
                    aliases: Aliases | None = None) -> dict:
    """Return a deep copy of ``cfg`` with dotted-path ``overrides`` applied.

    Every path must already exist in ``cfg``; inside a list (``task.record``) a part names an item
    by its 0-based index or, for a list of ``{class: ...}`` items, by its class name
    (``task.record.2.kwargs...`` or ``task.record.PortAnaRecord.kwargs...``). A new leaf may be added
    directly under a ``kwargs`` mapping (it is checked against the class signature
    by :func:`load_experiment`), and an option of ``rolling:`` or ``rolling.calibration:``
    that the file leaves at its default may be set (``rolling.stack_seeds``). A value
    replaces the old one entirely.

    Through the file's YAML anchors (``aliases``, :func:`~rolling_calib.config.qrun_yaml.alias_paths`)
    a value set on an anchored value, or inside it, is set at every alias of it too, as editing the
    anchor in the file would: ``benchmark`` reaches ``port_analysis_config.backtest.benchmark:
    *benchmark`` and, through ``config: *port_analysis_config``, the ``PortAnaRecord`` record.

    Parameters
    ----------
    cfg : mapping
        Nested configuration (not modified).
    overrides : mapping of str to value
        ``{"task.model.kwargs.weight_decay": 5e-6, ...}``.
    source : str
        Where the overrides come from, for error messages (e.g. ``"pipelines.wd5e-6"``).

    Returns
    -------
    dict
        The new configuration.

    Raises
    ------
    ConfigError
        When a path does not exist, naming the full key and the missing part.

    Examples
    --------
    >>> apply_overrides({"task": {"model": {"kwargs": {"lr": 0.1}}}}, {"task.model.kwargs.lr": 0.01})
    {'task': {'model': {'kwargs': {'lr': 0.01}}}}
    >>> apply_overrides({"rolling": {"seeds": 3}}, {"rolling.stack_seeds": 3})
    {'rolling': {'seeds': 3, 'stack_seeds': 3}}
    >>> apply_overrides({"task": {"record": [{"class": "SignalRecord"}, {"class": "PortAnaRecord", "kwargs": {"b": "X"}}]}},
    ...                 {"task.record.PortAnaRecord.kwargs.b": "AAPL"})["task"]["record"][1]
    {'class': 'PortAnaRecord', 'kwargs': {'b': 'AAPL'}}
    >>> apply_overrides({"task": {}}, {"task.modle.kwargs.lr": 1})
    Traceback (most recent call last):
    ...
    rolling_calib.core.validation.ConfigError: overrides: unknown key 'task.modle.kwargs.lr' ('task' has no 'modle'; it has: none)
    >>> cfg = {"benchmark": "SH000300", "port": {"benchmark": "SH000300"}}
    >>> apply_overrides(cfg, {"benchmark": "AAPL"}, aliases={("benchmark",): [("port", "benchmark")]})
    {'benchmark': 'AAPL', 'port': {'benchmark': 'AAPL'}}
    """
    out = copy.deepcopy(dict(cfg))
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"{source}: expected a mapping of dotted keys to values, found {type(overrides).__name__}")
    for dotted, value in overrides.items():
        if not isinstance(dotted, str) or not dotted:
            raise ConfigError(f"{source}: expected dotted string keys, found {dotted!r}")
        parts = dotted.split(".")
        node: Any = out
        concrete: list[Any] = []   # the path with list items as indices (to follow the file's aliases)
        for depth, part in enumerate(parts):
            where = ".".join(parts[:depth]) or "<root>"
            last = depth == len(parts) - 1
            if isinstance(node, list):
                index = _list_index(node, part, dotted=dotted, where=where, source=source)
                concrete.append(index)
                if last:
                    node[index] = copy.deepcopy(value)
                else:
                    node = node[index]
                continue
            concrete.append(part)
            if not isinstance(node, dict):
                raise ConfigError(
                    f"{source}: unknown key '{dotted}' ('{where}' is a {type(node).__name__}, not a mapping)"
                )
            optional = parts[depth - 1 : depth] == ["kwargs"] or part in _optional_leaves().get(where, ())
            if part not in node and not last and (where, part) in (("<root>", "rolling"), ("rolling", "calibration")):
                node[part] = {}   # --set rolling.KEY=VALUE on a file without rolling: (a Qlib benchmark YAML)
            if part not in node and not (last and optional):
                known = ", ".join(sorted(map(str, node))) or "none"
                raise ConfigError(f"{source}: unknown key '{dotted}' ('{where}' has no '{part}'; it has: {known})")
            if last:
                node[part] = copy.deepcopy(value)
            else:
                node = node[part]
        for path in _aliased(tuple(concrete), aliases or {}):
            _set_path(out, path, value)
    return out


def _dotted(path: tuple) -> str:
    """``("task", "record", 2)`` -> ``"task.record.2"``."""
    return ".".join(map(str, path))


def _aliased(path: tuple, aliases: Aliases) -> list[tuple]:
    """Every place ``path`` is used again through the file's aliases (transitively), ``path`` itself excluded.

    >>> _aliased(("m",), {("m",): [("h", "instruments")], ("h",): [("task", "handler")]})
    [('h', 'instruments'), ('task', 'handler', 'instruments')]
    """
    found: list[tuple] = []
    todo = [path]
    while todo:
        current = todo.pop(0)
        for anchor, uses in aliases.items():
            if current[:len(anchor)] != anchor:
                continue
            for use in uses:
                target = tuple(use) + current[len(anchor):]
                if target != path and target not in found:
                    found.append(target)
                    todo.append(target)
    return found


def _set_path(cfg: Any, path: tuple, value: Any) -> None:
    """Set ``value`` at ``path`` of ``cfg`` when the path's parent exists there (an alias the file later replaced
    is left as it is)."""
    node = cfg
    for part in path[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            return
    last = path[-1]
    if isinstance(node, dict) and last in node:
        node[last] = copy.deepcopy(value)
    elif isinstance(node, list) and isinstance(last, int) and 0 <= last < len(node):
        node[last] = copy.deepcopy(value)


def _list_index(items: list, part: str, *, dotted: str, where: str, source: str) -> int:
    """The item of a list a dotted key names: a 0-based index, or the class name of one ``{class: ...}`` item.

    >>> records = [{"class": "SignalRecord"}, {"class": "SigAnaRecord"}, {"class": "PortAnaRecord"}]
    >>> [_list_index(records, part, dotted=f"task.record.{part}", where="task.record", source="--set")
    ...  for part in ("2", "PortAnaRecord")]
    [2, 2]
    >>> _list_index(records, "3", dotted="task.record.3.kwargs", where="task.record", source="--set")
    Traceback (most recent call last):
    ...
    rolling_calib.core.validation.ConfigError: --set: unknown key 'task.record.3.kwargs' ('task.record' is a list of 3 items, 0..2: 0 SignalRecord, 1 SigAnaRecord, 2 PortAnaRecord)
    """
    names = [item.get("class") if isinstance(item, dict) else None for item in items]
    contents = ", ".join(f"{i} {name if name is not None else type(item).__name__}"
                         for i, (name, item) in enumerate(zip(names, items))) or "empty"
    span = f"0..{len(items) - 1}" if items else "none"
    if part.lstrip("-").isdigit():
        index = int(part)
        if 0 <= index < len(items):
            return index
        raise ConfigError(f"{source}: unknown key '{dotted}' ('{where}' is a list of {len(items)} items, {span}: "
                          f"{contents})")
    matches = [i for i, name in enumerate(names) if name == part]
    if len(matches) == 1:
        return matches[0]
    problem = f"two or more items are {part}: name one by its index" if matches else f"no item has class {part}"
    raise ConfigError(f"{source}: unknown key '{dotted}' ('{where}' is a list: {problem}; it has {contents})")


# --------------------------------------------------------------------------- typed sections
@dataclass(frozen=True)
class RollingConfig:
    """The ``rolling:`` section (see :func:`rolling_calib.core.schedule.rolling_windows`).

    Attributes
    ----------
    initial_train_start, start, end : str
        Months ``YYYY-MM``: first training month, first and last evaluated month.
    step_months : int
        Months predicted by one model before it is fine-tuned / retrained (6 in docs/method.md §3.3).
    valid_months : int
        Months before each test segment used for early stopping.
    mode : "finetune" or "scratch"
    train_window : "expanding" or "sliding"
    sliding_months : int or None
    finetune_on : "new" or "window"
    label : "auto", "raw" or "learn"
        Score against the handler's raw label (``DK_R``) or its learn-processed one (``DK_L``);
        ``auto`` (default): the learned one when a learn processor changed it, else the raw one.
    stack_seeds : int
        Seeds of one (pipeline, window) trained together as one seed stack (1: each seed on its
        own, the reference path; needs a model the seed stack can fit, RollingLSTM, when > 1). The
        seeds are cut into fixed groups of this size in ``seeds`` order.
    seeds : tuple of int
        Seeds of every pipeline (``seeds: 10`` means 0..9).
    step_days : int or None
        Trading days (sessions) predicted by one model, instead of ``step_months`` (Qlib's rolling
        retrain steps 20); None: ``step_months``.
    purge : "auto" or int
        Bars dropped at the end of each training and validation segment before the next one, so
        no label there looks into it; ``auto``: the label expression's look-ahead on a daily store
        (Qlib's ``guess_horizon``: 2 for ``Ref($close, -2)/Ref($close, -1) - 1``), 0 for a label that
        stays inside its session on a minute store (:func:`rolling_calib.qlib_adapter.labels.label_purge`).
    calibration : Calibration
        The rule of the rolling CQL (``rolling.calibration``: period, bias, source, bias_window,
        missing_instrument; :class:`~rolling_calib.core.calibration.Calibration`).
    """

    initial_train_start: str
    start: str
    end: str
    step_months: int = 6
    valid_months: int = 1
    mode: str = "finetune"
    train_window: str = "expanding"
    sliding_months: int | None = None
    finetune_on: str = "new"
    label: str = "auto"  # QL/CQL against the label learned when a processor changed it (DK_L), else the raw one (DK_R)
    stack_seeds: int = 1
    seeds: tuple[int, ...] = tuple(range(10))
    calibration: Calibration = field(default_factory=Calibration)
    step_days: int | None = None
    purge: int | str = "auto"

    def purge_bars(self, auto: int) -> int:
        """The bars purged: ``purge`` when it is a count, else ``auto`` (the label's look-ahead, resolved by the caller)."""
        return auto if self.purge == "auto" else int(self.purge)

    def windows(self, calendar: pd.DatetimeIndex, *, purge: int = 0) -> list[Window]:
        """The schedule's windows on ``calendar`` (the store's bars); ``purge``: the bars ``purge: auto`` stands for."""
        return rolling_windows(
            calendar,
            initial_train_start=self.initial_train_start,
            start=self.start,
            end=self.end,
            step_months=self.step_months,
            valid_months=self.valid_months,
            mode=self.mode,  # type: ignore[arg-type]
            train_window=self.train_window,  # type: ignore[arg-type]
            sliding_months=self.sliding_months,
            finetune_on=self.finetune_on,  # type: ignore[arg-type]
            step_days=self.step_days,
            purge=self.purge_bars(purge),
        )


@dataclass
class ExperimentConfig:
    """A validated experiment: the Qlib workflow, its schedule, pipelines and comparisons.

    Attributes
    ----------
    path : Path or None
        The YAML file it came from.
    qlib_init : dict
        Arguments of ``qlib.init`` (``provider_uri`` resolved to ``{"1min": absolute path}``).
    task : dict
        The base Qlib task (``model``, ``dataset``, ``record``).
    rolling : RollingConfig
    pipelines : dict
        ``{name: {dotted key: value}}``, in file order.
    compare : list of (str, str)
        Pairs ``(A, B)`` to compare; empty means every pair.
    experiment_name : str
    notes : tuple of str
        The schedule options chosen for the file (:mod:`rolling_calib.config.schedule_defaults`), one line each.
    anchors : dict
        Dotted keys the file writes as an alias -> the dotted key of the anchor they repeat
        (``{"task.record.2.kwargs.config": "port_analysis_config"}``), for messages that name the key
        the user writes.
    """

    path: Path | None
    qlib_init: dict
    task: dict
    rolling: RollingConfig
    pipelines: dict[str, dict[str, Any]]
    compare: list[tuple[str, str]]
    experiment_name: str = "rolling-calib"
    notes: tuple[str, ...] = ()
    anchors: dict[str, str] = field(default_factory=dict)

    def anchor_of(self, key: str) -> str | None:
        """The key the file writes for a dotted key inside an alias, through its anchors (None: not inside one).

        >>> cfg = ExperimentConfig(None, {}, {}, None, {}, [], anchors={"task.record.2.kwargs.config":
        ...     "port_analysis_config", "port_analysis_config.backtest.benchmark": "benchmark"})
        >>> cfg.anchor_of("task.record.2.kwargs.config.backtest.benchmark"), cfg.anchor_of("task.model")
        ('benchmark', None)
        """
        current, changed = key, False
        for _ in range(len(self.anchors) + 1):
            parts = current.split(".")
            for n in range(len(parts), 0, -1):
                prefix = ".".join(parts[:n])
                if prefix in self.anchors:
                    current = ".".join([self.anchors[prefix], *parts[n:]])
                    changed = True
                    break
            else:
                break
        return current if changed else None

    @property
    def store_dir(self) -> Path:
        """The Qlib data store the experiment reads (:func:`rolling_calib.qlib_adapter.session.store_path`: its
        ``qlib_init.provider_uri``, the first one when it maps frequencies to stores)."""
        return store_path(self.qlib_init)

    def pipeline_task(self, name: str) -> dict:
        """The task of pipeline ``name``: the base task with the pipeline's overrides applied."""
        if name not in self.pipelines:
            raise ConfigError(f"pipelines: unknown pipeline {name!r}; known: {', '.join(self.pipelines)}")
        resolved = apply_overrides({"task": self.task}, self.pipelines[name], source=f"pipelines.{name}")
        return resolved["task"]

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form, as recorded in the store manifest."""
        rolling = asdict(self.rolling)
        rolling["seeds"] = list(self.rolling.seeds)
        # the options added since the first stores are recorded only when set (same shared hash as before)
        rolling["calibration"] = self.rolling.calibration.to_dict()
        for option, default in (("stack_seeds", 1), ("step_days", None), ("purge", "auto")):
            if rolling[option] == default:  # a default: recorded as before (same shared hash)
                del rolling[option]
        return {
            "path": str(self.path) if self.path else None,
            "experiment_name": self.experiment_name,
            "qlib_init": self.qlib_init,
            "task": self.task,
            "rolling": rolling,
            "pipelines": self.pipelines,
            "compare": [list(p) for p in self.compare],
        }


# --------------------------------------------------------------------------- helpers
def _read_with_base(path: Path, *, seen: tuple[Path, ...] = ()) -> tuple[dict, Aliases]:
    """Load ``path`` as ``qrun`` does, merging ``BASE_CONFIG_PATH`` files first (Qlib's ``update_config``).

    Only the file given (``seen`` empty) is a template, as in ``qrun``; see :mod:`rolling_calib.config.qrun_yaml`.
    Returns the merged mapping and the aliases of every file read (for ``--set`` through anchors).
    """
    path = Path(path).resolve()
    if path in seen:
        raise ConfigError(f"{path}: BASE_CONFIG_PATH cycle through {' -> '.join(map(str, seen))}")
    data, aliases = load_yaml_aliases(path, template=not seen)
    base_ref = data.pop("BASE_CONFIG_PATH", None)
    if base_ref is None:
        return data, aliases
    if not isinstance(base_ref, str):
        raise ConfigError(f"{path}: BASE_CONFIG_PATH: expected a file path string, found {base_ref!r}")
    base, base_aliases = _read_with_base(find_base(base_ref, path), seen=seen + (path,))
    # pipelines and comparisons are lists of experiments, not settings: the including file's replace the base's
    replaced = {key: data.pop(key) for key in REPLACED_KEYS if key in data}
    merged = merge_base_config(base, data)
    merged.update(replaced)
    return merged, {**base_aliases, **aliases}


def _month_text(value: Any, key: str, edge: str, where: str) -> str:
    try:
        return str(parse_month(value, field=key, edge=edge))  # type: ignore[arg-type]
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def _parse_rolling(section: Any, where: str) -> RollingConfig:
    expect(section, dict, "rolling", "a mapping", where)
    allowed = {f for f in RollingConfig.__dataclass_fields__}
    reject_unknown(section, allowed, "rolling.", where)
    for required in ("initial_train_start", "start", "end"):
        if required not in section:
            raise ConfigError(f"{where}: rolling.{required}: missing (expected a month 'YYYY-MM')")
    kwargs: dict[str, Any] = {
        "initial_train_start": _month_text(section["initial_train_start"], "rolling.initial_train_start", "start", where),
        "start": _month_text(section["start"], "rolling.start", "start", where),
        "end": _month_text(section["end"], "rolling.end", "end", where),
    }
    options = {key: section[key] for key in ROLLING_OPTIONS if key in section}
    check_rolling_options(options, where=where)  # the same declared constraints rolling_windows checks
    kwargs.update(options)
    if "seeds" in section:
        kwargs["seeds"] = parse_seeds(section["seeds"], "rolling.seeds", where)
    if "calibration" in section:
        cal = expect(section["calibration"], dict, "rolling.calibration", "a mapping", where)
        calibration = Calibration.from_dict(cal, where=where, prefix="rolling.calibration.")
        if calibration.source == "validation" and kwargs.get("valid_months", RollingConfig.valid_months) == 0:
            raise ConfigError(f"{where}: rolling.calibration.source: 'validation' needs a validation segment, but "
                              f"rolling.valid_months is 0; set valid_months >= 1 or source: previous")
        kwargs["calibration"] = calibration
    return RollingConfig(**kwargs)


def _parse_pipelines(value: Any, where: str, base_dir: Path) -> tuple[dict[str, dict], list[tuple[str, str]]]:
    """``pipelines:`` as a mapping, or a list of mappings / pipeline files."""
    pipelines: dict[str, dict] = {}
    compare: list[tuple[str, str]] = []

    def add(mapping: Any, origin: str) -> None:
        expect(mapping, dict, "pipelines", "a mapping of pipeline name to overrides", origin)
        for name, overrides in mapping.items():
            check_pipeline_name(name, origin)
            if overrides is None:
                overrides = {}
            expect(overrides, dict, f"pipelines.{name}", "a mapping of dotted keys to values", origin)
            if name in pipelines:
                raise ConfigError(f"{origin}: pipelines.{name}: defined twice")
            pipelines[name] = dict(overrides)

    if isinstance(value, dict):
        add(value, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, str):
                file = Path(item) if Path(item).is_absolute() else base_dir / item
                if not file.is_file():
                    raise ConfigError(f"{where}: pipelines[{i}]: pipeline file not found: {file}")
                data = load_yaml(file)
                reject_unknown(data, {"pipelines", "compare"}, "", str(file))
                add(data.get("pipelines", {}), str(file))
                compare.extend(_parse_compare(data.get("compare", []), str(file)))
            elif isinstance(item, dict):
                add(item, where)
            else:
                raise ConfigError(
                    f"{where}: pipelines[{i}]: expected a pipeline file path or a mapping, found {type(item).__name__}"
                )
    else:
        raise ConfigError(
            f"{where}: pipelines: expected a mapping name -> overrides or a list of pipeline files, "
            f"found {type(value).__name__}"
        )
    if not pipelines:
        raise ConfigError(f"{where}: pipelines: expected at least one pipeline (use 'base: {{}}' for the base task)")
    return pipelines, compare


def _parse_compare(value: Any, where: str) -> list[tuple[str, str]]:
    expect(value, list, "compare", "a list of [A, B] pairs", where)
    pairs = []
    for i, pair in enumerate(value):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)) or pair[0] == pair[1]:
            raise ConfigError(f"{where}: compare[{i}]: expected a pair [A, B] of two different pipeline names, found {pair!r}")
        pairs.append((pair[0], pair[1]))
    return pairs


def _declared_value(cls: type, kwargs: Mapping[str, Any], name: str) -> Any:
    """``kwargs[name]``, else the default of ``cls.__init__``'s parameter ``name`` (``None``: no such parameter)."""
    import inspect

    if name in kwargs:
        return kwargs[name]
    try:
        param = inspect.signature(cls.__init__).parameters.get(name)
    except (TypeError, ValueError):
        return None
    return None if param is None or param.default is inspect.Parameter.empty else param.default


def check_step_len(task: Mapping[str, Any], where: str, *, prefix: str = "task") -> None:
    """A dataset's ``step_len`` longer than its handler's ``window`` is refused at plan time, not in every unit.

    The handler fits its normalisation for ``window`` lags; a sample of ``step_len`` lags needs
    ``step_len <= window``. Checked when the dataset takes ``step_len`` and the handler ``window``
    (given or by default), as :class:`~rolling_calib.qlib_adapter.dataset.MinuteTSDataset` and
    :class:`~rolling_calib.qlib_adapter.dataset.MinuteBarHandler` do; other classes pass.
    """
    from rolling_calib.qlib_adapter.task_spec import import_class

    dataset = task["dataset"]
    dkw = dataset.get("kwargs", {}) or {}
    handler = dkw.get("handler")
    if not isinstance(handler, dict):
        return
    step = _declared_value(import_class(dataset, f"{prefix}.dataset", where), dkw, "step_len")
    window = _declared_value(import_class(handler, f"{prefix}.dataset.kwargs.handler", where),
                             handler.get("kwargs", {}) or {}, "window")
    if isinstance(step, int) and isinstance(window, int) and not isinstance(step, bool) and step > window:
        raise ConfigError(f"{where}: {prefix}.dataset.kwargs.step_len: expected at most the handler's window {window} "
                          f"({prefix}.dataset.kwargs.handler.kwargs.window: the normalisation is fitted for that many "
                          f"lags), found {step}")


def _check_instruments(task: Mapping[str, Any], store: Path, where: str) -> None:
    handler_kwargs = task["dataset"].get("kwargs", {}).get("handler", {}).get("kwargs", {})
    market = handler_kwargs.get("instruments")
    if isinstance(market, str) and not (store / "instruments" / f"{market}.txt").is_file():
        present = sorted(p.stem for p in (store / "instruments").glob("*.txt"))
        raise ConfigError(
            f"{where}: task.dataset.kwargs.handler.kwargs.instruments: universe {market!r} not in the store "
            f"({store / 'instruments'} has: {', '.join(present) or 'none'})"
        )


def _check_top_level(raw: Mapping[str, Any], where: str) -> None:
    """Refuse near misses of our top-level keys; log the others, which are ignored like ``qrun`` does."""
    known = {k.lower(): k for k in TOP_LEVEL_KEYS | QRUN_KEYS}
    ignored = []
    for key in raw:
        if key in TOP_LEVEL_KEYS or key in QRUN_KEYS:
            continue
        near = difflib.get_close_matches(str(key).lower(), list(known), n=1, cutoff=0.8)
        if near:
            raise ConfigError(
                f"{where}: unknown key '{key}' (did you mean '{known[near[0]]}'? Other top-level keys are "
                f"ignored, as qrun ignores them; rolling-calib reads: {', '.join(sorted(TOP_LEVEL_KEYS))})"
            )
        ignored.append(str(key))
    if ignored:
        _LOG.debug("%s: ignored top-level keys (YAML anchors or settings rolling-calib does not read): %s",
                   where, ", ".join(ignored))


def _month_of(value: Any) -> str | None:
    text = str(value)
    return text[:7] if len(text) >= 7 and text[:4].isdigit() and text[4] == "-" and text[5:7].isdigit() else None


def _missing_rolling(raw: Mapping[str, Any], path: Path) -> ConfigError:
    """The error for a file without ``rolling:``, with a snippet to paste (dated from the task's segments)."""
    months = {"initial_train_start": "2012-01", "start": "2015-01", "end": "2018-12"}
    try:
        segments = raw["task"]["dataset"]["kwargs"]["segments"]
        found = {"initial_train_start": _month_of(segments["train"][0]), "start": _month_of(segments["test"][0]),
                 "end": _month_of(segments["test"][1])}
        if all(found.values()):
            months = found  # type: ignore[assignment]
    except (KeyError, TypeError, IndexError):
        pass
    mode = _snippet_mode(raw)
    return ConfigError(
        f"{path}: rolling: missing section. rolling-calib runs the workflow's task on a rolling schedule, "
        "and this file gives none: add a rolling: section to it, or write a small file next to it "
        "that includes it, e.g.\n"
        f"  BASE_CONFIG_PATH: {path.name}\n"
        "  rolling:\n"
        f"    initial_train_start: {months['initial_train_start']}   # first training month\n"
        f"    start: {months['start']}                 # first evaluated month\n"
        f"    end: {months['end']}                   # last evaluated month\n"
        "    step_months: 6                 # months one model predicts before it is fine-tuned\n"
        + (f"    mode: scratch                  # {mode}\n" if mode else "")
        + "    seeds: 3"
    )


def _fill_rolling(raw: dict, qlib_init: dict, path: Path, *, qlib_rolling: bool = False) -> list[str]:
    """Fill in place the ``rolling:`` options the file and ``--set`` leave out, from the store and the segments.

    What is chosen and why (:func:`rolling_calib.config.schedule_defaults.choose_schedule`), one line each;
    ``qlib_rolling``: the file is a Qlib workflow without ``rolling:`` (Qlib's rolling is followed).
    """
    from rolling_calib.config.schedule_defaults import choose_schedule
    from rolling_calib.qlib_adapter.task_spec import import_class
    from rolling_calib.qlib_adapter.training import warm_start_kind
    from rolling_calib.qlib_adapter.zoo import segment_rows

    rolling = raw.setdefault("rolling", {})
    if not isinstance(rolling, dict):
        return []   # _parse_rolling names the type
    try:
        cls = import_class(raw["task"]["model"], "task.model", str(path))
        can_finetune, model_name = warm_start_kind(cls) is not None, cls.__qualname__
    except (KeyError, TypeError, ConfigError):
        can_finetune, model_name = None, "the model"
    required = ("initial_train_start", "start", "end")
    qlib_given = all(k in rolling for k in ("mode", "valid_months")) and ("step_days" in rolling or "step_months" in rolling)
    if all(k in rolling for k in required) and ("mode" in rolling or can_finetune is not False) and \
            (not qlib_rolling or qlib_given):
        return []
    calendar = store_calendar(qlib_init)
    if not len(calendar):
        raise _missing_rolling(raw, path)
    handler = raw["task"].get("dataset", {}).get("kwargs", {}).get("handler", {})
    universe = handler.get("kwargs", {}).get("instruments", "all") if isinstance(handler, dict) else "all"
    freq = store_freq(qlib_init)
    choice = choose_schedule(rolling, raw["task"], calendar, can_finetune=can_finetune, model_name=model_name,
                             rows=lambda lo, hi: segment_rows(universe, lo, hi, freq=freq), qlib_rolling=qlib_rolling)
    rolling.update(choice.values)
    if not all(k in rolling for k in required):
        return []
    out = []
    for note in choice.notes:   # "valid_months 2: why" -> "rolling.valid_months: 2 (chosen: why; ...)"
        key, rest = note.split(" ", 1)
        value, why = rest.split(": ", 1)
        out.append(f"rolling.{key}: {value} (chosen: {why}; --set rolling.{key}=... to change)")
    return out


def _snippet_mode(raw: Mapping[str, Any]) -> str | None:
    """Why the snippet must say ``mode: scratch`` (a model that cannot continue from the previous window), or None."""
    from rolling_calib.qlib_adapter.task_spec import import_class
    from rolling_calib.qlib_adapter.training import warm_start_kind

    try:
        cls = import_class(raw["task"]["model"], "task.model", "snippet")
    except (KeyError, TypeError, ConfigError):
        return None
    if warm_start_kind(cls) is not None:
        return None
    return f"{cls.__qualname__} can neither load_state nor finetune: it is retrained every window"


def _apply_sys_section(section: Any, path: Path) -> None:
    """qrun's ``sys:`` section: ``path`` entries and ``rel_path`` entries (relative to ``path``'s directory)
    appended to ``sys.path``, as ``qlib.cli.run.sys_config`` does (once each)."""
    import sys

    if section is None:
        return
    expect(section, dict, "sys", "a mapping with path and/or rel_path", str(path))
    reject_unknown(section, {"path", "rel_path"}, "sys.", str(path))
    entries = []
    for key, base in (("path", None), ("rel_path", path.parent)):
        value = section.get(key, [])
        for item in [value] if isinstance(value, str) else list(value):
            entries.append(str(base / item) if base is not None else str(item))
    sys.path.extend(entry for entry in entries if entry not in sys.path)



def _single_pipeline(path: Path) -> dict[str, dict[str, Any]]:
    """``pipelines:`` of a file without one: its task unchanged, named after the file's stem."""
    name = path.stem
    return {name if pipeline_name_problem(name) is None else SINGLE_PIPELINE: {}}


def read_rolling(path: str | Path) -> RollingConfig:
    """Only the validated ``rolling:`` section of an experiment file (no data needed).

    Used to size the data before the store exists (the demo builds exactly the
    months its schedule needs).
    """
    path = Path(path).resolve()
    raw, _ = _read_with_base(path)
    if "rolling" not in raw:
        raise _missing_rolling(raw, path)
    return _parse_rolling(raw["rolling"], str(path))


# --------------------------------------------------------------------------- entry point
def load_experiment(
    path: str | Path,
    *,
    overrides: Mapping[str, Any] | None = None,
    check_store: bool = True,
) -> ExperimentConfig:
    """Load, merge and validate an experiment YAML; nothing is trained here.

    Parameters
    ----------
    path : path
        The experiment file: a Qlib workflow plus ``rolling`` and optionally ``pipelines``
        (absent: one pipeline named after the file's stem) and ``compare``.
    overrides : mapping, optional
        Dotted overrides applied to the whole file before validation, e.g.
        ``{"qlib_init.provider_uri": "/data/store", "rolling.seeds": 3}``; a value set on a YAML
        anchor reaches its aliases (:func:`apply_overrides`: ``{"benchmark": "AAPL"}``).
    check_store : bool
        Also read the store's calendar (through Qlib) and check that the schedule's
        months lie inside it. Leave on except for pure syntax checks.

    Returns
    -------
    ExperimentConfig

    Raises
    ------
    ConfigError
        Naming the file and dotted key: unknown keys in our sections (other top-level
        keys are ignored, as ``qrun`` ignores them), a missing ``rolling:`` section, wrong
        types, missing data directory, months outside the store, provably unknown
        model/dataset/handler arguments.

    Notes
    -----
    Usage (needs the demo's data store; ``tests/config`` runs it on a tiny one)::

        cfg = load_experiment("workflows/demo.yaml",
                              overrides={"qlib_init.provider_uri": "demo_out/qlib_data"})
        cfg.rolling.step_months, list(cfg.pipelines)   # (3, ['wd0', 'wd1e-2'])
    """
    path = Path(path).resolve()
    where = str(path)
    raw, aliases = _read_with_base(path)
    qlib_workflow = "rolling" not in raw   # a Qlib workflow as it is: Qlib's rolling unless --set says otherwise
    if overrides:
        raw = apply_overrides(raw, overrides, source=f"{where}: overrides", aliases=aliases)
    _check_top_level(raw, where)
    for required in ("qlib_init", "task"):
        if required not in raw:
            raise ConfigError(f"{where}: {required}: missing section")
    if "rolling" not in raw and not check_store:
        raise _missing_rolling(raw, path)
    qlib_init = resolve_qlib_init(raw["qlib_init"], where)
    _apply_sys_section(raw.get("sys"), path)
    raw["task"] = resolve_module_files(raw["task"], bases=(path.parent,))
    validate_task(raw["task"], where)
    chosen = _fill_rolling(raw, qlib_init, path, qlib_rolling=qlib_workflow) if check_store else []
    rolling = _parse_rolling(raw["rolling"], where)
    if "pipelines" in raw:
        pipelines, file_pairs = _parse_pipelines(raw["pipelines"], where, path.parent)
    else:  # one configuration: the file's task as written
        pipelines, file_pairs = _single_pipeline(path), []
    pairs = file_pairs + _parse_compare(raw.get("compare", []), where)
    for i, (a, b) in enumerate(pairs):
        for name in (a, b):
            if name not in pipelines:
                raise ConfigError(f"{where}: compare[{i}]: unknown pipeline {name!r}; known: {', '.join(pipelines)}")
    pairs = list(dict.fromkeys(pairs))
    name = raw.get("experiment_name", "rolling-calib")
    expect(name, str, "experiment_name", "a string", where)
    config = ExperimentConfig(
        path=path,
        qlib_init=qlib_init,
        task=raw["task"],
        rolling=rolling,
        pipelines=pipelines,
        compare=pairs,
        experiment_name=name,
        notes=tuple(chosen),
        anchors={_dotted(use): _dotted(anchor) for anchor, uses in aliases.items() for use in uses},
    )
    for pipeline in pipelines:
        validate_task(config.pipeline_task(pipeline), where, prefix=f"pipelines.{pipeline} -> task")
        check_step_len(config.pipeline_task(pipeline), where, prefix=f"pipelines.{pipeline} -> task")
    _check_instruments(config.task, config.store_dir, where)
    if check_store:
        try:
            calendar = store_calendar(qlib_init)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - Qlib's init takes qlib_init as it is: name the section, one line
            message = " ".join(str(exc).split()) or type(exc).__name__
            raise ConfigError(f"{where}: qlib_init: Qlib's init refused it ({type(exc).__name__}: {message[:300]}); "
                              f"check qlib_init's values (region, logging_level, provider_uri, exp_manager ...)") from exc
        try:
            from rolling_calib.qlib_adapter.labels import label_purge

            rolling.windows(calendar, purge=max(label_purge(config.pipeline_task(n))[0] for n in pipelines))
        except ValueError as exc:
            raise ConfigError(
                f"{where}: {exc} (store {config.store_dir} has bars {calendar[0]} .. {calendar[-1]})"
                if len(calendar)
                else f"{where}: {exc} (store {config.store_dir} has no bars)"
            ) from exc
    return config
