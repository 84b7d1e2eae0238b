"""Output readers: what a coding-agent CLI's own structured output says about a finished run.

A reader is fed the run's stdout line by line (:class:`OutputReader`) and gives a
:class:`Verdict` at the end: ``api-error``, ``rate-limited`` or ``None`` (the exit code
decides), with the cost, tokens and turns when the CLI reports them. One reader per output
format: :class:`PlainReader` (no structured output), :class:`ResultReader` (Claude Code, Amp,
the Cursor CLI), :class:`CodexReader`, :class:`GeminiReader`, :class:`OpencodeReader`,
:class:`GooseReader` and :class:`AiderReader` (aider's console text: it has no structured
output). The presets (:mod:`pytest_ralph.agents.presets`) say which CLI gets
which reader; the documentation each was read from is listed there.

Readers hold O(1) memory whatever the output's size: the last terminal record and a few
counters, never the lines. They read only fields of the CLI's own structured records (never
free text, which may quote file contents; the one exception, :class:`AiderReader`, reads
only whole lines in aider's own formats and lets a later model response clear an error),
tolerate any garbage, and never raise.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

#: Bytes of one stdout line handed to a reader; a longer line arrives cut to this length, and
#: a line this long is taken to be cut and is not parsed.
MAX_LINE_BYTES = 1024 * 1024

#: Characters of a verdict's ``detail``.
DETAIL_CHARS = 200

#: Largest token or turn count believed (anything larger is garbage).
_MAX_COUNT = 2**63 - 1

#: Largest epoch second believed for a reset time (year 5138).
_MAX_EPOCH = 10**11


@dataclass(frozen=True)
class Verdict:
    """What a CLI's structured output says about one finished run.

    Attributes:
        outcome: ``"api-error"``, ``"rate-limited"``, or ``None`` (let the exit code decide).
        detail: one line saying why, e.g. ``"result is_error: API Error: 500 ..."`` or
            ``"HTTP 429 rate_limit_error"``; ``""`` when there is nothing to say.
        reset_at: epoch seconds when a stated rate limit resets.
        retry_after: seconds to wait, when the limit is stated as a duration.
        cost_usd: what the run cost in US dollars, when the CLI reports it.
        input_tokens: input tokens used, when the CLI reports them.
        output_tokens: output tokens used, when the CLI reports them.
        turns: model turns, when the CLI reports them.
    """

    outcome: str | None
    detail: str = ""
    reset_at: float | None = None
    retry_after: float | None = None
    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    turns: int | None = None


class OutputReader(Protocol):
    """Reads one agent run's stdout, line by line, and gives the verdict at the end."""

    def feed_stdout(self, line: bytes) -> None:
        """One stdout line without its newline; lines longer than :data:`MAX_LINE_BYTES`
        arrive cut to that length (and then fail to parse)."""

    def verdict(self, exit_code: int | None, stderr_tail: Sequence[str]) -> Verdict:
        """The verdict once the run has ended.

        Args:
            exit_code: the exit status; ``None`` when the run timed out or did not start.
            stderr_tail: the last lines (at most 40) of stderr, decoded.
        """


# -- tolerant field access ------------------------------------------------------------------


