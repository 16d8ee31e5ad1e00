"""Every figure of rolling-calib: computed results in, matplotlib figures out.

Compute first, plot second: each ``plot_*`` function takes a result that is already
computed (:class:`~rolling_calib.analysis.scoring.StoreScores`,
:class:`~rolling_calib.core.ranking.PairwiseMatrix`,
:class:`~rolling_calib.simulation.synthetic_experiments.SyntheticResult`) and only draws it.

Every ``plot_*`` function takes the keyword ``ax``:

* ``ax=None`` (default): the function makes its own :class:`matplotlib.figure.Figure`
  (object-oriented API: no pyplot, no global figure registry, no backend needed to save
  it) with a suitable size, layout and figure title;
* ``ax=<Axes>``: it draws into the given axes and returns ``ax.figure``; figures with
  several panels take a sequence with one Axes per panel. Figure-level decorations
  (title, size, layout) are then left to the caller.

It returns the figure either way. Nothing here calls ``matplotlib.use``, so a notebook's
backend is left as it is. :func:`save_figure` writes a figure to a file atomically.

Example
-------
>>> import pandas as pd
>>> from rolling_calib.core.ranking import pairwise_matrix
>>> runs = pd.DataFrame({"pipeline": ["a", "a", "b", "b"], "seed": [0, 1, 0, 1], "cql": [1.0, 2.0, 3.0, 1.5]})
>>> fig = plot_pairwise_heatmap(pairwise_matrix(runs, metric="cql", resampling=Resampling(n_boot=100)))
>>> fig.axes[0].get_title(loc="left").splitlines()[0]
'P(a run of row beats a run of column) by cql'
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib import dates as mdates
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb, to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from scipy import stats

from rolling_calib.analysis.scoring import StoreScores
from data_prep.atomic import atomic_write
from rolling_calib.core.metric_table import METRIC_TABLE, title
from rolling_calib.core.question import DEFAULT_QUESTION, Question
from rolling_calib.core.when import BLOCK_WORDS

if TYPE_CHECKING:
    from rolling_calib.analysis.comparison import StoreComparison
    from rolling_calib.analysis.when import PairWhen
    from rolling_calib.core.ranking import PairwiseMatrix
    from rolling_calib.simulation.synthetic_experiments import SyntheticResult

__all__ = [
    "PALETTE",
    "pipeline_colors",
    "plot_spread",
    "plot_bias",
    "plot_probability_of_improvement",
    "plot_loss_differential",
    "plot_when",
    "plot_excess_curves",
    "make_figures",
    "plot_pairwise_heatmap",
    "plot_rounds",
    "save_figure",
]

#: Pipeline colours, in store order: the Okabe-Ito palette (distinguishable with the common colour-vision
#: deficiencies; its yellow left out, too pale on white), then four of matplotlib's tab10; cycled beyond 11.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000",
           "#8c564b", "#7f7f7f", "#bcbd22", "#9467bd")
#: Metric colours where a figure shows metrics, not pipelines (neutral greys: never mistaken for a pipeline).
METRIC_SHADES = {"ql": "#404040", "ql_scored": "#404040", "cql": "#a0a0a0"}

SPREAD_PANELS = (("ql", "QL, all periods"), ("ql_scored", "QL, periods 2..K"), ("cql", "CQL, periods 2..K"))
SCORES = ("vanilla", "vanilla_remaining", "calibrated")  # as in rolling_calib.simulation.synthetic_experiments
#: Per metric, whether lower is better (the tint of a differential's halves).
METRIC_TABLE_LOWER = {m: not spec.higher_is_better for m, spec in METRIC_TABLE.items()}


# --------------------------------------------------------------------------- axes handling
def _panels(
    ax: Any, n: int, *, figsize: tuple[float, float], vertical: bool = False, **subplots: Any
) -> tuple[Figure, list[Axes], bool]:
    """``(figure, n axes, made_here)``: a new figure of ``n`` panels (side by side, or stacked
    when ``vertical``) when ``ax`` is None, else the given axes.

    ``ax`` is one Axes (only when ``n == 1``) or a sequence of ``n`` Axes.
    """
    if ax is None:
        fig = Figure(figsize=figsize, layout="constrained")
        shape = (n, 1) if vertical else (1, n)
        return fig, list(fig.subplots(*shape, squeeze=False, **subplots).ravel()), True
    if isinstance(ax, Axes):
        given = [ax]
    else:
        given = list(np.ravel(np.asarray(ax, dtype=object)))
    if len(given) != n or not all(isinstance(a, Axes) for a in given):
        kinds = ", ".join(type(a).__name__ for a in given)
        raise ValueError(f"ax: expected {'one Axes' if n == 1 else f'{n} Axes (one per panel)'}, found [{kinds}]")
    return given[0].figure, given, False


def _rotate_dates(fig: Figure, axes: Sequence[Axes], made_here: bool) -> None:
    """Month ticks (``2018-03``; at most about 16 labels) and slanted date labels: the whole figure when it is
    ours, only our axes otherwise."""
    for a in axes:
        lo, hi = a.get_xlim()
        months = max(1, int((hi - lo) / 30.4))
        a.xaxis.set_major_locator(mdates.MonthLocator(interval=max(1, -(-months // 16))))
        a.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m"))
    if made_here:
        fig.autofmt_xdate()
    else:
        for a in axes:
            a.tick_params(axis="x", labelrotation=30)


# --------------------------------------------------------------------------- colours
def pipeline_colors(pipelines: Sequence[str]) -> dict[str, str]:
    """One colour per pipeline, by its position in ``pipelines`` (store order): the colour every figure uses.

    Examples
    --------
    >>> pipeline_colors(["wd0", "wd1e-2"])
    {'wd0': '#0072B2', 'wd1e-2': '#E69F00'}
    >>> len(set(pipeline_colors([f"p{i}" for i in range(len(PALETTE))]).values())) == len(PALETTE)
    True
    """
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(dict.fromkeys(pipelines))}


def _colors(colors: Mapping[str, str] | None, pipelines: Sequence[str]) -> Mapping[str, str]:
    """The given mapping (the report's, over every pipeline of the store), else :func:`pipeline_colors`."""
    return colors if colors is not None else pipeline_colors(pipelines)


def _shades(color: str, n: int) -> list[tuple[float, float, float]]:
    """``n`` shades of ``color`` from light to dark (one per seed: the pipeline stays recognisable)."""
    base = np.array(to_rgb(color))
    if n == 1:
        return [tuple(base)]
    out = []
    for t in np.linspace(0.0, 1.0, n):
        mix = 0.55 * (1 - t)  # towards white for the first seeds, towards the colour itself, then a little darker
        rgb = base * (1 - mix) + mix if t < 0.75 else base * (1 - 0.35 * (t - 0.75) / 0.25)
        out.append(tuple(np.clip(rgb, 0, 1)))
    return out


def _sides(a: Axes, lower: str, upper: str, colors: Mapping[str, str]) -> None:
    """Tint the half below 0 with ``lower``'s colour and the half above with ``upper``'s, and say so."""
    y0, y1 = a.get_ylim()
    span = y1 - y0
    lo, hi = min(y0, -0.12 * span), max(y1, 0.12 * span)  # room on both sides for the words
    a.axhspan(lo, 0.0, color=colors[lower], alpha=0.07, lw=0)
    a.axhspan(0.0, hi, color=colors[upper], alpha=0.07, lw=0)
    a.set_ylim(lo, hi)
    a.axhline(0.0, color="black", lw=0.8)
    a.text(0.005, 0.02, f"below 0: {lower} lower (better)", transform=a.transAxes, color=colors[lower],
           fontsize=8, va="bottom")
    a.text(0.005, 0.98, f"above 0: {upper} lower (better)", transform=a.transAxes, color=colors[upper],
           fontsize=8, va="top")


# --------------------------------------------------------------------------- the report's figures
def plot_spread(scores: StoreScores, *, ax: Axes | Sequence[Axes] | None = None,
                colors: Mapping[str, str] | None = None) -> Figure:
    """QL (all periods), QL (periods 2..K) and CQL of every pipeline across seeds: box plot + one dot per seed.

    ``ax``: None, or three Axes (one per panel, in the order QL, QL 2..K, CQL). ``colors``:
    pipeline -> colour (default :func:`pipeline_colors` of the scored pipelines).
    """
    pipes = scores.pipelines
    colors = _colors(colors, pipes)
    fig, axes, made_here = _panels(ax, len(SPREAD_PANELS), figsize=(max(10.0, 1.6 * len(pipes) * 3 + 3), 4.2))
    if made_here:
        fig.suptitle(f"Spread across seeds: one dot per seed, box = quartiles ({scores.label.loss_unit})")
    rng = np.random.default_rng(0)  # jitter only; fixed so the picture is reproducible
    long_names = max((len(p) for p in pipes), default=0) > 8 or len(pipes) > 3
    for a, (metric, title) in zip(axes, SPREAD_PANELS):
        data = [scores.scores_of(p)[metric] for p in pipes]
        boxes = a.boxplot(data, showfliers=False, widths=0.5, patch_artist=True)
        for box, name in zip(boxes["boxes"], pipes):
            box.set(facecolor=to_rgba(colors[name], 0.15), edgecolor=colors[name])
        for median in boxes["medians"]:
            median.set(color="black")
        for i, (values, name) in enumerate(zip(data, pipes), start=1):
            a.scatter(i + rng.uniform(-0.12, 0.12, values.size), values, s=16, alpha=0.85, zorder=3,
                      color=colors[name])
        a.set_xticks(range(1, len(pipes) + 1), pipes, rotation=30 if long_names else 0,
                     ha="right" if long_names else "center")
        a.set_title(title, fontsize=10)
        a.set_ylabel(f"loss ({scores.label.loss_unit})")
        a.yaxis.get_major_formatter().set_useOffset(False)
        a.grid(axis="y", alpha=0.3)
    return fig


def _period_stats(scores: StoreScores, column: str) -> pd.DataFrame:
    table = scores.periods
    grouped = table.groupby(["pipeline", "start"], sort=True)[column]
    return grouped.agg(["mean", "min", "max"]).reset_index()


def _period_lines(a: Axes, scores: StoreScores, pipeline: str, column: str, style: str, label: str,
                  color: str) -> None:
    """One pipeline's per-period mean of ``column`` over seeds, with a min..max band."""
    stats = _period_stats(scores, column)
    stats = stats[(stats["pipeline"] == pipeline) & stats["mean"].notna()]
    if stats.empty:
        return
    a.plot(stats["start"], stats["mean"], style, marker="o", ms=3, label=label, color=color)
    a.fill_between(stats["start"], stats["min"], stats["max"], color=color, alpha=0.12)


def _refit_starts(periods: pd.DataFrame) -> list[pd.Timestamp]:
    """Starts of the periods whose first row comes from a new training window (the first period excluded)."""
    if "refit_first" not in periods:
        return []
    first = periods["start"].min()
    refits = periods.loc[periods["refit_first"].astype(bool) & (periods["start"] > first), "start"]
    return sorted(pd.Timestamp(t) for t in refits.drop_duplicates())


def _mark_refits(a: Axes, starts: Sequence[Any]) -> None:
    for i, start in enumerate(starts):
        a.axvline(start, color="grey", ls="--", lw=1.0, label="refit (new window)" if i == 0 else None)


def plot_bias(scores: StoreScores, *, ax: Axes | None = None, colors: Mapping[str, str] | None = None) -> Figure:
    """The bias ``c_k`` applied each period, per pipeline: mean over seeds, band = min..max; refits marked.

    One line per pipeline that has a bias.
    """
    colors = _colors(colors, scores.pipelines)
    fig, (a,), made_here = _panels(ax, 1, figsize=(9, 3.8))
    for pipeline in scores.pipelines:
        _period_lines(a, scores, pipeline, "bias", "-", pipeline, colors[pipeline])
    _mark_refits(a, _refit_starts(scores.periods))
    a.set_title(f"Bias c_k applied each period ({scores.calibration.describe()})\n"
                "mean over seeds; band: min..max over seeds", fontsize=10, loc="left")
    a.set_ylabel(f"c_k ({scores.label.unit})")
    a.grid(alpha=0.3)
    a.legend(fontsize=8)
    _rotate_dates(fig, [a], made_here)
    return fig


def _period_differential(scores: StoreScores, a: str, b: str, column: str, confidence: float) -> pd.DataFrame:
    """Per period: ``column`` of ``a`` minus ``b``, mean over seeds and its t-interval over seeds.

    Paired (seed ``i`` minus seed ``i``) when both ran the same seeds, else the difference of the means
    with a Welch interval. Columns ``period, diff, low, high, n``.
    """
    table = scores.periods.pivot_table(index=["period", "seed"], columns="pipeline", values=column)
    rows = []
    for period, frame in table.groupby(level="period", sort=True):
        left = frame[a].dropna() if a in frame else pd.Series(dtype=float)
        right = frame[b].dropna() if b in frame else pd.Series(dtype=float)
        if left.empty or right.empty:
            continue
        common = left.index.intersection(right.index)
        if len(common) == len(left) == len(right):
            d = (left - right).to_numpy(dtype=float)
            diff, var, dof = float(d.mean()), (float(d.var(ddof=1)) / d.size if d.size > 1 else np.nan), d.size - 1
        else:
            va = float(left.var(ddof=1)) / left.size if left.size > 1 else np.nan
            vb = float(right.var(ddof=1)) / right.size if right.size > 1 else np.nan
            diff, var = float(left.mean() - right.mean()), va + vb
            dof = min(left.size, right.size) - 1
        half = float(stats.t.ppf(0.5 + confidence / 2, dof)) * np.sqrt(var) if dof >= 1 and np.isfinite(var) else np.nan
        rows.append({"period": period[0] if isinstance(period, tuple) else period, "diff": diff,
                     "low": diff - half, "high": diff + half, "n": int(min(left.size, right.size))})
    return pd.DataFrame(rows, columns=["period", "diff", "low", "high", "n"])


def plot_loss_differential(scores: StoreScores, a: str, b: str, *, ax: Axes | None = None,
                           colors: Mapping[str, str] | None = None,
                           question: Question = DEFAULT_QUESTION) -> Figure:
    """Per calibration period, QL and CQL of ``a`` minus ``b`` (mean over seeds, t-interval over seeds); refits marked.

    Bars below 0: ``a`` had the lower loss that period. A dashed line separates the periods
    before and after a refit (the first period of a new training window). CQL has no bar in
    the periods it does not score. The interval is over seeds only (market time is the
    verdict's business: the Diebold-Mariano test and the verdict table), at the ``question``'s
    confidence.
    """
    colors = _colors(colors, scores.pipelines)
    confidence = question.confidence
    ql, cql = (_period_differential(scores, a, b, c, confidence) for c in ("ql", "cql"))
    periods = list(ql["period"])
    fig, (axis,), made_here = _panels(ax, 1, figsize=(max(8.0, 0.55 * len(periods) + 4.0), 4.0))
    x = np.arange(len(periods))
    for offset, frame, metric in ((-0.2, ql, "ql"), (0.2, cql, "cql")):
        label = title(metric)
        pos = x[[periods.index(p) for p in frame["period"]]] + offset if len(frame) else np.array([])
        err = np.vstack([frame["diff"] - frame["low"], frame["high"] - frame["diff"]]) if len(frame) else None
        axis.bar(pos, frame["diff"], width=0.4, color=METRIC_SHADES[metric], label=label,
                 yerr=err, capsize=2, error_kw={"lw": 0.8})
    refit_periods = set(scores.periods.loc[scores.periods["start"].isin(_refit_starts(scores.periods)), "period"])
    for i, p in enumerate(p for p in periods if p in refit_periods):
        axis.axvline(periods.index(p) - 0.5, color="grey", ls="--", lw=1.0, label="refit (new window)" if i == 0 else None)
    axis.set_xticks(x, periods, rotation=45 if len(periods) > 12 else 0, ha="right" if len(periods) > 12 else "center")
    axis.set_xlim(-0.6, len(periods) - 0.4)
    axis.set_ylabel(f"{a} - {b} ({scores.label.loss_unit})")
    axis.grid(axis="y", alpha=0.3)
    _sides(axis, a, b, colors)
    axis.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    axis.set_title(f"Loss differential per period: {a} minus {b} (mean over seeds; bars: {confidence:.0%} "
                   f"t-interval over seeds)", fontsize=10, loc="left")
    return fig


def _date(value: Any) -> pd.Timestamp:
    return pd.Timestamp(value)


def plot_when(pair: PairWhen, *, metric: str = "ql", ax: Sequence[Axes] | None = None,
              colors: Mapping[str, str] | None = None, refits: Sequence[Any] = (), unit: str = "") -> Figure:
    """When was each of a pair better: each window's interval (top) and the fluctuation test's path (bottom).

    ``pair``: :class:`~rolling_calib.analysis.when.PairWhen` (what ``compare`` computed). Top: per
    window a box from its first to its last day spanning its interval at the level Holm spent on it, a
    line at its difference, tinted in the winner's colour (grey: undetermined), the across-windows mean
    (dotted), refits (dashed) and, where the fluctuation test fired, the least-squares break (the days'
    regimes). Bottom: the rolling mean of the seed-averaged differential against its simultaneous band,
    the first date it left the band marked. ``ax``: None, or two Axes (top, bottom). ``refits``: the
    first days of new training windows (default: the windows' own starts when the blocks are refit
    windows).
    """
    w = pair.whens[metric]
    names = [pair.better, pair.worse]
    colors = _colors(colors, names)
    fig, (top, bottom), made_here = _panels(ax, 2, figsize=(10.0, 6.4), vertical=True, sharex=True)
    u = f" ({unit})" if unit else ""
    finite = [v for v in w.windows if np.isfinite(v.ci_low) and np.isfinite(v.ci_high)]
    span = max((v.ci_high - v.ci_low for v in finite), default=1.0) or 1.0
    for v in w.windows:
        x0, x1 = _date(v.start), _date(v.end) + pd.Timedelta(days=1)
        lo = v.ci_low if np.isfinite(v.ci_low) else v.difference - span
        hi = v.ci_high if np.isfinite(v.ci_high) else v.difference + span
        color = colors.get(v.winner, "0.55") if v.winner else "0.55"
        top.add_patch(Rectangle((mdates.date2num(x0), lo), mdates.date2num(x1) - mdates.date2num(x0), hi - lo,
                                facecolor=to_rgba(color, 0.25), edgecolor=color, lw=1.0))
        top.plot([x0, x1], [v.difference, v.difference], color=color, lw=2.2)
        top.text(x0 + (x1 - x0) / 2, hi, v.label, ha="center", va="bottom", fontsize=7, color="0.3")
    if w.windows:
        top.set_xlim(_date(w.windows[0].start) - pd.Timedelta(days=2), _date(w.windows[-1].end) + pd.Timedelta(days=3))
        top.autoscale(axis="y")
    a = w.across
    if a.outcome != "not enough windows" and np.isfinite(a.mean):
        top.axhline(a.mean, color="black", ls=":", lw=1.0,
                    label=f"across windows: {a.winner + ' better' if a.winner else 'undetermined'} (mean)")
    starts = list(refits) if refits else ([_date(v.start) for v in w.windows[1:]] if w.blocks == "windows" else [])
    _mark_refits(top, starts)
    _mark_refits(bottom, starts)
    f = w.fluctuation
    if f is not None and f.fired and f.break_at is not None:
        for axis in (top, bottom):
            axis.axvline(_date(f.break_at), color="#D55E00", ls="-.", lw=1.2,
                         label=f"regime change (break {f.break_at})" if axis is top else None)
    if METRIC_TABLE_LOWER.get(metric, True):
        _sides(top, pair.better, pair.worse, colors)
    else:
        top.axhline(0.0, color="black", lw=0.8)
    top.set_title(f"{pair.better} - {pair.worse}, {title(metric)}, per {BLOCK_WORDS[w.blocks][0]}: "
                  f"{w.consistency()}\nboxes: interval at the level Holm spent on each window "
                  f"(family-wise {w.confidence:.0%})", fontsize=9, loc="left")
    top.set_ylabel(f"difference{u}")
    top.grid(axis="y", alpha=0.3)
    top.legend(fontsize=7, loc="upper right")
    if f is not None:
        times = [_date(t) for t in f.times]
        bottom.fill_between(times, f.center - f.half_width, f.center + f.half_width, color="0.85",
                            label=f"{f.confidence:.0%} simultaneous band")
        bottom.axhline(f.center, color="0.5", lw=0.8, label="the period's mean")
        bottom.plot(times, f.rolling, color="black", lw=1.3,
                    label=f"{f.window_days}-day rolling mean (at its last day)")
        if f.fired and f.left_at is not None:
            i = [str(t) for t in f.times].index(str(f.left_at))
            bottom.plot([times[i]], [f.rolling[i]], "o", color="#D55E00", ms=6,
                        label=f"left the band {f.left_at}")
        state = "changed (a warning, not a verdict)" if f.fired else "stable"
        bottom.set_title(f"Fluctuation: rolling mean of the seed-averaged differential, {state}", fontsize=9,
                         loc="left")
        bottom.legend(fontsize=7, loc="upper right")
    bottom.axhline(0.0, color="black", lw=0.6, ls=":")
    bottom.set_ylabel(f"{pair.better} - {pair.worse}{u}")
    bottom.grid(alpha=0.3)
    _rotate_dates(fig, [bottom], made_here)
    return fig


def _poi_rows(comparison: StoreComparison, metrics: Sequence[str]) -> list[tuple[Any, list[str], str | None]]:
    """Per pair: the pair, the metrics it has accuracies of, and why it is not shown (None: shown)."""
    return [(p, [m for m in metrics if m in p.accuracies], comparison.accuracies_shown(p)) for p in comparison.pairs]


def plot_probability_of_improvement(comparison: StoreComparison, *, ax: Axes | None = None,
                                    colors: Mapping[str, str] | None = None,
                                    metrics: Sequence[str] = ("ql", "cql", "ic", "rank_ic")) -> Figure:
    """Per pair and metric, P(a run of the better-by-QL pipeline scores better than a run of the other), with its
    bootstrap interval over seeds (rliable's "probability of improvement"); 0.5 = no preference.

    A point right of 0.5 favours the pair's first pipeline (drawn in its colour). Pairs whose
    accuracies mean nothing (:meth:`~rolling_calib.analysis.comparison.StoreComparison.accuracies_shown`:
    an undetermined ground truth, seeds without variance) are named with the reason instead.
    """
    names = list(comparison.summary["pipeline"]) if len(comparison.summary) else []
    colors = _colors(colors, names)
    rows = _poi_rows(comparison, metrics)
    n = sum(len(ms) + 1 for _, ms, _ in rows) or 1
    fig, (a,), made_here = _panels(ax, 1, figsize=(8.0, 0.32 * n + 1.6))
    y, ticks, labels = 0.0, [], []
    for pair, shown, why in rows:
        header = f"P({pair.better} beats {pair.worse})"
        a.text(0.0, y, header if why is None else f"{pair.better} vs {pair.worse}: not shown ({why})",
               fontsize=9, fontweight="bold", va="center", ha="left", color=colors.get(pair.better, "black"),
               transform=a.get_yaxis_transform())
        y -= 1
        if why is not None:
            continue
        for m in shown:
            acc = pair.accuracies[m]
            color = colors.get(pair.better, "black")
            a.plot([acc.ci_low, acc.ci_high], [y, y], color=color, lw=5, alpha=0.35, solid_capstyle="butt")
            a.plot([acc.accuracy], [y], "o", color=color, ms=6)
            a.text(1.02, y, f"{acc.accuracy:.2f} [{acc.ci_low:.2f}, {acc.ci_high:.2f}]", fontsize=8, va="center",
                   transform=a.get_yaxis_transform())
            ticks.append(y)
            labels.append(title(m))
            y -= 1
    a.axvline(0.5, color="grey", ls="--", lw=1.0)
    a.set_xlim(0.0, 1.0)
    a.set_ylim(y + 0.5, 0.7)
    a.set_yticks(ticks, labels)
    a.set_xlabel("probability of improvement (pairwise accuracy)")
    a.grid(axis="x", alpha=0.3)
    a.set_title(f"Probability of improvement, {comparison.confidence:.0%} percentile bootstrap over seeds "
                f"({comparison.n_boot} resamples); 0.5: no preference", fontsize=10, loc="left")
    return fig


def plot_excess_curves(curves: pd.DataFrame, *, ax: Axes | Sequence[Axes] | None = None,
                       colors: Mapping[str, str] | None = None, scope: str = "") -> Figure:
    """Cumulative excess return of the backtests: per seed (thin) and the mean over seeds (thick), per pipeline.

    ``curves`` holds one frame per cost kind (``{"without": ..., "with": ...}`` as a frame with a
    ``cost`` column), each of :func:`rolling_calib.analysis.portfolio.excess_curves`: ``pipeline, seed,
    date, cumulative`` (``seed`` -1: the mean curve). One panel per cost kind present.
    ``scope``: what the backtest is (strategy, benchmark, cost model, accumulation), in the title.
    """
    kinds = [k for k in ("without", "with") if (curves["cost"] == k).any()] or ["with"]
    fig, axes, made_here = _panels(ax, len(kinds), figsize=(11, 3.8), sharey=True)
    pipelines = list(dict.fromkeys(curves["pipeline"]))
    colors = _colors(colors, pipelines)
    styles = ("-", "--", ":", "-.")   # a pipeline whose curves equal another's still shows under it
    for a, kind in zip(axes, kinds):
        part = curves[curves["cost"] == kind]
        for i, name in enumerate(pipelines):
            runs = part[part["pipeline"] == name]
            for seed, run in runs.groupby("seed"):
                dates = pd.to_datetime(run["date"])
                values = run["cumulative"].to_numpy(dtype=float) * 100
                if seed == -1:
                    a.plot(dates, values, color=colors[name], lw=2.2, ls=styles[i % len(styles)],
                           label=f"{name}: mean of {runs['seed'].nunique() - 1} seed(s)")
                else:
                    a.plot(dates, values, color=colors[name], lw=0.8, alpha=0.45, ls=styles[i % len(styles)])
        a.axhline(0.0, color="#808080", lw=0.8, ls="--")
        a.set_title(f"excess return {kind} cost", fontsize=10, loc="left")
        a.set_ylabel("cumulative excess return (%)")
        a.legend(fontsize=8, loc="best")
    _rotate_dates(fig, axes, made_here)
    if made_here:
        import textwrap

        head = "Backtest over the joined windows: cumulative excess return per seed (thin) and their mean (thick)"
        fig.suptitle("\n".join([head, *textwrap.wrap(scope, 150)]), fontsize=9)
    return fig


def make_figures(scores: StoreScores, comparison: StoreComparison | None = None, *,
                 diagnosis: StoreDiagnosis | None = None) -> dict[str, Figure]:
    """The report's figures, each its own Figure, every pipeline in the colour :func:`pipeline_colors` gives it.

    ``"improvement"`` (with a comparison that has pairs), ``"excess"`` (with backtests: the cumulative
    excess-return curves, :func:`plot_excess_curves`), ``"when_<i>"`` per compared pair with per-window
    QL verdicts, ``"differential_<i>"`` per compared pair,
    ``"paired_<i>"`` per compared pair both pipelines of which were diagnosed, ``"offsets"`` (with a
    diagnosis: one panel per pipeline), ``"spread"`` and ``"bias"``.
    """
    colors = pipeline_colors(scores.pipelines)
    figs: dict[str, Figure] = {}
    pairs = [(p.better, p.worse) for p in comparison.pairs] if comparison is not None else []
    if pairs:
        figs["improvement"] = plot_probability_of_improvement(comparison, colors=colors)
    if len(scores.backtests):
        from rolling_calib.analysis.portfolio import excess_curves

        mode = comparison.portfolio.mode if comparison is not None and comparison.portfolio is not None else "sum"
        shown = scores.backtests[scores.backtests["pipeline"].isin(scores.pipelines)]
        curves = pd.concat([excess_curves(shown, cost=k, mode=mode).assign(cost=k) for k in ("without", "with")],
                           ignore_index=True)
        scope = comparison.portfolio.scope() if comparison is not None and comparison.portfolio is not None else ""
        figs["excess"] = plot_excess_curves(curves, colors=colors, scope=scope)
    diagnosed = {d.pipeline for d in diagnosis.pipelines} if diagnosis is not None else set()
    for i, (a, b) in enumerate(pairs):
        pair_when = comparison.when_of(comparison.pairs[i])
        if pair_when is not None and "ql" in pair_when.whens:
            refits = _refit_starts(scores.periods) if pair_when.blocks == "months" else ()
            figs[f"when_{i}"] = plot_when(pair_when, colors=colors, refits=refits,
                                          unit=scores.label.loss_unit)
        if a in diagnosed and b in diagnosed:
            figs[f"paired_{i}"] = plot_paired_differences(diagnosis, a, b, colors=colors)
        figs[f"differential_{i}"] = plot_loss_differential(
            scores, a, b, colors=colors, question=comparison.question)
    if diagnosis is not None and diagnosis.pipelines:
        k = len(diagnosis.pipelines)
        fig = Figure(figsize=(9, 3.4 * k), layout="constrained")
        axes = fig.subplots(k, 1, squeeze=False, sharex=True).ravel()
        for a, d in zip(axes, diagnosis.pipelines):
            plot_seed_offsets(d, ax=a, colors=colors)
        figs["offsets"] = fig
    figs["spread"] = plot_spread(scores, colors=colors)
    figs["bias"] = plot_bias(scores, colors=colors)
    return figs


# --------------------------------------------------------------------------- sweeps
def plot_pairwise_heatmap(
    matrix: PairwiseMatrix, *, title: str | None = None, annotate: bool = True, ax: Axes | None = None
) -> Figure:
    """Draw a computed :class:`~rolling_calib.core.ranking.PairwiseMatrix` as a heatmap.

    Cell ``(row, column)`` = probability that a run of the row configuration beats a run
    of the column configuration; cells whose interval contains 0.5 are hatched
    (indistinguishable). With ``annotate`` (and at most 16 configurations) every
    off-diagonal cell shows its value. A colour bar is added beside ``ax``.
    """
    k = len(matrix.names)
    size = max(4.0, 0.9 * k + 2.5)
    fig, (a,), _ = _panels(ax, 1, figsize=(size, size * 0.85))
    image = a.imshow(np.ma.masked_invalid(matrix.accuracy), cmap="RdBu_r", vmin=0.0, vmax=1.0)
    a.set_xticks(range(k), labels=matrix.names, rotation=45, ha="right", fontsize=8)
    a.set_yticks(range(k), labels=matrix.names, fontsize=8)
    a.set_xlabel("column configuration")
    a.set_ylabel("row configuration")
    for i in range(k):
        for j in range(k):
            if i == j:
                continue
            if matrix.ci_low[i, j] <= 0.5 <= matrix.ci_high[i, j]:
                a.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="//", edgecolor="0.45",
                                      linewidth=0.5, zorder=2))
            if annotate and k <= 16:
                a.text(j, i, f"{matrix.accuracy[i, j]:.2f}", ha="center", va="center", fontsize=7)
    fig.colorbar(image, ax=a, label="pairwise accuracy")
    pct = round(matrix.confidence * 100)
    a.set_title(title or f"P(a run of row beats a run of column) by {matrix.metric}\n"
                         f"hatched: {pct}% bootstrap CI contains 0.5", fontsize=9, loc="left")
    return fig


