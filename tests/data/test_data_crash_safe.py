"""Crash-safe stores: a write killed at any point is refused by readers and completed by a re-run.

The kills are deterministic: the writer reaches a named fault point (``$DATA_PREP_FAULT_AT``,
:func:`data_prep.qlib_store._fault_point`) and ends its process with ``os._exit`` -- no
cleanup, as after ``kill -9`` -- in a child process running the real CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from data_helpers import clean_day_rows, write_vendor_csv
from data_prep import qlib_store
from data_prep.ingest import IngestOptions, StoreConflict, ingest
from data_prep.qlib_store import COMMIT_FILE, FAULT_ENV, FAULT_EXIT_CODE, StoreBusyError, StoreNotCommittedError
from rolling_calib.cli import main
from rolling_calib.core.validation import ConfigError

D1, D2, D3 = "2018-02-15", "2018-02-16", "2018-02-20"
REPAIR = IngestOptions(mode="repair")
NOT_WRITTEN = "the store was not completely written"


def _cli(argv, fault=None):
    """Run ``rolling-calib`` in a child process, killed at the fault point ``fault``."""
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    if fault:
        env[FAULT_ENV] = fault
    return subprocess.run([sys.executable, "-m", "rolling_calib.cli", *map(str, argv)], capture_output=True,
                          text=True, env=env, timeout=300, check=False)


def _ingest_argv(src, store):
    return ["data", "ingest", str(src), "--out", str(store), "--repair", "--no-progress"]


def _synth_argv(store):
    return ["data", "synth", "--out", str(store), "--start", "2018-01-02", "--end", "2018-01-05", "--symbols", "AAPL,F",
            "--seed", "3", "--no-progress"]


def _snapshot(store):
    """Every file's bytes; ``meta.json`` without its time stamps (``when``, ``seconds``)."""
    out = {}
    for p in sorted(store.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            if p.name == qlib_store.META_FILE:
                meta = json.loads(data)
                meta.pop("seconds", None)
                for u in meta.get("updates", []):
                    u.pop("when", None)
                data = json.dumps(meta, sort_keys=True).encode()
            out[p.relative_to(store).as_posix()] = data
    return out


def _leftovers(store):
    return sorted(p.name for p in store.parent.iterdir() if p.name.startswith(store.name + "."))


def _assert_refused(store, capsys, *, what=NOT_WRITTEN):
    """``data info``, ``init_qlib`` and an experiment's ``qlib_init`` refuse the store, naming it."""
    from data_prep import init_qlib
    from rolling_calib.qlib_adapter.session import resolve_qlib_init

    path = str(store.resolve())
    code = main(["data", "info", str(store)])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"error: {path}: ") and what in err and "Traceback" not in err
    with pytest.raises(StoreNotCommittedError) as exc:
        init_qlib(store)
    assert str(exc.value).startswith(f"{path}: ") and what in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        resolve_qlib_init({"provider_uri": {"1min": str(store)}}, "exp.yaml")
    assert str(exc.value).startswith(f"exp.yaml: qlib_init.provider_uri: {path}: ") and what in str(exc.value)


def _assert_readable(store):
    from rolling_calib.qlib_adapter.session import resolve_qlib_init

    assert qlib_store.check_committed(store) == store.resolve()
    assert qlib_store.store_info(store)["calendar"]["bars"] > 0
    assert resolve_qlib_init({"provider_uri": str(store)}, "exp.yaml")["provider_uri"] == {"1min": str(store.resolve())}


@pytest.fixture
def deliveries(tmp_path):
    """Two vendor deliveries of one symbol: D1, D2, then D2 again and D3."""
    first = write_vendor_csv(tmp_path / "in1" / "UP.csv", clean_day_rows(D1, seed=0) + clean_day_rows(D2, seed=1))
    second = write_vendor_csv(tmp_path / "in2" / "UP.csv", clean_day_rows(D2, seed=1) + clean_day_rows(D3, seed=7))
    return first, second