def _parse_object(line: bytes) -> dict[str, Any] | None:
    """The JSON object on ``line``, or ``None`` (not JSON, not an object, cut, or broken)."""
    if len(line) >= MAX_LINE_BYTES:
        return None
    text = line.strip()
    if not (text.startswith(b"{") and text.endswith(b"}")):
        return None
    try:
        value = json.loads(text.decode("utf-8"), parse_constant=lambda _name: None)
    except (ValueError, RecursionError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _get(value: object, *keys: str) -> object:
    """``value[k1][k2]...``, or ``None`` where a level is missing or not an object."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _text(value: object) -> str:
    """``value`` if it is a string, else ``""``."""
    return value if isinstance(value, str) else ""


def _money(value: object) -> float | None:
    """A finite, non-negative amount, or ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _count(value: object) -> int | None:
    """A non-negative whole count that fits 63 bits, or ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 <= value <= _MAX_COUNT:
        return value
    return None


def _add(total: int | None, value: object) -> int | None:
    """``total + value`` for counts, skipping garbage, saturating at the count limit."""
    number = _count(value)
    if number is None:
        return total
    return min((total or 0) + number, _MAX_COUNT)


def _add_money(total: float | None, value: object) -> float | None:
    """``total + value`` for amounts, skipping garbage."""
    number = _money(value)
    if number is None:
        return total
    result = (total or 0.0) + number
    return result if math.isfinite(result) else total


def _one_line(text: str) -> str:
    """``text`` on one line: control characters and lone surrogates blanked, whitespace
    collapsed, cut to :data:`DETAIL_CHARS` characters."""
    flat = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return flat if len(flat) <= DETAIL_CHARS else flat[: DETAIL_CHARS - 1] + "…"


def _when(epoch: float) -> str:
    """``epoch`` as an ISO 8601 UTC time."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _retry_after(text: str) -> float | None:
    """Seconds from a provider's ``Please try again in 1.152s`` / ``in 20ms``, or ``None``."""
    match = re.search(r"\btry again in (\d{1,9}(?:\.\d{1,6})?)(ms|s)\b", text)
    if not match:
        return None
    seconds = float(match.group(1))
    return seconds / 1000 if match.group(2) == "ms" else seconds


# -- readers ----------------------------------------------------------------------------------


class PlainReader:
    """The reader for a CLI without structured output (or with it switched off): its verdict
    is always ``Verdict(None)``, so the exit code decides."""

    def feed_stdout(self, line: bytes) -> None:
        """Ignores the line."""

    def verdict(self, exit_code: int | None, stderr_tail: Sequence[str]) -> Verdict:
        """``Verdict(None)``."""
        return Verdict(None)


#: Claude Code's usage-limit result text, ``Claude AI usage limit reached|<epoch seconds>``
#: (seen in https://github.com/anthropics/claude-code/issues/11429 and #6119).
_CLAUDE_USAGE_LIMIT = re.compile(r"Claude AI usage limit reached\|(\d{1,12})")

#: Claude Code's newer subscription-limit text, ``You've hit your limit · resets 3pm (...)``
#: (https://github.com/anthropics/claude-code/issues/22976); no machine-readable reset time.
_CLAUDE_HIT_LIMIT = re.compile(r"You(?:'|\u2019)ve hit your (?:usage )?limit\b")


class _LastResult:
    """Keeps the last top-level JSON object of stdout whose ``type`` is ``"result"`` (one
    object at a time: memory stays flat)."""

    def __init__(self) -> None:
        self._result: dict[str, Any] | None = None

    def feed_stdout(self, line: bytes) -> None:
        """Keeps the line's object if it is a result record."""
        if b'"result"' not in line:
            return
        record = _parse_object(line)
        if record is not None and record.get("type") == "result":
            self._result = record


class ResultReader(_LastResult):
    """Reads Claude Code's result record, and the Claude-Code-compatible ones of Amp and the
    Cursor CLI.

    The record is the last stdout line that parses as a JSON object with ``"type":
    "result"``: the single object of ``--output-format json``, the last line of
    ``stream-json``. A result quoted inside another record (an assistant message's text) is a
    string there, never a line of its own, so it does not count. Fields read::

        {"type": "result", "subtype": "success", "is_error": true,
         "result": "API Error: 500 ...", "api_error_status": 500,
         "api_error_type": "api_error", "terminal_reason": "api_error",
         "num_turns": 1, "total_cost_usd": 0.0024,
         "usage": {"input_tokens": 300, "output_tokens": 60}}

    ``is_error: true`` gives ``api-error`` whatever the exit code (Claude Code exited 0 on an
    API error before 2.1), except a rate limit: ``api_error_status`` 429,
    ``api_error_type`` ``rate_limit_error``, or a usage-limit ``result`` text, which gives
    ``rate-limited`` (with ``reset_at`` from ``Claude AI usage limit reached|<epoch>``).
    """

    def verdict(self, exit_code: int | None, stderr_tail: Sequence[str]) -> Verdict:
        """The verdict of the last result record; ``Verdict(None)`` when there was none."""
        record = self._result
        if record is None:
            return Verdict(None)
        cost = _money(record.get("total_cost_usd"))
        if cost is None:
            cost = _money(record.get("cost_usd"))  # before Claude Code 1.0.12
        metrics: dict[str, Any] = {
            "cost_usd": cost,
            "input_tokens": _count(_get(record, "usage", "input_tokens")),
            "output_tokens": _count(_get(record, "usage", "output_tokens")),
            "turns": _count(record.get("num_turns")),
        }
        if record.get("is_error") is not True:
            return Verdict(None, **metrics)
        text = _text(record.get("result")).strip() or _text(record.get("error")).strip()
        status = record.get("api_error_status")
        error_type = _text(record.get("api_error_type"))
        usage_limit = _CLAUDE_USAGE_LIMIT.fullmatch(text)
        if usage_limit:
            epoch = int(usage_limit.group(1))
            reset_at = float(epoch) if 0 < epoch < _MAX_EPOCH else None
            when = f", resets at {_when(reset_at)}" if reset_at is not None else ""
            return Verdict("rate-limited", f"usage limit reached{when}", reset_at=reset_at,
                           **metrics)
        if status in (429, "429") or error_type == "rate_limit_error":
            detail = "HTTP 429 " + (error_type or "rate limit")
            return Verdict("rate-limited", _one_line(f"{detail}: {text}" if text else detail),
                           retry_after=_retry_after(text), **metrics)
        if _CLAUDE_HIT_LIMIT.match(text):
            return Verdict("rate-limited", _one_line(text), **metrics)
        why = text or _text(record.get("terminal_reason")) or _text(record.get("subtype"))
        return Verdict("api-error", _one_line(f"result is_error: {why or 'true'}"), **metrics)


#: Codex's rate-limit messages in ``turn.failed`` / ``error`` records: the ChatGPT-plan usage
#: limit (``You've hit your usage limit. ... try again at 3:28 PM.``) and the HTTP 429 after
#: retries (``exceeded retry limit, last status: 429 Too Many Requests``), as reported in
#: https://github.com/Th0rgal/sandboxed.sh/pull/394 and https://github.com/openai/codex/issues/10550;
#: the API's ``Rate limit reached for <model> ...`` (https://github.com/openai/codex/issues/231);
#: and, seen with codex-cli 0.171.0, a stream that ended with ``response.failed`` code
#: ``rate_limit_exceeded``: ``rate limit exceeded: <the API's message>`` (the one record that
#: keeps the API's ``Please try again in 1.5s``).
_CODEX_RATE_LIMIT = re.compile(
    r"You(?:'|\u2019)ve hit your usage limit\b"
    r"|(?:stream error: )?exceeded retry limit, last status: 429\b"
    r"|Rate limit reached for\b"
    r"|rate limit exceeded: ")


class CodexReader:
    """Reads ``codex exec --json`` events (JSONL on stdout; exec_events.rs)::

        {"type": "turn.started"}
        {"type": "turn.completed", "usage": {"input_tokens": 24763,
         "cached_input_tokens": 24448, "output_tokens": 122}}
        {"type": "turn.failed", "error": {"message": "..."}}
        {"type": "error", "message": "..."}

    A ``turn.failed`` or ``error`` not followed by a ``turn.completed`` gives ``api-error``
    (``rate-limited`` for Codex's rate-limit messages, see :data:`_CODEX_RATE_LIMIT`, with
    the retry time when the message has the API's ``Please try again in 1.5s``). An
    ``item.completed`` whose item has ``"type": "error"`` (a warning) does not count. Tokens
    are those of the last ``turn.completed`` (the sum over the turn's model requests; one
    ``codex exec`` is one turn in 0.171.0); turns count ``turn.started``. Codex reports no
    cost. Checked against codex-cli 0.171.0's real output (see the ``codex`` preset).
    """

    def __init__(self) -> None:
        self._error: str | None = None
        self._input: int | None = None
        self._output: int | None = None
        self._turns: int | None = None

    def feed_stdout(self, line: bytes) -> None:
        """Updates the state from one event."""
        event = _parse_object(line)
        if event is None:
            return
        kind = event.get("type")
        if kind == "turn.started":
            self._turns = _add(self._turns, 1)
        elif kind == "turn.completed":
            self._error = None
            self._input = _count(_get(event, "usage", "input_tokens"))
            self._output = _count(_get(event, "usage", "output_tokens"))
        elif kind == "turn.failed":
            self._error = "turn.failed: " + (_text(_get(event, "error", "message")).strip()
                                             or "turn failed")
        elif kind == "error":
            self._error = "error: " + (_text(event.get("message")).strip() or "error")

    def verdict(self, exit_code: int | None, stderr_tail: Sequence[str]) -> Verdict:
        """``api-error`` / ``rate-limited`` after an unrecovered failure, else ``None``."""
        metrics: dict[str, Any] = {"input_tokens": self._input, "output_tokens": self._output,
                                   "turns": self._turns}
        if self._error is None:
            return Verdict(None, **metrics)
        message = self._error.split(": ", 1)[1]
        if _CODEX_RATE_LIMIT.match(message):
            return Verdict("rate-limited", _one_line(self._error),
                           retry_after=_retry_after(message), **metrics)
        return Verdict("api-error", _one_line(self._error), **metrics)


#: A rate limit in a Gemini CLI result error, searched only in a message that starts with the
#: CLI's ``[API Error`` prefix: HTTP 429 / ``RESOURCE_EXHAUSTED`` as older releases formatted
#: the API error (``[API Error: ... "code": 429 ... "RESOURCE_EXHAUSTED" ...]``, see
#: https://github.com/google-gemini/gemini-cli/issues/1088) and, seen with Gemini CLI 0.61.0
#: (which drops the status), the API's quota words (``You exceeded your current quota``,
#: ``Resource has been exhausted (e.g. check quota).``, ``You have exhausted your daily
#: quota``) and the CLI's own rate-limit sentences appended to a 429 (``Please wait and try
#: again later. To increase your limits...`` with an API key, ``Possible quota limitations in
#: place...`` with Google login).
_GEMINI_RATE_LIMIT = re.compile(
    r"\b429\b|RESOURCE_EXHAUSTED|Too Many Requests"
    r"|exceeded your current quota|Resource has been exhausted|exhausted your (?:daily )?quota"
    r"|Please wait and try again later\b|Possible quota limitations in place\b",
    re.IGNORECASE)

#: An error type that names a quota or rate limit (``QuotaExceededError``,
#: ``RateLimitError``, ``RESOURCE_EXHAUSTED``), not any type containing "rate".
_GEMINI_LIMIT_TYPE = re.compile(r"quota|rate[ _-]?limit|resource[ _-]?exhausted|too[ _-]?many",
                                re.IGNORECASE)

#: Gemini CLI 0.61.0 exits with the HTTP status of the API error that ended the run, as an
#: exit status (mod 256): 429 -> 173, 500 -> 244, 502 -> 246, 503 -> 247, 504 -> 248.
_GEMINI_EXIT_RATE_LIMIT = 429 % 256
_GEMINI_EXIT_SERVER_ERROR = {status % 256: status for status in (500, 502, 503, 504)}

#: The retry times in a Gemini CLI 429 message, in the order they are believed: the API's own
#: ``Please retry in 2.5s`` / ``in 500ms`` (part of its quota message), the CLI's
#: ``Suggested retry after 2s.`` (the error's ``google.rpc.RetryInfo`` ``retryDelay``, a
#: protobuf duration such as ``"2s"``, or the CLI's guess of ``60s`` for a per-minute quota
#: without one), then a generic ``retry after 30s`` (all seen with Gemini CLI 0.61.0).
_GEMINI_RETRY = (
    re.compile(r"\bPlease retry in\s+(\d{1,9}(?:\.\d{1,9})?)\s?(ms|s)\b", re.IGNORECASE),
    re.compile(r"\bSuggested retry after\s+(\d{1,9}(?:\.\d{1,9})?)\s?(ms|s)\b",
               re.IGNORECASE),
    re.compile(r"\bretry after\s+(\d{1,9}(?:\.\d{1,9})?)\s?(ms|s)\b", re.IGNORECASE),
)


def _gemini_retry_after(text: str) -> float | None:
    """Seconds from the first of :data:`_GEMINI_RETRY` found in ``text``, else from
    ``Please try again in Ns``; ``None`` when none is there."""
    for pattern in _GEMINI_RETRY:
        match = pattern.search(text)
        if match:
            seconds = float(match.group(1))
            return seconds / 1000 if match.group(2).lower() == "ms" else seconds
    return _retry_after(text)


class GeminiReader(_LastResult):
    """Reads Gemini CLI ``--output-format stream-json`` events (types.ts)::

        {"type": "result", "status": "success" | "error",
         "error": {"type": "unknown", "message": "[API Error: ...]"},
         "stats": {"input_tokens": 50, "output_tokens": 50, "tool_calls": 2, ...}}

    The last ``result`` with ``status: "error"`` gives ``api-error``, or ``rate-limited``
    when its ``[API Error ...]`` message has a rate-limit word (:data:`_GEMINI_RATE_LIMIT`),
    its error type names a quota, or the exit status is 173 (429 mod 256), with the retry time
    of ``Please retry in 2s`` / ``Suggested retry after 2s`` (:func:`_gemini_retry_after`).
    Without a result event, exit status 173 still gives ``rate-limited`` and 244/246/247/248
    (HTTP 500/502/503/504 mod 256) ``api-error``. ``error`` events are documented as
    non-fatal and are not read. The CLI reports no cost and no turn count.

    Observed with Gemini CLI 0.61.0 against a scripted server: an HTTP 500 ends the run with
    ``[API Error: {"error":{"code":500,...}}]`` and exit status 244; an HTTP 429 with the
    API's quota message and a ``RetryInfo`` of ``2s`` ends it with ``[API Error: You exceeded
    your current quota, ... Please retry in 2s. Suggested retry after 2s.] Please wait and
    try again later. ...`` and exit status 173; the error type is ``"unknown"`` for both.
    """

    def verdict(self, exit_code: int | None, stderr_tail: Sequence[str]) -> Verdict:
        """The verdict of the last result event, else of the exit status; ``Verdict(None)``
        when neither says anything."""
        event = self._result
        if event is None:
            if exit_code == _GEMINI_EXIT_RATE_LIMIT:
                return Verdict("rate-limited", f"exit status {exit_code} (HTTP 429 mod 256)")
            if exit_code in _GEMINI_EXIT_SERVER_ERROR:
                status = _GEMINI_EXIT_SERVER_ERROR[exit_code]
                return Verdict("api-error", f"exit status {exit_code} (HTTP {status} mod 256)")
            return Verdict(None)
        metrics: dict[str, Any] = {
            "input_tokens": _count(_get(event, "stats", "input_tokens")),
            "output_tokens": _count(_get(event, "stats", "output_tokens")),
        }
        if event.get("status") != "error":
            return Verdict(None, **metrics)
        error_type = _text(_get(event, "error", "type")).strip()
        message = _text(_get(event, "error", "message")).strip()
        detail = _one_line(f"result error {error_type or 'error'}: {message or 'no message'}")
        # Only the CLI's own API-error text (it starts with "[API Error"), never other error
        # messages: a tool error can quote test output that mentions a 429.
        api_error = message.lstrip("[").startswith("API Error")
        if (api_error and (_GEMINI_RATE_LIMIT.search(message)
                           or exit_code == _GEMINI_EXIT_RATE_LIMIT)) \
                or _GEMINI_LIMIT_TYPE.search(error_type):
            return Verdict("rate-limited", detail, retry_after=_gemini_retry_after(message),
                           **metrics)
        return Verdict("api-error", detail, **metrics)


class OpencodeReader:
    """Reads ``opencode run --format json`` events (run.ts)::

        {"type": "step_finish", "part": {"cost": 0.01,
         "tokens": {"input": 10, "output": 5, "reasoning": 0, "cache": {...}}}}
        {"type": "error", "error": {"name": "APIError",
         "data": {"message": "...", "statusCode": 429}}}

    An ``error`` not followed by more work (``step_finish`` / ``text``: a retried step that
    recovered) gives ``api-error``, ``rate-limited`` when its ``data.statusCode`` is 429.
    A rate limit's wait is read, first found first, from the message's ``Please try again in
    1.5s`` (``retry_after`` 1.5), then from the ``data.responseHeaders`` that opencode 1.18.33
    copies into the event (lower-cased names): ``retry-after-ms`` (milliseconds),
    ``retry-after`` (seconds, ``retry_after``; or an HTTP date, ``reset_at``). Cost and tokens
    are summed over ``step_finish`` events, which also count the turns.
    """

    def __init__(self) -> None:
        self._error: str | None = None
        self._limited = False
        self._retry_after: float | None = None
        self._reset_at: float | None = None
        self._cost: float | None = None
        self._input: int | None = None
        self._output: int | None = None
        self._turns: int | None = None

    def feed_stdout(self, line: bytes) -> None:
        """Updates the state from one event."""
        event = _parse_object(line)
        if event is None:
            return
        kind = event.get("type")
        if kind == "step_finish":
            self._error = None
            self._turns = _add(self._turns, 1)
            self._cost = _add_money(self._cost, _get(event, "part", "cost"))
            self._input = _add(self._input, _get(event, "part", "tokens", "input"))
            self._output = _add(self._output, _get(event, "part", "tokens", "output"))
        elif kind == "text":
            self._error = None
        elif kind == "error":
            error = event.get("error")
            name = _text(_get(error, "name")).strip()
            message = _text(_get(error, "data", "message")).strip() or _text(
                _get(error, "message")).strip()
            self._error = f"{name or 'error'}: {message or 'no message'}"
            self._limited = _get(error, "data", "statusCode") in (429, "429")
            self._retry_after = _retry_after(message)
            self._reset_at = None
            if self._retry_after is None:
                self._retry_after, self._reset_at = _header_wait(
                    _get(error, "data", "responseHeaders"))

    def verdict(self, exit_code: int | None, stderr_tail: Sequence[str]) -> Verdict:
        """``api-error`` / ``rate-limited`` (with the wait it states) after an unrecovered
        error, else ``None``."""
        metrics: dict[str, Any] = {"cost_usd": self._cost, "input_tokens": self._input,
                                   "output_tokens": self._output, "turns": self._turns}
        if self._error is None:
            return Verdict(None, **metrics)
        if self._limited:
            return Verdict("rate-limited", _one_line(self._error), reset_at=self._reset_at,
                           retry_after=self._retry_after, **metrics)
        return Verdict("api-error", _one_line(self._error), **metrics)


#: A header's wait in seconds or milliseconds: a plain non-negative decimal.
_HEADER_NUMBER = re.compile(r"\s*(\d{1,9}(?:\.\d{1,6})?)\s*")


def _header_wait(headers: object) -> tuple[float | None, float | None]:
    """``(retry_after seconds, reset_at epoch seconds)`` from an HTTP response's headers (a
    JSON object of name -> string, names in any case): ``retry-after-ms`` (milliseconds),
    else ``retry-after`` (seconds, or an HTTP date for ``reset_at``); ``(None, None)`` when
    neither holds a believable value."""
    if not isinstance(headers, dict):
        return None, None
    found = {str(k).lower(): v for k, v in headers.items() if isinstance(v, str)}
    millis = _HEADER_NUMBER.fullmatch(found.get("retry-after-ms", ""))
    if millis:
        return float(millis.group(1)) / 1000, None
    value = found.get("retry-after", "")
    seconds = _HEADER_NUMBER.fullmatch(value)
    if seconds:
        return float(seconds.group(1)), None
    if not value.strip() or len(value) > 64:
        return None, None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None, None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    epoch = when.timestamp()
    return (None, epoch) if 0 < epoch < _MAX_EPOCH else (None, None)


#: goose's provider rate-limit error as displayed (``Rate limit exceeded: <details>``,
#: ``ProviderError::RateLimitExceeded`` in crates/goose/src/providers/errors.rs), possibly
#: behind one ``<context>: `` prefix added by the agent.
_GOOSE_RATE_LIMIT = re.compile(r"(?:[\w .-]{1,60}: )?Rate limit exceeded\b")


class GooseReader:
    """Reads ``goose run --output-format stream-json`` events (goose-cli session/mod.rs)::

        {"type": "error", "error": "Rate limit exceeded: ..."}
        {"type": "complete", "total_tokens": 30, "input_tokens": 20, "output_tokens": 10,
         "cost_usd": 0.001}

    goose emits ``error`` only for an error that ended the run, so any ``error`` gives
    ``api-error`` (``rate-limited`` for ``Rate limit exceeded``). Cost and tokens come from
    the last ``complete``.
    """

    def __init__(self) -> None:
        self._error: str | None = None
        self._complete: dict[str, Any] | None = None

    def feed_stdout(self, line: bytes) -> None:
        """Updates the state from one event."""
        event = _parse_object(line)
        if event is None:
            return
        kind = event.get("type")
        if kind == "error":
            self._error = _text(event.get("error")).strip() or "error"
        elif kind == "complete":
            self._complete = event

    def verdict(self, exit_code: int | None, stderr_tail: Sequence[str]) -> Verdict:
        """``api-error`` / ``rate-limited`` after an error event, else ``None``."""
        done = self._complete or {}
        metrics: dict[str, Any] = {"cost_usd": _money(done.get("cost_usd")),
                                   "input_tokens": _count(done.get("input_tokens")),
                                   "output_tokens": _count(done.get("output_tokens"))}
        if self._error is None:
            return Verdict(None, **metrics)
        detail = _one_line(f"error: {self._error}")
        if _GOOSE_RATE_LIMIT.match(self._error):
            return Verdict("rate-limited", detail, retry_after=_retry_after(self._error),
                           **metrics)
        return Verdict("api-error", detail, **metrics)


#: The start of an error line aider prints on stdout: ``litellm.<Name>: <message>``, where
#: ``<Name>`` is one of the litellm exceptions aider catches (aider/exceptions.py:
#: ``RateLimitError``, ``InternalServerError``, ``AuthenticationError``, ``APIConnectionError``,
#: ``Timeout``...), at the start of the line.
_AIDER_ERROR = re.compile(r"litellm\.([A-Z][A-Za-z]{0,40}Error|Timeout):(.*)")

#: The line aider prints after every model response (base_coder.py ``show_usage_report``):
#: ``Tokens: 597 sent, 23 received.``, ``Tokens: 2.5k sent, 12k received. Cost: $0.01
#: message, $0.03 session.``
_AIDER_TOKENS = re.compile(
    r"Tokens: (\d{1,9}(?:\.\d)?)(k?) sent(?:, \d{1,9}(?:\.\d)?k? cache (?:write|hit))*"
    r", (\d{1,9}(?:\.\d)?)(k?) received\.")

#: The cost aider adds to that line, or prints on the next (when the response both wrote
#: and hit the prompt cache): ``Cost: $0.01 message, $0.03 session.``
_AIDER_COST = re.compile(r"(?:.* )?Cost: \$\d{1,12}(?:\.\d{1,12})? message, "
                         r"\$(\d{1,12}(?:\.\d{1,12})?) session\.")

#: Lines that end an error message aider's console wrapped over several lines: aider's own
#: description of the error (``The API provider has rate limited you. ...``), its back-off
#: line (``Retrying in 0.5 seconds...``) or the next error.
_AIDER_MESSAGE_END = re.compile(r"The API provider |OpenRouter or |Insufficient credits "
                                r"|You need to: |Retrying in |litellm\.")

#: ANSI escape sequences (colour with ``--pretty``).
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")

#: Characters kept of one aider error message (its continuation lines joined).
_AIDER_MESSAGE_CHARS = 2000


def _aider_count(number: str, kilo: str) -> int | None:
    """A token count as aider prints it (``597``, ``2.5k``, ``12k``: rounded above 999)."""
    try:
        value = float(number) * (1000 if kilo else 1)
    except ValueError:  # pragma: no cover - the pattern only lets digits through
        return None
    return _count(round(value))


class AiderReader:
    """Reads aider's plain console output on stdout (aider has no structured output).

    aider 0.86.2 exits 0 whatever the model API answered: after an HTTP error it prints
    litellm's exception, one per attempt, wrapped by its console at the terminal width
    (80 columns without a terminal), then its own description, then its back-off::

        litellm.RateLimitError: AnthropicException - b'{"type": "error", "error":
        {"type": "rate_limit_error", "message": "Please try again in 2s"}, "request_id":
        "req_99f33395af06489eb5438512"}'
        The API provider has rate limited you. Try again later or check your quotas.
        Retrying in 0.2 seconds...

    retries with a doubling back-off (0.25 s ... 32 s, about 64 s in all) for the errors it
    counts as transient (``RateLimitError``, ``InternalServerError``, ``APIConnectionError``,
    ``Timeout``...), not for ``AuthenticationError``, ``NotFoundError`` or
    ``BadRequestError``, and gives up with the last error printed. After every model
    response it prints ``Tokens: 597 sent, 23 received.`` (with ``Cost: $... message, $...
    session.`` for a model whose prices it knows).

    The verdict: the last ``litellm.<Name>:`` line that starts a line and is not followed by
    a ``Tokens:`` line (a response: a retry that recovered, or a model quoting such a line in
    its answer) gives ``rate-limited`` for ``RateLimitError`` / ``RouterRateLimitError``,
    with ``retry_after`` when the API's message says ``Please try again in 2s`` (aider's own
    ``Retrying in`` back-off is not a stated retry time: it has already waited it out), and
    ``api-error`` for every other name, ``AuthenticationError`` said as such. The detail is
    the message with its wrapped lines joined. ``turns`` counts the ``Tokens:`` lines,
    tokens are their sum (aider rounds counts above 999 to ``2.5k``, read as 2500), cost the
    last ``session`` amount. ANSI colour codes (``--pretty``) are stripped. This is free
    text: only whole lines in aider's own formats are read, in O(1) memory.
    """

    def __init__(self) -> None:
        self._name: str | None = None
        self._message = ""
        self._collecting = False
        self._cost: float | None = None
        self._input: int | None = None
        self._output: int | None = None
        self._turns: int | None = None

    def feed_stdout(self, line: bytes) -> None:
        """Updates the state from one console line."""
        if len(line) >= MAX_LINE_BYTES:
            self._collecting = False
            return
        text = _ANSI.sub("", line.decode("utf-8", "replace")).rstrip()
        error = _AIDER_ERROR.match(text)
        if error:
            self._name, self._message = error.group(1), error.group(2).strip()
            self._collecting = True
            return
        if self._collecting:
            if not text or _AIDER_MESSAGE_END.match(text) or len(
                    self._message) >= _AIDER_MESSAGE_CHARS:
                self._collecting = False
            else:
                self._message = (self._message + " " + text.strip())[:_AIDER_MESSAGE_CHARS]
                return
        tokens = _AIDER_TOKENS.match(text)
        if tokens:
            self._name = None
            self._turns = _add(self._turns, 1)
            self._input = _add(self._input, _aider_count(tokens.group(1), tokens.group(2)))
            self._output = _add(self._output, _aider_count(tokens.group(3), tokens.group(4)))
        cost = _AIDER_COST.fullmatch(text)
        if cost and (tokens or text.startswith("Cost: ")):
            self._cost = _money(float(cost.group(1)))

    def verdict(self, exit_code: int | None, stderr_tail: Sequence[str]) -> Verdict:
        """``rate-limited`` / ``api-error`` after an unrecovered litellm error, else
        ``None`` (the exit code decides)."""
        metrics: dict[str, Any] = {"cost_usd": self._cost, "input_tokens": self._input,
                                   "output_tokens": self._output, "turns": self._turns}
        if self._name is None:
            return Verdict(None, **metrics)
        error = f"litellm.{self._name}: {self._message}".rstrip(": ")
        if self._name in ("RateLimitError", "RouterRateLimitError"):
            return Verdict("rate-limited", _one_line(error),
                           retry_after=_retry_after(self._message), **metrics)
        if self._name == "AuthenticationError":
            error = "authentication failed (check the API key): " + error
        return Verdict("api-error", _one_line(error), **metrics)
