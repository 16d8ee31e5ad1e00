r"""Symbols are names, never paths: the one mapping from a symbol to its feature folder.

A store keeps each symbol's bars in ``features/<folder>/<field>.<freq>.bin``. Qlib's data
provider finds that folder from the instrument name alone: ``qlib.utils.code_to_fname(name)``
(which prefixes the Windows device names ``CON, PRN, AUX, NUL, COM0..COM9, LPT0..LPT9`` with
``_qlib_``), lower-cased (``FileFeatureStorage``). :func:`symbol_to_fname` is that mapping, so
a store written here is one Qlib reads; nothing else about a symbol ever reaches a path.

=================  ==================  ==================================================
symbol             folder              note
=================  ==================  ==================================================
``AAPL``           ``aapl``
``BRK.B``          ``brk.b``           a class suffix with a dot is kept (Qlib reads it)
``BF-B``           ``bf-b``
``^GSPC``          ``^gspc``           index symbols
``CON``            ``_qlib_con``       a Windows device name, Qlib's own prefix
``BRK/B``          refused             '/' would be a folder: write ``BRK.B``
``../../x``        refused             '/' and a leading '.'
=================  ==================  ==================================================

Rules for a symbol (:func:`symbol_problem` says which one is broken): 1 to
:data:`MAX_LENGTH` characters, each an ASCII letter, a digit or one of ``. - _ ^ = & + @ ~``
(no path separator, space, NUL or control character can appear); not starting or ending
with ``.`` (``.``, ``..`` and hidden names are impossible, and Windows drops trailing dots, so
``BRK.`` and ``BRK`` would share a folder); not starting with Qlib's reserved prefix
``_qlib_`` (``_QLIB_CON`` and ``CON`` would share a folder); not a Windows device name with a
suffix (``CON.B``: Windows reserves it and Qlib does not rename it); and not a text that
pandas -- which reads Qlib's instrument files -- takes for a missing value (``NA``, ``NULL``,
``N/A`` ...). The ingest upper-cases symbols, so the mapping is reversible on the symbols it
writes: :func:`fname_to_symbol` gives the symbol back, and :func:`check_distinct` refuses two
symbols that would share a folder. The instrument files keep the symbol as written.

Example
-------
>>> [symbol_to_fname(s) for s in ("AAPL", "BRK.B", "CON", "lpt1")]
['aapl', 'brk.b', '_qlib_con', '_qlib_lpt1']
>>> fname_to_symbol("_qlib_con"), fname_to_symbol("brk.b")
('CON', 'BRK.B')
>>> symbol_problem("BRK/B")
"character '/' (U+002F) at position 4 is not allowed (a path separator); write the class with a dot: BRK.B"
>>> symbol_problem("..")
"a symbol cannot start with '.' (it would name the folder itself, its parent or a hidden folder)"
"""

from __future__ import annotations

import functools
import io
import re
import string
from collections.abc import Iterable

__all__ = [
    "MAX_LENGTH",
    "ALLOWED_PUNCTUATION",
    "QLIB_PREFIX",
    "WINDOWS_DEVICE_NAMES",
    "symbol_problem",
    "check_symbol",
    "symbol_to_fname",
    "fname_to_symbol",
    "check_distinct",
    "safe_component",
]

#: Longest symbol accepted (a file name component may hold 255 bytes; tickers hold a dozen).
MAX_LENGTH = 64
#: Punctuation a symbol may hold besides ASCII letters and digits.
ALLOWED_PUNCTUATION = ".-_^=&+@~"
_ALLOWED = frozenset(string.ascii_letters + string.digits + ALLOWED_PUNCTUATION)
#: Qlib's prefix of Windows device names (``qlib.utils.code_to_fname``).
QLIB_PREFIX = "_qlib_"
#: The names ``qlib.utils.code_to_fname`` prefixes (compared upper-cased, as Qlib does).
WINDOWS_DEVICE_NAMES: frozenset[str] = frozenset(
    ["CON", "PRN", "AUX", "NUL"] + [f"COM{i}" for i in range(10)] + [f"LPT{i}" for i in range(10)]
)
_SEPARATORS = {"/": "a path separator", "\\": "a path separator", "\x00": "NUL", ":": "a drive or stream separator"}


_CLASS_SHARE = re.compile(r"^[A-Za-z0-9]{1,10}/[A-Za-z]{1,2}$")  # BRK/B: a share class written with '/'


def _char_problem(symbol: str) -> str | None:
    for i, ch in enumerate(symbol):
        if ch not in _ALLOWED:
            what = _SEPARATORS.get(ch) or ("a space" if ch == " " else None if ch.isprintable() else
                                           "a control character")
            text = f"character {ch!r} (U+{ord(ch):04X}) at position {i + 1} is not allowed"
            if what:
                text += f" ({what})"
            if _CLASS_SHARE.match(symbol):
                text += f"; write the class with a dot: {symbol.replace('/', '.')}"
            return text
    return None


def _pandas_reads_as_missing(symbol: str) -> bool:
    """Whether Qlib's instrument reader (``pandas.read_csv``, tab-separated, symbol as str) loses ``symbol``."""
    import pandas as pd

    row = pd.read_csv(io.StringIO(f"{symbol}\t2018-01-02\t2018-01-03\n"), sep="\t", header=None, dtype={0: str})
    return bool(pd.isna(row.iloc[0, 0])) or row.iloc[0, 0] != symbol


