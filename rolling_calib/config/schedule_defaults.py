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

A Qlib workflow run as it is (no ``rolling:`` section, ``qlib_rolling``) follows **Qlib's own
rolling** (``qlib.contrib.rolling.base.Rolling``, the rolling-retrain baseline of
``examples/benchmarks_dynamic``) unless ``--set`` says otherwise: every window retrains from scratch
on its expanding training span (``mode: scratch``; ``RollingGen``'s ``ROLL_EX``), test segments of 20
trading days (``step_days: 20``), and the YAML's own validation length (``valid_months``: the months of
its ``valid`` segment, fewer only when the store leaves less than a year of training), the label's
look-ahead purged before each next segment (``rolling.purge: auto``).

:func:`segment_departures` lists, for the plan, every way a rolling run departs from the YAML's
own segments (training start, validation length, test span, the normaliser's fit span, fine-tuning).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

__all__ = ["LOOKAHEAD_BARS", "LOOKBACK_BARS", "QLIB_STEP_DAYS", "ScheduleChoice", "choose_schedule", "months_between",
           "segment_departures"]

#: Bars the Alpha158/Alpha360 handlers look back (their longest rolling window: 60 sessions).
LOOKBACK_BARS = 60
#: Bars the Alpha158/Alpha360 label looks ahead (``Ref($close, -2) / Ref($close, -1) - 1``): the last ones of
#: the store have no label, so a test month must end before them.
LOOKAHEAD_BARS = 2
#: Months of training the file's test start must leave after ``initial_train_start`` to be kept.
MIN_TRAIN_MONTHS = 12
#: Trading days of a step of Qlib's rolling retrain (``qlib.contrib.rolling.base.Rolling(step=20)``).
QLIB_STEP_DAYS = 20


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
                    rows: Any = None, qlib_rolling: bool = False) -> ScheduleChoice:
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
    qlib_rolling : bool
        Follow Qlib's rolling (module docstring): the file is a Qlib workflow without ``rolling:``.

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
    if qlib_rolling:
        _qlib_rolling(rolling, segments, first, start, values, notes,
                      cannot=f" ({model_name} can neither load_state nor finetune)" if can_finetune is False else "")
    batch = ((task.get("model") or {}).get("kwargs") or {}).get("batch_size")
    if "valid_months" not in rolling and isinstance(batch, int) and rows is not None and start is not None and \
            not _holds_batch(values.get("valid_months"), start, batch, rows):
        for k in range(1, 25):
            lo, hi = (start - k).start_time, (start - 1).end_time.normalize()
            n = rows(lo, hi)
            if n is None or n >= batch:
                break
        values["valid_months"] = k
        notes.append(f"valid_months {k}: the fewest months before {start} holding one batch of {batch} rows"
                     + (f" ({n} rows)" if n is not None else ""))
    if "mode" not in rolling and "mode" not in values and can_finetune is False:
        values["mode"] = "scratch"
        notes.append(f"mode scratch: {model_name} can neither load_state nor finetune, so every window retrains it")
    return ScheduleChoice(values, notes)


def _holds_batch(months: int | None, start: pd.Period, batch: int, rows: Any) -> bool:
    """Whether ``months`` months before ``start`` hold one batch of rows (None: no months chosen yet)."""
    if months is None:
        return False
    n = rows((start - months).start_time, (start - 1).end_time.normalize())
    return n is None or n >= batch


def _qlib_rolling(rolling: Mapping[str, Any], segments: Mapping[str, Any], first: pd.Period | None,
                  start: pd.Period | None, values: dict[str, Any], notes: list[str], *, cannot: str = "") -> None:
    """Qlib's rolling for the options ``rolling`` leaves out: retrain, 20-day steps, the YAML's validation length
    (``cannot``: why the model could not fine-tune anyway, in words)."""
    if "mode" not in rolling:
        values["mode"] = "scratch"
        notes.append("mode scratch: Qlib's rolling retrains every window on its expanding training span "
                     f"(RollingGen ROLL_EX), it does not fine-tune{cannot}")
    if "step_days" not in rolling and "step_months" not in rolling:
        values["step_days"] = QLIB_STEP_DAYS
        notes.append(f"step_days {QLIB_STEP_DAYS}: Qlib's rolling retrain steps {QLIB_STEP_DAYS} trading days "
                     "(qlib.contrib.rolling, examples/benchmarks_dynamic/baseline)")
    valid = segments.get("valid") or [None, None]
    lo, hi = _month(valid[0]), _month(valid[1])
    if "valid_months" in rolling or lo is None or hi is None:
        return
    own = months_between(lo, hi) + 1
    room = months_between(first, start) - MIN_TRAIN_MONTHS if first is not None and start is not None else own
    chosen = max(1, min(own, room))
    values["valid_months"] = chosen
    notes.append(f"valid_months {chosen}: " + (f"the YAML's valid segment {valid[0]}..{valid[1]} ({own} months)"
                                               if chosen == own else
                                               f"the YAML's valid segment is {own} months ({valid[0]}..{valid[1]}); "
                                               f"{chosen} leave {MIN_TRAIN_MONTHS} months of training before {start}"))


