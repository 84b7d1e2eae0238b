"""A parallel run's hold on the user's state folder: its loop lock and its run history.

The controller of ``pytest --ralph --ralph-parallel N`` (:class:`pytest_ralph.parallel.
scheduler.Scheduler`) takes the same lock of the state folder as a single ``pytest --ralph``
loop (:meth:`pytest_ralph.state.folder.StateDir.lock`, an OS file lock, so a controller
killed with kill -9 holds nothing and the same command resumes its run): one controller or
one loop works on a state folder at a time. A second controller of the same run, or a
single loop, is refused with a usage error (exit 4) naming the pid of the one that runs and
how to stop it (``pytest --ralph-cancel``); so is a controller while a single loop runs.
The lanes' own loops lock their own state folders (``<state>/parallel/<run>/<key>.<attempt>
.state``), never this one.

With the lock held, :class:`RunHistory` is the one writer of ``<state>/ralph.db``: it
records the parallel run (table ``parallel_runs``) and copies each lane's own run into it
(:meth:`pytest_ralph.state.lanes.LanesMixin.import_lane`, where the design is told: the lanes
write only their own histories, the controller copies them in, idempotently, keyed by the
lanes' run ids) when a lane ends, when a run is resumed, interrupted and at its end. So
``sqlite3 .pytest_ralph/ralph.db`` and ``pytest --ralph-status`` see the whole run, each
lane's iterations once.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
import socket
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

from ..state.folder import DB_NAME, LockedError, StateDir
from ..state.history import History
from ..state.records import HistoryError
from .lanerecord import Record, run_folder
from .worktrees import ParallelUsageError

__all__ = ["RunHistory"]

_ATTEMPT = re.compile(r"\.(\d+)\.state$")


class RunHistory:
    """The lock and the run history of the state folder ``state_dir``, for one parallel run.

    Args:
        state_dir: the user's state folder.
        say: prints a line for the user (the warnings).
    """

    def __init__(self, state_dir: Path, say: Callable[[str], None]) -> None:
        self.state = StateDir(state_dir)
        self._say = say
        self._history: History | None = None

    @property
    def path(self) -> Path:
        """``<state>/ralph.db``."""
        return self.state.root / DB_NAME

    @contextlib.contextmanager
    def hold(self, what: str) -> Iterator[None]:
        """Hold the state folder's loop lock (its file says ``what`` holds it) with the run
        history open for the body; release both on the way out (a kill -9 releases the lock
        too: it is an OS file lock).

        Raises:
            ParallelUsageError: another controller or loop holds the lock (the message names
                its pid and how to stop it), the folder cannot be used, or the history
                cannot be opened (damaged, a newer schema: the message says what to do).
        """
        try:
            self.state.ensure()
            lock = self.state.lock(what)
        except LockedError as exc:
            raise ParallelUsageError(str(exc)) from None
        except OSError as exc:
            raise ParallelUsageError(f"cannot use the state folder {self.state.root}: "
                                     f"{exc}") from None
        try:
            if self.state.stale_lock:
                self._say(f"pytest-ralph: warning: taking over the loop lock of "
                          f"{self.state.root} left by a loop that is not running any more "
                          f"({self.state.stale_lock})")
            try:
                self._history = History.open(self.path)
            except HistoryError as exc:
                raise ParallelUsageError(str(exc)) from None
            try:
                yield
            finally:
                self._history.close()
                self._history = None
        finally:  # a clean exit leaves no holder behind
            with contextlib.suppress(OSError, ValueError):
                lock.seek(0)
                lock.truncate()
                lock.flush()
                lock.close()

    @property
    def history(self) -> History:
        """The open run history (only within :meth:`hold`)."""
        assert self._history is not None
        return self._history

    def start(self, rec: Record) -> None:
        """Record the run ``rec`` (new, or resumed under this controller), then copy in what
        the lanes of a resumed run recorded before the crash."""
        try:
            self.history.begin_parallel(
                rec.run_id, prd=Path(rec.prd), base=rec.base, branch=rec.branch,
                started=_dt.datetime.fromtimestamp(rec.started, _dt.timezone.utc),
                pid=os.getpid(), hostname=socket.gethostname())
        except (HistoryError, sqlite3.Error) as exc:
            self._warn(rec, f"the run could not be recorded in {self.path}: {exc}")
        self.copy_all(rec)

    def end(self, rec: Record, status: str) -> None:
        """Copy in every lane's runs, then record how the run ended (``complete``,
        ``incomplete``, or ``interrupted``: resumable)."""
        self.copy_all(rec)
        try:
            self.history.finish_parallel(rec.run_id, status)
        except (HistoryError, KeyError, ValueError, sqlite3.Error) as exc:
            self._warn(rec, f"the end of the run could not be recorded in {self.path}: {exc}")

    def copy(self, rec: Record, sid: str, state: Path) -> None:
        """Copy the runs of the lane state folder ``state`` (story ``sid``; its attempt is in
        the folder's name, ``<key>.<attempt>.state``) into the run history. Idempotent; a
        failure is a warning, never lost data: the lane's own history keeps its runs."""
        st = rec.stories.get(sid, {})
        m = _ATTEMPT.search(state.name)
        attempt = int(m.group(1)) if m else int(st.get("attempt") or 1)
        try:
            self.history.import_lane(rec.run_id, story=sid, attempt=max(attempt, 1),
                                     lane=str(st.get("branch") or ""), state=state)
        except (HistoryError, sqlite3.Error) as exc:
            self._warn(rec, f"lane {sid}: its runs could not be copied into {self.path}: "
                            f"{exc}")

    def copy_all(self, rec: Record) -> None:
        """:meth:`copy` every lane state folder of the run that has a history."""
        for sid, st in rec.stories.items():
            for state in st.get("states", []):
                if (Path(state) / DB_NAME).exists():
                    self.copy(rec, sid, Path(state))

    def _warn(self, rec: Record, text: str) -> None:
        self._say(f"pytest-ralph: warning: {text} (the lanes' own histories, in "
                  f"{run_folder(self.state.root, rec.run_id)}, keep their runs)")
