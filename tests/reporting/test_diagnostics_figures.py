"""The seed-variance figures: offsets per seed with refits marked, paired per-seed differences."""

from __future__ import annotations

import matplotlib
import pytest
from matplotlib import _pylab_helpers
from matplotlib.figure import Figure
from runner_helpers import write_fake_store

from rolling_calib.analysis.diagnostics import diagnose_store
from rolling_calib.reporting import figures as F


@pytest.fixture(scope="module")
def diagnosis(tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    write_fake_store(store, pipelines={"a": {"bias_sd": 2.0}, "b": {"bias_sd": 0.5}}, seeds=3)
    return diagnose_store(store)


def test_offsets_figure_own_and_given_axes(diagnosis):
    backend = matplotlib.get_backend()
    fig = F.plot_seed_offsets(diagnosis.of("a"))
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    a = fig.axes[0]
    assert len(a.get_lines()) == 3 + 1 + 1          # one per seed, one refit line, the zero line
    labels = a.get_legend_handles_labels()[1]
    assert labels == ["seed 0", "seed 1", "seed 2", "refit"]
    assert "corr of consecutive offsets" in a.get_title(loc="left")
    outer = Figure()
    ax = outer.add_subplot()
    assert F.plot_seed_offsets(diagnosis.of("b"), ax=ax) is outer
    assert matplotlib.get_backend() == backend and not _pylab_helpers.Gcf.get_all_fig_managers()


def test_paired_differences_figure(diagnosis, tmp_path):
    fig = F.plot_paired_differences(diagnosis, "a", "b")
    bars = [p for p in fig.axes[0].patches if p.get_facecolor()[3] == 1.0]   # the two tints are translucent
    assert len(bars) == 2 * 3
    diff = diagnosis.paired_differences("a", "b")
    assert [round(p.get_height(), 9) for p in bars[:3]] == [round(v, 9) for v in diff["ql_scored"]]
    assert [round(p.get_height(), 9) for p in bars[3:]] == [round(v, 9) for v in diff["cql"]]
    path = F.save_figure(fig, tmp_path / "paired.png")
    assert path.read_bytes().startswith(b"\x89PNG")
    assert {"plot_seed_offsets", "plot_paired_differences"} <= set(F.__all__)
