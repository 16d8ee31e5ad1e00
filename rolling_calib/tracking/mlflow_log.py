"""Log a result store to MLflow: a comparison run, one parent run per pipeline, nested runs per seed and window.

Layout in MLflow (experiment = the store's ``experiment_name`` unless given)::

    comparison: <pipelines>          run         what ``compare`` computed (when a comparison is given):
    │                                            params: bootstrap settings, pairs; artifacts:
    │                                            comparison.json (``compare --json``), report/ (HTML,
    │                                            Markdown, PNGs, CSVs) when a report is given; a run
    │                                            --until-decided adds its sequential path (tags
    │                                            sequential.*, metrics sequential_*), a raced sweep its
    │                                            race (``STORE/race.json``, below)
    <pipeline>                       parent run  params: the resolved configuration (``task.*``,
    │                                            ``rolling.*``, ``data.*``: dotted keys; window dates and
    │                                            the seed say "per window" / "per seed");
    │                                            metrics: mean and std over seeds of QL, CQL, IC, ICIR,
    │                                            Rank IC; with a backtest, of the mean daily excess
    │                                            return (excess_return[_cost]_mean) and of Qlib's
    │                                            annualized_return, information_ratio, max_drawdown
    │                                            (``_cost``: with cost), params backtest.strategy,
    │                                            .benchmark, .cost, .mode, .annualization_days;
    │                                            per compared pipeline OTHER and metric M:
    │                                            diff.OTHER.M, ci_low.OTHER.M, ci_high.OTHER.M,
    │                                            seeds_needed.OTHER.M, timeseries_dm_p.OTHER.M (the
    │                                            Diebold-Mariano p of the seed-averaged differential:
    │                                            a time-series detail, not the verdict's), and per window
    │                                            (step = window index) window_diff.OTHER.M,
    │                                            window_ci_low.OTHER.M, window_ci_high.OTHER.M; tags:
    │                                            verdict.OTHER.M (better | worse | undetermined, this
    │                                            pipeline against OTHER, the headline question),
    │                                            verdict_future.OTHER.M or verdict_period.OTHER.M (the
    │                                            other question, shown beside it), when.OTHER.M (better
    │                                            in n of q windows ...), across_windows.OTHER.M,
    │                                            fluctuation.OTHER.M (stable | changed at DATE),
    │                                            warning.KIND (the guard's message), config hash, store;
    │                                            in a raced sweep rc.race (kept | eliminated at look k)
    │                                            and rc.race_seeds (the seeds the race read of it)
    ├── <pipeline> seed<k>           nested run  params: the resolved configuration with this seed;
    │   │                                        metrics: ql, ql_scored, cql, ic, icir, rank_ic,
    │   │                                        excess_return[_cost] (mean daily, with a backtest), n_all,
    │   │                                        n_scored, and the per-period series ql_month /
    │   │                                        cql_month / bias_month (step = period index, 0-based;
    │   │                                        bias_month = the shift c_k applied in period k)
    │   └── <pipeline> seed<k> w<NN> nested run  params: seed, window, its own fit/train/valid/test
    │                                            dates, predictions and checkpoint (paths relative to
    │                                            the store); metrics: rows, ql, seconds and the periods
    │                                            this window predicted; the unit's Qlib recorder linked
    │                                            (below)

**A raced sweep** (``sweep --until-decided``, ``STORE/race.json``:
:mod:`rolling_calib.analysis.race_record`) is logged on the comparison run: params
``race.question.target``, ``race.question.confidence``, ``race.rule.*`` (the stopping rule),
``race.metric``, ``race.comparisons``, ``race.comparison_alpha``; per look (step = the look's
number, 1, 2, ...) metrics ``race_kept``, ``race_eliminated`` (at that look), ``race_seeds_spent``,
``race_seeds``, ``race_level``, and at step 0 ``race_seeds_used.NAME``, ``race_fraction_of_grid``,
``race_units_used``; tags ``race.stop``, ``race.best_set``, ``race.eliminated.NAME`` (the look) and
``race.eliminated_by.NAME``; the artifact ``race.json``. A name's characters that MLflow refuses in a
key (``lr=0.1``) become ``_``. When the race changed, the comparison run is deleted and logged
again (tag ``rc.history``): MLflow appends a metric's history, and the old looks would stay beside
the new ones.

``ql`` is the plain quadratic loss over all periods, ``ql_scored`` over periods 2..K (the rows
CQL scores), ``cql`` the rolling calibrated quadratic loss (docs/method.md §2.2). A period's CQL
is absent for the first period (it only supplies the bias).

**One run per unit.** On a daily store each unit also has the Qlib recorder its ``record``
templates ran in (:mod:`rolling_calib.qlib_adapter.records`: experiment = the pipeline, run =
the unit's slug, holding ``pred.pkl``, ``label.pkl`` and Qlib's analysis). The two are linked
both ways rather than duplicated: the window run gets the tags ``rc.qlib_recorder_id``,
``rc.qlib_experiment`` and ``rc.qlib_experiment_id``; the recorder (when it is in the same
database) gets ``rc.window_run_id`` and ``rc.window_experiment``. A unit without such a recorder
(minute stores: Qlib's record templates are daily tools) gets ``pred.pkl`` and ``label.pkl`` on
its window run, written as Qlib's ``SignalRecord`` writes them (index ``(datetime, instrument)``;
column ``score``; the raw label in column ``LABEL0``), so ``R.get_recorder(recorder_id=<window run
id>, experiment_name=<experiment>).load_object("pred.pkl")`` works on every unit.

**Paths.** No absolute path is logged as a param or tag: ``rc.store`` is the store relative to
``path_root`` (default: the directory that holds the store, so the store's name), and unit
files are relative to the store.

Tracking logs the scores and the comparison it is given (the ones ``run``, ``demo`` and
``compare`` computed): it never scores or compares on its own, so MLflow holds exactly the
numbers the command printed, under the calibration rule and label they were computed with (tags
``rc.calibration`` and ``rc.label``; the runs' version includes them, so logging other scores
updates the runs).

The default tracking URI is ``sqlite:///<STORE>/mlflow.db``; any URI MLflow accepts works
(``http://host:5000`` for a tracking server). MLflow 3 refuses a plain directory (file store) as
URI, hence SQLite. Browse with ``mlflow ui --backend-store-uri sqlite:///<STORE>/mlflow.db``;
MLflow 3 opens an experiment on its overview page: the runs are under the experiment's
"Runs" tab (``#/experiments/<id>/runs``).

Idempotent: every run carries the tags ``rc.store_id`` (hash of the store's absolute path) and
``rc.key`` (pipeline, config hash, seed, window); re-logging finds the existing runs by those tags
and adds only what is new (a run whose content changed is updated in place).

**Times.** A window run starts and ends when its unit's training did (the sidecar's ``started_at``
and ``finished_at``; for units written before ``started_at``, ``finished_at`` less the unit's
seconds), a seed or pipeline run spans its units, so MLflow's durations are the training's; the
comparison run's are the logging's. A run logged with other times (by an older version: the
logging's) is logged again.

**Stale configs.** When a pipeline's config changed (its units moved to ``STORE/stale/`` and
retrained), the runs of its older config, and in the store's own database the Qlib recorders of
its older units, are tagged ``rc.stale`` (why, and where the units went), renamed ``... [stale]``
and deleted (MLflow keeps deleted runs, restorable, under "deleted runs"), so the runs shown
under a pipeline's name are its current config's.

**Moved stores.** Every experiment's description (``mlflow.note.content``, on its page in the UI)
says that its artifacts are files in the store, recorded by absolute path, and to run
``rolling-calib relocate --store DIR`` after the store moved or was copied
(:data:`~rolling_calib.core.store_layout.ARTIFACTS_NOTE`).

Crash-safe: a run gets its ``rc.version`` tag only once its params, metrics and artifacts are
logged, so a run left half-logged by a crash is deleted and logged again. A SQLite database whose
schema creation was interrupted (``kill -9``, full disk) is repaired or moved aside before
logging (:mod:`rolling_calib.tracking.sqlite_db`), under a lock file ``<db>.lock``.
:func:`safe_log_store` never raises: the orchestration uses it so that tracking can never fail a
run whose results are already in the store.

Qlib's own recorder can share the database: ``qlib.init(..., exp_manager={"class":
"MLflowExpManager", "module_path": "qlib.workflow.expm", "kwargs": {"uri":
"sqlite:///<STORE>/mlflow.db", "default_exp_name": "qlib"}})`` then ``with
R.start(experiment_name=...)`` logs into the same database, in its own experiment.

Example
-------
>>> import tempfile, warnings
>>> uri = f"sqlite:///{tempfile.mkdtemp()}/mlflow.db"
>>> from rolling_calib.analysis.comparison import compare_store
>>> from rolling_calib.analysis.scoring import score_store
>>> scores = score_store(example_store)
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")          # MLflow's own deprecation chatter
...     log_store(scores, tracking_uri=uri, comparison=compare_store(scores, resampling=Resampling(n_boot=200)))
>>> from mlflow.tracking import MlflowClient
>>> client = MlflowClient(uri)
>>> experiment = client.search_experiments()[0]
>>> len(client.search_runs([experiment.experiment_id]))   # 1 comparison + 2 pipelines + 6 seeds + 12 windows
21
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rolling_calib.analysis.comparison import StoreComparison, verdict_columns
from rolling_calib.analysis.race_record import RACE_FILE, RaceRecord, read_race
from rolling_calib.analysis.scoring import StoreScores
from rolling_calib.analysis.sequential_path import read_path
from rolling_calib.core.fingerprint import stable_hash
from rolling_calib.core.metric_table import ALL_METRICS
from rolling_calib.core.tables import format_table
from rolling_calib.core.schedule import Window
from rolling_calib.core.store_layout import ARTIFACTS_NOTE, StoreLayout
from rolling_calib.execution.manifest import Manifest, PipelineRecord, Sidecar
from rolling_calib.execution.reader import read_unit
from rolling_calib.execution.store import Store
from rolling_calib.execution.units import UnitKey
from rolling_calib.qlib_adapter.training import HANDLER_TIME_KWARGS
from rolling_calib.tracking.relocation import repoint_store_db
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
    "config_params",
    "default_tracking_uri",
    "flatten_config",
    "log_store",
    "safe_log_store",
    "track_store",
]

#: Longer param values are cut here: MLflow allows 6000 characters, but 1000 once its SQL store is loaded in the process.
PARAM_VALUE_LIMIT = 500
#: MLflow's limit on a tag value; longer messages are cut.
TAG_VALUE_LIMIT = 8000
#: Part of every run's version: a change of what is logged per run updates runs logged before it.
LAYOUT = "3"
#: Param value of the keys that differ per window (dates) or per seed, on runs above them.
PER_WINDOW = "per window: see the window runs"
PER_SEED = "per seed: see the seed runs"
#: The tag MLflow shows as a run's or an experiment's description.
NOTE_TAG = "mlflow.note.content"
#: Name of the raw label column in ``label.pkl`` (Qlib's handlers and ``MinuteTSDataset`` name it so).
LABEL_COLUMN = "LABEL0"
_BATCH = 900  # MLflow accepts at most 1000 metrics (100 params) per log_batch call
_WINDOW_KEYS = tuple(f"task.dataset.kwargs.handler.kwargs.{k}" for k in HANDLER_TIME_KWARGS)


def default_tracking_uri(store_dir: str | Path) -> str:
    """``sqlite:///<absolute store>/mlflow.db`` (:attr:`~rolling_calib.core.store_layout.StoreLayout.tracking_uri`).

    Examples
    --------
    >>> default_tracking_uri("/data/run1")
    'sqlite:////data/run1/mlflow.db'
    """
    return StoreLayout(Path(store_dir)).tracking_uri


@dataclass
class TrackingSummary:
    """What :func:`track_store` did: runs created, updated and found unchanged."""

    tracking_uri: str
    experiment_id: str
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    run_ids: dict[str, str] = field(default_factory=dict)  # rc.key -> run id
    relogged: int = 0  # runs deleted and created again (half-logged by a crash; or without their training times)
    repair: DbRepair | None = None  # the SQLite database was moved aside or upgraded first
    stale: int = 0  # runs (and Qlib recorders) of an older config of a pipeline: tagged rc.stale, renamed, deleted


class TrackingRepairWarning(UserWarning):
    """:func:`log_store` repaired or re-created the tracking database before logging."""


# --------------------------------------------------------------------------- params
def _param_text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value) if isinstance(value, (list, type(None))) \
        else repr(value) if not isinstance(value, (int, float, bool)) else str(value)
    return text if len(text) <= PARAM_VALUE_LIMIT else text[: PARAM_VALUE_LIMIT - 3] + "..."


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested configuration as MLflow params: dotted keys, values as text (cut at :data:`PARAM_VALUE_LIMIT`).

    Mappings nest (``task.model.kwargs.lr``); a list of mappings is numbered (``task.record.0.class``);
    any other list is one value (JSON).

    Examples
    --------
    >>> flatten_config({"model": {"class": "LSTM", "kwargs": {"hidden_size": 64, "layers": [1, 2]}},
    ...                 "record": [{"class": "SignalRecord"}], "x": None})
    {'model.class': 'LSTM', 'model.kwargs.hidden_size': '64', 'model.kwargs.layers': '[1, 2]', 'record.0.class': 'SignalRecord', 'x': 'null'}
    """
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_config(value, f"{name}."))
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            for i, item in enumerate(value):
                out.update(flatten_config(item, f"{name}.{i}."))
        else:
            out[name] = _param_text(value)
    return out


