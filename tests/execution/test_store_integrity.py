"""Issue 19, the results side: damaged unit files, units without checksums, data changed after training.

A unit's sidecar records the XXH3-128 and the SHA-256 of its Parquet bytes; every reader checks the XXH3-128 (the
SHA-256 of a unit written before XXH3 was recorded; ``compare`` stops,
naming the file and the fix); ``unit_status`` calls such a unit *corrupt*, never complete and never
missing. These tests work on stores of synthetic units written through the store API (no training);
``test_run_integrity.py`` has the ones that train.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rolling_calib.analysis.integrity import check_data, store_notes
from rolling_calib.analysis.scoring import score_store
from rolling_calib.cli import main
from rolling_calib.core.schedule import CoverageError
from rolling_calib.execution import store as st
from rolling_calib.execution.reader import read_run, read_unit
from rolling_calib.execution.units import UnitKey

from runner_helpers import write_fake_store

KEY = UnitKey("a", 1, 1)


@pytest.fixture
def fake(tmp_path) -> Path:
    store = tmp_path / "store"
    write_fake_store(store, pipelines={"a": {}, "b": {"bias_sd": 0.3}}, seeds=3, valid=True)
    return store


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _compare(store: Path, capsys, *extra: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["compare", "--store", str(store), "--n-boot", "50", *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_error_line(err: str, command: str = "compare") -> str:
    lines = [line for line in err.splitlines() if line.startswith(f"rolling-calib {command}: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# --------------------------------------------------------------------------- byte flips and truncation
@pytest.mark.parametrize("where", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_a_flipped_byte_anywhere_is_an_error_naming_the_file(fake, capsys, where):
    """The issue's five flips: 3 gave other numbers silently, one a traceback naming no file."""
    path = st.unit_paths(fake, KEY).parquet
    _flip(path, min(int(where * path.stat().st_size), path.stat().st_size - 1))
    code, out, err = _compare(fake, capsys)
    line = _one_error_line(err)
    assert code == 2 and out == ""
    assert f"{path}: corrupt unit file: its XXH3-128 is " in line
    assert f"re-run 'rolling-calib run CONFIG --store {fake}' to recompute it" in line and f"{fake}/corrupt/" in line
    status = st.unit_status(fake, KEY, "hash-a")
    assert status.state == "corrupt" and not status.complete and str(path) in status.problem(fake)


def test_a_truncated_unit_is_corrupt_not_absent(fake, capsys):
    path = st.unit_paths(fake, KEY).parquet
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert st.unit_status(fake, KEY, "hash-a").state == "corrupt"
    with pytest.raises(st.CorruptUnitError, match=f"{path}: corrupt unit file"):
        read_run(fake, "a", 1)
    code, _, err = _compare(fake, capsys)
    assert code == 2 and str(path) in _one_error_line(err)


def test_a_deleted_unit_is_missing_and_a_damaged_one_corrupt(fake, capsys):
    """Absent and damaged are different states: compare leaves a run with a missing unit out, with a note."""
    missing = UnitKey("a", 0, 1)
    st.unit_paths(fake, missing).parquet.unlink()
    assert st.unit_status(fake, missing, "hash-a").state == "missing"
    code, out, _ = _compare(fake, capsys, "--json")
    assert code == 0 and any("a__seed0__w01 is missing" in r for r in json.loads(out)["incomplete_runs"])
    _flip(st.unit_paths(fake, KEY).parquet, 100)
    assert st.unit_status(fake, KEY, "hash-a").state == "corrupt"
    assert _compare(fake, capsys)[0] == 2


