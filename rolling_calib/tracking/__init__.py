"""Tracking: logging a result store to MLflow (SQLite by default). The only layer that imports mlflow."""

from rolling_calib.tracking.mlflow_log import (  # noqa: F401
    TrackingOutcome,
    TrackingRepairWarning,
    TrackingSummary,
    default_tracking_uri,
    config_params,
    flatten_config,
    log_store,
    safe_log_store,
    track_store,
)
from rolling_calib.tracking.sqlite_db import (  # noqa: F401
    DbRepair,
    NewerSchemaError,
    TrackingBusyError,
    repair_tracking_db,
)
