"""The live view: what the loop shows while an agent or a check phase runs.

While a phase runs (:meth:`LiveView.phase`), a background thread wakes once a second
(:data:`TICK_SECONDS`; it sleeps on an event in between: no busy polling) and

- on a terminal, rewrites one status line in place (``\\r`` and clear-to-end-of-line):
  ``[ralph iteration 2/5] agent 35 s: 3 turns, 5 tool calls, last Bash `pytest -q`, ...``
  or ``[ralph iteration 2/5] check 4 s: 3/20 criteria checked, 1 failing``;
- without a terminal, prints that line as a plain heartbeat every ``heartbeat`` seconds
  (0: never);
- writes the live-state record ``live.json`` in the run's folder (atomically), which
  ``pytest --ralph-status`` shows (:func:`read_live`).

``quiet`` (``-q``) shows neither line; the record is written all the same. ``--ralph-echo``
prints the agent's own output (already redacted) as it comes, through :meth:`LiveView.echo`,
which clears the status line first.

A check phase's progress comes from the JSON-lines file its child pytest writes
(:mod:`pytest_ralph.plugin.progress`): display only, never used for a verdict, and read
defensively (:class:`CheckProgress`): the child runs the code under test, which can write
anything there.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from ..agents.activity import Activity
from ..util.files import atomic_write_text
from ..util.redact import Redactor

#: Seconds between two updates of the status line and of ``live.json``.
TICK_SECONDS = 1.0

#: The live-state record's name, in the run's folder.
LIVE_NAME = "live.json"

#: Bytes of the progress file read at one tick (the rest waits for the next ones).
PROGRESS_READ_BYTES = 256 * 1024

#: Bytes of one progress line believed (a longer one is skipped).
PROGRESS_LINE_BYTES = 4096

#: Node ids remembered from a progress file (each counted once); more are not counted.
PROGRESS_MAX_NODES = 100_000

#: Largest count believed from a progress file.
_MAX_COUNT = 10**9

#: Clears the terminal's current line: carriage return, erase to the end of the line.
CLEAR_LINE = "\r\x1b[K"


class CheckProgress:
    """Reads the progress file of a check phase's child pytest, as it grows.

    Lines are JSON objects: ``{"collected": N}`` (the criteria of the phase) and ``{"nodeid":
    "...", "outcome": "passed" | "failed" | "skipped"}`` (one checked; a node id counts once,
    failing if any of its reports failed). Anything else is skipped: a line that is not
    JSON, too long, of the wrong types. The file is opened without following a symbolic link
    and read only when it is a regular file, at most :data:`PROGRESS_READ_BYTES` a tick.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.skipping = False  # inside a line over PROGRESS_LINE_BYTES
        self.collected = 0
        self.done: dict[str, bool] = {}  # node id -> failed

    @property
    def checked(self) -> int:
        """Criteria checked so far."""
        return len(self.done)

    @property
    def failing(self) -> int:
        """Criteria checked that failed so far."""
        return sum(self.done.values())

    def poll(self) -> None:
        """Read what was added since the last call; never raises."""
        with contextlib.suppress(Exception):
            self._read()

    def _read(self) -> None:
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(self.path, flags)
        except OSError:
            return
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            os.lseek(fd, self.offset, os.SEEK_SET)
            data = os.read(fd, PROGRESS_READ_BYTES)
        finally:
            os.close(fd)
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        if len(self.partial) > PROGRESS_LINE_BYTES:
            self.partial, self.skipping = b"", True
        for line in lines:
            if self.skipping:
                self.skipping = False
                continue
            if len(line) <= PROGRESS_LINE_BYTES:
                self._line(line)

    def _line(self, line: bytes) -> None:
        try:
            record = json.loads(line.decode("utf-8"), parse_constant=lambda _name: None)
        except (ValueError, RecursionError, UnicodeDecodeError):
            return
        if not isinstance(record, dict):
            return
        collected = record.get("collected")
        if type(collected) is int and 0 <= collected <= _MAX_COUNT:
            self.collected = max(self.collected, collected)
        nodeid, outcome = record.get("nodeid"), record.get("outcome")
        if isinstance(nodeid, str) and outcome in ("passed", "failed", "skipped") and (
                nodeid in self.done or len(self.done) < PROGRESS_MAX_NODES):
            self.done[nodeid] = self.done.get(nodeid, False) or outcome != "passed"


