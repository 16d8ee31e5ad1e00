"""Log a result store to MLflow: one parent run per pipeline, nested runs per seed and window.

Layout in MLflow (experiment = the store's ``experiment_name`` unless given)::

    <pipeline>                       parent run  params: resolved model / dataset / handler kwargs,
    │                                            schedule; tags: config hash, store;
    │                                            metrics: mean and std over seeds of QL and CQL
    ├── <pipeline> seed<k>           nested run  params: pipeline, seed; metrics: ql, ql_scored,
    │   │                                        cql, n_all, n_scored, and the per-month series
    │   │                                        ql_month / cql_month / bias_month (step = month
    │   │                                        index, 0-based over the evaluation period;
    │   │                                        bias_month = the shift c_k applied in month k)
    │   └── <pipeline> seed<k> w<NN> nested run  params: seed, window, fit/train/valid/test dates,
    │                                            predictions (absolute Parquet path), checkpoint;
    │                                            metrics: rows, ql, and ql_month / cql_month of
    │                                            the months this window predicted

``ql`` is the plain quadratic loss over all months, ``ql_scored`` over months
2..K (the rows CQL scores), ``cql`` the rolling calibrated quadratic loss
(METHOD 2.2). A month's CQL is absent for the first month (it only supplies the bias).

Tracking logs the scores it is given (a :class:`~rolling_calib.analysis.scoring.StoreScores`,
the ones ``run``, ``demo`` and ``compare`` computed): it never scores the store itself, so MLflow
holds exactly the numbers the command printed, under the calibration rule and label they were
computed with (tags ``rc.calibration`` and ``rc.label`` on the pipeline and seed runs; the
runs' version includes them, so logging other scores updates the runs).

The default tracking URI is ``sqlite:///<STORE>/mlflow.db``; any URI MLflow
accepts works (``http://host:5000`` for a tracking server). MLflow 3 refuses a
plain directory (file store) as URI, hence SQLite. Browse with
``mlflow ui --backend-store-uri sqlite:///<STORE>/mlflow.db``.

Idempotent: every run carries the tags ``rc.store_id`` (hash of the store's
absolute path) and ``rc.key`` (pipeline, config hash, seed, window); re-logging
finds the existing runs by those tags and adds only what is new (a seed whose
set of completed windows changed is updated in place).

Crash-safe: a run gets its ``rc.version`` tag only once its params and metrics are
logged, so a run left half-logged by a crash is deleted and logged again. A SQLite
database whose schema creation was interrupted (``kill -9``, full disk) is repaired or
moved aside before logging (:mod:`rolling_calib.tracking.sqlite_db`), under a lock
file ``<db>.lock``. :func:`safe_log_store` never raises: the orchestration uses it so
that tracking can never fail a run whose results are already in the store.

Qlib's own recorder can share the database: ``qlib.init(..., exp_manager={"class":
"MLflowExpManager", "module_path": "qlib.workflow.expm", "kwargs": {"uri":
"sqlite:///<STORE>/mlflow.db", "default_exp_name": "qlib"}})`` then ``with
R.start(experiment_name=...)`` logs into the same database, in its own experiment.

Example
-------
>>> import tempfile, warnings
>>> uri = f"sqlite:///{tempfile.mkdtemp()}/mlflow.db"
>>> from rolling_calib.analysis.scoring import score_store
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")          # MLflow's own deprecation chatter
...     log_store(score_store(example_store), tracking_uri=uri)
>>> from mlflow.tracking import MlflowClient
>>> client = MlflowClient(uri)
>>> experiment = client.search_experiments()[0]
>>> len(client.search_runs([experiment.experiment_id]))   # 2 pipelines + 6 seeds + 12 windows
20
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rolling_calib.analysis.scoring import StoreScores
from rolling_calib.core.fingerprint import stable_hash
from rolling_calib.execution import store as st
from rolling_calib.execution.units import UnitKey
from rolling_calib.tracking.sqlite_db import (
    DbRepair,
    repair_tracking_db,
    sqlite_path,
    tracking_db_lock,
)

__all__ = [
    "TrackingOutcome",
    "TrackingRepairWarning",
    "TrackingSummary",
    "default_tracking_uri",
    "flatten_task_params",
    "log_store",
    "safe_log_store",
    "track_store",
]

PARAM_VALUE_LIMIT = 500
_BATCH = 900  # MLflow accepts at most 1000 metrics (100 params) per log_batch call


def default_tracking_uri(store_dir: str | Path) -> str:
    """``sqlite:///<absolute store>/mlflow.db``.

    Examples
    --------
    >>> default_tracking_uri("/data/run1")
    'sqlite:////data/run1/mlflow.db'
    """
    return f"sqlite:///{(Path(store_dir).resolve() / 'mlflow.db').as_posix()}"


@dataclass
class TrackingSummary:
    """What :func:`track_store` did: runs created, updated and found unchanged."""

    tracking_uri: str
    experiment_id: str
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    run_ids: dict[str, str] = field(default_factory=dict)  # rc.key -> run id
    relogged: int = 0  # runs a crash had left half-logged: deleted and created again (counted in created)
    repair: DbRepair | None = None  # the SQLite database was moved aside or upgraded first


class TrackingRepairWarning(UserWarning):
    """:func:`log_store` repaired or re-created the tracking database before logging."""


# --------------------------------------------------------------------------- params
def _param_text(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= PARAM_VALUE_LIMIT else text[: PARAM_VALUE_LIMIT - 3] + "..."


def flatten_task_params(task: Mapping[str, Any]) -> dict[str, str]:
    """Resolved Qlib task as flat MLflow params (``model.hidden_size``, ``handler.instruments``, ...).

    Examples
    --------
    >>> flatten_task_params({"model": {"class": "LSTM", "kwargs": {"hidden_size": 64}},
    ...                      "dataset": {"class": "D", "kwargs": {"step_len": 20, "handler": {"class": "H", "kwargs": {}}}}})
    {'model.class': 'LSTM', 'model.hidden_size': '64', 'dataset.class': 'D', 'dataset.step_len': '20', 'handler.class': 'H'}
    """
    out: dict[str, str] = {}
    model = task.get("model", {})
    out["model.class"] = str(model.get("class", ""))
    for key, value in model.get("kwargs", {}).items():
        out[f"model.{key}"] = _param_text(value)
    dataset = task.get("dataset", {})
    out["dataset.class"] = str(dataset.get("class", ""))
    dkw = dataset.get("kwargs", {})
    for key, value in dkw.items():
        if key not in ("handler", "segments"):
            out[f"dataset.{key}"] = _param_text(value)
    handler = dkw.get("handler", {})
    if isinstance(handler, Mapping):
        out["handler.class"] = str(handler.get("class", ""))
        for key, value in handler.get("kwargs", {}).items():
            out[f"handler.{key}"] = _param_text(value)
    return out


# --------------------------------------------------------------------------- what to log
def _store_id(store: Path) -> str:
    return hashlib.sha256(str(store).encode()).hexdigest()[:16]


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _month_series(periods: pd.DataFrame) -> list[tuple[str, float, int]]:
    """``(metric, value, step)`` of the per-month QL/CQL series (skips months without a value)."""
    out = []
    for row in periods.itertuples(index=False):
        if _finite(row.ql):
            out.append(("ql_month", float(row.ql), int(row.step)))
        if _finite(row.cql):
            out.append(("cql_month", float(row.cql), int(row.step)))
        if _finite(getattr(row, "bias", None)):
            out.append(("bias_month", float(row.bias), int(row.step)))
    return out


class _Logger:
    """Creates or finds runs by ``rc.key`` and logs params/metrics/tags in batches."""

    def __init__(self, client, experiment_id: str, store: Path, summary: TrackingSummary) -> None:
        self.client = client
        self.experiment_id = experiment_id
        self.store = store
        self.store_id = _store_id(store)
        self.summary = summary
        self.existing: dict[str, Any] = {}
        token = None
        while True:
            page = client.search_runs(
                [experiment_id],
                filter_string=f"tags.`rc.store_id` = '{self.store_id}'",
                max_results=1000,
                page_token=token,
            )
            for run in page:
                key = run.data.tags.get("rc.key")
                if key is not None:
                    self.existing[key] = run
            token = page.token
            if not token:
                break

    def ensure(
        self,
        key: str,
        *,
        name: str,
        level: str,
        parent_id: str | None,
        params: Mapping[str, str],
        metrics: Iterable[tuple[str, float, int]],
        tags: Mapping[str, str],
        version: str,
    ) -> str:
        """The run for ``key``: created, updated (when ``version`` changed) or left alone."""
        from mlflow.entities import Metric, Param, RunTag

        run = self.existing.get(key)
        if run is not None and "rc.version" not in run.data.tags:
            # created, but the process died (or the disk filled) before it was complete
            self.client.delete_run(run.info.run_id)
            self.summary.relogged += 1
            run = None
        if run is not None and run.data.tags.get("rc.version") == version:
            self.summary.unchanged += 1
            self.summary.run_ids[key] = run.info.run_id
            return run.info.run_id
        all_tags = {
            "rc.key": key,
            "rc.store_id": self.store_id,
            "rc.store": str(self.store),
            "rc.level": level,
            "rc.version": version,
            "mlflow.runName": name,
            **tags,
        }
        if parent_id is not None:
            all_tags["mlflow.parentRunId"] = parent_id
        if run is None:  # rc.version last: it marks the run complete
            first_tags = {k: v for k, v in all_tags.items() if k != "rc.version"}
            run_id = self.client.create_run(self.experiment_id, tags=first_tags, run_name=name).info.run_id
            new_params = [Param(k, v) for k, v in params.items()]
            self.summary.created += 1
        else:
            run_id = run.info.run_id
            new_params = [Param(k, v) for k, v in params.items() if k not in run.data.params]
            self.summary.updated += 1
        now = int(time.time() * 1000)
        metric_list = [Metric(k, float(v), now, int(step)) for k, v, step in metrics]
        tag_list = [RunTag(k, str(v)) for k, v in all_tags.items()] if run is not None else [
            RunTag("rc.version", version)]
        for i in range(0, len(new_params), 100):  # MLflow: at most 100 params per batch
            self.client.log_batch(run_id, params=new_params[i : i + 100])
        for i in range(0, len(metric_list), _BATCH):
            self.client.log_batch(run_id, metrics=metric_list[i : i + _BATCH])
        self.client.set_terminated(run_id, "FINISHED")
        self.client.log_batch(run_id, tags=tag_list)  # rc.version: the run is complete
        self.summary.run_ids[key] = run_id
        return run_id


def _experiment_id(client, name: str, store: Path) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return experiment.experiment_id
    return client.create_experiment(name, artifact_location=(store / "mlartifacts").as_uri())


def _window_of(periods: pd.DataFrame, window: Mapping[str, Any]) -> pd.DataFrame:
    """The periods (months) that overlap the window's test segment."""
    start, end = (pd.Timestamp(t) for t in window["test"])
    p_start = pd.to_datetime(periods["start"])
    p_end = pd.to_datetime(periods["end"]) if "end" in periods else p_start
    return periods[(p_start <= end) & (p_end >= start)]


