"""Read a Claude Code ``Stop`` hook payload and write the hook's answer.

This module runs on every reply Claude gives (``python -m pytest_ralph.hook``), so it imports
only the standard library and never raises on bad input: every oddity seen in real payloads
becomes a readable entry of :attr:`StopPayload.problems` (meant for stderr).

Formats follow the Claude Code hooks reference (2025-08 and 2026-08 editions; what the hook
reads and answers is summarized in ``docs/claude-code.md``, "Each Stop"):

Input
    One JSON object on stdin. Recent versions send ``session_id``, ``transcript_path``,
    ``cwd``, ``hook_event_name`` (``"Stop"``) and ``stop_hook_active``; newer ones add
    ``permission_mode``, ``prompt_id`` and ``last_assistant_message`` (2.1.47+). Old versions
    send only the first three; another CLI sends camelCase keys (``sessionId``,
    ``transcriptPath``, ``hookEventName: "stop"``). Every field is optional here.
Transcript
    A JSONL file at ``transcript_path``, one content block per line, written asynchronously
    (it can lag the Stop event or be missing). :func:`last_message` prefers
    ``last_assistant_message`` and reads only the end of the file as a fallback.
Output
    Exit 0 with no stdout lets the stop go ahead (:func:`allow`); exit 0 with
    ``{"decision": "block", "reason": ..., "systemMessage": ...}`` keeps the agent working,
    ``reason`` being what the agent reads next (:func:`block`). Claude Code cuts strings over
    10,000 characters to a preview, so both strings are bounded (:data:`MAX_REASON_CHARS`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_REASON_CHARS",
    "MAX_TRANSCRIPT_BYTES",
    "TRUNCATION_MARKER",
    "StopPayload",
    "allow",
    "block",
    "bound_text",
    "find_promise",
    "fold_whitespace",
    "json_kind",
    "last_message",
    "last_transcript_message",
    "parse_payload",
]

#: Upper bound of ``reason`` and ``systemMessage`` in :func:`block` / :func:`allow`, counted in
#: UTF-16 code units (the unit of the JavaScript string length Claude Code measures; an emoji
#: counts 2). Below Claude Code's 10,000-character preview cut.
MAX_REASON_CHARS = 9000

#: Appended to a string cut by :func:`bound_text` (counted inside the bound).
TRUNCATION_MARKER = "\n[... cut by pytest-ralph: too long for a Stop hook reason ...]"

#: Default bound, in bytes, of how much of a transcript's end :func:`last_message` reads.
MAX_TRANSCRIPT_BYTES = 4 * 1024 * 1024

_BLOCK_BYTES = 64 * 1024
_BOM = b"\xef\xbb\xbf"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# A tag that starts a line and ends a (possibly later) line; the inner text may span lines but
# holds no other tag.
_PROMISE_SPAN = re.compile(
    r"^[^\S\n]*<promise>((?:(?!</?promise>).)*)</promise>[^\S\n]*$", re.MULTILINE | re.DOTALL
)


@dataclass(frozen=True)
class StopPayload:
    """The fields of one Stop hook stdin object, every one optional.

    Attributes:
        session_id: Claude Code session id (a UUID string); ``None`` when absent, not a string,
            empty or only whitespace (surrounding whitespace is stripped).
        transcript_path: path of the session's JSONL transcript exactly as sent (a plain string:
            it may be a Windows path such as ``C:\\Users\\x\\My Projects\\t.jsonl``); ``None`` when
            absent or empty.
        cwd: working directory of the session as sent, or ``None``.
        hook_event_name: event name as sent (``"Stop"``; ``"stop"`` from another CLI), or
            ``None``. See :attr:`is_stop`.
        stop_hook_active: ``True`` when this stop follows a continuation a Stop hook forced.
            Not a loop guard on its own (Claude Code caps consecutive blocks itself).
        last_assistant_message: plain text of the final reply (Claude Code 2.1.47+), or ``None``.
        permission_mode: e.g. ``"auto"``, ``"bypassPermissions"``, or ``None``.
        prompt_id: id of the user prompt that started the turn, or ``None``.
        problems: human-readable notes on anything odd in the input (empty stdin, invalid JSON
            or UTF-8, wrong types), in input order; empty when the payload was clean.
    """

    session_id: str | None = None
    transcript_path: str | None = None
    cwd: str | None = None
    hook_event_name: str | None = None
    stop_hook_active: bool = False
    last_assistant_message: str | None = None
    permission_mode: str | None = None
    prompt_id: str | None = None
    problems: tuple[str, ...] = ()

    @property
    def is_stop(self) -> bool:
        """``True`` unless the event name says this is not a normal stop.

        A missing name counts as a stop (old payloads); ``"Stop"`` in any case is a stop;
        anything else (``"StopFailure"``, fired on API errors) is not.
        """
        return self.hook_event_name is None or self.hook_event_name.lower() == "stop"


# (field, accepted keys in order of preference)
_STRING_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("session_id", ("session_id", "sessionId")),
    ("transcript_path", ("transcript_path", "transcriptPath")),
    ("cwd", ("cwd",)),
    ("hook_event_name", ("hook_event_name", "hookEventName")),
    ("last_assistant_message", ("last_assistant_message", "lastAssistantMessage")),
    ("permission_mode", ("permission_mode", "permissionMode")),
    ("prompt_id", ("prompt_id", "promptId")),
)
_ACTIVE_KEYS = ("stop_hook_active", "stopHookActive")


def json_kind(value: object) -> str:
    """The JSON type of a decoded value with its article, for messages: ``"null"``,
    ``"a boolean"``, ``"a number"``, ``"a string"``, ``"an array"`` or ``"an object"``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _lookup(obj: dict[str, Any], keys: tuple[str, ...]) -> tuple[str, Any] | None:
    """First ``(key, value)`` of ``keys`` present in ``obj`` with a non-null value."""
    for key in keys:
        if obj.get(key) is not None:
            return key, obj[key]
    return None


