"""pytest_ralph.testing: scripted agents that drive real loops without a model."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.testing import (
    AgentCall,
    AgentFactory,
    Patch,
    ScriptedAgent,
    ScriptError,
    read_calls,
    replay_command,
    write_replay,
)
from tests.support.loop import run_json
from tests.support.prd import story

A_TXT = {"text": "a.txt exists", "run": "test -f a.txt"}


def agent_log(pytester: pytest.Pytester, n: int) -> str:
    (path,) = (pytester.path / ".pytest_ralph" / "runs").glob(f"*/iteration-{n:03d}/agent.log")
    return path.read_text()


def client(command: str, cwd: Path, prompt: str = "",
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run an agent command once, as the loop would (prompt on stdin)."""
    return subprocess.run(shlex.split(command), cwd=cwd, input=prompt, capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=60)


# --- Driving real loops ---------------------------------------------------------------------


def test_a_callable_step_fixes_the_file_on_iteration_2(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        ralph_agent: AgentFactory) -> None:
    write_prd(story("US-001", A_TXT))
    seen: list[int | None] = []  # a closure: callables run in this process

    def look(call: AgentCall) -> None:
        seen.append(call.iteration)

    def fix(call: AgentCall) -> int:
        seen.append(call.iteration)
        (call.cwd / "a.txt").write_text("fixed\n")
        return 0

    agent = ralph_agent(look, fix)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["pytest-ralph: complete (exit 0) after 2 iterations*"])
    assert seen == [1, 2]
    first, second = agent.calls
    assert (first.n, first.iteration, second.n, second.iteration) == (1, 1, 2, 2)
    assert "- [US-001::AC1] a.txt exists" in first.prompt
    assert "`test -f a.txt`" in first.prompt
    assert first.cwd == pytester.path
    assert first.env["PYTEST_RALPH_CONTROLLER"] == "1"
    assert first.prompt_file is not None
    assert first.prompt_file.read_text() == first.prompt
    assert not agent.errors


def test_dict_steps_write_delete_patch_exit_and_print(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        ralph_agent: AgentFactory) -> None:
    (pytester.path / "old.txt").write_text("stale\n")
    (pytester.path / "src.txt").write_text("one\nold line\nthree\n")
    write_prd(story("US-001", {"text": "a.txt says fixed", "file": "sub/a.txt",
                               "contains": "^fixed$"},
                    {"text": "old.txt is gone", "run": "test ! -e old.txt"},
                    {"text": "src.txt is patched", "file": "src.txt",
                     "contains": "^new line$"}))
    diff = ("--- a/src.txt\n+++ b/src.txt\n@@ -1,3 +1,3 @@\n one\n-old line\n+new line\n"
            " three\n")
    agent = ralph_agent(
        {"files": {"sub/a.txt": "fixed\n"}, "stdout": "OUT-ONE\n", "stderr": "ERR-ONE\n",
         "exit": 3},
        Patch(files={"old.txt": None}, patch=diff, stdout="OUT-TWO\n"))
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["  Tried: agent `python*` exit 3 in *",
                                 "pytest-ralph: complete (exit 0) after 2 iterations*"])
    assert (pytester.path / "sub" / "a.txt").read_text() == "fixed\n"
    assert not (pytester.path / "old.txt").exists()
    assert (pytester.path / "src.txt").read_text() == "one\nnew line\nthree\n"
    log = agent_log(pytester, 1)
    assert "OUT-ONE" in log and "ERR-ONE" in log
    assert "OUT-TWO" in agent_log(pytester, 2)
    agents = [it["agent"] for it in run_json(pytester)["iterations"][1:]]
    assert [a["exit_code"] for a in agents] == [3, 0]
    assert len(agent.calls) == 2


def test_a_callable_that_raises_is_agent_exit_1_with_its_traceback(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        ralph_agent: AgentFactory) -> None:
    write_prd(story("US-001", A_TXT))

    def broken(call: AgentCall) -> None:
        raise AssertionError("the prompt was not what I expected")

    agent = ralph_agent(broken)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command,
                                           "--ralph-max-iterations", "1")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["  Tried: agent `python*` exit 1 in *"])
    log = agent_log(pytester, 1)
    assert "Traceback (most recent call last)" in log
    assert "AssertionError: the prompt was not what I expected" in log
    (error,) = agent.errors
    assert error.n == 1 and isinstance(error.error, AssertionError)


