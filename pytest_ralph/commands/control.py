"""What ``pytest --ralph-status`` and ``pytest --ralph-cancel`` both ask of a state folder: whether
a loop runs on it, and which run is the current one (:mod:`pytest_ralph.commands.status`,
:mod:`pytest_ralph.commands.cancel`: look at or stop a loop from another terminal, through the
run history, :mod:`pytest_ralph.state.history`).

Whether a loop runs is decided by the state folder's lock (:meth:`StateDir.holder
<pytest_ralph.state.folder.StateDir.holder>`), not by the pid in the history: after a crash that
pid may belong to an unrelated process. A run marked ``running`` is running only while
the lock is held and the lock file names the run's pid. Without OS file locks (Windows)
the pid test (``os.kill(pid, 0)``) is the fallback.

This module does not import pytest.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from ..state.folder import FILE_LOCKS, StateDir
from ..state.history import History
from ..state.records import StoredRun

#: Exit code of ``--ralph-status`` / ``--ralph-cancel`` when the history cannot be read.
EXIT_HISTORY_ERROR = 4


@dataclass(frozen=True)
class Lock:
    """What the state folder's lock says.

    Attributes:
        held: a process holds the lock (a loop runs on the folder).
        pid: the pid written in the lock file by its holder, or ``None`` (not held, or
            no pid in the file).
        problem: why the lock could not be asked (``""`` if it could).
    """

    held: bool
    pid: int | None
    problem: str = ""


def folder_lock(state_root: Path) -> Lock:
    """Ask the state folder's lock who holds it."""
    try:
        text = StateDir(state_root).holder()
    except OSError as exc:
        return Lock(False, None, f"cannot read its lock file: {exc}")
    if text is None:
        return Lock(False, None)
    m = re.match(r"pid (\d+)\b", text)
    return Lock(True, int(m.group(1)) if m else None)


def _pid_alive(pid: int | None, hostname: str) -> bool:
    """The pid test, for platforms without file locks: a process with this pid exists here
    (it may be another process than the loop, if the loop died and the pid was reused)."""
    if pid is None or hostname != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def loop_runs(run: StoredRun, lock: Lock) -> bool | None:
    """Whether the loop of ``run`` (status ``running``) still runs: ``True`` when the
    folder's lock is held and names the run's pid; ``None`` when the lock could not be
    asked (``lock.problem``); otherwise ``False`` (the loop died: a crash)."""
    if not FILE_LOCKS:  # pragma: no cover - Windows
        return _pid_alive(run.pid, run.hostname)
    if lock.problem:
        return None
    return lock.held and run.pid is not None and lock.pid == run.pid


def current_run(history: History, lock: Lock) -> StoredRun | None:
    """The run whose loop holds the folder's lock, or ``None``."""
    if not lock.held or lock.pid is None:
        return None
    row = history.connection.execute(
        "SELECT id FROM runs WHERE status = 'running' AND pid = ? "
        "ORDER BY updated DESC, id DESC LIMIT 1", (lock.pid,)).fetchone()
    return None if row is None else history.run(str(row[0]))


def where(run: StoredRun) -> str:
    """Where the loop of ``run`` runs: ``pid N``, with `` on HOST`` when not on this host."""
    host = "" if run.hostname == socket.gethostname() else f" on {run.hostname}"
    return f"pid {run.pid}{host}"

