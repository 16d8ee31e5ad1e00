"""Qlib's learn processors on the minute label: ``CSRankNorm``, ``CSZScoreNorm``, ``DropnaLabel``, ...

Qlib's benchmark workflows train on a label that a *learn processor* normalised per date
(``learn_processors: [DropnaLabel, {class: CSRankNorm, kwargs: {fields_group: label}}]``):
the handler keeps the raw label in its raw data (``DK_R``) and the processed one in its learn
data (``DK_L``), and a model reads ``dataset.prepare("train", data_key=DK_L)``.
:class:`~rolling_calib.qlib_adapter.dataset.MinuteBarHandler` takes the same
``learn_processors`` list, built exactly as Qlib's ``DataHandlerLP`` builds it
(``init_instance_by_config`` against ``qlib.data.dataset.processor``: a class name, a
``{class, kwargs}`` or ``{class, module_path, kwargs}`` config, or a ``Processor`` instance).

**Only label processors.** A processor is accepted when it acts on the ``label`` group alone
(``fields_group: label``) and fits nothing. Anything else is refused before any training
(:func:`processor_problem` says why): a feature processor (our features are normalised by
the handler's own window norm, fitted on ``fit_start_time..fit_end_time``), a processor without
``fields_group`` (it acts on every column), and a processor that fits parameters
(``ZScoreNorm``, ``RobustZScoreNorm``, ``MinMaxNorm``: the runner sets a window's fit span on
the handler, never inside a processor).

**Per minute bar.** Qlib's cross-sectional processors group by ``datetime``; on a minute frame
a datetime is one minute bar, so the cross-section is the instruments' labels of that minute
(25 stocks at METHOD 3.3 scale), not a day::

    CSRankNorm:             y'_{t,i} = 3.46 (rank_t(y_{t,i}) / n_t - 0.5)     (average ranks of ties)
    CSZScoreNorm:           y'_{t,i} = (y_{t,i} - mean_t(y)) / std_t(y)           (std with ddof 1)
    CSZScoreNorm(robust):   y'_{t,i} = clip((y_{t,i} - med_t) / MAD_t / 1.4826, -3, 3)

over the ``n_t`` instruments with a label at minute ``t`` (a ``NaN`` label is left out and
stays ``NaN``).

**How it is computed.** Qlib's processors run a pandas ``groupby("datetime")`` over the frame;
on 25 stocks x one year of minutes (2.4 M rows) ``CSRankNorm`` takes about 1.3 s and
``CSZScoreNorm`` (a Python function per group) about 90 s -- 10 minutes at seven years. So
``CSRankNorm``, ``CSZScoreNorm`` (both methods) and ``DropnaLabel``/``DropnaProcessor`` run as
vectorised kernels on the ``(minutes, instruments)`` label array (:func:`cs_rank_norm`,
:func:`cs_zscore_norm`, :func:`cs_robust_zscore_norm`; tests check them against Qlib's
processors on the handler's own frame); any other accepted label processor runs as Qlib's own
code on the label frame ``(datetime, instrument) x [("label", "LABEL0")]``.

A processor never adds a label: a bar without a raw label (the last ``h`` minutes of a
session, a missing bar) has none under any data key, whatever a processor (``Fillna``)
writes there. A row a processor drops (``DropnaLabel``) or leaves undefined (``CSZScoreNorm``
of a minute with one labelled instrument) has a ``NaN`` learned label and is no training sample.

Example
-------
>>> procs = build_label_processors([{"class": "CSRankNorm", "kwargs": {"fields_group": "label"}}])
>>> y = np.array([[10.0, -5.0], [20.0, np.nan], [30.0, 1.0]], dtype=np.float32)   # 3 stocks x 2 minutes
>>> out = apply_label_processors(y, pd.date_range("2018-01-02 09:30", periods=2, freq="min"), ["A", "B", "C"], procs)
>>> out.dtype, out.astype(float).round(3).tolist()        # per minute: ranks 1..3 of 3, then 1..2 of 2
(dtype('float32'), [[-0.577, 0.0], [0.577, nan], [1.73, 1.73]])
>>> build_label_processors([{"class": "RobustZScoreNorm", "kwargs": {"fit_start_time": None,
...                          "fit_end_time": None, "fields_group": "feature"}}])
Traceback (most recent call last):
...
ValueError: learn_processors: expected Qlib label processors (fields_group 'label', nothing fitted: CSRankNorm, CSZScoreNorm, DropnaLabel, ...), found [0] RobustZScoreNorm with fields_group 'feature': a feature processor (MinuteBarHandler normalises its features itself, with its window norm fitted on fit_start_time..fit_end_time)
"""

