"""Progress inside units: the reporter, the channels of the local pool, the board, and ``run`` on a real terminal.

The board and the channels are checked with plain work functions; the model's epochs and batches,
the identical numbers with and without reporting, and what ``rolling-calib run`` draws on a
pseudo-terminal (``--workers 1``; ``--no-progress`` and ``--json`` draw nothing) on the tiny store
of ``test_runner_e2e.py`` (real Qlib provider, real model).
"""

from __future__ import annotations

import functools
import io
import json
import re
import sys

import pytest

from rolling_calib.execution import progress as pg
from rolling_calib.execution.executors import LocalExecutor, UnitKey, UnitTask
from rolling_calib.execution.progress import ProgressBoard, UnitEvent, installed, unit_reporter
from rolling_calib.execution.units import StackKey

from pty_helpers import nested_under, run_in_pty, screens
from runner_helpers import REPO


# --------------------------------------------------------------------------- the unit's reporter
class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_reporter_sends_stages_and_epochs_at_once_and_batches_at_most_every_interval():
    events, clock = [], _Clock()
    report = pg._Reporter(UnitKey("wd0", 3, 1), events.append, clock=clock)
    report("fitting", epoch=1, epochs=2, batch=0, batches=400)
    for batch in range(1, 200):      # the same epoch, no time passing: nothing more
        report("fitting", epoch=1, epochs=2, batch=batch, batches=400)
    clock.now += pg.MIN_INTERVAL
    report("fitting", epoch=1, epochs=2, batch=200, batches=400)
    report("fitting", epoch=2, epochs=2, batch=0, batches=400)   # a new epoch: at once
    report("predicting")                                          # a new stage: at once
    assert [(e.stage, e.epoch, e.batch) for e in events] == [
        ("starting", None, None), ("fitting", 1, 0), ("fitting", 1, 200), ("fitting", 2, 0), ("predicting", None, None)]
    assert events[2].elapsed == pg.MIN_INTERVAL and events[2].line() == "wd0 seed3 w01: fitting epoch 1/2, batch 200/400 [00:00]"


def test_a_failing_sink_stops_the_reporting_not_the_unit():
    calls = []

    def broken(event):
        calls.append(event)
        raise OSError("queue closed")

    with pytest.warns(UserWarning, match="progress of unit wd0__seed0__w00: reporting stopped .OSError: queue closed"):
        report = pg._Reporter(UnitKey("wd0", 0, 0), broken)
    report("fitting", epoch=1, epochs=2)   # nothing raised, nothing sent
    assert len(calls) == 1


def test_no_sink_no_reporter():
    assert unit_reporter(UnitKey("a", 0, 0)) is None
    with installed(lambda event: None):
        assert unit_reporter(StackKey("a", (0, 1), 0)).label == "a seeds0-1 w00"
    assert unit_reporter(UnitKey("a", 0, 0)) is None


# --------------------------------------------------------------------------- the channels
def _reporting_work(epochs: int, key: UnitKey) -> tuple[bool, int]:
    """A unit that reports its epochs when someone listens; returns (reported?, its process id)."""
    import os

    report = unit_reporter(key)
    for epoch in range(1, epochs + 1):
        if report is not None:
            report("fitting", epoch=epoch, epochs=epochs)
    return report is not None, os.getpid()


@pytest.mark.parametrize("workers", [1, 2])
def test_local_executor_carries_the_units_reports_to_the_parent(workers):
    import os

    tasks = [UnitTask(UnitKey("a", s, 0)) for s in range(3)] + [UnitTask(UnitKey("a", 0, 1), after=UnitKey("a", 0, 0))]
    events: list[UnitEvent] = []
    results = LocalExecutor(workers=workers).run(tasks, functools.partial(_reporting_work, 2), on_progress=events.append)
    assert all(reported for reported, _ in results.values())
    assert ({pid for _, pid in results.values()} == {os.getpid()}) == (workers == 1)   # a pool's units ran elsewhere
    for task in tasks:
        mine = [(e.stage, e.epoch, e.epochs) for e in events if e.slug == task.key.slug()]
        assert mine == [("starting", None, None), ("fitting", 1, 2), ("fitting", 2, 2)], task.key
    assert unit_reporter(UnitKey("a", 0, 0)) is None, "the sink of a --workers 1 run is removed after it"


@pytest.mark.parametrize("workers", [1, 2])
def test_without_a_listener_units_report_nothing(workers):
    tasks = [UnitTask(UnitKey("a", s, 0)) for s in range(2)]
    results = LocalExecutor(workers=workers).run(tasks, functools.partial(_reporting_work, 2))
    assert not any(reported for reported, _ in results.values())


