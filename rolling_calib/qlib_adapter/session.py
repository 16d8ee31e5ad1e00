"""Qlib initialisation, the store calendar and the ``qlib_init`` section, read through Qlib."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from rolling_calib.core.fingerprint import stable_hash
from rolling_calib.core.validation import ConfigError, expect, reject_unknown
from rolling_calib.qlib_adapter.qlib_compat import qlib_init_keys

__all__ = ["FREQ", "FREQS", "init_qlib_once", "resolve_qlib_init", "store_calendar", "store_freq", "store_path"]

FREQ = "1min"
#: Store frequencies the runner reads: minute bars (``calendars/1min.txt``) or daily bars (``calendars/day.txt``).
FREQS = ("1min", "day")
_QLIB_STATE: dict[str, str] = {}


def resolve_qlib_init(section: Any, where: str) -> dict:
    """Validate a ``qlib_init`` section against Qlib's own settings and fill our defaults."""
    expect(section, dict, "qlib_init", "a mapping of qlib.init arguments", where)
    reject_unknown(section, qlib_init_keys(), "qlib_init.", where)
    if "provider_uri" not in section:
        raise ConfigError(f"{where}: qlib_init.provider_uri: missing (expected a Qlib store directory: "
                          f"minute bars, calendars/{FREQ}.txt, or daily bars, calendars/day.txt)")
    uri = section["provider_uri"]
    if isinstance(uri, dict) and len(uri) > 1:  # Qlib's multi-frequency provider_uri: {day: DIR, 1min: DIR}
        reject_unknown(uri, set(FREQS), "qlib_init.provider_uri.", where)
        if "day" not in uri:
            raise ConfigError(f"{where}: qlib_init.provider_uri: several stores need a 'day' store (the schedule's "
                              f"calendar); found {', '.join(map(str, uri))}")
        stores = {freq: str(_checked_store(path, freq, where)) for freq, path in uri.items()}
        stores = {"day": stores.pop("day"), **stores}  # the schedule's store first (see store_freq)
        return _with_defaults(section, stores)
    freq = None
    if isinstance(uri, dict):
        reject_unknown(uri, set(FREQS), "qlib_init.provider_uri.", where)
        if len(uri) != 1:
            raise ConfigError(f"{where}: qlib_init.provider_uri: expected one store keyed by its frequency "
                              f"({' or '.join(FREQS)}), or a day store and a minute store, found none")
        freq, uri = next(iter(uri.items()))
    store = _checked_store(uri, freq, where)
    if freq is None:  # a plain path: the store's own calendar says its frequency
        freq = next(f for f in FREQS if (store / "calendars" / f"{f}.txt").is_file())
    return _with_defaults(section, {freq: str(store)})


def _with_defaults(section: Mapping[str, Any], stores: dict[str, str]) -> dict:
    out = dict(section)
    out["provider_uri"] = stores
    out.setdefault("region", "us")
    out.setdefault("expression_cache", None)
    out.setdefault("dataset_cache", None)
    out.setdefault("kernels", 1)
    return out


def _checked_store(uri: Any, freq: str | None, where: str) -> Path:
    """A committed Qlib store directory holding ``calendars/<freq>.txt`` (any frequency when ``freq`` is None)."""
    expect(uri, str, "qlib_init.provider_uri" + (f".{freq}" if freq else ""), "a directory path", where)
    store = Path(uri).expanduser().resolve()
    from data_prep.qlib_store import check_committed

    try:  # an interrupted ingest / build: refused with the store named (a missing store is reported below)
        check_committed(store, require_store=False)
    except ValueError as exc:
        raise ConfigError(f"{where}: qlib_init.provider_uri: {exc}") from exc
    if not store.is_dir():
        raise ConfigError(
            f"{where}: qlib_init.provider_uri: data directory not found: {store} "
            "(build it with 'rolling-calib data synth' or 'rolling-calib data ingest')"
        )
    present = [f for f in FREQS if (store / "calendars" / f"{f}.txt").is_file()]
    if freq is None and not present:
        raise ConfigError(f"{where}: qlib_init.provider_uri: {store} is not a Qlib store "
                          f"(no calendars/{FREQ}.txt nor calendars/day.txt)")
    if freq is not None and freq not in present:
        raise ConfigError(
            f"{where}: qlib_init.provider_uri.{freq}: {store} is not a Qlib "
            f"{'minute' if freq == FREQ else 'daily'} store (no calendars/{freq}.txt"
            + (f"; it has calendars/{present[0]}.txt: key it by {present[0]!r}" if present else "") + ")"
        )
    return store



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



def store_freq(qlib_init: Mapping[str, Any]) -> str:
    """Frequency of a resolved ``qlib_init``'s store: ``"1min"`` or ``"day"`` (its ``provider_uri`` key).

    With several stores (Qlib's multi-frequency ``provider_uri``: ``{day: DIR, 1min: DIR}``) the
    ``day`` store's (listed first by :func:`resolve_qlib_init`): it gives the schedule's calendar.
    """
    uri = qlib_init["provider_uri"]
    return next(iter(uri)) if isinstance(uri, Mapping) else FREQ


def store_path(qlib_init: Mapping[str, Any]) -> Path:
    """The store directory of a resolved ``qlib_init`` (the first one when ``provider_uri`` maps frequencies to stores)."""
    uri = qlib_init["provider_uri"]
    return Path(next(iter(uri.values())) if isinstance(uri, Mapping) else uri)


def store_calendar(qlib_init: Mapping[str, Any]) -> pd.DatetimeIndex:
    """The store's bars (minutes or sessions), read through Qlib's calendar provider (``D.calendar``)."""
    from qlib.data import D

    init_qlib_once(qlib_init)
    return pd.DatetimeIndex(D.calendar(freq=store_freq(qlib_init)))