from __future__ import annotations

import hashlib
import pickle
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd
import scipy.stats
from qlib.data.dataset import processor as processor_module
from qlib.utils import init_instance_by_config
from qlib.utils.data import robust_zscore, zscore

from rolling_calib.core.validation import Constraint, check, describe_found

__all__ = [
    "LABEL_GROUP",
    "LabelProcessors",
    "NoProcessors",
    "apply_label_processors",
    "build_label_processors",
    "cs_rank_norm",
    "cs_robust_zscore_norm",
    "cs_zscore_norm",
    "processor_problem",
    "processors_key",
]

#: Qlib's column group of the label (``fields_group: label``).
LABEL_GROUP = "label"
_Processor = processor_module.Processor
_RANK_SCALE = 3.46  # Qlib's CSRankNorm: towards unit std
_MAD_TO_STD = 1.4826  # Qlib's robust_zscore


# --------------------------------------------------------------------------- building and checking
def _build(config: Any) -> _Processor:
    """One processor, exactly as Qlib's ``DataHandlerLP.__init__`` builds it (``module_path`` or Qlib's module)."""
    module = None if isinstance(config, dict) and "module_path" in config else processor_module
    return init_instance_by_config(config, module, accept_types=_Processor)


def _groups(proc: Any) -> list | None:
    """The processor's ``fields_group`` as a list (``None``: it has no such attribute)."""
    if not hasattr(proc, "fields_group"):
        return None
    group = proc.fields_group
    return list(group) if isinstance(group, (list, tuple)) else [group]


def processor_problem(proc: Any) -> str | None:
    """Why ``proc`` cannot be a learn processor of the minute handler, or ``None`` when it can.

    >>> processor_problem(processor_module.CSRankNorm(fields_group="label")) is None
    True
    >>> print(processor_problem(processor_module.CSRankNorm()))
    CSRankNorm with fields_group None acts on every column: features included (MinuteBarHandler normalises its features itself, with its window norm fitted on fit_start_time..fit_end_time)
    """
    name = type(proc).__name__
    if not isinstance(proc, _Processor):
        return f"{name} is not a qlib.data.dataset.processor.Processor"
    own_norm = "MinuteBarHandler normalises its features itself, with its window norm fitted on fit_start_time..fit_end_time"
    groups = _groups(proc)
    if groups is None:
        return f"{name} has no fields_group: it acts on every column, features included ({own_norm})"
    if None in groups:
        return f"{name} with fields_group None acts on every column: features included ({own_norm})"
    if not groups or any(g != LABEL_GROUP for g in groups):
        return f"{name} with fields_group {proc.fields_group!r}: a feature processor ({own_norm})"
    if type(proc).fit is not _Processor.fit:
        return (f"{name} fits parameters (Processor.fit): the runner sets each window's fit span on the handler, "
                "never inside a processor; use a cross-sectional one (CSRankNorm, CSZScoreNorm)")
    return None


def _first_problem(configs: Any) -> tuple[list[_Processor], str | None]:
    """The processors ``configs`` build, and the first problem (``"[i] ..."``) or ``None``."""
    if not isinstance(configs, (list, tuple)):
        return [], describe_found(configs)
    built = []
    for i, config in enumerate(configs):
        try:
            proc = _build(config)
        except Exception as exc:  # Qlib raises AttributeError, TypeError, ImportError, NotImplementedError ...
            return built, f"[{i}] {config!r}, which Qlib cannot build ({type(exc).__name__}: {exc})"
        problem = processor_problem(proc)
        if problem is not None:
            return built, f"[{i}] {problem}"
        built.append(proc)
    return built, None


