"""Outside qrun, what Qlib's models log to R during fit is dropped instead of failing the unit."""

from __future__ import annotations

import pytest


def test_recorder_calls_without_an_active_experiment_are_dropped_then_restored(store):
    """GRU.fit calls R.get_recorder().log_metrics(...), LGBModel.fit R.log_metrics(...): both are no-ops here."""
    from qlib.workflow import R

    from rolling_calib.qlib_adapter.training import _no_recorder_logging

    provider = getattr(R, "_provider", None)
    assert provider is not None, "Qlib is initialised on the tiny store"
    if getattr(provider.exp_manager, "active_experiment", None) is not None:
        pytest.skip("an experiment is active in this process")
    with _no_recorder_logging():
        R.get_recorder().log_metrics(step=0, loss=1.0)
        R.log_metrics(step=0, loss=1.0)
        with pytest.raises(AttributeError, match="no Qlib experiment is active"):
            R.get_recorder().load_object("pred.pkl")
    assert "get_recorder" not in provider.__dict__ and "log_metrics" not in provider.__dict__
