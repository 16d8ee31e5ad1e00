"""Experiment configuration: a Qlib workflow YAML plus ``rolling:``, ``pipelines:`` and ``compare:``.

Reads and validates experiment files, applies ``--set`` overrides and expands sweep grids.
May import ``rolling_calib.qlib_adapter`` and ``rolling_calib.core``.
"""

from rolling_calib.config.experiment import (  # noqa: F401  (the package's public names)
    ConfigError,
    ExperimentConfig,
    RollingConfig,
    apply_overrides,
    load_experiment,
    load_yaml,
    read_rolling,
    stable_hash,
    validate_task,
)
