"""The state folder (``.pytest_ralph/`` by default; ini ``ralph_dir``).

Layout::

    .pytest_ralph/
      .gitignore                  # "*": the folder never shows up in git status
      lock                        # held by the running loop (pid and start time inside)
      progress.txt                # append-only log of every iteration, readable by agents
      ralph.db                    # the run history (SQLite)
      passes.json                 # the verdicts the write-back cannot put in the PRD
      oracle-files/<digest>       # copies of the guarded files, for diff stats
      runs/<run id>/
        run.json                  # the run so far, rewritten atomically after every iteration
        iteration-000/            # the baseline check
          check.json check.log
        iteration-001/
          prompt.md agent.log check.json check.log
      reports/ralph-<topic>-<date>.md

Everything is written as the run goes, so a crash loses at most the iteration in progress.
No file here holds a secret (:mod:`pytest_ralph.util.redact`): :meth:`RunDir.write_summary` and
:meth:`StateDir.append_progress` redact what they write, as the loop does for the rest.
"""

from __future__ import annotations

import datetime as _dt
import errno
import importlib.util
import json
import os
import secrets
import stat
import time
from pathlib import Path
from typing import IO, Any

from ..util.files import atomic_write_text, kind_of, open_regular
from ..util.redact import Redactor

#: The names in the state folder (see the layout above): its ``.gitignore``, the loop lock,
#: the progress log, the run history (:mod:`pytest_ralph.state.history`), the write-back
#: sidecar (:mod:`pytest_ralph.prd.writeback`), the folder of runs, the folder of reports,
#: and the folder of file copies (:mod:`pytest_ralph.state.verified`).
GITIGNORE = ".gitignore"
LOCK_FILE = "lock"
PROGRESS_FILE = "progress.txt"
DB_NAME = "ralph.db"
PASSES_FILE = "passes.json"
RUNS_DIR = "runs"
REPORTS_DIR = "reports"
COPIES = "oracle-files"

#: The names in a run's folder: its summary, and in each iteration's folder the prompt the
#: agent was given and the agent's output.
RUN_SUMMARY = "run.json"
PROMPT_FILE = "prompt.md"
AGENT_LOG = "agent.log"

#: The files of the state folder that must be regular files when they exist, with what
#: each one is (for messages). ``ralph.db`` is checked by :meth:`pytest_ralph.state.history.
#: History.open`.
STATE_FILES = ((PROGRESS_FILE, "the progress log"), (LOCK_FILE, "the loop lock file"),
               (PASSES_FILE, "the write-back sidecar"))

#: Seconds :meth:`StateDir.lock` waits for the loop holding the lock to write its pid in the
#: lock file, when it took the lock an instant before (the pid is written just after).
LOCK_PID_WAIT = 1.0

#: Whether this platform has OS file locks (``fcntl.flock``; not on Windows). Without them
#: :meth:`StateDir.lock` locks nothing and :meth:`StateDir.holder` cannot tell whether a
#: loop runs.
FILE_LOCKS = importlib.util.find_spec("fcntl") is not None


