"""Publishing: every approved blog draft goes live on the blog.

An approved draft of a ``drafted`` blog slot gets one ``published`` row: its address on
blog.example.com made from its title (``-2``, ``-3``... when that address is taken: URLs
are unique), published at 09:00 on its scheduled day. The slot moves to ``published``.
Nothing is published twice: ``UNIQUE (draft_id, channel)``, and the stage skips what is
already out.
"""

from __future__ import annotations

import sqlite3

from pipeline import db
from pipeline.stages import Outcome
from pipeline.text import plural, slug

STORY = "PUBLISH-1"
ORDER = 70

BLOG = "https://blog.example.com/"
PUBLISH_TIME = "09:00:00"


def unique_url(conn: sqlite3.Connection, prefix: str, name: str) -> str:
    """``prefix + name``, or with ``-2``, ``-3``... appended when an earlier post has it."""
    url, n = f"{prefix}{name}", 1
    while db.scalar(conn, "SELECT 1 FROM published WHERE url = ?", url):
        n += 1
        url = f"{prefix}{name}-{n}"
    return url


def publish(conn: sqlite3.Connection, *, draft_id: int, plan_id: int, channel: str, url: str,
            day: str, story: str = STORY) -> int:
    """Record one publication, move its slot to ``published``, log it; return its id."""
    published_id = db.insert(conn, "INSERT INTO published (draft_id, channel, url, published_at)"
                             " VALUES (?, ?, ?, ?)", draft_id, channel, url,
                             f"{day} {PUBLISH_TIME}")
    conn.execute("UPDATE content_plan SET status = 'published' WHERE id = ?", (plan_id,))
    db.log(conn, story, f"published draft {draft_id} on {channel}: {url}",
           ref=("published", published_id))
    return published_id


def run(conn: sqlite3.Connection) -> Outcome:
    """Publish every approved blog draft that is not out yet."""
    ready = db.query(conn, """
        SELECT d.id, d.title, p.id AS plan_id, p.scheduled_for FROM drafts d
        JOIN content_plan p ON p.id = d.plan_id
        WHERE p.channel = 'blog' AND p.status = 'drafted' AND d.status = 'approved'
          AND NOT EXISTS (SELECT 1 FROM published x WHERE x.draft_id = d.id)
        ORDER BY p.scheduled_for, d.id""")
    for draft in ready:
        publish(conn, draft_id=draft["id"], plan_id=draft["plan_id"], channel="blog",
                url=unique_url(conn, BLOG, slug(draft["title"])), day=draft["scheduled_for"])
    return Outcome(len(ready), f"publish: {plural(len(ready), 'blog post')} published")
