"""Build a SQLite database from schema and seed SQL files, and verify one (issue 8).

The core of the ``ralph_db`` fixture (:mod:`pytest_ralph.plugin.dbfixture`); plain :mod:`sqlite3`,
no pytest, so it can be used and tested alone.

:func:`build_database` runs the schema files, then the seed files, statement by statement
with ``PRAGMA foreign_keys = ON``, and refuses the result (:class:`DatabaseError`) when

* a file is missing, unreadable or not UTF-8 text, or a schema file holds no statement;
* a statement fails (syntax error, CHECK / NOT NULL / UNIQUE violation, ...): the problem
  names the file, the line where the statement starts, the statement (shortened) and
  SQLite's message; for a multi-row ``INSERT ... VALUES``, the line of the first row that
  fails;
* a row breaks a foreign key: the problem names the table, the row (rowid and primary key),
  the foreign-key columns and values, the referenced table and columns, and the statement
  that inserted the row (file and line) when it can be found;
* ``PRAGMA integrity_check`` or ``PRAGMA foreign_key_check`` find anything in the finished file.

:func:`verify_database` runs the last two checks on an existing database or connection, with
the same messages, so that a test can re-check after its own writes.

Every problem is one human sentence; at most :data:`MAX_PROBLEMS` are kept, then one
``... and N more problems`` line. Nothing here lets a traceback out for a bad input.

The statements and the problem sentences are in :mod:`pytest_ralph.plugin.sqlstatements`, the
final checks in :mod:`pytest_ralph.plugin.sqlverify`.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..util.files import NotRegularFile, read_bytes
from .sqlstatements import (
    MAX_PROBLEMS,
    STATEMENT_WIDTH,
    DatabaseError,
    Problems,
    Rows,
    Statement,
    StrPath,
    error_text,
    ident,
    shorten,
    show,
    split_statements,
    values_rows,
)
from .sqlverify import Locator, verify_database, violations

#: Largest schema or seed SQL file read, in bytes.
MAX_SQL_FILE_BYTES = 256 * 1024 * 1024

__all__ = [
    "MAX_PROBLEMS",
    "DatabaseError",
    "Statement",
    "build_database",
    "split_statements",
    "verify_database",
]


# ---------------------------------------------------------------------------------------------
# Building


_TRANSACTION = re.compile(r"(?:BEGIN|COMMIT|END)\b", re.IGNORECASE)
#: The table an ``INSERT`` / ``REPLACE`` statement writes to (group ``table``).
_INSERT_INTO = re.compile(r"\s*(?:INSERT(?:\s+OR\s+\w+)?|REPLACE)\s+INTO\s+"
                          r"(?:\w+\.)?[\"`\[]?(?P<table>\w+)", re.IGNORECASE)
_FK_FAILED = "FOREIGN KEY constraint failed"


@dataclass(frozen=True)
class _Source:
    path: Path
    statements: list[Statement]


def _read(paths: Iterable[Path], problems: Problems, root: Path | None,
          role: str) -> list[_Source]:
    sources: list[_Source] = []
    for path in paths:
        shown = show(path, root)
        try:
            data = read_bytes(path, MAX_SQL_FILE_BYTES)  # never blocks on a FIFO
        except NotRegularFile as exc:
            what = "a directory" if exc.kind == "a folder" else exc.kind
            problems.add(f"{shown}: cannot read the {role} file: it is {what}, expected "
                         "a .sql file")
            continue
        except OSError as exc:
            problems.add(f"{shown}: cannot read the {role} file: {exc.strerror or exc}")
            continue
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            problems.add(f"{shown} line {line}: the {role} file is not UTF-8 text (byte "
                         f"0x{data[exc.start]:02x} at offset {exc.start}); save it as UTF-8")
            continue
        statements = split_statements(text, path)
        if role == "schema" and not statements:
            problems.add(f"{shown}: the schema file holds no SQL statement; expected "
                         "CREATE TABLE ... statements")
        sources.append(_Source(path, statements))
    return sources


class _Runner:
    """Executes statements on one connection and turns failures into problem sentences."""

    def __init__(self, conn: sqlite3.Connection, problems: Problems | None,
                 root: Path | None) -> None:
        self.conn = conn
        self.problems = problems
        self.root = root
        #: Lower-cased table -> where the first failed seed statement inserting into it is.
        self.failed_inserts: dict[str, str] = {}

    def where(self, statement: Statement) -> str:
        return f"{show(statement.path, self.root)} line {statement.line}"

    def run(self, statement: Statement) -> sqlite3.Error | None:
        """Execute one statement; return the error it raised (``None``: it succeeded)."""
        try:
            self.conn.execute(statement.sql)
        except sqlite3.Error as exc:
            return exc
        except (sqlite3.Warning, ValueError) as exc:  # "one statement at a time", NUL in SQL
            return sqlite3.ProgrammingError(error_text(exc))
        return None

    def report(self, statement: Statement, exc: sqlite3.Error) -> None:
        """Add the problem of a failed statement; for a multi-row ``INSERT ... VALUES``, name
        the first row that fails on its own (its line, the statement with that row only)."""
        if self.problems is None:
            return
        rows = values_rows(statement.sql)
        culprit = self.first_failing_row(rows) if rows is not None else None
        if rows is not None and culprit is not None and culprit[0] == 0 and \
                "syntax error" in str(culprit[1]) and self.every_row_fails(rows, culprit[1]):
            culprit = None  # the same syntax error in every row: it is in the INSERT itself
        if rows is not None and culprit is not None:
            i, exc = culprit
            self.problems.add(
                f"{show(statement.path, self.root)} line {rows.line(statement, i)} (row {i + 1} "
                f"of the statement at line {statement.line}): {rows.show(i)}: {error_text(exc)}")
            return
        message = error_text(exc)
        if message == "incomplete input":
            message = ("incomplete statement at the end of the file: a string, comment or "
                       "CREATE TRIGGER ... END is not closed, or the statement is cut short")
        sql = statement.sql
        if sql.endswith(";") and sqlite3.complete_statement(sql):
            sql = sql[:-1]
        shown = shorten(sql, STATEMENT_WIDTH)
        self.problems.add(f"{self.where(statement)}: {shown}: {message}")

    def every_row_fails(self, rows: Rows, exc: sqlite3.Error) -> bool:
        """Whether every row, run alone (in a savepoint, then undone), fails with the message
        of ``exc``."""
        try:
            self.conn.execute("SAVEPOINT ralph_rows")
        except sqlite3.Error:
            return False
        try:
            return all(str(self.run(Statement(Path(), 0, rows.sql(i)))) == str(exc)
                       for i in range(1, len(rows.rows)))
        finally:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK TO ralph_rows")
                self.conn.execute("RELEASE ralph_rows")

    def first_failing_row(self, rows: Rows) -> tuple[int, sqlite3.Error] | None:
        """Run the rows one by one in a savepoint, then undo them; the first that fails."""
        try:
            self.conn.execute("SAVEPOINT ralph_row")
        except sqlite3.Error:
            return None
        try:
            for i in range(len(rows.rows)):
                exc = self.run(Statement(Path(), 0, rows.sql(i)))
                if exc is not None:
                    return i, exc
            return None
        finally:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK TO ralph_row")
                self.conn.execute("RELEASE ralph_row")

    def schema(self, sources: Sequence[_Source]) -> None:
        """Run schema statements one by one in autocommit mode (foreign keys immediate)."""
        for source in sources:
            for statement in source.statements:
                exc = self.run(statement)
                if exc is None:
                    continue
                if (_FK_FAILED in str(exc) and not self.conn.in_transaction
                        and self.problems is not None):
                    self.explain_schema_fk(statement, exc)
                else:
                    self.report(statement, exc)
        self.finish_open_transaction("schema")

    def finish_open_transaction(self, role: str) -> None:
        if not self.conn.in_transaction:
            return
        try:
            self.conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if self.problems is not None:
                self.problems.add(f"the {role} files left a transaction open and it cannot "
                                  f"be committed: {error_text(exc)}")
            self.conn.execute("ROLLBACK")

    def explain_schema_fk(self, statement: Statement, exc: sqlite3.Error) -> None:
        """Re-run a schema statement that broke a foreign key with the check deferred, to
        name the rows, then undo it."""
        assert self.problems is not None
        try:
            self.conn.execute("BEGIN")
            self.conn.execute("PRAGMA defer_foreign_keys = ON")
            self.conn.execute(statement.sql)
            found = violations(self.conn, self.problems, "")
        except sqlite3.Error:
            found = []
        finally:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        if not found:
            self.report(statement, exc)
        for violation in found:
            self.problems.add(f"{self.where(statement)}: {violation.text}")

    def begin_seed(self) -> None:
        self.conn.execute("PRAGMA foreign_keys = ON")  # in case a schema file turned them off
        self.conn.execute("BEGIN")
        self.conn.execute("PRAGMA defer_foreign_keys = ON")

    def seed_statement(self, statement: Statement) -> None:
        """Run one seed statement inside the seed transaction (whose BEGIN / COMMIT the seed
        cannot issue: those statements are skipped)."""
        if _TRANSACTION.match(statement.sql):
            return
        exc = self.run(statement)
        if exc is not None:
            self.report(statement, exc)
            m = _INSERT_INTO.match(statement.sql)
            if m:
                self.failed_inserts.setdefault(m.group("table").lower(), self.where(statement))
        if not self.conn.in_transaction:  # ROLLBACK in the seed, or an ON CONFLICT ROLLBACK
            if self.problems is not None:
                self.problems.add(f"{self.where(statement)}: this statement ended the seed "
                                  "transaction, so the rows seeded before it are gone; remove "
                                  "ROLLBACK (and ON CONFLICT ROLLBACK) from the seed")
            self.begin_seed()


class _Replay:
    """Replays the files in a database in memory to find which seed statement, and which row
    of a multi-row ``INSERT ... VALUES``, inserted each of some rows.

    After each seed statement (each row of a multi-row insert, run one by one in a savepoint)
    that changed anything, one query asks which of the rows exist; a row that appears is
    attributed to that statement (the last appearance wins, for a row that is deleted and
    inserted again).
    """

    def __init__(self, locators: Sequence[Locator]) -> None:
        self.locators = list(locators)
        self.probe = "SELECT " + ", ".join(
            f"EXISTS (SELECT 1 FROM {ident(loc.table)} WHERE {loc.where})" for loc in locators)
        self.params = tuple(p for loc in locators for p in loc.params)
        self.present = [False] * len(self.locators)
        self.found: dict[Locator, Statement] = {}
        self.conn = sqlite3.connect(":memory:", isolation_level=None)
        self.runner = _Runner(self.conn, None, None)
        self.changes = 0

    def run(self, schema: Sequence[_Source], seed: Sequence[_Source]) -> dict[Locator, Statement]:
        if not self.locators:
            return self.found
        try:
            self.conn.execute("PRAGMA foreign_keys = ON")
            self.runner.schema(schema)
            self.runner.begin_seed()
            self.changes = self.conn.total_changes
            for source in seed:
                for statement in source.statements:
                    self.statement(statement)
        except sqlite3.Error:
            pass
        finally:
            self.conn.close()
        return self.found

    def statement(self, statement: Statement) -> None:
        rows = None if _TRANSACTION.match(statement.sql) else values_rows(statement.sql)
        if rows is None:
            self.runner.seed_statement(statement)
            self.look(statement, self.found)
            return
        self.conn.execute("SAVEPOINT ralph_replay")
        seen: dict[Locator, Statement] = {}
        for i in range(len(rows.rows)):
            if self.runner.run(Statement(statement.path, 0, rows.sql(i))) is not None:
                # As in the build, the whole statement fails: undo its rows, run it whole.
                self.conn.execute("ROLLBACK TO ralph_replay")
                self.conn.execute("RELEASE ralph_replay")
                self.runner.seed_statement(statement)
                self.look(statement, self.found, force=True)
                return
            self.look(Statement(statement.path, rows.line(statement, i), rows.sql(i)), seen)
        self.conn.execute("RELEASE ralph_replay")
        self.found.update(seen)

    def look(self, statement: Statement, into: dict[Locator, Statement],
             force: bool = False) -> None:
        if self.conn.total_changes == self.changes and not force:
            return
        self.changes = self.conn.total_changes
        now = self.conn.execute(self.probe, self.params).fetchone()
        for i, (was, there) in enumerate(zip(self.present, now, strict=True)):
            if there and not was:
                into[self.locators[i]] = statement
            self.present[i] = bool(there)


def build_database(target: StrPath, schema: Sequence[StrPath], seed: Sequence[StrPath] = (),
                   *, root: StrPath | None = None) -> None:
    """Build the SQLite database ``target`` from schema and seed SQL files.

    Each schema file is run statement by statement in autocommit mode, then each seed file,
    inside one transaction with ``PRAGMA defer_foreign_keys = ON`` (so rows may come in any
    order; ``BEGIN`` / ``COMMIT`` / ``END`` statements of a seed file are skipped). Foreign keys
    are ON throughout (a ``PRAGMA foreign_keys`` in a seed file has no effect inside the
    transaction). Before the commit, ``PRAGMA foreign_key_check`` must find nothing; after it,
    ``PRAGMA integrity_check`` and ``PRAGMA foreign_key_check`` run again on the finished file
    through a new connection. Only a clean database ever appears at ``target`` (it is built
    next to it and renamed into place, replacing an existing file); its parent folder is
    created if needed.

    Args:
        target: the database file to create.
        schema: SQL files creating the tables, run in this order.
        seed: SQL files inserting rows, run in this order after the schema.
        root: problems name files relative to this folder when they are inside it.

    Raises:
        DatabaseError: with every problem found (see :class:`DatabaseError`): a file that is
            missing, unreadable or not UTF-8 (``db/seed.sql: cannot read the seed file: No
            such file or directory``); a schema file with no statement; a failing statement
            (``db/seed.sql line 42: INSERT INTO drafts (...) VALUES ...: CHECK constraint
            failed: status IN (...)``; for a multi-row insert ``db/seed.sql line 45 (row 3 of
            the statement at line 42): INSERT INTO drafts (...) VALUES (...): ...``); a row
            breaking a foreign key (``db/seed.sql: table content_ideas, row rowid 3 (id=3):
            brief_id = 99 references research_briefs(id), which has no such row (inserted at
            db/seed.sql line 57)``, the line of the row itself in a multi-row insert);
            anything the final checks find. When the schema has errors the seed is not run.
        OSError: only when ``target``'s folder cannot be created or written.
    """
    base = Path(root) if root is not None else None
    schema_paths = [Path(p) for p in schema]
    seed_paths = [Path(p) for p in seed]
    inputs = ", ".join(show(p, base) for p in [*schema_paths, *seed_paths]) or "no files"
    summary = f"cannot build the database from {inputs}"
    problems = Problems()
    if not schema_paths:
        problems.add("no schema file given; expected at least one .sql file of CREATE TABLE "
                     "statements")
    schema_sources = _read(schema_paths, problems, base, "schema")
    seed_sources = _read(seed_paths, problems, base, "seed")
    if problems:
        raise DatabaseError(problems.result(), summary)

    final = Path(target)
    final.parent.mkdir(parents=True, exist_ok=True)
    building = final.with_name(final.name + ".building")
    _remove(building)
    conn = sqlite3.connect(building, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA synchronous = OFF")  # a scratch file until it is renamed
        runner = _Runner(conn, problems, base)
        runner.schema(schema_sources)
        if problems:
            if seed_sources:
                problems.add("the seed files were not run: fix the schema first")
        elif seed_sources:
            _seed(conn, runner, schema_sources, seed_sources, problems, base)
    except sqlite3.Error as exc:  # outside any one statement: the file system, a full disk
        problems.add(f"SQLite failed while building {building}: {error_text(exc)}")
    finally:
        conn.close()
    if not problems:
        for problem in verify_database(building, label=f"after loading {inputs}"):
            problems.add(problem)
    if problems:
        _remove(building)
        raise DatabaseError(problems.result(), summary)
    os.replace(building, final)


def _seed(conn: sqlite3.Connection, runner: _Runner, schema: Sequence[_Source],
          seed: Sequence[_Source], problems: Problems, root: Path | None) -> None:
    runner.begin_seed()
    for source in seed:
        for statement in source.statements:
            runner.seed_statement(statement)
    found = violations(conn, problems, "")
    if found:
        lines = _Replay([v.locator for v in found if v.locator is not None]).run(schema, seed)
        for violation in found:
            origin = lines.get(violation.locator) if violation.locator else None
            failed = runner.failed_inserts.get(violation.parent.lower())
            cause = (f"; the statement at {failed}, which inserts into {violation.parent}, "
                     "failed (see above), which may be why" if failed else "")
            if origin is None:
                problems.add(f"{_names(seed, root)}: {violation.text}{cause}")
            else:
                shown = show(origin.path, root)
                problems.add(f"{shown}: {violation.text} (inserted at {shown} line "
                             f"{origin.line}){cause}")
    if problems:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        return
    try:
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        problems.add(f"{_names(seed, root)}: the seed transaction cannot be committed: "
                     f"{error_text(exc)}")
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def _names(seed: Sequence[_Source], root: Path | None) -> str:
    return ", ".join(show(s.path, root) for s in seed)


def _remove(path: Path) -> None:
    for leftover in (path, path.with_name(path.name + "-journal"),
                     path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
