"""What an agent is doing while it runs, from its CLI's structured output: the live view's model.

An :class:`Activity` is fed the agent's stdout line by line as it comes (the same lines its
:class:`pytest_ralph.agents.readers.OutputReader` gets) and says at any time what the stream
said so far (:meth:`Activity.snapshot`, :meth:`Activity.summary`): the model turns, the tool
calls, the last tool and its file or command, the tokens and the cost. One format per output
reader (:func:`activity_for`):

- ``claude``: Claude Code ``--output-format stream-json`` (and the compatible Amp and Cursor
  CLI): ``assistant`` messages (one turn per message id; ``tool_use`` content blocks; their
  ``usage``) and the final ``result`` (its totals and cost win);
- ``codex``: ``codex exec --json``: ``turn.started``, ``turn.completed`` (the thread's
  tokens), ``item.started`` / ``item.completed`` of ``command_execution``, ``file_change``,
  ``mcp_tool_call`` and ``web_search`` items;
- ``gemini``: Gemini CLI ``stream-json``: ``tool_use`` events, assistant ``message`` events,
  the final ``result``'s ``stats``;
- ``opencode``: ``opencode run --format json``: ``tool_use`` parts, ``step_finish`` (cost,
  tokens, one turn each);
- ``plain``: anything else: the lines of output only.

Like the readers it holds O(1) memory (counters and the last tool), tolerates any garbage and
never raises. What it keeps is not redacted: redact :meth:`Activity.summary` before showing it.
It is fed from the thread that reads the agent's output and read from another: a lock guards
its state.

This module does not import pytest.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

from .readers import (
    CodexReader,
    GeminiReader,
    OpencodeReader,
    OutputReader,
    ResultReader,
    _add,
    _add_money,
    _count,
    _get,
    _money,
    _parse_object,
    _text,
)

#: The formats an :class:`Activity` reads.
FORMATS = ("plain", "claude", "codex", "gemini", "opencode")

#: Characters of a tool's target (its file, command or query) kept.
TARGET_CHARS = 80

#: Bytes at the start of a stream-json line looked at to skip a ``user`` record (a tool's
#: result, which can be megabytes of file contents) without parsing it.
_HEAD_BYTES = 64

#: Input fields that name what a tool works on, in the order tried.
_TARGET_KEYS = ("file_path", "path", "notebook_path", "filePath", "absolute_path", "command",
                "pattern", "query", "url", "description", "prompt")


@dataclass(frozen=True)
class ActivitySnapshot:
    """What an agent's stream said so far.

    Attributes:
        lines: stdout lines seen.
        turns: model turns (``None``: the stream does not say).
        tool_calls: tool calls started (``None`` for the ``plain`` format).
        last_tool: the last tool's name (``Bash``, ``Edit``; ``""``: none yet).
        last_target: its file, command or query, on one line, cut to :data:`TARGET_CHARS`
            (a file keeps its end).
        input_tokens, output_tokens: tokens so far, when the stream says.
        cost_usd: US dollars so far, when the stream says.
    """

    lines: int = 0
    turns: int | None = None
    tool_calls: int | None = None
    last_tool: str = ""
    last_target: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None

    def last_event(self) -> str:
        """The last tool call, ``Bash `pytest -q` `` (``""``: none yet)."""
        if not self.last_tool:
            return ""
        return self.last_tool + (f" `{self.last_target}`" if self.last_target else "")

    def summary(self) -> str:
        """One line: ``3 turns, 5 tool calls, last Bash `pytest -q`, 1200 in / 300 out
        tokens, $0.0123``; ``12 lines of output`` without structured output."""
        parts: list[str] = []
        if self.turns is not None:
            parts.append(f"{self.turns} turn{'s' if self.turns != 1 else ''}")
        if self.tool_calls is not None:
            parts.append(f"{self.tool_calls} tool call{'s' if self.tool_calls != 1 else ''}")
        if self.last_tool:
            parts.append(f"last {self.last_event()}")
        if self.input_tokens is not None or self.output_tokens is not None:
            parts.append(f"{self.input_tokens or 0} in / {self.output_tokens or 0} out tokens")
        if self.cost_usd is not None:
            parts.append(f"${self.cost_usd:.4f}")
        if not parts:
            parts.append(f"{self.lines} line{'s' if self.lines != 1 else ''} of output")
        return ", ".join(parts)


#: The tool-call argument keys that name a file: cut from the left, keeping the file's name.
_PATH_KEYS = frozenset({"file_path", "path", "notebook_path", "filePath", "absolute_path"})


def _one_line(value: object, *, path: bool = False) -> str:
    """``value`` as text on one line (control characters blanked), cut to
    :data:`TARGET_CHARS` characters (``...`` marks the cut): a command or query keeps its
    start, a ``path`` its end (``.../project/notes.txt``)."""
    text = value if isinstance(value, str) else ""
    if path:
        text = text[-4 * TARGET_CHARS:]
        flat = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
        return flat if len(flat) <= TARGET_CHARS else "..." + flat[3 - TARGET_CHARS:]
    flat = " ".join("".join(ch if ch.isprintable() else " " for ch in text[:4 * TARGET_CHARS])
                    .split())
    return flat if len(flat) <= TARGET_CHARS else flat[:TARGET_CHARS - 3] + "..."


def _target(args: object) -> str:
    """What a tool call's arguments (a JSON object) say it works on: its file, command or
    query; ``""`` when none."""
    if not isinstance(args, dict):
        return ""
    for key in _TARGET_KEYS:
        value = args.get(key)
        if isinstance(value, list):  # codex's command as argv
            value = " ".join(v for v in value if isinstance(v, str))
        if isinstance(value, str) and value.strip():
            return _one_line(value, path=key in _PATH_KEYS)
    return ""


class Activity:
    """The live model of one agent run's output in ``fmt`` (one of :data:`FORMATS`).

    Raises:
        ValueError: ``fmt`` is not one of :data:`FORMATS`.
    """

    def __init__(self, fmt: str = "plain") -> None:
        if fmt not in FORMATS:
            raise ValueError(f"activity format {fmt!r}: expected one of {', '.join(FORMATS)}")
        self.fmt = fmt
        self._lock = threading.Lock()
        structured = fmt != "plain"
        self._state = ActivitySnapshot(turns=0 if structured else None,
                                       tool_calls=0 if structured else None)
        self._message = ""  # claude: the id of the assistant message being streamed
        self._usage: tuple[int | None, int | None] = (None, None)  # its usage
        self._done_in: int | None = None  # claude: tokens of the messages before it
        self._done_out: int | None = None
        self._items: set[str] = set()  # codex: items whose start was counted (bounded)

    def feed(self, line: bytes) -> None:
        """One stdout line (without its newline); never raises."""
        try:
            with self._lock:
                self._state = replace(self._state, lines=self._state.lines + 1)
                if self.fmt == "plain" or not line.lstrip().startswith(b"{"):
                    return
                if self.fmt == "claude" and b'"type":"user"' in line[:_HEAD_BYTES].replace(
                        b" ", b""):
                    return
                event = _parse_object(line)
                if event is not None:
                    getattr(self, f"_{self.fmt}")(event)
        except Exception:  # a live view must never stop the run
            return

    def snapshot(self) -> ActivitySnapshot:
        """What the stream said so far."""
        with self._lock:
            return self._state

    def summary(self) -> str:
        """:meth:`ActivitySnapshot.summary` of :meth:`snapshot` (not redacted)."""
        return self.snapshot().summary()

    # -- one event, per format (the lock is held) ----------------------------------------

    def _tool(self, name: object, target: str) -> None:
        s = self._state
        self._state = replace(s, tool_calls=(s.tool_calls or 0) + 1,
                              last_tool=_one_line(name) or "tool", last_target=target)

    def _claude(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "assistant":
            message = event.get("message")
            mid = _text(_get(message, "id")) or str(id(message))
            if mid != self._message:
                self._done_in = _add(self._done_in, self._usage[0])
                self._done_out = _add(self._done_out, self._usage[1])
                self._message = mid
                self._state = replace(self._state, turns=(self._state.turns or 0) + 1)
            usage = _get(message, "usage")
            if isinstance(usage, dict):
                self._usage = (_count(usage.get("input_tokens")),
                               _count(usage.get("output_tokens")))
                ins = _add(self._done_in, self._usage[0])
                outs = _add(self._done_out, self._usage[1])
                self._state = replace(self._state, input_tokens=ins, output_tokens=outs)
            content = _get(message, "content")
            for block in content if isinstance(content, list) else ():
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    self._tool(block.get("name"), _target(block.get("input")))
        elif kind == "result":
            s = self._state
            cost = _money(event.get("total_cost_usd"))
            turns = _count(event.get("num_turns"))
            self._state = replace(
                s, turns=turns if turns is not None else s.turns,
                cost_usd=cost if cost is not None else s.cost_usd,
                input_tokens=_count(_get(event, "usage", "input_tokens")) or s.input_tokens,
                output_tokens=_count(_get(event, "usage", "output_tokens")) or s.output_tokens)

    def _codex(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "turn.started":
            self._state = replace(self._state, turns=(self._state.turns or 0) + 1)
        elif kind == "turn.completed":
            self._state = replace(self._state,
                                  input_tokens=_count(_get(event, "usage", "input_tokens")),
                                  output_tokens=_count(_get(event, "usage", "output_tokens")))
        elif kind in ("item.started", "item.completed"):
            item = event.get("item")
            item_type = _text(_get(item, "type"))
            item_id = _text(_get(item, "id"))
            if item_type == "command_execution":
                name, target = "command", _one_line(_get(item, "command"))
            elif item_type == "file_change":
                changes = _get(item, "changes")
                first = changes[0] if isinstance(changes, list) and changes else None
                name, target = "edit", _one_line(_get(first, "path"), path=True)
            elif item_type == "mcp_tool_call":
                name, target = (_text(_get(item, "tool")) or "mcp tool",
                                _one_line(_get(item, "server")))
            elif item_type == "web_search":
                name, target = "web search", _one_line(_get(item, "query"))
            else:
                return
            if item_id and item_id in self._items:
                return  # its start was counted
            if item_id and len(self._items) < 100_000:
                self._items.add(item_id)
            self._tool(name, target)

    def _gemini(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "tool_use":
            self._tool(event.get("tool_name"), _target(event.get("parameters")))
        elif kind == "message" and event.get("role") == "assistant" and not event.get(
                "delta"):
            self._state = replace(self._state, turns=(self._state.turns or 0) + 1)
        elif kind == "result":
            s = self._state
            self._state = replace(
                s, input_tokens=_count(_get(event, "stats", "input_tokens")) or s.input_tokens,
                output_tokens=_count(_get(event, "stats", "output_tokens")) or s.output_tokens)

    def _opencode(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "tool_use":
            part = event.get("part")
            self._tool(_get(part, "tool"), _target(_get(part, "state", "input")))
        elif kind == "step_finish":
            s = self._state
            self._state = replace(
                s, turns=(s.turns or 0) + 1,
                cost_usd=_add_money(s.cost_usd, _get(event, "part", "cost")),
                input_tokens=_add(s.input_tokens, _get(event, "part", "tokens", "input")),
                output_tokens=_add(s.output_tokens, _get(event, "part", "tokens", "output")))


def activity_for(reader: OutputReader | None) -> Activity:
    """A fresh :class:`Activity` in the format ``reader`` reads (``plain`` for a reader
    without per-event output, or ``None``)."""
    fmt = ("claude" if isinstance(reader, ResultReader) else
           "codex" if isinstance(reader, CodexReader) else
           "gemini" if isinstance(reader, GeminiReader) else
           "opencode" if isinstance(reader, OpencodeReader) else "plain")
    return Activity(fmt)
