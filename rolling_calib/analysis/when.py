"""When was each pipeline better? The store's refit windows (or months) and :mod:`rolling_calib.core.when` per pair.

For a pair of a scored store, :func:`when_pair` builds each metric's two
:class:`~rolling_calib.core.verdict.LossPanel` (:func:`~rolling_calib.analysis.verdicts.loss_panel`) and
asks :func:`rolling_calib.core.when.when` for the period verdict inside each block (Holm across the
blocks), the Ibragimov-Mueller test across them (on the odd- and the even-numbered blocks apart,
Bonferroni; the seeds' shared offsets counted) and the fluctuation warning. A block is

* ``"windows"`` (default): a refit window of the schedule, from its test segment's first day in the
  store's manifest (:func:`refit_starts`; where the manifest does not name the pipeline, as for the
  joined pipelines of several stores, the calibration periods that start a new window);
* ``"months"``: a calendar month of the evaluated days (:func:`month_starts`).

A fluctuation test that fires becomes a guard warning (:func:`fluctuation_warnings`): a warning with
the date the rolling differential left its band, never a verdict.

Example
-------
>>> from rolling_calib.analysis.scoring import score_store
>>> scores = score_store(example_store)
>>> starts = refit_starts(scores, "wd0")
>>> [(label, str(day)[:10]) for label, day in starts]
[('w00', '2018-01-02'), ('w01', '2018-03-01')]
>>> w = when_pair(scores.days, "wd0", "wd1e-3", starts=starts, label=scores.label)
>>> w.whens["ql"].consistency().endswith("of 2 refit windows, worse in 0, undetermined in 2")
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from rolling_calib.analysis.verdicts import VERDICT_METRICS, GuardWarning, loss_panel
from rolling_calib.core.label import Label
from rolling_calib.core.metric_table import METRIC_TABLE, title
from rolling_calib.core.question import DEFAULT_QUESTION, QUESTION, Question
from rolling_calib.core.resampling import DEFAULT, RESAMPLING, Resampling
from rolling_calib.core.validation import WHEN, validate_params
from rolling_calib.core.when import When, when

if TYPE_CHECKING:
    from rolling_calib.analysis.scoring import StoreScores

__all__ = ["PairWhen", "fluctuation_warnings", "month_starts", "refit_starts", "when_pair"]


def refit_starts(scores: StoreScores, pipeline: str) -> list[tuple[str, pd.Timestamp]]:
    """``(label, first day)`` of each refit window of ``pipeline``: its windows' test segments in the store's
    manifest (``w00``, ``w01``, ...), else the calibration periods flagged as the first after a refit."""
    from rolling_calib.execution import store as st

    try:
        windows = st.Store.open(scores.store).pipeline(pipeline).window_records
        found = [(f"w{int(w['index']):02d}", pd.Timestamp(w["test"][0]).normalize()) for w in windows
                 if w.get("test")]
    except (st.NoManifestError, KeyError, TypeError, ValueError, OSError):
        found = []
    if found:
        return sorted(found, key=lambda x: x[1])
    periods = scores.periods[scores.periods["pipeline"] == pipeline]
    if "refit_first" not in periods:
        return []
    starts = sorted({pd.Timestamp(t).normalize() for t in periods.loc[periods["refit_first"].astype(bool), "start"]})
    return [(f"w{i:02d}", t) for i, t in enumerate(starts)]


def month_starts(dates: Sequence[Any] | np.ndarray) -> list[tuple[str, pd.Timestamp]]:
    """``(YYYY-MM, first day)`` of each calendar month the ``dates`` touch.

    >>> month_starts(pd.to_datetime(["2018-01-03", "2018-01-30", "2018-03-01"]))
    [('2018-01', Timestamp('2018-01-01 00:00:00')), ('2018-03', Timestamp('2018-03-01 00:00:00'))]
    """
    months = sorted({pd.Timestamp(d).to_period("M") for d in dates})
    return [(str(m), m.to_timestamp()) for m in months]


@dataclass(frozen=True)
class PairWhen:
    """When each of a pair was better, per metric (:class:`~rolling_calib.core.when.When`)."""

    better: str
    worse: str
    blocks: str
    whens: dict[str, When]

    def to_dict(self) -> dict[str, Any]:
        """``{"pair": [better, worse], "blocks", "metrics": {metric: When.to_dict()}}`` (``compare --json``'s "when")."""
        return {"pair": [self.better, self.worse], "blocks": self.blocks,
                "metrics": {m: w.to_dict() for m, w in self.whens.items()}}


def _as_times(starts: Sequence[tuple[str, pd.Timestamp]], dtype: np.dtype) -> list[Any]:
    """The blocks' first days in the panels' time type."""
    return [np.datetime64(pd.Timestamp(t).to_datetime64()).astype(dtype) for _, t in starts]


@validate_params({"blocks": WHEN, "question": QUESTION, "resampling": RESAMPLING})
def when_pair(days: pd.DataFrame, better: str, worse: str, *, starts: Sequence[tuple[str, pd.Timestamp]],
              label: Label, blocks: str = "windows", question: Question = DEFAULT_QUESTION,
              resampling: Resampling = DEFAULT, metrics: Sequence[str] = tuple(VERDICT_METRICS)) -> PairWhen:
    """Per metric, when ``better`` was better than ``worse``: per block (Holm), across blocks, the fluctuation test.

    Parameters
    ----------
    days : DataFrame
        :attr:`StoreScores.days <rolling_calib.analysis.scoring.StoreScores>`.
    better, worse : str
        The pair as the comparison names it.
    starts : sequence of (label, first day)
        The blocks (:func:`refit_starts`, :func:`month_starts`).
    label : Label
        For the metrics' units.
    blocks : {"windows", "months"}
    question : Question
        ``confidence``: the family-wise level across the blocks and the fluctuation band's.
    resampling : Resampling
        ``n_boot`` simulated paths of the fluctuation test and their ``seed``.
    """
    whens: dict[str, When] = {}
    for metric in metrics:
        pa, pb = loss_panel(days, better, metric), loss_panel(days, worse, metric)
        if pa is None or pb is None:
            continue
        try:
            whens[metric] = when(pa, pb, starts=_as_times(starts, pa.times.dtype), labels=[s for s, _ in starts],
                                 blocks=blocks, names=(better, worse), metric=metric,
                                 orientation=METRIC_TABLE[metric].orientation, question=question,
                                 resampling=resampling)
        except ValueError:   # fewer than 2 common days: nothing to say for this metric
            continue
    return PairWhen(better, worse, blocks, whens)


def fluctuation_warnings(pairs: Sequence[PairWhen], label: Label) -> list[GuardWarning]:
    """One ``performance_changed`` warning per pair and metric whose fluctuation test fired (QL first)."""
    out = []
    for pw in pairs:
        for metric, w in pw.whens.items():
            f = w.fluctuation
            if f is None or not f.fired:
                continue
            unit = METRIC_TABLE[metric].unit(label)
            message = (f"{pw.better} vs {pw.worse}, {title(metric)}: {f.describe((pw.better, pw.worse), unit)} "
                       f"This is a warning, not a verdict: read the per-window verdicts ({w.consistency()}).")
            out.append(GuardWarning("performance_changed", [pw.better, pw.worse], message,
                                    {"metric": metric, "left_at": f.left_at, "break_at": f.break_at,
                                     "p_value": f.p_value, "window_days": f.window_days}))
    return out
