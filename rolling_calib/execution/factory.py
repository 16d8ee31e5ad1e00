"""The one executor factory: every command builds its local pool or Ray executor here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rolling_calib.core.validation import Interval, Options, check
from rolling_calib.execution.executors import Executor, LocalExecutor

__all__ = ["EXECUTORS", "ExecutorOptions", "make_executor"]

#: Where units run: a local process pool, or Ray (a local runtime or a cluster).
EXECUTORS: tuple[str, ...] = ("local", "ray")


@dataclass(frozen=True, kw_only=True)
class ExecutorOptions:
    """How units are executed; the same options for ``run``, ``sweep`` and ``demo``.

    Attributes
    ----------
    kind : {"local", "ray"}
    workers : int or None
        Local pool: worker processes (``None``: 1). Ray started locally: its CPUs (``None``: all cores).
    threads : int
        torch threads per unit (part of the config hash: it changes the last digits).
    address : str or None
        Ray cluster to join (``None``: start a local runtime).
    max_retries : int
        Ray: retries of a failed unit.
    gpus_per_unit : float
        Ray: GPUs reserved per unit (e.g. 0.25 packs four units per GPU).
    log_to_driver : bool
        Ray: echo the workers' output here.

    Examples
    --------
    >>> ExecutorOptions(kind="local", workers=0)
    Traceback (most recent call last):
    ...
    ValueError: workers: expected an integer >= 1, found int 0
    """

    kind: Literal["local", "ray"] = "local"
    workers: int | None = None
    threads: int = 1
    address: str | None = None
    max_retries: int = 2
    gpus_per_unit: float = 0.0
    log_to_driver: bool = True

    def __post_init__(self) -> None:
        check("executor", self.kind, Options(*EXECUTORS))
        if self.workers is not None:
            check("workers", self.workers, Interval(int, 1, None))
        check("threads", self.threads, Interval(int, 1, None))
        check("max_retries", self.max_retries, Interval(int, 0, None))
        check("gpus_per_unit", self.gpus_per_unit, Interval(float, 0, None))


def make_executor(options: ExecutorOptions) -> Executor:
    """The executor ``options`` describe (Ray is imported only when asked for).

    Examples
    --------
    >>> make_executor(ExecutorOptions(workers=2))
    LocalExecutor(workers=2)
    """
    if options.kind == "local":
        return LocalExecutor(workers=options.workers or 1)
    try:
        from rolling_calib.execution.ray_executor import RayExecutor
    except ImportError as exc:  # Ray is an optional extra (rolling-calib[ray]): absent from a core install
        raise ValueError(f"--executor ray: the Ray executor is not available ({exc}); pip install 'rolling-calib[ray]'") from exc
    return RayExecutor(
        options.address,
        max_retries=options.max_retries,
        num_cpus=options.workers if options.address is None else None,  # None: all cores
        gpus_per_unit=options.gpus_per_unit,
        threads_per_unit=options.threads,
        log_to_driver=options.log_to_driver,
    )
