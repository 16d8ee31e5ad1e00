"""rolling_calib.reporting.figures and data_prep.plots: figures draw into given axes or make their own,
return the figure, and never switch matplotlib's backend."""

from __future__ import annotations

import matplotlib
import numpy as np
from matplotlib.colors import to_rgb
import pandas as pd
import pytest
from matplotlib import _pylab_helpers
from matplotlib.figure import Figure
from runner_helpers import write_fake_store

from rolling_calib.analysis.scoring import score_store
from rolling_calib.core.ranking import indistinguishable, pairwise_matrix
from rolling_calib.simulation.synthetic_experiments import run_linear_experiment
from rolling_calib.reporting import figures as F
from rolling_calib.core.resampling import Resampling

PIPES = {"calm": {"bias_sd": 0.2}, "wild": {"bias_sd": 2.0}}
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def scores(tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    write_fake_store(store, pipelines=PIPES, seeds=3)
    return score_store(store)


@pytest.fixture(scope="module")
def matrix():
    rows = [{"pipeline": name, "seed": s, "cql": v}
            for name, values in {"a": [1.0, 2.0, 1.2, 1.8], "b": [1.5, 2.5, 1.1, 2.2], "c": [9.0, 10.0, 9.5, 9.9]}.items()
            for s, v in enumerate(values)]
    return pairwise_matrix(pd.DataFrame(rows), metric="cql", resampling=Resampling(n_boot=200))


@pytest.fixture(scope="module")
def rounds():
    return run_linear_experiment(rounds=4, runs=5, seed=1, n_train=50, n_bias=20, n_remaining=100)


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    from data_prep import build_synthetic_store
    from data_prep.plots import store_profiles

    store = build_synthetic_store(tmp_path_factory.mktemp("data"), start="2018-01-02", end="2018-01-31",
                                  symbols=["AAPL", "F"], progress=False)
    return store_profiles(store)


@pytest.fixture(autouse=True)
def no_backend_switch(monkeypatch):
    """Every test here: no ``matplotlib.use``, the same backend afterwards, no pyplot-managed figure left."""
    backend = matplotlib.get_backend()
    managers = _pylab_helpers.Gcf.get_num_fig_managers()

    def refuse(*args, **kwargs):
        raise AssertionError(f"matplotlib.use{args} called: figures must not switch the backend")

    monkeypatch.setattr(matplotlib, "use", refuse)
    yield
    assert matplotlib.get_backend() == backend
    assert _pylab_helpers.Gcf.get_num_fig_managers() == managers


def _axes(n: int, **kw):
    fig = Figure()
    return fig, list(np.ravel(fig.subplots(1, n, squeeze=False, **kw)))


# --------------------------------------------------------------------------- the report's figures
def test_spread_draws_into_given_axes(scores):
    fig, axes = _axes(3)
    assert F.plot_spread(scores, ax=axes) is fig is axes[0].figure
    for ax in axes:
        assert len(ax.collections) == len(PIPES)  # one scatter (dots of the seeds) per pipeline
        assert [t.get_text() for t in ax.get_xticklabels()] == scores.pipelines
    assert [ax.get_title() for ax in axes] == ["QL, all periods", "QL, periods 2..K", "CQL, periods 2..K"]
    assert fig.get_suptitle() == ""  # figure-level title only on a figure of its own


def test_spread_without_ax(scores):
    fig = F.plot_spread(scores)
    assert isinstance(fig, Figure) and len(fig.axes) == 3
    assert fig.get_suptitle().startswith("Spread across seeds")


def test_bias_draws_into_given_axes(scores):
    _, (ax,) = _axes(1)
    assert F.plot_bias(scores, ax=ax) is ax.figure
    assert len(ax.lines) == len(PIPES) + 1 and len(ax.collections) == len(PIPES)  # mean line + band, refit line
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [*PIPES, "refit (new window)"]
    assert ax.get_ylabel() == "c_k (bp)"


def test_bias_without_ax(scores):
    fig = F.plot_bias(scores)
    assert isinstance(fig, Figure) and len(fig.axes) == 1 and len(fig.axes[0].lines) == len(PIPES) + 1


@pytest.fixture(scope="module")
def compared(scores):
    from rolling_calib.analysis.comparison import compare_store
    from rolling_calib.analysis.diagnostics import diagnose_store

    return compare_store(scores, resampling=Resampling(n_boot=100)), diagnose_store(scores.store, scores=scores)


def test_loss_differential_per_period_with_refits(scores):
    _, (ax,) = _axes(1)
    assert F.plot_loss_differential(scores, "calm", "wild", ax=ax) is ax.figure
    periods = sorted(scores.periods["period"].unique())
    assert [t.get_text() for t in ax.get_xticklabels()] == periods
    ql = [b for b in ax.patches if b.get_facecolor()[:3] == to_rgb(F.METRIC_SHADES["ql"]) and b.get_width() == 0.4]
    table = scores.periods.pivot_table(index=["period", "seed"], columns="pipeline", values="ql")
    expected = (table["calm"] - table["wild"]).groupby(level="period").mean()
    assert [round(b.get_height(), 9) for b in ql] == [round(v, 9) for v in expected]
    assert any(line.get_linestyle() == "--" for line in ax.lines)       # the refit is marked
    assert "calm - wild" in ax.get_ylabel()


def test_probability_of_improvement_per_pair_and_metric(compared):
    comparison, _ = compared
    fig = F.plot_probability_of_improvement(comparison)
    ax = fig.axes[0]
    pair = comparison.pairs[0]
    if comparison.accuracies_shown(pair) is None:
        assert [t.get_text() for t in ax.get_yticklabels()] == ["QL", "CQL", "IC", "Rank IC"]
        points = [line.get_xdata()[0] for line in ax.lines if line.get_marker() == "o"]
        assert points == [pair.accuracies[m].accuracy for m in ("ql", "cql", "ic", "rank_ic")]
    else:
        assert any("not shown" in t.get_text() for t in ax.texts)
    assert any(list(line.get_xdata()) == [0.5, 0.5] for line in ax.lines)   # the no-preference line


def test_pipeline_colors_are_one_mapping_used_by_every_figure(scores, compared):
    """Each pipeline has one colour in every figure of the report: the one pipeline_colors gives it."""
    comparison, diagnosis = compared
    colors = F.pipeline_colors(scores.pipelines)
    assert list(colors) == scores.pipelines and len(set(colors.values())) == len(colors)
    assert F.pipeline_colors(["b", "a", "b"]) == {"b": F.PALETTE[0], "a": F.PALETTE[1]}
    figs = F.make_figures(scores, comparison, diagnosis=diagnosis)
    assert {"spread", "bias", "offsets", "when_0", "differential_0", "paired_0", "improvement"} == set(figs)
    rgb = {name: to_rgb(c) for name, c in colors.items()}
    spread = figs["spread"].axes[0]
    assert [tuple(c.get_facecolor()[0][:3]) for c in spread.collections] == [rgb[p] for p in scores.pipelines]
    bias = figs["bias"].axes[0]
    assert {line.get_label(): to_rgb(line.get_color()) for line in bias.lines if line.get_label() in colors} == rgb
    for ax, d in zip(figs["offsets"].axes, diagnosis.pipelines):   # one shade of the pipeline's colour per seed
        shades = [to_rgb(line.get_color()) for line in ax.lines if line.get_label().startswith("seed")]
        assert len(shades) == len(d.seeds) == len(set(shades))
        assert F._shades(colors[d.pipeline], len(d.seeds)) == shades
    a, b = comparison.pairs[0].better, comparison.pairs[0].worse
    for name in ("differential_0", "paired_0", "when_0"):
        tints = [tuple(p.get_facecolor()[:3]) for p in figs[name].axes[0].patches if p.get_facecolor()[3] < 0.1]
        assert tints == [rgb[a], rgb[b]]                 # below 0 in a's colour, above 0 in b's
    when = comparison.when[0].whens["ql"]
    boxes = [p for p in figs["when_0"].axes[0].patches if p.get_facecolor()[3] > 0.1]
    assert len(boxes) == len(when.windows)               # one box per window, in the winner's colour or grey
    for box, w in zip(boxes, when.windows):
        assert tuple(box.get_edgecolor()[:3]) == (rgb[w.winner] if w.winner else to_rgb("0.55"))
        texts = {t.get_text(): to_rgb(t.get_color()) for t in figs[name].axes[0].texts}
        assert texts[f"below 0: {a} lower (better)"] == rgb[a] and texts[f"above 0: {b} lower (better)"] == rgb[b]
    improvement = figs["improvement"].axes[0]
    assert all(to_rgb(line.get_color()) == rgb[a] for line in improvement.lines if line.get_marker() == "o")


def test_make_figures_without_a_comparison(scores):
    figs = F.make_figures(scores)
    assert set(figs) == {"spread", "bias"}
    assert all(isinstance(f, Figure) for f in figs.values()) and len({id(f) for f in figs.values()}) == 2


def test_wrong_number_of_axes_is_a_clear_error(scores, rounds):
    _, axes = _axes(2)
    with pytest.raises(ValueError, match="expected 3 Axes"):
        F.plot_spread(scores, ax=axes)
    with pytest.raises(ValueError, match="expected 2 Axes"):
        F.plot_rounds(rounds, ax=axes[0])


# --------------------------------------------------------------------------- sweeps
def test_heatmap_draws_into_given_axes(matrix):
    fig, (ax,) = _axes(1)
    assert F.plot_pairwise_heatmap(matrix, ax=ax) is ax.figure
    k = len(matrix.names)
    assert len(ax.images) == 1
    assert len(ax.texts) == k * (k - 1)  # one value per off-diagonal cell
    hatched = [p for p in ax.patches if p.get_hatch() == "//"]
    assert len(hatched) == 2 * len(indistinguishable(matrix))
    assert len(fig.axes) == 2  # the heatmap and its colour bar
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]


