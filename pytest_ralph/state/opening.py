"""Opening the run history: connecting to ``ralph.db``, inspecting an existing file before
anything writes to it, switching a writer to WAL and migrating it, and moving a damaged
file aside.

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
import errno
import os
import sqlite3
import stat
from pathlib import Path

from ..util.files import kind_of
from ..util.text import now as _now
from . import schema
from .records import HistoryError, NoHistory, iso

#: Seconds a connection waits for a lock held by another connection before giving up.
BUSY_TIMEOUT = 10.0

#: SQLite result codes (primary) that mean the file is damaged or not a database.
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
#: SQLite result code (primary): a file could not be opened or created.
_SQLITE_CANTOPEN = 14
#: SQLite extended result code: the database is read-only because its folder is not writable.
_SQLITE_READONLY_DIRECTORY = 1544  # SQLITE_READONLY | (6 << 8)


def open_database(path: Path, *, readonly: bool) -> tuple[sqlite3.Connection, str]:
    """The connection :meth:`pytest_ralph.state.history.History.open` makes to ``path``, and
    its journal mode: read-only, or for writing once an existing file was inspected, then
    migrated (what each does is told there).

    Raises:
        NoHistory, HistoryError: as :meth:`pytest_ralph.state.history.History.open` says.
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
                # No -shm file and no right to create one (see History.open): read the file alone.
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
        return conn, mode
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
    return conn, mode


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
    version = schema.read_version(conn, path)
    schema.check_version(version, path)
    return version


def _prepare(conn: sqlite3.Connection, path: Path) -> str:
    """Switch a writer connection to WAL and FULL sync and migrate the schema; return the
    journal mode."""
    mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
    conn.execute("PRAGMA synchronous = FULL")
    version = schema.read_version(conn, path)
    schema.check_version(version, path)
    if version == schema.SCHEMA_VERSION:
        return mode
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = schema.read_version(conn, path)  # another process may have migrated it meanwhile
        schema.check_version(version, path)
        for v in range(version, schema.SCHEMA_VERSION):
            schema.MIGRATIONS[v](conn, schema.strict_supported())
        now = iso(_now())
        meta = {"schema_version": str(schema.SCHEMA_VERSION), "migrated": now}
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
        if "malformed database schema" in str(exc) and not schema.strict_supported():
            return HistoryError(
                f"cannot read the run history {path} ({exc}): it was written with STRICT "
                f"tables, which need SQLite >= 3.37, and this Python has SQLite "
                f"{sqlite3.sqlite_version}; use a Python with a newer SQLite, or move {path} "
                "aside to start a new history")
        if _is_damage(exc):
            return _damaged(path, str(exc), move=move)
        return HistoryError(_cannot(path, exc))
    return exc


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


def _package_version() -> str:
    from ..util.version import __version__

    return __version__
