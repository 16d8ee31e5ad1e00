"""Hand-computed values and independent implementations for the static metrics."""

from __future__ import annotations

import doctest
import math
import subprocess
import sys

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import expit, logit, softmax
from sklearn import metrics as skm

from rolling_calib.core import classification as C
from rolling_calib.core import metrics as M


@pytest.mark.parametrize("module", [M, C])
def test_docstring_examples_run(module):
    result = doctest.testmod(module, raise_on_error=False)
    assert result.attempted > 10
    assert result.failed == 0


# --- quadratic loss ---------------------------------------------------------
def test_quadratic_loss_hand_computed():
    # residuals 1, -1, 2 -> squares 1, 1, 4 -> mean 2
    assert M.quadratic_loss([0.0, 2.0, 1.0], [1.0, 1.0, 3.0]) == 2.0


def test_calibrated_quadratic_loss_hand_computed():
    p = np.array([0.0, 0.0, 1.0, 1.0, 2.0])
    y = np.array([1.0, 3.0, 2.0, 4.0, 2.0])
    # bias part rows 0, 1: residuals 1, 3 -> c* = 2.
    # remaining residuals 1, 3, 0 minus c* -> -1, 1, -2 -> squares 1, 1, 4 -> 2.
    assert M.fit_mean_residual(p[:2], y[:2]) == 2.0
    assert M.calibrated_quadratic_loss(p, y, bias_part=[0, 1]) == 2.0
    mask = np.array([True, True, False, False, False])
    assert M.calibrated_quadratic_loss(p, y, bias_part=mask) == 2.0
    # index order does not matter
    assert M.calibrated_quadratic_loss(p, y, bias_part=[1, 0]) == 2.0


def test_quadratic_loss_matches_sklearn():
    rng = np.random.default_rng(0)
    p, y = rng.normal(size=1000), rng.normal(size=1000)
    assert M.quadratic_loss(p, y) == pytest.approx(skm.mean_squared_error(y, p), rel=1e-12)


def test_calibrated_quadratic_loss_matches_sklearn_on_shifted_predictions():
    rng = np.random.default_rng(1)
    p, y = rng.normal(size=500), rng.normal(loc=0.3, size=500)
    mask = rng.random(500) < 0.3
    c = np.mean(y[mask] - p[mask])
    expected = skm.mean_squared_error(y[~mask], p[~mask] + c)
    assert M.calibrated_quadratic_loss(p, y, bias_part=mask) == pytest.approx(expected, rel=1e-12)


# --- binary log loss --------------------------------------------------------
def test_log_loss_hand_computed():
    # -(log 0.8 + log 0.75) / 2 with p = 0.8 (y = 1) and p = 0.25 (y = 0)
    expected = -(math.log(0.8) + math.log(0.75)) / 2
    assert C.log_loss([0.8, 0.25], [1, 0]) == pytest.approx(expected, rel=1e-14)
    assert C.log_loss(logit(np.array([0.8, 0.25])), [1, 0], from_logits=True) == pytest.approx(expected, rel=1e-14)


def test_log_loss_matches_sklearn_including_clipped_extremes():
    rng = np.random.default_rng(2)
    p = rng.random(2000)
    p[:5] = [0.0, 1.0, 0.0, 1.0, 1e-300]      # exercised by the clipping (EPS, 1 - EPS)
    y = (rng.random(2000) < p).astype(float)
    y[:5] = [1, 0, 0, 1, 1]
    assert C.log_loss(p, y) == pytest.approx(skm.log_loss(y, p, labels=[0, 1]), rel=1e-12)


def test_fit_logit_shift_hand_computed_and_sign():
    # all predictions 1/2, one positive in four: q must be 1/4, so logit(1/2) - c = logit(1/4), c = log 3 > 0
    assert C.fit_logit_shift([0.5] * 4, [1, 0, 0, 0]) == pytest.approx(math.log(3.0), abs=1e-15)
    # positive c lowers probabilities (sign convention q = sigmoid(logit p - c))
    assert C.fit_logit_shift([0.5] * 4, [1, 1, 1, 0]) == pytest.approx(-math.log(3.0), abs=1e-15)


