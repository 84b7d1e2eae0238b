"""The ``ralph_db`` fixture: a fresh SQLite database per test, built from SQL files (issue 8).

The pytest layer over :mod:`pytest_ralph.plugin.sqlitedb`, registered by the main plugin module
(``pytest_plugins = ["pytest_ralph.plugin.dbfixture"]`` in :mod:`pytest_ralph.plugin`).

* ini ``ralph_db_schema`` / ``ralph_db_seed``: the SQL files (paths relative to the ini file).
* marker ``@pytest.mark.ralph_db(schema=..., seed=...)``: a per-test override (paths relative
  to the rootdir; the closest marker wins).
* Each distinct set of files (by path and content) is built once per session (per xdist
  worker) under ``tmp_path_factory``; every test gets its own copy in its ``tmp_path``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..util.files import read_bytes
from .sqlitedb import MAX_SQL_FILE_BYTES, DatabaseError, build_database, verify_database

__all__ = ["MARKER", "SCHEMA_INI", "SEED_INI", "RalphDatabase", "ralph_db"]

SCHEMA_INI = "ralph_db_schema"
SEED_INI = "ralph_db_seed"
MARKER = "ralph_db"
#: The database file's name inside the test's ``tmp_path``.
FILE_NAME = "ralph_db.sqlite"

NOT_CONFIGURED = (
    "ralph_db: no schema configured: set ini ralph_db_schema = path/to/schema.sql "
    "(and ralph_db_seed = ...) or use @pytest.mark.ralph_db(schema=...)")


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ini keys ``ralph_db_schema`` and ``ralph_db_seed`` (lists of paths)."""
    parser.addini(SCHEMA_INI, "pytest-ralph: SQL files creating the schema of the ralph_db "
                  "fixture's database, run in order (paths relative to the ini file). "
                  "(default: none)", type="paths")
    parser.addini(SEED_INI, "pytest-ralph: SQL files inserting the ralph_db fixture's seed "
                  "rows, run in order after the schema (paths relative to the ini file). "
                  "(default: none)", type="paths")


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``ralph_db`` marker."""
    config.addinivalue_line(
        "markers",
        "ralph_db(schema=None, seed=None): pytest-ralph: build this test's ralph_db from these "
        "SQL files instead of ini ralph_db_schema / ralph_db_seed: a path or a list of paths, "
        "relative to the rootdir; None keeps the ini value, seed=[] means no seed.")


@dataclass(frozen=True)
class RalphDatabase:
    """The value of the ``ralph_db`` fixture: this test's own copy of the built database.

    Attributes:
        path: the database file, ``<tmp_path>/ralph_db.sqlite``.
        connection: a connection to it with ``PRAGMA foreign_keys = ON``, in autocommit mode
            (``isolation_level=None``: each statement commits unless you ``BEGIN``); closed at
            teardown.
        schema: the schema files it was built from, in order.
        seed: the seed files it was built from, in order.
    """

    path: Path
    connection: sqlite3.Connection
    schema: tuple[Path, ...] = ()
    seed: tuple[Path, ...] = ()
    _opened: list[sqlite3.Connection] = field(default_factory=list, repr=False, compare=False)

    def execute(self, sql: str,
                params: Sequence[object] | Mapping[str, object] = ()) -> sqlite3.Cursor:
        """``self.connection.execute(sql, params)``: one statement, ``?`` or ``:name``
        parameters."""
        return self.connection.execute(sql, params)

    def connect(self) -> sqlite3.Connection:
        """A new connection to :attr:`path`, foreign keys ON, autocommit mode; closed at
        teardown like :attr:`connection`."""
        conn = open_connection(self.path)
        self._opened.append(conn)
        return conn

    def check(self) -> None:
        """Run ``PRAGMA integrity_check`` and ``PRAGMA foreign_key_check`` through
        :attr:`connection` (so it sees this connection's uncommitted writes too).

        Raises:
            AssertionError: listing every problem, e.g. ``table content_ideas, row rowid 3
                (id=3): brief_id = 99 references research_briefs(id), which has no such row``.
        """
        __tracebackhide__ = True
        problems = verify_database(self.connection, label=str(self.path))
        if problems:
            raise AssertionError(DatabaseError(problems, "ralph_db.check()").describe())

    def close(self) -> None:
        """Close :attr:`connection` and every connection :meth:`connect` opened."""
        while self._opened:
            self._opened.pop().close()


def open_connection(path: Path) -> sqlite3.Connection:
    """A connection to ``path`` in autocommit mode with ``PRAGMA foreign_keys = ON``."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


class _Builds:
    """The databases built in this session, by their files' paths and contents."""

    def __init__(self, folder: Path, root: Path) -> None:
        self.folder = folder
        self.root = root
        self.built: dict[tuple[tuple[str, str], ...], Path | DatabaseError] = {}

    def get(self, schema: Sequence[Path], seed: Sequence[Path]) -> Path:
        """The built database for these files (built now if they are new or changed).

        Raises:
            DatabaseError: the files cannot be built (remembered: not retried in this session).
        """
        key = (*(_identity("schema", p) for p in schema), ("--", ""),
               *(_identity("seed", p) for p in seed))
        if key not in self.built:
            target = self.folder / f"db{len(self.built) + 1}.sqlite"
            try:
                build_database(target, schema, seed, root=self.root)
                self.built[key] = target
            except DatabaseError as exc:
                self.built[key] = exc
        found = self.built[key]
        if isinstance(found, DatabaseError):
            raise found
        return found


def _identity(role: str, path: Path) -> tuple[str, str]:
    try:
        digest = hashlib.sha256(read_bytes(path, MAX_SQL_FILE_BYTES)).hexdigest()
    except OSError as exc:
        digest = f"unreadable: {exc.errno}"
    return f"{role}:{os.path.abspath(path)}", digest


@pytest.fixture(scope="session")
def _ralph_db_builds(tmp_path_factory: pytest.TempPathFactory,
                     pytestconfig: pytest.Config) -> _Builds:
    return _Builds(tmp_path_factory.mktemp("ralph_db"), pytestconfig.rootpath)


def _marker_paths(value: object, name: str, root: Path) -> tuple[Path, ...]:
    items: list[object] = list(value) if isinstance(value, (list, tuple)) else [value]
    paths = [root / item for item in items
             if isinstance(item, (str, os.PathLike)) and str(item).strip()]
    if len(paths) < len(items) or (name == "schema" and not items):
        pytest.fail(f"ralph_db: @pytest.mark.ralph_db({name}=...) expects a path (str) or a "
                    f"list of paths, relative to the rootdir {root}; got {value!r}",
                    pytrace=False)
    return tuple(paths)


def _files(request: pytest.FixtureRequest) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """The schema and seed files for this test: the closest marker, else the ini keys."""
    config = request.config
    schema = tuple(Path(p) for p in config.getini(SCHEMA_INI))
    seed = tuple(Path(p) for p in config.getini(SEED_INI))
    marker = request.node.get_closest_marker(MARKER)
    if marker is not None:
        unknown = sorted(set(marker.kwargs) - {"schema", "seed"})
        if marker.args or unknown:
            given = [repr(a) for a in marker.args] + [f"{k}=" for k in unknown]
            pytest.fail(f"ralph_db: @pytest.mark.ralph_db takes only the keyword arguments "
                        f"schema= and seed=; got {', '.join(given)}", pytrace=False)
        if marker.kwargs.get("schema") is not None:
            schema = _marker_paths(marker.kwargs["schema"], "schema", config.rootpath)
        if marker.kwargs.get("seed") is not None:
            seed = _marker_paths(marker.kwargs["seed"], "seed", config.rootpath)
    if not schema:
        pytest.fail(NOT_CONFIGURED, pytrace=False)
    return schema, seed


@pytest.fixture
def ralph_db(request: pytest.FixtureRequest, tmp_path: Path,
             _ralph_db_builds: _Builds) -> Iterator[RalphDatabase]:
    """This test's own SQLite database (a copy in tmp_path), built once per session with
    foreign keys ON from the SQL files of ini ralph_db_schema (required) and ralph_db_seed
    (paths relative to the ini file) or of @pytest.mark.ralph_db(schema=..., seed=...) (paths
    relative to the rootdir; seed=[] for none). Returns a RalphDatabase: .path (Path),
    .connection (sqlite3.Connection, foreign keys ON, autocommit), .execute(sql, params=()),
    .connect() (a new sqlite3.Connection), .check() (integrity and foreign-key check, raises
    AssertionError naming each bad row). Errors at setup, with no traceback, when no schema is
    configured or the files do not build: a file missing or not UTF-8, a failing statement
    (file, line, SQLite's message), a row breaking a foreign key (table, row, referenced table,
    seed line), or PRAGMA integrity_check / foreign_key_check finding anything.

    The value is a :class:`RalphDatabase`; its connections are closed at teardown. Each set of
    files is built once per session (per xdist worker), keyed by the files' paths and
    contents, and copied for each test, so a test's writes are its own.
    """
    schema, seed = _files(request)
    try:
        built: Path | DatabaseError = _ralph_db_builds.get(schema, seed)
    except DatabaseError as exc:
        built = exc
    if isinstance(built, DatabaseError):  # failed outside the except: no chained exception
        pytest.fail(f"ralph_db: {built.describe()}", pytrace=False)
    path = tmp_path / FILE_NAME
    shutil.copyfile(built, path)
    conn = open_connection(path)
    db = RalphDatabase(path=path, connection=conn, schema=schema, seed=seed, _opened=[conn])
    try:
        yield db
    finally:
        db.close()