@dataclass(frozen=True)
class LabelProcessors(Constraint):
    """A list of Qlib processor configs (or instances) that act on the label alone and fit nothing.

    The declared constraint of ``MinuteBarHandler(learn_processors=...)``: the config layer checks
    it when a workflow is loaded, the handler again when it is built. A rejected list is shown with
    the first offending entry and the reason (:func:`processor_problem`).

    >>> from rolling_calib.core.validation import explain
    >>> print(explain(["CSRnkNorm"], LabelProcessors()))  # doctest: +ELLIPSIS
    expected Qlib label processors (...), found [0] 'CSRnkNorm', which Qlib cannot build (AttributeError: module 'qlib.data.dataset.processor' has no attribute 'CSRnkNorm')
    """

    def accepts(self, value: Any) -> bool:
        return _first_problem(value)[1] is None

    def describe(self) -> str:
        return "Qlib label processors (fields_group 'label', nothing fitted: CSRankNorm, CSZScoreNorm, DropnaLabel, ...)"

    def found(self, value: Any) -> str:
        return _first_problem(value)[1] or describe_found(value)


@dataclass(frozen=True)
class NoProcessors(Constraint):
    """An empty processor list: ``infer_processors`` / ``shared_processors`` of the minute handler.

    >>> from rolling_calib.core.validation import explain
    >>> print(explain([{"class": "Fillna", "kwargs": {"fields_group": "feature"}}], NoProcessors()))  # doctest: +ELLIPSIS
    expected no processors (MinuteBarHandler normalises ...; label processors go in learn_processors), found [Fillna]
    """

    def accepts(self, value: Any) -> bool:
        return isinstance(value, (list, tuple)) and len(value) == 0

    def describe(self) -> str:
        return ("no processors (MinuteBarHandler normalises its features itself, with its window norm fitted on "
                "fit_start_time..fit_end_time; label processors go in learn_processors)")

    def found(self, value: Any) -> str:
        if not isinstance(value, (list, tuple)):
            return describe_found(value)
        return "[" + ", ".join(_name(c) for c in value) + "]"


def _name(config: Any) -> str:
    """The class a processor config names (``{class: ...}``, a class name, an instance)."""
    if isinstance(config, dict):
        return str(config.get("class", config))
    return config if isinstance(config, str) else type(config).__name__


def build_label_processors(configs: Sequence[Any], *, name: str = "learn_processors") -> list[_Processor]:
    """Qlib processor instances of ``configs``; ``ValueError`` naming the first one that is not a label processor."""
    built, problem = _first_problem(configs)
    if problem is not None:
        check(name, configs, LabelProcessors())  # raises, in the one message format
    return built


def processors_key(processors: Sequence[_Processor]) -> str | None:
    """A digest of the processors' pickled state (a cache key); ``None`` when one cannot be pickled."""
    try:
        return hashlib.sha256(pickle.dumps(list(processors), protocol=4)).hexdigest()
    except Exception:  # a processor holding a lambda, a lock, ...: no caching
        return None


