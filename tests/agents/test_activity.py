"""The live activity model (pytest_ralph.agents.activity), fed lines in the formats the output
readers read."""

from __future__ import annotations

import json

import pytest

from pytest_ralph.agents.activity import FORMATS, Activity, activity_for
from pytest_ralph.agents.readers import (
    CodexReader,
    GeminiReader,
    GooseReader,
    OpencodeReader,
    PlainReader,
    ResultReader,
)


def _feed(fmt: str, *events: object) -> Activity:
    act = Activity(fmt)
    for e in events:
        act.feed(e if isinstance(e, bytes) else json.dumps(e).encode())
    return act


def _assistant(mid: str, *blocks: dict[str, object], ins: int = 0, outs: int = 0) -> dict:
    return {"type": "assistant", "message": {"id": mid, "content": list(blocks),
                                             "usage": {"input_tokens": ins,
                                                       "output_tokens": outs}}}


def test_claude_stream_json_turns_tools_tokens_and_cost_as_they_come() -> None:
    act = _feed("claude",
                {"type": "system", "subtype": "init", "session_id": "s"},
                _assistant("m1", {"type": "text", "text": "Let me look."}, ins=100, outs=10))
    snap = act.snapshot()
    assert (snap.turns, snap.tool_calls, snap.input_tokens, snap.output_tokens) == (1, 0, 100,
                                                                                    10)
    # the same message streamed on another line: the same turn, its usage updated
    act.feed(json.dumps(_assistant("m1", {"type": "tool_use", "id": "t1", "name": "Read",
                                          "input": {"file_path": "src/calc.py"}},
                                   ins=100, outs=25)).encode())
    act.feed(json.dumps({"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "x" * 5000}]}}).encode())
    act.feed(json.dumps(_assistant("m2", {"type": "tool_use", "id": "t2", "name": "Bash",
                                          "input": {"command": "pytest -q\ntests"}},
                                   ins=50, outs=5)).encode())
    snap = act.snapshot()
    assert (snap.turns, snap.tool_calls) == (2, 2)
    assert (snap.input_tokens, snap.output_tokens) == (150, 30)
    assert snap.last_event() == "Bash `pytest -q tests`"
    assert act.summary() == ("2 turns, 2 tool calls, last Bash `pytest -q tests`, "
                             "150 in / 30 out tokens")
    act.feed(json.dumps({"type": "result", "subtype": "success", "num_turns": 3,
                         "total_cost_usd": 0.0123,
                         "usage": {"input_tokens": 400, "output_tokens": 60}}).encode())
    assert act.summary() == ("3 turns, 2 tool calls, last Bash `pytest -q tests`, "
                             "400 in / 60 out tokens, $0.0123")


def test_codex_items_count_once_and_turns_carry_the_threads_tokens() -> None:
    item = {"id": "item_1", "type": "command_execution", "command": "bash -lc 'ls src'",
            "status": "in_progress"}
    act = _feed("codex", {"type": "thread.started", "thread_id": "t"},
                {"type": "turn.started"},
                {"type": "item.started", "item": item},
                {"type": "item.completed", "item": {**item, "status": "completed"}},
                {"type": "item.completed", "item": {"id": "item_2", "type": "file_change",
                                                    "changes": [{"path": "src/a.py",
                                                                 "kind": "update"}]}},
                {"type": "item.completed", "item": {"id": "item_3", "type": "agent_message",
                                                    "text": "done"}},
                {"type": "turn.completed", "usage": {"input_tokens": 2000,
                                                     "output_tokens": 100}})
    snap = act.snapshot()
    assert (snap.turns, snap.tool_calls) == (1, 2)
    assert snap.last_event() == "edit `src/a.py`"
    assert (snap.input_tokens, snap.output_tokens, snap.cost_usd) == (2000, 100, None)


def test_gemini_tool_use_and_result_stats() -> None:
    act = _feed("gemini", {"type": "init", "session_id": "s", "model": "gemini"},
                {"type": "message", "role": "assistant", "content": "hi", "delta": True},
                {"type": "tool_use", "tool_name": "read_file", "tool_id": "1",
                 "parameters": {"file_path": "README.md"}},
                {"type": "tool_result", "tool_id": "1", "status": "success"},
                {"type": "result", "status": "success",
                 "stats": {"input_tokens": 70, "output_tokens": 7, "tool_calls": 1}})
    assert act.summary() == "0 turns, 1 tool call, last read_file `README.md`, 70 in / 7 out tokens"


def test_opencode_tool_parts_and_step_finish_sums() -> None:
    step = {"type": "step_finish", "part": {"cost": 0.01, "tokens": {"input": 10,
                                                                      "output": 5}}}
    act = _feed("opencode", {"type": "step_start", "part": {}},
                {"type": "tool_use", "part": {"tool": "bash", "state": {
                    "status": "completed", "input": {"command": "make test"}}}},
                step, step)
    snap = act.snapshot()
    assert (snap.turns, snap.tool_calls, snap.input_tokens, snap.output_tokens) == (2, 1, 20, 10)
    assert snap.cost_usd == pytest.approx(0.02)
    assert snap.last_event() == "bash `make test`"


def test_plain_output_counts_lines_only() -> None:
    act = _feed("plain", b"working...", b'{"type": "assistant"}', b"done")
    assert act.summary() == "3 lines of output"
    assert Activity("plain").summary() == "0 lines of output"


@pytest.mark.parametrize("fmt", FORMATS)
def test_garbage_never_raises_nor_counts(fmt: str) -> None:
    act = _feed(fmt, b"", b"{", b"not json", b"{\"type\": 1}", b"[1, 2]",
                b'{"type": "assistant", "message": [1]}', b'{"type": "tool_use", "part": 3}',
                b'{"type": "item.started", "item": {"type": "command_execution", "command": 5}}',
                b"\xff\xfe{}", b"{" * 100000 + b"}" * 100000,
                b'{"type":"result","num_turns":-1,"total_cost_usd":"NaN","usage":7}')
    snap = act.snapshot()
    assert snap.lines == 11
    assert snap.cost_usd is None and snap.input_tokens is None


def test_targets_are_one_line_and_cut() -> None:
    act = _feed("claude", _assistant("m", {"type": "tool_use", "name": "Bash\n\x1b[2J",
                                           "input": {"command": "echo " + "a" * 500}}))
    snap = act.snapshot()
    assert "\n" not in snap.last_tool and "\x1b" not in snap.last_tool
    assert len(snap.last_target) == 80 and snap.last_target.endswith("...")


def test_activity_for_picks_the_readers_format() -> None:
    assert activity_for(ResultReader()).fmt == "claude"
    assert activity_for(CodexReader()).fmt == "codex"
    assert activity_for(GeminiReader()).fmt == "gemini"
    assert activity_for(OpencodeReader()).fmt == "opencode"
    assert activity_for(GooseReader()).fmt == "plain"
    assert activity_for(PlainReader()).fmt == "plain"
    assert activity_for(None).fmt == "plain"
    with pytest.raises(ValueError, match="expected one of plain"):
        Activity("nope")


def test_a_long_file_target_keeps_its_name_and_a_long_command_its_start() -> None:
    long_dir = "/tmp/" + "d" * 120
    act = _feed("claude", _assistant("m1", {"type": "tool_use", "id": "t1", "name": "Edit",
                                            "input": {"file_path": f"{long_dir}/notes.txt"}}))
    target = act.snapshot().last_target
    assert len(target) == 80 and target.startswith("...") and target.endswith("d/notes.txt")
    act.feed(json.dumps(_assistant("m2", {"type": "tool_use", "id": "t2", "name": "Bash",
                                          "input": {"command": "pytest -q " + "x" * 120}}
                                   )).encode())
    target = act.snapshot().last_target
    assert len(target) == 80 and target.startswith("pytest -q x") and target.endswith("...")
