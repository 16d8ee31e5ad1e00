"""The live race's step on small panels: ``race(..., seed_order=)`` and ``next_look`` (rolling_calib.experiment.race_live).

The live race trains what the race asks for, look by look; these tests play that loop in memory
on finished panels and check it against the race replayed on them whole: the same looks, the same
answer, exactly the seeds the race read trained, and a resume from any store state (extra seeds
present, a configuration ahead of the others) lands on the same race.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolling_calib.analysis.race_record import RaceRecord, format_race, race_from_dict
from rolling_calib.core.question import Question
from rolling_calib.core.racing import race
from rolling_calib.core.stopping import StoppingRule
from rolling_calib.core.verdict import LossPanel
from rolling_calib.experiment.race_live import next_look

PERIOD = Question(target="period")
RULE = StoppingRule(first=3, batch=2, max_seeds=9)


def _panels(shifts, *, seeds=9, days=20, seed=0, offset_sd=0.3):
    rng = np.random.default_rng(seed)
    day = rng.normal(0, 0.3, days)
    return {f"c{i}": LossPanel.from_arrays(seeds=range(seeds), total=5 + day + s + rng.normal(0, offset_sd, (seeds, 1))
                                           + rng.normal(0, 1, (seeds, days)))
            for i, s in enumerate(shifts)}


def _first(panel: LossPanel, k: int) -> LossPanel:
    return panel.select(seeds=np.arange(k))


def _live(full, *, rule=RULE, start=None, orientation="lower"):
    """Play the live loop: train what the race asks for until it ends. Returns (result, seeds held, looks asked)."""
    held = dict(start or {n: rule.first for n in full})
    order = list(range(rule.max_seeds))
    for _ in range(50):
        result, need = next_look({n: _first(p, held[n]) for n, p in full.items()}, rule=rule, question=PERIOD,
                                 orientation=orientation, seed_order=order)
        if result.stop:
            return result, held
        assert need, "a race that waits must name seeds to train"
        for name, seeds in need.items():
            assert list(seeds) == list(range(held[name], held[name] + len(seeds)))   # the next seeds, in order
            held[name] += len(seeds)
    raise AssertionError("the live race did not end")


@settings(max_examples=30, deadline=None)
@given(shifts=st.lists(st.floats(-2, 2), min_size=2, max_size=5), seed=st.integers(0, 10_000),
       orientation=st.sampled_from(["lower", "higher"]), seed_variance=st.sampled_from(["pair", "pooled"]))
def test_the_live_race_is_the_race_replayed_on_the_finished_panels(shifts, seed, orientation, seed_variance):
    full = _panels(shifts, seed=seed)
    rule = RULE.replace(seed_variance=seed_variance)
    live, held = _live(full, rule=rule, orientation=orientation)
    whole = race(full, rule=rule, question=PERIOD, orientation=orientation, seed_order=range(RULE.max_seeds))
    assert live.looks == whole.looks and live.best_set == whole.best_set and live.eliminated == whole.eliminated
    assert live.seeds_used == whole.seeds_used and live.stop == whole.stop and not live.pending
    assert held == live.seeds_used            # trained exactly the seeds the race read, nothing more


def test_an_eliminated_configuration_keeps_fewer_seeds_and_the_others_go_on():
    full = _panels([0.0, 0.0, 6.0], seed=1)   # c2 far worse: out at the first look
    live, held = _live(full)
    assert live.eliminated == {"c2": 1} and held["c2"] == RULE.first
    assert held["c0"] == held["c1"] > RULE.first


@pytest.mark.parametrize("start", [{"c0": 9, "c1": 9, "c2": 9}, {"c0": 7, "c1": 3, "c2": 5}, {"c0": 5, "c1": 5,
                                                                                              "c2": 3}])
def test_a_resumed_race_lands_on_the_same_race_whatever_the_store_holds(start):
    full = _panels([0.0, 0.4, 6.0], seed=1)
    fresh, _ = _live(full)
    resumed, held = _live(full, start=start)
    assert resumed.looks == fresh.looks and resumed.best_set == fresh.best_set
    assert resumed.seeds_used == fresh.seeds_used
    assert all(held[n] == max(start[n], fresh.seeds_used[n]) for n in full)   # trained only what it lacked


def test_a_waiting_race_names_the_next_look_and_refuses_a_short_seed_order():
    full = _panels([0.0, 0.1, 0.2], seed=2)
    rule = StoppingRule(first=3, batch=2, max_seeds=9, futility=0.0)   # no futility stop: look 2 is needed
    result, need = next_look({n: _first(p, 3) for n, p in full.items()}, rule=rule, question=PERIOD,
                             orientation="lower", seed_order=range(9))
    assert len(result.looks) == 1 and result.stop == ""
    assert set(result.pending.values()) == {5} and all(need[n] == (3, 4) for n in result.pending)
    assert result.settings["seed_order"] == list(range(9))
    assert "waiting: the next look needs" in "\n".join(format_race(result, metric="ql", unit="bp²"))
    with pytest.raises(ValueError, match="seed_order: expected at least max_seeds"):
        race({n: _first(p, 3) for n, p in full.items()}, rule=RULE, seed_order=range(5))


def test_the_record_round_trips_through_json_and_says_each_look_in_one_line():
    full = _panels([0.0, 0.0, 6.0], seed=1)
    live, _ = _live(full)
    record = RaceRecord(race=live, metric="ql", unit="bp²", windows=2, trained_by_this_run=7)
    back = RaceRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert back == record and race_from_dict(live.to_dict()) == live
    text = record.format().splitlines()
    assert text[0].startswith("Race by QL (3 configurations")
    assert text[1].startswith("  look 1: 3 seeds each (one-sided ") and "eliminated c2 (worse than c" in text[1]
    assert "bp² QL" in text[1] and "of the grid's 27 seeds spent" in text[1]
    assert any(line.startswith("  best set: c0, c1") for line in text)
    assert record.units_used == 2 * sum(live.seeds_used.values()) and record.units_full_grid == 54


def test_a_look_that_compares_fewer_than_are_kept_names_them():
    """A configuration that gets no more seeds stays kept; the look's "seeds each" names who had them."""
    from rolling_calib.analysis.race_record import look_line
    from rolling_calib.core.racing import RaceLook

    look = RaceLook(look=2, seeds=3, fraction=0.6, boundary=2.5, level=0.994, best="b", compared=("b", "c"),
                    kept=("a", "b", "c"), eliminated=(), settled=(), seeds_spent=8, stop="")
    line = look_line(look, metric="ql", unit="bp²", configurations=3, full_grid=5)
    assert line.startswith("look 2: 3 seeds each of b, c (one-sided 99.4% bounds): kept a, b, c;")
    full = look_line(RaceLook(**{**look.__dict__, "compared": ("a", "b", "c")}), metric="ql", unit="bp²",
                     configurations=3, full_grid=5)
    assert full.startswith("look 2: 3 seeds each (one-sided")
