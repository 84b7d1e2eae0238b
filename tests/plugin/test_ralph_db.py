"""The ``ralph_db`` fixture (issue 8): configuration, per-test copies, precise setup errors.

Each test writes a small project (ini, db/schema.sql, db/seed.sql, a test file) and runs pytest
on it; the assertions are on the messages a user would read.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "content-pipeline" / "db"

SCHEMA = """\
CREATE TABLE authors (
    id    INTEGER PRIMARY KEY,
    name  TEXT NOT NULL UNIQUE
);
CREATE TABLE posts (
    id         INTEGER PRIMARY KEY,
    author_id  INTEGER NOT NULL REFERENCES authors (id),
    status     TEXT NOT NULL CHECK (status IN ('draft', 'live'))
);
"""

SEED = """\
INSERT INTO authors (id, name) VALUES (1, 'Ada'), (2, 'Grace');
INSERT INTO posts (id, author_id, status) VALUES
    (1, 1, 'draft'),
    (2, 2, 'live');
"""

INI = "[pytest]\nralph_db_schema = db/schema.sql\nralph_db_seed = db/seed.sql\n"

USES_DB = """\
def test_uses_db(ralph_db):
    assert ralph_db.execute("SELECT count(*) FROM posts").fetchone() == (2,)
"""


def project(pytester: pytest.Pytester, *, schema: str | None = SCHEMA, seed: str | None = SEED,
            ini: str | None = INI, test: str = USES_DB) -> None:
    """Write the ini, db/schema.sql, db/seed.sql (each unless None) and test_db.py."""
    if ini is not None:
        pytester.makeini(ini)
    if schema is not None:
        pytester.makefile(".sql", **{"db/schema": schema})
    if seed is not None:
        pytester.makefile(".sql", **{"db/seed": seed})
    pytester.makepyfile(test_db=test)


def setup_error(pytester: pytest.Pytester, *args: str) -> str:
    """Run pytest, expect every test to error at setup without a traceback; the output."""
    result = pytester.runpytest(*args)
    out = result.stdout.str()
    assert result.ret == 1, out
    assert "ERROR at setup of" in out
    assert "Traceback" not in out and "dbfixture.py" not in out and "sqlitedb.py" not in out
    return out


# ---------------------------------------------------------------------------------------------
# A clean database


def test_fixture_gives_a_connected_copy_with_foreign_keys_on(pytester: pytest.Pytester) -> None:
    project(pytester, test="""
        import sqlite3
        import pytest

        def test_db(ralph_db, tmp_path):
            assert ralph_db.path == tmp_path / "ralph_db.sqlite"
            assert ralph_db.schema[0].name == "schema.sql" and ralph_db.seed[0].name == "seed.sql"
            assert ralph_db.connection.execute("PRAGMA foreign_keys").fetchone() == (1,)
            assert ralph_db.execute("SELECT name FROM authors WHERE id = ?", (2,)).fetchone() == (
                "Grace",)
            with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY constraint failed"):
                ralph_db.execute("INSERT INTO posts VALUES (3, 99, 'live')")
            ralph_db.execute("INSERT INTO posts VALUES (3, 1, 'live')")  # autocommit
            other = ralph_db.connect()
            assert other.execute("PRAGMA foreign_keys").fetchone() == (1,)
            assert other.execute("SELECT count(*) FROM posts").fetchone() == (3,)
            ralph_db.check()
            global KEPT
            KEPT = (ralph_db.connection, other)

        def test_connections_were_closed_at_teardown():
            for conn in KEPT:
                with pytest.raises(sqlite3.ProgrammingError, match="closed"):
                    conn.execute("SELECT 1")
    """)
    result = pytester.runpytest()
    result.assert_outcomes(passed=2)


def test_each_test_gets_its_own_copy_of_one_build(pytester: pytest.Pytester) -> None:
    project(pytester, test="""
        import pytest

        @pytest.mark.parametrize("n", range(3))
        def test_write(ralph_db, tmp_path_factory, n):
            assert ralph_db.execute("SELECT count(*) FROM posts").fetchone() == (2,)
            ralph_db.execute("DELETE FROM posts")
            ralph_db.execute("INSERT INTO authors (name) VALUES (?)", (f"writer {n}",))
            assert ralph_db.execute("SELECT count(*) FROM authors").fetchone() == (3,)
            builds = {p.resolve()
                      for p in tmp_path_factory.getbasetemp().glob("ralph_db*/*.sqlite")}
            assert len(builds) == 1, builds
    """)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=3)


def test_a_changed_file_is_built_again(pytester: pytest.Pytester) -> None:
    project(pytester, test="""
        from pathlib import Path

        def test_first(ralph_db):
            assert ralph_db.execute("SELECT count(*) FROM authors").fetchone() == (2,)
            seed = Path("db/seed.sql")
            seed.write_text(seed.read_text() + "INSERT INTO authors VALUES (3, 'Edsger');\\n")

        def test_second(ralph_db, tmp_path_factory):
            assert ralph_db.execute("SELECT count(*) FROM authors").fetchone() == (3,)
            builds = {p.resolve()
                      for p in tmp_path_factory.getbasetemp().glob("ralph_db*/*.sqlite")}
            assert len(builds) == 2, builds
    """)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=2)


def test_check_reports_a_dangling_row_written_with_foreign_keys_off(
        pytester: pytest.Pytester) -> None:
    project(pytester, test="""
        def test_dangling(ralph_db):
            ralph_db.execute("PRAGMA foreign_keys = OFF")
            ralph_db.execute("INSERT INTO posts VALUES (7, 42, 'draft')")
            ralph_db.check()
    """)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "E * AssertionError: ralph_db.check(): 1 problem",
        "E * */ralph_db.sqlite: table posts, row rowid 7 (id=7): author_id = 42 references "
        "authors(id), which has no such row",
    ])
    assert "dbfixture.py" not in result.stdout.str()  # the traceback stops at the test


# ---------------------------------------------------------------------------------------------
# Setup errors: precise, no traceback


def test_foreign_key_violation_names_table_and_row(pytester: pytest.Pytester) -> None:
    """Issue 8's must-show: one corrupted seed value, and the setup error names table and row."""
    project(pytester, seed=SEED.replace("(2, 2, 'live')", "(2, 9, 'live')"))
    out = setup_error(pytester)
    assert ("ralph_db: cannot build the database from db/schema.sql, db/seed.sql: 1 problem\n"
            "  db/seed.sql: table posts, row rowid 2 (id=2): author_id = 9 references "
            "authors(id), which has no such row (inserted at db/seed.sql line 4)\n") in out