# --------------------------------------------------------------------------- synthetic experiments
def plot_rounds(result: SyntheticResult, *, ax: Sequence[Axes] | None = None) -> Figure:
    """Two panels of a synthetic experiment's per-round results.

    Left: the distribution over rounds of ``Acc_hat`` for the three scores. Right: per
    round, pipeline A's standard deviation of the calibrated metric against the vanilla
    one (points below the diagonal: the calibrated metric varies less across runs).

    ``ax``: None, or two Axes (left, right).
    """
    fig, (left, right), made_here = _panels(ax, 2, figsize=(11, 4.2))
    t = result.rounds
    v, c = result.vanilla_name, result.calibrated_name
    labels = [f"{v} (whole set)", f"{v} (remaining)", c]
    left.boxplot([t[f"acc_{key}"] for key in SCORES], showmeans=True)
    left.set_xticks([1, 2, 3], labels)
    left.set_ylabel("Acc per round (A ranked better)")
    left.set_title(f"Pairwise accuracy over {len(t)} rounds")
    right.scatter(t["vanilla_std"], t["calibrated_std"], s=12, alpha=0.7)
    lo = float(min(t["vanilla_std"].min(), t["calibrated_std"].min()))
    hi = float(max(t["vanilla_std"].max(), t["calibrated_std"].max()))
    right.plot([lo, hi], [lo, hi], color="grey", linewidth=1, linestyle="--", label="equal std")
    right.set_xlabel(f"std of {v} over A's runs (whole set)")
    right.set_ylabel(f"std of {c} over A's runs")
    right.set_title("Run-to-run spread, one point per round")
    right.legend(loc="upper left")
    if made_here:
        p = result.params
        fig.suptitle(f"Synthetic {result.experiment}: {p['rounds']} rounds x {p['runs']} runs, seed {p['seed']}")
    return fig


