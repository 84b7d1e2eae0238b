"""Content ideas from the complete research briefs, in the active voice.

Each complete brief without an idea gets one, ``proposed``: written for the active voice
profile, its angle built on the content pattern that shares the most keywords with the
brief (ties go to the pattern used least so far, so the ideas vary). Open briefs have no
evidence yet and get no idea.
"""

from __future__ import annotations

import sqlite3

from pipeline import db
from pipeline.stages import Outcome
from pipeline.text import keywords, overlap, plural

STORY = "PLAN-2"
ORDER = 30

TITLE_ENDINGS = {
    "hook": "the number that surprised us",
    "format": "before and after",
    "topic": "what our own books say",
    "structure": "a short guide",
    "cta": "one thing to try this week",
}
"""How an idea's title ends, by the type of the pattern its angle follows."""


def topic_of(brief_title: str) -> str:
    """The topic in a brief's title: ``Interview: a bakery owner`` -> ``A bakery owner``."""
    topic = brief_title.rsplit(": ", 1)[-1].strip()
    return topic[:1].upper() + topic[1:]


def pick_pattern(brief: sqlite3.Row, patterns: list[sqlite3.Row],
                 used: dict[int, int]) -> sqlite3.Row:
    """The pattern closest to the brief; the least used, then the oldest, on ties."""
    words = keywords(brief["title"], brief["question"], brief["findings"])
    return min(patterns, key=lambda p: (-overlap(words, p["description"]), used[p["id"]],
                                        p["id"]))


def run(conn: sqlite3.Connection) -> Outcome:
    """Propose one idea for each complete brief that has none."""
    voice = next(iter(db.query(conn, "SELECT * FROM voice_profile WHERE is_active = 1")), None)
    patterns = db.query(conn, "SELECT * FROM content_patterns ORDER BY id")
    if not patterns:
        return Outcome(0, "ideas: no content patterns to build angles on; nothing proposed")
    used = {p["id"]: sum(1 for (angle,) in conn.execute("SELECT angle FROM content_ideas")
                         if p["description"] in angle) for p in patterns}
    briefs = db.query(conn, "SELECT * FROM research_briefs WHERE status = 'complete' AND id NOT"
                      " IN (SELECT brief_id FROM content_ideas) ORDER BY id")
    for brief in briefs:
        pattern = pick_pattern(brief, patterns, used)
        used[pattern["id"]] += 1
        title = f"{topic_of(brief['title'])}: {TITLE_ENDINGS[pattern['pattern_type']]}"
        angle = pattern["description"]
        if voice is not None:
            angle += f" For {voice['audience'].lower()}; {voice['tone'].lower()}."
        idea_id = db.insert(conn, "INSERT INTO content_ideas (brief_id, voice_profile_id,"
                            " title, angle) VALUES (?, ?, ?, ?)", brief["id"],
                            voice["id"] if voice is not None else None, title, angle)
        db.log(conn, STORY, f"idea {idea_id} proposed from brief {brief['id']}: {title}",
               ref=("content_ideas", idea_id))
    if briefs and voice is None:
        db.log(conn, STORY, "no active voice profile: ideas proposed without a voice",
               level="warning")
    return Outcome(len(briefs), f"ideas: {plural(len(briefs), 'new idea')} proposed")
