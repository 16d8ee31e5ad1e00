"""``rolling-calib relocate --store DIR``: after ``mv`` or ``cp -r`` of a store, point its MLflow database at its own files.

Qlib's recorders and rolling-calib's tracking runs record absolute artifact locations; this
rewrites those under another store's ``mlartifacts`` to this store's
(:func:`~rolling_calib.tracking.relocation.repoint_store_db`). ``run``, ``compare``, ``report``,
``diagnose`` and ``metaeval`` do it themselves; this command is for opening a moved store with Qlib's
``R`` or ``mlflow ui`` first. A store that cannot be written is refused in one line, at once.
"""

from __future__ import annotations

import argparse
import json

from rolling_calib.cli.errors import command_errors
from rolling_calib.cli.options import add_output_arguments, add_store_argument


@command_errors("relocate")
def handle(args: argparse.Namespace) -> int:
    from rolling_calib.execution.store import Store
    from rolling_calib.tracking.relocation import repoint_store_db, store_artifact_root

    Store.open(args.store)   # a store, named in the error when not
    moved = repoint_store_db(args.store)
    if args.json:
        print(json.dumps({"store": str(args.store), "artifact_root": store_artifact_root(args.store),
                          "moved_from": list(moved.old) if moved else [], "experiments": moved.experiments if moved
                          else 0, "runs": moved.runs if moved else 0}, indent=2))
    else:
        print(moved.line() if moved is not None else
              f"{args.store}: its MLflow artifact locations are already its own ({store_artifact_root(args.store)})")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "relocate",
        help="after mv or cp -r of a store: point its MLflow / Qlib recorder database at the store's own files",
        description=("MLflow records absolute artifact locations: after a store moves, Qlib's "
                     "R.load_object('pred.pkl') fails, and a copy reads the original's files. This rewrites "
                     "them to the store's own mlartifacts/. run, compare, report, diagnose and metaeval do it "
                     "themselves."),
        epilog="Example: mv runs/demo /data/demo && rolling-calib relocate --store /data/demo",
    )
    add_store_argument(parser)
    add_output_arguments(parser, json_prints="the old and new artifact roots and the counts")
    parser.set_defaults(func=handle)
