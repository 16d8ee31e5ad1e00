"""Minute-bar data preparation: NYSE calendar, synthetic market, vendor ingest, Qlib binary store.

The lower layer of rolling-calib: it knows nothing of models or metrics and never imports
``rolling_calib``. It turns one-minute bars -- synthetic by default, a vendor's files
otherwise -- into a Qlib provider directory.

Public API
----------
``DEFAULT_SYMBOLS``      the 25 stocks of docs/method.md §3.3, in that order
``UNIVERSE_NAME``        ``"us25"``: ``instruments/us25.txt``
``FIELDS``               ``("open", "high", "low", "close", "volume", "vwap", "factor")``
``build_synthetic_store(out_dir, *, start, end, symbols, seed, progress) -> Path``
``session_minutes(start, end) -> pandas.DatetimeIndex``   naive NY bars 09:30..15:59 (..12:59 early close)
``init_qlib(store_dir, **kwargs)``                         open a store with Qlib

Reading a store with Qlib (pyqlib 0.9.7), as verified in the tests::

    from data_prep import build_synthetic_store, init_qlib
    d = build_synthetic_store("/tmp/store", start="2018-01-01", end="2018-03-31", symbols=["AAPL", "F"])
    init_qlib(d)   # = qlib.init(provider_uri={"1min": str(d)}, region="us",
                   #             expression_cache=None, dataset_cache=None, kernels=1)
    from qlib.data import D
    df = D.features(D.instruments("us25"), ["$close", "$volume", "$vwap"],
                    "2018-01-02", "2018-03-31 23:59", freq="1min")

* Always pass ``freq="1min"``: the store holds no daily data and Qlib serves only the keys of
  ``provider_uri``.
* ``D.features`` returns only the store calendar's minutes (no nights, holidays or minutes
  after an early close). A bare end date means its midnight: add ``23:59`` to include that day.
* Prices are back-adjusted (synthetic: generated adjusted, ``factor`` = 1.0).
"""

from typing import TYPE_CHECKING

__all__ = [
    "DEFAULT_SYMBOLS",
    "UNIVERSE_NAME",
    "FIELDS",
    "build_synthetic_store",
    "session_minutes",
    "sessions",
    "init_qlib",
]

# Lazy re-exports (PEP 562): ``import data_prep.cli`` stays light for ``rolling-calib --help``.
_EXPORTS = {
    "FIELDS": "data_prep.qlib_store",
    "UNIVERSE_NAME": "data_prep.qlib_store",
    "init_qlib": "data_prep.qlib_store",
    "DEFAULT_SYMBOLS": "data_prep.synthetic",
    "build_synthetic_store": "data_prep.synthetic",
    "session_minutes": "data_prep.trading_calendar",
    "sessions": "data_prep.trading_calendar",
}

if TYPE_CHECKING:  # pragma: no cover
    from data_prep.qlib_store import FIELDS, UNIVERSE_NAME, init_qlib
    from data_prep.synthetic import DEFAULT_SYMBOLS, build_synthetic_store
    from data_prep.trading_calendar import session_minutes, sessions


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'data_prep' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_EXPORTS))
