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

Schema (version 3; ``STRICT`` tables when the runtime SQLite is 3.37 or newer; every time
is ISO 8601 UTC text such as ``2026-11-29T23:57:28.834000+00:00``, every duration is
seconds, every ``JSON`` column is JSON text)::

    meta(key TEXT PRIMARY KEY, value TEXT)          -- schema_version, created, created_by
    runs(id TEXT PRIMARY KEY,                       -- e.g. 20261129-235728-834fa6
         prd TEXT, rootdir TEXT,                    -- absolute paths
         agent_argv JSON list, settings JSON object,
         status TEXT CHECK IN RUN_STATUSES, exit_code INTEGER NULL, reason TEXT,
         started TEXT, finished TEXT NULL, updated TEXT,
         pid INTEGER NULL, hostname TEXT,
         cancel_requested INTEGER CHECK IN (0, 1))
    iterations(run_id -> runs ON DELETE CASCADE, n INTEGER >= 0,   -- 0 = baseline check
         story, started, finished, passing, total,
         exitstatus, check_duration,                -- of the check phase
         fingerprint, streak, error_streak,
         regressions JSON list of keys, flaky JSON list of keys,
         criteria_changed JSON list of {subject, change, criteria},
         errors JSON list of text, check_extra JSON object,
         blocked JSON object story id -> why,       -- v2: stories blocked after it
         diff_stat TEXT,                            -- v2: git diff --stat of what it changed
         PRIMARY KEY (run_id, n))
    agent_runs(run_id, n -> iterations ON DELETE CASCADE,
         argv JSON list, exit_code INTEGER NULL, duration REAL,
         outcome TEXT CHECK IN AGENT_OUTCOMES, log_path TEXT, detail TEXT,  -- the log tail
         cost_usd REAL NULL, input_tokens, output_tokens, turns INTEGER NULL,  -- v2: as the
         why TEXT,                                  -- CLI's structured output reported them
         PRIMARY KEY (run_id, n))
    agent_attempts(id INTEGER PRIMARY KEY, run_id -> runs ON DELETE CASCADE,   -- v2
         n INTEGER >= 1,                            -- the iteration it was an attempt at
         started, argv, exit_code, duration, outcome, log_path, why, cost_usd, input_tokens,
         output_tokens, turns,
         pause REAL >= 0)                           -- seconds the loop paused after it
    -- an agent run that did not spend an iteration (rate limited); the iteration's own
    -- agent run is the one in agent_runs
    criterion_results(run_id, n -> iterations ON DELETE CASCADE,
         pos INTEGER,                               -- collection order
         story, criterion, nodeid, text, kind,
         outcome TEXT CHECK IN ('passed', 'failed'), message, claimed 0/1, duration,
         PRIMARY KEY (run_id, n, story, criterion))
    events(id INTEGER PRIMARY KEY AUTOINCREMENT, run_id -> runs ON DELETE CASCADE,
         n INTEGER NULL, time TEXT, kind TEXT, message TEXT)
    drivers(run_id PRIMARY KEY -> runs ON DELETE CASCADE,   -- v3: a run driven from
         driver TEXT CHECK IN ('claude'),           -- outside (a Claude Code Stop hook)
         marker TEXT,                               -- the arming file the hook looks for
         inifile TEXT,                              -- '' when none
         session_id TEXT,                           -- '' until a session adopts the run
         armed TEXT, adopted TEXT NULL,
         turn_started TEXT NULL,                    -- when the last block was answered
         tree TEXT)                                 -- git tree id at that time ('' unknown)
    -- a driven run keeps status 'running' with no pid between two Stops

The schema version is kept in ``meta`` (and the file is tagged with ``PRAGMA application_id
=`` :data:`APPLICATION_ID`). :data:`MIGRATIONS` ``[v]`` takes a database from version ``v``
to ``v + 1``; version 0 is an empty database. :meth:`History.open` applies the missing
migrations in one transaction.

Damage (see :meth:`History.open`): before writing, an existing file is inspected through a
read-only connection, so nothing is changed before it is judged. A file that is not a SQLite
database, is truncated, or fails ``PRAGMA quick_check`` is renamed to ``<name>.damaged-<UTC
time>`` (with its ``-wal`` / ``-shm`` / ``-journal`` companions, so that a stale WAL never
meets a new database), never deleted, and :class:`HistoryError` says where it went; the next
open starts a new history. A valid SQLite database of another program (tables, but no
``meta`` schema version), or one of a newer schema version, is left where it is and
:class:`HistoryError` says what to do. A zero-byte file is an empty SQLite database: a new
history. A read-only open never moves anything and never creates the database (SQLite may
create its ``-wal`` / ``-shm`` companions, as any WAL reader does); with no history yet it
raises :class:`NoHistory`.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import socket
import sqlite3
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from ..agents.run import AgentRun
from ..checks.results import CheckResults, CriterionResult
from ..oracle.snapshot import Change
from ..util.files import kind_of
from ..util.redact import Redactor
from ..util.text import now as _now

#: The schema version this module writes and reads.
SCHEMA_VERSION = 3

#: File name of the history in the state folder.
DB_NAME = "ralph.db"

#: ``PRAGMA application_id`` of a history file ("Rlph").
APPLICATION_ID = 0x526C7068

#: Seconds a connection waits for a lock held by another connection before giving up.
BUSY_TIMEOUT = 10.0

#: Every run status. ``running`` while the loop runs; the rest are how a run ended.
RUN_STATUSES = ("running", "complete", "limit", "breaker", "agent-error", "interrupted",
                "cancelled", "crashed", "no-criteria")

#: Statuses after which the next ``pytest --ralph`` continues the run.
RESUMABLE = ("interrupted", "cancelled", "crashed", "agent-error")

#: Every agent-run outcome (a superset of :data:`pytest_ralph.agents.run.OUTCOMES`).
AGENT_OUTCOMES = ("ok", "exit-nonzero", "timeout", "not-found", "crash", "api-error",
                  "rate-limited")

#: Criterion outcomes.
CRITERION_OUTCOMES = ("passed", "failed")

#: SQLite result codes (primary) that mean the file is damaged or not a database.
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
#: SQLite result code (primary): a file could not be opened or created.
_SQLITE_CANTOPEN = 14
#: SQLite extended result code: the database is read-only because its folder is not writable.
_SQLITE_READONLY_DIRECTORY = 1544  # SQLITE_READONLY | (6 << 8)

_UTC = _dt.timezone.utc


class HistoryError(Exception):
    """The history cannot be used. The message names the file, what was expected or found,
    and how to recover."""


class NoHistory(HistoryError):
    """A read-only open found no history yet (no file, or an empty one); nothing was
    created."""


# -- the schema ------------------------------------------------------------------------------


