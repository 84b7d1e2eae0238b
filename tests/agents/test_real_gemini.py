"""The real Gemini CLI (pinned in pytest_ralph/agents/proven.py) against a scripted model.

The CLI runs offline: ``GOOGLE_GEMINI_BASE_URL`` points it (with ``gemini-api-key``
authentication and a dummy key) at a loopback :class:`~tests.support.gemini_server.GeminiServer`
speaking the Gemini API, and a home folder of the test's own holds settings that turn its
retries, telemetry and update checks off (:mod:`tests.support.gemini_cli`), so the CLI
executes real tool calls (``write_file``, ``run_shell_command``) in a temporary project and
reports real results and API errors, each error run ending in about two seconds. The first
part runs the ``gemini`` preset's exact argv, prompt on stdin, through the loop's own agent
runner (:func:`pytest_ralph.agents.run.run_agent`, the preset's reader classifying), each in a
fresh folder the CLI has never trusted; the second runs the whole loop (``pytest --ralph
--ralph-agent gemini``) in a pytester subprocess: HTTP 500 ends it with exit 7, HTTP 429
pauses it for the CLI's stated retry time without spending the iteration, and a run confined
by bubblewrap completes with the project edited and nothing written outside it but the CLI's
own ``~/.gemini``.
"""

from __future__ import annotations

import json
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

from pytest_ralph.agents.presets import PRESETS, reader_for
from pytest_ralph.agents.proven import PROVEN
from pytest_ralph.agents.readers import GeminiReader
from pytest_ralph.agents.run import AgentRun, run_agent
from pytest_ralph.sandbox.bwrap import probe
from tests.support.gemini_cli import offline_env, write_settings
from tests.support.gemini_server import ApiError, FunctionCall, GeminiServer, Text
from tests.support.loop import report_text
from tests.support.prd import story
from tests.support.real_cli import (
    CliInstallError,
    bin_dir,
    cache_dir,
    cli_executable,
    installed_executable,
)

# Skip only when cli_executable() would return None, and never under CI (the fixture
# `gemini_bin` then fails); the install itself happens in that session fixture.
if installed_executable("gemini") is None and shutil.which("npm") is None \
        and not os.environ.get("CI"):
    pytest.skip("the Gemini CLI is not installed and npm is not on PATH to install it",
                allow_module_level=True)

#: Seconds one CLI run may take (a normal one takes about 2 s, an API error as long).
CLI_TIMEOUT = 60.0

#: Seconds one whole loop run (pytester subprocess) may take.
LOOP_TIMEOUT = 120.0

PROMPT = "Fix the project, please."

#: The install cache and the folder holding only the pinned ``gemini``, found at import time:
#: ``pytester`` moves ``HOME`` (which the default cache folder is under) during a test.
CACHE = cache_dir()
BIN_DIR = bin_dir("gemini")

#: Where the confined loop's home folders go: outside /tmp (which the sandbox makes private)
#: and outside the project, as a user's home is.
TEST_HOMES = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "pytest-ralph-test-homes"

#: What Gemini CLI 0.61.0 says of a folder it was not told to trust (exit status 55).
UNTRUSTED = "Gemini CLI is not running in a trusted directory"


@pytest.fixture(scope="session")
def gemini_bin() -> Path:
    """The pinned real Gemini CLI, installed into the cache on first use.

    Fails (with npm's output) when npm is present but the install fails, and under CI also
    when npm is missing; elsewhere a machine without npm skips with that reason.
    """
    try:
        exe = cli_executable("gemini")
    except CliInstallError as exc:
        pytest.fail(f"installing the pinned Gemini CLI failed:\n{exc}", pytrace=False)
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("the Gemini CLI is not installed and npm is not on PATH: CI must run "
                        "the real-CLI tests (install Node.js and npm)", pytrace=False)
        pytest.skip("the Gemini CLI is not installed and npm is not on PATH")
    return exe


@pytest.fixture
def server() -> Iterator[GeminiServer]:
    """A running :class:`GeminiServer` with an empty script (``server.add(...)``)."""
    with GeminiServer() as running:
        yield running


