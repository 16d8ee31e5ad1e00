"""The stopping rule of core/sequential.py: boundaries, level under repeated looks, outcomes, futility, determinism.

The boundaries are checked against a Monte Carlo of Brownian motion at the information times (the
joint law they are built for); the A/A level of :func:`replay` against a small simulation from
:mod:`rolling_calib.simulation.verdict_sim` (within its Monte Carlo error); the outcomes on panels whose
answer is known by construction.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rolling_calib.core.sequential import (
    SPENDING,
    Look,
    SequentialState,
    boundaries,
    hwang_shih_decani_spending,
    obrien_fleming_spending,
    replay,
)
from rolling_calib.core.question import Question
from rolling_calib.core.stopping import SPENDINGS, StoppingRule
from rolling_calib.core.verdict import LossPanel
from rolling_calib.simulation.verdict_sim import PanelModel, simulate_pair

#: The seed-dominated model of bench/verdict_calibration.py (seeds' spread is most of the interval).
SEED_DOMINATED = PanelModel(market_sd=5.0, seed_sd=0.3, window_sd=0.1, window_days=125, noise_sd=2.45,
                            interaction_sd=1.0, interaction_phi=0.1)


def _crossings(fractions: list[float], bounds: np.ndarray, n: int = 200_000, seed: int = 1) -> np.ndarray:
    """Share of Brownian paths (observed at ``fractions``) that first cross ``|Z_j| > c_j`` at each look."""
    rng = np.random.default_rng(seed)
    steps = np.diff(np.concatenate([[0.0], fractions]))
    s = np.cumsum(rng.normal(size=(n, len(fractions))) * np.sqrt(steps), axis=1)
    z = s / np.sqrt(fractions)
    crossed = np.abs(z) > bounds
    first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), -1)
    return np.array([(first == j).mean() for j in range(len(fractions))])


@pytest.mark.parametrize("spending", sorted(SPENDING))
@pytest.mark.parametrize("fractions", [[0.25, 0.5, 0.75, 1.0], [0.3, 0.45, 0.7, 0.9, 1.0]])
def test_boundaries_spend_alpha_look_by_look(spending, fractions):
    alpha = 0.05
    c = boundaries(fractions, alpha=alpha, spending=spending)
    first = _crossings(fractions, c)
    spend = SPENDING[spending]
    wanted = np.diff(np.concatenate([[0.0], [spend(u, alpha) for u in fractions]]))
    n = 200_000
    se = np.sqrt(np.maximum(wanted, 1e-6) * (1 - wanted) / n)
    assert np.all(np.abs(first - wanted) < 4 * se + 2e-4), (first, wanted)
    assert abs(first.sum() - alpha) < 4 * math.sqrt(alpha * (1 - alpha) / n)


def test_one_look_is_the_fixed_sample_boundary_and_spending_ends_at_alpha():
    assert boundaries([1.0], alpha=0.05)[0] == pytest.approx(1.959964, abs=1e-5)
    assert obrien_fleming_spending(1.0, 0.05) == pytest.approx(0.05)
    assert hwang_shih_decani_spending(1.0, 0.05) == pytest.approx(0.05)
    # hand-computed: 0.05 (1 - e^{0.5}) / (1 - e^{2}) at u = 1/4
    assert hwang_shih_decani_spending(0.25, 0.05) == pytest.approx(0.05 * (1 - math.exp(0.5)) / (1 - math.exp(2.0)))


def _panel(shift: float, rng: np.random.Generator, *, seeds: int = 20, days: int = 60, day=None) -> LossPanel:
    day = rng.normal(0, 0.2, days) if day is None else day
    return LossPanel.from_arrays(seeds=range(seeds), total=10 + day + shift + rng.normal(0, 1, (seeds, 1))
                                 + rng.normal(0, 1, (seeds, days)))


def test_large_differences_are_decided_early_in_both_directions():
    rng = np.random.default_rng(0)
    day = rng.normal(0, 0.2, 60)
    a, b = _panel(-3.0, rng, day=day), _panel(0.0, rng, day=day)
    r = replay({"a": a, "b": b}, rule=StoppingRule(first=3, batch=2, max_seeds=20))
    assert r.outcomes[("a", "b")] == "better"
    assert r.seeds_used == {"a": r.stopped[("a", "b")].seeds, "b": r.stopped[("a", "b")].seeds}
    assert r.fraction_of_grid < 0.5
    assert replay({"b": b, "a": a}, rule=StoppingRule(first=3, batch=2, max_seeds=20)).outcomes[("b", "a")] == "worse"
    higher = replay({"a": a, "b": b}, rule=StoppingRule(first=3, batch=2, max_seeds=20), orientation="higher")
    assert higher.outcomes[("a", "b")] == "worse"


def test_equivalence_within_a_wide_margin_and_undetermined_at_the_budget():
    rng = np.random.default_rng(3)
    day = rng.normal(0, 0.2, 60)
    a, b = _panel(0.0, rng, day=day), _panel(0.0, rng, day=day)
    eq = replay({"a": a, "b": b}, rule=StoppingRule(first=3, batch=2, max_seeds=10, margin=50.0))
    assert eq.outcomes[("a", "b")] == "equivalent" and eq.seeds_used["a"] == 3
    plain = replay({"a": a, "b": b}, rule=StoppingRule(first=3, batch=2, max_seeds=5, futility=0.0))
    assert plain.outcomes[("a", "b")] == "undetermined"
    assert plain.stopped[("a", "b")].seeds == 5 and "budget" in plain.stopped[("a", "b")].why


def test_undecidable_when_market_time_alone_keeps_the_interval_over_zero():
    """No seed noise at all, a tiny gap buried in the days' noise: more seeds cannot help."""
    rng = np.random.default_rng(5)
    days = 40
    common = rng.normal(0, 1, days)
    a = LossPanel.from_arrays(seeds=range(10), total=np.tile(10 + common + rng.normal(0, 3, days), (10, 1))
                              + rng.normal(0, 1e-4, (10, days)))
    b = LossPanel.from_arrays(seeds=range(10), total=np.tile(10 + common + rng.normal(0, 3, days), (10, 1))
                              + rng.normal(0, 1e-4, (10, days)))
    r = replay({"a": a, "b": b}, rule=StoppingRule(first=3, batch=2, max_seeds=10), question=Question(target="future"))
    assert r.outcomes[("a", "b")] == "undecidable"
    assert r.seeds_used["a"] == 3


