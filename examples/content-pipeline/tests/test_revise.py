"""WRITE-3: a draft sent back for revision gets a new version; the old one stays."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.stages import revise

if TYPE_CHECKING:
    from conftest import Rows

    from pytest_ralph import RalphDatabase

SENT_BACK = """# Month-end for bakeries

## The situation
A bakery owner told us: "Month-end takes my whole Sunday."

## Try this week
Try this week: match one week of card sales before Friday.
"""


def test_a_revise_verdict_gets_a_new_version(rows: Rows, ralph_db: RalphDatabase) -> None:
    slot = rows.blog_slot("Month-end")
    first = rows.draft(slot, SENT_BACK, status="revise")
    ralph_db.execute("INSERT INTO critique_results (draft_id, critic, score, verdict, notes)"
                     " VALUES (?, 'voice-rubric', 5, 'revise',"
                     " 'score 5/10; needs: jargon; define: month-end')", (first,))

    assert revise.run(ralph_db.connection).changed == 1

    versions = ralph_db.execute("SELECT id, version, status, body, word_count FROM drafts"
                                " WHERE plan_id = ? ORDER BY version", (slot,)).fetchall()
    assert [(v[1], v[2]) for v in versions] == [(1, "revise"), (2, "in_review")]
    assert versions[0][3] == SENT_BACK
    new_body, words = versions[1][3], versions[1][4]
    assert "Month-end (closing the books for the month) takes my whole Sunday" in new_body
    assert isinstance(words, int) and words > 0
    # Version 2 exists: a second run writes nothing (UNIQUE (plan_id, version) is never hit).
    assert revise.run(ralph_db.connection).changed == 0
    ralph_db.check()
