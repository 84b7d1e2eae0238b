"""The aider reader on aider-chat 0.86.2's real console output.

The texts below are aider's stdout as captured from the real CLI (the preset's argv, offline
against the scripted model server of ``tests/agents/test_real_aider.py``): the request ids and
paths are the ones of those runs; the wrapping at 80 columns and the trailing spaces are
aider's console's.
"""

from __future__ import annotations

import pytest

from pytest_ralph.agents.readers import MAX_LINE_BYTES, AiderReader, Verdict


def lines(*texts: str) -> str:
    """``texts`` as console lines (each ends with a newline; trailing spaces are aider's)."""
    return "".join(text + "\n" for text in texts)


BANNER = """\

Added .aider* to .gitignore
Git repository created in /tmp/aider-scratch/tmpt5srxqyx/proj
Update git name with: git config user.name "Your Name"
Update git email with: git config user.email "you@example.com"
Aider v0.86.2
Model: anthropic/claude-test with whole edit format
Git repo: .git with 0 files
Repo-map: using 4096 tokens, auto refresh


https://aider.chat/HISTORY.html#release-notes

"""

SUCCESS = BANNER + """\
I will change the greeting.

hello.py
```
print('bye')
```

Tokens: 598 sent, 17 received. Cost: $0.0020 message, $0.0020 session.

hello.py
Applied edit to hello.py
"""

ERROR_500 = lines(
    'litellm.InternalServerError: AnthropicException - b\'{"type": "error", "error": ',
    '{"type": "api_error", "message": "mock failure"}, "request_id": ',
    '"req_5c11bba40176471f93a86de1"}\'. Handle with `litellm.InternalServerError`.',
    "The API provider's servers are down or overloaded.",
)

ERROR_429 = lines(
    'litellm.RateLimitError: AnthropicException - b\'{"type": "error", "error": ',
    '{"type": "rate_limit_error", "message": "Please try again in 2s"}, "request_id":',
    '"req_99f33395af06489eb5438512"}\'',
    'The API provider has rate limited you. Try again later or check your quotas.',
)

ERROR_401 = lines(
    'litellm.AuthenticationError: AnthropicException - b\'{"type": "error", "error": ',
    '{"type": "authentication_error", "message": "mock failure"}, "request_id": ',
    '"req_555f31523ecd48e7849a8675"}\'',
    'The API provider is not able to authenticate you. Check your API key.',
    '',
)


def retried(error: str, delays: tuple[str, ...] = ("0.2", "0.5", "1.0")) -> str:
    """``error`` once per attempt with aider's back-off lines between, as aider prints a
    request it retried and gave up on."""
    return "".join(error + f"Retrying in {d} seconds...\n" for d in delays) + error + "\n"


def read(text: str, exit_code: int | None = 0) -> Verdict:
    reader = AiderReader()
    for line in text.encode().split(b"\n"):
        reader.feed_stdout(line)
    return reader.verdict(exit_code, [])


def test_success_gives_no_verdict_and_the_usage() -> None:
    verdict = read(SUCCESS)
    assert verdict == Verdict(None, cost_usd=0.002, input_tokens=598, output_tokens=17,
                              turns=1)


def test_http_500_after_the_retries_is_an_api_error() -> None:
    verdict = read(BANNER + retried(ERROR_500))
    assert verdict.outcome == "api-error"
    # The wrapped lines joined into one message (cut to 200 characters).
    whole = ("litellm.InternalServerError: AnthropicException - b'{\"type\": \"error\", "
             "\"error\": {\"type\": \"api_error\", \"message\": \"mock failure\"}, "
             "\"request_id\": \"req_5c11bba40176471f93a86de1\"}'. Handle with "
             "`litellm.InternalServerError`.")
    assert verdict.detail == whole[:199] + "…"
    assert verdict.retry_after is None and verdict.turns is None


def test_http_429_is_a_rate_limit_with_the_apis_retry_time() -> None:
    verdict = read(BANNER + retried(ERROR_429, ("0.2", "0.5", "1.0", "2.0", "4.0", "8.0",
                                                "16.0", "32.0")))
    assert verdict.outcome == "rate-limited"
    assert verdict.detail.startswith("litellm.RateLimitError: AnthropicException - b'{")
    assert '"message": "Please try again in 2s"}, "request_id": "req_99f3' in verdict.detail
    # The API's stated time, not aider's last back-off (32 s, already waited out).
    assert verdict.retry_after == 2.0