def _strict_supported() -> bool:
    return sqlite3.sqlite_version_info >= (3, 37, 0)


def _create_v1(conn: sqlite3.Connection, strict: bool) -> None:
    """Version 0 (empty database) -> 1. Frozen: the text of a migration never changes
    once released; later versions add migrations instead."""
    end = ") STRICT" if strict else ")"
    statuses = ("'running', 'complete', 'limit', 'breaker', 'agent-error', 'interrupted', "
                "'cancelled', 'crashed', 'no-criteria'")
    outcomes = ("'ok', 'exit-nonzero', 'timeout', 'not-found', 'crash', 'api-error', "
                "'rate-limited'")
    statements = [
        "CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL" + end,
        f"""CREATE TABLE runs (
            id TEXT PRIMARY KEY NOT NULL CHECK (id <> ''),
            prd TEXT NOT NULL,
            rootdir TEXT NOT NULL,
            agent_argv TEXT NOT NULL,
            settings TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ({statuses})),
            exit_code INTEGER,
            reason TEXT NOT NULL DEFAULT '',
            started TEXT NOT NULL,
            finished TEXT,
            updated TEXT NOT NULL,
            pid INTEGER,
            hostname TEXT NOT NULL DEFAULT '',
            cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
            oracle TEXT NOT NULL DEFAULT '{{}}'
        {end}""",
        "CREATE INDEX runs_by_started ON runs (started)",
        "CREATE INDEX runs_by_prd ON runs (prd, started)",
        "CREATE INDEX runs_by_status ON runs (status)",
        f"""CREATE TABLE iterations (
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            n INTEGER NOT NULL CHECK (n >= 0),
            story TEXT NOT NULL DEFAULT '',
            started TEXT NOT NULL,
            finished TEXT NOT NULL,
            passing INTEGER NOT NULL CHECK (passing >= 0),
            total INTEGER NOT NULL CHECK (total >= passing),
            exitstatus INTEGER NOT NULL,
            check_duration REAL NOT NULL,
            fingerprint TEXT NOT NULL,
            streak INTEGER NOT NULL CHECK (streak >= 0),
            error_streak INTEGER NOT NULL CHECK (error_streak >= 0),
            regressions TEXT NOT NULL DEFAULT '[]',
            flaky TEXT NOT NULL DEFAULT '[]',
            criteria_changed TEXT NOT NULL DEFAULT '[]',
            errors TEXT NOT NULL DEFAULT '[]',
            check_extra TEXT NOT NULL DEFAULT '{{}}',
            PRIMARY KEY (run_id, n)
        {end}""",
        f"""CREATE TABLE agent_runs (
            run_id TEXT NOT NULL,
            n INTEGER NOT NULL,
            argv TEXT NOT NULL,
            exit_code INTEGER,
            duration REAL NOT NULL CHECK (duration >= 0),
            outcome TEXT NOT NULL CHECK (outcome IN ({outcomes})),
            log_path TEXT NOT NULL DEFAULT '',
            detail TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (run_id, n),
            FOREIGN KEY (run_id, n) REFERENCES iterations (run_id, n) ON DELETE CASCADE
        {end}""",
        f"""CREATE TABLE criterion_results (
            run_id TEXT NOT NULL,
            n INTEGER NOT NULL,
            pos INTEGER NOT NULL CHECK (pos >= 0),
            story TEXT NOT NULL,
            criterion TEXT NOT NULL,
            nodeid TEXT NOT NULL,
            text TEXT NOT NULL,
            kind TEXT NOT NULL,
            outcome TEXT NOT NULL CHECK (outcome IN ('passed', 'failed')),
            message TEXT NOT NULL DEFAULT '',
            claimed INTEGER NOT NULL DEFAULT 0 CHECK (claimed IN (0, 1)),
            duration REAL NOT NULL DEFAULT 0,
            PRIMARY KEY (run_id, n, story, criterion),
            FOREIGN KEY (run_id, n) REFERENCES iterations (run_id, n) ON DELETE CASCADE
        {end}""",
        f"""CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            n INTEGER CHECK (n IS NULL OR n >= 0),
            time TEXT NOT NULL,
            kind TEXT NOT NULL,
            message TEXT NOT NULL DEFAULT ''
        {end}""",
        "CREATE INDEX events_by_run ON events (run_id, id)",
        f"PRAGMA application_id = {APPLICATION_ID}",
    ]
    for sql in statements:
        conn.execute(sql)


def _migrate_v2(conn: sqlite3.Connection, strict: bool) -> None:
    """Version 1 -> 2 (frozen): what the agent's structured output said (cost, tokens,
    turns, why), the stories blocked after each iteration, and the agent runs that did not
    spend an iteration (rate limits)."""
    end = ") STRICT" if strict else ")"
    outcomes = ("'ok', 'exit-nonzero', 'timeout', 'not-found', 'crash', 'api-error', "
                "'rate-limited'")
    for column in ("cost_usd REAL", "input_tokens INTEGER", "output_tokens INTEGER",
                   "turns INTEGER", "why TEXT NOT NULL DEFAULT ''"):
        conn.execute(f"ALTER TABLE agent_runs ADD COLUMN {column}")
    conn.execute("ALTER TABLE iterations ADD COLUMN blocked TEXT NOT NULL DEFAULT '{}'")
    conn.execute("ALTER TABLE iterations ADD COLUMN diff_stat TEXT NOT NULL DEFAULT ''")
    conn.execute(f"""CREATE TABLE agent_attempts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        n INTEGER NOT NULL CHECK (n >= 1),
        started TEXT NOT NULL,
        argv TEXT NOT NULL,
        exit_code INTEGER,
        duration REAL NOT NULL CHECK (duration >= 0),
        outcome TEXT NOT NULL CHECK (outcome IN ({outcomes})),
        log_path TEXT NOT NULL DEFAULT '',
        why TEXT NOT NULL DEFAULT '',
        cost_usd REAL,
        input_tokens INTEGER,
        output_tokens INTEGER,
        turns INTEGER,
        pause REAL NOT NULL DEFAULT 0 CHECK (pause >= 0)
    {end}""")
    conn.execute("CREATE INDEX agent_attempts_by_run ON agent_attempts (run_id, id)")


def _migrate_v3(conn: sqlite3.Connection, strict: bool) -> None:
    """Version 2 -> 3 (frozen): runs driven by a Claude Code Stop hook instead of an outer
    loop process (:mod:`pytest_ralph.claude.driver`)."""
    end = ") STRICT" if strict else ")"
    conn.execute(f"""CREATE TABLE drivers (
        run_id TEXT PRIMARY KEY NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        driver TEXT NOT NULL CHECK (driver IN ('claude')),
        marker TEXT NOT NULL,
        inifile TEXT NOT NULL DEFAULT '',
        session_id TEXT NOT NULL DEFAULT '',
        armed TEXT NOT NULL,
        adopted TEXT,
        turn_started TEXT,
        tree TEXT NOT NULL DEFAULT ''
    {end}""")


