"""Stores that move, copied or kept where MLflow's names collide, on real MLflow (SQLite) databases (issue 39).

A fake store (real store API) is logged with rolling-calib's tracking into its own ``mlflow.db``; then:

* a store kept under a folder itself named ``mlartifacts`` is left alone by every command (before: each
  command rewrote its locations one ``/store/mlartifacts`` deeper);
* ``compare --store S --store S`` (or a link to S) is refused in one line;
* ``relocate`` on a read-only store is one line and does not wait for the database's lock;
* ``ls`` names a copied store that still reads the original's files, ``metaeval`` re-points it;
* every experiment says on its page (its description) what to do after the store moved.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from rolling_calib.cli import main
from rolling_calib.core.store_layout import ARTIFACTS_NOTE
from rolling_calib.tracking.relocation import foreign_roots, store_artifact_root

from runner_helpers import REPO, write_fake_store

pytest.importorskip("mlflow")

PIPES = {"a": {"bias_sd": 1.0}, "b": {"bias_sd": 0.5}}


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _logged_store(store: Path) -> Path:
    """A fake store of 2 pipelines x 2 seeds, logged into its own mlflow.db (artifacts in its mlartifacts/)."""
    from rolling_calib.analysis.scoring import score_store
    from rolling_calib.tracking.mlflow_log import track_store

    write_fake_store(store, pipelines=PIPES, seeds=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        track_store(score_store(store))
    return store


def _locations(store: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(store / "mlflow.db")) as con:
        return ([loc for (loc,) in con.execute("SELECT artifact_location FROM experiments WHERE experiment_id > 0")]
                + [uri for (uri,) in con.execute("SELECT artifact_uri FROM runs")])


@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> Path:
    return _logged_store(tmp_path_factory.mktemp("logged") / "store")


def test_a_store_under_a_folder_named_mlartifacts_is_left_alone(logged, tmp_path):
    store = tmp_path / "mlartifacts" / "store"
    shutil.copytree(logged, store)
    _cli(["relocate", "--store", str(store)])                 # the copy's own files first
    own = _locations(store)
    assert all(loc.startswith(store_artifact_root(store)) for loc in own) and foreign_roots(store) == []
    for _ in range(2):                                         # before: each command nested it one level deeper
        code, _, err = _cli(["compare", "--store", str(store), "--n-boot", "50"])
        assert code == 0 and "the store moved" not in err, err
        assert _locations(store) == own
    moved = tmp_path / "elsewhere" / "mlartifacts" / "moved"   # moved under another such folder: found exactly
    moved.parent.mkdir(parents=True)
    shutil.move(store, moved)
    assert foreign_roots(moved) == [store_artifact_root(store)]
    code, out, err = _cli(["relocate", "--store", str(moved), "--json"])
    assert code == 0, err
    assert json.loads(out)["moved_from"] == [store_artifact_root(store)]
    assert _locations(moved) == [loc.replace(store_artifact_root(store), store_artifact_root(moved)) for loc in own]
    assert _cli(["compare", "--store", str(moved), "--n-boot", "50"])[0] == 0 and foreign_roots(moved) == []


def test_compare_refuses_the_same_store_twice_in_one_line(logged, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(logged, target_is_directory=True)
    for second in (logged, link):
        code, out, err = _cli(["compare", "--store", str(logged), "--store", str(second), "--n-boot", "50"])
        lines = err.strip().splitlines()
        assert code == 2 and out == "" and len(lines) == 1, err
        assert lines[0] == (f"rolling-calib compare: error: --store: {logged} and {second} are the same store "
                            f"({logged.resolve()}): it would be compared with itself; give each store once (the "
                            f"pipelines of one store: compare --store {logged})")


def test_a_copy_is_named_by_ls_and_repointed_by_metaeval(logged, tmp_path):
    copy = tmp_path / "runs" / "copy"
    shutil.copytree(logged, copy)
    code, out, _ = _cli(["ls", str(tmp_path / "runs"), "--json"])
    assert code == 0
    note = json.loads(out)[0]["mlflow"]
    assert note == (f"moved or copied: its MLflow database points at {store_artifact_root(logged)}; run "
                    f"'rolling-calib relocate --store {copy}' before opening it with mlflow ui or Qlib's R")
    assert f"note: copy: {note}" in _cli(["ls", str(tmp_path / "runs")])[1]
    assert foreign_roots(copy) == [store_artifact_root(logged)]   # ls only reads
    code, _, err = _cli(["metaeval", "--store", str(copy), "--n-boot", "50", "--splits", "20", "--json"])
    assert code == 0 and f"note: {(copy / 'mlflow.db').resolve()}: the store moved: " in err, err
    assert foreign_roots(copy) == [] and all(loc.startswith(store_artifact_root(copy)) for loc in _locations(copy))
    assert json.loads(_cli(["ls", str(tmp_path / "runs"), "--json"])[1])[0]["mlflow"] is None


def test_every_experiment_says_what_to_do_after_a_move(logged):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{logged / 'mlflow.db'}")
    experiments = [e for e in client.search_experiments() if e.name != "Default"]
    assert experiments and all(e.tags["mlflow.note.content"] == ARTIFACTS_NOTE for e in experiments)
    assert "rolling-calib relocate --store DIR" in ARTIFACTS_NOTE and "Failed to download artifacts" in ARTIFACTS_NOTE


def _read_only_command(source: Path, mount: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """``argv`` run (python -m rolling_calib.cli) with ``source`` mounted read-only at ``mount``: a private bind
    mount (``unshare -m``) as root, else the files made read-only; skips where neither can be done."""
    command = [sys.executable, "-m", "rolling_calib.cli", *argv]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if os.geteuid() == 0:
        if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode:
            pytest.skip("needs unshare -m (a private read-only bind mount) when run as root")
        mount.mkdir()
        script = ('mount --bind "$1" "$2" && mount -o remount,ro,bind "$2" && shift 2 && exec "$@"')
        return subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(source), str(mount), *command],
                              capture_output=True, text=True, env=env, timeout=120, cwd=REPO)
    shutil.move(source, mount)
    for path in [mount, *mount.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, cwd=REPO)
    finally:
        for path in [mount, *mount.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)


def test_relocate_on_a_read_only_store_is_one_line_without_waiting(logged, tmp_path):
    """The database's lock is held by this process meanwhile: a relocate that waited for it would hit the
    subprocess timeout (120 s) and fail the test; it is refused before any lock is asked for."""
    from filelock import FileLock

    source = tmp_path / "moved"
    shutil.copytree(logged, source)
    mount = tmp_path / "ro"
    with FileLock(str(source / "mlflow.db.lock")):
        done = _read_only_command(source, mount, ["relocate", "--store", str(mount)])
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"rolling-calib relocate: error: {mount.resolve() / 'mlflow.db'}: its MLflow artifact "
                               f"locations point at {store_artifact_root(logged)} (the store was moved or copied) "
                               f"and cannot be re-pointed here ")
    assert lines[0].endswith("copy the store somewhere writable and run 'rolling-calib relocate --store COPY' there")
