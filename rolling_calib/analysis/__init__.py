"""Analysis: scoring a result store (QL, CQL per run and period), comparisons and sweeps.

Pure computations on stored predictions; may import ``execution`` (to read the store),
``config`` and ``core``, never qlib, torch or matplotlib.
"""
