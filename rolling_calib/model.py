"""Old import path of :class:`RollingLSTM` (workflow YAMLs name ``module_path: rolling_calib.model``)."""

from rolling_calib.qlib_adapter.model import *  # noqa: F401,F403
from rolling_calib.qlib_adapter.model import RollingLSTM  # noqa: F401
