"""The database builder behind ``ralph_db`` (pytest_ralph.plugin.sqlitedb), with plain sqlite3.

Issue 8: every way a schema or seed can be wrong ends in a DatabaseError whose sentences name the
file and line, or the table and row, and say what was expected.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from pytest_ralph.plugin.sqlitedb import (
    MAX_PROBLEMS,
    DatabaseError,
    Statement,
    build_database,
    split_statements,
    verify_database,
)

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "content-pipeline" / "db"

SCHEMA = """\
-- parents and children
CREATE TABLE authors (
    id    INTEGER PRIMARY KEY,
    name  TEXT NOT NULL UNIQUE
);
CREATE TABLE posts (
    id         INTEGER PRIMARY KEY,
    author_id  INTEGER NOT NULL REFERENCES authors (id),
    status     TEXT NOT NULL CHECK (status IN ('draft', 'live'))
);
CREATE TABLE tags (
    code       TEXT PRIMARY KEY,
    author_id  INTEGER REFERENCES authors
) WITHOUT ROWID;
"""

SEED = """\
INSERT INTO authors (id, name) VALUES (1, 'Ada');
INSERT INTO posts (id, author_id, status) VALUES
    (1, 1, 'draft'),
    (2, 1, 'live');
INSERT INTO tags (code, author_id) VALUES ('math', 1);
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def build_error(tmp_path: Path, schema: str = SCHEMA, seed: str | None = SEED) -> DatabaseError:
    """Build from the given texts (db/schema.sql, db/seed.sql), expecting a DatabaseError."""
    schema_file = write(tmp_path, "db/schema.sql", schema)
    seeds = [write(tmp_path, "db/seed.sql", seed)] if seed is not None else []
    with pytest.raises(DatabaseError) as caught:
        build_database(tmp_path / "out.db", [schema_file], seeds, root=tmp_path)
    assert not (tmp_path / "out.db").exists()
    assert not (tmp_path / "out.db.building").exists()
    return caught.value


# ---------------------------------------------------------------------------------------------
# Splitting


def test_split_gives_each_statement_its_first_line() -> None:
    text = ("-- header\n\nCREATE TABLE a (x);  CREATE TABLE b (y);\n"
            "/* block\ncomment */ INSERT INTO a VALUES ('semi;colon -- not a comment');\n"
            "CREATE TRIGGER t AFTER INSERT ON a BEGIN\n  INSERT INTO b VALUES (1);\nEND;\n"
            ";;\nINSERT INTO b VALUES (2)\n")
    got = [(s.line, s.sql) for s in split_statements(text, "x.sql")]
    assert got == [
        (3, "CREATE TABLE a (x);"),
        (3, "CREATE TABLE b (y);"),
        (5, "INSERT INTO a VALUES ('semi;colon -- not a comment');"),
        (6, "CREATE TRIGGER t AFTER INSERT ON a BEGIN\n  INSERT INTO b VALUES (1);\nEND;"),
        (10, "INSERT INTO b VALUES (2)"),
    ]
    assert split_statements("", "x.sql") == []
    assert split_statements("-- only a comment\n", "x.sql") == []
    assert split_statements("SELECT 1;", "x.sql") == [Statement(Path("x.sql"), 1, "SELECT 1;")]


def test_split_of_an_unclosed_string_is_linear_and_keeps_the_rest() -> None:
    text = "SELECT 1;\nINSERT INTO t VALUES ('open;\n" + "x;\n" * 50_000
    statements = split_statements(text, "x.sql")
    assert [s.line for s in statements] == [1, 2]


# ---------------------------------------------------------------------------------------------
# Clean builds


def test_clean_build_has_the_rows_and_checks_clean(tmp_path: Path) -> None:
    schema = write(tmp_path, "db/schema.sql", SCHEMA)
    seed = write(tmp_path, "db/seed.sql", SEED)
    target = tmp_path / "out" / "built.db"
    build_database(target, [schema], [seed])
    assert sorted(p.name for p in target.parent.iterdir()) == ["built.db"]
    conn = sqlite3.connect(target)
    assert conn.execute("SELECT count(*) FROM posts").fetchone() == (2,)
    assert conn.execute("SELECT code FROM tags").fetchall() == [("math",)]
    conn.close()
    assert verify_database(target) == []