# --------------------------------------------------------------------------- entry points
def track_store(
    scores: StoreScores,
    *,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    lock_timeout: float = 300.0,
) -> TrackingSummary:
    """Log the scored runs of a store (and their complete units) to MLflow and say what was created.

    A ``sqlite:///`` database is locked (``<db>.lock``), checked and, when a crash left
    it unusable, repaired or moved aside first (``summary.repair`` says so).

    Parameters
    ----------
    scores : StoreScores
        The scores a command computed (:func:`~rolling_calib.analysis.scoring.score_store`);
        ``scores.store`` is the store (it needs ``manifest.json``). Logged as they are.
    tracking_uri : str, optional
        MLflow tracking URI; default :func:`default_tracking_uri` of the store.
    experiment : str, optional
        MLflow experiment name; default the store's ``experiment_name``.
    lock_timeout : float
        Seconds to wait for another process logging into the same SQLite database.

    Returns
    -------
    TrackingSummary
    """
    return _track(scores, tracking_uri=tracking_uri, experiment=experiment, lock_timeout=lock_timeout, repairs=[])


def _track(scores: StoreScores, *, tracking_uri: str | None, experiment: str | None, lock_timeout: float,
           repairs: list[DbRepair]) -> TrackingSummary:
    """:func:`track_store`; a repair of the database is appended to ``repairs`` before logging starts."""
    store = Path(scores.store).resolve()
    manifest = st.read_manifest(store)
    uri = tracking_uri or default_tracking_uri(store)
    name = experiment or manifest.get("experiment", {}).get("experiment_name") or "rolling-calib"
    periods = scores.periods.sort_values(["pipeline", "seed", "start"], kind="stable").reset_index(drop=True)
    periods["step"] = periods.groupby(["pipeline", "seed"]).cumcount()

    db = sqlite_path(uri)
    with tracking_db_lock(db, timeout=lock_timeout) if db is not None else contextlib.nullcontext():
        repair = repair_tracking_db(db) if db is not None else None
        if repair is not None:
            repairs.append(repair)
        return _log_scores(store, manifest, uri, name, scores, periods, repair)


