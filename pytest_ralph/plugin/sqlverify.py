"""Verify a SQLite database: ``PRAGMA integrity_check`` and ``PRAGMA foreign_key_check``, each
row that breaks a foreign key described in a sentence (table, row, columns, values, the
referenced table).

:func:`verify_database` checks a file or a connection; :func:`violations` describes the rows
that ``PRAGMA foreign_key_check`` reports, for the builder too
(:mod:`pytest_ralph.plugin.sqlitedb`). Plain :mod:`sqlite3`, no pytest.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .sqlstatements import STATEMENT_WIDTH, Problems, StrPath, error_text, ident, literal, shorten

# ---------------------------------------------------------------------------------------------
# Foreign-key violations


@dataclass(frozen=True)
class Locator:
    """How to find one row again: ``SELECT ... FROM table WHERE <where>`` with ``params``."""

    table: str
    where: str
    params: tuple[object, ...]


@dataclass(frozen=True)
class _Violation:
    """One row of ``PRAGMA foreign_key_check``, described."""

    locator: Locator | None
    text: str  # "table t, row rowid 3 (id=3): c = 9 references p(id), which has no such row"
    parent: str = ""  # the referenced table


def _columns(conn: sqlite3.Connection, table: str) -> list[tuple[str, int]]:
    """``(name, pk position)`` of each column of ``table`` (pk position 0: not in the key)."""
    return [(row[1], row[5]) for row in conn.execute(f"PRAGMA table_info({ident(table)})")]


def _primary_key(conn: sqlite3.Connection, table: str) -> list[str]:
    return [name for name, pk in sorted(_columns(conn, table), key=lambda c: c[1]) if pk]


def _foreign_key(conn: sqlite3.Connection, table: str,
                 fkid: int) -> tuple[list[str], list[str | None]]:
    """The child columns and the referenced columns (``None``: the parent's key) of one key."""
    rows = sorted((row[1], row[3], row[4])
                  for row in conn.execute(f"PRAGMA foreign_key_list({ident(table)})")
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
    lhs = _join(cols) + " = " + _join([literal(row.get(col)) for col in cols])
    target = f"{parent}({', '.join(pcols)})"
    if not exists:
        return f"{lhs} references {target}, but there is no table {parent}"
    return f"{lhs} references {target}, which has no such row"


def _row_label(conn: sqlite3.Connection, table: str, rowid: int | None,
               row: dict[str, object]) -> str:
    """``row rowid 3 (id=3)``; ``row (code='x')`` for a table WITHOUT ROWID."""
    key = _primary_key(conn, table)
    shown = key if key else list(row)[:3]
    values = ", ".join(f"{col}={literal(row.get(col))}" for col in shown if col in row)
    if rowid is None:
        return f"row ({values})" if values else "a row"
    return f"row rowid {rowid} ({values})" if values else f"row rowid {rowid}"


def _fetch(conn: sqlite3.Connection, locator: Locator) -> dict[str, object] | None:
    cur = conn.execute(
        f"SELECT * FROM {ident(locator.table)} WHERE {locator.where}", locator.params)
    found = cur.fetchone()
    if found is None:
        return None
    return {d[0]: value for d, value in zip(cur.description, found, strict=True)}


def _without_rowid_rows(conn: sqlite3.Connection, table: str, parent: str,
                        fkid: int) -> list[Locator]:
    """The rows of a WITHOUT ROWID table that break foreign key ``fkid``, by primary key.

    ``PRAGMA foreign_key_check`` gives no rowid for such a table; the rows are found again
    by their key values, comparing as SQL does (close to, not exactly, SQLite's own check).
    """
    key = _primary_key(conn, table)
    cols, to = _foreign_key(conn, table, fkid)
    exists, pcols = _parent_columns(conn, parent, to)
    if not key or not cols:
        return []
    child = ident(table)
    sql = (f"SELECT {', '.join(ident(k) for k in key)} FROM {child} WHERE "
           + " AND ".join(f"{child}.{ident(c)} IS NOT NULL" for c in cols))
    if exists:
        match = " AND ".join(f"p.{ident(pc)} = {child}.{ident(c)}"
                             for c, pc in zip(cols, pcols, strict=False))
        sql += f" AND NOT EXISTS (SELECT 1 FROM {ident(parent)} AS p WHERE {match})"
    where = " AND ".join(f"{ident(k)} IS ?" for k in key)
    try:
        return [Locator(table, where, tuple(found)) for found in conn.execute(sql)]
    except sqlite3.Error:
        return []


def violations(conn: sqlite3.Connection, problems: Problems,
                prefix: str) -> list[_Violation]:
    """Run ``PRAGMA foreign_key_check`` on ``conn`` and describe each row it reports.

    Rows past the problem limit are only counted (``problems.more``). A check that SQLite
    cannot run (``foreign key mismatch``) becomes a problem of its own.
    """
    found: list[_Violation] = []
    room = problems.limit - len(problems.items)
    pending: dict[tuple[str, int], list[Locator]] = {}
    try:
        cursor = conn.execute("PRAGMA foreign_key_check")
        for table, rowid, parent, fkid in cursor:
            if len(found) >= room:
                problems.more += 1
                continue
            locator: Locator | None
            if rowid is not None:
                locator = Locator(table, "rowid = ?", (rowid,))
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
        problems.add(f"{prefix}PRAGMA foreign_key_check failed: {error_text(exc)}; a foreign "
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
    problems = Problems()
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
        return [f"{label}: cannot open the database: {error_text(exc)}"]
    try:
        _verify(conn, problems, f"{label}: ")
    finally:
        conn.close()
    return problems.result()


def _verify(conn: sqlite3.Connection, problems: Problems, prefix: str) -> None:
    """Add to ``problems`` what ``PRAGMA integrity_check`` and then (on an intact file)
    ``PRAGMA foreign_key_check`` find on ``conn``, each sentence after ``prefix``."""
    try:
        rows = [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
    except sqlite3.Error as exc:
        problems.add(f"{prefix}PRAGMA integrity_check failed: {error_text(exc)}; the file is "
                     "damaged or not a SQLite database")
        return
    if rows != ["ok"]:
        for row in rows:
            for line in row.splitlines():
                if line.strip() and not line.startswith("*** in database"):
                    problems.add(f"{prefix}PRAGMA integrity_check: "
                                 f"{shorten(line, STATEMENT_WIDTH)}")
        return  # a foreign-key check of a damaged file tells nothing more
    for violation in violations(conn, problems, prefix):
        problems.add(prefix + violation.text)
