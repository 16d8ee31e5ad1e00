"""Loss panels that grow by the new seeds only: each run of a store scored once, look after look.

A run ``--until-decided`` (:mod:`rolling_calib.experiment.until_decided`) looks at its pairs after
every batch of seeds. Each look needs every pipeline's :class:`~rolling_calib.core.verdict.LossPanel`
of its first ``n`` seeds. :class:`GrowingPanels` reads and scores a run (pipeline, seed) the first
time a look needs it (:func:`rolling_calib.analysis.scoring.score_run`, the scoring of
:func:`~rolling_calib.analysis.scoring.score_store`), keeps its one-seed panel
(:func:`~rolling_calib.analysis.verdicts.loss_panel` of its per-day sums), and builds a look's panel
from the kept rows: a look costs the new batch's runs, not the whole store again. A panel is the
one :func:`~rolling_calib.analysis.verdicts.loss_panel` gives on the scores of the same seeds (rows
in the order asked for; the time units those seeds have, in date order), so every verdict on it is
the same (``bench/bench_until_decided_looks.py`` measures both ways and checks it).

The label kind is resolved once, over every pipeline given (as ``compare`` resolves it for the
store), and the store's manifest is read again whenever a run is first scored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from rolling_calib.analysis.scoring import score_run
from rolling_calib.analysis.verdicts import VERDICT_METRICS, loss_panel
from rolling_calib.core.calibration import Calibration
from rolling_calib.core.ranking_ic import PreparedLabels
from rolling_calib.core.verdict import LossPanel
from rolling_calib.execution import store as st

__all__ = ["GrowingPanels"]


class GrowingPanels:
    """Each pipeline's loss panel of the seeds asked for, every run read and scored once.

    Parameters
    ----------
    store : path
        The result store (being written by the run).
    pipelines : sequence of str
        The run's pipelines (the label kind is resolved over all of them).
    metric : {"ql", "cql", "ic", "rank_ic"}
        The verdict metric (:data:`~rolling_calib.analysis.verdicts.VERDICT_METRICS`).
    calibration : Calibration
        The rule CQL is scored with.
    label : str or None
        The label choice (``raw``, ``learn``, ``auto``; None: the store's ``rolling.label``).

    Attributes
    ----------
    scored : int
        Runs read and scored so far.
    """

    def __init__(self, store: str | Path, *, pipelines: Sequence[str], metric: str, calibration: Calibration,
                 label: str | None = None) -> None:
        if metric not in VERDICT_METRICS:
            raise ValueError(f"metric: expected one of {', '.join(VERDICT_METRICS)}, found {metric!r}")
        self.store, self.metric, self.calibration = Path(store), metric, calibration
        self.kind = st.Store.open(self.store).label_kind(list(pipelines), label)
        self._rows: dict[tuple[str, int], LossPanel | None] = {}
        self._cache: dict[str, PreparedLabels] = {}
        self.scored = 0

    def _row(self, name: str, seed: int, store: st.Store | None) -> tuple[LossPanel | None, st.Store | None]:
        """The one-seed panel of run (``name``, ``seed``), scored now if it was not before (``store``: the store
        opened for this look, else opened now: the run writes its manifest between looks)."""
        key = (name, int(seed))
        if key not in self._rows:
            store = store if store is not None else st.Store.open(self.store)
            run = score_run(store, name, int(seed), calibration=self.calibration, kind=self.kind, cache=self._cache)
            self._rows[key] = loss_panel(run.days, name, self.metric)
            self.scored += 1
        return self._rows[key], store

    def panels(self, wanted: Mapping[str, Sequence[int]]) -> dict[str, LossPanel]:
        """``{name: panel}`` of the seeds ``wanted[name]`` (rows in that order), scoring the runs not seen before.

        Raises
        ------
        ValueError
            A run has no usable day of the metric (named), or a unit is missing or stale (the reader's message).
        """
        out = {}
        store = None
        for name, seeds in wanted.items():
            rows = []
            for seed in seeds:
                row, store = self._row(name, seed, store)
                rows.append(row)
            missing = [int(s) for s, r in zip(seeds, rows) if r is None]
            if missing:
                raise ValueError(f"{name} has no scored {self.metric} for seed(s) {', '.join(map(str, missing))}")
            out[name] = _stack(rows)
        return out


def _stack(rows: Sequence[LossPanel]) -> LossPanel:
    """One panel of one-seed panels: their time units joined (date order), a unit a seed lacks weighted 0."""
    times = rows[0].times
    if not all(r.times.shape == times.shape and (r.times == times).all() for r in rows[1:]):
        times = np.unique(np.concatenate([r.times for r in rows]))
    total = np.zeros((len(rows), times.size))
    weight = np.zeros((len(rows), times.size))
    for i, r in enumerate(rows):
        at = np.searchsorted(times, r.times)
        total[i, at], weight[i, at] = r.total[0], r.weight[0]
    return LossPanel(seeds=np.concatenate([r.seeds for r in rows]), times=times, total=total, weight=weight)
