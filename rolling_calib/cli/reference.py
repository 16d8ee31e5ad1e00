"""The command-line reference as Markdown, generated from the parsers themselves.

The documentation site's "Command line" page is this module's output for
:func:`rolling_calib.cli.build_parser` (``docs/hooks/site.py`` calls it on every build), so the
reference cannot drift from ``--help``: every command and sub-command gets a section with its
description, its usage line, one table per option group (the option as typed, and its help with
``%(default)s`` expanded, as ``--help`` prints it) and its epilog (the examples). Options hidden
from ``--help`` (``argparse.SUPPRESS``) are hidden here too.

The walk reads argparse's parser structure (``_actions``, ``_action_groups``, the sub-parsers'
``_choices_actions``), as documentation generators for argparse do; those names have been stable
since Python 3.2.

Examples
--------
>>> parser = argparse.ArgumentParser(prog="tool", description="Does things.")
>>> commands = parser.add_subparsers(title="commands", metavar="COMMAND")
>>> go = commands.add_parser("go", help="go somewhere", description="Go to DIR.")
>>> _ = go.add_argument("--to", metavar="DIR", default="home", help="where (default %(default)s)")
>>> _ = go.add_argument("--secret", help=argparse.SUPPRESS)
>>> text = reference_markdown(parser)
>>> print(text.split("## tool go", 1)[1])   # doctest: +NORMALIZE_WHITESPACE
<BLANKLINE>
<BLANKLINE>
Go to DIR.
<BLANKLINE>
```text
usage: tool go [-h] [--to DIR]
```
<BLANKLINE>
**options**
<BLANKLINE>
| option | meaning |
|---|---|
| `--to DIR` | where (default home) |
<BLANKLINE>
>>> "[`go`](#tool-go)" in text, "--secret" in text
(True, False)
"""

from __future__ import annotations

import argparse
import html
import re
from collections.abc import Iterator, Mapping

__all__ = ["USAGE_WIDTH", "command_parsers", "reference_markdown"]

#: Columns of the usage lines (fixed, so the page does not depend on the terminal that built it).
USAGE_WIDTH: int = 80

_RAW_FORMATTERS = (argparse.RawDescriptionHelpFormatter, argparse.RawTextHelpFormatter)
#: Characters Python-Markdown would read as markup in running text (escaped with a backslash).
_MARKUP = re.compile(r"([\\`*_\[\]|])")


def command_parsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """Every visible sub-command of ``parser``, depth first: ``(prog, one-line help, parser)``.

    Sub-commands hidden from ``--help`` and aliases (the same parser under a second name) are skipped.

    Examples
    --------
    >>> p = argparse.ArgumentParser(prog="t")
    >>> sub = p.add_subparsers()
    >>> data = sub.add_parser("data", help="data tools")
    >>> _ = data.add_subparsers().add_parser("info", help="summarise")
    >>> [prog for prog, _, _ in command_parsers(p)]
    ['t data', 't data info']
    """
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        seen: set[int] = set()
        for choice in action._choices_actions:     # the visible commands, in --help's order
            sub = action.choices[choice.dest]
            if id(sub) in seen:
                continue
            seen.add(id(sub))
            yield sub.prog, choice.help or "", sub
            yield from command_parsers(sub)


def reference_markdown(parser: argparse.ArgumentParser, *, title: str | None = None,
                       replace: Mapping[str, str] | None = None) -> str:
    """The Markdown reference of ``parser`` and of every sub-command under it.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The top-level parser (``rolling_calib.cli.build_parser()``).
    title : str, optional
        The page's level-1 heading (default: the program's name).
    replace : mapping, optional
        Text to replace in every help string, e.g. an install path printed by ``--help`` that
        would make the page depend on the machine that built it.

    Returns
    -------
    str
        A level-1 heading and the program's own section, then one level-2 section per command (level 3 for a
        command's sub-commands), each with a heading ``PROG COMMAND`` whose anchor is the
        heading in lower case with spaces as hyphens.
    """
    replace = dict(replace or {})
    out = [f"# {title or parser.prog}\n", _section(parser, replace)]
    for prog, _, sub in command_parsers(parser):
        level = "#" * (1 + prog.count(" "))   # "tool go" -> ##, "tool data info" -> ###
        out.append(f"{level} {prog}\n")
        out.append(_section(sub, replace))
    return "\n".join(out).rstrip() + "\n"


