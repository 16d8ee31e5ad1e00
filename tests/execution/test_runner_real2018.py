"""A short end-to-end run on the real 2018 vendor sample (weekly calibration), at tiny size.

Ingests three of the real files with ``rolling-calib data ingest --repair``, runs
``workflows/real2018.yaml`` (two monthly windows, March and April 2018) with a tiny
model, and scores it with weekly calibration periods.
"""

from __future__ import annotations

import json

import pytest

from rolling_calib.cli import main
from rolling_calib.core.calibration import Calibration

from runner_helpers import REAL_2018, REPO
from shared_data import needs_shared

pytestmark = [
    pytest.mark.slow,
    needs_shared(REAL_2018.name),
]

TINY = [
    "task.model.kwargs.hidden_size=4",
    "task.model.kwargs.n_epochs=1",
    "task.dataset.kwargs.sample_stride=30",
    "task.dataset.kwargs.test_stride=10",
    "task.dataset.kwargs.step_len=10",
    "task.dataset.kwargs.handler.kwargs.window=10",
    "task.dataset.kwargs.handler.kwargs.norm_samples=3000",
    "qlib_init.logging_level=WARNING",
]


def test_real_2018_sample_weekly_calibration(tmp_path, capsys):
    data = tmp_path / "real"
    files = [str(REAL_2018 / f"{s}.csv") for s in ("AAPL", "F", "JPM")]
    assert main(["data", "ingest", *files, "--out", str(data), "--repair", "--no-progress"]) == 0
    capsys.readouterr()
    store = tmp_path / "store"
    args = ["run", str(REPO / "workflows" / "real2018.yaml"), "--store", str(store), "--seeds", "2",
            "--pipelines", "wd0", "wd1e-3", "--no-tracking", "--json", "--set", f"qlib_init.provider_uri={data}"]
    for item in TINY:
        args += ["--set", item]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["units_ran"] == 8
    units = {u["unit"]: u for u in summary["units"]}
    assert set(units) == {f"{p}__seed{s}__w{w:02d}" for p in ("wd0", "wd1e-3") for s in (0, 1) for w in (0, 1)}

    from rolling_calib.execution.executors import UnitKey
    from rolling_calib.execution.reader import read_unit

    april = read_unit(store, UnitKey("wd0", 0, 1))
    assert str(april["datetime"].min().date()) == "2018-04-02" and str(april["datetime"].max().date()) == "2018-04-20"
    assert set(april["instrument"]) == {"AAPL", "F", "JPM"}

    assert main(["compare", "--store", str(store), "--json", "--n-boot", "100"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["period"] == "week"  # taken from the store's config
    assert {p["pipeline"] for p in result["pipelines"]} == {"wd0", "wd1e-3"}
    from rolling_calib.analysis.scoring import score_store

    scores = score_store(store, calibration=Calibration(period="week"))
    weeks = scores.periods[(scores.periods["pipeline"] == "wd0") & (scores.periods["seed"] == 0)]
    assert len(weeks) >= 6 and weeks["scored"].sum() == len(weeks) - 1
