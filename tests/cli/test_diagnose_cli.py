"""``rolling-calib diagnose --store DIR [--json] [--figures DIR]`` on a fake store."""

from __future__ import annotations

import json

import pytest
from runner_helpers import write_fake_store

from rolling_calib.cli import COMMAND_MODULES, main

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("diagnose") / "store"
    write_fake_store(path, pipelines={"wild": {"bias_sd": 3.0}, "flat": {"bias_sd": 0.0}}, seeds=4)
    return path


def test_diagnose_is_registered():
    assert "rolling_calib.cli.diagnose" in COMMAND_MODULES


def test_diagnose_json(store, capsys):
    assert main(["diagnose", "--store", str(store), "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)                        # stdout is JSON only
    assert out["period"] == "month" and out["bias"] == "pooled"
    by_name = {p["pipeline"]: p for p in out["pipelines"]}
    assert set(by_name) == {"wild", "flat"}
    wild, flat = by_name["wild"], by_name["flat"]
    # wild differs from flat only by its seeds' output bias; with 5 seeds QL cannot order them at 95%
    assert wild["verdict"].startswith("Calibration narrows the seed spread here, but whether it keeps")
    assert wild["assessment"]["narrows"] is True and wild["assessment"]["keeps_order"] is None
    assert flat["verdict"].startswith("Calibration does not") and flat["assessment"]["helps"] is False
    assert wild["removable"] > 0.9 and flat["removable"] < 0.25
    split = wild["variance_split"]
    assert split["var_ql"] == pytest.approx(split["var_bias"] + split["var_spread"] + 2 * split["cov"])
    assert wild["refits"] == ["2018-03"]
    assert {"corr_within", "corr_across", "level", "change"} <= set(wild["persistence"])
    assert {"mean_spread", "scale"} <= set(wild["prediction_spread"])
    assert out["paired_differences"][0]["a"] == "wild"
    assert "figures" not in out


def test_diagnose_text_and_figures(store, tmp_path, capsys):
    figures = tmp_path / "figs"
    assert main(["diagnose", "--store", str(store), "--pipelines", "wild", "flat", "--figures", str(figures)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Can calibration help here? (calibration: monthly periods, one pooled bias from the previous "
                           "month; raw label: 10-minute forward return, bp;")
    assert text.count("Verdict: ") == 2 and "Figures: " in text
    names = sorted(p.name for p in figures.iterdir())
    assert names == ["offsets_flat.png", "offsets_wild.png", "paired_wild_vs_flat.png"]
    assert all((figures / n).read_bytes().startswith(PNG) for n in names)


def test_diagnose_json_lists_figures(store, tmp_path, capsys):
    assert main(["diagnose", "--store", str(store), "--json", "--period", "week", "--figures", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["period"] == "week" and len(out["figures"]) == 3


def test_diagnose_errors_are_messages(tmp_path, capsys):
    assert main(["diagnose", "--store", str(tmp_path / "nowhere")]) == 2
    assert "rolling-calib diagnose: error:" in capsys.readouterr().err
    write_fake_store(tmp_path / "one", pipelines={"solo": {"bias_sd": 1.0}}, seeds=1)
    assert main(["diagnose", "--store", str(tmp_path / "one"), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "no pipeline has 2 complete runs" in captured.err
    with pytest.raises(SystemExit):
        main(["diagnose", "--store", str(tmp_path), "--period", "fortnight"])
