"""The schema of the run history (``ralph.db``): its tables, the migrations that build them
version by version, the column lists the reads select, and the schema version a file
holds.

Schema (version 4; ``STRICT`` tables when the runtime SQLite is 3.37 or newer; every time
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
         outcome TEXT CHECK IN agents.run.OUTCOMES, log_path, detail TEXT,  -- the log tail
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
    parallel_runs(id TEXT PRIMARY KEY,              -- v4: a `--ralph-parallel N` run
         prd TEXT, base TEXT,                       -- the commit its lanes started from
         branch TEXT,                               -- the user's branch ('' detached)
         status TEXT CHECK IN ('running', 'complete', 'incomplete', 'interrupted'),
         started TEXT, finished TEXT NULL, updated TEXT,
         pid INTEGER NULL, hostname TEXT)           -- its controller
    lanes(run_id PRIMARY KEY -> runs ON DELETE CASCADE,  -- v4: a lane's own run, whose
         parallel_run -> parallel_runs ON DELETE CASCADE,  -- iterations, agent runs and
         story TEXT, attempt INTEGER >= 1,          -- criterion results are in the tables
         lane TEXT,                                 -- above; its branch
         state TEXT,                                -- the lane's own state folder
         imported TEXT)                             -- when the controller last copied it
    -- the lanes' runs are copied in by the parallel controller (see
    -- :mod:`pytest_ralph.state.lanes`), never written by the lanes themselves

The schema version is kept in ``meta`` (and the file is tagged with ``PRAGMA application_id
=`` :data:`APPLICATION_ID`). :data:`MIGRATIONS` ``[v]`` takes a database from version ``v``
to ``v + 1``; version 0 is an empty database. :meth:`History.open` applies the missing
migrations in one transaction.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

from .records import HistoryError

#: The schema version this module writes and reads.
SCHEMA_VERSION = 4

#: ``PRAGMA application_id`` of a history file ("Rlph").
APPLICATION_ID = 0x526C7068


def strict_supported() -> bool:
    """Whether this Python's SQLite has ``STRICT`` tables (3.37 or newer)."""
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


def _migrate_v4(conn: sqlite3.Connection, strict: bool) -> None:
    """Version 3 -> 4 (frozen): parallel runs and their lanes, whose own runs the parallel
    controller copies in (:mod:`pytest_ralph.state.lanes`)."""
    end = ") STRICT" if strict else ")"
    conn.execute(f"""CREATE TABLE parallel_runs (
        id TEXT PRIMARY KEY NOT NULL CHECK (id <> ''),
        prd TEXT NOT NULL,
        base TEXT NOT NULL,
        branch TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL CHECK (status IN ('running', 'complete', 'incomplete',
                                               'interrupted')),
        started TEXT NOT NULL,
        finished TEXT,
        updated TEXT NOT NULL,
        pid INTEGER,
        hostname TEXT NOT NULL DEFAULT ''
    {end}""")
    conn.execute(f"""CREATE TABLE lanes (
        run_id TEXT PRIMARY KEY NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        parallel_run TEXT NOT NULL REFERENCES parallel_runs (id) ON DELETE CASCADE,
        story TEXT NOT NULL,
        attempt INTEGER NOT NULL CHECK (attempt >= 1),
        lane TEXT NOT NULL DEFAULT '',
        state TEXT NOT NULL,
        imported TEXT NOT NULL
    {end}""")
    conn.execute("CREATE INDEX lanes_by_parallel_run ON lanes (parallel_run, story, attempt)")


#: ``MIGRATIONS[v](conn, strict)`` takes the schema from version ``v`` to ``v + 1`` inside
#: the caller's transaction; ``strict`` says whether STRICT tables may be used.
MIGRATIONS: list[Callable[[sqlite3.Connection, bool], None]] = [_create_v1, _migrate_v2,
                                                                 _migrate_v3, _migrate_v4]


#: The columns each read selects (in the order of the row mappers of
#: :mod:`pytest_ralph.state.records`).
RUN_COLUMNS = ("id, prd, rootdir, agent_argv, settings, status, exit_code, reason, started, "
                "finished, updated, pid, hostname, cancel_requested, oracle")
ITERATION_COLUMNS = ("run_id, n, story, started, finished, passing, total, exitstatus, "
                      "check_duration, fingerprint, streak, error_streak, regressions, flaky, "
                      "criteria_changed, errors, check_extra")
AGENT_COLUMNS = "argv, exit_code, duration, outcome, log_path, detail"
AGENT_COLUMNS_V2 = AGENT_COLUMNS + ", why, cost_usd, input_tokens, output_tokens, turns"
CRITERION_COLUMNS = "nodeid, story, criterion, text, kind, outcome, message, claimed, duration"


def read_version(conn: sqlite3.Connection, path: Path) -> int:
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


def check_version(version: int, path: Path) -> None:
    """Refuse a schema ``version`` newer than :data:`SCHEMA_VERSION`.

    Raises:
        HistoryError: naming ``path`` and what to do.
    """
    if version > SCHEMA_VERSION:
        raise HistoryError(
            f"{path} was written by a newer pytest-ralph (schema {version}, this version reads "
            f"up to {SCHEMA_VERSION}); upgrade pytest-ralph, or move {path} aside to start a "
            "new history")


