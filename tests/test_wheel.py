"""The wheel carries what a user outside the checkout needs: built, installed into a fresh venv, run.

The venv sees the project environment's installed dependencies through a ``.pth`` line (nothing is
downloaded), but not the project's editable install: ``.pth`` files are processed only in site
directories, so the editable finder never starts there, and every command runs from a temporary
directory with ``PYTHONPATH`` unset. The test asserts that ``rolling_calib`` is imported from the
venv, then runs ``rolling-calib demo --help`` and a tiny demo whose file starts from the *installed*
``demo.yaml`` (``BASE_CONFIG_PATH`` chains demo.yaml -> base.yaml inside the wheel).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import rolling_calib

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
#: What the build reads; rolling_calib/workflows links to workflows/ and must keep doing so in the copy.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "rolling_calib", "data_prep", "workflows")

TINY_DEMO = """\
BASE_CONFIG_PATH: {base}
task:
  model: {{kwargs: {{hidden_size: 4, n_epochs: 1}}}}
  dataset:
    kwargs:
      step_len: 10
      sample_stride: 120
      test_stride: 60
      handler: {{kwargs: {{window: 10, norm_samples: 3000}}}}
rolling: {{initial_train_start: 2018-01, start: 2018-03, end: 2018-04, step_months: 1}}
"""


def _build_wheel(tmp: Path) -> Path:
    """Build from a copy of the sources (a build writes build/ and *.egg-info next to them)."""
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            shutil.copy2(REPO / name, src / name)
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(dist), str(src)], check=True, cwd=tmp)
    (wheel,) = dist.glob("rolling_calib-*.whl")
    return wheel


def _venv_with_wheel(tmp: Path, wheel: Path) -> Path:
    """A venv that sees the project's dependencies (not its editable install) with the wheel installed."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    deps = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    Path(site, "_project_dependencies.pth").write_text("".join(f"{path}\n" for path in deps))
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "-q", str(wheel)], check=True, cwd=tmp)
    return venv


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["COLUMNS"] = "400"  # help text unwrapped: paths stay whole
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_wheel_carries_the_workflows_license_and_type_marker(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {n.removeprefix("rolling_calib/workflows/") for n in names if n.startswith("rolling_calib/workflows/")}
    in_repo = {str(p.relative_to(REPO / "workflows")) for p in (REPO / "workflows").rglob("*")
               if p.is_file() and p.suffix in (".yaml", ".md")}
    assert shipped == in_repo and "demo.yaml" in shipped and "base.yaml" in shipped
    assert {"rolling_calib/py.typed", "data_prep/py.typed"} <= names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert f"Version: {rolling_calib.__version__}\n" in metadata  # the one source of the version


def test_installed_wheel_runs_the_demo_outside_the_checkout(wheel, tmp_path):
    venv = _venv_with_wheel(tmp_path, wheel)
    work = tmp_path / "work"
    work.mkdir()
    probe = _run([str(venv / "bin" / "python"), "-c",
                  "import sys, rolling_calib; from rolling_calib.config.workflows import packaged_workflow; "
                  "print(rolling_calib.__file__); print(packaged_workflow('demo.yaml')); "
                  "print(any('editable' in type(f).__name__.lower() or 'editable' in str(f).lower() "
                  "for f in sys.meta_path))"], work)
    assert probe.returncode == 0, probe.stderr
    module_file, demo_yaml, editable_finder = probe.stdout.split("\n")[:3]
    assert Path(module_file).is_relative_to(venv), f"imported {module_file}, not the installed wheel"
    assert Path(demo_yaml).is_relative_to(venv) and editable_finder == "False"

    cli = str(venv / "bin" / "rolling-calib")
    version = _run([cli, "--version"], work)
    assert version.stdout.strip() == f"rolling-calib {rolling_calib.__version__}"
    helped = _run([cli, "demo", "--help"], work)
    assert helped.returncode == 0, helped.stderr
    assert "--seeds" in helped.stdout and f"({demo_yaml} and " in helped.stdout   # --config names the installed files

    (work / "tiny.yaml").write_text(TINY_DEMO.format(base=demo_yaml))
    ran = _run([cli, "demo", "--out", "out", "--config", "tiny.yaml", "--seeds", "2", "--workers", "1",
                "--n-boot", "50", "--no-tracking", "--json"], work)
    assert ran.returncode == 0, ran.stderr[-3000:]
    result = json.loads(ran.stdout)
    assert {p["pipeline"] for p in result["pipelines"]} == {"wd0", "wd1e-2"}
    assert (work / "out" / "report" / "report.html").is_file()
    sidecars = sorted(p.name for p in (work / "out" / "store" / "units").rglob("w*.json"))
    assert sidecars == ["w00.json"] * 4 + ["w01.json"] * 4  # 2 pipelines x 2 seeds x 2 windows
