"""Fixtures shared across the test packages.

Tests mirror the package layout (``tests/core``, ``tests/config``, ``tests/execution``, ...).
Being a rootdir conftest, this file also puts ``tests/`` on ``sys.path``, so every test module
imports the shared ``*_helpers`` modules that live here.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """A real Qlib minute store of the synthetic market: AAPL, F, MSFT, January to April 2018 (seed 3).

    Built once per test session; tests that change data copy it first.
    """
    from data_prep import build_synthetic_store

    return build_synthetic_store(tmp_path_factory.mktemp("tiny_data"), start="2018-01-01", end="2018-04-30",
                                 symbols=["AAPL", "F", "MSFT"], seed=3)


@pytest.fixture(scope="session")
def shared_root() -> Path:
    """The shared data root (``tests/shared_data.find_shared``: ``$ROLLING_CALIB_SHARED``, else the nearest
    ``shared/`` beside the checkout or a folder above it); skips, saying where it looked, when absent."""
    from shared_data import SHARED, WHERE

    if SHARED is None:
        pytest.skip(f"shared data not found ({WHERE})")
    return SHARED
