r"""Synthetic one-minute US equity market, written straight into a Qlib store.

The generative model
====================
Time runs over the NYSE minute calendar (:mod:`data_prep.trading_calendar`); ``t`` is a bar,
``k(t)`` its minute within the session (0..n-1, n = 390 or 210), ``d(t)`` its session.
Every random draw comes from ``numpy.random.default_rng`` streams derived from ``seed``:
one stream for the market, one per sector, one per symbol (keyed by the symbol's name, so a
symbol's path does not depend on which other symbols are generated).

**Regimes (concept drift).** A seeded schedule shared by all symbols: regime lengths are
drawn uniformly in ``[regime_min_sessions, regime_max_sessions]`` (default 40..110 sessions,
i.e. 2 to 5 months); regime ``j`` has an annualised drift ``mu_j ~ N(0, regime_drift_sd)``
(default 0.30) and a momentum coefficient ``beta_j = s_j * U(beta_min, beta_max)`` (default
0.04..0.10). The first sign ``s_0`` is +1 (short-term momentum) or -1 (short-term reversal)
with probability 1/2; each next regime flips the sign with probability ``regime_flip_prob``
(0.7). The schedule is stored in ``meta.json`` (first session, drift and beta of each regime).

**Volatility.** ``sigma_i(t) = vol_i * u(k, n) * exp(h_m(t) + h_i(t))`` (times a constant that
makes ``E exp(.) = 1``) with

* ``vol_i`` the symbol's per-minute base volatility (annual volatility / sqrt(252 * 390));
* ``u(k, n)`` the U-shaped intraday profile
  ``u = c * (1 + 2.8 exp(-k / 5.7) + 1.05 exp(-k / 85) + 0.42 exp(-(n-1-k) / 68) + 0.2 exp(-(n-1-k) / 10))``,
  ``c`` making its mean square 1, fitted (least squares in logs) to the per-minute return std of
  the shared 2018 sample: the first minutes about 4x midday, a fast decay within 15 minutes and a
  slow one over the morning (10:00-10:30 about 1.45x midday), a mild rise into the close;
* ``h_m`` the market log-volatility, the sum of two AR(1) processes per minute,
  ``h(t) = phi h(t-1) + sd * sqrt(1 - phi^2) * N(0,1)``: a fast one (``phi = exp(-1 / 1500)``,
  half-life about 2.7 sessions, stationary sd ``market_logvol_sd`` 0.18) and a slow one
  (half-life 100 sessions, sd ``market_slow_logvol_sd`` 0.2): the cross-stock daily volatility
  varies by about 2x (max/min) within a quarter and more between quarters;
* ``h_i`` the symbol's own log-volatility, a fast AR(1) like the market's with sd 0.25:
  volatility clustering.

**Shocks.** ``e_i(t) = sigma_i(t) * (b_m,i * z_m(t) + b_s * z_s(i)(t) + sqrt(1 - b_m,i^2 - b_s^2) * z_i(t))``,
with ``z`` independent unit-variance Student-t (``df = 4``) draws: heavy tails, a market factor
(``b_m,i`` = 0.63 .. 0.75, default 0.70) and a sector factor (``b_s = 0.3``) give cross-sectional
correlation (mean pairwise correlation of 1-minute returns about 0.43).

**Predictable component.** An exponential moving average of the symbol's own past returns,
``s_i(t) = lam s_i(t-1) + (1 - lam) r_i(t)``, ``lam = exp(-1/10)``, drives the next return:

    r_i(t) = mu_j / (252 * 390) + beta_j * s_i(t-1) + e_i(t)

(``j`` the regime of bar ``t``). The pair is a linear filter computed with
``scipy.signal.lfilter`` per regime, state carried across regimes. The signal is weak, as in
real minute data: with ``|beta|`` in 0.04..0.10 the correlation of the mean of the past 60
returns with the next 10-minute return is within +-0.04 and a linear predictor of the
10-minute forward return from the past 15-minute return reaches an out-of-sample R^2 of about
0.05-0.3% within a regime; its optimal coefficient changes sign with the regime.

**Signal modes** (``MarketParams.signal``, ``rolling-calib data synth --signal``; :data:`SIGNAL_DEFAULTS`):

* ``drifting`` (the default; the market above, unchanged): the sign flips between regimes with probability
  0.7, so a model trained on past regimes cannot carry it forward;
* ``persistent``: one sign for the whole range (``regime_flip_prob`` 0) and a strength that drifts slowly, a
  random walk from regime to regime (step sd ``beta_step_sd`` 0.005) reflected into ``[beta_min, beta_max]``
  = [0.07, 0.11]: an oracle IC of the 10-minute label of 0.043-0.049 over 2017-07..2018-06 and 0.043-0.056
  over 2018-01..03 (seeds 0-3), while the stylised facts stay close to the real sample's (``data facts``);
* ``none``: no predictable component: ``beta`` 0 and no microstructure noise (whose bid-ask bounce is itself a
  predictable component of the next return): a market where no model may find skill.

A YAML file of fields (``--params FILE``, :func:`load_market_params`) overrides the mode's values.

**Oracle IC.** ``meta.json`` records ``oracle_ic``: the mean over the store's bars of the cross-sectional
Pearson correlation (rolling_calib's and Qlib's IC; in a minute store a date is a bar) between the label
``1e4 (close[t+10] / close[t] - 1)`` (the minute handler's) and the generator's conditional expectation of the
efficient 10-minute return given its latent state, ``beta_j G_j s_i(t)`` (:func:`_oracle_forecast`; the
drift's part is the same for every stock and changes no cross-sectional correlation). ``s_i(t)`` is a
function of past returns, which the features (the last 30-60 bars' prices relative to ``close[t]``) hold up
to the microstructure noise: a model can learn it. The noise ``eta(t)`` is not conditioned on. 0 for
``none``. So it is no ceiling: the observed prices partly reveal ``eta(t)`` (the bid-ask bounce reverts), and a
model of them can beat it. ``oracle_ic_full_state`` is the same correlation with the expectation of the label
given the generator's full state at the bar (:func:`_full_state_expectation`: momentum state, the regime's drift
and ``eta(t)``), the ceiling; ``build_synthetic_store(oracle_field=True)`` (``data synth --oracle-field``) also
writes that expectation per bar as the field ``$oracle`` (bp), the ground truth of a prediction's excess risk.

**Microstructure noise.** The traded price carries a small transient error on top of the
efficient price (bid-ask bounce): ``eta_i(t) = noise_fraction * sigma_i(t) * N(0,1)``
(``noise_fraction`` 0.2) and the observed return is ``r_i(t) + eta_i(t) - eta_i(t-1)``: a lag-1
autocorrelation of 1-minute returns of about ``-0.2^2 / (1 + 2 * 0.2^2) = -0.037``.

**Overnight gaps and price levels.** The first bar of each session opens at the previous
close times ``exp(g_i(d))``, ``g = -kappa (L_i(d-1) - A_i(d-1)) + gap_sd_i * (0.6 z_m + 0.8 z_i)``
(t-distributed ``z``), ``L`` the log close, ``A_i(d)`` a log-linear anchor through plausible
2012-01-01 and 2018-12-31 price levels of the symbol, and ``kappa = 0.01`` per session: the
price wanders freely for weeks but stays at a plausible level over years (AAPL ~ 50-200,
F ~ 8-15). ``gap_sd_i`` is 0.5 times the symbol's daily volatility.

**Bars.** ``open`` = previous close (gap on the first bar), ``close = open * exp(r)``,
``high = max(open, close) * exp(0.5 sigma |z|)``, ``low = min(open, close) * exp(-0.5 sigma |z'|)``
(``z`` normal), ``vwap = (open + high + low + close) / 4 * exp(0.1 sigma z'')`` clipped to
``[low, high]``.  Prices are treated as already back-adjusted: ``factor = 1.0``.

**Volume.** ``log V = log(adv_i / 390) + v(k, n) + 0.2 (|e| / sigma - 0.8) + 0.5 h_m + w_i(t)``,
``v = 0.53 exp(-k / 5.4) + 1.6 exp(-k / 200) + 1.6 exp(-(n-1-k) / 77) + 0.95 exp(-(n-1-k) / 8.5) - c'``
(fitted to the 2018 sample's median log volume per minute; ``c'`` makes ``mean(exp(v)) = 1``),
``w`` an AR(1) (phi 0.8, sd 0.35); rounded to whole shares, at least 1. So volume is U-shaped
in the day (rising over the last hour, highest in the last minutes) and rises with absolute
returns (Spearman corr(volume, |return|) about 0.3) and with market volatility.

**Missing minutes.** Each bar is missing (all fields NaN) with probability ``missing_prob``
(default 0.002), independently; the price process continues underneath.

**Calibration.** The defaults are tuned so that the stylised facts of :mod:`data_prep.facts`
(``rolling-calib data facts``) over the real sample's dates (2018-02-16..2018-04-20) are close to
the shared real sample's: median 10-minute return std about 21 bp, lag-1 autocorrelation of
1-minute returns about -0.035, predictability near zero, mean pairwise correlation about 0.43,
corr(volume, |return|) about 0.3, 10:00-10:30 volatility about 1.45x midday, daily volatility
max/min about 2, and the drift of the monthly label mean about 7.5e-4 of the label variance
(median over seeds). ``tests/data/test_data_facts.py`` holds the bands.

Example
-------
>>> bars = generate_bars(["AAPL", "F"], start="2018-01-02", end="2018-01-05", seed=1)
>>> list(bars.columns), len(bars) == 2 * 4 * 390
(['symbol', 'datetime', 'open', 'high', 'low', 'close', 'volume', 'vwap', 'factor'], True)
"""

