"""The content-pipeline example's SQLite schema and seed data (examples/content-pipeline/db)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

DB_DIR = Path(__file__).resolve().parents[2] / "examples" / "content-pipeline" / "db"
SCHEMA = DB_DIR / "schema.sql"
SEED = DB_DIR / "seed.sql"

SEEDED = ("founder_content", "competitor_content", "trends", "research", "communications",
          "voice_profile", "content_patterns")
LATER = ("research_briefs", "content_ideas", "content_plan", "drafts", "critique_results",
         "published", "agent_log")
TABLES = SEEDED + LATER

# (table, column, every allowed value, one rejected value)
STATE_MACHINES = [
    ("research_briefs", "status", ("open", "complete"), "closed"),
    ("content_ideas", "status", ("proposed", "approved", "rejected", "planned"), "maybe"),
    ("content_plan", "status",
     ("scheduled", "writing", "drafted", "published", "cancelled"), "postponed"),
    ("drafts", "status", ("draft", "in_review", "revise", "approved", "rejected"), "final"),
    ("critique_results", "verdict", ("pass", "revise", "reject"), "meh"),
    ("published", "channel", ("blog", "newsletter", "linkedin", "x"), "myspace"),
    ("agent_log", "level", ("debug", "info", "warning", "error"), "fatal"),
]


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


@pytest.fixture
def db(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    conn = connect(tmp_path / "pipeline.db")
    conn.executescript(SCHEMA.read_text(encoding="utf-8"))
    conn.executescript(SEED.read_text(encoding="utf-8"))
    yield conn
    conn.close()


@pytest.fixture
def chain(db: sqlite3.Connection) -> dict[str, int]:
    """One row in every later-stage table, linked brief -> idea -> plan -> draft -> critique
    and publication, as the agent would create them; returns each table's new row id."""
    ids: dict[str, int] = {}

    def insert(table: str, sql: str, *params: object) -> None:
        cur = db.execute(sql, params)
        assert cur.lastrowid is not None
        ids[table] = cur.lastrowid

    insert("research_briefs",
           "INSERT INTO research_briefs (trend_id, research_id, title, question, findings, status)"
           " VALUES (1, 1, 'Chasing late invoices', 'What gets invoices paid sooner?',"
           " 'Due date in the subject line; Tuesday sends.', 'complete')")
    insert("content_ideas",
           "INSERT INTO content_ideas (brief_id, voice_profile_id, title, angle, status)"
           " VALUES (?, 1, 'Put the due date in the subject', 'One-line fix, our numbers',"
           " 'planned')", ids["research_briefs"])
    insert("content_plan",
           "INSERT INTO content_plan (idea_id, channel, scheduled_for, status)"
           " VALUES (?, 'blog', '2024-05-07', 'drafted')", ids["content_ideas"])
    insert("drafts",
           "INSERT INTO drafts (plan_id, title, body, word_count, status)"
           " VALUES (?, 'Put the due date in the subject', 'Body text.', 2, 'approved')",
           ids["content_plan"])
    insert("critique_results",
           "INSERT INTO critique_results (draft_id, score, verdict, notes)"
           " VALUES (?, 8, 'pass', 'Concrete and short.')", ids["drafts"])
    insert("published",
           "INSERT INTO published (draft_id, channel, url)"
           " VALUES (?, 'blog', 'https://blog.example.com/due-date-in-subject')", ids["drafts"])
    insert("agent_log",
           "INSERT INTO agent_log (story_id, iteration, level, message, ref_table, ref_id)"
           " VALUES ('US-006', 1, 'info', 'published draft', 'published', ?)",
           ids["published"])
    return ids


def count(db: sqlite3.Connection, table: str) -> int:
    return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_schema_has_exactly_the_fourteen_tables(db: sqlite3.Connection) -> None:
    names = [row[0] for row in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        " ORDER BY name")]
    assert len(TABLES) == 14
    assert names == sorted(TABLES)


def test_schema_leaves_pragmas_to_the_connection() -> None:
    assert "pragma" not in SCHEMA.read_text(encoding="utf-8").lower()


@pytest.mark.parametrize("table", TABLES)
def test_every_table_has_an_integer_primary_key_id(db: sqlite3.Connection, table: str) -> None:
    columns = {row[1]: row for row in db.execute(f"PRAGMA table_info({table})")}
    _, _, decltype, _, _, pk = columns["id"]
    assert (decltype, pk) == ("INTEGER", 1)
    assert [name for name, row in columns.items() if row[5]] == ["id"]


def test_every_foreign_key_column_is_indexed(db: sqlite3.Connection) -> None:
    missing = []
    for table in TABLES:
        indexed = {
            db.execute(f"PRAGMA index_info({index[1]})").fetchone()[2]
            for index in db.execute(f"PRAGMA index_list({table})")
        }
        missing += [f"{table}.{fk[3]}" for fk in db.execute(f"PRAGMA foreign_key_list({table})")
                    if fk[3] not in indexed]
    assert missing == []


def test_integrity_and_foreign_keys_are_clean(db: sqlite3.Connection) -> None:
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []
    assert db.execute("PRAGMA foreign_keys").fetchone() == (1,)


@pytest.mark.parametrize("table", SEEDED)
def test_input_tables_are_seeded(db: sqlite3.Connection, table: str) -> None:
    assert count(db, table) > 0


@pytest.mark.parametrize("table", LATER)
def test_later_stage_tables_start_empty(db: sqlite3.Connection, table: str) -> None:
    assert count(db, table) == 0


def test_seed_uses_only_example_domains(db: sqlite3.Connection) -> None:
    hosts = set(re.findall(r"https://([^/'\s]+)", SEED.read_text(encoding="utf-8")))
    assert hosts
    assert all(h.endswith((".example.com", ".example.org")) for h in hosts), hosts


