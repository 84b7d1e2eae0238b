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
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from ..util.files import NotRegularFile, read_bytes

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

#: At most this many problems are reported; the rest are counted in a last line.
MAX_PROBLEMS = 50
#: Statements quoted in a problem are shortened to about this many characters.
STATEMENT_WIDTH = 120
#: Column values quoted in a problem are shortened to about this many characters.
VALUE_WIDTH = 40

StrPath: TypeAlias = "str | os.PathLike[str]"


class DatabaseError(Exception):
    """The database could not be built, or is broken; carries every problem found.

    Attributes:
        problems: one full human sentence per problem, in the order found (files, then
            statements in file order, then foreign keys, then the final checks). When more
            than :data:`MAX_PROBLEMS` were found the list holds the first ones and a last
            ``... and N more problems`` entry.
        summary: what failed, e.g. ``cannot build the database from db/schema.sql,
            db/seed.sql``; the head line of :meth:`describe`.
    """

    def __init__(self, problems: Sequence[str], summary: str = "database problems") -> None:
        self.problems = list(problems)
        self.summary = summary
        super().__init__(self.describe())

    def describe(self) -> str:
        """A multi-line message: ``<summary>: N problem(s)``, then one indented line each."""
        counted = [p for p in self.problems if not p.startswith("... and ")]
        n = len(counted)
        head = f"{self.summary}: {n} problem{'s' if n != 1 else ''}"
        if len(counted) < len(self.problems):
            head = f"{self.summary}: more than {n} problems, the first {n} shown"
        return "\n".join([head, *("  " + p for p in self.problems)])


@dataclass(frozen=True)
class Statement:
    """One SQL statement of a file.

    Attributes:
        path: the file it comes from.
        line: the 1-based line where the statement starts (its first character that is not
            blank or part of a comment).
        sql: the statement text, from that character to its ``;`` (included when present).
    """

    path: Path
    line: int
    sql: str


# ---------------------------------------------------------------------------------------------
# Splitting


# A string, a quoted identifier or a comment, each also when not closed (up to the end of the
# text), or a semicolon. Scanning with it makes every ";" inside a string or comment invisible,
# in one linear pass.
_TOKENS = re.compile(
    r"""'[^']*'?|"[^"]*"?|`[^`]*`?|\[[^\]]*\]?|--[^\n]*|/\*.*?(?:\*/|\Z)|;""", re.DOTALL)
_LEADING = re.compile(r"(?:\s+|--[^\n]*|/\*.*?(?:\*/|\Z))*", re.DOTALL)


def split_statements(text: str, path: StrPath = "<sql>") -> list[Statement]:
    """Split SQL text into statements, each with the line where it starts.

    A statement ends at a ``;`` outside strings, quoted identifiers and comments once
    :func:`sqlite3.complete_statement` agrees (so ``CREATE TRIGGER ... BEGIN ...; END;`` is one
    statement). Blank space and comments between statements and empty statements (``;;``) are
    dropped. Text after the last complete statement that is not blank or a comment is returned
    as a last statement without its ``;`` (executing it reports what is wrong with it).

    Args:
        text: the SQL source.
        path: the file name to record in each :class:`Statement`.

    Returns:
        The statements in text order.
    """
    where = Path(path)
    out: list[Statement] = []
    start = 0
    line = 1  # the line number at ``start``

    def emit(chunk_end: int) -> None:
        nonlocal start, line
        chunk = text[start:chunk_end]
        lead = _LEADING.match(chunk)
        skip = lead.end() if lead else 0
        body = chunk[skip:].rstrip()
        if body and body != ";":
            out.append(Statement(where, line + text.count("\n", start, start + skip), body))
        line += text.count("\n", start, chunk_end)
        start = chunk_end

    for match in _TOKENS.finditer(text):
        if match.group() == ";" and sqlite3.complete_statement(text[start:match.end()]):
            emit(match.end())
    emit(len(text))
    return out


_SCAN = re.compile(
    r"""'[^']*'?|"[^"]*"?|`[^`]*`?|\[[^\]]*\]?|--[^\n]*|/\*.*?(?:\*/|\Z)|\w+|\s+|.""", re.DOTALL)
_INSERT = re.compile(r"(?:INSERT|REPLACE)\b", re.IGNORECASE)


