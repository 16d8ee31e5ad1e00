"""Where a result store keeps its files: the one place their names are written.

Every layer that touches a store names its files through :class:`StoreLayout` (the Qlib adapter's
recorders, the runner, the reader, tracking, the report), so a name changes here or nowhere::

    STORE/manifest.json                 what was run (:mod:`rolling_calib.execution.manifest` reads it)
    STORE/units/<pipeline>/seed<k>/     each unit's wNN.parquet, wNN.valid.parquet, wNN.json (sidecar), wNN.log
    STORE/checkpoints/<pipeline>/seed<k>/  each unit's wNN.pt (and wNN.base.pt)
    STORE/backtests/<pipeline>/         each seed's backtest over its joined windows: seed<k>.parquet, seed<k>.json
    STORE/stale/, STORE/corrupt/        units moved aside (an older config; damaged files)
    STORE/mlflow.db, mlflow.db.lock     MLflow tracking and Qlib's recorders (SQLite), and its writers' lock
    STORE/mlartifacts/                  their artifacts (MLflow records this location as an absolute URI)
    STORE/.lock                         the store's writer lock (``run``)
    STORE/sequential.json               the path of ``run --until-decided``
    STORE/last_verdicts.json            the verdicts ``compare``/``report`` last printed (what ``ls`` shows)
    STORE/report/                       ``report``'s default output directory

Pure path arithmetic: nothing is read or created.

Examples
--------
>>> layout = StoreLayout(Path("/data/store"))
>>> layout.unit_dir("wd0", 3).as_posix(), layout.tracking_db.name, layout.artifact_uri
('/data/store/units/wd0/seed3', 'mlflow.db', 'file:///data/store/mlartifacts')
>>> db_lock_path(Path("/x/mlflow.db")).as_posix()
'/x/mlflow.db.lock'
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ARTIFACTS", "ARTIFACTS_NOTE", "BACKTESTS", "CHECKPOINTS", "CORRUPT", "LAST_VERDICTS", "LOCK", "MANIFEST", "REPORT",
           "SEQUENTIAL", "STALE", "TRACKING_DB", "UNITS", "StoreLayout", "db_lock_path"]

MANIFEST = "manifest.json"
UNITS = "units"
CHECKPOINTS = "checkpoints"
#: The folder of the per-seed backtests.
BACKTESTS = "backtests"
STALE = "stale"
CORRUPT = "corrupt"
TRACKING_DB = "mlflow.db"
#: The folder of the store's MLflow artifacts (Qlib's recorders and rolling-calib's runs).
ARTIFACTS = "mlartifacts"
LOCK = ".lock"
SEQUENTIAL = "sequential.json"
LAST_VERDICTS = "last_verdicts.json"
REPORT = "report"
#: The description of every MLflow experiment in a store's database (what ``mlflow ui`` shows on the experiment's
#: page): where its artifacts are, and what to do after the store moved.
ARTIFACTS_NOTE = (
    "Runs of a rolling-calib result store. Their artifacts (predictions, comparison.json, the report, Qlib's "
    f"records) are files in the store's {ARTIFACTS}/ folder, which MLflow records by its absolute path (the "
    "experiment's artifact location). If the store was moved or copied since, MLflow shows 'Failed to download "
    "artifacts' (after mv) or the original store's files (after cp -r): run `rolling-calib relocate --store DIR` "
    "on the store where it is now, then reload this page.")


def db_lock_path(db: str | os.PathLike) -> Path:
    """The lock file every writer of the SQLite database ``db`` holds: ``<db>.lock`` beside it."""
    db = Path(db)
    return db.with_name(db.name + ".lock")


@dataclass(frozen=True)
class StoreLayout:
    """The paths of one store's files (``root`` as given: relative paths stay relative, except the URIs)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def units(self) -> Path:
        return self.root / UNITS

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS

    @property
    def backtests(self) -> Path:
        return self.root / BACKTESTS

    @property
    def stale(self) -> Path:
        return self.root / STALE

    @property
    def corrupt(self) -> Path:
        return self.root / CORRUPT

    @property
    def tracking_db(self) -> Path:
        return self.root / TRACKING_DB

    @property
    def tracking_db_lock(self) -> Path:
        return db_lock_path(self.tracking_db)

    @property
    def artifacts(self) -> Path:
        return self.root / ARTIFACTS

    @property
    def artifact_uri(self) -> str:
        """``file:///STORE/mlartifacts`` (absolute, as MLflow records it)."""
        return (self.root.resolve() / ARTIFACTS).as_uri()

    @property
    def tracking_uri(self) -> str:
        """``sqlite:///STORE/mlflow.db`` (absolute)."""
        return f"sqlite:///{self.root.resolve() / TRACKING_DB}"

    @property
    def lock(self) -> Path:
        return self.root / LOCK

    @property
    def sequential(self) -> Path:
        return self.root / SEQUENTIAL

    @property
    def last_verdicts(self) -> Path:
        return self.root / LAST_VERDICTS

    @property
    def report(self) -> Path:
        return self.root / REPORT

    def unit_dir(self, pipeline: str, seed: int) -> Path:
        """``STORE/units/<pipeline>/seed<k>``: a run's unit files."""
        return self.units / pipeline / f"seed{int(seed)}"

    def checkpoint_dir(self, pipeline: str, seed: int) -> Path:
        """``STORE/checkpoints/<pipeline>/seed<k>``: a run's checkpoints."""
        return self.checkpoints / pipeline / f"seed{int(seed)}"

    def backtest_paths(self, pipeline: str, seed: int) -> tuple[Path, Path]:
        """``(parquet, sidecar)`` of one seed's backtest: ``STORE/backtests/<pipeline>/seed<k>.parquet`` and ``.json``."""
        folder = self.backtests / pipeline
        return folder / f"seed{int(seed)}.parquet", folder / f"seed{int(seed)}.json"
