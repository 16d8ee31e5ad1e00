"""Doctest fixtures: the names that docstring examples of ``rolling_calib`` may use.

``Resampling`` is :class:`rolling_calib.core.resampling.Resampling` and ``Question``
:class:`rolling_calib.core.question.Question`; ``example_store`` is a small result store of synthetic predictions written through the
real store API (no training), so the scoring and report examples run in CI.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def _example_store(tmp_path_factory) -> Path:
    sys.path.insert(0, str(Path(__file__).parent / "tests"))
    from runner_helpers import write_fake_store

    store = tmp_path_factory.mktemp("example") / "store"
    write_fake_store(store, pipelines={"wd0": {"bias_sd": 1.0}, "wd1e-3": {"bias_sd": 0.5}}, seeds=3)
    return store


@pytest.fixture(autouse=True)
def _doctest_names(request, doctest_namespace):
    """Only doctests get the example store (and pay for building it)."""
    if isinstance(request.node, pytest.DoctestItem):
        from rolling_calib.core.question import Question
        from rolling_calib.core.resampling import Resampling

        doctest_namespace["example_store"] = request.getfixturevalue("_example_store")
        doctest_namespace["Resampling"] = Resampling   # the bootstrap settings examples pass
        doctest_namespace["Question"] = Question       # what the examples' verdicts answer