from __future__ import annotations

import dataclasses
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from data_prep import qlib_store
from data_prep.symbols import check_symbol
from data_prep.trading_calendar import sessions as nyse_sessions

__all__ = [
    "DEFAULT_SYMBOLS",
    "SymbolProfile",
    "PROFILES",
    "MarketParams",
    "Regimes",
    "draw_regimes",
    "MarketPath",
    "simulate_market",
    "simulate_symbol",
    "generate_bars",
    "build_synthetic_store",
]

#: The 25 stocks of docs/method.md §3.3, in that order.
DEFAULT_SYMBOLS: tuple[str, ...] = (
    "DIS", "VZ", "JPM", "GE", "COP", "F", "MSFT", "XOM", "AAPL", "CMCSA",
    "WFC", "PFE", "INTC", "GILD", "CVX", "BAC", "GM", "SBUX", "T", "C",
    "QCOM", "JNJ", "WMT", "KO", "CSCO",
)  # fmt: skip


@dataclass(frozen=True)
class SymbolProfile:
    """Static description of one synthetic stock.

    Attributes
    ----------
    sector : str
        Sector whose factor the stock loads on.
    price_2012, price_2018 : float
        Anchor prices (adjusted USD) on 2012-01-01 and 2018-12-31; the anchor is log-linear
        in calendar time and extrapolated outside.
    annual_vol : float
        Annualised volatility of the intraday returns.
    adv : float
        Average daily volume in shares.
    market_loading : float
        Loading ``b_m`` on the market factor.
    """

    sector: str
    price_2012: float
    price_2018: float
    annual_vol: float
    adv: float
    market_loading: float = 0.7


