"""The real aider (pinned in pytest_ralph/agents/proven.py) against a scripted model.

aider runs offline: litellm's ``ANTHROPIC_API_BASE`` points it at a loopback
:class:`~tests.support.model_server.ModelServer` speaking the Anthropic Messages API
(:mod:`tests.support.aider_cli`), whose scripted answers are aider edit blocks (aider sends no
tools), so aider really edits files of a temporary project and really reports the API's
errors, with its retry back-off cut to under a second. The first part runs the ``aider``
preset's exact argv (the prompt in its file) through the loop's own agent runner
(:func:`pytest_ralph.agents.run.run_agent`, the preset's reader classifying): aider exits 0
whatever the API answered, so only the reader tells success from an HTTP 500 or 429. The
second runs the whole loop (``pytest --ralph --ralph-agent aider``) in a pytester subprocess:
HTTP 500 ends it with exit 7, and a run confined by bubblewrap completes with the project
edited and nothing written outside it but aider's ``~/.aider``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import sqlite3
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.agents.presets import PRESETS, reader_for
from pytest_ralph.agents.readers import AiderReader
from pytest_ralph.agents.run import AgentRun, run_agent
from pytest_ralph.sandbox.bwrap import probe
from tests.support.aider_cli import MODEL, offline_env, whole_edit, write_home
from tests.support.loop import report_text
from tests.support.model_server import ApiError, ModelServer, Text
from tests.support.prd import story
from tests.support.real_cli import (
    CliInstallError,
    bin_dir,
    cache_dir,
    cli_executable,
)

# aider and these tests need git; never skipped under CI (the fixture `aider_bin` then
# fails). The install (pip, into a virtualenv of its own) happens in that fixture.
if shutil.which("git") is None and not os.environ.get("CI"):
    pytest.skip("git is not on PATH (aider and these tests need it)", allow_module_level=True)

#: Seconds one CLI run may take (a normal one takes about 3 s: aider imports litellm).
CLI_TIMEOUT = 60.0

#: Seconds one whole loop run (pytester subprocess) may take.
LOOP_TIMEOUT = 180.0

PROMPT = "Make hello.py print bye, please."

#: The install cache and the folder holding only the pinned ``aider``, found at import time:
#: ``pytester`` moves ``HOME`` (which the default cache folder is under) during a test.
CACHE = cache_dir()
BIN_DIR = bin_dir("aider")

#: Where the confined loop's home folders go: outside /tmp (which the sandbox makes private)
#: and outside the project, as a user's home is.
TEST_HOMES = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "pytest-ralph-test-homes"


@pytest.fixture(scope="session")
def aider_bin() -> Path:
    """The pinned real aider, installed into the cache (a virtualenv of its own) on first use.

    Fails without git on PATH; skips (with pip's output) when the install fails, except under
    CI, where that fails.
    """
    if shutil.which("git") is None:
        pytest.fail("git is not on PATH: CI must run the real-CLI tests", pytrace=False)
    try:
        exe = cli_executable("aider")
    except CliInstallError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"installing the pinned aider failed:\n{exc}", pytrace=False)
        pytest.skip(f"the pinned aider cannot be installed here:\n{exc}")
    if exe is None:  # pragma: no cover - pip is this interpreter's own
        if os.environ.get("CI"):
            pytest.fail("aider is not installed and cannot be: CI must run the real-CLI tests",
                        pytrace=False)
        pytest.skip("aider is not installed and cannot be")
    return exe


@pytest.fixture
def server() -> Iterator[ModelServer]:
    """A running :class:`ModelServer` that scripts every request (aider sends no tools)."""
    with ModelServer(side_requests_use_script=True) as running:
        yield running


@pytest.fixture
def aider_env(aider_bin: Path, server: ModelServer, tmp_path_factory: pytest.TempPathFactory,
              monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The variables that run the real aider offline against ``server``: a fresh ``HOME``
    outside the project, ``PATH`` starting with the folder holding only the pinned
    ``aider`` (set in this process too: the runner finds the executable on it)."""
    env = offline_env(server, write_home(tmp_path_factory.mktemp("home")), BIN_DIR)
    assert shutil.which("aider", path=env["PATH"]) == str(BIN_DIR / "aider")
    monkeypatch.setenv("PATH", env["PATH"])
    return env


def run_preset(env: dict[str, str], project: Path, runs: Path) -> AgentRun:
    """The ``aider`` preset's exact argv, the prompt in its file (and on stdin), run by the
    loop's agent runner with the reader :func:`reader_for` gives that argv (unconfined: the
    loop's sandbox is exercised below)."""
    argv = PRESETS["aider"].argv()
    reader = reader_for(argv)
    assert isinstance(reader, AiderReader)
    runs.mkdir(parents=True, exist_ok=True)
    return run_agent(argv, prompt=PROMPT, prompt_file=runs / "prompt.md", cwd=project,
                     timeout=CLI_TIMEOUT, log_path=runs / "agent.log", env=env, reader=reader)


def log_text(run: AgentRun) -> str:
    return run.log_path.read_text(encoding="utf-8", errors="replace")


def statuses(server: ModelServer) -> list[int]:
    """The HTTP status of every model request, in order."""
    return [status for _method, _path, status in server.log]


def git(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(project), *args], capture_output=True, text=True,
                          check=False)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder, not a git repository, with ``hello.py``."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "hello.py").write_text("print('hello')\n")
    return folder


