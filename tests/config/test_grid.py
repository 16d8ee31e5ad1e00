"""Sweep grid parsing, resolution against the YAML, expansion, and the errors for bad grids."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rolling_calib.config.grid import Pipeline, expand_grid, format_value, parse_grid, parse_value, resolve_key

CONFIG = {
    "task": {
        "model": {"kwargs": {"hidden_size": 64, "weight_decay": 0.0, "num_layers": 2, "optimizer": "adam"}},
        "dataset": {
            "kwargs": {
                "step_len": 20,
                "handler": {"kwargs": {"label_horizon": 10, "fit_start_time": "2012-01-01"}},
            }
        },
    },
    "rolling": {"step_months": 6},
}


def test_short_names_resolve_and_values_follow_yaml_scalar_rules():
    grid = parse_grid(
        ["hidden_size=32,64,128", "weight_decay=0,5e-6,1.5E-5", "optimizer=adam,sgd", "step_len=10,20",
         "label_horizon=5"],
        config=CONFIG,
    )
    assert grid == {
        "task.model.kwargs.hidden_size": [32, 64, 128],
        "task.model.kwargs.weight_decay": [0, 5e-6, 1.5e-5],
        "task.model.kwargs.optimizer": ["adam", "sgd"],
        "task.dataset.kwargs.step_len": [10, 20],
        "task.dataset.kwargs.handler.kwargs.label_horizon": [5],
    }
    assert type(grid["task.model.kwargs.hidden_size"][0]) is int
    assert type(grid["task.model.kwargs.weight_decay"][1]) is float


def test_full_dotted_path_and_order_preserved():
    grid = parse_grid(["task.model.kwargs.num_layers=3,2", "hidden_size=64"], config=CONFIG)
    assert list(grid) == ["task.model.kwargs.num_layers", "task.model.kwargs.hidden_size"]
    assert grid["task.model.kwargs.num_layers"] == [3, 2]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("hidden_size", "no '=' found"),
        ("=1,2", "empty KEY"),
        ("hidden_size=", "at least one value"),
        ("hidden_size=32,,64", "value 2 is empty"),
        ("hidden_size=32,", "value 2 is empty"),
        ("hidden_size=32,32", "appears twice"),
        ("weight_decay=0,0.0", "appears twice"),
        ("hiden_size=32", "unknown key"),
        ("task.model.kwargs.hiden_size=32", "no such path"),
        ("rolling.step_months=3,6", "only paths under 'task'"),
        ("hidden_size=[1,2]", "value 1"),
    ],
)
def test_bad_grid_errors_name_the_argument(spec, message):
    with pytest.raises(ValueError, match="--grid") as info:
        parse_grid([spec], config=CONFIG)
    assert message in str(info.value)


def test_duplicate_key_even_through_short_name():
    with pytest.raises(ValueError, match="already swept"):
        parse_grid(["hidden_size=32", "task.model.kwargs.hidden_size=64"], config=CONFIG)


def test_resolve_key_prefers_model_kwargs():
    cfg = {"task": {"model": {"kwargs": {"x": 1}}, "dataset": {"kwargs": {"x": 2}}}}
    assert resolve_key("x", config=cfg) == "task.model.kwargs.x"


def test_expand_grid_cartesian_product_names_and_overrides():
    grid = parse_grid(["hidden_size=32,64", "weight_decay=0,5e-6"], config=CONFIG)
    pipelines = expand_grid(grid)
    assert [p.name for p in pipelines] == [
        "hidden_size=32,weight_decay=0",
        "hidden_size=32,weight_decay=5e-06",
        "hidden_size=64,weight_decay=0",
        "hidden_size=64,weight_decay=5e-06",
    ]
    assert pipelines[1] == Pipeline(
        "hidden_size=32,weight_decay=5e-06",
        {"task.model.kwargs.hidden_size": 32, "task.model.kwargs.weight_decay": 5e-6},
    )
    assert all("/" not in p.name for p in pipelines)


def test_expand_grid_uses_full_path_when_last_parts_collide():
    grid = {"task.model.kwargs.x": [1], "task.dataset.kwargs.x": [2, 3]}
    assert [p.name for p in expand_grid(grid)] == [
        "task.model.kwargs.x=1,task.dataset.kwargs.x=2",
        "task.model.kwargs.x=1,task.dataset.kwargs.x=3",
    ]
    with pytest.raises(ValueError, match="at least one swept key"):
        expand_grid({})


def test_names_are_file_system_safe():
    assert format_value("a/b c") == "a_b_c"


@given(
    st.one_of(
        st.integers(-10**6, 10**6),
        st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6),
        st.booleans(),
    )
)
def test_parse_value_round_trips_numbers_and_bools(value):
    text = format_value(value)
    parsed = parse_value(text)
    assert parsed == value and type(parsed) is type(value)


@given(st.lists(st.integers(1, 512), min_size=1, max_size=5, unique=True),
       st.lists(st.sampled_from([0, 1e-6, 3e-6, 5e-6, 7e-6]), min_size=1, max_size=4, unique=True))
def test_grid_size_is_product_of_value_counts(hidden, decay):
    spec = ["hidden_size=" + ",".join(map(str, hidden)), "weight_decay=" + ",".join(map(repr, decay))]
    pipelines = expand_grid(parse_grid(spec, config=CONFIG))
    assert len(pipelines) == len(hidden) * len(decay)
    assert len({p.name for p in pipelines}) == len(pipelines)
