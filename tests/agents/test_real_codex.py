"""The real Codex CLI (pinned in pytest_ralph/agents/proven.py) against a scripted model.

The CLI runs offline: a ``CODEX_HOME`` of the test's own (:mod:`tests.support.codex_cli`)
defines a custom model provider whose ``base_url`` is a loopback
:class:`~tests.support.responses_server.ResponsesServer` speaking the OpenAI Responses API,
so the CLI executes real tool calls (``exec_command``, ``apply_patch``) in a temporary project
and reports real results and API errors, with retries off so that an error ends a run at
once. The first part runs the ``codex`` preset's exact argv through the loop's own agent
runner (:func:`pytest_ralph.agents.run.run_agent`, the preset's reader classifying); the
second runs the whole loop (``pytest --ralph --ralph-agent codex``) in a pytester subprocess:
HTTP 500 ends it with exit 7, HTTP 429 pauses it without spending the iteration, and a run
confined by bubblewrap completes with the project edited and nothing written outside it but
Codex's own state folder.
"""

from __future__ import annotations

import os
import pwd
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.agents.activity import Activity
from pytest_ralph.agents.presets import PRESETS, reader_for
from pytest_ralph.agents.proven import PROVEN
from pytest_ralph.agents.readers import CodexReader
from pytest_ralph.agents.run import AgentRun, run_agent
from pytest_ralph.sandbox.bwrap import probe
from tests.support.codex_cli import KEY_ENV, MODEL, offline_env, write_codex_home
from tests.support.loop import report_text
from tests.support.prd import story
from tests.support.real_cli import (
    CliInstallError,
    bin_dir,
    cache_dir,
    cli_executable,
    installed_executable,
)
from tests.support.responses_server import (
    ApiError,
    CustomToolCall,
    FunctionCall,
    ResponsesServer,
    StreamFailure,
    Text,
)

# Skip only when cli_executable() would return None, and never under CI (the fixture
# `codex_bin` then fails); the install itself happens in that session fixture.
if installed_executable("codex") is None and shutil.which("npm") is None \
        and not os.environ.get("CI"):
    pytest.skip("the Codex CLI is not installed and npm is not on PATH to install it",
                allow_module_level=True)

#: Seconds one CLI run may take (a normal one takes about 0.5 s, an API error as long).
CLI_TIMEOUT = 30.0

#: Seconds one whole loop run (pytester subprocess) may take.
LOOP_TIMEOUT = 90.0

PROMPT = "Fix the project, please."

#: The install cache and the folder holding only the pinned ``codex``, found at import time:
#: ``pytester`` moves ``HOME`` (which the default cache folder is under) during a test.
CACHE = cache_dir()
BIN_DIR = bin_dir("codex")

#: Where the confined loop's home folders go: outside /tmp (which the sandbox makes private)
#: and outside the project, as a user's home is.
TEST_HOMES = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "pytest-ralph-test-homes"


@pytest.fixture(scope="session")
def codex_bin() -> Path:
    """The pinned real Codex CLI, installed into the cache on first use.

    Fails (with npm's output) when npm is present but the install fails, and under CI also
    when npm is missing; elsewhere a machine without npm skips with that reason.
    """
    try:
        exe = cli_executable("codex")
    except CliInstallError as exc:
        pytest.fail(f"installing the pinned Codex CLI failed:\n{exc}", pytrace=False)
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("the Codex CLI is not installed and npm is not on PATH: CI must run "
                        "the real-CLI tests (install Node.js and npm)", pytrace=False)
        pytest.skip("the Codex CLI is not installed and npm is not on PATH")
    return exe


@pytest.fixture
def server() -> Iterator[ResponsesServer]:
    """A running :class:`ResponsesServer` with an empty script (``server.add(...)``)."""
    with ResponsesServer() as running:
        yield running