def config_params(manifest: Manifest, pipeline: str, *, seed: int | None = None) -> dict[str, str]:
    """A pipeline's full resolved configuration as params: its Qlib task, its rolling section, the data's identity.

    ``task.*`` is the pipeline's resolved Qlib task, ``rolling.*`` the experiment's rolling section
    with the pipeline's own mode, calibration and label, ``data.*`` the data fingerprint (the data
    path is left out: no machine paths). The task's window dates (handler times, segments) hold
    :data:`PER_WINDOW` -- the window runs have each window's own -- and the model's ``seed`` the
    run's ``seed``, or :data:`PER_SEED` without one.

    Examples
    --------
    >>> manifest = Manifest.from_dict({"pipelines": {"a": {"task": {"model": {"kwargs": {"seed": 0, "lr": 0.1}},
    ...     "dataset": {"kwargs": {"segments": {"test": ["2018-01-02", "2018-03-29"]}}}}, "mode": "finetune"}},
    ...     "experiment": {"rolling": {"step_months": 3}}, "data": {"path": "/abs", "features": "5f4b"}}, source="m")
    >>> config_params(manifest, "a", seed=3)
    {'task.model.kwargs.seed': '3', 'task.model.kwargs.lr': '0.1', 'task.dataset.kwargs.segments.test': 'per window: see the window runs', 'rolling.step_months': '3', 'rolling.mode': 'finetune', 'data.features': '5f4b'}
    """
    entry = manifest.pipelines[pipeline]
    rolling = dict(manifest.rolling)
    rolling.update({k: v for k, v in (("mode", entry.mode), ("calibration", entry.calibration), ("label", entry.label))
                    if v is not None})
    data = {k: v for k, v in (manifest.data.raw if manifest.data is not None else {}).items() if k != "path"}
    params = flatten_config({"task": entry.task, "rolling": rolling, "data": data})
    for key in params:
        if key.startswith("task.dataset.kwargs.segments.") or key in _WINDOW_KEYS:
            params[key] = PER_WINDOW
    if "task.model.kwargs.seed" in params:
        params["task.model.kwargs.seed"] = PER_SEED if seed is None else str(int(seed))
    return {k[:250]: v for k, v in params.items()}