@dataclass(frozen=True)
class _Rows:
    """A multi-row ``INSERT ... VALUES (...), (...)`` cut into one statement per row."""

    into: str  # "INSERT INTO t (a, b)"
    values: str  # the VALUES keyword as written
    rows: list[tuple[int, str]]  # (offset in the statement, "(1, 'x')")

    def sql(self, i: int) -> str:
        return f"{self.into} {self.values} {self.rows[i][1]}"

    def line(self, statement: Statement, i: int) -> int:
        return statement.line + statement.sql.count("\n", 0, self.rows[i][0])

    def show(self, i: int) -> str:
        return f"{_shorten(self.into, 50)} {self.values} {_shorten(self.rows[i][1], 66)}"


def _values_rows(sql: str) -> _Rows | None:
    """``sql`` cut into rows when it is ``INSERT|REPLACE ... VALUES (...), (...)[;]`` with at
    least two rows and nothing after them (no ``ON CONFLICT``, no ``RETURNING``), else None."""
    if not _INSERT.match(sql):
        return None
    depth, state, start = 0, "head", 0
    into, values = "", ""
    rows: list[tuple[int, str]] = []
    for match in _SCAN.finditer(sql):
        token = match.group()
        if token.isspace() or token.startswith(("--", "/*")):
            continue
        if state == "head":
            if token == "(":
                depth += 1
            elif token == ")":
                depth -= 1
            elif depth == 0 and token.upper() == "SELECT":
                return None
            elif depth == 0 and token.upper() == "VALUES":
                into, values, state = sql[:match.start()].rstrip(), token, "row"
        elif state == "row":
            if token != "(":
                return None
            start, depth, state = match.start(), 1, "inside"
        elif state == "inside":
            depth += (token == "(") - (token == ")")
            if depth == 0:
                rows.append((start, sql[start:match.end()]))
                state = "separator"
        elif state == "separator" and token in (",", ";"):
            state = "row" if token == "," else "end"
        else:
            return None
    if state not in ("separator", "end") or len(rows) < 2:
        return None
    return _Rows(into, values, rows)


# ---------------------------------------------------------------------------------------------
# Small formatting helpers


def _show(path: Path, root: Path | None) -> str:
    """``path`` relative to ``root`` when it is inside it, else as given."""
    if root is not None:
        with contextlib.suppress(ValueError, OSError):
            return str(path.resolve().relative_to(root.resolve()))
    return str(path)


def _shorten(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3].rstrip() + "..."