#: Plausible levels for the 25 stocks (rough adjusted prices, volumes in shares per day).
PROFILES: dict[str, SymbolProfile] = {
    "DIS": SymbolProfile("media_telecom", 35.0, 110.0, 0.22, 9e6),
    "VZ": SymbolProfile("media_telecom", 30.0, 55.0, 0.18, 15e6, 0.63),
    "JPM": SymbolProfile("financials", 30.0, 98.0, 0.26, 15e6, 0.75),
    "GE": SymbolProfile("industrials", 15.0, 8.0, 0.25, 45e6),
    "COP": SymbolProfile("energy", 45.0, 62.0, 0.28, 7e6),
    "F": SymbolProfile("consumer", 11.0, 9.0, 0.27, 35e6),
    "MSFT": SymbolProfile("tech", 23.0, 100.0, 0.23, 30e6, 0.75),
    "XOM": SymbolProfile("energy", 65.0, 68.0, 0.19, 15e6, 0.71),
    "AAPL": SymbolProfile("tech", 55.0, 157.0, 0.27, 40e6, 0.75),
    "CMCSA": SymbolProfile("media_telecom", 12.0, 34.0, 0.22, 20e6),
    "WFC": SymbolProfile("financials", 25.0, 46.0, 0.21, 20e6, 0.75),
    "PFE": SymbolProfile("health", 17.0, 42.0, 0.19, 30e6, 0.63),
    "INTC": SymbolProfile("tech", 20.0, 47.0, 0.25, 30e6),
    "GILD": SymbolProfile("health", 20.0, 62.0, 0.30, 10e6, 0.63),
    "CVX": SymbolProfile("energy", 80.0, 108.0, 0.21, 6e6, 0.71),
    "BAC": SymbolProfile("financials", 6.0, 25.0, 0.30, 90e6, 0.75),
    "GM": SymbolProfile("consumer", 18.0, 33.0, 0.29, 12e6),
    "SBUX": SymbolProfile("consumer", 21.0, 64.0, 0.24, 8e6),
    "T": SymbolProfile("media_telecom", 22.0, 29.0, 0.18, 25e6, 0.63),
    "C": SymbolProfile("financials", 27.0, 52.0, 0.29, 18e6, 0.75),
    "QCOM": SymbolProfile("tech", 45.0, 57.0, 0.27, 10e6),
    "JNJ": SymbolProfile("health", 55.0, 128.0, 0.16, 8e6, 0.63),
    "WMT": SymbolProfile("consumer", 52.0, 93.0, 0.18, 8e6, 0.63),
    "KO": SymbolProfile("consumer", 28.0, 47.0, 0.15, 12e6, 0.63),
    "CSCO": SymbolProfile("tech", 15.0, 43.0, 0.25, 25e6),
}


