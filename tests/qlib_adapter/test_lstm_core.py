"""The LSTM model and the seed stack share their fit pieces through ``lstm_core`` and import nothing of each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "rolling_calib" / "qlib_adapter"


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at module level or inside functions (docstrings are not code)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize(("module", "other"), [("model", "stacked"), ("stacked", "model")])
def test_model_and_stacked_do_not_import_each_other(module, other):
    imported = _imported_modules(PACKAGE / f"{module}.py")
    assert f"rolling_calib.qlib_adapter.{other}" not in imported
    assert "rolling_calib.qlib_adapter.lstm_core" in imported


def test_the_seed_stack_trains_models_built_on_the_core():
    from qlib.contrib.model.gbdt import LGBModel

    from rolling_calib.qlib_adapter.lstm_core import LSTMCore
    from rolling_calib.qlib_adapter.model import RollingLSTM
    from rolling_calib.qlib_adapter.stacked import can_stack

    assert issubclass(RollingLSTM, LSTMCore) and can_stack(RollingLSTM) and not can_stack(LGBModel)
