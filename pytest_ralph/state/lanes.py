"""Parallel runs and their lanes in the one run history (tables ``parallel_runs`` and
``lanes``, schema 4).

A ``pytest --ralph --ralph-parallel N`` run is recorded in the ``ralph.db`` of the user's state
folder: one ``parallel_runs`` row, and for each lane's own run (``pytest --ralph --ralph-story
ID`` in the lane's worktree, on its own state folder ``<state>/parallel/<run>/<key>.<attempt>
.state``) its ``runs`` row with every iteration, agent run, agent attempt, criterion result
and event, plus a ``lanes`` row naming the parallel run, the story, the attempt and the lane.

How the lanes' runs get there (the design): each lane writes only its own ``ralph.db`` in its
own state folder, as a single loop does, and the parallel controller, which holds the lock of
the user's state folder, copies them in (:meth:`LanesMixin.import_lane`) when a lane ends,
when the run is resumed after a crash, when it is interrupted and at its end. Why not let the
lanes write the main history directly:

- one writer per history, which the state-folder lock guarantees: a loop notices any other
  write to its history as damage (:meth:`pytest_ralph.loop.store.RunStore.check`), and N lanes
  would otherwise race for SQLite's write lock;
- the main history stays out of the lanes' reach: a lane's agent and check phases are
  sandboxed with the state folder read-only to them, and nothing a lane runs needs to write
  outside its own worktree and state folder;
- a lane's own history is the record it resumes from after a crash; the copy in the main
  history is rebuilt from it.

A copy is idempotent, keyed by the lane's run id: the lane's runs already in the main history
are deleted (their iterations, agent runs, criterion results, attempts and events with them)
and inserted again from the lane's history, in one transaction. So after a kill -9 of the
controller and a resume, which copies each lane again when it ends, every iteration is there
exactly once: the lane's own history holds each iteration once (its primary key is the run
id and the iteration number), and so does the copy.

This module does not import pytest.
"""

from __future__ import annotations

import datetime as _dt
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from ..util.text import now as _now
from .records import HistoryError, NoHistory, from_iso, iso
from .store import Store

#: Statuses of a parallel run: ``running`` while its controller runs (or until a resume after
#: a crash), then how it ended.
PARALLEL_STATUSES = ("running", "complete", "incomplete", "interrupted")

#: The tables copied from a lane's history, parents first, with the columns left out (the
#: integer ids of ``agent_attempts`` and ``events`` are the main history's own).
_COPIED: tuple[tuple[str, frozenset[str]], ...] = (
    ("runs", frozenset()), ("iterations", frozenset()), ("agent_runs", frozenset()),
    ("criterion_results", frozenset()), ("agent_attempts", frozenset({"id"})),
    ("events", frozenset({"id"})), ("drivers", frozenset()))


@dataclass(frozen=True)
class StoredLane:
    """One row of ``lanes`` with what its run says.

    Attributes:
        run_id: the lane's own run.
        parallel_run: the parallel run.
        story: the story the lane worked.
        attempt: the story's attempt (1, then 2... after the merge queue undid a merge).
        lane: the lane's branch.
        state: the lane's own state folder.
        imported: when the controller last copied the run in.
        status: the run's status (:data:`pytest_ralph.state.records.RUN_STATUSES`).
        iterations: iterations recorded, the baseline check not counted.
    """

    run_id: str
    parallel_run: str
    story: str
    attempt: int
    lane: str
    state: Path
    imported: _dt.datetime
    status: str
    iterations: int


@dataclass(frozen=True)
class StoredParallelRun:
    """One row of ``parallel_runs``.

    Attributes:
        id: the parallel run id (that of ``parallel.json``).
        prd: the PRD file.
        base: the commit the lanes started from.
        branch: the user's branch, ``""`` for a detached HEAD.
        status: one of :data:`PARALLEL_STATUSES`.
        started, finished, updated: UTC times (``finished`` ``None`` until it ends).
        pid: the controller's pid.
        hostname: the controller's host.
    """

    id: str
    prd: Path
    base: str
    branch: str
    status: str
    started: _dt.datetime
    finished: _dt.datetime | None
    updated: _dt.datetime
    pid: int | None
    hostname: str


