"""Research briefs from the trends, the research sources and the communications.

One brief per trend, citing the research source that shares the most keywords with it
(credibility breaks ties) and every communication that shares one; then one brief per
research source no trend brief cites. A brief with evidence (a source or a message) is
``complete``, with its findings; one without stays ``open`` and is logged as a warning.
"""

from __future__ import annotations

import sqlite3

from pipeline import db
from pipeline.stages import Outcome
from pipeline.text import keywords, overlap, plural

STORY = "PLAN-1"
ORDER = 20


def research_line(source: sqlite3.Row) -> str:
    """One findings line for a research source."""
    return (f"Research: {source['title']} ({source['source_type']}, credibility "
            f"{source['credibility']}/5): {source['summary']} Source: {source['source_url']}")


def message_line(message: sqlite3.Row) -> str:
    """One findings line for a customer or team message."""
    return (f"Message ({message['channel']}, {message['received_at'][:10]}) from "
            f"{message['sender']}: \"{message['body']}\"")


def question_for(topic: str, messages: list[sqlite3.Row]) -> str:
    """The question a brief answers: the first one a message asks, else a generic one."""
    for message in messages:
        for sentence in message["body"].replace("!", ".").split(". "):
            if sentence.strip().endswith("?"):
                return f"People ask: \"{sentence.strip()}\""
    return f"What does '{topic}' change for a small business, and what should it do now?"


def add_brief(conn: sqlite3.Connection, *, title: str, trend_id: int | None,
              source: sqlite3.Row | None, messages: list[sqlite3.Row]) -> str:
    """Insert one brief (complete when it has evidence) and log it; return its status."""
    lines = ([research_line(source)] if source is not None else [])
    lines += [message_line(m) for m in messages]
    findings = "\n".join(lines) or None
    status = "complete" if findings else "open"
    brief_id = db.insert(
        conn,
        "INSERT INTO research_briefs (trend_id, research_id, title, question, findings, status,"
        " completed_at) VALUES (?, ?, ?, ?, ?, ?,"
        " CASE WHEN ? = 'complete' THEN datetime('now') END)",
        trend_id, source["id"] if source is not None else None, title,
        question_for(title, messages), findings, status, status)
    if status == "open":
        db.log(conn, STORY, f"brief {brief_id} stays open: no research source or message "
               f"about '{title}'", level="warning", ref=("research_briefs", brief_id))
    else:
        pieces = f"{plural(len(lines), 'piece')} of evidence"
        db.log(conn, STORY, f"brief {brief_id} complete: {title} ({pieces})",
               ref=("research_briefs", brief_id))
    return status


def run(conn: sqlite3.Connection) -> Outcome:
    """Write the briefs that do not exist yet."""
    research = db.query(conn, "SELECT * FROM research ORDER BY id")
    messages = db.query(conn, "SELECT * FROM communications ORDER BY received_at, id")
    made: list[str] = []

    def related(words: set[str]) -> list[sqlite3.Row]:
        return [m for m in messages if overlap(words, m["subject"], m["body"])]

    for trend in db.query(conn, "SELECT * FROM trends WHERE id NOT IN (SELECT trend_id FROM"
                          " research_briefs WHERE trend_id IS NOT NULL) ORDER BY id"):
        words = keywords(trend["topic"], trend["description"])
        ranked = sorted(((overlap(words, r["title"], r["summary"]), r["credibility"], -r["id"], r)
                         for r in research), key=lambda item: item[:3], reverse=True)
        source = ranked[0][3] if ranked and ranked[0][0] > 0 else None
        made.append(add_brief(conn, title=trend["topic"], trend_id=trend["id"], source=source,
                              messages=related(words)))

    for source in db.query(conn, "SELECT * FROM research WHERE id NOT IN (SELECT research_id"
                           " FROM research_briefs WHERE research_id IS NOT NULL) ORDER BY id"):
        words = keywords(source["title"], source["summary"])
        made.append(add_brief(conn, title=source["title"], trend_id=None, source=source,
                              messages=related(words)))

    complete = made.count("complete")
    return Outcome(len(made), f"briefs: {plural(len(made), 'new brief')} ({complete} complete, "
                              f"{len(made) - complete} open)")
