"""The pure core: metrics, pairwise comparison and ranking, schedules, synthetic experiments, validation.

Imports numpy, pandas and scipy only: never Qlib, torch, Ray, MLflow, matplotlib or
``data_prep`` (``tests/test_layers.py`` runs the import contracts that enforce it).
"""