def test_a_path_outside_the_project_is_refused_with_exit_2(
        pytester: pytest.Pytester, write_prd: Callable[..., Path], tmp_path: Path) -> None:
    """A hand-written replay script gets past write_replay's checks; the agent refuses."""
    write_prd(story("US-001", A_TXT))
    script = tmp_path / "hand-written.json"
    write_replay(script, [])
    data = json.loads(script.read_text())
    data["steps"] = [{"files": {"../escaped.txt": "x", "a.txt": "x"}}]
    script.write_text(json.dumps(data))
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", replay_command(script),
                                           "--ralph-max-iterations", "1")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["  Tried: agent `python*` exit 2 in *"])
    assert "'../escaped.txt' leaves the agent's working folder ('..')" in agent_log(pytester, 1)
    assert not (pytester.path.parent / "escaped.txt").exists()
    assert not (pytester.path / "a.txt").exists()  # nothing of the step was applied


def test_replay_script_counts_calls_across_two_loop_runs(
        pytester: pytest.Pytester, write_prd: Callable[..., Path], tmp_path: Path) -> None:
    write_prd(story("US-001", A_TXT))
    script = tmp_path / "agent.json"
    command = write_replay(script, [{"stdout": "looking around\n"},
                                    {"files": {"a.txt": "x"}}])
    first = pytester.runpytest_subprocess("--ralph", "--ralph-agent", command,
                                          "--ralph-max-iterations", "1")
    assert first.ret == 1, first.stdout.str()
    assert not (pytester.path / "a.txt").exists()
    second = pytester.runpytest_subprocess("--ralph", "--ralph-agent", command)
    assert second.ret == 0, second.stdout.str()
    second.stdout.fnmatch_lines(["pytest-ralph: complete (exit 0) after 1 iteration*"])
    calls = read_calls(script)
    assert [(c.n, c.iteration) for c in calls] == [(1, 1), (2, 1)]
    assert all(k.startswith("PYTEST_RALPH_") for k in calls[0].env)  # not the whole env
    assert calls[0].env["PYTEST_RALPH_CONTROLLER"] == "1"
    assert json.loads((tmp_path / "agent.state.json").read_text()) == {"calls": 2}
    write_replay(script, [])  # writing it again starts over
    assert read_calls(script) == []


def test_after_the_script_runs_out_the_agent_does_nothing(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        ralph_agent: AgentFactory) -> None:
    write_prd(story("US-001", A_TXT, {"text": "never", "run": "test -f never.txt"}))
    agent = ralph_agent({"files": {"a.txt": "x"}})
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command)
    assert result.ret == 6, result.stdout.str()  # the identical-failure breaker
    assert [c.n for c in agent.calls] == [1, 2, 3]
    assert "call 2: the script's 1 step(s) have run out; doing nothing (exit 0)" in agent_log(
        pytester, 2)
    agents = [it["agent"] for it in run_json(pytester)["iterations"][1:]]
    assert [a["exit_code"] for a in agents] == [0, 0, 0]


def test_the_plugin_registers_the_ralph_agent_fixture(pytester: pytest.Pytester) -> None:
    """A user's own test, in a project that only installed pytest-ralph."""
    pytester.makepyfile(test_user_prd='''
        import json, subprocess, sys

        def test_my_prd_converges(ralph_agent, tmp_path):
            (tmp_path / "prd.json").write_text(json.dumps({"userStories": [
                {"id": "US-1", "title": "greet",
                 "acceptanceCriteria": [{"text": "hello.txt", "run": "test -f hello.txt"}]}]}))

            def agent_step(call):
                assert "hello.txt" in call.prompt
                return {"files": {"hello.txt": "hi"}, "stdout": "wrote it"}

            agent = ralph_agent(agent_step)
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "--ralph", "--ralph-agent", agent.command],
                cwd=tmp_path, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stdout + done.stderr
            assert [c.iteration for c in agent.calls] == [1]
            assert (tmp_path / "hello.txt").read_text() == "hi"
    ''')
    result = pytester.runpytest_subprocess("-p", "no:randomly")
    result.assert_outcomes(passed=1)
    fixtures = pytester.runpytest_subprocess("--fixtures")
    fixtures.stdout.fnmatch_lines(["ralph_agent -- *pytest_ralph/plugin/*.py:*",
                                   "*factory of scripted agents*"])


