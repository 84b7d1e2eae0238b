"""The real Claude Code CLI (pinned, see tests/support/claude_cli.py) against a scripted model.

The CLI runs offline: ``ANTHROPIC_BASE_URL`` points at a loopback
:class:`~tests.support.model_server.ModelServer` that plays the model, so the CLI executes real
tool calls in a temporary project and reports real results and API errors. The first part runs
the CLI directly with the ``claude`` preset's argv; the second runs the whole loop
(``pytest --ralph --ralph-agent claude``) in a pytester subprocess.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.support.claude_cli import installed_executable
from tests.support.loop import report_text
from tests.support.model_server import ApiError, ModelServer, Text, ToolUse
from tests.support.prd import story

# Skip only when claude_executable() would return None, and never under CI (the fixture
# `claude_bin` then fails); the install itself (which fails loudly when npm fails) happens in
# that session fixture, not at collection.
if installed_executable() is None and shutil.which("npm") is None and not os.environ.get("CI"):
    pytest.skip("the Claude Code CLI is not installed and npm is not on PATH to install it",
                allow_module_level=True)

#: The argv of the ``claude`` agent preset (prompt on stdin).
PRESET_ARGV = ("-p", "--output-format", "stream-json", "--verbose",
               "--dangerously-skip-permissions")

#: Seconds one CLI call may take (a normal one takes about 0.5 s, an API error 1-3 s).
CLI_TIMEOUT = 30.0

#: Seconds one whole loop run (pytester subprocess) may take.
LOOP_TIMEOUT = 60.0


def run_claude(claude_bin: Path, env: dict[str, str], cwd: Path,
               prompt: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run the CLI with the preset argv, ``prompt`` on stdin; return it and its JSON lines."""
    proc = subprocess.run([str(claude_bin), *PRESET_ARGV], input=prompt, capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, **env}, timeout=CLI_TIMEOUT,
                          check=False)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc, lines


