"""Critiques: every draft in review is scored against the voice and gets a verdict.

The rubric follows the active voice's rules (10 points):

============ ====== ===============================================================
item         points met when
============ ====== ===============================================================
situation    2      the post opens on a real situation (a quoted message or piece)
number       3      it gives a figure (a digit, not in a link, a date or the title)
try          2      its last line is one thing to "Try this week:"
exclamations 1      it has at most one exclamation mark
jargon       2      every trade term it uses comes with its definition
============ ====== ===============================================================

Score 7 or more: ``pass`` (the draft is ``approved``); 4 to 6: ``revise`` (the draft goes
to ``revise`` for a new version), except that a third version that still falls short is
rejected; 3 or less: ``reject`` (the draft is ``rejected`` and its plan slot
``cancelled``). Every verdict is one ``critique_results`` row with the score and notes.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from collections.abc import Callable

from pipeline import db
from pipeline.stages import Outcome
from pipeline.text import plural
from pipeline.voice import MAX_EXCLAMATIONS, exclamations, undefined_jargon

STORY = "REVIEW-1"
ORDER = 60

CRITIC = "voice-rubric"
PASS_SCORE = 7
REVISE_SCORE = 4
LAST_VERSION = 3
"""A draft gets at most this many versions: the last one passes or is rejected."""


def text_of(body: str) -> str:
    """The body without its title line, links and dates: the text that makes the case."""
    lines = body.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return re.sub(r"https://\S+|\b\d{4}-\d{2}-\d{2}\b", "", "\n".join(lines))


def opens_on_situation(body: str) -> bool:
    """The first paragraph of text quotes a real message or piece."""
    paragraphs = [p for p in text_of(body).split("\n\n") if p.strip()]
    first = "\n".join(line for line in (paragraphs[0] if paragraphs else "").splitlines()
                      if not line.startswith("#"))
    return '"' in first


def ends_with_try(body: str) -> bool:
    """The last non-empty line starts with ``Try this week:``."""
    lines = [line for line in body.splitlines() if line.strip()]
    return bool(lines) and lines[-1].startswith("Try this week:")


RUBRIC: tuple[tuple[str, int, Callable[[str], bool]], ...] = (
    ("situation", 2, opens_on_situation),
    ("number", 3, lambda body: bool(re.search(r"\d", text_of(body)))),
    ("try", 2, ends_with_try),
    ("exclamations", 1, lambda body: exclamations(body) <= MAX_EXCLAMATIONS),
    ("jargon", 2, lambda body: not undefined_jargon(body)),
)
"""(item, points, test) for each rule of the voice the rubric checks."""


def critique(body: str, version: int) -> tuple[int, str, str]:
    """``(score, verdict, notes)`` for a draft body at ``version``."""
    missed = [name for name, _, test in RUBRIC if not test(body)]
    score = sum(points for name, points, _ in RUBRIC if name not in missed)
    if score >= PASS_SCORE:
        verdict = "pass"
    elif score >= REVISE_SCORE and version < LAST_VERSION:
        verdict = "revise"
    else:
        verdict = "reject"
    notes = f"score {score}/10"
    if missed:
        notes += f"; {'could still improve' if verdict == 'pass' else 'needs'}: " \
                 f"{', '.join(missed)}"
    terms = undefined_jargon(body)
    if terms:
        notes += f"; define: {', '.join(terms)}"
    return score, verdict, notes


DRAFT_STATE = {"pass": "approved", "revise": "revise", "reject": "rejected"}


def run(conn: sqlite3.Connection) -> Outcome:
    """Critique every draft in review and move it on."""
    drafts = db.query(conn, "SELECT id, plan_id, version, body FROM drafts"
                      " WHERE status = 'in_review' ORDER BY id")
    verdicts: Counter[str] = Counter()
    for draft in drafts:
        score, verdict, notes = critique(draft["body"], draft["version"])
        verdicts[verdict] += 1
        critique_id = db.insert(conn, "INSERT INTO critique_results (draft_id, critic, score,"
                                " verdict, notes) VALUES (?, ?, ?, ?, ?)", draft["id"], CRITIC,
                                score, verdict, notes)
        conn.execute("UPDATE drafts SET status = ? WHERE id = ?",
                     (DRAFT_STATE[verdict], draft["id"]))
        if verdict == "reject":
            conn.execute("UPDATE content_plan SET status = 'cancelled' WHERE id = ?",
                         (draft["plan_id"],))
        db.log(conn, STORY, f"draft {draft['id']} v{draft['version']}: {verdict} ({notes})",
               level="warning" if verdict == "reject" else "info",
               ref=("critique_results", critique_id))
    counts = ", ".join(f"{verdicts[v]} {v}" for v in ("pass", "revise", "reject"))
    return Outcome(len(drafts), f"review: {plural(len(drafts), 'draft')} critiqued ({counts})")
