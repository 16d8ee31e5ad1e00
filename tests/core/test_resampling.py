"""The Resampling value: its checks, and its draws against arch's and numpy's own."""

from __future__ import annotations

import numpy as np
import pytest
from arch.bootstrap import StationaryBootstrap
from hypothesis import given, settings
from hypothesis import strategies as st

from rolling_calib.core.resampling import Resampling, TimeDraws, stationary_counts


def _arch_counts(n_times: int, n_boot: int, block_size: float, seed: int) -> np.ndarray:
    boot = StationaryBootstrap(block_size, np.arange(n_times), seed=np.random.default_rng(seed))
    return np.array([np.bincount(pos[0], minlength=n_times) for pos, _ in boot.bootstrap(n_boot)], dtype=float)


@given(n_times=st.integers(1, 80), n_boot=st.integers(1, 30), block=st.floats(1.0, 90.0), seed=st.integers(0, 2**16))
@settings(max_examples=60, deadline=None)
def test_stationary_counts_are_archs_replicates(n_times, n_boot, block, seed):
    """The same indices as arch.bootstrap.StationaryBootstrap for the same seed and mean block length."""
    got = stationary_counts(n_times, n_boot, block_size=block, rng=np.random.default_rng(seed))
    np.testing.assert_array_equal(got, _arch_counts(n_times, n_boot, block, seed))


def test_time_draws_are_made_once_per_axis_and_shared_by_every_block_length():
    r = Resampling(n_boot=40, seed=7)
    draws = r.time_draws(25)
    assert r.time_draws(25) is draws                 # drawn once per axis
    assert r.time_draws(30) is not draws             # another axis, its own draws
    for block in (1.0, 2.5, 6.0, 25.0):               # every block length from the same draws: arch's replicates
        np.testing.assert_array_equal(r.time_counts(25, block), _arch_counts(25, 40, block, 7))
    assert r.time_counts(25, 2.5) is r.time_counts(25, 2.5)
    assert not r.time_counts(25, 2.5).flags.writeable
    assert r.replace(n_boot=40).time_draws(25) is not draws   # a copy draws afresh (same numbers)


def test_positions_keep_blocks_of_consecutive_units_and_wrap():
    """By hand: units continue a block (the next unit, wrapping round) while u > 1 / block_size."""
    draws = TimeDraws(starts=np.array([[3, 0, 1, 2, 0]]), u=np.array([[0.0, 0.9, 0.1, 0.9, 0.9]]))
    # block 2 (p = 0.5): t0 starts at 3; t1 continues (4); t2 restarts at 1; t3, t4 continue (2, 3)
    assert draws.positions(2.0).tolist() == [[3, 4, 1, 2, 3]]
    # block 1 (p = 1): every unit starts a new block at its own start index
    assert draws.positions(1.0).tolist() == [[3, 0, 1, 2, 0]]
    draws = TimeDraws(starts=np.array([[4, 0, 0, 0, 0]]), u=np.ones((1, 5)))
    assert draws.positions(5.0).tolist() == [[4, 0, 1, 2, 3]]   # one block wrapping past the last unit
    assert draws.counts(5.0).tolist() == [[1.0, 1.0, 1.0, 1.0, 1.0]]


def test_seed_counts_and_indices_are_numpys_draws():
    r = Resampling(n_boot=5, seed=3)
    idx = r.seed_indices(4, rng=r.rng())
    np.testing.assert_array_equal(idx, np.random.default_rng(3).integers(0, 4, size=(5, 4)))
    counts = r.seed_counts(4, rng=r.rng())
    np.testing.assert_array_equal(counts, [np.bincount(row, minlength=4) for row in idx])
    assert (counts.sum(axis=1) == 4).all()


def test_half_split_partitions_the_seeds():
    first, second = Resampling.half_split(7, rng=np.random.default_rng(0))
    assert len(first) == 3 and sorted([*first, *second]) == list(range(7))


def test_the_value_records_itself_and_refuses_bad_settings():
    r = Resampling(n_boot=300, confidence=0.9, seed=2, block_size=4)
    assert r.to_dict() == {"n_boot": 300, "confidence": 0.9, "seed": 2, "block_size": 4.0, "target": "period"}
    assert r == Resampling(n_boot=300, confidence=0.9, seed=2, block_size=4) and hash(r) == hash(r.replace())
    with pytest.raises(ValueError, match=r"^n_boot: expected a positive int <= 100000"):
        Resampling(n_boot=100_001)
    with pytest.raises(ValueError, match=r"^n_boot: .*found True"):
        Resampling(n_boot=True)
    with pytest.raises(ValueError, match=r"^seed: expected a non-negative integer seed below 2\*\*32 .*, found -1$"):
        Resampling(seed=-1)
    with pytest.raises(ValueError, match=r"^block_size: expected None or a mean block length >= 1"):
        r.replace(block_size=0.0)
    with pytest.raises(ValueError, match=r"^target: expected future .* or period"):
        Resampling(target="forever")