class _Phase:
    """One running phase (the live view's thread reads it)."""

    def __init__(self, name: str, title: str, log_path: Path | None,
                 activity: Activity | None, total: int) -> None:
        self.name = name
        self.title = title
        self.log_path = log_path
        self.activity = activity
        self.total = total
        self.started = time.monotonic()
        self.started_at = _dt.datetime.now(_dt.timezone.utc)
        self.progress: CheckProgress | None = None

    def progress_file(self, path: Path) -> None:
        """Read the check phase's progress from ``path`` (see :class:`CheckProgress`)."""
        self.progress = CheckProgress(path)

    def what(self) -> str:
        """What the phase did so far (not redacted)."""
        if self.activity is not None:
            return self.activity.summary()
        if self.name == "check":
            p = self.progress
            total = p.collected if p is not None and p.collected else self.total
            checked = p.checked if p else 0
            failing = p.failing if p else 0
            return (f"{checked}/{total or '?'} criteria checked"
                    + (f", {failing} failing" if failing else ""))
        return ""


class LiveView:
    """Shows that the loop is alive while a phase runs (see the module docstring).

    Args:
        out: the console.
        redactor: replaces secrets in everything it shows or writes.
        tty: whether ``out`` is a terminal (the status line); else heartbeat lines.
        heartbeat: seconds between heartbeat lines without a terminal (0: none).
        quiet: show no status line and no heartbeat (``-q``).
        tick: seconds between updates (:data:`TICK_SECONDS`).
    """

    def __init__(self, out: TextIO, redactor: Redactor, *, tty: bool, heartbeat: float,
                 quiet: bool = False, tick: float = TICK_SECONDS) -> None:
        self.out = out
        self.redactor = redactor
        self.tty = tty
        self.heartbeat = heartbeat
        self.quiet = quiet
        self.tick = tick
        #: Where ``live.json`` goes (the run's folder), or ``None`` (not written).
        self.folder: Path | None = None
        #: The first words of the status line: ``[ralph iteration 2/5]``.
        self.title = "[ralph]"
        self._lock = threading.Lock()
        self._shown = False  # a status line is on the terminal
        self._broken = False  # the console is closed
        self._current: _Phase | None = None
        self._last_event = ""  # the last agent phase's last event
        self._log: Path | None = None  # the last agent phase's log

    # -- the console ------------------------------------------------------------------------

    def _write(self, text: str) -> None:
        """Write ``text`` to the console (the lock is held); a closed console stops it."""
        if self._broken:
            return
        try:
            self.out.write(text)
            self.out.flush()
        except (OSError, ValueError):
            self._broken = True

    def clear(self) -> None:
        """Take the status line off the terminal (before other output); the next tick
        draws it again."""
        with self._lock:
            if self._shown:
                self._write(CLEAR_LINE)
                self._shown = False

    def echo(self, data: bytes) -> None:
        """Print a piece of the agent's output (already redacted) as it comes:
        ``--ralph-echo``."""
        text = data.decode("utf-8", "replace")
        with self._lock:
            if self._shown:
                self._write(CLEAR_LINE)
                self._shown = False
            self._write(text if text.endswith("\n") else text + "\n")

    def line(self, phase: _Phase) -> str:
        """The status line of ``phase`` (redacted): ``[ralph iteration 2/5] agent 35 s: ...``."""
        elapsed = time.monotonic() - phase.started
        what = phase.what()
        return self.redactor.text(f"{phase.title} {phase.name} {elapsed:.0f} s"
                                  + (f": {what}" if what else ""))

    def _draw(self, phase: _Phase) -> None:
        width = shutil.get_terminal_size((100, 24)).columns - 1
        text = self.line(phase)
        if len(text) > width > 3:
            text = text[:width - 3] + "..."
        with self._lock:
            self._write(CLEAR_LINE + text)
            self._shown = True

    # -- the live-state record --------------------------------------------------------------

    def _record(self, phase: _Phase | None, *, running: bool) -> None:
        """Write ``live.json`` (redacted); errors are ignored (the record is information)."""
        if self.folder is None or phase is None:
            return
        if phase.activity is not None:  # the agent's last event; a check phase keeps it
            self._last_event = phase.activity.snapshot().last_event()
        event = self._last_event
        if phase.log_path is not None:
            self._log = phase.log_path
        record = {"phase": phase.name if running else "between phases",
                  "last_phase": phase.name, "title": phase.title,
                  "running": running, "started": phase.started_at.isoformat(),
                  "elapsed": round(time.monotonic() - phase.started, 1),
                  "updated": _dt.datetime.now(_dt.timezone.utc).isoformat(),
                  "what": phase.what(), "last_event": event,
                  "log": str(self._log) if self._log else None, "pid": os.getpid()}
        with contextlib.suppress(OSError, ValueError):
            atomic_write_text(self.folder / LIVE_NAME,
                              json.dumps(self.redactor.json(record), indent=1) + "\n")

    def end(self) -> None:
        """The run ended: remove its ``live.json`` (it describes a running run only)."""
        if self.folder is not None:
            with contextlib.suppress(OSError):
                (self.folder / LIVE_NAME).unlink(missing_ok=True)
        self.folder = None

    # -- phases -----------------------------------------------------------------------------

    @contextmanager
    def phase(self, name: str, *, log_path: Path | None = None,
              activity: Activity | None = None, total: int = 0) -> Iterator[_Phase]:
        """Show ``name`` (``agent`` or ``check``) as running for the body.

        Args:
            name: the phase.
            log_path: the agent's log (shown by ``--ralph-status``).
            activity: the agent's :class:`pytest_ralph.agents.activity.Activity`.
            total: the criteria a check phase checks (0: unknown until its child says).

        Yields:
            The phase: hand its ``progress_file`` to the check phase.
        """
        current = _Phase(name, self.title, log_path, activity, total)
        if activity is not None:
            self._last_event = ""
        stop = threading.Event()
        thread = threading.Thread(target=self._run, args=(current, stop),
                                  name="pytest-ralph-live", daemon=True)
        self._current = current
        self._record(current, running=True)
        thread.start()
        try:
            yield current
        finally:
            stop.set()
            thread.join(5)
            self._current = None
            self.clear()
            self._record(current, running=False)

    def _run(self, phase: _Phase, stop: threading.Event) -> None:
        """The thread: once a tick, the status line (or the heartbeat) and the record."""
        show = not self.quiet
        beat = self.heartbeat if (show and not self.tty and self.heartbeat > 0) else 0.0
        next_beat = phase.started + beat
        with contextlib.suppress(Exception):  # a live view never stops the run
            while not stop.wait(self.tick):
                if phase.progress is not None:
                    phase.progress.poll()
                if show and self.tty:
                    self._draw(phase)
                elif beat and time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + beat
                    text = self.line(phase)
                    with self._lock:
                        self._write(f"pytest-ralph: {text}\n")
                self._record(phase, running=True)


def read_live(folder: Path) -> dict[str, Any] | None:
    """The live-state record in a run's ``folder`` (``live.json``), or ``None`` when it is
    missing or damaged; the values are those :class:`LiveView` writes (strings, numbers,
    booleans), any other shape is ``None``."""
    try:
        with (folder / LIVE_NAME).open("rb") as f:
            value = json.loads(f.read(64 * 1024).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def maybe_tty(out: TextIO) -> bool:
    """Whether ``out`` is a terminal (``False`` when it cannot tell)."""
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError, OSError):
        return False

