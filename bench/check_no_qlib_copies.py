"""No file of this repository is byte-identical to a file of Qlib (any version in the checkout's history).

The project holds only code it wrote: a Qlib file it needs is read from a Qlib checkout the user
points to (``bench/bench_data_ingest.py --qlib-repo DIR``). This compares git's blob id of every
tracked file here (``git ls-files -s``; equal ids mean equal bytes) with every blob of the checkout
(a git directory or clone: its whole history; a plain tree: its files). Prints one line per copy
and exits 1 when there is any, else prints the counts compared and exits 0.
``tests/test_no_qlib_copies.py`` runs the same check when ``QLIB_REPO`` names a checkout.

Usage::

    python bench/check_no_qlib_copies.py --qlib-repo ../qlib        # a clone, or its .git directory
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from qlib_checkout import blob_ids, commit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def our_blobs(root: Path = ROOT) -> dict[str, str]:
    """``{path: blob id}`` of every file git tracks in this repository (as staged: what a commit holds)."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-s"], capture_output=True, text=True, check=True).stdout
    return {line.split("\t", 1)[1]: line.split()[1] for line in out.splitlines()}


def copies(qlib_repo: Path, root: Path = ROOT) -> list[str]:
    """The tracked files of ``root`` whose bytes equal a file of the Qlib checkout."""
    theirs = blob_ids(qlib_repo)
    return sorted(path for path, blob in our_blobs(root).items() if blob in theirs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qlib-repo", required=True, type=Path, help="a Qlib checkout or git directory")
    args = parser.parse_args(argv)
    found = copies(args.qlib_repo.resolve())
    for path in found:
        print(f"{path}: byte-identical to a file of Qlib ({args.qlib_repo}, {commit(args.qlib_repo)[:12]})")
    if not found:
        print(f"no copies: {len(our_blobs())} tracked files vs {len(blob_ids(args.qlib_repo.resolve()))} Qlib blobs "
              f"({args.qlib_repo}, {commit(args.qlib_repo)[:12]})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