def _day(value: Any) -> str:
    return str(pd.Timestamp(value).date()) if value is not None else "?"


def segment_departures(task: Mapping[str, Any], windows: Sequence[Any], *, mode: str, valid_months: int,
                       step: str, purge: int) -> list[str]:
    """How a rolling run departs from a Qlib workflow's own segments, one line each (for the plan).

    ``task`` is the workflow's task (its ``segments``, its handler's ``fit_start_time``/``fit_end_time``);
    ``windows`` the schedule's windows; ``step`` the step in words. Empty when the task has no train,
    valid and test segments.

    >>> import pandas as pd
    >>> from rolling_calib.core.schedule import Segment, Window
    >>> seg = lambda a, b: Segment(pd.Timestamp(a), pd.Timestamp(b))
    >>> w = Window(0, seg("2013-06-03", "2014-12-26"), seg("2013-06-03", "2014-12-26"), seg("2015-01-02", "2016-12-28"),
    ...            seg("2017-01-03", "2017-01-31"))
    >>> task = {"dataset": {"kwargs": {"segments": {"train": ["2008-01-01", "2014-12-31"],
    ...         "valid": ["2015-01-01", "2016-12-31"], "test": ["2017-01-01", "2020-08-01"]}}}}
    >>> for line in segment_departures(task, [w], mode="scratch", valid_months=24, step="20 trading days", purge=2):
    ...     print(line)
    departs from the YAML's segments: train starts 2013-06-03, not 2008-01-01
    departs from the YAML's segments: test spans 2017-01-03..2017-01-31 in 1 window(s) of 20 trading days, retrained each (YAML: one segment 2017-01-01..2020-08-01)
    departs from the YAML's segments: train and valid end 2 bar(s) before the segment after them (the label's look-ahead purged; the YAML's segments touch)
    """
    segments = ((task.get("dataset") or {}).get("kwargs") or {}).get("segments") or {}
    if not all(isinstance(segments.get(k), (list, tuple)) and len(segments[k]) == 2 for k in ("train", "valid", "test")) \
            or not windows:
        return []
    head = "departs from the YAML's segments: "
    out = []
    (t0, _), (v0, v1), (s0, s1) = segments["train"], segments["valid"], segments["test"]
    first = windows[0]
    if str(first.train.start.date()) != _day(t0):
        out.append(f"{head}train starts {first.train.start.date()}, not {_day(t0)}")
    own = months_between(_month(v0), _month(v1)) + 1 if _month(v0) is not None and _month(v1) is not None else None
    if own is not None and valid_months != own:
        out.append(f"{head}valid is the {valid_months} month(s) before each test segment, not the YAML's {own} "
                   f"({_day(v0)}..{_day(v1)})")
    verb = "retrained each" if mode == "scratch" else "each fine-tuned from the previous window on the new data only"
    span = f"{windows[0].test.start.date()}..{windows[-1].test.end.date()}"
    out.append(f"{head}test spans {span} in {len(windows)} window(s) of {step}, {verb} (YAML: one segment "
               f"{_day(s0)}..{_day(s1)})")
    if mode != "scratch":
        out.append(f"{head}mode {mode}: Qlib's rolling retrains every window from scratch (--set rolling.mode=scratch)")
    handler = ((task.get("dataset") or {}).get("kwargs") or {}).get("handler") or {}
    hkw = handler.get("kwargs") if isinstance(handler, Mapping) else None
    if isinstance(hkw, Mapping) and hkw.get("fit_end_time") is not None:
        out.append(f"{head}the handler's normaliser is fitted on each window's training span, not on the YAML's "
                   f"fit_start_time..fit_end_time {_day(hkw.get('fit_start_time'))}..{_day(hkw.get('fit_end_time'))}")
    if purge:
        out.append(f"{head}train and valid end {purge} bar(s) before the segment after them (the label's look-ahead "
                   "purged; the YAML's segments touch)")
    return out