def test_a_rate_limit_without_a_stated_time_has_none() -> None:
    verdict = read(ERROR_429.replace("Please try again in 2s", "slow down"))
    assert (verdict.outcome, verdict.retry_after) == ("rate-limited", None)


def test_authentication_is_an_api_error_said_as_such() -> None:
    verdict = read(BANNER + ERROR_401)
    assert verdict.outcome == "api-error"
    assert verdict.detail.startswith("authentication failed (check the API key): "
                                     "litellm.AuthenticationError: AnthropicException - ")


def test_a_retry_that_recovered_is_no_error() -> None:
    recovered = (BANNER + ERROR_500 + "Retrying in 0.2 seconds...\n" + SUCCESS[len(BANNER):])
    verdict = read(recovered)
    assert verdict.outcome is None and verdict.turns == 1


def test_an_error_after_a_response_counts() -> None:
    """The lint fix-up (a second request) failed after a good first response."""
    verdict = read(SUCCESS + "\n# Fix any errors below, if possible.\n\n" + retried(ERROR_500))
    assert verdict.outcome == "api-error" and verdict.turns == 1
    assert verdict.cost_usd == 0.002


def test_the_model_quoting_an_error_line_is_no_error() -> None:
    """A model answer that quotes aider's error line is followed by its usage line."""
    quoting = BANNER + "The log says:\n\n" + ERROR_429 + "\nTokens: 1.2k sent, 12k received.\n"
    verdict = read(quoting)
    assert verdict.outcome is None
    assert (verdict.input_tokens, verdict.output_tokens, verdict.turns) == (1200, 12000, 1)


def test_an_indented_or_embedded_error_line_is_not_read() -> None:
    assert read("    litellm.RateLimitError: quoted in a traceback\n").outcome is None
    assert read("see litellm.RateLimitError: in the docs\n").outcome is None


@pytest.mark.parametrize("line", [
    "Tokens: 2.5k sent, 1.2k cache write, 3.0k cache hit, 500 received.",
    "Tokens: 2.5k sent, 3.0k cache hit, 500 received. Cost: $0.01 message, $0.03 session.",
])
def test_usage_with_the_prompt_cache(line: str) -> None:
    verdict = read(line + "\nCost: $0.01 message, $0.04 session.\n")
    assert (verdict.input_tokens, verdict.output_tokens, verdict.turns) == (2500, 500, 1)
    assert verdict.cost_usd == 0.04


def test_colour_codes_are_stripped() -> None:
    """With ``--pretty`` (flags replaced) aider colours its errors."""
    coloured = "\x1b[31m" + ERROR_500.replace("\n", "\x1b[0m\n", 1)
    assert read(coloured).outcome == "api-error"


def test_an_error_name_alone_and_other_names() -> None:
    assert read("litellm.APIConnectionError:\n").detail == "litellm.APIConnectionError"
    assert read("litellm.Timeout: Connection timed out after 600 seconds\n").outcome == \
        "api-error"
    assert read("litellm.RouterRateLimitError: no deployments\n").outcome == "rate-limited"


def test_a_long_message_is_bounded() -> None:
    reader = AiderReader()
    reader.feed_stdout(b"litellm.InternalServerError: start")
    for _ in range(10_000):
        reader.feed_stdout(b"x" * 100)
    verdict = reader.verdict(0, [])
    assert verdict.outcome == "api-error" and len(verdict.detail) <= 200
    assert len(reader._message) <= 2000


def test_garbage_never_raises() -> None:
    reader = AiderReader()
    for line in (b"\xff\xfe", b"\x00" * 10, b"litellm.", b"Tokens: 99999999999 sent, 1 received.",
                 b"x" * MAX_LINE_BYTES, b"litellm.RateLimitError: \xff"):
        reader.feed_stdout(line)
    assert reader.verdict(None, []).outcome == "rate-limited"