# --------------------------------------------------------------------------- what to log
def _store_id(store: Path) -> str:
    return hashlib.sha256(str(store).encode()).hexdigest()[:16]


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _key_part(name: str) -> str:
    """A pipeline name as part of an MLflow metric or tag key (characters MLflow refuses become ``_``)."""
    return re.sub(r"[^\w\-. /:]", "_", name)


def _month_series(periods: pd.DataFrame) -> list[tuple[str, float, int]]:
    """``(metric, value, step)`` of the per-period QL/CQL series (skips periods without a value)."""
    out = []
    for row in periods.itertuples(index=False):
        if _finite(row.ql):
            out.append(("ql_month", float(row.ql), int(row.step)))
        if _finite(row.cql):
            out.append(("cql_month", float(row.cql), int(row.step)))
        if _finite(getattr(row, "bias", None)):
            out.append(("bias_month", float(row.bias), int(row.step)))
    return out


@dataclass(frozen=True)
class _Spec:
    """One run to ensure: its key, name, level, parent, params, metrics, tags, version and artifacts."""

    key: str
    name: str
    level: str
    parent_id: str | None
    params: Mapping[str, str]
    metrics: Iterable[tuple[str, float, int]]
    tags: Mapping[str, str]
    version: str
    artifacts: Callable[[Any, str], None] | None = None   # (client, run id), before the run is marked complete
    #: (start, end) in ms since the epoch of the work the run stands for (the units' training); None: logging time
    span: tuple[int, int] | None = None
    #: What the run's step series are (tag ``rc.history``; None: no such check): a run whose series changed is
    #: deleted and logged again, since MLflow appends a metric's history (an update in place would keep the old
    #: looks' values beside the new ones at the same steps)
    history: str | None = None


