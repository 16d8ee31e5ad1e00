"""``compare --label learn`` re-scores a Qlib LSTM-Alpha360 store against the learned label, without retraining.

Qlib's own ``LSTM`` (``qlib.contrib.model.pytorch_lstm``) on ``Alpha360`` with the benchmark
workflows' handler settings (features: ``RobustZScoreNorm`` + ``Fillna``; label: ``DropnaLabel`` +
``CSRankNorm``), our own small YAML, on a daily store ingested from the real daily bars in
``../shared/data/us-equities-daily-2013-2018`` (a random walk where they are absent): one window,
two seeds, one epoch (July and August 2014). The units keep both labels; ``--label raw`` and ``--label learn`` give
different losses, the learned one equal to a hand computation from the stored arrays, and nothing
is trained again.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from data_helpers import small_daily_store

from rolling_calib.cli import main
from rolling_calib.core.label import Label
from rolling_calib.execution import store as st
from rolling_calib.execution.units import UnitKey

pytestmark = pytest.mark.slow

SPAN = ("2013-09-03", "2014-09-30")
LABEL = "Ref($close, -2) / Ref($close, -1) - 1"


def _daily_store(root: Path) -> Path:
    return small_daily_store(root, span=SPAN)


def _experiment(root: Path, store: Path) -> Path:
    handler = {"class": "Alpha360", "module_path": "qlib.contrib.data.handler",
               "kwargs": {"instruments": "all", "start_time": SPAN[0], "end_time": SPAN[1],
                          "fit_start_time": SPAN[0], "fit_end_time": "2014-05-30",
                          "infer_processors": [
                              {"class": "RobustZScoreNorm", "kwargs": {"fields_group": "feature", "clip_outlier": True}},
                              {"class": "Fillna", "kwargs": {"fields_group": "feature"}}],
                          "learn_processors": [{"class": "DropnaLabel"},
                                               {"class": "CSRankNorm", "kwargs": {"fields_group": "label"}}],
                          "label": [LABEL]}}
    doc = {
        "experiment_name": "lstm-alpha360",
        "qlib_init": {"provider_uri": str(store), "logging_level": "WARNING"},
        "task": {
            "model": {"class": "LSTM", "module_path": "qlib.contrib.model.pytorch_lstm",
                      "kwargs": {"d_feat": 6, "hidden_size": 8, "num_layers": 1, "dropout": 0.0, "n_epochs": 1,
                                 "lr": 1e-3, "early_stop": 5, "batch_size": 64, "metric": "loss", "loss": "mse",
                                 "GPU": -1}},
            "dataset": {"class": "DatasetH", "module_path": "qlib.data.dataset",
                        "kwargs": {"handler": handler,
                                   "segments": {"train": [SPAN[0], "2014-05-30"], "valid": ["2014-06-02", "2014-06-30"],
                                                "test": ["2014-07-01", "2014-08-29"]}}},
        },
        "rolling": {"initial_train_start": "2013-09", "start": "2014-07", "end": "2014-08", "step_months": 2,
                    "valid_months": 1, "mode": "scratch", "seeds": 2},
    }
    path = root / "lstm_alpha360.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _main_json(argv: list[str]) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return json.loads(out.getvalue())


def _compare(store: Path, label: str, capsys=None) -> dict:
    return _main_json(["compare", "--store", str(store), "--json", "--n-boot", "50", "--label", label])


@pytest.fixture(scope="module")
def lstm_store(tmp_path_factory) -> Path:
    """Qlib's LSTM on Alpha360 (CSRankNorm labels), one window, two seeds: trained once for this module."""
    root = tmp_path_factory.mktemp("lstm")
    path = _experiment(root, _daily_store(root))
    store = root / "store"
    assert _main_json(["run", str(path), "--store", str(store), "--workers", "1", "--no-tracking", "--json"])[
        "units_ran"] == 2
    return store