# -- the CLI alone, through the agent runner ---------------------------------------------------


def test_success_edits_the_file(aider_env: dict[str, str], server: ModelServer,
                                project: Path, tmp_path: Path) -> None:
    server.add([Text("I will change the greeting.\n\n" +
                     whole_edit("hello.py", "print('bye')\n"))])
    run = run_preset(aider_env, project, tmp_path / "run")

    log = log_text(run)
    assert (run.outcome, run.exit_code) == ("ok", 0), log
    assert (project / "hello.py").read_text() == "print('bye')\n"
    assert "Applied edit to hello.py" in log
    # One model request; its usage line (aider counts the tokens itself) gives the tokens
    # and, from the model's prices in ~/.aider.model.metadata.json, the cost.
    assert statuses(server) == [200] and server.remaining == 0, server.log
    assert f"Tokens: {run.input_tokens} sent, {run.output_tokens} received. Cost: $0.0020 " \
           "message, $0.0020 session." in log
    assert run.turns == 1 and run.input_tokens and run.output_tokens, log
    assert run.cost_usd == 0.002, log
    assert run.detail == ""
    assert server.requests[0]["model"] == MODEL.split("/", 1)[1]
    assert server.requests[0]["stream"] is True and "tools" not in server.requests[0]
    assert any(PROMPT in text for text in server.texts())
    assert server.headers[0].get("x-api-key") == aider_env["ANTHROPIC_API_KEY"]
    assert server.unknown == []
    # Git, as the preset's docstring says: no repository here, so aider made one (and
    # ignored its own files), but --no-auto-commits: the edit stays in the working tree.
    assert (project / ".git").is_dir()
    assert ".aider*" in (project / ".gitignore").read_text().splitlines()
    assert git(project, "rev-parse", "--verify", "HEAD").returncode != 0  # no commit
    assert "hello.py" in git(project, "status", "--porcelain").stdout
    # Nothing about updates, analytics or an unknown model: all off or known.
    assert "Newer aider version" not in log and "analytics" not in log.lower()
    assert "Unknown context window" not in log and "raw.githubusercontent" not in log


def test_success_in_a_repository_commits_nothing(aider_env: dict[str, str],
                                                 server: ModelServer, project: Path,
                                                 tmp_path: Path) -> None:
    """In a git repository with the user's uncommitted change to the very file: aider
    neither commits that change first nor its own edit (one model request: no commit
    message asked for)."""
    git(project, "init", "-q")
    git(project, "-c", "user.name=u", "-c", "user.email=u@example.com", "add", "hello.py")
    git(project, "-c", "user.name=u", "-c", "user.email=u@example.com", "commit", "-qm", "one")
    (project / "hello.py").write_text("print('hello, world')\n")  # the user's, uncommitted
    head = git(project, "rev-parse", "HEAD").stdout
    server.add([Text(whole_edit("hello.py", "print('bye')\n"))])
    run = run_preset(aider_env, project, tmp_path / "run")

    assert (run.outcome, run.exit_code) == ("ok", 0), log_text(run)
    assert (project / "hello.py").read_text() == "print('bye')\n"
    assert git(project, "rev-parse", "HEAD").stdout == head
    assert git(project, "rev-list", "--count", "HEAD").stdout.strip() == "1"
    assert statuses(server) == [200]


def test_http_500_is_an_api_error(aider_env: dict[str, str], server: ModelServer,
                                  project: Path, tmp_path: Path) -> None:
    server.add(ApiError(500, message="upstream exploded", repeat=None))
    run = run_preset(aider_env, project, tmp_path / "run")

    log = log_text(run)
    # aider 0.86.2 exits 0 after giving up: only the reader sees the error.
    assert (run.outcome, run.exit_code) == ("api-error", 0), log
    assert run.detail.startswith(
        "litellm.InternalServerError: AnthropicException - b'{\"type\": \"error\", "
        "\"error\": {\"type\": \"api_error\", \"message\": \"upstream exploded\"}"), run.detail
    assert "The API provider's servers are down or overloaded." in log
    assert "Retrying in 0.2 seconds..." in log
    # RETRY_TIMEOUT 0.5 s: attempts after 0.25 s and 0.5 s of back-off, then it gives up.
    assert statuses(server) == [500, 500, 500]
    assert (project / "hello.py").read_text() == "print('hello')\n"
    assert run.duration < 20