def test_futility_never_decides_a_pair_the_rule_without_it_would_not():
    """Futility only stops without a decision: every decision with it is the same decision, at the same look,
    without it (the boundaries depend on the data only)."""
    rng = np.random.default_rng(11)
    for i in range(12):
        pa, pb, _ = simulate_pair(SEED_DOMINATED, n_seeds=12, n_days=60, delta=-0.2 * (i % 4), rng=rng)
        with_f = replay({"a": pa, "b": pb}, rule=StoppingRule(first=3, batch=2, max_seeds=12, futility=0.9), order_seed=i)
        without = replay({"a": pa, "b": pb}, rule=StoppingRule(first=3, batch=2, max_seeds=12, futility=0.0), order_seed=i)
        o = with_f.outcomes[("a", "b")]
        if o in ("better", "worse"):
            assert without.outcomes[("a", "b")] == o
            assert without.stopped[("a", "b")].seeds == with_f.stopped[("a", "b")].seeds
        if "futility" in with_f.stopped[("a", "b")].why:
            assert o == "undetermined"


@pytest.mark.slow
def test_replay_holds_its_level_on_identical_pairs_within_monte_carlo_error():
    """A/A pairs looked at after every batch: decided at most 5% (+ 3 Monte Carlo SE)."""
    rng = np.random.default_rng(2027)
    reps = 200
    decided = 0
    for i in range(reps):
        pa, pb, _ = simulate_pair(SEED_DOMINATED, n_seeds=12, n_days=60, delta=0.0, rng=rng)
        r = replay({"a": pa, "b": pb}, rule=StoppingRule(first=3, batch=2, max_seeds=12), order_seed=i)
        decided += r.outcomes[("a", "b")] in ("better", "worse")
    rate = decided / reps
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps), rate


