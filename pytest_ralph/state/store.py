"""The open connection of a run history that every table's methods build on: its write and
read transactions, the redaction of what is stored, the ``events`` rows that writes add.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from ..util.redact import Redactor
from ..util.text import now as _now
from .records import HistoryError, iso, to_json
from .schema import AGENT_COLUMNS, AGENT_COLUMNS_V2, ITERATION_COLUMNS, read_version

_S = TypeVar("_S", bound="Store")


class Store:
    """An open history database (see :class:`pytest_ralph.state.history.History`, which
    adds the tables' methods).

    Attributes:
        path: the database file.
        readonly: opened read-only (write calls raise :class:`HistoryError`).
        journal_mode: the journal mode in effect.
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
        #: Whether the ``parallel_runs`` and ``lanes`` tables (schema 4) are there.
        self.v4 = bool(conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                                    "name = 'lanes'").fetchone())
        self._agent_columns = AGENT_COLUMNS_V2 if self.v2 else AGENT_COLUMNS
        self._iteration_columns = ITERATION_COLUMNS + (", blocked, diff_stat" if self.v2
                                                        else "")

    def close(self) -> None:
        """Close the connection (idempotent). The last writer to close checkpoints the
        WAL into the database file."""
        self._conn.close()

    def __enter__(self: _S) -> _S:
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
        return read_version(self._conn, self.path)

    @property
    def redactor(self) -> Redactor:
        """What redacts every text this history stores (see :class:`pytest_ralph.state.history.
        History`)."""
        if self._redactor is None:
            self._redactor = Redactor.from_env()
        return self._redactor

    def _text(self, text: str) -> str:
        """``text`` as it is stored: redacted."""
        return self.redactor.text(text)

    def _json(self, value: Any) -> str:
        """``value`` as a JSON column stores it: JSON text with every string redacted."""
        return to_json(self.redactor.json(json.loads(to_json(value))))

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

    def _event(self, conn: sqlite3.Connection, run_id: str, n: int | None, kind: str,
               message: str) -> int:
        cur = conn.execute("INSERT INTO events (run_id, n, time, kind, message) "
                           "VALUES (?, ?, ?, ?, ?)",
                           (run_id, n, iso(_now()), kind, self._text(message)))
        return int(cur.lastrowid or 0)

    def _require(self, cur: sqlite3.Cursor, run_id: str) -> None:
        if cur.rowcount == 0 or (cur.rowcount == -1 and cur.fetchone() is None):
            raise KeyError(f"no run {run_id!r} in {self.path}")

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
