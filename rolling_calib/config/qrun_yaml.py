"""Workflow YAML read exactly as Qlib's ``qrun`` reads it (pyqlib 0.9.7, ``qlib/cli/run.py``).

The only YAML reader of rolling-calib (files and ``--set`` values alike):

1. **Template.** The file named on the command line is a Jinja2 template first: ``{{ NAME }}`` is
   filled from the environment variable ``NAME``, and a name that is not set renders as empty
   text (as in ``qrun``; a warning lists such names). Files it includes are not rendered, as
   ``qrun`` renders only the file it is given. A file without Jinja2 markup is read as it is.
2. **YAML 1.2.** ruamel.yaml's safe loader, pure Python: ``5e-6`` and ``1e-3`` are floats,
   ``yes``/``on`` are strings, ``010`` is 10; anchors, aliases and ``<<`` merge keys work; a key
   written twice in one mapping is an error (naming both lines).
3. **BASE_CONFIG_PATH** is looked up as written (a relative path against the current directory)
   first, then next to the including file (:func:`find_base`). The merge is Qlib's own
   ``update_config`` (:func:`rolling_calib.qlib_adapter.task_spec.merge_base_config`).

What rolling-calib adds: a base file may name its own base (``qrun`` reads one level), and
every error names the file and line.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from rolling_calib.core.validation import ConfigError

__all__ = ["find_base", "load_yaml", "parse_scalar", "render_template"]

_JINJA_MARKS = ("{{", "{%", "{#")


def _loader():
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True)  # what qrun constructs


def render_template(text: str, where: str | os.PathLike) -> str:
    """Fill ``text`` as ``qrun`` does before parsing: a Jinja2 template over the environment variables.

    Examples
    --------
    >>> os.environ["RC_DOCTEST_DATA"] = "/data/us25"
    >>> render_template("provider_uri: {{ RC_DOCTEST_DATA }}\\n", "w.yaml")
    'provider_uri: /data/us25'
    >>> del os.environ["RC_DOCTEST_DATA"]
    >>> render_template("lr: 1e-3\\n", "w.yaml")  # no markup: the text as it is
    'lr: 1e-3\\n'
    """
    if not any(mark in text for mark in _JINJA_MARKS):
        return text
    import jinja2
    from jinja2 import meta

    try:
        template = jinja2.Template(text)
        names = meta.find_undeclared_variables(template.environment.parse(text))
        unset = sorted(name for name in names if name not in os.environ)
        if unset:
            warnings.warn(f"{where}: template variables not set in the environment render as empty text "
                          f"(as qrun renders them): {', '.join(unset)}", stacklevel=3)
        return template.render({name: os.environ[name] for name in names if name in os.environ})
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(f"{where}:{exc.lineno}: invalid template (qrun fills the file with Jinja2 before "
                          f"reading the YAML): {exc.message}") from exc
    except jinja2.TemplateError as exc:
        raise ConfigError(f"{where}: template: {exc}") from exc


def load_yaml(path: str | os.PathLike, *, template: bool = False) -> dict:
    """Read a YAML mapping as ``qrun`` reads it; errors name the file and line.

    Parameters
    ----------
    path : path
        The file.
    template : bool
        Fill it as a Jinja2 template first (:func:`render_template`): ``qrun`` does so for the
        file it is given, not for its ``BASE_CONFIG_PATH``.

    Examples
    --------
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "w.yaml"
    >>> _ = path.write_text("base: &b {lr: 1e-3, on: yes}\\nrun:\\n  <<: *b\\n  seeds: 010\\n")
    >>> load_yaml(path)["run"]
    {'lr': 0.001, 'on': 'yes', 'seeds': 10}
    """
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    text = path.read_text(encoding="utf-8")
    if template:
        text = render_template(text, path)
    try:
        data = _loader().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = exc.problem or exc.context or str(exc)
        if "duplicate key" in problem:
            first = f" (first at line {exc.context_mark.line + 1})" if exc.context_mark is not None else ""
            raise ConfigError(f"{where}: duplicate key: {problem.split('duplicate key', 1)[1].strip()}{first}; "
                              "a key may appear once per mapping") from exc
        raise ConfigError(f"{where}: invalid YAML: {problem}") from exc
    except YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, found {type(data).__name__}")
    return data


def parse_scalar(text: str) -> Any:
    """One value read as ``qrun``'s YAML reads it (a ``--set`` value).

    Examples
    --------
    >>> [parse_scalar(t) for t in ["32", "5e-6", "0.5", "true", "yes", "null", "adam", "010"]]
    [32, 5e-06, 0.5, True, 'yes', None, 'adam', 10]
    """
    from ruamel.yaml.error import YAMLError

    try:
        return _loader().load(text)
    except YAMLError as exc:
        raise ValueError(f"not a YAML value: {text!r} ({getattr(exc, 'problem', None) or exc})") from exc


def find_base(base_ref: str, including: Path) -> Path:
    """Where ``qrun`` finds ``BASE_CONFIG_PATH: base_ref`` of the file ``including``.

    As written first (an absolute path, or relative to the current directory), then next to
    the including file. When both exist and differ, a warning says which one is used.

    Raises
    ------
    ConfigError
        Neither exists; the message names both places.
    """
    as_written = Path(base_ref)
    beside = including.absolute().parent / as_written
    if as_written.exists():
        if not as_written.is_absolute() and beside.exists() and not beside.samefile(as_written):
            warnings.warn(f"{including}: BASE_CONFIG_PATH {base_ref}: using {as_written.absolute()}, not {beside}: "
                          "the current directory comes first, as in qrun", stacklevel=3)
        return as_written.absolute()
    if beside.exists():
        return beside
    also = "" if as_written.is_absolute() else f" (nor {as_written.absolute()}: qrun looks in the current directory first)"
    raise ConfigError(f"{including}: BASE_CONFIG_PATH: file not found: {beside}{also}")