def test_http_429_is_a_rate_limit_with_its_retry_time(aider_env: dict[str, str],
                                                      server: ModelServer, project: Path,
                                                      tmp_path: Path) -> None:
    server.add(ApiError(429, message="Rate limit reached for requests. Please try again "
                                     "in 2s.", retry_after=2, repeat=None))
    run = run_preset(aider_env, project, tmp_path / "run")

    log = log_text(run)
    assert (run.outcome, run.exit_code) == ("rate-limited", 0), log
    assert run.detail.startswith("litellm.RateLimitError: AnthropicException - "), run.detail
    assert "rate_limit_error" in run.detail
    # The API's message gives the time (aider prints its own back-off, not retry-after).
    assert run.retry_after == 2.0
    assert "The API provider has rate limited you." in log
    assert statuses(server) == [429, 429, 429]


def test_http_401_is_an_authentication_error(aider_env: dict[str, str], server: ModelServer,
                                             project: Path, tmp_path: Path) -> None:
    server.add(ApiError(401, message="invalid x-api-key", repeat=None))
    run = run_preset(aider_env, project, tmp_path / "run")

    assert (run.outcome, run.exit_code) == ("api-error", 0), log_text(run)
    assert run.detail.startswith("authentication failed (check the API key): "
                                 "litellm.AuthenticationError: AnthropicException"), run.detail
    assert statuses(server) == [401]  # not retried


def test_a_retry_that_recovers_is_ok(aider_env: dict[str, str], server: ModelServer,
                                     project: Path, tmp_path: Path) -> None:
    server.add(ApiError(500, sticky=False), [Text(whole_edit("hello.py", "print('bye')\n"))])
    run = run_preset(aider_env, project, tmp_path / "run")

    log = log_text(run)
    assert "litellm.InternalServerError" in log
    assert (run.outcome, run.exit_code) == ("ok", 0), log
    assert (project / "hello.py").read_text() == "print('bye')\n"
    assert statuses(server) == [500, 200]


# -- the whole loop: pytest --ralph --ralph-agent aider ----------------------------------------


FIX_CRITERION = {"text": "fix.txt says fixed", "run": "grep -qx fixed fix.txt"}


