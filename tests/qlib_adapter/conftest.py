"""Fixtures of the Qlib adapter tests: one tiny minute store read through Qlib's real provider."""

from __future__ import annotations

from pathlib import Path

import pytest

from model_helpers import build_tiny_store, dataset_config, use_store


@pytest.fixture(scope="session")
def tiny_minute_store(tmp_path_factory) -> Path:
    """3 symbols x 2 months of synthetic minute bars (seed 7), built once per session."""
    return build_tiny_store(tmp_path_factory.mktemp("minute_store"))


@pytest.fixture(scope="module")
def store(tiny_minute_store: Path) -> Path:
    """The tiny store, with Qlib pointed at it for this module (Qlib's configuration is process-global)."""
    use_store(tiny_minute_store)
    return tiny_minute_store


@pytest.fixture(scope="module")
def dataset(store: Path):
    """A ``MinuteTSDataset`` over the tiny store, built from its workflow-YAML config."""
    from qlib.utils import init_instance_by_config

    use_store(store)
    return init_instance_by_config(dataset_config())
