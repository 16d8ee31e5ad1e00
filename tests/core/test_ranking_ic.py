"""IC, ICIR and Rank IC against scipy.stats.pearsonr / spearmanr, date by date."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from rolling_calib.core import ranking_ic
from rolling_calib.core.ranking_ic import daily_ic, information_coefficients


def _panel(seed: int = 0, dates: int = 30, instruments: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "datetime": np.repeat(pd.bdate_range("2020-01-01", periods=dates), instruments),
        "instrument": np.tile([f"S{i}" for i in range(instruments)], dates),
    })
    frame["prediction"] = rng.normal(size=len(frame))
    frame["label"] = 0.3 * frame["prediction"] + rng.normal(size=len(frame))
    frame.loc[frame.index % 11 == 0, "label"] = np.round(frame["label"], 0)  # some ties for the ranks
    return frame.sample(frac=1.0, random_state=1)  # row order must not matter


def test_daily_ic_matches_scipy_per_date():
    frame = _panel()
    pearson, spearman = daily_ic(frame), daily_ic(frame, method="spearman")
    for date, day in frame.groupby("datetime"):
        assert pearson[date] == pytest.approx(stats.pearsonr(day["prediction"], day["label"])[0], abs=1e-12)
        assert spearman[date] == pytest.approx(stats.spearmanr(day["prediction"], day["label"])[0], abs=1e-12)


def test_summary_is_mean_and_ir_of_the_daily_values():
    frame = _panel(seed=2)
    ics = [stats.pearsonr(d["prediction"], d["label"])[0] for _, d in frame.groupby("datetime")]
    ranks = [stats.spearmanr(d["prediction"], d["label"])[0] for _, d in frame.groupby("datetime")]
    s = information_coefficients(frame)
    assert s.ic == pytest.approx(np.mean(ics), abs=1e-12)
    assert s.icir == pytest.approx(np.mean(ics) / np.std(ics, ddof=1), abs=1e-10)
    assert s.rank_ic == pytest.approx(np.mean(ranks), abs=1e-12)
    assert s.n_dates == 30 and s.ic > 0


def test_undefined_dates_and_non_finite_rows_are_left_out():
    frame = _panel(dates=3, instruments=4).sort_values(["datetime", "instrument"]).reset_index(drop=True)
    first = frame["datetime"].iloc[0]
    frame.loc[frame["datetime"] == first, "prediction"] = 1.0  # constant prediction: undefined
    frame.loc[5, "label"] = np.nan
    values = daily_ic(frame)
    assert math.isnan(values[first]) and values.notna().sum() == 2
    kept = frame.dropna()
    second = kept[kept["datetime"] == values.index[1]]
    assert values.iloc[1] == pytest.approx(stats.pearsonr(second["prediction"], second["label"])[0], abs=1e-12)
    assert information_coefficients(frame).n_dates == 2
    empty = information_coefficients(frame.iloc[:0])
    assert empty.n_dates == 0 and math.isnan(empty.ic)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="method"):
        daily_ic(_panel(), method="kendall")
    with pytest.raises(ValueError, match="missing label"):
        daily_ic(_panel().drop(columns="label"))


def test_docstring_examples_run():
    result = doctest.testmod(ranking_ic, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


def test_grouped_ranks_fast_path_equals_scipy_with_ties():
    """Equal-sized date groups in order take the row-wise argsort path; ties get average ranks as in scipy."""
    import numpy as np
    from scipy.stats import rankdata

    from rolling_calib.core.ranking_ic import _average_ranks_by_group

    rng = np.random.default_rng(5)
    x = rng.integers(0, 4, size=40 * 7).astype(float)  # many ties
    codes = np.repeat(np.arange(40), 7)
    fast = _average_ranks_by_group(x, codes)
    shuffled = rng.permutation(len(x))  # unordered rows take the lexsort path
    slow = np.empty_like(fast)
    slow[shuffled] = _average_ranks_by_group(x[shuffled], codes[shuffled])
    want = np.concatenate([rankdata(x[codes == g]) for g in range(40)])
    np.testing.assert_array_equal(fast, want)
    np.testing.assert_array_equal(slow, want)
