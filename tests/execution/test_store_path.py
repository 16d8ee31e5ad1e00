"""``run --store`` on a regular file, under one, or where nothing can be written: one line, exit 2, before
anything runs (issue 30 item 5: it was 15 frames through Qlib's exception logger)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from rolling_calib.cli import main
from rolling_calib.execution.lock import StoreLock, StorePathError, check_store_path, store_path_problem

from runner_helpers import REPO

TINY = ["rolling.initial_train_start=2018-01", "rolling.start=2018-03", "rolling.end=2018-04",
        "rolling.step_months=1", "rolling.seeds=1"]


def _run(tiny_data, store: str, capsys) -> tuple[int, list[str]]:
    argv = ["run", str(REPO / "workflows" / "demo.yaml"), "--store", store, "--no-tracking"]
    for pair in [f"qlib_init.provider_uri={tiny_data}", *TINY]:
        argv += ["--set", pair]
    code = main(argv)
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("under", [False, True])
def test_a_store_that_is_a_regular_file_is_one_line(tiny_data, tmp_path, capsys, under):
    afile = tmp_path / "afile"
    afile.write_text("not a store")
    store = afile / "sub" if under else afile
    code, err = _run(tiny_data, str(store), capsys)
    assert code == 2 and len(err) == 1, err
    what = f"{afile} is a regular file, not a directory" if under else "it is a regular file, not a directory"
    assert err[0] == (f"rolling-calib run: error: {store}: cannot write a result store here: {what}; choose a "
                      f"writable directory for --store")
    assert afile.read_text() == "not a store" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.skipif(not Path("/sys").is_dir() or os.access("/sys", os.W_OK) and os.geteuid() != 0,
                    reason="needs /sys, where nothing can be created")
def test_a_store_where_nothing_can_be_created_is_one_line(tiny_data, capsys):
    code, err = _run(tiny_data, "/sys/rc_store", capsys)
    line = [x for x in err if "error" in x]
    assert code == 2 and len(line) == 1 and "Traceback" not in "\n".join(err), err
    assert line[0].startswith("rolling-calib run: error: /sys/rc_store: cannot write a result store here: ")
    assert not Path("/sys/rc_store").exists()


def test_read_only_and_other_os_errors_are_worded():
    store = Path("/data/runs")
    assert store_path_problem(store, OSError(errno.EROFS, "Read-only file system")).endswith(
        "cannot write a result store here: read-only file system; choose a writable directory for --store")
    assert "permission denied" in store_path_problem(store, OSError(errno.EACCES, "Permission denied"))
    assert "no space left" in store_path_problem(store, OSError(errno.ENOSPC, "No space left on device"))


def test_the_lock_turns_an_os_error_into_one_line(tmp_path):
    afile = tmp_path / "f"
    afile.write_text("")
    with pytest.raises(StorePathError, match=r"f: cannot write a result store here: it is a regular file"):
        with StoreLock(afile):
            pass
    assert check_store_path(tmp_path / "new" / "store") == tmp_path / "new" / "store"
    assert not (tmp_path / "new").exists()  # checking creates nothing


@pytest.mark.parametrize("command", ["run", "sweep", "compare", "report", "diagnose", "metaeval", "relocate"])
def test_an_empty_store_path_is_refused_before_anything_is_read_or_written(command, tmp_path, monkeypatch, capsys):
    """``--store ""`` meant the current directory: ``run`` trained a whole store into it (issue 39)."""
    monkeypatch.chdir(tmp_path)
    config = [str(REPO / "workflows" / "demo.yaml")] if command in ("run", "sweep") else []
    with pytest.raises(SystemExit) as info:
        main([command, *config, "--store", ""])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2
    assert err[-1] == (f"rolling-calib {command}: error: argument --store: expected a directory, found an empty path "
                       f"(it would mean the current directory): name the store's directory, e.g. --store runs/demo")
    assert list(tmp_path.iterdir()) == []
