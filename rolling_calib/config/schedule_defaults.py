"""The rolling schedule a Qlib workflow YAML gets when it does not write one (issue 29).

A Qlib benchmark file (``examples/benchmarks/*/workflow_config_*.yaml``) has a task and its
segments, not a ``rolling:`` section. Instead of refusing it, the options the file (and ``--set
rolling.KEY=VALUE``) leave out are chosen from the store's calendar and the file's segments, and
said (:attr:`ScheduleChoice.notes`, printed before the run):

* ``initial_train_start``: the later of the file's first training month and the first month that
  starts at least ``LOOKBACK_BARS`` bars after the store's first bar (Alpha158 and Alpha360 look
  back 60 sessions: earlier rows have no features);
* ``end``: the earlier of the file's last test month and the store's last complete month with labels
  (``LOOKAHEAD_BARS`` bars after it: the label looks ahead);
* ``start``: the file's first test month when the store has it with a year of training before,
  else the month two thirds of the way from ``initial_train_start`` to ``end``;
* ``valid_months``: the fewest months before ``start`` that hold one batch of the model
  (``batch_size``; Qlib's torch models skip an incomplete validation batch), at least 1;
* ``mode``: ``scratch`` for a model that can neither ``load_state`` nor ``finetune`` (Qlib's torch
  models), whether or not the file has a ``rolling:`` section;
* ``step_months``, ``seeds`` and the rest: their defaults (:class:`~rolling_calib.config.experiment.RollingConfig`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

__all__ = ["LOOKAHEAD_BARS", "LOOKBACK_BARS", "ScheduleChoice", "choose_schedule", "months_between"]

#: Bars the Alpha158/Alpha360 handlers look back (their longest rolling window: 60 sessions).
LOOKBACK_BARS = 60
#: Bars the Alpha158/Alpha360 label looks ahead (``Ref($close, -2) / Ref($close, -1) - 1``): the last ones of
#: the store have no label, so a test month must end before them.
LOOKAHEAD_BARS = 2
#: Months of training the file's test start must leave after ``initial_train_start`` to be kept.
MIN_TRAIN_MONTHS = 12


@dataclass(frozen=True)
class ScheduleChoice:
    """The ``rolling:`` options filled in (``values``) and why, one line each (``notes``)."""

    values: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _month(value: Any) -> pd.Period | None:
    try:
        return pd.Period(str(value)[:7], freq="M")
    except (ValueError, TypeError):
        return None


def months_between(a: pd.Period, b: pd.Period) -> int:
    """Months from ``a`` to ``b`` (``b - a``).

    >>> months_between(pd.Period("2013-06", "M"), pd.Period("2014-06", "M"))
    12
    """
    return (b.year - a.year) * 12 + b.month - a.month


def _last_complete_month(calendar: pd.DatetimeIndex) -> pd.Period:
    """The month of the store's last labelled bar (``LOOKAHEAD_BARS`` before its last) when no session of that
    month can follow it, else the month before."""
    last = calendar[max(0, len(calendar) - 1 - LOOKAHEAD_BARS)]
    month_end = pd.Timestamp(last.year, last.month, 1) + pd.offsets.MonthEnd(0)
    later_weekdays = pd.bdate_range(last.normalize() + pd.Timedelta(days=1), month_end)
    return last.to_period("M") if len(later_weekdays) == 0 else last.to_period("M") - 1


def choose_schedule(rolling: Mapping[str, Any], task: Mapping[str, Any], calendar: pd.DatetimeIndex, *,
                    can_finetune: bool | None, model_name: str = "the model",
                    rows: Any = None) -> ScheduleChoice:
    """The options ``rolling`` leaves out, chosen from the store's ``calendar`` and the task's segments.

    Parameters
    ----------
    rolling : mapping
        What the file and ``--set`` wrote (possibly empty).
    task : mapping
        The workflow's task (its ``dataset.kwargs.segments`` and ``model.kwargs.batch_size``).
    calendar : DatetimeIndex
        The store's bars.
    can_finetune : bool or None
        Whether the model can continue from the previous window (None: unknown, leave the default).
    rows : callable, optional
        ``rows(start, end) -> int | None``: rows of the universe in a span (for ``valid_months``).

    Examples
    --------
    >>> cal = pd.bdate_range("2013-02-08", "2018-02-07")
    >>> task = {"dataset": {"kwargs": {"segments": {"train": ["2008-01-01", "2014-12-31"],
    ...         "test": ["2017-01-01", "2020-08-01"]}}}, "model": {"kwargs": {"batch_size": 800}}}
    >>> c = choose_schedule({}, task, cal, can_finetune=False, rows=lambda a, b: 25 * len(pd.bdate_range(a, b)))
    >>> c.values
    {'initial_train_start': '2013-06', 'end': '2018-01', 'start': '2017-01', 'valid_months': 2, 'mode': 'scratch'}
    """
    values: dict[str, Any] = {}
    notes: list[str] = []
    segments = (task.get("dataset") or {}).get("kwargs", {}).get("segments") or {}
    train, test = segments.get("train") or [None, None], segments.get("test") or [None, None]
    bar0 = calendar[min(LOOKBACK_BARS, len(calendar) - 1)]
    earliest = bar0.to_period("M") + (0 if bar0.day == 1 else 1)
    if "initial_train_start" not in rolling:
        own = _month(train[0])
        chosen = max(earliest, own) if own is not None else earliest
        values["initial_train_start"] = str(chosen)
        notes.append(f"initial_train_start {chosen}: " + (
            f"the YAML's train segment starts then" if own is not None and own >= earliest else
            f"the first month {LOOKBACK_BARS} bars after the store's first bar {calendar[0].date()} (the handler's "
            f"look-back)" + (f"; the YAML's train segment starts earlier, {own}" if own is not None else "")))
    first = _month(rolling.get("initial_train_start", values.get("initial_train_start")))
    if "end" not in rolling:
        own, last = _month(test[1]), _last_complete_month(calendar)
        chosen = min(own, last) if own is not None else last
        values["end"] = str(chosen)
        notes.append(f"end {chosen}: " + ("the YAML's test segment ends then" if chosen == own else
                                          f"the store's last complete month with labels (its last bar: {calendar[-1].date()}, "
                                          f"the label looks {LOOKAHEAD_BARS} bars ahead)"))
    end = _month(rolling.get("end", values.get("end")))
    if "start" not in rolling and first is not None and end is not None:
        own = _month(test[0])
        if own is not None and months_between(first, own) >= MIN_TRAIN_MONTHS and own <= end:
            chosen, why = own, "the YAML's test segment starts then"
        else:
            chosen = first + max(1, 2 * months_between(first, end) // 3)
            why = (f"two thirds of the way from {first} to {end} (the YAML's test start {own} leaves "
                   f"{'no' if own is None or own > end else 'less than a year of'} training in this store)")
        values["start"] = str(chosen)
        notes.append(f"start {chosen}: {why}")
    start = _month(rolling.get("start", values.get("start")))
    batch = ((task.get("model") or {}).get("kwargs") or {}).get("batch_size")
    if "valid_months" not in rolling and isinstance(batch, int) and rows is not None and start is not None:
        for k in range(1, 25):
            lo, hi = (start - k).start_time, (start - 1).end_time.normalize()
            n = rows(lo, hi)
            if n is None or n >= batch:
                break
        values["valid_months"] = k
        notes.append(f"valid_months {k}: the fewest months before {start} holding one batch of {batch} rows"
                     + (f" ({n} rows)" if n is not None else ""))
    if "mode" not in rolling and can_finetune is False:
        values["mode"] = "scratch"
        notes.append(f"mode scratch: {model_name} can neither load_state nor finetune, so every window retrains it")
    return ScheduleChoice(values, notes)
