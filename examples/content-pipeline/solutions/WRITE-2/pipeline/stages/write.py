"""Drafts in the active voice: each outline becomes a post, sent to review.

The outline's sections stay as the post's headings. The situation opens the post with the
real message (or founder piece) behind it, the numbers section gives the research figure
with its source, and the post ends with its one thing to try this week, as the voice asks.
The draft gets its word count and moves to ``in_review``; its slot to ``drafted``.
"""

from __future__ import annotations

import re
import sqlite3

from pipeline import db
from pipeline.stages import Outcome
from pipeline.stages.outline import MESSAGE, SECTIONS
from pipeline.text import plural, word_count
from pipeline.voice import MAX_EXCLAMATIONS, active_voice

STORY = "WRITE-2"
ORDER = 55

OPENINGS = {
    "call": "On a sales call on {day} we heard this",
    "community": "Someone asked in our community on {day}",
}
"""How a post opens on a message, by the message's channel."""
DEFAULT_OPENING = "A customer wrote to us on {day}"
RESEARCH = re.compile(r"^Research: (?P<title>.+?) \((?P<kind>\w+), credibility \d/5\): "
                      r"(?P<summary>.+) Source: (?P<url>\S+)$")
FOUNDER = re.compile(r'^Founder piece: (?P<title>.+?): "(?P<body>.*)"$')


def sections(outline: str) -> dict[str, list[str]]:
    """The bullet points of an outline, by heading."""
    found: dict[str, list[str]] = {}
    current = None
    for line in outline.splitlines():
        if line.startswith("## "):
            current = found.setdefault(line[3:].strip(), [])
        elif line.startswith("- ") and current is not None:
            current.append(line[2:].strip())
    return found


def situation(item: str) -> str:
    """The opening sentence for one situation bullet."""
    message = MESSAGE.match(item)
    if message:
        opening = OPENINGS.get(message["channel"], DEFAULT_OPENING).format(day=message["day"])
        return f"{opening}: \"{message['body']}\""
    founder = FOUNDER.match(item)
    if founder:
        return f"We wrote about this before, in \"{founder['title']}\": {founder['body']}"
    return item


def numbers(item: str) -> str:
    """The figure and its source, for one research bullet."""
    source = RESEARCH.match(item)
    if not source:
        return item
    return f"{source['summary']} Source: {source['title']} ({source['kind']}, {source['url']})."


def prose(title: str, outline: str) -> str:
    """The post written from its outline."""
    parts = sections(outline)
    situations, figures, actions = (parts.get(heading, []) for heading in SECTIONS)
    body = [f"# {title}",
            f"## {SECTIONS[0]}\n" + " ".join(situation(s) for s in situations),
            f"## {SECTIONS[1]}\n" + (" ".join(numbers(f) for f in figures)
                                    or "We have no figure on this yet."),
            f"## {SECTIONS[2]}\nTry this week: " + (actions[0] if actions else
                                                   "one small change, and measure it.")]
    return "\n\n".join(body) + "\n"


def keep_exclamations(body: str, limit: int = MAX_EXCLAMATIONS) -> str:
    """``body`` with every exclamation mark after the first ``limit`` made a full stop."""
    kept = 0

    def one(match: re.Match[str]) -> str:
        nonlocal kept
        kept += 1
        return "!" if kept <= limit else "."
    return re.sub("!", one, body)


def run(conn: sqlite3.Connection) -> Outcome:
    """Write every outline into a post in the active voice and send it to review."""
    voice = active_voice(conn)
    in_voice = f" in the voice '{voice.name}'" if voice is not None else ""
    outlines = db.query(conn, """
        SELECT d.id, d.plan_id, d.title, d.body FROM drafts d
        JOIN content_plan p ON p.id = d.plan_id
        WHERE p.channel = 'blog' AND p.status = 'writing' AND d.status = 'draft'
          AND d.word_count IS NULL
        ORDER BY d.id""")
    for draft in outlines:
        body = keep_exclamations(prose(draft["title"], draft["body"]))
        conn.execute("UPDATE drafts SET body = ?, word_count = ?, status = 'in_review'"
                     " WHERE id = ?", (body, word_count(body), draft["id"]))
        conn.execute("UPDATE content_plan SET status = 'drafted' WHERE id = ?",
                     (draft["plan_id"],))
        db.log(conn, STORY, f"draft {draft['id']} written{in_voice} ({word_count(body)} words),"
               " sent to review", ref=("drafts", draft["id"]))
    return Outcome(len(outlines),
                   f"write: {plural(len(outlines), 'draft')} written and sent to review")
