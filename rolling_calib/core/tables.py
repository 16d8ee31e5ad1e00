"""One table formatter for every table rolling-calib prints or writes (terminal text and Markdown).

Tables are rendered by :mod:`tabulate`; this module only fixes the conventions, so every command
aligns the same way: text columns left, numbers right, any name as wide as it needs, missing
values as ``n/a``, numbers with a given number of significant digits (:func:`sig`).

Example
-------
>>> print(format_table([["a long pipeline name", 309.88460694], ["wd1e-2", 0.00021]],
...                    ["pipeline", "QL (bp²)"], formats=[str, sig]))
pipeline                QL (bp²)
--------------------  ----------
a long pipeline name       309.9
wd1e-2                   0.00021
>>> print(format_table([["x", None]], ["name", "value"], style="markdown"))
| name   |   value |
|:-------|--------:|
| x      |     n/a |
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from tabulate import tabulate

__all__ = ["MISSING", "STYLES", "format_table", "sig"]

#: How a missing or non-finite value is shown.
MISSING = "n/a"
#: ``style`` -> tabulate's format.
STYLES = {"text": "simple", "markdown": "pipe"}


def sig(value: Any, digits: int = 4) -> str:
    """``value`` with ``digits`` significant digits (``n/a`` when missing or not finite).

    >>> sig(309.88460694), sig(0.000212345), sig(-0.0097108), sig(12345678.0), sig(None)
    ('309.9', '0.0002123', '-0.009711', '1.235e+07', 'n/a')
    """
    if value is None:
        return MISSING
    try:
        x = float(value)
    except (TypeError, ValueError):
        return str(value)
    if not math.isfinite(x):
        return MISSING
    return f"{x:.{digits}g}"


def _cell(value: Any, fmt: Callable[[Any], str] | None) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return MISSING
    return fmt(value) if fmt is not None else str(value)


def format_table(rows: Sequence[Sequence[Any]], headers: Sequence[str], *, formats: Sequence[Callable | None] | None = None,
                 style: str = "text", align: Sequence[str] | None = None) -> str:
    """Render ``rows`` under ``headers`` as a plain-text or Markdown table.

    Parameters
    ----------
    rows : sequence of sequences
        One sequence of cell values per row.
    headers : sequence of str
    formats : sequence of callables or None, optional
        Per column, how to turn a value into text (None: ``str``); missing values show as ``n/a``.
    style : {"text", "markdown"}
    align : sequence of {"left", "right", "center"}, optional
        Per column; default: right for columns whose every shown value parses as a number, else left.

    Returns
    -------
    str
    """
    if style not in STYLES:
        raise ValueError(f"style: expected one of {', '.join(STYLES)}, found {style!r}")
    n = len(headers)
    fmts = list(formats) if formats is not None else [None] * n
    if len(fmts) != n or any(len(r) != n for r in rows):
        raise ValueError(f"rows, formats: expected {n} cells per row (one per header)")
    cells = [[_cell(v, f) for v, f in zip(row, fmts)] for row in rows]
    if align is None:
        align = ["right" if cells and all(_numeric(r[j]) for r in cells) else "left" for j in range(n)]
    return tabulate(cells, headers=list(headers), tablefmt=STYLES[style], colalign=list(align), disable_numparse=True)


def _numeric(text: str) -> bool:
    if text == MISSING:
        return True
    head = text.split(" ", 1)[0].rstrip("%")
    try:
        float(head)
    except ValueError:
        return False
    return True