class _Logger:
    """Creates or finds runs by ``rc.key`` and logs params/metrics/tags/artifacts in batches."""

    def __init__(self, client, experiment_id: str, store: Path, summary: TrackingSummary, store_tag: str) -> None:
        self.client = client
        self.experiment_id = experiment_id
        self.store = store
        self.store_id = _store_id(store)
        self.store_tag = store_tag
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

    def ensure(self, spec: _Spec) -> str:
        """The run of ``spec.key``: created, updated (when ``spec.version`` changed) or left alone."""
        from mlflow.entities import Metric, Param, RunTag

        run = self.existing.get(spec.key)
        version = f"{spec.version}|L{LAYOUT}"
        if run is not None and ("rc.version" not in run.data.tags   # the process died before the run was complete
                                or spec.span is not None and run.info.start_time != spec.span[0]   # logging time
                                or spec.history is not None and run.data.tags.get("rc.history") != spec.history):
            self.client.delete_run(run.info.run_id)
            self.summary.relogged += 1
            run = None
        if run is not None and run.data.tags.get("rc.version") == version:
            if spec.parent_id is not None and run.data.tags.get("mlflow.parentRunId") != spec.parent_id:
                self.client.set_tag(run.info.run_id, "mlflow.parentRunId", spec.parent_id)   # its parent was relogged
            self.summary.unchanged += 1
            self.summary.run_ids[spec.key] = run.info.run_id
            return run.info.run_id
        all_tags = {"rc.key": spec.key, "rc.store_id": self.store_id, "rc.store": self.store_tag,
                    "rc.level": spec.level, "mlflow.runName": spec.name, **spec.tags}
        if spec.history is not None:
            all_tags["rc.history"] = spec.history
        if spec.parent_id is not None:
            all_tags["mlflow.parentRunId"] = spec.parent_id
        if run is None:
            run_id = self.client.create_run(self.experiment_id, tags=all_tags, run_name=spec.name,
                                            start_time=spec.span[0] if spec.span else None).info.run_id
            new_params = [Param(k, v) for k, v in spec.params.items()]
            self.summary.created += 1
        else:
            run_id = run.info.run_id
            new_params = [Param(k, v) for k, v in spec.params.items() if k not in run.data.params]
            self.summary.updated += 1
            for i in range(0, len(all_tags), 100):
                self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in list(all_tags.items())[i:i + 100]])
        now = int(time.time() * 1000)
        metric_list = [Metric(k, float(v), now, int(step)) for k, v, step in spec.metrics]
        for i in range(0, len(new_params), 100):  # MLflow: at most 100 params per batch
            self.client.log_batch(run_id, params=new_params[i : i + 100])
        for i in range(0, len(metric_list), _BATCH):
            self.client.log_batch(run_id, metrics=metric_list[i : i + _BATCH])
        if spec.artifacts is not None:
            spec.artifacts(self.client, run_id)
        self.client.set_terminated(run_id, "FINISHED", end_time=spec.span[1] if spec.span else None)
        self.client.set_tag(run_id, "rc.version", version)  # last: the run is complete
        self.summary.run_ids[spec.key] = run_id
        return run_id


def _experiment_id(client, name: str, store: Store) -> str:
    """The experiment ``name`` (created with its artifacts in the store), described as :data:`ARTIFACTS_NOTE` says."""
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        experiment_id = client.create_experiment(name, artifact_location=store.layout.artifact_uri)
    else:
        experiment_id = experiment.experiment_id
    if experiment is None or experiment.tags.get(NOTE_TAG) is None:   # MLflow shows it on the experiment's page
        client.set_experiment_tag(experiment_id, NOTE_TAG, ARTIFACTS_NOTE)
    return experiment_id


def _span(sides: Iterable[Sidecar | None]) -> tuple[int, int] | None:
    """The (start, end) in ms of the units' training: the first start to the last end (None: none recorded)."""
    spans = [span for side in sides if side is not None and (span := side.training_span()) is not None]
    if not spans:
        return None
    return (int(min(s for s, _ in spans).timestamp() * 1000), int(max(e for _, e in spans).timestamp() * 1000))


def _retire(client: Any, run: Any, why: str, summary: TrackingSummary) -> None:
    """Mark a run of an older config stale (tag ``rc.stale``, name suffixed) and delete it (MLflow keeps it restorable)."""
    name = run.data.tags.get("mlflow.runName") or run.info.run_name or run.info.run_id
    client.set_tag(run.info.run_id, "rc.stale", why[:TAG_VALUE_LIMIT])
    if not name.endswith("]"):
        client.set_tag(run.info.run_id, "mlflow.runName", f"{name} [stale]")
    client.delete_run(run.info.run_id)
    summary.stale += 1


def _stale_config(store: Store, pipeline: str | None, config_hash: str | None) -> str | None:
    """Why a run of ``pipeline`` under ``config_hash`` is stale (None: the pipeline's current config, or unknown)."""
    entry = store.pipelines.get(pipeline or "")
    if entry is None or config_hash is None or config_hash == entry.config_hash:
        return None
    return (f"config changed: {pipeline} is config {entry.config_hash} now; this run is of config {config_hash} (its "
            f"units were moved to {store.layout.stale / pipeline / config_hash}/ and retrained)")


def _retire_stale(client: Any, logger: _Logger, store: Store, *, recorders: bool) -> None:
    """Retire the runs of this store whose pipeline has another config now, and (``recorders``: the store's own
    database) the Qlib recorders of their units (experiment = the pipeline, tag ``config_hash``)."""
    for run in logger.existing.values():
        why = _stale_config(store, run.data.tags.get("rc.pipeline"), run.data.tags.get("rc.config_hash"))
        if why is not None and run.info.lifecycle_stage == "active":
            _retire(client, run, why, logger.summary)
    if not recorders:
        return
    for name in store.pipelines:
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            continue
        for run in client.search_runs([experiment.experiment_id], filter_string=f"tags.pipeline = '{name}'",
                                      max_results=5000):
            why = _stale_config(store, name, run.data.tags.get("config_hash"))
            if why is not None:
                _retire(client, run, why, logger.summary)


def _window_of(periods: pd.DataFrame, window: Window) -> pd.DataFrame:
    """The periods that overlap the window's test segment."""
    start, end = window.test.start, window.test.end
    p_start = pd.to_datetime(periods["start"])
    p_end = pd.to_datetime(periods["end"]) if "end" in periods else p_start
    return periods[(p_start <= end) & (p_end >= start)]


