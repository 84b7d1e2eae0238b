"""``pytest --ralph-cancel``: stop a loop from another terminal, through the run history
(:mod:`pytest_ralph.state.history`).

Cancel sets the run's ``cancel_requested`` flag and sends SIGTERM to the loop's process when it
runs on this host; the loop stops its agent's process group, records the run as
``cancelled``, writes its report and exits 2. Which loop runs is the state folder's lock's to
say (:mod:`pytest_ralph.commands.control`); a Claude Code run is disarmed instead.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import signal
import socket
import sqlite3
from pathlib import Path

from ..claude.arming import remove_marker
from ..state.folder import DB_NAME
from ..state.history import History
from ..state.records import HistoryError, StoredDriver, StoredRun
from .control import EXIT_HISTORY_ERROR, current_run, folder_lock, loop_runs, where

#: What a resumable run was cancelled after, by its status (the reason recorded).
_AFTER = {"crashed": "a crash", "interrupted": "an interrupt", "agent-error": "agent errors"}


def _missing(path: Path) -> bool:
    """Whether nothing is at ``path``: ``False`` when something is there or when it cannot
    be told (a folder this user may not read: opening the history then says why)."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    return False


def cancel(state_root: Path) -> tuple[int, str]:
    """Cancel the current run in the state folder ``state_root``: see :func:`_cancel`.

    Returns:
        ``(exit code, message)``; :data:`EXIT_HISTORY_ERROR` when the history cannot be
        opened or written (a read-only folder, say).
    """
    try:
        return _cancel(state_root)
    except (sqlite3.Error, OSError) as exc:
        return EXIT_HISTORY_ERROR, (f"pytest-ralph: cannot record the cancel in "
                                    f"{state_root / DB_NAME}: {exc}; check that the state "
                                    "folder and its files are writable by you")


def _cancel(state_root: Path) -> tuple[int, str]:
    """Cancel the current run in the state folder ``state_root`` (idempotent).

    The current run is the one whose loop holds the folder's lock, else the run started
    last. A running loop gets its ``cancel_requested`` flag set and, when it runs on this
    host, SIGTERM; it then ends the run as ``cancelled`` (exit 2). A loop on another host
    sees the flag at its next iteration boundary. A run that stopped without finishing
    (interrupted, crashed, agent-error, or marked ``running`` by a loop that no longer
    holds the lock) is marked ``cancelled``, so that nothing restarts it by itself; only
    an explicit ``pytest --ralph`` resumes it. When the lock cannot be asked, only the
    flag is set and nothing is signalled.

    Returns:
        ``(exit code, message)``: 0 when the run is cancelled (now or before) or there is
        nothing to cancel; :data:`EXIT_HISTORY_ERROR` when the history cannot be opened.
    """
    db = state_root / DB_NAME
    if _missing(db):
        return 0, f"pytest-ralph: nothing to cancel: no runs yet in {state_root}"
    try:
        history = History.open(db)
    except HistoryError as exc:
        return EXIT_HISTORY_ERROR, f"pytest-ralph: {exc}"
    with history:
        lock = folder_lock(state_root)
        run = current_run(history, lock) or history.last_run()
        if run is None:
            return 0, f"pytest-ralph: nothing to cancel: no runs yet in {state_root}"
        drv = history.driver(run.id)
        if drv is not None:
            return _disarm(history, run, drv)
        if run.status == "cancelled":
            return 0, (f"pytest-ralph: run {run.id} is already cancelled; `pytest --ralph` "
                       "resumes it")
        running = loop_runs(run, lock) if run.status == "running" else False
        if running:
            newly = history.request_cancel(run.id)
            again = "requested" if newly else "requested again"
            if run.hostname != socket.gethostname():
                return 0, (f"pytest-ralph: cancel {again}: run {run.id} ({where(run)}) "
                           "stops at its next iteration boundary, writes its report and "
                           "exits 2")
            assert run.pid is not None
            # still the same loop, right before the signal
            if loop_runs(run, folder_lock(state_root)):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(run.pid, signal.SIGTERM)
            return 0, (f"pytest-ralph: cancel {again}: run {run.id} (pid {run.pid}) stops its "
                       "agent, writes its report and exits 2")
        if running is None:
            newly = history.request_cancel(run.id)
            return 0, (f"pytest-ralph: cancel {'requested' if newly else 'requested again'} "
                       f"for run {run.id}, without a signal: whether its loop ({where(run)}) "
                       f"still runs cannot be told ({lock.problem}); a running loop stops at "
                       "its next iteration boundary")
        if run.status == "running" or run.resumable:
            crashed = run.status in ("running", "crashed")
            after = (f"a crash (its loop, pid {run.pid} on {run.hostname}, was gone)"
                     if run.status == "running" else _AFTER.get(run.status, run.status))
            history.request_cancel(run.id)
            history.set_status(run.id, "cancelled", f"cancelled by --ralph-cancel after {after}")
            what = (f"crashed: its loop, pid {run.pid}, is gone" if crashed else
                    f"{run.status}, no loop running")
            return 0, (f"pytest-ralph: run {run.id} ({what}) is now cancelled; `pytest "
                       "--ralph` resumes it")
        return 0, (f"pytest-ralph: nothing to cancel: the last run {run.id} already ended "
                   f"({run.status})")


def _disarm(history: History, run: StoredRun, drv: StoredDriver) -> tuple[int, str]:
    """Cancel a run of the Claude Code Stop hook: mark it ``cancelled`` and remove its arming
    file, so that the hook lets every session stop again (idempotent)."""
    removed = remove_marker(drv.marker, run.id)
    if run.status != "running":
        note = f"; removed its arming file {drv.marker}" if removed else ""
        return 0, (f"pytest-ralph: nothing to cancel: the Claude Code run {run.id} already "
                   f"ended ({run.status}){note}")
    history.request_cancel(run.id)
    who = (f"Claude Code session {drv.session_id}" if drv.session_id else
           "no session had adopted it yet")
    history.finish_run(run.id, "cancelled", 2, f"disarmed by --ralph-cancel ({who})",
                       _dt.datetime.now(_dt.timezone.utc))
    return 0, (f"pytest-ralph: run {run.id} is disarmed ({who}): the Stop hook lets every "
               f"session stop again; `pytest --ralph-init --ralph-driver claude` arms a new run")