# --------------------------------------------------------------------------- kernels on (minutes, instruments)
def _quiet(func: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """Empty or one-value rows give NaN without NumPy's warnings (as Qlib's pandas code does)."""

    def wrapped(grid: np.ndarray) -> np.ndarray:
        with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            return func(grid)

    wrapped.__doc__, wrapped.__name__ = func.__doc__, func.__name__
    return wrapped


@_quiet
def cs_rank_norm(grid: np.ndarray) -> np.ndarray:
    """Qlib's ``CSRankNorm`` per row: ``3.46 * (rank / n - 0.5)``, average ranks, NaN left out.

    ``grid`` is ``(minutes, instruments)`` float64; ``n`` counts the row's non-NaN values
    (pandas' ``rank(pct=True)``).

    >>> cs_rank_norm(np.array([[3.0, 1.0, np.nan, 1.0]])).round(3).tolist()    # ranks 3, 1.5, -, 1.5 of 3
    [[1.73, 0.0, nan, 0.0]]
    """
    ranks = scipy.stats.rankdata(grid, axis=1, nan_policy="omit")
    t = ranks / (~np.isnan(grid)).sum(axis=1, keepdims=True)
    t -= 0.5
    t *= _RANK_SCALE
    return t


@_quiet
def cs_zscore_norm(grid: np.ndarray) -> np.ndarray:
    """Qlib's ``CSZScoreNorm`` (``qlib.utils.data.zscore``) per row: ``(x - mean) / std``, ``std`` with ddof 1.

    >>> cs_zscore_norm(np.array([[1.0, 2.0, 3.0, np.nan], [5.0, np.nan, np.nan, np.nan]])).tolist()
    [[-1.0, 0.0, 1.0, nan], [nan, nan, nan, nan]]
    """
    return (grid - np.nanmean(grid, axis=1, keepdims=True)) / np.nanstd(grid, axis=1, ddof=1, keepdims=True)


@_quiet
def cs_robust_zscore_norm(grid: np.ndarray) -> np.ndarray:
    """Qlib's ``CSZScoreNorm(method="robust")`` (``qlib.utils.data.robust_zscore``) per row.

    ``clip((x - median) / MAD / 1.4826, -3, 3)`` with ``MAD = median |x - median|``.

    >>> cs_robust_zscore_norm(np.array([[0.0, 1.0, 2.0, 10.0]])).round(3).tolist()
    [[-1.012, -0.337, 0.337, 3.0]]
    """
    x = grid - np.nanmedian(grid, axis=1, keepdims=True)
    mad = np.nanmedian(np.abs(x), axis=1, keepdims=True)
    return np.clip(x / mad / _MAD_TO_STD, -3, 3)


def _kernel(proc: _Processor) -> Callable[[np.ndarray], np.ndarray] | None:
    """The vectorised equivalent of ``proc`` (exact Qlib classes only: a subclass may change ``__call__``)."""
    kind = type(proc)
    if kind is processor_module.CSRankNorm:
        return cs_rank_norm
    if kind is processor_module.CSZScoreNorm and proc.zscore_func is zscore:
        return cs_zscore_norm
    if kind is processor_module.CSZScoreNorm and proc.zscore_func is robust_zscore:
        return cs_robust_zscore_norm
    if kind in (processor_module.DropnaLabel, processor_module.DropnaProcessor):
        return lambda grid: grid  # a dropped row is a NaN label here: no sample either way
    return None


def _run_qlib(proc: _Processor, grid: np.ndarray, times: pd.DatetimeIndex, instruments: Sequence[str],
              label_name: str) -> np.ndarray:
    """``proc`` run as Qlib's own code on the label frame; rows it drops come back as NaN."""
    index = pd.MultiIndex.from_product([times, pd.Index(list(instruments))], names=["datetime", "instrument"])
    column = (LABEL_GROUP, label_name)
    frame = pd.DataFrame(grid.reshape(-1, 1), index=index, columns=pd.MultiIndex.from_tuples([column]))
    out = proc(frame)
    if not isinstance(out, pd.DataFrame) or column not in out.columns:
        raise ValueError(f"learn_processors: {type(proc).__name__} returned no {column} column; expected the "
                         "label frame back with its label processed")
    values = out[column].reindex(index).to_numpy(dtype=np.float64, na_value=np.nan)
    return values.reshape(grid.shape)


def apply_label_processors(label: np.ndarray, times: pd.DatetimeIndex, instruments: Sequence[str],
                           processors: Sequence[_Processor], *, label_name: str = "LABEL0") -> np.ndarray:
    """The learn-processed label: ``processors`` applied in order to the ``(datetime, instrument)`` label.

    Parameters
    ----------
    label : ndarray, shape (n_instruments, n_minutes)
        Raw label (NaN where undefined), a panel's layout.
    times : DatetimeIndex
        The minutes (columns of ``label``).
    instruments : sequence of str
        The instruments (rows of ``label``).
    processors : sequence of qlib Processor
        Accepted label processors (:func:`build_label_processors`), applied in order.
    label_name : str
        The label column's name in Qlib's frame.

    Returns
    -------
    ndarray of float32, shape (n_instruments, n_minutes)
        ``NaN`` wherever ``label`` is NaN (a processor never adds a label) or a processor left
        the value undefined or dropped its row.
    """
    label = np.asarray(label)
    if label.shape != (len(instruments), len(times)):
        raise ValueError(f"label: expected shape {(len(instruments), len(times))} (instruments, minutes), "
                         f"found {label.shape}")
    grid = label.T.astype(np.float64)  # (minutes, instruments): Qlib's datetime-major rows
    for proc in processors:
        kernel = _kernel(proc)
        grid = kernel(grid) if kernel is not None else _run_qlib(proc, grid, times, instruments, label_name)
    out = grid.T.astype(np.float32)
    out[np.isnan(label)] = np.nan
    return out
