"""The ``rolling-calib`` command line.

Every sub-command lives in its own module that exposes ``register(subparsers)``;
that function adds one parser (with ``set_defaults(func=handler)``) and must not
import heavy libraries (Qlib, torch, Ray, MLflow) at module level: handlers import
them when they run, so ``rolling-calib --help`` stays fast. Options shared by several
commands come from :mod:`rolling_calib.cli.options` (one grammar: ``--store DIR``,
``--json`` and ``--no-progress`` everywhere, the same words for the same option). Every handler
turns the errors it expects into one line and an exit status through one decorator,
:func:`rolling_calib.cli.errors.command_errors`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from rolling_calib import __version__
from rolling_calib.cli.options import CommandParser

#: Modules that contribute sub-commands, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "rolling_calib.cli.demo",
    "data_prep.cli",
    "rolling_calib.cli.run",
    "rolling_calib.cli.compare",
    "rolling_calib.cli.diagnose",
    "rolling_calib.cli.metaeval",
    "rolling_calib.cli.report",
    "rolling_calib.cli.sweep",
    "rolling_calib.cli.relocate",
    "rolling_calib.cli.ls",
    "rolling_calib.cli.synthetic_experiments",
)


#: Optional dependencies and the install extra that brings each (the pure core needs none of them).
_EXTRAS: dict[str, str] = {"qlib": "qlib", "torch": "qlib", "ray": "ray", "mlflow": "mlflow"}


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level parser with every sub-command registered."""
    parser = CommandParser(   # its sub-parsers are CommandParsers too: they run the checks across options
        prog="rolling-calib",
        description=(
            "Compare model configurations under training randomness and concept drift "
            "with the calibrated quadratic loss (monthly bias-corrected MSE) beside plain MSE."
        ),
        epilog=("Run 'rolling-calib COMMAND --help' for the options of one command. One grammar: the result store "
                "is --store DIR, every command takes --json and --no-progress, and an option several commands take "
                "means the same in each."),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "func", None)
    if handler is None:
        parser.print_help()
        return 2
    from rolling_calib.execution.executors import RunStopped, stop_signals

    try:
        # SIGTERM / Ctrl-C: queued units cancelled, running ones finish (a second signal ends them), one line, 143 / 130
        with stop_signals():
            return int(handler(args) or 0)
    except RunStopped as stop:
        print(f"rolling-calib: {stop.line()}", file=sys.stderr)
        return stop.exit_status
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"rolling-calib: this command needs {exc.name}, which is not installed: "
              f"pip install 'rolling-calib[{extra}]' (or 'rolling-calib[all]')", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; completed units are kept and a re-run resumes", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