def test_seed_rows_may_come_before_their_parents(tmp_path: Path) -> None:
    """Foreign keys are checked at the end of the seed, not row by row."""
    seed = ("INSERT INTO posts VALUES (1, 7, 'draft');\n"
            "INSERT INTO authors VALUES (7, 'Grace');\n")
    schema_file = write(tmp_path, "schema.sql", SCHEMA)
    build_database(tmp_path / "out.db", [schema_file], [write(tmp_path, "seed.sql", seed)])
    assert verify_database(tmp_path / "out.db") == []


def test_seed_transaction_statements_are_skipped_and_cannot_turn_keys_off(tmp_path: Path) -> None:
    """A `.dump`-style seed: PRAGMA foreign_keys=OFF; BEGIN TRANSACTION; ...; COMMIT;"""
    ok = "PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\n" + SEED + "COMMIT;\n"
    schema_file = write(tmp_path, "db/schema.sql", SCHEMA)
    build_database(tmp_path / "ok.db", [schema_file], [write(tmp_path, "db/ok.sql", ok)])
    bad = ("PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\n"
           "INSERT INTO posts VALUES (1, 5, 'live');\nCOMMIT;\n")
    error = build_error(tmp_path, seed=bad)
    assert error.problems == [
        "db/seed.sql: table posts, row rowid 1 (id=1): author_id = 5 references authors(id), "
        "which has no such row (inserted at db/seed.sql line 3)"]


def test_a_failed_build_leaves_an_existing_target_alone(tmp_path: Path) -> None:
    schema_file = write(tmp_path, "db/schema.sql", SCHEMA)
    target = tmp_path / "out.db"
    build_database(target, [schema_file], [write(tmp_path, "db/seed.sql", SEED)])
    bad = write(tmp_path, "db/bad.sql", "INSERT INTO authors VALUES (1, NULL);\n")
    with pytest.raises(DatabaseError):
        build_database(target, [schema_file], [bad])
    assert sqlite3.connect(target).execute("SELECT name FROM authors").fetchall() == [("Ada",)]


# ---------------------------------------------------------------------------------------------
# Statements that fail


def test_schema_syntax_error_names_file_and_line_and_skips_the_seed(tmp_path: Path) -> None:
    schema = SCHEMA + "\nCREAT TABLE extra (x);\n"
    error = build_error(tmp_path, schema=schema)
    assert error.problems == [
        'db/schema.sql line 16: CREAT TABLE extra (x): near "CREAT": syntax error',
        "the seed files were not run: fix the schema first"]
    assert error.describe().splitlines()[0] == (
        "cannot build the database from db/schema.sql, db/seed.sql: 2 problems")


def test_check_violation_names_file_line_and_constraint(tmp_path: Path) -> None:
    seed = SEED + "\nINSERT INTO posts (id, author_id, status) VALUES (3, 1, 'gone');\n"
    error = build_error(tmp_path, seed=seed)
    assert error.problems == [
        "db/seed.sql line 7: INSERT INTO posts (id, author_id, status) VALUES (3, 1, 'gone'): "
        "CHECK constraint failed: status IN ('draft', 'live')"]


def test_check_violation_in_a_multi_row_insert_names_the_row_line(tmp_path: Path) -> None:
    seed = SEED.replace("(2, 1, 'live')", "(2, 1, 'published')")
    error = build_error(tmp_path, seed=seed)
    assert error.problems == [
        "db/seed.sql line 4 (row 2 of the statement at line 2): INSERT INTO posts (id, author_id, "
        "status) VALUES (2, 1, 'published'): CHECK constraint failed: status IN ('draft', 'live')"]


def test_a_syntax_error_in_the_insert_itself_is_not_blamed_on_a_row(tmp_path: Path) -> None:
    seed = SEED.replace("INSERT INTO posts", "INSERT INT posts")
    error = build_error(tmp_path, seed=seed)
    assert error.problems == [
        "db/seed.sql line 2: INSERT INT posts (id, author_id, status) VALUES (1, 1, 'draft'), "
        "(2, 1, 'live'): near \"INT\": syntax error"]


def test_rows_missing_after_a_failed_insert_say_so(tmp_path: Path) -> None:
    seed = ("INSERT INTO authors (id, name) VALUES\n    (1, 'Ada'),\n    (2, NULL);\n"
            "INSERT INTO posts (id, author_id, status) VALUES (1, 1, 'draft');\n")
    error = build_error(tmp_path, seed=seed)
    assert error.problems == [
        "db/seed.sql line 3 (row 2 of the statement at line 1): INSERT INTO authors (id, name) "
        "VALUES (2, NULL): NOT NULL constraint failed: authors.name",
        "db/seed.sql: table posts, row rowid 1 (id=1): author_id = 1 references authors(id), "
        "which has no such row (inserted at db/seed.sql line 4); the statement at db/seed.sql "
        "line 1, which inserts into authors, failed (see above), which may be why"]