# --------------------------------------------------------------------------- the comparison
def _verdict_entries(comparison: StoreComparison, pipeline: str) -> tuple[dict[str, str], list[tuple[str, float, int]]]:
    """Tags ``verdict.OTHER.M`` and metrics ``diff/ci_low/ci_high/seeds_needed/timeseries_dm_p.OTHER.M`` of ``pipeline``.

    Seen from ``pipeline``: the difference is ``mean(pipeline) - mean(OTHER)``, so for the pair's
    second pipeline the difference and interval of ``compare --json`` are negated (exactly).
    """
    tags: dict[str, str] = {}
    metrics: list[tuple[str, float, int]] = []
    for pv in comparison.verdicts:
        if pipeline not in (pv.better, pv.worse):
            continue
        first = pipeline == pv.better
        other = _key_part(pv.worse if first else pv.better)
        for metric, v in pv.beside.items():
            tags[f"verdict_{v.target}.{other}.{metric}"] = _seen_from(v.winner, pipeline)
        pair_when = comparison.when_of(pv)
        for metric, w in (pair_when.whens.items() if pair_when is not None else ()):
            tags[f"when.{other}.{metric}"] = _consistency_of(w, pipeline)
            tags[f"across_windows.{other}.{metric}"] = (w.across.outcome if w.across.outcome == "not enough windows"
                                                        else _seen_from(w.across.winner, pipeline))
            f = w.fluctuation
            if f is not None:
                tags[f"fluctuation.{other}.{metric}"] = f"changed at {f.left_at}" if f.fired else "stable"
            for win in w.windows:
                diff, low, high = ((win.difference, win.ci_low, win.ci_high) if first else
                                   (-win.difference, -win.ci_high, -win.ci_low))
                metrics += [(f"{name}.{other}.{metric}", float(value), win.index) for name, value in
                            (("window_diff", diff), ("window_ci_low", low), ("window_ci_high", high)) if _finite(value)]
        for metric, v in pv.verdicts.items():
            tags[f"verdict.{other}.{metric}"] = _seen_from(v.winner, pipeline)
            diff, low, high = (v.difference, v.ci_low, v.ci_high) if first else (-v.difference, -v.ci_high, -v.ci_low)
            values = {"diff": diff, "ci_low": low, "ci_high": high, "seeds_needed": v.seeds_needed.n,
                      # a time-series detail, not the verdict's p-value: it ignores persistent seed offsets
                      "timeseries_dm_p": v.diebold_mariano.p_value}
            metrics += [(f"{name}.{other}.{metric}", float(value), 0) for name, value in values.items() if _finite(value)]
    return tags, metrics


def _seen_from(winner: str | None, pipeline: str) -> str:
    """``better``, ``worse`` or ``undetermined``: a verdict as ``pipeline`` reads it."""
    return "undetermined" if winner is None else "better" if winner == pipeline else "worse"


def _consistency_of(w: Any, pipeline: str) -> str:
    """The consistency line as ``pipeline`` reads it: ``"wd0 better in 1 of 4 refit windows, worse in 0, ..."``."""
    better, worse, undetermined = w.counts()
    if pipeline != w.a:
        better, worse = worse, better
    blocks = "refit windows" if w.blocks == "windows" else "months"
    return (f"{pipeline} better in {better} of {len(w.windows)} {blocks}, worse in {worse}, "
            f"undetermined in {undetermined}")


def _warning_tags(comparison: StoreComparison, pipeline: str) -> dict[str, str]:
    mine = [w for w in comparison.warnings if pipeline in w.pipelines]
    tags = {f"warning.{w.kind}": w.message[:TAG_VALUE_LIMIT] for w in mine}
    tags["rc.warnings"] = ",".join(dict.fromkeys(w.kind for w in mine)) or "none"
    return tags


def _verdict_note(comparison: StoreComparison, pipeline: str | None = None) -> str:
    """The verdict table in Markdown (MLflow shows ``mlflow.note.content`` as the run's description)."""
    rows = [r for r in comparison.verdict_rows() if pipeline is None or pipeline in r["pair"].split(" vs ")]
    if not rows:
        return ""
    table = format_table([[r["pair"], r["metric"], r["verdict"], r["difference"], r["interval"], r["beside"],
                           r["seeds"]] for r in rows],
                         ["pair", "metric", "verdict", "difference", "interval",
                          verdict_columns(comparison.target)["beside"], "seeds to decide"], style="markdown")
    when = [r for r in comparison.when_rows() if pipeline is None or pipeline in r["pair"].split(" vs ")]
    when_table = format_table([[r["pair"], r["metric"], r["windows"], r["across"], r["fluctuation"]] for r in when],
                              ["pair", "metric", "per window (Holm)", "across windows", "fluctuation"],
                              style="markdown") if when else ""
    return (f"**{comparison.headline()}**\n\nVerdicts {comparison.question.describe()}, {comparison.claim()} "
            f"(difference = first minus second pipeline):\n\n{table}"
            + (f"\n\nWhen was each better?\n\n{when_table}" if when_table else ""))


def _summary_metrics(scores: StoreScores, comparison: StoreComparison | None, pipeline: str,
                     p_runs: pd.DataFrame) -> list[tuple[str, float, int]]:
    """Mean and std over seeds per metric: ``compare``'s summary when given (the numbers it printed), else the runs'."""
    out = [("n_seeds", float(len(p_runs)), 0)]
    if comparison is not None:
        row = comparison.summary[comparison.summary["pipeline"] == pipeline]
        if not row.empty:
            rec = row.iloc[0].to_dict()
            return out + [(k, float(v), 0) for k, v in rec.items()
                          if k.endswith(("_mean", "_std")) or k in ("std_ratio", "seed_budget") if _finite(v)]
    for metric in ALL_METRICS:
        values = p_runs[metric].astype(float)
        out.append((f"{metric}_mean", float(values.mean()), 0))
        if len(values) > 1:
            out.append((f"{metric}_std", float(values.std(ddof=1)), 0))
    return [m for m in out if _finite(m[1])]