def test_calibrated_log_loss_hand_computed():
    # bias part: p = 1/2 everywhere, 3 of 4 positive -> c* = -log 3; remaining p = 1/4 -> q = 1/2
    p = [0.5, 0.5, 0.5, 0.5, 0.25, 0.25]
    y = [1, 1, 1, 0, 1, 0]
    assert C.calibrated_log_loss(p, y, bias_part=[0, 1, 2, 3]) == pytest.approx(math.log(2.0), rel=1e-14)


def test_logit_shift_against_scipy_minimiser_and_aggregate_calibration():
    rng = np.random.default_rng(3)
    z = rng.normal(scale=2.0, size=3000)
    y = (rng.random(3000) < expit(z + 0.7)).astype(float)

    def objective(c: float) -> float:
        return float(np.sum(np.logaddexp(0, z - c) - y * (z - c)))

    ref = minimize_scalar(objective, bracket=(-5, 5), tol=1e-12).x
    c = C.fit_logit_shift(z, y, from_logits=True)
    assert c == pytest.approx(ref, abs=1e-6)
    # machine precision: sum q = sum y up to float64 rounding of a 3000-term sum
    assert abs(expit(z - c).sum() - y.sum()) < 1e-9
    full = np.r_[z, z[:10]]
    mask = np.r_[np.ones(3000, bool), np.zeros(10, bool)]
    got = C.calibrated_log_loss(full, np.r_[y, y[:10]], bias_part=mask, from_logits=True)
    assert got == pytest.approx(skm.log_loss(y[:10], expit(z[:10] - c), labels=[0, 1]), rel=1e-9)


# --- normalized cross-entropy -----------------------------------------------
def test_normalized_cross_entropy_hand_computed():
    # labels 1, 0, 0, 0: background rate 1/4; H = -(1/4 log 1/4 + 3/4 log 3/4)
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert C.normalized_cross_entropy([0.25] * 4, [1, 0, 0, 0]) == pytest.approx(1.0, rel=1e-14)
    ll = -(math.log(0.5) + 3 * math.log(0.9)) / 4
    assert C.normalized_cross_entropy([0.5, 0.1, 0.1, 0.1], [1, 0, 0, 0]) == pytest.approx(ll / h, rel=1e-14)


def test_calibrated_nce_hand_computed():
    # bias part: p = 1/2, 3 of 4 positive -> c* = -log 3; remaining p = 1/4, 1/4 -> q = 1/2, 1/2
    # remaining labels 1, 0: LL = log 2, background rate 1/2 -> H = log 2 -> NCE = 1
    p = [0.5, 0.5, 0.5, 0.5, 0.25, 0.25]
    assert C.calibrated_normalized_cross_entropy(p, [1, 1, 1, 0, 1, 0], bias_part=[0, 1, 2, 3]) == pytest.approx(1.0, rel=1e-14)
    # remaining labels 1, 1, 0 with q = 1/2: LL = log 2, rate 2/3 -> H = -(2/3 log 2/3 + 1/3 log 1/3)
    p = [0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25]
    h = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))
    got = C.calibrated_normalized_cross_entropy(p, [1, 1, 1, 0, 1, 1, 0], bias_part=[0, 1, 2, 3])
    assert got == pytest.approx(math.log(2.0) / h, rel=1e-14)


def test_calibrated_nce_matches_components():
    rng = np.random.default_rng(4)
    p = rng.uniform(0.05, 0.95, size=400)
    y = (rng.random(400) < p).astype(float)
    mask = np.arange(400) < 150
    cll = C.calibrated_log_loss(p, y, bias_part=mask)
    ybar = y[~mask].mean()
    h = -(ybar * math.log(ybar) + (1 - ybar) * math.log(1 - ybar))
    assert C.calibrated_normalized_cross_entropy(p, y, bias_part=mask) == pytest.approx(cll / h, rel=1e-13)


# --- multiclass -------------------------------------------------------------
def test_multiclass_log_loss_hand_computed():
    # -(log 0.5 + log 0.25) / 2
    probs = [[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]]
    assert C.multiclass_log_loss(probs, [0, 1]) == pytest.approx(-(math.log(0.5) + math.log(0.25)) / 2, rel=1e-14)
    # logits (0, log 2, log 5): softmax = (1/8, 2/8, 5/8)
    z = [[0.0, math.log(2.0), math.log(5.0)]]
    assert C.multiclass_log_loss(z, [2], from_logits=True) == pytest.approx(-math.log(5 / 8), rel=1e-14)


