"""Disk full and other OS errors during an ingest (issue 19, item 5): one line naming the file, the free space and
the fix; nothing published. The full disk is the kernel's own: writes are sent to ``/dev/full``, which fails every
write with ENOSPC."""

from __future__ import annotations

import errno
import hashlib
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from data_helpers import clean_day_rows, write_vendor_csv
from data_prep import atomic, qlib_store
from data_prep.ingest import IngestError, IngestOptions, ingest
from rolling_calib.cli import main

DAY, DAY2 = "2018-02-16", "2018-02-20"
pytestmark = pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _fill_disk(monkeypatch, kinds: tuple[type, ...]) -> None:
    """Store writes of ``kinds`` (numpy arrays: feature files; bytes: text files) go to the full device."""
    original = atomic._write_data

    def to_full_device(fh, data):
        if not isinstance(data, kinds):
            return original(fh, data)
        with open("/dev/full", "wb") as full:
            original(full, data)

    monkeypatch.setattr(atomic, "_write_data", to_full_device)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_disk_full_writing_a_new_store_is_one_line_naming_file_free_space_and_fix(tmp_path, monkeypatch, capsys):
    src = write_vendor_csv(tmp_path / "src" / "AAPL.csv", clean_day_rows(DAY, seed=1))
    _fill_disk(monkeypatch, (bytes,))  # the calendar file: ENOSPC from the kernel
    code = main(["data", "ingest", str(src), "--out", str(tmp_path / "store"), "--no-progress"])
    line = _one_line(capsys.readouterr().err)
    assert code == 1
    assert line.startswith(f"error: {tmp_path}/store.staging-")
    assert "/calendars/1min.txt: cannot write: the disk is full (No space left on device; " in line
    assert " free on its file system); nothing published (no store was created at " in line
    assert line.endswith("free space there, or write to another disk, then re-run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no store, no staging directory


def test_disk_full_writing_a_small_feature_file_is_never_silent(tmp_path, monkeypatch):
    # numpy's tofile lost the error of an array smaller than its buffer: the file was then silently empty
    src = write_vendor_csv(tmp_path / "src" / "AAPL.csv", clean_day_rows(DAY, seed=1))
    _fill_disk(monkeypatch, (np.ndarray,))  # a feature file of 391 float32 values (1564 bytes)

    class Usage:  # what shutil.disk_usage measures on the full disk
        total, used, free = 2**30, 2**30 - 512, 512

    monkeypatch.setattr(qlib_store.shutil, "disk_usage", lambda p: Usage)
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "store", options=IngestOptions(mode="strict"))
    msg = str(info.value)
    assert "\n" not in msg
    assert ("/features/aapl/open.1min.bin: cannot write: the disk is full (No space left on device; 512 B free on "
            "its file system); nothing published (no store was created at ") in msg
    assert not (tmp_path / "store").exists() and not list(tmp_path.glob("store.*"))


def test_disk_full_during_an_update_leaves_the_store_byte_for_byte(tmp_path, monkeypatch, capsys):
    first = write_vendor_csv(tmp_path / "src" / "AAPL.csv", clean_day_rows(DAY, seed=1))
    ingest([first], tmp_path / "store", options=IngestOptions(mode="strict"))
    before = _tree(tmp_path / "store")
    more = write_vendor_csv(tmp_path / "src2" / "AAPL.csv", clean_day_rows(DAY2, seed=2))
    _fill_disk(monkeypatch, (np.ndarray, bytes))
    code = main(["data", "ingest", str(more), "--out", str(tmp_path / "store"), "--no-progress"])
    line = _one_line(capsys.readouterr().err)
    assert code == 1 and "cannot write: the disk is full" in line and "free on its file system" in line
    assert f"nothing published ({tmp_path / 'store'} is unchanged)" in line
    assert _tree(tmp_path / "store") == before and not list(tmp_path.glob("store.*"))
    monkeypatch.undo()
    assert qlib_store.check_committed(tmp_path / "store")
    res = ingest([more], tmp_path / "store", options=IngestOptions(mode="strict"))  # with room again: it goes on
    assert res.appended and res.new_sessions == 1


def test_a_full_temporary_directory_names_the_spill_file_and_tmpdir(tmp_path, monkeypatch):
    src = write_vendor_csv(tmp_path / "src" / "AAPL.csv", clean_day_rows(DAY, seed=1))

    def write_ipc_to_full_device(self, path, **kw):
        return original(self, "/dev/full", **kw)

    original = pl.DataFrame.write_ipc
    monkeypatch.setattr(pl.DataFrame, "write_ipc", write_ipc_to_full_device)
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "store", options=IngestOptions(mode="strict"))
    msg = str(info.value)
    assert "\n" not in msg and "rolling-calib-ingest-" in msg and ".arrow: cannot write: the disk is full" in msg
    assert "(No space left on device (os error 28); " in msg and "set TMPDIR to a directory on a disk with room" in msg
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(
    ("code", "what", "fix"),
    [(errno.EACCES, "permission denied", "make the directory writable, or write elsewhere, then re-run"),
     (errno.EROFS, "the file system is read-only", "write to a writable file system, then re-run"),
     (errno.EDQUOT, "the disk quota is exceeded", "free space within your quota, or write to another disk, then re-run")],
)
def test_other_os_errors_are_one_line_with_what_happened_and_the_fix(tmp_path, code, what, fix):
    problem = qlib_store.describe_os_error(OSError(code, "x"), tmp_path / "f.bin")
    assert problem.head.startswith(f"{tmp_path / 'f.bin'}: cannot write: {what} (x; ") and problem.fix == fix
    assert problem.errno == code and problem.free is not None and "free on its file system)" in problem.head


def test_an_os_error_outside_a_write_is_translated_too(tmp_path, monkeypatch):
    src = write_vendor_csv(tmp_path / "src" / "AAPL.csv", clean_day_rows(DAY, seed=1))

    def no_rename(a, b):
        raise PermissionError(errno.EACCES, "Permission denied", str(a))

    monkeypatch.setattr(qlib_store.os, "rename", no_rename)
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "store", options=IngestOptions(mode="strict"))
    msg = str(info.value)
    assert msg.startswith(f"{tmp_path}/store.staging-") and ": failed: permission denied (Permission denied; " in msg
    assert "nothing published (no store was created at" in msg and msg.endswith("another --out directory, then re-run")


def test_a_report_that_cannot_be_written_is_one_line_and_says_the_store_was_written(tmp_path, monkeypatch, capsys):
    src = write_vendor_csv(tmp_path / "src" / "AAPL.csv", clean_day_rows(DAY, seed=1))
    original = qlib_store.atomic_write_bytes

    def full_for_reports(path, data):
        if Path(path).name.startswith("rep"):
            raise qlib_store.WriteFailed(qlib_store.describe_os_error(OSError(errno.ENOSPC, "No space left on device"),
                                                                      path), path=path)
        return original(path, data)

    monkeypatch.setattr(qlib_store, "atomic_write_bytes", full_for_reports)
    monkeypatch.setattr("data_prep.ingest_report.atomic_write_text", lambda p, t: full_for_reports(p, t.encode()))
    code = main(["data", "ingest", str(src), "--out", str(tmp_path / "store"), "--report", str(tmp_path / "rep.json"),
                 "--no-progress"])
    line = _one_line(capsys.readouterr().err)
    assert code == 1 and line.startswith(f"error: report not written: {tmp_path / 'rep.json'}: cannot write: the disk")
    assert line.endswith(f"the store {tmp_path / 'store'} was written")
