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


#: Template statements that read other files: refused (the sandbox has no loader; qrun renders one file).
_FILE_TAGS = {"Include": "include", "Import": "import", "FromImport": "from ... import", "Extends": "extends"}


def _sandbox():
    """Jinja2's immutable sandbox with no globals (no ``range``, ``cycler``, ``lipsum`` ...): only environment names."""
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    # strict: an unsafe or missing attribute raises instead of rendering empty (unset names are passed as "")
    env = ImmutableSandboxedEnvironment(autoescape=False, undefined=StrictUndefined)
    env.globals.clear()
    return env


def render_template(text: str, where: str | os.PathLike) -> str:
    """Fill ``text`` as ``qrun`` does before parsing: a Jinja2 template over the environment variables.

    Rendered in Jinja2's :class:`~jinja2.sandbox.ImmutableSandboxedEnvironment` with no globals:
    the only names are the environment's variables (``{{ NAME }}`` as in ``qrun``; filters and
    conditionals work on them). Private and dunder attributes, mutating methods and unsafe
    callables raise a sandbox error; ``{% include %}``, ``{% import %}`` and ``{% extends %}``
    are refused before anything renders. Every refusal is a one-line :class:`ConfigError`.

    Examples
    --------
    >>> os.environ["RC_DOCTEST_DATA"] = "/data/us25"
    >>> render_template("provider_uri: {{ RC_DOCTEST_DATA }}\\n", "w.yaml")
    'provider_uri: /data/us25'
    >>> del os.environ["RC_DOCTEST_DATA"]
    >>> render_template("lr: 1e-3\\n", "w.yaml")  # no markup: the text as it is
    'lr: 1e-3\\n'
    >>> render_template("# {{ cycler.__init__.__globals__ }}\\n", "w.yaml")
    Traceback (most recent call last):
    ...
    rolling_calib.core.validation.ConfigError: w.yaml:1: template refused (a workflow is rendered in Jinja2's sandbox with only the environment's variable names): 'cycler' is undefined
    """
    if not any(mark in text for mark in _JINJA_MARKS):
        return text
    import jinja2
    from jinja2 import meta, nodes

    env = _sandbox()
    refused = "template refused (a workflow is rendered in Jinja2's sandbox with only the environment's variable names)"
    try:
        tree = env.parse(text)
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(f"{where}:{exc.lineno}: invalid template (qrun fills the file with Jinja2 before "
                          f"reading the YAML): {exc.message}") from exc
    for kind, tag in _FILE_TAGS.items():
        node = next(iter(tree.find_all(getattr(nodes, kind))), None)
        if node is not None:
            raise ConfigError(f"{where}:{node.lineno}: template refused: {{% {tag} %}} reads another file; a workflow "
                              f"template may use only environment variables ({{{{ NAME }}}}); use BASE_CONFIG_PATH "
                              f"to build on another workflow")
    names = meta.find_undeclared_variables(tree)
    unset = sorted(name for name in names if name not in os.environ)
    values = {name: os.environ[name] for name in names if name in os.environ}
    # an unset name renders as empty text (qrun), but nothing may be read *from* it: a strict undefined
    # for names used with attributes, items or calls, so `cycler.__init__` is refused, not rendered empty
    used = {node.node.name for node in tree.find_all((nodes.Getattr, nodes.Getitem)) if isinstance(node.node, nodes.Name)}
    used |= {node.node.name for node in tree.find_all(nodes.Call) if isinstance(node.node, nodes.Name)}
    for name in sorted((used & names) - set(values)):
        lineno = next(n.lineno for n in tree.find_all(nodes.Name) if n.name == name)
        raise ConfigError(f"{where}:{lineno}: {refused}: {name!r} is undefined")
    try:
        rendered = env.from_string(tree).render({**{name: "" for name in unset}, **values})
    except jinja2.TemplateError as exc:  # SecurityError, UndefinedError, runtime errors
        line = _template_line(exc)
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{where}{line}: {refused}: {message}") from exc
    except Exception as exc:  # an error raised by a filter on an environment value (e.g. int('x'))
        line = _template_line(exc)
        raise ConfigError(f"{where}{line}: {refused}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
    if unset:
        warnings.warn(f"{where}: template variables not set in the environment render as empty text "
                      f"(as qrun renders them): {', '.join(unset)}", stacklevel=3)
    return rendered


def _template_line(exc: BaseException) -> str:
    """``":N"`` for the template line an exception was raised at (from its traceback), else ``""``."""
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return f":{line}" if line is not None else ""


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
