"""The per-seed backtests of a run: the workflow's backtest over each seed's joined windows, stored beside the units.

Once every window of a (pipeline, seed) is complete, its predictions are joined over the evaluated
span (as Qlib's ``RollingEnsemble`` joins a rolling run's) and the pipeline's backtest
(:class:`~rolling_calib.qlib_adapter.backtest.BacktestSpec`, resolved at plan time) runs once on
them, from the first to the last test session of the schedule. The daily report goes to
``STORE/backtests/<pipeline>/seed<k>.parquet`` (atomic; its SHA-256 in the sidecar, checked by the
reader), the sidecar ``seed<k>.json`` last.

A seed's backtest is *complete* (:func:`backtest_status`) when its sidecar names

* the pipeline's **backtest hash**: the resolved backtest settings (strategy, executor, exchange,
  benchmark, report frequency) and the data identity, apart from the units' config hash; and
* the **inputs** it ran on: the pipeline's config hash and the SHA-256 of every unit file of the seed,

and its Parquet file matches its checksum. A changed backtest setting (``--set
port_analysis_config.strategy.kwargs.topk=5``) changes the backtest hash only: the units stay,
the backtests re-run (*stale*); a retrained unit changes the inputs (*outdated*). A damaged file is
*corrupt* and recomputed.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rolling_calib.core.fingerprint import stable_hash
from rolling_calib.execution import store as st
from rolling_calib.execution.manifest import ManifestFieldError
from rolling_calib.execution.units import UnitKey

__all__ = ["BACKTEST_FORMAT", "BacktestError", "BacktestSidecar", "BacktestStatus", "BacktestSummary", "backtest_hash",
           "backtest_inputs", "backtest_status", "run_backtests"]

#: Version of what a backtest file holds; part of the backtest hash (a new layout re-runs the backtests only).
BACKTEST_FORMAT = 1


class BacktestError(RuntimeError):
    """A seed's backtest failed (the message names the pipeline, seed, the record's key and the cause)."""


def backtest_hash(spec: Mapping[str, Any], data: Mapping[str, Any]) -> str:
    """Hash of a pipeline's backtest settings: the resolved config and report frequency, and the data identity.

    >>> backtest_hash({"config": {"strategy": {"kwargs": {"topk": 5}}}, "freq": "1day"}, {"files": "ab"}) != \\
    ...     backtest_hash({"config": {"strategy": {"kwargs": {"topk": 6}}}, "freq": "1day"}, {"files": "ab"})
    True
    """
    data_id = {k: v for k, v in data.items() if k != "path"}
    return stable_hash({"config": spec.get("config"), "freq": spec.get("freq"), "data": data_id,
                        "format": BACKTEST_FORMAT})


def backtest_inputs(store: str | Path, pipeline: str, seed: int, windows: Sequence[int], config_hash: str
                    ) -> dict[str, Any]:
    """What a seed's backtest reads: the pipeline's config hash and each window's unit checksum (None: no unit)."""
    units = {}
    for w in windows:
        side = st.sidecar(store, UnitKey(pipeline, int(seed), int(w)))   # typed: the unit's Sidecar, None if absent
        units[f"w{int(w):02d}"] = (None if side is None or not side.raw else
                                   side.sha256 or f"{side.config_hash}/{side.rows}")
    return {"config_hash": config_hash, "units": units}


def _optional_text(data: Mapping[str, Any], key: str, source: Path) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ManifestFieldError(f"{source}: {key}: expected a string, found {repr(value)[:80]}")
    return value


