"""OpencodeReader on the events of the real opencode 1.18.33 (npm ``opencode-ai``).

The ``*_LINE`` constants are stdout lines the real CLI printed in
``tests/agents/test_real_opencode.py`` (``opencode run --format json --auto`` against the
scripted :class:`~tests.support.model_server.ModelServer`), copied verbatim: after its own five
retries, 1.18.33 prints one ``error`` event whose ``data`` carries the status, the message of
the response body and the response's headers (lower-cased). The variants built from them
(:func:`with_headers`) change only ``data.responseHeaders`` or ``data.message``.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from email.utils import format_datetime
from typing import Any

import pytest

from pytest_ralph.agents.readers import OpencodeReader, Verdict

#: HTTP 500 (``ApiError(500, headers={"retry-after-ms": "10"})``), exit status 1.
HTTP_500_LINE = (
    b'{"type":"error","timestamp":1796248742677,"sessionID":"ses_dc73b5bd3ffevDr4wCn0o'
    b'yZFh7","error":{"name":"APIError","data":{"message":"mock failure","statusCode":'
    b'500,"isRetryable":true,"responseHeaders":{"content-length":"122","content-type":'
    b'"application/json","date":"Wed, 02 Dec 2026 21:59:02 GMT","request-id":"req_0000'
    b'00000000000000000007","retry-after-ms":"10","server":"scripted-model/1 Python/3.'
    b'11.7"},"responseBody":"{\\"type\\": \\"error\\", \\"error\\": {\\"type\\": \\"api_error\\"'
    b', \\"message\\": \\"mock failure\\"}, \\"request_id\\": \\"req_40f0ccd64f20434f926edc02'
    b'\\"}","metadata":{"url":"http://127.0.0.1:43131/v1/messages"}}}}')

#: HTTP 429 whose message states the wait, exit status 1.
HTTP_429_TEXT_LINE = (
    b'{"type":"error","timestamp":1796248411042,"sessionID":"ses_dc7406d56ffeLhjzc1557'
    b'XWbgw","error":{"name":"APIError","data":{"message":"Rate limit reached. Please '
    b'try again in 1.5s.","statusCode":429,"isRetryable":true,"responseHeaders":{"cont'
    b'ent-length":"162","content-type":"application/json","date":"Wed, 02 Dec 2026 21:'
    b'53:30 GMT","request-id":"req_000000000000000000000007","retry-after-ms":"10","se'
    b'rver":"scripted-model/1 Python/3.11.7"},"responseBody":"{\\"type\\": \\"error\\", \\"'
    b'error\\": {\\"type\\": \\"rate_limit_error\\", \\"message\\": \\"Rate limit reached. Ple'
    b'ase try again in 1.5s.\\"}, \\"request_id\\": \\"req_a8cb6c81a8f2471c828fcaaa\\"}","m'
    b'etadata":{"url":"http://127.0.0.1:39747/v1/messages"}}}}')

#: HTTP 429 whose only wait is the ``retry-after-ms: 250`` header, exit status 1.
HTTP_429_HEADER_LINE = (
    b'{"type":"error","timestamp":1796248748150,"sessionID":"ses_dc73b4e82ffeCLxNyRMX0'
    b'eLMya","error":{"name":"APIError","data":{"message":"Too many requests","statusC'
    b'ode":429,"isRetryable":true,"responseHeaders":{"content-length":"134","content-t'
    b'ype":"application/json","date":"Wed, 02 Dec 2026 21:59:08 GMT","request-id":"req'
    b'_000000000000000000000014","retry-after-ms":"250","server":"scripted-model/1 Pyt'
    b'hon/3.11.7"},"responseBody":"{\\"type\\": \\"error\\", \\"error\\": {\\"type\\": \\"rate_'
    b'limit_error\\", \\"message\\": \\"Too many requests\\"}, \\"request_id\\": \\"req_8aac9a'
    b'1f93b544c4b01318ee\\"}","metadata":{"url":"http://127.0.0.1:33193/v1/messages"}}}'
    b'}')

#: A ``step_finish`` of the same CLI (a successful step; cost 0 for a model without prices).
STEP_FINISH_LINE = (
    b'{"type":"step_finish","timestamp":1796248598127,"sessionID":"ses_dc73d8e96ffe0rf'
    b'dP5qZFv5fP8","part":{"id":"prt_238c2765f001zaXunfPoqDCvAi","reason":"tool-calls"'
    b',"messageID":"msg_238c273e4001kdY5SzdTIRJL75","sessionID":"ses_dc73d8e96ffe0rfdP'
    b'5qZFv5fP8","type":"step-finish","tokens":{"total":120,"input":100,"output":20,"r'
    b'easoning":0,"cache":{"write":0,"read":0}},"cost":0}}')


def read(*lines: bytes, exit_code: int | None = 1) -> Verdict:
    reader = OpencodeReader()
    for line in lines:
        reader.feed_stdout(line)
    return reader.verdict(exit_code, [])


def with_data(line: bytes, **data: Any) -> bytes:
    """``line`` (an ``error`` event) with ``error.data`` keys replaced (None: removed)."""
    event = json.loads(line)
    for key, value in data.items():
        if value is None:
            event["error"]["data"].pop(key, None)
        else:
            event["error"]["data"][key] = value
    return json.dumps(event, separators=(",", ":")).encode()


def with_headers(line: bytes, **headers: object) -> bytes:
    """``line`` with its ``retry-after*`` headers replaced by ``headers`` (``_`` -> ``-``)."""
    event = json.loads(line)
    kept = {k: v for k, v in event["error"]["data"]["responseHeaders"].items()
            if not k.startswith("retry-after")}
    kept.update({k.replace("_", "-"): v for k, v in headers.items()})
    return with_data(line, responseHeaders=kept)


def test_real_500_is_an_api_error_without_a_wait() -> None:
    verdict = read(HTTP_500_LINE)
    assert verdict == Verdict("api-error", "APIError: mock failure")


def test_real_429_reads_the_wait_in_its_message() -> None:
    # The message's "Please try again in 1.5s" comes first; the header (10 ms, what the test
    # server asks opencode's own retries to wait) is not read then.
    verdict = read(HTTP_429_TEXT_LINE)
    assert verdict == Verdict("rate-limited",
                              "APIError: Rate limit reached. Please try again in 1.5s.",
                              retry_after=1.5)


def test_real_429_reads_the_retry_after_ms_header() -> None:
    verdict = read(HTTP_429_HEADER_LINE)
    assert verdict == Verdict("rate-limited", "APIError: Too many requests", retry_after=0.25)


@pytest.mark.parametrize(("headers", "retry_after"), [
    ({"retry_after": "3"}, 3.0),
    ({"retry_after": "0.5"}, 0.5),
    ({"retry_after": "7", "retry_after_ms": "1200"}, 1.2),  # milliseconds win
    ({"Retry-After-Ms": "40"}, 0.04),  # names in any case
    ({"retry_after": " 2 "}, 2.0),
])
def test_429_retry_after_headers(headers: dict[str, str], retry_after: float) -> None:
    verdict = read(with_headers(HTTP_429_HEADER_LINE, **headers))
    assert (verdict.outcome, verdict.retry_after, verdict.reset_at) == (
        "rate-limited", retry_after, None)


def test_429_retry_after_http_date_is_a_reset_time() -> None:
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    line = with_headers(HTTP_429_HEADER_LINE, retry_after=format_datetime(when, usegmt=True))
    verdict = read(line)
    assert (verdict.outcome, verdict.retry_after, verdict.reset_at) == (
        "rate-limited", None, when.timestamp())


@pytest.mark.parametrize("headers", [
    {}, {"retry_after": "-5"}, {"retry_after": "soon"}, {"retry_after_ms": "1e9"},
    {"retry_after": "9" * 40}, {"retry_after": "Mon, 99 Foo 2030 99:99:99 GMT"},
    {"retry_after": "Thu, 01 Jan 1970 00:00:00 GMT"}, {"retry_after_ms": 250},
    {"retry_after": "x" * 500}, {"retry_after": ""},
])
def test_429_garbage_headers_give_no_wait(headers: dict[str, object]) -> None:
    verdict = read(with_headers(HTTP_429_HEADER_LINE, **headers))
    assert (verdict.outcome, verdict.retry_after, verdict.reset_at) == (
        "rate-limited", None, None)


@pytest.mark.parametrize("headers", [None, [], "retry-after: 3", {"retry-after": None}])
def test_429_headers_not_an_object(headers: object) -> None:
    verdict = read(with_data(HTTP_429_HEADER_LINE, responseHeaders=headers))  # None: none
    assert (verdict.outcome, verdict.retry_after, verdict.reset_at) == (
        "rate-limited", None, None)


def test_500_with_a_retry_header_states_no_wait() -> None:
    # Only a rate limit carries a wait: an API error ends the loop's patience, not a pause.
    verdict = read(with_headers(HTTP_500_LINE, retry_after="30"))
    assert (verdict.outcome, verdict.retry_after) == ("api-error", None)


def test_the_last_error_decides_the_wait() -> None:
    assert read(HTTP_429_TEXT_LINE, HTTP_429_HEADER_LINE).retry_after == 0.25
    assert read(HTTP_429_HEADER_LINE, HTTP_500_LINE) == Verdict("api-error",
                                                                "APIError: mock failure")


def test_recovered_rate_limit_is_not_an_error() -> None:
    verdict = read(HTTP_429_TEXT_LINE, STEP_FINISH_LINE, exit_code=0)
    assert verdict == Verdict(None, cost_usd=0.0, input_tokens=100, output_tokens=20, turns=1)


def test_step_then_rate_limit_keeps_the_metrics() -> None:
    verdict = read(STEP_FINISH_LINE, HTTP_429_HEADER_LINE)
    assert verdict == Verdict("rate-limited", "APIError: Too many requests", retry_after=0.25,
                              cost_usd=0.0, input_tokens=100, output_tokens=20, turns=1)
