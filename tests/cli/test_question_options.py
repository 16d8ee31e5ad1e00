"""The question, bootstrap and stopping-rule options (issue 34): each builds its one value, takes its defaults and
constraints from it, and is offered only where it acts."""

from __future__ import annotations

import argparse
import json

import pytest
from cli_helpers import leaf_parsers
from runner_helpers import write_fake_store

from rolling_calib.cli import main
from rolling_calib.cli.options import question_from_args, resampling_from_args, until_decided_from_args
from rolling_calib.core.question import DEFAULT_QUESTION, Question
from rolling_calib.core.resampling import Resampling
from rolling_calib.core.stopping import DEFAULT_RULE, StoppingRule

COMMANDS = dict(leaf_parsers())


def _options(path: tuple[str, ...]) -> set[str]:
    return {o for a in COMMANDS[path]._actions for o in a.option_strings}


def test_block_size_is_offered_nowhere():
    """Verdicts are analytic and the sweep's model confidence set is seed-aware and analytic (issue 35): no command
    draws blocks of market time, so --block-size would change nothing but its echo."""
    offering = sorted(" ".join(p) for p in COMMANDS if "--block-size" in _options(p))
    assert offering == []


@pytest.mark.parametrize("command", ["compare", "report", "diagnose"])
def test_block_size_is_refused_where_it_does_nothing(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--store", "s", "--block-size=2"])
    assert exit_info.value.code == 2 and "unrecognized arguments: --block-size" in capsys.readouterr().err


def test_the_target_is_offered_where_verdicts_or_stops_answer_it():
    """metaeval gives no verdict (only bootstrap intervals at --confidence): no --target there."""
    assert "--target" not in _options(("metaeval",)) and "--confidence" in _options(("metaeval",))
    for path in [("compare",), ("report",), ("diagnose",), ("sweep",), ("run",), ("demo",)]:
        assert "--target" in _options(path), path


def test_the_options_build_the_values_with_their_defaults():
    parser = COMMANDS[("run",)]
    args = parser.parse_args(["workflows/demo.yaml", "--store", "s", "--until-decided"])
    assert question_from_args(args) == DEFAULT_QUESTION
    assert until_decided_from_args(args).rule == DEFAULT_RULE and until_decided_from_args(args).decide_by == "ql"
    args = parser.parse_args(["workflows/demo.yaml", "--store", "s", "--until-decided", "--first", "2", "--batch", "1",
                              "--max-seeds", "4", "--spending", "obrien-fleming", "--futility", "0", "--margin", "0.5",
                              "--target", "period", "--confidence", "0.9"])
    assert until_decided_from_args(args).rule == StoppingRule(first=2, batch=1, max_seeds=4, spending="obrien-fleming",
                                                              futility=0.0, margin=0.5)
    race = COMMANDS[("sweep",)].parse_args(["workflows/demo.yaml", "--until-decided", "--seed-variance", "pooled"])
    assert until_decided_from_args(race).rule == StoppingRule(seed_variance="pooled")
    assert "--seed-variance" not in _options(("run",))      # the pairs' rule reads only a pair's own variance
    assert question_from_args(args) == Question(target="period", confidence=0.9)
    assert until_decided_from_args(parser.parse_args(["workflows/demo.yaml", "--store", "s"])) is None
    sweep = COMMANDS[("sweep",)].parse_args(["workflows/demo.yaml", "--n-boot", "300", "--boot-seed", "2"])
    assert resampling_from_args(sweep) == Resampling(n_boot=300, seed=2)
    assert resampling_from_args(argparse.Namespace()) == Resampling()


@pytest.mark.parametrize("argv, message", [
    (["--margin", "inf"], "argument --margin: expected None or a finite number > 0 (in the metric's unit), found inf"),
    (["--margin", "0"], "argument --margin: expected None or a finite number > 0 (in the metric's unit), found 0.0"),
    (["--first", "1"], "argument --first: expected an integer in [2, 10000]"),
    (["--futility", "1.5"], "argument --futility: expected a probability in [0, 1], found 1.5"),
    (["--first", "5", "--max-seeds", "4"], "--max-seeds: expected an integer >= first (5), found 4"),
    (["--spending", "pocock"], "argument --spending: invalid choice: 'pocock'"),
], ids=["margin-inf", "margin-0", "first-1", "futility", "max-below-first", "spending"])
def test_a_bad_stopping_rule_is_refused_at_parse_time_in_the_options_words(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "workflows/demo.yaml", "--store", "s", "--until-decided", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_compare_records_the_question_and_the_bootstrap_it_was_given(tmp_path, capsys):
    store = tmp_path / "store"
    write_fake_store(store, pipelines={"calm": {"bias_sd": 1.0}, "wild": {"bias_sd": 0.5}}, seeds=3)
    assert main(["compare", "--store", str(store), "--json", "--target", "period", "--confidence", "0.9",
                 "--n-boot", "60", "--boot-seed", "3"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["question"] == {"target": "period", "confidence": 0.9, "claim": "over seeds, on these days"}
    assert data["bootstrap"] == {"n_boot": 60, "seed": 3, "block_size": None}
    verdict = data["pairs"][0]["verdicts"]["ql"]
    assert verdict["question"] == {"target": "period", "confidence": 0.9} and verdict["variance"]["target"] == "period"
    assert data["pairs"][0]["accuracies"]["ql"]["confidence"] == 0.9


def test_a_bad_seed_variance_is_refused_by_sweep(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "workflows/demo.yaml", "--until-decided", "--seed-variance", "welch"])
    assert exit_info.value.code == 2
    assert "argument --seed-variance: invalid choice: 'welch'" in capsys.readouterr().err