#: ``MIGRATIONS[v](conn, strict)`` takes the schema from version ``v`` to ``v + 1`` inside
#: the caller's transaction; ``strict`` says whether STRICT tables may be used.
MIGRATIONS: list[Callable[[sqlite3.Connection, bool], None]] = [_create_v1, _migrate_v2,
                                                                 _migrate_v3]


# -- stored rows -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredRun:
    """One row of ``runs``.

    Attributes:
        id: the run id (``20261129-235728-834fa6``).
        prd: the PRD file.
        rootdir: the project root.
        argv: the agent argv (before ``{prompt_file}`` is replaced).
        settings: the effective settings as a JSON object (values that were not JSON,
            such as paths, as text).
        status: one of :data:`RUN_STATUSES`.
        exit_code: the exit code of ``pytest --ralph`` once finished, else ``None``.
        reason: the stop reason or the reason of the last status change.
        started: UTC time the run started.
        finished: UTC time it finished; ``None`` while running or after a crash.
        updated: UTC time of the last write to the run (status, iteration, cancel).
        pid: the process id of the loop that runs or ran it.
        hostname: the host of that process.
        cancel_requested: ``pytest --ralph-cancel`` asked the run to stop.
        oracle: the oracle snapshot taken when the run started, as
            :func:`pytest_ralph.oracle.snapshot.snapshot_to_json` gives it (``{}`` if none).
    """

    id: str
    prd: Path
    rootdir: Path
    argv: tuple[str, ...]
    settings: dict[str, Any]
    status: str
    exit_code: int | None
    reason: str
    started: _dt.datetime
    finished: _dt.datetime | None
    updated: _dt.datetime
    pid: int | None
    hostname: str
    cancel_requested: bool
    oracle: dict[str, Any] = field(default_factory=dict)

    @property
    def resumable(self) -> bool:
        """Whether the status is one the next ``pytest --ralph`` continues
        (:data:`RESUMABLE`)."""
        return self.status in RESUMABLE


@dataclass(frozen=True)
class StoredDriver:
    """One row of ``drivers``: how a run driven by a Claude Code Stop hook is wired.

    Attributes:
        run_id: the run.
        driver: ``claude``.
        marker: the arming file the hook looks for (see :mod:`pytest_ralph.claude.arming`).
        inifile: the configuration file each check phase uses, or ``None``.
        session_id: the Claude Code session that adopted the run; ``""`` until one does.
        armed: UTC time the run was armed.
        adopted: UTC time a session adopted it, or ``None``.
        turn_started: UTC time the hook last blocked a stop (the agent's turn began), or
            ``None``.
        tree: the git tree id taken at that time (see :func:`pytest_ralph.loop.gitdiff.
            tree_snapshot`), ``""`` when unknown.
    """

    run_id: str
    driver: str
    marker: Path
    inifile: Path | None
    session_id: str
    armed: _dt.datetime
    adopted: _dt.datetime | None
    turn_started: _dt.datetime | None
    tree: str


@dataclass(frozen=True)
class StoredAgentRun:
    """One row of ``agent_runs``: the agent run of one iteration.

    Attributes:
        argv: the argv that was run.
        exit_code: the exit status; negative for a signal; ``None`` on timeout or not-found.
        duration: wall-clock seconds.
        outcome: one of :data:`AGENT_OUTCOMES`.
        log_path: the file holding the agent's output.
        detail: the tail of that log as it was when the iteration was recorded.
        why: what the CLI's structured output said about the outcome, or ``""``.
        cost_usd, input_tokens, output_tokens, turns: as the CLI reported them, or ``None``.
    """

    argv: tuple[str, ...]
    exit_code: int | None
    duration: float
    outcome: str
    log_path: Path
    detail: str
    why: str = ""
    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    turns: int | None = None

    def to_agent_run(self) -> AgentRun:
        """The same run as a :class:`pytest_ralph.agents.run.AgentRun` (``log_tail`` =
        ``detail``)."""
        return AgentRun(self.argv, self.outcome, self.exit_code, self.duration, self.log_path,
                        self.detail, detail=self.why, cost_usd=self.cost_usd,
                        input_tokens=self.input_tokens, output_tokens=self.output_tokens,
                        turns=self.turns)


@dataclass(frozen=True)
class StoredAttempt:
    """One row of ``agent_attempts``: an agent run that did not spend an iteration.

    Attributes:
        n: the iteration it was an attempt at.
        started: UTC time it started.
        agent: the run (``log_tail`` empty).
        pause: seconds the loop paused after it.
    """

    n: int
    started: _dt.datetime
    agent: StoredAgentRun
    pause: float


@dataclass(frozen=True)
class StoredIteration:
    """One row of ``iterations`` with its agent run and criterion results.

    Attributes:
        run_id: the run.
        n: iteration number; 0 is the baseline check.
        story: the story the prompt asked for, or ``""``.
        started, finished: UTC times.
        passing: criteria passing after it.
        total: criteria checked.
        fingerprint: the failure fingerprint the breaker compared.
        streak: identical-failure streak after it.
        error_streak: agent-error streak after it.
        regressions: keys (``US-001::AC1``) that passed before and failed here.
        flaky: keys that failed, then passed on a re-check.
        changes: the oracle changes seen after it.
        blocked: stories blocked after it (story id -> why).
        diff_stat: ``git diff --stat`` of what it changed (``""``: unknown or nothing).
        results: the check results, criteria in collection order (empty ``criteria`` when
            read with ``with_criteria=False``; ``passing`` and ``total`` stay right).
        agent: its agent run, ``None`` for the baseline.
    """

    run_id: str
    n: int
    story: str
    started: _dt.datetime
    finished: _dt.datetime
    passing: int
    total: int
    fingerprint: str
    streak: int
    error_streak: int
    regressions: tuple[str, ...]
    flaky: tuple[str, ...]
    changes: tuple[Change, ...]
    results: CheckResults
    agent: StoredAgentRun | None = field(default=None)
    blocked: dict[str, str] = field(default_factory=dict)
    diff_stat: str = ""


@dataclass(frozen=True)
class StoredEvent:
    """One row of ``events``.

    Attributes:
        id: increasing event id.
        run_id: the run.
        n: the iteration it belongs to, or ``None``.
        time: UTC time.
        kind: what happened (``status``, ``cancel-requested``, or the caller's kind).
        message: one line for people.
    """

    id: int
    run_id: str
    n: int | None
    time: _dt.datetime
    kind: str
    message: str


# -- the history -----------------------------------------------------------------------------