def test_temperature_scaled_log_loss_hand_computed():
    # bias rows: margin 2 nats, right 3 of 4 -> T = 2 / log 3; remaining row margin 4 nats -> 2 log 3 after scaling
    # softmax of (4 / T, 0) = (4 log 3 / 2, 0) = (log 9, 0) -> p(true) = 9 / 10
    z = [[2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [2.0, 0.0], [4.0, 0.0]]
    got = C.temperature_scaled_log_loss(z, [0, 1, 0, 1, 0], bias_part=[0, 1, 2, 3])
    assert got == pytest.approx(-math.log(0.9), rel=1e-13)


def test_multiclass_log_loss_matches_sklearn():
    rng = np.random.default_rng(5)
    z = rng.normal(size=(300, 4))
    y = rng.integers(0, 4, size=300)
    prob = softmax(z, axis=1)
    ref = skm.log_loss(y, prob, labels=[0, 1, 2, 3])
    assert C.multiclass_log_loss(prob, y) == pytest.approx(ref, rel=1e-12)
    assert C.multiclass_log_loss(z, y, from_logits=True) == pytest.approx(ref, rel=1e-12)


def test_temperature_hand_computed():
    # margins of 2 nats, right 3 times of 4 -> sigmoid(2 / T) = 3/4 -> T = 2 / log 3
    z = np.array([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [2.0, 0.0]])
    assert C.fit_temperature(z, [0, 1, 0, 1]) == pytest.approx(2.0 / math.log(3.0), rel=1e-14)


def test_temperature_against_scipy_minimiser():
    rng = np.random.default_rng(6)
    z = rng.normal(scale=3.0, size=(1000, 5))
    y = np.array([rng.choice(5, p=row) for row in softmax(z / 2.5, axis=1)])

    def nll(t: float) -> float:
        return skm.log_loss(y, softmax(z / t, axis=1), labels=range(5))

    ref = minimize_scalar(nll, bounds=(0.1, 20), method="bounded", options={"xatol": 1e-10}).x
    t = C.fit_temperature(z, y)
    assert t == pytest.approx(ref, rel=1e-5)
    mask = np.arange(1000) < 600
    t_bias = C.fit_temperature(z[mask], y[mask])
    expected = skm.log_loss(y[~mask], softmax(z[~mask] / t_bias, axis=1), labels=range(5))
    assert C.temperature_scaled_log_loss(z, y, bias_part=mask) == pytest.approx(expected, rel=1e-10)
    # probabilities in: log p are logits up to a per-row constant, so the same temperature
    assert C.fit_temperature(softmax(z, axis=1), y, from_logits=False) == pytest.approx(t, rel=1e-8)


def test_fit_logit_shift_rows_matches_the_scalar_fit():
    rng = np.random.default_rng(9)
    z = rng.normal(scale=2.0, size=(6, 200))
    y = (rng.random(200) < 0.3).astype(float)
    rows = C.fit_logit_shift_rows(z, y)
    for r in range(6):
        assert rows[r] == C.fit_logit_shift(z[r], y, from_logits=True)
    per_row_labels = np.tile(y, (6, 1))
    per_row_labels[2, :] = 0.0
    per_row_labels[2, 0] = 1.0
    rows2 = C.fit_logit_shift_rows(z, per_row_labels)
    assert rows2[2] == pytest.approx(C.fit_logit_shift(z[2], per_row_labels[2], from_logits=True), abs=1e-14)
    with pytest.raises(ValueError, match=r"every label of the bias part is 0 \(row 1 of 2\)"):
        C.fit_logit_shift_rows(z[:2], np.vstack([y, np.zeros(200)]))
    with pytest.raises(ValueError, match=r"mismatched lengths: labels has 3, logits has 200 columns"):
        C.fit_logit_shift_rows(z, [0, 1, 0])
    with pytest.raises(ValueError, match=r"logits: expected a 2-D array"):
        C.fit_logit_shift_rows(z[0], y)


def test_metric_layer_imports_no_heavy_framework():
    code = (
        "import sys, rolling_calib.core.metrics, rolling_calib.core.pairwise, rolling_calib.simulation.synthetic_experiments, "
        "rolling_calib.cli.synthetic_experiments\n"
        "heavy = sorted(m for m in ('qlib', 'torch', 'ray', 'mlflow') if m in sys.modules)\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
