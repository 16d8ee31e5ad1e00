"""Tracking: logging a result store to MLflow (SQLite by default). The only layer that imports mlflow."""

from rolling_calib.tracking.mlflow_log import (  # noqa: F401
    TrackingSummary,
    default_tracking_uri,
    flatten_task_params,
    log_store,
    track_store,
)
