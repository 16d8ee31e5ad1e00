"""The one store reader and the one completeness rule: missing, stale and corrupt units, label columns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rolling_calib.analysis.scoring import score_store
from rolling_calib.execution import store as st
from rolling_calib.execution.executors import UnitKey
from rolling_calib.execution.manifest import Sidecar
from rolling_calib.execution.reader import MissingLabelError, load_run, read_run, read_unit
from runner_helpers import write_fake_store

PIPES = {"a": {"bias_sd": 0.5}, "b": {"bias_sd": 1.0}}


@pytest.fixture
def fake(tmp_path):
    write_fake_store(tmp_path, pipelines=PIPES, seeds=2)
    return tmp_path


def test_the_completeness_rule(fake):
    key = UnitKey("a", 1, 1)
    entry = st.read_manifest(fake)["pipelines"]["a"]
    assert st.unit_status(fake, key, entry["config_hash"]).complete
    paths = st.unit_paths(fake, key)
    parquet = paths.parquet.read_bytes()
    paths.parquet.unlink()                                   # sidecar without its Parquet file: missing
    status = st.unit_status(fake, key, entry["config_hash"])
    assert status.state == "missing" and status.problem(fake) == f"{fake}: unit a__seed1__w01 is missing"
    paths.parquet.write_bytes(parquet)
    assert st.unit_status(fake, key, "another-hash").state == "stale"   # a sidecar naming another config: stale
    assert st.unit_status(fake, key, "another-hash").problem(fake) == (
        f"{fake}: unit a__seed1__w01 is stale (config hash {entry['config_hash']}, expected another-hash)")
    done, notes = st.Store.open(fake).complete_units("a")
    assert len(done) == 2 * 2 and notes == []
    paths.sidecar.write_text("{broken")                     # a corrupt sidecar is damage, never "incomplete"
    with pytest.raises(st.CorruptStoreFileError, match=f"{paths.sidecar}: corrupt unit sidecar"):
        st.unit_status(fake, key, entry["config_hash"])
    with pytest.raises(st.CorruptStoreFileError):
        score_store(fake)


def test_every_reader_uses_the_rule(fake):
    """Scoring, the run reader and the frame reader agree on what is complete (the runner uses the same rule)."""
    st.unit_paths(fake, UnitKey("b", 0, 0)).parquet.unlink()
    with pytest.raises(ValueError, match="unit b__seed0__w00 is missing"):
        read_run(fake, "b", 0)
    with pytest.raises(ValueError, match="unit b__seed0__w00 is missing"):
        load_run(fake, "b", 0)
    scores = score_store(fake)
    assert scores.incomplete == [f"b/seed0: {fake}: unit b__seed0__w00 is missing"]
    assert len(scores.runs) == 3
    notes = st.Store.open(fake).complete_units("b")[1]
    assert notes == [f"{fake}: unit b__seed0__w00 is missing"]


def _add_learn_column(store, key, *, nan_rows: int = 0, valid: bool = False):
    """Give a unit a learned label (a rank-like transform of its raw label) in ``label_learn``, as the runner does."""
    paths = st.unit_paths(store, key)
    frame = pd.read_parquet(paths.parquet)
    learn = frame["label"].rank(pct=True).to_numpy() - 0.5
    learn[:nan_rows] = np.nan
    side = st.read_sidecar(store, key)
    side.update(st.write_unit_parquet(paths.parquet, frame.assign(label_learn=learn)).fields())
    side["label_columns"] = {"raw": "label", "learn": "label_learn"}
    st.atomic_write_json(paths.sidecar, side)
    return frame.assign(label_learn=learn)


def test_the_other_label_column_is_read_and_its_missing_rows_counted(fake):
    frames = [_add_learn_column(fake, UnitKey("a", 0, w), nan_rows=3) for w in (0, 1)]
    raw = read_run(fake, "a", 0)
    learn = read_run(fake, "a", 0, label="learn")
    assert (raw.label, learn.label) == ("raw", "learn")
    merged = pd.concat(frames, ignore_index=True)
    keep = merged["label_learn"].notna().to_numpy()
    assert learn.test.dropped == 6 and raw.test.dropped == 0
    np.testing.assert_array_equal(learn.test.label, merged["label_learn"].to_numpy()[keep])
    np.testing.assert_array_equal(learn.test.prediction, merged["prediction"].to_numpy()[keep])
    np.testing.assert_array_equal(raw.test.label, merged["label"].to_numpy())
    frame = load_run(fake, "a", 0, label="learn")
    assert frame.attrs["dropped"] == 6 and len(frame) == keep.sum()
    assert read_unit(fake, UnitKey("a", 0, 0), column="label_learn")["label"].isna().sum() == 3


def test_a_label_the_units_do_not_hold_is_refused_naming_the_fix(fake):
    with pytest.raises(MissingLabelError, match=(f"{fake}: unit a__seed0__w00 holds no learn label \\(it holds: raw; "
                                                 ".*score it with --label raw, or re-run the store")):
        score_store(fake, label="learn")
    with pytest.raises(ValueError, match="label: expected 'auto', 'raw' or 'learn', found 'both'"):
        read_run(fake, "a", 0, label="both")
    with pytest.raises(ValueError, match="^label: expected 'auto', 'raw' or 'learn', found 'both'$"):   # not "no complete run"
        score_store(fake, label="both")


def test_old_sidecars_hold_the_stores_label_kind():
    from rolling_calib.execution.manifest import Manifest

    def label_columns(side, manifest):
        return Sidecar.from_dict(side).columns(Manifest.from_dict({"pipelines": {}, **manifest}, source="m").stored_label_kind)

    assert label_columns({"label": "learn"}, {}) == {"learn": "label"}
    assert label_columns({}, {"experiment": {"rolling": {"label": "learn"}}}) == {"learn": "label"}
    assert label_columns({}, {"experiment": {"rolling": {"label": "auto"}}}) == {"raw": "label"}   # auto stores raw
    assert label_columns({}, {}) == {"raw": "label"}
    assert label_columns({"label": "raw", "label_columns": {"raw": "label", "learn": "label"}}, {}) == {
        "raw": "label", "learn": "label"}
