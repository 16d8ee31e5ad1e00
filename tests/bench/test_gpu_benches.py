"""The GPU benches run end to end at a tiny size on CPU (their figures are measured on a GPU; here: they work).

``bench/bench_stacked.py`` and ``bench/bench_gpu_feed.py`` are run in-process (their ``main``) with
a few hundred windows of the demo size, and ``bench/estimate_paper_compute.py --gpu-only`` turns a
rate into GPU-hours. What is checked: every path and feed is timed, the JSON written with
``--out`` holds every row, the figures are positive and finite, and the GPU-hours scale as
``1 / rate``. No figure is asserted against a target (benches print ratios; tests do not time).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def bench_on_path():
    sys.path.insert(0, str(BENCH))
    yield
    sys.path.remove(str(BENCH))


TINY = ["--device", "cpu", "--sizes", "demo", "--seeds", "1,2", "--samples", "200", "--instruments", "2", "--days", "10"]


def _positive(value) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


def test_bench_stacked_times_every_path(tmp_path, capsys):
    import bench_stacked

    out = tmp_path / "stacked.json"
    assert bench_stacked.main([*TINY, "--rounds", "1", "--json", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads(out.read_text()) == printed
    assert [(r["size"], r["seeds"]) for r in printed["rows"]] == [("demo", 1), ("demo", 2)]
    for row in printed["rows"]:
        assert row["feed"] == "host"   # feed: auto on a CPU
        for path in bench_stacked.PATHS:
            assert _positive(row[path]["samples_per_s"]) and 0 < row[path]["fraction_of_matmul_rate"] < 1
        assert _positive(row["bmm"]["vs_one_at_a_time"]) and "gpu_busy" not in row["bmm"]   # no GPU: no profile
    assert _positive(printed["matmul_flops_per_s"]) and _positive(printed["predict_samples_per_s"]["demo"])


def test_bench_stacked_rows_run_in_order_with_ratios_and_a_row_limit(tmp_path, capsys):
    import bench_stacked

    out = tmp_path / "rows.json"
    rows = "bmm:demo:2,one_at_a_time:demo:1,bmm_eager:demo:2:ieee,one_at_a_time:demo:1:ieee"
    args = ["--device", "cpu", "--rows", rows, "--samples", "200", "--instruments", "2", "--days", "10", "--rounds", "1"]
    assert bench_stacked.main([*args, "--json", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads(out.read_text()) == printed
    assert [r["row"] for r in printed["rows"]] == [f"{r}:default" if r.count(":") == 2 else r for r in rows.split(",")]
    for row in printed["rows"]:
        assert _positive(row["samples_per_s"]) and row["feed"] == "host"
        assert row["precision"]["cudnn_allow_tf32"] == (row["precision_setting"] == "default")
    assert printed["rows"][0]["kernel_run"] == {"cell": "steps: not a GPU", "graph": "off: not a GPU", "matmul": "ieee"}
    assert [(r["row"], r["baseline"]) for r in printed["ratios"]] == [
        ("bmm:demo:2:default", "one_at_a_time:demo:1:default"), ("bmm_eager:demo:2:ieee", "one_at_a_time:demo:1:ieee")]
    for r in printed["ratios"]:
        row = next(x for x in printed["rows"] if x["row"] == r["row"])
        base = next(x for x in printed["rows"] if x["row"] == r["baseline"])
        assert r["vs_one_at_a_time"] == pytest.approx(row["samples_per_s"] / base["samples_per_s"])
    # a row over its limit is recorded as such, and the run goes on
    assert bench_stacked.main([*args[:3], "bmm:demo:2", *args[4:], "--rounds", "500", "--row-limit", "0.5", "--json"]) == 0
    (late,) = json.loads(capsys.readouterr().out)["rows"]
    assert late["error"] == "RowTimeout: over the row limit of 0.5 s" and "samples_per_s" not in late
    with pytest.raises(SystemExit, match="--rows item 'bmm:huge:2'"):
        bench_stacked.main([*args[:3], "bmm:huge:2"])


def test_bench_gpu_feed_times_every_feed(tmp_path, capsys):
    import bench_gpu_feed

    out = tmp_path / "feed.json"
    assert bench_gpu_feed.main([*TINY, "--kernel", "bmm", "--out", str(out)]) == 0
    assert "stack of 2 (bmm)" in capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    assert [r["kernel"] for r in rows] == [None, "bmm"]
    for row in rows:
        for feed in bench_gpu_feed.FEEDS:
            assert _positive(row[feed]["samples_per_s"]) and _positive(row[feed]["busy"])


def test_the_gpu_benches_say_when_there_is_no_gpu(capsys):
    import torch

    import bench_stacked

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert bench_stacked.main(["--device", "cuda"]) == 2
    assert "torch sees no GPU here" in capsys.readouterr().out


def test_estimate_turns_a_gpu_rate_into_gpu_hours(capsys):
    import estimate_paper_compute as est

    hours = []
    for rate in (100_000, 200_000):
        assert est.main(["--gpu-only", "--gpu-train-sps", str(rate), "--gpu-eval-sps", str(3 * rate), "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["units"] == 1920 and result["gpu"]["rate_by"] == "flops"
        hours.append(result["gpu"]["gpu_hours"])
    assert hours[0] == pytest.approx(2 * hours[1], rel=1e-9)   # twice the rate, half the hours
