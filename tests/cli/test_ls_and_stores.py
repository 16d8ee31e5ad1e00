"""``rolling-calib ls DIR`` (stores, pipelines, seeds, units done/total, last verdicts) and ``compare --store A
--store B`` (pipelines of several stores, evaluated on the same days; refused in one line when the days differ)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from rolling_calib.cli import main
from rolling_calib.execution import store as st
from rolling_calib.execution.units import UnitKey

from runner_helpers import write_fake_store


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    write_fake_store(root / "lgb", pipelines={"a": {"bias_sd": 1.0, "noise": 1.0}, "x": {"bias_sd": 0.2, "noise": 3.0}})
    write_fake_store(root / "deep" / "lstm", pipelines={"a": {"bias_sd": 0.5}, "b": {"bias_sd": 2.0}}, rng_seed=1)
    write_fake_store(root / "later", pipelines={"c": {}}, start="2018-03", end="2018-04", step_months=1, rng_seed=2)
    (root / "broken").mkdir()
    (root / "broken" / "manifest.json").write_text("{not json")
    return root


def test_ls_lists_every_store_with_units_done_and_total(stores):
    st.unit_paths(stores / "lgb", UnitKey("x", 3, 1)).sidecar.unlink()   # one unit of lgb incomplete
    try:
        code, out, _ = _cli(["ls", str(stores), "--json"])
        assert code == 0
        listed = {Path(e["store"]).relative_to(stores).as_posix(): e for e in json.loads(out)}
        assert set(listed) == {"lgb", "deep/lstm", "later", "broken"}
        lgb = listed["lgb"]
        assert (lgb["pipelines"], lgb["seeds"], lgb["units_done"], lgb["units_total"]) == (
            ["a", "x"], [0, 1, 2, 3], 15, 16)
        assert (listed["later"]["units_done"], listed["later"]["units_total"]) == (8, 8)   # 4 seeds x 2 windows
        assert "manifest.json" in listed["broken"]["problem"] and listed["broken"]["units_total"] == 0
        code, text, _ = _cli(["ls", str(stores)])
        line = next(row for row in text.splitlines() if row.startswith("lgb "))
        assert "a, x" in line and "0..3 (4)" in line and "15/16" in line
    finally:
        write_fake_store(stores / "lgb", pipelines={"a": {"bias_sd": 1.0, "noise": 1.0},
                                                     "x": {"bias_sd": 0.2, "noise": 3.0}})


def test_ls_shows_the_verdicts_compare_printed_last(stores):
    code, out, err = _cli(["compare", "--store", str(stores / "lgb"), "--json", "--n-boot", "50"])
    assert code == 0, err
    from rolling_calib.analysis.comparison import compare_store
    from rolling_calib.analysis.scoring import score_store
    from rolling_calib.core.resampling import Resampling

    rows = compare_store(score_store(stores / "lgb"), resampling=Resampling(n_boot=50)).verdict_rows()
    printed = [(v["pair"], v["metric"], v["verdict"]) for v in rows]
    code, out, _ = _cli(["ls", str(stores), "--json"])
    lgb = next(e for e in json.loads(out) if e["store"].endswith("lgb"))
    assert [(v["pair"], v["metric"], v["verdict"]) for v in lgb["last_verdicts"]] == printed and printed
    assert "raw label" in lgb["scored"] and "monthly periods" in lgb["scored"]
    text = _cli(["ls", str(stores)])[1]
    assert f"{printed[0][0]}: {printed[0][1]} {printed[0][2]}" in text


def test_compare_across_stores_on_the_same_days(stores):
    code, out, err = _cli(["compare", "--store", str(stores / "lgb"), "--store", str(stores / "deep" / "lstm"),
                           "--json", "--n-boot", "50"])
    assert code == 0, err
    joined = json.loads(out)
    assert [p["pipeline"] for p in joined["pipelines"]] == ["lgb/a", "x", "lstm/a", "b"]   # a shared name: prefixed
    assert len(joined["pairs"]) == 6   # every pair of the 4 pipelines, across the stores
    assert any("compared across stores, evaluated on the same" in n for n in joined["notes"])
    alone = json.loads(_cli(["compare", "--store", str(stores / "deep" / "lstm"), "--json", "--n-boot", "50"])[1])
    by_name = {p["pipeline"]: p for p in alone["pipelines"]}
    for row in joined["pipelines"]:
        if row["pipeline"] in ("lstm/a", "b"):   # the same numbers as the store's own compare
            assert row["ql_mean"] == by_name[row["pipeline"].split("/")[-1]]["ql_mean"]


def test_compare_across_stores_refuses_different_days_in_one_line(stores):
    code, out, err = _cli(["compare", "--store", str(stores / "lgb"), "--store", str(stores / "later"), "--no-progress", "--n-boot",
                           "50"])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(
        f"rolling-calib compare: error: --store: {stores / 'lgb'} and {stores / 'later'} were evaluated on different days")
