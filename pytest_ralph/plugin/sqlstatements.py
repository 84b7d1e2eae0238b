"""SQL statements and the problems about them, for the database builder and verifier.

:func:`split_statements` cuts SQL text into :class:`Statement` objects, each with the line where
it starts; :func:`values_rows` cuts a multi-row ``INSERT ... VALUES`` into one statement per
row. :class:`DatabaseError` carries the problems (one human sentence each, at most
:data:`MAX_PROBLEMS`: :class:`Problems`); the helpers below spell paths, statements, values and
identifiers in them. Plain :mod:`sqlite3`, no pytest (:mod:`pytest_ralph.plugin.sqlitedb`).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

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
class Rows:
    """A multi-row ``INSERT ... VALUES (...), (...)`` cut into one statement per row."""

    into: str  # "INSERT INTO t (a, b)"
    values: str  # the VALUES keyword as written
    rows: list[tuple[int, str]]  # (offset in the statement, "(1, 'x')")

    def sql(self, i: int) -> str:
        return f"{self.into} {self.values} {self.rows[i][1]}"

    def line(self, statement: Statement, i: int) -> int:
        return statement.line + statement.sql.count("\n", 0, self.rows[i][0])

    def show(self, i: int) -> str:
        return f"{shorten(self.into, 50)} {self.values} {shorten(self.rows[i][1], 66)}"


def values_rows(sql: str) -> Rows | None:
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
    return Rows(into, values, rows)


# ---------------------------------------------------------------------------------------------
# Small formatting helpers


def show(path: Path, root: Path | None) -> str:
    """``path`` relative to ``root`` when it is inside it, else as given."""
    if root is not None:
        with contextlib.suppress(ValueError, OSError):
            return str(path.resolve().relative_to(root.resolve()))
    return str(path)


def shorten(text: str, width: int) -> str:
    """``text`` on one line (runs of blank space as one space), cut to about ``width``
    characters with ``...``."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3].rstrip() + "..."


def literal(value: object) -> str:
    """A column value as SQL would spell it: ``NULL``, ``3``, ``'text'``, ``X'00ff'``."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        shown = value.hex()
        return f"X'{shown}'" if len(shown) <= VALUE_WIDTH else f"X'{shown[:VALUE_WIDTH]}...'"
    if isinstance(value, str):
        return "'" + shorten(value, VALUE_WIDTH).replace("'", "''") + "'"
    return repr(value)


def ident(name: str) -> str:
    """``name`` as a quoted SQL identifier: ``"name"``."""
    return '"' + name.replace('"', '""') + '"'


def error_text(exc: BaseException) -> str:
    """What ``exc`` says, or the name of its class when it says nothing."""
    return str(exc).strip() or type(exc).__name__


class Problems:
    """Collects problem sentences up to :data:`MAX_PROBLEMS`, counting the rest."""

    def __init__(self, limit: int = MAX_PROBLEMS) -> None:
        self.items: list[str] = []
        self.more = 0
        self.limit = limit

    def add(self, text: str) -> None:
        """Keep ``text``, or count it when the limit is reached."""
        if len(self.items) < self.limit:
            self.items.append(text)
        else:
            self.more += 1

    @property
    def full(self) -> bool:
        """Whether the limit is reached (more problems are only counted)."""
        return len(self.items) >= self.limit

    def __bool__(self) -> bool:
        return bool(self.items) or self.more > 0

    def result(self) -> list[str]:
        """The problems kept, then ``... and N more problems`` when some were only counted."""
        if self.more:
            return [*self.items, f"... and {self.more} more problem{'s' if self.more > 1 else ''}"]
        return list(self.items)
