"""Workflow YAML read exactly as Qlib's ``qrun`` reads it (pyqlib 0.9.7, ``qlib/cli/run.py``).

The only YAML reader of rolling-calib (files and ``--set`` values alike):

1. **Template.** The file named on the command line is a Jinja2 template first: ``{{ NAME }}`` is
   filled from the environment variable ``NAME``, and a name that is not set renders as empty
   text (as in ``qrun``; a warning lists such names), in a sandbox bounded in reach, size and time
   (:mod:`rolling_calib.config.template`). Files it includes are not rendered, as ``qrun`` renders
   only the file it is given. A file without Jinja2 markup is read as it is.
2. **YAML 1.2.** ruamel.yaml's safe loader, pure Python: ``5e-6`` and ``1e-3`` are floats,
   ``yes``/``on`` are strings, ``010`` is 10; anchors, aliases and ``<<`` merge keys work; a key
   written twice in one mapping is an error (naming both lines).
3. **BASE_CONFIG_PATH** is looked up as written (a relative path against the current directory)
   first, then next to the including file (:func:`find_base`). The merge is Qlib's own
   ``update_config`` (:func:`rolling_calib.qlib_adapter.task_spec.merge_base_config`).

What rolling-calib adds: a base file may name its own base (``qrun`` reads one level), and
every error names the file and line. :func:`load_yaml_aliases` also returns where each anchored
value is used again (:func:`alias_paths`), so a ``--set`` of an anchor's value reaches every alias
of it, as an edit of the anchor in the file would (``--set benchmark=AAPL`` reaches
``port_analysis_config.backtest.benchmark: *benchmark``).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from rolling_calib.config.template import render_template
from rolling_calib.core.validation import ConfigError

__all__ = ["MAX_DEPTH", "MAX_DOCUMENT_BYTES", "MAX_NODES", "Aliases", "alias_paths", "check_expansion", "find_base",
           "load_yaml", "load_yaml_aliases", "parse_scalar", "render_template"]

#: Where a document's values are used again: the path of a value's first occurrence (its anchor) -> the paths of
#: its aliases (``*name``, and the keys a ``<<: *name`` merge brings in). A path is a tuple of mapping keys (str)
#: and sequence indices (int).
Aliases = dict[tuple, list[tuple]]

#: Bytes of one workflow file (Qlib's benchmark workflows are 2-5 KiB; a megabyte is a mistake or an attack).
MAX_DOCUMENT_BYTES = 1 << 20   # the rendered text's bound too (template.MAX_OUTPUT_CHARS)
#: Values of one document with every alias expanded (an alias bomb expands 10 aliases x 9 levels to 10**9).
MAX_NODES = 100_000
#: Nesting levels of one document (Qlib's deepest workflow nests 7).
MAX_DEPTH = 64


def _loader():
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True)  # what qrun constructs


def load_yaml(path: str | os.PathLike, *, template: bool = False) -> dict:
    """Read a YAML mapping as ``qrun`` reads it; errors name the file and line (:func:`load_yaml_aliases`'s mapping).

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
    return load_yaml_aliases(path, template=template)[0]


def load_yaml_aliases(path: str | os.PathLike, *, template: bool = False) -> tuple[dict, Aliases]:
    """:func:`load_yaml` and the document's :data:`Aliases` (:func:`alias_paths`).

    Examples
    --------
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "w.yaml"
    >>> _ = path.write_text("benchmark: &b SH000300\\nport: {backtest: {benchmark: *b}}\\n")
    >>> load_yaml_aliases(path)[1]
    {('benchmark',): [('port', 'backtest', 'benchmark')]}
    """
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    size = path.stat().st_size
    if size > MAX_DOCUMENT_BYTES:
        raise ConfigError(f"{path}: expected a workflow file of at most {MAX_DOCUMENT_BYTES} bytes, found {size} bytes")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: expected UTF-8 text, found byte 0x{exc.object[exc.start]:02x} at offset {exc.start}") from exc
    if "\0" in text:
        raise ConfigError(f"{path}:{text[:text.index(chr(0))].count(chr(10)) + 1}: expected text, found a NUL byte")
    if template:
        text = render_template(text, path)
    try:
        data = _loader().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = exc.problem or exc.context or str(exc)
        if "duplicate key" in problem:
            first = _first_occurrence(text, exc)
            first = f" (first at line {first})" if first is not None else ""
            raise ConfigError(f"{where}: duplicate key: {problem.split('duplicate key', 1)[1].strip()}{first}; "
                              "a key may appear once per mapping") from exc
        raise ConfigError(f"{where}: invalid YAML: {' '.join(str(problem).split())}") from exc
    except YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {' '.join(str(exc).split())}") from exc
    except RecursionError as exc:
        raise ConfigError(f"{path}: invalid YAML: nested more than Python's reader allows (at most {MAX_DEPTH} levels "
                          "are accepted)") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, found {type(data).__name__}")
    check_expansion(data, str(path))
    return data, (alias_paths(text) if "*" in text else {})


def alias_paths(text: str) -> Aliases:
    """Where the values of a YAML document (already read without error) are used again through aliases.

    The document's nodes are walked in order; a node met a second time (an alias refers to the
    very node its anchor names) is recorded under the path of its first occurrence. A merge key
    (``<<: *name``) brings the merged mapping's keys to the merging mapping's path, except the keys
    the merging mapping writes itself (those replace the merged ones, as YAML reads them).

    >>> alias_paths("m: &m us25\\nh: &h {instruments: *m}\\ntask: {handler: *h, other: {<<: *h, x: 1}}\\n")
    {('m',): [('h', 'instruments')], ('h',): [('task', 'handler')], ('h', 'instruments'): [('task', 'other', 'instruments')]}

    Paths chain: ``m``'s value is ``h.instruments``, which ``task.other`` merges in.
    """
    from ruamel.yaml.nodes import MappingNode, SequenceNode

    from ruamel.yaml import YAML

    merge = "tag:yaml.org,2002:merge"
    first: dict[int, tuple] = {}
    out: Aliases = {}

    def merged(node: Any) -> list[tuple[tuple, str, Any]]:
        """``(path of the merged mapping, key, value node)`` a merge value brings in (earlier sources win)."""
        sources = node.value if isinstance(node, SequenceNode) else [node]
        items: list[tuple[tuple, str, Any]] = []
        for source in sources:
            if isinstance(source, MappingNode):
                for k, v in source.value:
                    items += merged(v) if k.tag == merge else [(first.get(id(source), ()), str(k.value), v)]
        return items

    def visit(node: Any, path: tuple) -> None:
        ident = id(node)
        if ident in first:
            out.setdefault(first[ident], []).append(path)
            return
        first[ident] = path
        if isinstance(node, MappingNode):
            own = [(k, v) for k, v in node.value if k.tag != merge]
            names = {str(k.value) for k, _ in own}
            for k, v in own:
                visit(v, path + (str(k.value),))
            for k, v in node.value:
                if k.tag != merge:
                    continue
                for source, name, value in merged(v):
                    if name in names:
                        continue
                    names.add(name)
                    if id(value) in first:   # the merged mapping's key, used again here
                        out.setdefault(source + (name,), []).append(path + (name,))
                    else:
                        visit(value, path + (name,))
        elif isinstance(node, SequenceNode):
            for i, item in enumerate(node.value):
                visit(item, path + (i,))

    root = YAML(typ="safe", pure=True).compose(text)
    if root is not None:
        visit(root, ())
    return out


def check_expansion(data: Any, where: str) -> int:
    """The number of values in ``data`` with every YAML alias expanded; refused beyond :data:`MAX_NODES` or :data:`MAX_DEPTH`.

    Aliases share one object, so the count is memoised per object: linear in the document, however
    many times an alias repeats (a "billion laughs" document is refused in milliseconds).

    Examples
    --------
    >>> check_expansion({"a": [1, 2], "b": {"c": 3}}, "w.yaml")
    6
    >>> level = ["x"] * 10
    >>> for _ in range(9):
    ...     level = [level] * 10
    >>> check_expansion({"task": {"model": {"kwargs": {"bomb": level}}}}, "w.yaml")
    Traceback (most recent call last):
    ...
    rolling_calib.core.validation.ConfigError: w.yaml: task.model.kwargs.bomb.0.0.0.0.0: expected at most 100000 values with every alias expanded, found 111111 (an alias expanding into itself many times)
    """
    memo: dict[int, int] = {}

    def walk(node: Any, key: str, depth: int) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        if depth > MAX_DEPTH:
            raise ConfigError(f"{where}: {key}: expected at most {MAX_DEPTH} nesting levels, found more")
        ident = id(node)
        if ident in memo:
            if memo[ident] < 0:
                raise ConfigError(f"{where}: {key}: an alias refers to a value that contains it (a cycle)")
            return memo[ident]
        memo[ident] = -1
        items = node.items() if isinstance(node, dict) else enumerate(node)
        total = 1
        for k, child in items:
            total += walk(child, f"{key}.{k}" if key else str(k), depth + 1)
        memo[ident] = total
        if total > MAX_NODES and depth > 0 and _largest_child(node, memo) <= MAX_NODES:
            raise ConfigError(f"{where}: {key}: expected at most {MAX_NODES} values with every alias expanded, found "
                              f"{total} (an alias expanding into itself many times)")
        return total

    total = walk(data, "", 0)
    if total > MAX_NODES:
        raise ConfigError(f"{where}: expected at most {MAX_NODES} values with every alias expanded, found {total}")
    return total


def _largest_child(node: Any, memo: dict[int, int]) -> int:
    children = node.values() if isinstance(node, dict) else node
    return max((memo.get(id(c), 1) for c in children), default=0)


def _first_occurrence(text: str, exc: Any) -> int | None:
    """The line (1-based) where the duplicated key of a ruamel duplicate-key error first appears in its mapping."""
    from ruamel.yaml.nodes import MappingNode

    mapping_mark, duplicate_mark = exc.context_mark, exc.problem_mark
    if mapping_mark is None or duplicate_mark is None:
        return None
    try:
        from ruamel.yaml import YAML

        root = YAML(typ="safe", pure=True).compose(text)
    except Exception:  # noqa: BLE001 - the composer failed too: fall back to the mapping's line
        return mapping_mark.line + 1
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, MappingNode):
            if node.start_mark.line == mapping_mark.line and node.start_mark.column == mapping_mark.column:
                keys = [k for k, _ in node.value]
                dup = next((k for k in keys if k.start_mark.line == duplicate_mark.line
                            and k.start_mark.column == duplicate_mark.column), None)
                if dup is not None:
                    first = next(k for k in keys if getattr(k, "value", None) == dup.value)
                    return first.start_mark.line + 1
            stack.extend(v for pair in node.value for v in pair)
        elif isinstance(node.value, list):
            stack.extend(node.value)
    return mapping_mark.line + 1


def parse_scalar(text: str) -> Any:
    """One value read as ``qrun``'s YAML reads it (a ``--set`` value).

    Examples
    --------
    >>> [parse_scalar(t) for t in ["32", "5e-6", "0.5", "true", "yes", "null", "adam", "010"]]
    [32, 5e-06, 0.5, True, 'yes', None, 'adam', 10]
    """
    from ruamel.yaml.error import YAMLError

    try:
        value = _loader().load(text)
    except YAMLError as exc:
        raise ValueError(f"not a YAML value: {text!r} ({getattr(exc, 'problem', None) or exc})") from exc
    except RecursionError as exc:
        raise ValueError(f"not a YAML value: {text[:40]!r}...: nested too deep") from exc
    check_expansion({"value": value}, "--set")  # an alias bomb in one value, too
    return value


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
