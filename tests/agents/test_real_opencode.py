"""The real opencode CLI (pinned in pytest_ralph/agents/proven.py) against a scripted model.

The CLI runs offline: a ``HOME`` of the test's own holds a global ``opencode.json``
(:mod:`tests.support.opencode_cli`) whose ``anthropic`` provider's ``baseURL`` is a loopback
:class:`~tests.support.model_server.ModelServer` speaking the Anthropic Messages API, so the
CLI executes real tool calls (``bash``, ``write``) in a temporary project and reports real
results and API errors; each error answer carries ``retry-after-ms: 10`` so that opencode's
own five retries take milliseconds. The first part runs the ``opencode`` preset's exact argv
(prompt on stdin) through the loop's own agent runner
(:func:`pytest_ralph.agents.run.run_agent`, the preset's reader classifying); the second runs
the whole loop (``pytest --ralph --ralph-agent opencode``) in a pytester subprocess: HTTP 500
ends it with exit 7 after three API errors, a rate-limited run pauses it for the time the
error states without spending the iteration, and a run confined by bubblewrap completes with
the project edited and nothing written outside it but opencode's own config, data, cache and
state folders.
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
from pytest_ralph.agents.readers import OpencodeReader
from pytest_ralph.agents.run import AgentRun, run_agent
from pytest_ralph.sandbox.bwrap import probe
from tests.support.loop import report_text
from tests.support.model_server import ApiError, ModelServer, Text, ToolUse
from tests.support.opencode_cli import (
    API_KEY,
    FAST_RETRY,
    MODEL,
    OUTER,
    offline_env,
    write_config,
)
from tests.support.prd import story
from tests.support.real_cli import (
    CliInstallError,
    bin_dir,
    cache_dir,
    cli_executable,
    installed_executable,
)

# Skip only when cli_executable() would return None, and never under CI (the fixture
# `opencode_bin` then fails); the install itself happens in that session fixture.
if installed_executable("opencode") is None and shutil.which("npm") is None \
        and not os.environ.get("CI"):
    pytest.skip("the opencode CLI is not installed and npm is not on PATH to install it",
                allow_module_level=True)

#: Seconds one CLI run may take (a normal one takes about 3 s, an API error as long).
CLI_TIMEOUT = 40.0

#: Seconds one whole loop run (pytester subprocess) may take.
LOOP_TIMEOUT = 120.0

PROMPT = "Fix the project, please."

#: The install cache and the folder holding only the pinned ``opencode``, found at import
#: time: ``pytester`` moves ``HOME`` (which the default cache folder is under) during a test.
CACHE = cache_dir()
BIN_DIR = bin_dir("opencode")

#: Where the confined loop's home folders go: outside /tmp (which the sandbox makes private)
#: and outside the project, as a user's home is.
TEST_HOMES = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "pytest-ralph-test-homes"

#: opencode's folders under ``HOME`` (the XDG defaults), which its sandbox keeps writable.
STATE_FOLDERS = (".config/opencode", ".local/share/opencode", ".cache/opencode",
                 ".local/state/opencode")


@pytest.fixture(scope="session")
def opencode_bin() -> Path:
    """The pinned real opencode CLI, installed into the cache on first use.

    Fails (with npm's output) when npm is present but the install fails, and under CI also
    when npm is missing; elsewhere a machine without npm skips with that reason.
    """
    try:
        exe = cli_executable("opencode")
    except CliInstallError as exc:
        pytest.fail(f"installing the pinned opencode CLI failed:\n{exc}", pytrace=False)
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("the opencode CLI is not installed and npm is not on PATH: CI must "
                        "run the real-CLI tests (install Node.js and npm)", pytrace=False)
        pytest.skip("the opencode CLI is not installed and npm is not on PATH")
    return exe


@pytest.fixture
def server() -> Iterator[ModelServer]:
    """A running :class:`ModelServer` with an empty script (``server.add(...)``)."""
    with ModelServer() as running:
        yield running


@pytest.fixture
def opencode_env(opencode_bin: Path, server: ModelServer,
                 tmp_path_factory: pytest.TempPathFactory,
                 monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The variables that run the real CLI offline against ``server``: a fresh ``HOME``
    outside the project holding the config, ``PATH`` starting with the folder holding only
    the pinned ``opencode`` (set in this process too: the runner finds the executable on
    it); the outer variables that would move its config or provider are removed."""
    home = tmp_path_factory.mktemp("home")
    write_config(home, server.url)
    env = offline_env(home, BIN_DIR)
    assert shutil.which("opencode", path=env["PATH"]) == str(BIN_DIR / "opencode")
    for name in OUTER:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", env["PATH"])
    return env


def run_preset(env: dict[str, str], project: Path, runs: Path,
               activity: Activity | None = None) -> AgentRun:
    """The ``opencode`` preset's exact argv, prompt on stdin, run by the loop's agent runner
    with the reader :func:`reader_for` gives that argv (unconfined: the loop's sandbox is
    exercised below); ``activity`` (the live view's model) is fed each stdout line."""
    argv = PRESETS["opencode"].argv()
    assert argv == ["opencode", "run", "--format", "json", "--auto"]
    reader = reader_for(argv)
    assert isinstance(reader, OpencodeReader)
    runs.mkdir(parents=True, exist_ok=True)
    return run_agent(argv, prompt=PROMPT, prompt_file=runs / "prompt.md", cwd=project,
                     timeout=CLI_TIMEOUT, log_path=runs / "agent.log", env=env,
                     reader=reader, on_stdout_line=activity.feed if activity else None)


def log_text(run: AgentRun) -> str:
    return run.log_path.read_text(encoding="utf-8", errors="replace")


def agent_statuses(server: ModelServer) -> list[int]:
    """The HTTP statuses of the agent's own model requests (those with tools), in order."""
    tooled = [bool(body.get("tools")) for body in list(server.requests)]
    answered = [status for method, path, status in list(server.log)
                if (method, path) == ("POST", "/v1/messages")]
    return [status for status, tools in zip(answered, tooled, strict=True) if tools]


# -- the CLI alone, through the agent runner ---------------------------------------------------


def test_success_runs_real_tool_calls(opencode_env: dict[str, str], server: ModelServer,
                                      tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    notes = project / "notes.txt"
    server.add([Text("Writing the fix."),
                ToolUse("bash", {"command": "printf 'fixed\\n' > fix.txt",
                                 "description": "Write the fix"}, id="toolu_shell")],
               [ToolUse("write", {"filePath": str(notes), "content": "written by opencode\n"},
                        id="toolu_write")],
               [Text("Fixed.")])
    activity = Activity("opencode")
    run = run_preset(opencode_env, project, tmp_path / "run", activity)

    assert (run.outcome, run.exit_code) == ("ok", 0), log_text(run)
    assert (project / "fix.txt").read_text() == "fixed\n"
    assert notes.read_text() == "written by opencode\n"
    # Three steps (one per model request), each reporting the server's 100 in / 20 out.
    assert (run.turns, run.input_tokens, run.output_tokens) == (3, 300, 60)
    assert run.detail == "" and run.cost_usd == 0
    log = log_text(run)
    assert '"type":"tool_use"' in log and '"tool":"write"' in log
    live = activity.snapshot()
    assert (live.turns, live.tool_calls, live.last_tool) == (3, 2, "write"), live
    # the file, cut from the left when the path is long (the live view keeps its name)
    assert live.last_target.endswith("/notes.txt")
    assert str(notes).endswith(live.last_target.removeprefix("..."))
    # What the CLI sent: its own tools, the prompt, then the real tools' results.
    assert agent_statuses(server) == [200, 200, 200] and server.remaining == 0
    tools = {tool["name"] for tool in server.agent_requests[0]["tools"]}
    assert {"bash", "write", "edit", "read"} <= tools, tools
    assert server.agent_requests[0]["model"] == MODEL
    assert any(PROMPT in text for text in server.texts())
    results = {r["tool_use_id"]: r for r in server.tool_results()}
    assert set(results) == {"toolu_shell", "toolu_write"}
    assert all(not r.get("is_error") for r in results.values()), results
    assert all(h.get("x-api-key") == API_KEY for h in server.headers)
    assert any(f"opencode/{PROVEN['opencode'].version}" in h.get("user-agent", "")
               for h in server.headers)
    assert server.unknown == []


def test_http_500_is_an_api_error(opencode_env: dict[str, str], server: ModelServer,
                                  tmp_path: Path) -> None:
    server.add(ApiError(500, headers=FAST_RETRY, repeat=None))
    run = run_preset(opencode_env, tmp_path, tmp_path / "run")

    assert (run.outcome, run.exit_code) == ("api-error", 1), log_text(run)
    assert run.detail == "APIError: mock failure"
    assert run.retry_after is None and run.reset_at is None
    assert '"statusCode":500' in log_text(run)
    assert agent_statuses(server) == [500] * 6  # the first try and opencode's 5 retries
    assert run.duration < 15


def test_http_429_gives_the_stated_retry_time(opencode_env: dict[str, str],
                                              server: ModelServer, tmp_path: Path) -> None:
    message = ("Rate limit reached for requests per minute: Limit 5, Used 5. "
               "Please try again in 1.5s.")
    server.add(ApiError(429, message=message, headers=FAST_RETRY, repeat=None))
    run = run_preset(opencode_env, tmp_path, tmp_path / "run")

    assert (run.outcome, run.exit_code) == ("rate-limited", 1), log_text(run)
    assert run.detail == f"APIError: {message}"
    assert run.retry_after == 1.5 and run.reset_at is None
    assert agent_statuses(server) == [429] * 6
    assert run.duration < 15


def test_http_429_retry_header_gives_the_retry_time(opencode_env: dict[str, str],
                                                    server: ModelServer,
                                                    tmp_path: Path) -> None:
    # No time in the message: the reader takes the header opencode copies into the event.
    server.add(ApiError(429, message="Too many requests", headers={"retry-after-ms": "250"},
                        repeat=None))
    run = run_preset(opencode_env, tmp_path, tmp_path / "run")

    assert (run.outcome, run.exit_code) == ("rate-limited", 1), log_text(run)
    assert run.detail == "APIError: Too many requests"
    assert run.retry_after == 0.25
    assert '"retry-after-ms":"250"' in log_text(run)
    assert agent_statuses(server) == [429] * 6


# -- the whole loop: pytest --ralph --ralph-agent opencode ------------------------------------


FIX_CRITERION = {"text": "fix.txt says fixed", "run": "grep -qx fixed fix.txt"}


@pytest.fixture
def loop(pytester: pytest.Pytester, opencode_env: dict[str, str],
         monkeypatch: pytest.MonkeyPatch, write_prd: Any) -> Callable[..., pytest.RunResult]:
    """loop(*args, ini="") writes the one-story PRD and an ini, runs ``pytest --ralph
    --ralph-agent opencode`` in a subprocess with the offline environment, and returns the
    run result."""
    for name, value in opencode_env.items():
        monkeypatch.setenv(name, value)
    for name in list(os.environ):  # settings from the outer environment must not leak in
        if name.startswith("PYTEST_RALPH_") and name != "PYTEST_RALPH_CACHE":
            monkeypatch.delenv(name)
    write_prd(story("US-001", FIX_CRITERION))

    def run(*args: str, ini: str = "") -> pytest.RunResult:
        pytester.makeini(f"[pytest]\n{ini}\n")
        return pytester.runpytest_subprocess(
            "--ralph", "--ralph-agent", "opencode", "--ralph-agent-timeout", str(CLI_TIMEOUT),
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


def fix_turns(cmd: str = "printf 'fixed\\n' > fix.txt", call_id: str = "toolu_fix"
              ) -> tuple[list[ToolUse], list[Text]]:
    """The two turns of a model that writes the fix with ``bash``, then says so."""
    return ([ToolUse("bash", {"command": cmd, "description": "Write the fix"}, id=call_id)],
            [Text("Fixed.")])


def test_loop_stops_after_repeated_api_errors(pytester: pytest.Pytester,
                                              loop: Callable[..., pytest.RunResult],
                                              server: ModelServer) -> None:
    server.add(ApiError(500, headers=FAST_RETRY, repeat=None))
    result = loop()
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 7, out
    outcomes = agent_outcomes(pytester)
    assert outcomes == [(n, "api-error", "APIError: mock failure") for n in (1, 2, 3)], outcomes
    assert agent_attempts(pytester) == []
    assert agent_statuses(server) == [500] * 18  # three runs of six tries each
    assert "| 3 | US-001 | exit 1 | api-error: APIError: mock failure" in report_text(pytester)


def test_loop_pauses_for_the_stated_retry_time(pytester: pytest.Pytester,
                                               loop: Callable[..., pytest.RunResult],
                                               server: ModelServer) -> None:
    # Six 429s fail one run (its first try and opencode's 5 retries); the next run fixes.
    # Not sticky: the next run's first request is byte-identical to the failed one (same
    # prompt, tools and system text), which a sticky error would take for a retry.
    server.add(ApiError(429, message="Rate limited. Please try again in 1.5s.",
                        headers=FAST_RETRY, repeat=6, sticky=False), *fix_turns())
    # One iteration allowed: the rate-limited run must not spend it.
    result = loop("--ralph-max-iterations", "1",
                  ini="ralph_rate_limit_backoff = 30\nralph_max_pause = 10")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, out
    assert (pytester.path / "fix.txt").read_text() == "fixed\n"
    ((n, outcome, why, pause),) = agent_attempts(pytester)
    # The pause is the 1.5 s the error states, not the loop's own back-off (30 s here).
    assert (n, outcome) == (1, "rate-limited") and 1.5 <= pause < 3.0, (why, pause)
    assert "Please try again in 1.5s" in why
    assert [o[:2] for o in agent_outcomes(pytester)] == [(1, "ok")]
    assert "the iteration is not spent" in out
    assert agent_statuses(server) == [429] * 6 + [200, 200]


def test_loop_completes_confined(pytester: pytest.Pytester,
                                 loop: Callable[..., pytest.RunResult],
                                 server: ModelServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real CLI in the loop's sandbox, with a home folder outside the project and outside
    /tmp, as a user's is, and opencode's folders in their XDG defaults under it: it writes
    the project and its own folders, and nothing else."""
    sandbox = probe("auto")
    if not sandbox.confined:
        if os.environ.get("CI"):
            pytest.fail(f"bubblewrap cannot confine here: {sandbox.reason}", pytrace=False)
        pytest.skip(f"bubblewrap cannot confine here: {sandbox.reason}")
    TEST_HOMES.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(dir=TEST_HOMES))
    try:
        (home / "notes.txt").write_text("mine\n")  # a file of the user's
        write_config(home, server.url)
        monkeypatch.setenv("HOME", str(home))
        mark = uuid.uuid4().hex[:12]
        # Outside the project: new files in HOME, /tmp and a folder of this user's that is
        # neither (the CLI cache), each writable to an unconfined agent.
        escapes = [home / f"escape-{mark}.txt", Path(f"/tmp/escape-{mark}.txt"),
                   CACHE / f"escape-{mark}.txt"]
        notes = [home / folder / f"agent-note-{mark}.txt" for folder in STATE_FOLDERS]
        cmd = "; ".join([
            "printf 'fixed\\n' > fix.txt",
            "(echo theirs > \"$HOME/notes.txt\" && echo changed notes) 2>&1",
            *(f"(echo escaped > {p} && echo wrote {p.name} in {p.parent.name}) 2>&1"
              for p in escapes),
            *(f"mkdir -p {p.parent} && echo opencode-state > {p}" for p in notes)])
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
        first = result.stdout.lines[0]
        assert first.startswith("pytest-ralph: agent and check phases confined by bubblewrap"), out
        assert "~/.config/opencode" in first and "~/.local/share/opencode" in first, first
        assert (pytester.path / "fix.txt").read_text() == "fixed\n"
        # opencode's own folders were writable: the scripted notes and its session database.
        assert [p.read_text() for p in notes] == ["opencode-state\n"] * len(notes)
        assert (home / ".local/share/opencode/opencode.db").is_file()
        # Inside, the user's file was read-only, new files in the private HOME and /tmp
        # "worked" (and vanished with the sandbox), the real folder outside was read-only.
        (result_block,) = [r for r in server.tool_results() if r["tool_use_id"] == "toolu_fix"]
        output = str(result_block.get("content"))
        assert "changed notes" not in output, output
        assert f"wrote escape-{mark}.txt in {home.name}" in output, output
        assert f"wrote escape-{mark}.txt in tmp" in output, output
        assert f"wrote escape-{mark}.txt in {CACHE.name}" not in output, output
        assert output.count("Read-only file system") == 2, output
        assert [o[:2] for o in agent_outcomes(pytester)] == [(1, "ok")]
        report = report_text(pytester)
        assert "| 1 | US-001 | exit 0 | ok |" in report, report
        assert server.remaining == 0
    finally:
        shutil.rmtree(home, ignore_errors=True)
