"""The pipeline database: built from ``db/schema.sql`` and ``db/seed.sql``, opened with
foreign keys on, and the helpers every stage uses (queries, one transaction per stage, the
agent's log)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The example folder (the parent of the ``pipeline`` package)."""
SCHEMA = ROOT / "db" / "schema.sql"
SEED = ROOT / "db" / "seed.sql"

SETUP_STORY = "SETUP-1"
"""The PRD story that builds the database; its log line carries this id."""


class PipelineError(Exception):
    """A problem the command line reports in one line (exit status 1), never a traceback."""


def connect(path: Path, *, create: bool = False) -> sqlite3.Connection:
    """Open the database at ``path`` with foreign keys on.

    Without ``create`` the file must exist: a typo in ``--db`` is an error, not a new empty
    database.
    """
    if not create and not path.is_file():
        raise PipelineError(f"no database at {path}; run `python -m pipeline init --db {path}`")
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


SIDE_FILES = ("-journal", "-wal", "-shm")
"""What SQLite keeps beside a database file ``x.db``: ``x.db-journal`` (rollback journal),
``x.db-wal`` and ``x.db-shm`` (write-ahead log)."""


def remove_side_files(path: Path) -> None:
    """Remove the journal and write-ahead log files of the database at ``path``.

    A process killed in the middle of a write leaves its journal behind, and SQLite writes the
    pages it holds back into whatever file is next opened under that name: after a rebuild,
    pages of the old database would be mixed into the new one. Call this only when no
    connection to ``path`` is open.
    """
    for suffix in SIDE_FILES:
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def create(path: Path, *, force: bool = False) -> None:
    """Build a new database at ``path`` from the schema and the seed, checked.

    The database is built in a temporary file next to ``path`` and moved into place only
    when the seed loaded and ``PRAGMA integrity_check`` and ``foreign_key_check`` are clean,
    so ``path`` is never left half-built. The old file's journal or write-ahead log, if a
    killed process left one, goes with it.

    Raises:
        PipelineError: ``path`` exists and ``force`` is false, ``path`` is a folder, the
            file cannot be written, or the schema or seed fails.
    """
    if path.is_dir():
        raise PipelineError(f"{path} is a folder; give the path of a database file")
    if path.exists() and not force:
        raise PipelineError(f"{path} exists; pass --force to replace it")
    building = path.with_name(f".{path.name}.{os.getpid()}.building")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        building.unlink(missing_ok=True)
        remove_side_files(building)
        conn = connect(building, create=True)
        try:
            # One transaction for both files: one write to disk instead of one per statement.
            # Foreign keys are checked at the end, so that a bad seed row is named below.
            conn.executescript("BEGIN;\nPRAGMA defer_foreign_keys = ON;\n"
                               + SCHEMA.read_text(encoding="utf-8") + "\n;\n"
                               + SEED.read_text(encoding="utf-8") + "\n;\n")
            problems = verify(conn)
            if problems:
                raise PipelineError("the seeded database is broken: " + "; ".join(problems))
            log(conn, SETUP_STORY, f"database created from {SCHEMA.name} and {SEED.name}")
            conn.commit()
        except sqlite3.Error as exc:
            raise PipelineError(f"cannot build {path}: {exc}") from None
        finally:
            conn.close()
        # No connection to the old file is open here: drop what a killed writer left of it
        # before the new file takes its name (and after, for one that raced in between).
        remove_side_files(path)
        os.replace(building, path)
        remove_side_files(path)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise PipelineError(f"cannot build {path}: {exc.strerror or exc}{where}") from None
    finally:
        with contextlib.suppress(OSError):
            building.unlink(missing_ok=True)
            remove_side_files(building)


def verify(conn: sqlite3.Connection) -> list[str]:
    """Problems found by SQLite's integrity and foreign-key checks, one line each."""
    problems = [row[0] for row in conn.execute("PRAGMA integrity_check") if row[0] != "ok"]
    problems += [f"{table} row {rowid} points at a missing {parent} row"
                 for table, rowid, parent, _ in conn.execute("PRAGMA foreign_key_check")]
    return problems


def query(conn: sqlite3.Connection, sql: str, *params: object) -> list[sqlite3.Row]:
    """The rows of ``sql``, readable by column name (the connection is left as it is)."""
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row
    return cursor.execute(sql, params).fetchall()


def scalar(conn: sqlite3.Connection, sql: str, *params: object) -> object:
    """The first column of the first row of ``sql`` (None when there is no row)."""
    row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


def count(conn: sqlite3.Connection, sql: str, *params: object) -> int:
    """The number a ``SELECT count(*) ...`` query gives."""
    row = conn.execute(sql, params).fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def insert(conn: sqlite3.Connection, sql: str, *params: object) -> int:
    """Run an ``INSERT`` and return the new row's id."""
    rowid = conn.execute(sql, params).lastrowid
    assert rowid is not None
    return rowid


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection, name: str = "stage") -> Iterator[None]:
    """All of a stage's writes, or none: a savepoint released on success, rolled back on error.

    A savepoint works whether or not the caller already has a transaction open, so the
    stages run the same from the command line and on a test's connection.
    """
    conn.execute(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException:
        conn.execute(f"ROLLBACK TO {name}")
        conn.execute(f"RELEASE {name}")
        raise
    conn.execute(f"RELEASE {name}")


def log(conn: sqlite3.Connection, story: str, message: str, *, level: str = "info",
        ref: tuple[str, int] | None = None) -> None:
    """Add a line to ``agent_log``, tagged with the PRD story id whose code wrote it."""
    table, ref_id = ref if ref is not None else (None, None)
    conn.execute("INSERT INTO agent_log (story_id, level, message, ref_table, ref_id)"
                 " VALUES (?, ?, ?, ?, ?)", (story, level, message, table, ref_id))
