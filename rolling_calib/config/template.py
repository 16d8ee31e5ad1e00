"""A workflow file's Jinja2 template, filled as ``qrun`` fills it, in a sandbox that cannot take the machine.

``qrun`` (pyqlib 0.9.7, ``qlib/cli/run.py``) renders the file it is given as a Jinja2 template: each
name the template uses is filled from the environment variable of that name when it is set, and a name
that is not set is Jinja2's undefined value (it prints as empty text; ``default(...)`` replaces it).
:func:`render_template` gives the same text for such templates, with two kinds of limits:

* **Reach.** Jinja2's :class:`~jinja2.sandbox.ImmutableSandboxedEnvironment` with no globals (no
  ``range``, ``cycler``, ``lipsum`` ...): private and dunder attributes, mutating methods and unsafe
  callables raise; ``{% include %}``, ``{% import %}`` and ``{% extends %}`` are refused before anything
  renders; nothing may be read from a name that is not set.
* **Size and time** (what a comment such as ``{{ 9**(9**9) }}`` or ``{{ 'x'*4000000000 }}`` would cost):
  every operation that can make a value much larger than its operands is checked *before* it runs: ``**``
  and ``*`` on integers (at most :data:`MAX_INT_BITS` bits), ``*`` and ``+`` on texts and lists, ``%`` and
  ``format`` with their widths, ``~``, and the filters and text methods that repeat or pad (``center``,
  ``indent``, ``join``, ``replace``, ``wordwrap``, ``sum``): no text or list beyond :data:`MAX_VALUE_CHARS`.
  Text methods that pad or translate (``ljust``, ``zfill``, ``expandtabs``, ``translate`` ...) are not
  offered. Every loop step, call, filter and printed value counts against a time limit of
  :data:`MAX_RENDER_SECONDS` and a budget of :data:`MAX_WORK_CHARS` characters printed (inside ``{% set %}``
  blocks and macros too); the rendered file may not exceed :data:`MAX_OUTPUT_CHARS`.

Every refusal is one :class:`~rolling_calib.core.validation.ConfigError` line naming the file and the
template line.
"""

from __future__ import annotations

import math
import os
import re
import time
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from rolling_calib.core.validation import ConfigError

__all__ = ["MAX_INT_BITS", "MAX_OUTPUT_CHARS", "MAX_RENDER_SECONDS", "MAX_VALUE_CHARS", "MAX_WORK_CHARS",
           "render_template"]

#: Characters of the rendered file: the bound of a workflow file itself (Qlib's benchmark workflows are 2-5 KiB).
MAX_OUTPUT_CHARS = 1 << 20
#: Characters (or items) of any one text or list a template makes.
MAX_VALUE_CHARS = 1 << 20
#: Characters a template may print while it renders, every ``{% set %}`` block and macro call included.
MAX_WORK_CHARS = 16 << 20
#: Bits of an integer a template may compute (about 1,233 decimal digits).
MAX_INT_BITS = 4096
#: Seconds a template may take to render (an ordinary one takes milliseconds).
MAX_RENDER_SECONDS = 5.0

_JINJA_MARKS = ("{{", "{%", "{#")
#: Template statements that read other files: refused (the sandbox has no loader; qrun renders one file).
_FILE_TAGS = {"Include": "include", "Import": "import", "FromImport": "from ... import", "Extends": "extends"}
#: Names of the filters the bounded sandbox adds for loops and ``~`` (:func:`_bound_tree`).
_LOOP_FILTER, _CONCAT_FILTER = "rc_bounded_loop", "rc_bounded_concat"
#: Text methods a template may call: none of them makes a text much larger than its operands
#: (``replace``, ``join``, ``format`` and ``format_map`` are checked first).
_STR_METHODS = frozenset({
    "capitalize", "casefold", "count", "endswith", "find", "format", "format_map", "index", "isalnum", "isalpha",
    "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric", "isprintable", "isspace", "istitle",
    "isupper", "join", "lower", "lstrip", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex",
    "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "upper",
})
#: ``%`` conversions: their widths and precisions.
_PRINTF = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[a-zA-Z%]")


class TemplateLimitError(Exception):
    """A template went past one of the bounds of :mod:`rolling_calib.config.template`."""