# --------------------------------------------------------------------------- the board
def _board(**kwargs) -> tuple[ProgressBoard, io.StringIO]:
    out = io.StringIO()
    options = dict(total=4, done=0, left={"wd0": 3, "wd5": 1}, workers=1, enabled=True, nested=True, file=out)
    options.update(kwargs)
    return ProgressBoard(**options), out


def test_board_draws_a_line_per_running_unit_under_the_bar_and_removes_it():
    board, out = _board()
    with board:
        board.on_event(UnitEvent("wd0__seed3__w01", "wd0 seed3 w01", "fitting", 12.0, epoch=2, epochs=5,
                                 batch=120, batches=400))
        board.on_event(UnitEvent("wd5__seed0__w00", "wd5 seed0 w00", "building", 1.0))
        assert board.positions == {"wd0__seed3__w01": 1, "wd5__seed0__w00": 2}
        assert "wd0 seed3 w01: fitting epoch 2/5, batch 120/400 [00:12]" in out.getvalue()
        board.unit_done(UnitKey("wd0", 3, 1), [("wd0", 30.0)])
        board.on_event(UnitEvent("wd0__seed3__w01", "wd0 seed3 w01", "writing", 30.0))  # late: ignored
        assert set(board.lines) == {"wd5__seed0__w00"}
        board.on_event(UnitEvent("wd0__seed0__w00", "wd0 seed0 w00", "starting", 0.0))
        assert board.positions["wd0__seed0__w00"] == 1, "a freed row is taken again"
    assert board.lines == {} and board.bar.n == 1


def test_eta_appears_once_a_unit_finished():
    board, out = _board(workers=2)
    with board:
        board.on_event(UnitEvent("wd0__seed0__w00", "wd0 seed0 w00", "fitting", 3.0, epoch=1, epochs=2))
        assert "ETA" not in out.getvalue() and board.eta_text() == ""
        board.unit_done(UnitKey("wd0", 0, 0), [("wd0", 40.0)])
        # 3 units left (2 wd0, 1 wd5 without a time of its own: the mean of all), 2 at once: 40 * 3 / 2 = 60 s
        assert pg.eta_seconds(board.times, board.left, 2) == 60.0
        assert re.fullmatch(r"ETA 0[01]:[0-9]{2} \(mean 40\.0s/unit, 2 at once\)", board.eta_text())
        assert "ETA 0" in out.getvalue(), "the units bar shows it"


def test_a_disabled_board_draws_nothing():
    board, out = _board(enabled=False)
    with board:
        board.on_event(UnitEvent("wd0__seed0__w00", "wd0 seed0 w00", "fitting", 3.0))
        board.unit_done(UnitKey("wd0", 0, 0), [("wd0", 4.0)])
    assert out.getvalue() == "" and not board.nested


def test_the_lines_need_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())   # a log file, a pipe: no terminal
    board, _ = _board(nested=None)
    with board:
        assert not board.nested and board.enabled


# --------------------------------------------------------------------------- with the real model (tiny store)
ROLLING = {"initial_train_start": "2018-01", "start": "2018-03", "end": "2018-04", "step_months": 1,
           "valid_months": 1, "seeds": 1}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory, tiny_data):
    """The e2e tiny experiment, 1 seed; ``wd0`` with batches of 8 samples (epochs over 50 batches report them)."""
    from test_runner_e2e import TINY, tiny_experiment

    wd0 = dict(TINY, **{"task.model.kwargs.batch_size": 8})
    return tiny_experiment(tmp_path_factory.mktemp("unit_progress"), tiny_data,
                           pipelines={"wd0": wd0, "wdbig": dict(TINY)}, rolling=ROLLING)


def _stages(events: list[UnitEvent], slug: str) -> list[str]:
    """The stages of one unit's reports, each once, in order."""
    stages = [e.stage for e in events if e.slug == slug]
    return [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] != s]


@pytest.mark.slow
@pytest.mark.parametrize("stack_seeds", [1, 2])
def test_reporting_changes_no_number(experiment, tmp_path, stack_seeds):
    """The same units with and without a listener: the same Parquet bytes (and the listener heard every epoch)."""
    from rolling_calib.config.experiment import load_experiment
    from rolling_calib.execution import store as st
    from rolling_calib.execution.runner import plan_run, run_plan

    config = load_experiment(experiment, overrides={"rolling.stack_seeds": stack_seeds})
    plans = {name: plan_run(config, store=tmp_path / name, pipelines=["wd0"], seeds=stack_seeds)
             for name in ("quiet", "told")}
    run_plan(plans["quiet"], executor=LocalExecutor(workers=1), progress=False)
    events: list[UnitEvent] = []
    with installed(events.append):
        run_plan(plans["told"], executor=LocalExecutor(workers=1), progress=False)
    tasks = [StackKey("wd0", (0, 1), w) for w in (0, 1)] if stack_seeds == 2 else [UnitKey("wd0", 0, w) for w in (0, 1)]
    for task, epochs in zip(tasks, (2, 1)):   # n_epochs from scratch, finetune_epochs after
        told = [(e.epoch, e.epochs) for e in events if e.slug == task.slug() and e.epoch is not None]
        assert sorted(set(told)) == [(e, epochs) for e in range(1, epochs + 1)]
        saving = ["saving"] if stack_seeds == 1 else []   # a stack saves each seed while it predicts
        assert _stages(events, task.slug()) == ["starting", "building", "fitting", "predicting", *saving, "writing"]
    for key in plans["quiet"].keys():
        for name in ("parquet", "valid_parquet"):
            quiet = getattr(st.unit_paths(plans["quiet"].store, key), name).read_bytes()
            assert getattr(st.unit_paths(plans["told"].store, key), name).read_bytes() == quiet, (key, name)


