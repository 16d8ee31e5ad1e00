"""The sequential path of a run ``--until-decided`` as a typed value (issue 34): one JSON conversion both ways, a path
written before the rule and the question were values still read, and what compare, the report and MLflow show."""

from __future__ import annotations

import json

import numpy as np
import pytest
from runner_helpers import write_fake_store

from rolling_calib.analysis.sequential_path import (
    SEQUENTIAL_FILE,
    BatchRecord,
    NumberedLook,
    SequentialPath,
    UnitCount,
    read_path,
    write_path,
)
from rolling_calib.cli import main
from rolling_calib.core.question import Question
from rolling_calib.core.sequential import SequentialState
from rolling_calib.core.stopping import StoppingRule
from rolling_calib.core.verdict import LossPanel

RULE = StoppingRule(first=3, batch=2, max_seeds=9, futility=0.0)
QUESTION = Question(target="period", confidence=0.9)


def _state() -> SequentialState:
    """Three pipelines, c far worse (stops at the first look), a and b alike (looked at until the budget)."""
    rng = np.random.default_rng(4)
    day = rng.normal(0, 0.2, 60)
    panels = {n: LossPanel.from_arrays(seeds=range(9), total=10 + day + shift + rng.normal(0, 1, (9, 1))
                                       + rng.normal(0, 1, (9, 60)))
              for n, shift in (("a", 0.0), ("b", 0.0), ("c", 30.0))}
    state = SequentialState(list(panels), rule=RULE, question=QUESTION)
    while not state.done:
        state.look(panels)
    return state


def _path(state: SequentialState) -> SequentialPath:
    numbers: dict = {}
    looks = []
    for look in state.looks:
        numbers[look.pair] = numbers.get(look.pair, 0) + 1
        looks.append(NumberedLook(numbers[look.pair], look))
    used = state.used()
    return SequentialPath(metric="ql", rule=state.rule, question=state.question, orientation=state.orientation,
                          seed_order=tuple(range(9)), done=state.done, looks=tuple(looks), open=(),
                          seeds_used=used, units=UnitCount(used=2 * sum(used.values()), full_grid=2 * 3 * 9,
                                                           trained_by_this_run=2 * sum(used.values())),
                          cpu_used=30.0, cpu_full_grid_estimate=100.0,
                          schedule=(BatchRecord("a", (0, 1, 2), "2024-01-01T00:00:00+00:00",
                                                "2024-01-01T00:01:00+00:00", 6),))


def test_the_path_goes_through_json_and_back_unchanged(tmp_path):
    state = _state()
    path = _path(state)
    assert path.outcomes == {" vs ".join(p): o for p, o in state.outcomes.items()}
    assert list(path.stopped) == [" vs ".join(p) for p in state.stopped]
    assert path.looks_done == state.n_looks and path.full_grid == 9
    data = path.to_dict()
    assert data["settings"] == {"rule": RULE.to_dict(), "question": QUESTION.to_dict(), "orientation": "lower",
                                "pairs": "Bonferroni"}
    json.dumps(data, allow_nan=False)                     # strict JSON: NaN and inf through the one conversion
    write_path(tmp_path, path)
    assert read_path(tmp_path) == path
    assert read_path(tmp_path / "nowhere") is None


def test_a_path_written_before_the_values_is_read(tmp_path):
    """Flat settings, the pair as a list in no look, an unspent boundary written as JSON's Infinity."""
    old = {"metric": "ql", "settings": {"first": 2, "batch": 1, "max_seeds": 4, "confidence": 0.95,
                                        "target": "future", "margin": None, "futility": 0.0,
                                        "spending": "hwang-shih-decani", "orientation": "lower",
                                        "pairs": "Bonferroni"},
           "seed_order": [0, 1, 2, 3], "done": True, "looks_done": 1, "outcomes": {"x vs y": "equivalent"},
           "open": [], "looks": [{"pair": "x vs y", "seeds": 2, "fraction": 0.5, "boundary": float("inf"),
                                  "level": 0.999999999999, "difference": 0.1, "ci_low": -0.2, "ci_high": 0.4,
                                  "outcome": "equivalent", "why": "inside", "look": 1}],
           "stopped": {}, "seeds_used": {"x": 2, "y": 2}, "full_grid": 4,
           "units": {"used": 8, "full_grid": 16, "trained_by_this_run": 8}, "cpu_seconds": {"used": 4.0},
           "schedule": [{"pipeline": "x", "seeds": [0, 1], "asked_at": "t0"}]}
    (tmp_path / SEQUENTIAL_FILE).write_text(json.dumps(old))
    path = read_path(tmp_path)
    assert path.rule == StoppingRule(first=2, batch=1, max_seeds=4, futility=0.0)
    assert path.question == Question(target="future")   # as it was written (the default was future then)
    assert path.outcomes == {"x vs y": "equivalent"} and path.looks[0].look.boundary == float("inf")
    assert path.cpu_full_grid_estimate is None and path.units.fraction == 0.5
    (tmp_path / SEQUENTIAL_FILE).write_text('{"metric": "ql"}')
    with pytest.raises(ValueError, match=r"sequential.json: not a sequential path .*re-run the same"):
        read_path(tmp_path)