def test_a_damaged_validation_file_is_corrupt_too(fake, capsys):
    path = st.unit_paths(fake, KEY).valid_parquet
    _flip(path, path.stat().st_size // 2)
    assert st.unit_status(fake, KEY, "hash-a").state == "corrupt"
    code, _, err = _compare(fake, capsys, "--source", "validation")
    assert code == 2 and f"{path}: corrupt validation file" in _one_error_line(err)


def test_the_reader_reads_what_was_written(fake):
    frame = read_unit(fake, KEY)
    assert len(frame) == st.read_sidecar(fake, KEY)["rows"]
    assert st.read_sidecar(fake, KEY)["sha256"] == st.file_sha256(st.unit_paths(fake, KEY).parquet)
    data = st.unit_paths(fake, KEY).parquet.read_bytes()
    assert st.read_sidecar(fake, KEY)["xxh3"] == st.xxh3_bytes(data) and len(st.xxh3_bytes(data)) == 32  # 128 bits


def test_a_unit_written_before_xxh3_is_read_against_its_sha256(fake, capsys):
    """A sidecar with the SHA-256 only (units written before XXH3 was recorded): read as before, a flip still caught,
    the message naming the SHA-256."""
    for side in (fake / "units").rglob("w*.json"):
        data = json.loads(side.read_text())
        data.pop("xxh3"), data.pop("valid_xxh3", None)
        side.write_text(json.dumps(data))
    assert _compare(fake, capsys)[0] == 0
    path = st.unit_paths(fake, KEY).parquet
    _flip(path, path.stat().st_size // 2)
    code, _, err = _compare(fake, capsys)
    assert code == 2 and f"{path}: corrupt unit file: its SHA-256 is " in _one_error_line(err)
    assert st.unit_status(fake, KEY, "hash-a").state == "corrupt"


def test_the_status_check_verifies_every_recorded_checksum(fake):
    """A read verifies the XXH3-128; ``unit_status`` (what ``run`` trusts before skipping a unit) checks the SHA-256
    too: a sidecar whose SHA-256 no longer matches the bytes is damage even where the XXH3-128 does."""
    side = st.unit_paths(fake, KEY).sidecar
    data = json.loads(side.read_text())
    data["sha256"] = "0" * 64
    side.write_text(json.dumps(data))
    status = st.unit_status(fake, KEY, "hash-a")
    assert status.state == "corrupt" and "its SHA-256 is " in status.damage
    assert "the unit's sidecar records 0000000000000000..." in status.damage
    assert len(read_unit(fake, KEY)) == data["rows"]   # the read's own check (XXH3-128) passes: the bytes are sound


# --------------------------------------------------------------------------- units written before the checksums
def _drop_checksums(store: Path, *, old_store: bool = True) -> int:
    """Sidecars without checksums: a store written before the checksums (``old_store``: its manifest has no
    ``unit_checksums`` either), or the key removed from a store created with them (issue 30)."""
    if old_store:
        manifest = json.loads((store / "manifest.json").read_text())
        manifest.pop(st.UNIT_CHECKSUMS, None)
        (store / "manifest.json").write_text(json.dumps(manifest))
    n = 0
    for side in (store / "units").rglob("w*.json"):
        data = json.loads(side.read_text())
        for field in ("sha256", "valid_sha256", "xxh3", "valid_xxh3"):
            data.pop(field, None)
        side.write_text(json.dumps(data))
        n += 1
    return n


def test_a_checksum_key_removed_from_a_store_created_with_checksums_is_an_error(fake, capsys):
    """Issue 30: deleting the key made a unit read unchecked with only a note; where the store was created with
    checksums (its manifest says unit_checksums), a sidecar without one is corrupt: one line, exit 2."""
    side = st.unit_paths(fake, KEY).sidecar
    data = json.loads(side.read_text())
    data.pop("sha256"), data.pop("xxh3")
    side.write_text(json.dumps(data))
    code, out, err = _compare(fake, capsys)
    line = _one_error_line(err)
    assert code == 2 and (f"{side}: expected a checksum of the unit's bytes (xxh3 or sha256; this store was created "
                          f"with checksums") in line
    assert "the key was removed or the sidecar replaced, so the unit is not read unchecked" in line
    status = st.unit_status(fake, KEY, st.read_manifest(fake)["pipelines"]["a"]["config_hash"])
    assert status.state == "corrupt" and "expected a checksum" in status.damage   # run recomputes it


def test_units_without_checksums_are_read_with_one_note_per_store(fake, capsys):
    n = _drop_checksums(fake)
    code, out, _ = _compare(fake, capsys, "--json")
    notes = json.loads(out)["notes"]
    assert code == 0
    assert [x for x in notes if "before checksums" in x] == [
        f"{n} unit(s) of {fake} were written before checksums were recorded (their sidecars hold no checksum): they "
        f"are read without a check of their bytes (a truncated file is still caught). Recompute them to record "
        f"checksums: move {fake / 'units'} aside and re-run 'rolling-calib run' on this store"]
    for command in (["diagnose", "--store", str(fake), "--json"], ["metaeval", "--store", str(fake), "--json", "--n-boot", "50"]):
        assert main(command) == 0
        assert sum("before checksums" in x for x in json.loads(capsys.readouterr().out)["notes"]) == 1


def test_a_damaged_unit_without_checksum_is_never_a_traceback(fake, capsys):
    """Without a checksum a flip may go unseen (the numbers change); when pyarrow cannot decode it, the file is named."""
    _drop_checksums(fake)
    path = st.unit_paths(fake, KEY).parquet
    good = path.read_bytes()
    outcomes = {"read": 0, "corrupt": 0, "coverage": 0}
    for offset in np.linspace(0, len(good) - 1, 41).astype(int):
        _flip(path, int(offset))
        try:
            read_run(fake, "a", 1)
            outcomes["read"] += 1
        except st.CorruptUnitError as exc:
            assert str(exc).startswith(f"{path}: corrupt unit file: not readable as Parquet (")
            outcomes["corrupt"] += 1
        except CoverageError as exc:   # a flipped date: outside its window, the file named
            assert str(exc).startswith(f"{path}: ")
            outcomes["coverage"] += 1
        path.write_bytes(good)
    assert outcomes["corrupt"] >= 1, outcomes   # the footer and page headers at least
    path.write_bytes(good[:-10])                # truncated: the footer is gone
    assert st.unit_status(fake, KEY, "hash-a").state == "corrupt"
    code, _, err = _compare(fake, capsys)
    assert code == 2 and "not readable as Parquet" in _one_error_line(err)


# --------------------------------------------------------------------------- data changed after training
@pytest.fixture
def trained_on(fake, tiny_data, tmp_path) -> Path:
    """``fake`` recorded as trained on a copy of the tiny minute store (its fingerprint in the manifest)."""
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    st.write_manifest(fake, pipelines={}, extra={"data": st.data_identity(data)})
    return data


def test_a_close_changed_after_training_is_a_loud_warning(fake, trained_on, capsys):
    """The issue: compare and report were byte-identical after a close was multiplied by 1.05."""
    code, before, _ = _compare(fake, capsys, "--json")
    assert code == 0 and not any("WARNING" in n for n in json.loads(before)["notes"])
    close = trained_on / "features" / "aapl" / "close.1min.bin"
    values = np.fromfile(close, dtype="<f4")
    values[len(values) // 2] *= 1.05
    values.tofile(close)
    code, after, _ = _compare(fake, capsys, "--json")
    notes = json.loads(after)["notes"]
    assert code == 0 and notes[0].startswith(f"WARNING: the data changed after training: {trained_on} is not the "
                                             f"data these units were trained on (features ")
    assert "re-run 'rolling-calib run' on this store to recompute the units" in notes[0]
    _, text, _ = _compare(fake, capsys)
    assert "WARNING: the data changed after training" in text
    for command in (["diagnose", "--store", str(fake), "--json"], ["metaeval", "--store", str(fake), "--json", "--n-boot", "50"]):
        assert main(command) == 0
        assert json.loads(capsys.readouterr().out)["notes"][0] == notes[0]
    assert main(["report", "--store", str(fake), "--n-boot", "50"]) == 0
    assert "WARNING: the data changed after training" in (fake / "report" / "report.md").read_text()


def test_data_that_cannot_be_reached_is_said_once(fake, trained_on):
    shutil.rmtree(trained_on)
    assert check_data(st.Store.open(fake)).state == "unreachable"
    notes = score_store(fake).notes
    assert notes == [f"the data the units were trained on ({trained_on}) is not reachable from here: whether it "
                     f"changed after training was not checked"]
    assert store_notes(st.Store.open(fake), ["a", "b"]) == notes
