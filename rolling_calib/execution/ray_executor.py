"""Run the (pipeline, seed, window) units of a rolling grid on a Ray cluster.

:class:`RayExecutor` implements the same contract as
:class:`rolling_calib.execution.executors.LocalExecutor`: ``run(tasks, work, *, on_done)``
calls ``work(key)`` once per unit, never starts a unit before the unit it waits
for (``UnitTask.after``) has finished, and returns ``{key: result}``. Only the
place where ``work`` runs changes: each unit is one Ray task.

Scheduling
    A unit is submitted when it has no predecessor, or as soon as its
    predecessor's task has completed (the driver watches completions with
    ``ray.wait``; that same loop drives ``on_done`` and progress bars). A
    fine-tuned window therefore starts from the weights its predecessor wrote.
    Given ``feed``, each finished unit may add tasks to the run (``rolling-calib run
    --until-decided``: the next batch of seeds of a pipeline whose pairs are still open); they
    are submitted at once, while the other units go on (``ray.wait(num_returns=1)``: no lockstep).
Stop
    A stop signal (SIGTERM, SIGINT: :class:`~rolling_calib.execution.executors.RunStopped`, raised
    in the driver by :func:`~rolling_calib.execution.executors.stop_signals`) cancels every
    outstanding task (``ray.cancel``: queued ones never start, running ones are interrupted before
    they write their sidecar, which is written last), so the store holds only complete units and
    the same command resumes.
Failures
    A task that raises is retried by Ray up to ``max_retries`` times (the same
    budget covers a worker process that dies). A unit that still fails makes
    :meth:`RayExecutor.run` stop submitting new units, wait for the units
    already running (they finish and write their results, so nothing completed
    is lost), and raise :class:`~rolling_calib.execution.executors.UnitFailedError`
    naming the unit, with the worker's exception chained. A re-run of the
    runner skips the completed units and resumes. A unit lost to a dead worker
    process or node (Ray's system errors) is named as such: :class:`UnitLostError`
    says which node of the cluster died since the run started (its address and
    node ID), or that the worker process died.
Numbers
    Every unit runs with one torch/BLAS thread (``threads_per_unit``) unless
    told otherwise, the same seeds as the local executor and the same code,
    so on CPU the results equal the local executor's.
Progress
    Given ``on_progress``, a ``ray.util.queue.Queue`` (an actor taking no CPU) carries the
    reports of running units (:mod:`rolling_calib.execution.progress`): each task installs it
    as its sink, and the driver drains it every 0.2 s while it waits for units.
Storage
    ``work`` writes each unit's result into the run store itself. On a
    cluster the store must be a path every node can reach under the same name
    (NFS, a mounted bucket, a shared disk).

Usage (starts a Ray runtime; ``tests/execution/test_ray_executor.py`` runs it for real)::

    ex = RayExecutor(num_cpus=2)
    ex.run([UnitTask(UnitKey("a", 0, 0))], str)
    # {UnitKey(pipeline='a', seed=0, window=0): "UnitKey(pipeline='a', seed=0, window=0)"}
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from rolling_calib.core.validation import AnyOf, Interval, Options, check
from rolling_calib.execution.executors import (
    DependencyQueue,
    EventCallback,
    FeedCallback,
    ProgressCallback,
    RunStopped,
    UnitKey,
    UnitTask,
    as_run_stopped,
    check_tasks,
    failure_error,
    units_in,
    units_running,
)
from rolling_calib.execution.progress import install

_POSITIVE_OR_NONE = AnyOf((Interval(int, 1, None), Options(None)), what="an integer >= 1 or None")

#: Environment variables that cap the thread pools of torch, OpenMP and BLAS.
THREAD_ENV_VARS: tuple[str, ...] = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)

#: Environment variable holding the Ray node ID of the worker running a unit (read by the runner).
NODE_ENV_VAR: str = "ROLLING_CALIB_NODE"

#: Object store size for a runtime this executor starts itself (bytes).
DEFAULT_OBJECT_STORE_BYTES: int = 200 * 1024 * 1024

#: Seconds between two looks at the progress queue while units run.
PROGRESS_POLL_S: float = 0.2


#: Ray's errors for a unit lost to the system (a dead worker process, raylet or node), not raised by the unit.
_SYSTEM_ERRORS = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "ObjectLostError",
                  "OwnerDiedError", "RaySystemError", "ObjectReconstructionFailedError")


class UnitLostError(RuntimeError):
    """A unit was lost to the cluster, not to its own code: its worker process or node died (named)."""


def _alive_nodes() -> dict[str, str]:
    """``{node id: "address (host)"}`` of the cluster's live nodes (from the GCS; no dashboard needed)."""
    import ray

    try:
        return {n["NodeID"]: f"{n.get('NodeManagerAddress', '?')} ({n.get('NodeManagerHostname', '?')})"
                for n in ray.nodes() if n.get("Alive")}
    except Exception:  # noqa: BLE001 - naming the node is best effort; the failure is raised either way
        return {}


