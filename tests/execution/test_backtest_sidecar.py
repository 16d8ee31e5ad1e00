"""The backtest sidecar read typed: backtest_status's states on hand-written files (no Qlib run)."""

from __future__ import annotations

import pandas as pd
import pytest

from rolling_calib.core.fingerprint import stable_hash
from rolling_calib.execution import store as st
from rolling_calib.execution.backtests import BacktestSidecar, backtest_inputs, backtest_status
from rolling_calib.execution.manifest import ManifestFieldError
from rolling_calib.execution.units import UnitKey


@pytest.fixture
def seed_backtest(tmp_path):
    """A store with two units of p/seed0 and the seed's backtest file and sidecar as ``_write`` writes them."""
    for w in (0, 1):
        st.atomic_write_json(st.unit_paths(tmp_path, UnitKey("p", 0, w)).sidecar,
                             {"config_hash": "cfg", "rows": 4, "sha256": f"unit{w}"})
    inputs = backtest_inputs(tmp_path, "p", 0, [0, 1], "cfg")
    parquet, sidecar = st.backtest_paths(tmp_path, "p", 0)
    sha = st.write_unit_parquet(parquet, pd.DataFrame({"date": pd.to_datetime(["2018-01-02"]),
                                                       "excess_return": [0.01], "excess_return_cost": [0.009]})).sha256
    st.atomic_write_json(sidecar, {"backtest_hash": "bt", "inputs": stable_hash(dict(inputs)), "sha256": sha,
                                   "rows": 1, "units": inputs["units"], "config_hash": "cfg"})
    return tmp_path, inputs, sidecar


def test_inputs_name_each_units_checksum_and_a_missing_unit_as_none(tmp_path):
    st.atomic_write_json(st.unit_paths(tmp_path, UnitKey("p", 0, 0)).sidecar, {"config_hash": "cfg", "rows": 4})
    st.atomic_write_json(st.unit_paths(tmp_path, UnitKey("p", 0, 1)).sidecar, {"config_hash": "cfg", "sha256": "ab"})
    assert backtest_inputs(tmp_path, "p", 0, [0, 1, 2], "cfg") == {
        "config_hash": "cfg", "units": {"w00": "cfg/4", "w01": "ab", "w02": None}}


def test_a_complete_backtest_has_a_typed_sidecar(seed_backtest):
    root, inputs, _ = seed_backtest
    status = backtest_status(root, "p", 0, expected_hash="bt", inputs=inputs)
    assert status.complete
    assert isinstance(status.sidecar, BacktestSidecar)
    assert (status.sidecar.backtest_hash, status.sidecar.rows) == ("bt", 1)
    assert status.sidecar.sha256 == st.file_sha256(st.backtest_paths(root, "p", 0)[0])


def test_stale_outdated_corrupt_and_missing(seed_backtest):
    root, inputs, _ = seed_backtest
    assert backtest_status(root, "p", 0, expected_hash="other", inputs=inputs).state == "stale"
    retrained = {"config_hash": "cfg", "units": {**inputs["units"], "w01": "new"}}
    assert backtest_status(root, "p", 0, expected_hash="bt", inputs=retrained).state == "outdated"
    parquet = st.backtest_paths(root, "p", 0)[0]
    parquet.write_bytes(parquet.read_bytes() + b"x")
    corrupt = backtest_status(root, "p", 0, expected_hash="bt", inputs=inputs)
    assert corrupt.state == "corrupt" and str(parquet) in corrupt.why
    assert backtest_status(root, "p", 1, expected_hash="bt", inputs=inputs).state == "missing"


def test_a_field_of_the_wrong_type_is_refused_naming_file_field_expected_and_found(seed_backtest):
    root, inputs, sidecar = seed_backtest
    st.atomic_write_json(sidecar, {"backtest_hash": ["bt"], "inputs": "i", "sha256": "s"})
    with pytest.raises(ManifestFieldError, match=r"seed0\.json: backtest_hash: expected a string, found \['bt'\]"):
        backtest_status(root, "p", 0, expected_hash="bt", inputs=inputs)
