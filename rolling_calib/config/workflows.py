"""The experiment files that ship with the package: the repository's ``workflows/`` directory.

In the repository, ``rolling_calib/workflows`` is a link to the top-level ``workflows/``; the wheel
carries the files themselves (package data). Either way they are found through
:mod:`importlib.resources`, so ``rolling-calib demo`` works from a checkout, an editable install
and a wheel alike. Without a checkout, the installed copies are here::

    python -c "from rolling_calib.config.workflows import workflows_dir; print(workflows_dir())"

Examples
--------
>>> packaged_workflow("demo.yaml").name, packaged_workflow("demo.yaml").is_file()
('demo.yaml', True)
>>> (workflows_dir() / "pipelines" / "weight_decay.yaml").is_file()
True
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["packaged_workflow", "workflows_dir"]


def workflows_dir() -> Path:
    """The installed ``workflows/`` directory (a real directory: ``BASE_CONFIG_PATH`` resolves inside it).

    Raises
    ------
    FileNotFoundError
        When the package was installed without its data (or is imported from a zip file).
    """
    root = files("rolling_calib") / "workflows"
    if not isinstance(root, Path) or not root.is_dir():
        raise FileNotFoundError(f"{root}: the package's workflows/ directory is missing (installed without "
                                "its package data, or imported from a zip); reinstall rolling-calib from its wheel")
    return root


def packaged_workflow(name: str) -> Path:
    """The installed experiment file ``name`` (``"demo.yaml"``, ``"pipelines/weight_decay.yaml"``).

    Raises
    ------
    FileNotFoundError
        When there is no such file; the message lists the files that exist.
    """
    root = workflows_dir()
    path = root / name
    if not path.is_file():
        present = ", ".join(sorted(str(p.relative_to(root)) for p in root.rglob("*.yaml")))
        raise FileNotFoundError(f"{path}: no such packaged workflow; the package has: {present}")
    return path