def test_new_store_killed_between_calendar_and_instruments_is_refused_then_completed(tmp_path, deliveries, capsys):
    src, _ = deliveries
    store = tmp_path / "store"
    res = _cli(_ingest_argv(src, store), fault="ingest:calendar_written")
    assert res.returncode == FAULT_EXIT_CODE, res.stderr
    assert not store.exists() and _leftovers(store) == [f"store.staging-{_pid(tmp_path, 'store')}"]
    _assert_refused(store, capsys)
    assert main(_ingest_argv(src, store)) == 0  # the same command again
    assert "wrote 780 bars" in capsys.readouterr().out
    assert _leftovers(store) == []
    clean = ingest([src], tmp_path / "clean", options=REPAIR).store
    assert _snapshot(store) == _snapshot(clean)
    assert qlib_store.read_instruments(store)["UP"][1].strftime("%F %R") == f"{D2} 15:59"
    _assert_readable(store)


def _pid(tmp_path, name):
    """The pid in the name of the staging directory beside ``tmp_path / name``."""
    (staging,) = [p for p in tmp_path.iterdir() if p.name.startswith(f"{name}.staging-")]
    return staging.name.rsplit("-", 1)[1]


def test_append_killed_between_calendar_and_instruments_is_refused_then_completed(tmp_path, deliveries, capsys):
    first, second = deliveries
    reference = ingest([first], tmp_path / "reference", options=REPAIR).store
    ingest([second], reference, options=REPAIR)
    store = ingest([first], tmp_path / "store", options=REPAIR).store
    before = _snapshot(store)
    res = _cli(_ingest_argv(second, store), fault="ingest:calendar_written")
    assert res.returncode == FAULT_EXIT_CODE, res.stderr
    # the published store is the previous one, byte for byte (the staging copy's hard links were not written
    # through), but a reader cannot know the update is missing: refused until the update completes
    assert _snapshot(store) == before and len(_leftovers(store)) == 1
    _assert_refused(store, capsys)
    assert main(_ingest_argv(second, store)) == 0
    assert "appended 390 bars (1 new sessions; 390 already stored with the same values)" in capsys.readouterr().out
    assert _snapshot(store) == _snapshot(reference) and _leftovers(store) == []
    assert len(qlib_store.read_meta(store)["updates"]) == 2
    _assert_readable(store)


def test_append_killed_between_the_two_renames_restores_and_completes(tmp_path, deliveries, capsys):
    first, second = deliveries
    reference = ingest([first], tmp_path / "reference", options=REPAIR).store
    ingest([second], reference, options=REPAIR)
    store = ingest([first], tmp_path / "store", options=REPAIR).store
    res = _cli(_ingest_argv(second, store), fault="publish:old_moved")
    assert res.returncode == FAULT_EXIT_CODE, res.stderr
    assert not store.exists() and [n.split("-")[0] for n in _leftovers(store)] == ["store.old", "store.staging"]
    _assert_refused(store, capsys)
    assert main(_ingest_argv(second, store)) == 0
    assert _snapshot(store) == _snapshot(reference) and _leftovers(store) == []


def test_synthetic_build_killed_midway_is_refused_then_completed(tmp_path, capsys):
    store, clean = tmp_path / "synth", tmp_path / "clean"
    res = _cli(_synth_argv(store), fault="synth:symbol_written")
    assert res.returncode == FAULT_EXIT_CODE, res.stderr
    assert not store.exists() and len(_leftovers(store)) == 1
    _assert_refused(store, capsys)
    assert main(_synth_argv(store)) == 0
    capsys.readouterr()
    assert main(_synth_argv(clean)) == 0
    assert _snapshot(store) == _snapshot(clean) and _leftovers(store) == []
    _assert_readable(store)
    # a rebuild over an existing store, killed midway: the previous store is intact, refused until rebuilt
    before = _snapshot(store)
    res = _cli([*_synth_argv(store)[:-3], "--seed", "9", "--no-progress"], fault="synth:symbol_written")
    assert res.returncode == FAULT_EXIT_CODE and _snapshot(store) == before
    _assert_refused(store, capsys)
    assert main(_synth_argv(store)) == 0
    assert _snapshot(store) == before and _leftovers(store) == []


