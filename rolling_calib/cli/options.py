"""Argument groups shared by the commands that run experiments (``run``, ``sweep``, ``demo``).

Each option is declared once here, and turned into the library's option objects
(:class:`~rolling_calib.execution.factory.ExecutorOptions`, ``--set`` overrides) by
one function, so the commands cannot drift apart.
"""

from __future__ import annotations

import argparse
from typing import Any

from rolling_calib.config.overrides import parse_set
from rolling_calib.execution.factory import EXECUTORS, ExecutorOptions

__all__ = ["add_execution_arguments", "add_overrides_argument", "add_tracking_arguments",
           "executor_options", "overrides"]


def add_overrides_argument(parser: argparse.ArgumentParser) -> None:
    """``--set KEY=VALUE`` (repeatable) and ``--device``."""
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value by dotted key, read with YAML scalar rules "
                             "(5e-6 is a float), e.g. qlib_init.provider_uri=/data/us25 (repeatable)")
    parser.add_argument("--device", default=None, metavar="DEV",
                        help="model device for every pipeline: cpu, cuda, cuda:N, auto "
                             "(same as --set task.model.kwargs.device=DEV; default: the YAML's)")


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--set`` and ``--device`` overrides of ``args`` as ``{dotted key: value}``."""
    out = parse_set(args.overrides)
    if getattr(args, "device", None) is not None:
        out["task.model.kwargs.device"] = args.device
    return out


def add_execution_arguments(parser: argparse.ArgumentParser, *, workers_help: str,
                            workers_default: int | None) -> None:
    """Executor, workers, threads and the Ray options (cluster address, retries, GPUs per unit)."""
    group = parser.add_argument_group("execution")
    group.add_argument("--executor", choices=EXECUTORS, default="local", help="local process pool (default) or Ray")
    group.add_argument("--workers", type=int, default=workers_default, metavar="K", help=workers_help)
    group.add_argument("--threads", type=int, default=1, metavar="T",
                       help="torch threads per unit (default 1; scale with --workers instead). Part of the config "
                            "hash: a different count changes the last digits, so units are recomputed")
    group.add_argument("--address", default=None, metavar="ADDR",
                       help="Ray cluster to join ('auto', 'host:6379', 'ray://host:10001'); default: start a local one")
    group.add_argument("--max-retries", type=int, default=2, metavar="N",
                       help="Ray: retries of a failed unit before the run stops (default 2)")
    group.add_argument("--gpus-per-unit", type=float, default=0.0, metavar="G",
                       help="Ray: GPUs reserved per unit with --device cuda (e.g. 0.25 packs 4 units per GPU)")


def executor_options(args: argparse.Namespace, *, quiet: bool) -> ExecutorOptions:
    """The :class:`ExecutorOptions` of ``args`` (``ValueError`` naming a bad option)."""
    return ExecutorOptions(kind=args.executor, workers=args.workers, threads=args.threads, address=args.address,
                           max_retries=args.max_retries, gpus_per_unit=float(args.gpus_per_unit),
                           log_to_driver=not quiet)


def add_tracking_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tracking-uri`` / ``--no-tracking``."""
    group = parser.add_argument_group("tracking (MLflow)").add_mutually_exclusive_group()
    group.add_argument("--tracking-uri", default=None, metavar="URI",
                       help="MLflow tracking URI to log the store to (default sqlite:///STORE/mlflow.db)")
    group.add_argument("--no-tracking", action="store_true", help="do not log the store to MLflow")
