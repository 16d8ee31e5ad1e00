"""Fuzzing the two inputs a user hands over: workflow YAMLs and vendor CSVs (issue 30 item 8).

Whatever the bytes, the command line answers with exit 0, or with exactly one error line naming the file
(and the key or line), exit 2 (the ``data`` commands exit 1 on data errors, 2 on usage errors); never a
traceback, and nothing is written outside the directory the command was given.

Calls are in-process (``rolling_calib.cli.main``) so that a few hundred examples run in a few minutes.
For workflows the training step is replaced by a sentinel: reading, rendering, validating and planning a
workflow is what is fuzzed here, not Qlib's training (``tests/execution`` trains for real).
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data_helpers import clean_day_rows
from rolling_calib.cli import main
from rolling_calib.config.experiment import _read_with_base

REPO = Path(__file__).resolve().parents[2]
FUZZ = settings(max_examples=int(os.environ.get("RC_FUZZ_EXAMPLES", "40")), deadline=None, derandomize=True,
                suppress_health_check=list(HealthCheck))


class Accepted(Exception):
    """The workflow passed every check: the run would start training here."""


def _accept(config, options):  # stands in for run_experiment: everything before it ran for real
    raise Accepted


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _cli(argv: list[str]) -> tuple[int, str]:
    """``main(argv)``: (exit status, stderr); stdout is discarded. A traceback fails the test, as it would the user."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except Accepted:
            code = 0
        except SystemExit as exc:  # argparse: usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return int(code), err.getvalue()


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(("rolling-calib", "error:"))
            and "error:" in line]


# --------------------------------------------------------------------------- workflows
@pytest.fixture(scope="module")
def base_workflow(tiny_data) -> str:
    """demo.yaml with its base merged in, on the tiny store, scaled to one window and one seed: one file."""
    data, _ = _read_with_base(REPO / "workflows" / "demo.yaml")
    data["qlib_init"]["provider_uri"] = {"1min": str(tiny_data)}
    data["rolling"].update({"initial_train_start": "2018-01", "start": "2018-03", "end": "2018-04",
                            "step_months": 1, "seeds": 1})
    return yaml.safe_dump(data, sort_keys=False)


YAML_PIECES = st.sampled_from([
    ":", ": ", "- ", "{", "}", "[", "]", ",", "&a ", "*a", "<<: *a", "!!python/object:os.system", "!!binary",
    "'", '"', "#", "|", ">", "%YAML 1.2\n", "---\n", "...\n", "\t", "\n", "  ", "\x00", "\ufeff", "é", "\u202e",
    "{{ HOME }}", "{{ cycler.__init__ }}", "{% include 'x' %}", "{% for x in HOME %}{{ x }}{% endfor %}", "{#",
    "1e999", "-1", "0", "nan", ".inf", "9" * 30, "null", "~", "yes", "2018-13-45", "0x1F", "1_000",
    "BASE_CONFIG_PATH: ../../etc/passwd\n", "BASE_CONFIG_PATH: /dev/zero\n", "task:\n", "rolling:\n  seeds: 0\n",
])


@st.composite
def mutated_text(draw, text: str) -> str:
    """``text`` with a few pieces inserted, characters deleted or lines duplicated, swapped or dropped."""
    lines = text.splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["insert", "delete", "dup", "drop", "swap"]))
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        if op == "insert":
            line = lines[i] if lines else ""
            at = draw(st.integers(0, len(line)))
            piece = draw(st.one_of(YAML_PIECES, st.text(max_size=6)))
            lines[i:i + 1] = [line[:at] + piece + line[at:]]
        elif op == "delete" and lines:
            line = lines[i]
            at = draw(st.integers(0, len(line)))
            lines[i] = line[:at] + line[at + draw(st.integers(1, 5)):]
        elif op == "dup" and lines:
            lines.insert(i, lines[i])
        elif op == "drop" and lines:
            del lines[i]
        elif op == "swap" and len(lines) > 1:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
    return "".join(lines)


VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.lists(st.integers(-5, 5), max_size=3), st.dictionaries(st.text(max_size=5),
                                                                                     st.integers(), max_size=2),
)