#: Seconds a unit lost to Ray's system waits for the cluster to mark a dead node (its health checks take a few).
NODE_DEATH_WAIT_S = 30.0


def _nodes_after_loss(before: dict[str, str]) -> dict[str, str]:
    """The live nodes once the cluster has noticed a death: polled until one of ``before`` is gone, or the wait ends."""
    import time

    deadline = time.monotonic() + NODE_DEATH_WAIT_S
    while True:
        after = _alive_nodes()
        if any(node not in after for node in before) or time.monotonic() > deadline or not after:
            return after
        time.sleep(0.5)


def lost_unit(key: UnitKey, exc: BaseException, before: dict[str, str], after: dict[str, str]) -> BaseException:
    """``exc`` as the unit's failure: a :class:`UnitLostError` naming the dead node(s) for Ray's system errors.

    >>> class WorkerCrashedError(Exception): pass
    >>> print(lost_unit(UnitKey("a", 0, 1), WorkerCrashedError("died"), {"ab" * 16: "10.0.0.2 (w1)"}, {}))
    unit a__seed0__w01 was lost: Ray node 10.0.0.2 (w1), node id abababababab, died while it ran (WorkerCrashedError); completed units are kept: re-run to resume
    """
    if type(exc).__name__ not in _SYSTEM_ERRORS:
        return exc
    dead = [f"Ray node {where}, node id {node[:12]}," for node, where in before.items() if node not in after]
    what = f"{' and '.join(dead)} died" if dead else "its Ray worker process died"
    return UnitLostError(f"unit {key.slug()} was lost: {what} while it ran ({type(exc).__name__}); completed units "
                         f"are kept: re-run to resume")


def _run_unit(work: Callable[[UnitKey], Any], key: UnitKey, threads: int | None, channel: Any = None) -> Any:
    """Body of one Ray task: cap the worker's threads, name the node, then run ``work(key)``.

    Top-level so Ray can pickle it by reference. ``threads=None`` leaves the
    worker's thread settings alone (Ray itself sets ``OMP_NUM_THREADS`` to the
    task's CPU count). The Ray node ID of the worker goes into the environment
    variable :data:`NODE_ENV_VAR`, which the runner records in each unit's
    sidecar (``"node"``) without importing Ray. ``channel`` (a ``ray.util.queue.Queue``, or None)
    receives the unit's progress reports while it runs.
    """
    import ray

    if ray.is_initialized():  # always inside a Ray task; a direct call (tests) leaves it unset
        os.environ[NODE_ENV_VAR] = ray.get_runtime_context().get_node_id()
    if threads is not None:
        for name in THREAD_ENV_VARS:
            os.environ[name] = str(threads)
        torch = sys.modules.get("torch")  # only touch torch if the worker already loaded it
        if torch is not None and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
    install(None if channel is None else channel.put_nowait)
    try:
        return work(key)
    finally:
        install(None)  # the worker process runs other tasks next


