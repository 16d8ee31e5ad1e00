"""The Qlib adapter: the only layer that imports qlib or torch.

Qlib initialisation and calendar, workflow-YAML helpers that need Qlib (base-config
merging, class import and signature checks), task building for one rolling window,
unit training through Qlib's ``Model`` API, and our Qlib classes (``MinuteBarHandler``,
``MinuteTSDataset``, ``RollingLSTM``). May import ``rolling_calib.core`` and ``data_prep``.
"""
