"""PUBLISH-1: every approved blog draft is published once, each at its own address."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.stages import publish

if TYPE_CHECKING:
    from conftest import Rows

    from pytest_ralph import RalphDatabase


def test_each_approved_post_is_published_once_at_its_own_address(
        rows: Rows, ralph_db: RalphDatabase) -> None:
    first = rows.blog_slot(day="2024-05-07")
    second = rows.blog_slot(day="2024-05-08")  # the same title: the same address, at first
    waiting = rows.blog_slot(day="2024-05-09")
    rows.draft(first, status="approved")
    rows.draft(second, status="approved")
    rows.draft(waiting, status="in_review")

    assert publish.run(ralph_db.connection).changed == 2

    out = ralph_db.execute("SELECT d.plan_id, pub.channel, pub.url, pub.published_at"
                           " FROM published pub JOIN drafts d ON d.id = pub.draft_id"
                           " ORDER BY pub.id").fetchall()
    base = "https://blog.example.com/put-the-due-date-in-the-subject-line"
    assert out == [(first, "blog", base, "2024-05-07 09:00:00"),
                   (second, "blog", f"{base}-2", "2024-05-08 09:00:00")]
    plan = dict(ralph_db.execute("SELECT id, status FROM content_plan").fetchall())
    assert (plan[first], plan[second], plan[waiting]) == ("published", "published", "drafted")
    # Already out: a second run publishes nothing.
    assert publish.run(ralph_db.connection).changed == 0
    ralph_db.check()
