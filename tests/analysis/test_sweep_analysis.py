"""The sweep's analysis (pure: runs table in, rankings out), its report files, and the paper profile."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rolling_calib.analysis.sweep import analyse_sweep, format_sweep
from rolling_calib.config.grid import Pipeline
from rolling_calib.reporting.sweep_report import write_sweep_report
from rolling_calib.core.resampling import Resampling

ROOT = Path(__file__).resolve().parents[2]


def synthetic_runs(seed: int = 0, n: int = 8) -> pd.DataFrame:
    """Three configurations: 'good' clearly best on QL; 'twin' indistinguishable from 'good';
    'bad' clearly worse. CQL = QL minus a per-run bias term (less spread)."""
    rng = np.random.default_rng(seed)
    rows = []
    for name, level in (("good", 1.0), ("twin", 1.02), ("bad", 2.0)):
        bias = rng.normal(0.0, 0.3, n)
        noise = rng.normal(0.0, 0.05, n)
        for s in range(n):
            rows.append({"pipeline": name, "seed": s, "ql": level + noise[s] + bias[s] ** 2,
                         "cql": level + noise[s]})
    return pd.DataFrame(rows)


def test_analysis_ranks_groups_and_runs_to_separate():
    result = analyse_sweep(synthetic_runs(), pairs=[("bad", "good")], resampling=Resampling(n_boot=500, seed=4))
    assert result.ranking["pipeline"].tolist()[-1] == "bad"
    assert result.matrices["cql"].names == tuple(result.ranking["pipeline"])  # matrix in ranking order
    assert ("bad" not in result.top_groups["cql"]) and len(result.top_groups["cql"]) >= 1
    for metric in ("cql", "ql"):
        pairs = {frozenset(p) for p in result.indistinguishable[metric]}
        assert frozenset(("good", "bad")) not in pairs and frozenset(("twin", "bad")) not in pairs
    (pair,) = result.pairs
    assert (pair.better, pair.worse) == ("good", "bad")  # direction by the ground truth QL
    assert pair.accuracies["cql"].accuracy == 1.0
    budgets = {b.metric: b for b in result.runs_to_separate}
    assert budgets["cql"].a == budgets["ql"].a  # same top two for both metrics
    assert result.settings == {"metrics": ["cql", "ql"], "ground_truth": "ql", "n_boot": 500, "confidence": 0.95,
                               "seed": 4, "block_size": None, "target": "period", "configurations": 3, "runs": 24}


def test_analysis_is_reproducible_with_its_seed():
    one = analyse_sweep(synthetic_runs(), resampling=Resampling(n_boot=300, seed=9)).to_dict()
    two = analyse_sweep(synthetic_runs(), resampling=Resampling(n_boot=300, seed=9)).to_dict()
    assert one == two
    other = analyse_sweep(synthetic_runs(), resampling=Resampling(n_boot=300, seed=10)).to_dict()
    assert other["ranking"] == one["ranking"]  # only the bootstrap intervals depend on the seed


def test_unknown_pair_is_a_clear_error():
    with pytest.raises(ValueError, match="'nope' has no runs"):
        analyse_sweep(synthetic_runs(), pairs=[("good", "nope")], resampling=Resampling(n_boot=50))


def test_report_files_are_written(tmp_path):
    result = analyse_sweep(synthetic_runs(n=3), pairs=[("good", "twin")], resampling=Resampling(n_boot=200))
    paths = write_sweep_report(result, tmp_path / "out")
    data = json.loads(paths["json"].read_text())
    assert data["settings"]["n_boot"] == 200 and len(data["ranking"]) == 3 and len(data["pairs"]) == 1
    text = paths["markdown"].read_text()
    assert "## Ranking" in text and "Listed pairs" in text and "fewer than about 5 seeds" in text
    assert "docs/method.md §4" in text
    for metric in ("cql", "ql"):
        png = paths["heatmaps"][metric]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list((tmp_path / "out").glob(".*tmp"))  # no temporary debris
    assert re.search(r"^\| good +\|", format_sweep(result), flags=re.M)
    assert not format_sweep(result, style="text").lstrip().startswith("#")   # the terminal gets text tables


def test_paper_profile_is_the_full_method_33_sweep(tmp_path):
    from data_prep import build_synthetic_store

    from rolling_calib.config.experiment import load_experiment
    from rolling_calib.config.grid import sweep_experiment

    store = build_synthetic_store(tmp_path / "q", start="2018-01-02", end="2018-01-05", symbols=["AAPL"], seed=0)
    config = load_experiment(ROOT / "workflows" / "paper" / "paper.yaml",
                             overrides={"qlib_init.provider_uri": str(store)}, check_store=False)
    assert sweep_experiment(config, None) is config  # no grid: the profile's own pipelines
    r = config.rolling
    assert (r.initial_train_start, r.start, r.end, r.step_months, r.mode) == ("2012-01", "2015-01", "2018-12", 6, "finetune")
    assert r.seeds == tuple(range(10))
    assert config.task["dataset"]["kwargs"]["handler"]["kwargs"]["instruments"] == "us25"

    def kw(name, key):
        return config.pipeline_task(name)["model"]["kwargs"][key]

    pairs = {(kw(a, k), kw(b, k)) for a, b in config.compare
             for k in ("weight_decay", "hidden_size", "num_layers", "batch_size", "n_epochs")
             if kw(a, k) != kw(b, k)}
    expected = (
        {(0.0, w) for w in (3e-6, 4e-6, 5e-6, 6e-6, 7e-6)}
        | {(32, 64), (64, 96), (64, 112), (64, 128), (64, 144)}
        | {(3, 2), (4, 2), (4, 3), (5, 3), (6, 3), (6, 4)}
        | {(3000, 2000), (3000, 1000), (2000, 1000)}
        | {(4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7)}
    )
    assert pairs == expected and len(config.compare) == 25


def test_grid_points_become_pipelines(tmp_path):
    from sweep_helpers import tiny_experiment

    from rolling_calib.config.experiment import ConfigError, load_experiment
    from rolling_calib.config.grid import sweep_experiment

    config = load_experiment(tiny_experiment(tmp_path), check_store=False)
    swept = sweep_experiment(config, [Pipeline("hidden_size=4", {"task.model.kwargs.hidden_size": 4})])
    assert list(swept.pipelines) == ["hidden_size=4"] and swept.compare == []
    assert swept.pipeline_task("hidden_size=4")["model"]["kwargs"]["hidden_size"] == 4
    assert config.pipelines == {"base": {}}  # the loaded config is left alone
    with pytest.raises(ConfigError, match="hidden_size"):
        sweep_experiment(config, [Pipeline("bad", {"task.model.kwargs.hidden_size": "wide"})])


def test_single_seed_sweep_ranks_without_runs_to_separate():
    runs = synthetic_runs(n=1)
    result = analyse_sweep(runs, resampling=Resampling(n_boot=50))
    assert len(result.ranking) == 3 and result.runs_to_separate == []
    assert "Runs to separate" not in format_sweep(result)


def test_model_confidence_set_keeps_the_best_and_drops_the_clearly_worse(tmp_path):
    """Per-day losses of a real store: 'noisy' predicts with four times the noise; it leaves the set."""
    from runner_helpers import write_fake_store

    from rolling_calib.analysis.scoring import score_store

    store = tmp_path / "store"
    write_fake_store(store, pipelines={"sharp": {"bias_sd": 0.2, "noise": 1.0}, "sharp2": {"bias_sd": 0.2, "noise": 1.0},
                                       "noisy": {"bias_sd": 0.2, "noise": 4.0}}, seeds=3, rng_seed=5)
    scores = score_store(store)
    result = analyse_sweep(scores.runs, days=scores.days, resampling=Resampling(n_boot=300, seed=2))
    for metric in ("ql", "cql"):
        cs = result.confidence_sets[metric]
        assert "noisy" in cs.excluded and cs.pvalues["noisy"] < 0.05
        assert set(cs.included) <= {"sharp", "sharp2"} and cs.included
    text = format_sweep(result, style="text")
    assert "Model confidence set by cql (95%)" in text
    assert result.to_dict()["confidence_sets"]["ql"]["excluded"] == result.confidence_sets["ql"].excluded
    assert analyse_sweep(scores.runs, resampling=Resampling(n_boot=100)).confidence_sets == {}   # without per-day losses: none


def test_the_top_two_get_compares_verdict_and_its_seeds_to_decide(tmp_path):
    """With per-day losses and the label, the top two by QL get the verdicts ``compare`` gives them (the same
    numbers: :func:`decide_pair`), and the text shows their seeds to decide instead of the unpaired runs formula."""
    from runner_helpers import write_fake_store

    from rolling_calib.analysis.scoring import score_store
    from rolling_calib.analysis.verdicts import decide_pair

    store = tmp_path / "store"
    write_fake_store(store, pipelines={"sharp": {"bias_sd": 0.2, "noise": 1.0}, "blunt": {"bias_sd": 0.2, "noise": 1.3},
                                       "noisy": {"bias_sd": 0.2, "noise": 4.0}}, seeds=4, rng_seed=5)
    scores = score_store(store)
    result = analyse_sweep(scores.runs, days=scores.days, label=scores.label, resampling=Resampling(n_boot=100))
    (ql_budget,) = [b for b in result.runs_to_separate if b.metric == "ql"]
    a, b = ql_budget.a, ql_budget.b
    assert (result.top_two.better, result.top_two.worse) == (a, b)
    direct = decide_pair(scores.days, a, b, label=scores.label, metrics=("cql", "ql"))
    for metric in ("cql", "ql"):
        assert result.top_two.verdicts[metric].to_dict() == direct.verdicts[metric].to_dict()
        assert result.units[metric] == scores.label.loss_unit
    text = format_sweep(result, style="text")
    assert f"Seeds to decide the top two by ql ({a} vs {b})" in text and "Runs to separate" not in text
    needed = result.top_two.verdicts["ql"].seeds_needed
    row = next(line for line in text.splitlines() if line.startswith("ql "))
    assert row.split()[-1] == (str(needed.n) if needed.n else needed.reason.split()[-1])
    assert "paired" in row and row.count(scores.label.loss_unit) == 2      # the difference and the interval
    out = result.to_dict()["top_two"]
    assert (out["a"], out["b"]) == (a, b) and out["verdicts"]["ql"]["seeds_needed"]["n"] == needed.n
    # without the label (or the days): the unpaired approximation, said to be one
    bare = format_sweep(analyse_sweep(scores.runs, days=scores.days, resampling=Resampling(n_boot=100)), style="text")
    assert "Runs to separate the top two by ql" in bare and "an unpaired normal approximation" in bare
