"""Qlib's multi-frequency ``provider_uri`` (a day and a one-minute store), as the ``multi_freq`` workflows write it."""

from __future__ import annotations

import pytest

from daily_helpers import build_daily_store
from rolling_calib.core.validation import ConfigError
from rolling_calib.qlib_adapter.session import resolve_qlib_init, store_freq, store_path


@pytest.fixture(scope="module")
def day_store(tmp_path_factory):
    return build_daily_store(tmp_path_factory.mktemp("mf") / "qlib_day", start="2018-01-02", end="2018-03-30")


def test_a_day_and_a_minute_store_resolve_with_the_day_store_driving_the_schedule(day_store, tiny_data):
    resolved = resolve_qlib_init({"provider_uri": {"1min": str(tiny_data), "day": str(day_store)}}, "f.yaml")
    assert resolved["provider_uri"] == {"day": str(day_store.resolve()), "1min": str(tiny_data.resolve())}
    assert list(resolved["provider_uri"]) == ["day", "1min"]
    assert store_freq(resolved) == "day" and store_path(resolved) == day_store.resolve()


def test_each_store_is_checked_against_its_frequency(day_store, tiny_data):
    with pytest.raises(ConfigError, match=r"qlib_init.provider_uri.1min: .* is not a Qlib minute store .* key it by 'day'"):
        resolve_qlib_init({"provider_uri": {"day": str(day_store), "1min": str(day_store)}}, "f.yaml")
