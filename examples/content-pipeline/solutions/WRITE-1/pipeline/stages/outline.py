"""Outlines for the scheduled blog posts: version 1 of each post's draft.

Each ``scheduled`` blog slot without a draft gets an outline, built from its idea's brief:
the situation (the messages people sent, or else the founder's closest piece), what the
numbers say (the research source) and one thing to try this week. The outline is draft
version 1 in state ``draft`` with no word count yet (it is not prose); the slot moves to
``writing``.
"""

from __future__ import annotations

import re
import sqlite3

from pipeline import db
from pipeline.stages import Outcome
from pipeline.text import keywords, overlap, plural

STORY = "WRITE-1"
ORDER = 50

SECTIONS = ("The situation", "What the numbers say", "Try this week")
"""The headings of every outline, in order; the prose keeps them."""
ACTIONS = (
    ("overdue", "send a friendly reminder three days before each due date, not on it."),
    ("due date", "put the due date in the subject line of your next three invoices."),
    ("month-end", "block one hour on Friday to match the week's card payouts to your sales."),
)
"""What to try this week: the first whose clue is in the brief's findings wins."""
DEFAULT_ACTION = "pick one number from this post and check it against your own books."

MESSAGE = re.compile(r'^Message \((?P<channel>[^,]+), (?P<day>[^)]+)\) from (?P<sender>.+?): '
                     r'"(?P<body>.*)"$')


def outline(conn: sqlite3.Connection, title: str, brief_title: str,
            brief_findings: str | None) -> str:
    """The outline of a post called ``title`` on a brief, as markdown."""
    findings = (brief_findings or "").splitlines()
    situation = [line for line in findings if MESSAGE.match(line)]
    if not situation:
        words = keywords(brief_title, brief_findings)
        pieces = db.query(conn, "SELECT title, body, url FROM founder_content ORDER BY id")
        best = max(pieces, key=lambda p: overlap(words, p["title"], p["body"]), default=None)
        if best is not None:
            situation = [f"Founder piece: {best['title']}: \"{best['body']}\""]
    numbers = [line for line in findings if line.startswith("Research: ")]
    text = (brief_findings or "").lower()
    action = next((todo for clue, todo in ACTIONS if clue in text), DEFAULT_ACTION)
    parts = [f"# {title}"]
    for heading, items in zip(SECTIONS, (situation, numbers, [action]), strict=True):
        parts.append(f"## {heading}\n" + "\n".join(f"- {item}" for item in items))
    return "\n\n".join(parts) + "\n"


def run(conn: sqlite3.Connection) -> Outcome:
    """Outline every scheduled blog slot that has no draft yet."""
    slots = db.query(conn, """
        SELECT p.id, i.title, b.title AS brief_title, b.findings FROM content_plan p
        JOIN content_ideas i ON i.id = p.idea_id
        JOIN research_briefs b ON b.id = i.brief_id
        WHERE p.channel = 'blog' AND p.status = 'scheduled'
          AND NOT EXISTS (SELECT 1 FROM drafts d WHERE d.plan_id = p.id)
        ORDER BY p.scheduled_for, p.id""")
    for slot in slots:
        body = outline(conn, slot["title"], slot["brief_title"], slot["findings"])
        draft_id = db.insert(conn, "INSERT INTO drafts (plan_id, version, title, body)"
                             " VALUES (?, 1, ?, ?)", slot["id"], slot["title"], body)
        conn.execute("UPDATE content_plan SET status = 'writing' WHERE id = ?", (slot["id"],))
        db.log(conn, STORY, f"outlined plan slot {slot['id']}: {slot['title']}",
               ref=("drafts", draft_id))
    return Outcome(2 * len(slots), f"outline: {plural(len(slots), 'new outline')}")
