"""A workflow file cannot run code through its template; refusals are one line, exit 2, nothing written (issue 30)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rolling_calib.cli import main
from rolling_calib.config.qrun_yaml import load_yaml, render_template
from rolling_calib.core.validation import ConfigError

REPO = Path(__file__).resolve().parents[2]


def _run_cli(argv, capsys):
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_a_template_comment_cannot_run_a_shell_command(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    text = (REPO / "workflows" / "real2018.yaml").read_text()
    evil = tmp_path / "evil.yaml"
    evil.write_text("# {{ cycler.__init__.__globals__.os.system('touch PWNED') }}\n" + text)
    before = _listing(tmp_path)
    code, err = _run_cli(["run", str(evil), "--store", str(tmp_path / "store"), "--no-tracking"], capsys)
    assert code == 2
    assert len(err) == 1 and f"{evil}:1: template refused" in err[0], err
    assert not (tmp_path / "PWNED").exists()
    assert _listing(tmp_path) == before


@pytest.mark.parametrize("tag", ['{% include "real2018.yaml" %}', '{% import "x.yaml" as x %}',
                                 '{% from "x.yaml" import y %}', '{% extends "base.yaml" %}'])
def test_templates_reading_other_files_are_refused_in_one_line(tag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "inc.yaml"
    path.write_text(f"a: 1\n{tag}\n")
    code, err = _run_cli(["run", str(path), "--store", str(tmp_path / "store"), "--no-tracking"], capsys)
    assert code == 2
    assert len(err) == 1 and f"{path}:2: template refused: {{% " in err[0], err
    assert "BASE_CONFIG_PATH" in err[0]


@pytest.mark.parametrize("expr", ["HOME.__class__", "HOME.format.__globals__", "range(10)", "lipsum()",
                                  "''.__class__.__mro__", "RC_UNSET_NAME.x", "namespace()"])
def test_the_sandbox_refuses_reaching_beyond_environment_names(expr, monkeypatch):
    monkeypatch.setenv("HOME", "/root")
    monkeypatch.delenv("RC_UNSET_NAME", raising=False)
    with pytest.raises(ConfigError, match=r"^w\.yaml:1: template refused") as info:
        render_template(f"a: {{{{ {expr} }}}}\n", "w.yaml")
    assert "\n" not in str(info.value)


def test_environment_names_still_render_as_in_qrun(tmp_path, monkeypatch):
    monkeypatch.setenv("RC_T_DATA", "/Data/US25")
    path = tmp_path / "w.yaml"
    path.write_text("a: {{ RC_T_DATA }}\nb: {{ RC_T_DATA | lower }}\n{% if RC_T_DATA %}c: 1{% endif %}\n")
    assert load_yaml(path, template=True) == {"a": "/Data/US25", "b": "/data/us25", "c": 1}
    assert not os.path.exists(tmp_path / "PWNED")
