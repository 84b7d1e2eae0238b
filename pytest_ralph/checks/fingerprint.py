"""Failure fingerprints for the identical-failure circuit breaker.

A failure is a (criterion key, fingerprint text) pair: the key of a failing criterion (or
``<check>`` for a check-phase error) and its failure text, normalized
(:func:`normalize_failure`) or as the ``pytest_ralph_fingerprint`` hook gave it.
:func:`fingerprint` digests a set of failures (those of one check, or of one story's
criteria in it); the fingerprint of one failure (:func:`failure_fingerprint`) is that of
the set holding only it, so a failure shown alone and a check that failed only so carry
the same 16 hex digits wherever they are shown. Nothing failing has no fingerprint
(``""``).

Normalization removes what changes between otherwise identical failures: timestamps,
memory addresses, absolute paths (temp dirs included) and numbers (durations, line
numbers, counts, pids).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence

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


#: What the empty set's fingerprint was before nothing failing had none (the first 16 hex
#: digits of SHA-256 of nothing): a run history that holds it means ``""``
#: (:func:`stored_fingerprint`).
OLD_EMPTY_FINGERPRINT = "e3b0c44298fc1c14"


def stored_fingerprint(value: str) -> str:
    """A fingerprint read back from the run history: ``""`` for :data:`OLD_EMPTY_FINGERPRINT`,
    else ``value``, so that a run resumed across versions compares like with like."""
    return "" if value == OLD_EMPTY_FINGERPRINT else value


def normalize_failure(text: str) -> str:
    """``text`` with timestamps, addresses, absolute paths and numbers replaced by
    placeholders, and runs of blanks folded to one space."""
    for pattern, repl in _RULES:
        text = pattern.sub(repl, text)
    return text.strip()


def fingerprint(failures: Iterable[tuple[str, str]], *, normalize: bool = True) -> str:
    """A 16-hex-digit digest of the set of (criterion key, failure text) pairs; ``""`` for
    the empty set (nothing failing has no fingerprint).

    Order and repeats do not matter; texts are normalized first (:func:`normalize_failure`)
    unless ``normalize`` is false (they already are fingerprint texts, e.g. from the
    ``pytest_ralph_fingerprint`` hook). The digest is SHA-256 over the sorted pairs, each key
    and text ended by a NUL and each pair by another: it is stored in the run history and
    compared by a resumed run, so it does not change between versions.
    """
    items = sorted({(key, normalize_failure(text) if normalize else text)
                    for key, text in failures})
    if not items:
        return ""
    h = hashlib.sha256()
    for key, text in items:
        h.update(key.encode("utf-8") + b"\0" + text.encode("utf-8") + b"\0\0")
    return h.hexdigest()[:16]


def failure_fingerprint(key: str, text: str, *, normalize: bool = True) -> str:
    """The fingerprint of one failure: that of the set holding only (``key``, ``text``)
    (:func:`fingerprint`; ``normalize`` as there)."""
    return fingerprint([(key, text)], normalize=normalize)


def failure_fingerprints(failures: Iterable[tuple[str, str]], *, normalize: bool = True
                         ) -> list[tuple[str, str]]:
    """(criterion key, :func:`failure_fingerprint`) of each of ``failures``, in their order,
    each distinct failure once."""
    out: list[tuple[str, str]] = []
    for key, text in failures:
        pair = (key, failure_fingerprint(key, text, normalize=normalize))
        if pair not in out:
            out.append(pair)
    return out


def same_failures(fingerprints: Sequence[tuple[str, str]], most: int = 3) -> str:
    """``"the same failure of US-1::AC1 (fingerprint 6ec48a28491fd48b)"``, or of several
    (``"the same failures of A (fingerprint ...), B (fingerprint ...) and 2 more"``), from
    (criterion key, failure fingerprint) pairs (:func:`failure_fingerprints`); at most
    ``most`` named; ``"the same failures"`` when there are none."""
    if not fingerprints:
        return "the same failures"
    named = [f"{'the check phase' if key == '<check>' else key} (fingerprint {fp})"
             for key, fp in fingerprints[:most]]
    more = len(fingerprints) - len(named)
    if more:
        named.append(f"{more} more")
    text = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
    return f"the same failure{'s' if len(fingerprints) != 1 else ''} of {text}"
