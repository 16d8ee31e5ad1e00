"""Calibration aligned with retraining: bias from each window's validation predictions; refit-first periods."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from rolling_calib.core.calibration import CALIBRATION_FIELDS, Calibration
from rolling_calib.core.metrics import rolling_calibrated_quadratic_loss as rcql

VALIDATION = Calibration(source="validation")

TS = ["2015-01-05", "2015-01-06", "2015-02-02", "2015-02-03", "2015-03-02", "2015-03-03"]
P = [0.0] * 6
Y = [1.0, 1.0, 1.0, 2.0, 0.0, 2.0]


def test_validation_source_hand_computed():
    # windows: 0 = January, 1 = February and March; validation residual means 1 and 0.5
    r = rcql(P, Y, TS, windows=[0, 0, 1, 1, 1, 1], calibration=VALIDATION,
             valid_predictions=[0.0, 0.0, 0.0], valid_labels=[1.0, 0.0, 1.0], valid_windows=[0, 1, 1])
    # residuals minus bias: Jan 0, 0; Feb 0.5, 1.5; Mar -0.5, 1.5 -> squares 0, 0, .25, 2.25, .25, 2.25
    assert r.cql == pytest.approx(5.0 / 6.0)
    assert r.n_scored == 6 and r.calibration.source == "validation"
    assert list(r.table["scored"]) == [True, True, True]
    assert list(r.table["refit_first"]) == [True, True, False]
    assert r.cql_refit_first == pytest.approx(2.5 / 4) and r.n_refit_first == 4
    assert r.cql_rest == pytest.approx(2.5 / 2) and r.n_rest == 2
    assert r.ql_refit_first == pytest.approx(7.0 / 4) and r.ql_rest == pytest.approx(2.0)
    assert list(r.table["bias"]) == [1.0, 0.5, 0.5]


def test_previous_source_refit_split_hand_computed():
    r = rcql(P, Y, TS, windows=[0, 0, 1, 1, 1, 1])
    # c_Feb = 1, c_Mar = 1.5: Feb residuals 0, 1; Mar -1.5, 0.5
    assert r.cql == pytest.approx((0 + 1 + 2.25 + 0.25) / 4)
    assert list(r.table["refit_first"]) == [True, True, False]
    assert r.cql_refit_first == pytest.approx(0.5) and r.n_refit_first == 2   # Jan is not scored
    assert r.cql_rest == pytest.approx(1.25) and r.n_rest == 2


def test_no_windows_no_refit_split():
    r = rcql(P, Y, TS)
    assert not r.table["refit_first"].any()
    assert math.isnan(r.cql_refit_first) and r.n_refit_first == 0 and r.n_rest == r.n_scored
    assert r.cql_rest == pytest.approx(r.cql)
    d = r.to_dict()
    assert d["refit_first"]["cql"] is None and d["source"] == "previous"


def test_per_instrument_validation_and_missing_instrument():
    inst = ["A", "B"] * 3
    kw = dict(windows=[0] * 6, instruments=inst,
              valid_predictions=[0.0, 0.0], valid_labels=[1.0, 3.0], valid_windows=[0, 0])
    per = Calibration(source="validation", bias="per_instrument")
    r = rcql(P, Y, TS, valid_instruments=["A", "B"], calibration=per, **kw)
    # A rows: 1, 1, 0 minus 1; B rows: 1, 2, 2 minus 3
    assert r.cql == pytest.approx((0 + 0 + 1 + 4 + 1 + 1) / 6)
    with pytest.raises(ValueError, match="instrument 'B' has rows in scored period 2015-01 but window 0 has no"):
        rcql(P, Y, TS, valid_instruments=["A", "A"], calibration=per, **kw)
    pooled = rcql(P, Y, TS, valid_instruments=["A", "A"], calibration=per.replace(missing_instrument="pooled"), **kw)
    assert pooled.cql == pytest.approx(7.0 / 6.0)   # both validation rows are A's: c_A = 2, B falls back to pooled 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(source="validation"), "windows: required when source='validation'"),
        (dict(source="validation", windows=[0] * 6), "valid_predictions, valid_labels, valid_windows: required"),
        (dict(source="validation", windows=[0, 0, 1, 1, 1, 1], valid_predictions=[0.0], valid_labels=[1.0],
              valid_windows=[0]), "window 1 has rows in scored period 2015-02 but no validation predictions"),
        (dict(source="validation", bias_window=5, windows=[0] * 6), "bias_window: must be None"),
        (dict(windows=[0, 1, 1, 1, 1, 1]), "date 2015-01-05 has rows of windows"),
        (dict(windows=[0, 0, 1]), "mismatched lengths: windows"),
        (dict(source="future"), "source"),
    ],
)
def test_source_errors(kwargs, message):
    ts = TS if kwargs.get("windows") != [0, 1, 1, 1, 1, 1] else ["2015-01-05"] * 2 + TS[2:]
    rule = {k: kwargs.pop(k) for k in list(kwargs) if k in CALIBRATION_FIELDS}
    with pytest.raises(ValueError, match=message):
        rcql(P, Y, ts, calibration=Calibration(**rule), **kwargs)


@settings(max_examples=40, deadline=None)
@given(
    offsets=hs.lists(hs.floats(-50, 50, allow_nan=False), min_size=3, max_size=3),
    seed=hs.integers(0, 10_000),
)
def test_validation_cql_removes_any_per_window_offset(offsets, seed):
    """Adding a constant per window to test and validation predictions (a model's own bias) leaves CQL unchanged."""
    rng = np.random.default_rng(seed)
    days = pd.bdate_range("2015-01-01", "2015-06-30")
    windows = (days.month - 1) // 2                                # 3 windows of 2 months
    p, y = rng.normal(size=len(days)), rng.normal(size=len(days))
    vw = np.repeat([0, 1, 2], 5)
    vp, vy = rng.normal(size=15), rng.normal(size=15)
    base = rcql(p, y, days, windows=windows, calibration=VALIDATION, valid_predictions=vp, valid_labels=vy, valid_windows=vw)
    off = np.asarray(offsets)
    moved = rcql(p + off[windows], y, days, windows=windows, calibration=VALIDATION,
                 valid_predictions=vp + off[vw], valid_labels=vy, valid_windows=vw)
    assert moved.cql == pytest.approx(base.cql, rel=1e-9, abs=1e-9)
    # the refit split recombines into the whole
    n1, n2 = base.n_refit_first, base.n_rest
    assert (n1 * base.cql_refit_first + n2 * base.cql_rest) / (n1 + n2) == pytest.approx(base.cql, rel=1e-12)
    # and it agrees with a direct row-wise computation
    bias = np.array([np.mean(vy[vw == w] - vp[vw == w]) for w in range(3)])
    assert base.cql == pytest.approx(np.mean((y - p - bias[windows]) ** 2), rel=1e-12)
