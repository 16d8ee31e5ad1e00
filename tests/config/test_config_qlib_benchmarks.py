"""Qlib's own benchmark workflows are read as ``qrun`` reads them.

The four files in ``qlib_format/`` are workflows written in the format of Qlib's benchmarks (see its
README; they parse as ``qrun`` parses them, and to the same values as Qlib's own files when ``QLIB_REPO`` names a
checkout). Each validates with only the store pointed at the tests' tiny minute store
(``qlib_init.provider_uri`` and the handler's ``instruments`` universe) and a ``rolling:``
section added by a two-line wrapper with ``BASE_CONFIG_PATH``. Their YAML anchors
(``market``, ``benchmark``, ``data_handler_config``, ``port_analysis_config``) are ignored
as qrun ignores them; without ``pipelines:`` a file is one configuration named after its
stem; ``label`` (Alpha158/Alpha360), ``rnn_type`` (ALSTM) and LightGBM's hyperparameters
go through ``**kwargs`` and are accepted.

``check_store`` stays on: it only reads the store's minute calendar to place the
``rolling:`` months. Alpha158/Alpha360 read daily fields (``$close`` at ``freq: day``)
that the minute-only test store does not have, which validation does not need: it
imports the classes and checks their arguments; nothing is loaded or trained here.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from runner_helpers import REPO

from rolling_calib.config.experiment import (
    ConfigError,
    load_experiment,
    load_yaml,
    read_rolling,
)

BENCHMARKS = Path(__file__).parent / "qlib_format"
FILES = ["workflow_config_lstm_Alpha360.yaml", "workflow_config_gru_Alpha360.yaml",
         "workflow_config_alstm_Alpha158.yaml", "workflow_config_lightgbm_Alpha158.yaml"]
ROLLING = {"initial_train_start": "2018-01", "start": "2018-03", "end": "2018-04", "step_months": 1, "seeds": 1}
UNIVERSE = "task.dataset.kwargs.handler.kwargs.instruments"


def _wrapper(tmp_path: Path, bench: Path, tiny_data: Path, name: str | None = None, **extra) -> Path:
    """A file holding only what rolling-calib adds: the benchmark, our store, a schedule."""
    path = tmp_path / (name or bench.name)
    data = {"BASE_CONFIG_PATH": str(bench), "qlib_init": {"provider_uri": str(tiny_data)}, "rolling": ROLLING}
    data.update(extra)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("file", FILES)
def test_qlib_benchmark_validates_unchanged(file, tiny_data, tmp_path, caplog):
    bench = BENCHMARKS / file
    original = load_yaml(bench)
    path = _wrapper(tmp_path, bench, tiny_data)
    with caplog.at_level(logging.DEBUG, logger="rolling_calib.config.experiment"):
        cfg = load_experiment(path, overrides={UNIVERSE: "all"}, check_store=True)
    # the anchors are ignored as qrun ignores them, and said so in the debug log
    assert "market, benchmark, data_handler_config, port_analysis_config" in caplog.text
    # no pipelines: one configuration, the task as written, named after the file
    assert cfg.pipelines == {bench.stem: {}} and cfg.compare == []
    task = cfg.pipeline_task(bench.stem)
    assert task["model"] == original["task"]["model"]
    handler = dict(task["dataset"]["kwargs"]["handler"]["kwargs"])
    assert handler.pop("instruments") == "all"
    expected = dict(original["task"]["dataset"]["kwargs"]["handler"]["kwargs"])
    expected.pop("instruments")
    assert handler == expected
    assert cfg.qlib_init["region"] == "cn" and cfg.store_dir == tiny_data.resolve()
    assert cfg.rolling.start == "2018-03" and cfg.rolling.seeds == (0,)


def test_benchmark_values_qlib_takes_through_kwargs_are_accepted(tiny_data, tmp_path):
    """The values the issue reported as refused: all accepted, with the reason they are."""
    from rolling_calib.qlib_adapter.task_spec import accepted_kwargs, import_class

    lgb = load_yaml(BENCHMARKS / "workflow_config_lightgbm_Alpha158.yaml")["task"]
    alstm = load_yaml(BENCHMARKS / "workflow_config_alstm_Alpha158.yaml")["task"]
    assert alstm["model"]["kwargs"]["lr"] == 0.001  # ruamel, like qrun: 1e-3 is a float
    assert {"colsample_bytree", "lambda_l1", "lambda_l2", "num_leaves"} <= set(lgb["model"]["kwargs"])
    lgb_model = accepted_kwargs(import_class(lgb["model"], "task.model", "x"))
    assert lgb_model.open_via == "LGBModel.__init__(**kwargs) passes them to self.params.update(...)"
    alstm_model = accepted_kwargs(import_class(alstm["model"], "task.model", "x"))
    assert alstm_model.open_via == "ALSTM.__init__(**kwargs) ignores them"  # rnn_type is accepted (and unused)
    handler = accepted_kwargs(import_class(alstm["dataset"]["kwargs"]["handler"], "handler", "x"))
    assert handler.open_via is None and handler.consumed == {"label"}  # Alpha158 pops label, forwards the rest


def test_typos_are_still_refused_where_the_signature_is_strict(tiny_data, tmp_path):
    """Alpha158 forwards **kwargs to DataHandlerLP and on to DataHandler, which has none: a typo fails."""
    bench = BENCHMARKS / "workflow_config_alstm_Alpha158.yaml"
    path = _wrapper(tmp_path, bench, tiny_data)
    with pytest.raises(ConfigError, match=r"task\.dataset\.kwargs\.handler\.kwargs\.lable: Alpha158 has no such "
                                          r"argument \(it accepts: instruments, .*fetch_orig, label\)"):
        load_experiment(path, overrides={UNIVERSE: "all", "task.dataset.kwargs.handler.kwargs.lable": ["x"]},
                        check_store=False)
    # a value Qlib takes in another shape than the default's (freq: day) passes; a wrong scalar does not
    ok = {UNIVERSE: "all", "task.dataset.kwargs.handler.kwargs.freq": {"feature": "1min", "label": "day"}}
    load_experiment(path, overrides=ok, check_store=False)
    with pytest.raises(ConfigError, match=r"task\.model\.kwargs\.hidden_size: expected int .* found str '64'"):
        load_experiment(path, overrides={UNIVERSE: "all", "task.model.kwargs.hidden_size": "64"}, check_store=False)


def test_missing_rolling_says_how_to_add_it(tiny_data):
    bench = BENCHMARKS / "workflow_config_lstm_Alpha360.yaml"
    over = {"qlib_init.provider_uri": str(tiny_data), UNIVERSE: "all"}
    with pytest.raises(ConfigError) as err:
        load_experiment(bench, overrides=over, check_store=False)
    message = str(err.value)
    assert message.startswith(f"{bench}: rolling: missing section")
    # a snippet to paste, dated from the workflow's own segments (train 2008-..., test 2017-01..2020-08)
    assert "BASE_CONFIG_PATH: workflow_config_lstm_Alpha360.yaml\n  rolling:\n" in message
    assert "initial_train_start: 2008-01" in message and "start: 2017-01" in message and "end: 2020-08" in message
    # Qlib's LSTM can neither load_state nor finetune: the snippet says mode: scratch (why, in a comment)
    assert "    mode: scratch                  # LSTM can neither load_state nor finetune" in message
    with pytest.raises(ConfigError, match=r"rolling: missing section"):
        read_rolling(bench)


def test_the_snippet_of_the_message_is_a_working_wrapper(tiny_data, tmp_path):
    """Pasting the message's snippet (as a file next to the workflow) gives a valid experiment."""
    bench = tmp_path / "workflow_config_gru_Alpha360.yaml"
    bench.write_text((BENCHMARKS / bench.name).read_text())
    with pytest.raises(ConfigError) as err:
        read_rolling(bench)
    snippet = str(err.value).split("e.g.\n", 1)[1]
    wrapper = tmp_path / "gru_rolling.yaml"
    wrapper.write_text("\n".join(line[2:] for line in snippet.splitlines()) + "\n")
    rolling = read_rolling(wrapper)
    assert (rolling.initial_train_start, rolling.start, rolling.end, rolling.step_months) == ("2008-01", "2017-01", "2020-08", 6)
    assert rolling.mode == "scratch"  # Qlib's GRU cannot fine-tune: the snippet's mode runs as it is
    cfg = load_experiment(wrapper, overrides={"qlib_init.provider_uri": str(tiny_data), UNIVERSE: "all"},
                          check_store=False)
    assert list(cfg.pipelines) == ["gru_rolling"]


