"""Both labels of a task described from its handler config: our minute handler and Qlib's Alpha158 / Alpha360."""

from __future__ import annotations

import pytest

from rolling_calib.core.label import Label
from rolling_calib.qlib_adapter.labels import describe_labels

QLIB_RETURN = "Ref($close, -2)/Ref($close, -1) - 1"


def _task(cls: str, module: str, **kwargs) -> dict:
    return {"dataset": {"class": "DatasetH", "module_path": "qlib.data.dataset",
                        "kwargs": {"handler": {"class": cls, "module_path": module, "kwargs": kwargs}}}}


def _alpha(cls: str, **kwargs) -> dict:
    return _task(cls, "qlib.contrib.data.handler", instruments="all", **kwargs)


def test_minute_handler_labels_are_bp_and_equal():
    d = describe_labels(_task("MinuteBarHandler", "rolling_calib.dataset", label_horizon=5))
    raw, learn = d.labels["raw"], d.labels["learn"]
    assert raw == Label(kind="raw", expression="1e4 * (close[t+5]/close[t] - 1)", unit="bp")
    assert learn.processors == () and learn.unit == "bp" and raw.same_values(learn) and d.notes == []
    assert raw.describe() == "raw label: 5-minute forward return, bp"
    default = describe_labels(_task("MinuteBarHandler", "rolling_calib.qlib_adapter.dataset"))
    assert default.labels["raw"].expression == "1e4 * (close[t+10]/close[t] - 1)"


@pytest.mark.parametrize(
    ("cls", "kwargs", "processors"),
    [
        # Qlib's defaults: Alpha158 learns DropnaLabel + CSZScoreNorm(label); Alpha360 appends its infer
        # processors (ProcessInf, ZScoreNorm, Fillna on every column) before them
        ("Alpha158", {}, ("CSZScoreNorm",)),
        ("Alpha360", {}, ("ProcessInf", "ZScoreNorm", "Fillna", "CSZScoreNorm")),
        # the benchmark workflows' handler config: features normalised, label ranked per date
        ("Alpha360", {"infer_processors": [{"class": "RobustZScoreNorm", "kwargs": {"fields_group": "feature", "clip_outlier": True}},
                                           {"class": "Fillna", "kwargs": {"fields_group": "feature"}}],
                      "learn_processors": [{"class": "DropnaLabel"}, {"class": "CSRankNorm", "kwargs": {"fields_group": "label"}}]},
         ("CSRankNorm",)),
        ("Alpha158", {"learn_processors": [{"class": "DropnaLabel"}, {"class": "CSZScoreNorm", "kwargs": {"fields_group": "label"}}]},
         ("CSZScoreNorm",)),
        # independent processing: infer processors never touch the learn data
        ("Alpha360", {"process_type": "independent", "learn_processors": ["DropnaLabel"]}, ()),
        # a processor of the features only, and one repairing NaN labels (keeps the unit)
        ("Alpha158", {"learn_processors": [{"class": "DropnaLabel"}, {"class": "Fillna", "kwargs": {"fields_group": "label"}}]},
         ("Fillna",)),
    ],
)
def test_qlib_handlers_raw_return_and_learned_processors(cls, kwargs, processors):
    d = describe_labels(_alpha(cls, **kwargs))
    assert d.labels["raw"] == Label(kind="raw", expression=QLIB_RETURN, unit="return") and d.notes == []
    learn = d.labels["learn"]
    assert learn.processors == processors and learn.expression == QLIB_RETURN
    normalises = any(p not in ("Fillna", "ProcessInf") for p in processors)
    assert learn.unit == ("normalised" if normalises else "return")
    assert learn.scale == (None if normalises else 1.0)


def test_label_argument_of_the_handler_is_read():
    d = describe_labels(_alpha("Alpha360", label=["Ref($close, -2) / Ref($close, -1) - 1"]))   # as in the benchmark YAMLs
    assert d.labels["raw"].expression == "Ref($close, -2) / Ref($close, -1) - 1" and d.labels["raw"].unit == "return"
    odd = describe_labels(_alpha("Alpha158", label=(["$close"], ["LABEL0"])))
    assert odd.labels["raw"].expression == "$close" and odd.labels["raw"].unit == "unknown"
    assert "not a plain return" in odd.notes[0]


def test_vwap_variant_and_unknown_handlers():
    vwap = describe_labels(_alpha("Alpha158vwap"))
    assert vwap.labels["raw"].expression == "Ref($vwap, -2)/Ref($vwap, -1) - 1" and vwap.labels["raw"].unit == "return"
    missing = describe_labels(_task("NoSuchHandler", "qlib.contrib.data.handler"))
    assert missing.labels["raw"] == Label(kind="raw") and "cannot be imported" in missing.notes[0]
    none = describe_labels({"dataset": {"kwargs": {"handler": "handler.pkl"}}})
    assert none.labels["learn"].unit == "unknown" and "str, not a class spec" in none.notes[0]
