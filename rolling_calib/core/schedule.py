"""The rolling schedule: month-aligned train / valid / test windows on a minute calendar.

docs/method.md §3.3 trains on an initial period, then every ``step_months`` months
fine-tunes (or retrains) the model and predicts the next ``step_months`` months.
This module turns that rule into concrete :class:`Window` objects whose
boundaries are *exact minute bars* of the store's calendar: every segment runs
from the first bar at or after a month boundary to the last bar strictly before
the next boundary. Nothing here counts trading days, so unlike Qlib's
``RollingGen`` (which counts trading days and, at one-minute frequency, loses the
last day of each segment) no bar ever falls between two windows.

Segments of window ``k`` (months are calendar months; ``S_k`` is the first test
month, ``v`` = ``valid_months``)::

    test   = [S_k, S_k + step)            clipped at the evaluation end
    valid  = [S_k - v, S_k)
    fit    = [T_k, S_k - v)               span the feature normaliser is fitted on
    train  = fit                          scratch mode, or window 0
           = [S_{k-1} - v, S_k - v)       fine-tune mode, k >= 1, finetune_on="new"

where ``T_k`` is ``initial_train_start`` (expanding) or ``S_k - v - sliding_months``
(sliding, never before ``initial_train_start``). In fine-tune mode the model of
window ``k`` starts from window ``k-1``'s weights and sees only the data that
accumulated since that model's training ended (the source's rule).

Two options follow Qlib's rolling (``qlib.workflow.task.gen.RollingGen``):

* ``step_days``: test segments of that many trading days (sessions) instead of
  ``step_months`` months, from the first session of ``start`` (Qlib's rolling retrain steps 20);
  ``S_k`` is then the test segment's first session, and the months above count back from its date;
* ``purge``: the last ``purge`` bars before the next segment are dropped from ``fit``, ``train``
  and ``valid`` (Qlib truncates them ``horizon + 1`` trading days before the test start), so no
  training or validation label looks into the segment after it: a label ``Ref($close, -2) /
  Ref($close, -1) - 1`` looks 2 bars ahead, and with ``purge`` 2 the last training row's label
  ends on the last bar before validation.

This module is pure pandas: no Qlib, no torch.

Example
-------
>>> import pandas as pd
>>> days = pd.date_range("2020-01-01", "2020-12-31", freq="D")  # stands in for minute bars
>>> ws = rolling_windows(days, initial_train_start="2020-01", start="2020-04", end="2020-07",
...                      step_months=2, valid_months=1)
>>> [(str(w.test.start.date()), str(w.test.end.date())) for w in ws]
[('2020-04-01', '2020-05-31'), ('2020-06-01', '2020-07-31')]
>>> str(ws[1].train.start.date()), str(ws[1].train.end.date())  # fine-tune: only the new months
('2020-03-01', '2020-04-30')
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from rolling_calib.core.label import LABEL_CHOICES
from rolling_calib.core.validation import (
    FINETUNE_ON,
    MONTHS,
    PURGE,
    SEED_COUNT,
    SESSIONS,
    MODES,
    TRAIN_WINDOWS,
    ConfigError,
    Constraint,
    Interval,
    Options,
    Worded,
    check,
)

__all__ = [
    "Segment",
    "Window",
    "CoverageError",
    "parse_month",
    "ROLLING_OPTIONS",
    "check_rolling_options",
    "rolling_windows",
    "check_coverage",
]

Mode = Literal["finetune", "scratch"]
TrainWindow = Literal["expanding", "sliding"]


@dataclass(frozen=True)
class Segment:
    """A closed interval of minute bars ``[start, end]`` (first and last bar, inclusive)."""

    start: pd.Timestamp
    end: pd.Timestamp

    def as_tuple(self) -> tuple[str, str]:
        """``(start, end)`` as ISO strings, the form Qlib segment configs take."""
        return (self.start.isoformat(sep=" "), self.end.isoformat(sep=" "))

    def contains(self, times: pd.DatetimeIndex | pd.Series | np.ndarray) -> np.ndarray:
        """Boolean mask: which of ``times`` lie inside the segment."""
        values = pd.DatetimeIndex(times)
        return np.asarray((values >= self.start) & (values <= self.end))


@dataclass(frozen=True)
class Window:
    """One rolling window: where the model is trained, validated and tested.

    Attributes
    ----------
    index : int
        0-based position in the schedule.
    fit : Segment
        The span the feature normaliser is fitted on (expanding or sliding span).
    train : Segment
        Bars the model is fitted on in this window (equals ``fit`` except for
        fine-tuned windows, which see only the new data).
    valid : Segment or None
        Early-stopping bars, the ``valid_months`` right before the test segment
        (``None`` with ``valid_months=0``: no early stopping).
    test : Segment
        Bars predicted by this window's model.
    """

    index: int
    fit: Segment
    train: Segment
    valid: Segment | None
    test: Segment

    def to_dict(self) -> dict[str, object]:
        """JSON-friendly form (ISO strings), as recorded in the store manifest."""
        out: dict[str, object] = {"index": self.index}
        for name in ("fit", "train", "valid", "test"):
            seg: Segment | None = getattr(self, name)
            out[name] = None if seg is None else list(seg.as_tuple())
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Window":
        """Inverse of :meth:`to_dict`."""
        segs = {
            name: None if data.get(name) is None else Segment(pd.Timestamp(data[name][0]), pd.Timestamp(data[name][1]))
            for name in ("fit", "train", "valid", "test")
        }
        return cls(index=int(data["index"]), **segs)


class CoverageError(ValueError):
    """Test segments (or merged predictions) leave a gap or overlap."""


def parse_month(value: object, *, field: str, edge: Literal["start", "end"] = "start") -> pd.Period:
    """Parse a month given as ``"YYYY-MM"`` or a date into a monthly ``Period``.

    A date is accepted only on the month's edge (``edge="start"``: the 1st;
    ``edge="end"``: the last calendar day) so a window can never silently start
    or stop mid-month.

    Parameters
    ----------
    value : str, datetime.date or pandas.Timestamp
        The month, e.g. ``"2015-01"``, ``"2015-01-01"`` or ``date(2018, 12, 31)``.
    field : str
        Name used in error messages (e.g. ``"rolling.start"``).
    edge : {"start", "end"}
        Which edge of the month a full date must fall on.

    Examples
    --------
    >>> parse_month("2015-01", field="rolling.start")
    Period('2015-01', 'M')
    >>> parse_month("2018-12-31", field="rolling.end", edge="end")
    Period('2018-12', 'M')
    """
    if isinstance(value, pd.Period):
        return value.asfreq("M")
    if isinstance(value, (dt.date, pd.Timestamp)):
        text = pd.Timestamp(value).strftime("%Y-%m-%d")
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise ValueError(
            f"{field}: expected a month 'YYYY-MM' or a date 'YYYY-MM-DD', found {type(value).__name__} {value!r}"
        )
    try:
        stamp = pd.Timestamp(text)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{field}: expected a month 'YYYY-MM' or a date 'YYYY-MM-DD', found {value!r}") from exc
    if len(text) > 7:  # a full date: must sit on the month's edge
        if edge == "start" and stamp.day != 1:
            raise ValueError(f"{field}: expected the first day of a month (windows are month-aligned), found {text}")
        if edge == "end" and stamp.day != stamp.days_in_month:
            raise ValueError(f"{field}: expected the last day of a month (windows are month-aligned), found {text}")
    return stamp.to_period("M")


def _bars_between(calendar: pd.DatetimeIndex, lo: pd.Period, hi: pd.Period, *, what: str) -> Segment:
    """First and last bar in calendar months ``[lo, hi)``; error if there is none."""
    first = calendar.searchsorted(lo.start_time, side="left")
    last = calendar.searchsorted(hi.start_time, side="left") - 1
    if last < first:
        raise ValueError(f"{what}: the calendar has no bars in months {lo}..{hi - 1}")
    return Segment(calendar[first], calendar[last])


#: Declared constraints of the rolling options, checked by :func:`check_rolling_options` for
#: :func:`rolling_windows` and for the experiment YAML's ``rolling:`` section alike.
ROLLING_OPTIONS: Mapping[str, Constraint] = {
    "step_months": MONTHS,
    "valid_months": Worded(Interval(int, 0, 1200), "an integer in [0, 1200] (months: a century)"),
    "mode": Worded(Options(*MODES), f"one of {', '.join(MODES)}"),
    "train_window": Worded(Options(*TRAIN_WINDOWS), f"one of {', '.join(TRAIN_WINDOWS)}"),
    "sliding_months": MONTHS,
    "finetune_on": Worded(Options(*FINETUNE_ON), f"one of {', '.join(FINETUNE_ON)}"),
    "label": Worded(Options(*LABEL_CHOICES), f"one of {', '.join(LABEL_CHOICES)}"),  # auto, raw or learn-processed
    "stack_seeds": SEED_COUNT,  # seeds of a window trained as one seed stack (1: one at a time)
    "step_days": SESSIONS,   # test segments of this many sessions instead of step_months months (Qlib's rolling)
    "purge": PURGE,          # bars dropped before the next segment ("auto": the label's look-ahead)
}


def check_rolling_options(options: Mapping[str, Any], *, where: str | None = None) -> None:
    """Check the rolling options present in ``options`` against :data:`ROLLING_OPTIONS`.

    ``sliding_months`` and ``step_days`` may be ``None`` (absent), ``sliding_months`` except with
    ``train_window`` ``"sliding"``.
    Keys that are not rolling options are ignored.

    Raises
    ------
    ValueError
        Naming ``rolling.<option>``; a :class:`~rolling_calib.core.validation.ConfigError`
        prefixed by ``where`` when given (the YAML file).

    Examples
    --------
    >>> check_rolling_options({"step_months": 6, "mode": "scratch"})
    >>> check_rolling_options({"step_months": 0})
    Traceback (most recent call last):
    ...
    ValueError: rolling.step_months: expected an integer in [1, 1200] (months: a century), found int 0
    >>> check_rolling_options({"mode": "warm"})
    Traceback (most recent call last):
    ...
    ValueError: rolling.mode: expected one of finetune, scratch, found 'warm'
    >>> check_rolling_options({"train_window": "sliding"}, where="exp.yaml")
    Traceback (most recent call last):
    ...
    rolling_calib.core.validation.ConfigError: exp.yaml: rolling.sliding_months: missing (required with train_window: sliding)
    """
    for name, constraint in ROLLING_OPTIONS.items():
        if name in options and not (name in ("sliding_months", "step_days") and options[name] is None):
            check(f"rolling.{name}", options[name], constraint, where=where)
    if options.get("train_window") == "sliding" and options.get("sliding_months") is None:
        message = "rolling.sliding_months: missing (required with train_window: sliding)"
        raise ValueError(message) if where is None else ConfigError(f"{where}: {message}")


def rolling_windows(
    calendar: Sequence[pd.Timestamp] | pd.DatetimeIndex,
    *,
    initial_train_start: object,
    start: object,
    end: object,
    step_months: int = 6,
    valid_months: int = 1,
    mode: Mode = "finetune",
    train_window: TrainWindow = "expanding",
    sliding_months: int | None = None,
    finetune_on: Literal["new", "window"] = "new",
    step_days: int | None = None,
    purge: int = 0,
) -> list[Window]:
    """Cut the evaluation period ``[start, end]`` into rolling windows (month-aligned, or of ``step_days`` sessions).

    Parameters
    ----------
    calendar : sequence of Timestamp
        The store's minute bars (sorted, timezone-naive), e.g. ``D.calendar(freq="1min")``.
    initial_train_start : month
        First month of training data.
    start, end : month
        First and last evaluated month (inclusive).
    step_months : int
        Months predicted by one model; the last window may be shorter.
    valid_months : int
        Months right before each test segment used for early stopping (0: none;
        the model then keeps its last epoch).
    mode : {"finetune", "scratch"}
        ``finetune``: window ``k`` continues from window ``k-1``'s weights;
        ``scratch``: every window trains a fresh model.
    train_window : {"expanding", "sliding"}
        Training span of scratch windows (and of window 0): from
        ``initial_train_start``, or the last ``sliding_months`` months.
    sliding_months : int, optional
        Length of the sliding training span (required for ``"sliding"``).
    finetune_on : {"new", "window"}
        Data a fine-tuned window trains on: only the months accumulated since
        its predecessor's training ended (``"new"``, docs/method.md §3.3), or the same
        expanding/sliding span a scratch window would use.
    step_days : int, optional
        Sessions (trading days) predicted by one model, instead of ``step_months`` (Qlib's rolling).
    purge : int
        Bars dropped at the end of ``fit``, ``train`` and ``valid`` before the next segment (the
        label's look-ahead; 0: segments touch).

    Returns
    -------
    list of Window
        Windows whose test segments tile ``[start, end]`` exactly.

    Raises
    ------
    ValueError
        For options outside :data:`ROLLING_OPTIONS`, inconsistent arguments, or months
        without bars in the calendar.

    Examples
    --------
    With ``start=2015-01``, ``end=2015-12``, ``step_months=6``: window 0 tests
    Jan-Jun 2015 (first bar 2015-01-02 09:30 to last bar 2015-06-30 15:59), window 1
    tests Jul-Dec 2015.

    >>> days = pd.bdate_range("2020-01-01", "2020-06-30")
    >>> ws = rolling_windows(days, initial_train_start="2020-01", start="2020-04", end="2020-04", step_days=10,
    ...                      valid_months=1, mode="scratch", purge=2)
    >>> [(str(w.test.start.date()), str(w.test.end.date())) for w in ws]
    [('2020-04-01', '2020-04-14'), ('2020-04-15', '2020-04-28'), ('2020-04-29', '2020-04-30')]
    >>> str(ws[1].valid.start.date()), str(ws[1].valid.end.date()), str(ws[1].train.end.date())  # 2 bars purged
    ('2020-03-16', '2020-04-10', '2020-03-11')
    """
    cal = _checked_calendar(calendar)
    check_rolling_options({
        "step_months": step_months, "valid_months": valid_months, "mode": mode, "train_window": train_window,
        "sliding_months": sliding_months, "finetune_on": finetune_on, "step_days": step_days, "purge": purge,
    })
    t0, first, last = _schedule_months(cal, initial_train_start, start, end, valid_months=valid_months)
    bounds = _test_bounds(cal, first, last, step_months=step_months, step_days=step_days)
    windows: list[Window] = []
    previous_valid_start: pd.Timestamp | None = None   # where the previous window's training data ended
    for index, (lo, hi) in enumerate(bounds):
        # the date the month counts start from: the month's first day (months), the first session's (days)
        anchor = first.start_time + pd.DateOffset(months=index * step_months) if step_days is None else \
            cal[lo].normalize()
        valid_start = anchor - pd.DateOffset(months=valid_months)
        fit_start = t0.start_time if train_window == "expanding" else \
            max(t0.start_time, valid_start - pd.DateOffset(months=int(sliding_months)))  # type: ignore[arg-type]
        after = valid_start if valid_months else cal[lo]   # what follows the training data: valid, else test
        fit = _bars(cal, fit_start, after, purge=purge, what=f"window {index} fit")
        if mode == "finetune" and finetune_on == "new" and previous_valid_start is not None:
            train = _bars(cal, previous_valid_start, after, purge=purge,
                          what=f"window {index} train (fine-tuned on the bars since window {index - 1}'s)")
        else:
            train = fit
        valid = _bars(cal, valid_start, cal[lo], purge=purge, what=f"window {index} valid") if valid_months else None
        windows.append(Window(index=index, fit=fit, train=train, valid=valid, test=Segment(cal[lo], cal[hi])))
        previous_valid_start = after
    check_coverage(windows, cal, start=first, end=last)
    return windows


def _bars(calendar: pd.DatetimeIndex, lo: pd.Timestamp, hi: pd.Timestamp, *, purge: int, what: str) -> Segment:
    """First and last bar in ``[lo, hi)`` with the last ``purge`` bars dropped; error if none is left."""
    first = calendar.searchsorted(lo, side="left")
    last = calendar.searchsorted(hi, side="left") - 1 - purge
    if last < first:
        span = f"{lo.date()}..{(hi - pd.Timedelta(days=1)).date()}"
        raise ValueError(f"{what}: the calendar has no bars in {span}" + (f" once the last {purge} bar(s) before the "
                                                                          "next segment are purged" if purge else ""))
    return Segment(calendar[first], calendar[last])


def _test_bounds(cal: pd.DatetimeIndex, first: pd.Period, last: pd.Period, *, step_months: int,
                 step_days: int | None) -> list[tuple[int, int]]:
    """Positions in ``cal`` of each test segment's first and last bar: ``step_months`` months, or ``step_days``
    sessions, from the first bar of ``first`` to the last bar of ``last``."""
    begin = cal.searchsorted(first.start_time, side="left")
    stop = cal.searchsorted((last + 1).start_time, side="left")   # one past the last bar of `last`
    if stop <= begin:
        raise ValueError(f"rolling.start: the calendar has no bars in months {first}..{last}")
    if step_days is None:
        out, month = [], first
        while month <= last:
            nxt = min(month + step_months, last + 1)
            lo, hi = cal.searchsorted(month.start_time, side="left"), cal.searchsorted(nxt.start_time, side="left") - 1
            if hi < lo:
                raise ValueError(f"window {len(out)} test: the calendar has no bars in months {month}..{nxt - 1}")
            out.append((int(lo), int(hi)))
            month = nxt
        return out
    days = cal[begin:stop].normalize()
    starts = np.flatnonzero(np.r_[True, days[1:] != days[:-1]])   # each session's first bar, relative to begin
    cuts = list(starts[::step_days]) + [stop - begin]
    return [(int(begin + a), int(begin + b - 1)) for a, b in zip(cuts[:-1], cuts[1:])]


def _checked_calendar(calendar: Sequence[pd.Timestamp] | pd.DatetimeIndex) -> pd.DatetimeIndex:
    """The calendar as a DatetimeIndex; ``ValueError`` when empty or not strictly increasing."""
    cal = pd.DatetimeIndex(calendar)
    if len(cal) == 0:
        raise ValueError("calendar: empty; the store has no bars")
    if not cal.is_monotonic_increasing or cal.has_duplicates:
        raise ValueError("calendar: bars must be strictly increasing")
    return cal


def _schedule_months(
    cal: pd.DatetimeIndex, initial_train_start: object, start: object, end: object, *, valid_months: int,
) -> tuple[pd.Period, pd.Period, pd.Period]:
    """First training month, first and last evaluated month; checked against each other and the calendar."""
    t0 = parse_month(initial_train_start, field="rolling.initial_train_start", edge="start")
    first = parse_month(start, field="rolling.start", edge="start")
    last = parse_month(end, field="rolling.end", edge="end")
    if last < first:
        raise ValueError(f"rolling.end: {last} is before rolling.start {first}")
    if first - valid_months <= t0:
        raise ValueError(
            f"rolling.initial_train_start: {t0} leaves no training month before the first validation month "
            f"{first - valid_months} (rolling.start {first} minus valid_months {valid_months})"
        )
    if cal[0].to_period("M") > t0:
        raise ValueError(
            f"rolling.initial_train_start: {t0} begins before the store's first bar {cal[0]}"
        )
    if cal[-1] < last.start_time:
        raise ValueError(f"rolling.end: {last} ends after the store's last bar {cal[-1]}")
    return t0, first, last


def check_coverage(
    windows: Sequence[Window],
    calendar: Sequence[pd.Timestamp] | pd.DatetimeIndex,
    *,
    start: object | None = None,
    end: object | None = None,
) -> None:
    """Raise :class:`CoverageError` unless the test segments tile the evaluation period.

    "Tile" means: consecutive test segments meet at adjacent calendar bars (the
    bar after one segment's last bar is the next segment's first bar), and --
    when ``start``/``end`` months are given -- the first segment begins at the
    first bar of ``start`` and the last one ends at the last bar of ``end``.
    Within each window, train and valid bars come strictly before test bars.

    Parameters
    ----------
    windows : sequence of Window
    calendar : sequence of Timestamp
        The store's minute bars.
    start, end : month, optional
        The evaluation period the windows must cover.

    Examples
    --------
    >>> import pandas as pd
    >>> cal = pd.date_range("2020-01-01", periods=6, freq="D")
    >>> past = Segment(cal[0], cal[0])
    >>> w0 = Window(0, past, past, past, Segment(cal[1], cal[2]))
    >>> w1 = Window(1, past, past, past, Segment(cal[4], cal[5]))
    >>> check_coverage([w0, w1], cal)
    Traceback (most recent call last):
    ...
    rolling_calib.core.schedule.CoverageError: schedule: gap between window 0 (test ends 2020-01-03 00:00:00) and window 1 (test starts 2020-01-05 00:00:00)
    """
    cal = pd.DatetimeIndex(calendar)
    if not windows:
        raise CoverageError("schedule: no windows")
    for w in windows:
        if w.test.end < w.test.start:
            raise CoverageError(f"window {w.index}: test segment ends before it starts")
        for name in ("train", "valid", "fit"):
            seg: Segment | None = getattr(w, name)
            if seg is not None and seg.end >= w.test.start:
                raise CoverageError(
                    f"window {w.index} {name} ends at {seg.end}, not before its test start {w.test.start}"
                )
        pos_start = cal.searchsorted(w.test.start)
        pos_end = cal.searchsorted(w.test.end)
        if pos_start >= len(cal) or cal[pos_start] != w.test.start or pos_end >= len(cal) or cal[pos_end] != w.test.end:
            raise CoverageError(f"window {w.index}: test bounds {w.test.as_tuple()} are not calendar bars")
    for prev, nxt in zip(windows, windows[1:]):
        pos = cal.searchsorted(prev.test.end)
        if pos + 1 >= len(cal) or cal[pos + 1] != nxt.test.start:
            kind = "overlap" if nxt.test.start <= prev.test.end else "gap"
            raise CoverageError(
                f"schedule: {kind} between window {prev.index} (test ends {prev.test.end}) and "
                f"window {nxt.index} (test starts {nxt.test.start})"
            )
    if start is not None:
        first = parse_month(start, field="rolling.start", edge="start")
        expected = _bars_between(cal, first, first + 1, what="rolling.start").start
        if windows[0].test.start != expected:
            raise CoverageError(f"schedule: first test bar is {windows[0].test.start}, expected {expected}")
    if end is not None:
        last = parse_month(end, field="rolling.end", edge="end")
        expected = _bars_between(cal, last, last + 1, what="rolling.end").end
        if windows[-1].test.end != expected:
            raise CoverageError(f"schedule: last test bar is {windows[-1].test.end}, expected {expected}")
