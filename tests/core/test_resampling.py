"""The Resampling value (how draws are made) apart from the Question (what is answered): checks, records, draws."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rolling_calib.core.question import DEFAULT_QUESTION, Question
from rolling_calib.core.resampling import Resampling


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
    r = Resampling(n_boot=300, seed=2, block_size=4)
    assert r.to_dict() == {"n_boot": 300, "seed": 2, "block_size": 4.0}
    assert Resampling.from_dict(r.to_dict()) == r
    assert r == Resampling(n_boot=300, seed=2, block_size=4) and hash(r) == hash(r.replace())
    assert r.describe() == "300 resamples, seed 2, mean block 4 days"
    with pytest.raises(ValueError, match=r"^n_boot: expected a positive int <= 100000"):
        Resampling(n_boot=100_001)
    with pytest.raises(ValueError, match=r"^n_boot: .*found True"):
        Resampling(n_boot=True)
    with pytest.raises(ValueError, match=r"^seed: expected a non-negative integer seed below 2\*\*32 .*, found -1$"):
        Resampling(seed=-1)
    with pytest.raises(ValueError, match=r"^block_size: expected None or a mean block length >= 1"):
        r.replace(block_size=0.0)


def test_what_is_answered_is_not_a_resampling_setting():
    """Resampling holds how draws are made only; the target and the level are the Question's (issue 34)."""
    assert [f.name for f in dataclasses.fields(Resampling)] == ["n_boot", "seed", "block_size"]
    assert [f.name for f in dataclasses.fields(Question)] == ["target", "confidence"]
    with pytest.raises(TypeError):
        Resampling(target="period")   # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Resampling(confidence=0.9)   # type: ignore[call-arg]


def test_the_question_records_itself_and_refuses_bad_settings():
    q = Question(target="period", confidence=0.9)
    assert q.to_dict() == {"target": "period", "confidence": 0.9} and Question.from_dict(q.to_dict()) == q
    assert q.alpha == pytest.approx(0.1) and DEFAULT_QUESTION == Question()
    assert q.describe() == "over seeds, on the evaluated days (target period), at 90% confidence"
    with pytest.raises(ValueError, match=r"^target: expected future .* or period"):
        Question(target="forever")
    with pytest.raises(ValueError, match=r"^confidence: expected a number strictly between 0 and 1, found 1\.0$"):
        q.replace(confidence=1.0)
