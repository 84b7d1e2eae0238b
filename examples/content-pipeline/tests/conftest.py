"""Fixtures for the pipeline's tests: rows of the later stages, inserted directly.

Every test gets its own database from the ``ralph_db`` fixture of pytest-ralph, built from
``db/schema.sql`` and ``db/seed.sql`` (see ``pytest.ini``) with foreign keys on. The
``rows`` fixture puts a post at the stage a test needs, so that each test depends only on
the stage it tests. Nothing here imports the pipeline: before the agent writes a stage,
the test of that stage fails on its own import.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_ralph import RalphDatabase

GOOD_POST = """# Put the due date in the subject line

## The situation
A customer wrote to us on 2024-04-11: "Can the reminder go out three days before the due date?"

## What the numbers say
Invoices with a due date in the subject line were paid 5 days sooner.

## Try this week
Try this week: put the due date in the subject line of your next three invoices.
"""
"""A post that meets every rule of the seeded voice."""


@dataclass(frozen=True)
class Rows:
    """Inserts the rows a test starts from, on the test's connection."""

    conn: sqlite3.Connection
    good_post: str = GOOD_POST

    def blog_slot(self, title: str = "Put the due date in the subject line", *,
                  day: str = "2024-05-07", status: str = "drafted") -> int:
        """A brief (trend 1, research 1), its planned idea and a blog slot; the slot's id."""
        brief = self.conn.execute(
            "INSERT INTO research_briefs (trend_id, research_id, title, question, findings,"
            " status) VALUES (1, 1, ?, 'What gets invoices paid sooner?', 'Research: ...',"
            " 'complete')", (title,)).lastrowid
        idea = self.conn.execute(
            "INSERT INTO content_ideas (brief_id, voice_profile_id, title, angle, status)"
            " VALUES (?, 1, ?, 'One change, our numbers', 'planned')", (brief, title)).lastrowid
        return self._id("INSERT INTO content_plan (idea_id, channel, scheduled_for, status)"
                        " VALUES (?, 'blog', ?, ?)", idea, day, status)

    def draft(self, slot: int, body: str = GOOD_POST, *, version: int = 1,
              status: str = "in_review") -> int:
        """A draft of ``slot`` titled like its body's first line; the draft's id."""
        title = body.splitlines()[0].lstrip("# ")
        return self._id("INSERT INTO drafts (plan_id, version, title, body, word_count, status)"
                        " VALUES (?, ?, ?, ?, ?, ?)", slot, version, title, body,
                        len(body.split()), status)

    def column(self, sql: str, *params: object) -> list[object]:
        """The first column of every row of ``sql``."""
        return [row[0] for row in self.conn.execute(sql, params)]

    def _id(self, sql: str, *params: object) -> int:
        rowid = self.conn.execute(sql, params).lastrowid
        assert rowid is not None
        return rowid


@pytest.fixture
def rows(ralph_db: RalphDatabase) -> Rows:
    """Row helpers on this test's ``ralph_db`` connection."""
    return Rows(ralph_db.connection)