def parse_payload(data: bytes) -> StopPayload:
    """Parse the raw stdin bytes of a Stop hook; never raises.

    Args:
        data: everything read from stdin. Decoded as UTF-8 here (a leading BOM is dropped;
            invalid bytes, e.g. text a Windows shell re-encoded in cp1252, become U+FFFD).

    Returns:
        A :class:`StopPayload`. Snake_case keys win over their camelCase twins; unknown keys
        are ignored. Empty stdin, invalid JSON, a non-object JSON value or a field of the wrong
        type leaves the field(s) at their defaults and adds a line to ``problems``.
        ``stop_hook_active`` also accepts the strings ``"true"``/``"false"`` (with a problem
        noted); any other non-boolean reads as ``False``.
    """
    problems: list[str] = []
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        problems.append(f"stdin is not valid UTF-8 ({exc.reason} at byte {exc.start}); "
                        "invalid bytes replaced with U+FFFD")
        text = data.decode("utf-8", errors="replace")
    if not text.strip():
        problems.append("stdin is empty: no Stop hook payload")
        return StopPayload(problems=tuple(problems))
    try:
        obj = json.loads(text)
    except ValueError as exc:
        problems.append(f"stdin is not valid JSON: {exc}")
        return StopPayload(problems=tuple(problems))
    except RecursionError:  # [[[[...]]]] deeper than Python's JSON reader goes
        problems.append("stdin holds JSON nested too deeply to read, not a Stop payload "
                        "object")
        return StopPayload(problems=tuple(problems))
    if not isinstance(obj, dict):
        problems.append(f"stdin JSON is {json_kind(obj)}, expected an object")
        return StopPayload(problems=tuple(problems))

    fields: dict[str, Any] = {}
    for field, keys in _STRING_FIELDS:
        found = _lookup(obj, keys)
        if found is None:
            continue
        key, value = found
        if not isinstance(value, str):
            problems.append(f"{key}: expected a string, got {json_kind(value)} {value!r:.80}")
            continue
        if field == "session_id":
            value = value.strip()
            if not value:
                problems.append(f"{key} is empty: treated as missing")
                continue
            if _LONE_SURROGATE.search(value):  # "\ud800": no text a history can store
                problems.append(f"{key} holds an unpaired surrogate escape: treated as missing")
                continue
        elif field == "transcript_path" and not value:
            continue
        fields[field] = value

    found = _lookup(obj, _ACTIVE_KEYS)
    if found is not None:
        key, value = found
        if isinstance(value, bool):
            fields["stop_hook_active"] = value
        elif isinstance(value, str) and value.strip().lower() in ("true", "false"):
            fields["stop_hook_active"] = value.strip().lower() == "true"
            problems.append(f"{key}: expected a boolean, got the string {value!r}")
        else:
            problems.append(f"{key}: expected a boolean, got {json_kind(value)} {value!r:.80}; "
                            "read as false")
    return StopPayload(problems=tuple(problems), **fields)


