"""Old import path of the minute dataset classes (workflow YAMLs name ``module_path: rolling_calib.dataset``)."""

from rolling_calib.qlib_adapter.dataset import *  # noqa: F401,F403
from rolling_calib.qlib_adapter.dataset import MinuteBarHandler, MinuteTSDataset  # noqa: F401