class RayExecutor:
    """Run units as Ray tasks, on a cluster or on a Ray runtime started locally.

    Parameters
    ----------
    address : str or None
        ``None`` starts a local Ray runtime (or uses the one this process already
        initialised, or the cluster named by the ``RAY_ADDRESS`` environment
        variable); ``"auto"`` joins the cluster running on this machine;
        ``"ray://host:10001"`` or ``"host:6379"`` joins a remote one.
    max_retries : int
        How many times a failed unit is retried before the run stops (0 = no
        retry). Covers both exceptions raised by the unit and dead workers.
    num_cpus : int or None
        CPUs for a runtime this executor starts locally (``None``: all of them).
        Ignored when joining an existing cluster.
    cpus_per_unit : float
        CPUs Ray reserves for each unit; with ``threads_per_unit=1`` keep it 1.
    gpus_per_unit : float
        GPUs Ray reserves for each unit (e.g. ``0.25`` packs four units per GPU).
    threads_per_unit : int or None
        torch/OpenMP/BLAS threads inside each unit; ``None`` keeps Ray's default.
    object_store_memory : int or None
        Object store bytes for a locally started runtime (default 200 MB: units
        exchange only small result records, predictions go to the store).
    log_to_driver : bool
        Echo the workers' stdout/stderr in this process (off for ``--json`` output).

    Examples
    --------
    >>> RayExecutor(max_retries=3, num_cpus=2)
    RayExecutor(address=None, max_retries=3, num_cpus=2)
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        max_retries: int = 2,
        num_cpus: int | None = None,
        cpus_per_unit: float = 1.0,
        gpus_per_unit: float = 0.0,
        threads_per_unit: int | None = 1,
        object_store_memory: int | None = DEFAULT_OBJECT_STORE_BYTES,
        log_to_driver: bool = True,
    ) -> None:
        check("max_retries", max_retries, Interval(int, 0, None))
        check("num_cpus", num_cpus, _POSITIVE_OR_NONE)
        check("cpus_per_unit", cpus_per_unit, Interval(float, 0, None, closed="neither"))
        check("gpus_per_unit", gpus_per_unit, Interval(float, 0, None))
        check("threads_per_unit", threads_per_unit, _POSITIVE_OR_NONE)
        self.address = address
        self.max_retries = max_retries
        self.num_cpus = num_cpus
        self.cpus_per_unit = cpus_per_unit
        self.gpus_per_unit = gpus_per_unit
        self.threads_per_unit = threads_per_unit
        self.object_store_memory = object_store_memory
        self.log_to_driver = log_to_driver
        self._started_runtime = False

    def __repr__(self) -> str:
        return (
            f"RayExecutor(address={self.address!r}, max_retries={self.max_retries}, "
            f"num_cpus={self.num_cpus})"
        )

    # -- runtime -----------------------------------------------------------------
    def connect(self) -> None:
        """Initialise Ray unless this process already did (idempotent).

        A locally started runtime gets ``num_cpus`` CPUs, no dashboard and a small
        object store; joining a cluster (``address`` or ``RAY_ADDRESS``) takes the
        cluster as it is. A local start-up that times out (Ray waits a fixed 30 s for its raylet, too
        little on a loaded machine) is tried again, up to :data:`START_ATTEMPTS` times, with a warning.
        """
        import ray

        if ray.is_initialized():
            return
        options: dict[str, Any] = {
            "address": self.address,
            "include_dashboard": False,
            "log_to_driver": self.log_to_driver,
        }
        if self.address is None and not os.environ.get("RAY_ADDRESS"):
            # A fresh local runtime: size it, cap worker threads from the start.
            options["num_cpus"] = self.num_cpus
            options["object_store_memory"] = self.object_store_memory
            # No runtime_env: it costs seconds per worker; _run_unit caps the threads itself.
            self._started_runtime = True
            _start_local_runtime(ray.init, ray.shutdown, options)
            return
        with _signal_handlers_kept():
            ray.init(**options)

    def shutdown(self) -> None:
        """Stop the Ray runtime if this executor started it (a joined cluster stays up)."""
        import ray

        if self._started_runtime and ray.is_initialized():
            ray.shutdown()
        self._started_runtime = False

    # -- Executor protocol -------------------------------------------------------
    def run(
        self,
        tasks: Sequence[UnitTask],
        work: Callable[[UnitKey], Any],
        *,
        on_done: ProgressCallback | None = None,
        on_progress: EventCallback | None = None,
        feed: FeedCallback | None = None,
    ) -> dict[UnitKey, Any]:
        """Run ``work(key)`` for every task (and every task ``feed`` adds) on Ray; see the module docstring.

        Returns
        -------
        dict
            ``{key: work(key)}`` for every task.

        Raises
        ------
        UnitFailedError
            A unit still failed after ``max_retries`` retries. Its ``completed``
            attribute holds the results of the units that did finish.
        RunStopped
            A stop signal: outstanding tasks cancelled, completed units kept.
        """
        check_tasks(tasks)
        if not tasks:
            return {}
        import ray

        self.connect()
        remote = ray.remote(_run_unit).options(
            max_retries=self.max_retries,
            retry_exceptions=True,
            num_cpus=self.cpus_per_unit,
            num_gpus=self.gpus_per_unit,
        )
        work_ref = ray.put(work)
        channel = _progress_queue() if on_progress is not None else None
        try:
            with units_running():   # a second stop signal while the tasks are cancelled is only counted
                return self._run_tasks(tasks, remote, work_ref, on_done=on_done, on_progress=on_progress,
                                       channel=channel, feed=feed)
        finally:
            if channel is not None:
                channel.shutdown()

    def _run_tasks(self, tasks: Sequence[UnitTask], remote: Any, work_ref: Any, *, on_done: ProgressCallback | None,
                   on_progress: EventCallback | None, channel: Any,
                   feed: FeedCallback | None = None) -> dict[UnitKey, Any]:
        """Submit each task when it may start, collect results and failures (the body of :meth:`run`)."""
        import ray

        queue = DependencyQueue(tasks)
        nodes = _alive_nodes()  # to name a node that dies during the run
        running: dict[Any, UnitKey] = {}
        results: dict[UnitKey, Any] = {}
        failures: list[tuple[UnitKey, BaseException]] = []

        def submit_ready() -> None:
            for task in queue.take_ready():
                ref = remote.remote(work_ref, task.key, self.threads_per_unit, channel)
                running[ref] = task.key

        try:
            submit_ready()
            while running:
                done, _ = ray.wait(list(running), num_returns=1,
                                   timeout=PROGRESS_POLL_S if channel is not None else None)
                if channel is not None:
                    _drain(channel, on_progress)
                for ref in done:
                    key = running.pop(ref)
                    try:
                        result = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - re-raised below, chained
                        cause = getattr(exc, "cause", None) or exc
                        lost = lost_unit(key, cause, nodes,
                                         _nodes_after_loss(nodes) if type(cause).__name__ in _SYSTEM_ERRORS else nodes)
                        if lost is not cause:
                            lost.__cause__ = cause
                        failures.append((key, lost))
                        continue
                    results[key] = result
                    if on_done is not None:
                        on_done(key, result)
                    queue.mark_done(key)
                    if feed is not None and not failures:
                        queue.add(feed(key, result))
                if not failures:  # after a failure, only the units already running finish
                    submit_ready()
        except BaseException as exc:
            stop = as_run_stopped(exc)
            if stop is None:
                raise
            outstanding = list(running)
            for ref in outstanding:   # queued tasks never start; running ones end before their sidecar is written
                ray.cancel(ref, force=False)
            raise RunStopped(stop.signum, completed=units_in(results),
                             cancelled=units_in(running[ref] for ref in outstanding) + queue.left()) from None
        if channel is not None:  # a unit puts its reports before it returns: the last ones are here now
            _drain(channel, on_progress)
        if failures:
            retries = f" after {self.max_retries} retr{'y' if self.max_retries == 1 else 'ies'}"
            raise failure_error(failures, results, detail=retries) from failures[0][1]
        return results


START_ATTEMPTS = 3
"""How often a fresh local runtime is started before its start-up failure is raised."""


def _is_startup_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is Ray's local start-up giving up on a slow machine (worth one more try).

    Ray waits a fixed 30 s for its raylet to register (``ray/_private/node.py``); on a machine under
    load the GCS or the raylet's metrics agent can take longer, and ``ray.init`` raises
    "The current node timed out during startup". Nothing else is retried.

    >>> _is_startup_timeout(Exception("The current node timed out during startup. ..."))
    True
    >>> _is_startup_timeout(ValueError("num_cpus must be positive"))
    False
    """
    return isinstance(exc, TimeoutError) or "timed out" in str(exc).lower()


