"""Agent presets: how to run each known coding-agent CLI unattended, and how to read its output.

A *preset* is a named recipe for one coding-agent CLI: the executable, the flags that run it
headless and unattended with machine-readable output, the route the prompt takes (``stdin``,
or ``file``: a flag naming the prompt file through the ``{prompt_file}`` placeholder, which the
loop replaces by the prompt file's path), the documentation the recipe was taken from, and an
*output reader* that classifies a finished run from the CLI's own structured records. The
prompt never travels as a command-line argument (it can be megabytes long); the loop always
writes it both on the agent's stdin and into the prompt file.

``--ralph-agent claude`` (a preset name, case-insensitive) runs that preset;
``--ralph-agent "some command --flag"`` runs a command line, with no preset. The ini option
``ralph_agent_flags`` replaces a preset's flags entirely (the executable stays), e.g.
``ralph_agent_flags = -p --output-format json --permission-mode acceptEdits`` for ``claude``;
see :func:`resolve_agent`. With overridden flags the reader still reads the CLI's structured
records when the flags still ask for them, and otherwise leaves the verdict to the exit code.

Presets (argv as run; docs are the pages the recipe was read from, listed in each preset's
``docs``):

============  ======================================================================  ======
name          argv                                                                    prompt
============  ======================================================================  ======
claude        ``claude -p --output-format stream-json --verbose``                     stdin
              ``--dangerously-skip-permissions``
codex         ``codex exec --json --skip-git-repo-check``                             stdin
              ``--dangerously-bypass-approvals-and-sandbox -``
aider         ``aider --yes-always --no-pretty --message-file {prompt_file}``         file
gemini        ``gemini --output-format stream-json --approval-mode=yolo``             stdin
opencode      ``opencode run --format json --auto``                                   stdin
amp           ``amp --dangerously-allow-all --stream-json --execute``                 stdin
goose         ``goose run --output-format stream-json --instructions -``              stdin
cursor-agent  ``cursor-agent -p --output-format stream-json --force``                 stdin
============  ======================================================================  ======

Documentation read:

- claude: https://docs.anthropic.com/claude/docs/claude-code/cli-usage,
  https://code.claude.com/docs/ja/headless.md, https://code.claude.com/docs/es/headless,
  https://github.com/obra/superpowers/pull/452 (stream-json needs ``--verbose``),
  https://github.com/anthropics/claude-code/issues/11429 (usage-limit result text).
- codex: https://developers.openai.com/codex/noninteractive.md,
  https://github.com/openai/codex/blob/main/docs/exec.md,
  https://github.com/openai/codex/blob/main/codex-rs/exec/src/cli.rs,
  https://github.com/openai/codex/blob/main/codex-rs/exec/src/exec_events.rs,
  https://spybara.com/openai/codex/history/docs/en/cli/reference/page/2026-04-07-0040/2026-04-08-0040/
  (a copy of https://developers.openai.com/codex/cli/reference).
- aider: https://aider.chat/docs/scripting.html, https://aider.chat/docs/config/options.html,
  https://github.com/Aider-AI/aider/issues/3918.
- gemini: https://geminicli.com/docs/cli/headless/,
  https://github.com/google-gemini/gemini-cli/blob/main/docs/cli/headless.md,
  https://github.com/google-gemini/gemini-cli/blob/main/docs/cli/cli-reference.md,
  https://github.com/google-gemini/gemini-cli/blob/main/packages/core/src/output/types.ts.
- opencode: https://opencode.ai/docs/cli/commands.md,
  https://github.com/anomalyco/opencode/blob/dev/packages/opencode/src/cli/cmd/run.ts,
  https://github.com/anomalyco/opencode/issues/42064.
- amp: https://ampcode.com/news/streaming-json, https://ampcode.com/manual/appendix,
  https://www.developersdigest.tech/reference/amp/cli-flags.
- goose: https://block.github.io/goose/docs/guides/goose-cli-commands,
  https://block.github.io/goose/docs/guides/goose-permissions,
  https://github.com/aaif-goose/goose/blob/main/crates/goose-cli/src/session/mod.rs.
- cursor-agent: https://cursor.com/docs/cli/cookbook/update-docs,
  https://www.developersdigest.tech/reference/cursor-cli/cli-flags,
  https://github.com/multica-ai/multica/pull/5711 (prompt on stdin).

Readers hold O(1) memory whatever the output's size: the last terminal record and a few
counters, never the lines. They read only fields of the CLI's own structured records (never
free text, which may quote file contents), tolerate any garbage, and never raise.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

from .run import AgentCommandError, split_command

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


@dataclass(frozen=True)
class Preset:
    """A known agent CLI.

    Attributes:
        name: the preset's name (``--ralph-agent NAME``).
        executable: the command looked up on PATH.
        flags: the arguments after the executable; ``{prompt_file}`` is replaced by the
            prompt file's path.
        prompt_via: ``"stdin"`` or ``"file"`` (a flag names ``{prompt_file}``).
        docs: URLs of the documentation the preset was taken from.
        reader: makes a fresh output reader for one run.
        structured: whether a flag list still asks the CLI for its structured output (a
            reader is only used when it does).
    """

    name: str
    executable: str
    flags: tuple[str, ...]
    prompt_via: str
    docs: tuple[str, ...]
    reader: Callable[[], OutputReader]
    structured: Callable[[Sequence[str]], bool] = field(default=lambda flags: True,
                                                       repr=False, compare=False)

    def argv(self, flags: Sequence[str] | None = None) -> list[str]:
        """``[executable, *flags]``, with this preset's flags when ``flags`` is empty/None."""
        return [self.executable, *(flags if flags else self.flags)]


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
#: and the API's ``Rate limit reached for <model> ...`` (https://github.com/openai/codex/issues/231).
_CODEX_RATE_LIMIT = re.compile(
    r"You(?:'|\u2019)ve hit your usage limit\b"
    r"|(?:stream error: )?exceeded retry limit, last status: 429\b"
    r"|Rate limit reached for\b")