# --- the final assistant message -----------------------------------------------------------


def last_message(payload: StopPayload, *, max_bytes: int = MAX_TRANSCRIPT_BYTES) -> str | None:
    """Text of the reply that just ended, or ``None`` when it cannot be known.

    Prefers ``payload.last_assistant_message`` (exactly as sent, even ``""``); otherwise falls
    back to :func:`last_transcript_message` on ``payload.transcript_path``, reading at most
    ``max_bytes`` bytes from the end of the file. Never raises.
    """
    if payload.last_assistant_message is not None:
        return payload.last_assistant_message
    if payload.transcript_path is None:
        return None
    return last_transcript_message(payload.transcript_path, max_bytes=max_bytes)


def last_transcript_message(path: str, *, max_bytes: int = MAX_TRANSCRIPT_BYTES) -> str | None:
    """Text of the last assistant reply in a Claude Code JSONL transcript; never raises.

    The file is read backwards in 64 KiB blocks, never more than ``max_bytes`` bytes in all
    (a line that starts before that bound is ignored). Going from the last line back:

    * a line that is not a JSON object (partial write, garbage) is skipped;
    * a ``"type": "assistant"`` record whose ``message.content`` has ``text`` blocks with
      non-blank text gives the answer: those texts joined with ``"\\n"`` (a plain-string
      ``content`` counts as one text block); an assistant record with only ``tool_use`` /
      ``thinking`` blocks, or a sidechain (sub-agent) record, is skipped;
    * a ``"type": "user"`` record (a prompt or a tool result) stops the search with ``None``:
      the transcript lags the Stop event and any earlier text is not the final reply;
    * other records (``attachment``, ``system``, ``file-history-snapshot``, ...) are skipped.

    Args:
        path: transcript path as a plain string (a Windows path on POSIX simply is not found).
        max_bytes: bound on the bytes read from the end of the file.

    Returns:
        The text, or ``None`` when the file is missing or unreadable, or no such record lies
        within the bound.
    """
    try:
        for line in _reversed_lines(path, max_bytes):
            record = _json_object(line)
            if record is None:
                continue
            kind = record.get("type")
            if kind == "user" and not record.get("isSidechain"):
                return None
            if kind != "assistant" or record.get("isSidechain"):
                continue
            text = _assistant_text(record)
            if text is not None:
                return text
    except (OSError, ValueError):
        return None
    return None


def _reversed_lines(path: str, max_bytes: int) -> Iterator[bytes]:
    """The complete lines of the file at ``path`` (without ``\\n``), last first.

    Reads at most ``max_bytes`` bytes, from the end, in blocks of ``_BLOCK_BYTES``. A final
    line without a newline is yielded (it may be a partial write: the caller's parse rejects
    it); the line cut by the bound is not.
    """
    import os
    import stat

    # O_NONBLOCK: a FIFO planted at the path must not hang the hook; anything but a regular
    # file is refused (ValueError, taken as "no message") before a byte is read.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(f"{path} is not a regular file")
    with open(fd, "rb") as file:
        pos = file.seek(0, 2)
        budget = max(0, max_bytes)
        pending: list[bytes] = []  # pieces of the line being assembled, last piece first
        while pos > 0 and budget > 0:
            size = min(_BLOCK_BYTES, pos, budget)
            pos -= size
            budget -= size
            file.seek(pos)
            chunk = file.read(size)
            parts = chunk.split(b"\n")
            if len(parts) == 1:
                pending.append(chunk)
                continue
            pending.append(parts[-1])
            yield b"".join(reversed(pending))
            yield from reversed(parts[1:-1])
            pending = [parts[0]]
        if pos == 0 and pending:
            yield b"".join(reversed(pending))