class LanesMixin(Store):
    """The methods of :class:`pytest_ralph.state.history.History` on parallel runs."""

    def begin_parallel(self, run_id: str, *, prd: Path, base: str, branch: str | None,
                       started: _dt.datetime, pid: int, hostname: str) -> None:
        """Record the parallel run ``run_id`` as ``running`` under the controller ``pid``:
        a new row, or (a resumed run) the row there with its new controller.

        Raises:
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
            HistoryError: the history is open read-only.
        """
        now = iso(_now())
        with self._write() as conn:
            conn.execute(
                "INSERT INTO parallel_runs (id, prd, base, branch, status, started, updated, "
                "pid, hostname) VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?) ON CONFLICT (id) DO "
                "UPDATE SET status = 'running', finished = NULL, updated = excluded.updated, "
                "pid = excluded.pid, hostname = excluded.hostname",
                (run_id, str(prd), base, branch or "", iso(started), now, pid, hostname))

    def finish_parallel(self, run_id: str, status: str) -> None:
        """Record how the parallel run ``run_id`` ended (``interrupted`` leaves it
        resumable, without a ``finished`` time).

        Raises:
            ValueError: ``status`` is not an end of :data:`PARALLEL_STATUSES`.
            KeyError: no such parallel run.
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
            HistoryError: the history is open read-only.
        """
        if status == "running" or status not in PARALLEL_STATUSES:
            raise ValueError(f"cannot end a parallel run with status {status!r}; expected one "
                             f"of {', '.join(PARALLEL_STATUSES[1:])}")
        now = iso(_now())
        with self._write() as conn:
            cur = conn.execute("UPDATE parallel_runs SET status = ?, finished = ?, updated = ? "
                               "WHERE id = ?", (status, None if status == "interrupted"
                                                else now, now, run_id))
            if cur.rowcount == 0:
                raise KeyError(f"no parallel run {run_id!r} in {self.path}")

    def import_lane(self, parallel_run: str, *, story: str, attempt: int, lane: str,
                    state: Path) -> list[str]:
        """Copy the runs of a lane's own history (``<state>/ralph.db``) into this one, in one
        transaction, replacing what an earlier copy of the same runs put here (see the
        module's docstring): call it as often as wanted.

        Args:
            parallel_run: the parallel run (recorded with :meth:`begin_parallel`).
            story: the lane's story.
            attempt: the story's attempt (>= 1).
            lane: the lane's branch.
            state: the lane's own state folder.

        Returns:
            The ids of the runs copied (``[]`` when the lane has no history yet).

        Raises:
            HistoryError: the lane's history cannot be read (damaged, a newer schema, not a
                history); or one of its run ids is a run of this history that is not this
                lane's (nothing is copied, nothing is replaced).
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
        """
        from .opening import open_database

        db = state / "ralph.db"
        try:
            src, _ = open_database(db, readonly=True)
        except NoHistory:
            return []
        try:
            src.execute("BEGIN")  # one snapshot of the lane's history
            tables = {str(r[0]) for r in src.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            ids = [str(r[0]) for r in src.execute("SELECT id FROM runs ORDER BY started")]
            rows: list[tuple[str, list[str], list[tuple[object, ...]]]] = []
            for table, skip in _COPIED:
                if table not in tables:
                    continue
                mine = self._columns(self._conn, table)
                cols = [c for c in self._columns(src, table) if c in mine and c not in skip]
                order = " ORDER BY id" if "id" in skip else ""
                rows.append((table, cols, src.execute(
                    f"SELECT {', '.join(cols)} FROM {table}{order}").fetchall()))
            src.execute("COMMIT")
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot read the run history {db} of the lane of story "
                               f"{story} (attempt {attempt}): {exc}") from None
        finally:
            src.close()
        if not ids:
            return []
        now = iso(_now())
        with self._write() as conn:
            for run_id in ids:
                row = conn.execute("SELECT parallel_run, story FROM lanes WHERE run_id = ?",
                                   (run_id,)).fetchone()
                taken = conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone()
                if taken is not None and (row is None or tuple(row) != (parallel_run, story)):
                    raise HistoryError(
                        f"the run {run_id} of the lane of story {story} ({db}) is already in "
                        f"{self.path} as another run: it was not copied; its own history "
                        "keeps it")
                conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
            for table, cols, values in rows:
                marks = ", ".join("?" for _ in cols)
                conn.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})",
                                 values)
            conn.executemany(
                "INSERT INTO lanes (run_id, parallel_run, story, attempt, lane, state, "
                "imported) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(run_id, parallel_run, story, attempt, lane, str(state), now)
                 for run_id in ids])
        return ids

    @staticmethod
    def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
        return [str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")]

    # -- reading -----------------------------------------------------------------------------

    def parallel_run(self, run_id: str | None = None) -> StoredParallelRun | None:
        """The parallel run ``run_id`` (``None``: the one started last), or ``None``."""
        if not self.v4:
            return None
        sql = ("SELECT id, prd, base, branch, status, started, finished, updated, pid, "
               "hostname FROM parallel_runs ")
        row = (self._conn.execute(sql + "WHERE id = ?", (run_id,)) if run_id is not None else
               self._conn.execute(sql + "ORDER BY started DESC, id DESC LIMIT 1")).fetchone()
        if row is None:
            return None
        return StoredParallelRun(str(row[0]), Path(row[1]), str(row[2]), str(row[3]),
                                 str(row[4]), from_iso(row[5]),
                                 None if row[6] is None else from_iso(row[6]), from_iso(row[7]),
                                 None if row[8] is None else int(row[8]), str(row[9]))

    def lanes(self, parallel_run: str) -> list[StoredLane]:
        """The lanes' runs of ``parallel_run`` copied in so far, by story, attempt and start."""
        if not self.v4:
            return []
        rows = self._conn.execute(
            "SELECT l.run_id, l.parallel_run, l.story, l.attempt, l.lane, l.state, l.imported, "
            "r.status, (SELECT count(*) FROM iterations i WHERE i.run_id = l.run_id AND "
            "i.n > 0) FROM lanes l JOIN runs r ON r.id = l.run_id WHERE l.parallel_run = ? "
            "ORDER BY l.story, l.attempt, r.started", (parallel_run,)).fetchall()
        return [StoredLane(str(r[0]), str(r[1]), str(r[2]), int(r[3]), str(r[4]), Path(r[5]),
                           from_iso(r[6]), str(r[7]), int(r[8])) for r in rows]

    def without_lanes(self) -> str:
        """The SQL condition on ``runs`` (aliased as nothing) that leaves the lanes' runs
        out: ``""`` before schema 4."""
        return " id NOT IN (SELECT run_id FROM lanes) " if self.v4 else ""