@functools.lru_cache(maxsize=4096)
def _problem(symbol: str) -> str | None:
    return _symbol_problem(symbol)


def symbol_problem(symbol: object) -> str | None:
    """Why ``symbol`` cannot name a feature folder (the rules of the module docstring); ``None`` when it can.

    >>> symbol_problem("AAPL") is None, symbol_problem("")
    (True, 'a symbol cannot be empty')
    """
    if not isinstance(symbol, str):
        return f"expected text, found {type(symbol).__name__}"
    return _problem(symbol)


def _symbol_problem(symbol: str) -> str | None:
    if not symbol:
        return "a symbol cannot be empty"
    if len(symbol) > MAX_LENGTH:
        return f"{len(symbol)} characters, more than the {MAX_LENGTH} allowed"
    bad = _char_problem(symbol)
    if bad:
        return bad
    if symbol.startswith("."):
        return "a symbol cannot start with '.' (it would name the folder itself, its parent or a hidden folder)"
    if symbol.endswith("."):
        return f"a symbol cannot end with '.' (Windows drops it: {symbol} and {symbol.rstrip('.')} would share a folder)"
    if symbol.lower().startswith(QLIB_PREFIX):
        return (f"a symbol cannot start with {QLIB_PREFIX!r}, Qlib's prefix of Windows device names "
                f"(it would share a folder with {symbol[len(QLIB_PREFIX):]})")
    head = symbol.split(".", 1)[0].upper()
    if head in WINDOWS_DEVICE_NAMES and head != symbol.upper():
        return (f"{head} is a Windows device name: Windows refuses a folder {symbol.lower()} and Qlib reads it "
                "under that name")
    if _pandas_reads_as_missing(symbol):
        return "pandas, which reads Qlib's instrument files, reads this text as a missing value"
    return None


def check_symbol(symbol: object, *, where: str, shown: str | None = None) -> str:
    """``symbol`` when it can name a feature folder; otherwise :class:`ValueError` naming ``where``.

    ``where`` says where the symbol came from (``"data.csv: line 7: field 'symbol'"``,
    ``"--symbol"``, ``"data.csv: the file name"``); ``shown``: the text as the user wrote it
    (before upper-casing), quoted in the message.

    >>> check_symbol("../x", where="--symbol")
    Traceback (most recent call last):
    ...
    ValueError: --symbol: expected a symbol (letters, digits and . - _ ^ = & + @ ~; a name, never a path), found '../x': character '/' (U+002F) at position 3 is not allowed (a path separator)
    """
    problem = symbol_problem(symbol)
    if problem is not None:
        raise ValueError(f"{where}: expected a symbol (letters, digits and {' '.join(ALLOWED_PUNCTUATION)}; a name, "
                         f"never a path), found {symbol if shown is None else shown!r}: {problem}")
    return symbol  # type: ignore[return-value]


def symbol_to_fname(symbol: str) -> str:
    """The feature folder of ``symbol``: ``qlib.utils.code_to_fname(symbol).lower()``, for a checked symbol.

    Raises :class:`ValueError` for a symbol that cannot name a folder (:func:`symbol_problem`).
    """
    check_symbol(symbol, where="symbol")
    fname = QLIB_PREFIX + symbol if symbol.upper() in WINDOWS_DEVICE_NAMES else symbol
    return fname.lower()


def fname_to_symbol(fname: str) -> str:
    """The symbol of a feature folder written here (upper-cased; Qlib's prefix removed).

    Unlike ``qlib.utils.fname_to_code`` (``str.lstrip``, which also eats a symbol's own leading
    ``_``, ``q``, ``l``, ``i`` or ``b``), only the exact prefix of a device name is removed.
    """
    rest = fname[len(QLIB_PREFIX):] if fname.startswith(QLIB_PREFIX) else None
    if rest is not None and rest.upper() in WINDOWS_DEVICE_NAMES:
        return rest.upper()
    return fname.upper()


def check_distinct(symbols: Iterable[str], *, where: str) -> None:
    """Refuse symbols that would share a feature folder (they differ only in case).

    >>> check_distinct(["AAPL", "aapl"], where="--symbols")
    Traceback (most recent call last):
    ...
    ValueError: --symbols: expected symbols with distinct feature folders, found 'AAPL' and 'aapl' (both features/aapl)
    """
    seen: dict[str, str] = {}
    for sym in symbols:
        fname = symbol_to_fname(sym)
        if fname in seen and seen[fname] != sym:
            raise ValueError(f"{where}: expected symbols with distinct feature folders, found {seen[fname]!r} and "
                             f"{sym!r} (both features/{fname})")
        seen.setdefault(fname, sym)


_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,63}$")


def safe_component(name: str, *, what: str) -> str:
    """``name`` when it is a plain file-name stem (a universe name): letters, digits, ``. _ -``, not leading ``.``.

    >>> safe_component("us25", what="--universe")
    'us25'
    """
    if not isinstance(name, str) or not _COMPONENT.match(name) or name.endswith("."):
        raise ValueError(f"{what}: expected a name of 1 to 64 letters, digits, '.', '_' or '-' starting with a letter "
                         f"or digit (a file name, never a path), found {name!r}")
    return name
