"""The pure core: metrics, pairwise comparison and ranking, verdicts, schedules, validation, the result store's
file names (``store_layout``).

Imports numpy, pandas and scipy, and three small declared dependencies: ``arch`` (the verdicts' block
length, HAC variance and model confidence set), ``tabulate`` (``tables``) and ``filelock``
(``file_lock``); never Qlib, torch, Ray, MLflow, matplotlib, polars, tqdm, threadpoolctl or
``data_prep`` (``tests/test_layers.py`` runs the import contracts that enforce it). The simulation
harnesses that drive the verdicts live in :mod:`rolling_calib.simulation`.
"""