def _json_object(line: bytes) -> dict[str, Any] | None:
    """``line`` parsed as a JSON object, or ``None`` (blank, invalid, or not an object)."""
    if not line.strip():
        return None
    try:
        value = json.loads(line.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _assistant_text(record: dict[str, Any]) -> str | None:
    """Joined non-blank text blocks of an assistant record's ``message.content``, or ``None``."""
    message = record.get("message")
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if isinstance(content, str):
        return content if content.strip() else None
    if not isinstance(content, list):
        return None
    texts = [
        block["text"] for block in content
        if isinstance(block, dict) and block.get("type") == "text"
        and isinstance(block.get("text"), str) and block["text"].strip()
    ]
    return "\n".join(texts) if texts else None


# --- completion promise --------------------------------------------------------------------


def fold_whitespace(text: str) -> str:
    """``text`` stripped, each run of whitespace (newlines included) replaced by one space."""
    return " ".join(text.split())


def find_promise(message: str, promise: str) -> bool:
    """Whether ``message`` fulfils the completion promise ``promise``.

    True only if a ``<promise>...</promise>`` tag makes up whole lines of ``message``: the
    opening tag starts a line and the closing tag ends a line (surrounding spaces allowed), and
    that span, whitespace-folded (:func:`fold_whitespace`), equals
    ``"<promise>" + fold_whitespace(promise) + "</promise>"``. So ``<promise>ALL  DONE</promise>``
    and a promise split over lines both match ``"ALL DONE"``, but a tag inside prose, quoted,
    in backticks or after other words does not, nor does the bare promise text, nor padding
    inside the tag, nor a tag inside a fenced code block (```` ``` ```` or ``~~~``, as
    CommonMark fences them: quoting the instructions is not making the promise). A promise
    that folds to ``""`` never matches.
    """
    expected = fold_whitespace(promise)
    if not expected:
        return False
    for match in _PROMISE_SPAN.finditer(_outside_code_fences(message)):
        if fold_whitespace(match.group(0)) == f"<promise>{expected}</promise>":
            return True
    return False


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _outside_code_fences(text: str) -> str:
    """``text`` with every line of a fenced code block (fences included) emptied; an
    unclosed fence runs to the end, as in CommonMark."""
    out: list[str] = []
    fence = ""
    for line in text.split("\n"):
        m = _FENCE.match(line)
        if not fence and m:
            fence = m.group(1)
            out.append("")
        elif fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and \
                    not line.strip().strip(fence[0]):
                fence = ""
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


# --- hook output ---------------------------------------------------------------------------


def _utf16_units(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (JavaScript ``string.length``)."""
    return len(text) + sum(1 for char in text if ord(char) > 0xFFFF)


def bound_text(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """``text`` cut to at most ``limit`` UTF-16 code units, :data:`TRUNCATION_MARKER` included.

    Lone surrogates (which cannot be written as UTF-8) become U+FFFD first. The cut never
    splits a character: an emoji (2 units) that does not fit is dropped whole. Text within the
    bound is returned unchanged. ``limit`` must exceed the marker's length.
    """
    text = _LONE_SURROGATE.sub("\ufffd", text)
    if len(text) <= limit // 2 or _utf16_units(text) <= limit:
        return text
    budget = limit - _utf16_units(TRUNCATION_MARKER)
    units = text.encode("utf-16-le")[: 2 * budget]
    if units and 0xD800 <= int.from_bytes(units[-2:], "little") <= 0xDBFF:
        units = units[:-2]  # a high surrogate whose pair was cut off
    return units.decode("utf-16-le") + TRUNCATION_MARKER


def block(reason: str, system_message: str) -> str:
    """Stdout text that blocks the stop: ``{"decision": "block", "reason", "systemMessage"}``.

    ``reason`` is fed to the agent as its next instruction, ``system_message`` is shown to the
    user; both are passed verbatim (newlines, quotes, ``$(...)``, ``EOF``, ``---``) apart from
    :func:`bound_text`. The result is one line of valid JSON (non-ASCII kept as is), without a
    trailing newline; print it and exit 0.
    """
    return json.dumps(
        {"decision": "block", "reason": bound_text(reason),
         "systemMessage": bound_text(system_message)},
        ensure_ascii=False,
    )


def allow(system_message: str | None = None) -> str:
    """Stdout text that lets the stop go ahead (print it, if not empty, and exit 0).

    ``""`` when ``system_message`` is ``None`` or empty; otherwise one line of JSON
    ``{"systemMessage": ...}`` (bounded by :func:`bound_text`) shown to the user.
    """
    if not system_message:
        return ""
    return json.dumps({"systemMessage": bound_text(system_message)}, ensure_ascii=False)
