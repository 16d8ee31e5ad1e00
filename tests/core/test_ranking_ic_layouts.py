"""IC and Rank IC per date on every row layout, against scipy date by date.

The correlations group rows by date in four ways (a (dates, instruments) view when every
date has as many rows; a +inf-padded matrix when counts differ; one lexsort when padding
would be large; a sort of the date codes first when rows are not in date order). Each is
checked against ``scipy.stats.pearsonr`` / ``spearmanr`` on random data with ties, unequal
group sizes, constant dates, single-row dates and non-finite values.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy import stats

from rolling_calib.core.ranking_ic import (
    _row_order,
    _row_ranks,
    daily_ic,
    daily_information_coefficients,
    information_coefficients,
    information_coefficients_arrays,
    prepare_labels,
)


def _frame(layout: str, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    dates = 40
    if layout == "equal":
        counts = np.full(dates, 9)
    else:
        counts = rng.integers(1, 12, dates)
        if layout == "one-huge-date":   # padding to the largest date would be large: the lexsort path
            counts[3] = 400
    times = pd.date_range("2021-03-01 09:30", periods=dates, freq="min").values
    n = int(counts.sum())
    label = rng.normal(size=n)
    label[rng.random(n) < 0.3] = 0.0                       # many ties in the labels
    prediction = np.round(0.4 * label + rng.normal(size=n), 1)  # and some in the predictions
    frame = pd.DataFrame({"datetime": np.repeat(times, counts), "prediction": prediction, "label": label})
    first = frame["datetime"] == times[0]
    frame.loc[first, "prediction"] = 2.5                   # a constant date: undefined
    if layout != "equal":   # rows leave: dates of different sizes
        frame.loc[rng.random(n) < 0.04, "prediction"] = np.nan
        frame.loc[rng.random(n) < 0.04, "label"] = np.inf
    if layout == "unsorted":
        frame = frame.sample(frac=1.0, random_state=seed)
    return frame


def _reference(frame: pd.DataFrame, method: str) -> pd.Series:
    """The correlation per date the obvious way: finite rows, scipy, NaN when undefined."""
    kept = frame[np.isfinite(frame["prediction"]) & np.isfinite(frame["label"])]
    fn = stats.pearsonr if method == "pearson" else stats.spearmanr
    out = {}
    for date, day in kept.groupby("datetime"):
        p, y = day["prediction"].to_numpy(), day["label"].to_numpy()
        if len(day) < 2 or np.ptp(p) == 0 or np.ptp(y) == 0:
            out[date] = math.nan
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out[date] = float(fn(p, y)[0])
    return pd.Series(out, dtype=float)


LAYOUTS = ["equal", "unequal", "one-huge-date", "unsorted"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("method", ["pearson", "spearman"])
def test_daily_values_match_scipy(layout, seed, method):
    frame = _frame(layout, seed)
    groups = prepare_labels(frame["label"], frame["datetime"]).groups
    assert (groups.width == 9) == (layout == "equal")   # the (dates, instruments) view is taken
    got, want = daily_ic(frame, method=method), _reference(frame, method)
    assert list(got.index) == list(pd.DatetimeIndex(want.index))
    assert np.array_equal(got.isna().to_numpy(), want.isna().to_numpy())
    np.testing.assert_allclose(got.dropna().to_numpy(), want.dropna().to_numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_summary_matches_scipy(layout):
    frame = _frame(layout, 7)
    ic, rank = _reference(frame, "pearson").dropna(), _reference(frame, "spearman").dropna()
    s = information_coefficients(frame)
    assert s.n_dates == len(ic)
    assert s.ic == pytest.approx(ic.mean(), abs=1e-12)
    assert s.icir == pytest.approx(ic.mean() / ic.std(ddof=1), rel=1e-10)
    assert s.rank_ic == pytest.approx(rank.mean(), abs=1e-12)


def test_row_ranks_are_scipy_average_ranks_with_padding():
    rng = np.random.default_rng(3)
    counts = rng.integers(1, 15, 200)
    m = np.full((200, 15), np.inf)
    for g, c in enumerate(counts):
        m[g, :c] = rng.integers(0, 5, c)             # ties everywhere
    centred, tied = _row_ranks(m, counts)
    for g, c in enumerate(counts):
        want = stats.rankdata(m[g, :c]) - (c + 1) / 2.0
        np.testing.assert_array_equal(centred[g, :c], want)
    has_tie = [len(np.unique(m[g, :c])) < c for g, c in enumerate(counts)]
    assert tied.tolist() == np.flatnonzero(has_tie).tolist()
    equal = rng.normal(size=(50, 6))
    centred, tied = _row_ranks(equal, None)
    np.testing.assert_array_equal(centred, np.apply_along_axis(stats.rankdata, 1, equal) - 3.5)
    assert tied.size == 0


_NEAR = [0.0, -0.0, 1.0, -1.0, 2.0, np.nextafter(2.0, 3.0), np.nextafter(2.0, 1.0), -np.nextafter(2.0, 3.0), -2.0,
         1e-300, -1e-300, 5e-324, -5e-324, 1e300, -1e300, np.inf]


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=2, max_side=40),
                  elements=st.one_of(st.sampled_from(_NEAR), st.floats(-1e6, 1e6, allow_nan=False))))
def test_row_order_sorts_every_row_exactly(m):
    """The packed-key sort is a sorted order of each row, whatever the ties, signed zeros, one-ulp neighbours,
    subnormals and +inf padding (rows over 32 wide take argsort), checked against np.sort."""
    for scratch in (None, (np.empty((41, 41), np.int64), np.empty((41, 41), np.int64))):
        at, s = _row_order(m, scratch=scratch)
        np.testing.assert_array_equal(s, np.sort(m, axis=1))
        np.testing.assert_array_equal(np.take(m, at), s)
        columns = at - (np.arange(m.shape[0]) * m.shape[1])[:, None]
        np.testing.assert_array_equal(np.sort(columns, axis=1), np.broadcast_to(np.arange(m.shape[1]), m.shape))


def test_row_ranks_of_one_ulp_neighbours_are_scipy_ranks():
    """Values a few ulps apart fall in one packed key: the check puts their rows right (ranks as scipy's)."""
    rng = np.random.default_rng(4)
    m = 2.0 + rng.integers(0, 4, (300, 25)) * np.spacing(2.0)
    centred, _ = _row_ranks(m, None)
    np.testing.assert_array_equal(centred, np.apply_along_axis(stats.rankdata, 1, m) - 13.0)


def test_prepared_labels_serve_many_predictions():
    """One preparation of the labels, many runs: the same values as preparing them per run."""
    frame = _frame("unequal", 11)
    labels = prepare_labels(frame["label"], frame["datetime"])
    rng = np.random.default_rng(0)
    for k in range(4):
        p = np.nan_to_num(frame["label"].to_numpy(), posinf=0.0) * k + rng.normal(size=len(frame))
        if k == 3:
            p[5] = np.nan   # a non-finite prediction where the label is finite: both leave
        run = frame.assign(prediction=p)
        assert information_coefficients_arrays(p, labels) == information_coefficients(run)


def test_matches_compares_values():
    y = np.array([1.0, np.nan, 2.0, 3.0])
    dates = np.array(["2020-01-02", "2020-01-02", "2020-01-03", "2020-01-03"], dtype="datetime64[ns]")
    labels = prepare_labels(y, dates)
    assert labels.matches(y.copy(), dates.copy())
    assert labels.matches(list(y), pd.Series(dates))
    y[0] = 5.0   # the prepared labels hold a copy: a later change is seen as different labels
    assert not labels.matches(y, dates)
    assert not labels.matches([1.0, np.nan, 2.0], dates[:3])
    later = dates.copy()
    later[3] += np.timedelta64(1, "D")
    assert not labels.matches([1.0, np.nan, 2.0, 3.0], later)


def test_missing_dates_and_empty_input():
    frame = pd.DataFrame({"datetime": pd.to_datetime(["2020-01-02"] * 3 + [None] * 2),
                          "prediction": [1.0, 2.0, 3.0, 4.0, 5.0], "label": [1.0, 3.0, 2.0, 9.0, 1.0]})
    assert daily_ic(frame).tolist() == pytest.approx([0.5])
    empty = information_coefficients(frame.iloc[:0])
    assert empty.n_dates == 0 and math.isnan(empty.ic)
    assert daily_ic(frame.iloc[:0], method="spearman").empty


def test_time_zone_aware_dates_group_by_instant():
    frame = _frame("unsorted", 5)
    local = frame.assign(datetime=frame["datetime"].dt.tz_localize("UTC").dt.tz_convert("America/New_York"))
    for method in ("pearson", "spearman"):
        np.testing.assert_array_equal(daily_ic(local, method=method).to_numpy(), daily_ic(frame, method=method).to_numpy())


def _with_nan_labels(frame: pd.DataFrame, seed: int) -> pd.DataFrame:
    """``frame`` with a few NaN labels (those rows leave both sides)."""
    rng = np.random.default_rng(100 + seed)
    out = frame.copy()
    out.loc[rng.random(len(out)) < 0.03, "label"] = np.nan
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("nan_labels", [False, True])
@pytest.mark.parametrize("block", [4, 1 << 15])   # values per block: many blocks (one date each), one block
def test_rank_and_value_correlations_equal_per_run_ranking_bit_for_bit(layout, nan_labels, block, monkeypatch):
    """Rank IC from the prediction's sort order against the label ranks (and Pearson centred a block of
    dates at a time) give exactly the numbers of ranking and centring both sides in row order."""
    from rolling_calib.core import ranking_ic as ric

    monkeypatch.setattr(ric, "_RANK_BLOCK", block)
    for seed in range(4):
        frame = _frame(layout, seed)
        frame = _with_nan_labels(frame, seed) if nan_labels else frame
        labels = prepare_labels(frame["label"], frame["datetime"])
        x, labels = ric._aligned_predictions(frame["prediction"].to_numpy(), labels)
        g = labels.groups
        per_run_rank = ric._correlation(ric._rank_side(x, g), ric._rank_side(labels.aligned(labels.label), g), g)
        per_run_value = ric._correlation(ric._side(x, g), ric._side(labels.aligned(labels.label), g), g)
        rank, value = ric._daily_values(x, labels, "spearman"), ric._daily_values(x, labels, "pearson")
        assert rank.tobytes() == per_run_rank.tobytes()
        assert value.tobytes() == per_run_value.tobytes()
        assert np.isfinite(rank).sum() > 10   # defined dates were compared, not only NaN


@pytest.mark.parametrize("layout", ["equal", "unequal"])
def test_shared_label_ranks_give_per_run_values_bit_for_bit(layout):
    """Labels prepared (and ranked) once for many runs: each run's daily IC and Rank IC are those of
    preparing its labels alone, with ties, NaN labels and a NaN prediction (which re-prepares)."""
    frame = _with_nan_labels(_frame(layout, 21), 21)
    shared = prepare_labels(frame["label"], frame["datetime"])
    rank_side = shared.rank
    rng = np.random.default_rng(8)
    y = np.nan_to_num(frame["label"].to_numpy(), nan=0.0, posinf=0.0)
    for k in range(5):
        p = np.round(y * (k - 2) + rng.normal(size=len(frame)), 1)   # ties in the predictions too
        if k == 4:
            p[7] = np.nan
        alone = daily_information_coefficients(p, prepare_labels(frame["label"], frame["datetime"]))
        reused = daily_information_coefficients(p, shared)
        assert reused.rank_ic.tobytes() == alone.rank_ic.tobytes()
        assert reused.ic.tobytes() == alone.ic.tobytes()
        assert reused.dates.tolist() == alone.dates.tolist()
    assert shared.rank is rank_side   # ranked once


@pytest.mark.parametrize("layout", ["equal", "unequal", "one-huge-date", "unsorted"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_prediction_ranges_of_the_ic_pass_are_the_constant_checks(layout, seed):
    """Where the IC pass correlated every row, its per-date prediction ranges are those of ``constant_check``
    (max - min per timestamp), so the guard taken from them is the same, value for value; else it says None."""
    from rolling_calib.core.guards import constant_check, constant_check_of_ranges

    frame = _frame(layout, seed)
    if layout != "equal":   # every row finite: the pass keeps them all (a dropped row leaves its date's range)
        frame = frame.fillna(0.5).replace(np.inf, 1.0)
    daily = daily_information_coefficients(frame["prediction"].to_numpy(),
                                           prepare_labels(frame["label"].to_numpy(), frame["datetime"].to_numpy()))
    expected = frame.groupby("datetime")["prediction"].agg(lambda p: p.max() - p.min())
    if layout == "one-huge-date":   # the lexsort path sorts no (dates, instruments) matrix: no ranges
        assert daily.prediction_range is None
        return
    np.testing.assert_array_equal(daily.prediction_range, expected.to_numpy())
    direct = constant_check(frame["datetime"].to_numpy(), frame["prediction"].to_numpy())
    from_ic = constant_check_of_ranges(daily.prediction_range, frame["prediction"].to_numpy())
    if layout == "unsorted":   # constant_check sorts the rows first: its mean sums them in another order
        assert from_ic.mean_prediction == pytest.approx(direct.mean_prediction, rel=1e-12, abs=1e-15)
        from_ic = dataclasses.replace(from_ic, mean_prediction=direct.mean_prediction)
    assert from_ic == direct
    with_nan = frame.assign(prediction=frame["prediction"].where(frame.index != frame.index[5]))
    left_out = daily_information_coefficients(with_nan["prediction"].to_numpy(),
                                              prepare_labels(with_nan["label"].to_numpy(), with_nan["datetime"].to_numpy()))
    assert left_out.prediction_range is None