def _keys(data, prefix=()):
    if isinstance(data, dict):
        for key, value in data.items():
            yield prefix + (key,)
            yield from _keys(value, prefix + (key,))


@st.composite
def mutated_values(draw, text: str) -> str:
    """The workflow with one to three values (anywhere in the tree) replaced by arbitrary YAML values."""
    data = yaml.safe_load(text)
    keys = list(_keys(data))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(keys))
        node = data
        for key in path[:-1]:
            node = node[key] if isinstance(node, dict) and key in node else None
            if node is None:
                break
        if isinstance(node, dict):
            node[path[-1]] = draw(VALUES)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _check_workflow(text: str, tmp: Path, monkeypatch) -> None:
    monkeypatch.setattr("rolling_calib.experiment.flow.run_experiment", _accept)
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    for p in work.iterdir():
        p.unlink() if p.is_file() else None
    path = work / "fuzz.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    before = _listing(tmp)
    monkeypatch.chdir(work)
    code, err = _cli(["run", str(path), "--store", str(work / "store"), "--no-tracking", "--workers", "1",
                      "--no-progress"])
    assert "Traceback" not in err, err
    assert code in (0, 2), (code, err)
    if code == 2:
        lines = _error_lines(err)
        assert len(lines) == 1, err
        assert str(path) in lines[0] or "argument" in lines[0], lines[0]
    assert _listing(tmp) == before, "a write outside nothing (the run never started)"


def test_the_base_workflow_is_accepted(base_workflow, tmp_path, monkeypatch):
    _check_workflow(base_workflow, tmp_path, monkeypatch)


@FUZZ
@given(data=st.data())
def test_fuzzed_workflow_text_is_accepted_or_refused_in_one_line(data, base_workflow, tmp_path_factory, monkeypatch):
    text = data.draw(mutated_text(base_workflow))
    with monkeypatch.context() as m:
        _check_workflow(text, tmp_path_factory.mktemp("wf"), m)


@FUZZ
@given(data=st.data())
def test_fuzzed_workflow_values_are_accepted_or_refused_in_one_line(data, base_workflow, tmp_path_factory, monkeypatch):
    text = data.draw(mutated_values(base_workflow))
    with monkeypatch.context() as m:
        _check_workflow(text, tmp_path_factory.mktemp("wv"), m)


# --------------------------------------------------------------------------- vendor CSVs
HEADER = "date,ToD,open,high,low,close,volume\n"


def _base_csv() -> str:
    rows = clean_day_rows("2018-02-16", seed=1, n=30) + clean_day_rows("2018-02-20", seed=2, n=30, price=100.0)
    return HEADER + "".join(",".join(str(v) for v in row) + "\n" for row in rows)


CSV_PIECES = st.sampled_from([
    ",", ",,", "\n", "\r\n", '"', "NA", "-", "nan", "inf", "-1", "0", "1e400", "9" * 40, "2031-03-04", "2018-02-17",
    "2018-02-16,16:00:00", "25:61:00", "09:30:30", "\x00", "\ufeff", "é", ";", "\t", "AAPL", "symbol,", "#",
])


def _check_csv(text: str, mode: str, tmp: Path) -> None:
    src = tmp / "in" / "AAPL.csv"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(text, encoding="utf-8", errors="surrogatepass")
    out = tmp / "out"
    before = _listing(tmp)
    code, err = _cli(["data", "ingest", str(src), "--out", str(out), f"--{mode}", "--no-progress"])
    assert "Traceback" not in err, err
    assert code in (0, 1, 2), (code, err)
    if code:
        lines = _error_lines(err)
        assert len(lines) == 1, err
        assert str(src) in lines[0] or "argument" in lines[0] or "every row was dropped" in lines[0], lines[0]
    new = _listing(tmp) - before
    assert all(p == "out" or p.startswith("out/") or p.startswith("out.") for p in new), new  # --out and its staging


@FUZZ
@given(data=st.data(), mode=st.sampled_from(["strict", "repair"]))
def test_fuzzed_vendor_csvs_are_ingested_or_refused_in_one_line(data, mode, tmp_path_factory):
    text = data.draw(mutated_text(_base_csv()))
    _check_csv(text, mode, tmp_path_factory.mktemp("csv"))