def _size(value: Any) -> int:
    """Characters or items of a text or container, 0 for anything else."""
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)) else 0


def _printf_size(fmt: str, args: Any) -> int:
    """An upper bound of the length of ``fmt % args``: the format, its widths and precisions, the arguments' texts."""
    values = args if isinstance(args, tuple) else tuple(args.values()) if isinstance(args, dict) else (args,)
    numbers = [int(v) for v in values if isinstance(v, int) and not isinstance(v, bool)]
    size = len(fmt)
    for width, precision in _PRINTF.findall(fmt):
        for part in (width, precision):
            if part == "*":
                size += max((abs(n) for n in numbers), default=0)
            elif part:
                size += int(part)
    return size + sum(_size(v) if isinstance(v, str) else MAX_INT_BITS // 3 for v in values)


class _Budget:
    """The limits of one rendering: its deadline and the characters printed so far."""

    def __init__(self) -> None:
        self.deadline = time.monotonic() + MAX_RENDER_SECONDS
        self.printed = 0

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateLimitError(f"it ran for more than {MAX_RENDER_SECONDS:g} s")

    def charge(self, chars: int) -> None:
        self.printed += chars
        if self.printed > MAX_WORK_CHARS:
            raise TemplateLimitError(f"it printed more than {MAX_WORK_CHARS:,} characters")

    @staticmethod
    def value(size: int, what: str) -> None:
        if size > MAX_VALUE_CHARS:
            raise TemplateLimitError(f"{what} would make a text or list of {size:,} characters or items, more than "
                                     f"{MAX_VALUE_CHARS:,}")

    @staticmethod
    def integer(bits: int, what: str) -> None:
        if bits > MAX_INT_BITS:
            raise TemplateLimitError(f"{what} would make an integer of about {bits:,} bits, more than {MAX_INT_BITS:,}")

    def result(self, value: Any, what: str) -> Any:
        """``value`` when it is within the bounds (an operation's result)."""
        if isinstance(value, int) and not isinstance(value, bool):
            self.integer(value.bit_length(), what)
        else:
            self.value(_size(value), what)
        return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_binop(op: str, left: Any, right: Any) -> None:
    """Refuse ``left op right`` before it runs when its result would be beyond the bounds."""
    what = f"{op!r}"
    if op == "**" and _is_int(left) and _is_int(right) and right > 0:
        _Budget.integer(int(right * math.log2(abs(left))) + 1 if abs(left) > 1 else 1, what)
    elif op == "*":
        if _is_int(left) and _is_int(right):
            _Budget.integer(left.bit_length() + right.bit_length(), what)
        elif _is_int(right) and _size(left):
            _Budget.value(_size(left) * right, what)
        elif _is_int(left) and _size(right):
            _Budget.value(_size(right) * left, what)
    elif op == "%" and isinstance(left, str):
        _Budget.value(_printf_size(left, right), what)
    elif op == "+" and _size(left) and _size(right):
        _Budget.value(_size(left) + _size(right), what)


def _format_size(fmt: str, args: tuple, kwargs: dict) -> int:
    """An upper bound of the length of ``fmt.format(*args, **kwargs)``: widths in the format come from its text."""
    import string

    size = len(fmt)
    for _, field, spec, _ in string.Formatter().parse(fmt):
        if field is None:
            continue
        if spec and "{" in spec:
            raise TemplateLimitError("a format width taken from an argument is not offered in a workflow template")
        size += sum(int(n) for n in re.findall(r"\d+", spec or ""))
    values = [*args, *kwargs.values()]
    return size + sum(_size(v) if isinstance(v, str) else MAX_INT_BITS // 3 for v in values)


def _replace_size(text: Any, old: Any, new: Any, count: Any = -1) -> int:
    """An upper bound of the length of ``text.replace(old, new, count)``."""
    if not (isinstance(text, str) and isinstance(old, str) and isinstance(new, str)):
        return 0
    hits = len(text) + 1 if old == "" else text.count(old)
    if _is_int(count) and count >= 0:
        hits = min(hits, count)
    return len(text) + hits * max(0, len(new) - len(old))


def _join_size(sep: Any, items: list) -> int:
    return _size(sep) * max(0, len(items) - 1) + sum(_size(str(item)) for item in items)


def _bounded_filters(filters: dict[str, Any], budget: _Budget) -> dict[str, Any]:
    """Jinja2's filters, each counting against ``budget`` and checked before it runs where it can pad or repeat."""
    import functools

    def checks(name: str, args: tuple, kwargs: dict) -> tuple:
        """The arguments (a ``join``'s iterable made a list), refused first where the result would be too big."""
        value, rest = (args[0], args[1:]) if args else (None, ())
        if name in ("batch", "slice"):   # lists of that many items or that many lists
            _Budget.value(int(rest[0] if rest else kwargs.get("linecount", kwargs.get("slices", 0))), f"filter {name}")
        elif name == "join" and value is not None:
            value = list(value)
            _Budget.value(_join_size(rest[0] if rest else kwargs.get("d", ""), value), f"filter {name}")
            args = (value, *rest)
        elif name == "replace":
            _Budget.value(_replace_size(value, *rest, **{k: v for k, v in kwargs.items() if k == "count"}),
                          f"filter {name}")
        elif name == "center":
            _Budget.value(max(_size(value), int(rest[0] if rest else kwargs.get("width", 80))), f"filter {name}")
        elif name == "indent":
            width = rest[0] if rest else kwargs.get("width", 4)
            pad = _size(width) if isinstance(width, str) else int(width)
            _Budget.value(_size(str(value)) + (str(value).count("\n") + 1) * pad, f"filter {name}")
        elif name == "wordwrap":
            width = rest[0] if rest else kwargs.get("width", 79)
            wrap = rest[2] if len(rest) > 2 else kwargs.get("wrapstring") or "\n"
            _Budget.value(_size(value) + (_size(value) // max(int(width), 1) + 1) * _size(wrap), f"filter {name}")
        elif name == "format" and isinstance(value, str):
            _Budget.value(_printf_size(value, tuple(rest) or kwargs), f"filter {name}")
        elif name == "sum":
            start = rest[1] if len(rest) > 1 else kwargs.get("start", 0)
            if not isinstance(start, (int, float)):
                raise TemplateLimitError("filter sum: only numbers may be summed in a workflow template")
        return args

    def bounded(name: str, func: Any) -> Any:
        from jinja2.utils import _PassArg

        passes = _PassArg.from_obj(func) is not None   # context, eval context or environment comes first

        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            budget.tick()
            head, args = (args[:1], args[1:]) if passes else ((), args)
            args = checks(name, args, kwargs)
            return budget.result(func(*head, *args, **kwargs), f"filter {name}")

        return run

    return {name: bounded(name, func) for name, func in filters.items()}


def _sandbox(budget: _Budget):
    """Jinja2's immutable sandbox with no globals and every bound of this module."""
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "%", "+"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            budget.tick()
            _check_binop(operator, left, right)
            return budget.result(super().call_binop(context, operator, left, right), f"{operator!r}")

        def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
            if isinstance(obj, str) and attr not in _STR_METHODS:
                return False
            return super().is_safe_attribute(obj, attr, value)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - Jinja2's
            budget.tick()
            name = getattr(__obj, "__name__", "")
            target = getattr(__obj, "__self__", None)
            if isinstance(target, str) and name == "replace":
                _Budget.value(_replace_size(target, *args, **kwargs), "replace")
            elif isinstance(target, str) and name == "join" and args:
                items = list(args[0])
                _Budget.value(_join_size(target, items), "join")
                args = (items, *args[1:])
            return budget.result(super().call(__context, __obj, *args, **kwargs), name or "a call")

        def format_string(self, s: str, args: tuple, kwargs: dict, format_func: Any = None) -> str:
            budget.tick()
            _Budget.value(_format_size(s, args, kwargs), "format")
            return super().format_string(s, args, kwargs, format_func)

    def printed(value: Any) -> Any:
        budget.tick()
        budget.charge(len(str(value)))
        return value

    def loop(items: Iterable[Any], chars: int) -> Iterator[Any]:
        for item in items:
            budget.tick()
            budget.charge(chars)
            yield item

    def concat(items: list[Any]) -> str:
        texts = [str(item) for item in items]
        _Budget.value(sum(map(len, texts)), "'~'")
        return "".join(texts)

    # strict: an unsafe or missing attribute raises instead of rendering empty (unset names are passed as
    # lenient undefined values, as qrun has them); not optimized: nothing is computed while compiling
    env = BoundedSandbox(autoescape=False, undefined=StrictUndefined, finalize=printed, optimized=False)
    env.globals.clear()
    env.filters = _bounded_filters(dict(env.filters), budget)
    env.filters[_LOOP_FILTER], env.filters[_CONCAT_FILTER] = loop, concat
    return env


def _bound_tree(tree: Any) -> Any:
    """The parsed template with each loop step and each ``~`` passing through the bounded sandbox.

    ``{% for x in ITEMS %}BODY`` iterates ``ITEMS|rc_bounded_loop(n)`` (``n``: the characters of BODY's
    literal text, printed again at each step); ``a ~ b`` becomes ``[a, b]|rc_bounded_concat``.
    """
    from jinja2 import nodes
    from jinja2.visitor import NodeTransformer

    class Bound(NodeTransformer):
        def visit_For(self, node: nodes.For) -> nodes.For:
            self.generic_visit(node)
            body = sum(len(data.data) for part in node.body for data in part.find_all(nodes.TemplateData))
            node.iter = nodes.Filter(node.iter, _LOOP_FILTER, [nodes.Const(body)], [], None, None,
                                     lineno=node.lineno)
            return node

        def visit_Concat(self, node: nodes.Concat) -> nodes.Filter:
            self.generic_visit(node)
            return nodes.Filter(nodes.List(list(node.nodes), lineno=node.lineno), _CONCAT_FILTER, [], [], None, None,
                                lineno=node.lineno)

    return Bound().visit(tree)


def render_template(text: str, where: str | os.PathLike) -> str:
    """Fill ``text`` as ``qrun`` does before parsing: a Jinja2 template over the environment variables.

    The names the template uses are filled from the environment; a name that is not set is Jinja2's
    undefined value, as in ``qrun`` (it prints as empty text, ``default`` replaces it; a warning lists such
    names). Rendered in the bounded sandbox of this module (its docstring lists the limits); every refusal
    is a one-line :class:`ConfigError` naming ``where`` and the template line.

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
    >>> render_template("a: 1\\n# {{ 9**(9**9) }}\\n", "w.yaml")
    Traceback (most recent call last):
    ...
    rolling_calib.core.validation.ConfigError: w.yaml:2: template refused: '**' would make an integer of about 1,228,093,895 bits, more than 4,096 (a workflow template is bounded: integers of 4096 bits, texts of 1,048,576 characters, 5 s)
    """
    if not any(mark in text for mark in _JINJA_MARKS):
        return text
    import jinja2
    from jinja2 import Undefined, meta, nodes

    budget = _Budget()
    env = _sandbox(budget)
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
    values: dict[str, Any] = {name: os.environ[name] for name in names if name in os.environ}
    # an unset name is qrun's undefined value, but nothing may be read *from* it: names used with
    # attributes, items or calls are refused, so `cycler.__init__` is refused, not rendered empty
    used = {node.node.name for node in tree.find_all((nodes.Getattr, nodes.Getitem)) if isinstance(node.node, nodes.Name)}
    used |= {node.node.name for node in tree.find_all(nodes.Call) if isinstance(node.node, nodes.Name)}
    for name in sorted((used & names) - set(values)):
        lineno = next(n.lineno for n in tree.find_all(nodes.Name) if n.name == name)
        raise ConfigError(f"{where}:{lineno}: {refused}: {name!r} is undefined")
    bounds = (f"(a workflow template is bounded: integers of {MAX_INT_BITS} bits, texts of {MAX_VALUE_CHARS:,} "
              f"characters, {MAX_RENDER_SECONDS:g} s)")
    try:
        template = env.from_string(_bound_tree(tree))
        pieces, size = [], 0
        for piece in template.generate({**{name: Undefined(name=name) for name in unset}, **values}):
            size += len(piece)
            if size > MAX_OUTPUT_CHARS:
                raise TemplateLimitError(f"the rendered file would be longer than {MAX_OUTPUT_CHARS:,} characters")
            budget.tick()
            pieces.append(piece)
        rendered = "".join(pieces)
    except TemplateLimitError as exc:
        raise ConfigError(f"{where}{_template_line(exc)}: template refused: {exc} {bounds}") from None
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
