"""A worker's cache of prepared Qlib datasets: a window's data set built once for the seeds that share it.

The seeds of one window of one pipeline train on the same data set: the unit's task differs only
in the model's seed (:func:`rolling_calib.qlib_adapter.training.unit_task` sets the seed in the
model, never in the dataset). Building it (Qlib's provider reads, the handler's expressions and
processors: Alpha158's 158 features, our minute panel's normalisation) is the same work each
time, several seconds of a unit. :class:`DatasetCache` keeps the last built data sets of this
process (an LRU of ``size`` windows, 1 by default), keyed by

* the dataset's whole config as the unit's task has it (class, handler and its kwargs with the
  window's times, segments), and
* the Qlib store it reads: ``qlib_init`` (the provider uri) and the run's data identity (the
  content fingerprint of every calendar, universe and feature file,
  :func:`rolling_calib.execution.store.data_identity`), so a changed store never hits an entry;

so consecutive seeds of a window in one worker process (the runner hands them to one worker
together: :class:`rolling_calib.execution.units.WindowKey`) build it once.

Only data sets known to keep no state between uses are shared (:data:`SHAREABLE`: Qlib's
``DatasetH`` and ``TSDatasetH`` and our ``MinuteTSDataset``, by exact class: a subclass such as
TRA's ``MTSDatasetH`` keeps a memory that training writes into), and never for a model that writes
into the frames it prepares (:data:`WRITES_PREPARED`: TabNet fills its frames' gaps in place). A build that draws from a global
random generator (``random``, NumPy, torch) is not kept either: a unit reusing it would start its
fit from other random numbers. Both rules keep every number equal to building afresh
(``tests/qlib_adapter/test_dataset_cache.py`` checks predictions of two seeds, cached and fresh).

``ROLLING_CALIB_DATASET_CACHE`` sets ``size`` for the process (``0``: never keep a data set).
Before a new data set is built the oldest ones are let go, so a worker holds at most ``size``
data sets (the one its unit uses among them).

Example
-------
>>> cache = DatasetCache(size=1)
>>> spec = {"class": "Plain", "module_path": "collections", "kwargs": {}}
>>> cache.shareable(spec), len(cache)
(False, 0)
"""

from __future__ import annotations

import copy
import os
import random
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from rolling_calib.core.fingerprint import stable_hash

__all__ = ["CACHE_ENV", "SHAREABLE", "WRITES_PREPARED", "DatasetCache", "prepared_dataset", "worker_cache"]

#: Environment variable: data sets a worker process keeps (default 1; 0 turns the cache off).
CACHE_ENV = "ROLLING_CALIB_DATASET_CACHE"
#: Dataset classes (module, class) whose instances a unit only reads: safe to share between units.
SHAREABLE: frozenset[tuple[str, str]] = frozenset({
    ("qlib.data.dataset", "DatasetH"),
    ("qlib.data.dataset", "TSDatasetH"),
    ("rolling_calib.qlib_adapter.dataset", "MinuteTSDataset"),
})

#: Model classes (module, class) that write into the frames ``dataset.prepare`` returns (``fillna(inplace=True)``):
#: their data sets are never shared.
WRITES_PREPARED: frozenset[tuple[str, str]] = frozenset({
    ("qlib.contrib.model.pytorch_tabnet", "TabnetModel"),
})


def _class_of(spec: Mapping[str, Any] | None) -> tuple[Any, Any]:
    """``(module, class)`` where the class a Qlib config names is defined (an alias path resolved), or ``(None, None)``.

    >>> _class_of({"class": "MinuteTSDataset", "module_path": "rolling_calib.dataset"})   # the old import path
    ('rolling_calib.qlib_adapter.dataset', 'MinuteTSDataset')
    """
    import importlib

    spec = spec or {}
    module, name = spec.get("module_path"), spec.get("class")
    try:
        module = importlib.import_module(module) if isinstance(module, str) else module
        cls = getattr(module, name) if isinstance(name, str) else name
        return cls.__module__, cls.__qualname__
    except Exception:  # noqa: BLE001 -- a config that names no class is never shared; building it says why
        return None, None