def test_unique_violation(tmp_path: Path) -> None:
    error = build_error(tmp_path, seed=SEED + "INSERT INTO authors (id, name) VALUES (2, 'Ada');\n")
    assert error.problems == [
        "db/seed.sql line 6: INSERT INTO authors (id, name) VALUES (2, 'Ada'): "
        "UNIQUE constraint failed: authors.name"]


def test_not_null_violation(tmp_path: Path) -> None:
    error = build_error(tmp_path, seed=SEED + "INSERT INTO posts (id, author_id) VALUES (3, 1);\n")
    assert error.problems == [
        "db/seed.sql line 6: INSERT INTO posts (id, author_id) VALUES (3, 1): "
        "NOT NULL constraint failed: posts.status"]


def test_every_failing_statement_is_reported(tmp_path: Path) -> None:
    seed = SEED + ("INSERT INTO nowhere VALUES (1);\nSELEC 1;\n"
                   "INSERT INTO authors VALUES (3, 'unclosed);\n")
    error = build_error(tmp_path, seed=seed)
    assert error.problems == [
        "db/seed.sql line 6: INSERT INTO nowhere VALUES (1): no such table: nowhere",
        'db/seed.sql line 7: SELEC 1: near "SELEC": syntax error',
        "db/seed.sql line 8: INSERT INTO authors VALUES (3, 'unclosed);: "
        "unrecognized token: \"'unclosed);\""]


def test_rollback_in_the_seed_is_a_problem(tmp_path: Path) -> None:
    error = build_error(tmp_path, seed=SEED + "ROLLBACK;\n")
    assert error.problems == [
        "db/seed.sql line 6: this statement ended the seed transaction, so the rows seeded before "
        "it are gone; remove ROLLBACK (and ON CONFLICT ROLLBACK) from the seed"]


# ---------------------------------------------------------------------------------------------
# Files


def test_missing_file_and_directory(tmp_path: Path) -> None:
    schema_file = write(tmp_path, "db/schema.sql", SCHEMA)
    with pytest.raises(DatabaseError) as caught:
        build_database(tmp_path / "out.db", [schema_file, tmp_path / "db"],
                       [tmp_path / "db" / "missing.sql"], root=tmp_path)
    assert caught.value.problems == [
        "db: cannot read the schema file: it is a directory, expected a .sql file",
        "db/missing.sql: cannot read the seed file: No such file or directory"]


def test_non_utf8_file_names_the_line_and_byte(tmp_path: Path) -> None:
    schema_file = write(tmp_path, "db/schema.sql", SCHEMA)
    seed = tmp_path / "db" / "seed.sql"
    seed.write_bytes(b"-- seed\nINSERT INTO authors VALUES (1, 'Andr\xe9');\n")
    with pytest.raises(DatabaseError) as caught:
        build_database(tmp_path / "out.db", [schema_file], [seed], root=tmp_path)
    assert caught.value.problems == [
        "db/seed.sql line 2: the seed file is not UTF-8 text (byte 0xe9 at offset 44); "
        "save it as UTF-8"]


def test_utf8_bom_and_crlf_are_fine(tmp_path: Path) -> None:
    schema_file = tmp_path / "schema.sql"
    schema_file.write_bytes(b"\xef\xbb\xbf" + SCHEMA.replace("\n", "\r\n").encode())
    seed = tmp_path / "seed.sql"
    seed.write_bytes(SEED.replace("\n", "\r\n").encode())
    build_database(tmp_path / "out.db", [schema_file], [seed])


def test_empty_schema_and_no_schema(tmp_path: Path) -> None:
    error = build_error(tmp_path, schema="-- nothing yet\n", seed=None)
    assert error.problems == [
        "db/schema.sql: the schema file holds no SQL statement; expected CREATE TABLE ... "
        "statements"]
    with pytest.raises(DatabaseError) as caught:
        build_database(tmp_path / "out.db", [])
    assert caught.value.problems == [
        "no schema file given; expected at least one .sql file of CREATE TABLE statements"]


# ---------------------------------------------------------------------------------------------
# Foreign keys


