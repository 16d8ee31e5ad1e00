"""Stylised facts (``data_prep.facts``): exact values on hand-made stores, and the synthetic market against the real one."""

from __future__ import annotations

import doctest
import json
import math

import numpy as np
import pandas as pd
import pytest

from data_prep import facts as facts_module
from data_prep import qlib_store
from data_prep.facts import FACTS, compute_facts, format_facts, stylized_facts
from data_prep.synthetic import build_synthetic_store
from data_prep.trading_calendar import session_minutes
from rolling_calib.cli import main

# The real sample's facts: ``rolling-calib data facts`` on the shared real data
# (the shared us-equities-1min-2018, found by tests/shared_data.py: 24 stocks, 2018-02-16..2018-04-20, 44 sessions),
# ingested with ``rolling-calib data ingest ... --repair``.
# Tolerances: the spread of each fact over 20 seeds of the synthetic market on the same dates
# (at least its 10%-90% range fits in the band), not the sampling error of the real value alone.
# kind "abs": real +- tol; kind "rel": real / tol .. real * tol (scale-like, skewed facts).
#
#   fact                  real      tol    kind   why this tolerance
BANDS: dict[str, tuple[float, float, str]] = {
    "ret10_std_bp": (20.8, 1.4, "rel"),  # slow market volatility moves the level by +-30% between quarters
    "ac1_ret1": (-0.034, 0.025, "abs"),  # microstructure noise -0.035, momentum regime +-0.01
    "ac1_ret10": (-0.029, 0.09, "abs"),  # regime momentum/reversal gives +-0.05
    "predictability": (0.019, 0.06, "abs"),  # weak signal only; also |corr| <= 0.05 (MAX_PREDICTABILITY)
    "mean_pair_corr": (0.429, 0.04, "abs"),
    "volume_absret_corr": (0.302, 0.05, "abs"),
    "intraday_vol_ratio": (1.43, 0.2, "abs"),
    "daily_vol_max_min": (2.06, 1.7, "rel"),  # 61 synthetic sessions vs 44 real: the max/min grows with length
    "daily_vol_p95_p5": (1.75, 1.5, "rel"),
    "label_drift": (7.5e-4, 6.0, "rel"),  # 3 monthly means: a chi-square-like draw (seeds: 0.5x..3x the real)
}
MAX_PREDICTABILITY = 0.05


def _band(key: str) -> tuple[float, float]:
    real, tol, kind = BANDS[key]
    return (real - tol, real + tol) if kind == "abs" else (real / tol, real * tol)


# ---------------------------------------------------------------------------- hand-made stores
G = 2e-4  # per-minute log return of the slopes below
SESSION_DATES = ("2018-01-30", "2018-01-31", "2018-02-01")  # two in January, one in February
LEVELS = (100.0, 137.0, 80.0)  # every session starts at its own price: any return across the close is wrong
SLOPES = {"AAA": (G, -G, 0.0), "BBB": (G, 0.0, -G)}  # log return of every bar after the first, per session


def _write_store(root, closes: dict[str, np.ndarray], volumes: dict[str, np.ndarray], minutes) -> str:
    qlib_store.write_calendar(root, minutes)
    spans = {s: (minutes[0], minutes[-1]) for s in closes}
    qlib_store.write_instruments(root, "all", spans)
    for sym, close in closes.items():
        qlib_store.write_feature(root, sym, "close", 0, close)
        qlib_store.write_feature(root, sym, "volume", 0, volumes[sym])
    return str(root)


@pytest.fixture(scope="module")
def slope_store(tmp_path_factory):
    """Two stocks, three sessions; within a session the log price is a straight line (slope per SLOPES)."""
    minutes = pd.DatetimeIndex(np.concatenate([session_minutes(d, d) for d in SESSION_DATES]))
    k = np.tile(np.arange(390), 3)
    sess = np.repeat(np.arange(3), 390)
    closes, volumes = {}, {}
    for sym, slopes in SLOPES.items():
        g = np.asarray(slopes)[sess]
        closes[sym] = np.exp(np.log(np.asarray(LEVELS)[sess]) + g * k)
        # AAA trades more when it moves, BBB less: Spearman +1 and -1
        volumes[sym] = 1000.0 + (1.0 if sym == "AAA" else -1.0) * 500.0 * np.abs(g) / G
    return _write_store(tmp_path_factory.mktemp("slopes"), closes, volumes, minutes)


