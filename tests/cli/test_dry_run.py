"""``run --dry-run`` and ``sweep --dry-run`` (issue 29): the plan before a long run, nothing trained.

End to end on the tiny synthetic minute store (real Qlib provider, real model): a dry run on an empty store
lists the units and windows with their dates and rows and says the compute is not measured yet, writing
nothing; a real run of one seed prints the same plan first (stderr, not with --json); a dry run with more
seeds then estimates the units left from the throughput the completed units measured (rows / seconds of
their sidecars), by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rolling_calib.cli import main
from runner_helpers import REPO

pytestmark = pytest.mark.slow

TINY = {"task.model.kwargs.hidden_size": 4, "task.model.kwargs.num_layers": 1, "task.model.kwargs.n_epochs": 1,
        "task.model.kwargs.finetune_epochs": 1, "task.model.kwargs.batch_size": 256, "task.model.kwargs.early_stop": 1,
        "task.dataset.kwargs.step_len": 10, "task.dataset.kwargs.sample_stride": 60,
        "task.dataset.kwargs.test_stride": 30, "task.dataset.kwargs.handler.kwargs.window": 10,
        "task.dataset.kwargs.handler.kwargs.norm_samples": 2000}


def _config(tmp: Path, data: Path) -> Path:
    doc = {"BASE_CONFIG_PATH": str(REPO / "workflows" / "base.yaml"),
           "qlib_init": {"provider_uri": {"1min": str(data)}, "logging_level": "WARNING"},
           "rolling": {"initial_train_start": "2018-01", "start": "2018-03", "end": "2018-04", "step_months": 1,
                       "valid_months": 1, "seeds": 2},
           "pipelines": {"wd0": dict(TINY), "wdbig": dict(TINY, **{"task.model.kwargs.weight_decay": 0.5})},
           "compare": [["wd0", "wdbig"]]}
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _files(store: Path) -> list[Path]:
    return sorted(store.rglob("*")) if store.exists() else []


def test_dry_run_plans_then_a_real_run_prints_the_same_plan_and_measures_the_estimate(tmp_path, tiny_data, capsys):
    config, store = _config(tmp_path, tiny_data), tmp_path / "store"
    assert main(["run", str(config), "--store", str(store), "--dry-run", "--no-tracking", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "plan: 2 pipeline(s) (wd0, wdbig) x 2 seed(s) x 2 window(s) = 8 unit(s), 0 already in" in out
    assert "8 to train (finetune mode); 3 instrument(s)" in out
    # 2018-03: 21 sessions (Good Friday closed) x 390 minutes x 3 stocks; 2018-04: 21 sessions
    assert "w00: train 2018-01-02 09:30:00..2018-01-31 15:59:00 (" in out
    assert f"test 2018-03-01 09:30:00..2018-03-29 15:59:00 ({21 * 390 * 3:,} rows)" in out
    assert f"test 2018-04-02 09:30:00..2018-04-30 15:59:00 ({21 * 390 * 3:,} rows)" in out
    assert "compute not measured yet" in out and "(dry run: nothing trained)" in out
    assert _files(store) == []                                             # nothing written

    assert main(["run", str(config), "--store", str(store), "--seeds", "1", "--no-tracking", "--workers", "1",
                 "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "plan: 2 pipeline(s) (wd0, wdbig) x 1 seed(s) x 2 window(s) = 4 unit(s), 0 already in" in err

    before = [(p, p.stat().st_mtime_ns) for p in _files(store)]
    assert main(["run", str(config), "--store", str(store), "--dry-run", "--no-tracking", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [(p, p.stat().st_mtime_ns) for p in _files(store)] == before     # still nothing written
    assert (plan["units"], plan["done"], plan["left"]) == (8, 4, 4)
    reads = {w["index"]: w["rows"]["read"] for w in plan["windows"]}
    for name in ("wd0", "wdbig"):                                           # the estimate, by hand
        seconds = rows = 0.0
        for w in (0, 1):
            side = json.loads((store / "units" / name / "seed0" / f"w{w:02d}.json").read_text())
            seconds += sum(side["timings"][k] for k in ("build_s", "fit_s", "predict_s"))
            rows += reads[w]
        e = plan["estimate"][name]
        assert e["units_left"] == 2 and e["measured_on"] == 2 and e["source"] == "completed units of this pipeline"
        assert e["rows_per_s"] == pytest.approx(rows / seconds)
        assert e["seconds_left"] == pytest.approx((reads[0] + reads[1]) / (rows / seconds))
    assert plan["cpu_seconds"] == pytest.approx(sum(plan["estimate"][n]["seconds_left"] for n in ("wd0", "wdbig")))

    assert main(["sweep", str(config), "--store", str(tmp_path / "sweep"), "--grid", "task.model.kwargs.lr=0.001,0.01",
                 "--seeds", "2", "--dry-run", "--no-tracking"]) == 0
    out = capsys.readouterr().out
    assert "x 2 seed(s) x 2 window(s) = 8 unit(s), 0 already in" in out and "(dry run: nothing trained)" in out
    assert not (tmp_path / "sweep").exists()


def test_the_plan_is_not_printed_with_json(tmp_path, tiny_data, capsys):
    """--json keeps stdout to the result and stderr free of the plan (the plan is a JSON of its own with --dry-run)."""
    config = _config(tmp_path, tiny_data)
    assert main(["run", str(config), "--store", str(tmp_path / "s"), "--seeds", "1", "--pipelines", "wd0",
                 "--no-tracking", "--json", "--workers", "1"]) == 0
    captured = capsys.readouterr()
    assert "plan:" not in captured.err and json.loads(captured.out)["units_ran"] == 2


def test_dry_run_until_decided_plans_the_worst_case_and_says_what_the_first_look_needs(tmp_path, tiny_data, capsys):
    """Issue 39: ``--dry-run`` honoured ``--until-decided`` nowhere (it planned the file's seeds, not --max-seeds)
    and took ``--seeds`` where the run refuses it."""
    config, store = _config(tmp_path, tiny_data), tmp_path / "store"
    common = ["run", str(config), "--store", str(store), "--dry-run", "--no-tracking", "--workers", "1",
              "--until-decided", "--first", "2", "--max-seeds", "6"]
    assert main(common) == 0
    out = capsys.readouterr().out
    assert "plan: 2 pipeline(s) (wd0, wdbig) x 6 seed(s) x 2 window(s) = 24 unit(s)" in out
    assert ("until-decided: the grid above (6 seeds) is the worst case; the first look needs seeds 0..1 of every "
            "pipeline (8 unit(s)), then 2 more per look only for pipelines in an undecided pair, decided by QL") in out
    assert _files(store) == []
    assert main([*common, "--seeds", "4"]) == 2
    assert "--seeds: --until-decided trains seeds 0..N-1 of --max-seeds N; drop --seeds" in capsys.readouterr().err


def test_until_decided_with_one_pipeline_is_refused_before_anything_runs(tmp_path, tiny_data, capsys):
    """Issue 39: with one pipeline it trained 3 seeds and claimed "6 units of the full grid" for no pair at all."""
    config, store = _config(tmp_path, tiny_data), tmp_path / "store"
    for dry in (["--dry-run"], []):
        assert main(["run", str(config), "--store", str(store), "--no-tracking", "--workers", "1",
                     "--until-decided", "--pipelines", "wd0", *dry]) == 2
        assert "make no pair; name two or more (--pipelines)" in capsys.readouterr().err
    assert _files(store) == []