def test_foreign_key_violation_names_table_row_reference_and_line(tmp_path: Path) -> None:
    """Issue 8's must-show: one corrupted seed value, and the message names table and row."""
    seed = SEED.replace("(2, 1, 'live')", "(2, 99, 'live')")
    error = build_error(tmp_path, seed=seed)
    assert error.problems == [
        "db/seed.sql: table posts, row rowid 2 (id=2): author_id = 99 references authors(id), "
        "which has no such row (inserted at db/seed.sql line 4)"]


def test_foreign_key_violation_in_a_without_rowid_table(tmp_path: Path) -> None:
    error = build_error(tmp_path, seed=SEED.replace("('math', 1)", "('math', 1), ('art', 5)"))
    assert error.problems == [
        "db/seed.sql: table tags, row (code='art'): author_id = 5 references authors(id), "
        "which has no such row (inserted at db/seed.sql line 5)"]


def test_foreign_key_to_a_missing_table(tmp_path: Path) -> None:
    schema = "CREATE TABLE notes (id INTEGER PRIMARY KEY, ref INTEGER REFERENCES gone (id));\n"
    error = build_error(tmp_path, schema=schema, seed="INSERT INTO notes VALUES (1, 4);\n")
    assert error.problems == [
        "db/seed.sql line 1: INSERT INTO notes VALUES (1, 4): no such table: main.gone"]
    # Written with foreign keys off, the row is found by the check.
    conn = sqlite3.connect(":memory:")
    conn.executescript(schema + "INSERT INTO notes VALUES (1, 4);")
    assert verify_database(conn, label="notes") == [
        "notes: table notes, row rowid 1 (id=1): ref = 4 references gone(id), but there is no "
        "table gone"]


def test_composite_foreign_key(tmp_path: Path) -> None:
    schema = ("CREATE TABLE slots (day TEXT, hour INTEGER, PRIMARY KEY (day, hour));\n"
              "CREATE TABLE talks (id INTEGER PRIMARY KEY, day TEXT, hour INTEGER,\n"
              "  FOREIGN KEY (day, hour) REFERENCES slots (day, hour));\n")
    seed = "INSERT INTO slots VALUES ('mon', 9);\nINSERT INTO talks VALUES (1, 'mon', 10);\n"
    error = build_error(tmp_path, schema=schema, seed=seed)
    assert error.problems == [
        "db/seed.sql: table talks, row rowid 1 (id=1): (day, hour) = ('mon', 10) references "
        "slots(day, hour), which has no such row (inserted at db/seed.sql line 2)"]


def test_foreign_key_mismatch_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    schema = ("CREATE TABLE parent (id INTEGER PRIMARY KEY, code TEXT);\n"
              "CREATE TABLE child (id INTEGER PRIMARY KEY, code TEXT REFERENCES parent (code));\n")
    error = build_error(tmp_path, schema=schema, seed="INSERT INTO child VALUES (1, 'x');\n")
    assert error.problems == [
        "db/seed.sql line 1: INSERT INTO child VALUES (1, 'x'): foreign key mismatch - "
        '"child" referencing "parent"',
        'PRAGMA foreign_key_check failed: foreign key mismatch - "child" referencing "parent"; '
        "a foreign key must reference its parent's PRIMARY KEY or columns with a UNIQUE index"]


def test_foreign_key_violation_by_a_schema_insert_names_the_row(tmp_path: Path) -> None:
    schema = SCHEMA + "INSERT INTO posts VALUES (1, 3, 'live');\n"
    error = build_error(tmp_path, schema=schema, seed=None)
    assert error.problems == [
        "db/schema.sql line 15: table posts, row rowid 1 (id=1): author_id = 3 references "
        "authors(id), which has no such row"]


def test_problems_are_capped(tmp_path: Path) -> None:
    rows = ",\n".join(f"({i}, {1000 + i}, 'live')" for i in range(1, 81))
    error = build_error(tmp_path, seed=f"INSERT INTO posts VALUES\n{rows};\n")
    assert len(error.problems) == MAX_PROBLEMS + 1
    assert error.problems[0] == (
        "db/seed.sql: table posts, row rowid 1 (id=1): author_id = 1001 references authors(id), "
        "which has no such row (inserted at db/seed.sql line 2)")
    assert error.problems[-1] == "... and 30 more problems"
    assert error.describe().splitlines()[0].endswith(
        ": more than 50 problems, the first 50 shown")


