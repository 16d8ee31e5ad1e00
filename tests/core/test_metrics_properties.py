"""Property tests (hypothesis) for the calibrated metrics.

Tolerances: "exactly unchanged" is meant in real arithmetic. In float64, adding a
constant ``a`` to predictions of size <= 10 rounds each residual by about
``eps * (|a| + 10)`` ~ 1e-13, so a squared error of size <= 400 moves by well
under 1e-9 (absolute). The shifts are drawn with ``|a| >= 0.5`` so that a metric that
is *not* invariant (plain QL) visibly changes -- the tests check that too, through
the identity ``QL(p + a) = QL(p) - 2 a mean(y - p) + a^2``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.special import expit

from rolling_calib.core import classification as C
from rolling_calib.core import metrics as M
from rolling_calib.core.calibration import Calibration

SETTINGS = settings(max_examples=60, deadline=None)
finite = st.floats(min_value=-10.0, max_value=10.0, allow_nan=False, allow_infinity=False)
shift = st.one_of(st.floats(min_value=-50.0, max_value=-0.5), st.floats(min_value=0.5, max_value=50.0))
DAYS = pd.bdate_range("2015-01-05", "2015-03-27")   # 12 whole weeks, 3 months, 60 trading days
WEEKLY = np.arange(0, len(DAYS), 5)                    # one day in every week


@st.composite
def monthly_panel(draw):
    """Rows over 3 months / 12 weeks and 2 instruments; each instrument has a row in every week."""
    base = 2 * WEEKLY.size
    n = draw(st.integers(min_value=base, max_value=base + 40))
    day_idx = draw(hnp.arrays(np.int64, n, elements=st.integers(0, len(DAYS) - 1)))
    inst = draw(hnp.arrays(np.int64, n, elements=st.integers(0, 1)))
    day_idx[:base] = np.tile(WEEKLY, 2)
    inst[:base] = np.repeat([0, 1], WEEKLY.size)
    p = draw(hnp.arrays(np.float64, n, elements=finite))
    y = draw(hnp.arrays(np.float64, n, elements=finite))
    return p, y, DAYS[day_idx], inst


@SETTINGS
@given(panel=monthly_panel(), a=shift, bias=st.sampled_from(["pooled", "per_instrument"]),
       period=st.sampled_from(["month", "week", 5]), window=st.sampled_from([None, 3]))
def test_rolling_cql_invariant_to_constant_shift_ql_is_not(panel, a, bias, period, window):
    p, y, ts, inst = panel
    kwargs = {"instruments": inst,
              "calibration": Calibration(bias=bias, period=period, bias_window=window, missing_instrument="pooled")}
    base = M.rolling_calibrated_quadratic_loss(p, y, ts, **kwargs)
    moved = M.rolling_calibrated_quadratic_loss(p + a, y, ts, **kwargs)
    assert abs(moved.cql - base.cql) <= 1e-9
    np.testing.assert_allclose(moved.table["cql"], base.table["cql"], rtol=0, atol=1e-9)
    # QL is not invariant: it moves by exactly -2 a mean(r) + a^2 (> 0 change unless a = 2 mean(r)).
    r = y - p
    expected = base.ql_all - 2 * a * r.mean() + a * a
    assert abs(moved.ql_all - expected) <= 1e-9 * max(1.0, abs(expected))


@SETTINGS
@given(panel=monthly_panel(), offsets=st.tuples(shift, shift))
def test_per_instrument_cql_invariant_to_per_instrument_shifts(panel, offsets):
    p, y, ts, inst = panel
    moved_p = p + np.asarray(offsets)[inst]
    per = Calibration(bias="per_instrument")
    base = M.rolling_calibrated_quadratic_loss(p, y, ts, instruments=inst, calibration=per)
    moved = M.rolling_calibrated_quadratic_loss(moved_p, y, ts, instruments=inst, calibration=per)
    assert abs(moved.cql - base.cql) <= 1e-9
    # the pooled bias cannot absorb two different offsets (unless they happen to be equal)
    if abs(offsets[0] - offsets[1]) > 1.0:
        pooled = M.rolling_calibrated_quadratic_loss(p, y, ts, instruments=inst)
        pooled_moved = M.rolling_calibrated_quadratic_loss(moved_p, y, ts, instruments=inst)
        assert pooled_moved.cql != pooled.cql


@SETTINGS
@given(p=hnp.arrays(np.float64, st.integers(2, 40), elements=finite), data=st.data())
def test_calibrated_quadratic_loss_bias_part_mean_residual_zero(p, data):
    n = p.size
    y = data.draw(hnp.arrays(np.float64, n, elements=finite))
    k = data.draw(st.integers(1, n - 1))
    c = M.fit_mean_residual(p[:k], y[:k])
    assert abs(np.mean(y[:k] - (p[:k] + c))) <= 1e-12
    a = data.draw(shift)
    mask = np.arange(n) < k
    assert abs(M.calibrated_quadratic_loss(p + a, y, bias_part=mask) - M.calibrated_quadratic_loss(p, y, bias_part=mask)) <= 1e-9


@st.composite
def binary_problem(draw):
    n = draw(st.integers(min_value=4, max_value=60))
    z = draw(hnp.arrays(np.float64, n, elements=st.floats(-8.0, 8.0)))
    y = draw(hnp.arrays(np.float64, n, elements=st.sampled_from([0.0, 1.0])))
    k = draw(st.integers(2, n - 1))
    y[0], y[1] = 0.0, 1.0                      # both classes in the bias part
    return z, y, np.arange(n) < k


@SETTINGS
@given(problem=binary_problem(), a=st.floats(-5.0, 5.0))
def test_calibrated_log_loss_invariant_to_logit_shift(problem, a):
    z, y, mask = problem
    base = C.calibrated_log_loss(z, y, bias_part=mask, from_logits=True)
    moved = C.calibrated_log_loss(z + a, y, bias_part=mask, from_logits=True)
    # the fitted shift absorbs a: c*(z + a) = c*(z) + a up to the solver's machine precision
    assert abs(moved - base) <= 1e-9 * max(1.0, base)
    # through probabilities too (logit -> prob -> logit round-trip costs ~1e-12 relative at |z| <= 13)
    via_p = C.calibrated_log_loss(expit(z + a), y, bias_part=mask)
    assert abs(via_p - base) <= 1e-7 * max(1.0, base)


@SETTINGS
@given(problem=binary_problem())
def test_logit_shift_calibrates_bias_part_in_aggregate(problem):
    z, y, mask = problem
    c = C.fit_logit_shift(z[mask], y[mask], from_logits=True)
    q = expit(z[mask] - c)
    assert abs(q.sum() - y[mask].sum()) <= 1e-10 * mask.sum()


@SETTINGS
@given(z=hnp.arrays(np.float64, st.tuples(st.integers(6, 40), st.integers(2, 4)), elements=st.floats(-6.0, 6.0)),
       data=st.data())
def test_temperature_is_stationary_point(z, data):
    n, k = z.shape
    y = data.draw(hnp.arrays(np.int64, n, elements=st.integers(0, k - 1)))
    picked = z[np.arange(n), y]
    uniform_gradient = np.sum(z.mean(axis=1) - picked)
    separated = np.sum(z.max(axis=1) - picked) <= 0
    if uniform_gradient >= 0 or separated:
        return   # no finite positive temperature: covered by the error tests
    t = C.fit_temperature(z, y)
    w = np.exp(z / t - (z / t).max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    grad = np.sum((w * z).sum(axis=1) - picked)     # d NLL / d(1/T) at the fit
    assert abs(grad) <= 1e-8 * max(1.0, np.abs(z).sum())
