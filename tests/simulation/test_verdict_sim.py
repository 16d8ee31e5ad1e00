"""The calibration harness (simulation/verdict_sim.py and bench/verdict_calibration.py): the simulator's
components against hand-computed moments, the estimator against known models, the baselines'
levels, the table's structure, the verdict's false decisions in small null cells, the command line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from rolling_calib.core.verdict import LossPanel
from rolling_calib.core.question import Question
from rolling_calib.core.resampling import Resampling
from rolling_calib.simulation.verdict_sim import (
    METHODS,
    Cell,
    PanelModel,
    _simulate,
    aa_splits,
    calibrate,
    check_seeds_needed,
    estimate_model,
    estimator_sd,
    paired_t_interval,
    seed_bootstrap_interval,
    simulate_pair,
    welch_interval,
)

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "verdict_calibration.py"


def _level_bounds(n: int, level: float = 0.05) -> tuple[float, float]:
    """Nominal rate -/+ 3 Monte Carlo standard errors (a two-sided test that can fail)."""
    se = math.sqrt(level * (1 - level) / n)
    return level - 3 * se, level + 3 * se


# --------------------------------------------------------------------------- the simulator
def test_seed_offset_is_constant_over_days_and_has_its_variance():
    a, b, _ = _simulate(PanelModel(seed_sd=2.0, noise_sd=0.0), 200, 10, 30, np.random.default_rng(0))
    assert np.allclose(a, a[:, :, :1]) and np.allclose(b, b[:, :, :1])   # nothing varies over days
    assert np.var(a[:, :, 0]) == pytest.approx(4.0, rel=0.06)            # 2000 draws: sd of var ~ 3%
    assert abs(np.corrcoef(a[:, :, 0].ravel(), b[:, :, 0].ravel())[0, 1]) < 0.06   # crn = 0: independent


def test_window_offset_is_constant_within_a_window_and_fresh_in_the_next():
    a, _, _ = _simulate(PanelModel(window_sd=1.0, noise_sd=0.0, window_days=5), 400, 4, 12, np.random.default_rng(1))
    assert np.allclose(a[:, :, 0:5], a[:, :, :1]) and np.allclose(a[:, :, 10:12], a[:, :, 10:11])
    x, y = a[:, :, 4].ravel(), a[:, :, 5].ravel()                         # across a window border
    assert abs(np.corrcoef(x, y)[0, 1]) < 0.06 and np.var(x) == pytest.approx(1.0, rel=0.08)


def test_market_cancels_in_the_differential_and_interaction_is_shared_by_the_seeds():
    m = PanelModel(market_sd=5.0, noise_sd=0.0, interaction_sd=1.0)
    a, b, c = _simulate(m, 300, 3, 40, np.random.default_rng(2))
    assert np.allclose(a - b, c[:, None, :])                              # A - B = c_t for every seed
    assert np.var((a + b)[:, 0, :] / 2) == pytest.approx(25.0, rel=0.05)  # the market, in both pipelines
    assert np.var(c) == pytest.approx(1.0, rel=0.05)


def test_ar1_interaction_has_its_lag_one_correlation_and_marginal_variance():
    _, _, c = _simulate(PanelModel(noise_sd=0.0, interaction_sd=2.0, interaction_phi=0.6), 200, 1, 300,
                        np.random.default_rng(3))
    x = c - c.mean(axis=1, keepdims=True)
    r1 = (x[:, 1:] * x[:, :-1]).sum() / (x * x).sum()
    assert r1 == pytest.approx(0.6, abs=0.03)
    assert np.var(c[:, 0]) == pytest.approx(4.0, rel=0.25)                # stationary from day 0 (200 draws)
    assert np.var(c) == pytest.approx(4.0, rel=0.08)


def test_regimes_switch_at_the_stated_rate_with_the_variance_drift_ratio_defines():
    m = PanelModel(noise_sd=0.0, interaction_sd=1.0, regime_days=40.0, drift_ratio=4.0)
    # hand: sigma_r^2 = 4 * 1 / (2 * 40 - 1)
    assert m.regime_sd ** 2 == pytest.approx(4 / 79)
    from rolling_calib.simulation.verdict_sim import _regimes
    r = _regimes(np.random.default_rng(4), (400, 500), m.regime_sd, 40.0)
    switches = (np.diff(r, axis=1) != 0).mean()
    assert switches == pytest.approx(1 / 40, rel=0.05)
    assert np.var(r) == pytest.approx(4 / 79, rel=0.1)
    # T var(mean over T days) = sigma_r^2 (1 + 2 sum_h (1 - h/T) rho^h), rho = 1 - 1/40 -> 4 as T grows
    rho, T = 1 - 1 / 40, 500
    h = np.arange(1, T)
    expected = 4 / 79 * (1 + 2 * np.sum((1 - h / T) * rho ** h))
    assert 3.5 < expected < 4.0
    assert T * np.var(r.mean(axis=1)) == pytest.approx(expected, rel=0.2)


@pytest.mark.parametrize("part, field", [("seed_sd", "crn_seed"), ("window_sd", "crn_window"),
                                         ("noise_sd", "crn_noise")])
def test_crn_correlates_each_seed_part_of_a_and_b(part, field):
    m = PanelModel(**{"noise_sd": 0.0, part: 1.0, field: 0.6}, window_days=4)
    a, b, _ = _simulate(m, 400, 5, 20, np.random.default_rng(5))
    assert np.corrcoef(a.ravel(), b.ravel())[0, 1] == pytest.approx(0.6, abs=0.04)
    assert np.var(a) == pytest.approx(1.0, rel=0.08)


def test_simulate_pair_truths():
    m = PanelModel(noise_sd=0.5, interaction_sd=1.0)
    a, b, truth = simulate_pair(m, n_seeds=4, n_days=50, delta=0.3, rng=np.random.default_rng(6))
    assert truth["future"] == 0.3
    a0, b0, c = _simulate(m, 1, 4, 50, np.random.default_rng(6))          # the same draws
    assert truth["period"] == pytest.approx(0.3 + c[0].mean())
    assert np.allclose(a.total, a0[0] + 0.3) and np.allclose(b.total, b0[0])
    assert a.seeds.tolist() == b.seeds.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("target", ["future", "period"])
def test_estimator_sd_matches_simulation(target):
    m = PanelModel(seed_sd=0.5, window_sd=0.3, window_days=20, noise_sd=2.0, interaction_sd=0.7,
                   interaction_phi=0.4, regime_days=30.0, drift_ratio=3.0, crn_seed=0.2, crn_window=0.5,
                   crn_noise=0.3)
    a, b, c = _simulate(m, 3000, 5, 90, np.random.default_rng(7))
    d = a.mean(axis=(1, 2)) - b.mean(axis=(1, 2))
    measured = np.std(d) if target == "future" else np.std(d - c.mean(axis=1))
    assert estimator_sd(m, n_seeds=5, n_days=90, target=target) == pytest.approx(measured, rel=0.05)


def test_model_rejects_bad_components():
    with pytest.raises(ValueError, match="seed_sd: expected a finite number >= 0"):
        PanelModel(seed_sd=-1.0)
    with pytest.raises(ValueError, match="interaction_phi"):
        PanelModel(interaction_phi=1.0)
    with pytest.raises(ValueError, match="crn_noise: expected a number in"):
        PanelModel(crn_noise=1.0)
    with pytest.raises(ValueError, match="unknown key 'seed_std'"):
        PanelModel.from_dict({"seed_std": 1.0})


# --------------------------------------------------------------------------- the estimator
@pytest.mark.parametrize("crn", [(0.0, 0.0, 0.0), (0.3, 0.9, 0.6)])
def test_estimate_model_recovers_a_known_model(crn):
    truth = PanelModel(level=3.0, market_sd=2.0, seed_sd=0.6, window_sd=0.4, window_days=10, noise_sd=1.5,
                       interaction_sd=0.8, interaction_phi=0.5, crn_seed=crn[0], crn_window=crn[1],
                       crn_noise=crn[2])
    a, b, _ = simulate_pair(truth, n_seeds=80, n_days=400, delta=0.0, rng=np.random.default_rng(8))
    m = estimate_model(a, b, window_days=10)
    assert m.noise_sd == pytest.approx(1.5, rel=0.03)
    assert m.window_sd == pytest.approx(0.4, rel=0.1)
    assert m.seed_sd == pytest.approx(0.6, rel=0.15)          # 2 x 80 seed offsets
    assert m.interaction_sd == pytest.approx(0.8, rel=0.1)
    assert m.interaction_phi == pytest.approx(0.5, abs=0.1)
    assert m.market_sd == pytest.approx(2.0, rel=0.12)
    assert m.crn_noise == pytest.approx(crn[2], abs=0.02)
    assert m.crn_window == pytest.approx(crn[1], abs=0.1)
    assert m.crn_seed == pytest.approx(crn[0], abs=0.3)         # 80 seed offsets per pipeline
    assert m.level == pytest.approx(3.0, abs=0.3)


def test_estimate_model_unpaired_seeds_and_too_little_data():
    truth = PanelModel(seed_sd=0.5, noise_sd=1.0, interaction_sd=0.5)
    a, b, _ = simulate_pair(truth, n_seeds=40, n_days=200, delta=0.0, rng=np.random.default_rng(9))
    b = LossPanel.from_arrays(seeds=np.arange(100, 140), total=b.total)      # other seeds: unpaired
    m = estimate_model(a, b, window_days=21)
    assert m.crn_seed == m.crn_window == m.crn_noise == 0.0 and m.interaction_sd == pytest.approx(0.5, rel=0.2)
    one = LossPanel.from_arrays(seeds=[0], total=a.total[:1])
    with pytest.raises(ValueError, match="at least 2 seeds"):
        estimate_model(one, one, window_days=5)


# --------------------------------------------------------------------------- the baselines
def test_baseline_intervals_by_hand():
    ma, mb = np.array([1.0, 2.0, 3.0, 5.0]), np.array([0.5, 1.0, 1.0, 2.0])
    d = ma - mb
    q = stats.t.ppf(0.975, 3)
    lo, hi = paired_t_interval(ma, mb)
    assert (lo, hi) == pytest.approx((d.mean() - q * d.std(ddof=1) / 2, d.mean() + q * d.std(ddof=1) / 2))
    r = stats.ttest_ind(ma, mb, equal_var=False).confidence_interval(0.95)
    assert welch_interval(ma, mb) == pytest.approx((r.low, r.high))
    lo, hi = seed_bootstrap_interval(ma, mb, rng=np.random.default_rng(0), resampling=Resampling(n_boot=4000))
    assert d.min() <= lo < d.mean() < hi <= d.max()


def test_paired_t_holds_its_level_where_seeds_dominate_and_dm_does_not():
    """Persistent seed offsets, no interaction: the paired t is exact; DM ignores the offsets."""
    n = 200
    rows = calibrate(PanelModel(seed_sd=1.0, noise_sd=1.0), cells=[(5, 40)], effects_in_se=(0,), n_rep=n, seed=11,
                     targets=("future",), methods=("paired_t", "dm"))
    rate = {r["method"]: r["decided"] for r in rows}
    lo, hi = _level_bounds(n)
    assert lo <= rate["paired_t"] <= hi
    assert rate["dm"] > 0.3


# --------------------------------------------------------------------------- the table
def test_calibrate_table_structure():
    cells = [Cell(3, 20), Cell(4, 30, regime_days=40.0, drift_ratio=4.0)]
    rows = calibrate(PanelModel(seed_sd=0.3, noise_sd=1.0, interaction_sd=0.5), cells=cells, effects_in_se=(0, 2),
                     n_rep=12, seed=1, methods=("paired_t", "welch_t", "dm", "seed_bootstrap"))
    assert len(rows) == 2 * 2 * 2 * 4                                # cells x targets x effects x methods
    assert {r["drift"] for r in rows} == {"none", "40d x4"}
    for r in rows:
        assert r["n_rep"] == 12 and r["se"] > 0
        for k in ("decided", "power", "wrong_direction", "coverage"):
            assert 0 <= r[k] <= 1 and r[f"{k}_mc_se"] == pytest.approx(math.sqrt(r[k] * (1 - r[k]) / 12))
        if r["effect_in_se"] == 0:
            assert r["power"] == 0 and r["coverage"] == pytest.approx(1 - r["decided"])   # truth 0: covered iff undecided
        else:
            assert r["decided"] == pytest.approx(r["power"] + r["wrong_direction"])
    drift = [r for r in rows if r["drift"] != "none"]
    assert all(r["regime_days"] == 40.0 and r["drift_ratio"] == 4.0 for r in drift)
    with pytest.raises(ValueError, match="methods"):
        calibrate(PanelModel(), cells=[(3, 20)], n_rep=2, methods=("bogus",))


def test_period_null_has_a_zero_period_truth():
    """Under the period target the paired t (seeds only, days fixed) is exact even with a strong interaction."""
    n = 200
    rows = calibrate(PanelModel(seed_sd=0.5, noise_sd=1.0, interaction_sd=3.0, regime_days=40.0, drift_ratio=4.0),
                     cells=[(5, 60)], effects_in_se=(0,), n_rep=n, seed=12, targets=("period", "future"),
                     methods=("paired_t",))
    rate = {r["target"]: r["decided"] for r in rows}
    lo, hi = _level_bounds(n)
    assert lo <= rate["period"] <= hi
    assert rate["future"] > hi                      # it ignores market time: too many decisions for the future


# --------------------------------------------------------------------------- A/A and seeds needed
def test_aa_splits_counts_decisions_of_a_pipeline_against_itself():
    rng = np.random.default_rng(13)
    total = rng.normal(0, 1, (8, 60)) + rng.normal(0, 5, 60)                 # market + noise, no seed offsets
    r = aa_splits(LossPanel.from_arrays(seeds=range(8), total=total), n_splits=60, seed=2,
                  question=Question(target="period"))
    assert r.seeds_per_half == 4 and r.n_splits == 60
    assert set(r.decided) == {"decide", "welch_t", "dm"} and all(0 <= v <= 1 for v in r.decided.values())
    assert r.decided["welch_t"] <= 0.2
    with pytest.raises(ValueError, match="at least 4 seeds"):
        aa_splits(LossPanel.from_arrays(seeds=range(3), total=total[:3]), n_splits=2)


def test_check_seeds_needed_accounts_for_every_pilot():
    r = check_seeds_needed(PanelModel(seed_sd=1.0, noise_sd=1.0, interaction_sd=0.2), pilot=3, n_rep=10, seed=3,
                           n_days=30, max_seeds=12)
    assert r.n_named + r.n_none + r.n_beyond + r.decided_pilots == 10
    assert sum(b["n"] for b in r.bins) == r.n_named
    for b in r.bins:
        assert b["low"] <= b["stated"] < b["high"] + 1e-9 and 0 <= b["observed"] <= 1


# --------------------------------------------------------------------------- the verdict itself
@pytest.mark.parametrize("target", ["future", "period"])
def test_decide_holds_its_level_in_a_small_null_cell(target):
    n = 200
    model = PanelModel(seed_sd=0.3, window_sd=0.1, window_days=20, noise_sd=2.0, interaction_sd=0.6,
                       interaction_phi=0.2)
    rows = calibrate(model, cells=[(5, 60)], effects_in_se=(0,), n_rep=n, seed=14, targets=(target,),
                     methods=("decide",))
    _, hi = _level_bounds(n)
    assert rows[0]["decided"] <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / n)
    assert rows[0]["coverage"] >= 1 - hi


# --------------------------------------------------------------------------- the command line
def _bench(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_bench_rejects_bad_input_in_one_line(tmp_path):
    r = _bench("--preset", "seed_dominated", "--cells", "3by60")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--cells: expected SEEDSxDAYS" in r.stderr
    bad = tmp_path / "m.yaml"
    bad.write_text("seed_sd: 1.0\nnoise: 2\n")
    r = _bench("--model", str(bad))
    assert r.returncode == 2 and f"{bad}: unknown key 'noise'" in r.stderr


def test_bench_on_a_store_estimates_splits_and_writes_markdown(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    from runner_helpers import write_fake_store

    store = tmp_path / "store"
    write_fake_store(store, pipelines={"a": {"bias_sd": 1.0}, "b": {"bias_sd": 0.5}}, seeds=4)
    out = tmp_path / "calib.md"
    r = _bench("--from-store", str(store), "--cells", "4x20", "--drift", "none", "--reps", "6", "--aa",
               "--aa-splits", "4", "--json", "--out", str(out), "--targets", "period")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["source"]["pair"] == ["a", "b"] and res["source"]["n_seeds"] == [4, 4]
    assert len(res["rows"]) == 3 * len(METHODS)              # effects x methods, one cell, one target
    assert set(res["aa"]) == {"a", "b"} and res["aa"]["a"]["period"]["n_splits"] == 4
    text = out.read_text()
    header = next(line for line in text.splitlines() if "false decisions" in line and line.startswith("|"))
    assert [c.strip() for c in header.strip("|").split("|")][:5] == ["seeds", "days", "target", "drift", "method"]


def test_sequential_replay_simulates_from_a_store_and_replays_it(tmp_path):
    """bench/sequential_replay.py --from-store: the model estimated from the store (as verdict_calibration does), its
    simulated pairs and the store's own pair replayed; a missing store is one line, exit 2."""
    sys.path.insert(0, str(ROOT / "tests"))
    from runner_helpers import write_fake_store

    store = tmp_path / "store"
    write_fake_store(store, pipelines={"a": {"bias_sd": 1.0}, "b": {"bias_sd": 0.5}}, seeds=6)
    replay_bench = ROOT / "bench" / "sequential_replay.py"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, str(replay_bench), "--from-store", str(store), "--reps", "2", "--effects",
                        "0", "--days", "40", "--max-seeds", "6", "--store", str(store), "--orders", "2", "--json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["source"].startswith(f"store {store} (ql: PanelModel(")
    assert {"sequential", "naive", "bonferroni", "full_grid"} <= {row["method"] for row in res["rows"]}
    assert res["store_rows"] and {row["effect_se"] for row in res["store_rows"]} == {"a vs b"}
    r = subprocess.run([sys.executable, str(replay_bench), "--from-store", str(tmp_path / "nowhere")],
                       capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "no such directory" in r.stderr