def result_of(proc: subprocess.CompletedProcess[str],
              lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``type: result`` object, which must be the last stdout line."""
    assert lines, f"no output; exit {proc.returncode}; stderr:\n{proc.stderr}"
    result = lines[-1]
    assert result.get("type") == "result", lines[-1]
    return result


# -- the CLI alone -----------------------------------------------------------------------------


def test_write_tool_call_then_success(claude_bin: Path, claude_env: dict[str, str],
                                      model_server: ModelServer, tmp_path: Path) -> None:
    target = tmp_path / "done.txt"
    model_server.add([Text("Creating the file."),
                      ToolUse("Write", {"file_path": str(target), "content": "all done\n"})],
                     [Text("Done: created done.txt.")])
    proc, lines = run_claude(claude_bin, claude_env, tmp_path, "Create done.txt, please.")

    assert proc.returncode == 0, proc.stderr
    assert target.read_text() == "all done\n"
    result = result_of(proc, lines)
    assert result["is_error"] is False
    assert result["subtype"] == "success"
    assert result["terminal_reason"] == "completed"
    assert result["result"] == "Done: created done.txt."
    assert result["num_turns"] == 2
    assert isinstance(result["total_cost_usd"], float) and result["total_cost_usd"] > 0
    assert result["api_error_status"] is None
    # stream-json: init first, then the tool call and its result as separate events.
    assert (lines[0]["type"], lines[0]["subtype"]) == ("system", "init")
    assert lines[0]["permissionMode"] == "bypassPermissions"
    tool_uses = [b for ln in lines if ln["type"] == "assistant"
                 for b in ln["message"]["content"] if b["type"] == "tool_use"]
    assert [(b["name"], b["input"]["file_path"]) for b in tool_uses] == [("Write", str(target))]
    # What the CLI sent: the prompt, then the tool_result of the real Write.
    assert model_server.remaining == 0
    assert len(model_server.agent_requests) == 2
    assert "Create done.txt, please." in list(model_server.texts())
    (tool_result,) = model_server.tool_results()
    assert tool_result["tool_use_id"] == tool_uses[0]["id"]
    assert "File created successfully" in str(tool_result["content"])
    assert not tool_result.get("is_error")
    assert all(h.get("x-api-key") == "any" for h in model_server.headers)
    assert model_server.unknown == []


@pytest.mark.parametrize(("status", "error_type", "retry_after"),
                         [(500, "api_error", None), (429, "rate_limit_error", 0.1)])
def test_api_error_is_an_error_result(claude_bin: Path, claude_env: dict[str, str],
                                      model_server: ModelServer, tmp_path: Path, status: int,
                                      error_type: str, retry_after: float | None) -> None:
    model_server.add(ApiError(status, message="mock failure", retry_after=retry_after))
    proc, lines = run_claude(claude_bin, claude_env, tmp_path, "Create done.txt, please.")

    assert proc.returncode == 1, proc.stdout
    result = result_of(proc, lines)
    assert result["is_error"] is True
    assert result["api_error_status"] == status
    assert result["api_error_type"] == error_type
    assert result["terminal_reason"] == "api_error"
    assert "mock failure" in result["result"]
    # CLAUDE_CODE_MAX_RETRIES=1: the request and one retry (same body), both refused.
    assert [entry[2] for entry in model_server.log] == [status, status]
    retries = [ln for ln in lines if ln.get("subtype") == "api_retry"]
    assert [r["error_status"] for r in retries] == [status]
    assert model_server.remaining == 0


# -- the whole loop: pytest --ralph --ralph-agent claude ------------------------------------------


DONE_CRITERION = {"text": "done.txt exists", "exists": "done.txt"}


@pytest.fixture
def loop(pytester: pytest.Pytester, claude_env: dict[str, str],
         monkeypatch: pytest.MonkeyPatch, write_prd: Callable[..., Path]) -> Callable[..., Any]:
    """loop(*args, ini="") writes the one-story PRD and an ini, runs ``pytest --ralph --ralph-agent
    claude`` in a subprocess with the offline environment, and returns the run result."""
    for name, value in claude_env.items():
        monkeypatch.setenv(name, value)
    for name in list(os.environ):  # settings from the outer environment must not leak in
        if name.startswith("PYTEST_RALPH_") and name != "PYTEST_RALPH_CACHE":
            monkeypatch.delenv(name)
    write_prd(story("US-001", DONE_CRITERION))

    def run(*args: str, ini: str = "") -> pytest.RunResult:
        pytester.makeini(f"[pytest]\n{ini}\n")
        return pytester.runpytest_subprocess(
            "--ralph", "--ralph-agent", "claude", "--ralph-agent-timeout", str(CLI_TIMEOUT),
            *args, timeout=LOOP_TIMEOUT)

    return run


def _db_rows(pytester: pytest.Pytester, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(pytester.path / ".pytest_ralph" / "ralph.db")) as conn:
        return [tuple(row) for row in conn.execute(sql).fetchall()]


def agent_outcomes(pytester: pytest.Pytester) -> list[tuple[int, str, str]]:
    """``(iteration, outcome, why)`` of every agent run that spent an iteration (table
    ``agent_runs`` of ``.pytest_ralph/ralph.db``), in order."""
    return [(int(n), str(o), str(w or "")) for n, o, w in _db_rows(
        pytester, "SELECT n, outcome, why FROM agent_runs ORDER BY n")]


def agent_attempts(pytester: pytest.Pytester) -> list[tuple[int, str, str, float]]:
    """``(iteration, outcome, why, pause seconds)`` of every agent run that did not spend an
    iteration (table ``agent_attempts``: rate limits), in order."""
    return [(int(n), str(o), str(w or ""), float(p)) for n, o, w, p in _db_rows(
        pytester, "SELECT n, outcome, why, pause FROM agent_attempts ORDER BY id")]


def test_loop_completes_with_a_real_write(pytester: pytest.Pytester, loop: Callable[..., Any],
                                          model_server: ModelServer) -> None:
    model_server.add([ToolUse("Write", {"file_path": str(pytester.path / "done.txt"),
                                        "content": "done\n"})],
                     [Text("Created done.txt.")])
    result = loop()
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, out
    assert (pytester.path / "done.txt").read_text() == "done\n"
    assert [o[:2] for o in agent_outcomes(pytester)] == [(1, "ok")]
    assert agent_attempts(pytester) == []
    report = report_text(pytester)
    assert "| 1 | US-001 | exit 0 | ok |" in report, report
    assert "2 turns" in out  # from the CLI's result record
    # The loop's prompt reached the model, and the real Write's result came back.
    assert any("done.txt exists" in t for t in model_server.texts())
    (tool_result,) = model_server.tool_results()
    assert "File created successfully" in str(tool_result["content"])
    assert model_server.remaining == 0


def test_loop_stops_after_repeated_api_errors(pytester: pytest.Pytester,
                                              loop: Callable[..., Any],
                                              model_server: ModelServer) -> None:
    model_server.add(ApiError(500, repeat=None))
    result = loop()
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 7, out
    outcomes = agent_outcomes(pytester)
    assert [o[:2] for o in outcomes] == [(1, "api-error"), (2, "api-error"), (3, "api-error")]
    assert all("500" in why for _, _, why in outcomes), outcomes
    assert agent_attempts(pytester) == []
    assert not (pytester.path / "done.txt").exists()
    # One CLI call per iteration, each sending the request and its one retry.
    assert [entry[2] for entry in model_server.log] == [500] * 6
    assert "| 3 | US-001 | exit 1 | api-error: result is_error: API Error: 500" in (
        report_text(pytester))


def test_loop_pauses_on_rate_limit_then_completes(pytester: pytest.Pytester,
                                                  loop: Callable[..., Any],
                                                  model_server: ModelServer) -> None:
    model_server.add(ApiError(429, retry_after=0.1),
                     [ToolUse("Write", {"file_path": str(pytester.path / "done.txt"),
                                        "content": "done\n"})],
                     [Text("Created done.txt.")])
    # One iteration allowed: the rate-limited run must not spend it.
    result = loop("--ralph-max-iterations", "1",
                  ini="ralph_rate_limit_backoff = 1\nralph_max_pause = 5")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, out
    assert (pytester.path / "done.txt").read_text() == "done\n"
    ((n, outcome, why, pause),) = agent_attempts(pytester)
    assert (n, outcome) == (1, "rate-limited") and 1.0 <= pause < 2.0  # as really paused
    assert "429" in why
    assert [o[:2] for o in agent_outcomes(pytester)] == [(1, "ok")]
    assert "the iteration is not spent" in out
    assert "| 1 | rate-limited |" in report_text(pytester)


def test_the_real_cli_runs_confined_and_keeps_its_own_state(
        pytester: pytest.Pytester, loop: Callable[..., Any], model_server: ModelServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 20: the real Claude Code CLI in the sandbox, with a home folder outside the
    project and outside /tmp, as a user's is: it writes the project and its own state
    (~/.claude, ~/.claude.json), and nothing else (a Write to the home folder fails)."""
    import pwd
    import shutil
    import tempfile

    base = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "pytest-ralph-test-homes"
    base.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(dir=base))
    (home / ".claude.json").write_text("{}\n")  # a user's, from an earlier run of the CLI
    (home / "notes.txt").write_text("mine\n")
    try:
        monkeypatch.setenv("HOME", str(home))
        outside = home / "outside.txt"
        model_server.add([ToolUse("Write", {"file_path": str(pytester.path / "done.txt"),
                                            "content": "done\n"}),
                          ToolUse("Write", {"file_path": str(home / "notes.txt"),
                                            "content": "the agent's\n"}),
                          ToolUse("Write", {"file_path": str(outside), "content": "x\n"})],
                         [Text("Created done.txt.")])
        result = loop("--ralph-sandbox", "required")
        out = result.stdout.str() + result.stderr.str()
        assert result.ret == 0, out
        assert result.stdout.lines[0].startswith(
            "pytest-ralph: agent and check phases confined by bubblewrap"), out
        assert "~/.claude" in result.stdout.lines[0]
        assert (pytester.path / "done.txt").read_text() == "done\n"
        assert (home / "notes.txt").read_text() == "mine\n"
        assert not outside.exists()  # written in its private home folder, gone with it
        results = [str(r["content"]) for r in model_server.tool_results()]
        assert "File created successfully" in results[0], results
        # Your own files stay yours: the CLI's atomic replace of one is refused.
        assert "EBUSY" in results[1] or "read-only" in results[1].lower(), results
        # The CLI's own state survived its run: it was written where it belongs.
        assert (home / ".claude").is_dir() and any((home / ".claude").iterdir())
        assert json.loads((home / ".claude.json").read_text()) != {}, \
            (home / ".claude.json").read_text()
    finally:
        shutil.rmtree(home, ignore_errors=True)
