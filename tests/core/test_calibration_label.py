"""The calibration rule and the label description: one value each, validated, hash-stable, described in words."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rolling_calib.core.calibration import CALIBRATION_FIELDS, Calibration
from rolling_calib.core.fingerprint import stable_hash
from rolling_calib.core.label import LABEL_UNITS, Label
from rolling_calib.core.validation import ConfigError


# --------------------------------------------------------------------------- Calibration
def test_defaults_are_the_papers_rule_and_every_field_is_declared():
    cal = Calibration()
    assert (cal.period, cal.bias, cal.source, cal.bias_window, cal.missing_instrument) == (
        "month", "pooled", "previous", None, "error")
    assert list(CALIBRATION_FIELDS) == ["period", "bias", "source", "bias_window", "missing_instrument"]
    assert cal.describe() == "monthly periods, one pooled bias from the previous month"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"period": "day"}, r"^period: expected 'month', 'week', 'quarter' or a positive int, found 'day'$"),
        ({"period": 0}, r"^period: expected a positive number of trading days, at most 5040 \(20 years\), found 0$"),
        ({"period": True}, r"^period: expected"),
        ({"bias": "global"}, r"^bias: expected 'pooled' or 'per_instrument', found 'global'$"),
        ({"source": "future"}, r"^source: expected 'previous' or 'validation', found 'future'$"),
        ({"bias_window": 0}, r"^bias_window: expected None or a positive number of trading days, at most 5040, found 0$"),
        ({"bias_window": 2.5}, r"^bias_window: expected None or a positive number of trading days, at most 5040, found 2.5$"),
        ({"missing_instrument": "drop"}, r"^missing_instrument: expected 'error' or 'pooled', found 'drop'$"),
        ({"source": "validation", "bias_window": 3}, r"^bias_window: must be None with source='validation'"),
    ],
)
def test_constraints_are_checked_when_made(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Calibration(**kwargs)


def test_keyword_only_and_frozen():
    with pytest.raises(TypeError):
        Calibration("week")  # type: ignore[misc]
    with pytest.raises(AttributeError):
        Calibration().period = "week"  # type: ignore[misc]


def test_replace_checks_the_new_rule():
    cal = Calibration(bias_window=5)
    assert cal.replace(period="week") == Calibration(period="week", bias_window=5)
    with pytest.raises(ValueError, match="bias_window: must be None"):
        cal.replace(source="validation")
    assert cal.replace(source="validation", bias_window=None).source == "validation"


def test_to_dict_keeps_the_form_existing_stores_recorded():
    """Manifests (and the shared config hash computed from them) hold {period, bias}, plus source when not previous."""
    assert Calibration().to_dict() == {"period": "month", "bias": "pooled"}
    assert Calibration(period=20, bias="per_instrument").to_dict() == {"period": 20, "bias": "per_instrument"}
    assert Calibration(source="validation").to_dict() == {"period": "month", "bias": "pooled", "source": "validation"}
    full = Calibration(period="week", bias="per_instrument", bias_window=3, missing_instrument="pooled")
    assert list(full.to_dict()) == ["period", "bias", "bias_window", "missing_instrument"]
    # the hash of the recorded form is the hash the old code computed for the same rule
    assert stable_hash({"calibration": Calibration().to_dict()}) == stable_hash({"calibration": {"bias": "pooled", "period": "month"}})


@pytest.mark.parametrize("recorded", [
    None, {}, {"period": "month", "bias": "pooled"}, {"bias": "pooled", "period": "month", "source": "previous"},
    {"period": "week"}, {"period": 20, "bias": "per_instrument", "source": "previous"},
])
def test_from_dict_reads_every_manifest_form(recorded):
    cal = Calibration.from_dict(recorded)
    expected = {"period": "month", "bias": "pooled", **(recorded or {})}
    assert (cal.period, cal.bias, cal.source) == (expected["period"], expected["bias"], expected.get("source", "previous"))
    assert cal.bias_window is None and cal.missing_instrument == "error"


def test_from_dict_errors_name_the_file_and_key():
    with pytest.raises(ConfigError, match=r"^exp.yaml: unknown key 'rolling.calibration.windows' \(allowed: "):
        Calibration.from_dict({"windows": 3}, where="exp.yaml", prefix="rolling.calibration.")
    with pytest.raises(ConfigError, match=r"^exp.yaml: rolling.calibration.bias_window: must be None"):
        Calibration.from_dict({"source": "validation", "bias_window": 4}, where="exp.yaml", prefix="rolling.calibration.")
    with pytest.raises(ValueError, match=r"^windows: unknown calibration option"):
        Calibration.from_dict({"windows": 3})


_rules = st.builds(
    lambda period, bias, source, window, fallback: Calibration(
        period=period, bias=bias, source=source, bias_window=None if source == "validation" else window,
        missing_instrument=fallback),
    st.one_of(st.sampled_from(["month", "week", "quarter"]), st.integers(1, 400)),
    st.sampled_from(["pooled", "per_instrument"]), st.sampled_from(["previous", "validation"]),
    st.one_of(st.none(), st.integers(1, 400)), st.sampled_from(["error", "pooled"]))


@settings(max_examples=200, deadline=None)
@given(cal=_rules)
def test_to_dict_from_dict_round_trip_through_json(cal):
    recorded = json.loads(json.dumps(cal.to_dict()))
    assert Calibration.from_dict(recorded) == cal
    assert Calibration.from_dict(cal.to_dict()).to_dict() == cal.to_dict()
    assert isinstance(cal.describe(), str) and "\n" not in cal.describe()


def test_describe_says_the_rule_in_words():
    assert Calibration(period=20, bias="per_instrument", missing_instrument="pooled").describe() == (
        "periods of 20 trading days, one bias per instrument from the previous period (pooled where an instrument has none)")
    assert Calibration(source="validation").describe() == "monthly periods, one pooled bias from each window's validation predictions"
    assert Calibration(period="quarter", bias_window=10).describe() == (
        "quarterly periods, one pooled bias from the 10 trading days before each period")


# --------------------------------------------------------------------------- Label
def test_label_units_scales_and_words():
    bp = Label(kind="raw", expression="1e4 * (close[t+10]/close[t] - 1)", unit="bp")
    assert (bp.scale, bp.loss_unit, bp.describe()) == (1e4, "bp²", "raw label: 10-minute forward return, bp")
    ret = Label(kind="raw", expression="Ref($close, -2)/Ref($close, -1) - 1", unit="return")
    assert (ret.scale, ret.loss_unit) == (1.0, "return²")
    norm = Label(kind="learn", expression=ret.expression, processors=["CSZScoreNorm"], unit="normalised")
    assert norm.processors == ("CSZScoreNorm",) and norm.scale is None and norm.loss_unit == "normalised²"
    assert norm.describe() == "learned label: Ref($close, -2)/Ref($close, -1) - 1 after CSZScoreNorm, normalised"
    unknown = Label(kind="learn")
    assert (unknown.unit, unknown.expression, unknown.describe()) == ("unknown", None, "learned label: expression unknown, unit unknown")
    assert set(LABEL_UNITS) == {"bp", "return", "normalised", "unknown"}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"kind": "both"}, r"^kind: expected 'raw' or 'learn', found 'both'$"),
    ({"kind": "raw", "unit": "pct"}, r"^unit: expected one of 'bp', 'return', 'normalised', 'unknown', found 'pct'$"),
    ({"kind": "raw", "unit": "return", "scale": -1.0}, r"^scale: expected None or a number > 0, found -1.0$"),
    ({"kind": "raw", "expression": 3}, r"^expression: expected None or a string, found int 3$"),
])
def test_label_constraints(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Label(**kwargs)


def test_label_round_trip_and_same_values():
    label = Label(kind="learn", expression="Ref($close, -2)/Ref($close, -1) - 1", processors=("CSRankNorm",),
                  unit="normalised")
    assert Label.from_dict(json.loads(json.dumps(label.to_dict()))) == label
    with pytest.raises(ValueError, match="label: unknown field 'units'"):
        Label.from_dict({"kind": "raw", "units": "bp"})
    raw = Label(kind="raw", expression=label.expression, unit="return")
    assert not raw.same_values(label) and raw.same_values(Label(kind="learn", expression=label.expression, unit="return"))


# --------------------------------------------------------------------------- label auto
def test_label_auto_resolves_per_store_from_the_recorded_labels():
    """auto: learn when any scored pipeline's learned label was changed by a processor, raw otherwise."""
    from pathlib import Path

    from rolling_calib.execution.manifest import Manifest
    from rolling_calib.execution.store import Store

    def resolve_label_kind(manifest, pipelines, label):
        return Store(Path("S"), Manifest.from_dict(manifest, source="S/manifest.json")).label_kind(pipelines, label)

    raw = Label(kind="raw", expression="x", unit="return").to_dict()
    ranked = Label(kind="learn", expression="x", processors=("CSRankNorm",), unit="normalised").to_dict()
    dropped = Label(kind="learn", expression="x", unit="return").to_dict()   # DropnaLabel only: values unchanged
    manifest = {"experiment": {"rolling": {"label": "auto"}},
                "pipelines": {"ranked": {"labels": {"raw": raw, "learn": ranked}},
                              "plain": {"labels": {"raw": raw, "learn": dropped}},
                              "minute": {"labels": {"raw": raw}}}}
    assert resolve_label_kind(manifest, ["ranked"], None) == "learn"
    assert resolve_label_kind(manifest, ["plain", "minute"], None) == "raw"
    assert resolve_label_kind(manifest, ["plain", "ranked"], None) == "learn"
    assert resolve_label_kind(manifest, ["ranked"], "raw") == "raw"
    assert resolve_label_kind({**manifest, "experiment": {}}, ["ranked"], None) == "raw"   # stores before the option
    with pytest.raises(ValueError, match="^label: expected 'auto', 'raw' or 'learn', found 'learned'$"):
        resolve_label_kind(manifest, ["ranked"], "learned")