# --------------------------------------------------------------------------- saving
def save_figure(fig: Figure, path: str | os.PathLike[str], *, dpi: int = 120, format: str | None = None) -> Path:
    """Write ``fig`` to ``path`` atomically; the format follows the suffix (PNG/PDF/SVG), PNG without one.

    Works for figures made without pyplot (no backend needed). Returns ``path`` as a Path.
    """
    target = Path(path)
    fmt = format or target.suffix.lstrip(".").lower() or "png"
    return atomic_write(target, lambda tmp: fig.savefig(tmp, format=fmt, dpi=dpi))


# --------------------------------------------------------------------------- seed-variance diagnostics
if TYPE_CHECKING:
    from rolling_calib.analysis.diagnostics import PipelineDiagnosis, StoreDiagnosis

__all__ += ["plot_seed_offsets", "plot_paired_differences"]


def _corr_text(value: float) -> str:
    return "n/a" if not np.isfinite(value) else f"{value:.2f}"


def plot_seed_offsets(diagnosis: PipelineDiagnosis, *, ax: Axes | None = None,
                      colors: Mapping[str, str] | None = None) -> Figure:
    """Each seed's offset per period over time (mean residual minus the seeds' mean), refits marked.

    ``diagnosis``: one pipeline of :func:`rolling_calib.analysis.diagnostics.diagnose_store`.
    A dashed vertical line marks the start of every period whose first row comes from a new
    training window (a refit): CQL corrects that period with the previous model's bias.
    """
    fig, (a,), made_here = _panels(ax, 1, figsize=(9, 3.8))
    offsets = diagnosis.offsets
    color = _colors(colors, [diagnosis.pipeline])[diagnosis.pipeline]
    groups = list(offsets.groupby("seed", sort=True))
    for (seed, rows), shade in zip(groups, _shades(color, len(groups))):
        a.plot(rows["start"], rows["offset"], marker="o", ms=3, lw=1.2, label=f"seed {seed}", color=shade)
    for i, start in enumerate(offsets.loc[offsets["refit"], "start"].drop_duplicates()):
        a.axvline(start, color="grey", ls="--", lw=1.0, label="refit" if i == 0 else None)
    a.axhline(0.0, color="black", lw=0.6)
    p = diagnosis.persistence
    a.set_title(f"{diagnosis.pipeline}: each seed's offset (its mean residual minus the seeds' mean) per period\n"
                f"corr of consecutive offsets: inside a window {_corr_text(p.corr_within)}, "
                f"across a refit {_corr_text(p.corr_across)}", fontsize=9, loc="left")
    a.set_ylabel(f"offset ({diagnosis.label.unit})")
    a.grid(alpha=0.3)
    a.legend(fontsize=7, ncol=2 if len(diagnosis.seeds) > 6 else 1, loc="center left", bbox_to_anchor=(1.01, 0.5))
    _rotate_dates(fig, [a], made_here)
    return fig