def test_replay_is_deterministic_and_is_the_state_driven_by_hand():
    rng = np.random.default_rng(7)
    day = rng.normal(0, 0.2, 60)
    panels = {"a": _panel(-0.6, rng, day=day), "b": _panel(0.0, rng, day=day), "c": _panel(-0.3, rng, day=day)}
    r1 = replay(panels, rule=StoppingRule(first=3, batch=2, max_seeds=15), order_seed=4)
    r2 = replay(panels, rule=StoppingRule(first=3, batch=2, max_seeds=15), order_seed=4)
    assert r1.to_dict() == r2.to_dict() and r1.looks == r2.looks
    order = np.random.default_rng(4).permutation(20)[:15]
    ordered = {n: p.select(seeds=order) for n, p in panels.items()}
    state = SequentialState(list(panels), rule=StoppingRule(first=3, batch=2, max_seeds=15))
    while not state.done:
        wanted = state.wanted()
        assert set(wanted) == set(state.open_names)        # only pipelines in an open pair get more seeds
        state.look({n: ordered[n].select(seeds=np.arange(k)) for n, k in wanted.items()})
    assert state.result(order_seed=4).to_dict() == r1.to_dict()


def test_state_gives_the_next_batch_only_to_pipelines_with_an_open_pair():
    rng = np.random.default_rng(8)
    day = rng.normal(0, 0.2, 60)
    panels = {"a": _panel(0.0, rng, day=day), "b": _panel(0.0, rng, day=day), "c": _panel(30.0, rng, day=day)}
    state = SequentialState(["a", "b", "c"], rule=StoppingRule(first=3, batch=2, max_seeds=9, futility=0.0))
    state.look(panels)
    assert state.outcomes[("a", "c")] == "better" and state.outcomes[("b", "c")] == "better"
    assert state.wanted() == {"a": 5, "b": 5}
    with pytest.raises(ValueError, match="at least 5 seeds"):
        state.look({n: p.select(seeds=np.arange(3)) for n, p in panels.items()})


def test_bad_settings_are_refused_where_the_rule_is_made():
    """The rule's constraints are declared once (StoppingRule): the state and replay take only a made rule."""
    with pytest.raises(ValueError, match=r"^first: expected an integer in \[2, 10000\]"):
        StoppingRule(first=1, batch=2, max_seeds=5)
    with pytest.raises(ValueError, match=r"^spending: expected 'hwang-shih-decani' or 'obrien-fleming', found 'pocock'$"):
        StoppingRule(spending="pocock")
    with pytest.raises(ValueError, match=r"^max_seeds: expected an integer >= first \(3\), found 2$"):
        StoppingRule(first=3, max_seeds=2)
    with pytest.raises(ValueError, match=r"^rule: expected a StoppingRule value"):
        SequentialState(["a", "b"], rule={"first": 3})
    with pytest.raises(ValueError, match=r"^question: expected a Question value"):
        replay({"a": _panel(0.0, np.random.default_rng(0))}, question="period")
    assert set(SPENDING) == set(SPENDINGS)


def test_the_rule_and_the_question_are_recorded_with_the_result():
    rng = np.random.default_rng(3)
    panels = {"a": _panel(-5.0, rng), "b": _panel(0.0, rng)}
    rule, question = StoppingRule(first=3, batch=2, max_seeds=9), Question(target="period", confidence=0.9)
    r = replay(panels, rule=rule, question=question, order_seed=1)
    assert r.settings["rule"] == rule.to_dict() and r.settings["question"] == question.to_dict()
    assert r.settings["order_seed"] == 1 and r.full_grid == 9
    look = r.stopped[("a", "b")]
    assert Look.from_dict(look.to_dict()) == look