class History:
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

    def __init__(self, conn: sqlite3.Connection, path: Path, *, readonly: bool,
                 journal_mode: str, redactor: Redactor | None = None) -> None:
        self._conn = conn
        self._redactor = redactor
        self.path = path
        self.readonly = readonly
        self.journal_mode = journal_mode
        #: Whether the file has the version 2 tables (a reader may open a version 1 file).
        self.v2 = bool(conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                    "name = 'agent_attempts'").fetchone())
        #: Whether the ``drivers`` table (schema 3) is there: a read-only open of an older
        #: history (never migrated) has no driven runs.
        self.v3 = bool(conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                    "name = 'drivers'").fetchone())
        self._agent_columns = _AGENT_COLUMNS_V2 if self.v2 else _AGENT_COLUMNS
        self._iteration_columns = _ITERATION_COLUMNS + (", blocked, diff_stat" if self.v2
                                                        else "")

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
        exists = _regular_or_missing(path)  # a folder or a FIFO there: HistoryError
        if readonly and not exists:
            raise NoHistory(f"no run history yet: {path} does not exist (the first "
                            "`pytest --ralph` creates it)")
        if readonly:
            try:
                try:
                    conn, mode = _open_readonly(path, immutable=False)
                except sqlite3.OperationalError as exc:
                    if not _cant_open(exc):
                        raise
                    # No -shm file and no right to create one (see above): read the file alone.
                    try:
                        conn, mode = _open_readonly(path, immutable=True)
                    except sqlite3.OperationalError as again:
                        if not _cant_open(again):
                            raise
                        raise HistoryError(
                            f"cannot read the run history {path} ({again}): SQLite needs to "
                            f"read {path.name} and, while {path.name}-shm does not exist, to "
                            f"create it in {path.parent}; check the permissions of {path} "
                            "and of its folder, or run as their owner") from None
            except BaseException as exc:
                raise _translate(exc, path, move=False) from None
            return cls(conn, path, readonly=True, journal_mode=mode, redactor=redactor)
        if path.exists():
            probe = _connect(path, readonly=True)
            try:
                _inspect(probe, path, quick_check=True)
            except BaseException as exc:
                probe.close()  # before the file is moved
                raise _translate(exc, path, move=True) from None
            probe.close()
        conn = _connect(path, readonly=False)
        try:
            mode = _prepare(conn, path)
        except BaseException as exc:
            conn.close()
            raise _translate(exc, path, move=True) from None
        return cls(conn, path, readonly=False, journal_mode=mode, redactor=redactor)

    def close(self) -> None:
        """Close the connection (idempotent). The last writer to close checkpoints the
        WAL into the database file."""
        self._conn.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def connection(self) -> sqlite3.Connection:
        """The underlying connection (autocommit mode), for tests and ad-hoc queries."""
        return self._conn

    @property
    def schema_version(self) -> int:
        """The schema version stored in the file."""
        return _read_version(self._conn, self.path)

    # -- writing -----------------------------------------------------------------------------

    @property
    def redactor(self) -> Redactor:
        """What redacts every text this history stores (see the class docstring)."""
        if self._redactor is None:
            self._redactor = Redactor.from_env()
        return self._redactor

    def _text(self, text: str) -> str:
        """``text`` as it is stored: redacted."""
        return self.redactor.text(text)

    def _json(self, value: Any) -> str:
        """``value`` as a JSON column stores it: JSON text with every string redacted."""
        return _json(self.redactor.json(json.loads(_json(value))))

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: BEGIN IMMEDIATE ... COMMIT, ROLLBACK on any exception."""
        if self.readonly:
            raise HistoryError(f"the run history {self.path} is open read-only")
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

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
        when = _iso(started)
        with self._write() as conn:
            conn.execute(
                "INSERT INTO runs (id, prd, rootdir, agent_argv, settings, status, started, "
                "updated, pid, hostname, oracle) VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                (run_id, str(prd), str(rootdir), self._json(list(argv)),
                 self._json(dict(settings)), when, when, pid, hostname,
                 _json(dict(oracle or {}))))
            self._event(conn, run_id, None, "status", f"running (pid {pid} on {hostname})")

    def record_iteration(self, run_id: str, n: int, *, story: str, started: _dt.datetime,
                         finished: _dt.datetime, results: CheckResults,
                         agent: AgentRun | None, fingerprint: str, streak: int,
                         error_streak: int, regressions: Sequence[str] = (),
                         flaky: Sequence[str] = (), changes: Sequence[Change] = (),
                         blocked: Mapping[str, str] | None = None,
                         diff_stat: str = "") -> None:
        """Record one iteration, its agent run and every criterion result in ONE
        transaction: after a crash either all of it is there or none of it.

        Args:
            run_id: the run (must exist).
            n: the iteration number, 0 for the baseline check.
            story: the story the prompt asked for, or ``""``.
            started, finished: UTC times of the iteration.
            results: the check results after it (criteria kept in this order).
            agent: its agent run, ``None`` for the baseline.
            fingerprint: the failure fingerprint the breaker compared.
            streak: identical-failure streak after it.
            error_streak: agent-error streak after it.
            regressions: keys (``US-001::AC1``) that passed earlier and fail now.
            flaky: keys that failed, then passed on a re-check.
            changes: the oracle changes seen after it.
            blocked: stories blocked after it (story id -> why).
            diff_stat: ``git diff --stat`` of what the iteration changed, or ``""``.

        Raises:
            ValueError: an agent outcome not in :data:`AGENT_OUTCOMES` or a criterion
                outcome not ``passed``/``failed`` (nothing written).
            sqlite3.IntegrityError: no such run, iteration ``n`` already recorded, or two
                results for the same criterion (nothing written).
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
            HistoryError: the history is open read-only.
        """
        if agent is not None and agent.outcome not in AGENT_OUTCOMES:
            raise ValueError(f"unknown agent outcome {agent.outcome!r}; expected one of "
                             f"{', '.join(AGENT_OUTCOMES)}")
        for c in results.criteria:
            if c.outcome not in CRITERION_OUTCOMES:
                raise ValueError(f"criterion {c.key}: unknown outcome {c.outcome!r}; expected "
                                 "passed or failed")
        end = _iso(finished)
        criteria_changed = [{"subject": ch.subject, "change": ch.change,
                             "criteria": list(ch.criteria), "detail": ch.detail}
                            for ch in changes]
        with self._write() as conn:
            conn.execute(
                "INSERT INTO iterations (run_id, n, story, started, finished, passing, total, "
                "exitstatus, check_duration, fingerprint, streak, error_streak, regressions, "
                "flaky, criteria_changed, errors, check_extra, blocked, diff_stat) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, n, story, _iso(started), end, len(results.passing),
                 len(results.criteria), results.exitstatus, float(results.duration),
                 fingerprint, streak, error_streak, _json(list(regressions)),
                 _json(list(flaky)), self._json(criteria_changed),
                 self._json(list(results.errors)), self._json(dict(results.extra)),
                 self._json(dict(blocked or {})), self._text(diff_stat)))
            if agent is not None:
                conn.execute(
                    "INSERT INTO agent_runs (run_id, n, argv, exit_code, duration, outcome, "
                    "log_path, detail, why, cost_usd, input_tokens, output_tokens, turns) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (run_id, n, self._json(list(agent.argv)), agent.exit_code,
                     float(agent.duration), agent.outcome, str(agent.log_path),
                     self._text(agent.log_tail), self._text(agent.detail),
                     _finite(agent.cost_usd),
                     agent.input_tokens, agent.output_tokens, agent.turns))
            conn.executemany(
                "INSERT INTO criterion_results (run_id, n, pos, story, criterion, nodeid, "
                "text, kind, outcome, message, claimed, duration) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ((run_id, n, pos, c.story, c.criterion, c.nodeid, self._text(c.text), c.kind,
                  c.outcome, self._text(c.message), int(c.claimed), float(c.duration))
                 for pos, c in enumerate(results.criteria)))
            conn.execute("UPDATE runs SET updated = ? WHERE id = ?", (end, run_id))

    def record_attempt(self, run_id: str, n: int, *, started: _dt.datetime, agent: AgentRun,
                       pause: float) -> int:
        """Record an agent run that did not spend an iteration (a rate limit) and the
        seconds the loop pauses after it, in one transaction.

        Args:
            run_id: the run (must exist).
            n: the iteration it was an attempt at (>= 1).
            started: UTC time it started.
            agent: the run.
            pause: seconds the loop pauses after it (>= 0); :meth:`set_attempt_pause`
                corrects it once the pause is over (or cut short).

        Returns:
            the attempt's id.

        Raises:
            ValueError: an outcome not in :data:`AGENT_OUTCOMES`.
            sqlite3.IntegrityError: no such run.
            HistoryError: the history is open read-only.
        """
        if agent.outcome not in AGENT_OUTCOMES:
            raise ValueError(f"unknown agent outcome {agent.outcome!r}; expected one of "
                             f"{', '.join(AGENT_OUTCOMES)}")
        with self._write() as conn:
            conn.execute(
                "INSERT INTO agent_attempts (run_id, n, started, argv, exit_code, duration, "
                "outcome, log_path, why, cost_usd, input_tokens, output_tokens, turns, pause) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, n, _iso(started), self._json(list(agent.argv)), agent.exit_code,
                 float(agent.duration), agent.outcome, str(agent.log_path),
                 self._text(agent.detail),
                 _finite(agent.cost_usd), agent.input_tokens, agent.output_tokens,
                 agent.turns, float(max(pause, 0.0))))
            attempt_id = int(conn.execute("SELECT last_insert_rowid()").fetchone()[0])
            conn.execute("UPDATE runs SET updated = ? WHERE id = ?", (_iso(_now()), run_id))
        return attempt_id

    def set_attempt_pause(self, attempt_id: int, pause: float) -> None:
        """Record how long the pause after attempt ``attempt_id`` really lasted (seconds).

        Raises:
            HistoryError: the history is open read-only.
        """
        with self._write() as conn:
            conn.execute("UPDATE agent_attempts SET pause = ? WHERE id = ?",
                         (float(max(pause, 0.0)), attempt_id))

    def attempts(self, run_id: str) -> list[StoredAttempt]:
        """The agent runs of a run that did not spend an iteration, oldest first."""
        if not self.v2:
            return []
        rows = self._conn.execute(
            "SELECT n, started, pause, argv, exit_code, duration, outcome, log_path, '', why, "
            "cost_usd, input_tokens, output_tokens, turns FROM agent_attempts "
            "WHERE run_id = ? ORDER BY id", (run_id,)).fetchall()
        return [StoredAttempt(int(r[0]), _time(r[1]), _agent(r[3:]), float(r[2])) for r in rows]

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
        when = _iso(finished)
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
        now = _iso(_now())
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
                               (_json(dict(oracle)), _iso(_now()), run_id))
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
                                                _iso(_now()), run_id))
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
                               (int(value), _iso(_now()), run_id, int(not value)))
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
        alone.

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
            rows = conn.execute("SELECT id, pid FROM runs WHERE status = 'running' AND "
                                "hostname = ? AND id NOT IN (SELECT run_id FROM drivers) "
                                "ORDER BY started, id", (host,)).fetchall()
            now = _iso(_now())
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

    def arm_run(self, run_id: str, *, prd: Path, rootdir: Path, argv: Sequence[str],
                settings: Mapping[str, Any], armed: _dt.datetime, hostname: str,
                oracle: Mapping[str, Any], driver: str, marker: Path,
                inifile: Path | None) -> None:
        """Record a run driven from outside (status ``running``, no pid) and its ``drivers``
        row, in one transaction.

        Args:
            run_id: the run id.
            prd, rootdir, argv, settings, hostname, oracle: as for :meth:`begin_run` (``argv``:
                what stands for the agent, e.g. ``["claude-code-session"]``).
            armed: when it was armed (the run's start).
            driver: ``claude``.
            marker: the arming file the hook looks for.
            inifile: the configuration file of its check phases, or ``None``.

        Raises:
            sqlite3.IntegrityError: a run with this id exists, or an unknown driver.
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
            HistoryError: the history is open read-only.
        """
        when = _iso(armed)
        with self._write() as conn:
            conn.execute(
                "INSERT INTO runs (id, prd, rootdir, agent_argv, settings, status, started, "
                "updated, pid, hostname, oracle) VALUES (?, ?, ?, ?, ?, 'running', ?, ?, NULL, "
                "?, ?)",
                (run_id, str(prd), str(rootdir), self._json(list(argv)),
                 self._json(dict(settings)), when, when, hostname, _json(dict(oracle))))
            conn.execute("INSERT INTO drivers (run_id, driver, marker, inifile, armed) "
                         "VALUES (?, ?, ?, ?, ?)",
                         (run_id, driver, str(marker), "" if inifile is None else str(inifile),
                          when))
            self._event(conn, run_id, None, "armed", f"armed for the {driver} Stop hook "
                        f"({marker})")

    def driver(self, run_id: str) -> StoredDriver | None:
        """The ``drivers`` row of a run, or ``None`` for a run of ``pytest --ralph``."""
        if not self.v3:
            return None
        row = self._conn.execute(
            "SELECT run_id, driver, marker, inifile, session_id, armed, adopted, turn_started, "
            "tree FROM drivers WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            return None
        rid, driver, marker, inifile, session, armed, adopted, turn, tree = row
        return StoredDriver(str(rid), str(driver), Path(marker),
                            Path(inifile) if inifile else None, str(session), _time(armed),
                            None if adopted is None else _time(adopted),
                            None if turn is None else _time(turn), str(tree))

    def driven_runs(self) -> list[StoredRun]:
        """Driven runs still ``running`` (armed, or adopted by a session), newest first."""
        if not self.v3:
            return []
        rows = self._conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE status = 'running' AND id IN "
            "(SELECT run_id FROM drivers) ORDER BY started DESC, id DESC").fetchall()
        return [_run(r) for r in rows]

    def adopt(self, run_id: str, session_id: str) -> bool:
        """Give an armed run to a session (the first Stop of that session). Only a run no
        session has adopted yet can be adopted.

        Returns:
            ``True`` if ``session_id`` now owns the run (also when it already did).

        Raises:
            ValueError: an empty ``session_id``.
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
            HistoryError: the history is open read-only.
        """
        if not session_id:
            raise ValueError("a session with an empty id never adopts a run")
        now = _iso(_now())
        with self._write() as conn:
            cur = conn.execute("UPDATE drivers SET session_id = ?, adopted = ? "
                               "WHERE run_id = ? AND session_id = ''", (session_id, now, run_id))
            if cur.rowcount:
                self._event(conn, run_id, None, "adopted",
                            f"adopted by Claude Code session {session_id}")
                return True
            row = conn.execute("SELECT session_id FROM drivers WHERE run_id = ?",
                               (run_id,)).fetchone()
            return row is not None and row[0] == session_id

    def set_turn(self, run_id: str, started: _dt.datetime, tree: str | None) -> None:
        """Record that the hook blocked a stop at ``started`` (the agent's next turn begins)
        with the git tree ``tree`` (``None``: unknown).

        Raises:
            KeyError: no such driven run.
            HistoryError: the history is open read-only.
        """
        with self._write() as conn:
            cur = conn.execute("UPDATE drivers SET turn_started = ?, tree = ? WHERE run_id = ?",
                               (_iso(started), tree or "", run_id))
            self._require(cur, run_id)

    def _event(self, conn: sqlite3.Connection, run_id: str, n: int | None, kind: str,
               message: str) -> int:
        cur = conn.execute("INSERT INTO events (run_id, n, time, kind, message) "
                           "VALUES (?, ?, ?, ?, ?)",
                           (run_id, n, _iso(_now()), kind, self._text(message)))
        return int(cur.lastrowid or 0)

    def _require(self, cur: sqlite3.Cursor, run_id: str) -> None:
        if cur.rowcount == 0 or (cur.rowcount == -1 and cur.fetchone() is None):
            raise KeyError(f"no run {run_id!r} in {self.path}")

    # -- reading -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: several queries see the same snapshot."""
        conn = self._conn
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    def last_run(self, prd: Path | None = None) -> StoredRun | None:
        """The run started last (of ``prd``, if given), or ``None`` if there is none."""
        if prd is None:
            row = self._conn.execute(f"SELECT {_RUN_COLUMNS} FROM runs "
                                     "ORDER BY started DESC, id DESC LIMIT 1").fetchone()
        else:
            row = self._conn.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE prd = ? "
                                     "ORDER BY started DESC, id DESC LIMIT 1",
                                     (str(prd),)).fetchone()
        return None if row is None else _run(row)

    def run(self, run_id: str) -> StoredRun | None:
        """The run ``run_id``, or ``None``."""
        row = self._conn.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = ?",
                                 (run_id,)).fetchone()
        return None if row is None else _run(row)

    def runs(self, limit: int = 20) -> list[StoredRun]:
        """The last ``limit`` runs, newest first."""
        rows = self._conn.execute(f"SELECT {_RUN_COLUMNS} FROM runs "
                                  "ORDER BY started DESC, id DESC LIMIT ?", (limit,)).fetchall()
        return [_run(r) for r in rows]

    def iterations(self, run_id: str, *, with_criteria: bool = True) -> list[StoredIteration]:
        """The recorded iterations of a run (``[]`` for an unknown run), baseline first.

        Args:
            run_id: the run.
            with_criteria: rebuild each iteration's criterion results; ``False`` reads only
                the summaries (fast for ``--ralph-status``).
        """
        with self._read() as conn:
            rows = conn.execute(f"SELECT {self._iteration_columns} FROM iterations "
                                "WHERE run_id = ? ORDER BY n", (run_id,)).fetchall()
            agents = {int(r[0]): _agent(r[1:]) for r in conn.execute(
                f"SELECT n, {self._agent_columns} FROM agent_runs WHERE run_id = ?",
                (run_id,))}
            criteria: dict[int, list[CriterionResult]] = {}
            if with_criteria:
                for r in conn.execute(f"SELECT n, {_CRITERION_COLUMNS} FROM criterion_results "
                                      "WHERE run_id = ? ORDER BY n, pos", (run_id,)):
                    criteria.setdefault(int(r[0]), []).append(_criterion(r[1:]))
        return [_iteration(r, criteria.get(int(r[1]), []), agents.get(int(r[1])))
                for r in rows]

    def iteration(self, run_id: str, n: int) -> StoredIteration | None:
        """Iteration ``n`` of a run with its criterion results, or ``None``."""
        with self._read() as conn:
            row = conn.execute(f"SELECT {self._iteration_columns} FROM iterations "
                               "WHERE run_id = ? AND n = ?", (run_id, n)).fetchone()
            if row is None:
                return None
            arow = conn.execute(f"SELECT {self._agent_columns} FROM agent_runs "
                                "WHERE run_id = ? AND n = ?", (run_id, n)).fetchone()
            crows = conn.execute(f"SELECT {_CRITERION_COLUMNS} FROM criterion_results "
                                 "WHERE run_id = ? AND n = ? ORDER BY pos",
                                 (run_id, n)).fetchall()
        return _iteration(row, [_criterion(r) for r in crows],
                          None if arow is None else _agent(arow))

    def passed_keys(self, run_id: str) -> frozenset[str]:
        """Keys (``US-001::AC1``) of every criterion that passed in any recorded check of
        the run: what a resumed run needs to spot regressions."""
        rows = self._conn.execute("SELECT DISTINCT story, criterion FROM criterion_results "
                                  "WHERE run_id = ? AND outcome = 'passed'", (run_id,))
        return frozenset(f"{s}::{c}" for s, c in rows)

    def events(self, run_id: str) -> list[StoredEvent]:
        """A run's events, oldest first (``[]`` for an unknown run)."""
        rows = self._conn.execute("SELECT id, run_id, n, time, kind, message FROM events "
                                  "WHERE run_id = ? ORDER BY id", (run_id,)).fetchall()
        return [StoredEvent(int(i), str(r), None if n is None else int(n), _time(t), str(k),
                            str(m)) for i, r, n, t, k, m in rows]