def _scoring_tags(scores: StoreScores) -> tuple[dict[str, str], str]:
    """Tags naming the rule and label of ``scores``, and a short key of both (part of the runs' version)."""
    tags = {"rc.calibration": scores.calibration.describe(), "rc.label": scores.label.describe()}
    key = stable_hash({"calibration": scores.calibration.to_dict(), "label": scores.label.to_dict()})[:8]
    return tags, key


def _log_scores(store: Path, manifest: Mapping[str, Any], uri: str, name: str, scores: StoreScores,
                periods: pd.DataFrame, repair: DbRepair | None) -> TrackingSummary:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    summary = TrackingSummary(tracking_uri=uri, experiment_id=_experiment_id(client, name, store), repair=repair)
    logger = _Logger(client, summary.experiment_id, store, summary)
    runs = scores.runs
    scoring_tags, scoring_key = _scoring_tags(scores)
    for pipeline, entry in manifest["pipelines"].items():
        config_hash = str(entry.get("config_hash"))
        p_runs = runs[runs["pipeline"] == pipeline].sort_values("seed")
        if p_runs.empty:
            continue
        seeds = [int(s) for s in p_runs["seed"]]
        parent_metrics = [("n_seeds", float(len(p_runs)), 0)]
        for metric in ("ql", "ql_scored", "cql"):
            values = p_runs[metric].astype(float)
            parent_metrics.append((f"{metric}_mean", float(values.mean()), 0))
            if len(values) > 1:
                parent_metrics.append((f"{metric}_std", float(values.std(ddof=1)), 0))
        parent_params = flatten_task_params(entry.get("task", {}))
        parent_params.update(
            {"schedule.mode": str(entry.get("mode")), "schedule.windows": str(len(entry.get("windows", [])))}
        )
        parent_id = logger.ensure(
            f"{pipeline}|{config_hash}",
            name=pipeline,
            level="pipeline",
            parent_id=None,
            params=parent_params,
            metrics=parent_metrics,
            tags={"rc.pipeline": pipeline, "rc.config_hash": config_hash, **scoring_tags},
            version=",".join(map(str, seeds)) + f"|{scoring_key}",
        )
        windows = entry.get("windows", [])
        complete = set(st.complete_units(store, manifest, pipeline)[0])
        for row in p_runs.itertuples(index=False):
            seed = int(row.seed)
            s_periods = periods[(periods["pipeline"] == pipeline) & (periods["seed"] == seed)]
            done = [w for w in windows if UnitKey(pipeline, seed, int(w["index"])) in complete]
            seed_metrics = [(m, float(getattr(row, m)), 0) for m in ("ql", "ql_scored", "cql", "n_all", "n_scored")
                            if _finite(getattr(row, m))]
            seed_id = logger.ensure(
                f"{pipeline}|{config_hash}|seed{seed}",
                name=f"{pipeline} seed{seed}",
                level="seed",
                parent_id=parent_id,
                params={"pipeline": pipeline, "seed": str(seed)},
                metrics=seed_metrics + _month_series(s_periods),
                tags={"rc.pipeline": pipeline, "rc.config_hash": config_hash, "rc.seed": str(seed), **scoring_tags},
                version=",".join(str(w["index"]) for w in done) + f"|{scoring_key}",
            )
            for window in done:
                _log_window(logger, store, pipeline, config_hash, seed, window, s_periods, seed_id, scoring_key)
    return summary