class CodexReader:
    """Reads ``codex exec --json`` events (JSONL on stdout; exec_events.rs)::

        {"type": "turn.started"}
        {"type": "turn.completed", "usage": {"input_tokens": 24763,
         "cached_input_tokens": 24448, "output_tokens": 122}}
        {"type": "turn.failed", "error": {"message": "..."}}
        {"type": "error", "message": "..."}

    A ``turn.failed`` or ``error`` not followed by a ``turn.completed`` gives ``api-error``
    (``rate-limited`` for Codex's rate-limit messages). Tokens are those of the last
    ``turn.completed`` (Codex reports the thread's running total there); turns count
    ``turn.started``. Codex reports no cost.
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


#: A rate limit in a Gemini CLI result error: HTTP 429 / ``RESOURCE_EXHAUSTED`` as the CLI
#: formats the API error (``[API Error: ... "code": 429 ... "RESOURCE_EXHAUSTED" ...]``, see
#: https://github.com/google-gemini/gemini-cli/issues/1088), searched only in a message that
#: starts with that ``[API Error`` prefix; or a quota / rate error type.
_GEMINI_RATE_LIMIT = re.compile(r"\b429\b|RESOURCE_EXHAUSTED|Too Many Requests")

#: An error type that names a quota or rate limit (``QuotaExceededError``,
#: ``RateLimitError``, ``RESOURCE_EXHAUSTED``), not any type containing "rate".
_GEMINI_LIMIT_TYPE = re.compile(r"quota|rate[ _-]?limit|resource[ _-]?exhausted|too[ _-]?many",
                                re.IGNORECASE)


class GeminiReader(_LastResult):
    """Reads Gemini CLI ``--output-format stream-json`` events (types.ts)::

        {"type": "result", "status": "success" | "error",
         "error": {"type": "...", "message": "..."},
         "stats": {"input_tokens": 50, "output_tokens": 50, "tool_calls": 2, ...}}

    The last ``result`` with ``status: "error"`` gives ``api-error`` (``rate-limited`` for HTTP
    429 / ``RESOURCE_EXHAUSTED`` / a quota error type). ``error`` events are documented as
    non-fatal and are not read. The CLI reports no cost and no turn count.
    """

    def verdict(self, exit_code: int | None, stderr_tail: Sequence[str]) -> Verdict:
        """The verdict of the last result event; ``Verdict(None)`` when there was none."""
        event = self._result
        if event is None:
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
        if (api_error and _GEMINI_RATE_LIMIT.search(message)) or _GEMINI_LIMIT_TYPE.search(
                error_type):
            return Verdict("rate-limited", detail, retry_after=_retry_after(message), **metrics)
        return Verdict("api-error", detail, **metrics)


class OpencodeReader:
    """Reads ``opencode run --format json`` events (run.ts)::

        {"type": "step_finish", "part": {"cost": 0.01,
         "tokens": {"input": 10, "output": 5, "reasoning": 0, "cache": {...}}}}
        {"type": "error", "error": {"name": "APIError",
         "data": {"message": "...", "statusCode": 429}}}

    An ``error`` not followed by more work (``step_finish`` / ``text``: a retried step that
    recovered) gives ``api-error``, ``rate-limited`` when its ``data.statusCode`` is 429.
    Cost and tokens are summed over ``step_finish`` events, which also count the turns.
    """

    def __init__(self) -> None:
        self._error: str | None = None
        self._limited = False
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

    def verdict(self, exit_code: int | None, stderr_tail: Sequence[str]) -> Verdict:
        """``api-error`` / ``rate-limited`` after an unrecovered error, else ``None``."""
        metrics: dict[str, Any] = {"cost_usd": self._cost, "input_tokens": self._input,
                                   "output_tokens": self._output, "turns": self._turns}
        if self._error is None:
            return Verdict(None, **metrics)
        outcome = "rate-limited" if self._limited else "api-error"
        return Verdict(outcome, _one_line(self._error), **metrics)


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


# -- which flags keep the structured output on ------------------------------------------------


def _option_value(flags: Sequence[str], *names: str) -> str | None:
    """The value of the last ``--name value`` / ``--name=value`` among ``flags``."""
    found: str | None = None
    for i, arg in enumerate(flags):
        for name in names:
            if arg == name and i + 1 < len(flags):
                found = flags[i + 1]
            elif arg.startswith(name + "=") and name.startswith("--"):
                found = arg[len(name) + 1:]
    return found


def _format_in(*names: str, values: tuple[str, ...]) -> Callable[[Sequence[str]], bool]:
    """A check that the option ``names`` is set to one of ``values``."""
    def check(flags: Sequence[str]) -> bool:
        return _option_value(flags, *names) in values
    return check


def _has_flag(*names: str) -> Callable[[Sequence[str]], bool]:
    """A check that one of the boolean flags ``names`` is present."""
    def check(flags: Sequence[str]) -> bool:
        return any(arg in names for arg in flags)
    return check


# -- the presets ------------------------------------------------------------------------------


CLAUDE = Preset(
    name="claude",
    executable="claude",
    flags=("-p", "--output-format", "stream-json", "--verbose",
           "--dangerously-skip-permissions"),
    prompt_via="stdin",
    docs=(
        "https://docs.anthropic.com/claude/docs/claude-code/cli-usage",
        "https://code.claude.com/docs/ja/headless.md",
        "https://code.claude.com/docs/es/headless",
        "https://github.com/obra/superpowers/pull/452",
        "https://github.com/anthropics/claude-code/issues/11429",
    ),
    reader=ResultReader,
    structured=_format_in("--output-format", values=("json", "stream-json")),
)
"""Claude Code in print mode.

