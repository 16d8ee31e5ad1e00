"""Panels that grow by the new seeds only (issue 34): the same panels and verdicts as scoring the whole store, each
run read once; the store's own errors pass through."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from runner_helpers import write_fake_store

from rolling_calib.analysis.scoring import score_store
from rolling_calib.analysis.seed_panels import GrowingPanels
from rolling_calib.analysis.verdicts import loss_panel
from rolling_calib.core.calibration import Calibration
from rolling_calib.core.question import Question
from rolling_calib.core.verdict import decide

PIPELINES = {"calm": {"bias_sd": 1.0}, "wild": {"bias_sd": 0.5}}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("growing") / "store"
    write_fake_store(path, pipelines=PIPELINES, seeds=6)
    return path


def _whole_store(store, wanted, metric):
    """What a look built before: the whole store scored, each panel cut to the wanted seeds (in their order)."""
    days = score_store(store).days
    out = {}
    for name, seeds in wanted.items():
        panel = loss_panel(days, name, metric)
        out[name] = panel.select(seeds=np.array([panel.seeds.tolist().index(s) for s in seeds]))
    return out


@pytest.mark.parametrize("metric", ["ql", "cql", "ic"])
def test_grown_panels_are_the_whole_store_panels_and_each_run_is_scored_once(store, metric):
    growing = GrowingPanels(store, pipelines=list(PIPELINES), metric=metric, calibration=Calibration())
    for n in (2, 4, 6):   # three looks: 2 seeds, then 2 more, then 2 more
        wanted = {name: [3, 1, 0, 2, 5, 4][:n] for name in PIPELINES}    # the plan's order, not sorted
        grown, whole = growing.panels(wanted), _whole_store(store, wanted, metric)
        for name in PIPELINES:
            for field in ("seeds", "times", "total", "weight"):
                assert np.array_equal(getattr(grown[name], field), getattr(whole[name], field)), (n, name, field)
        for target in ("future", "period"):
            q = Question(target=target)
            assert decide(grown["calm"], grown["wild"], question=q).to_dict() == \
                decide(whole["calm"], whole["wild"], question=q).to_dict()
        assert growing.scored == len(PIPELINES) * n    # only the new seeds were read


def test_a_seed_without_rows_of_the_metric_and_a_missing_unit_are_named(store, tmp_path):
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    growing = GrowingPanels(copy, pipelines=list(PIPELINES), metric="ql", calibration=Calibration())
    shutil.rmtree(copy / "units" / "wild" / "seed5")
    with pytest.raises(ValueError, match="seed5"):
        growing.panels({"wild": [5]})
    with pytest.raises(ValueError, match="^metric: expected one of ql, cql, ic, rank_ic, excess_return, excess_return_cost, found 'mse'$"):
        GrowingPanels(copy, pipelines=list(PIPELINES), metric="mse", calibration=Calibration())