# --- The client on its own ------------------------------------------------------------------


def test_a_callable_may_return_a_step_for_the_agent_to_apply(
        tmp_path: Path, ralph_agent: AgentFactory) -> None:
    agent = ralph_agent(lambda call: Patch(files={"out.txt": call.prompt}, stdout="done\n",
                                           exit=4),
                        lambda call: None)
    first = client(agent.command, tmp_path, prompt="the prompt")
    assert (first.returncode, first.stdout) == (4, "done\n")
    assert (tmp_path / "out.txt").read_text() == "the prompt"
    assert client(agent.command, tmp_path).returncode == 0
    assert client(agent.command, tmp_path).returncode == 0  # ran out
    assert [c.n for c in agent.calls] == [1, 2, 3]


def test_system_exit_and_bad_return_values(tmp_path: Path, ralph_agent: AgentFactory) -> None:
    def leave(call: AgentCall) -> None:
        raise SystemExit(9)

    agent = ralph_agent(leave, lambda call: "yes", lambda call: True)  # type: ignore[arg-type,return-value]
    assert client(agent.command, tmp_path).returncode == 9
    bad = client(agent.command, tmp_path)
    assert bad.returncode == 1
    assert "step 2 returned 'yes'; return an exit code (int), None" in bad.stderr
    assert client(agent.command, tmp_path).returncode == 1
    assert [e.n for e in agent.errors] == [2, 3]


def test_arguments_iteration_and_the_prompt_file_fallback(
        tmp_path: Path, ralph_agent: AgentFactory) -> None:
    prompt_file = tmp_path / "prompt.md"
    prompt_file.write_text("from the file")
    agent = ralph_agent()
    done = client(agent.command + " " + shlex.quote(str(prompt_file)), tmp_path,
                  env={"PYTEST_RALPH_ITERATION": "7",
                       "PYTEST_RALPH_PROMPT_FILE": str(prompt_file)})
    assert done.returncode == 0, done.stderr
    (call,) = agent.calls
    assert call.args == (str(prompt_file),)
    assert (call.iteration, call.prompt) == (7, "from the file")
    assert call.prompt_file == prompt_file


