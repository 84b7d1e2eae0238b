"""Revisions: a draft sent back by its critique gets a new version.

For each draft in state ``revise`` with no newer version, the reviser reads what the
latest critique says it needs and writes version n+1 (a new row: ``UNIQUE (plan_id,
version)`` keeps one row per version) with what it can fix: definitions for the jargon,
a figure from a related source, the missing "Try this week" line, exclamation marks beyond
the first. The old version stays as it was, in ``revise``, as history; the new one is
written as ``draft`` and sent to review (``in_review``).
"""

from __future__ import annotations

import re
import sqlite3

from pipeline import db
from pipeline.stages import Outcome
from pipeline.stages.write import keep_exclamations
from pipeline.text import keywords, overlap, plural, word_count
from pipeline.voice import GLOSSARY, term_pattern, undefined_jargon

STORY = "WRITE-3"
ORDER = 65

NEEDS = re.compile(r"needs: (?P<codes>[a-z, -]+)")
TRY_LINE = "Try this week:"


def needs_of(notes: str | None) -> list[str]:
    """The rubric items a critique's notes say the draft needs (``needs: number, jargon``)."""
    match = NEEDS.search(notes or "")
    return [code.strip() for code in match["codes"].split(",")] if match else []


def define_jargon(body: str) -> str:
    """Give each undefined glossary term its definition, after its first use in the text.

    Headings are left alone; a term used only in headings is defined on a line of its own
    before the last section.
    """
    lines = body.splitlines()
    for term in undefined_jargon(body):
        meaning = f"({GLOSSARY[term]})"
        for i, line in enumerate(lines):
            match = None if line.startswith("#") else term_pattern(term).search(line)
            if match:
                lines[i] = f"{line[:match.end()]} {meaning}{line[match.end():]}"
                break
        else:
            lines.insert(max(len(lines) - 1, 0), f"In plain words: {term} {meaning}.")
    return "\n".join(lines) + "\n"


def related_figure(conn: sqlite3.Connection, body: str) -> str | None:
    """A sentence with a figure from the research or founder piece closest to ``body``."""
    words = keywords(body)
    candidates = [(overlap(words, r["summary"]), r["summary"], r["source_url"])
                  for r in db.query(conn, "SELECT summary, source_url FROM research")]
    candidates += [(overlap(words, f["body"]), f["body"], f["url"])
                   for f in db.query(conn, "SELECT body, url FROM founder_content"
                                     " WHERE url IS NOT NULL")]
    with_figures = [c for c in candidates if c[0] > 0 and re.search(r"\d", c[1])]
    if not with_figures:
        return None
    _, text, url = max(with_figures, key=lambda c: c[0])
    return f"A related figure: {text} ({url})"


def revised(conn: sqlite3.Connection, body: str, needs: list[str]) -> tuple[str, list[str]]:
    """The new body, and the needs it could not meet."""
    missing = []
    if "jargon" in needs:
        body = define_jargon(body)
    if "exclamations" in needs:
        body = keep_exclamations(body)
    if "number" in needs:
        figure = related_figure(conn, body)
        if figure is None:
            missing.append("number")
        else:
            head, _, tail = body.rpartition("\n## ")
            body = f"{head}\n\n{figure}\n\n## {tail}" if head else f"{body}\n{figure}\n"
    if "try" in needs and TRY_LINE not in body:
        body = body.rstrip("\n") + f"\n\n{TRY_LINE} one small change, and measure it.\n"
    missing += [need for need in needs if need not in {"jargon", "exclamations", "number",
                                                       "try"}]
    return body, missing


def run(conn: sqlite3.Connection) -> Outcome:
    """Write a new version of every draft waiting in ``revise``."""
    waiting = db.query(conn, """
        SELECT d.*, (SELECT c.notes FROM critique_results c WHERE c.draft_id = d.id
                     ORDER BY c.id DESC LIMIT 1) AS notes
        FROM drafts d
        WHERE d.status = 'revise' AND NOT EXISTS (
            SELECT 1 FROM drafts n WHERE n.plan_id = d.plan_id AND n.version > d.version)
        ORDER BY d.id""")
    for draft in waiting:
        needs = needs_of(draft["notes"])
        body, missing = revised(conn, draft["body"], needs)
        version = draft["version"] + 1
        new_id = db.insert(conn, "INSERT INTO drafts (plan_id, version, title, body, word_count,"
                           " status) VALUES (?, ?, ?, ?, ?, 'draft')", draft["plan_id"],
                           version, draft["title"], body, word_count(body))
        conn.execute("UPDATE drafts SET status = 'in_review' WHERE id = ?", (new_id,))
        fixed = [need for need in needs if need not in missing]
        db.log(conn, STORY, f"draft {draft['id']} revised as version {version} (fixed: "
               f"{', '.join(fixed) or 'nothing'}; could not fix: {', '.join(missing) or 'none'})",
               level="warning" if missing else "info", ref=("drafts", new_id))
    return Outcome(len(waiting), f"revise: {plural(len(waiting), 'new version')}")