@pytest.mark.parametrize(("schema", "seed", "problem"), [
    pytest.param(SCHEMA + "CREAT TABLE tags (x);\n", SEED,
                 'db/schema.sql line 10: CREAT TABLE tags (x): near "CREAT": syntax error',
                 id="syntax"),
    pytest.param(SCHEMA, SEED + "INSERT INTO posts VALUES (3, 1, 'gone');\n",
                 "db/seed.sql line 5: INSERT INTO posts VALUES (3, 1, 'gone'): CHECK constraint "
                 "failed: status IN ('draft', 'live')", id="check"),
    pytest.param(SCHEMA, SEED.replace("(2, 'Grace')", "(2, 'Ada')"),
                 "db/seed.sql line 1 (row 2 of the statement at line 1): INSERT INTO authors (id, "
                 "name) VALUES (2, 'Ada'): UNIQUE constraint failed: authors.name", id="unique"),
    pytest.param(SCHEMA, SEED + "INSERT INTO posts (id, author_id) VALUES (3, 1);\n",
                 "db/seed.sql line 5: INSERT INTO posts (id, author_id) VALUES (3, 1): NOT NULL "
                 "constraint failed: posts.status", id="not-null"),
    pytest.param(SCHEMA, None,
                 "db/seed.sql: cannot read the seed file: No such file or directory",
                 id="missing"),
    pytest.param(SCHEMA, "-- caf\udce9\n",
                 "db/seed.sql line 1: the seed file is not UTF-8 text (byte 0xe9 at offset 6); "
                 "save it as UTF-8", id="not-utf8"),
    pytest.param(SCHEMA + "CREATE INDEX posts_status ON posts (status);\n",
                 SEED + "PRAGMA writable_schema = ON;\nUPDATE sqlite_master SET sql = "
                 "'CREATE INDEX posts_status ON posts (author_id)' WHERE name = 'posts_status';\n",
                 "after loading db/schema.sql, db/seed.sql: PRAGMA integrity_check: row 1 missing "
                 "from index posts_status", id="integrity"),
])
def test_every_build_error_is_a_setup_error_with_its_place(
        pytester: pytest.Pytester, schema: str, seed: str | None, problem: str) -> None:
    project(pytester, schema=schema, seed=None)
    if seed is not None:
        (pytester.path / "db" / "seed.sql").write_bytes(seed.encode("utf-8", "surrogateescape"))
    out = setup_error(pytester)
    assert "ralph_db: cannot build the database from db/schema.sql, db/seed.sql: " in out
    assert f"\n  {problem}\n" in out