def _descendants(pid: int) -> set[int]:
    """The pids below ``pid`` in the process tree (Linux ``/proc``; empty where there is none)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as fh:
                    kids = {int(k) for k in fh.read().split()}
            except (OSError, ValueError):
                continue
            todo.extend(kids - found)
            found |= kids
    return found


def _start_local_runtime(init: Callable[..., Any], shutdown: Callable[[], None], options: dict[str, Any]) -> None:
    """``init(**options)``, started again (up to :data:`START_ATTEMPTS` times) when Ray's start-up times out.

    Between tries the failed runtime is shut down and the processes it left (its GCS server and raylet,
    children of this process that did not exist before the try) are killed, so that a retry does not
    compete with them. Each retry is a ``RuntimeWarning`` that says why.
    """
    for attempt in range(1, START_ATTEMPTS + 1):
        before = _descendants(os.getpid())
        try:
            with _signal_handlers_kept():
                init(**options)
            return
        except Exception as exc:
            if attempt == START_ATTEMPTS or not _is_startup_timeout(exc):
                raise
            shutdown()
            for pid in _descendants(os.getpid()) - before:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            warnings.warn(
                f"Ray's local runtime did not start (try {attempt} of {START_ATTEMPTS}: {exc}); the machine may "
                "be overloaded; starting it again",
                RuntimeWarning,
                stacklevel=3,
            )


@contextlib.contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """Keep this process's SIGTERM and SIGINT handlers across the block (``ray.init``).

    ``ray.init`` replaces the driver's SIGTERM handler with ``sys.exit``: a run stopped by SIGTERM then
    ended in a C++ crash dump (exit 134) instead of the stop of :func:`~rolling_calib.execution.executors.stop_signals`
    (outstanding tasks cancelled, one line, exit 143). Outside the main thread nothing can be set: nothing is kept.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in kept.items():
            if handler is not None:   # None: set outside Python, cannot be restored
                signal.signal(sig, handler)


def _progress_queue() -> Any:
    """The queue that carries the units' progress reports to the driver (an actor that takes no CPU)."""
    from ray.util.queue import Queue

    return Queue(actor_options={"num_cpus": 0})


def _drain(channel: Any, on_progress: EventCallback) -> None:
    """Hand every report waiting in ``channel`` to ``on_progress``."""
    waiting = channel.qsize()
    if waiting:
        for event in channel.get_nowait_batch(waiting):
            on_progress(event)
