"""A workflow's Jinja2 template cannot take the machine, and ordinary templates render as ``qrun`` renders them
(issue 39: ``{{ 9**(9**9) }}``, two nested loops or ``{{ 'x'*4000000000 }}`` in a comment ran before validation).

The hostile templates run in a child process with its address space capped at 4 GiB and a time limit, so a
bound that stops working fails these tests instead of taking the machine with them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from rolling_calib.config.template import MAX_OUTPUT_CHARS, render_template

REPO = Path(__file__).resolve().parents[2]

#: What each template would cost unbounded, and the bound that refuses it (either of a pair: whichever this
#: machine's speed reaches first).
HOSTILE = {
    "power": ("{{ 9**(9**9) }}", "'**' would make an integer of about 1,228,093,895 bits, more than 4,096"),
    "nested loops": ("{% for a in 'x'*1000000 %}{% for b in 'x'*1000000 %}{% endfor %}{% endfor %}",
                     "it ran for more than 5 s"),
    "repeat": ("{{ 'x'*4000000000 }}", "'*' would make a text or list of 4,000,000,000 characters or items"),
    "integer product": ("{{ (2**3000) * (2**3000) }}", "'*' would make an integer of about 6,002 bits"),
    "printf width": ("{{ '%0999999999d' % 1 }}", "'%' would make a text or list of 1,000,001,376"),
    "format width": ("{{ '{:>999999999}'.format(1) }}", "format would make a text or list of 999,999,999"),
    "replace": ("{{ ('x'*1000000)|replace('', 'y'*1000000) }}", "filter replace would make a text or list of"),
    "join": ("{{ ('x'*1000000)|join('y'*1000000) }}", "filter join would make a text or list of"),
    "indent": ("{{ ('x\\n'*500000)|indent(1000) }}", "filter indent would make a text or list of"),
    "center": ("{{ 'x'|center(4000000000) }}", "filter center would make a text or list of 4,000,000,000"),
    "wordwrap": ("{{ ('x'*1000000)|wordwrap(1, wrapstring='y'*1000000) }}", "filter wordwrap would make"),
    "padding method": ("{{ 'x'.ljust(4000000000) }}", "access to attribute 'ljust' of 'str' object is unsafe"),
    "concatenation": ("{% set a = 'x'*1000000 %}{{ a~a~a~a~a~a~a~a~a~a }}", "'~' would make a text or list of"),
    "macro doubling": ("{% macro m(n) %}{% if n %}{{ m(n-1) }}{{ m(n-1) }}{% else %}xxxxxxxx{% endif %}{% endmacro %}"
                       "{{ m(40) }}", ("it ran for more than 5 s", "it printed more than 16,777,216 characters")),
    "captured loop": ("{% set a = 'x'*1000000 %}{% set b %}{% for i in 'x'*1000 %}{{ a }}{% endfor %}{% endset %}",
                      "it printed more than 16,777,216 characters"),
    "sum of lists": ("{{ ('x'*1000000)|batch(1)|sum(start=[]) }}", "filter sum: only numbers may be summed"),
    "output": ("{% for i in 'x'*1000 %}{{ 'y'*10000 }}{% endfor %}",
               f"the rendered file would be longer than {MAX_OUTPUT_CHARS:,} characters"),
}

#: The child: every hostile template as line 2 of a workflow file, read as ``run`` reads it; one JSON line each.
CHILD = """
import json, resource, sys, warnings
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from rolling_calib.config.qrun_yaml import load_yaml
folder, cases = Path(sys.argv[1]), json.loads(sys.argv[2])
for name, text in cases.items():
    path = folder / (name.replace(" ", "_") + ".yaml")
    path.write_text("a: 1\\n# " + text + "\\n")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load_yaml(path, template=True)
        message = "rendered"
    except Exception as exc:
        message = type(exc).__name__ + ": " + str(exc)
    print(json.dumps([name, str(path), message]), flush=True)
"""


def test_hostile_templates_are_refused_in_one_line_naming_the_file(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path),
                           json.dumps({name: text for name, (text, _) in HOSTILE.items()})],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {name: (path, message) for name, path, message in map(json.loads, proc.stdout.splitlines())}
    assert set(results) == set(HOSTILE)
    for name, (_, reason) in HOSTILE.items():
        path, message = results[name]
        where = f"{path}:" if name == "output" else f"{path}:2:"   # the rendered file's size has no line
        assert message.startswith(f"ConfigError: {where} template refused"), (name, message)
        reasons = reason if isinstance(reason, tuple) else (reason,)
        assert any(r in message for r in reasons) and "\n" not in message, (name, message)


def test_a_hostile_template_stops_the_command_in_one_line(tmp_path):
    """``run`` on a workflow whose comment computes ``9**(9**9)``: exit 2, one line, nothing written."""
    evil = tmp_path / "evil.yaml"
    evil.write_text("# {{ 9**(9**9) }}\n" + (REPO / "workflows" / "real2018.yaml").read_text())
    script = ("import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
              "from rolling_calib.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.run([sys.executable, "-c", script, "run", str(evil), "--store", str(tmp_path / "store"),
                           "--no-tracking"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=600)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1, proc.stderr[-3000:]
    assert err[0].startswith(f"rolling-calib run: error: {evil}:1: template refused: '**' would make an integer")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.yaml"]


#: Ordinary templates: what a workflow does with environment variables (RC_T_SET is set, RC_T_UNSET is not).
ORDINARY = [
    "provider_uri: {{ RC_T_SET }}\n",
    "provider_uri: {{ RC_T_UNSET }}\n",
    "provider_uri: {{ RC_T_UNSET | default('~/.qlib/qlib_data/cn_data') }}\n",
    "provider_uri: {{ RC_T_SET | default('unused') }}\n",
    "market: {{ RC_T_SET | lower | replace('/', '_') }}\n",
    "{% if RC_T_UNSET %}a: 1{% else %}a: 2{% endif %}\n{% if RC_T_SET %}b: 1{% endif %}\n",
    "path: {{ RC_T_SET ~ '/sub' }}\nalso: {{ RC_T_UNSET ~ 'x' }}\n",
    "n: {{ RC_T_N | int * 2 }}\npower: {{ (RC_T_N | int) ** 2 }}\n",
    "seeds: [{% for s in RC_T_LIST.split(',') %}{{ s | int }}{% if not loop.last %}, {% endif %}{% endfor %}]\n",
    "name: {{ '%s-%s' % (RC_T_SET, RC_T_N) }}\nother: {{ '{}_{}'.format(RC_T_N, 'x') }}\n",
    "# {# a comment #} kept\n{%- set base = RC_T_SET -%}\nk: {{ base }}\n",
    "m: {{ RC_T_N if RC_T_N else 'none' }}\nlen: {{ RC_T_LIST | length }}\n",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_templates_render_as_qrun_renders_them(text, tmp_path, monkeypatch):
    """The same text as Qlib's own ``qrun`` renderer (``qlib.cli.run.render_template``) gives for the file."""
    run = pytest.importorskip("qlib.cli.run")
    monkeypatch.setenv("RC_T_SET", "/Data/US25")
    monkeypatch.setenv("RC_T_N", "7")
    monkeypatch.setenv("RC_T_LIST", "0,1,2")
    monkeypatch.delenv("RC_T_UNSET", raising=False)
    path = tmp_path / "w.yaml"
    path.write_text(text)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ours = render_template(text, path)
    assert bool(seen) == ("RC_T_UNSET" in text)   # a warning names the unset variables
    assert ours == run.render_template(str(path))
