"""rolling-calib: decide honestly whether one model configuration beats another.

Layers, top to bottom (imports point downwards only; ``pyproject.toml`` [tool.importlinter] declares
them and ``tests/test_layers.py`` checks them):

* ``rolling_calib.cli`` -- the command line;
* ``rolling_calib.experiment`` -- the one path from a config to results (plan, run, score, track, report);
* ``rolling_calib.reporting`` (the only layer that imports matplotlib) and ``rolling_calib.tracking``
  (the only layer that imports MLflow);
* ``rolling_calib.simulation`` -- the simulation harnesses: verdict calibration and the synthetic experiments;
* ``rolling_calib.analysis`` -- scoring a result store, verdicts, diagnostics, sweeps;
* ``rolling_calib.execution`` -- the result store, the runner and the local and Ray executors (the only
  layer that imports Ray);
* ``rolling_calib.config`` -- experiment files (a Qlib workflow YAML plus ``rolling:``, ``pipelines:``);
* ``rolling_calib.qlib_adapter`` -- the only layer that imports Qlib and torch (the minute dataset,
  the LSTM, training through Qlib's model API);
* ``rolling_calib.core`` -- the pure core: metrics, verdicts, schedules, validation (numpy, pandas, scipy).

``data_prep`` (calendar, synthetic market, vendor ingest, Qlib binary store) stands beside them and
imports nothing of ``rolling_calib``. ``rolling_calib.model`` and ``rolling_calib.dataset`` are the
old import paths that workflow YAMLs name.
"""

__version__ = "0.1.0"
