"""Unit tests of pytest_ralph.agents.presets: preset argv, output readers, and CLI-shaped fakes."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.agents.presets import PRESETS, Preset, reader_for, resolve_agent
from pytest_ralph.agents.readers import (
    MAX_LINE_BYTES,
    AiderReader,
    CodexReader,
    GeminiReader,
    GooseReader,
    OpencodeReader,
    OutputReader,
    PlainReader,
    ResultReader,
    Verdict,
)
from pytest_ralph.agents.run import AgentCommandError, render_argv

posix_only = pytest.mark.skipif(os.name != "posix", reason="shebang fakes need POSIX")


def jl(obj: Any) -> bytes:
    """One JSON line (no newline)."""
    return json.dumps(obj).encode()


def run_reader(reader: OutputReader, lines: Iterable[bytes], exit_code: int | None = 0,
               stderr: list[str] | None = None) -> Verdict:
    for line in lines:
        reader.feed_stdout(line)
    return reader.verdict(exit_code, stderr or [])


# -- small Claude Code shaped fixtures (own, reproducing the shape of the real CLI) -----------

def claude_init() -> bytes:
    return jl({"type": "system", "subtype": "init", "cwd": "/p", "session_id": "s-1",
               "tools": ["Bash"], "model": "m", "permissionMode": "bypassPermissions"})


def claude_assistant(text: str) -> bytes:
    return jl({"type": "assistant", "session_id": "s-1",
               "message": {"role": "assistant", "content": [{"type": "text", "text": text}],
                           "usage": {"input_tokens": 5, "output_tokens": 1}}})


def claude_result(**over: Any) -> bytes:
    record: dict[str, Any] = {
        "type": "result", "subtype": "success", "is_error": False, "num_turns": 3,
        "result": "Done.", "session_id": "s-1", "total_cost_usd": 0.0024,
        "usage": {"input_tokens": 300, "output_tokens": 60, "cache_read_input_tokens": 0},
        "terminal_reason": "completed", "api_error_status": None}
    record.update(over)
    return jl(record)


def claude_api_error(status: int = 500, error_type: str = "api_error",
                     text: str = "API Error: 500 mock failure.") -> bytes:
    return claude_result(is_error=True, num_turns=1, total_cost_usd=0,
                         usage={"input_tokens": 0, "output_tokens": 0},
                         terminal_reason="api_error", api_error_status=status,
                         api_error_type=error_type, result=text)


CLAUDE_STREAM = ["-p", "--output-format", "stream-json", "--verbose"]


# -- the preset table -----------------------------------------------------------------------

EXPECTED_ARGV = {
    "claude": ["claude", "-p", "--output-format", "stream-json", "--verbose",
               "--dangerously-skip-permissions"],
    "codex": ["codex", "exec", "--json", "--skip-git-repo-check",
              "--dangerously-bypass-approvals-and-sandbox", "-"],
    "aider": ["aider", "--yes-always", "--no-pretty", "--message-file", "{prompt_file}",
              "--no-auto-commits", "--no-dirty-commits", "--no-check-update", "--no-analytics"],
    "gemini": ["gemini", "--output-format", "stream-json", "--approval-mode=yolo",
               "--skip-trust"],
    "opencode": ["opencode", "run", "--format", "json", "--auto"],
    "amp": ["amp", "--dangerously-allow-all", "--stream-json", "--execute"],
    "goose": ["goose", "run", "--output-format", "stream-json", "--instructions", "-"],
    "cursor-agent": ["cursor-agent", "-p", "--output-format", "stream-json", "--force"],
}


def test_every_expected_preset_exists() -> None:
    assert set(PRESETS) == set(EXPECTED_ARGV)


@pytest.mark.parametrize("name", sorted(EXPECTED_ARGV))
def test_preset_argv(name: str) -> None:
    preset = PRESETS[name]
    assert preset.name == name
    assert preset.argv() == EXPECTED_ARGV[name]
    assert preset.argv(None) == EXPECTED_ARGV[name]
    assert preset.argv([]) == EXPECTED_ARGV[name]
    assert preset.argv(["--x", "y"]) == [preset.executable, "--x", "y"]


@pytest.mark.parametrize("name", sorted(EXPECTED_ARGV))
def test_preset_shape(name: str) -> None:
    preset = PRESETS[name]
    assert preset.prompt_via in ("stdin", "file")
    uses_file = any("{prompt_file}" in flag for flag in preset.flags)
    assert uses_file == (preset.prompt_via == "file")
    assert preset.docs and all(url.startswith("https://") for url in preset.docs)
    assert preset.executable == name
    reader = preset.reader()
    assert reader.verdict(0, []) == Verdict(None)  # a fresh reader has nothing to say


def test_claude_preset_is_the_one_the_real_cli_test_expects() -> None:
    assert PRESETS["claude"].argv() == [
        "claude", "-p", "--output-format", "stream-json", "--verbose",
        "--dangerously-skip-permissions"]
    assert PRESETS["claude"].prompt_via == "stdin"


# -- resolve_agent ----------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["claude", "Claude", "CLAUDE", " claude "])
def test_resolve_preset_name_any_case(value: str) -> None:
    argv, preset = resolve_agent(value, None)
    assert preset is PRESETS["claude"]
    assert argv == EXPECTED_ARGV["claude"]


def test_resolve_preset_flags_replace_the_presets() -> None:
    argv, preset = resolve_agent("codex", "exec --json --sandbox workspace-write -")
    assert preset is PRESETS["codex"]
    assert argv == ["codex", "exec", "--json", "--sandbox", "workspace-write", "-"]


@pytest.mark.parametrize("flags", [None, ""])
def test_resolve_preset_without_flags_keeps_its_own(flags: str | None) -> None:
    assert resolve_agent("gemini", flags)[0] == EXPECTED_ARGV["gemini"]


@pytest.mark.skipif(os.name != "posix", reason="POSIX quoting")
def test_resolve_preset_flags_are_split_like_a_shell() -> None:
    argv, _ = resolve_agent("aider", "--message-file {prompt_file} --model 'a b'")
    assert argv == ["aider", "--message-file", "{prompt_file}", "--model", "a b"]


@pytest.mark.skipif(os.name != "posix", reason="POSIX quoting")
def test_resolve_preset_bad_flags_raise() -> None:
    with pytest.raises(AgentCommandError, match="ralph_agent_flags"):
        resolve_agent("claude", "-p 'unclosed")


def test_resolve_command_line_ignores_flags() -> None:
    argv, preset = resolve_agent("python agent.py --fast", "-p --ignored")
    assert preset is None
    assert argv == ["python", "agent.py", "--fast"]


def test_resolve_command_line_starting_with_a_preset_name_is_a_command_line() -> None:
    argv, preset = resolve_agent("claude -p", None)
    assert preset is None
    assert argv == ["claude", "-p"]


@pytest.mark.parametrize("value", ["", "   "])
def test_resolve_empty_command_raises(value: str) -> None:
    with pytest.raises(AgentCommandError):
        resolve_agent(value, None)


# -- reader_for ---------------------------------------------------------------------------------

@pytest.mark.parametrize("exe", ["claude", "/usr/local/bin/claude", "claude.exe", "CLAUDE.EXE",
                                 "claude.cmd", r"C:\tools\claude.exe", "./bin/claude"])
def test_reader_for_claude_by_basename(exe: str) -> None:
    assert isinstance(reader_for([exe, *CLAUDE_STREAM]), ResultReader)


@pytest.mark.parametrize(("name", "kind"), [
    ("codex", CodexReader), ("gemini", GeminiReader), ("opencode", OpencodeReader),
    ("amp", ResultReader), ("goose", GooseReader), ("cursor-agent", ResultReader),
    ("aider", AiderReader)])
def test_reader_for_each_preset(name: str, kind: type) -> None:
    assert isinstance(reader_for(PRESETS[name].argv()), kind)


@pytest.mark.parametrize("argv", [
    [], ["my-agent", "--json"], ["claudex", *CLAUDE_STREAM], ["python", "claude"],
    ["claude", "-p"], ["claude", "-p", "--output-format", "text"],
    ["codex", "exec", "-"], ["gemini", "--output-format", "json"], ["opencode", "run"],
    ["amp", "-x"], ["goose", "run", "--instructions", "-"], ["cursor-agent", "-p"]])
def test_reader_for_plain_when_unknown_or_structured_output_off(argv: list[str]) -> None:
    reader = reader_for(argv)
    assert isinstance(reader, PlainReader)
    verdict = run_reader(reader, [claude_api_error()], exit_code=0)
    assert verdict == Verdict(None)


def test_reader_for_accepts_equals_form_and_last_value_wins() -> None:
    assert isinstance(reader_for(["claude", "-p", "--output-format=json"]), ResultReader)
    assert isinstance(reader_for(["claude", "-p", "--output-format", "stream-json",
                                  "--output-format", "text"]), PlainReader)
    assert isinstance(reader_for(["gemini", "-o", "stream-json"]), GeminiReader)


def test_reader_for_gives_fresh_readers() -> None:
    argv = PRESETS["claude"].argv()
    first = reader_for(argv)
    first.feed_stdout(claude_api_error())
    assert reader_for(argv).verdict(0, []) == Verdict(None)


def test_plain_reader_never_classifies() -> None:
    verdict = run_reader(PlainReader(), [claude_api_error(), b"Error: 429"], exit_code=1,
                         stderr=["litellm.RateLimitError: 429", "API Error: 500"])
    assert verdict == Verdict(None)


# -- Claude Code (and the compatible Amp / Cursor) result reader --------------------------------

def test_claude_success_records_cost_tokens_turns() -> None:
    verdict = run_reader(ResultReader(), [claude_init(), claude_assistant("hi"),
                                          claude_result()])
    assert verdict == Verdict(None, cost_usd=0.0024, input_tokens=300, output_tokens=60,
                              turns=3)


def test_claude_json_single_object() -> None:
    verdict = run_reader(ResultReader(), [claude_result(num_turns=1, total_cost_usd=1.5)])
    assert verdict.outcome is None
    assert (verdict.cost_usd, verdict.turns) == (1.5, 1)


@pytest.mark.parametrize("exit_code", [0, 1, None])
def test_claude_api_error_whatever_the_exit_code(exit_code: int | None) -> None:
    verdict = run_reader(ResultReader(), [claude_init(), claude_api_error()], exit_code)
    assert verdict.outcome == "api-error"
    assert verdict.detail == "result is_error: API Error: 500 mock failure."
    assert verdict.turns == 1 and verdict.cost_usd == 0.0
    assert verdict.reset_at is None and verdict.retry_after is None


def test_claude_api_error_detail_is_one_short_line() -> None:
    text = "API Error: 500\n" + "x" * 1000
    verdict = run_reader(ResultReader(), [claude_api_error(text=text)])
    assert "\n" not in verdict.detail
    assert len(verdict.detail) <= 200
    assert verdict.detail.startswith("result is_error: API Error: 500 xxx")


def test_claude_error_without_text_names_the_reason() -> None:
    line = claude_result(is_error=True, subtype="error_max_turns", result=None,
                         terminal_reason=None)
    verdict = run_reader(ResultReader(), [line])
    assert verdict.outcome == "api-error"
    assert verdict.detail == "result is_error: error_max_turns"


def test_claude_rate_limit_429() -> None:
    line = claude_api_error(429, "rate_limit_error",
                            "API Error: Request rejected (429) · mock failure")
    verdict = run_reader(ResultReader(), [claude_init(), line], exit_code=1)
    assert verdict.outcome == "rate-limited"
    assert verdict.detail.startswith("HTTP 429 rate_limit_error")
    assert verdict.reset_at is None


@pytest.mark.parametrize(("status", "error_type"), [(429, "api_error"), ("429", None),
                                                   (None, "rate_limit_error")])
def test_claude_rate_limit_by_status_or_type(status: Any, error_type: Any) -> None:
    line = claude_result(is_error=True, api_error_status=status, api_error_type=error_type,
                         result="API Error: slow down")
    assert run_reader(ResultReader(), [line]).outcome == "rate-limited"


def test_claude_usage_limit_gives_reset_at() -> None:
    line = claude_result(is_error=True, result="Claude AI usage limit reached|1762952400")
    verdict = run_reader(ResultReader(), [claude_init(), line], exit_code=0)
    assert verdict.outcome == "rate-limited"
    assert verdict.reset_at == 1762952400.0
    assert verdict.detail == "usage limit reached, resets at 2025-11-12T13:00:00Z"


def test_claude_usage_limit_with_absurd_epoch_has_no_reset_at() -> None:
    line = claude_result(is_error=True, result="Claude AI usage limit reached|999999999999")
    verdict = run_reader(ResultReader(), [line])
    assert verdict.outcome == "rate-limited"
    assert verdict.reset_at is None


def test_claude_subscription_limit_text() -> None:
    line = claude_result(is_error=True, result="You've hit your limit · resets 3pm (UTC)")
    assert run_reader(ResultReader(), [line]).outcome == "rate-limited"


def test_claude_usage_limit_text_in_a_success_result_is_not_an_error() -> None:
    line = claude_result(result="Claude AI usage limit reached|1762952400")
    assert run_reader(ResultReader(), [line]).outcome is None


def test_claude_quoted_result_in_assistant_text_does_not_count() -> None:
    fake = json.dumps({"type": "result", "is_error": True, "result": "API Error: 500"})
    lines = [claude_init(), claude_assistant(fake),
             claude_assistant(f"here:\n{fake}\n"), claude_result()]
    verdict = run_reader(ResultReader(), lines)
    assert verdict.outcome is None and verdict.turns == 3


def test_claude_quoted_result_alone_is_not_a_result() -> None:
    fake = json.dumps({"type": "result", "is_error": True})
    verdict = run_reader(ResultReader(), [claude_init(), claude_assistant(fake)], exit_code=0)
    assert verdict == Verdict(None)


def test_claude_last_result_wins() -> None:
    assert run_reader(ResultReader(), [claude_api_error(), claude_result()]).outcome is None
    assert run_reader(ResultReader(),
                      [claude_result(), claude_api_error()]).outcome == "api-error"


def test_claude_no_result_leaves_it_to_the_exit_code() -> None:
    assert run_reader(ResultReader(), [claude_init(), claude_assistant("x")], 1) == Verdict(None)


def test_claude_truncated_result_line_fails_to_parse() -> None:
    whole = claude_api_error(text="API Error: 500 " + "y" * (2 * MAX_LINE_BYTES))
    cut = whole[:MAX_LINE_BYTES]
    assert run_reader(ResultReader(), [claude_init(), cut], exit_code=0) == Verdict(None)


def test_claude_line_at_the_cut_length_is_taken_as_cut() -> None:
    line = claude_api_error()
    padded = line + b" " * (MAX_LINE_BYTES - len(line))
    assert len(padded) == MAX_LINE_BYTES
    assert run_reader(ResultReader(), [padded]) == Verdict(None)
    assert run_reader(ResultReader(), [padded[:-1]]).outcome == "api-error"


@pytest.mark.parametrize(("field", "value"), [
    ("is_error", "yes"), ("is_error", 1), ("is_error", "true"), ("is_error", None)])
def test_claude_is_error_must_be_true(field: str, value: Any) -> None:
    line = claude_result(**{field: value, "result": "API Error: 500"})
    assert run_reader(ResultReader(), [line]).outcome is None


@pytest.mark.parametrize("over", [
    {"total_cost_usd": "0.5"}, {"total_cost_usd": -1}, {"total_cost_usd": True},
    {"total_cost_usd": 1e400}, {"total_cost_usd": [1]}, {"num_turns": "3"},
    {"num_turns": 2.5}, {"num_turns": 10**30}, {"usage": "lots"},
    {"usage": {"input_tokens": -5, "output_tokens": None}}, {"usage": [1, 2]}])
def test_claude_wrong_typed_metrics_are_dropped(over: dict[str, Any]) -> None:
    verdict = run_reader(ResultReader(), [claude_result(**over)])
    assert verdict.outcome is None
    for name in ("total_cost_usd", "num_turns", "usage"):
        if name in over:
            attr = {"total_cost_usd": "cost_usd", "num_turns": "turns",
                    "usage": "input_tokens"}[name]
            assert getattr(verdict, attr) is None


def test_claude_nan_and_infinity_are_dropped() -> None:
    line = (b'{"type": "result", "is_error": false, "total_cost_usd": NaN, '
            b'"num_turns": Infinity, "usage": {"input_tokens": -Infinity}}')
    assert run_reader(ResultReader(), [line]) == Verdict(None)


def test_claude_whole_float_counts_are_accepted() -> None:
    verdict = run_reader(ResultReader(), [claude_result(num_turns=4.0)])
    assert verdict.turns == 4


def test_claude_older_cost_field() -> None:
    line = claude_result(total_cost_usd=None, cost_usd=0.25)
    assert run_reader(ResultReader(), [line]).cost_usd == 0.25


def test_amp_style_error_result() -> None:
    line = jl({"type": "result", "subtype": "error_during_execution", "is_error": True,
               "error": "Model provider returned an error", "session_id": "T-1",
               "duration_ms": 10, "num_turns": 1})
    verdict = run_reader(reader_for(PRESETS["amp"].argv()), [line], exit_code=1)
    assert verdict.outcome == "api-error"
    assert verdict.detail == "result is_error: Model provider returned an error"
    assert verdict.turns == 1


def test_cursor_style_success_result() -> None:
    lines = [jl({"type": "system", "subtype": "init", "session_id": "s", "model": "m"}),
             jl({"type": "tool_call", "subtype": "started", "call_id": "c-1",
                 "tool_call": {"readToolCall": {"args": {"path": "a"}}}}),
             jl({"type": "result", "subtype": "success", "is_error": False,
                 "duration_ms": 5, "result": "ok", "session_id": "s"})]
    verdict = run_reader(reader_for(PRESETS["cursor-agent"].argv()), lines)
    assert verdict == Verdict(None)


# -- Codex --------------------------------------------------------------------------------------

def codex_ok(turns: int = 1) -> list[bytes]:
    lines = [jl({"type": "thread.started", "thread_id": "t-1"})]
    for i in range(turns):
        lines += [jl({"type": "turn.started"}),
                  jl({"type": "item.completed", "item": {"id": f"item_{i}",
                                                         "type": "agent_message",
                                                         "text": "done"}}),
                  jl({"type": "turn.completed",
                      "usage": {"input_tokens": 100 * (i + 1), "cached_input_tokens": 50,
                                "output_tokens": 10 * (i + 1)}})]
    return lines


def codex_failed(message: str) -> list[bytes]:
    return [jl({"type": "thread.started", "thread_id": "t-1"}), jl({"type": "turn.started"}),
            jl({"type": "error", "message": message}),
            jl({"type": "turn.failed", "error": {"message": message}})]


def test_codex_success_tokens_and_turns() -> None:
    verdict = run_reader(CodexReader(), codex_ok(turns=2))
    assert verdict == Verdict(None, input_tokens=200, output_tokens=20, turns=2)


@pytest.mark.parametrize("exit_code", [0, 1])
def test_codex_turn_failed_is_an_api_error(exit_code: int) -> None:
    verdict = run_reader(CodexReader(), codex_failed("unexpected status 500"), exit_code)
    assert verdict.outcome == "api-error"
    assert verdict.detail == "turn.failed: unexpected status 500"
    assert verdict.turns == 1


def test_codex_lone_error_event_is_an_api_error() -> None:
    lines = [jl({"type": "thread.started", "thread_id": "t"}),
             jl({"type": "error", "message": "stream disconnected"})]
    assert run_reader(CodexReader(), lines, 1).detail == "error: stream disconnected"


def test_codex_error_then_completed_turn_recovered() -> None:
    lines = [jl({"type": "turn.started"}), jl({"type": "error", "message": "Reconnecting"}),
             jl({"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 2}})]
    assert run_reader(CodexReader(), lines).outcome is None


@pytest.mark.parametrize("message", [
    "You've hit your usage limit. Visit https://chatgpt.com/codex/settings/usage to purchase "
    "more credits or try again at 3:28 PM.",
    "exceeded retry limit, last status: 429 Too Many Requests, request id: 9c84b52c",
    "stream error: exceeded retry limit, last status: 429 Too Many Requests"])
def test_codex_rate_limits(message: str) -> None:
    verdict = run_reader(CodexReader(), codex_failed(message), 1)
    assert verdict.outcome == "rate-limited"
    assert verdict.detail.startswith("turn.failed: ")


def test_codex_api_rate_limit_gives_retry_after() -> None:
    message = ("Rate limit reached for o4-mini in organization org-x on tokens per min (TPM): "
               "Limit 200000, Used 164863, Requested 38980. Please try again in 1.152s.")
    verdict = run_reader(CodexReader(), codex_failed(message), 1)
    assert verdict.outcome == "rate-limited"
    assert verdict.retry_after == 1.152


def test_codex_rate_limit_words_later_in_a_message_do_not_count() -> None:
    verdict = run_reader(CodexReader(), codex_failed("tool said: You've hit your usage limit"))
    assert verdict.outcome == "api-error"


def test_codex_quoted_failure_in_an_item_does_not_count() -> None:
    fake = json.dumps({"type": "turn.failed", "error": {"message": "boom"}})
    lines = [jl({"type": "turn.started"}),
             jl({"type": "item.completed", "item": {"id": "i", "type": "command_execution",
                                                    "command": "cat log",
                                                    "aggregated_output": fake + "\n",
                                                    "exit_code": 0, "status": "completed"}}),
             jl({"type": "turn.completed", "usage": {"input_tokens": 1, "output_tokens": 1}})]
    assert run_reader(CodexReader(), lines).outcome is None


def test_codex_garbage_fields() -> None:
    lines = [jl({"type": "turn.completed", "usage": {"input_tokens": "9", "output_tokens": -1}}),
             jl({"type": "turn.failed", "error": "not an object"})]
    verdict = run_reader(CodexReader(), lines, 1)
    assert verdict.outcome == "api-error"
    assert verdict.detail == "turn.failed: turn failed"
    assert verdict.input_tokens is None and verdict.output_tokens is None


# Lines codex-cli 0.171.0 printed (``codex exec --json``) against the scripted Responses
# server of tests/agents/test_real_codex.py (ids shortened).
CODEX_171_OK = [
    b'{"type":"thread.started","thread_id":"01a238a8-3bba-7e73-98eb-8883a8498c0b"}',
    b'{"type":"turn.started"}',
    b'{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"Running."}}',
    b'{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":'
    b'"/bin/bash -lc \'echo fixed > done.txt\'","aggregated_output":"","exit_code":null,'
    b'"status":"in_progress"}}',
    b'{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":'
    b'"/bin/bash -lc \'echo fixed > done.txt\'","aggregated_output":"","exit_code":0,'
    b'"status":"completed"}}',
    b'{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"All done."}}',
    b'{"type":"turn.completed","usage":{"input_tokens":300,"cached_input_tokens":0,'
    b'"cache_write_input_tokens":0,"output_tokens":60,"reasoning_output_tokens":0}}',
]

#: A model missing from the CLI's catalog: an error *item*, and the run goes on.
CODEX_171_METADATA_WARNING = (
    b'{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata '
    b'for `gpt-test` not found. Defaulting to fallback metadata; this can degrade performance '
    b'and cause issues."}}')


def codex_171_failed(message: str) -> list[bytes]:
    """What 0.171.0 printed for a failed turn: ``error`` then ``turn.failed``, same message."""
    text = json.dumps(message, ensure_ascii=False)[1:-1]
    return [b'{"type":"thread.started","thread_id":"01a238a8-47b6-7550-b989-44b40c1c43c4"}',
            b'{"type":"turn.started"}',
            ('{"type":"error","message":"' + text + '"}').encode(),
            ('{"type":"turn.failed","error":{"message":"' + text + '"}}').encode()]


def test_codex_171_success() -> None:
    lines = [CODEX_171_OK[0], CODEX_171_METADATA_WARNING, *CODEX_171_OK[1:]]
    verdict = run_reader(CodexReader(), lines, 0)
    assert verdict == Verdict(None, input_tokens=300, output_tokens=60, turns=1)


@pytest.mark.parametrize(("message", "outcome", "retry_after"), [
    # HTTP 500: Codex shows its own words, not the body's message.
    ("We\u2019re currently experiencing high demand, which may cause temporary errors.",
     "api-error", None),
    # HTTP 429 (retry-after: 2 and "Please try again in 2s" in the body, both dropped).
    ("exceeded retry limit, last status: 429 Too Many Requests, request id: "
     "req_92a3b6a26bfe48489197de1ce63987db", "rate-limited", None),
    # A stream ended by response.failed with code rate_limit_exceeded.
    ("rate limit exceeded: Rate limit reached for gpt-5.5 in organization org-test on tokens "
     "per min (TPM): Limit 10, Used 10, Requested 5. Please try again in 1.5s. Visit "
     "https://platform.openai.com/account/rate-limits to learn more.", "rate-limited", 1.5),
    # HTTP 429 with error.type usage_limit_reached.
    ("You\u2019ve hit your usage limit. Try again later.", "rate-limited", None),
    # HTTP 429 with error.code insufficient_quota: billing, waiting does not help.
    ("Quota exceeded. Check your plan and billing details.", "api-error", None),
    # A stream ended by response.failed with another code.
    ("stream disconnected before completion: mock failure in stream", "api-error", None),
])
def test_codex_171_failures(message: str, outcome: str, retry_after: float | None) -> None:
    verdict = run_reader(CodexReader(), codex_171_failed(message), 1)
    assert verdict.outcome == outcome
    detail = f"turn.failed: {message}"
    assert verdict.detail == (detail if len(detail) <= 200 else detail[:199] + "\u2026")
    assert verdict.retry_after == retry_after
    assert verdict.turns == 1


# -- Gemini CLI -----------------------------------------------------------------------------

def gemini_lines(result: dict[str, Any]) -> list[bytes]:
    return [jl({"type": "init", "timestamp": "t", "session_id": "s", "model": "gemini"}),
            jl({"type": "message", "timestamp": "t", "role": "assistant", "content": "hi",
                "delta": True}),
            jl({"type": "result", "timestamp": "t", **result})]


def test_gemini_success_stats() -> None:
    lines = gemini_lines({"status": "success",
                          "stats": {"total_tokens": 100, "input_tokens": 70,
                                    "output_tokens": 30, "duration_ms": 5, "tool_calls": 1}})
    assert run_reader(GeminiReader(), lines) == Verdict(None, input_tokens=70, output_tokens=30)


def test_gemini_error_result_is_an_api_error() -> None:
    lines = gemini_lines({"status": "error",
                          "error": {"type": "Error", "message": "[API Error: 500 internal]"}})
    verdict = run_reader(GeminiReader(), lines, exit_code=1)
    assert verdict.outcome == "api-error"
    assert verdict.detail == "result error Error: [API Error: 500 internal]"


@pytest.mark.parametrize("error", [
    {"type": "Error", "message": '[API Error: {"error":{"code":429,"status":'
                                 '"RESOURCE_EXHAUSTED"}}]'},
    {"type": "TerminalQuotaError", "message": "You have exhausted your capacity"}])
def test_gemini_rate_limit(error: dict[str, Any]) -> None:
    verdict = run_reader(GeminiReader(), gemini_lines({"status": "error", "error": error}), 1)
    assert verdict.outcome == "rate-limited"


def test_gemini_error_events_alone_are_not_fatal() -> None:
    lines = [jl({"type": "error", "timestamp": "t", "severity": "warning",
                 "message": "Loop detected"}), *gemini_lines({"status": "success"})]
    assert run_reader(GeminiReader(), lines).outcome is None


def test_gemini_quoted_result_in_a_message_does_not_count() -> None:
    fake = json.dumps({"type": "result", "status": "error", "error": {"message": "429"}})
    lines = [jl({"type": "message", "role": "assistant", "content": fake})]
    assert run_reader(GeminiReader(), lines, 0) == Verdict(None)


# -- opencode -------------------------------------------------------------------------------

def opencode_step(cost: Any = 0.01, inp: Any = 10, out: Any = 5) -> bytes:
    return jl({"type": "step_finish", "timestamp": 1, "sessionID": "ses",
               "part": {"type": "step-finish", "cost": cost,
                        "tokens": {"input": inp, "output": out, "reasoning": 0,
                                   "cache": {"read": 0, "write": 0}}}})


def opencode_error(status: Any = 500, message: str = "Internal error") -> bytes:
    return jl({"type": "error", "timestamp": 1, "sessionID": "ses",
               "error": {"name": "APIError", "data": {"message": message,
                                                      "statusCode": status,
                                                      "isRetryable": False}}})


def test_opencode_sums_steps() -> None:
    lines = [jl({"type": "step_start", "part": {}}), opencode_step(),
             jl({"type": "text", "part": {"text": "x"}}), opencode_step(0.02, 20, 7)]
    verdict = run_reader(OpencodeReader(), lines)
    assert verdict.outcome is None
    assert verdict.cost_usd == pytest.approx(0.03)
    assert (verdict.input_tokens, verdict.output_tokens, verdict.turns) == (30, 12, 2)


def test_opencode_error_is_an_api_error() -> None:
    verdict = run_reader(OpencodeReader(), [opencode_step(), opencode_error()], exit_code=1)
    assert verdict.outcome == "api-error"
    assert verdict.detail == "APIError: Internal error"
    assert verdict.turns == 1


def test_opencode_429_is_rate_limited() -> None:
    verdict = run_reader(OpencodeReader(), [opencode_error(429, "Too many requests")], 1)
    assert verdict.outcome == "rate-limited"


def test_opencode_recovered_error() -> None:
    assert run_reader(OpencodeReader(), [opencode_error(), opencode_step()], 1).outcome is None


def test_opencode_garbage_steps() -> None:
    lines = [opencode_step("1", None, 10**40), opencode_step(1e308, 1, 1),
             opencode_step(1e308, 1, 1)]
    verdict = run_reader(OpencodeReader(), lines)
    assert verdict.cost_usd == 1e308  # the overflowing sum is not taken
    assert verdict.input_tokens == 2 and verdict.output_tokens == 2


# -- goose ----------------------------------------------------------------------------------

def goose_message(text: str) -> bytes:
    return jl({"type": "message", "message": {"role": "assistant", "created": 1,
                                              "content": [{"type": "text", "text": text}]}})


def goose_complete() -> bytes:
    return jl({"type": "complete", "total_tokens": 30, "input_tokens": 20, "output_tokens": 10,
               "cost_usd": 0.002})


def test_goose_complete_metrics() -> None:
    verdict = run_reader(GooseReader(), [goose_message("ok"), goose_complete()])
    assert verdict == Verdict(None, cost_usd=0.002, input_tokens=20, output_tokens=10)


def test_goose_error_is_an_api_error() -> None:
    lines = [jl({"type": "error", "error": "Server error: 500"}), goose_complete()]
    verdict = run_reader(GooseReader(), lines, exit_code=0)
    assert verdict.outcome == "api-error"
    assert verdict.detail == "error: Server error: 500"


@pytest.mark.parametrize("error", ["Rate limit exceeded: too many requests",
                                   "Request failed: Rate limit exceeded: slow down"])
def test_goose_rate_limit(error: str) -> None:
    verdict = run_reader(GooseReader(), [jl({"type": "error", "error": error})], 1)
    assert verdict.outcome == "rate-limited"


def test_goose_quoted_error_in_a_message_does_not_count() -> None:
    fake = json.dumps({"type": "error", "error": "Rate limit exceeded: x"})
    assert run_reader(GooseReader(), [goose_message(fake), goose_complete()]).outcome is None


# -- garbage and memory, for every reader ---------------------------------------------------------

READERS: list[Callable[[], OutputReader]] = [
    ResultReader, CodexReader, GeminiReader, OpencodeReader, GooseReader, PlainReader,
    AiderReader]

GARBAGE = [
    b"", b"   ", b"not json", b"{", b"}", b"{]", b"[]", b'[{"type":"result","is_error":true}]',
    b"null", b"42", b'"result"', b"\xff\xfe\x00garbage", b'{"type": "result"', b"{}",
    b'{"type": ["result"]}', b'{"type": null, "is_error": true}',
    b'{"type": "result", "is_error": true, "result": 5, "usage": {"input_tokens": 1e999}}',
    b'{"type": "turn.failed", "error": {"message": ["x"]}}',
    b'{"type": "result", "status": "error", "error": "flat"}',
    b'{"type": "error", "error": {"data": 3}}', b'{"type": "step_finish", "part": "x"}',
    b'{"type": "complete", "cost_usd": "free"}', b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    b'{"type": "result", "num_turns": ' + b"9" * 5000 + b"}",
    b'{"type": "result", "is_error": true}' + b"\r", b"\x00" * 100,
    b'{"type":"result","is_error":true,"result":"\\ud800"}',
]


@pytest.mark.parametrize("make", READERS)
def test_readers_never_raise_on_garbage(make: Callable[[], OutputReader]) -> None:
    reader = make()
    for line in GARBAGE:
        reader.feed_stdout(line)
    rng = random.Random(1234)
    for _ in range(300):
        reader.feed_stdout(bytes(rng.randrange(256) for _ in range(rng.randrange(60))))
        reader.feed_stdout(b"{" + bytes(rng.choice(b'"{}[]:,truefalsnul0123456789 ')
                                        for _ in range(rng.randrange(40))) + b"}")
    for exit_code in (0, 1, -9, None):
        verdict = reader.verdict(exit_code, ["Error: 429", "\x00", ""])
        assert verdict.outcome in (None, "api-error", "rate-limited")
        assert "\n" not in verdict.detail


@pytest.mark.parametrize("make", READERS)
def test_readers_hold_constant_memory(make: Callable[[], OutputReader]) -> None:
    line = claude_assistant("z" * 2000)
    reader = make()
    tracemalloc.start()
    try:
        for _ in range(3000):  # about 6 MB of output
            reader.feed_stdout(line)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 200_000


# -- CLI-shaped fakes: the argv is accepted and the prompt arrives on stdin (or in the file) --

FAKE = r'''
import hashlib, json, os, sys

name = os.path.basename(sys.argv[0])
args = sys.argv[1:]
scenario = os.environ.get("FAKE_SCENARIO", "ok")


def fail(message, code=2):
    sys.stderr.write(message + "\n")
    sys.exit(code)


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")


def parse(spec):
    """spec: option -> "flag" | "value" | "value=" (--opt=value only); gives (opts, positionals)."""
    opts, pos, i = {}, [], 0
    while i < len(args):
        arg = args[i]
        key, _, inline = arg.partition("=")
        if arg.startswith("-") and arg != "-":
            kind = spec.get(key)
            if kind is None:
                fail(f"error: unknown option '{key}'")
            if kind == "flag":
                opts[key] = True
            elif inline:
                opts[key] = inline
            elif kind == "value=":
                fail(f"error: option '{key}' needs =value")
            else:
                i += 1
                if i == len(args):
                    fail(f"error: option '{key}' argument missing")
                opts[key] = args[i]
        else:
            pos.append(arg)
        i += 1
    return opts, pos


for arg in args:
    if len(arg) > 300 or "PROMPT-MARKER" in arg:
        fail("the prompt travelled in argv", 3)


def got(data):
    sys.stderr.write(f"fake: got {len(data)} bytes sha={hashlib.sha256(data).hexdigest()}\n")
    if not data:
        fail("no prompt", 1)


def claude_like(result_extra):
    emit({"type": "system", "subtype": "init", "session_id": "s-1", "cwd": os.getcwd()})
    emit({"type": "assistant", "message": {"role": "assistant",
          "content": [{"type": "text", "text": json.dumps({"type": "result",
                                                          "is_error": True})}]}})
    emit({"type": "result", "subtype": "success", "session_id": "s-1", "num_turns": 2,
          "total_cost_usd": 0.5, "usage": {"input_tokens": 7, "output_tokens": 3},
          **result_extra})


if name == "claude":
    opts, pos = parse({"-p": "flag", "--print": "flag", "--output-format": "value",
                       "--verbose": "flag", "--dangerously-skip-permissions": "flag",
                       "--model": "value"})
    if not (opts.get("-p") or opts.get("--print")) or pos:
        fail("usage: claude -p [options] (prompt on stdin)")
    if opts.get("--output-format") == "stream-json" and not opts.get("--verbose"):
        fail("Error: When using --print, --output-format=stream-json requires --verbose", 1)
    got(sys.stdin.buffer.read())
    if scenario == "limit":
        claude_like({"is_error": True, "api_error_status": 429,
                     "api_error_type": "rate_limit_error", "result": "API Error: 429"})
        sys.exit(1)
    claude_like({"is_error": False, "result": "done"})
elif name == "codex":
    if not args or args[0] != "exec":
        fail("usage: codex exec [OPTIONS] [PROMPT]")
    args = args[1:]
    opts, pos = parse({"--json": "flag", "--experimental-json": "flag",
                       "--skip-git-repo-check": "flag", "--sandbox": "value",
                       "--dangerously-bypass-approvals-and-sandbox": "flag", "--yolo": "flag",
                       "--ephemeral": "flag", "-m": "value", "--model": "value"})
    if pos != ["-"]:
        fail("fake codex: the prompt must be '-' (stdin)")
    got(sys.stdin.buffer.read())
    emit({"type": "thread.started", "thread_id": "t-1"})
    emit({"type": "turn.started"})
    if scenario == "limit":
        message = "You've hit your usage limit. Try again at 3:28 PM."
        emit({"type": "error", "message": message})
        emit({"type": "turn.failed", "error": {"message": message}})
        sys.exit(1)
    emit({"type": "item.completed", "item": {"id": "item_0", "type": "agent_message",
                                             "text": "done"}})
    emit({"type": "turn.completed", "usage": {"input_tokens": 7, "cached_input_tokens": 0,
                                              "output_tokens": 3}})
elif name == "aider":
    opts, pos = parse({"--yes-always": "flag", "--no-pretty": "flag", "--message-file": "value",
                       "-f": "value", "--model": "value", "--no-auto-commits": "flag",
                       "--no-dirty-commits": "flag", "--no-check-update": "flag",
                       "--no-analytics": "flag"})
    path = opts.get("--message-file") or opts.get("-f")
    if not path or pos:
        fail("fake aider: --message-file FILE expected")
    with open(path, "rb") as fh:
        got(fh.read())
    if scenario == "limit":  # aider 0.86.2 exits 0 after giving up on a rate limit
        print("litellm.RateLimitError: AnthropicException - rate_limit_error")
        print("The API provider has rate limited you. Try again later or check your quotas.")
        sys.exit(0)
    print("Tokens: 7 sent, 3 received. Cost: $0.50 message, $0.50 session.")
    print("Applied edit to hello.py")
elif name == "gemini":
    opts, pos = parse({"--output-format": "value", "-o": "value", "--approval-mode": "value",
                       "--yolo": "flag", "-y": "flag", "-m": "value", "--model": "value",
                       "--skip-trust": "flag"})
    if pos:
        fail("fake gemini: positional prompts start interactive mode")
    if "--skip-trust" not in opts and os.environ.get("GEMINI_CLI_TRUST_WORKSPACE") != "true":
        # Gemini CLI 0.61.0 in a folder the user never trusted.
        fail("Gemini CLI is not running in a trusted directory. To proceed, either use "
             "`--skip-trust`, set the `GEMINI_CLI_TRUST_WORKSPACE=true` environment variable, "
             "or trust this directory in interactive mode.", 55)
    if opts.get("--approval-mode") not in (None, "default", "auto_edit", "yolo", "plan"):
        fail("Invalid values: Argument: approval-mode", 42)
    got(sys.stdin.buffer.read())
    emit({"type": "init", "timestamp": "t", "session_id": "s", "model": "gemini"})
    emit({"type": "message", "timestamp": "t", "role": "assistant", "content": "ok",
          "delta": True})
    if scenario == "limit":
        emit({"type": "result", "timestamp": "t", "status": "error",
              "error": {"type": "Error", "message": "[API Error: 429 RESOURCE_EXHAUSTED]"}})
        sys.exit(1)
    emit({"type": "result", "timestamp": "t", "status": "success",
          "stats": {"total_tokens": 10, "input_tokens": 7, "output_tokens": 3,
                    "duration_ms": 1, "tool_calls": 0}})
elif name == "opencode":
    if not args or args[0] != "run":
        fail("usage: opencode run [message..]")
    args = args[1:]
    opts, pos = parse({"--format": "value", "--auto": "flag", "-m": "value",
                       "--model": "value"})
    if pos or opts.get("--format") not in (None, "default", "json"):
        fail("fake opencode: bad run arguments")
    got(sys.stdin.buffer.read())
    emit({"type": "step_start", "timestamp": 1, "sessionID": "ses", "part": {}})
    if scenario == "limit":
        emit({"type": "error", "timestamp": 1, "sessionID": "ses",
              "error": {"name": "APIError", "data": {"message": "Too Many Requests",
                                                     "statusCode": 429}}})
        sys.exit(1)
    emit({"type": "step_finish", "timestamp": 1, "sessionID": "ses",
          "part": {"cost": 0.5, "tokens": {"input": 7, "output": 3}}})
elif name == "amp":
    opts, pos = parse({"--dangerously-allow-all": "flag", "--stream-json": "flag",
                       "--execute": "flag", "-x": "flag"})
    if pos or not (opts.get("--execute") or opts.get("-x")):
        fail("Error: User message must be provided through stdin or as argument")
    got(sys.stdin.buffer.read())
    if scenario == "limit":
        claude_like({"subtype": "error_during_execution", "is_error": True,
                     "error": "rate limited", "api_error_status": 429})
        sys.exit(1)
    claude_like({"is_error": False, "result": "done"})
elif name == "goose":
    if not args or args[0] != "run":
        fail("usage: goose run [OPTIONS]")
    args = args[1:]
    opts, pos = parse({"--output-format": "value", "--instructions": "value", "-i": "value",
                       "--no-session": "flag", "-q": "flag"})
    source = opts.get("--instructions") or opts.get("-i")
    if pos or source is None:
        fail("fake goose: --instructions expected")
    if source == "-":
        got(sys.stdin.buffer.read())
    else:
        with open(source, "rb") as fh:
            got(fh.read())
    emit({"type": "message", "message": {"role": "assistant", "content": []}})
    if scenario == "limit":
        emit({"type": "error", "error": "Rate limit exceeded: slow down"})
        emit({"type": "complete", "total_tokens": 0})
        sys.exit(1)
    emit({"type": "complete", "total_tokens": 10, "input_tokens": 7, "output_tokens": 3,
          "cost_usd": 0.5})
elif name == "cursor-agent":
    opts, pos = parse({"-p": "flag", "--print": "flag", "--output-format": "value",
                       "--force": "flag", "--yolo": "flag", "-f": "flag", "--trust": "flag"})
    if pos or not (opts.get("-p") or opts.get("--print")):
        fail("fake cursor-agent: -p and the prompt on stdin expected")
    got(sys.stdin.buffer.read())
    if scenario == "limit":
        claude_like({"is_error": True, "result": "rate limited", "api_error_status": 429})
        sys.exit(1)
    claude_like({"is_error": False, "result": "done"})
else:
    fail(f"unknown fake {name}")
'''


@pytest.fixture(scope="module")
def fake_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bin_dir = tmp_path_factory.mktemp("fakes") / "bin"
    bin_dir.mkdir()
    for name in PRESETS:
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{FAKE}", encoding="utf-8")
        path.chmod(0o755)
    return bin_dir


def run_fake(preset: Preset, bin_dir: Path, tmp_path: Path,
             scenario: str) -> tuple[subprocess.CompletedProcess[bytes], bytes]:
    prompt = ("# PROMPT-MARKER\nFix the failing criteria.\n" + "x" * 300_000 + "\n").encode()
    prompt_file = tmp_path / "prompt.md"
    prompt_file.write_bytes(prompt)
    argv = render_argv(preset.argv(), prompt_file)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "FAKE_SCENARIO": scenario}
    done = subprocess.run(argv, input=prompt, capture_output=True, env=env, cwd=tmp_path,
                          timeout=30, check=False)
    return done, prompt


@posix_only
@pytest.mark.parametrize("name", sorted(EXPECTED_ARGV))
def test_fake_cli_accepts_preset_argv_and_gets_the_prompt(name: str, fake_bin: Path,
                                                           tmp_path: Path) -> None:
    preset = PRESETS[name]
    done, prompt = run_fake(preset, fake_bin, tmp_path, "ok")
    assert done.returncode == 0, done.stderr.decode()
    sha = hashlib.sha256(prompt).hexdigest()
    assert f"fake: got {len(prompt)} bytes sha={sha}" in done.stderr.decode()
    reader = reader_for(render_argv(preset.argv(), tmp_path / "prompt.md"))
    verdict = run_reader(reader, done.stdout.splitlines(), done.returncode,
                         done.stderr.decode().splitlines()[-40:])
    assert verdict.outcome is None
    assert verdict.input_tokens == 7 and verdict.output_tokens == 3
    if name in ("claude", "amp", "cursor-agent", "opencode", "goose", "aider"):
        assert verdict.cost_usd == 0.5


@posix_only
@pytest.mark.parametrize("name", sorted(EXPECTED_ARGV))
def test_fake_cli_rate_limit_is_read_from_its_records(name: str, fake_bin: Path,
                                                      tmp_path: Path) -> None:
    preset = PRESETS[name]
    done, _ = run_fake(preset, fake_bin, tmp_path, "limit")
    assert done.returncode == (0 if name == "aider" else 1), done.stderr.decode()
    reader = reader_for(preset.argv())
    verdict = run_reader(reader, done.stdout.splitlines(), done.returncode,
                         done.stderr.decode().splitlines()[-40:])
    assert verdict.outcome == "rate-limited", verdict


@posix_only
def test_fake_claude_rejects_stream_json_without_verbose(fake_bin: Path, tmp_path: Path) -> None:
    argv = ["claude", "-p", "--output-format", "stream-json"]
    env = {**os.environ, "PATH": f"{fake_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(argv, input=b"hi", capture_output=True, env=env, check=False,
                          timeout=30)
    assert done.returncode == 1
    assert b"requires --verbose" in done.stderr


def test_detail_is_printable() -> None:
    line = claude_result(is_error=True, result="API Error:\x1b[31m 500\ud800\x00 boom\t\r\n")
    verdict = run_reader(ResultReader(), [line])
    assert verdict.detail == "result is_error: API Error: [31m 500 boom"
    assert verdict.detail.isprintable()


def test_gemini_tool_error_quoting_a_429_is_an_api_error_not_a_rate_limit() -> None:
    """A tool error may quote test output that mentions 429: only the CLI's own "[API Error"
    text is searched for a rate limit."""
    line = json.dumps({"type": "result", "status": "error", "error": {
        "type": "FatalToolExecutionError", "message": "Error executing tool run_shell_command: "
        "pytest failed: assert resp.status == 429 (Too Many Requests expected)"}}).encode()
    assert run_reader(GeminiReader(), [line], exit_code=54).outcome == "api-error"
    limited = json.dumps({"type": "result", "status": "error", "error": {
        "type": "Error", "message": '[API Error: {"error": {"code": 429, "status": '
        '"RESOURCE_EXHAUSTED"}}]'}}).encode()
    assert run_reader(GeminiReader(), [limited], exit_code=1).outcome == "rate-limited"
