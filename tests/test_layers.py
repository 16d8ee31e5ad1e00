"""The import contracts of pyproject.toml ([tool.importlinter]) hold, and the core installs alone."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    """import-linter: layer order, the pure core, and who may import qlib/torch/matplotlib/mlflow/ray."""
    from importlinter.cli import lint_imports

    code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True)
    assert code == 0, "an import crosses a layer: run `.venv/bin/lint-imports` for the offending chain"


def test_a_crossing_import_is_caught(tmp_path):
    """The contract check is not vacuous: a core module importing matplotlib breaks it."""
    import importlinter  # noqa: F401  (the tool must be installed for the check above to mean anything)

    pkg = tmp_path / "layered"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "core" / "bad.py").write_text("import json\n")
    (pkg / "top.py").write_text("from layered.core import bad\n")
    (pkg / "core" / "worse.py").write_text("from layered import top\n")
    cfg = tmp_path / ".importlinter"
    cfg.write_text(textwrap.dedent("""\
        [importlinter]
        root_package = layered

        [importlinter:contract:1]
        name = core below top
        type = layers
        layers =
            layered.top
            layered.core
        """))
    proc = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports; import sys; "
                           f"sys.exit(lint_imports(config_filename={str(cfg)!r}, no_cache=True))"],
                          cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(tmp_path), "PATH": ""})
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "layered.core.worse -> layered.top" in proc.stdout


@pytest.mark.parametrize("module", [
    "rolling_calib.core.metrics", "rolling_calib.core.pairwise", "rolling_calib.core.ranking",
    "rolling_calib.core.schedule", "rolling_calib.core.validation", "rolling_calib.core.verdict",
    "rolling_calib.simulation.synthetic_experiments", "rolling_calib.simulation.verdict_sim",
])
def test_core_imports_without_heavy_libraries(module):
    """With qlib, torch, ray, mlflow and matplotlib made unimportable, the core and the simulations still import."""
    blocked = ["qlib", "torch", "ray", "mlflow", "matplotlib", "polars", "data_prep"]
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {blocked!r}: raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        f"import {module}\n"
        f"print(sorted(n for n in {blocked!r} if n in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_every_core_module_imports_without_progress_bars_or_thread_control():
    """The core imports only what its docstring lists: every module of it imports with tqdm and threadpoolctl
    (the simulation harness's dependencies) made unimportable too."""
    blocked = ["qlib", "torch", "ray", "mlflow", "matplotlib", "polars", "data_prep", "tqdm", "threadpoolctl"]
    code = (
        "import sys, pkgutil, importlib\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {blocked!r}: raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import rolling_calib.core as core\n"
        "names = [m.name for m in pkgutil.iter_modules(core.__path__, 'rolling_calib.core.')]\n"
        "for name in names: importlib.import_module(name)\n"
        f"print(len(names), sorted(n for n in {blocked!r} if n in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    count, loaded = proc.stdout.strip().split(" ", 1)
    assert int(count) > 20 and loaded == "[]"


def test_commands_without_an_extra_say_which_to_install(tmp_path):
    """Without Qlib (the core install), `run` names the extra to install instead of a traceback."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('qlib', 'torch'): raise ModuleNotFoundError(name=name.split('.')[0])\n"
        "sys.meta_path.insert(0, Block())\n"
        "from rolling_calib.cli import main\n"
        f"sys.exit(main(['run', 'workflows/demo.yaml', '--store', {str(tmp_path / 'store')!r}]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert "this command needs qlib, which is not installed: pip install 'rolling-calib[qlib]'" in proc.stderr
