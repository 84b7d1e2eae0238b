"""The run history: every run, iteration, agent run and criterion result in SQLite.

The history lives in ``ralph.db`` in the state folder and is written with the standard
library's :mod:`sqlite3` only. One loop writes it (the state-folder lock sees to that);
any number of readers (``pytest --ralph-status``, ``pytest --ralph-cancel``) may open it
at the same time from other terminals.

Connection settings:

- ``journal_mode=WAL``: readers never block the writer and the writer never blocks
  readers; a reader sees the last committed iteration, never half of one.
- ``foreign_keys=ON``: an iteration cannot name a run that does not exist.
- ``synchronous=FULL``: a commit is on disk before the loop moves on (one fsync per
  commit, a few milliseconds; the loop commits once per iteration, minutes apart), so an
  iteration survives a power cut too, not only a crash of the loop.
- busy timeout :data:`BUSY_TIMEOUT` seconds; autocommit mode (``isolation_level=None``)
  with an explicit ``BEGIN IMMEDIATE`` ... ``COMMIT`` around every write call: each write
  call is exactly one transaction.

The schema is in :mod:`pytest_ralph.state.schema`, how a file is opened (and a damaged one
moved aside) in :mod:`pytest_ralph.state.opening`, the records read back in
:mod:`pytest_ralph.state.records`. :class:`History` is built from
:class:`pytest_ralph.state.store.Store` (the connection and its transactions) and the
methods of the tables of iterations (:mod:`pytest_ralph.state.iterations`) and of driven
runs (:mod:`pytest_ralph.state.drivers`) and of parallel runs and their lanes
(:mod:`pytest_ralph.state.lanes`: the one writer of this history is the parallel controller
then, which copies each lane's own run in).

This module does not import pytest.
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..util.redact import Redactor
from ..util.text import now as _now
from .drivers import DriversMixin
from .iterations import IterationsMixin
from .lanes import LanesMixin
from .opening import open_database
from .records import RUN_STATUSES, StoredEvent, StoredRun, from_iso, iso, stored_run, to_json
from .schema import RUN_COLUMNS


class History(IterationsMixin, DriversMixin, LanesMixin):
    """An open run history. Get one with :meth:`History.open`; close it with :meth:`close`
    or a ``with`` block. Not shared between threads.

    Attributes:
        path: the database file.
        readonly: opened read-only (write calls raise :class:`HistoryError`).
        journal_mode: the journal mode in effect (``wal`` unless the file system cannot
            do WAL, e.g. some network file systems).

    Secrets are never written: every text a write call stores (the agent argv, the
    settings, stop reasons, check-phase errors, criterion texts and failure messages, agent
    log tails, diff stats, blocked-story reasons, event messages; strings inside JSON columns
    too, mapping keys kept) goes through :class:`pytest_ralph.util.redact.Redactor` first. Ids,
    paths, times, digests and fingerprints are stored as they are. What is read back is
    therefore the redacted text (``[redacted $NAME]``).
    """

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path, *, readonly: bool = False,
             redactor: Redactor | None = None) -> History:
        """Open (for writing: create or migrate) the history at ``path``.

        For writing, an existing file is first inspected through a read-only connection,
        so that a damaged file, another program's database or a newer schema is not
        changed in any way (not even switched to WAL): ``PRAGMA quick_check`` (it reads the
        whole file: about 1 ms per MB with a warm cache, 0.1 s for 100 iterations of 2,000
        criteria) and the schema version. Then the file is opened for
        writing (created if missing; its folder must exist) and missing schema migrations
        are applied in one transaction. A missing, zero-byte or table-less database is a
        new history.

        ``readonly=True`` (for ``--ralph-status``) opens the file through a
        ``file:...?mode=ro`` URI: it never creates the database, never migrates, never
        moves anything, and never blocks the writer (WAL readers take no write lock). It
        skips ``quick_check`` (a damaged file still fails with :class:`HistoryError` when
        its schema cannot be read). It is not free of writes, though: a reader of a WAL
        database needs the ``-shm`` index next to it and SQLite creates ``-shm`` (and
        ``-wal``) when they are missing, as for any WAL reader. When they are missing and
        cannot be created (a read-only folder or file system), SQLite fails with "unable to
        open database file" (or, in a folder it cannot write holding a file it can, "attempt
        to write a readonly database"); the open then retries with ``immutable=1`` added to the URI,
        which reads the database file alone, without any lock or ``-shm``. That snapshot is
        complete: with no ``-shm`` file no connection has the database open in WAL mode, so
        every commit has been checkpointed into the file (unless someone deleted ``-shm``
        and left a ``-wal``, whose commits would then not be seen).

        Args:
            path: the database file (``<state folder>/ralph.db``).
            readonly: open for reading only.
            redactor: what redacts the text the write calls store; ``None``: the secrets of
                the environment when the first write is made (:meth:`Redactor.from_env`).

        Returns:
            The open history.

        Raises:
            NoHistory: ``readonly`` and there is no history yet (no file, or an empty
                database); nothing was created.
            HistoryError: the file is damaged or not a SQLite database (for writing: it was
                moved aside to ``<name>.damaged-<UTC time>`` with its ``-wal``/``-shm``
                files, and the message says where; read-only: left alone); it is another
                program's SQLite database (left alone); it has a newer schema version (left
                alone); or it cannot be opened (permissions, a missing folder, locked longer
                than :data:`BUSY_TIMEOUT`; read-only, the message says which permissions
                SQLite needs).
        """
        conn, mode = open_database(path, readonly=readonly)
        return cls(conn, path, readonly=readonly, journal_mode=mode, redactor=redactor)

    # -- writing -----------------------------------------------------------------------------

    def begin_run(self, run_id: str, *, prd: Path, rootdir: Path, argv: Sequence[str],
                  settings: Mapping[str, Any], started: _dt.datetime, pid: int | None,
                  hostname: str, oracle: Mapping[str, Any] | None = None) -> None:
        """Record a new run with status ``running`` (and a ``status`` event).

        Args:
            run_id: the run id (``20261129-235728-834fa6``).
            prd: the PRD file.
            rootdir: the project root.
            argv: the agent argv.
            settings: the effective settings as a plain dict; values that are not JSON
                (paths, say) are stored as their ``str``.
            started: when the run started (naive times are taken as UTC).
            pid: the loop's process id (``os.getpid()``).
            hostname: the loop's host (``socket.gethostname()``).
            oracle: the oracle snapshot of the run's start (a JSON object), kept so that a
                resumed run compares against the same start.

        Raises:
            sqlite3.IntegrityError: a run with this id exists.
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
            HistoryError: the history is open read-only.
        """
        when = iso(started)
        with self._write() as conn:
            conn.execute(
                "INSERT INTO runs (id, prd, rootdir, agent_argv, settings, status, started, "
                "updated, pid, hostname, oracle) VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                (run_id, str(prd), str(rootdir), self._json(list(argv)),
                 self._json(dict(settings)), when, when, pid, hostname,
                 to_json(dict(oracle or {}))))
            self._event(conn, run_id, None, "status", f"running (pid {pid} on {hostname})")

    def finish_run(self, run_id: str, status: str, exit_code: int | None, reason: str,
                   finished: _dt.datetime) -> None:
        """Record how a run ended (and a ``status`` event).

        Args:
            run_id: the run.
            status: one of :data:`RUN_STATUSES` except ``running``.
            exit_code: the exit code of ``pytest --ralph``.
            reason: the stop reason, one sentence.
            finished: when it ended.

        Raises:
            ValueError: ``status`` is ``running`` or unknown.
            KeyError: no such run.
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
            HistoryError: the history is open read-only.
        """
        if status == "running" or status not in RUN_STATUSES:
            raise ValueError(f"cannot finish a run with status {status!r}; expected one of "
                             f"{', '.join(s for s in RUN_STATUSES if s != 'running')}")
        when = iso(finished)
        reason = self._text(reason)
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE runs SET status = ?, exit_code = ?, reason = ?, finished = ?, "
                "updated = ? WHERE id = ?", (status, exit_code, reason, when, when, run_id))
            self._require(cur, run_id)
            self._event(conn, run_id, None, "status",
                        f"{status} (exit {exit_code})" + (f": {reason}" if reason else ""))

    def set_status(self, run_id: str, status: str, reason: str = "", *,
                   pid: int | None = None, hostname: str | None = None) -> None:
        """Change a run's status (and add a ``status`` event). Setting ``running`` (a
        resumed run) also clears ``finished`` and ``exit_code``; pass the resuming
        process's ``pid`` and ``hostname`` so that :meth:`mark_crashed_if_dead` watches
        the right process. ``cancel_requested`` is left as it is (see :meth:`clear_cancel`).

        Raises:
            ValueError: ``status`` is not one of :data:`RUN_STATUSES`.
            KeyError: no such run.
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
            HistoryError: the history is open read-only.
        """
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}; expected one of "
                             f"{', '.join(RUN_STATUSES)}")
        now = iso(_now())
        reason = self._text(reason)
        sets = ["status = ?", "reason = ?", "updated = ?"]
        args: list[Any] = [status, reason, now]
        if status == "running":
            sets += ["finished = NULL", "exit_code = NULL"]
        if pid is not None:
            sets.append("pid = ?")
            args.append(pid)
        if hostname is not None:
            sets.append("hostname = ?")
            args.append(hostname)
        with self._write() as conn:
            cur = conn.execute(f"UPDATE runs SET {', '.join(sets)} WHERE id = ?",
                               (*args, run_id))
            self._require(cur, run_id)
            self._event(conn, run_id, None, "status", status + (f": {reason}" if reason else ""))

    def set_oracle(self, run_id: str, oracle: Mapping[str, Any]) -> None:
        """Replace the oracle snapshot of a run (the loop adds what it learnt from the
        baseline's imports, :func:`pytest_ralph.oracle.snapshot.with_imports`).

        Raises:
            KeyError: no such run.
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
            HistoryError: the history is open read-only.
        """
        with self._write() as conn:
            cur = conn.execute("UPDATE runs SET oracle = ?, updated = ? WHERE id = ?",
                               (to_json(dict(oracle)), iso(_now()), run_id))
            self._require(cur, run_id)

    def update_run(self, run_id: str, *, argv: Sequence[str],
                   settings: Mapping[str, Any]) -> None:
        """Record the agent argv and settings a resumed run goes on with.

        Raises:
            KeyError: no such run.
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
            HistoryError: the history is open read-only.
        """
        with self._write() as conn:
            cur = conn.execute("UPDATE runs SET agent_argv = ?, settings = ?, updated = ? "
                               "WHERE id = ?", (self._json(list(argv)),
                                                self._json(dict(settings)),
                                                iso(_now()), run_id))
            self._require(cur, run_id)

    def add_event(self, run_id: str, kind: str, message: str, n: int | None = None) -> int:
        """Append an event to a run's timeline.

        Args:
            run_id: the run (must exist).
            kind: what happened, a short word (``agent-started``, ``flaky``...).
            message: one line for people.
            n: the iteration it belongs to (need not be recorded yet), or ``None``.

        Returns:
            The new event's id.

        Raises:
            sqlite3.IntegrityError: no such run.
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
            HistoryError: the history is open read-only.
        """
        with self._write() as conn:
            return self._event(conn, run_id, n, kind, message)

    def request_cancel(self, run_id: str) -> bool:
        """Ask a run to stop (``pytest --ralph-cancel``). Idempotent: the flag stays set
        until :meth:`clear_cancel`; a ``cancel-requested`` event marks the first request.

        Returns:
            ``True`` if this call set the flag, ``False`` if it was already set.

        Raises:
            KeyError: no such run.
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
            HistoryError: the history is open read-only.
        """
        return self._set_cancel(run_id, True, "cancel-requested",
                                f"cancel requested by pid {os.getpid()} on "
                                f"{socket.gethostname()}")

    def clear_cancel(self, run_id: str) -> bool:
        """Clear a run's cancel request (a person resumes a cancelled run on purpose).

        Returns:
            ``True`` if a request was cleared.

        Raises:
            KeyError: no such run.
            HistoryError: the history is open read-only.
        """
        return self._set_cancel(run_id, False, "cancel-cleared", "cancel request cleared")

    def _set_cancel(self, run_id: str, value: bool, kind: str, message: str) -> bool:
        """Set the cancel flag to ``value``; add an event only when it changed."""
        with self._write() as conn:
            cur = conn.execute("UPDATE runs SET cancel_requested = ?, updated = ? "
                               "WHERE id = ? AND cancel_requested = ?",
                               (int(value), iso(_now()), run_id, int(not value)))
            if cur.rowcount == 0:
                self._require(conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)),
                              run_id)
                return False
            self._event(conn, run_id, None, kind, message)
            return True

    def cancel_requested(self, run_id: str) -> bool:
        """Whether a cancel was requested for the run (cheap; the loop polls it).

        Raises:
            KeyError: no such run.
        """
        row = self._conn.execute("SELECT cancel_requested FROM runs WHERE id = ?",
                                 (run_id,)).fetchone()
        if row is None:
            raise KeyError(f"no run {run_id!r} in {self.path}")
        return bool(row[0])

    def mark_crashed_if_dead(self, is_alive: Callable[[int], bool], *,
                             hostname: str | None = None) -> list[str]:
        """Turn every ``running`` run of this host whose process is gone into ``crashed``.
        Driven runs (a row in ``drivers``) have no process between two Stops and are left
        alone, and so are the copies of a parallel run's lanes' runs (their own histories
        say how they ended; the parallel controller copies them in again).

        Runs of other hosts are left alone (their pids mean nothing here). A run without
        a pid is taken as dead. The caller that holds the state-folder lock knows no other
        loop runs there and may pass ``lambda pid: False``.

        Args:
            is_alive: ``is_alive(pid)`` says whether the process still runs.
            hostname: this host (default ``socket.gethostname()``).

        Returns:
            The ids of the runs marked ``crashed``, oldest first.

        Raises:
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
            HistoryError: the history is open read-only.
        """
        host = socket.gethostname() if hostname is None else hostname
        marked: list[str] = []
        with self._write() as conn:
            lanes = self.without_lanes()
            rows = conn.execute("SELECT id, pid FROM runs WHERE status = 'running' AND "
                                "hostname = ? AND id NOT IN (SELECT run_id FROM drivers) "
                                + (f"AND {lanes}" if lanes else "")
                                + "ORDER BY started, id", (host,)).fetchall()
            now = iso(_now())
            for run_id, pid in rows:
                if pid is not None and is_alive(int(pid)):
                    continue
                reason = (f"the loop process (pid {pid} on {host}) ended without finishing "
                          "the run")
                conn.execute("UPDATE runs SET status = 'crashed', reason = ?, updated = ? "
                             "WHERE id = ?", (reason, now, run_id))
                self._event(conn, run_id, None, "status", f"crashed: {reason}")
                marked.append(str(run_id))
        return marked

    # -- reading -----------------------------------------------------------------------------

    def last_run(self, prd: Path | None = None) -> StoredRun | None:
        """The run started last (of ``prd``, if given), or ``None`` if there is none. The
        runs of a parallel run's lanes (:meth:`lanes`) are left out: they are not this
        folder's loop's, and each belongs to a worktree of its own."""
        lanes = self.without_lanes()
        if prd is None:
            row = self._conn.execute(f"SELECT {RUN_COLUMNS} FROM runs "
                                     + (f"WHERE {lanes}" if lanes else "")
                                     + "ORDER BY started DESC, id DESC LIMIT 1").fetchone()
        else:
            row = self._conn.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE prd = ? "
                                     + (f"AND {lanes}" if lanes else "")
                                     + "ORDER BY started DESC, id DESC LIMIT 1",
                                     (str(prd),)).fetchone()
        return None if row is None else stored_run(row)

    def run(self, run_id: str) -> StoredRun | None:
        """The run ``run_id``, or ``None``."""
        row = self._conn.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE id = ?",
                                 (run_id,)).fetchone()
        return None if row is None else stored_run(row)

    def runs(self, limit: int = 20) -> list[StoredRun]:
        """The last ``limit`` runs, newest first, the lanes' runs left out (see
        :meth:`last_run`)."""
        lanes = self.without_lanes()
        rows = self._conn.execute(f"SELECT {RUN_COLUMNS} FROM runs "
                                  + (f"WHERE {lanes}" if lanes else "")
                                  + "ORDER BY started DESC, id DESC LIMIT ?",
                                  (limit,)).fetchall()
        return [stored_run(r) for r in rows]

    def events(self, run_id: str) -> list[StoredEvent]:
        """A run's events, oldest first (``[]`` for an unknown run)."""
        rows = self._conn.execute("SELECT id, run_id, n, time, kind, message FROM events "
                                  "WHERE run_id = ? ORDER BY id", (run_id,)).fetchall()
        return [StoredEvent(int(i), str(r), None if n is None else int(n), from_iso(t),
                            str(k), str(m)) for i, r, n, t, k, m in rows]