class StateDir:
    """The state folder of one project.

    Args:
        root: the folder (created on first use).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        #: After :meth:`lock`: what the lock file said about a holder that no longer runs
        #: (a loop that was killed), or ``""``.
        self.stale_lock = ""

    def ensure(self) -> None:
        """Create the folder and its ``.gitignore``; check that the files the loop keeps
        there (:data:`STATE_FILES`) are regular files when they exist.

        Raises:
            StateError: one of them is a folder, a FIFO, a device...; the message names it
                and says what to do.
            OSError: the folder cannot be created.
        """
        if self.root.exists() and not self.root.is_dir():
            raise StateError(f"the state folder {self.root} is "
                             f"{kind_of(self.root.stat().st_mode)}, not a folder: set "
                             "ralph_dir to a folder (or move that file aside)")
        self.root.mkdir(parents=True, exist_ok=True)
        for name, what in STATE_FILES:
            self.check_file(self.root / name, what)
        ignore = self.root / GITIGNORE
        if not ignore.exists():
            ignore.write_text("# Created by pytest-ralph: the loop's state and reports.\n*\n",
                              encoding="utf-8")

    @staticmethod
    def check_file(path: Path, what: str) -> None:
        """Refuse a ``path`` of the state folder that exists and is not a regular file.
        ``progress.txt`` may not be a symbolic link either (it is appended to: a link would
        be written through); the lock file's link is replaced by :meth:`lock`, and
        ``passes.json`` is replaced whole, so a link there is followed.

        Raises:
            StateError: naming ``path``, what it is, and ``what`` it should be.
        """
        try:
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode) and path.name != PROGRESS_FILE:
                mode = os.stat(path).st_mode if path.name != LOCK_FILE else stat.S_IFREG
        except OSError:
            return
        if stat.S_ISREG(mode):
            return
        raise _misplaced(path, kind_of(mode), what)

    @property
    def progress_path(self) -> Path:
        """``progress.txt``: the append-only progress log."""
        return self.root / PROGRESS_FILE

    @property
    def reports_dir(self) -> Path:
        """The folder of final reports."""
        return self.root / REPORTS_DIR

    def append_progress(self, text: str) -> None:
        """Append ``text`` (plus a newline if missing) to ``progress.txt`` and flush it to disk;
        secrets are redacted (:meth:`pytest_ralph.util.redact.Redactor.from_env`).

        Raises:
            StateError: ``progress.txt`` is not a regular file (a folder, a FIFO, a link...).
            OSError: it cannot be written.
        """
        text = Redactor.from_env().text(text)
        if not text.endswith("\n"):
            text += "\n"
        path = self.progress_path
        self.check_file(path, "the progress log")
        try:  # O_NONBLOCK: a FIFO put there meanwhile fails at once instead of blocking
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
                         | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            if exc.errno in (errno.ENXIO, errno.EISDIR, errno.ELOOP):
                self.check_file(path, "the progress log")
            raise
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):  # a FIFO with a reader: opened, but not ours to write
                raise _misplaced(path, kind_of(mode), "the progress log")
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    def read_progress_tail(self, max_chars: int) -> str:
        """The last ``max_chars`` characters of ``progress.txt`` ("" if there is none); only
        the end of the file is read (4 bytes per character at most).

        Raises:
            StateError: ``progress.txt`` is not a regular file.
        """
        self.check_file(self.progress_path, "the progress log")
        try:
            fd = open_regular(self.progress_path)
        except FileNotFoundError:
            return ""
        except OSError:
            self.check_file(self.progress_path, "the progress log")
            raise
        with os.fdopen(fd, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - 4 * max_chars - 4)  # a UTF-8 character is 1 to 4 bytes
            f.seek(start)
            text = f.read().decode("utf-8", errors="replace")
        if len(text) <= max_chars and not start:
            return text
        cut = text[-max_chars:]
        return "...\n" + cut[cut.find("\n") + 1:]

    def lock(self, what: str = "") -> IO[str]:
        """Take the folder's loop lock (file ``lock``; an OS file lock, so it is released even
        when the process dies). Close the returned file to release it.

        The lock is the same for every process that works on the folder: a ``pytest --ralph``
        loop, the controller of a ``--ralph-parallel`` run (``what``: ``"the controller of
        parallel run <id>"``), a Claude Code Stop hook's driver; one of them at a time.

        Args:
            what: who holds it, written in the lock file after the pid and start time (and so
                shown to whoever is refused), or ``""``.

        Raises:
            LockedError: another loop holds it; the message names its pid and start time.
            OSError: the lock file cannot be opened.
        """
        path = self.root / LOCK_FILE
        if path.is_symlink():  # never write through a link planted in the state folder
            path.unlink()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0),
                     0o644)
        f = os.fdopen(fd, "a+", encoding="utf-8")
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            f.close()
            raise _misplaced(path, kind_of(mode), "the loop lock file")
        if not _try_lock(f):
            holder = _holder_text(f)
            f.close()
            raise LockedError(f"another `pytest --ralph` loop is running with the state folder "
                              f"{self.root} ({holder}); wait for it to end or stop it "
                              "(`pytest --ralph-cancel`), or set ralph_dir to another folder")
        f.seek(0)
        previous = f.read().strip()
        self.stale_lock = previous if previous.startswith("pid ") else ""
        started = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()}, started {started}" + (f", {what}" if what else "") + "\n")
        f.flush()
        return f

    def holder(self) -> str | None:
        """Who holds the folder's loop lock, asked without taking it.

        Probes the lock file with a non-blocking *shared* ``flock``: it fails only while a
        loop holds the exclusive lock of :meth:`lock`. (Shared, not exclusive, so that two
        probes at the same moment, a ``--ralph-status`` and a ``--ralph-cancel`` say, do
        not see each other as a running loop.) A granted probe is released at once; while
        it is held, for microseconds, a loop starting on the folder would be refused as if
        another loop ran. Creates nothing: a missing lock file means no loop holds it.

        Returns:
            ``None`` when no process holds the lock (no loop runs on the folder), or when
            this platform has no file locks (see :data:`FILE_LOCKS`); otherwise the lock
            file's text as the holder wrote it (``"pid 1234, started 2026-11-29 23:57:28
            UTC"``, or ``""`` in the moment a loop clears it on its way out).

        Raises:
            OSError: the lock file exists but cannot be opened (permissions, say).
        """
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no lock to ask about
            return None
        try:
            f = (self.root / LOCK_FILE).open("r", encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return None
        with f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                text = f.read().strip()
                real = _flock_holder(f.fileno())
                if real is None or text.startswith(f"pid {real},"):
                    return text
                # The file's text is not the holder's (edited by someone): trust the kernel.
                return f"pid {real}, started unknown (the lock file says {text!r})"
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
            return None

    def new_run(self) -> RunDir:
        """Create the folder of a new run, named by UTC time and a random suffix."""
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
        run = RunDir(self.root / RUNS_DIR / f"{stamp}-{secrets.token_hex(3)}")
        run.path.mkdir(parents=True)
        return run

    def report_path(self, topic: str, date: _dt.date) -> Path:
        """A new path ``reports/ralph-<topic>-<YYYY-MM-DD>.md``; ``-2``, ``-3``... when taken."""
        self.reports_dir.mkdir(parents=True, exist_ok=True)
        base = f"ralph-{topic}-{date.isoformat()}"
        path = self.reports_dir / f"{base}.md"
        n = 2
        while path.exists():
            path = self.reports_dir / f"{base}-{n}.md"
            n += 1
        return path


class LockedError(Exception):
    """Another loop is running with the same state folder."""


class StateError(OSError):
    """A file of the state folder is not what the loop keeps there (a folder where
    ``progress.txt`` should be, say). Its message names the path and what to do; the loop
    ends with a usage error (exit 4)."""


def _misplaced(path: Path, kind: str, what: str) -> StateError:
    """The error for ``path`` of the state folder being ``kind`` instead of ``what``."""
    return StateError(f"{path} is {kind}, where pytest-ralph keeps {what} (a regular file): "
                      "move it aside or remove it (pytest-ralph writes it again), then run "
                      "again")


def _holder_text(f: IO[str]) -> str:
    """What to say about the loop holding the lock on the open lock file ``f``: the text it
    wrote (``"pid 1234, started ..."``). A loop writes its pid just after it took the lock,
    so an empty file means that it is just starting: the text is waited for up to
    :data:`LOCK_PID_WAIT` seconds; then the holder's pid comes from the kernel
    (``/proc/locks``), or the message says that another loop is starting."""
    deadline = time.monotonic() + LOCK_PID_WAIT
    while True:
        f.seek(0)
        text = f.read().strip()
        if text or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    if text:
        return text
    real = _flock_holder(f.fileno())
    if real is not None:
        return f"pid {real}, just starting"
    return "a loop that is just starting: its pid is not written yet"


def _flock_holder(fd: int) -> int | None:
    """The pid holding a ``flock`` on the file open as ``fd``, from ``/proc/locks`` (Linux);
    ``None`` when it cannot be told."""
    try:
        st = os.fstat(fd)
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            lines = locks.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (a "->" marks a waiter)
        if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK" or fields[3] != "WRITE":
            continue
        try:
            ino = int(fields[5].rsplit(":", 1)[1])
            pid = int(fields[4])
        except (ValueError, IndexError):
            continue
        if ino == st.st_ino:
            return pid
    return None


def _try_lock(f: IO[str]) -> bool:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no lock
        return True
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


class RunDir:
    """The folder of one run: ``run.json`` and one sub-folder per iteration."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def id(self) -> str:
        """The run id (the folder name)."""
        return self.path.name

    def iteration_dir(self, n: int) -> Path:
        """The folder of iteration ``n`` (0 is the baseline check), created if needed."""
        d = self.path / f"iteration-{n:03d}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def write_summary(self, data: dict[str, Any], redactor: Redactor | None = None) -> None:
        """Rewrite ``run.json`` atomically, with every string in ``data`` redacted (by
        ``redactor``; ``None``: the secrets of the environment and the well-known shapes)."""
        r = redactor or Redactor.from_env()
        atomic_write_text(self.path / RUN_SUMMARY,
                          json.dumps(r.json(data), indent=1, ensure_ascii=False))