def test_heatmap_without_ax_and_without_annotation(matrix):
    fig = F.plot_pairwise_heatmap(matrix, annotate=False, title="custom")
    ax = fig.axes[0]
    assert isinstance(fig, Figure) and len(ax.images) == 1 and len(ax.texts) == 0
    assert ax.get_title(loc="left") == "custom"


# --------------------------------------------------------------------------- synthetic experiments
def test_rounds_draws_into_given_axes(rounds):
    fig, (left, right) = _axes(2)
    assert F.plot_rounds(rounds, ax=(left, right)) is fig
    assert [t.get_text() for t in left.get_xticklabels()] == ["QL (whole set)", "QL (remaining)", "CQL"]
    assert len(right.collections) == 1 and len(right.collections[0].get_offsets()) == len(rounds.rounds)
    assert len(right.lines) == 1  # the diagonal
    assert fig.get_suptitle() == ""


def test_rounds_without_ax(rounds):
    fig = F.plot_rounds(rounds)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert fig.get_suptitle().startswith("Synthetic linear: 4 rounds x 5 runs")


# --------------------------------------------------------------------------- saving
def test_save_figure_is_atomic_and_follows_the_suffix(rounds, tmp_path):
    fig = F.plot_rounds(rounds)
    png = F.save_figure(fig, tmp_path / "sub" / "rounds.png")
    assert png == tmp_path / "sub" / "rounds.png" and png.read_bytes()[:8] == PNG
    svg = F.save_figure(fig, tmp_path / "rounds.svg")
    assert b"<svg" in svg.read_bytes()[:500]
    bare = F.save_figure(fig, tmp_path / "rounds")
    assert bare.read_bytes()[:8] == PNG
    assert not [p for p in tmp_path.rglob(".*") if p.name.endswith(".tmp")]


