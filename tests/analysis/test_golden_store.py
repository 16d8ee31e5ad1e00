"""Behaviour kept across issue 16: a store written before it scores to the same JSON, and a new run gives it too.

``tests/fixtures/golden_tiny_demo`` was written by the code before the change (commit 243d9ac; its
README says how): a tiny demo run's store (manifest, sidecars, Parquet) and the JSON of
``compare`` (three calibration rules), ``diagnose`` and ``metaeval`` on it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rolling_calib.analysis.integrity import store_notes
from rolling_calib.analysis.scoring import score_store
from rolling_calib.cli import main
from rolling_calib.core.label import Label
from rolling_calib.execution import store as st
from rolling_calib.execution.reader import MissingLabelError

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden_tiny_demo"
#: (file of the fixture, command line after ``rolling-calib``; STORE is ``out/store``)
COMMANDS = [
    ("compare.json", ["compare", "out/store", "--json"]),
    ("compare_source_validation.json", ["compare", "out/store", "--json", "--source", "validation"]),
    ("compare_per_instrument_week.json", ["compare", "out/store", "--json", "--bias", "per_instrument", "--period", "week"]),
    ("diagnose.json", ["diagnose", "out/store", "--json"]),
    ("metaeval.json", ["metaeval", "out/store", "--json", "--n-boot", "200"]),
]


def _outputs(cwd: Path, monkeypatch, capsys) -> dict[str, str]:
    """The stdout of every command of :data:`COMMANDS`, run in ``cwd`` (so the store prints as ``out/store``)."""
    monkeypatch.chdir(cwd)
    out = {}
    for name, argv in COMMANDS:
        capsys.readouterr()
        assert main(argv) == 0, capsys.readouterr().err
        out[name] = capsys.readouterr().out
    return out


@pytest.fixture
def old_store(tmp_path) -> Path:
    shutil.copytree(GOLDEN / "store", tmp_path / "out" / "store")
    return tmp_path / "out" / "store"


def _without_store_notes(text: str, notes: list[str]) -> str:
    """``text`` (a command's JSON) without the store's integrity ``notes`` (checked to be there first)."""
    data = json.loads(text)
    assert data["notes"][: len(notes)] == notes
    data["notes"] = data["notes"][len(notes):]
    return json.dumps(data, indent=2) + "\n"


def test_a_store_written_before_the_change_scores_to_the_same_json(old_store, monkeypatch, capsys):
    """The same JSON, and the notes of issue 19 first: units without checksums, the data (its directory
    was a temporary one: unreachable on most machines, unchanged where it is still there)."""
    got = _outputs(old_store.parents[1], monkeypatch, capsys)
    notes = store_notes(Path("out/store"), st.read_manifest(old_store), ["wd0", "wd1e-2"])
    assert any(n.startswith("8 unit(s) of out/store were written before checksums") for n in notes)
    for name, _ in COMMANDS:
        assert _without_store_notes(got[name], notes) == (GOLDEN / name).read_text(), name


def test_its_label_is_described_from_its_manifest(old_store):
    assert "labels" not in st.read_manifest(old_store)["pipelines"]["wd0"]   # written before labels were recorded
    scores = score_store(old_store)
    assert scores.label == Label(kind="raw", expression="1e4 * (close[t+10]/close[t] - 1)", unit="bp")
    assert scores.label.loss_unit == "bp²"
    assert scores.notes == store_notes(old_store, st.read_manifest(old_store), ["wd0", "wd1e-2"])   # issue 19's only
    with pytest.raises(MissingLabelError, match="holds no learn label .* re-run the store"):
        score_store(old_store, label="learn")


@pytest.mark.slow
def test_the_tiny_demo_run_by_the_new_code_gives_the_same_numbers(tmp_path, monkeypatch, capsys):
    """The run of the fixture (same config, same seeds): same units to the bit, same hashes, same JSON."""
    args = ["demo", "--out", str(tmp_path / "out"), "--seeds", "2", "--workers", "1", "--config",
            str(GOLDEN / "tiny_demo.yaml"), "--n-boot", "100", "--no-tracking", "--json"]
    assert main(args) == 0, capsys.readouterr().err
    store = tmp_path / "out" / "store"
    old, new = st.read_manifest(GOLDEN / "store"), st.read_manifest(store)
    for name in ("wd0", "wd1e-2"):
        assert new["pipelines"][name]["config_hash"] == old["pipelines"][name]["config_hash"]
        assert new["pipelines"][name]["calibration"] == old["pipelines"][name]["calibration"]
    assert new["experiment"]["rolling"] == old["experiment"]["rolling"]   # what the shared hash covers of it
    units = sorted(p.relative_to(GOLDEN / "store") for p in (GOLDEN / "store" / "units").rglob("*.parquet"))
    assert len(units) == 16
    for rel in units:   # predictions and labels to the bit; no label column added (learn equals raw here)
        assert (store / rel).read_bytes() == (GOLDEN / "store" / rel).read_bytes(), rel
    got = _outputs(tmp_path, monkeypatch, capsys)
    for name, _ in COMMANDS:
        assert got[name] == (GOLDEN / name).read_text(), name
