"""The documentation site: built with warnings as errors, its CLI reference complete, the README short and its links alive.

``mkdocs build --strict`` (``mkdocs.yml``) fails on a broken link or anchor, a page missing from the nav and a
nav entry without its page; the build tests skip only where MkDocs and Material are not installed (the
``docs`` extra, which ``make`` installs).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rolling_calib.cli import build_parser
from rolling_calib.cli.reference import command_parsers, reference_markdown

ROOT = Path(__file__).resolve().parents[1]
HAVE_MKDOCS = all(importlib.util.find_spec(name) is not None for name in ("mkdocs", "material"))
needs_mkdocs = pytest.mark.skipif(not HAVE_MKDOCS, reason="mkdocs and mkdocs-material are not installed "
                                                          "(pip install -e '.[docs]')")
#: The README's size target (issue 39: a newcomer reads it in five minutes).
README_MAX_LINES = 120
FIGURE_MAX_BYTES = 200 * 1024


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}   # Material's banner about its successor, not about the site
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@needs_mkdocs
def test_site_builds_strict_with_the_generated_cli_reference(tmp_path):
    result = _mkdocs(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stderr[-6000:]
    cli = (tmp_path / "site" / "cli.html").read_text(encoding="utf-8")
    for prog, _, _ in command_parsers(build_parser()):
        anchor = prog.lower().replace(" ", "-")
        assert f'id="{anchor}"' in cli, f"no section for {prog} in the built CLI reference"
    assert "/work/" not in cli and str(ROOT) not in cli    # no path of the machine that built it
    for page in ("workflows/index.html", "workflows/qlib_zoo/index.html", "index.html", "quickstart.html"):
        assert (tmp_path / "site" / page).is_file(), page


@needs_mkdocs
def test_strict_build_refuses_a_broken_anchor_and_a_page_left_out_of_the_nav(tmp_path):
    """The site's own validation settings (inherited from mkdocs.yml) turn both into errors."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the method](other.md#no-such-section).\n", encoding="utf-8")
    (docs / "other.md").write_text("# Other\n\n## A section\n", encoding="utf-8")
    (docs / "forgotten.md").write_text("# Not in the nav\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: {docs}\nhooks: []\n"
                      "nav:\n  - Home: index.md\n  - Other: other.md\n", encoding="utf-8")
    result = _mkdocs(config, tmp_path / "site")
    assert result.returncode != 0
    assert "no-such-section" in result.stderr
    assert "forgotten.md" in result.stderr


@needs_mkdocs
def test_site_hook_examples():
    """The hook lives in docs/hooks (outside the doctest paths): its examples run here."""
    import doctest

    spec = importlib.util.spec_from_file_location("docs_site_hook", ROOT / "docs" / "hooks" / "site.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    result = doctest.testmod(hook)
    assert result.attempted >= 5 and result.failed == 0


def _visible_options(parser: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    shown, hidden = [], []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        names = list(action.option_strings) or [action.metavar or action.dest]
        (hidden if action.help is argparse.SUPPRESS else shown).extend(names)
    return shown, hidden


def test_cli_reference_covers_every_command_and_option():
    parser = build_parser()
    text = reference_markdown(parser)
    commands = list(command_parsers(parser))
    assert {prog.split()[1] for prog, _, _ in commands} >= {"demo", "run", "compare", "report", "sweep", "data"}
    for prog, _, sub in commands:
        level = "#" * prog.count(" ") + "#"
        section = text.split(f"\n{level} {prog}\n", 1)
        assert len(section) == 2, f"no heading for {prog}"
        body = re.split(r"\n#{1,3} rolling-calib ", section[1], maxsplit=1)[0]
        shown, hidden = _visible_options(sub)
        for name in shown:
            assert f"`{name}" in body, f"{prog}: {name} missing from the reference"
        for name in hidden:
            assert f"`{name}" not in body, f"{prog}: {name} is hidden from --help but shown in the reference"


def test_readme_is_short_and_its_links_resolve():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < README_MAX_LINES
    for target in re.findall(r"\]\(([^)\s]+)\)", readme):
        if re.match(r"^[a-z][a-z0-9+.-]*:|^#", target):
            continue
        path = ROOT / target.split("#", 1)[0]
        assert path.exists(), f"README.md links {target}, which does not exist"
        if path.suffix == ".png":
            assert path.stat().st_size < FIGURE_MAX_BYTES, f"{target}: {path.stat().st_size} bytes"