def test_facts_of_straight_lines_are_known(slope_store):
    f = stylized_facts(slope_store)
    u, v = math.expm1(10 * G), math.expm1(-10 * G)  # the 10-minute forward return in an up / down session
    # every stock's labels are u, v and 0, 380 of each (no label in the last 10 minutes of a session)
    std = np.std([u, v, 0.0])
    assert f["ret10_std_bp"] == pytest.approx(1e4 * std, rel=1e-4)
    assert f["ac1_ret1"] == pytest.approx(1.0) and f["ac1_ret10"] == pytest.approx(1.0)
    # x = slope exactly (the past 60 minutes lie in the same session), pooled pairs (G,u), (-G,v), (0,0)
    x, y = np.array([G, -G, 0.0]), np.array([u, v, 0.0])
    assert f["predictability"] == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-6)
    # returns (G, -G, 0) and (G, 0, -G) over equal counts: cov G^2/3, var 2G^2/3 -> corr 1/2
    assert f["mean_pair_corr"] == pytest.approx(0.5, abs=1e-6)
    assert f["volume_absret_corr"] == pytest.approx(0.0, abs=1e-9)  # mean of +1 and -1
    assert f["intraday_vol_ratio"] == pytest.approx(1.0, abs=1e-4)  # float32 closes: returns exact to ~1e-7
    # realised vol |slope|: AAA (G, G, 0), BBB (G, 0, G) -> cross-stock mean (G, G/2, G/2)
    assert f["daily_vol_max_min"] == pytest.approx(2.0, rel=1e-5)
    assert f["daily_vol_p95_p5"] == pytest.approx(0.95 / 0.5, rel=1e-5)  # linear percentiles of (1/2, 1/2, 1)
    jan, feb = (u + v + u + 0.0) / 4, (0.0 + v) / 2  # AAA (u, v | 0), BBB (u, 0 | v)
    var = np.var([u, v, 0.0, u, 0.0, v])
    assert f["label_drift"] == pytest.approx((jan**2 + feb**2) / 2 / var, rel=1e-4)
    assert (f["symbols"], f["sessions"], f["bars"], f["start"], f["end"]) == (2, 3, 1170, "2018-01-30", "2018-02-01")
    # a date range selects sessions: the February session alone (BBB falls, AAA is flat)
    feb_only = stylized_facts(slope_store, start="2018-02-01", end="2018-02-01")
    assert feb_only["sessions"] == 1 and feb_only["label_drift"] == pytest.approx(1.0, rel=1e-4)


def test_zigzag_returns_missing_bars_and_intraday_shape():
    """Alternating returns: lag-1 autocorrelation -1; twice the amplitude at 10:00-10:30: ratio 2."""
    minutes = session_minutes("2018-03-05", "2018-03-07")
    k = np.tile(np.arange(390), 3)
    amp = np.where((k >= 30) & (k < 60), 2e-4, 1e-4)
    step = np.where(k % 2 == 1, amp, -amp)  # returns -a, +a, -a, ...: log price zigzags
    step[k == 0] = 0.0
    logp = np.log(50.0) + np.cumsum(step)
    close = np.exp(logp)[None, :]
    f = compute_facts(minutes, close, np.full_like(close, 100.0))
    assert f["intraday_vol_ratio"] == pytest.approx(2.0, rel=1e-3)
    # constant amplitude (the zigzag outside 10:00-10:30 alone): exactly -1
    flat = np.exp(np.log(50.0) + np.cumsum(np.where(k % 2 == 1, 1e-4, -1e-4) * (k > 0)))[None, :]
    g = compute_facts(minutes, flat, None)
    assert g["ac1_ret1"] == pytest.approx(-1.0, abs=1e-6)
    assert math.isnan(g["volume_absret_corr"]) and math.isnan(g["mean_pair_corr"])  # no volume; one stock
    # a missing bar removes the returns that touch it but nothing else; the result stays -1
    holed = flat.copy()
    holed[0, [100, 500, 501]] = np.nan
    assert compute_facts(minutes, holed)["ac1_ret1"] == pytest.approx(-1.0, abs=1e-6)
    # 10-minute returns of a zigzag are 0 at every grid point: no variance, no autocorrelation
    assert g["ret10_std_bp"] == pytest.approx(0.0, abs=1e-3) and math.isnan(g["ac1_ret10"])


def test_compute_facts_rejects_misaligned_input():
    minutes = session_minutes("2018-03-05", "2018-03-05")
    with pytest.raises(ValueError, match="columns"):
        compute_facts(minutes, np.ones((2, 100)))
    with pytest.raises(ValueError, match="volume"):
        compute_facts(minutes, np.ones((2, 390)), np.ones((1, 390)))


def test_cli_prints_table_and_json(slope_store, capsys):
    assert main(["data", "facts", slope_store, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mean_pair_corr"] == pytest.approx(0.5, abs=1e-6) and out["sessions"] == 3
    assert main(["data", "facts", slope_store, slope_store, "--start", "2018-01-31"]) == 0
    text = capsys.readouterr().out
    assert all(spec.label in text for spec in FACTS) and "2 x 2" in text
    assert main(["data", "facts", slope_store + "-missing"]) == 1
    assert "error:" in capsys.readouterr().err


def test_docstring_example():
    result = doctest.testmod(facts_module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


# ---------------------------------------------------------------------------- synthetic vs real
@pytest.fixture(scope="module")
def synthetic_facts(tmp_path_factory):
    store = build_synthetic_store(tmp_path_factory.mktemp("synth") / "s", start="2018-02-01", end="2018-04-30", seed=0)
    return stylized_facts(store)


@pytest.mark.parametrize("key", list(BANDS))
def test_synthetic_market_matches_the_real_sample(synthetic_facts, key):
    lo, hi = _band(key)
    value = synthetic_facts[key]
    assert lo <= value <= hi, f"{key}: synthetic {value:.4g}, real {BANDS[key][0]:.4g}, band [{lo:.4g}, {hi:.4g}]"


def test_synthetic_market_is_only_weakly_predictable(synthetic_facts):
    assert abs(synthetic_facts["predictability"]) <= MAX_PREDICTABILITY
    assert synthetic_facts["symbols"] == 25 and synthetic_facts["sessions"] == 61
    table = format_facts({"synthetic": synthetic_facts})
    assert "corr(mean past 60 1-min returns, next 10-min return)" in table and "25 x 61" in table
