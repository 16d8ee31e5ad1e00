"""rolling-calib: decide honestly whether one model configuration beats another.

Layers (imports point downwards only):

* ``rolling_calib.core.metrics``, ``rolling_calib.core.pairwise`` -- pure numpy functions; no Qlib, no torch.
* ``rolling_calib.core.synthetic_experiments`` -- the source's synthetic experiments (numpy).
* ``data_prep`` -- calendar, synthetic market, vendor ingest, Qlib binary store.
* ``rolling_calib.qlib_adapter.model`` / ``rolling_calib.qlib_adapter.dataset`` -- the Qlib-compatible LSTM and minute dataset.
* ``rolling_calib.execution.runner`` and the executors -- the only layer that drives Qlib workflows.
* ``rolling_calib.cli`` -- the command line.
"""

__version__ = "0.1.0"