def test_compare_report_and_mlflow_read_the_path_by_its_attributes(tmp_path, capsys):
    store = tmp_path / "store"
    write_fake_store(store, pipelines={"a": {"bias_sd": 1.0}, "b": {"bias_sd": 0.5}}, seeds=3)
    path = _path(_state())
    write_path(store, path)
    assert main(["compare", "--store", str(store), "--n-boot", "50"]) == 0
    text = capsys.readouterr().out
    section = text[text.index("Sequential path"):]
    assert "  a vs c: a better (a - c = " in section and "at the spent level" in section   # the winner, by name
    assert " at look 1 (3 seeds per pipeline)" in section
    assert "spent level: the confidence of a look's interval" in section                # defined where shown
    assert "question: over seeds, on the evaluated days (target period), at 90% confidence" in section
    assert f"units {path.units.used} of the full grid's {path.units.full_grid}" in section
    assert main(["compare", "--store", str(store), "--n-boot", "50", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sequential"] == {**path.to_dict(), "seeds_note": ""}
    tags, metrics = path.tags(), path.metrics()
    assert tags["sequential.question.target"] == "period" and tags["sequential.rule.max_seeds"] == "9"
    assert tags["sequential.a_vs_c.outcome"] == "better" and tags["sequential.a_vs_c.look"] == "1"
    assert metrics["sequential_cpu_s_saved"] == 70.0 and metrics["sequential_looks"] == path.looks_done
    rows = path.rows()
    assert {r["pair"] for r in rows} == {"a vs b", "a vs c", "b vs c"} and all(r["look"] for r in rows)


def test_the_report_shows_the_path_look_by_look(tmp_path):
    """Issue 39: the report showed one row per pair (where it stopped); now every look, with its interval."""
    from rolling_calib.reporting.document import _sequential

    store = tmp_path / "store"
    store.mkdir()
    path = _path(_state())
    write_path(store, path)
    table, line = _sequential(store, {"a": 3, "b": 3, "c": 3})
    assert len(table.rows) == len(path.looks)                      # a row per look at each pair
    for row, nl in zip(table.rows, path.looks):
        assert row[0] == nl.pair and row[1] == str(nl.number) and row[2] == str(nl.look.seeds)
        assert row[5] == f"{nl.look.level:.4f}"
        a, b = nl.look.pair
        assert row[6] == {"better": f"{a} better", "worse": f"{b} better", "open": "went on"}.get(
            nl.look.outcome, nl.look.outcome)
    assert "Spent level: the confidence of a look's interval" in line and "a minus b" in line


def test_a_store_with_more_seeds_than_the_path_used_says_so_and_the_difference_has_its_unit(tmp_path, capsys):
    """Issue 39: the verdict table beside the path used all 10 seeds where the path stopped at 5, without a word,
    and the path's difference had no unit."""
    from dataclasses import replace

    from rolling_calib.reporting.document import _sequential

    store = tmp_path / "store"
    write_fake_store(store, pipelines={"a": {"bias_sd": 1.0}, "b": {"bias_sd": 0.5}, "c": {"bias_sd": 0.5}}, seeds=10)
    path = replace(_path(_state()), unit="bp²")
    assert path.seeds_used["c"] == 3
    write_path(store, path)
    assert main(["compare", "--store", str(store), "--n-boot", "50"]) == 0
    text = capsys.readouterr().out
    section = text[text.index("The verdict table uses every seed"):]
    assert "(a 10, b 10, c 10)" in section and f"stopped at a {path.seeds_used['a']}, b" in section
    assert section.index("The verdict table uses") < section.index("Sequential path")
    assert " bp², lower is better; [" in section and "] bp² at the spent level" in section
    assert main(["compare", "--store", str(store), "--n-boot", "50", "--json"]) == 0
    sequential = json.loads(capsys.readouterr().out)["sequential"]
    assert sequential["unit"] == "bp²" and "c 3 seeds" in sequential["seeds_note"].replace(",", "")
    assert read_path(store).unit == "bp²"
    table, line = _sequential(store, {"a": 10, "b": 10, "c": 10})
    assert "The verdict table uses every seed in the store" in line
    assert table.columns[3] == "difference (bp²)"
    _, line = _sequential(store, dict(path.seeds_used))
    assert "every seed in the store" not in line