def plot_paired_differences(diagnosis: StoreDiagnosis, a: str, b: str, *, ax: Axes | None = None,
                            colors: Mapping[str, str] | None = None) -> Figure:
    """Per seed ``i``: QL2..K and CQL of seed ``i`` of pipeline ``a`` minus those of seed ``i`` of ``b``.

    ``diagnosis``: the result of :func:`rolling_calib.analysis.diagnostics.diagnose_store`
    (:meth:`~rolling_calib.analysis.diagnostics.StoreDiagnosis.paired_differences`). Bars
    below 0 (tinted in ``a``'s colour): ``a``'s run of that seed scored lower (better). The bars
    are metrics, in neutral greys; the pipelines keep their colours in the tint.
    """
    diff = diagnosis.paired_differences(a, b)
    colors = _colors(colors, [p.pipeline for p in diagnosis.pipelines])
    fig, (axis,), _ = _panels(ax, 1, figsize=(max(8.0, 0.5 * len(diff) + 4.0), 3.8))
    x = np.arange(len(diff))
    for offset, column in ((-0.2, "ql_scored"), (0.2, "cql")):
        label = title(column)
        values = diff[column].to_numpy(dtype=float)
        spread = f"{values.std(ddof=1):.3g}" if values.size > 1 else "n/a"
        axis.bar(x + offset, values, width=0.4, color=METRIC_SHADES[column],
                 label=f"{label} (mean {values.mean():.3g}, std {spread} {diagnosis.label.loss_unit})")
    axis.set_xticks(x, [str(s) for s in diff["seed"]])
    axis.set_xlabel("seed")
    axis.set_ylabel(f"{a} - {b} ({diagnosis.label.loss_unit})")
    axis.set_title(f"Paired per-seed differences: seed i of {a} minus seed i of {b}", fontsize=10, loc="left")
    axis.grid(axis="y", alpha=0.3)
    _sides(axis, a, b, colors)
    axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2)
    return fig
