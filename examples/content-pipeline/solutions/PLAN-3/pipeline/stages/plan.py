"""The content plan: approve or reject the proposed ideas, schedule the approved ones.

An idea is approved when its brief cites a research source (a figure to stand on), and
rejected otherwise, with the reason. Approved ideas are scheduled strongest evidence first
(trend momentum + source credibility + one per message): a blog post on each working day
from the Tuesday of the planning week (the first Monday after the newest input), and a
LinkedIn and an X post on the day after their blog post. The idea is then ``planned``.
"""

from __future__ import annotations

import datetime as dt
import sqlite3

from pipeline import db
from pipeline.stages import Outcome
from pipeline.text import plural

STORY = "PLAN-3"
ORDER = 40

CHANNELS = ("blog", "linkedin", "x")
"""Every approved idea gets one slot per channel; the newsletter is planned separately."""
POSTS_PER_WEEK = 4
"""Blog posts go out Tuesday to Friday; a fifth idea waits for the next week."""


def planning_week(conn: sqlite3.Connection) -> dt.date:
    """The Monday after the newest dated input (a trend, a message, a piece of content)."""
    newest = db.scalar(conn, """
        SELECT max(day) FROM (
            SELECT observed_on AS day FROM trends
            UNION ALL SELECT date(received_at) FROM communications
            UNION ALL SELECT published_on FROM competitor_content
            UNION ALL SELECT published_on FROM founder_content)""")
    day = dt.date.fromisoformat(str(newest)) if newest else dt.date(2024, 1, 1)
    return day + dt.timedelta(days=7 - day.weekday())


def evidence_score(brief: sqlite3.Row) -> int:
    """Trend momentum (1-5) + research credibility (1-5) + one per message in the findings."""
    findings: str = brief["findings"] or ""
    messages = sum(1 for line in findings.splitlines() if line.startswith("Message "))
    return int(brief["momentum"] or 0) + int(brief["credibility"] or 0) + messages


def decide(conn: sqlite3.Connection) -> int:
    """Approve or reject every proposed idea; return how many were decided."""
    ideas = db.query(conn, """
        SELECT i.id, b.id AS brief_id, b.research_id FROM content_ideas i
        JOIN research_briefs b ON b.id = i.brief_id
        WHERE i.status = 'proposed' ORDER BY i.id""")
    for idea in ideas:
        if idea["research_id"] is not None:
            conn.execute("UPDATE content_ideas SET status = 'approved' WHERE id = ?",
                         (idea["id"],))
            db.log(conn, STORY, f"idea {idea['id']} approved", ref=("content_ideas", idea["id"]))
        else:
            reason = (f"brief {idea['brief_id']} cites no research source: a trend and "
                      "messages alone are not enough to publish on")
            conn.execute("UPDATE content_ideas SET status = 'rejected', rejection_reason = ?"
                         " WHERE id = ?", (reason, idea["id"]))
            db.log(conn, STORY, f"idea {idea['id']} rejected: {reason}", level="warning",
                   ref=("content_ideas", idea["id"]))
    return len(ideas)


def schedule(conn: sqlite3.Connection) -> int:
    """Give every approved idea its slots; return how many slots were added."""
    ideas = db.query(conn, """
        SELECT i.id, b.findings, t.momentum, r.credibility FROM content_ideas i
        JOIN research_briefs b ON b.id = i.brief_id
        LEFT JOIN trends t ON t.id = b.trend_id
        LEFT JOIN research r ON r.id = b.research_id
        WHERE i.status = 'approved'""")
    ideas.sort(key=lambda idea: (-evidence_score(idea), idea["id"]))
    week = planning_week(conn)
    taken = db.count(conn, "SELECT count(*) FROM content_plan WHERE channel = 'blog'"
                     " AND scheduled_for >= ?", week.isoformat())
    added = 0
    for n, idea in enumerate(ideas, start=taken):
        blog_day = week + dt.timedelta(days=1 + n % POSTS_PER_WEEK + 7 * (n // POSTS_PER_WEEK))
        for channel in CHANNELS:
            day = blog_day if channel == "blog" else blog_day + dt.timedelta(days=1)
            added += conn.execute(
                "INSERT INTO content_plan (idea_id, channel, scheduled_for) VALUES (?, ?, ?)"
                " ON CONFLICT (idea_id, channel) DO NOTHING",
                (idea["id"], channel, day.isoformat())).rowcount
        conn.execute("UPDATE content_ideas SET status = 'planned' WHERE id = ?", (idea["id"],))
        db.log(conn, STORY, f"idea {idea['id']} planned: blog on {blog_day.isoformat()}, "
               "linkedin and x the day after", ref=("content_ideas", idea["id"]))
    return added + len(ideas)


def run(conn: sqlite3.Connection) -> Outcome:
    """Decide the proposed ideas, then schedule the approved ones."""
    decided = decide(conn)
    approved = db.count(conn, "SELECT count(*) FROM content_ideas WHERE status = 'approved'")
    changed = schedule(conn)
    slots = changed - approved
    return Outcome(decided + changed, f"plan: {plural(decided, 'idea')} decided, {approved} "
                                      f"scheduled ({plural(slots, 'new plan slot')})")