def _section(parser: argparse.ArgumentParser, replace: Mapping[str, str]) -> str:
    raw = issubclass(parser.formatter_class, _RAW_FORMATTERS)
    parts = []
    if parser.description:
        parts.append(_prose(parser.description, raw, replace))
    parts.append(f"```text\n{_usage(parser)}\n```")
    commands = [(prog, text) for prog, text, _ in _direct_commands(parser)]
    if commands:
        rows = [f"| [`{prog.rsplit(' ', 1)[-1]}`](#{_anchor(prog)}) | {_text(text, replace)} |" for prog, text in commands]
        parts.append("| command | what it does |\n|---|---|\n" + "\n".join(rows))
    formatter = _formatter(parser)
    for group in parser._action_groups:
        actions = [a for a in group._group_actions
                   if a.help is not argparse.SUPPRESS and not isinstance(a, (argparse._HelpAction,
                                                                              argparse._SubParsersAction))]
        if not actions:
            continue
        block = [f"**{_text(group.title or 'options', replace)}**"]
        if group.description:
            block.append(_prose(group.description, raw, replace))
        rows = [f"| `{formatter._format_action_invocation(a)}` | {_text(formatter._expand_help(a) if a.help else '', replace)} |"
                for a in actions]
        block.append("| option | meaning |\n|---|---|\n" + "\n".join(rows))
        parts.append("\n\n".join(block))
    if parser.epilog:
        parts.append(_prose(parser.epilog, raw, replace))
    return "\n\n".join(parts) + "\n"


def _direct_commands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    for prog, text, sub in command_parsers(parser):
        if prog.count(" ") == parser.prog.count(" ") + 1:
            yield prog, text, sub


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    return parser.formatter_class(prog=parser.prog, width=USAGE_WIDTH)


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage line(s) as ``--help`` prints them, at :data:`USAGE_WIDTH` columns.

    Options a command checks itself but shows as required (``CommandParser.shown_required``) are
    shown as required here too.
    """
    shown = list(getattr(parser, "shown_required", ()))
    saved = [a.required for a in shown]
    for action in shown:
        action.required = True
    try:
        formatter = _formatter(parser)
        formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
        return formatter.format_help().strip()
    finally:
        for action, required in zip(shown, saved):
            action.required = required


def _anchor(prog: str) -> str:
    """The anchor Python-Markdown's ``toc`` gives the heading ``prog`` (``tool data info`` -> ``tool-data-info``)."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", prog).strip().lower())


def _replaced(text: str, replace: Mapping[str, str]) -> str:
    for old, new in replace.items():
        text = text.replace(old, new)
    return text


def _text(text: str, replace: Mapping[str, str]) -> str:
    """One line of help as Markdown text: whitespace folded, HTML and Markdown markup escaped."""
    text = " ".join(_replaced(text, replace).split())
    return _MARKUP.sub(r"\\\1", html.escape(text, quote=False))


def _prose(text: str, raw: bool, replace: Mapping[str, str]) -> str:
    """A description or epilog as Markdown paragraphs.

    Under a raw formatter (the parser keeps its own line breaks) a paragraph with indented lines
    (examples, a list of keys) stays a text block as ``--help`` prints it; other paragraphs, and
    all text of the other formatters, are folded into running text.
    """
    if not raw:
        return _text(text, replace)
    blocks = []
    for paragraph in re.split(r"\n\s*\n", _replaced(text, replace).strip("\n")):
        lines = paragraph.rstrip().split("\n")
        if any(line[:1].isspace() for line in lines[1:]):
            blocks.append("```text\n" + "\n".join(lines) + "\n```")
        else:
            blocks.append(_text(paragraph, {}))
    return "\n\n".join(blocks)