def _comparison_spec(comparison: StoreComparison, report: Mapping[str, Path] | None,
                     scoring: tuple[dict[str, str], str], comparison_store: Path | None = None,
                     race: RaceRecord | None = None) -> _Spec:
    """The experiment-level run of the comparison: its settings, ``comparison.json`` and the report files; with a
    raced sweep (``race``, from ``comparison_store``'s ``race.json``), the race: its question and rule as params,
    its looks as metrics (step = look), its best set and eliminations as tags, ``race.json``."""
    names = list(comparison.summary["pipeline"])
    data = comparison.to_dict()
    files = sorted({Path(p) for p in (report or {}).values() if Path(p).is_file()})
    settings = {**comparison.question.to_dict(), **comparison.resampling.to_dict()}   # compare.target, compare.n_boot ...
    content = stable_hash({"comparison": data, "files": [(f.name, hashlib.sha256(f.read_bytes()).hexdigest())
                                                         for f in files]})

    def artifacts(client: Any, run_id: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "comparison.json"
            path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
            client.log_artifact(run_id, str(path))
        for f in files:
            client.log_artifact(run_id, str(f), artifact_path="report")
        if race is not None and comparison_store is not None and (comparison_store / RACE_FILE).is_file():
            client.log_artifact(run_id, str(comparison_store / RACE_FILE))

    tags, key = scoring
    path = read_path(comparison_store) if comparison_store is not None else None
    metrics = [(k, v, 0) for k, v in (path.metrics() if path else {}).items()]
    if path:   # a run --until-decided: where and why each pair stopped, compute against the full grid
        tags = {**tags, **path.tags()}
        content = stable_hash({"content": content, "sequential": path.to_dict()})
    pairs = [f"{p.better} vs {p.worse}" for p in comparison.pairs]
    params = {**{f"compare.{k}": _param_text(v) for k, v in settings.items()},
              "compare.pipelines": _param_text(names), "compare.pairs": _param_text(pairs)}
    history = None
    if race is not None:   # a sweep --until-decided raced: the race look by look
        identity = race.identity()
        history = stable_hash(identity)[:16]
        content = stable_hash({"content": content, "race": identity})
        params.update({k: _param_text(v) for k, v in race.params().items()})
        tags = {**tags, **race.tags()}
        metrics += race.metrics()
    return _Spec(
        key=f"comparison|{stable_hash({'pipelines': names, **settings})[:12]}|{key}",
        name=f"comparison: {', '.join(names)}" if len(names) <= 4 else f"comparison: {len(names)} pipelines",
        level="comparison", parent_id=None, params=params,
        metrics=[(_key_part(k), v, step) for k, v, step in metrics if _finite(v)], version=content,
        tags={**{_key_part(k): v[:TAG_VALUE_LIMIT] for k, v in tags.items()},
              "rc.warnings": ",".join(dict.fromkeys(w.kind for w in comparison.warnings)) or "none",
              NOTE_TAG: _verdict_note(comparison)[:TAG_VALUE_LIMIT]},
        artifacts=artifacts, history=history)


# --------------------------------------------------------------------------- units
def _signal_frames(store: Store, key: UnitKey, side: Sidecar) -> dict[str, pd.DataFrame]:
    """``pred.pkl`` and ``label.pkl`` of a unit as Qlib's ``SignalRecord`` writes them (label only when raw is stored)."""
    frame = read_unit(store, key, sidecar=side)
    index = pd.MultiIndex.from_arrays([pd.DatetimeIndex(frame["datetime"]), frame["instrument"].astype(str)],
                                      names=["datetime", "instrument"])
    out = {"pred.pkl": pd.DataFrame({"score": frame["prediction"].to_numpy()}, index=index)}
    raw = side.columns(store.manifest.stored_label_kind).get("raw")
    if raw is not None:
        column = frame[raw] if raw in frame else read_unit(store, key, column=raw, sidecar=side)["label"]
        out["label.pkl"] = pd.DataFrame({LABEL_COLUMN: column.to_numpy()}, index=index)
    return out


def _recorder_link(side: Sidecar) -> dict[str, str]:
    """Tags naming the unit's Qlib recorder when it holds the unit's ``pred.pkl`` (its SignalRecord ran)."""
    rec = side.qlib_recorder
    if not rec.get("recorder_id") or "SignalRecord" not in (rec.get("records") or []):
        return {}
    return {"rc.qlib_recorder_id": str(rec["recorder_id"]), "rc.qlib_experiment": str(rec.get("experiment_name", "")),
            "rc.qlib_experiment_id": str(rec.get("experiment_id", ""))}


def _unit_artifacts(store: Store, key: UnitKey, side: Sidecar, link: Mapping[str, str], same_db: bool,
                    experiment: str) -> Callable[[Any, str], None]:
    """What a window run carries: a link to the unit's Qlib recorder (and back), else ``pred.pkl`` / ``label.pkl``."""
    def log(client: Any, run_id: str) -> None:
        if link:
            if same_db:
                try:
                    client.set_tag(link["rc.qlib_recorder_id"], "rc.window_run_id", run_id)
                    client.set_tag(link["rc.qlib_recorder_id"], "rc.window_experiment", experiment)
                except Exception as exc:  # noqa: BLE001 - a recorder deleted by hand must not stop tracking
                    warnings.warn(f"tracking: could not tag the Qlib recorder {link['rc.qlib_recorder_id']} of "
                                  f"{key.slug()}: {type(exc).__name__}: {exc}", stacklevel=2)
            return
        with tempfile.TemporaryDirectory() as tmp:
            for name, frame in _signal_frames(store, key, side).items():
                frame.to_pickle(Path(tmp) / name)
                client.log_artifact(run_id, str(Path(tmp) / name))
    return log


def _window_spec(ctx: _Context, pipeline: str, config_hash: str, seed: int, window: Window,
                 periods: pd.DataFrame, parent_id: str) -> _Spec:
    index = window.index
    key = UnitKey(pipeline, seed, index)
    side = ctx.store.sidecar(key) or Sidecar()
    predictions = ctx.store.unit_paths(key).parquet.relative_to(ctx.store.root).as_posix()
    params = {"pipeline": pipeline, "seed": str(seed), "window": str(index), "predictions": predictions}
    for segment in ("fit", "train", "valid", "test"):
        bounds = getattr(window, segment)
        if bounds is None:  # e.g. no validation segment (valid_months: 0)
            params[f"{segment}_start"] = params[f"{segment}_end"] = "none"
            continue
        params[f"{segment}_start"], params[f"{segment}_end"] = bounds.as_tuple()   # as the manifest records them
    if side.checkpoint:
        params["checkpoint"] = Path(side.checkpoint).as_posix()   # the sidecar records it relative to the store
    metrics = [(m, float(v), 0) for m, v in (("rows", side.rows), ("ql", side.ql)) if _finite(v)]
    if _finite(side.seconds):
        metrics.append(("seconds", float(side.seconds), 0))   # type: ignore[arg-type]
    link = _recorder_link(side)
    same_db = link != {} and sqlite_path(str(side.qlib_recorder.get("uri", ""))) == sqlite_path(ctx.uri)
    return _Spec(
        span=_span([side]),
        key=f"{pipeline}|{config_hash}|seed{seed}|w{index:02d}", name=f"{pipeline} seed{seed} w{index:02d}",
        level="window", parent_id=parent_id, params=params,
        metrics=metrics + _month_series(_window_of(periods, window)),
        tags={"rc.pipeline": pipeline, "rc.config_hash": config_hash, "rc.seed": str(seed), "rc.window": str(index),
              "rc.predictions": predictions, **link},
        version=f"{side.finished_at or ''}|{ctx.scoring_key}",
        artifacts=_unit_artifacts(ctx.store, key, side, link, same_db, ctx.experiment))


# --------------------------------------------------------------------------- pipelines and seeds
@dataclass(frozen=True)
class _Context:
    """What every run of one logging shares."""

    store: Store
    uri: str
    experiment: str
    scores: StoreScores
    comparison: StoreComparison | None
    periods: pd.DataFrame
    scoring_tags: dict[str, str]
    scoring_key: str
    race: RaceRecord | None = None   # the store's race.json (a sweep --until-decided raced), read once


def _pipeline_spec(ctx: _Context, pipeline: str, entry: PipelineRecord, p_runs: pd.DataFrame,
                   span: tuple[int, int] | None) -> _Spec:
    config_hash = entry.config_hash
    tags = {"rc.pipeline": pipeline, "rc.config_hash": config_hash, **ctx.scoring_tags}
    metrics = _summary_metrics(ctx.scores, ctx.comparison, pipeline, p_runs)
    judged = ""
    standing = ctx.race.standing(pipeline) if ctx.race is not None else ""
    if standing:   # the race's word on this configuration (kept, or the look that eliminated it)
        tags.update({"rc.race": standing, "rc.race_seeds": str(int(ctx.race.race.seeds_used[pipeline]))})
        judged = stable_hash({"tags": tags, "metrics": metrics})[:8]
    if ctx.comparison is not None:
        verdict_tags, verdict_metrics = _verdict_entries(ctx.comparison, pipeline)
        tags.update({**verdict_tags, **_warning_tags(ctx.comparison, pipeline)})
        note = _verdict_note(ctx.comparison, pipeline)
        if note:
            tags[NOTE_TAG] = note[:TAG_VALUE_LIMIT]
        metrics += verdict_metrics
        judged = stable_hash({"tags": tags, "metrics": metrics})[:8]
    params = config_params(ctx.store.manifest, pipeline)
    params.update({"schedule.mode": str(entry.mode), "schedule.windows": str(len(entry.window_records))})
    params.update(_backtest_params(ctx.comparison, pipeline))
    seeds = [int(s) for s in p_runs["seed"]]
    return _Spec(key=f"{pipeline}|{config_hash}", name=pipeline, level="pipeline", parent_id=None, params=params,
                 metrics=metrics, tags=tags, version=",".join(map(str, seeds)) + f"|{ctx.scoring_key}|{judged}",
                 span=span)


def _backtest_params(comparison: StoreComparison | None, pipeline: str) -> dict[str, str]:
    """What the pipeline run's backtest figures are about (its ``information_ratio_mean`` ... metrics): strategy,
    benchmark, cost model, accumulation mode and annualisation."""
    p = comparison.portfolio if comparison is not None else None
    if p is None or pipeline not in p.specs:
        return {}
    spec = p.specs[pipeline]
    return {"backtest.strategy": spec.get("strategy", "?")[:TAG_VALUE_LIMIT],
            "backtest.benchmark": spec.get("benchmark", "?")[:TAG_VALUE_LIMIT],
            "backtest.cost": spec.get("cost", "?")[:TAG_VALUE_LIMIT], "backtest.mode": p.mode,
            "backtest.annualization_days": f"{p.n:g}"}


def _seed_spec(ctx: _Context, pipeline: str, config_hash: str, row: Any, done: list, parent_id: str,
               span: tuple[int, int] | None) -> _Spec:
    seed = int(row.seed)
    s_periods = ctx.periods[(ctx.periods["pipeline"] == pipeline) & (ctx.periods["seed"] == seed)]
    seed_metrics = [(m, float(getattr(row, m)), 0) for m in (*ALL_METRICS, "n_all", "n_scored")
                    if _finite(getattr(row, m, None))]
    params = {"pipeline": pipeline, "seed": str(seed), **config_params(ctx.store.manifest, pipeline, seed=seed)}
    return _Spec(
        key=f"{pipeline}|{config_hash}|seed{seed}", name=f"{pipeline} seed{seed}", level="seed", parent_id=parent_id,
        params=params, metrics=seed_metrics + _month_series(s_periods),
        tags={"rc.pipeline": pipeline, "rc.config_hash": config_hash, "rc.seed": str(seed), **ctx.scoring_tags},
        version=",".join(str(w.index) for w in done) + f"|{ctx.scoring_key}", span=span)


def _log_pipeline(ctx: _Context, logger: _Logger, pipeline: str, entry: PipelineRecord) -> None:
    config_hash = entry.config_hash
    p_runs = ctx.scores.runs[ctx.scores.runs["pipeline"] == pipeline].sort_values("seed")
    if p_runs.empty:
        return
    windows = entry.windows
    complete = set(ctx.store.complete_units(pipeline)[0])
    done_of = {int(row.seed): [w for w in windows if UnitKey(pipeline, int(row.seed), w.index) in complete]
               for row in p_runs.itertuples(index=False)}
    sides = {seed: [ctx.store.sidecar(UnitKey(pipeline, seed, w.index)) for w in done] for seed, done in done_of.items()}
    parent_id = logger.ensure(_pipeline_spec(ctx, pipeline, entry, p_runs, _span(s for v in sides.values() for s in v)))
    for row in p_runs.itertuples(index=False):
        seed = int(row.seed)
        done = done_of[seed]
        seed_id = logger.ensure(_seed_spec(ctx, pipeline, config_hash, row, done, parent_id, _span(sides[seed])))
        s_periods = ctx.periods[(ctx.periods["pipeline"] == pipeline) & (ctx.periods["seed"] == seed)]
        for window in done:
            _log_window(ctx, logger, pipeline, config_hash, seed, window, s_periods, seed_id)


def _log_window(ctx: _Context, logger: _Logger, pipeline: str, config_hash: str, seed: int,
                window: Window, periods: pd.DataFrame, parent_id: str) -> None:
    logger.ensure(_window_spec(ctx, pipeline, config_hash, seed, window, periods, parent_id))


def _scoring_tags(scores: StoreScores) -> tuple[dict[str, str], str]:
    """Tags naming the rule and label of ``scores``, and a short key of both (part of the runs' version)."""
    tags = {"rc.calibration": scores.calibration.describe(), "rc.label": scores.label.describe()}
    key = stable_hash({"calibration": scores.calibration.to_dict(), "label": scores.label.to_dict()})[:8]
    return tags, key


def _store_tag(store: Path, path_root: str | os.PathLike | None) -> str:
    """The store as logged: relative to ``path_root`` (default: the directory holding it, i.e. its name)."""
    root = Path(path_root).resolve() if path_root is not None else store.parent
    return Path(os.path.relpath(store, root)).as_posix()


def _log_scores(ctx: _Context, report: Mapping[str, Path] | None, path_root: str | os.PathLike | None,
                repair: DbRepair | None) -> TrackingSummary:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=ctx.uri)
    summary = TrackingSummary(tracking_uri=ctx.uri, experiment_id=_experiment_id(client, ctx.experiment, ctx.store),
                              repair=repair)
    logger = _Logger(client, summary.experiment_id, ctx.store.root, summary, _store_tag(ctx.store.root, path_root))
    if ctx.comparison is not None and len(ctx.comparison.summary):
        logger.ensure(_comparison_spec(ctx.comparison, report, (ctx.scoring_tags, ctx.scoring_key), ctx.store.root,
                                       race=ctx.race))
    for pipeline, entry in ctx.store.pipelines.items():
        _log_pipeline(ctx, logger, pipeline, entry)
    own_db = sqlite_path(ctx.uri) is not None and sqlite_path(ctx.uri).resolve() == ctx.store.layout.tracking_db.resolve()
    _retire_stale(client, logger, ctx.store, recorders=own_db)
    return summary


