"""Workflow files and ``--set`` values are read as ``qrun`` reads them: Jinja2 over the environment, YAML 1.2,
BASE_CONFIG_PATH from the current directory first. (``test_config_qrun.py`` compares with a real ``qrun`` run.)"""

from __future__ import annotations

import pytest

from rolling_calib.config.experiment import ConfigError, _read_with_base
from rolling_calib.config.overrides import parse_value
from rolling_calib.config.qrun_yaml import load_yaml


def test_the_given_file_is_a_template_over_the_environment_its_base_is_not(tmp_path, monkeypatch):
    monkeypatch.setenv("RC_TEST_DATA", "/data/us25")
    monkeypatch.delenv("RC_TEST_UNSET", raising=False)
    (tmp_path / "base.yaml").write_text('note: "{{ RC_TEST_DATA }}"\nseeds: 3\n')
    top = tmp_path / "top.yaml"
    top.write_text("BASE_CONFIG_PATH: base.yaml\nqlib_init: {provider_uri: {{ RC_TEST_DATA }}}\n"
                   "experiment_name: run{{ RC_TEST_UNSET }}\n")
    with pytest.warns(UserWarning, match="not set in the environment render as empty text.*RC_TEST_UNSET"):
        data, _ = _read_with_base(top)
    assert data == {"note": "{{ RC_TEST_DATA }}", "seeds": 3,  # qrun renders only the file it is given
                    "qlib_init": {"provider_uri": "/data/us25"}, "experiment_name": "run"}


def test_a_broken_template_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("a: 1\nb: {% if %}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:2: invalid template"):
        load_yaml(path, template=True)


def test_yaml_1_2_scalars_anchors_and_merge_keys(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("defaults: &d {lr: 1e-3, wd: 5e-6, flag: yes, on: 1, n: 010}\n"
                    "model:\n  <<: *d\n  lr: 2.0e-3\nsame: *d\n")
    data = load_yaml(path)
    assert data["model"] == {"lr": 0.002, "wd": 5e-6, "flag": "yes", "on": 1, "n": 10}  # YAML 1.1 would differ
    assert data["same"] is data["defaults"] or data["same"] == data["defaults"]


@pytest.mark.parametrize("text", ["32", "-7", "5e-6", "1.0e-2", ".5", "0.5", "true", "false", "yes", "off", "null",
                                  "~", "adam", "010", "0x1f", "2018-01-02", "'5e-6'", '"quoted text"', "1_000"])
def test_set_values_read_as_the_file_reads_them(text, tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text(f"k: {text}\n")
    assert parse_value(text) == load_yaml(path)["k"]


def test_base_config_path_current_directory_first_then_beside_the_file(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "base.yaml").write_text("where: beside\n")
    top = conf / "top.yaml"
    top.write_text("BASE_CONFIG_PATH: base.yaml\nx: 1\n")
    monkeypatch.chdir(tmp_path)
    assert _read_with_base(top)[0] == {"where": "beside", "x": 1}
    (tmp_path / "base.yaml").write_text("where: cwd\n")
    with pytest.warns(UserWarning, match=r"using .*base\.yaml, not .*conf/base\.yaml: the current directory comes first"):
        assert _read_with_base(top)[0] == {"where": "cwd", "x": 1}
    monkeypatch.chdir(conf)  # the same file both ways: no warning
    assert _read_with_base(top)[0] == {"where": "beside", "x": 1}


def test_a_missing_base_names_both_places(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    top = tmp_path / "conf" / "top.yaml"
    top.parent.mkdir()
    top.write_text("BASE_CONFIG_PATH: nowhere.yaml\n")
    with pytest.raises(ConfigError, match=r"BASE_CONFIG_PATH: file not found: .*conf/nowhere\.yaml \(nor "
                                          r".*nowhere\.yaml: qrun looks in the current directory first\)"):
        _read_with_base(top)
