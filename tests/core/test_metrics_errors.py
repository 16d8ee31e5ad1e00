"""Bad input raises ValueError naming the argument and what was found."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rolling_calib.core import classification as C
from rolling_calib.core import metrics as M
from rolling_calib.core.calibration import CALIBRATION_FIELDS, Calibration

TS = pd.to_datetime(["2015-01-05", "2015-01-06", "2015-02-02", "2015-02-03"])


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda: M.quadratic_loss([1.0, 2.0], [1.0]), r"mismatched lengths: predictions has 2, labels has 1"),
        (lambda: M.quadratic_loss([1.0, np.nan], [1.0, 2.0]), r"predictions: expected finite numbers, found 1 non-finite value\(s\), the first at position 1: nan"),
        (lambda: M.quadratic_loss([1.0, 2.0], [np.inf, 2.0]), r"labels: expected finite numbers.*position 0: inf"),
        (lambda: M.quadratic_loss([], []), r"expected at least one row, found 0"),
        (lambda: M.quadratic_loss([[1.0]], [[1.0]]), r"predictions: expected a 1-D array, found shape \(1, 1\)"),
        (lambda: M.quadratic_loss(["a"], [1.0]), r"predictions: expected numbers"),
        (lambda: M.calibrated_quadratic_loss([1.0, 2.0], [1.0, 2.0], bias_part=[]), r"bias_part: the bias part is empty"),
        (lambda: M.calibrated_quadratic_loss([1.0, 2.0], [1.0, 2.0], bias_part=[False, False]), r"bias_part: the bias part is empty"),
        (lambda: M.calibrated_quadratic_loss([1.0, 2.0], [1.0, 2.0], bias_part=[0, 1]), r"remaining part to score is empty"),
        (lambda: M.calibrated_quadratic_loss([1.0, 2.0], [1.0, 2.0], bias_part=[5]), r"bias_part: index 5 is out of range; expected positions in \[0, 1\]"),
        (lambda: M.calibrated_quadratic_loss([1.0, 2.0], [1.0, 2.0], bias_part=[-1]), r"bias_part: index -1 is out of range"),
        (lambda: M.calibrated_quadratic_loss([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], bias_part=[0, 0]), r"repeated position"),
        (lambda: M.calibrated_quadratic_loss([1.0, 2.0], [1.0, 2.0], bias_part=[True]), r"boolean mask has length 1, expected 2"),
        (lambda: M.calibrated_quadratic_loss([1.0, 2.0], [1.0, 2.0], bias_part=[0.5]), r"found dtype float64"),
        (lambda: C.log_loss([0.5, 1.2], [0, 1]), r"probabilities: expected probabilities in \[0, 1\], found 1 outside, the first at position 1: 1.2"),
        (lambda: C.log_loss([0.5, -0.1], [0, 1]), r"position 1: -0.1"),
        (lambda: C.log_loss([0.5, 0.5], [0, 2]), r"labels: expected binary labels 0 or 1, found 1 other value\(s\).*position 1: 2.0"),
        (lambda: C.log_loss([0.5, np.nan], [0, 1]), r"probabilities: expected finite numbers"),
        (lambda: C.fit_logit_shift([0.5, 0.2], [0, 0]), r"every label of the bias part is 0"),
        (lambda: C.calibrated_log_loss([0.5, 0.2, 0.3], [1, 1, 0], bias_part=[0, 1]), r"every label of the bias part is 1"),
        (lambda: C.normalized_cross_entropy([0.5, 0.2], [1, 1]), r"scored labels are all 1"),
        (lambda: C.multiclass_log_loss([[0.5, 0.6]], [0]), r"expected each row to sum to 1"),
        (lambda: C.multiclass_log_loss([[0.5, 0.5]], [2]), r"labels: expected class indices in \[0, 1\], found 2"),
        (lambda: C.multiclass_log_loss([0.5, 0.5], [0]), r"expected a 2-D array"),
        (lambda: C.fit_temperature([[0.0, 1.0], [0.0, 1.0]], [0, 0]), r"no better than uniform"),
        (lambda: C.fit_temperature([[0.0, 1.0], [1.0, 0.0]], [1, 0]), r"separated perfectly"),
    ],
)
def test_static_metrics_reject_bad_input(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"period": "day"}, r"period: expected 'month', 'week', 'quarter' or a positive int, found 'day'"),
        ({"period": 0}, r"period: expected a positive number of trading days, at most 5040 \(20 years\), found 0"),
        ({"period": True}, r"period: expected"),
        ({"bias": "global"}, r"bias: expected 'pooled' or 'per_instrument', found 'global'"),
        ({"bias": "per_instrument"}, r"instruments: required when bias='per_instrument'"),
        ({"score_periods": ["2015-01"]}, r"period 2015-01 is scored but the month before it has no rows"),
        ({"score_periods": ["2014-12"]}, r"score_periods: period '2014-12' has no rows"),
        ({"score_periods": [7]}, r"score_periods: position 7 is out of range; expected 0..1"),
        ({"score_periods": []}, r"expected at least one period to score"),
        ({"score_periods": [1.5]}, r"expected period labels \(str\) or positions \(int\), found 1.5"),
        ({"missing_instrument": "drop"}, r"missing_instrument: expected 'error' or 'pooled'"),
        ({"bias_window": 0}, r"bias_window: expected None or a positive number of trading days, at most 5040, found 0"),
        ({"bias_window": 2.5}, r"bias_window: expected None or a positive number of trading days, at most 5040, found 2.5"),
        ({"bias_window": 3, "score_periods": [0]}, r"period 2015-01 is scored but the 3 trading day\(s\) before it have no rows"),
        ({"instruments": ["A", None, "A", "A"], "bias": "per_instrument"}, r"instruments: expected an id on every row, found a missing value at position 1"),
        ({"instruments": ["A"], "bias": "per_instrument"}, r"mismatched lengths: instruments has shape \(1,\)"),
    ],
)
def test_rolling_rejects_bad_options(kwargs, pattern):
    rule = {k: kwargs.pop(k) for k in list(kwargs) if k in CALIBRATION_FIELDS}
    with pytest.raises(ValueError, match=pattern):   # a bad rule is refused when the Calibration is made
        M.rolling_calibrated_quadratic_loss([0.0] * 4, [1.0] * 4, TS, calibration=Calibration(**rule), **kwargs)


def test_rolling_takes_the_rule_as_one_calibration_value():
    with pytest.raises(ValueError, match=r"calibration: expected a rolling_calib.core.calibration.Calibration, found dict"):
        M.rolling_calibrated_quadratic_loss([0.0] * 4, [1.0] * 4, TS, calibration={"period": "week"})
    with pytest.raises(TypeError, match="period"):   # the loose options of the old signature are gone
        M.rolling_calibrated_quadratic_loss([0.0] * 4, [1.0] * 4, TS, period="week")


def test_rolling_rejects_bad_timestamps():
    with pytest.raises(ValueError, match=r"timestamps: expected datetimes, found NaT at position 2"):
        M.rolling_calibrated_quadratic_loss([0.0] * 4, [1.0] * 4, [TS[0], TS[1], pd.NaT, TS[3]])
    with pytest.raises(ValueError, match=r"mismatched lengths: timestamps has 3, predictions has 4"):
        M.rolling_calibrated_quadratic_loss([0.0] * 4, [1.0] * 4, TS[:3])
    with pytest.raises(ValueError, match=r"timestamps: every row falls in one month period \(2015-01\); expected at least two"):
        M.rolling_calibrated_quadratic_loss([0.0, 1.0], [1.0, 1.0], TS[:2])
    with pytest.raises(ValueError, match=r"timestamps: expected datetimes"):
        M.rolling_calibrated_quadratic_loss([0.0] * 4, [1.0] * 4, ["x", "y", "z", "w"])