# -- helpers ---------------------------------------------------------------------------------

_RUN_COLUMNS = ("id, prd, rootdir, agent_argv, settings, status, exit_code, reason, started, "
                "finished, updated, pid, hostname, cancel_requested, oracle")
_ITERATION_COLUMNS = ("run_id, n, story, started, finished, passing, total, exitstatus, "
                      "check_duration, fingerprint, streak, error_streak, regressions, flaky, "
                      "criteria_changed, errors, check_extra")
_AGENT_COLUMNS = "argv, exit_code, duration, outcome, log_path, detail"
_AGENT_COLUMNS_V2 = _AGENT_COLUMNS + ", why, cost_usd, input_tokens, output_tokens, turns"
_CRITERION_COLUMNS = "nodeid, story, criterion, text, kind, outcome, message, claimed, duration"


def _run(row: Sequence[Any]) -> StoredRun:
    (rid, prd, rootdir, argv, settings, status, exit_code, reason, started, finished, updated,
     pid, hostname, cancel, oracle) = row
    return StoredRun(str(rid), Path(prd), Path(rootdir), tuple(json.loads(argv)),
                     dict(json.loads(settings)), str(status),
                     None if exit_code is None else int(exit_code), str(reason), _time(started),
                     None if finished is None else _time(finished), _time(updated),
                     None if pid is None else int(pid), str(hostname), bool(cancel),
                     dict(json.loads(oracle)))


