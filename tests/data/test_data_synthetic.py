"""Stylised facts of the synthetic minute market, measured on generated samples, with tolerances."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from data_prep.synthetic import (
    DEFAULT_SYMBOLS,
    PROFILES,
    draw_regimes,
    generate_bars,
    simulate_market,
    simulate_symbol,
)
from data_prep.trading_calendar import minute_of_session

SYMS = ["AAPL", "MSFT", "INTC", "JPM", "BAC", "XOM", "KO", "F"]


@pytest.fixture(scope="module")
def year():
    df = generate_bars(SYMS, start="2016-01-01", end="2016-12-31", seed=11)
    close = df.pivot(index="datetime", columns="symbol", values="close")
    opens = df.pivot(index="datetime", columns="symbol", values="open")
    volume = df.pivot(index="datetime", columns="symbol", values="volume")
    k = minute_of_session(close.index)
    ret = np.log(close).diff()
    ret[k == 0] = np.nan  # intraday returns only
    return {"df": df, "close": close, "open": opens, "volume": volume, "k": k, "ret": ret}


def test_heavy_tails(year):
    r = year["ret"].stack().dropna().to_numpy()
    assert stats.kurtosis(r) > 5.0  # normal: 0; real minute returns: 10..50


def test_volatility_clustering_without_return_autocorrelation(year):
    for sym in ("AAPL", "JPM", "KO"):
        r = year["ret"][sym].dropna()
        a = r.abs()
        assert a.autocorr(1) > 0.1 and a.autocorr(30) > 0.08 and a.autocorr(390) > 0.05
        assert abs(r.autocorr(1)) < 0.05


def test_intraday_u_shapes_of_volatility_and_volume(year):
    k = year["k"]
    absret = year["ret"].abs().groupby(k).mean().mean(axis=1)
    vol = year["volume"].groupby(k).median().mean(axis=1)
    for prof in (absret, vol):
        open_, mid, close = prof.loc[1:15].mean(), prof.loc[150:240].mean(), prof.loc[375:389].mean()
        assert open_ > 1.3 * mid and close > 1.2 * mid


def test_cross_sectional_correlation_market_and_sectors(year):
    c = year["ret"].corr().to_numpy()
    off = c[~np.eye(len(SYMS), dtype=bool)]
    assert 0.15 < off.mean() < 0.6
    sector = [PROFILES[s].sector for s in year["ret"].columns]
    same = [c[i, j] for i in range(len(sector)) for j in range(i) if sector[i] == sector[j]]
    cross = [c[i, j] for i in range(len(sector)) for j in range(i) if sector[i] != sector[j]]
    assert np.mean(same) > np.mean(cross) + 0.05


def test_volume_correlates_with_absolute_returns(year):
    r, v = year["ret"]["AAPL"], np.log(year["volume"]["AAPL"])
    ok = r.notna() & v.notna()
    assert stats.spearmanr(r[ok].abs(), v[ok]).statistic > 0.3


def test_overnight_gaps(year):
    k = year["k"]
    close, opens = year["close"]["AAPL"].ffill(), year["open"]["AAPL"]
    gap = np.log(opens[k == 0].to_numpy() / close.shift(1)[k == 0].to_numpy())
    midday = year["ret"]["AAPL"][(k > 150) & (k < 240)].std()
    assert np.nanstd(gap) > 5 * midday


def test_bars_are_consistent_and_missing_minutes_are_occasional(year):
    df = year["df"]
    bars = df.dropna(subset=["close"])
    assert (bars["high"] >= bars[["open", "close"]].max(axis=1)).all()
    assert (bars["low"] <= bars[["open", "close"]].min(axis=1)).all()
    assert ((bars["vwap"] >= bars["low"]) & (bars["vwap"] <= bars["high"])).all()
    assert (bars["volume"] >= 1).all() and (bars["factor"] == 1.0).all()
    missing = df["close"].isna().mean()
    assert 0.0005 < missing < 0.005
    assert df[df["close"].isna()][["open", "volume", "vwap"]].isna().all().all()


def test_price_levels_stay_plausible_over_2012_2018():
    m = simulate_market("2012-01-01", "2018-12-31", seed=0, sectors=["tech", "consumer"])
    for sym, lo, hi in (("AAPL", 30, 300), ("F", 5, 20)):
        close = simulate_symbol(sym, m)["close"]
        assert lo < np.nanmin(close) and np.nanmax(close) < hi, sym


def test_regime_schedule_lengths_and_sign_changes():
    r = draw_regimes(1760, seed=5)
    lengths = np.diff(r.start_session)
    assert lengths.min() >= 40 and lengths.max() <= 110  # 2 to 5 months
    assert np.all((np.abs(r.beta) >= 0.04) & (np.abs(r.beta) <= 0.10))
    assert (np.sign(r.beta) > 0).any() and (np.sign(r.beta) < 0).any()


def _features_and_target(close: np.ndarray, session: np.ndarray):
    lc = pd.Series(np.log(close)).ffill().to_numpy()
    n = len(lc)
    fwd = np.full(n, np.nan)
    fwd[:-10] = np.where(session[10:] == session[:-10], lc[10:] - lc[:-10], np.nan)
    feats = []
    for lag in (5, 15, 30):
        f = np.full(n, np.nan)
        f[lag:] = np.where(session[lag:] == session[:-lag], lc[lag:] - lc[:-lag], np.nan)
        feats.append(f)
    return np.column_stack(feats), fwd


def test_forward_return_is_learnable_within_a_regime_and_drifts_between_regimes():
    # The signal is weak by design (|corr| of past and next returns <= 0.05, like the real sample:
    # tests/data/test_data_facts.py), so the test needs many bars: 25 stocks over four years.
    m = simulate_market("2013-01-01", "2016-12-31", seed=0, sectors=[PROFILES[s].sector for s in DEFAULT_SYMBOLS])
    xs, ys, regime, sess = [], [], [], []
    for sym in DEFAULT_SYMBOLS:
        x, y = _features_and_target(simulate_symbol(sym, m)["close"], m.session_of)
        ok = np.isfinite(x).all(axis=1) & np.isfinite(y)
        xs.append(x[ok, 1]), ys.append(y[ok]), regime.append(m.regime_of_bar[ok]), sess.append(m.session_of[ok])
    x, y, regime, sess = map(np.concatenate, (xs, ys, regime, sess))  # x: the past 15-minute return
    sse = sst = 0.0
    coef = {}
    for j in np.unique(regime):
        sel = regime == j
        if len(np.unique(sess[sel])) < 20:  # a regime cut short by the range's end: too few bars to judge
            continue
        half = np.median(sess[sel])
        tr, te = sel & (sess <= half), sel & (sess > half)
        coef[j] = (x[sel] @ y[sel]) / (x[sel] @ x[sel])  # slope of the next 10-minute return on x
        if abs(m.regimes.beta[j]) >= 0.07:  # strong regimes: fit on the first half, predict the second
            b = (x[tr] @ y[tr]) / (x[tr] @ x[tr])
            sse, sst = sse + np.sum((y[te] - b * x[te]) ** 2), sst + np.sum(y[te] ** 2)
    assert sst > 0 and 1 - sse / sst > 0.0003  # beats predicting zero out of sample (R^2 vs 0, pooled)
    # the optimal coefficient follows the regime: momentum (+) vs reversal (-)
    for j, c in coef.items():
        if abs(m.regimes.beta[j]) >= 0.07:
            assert np.sign(c) == np.sign(m.regimes.beta[j]), (j, c, m.regimes.beta[j])
    assert max(coef.values()) - min(coef.values()) > 0.03
