"""MkDocs hooks of the documentation site (``hooks:`` in ``mkdocs.yml``).

* **The command-line reference** (``cli.md``) is generated on every build from the parsers of
  ``rolling_calib.cli`` (:func:`rolling_calib.cli.reference.reference_markdown`), so it is always
  what ``--help`` says. No file is written into ``docs/``: the page exists only in the build.
* **Pages kept beside their files** (:data:`MIRRORED`, e.g. ``workflows/README.md``, which sits
  with the experiment files it describes) are added to the site under the same path they have in
  the repository.
* **Links keep working in both places.** Pages are written to read well on a repository browser,
  so a page under ``docs/`` links a mirrored page as ``../workflows/README.md`` and a mirrored page
  links ``../docs/method.md``. :func:`site_link` rewrites such links to the page's place in the
  site. A link to another file of the repository (``../bench/regime_map.py``), which the site does
  not hold, becomes its path in backticks (:func:`rewrite_links`); a link to a file that exists
  nowhere is left alone, and ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File, Files

#: Repository root: ``mkdocs.yml`` sits there, this file in ``docs/hooks/``.
ROOT = Path(__file__).resolve().parents[2]
#: Markdown files outside ``docs/`` that the site shows, at their repository path.
MIRRORED: tuple[str, ...] = (
    "workflows/README.md",
    "workflows/qlib_zoo/README.md",
    "workflows/paper/README.md",
    "workflows/source/README.md",
)
#: The generated command-line reference's path in the site.
CLI_PAGE = "cli.md"

_LINK = re.compile(r"(!?)\[([^\]\n]*)\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)", re.MULTILINE)


def cli_reference() -> str:
    """The command-line reference page, from the parsers of this checkout."""
    if str(ROOT) not in sys.path:   # the checkout's code, not another install's
        sys.path.insert(0, str(ROOT))
    from rolling_calib.cli import build_parser
    from rolling_calib.cli.reference import reference_markdown
    from rolling_calib.config.workflows import workflows_dir

    intro = ("Generated from the command's own parsers when this site is built, so it says what `--help` says. "
             "Every command takes `--help`, `--json` (the result as JSON on stdout, nothing else there) and "
             "`--no-progress`; an option several commands take has the same name, default and help in each "
             "(declared once in `rolling_calib/cli/options.py`).\n\n")
    text = reference_markdown(build_parser(), title="Command line reference",
                              replace={str(workflows_dir()): "workflows"})
    head, rest = text.split("\n", 1)
    return f"{head}\n\n{intro}{rest}"


def repo_path(src_uri: str) -> str | None:
    """A site page's path in the repository (``None`` for a generated page).

    >>> repo_path("method.md"), repo_path("workflows/README.md"), repo_path("cli.md")
    ('docs/method.md', 'workflows/README.md', None)
    """
    if src_uri == CLI_PAGE:
        return None
    return src_uri if src_uri in MIRRORED else f"docs/{src_uri}"


def site_link(target: str, page_src: str) -> str:
    """``target`` as written in the repository page of ``page_src``, as a link that works in the site.

    >>> site_link("../workflows/README.md#qlibs-model-zoo", "qlib.md")
    'workflows/README.md#qlibs-model-zoo'
    >>> site_link("../../docs/method.md#4-known-limitations", "workflows/paper/README.md")
    '../../method.md#4-known-limitations'
    >>> site_link("method.md", "evidence.md"), site_link("https://example.org", "index.md")
    ('method.md', 'https://example.org')
    >>> site_link("../bench/regime_map.py", "evidence.md")    # not a page: left for --strict to refuse
    '../bench/regime_map.py'
    """
    where = repo_path(page_src)
    if where is None or re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):
        return target
    path, sep, anchor = target.partition("#")
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(where), path))
    if resolved.startswith("docs/"):
        site = resolved[len("docs/"):]
    elif resolved in MIRRORED:
        site = resolved
    else:
        return target
    return posixpath.relpath(site, posixpath.dirname(page_src) or ".") + sep + anchor


def repo_file(target: str, page_src: str) -> str | None:
    """The repository path ``target`` names from ``page_src`` when it is an existing file the site does not hold.

    >>> repo_file("../bench/regime_map.py", "evidence.md"), repo_file("method.md", "evidence.md")
    ('bench/regime_map.py', None)
    >>> repo_file("../bench/no_such_script.py", "evidence.md") is None      # a broken link stays one
    True
    """
    where = repo_path(page_src)
    if where is None or re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):
        return None
    path = posixpath.normpath(posixpath.join(posixpath.dirname(where), target.partition("#")[0]))
    if path.startswith(("docs/", "../")) or path in MIRRORED or path == "." or not (ROOT / path).is_file():
        return None
    return path


def _link(match: re.Match, page_src: str) -> str:
    image, text, target = match.groups()
    path = None if image else repo_file(target, page_src)
    if path is None:
        return f"{image}[{text}]({site_link(target, page_src)})"
    shown = text.strip("`")
    return f"`{path}`" if shown in (path, posixpath.basename(path), target) else f"{text} (`{path}`)"


def rewrite_links(markdown: str, page_src: str) -> str:
    """Every inline link of ``markdown`` made to work in the site, fenced code left as it is.

    Links to pages go through :func:`site_link`; a link to another file of the repository becomes
    its path in backticks (the site has no copy of it to link to).

    >>> rewrite_links("[the map](../bench/regime_map.py) and [method](method.md#5-deciding-between-two-pipelines)", "evidence.md")
    'the map (`bench/regime_map.py`) and [method](method.md#5-deciding-between-two-pipelines)'
    >>> rewrite_links("[`bench/regime_map.py`](../bench/regime_map.py)", "evidence.md")
    '`bench/regime_map.py`'
    """
    parts = _FENCE.split(markdown)
    out, inside = [], False
    for part in parts:
        if part in ("```", "~~~"):
            inside = not inside
            out.append(part)
        elif inside:
            out.append(part)
        else:
            out.append(_LINK.sub(lambda m: _link(m, page_src), part))
    return "".join(out)


def on_files(files: Files, config) -> Files:
    """Add the generated reference and the mirrored pages."""
    files.append(File.generated(config, CLI_PAGE, content=cli_reference()))
    for rel in MIRRORED:
        files.append(File.generated(config, rel, abs_src_path=str(ROOT / rel)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Links written for the repository, made to work in the site."""
    return rewrite_links(markdown, page.file.src_uri)
