"""The weekly newsletter: one issue collecting the week's published blog posts.

A week's issue goes out once every blog slot of that week is published or cancelled and at
least one post is out. The schema plans every slot for an idea, so the issue is planned on
the idea of the week's first post (channel ``newsletter``, on the Friday), written as one
approved draft that links every blog post of the week, and published at
newsletter.example.com/issues/<Friday>.
"""

from __future__ import annotations

import datetime as dt
import sqlite3

from pipeline import db
from pipeline.stages import Outcome
from pipeline.stages.publish import publish
from pipeline.stages.social import try_line
from pipeline.text import word_count

STORY = "NEWSLETTER-1"
ORDER = 90

ISSUES = "https://newsletter.example.com/issues/"
WEEK_OF = "date(scheduled_for, '-' || ((CAST(strftime('%w', scheduled_for) AS INTEGER) + 6) % 7)" \
          " || ' days')"
"""SQL: the Monday of a slot's week."""


def issue_body(monday: dt.date, posts: list[sqlite3.Row]) -> str:
    """The issue: a heading, one line per post with its link, the lead post's tip."""
    lines = [f"# This week's posts: week of {monday.isoformat()}", "",
             f"{len(posts)} new post{'s' if len(posts) != 1 else ''} on the blog:", ""]
    lines += [f"- {post['title']}: {post['url']}" for post in posts]
    tip = try_line(posts[0]["body"])
    if tip:
        lines += ["", tip]
    return "\n".join(lines) + "\n"


def send_issue(conn: sqlite3.Connection, monday: dt.date) -> bool:
    """Plan, write and publish the issue of the week of ``monday`` if it is due."""
    friday = (monday + dt.timedelta(days=4)).isoformat()
    sunday = (monday + dt.timedelta(days=6)).isoformat()
    if db.scalar(conn, "SELECT 1 FROM content_plan WHERE channel = 'newsletter'"
                 " AND scheduled_for = ?", friday):
        return False
    pending = db.count(conn, "SELECT count(*) FROM content_plan WHERE channel = 'blog' AND"
                        " status NOT IN ('published', 'cancelled') AND scheduled_for BETWEEN"
                        " ? AND ?", monday.isoformat(), sunday)
    posts = db.query(conn, """
        SELECT p.idea_id, d.title, d.body, pub.url FROM published pub
        JOIN drafts d ON d.id = pub.draft_id JOIN content_plan p ON p.id = d.plan_id
        WHERE pub.channel = 'blog' AND date(pub.published_at) BETWEEN ? AND ?
        ORDER BY pub.published_at, pub.id""", monday.isoformat(), sunday)
    if pending or not posts:
        return False
    plan_id = db.insert(conn, "INSERT INTO content_plan (idea_id, channel, scheduled_for)"
                        " VALUES (?, 'newsletter', ?)", posts[0]["idea_id"], friday)
    body = issue_body(monday, posts)
    draft_id = db.insert(conn, "INSERT INTO drafts (plan_id, version, title, body, word_count,"
                         " status) VALUES (?, 1, ?, ?, ?, 'approved')", plan_id,
                         f"Newsletter, week of {monday.isoformat()}", body, word_count(body))
    conn.execute("UPDATE content_plan SET status = 'drafted' WHERE id = ?", (plan_id,))
    publish(conn, draft_id=draft_id, plan_id=plan_id, channel="newsletter",
            url=f"{ISSUES}{friday}", day=friday, story=STORY)
    return True


def run(conn: sqlite3.Connection) -> Outcome:
    """Send the issue of every week whose blog posts are all out."""
    weeks = [dt.date.fromisoformat(day) for (day,) in conn.execute(
        f"SELECT DISTINCT {WEEK_OF} FROM content_plan WHERE channel = 'blog' ORDER BY 1")]
    sent = [monday for monday in weeks if send_issue(conn, monday)]
    if not sent:
        return Outcome(0, "newsletter: no issue due")
    days = ", ".join((m + dt.timedelta(days=4)).isoformat() for m in sent)
    issues = "issue" if len(sent) == 1 else "issues"
    return Outcome(3 * len(sent), f"newsletter: {len(sent)} {issues} published ({days})")
