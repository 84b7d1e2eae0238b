"""GeminiReader on the lines Gemini CLI 0.61.0 really printed.

Each ``result`` line below was captured from the real CLI (``--output-format stream-json``)
run offline against :class:`tests.support.gemini_server.GeminiServer`, with the exit status
it exited with; only the timestamps were shortened. The real-CLI runs themselves are in
``tests/agents/test_real_gemini.py``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from pytest_ralph.agents.readers import GeminiReader, Verdict

STATS = ('"stats":{"total_tokens":120,"input_tokens":100,"output_tokens":20,"cached":0,'
         '"input":100,"duration_ms":0,"tool_calls":0}')

#: HTTP 500 (exit status 244).
HTTP_500 = ('{"type":"result","timestamp":"t","status":"error","error":{"type":"unknown",'
            '"message":"[API Error: {\\"error\\":{\\"code\\":500,\\"message\\":\\"An internal '
            'error has occurred. Please retry or report in https://developers.generativeai.'
            'google/guide/troubleshooting\\",\\"status\\":\\"INTERNAL\\",\\"details\\":[]}}]"},'
            + STATS + '}')

#: HTTP 429 with the API's quota message, a per-minute QuotaFailure and RetryInfo 2s
#: (exit status 173).
HTTP_429 = ('{"type":"result","timestamp":"t","status":"error","error":{"type":"unknown",'
            '"message":"[API Error: You exceeded your current quota, please check your plan '
            'and billing details. For more information on this error, head to: '
            'https://ai.google.dev/gemini-api/docs/rate-limits.\\n* Quota exceeded for metric: '
            'generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 10, '
            'model: gemini-2.5-flash\\nPlease retry in 2s.\\nSuggested retry after 2s.]\\n'
            'Please wait and try again later. To increase your limits, request a quota '
            'increase through AI Studio, or switch to another /auth method"},' + STATS + '}')

#: HTTP 429 with the same quota message but no RetryInfo: the CLI guesses 60 s for a
#: per-minute quota, while the API said 2 s (exit status 173).
HTTP_429_NO_RETRY_INFO = HTTP_429.replace("Suggested retry after 2s.",
                                          "Suggested retry after 60s.")

#: HTTP 429 with the API's bare message and no details (exit status 173).
HTTP_429_BARE = ('{"type":"result","timestamp":"t","status":"error","error":{"type":"unknown",'
                 '"message":"[API Error: Resource has been exhausted (e.g. check quota).]\\n'
                 'Please wait and try again later. To increase your limits, request a quota '
                 'increase through AI Studio, or switch to another /auth method"},' + STATS +
                 '}')

#: HTTP 429 whose RetryInfo (7s) is the only retry time (exit status 173).
HTTP_429_RETRY_INFO = ('{"type":"result","timestamp":"t","status":"error","error":{"type":'
                       '"unknown","message":"[API Error: You exceeded your current quota, '
                       'please check your plan and billing details.\\nSuggested retry after '
                       '7s.]\\nPlease wait and try again later. To increase your limits, '
                       'request a quota increase through AI Studio, or switch to another '
                       '/auth method"},' + STATS + '}')

#: A success (exit status 0).
SUCCESS = ('{"type":"result","timestamp":"t","status":"success","stats":{"total_tokens":480,'
           '"input_tokens":400,"output_tokens":80,"cached":0,"input":400,"duration_ms":150,'
           '"tool_calls":2}}')

INIT = ('{"type":"init","timestamp":"t","session_id":"1ce03058-5a3a-4411-b46b-312f22ad5e0a",'
        '"model":"auto"}')

#: stderr of the run in a folder it was not told to trust (exit status 55, no stdout).
UNTRUSTED = ["Gemini CLI is not running in a trusted directory. To proceed, either use "
             "`--skip-trust`, set the `GEMINI_CLI_TRUST_WORKSPACE=true` environment variable, "
             "or trust this directory in interactive mode. For more details, see "
             "https://geminicli.com/docs/cli/trusted-folders/#headless-and-automated-"
             "environments"]


def read(lines: Sequence[str], exit_code: int | None,
         stderr: Sequence[str] = ()) -> Verdict:
    reader = GeminiReader()
    for line in lines:
        reader.feed_stdout(line.encode())
    return reader.verdict(exit_code, list(stderr))


def test_the_captured_lines_are_json() -> None:
    for line in (HTTP_500, HTTP_429, HTTP_429_BARE, HTTP_429_RETRY_INFO, SUCCESS, INIT):
        assert isinstance(json.loads(line), dict)


def test_success() -> None:
    assert read([INIT, SUCCESS], 0) == Verdict(None, input_tokens=400, output_tokens=80)


def test_http_500_is_an_api_error() -> None:
    verdict = read([INIT, HTTP_500], 244)
    assert verdict.outcome == "api-error"
    assert verdict.detail.startswith(
        'result error unknown: [API Error: {"error":{"code":500,"message":"An internal error')
    assert verdict.retry_after is None
    assert (verdict.input_tokens, verdict.output_tokens) == (100, 20)


def test_http_429_is_a_rate_limit_with_the_apis_retry_time() -> None:
    verdict = read([INIT, HTTP_429], 173)
    assert verdict.outcome == "rate-limited"
    assert verdict.detail.startswith(
        "result error unknown: [API Error: You exceeded your current quota")
    assert verdict.retry_after == 2.0


def test_the_apis_retry_time_wins_over_the_clis_guess() -> None:
    assert read([INIT, HTTP_429_NO_RETRY_INFO], 173).retry_after == 2.0


def test_retry_info_alone_gives_the_retry_time() -> None:
    verdict = read([INIT, HTTP_429_RETRY_INFO], 173)
    assert (verdict.outcome, verdict.retry_after) == ("rate-limited", 7.0)


def test_bare_resource_exhausted_is_a_rate_limit_without_a_time() -> None:
    verdict = read([INIT, HTTP_429_BARE], 173)
    assert (verdict.outcome, verdict.retry_after) == ("rate-limited", None)
    # On one line, cut to the detail's 200 characters.
    assert verdict.detail.startswith("result error unknown: [API Error: Resource has been "
                                     "exhausted (e.g. check quota).] Please wait and try "
                                     "again later.")
    assert len(verdict.detail) == 200 and verdict.detail.endswith("\u2026")


@pytest.mark.parametrize("line", [HTTP_429, HTTP_429_BARE, HTTP_429_RETRY_INFO])
def test_the_quota_words_alone_say_rate_limit(line: str) -> None:
    """Even with an exit status that does not say 429, the words do."""
    assert read([line], 1).outcome == "rate-limited"


def test_exit_status_173_makes_a_wordless_api_error_a_rate_limit() -> None:
    line = json.dumps({"type": "result", "status": "error", "error": {
        "type": "unknown", "message": "[API Error: something went wrong]"}})
    assert read([line], 173).outcome == "rate-limited"
    assert read([line], 244).outcome == "api-error"
    assert read([line], 1).outcome == "api-error"


def test_exit_status_173_does_not_make_a_tool_error_a_rate_limit() -> None:
    line = json.dumps({"type": "result", "status": "error", "error": {
        "type": "FatalToolExecutionError",
        "message": "Error executing tool run_shell_command: quota exceeded in test output"}})
    assert read([line], 173).outcome == "api-error"


@pytest.mark.parametrize(("exit_code", "outcome", "detail"), [
    (173, "rate-limited", "exit status 173 (HTTP 429 mod 256)"),
    (244, "api-error", "exit status 244 (HTTP 500 mod 256)"),
    (247, "api-error", "exit status 247 (HTTP 503 mod 256)"),
])
def test_without_a_result_the_exit_status_maps_the_http_status(
        exit_code: int, outcome: str, detail: str) -> None:
    assert read([INIT], exit_code) == Verdict(outcome, detail)


@pytest.mark.parametrize("exit_code", [0, 1, 41, 52, 55, 130, None])
def test_other_exit_statuses_without_a_result_are_left_to_the_exit_code(
        exit_code: int | None) -> None:
    assert read([], exit_code, UNTRUSTED if exit_code == 55 else ()) == Verdict(None)


@pytest.mark.parametrize(("message", "seconds"), [
    ("[API Error: quota\nPlease retry in 1.5s.\nSuggested retry after 2s.]", 1.5),
    ("[API Error: quota\nPlease retry in 500ms.]", 0.5),
    ("[API Error: quota\nSuggested retry after 30.5s.]", 30.5),
    ("[API Error: RESOURCE_EXHAUSTED, retry after 12s]", 12.0),
    ("[API Error: 429 Too Many Requests. Please try again in 4s]", 4.0),
    ("[API Error: 429 Too Many Requests]", None),
])
def test_retry_time_forms(message: str, seconds: float | None) -> None:
    line = json.dumps({"type": "result", "status": "error",
                       "error": {"type": "unknown", "message": message}})
    verdict = read([line], 173)
    assert (verdict.outcome, verdict.retry_after) == ("rate-limited", seconds)
