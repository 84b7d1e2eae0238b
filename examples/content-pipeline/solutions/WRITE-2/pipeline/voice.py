"""The voice the posts are written in: the active voice profile and the rules it sets.

The seeded voice asks for "No jargon without a definition" and "No more than one
exclamation mark"; :data:`GLOSSARY` holds the plain definitions of the trade terms our
sources use, so that a draft can be checked and fixed against that rule.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

from pipeline import db

GLOSSARY = {
    "month-end": "closing the books for the month",
    "payout": "the money a card processor sends to your bank account",
    "e-invoicing": "invoices sent as structured data rather than as PDF files",
    "accrual": "income or costs booked when they arise, not when cash moves",
}
"""Trade terms and their plain definitions."""
MAX_EXCLAMATIONS = 1


@dataclass(frozen=True)
class Voice:
    """A voice profile, its rule lists split into lines."""

    id: int
    name: str
    audience: str
    tone: str
    do_rules: tuple[str, ...]
    dont_rules: tuple[str, ...]


def active_voice(conn: sqlite3.Connection) -> Voice | None:
    """The active voice profile (the schema allows at most one), or None."""
    for row in db.query(conn, "SELECT * FROM voice_profile WHERE is_active = 1"):
        return Voice(row["id"], row["name"], row["audience"], row["tone"],
                     tuple(row["do_rules"].splitlines()), tuple(row["dont_rules"].splitlines()))
    return None


def term_pattern(term: str) -> re.Pattern[str]:
    """Matches ``term`` as a word, in any case, plural included."""
    return re.compile(rf"(?<![\w-]){re.escape(term)}s?(?![\w-])", re.IGNORECASE)


def undefined_jargon(body: str) -> list[str]:
    """The glossary terms ``body`` uses without giving their definition."""
    return [term for term, meaning in GLOSSARY.items()
            if term_pattern(term).search(body) and meaning not in body]


def exclamations(body: str) -> int:
    """How many exclamation marks ``body`` has."""
    return body.count("!")