def test_a_full_story_chain_satisfies_every_constraint(
        db: sqlite3.Connection, chain: dict[str, int]) -> None:
    assert set(chain) == set(LATER)
    assert all(count(db, table) == 1 for table in LATER)
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []


@pytest.mark.parametrize(("table", "column", "allowed", "bad"), STATE_MACHINES,
                         ids=[f"{t}.{c}" for t, c, _, _ in STATE_MACHINES])
def test_state_machine_accepts_its_states_and_rejects_others(
        db: sqlite3.Connection, chain: dict[str, int], table: str, column: str,
        allowed: tuple[str, ...], bad: str) -> None:
    row_id = chain[table]
    for value in allowed:
        db.execute(f"UPDATE {table} SET {column} = ? WHERE id = ?", (value, row_id))
    with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
        db.execute(f"UPDATE {table} SET {column} = ? WHERE id = ?", (bad, row_id))
    assert db.execute(f"SELECT {column} FROM {table} WHERE id = ?", (row_id,)).fetchone() \
        == (allowed[-1],)


@pytest.mark.parametrize("score", [-1, 11])
def test_critique_score_is_between_0_and_10(
        db: sqlite3.Connection, chain: dict[str, int], score: int) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
        db.execute("UPDATE critique_results SET score = ? WHERE id = ?",
                   (score, chain["critique_results"]))


@pytest.mark.parametrize("sql", [
    "INSERT INTO founder_content (title, format, body) VALUES ('   ', 'post', 'x')",
    "INSERT INTO research (title, source_type, summary, source_url, credibility)"
    " VALUES ('t', 'report', 's', 'http://insecure.example.org/', 3)",
    "INSERT INTO content_patterns (pattern_type, description) VALUES ('hook', 'no source')",
    "INSERT INTO content_patterns (competitor_content_id, founder_content_id, pattern_type,"
    " description) VALUES (1, 1, 'hook', 'two sources')",
    "INSERT INTO research_briefs (title, question) VALUES ('t', 'no trend or research?')",
    "INSERT INTO research_briefs (trend_id, title, question, status)"
    " VALUES (1, 't', 'q', 'complete')",
], ids=["blank-title", "http-url", "pattern-no-source", "pattern-two-sources",
        "brief-no-source", "complete-brief-no-findings"])
def test_other_checks_reject_bad_rows(db: sqlite3.Connection, sql: str) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
        db.execute(sql)


def test_only_one_voice_profile_is_active(db: sqlite3.Connection) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
        db.execute("UPDATE voice_profile SET is_active = 1 WHERE is_active = 0")


@pytest.mark.parametrize("sql", [
    "INSERT INTO research_briefs (trend_id, title, question) VALUES (9999, 't', 'q')",
    "INSERT INTO content_ideas (brief_id, title, angle) VALUES (9999, 't', 'a')",
    "INSERT INTO content_plan (idea_id, channel, scheduled_for) VALUES (9999, 'x', '2024-05-01')",
    "INSERT INTO drafts (plan_id, title, body) VALUES (9999, 't', 'b')",
    "INSERT INTO critique_results (draft_id, score, verdict) VALUES (9999, 5, 'revise')",
    "INSERT INTO published (draft_id, channel, url)"
    " VALUES (9999, 'x', 'https://x.example.com/p/1')",
    "INSERT INTO content_patterns (founder_content_id, pattern_type, description)"
    " VALUES (9999, 'cta', 'd')",
], ids=["research_briefs", "content_ideas", "content_plan", "drafts", "critique_results",
        "published", "content_patterns"])
def test_dangling_foreign_key_is_rejected(db: sqlite3.Connection, sql: str) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY constraint failed"):
        db.execute(sql)


def test_corrupted_seed_fails_to_load(tmp_path: Path) -> None:
    seed = SEED.read_text(encoding="utf-8")
    # The first content_patterns row's competitor_content_id becomes a dangling 9999.
    corrupted, n = re.subn(r"(INSERT INTO content_patterns \([^)]*\) VALUES\s*\(\d+,\s*)\d+",
                           r"\g<1>9999", seed, count=1)
    assert n == 1 and corrupted != seed
    conn = connect(tmp_path / "corrupt.db")
    try:
        conn.executescript(SCHEMA.read_text(encoding="utf-8"))
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            conn.executescript(corrupted)
    finally:
        conn.close()


def test_deleting_a_draft_cascades_to_its_critiques(
        db: sqlite3.Connection, chain: dict[str, int]) -> None:
    db.execute("DELETE FROM published WHERE id = ?", (chain["published"],))
    db.execute("DELETE FROM drafts WHERE id = ?", (chain["drafts"],))
    assert count(db, "critique_results") == 0


def test_published_draft_and_cited_sources_cannot_be_deleted(
        db: sqlite3.Connection, chain: dict[str, int]) -> None:
    for sql in ("DELETE FROM drafts", "DELETE FROM content_plan", "DELETE FROM content_ideas",
                "DELETE FROM research_briefs", "DELETE FROM trends WHERE id = 1",
                "DELETE FROM research WHERE id = 1", "DELETE FROM voice_profile WHERE id = 1"):
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY constraint failed"):
            db.execute(sql)
    assert all(count(db, table) == 1 for table in LATER)


def test_deleting_a_source_piece_cascades_to_its_patterns(db: sqlite3.Connection) -> None:
    before = count(db, "content_patterns")
    db.execute("DELETE FROM competitor_content WHERE id = 2")
    assert count(db, "content_patterns") == before - 1