def test_a_patch_in_a_subfolder_of_a_git_repository_is_relative_to_the_agent(
        tmp_path: Path, ralph_agent: AgentFactory) -> None:
    """`git apply` alone would take a `diff --git` patch as relative to the top of the
    repository and silently skip it."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    sub = tmp_path / "project"
    sub.mkdir()
    (sub / "a.txt").write_text("hi\n")
    (tmp_path / "a.txt").write_text("top\n")
    diff = "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-hi\n+bye\n"
    agent = ralph_agent({"patch": diff}, {"patch": diff})
    assert client(agent.command, sub).returncode == 0
    assert (sub / "a.txt").read_text() == "bye\n"
    assert (tmp_path / "a.txt").read_text() == "top\n"
    again = client(agent.command, sub)  # no longer applies
    assert again.returncode == 2
    assert "patch: `git apply` failed" in again.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks")
def test_a_symlink_out_of_the_folder_is_refused(tmp_path: Path,
                                                ralph_agent: AgentFactory) -> None:
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    (project / "link").symlink_to(outside)
    (project / "victim").symlink_to(outside / "victim.txt")
    agent = ralph_agent({"files": {"link/x.txt": "x"}}, {"files": {"victim": "x"}},
                        {"files": {"victim": None}})
    for _ in range(2):
        done = client(agent.command, project)
        assert done.returncode == 2
        assert "leads outside the agent's working folder" in done.stderr
    assert list(outside.iterdir()) == []
    assert client(agent.command, project).returncode == 0  # deleting the link itself is fine
    assert not (project / "victim").is_symlink()


@pytest.mark.parametrize(("step", "message"), [
    ({"files": {"../x": "y"}}, "'../x' leaves the agent's working folder"),
    ({"files": {"/etc/x": "y"}}, "'/etc/x' is an absolute path"),
    ({"files": {"a": 1}}, "files['a'] must be text or None"),
    ({"exit": "1"}, "'exit' must be an integer"),
    ({"exit": True}, "'exit' must be an integer"),
    ({"sleep": -1}, "'sleep' must be a number of seconds >= 0"),
    ({"patch": ""}, "'patch' must be a non-empty unified diff"),
    ({"stdout": 5}, "'stdout' must be text"),
    ({"file": {}}, "unknown key(s) file; a step has files, patch, exit"),
    (42, "expected a callable, a Patch or a dict; got int"),
])
def test_invalid_steps_are_refused_when_the_agent_is_made(
        ralph_agent: AgentFactory, tmp_path: Path, step: Any, message: str) -> None:
    with pytest.raises(ScriptError, match=f"step 1: .*{re.escape(message)}"):
        ralph_agent(step)
    with pytest.raises(ScriptError):
        write_replay(tmp_path / "r.json", [step])


def test_write_replay_refuses_callables(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="callable steps need a ScriptedAgent"):
        write_replay(tmp_path / "r.json", [lambda call: 0])  # type: ignore[list-item]


def test_a_closed_agent_and_a_missing_script_are_exit_2(tmp_path: Path) -> None:
    with ScriptedAgent([lambda call: 0, lambda call: 0], workdir=tmp_path / "keep") as agent:
        assert client(agent.command, tmp_path).returncode == 0
    assert agent.closed and len(agent.calls) == 1
    done = client(agent.command, tmp_path)  # the script is kept (workdir), the server is gone
    assert done.returncode == 2
    assert "cannot reach the ScriptedAgent" in done.stderr
    private = ScriptedAgent([])
    private.close()
    assert not private.script.exists()
    gone = client(private.command, tmp_path)
    assert gone.returncode == 2 and "does not exist" in gone.stderr
    usage = subprocess.run([sys.executable, "-m", "pytest_ralph.testing"], capture_output=True,
                           text=True)
    assert usage.returncode == 2 and "usage: python -m pytest_ralph.testing replay" in usage.stderr


def test_the_server_ignores_a_client_without_the_token(ralph_agent: AgentFactory,
                                                       tmp_path: Path) -> None:
    ran: list[int] = []
    agent = ralph_agent(lambda call: ran.append(call.n))
    server = json.loads(agent.script.read_text())["server"]
    call: dict[str, Any] = {"n": 1, "iteration": None, "prompt": "", "cwd": str(tmp_path),
                            "env": {}, "args": []}
    with socket.create_connection((server["host"], server["port"]), timeout=10) as conn:
        conn.sendall(json.dumps({"token": "guess", "n": 1, "call": call}).encode() + b"\n")
        assert conn.recv(100) == b""  # closed without an answer
    assert ran == []
    assert client(agent.command, tmp_path).returncode == 0
    assert ran == [1]


def test_project_modules_do_not_shadow_the_clients_standard_library(
        tmp_path: Path, ralph_agent: AgentFactory) -> None:
    """The agent runs in the rootdir: a project's own json.py must not break it."""
    for name in ("json", "socket", "typing"):
        (tmp_path / f"{name}.py").write_text("raise SystemExit('shadowed')\n")
    agent = ralph_agent({"files": {"a.txt": "x"}}, lambda call: 5)
    assert client(agent.command, tmp_path).returncode == 0
    assert client(agent.command, tmp_path).returncode == 5
    assert (tmp_path / "a.txt").read_text() == "x"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_negative_exit_kills_the_agent_with_that_signal(ralph_agent: AgentFactory,
                                                          tmp_path: Path) -> None:
    agent = ralph_agent({"exit": -9})
    assert client(agent.command, tmp_path).returncode == -9


def test_the_client_imports_neither_pytest_nor_the_loop(tmp_path: Path) -> None:
    code = ("import sys, runpy; sys.argv = ['x', 'replay', sys.argv[1]];\n"
            "try:\n    runpy.run_module('pytest_ralph.testing', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "bad = [m for m in sys.modules if m in ('pytest', '_pytest', "
            "'pytest_ralph.loop.controller',"
            " 'pytest_ralph.plugin', 'socketserver')]\n"
            "print(bad)")
    script = tmp_path / "r.json"
    write_replay(script, [{"stdout": ""}])
    done = subprocess.run([sys.executable, "-c", code, str(script)], cwd=tmp_path,
                          capture_output=True, text=True, input="", timeout=60)
    assert done.stdout.strip() == "[]", done.stderr
