"""Every reference to the method (``docs/method.md §2.2``, Markdown links to its headings) points at a section
that exists; nothing cites the old out-of-repository "METHOD x.y" document any more."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
METHOD = REPO / "docs" / "method.md"
SCANNED = ("rolling_calib", "data_prep", "tests", "bench", "workflows", "docs", "README.md", "pyproject.toml")
SUFFIXES = {".py", ".md", ".yaml", ".toml", ".txt"}


def _sections() -> tuple[set[str], set[str]]:
    """Section numbers and GitHub anchors of the headings of docs/method.md."""
    numbers, anchors = set(), set()
    for line in METHOD.read_text(encoding="utf-8").splitlines():
        if match := re.match(r"(#{1,6}) (.+)", line):
            title = match.group(2).strip()
            anchors.add(re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-"))  # GitHub's slug rule
            if number := re.match(r"(\d+(?:\.\d+)?)\.? ", title):
                numbers.add(number.group(1))
    return numbers, anchors


def _files() -> list[Path]:
    files = {}
    for entry in SCANNED:
        root = REPO / entry
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                files.setdefault(path.resolve(), path)  # rolling_calib/workflows links to workflows/
    return sorted(p for p in files if p.is_relative_to(REPO))


def test_the_method_has_the_numbered_sections_it_is_cited_by():
    numbers, _ = _sections()
    assert {"1", "2", "2.1", "2.2", "2.3", "2.4", "2.5", "3", "3.1", "3.2", "3.3", "3.4", "4", "5"} <= numbers


def test_every_section_reference_and_link_exists():
    numbers, anchors = _sections()
    bad, cited = [], set()
    for path in _files():
        rel = path.relative_to(REPO).as_posix()
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for number in re.findall(r"§(\d+(?:\.\d+)?)", line):
                cited.add(number)
                if number not in numbers:
                    bad.append(f"{rel}:{lineno}: §{number} is not a section of docs/method.md")
            for anchor in re.findall(r"method\.md#([\w\-]+)", line):
                if anchor not in anchors:
                    bad.append(f"{rel}:{lineno}: #{anchor} is not a heading of docs/method.md")
    assert not bad, "\n".join(bad)
    assert {"2.2", "3.3"} <= cited, "the references were not found: is the scan looking at the right files?"


def test_no_reference_to_the_old_method_document():
    old = re.compile(r"\bMETHOD(?: section)? \d|shared/spec/METHOD\.md")
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()}"
             for p in _files() if p.name != Path(__file__).name
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if old.search(line)]
    assert not found, "\n".join(found)
