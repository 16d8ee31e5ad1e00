"""rolling_calib.reporting.figures and data_prep.plots: figures draw into given axes or make their own,
return the figure, and never switch matplotlib's backend."""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib import _pylab_helpers
from matplotlib.figure import Figure
from runner_helpers import write_fake_store

from rolling_calib.analysis.scoring import score_store
from rolling_calib.core.ranking import indistinguishable, pairwise_matrix
from rolling_calib.core.synthetic_experiments import run_linear_experiment
from rolling_calib.reporting import figures as F

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
    return pairwise_matrix(pd.DataFrame(rows), metric="cql", n_boot=200)


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
    assert len(ax.lines) == len(PIPES) and len(ax.collections) == len(PIPES)  # mean line + min..max band
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(PIPES)
    assert ax.get_ylabel() == "c_k (bp)"


def test_bias_without_ax(scores):
    fig = F.plot_bias(scores)
    assert isinstance(fig, Figure) and len(fig.axes) == 1 and len(fig.axes[0].lines) == len(PIPES)


def test_monthly_draws_into_given_axes(scores):
    fig, (top, bottom) = _axes(2)
    assert F.plot_monthly(scores, ax=[top, bottom]) is fig
    assert len(top.lines) == 2 * len(PIPES)  # QL and CQL per pipeline
    assert len(bottom.lines) == len(PIPES) + 1  # CQL - QL per pipeline, plus the zero line
    assert {t.get_text() for t in top.get_legend().get_texts()} == {f"{p} {m}" for p in PIPES for m in ("QL", "CQL")}


def test_monthly_without_ax(scores):
    fig = F.plot_monthly(scores)
    assert isinstance(fig, Figure) and len(fig.axes) == 2


def test_make_figures_returns_three_separate_figures(scores):
    figs = F.make_figures(scores)
    assert set(figs) == {"spread", "bias", "monthly"}
    assert all(isinstance(f, Figure) for f in figs.values()) and len({id(f) for f in figs.values()}) == 3


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
