"""Issue 35's pair-level fixes: no pooling, the planned information fraction, min-df, "none" at the optimistic gap.

Each test fails on the code before the fix (pooled seed part, estimated fraction ``V_max / V_j``,
Satterthwaite's degrees of freedom for the future target, "none" at the point gap).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
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


def test_none_suffices_by_hand() -> None:
    # k = 5 seeds, market-time part 0.01 on 30 df, confidence 0.95. Its half-width at the 90% lower bound:
    #   t_30(0.975) sqrt(0.01 * 30 / chi2_30(0.90)) = 2.0423 * sqrt(0.3 / 40.256) = 2.0423 * 0.086327 = 0.17630.
    # The gap's optimistic end, 0.05 + t_4(0.975) sqrt(S / 5), t_4(0.975) = 2.7764:
    #   S = 0.005: 0.05 + 2.7764 * 0.031623 = 0.13780 <= 0.17630 -> "none";
    #   S = 0.020: 0.05 + 2.7764 * 0.063246 = 0.22559 >  0.17630 -> not "none".
    args = dict(gap=0.05, time_variance=0.01, time_df=30.0, k_pilot=5)
    assert optimistic_gap(0.05, per_seed_var=0.005, k_pilot=5, confidence=0.95) == pytest.approx(0.13780, abs=1e-5)
    assert optimistic_gap(0.05, per_seed_var=0.02, k_pilot=5, confidence=0.95) == pytest.approx(0.22559, abs=1e-5)
    assert 2.0423 * math.sqrt(time_part_low(0.01, 30.0)) == pytest.approx(0.17630, abs=1e-4)
    none = seeds_needed(per_seed_var=0.005, **args)
    assert none.n is None and none.reason.startswith("no number of seeds") and "±0.176" in none.reason
    beyond = seeds_needed(per_seed_var=0.02, **args)
    assert beyond.n is None and beyond.reason.startswith("more than 1000 seeds")


_COMPONENTS = dict(
    gap=st.floats(-0.3, 0.3).filter(lambda g: abs(g) > 1e-6),
    per_seed_var=st.floats(1e-4, 1.0),
    time_variance=st.floats(1e-4, 0.1),
    time_df=st.floats(2.0, 200.0),
    k_pilot=st.integers(2, 20),
)


def _none(r: object) -> bool:
    return str(getattr(r, "reason")).startswith("no number of seeds")


@settings(max_examples=150, deadline=None)
@given(**_COMPONENTS)
def test_none_is_said_exactly_when_the_time_part_covers_the_optimistic_end(gap: float, per_seed_var: float,
                                                                        time_variance: float, time_df: float,
                                                                        k_pilot: int) -> None:
    # independent of verdict.py's helpers: the rule's formula written out with scipy
    half = stats.t.ppf(0.975, time_df) * math.sqrt(time_variance * time_df / stats.chi2.ppf(0.90, time_df))
    end = abs(gap) + stats.t.ppf(0.975, k_pilot - 1) * math.sqrt(per_seed_var / k_pilot)
    r = seeds_needed(gap=gap, per_seed_var=per_seed_var, time_variance=time_variance, time_df=time_df, k_pilot=k_pilot)
    if _none(r):
        assert r.n is None and half >= end * (1 - 1e-9)
    elif r.n is None and half > end * (1 + 1e-9):
        pytest.fail(f"the time part ({half:.4g}) covers the optimistic end ({end:.4g}) but 'none' was not said")


@settings(max_examples=150, deadline=None)
@given(**_COMPONENTS, shrink=st.floats(0.0, 1.0))
def test_none_holds_for_a_smaller_gap_and_more_pilot_seeds(gap: float, per_seed_var: float, time_variance: float,
                                                           time_df: float, k_pilot: int, shrink: float) -> None:
    args = dict(per_seed_var=per_seed_var, time_variance=time_variance, time_df=time_df)
    if not _none(seeds_needed(gap=gap, k_pilot=k_pilot, **args)):
        return
    smaller = gap * shrink
    if smaller != 0:
        assert _none(seeds_needed(gap=smaller, k_pilot=k_pilot, **args))
    assert _none(seeds_needed(gap=gap, k_pilot=k_pilot + 1, **args))   # the same S measured on more seeds