@pytest.fixture
def codex_env(codex_bin: Path, server: ResponsesServer, tmp_path_factory: pytest.TempPathFactory,
              monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The variables that run the real CLI offline against ``server``: a fresh ``CODEX_HOME``
    and ``HOME`` outside the project, ``PATH`` starting with the folder holding only the
    pinned ``codex`` (set in this process too: the runner finds the executable on it)."""
    codex_home = write_codex_home(tmp_path_factory.mktemp("codex-home"), server.url)
    env = offline_env(codex_home, tmp_path_factory.mktemp("home"), BIN_DIR)
    assert shutil.which("codex", path=env["PATH"]) == str(BIN_DIR / "codex")
    monkeypatch.setenv("PATH", env["PATH"])
    return env


def run_preset(env: dict[str, str], project: Path, runs: Path,
               activity: Activity | None = None) -> AgentRun:
    """The ``codex`` preset's exact argv, prompt on stdin, run by the loop's agent runner
    with the reader :func:`reader_for` gives that argv (unconfined: the loop's sandbox is
    exercised below); ``activity`` (the live view's model) is fed each stdout line."""
    argv = PRESETS["codex"].argv()
    reader = reader_for(argv)
    assert isinstance(reader, CodexReader)
    runs.mkdir(parents=True, exist_ok=True)
    return run_agent(argv, prompt=PROMPT, prompt_file=runs / "prompt.md", cwd=project,
                     timeout=CLI_TIMEOUT, log_path=runs / "agent.log", env=env,
                     reader=reader, on_stdout_line=activity.feed if activity else None)


def log_text(run: AgentRun) -> str:
    return run.log_path.read_text(encoding="utf-8", errors="replace")


# -- the CLI alone, through the agent runner ---------------------------------------------------


PATCH = "*** Begin Patch\n*** Add File: notes.txt\n+patched by codex\n*** End Patch\n"


def test_success_runs_real_tool_calls(codex_env: dict[str, str], server: ResponsesServer,
                                      tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    server.add([Text("Writing the fix."),
                FunctionCall("exec_command", {"cmd": "printf 'fixed\\n' > fix.txt"},
                             call_id="call_shell")],
               [CustomToolCall("apply_patch", PATCH, call_id="call_patch")],
               [Text("Fixed.")])
    activity = Activity("codex")
    run = run_preset(codex_env, project, tmp_path / "run", activity)

    assert (run.outcome, run.exit_code) == ("ok", 0), log_text(run)
    assert (project / "fix.txt").read_text() == "fixed\n"
    assert (project / "notes.txt").read_text() == "patched by codex\n"
    # One turn of three model requests; turn.completed sums their usage (100 in, 20 out).
    assert (run.turns, run.input_tokens, run.output_tokens) == (1, 300, 60)
    assert run.detail == "" and run.cost_usd is None
    log = log_text(run)
    assert '"type":"command_execution"' in log and '"type":"file_change"' in log
    # The live view read the same events: the command, then the patch's file.
    live = activity.snapshot()
    assert (live.turns, live.tool_calls, live.last_tool) == (1, 2, "edit"), live
    # the file, cut from the left when the path is long (the live view keeps its name)
    assert live.last_target.endswith("/notes.txt")
    assert str(project / "notes.txt").endswith(live.last_target.removeprefix("..."))
    assert (live.input_tokens, live.output_tokens) == (300, 60)
    # What the CLI sent: its own tools, the prompt, then the real tools' results.
    assert server.statuses() == [200, 200, 200] and server.remaining == 0
    assert {"exec_command", "apply_patch"} <= set(server.tool_names())
    assert server.requests[0]["model"] == MODEL and server.requests[0]["stream"] is True
    assert any(PROMPT in text for text in server.user_texts())
    outputs = server.tool_outputs()
    assert outputs["call_shell"]["type"] == "function_call_output"
    assert "Process exited with code 0" in outputs["call_shell"]["output"]
    assert outputs["call_patch"]["type"] == "custom_tool_call_output"
    assert "Success. Updated the following files:\nA notes.txt" in outputs["call_patch"]["output"]
    assert all(h.get("authorization") == f"Bearer {codex_env[KEY_ENV]}" for h in server.headers)
    assert server.unknown == []


def test_http_500_is_an_api_error(codex_env: dict[str, str], server: ResponsesServer,
                                  tmp_path: Path) -> None:
    server.add(ApiError(500, repeat=None))
    run = run_preset(codex_env, tmp_path, tmp_path / "run")

    assert (run.outcome, run.exit_code) == ("api-error", 1), log_text(run)
    # Codex 0.171.0 shows its own words for a 500, not the body's message.
    assert run.detail == ("turn.failed: We\u2019re currently experiencing high demand, which "
                          "may cause temporary errors.")
    assert server.statuses() == [500]  # request_max_retries = 0: one attempt
    assert run.duration < 10


def test_http_429_is_a_rate_limit(codex_env: dict[str, str], server: ResponsesServer,
                                  tmp_path: Path) -> None:
    server.add(ApiError(429, retry_after=2, repeat=None))
    run = run_preset(codex_env, tmp_path, tmp_path / "run")

    assert (run.outcome, run.exit_code) == ("rate-limited", 1), log_text(run)
    assert run.detail.startswith("turn.failed: exceeded retry limit, last status: 429 Too Many "
                                 "Requests, request id: req_"), run.detail
    # The CLI drops both the retry-after header and the body's "Please try again in 2s".
    assert run.retry_after is None and run.reset_at is None
    assert "try again" not in log_text(run)
    assert server.statuses() == [429]


def test_stream_rate_limit_gives_the_retry_time(codex_env: dict[str, str],
                                                server: ResponsesServer, tmp_path: Path) -> None:
    server.add(StreamFailure("rate_limit_exceeded",
                             "Rate limit reached for gpt-5.5 in organization org-test on tokens "
                             "per min (TPM): Limit 10, Used 10, Requested 5. Please try again "
                             "in 1.5s.", repeat=None))
    run = run_preset(codex_env, tmp_path, tmp_path / "run")

    assert (run.outcome, run.exit_code) == ("rate-limited", 1), log_text(run)
    assert run.detail.startswith("turn.failed: rate limit exceeded: Rate limit reached for "
                                 "gpt-5.5"), run.detail
    assert run.retry_after == 1.5


def test_usage_limit_is_a_rate_limit(codex_env: dict[str, str], server: ResponsesServer,
                                     tmp_path: Path) -> None:
    server.add(ApiError(429, message="The usage limit has been reached",
                        type="usage_limit_reached", repeat=None))
    run = run_preset(codex_env, tmp_path, tmp_path / "run")

    assert (run.outcome, run.exit_code) == ("rate-limited", 1), log_text(run)
    assert run.detail == "turn.failed: You\u2019ve hit your usage limit. Try again later."


# -- the whole loop: pytest --ralph --ralph-agent codex ----------------------------------------


FIX_CRITERION = {"text": "fix.txt says fixed", "run": "grep -qx fixed fix.txt"}


@pytest.fixture
def loop(pytester: pytest.Pytester, codex_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
         write_prd: Any) -> Callable[..., pytest.RunResult]:
    """loop(*args, ini="") writes the one-story PRD and an ini, runs ``pytest --ralph
    --ralph-agent codex`` in a subprocess with the offline environment, and returns the run
    result."""
    for name, value in codex_env.items():
        monkeypatch.setenv(name, value)
    for name in list(os.environ):  # settings from the outer environment must not leak in
        if name.startswith("PYTEST_RALPH_") and name != "PYTEST_RALPH_CACHE":
            monkeypatch.delenv(name)
    write_prd(story("US-001", FIX_CRITERION))

    def run(*args: str, ini: str = "") -> pytest.RunResult:
        pytester.makeini(f"[pytest]\n{ini}\n")
        return pytester.runpytest_subprocess(
            "--ralph", "--ralph-agent", "codex", "--ralph-agent-timeout", str(CLI_TIMEOUT),
            *args, timeout=LOOP_TIMEOUT)

    return run


def _db_rows(pytester: pytest.Pytester, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(pytester.path / ".pytest_ralph" / "ralph.db")) as conn:
        return [tuple(row) for row in conn.execute(sql).fetchall()]


def agent_outcomes(pytester: pytest.Pytester) -> list[tuple[int, str, str]]:
    """``(iteration, outcome, why)`` of every agent run that spent an iteration."""
    return [(int(n), str(o), str(w or "")) for n, o, w in _db_rows(
        pytester, "SELECT n, outcome, why FROM agent_runs ORDER BY n")]


def agent_attempts(pytester: pytest.Pytester) -> list[tuple[int, str, str, float]]:
    """``(iteration, outcome, why, pause seconds)`` of every run that did not spend one."""
    return [(int(n), str(o), str(w or ""), float(p)) for n, o, w, p in _db_rows(
        pytester, "SELECT n, outcome, why, pause FROM agent_attempts ORDER BY id")]


def fix_turns(call_id: str = "call_fix", cmd: str = "printf 'fixed\\n' > fix.txt"
              ) -> tuple[list[FunctionCall], list[Text]]:
    """The two turns of a model that writes the fix with ``exec_command``, then says so."""
    return [FunctionCall("exec_command", {"cmd": cmd}, call_id=call_id)], [Text("Fixed.")]


def test_loop_stops_after_repeated_api_errors(pytester: pytest.Pytester,
                                              loop: Callable[..., pytest.RunResult],
                                              server: ResponsesServer) -> None:
    server.add(ApiError(500, repeat=None))
    result = loop()
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 7, out
    outcomes = agent_outcomes(pytester)
    assert [o[:2] for o in outcomes] == [(1, "api-error"), (2, "api-error"), (3, "api-error")]
    assert all("high demand" in why for _, _, why in outcomes), outcomes
    assert agent_attempts(pytester) == []
    assert server.statuses() == [500] * 3  # one request per run: retries off
    assert "| 3 | US-001 | exit 1 | api-error: turn.failed: We" in report_text(pytester)


def test_loop_pauses_on_rate_limit_then_completes(pytester: pytest.Pytester,
                                                  loop: Callable[..., pytest.RunResult],
                                                  server: ResponsesServer) -> None:
    server.add(ApiError(429, retry_after=2), *fix_turns())
    # One iteration allowed: the rate-limited run must not spend it.
    result = loop("--ralph-max-iterations", "1",
                  ini="ralph_rate_limit_backoff = 1\nralph_max_pause = 5")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, out
    assert (pytester.path / "fix.txt").read_text() == "fixed\n"
    ((n, outcome, why, pause),) = agent_attempts(pytester)
    # No retry time from the CLI: the loop's own back-off (1 s here) decides the pause.
    assert (n, outcome) == (1, "rate-limited") and 1.0 <= pause < 2.0, (why, pause)
    assert "429 Too Many Requests" in why
    assert [o[:2] for o in agent_outcomes(pytester)] == [(1, "ok")]
    assert "the iteration is not spent" in out
    assert server.statuses() == [429, 200, 200]


def test_loop_completes_confined(pytester: pytest.Pytester,
                                 loop: Callable[..., pytest.RunResult],
                                 codex_env: dict[str, str], server: ResponsesServer,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The real CLI in the loop's sandbox, with a home folder outside the project and
    outside /tmp, as a user's is, and Codex's state in its default ``~/.codex``: it writes
    the project and its own state, and nothing else."""
    sandbox = probe("auto")
    if not sandbox.confined:
        if os.environ.get("CI"):
            pytest.fail(f"bubblewrap cannot confine here: {sandbox.reason}", pytrace=False)
        pytest.skip(f"bubblewrap cannot confine here: {sandbox.reason}")
    TEST_HOMES.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(dir=TEST_HOMES))
    try:
        (home / "notes.txt").write_text("mine\n")  # a file of the user's
        codex_home = write_codex_home(home / ".codex", server.url)
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.delenv("CODEX_HOME")  # the default, ~/.codex
        mark = uuid.uuid4().hex[:12]
        # Outside the project: new files in HOME, /tmp and a folder of this user's that is
        # neither (the CLI cache), each writable to an unconfined agent.
        escapes = [home / f"escape-{mark}.txt", Path(f"/tmp/escape-{mark}.txt"),
                   CACHE / f"escape-{mark}.txt"]
        cmd = "; ".join([
            "printf 'fixed\\n' > fix.txt",
            "(echo theirs > \"$HOME/notes.txt\" && echo changed notes) 2>&1",
            *(f"(echo escaped > {p} && echo wrote {p.name} in {p.parent.name}) 2>&1"
              for p in escapes),
            f"echo codex-state > ~/.codex/agent-note-{mark}.txt"])
        server.add(*fix_turns(cmd=cmd))
        try:
            result = loop("--ralph-sandbox", "required")
            landed = [p for p in escapes if p.exists()]
        finally:
            for p in escapes:
                p.unlink(missing_ok=True)
        out = result.stdout.str() + result.stderr.str()

        assert result.ret == 0, out
        assert landed == [], f"writes outside the project landed: {landed}"
        assert (home / "notes.txt").read_text() == "mine\n"
        assert result.stdout.lines[0].startswith(
            "pytest-ralph: agent and check phases confined by bubblewrap"), out
        assert "~/.codex" in result.stdout.lines[0], result.stdout.lines[0]
        assert (pytester.path / "fix.txt").read_text() == "fixed\n"
        # Codex's own state folder was writable: the scripted note and its session log.
        assert (codex_home / f"agent-note-{mark}.txt").read_text() == "codex-state\n"
        assert list((codex_home / "sessions").rglob("*.jsonl")), sorted(codex_home.rglob("*"))
        # Inside, the user's file was read-only, new files in the private HOME and /tmp
        # "worked" (and vanished with the sandbox), the real folder outside was read-only.
        output = server.tool_outputs()["call_fix"]["output"]
        assert "changed notes" not in output, output
        assert f"wrote escape-{mark}.txt in {home.name}" in output, output
        assert f"wrote escape-{mark}.txt in tmp" in output, output
        assert f"wrote escape-{mark}.txt in {CACHE.name}" not in output, output
        assert output.count("Read-only file system") == 2, output
        assert [o[:2] for o in agent_outcomes(pytester)] == [(1, "ok")]
        report = report_text(pytester)
        assert "| 1 | US-001 | exit 0 | ok |" in report, report
        assert any(PROVEN["codex"].version in h.get("user-agent", "") for h in server.headers)
        assert server.remaining == 0
    finally:
        shutil.rmtree(home, ignore_errors=True)