def _log_window(logger: _Logger, store: Path, pipeline: str, config_hash: str, seed: int,
                window: Mapping[str, Any], periods: pd.DataFrame, parent_id: str, scoring_key: str) -> None:
    index = int(window["index"])
    key = UnitKey(pipeline, seed, index)
    side = st.read_sidecar(store, key) or {}
    paths = st.unit_paths(store, key)
    params = {"pipeline": pipeline, "seed": str(seed), "window": str(index), "predictions": str(paths.parquet)}
    for segment in ("fit", "train", "valid", "test"):
        bounds = window.get(segment)
        if bounds is None:  # e.g. no validation segment (valid_months: 0)
            params[f"{segment}_start"] = params[f"{segment}_end"] = "none"
            continue
        start, end = bounds
        params[f"{segment}_start"], params[f"{segment}_end"] = str(start), str(end)
    if side.get("checkpoint"):
        params["checkpoint"] = str(store / side["checkpoint"])
    metrics = [(m, float(side[m]), 0) for m in ("rows", "ql") if _finite(side.get(m))]
    if _finite(side.get("timings", {}).get("total_s")):
        metrics.append(("seconds", float(side["timings"]["total_s"]), 0))
    logger.ensure(
        f"{pipeline}|{config_hash}|seed{seed}|w{index:02d}",
        name=f"{pipeline} seed{seed} w{index:02d}",
        level="window",
        parent_id=parent_id,
        params=params,
        metrics=metrics + _month_series(_window_of(periods, window)),
        tags={"rc.pipeline": pipeline, "rc.config_hash": config_hash, "rc.seed": str(seed),
              "rc.window": str(index), "rc.predictions": str(paths.parquet)},
        version=f"{side.get('finished_at', '')}|{scoring_key}",
    )


