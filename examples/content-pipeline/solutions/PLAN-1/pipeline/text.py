"""Small text helpers shared by the stages: keywords to match sources, slugs, word counts."""

from __future__ import annotations

import re

STOPWORDS = frozenset({
    "about", "after", "again", "also", "among", "another", "because", "been", "before",
    "being", "between", "both", "could", "does", "doing", "down", "during", "each", "every",
    "from", "have", "having", "here", "into", "just", "more", "most", "much", "need", "only",
    "other", "over", "same", "should", "some", "such", "than", "that", "their", "them", "then",
    "there", "these", "they", "this", "those", "through", "under", "until", "very", "want",
    "wants", "what", "when", "where", "which", "while", "will", "with", "would", "your",
    # Words every source of this business shares.
    "invoice", "invoices", "invoicing", "business", "businesses", "small", "owner", "owners",
})
"""Common words, and words every source of this business shares: they say nothing about a
topic."""

SUFFIXES = ("ing", "es", "s", "e")


def stem(word: str) -> str:
    """A crude stem, enough to match ``invoices``, ``invoice`` and ``invoicing``."""
    for suffix in SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            word = word[: -len(suffix)]
    return word


def keywords(*texts: str | None) -> set[str]:
    """The stems of the words of four letters or more in ``texts``, stopwords left out.

    Hyphenated words stay whole: ``e-invoicing`` is not ``invoicing``.
    """
    words = re.findall(r"[a-z]+(?:-[a-z]+)*", " ".join(t for t in texts if t).lower())
    return {stem(w) for w in words if len(w) >= 4 and w not in STOPWORDS}


def overlap(left: set[str], *texts: str | None) -> int:
    """How many of the keywords ``left`` also occur in ``texts``."""
    return len(left & keywords(*texts))


def slug(title: str, limit: int = 60) -> str:
    """``title`` as a URL path segment: lower case, whole words joined by ``-``, at most
    ``limit`` characters (a first word longer than that is cut)."""
    words = re.findall(r"[a-z0-9]+", title.lower())
    text = words[0][:limit] if words else "post"
    for word in words[1:]:
        if len(text) + 1 + len(word) > limit:
            break
        text = f"{text}-{word}"
    return text


def plural(n: int, word: str) -> str:
    """``1 draft``, ``2 drafts``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def word_count(body: str) -> int:
    """The number of words in ``body``, markdown markers not counted."""
    return len(re.findall(r"[A-Za-z0-9][A-Za-z0-9'.,/%:-]*", body))
