"""The CLI's commands as parsers, for the tests of its grammar and options."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from rolling_calib.cli import build_parser


def leaf_parsers(parser: argparse.ArgumentParser | None = None,
                 path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Yield (command path, parser) for every parser that has no sub-commands (default: the whole CLI)."""
    parser = build_parser() if parser is None else parser
    subactions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subactions:
        yield path, parser
        return
    for action in subactions:
        for name, sub in action.choices.items():
            yield from leaf_parsers(sub, path + (name,))
