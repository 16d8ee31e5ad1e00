"""Qlib's model zoo under the rolling schedule: what each model class needs from the runner.

Qlib's benchmark workflows (``examples/benchmarks/*/workflow_config*.yaml``) name some thirty
model classes that differ in how they take a seed, a thread count and a segment to predict.
Everything here is read from the classes themselves (signatures, the library their ``**kwargs``
go to, their source), never from a list of model names, so a new Qlib model follows the same
rules:

* **seed** (:func:`model_traits`): a named ``seed`` parameter (every torch model, ``RollingLSTM``),
  else, for a model whose ``**kwargs`` go to a boosting library, that library's seed parameter
  (LightGBM ``seed``, XGBoost ``seed``, CatBoost ``random_seed``; :data:`BOOSTERS`), else none
  (``seed_param: null``: e.g. ``LinearModel``, deterministic). The unit's seed is written there
  (and over any alias the task writes, e.g. LightGBM's ``random_state``).
* **threads**: every unit runs ``torch.set_num_threads(threads)``; the booster's thread
  parameter (``num_threads``, ``nthread``, ``thread_count`` and aliases the task writes) and a
  named ``n_threads`` get the unit's threads; a torch model's ``n_jobs`` (DataLoader worker
  processes) is capped at it. What was applied is returned and kept in the unit's sidecar.
* **predict** (:func:`predict_segment`): ``predict(dataset, segment=...)`` where the model takes a
  segment; otherwise (Qlib's ``_ts`` models, TCTS) ``predict(dataset)`` as ``qrun`` calls it, on a
  view of the dataset whose ``test`` segment is the one wanted.
* **segments** (:func:`window_segments`): train/valid/test follow the schedule; any other segment
  the dataset declares (TabNet's ``pretrain``, ``pretrain_validation``) follows the one of
  train/valid/test whose written dates it repeats; one that repeats none is refused.
* **pretrained base** (:func:`pretrained_base`): a model that copies a pretrained LSTM/GRU into
  itself from ``model_path`` (GATs, IGMTF, HIST) gets one trained by the unit first, on its own
  window, when the file is missing (:func:`pretrain_base`).
* **plan-time checks** (:func:`check_zoo_task`, :func:`check_validation_rows`,
  :func:`check_booster_params`, :func:`check_model_keywords`): files a model loads or downloads, a validation segment with fewer
  rows than one batch where the model's validation pass drops incomplete batches, and booster
  parameters the library rejects on this machine, model keywords the model or its library would ignore.
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import io
import os
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_prep.atomic import atomic_write_bytes
from rolling_calib.core.validation import ConfigError
from rolling_calib.qlib_adapter.task_spec import accepted_kwargs, import_class

__all__ = ["BOOSTERS", "BOOSTER_DEFAULTS", "ZOO_RULES_VERSION", "ModelTraits", "apply_unit_settings",
           "check_booster_params", "check_model_keywords", "check_validation_rows", "check_zoo_task",
           "extra_segment_rule", "file_reads", "library_params", "partial_batch_evidence", "saved_params",
           "segment_rows", "set_unit_threads", "stopping_point", "unknown_model_keys",
           "model_traits", "predict_segment", "pretrain_base", "pretrained_base", "segment_view",
           "window_segments"]

#: Boosting libraries a Qlib model hands its ``**kwargs`` to: their seed and thread parameters,
#: the canonical name first, then the aliases the library also reads.
BOOSTERS: dict[str, dict[str, tuple[str, ...]]] = {
    "lightgbm": {"seed": ("seed", "random_seed", "random_state"),
                 "threads": ("num_threads", "num_thread", "nthread", "nthreads", "n_jobs")},
    "xgboost": {"seed": ("seed", "random_state"), "threads": ("nthread", "n_jobs")},
    "catboost": {"seed": ("random_seed", "random_state"), "threads": ("thread_count",)},
}
#: Settings a unit gives a booster unless the task writes them: CatBoost writes its training logs
#: into ``./catboost_info`` (outside the store) unless told not to.
BOOSTER_DEFAULTS: dict[str, dict[str, Any]] = {"catboost": {"allow_writing_files": False}}
#: Version of the rules above (what a unit writes into a Qlib model's task: seed and thread arguments,
#: torch threads, scratch files). Part of the pipeline hash of Qlib's models, so a store trained
#: under other rules is recomputed, not mixed in. 1: the unit's seed in every model that has one, and
#: the unit's threads everywhere (before: only a named ``seed``, and torch's default threads).
ZOO_RULES_VERSION = 1
#: Segments the schedule sets in every window; any other is an *extra* segment (:func:`window_segments`).
ROLLED_SEGMENTS = ("train", "valid", "test")


def _dotted(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def booster_library(cls: type) -> str | None:
    """The boosting library (a key of :data:`BOOSTERS`) a model's ``**kwargs`` go to, or ``None``.

    Read from the class: its ``__init__`` chain ends in a ``**kwargs`` sink
    (:func:`~rolling_calib.qlib_adapter.task_spec.accepted_kwargs`) and its module imports the library.
    """
    if accepted_kwargs(cls).open_via is None:
        return None
    module = sys.modules.get(cls.__module__)
    for value in vars(module).values() if module is not None else ():
        name = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
        root = name.split(".")[0] if isinstance(name, str) else None
        if root in BOOSTERS:
            return root
    return None


def _imports_torch(cls: type) -> bool:
    module = sys.modules.get(cls.__module__)
    return module is not None and any(inspect.ismodule(v) and v.__name__ == "torch" for v in vars(module).values())


@dataclass(frozen=True)
class ModelTraits:
    """How the runner drives one model class (read from the class, see the module docstring).

    Attributes
    ----------
    name : str
        Dotted class name.
    seed_param : str or None
        The constructor argument that carries the unit's seed (``None``: the model takes none).
    seed_aliases : tuple of str
        Other names of the same setting, overwritten too when a task writes them.
    thread_params : tuple of str
        Constructor arguments set to the unit's thread count (the first always; aliases when written).
    loader_param : str or None
        ``"n_jobs"`` of Qlib's torch models (DataLoader worker processes), capped at the threads.
    takes_segment : bool
        Whether ``predict`` takes a ``segment`` argument.
    library : str or None
        The boosting library its ``**kwargs`` go to (:func:`booster_library`).
    """

    name: str
    seed_param: str | None
    seed_aliases: tuple[str, ...] = ()
    thread_params: tuple[str, ...] = ()
    loader_param: str | None = None
    takes_segment: bool = True
    library: str | None = None


@functools.cache
def model_traits(cls: type) -> ModelTraits:
    """The :class:`ModelTraits` of a model class.

    >>> class Net:
    ...     def __init__(self, hidden=8, seed=None, n_threads=1): ...
    ...     def predict(self, dataset): ...
    >>> t = model_traits(Net)
    >>> t.seed_param, t.thread_params, t.takes_segment
    ('seed', ('n_threads',), False)
    """
    named = accepted_kwargs(cls).params
    library = booster_library(cls)
    seeds: tuple[str, ...] = ("seed",) if "seed" in named else BOOSTERS[library]["seed"] if library else ()
    threads = tuple(n for n in ("n_threads",) if n in named) + (BOOSTERS[library]["threads"] if library else ())
    loader = "n_jobs" if "n_jobs" in named and _imports_torch(cls) else None
    predict = getattr(cls, "predict", None)
    try:
        takes = predict is not None and "segment" in inspect.signature(predict).parameters
    except (TypeError, ValueError):
        takes = True
    return ModelTraits(_dotted(cls), seeds[0] if seeds else None, seeds[1:], threads, loader, takes, library)


def apply_unit_settings(model_spec: dict, *, seed: int, threads: int) -> dict:
    """Write the unit's seed and threads into a model spec's kwargs (in place); what was applied.

    Returns ``{"seed_param": name or None, "threads": {"torch": threads, <kwarg>: value, ...}}``
    (the unit's sidecar keeps it). ``torch`` is what :func:`set_unit_threads` applies.

    >>> spec = {"class": "LGBModel", "module_path": "qlib.contrib.model.gbdt", "kwargs": {"num_threads": 20}}
    >>> apply_unit_settings(spec, seed=3, threads=2)
    {'seed_param': 'seed', 'threads': {'torch': 2, 'num_threads': 2}}
    >>> spec["kwargs"]
    {'num_threads': 2, 'seed': 3}
    """
    traits = model_traits(import_class(dict(model_spec), "task.model", "unit"))
    kwargs = model_spec.setdefault("kwargs", {})
    if traits.seed_param is not None:
        kwargs[traits.seed_param] = int(seed)
        for alias in traits.seed_aliases:
            if alias in kwargs:
                kwargs[alias] = int(seed)
    applied: dict[str, int] = {"torch": int(threads)}
    for i, name in enumerate(traits.thread_params):
        if i == 0 or name in kwargs:
            kwargs[name] = applied[name] = int(threads)
    if traits.loader_param is not None and traits.loader_param in kwargs:
        kwargs[traits.loader_param] = applied[traits.loader_param] = min(int(kwargs[traits.loader_param]), int(threads))
    for name, value in BOOSTER_DEFAULTS.get(traits.library or "", {}).items():
        kwargs.setdefault(name, value)
    return {"seed_param": traits.seed_param, "threads": applied}


def set_unit_threads(threads: int) -> None:
    """``torch.set_num_threads(threads)``: every unit's torch work (any model) uses the unit's threads."""
    import torch

    torch.set_num_threads(int(threads))


# --------------------------------------------------------------------------- predicting a segment
def segment_view(dataset: Any, segment: str) -> Any:
    """A shallow copy of a Qlib dataset whose ``test`` segment is ``segment`` (the data are shared)."""
    view = copy.copy(dataset)
    view.segments = {**dataset.segments, "test": dataset.segments[segment]}
    return view


def predict_segment(model: Any, dataset: Any, segment: str) -> Any:
    """``model``'s predictions of one segment, called as ``qrun`` calls the model.

    ``predict(dataset, segment=segment)`` where ``predict`` takes a segment; else
    ``predict(dataset)`` (which predicts ``test``), on :func:`segment_view` for another segment.
    """
    if model_traits(type(model)).takes_segment:
        return model.predict(dataset, segment=segment)
    return model.predict(dataset if segment == "test" else segment_view(dataset, segment))


# --------------------------------------------------------------------------- segments
def _span_key(span: Any) -> tuple[str, str] | None:
    import pandas as pd

    try:
        start, end = span
        return (pd.Timestamp(start).isoformat(), pd.Timestamp(end).isoformat())
    except (TypeError, ValueError):
        return None


def extra_segment_rule(written: Mapping[str, Any], where: str) -> dict[str, str]:
    """``{extra segment: the rolled segment it follows}`` for the dataset's written ``segments``.

    An extra segment (not train/valid/test) follows the rolled segment whose written dates it
    repeats exactly (TabNet: ``pretrain`` = train's dates, ``pretrain_validation`` = valid's);
    one that repeats none is refused, naming it.

    >>> extra_segment_rule({"pretrain": ["2008-01-01", "2014-12-31"], "train": ["2008-01-01", "2014-12-31"],
    ...                     "test": ["2017-01-01", "2020-08-01"]}, "f.yaml")
    {'pretrain': 'train'}
    """
    rolled = {name: _span_key(written[name]) for name in ROLLED_SEGMENTS if name in written}
    out = {}
    for name, span in written.items():
        if name in ROLLED_SEGMENTS:
            continue
        key = _span_key(span)
        follows = [r for r, k in rolled.items() if key is not None and k == key]
        if not follows:
            raise ConfigError(
                f"{where}: task.dataset.kwargs.segments.{name}: an extra segment must repeat the written dates of "
                f"one of {', '.join(rolled) or 'train/valid/test'} (it then follows that segment in every window); "
                f"found {span!r}, which repeats none: remove it or give it the dates of the segment it stands for")
        out[name] = follows[0]
    return out


def window_segments(written: Mapping[str, Any], spans: Mapping[str, tuple[str, str] | None], where: str) -> dict:
    """One window's ``segments``: ``spans`` (train/valid/test of the window) plus the extra segments.

    ``spans`` maps train/valid/test to ``(first bar, last bar)`` (``valid``: ``None`` when the
    schedule has no validation); each extra segment takes the span of the segment it follows
    (:func:`extra_segment_rule`).
    """
    out = {name: list(span) for name, span in spans.items() if span is not None}
    for name, follows in extra_segment_rule(written, where).items():
        if spans.get(follows) is None:
            raise ConfigError(f"{where}: task.dataset.kwargs.segments.{name}: follows '{follows}', which this schedule "
                              f"does not have (rolling.valid_months: 0): set valid_months >= 1")
        out[name] = list(spans[follows])
    return out


# --------------------------------------------------------------------------- files a model reads
def _class_sources(cls: type) -> list[tuple[str, ast.AST]]:
    """``(class name, parsed body)`` of ``cls`` and its bases outside ``object`` (source readable only)."""
    out = []
    for klass in cls.__mro__:
        if klass is object:
            break
        try:
            out.append((klass.__qualname__, ast.parse(textwrap.dedent(inspect.getsource(klass)))))
        except (OSError, TypeError, SyntaxError):
            continue
    return out


def _self_attr(node: ast.AST) -> str | None:
    return node.attr if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
        and node.value.id == "self" else None


def _path_uses(cls: type) -> tuple[dict[str, str], set[str]]:
    """``({attribute: "downloads" | "loads"}, names written by torch.save)`` read from the class source."""
    out: dict[str, str] = {}
    written: set[str] = set()
    for _, tree in _class_sources(cls):
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and _downloads(node):
                for sub in ast.walk(node.test):
                    if isinstance(sub, ast.Call) and ast.unparse(sub.func).endswith("path.exists") and sub.args:
                        name = _self_attr(sub.args[0])
                        if name:
                            out[name] = "downloads"
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("torch.load", "np.load", "numpy.load"):
                name = _self_attr(node.args[0]) if node.args else None
                if name:
                    out.setdefault(name, "loads")
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.save" and len(node.args) > 1:
                target = node.args[1]
                written.add(_self_attr(target) or (target.id if isinstance(target, ast.Name) else ""))
    return out, written


@functools.cache
def file_reads(cls: type) -> dict[str, str]:
    """``{attribute: "downloads" | "loads"}`` of the path attributes a model class reads in its methods.

    ``"loads"``: ``torch.load(self.X)`` / ``np.load(self.X)`` of a file the class does not write
    itself (TabNet's ``pretrain_file`` is saved by its own pretraining first); ``"downloads"``: a
    download (``urlretrieve``/``urlopen``) guarded by ``os.path.exists(self.X)`` (HIST's
    ``stock2concept``). Qlib's models store each such argument under its own name
    (``self.model_path = model_path``).
    """
    reads, written = _path_uses(cls)
    return {name: how for name, how in reads.items() if how == "downloads" or name not in written}


@functools.cache
def saved_params(cls: type) -> tuple[str, ...]:
    """Constructor arguments naming a file the model writes itself with ``torch.save`` (TabNet's ``pretrain_file``).

    Left unset, Qlib puts such a file in ``~/tmp``; the runner points it beside the unit instead.
    """
    named = accepted_kwargs(cls).params
    return tuple(sorted(name for name in _path_uses(cls)[1] if name in named))


def _downloads(node: ast.If) -> bool:
    return any(isinstance(sub, ast.Call) and ast.unparse(sub.func).split(".")[-1] in ("urlretrieve", "urlopen")
               for stmt in node.body for sub in ast.walk(stmt))


def _download_urls(cls: type) -> list[str]:
    return sorted({node.value for _, tree in _class_sources(cls) for node in ast.walk(tree)
                   if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("http")})


def _kwarg(cls: type, kwargs: Mapping[str, Any], name: str) -> Any:
    if name in kwargs:
        return kwargs[name]
    param = accepted_kwargs(cls).params.get(name)
    return None if param is None or param.default is inspect.Parameter.empty else param.default


# --------------------------------------------------------------------------- pretrained base models
#: Qlib's base RNNs a model copies from ``model_path`` (its ``base_model`` argument), per dataset kind:
#: (module, class) of the Qlib model that trains it.
_BASE_TRAINERS = {
    ("LSTM", False): ("qlib.contrib.model.pytorch_lstm", "LSTM"),
    ("GRU", False): ("qlib.contrib.model.pytorch_gru", "GRU"),
    ("LSTM", True): ("qlib.contrib.model.pytorch_lstm_ts", "LSTM"),
    ("GRU", True): ("qlib.contrib.model.pytorch_gru_ts", "GRU"),
}
#: Arguments a pretrained base model shares with the model that loads it (when both take them).
#: (Not ``metric``: IGMTF's ``ic`` is one Qlib's LSTM does not know; the base stops early on its loss.)
_BASE_SHARED = ("d_feat", "hidden_size", "num_layers", "dropout", "n_epochs", "lr", "batch_size",
                "early_stop", "loss", "optimizer", "GPU", "n_jobs")


def pretrained_base(task: Mapping[str, Any], where: str = "task") -> dict | None:
    """The base model a unit must pretrain for ``task``, or ``None``.

    A model that copies a pretrained LSTM/GRU from ``model_path`` (it reads ``torch.load(self.model_path)``
    and takes ``base_model``: GATs, IGMTF, HIST) needs that file. When ``model_path`` names no
    existing file, each unit first trains Qlib's own model of that kind on its window (what Qlib's
    benchmark README asks: train the LSTM benchmark, then point ``model_path`` at it). Returns
    ``{"model": spec of the base trainer, "base_model": "LSTM"}`` (seed, threads and path are the unit's).
    """
    model_cls = import_class(dict(task["model"]), "task.model", where)
    kwargs = task["model"].get("kwargs", {})
    if file_reads(model_cls).get("model_path") != "loads" or "base_model" not in accepted_kwargs(model_cls).params:
        return None
    path = _kwarg(model_cls, kwargs, "model_path")
    if path is None or os.path.isfile(os.path.expanduser(str(path))):
        return None
    base = _kwarg(model_cls, kwargs, "base_model")
    dataset_cls = import_class(dict(task["dataset"]), "task.dataset", where)
    from qlib.data.dataset import TSDatasetH

    trainer = _BASE_TRAINERS.get((base, issubclass(dataset_cls, TSDatasetH)))
    if trainer is None:
        raise ConfigError(f"{where}: task.model.kwargs.model_path: {path} does not exist, and base_model {base!r} is "
                          f"not one rolling-calib can pretrain (LSTM, GRU): give an existing file")
    trainer_cls = import_class({"module_path": trainer[0], "class": trainer[1]}, "base model", where)
    taken = accepted_kwargs(trainer_cls).params
    shared = {k: kwargs[k] for k in _BASE_SHARED if k in kwargs and k in taken}
    return {"base_model": base, "model_path": str(path),
            "model": {"class": trainer[1], "module_path": trainer[0], "kwargs": shared}}


def pretrain_base(base: Mapping[str, Any], dataset: Any, *, seed: int, threads: int, path: os.PathLike) -> dict:
    """Train a unit's base model (:func:`pretrained_base`) on its dataset; save its network's ``state_dict``.

    The trainer gets the unit's seed and threads (:func:`apply_unit_settings`) and fits on the
    window's train/valid segments as the unit's own model does; the first ``torch.nn.Module``
    attribute of the fitted model (``lstm_model``, ``GRU_model``, ...) is saved to ``path``.
    Returns the sidecar entry (class, file, settings).
    """
    import torch
    from qlib.utils import init_instance_by_config

    spec = copy.deepcopy(dict(base["model"]))
    settings = apply_unit_settings(spec, seed=seed, threads=threads)
    trainer = init_instance_by_config(spec)
    scratch = Path(path).with_name(f".{Path(path).name}.fit.tmp")  # Qlib's best-params file, not in ~/tmp
    try:
        if "save_path" in inspect.signature(trainer.fit).parameters:
            trainer.fit(dataset, save_path=str(scratch))
        else:
            trainer.fit(dataset)
    finally:
        scratch.unlink(missing_ok=True)
    network = next(v for v in vars(trainer).values() if isinstance(v, torch.nn.Module))
    buffer = io.BytesIO()  # serialised in memory: the bytes do not depend on the (temporary) file name
    torch.save(network.state_dict(), buffer)
    atomic_write_bytes(path, buffer.getvalue())
    return {"class": f"{spec['module_path']}.{spec['class']}", "kwargs": spec["kwargs"], "file": os.fspath(path),
            "replaces": base["model_path"], **settings}


# --------------------------------------------------------------------------- plan-time checks
def check_zoo_task(task: Mapping[str, Any], where: str) -> list[str]:
    """Refuse, before training, a model that would fail for want of a file; returns notes to print.

    * a path argument the model downloads into when missing (HIST's ``stock2concept``): refused,
      with the URL it would fetch and the fix;
    * a path argument it loads (``np.load``/``torch.load``): refused when the file is missing,
      except ``model_path`` of a model whose base the unit can pretrain (:func:`pretrained_base`),
      which is noted instead;
    * the dataset's extra segments (:func:`extra_segment_rule`), noted.
    """
    model_cls = import_class(dict(task["model"]), "task.model", where)
    kwargs = task["model"].get("kwargs", {})
    name = _dotted(model_cls)
    base = pretrained_base(task, where)
    problems, notes = [], []
    for attr, how in sorted(file_reads(model_cls).items()):
        value = _kwarg(model_cls, kwargs, attr)
        if value is None or os.path.isfile(os.path.expanduser(str(value))):
            continue
        if attr == "model_path" and base is not None:
            notes.append(f"{name}: model_path {value} does not exist: each unit first trains "
                         f"{base['model']['module_path']}.{base['model']['class']} on its own window (same seed) "
                         f"and loads it (saved beside the unit's checkpoint)")
        elif how == "downloads":
            urls = ", ".join(_download_urls(model_cls)) or "the internet"
            problems.append(f"task.model.kwargs.{attr}: {value} does not exist, and {name}.fit downloads it from "
                            f"{urls} at fit time (data of another market); give a file for your universe")
        else:
            problems.append(f"task.model.kwargs.{attr}: {value} does not exist ({name} loads it at fit time); "
                            f"give an existing file")
    if problems:
        raise ConfigError(f"{where}: {name} cannot run as written:\n  " + "\n  ".join(problems))
    segments = task["dataset"].get("kwargs", {}).get("segments") or {}
    for extra, follows in extra_segment_rule(segments, where).items():
        notes.append(f"segment {extra} follows {follows} in every window (its written dates are {follows}'s)")
    return notes


# --------------------------------------------------------------------------- validation rows vs one batch
@functools.cache
def partial_batch_evidence(cls: type) -> str | None:
    """Where a model's validation pass drops a batch shorter than ``batch_size`` (read from its source), or ``None``.

    Either ``test_epoch`` breaks out of its batch loop on ``... < self.batch_size`` (Qlib's
    ``_ts``-less torch models, TabNet), or ``fit`` builds the validation ``DataLoader`` with
    ``drop_last=True`` and ``batch_size`` (Qlib's ``_ts`` models). With fewer validation rows than
    one batch such a model scores no batch: it keeps its untrained weights or fails on
    ``best_param`` after training.
    """
    for owner, tree in _class_sources(cls):
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            for node in ast.walk(fn):
                if fn.name == "test_epoch" and isinstance(node, ast.If) and "self.batch_size" in ast.unparse(node.test) \
                        and any(isinstance(stmt, ast.Break) for stmt in node.body):
                    return f"{owner}.test_epoch skips a batch shorter than batch_size ('{ast.unparse(node.test)}')"
                if fn.name == "fit" and isinstance(node, ast.Call) and ast.unparse(node.func).endswith("DataLoader") \
                        and node.args and "valid" in ast.unparse(node.args[0]):
                    keywords = {k.arg: ast.unparse(k.value) for k in node.keywords}
                    if keywords.get("drop_last") == "True" and "batch_size" in keywords:
                        return f"{owner}.fit's validation DataLoader drops an incomplete batch (drop_last=True)"
    return None


def segment_rows(instruments: Any, start: Any, end: Any, *, freq: str) -> int | None:
    """At most how many (bar, instrument) rows a segment has: each instrument's listed bars in ``[start, end]``.

    Read through Qlib (``D.list_instruments``, ``D.calendar``; Qlib initialised). ``None`` for a
    universe given as a filter config.
    """
    import numpy as np
    import pandas as pd
    from qlib.data import D

    if isinstance(instruments, str):
        spans = D.list_instruments(D.instruments(instruments), start_time=start, end_time=end, freq=freq)
    elif isinstance(instruments, (list, tuple)):
        every = D.list_instruments(D.instruments("all"), start_time=start, end_time=end, freq=freq)
        spans = {name: every.get(name, []) for name in instruments}
    else:
        return None
    bars = pd.DatetimeIndex(D.calendar(start_time=start, end_time=end, freq=freq))
    return int(sum(np.count_nonzero((bars >= pd.Timestamp(s)) & (bars <= pd.Timestamp(e)))
                   for listed in spans.values() for s, e in listed))


def _batch_problem(spec: Mapping[str, Any], rows: int, where: str) -> tuple[str, int] | None:
    cls = import_class(dict(spec), "task.model", where)
    batch = _kwarg(cls, spec.get("kwargs", {}), "batch_size")
    evidence = partial_batch_evidence(cls)
    if not isinstance(batch, int) or evidence is None or rows >= batch:
        return None
    return f"{_dotted(cls)}: {evidence}", batch


def check_validation_rows(task: Mapping[str, Any], windows: Any, *, freq: str, where: str) -> None:
    """Refuse, before training, a validation segment with fewer rows than one of the model's batches.

    Only for a model whose validation pass drops an incomplete batch (:func:`partial_batch_evidence`),
    and its pretrained base (:func:`pretrained_base`). Rows are counted per window from the store
    (:func:`segment_rows`: an upper bound, labels not yet dropped). The message gives both fixes: more
    validation months, or a batch no larger than the rows.
    """
    handler = task["dataset"].get("kwargs", {}).get("handler", {})
    instruments = handler.get("kwargs", {}).get("instruments", "all") if isinstance(handler, dict) else "all"
    base = pretrained_base(task, where)
    specs = [task["model"]] + ([base["model"]] if base is not None else [])
    for window in windows:
        if window.valid is None:
            continue
        rows = segment_rows(instruments, window.valid.start, window.valid.end, freq=freq)
        problems = [p for spec in specs if rows is not None and (p := _batch_problem(spec, rows, where))]
        if not problems:
            continue
        evidence, batch = problems[0]
        start, end = window.valid.start, window.valid.end
        months = (end.year - start.year) * 12 + end.month - start.month + 1
        need = -(-batch * months // max(rows, 1))
        raise ConfigError(
            f"{where}: window {window.index}: the validation segment {start.date()}..{end.date()} "
            f"has at most {rows} rows ({months} month(s)), fewer than one batch (batch_size {batch}); {evidence}, so early "
            f"stopping would score no batch and the model would fail after training or keep untrained weights. Fix: "
            f"rolling.valid_months >= {need}, or task.model.kwargs.batch_size <= {rows}")


# --------------------------------------------------------------------------- booster parameters, tried before training
def _params_of(model: Any, seed_param: str) -> dict | None:
    """The parameter dict a Qlib booster model hands its library (``LGBModel.params``, ``XGBModel._params``, ...)."""
    return next((v for v in vars(model).values() if isinstance(v, dict) and seed_param in v), None)


def _one_round(library: str, params: dict) -> None:
    """Train ``library`` for one round on 32 random rows with ``params`` (raises what the library raises)."""
    import numpy as np

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 3)), rng.normal(size=32)
    if library == "lightgbm":
        import lightgbm as lgb

        lgb.train({**params, "verbosity": -1}, lgb.Dataset(x, label=y), num_boost_round=1)
    elif library == "xgboost":
        import xgboost as xgb

        xgb.train({**params, "verbosity": 0}, xgb.DMatrix(x, label=y), num_boost_round=1)
    elif library == "catboost":
        from catboost import CatBoost, Pool
        from catboost.utils import get_gpu_device_count

        task_type = "GPU" if get_gpu_device_count() > 0 else "CPU"  # as Qlib's CatBoostModel.fit chooses
        CatBoost({**params, "iterations": 1, "task_type": task_type, "verbose": False,
                  "allow_writing_files": False}).fit(Pool(x, label=y))


def check_booster_params(task: Mapping[str, Any], where: str) -> None:
    """Refuse, before training, booster parameters the library rejects on this machine.

    The Qlib model is built from the task (with a unit's seed and one thread) and its library
    trains one round on 32 random rows with the model's own parameters: what it rejects there
    (CatBoost's ``bootstrap_type: Poisson``, which Qlib's CatBoost workflows write, is GPU-only and
    fails on CPU) would otherwise fail every unit after its data were loaded.
    """
    from qlib.utils import init_instance_by_config

    spec = copy.deepcopy(dict(task["model"]))
    traits = model_traits(import_class(spec, "task.model", where))
    if traits.library is None or traits.seed_param is None:
        return
    apply_unit_settings(spec, seed=0, threads=1)
    params = _params_of(init_instance_by_config(spec), traits.seed_param)
    if params is None:
        return
    try:
        _one_round(traits.library, params)
    except Exception as exc:  # noqa: BLE001 -- whatever the library raises is the reason
        text = " ".join(str(exc).split())
        raise ConfigError(f"{where}: task.model.kwargs: {traits.library} rejects the parameters of {traits.name} on "
                          f"this machine (one round on random rows, as each unit would train): {type(exc).__name__}: "
                          f"{text}. Fix: change the parameter it names (e.g. CatBoost's Poisson bootstrap needs a GPU: "
                          f"bootstrap_type: Bernoulli on CPU)") from exc


# --------------------------------------------------------------------------- model keywords, checked before training
#: Names of each boosting library's parameters, read from the installed library (:func:`library_params`).
_XGB_UNUSED = "are not used"


def library_params(library: str) -> frozenset[str]:
    """Every parameter name (aliases included) the installed boosting ``library`` knows.

    LightGBM: its own alias table (``lightgbm.basic._ConfigAliases``, dumped from the C++ library);
    CatBoost: the explicit parameters of ``CatBoostRegressor`` and ``CatBoostClassifier`` (aliases
    included); XGBoost: the parameters of its scikit-learn wrapper (``get_xgb_params``), which is
    only the list a "did you mean" draws from: what XGBoost ignores is what its training says it
    ignores (:func:`unknown_model_keys`).

    >>> "learning_rate" in library_params("lightgbm") and "eta" in library_params("lightgbm")
    True
    """
    if library == "lightgbm":
        from lightgbm.basic import _ConfigAliases

        table = _ConfigAliases._get_all_param_aliases()
        return frozenset(table) | frozenset(a for aliases in table.values() for a in aliases)
    if library == "catboost":
        from catboost import CatBoostClassifier, CatBoostRegressor

        return frozenset(n for c in (CatBoostRegressor, CatBoostClassifier)
                         for n in inspect.signature(c.__init__).parameters if n not in ("self", "kwargs"))
    if library == "xgboost":
        import xgboost as xgb

        return frozenset(xgb.XGBRegressor().get_xgb_params()) | {"eta", "nthread", "seed", "lambda", "alpha"}
    raise ValueError(f"library: expected one of {', '.join(BOOSTERS)}, found {library!r}")


def _xgboost_unused(params: Mapping[str, Any]) -> list[str]:
    """The keys of ``params`` XGBoost says it does not use, from one training round on random rows."""
    import re
    import warnings

    import numpy as np
    import xgboost as xgb

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 3)), rng.normal(size=32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        xgb.train({**params, "verbosity": 1}, xgb.DMatrix(x, label=y), num_boost_round=1)
    text = " ".join(str(w.message) for w in caught)
    found = re.findall(r"Parameters: \{(.*?)\} " + _XGB_UNUSED, text, flags=re.S)
    return [k.strip().strip('"') for group in found for k in group.split(",") if k.strip().strip('"') in params]


def unknown_model_keys(model_spec: Mapping[str, Any], where: str = "task.model") -> list[tuple[str, str, str | None]]:
    """The keys of a model spec's ``kwargs`` the model (or the library it hands them to) would ignore.

    A model with a strict signature refuses unknown names itself (a ``TypeError`` at build time).
    One whose ``**kwargs`` go to a boosting library (:func:`booster_library`) is checked against the
    library's parameters (:func:`library_params`; XGBoost: the keys one training round reports as not
    used); one that imports torch and swallows ``**kwargs`` (Qlib's zoo: ``LSTM``, ``ALSTM``, ...) is
    checked against its constructor's explicit parameters. Other open signatures are not checked.

    Returns
    -------
    list of (key, what ignores it, closest known name or None)

    Examples
    --------
    >>> spec = {"class": "LGBModel", "module_path": "qlib.contrib.model.gbdt", "kwargs": {"learning_rat": 0.05}}
    >>> unknown_model_keys(spec)
    [('learning_rat', 'lightgbm', 'learning_rate')]
    """
    import difflib

    cls = import_class(model_spec, "task.model", where)
    accepted = accepted_kwargs(cls)
    if accepted.open_via is None:
        return []
    named = set(accepted.params) | set(accepted.consumed)
    extra = {k: v for k, v in (model_spec.get("kwargs") or {}).items() if k not in named}
    if not extra:
        return []
    library = booster_library(cls)
    if library == "xgboost":
        unused = set(_xgboost_unused(extra))
        unknown, known, what = [k for k in extra if k in unused], library_params(library) | named, library
    elif library is not None:
        known, what = library_params(library) | named, library
        unknown = [k for k in extra if k not in known]
    elif _imports_torch(cls):
        known, what = named, f"{cls.__name__}.__init__"
        unknown = list(extra)
    else:
        return []
    lower = {k.lower(): k for k in known}
    out = []
    for key in unknown:
        near = difflib.get_close_matches(str(key).lower(), list(lower), n=1, cutoff=0.6)
        out.append((key, what, lower[near[0]] if near else None))
    return out


def check_model_keywords(task: Mapping[str, Any], where: str) -> list[str]:
    """Refuse, before training, a model keyword the model or its library would silently ignore.

    An ignored key close to a known parameter name (a typo: LightGBM ``learning_rat``, Qlib's LSTM
    ``hiden_size``) is refused; one close to none is noted, since Qlib's own benchmark files write
    some (``n_estimators`` for XGBoost, which ``xgb.train`` ignores; ``rnn_type`` for ALSTM).

    Returns
    -------
    list of str
        Notes for the ignored keys that were not refused.

    Raises
    ------
    ConfigError
        Naming the first refused key, what ignores it and the closest known name (:func:`unknown_model_keys`).
    """
    bad = unknown_model_keys(task["model"], where)
    refused = [b for b in bad if b[2] is not None]
    if refused:
        key, what, near = refused[0]
        more = f" (also: {', '.join(k for k, _, _ in refused[1:])})" if len(refused) > 1 else ""
        hint = f"did you mean '{near}'?"
        raise ConfigError(f"{where}: task.model.kwargs.{key}: {what} has no parameter '{key}' ({hint}); it would be "
                          f"ignored and the model trained without it{more}")
    return [f"task.model.kwargs.{key}: {what} takes no such parameter: it is ignored "
            f"(as under qrun)"
            for key, what, _ in bad]


def stopping_point(model: Any) -> str | None:
    """Where a fitted booster's training stopped, in words, or ``None`` when the model does not say.

    Read from the library's own model object that Qlib's booster models keep in ``model.model``:
    LightGBM's and XGBoost's ``best_iteration`` (early stopping) and rounds trained, CatBoost's
    ``get_best_iteration()`` and tree count. Qlib's torch models do not keep their best epoch.
    """
    booster = getattr(model, "model", None)
    if booster is None:
        return None
    root = type(booster).__module__.split(".")[0]
    try:
        if root == "lightgbm":
            best, kept = int(booster.best_iteration), int(booster.current_iteration())
            return f"boosting round {best} (early stopping's best)" if best > 0 else \
                f"boosting round {kept} (no early stopping)"
        if root == "xgboost":
            trained = int(booster.num_boosted_rounds())
            best = booster.attr("best_iteration")
            return (f"boosting round {int(best) + 1} of {trained} trained (early stopping's best)" if best is not None
                    else f"boosting round {trained} (no early stopping)")
        if root == "catboost":
            best, trained = booster.get_best_iteration(), int(booster.tree_count_)
            return f"boosting round {int(best) + 1} of {trained} kept" if best is not None else \
                f"boosting round {trained}"
    except (AttributeError, TypeError, ValueError):
        return None
    return None
