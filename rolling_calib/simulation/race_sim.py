"""Sweeps simulated from a pair's variance components: ``K`` configurations for races and model confidence sets.

:class:`~rolling_calib.simulation.verdict_sim.PanelModel` describes a *pair* of pipelines. A sweep of
``K`` configurations extends it with the same components per configuration ``k``::

    L^k_{s,t} = level + m_t + c^k_t + delta_k + u^k_s + w^k_{s,j(t)} + e^k_{s,t}

* ``m_t``: the market, common to every configuration and seed;
* ``c^k_t``: configuration ``k``'s own daily part, independent across configurations, with half the
  pair model's interaction (AR(1) with marginal variance ``interaction_sd^2 / 2``, coefficient
  ``interaction_phi``) and half its drift regimes, so that any pair's common differential
  ``c^a_t - c^b_t`` has the pair model's law;
* ``u``, ``w``, ``e``: persistent seed offsets, seed x window offsets and seed x day noise, each with
  the pair model's sd and, for seed ``s``, correlation ``crn_*`` between any two configurations (a
  shared part ``sqrt(crn) x_s`` plus an own part ``sqrt(1 - crn) x^k_s``).

So every pair of the sweep is distributed as :func:`~rolling_calib.simulation.verdict_sim.simulate_pair`'s
pair, and :func:`~rolling_calib.simulation.verdict_sim.estimator_sd` is the standard error of any
pair's difference. **Truths**: ``future`` ``delta_k``; ``period`` ``delta_k + mean_t c^k_t``
(``centre_period=True`` removes ``mean_t c^k_t`` from each panel, so the period truth is ``delta_k``
on the simulated days too).

Examples
--------
>>> m = PanelModel(seed_sd=0.5, noise_sd=1.0, interaction_sd=0.4)
>>> panels, truth = simulate_sweep(m, deltas=[0.0, 0.0, 1.0], n_seeds=4, n_days=30, rng=np.random.default_rng(0))
>>> list(panels), panels["c2"].total.shape, truth["future"]["c2"]
(['c0', 'c1', 'c2'], (4, 30), 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rolling_calib.core.validation import Interval, validate_params
from rolling_calib.core.verdict import LossPanel
from rolling_calib.simulation.verdict_sim import PanelModel, _ar1, _regimes

__all__ = ["simulate_sweep"]


def _shared(rng: np.random.Generator, shape: tuple[int, ...], n_configs: int, sd: float,
            rho: float) -> np.ndarray:
    """Per configuration draws ``N(0, sd^2)`` of one per-seed part, correlation ``rho`` between configurations
    (shape ``(n_configs,) + shape``)."""
    if sd == 0:
        return np.zeros((n_configs,) + shape)
    own = rng.normal(0.0, sd, (n_configs,) + shape)
    if rho == 0:
        return own
    return math.sqrt(rho) * rng.normal(0.0, sd, shape)[None] + math.sqrt(1.0 - rho) * own


@validate_params({"n_seeds": Interval(int, 1, None), "n_days": Interval(int, 2, None)})
def simulate_sweep(model: PanelModel, *, deltas: Sequence[float], n_seeds: int, n_days: int,
                   rng: np.random.Generator, names: Sequence[str] | None = None,
                   centre_period: bool = False, seed_scales: Sequence[float] | None = None
                   ) -> tuple[dict[str, LossPanel], dict[str, dict[str, float]]]:
    """One simulated sweep: a panel per configuration (seeds ``0..n_seeds-1``, the same days) and its truths.

    Parameters
    ----------
    model : PanelModel
        A pair's variance components (module docstring: how a sweep extends them).
    deltas : sequence of float
        Each configuration's true shift (``delta_k``; the configuration named ``names[k]``).
    n_seeds, n_days : int
    rng : numpy Generator
    names : sequence of str, optional
        Default ``c0, c1, ...``.
    centre_period : bool
        Remove each configuration's realized daily part ``mean_t c^k_t``, so the period truth is ``delta_k``.
    seed_scales : sequence of float, optional
        Each configuration's multiplier of its seed parts ``u``, ``w``, ``e`` (default all 1: every
        configuration the model's): configurations whose seed variances differ (scale ``r``: ``r^2`` times
        the variance; the correlations ``crn_*`` kept).

    Returns
    -------
    panels : dict[str, LossPanel]
    truth : dict
        ``{"future": {name: delta}, "period": {name: delta + mean_t c_t}}`` (after centring, if asked).
    """
    K = len(deltas)
    names = [f"c{i}" for i in range(K)] if names is None else list(names)
    if len(names) != K:
        raise ValueError(f"names: expected {K} names (one per delta), found {len(names)}")
    shape = (K, n_days)
    market = model.level + (rng.normal(0.0, model.market_sd, n_days) if model.market_sd > 0 else np.zeros(n_days))
    own = _ar1(rng, shape, model.interaction_sd / math.sqrt(2.0), model.interaction_phi)
    if model.regime_sd > 0:
        own = own + _regimes(rng, shape, model.regime_sd / math.sqrt(2.0), float(model.regime_days))
    if centre_period:
        own = own - own.mean(axis=1, keepdims=True)
    e = _shared(rng, (n_seeds, n_days), K, model.noise_sd, model.crn_noise)
    u = _shared(rng, (n_seeds, 1), K, model.seed_sd, model.crn_seed)
    n_win = -(-n_days // model.window_days)
    w = _shared(rng, (n_seeds, n_win), K, model.window_sd, model.crn_window)
    day_window = np.arange(n_days) // model.window_days
    seed_parts = e + u + w[:, :, day_window]
    if seed_scales is not None:
        scales = np.asarray(seed_scales, dtype=np.float64)
        if scales.shape != (K,) or not np.all(np.isfinite(scales) & (scales >= 0)):
            raise ValueError(f"seed_scales: expected {K} finite numbers >= 0 (one per delta), found {list(scales)}")
        seed_parts = seed_parts * scales[:, None, None]
    losses = market[None, None, :] + own[:, None, :] + seed_parts + np.asarray(deltas, dtype=np.float64)[:, None, None]
    seeds = np.arange(n_seeds)
    panels = {n: LossPanel.from_arrays(seeds=seeds, total=losses[i]) for i, n in enumerate(names)}
    truth: dict[str, Any] = {"future": {n: float(d) for n, d in zip(names, deltas)},
                             "period": {n: float(d + own[i].mean()) for i, (n, d) in enumerate(zip(names, deltas))}}
    return panels, truth
