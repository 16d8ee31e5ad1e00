"""Issue 35's pair-level fixes: no pooling, the planned information fraction, min-df, "none" at the optimistic gap.

Each test fails on the code before the fix (pooled seed part, estimated fraction ``V_max / V_j``,
Satterthwaite's degrees of freedom for the future target, "none" at the point gap).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from rolling_calib.core.question import Question
from rolling_calib.core.sequential import planned_fraction, replay
from rolling_calib.core.stopping import StoppingRule
from rolling_calib.core.variance import crossed_variance, min_df, welch_df
from rolling_calib.core.verdict import LossPanel, optimistic_gap, seeds_needed, time_part_low


def _runs_quiet_panel(k: int = 3, T: int = 120, seed: int = 0) -> np.ndarray:
    """A paired differential whose run means vary far less than their day noise explains (the old pool case)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 3.0, (k, T))
    return x - x.mean(axis=1, keepdims=True) + np.array([0.0, 0.01, -0.01][:k])[:, None] + 0.2


def test_period_seed_part_is_the_runs_t_never_pooled() -> None:
    x = _runs_quiet_panel()
    runs = x.mean(axis=1)
    cv = crossed_variance(x, target="period")
    assert cv.var == pytest.approx(np.var(runs, ddof=1) / 3, rel=1e-12)
    assert cv.df == 2.0                                  # k - 1, never (k - 1) + (k - 1) T
    assert not hasattr(cv, "pooled")


def test_min_df_is_the_smaller_positive_part_and_below_satterthwaite() -> None:
    parts = [(0.3, 2.0), (1.0, 40.0)]
    assert min_df(parts) == 2.0
    assert welch_df(parts) > min_df(parts)               # Satterthwaite gives the sum more
    assert min_df([(0.0, 2.0), (1.0, 40.0)]) == 40.0     # a zero part carries no uncertainty
    assert math.isinf(min_df([]))


def test_future_df_is_min_of_the_parts() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1.0, 150) + rng.normal(0, 0.5, (4, 1)) + rng.normal(0, 1.0, (4, 150))
    cv = crossed_variance(x, target="future")
    assert cv.var_seeds > 0 and cv.var_time > 0
    assert cv.df == min(cv.df_seeds, cv.df_time)
    assert cv.df <= 3.0                                  # the seed part's k - 1 bounds it


def test_planned_fraction_is_seeds_over_max() -> None:
    assert [planned_fraction(k, 20) for k in (3, 5, 19, 20)] == [0.15, 0.25, 0.95, 1.0]


@pytest.mark.parametrize("target", ["future", "period"])
def test_replay_looks_use_the_planned_fraction(target: str) -> None:
    rng = np.random.default_rng(1)
    day = rng.normal(0, 0.5, 60)

    def panel() -> LossPanel:
        return LossPanel.from_arrays(seeds=range(12), total=day + rng.normal(0, 1, (12, 1)) + rng.normal(0, 1, (12, 60)))

    r = replay({"a": panel(), "b": panel()}, rule=StoppingRule(first=3, batch=3, max_seeds=12, futility=0.0),
               question=Question(target=target), order_seed=0)
    assert r.looks
    for look in r.looks:
        assert look.fraction == pytest.approx(look.seeds / 12)


def test_optimistic_gap_is_the_far_end_of_the_seeds_interval() -> None:
    t4 = stats.t.ppf(0.975, 4)
    assert optimistic_gap(0.3, per_seed_var=0.09 * 5, k_pilot=5, confidence=0.95) == pytest.approx(0.3 + t4 * 0.3)
    assert optimistic_gap(-0.3, per_seed_var=1.0, k_pilot=0, confidence=0.95) == pytest.approx(0.3)


def test_time_part_low_is_the_chi_square_lower_bound() -> None:
    assert time_part_low(0.02, 10.0) == pytest.approx(0.02 * 10 / stats.chi2.ppf(0.9, 10))
    assert time_part_low(0.02, 10.0) < 0.02


def test_none_suffices_only_when_the_optimistic_gap_is_covered() -> None:
    # the market-time part alone covers the point gap even at its lower bound (t_30 * sqrt(0.00745) = 0.176
    # > 0.15) but not the far end of the gap's 5-seed interval (0.15 + t_4 sqrt(0.5 / 5) = 1.03)
    args = dict(gap=0.15, per_seed_var=0.5, time_variance=0.01, time_df=30.0)
    assert stats.t.ppf(0.975, 30) * math.sqrt(time_part_low(0.01, 30.0)) > 0.15
    at_point = seeds_needed(**args)                      # k_pilot not stated: the gap taken as exact
    assert at_point.n is None and at_point.reason.startswith("no number of seeds")
    piloted = seeds_needed(**args, k_pilot=5)
    assert not piloted.reason.startswith("no number of seeds")
    # far inside the time part's reach even at the optimistic end: still "none"
    tiny = seeds_needed(gap=0.01, per_seed_var=0.0005, time_variance=0.01, time_df=30.0, k_pilot=5)
    assert tiny.n is None and tiny.reason.startswith("no number of seeds")
