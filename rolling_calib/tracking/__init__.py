"""Tracking: logging a result store to MLflow (SQLite by default), and re-pointing a moved store's database.

The names below are imported on first use (PEP 562), so a command that only needs
:mod:`rolling_calib.tracking.relocation` (``relocate``, ``ls``, each store a command opens) does not
import the scoring, the comparison and MLflow with :mod:`rolling_calib.tracking.mlflow_log`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TrackingOutcome": "mlflow_log", "TrackingRepairWarning": "mlflow_log", "TrackingSummary": "mlflow_log",
    "default_tracking_uri": "mlflow_log", "config_params": "mlflow_log", "flatten_config": "mlflow_log",
    "log_store": "mlflow_log", "safe_log_store": "mlflow_log", "track_store": "mlflow_log",
    "DbRepair": "sqlite_db", "NewerSchemaError": "sqlite_db", "TrackingBusyError": "sqlite_db",
    "repair_tracking_db": "sqlite_db",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
