"""The harness of the verdicts under drift: what each column counts, on cells whose answer is known."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from rolling_calib.simulation.verdict_sim import PanelModel, _simulate
from rolling_calib.simulation.when_sim import (
    ACROSS_METHODS,
    WhenCell,
    _window_table_draws,
    calibrate_across,
    calibrate_when,
)

MODEL = PanelModel(market_sd=5.0, seed_sd=0.03, window_sd=0.05, window_days=62, noise_sd=2.45, interaction_sd=1.0,
                   interaction_phi=0.1)


def test_rows_name_the_cell_and_every_rate_has_its_monte_carlo_error():
    (row,) = calibrate_when(MODEL, cells=[WhenCell(5, 125, 40.0, 4.0, 31)], n_rep=8, n_sim=200)
    # 125 days in windows of 31: four windows and a last day alone (a window needs 2 days)
    assert (row["n_seeds"], row["n_days"], row["drift"], row["window_days"], row["n_windows"]) == (5, 125, "40d x4",
                                                                                                 31, 4)
    assert row["regime_days"] == 40.0 and row["drift_ratio"] == 4.0 and not row["regimes_shorter"]
    assert row["across_made"] and row["n_rep"] == 8
    for name in ("headline", "future", "per_window", "per_window_raw", "across", "across_all", "across_plain",
                 "fluctuation", "period_power_2", "reversal_power_3"):
        p, se = row[name], row[f"{name}_mc_se"]
        assert 0 <= p <= 1 and se == pytest.approx(math.sqrt(p * (1 - p) / 8))
    assert row["per_window_raw"] >= row["per_window"]            # Holm decides no window the raw tests leave


def test_too_few_windows_leave_the_across_windows_rate_unmade():
    (row,) = calibrate_when(MODEL, cells=[WhenCell(3, 60)], n_rep=4, n_sim=200)
    assert row["n_windows"] == 1 and not row["across_made"] and math.isnan(row["across"])
    assert math.isnan(row["across_all"])
    assert row["drift"] == "none" and row["regime_days"] is None


def test_under_long_regimes_the_old_default_decides_identical_pairs_the_headline_does_not():
    """Regimes of 110 days with four times the daily interaction's long-run variance (20 seeds, 250 days): the
    future target, the old headline, decides many identical pairs; the period headline holds 5% (60 pairs, seed
    0: measured 1.7% against 16.7%); so do the per-window verdicts under Holm, and the fluctuation warning sees a
    one-time reversal of 3 standard errors more often than it fires on stable pairs."""
    drift, stable = calibrate_when(MODEL, cells=[WhenCell(20, 250, 110.0, 4.0), WhenCell(20, 250)], n_rep=60,
                                   n_sim=200, effects_in_se=(3.0,))
    assert drift["headline"] <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 60)
    assert drift["future"] >= 0.10 and drift["future"] > drift["headline"]
    assert drift["per_window"] <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 60)
    assert stable["reversal_power_3"] > stable["fluctuation"]


def test_the_across_harness_counts_level_power_and_the_draws_that_meet_the_assumption():
    """Regimes of 10 days in windows of 60 (4 windows, 10 seeds, 200 tables): most draws have every regime within a
    window; a larger effect is decided at least as often as a smaller one on the same tables (a shift moves each
    half's mean, not its variance), and the test over all windows decides at least as often as the halves at 3 SE."""
    (row,) = calibrate_across(MODEL, cells=[WhenCell(10, 240, 10.0, 4.0, 60)], n_rep=200, effects_in_se=(1.0, 3.0))
    assert (row["n_windows"], row["window_days"], row["n_days"], row["drift"]) == (4, 60, 240, "10d x4")
    assert row["share_within"] > 0.5 and row["n_within"] == round(row["share_within"] * 200)
    assert row["se_future"] > 0
    for m in ACROSS_METHODS:
        assert 0 <= row[m] <= 1 and row[f"{m}_mc_se"] == pytest.approx(math.sqrt(row[m] * (1 - row[m]) / 200))
        assert 0 <= row[f"{m}_within"] <= 1
        assert row[f"{m}_power_3"] >= row[f"{m}_power_1"]
    assert row["all_power_3"] > row["halves_power_3"]


def test_the_across_harness_wants_an_even_number_of_whole_windows():
    with pytest.raises(ValueError, match="even number"):
        calibrate_across(MODEL, cells=[WhenCell(5, 250, None, 0.0, 62)], n_rep=4)
    with pytest.raises(ValueError, match="methods"):
        calibrate_across(MODEL, cells=[WhenCell(5, 248, None, 0.0, 62)], n_rep=4, methods=("halves", "magic"))


def test_fixed_regimes_are_each_one_window_long_and_meet_the_halves_assumption_in_every_draw():
    """Regimes of exactly 30 days in 30-day windows (4 windows, 60 tables): every draw has every regime within a
    window, and the halves' level among them is the level."""
    (row,) = calibrate_across(MODEL, cells=[WhenCell(6, 120, 30.0, 4.0, 30, regimes="fixed")], n_rep=60,
                              methods=("halves",), effects_in_se=(3.0,))
    assert row["drift"] == "30d x4 fixed" and row["n_within"] == 60 and row["share_within"] == 1.0
    assert row["halves_within"] == row["halves"] and "all" not in row
    with pytest.raises(ValueError, match="regimes"):
        calibrate_across(MODEL, cells=[WhenCell(6, 120, 30.0, 4.0, 30, regimes="weekly")], n_rep=4)


def test_straddling_regimes_cut_every_window_in_half():
    """Regimes of exactly one window (40 days) cut at its middle, level variance 4 / 40 (drift ratio 4, interaction
    variance 1): each window's regime part is the mean of two levels (variance 1/20), sharing one with each
    neighbour (covariance 1/40); with the interaction's window mean (variance 1/40, independent days) and no seed
    parts, adjacent windows correlate (1/40) / (1/20 + 1/40) = 1/3 and windows two apart not at all."""
    m = PanelModel(seed_sd=0.0, window_sd=0.0, noise_sd=0.0, interaction_sd=1.0, interaction_phi=0.0,
                   window_days=40).with_drift(40.0, 4.0)
    x, longest = _window_table_draws(m, 3000, 2, 4, np.random.default_rng(0), regimes="straddle")
    cols = x.mean(axis=1)
    assert (longest <= 40).all() and x[:, 0, :] == pytest.approx(x[:, 1, :])
    assert cols.var(axis=0) == pytest.approx(np.full(4, 1 / 20 + 1 / 40), rel=0.1)
    assert np.corrcoef(cols[:, 1], cols[:, 2])[0, 1] == pytest.approx(1 / 3, abs=0.05)
    assert np.corrcoef(cols[:, 0], cols[:, 2])[0, 1] == pytest.approx(0.0, abs=0.05)
    (row,) = calibrate_across(m, cells=[WhenCell(4, 160, 40.0, 4.0, 40, regimes="straddle")], n_rep=20,
                              methods=("halves",), effects_in_se=(3.0,))
    assert row["drift"] == "40d x4 straddle" and row["share_within"] == 1.0


def test_the_table_draws_have_the_distribution_of_the_panels_window_means():
    """The across harness draws each seed x window mean directly; the panels' route (:func:`_simulate`, then the
    paired difference's mean over each window's days, what :func:`window_tables` computes) must give the same
    variances and the same correlation of adjacent windows (2000 draws each, 4 windows of 20 days, regimes of 10
    days x4; the estimates' sampling error is about 3%, the tolerance 12%)."""
    m = replace(MODEL, window_days=20).with_drift(10.0, 4.0)
    n, k, q, L = 2000, 5, 4, 20
    x, _ = _window_table_draws(m, n, k, q, np.random.default_rng(0))
    a, b, _ = _simulate(m, n, k, q * L, np.random.default_rng(1))
    y = (a - b).reshape(n, k, q, L).mean(axis=3)

    def summary(t: np.ndarray) -> list[float]:
        cols = t.mean(axis=1)
        return [float(t[:, 0, 0].var()), float(t.mean(axis=(1, 2)).var()), float(cols[:, 1:].var()),
                float(np.corrcoef(cols[:, 1], cols[:, 2])[0, 1])]

    assert summary(x) == pytest.approx(summary(y), rel=0.12, abs=0.03)