def _literal(value: object) -> str:
    """A column value as SQL would spell it: ``NULL``, ``3``, ``'text'``, ``X'00ff'``."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        shown = value.hex()
        return f"X'{shown}'" if len(shown) <= VALUE_WIDTH else f"X'{shown[:VALUE_WIDTH]}...'"
    if isinstance(value, str):
        return "'" + _shorten(value, VALUE_WIDTH).replace("'", "''") + "'"
    return repr(value)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _error_text(exc: BaseException) -> str:
    return str(exc).strip() or type(exc).__name__


class _Problems:
    """Collects problem sentences up to :data:`MAX_PROBLEMS`, counting the rest."""

    def __init__(self, limit: int = MAX_PROBLEMS) -> None:
        self.items: list[str] = []
        self.more = 0
        self.limit = limit

    def add(self, text: str) -> None:
        if len(self.items) < self.limit:
            self.items.append(text)
        else:
            self.more += 1

    @property
    def full(self) -> bool:
        return len(self.items) >= self.limit

    def __bool__(self) -> bool:
        return bool(self.items) or self.more > 0

    def result(self) -> list[str]:
        if self.more:
            return [*self.items, f"... and {self.more} more problem{'s' if self.more > 1 else ''}"]
        return list(self.items)


# ---------------------------------------------------------------------------------------------
# Foreign-key violations


@dataclass(frozen=True)
class _Locator:
    """How to find one row again: ``SELECT ... FROM table WHERE <where>`` with ``params``."""

    table: str
    where: str
    params: tuple[object, ...]


@dataclass(frozen=True)
class _Violation:
    """One row of ``PRAGMA foreign_key_check``, described."""

    locator: _Locator | None
    text: str  # "table t, row rowid 3 (id=3): c = 9 references p(id), which has no such row"
    parent: str = ""  # the referenced table


def _columns(conn: sqlite3.Connection, table: str) -> list[tuple[str, int]]:
    """``(name, pk position)`` of each column of ``table`` (pk position 0: not in the key)."""
    return [(row[1], row[5]) for row in conn.execute(f"PRAGMA table_info({_ident(table)})")]


def _primary_key(conn: sqlite3.Connection, table: str) -> list[str]:
    return [name for name, pk in sorted(_columns(conn, table), key=lambda c: c[1]) if pk]


def _foreign_key(conn: sqlite3.Connection, table: str,
                 fkid: int) -> tuple[list[str], list[str | None]]:
    """The child columns and the referenced columns (``None``: the parent's key) of one key."""
    rows = sorted((row[1], row[3], row[4])
                  for row in conn.execute(f"PRAGMA foreign_key_list({_ident(table)})")
                  if row[0] == fkid)
    return [row[1] for row in rows], [row[2] for row in rows]


def _parent_columns(conn: sqlite3.Connection, parent: str,
                    to: list[str | None]) -> tuple[bool, list[str]]:
    """Whether the parent table exists, and the referenced columns spelled out."""
    columns = _columns(conn, parent)
    if all(col is not None for col in to):
        return bool(columns), [str(col) for col in to]
    key = [name for name, pk in sorted(columns, key=lambda c: c[1]) if pk]
    return bool(columns), key if len(key) == len(to) else [str(col or "?") for col in to]


def _join(values: Sequence[str]) -> str:
    return values[0] if len(values) == 1 else "(" + ", ".join(values) + ")"


def _reference(conn: sqlite3.Connection, table: str, parent: str, fkid: int,
               row: dict[str, object]) -> str:
    """``brief_id = 99 references research_briefs(id), which has no such row``."""
    cols, to = _foreign_key(conn, table, fkid)
    exists, pcols = _parent_columns(conn, parent, to)
    lhs = _join(cols) + " = " + _join([_literal(row.get(col)) for col in cols])
    target = f"{parent}({', '.join(pcols)})"
    if not exists:
        return f"{lhs} references {target}, but there is no table {parent}"
    return f"{lhs} references {target}, which has no such row"


def _row_label(conn: sqlite3.Connection, table: str, rowid: int | None,
               row: dict[str, object]) -> str:
    """``row rowid 3 (id=3)``; ``row (code='x')`` for a table WITHOUT ROWID."""
    key = _primary_key(conn, table)
    shown = key if key else list(row)[:3]
    values = ", ".join(f"{col}={_literal(row.get(col))}" for col in shown if col in row)
    if rowid is None:
        return f"row ({values})" if values else "a row"
    return f"row rowid {rowid} ({values})" if values else f"row rowid {rowid}"


def _fetch(conn: sqlite3.Connection, locator: _Locator) -> dict[str, object] | None:
    cur = conn.execute(
        f"SELECT * FROM {_ident(locator.table)} WHERE {locator.where}", locator.params)
    found = cur.fetchone()
    if found is None:
        return None
    return {d[0]: value for d, value in zip(cur.description, found, strict=True)}


def _without_rowid_rows(conn: sqlite3.Connection, table: str, parent: str,
                        fkid: int) -> list[_Locator]:
    """The rows of a WITHOUT ROWID table that break foreign key ``fkid``, by primary key.

    ``PRAGMA foreign_key_check`` gives no rowid for such a table; the rows are found again
    by their key values, comparing as SQL does (close to, not exactly, SQLite's own check).
    """
    key = _primary_key(conn, table)
    cols, to = _foreign_key(conn, table, fkid)
    exists, pcols = _parent_columns(conn, parent, to)
    if not key or not cols:
        return []
    child = _ident(table)
    sql = (f"SELECT {', '.join(_ident(k) for k in key)} FROM {child} WHERE "
           + " AND ".join(f"{child}.{_ident(c)} IS NOT NULL" for c in cols))
    if exists:
        match = " AND ".join(f"p.{_ident(pc)} = {child}.{_ident(c)}"
                             for c, pc in zip(cols, pcols, strict=False))
        sql += f" AND NOT EXISTS (SELECT 1 FROM {_ident(parent)} AS p WHERE {match})"
    where = " AND ".join(f"{_ident(k)} IS ?" for k in key)
    try:
        return [_Locator(table, where, tuple(found)) for found in conn.execute(sql)]
    except sqlite3.Error:
        return []


def _violations(conn: sqlite3.Connection, problems: _Problems,
                prefix: str) -> list[_Violation]:
    """Run ``PRAGMA foreign_key_check`` on ``conn`` and describe each row it reports.

    Rows past the problem limit are only counted (``problems.more``). A check that SQLite
    cannot run (``foreign key mismatch``) becomes a problem of its own.
    """
    found: list[_Violation] = []
    room = problems.limit - len(problems.items)
    pending: dict[tuple[str, int], list[_Locator]] = {}
    try:
        cursor = conn.execute("PRAGMA foreign_key_check")
        for table, rowid, parent, fkid in cursor:
            if len(found) >= room:
                problems.more += 1
                continue
            locator: _Locator | None
            if rowid is not None:
                locator = _Locator(table, "rowid = ?", (rowid,))
            else:
                if (table, fkid) not in pending:
                    pending[(table, fkid)] = _without_rowid_rows(conn, table, parent, fkid)
                rows = pending[(table, fkid)]
                locator = rows.pop(0) if rows else None
            row = _fetch(conn, locator) if locator is not None else None
            if row is None:
                cols, _ = _foreign_key(conn, table, fkid)
                text = (f"table {table}, a row (WITHOUT ROWID, key not found): "
                        f"{_join(cols)} references {parent}, which has no such row")
                found.append(_Violation(None, text, parent))
                continue
            text = (f"table {table}, {_row_label(conn, table, rowid, row)}: "
                    f"{_reference(conn, table, parent, fkid, row)}")
            found.append(_Violation(locator, text, parent))
    except sqlite3.Error as exc:
        problems.add(f"{prefix}PRAGMA foreign_key_check failed: {_error_text(exc)}; a foreign "
                     "key must reference its parent's PRIMARY KEY or columns with a UNIQUE "
                     "index")
    return found


# ---------------------------------------------------------------------------------------------
# Verifying


def verify_database(database: StrPath | sqlite3.Connection, *,
                    label: str | None = None) -> list[str]:
    """Run ``PRAGMA integrity_check`` and ``PRAGMA foreign_key_check`` on a database.

    Args:
        database: a database file (opened read-only, then closed) or an open connection
            (used as is: it sees that connection's own uncommitted writes).
        label: how problems name the database; by default the file's path (for a
            connection, its ``main`` file, or ``database`` when in memory).

    Returns:
        One sentence per problem (empty when both checks are clean), at most
        :data:`MAX_PROBLEMS` plus a ``... and N more problems`` line, e.g.
        ``pipeline.db: table content_ideas, row rowid 3 (id=3): brief_id = 99 references
        research_briefs(id), which has no such row`` or ``pipeline.db: PRAGMA integrity_check:
        row 2 missing from index ti``. A file that does not exist or is not a database is a
        problem, not an exception.
    """
    problems = _Problems()
    if isinstance(database, sqlite3.Connection):
        if label is None:
            files = [row[2] for row in database.execute("PRAGMA database_list") if row[1] == "main"]
            label = files[0] if files and files[0] else "database"
        _verify(database, problems, f"{label}: ")
        return problems.result()
    path = Path(database)
    label = str(path) if label is None else label
    if not path.is_file():
        return [f"{label}: no such database file"]
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return [f"{label}: cannot open the database: {_error_text(exc)}"]
    try:
        _verify(conn, problems, f"{label}: ")
    finally:
        conn.close()
    return problems.result()


def _verify(conn: sqlite3.Connection, problems: _Problems, prefix: str) -> None:
    try:
        rows = [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
    except sqlite3.Error as exc:
        problems.add(f"{prefix}PRAGMA integrity_check failed: {_error_text(exc)}; the file is "
                     "damaged or not a SQLite database")
        return
    if rows != ["ok"]:
        for row in rows:
            for line in row.splitlines():
                if line.strip() and not line.startswith("*** in database"):
                    problems.add(f"{prefix}PRAGMA integrity_check: "
                                 f"{_shorten(line, STATEMENT_WIDTH)}")
        return  # a foreign-key check of a damaged file tells nothing more
    for violation in _violations(conn, problems, prefix):
        problems.add(prefix + violation.text)


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


def _read(paths: Iterable[Path], problems: _Problems, root: Path | None,
          role: str) -> list[_Source]:
    sources: list[_Source] = []
    for path in paths:
        shown = _show(path, root)
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

    def __init__(self, conn: sqlite3.Connection, problems: _Problems | None,
                 root: Path | None) -> None:
        self.conn = conn
        self.problems = problems
        self.root = root
        #: Lower-cased table -> where the first failed seed statement inserting into it is.
        self.failed_inserts: dict[str, str] = {}

    def where(self, statement: Statement) -> str:
        return f"{_show(statement.path, self.root)} line {statement.line}"

    def run(self, statement: Statement) -> sqlite3.Error | None:
        """Execute one statement; return the error it raised (``None``: it succeeded)."""
        try:
            self.conn.execute(statement.sql)
        except sqlite3.Error as exc:
            return exc
        except (sqlite3.Warning, ValueError) as exc:  # "one statement at a time", NUL in SQL
            return sqlite3.ProgrammingError(_error_text(exc))
        return None

    def report(self, statement: Statement, exc: sqlite3.Error) -> None:
        """Add the problem of a failed statement; for a multi-row ``INSERT ... VALUES``, name
        the first row that fails on its own (its line, the statement with that row only)."""
        if self.problems is None:
            return
        rows = _values_rows(statement.sql)
        culprit = self.first_failing_row(rows) if rows is not None else None
        if rows is not None and culprit is not None and culprit[0] == 0 and \
                "syntax error" in str(culprit[1]) and self.every_row_fails(rows, culprit[1]):
            culprit = None  # the same syntax error in every row: it is in the INSERT itself
        if rows is not None and culprit is not None:
            i, exc = culprit
            self.problems.add(
                f"{_show(statement.path, self.root)} line {rows.line(statement, i)} (row {i + 1} "
                f"of the statement at line {statement.line}): {rows.show(i)}: {_error_text(exc)}")
            return
        message = _error_text(exc)
        if message == "incomplete input":
            message = ("incomplete statement at the end of the file: a string, comment or "
                       "CREATE TRIGGER ... END is not closed, or the statement is cut short")
        sql = statement.sql
        if sql.endswith(";") and sqlite3.complete_statement(sql):
            sql = sql[:-1]
        shown = _shorten(sql, STATEMENT_WIDTH)
        self.problems.add(f"{self.where(statement)}: {shown}: {message}")

    def every_row_fails(self, rows: _Rows, exc: sqlite3.Error) -> bool:
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

    def first_failing_row(self, rows: _Rows) -> tuple[int, sqlite3.Error] | None:
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
                                  f"be committed: {_error_text(exc)}")
            self.conn.execute("ROLLBACK")

    def explain_schema_fk(self, statement: Statement, exc: sqlite3.Error) -> None:
        """Re-run a schema statement that broke a foreign key with the check deferred, to
        name the rows, then undo it."""
        assert self.problems is not None
        try:
            self.conn.execute("BEGIN")
            self.conn.execute("PRAGMA defer_foreign_keys = ON")
            self.conn.execute(statement.sql)
            found = _violations(self.conn, self.problems, "")
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

    def __init__(self, locators: Sequence[_Locator]) -> None:
        self.locators = list(locators)
        self.probe = "SELECT " + ", ".join(
            f"EXISTS (SELECT 1 FROM {_ident(loc.table)} WHERE {loc.where})" for loc in locators)
        self.params = tuple(p for loc in locators for p in loc.params)
        self.present = [False] * len(self.locators)
        self.found: dict[_Locator, Statement] = {}
        self.conn = sqlite3.connect(":memory:", isolation_level=None)
        self.runner = _Runner(self.conn, None, None)
        self.changes = 0

    def run(self, schema: Sequence[_Source], seed: Sequence[_Source]) -> dict[_Locator, Statement]:
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
        rows = None if _TRANSACTION.match(statement.sql) else _values_rows(statement.sql)
        if rows is None:
            self.runner.seed_statement(statement)
            self.look(statement, self.found)
            return
        self.conn.execute("SAVEPOINT ralph_replay")
        seen: dict[_Locator, Statement] = {}
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

    def look(self, statement: Statement, into: dict[_Locator, Statement],
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
    inputs = ", ".join(_show(p, base) for p in [*schema_paths, *seed_paths]) or "no files"
    summary = f"cannot build the database from {inputs}"
    problems = _Problems()
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
        problems.add(f"SQLite failed while building {building}: {_error_text(exc)}")
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
          seed: Sequence[_Source], problems: _Problems, root: Path | None) -> None:
    runner.begin_seed()
    for source in seed:
        for statement in source.statements:
            runner.seed_statement(statement)
    found = _violations(conn, problems, "")
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
                shown = _show(origin.path, root)
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
                     f"{_error_text(exc)}")
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def _names(seed: Sequence[_Source], root: Path | None) -> str:
    return ", ".join(_show(s.path, root) for s in seed)


def _remove(path: Path) -> None:
    for leftover in (path, path.with_name(path.name + "-journal"),
                     path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