def _rng_states() -> tuple:
    """The global generators' states (``random``, NumPy, torch when loaded), to see whether a build drew from them."""
    import sys

    import numpy as np

    torch = sys.modules.get("torch")
    np_state = np.random.get_state()
    return (random.getstate(), (np_state[0], np_state[1].tobytes(), *np_state[2:]),
            None if torch is None else bytes(torch.get_rng_state().numpy().tobytes()))


class DatasetCache:
    """An LRU of prepared datasets of this process (module docstring).

    Parameters
    ----------
    size : int
        Data sets kept (0: none).

    Attributes
    ----------
    hits, builds : int
        Data sets reused and built through this cache.
    """

    def __init__(self, *, size: int = 1) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"size: expected an integer >= 0, found {size!r}")
        self.size = size
        self._entries: OrderedDict[str, Any] = OrderedDict()
        self.hits = self.builds = 0

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def shareable(spec: Mapping[str, Any], model: Mapping[str, Any] | None = None) -> bool:
        """Whether a dataset of this config may be shared between units of ``model``.

        Its class is one of :data:`SHAREABLE` and the model's is not one of :data:`WRITES_PREPARED`.
        """
        return _class_of(spec) in SHAREABLE and _class_of(model) not in WRITES_PREPARED

    @staticmethod
    def key(spec: Mapping[str, Any], *, qlib_init: Mapping[str, Any], data: Mapping[str, Any] | None) -> str:
        """The entry's key: the dataset config, the ``qlib.init`` arguments and the data identity, hashed."""
        return stable_hash({"dataset": spec, "qlib_init": qlib_init, "data": data})

    def get(self, spec: Mapping[str, Any], *, qlib_init: Mapping[str, Any],
            data: Mapping[str, Any] | None, model: Mapping[str, Any] | None = None) -> tuple[Any, bool]:
        """``(dataset, reused)``: the kept data set of this config, or a new one built (and kept when it may be).

        ``data`` None (no data identity known) builds afresh and keeps nothing; ``model``: the
        unit's model config (:meth:`shareable`).
        """
        from qlib.utils import init_instance_by_config

        keep = self.size > 0 and data is not None and self.shareable(spec, model)
        key = self.key(spec, qlib_init=qlib_init, data=data) if keep else None
        if key is not None and key in self._entries:
            self._entries.move_to_end(key)
            self.hits += 1
            return self._entries[key], True
        if keep:
            while len(self._entries) >= self.size:   # let the oldest go first: at most `size` held at once
                self._entries.popitem(last=False)
        before = _rng_states() if keep else None
        dataset = init_instance_by_config(copy.deepcopy(dict(spec)))
        self.builds += 1
        if keep and _rng_states() == before:   # a build that drew random numbers is never reused
            self._entries[key] = dataset
        return dataset, False

    def clear(self) -> None:
        """Let every kept data set go."""
        self._entries.clear()


_WORKER_CACHE: DatasetCache | None = None


def worker_cache() -> DatasetCache:
    """This process's cache (size from :data:`CACHE_ENV`, default 1), made on first use."""
    global _WORKER_CACHE
    raw = os.environ.get(CACHE_ENV, "1").strip() or "1"
    if not raw.isdigit():
        raise ValueError(f"{CACHE_ENV}: expected an integer >= 0 (data sets a worker keeps), found {raw!r}")
    size = int(raw)
    if _WORKER_CACHE is None or _WORKER_CACHE.size != size:
        _WORKER_CACHE = DatasetCache(size=size)
    return _WORKER_CACHE


def prepared_dataset(spec: Mapping[str, Any], *, qlib_init: Mapping[str, Any], data: Mapping[str, Any] | None,
                     model: Mapping[str, Any] | None = None) -> tuple[Any, bool]:
    """``(dataset, reused)`` through this process's cache (:func:`worker_cache`) for a unit of ``model``."""
    return worker_cache().get(spec, qlib_init=qlib_init, data=data, model=model)
