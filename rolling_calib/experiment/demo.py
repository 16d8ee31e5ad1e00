"""The demo: synthetic market -> rolling grid -> comparison -> report, in minutes on a laptop.

:func:`run_demo` does what ``rolling-calib demo`` (the README's main command) does:

1. build the synthetic 25-stock minute market into ``OUT/qlib_data`` if it is absent
   (exactly the months ``workflows/demo.yaml``'s schedule needs);
2. run the reduced but real schedule of ``workflows/demo.yaml`` (the copy installed with the
   package, :data:`DEMO_CONFIG`) -- two pipelines x 10 seeds (the file's ``rolling.seeds``)
   x two 3-month windows (window 1 fine-tunes window 0's model on the new
   months), six evaluation months -- on a local process pool, into ``OUT/store``;
3. score it (QL and monthly rolling CQL), compare the pipelines, write the report into
   ``OUT/report`` and log everything, the report included, to MLflow (``OUT/store/mlflow.db``).

Re-running resumes: completed units are reused (the store's config hashes match).

Usage (minutes of training; ``tests/cli/test_demo_command.py`` runs it at tiny size)::

    result = run_demo("demo_out", workers=2)
    result.report["html"]       # PosixPath('demo_out/report/report.html')
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rolling_calib.config.workflows import packaged_workflow

__all__ = ["DEMO_CONFIG", "DemoResult", "ensure_demo_data", "run_demo"]

#: The demo's experiment file: ``workflows/demo.yaml`` as installed with the package (importlib.resources).
DEMO_CONFIG = packaged_workflow("demo.yaml")


@dataclass
class DemoResult:
    """What the demo produced."""

    data_dir: Path
    store: Path
    comparison: object  # rolling_calib.analysis.comparison.StoreComparison
    report: dict[str, Path]
    seconds: float
    data_built: bool
    tracking_uri: str | None = None
    tracking_message: str | None = None
    diagnosis: object = None  # rolling_calib.analysis.diagnostics.StoreDiagnosis


def ensure_demo_data(data_dir: Path, *, config: Path = DEMO_CONFIG, seed: int = 0, progress: bool = True) -> bool:
    """Build the synthetic store covering the demo schedule unless it exists; True if built."""
    import pandas as pd

    from data_prep import build_synthetic_store
    from rolling_calib.config.experiment import read_rolling

    if (data_dir / "calendars" / "1min.txt").is_file():
        return False
    rolling = read_rolling(config)
    start = pd.Period(rolling.initial_train_start, "M").start_time.date()
    end = pd.Period(rolling.end, "M").end_time.date()
    build_synthetic_store(data_dir, start=str(start), end=str(end), seed=seed, progress=progress)
    return True


def run_demo(
    out_dir: str | Path = "demo_out",
    *,
    workers: int = 2,
    seeds: int | None = None,
    config: str | Path = DEMO_CONFIG,
    n_boot: int = 2000,
    progress: bool = True,
    track: bool = True,
) -> DemoResult:
    """Run the whole demo; see the module docstring.

    Parameters
    ----------
    out_dir : path
        Receives ``qlib_data/``, ``store/`` and ``report/``.
    workers : int
        Local worker processes (one torch thread each).
    seeds : int, optional
        Seeds per pipeline, >= 2 for a standard deviation (default: the file's ``rolling.seeds``,
        10 in ``workflows/demo.yaml`` as in docs/method.md §3.3).
    config : path
        The experiment file (default :data:`DEMO_CONFIG`, the packaged ``workflows/demo.yaml``).
    n_boot : int
        Bootstrap resamples of the pairwise-accuracy intervals.
    progress : bool
        Progress bars for data generation and units.
    track : bool
        Log the store to MLflow (``OUT/store/mlflow.db``).
    """
    from rolling_calib.config import load_experiment
    from rolling_calib.execution.factory import ExecutorOptions
    from rolling_calib.experiment.flow import CompareOptions, RunOptions, run_experiment

    if seeds is not None and seeds < 2:
        raise ValueError(f"seeds: expected >= 2 (a spread needs two runs), found {seeds}")
    t0 = time.perf_counter()
    out = Path(out_dir).resolve()
    data_dir = out / "qlib_data"
    built = ensure_demo_data(data_dir, config=Path(config), progress=progress)
    experiment = load_experiment(config, overrides={"qlib_init.provider_uri": str(data_dir)})
    if seeds is None and len(experiment.rolling.seeds) < 2:
        raise ValueError(f"{config}: rolling.seeds: expected >= 2 seeds (a spread needs two runs), "
                         f"found {len(experiment.rolling.seeds)}")
    outcome = run_experiment(experiment, RunOptions(
        store=out / "store", seeds=seeds, progress=progress, track=track, compare=CompareOptions(n_boot=n_boot),
        report=out / "report", executor=ExecutorOptions(workers=workers, threads=1)))
    return DemoResult(
        data_dir=data_dir, store=outcome.plan.store, comparison=outcome.comparison, report=outcome.report or {},
        seconds=time.perf_counter() - t0, data_built=built, tracking_uri=outcome.tracking_uri,
        tracking_message=outcome.tracking_message, diagnosis=outcome.diagnosis,
    )
