"""REVIEW-1: the critique stage gives every draft in review a verdict and moves it on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.stages import review

if TYPE_CHECKING:
    from conftest import Rows

    from pytest_ralph import RalphDatabase

MEDIOCRE = """# Month-end for bakeries

## The situation
A bakery owner told us: "Month-end takes my whole Sunday."

## Try this week
Try this week: match one week of card sales before Friday.
"""
"""No figure and an undefined trade term: 2 + 2 + 1 = 5 points, a revise."""

BAD = """# Month-end!!!

Everything about month-end, fast!!
"""
"""Nothing the voice asks for: 0 points, a reject."""


def test_verdicts_move_drafts_through_their_states(rows: Rows, ralph_db: RalphDatabase) -> None:
    good = rows.draft(rows.blog_slot("Good"))
    mediocre = rows.draft(rows.blog_slot("Mediocre"), MEDIOCRE)
    bad_slot = rows.blog_slot("Bad")
    bad = rows.draft(bad_slot, BAD)
    last_slot = rows.blog_slot("Third try")
    rows.draft(last_slot, MEDIOCRE, version=1, status="revise")
    rows.draft(last_slot, MEDIOCRE, version=2, status="revise")
    third = rows.draft(last_slot, MEDIOCRE, version=3)
    done = rows.draft(rows.blog_slot("Done"), status="approved")

    outcome = review.run(ralph_db.connection)

    assert outcome.changed == 4
    critiques = {draft_id: (score, verdict) for draft_id, score, verdict in ralph_db.execute(
        "SELECT draft_id, score, verdict FROM critique_results")}
    assert critiques == {good: (10, "pass"), mediocre: (5, "revise"), bad: (0, "reject"),
                         third: (5, "reject")}
    status = dict(ralph_db.execute("SELECT id, status FROM drafts").fetchall())
    assert (status[good], status[mediocre], status[bad], status[third], status[done]) == (
        "approved", "revise", "rejected", "rejected", "approved")
    plan = dict(ralph_db.execute("SELECT id, status FROM content_plan").fetchall())
    assert plan[bad_slot] == "cancelled" and plan[last_slot] == "cancelled"
    notes = rows.column("SELECT notes FROM critique_results WHERE draft_id = ?", mediocre)
    assert notes == ["score 5/10; needs: number, jargon; define: month-end"]
    # Nothing is left in review: a second run critiques nothing.
    assert review.run(ralph_db.connection).changed == 0
    ralph_db.check()
