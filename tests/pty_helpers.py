"""Run a command on a pseudo-terminal and replay what it drew, screen by screen.

``run_in_pty`` gives the command a real terminal (``pty.openpty``, window size set), so
``isatty()`` is true and tqdm draws as in a user's terminal; it returns every byte written.
``screens`` replays those bytes on a small model of a terminal, enough for what tqdm writes
(printable text, ``\\r``, ``\\n``, cursor up ``ESC [ n A``; other escape sequences are skipped),
and returns the screen after each write that moved the cursor: a line drawn for a moment and
cleared later (tqdm's ``leave=False``) is still in one of them.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Sequence
from pathlib import Path

_CSI = re.compile(rb"\x1b\[([0-9;?]*)([A-Za-z])")


def run_in_pty(cmd: Sequence[str], *, cwd: Path, cols: int = 120, rows: int = 40, timeout: float = 300.0,
               stdout_pipe: bool = False, env: dict | None = None) -> tuple[int, bytes, bytes]:
    """Run ``cmd`` with stderr (and stdout, unless ``stdout_pipe``) on a fresh terminal of ``cols`` x ``rows``.

    Returns ``(exit code, bytes written to the terminal, bytes written to stdout when piped)``.
    """
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    environ = dict(os.environ if env is None else env, TERM="xterm", COLUMNS=str(cols), LINES=str(rows))
    proc = subprocess.Popen(list(cmd), cwd=cwd, stdin=slave, stdout=subprocess.PIPE if stdout_pipe else slave,
                            stderr=slave, env=environ, close_fds=True)
    os.close(slave)
    drawn, deadline = bytearray(), time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every process holding the terminal has closed it
                    break
                if not chunk:
                    break
                drawn += chunk
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
        out = proc.stdout.read() if stdout_pipe else b""
        return proc.wait(), bytes(drawn), out
    finally:
        os.close(master)
        if proc.stdout is not None:
            proc.stdout.close()


def screens(raw: bytes, *, cols: int = 120, rows: int = 40) -> list[list[str]]:
    """The screens ``raw`` drew on a ``cols`` x ``rows`` terminal: one after each write that moved the cursor."""
    grid = [[" "] * cols for _ in range(rows)]
    row = col = 0
    shots: list[list[str]] = []

    def shot() -> None:
        lines = ["".join(line).rstrip() for line in grid]
        if not shots or shots[-1] != lines:
            shots.append(lines)

    def down() -> None:
        nonlocal row
        if row == rows - 1:  # scroll
            grid.pop(0)
            grid.append([" "] * cols)
        else:
            row += 1

    text = raw.decode("utf-8", errors="replace").encode("utf-8")
    i = 0
    while i < len(text):
        match = _CSI.match(text, i) if text[i] == 0x1B else None
        if match is not None:
            shot()
            if match.group(2) == b"A":
                row = max(0, row - int(match.group(1) or 1))
            i = match.end()
            continue
        char_end = i + 1
        while char_end < len(text) and (text[char_end] & 0xC0) == 0x80:  # the rest of a UTF-8 character
            char_end += 1
        char = text[i:char_end].decode("utf-8")
        i = char_end
        if char == "\r":
            shot()
            col = 0
        elif char == "\n":
            shot()
            down()
        elif char >= " ":
            if col >= cols:
                col = 0
                down()
            grid[row][col] = char
            col += 1
    shot()
    return shots


def nested_under(shots: list[list[str]], parent: str, child: str) -> list[str] | None:
    """The first screen with a line matching ``parent`` directly above one matching ``child`` (regexes), else None."""
    above, below = re.compile(parent), re.compile(child)
    for lines in shots:
        for upper, lower in zip(lines, lines[1:]):
            if above.search(upper) and below.search(lower):
                return lines
    return None
