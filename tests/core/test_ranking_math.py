"""Ranking, pairwise matrix, indistinguishable pairs and runs to separate: hand-computed cases,
scipy (Mann-Whitney U, Student t) as independent implementations, hypothesis properties."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from rolling_calib.core.ranking import (
    indistinguishable,
    mean_interval,
    pairwise_matrix,
    rank_configurations,
    runs_to_separate,
    runs_to_separate_top_two,
    scores_by_config,
    top_group,
)
from rolling_calib.core.resampling import Resampling


def runs_frame(scores: dict[str, list[float]], metric: str = "cql", other: dict[str, list[float]] | None = None):
    rows = []
    for name, values in scores.items():
        for seed, value in enumerate(values):
            row = {"pipeline": name, "seed": seed, metric: value}
            if other is not None:
                row["ql"] = other[name][seed]
            rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- ranking table
def test_rank_table_hand_computed():
    runs = runs_frame({"b": [3.0, 5.0], "a": [1.0, 2.0, 3.0], "c": [2.0, 2.0]},
                      other={"b": [1.0, 1.0], "a": [5.0, 5.0, 5.0], "c": [2.0, 4.0]})
    table = rank_configurations(runs, metrics=("cql", "ql"))
    assert table["pipeline"].tolist() == ["a", "c", "b"]  # cql means 2, 2, 4: tie a/c -> by name
    assert table["cql_rank"].tolist() == [1, 1, 3]
    assert table["ql_rank"].tolist() == [3, 2, 1]  # ql means 5, 3, 1
    a = table.iloc[0]
    assert a["n_runs"] == 3 and a["cql_mean"] == 2.0 and a["cql_std"] == 1.0
    half = 4.302652729911275 / math.sqrt(3)  # t_{0.975, 2} = 4.3027
    assert a["cql_ci_low"] == pytest.approx(2.0 - half) and a["cql_ci_high"] == pytest.approx(2.0 + half)
    c = table.iloc[1]
    assert c["cql_std"] == 0.0 and c["cql_ci_low"] == c["cql_ci_high"] == 2.0


def test_mean_interval_matches_scipy_t_interval():
    values = np.random.default_rng(1).normal(size=7)
    low, high = mean_interval(values, confidence=0.9)
    ref = stats.t.interval(0.9, len(values) - 1, loc=values.mean(), scale=stats.sem(values))
    assert (low, high) == pytest.approx(ref)
    assert all(math.isnan(v) for v in mean_interval(np.array([1.0]), confidence=0.95))


def test_bad_runs_tables_are_rejected_with_clear_errors():
    with pytest.raises(ValueError, match="missing column 'cql'"):
        rank_configurations(pd.DataFrame({"pipeline": ["a"], "ql": [1.0]}))
    with pytest.raises(ValueError, match="row 1 .*'b'.*finite"):
        rank_configurations(pd.DataFrame({"pipeline": ["a", "b"], "cql": [1.0, np.nan], "ql": [1.0, 1.0]}))
    with pytest.raises(ValueError, match="empty"):
        rank_configurations(pd.DataFrame({"pipeline": [], "cql": [], "ql": []}))
    with pytest.raises(ValueError, match="have no runs"):
        scores_by_config(runs_frame({"a": [1.0]}), metric="cql", order=["a", "zz"])
    with pytest.raises(ValueError, match="confidence"):
        mean_interval(np.array([1.0, 2.0]), confidence=1.5)


# --------------------------------------------------------------------------- pairwise matrix
def test_pairwise_matrix_hand_computed():
    runs = runs_frame({"a": [1.0, 2.0], "b": [3.0, 1.5], "c": [2.0, 2.0]})
    m = pairwise_matrix(runs, metric="cql", resampling=Resampling(n_boot=200, seed=3))
    assert m.names == ("a", "b", "c")
    # a vs b: 1<3, 1<1.5, 2<3 win; 2<1.5 loses -> 3/4
    # a vs c: 1<2 twice win; 2 vs 2 tie twice (1/2 each) -> (2 + 1) / 4
    # b vs c: 3>2 twice lose; 1.5<2 twice win -> 2/4
    expected = np.array([[np.nan, 0.75, 0.75], [0.25, np.nan, 0.5], [0.25, 0.5, np.nan]])
    np.testing.assert_allclose(m.accuracy, expected)
    assert m.n_runs == (2, 2, 2) and m.metric == "cql" and m.seed == 3
    frame = m.to_frame()
    assert len(frame) == 6 and frame.loc[(frame.a == "a") & (frame.b == "b"), "accuracy"].item() == 0.75
    table = m.to_table()
    assert table.loc["a", "b"].startswith("0.75 [") and table.loc["a", "a"] == ""
    assert m.to_dict()["accuracy"][0][0] is None


def test_pairwise_matrix_matches_mann_whitney_u():
    rng = np.random.default_rng(7)
    scores = {
        "x": rng.normal(0.0, 1.0, 8).round(1),  # rounding creates ties
        "y": rng.normal(0.5, 1.0, 6).round(1),
        "z": rng.normal(0.2, 2.0, 5).round(1),
    }
    m = pairwise_matrix(runs_frame(scores), metric="cql", resampling=Resampling(n_boot=100))
    for i, a in enumerate(m.names):
        for j, b in enumerate(m.names):
            if i == j:
                continue
            # U of (b, a) counts pairs with b > a (+1/2 ties) = pairs where a scores lower
            u = stats.mannwhitneyu(scores[b], scores[a], alternative="two-sided").statistic
            assert m.accuracy[i, j] == pytest.approx(u / (len(scores[a]) * len(scores[b])))


def test_pairwise_matrix_is_reproducible_and_seeded():
    runs = runs_frame({k: list(np.random.default_rng(i).normal(size=6)) for i, k in enumerate("abcd")})
    one = pairwise_matrix(runs, metric="cql", resampling=Resampling(n_boot=300, seed=11))
    two = pairwise_matrix(runs, metric="cql", resampling=Resampling(n_boot=300, seed=11))
    np.testing.assert_array_equal(one.ci_low, two.ci_low)
    np.testing.assert_array_equal(one.ci_high, two.ci_high)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.lists(st.floats(-5, 5, allow_nan=False).map(lambda v: round(v, 1)), min_size=2, max_size=6),
        min_size=2,
        max_size=4,
    )
)
def test_matrix_properties(columns):
    runs = runs_frame({f"p{i}": values for i, values in enumerate(columns)})
    m = pairwise_matrix(runs, metric="cql", resampling=Resampling(n_boot=50, seed=0))
    k = len(columns)
    off = ~np.eye(k, dtype=bool)
    np.testing.assert_allclose((m.accuracy + m.accuracy.T)[off], 1.0)  # complementary
    assert np.all((m.accuracy[off] >= 0) & (m.accuracy[off] <= 1))
    assert np.all(m.ci_low[off] <= m.accuracy[off] + 1e-12)
    assert np.all(m.accuracy[off] <= m.ci_high[off] + 1e-12)
    np.testing.assert_allclose(m.ci_low[off], (1 - m.ci_high.T)[off])
    assert np.all(np.isnan(np.diag(m.accuracy)))
    pairs = indistinguishable(m)
    for a, b in pairs:  # each listed pair's interval holds 0.5, each unlisted one does not
        i, j = m.names.index(a), m.names.index(b)
        assert m.ci_low[i, j] <= 0.5 <= m.ci_high[i, j]
    listed = {frozenset(p) for p in pairs}
    for i in range(k):
        for j in range(i + 1, k):
            if frozenset((m.names[i], m.names[j])) not in listed:
                assert not (m.ci_low[i, j] <= 0.5 <= m.ci_high[i, j])


def test_indistinguishable_and_top_group():
    runs = runs_frame({"a": [1.0, 2.0, 1.2, 1.8], "b": [1.5, 2.5, 1.1, 2.2], "c": [9.0, 10.0, 9.5, 9.9]})
    m = pairwise_matrix(runs, metric="cql", resampling=Resampling(n_boot=500))
    assert indistinguishable(m) == [("a", "b")]  # c is beaten by both in every pair: intervals [1, 1]
    assert m.ci_low[0, 2] == 1.0 and m.ci_high[0, 2] == 1.0
    assert top_group(m, best="a") == ["a", "b"]
    assert top_group(m, best="c") == ["c"]
    with pytest.raises(ValueError, match="not a configuration"):
        top_group(m, best="zz")


# --------------------------------------------------------------------------- runs to separate
def test_runs_to_separate_hand_computed():
    # z = 1.959964; z^2 * (0.1^2 + 0.1^2) / 0.1^2 = 7.68 -> 8
    assert runs_to_separate(gap=0.1, std_a=0.1, std_b=0.1, confidence=0.95) == 8
    # z^2 * (1 + 4) / 1 = 19.21 -> 20 (sign of the gap does not matter)
    assert runs_to_separate(gap=-1.0, std_a=1.0, std_b=2.0, confidence=0.95) == 20
    assert runs_to_separate(gap=1.0, std_a=0.0, std_b=0.0, confidence=0.95) == 2  # never fewer than two runs
    assert runs_to_separate(gap=0.0, std_a=1.0, std_b=1.0, confidence=0.95) == math.inf
    with pytest.raises(ValueError, match="std_a"):
        runs_to_separate(gap=1.0, std_a=-1.0, std_b=1.0, confidence=0.95)


@given(st.floats(0.01, 10), st.floats(0.0, 3), st.floats(0.0, 3))
def test_runs_to_separate_is_the_smallest_separating_n(gap, std_a, std_b):
    n = runs_to_separate(gap=gap, std_a=std_a, std_b=std_b, confidence=0.95)
    z = stats.norm.ppf(0.975)
    half = lambda k: z * math.sqrt((std_a**2 + std_b**2) / k)  # noqa: E731
    assert half(n) <= gap * (1 + 1e-9)
    if n > 2:
        assert half(n - 1) > gap


def test_runs_to_separate_top_two_uses_the_same_top_two_for_every_metric():
    # ql (ground truth) ranks a < b < c; cql has smaller spread -> fewer seeds needed
    ql = {"a": [1.0, 1.4, 0.6, 1.0], "b": [1.5, 1.9, 1.1, 1.5], "c": [5.0, 5.0, 5.1, 4.9]}
    cql = {"a": [1.0, 1.1, 0.9, 1.0], "b": [1.5, 1.6, 1.4, 1.5], "c": [5.0, 5.0, 5.1, 4.9]}
    runs = runs_frame(cql, other=ql)
    budgets = {b.metric: b for b in runs_to_separate_top_two(runs, metrics=("cql", "ql"), by="ql")}
    assert (budgets["cql"].a, budgets["cql"].b) == ("a", "b") == (budgets["ql"].a, budgets["ql"].b)
    std_q = float(np.std(ql["a"], ddof=1))
    assert budgets["ql"].gap == pytest.approx(0.5)
    assert budgets["ql"].runs_needed == runs_to_separate(gap=0.5, std_a=std_q, std_b=std_q, confidence=0.95)
    assert budgets["cql"].runs_needed < budgets["ql"].runs_needed
    assert budgets["cql"].runs_observed == 4
    assert budgets["ql"].to_dict()["runs_needed"] == budgets["ql"].runs_needed
    with pytest.raises(ValueError, match="at least two configurations"):
        runs_to_separate_top_two(runs_frame({"a": [1.0, 2.0]}, other={"a": [1.0, 2.0]}))


def test_heatmap_hatches_exactly_the_indistinguishable_cells():
    from rolling_calib.reporting.figures import plot_pairwise_heatmap

    runs = runs_frame({"a": [1.0, 2.0, 1.2, 1.8], "b": [1.5, 2.5, 1.1, 2.2], "c": [9.0, 10.0, 9.5, 9.9]})
    m = pairwise_matrix(runs, metric="cql", resampling=Resampling(n_boot=300))
    fig = plot_pairwise_heatmap(m)
    ax = fig.axes[0]
    hatched = [p for p in ax.patches if p.get_hatch() == "//"]
    assert len(hatched) == 2 * len(indistinguishable(m)) == 2
    assert {(round(p.get_x() + 0.5), round(p.get_y() + 0.5)) for p in hatched} == {(0, 1), (1, 0)}
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    import matplotlib.pyplot as plt

    plt.close(fig)
