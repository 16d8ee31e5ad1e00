"""Where the shared data sets are: the one place the tests look (issue 29).

The root is ``$ROLLING_CALIB_SHARED`` when set, else the nearest ``shared/`` folder holding ``data/``
beside the repository root or beside any folder above it (``../shared`` of a checkout, which is where
CI and ``/work/main`` keep it; ``../../shared`` of a worktree under ``/work/wt``). Absent: ``None``, and
the tests that need it skip, saying where they looked and how to point them at it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
ENV = "ROLLING_CALIB_SHARED"


def find_shared(env: dict | None = None, repo_root: Path = REPO_ROOT) -> Path | None:
    """The shared data root (holding ``data/``), or ``None``.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / "shared" / "data").mkdir(parents=True)
    >>> find_shared({}, root / "a" / "repo") == root / "shared"
    True
    >>> find_shared({ENV: str(root / "nowhere")}, root / "a" / "repo") is None   # the variable wins, even when wrong
    True
    """
    env = os.environ if env is None else env
    if env.get(ENV):
        path = Path(env[ENV]).expanduser()
        return path if (path / "data").is_dir() else None
    for folder in repo_root.parents:
        if (folder / "shared" / "data").is_dir():
            return folder / "shared"
    return None


SHARED = find_shared()
#: Where a data set "is" when no shared root was found: a path that never exists (the variable, when set to a
#: missing folder, is not second-guessed by looking beside the checkout).
_NOWHERE = Path("/nonexistent-rolling-calib-shared")
#: Why a test that needs the shared data skips (where it looked).
WHERE = (f"${ENV}={os.environ[ENV]}" if os.environ.get(ENV) else
         f"no shared/data beside {REPO_ROOT} or any folder above it; set ${ENV}")


def shared_data(name: str) -> Path:
    """The shared data set ``name`` (``SHARED/data/<name>``; a path that does not exist when absent)."""
    return (SHARED if SHARED is not None else _NOWHERE) / "data" / name


def needs_shared(name: str) -> pytest.MarkDecorator:
    """Skip unless the shared data set ``name`` is present, saying where the tests looked."""
    path = shared_data(name)
    return pytest.mark.skipif(not path.is_dir(), reason=f"shared data set {name} not found ({WHERE})")


DAILY = shared_data("us-equities-daily-2013-2018")
MINUTE_2018 = shared_data("us-equities-1min-2018")