# --------------------------------------------------------------------------- entry points
def track_store(
    scores: StoreScores,
    *,
    comparison: StoreComparison | None = None,
    report: Mapping[str, Path] | None = None,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    path_root: str | os.PathLike | None = None,
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
    comparison : StoreComparison, optional
        What ``compare`` computed from these scores (:func:`~rolling_calib.analysis.comparison.compare_store`):
        the verdicts, intervals, IC and warnings go on the pipeline runs, ``comparison.json`` on a
        comparison run. Logged as it is, never recomputed.
    report : mapping, optional
        The files :func:`~rolling_calib.reporting.document.write_report` wrote (name -> path): artifacts of
        the comparison run, under ``report/``.
    tracking_uri : str, optional
        MLflow tracking URI; default :func:`default_tracking_uri` of the store.
    experiment : str, optional
        MLflow experiment name; default the store's ``experiment_name``.
    path_root : path, optional
        ``rc.store`` is the store relative to this directory (default: the directory holding the store).
    lock_timeout : float
        Seconds to wait for another process logging into the same SQLite database.

    Returns
    -------
    TrackingSummary
    """
    return _track(scores, comparison=comparison, report=report, tracking_uri=tracking_uri, experiment=experiment,
                  path_root=path_root, lock_timeout=lock_timeout, repairs=[])


def _track(scores: StoreScores, *, comparison: StoreComparison | None, report: Mapping[str, Path] | None,
           tracking_uri: str | None, experiment: str | None, path_root: str | os.PathLike | None,
           lock_timeout: float, repairs: list[DbRepair]) -> TrackingSummary:
    """:func:`track_store`; a repair of the database is appended to ``repairs`` before logging starts."""
    store = Store.open(Path(scores.store).resolve())
    uri = tracking_uri or store.layout.tracking_uri
    name = experiment or store.manifest.experiment_name or "rolling-calib"
    periods = scores.periods.sort_values(["pipeline", "seed", "start"], kind="stable").reset_index(drop=True)
    periods["step"] = periods.groupby(["pipeline", "seed"]).cumcount()
    tags, key = _scoring_tags(scores)
    ctx = _Context(store=store, uri=uri, experiment=name, scores=scores, comparison=comparison,
                   periods=periods, scoring_tags=tags, scoring_key=key, race=read_race(store.root))
    for name in ("mlflow", "alembic"):   # their INFO lines (creating tables, migrations) are not the user's business
        logging.getLogger(name).setLevel(max(logging.getLogger(name).getEffectiveLevel(), logging.WARNING))
    db = sqlite_path(uri)
    with tracking_db_lock(db, timeout=lock_timeout) if db is not None else contextlib.nullcontext():
        repair = repair_tracking_db(db) if db is not None else None
        if repair is not None:
            repairs.append(repair)
        if db is not None and db.resolve() == store.layout.tracking_db:   # a moved or copied store: its own files
            repoint_store_db(store.root, locked=True)
        return _log_scores(ctx, report, path_root, repair)


def log_store(scores: StoreScores, *, tracking_uri: str, experiment: str | None = None,
              comparison: StoreComparison | None = None, report: Mapping[str, Path] | None = None,
              path_root: str | os.PathLike | None = None) -> None:
    """Log a store's scores (and comparison, report) to MLflow (see the module docstring); re-logging adds only what is new.

    Parameters
    ----------
    scores : StoreScores
        The scores of a store written by ``rolling-calib run`` (:func:`~rolling_calib.analysis.scoring.score_store`).
    tracking_uri : str
        E.g. ``sqlite:///runs/demo/mlflow.db`` (see :func:`default_tracking_uri`).
    experiment : str, optional
        MLflow experiment name (default: the store's experiment name).
    comparison, report, path_root :
        See :func:`track_store`.

    Warns
    -----
    TrackingRepairWarning
        The SQLite database was unusable (e.g. its creation was interrupted) and was moved
        aside or upgraded before logging; the message names both files.
    """
    summary = track_store(scores, comparison=comparison, report=report, tracking_uri=tracking_uri,
                          experiment=experiment, path_root=path_root)
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
    comparison: StoreComparison | None = None,
    report: Mapping[str, Path] | None = None,
    tracking_uri: str | None = None,
    experiment: str | None = None,
    path_root: str | os.PathLike | None = None,
    lock_timeout: float = 300.0,
) -> TrackingOutcome:
    """:func:`track_store` of ``scores`` (and ``comparison``, ``report``) that never raises: tracking can never fail a run.

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
        summary = _track(scores, comparison=comparison, report=report, tracking_uri=uri, experiment=experiment,
                         path_root=path_root, lock_timeout=lock_timeout, repairs=repairs)
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