def _agent(row: Sequence[Any]) -> StoredAgentRun:
    argv, exit_code, duration, outcome, log_path, detail = row[:6]
    extra = tuple(row[6:11]) if len(row) >= 11 else ("", None, None, None, None)  # schema v1
    why, cost, tokens_in, tokens_out, turns = extra
    return StoredAgentRun(tuple(json.loads(argv)), None if exit_code is None else int(exit_code),
                          float(duration), str(outcome), Path(log_path), str(detail),
                          str(why or ""), None if cost is None else float(cost),
                          _int(tokens_in), _int(tokens_out), _int(turns))


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _finite(value: float | None) -> float | None:
    """``value`` if it is a finite number, else ``None`` (SQLite has no NaN)."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _criterion(row: Sequence[Any]) -> CriterionResult:
    nodeid, story, criterion, text, kind, outcome, message, claimed, duration = row
    return CriterionResult(nodeid=nodeid, story=story, criterion=criterion, text=text, kind=kind,
                           outcome=outcome, message=message, claimed=bool(claimed),
                           duration=float(duration))


def _iteration(row: Sequence[Any], criteria: list[CriterionResult],
               agent: StoredAgentRun | None) -> StoredIteration:
    (run_id, n, story, started, finished, passing, total, exitstatus, check_duration,
     fingerprint, streak, error_streak, regressions, flaky, changed, errors, extra) = row[:17]
    blocked = json.loads(row[17]) if len(row) > 17 else {}
    diff_stat = str(row[18]) if len(row) > 18 else ""
    results = CheckResults(tuple(criteria), tuple(json.loads(errors)), int(exitstatus),
                           float(check_duration), extra=dict(json.loads(extra)))
    changes = tuple(Change(str(c["subject"]), str(c["change"]), tuple(c["criteria"]),
                           str(c.get("detail", ""))) for c in json.loads(changed))
    return StoredIteration(str(run_id), int(n), str(story), _time(started), _time(finished),
                           int(passing), int(total), str(fingerprint), int(streak),
                           int(error_streak), tuple(json.loads(regressions)),
                           tuple(json.loads(flaky)), changes, results, agent,
                           {str(k): str(v) for k, v in dict(blocked).items()}, diff_stat)


class _Damage(Exception):
    """``PRAGMA quick_check`` found problems (the message lists the first few)."""


def _connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    """A connection in autocommit mode with the busy timeout and foreign keys on.

    Raises:
        HistoryError: SQLite cannot open the file.
    """
    try:
        if readonly:
            conn = sqlite3.connect(path.absolute().as_uri() + "?mode=ro", uri=True,
                                   timeout=BUSY_TIMEOUT, isolation_level=None)
        else:
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None)
    except sqlite3.Error as exc:
        raise HistoryError(_cannot(path, exc)) from None
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        if readonly:
            conn.execute("PRAGMA query_only = ON")
    except BaseException:
        conn.close()
        raise
    return conn


def _open_readonly(path: Path, *, immutable: bool) -> tuple[sqlite3.Connection, str]:
    """A query-only connection to the existing history ``path`` and its journal mode.

    Args:
        path: the database file (it exists).
        immutable: add ``immutable=1`` to the URI: read the file alone, without locks,
            ``-wal`` or ``-shm`` (see :meth:`History.open`).

    Raises:
        NoHistory: the database is empty.
        sqlite3.Error: SQLite cannot open or read it (unchanged, for the caller to judge).
        _Damage, HistoryError: as :func:`_inspect` (``quick_check`` is skipped).
    """
    query = "?mode=ro&immutable=1" if immutable else "?mode=ro"
    conn = sqlite3.connect(path.absolute().as_uri() + query, uri=True, timeout=BUSY_TIMEOUT,
                           isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA query_only = ON")
        if _inspect(conn, path, quick_check=False) == 0:
            raise NoHistory(f"no run history yet: {path} is empty (the first `pytest --ralph` "
                            "fills it)")
        mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    except BaseException:
        conn.close()
        raise
    return conn, mode


def _cant_open(exc: sqlite3.Error) -> bool:
    """Whether a SQLite error is ``SQLITE_CANTOPEN`` ("unable to open database file") or
    ``SQLITE_READONLY_DIRECTORY`` ("attempt to write a readonly database" when the folder is
    not writable but the file is: a ``-shm`` file cannot be made there either)."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python >= 3.11
    if isinstance(code, int):
        return (code & 0xFF) == _SQLITE_CANTOPEN or code == _SQLITE_READONLY_DIRECTORY
    return any(m in str(exc) for m in ("unable to open database file",
                                       "attempt to write a readonly database"))


