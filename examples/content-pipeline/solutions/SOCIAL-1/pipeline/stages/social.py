"""LinkedIn and X posts derived from the published blog posts.

When a blog post is out, the LinkedIn and X slots of its idea get a short post each, made
from it: the title, its one thing to try this week and the link (an X post is cut to 280
characters, the link always kept). A derived post is ``approved`` as written (its blog
post passed review), then published on its own scheduled day. Social slots whose blog
slot was cancelled are cancelled too.
"""

from __future__ import annotations

import sqlite3

from pipeline import db
from pipeline.stages import Outcome
from pipeline.stages.publish import publish, unique_url
from pipeline.text import plural, slug, word_count

STORY = "SOCIAL-1"
ORDER = 80

X_LIMIT = 280
ADDRESSES = {
    "linkedin": "https://www.linkedin.example.com/posts/founder-",
    "x": "https://x.example.com/founder/status/",
}
"""Where a derived post goes, by channel (its slug is appended)."""


def try_line(body: str) -> str:
    """The blog post's "Try this week:" line, or ``""``."""
    return next((line for line in body.splitlines() if line.startswith("Try this week:")), "")


def derived(channel: str, title: str, body: str, url: str) -> str:
    """The text of the ``channel`` post made from a blog post."""
    tip = try_line(body)
    if channel == "linkedin":
        return "\n\n".join(part for part in (title, tip, f"The whole story: {url}") if part)
    text = f"{title}. {tip} {url}" if tip else f"{title} {url}"
    if len(text) > X_LIMIT:
        room = X_LIMIT - len(url) - 2
        text = f"{title[:room].rstrip()}… {url}"
    return text


def cancel_orphans(conn: sqlite3.Connection) -> int:
    """Cancel the social slots whose blog slot was cancelled; return how many."""
    return conn.execute("""
        UPDATE content_plan SET status = 'cancelled'
        WHERE channel IN ('linkedin', 'x') AND status = 'scheduled' AND idea_id IN (
            SELECT idea_id FROM content_plan WHERE channel = 'blog' AND status = 'cancelled')
        """).rowcount


def run(conn: sqlite3.Connection) -> Outcome:
    """Write and publish the social posts of every blog post that is out."""
    slots = db.query(conn, """
        SELECT s.id, s.channel, s.scheduled_for, d.title, d.body, b.url
        FROM content_plan s
        JOIN content_plan bp ON bp.idea_id = s.idea_id AND bp.channel = 'blog'
        JOIN drafts d ON d.plan_id = bp.id
        JOIN published b ON b.draft_id = d.id AND b.channel = 'blog'
        WHERE s.channel IN ('linkedin', 'x') AND s.status = 'scheduled'
        ORDER BY s.scheduled_for, s.id""")
    for slot in slots:
        text = derived(slot["channel"], slot["title"], slot["body"], slot["url"])
        draft_id = db.insert(conn, "INSERT INTO drafts (plan_id, version, title, body,"
                             " word_count, status) VALUES (?, 1, ?, ?, ?, 'approved')",
                             slot["id"], slot["title"], text, word_count(text))
        conn.execute("UPDATE content_plan SET status = 'drafted' WHERE id = ?", (slot["id"],))
        url = unique_url(conn, ADDRESSES[slot["channel"]], slug(slot["title"]))
        publish(conn, draft_id=draft_id, plan_id=slot["id"], channel=slot["channel"], url=url,
                day=slot["scheduled_for"], story=STORY)
    cancelled = cancel_orphans(conn)
    return Outcome(len(slots) + cancelled,
                   f"social: {plural(len(slots), 'new post')}, "
                   f"{plural(cancelled, 'slot')} cancelled")