@dataclass(frozen=True)
class BacktestSidecar:
    """A seed's backtest sidecar (``seed<k>.json``, written by :func:`_write`), typed.

    ``backtest_hash``: the settings it ran with (:func:`backtest_hash`); ``inputs``: the hash of what it ran on
    (:func:`backtest_inputs`); ``sha256``: its Parquet file's checksum; ``rows``: days reported. ``raw`` keeps the
    JSON object (its other fields: units, dates, the strategy in words, seconds).
    """

    backtest_hash: str | None = None
    inputs: str | None = None
    sha256: str | None = None
    rows: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: Path) -> BacktestSidecar:
        """The typed sidecar; ``ManifestFieldError`` naming the file, field, expected and found for a wrong type.

        >>> BacktestSidecar.from_dict({"backtest_hash": "h", "inputs": "i", "sha256": "s", "rows": 3},
        ...                           source=Path("seed0.json")).rows
        3
        >>> BacktestSidecar.from_dict({"sha256": 7}, source=Path("seed0.json"))
        Traceback (most recent call last):
        ...
        rolling_calib.execution.manifest.ManifestFieldError: seed0.json: sha256: expected a string, found 7
        """
        rows = data.get("rows")
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int)):
            raise ManifestFieldError(f"{source}: rows: expected an integer, found {repr(rows)[:80]}")
        return cls(backtest_hash=_optional_text(data, "backtest_hash", source),
                   inputs=_optional_text(data, "inputs", source), sha256=_optional_text(data, "sha256", source),
                   rows=rows, raw=data)


@dataclass(frozen=True)
class BacktestStatus:
    """``state``: ``complete``, ``missing``, ``stale`` (another backtest setting), ``outdated`` (other units) or
    ``corrupt`` (the file does not match its checksum); the sidecar; why not complete."""

    pipeline: str
    seed: int
    state: str
    sidecar: BacktestSidecar | None
    why: str = ""

    @property
    def complete(self) -> bool:
        return self.state == "complete"