def _inspect(conn: sqlite3.Connection, path: Path, *, quick_check: bool) -> int:
    """Check a database without writing to it; return its schema version (0: empty).

    Raises:
        _Damage: ``quick_check`` found problems.
        sqlite3.DatabaseError: not a database, or damaged beyond reading its schema.
        HistoryError: another program's database, or a newer schema version.
    """
    if quick_check:
        problems = [str(r[0]) for r in conn.execute("PRAGMA quick_check(5)").fetchall()]
        if problems != ["ok"]:
            raise _Damage("; ".join(problems))
    version = _read_version(conn, path)
    _check_version(version, path)
    return version


def _prepare(conn: sqlite3.Connection, path: Path) -> str:
    """Switch a writer connection to WAL and FULL sync and migrate the schema; return the
    journal mode."""
    mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
    conn.execute("PRAGMA synchronous = FULL")
    version = _read_version(conn, path)
    _check_version(version, path)
    if version == SCHEMA_VERSION:
        return mode
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _read_version(conn, path)  # another process may have migrated it meanwhile
        _check_version(version, path)
        for v in range(version, SCHEMA_VERSION):
            MIGRATIONS[v](conn, _strict_supported())
        now = _iso(_now())
        meta = {"schema_version": str(SCHEMA_VERSION), "migrated": now}
        if version == 0:
            meta.update(created=now, created_by=f"pytest-ralph {_package_version()}")
        conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                         meta.items())
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return mode