``-p`` (``--print``) runs non-interactively; with no prompt argument the prompt is read from
stdin (the CLI reference's ``cat file | claude -p``). ``--output-format stream-json`` prints
one JSON object per line (``system``/``init``, ``assistant``, ``user``, ..., the ``result``
last) and, with ``--print``, needs ``--verbose`` (``Error: When using --print,
--output-format=stream-json requires --verbose``). ``--dangerously-skip-permissions`` (=
``--permission-mode bypassPermissions``) approves every tool; as root it is refused unless
``IS_SANDBOX=1``. Exit status: 1 on an API error (``is_error: true``, ``terminal_reason:
"api_error"``, ``api_error_status``), 0 on success; versions before 2.1 exited 0 on API
errors too, which is why the reader decides from ``is_error``.
"""

CODEX = Preset(
    name="codex",
    executable="codex",
    flags=("exec", "--json", "--skip-git-repo-check",
           "--dangerously-bypass-approvals-and-sandbox", "-"),
    prompt_via="stdin",
    docs=(
        "https://developers.openai.com/codex/noninteractive.md",
        "https://github.com/openai/codex/blob/main/docs/exec.md",
        "https://github.com/openai/codex/blob/main/codex-rs/exec/src/cli.rs",
        "https://github.com/openai/codex/blob/main/codex-rs/exec/src/exec_events.rs",
        "https://spybara.com/openai/codex/history/docs/en/cli/reference/page/"
        "2026-04-07-0040/2026-04-08-0040/",
        "https://github.com/openai/codex/issues/10550",
        "https://github.com/Th0rgal/sandboxed.sh/pull/394",
    ),
    reader=CodexReader,
    structured=_has_flag("--json", "--experimental-json"),
)
"""OpenAI Codex CLI, ``codex exec`` (non-interactive mode).

The prompt argument ``-`` reads the instructions from stdin (cli.rs: "If not provided as an
argument (or if ``-`` is used), instructions are read from stdin"). ``--json`` prints JSONL
events (``thread.started``, ``turn.started``, ``turn.completed`` with usage, ``turn.failed``
with ``error.message``, ``item.*``, ``error``). ``codex exec`` never asks for approval but
runs read-only by default; ``--dangerously-bypass-approvals-and-sandbox`` (alias ``--yolo``)
lets it edit files and run commands with no sandbox, as an unattended loop needs
(``--sandbox workspace-write`` is the sandboxed alternative, via ``ralph_agent_flags``).
``--skip-git-repo-check``: Codex refuses to run outside a Git repository otherwise. Exit
codes are not documented; a failed turn exits 1 in the reports read.
"""

AIDER = Preset(
    name="aider",
    executable="aider",
    flags=("--yes-always", "--no-pretty", "--message-file", "{prompt_file}"),
    prompt_via="file",
    docs=(
        "https://aider.chat/docs/scripting.html",
        "https://aider.chat/docs/config/options.html",
        "https://github.com/Aider-AI/aider/issues/3918",
    ),
    reader=PlainReader,
    structured=lambda flags: False,
)
"""aider, scripted.

``--message-file FILE`` sends the file's text as one message, applies the edits and exits
(the docs document no way to read the message from stdin, so the prompt file is used).
``--yes-always`` says yes to every confirmation; ``--no-pretty`` keeps colour codes out of
the log. aider has no structured output, prints its errors (``litellm.RateLimitError: ...``)
on stdout among the model's text, documents no error format or exit codes, and exits 0
even when rate-limited (issue 3918): its reader never classifies, the exit code decides.
"""

GEMINI = Preset(
    name="gemini",
    executable="gemini",
    flags=("--output-format", "stream-json", "--approval-mode=yolo"),
    prompt_via="stdin",
    docs=(
        "https://geminicli.com/docs/cli/headless/",
        "https://github.com/google-gemini/gemini-cli/blob/main/docs/cli/headless.md",
        "https://github.com/google-gemini/gemini-cli/blob/main/docs/cli/cli-reference.md",
        "https://geminicli.com/docs/cli/tutorials/automation",
        "https://github.com/google-gemini/gemini-cli/blob/main/packages/core/src/output/"
        "types.ts",
    ),
    reader=GeminiReader,
    structured=_format_in("--output-format", "-o", values=("stream-json",)),
)
"""Gemini CLI, headless mode.

Headless mode starts when stdin is not a terminal (``echo "Summarize this" | gemini``); the
piped text is the prompt. ``--output-format stream-json`` prints JSONL events (``init``,
``message``, ``tool_use``, ``tool_result``, ``error``, ``result`` with ``status`` and
``stats``). ``--approval-mode=yolo`` auto-approves every tool (``--yolo`` is deprecated).
``--output-format json`` is not read: it prints one pretty-printed object over many lines.
Exit codes (headless.md): 0 success, 1 general error, 41 authentication, 42 input,
52 configuration, 53 turn limit, 54 fatal tool error, 130 cancelled.
"""

OPENCODE = Preset(
    name="opencode",
    executable="opencode",
    flags=("run", "--format", "json", "--auto"),
    prompt_via="stdin",
    docs=(
        "https://opencode.ai/docs/cli/commands.md",
        "https://github.com/anomalyco/opencode/blob/dev/packages/opencode/src/cli/cmd/run.ts",
        "https://github.com/anomalyco/opencode/issues/42064",
        "https://github.com/anomalyco/opencode/issues/50062",
    ),
    reader=OpencodeReader,
    structured=_format_in("--format", values=("json",)),
)
"""opencode, ``opencode run``.

``run`` reads non-TTY stdin to EOF and uses it as the message when no message argument is
given (run.ts ``resolveRunInput``; issue 42064). ``--format json`` prints raw JSON events
(``step_start``, ``step_finish`` with tokens and cost, ``text``, ``tool_use``, ``error``).
``--auto`` approves permission requests that are not explicitly denied (without it ``run``
auto-rejects them). Exit status 1 after a session error (run.ts); opencode 2.0 also exits 1
after an error it retried and recovered from (issue 50062), hence the reader clears an
error followed by more work.
"""

AMP = Preset(
    name="amp",
    executable="amp",
    flags=("--dangerously-allow-all", "--stream-json", "--execute"),
    prompt_via="stdin",
    docs=(
        "https://ampcode.com/news/streaming-json",
        "https://ampcode.com/manual/appendix",
        "https://www.developersdigest.tech/reference/amp/cli-flags",
    ),
    reader=ResultReader,
    structured=_has_flag("--stream-json"),
)
"""Sourcegraph Amp, execute mode.

``-x``/``--execute`` sends one message, waits for the agent's turn to end and exits; its
prompt value is optional when input is piped, and the CLI's own error says "pipe via stdin:
echo "your message" | amp --execute" (it is placed last so no flag is taken for its value).
``--stream-json`` prints Claude Code compatible JSON lines (``system``/``init``, ``user``,
``assistant``, ``result`` with ``is_error``, ``num_turns``). ``--dangerously-allow-all``
skips every permission prompt. Exit codes and the error/rate-limit records are not
documented; the reader reads ``is_error`` results as for Claude Code.
"""

GOOSE = Preset(
    name="goose",
    executable="goose",
    flags=("run", "--output-format", "stream-json", "--instructions", "-"),
    prompt_via="stdin",
    docs=(
        "https://block.github.io/goose/docs/guides/goose-cli-commands",
        "https://block.github.io/goose/docs/guides/goose-permissions",
        "https://github.com/aaif-goose/goose/blob/main/crates/goose-cli/src/session/mod.rs",
    ),
    reader=GooseReader,
    structured=_format_in("--output-format", values=("stream-json",)),
)
"""Block goose, ``goose run``.

``-i``/``--instructions -`` reads the instructions from stdin; the run exits when the task
is done. ``--output-format stream-json`` prints JSON events (``message``, ``notification``,
``error``, ``complete`` with tokens and cost). goose has no approval flag: its default mode
is autonomous ("Autonomous Mode is applied by default"); a config that changed it is
overridden with the environment variable ``GOOSE_MODE=auto``. Exit codes are not documented.
"""

CURSOR = Preset(
    name="cursor-agent",
    executable="cursor-agent",
    flags=("-p", "--output-format", "stream-json", "--force"),
    prompt_via="stdin",
    docs=(
        "https://cursor.com/docs/cli/cookbook/update-docs",
        "https://www.developersdigest.tech/reference/cursor-cli/cli-flags",
        "https://github.com/manaflow-ai/manaflow/pull/152",
        "https://github.com/multica-ai/multica/pull/5711",
    ),
    reader=ResultReader,
    structured=_format_in("--output-format", values=("json", "stream-json")),
)
"""Cursor CLI (``cursor-agent``, also installed as ``agent``), print mode.

``-p``/``--print`` runs non-interactively; ``--output-format stream-json`` prints Claude Code
like JSON lines ending with a ``result`` (``is_error``). ``--force`` (``--yolo``) runs every
action without approval except what ``permissions.deny`` blocks; without it print mode
rejects whatever would need approval. The official pages read show the prompt as an argument
only; that the CLI reads the prompt from stdin when none is given comes from integrators
(multica PR 5711, cursor-plugin-cc issue 26), not from Cursor's docs. On failure it exits
non-zero and writes the error to stderr, in no documented format.
"""

#: Every preset by name.
PRESETS: dict[str, Preset] = {p.name: p for p in (
    CLAUDE, CODEX, AIDER, GEMINI, OPENCODE, AMP, GOOSE, CURSOR)}

_BY_EXECUTABLE: dict[str, Preset] = {p.executable: p for p in PRESETS.values()}


def _basename(command: str) -> str:
    """The executable's name: last path part, lower-cased, without ``.exe``/``.cmd``."""
    name = re.split(r"[\\/]", command)[-1].lower()
    for suffix in (".exe", ".cmd"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def reader_for(argv: Sequence[str]) -> OutputReader:
    """A fresh output reader for ``argv``.

    The preset whose executable is ``argv[0]``'s name (``/usr/bin/claude``, ``claude.exe``,
    ``claude.cmd``) gives its reader, provided the other arguments still ask the CLI for its
    structured output; anything else gets a :class:`PlainReader`.
    """
    if not argv:
        return PlainReader()
    preset = _BY_EXECUTABLE.get(_basename(argv[0]))
    if preset is None or not preset.structured(list(argv[1:])):
        return PlainReader()
    return preset.reader()


def resolve_agent(value: str, flags: str | None) -> tuple[list[str], Preset | None]:
    """The agent argv for ``--ralph-agent value`` and ini ``ralph_agent_flags``.

    Args:
        value: a preset name (one of :data:`PRESETS`, any case), or a command line.
        flags: for a preset, a command-line fragment that replaces the preset's flags (empty
            or ``None``: the preset's own); ignored for a command line.

    Returns:
        ``(argv, preset)``; ``preset`` is ``None`` for a command line.

    Raises:
        AgentCommandError: ``flags`` cannot be split (unbalanced quotes), or the command
            line is empty or cannot be split.
    """
    preset = PRESETS.get(value.strip().lower())
    if preset is None:
        return split_command(value), None
    if not flags:
        return preset.argv(), preset
    try:
        parts = shlex.split(flags, posix=os.name != "nt")
    except ValueError as exc:
        raise AgentCommandError(
            f"cannot split ralph_agent_flags {flags!r} for preset {preset.name!r}: {exc}"
        ) from None
    return preset.argv(parts), preset
