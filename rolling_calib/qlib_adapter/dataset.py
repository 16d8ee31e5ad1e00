"""Minute-bar features and labels for Qlib, with lazily cut time-series windows.

This module is the data side of the rolling-calib model layer. It plugs into
Qlib's ordinary contract: a workflow YAML names :class:`MinuteBarHandler` and
:class:`MinuteTSDataset` by ``module_path``/``class``,
``qlib.utils.init_instance_by_config`` builds them, and a model calls
``dataset.prepare("train")``.

What is computed
----------------
**Per-bar data** (loaded once per process through Qlib's own provider -- the
universe file, calendar and ``ExpressionD`` series that ``D.features`` itself
uses -- by :class:`MinuteBarLoader`, a ``QlibDataLoader`` subclass, at
``freq="1min"``): ``$open, $high, $low, $close, $vwap, $volume`` for every
instrument and every calendar minute of ``[start_time, end_time]``. They are kept
as one contiguous ``float32`` array of shape ``(n_instruments * n_minutes, 6)``
holding ``log(open), log(high), log(low), log(close), log(vwap), log1p(volume)``
(about 170 MiB for 25 symbols x 3 years), cached in-process by (provider, universe,
range, frequency, horizon).

**Sampling.** Prediction times are the labelled bars of a segment; with a stride
``k`` only the bars ``09:30, 09:30 + k, ...`` of every session (the same clock times
for every instrument). Samples are ordered by (datetime, instrument).

**Features** (Alpha360 methodology on minute bars). For a prediction time ``t``
and lag ``k = 0 .. step_len-1`` the window holds::

    price_k  = log(P[t-k] / close[t])        P in open, high, low, close, vwap
    volume_k = log1p(volume[t-k]) - log1p(volume[t])

i.e. Alpha360's ``Ref($open, k)/$close`` ... ``Ref($volume, k)/$volume`` in log
form (robust to zero volume). Each of the ``step_len x 6`` columns is then
robust-z-scored with median and ``1.4826 * MAD`` fitted on the training range
``[fit_start_time, fit_end_time]`` only, clipped to ``[-3, 3]`` (Qlib's
``RobustZScoreNorm(clip_outlier=True)``), and NaN would be filled with 0
(Qlib's ``Fillna``). Windows are cut on the fly from the per-bar array by index
arithmetic, a batch at a time; no ``(N, 360)`` frame is ever built.

**Label** (basis points, raw scale)::

    label[t] = 1e4 * (close[t + h] / close[t] - 1),    h = label_horizon (10)

``NaN`` when ``t + h`` falls after the close of ``t``'s session: **the last
``h`` bars of every session (09:30-16:00 -> 15:50..15:59; early closes
12:50..12:59) have no label; they are neither trained on nor predicted nor
scored** (they still appear inside later windows as history). ``close[t + h]``
is the last traded close at or before ``t + h`` within the session.

**Learned label** (Qlib's data keys). The handler's raw data (``DK_R``) and inference data
(``DK_I``) hold this raw label. ``learn_processors`` (Qlib's own list, label processors only:
``CSRankNorm``, ``CSZScoreNorm``, ``DropnaLabel``; see
:mod:`rolling_calib.qlib_adapter.label_processors`) give the learn data (``DK_L``) a label
normalised **per minute bar** across the instruments -- Qlib's cross-sectional processors group
by datetime, and a datetime here is one minute. ``prepare(segment, data_key=DK_L)`` samples
and labels with it (what ``RollingLSTM`` trains and early-stops on); a bar whose learned label
is undefined is then no sample. Without learn processors ``DK_L`` is the raw label.

Missing data policy (every repair is counted in ``handler.data_report``)
-----------------------------------------------------------------------
* A missing bar (no trade in that minute, NaN in the store) is a flat bar at the
  last close: prices forward-filled from the previous close, volume 0. Such a bar
  is never a prediction time (its label is NaN); it only appears as history.
* A missing or non-positive ``$vwap`` on a real bar is replaced by that bar's close;
  missing open/high/low on a real bar by its close; non-positive prices are
  treated as missing.
* Bars before an instrument's first trade are back-filled with its first bar.
* Windows that reach back before the previous session simply continue into the
  previous session's last bars (the overnight gap is part of the history, as in
  Qlib's ``TSDatasetH`` on a continuous calendar). Windows that reach back before
  the start of the loaded data repeat the first loaded bar (Qlib's
  ``fillna_type="ffill+bfill"``). Load a little history before the first segment
  (``start_time`` earlier than the train start) to avoid this.

Time bounds
-----------
All segment and fit bounds are inclusive. A bound without a time of day
(``"2018-01-31"``) means the whole day: as a start it is 00:00, as an **end** it
is 23:59:59.999 (unlike a bare ``pd.Timestamp`` in Qlib, which would drop the
last day's minutes).

Usage (needs a Qlib minute store; ``tests/qlib_adapter/test_dataset_minute.py`` runs it on a tiny one)::

    handler = {"class": "MinuteBarHandler", "module_path": "rolling_calib.qlib_adapter.dataset",
               "kwargs": {"instruments": "us25", "start_time": "2018-01-02", "end_time": "2018-03-30",
                          "fit_start_time": "2018-01-02", "fit_end_time": "2018-02-28"}}
    ds = MinuteTSDataset(handler=handler, segments={"train": ("2018-01-02", "2018-02-20"),
                         "valid": ("2018-02-21", "2018-02-28"), "test": ("2018-03-01", "2018-03-30")},
                         step_len=60, sample_stride=5)
    x, y = ds.prepare("train").batch(np.arange(4))
    x.shape                                 # (4, 60, 6)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from qlib.data.dataset import DatasetH
from qlib.data.dataset.handler import DataHandler, DataHandlerLP
from qlib.data.dataset.loader import QlibDataLoader
from qlib.data.dataset.utils import fetch_df_by_col
from qlib.log import get_module_logger

from rolling_calib.core.validation import BARS, Interval, check, validate_params
from rolling_calib.qlib_adapter.label_processors import (LabelProcessors, NoProcessors, apply_label_processors,
                                                         build_label_processors, processors_key)

__all__ = [
    "FEATURE_NAMES",
    "BarPanel",
    "WindowNorm",
    "MinuteBarLoader",
    "MinuteBarHandler",
    "MinutePanelHandler",
    "MinuteWindowSampler",
    "MinuteTSDataset",
    "compute_labels",
    "build_panel",
    "build_panel_from_grids",
    "fit_window_norm",
    "clear_cache",
]

#: Per-bar channels of the feature window, in order.
FEATURE_NAMES: tuple[str, ...] = ("open", "high", "low", "close", "vwap", "volume")
_PRICE_FIELDS: tuple[str, ...] = ("open", "high", "low", "close", "vwap")
_CLOSE = 3  # index of close in FEATURE_NAMES
_VOLUME = 5
LABEL_NAME = "LABEL0"
_MAD_TO_STD = 1.4826

#: Declared constraints of the handler's and dataset's options (:mod:`rolling_calib.core.validation`).
_COUNT = BARS  # label_horizon, window, norm_samples, step_len, strides
_CLIP = Interval(float, 0, None, closed="neither", allow_inf=True)  # inf: no clipping

_logger = get_module_logger("rolling_calib.qlib_adapter.dataset")


# --------------------------------------------------------------------------- time helpers
def _start_point(value: Any) -> pd.Timestamp | None:
    """Inclusive lower bound: ``None`` stays unbounded."""
    return None if value is None else pd.Timestamp(value)


def _end_point(value: Any) -> pd.Timestamp | None:
    """Inclusive upper bound; a bare date (midnight) means the end of that day."""
    if value is None:
        return None
    ts = pd.Timestamp(value)
    if ts == ts.normalize():
        ts = ts + pd.Timedelta(days=1) - pd.Timedelta(microseconds=1)
    return ts


def _segment_bounds(seg: Any, *, what: str) -> tuple[pd.Timestamp | None, pd.Timestamp | None] | None:
    """Parse a segment ``(start, end)`` / ``slice``; ``None`` means an empty segment."""
    if seg is None:
        return None
    if isinstance(seg, slice):
        return _start_point(seg.start), _end_point(seg.stop)
    if isinstance(seg, (tuple, list)) and len(seg) == 2:
        return _start_point(seg[0]), _end_point(seg[1])
    raise ValueError(f"{what}: expected a (start, end) pair, a slice or None, found {seg!r}")


# --------------------------------------------------------------------------- labels
def compute_labels(close: np.ndarray, session_id: np.ndarray, *, horizon: int) -> np.ndarray:
    """Forward return in basis points that never spans a session close.

    .. math:: y_t = 10^4 \\left(\\frac{c^{ff}_{t+h}}{c_t} - 1\\right)

    where ``c`` is the raw close of one instrument on consecutive calendar minutes,
    ``c^{ff}`` its forward fill, and ``y_t`` is ``NaN`` when ``c_t`` is missing or
    ``t + h`` lies outside ``t``'s session (or past the data).

    Parameters
    ----------
    close : ndarray, shape (n_instruments, n_minutes)
        Raw closes (``NaN`` = no bar).
    session_id : ndarray of int, shape (n_minutes,)
        Session number of each calendar minute.
    horizon : int
        ``h`` in bars, >= 1.

    Returns
    -------
    ndarray of float32, same shape as ``close``.

    Example
    -------
    >>> c = np.array([[100., 101., 102., 103.]])
    >>> compute_labels(c, np.array([0, 0, 0, 1]), horizon=1).round(1).tolist()
    [[100.0, 99.0, nan, nan]]
    """
    close = np.asarray(close, dtype=np.float64)
    if close.ndim != 2:
        raise ValueError(f"close: expected a 2-d array (instruments, minutes), found shape {close.shape}")
    if horizon < 1:
        raise ValueError(f"horizon: expected an integer >= 1, found {horizon}")
    n_min = close.shape[1]
    out = np.full(close.shape, np.nan, dtype=np.float32)
    if n_min <= horizon:
        return out
    ffill = _ffill_2d(close)
    same = session_id[horizon:] == session_id[:-horizon]  # (n_min - h,)
    ratio = ffill[:, horizon:] / close[:, :-horizon]
    lab = np.where(same[None, :], 1e4 * (ratio - 1.0), np.nan)
    out[:, :-horizon] = lab.astype(np.float32)
    return out


def _ffill_2d(a: np.ndarray) -> np.ndarray:
    """Forward-fill NaN along axis 1 (vectorised)."""
    mask = np.isnan(a)
    idx = np.where(~mask, np.arange(a.shape[1])[None, :], 0)
    np.maximum.accumulate(idx, axis=1, out=idx)
    out = a[np.arange(a.shape[0])[:, None], idx]
    return out


def _bfill_leading_2d(a: np.ndarray) -> np.ndarray:
    """Fill leading NaNs of each row with the row's first finite value."""
    mask = np.isnan(a)
    first = np.argmax(~mask, axis=1)
    rows = np.arange(a.shape[0])
    firstval = a[rows, first]
    lead = np.arange(a.shape[1])[None, :] < first[:, None]
    return np.where(lead, firstval[:, None], a)


