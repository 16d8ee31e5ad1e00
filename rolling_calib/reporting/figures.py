"""Every figure of rolling-calib: computed results in, matplotlib figures out.

Compute first, plot second: each ``plot_*`` function takes a result that is already
computed (:class:`~rolling_calib.analysis.scoring.StoreScores`,
:class:`~rolling_calib.core.ranking.PairwiseMatrix`,
:class:`~rolling_calib.core.synthetic_experiments.SyntheticResult`) and only draws it.

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
>>> fig = plot_pairwise_heatmap(pairwise_matrix(runs, metric="cql", n_boot=100))
>>> fig.axes[0].get_title(loc="left").splitlines()[0]
'P(a run of row beats a run of column) by cql'
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from rolling_calib.analysis.scoring import StoreScores
from rolling_calib.core.atomic import atomic_write

if TYPE_CHECKING:
    from rolling_calib.core.ranking import PairwiseMatrix
    from rolling_calib.core.synthetic_experiments import SyntheticResult

__all__ = [
    "plot_spread",
    "plot_bias",
    "plot_monthly",
    "make_figures",
    "plot_pairwise_heatmap",
    "plot_rounds",
    "save_figure",
]

SPREAD_PANELS = (("ql", "QL, all periods"), ("ql_scored", "QL, periods 2..K"), ("cql", "CQL, periods 2..K"))
SCORES = ("vanilla", "vanilla_remaining", "calibrated")  # as in rolling_calib.core.synthetic_experiments


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
    """Slant the date tick labels: the whole figure when it is ours, only our axes otherwise."""
    if made_here:
        fig.autofmt_xdate()
    else:
        for a in axes:
            a.tick_params(axis="x", labelrotation=30)


# --------------------------------------------------------------------------- the report's figures
def plot_spread(scores: StoreScores, *, ax: Axes | Sequence[Axes] | None = None) -> Figure:
    """QL (all periods), QL (periods 2..K) and CQL of every pipeline across seeds: box plot + one dot per seed.

    ``ax``: None, or three Axes (one per panel, in the order QL, QL 2..K, CQL).
    """
    pipes = scores.pipelines
    fig, axes, made_here = _panels(ax, len(SPREAD_PANELS), figsize=(max(9.0, 2.4 * len(pipes) + 6), 3.8))
    if made_here:
        fig.suptitle("Spread across seeds (one dot per seed)")
    rng = np.random.default_rng(0)  # jitter only; fixed so the picture is reproducible
    for a, (metric, title) in zip(axes, SPREAD_PANELS):
        data = [scores.scores_of(p)[metric] for p in pipes]
        a.boxplot(data, showfliers=False, widths=0.5)
        for i, values in enumerate(data, start=1):
            a.scatter(i + rng.uniform(-0.12, 0.12, values.size), values, s=14, alpha=0.8, zorder=3)
        a.set_xticks(range(1, len(pipes) + 1), pipes, rotation=30, ha="right")
        a.set_title(title)
        a.set_ylabel(f"loss ({scores.label.loss_unit})")
        a.grid(axis="y", alpha=0.3)
    return fig


def _period_stats(scores: StoreScores, column: str) -> pd.DataFrame:
    table = scores.periods
    grouped = table.groupby(["pipeline", "start"], sort=True)[column]
    return grouped.agg(["mean", "min", "max"]).reset_index()


def _period_lines(a: Axes, scores: StoreScores, pipeline: str, column: str, style: str, label: str) -> None:
    """One pipeline's per-period mean of ``column`` over seeds, with a min..max band."""
    stats = _period_stats(scores, column)
    stats = stats[(stats["pipeline"] == pipeline) & stats["mean"].notna()]
    if stats.empty:
        return
    line = a.plot(stats["start"], stats["mean"], style, marker="o", ms=3, label=label)[0]
    a.fill_between(stats["start"], stats["min"], stats["max"], color=line.get_color(), alpha=0.12)


def plot_bias(scores: StoreScores, *, ax: Axes | None = None) -> Figure:
    """The bias ``c_k`` applied each period, per pipeline: mean over seeds, band = min..max.

    One line per pipeline that has a bias.
    """
    fig, (a,), made_here = _panels(ax, 1, figsize=(8, 3.8))
    for pipeline in scores.pipelines:
        _period_lines(a, scores, pipeline, "bias", "-", pipeline)
    a.set_title(f"Bias c_k applied each period ({scores.calibration.describe()})\n"
                "(mean over seeds; band: min..max)", fontsize=10)
    a.set_ylabel(f"c_k ({scores.label.unit})")
    a.grid(alpha=0.3)
    a.legend(fontsize=8)
    _rotate_dates(fig, [a], made_here)
    return fig


