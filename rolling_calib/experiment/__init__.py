"""Orchestration: the one path from a config to results (plan, execute, score, track, report).

Used by ``run``, ``sweep`` and ``demo``. May import every layer below it.
"""
