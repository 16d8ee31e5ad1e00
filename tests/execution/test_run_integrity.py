"""Issue 19 on a real run: damaged units are recomputed to the same bytes, a full disk is one line, bounds refuse early.

A tiny real experiment (``sweep_helpers.tiny_experiment``: 2 symbols, 2 monthly windows, a tiny LSTM,
fine-tune mode) is run once through ``rolling-calib run``; each test damages a copy of its store.
The full disk is the kernel's own: writes are sent to ``/dev/full`` (ENOSPC).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from rolling_calib.cli import main
from rolling_calib.config.experiment import load_experiment
from rolling_calib.execution import store as st
from rolling_calib.execution.runner import execute_unit, plan_run
from rolling_calib.execution.units import UnitKey

from sweep_helpers import tiny_experiment

W0, W1 = UnitKey("base", 1, 0), UnitKey("base", 1, 1)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> Path:
    return tiny_experiment(tmp_path_factory.mktemp("integrity"), seeds=2)


@pytest.fixture(scope="module")
def trained(experiment) -> Path:
    store = experiment.parent / "store"
    assert main(["run", str(experiment), "--store", str(store), "--no-tracking", "--json"]) == 0
    return store


@pytest.fixture
def store(trained, tmp_path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(trained, copy)
    return copy


def _units(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted((store / "units").rglob("*.parquet"))}


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _run(experiment: Path, store: Path, capsys) -> tuple[int, dict | None, str]:
    """``rolling-calib run`` on one worker: units run in this process, where the tests patch the writes."""
    capsys.readouterr()
    code = main(["run", str(experiment), "--store", str(store), "--workers", "1", "--no-tracking", "--json"])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 else None), out.err


def _error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("rolling-calib run: error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# --------------------------------------------------------------------------- damaged units
@pytest.mark.slow
def test_a_flipped_byte_stops_compare_and_run_recomputes_the_same_numbers(experiment, trained, store, capsys):
    """Done when: compare exits non-zero naming the file; the next run recomputes it to the bytes before the damage."""
    assert main(["compare", "--store", str(store), "--json", "--n-boot", "50"]) == 0
    before = capsys.readouterr().out
    path = st.unit_paths(store, W1).parquet
    _flip(path, path.stat().st_size // 2)
    assert main(["compare", "--store", str(store), "--json", "--n-boot", "50"]) == 2
    err = capsys.readouterr().err
    assert f"rolling-calib compare: error: {path}: corrupt unit file: its XXH3-128 is " in err
    code, summary, err = _run(experiment, store, capsys)
    assert code == 0 and summary["corrupt_units_moved"] == ["base__seed1__w01"] and summary["units_ran"] == 1
    assert f"rolling-calib run: {path}: corrupt unit file: its XXH3-128 is " in err and "and recomputed" in err
    assert _units(store) == _units(trained)                      # the same bytes: the same numbers
    moved = list((store / "corrupt" / "base").rglob("w01.*"))
    assert sorted(p.suffix for p in moved) == [".json", ".log", ".parquet", ".parquet", ".pt", ".txt"]   # + the unit's log
    assert main(["compare", "--store", str(store), "--json", "--n-boot", "50"]) == 0
    assert capsys.readouterr().out == before


@pytest.mark.slow
def test_a_damaged_first_window_is_recomputed_with_the_windows_after_it(experiment, trained, store, capsys):
    path = st.unit_paths(store, W0).parquet
    path.write_bytes(path.read_bytes()[:-100])                   # truncated
    code, summary, _ = _run(experiment, store, capsys)
    assert code == 0 and summary["corrupt_units_moved"] == ["base__seed1__w00"] and summary["units_ran"] == 2
    assert _units(store) == _units(trained)


@pytest.mark.slow
def test_a_corrupt_checkpoint_a_window_fine_tunes_from_is_recomputed_not_a_torch_traceback(
        experiment, trained, store, capsys):
    for path in (st.unit_paths(store, W1).sidecar, st.unit_paths(store, W1).parquet):
        path.unlink()                                            # window 1 to compute: it fine-tunes from w00.pt
    checkpoint = st.unit_paths(store, W0).checkpoint
    _flip(checkpoint, checkpoint.stat().st_size // 2)
    plan = plan_run(load_experiment(experiment), store=store)
    with pytest.raises(RuntimeError, match=(f"unit base__seed1__w01: cannot fine-tune from {checkpoint}: corrupt "
                                            f"checkpoint of unit base__seed1__w00: .* re-run to recompute "
                                            f"base__seed1__w00 and the windows after it")):
        execute_unit(plan, W1)
    code, summary, err = _run(experiment, store, capsys)
    assert code == 0 and summary["corrupt_units_moved"] == ["base__seed1__w00"] and summary["units_ran"] == 2
    assert f"{checkpoint}: corrupt checkpoint of unit base__seed1__w00" in err
    assert _units(store) == _units(trained)


# --------------------------------------------------------------------------- a full disk during run
def _fill_disk(monkeypatch, name: str) -> None:
    """Store writes of files called ``name`` go to the full device (ENOSPC from the kernel)."""
    from data_prep import atomic

    original = atomic._write_data

    def to_full_device(fh, data: bytes) -> None:
        if not Path(fh.name).name.startswith(f".{name}."):
            return original(fh, data)
        with open("/dev/full", "wb") as full:
            full.write(data)

    monkeypatch.setattr(atomic, "_write_data", to_full_device)


full_disk = pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")


@pytest.mark.slow
@full_disk
def test_a_full_disk_writing_a_unit_is_one_line_and_nothing_half_written(experiment, trained, store, monkeypatch,
                                                                         capsys):
    paths = st.unit_paths(store, W1)
    paths.sidecar.unlink()
    _fill_disk(monkeypatch, "w01.parquet")
    code, _, err = _run(experiment, store, capsys)
    line = _error_line(err)
    assert code == 1
    assert line.startswith(f"rolling-calib run: error: {paths.parquet}: cannot write: the disk is full (No space "
                           f"left on device; ")
    assert " free on its file system); free space there, or write to another disk, then re-run (unit " in line
    assert line.endswith(f"base__seed1__w01 not stored; 0 unit(s) completed and kept in {store})")
    assert st.unit_status(store, W1, st.read_sidecar(trained, W1)["config_hash"]).state == "missing"
    assert not list(store.rglob("*.tmp"))
    monkeypatch.undo()
    code, summary, _ = _run(experiment, store, capsys)
    assert code == 0 and summary["units_ran"] == 1 and _units(store) == _units(trained)


@pytest.mark.slow
@full_disk
def test_a_full_disk_writing_a_checkpoint_names_the_checkpoint(experiment, store, monkeypatch, capsys):
    from rolling_calib.qlib_adapter import model

    st.unit_paths(store, W1).sidecar.unlink()

    def to_full_device(path, data):
        with open("/dev/full", "wb") as full:
            full.write(data)

    monkeypatch.setattr(model, "atomic_write_bytes", to_full_device)
    code, _, err = _run(experiment, store, capsys)
    line = _error_line(err)
    assert code == 1 and line.startswith(f"rolling-calib run: error: {st.unit_paths(store, W1).checkpoint}: cannot "
                                         f"write: the disk is full (No space left on device; ")


@full_disk
def test_a_full_disk_writing_the_manifest_stops_before_any_unit(experiment, tmp_path, monkeypatch, capsys):
    _fill_disk(monkeypatch, "manifest.json")
    code, _, err = _run(experiment, tmp_path / "new", capsys)
    line = _error_line(err)
    assert code == 2 and f"{tmp_path / 'new' / 'manifest.json'}: cannot write: the disk is full" in line
    assert not (tmp_path / "new" / "units").exists()


# --------------------------------------------------------------------------- bounds before training
def _variant(experiment: Path, tmp_path: Path, change) -> Path:
    doc = yaml.safe_load(experiment.read_text())
    change(doc)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _model(**kwargs):
    return lambda doc: doc["task"]["model"]["kwargs"].update(kwargs)


@pytest.mark.parametrize(("change", "message"), [
    (lambda doc: doc["rolling"].update(seeds=1_000_000_000),
     "rolling.seeds: expected at most 10000 seeds, found a count of 1000000000"),
    (lambda doc: doc["rolling"].update(seeds=[0, 2**32]), "rolling.seeds[1]: expected a non-negative integer seed below 2**32"),
    (_model(hidden_size=100_000_000), "task.model.kwargs.hidden_size: expected an integer in [1, 16384]"),  # issue 30
    (_model(hidden_size=16_384, num_layers=256), "pipelines.base: one unit needs about "),  # within each bound
    (lambda doc: doc["task"]["dataset"]["kwargs"].update(step_len=1_000_000_000),
     "task.dataset.kwargs.step_len: expected an integer in [1, 1000000]"),
    (lambda doc: doc.update(pipelines={"p" * 300: {}}), "pipelines: invalid pipeline name: expected a name of at most 100"),
    (lambda doc: doc.update(pipelines={"a b": {}}), "pipelines: invalid pipeline name: expected a name of letters"),
])
def test_resource_bounds_exit_2_before_anything_is_written(experiment, tmp_path, capsys, change, message):
    variant = _variant(experiment, tmp_path, change)
    store = tmp_path / "store"
    code, _, err = _run(variant, store, capsys)
    assert code == 2 and message in _error_line(err)
    assert not store.exists()


def test_the_memory_refusal_names_the_number_and_the_knob(experiment, tmp_path, capsys):
    variant = _variant(experiment, tmp_path, _model(hidden_size=16_384, num_layers=256))  # each within its bound
    code, _, err = _run(variant, tmp_path / "store", capsys)
    line = _error_line(err)
    assert "(parameters " in line and "TiB" in line and " available to each of 1 worker(s) (" in line
    assert "the largest part, parameters, is set by task.model.kwargs.hidden_size / num_layers" in line
