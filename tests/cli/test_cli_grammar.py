"""One grammar for every command (issue 20, item 3).

Every command of the argparse tree is found by walking it, so a new command is covered without
editing this file. ``rolling-calib COMMAND --help`` must show the store as ``--store DIR`` in the same
words wherever a command takes a result store, every option that several commands take in the same
words with the same default, ``--json`` and ``--no-progress`` on every command, and no positional STORE.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict

import pytest
from cli_helpers import leaf_parsers
from runner_helpers import write_fake_store

from rolling_calib.cli import main

COMMANDS = dict(leaf_parsers())

#: The commands that read or write a result store.
STORE_COMMANDS = {("run",), ("sweep",), ("compare",), ("report",), ("diagnose",), ("metaeval",), ("relocate",)}

#: Options that several commands take with words of their own, on purpose: what differs, and why.
OWN_WORDS = {
    "--out": "where each command writes differs: a report directory (report, sweep), the demo's data, stores "
             "and reports, a Qlib store (data synth, ingest); the form --out DIR is the same",
    "--start": "data commands: the synthetic calendar's first date, or the data's, or the store's",
    "--end": "data commands: as --start",
    "--seed": "the synthetic market's seed (data synth) is not the synthetic experiments' master seed",
    "--plot": "a store's price paths (data info) is not the per-round accuracies (synthetic)",
    "--n-bias": "the bias part of the evaluation set: 1000 in the linear experiment, 2000 in the logistic one",
}


def _help_text(path: tuple[str, ...], capsys) -> str:
    """What ``rolling-calib PATH --help`` prints."""
    with pytest.raises(SystemExit) as exit_info:
        main([*path, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def _option_blocks(help_text: str) -> dict[str, str]:
    """``{option string: its entry in --help}``, the entry's whitespace (and word wrapping) normalised.

    The entries of a group form one paragraph (after the group's title and description paragraphs); an entry
    starts on a line indented by two spaces with an option and runs over the deeper-indented lines after it.
    A word that argparse broke after a hyphen (``learn-`` / ``processed``) is joined again.
    """
    entries: list[list[str]] = []
    for paragraph in help_text.split("\n\n"):
        lines = paragraph.splitlines()
        if lines and not lines[0].startswith(" ") and lines[0].endswith(":"):
            lines = lines[1:]                                   # a group's title
        if not lines or not lines[0].startswith("  -"):
            continue                                            # usage, description, a group's description
        for line in lines:
            if line.startswith("  -"):
                entries.append([line])
            else:
                assert line.startswith("   "), line
                entries[-1].append(line)
    blocks = {}
    for lines in entries:
        invocation = lines[0][2:].split("  ")[0]
        text = " ".join(re.sub(r"(?<=\w-)\n\s*", "", "\n".join(lines)).split())
        for name in re.findall(r"(?<![\w-])--?\w[\w-]*", invocation):
            blocks[name] = text
    return blocks


@pytest.fixture(scope="module")
def helps() -> dict[tuple[str, ...], str]:
    """Every command's --help (rendered by the parser itself, as ``--help`` prints it)."""
    return {path: parser.format_help() for path, parser in COMMANDS.items()}


def test_help_is_what_the_command_prints(capsys, helps):
    path = ("compare",)
    assert _help_text(path, capsys) == helps[path]


def test_the_tree_holds_every_command():
    assert STORE_COMMANDS <= set(COMMANDS)
    assert {("demo",), ("data", "synth"), ("data", "ingest"), ("data", "info"), ("data", "facts"),
            ("synthetic", "linear"), ("synthetic", "logistic")} <= set(COMMANDS)


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_every_command_takes_json_and_no_progress(path, helps):
    blocks = _option_blocks(helps[path])
    assert "--json" in blocks and "--no-progress" in blocks, helps[path]


def test_the_store_is_one_option_in_the_same_words(helps):
    entries = {path: _option_blocks(helps[path]).get("--store") for path in STORE_COMMANDS}
    assert all(entry is not None and entry.startswith("--store DIR ") for entry in entries.values()), entries
    assert len(set(entries.values())) == 1, entries
    others = [path for path in COMMANDS if path not in STORE_COMMANDS and "--store" in _option_blocks(helps[path])]
    assert others == [], "a command that takes --store belongs in STORE_COMMANDS (and in this grammar)"


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_no_command_takes_a_positional_store(path, helps):
    usage = helps[path].split("\n\n", 1)[0]
    assert not re.search(r"(?<![-\w])STORE\b", usage), usage
    visible = [a for a in COMMANDS[path]._actions if not a.option_strings and a.help is not argparse.SUPPRESS]
    assert not [a for a in visible if (a.metavar or a.dest).upper() == "STORE"]


def _shared_options() -> dict[str, list[tuple[str, ...]]]:
    """Every option string that two commands or more take: {option: [command paths]}."""
    where: dict[str, list[tuple[str, ...]]] = defaultdict(list)
    for path, parser in COMMANDS.items():
        for action in parser._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    where[option].append(path)
    return {option: paths for option, paths in where.items() if len(paths) > 1}


SHARED = _shared_options()


def test_the_grammar_shares_its_options():
    """The options the grammar declares once are shared (a rename in one command would fail here)."""
    for option in ("--store", "--workers", "--threads", "--executor", "--set", "--device", "--seeds", "--pipelines",
                   "--json", "--no-progress", "--n-boot", "--confidence", "--boot-seed", "--period", "--bias",
                   "--source", "--bias-window", "--missing-instrument", "--label", "--tracking-uri",
                   "--no-tracking", "--out"):
        assert option in SHARED, option


@pytest.mark.parametrize("path", sorted(SHARED["--n-boot"]), ids=" ".join)
def test_replicates_beyond_their_memory_bound_are_refused_at_parse_time(path, capsys):
    """``--n-boot 1000000000`` is refused before any work, with the bound named (one Resampling constraint)."""
    positional = {"run": ["workflows/demo.yaml"], "sweep": ["workflows/demo.yaml"]}.get(path[0], [])
    with pytest.raises(SystemExit) as exit_info:
        main([*path, *positional, "--n-boot", "1000000000"])
    assert exit_info.value.code == 2
    assert ("--n-boot: expected a positive int <= 100000 (the replicates are held in memory), found 1000000000"
            in capsys.readouterr().err)


@pytest.mark.parametrize("option", sorted(set(SHARED) - set(OWN_WORDS)))
def test_a_shared_option_reads_the_same_in_every_command(option, helps):
    entries = {path: _option_blocks(helps[path])[option] for path in SHARED[option]}
    assert len(set(entries.values())) == 1, "\n".join(f"{' '.join(p)}: {e}" for p, e in entries.items())
    attributes = {path: next((a.default, a.help, a.metavar, a.choices, a.nargs) for a in COMMANDS[path]._actions
                             if option in a.option_strings) for path in SHARED[option]}
    assert len(set(map(repr, attributes.values()))) == 1, attributes


def test_out_has_one_form(helps):
    for path in SHARED["--out"]:
        assert _option_blocks(helps[path])["--out"].startswith("--out DIR "), path


# ----------------------------------------------------------------------------- the store, old and new form
@pytest.fixture(scope="module")
def fake_store(tmp_path_factory):
    store = tmp_path_factory.mktemp("grammar") / "store"
    write_fake_store(store, pipelines={"calm": {"bias_sd": 1.0}, "wild": {"bias_sd": 0.5}}, seeds=3)
    return store


def _json_out(argv: list[str], capsys) -> dict:
    """Run ``argv``; its stdout must be one JSON document and nothing else."""
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_the_old_positional_store_still_works(fake_store, capsys):
    new = _json_out(["compare", "--store", str(fake_store), "--json", "--n-boot", "50"], capsys)
    old = _json_out(["compare", str(fake_store), "--json", "--n-boot", "50"], capsys)
    assert old == new and {p["pipeline"] for p in new["pipelines"]} == {"calm", "wild"}


@pytest.mark.parametrize("argv", [["compare", "{store}", "--store", "{store}"], ["diagnose", "--store", "{store}", "x"]],
                         ids=["positional first", "--store first"])
def test_the_store_given_twice_is_refused(fake_store, argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([a.format(store=fake_store) for a in argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "the store is given twice" in err and "give it once, as --store DIR" in err


@pytest.mark.parametrize("command", ["compare", "report", "diagnose", "metaeval", "run"])
def test_a_missing_store_is_a_usage_error(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, *(["workflows/demo.yaml"] if command == "run" else []), "--json"])
    assert exit_info.value.code == 2
    assert "the following arguments are required: --store" in capsys.readouterr().err


# ----------------------------------------------------------------------------- --json: JSON only on stdout
@pytest.mark.parametrize("argv", [
    ["compare", "--n-boot", "50"],
    ["diagnose"],
    ["metaeval", "--n-boot", "20", "--splits", "5"],
    ["report", "--n-boot", "20"],
], ids=lambda a: a[0])
def test_store_commands_print_json_only(fake_store, argv, capsys, tmp_path):
    extra = ["--out", str(tmp_path / "report")] if argv[0] == "report" else []
    out = _json_out([argv[0], "--store", str(fake_store), *argv[1:], *extra, "--json"], capsys)
    assert isinstance(out, dict) and out


def test_data_and_synthetic_commands_print_json_only(tmp_path, capsys):
    store = tmp_path / "qlib"
    synth = _json_out(["data", "synth", "--out", str(store), "--start", "2018-01-02", "--end", "2018-01-04",
                       "--symbols", "AAPL,F", "--json"], capsys)
    assert synth["symbols"] == 2 and synth["sessions"] == 3
    assert _json_out(["data", "info", str(store), "--json"], capsys)["store"] == str(store)
    assert _json_out(["data", "facts", str(store), "--json", "--no-progress"], capsys)["store"] == str(store)
    linear = _json_out(["synthetic", "linear", "--rounds", "2", "--runs", "2", "--n-train", "50", "--n-bias", "50",
                        "--n-remaining", "100", "--json"], capsys)
    assert linear["experiment"] == "linear"