@pytest.fixture
def gemini_env(gemini_bin: Path, server: GeminiServer, tmp_path_factory: pytest.TempPathFactory,
               monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The variables that run the real CLI offline against ``server``: a fresh ``HOME``
    outside the project holding ``.gemini/settings.json``, ``PATH`` starting with the folder
    holding only the pinned ``gemini`` (set in this process too: the runner finds the
    executable on it)."""
    home = tmp_path_factory.mktemp("home")
    write_settings(home)
    env = offline_env(server.url, home, BIN_DIR, tmp=tmp_path_factory.mktemp("tmpdir"))
    assert shutil.which("gemini", path=env["PATH"]) == str(BIN_DIR / "gemini")
    monkeypatch.setenv("PATH", env["PATH"])
    return env


def run_argv(argv: list[str], env: dict[str, str], project: Path, runs: Path) -> AgentRun:
    """``argv``, prompt on stdin, run by the loop's agent runner with the reader
    :func:`reader_for` gives it (unconfined: the loop's sandbox is exercised below)."""
    reader = reader_for(argv)
    assert isinstance(reader, GeminiReader)
    runs.mkdir(parents=True, exist_ok=True)
    return run_agent(argv, prompt=PROMPT, prompt_file=runs / "prompt.md", cwd=project,
                     timeout=CLI_TIMEOUT, log_path=runs / "agent.log", env=env, reader=reader)


def run_preset(env: dict[str, str], project: Path, runs: Path) -> AgentRun:
    """The ``gemini`` preset's exact argv through :func:`run_argv`."""
    return run_argv(PRESETS["gemini"].argv(), env, project, runs)


def log_text(run: AgentRun) -> str:
    return run.log_path.read_text(encoding="utf-8", errors="replace")


def result_event(run: AgentRun) -> dict[str, Any]:
    """The last ``result`` event of the run's stdout (as logged)."""
    found: list[dict[str, Any]] = []
    for line in log_text(run).splitlines():
        start = line.find('{"type":"result"')
        if start >= 0:
            found.append(json.loads(line[start:]))
    assert found, log_text(run)
    return found[-1]


def fresh_project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    return project


# -- the CLI alone, through the agent runner ---------------------------------------------------


def test_success_runs_real_tool_calls(gemini_env: dict[str, str], server: GeminiServer,
                                      tmp_path: Path) -> None:
    project = fresh_project(tmp_path)
    server.add([Text("Writing the fix."),
                FunctionCall("write_file", {"file_path": "notes.txt",
                                            "content": "written by gemini\n"})],
               [FunctionCall("run_shell_command", {"command": "printf 'fixed\\n' > fix.txt",
                                                   "description": "write the fix"})],
               [Text("Fixed.")])
    run = run_preset(gemini_env, project, tmp_path / "run")

    assert (run.outcome, run.exit_code) == ("ok", 0), log_text(run)
    assert (project / "notes.txt").read_text() == "written by gemini\n"
    assert (project / "fix.txt").read_text() == "fixed\n"
    assert run.detail == "" and run.cost_usd is None
    event = result_event(run)
    assert event["status"] == "success" and event["stats"]["tool_calls"] == 2, event
    # Tokens are the stats' sums over every model call (the router's and the three turns').
    assert (run.input_tokens, run.output_tokens) == (event["stats"]["input_tokens"],
                                                     event["stats"]["output_tokens"])
    assert run.input_tokens is not None and run.input_tokens >= 300
    log = log_text(run)
    assert '"tool_name":"write_file"' in log and '"tool_name":"run_shell_command"' in log
    # What the CLI sent: its own tools, the prompt, then the real tools' results.
    assert server.statuses() == [200, 200, 200] and server.remaining == 0
    assert {"write_file", "run_shell_command", "replace"} <= set(server.tool_names())
    assert any(PROMPT in text for text in server.user_texts())
    answers = {a["name"]: a["response"] for a in server.function_responses().values()}
    assert "Successfully created and wrote to new file" in answers["write_file"]["output"]
    assert "Output: (empty)" in answers["run_shell_command"]["output"], answers
    assert all(h.get("x-goog-api-key") == gemini_env["GEMINI_API_KEY"] for h in server.headers)
    assert server.unknown == [] and server.reply_errors == []


def test_untrusted_folder_fails_without_skip_trust(gemini_env: dict[str, str],
                                                  server: GeminiServer, tmp_path: Path) -> None:
    """Why the preset passes ``--skip-trust``: without it the real CLI refuses a fresh
    folder before any model call."""
    argv = [a for a in PRESETS["gemini"].argv() if a != "--skip-trust"]
    run = run_argv(argv, gemini_env, fresh_project(tmp_path), tmp_path / "run")

    assert run.exit_code == 55 and run.outcome != "ok", log_text(run)
    assert UNTRUSTED in log_text(run)
    assert 'Approval mode overridden to "default" because the current folder is not trusted' \
        in log_text(run)
    assert server.log == []


def test_untrusted_fresh_folder_works_with_the_preset(gemini_env: dict[str, str],
                                                      server: GeminiServer,
                                                      tmp_path: Path) -> None:
    """A folder the CLI never saw, not a git repository, nothing in ``trustedFolders.json``:
    the preset's argv still runs, yolo approvals intact (the shell command runs)."""
    project = fresh_project(tmp_path)
    home = Path(gemini_env["HOME"])
    assert not (home / ".gemini" / "trustedFolders.json").exists()
    server.add([FunctionCall("run_shell_command", {"command": "echo trusted > t.txt"})],
               [Text("Done.")])
    run = run_preset(gemini_env, project, tmp_path / "run")

    assert (run.outcome, run.exit_code) == ("ok", 0), log_text(run)
    assert (project / "t.txt").read_text() == "trusted\n"
    assert UNTRUSTED not in log_text(run)
    assert "Approval mode overridden" not in log_text(run)
    # Trusted for the run only: nothing was written to the user's trusted folders.
    assert not (home / ".gemini" / "trustedFolders.json").exists()


def test_http_500_is_an_api_error(gemini_env: dict[str, str], server: GeminiServer,
                                  tmp_path: Path) -> None:
    server.add(ApiError(500, repeat=None))
    run = run_preset(gemini_env, fresh_project(tmp_path), tmp_path / "run")

    # Gemini CLI 0.61.0 exits with the HTTP status mod 256.
    assert (run.outcome, run.exit_code) == ("api-error", 500 % 256), log_text(run)
    assert run.detail.startswith('result error unknown: [API Error: {"error":{"code":500,'), \
        run.detail
    assert server.statuses() == [500]  # general.maxAttempts = 1: one attempt
    assert run.duration < 15
    # The CLI's error report went to TMPDIR, not the project.
    assert list(Path(gemini_env["TMPDIR"]).glob("gemini-client-error-*.json")), log_text(run)


def test_http_429_is_a_rate_limit_with_its_retry_time(gemini_env: dict[str, str],
                                                      server: GeminiServer,
                                                      tmp_path: Path) -> None:
    server.add(ApiError(429, retry_delay="2s", repeat=None))  # the API's "Please retry in 2s."
    run = run_preset(gemini_env, fresh_project(tmp_path), tmp_path / "run")

    assert (run.outcome, run.exit_code) == ("rate-limited", 429 % 256), log_text(run)
    # The CLI drops the status from its message; the quota words, the API's "Please retry
    # in 2s", its own "Suggested retry after" (from the RetryInfo) and advice remain.
    assert run.detail.startswith("result error unknown: [API Error: You exceeded your current "
                                 "quota"), run.detail
    message = result_event(run)["error"]["message"]
    assert "429" not in message and "RESOURCE_EXHAUSTED" not in message
    assert "Please retry in 2s.\nSuggested retry after 2s.]" in message, message
    assert "\nPlease wait and try again later." in message, message
    assert run.retry_after == 2.0
    assert server.statuses() == [429]
    assert run.duration < 15


def test_http_429_retry_info_alone_gives_the_retry_time(gemini_env: dict[str, str],
                                                        server: GeminiServer,
                                                        tmp_path: Path) -> None:
    """A quota message without "Please retry in": the RetryInfo's ``retryDelay`` is what the
    CLI passes on, as ``Suggested retry after 7s.``."""
    server.add(ApiError(429, message="You exceeded your current quota, please check your plan "
                        "and billing details.", retry_delay="7s", repeat=None))
    run = run_preset(gemini_env, fresh_project(tmp_path), tmp_path / "run")

    assert (run.outcome, run.exit_code) == ("rate-limited", 173), log_text(run)
    assert "Suggested retry after 7s." in result_event(run)["error"]["message"]
    assert run.retry_after == 7.0


def test_http_429_without_details_is_a_rate_limit(gemini_env: dict[str, str],
                                                  server: GeminiServer, tmp_path: Path) -> None:
    """The API's bare ``Resource has been exhausted (e.g. check quota).``: no retry time."""
    server.add(ApiError(429, message="Resource has been exhausted (e.g. check quota).",
                        details=(), repeat=None))
    run = run_preset(gemini_env, fresh_project(tmp_path), tmp_path / "run")

    assert (run.outcome, run.exit_code) == ("rate-limited", 173), log_text(run)
    assert run.detail.startswith("result error unknown: [API Error: Resource has been "
                                 "exhausted (e.g. check quota).]"), run.detail
    assert run.retry_after is None


# -- the whole loop: pytest --ralph --ralph-agent gemini ---------------------------------------


FIX_CRITERION = {"text": "fix.txt says fixed", "run": "grep -qx fixed fix.txt"}


@pytest.fixture
def loop(pytester: pytest.Pytester, gemini_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
         write_prd: Any) -> Callable[..., pytest.RunResult]:
    """loop(*args, ini="") writes the one-story PRD and an ini, runs ``pytest --ralph
    --ralph-agent gemini`` in a subprocess with the offline environment, and returns the run
    result."""
    for name, value in gemini_env.items():
        monkeypatch.setenv(name, value)
    for name in list(os.environ):  # settings from the outer environment must not leak in
        if name.startswith("PYTEST_RALPH_") and name != "PYTEST_RALPH_CACHE":
            monkeypatch.delenv(name)
    write_prd(story("US-001", FIX_CRITERION))

    def run(*args: str, ini: str = "") -> pytest.RunResult:
        pytester.makeini(f"[pytest]\n{ini}\n")
        return pytester.runpytest_subprocess(
            "--ralph", "--ralph-agent", "gemini", "--ralph-agent-timeout", str(CLI_TIMEOUT),
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


def fix_turns(cmd: str = "printf 'fixed\\n' > fix.txt"
              ) -> tuple[list[FunctionCall], list[Text]]:
    """The two turns of a model that writes the fix with ``run_shell_command``, then says
    so."""
    return [FunctionCall("run_shell_command", {"command": cmd})], [Text("Fixed.")]


def test_loop_stops_after_repeated_api_errors(pytester: pytest.Pytester,
                                              loop: Callable[..., pytest.RunResult],
                                              server: GeminiServer) -> None:
    server.add(ApiError(500, repeat=None))
    result = loop()
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 7, out
    outcomes = agent_outcomes(pytester)
    assert [o[:2] for o in outcomes] == [(1, "api-error"), (2, "api-error"), (3, "api-error")]
    assert all('"code":500' in why for _, _, why in outcomes), outcomes
    assert agent_attempts(pytester) == []
    assert server.statuses() == [500] * 3  # one request per run: retries off
    assert "| 3 | US-001 | exit 244 | api-error: result error unknown: [API Error:" in \
        report_text(pytester)


def test_loop_pauses_on_rate_limit_then_completes(pytester: pytest.Pytester,
                                                  loop: Callable[..., pytest.RunResult],
                                                  server: GeminiServer) -> None:
    server.add(ApiError(429, retry_delay="2s"), *fix_turns())
    # One iteration allowed: the rate-limited run must not spend it.
    result = loop("--ralph-max-iterations", "1",
                  ini="ralph_rate_limit_backoff = 30\nralph_max_pause = 10")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, out
    assert (pytester.path / "fix.txt").read_text() == "fixed\n"
    ((n, outcome, why, pause),) = agent_attempts(pytester)
    # The CLI's "Suggested retry after 2s" decides the pause, not the 30 s back-off.
    assert (n, outcome) == (1, "rate-limited") and 2.0 <= pause < 3.0, (why, pause)
    assert "exceeded your current quota" in why
    assert [o[:2] for o in agent_outcomes(pytester)] == [(1, "ok")]
    assert "the iteration is not spent" in out
    assert server.statuses() == [429, 200, 200]


@pytest.mark.parametrize("moved", [False, True], ids=["default-home", "GEMINI_CLI_HOME"])
def test_loop_completes_confined(pytester: pytest.Pytester,
                                 loop: Callable[..., pytest.RunResult],
                                 server: GeminiServer, monkeypatch: pytest.MonkeyPatch,
                                 moved: bool) -> None:
    """The real CLI in the loop's sandbox, with a home folder outside the project and
    outside /tmp, as a user's is, and the CLI's state in its default ``~/.gemini`` (or, with
    ``moved``, in ``$GEMINI_CLI_HOME/.gemini``, the rest of that folder staying read-only):
    it writes the project and its own state, and nothing else."""
    sandbox = probe("auto")
    if not sandbox.confined:
        if os.environ.get("CI"):
            pytest.fail(f"bubblewrap cannot confine here: {sandbox.reason}", pytrace=False)
        pytest.skip(f"bubblewrap cannot confine here: {sandbox.reason}")
    TEST_HOMES.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(dir=TEST_HOMES))
    try:
        (home / "notes.txt").write_text("mine\n")  # a file of the user's
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.delenv("TMPDIR")  # the sandbox's /tmp is private: the CLI's default
        cli_home = home / "gemini-cli-home" if moved else home
        gemini_home = write_settings(cli_home)
        if moved:
            monkeypatch.setenv("GEMINI_CLI_HOME", str(cli_home))
        mark = uuid.uuid4().hex[:12]
        # Outside the project: new files in HOME, /tmp and a folder of this user's that is
        # neither (the CLI cache), each writable to an unconfined agent; with the state
        # moved, also one beside the .gemini of GEMINI_CLI_HOME.
        escapes = [home / f"escape-{mark}.txt", Path(f"/tmp/escape-{mark}.txt"),
                   CACHE / f"escape-{mark}.txt"]
        if moved:
            escapes.append(cli_home / f"escape-{mark}.txt")
        cmd = "; ".join([
            "printf 'fixed\\n' > fix.txt",
            "(echo theirs > \"$HOME/notes.txt\" && echo changed notes) 2>&1",
            *(f"(echo escaped > {p} && echo wrote {p.name} in {p.parent.name}) 2>&1"
              for p in escapes),
            f"echo gemini-state > {gemini_home}/agent-note-{mark}.txt"])
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
        shown = "~/gemini-cli-home/.gemini" if moved else "~/.gemini"
        assert shown in result.stdout.lines[0], result.stdout.lines[0]
        assert (pytester.path / "fix.txt").read_text() == "fixed\n"
        # The CLI's own state folder was writable: the scripted note and its project list.
        assert (gemini_home / f"agent-note-{mark}.txt").read_text() == "gemini-state\n"
        assert (gemini_home / "projects.json").is_file(), sorted(gemini_home.rglob("*"))
        # Inside, the user's file was read-only, new files in the private HOME and /tmp
        # "worked" (and vanished with the sandbox), the real folder outside was read-only.
        (answer,) = [a["response"]["output"] for a in server.function_responses().values()]
        assert "changed notes" not in answer, answer
        assert f"wrote escape-{mark}.txt in {home.name}" in answer, answer
        assert f"wrote escape-{mark}.txt in tmp" in answer, answer
        assert f"wrote escape-{mark}.txt in {CACHE.name}" not in answer, answer
        if moved:  # GEMINI_CLI_HOME itself stayed read-only: only its .gemini was bound
            assert f"wrote escape-{mark}.txt in {cli_home.name}" not in answer, answer
        assert answer.count("Read-only file system") == (3 if moved else 2), answer
        assert [o[:2] for o in agent_outcomes(pytester)] == [(1, "ok")]
        report = report_text(pytester)
        assert "| 1 | US-001 | exit 0 | ok |" in report, report
        assert any(PROVEN["gemini"].version in h.get("user-agent", "") for h in server.headers)
        assert server.remaining == 0
    finally:
        shutil.rmtree(home, ignore_errors=True)
