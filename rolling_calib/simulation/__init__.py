"""Simulation: the harnesses that measure methods against a known truth (numpy, no stored runs).

* :mod:`rolling_calib.simulation.verdict_sim` -- simulated loss panels of two pipelines and the
  false-decision rate, coverage and power of the verdicts beside standard intervals
  (``bench/verdict_calibration.py``, ``bench/sequential_replay.py``, ``bench/drift_identifiability.py``);
* :mod:`rolling_calib.simulation.synthetic_experiments` -- the source's synthetic linear and logistic
  experiments (``rolling-calib synthetic``; docs/method.md §3.1, §3.2).

A layer above ``analysis`` and below ``reporting``: it may import ``core`` (and ``tqdm``,
``threadpoolctl`` for its progress bars and BLAS threads); nothing in ``core`` imports it.
"""