def _translate(exc: BaseException, path: Path, *, move: bool) -> BaseException:
    """The exception :meth:`History.open` raises for ``exc`` (moving a damaged file aside
    when ``move``); ``exc`` itself when it is no database problem."""
    if isinstance(exc, HistoryError):
        return exc
    if isinstance(exc, _Damage):
        return _damaged(path, str(exc), move=move)
    if isinstance(exc, sqlite3.Error):
        if "malformed database schema" in str(exc) and not _strict_supported():
            return HistoryError(
                f"cannot read the run history {path} ({exc}): it was written with STRICT "
                f"tables, which need SQLite >= 3.37, and this Python has SQLite "
                f"{sqlite3.sqlite_version}; use a Python with a newer SQLite, or move {path} "
                "aside to start a new history")
        if _is_damage(exc):
            return _damaged(path, str(exc), move=move)
        return HistoryError(_cannot(path, exc))
    return exc


def _read_version(conn: sqlite3.Connection, path: Path) -> int:
    """The schema version; 0 for a database without tables.

    Raises:
        HistoryError: a SQLite database that is not a pytest-ralph history (left alone).
    """
    tables = [str(r[0]) for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' "
        "ESCAPE '\\' ORDER BY name")]
    if not tables:
        return 0
    row = None
    if "meta" in tables:
        with contextlib.suppress(sqlite3.OperationalError):  # a meta table of another shape
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        version = int(row[0]) if row is not None else -1
    except (TypeError, ValueError):
        version = -1
    if version < 1:
        shown = ", ".join(tables[:8]) + (", ..." if len(tables) > 8 else "")
        raise HistoryError(
            f"{path} is a SQLite database but not a pytest-ralph run history (no schema "
            f"version in a meta table; its tables: {shown}); it was left as it is: move it "
            "aside (or point ralph_dir to another folder) and a new history is created")
    return version


def _check_version(version: int, path: Path) -> None:
    if version > SCHEMA_VERSION:
        raise HistoryError(
            f"{path} was written by a newer pytest-ralph (schema {version}, this version reads "
            f"up to {SCHEMA_VERSION}); upgrade pytest-ralph, or move {path} aside to start a "
            "new history")


def _is_damage(exc: sqlite3.Error) -> bool:
    """Whether a SQLite error means a damaged file or not a database (not: locked, no
    permission, disk full...)."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python >= 3.11
    if isinstance(code, int):
        damaged = (code & 0xFF) in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    else:
        text = str(exc).lower()
        damaged = "not a database" in text or "malformed" in text
    return damaged


def _damaged(path: Path, detail: str, *, move: bool) -> HistoryError:
    """The error for a damaged history, after moving it aside when ``move``."""
    if not move:
        return HistoryError(f"the run history {path} is damaged or not a SQLite database "
                            f"({detail}); the next `pytest --ralph` moves it aside and starts "
                            "a new history")
    stamp = _now().strftime("%Y%m%dT%H%M%SZ")
    dest = path.with_name(f"{path.name}.damaged-{stamp}")
    k = 2
    while dest.exists():
        dest = path.with_name(f"{path.name}.damaged-{stamp}-{k}")
        k += 1
    try:
        os.replace(path, dest)
    except OSError as exc:
        return HistoryError(f"the run history {path} is damaged or not a SQLite database "
                            f"({detail}), and it could not be moved aside ({exc}); move or "
                            "rename it yourself and a new history is created")
    for suffix in ("-wal", "-shm", "-journal"):  # a stale WAL must not meet a new database
        companion = path.with_name(path.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            os.replace(companion, dest.with_name(dest.name + suffix))
    return HistoryError(f"the run history {path} is damaged or not a SQLite database "
                        f"({detail}); it was moved to {dest} (nothing was deleted) and the next "
                        "`pytest --ralph` starts a new history")


def _regular_or_missing(path: Path) -> bool:
    """Whether the history file ``path`` exists; it must be a regular file, and so must its
    ``-wal`` and ``-shm`` files when they exist (SQLite would block forever on a FIFO).

    Raises:
        HistoryError: one of them is a folder, a FIFO, a device...; or ``path`` cannot be
            looked at (a state folder that is a file, or that this user may not read): not
            "no history", which would hide the history that is there.
    """
    for name in (path.name, path.name + "-wal", path.name + "-shm"):
        file = path.with_name(name)
        try:
            mode = os.stat(file).st_mode
        except FileNotFoundError:
            if file == path:
                return False
            continue
        except OSError as exc:
            if exc.errno == errno.ENOTDIR:
                raise HistoryError(f"cannot open the run history {path}: the state folder "
                                   f"{path.parent} is not a folder; set ralph_dir to a folder "
                                   "(or move that file aside)") from None
            raise HistoryError(f"cannot open the run history {path}: {exc.strerror or exc}; "
                               f"check that {path.parent} is a folder this user may read"
                               ) from None
        if not stat.S_ISREG(mode):
            raise HistoryError(f"the run history {file} is {kind_of(mode)}, not a SQLite "
                               f"file: move it aside or remove it (pytest-ralph starts a new "
                               "history there)")
    return True


def _cannot(path: Path, exc: sqlite3.Error) -> str:
    if "locked" in str(exc) or "busy" in str(exc):
        return (f"the run history {path} stayed locked by another process for "
                f"{BUSY_TIMEOUT:g} s ({exc}); try again when it is done")
    return f"cannot open the run history {path}: {exc}"




def _iso(when: _dt.datetime) -> str:
    """ISO 8601 UTC text with microseconds (fixed width, so text order is time order);
    a naive time is taken as UTC."""
    when = when.replace(tzinfo=_UTC) if when.tzinfo is None else when.astimezone(_UTC)
    return when.isoformat(timespec="microseconds")


def _time(text: str) -> _dt.datetime:
    when = _dt.datetime.fromisoformat(text)
    return when.replace(tzinfo=_UTC) if when.tzinfo is None else when.astimezone(_UTC)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _package_version() -> str:
    from ..util.version import __version__

    return __version__