def _run_command(experiment, store, *options) -> list[str]:
    return [sys.executable, "-m", "rolling_calib.cli", "run", str(experiment), "--store", str(store),
            "--pipelines", "wd0", "--workers", "1", "--no-tracking", *options]


@pytest.mark.slow
def test_run_on_a_terminal_shows_each_units_epochs_under_the_units_bar(experiment, tmp_path):
    """``rolling-calib run`` on a pseudo-terminal: the unit's epoch line right under the bar, then the ETA."""
    code, raw, _ = run_in_pty(_run_command(experiment, tmp_path / "store"), cwd=REPO)
    drawn = raw.decode("utf-8", errors="replace")
    assert code == 0, drawn[-3000:]
    shots = screens(raw)
    epoch = nested_under(shots, r"^units:\s+0%\|.*\| 0/2 ", r"^  wd0 seed0 w00: fitting epoch [12]/2(, batch \d+/\d+)? \[")
    assert epoch is not None, drawn[-3000:]
    # once w00 finished, the bar shows the run's ETA from its time while w01 runs under it
    eta = nested_under(shots, r"^units:\s+50%\|.*\| 1/2 \[\d\d:\d\d, ETA \d\d:\d\d \(mean \d+\.\ds/unit, 1 at once\)\]",
                       r"^  wd0 seed0 w01: ")
    assert eta is not None, drawn[-3000:]
    final = "\n".join(shots[-1])
    assert "done: 2 unit(s) ran" in final and not re.search(r"^  wd0 seed", final, re.M), "the units' lines are gone"


@pytest.mark.slow
@pytest.mark.parametrize("option", ["--no-progress", "--json"])
def test_no_progress_and_json_draw_no_bar(experiment, tmp_path, option):
    code, raw, out = run_in_pty(_run_command(experiment, tmp_path / "store", option), cwd=REPO,
                                stdout_pipe=option == "--json")
    drawn = raw.decode("utf-8", errors="replace")
    assert code == 0, drawn[-3000:]
    assert "units" not in drawn and "epoch" not in drawn and "\x1b[A" not in drawn and "\r" not in drawn.replace("\r\n", "")
    if option == "--json":
        assert json.loads(out)["units_ran"] == 2 and drawn.strip() == ""
    else:
        assert "done: 2 unit(s) ran" in drawn


# --------------------------------------------------------------------------- Qlib's own models (a daily store)
@pytest.mark.slow
def test_qlib_models_report_their_stages_and_the_torch_ones_their_logged_epochs(tmp_path):
    """Qlib's GRU: its epochs, read from the "Epoch%d:" records it logs (Qlib unpatched); LightGBM: its stages only."""
    from daily_helpers import build_daily_store
    from zoo_helpers import experiment, gru_experiment, run

    daily = build_daily_store(tmp_path / "qlib_day")
    lgb = {"class": "LGBModel", "module_path": "qlib.contrib.model.gbdt",
           "kwargs": {"loss": "mse", "num_leaves": 8, "num_boost_round": 10, "learning_rate": 0.2}}
    events: list[UnitEvent] = []
    with installed(events.append):
        run(gru_experiment(tmp_path, daily), tmp_path / "gru")
        run(experiment(tmp_path, daily, lgb, name="lgb"), tmp_path / "lgb")
    gru = [(e.stage, e.epoch, e.epochs) for e in events if e.slug == "gru_ts__seed0__w00" and e.epoch is not None]
    assert gru == [("fitting", 1, 2), ("fitting", 2, 2)]
    assert _stages(events, "gru_ts__seed0__w00") == ["starting", "building", "fitting", "predicting", "saving", "writing"]
    assert _stages(events, "lgb__seed0__w00") == ["starting", "building", "fitting", "predicting", "saving", "writing"]
    assert not [e for e in events if e.slug == "lgb__seed0__w00" and e.epoch is not None]
