"""A criterion's failure as pytest reports it.

pytest prints a report's ``longrepr`` in the failures section and puts one line of it in
the short test summary (``FAILED prd.json::US-001::AC1 - <message>``). pytest 9 takes that
message from a plain-text ``longrepr``; pytest 8 only from ``longrepr.reprcrash.message``.
:class:`FailureText` is the criterion's failure text with both, so every supported pytest
prints the same lines (and JUnit XML gets the message attribute from ``reprcrash`` too).

pytest-xdist sends reports from workers as JSON, where a ``longrepr`` without a traceback
travels as text; :func:`to_wire` and :func:`from_wire` (called by the plugin's
``pytest_report_to_serializable`` / ``pytest_report_from_serializable`` hooks, see pytest's
hook reference) mark such a report so that the controller gets a :class:`FailureText` back.

No pytest import: pytest duck-types ``longrepr`` (an object with ``toterminal``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["WIRE_KEY", "FailureText", "from_wire", "to_wire"]

#: Key added to a serialized report whose ``longrepr`` is a :class:`FailureText`.
WIRE_KEY = "ralph_failure_text"


class _Writer(Protocol):
    def line(self, s: str = "", **markup: bool) -> None: ...


@dataclass(frozen=True)
class _Crash:
    """What pytest reads as ``longrepr.reprcrash``: the message, and where (``path``, 1-based
    ``lineno``; pytest's ``ReprFileLocation`` has the same fields)."""

    path: str
    lineno: int
    message: str


class FailureText:
    """A failure message that pytest shows as it is, with no traceback.

    Args:
        text: the message (what was expected, what was found); may span lines.
        path: the file the failure is about (the PRD), for ``reprcrash``.
        lineno: its 1-based line, or 0 when unknown.

    ``str()`` is ``text``; ``toterminal(tw)`` writes its lines; ``reprcrash.message`` is
    ``text`` (the short summary keeps the first line).
    """

    def __init__(self, text: str, path: str = "", lineno: int = 0) -> None:
        self.text = text
        self.reprcrash = _Crash(path, lineno, text)

    def toterminal(self, tw: _Writer) -> None:
        """Write the text, line by line, to pytest's terminal writer ``tw``."""
        for line in self.text.splitlines() or [""]:
            tw.line(line)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"FailureText({self.text!r})"


def to_wire(report: Any) -> dict[str, Any] | None:
    """The JSON-able form of a test report whose ``longrepr`` is a :class:`FailureText`
    (``report._to_json()``, which sends it as text, plus :data:`WIRE_KEY`), or ``None`` for
    any other report (pytest's own hook then serializes it)."""
    longrepr = getattr(report, "longrepr", None)
    if not isinstance(longrepr, FailureText) or not hasattr(report, "_to_json"):
        return None
    data: dict[str, Any] = report._to_json()
    data["$report_type"] = type(report).__name__
    data[WIRE_KEY] = {"path": longrepr.reprcrash.path, "lineno": longrepr.reprcrash.lineno}
    return data


def from_wire(data: dict[str, Any], report_class: Any) -> Any:
    """The report :func:`to_wire` made ``data`` from, with its :class:`FailureText` back
    (``report_class._from_json(data)``); ``None`` for any other data."""
    where = data.get(WIRE_KEY)
    if not isinstance(where, dict) or data.get("$report_type") != report_class.__name__:
        return None
    report = report_class._from_json({k: v for k, v in data.items() if k != WIRE_KEY})
    report.longrepr = FailureText(str(report.longrepr), str(where.get("path", "")),
                                  int(where.get("lineno") or 0))
    return report
