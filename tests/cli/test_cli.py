"""The command line as a whole: every command has --help, result commands have --json."""

from __future__ import annotations

import subprocess
import sys

import pytest
from cli_helpers import leaf_parsers

from rolling_calib.cli import main

LEAVES = dict(leaf_parsers())

#: Commands that print results must offer machine-readable output.
RESULT_COMMANDS = {
    ("run",),
    ("compare",),
    ("report",),
    ("sweep",),
    ("demo",),
    ("synthetic", "linear"),
    ("synthetic", "logistic"),
}


def test_every_expected_command_is_registered():
    top = {path[0] for path in LEAVES}
    assert {"demo", "data", "run", "compare", "report", "sweep", "synthetic"} <= top
    assert {("data", "synth"), ("data", "ingest")} <= set(LEAVES)


@pytest.mark.parametrize("path", sorted(LEAVES), ids=lambda p: " ".join(p))
def test_help_of_every_command(path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*path, "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: rolling-calib " + " ".join(path))
    assert len(text.splitlines()) > 3, "a --help should say more than the usage line"


@pytest.mark.parametrize("path", sorted(RESULT_COMMANDS), ids=lambda p: " ".join(p))
def test_result_commands_offer_json(path):
    options = {opt for action in LEAVES[path]._actions for opt in action.option_strings}
    assert "--json" in options


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_console_script_help_is_light():
    """`rolling-calib --help` must not import Qlib, torch, Ray or MLflow."""
    code = (
        "import sys; from rolling_calib.cli import build_parser; build_parser().format_help();"
        "heavy = [m for m in ('qlib', 'torch', 'ray', 'mlflow') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