# --------------------------------------------------------------------------- data_prep
def test_store_profiles_draw_into_given_axes(profiles):
    from data_prep.plots import plot_store_profiles

    fig, axes = _axes(3)
    assert plot_store_profiles(profiles, ax=axes) is fig
    assert len(axes[0].lines) == profiles["daily_close"].shape[1] == 2  # one price path per symbol
    assert len(axes[1].lines) == 1 and len(axes[2].lines) == 1
    assert axes[0].get_yscale() == "log"


def test_store_profiles_without_ax(profiles):
    from data_prep.plots import plot_store_profiles

    fig = plot_store_profiles(profiles, title="store")
    assert isinstance(fig, Figure) and len(fig.axes) == 3 and fig.get_suptitle() == "store"
    with pytest.raises(ValueError, match="expected 3 Axes"):
        plot_store_profiles(profiles, ax=fig.axes[:2])


def test_plot_when_draws_into_given_axes_windows_band_and_refits(scores, compared):
    from matplotlib.figure import Figure

    comparison, _ = compared
    pw = comparison.when[0]
    fig = Figure()
    top, bottom = fig.subplots(2, 1)
    assert F.plot_when(pw, ax=[top, bottom], unit="bp²") is fig
    w = pw.whens["ql"]
    assert len([p for p in top.patches if p.get_facecolor()[3] > 0.1]) == len(w.windows)
    refit_lines = [line for line in top.lines if line.get_linestyle() == "--"]
    assert len(refit_lines) == len(w.windows) - 1       # a refit between consecutive windows
    path = [line for line in bottom.lines if "rolling mean" in line.get_label()][0]
    assert list(path.get_ydata()) == pytest.approx(w.fluctuation.rolling)
    assert w.consistency() in top.get_title(loc="left")
    with pytest.raises(ValueError, match="2 Axes"):
        F.plot_when(pw, ax=top)
