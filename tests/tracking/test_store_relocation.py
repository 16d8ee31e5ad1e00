"""Stores that move, copied or kept where MLflow's names collide, on real MLflow (SQLite) databases (issue 39).

A fake store (real store API) is logged with rolling-calib's tracking into its own ``mlflow.db``; then:

* a store kept under a folder itself named ``mlartifacts`` is left alone by every command (before: each
  command rewrote its locations one ``/store/mlartifacts`` deeper);
* ``compare --store S --store S`` (or a link to S) is refused in one line;
* ``relocate`` on a read-only store is one line and does not wait for the database's lock;
* ``ls`` names a copied store that still reads the original's files, ``metaeval`` re-points it;
* every experiment says on its page (its description) what to do after the store moved;
* a relocated copy reads and verifies its own files (a byte changed in the copy is named, in the copy);
* a relocated store on a read-only mount is read by ``compare`` without a byte written;
* two processes re-pointing one copy at once are serialised by the database's file lock (one rewrites).
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

import pandas as pd
import pytest

from rolling_calib.cli import main
from rolling_calib.core.store_layout import ARTIFACTS_NOTE
from rolling_calib.execution.units import UnitKey
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


def _snapshot(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under ``root``: (size, mtime in ns, bytes)."""
    return {p.relative_to(root).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_relocated_copy_reads_and_verifies_its_own_files(logged, tmp_path):
    from rolling_calib.analysis.scoring import score_store
    from rolling_calib.execution.store import CorruptUnitError, Store

    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(logged, copy)
    code, out, err = _cli(["relocate", "--store", str(copy), "--json"])
    assert code == 0 and json.loads(out)["moved_from"] == [store_artifact_root(logged)], err
    assert foreign_roots(copy) == [] and all(loc.startswith(store_artifact_root(copy)) for loc in _locations(copy))
    original, copied = score_store(logged), score_store(copy)
    assert Store.open(copy).root == copy and copied.store == copy
    pd.testing.assert_frame_equal(copied.runs, original.runs)     # the same bytes: the same scores, exactly
    unit = Store.open(copy).unit_paths(UnitKey("a", 1, 0)).parquet
    data = bytearray(unit.read_bytes())
    data[len(data) // 2] ^= 0xFF
    unit.write_bytes(bytes(data))                                 # damage in the copy: the copy's file is named
    with pytest.raises(CorruptUnitError, match=f"^{unit}: corrupt unit file: its XXH3-128 is "):
        score_store(copy)
    pd.testing.assert_frame_equal(score_store(logged).runs, original.runs)   # the original is untouched


def test_a_read_only_relocated_store_is_read_without_writing(logged, tmp_path):
    source, mount = tmp_path / "store", tmp_path / "ro"
    shutil.copytree(logged, mount)                   # relocated where it will be read, then mounted read-only there
    assert _cli(["relocate", "--store", str(mount)])[0] == 0 and foreign_roots(mount) == []
    shutil.move(mount, source)
    before = _snapshot(source)
    done = _read_only_command(source, mount, ["compare", "--store", str(mount), "--n-boot", "50", "--json"])
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "note:" not in done.stderr, done.stderr    # nothing to re-point, nothing refused
    assert len(json.loads(done.stdout)["pairs"]) == 1   # a vs b, compared
    assert _snapshot(source if source.exists() else mount) == before   # not one byte written (nor last_verdicts.json)


_REPOINT = (
    "import sys\n"
    "from rolling_calib.tracking.relocation import repoint_store_db\n"
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
    "print('moved' if repoint_store_db(sys.argv[1], timeout=60.0) is not None else 'nothing', flush=True)\n"
)


def test_two_processes_repointing_one_copy_at_once_are_serialised(logged, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(logged, copy)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-c", _REPOINT, str(copy)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
             for _ in range(2)]
    try:
        assert [p.stdout.readline().strip() for p in procs] == ["ready", "ready"]
        for p in procs:                               # both go at once: both see the copy pointing elsewhere
            p.stdin.write("\n")
            p.stdin.flush()
        results = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in results]
    assert sorted(out.strip() for out, _ in results) == ["moved", "nothing"]   # the second re-read under the lock
    own = [loc.replace(store_artifact_root(logged), store_artifact_root(copy)) for loc in _locations(logged)]
    assert _locations(copy) == own and foreign_roots(copy) == []
    with contextlib.closing(sqlite3.connect(copy / "mlflow.db")) as con:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
