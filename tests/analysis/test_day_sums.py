"""Per-day sums of the panels: contiguous segments in time order, a scatter-add otherwise, the same numbers."""

from __future__ import annotations

import numpy as np

from rolling_calib.analysis.panels import _day_sums


def test_day_sums_by_segments_equal_the_scatter_add_and_the_hand_sums():
    times = np.array(["2018-01-02T09:30", "2018-01-02T15:00", "2018-01-04T10:00", "2018-01-05T09:31",
                      "2018-01-05T11:00", "2018-01-05T16:00"], dtype="datetime64[ns]")
    days = np.array(["2018-01-02", "2018-01-03", "2018-01-04", "2018-01-05"], dtype="datetime64[ns]")
    w = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
    rows = np.array([2, 0, 1, 3])
    fast = _day_sums(times, days, rows)
    assert fast(w).tolist() == [3.0, 0.0, 4.0, 56.0] and fast(None).tolist() == [2.0, 0.0, 1.0, 3.0]
    order = np.random.default_rng(0).permutation(times.size)      # out of time order: the general path
    slow = _day_sums(times[order], days, rows)
    assert slow(w[order]).tolist() == [3.0, 0.0, 4.0, 56.0] and slow(None).tolist() == [2.0, 0.0, 1.0, 3.0]
    wrong_rows = _day_sums(times, days, np.array([1, 1, 1, 3]))    # counts that do not match: the general path too
    assert wrong_rows(w).tolist() == [3.0, 0.0, 4.0, 56.0]


def test_day_sums_of_products_by_blocks_of_days_equal_the_whole_products_bit_for_bit(monkeypatch):
    """``sums(w, v)``: the products a block of whole days at a time give each day's sum of ``w * v`` exactly."""
    from rolling_calib.analysis import panels

    rng = np.random.default_rng(1)
    days = np.arange("2018-01-01", "2018-03-01", dtype="datetime64[D]").astype("datetime64[ns]")
    rows = rng.integers(0, 40, len(days))
    rows[[3, 4, 17]] = 0                                             # days without rows
    times = np.concatenate([d + np.sort(rng.integers(0, 86_400, r)).astype("timedelta64[s]")
                            for d, r in zip(days, rows)]).astype("datetime64[ns]")
    w, v = rng.normal(size=times.size), rng.normal(size=times.size)
    whole = _day_sums(times, days, rows)(w * v)                     # the products on the whole arrays
    for block in (1, 7, 50, 1 << 16):                                # down to one day per block
        monkeypatch.setattr(panels, "_BLOCK", block)
        got = _day_sums(times, days, rows)(w, v)
        assert got.tobytes() == whole.tobytes()
    order = rng.permutation(times.size)                              # the scatter-add path takes the products too
    np.testing.assert_allclose(_day_sums(times[order], days, rows)(w[order], v[order]), whole, rtol=1e-12,
                               atol=1e-12)   # (other order of the additions: equal to rounding)