def test_a_broken_build_is_reported_for_every_test_and_built_once(
        pytester: pytest.Pytester) -> None:
    project(pytester, seed=SEED + "INSERT INTO nowhere VALUES (1);\n", test="""
        import pytest

        @pytest.mark.parametrize("n", range(3))
        def test_db(ralph_db, n):
            pass
    """)
    result = pytester.runpytest("-rN")  # no short summary: its width differs under CI
    result.assert_outcomes(errors=3)
    assert result.stdout.str().count(
        "db/seed.sql line 5: INSERT INTO nowhere VALUES (1): no such table: nowhere") == 3


def test_no_configuration(pytester: pytest.Pytester) -> None:
    project(pytester, ini="[pytest]\n")
    out = setup_error(pytester)
    assert ("ralph_db: no schema configured: set ini ralph_db_schema = path/to/schema.sql (and "
            "ralph_db_seed = ...) or use @pytest.mark.ralph_db(schema=...)") in out


# ---------------------------------------------------------------------------------------------
# The marker


def test_marker_overrides_the_ini(pytester: pytest.Pytester) -> None:
    project(pytester, test="""
        import pytest

        def test_ini(ralph_db):
            assert ralph_db.execute("SELECT count(*) FROM authors").fetchone() == (2,)

        @pytest.mark.ralph_db(seed="other/more.sql")
        def test_other_seed(ralph_db):
            assert ralph_db.execute("SELECT name FROM authors").fetchall() == [("Alan",)]

        @pytest.mark.ralph_db(seed=[])
        def test_no_seed(ralph_db):
            assert ralph_db.execute("SELECT count(*) FROM authors").fetchone() == (0,)

        @pytest.mark.ralph_db(schema=["other/notes.sql"], seed=[])
        class TestOtherSchema:
            def test_notes(self, ralph_db):
                assert ralph_db.execute("SELECT count(*) FROM notes").fetchone() == (0,)
    """)
    pytester.makefile(".sql", **{"other/more": "INSERT INTO authors VALUES (5, 'Alan');\n",
                                 "other/notes": "CREATE TABLE notes (id INTEGER PRIMARY KEY);\n"})
    result = pytester.runpytest()
    result.assert_outcomes(passed=4)


def test_marker_paths_are_relative_to_the_rootdir_and_errors_name_them(
        pytester: pytest.Pytester) -> None:
    project(pytester, ini=None, test="""
        import pytest

        @pytest.mark.ralph_db(schema="db/schema.sql", seed="db/missing.sql")
        def test_missing(ralph_db):
            pass

        @pytest.mark.ralph_db(schema=3)
        def test_bad_type(ralph_db):
            pass

        @pytest.mark.ralph_db("db/schema.sql")
        def test_positional(ralph_db):
            pass
    """)
    pytester.makeini("[pytest]\n")
    (pytester.path / "sub").mkdir()
    result = pytester.runpytest("--rootdir", str(pytester.path), str(pytester.path),
                                "-p", "no:randomly")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines([
        "*ERROR at setup of test_missing*",
        "ralph_db: cannot build the database from db/schema.sql, db/missing.sql: 1 problem",
        "  db/missing.sql: cannot read the seed file: No such file or directory",
        "*ERROR at setup of test_bad_type*",
        "ralph_db: @pytest.mark.ralph_db(schema=...) expects a path (str) or a list of paths, "
        "relative to the rootdir *; got 3",
        "*ERROR at setup of test_positional*",
        "ralph_db: @pytest.mark.ralph_db takes only the keyword arguments schema= and seed=; "
        "got 'db/schema.sql'",
    ])