def test_near_misses_of_our_keys_are_refused(tiny_data, tmp_path):
    """Other top-level keys are qrun's business; a near miss of ours is a typo that would drop a section."""
    bench = BENCHMARKS / "workflow_config_lstm_Alpha360.yaml"
    path = _wrapper(tmp_path, bench, tiny_data, pipeline={"a": {}})
    with pytest.raises(ConfigError, match=r"unknown key 'pipeline' \(did you mean 'pipelines'\? Other top-level keys are ignored"):
        load_experiment(path, overrides={UNIVERSE: "all"}, check_store=False)
    path = _wrapper(tmp_path, bench, tiny_data, Compare=[["a", "b"]])
    with pytest.raises(ConfigError, match=r"unknown key 'Compare' \(did you mean 'compare'\?"):
        load_experiment(path, overrides={UNIVERSE: "all"}, check_store=False)


def test_our_sections_stay_strict_in_a_qlib_workflow(tiny_data, tmp_path):
    bench = BENCHMARKS / "workflow_config_lightgbm_Alpha158.yaml"
    path = _wrapper(tmp_path, bench, tiny_data, pipelines={"a": {}, "b": {"task.model.kwargs.num_leaves": 31}},
                    compare=[["b", "a"]])
    cfg = load_experiment(path, overrides={UNIVERSE: "all"}, check_store=False)
    assert list(cfg.pipelines) == ["a", "b"] and cfg.compare == [("b", "a")]
    assert cfg.pipeline_task("b")["model"]["kwargs"]["num_leaves"] == 31
    bad = _wrapper(tmp_path, bench, tiny_data, name="bad.yaml", rolling={**ROLLING, "step_month": 2})
    with pytest.raises(ConfigError, match=r"bad\.yaml: unknown key 'rolling\.step_month'"):
        load_experiment(bad, overrides={UNIVERSE: "all"}, check_store=False)
    bad = _wrapper(tmp_path, bench, tiny_data, name="bad.yaml", pipelines={"a": {"task.modle.kwargs.x": 1}})
    with pytest.raises(ConfigError, match=r"pipelines\.a: unknown key 'task\.modle\.kwargs\.x'"):
        load_experiment(bad, overrides={UNIVERSE: "all"}, check_store=False)


