"""Our workflow for Qlib's rolling-retrain baseline (``workflows/qlib_rr/rr_alpha158.yaml``) plans Qlib's rolling:
Linear and LightGBM on Alpha158, 20-day steps, retrained, the YAML's 24 months of validation, the 20-day label's
21 bars purged, and a backtest per seed (a dry plan on a small daily store: nothing trained)."""

from __future__ import annotations

from pathlib import Path

import pytest

from daily_helpers import build_daily_store
from rolling_calib.config.experiment import load_experiment
from rolling_calib.execution.runner import plan_run

RR = Path(__file__).resolve().parents[2] / "workflows" / "qlib_rr" / "rr_alpha158.yaml"


@pytest.mark.slow
def test_rr_workflow_plans_qlibs_rolling_retrain(tmp_path):
    store = build_daily_store(tmp_path / "qlib_day", start="2013-02-01", end="2015-12-31")
    config = load_experiment(RR, overrides={"qlib_init.provider_uri.day": str(store), "market": "all",
                                            "rolling.valid_months": 6, "rolling.start": "2015-07",
                                            "rolling.end": "2015-09"})
    assert (config.rolling.step_days, config.rolling.mode, config.rolling.purge) == (20, "scratch", "auto")
    linear, lightgbm = (config.pipeline_task(n) for n in ("rr_linear", "rr_lightgbm"))
    assert linear["model"]["class"] == "LinearModel" and lightgbm["model"]["class"] == "LGBModel"
    assert linear["dataset"]["kwargs"]["handler"]["kwargs"]["learn_processors"][1]["class"] == "CSRankNorm"
    assert "learn_processors" not in lightgbm["dataset"]["kwargs"]["handler"]["kwargs"]   # Alpha158's defaults
    for task in (linear, lightgbm):   # the market anchor reached both handlers
        assert task["dataset"]["kwargs"]["handler"]["kwargs"]["instruments"] == "all"
    plan = plan_run(config, store=tmp_path / "store", seeds=2)
    assert plan.purge["bars"] == 21 and "Ref($close, -21) / Ref($close, -1) - 1 looks 21 bar(s) ahead" in plan.purge["why"]
    assert len(plan.windows) == 4   # 64 sessions of 2015-07..09 in steps of 20
    for p in plan.pipelines:
        assert p.backtest is not None and p.backtest["strategy"] == "TopkDropoutStrategy(topk=5, n_drop=1)"
        assert p.backtest["benchmark"] == "the equal-weighted universe all (6 instruments)"
