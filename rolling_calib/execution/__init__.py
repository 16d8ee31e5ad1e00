"""Execution: unit keys, the result store, the local and Ray executors and the runner.

Plans (pipeline, seed, window) units, trains them through the Qlib adapter, writes
each unit atomically and resumes interrupted runs. May import ``config``,
``qlib_adapter`` and ``core``.
"""
