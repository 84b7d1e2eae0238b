"""Failure fingerprints for the identical-failure circuit breaker.

A fingerprint is the set of (criterion key, normalized failure text) of one check
phase. Normalization removes what changes between otherwise identical failures:
timestamps, memory addresses, absolute paths (temp dirs included) and numbers
(durations, line numbers, counts, pids).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    # ISO 8601 and common log timestamps.
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?"),
     "<time>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(\.\d+)?\b"), "<time>"),
    # Memory addresses and hashes.
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<addr>"),
    (re.compile(r"\b[0-9a-f]{12,}\b"), "<hex>"),
    # Absolute paths, POSIX and Windows (temp dirs, home dirs, the project's own root).
    (re.compile(r"(?<![\w.])(?:[A-Za-z]:)?(?:[\\/][\w.@+~-]+)+[\\/]?"), "<path>"),
    # Any remaining number.
    (re.compile(r"\d+(\.\d+)?"), "<n>"),
    (re.compile(r"[ \t]+"), " "),
)


def normalize_failure(text: str) -> str:
    """``text`` with timestamps, addresses, absolute paths and numbers replaced by
    placeholders, and runs of blanks folded to one space."""
    for pattern, repl in _RULES:
        text = pattern.sub(repl, text)
    return text.strip()


def fingerprint(failures: Iterable[tuple[str, str]], *, normalize: bool = True) -> str:
    """A 16-hex-digit digest of the set of (criterion key, failure text) pairs.

    Order and repeats do not matter; texts are normalized first (:func:`normalize_failure`)
    unless ``normalize`` is false (they already are fingerprint texts, e.g. from the
    ``pytest_ralph_fingerprint`` hook). The empty set (nothing failing) has a fingerprint too.
    """
    items = sorted({(key, normalize_failure(text) if normalize else text)
                    for key, text in failures})
    h = hashlib.sha256()
    for key, text in items:
        h.update(key.encode("utf-8") + b"\0" + text.encode("utf-8") + b"\0\0")
    return h.hexdigest()[:16]