def log_store(scores: StoreScores, *, tracking_uri: str, experiment: str | None = None) -> None:
    """Log a store's scores to MLflow (see the module docstring); re-logging adds only what is new.

    Parameters
    ----------
    scores : StoreScores
        The scores of a store written by ``rolling-calib run`` (:func:`~rolling_calib.analysis.scoring.score_store`).
    tracking_uri : str
        E.g. ``sqlite:///runs/demo/mlflow.db`` (see :func:`default_tracking_uri`).
    experiment : str, optional
        MLflow experiment name (default: the store's experiment name).

    Warns
    -----
    TrackingRepairWarning
        The SQLite database was unusable (e.g. its creation was interrupted) and was moved
        aside or upgraded before logging; the message names both files.
    """
    summary = track_store(scores, tracking_uri=tracking_uri, experiment=experiment)
    if summary.repair is not None:
        warnings.warn(summary.repair.message, TrackingRepairWarning, stacklevel=2)


@dataclass
class TrackingOutcome:
    """What :func:`safe_log_store` did.

    ``uri`` is the tracking URI when logging completed (``None`` when it failed); ``message``
    is a line for the user when something needs saying (a repair, a failure), else ``None``;
    ``repaired_from`` is where an unusable database was moved (or the pre-upgrade original kept).
    """

    uri: str | None
    ok: bool
    message: str | None = None
    repaired_from: Path | None = None
    summary: TrackingSummary | None = None


def safe_log_store(
    scores: StoreScores,
    *,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    lock_timeout: float = 300.0,
) -> TrackingOutcome:
    """:func:`track_store` of ``scores`` that never raises: tracking can never fail a run.

    The results are in the store already; when logging fails (full disk, locked database,
    any MLflow error, MLflow not installed) the outcome says so and how to log them later.
    Re-logging is idempotent, so the next call completes what a failed one left.

    Examples
    --------
    A database that is not an MLflow database at all is moved aside, then logged into afresh:

    >>> import tempfile, warnings
    >>> from rolling_calib.analysis.scoring import score_store
    >>> db = Path(tempfile.mkdtemp()) / "mlflow.db"
    >>> _ = db.write_bytes(b"not a database")
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     outcome = safe_log_store(score_store(example_store), tracking_uri=f"sqlite:///{db}")
    >>> outcome.ok, outcome.repaired_from is not None, "moved it aside" in outcome.message
    (True, True, True)
    """
    store = Path(scores.store).resolve()
    uri = tracking_uri or default_tracking_uri(store)
    repairs: list[DbRepair] = []
    try:
        summary = _track(scores, tracking_uri=uri, experiment=experiment, lock_timeout=lock_timeout, repairs=repairs)
    except Exception as exc:  # noqa: BLE001 - tracking must not fail the run; the message carries the error
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "mlflow":
            failure = (f"tracking skipped: MLflow is not installed (pip install 'rolling-calib[mlflow]', or pass "
                       f"--no-tracking); results are in {store}")
        else:
            failure = (f"tracking failed: {_error_line(exc)}; results are in {store}; re-run `rolling-calib run` "
                       "(or call log_store) to log them")
        notes = [r.message for r in repairs] + [failure]
        return TrackingOutcome(uri=None, ok=False, message="; then ".join(notes),
                               repaired_from=repairs[0].moved_to if repairs else None)
    repair = summary.repair
    return TrackingOutcome(uri=uri, ok=True, message=repair.message if repair else None,
                           repaired_from=repair.moved_to if repair else None, summary=summary)


def _error_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message`` (SQLAlchemy appends the SQL on later lines)."""
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."