def plot_monthly(scores: StoreScores, *, ax: Sequence[Axes] | None = None) -> Figure:
    """Two panels: QL and CQL per period; CQL - QL per period (what calibration changed).

    ``ax``: None, or two Axes (top: QL and CQL, bottom: CQL - QL).
    """
    fig, (top, bottom), made_here = _panels(ax, 2, figsize=(8, 6), vertical=True, sharex=True)
    periods = scores.periods.assign(gain=scores.periods["cql"] - scores.periods["ql"])
    view = dataclasses.replace(scores, periods=periods)
    for pipeline in scores.pipelines:
        for column, style, a in (("ql", "-", top), ("cql", "--", top), ("gain", "-", bottom)):
            label = pipeline if column == "gain" else f"{pipeline} {column.upper()}"
            _period_lines(a, view, pipeline, column, style, label)
    top.set_title(f"QL and CQL per period (mean over seeds; band: min..max)\n{scores.label.describe()}", fontsize=10)
    top.set_ylabel(f"loss ({scores.label.loss_unit})")
    bottom.axhline(0.0, color="grey", lw=0.8)
    bottom.set_title("CQL - QL per period (below 0: calibration lowered the loss)")
    bottom.set_ylabel(scores.label.loss_unit)
    for a in (top, bottom):
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    _rotate_dates(fig, [top, bottom], made_here)
    return fig


def make_figures(scores: StoreScores) -> dict[str, Figure]:
    """The report's figures: ``{"spread", "bias", "monthly"}`` -> matplotlib Figure (each its own)."""
    return {"spread": plot_spread(scores), "bias": plot_bias(scores), "monthly": plot_monthly(scores)}


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


def plot_seed_offsets(diagnosis: PipelineDiagnosis, *, ax: Axes | None = None) -> Figure:
    """Each seed's offset per period over time (mean residual minus the seeds' mean), refits marked.

    ``diagnosis``: one pipeline of :func:`rolling_calib.analysis.diagnostics.diagnose_store`.
    A dashed vertical line marks the start of every period whose first row comes from a new
    training window (a refit): CQL corrects that period with the previous model's bias.
    """
    fig, (a,), made_here = _panels(ax, 1, figsize=(8, 3.8))
    offsets = diagnosis.offsets
    for seed, rows in offsets.groupby("seed", sort=True):
        a.plot(rows["start"], rows["offset"], marker="o", ms=3, lw=1.2, label=f"seed {seed}")
    for i, start in enumerate(offsets.loc[offsets["refit"], "start"].drop_duplicates()):
        a.axvline(start, color="grey", ls="--", lw=1.0, label="refit" if i == 0 else None)
    a.axhline(0.0, color="black", lw=0.6)
    p = diagnosis.persistence
    a.set_title(f"{diagnosis.pipeline}: each seed's offset (its mean residual minus the seeds' mean) per period\n"
                f"corr of consecutive offsets: inside a window {_corr_text(p.corr_within)}, "
                f"across a refit {_corr_text(p.corr_across)}", fontsize=9, loc="left")
    a.set_ylabel(f"offset ({diagnosis.label.unit})")
    a.grid(alpha=0.3)
    a.legend(fontsize=7, ncol=2 if len(diagnosis.seeds) > 6 else 1)
    _rotate_dates(fig, [a], made_here)
    return fig


def plot_paired_differences(diagnosis: StoreDiagnosis, a: str, b: str, *, ax: Axes | None = None) -> Figure:
    """Per seed ``i``: QL2..K and CQL of seed ``i`` of pipeline ``a`` minus those of seed ``i`` of ``b``.

    ``diagnosis``: the result of :func:`rolling_calib.analysis.diagnostics.diagnose_store`
    (:meth:`~rolling_calib.analysis.diagnostics.StoreDiagnosis.paired_differences`). Bars
    below 0: ``a``'s run of that seed scored lower (better).
    """
    diff = diagnosis.paired_differences(a, b)
    fig, (axis,), _ = _panels(ax, 1, figsize=(max(6.0, 0.5 * len(diff) + 3.0), 3.8))
    x = np.arange(len(diff))
    for offset, column, label in ((-0.2, "ql_scored", "QL2..K"), (0.2, "cql", "CQL")):
        values = diff[column].to_numpy(dtype=float)
        spread = f"{values.std(ddof=1):.3g}" if values.size > 1 else "n/a"
        axis.bar(x + offset, values, width=0.4, label=f"{label} (mean {values.mean():.3g}, std {spread})")
    axis.axhline(0.0, color="black", lw=0.6)
    axis.set_xticks(x, [str(s) for s in diff["seed"]])
    axis.set_xlabel("seed")
    axis.set_ylabel(f"{a} - {b} ({diagnosis.label.loss_unit})")
    axis.set_title(f"Paired per-seed differences: seed i of {a} minus seed i of {b}", fontsize=10, loc="left")
    axis.grid(axis="y", alpha=0.3)
    axis.legend(fontsize=8)
    return fig
