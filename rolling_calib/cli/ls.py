"""``rolling-calib ls [DIR]``: the result stores under a directory, one line each.

Per store: its pipelines, seeds, units done / total and the verdicts ``compare`` or ``report``
last printed for it (:mod:`rolling_calib.execution.inventory`).
"""

from __future__ import annotations

import argparse
import json
import os

from rolling_calib.cli.errors import command_errors
from rolling_calib.cli.options import add_output_arguments


@command_errors("ls")
def handle(args: argparse.Namespace) -> int:
    from rolling_calib.core.tables import format_table
    from rolling_calib.execution.inventory import find_stores, store_entry
    from rolling_calib.tracking.relocation import relocation_note

    if not os.path.isdir(args.dir):
        raise ValueError(f"{args.dir}: expected a directory, found {'a file' if os.path.exists(args.dir) else 'nothing'}")
    entries = [store_entry(path) for path in find_stores(args.dir)]
    moved = {e.path: note for e in entries if (note := relocation_note(e.path)) is not None}   # read only
    if args.json:
        print(json.dumps([{"store": str(e.path), "pipelines": e.pipelines, "seeds": e.seeds, "units_done": e.done,
                           "units_total": e.total, "last_verdicts": e.verdicts, "scored": e.scored,
                           "problem": e.problem, "mlflow": moved.get(e.path)} for e in entries], indent=2))
        return 0
    if not entries:
        print(f"{args.dir}: no result store (a directory with manifest.json) under it")
        return 0
    rows = [[os.path.relpath(e.path, args.dir), ", ".join(e.pipelines) or "-", _seeds(e.seeds),
             f"{e.done}/{e.total}", e.problem or e.verdict_text()] for e in entries]
    print(format_table(rows, ["store", "pipelines", "seeds", "units", "last verdicts"]))
    for path, note in moved.items():
        print(f"note: {os.path.relpath(path, args.dir)}: {note}")
    return 0


def _seeds(seeds: list[int]) -> str:
    """``0..9`` for a range, else the list.

    >>> _seeds([0, 1, 2]), _seeds([1, 5]), _seeds([])
    ('0..2 (3)', '1, 5', '-')
    """
    if not seeds:
        return "-"
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}..{seeds[-1]} ({len(seeds)})"
    return ", ".join(map(str, seeds))


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "ls",
        help="list the result stores under a directory: pipelines, seeds, units done/total, last verdicts",
        description=("Walk DIR for result stores (directories holding manifest.json) and print one line each: "
                     "its pipelines, seeds, units complete out of planned, and the verdicts compare or report "
                     "last printed for it; then a note for each store whose MLflow database still points at "
                     "another store's files (moved or copied: run relocate on it)."),
        epilog="Example: rolling-calib ls runs/",
    )
    parser.add_argument("dir", nargs="?", default=".", metavar="DIR", help="where to look (default: .)")
    add_output_arguments(parser, json_prints="one object per store")
    parser.set_defaults(func=handle)