def test_a_file_without_pipelines_is_one_configuration_named_after_it(tiny_data, tmp_path):
    data = load_yaml(REPO / "workflows" / "base.yaml")
    del data["pipelines"]
    data["qlib_init"]["provider_uri"] = {"1min": str(tiny_data)}
    data["rolling"] = ROLLING
    path = tmp_path / "my_lstm.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg = load_experiment(path)
    assert cfg.pipelines == {"my_lstm": {}} and cfg.compare == []
    assert cfg.pipeline_task("my_lstm") == cfg.task


@pytest.mark.parametrize("file", FILES)
def test_our_workflows_parse_as_qrun_parses_them(file):
    """qrun's own reader (pyqlib's ``qlib.cli.run``: Jinja2 over the environment, ruamel's safe YAML 1.2) gives
    the mapping rolling-calib reads: anchors, ``1e-3`` floats, dates, flow-style mappings and ``<PRED>`` alike."""
    from ruamel.yaml import YAML

    from qlib.cli.run import render_template

    path = BENCHMARKS / file
    qrun = YAML(typ="safe", pure=True).load(render_template(str(path)))
    assert load_yaml(path, template=True) == qrun
    assert qrun["task"]["model"]["class"] and qrun["task"]["dataset"]["kwargs"]["segments"]["test"]


@pytest.mark.parametrize("file", FILES)
def test_our_workflows_hold_the_configuration_of_qlibs_benchmarks(file):
    """Written by us, yet the same configuration as Qlib's examples/benchmarks file (the workflows in
    workflows/qlib_zoo and workflows/source run Qlib's benchmark). Needs a Qlib checkout: ``QLIB_REPO=DIR``."""
    import os
    import sys

    repo = os.environ.get("QLIB_REPO")
    if not repo:
        pytest.skip("set QLIB_REPO to a Qlib checkout (or its git directory) to compare with Qlib's benchmark files")
    sys.path.insert(0, str(REPO / "bench"))
    from qlib_checkout import git_blob_id, read_file

    model = {"lstm": "LSTM", "gru": "GRU", "alstm": "ALSTM", "lightgbm": "LightGBM"}[file.split("_")[2]]
    theirs = read_file(Path(repo), f"examples/benchmarks/{model}/{file}")
    copy = BENCHMARKS.parent / f".qlib_{file}"
    try:
        copy.write_bytes(theirs)
        assert load_yaml(BENCHMARKS / file) == load_yaml(copy)
    finally:
        copy.unlink(missing_ok=True)
    assert git_blob_id((BENCHMARKS / file).read_bytes()) != git_blob_id(theirs)  # not a copy
