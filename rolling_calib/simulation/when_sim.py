"""Do the verdicts under drift hold? The headline, the per-window verdicts, the across-windows test and the
fluctuation warning measured against a known truth.

On pairs simulated from a :class:`~rolling_calib.simulation.verdict_sim.PanelModel` (its seed x window
offsets change at every refit, every ``window_days`` days; its drift switches regimes of
``regime_days`` on average, adding ``drift_ratio`` times the daily interaction's long-run variance),
:func:`calibrate_when` counts per cell (seeds x days x drift x refit window):

``headline``
    the default verdict (target period: over seeds, on these days) under its own null, the pair equal on
    the simulated days (A shifted by ``-mean_t c_t``): the share decided (false decisions). Beside it
    ``future``, the verdict the headline was before (target future) under *its* null (``delta = 0``),
    and ``period_power`` at a true period difference of ``effect_in_se`` standard errors;
``per_window``
    the per-window verdicts (:func:`rolling_calib.core.when.window_verdicts`, the refit windows) under
    the per-window null (A shifted by ``-mean_{t in j} c_t`` inside each window ``j``, so every window's
    period difference is 0): the share of pairs with *any* window decided (the family-wise error Holm
    bounds), beside ``per_window_raw`` (any window decided at 95% alone, no Holm);
``across``
    the across-windows test (:func:`rolling_calib.core.when.across_windows`: the odd- and the
    even-numbered windows tested apart, Bonferroni, the seeds' shared offsets counted from
    :func:`rolling_calib.core.when.window_tables`, as ``compare`` runs it) under the future null
    (``delta = 0``): the share decided, where it is made (at least 4 windows), with the regimes' mean
    length against the windows' (its assumption: every regime shorter than a window); beside it
    ``across_all``, one Ibragimov-Mueller test over all the windows (the seeds' part counted: the product's
    test before the halves), and ``across_plain``, the plain Ibragimov-Mueller test over all the windows
    (the seeds' shared part left out, the product's test before that). :func:`calibrate_across` measures
    the across-windows tests alone, with their power, on many more pairs;
``fluctuation``
    the fluctuation warning (:func:`rolling_calib.core.when.fluctuation_test`, as ``compare`` runs it: the
    rolling mean over a refit window's days, kept within 10-50% of the period, the refit windows as the
    seeds' noise blocks) on the same pairs: without drift its false-alarm rate (stable pairs), with drift
    how often it sees the regimes; and ``reversal_power``: on the cell's pairs with a one-time reversal
    added (A better by ``r`` in the first half, worse by ``r`` in the second, ``r = effect_in_se`` standard
    errors of a half-period mean difference under the future target), the share that fire.

Every rate comes with its Monte Carlo standard error ``sqrt(p (1 - p) / n_rep)``.

Examples
--------
>>> m = PanelModel(seed_sd=0.3, noise_sd=1.0, interaction_sd=0.5, window_days=20)
>>> rows = calibrate_when(m, cells=[WhenCell(5, 80)], n_rep=6, n_sim=200)
>>> sorted(k for k in rows[0] if k.endswith("_mc_se"))[:3]
['across_all_mc_se', 'across_mc_se', 'across_plain_mc_se']
>>> rows[0]["n_windows"], rows[0]["across_made"]
(4, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import stats

from rolling_calib.core.question import Question
from rolling_calib.core.resampling import Resampling
from rolling_calib.core.validation import CONFIDENCE, SEED, Interval, validate_params
from rolling_calib.core.verdict import LossPanel
from rolling_calib.core.when import (
    MIN_WINDOWS,
    across_windows,
    difference,
    fluctuation_test,
    window_tables,
    window_verdicts,
    windows_mean,
)
from rolling_calib.simulation.verdict_sim import (
    PanelModel,
    _ar1,
    _paired,
    _regime_paths,
    _simulate,
    estimator_sd,
)

__all__ = ["ACROSS_METHODS", "WhenCell", "calibrate_across", "calibrate_when"]

_N_REP = Interval(int, 2, None)
_N_SIM = Interval(int, 100, 100_000)


@dataclass(frozen=True)
class WhenCell:
    """One cell: seeds per pipeline, days, drift (None: none) and the refit window (None: the model's).

    ``regimes``: ``"markov"`` (the model's Markov switching: geometric lengths of mean ``regime_days``),
    ``"fixed"`` (every regime exactly ``regime_days`` long, the first cut at a uniform phase) or
    ``"straddle"`` (the same, each cut at the middle of a refit window when ``regime_days`` is the
    window's length: every window half one regime and half the next, the most adjacent windows can share
    where every regime fits in a window); only :func:`calibrate_across` draws the last two.
    """

    n_seeds: int
    n_days: int
    regime_days: float | None = None
    drift_ratio: float = 0.0
    window_days: int | None = None
    regimes: str = "markov"

    @property
    def drift(self) -> str:
        if not self.regime_days:
            return "none"
        return f"{self.regime_days:g}d x{self.drift_ratio:g}" + ("" if self.regimes == "markov" else f" {self.regimes}")


def _rate(hits: Sequence[bool] | np.ndarray) -> tuple[float, float]:
    x = np.asarray(hits, dtype=bool)
    if x.size == 0:
        return math.nan, math.nan
    p = float(x.mean())
    return p, math.sqrt(p * (1.0 - p) / x.size)


def _panels(a: np.ndarray, b: np.ndarray) -> tuple[LossPanel, LossPanel]:
    seeds = np.arange(a.shape[0])
    return LossPanel.from_arrays(seeds=seeds, total=a), LossPanel.from_arrays(seeds=seeds, total=b)


def _decided(a: np.ndarray, b: np.ndarray, target: str, confidence: float) -> tuple[bool, str]:
    """Does the verdict of ``target`` decide the pair (the interval :func:`~rolling_calib.core.verdict.decide`
    gives, through :func:`~rolling_calib.core.when.difference`), and which way (``"worse"``: A's loss higher)."""
    center, cv, _ = difference(*_panels(a, b), target=target)
    half = cv.half_width(confidence)
    outcome = "worse" if center - half > 0 else "better" if center + half < 0 else "undetermined"
    return outcome != "undetermined", outcome


def _cell_draws(model: PanelModel, cells: Sequence[WhenCell], *, seed: int,
                progress: Callable | None) -> Iterable[tuple[WhenCell, np.random.Generator, PanelModel]]:
    """Each cell with its own generator (one child of ``SeedSequence(seed)`` per cell, in order) and the model with
    the cell's drift (none where ``regime_days`` is unset); ``progress`` wraps the cells when given."""
    root = np.random.SeedSequence(int(seed))
    iterator = progress(cells) if progress is not None else cells
    for cell, child in zip(iterator, root.spawn(len(cells))):
        m = model.with_drift(cell.regime_days, cell.drift_ratio) if cell.regime_days else model.with_drift(None, 0)
        yield cell, np.random.default_rng(child), m


@validate_params({"n_rep": _N_REP, "seed": SEED, "confidence": CONFIDENCE, "n_sim": _N_SIM})
def calibrate_when(model: PanelModel, *, cells: Iterable[WhenCell], n_rep: int = 200, seed: int = 0,
                   confidence: float = 0.95, n_sim: int = 500, effects_in_se: Sequence[float] = (2.0, 3.0),
                   progress: Callable[[Iterable], Iterable] | None = None) -> list[dict[str, Any]]:
    """The four outputs' error rates per cell (module docstring), one dict per cell.

    Parameters
    ----------
    model : PanelModel
        The variance components (its drift is replaced by each cell's).
    cells : iterable of WhenCell
    n_rep : int
        Simulated pairs per cell.
    seed : int
        Seed of every draw (cells get independent streams).
    confidence : float
        Level of every verdict, of Holm's family and of the fluctuation band.
    n_sim : int
        Simulated null paths of each fluctuation test.
    effects_in_se : sequence of float
        Effects of the period power (standard errors of the period estimate) and of the reversal
        (standard errors of a half-period mean difference, future target).

    Returns
    -------
    list of dict
        Keys: the cell (``n_seeds, n_days, drift, regime_days, drift_ratio, window_days, n_windows,
        regimes_shorter``), ``n_rep``; ``headline``, ``future``, ``per_window``, ``per_window_raw``,
        ``across``, ``across_all`` and ``across_plain`` (NaN where not made), ``fluctuation``, ``period_power_<e>``,
        ``reversal_power_<e>``, each with ``_mc_se``; ``across_made``.
    """
    cell_list = list(cells)
    question = Question(confidence=confidence)
    rows = []
    for cell, rng, m in _cell_draws(model, cell_list, seed=seed, progress=progress):
        if cell.window_days is not None:
            m = replace(m, window_days=int(cell.window_days))
        k, T, W = cell.n_seeds, cell.n_days, m.window_days
        a, b, common = _simulate(m, n_rep, k, T, rng)
        starts = list(range(0, T, W))
        block = np.arange(T) // W
        se_period = estimator_sd(m, n_seeds=k, n_days=T, target="period")
        se_half = estimator_sd(m, n_seeds=k, n_days=max(T // 2, 1), target="future")
        hits: dict[str, list[bool]] = {name: [] for name in ("headline", "future", "per_window", "per_window_raw",
                                                              "across", "across_all", "across_plain",
                                                              "fluctuation")}
        for e in effects_in_se:
            hits[f"period_power_{e:g}"] = []
            hits[f"reversal_power_{e:g}"] = []
        n_windows = 0
        for r in range(n_rep):
            ar, br, c = a[r], b[r], common[r]
            hits["headline"].append(_decided(ar - c.mean(), br, "period", confidence)[0])
            hits["future"].append(_decided(ar, br, "future", confidence)[0])
            for e in effects_in_se:   # A worse by e standard errors on these days
                decided, outcome = _decided(ar - c.mean() + e * se_period, br, "period", confidence)
                hits[f"period_power_{e:g}"].append(outcome == "worse")
            window_means = np.array([c[block == j].mean() for j in range(block.max() + 1)])
            pa, pb = _panels(ar - window_means[block], br)
            windows = window_verdicts(pa, pb, starts=starts, question=question)
            n_windows = len(windows)
            hits["per_window"].append(any(w.outcome != "undetermined" for w in windows))
            hits["per_window_raw"].append(any(w.p_value <= 1 - confidence for w in windows))
            pa, pb = _panels(ar, br)
            if n_windows >= MIN_WINDOWS:
                diffs = [w.difference for w in window_verdicts(pa, pb, starts=starts, question=question)]
                tables = window_tables(pa, pb, starts=starts)
                hits["across"].append(across_windows(diffs, seed_tables=tables, confidence=confidence).outcome
                                      != "undetermined")
                hits["across_all"].append(across_windows(diffs, seed_tables=tables, confidence=confidence,
                                                         method="all").outcome != "undetermined")
                hits["across_plain"].append(across_windows(diffs, confidence=confidence, method="all").outcome
                                            != "undetermined")
            sims = Resampling(n_boot=n_sim, seed=int(rng.integers(2 ** 31)))
            hits["fluctuation"].append(fluctuation_test(pa, pb, window_days=W, starts=starts, question=question,
                                                        resampling=sims).fired)
            for e in effects_in_se:
                rev = e * se_half
                shift = np.r_[np.full(T // 2, -rev), np.full(T - T // 2, rev)]
                pa_rev, _ = _panels(ar + shift, br)
                hits[f"reversal_power_{e:g}"].append(fluctuation_test(pa_rev, pb, window_days=W, starts=starts,
                                                                      question=question, resampling=sims).fired)
        row: dict[str, Any] = {"n_seeds": k, "n_days": T, "drift": cell.drift, "regime_days": m.regime_days,
                               "drift_ratio": m.drift_ratio, "window_days": W, "n_windows": n_windows,
                               "regimes_shorter": (m.regime_days or 0) < W, "n_rep": n_rep,
                               "across_made": n_windows >= MIN_WINDOWS, "n_sim": n_sim}
        for name, values in hits.items():
            row[name], row[f"{name}_mc_se"] = _rate(values)
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- the across-windows test alone
#: The across-windows tests :func:`calibrate_across` measures side by side (the first is the product's).
ACROSS_METHODS = ("halves", "all", "pairs", "bound")
_EVEN = Interval(int, 4, None)


def _fixed_regimes(rng: np.random.Generator, shape: tuple[int, int], sd: float, regime_days: int,
                   phase: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Regimes of exactly ``regime_days`` days (the first and last cut by the sample at a uniform phase, or
    ``regime_days - phase`` days into the first), levels ``N(0, sd^2)``: the path and each day's regime."""
    n, T = shape
    phase = rng.integers(0, regime_days, size=(n, 1)) if phase is None else np.full((n, 1), int(phase))
    segment = (np.arange(T)[None, :] + phase) // regime_days
    levels = rng.normal(0.0, sd, (n, T // regime_days + 2))
    return np.take_along_axis(levels, segment, axis=1), segment


def _window_table_draws(model: PanelModel, n_rep: int, n_seeds: int, n_windows: int,
                        rng: np.random.Generator, regimes: str = "markov") -> tuple[np.ndarray, np.ndarray]:
    """``n_rep`` paired seeds x windows tables under the future null (``delta = 0``) and the longest regime of each.

    ``X_{s,j} = cbar_j + (u^A_s - u^B_s) + (w^A_{s,j} - w^B_{s,j}) + (ebar^A_{s,j} - ebar^B_{s,j})``: the window
    means of :func:`~rolling_calib.simulation.verdict_sim._simulate`'s paired differential (the market cancels),
    with ``cbar_j`` the mean of the daily common part ``c_t`` (the interaction's AR(1) and the regimes, drawn per
    day) over window ``j`` and the day noise's window mean drawn as one normal of variance ``noise_sd^2 / L``
    (the same distribution as the mean of ``L`` days, with the same common-random-number correlation).
    The longest regime is counted on the simulated days (a regime cut by the first or last day counts its days
    inside). ``regimes="fixed"`` / ``"straddle"``: every regime ``R = regime_days`` days long
    (:func:`_fixed_regimes`; at a uniform phase, or cut in the middle of the first ``R`` days), its
    level's sd ``sqrt(drift_ratio) interaction_sd / sqrt(R)`` so that its long-run variance, ``sd^2 R``, is
    ``drift_ratio`` times the interaction's variance as for the Markov regimes. Returns ``X`` ``(n_rep, k, q)``
    and the longest regimes ``(n_rep,)`` (0 without drift).
    """
    L = int(model.window_days)
    T = L * n_windows
    common = _ar1(rng, (n_rep, T), model.interaction_sd, model.interaction_phi)
    longest = np.zeros(n_rep, dtype=np.int64)
    if model.regime_sd > 0:
        if regimes in ("fixed", "straddle"):
            R = int(round(float(model.regime_days)))
            sd = math.sqrt(model.drift_ratio) * model.interaction_sd / math.sqrt(R)
            path, segment = _fixed_regimes(rng, (n_rep, T), sd, R, phase=R // 2 if regimes == "straddle" else None)
        else:
            path, segment = _regime_paths(rng, (n_rep, T), model.regime_sd, float(model.regime_days))
        common = common + path
        longest = np.array([np.bincount(row - row[0]).max() for row in segment])
    cbar = common.reshape(n_rep, n_windows, L).mean(axis=2)
    ua, ub = _paired(rng, (n_rep, n_seeds, 1), model.seed_sd, model.crn_seed)
    wa, wb = _paired(rng, (n_rep, n_seeds, n_windows), model.window_sd, model.crn_window)
    ea, eb = _paired(rng, (n_rep, n_seeds, n_windows), model.noise_sd / math.sqrt(L), model.crn_noise)
    return cbar[:, None, :] + (ua - ub) + (wa - wb) + (ea - eb), longest


def _across_outcome(x: np.ndarray, method: str, confidence: float) -> str:
    """The outcome of one across-windows test on a paired seeds x windows table ``x`` (``k x q``, ``q`` even).

    ``halves`` and ``all``: :func:`rolling_calib.core.when.across_windows`; ``pairs``: its ``all`` test on
    ``q / 2`` windows of twice the length (adjacent windows merged); ``bound``: the ``all`` test with the
    windows' part ``s_D^2 / q`` multiplied by ``(2q - 1) / (q - 1)``, what a lag-1 correlation of the
    windows' differences of 1/2 (the most a 1-dependent sequence can have) does to the variance of their mean
    (``1 + (q - 1) / q`` times) and to the expectation of ``s_D^2`` (``1 - 1/q`` times).
    """
    d = x.mean(axis=0)
    if method in ("halves", "all"):
        return across_windows(d, seed_tables=[x], confidence=confidence, method=method).outcome
    if method == "pairs":
        merged = 0.5 * (x[:, 0::2] + x[:, 1::2])
        return across_windows(merged.mean(axis=0), seed_tables=[merged], confidence=confidence,
                              min_windows=2, method="all").outcome
    q = d.size
    part = windows_mean(d, [x])
    se = math.sqrt(part.var_windows * (2.0 * q - 1.0) / (q - 1.0) + part.var_seeds)
    half = float(stats.t.ppf(0.5 + confidence / 2, part.degrees_of_freedom)) * se
    return "better" if part.mean + half < 0 else "worse" if part.mean - half > 0 else "undetermined"


@validate_params({"n_rep": _N_REP, "seed": SEED, "confidence": CONFIDENCE})
def calibrate_across(model: PanelModel, *, cells: Iterable[WhenCell], n_rep: int = 2000, seed: int = 0,
                     confidence: float = 0.95, effects_in_se: Sequence[float] = (2.0, 3.0),
                     methods: Sequence[str] = ACROSS_METHODS,
                     progress: Callable[[Iterable], Iterable] | None = None) -> list[dict[str, Any]]:
    """Level and power of the across-windows tests, side by side, on whole refit windows.

    Per cell (seeds ``k``, ``n_days = q L`` in ``q`` whole windows of ``L = window_days`` days, the cell's
    drift), ``n_rep`` seeds x windows tables of the paired differential (:func:`_window_table_draws`) under
    the future null (``delta = 0``), and the same tables with A worse by ``e`` standard errors of the mean
    difference under the future target (``se_future``: the sd of the null tables' grand means over the cell's
    draws, the regimes included) for each ``e`` of ``effects_in_se``. Each of ``methods`` (:func:`_across_outcome`:
    ``halves``, the product's; ``all``, the test before it; ``pairs``; ``bound``) gives per cell:

    ``<method>``
        the share of null tables decided (false decisions), with ``_mc_se``;
    ``<method>_within``
        the same among the draws whose regimes were all at most ``L`` days long (the ``halves`` test's
        stated assumption, met by that draw; NaN when none was), with ``_mc_se`` on ``n_within`` draws;
    ``<method>_power_<e>``
        the share of shifted tables decided "worse" (the right way), with ``_mc_se``.

    Plus the cell (``n_seeds, n_days, n_windows, window_days, drift, regime_days, drift_ratio``),
    ``n_rep``, ``n_within`` and ``share_within`` (draws whose regimes all ended within ``L`` days) and
    ``se_future`` (the effect's unit).

    Examples
    --------
    >>> m = PanelModel(seed_sd=0.3, noise_sd=1.0, interaction_sd=0.5, window_days=20)
    >>> (row,) = calibrate_across(m, cells=[WhenCell(5, 80, 10.0, 4.0, 20)], n_rep=50)
    >>> row["n_windows"], 0 <= row["halves"] <= 1, row["n_within"] <= 50
    (4, True, True)
    """
    cell_list = list(cells)
    unknown = sorted(set(methods) - set(ACROSS_METHODS))
    if unknown:
        raise ValueError(f"methods: expected some of {', '.join(ACROSS_METHODS)}, found {', '.join(unknown)}")
    rows = []
    for cell, rng, m in _cell_draws(model, cell_list, seed=seed, progress=progress):
        L = int(cell.window_days or m.window_days)
        q, rem = divmod(cell.n_days, L)
        if cell.regimes not in ("markov", "fixed", "straddle"):
            raise ValueError(f"cell {cell}: regimes: expected 'markov', 'fixed' or 'straddle', found "
                             f"{cell.regimes!r}")
        if rem or not _EVEN.accepts(q) or q % 2:
            raise ValueError(f"cell {cell}: expected n_days an even number (>= 4) of whole {L}-day windows, "
                             f"found {cell.n_days} days")
        m = replace(m, window_days=L)
        k = cell.n_seeds
        x, longest = _window_table_draws(m, n_rep, k, q, rng, regimes=cell.regimes)
        within = longest <= L
        se = float(x.mean(axis=(1, 2)).std(ddof=1))
        row: dict[str, Any] = {"n_seeds": k, "n_days": cell.n_days, "n_windows": q, "window_days": L,
                               "drift": cell.drift, "regime_days": m.regime_days, "drift_ratio": m.drift_ratio,
                               "n_rep": n_rep, "n_within": int(within.sum()), "share_within": float(within.mean()),
                               "se_future": se}
        for method in methods:
            null = np.array([_across_outcome(x[r], method, confidence) != "undetermined" for r in range(n_rep)])
            row[method], row[f"{method}_mc_se"] = _rate(null)
            row[f"{method}_within"], row[f"{method}_within_mc_se"] = _rate(null[within])
            for e in effects_in_se:
                hits = [_across_outcome(x[r] + e * se, method, confidence) == "worse" for r in range(n_rep)]
                row[f"{method}_power_{e:g}"], row[f"{method}_power_{e:g}_mc_se"] = _rate(hits)
        rows.append(row)
    return rows