def _profile(symbol: str) -> SymbolProfile:
    """Profile of a known symbol, or a deterministic generic one for any other name."""
    if symbol in PROFILES:
        return PROFILES[symbol]
    h = zlib.crc32(symbol.encode())
    return SymbolProfile("other", 20.0 + h % 80, 30.0 + (h // 80) % 120, 0.25, 10e6)


@dataclass(frozen=True)
class MarketParams:
    """Parameters of the generative model (see the module docstring for the equations)."""

    t_df: float = 4.0
    vol_half_life_minutes: float = 1040.0  # phi = exp(-1/1500)
    market_logvol_sd: float = 0.18
    slow_vol_half_life_minutes: float = 39000.0  # 100 full sessions
    market_slow_logvol_sd: float = 0.2
    symbol_logvol_sd: float = 0.25
    sector_loading: float = 0.3
    noise_fraction: float = 0.2
    ema_lambda: float = float(np.exp(-1.0 / 10.0))
    beta_min: float = 0.04
    beta_max: float = 0.10
    regime_min_sessions: int = 40
    regime_max_sessions: int = 110
    regime_drift_sd: float = 0.30
    regime_flip_prob: float = 0.7
    kappa: float = 0.01
    gap_vol_fraction: float = 0.5
    volume_ar: float = 0.8
    volume_noise_sd: float = 0.35
    volume_abs_return_coef: float = 0.2
    missing_prob: float = 0.002
    signal: str = "drifting"
    beta_step_sd: float = 0.005

    def __post_init__(self) -> None:
        if self.signal not in SIGNALS:
            raise ValueError(f"signal: expected one of {', '.join(SIGNALS)}, found {self.signal!r}")
        if not 0.0 <= self.beta_min <= self.beta_max < 1.0:
            raise ValueError(f"beta_min, beta_max: expected 0 <= beta_min <= beta_max < 1, found {self.beta_min}, "
                             f"{self.beta_max}")

    def as_dict(self) -> dict:
        """Plain dict (for the store's metadata)."""
        return dataclasses.asdict(self)


#: The predictable component's modes (``--signal``): see "Predictable component" in the module docstring.
SIGNALS: tuple[str, ...] = ("drifting", "persistent", "none")

#: What each mode changes from :class:`MarketParams`'s defaults (the ``drifting`` market); a ``--params`` file
#: overrides these in turn.
SIGNAL_DEFAULTS: dict[str, dict[str, float]] = {
    "drifting": {},
    "persistent": {"beta_min": 0.07, "beta_max": 0.11, "regime_flip_prob": 0.0},
    "none": {"beta_min": 0.0, "beta_max": 0.0, "noise_fraction": 0.0},
}

#: Horizon (bars) of the label whose oracle IC a store records: the handler's default ``label_horizon``.
ORACLE_HORIZON = 10
#: Field of the full-state expectation of the label (``build_synthetic_store(oracle_field=True)``; ``$oracle``).
ORACLE_FIELD = "oracle"


def market_params(signal: str = "drifting", overrides: dict | None = None) -> MarketParams:
    """The market of ``signal`` (:data:`SIGNAL_DEFAULTS`), with ``overrides`` (field -> value) on top.

    Example
    -------
    >>> market_params("persistent").regime_flip_prob
    0.0
    >>> market_params("none", {"t_df": 5.0}).t_df
    5.0
    """
    if signal not in SIGNALS:
        raise ValueError(f"signal: expected one of {', '.join(SIGNALS)}, found {signal!r}")
    values = {**SIGNAL_DEFAULTS[signal], **(overrides or {}), "signal": signal}
    return MarketParams(**values)


def load_market_params(path, *, signal: str = "drifting") -> MarketParams:
    """Read a YAML mapping of :class:`MarketParams` fields (``--params FILE``) on top of ``signal``'s market.

    Every key must be a field (``signal`` excepted: ``--signal`` sets it) and every value a number; the
    first bad one is refused naming file, line, key, expected and found.

    Example
    -------
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "m.yaml"
    >>> _ = f.write_text("beta_max: 0.2\\n")
    >>> load_market_params(f, signal="persistent").beta_max
    0.2
    >>> _ = f.write_text("beta_max: 0.2\\nbeta_mx: 1\\n")
    >>> try:
    ...     load_market_params(f)
    ... except ValueError as exc:
    ...     print(str(exc).split(": ", 1)[1][:67])
    key beta_mx: expected a field of MarketParams, found an unknown key
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    path = Path(path)
    try:   # ruamel, the project's one YAML reader (YAML 1.2; a duplicated key is an error)
        data = YAML(typ="rt", pure=True).load(path.read_text(encoding="utf-8"))
    except (OSError, YAMLError) as exc:
        raise ValueError(f"{path}: expected a readable YAML file of market parameters, found {exc}".replace("\n", " "))
    if data is None:
        return market_params(signal)
    if not isinstance(data, dict):
        raise ValueError(f"{path}, line 1: expected a mapping of market parameters, found a {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(MarketParams) if f.name != "signal"}
    overrides: dict = {}
    for key, value in data.items():
        where = f"{path}, line {data.lc.key(key)[0] + 1}: key {key}"
        if key not in fields:
            raise ValueError(f"{where}: expected a field of MarketParams, found an unknown key (fields: "
                             f"{', '.join(fields)})")
        kind = fields[key].type
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}: expected a number, found {value!r}")
        if kind in ("int", int) and float(value) != int(value):
            raise ValueError(f"{where}: expected an integer, found {value!r}")
        overrides[key] = int(value) if kind in ("int", int) else float(value)
    try:
        return market_params(signal, overrides)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


# ---------------------------------------------------------------------------- random helpers
def _rng(seed: int, key: str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), zlib.crc32(key.encode("utf-8"))]))


def _student_t(rng: np.random.Generator, df: float, size: int) -> np.ndarray:
    """Unit-variance Student-t draws."""
    return rng.standard_t(df, size) * np.sqrt((df - 2.0) / df)


def _lfilter(b, a, x, zi):
    """``scipy.signal.lfilter`` (imported on first use: the ingest reads only this module's symbol list)."""
    from scipy.signal import lfilter

    return lfilter(b, a, x, zi=zi)


def _ar1(rng: np.random.Generator, phi: float, sd: float, size: int) -> np.ndarray:
    """Stationary AR(1) with marginal standard deviation ``sd`` (vectorised with lfilter)."""
    shocks = rng.standard_normal(size) * sd * np.sqrt(1.0 - phi * phi)
    x0 = rng.standard_normal() * sd
    out, _ = _lfilter([1.0], [1.0, -phi], shocks, zi=[phi * x0])
    return out


# ---------------------------------------------------------------------------- regimes
@dataclass(frozen=True)
class Regimes:
    """Market-wide regime schedule over the sessions of a range.

    Attributes
    ----------
    start_session : numpy.ndarray of int
        Index (into the range's sessions) of each regime's first session.
    drift : numpy.ndarray
        Annualised drift ``mu_j``.
    beta : numpy.ndarray
        Momentum (+) / reversal (-) coefficient ``beta_j``.
    """

    start_session: np.ndarray
    drift: np.ndarray
    beta: np.ndarray

    def of_session(self, n_sessions: int) -> np.ndarray:
        """Regime number of every session ``0..n_sessions-1``."""
        return np.searchsorted(self.start_session, np.arange(n_sessions), side="right") - 1


def draw_regimes(n_sessions: int, *, seed: int, params: MarketParams = MarketParams()) -> Regimes:
    """Draw the regime schedule for ``n_sessions`` sessions (deterministic in ``seed``).

    Example
    -------
    >>> r = draw_regimes(500, seed=0)
    >>> int(r.start_session[0]), bool(np.all(np.abs(r.beta) >= 0.04))
    (0, True)
    """
    rng = _rng(seed, "regimes")
    starts, drifts, betas = [], [], []
    pos, sign = 0, 1.0 if rng.random() < 0.5 else -1.0
    strength = None
    while pos < max(n_sessions, 1):
        starts.append(pos)
        drifts.append(rng.normal(0.0, params.regime_drift_sd))
        if params.signal == "persistent":  # a reflected random walk in [beta_min, beta_max]: slow drift
            strength = (rng.uniform(params.beta_min, params.beta_max) if strength is None
                        else _reflect(strength + rng.normal(0.0, params.beta_step_sd), params.beta_min, params.beta_max))
            betas.append(sign * strength)
        else:
            betas.append(sign * rng.uniform(params.beta_min, params.beta_max))
        pos += int(rng.integers(params.regime_min_sessions, params.regime_max_sessions + 1))
        if rng.random() < params.regime_flip_prob:
            sign = -sign
    return Regimes(np.asarray(starts, dtype=np.int64), np.asarray(drifts), np.asarray(betas))


def _reflect(x: float, lo: float, hi: float) -> float:
    """``x`` reflected into ``[lo, hi]`` (a random walk's step that leaves the band bounces back)."""
    if hi <= lo:
        return lo
    width = hi - lo
    y = (x - lo) % (2.0 * width)
    return lo + (y if y <= width else 2.0 * width - y)


# ---------------------------------------------------------------------------- market state
@dataclass
class MarketPath:
    """Everything shared by the symbols of one simulation."""

    minutes: np.ndarray  # datetime64[m], naive New York
    session_of: np.ndarray  # session number of every bar
    minute_in_session: np.ndarray
    session_length: np.ndarray  # per bar: n of its session
    first_bar: np.ndarray  # bar index of every session's first bar
    session_dates: np.ndarray  # datetime64[D]
    regimes: Regimes
    regime_of_bar: np.ndarray
    market_logvol: np.ndarray
    market_shock: np.ndarray
    market_gap: np.ndarray  # per session
    sector_shocks: dict[str, np.ndarray]
    params: MarketParams
    seed: int


def _intraday_profile(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    tail = n - 1 - k
    u = (1.0 + 2.8 * np.exp(-k / 5.7) + 1.05 * np.exp(-k / 85.0) + 0.42 * np.exp(-tail / 68.0)
         + 0.2 * np.exp(-tail / 10.0))
    return u / np.sqrt(np.mean(u * u))


def _volume_profile(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Intraday shape of log volume, shifted so that ``mean(exp(profile)) = 1`` over the bars."""
    tail = n - 1 - k
    v = (0.53 * np.exp(-k / 5.4) + 1.6 * np.exp(-k / 200.0) + 1.6 * np.exp(-tail / 77.0)
         + 0.95 * np.exp(-tail / 8.5))
    return v - np.log(np.mean(np.exp(v)))


def simulate_market(
    start, end, *, seed: int, sectors: Sequence[str], params: MarketParams = MarketParams()
) -> MarketPath:
    """Draw the calendar, regimes, market factor and sector factors of a simulation."""
    sess = nyse_sessions(start, end)
    n = sess.n_minutes
    total = int(n.sum())
    if total == 0:
        raise ValueError(f"start/end: expected a range with at least one NYSE session, found none in {start}..{end}")
    first_bar = np.cumsum(n) - n
    session_of = np.repeat(np.arange(len(n)), n)
    k = np.arange(total) - np.repeat(first_bar, n)
    minutes = np.repeat(sess.open_local, n) + k.astype("timedelta64[m]")
    regimes = draw_regimes(len(n), seed=seed, params=params)
    rng = _rng(seed, "market")
    phi = float(np.exp(-np.log(2.0) / params.vol_half_life_minutes))
    market_logvol = _ar1(rng, phi, params.market_logvol_sd, total)
    market_shock = _student_t(rng, params.t_df, total)
    market_gap = _student_t(rng, params.t_df, len(n))
    phi_slow = float(np.exp(-np.log(2.0) / params.slow_vol_half_life_minutes))
    market_logvol += _ar1(rng, phi_slow, params.market_slow_logvol_sd, total)
    sector_shocks = {s: _student_t(_rng(seed, f"sector:{s}"), params.t_df, total) for s in sorted(set(sectors))}
    return MarketPath(
        minutes=minutes,
        session_of=session_of,
        minute_in_session=k,
        session_length=np.repeat(n, n),
        first_bar=first_bar,
        session_dates=sess.dates,
        regimes=regimes,
        regime_of_bar=regimes.of_session(len(n))[session_of],
        market_logvol=market_logvol,
        market_shock=market_shock,
        market_gap=market_gap,
        sector_shocks=sector_shocks,
        params=params,
        seed=seed,
    )


def _anchor_log_price(profile: SymbolProfile, dates: np.ndarray) -> np.ndarray:
    t0 = np.datetime64("2012-01-01", "D").astype(np.int64)
    t1 = np.datetime64("2018-12-31", "D").astype(np.int64)
    frac = (dates.astype("datetime64[D]").astype(np.int64) - t0) / float(t1 - t0)
    return np.log(profile.price_2012) + frac * (np.log(profile.price_2018) - np.log(profile.price_2012))


def _momentum_returns(shock: np.ndarray, drift_per_bar: np.ndarray,
                      market: MarketPath) -> tuple[np.ndarray, np.ndarray]:
    """``r = mu + beta_j s(t-1) + e`` with ``s`` the EMA of ``r``; lfilter per regime, state carried.

    Returns ``(r, s)``: the efficient returns and the state ``s(t)`` after bar ``t``.
    """
    lam = market.params.ema_lambda
    out = np.empty_like(shock)
    state_after = np.empty_like(shock)
    bounds = np.searchsorted(market.session_of, market.regimes.start_session, side="left")
    bounds = np.append(bounds, len(shock))
    state = 0.0  # s(t-1) at the start of the segment
    for j in range(len(market.regimes.beta)):
        a, b = int(bounds[j]), int(bounds[j + 1])
        if a >= b:
            continue
        beta = float(market.regimes.beta[j])
        x = shock[a:b] + drift_per_bar[a:b]
        # s(t) = (lam + (1-lam) beta) s(t-1) + (1-lam) x(t); r(t) = x(t) + beta s(t-1)
        coef = lam + (1.0 - lam) * beta
        s, zf = _lfilter([1.0 - lam], [1.0, -coef], x, zi=[coef * state])
        s_prev = np.empty_like(s)
        s_prev[0] = state
        s_prev[1:] = s[:-1]
        out[a:b] = x + beta * s_prev
        state_after[a:b] = s
        state = float(s[-1])
    return out, state_after


def _oracle_forecast(state: np.ndarray, market: MarketPath, horizon: int = ORACLE_HORIZON) -> np.ndarray:
    """The predictable part of the next ``horizon`` bars' log return, given the state ``s(t)``.

    ``E[r(t+1) + ... + r(t+h) | s(t)] = beta_j G_j s(t) + c_j(t)`` with ``G_j = sum_{k<h} coef_j^k``,
    ``coef_j = lam + (1 - lam) beta_j`` (``s(t+k) = coef s(t+k-1) + (1-lam) x``, ``E x`` = the drift);
    ``c_j(t)`` (the drift's part) is the same for every stock at a bar and left out: it changes no
    cross-sectional correlation. A label never spans a session close, and regimes change only between
    sessions, so ``j`` is the regime of bar ``t``.
    """
    lam = market.params.ema_lambda
    beta = market.regimes.beta[market.regime_of_bar]
    coef = lam + (1.0 - lam) * beta
    gain = (1.0 - coef**horizon) / (1.0 - coef)  # coef < 1: beta_max < 1 (MarketParams)
    return beta * gain * state


def _full_state_expectation(state: np.ndarray, eta: np.ndarray, market: MarketPath,
                            horizon: int = ORACLE_HORIZON) -> np.ndarray:
    """The generator's expectation of the label at bar ``t`` given its full state there (bp).

    The observed log close is the efficient one plus the microstructure noise, ``L(t) + eta(t)``, so the
    label's log return is ``sum_{u=t+1}^{t+h} r(u) + eta(t+h) - eta(t)`` and, given the momentum state
    ``s(t)``, the regime ``j`` (its drift ``mu`` per bar and ``beta``) and ``eta(t)``::

        E = 1e4 [ h mu + beta G s(t) + beta (1 - lam) mu (h - G) / (1 - coef) - eta(t) ]

    (``G``, ``coef`` as in :func:`_oracle_forecast`; the third term is the drift's feedback through the
    state). First order in the log return: the convexity term ``1e4 Var / 2`` (about 0.02 bp at the default
    volatility) and the rare missing bar at ``t + h`` (the label then takes an earlier close) are left out.
    Unlike the oracle of ``oracle_ic`` it conditions on ``eta(t)``, the bid-ask bounce that the observed
    prices partly reveal: it is the ceiling a model of the observed bars can approach, and the ground
    truth ``E[(E - p)^2]`` of a prediction ``p`` (the true excess risk, label noise aside).
    """
    lam = market.params.ema_lambda
    beta = market.regimes.beta[market.regime_of_bar]
    mu = market.regimes.drift[market.regime_of_bar] / (252.0 * 390.0)
    coef = lam + (1.0 - lam) * beta
    gain = (1.0 - coef**horizon) / (1.0 - coef)
    feedback = beta * (1.0 - lam) * mu * (horizon - gain) / (1.0 - coef)
    return 1e4 * (horizon * mu + beta * gain * state + feedback - eta)


def _forward_label(close: np.ndarray, market: MarketPath, horizon: int = ORACLE_HORIZON) -> np.ndarray:
    """The project's label ``1e4 (close[t+h] / close[t] - 1)`` (bp), as the minute handler computes it.

    ``NaN`` where ``close[t]`` is missing or ``t + h`` is past the session's last bar; ``close[t+h]`` is the
    last traded close at or before ``t + h`` (within the session: ``close[t]`` itself is traded).
    """
    ok = np.isfinite(close)
    idx = np.where(ok, np.arange(len(close)), 0)
    np.maximum.accumulate(idx, out=idx)
    y = np.full(len(close), np.nan)
    t = np.flatnonzero(ok & (market.minute_in_session + horizon < market.session_length))
    y[t] = 1e4 * (close[idx[t + horizon]] / close[t] - 1.0)
    return y


class _DailyCorrelation:
    """Running sums over stocks, per bar, of a forecast ``f`` and a label ``y``: the cross-sectional Pearson
    correlation of every bar (rolling_calib's and Qlib's IC: one date = one bar of the store)."""

    def __init__(self, n_bars: int) -> None:
        self.sums = np.zeros((6, n_bars))  # n, f, y, ff, yy, fy

    def add(self, f: np.ndarray, y: np.ndarray) -> None:
        ok = np.isfinite(f) & np.isfinite(y)
        f0, y0 = np.where(ok, f, 0.0), np.where(ok, y, 0.0)
        for row, v in enumerate((ok, f0, y0, f0 * f0, y0 * y0, f0 * y0)):
            self.sums[row] += v

    def mean_ic(self) -> float:
        """Mean over the bars where the correlation is defined (at least 2 stocks, neither side constant)."""
        n, sf, sy, sff, syy, sfy = self.sums
        with np.errstate(invalid="ignore", divide="ignore"):
            vf, vy = n * sff - sf * sf, n * syy - sy * sy
            ic = (n * sfy - sf * sy) / np.sqrt(vf * vy)
        keep = (n >= 2) & (vf > 1e-12 * np.maximum(n * sff, 1e-300)) & (vy > 0)
        return float(np.mean(ic[keep])) if keep.any() else float("nan")


def simulate_symbol(symbol: str, market: MarketPath) -> dict[str, np.ndarray]:
    """Simulate one symbol's bars on the market's calendar.

    The symbol's random stream is drawn in a fixed order: own log-volatility and shocks
    (:func:`_bar_returns`), overnight gaps (:func:`_log_prices`), high/low/vwap noise
    (:func:`_bar_prices`), volume noise (:func:`_bar_volume`), then the missing bars.

    Returns
    -------
    dict
        ``open, high, low, close, volume, vwap, factor`` as float64 arrays aligned with
        ``market.minutes`` (missing bars NaN in every field).
    """
    return _simulate_symbol(symbol, market)[0]


def _simulate_symbol(symbol: str, market: MarketPath) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """:func:`simulate_symbol`'s bars, the oracle forecast (:func:`_oracle_forecast`) and the full-state
    expectation of the label (:func:`_full_state_expectation`) of every bar."""
    prof = _profile(symbol)
    rng = _rng(market.seed, f"symbol:{symbol}")
    total = len(market.minutes)
    sigma, shock, ret, state, eta = _bar_returns(rng, prof, market)
    log_close, log_open = _log_prices(rng, prof, market, ret)
    open_, high, low, close, vwap = _bar_prices(rng, sigma, log_close, log_open)
    volume = _bar_volume(rng, prof, market, sigma, shock)
    cols = {
        "open": open_,
        "high": high,
        "low": low,
        "close": close,
        "volume": volume,
        "vwap": vwap,
        "factor": np.ones(total),
    }
    missing = rng.random(total) < market.params.missing_prob
    if missing.any():
        for v in cols.values():
            v[missing] = np.nan
    return cols, _oracle_forecast(state, market), _full_state_expectation(state, eta, market)


def _bar_returns(rng: np.random.Generator, prof: SymbolProfile,
                 market: MarketPath) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-bar volatility ``sigma``, shock ``sigma * z`` (market, sector, own Student-t), observed return, EMA
    state and the microstructure noise ``eta`` of the traded price.

    The return adds the regime's drift and the regime's momentum (:func:`_momentum_returns`).
    """
    p = market.params
    total = len(market.minutes)
    k, n = market.minute_in_session, market.session_length
    phi = float(np.exp(-np.log(2.0) / p.vol_half_life_minutes))
    own_logvol = _ar1(rng, phi, p.symbol_logvol_sd, total)
    base_vol = prof.annual_vol / np.sqrt(252.0 * 390.0)
    sigma = base_vol * _intraday_profile(k, n) * np.exp(
        market.market_logvol + own_logvol
        - 0.5 * (p.market_logvol_sd**2 + p.market_slow_logvol_sd**2 + p.symbol_logvol_sd**2)
    )
    bm, bs = prof.market_loading, p.sector_loading
    bi = np.sqrt(max(1.0 - bm * bm - bs * bs, 0.0))
    z_own = _student_t(rng, p.t_df, total)
    z = bm * market.market_shock + bs * market.sector_shocks[prof.sector] + bi * z_own
    shock = sigma * z
    drift = market.regimes.drift[market.regime_of_bar] / (252.0 * 390.0)
    ret, state = _momentum_returns(shock, drift, market)
    # microstructure noise on the traded price: r_obs(t) = r(t) + eta(t) - eta(t-1)
    eta = p.noise_fraction * sigma * rng.standard_normal(total)
    ret[1:] += eta[1:] - eta[:-1]
    ret[0] += eta[0]
    return sigma, shock, ret, state, eta


def _log_prices(rng: np.random.Generator, prof: SymbolProfile, market: MarketPath,
                ret: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Log close and open of every bar: intraday returns plus overnight gaps.

    The gaps revert weakly to the anchor path (AR(1) in the log deviation
    ``x_d = L_d - A_d = (1 - kappa) x_{d-1} + noise_d + D_d - (A_d - A_{d-1})``).
    """
    p = market.params
    n_sess = len(market.first_bar)
    day_ret = np.add.reduceat(ret, market.first_bar)
    anchor = _anchor_log_price(prof, market.session_dates)
    gap_sd = p.gap_vol_fraction * prof.annual_vol / np.sqrt(252.0)
    gap_noise = gap_sd * (0.6 * market.market_gap + 0.8 * _student_t(rng, p.t_df, n_sess))
    d_anchor = np.diff(anchor, prepend=anchor[0])
    x0 = rng.normal(0.0, 0.1)
    drive = gap_noise + day_ret - d_anchor
    x, _ = _lfilter([1.0], [1.0, -(1.0 - p.kappa)], drive, zi=[(1.0 - p.kappa) * x0])
    log_close_day = anchor + x
    prev_close = np.concatenate([[anchor[0] + x0], log_close_day[:-1]])
    gap = log_close_day - day_ret - prev_close

    ret_with_gap = ret.copy()
    ret_with_gap[market.first_bar] += gap
    log_close = (anchor[0] + x0) + np.cumsum(ret_with_gap)
    log_open = log_close - ret  # on a session's first bar: previous close + gap
    return log_close, log_open


def _bar_prices(rng: np.random.Generator, sigma: np.ndarray, log_close: np.ndarray,
                log_open: np.ndarray) -> tuple[np.ndarray, ...]:
    """``open, high, low, close, vwap``: high/low beyond open/close by half-normal noise, vwap within."""
    total = len(sigma)
    close = np.exp(log_close)
    open_ = np.exp(log_open)
    hi_base = np.maximum(open_, close)
    lo_base = np.minimum(open_, close)
    high = hi_base * np.exp(0.5 * sigma * np.abs(rng.standard_normal(total)))
    low = lo_base * np.exp(-0.5 * sigma * np.abs(rng.standard_normal(total)))
    vwap = np.clip((open_ + high + low + close) / 4.0 * np.exp(0.1 * sigma * rng.standard_normal(total)), low, high)
    return open_, high, low, close, vwap


def _bar_volume(rng: np.random.Generator, prof: SymbolProfile, market: MarketPath, sigma: np.ndarray,
                shock: np.ndarray) -> np.ndarray:
    """Whole-share volumes: intraday U-shape, market volatility, |shock| and AR(1) noise."""
    p = market.params
    k, n = market.minute_in_session, market.session_length
    noise = _ar1(rng, p.volume_ar, p.volume_noise_sd, len(sigma))
    abs_term = p.volume_abs_return_coef * (np.abs(shock) / sigma - 0.8)
    log_v = np.log(prof.adv / 390.0) + _volume_profile(k, n) + abs_term + 0.5 * market.market_logvol + noise
    return np.maximum(np.rint(np.exp(log_v)), 1.0)


def generate_bars(
    symbols: Sequence[str] = DEFAULT_SYMBOLS,
    *,
    start="2012-01-01",
    end="2018-12-31",
    seed: int = 0,
    params: MarketParams = MarketParams(),
    drop_missing: bool = False,
) -> pd.DataFrame:
    """Generate bars as one long DataFrame (``symbol, datetime`` + the fields), for small ranges.

    Parameters
    ----------
    symbols : sequence of str
    start, end : date-like
        Inclusive date range; the calendar is the NYSE's.
    seed : int
    params : MarketParams
    drop_missing : bool
        Drop the missing bars instead of keeping them as NaN rows.

    Returns
    -------
    pandas.DataFrame
        Long format sorted by symbol then time.
    """
    symbols = _check_symbols(symbols)
    market = simulate_market(start, end, seed=seed, sectors=[_profile(s).sector for s in symbols], params=params)
    frames = []
    times = market.minutes.astype("datetime64[ns]")
    for sym in symbols:
        cols = simulate_symbol(sym, market)
        df = pd.DataFrame({"symbol": sym, "datetime": times, **cols})
        frames.append(df.dropna(subset=["close"]) if drop_missing else df)
    return pd.concat(frames, ignore_index=True)


def _check_symbols(symbols: Sequence[str]) -> tuple[str, ...]:
    if isinstance(symbols, str):
        symbols = [s for s in symbols.replace(",", " ").split() if s]
    out = tuple(str(s).upper() for s in symbols)
    if not out:
        raise ValueError("symbols: expected at least one symbol, found none")
    for s in out:  # a name, never a path (data_prep.symbols)
        check_symbol(s, where="symbols")
    if len(set(out)) != len(out):
        raise ValueError(f"symbols: expected distinct symbols, found duplicates in {list(out)}")
    return out


def build_synthetic_store(
    out_dir,
    *,
    start="2012-01-01",
    end="2018-12-31",
    symbols: Sequence[str] = DEFAULT_SYMBOLS,
    seed: int = 0,
    params: MarketParams = MarketParams(),
    progress: bool = False,
    oracle_field: bool = False,
) -> Path:
    """Generate the synthetic market and write a complete Qlib ``1min`` provider directory.

    Symbol by symbol, straight into ``features/<symbol>/<field>.1min.bin`` (float32), so the
    peak memory is one symbol's arrays plus the shared market factors.

    Parameters
    ----------
    out_dir : path
        Target directory. The store is written beside it (``out_dir.staging-<pid>``) and published
        as a whole with a commit marker (:func:`data_prep.qlib_store.staged_write`): an existing
        store there is replaced at once (other files in ``out_dir`` are kept); a build killed
        midway leaves the previous store (or none), refused by readers until a build completes.
    start, end : date-like
        Inclusive range of calendar dates.
    symbols : sequence of str
        Default: the 25 of docs/method.md §3.3.
    seed : int
        Every random draw derives from it; same seed, same bars.
    params : MarketParams
        Generative model parameters (recorded in ``meta.json``).
    progress : bool
        Show a tqdm bar over symbols.
    oracle_field : bool
        Also write, per symbol, the field ``$oracle`` (:data:`ORACLE_FIELD`): the generator's expectation of
        the 10-minute label given its full state at each bar, in bp (:func:`_full_state_expectation`); the
        ground truth a scorer can measure a prediction's true excess risk against. The bars are the same.

    Returns
    -------
    pathlib.Path
        ``out_dir``.

    Example
    -------
    >>> import tempfile
    >>> d = build_synthetic_store(tempfile.mkdtemp(), start="2018-01-02", end="2018-01-05", symbols=["AAPL"])
    >>> (d / "calendars" / "1min.txt").read_text().splitlines()[0]
    '2018-01-02 09:30:00'
    """
    t0 = time.perf_counter()
    symbols = _check_symbols(symbols)
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected a non-negative integer, found {seed!r}")
    out = Path(out_dir)
    market = simulate_market(start, end, seed=int(seed), sectors=[_profile(s).sector for s in symbols], params=params)
    qlib_store.recover_interrupted(out)
    with qlib_store.staged_write(out, keep=False, writer="data_prep.synthetic") as stage:
        qlib_store.write_calendar(stage, market.minutes)
        oracle = _DailyCorrelation(len(market.minutes))
        full = _DailyCorrelation(len(market.minutes))
        rows = _write_symbols(stage, symbols, market, progress, oracle, full, oracle_field=oracle_field)
        first, last = pd.Timestamp(market.minutes[0]), pd.Timestamp(market.minutes[-1])
        spans = {sym: (first, last) for sym in symbols}
        qlib_store.write_instruments(stage, "all", spans)
        universe = [s for s in symbols if s in DEFAULT_SYMBOLS]
        qlib_store.write_instruments(stage, qlib_store.UNIVERSE_NAME, {s: spans[s] for s in universe})
        meta = _synthetic_meta(market, seed=int(seed), start=start, end=end, symbols=symbols, universe=universe,
                               rows=rows)
        meta.update(_oracle_meta(oracle, market, full))
        if oracle_field:
            meta["fields"] = [*meta["fields"], ORACLE_FIELD]
        meta["seconds"] = round(time.perf_counter() - t0, 3)
        qlib_store.write_meta(stage, meta)
    return out


def _write_symbols(out: Path, symbols: Sequence[str], market: MarketPath, progress: bool,
                   oracle: _DailyCorrelation, full: _DailyCorrelation, *,
                   oracle_field: bool = False) -> dict[str, dict[str, int]]:
    """Simulate and write each symbol's feature files (and ``$oracle`` with ``oracle_field``), adding its oracle
    forecast, full-state expectation and label to ``oracle`` and ``full``; ``{symbol: {"bars", "missing"}}``."""
    from tqdm.auto import tqdm

    rows: dict[str, dict[str, int]] = {}
    for sym in tqdm(symbols, desc="synth", unit="symbol", disable=not progress):
        cols, forecast, expected = _simulate_symbol(sym, market)
        label = _forward_label(cols["close"], market)
        oracle.add(forecast, label)
        full.add(expected, label)
        fields = {f: cols[f] for f in qlib_store.FIELDS}
        if oracle_field:
            fields[ORACLE_FIELD] = np.where(np.isfinite(label), expected, np.nan)
        qlib_store.write_symbol(out, sym, 0, fields)
        qlib_store._fault_point("synth:symbol_written")
        n_missing = int(np.isnan(cols["close"]).sum())
        rows[sym] = {"bars": len(cols["close"]) - n_missing, "missing": n_missing}
    return rows


def _synthetic_meta(market: MarketPath, *, seed: int, start, end, symbols: Sequence[str], universe: list[str],
                    rows: dict[str, dict[str, int]]) -> dict:
    """``meta.json`` of a synthetic store: seed, parameters, regimes, calendar and row counts."""
    first, last = pd.Timestamp(market.minutes[0]), pd.Timestamp(market.minutes[-1])
    return {
        "source": "synthetic",
        "generator": "data_prep.synthetic",
        "seed": seed,
        "start": str(pd.Timestamp(start).date()),
        "end": str(pd.Timestamp(end).date()),
        "symbols": list(symbols),
        "universe": {"name": qlib_store.UNIVERSE_NAME, "symbols": universe},
        "params": market.params.as_dict(),
        "regimes": {
            "first_session": [str(market.session_dates[i]) for i in market.regimes.start_session],
            "drift": market.regimes.drift.tolist(),
            "beta": market.regimes.beta.tolist(),
        },
        "calendar": {"bars": len(market.minutes), "sessions": len(market.first_bar), "first": str(first), "last": str(last)},
        "fields": list(qlib_store.FIELDS),
        "price_adjustment": "prices are generated as already back-adjusted; factor = 1.0",
        "rows": rows,
        "total_rows": int(sum(r["bars"] for r in rows.values())),
    }


def _oracle_meta(oracle: _DailyCorrelation, market: MarketPath, full: _DailyCorrelation | None = None) -> dict:
    """``oracle_ic`` (and ``oracle_ic_full_state``) of ``meta.json`` and what they mean."""
    ic = oracle.mean_ic()
    if not np.isfinite(ic) and not np.any(market.regimes.beta):
        ic = 0.0  # no predictable component: the expectation is the same for every stock, no ranking at all
    extra = {}
    if full is not None:
        fic = full.mean_ic()
        if not np.isfinite(fic) and not np.any(market.regimes.beta) and market.params.noise_fraction == 0:
            fic = 0.0
        extra = {
            "oracle_ic_full_state": None if not np.isfinite(fic) else round(float(fic), 6),
            "oracle_ic_full_state_definition": (
                f"as oracle_ic, with the generator's expectation of the label given its full state at the bar "
                f"(momentum state, regime drift and the microstructure noise eta(t), which observed prices partly "
                f"reveal; first order in the log return): the ceiling of a model of the observed bars"),
        }
    return {
        "signal": market.params.signal,
        "oracle_ic": None if not np.isfinite(ic) else round(float(ic), 6),
        "oracle_ic_definition": (
            f"mean over the store's bars of the cross-sectional Pearson correlation (rolling_calib's and Qlib's IC; "
            f"a date is one minute bar) between the generator's conditional expectation of the "
            f"{ORACLE_HORIZON}-minute forward return given its latent momentum state, beta_j G_j s_i(t), and the "
            f"label 1e4 (close[t+{ORACLE_HORIZON}] / close[t] - 1); the microstructure noise eta is not "
            f"conditioned on (so this is not a ceiling: see oracle_ic_full_state); 0 when the market has no "
            f"predictable component"
        ),
        **extra,
    }
