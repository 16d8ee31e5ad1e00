"""Qlib initialisation, the store calendar and the ``qlib_init`` section, read through Qlib."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from rolling_calib.core.fingerprint import stable_hash
from rolling_calib.core.validation import ConfigError, expect, reject_unknown

__all__ = ["FREQ", "init_qlib_once", "resolve_qlib_init", "store_calendar"]

FREQ = "1min"
_QLIB_STATE: dict[str, str] = {}


def resolve_qlib_init(section: Any, where: str) -> dict:
    """Validate a ``qlib_init`` section against Qlib's own settings and fill our defaults."""
    from qlib.config import MODE_CONF, _default_config, _default_region_config

    expect(section, dict, "qlib_init", "a mapping of qlib.init arguments", where)
    allowed = set(_default_config) | set(MODE_CONF["client"]) | {"clear_mem_cache", "skip_if_reg"}
    allowed |= set().union(*(set(v) for v in _default_region_config.values()))
    reject_unknown(section, allowed, "qlib_init.", where)
    if "provider_uri" not in section:
        raise ConfigError(f"{where}: qlib_init.provider_uri: missing (expected the minute store directory)")
    uri = section["provider_uri"]
    if isinstance(uri, dict):
        reject_unknown(uri, {FREQ}, "qlib_init.provider_uri.", where)
        if FREQ not in uri:
            raise ConfigError(f"{where}: qlib_init.provider_uri.{FREQ}: missing (expected the minute store directory)")
        uri = uri[FREQ]
    expect(uri, str, "qlib_init.provider_uri", "a directory path", where)
    store = Path(uri).expanduser().resolve()
    from data_prep.qlib_store import check_committed

    try:  # an interrupted ingest / build: refused with the store named (a missing store is reported below)
        check_committed(store, require_store=False)
    except ValueError as exc:
        raise ConfigError(f"{where}: qlib_init.provider_uri: {exc}") from exc
    if not store.is_dir():
        raise ConfigError(
            f"{where}: qlib_init.provider_uri: data directory not found: {store} "
            "(build it with 'rolling-calib data synthetic' or 'rolling-calib data ingest')"
        )
    if not (store / "calendars" / f"{FREQ}.txt").is_file():
        raise ConfigError(
            f"{where}: qlib_init.provider_uri: {store} is not a Qlib minute store (no calendars/{FREQ}.txt)"
        )
    out = dict(section)
    out["provider_uri"] = {FREQ: str(store)}
    out.setdefault("region", "us")
    out.setdefault("expression_cache", None)
    out.setdefault("dataset_cache", None)
    out.setdefault("kernels", 1)
    return out



def init_qlib_once(qlib_init: Mapping[str, Any]) -> None:
    """``qlib.init(**qlib_init)`` unless this process already did so with the same arguments.

    Qlib's configuration is process-global: if other code re-initialised Qlib on another
    store in between, the provider no longer matches and Qlib is initialised again.
    """
    import qlib
    from qlib.config import C

    key = stable_hash(dict(qlib_init))
    if _QLIB_STATE.get("key") == key and C.get("provider_uri") == qlib_init.get("provider_uri"):
        return
    qlib.init(**copy.deepcopy(dict(qlib_init)))
    _QLIB_STATE["key"] = key



def store_calendar(qlib_init: Mapping[str, Any]) -> pd.DatetimeIndex:
    """The store's minute bars, read through Qlib's calendar provider (``D.calendar``)."""
    from qlib.data import D

    init_qlib_once(qlib_init)
    return pd.DatetimeIndex(D.calendar(freq=FREQ))