def test_ini_keys_and_marker_are_documented(pytester: pytest.Pytester) -> None:
    help_out = pytester.runpytest("--help").stdout.str()
    assert "ralph_db_schema (paths):" in help_out and "ralph_db_seed (paths):" in help_out
    markers = pytester.runpytest("--markers").stdout.str()
    assert "@pytest.mark.ralph_db(schema=None, seed=None): pytest-ralph:" in markers
    fixtures = pytester.runpytest("--fixtures").stdout.str()
    doc = fixtures[fixtures.index("ralph_db -- "):]
    for words in ("ralph_db_schema", "ralph_db_seed", "@pytest.mark.ralph_db", ".path",
                  ".connection", ".check()", "sqlite3.Connection", "no traceback"):
        assert words in doc, words


# ---------------------------------------------------------------------------------------------
# xdist


def test_under_xdist_each_test_has_its_own_copy(pytester: pytest.Pytester) -> None:
    project(pytester, test="""
        import pytest

        @pytest.mark.parametrize("n", range(6))
        def test_write(ralph_db, n):
            assert ralph_db.execute("SELECT count(*) FROM authors").fetchone() == (2,)
            ralph_db.execute("INSERT INTO authors (name) VALUES (?)", (f"w{n}",))
            ralph_db.check()
    """)
    pytester.makefile(".sql", **{"bad/seed": SEED.replace("(2, 2, 'live')", "(2, 9, 'live')")})
    pytester.makepyfile(test_bad="""
        import pytest

        @pytest.mark.ralph_db(seed="bad/seed.sql")
        def test_bad(ralph_db):
            pass
    """)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "xdist")
    result.assert_outcomes(passed=6, errors=1)
    assert ("bad/seed.sql: table posts, row rowid 2 (id=2): author_id = 9 references authors(id),"
            " which has no such row (inserted at bad/seed.sql line 4)") in result.stdout.str()


# ---------------------------------------------------------------------------------------------
# The content-pipeline example (examples/content-pipeline/db)


def test_content_pipeline_example(pytester: pytest.Pytester) -> None:
    """The real 14-table schema and seed build clean; one corrupted foreign-key value in a copy
    of the seed makes ralph_db fail naming that table and row."""
    shutil.copytree(PIPELINE, pytester.path / "db")
    seed = (PIPELINE / "seed.sql").read_text(encoding="utf-8")
    row = "(2, 4, NULL, 'format',"
    line = seed[:seed.index(row)].count("\n") + 1
    (pytester.path / "db" / "bad_seed.sql").write_text(
        seed.replace(row, "(2, 9999, NULL, 'format',"), encoding="utf-8")
    project(pytester, schema=None, seed=None, test="""
        import pytest

        def test_clean(ralph_db):
            tables = ralph_db.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()
            assert tables == (14,)
            assert ralph_db.execute("SELECT count(*) FROM content_patterns").fetchone() == (3,)
            ralph_db.check()

        @pytest.mark.ralph_db(seed="db/bad_seed.sql")
        def test_corrupted(ralph_db):
            pass
    """)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([
        "*ERROR at setup of test_corrupted*",
        "ralph_db: cannot build the database from db/schema.sql, db/bad_seed.sql: 1 problem",
        "  db/bad_seed.sql: table content_patterns, row rowid 2 (id=2): competitor_content_id = "
        "9999 references competitor_content(id), which has no such row (inserted at "
        f"db/bad_seed.sql line {line})",
    ])