def _read_sidecar(path: Path) -> BacktestSidecar | None:
    """The typed backtest sidecar at ``path`` (None: none written); damage raises naming the file and the fix."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise st.CorruptStoreFileError(f"{path}: corrupt backtest sidecar ({getattr(exc, 'msg', exc)}); delete "
                                       f"{path.with_suffix('.*')} and re-run 'rolling-calib run' to redo it") from exc
    if not isinstance(data, dict):
        raise st.CorruptStoreFileError(f"{path}: corrupt backtest sidecar (expected a JSON object)")
    return BacktestSidecar.from_dict(data, source=path)


def backtest_status(store: str | Path, pipeline: str, seed: int, *, expected_hash: str,
                    inputs: Mapping[str, Any], verify: bool = True) -> BacktestStatus:
    """The :class:`BacktestStatus` of one seed's backtest against the pipeline's backtest hash and its units.

    ``verify``: check the Parquet file's bytes against the sidecar's SHA-256 (the reader checks them as it reads).
    """
    parquet, sidecar = st.backtest_paths(store, pipeline, seed)
    side = _read_sidecar(sidecar)
    where = f"{store}: backtest {pipeline}/seed{seed}"
    if side is None or not parquet.is_file():
        return BacktestStatus(pipeline, seed, "missing", side, f"{where} is missing (run 'rolling-calib run' to "
                                                                "backtest the seeds whose windows are complete)")
    if side.backtest_hash != expected_hash:
        return BacktestStatus(pipeline, seed, "stale", side, f"{where} is stale (backtest hash "
                              f"{side.backtest_hash}, expected {expected_hash}: a backtest setting changed)")
    if side.inputs != stable_hash(dict(inputs)):
        return BacktestStatus(pipeline, seed, "outdated", side, f"{where} is outdated (its units were retrained "
                                                                "since it ran)")
    if verify:
        found = st.file_sha256(parquet)
        if found != side.sha256:
            return BacktestStatus(pipeline, seed, "corrupt", side,
                                  f"{parquet}: corrupt backtest file: its SHA-256 is {found[:16]}..., the sidecar "
                                  f"records {str(side.sha256)[:16]}...; re-run 'rolling-calib run' to redo it")
    return BacktestStatus(pipeline, seed, "complete", side)


@dataclass
class BacktestSummary:
    """What :func:`run_backtests` did: backtests run, already complete, and the seconds they took."""

    ran: list[tuple[str, int]] = field(default_factory=list)
    skipped: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"backtests_ran": [f"{p}/seed{s}" for p, s in self.ran], "backtests_complete": self.skipped,
                "backtest_seconds": round(self.seconds, 3)}


def run_backtests(plan: Any, *, pipelines: Sequence[str] | None = None, seeds: Sequence[int] | None = None,
                  progress: bool = False) -> BacktestSummary:
    """Backtest every (pipeline, seed) of ``plan`` whose windows are complete and whose backtest is not.

    ``plan`` is a :class:`~rolling_calib.execution.planning.RunPlan` (its pipelines' ``backtest``
    and ``backtest_hash``; pipelines without one are skipped). The caller holds the store's lock.

    Raises
    ------
    BacktestError
        Qlib's backtest failed for a seed (its units stay in the store; re-running retries it).
    """
    from rolling_calib.execution.reader import read_predictions
    from rolling_calib.qlib_adapter.backtest import BacktestSpec, run_backtest

    summary = BacktestSummary()
    t0 = time.perf_counter()
    windows = [w.index for w in plan.windows]
    start, end = plan.windows[0].test.start.normalize(), plan.windows[-1].test.end.normalize()
    for p in plan.pipelines:
        if p.backtest is None or (pipelines is not None and p.name not in pipelines):
            continue
        spec = BacktestSpec.from_dict(p.backtest)
        for seed in plan.seeds if seeds is None else seeds:
            if not all(st.unit_status(plan.store, UnitKey(p.name, seed, w), p.config_hash, verify=False).complete
                       for w in windows):
                continue
            inputs = backtest_inputs(plan.store, p.name, seed, windows, p.config_hash)
            status = backtest_status(plan.store, p.name, seed, expected_hash=p.backtest_hash, inputs=inputs)
            if status.complete:
                summary.skipped += 1
                continue
            if progress:
                print(f"backtest: {p.name} seed {seed}: {spec.describe()} over {start.date()}..{end.date()}"
                      + (f" ({status.state})" if status.state != "missing" else ""), file=sys.stderr, flush=True)
            began = time.perf_counter()
            predictions = read_predictions(plan.store, p.name, seed)
            try:
                report = run_backtest(plan.qlib_init, predictions, spec, start=start, end=end)
            except Exception as exc:  # noqa: BLE001 -- Qlib's errors vary; name the seed, the record and the cause
                text = " ".join(str(exc).split())[:300] or type(exc).__name__
                raise BacktestError(f"backtest of {p.name}/seed{seed} ({spec.key}: {spec.describe()}) failed: "
                                    f"{type(exc).__name__}: {text}; its units are kept in {plan.store}") from exc
            _write(plan.store, p.name, seed, report, spec=spec, expected_hash=p.backtest_hash, inputs=inputs,
                   seconds=time.perf_counter() - began)
            summary.ran.append((p.name, int(seed)))
    summary.seconds = time.perf_counter() - t0
    return summary


def _write(store: Path, pipeline: str, seed: int, report: pd.DataFrame, *, spec: Any, expected_hash: str,
           inputs: Mapping[str, Any], seconds: float) -> None:
    """The report's Parquet file, then its sidecar (last: the commit marker)."""
    parquet, sidecar = st.backtest_paths(store, pipeline, seed)
    sha = st.write_unit_parquet(parquet, report).sha256   # (a backtest's sidecar records the SHA-256 only)
    st.atomic_write_json(sidecar, {
        "pipeline": pipeline, "seed": int(seed), "backtest_hash": expected_hash, "inputs": stable_hash(dict(inputs)),
        "units": dict(inputs["units"]), "config_hash": inputs["config_hash"], "sha256": sha, "rows": int(len(report)),
        "start": str(report["date"].min().date()) if len(report) else None,
        "end": str(report["date"].max().date()) if len(report) else None,
        "spec": spec.describe(), "key": spec.key, "seconds": round(float(seconds), 3),
        "finished_at": pd.Timestamp.now(tz="UTC").isoformat()})
