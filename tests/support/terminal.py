"""A child process on a pseudo-terminal, and a small screen that replays what it drew.

:func:`run_in_pty` starts a command with its stdin, stdout and stderr on the slave side of a
new pseudo-terminal of a given size (so that ``isatty()`` is true in the child and the
terminal driver turns ``\\n`` into ``\\r\\n``) and returns all it wrote. :class:`Screen`
replays that output as a terminal would, for the subset of control sequences the live views
use (``\\r``, ``\\n``, ``\\b``, ``\\t``, CSI ``A B C D E F G H J K`` and SGR ``m``, which is
ignored), with auto-wrap at the terminal's width; the rows that scrolled off stay in
:attr:`Screen.lines`, as in a terminal's scrollback.
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import termios
import time
from collections.abc import Mapping
from pathlib import Path

_CSI = re.compile(r"\x1b\[([0-9;?]*)([@-~])")


def run_in_pty(argv: list[str], cwd: Path, env: Mapping[str, str], *, cols: int = 100,
               rows: int = 40, timeout: float = 300.0) -> tuple[int, str]:
    """Run ``argv`` on a new ``cols`` x ``rows`` pseudo-terminal; return (exit status, all it
    wrote, decoded as UTF-8 with errors replaced). The child leads a session of its own with
    the terminal as its controlling terminal. Past ``timeout`` seconds its process group is
    killed and the test fails."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=dict(env), stdin=slave, stdout=slave,
                                stderr=slave, start_new_session=True, close_fds=True)
    finally:
        os.close(slave)
    chunks: list[bytes] = []
    end = time.monotonic() + timeout
    try:
        while True:
            if time.monotonic() > end:
                os.killpg(proc.pid, 9)
                raise AssertionError(f"{argv} ran past {timeout} s on the terminal:\n"
                                     + b"".join(chunks).decode("utf-8", "replace")[-4000:])
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every holder of the slave side has closed it
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    code = proc.wait(timeout=60)
    return code, b"".join(chunks).decode("utf-8", "replace")


class Screen:
    """What a ``cols``-wide terminal shows after :meth:`feed`: :attr:`lines` (the scrollback
    and the screen, one string per row, trailing blanks stripped by :meth:`text`)."""

    def __init__(self, cols: int = 100, rows: int = 40) -> None:
        self.cols, self.rows = cols, rows
        self.lines: list[list[str]] = [[]]
        self.row = self.col = 0
        self._wrap = False  # the cursor is past the last column (a terminal's pending wrap)

    def _top(self) -> int:
        return max(0, len(self.lines) - self.rows)

    def _down(self) -> None:
        self.row += 1
        if self.row == len(self.lines):
            self.lines.append([])

    def _put(self, ch: str) -> None:
        if self._wrap:
            self._down()
            self.col, self._wrap = 0, False
        line = self.lines[self.row]
        line.extend(" " * (self.col + 1 - len(line)))
        line[self.col] = ch
        if self.col == self.cols - 1:
            self._wrap = True
        else:
            self.col += 1

    def feed(self, text: str) -> None:
        """Replay ``text``."""
        i = 0
        while i < len(text):
            match = _CSI.match(text, i)
            if match:
                self._csi(match.group(1), match.group(2))
                i = match.end()
                continue
            ch = text[i]
            i += 1
            if ch == "\r":
                self.col, self._wrap = 0, False
            elif ch == "\n":
                self._down()
                self._wrap = False
            elif ch == "\b":
                self.col, self._wrap = max(0, self.col - 1), False
            elif ch == "\t":
                for _ in range(8 - self.col % 8):
                    self._put(" ")
            elif ch == "\x1b" or ch < " ":
                continue
            else:
                self._put(ch)

    def _csi(self, params: str, final: str) -> None:
        n = int(params) if params.isdigit() else 0
        self._wrap = False
        if final in "AF":
            self.row = max(self._top(), self.row - max(n, 1))
            if final == "F":
                self.col = 0
        elif final in "BE":
            for _ in range(max(n, 1)):
                self._down()
            if final == "E":
                self.col = 0
        elif final == "C":
            self.col = min(self.cols - 1, self.col + max(n, 1))
        elif final == "D":
            self.col = max(0, self.col - max(n, 1))
        elif final == "G":
            self.col = min(self.cols - 1, max(n, 1) - 1)
        elif final == "K":
            del self.lines[self.row][self.col:]
        elif final == "J":
            del self.lines[self.row][self.col:]
            del self.lines[self.row + 1:]
        elif final == "H":
            parts = [int(p) if p.isdigit() else 1 for p in params.split(";")] + [1, 1]
            self.row = min(self._top() + parts[0] - 1, len(self.lines) - 1)
            self.col = min(self.cols - 1, parts[1] - 1)

    def text(self) -> list[str]:
        """The rows as strings, trailing blanks stripped, the empty rows at the end left out."""
        out = ["".join(line).rstrip() for line in self.lines]
        while out and not out[-1]:
            out.pop()
        return out