# ---------------------------------------------------------------------------------------------
# The final checks and verify_database


CORRUPT_INDEX = """\
CREATE TABLE t (a INTEGER, b TEXT);
CREATE INDEX t_a ON t (a);
INSERT INTO t VALUES (1, 'x'), (2, 'y');
PRAGMA writable_schema = ON;
UPDATE sqlite_master SET sql = 'CREATE INDEX t_a ON t (b)' WHERE name = 't_a';
"""


def test_integrity_check_of_the_finished_file_is_reported(tmp_path: Path) -> None:
    """An index whose definition no longer matches its entries: only a new connection sees it,
    which is how the finished file is checked."""
    error = build_error(tmp_path, schema=CORRUPT_INDEX, seed=None)
    assert error.problems == [
        "after loading db/schema.sql: PRAGMA integrity_check: row 1 missing from index t_a",
        "after loading db/schema.sql: PRAGMA integrity_check: row 2 missing from index t_a"]


def test_verify_finds_a_dangling_row_written_with_foreign_keys_off(tmp_path: Path) -> None:
    schema_file = write(tmp_path, "schema.sql", SCHEMA)
    target = tmp_path / "ok.db"
    build_database(target, [schema_file], [write(tmp_path, "seed.sql", SEED)])
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("INSERT INTO posts VALUES (3, 42, 'live')")  # foreign keys are off by default
    assert verify_database(conn, label="mine") == [
        "mine: table posts, row rowid 3 (id=3): author_id = 42 references authors(id), "
        "which has no such row"]
    assert verify_database(conn)[0].startswith(f"{target}: table posts, row rowid 3 (id=3)")
    conn.close()
    assert verify_database(target) == [
        f"{target}: table posts, row rowid 3 (id=3): author_id = 42 references authors(id), "
        "which has no such row"]


def test_verify_of_missing_garbage_and_damaged_files(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    assert verify_database(missing) == [f"{missing}: no such database file"]
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    assert verify_database(garbage, label="garbage.db") == [
        "garbage.db: PRAGMA integrity_check failed: file is not a database; the file is damaged "
        "or not a SQLite database"]
    # A real file with one table page overwritten.
    damaged = tmp_path / "damaged.db"
    conn = sqlite3.connect(damaged, isolation_level=None)
    conn.execute("PRAGMA page_size = 1024")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO t (body) VALUES (?)", [("x" * 200,) for _ in range(200)])
    conn.execute("COMMIT")
    conn.close()
    data = bytearray(damaged.read_bytes())
    data[3 * 1024 + 8: 3 * 1024 + 200] = b"\xff" * 192  # inside a leaf page of t
    damaged.write_bytes(bytes(data))
    problems = verify_database(damaged, label="damaged.db")
    # What SQLite says depends on its version and the page layout: a list of broken cells
    # ("On tree page 4 cell 3: Offset 65535 out of range ...") or "malformed".
    assert problems
    assert all(p.startswith("damaged.db: PRAGMA integrity_check") for p in problems)
    assert any("malformed" in p or "page" in p for p in problems)


# ---------------------------------------------------------------------------------------------
# The content-pipeline example (examples/content-pipeline/db)


def test_content_pipeline_builds_clean(tmp_path: Path) -> None:
    target = tmp_path / "pipeline.db"
    build_database(target, [PIPELINE / "schema.sql"], [PIPELINE / "seed.sql"])
    conn = sqlite3.connect(target)
    tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()
    assert tables == (14,)
    assert conn.execute("SELECT count(*) FROM content_patterns").fetchone() == (3,)
    conn.close()


def test_content_pipeline_corrupted_foreign_key_names_table_and_row(tmp_path: Path) -> None:
    seed = (PIPELINE / "seed.sql").read_text(encoding="utf-8")
    row = "(2, 4, NULL, 'format',"
    assert seed.count(row) == 1
    corrupted = write(tmp_path, "db/seed.sql", seed.replace(row, "(2, 9999, NULL, 'format',"))
    line = seed[:seed.index(row)].count("\n") + 1
    with pytest.raises(DatabaseError) as caught:
        build_database(tmp_path / "out.db", [PIPELINE / "schema.sql"], [corrupted], root=tmp_path)
    assert caught.value.problems == [
        "db/seed.sql: table content_patterns, row rowid 2 (id=2): competitor_content_id = 9999 "
        f"references competitor_content(id), which has no such row (inserted at db/seed.sql line "
        f"{line})"]