def test_failed_write_leaves_no_trace_and_keeps_other_files(tmp_path, deliveries):
    first, second = deliveries
    store = ingest([first], tmp_path / "store", options=REPAIR).store
    (store / "notes.txt").write_text("mine")
    before = _snapshot(store)
    rows = clean_day_rows(D2, seed=1) + clean_day_rows(D3, seed=7)
    rows[5] = rows[5][:6] + (rows[5][6] + 1.0,)
    with pytest.raises(StoreConflict):
        ingest([write_vendor_csv(tmp_path / "bad" / "UP.csv", rows)], store, options=REPAIR)
    assert _snapshot(store) == before and _leftovers(store) == []
    ingest([second], store, options=REPAIR)
    assert (store / "notes.txt").read_text() == "mine" and _leftovers(store) == []
    qlib_store.check_committed(store)


def test_a_write_in_progress_is_not_disturbed(tmp_path, deliveries):
    first, _ = deliveries
    store = tmp_path / "store"
    busy = tmp_path / f"store.staging-{os.getppid()}"  # a live process's staging directory
    busy.mkdir()
    with pytest.raises(StoreBusyError, match=rf"{store}: another process \(pid {os.getppid()}\) is writing"):
        ingest([first], store, options=REPAIR)
    assert busy.is_dir() and not store.exists()
    with pytest.raises(StoreNotCommittedError, match="or is still running"):
        qlib_store.check_committed(store)


def test_older_stores_without_marker_are_read_when_consistent(tmp_path, deliveries):
    first, second = deliveries
    store = ingest([first], tmp_path / "store", options=REPAIR).store
    (store / COMMIT_FILE).unlink()
    _assert_readable(store)
    ingest([second], store, options=REPAIR)  # extended, and committed from now on
    assert qlib_store.store_status(store).committed and (store / COMMIT_FILE).is_file()
    # a stale marker (the store rewritten by another tool) counts for nothing; consistency decides
    marker = json.loads((store / COMMIT_FILE).read_text())
    marker["calendar"]["bytes"] += 20
    (store / COMMIT_FILE).write_text(json.dumps(marker))
    _assert_readable(store)
    (store / "instruments" / "us25.txt").write_text("UP\t2018-02-15 09:30:00\t2018-02-16 15:59:00\n")
    with pytest.raises(StoreNotCommittedError, match=r"stale commit marker .* instruments/us25.txt gives UP"):
        qlib_store.check_committed(store)


def test_broken_new_store_of_an_older_version_is_refused_then_rewritten(tmp_path, deliveries, capsys):
    """The issue's first case: calendar written, no instrument file (the old re-run appended 0 bars)."""
    first, _ = deliveries
    clean = ingest([first], tmp_path / "clean", options=REPAIR).store
    store = tmp_path / "store"
    shutil.copytree(clean, store)
    for name in (COMMIT_FILE, "meta.json"):
        (store / name).unlink()
    shutil.rmtree(store / "instruments")
    _assert_refused(store, capsys, what="instruments/all.txt lists no instrument")
    assert main(_ingest_argv(first, store)) == 0
    assert "wrote 780 bars" in capsys.readouterr().out
    assert _snapshot(store) == _snapshot(clean)


def test_broken_append_of_an_older_version_is_refused_then_redone(tmp_path, deliveries, capsys):
    """The issue's second case: every instrument ends at the old date while the calendar runs on."""
    first, second = deliveries
    reference = ingest([first], tmp_path / "reference", options=REPAIR).store
    ingest([second], reference, options=REPAIR)
    store = ingest([first], tmp_path / "store", options=REPAIR).store
    # what the old append left when killed after its calendar: features extended in place, new calendar,
    # old instrument files and meta.json, no commit marker
    (store / COMMIT_FILE).unlink()
    for p in (reference / "features").rglob("*.bin"):
        shutil.copyfile(p, store / p.relative_to(reference))
    shutil.copyfile(reference / "calendars" / "1min.txt", store / "calendars" / "1min.txt")
    _assert_refused(store, capsys, what=f"its calendar runs to {D3} 15:59:00 while every instrument")
    assert main(_ingest_argv(second, store)) == 0
    assert "appended 390 bars (1 new sessions; 390 already stored with the same values)" in capsys.readouterr().out
    assert _snapshot(store) == _snapshot(reference)
    # a broken store that cannot be completed in place is refused by the writer too
    (store / COMMIT_FILE).unlink()
    (store / "instruments" / "all.txt").write_text("UP\t2018-02-15 09:30:00\t2018-02-21 15:59:00\n")
    with pytest.raises(StoreNotCommittedError, match="cannot be completed in place; remove it"):
        ingest([second], store, options=REPAIR)