@pytest.fixture
def loop(pytester: pytest.Pytester, aider_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
         write_prd: Any) -> Callable[..., pytest.RunResult]:
    """loop(*args, ini="") writes the one-story PRD and an ini, runs ``pytest --ralph
    --ralph-agent aider`` in a subprocess with the offline environment, and returns the run
    result."""
    for name, value in aider_env.items():
        monkeypatch.setenv(name, value)
    for name in list(os.environ):  # settings from the outer environment must not leak in
        if name.startswith("PYTEST_RALPH_") and name != "PYTEST_RALPH_CACHE":
            monkeypatch.delenv(name)
    write_prd(story("US-001", FIX_CRITERION))

    def run(*args: str, ini: str = "") -> pytest.RunResult:
        pytester.makeini(f"[pytest]\n{ini}\n")
        return pytester.runpytest_subprocess(
            "--ralph", "--ralph-agent", "aider", "--ralph-agent-timeout", str(CLI_TIMEOUT),
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


def test_loop_stops_after_repeated_api_errors(pytester: pytest.Pytester,
                                              loop: Callable[..., pytest.RunResult],
                                              server: ModelServer) -> None:
    server.add(ApiError(500, repeat=None))
    result = loop()
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 7, out
    outcomes = agent_outcomes(pytester)
    assert [o[:2] for o in outcomes] == [(1, "api-error"), (2, "api-error"), (3, "api-error")]
    assert all("litellm.InternalServerError" in why for _, _, why in outcomes), outcomes
    assert agent_attempts(pytester) == []
    assert statuses(server) == [500] * 9  # three runs of three attempts
    assert "| 3 | US-001 | exit 0 | api-error: litellm.InternalServerError" in report_text(
        pytester)


def test_loop_pauses_on_rate_limit_then_completes(pytester: pytest.Pytester,
                                                  loop: Callable[..., pytest.RunResult],
                                                  server: ModelServer) -> None:
    # One run of aider's three attempts is rate-limited, the next succeeds.
    server.add(ApiError(429, message="Please try again in 1s.", repeat=3, sticky=False),
               [Text(whole_edit("fix.txt", "fixed\n"))])
    # One iteration allowed: the rate-limited run must not spend it.
    result = loop("--ralph-max-iterations", "1", ini="ralph_max_pause = 5")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, out
    assert (pytester.path / "fix.txt").read_text() == "fixed\n"
    ((n, outcome, why, pause),) = agent_attempts(pytester)
    # The retry time the API stated (1 s) decides the pause.
    assert (n, outcome) == (1, "rate-limited") and 1.0 <= pause < 2.0, (why, pause)
    assert "litellm.RateLimitError" in why
    assert [o[:2] for o in agent_outcomes(pytester)] == [(1, "ok")]
    assert "the iteration is not spent" in out
    assert statuses(server) == [429, 429, 429, 200]


def _tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_loop_completes_confined(pytester: pytest.Pytester,
                                 loop: Callable[..., pytest.RunResult],
                                 aider_env: dict[str, str], server: ModelServer,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The real aider in the loop's sandbox, with a home folder outside the project and
    outside /tmp, as a user's is: it writes the project and its ``~/.aider``, and nothing
    else. aider itself refuses edit blocks for paths outside the project (``... is not in
    the subpath of ...``), so the writes elsewhere come from a command aider runs: its lint
    command (``AIDER_LINT_CMD``, run through the shell on each edited file of a language it
    knows)."""
    sandbox = probe("auto")
    if not sandbox.confined:
        if os.environ.get("CI"):
            pytest.fail(f"bubblewrap cannot confine here: {sandbox.reason}", pytrace=False)
        pytest.skip(f"bubblewrap cannot confine here: {sandbox.reason}")
    TEST_HOMES.mkdir(parents=True, exist_ok=True)
    home = write_home(Path(tempfile.mkdtemp(dir=TEST_HOMES)))
    try:
        (home / "notes.txt").write_text("mine\n")  # a file of the user's
        mark = uuid.uuid4().hex[:12]
        # Outside the project: new files in HOME, /tmp and a folder of this user's that is
        # neither (the CLI cache), each writable to an unconfined agent.
        escapes = [home / f"escape-{mark}.txt", Path(f"/tmp/escape-{mark}.txt"),
                   CACHE / f"escape-{mark}.txt"]
        lint = home / "lint.sh"
        lint.write_text("\n".join([
            "{",
            '(echo theirs > "$HOME/notes.txt" && echo changed notes) 2>&1',
            *(f"(echo escaped > {p} && echo wrote {p.name} in {p.parent.name}) 2>&1"
              for p in escapes),
            f'echo aider-state > "$HOME/.aider/agent-note-{mark}.txt"',
            "} > lint-report.txt", "exit 0", ""]))
        before = _tree(home)
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("AIDER_LINT_CMD", f"sh {lint}")
        # aider lints a file of a language it knows after editing it: fix.py, not fix.txt.
        server.add([Text(whole_edit("fix.txt", "fixed\n") + "\n" +
                         whole_edit("fix.py", "FIXED = True\n"))])
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
        assert "~/.aider" in result.stdout.lines[0], result.stdout.lines[0]
        assert (pytester.path / "fix.txt").read_text() == "fixed\n"
        # Inside, the user's file was read-only, new files in the private HOME and /tmp
        # "worked" (and vanished with the sandbox), the real folder outside was read-only.
        report = (pytester.path / "lint-report.txt").read_text()
        assert "changed notes" not in report, report
        assert f"wrote escape-{mark}.txt in {home.name}" in report, report
        assert f"wrote escape-{mark}.txt in tmp" in report, report
        assert f"wrote escape-{mark}.txt in {CACHE.name}" not in report, report
        assert report.count("Read-only file system") == 2, report
        # What aider wrote in HOME: its own ~/.aider only (which was writable), the lint
        # command's note included. The loop made ~/.cache/aider (to bind it writable; aider
        # 0.86.2 leaves it empty) and keeps its check phases' bytecode in
        # ~/.cache/pytest-ralph.
        new = {p for p in _tree(home) - before
               if p not in (".cache", ".cache/aider") and not p.startswith(".cache/pytest-ralph")}
        assert all(p == ".aider" or p.startswith(".aider/") for p in new), repr(sorted(new))
        assert list((home / ".cache" / "aider").iterdir()) == []
        assert (home / ".aider" / f"agent-note-{mark}.txt").read_text() == "aider-state\n"
        assert (home / ".aider" / "installs.json").is_file(), sorted(new)
        # In the project: its chat history, and no commit.
        assert (pytester.path / ".aider.chat.history.md").is_file()
        assert git(pytester.path, "rev-parse", "--verify", "HEAD").returncode != 0
        assert [o[:2] for o in agent_outcomes(pytester)] == [(1, "ok")]
        assert "| 1 | US-001 | exit 0 | ok |" in report_text(pytester)
        assert statuses(server) == [200]
    finally:
        shutil.rmtree(home, ignore_errors=True)