def test_compare_label_learn_rescores_without_retraining(lstm_store, capsys):
    store = lstm_store
    manifest = st.read_manifest(store)
    labels = {k: Label.from_dict(v) for k, v in manifest["pipelines"]["lstm_alpha360"]["labels"].items()}
    assert labels["raw"] == Label(kind="raw", expression=LABEL, unit="return")
    assert labels["learn"] == Label(kind="learn", expression=LABEL, processors=("CSRankNorm",), unit="normalised")

    keys = [UnitKey("lstm_alpha360", seed, 0) for seed in (0, 1)]
    paths = [st.unit_paths(store, key) for key in keys]
    frames = [pd.read_parquet(p.parquet) for p in paths]
    for key, frame in zip(keys, frames):
        side = st.read_sidecar(store, key)
        assert side["label_columns"] == {"raw": "label", "learn": "label_learn"}
        assert list(frame.columns) == ["datetime", "instrument", "prediction", "label", "label_learn"]
        learn = frame["label_learn"].dropna()
        assert learn.abs().max() < 1.8 < frame["label"].abs().max() * 1e3   # ranks mapped to N(0,1)-like scores
    before = {p.parquet: p.parquet.stat().st_mtime_ns for p in paths} | {p.sidecar: p.sidecar.stat().st_mtime_ns for p in paths}
    history = len(manifest["history"])

    raw, learn = _compare(store, "raw", capsys), _compare(store, "learn", capsys)
    assert (raw["label"], learn["label"]) == ("raw", "learn")
    ql_raw = {r["pipeline"]: r["ql_mean"] for r in raw["pipelines"]}["lstm_alpha360"]
    ql_learn = {r["pipeline"]: r["ql_mean"] for r in learn["pipelines"]}["lstm_alpha360"]
    assert abs(ql_learn - ql_raw) > 0.1 * ql_learn   # squared returns vs squared normalised scores: another QL
    by_hand = np.mean([np.mean((f["label_learn"].dropna() - f.loc[f["label_learn"].notna(), "prediction"]) ** 2)
                       for f in frames])
    assert ql_learn == pytest.approx(by_hand, rel=1e-12)
    by_hand_raw = np.mean([np.mean((f["label"] - f["prediction"]) ** 2) for f in frames])
    assert ql_raw == pytest.approx(by_hand_raw, rel=1e-12)

    after = {p: p.stat().st_mtime_ns for p in before}
    assert after == before and len(st.read_manifest(store)["history"]) == history   # nothing retrained or rewritten


def test_scale_mismatch_is_named_against_the_raw_label_only(lstm_store):
    """CSRankNorm predictions scored against raw returns: the guard fires, measured; on the learned label it does not."""
    raw = _compare(lstm_store, "raw")
    kinds = {w["kind"]: w for w in raw["warnings"]}
    assert "scale_mismatch" in kinds
    warning = kinds["scale_mismatch"]
    assert warning["pipelines"] == ["lstm_alpha360"]
    measured = warning["measured"]["lstm_alpha360"]
    assert measured["mismatch"] and measured["spread_ratio"] > 1 and abs(measured["slope"]) < 0.5  # normalised units
    assert "--label learn" in warning["message"] and "CSRankNorm" in warning["message"]
    assert f"{100 * measured['level_share']:.1f}%" in warning["message"] or "%" in warning["message"]
    learn = _compare(lstm_store, "learn")
    assert "scale_mismatch" not in {w["kind"] for w in learn["warnings"]}


def test_label_auto_is_the_default_and_picks_the_learned_label(lstm_store):
    """No --label: the store's rolling.label, auto by default, scores CSRankNorm's learned label, and says so."""
    manifest = st.read_manifest(lstm_store)
    assert manifest["experiment"]["rolling"]["label"] == "auto"
    auto, learn = _main_json(["compare", "--store", str(lstm_store), "--json", "--n-boot", "50"]), _compare(lstm_store, "learn")
    assert auto["label"] == "learn" and auto["pipelines"] == learn["pipelines"]
    assert "scale_mismatch" not in {w["kind"] for w in auto["warnings"]}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["compare", "--store", str(lstm_store), "--n-boot", "50"]) == 0
    lines = out.getvalue().splitlines()   # the line that answers (when there is a pair), then what was scored
    headline = next(line for line in lines if line.startswith("Scored against"))
    assert lines.index(headline) in (0, 2) and "CSRankNorm" in headline
    assert headline.startswith("Scored against the learned label: ")
    assert "(--label auto: the label the model learned; --label raw for the raw one)" in headline
    with contextlib.redirect_stdout(io.StringIO()) as raw_out:
        assert main(["compare", "--store", str(lstm_store), "--n-boot", "50", "--label", "raw"]) == 0
    assert "--label auto" not in next(line for line in raw_out.getvalue().splitlines() if line.startswith("Scored"))
