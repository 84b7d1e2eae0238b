"""Small text and time helpers used across the package: one definition each."""

from __future__ import annotations

import datetime as _dt

__all__ = ["now", "plural"]


def plural(n: int, singular: str, many: str | None = None) -> str:
    """``"1 story"``, ``"3 stories"``: ``n`` and the right form of the noun.

    ``many`` defaults to ``singular`` with ``s`` added, or with a final consonant-``y`` turned
    into ``ies`` (``story`` -> ``stories``, ``key`` -> ``keys``)."""
    if n == 1:
        return f"1 {singular}"
    if many is None:
        y_ending = singular.endswith("y") and singular[-2:-1] not in ("a", "e", "i", "o", "u")
        many = singular[:-1] + "ies" if y_ending else singular + "s"
    return f"{n} {many}"


def now() -> _dt.datetime:
    """The current time, timezone-aware, in UTC."""
    return _dt.datetime.now(_dt.timezone.utc)