# --------------------------------------------------------------------------- panel
@dataclass
class BarPanel:
    """Per-bar arrays of one load: instruments x calendar minutes, contiguous.

    Attributes
    ----------
    instruments : list of str
        Sorted instrument names (row blocks of ``values``).
    times : DatetimeIndex
        The calendar minutes (columns), naive New York time.
    session_id : ndarray of int32, (n_minutes,)
        Session (trading day) number of each minute.
    values : ndarray of float32, (n_instruments * n_minutes, 6)
        ``log`` prices and ``log1p`` volume, missing data filled (see module doc).
        Row ``i * n_minutes + j`` is instrument ``i`` at minute ``j``.
    label : ndarray of float32, (n_instruments, n_minutes)
        Label in basis points, NaN where undefined.
    report : dict
        Counts of every repair made while building the panel.
    """

    instruments: list[str]
    times: pd.DatetimeIndex
    session_id: np.ndarray
    values: np.ndarray
    label: np.ndarray
    report: dict = field(default_factory=dict)

    @property
    def n_minutes(self) -> int:
        return len(self.times)

    @property
    def minute_of_session(self) -> np.ndarray:
        """Bar number within its session (0 = the session's first loaded bar), per minute."""
        mos = getattr(self, "_mos", None)
        if mos is None:
            first = np.r_[0, np.nonzero(np.diff(self.session_id))[0] + 1]
            starts = np.repeat(first, np.diff(np.r_[first, len(self.session_id)]))
            mos = np.arange(len(self.session_id)) - starts
            self._mos = mos
        return mos

    def positions(self, start: pd.Timestamp | None, end: pd.Timestamp | None, *, stride: int = 1,
                  label: np.ndarray | None = None) -> np.ndarray:
        """Flat row positions of labelled bars in ``[start, end]``, ordered (datetime, instrument).

        ``stride`` keeps the bars whose number within the session is a multiple of ``stride``
        (09:30, 09:30 + stride, ...: the same times whatever range was loaded, aligned across
        instruments). With ``label`` (a learned label, same shape as :attr:`label`) a bar must
        have a finite value there too.
        """
        lo = 0 if start is None else int(self.times.searchsorted(start, side="left"))
        hi = self.n_minutes if end is None else int(self.times.searchsorted(end, side="right"))
        if hi <= lo:
            return np.empty(0, dtype=np.int64)
        cols = np.arange(lo, hi, dtype=np.int64)
        if stride > 1:
            cols = cols[self.minute_of_session[cols] % stride == 0]
        ok = np.isfinite(self.label[:, cols])  # (n_inst, n_cols)
        if label is not None and label is not self.label:
            ok &= np.isfinite(label[:, cols])
        col_idx, inst_idx = np.nonzero(ok.T)  # datetime-major order
        return inst_idx.astype(np.int64) * self.n_minutes + cols[col_idx]

    def index_of(self, positions: np.ndarray) -> pd.MultiIndex:
        """``(datetime, instrument)`` MultiIndex of flat positions."""
        inst, col = np.divmod(positions, self.n_minutes)
        return pd.MultiIndex.from_arrays(
            [self.times[col], pd.Index(np.asarray(self.instruments, dtype=object)[inst])],
            names=["datetime", "instrument"],
        )

    def labels_at(self, positions: np.ndarray, label: np.ndarray | None = None) -> np.ndarray:
        """Labels (float32) at flat positions: of :attr:`label` (bp), or of ``label`` (same shape)."""
        inst, col = np.divmod(positions, self.n_minutes)
        return (self.label if label is None else label)[inst, col]

    def learned_label(self, processors: list) -> np.ndarray:
        """:attr:`label` through Qlib label ``processors`` (:func:`.label_processors.apply_label_processors`).

        Kept with the panel per processors' state (a digest of their pickle), so the seeds of a
        window compute it once; ``(n_instruments, n_minutes)`` float32 (4 bytes a bar).
        """
        key = processors_key(processors)
        cache = self.__dict__.setdefault("_learned", {})
        if key is None or key not in cache:
            learned = apply_label_processors(self.label, self.times, self.instruments, processors,
                                             label_name=LABEL_NAME)
            if key is None:
                return learned
            cache[key] = learned
        return cache[key]

    def windows(self, positions: np.ndarray, step_len: int) -> np.ndarray:
        """Raw relative windows ``(B, step_len, 6)`` (log ratios, before normalisation).

        Lags reaching before the instrument's first loaded minute repeat that minute.
        Row order in time: oldest first, the prediction bar last.
        """
        positions = np.asarray(positions, dtype=np.int64)
        block_start = (positions // self.n_minutes) * self.n_minutes
        offs = np.arange(-(step_len - 1), 1, dtype=np.int64)
        idx = np.maximum(positions[:, None] + offs[None, :], block_start[:, None])
        w = self.values[idx]  # (B, T, 6) float32 copy
        last = w[:, -1:, :]
        w[:, :, :5] -= last[:, :, _CLOSE : _CLOSE + 1]
        w[:, :, _VOLUME] -= last[:, :, _VOLUME]
        return w


def build_panel(frame: pd.DataFrame, *, label_horizon: int) -> BarPanel:
    """Build a :class:`BarPanel` from a Qlib feature frame indexed (datetime, instrument).

    ``frame`` has columns ``FEATURE_NAMES`` (raw prices and volume); its minutes are
    taken as the calendar, and instrument/minute pairs absent from it are missing bars.
    """
    missing_cols = [c for c in FEATURE_NAMES if c not in frame.columns]
    if missing_cols:
        raise ValueError(f"feature frame: expected columns {list(FEATURE_NAMES)}, missing {missing_cols}")
    dt = frame.index.get_level_values("datetime")
    inst = frame.index.get_level_values("instrument")
    times = pd.DatetimeIndex(dt.unique()).sort_values()
    instruments = sorted(pd.Index(inst).unique().astype(str).tolist())
    ii = pd.Index(instruments).get_indexer(inst.astype(str))
    tt = times.get_indexer(dt)
    grids = {}
    for col in FEATURE_NAMES:
        g = np.full((len(instruments), len(times)), np.nan, dtype=np.float32)
        g[ii, tt] = frame[col].to_numpy(dtype=np.float32, na_value=np.nan)
        grids[col] = g
    return build_panel_from_grids(instruments, times, grids, label_horizon=label_horizon)


def build_panel_from_grids(instruments: list[str], times: pd.DatetimeIndex, grids: dict[str, np.ndarray], *,
                           label_horizon: int) -> BarPanel:
    """Build a :class:`BarPanel` from raw ``(n_instruments, n_minutes)`` arrays of each field.

    Applies the missing-data policy of the module doc and counts every repair in ``report``.
    ``grids`` may be modified in place (they are consumed).
    """
    n_i, n_t = len(instruments), len(times)
    for name in FEATURE_NAMES:
        if name not in grids or grids[name].shape != (n_i, n_t):
            found = None if name not in grids else grids[name].shape
            raise ValueError(f"field ${name}: expected an array of shape {(n_i, n_t)}, found {found}")
    report: dict[str, Any] = {"instruments": n_i, "minutes": n_t}
    close = grids.pop("close").astype(np.float64)
    bad_close = np.isfinite(close) & (close <= 0)
    report["nonpositive_close_masked"] = int(bad_close.sum())
    close[bad_close] = np.nan
    real_bar = np.isfinite(close)
    report["missing_bars_filled"] = int((~real_bar).sum())
    empty = [instruments[i] for i in np.nonzero(~real_bar.any(axis=1))[0]]
    if empty:
        raise ValueError(
            f"instruments {empty}: expected at least one bar with a positive $close in the loaded range "
            f"{times[0] if n_t else None} .. {times[-1] if n_t else None}, found none"
        )
    ffilled = _ffill_2d(close)
    report["leading_bars_backfilled"] = int((~np.isfinite(ffilled)).sum())
    close_ff = _bfill_leading_2d(ffilled)
    del ffilled

    values = np.empty((n_i, n_t, 6), dtype=np.float32)
    for k, name in enumerate(_PRICE_FIELDS):
        if name == "close":
            values[:, :, k] = np.log(close_ff)
            continue
        p = grids.pop(name)
        good = real_bar & np.isfinite(p) & (p > 0)
        report[f"{name}_filled_from_close"] = int((real_bar & ~good).sum())
        values[:, :, k] = np.log(np.where(good, p, close_ff))
        del p, good
    vol = grids.pop("volume")
    bad_vol = ~np.isfinite(vol) | (vol < 0)
    report["volume_set_to_zero"] = int((bad_vol & real_bar).sum())
    values[:, :, _VOLUME] = np.log1p(np.where(bad_vol, 0.0, vol))
    del vol, bad_vol, close_ff

    session_id = pd.factorize(times.normalize())[0].astype(np.int32)
    label = compute_labels(close, session_id, horizon=label_horizon)
    report["labelled_bars"] = int(np.isfinite(label).sum())
    report["unlabelled_real_bars"] = int((real_bar & ~np.isfinite(label)).sum())
    return BarPanel(
        instruments=list(instruments),
        times=times,
        session_id=session_id,
        values=values.reshape(n_i * n_t, 6),
        label=label,
        report=report,
    )


# --------------------------------------------------------------------------- normalisation
@dataclass
class WindowNorm:
    """Robust z-score of every (lag, channel) cell of the feature window.

    .. math:: z = \\mathrm{clip}\\left(\\frac{x - \\mathrm{median}}{1.4826\\,\\mathrm{MAD}}, -c, c\\right)

    ``center``/``scale`` have shape ``(window, 6)``, oldest lag first; a cell with
    ``MAD == 0`` (e.g. the close at lag 0, always 0) gets scale 1.

    Example
    -------
    >>> n = WindowNorm(center=np.zeros((2, 6), np.float32), scale=np.full((2, 6), 2, np.float32), clip=3.0)
    >>> float(n.apply(np.full((1, 2, 6), 4.0, np.float32))[0, 0, 0])
    2.0
    """

    center: np.ndarray
    scale: np.ndarray
    clip: float = 3.0
    n_samples: int = 0

    @classmethod
    def fit(cls, windows: np.ndarray, *, clip: float = 3.0) -> "WindowNorm":
        """Fit median / MAD per cell on raw windows ``(N, T, 6)``."""
        if windows.shape[0] == 0:
            raise ValueError("WindowNorm.fit: expected at least one training window, found none")
        center = np.median(windows, axis=0)
        mad = np.median(np.abs(windows - center[None]), axis=0)
        scale = np.where(mad > 1e-12, mad * _MAD_TO_STD, 1.0)
        return cls(center=center.astype(np.float32), scale=scale.astype(np.float32), clip=float(clip),
                   n_samples=int(windows.shape[0]))

    def apply(self, windows: np.ndarray) -> np.ndarray:
        """Normalise raw windows ``(B, T, 6)`` in place (T <= fitted window; last T lags used)."""
        t = windows.shape[1]
        windows -= self.center[-t:]
        windows /= self.scale[-t:]
        np.clip(windows, -self.clip, self.clip, out=windows)
        np.nan_to_num(windows, copy=False, nan=0.0)
        return windows

    def to_dict(self) -> dict:
        return {"center": self.center.tolist(), "scale": self.scale.tolist(), "clip": self.clip,
                "n_samples": self.n_samples}

    @classmethod
    def from_dict(cls, d: dict) -> "WindowNorm":
        return cls(center=np.asarray(d["center"], np.float32), scale=np.asarray(d["scale"], np.float32),
                   clip=float(d["clip"]), n_samples=int(d.get("n_samples", 0)))


def fit_window_norm(panel: BarPanel, start: pd.Timestamp | None, end: pd.Timestamp | None, *,
                    window: int, max_samples: int, clip: float) -> WindowNorm:
    """Fit :class:`WindowNorm` on up to ``max_samples`` evenly spaced labelled bars in ``[start, end]``.

    Deterministic: no random draw (evenly spaced subsample of the range).
    """
    pos = panel.positions(start, end)
    if len(pos) == 0:
        raise ValueError(
            f"fit_start_time/fit_end_time = {start} .. {end}: expected labelled bars to fit the feature "
            f"normalisation on, found none in the loaded range {panel.times[0]} .. {panel.times[-1]}"
        )
    if len(pos) > max_samples:
        pos = pos[np.linspace(0, len(pos) - 1, max_samples).round().astype(np.int64)]
    return WindowNorm.fit(panel.windows(pos, window), clip=clip)


# --------------------------------------------------------------------------- loading + cache
_CACHE: "OrderedDict[tuple, BarPanel]" = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 2


def clear_cache() -> None:
    """Drop the in-process cache of loaded panels."""
    with _CACHE_LOCK:
        _CACHE.clear()


def _provider_key(freq: str) -> str:
    from qlib.config import C

    uri = C.get("provider_uri")
    if isinstance(uri, dict):
        uri = uri.get(freq, uri)
    return str(uri)


class MinuteBarLoader(QlibDataLoader):
    """:class:`QlibDataLoader` for the six per-bar fields at ``freq``.

    ``load`` (inherited) returns Qlib's usual frame through ``D.features``.
    :meth:`load_panel` reads the same values through the same provider one level down --
    Qlib's ``D.list_instruments`` (universe file and spans), ``Cal.locate_index`` (calendar)
    and ``ExpressionD.expression`` (one series per instrument and field, exactly what
    ``D.features`` calls per instrument) -- but writes them straight into contiguous arrays
    instead of building a pandas frame with a per-instrument ``Timestamp`` index (which is
    most of ``D.features``' time at minute scale). The resulting :class:`BarPanel` is kept
    in an in-process cache keyed by (provider uri, instruments, range, freq, horizon), so
    consecutive windows and seeds in one worker read the store once.

    Parameters
    ----------
    freq : str
        Qlib frequency of the store (``"1min"``).
    """

    def __init__(self, *, freq: str = "1min"):
        exprs = [f"${n}" for n in FEATURE_NAMES]
        super().__init__(config={"feature": (exprs, list(FEATURE_NAMES))}, freq=freq)

    def _read_panel(self, instruments, start: pd.Timestamp | None, end: pd.Timestamp | None, *,
                    label_horizon: int) -> BarPanel:
        from qlib.data import D
        from qlib.data.data import Cal, ExpressionD

        if isinstance(instruments, str):
            spans = D.list_instruments(D.instruments(instruments), start, end, freq=self.freq, as_list=False)
        else:
            spans = {str(i): None for i in instruments}
        if not spans:
            raise ValueError(f"instruments {instruments!r}: expected at least one instrument listed in "
                             f"{start} .. {end} by the Qlib provider {_provider_key(self.freq)}, found none")
        calendar = Cal.calendar(freq=self.freq)
        if len(calendar) == 0:
            raise ValueError(f"Qlib provider {_provider_key(self.freq)}: expected a {self.freq} calendar, found it empty")
        start = pd.Timestamp(calendar[0]) if start is None else start
        end = pd.Timestamp(calendar[-1]) if end is None else end
        if start > pd.Timestamp(calendar[-1]) or end < pd.Timestamp(calendar[0]) or start > end:
            raise ValueError(f"start_time/end_time = {start} .. {end}: expected a range overlapping the store's "
                             f"calendar {calendar[0]} .. {calendar[-1]} ({_provider_key(self.freq)})")
        _, _, lo, hi = Cal.locate_index(start, end, freq=self.freq, future=False)
        times = pd.DatetimeIndex(np.asarray(calendar[lo : hi + 1], dtype="datetime64[ns]"),
                                 name="datetime")
        names = sorted(spans)
        grids = {f: np.full((len(names), len(times)), np.nan, dtype=np.float32) for f in FEATURE_NAMES}
        for i, inst in enumerate(names):
            keep = None
            if spans[inst] is not None:
                keep = np.zeros(len(times), dtype=bool)
                for a, b in spans[inst]:
                    keep |= (times >= pd.Timestamp(a)) & (times <= pd.Timestamp(b))
            for f in FEATURE_NAMES:
                series = ExpressionD.expression(inst, f"${f}", start, end, self.freq)
                if series.empty:
                    continue
                pos = series.index.to_numpy(dtype=np.int64) - lo
                ok = (pos >= 0) & (pos < len(times))
                grids[f][i, pos[ok]] = series.to_numpy(dtype=np.float32)[ok]
                if keep is not None:
                    grids[f][i, ~keep] = np.nan
        return build_panel_from_grids(names, times, grids, label_horizon=label_horizon)

    def load_panel(self, instruments, start_time, end_time, *, label_horizon: int) -> BarPanel:
        """The :class:`BarPanel` of ``instruments`` over ``[start_time, end_time]`` (cached)."""
        inst_key = instruments if isinstance(instruments, str) else tuple(sorted(instruments))
        key = (_provider_key(self.freq), inst_key, str(_start_point(start_time)), str(_end_point(end_time)),
               self.freq, int(label_horizon))
        with _CACHE_LOCK:
            if key in _CACHE:
                _CACHE.move_to_end(key)
                return _CACHE[key]
        panel = self._read_panel(instruments, _start_point(start_time), _end_point(end_time),
                                 label_horizon=label_horizon)
        with _CACHE_LOCK:
            _CACHE[key] = panel
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
        return panel


# --------------------------------------------------------------------------- handler
class MinuteBarHandler(DataHandlerLP):
    """Qlib data handler of minute bars: per-bar OHLCV + VWAP, a 10-minute label, a fitted window norm.

    The handler's frame (``fetch``) holds the per-bar *raw-log* channels under
    ``feature`` and the label under ``label`` (one row per instrument and calendar
    minute); the model-ready windows come from :class:`MinuteTSDataset`. Its raw
    (``DK_R``) and infer (``DK_I``) data hold the raw label; its learn data (``DK_L``) the
    label through ``learn_processors`` (the raw label when there are none). Rows of bars
    without a label stay in every frame (they are windows' history) with a ``NaN`` label.

    Parameters
    ----------
    instruments : str or list of str
        Qlib universe name (``"us25"``) or symbols.
    start_time, end_time : date-like
        Range loaded from the store (include some history before the first segment).
    fit_start_time, fit_end_time : date-like, optional
        Range the feature normalisation is fitted on -- set it to the window's training
        segment. ``None`` means the loaded range's bound (beware of look-ahead).
    freq : str
        Qlib frequency, ``"1min"``.
    label_horizon : int
        ``h`` of the forward return, in bars (default 10).
    window : int
        Number of lags the normalisation is fitted for (>= the dataset's ``step_len``).
    norm_samples : int
        At most this many evenly spaced training bars fit the normalisation.
    clip : float
        Normalised features are clipped to ``[-clip, clip]`` (Alpha360: 3).
    learn_processors : list
        Qlib's learn processors, as ``DataHandlerLP`` takes them (``"DropnaLabel"``,
        ``{"class": "CSRankNorm", "kwargs": {"fields_group": "label"}}``, a ``module_path``
        config or a ``Processor`` instance), restricted to label processors that fit nothing
        (:mod:`~rolling_calib.qlib_adapter.label_processors`); applied per minute bar.
    infer_processors, shared_processors : list
        Accepted for Qlib's signature, empty only: the features are normalised by the
        handler's fitted window norm, and label processors belong in ``learn_processors``.

    Attributes
    ----------
    panel : BarPanel
    norm : WindowNorm
    data_report : dict
        Every repair made while loading (counts), see the module doc.
    """

    @validate_params({"label_horizon": _COUNT, "window": _COUNT, "norm_samples": _COUNT, "clip": _CLIP,
                      "learn_processors": LabelProcessors(), "infer_processors": NoProcessors(),
                      "shared_processors": NoProcessors()})
    def __init__(
        self,
        *,
        instruments: str | list[str] = "us25",
        start_time: Any = None,
        end_time: Any = None,
        fit_start_time: Any = None,
        fit_end_time: Any = None,
        freq: str = "1min",
        label_horizon: int = 10,
        window: int = 60,
        norm_samples: int = 20_000,
        clip: float = 3.0,
        learn_processors: list | tuple = (),
        infer_processors: list | tuple = (),
        shared_processors: list | tuple = (),
        **kwargs: Any,
    ):
        allowed = {"init_data", "fetch_orig"}
        unknown = sorted(set(kwargs) - allowed)
        if unknown:
            raise TypeError(f"MinuteBarHandler: unknown keyword argument(s) {unknown}; expected any of "
                            "instruments, start_time, end_time, fit_start_time, fit_end_time, freq, "
                            "label_horizon, window, norm_samples, clip, learn_processors")
        if start_time is not None and end_time is not None and _start_point(start_time) > _end_point(end_time):
            raise ValueError(f"start_time/end_time: expected start <= end, found {start_time} > {end_time}")
        self.fit_start_time = fit_start_time
        self.fit_end_time = fit_end_time
        self.freq = freq
        self.label_horizon = int(label_horizon)
        self.window = int(window)
        self.norm_samples = int(norm_samples)
        self.clip = float(clip)
        super().__init__(instruments=instruments, start_time=start_time, end_time=end_time,
                         data_loader=self._loader(freq), learn_processors=build_label_processors(learn_processors),
                         **kwargs)

    def _loader(self, freq: str) -> "MinuteBarLoader":
        """The loader of this handler's panel: Qlib's provider, through :class:`MinuteBarLoader`."""
        return MinuteBarLoader(freq=freq)

    def setup_data(self, init_type: str = DataHandlerLP.IT_FIT_SEQ, **kwargs):
        """Load the panel (cached), expose it as Qlib's frame, fit the normalisation."""
        self._panel = self.data_loader.load_panel(self.instruments, self.start_time, self.end_time,
                                                  label_horizon=self.label_horizon)
        self._frame = None  # Qlib's per-bar frame, built on first fetch (see _get_df_by_key)
        self._learn_frame = None  # the same with the learned label (learn processors only)
        self._norm = fit_window_norm(
            self._panel, _start_point(self.fit_start_time), _end_point(self.fit_end_time),
            window=self.window, max_samples=self.norm_samples, clip=self.clip,
        )
        _logger.info(f"MinuteBarHandler loaded {self._panel.report}")

    def label_array(self, data_key: str = DataHandlerLP.DK_I) -> np.ndarray:
        """The label of ``data_key``, ``(n_instruments, n_minutes)`` as :attr:`BarPanel.label`.

        ``DK_R`` and ``DK_I``: the raw label (bp); ``DK_L``: the label through ``learn_processors``
        (computed once per panel and processors; the raw label itself when there are none).
        """
        if data_key not in self.ATTR_MAP:
            raise ValueError(f"data_key: expected one of {sorted(self.ATTR_MAP)}, found {data_key!r}")
        if data_key != self.DK_L or not self.learn_processors:
            return self.panel.label
        return self.panel.learned_label(self.learn_processors)

    def _get_df_by_key(self, data_key: str = DataHandlerLP.DK_I) -> pd.DataFrame:
        """Qlib's frame of ``data_key`` (raw == infer; learn with the learned label), built lazily once."""
        label = self.label_array(data_key)
        if label is not self.panel.label:
            if getattr(self, "_learn_frame", None) is None:
                self._learn_frame = _panel_frame(self.panel, label=label)
            return self._learn_frame
        if getattr(self, "_frame", None) is None:
            self._frame = _panel_frame(self.panel)
        return self._frame

    def get_cols(self, col_set=DataHandler.CS_ALL, data_key: str = DataHandlerLP.DK_I) -> list:
        return fetch_df_by_col(self._get_df_by_key(data_key).head(), col_set).columns.to_list()

    def _ensure_data(self) -> None:
        # Qlib's Serializable drops "_" attributes when pickling: an unpickled handler reloads
        # its data here (from the in-process cache when possible).
        if getattr(self, "_panel", None) is None:
            self.setup_data()

    @property
    def panel(self) -> BarPanel:
        """The per-bar arrays (loaded on demand after unpickling)."""
        self._ensure_data()
        return self._panel

    @property
    def norm(self) -> WindowNorm:
        """The window normalisation fitted on ``[fit_start_time, fit_end_time]``."""
        self._ensure_data()
        return self._norm

    @property
    def data_report(self) -> dict:
        """Counts of every repair made while loading (see the module doc)."""
        return dict(self.panel.report)


class _GivenPanelLoader(MinuteBarLoader):
    """A :class:`MinuteBarLoader` whose panel is given (already in memory) instead of read from the store."""

    def __init__(self, panel: BarPanel, *, freq: str = "1min"):
        super().__init__(freq=freq)
        self.panel = panel

    def load_panel(self, instruments, start_time, end_time, *, label_horizon: int) -> BarPanel:
        """The given panel, as it is (its labels were computed when it was built)."""
        return self.panel


class MinutePanelHandler(MinuteBarHandler):
    """A :class:`MinuteBarHandler` over a :class:`BarPanel` already in memory (no store is read).

    Everything after loading is the parent's: the window normalisation fitted on
    ``[fit_start_time, fit_end_time]``, the raw and learned labels, Qlib's frame. The panel's
    labels are used as they are (``label_horizon`` is the one it was built with). For benches
    and device checks that time the model on data of the right shape without a Qlib store
    (:func:`rolling_calib.qlib_adapter.synthetic_panel.panel_dataset`).

    Parameters
    ----------
    panel : BarPanel
    **kwargs
        :class:`MinuteBarHandler`'s, except ``instruments``, ``start_time`` and ``end_time``
        (the panel's own).
    """

    def __init__(self, *, panel: BarPanel, **kwargs: Any):
        for name in ("instruments", "start_time", "end_time"):
            if name in kwargs:
                raise TypeError(f"MinutePanelHandler: {name} is the panel's own; do not pass it")
        self.given_panel = panel  # before the parent's __init__, which loads (setup_data)
        super().__init__(instruments=list(panel.instruments), start_time=panel.times[0], end_time=panel.times[-1],
                         **kwargs)

    def _loader(self, freq: str) -> MinuteBarLoader:
        return _GivenPanelLoader(self.given_panel, freq=freq)


def _panel_frame(panel: BarPanel, *, label: np.ndarray | None = None) -> pd.DataFrame:
    """The per-bar frame (datetime, instrument) x [feature..., label] -- a view Qlib code can fetch.

    Built from the panel's arrays (datetime-major rows, as Qlib sorts them); ``label`` replaces
    the panel's raw label (a learned one).
    """
    n_i, n_t = len(panel.instruments), panel.n_minutes
    vals = panel.values.reshape(n_i, n_t, 6).transpose(1, 0, 2).reshape(n_t * n_i, 6)
    lab = (panel.label if label is None else label).T.reshape(-1, 1)
    index = pd.MultiIndex.from_product([panel.times, pd.Index(panel.instruments)], names=["datetime", "instrument"])
    cols = pd.MultiIndex.from_tuples([("feature", n) for n in FEATURE_NAMES] + [("label", LABEL_NAME)])
    return pd.DataFrame(np.concatenate([vals, lab], axis=1), index=index, columns=cols)


# --------------------------------------------------------------------------- sampler
class MinuteWindowSampler:
    """Lazy sequence of (window, label) samples of one segment; windows cut per batch.

    Behaves like Qlib's ``TSDataSampler`` / a torch ``Dataset``: ``len``,
    ``sampler[i] -> (x (T, 6), y)``, ``get_index()``; plus a vectorised
    :meth:`batch` that cuts many windows at once.

    Parameters
    ----------
    panel : BarPanel
    positions : ndarray of int64
        Flat panel rows of the prediction times, ordered (datetime, instrument).
    step_len : int
    norm : WindowNorm
    label : ndarray, optional
        The label the samples carry, shaped as ``panel.label`` (a handler's
        :meth:`~MinuteBarHandler.label_array`); default the panel's raw label (bp).
    """

    def __init__(self, panel: BarPanel, positions: np.ndarray, *, step_len: int, norm: WindowNorm,
                 label: np.ndarray | None = None):
        if norm.center.shape[0] < step_len:
            raise ValueError(f"step_len: expected <= the handler's window {norm.center.shape[0]}, found {step_len}")
        self.panel = panel
        self.positions = np.asarray(positions, dtype=np.int64)
        self.step_len = int(step_len)
        self.norm = norm
        self.label = panel.label if label is None else label

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def empty(self) -> bool:
        return len(self) == 0

    def with_norm(self, norm: WindowNorm) -> "MinuteWindowSampler":
        """Same samples, another normalisation (e.g. the one a model was trained with)."""
        return MinuteWindowSampler(self.panel, self.positions, step_len=self.step_len, norm=norm, label=self.label)

    @property
    def labels(self) -> np.ndarray:
        """Labels (float32; bp unless learn-processed), sample order."""
        return self.panel.labels_at(self.positions, self.label)

    def get_index(self) -> pd.MultiIndex:
        """``(datetime, instrument)`` index of the samples, sample order."""
        return self.panel.index_of(self.positions)

    def batch(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Normalised windows ``(B, step_len, 6)`` float32 and labels ``(B,)`` of samples ``idx``."""
        pos = self.positions[np.asarray(idx, dtype=np.int64)]
        x = self.norm.apply(self.panel.windows(pos, self.step_len))
        return x, self.panel.labels_at(pos, self.label)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.float32]:
        x, y = self.batch(np.array([i]))
        return x[0], y[0]


# --------------------------------------------------------------------------- dataset
class MinuteTSDataset(DatasetH):
    """Qlib ``DatasetH`` of minute windows: ``prepare(segment)`` returns a :class:`MinuteWindowSampler`.

    Parameters
    ----------
    handler : dict or MinuteBarHandler
        Handler config (``module_path``/``class``/``kwargs``) or instance.
    segments : dict
        ``{"train": (start, end), "valid": (start, end) or None, "test": (start, end)}``;
        bounds inclusive (a bare end date includes that whole day). A missing or ``None``
        segment is empty.
    step_len : int
        Bars per window (<= the handler's ``window``), default 60.
    sample_stride : int
        Prediction times of ``train`` and ``valid`` are the bars ``09:30 + k * sample_stride``
        of every session (the same clock times for all instruments and whatever range is loaded).
    test_stride : int
        The same for every other segment (``test``), default 1 (every bar is predicted and scored).
    """

    TRAIN_SEGMENTS = ("train", "valid")

    @validate_params({"step_len": _COUNT, "sample_stride": _COUNT, "test_stride": _COUNT})
    def __init__(self, *, handler: Any, segments: dict, step_len: int = 60, sample_stride: int = 1,
                 test_stride: int = 1, **kwargs: Any):
        unknown = sorted(set(kwargs) - {"fetch_kwargs"})
        if unknown:
            raise TypeError(f"MinuteTSDataset: unknown keyword argument(s) {unknown}; expected handler, segments, "
                            "step_len, sample_stride, test_stride")
        if not isinstance(segments, dict):
            raise ValueError(f"segments: expected a dict of name -> (start, end), found {type(segments).__name__}")
        for name, seg in segments.items():
            _segment_bounds(seg, what=f"segments[{name!r}]")
        self.step_len = int(step_len)
        self.sample_stride = int(sample_stride)
        self.test_stride = int(test_stride)
        super().__init__(handler=handler, segments=segments, **kwargs)
        if not isinstance(self.handler, MinuteBarHandler):
            raise ValueError(f"handler: expected a MinuteBarHandler (config or instance), "
                             f"found {type(self.handler).__name__}")
        if self.handler.window < self.step_len:
            raise ValueError(f"step_len: expected <= handler window {self.handler.window}, found {self.step_len}")

    def _stride_for(self, name: str | None) -> int:
        return self.sample_stride if name in self.TRAIN_SEGMENTS else self.test_stride

    def _positions(self, segment: Any, stride: int | None, label: np.ndarray | None = None) -> np.ndarray:
        name = segment if isinstance(segment, str) else None
        if name is not None:
            if name not in self.segments:
                return np.empty(0, dtype=np.int64)
            seg = self.segments[name]
        else:
            seg = segment
        bounds = _segment_bounds(seg, what=f"segment {segment!r}")
        if bounds is None:
            return np.empty(0, dtype=np.int64)
        s = self._stride_for(name) if stride is None else stride
        check("stride", s, _COUNT)
        return self.handler.panel.positions(*bounds, stride=s, label=label)

    def prepare(self, segments: Any, col_set: Any = DataHandler.CS_ALL, data_key: str = DataHandlerLP.DK_I,
                *, stride: int | None = None, **kwargs: Any):
        """Samples of a segment (name, list of names, or ``(start, end)``) under Qlib's ``data_key``.

        Returns a :class:`MinuteWindowSampler`; with ``col_set="label"`` a one-column
        ``DataFrame`` of labels instead (what Qlib's ``SignalRecord`` asks for), same rows
        and order as the sampler. ``data_key`` picks the label (:meth:`MinuteBarHandler.label_array`):
        ``DK_I`` (default) and ``DK_R`` the raw label in bp, one sample per labelled bar;
        ``DK_L`` the learn-processed label, without the bars where it is undefined. The
        windows are the same under every key.

        Example (a handler with ``learn_processors: [{class: CSRankNorm, kwargs: {fields_group: label}}]``)::

            ds.prepare("train", data_key=DataHandlerLP.DK_L).labels      # rank-normalised per minute
            ds.prepare("test", col_set="label", data_key="raw")          # bp
        """
        if kwargs:
            raise TypeError(f"MinuteTSDataset.prepare: unknown keyword argument(s) {sorted(kwargs)}")
        if isinstance(segments, (list, tuple)) and all(isinstance(s, str) for s in segments):
            return [self.prepare(s, col_set=col_set, data_key=data_key, stride=stride) for s in segments]
        label = self.handler.label_array(data_key)
        pos = self._positions(segments, stride, label)
        sampler = MinuteWindowSampler(self.handler.panel, pos, step_len=self.step_len, norm=self.handler.norm,
                                      label=label)
        if col_set == "label":
            return pd.DataFrame({LABEL_NAME: sampler.labels}, index=sampler.get_index())
        return sampler

    def labels(self, segment: str, *, stride: int | None = None) -> pd.Series:
        """Raw labels (bp) of a segment, index (datetime, instrument), same rows/order as ``predict``."""
        sampler = self.prepare(segment, stride=stride)
        return pd.Series(sampler.labels, index=sampler.get_index(), name="label")
