"""Unit tests of pytest_ralph.agents.run: command parsing, executable lookup, and real agent
runs."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from pytest_ralph.agents.run import (
    CONTROLLER_ENV,
    SHOWN_ARG_CHARS,
    SHOWN_ARGV_CHARS,
    AgentCommandError,
    AgentRun,
    render_argv,
    resolve_executable,
    run_agent,
    shown_argv,
    split_command,
)
from pytest_ralph.util.redact import Redactor
from tests.support.env import PYTHON

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX shell quoting and signals")


# -- split_command ---------------------------------------------------------------------------


@posix_only
@pytest.mark.parametrize(("command", "argv"), [
    ("claude -p", ["claude", "-p"]),
    ("  agent   --flag  value ", ["agent", "--flag", "value"]),
    ("agent 'two words' \"and three more\"", ["agent", "two words", "and three more"]),
    ("agent --prompt={prompt_file}", ["agent", "--prompt={prompt_file}"]),
    (r"agent a\ b", ["agent", "a b"]),
    ("agent ''", ["agent", ""]),
])
def test_split_command(command: str, argv: list[str]) -> None:
    assert split_command(command) == argv


@pytest.mark.parametrize("command", ["", "   ", "\t\n"])
def test_split_command_empty_is_an_error(command: str) -> None:
    with pytest.raises(AgentCommandError, match="empty"):
        split_command(command)


@posix_only
@pytest.mark.parametrize("command", ["agent 'unclosed", 'agent "unclosed'])
def test_split_command_unbalanced_quote_is_an_error(command: str) -> None:
    with pytest.raises(AgentCommandError) as info:
        split_command(command)
    assert command in str(info.value)
    assert "quotation" in str(info.value)


def test_agent_command_error_is_a_value_error() -> None:
    assert issubclass(AgentCommandError, ValueError)


# -- resolve_executable ----------------------------------------------------------------------


def _script(path: Path, body: str = "#!/bin/sh\nexit 0\n", mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body, encoding="utf-8")
    path.chmod(mode)
    return path


@posix_only
def test_resolve_executable_looks_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _script(tmp_path / "bin" / "my-agent")
    monkeypatch.setenv("PATH", str(exe.parent) + os.pathsep + os.environ.get("PATH", ""))
    assert resolve_executable(["my-agent", "--x"], tmp_path) == str(exe)


@posix_only
def test_resolve_executable_relative_path_is_against_cwd(tmp_path: Path) -> None:
    exe = _script(tmp_path / "tools" / "agent.sh")
    assert Path(resolve_executable(["tools/agent.sh"], tmp_path)) == exe
    assert Path(resolve_executable(["./tools/agent.sh"], tmp_path)).resolve() == exe.resolve()


def test_resolve_executable_absolute_path() -> None:
    assert resolve_executable([PYTHON, "-c", "pass"], Path("/")) == PYTHON


@posix_only
def test_resolve_executable_relative_path_is_not_searched_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = _script(tmp_path / "bin" / "agent.sh")
    monkeypatch.setenv("PATH", str(exe.parent))
    with pytest.raises(AgentCommandError, match="not found"):
        resolve_executable(["sub/agent.sh"], tmp_path)


def test_resolve_executable_missing_names_it(tmp_path: Path) -> None:
    with pytest.raises(AgentCommandError) as info:
        resolve_executable(["pytest-ralph-no-such-agent", "-p"], tmp_path)
    message = str(info.value)
    assert "'pytest-ralph-no-such-agent'" in message
    assert "not found" in message
    assert "--ralph-agent" in message


@posix_only
def test_resolve_executable_refuses_a_file_that_is_not_executable(tmp_path: Path) -> None:
    _script(tmp_path / "agent.sh", mode=0o644)
    with pytest.raises(AgentCommandError, match=r"agent\.sh"):
        resolve_executable(["./agent.sh"], tmp_path)


def test_resolve_executable_refuses_a_directory(tmp_path: Path) -> None:
    (tmp_path / "sub" / "dir").mkdir(parents=True)
    with pytest.raises(AgentCommandError):
        resolve_executable(["sub/dir"], tmp_path)


# -- render_argv -----------------------------------------------------------------------------


def test_render_argv_replaces_every_placeholder(tmp_path: Path) -> None:
    pf = tmp_path / "it" / "prompt.md"
    argv = ["agent", "{prompt_file}", "--in={prompt_file}", "--x", "{prompt_file}:{prompt_file}"]
    assert render_argv(argv, pf) == [
        "agent", str(pf), f"--in={pf}", "--x", f"{pf}:{pf}"]


def test_render_argv_leaves_other_braces_and_input_alone(tmp_path: Path) -> None:
    argv = ["agent", "{prompt}", "{}", "x"]
    out = render_argv(argv, tmp_path / "p.md")
    assert out == ["agent", "{prompt}", "{}", "x"]
    assert out is not argv


# -- run_agent -------------------------------------------------------------------------------


def _agent(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "agent.py"
    path.write_text(body, encoding="utf-8")
    return [PYTHON, str(path)]


def _run(tmp_path: Path, argv: list[str], *, prompt: str = "do the thing",
         timeout: float = 10, env: dict[str, str] | None = None) -> AgentRun:
    folder = tmp_path / "iteration-001"
    folder.mkdir(exist_ok=True)
    return run_agent(argv, prompt=prompt, prompt_file=folder / "prompt.md", cwd=tmp_path,
                     timeout=timeout, log_path=folder / "agent.log", env=env)


def test_run_agent_ok(tmp_path: Path) -> None:
    run = _run(tmp_path, _agent(tmp_path, "print('working on it')\n"))
    assert run.outcome == "ok"
    assert run.exit_code == 0
    assert run.ran is True
    assert run.duration > 0
    assert run.log_path == tmp_path / "iteration-001" / "agent.log"
    assert "working on it" in run.log_path.read_text("utf-8")
    assert "working on it" in run.log_tail


def test_run_agent_exit_nonzero(tmp_path: Path) -> None:
    run = _run(tmp_path, _agent(tmp_path, "import sys\nprint('rate limited', file=sys.stderr)\n"
                                          "sys.exit(2)\n"))
    assert run.outcome == "exit-nonzero"
    assert run.exit_code == 2
    assert run.ran is False
    assert "rate limited" in run.log_tail


def test_run_agent_timeout(tmp_path: Path) -> None:
    run = _run(tmp_path, _agent(tmp_path, "import time\nprint('start', flush=True)\n"
                                          "time.sleep(30)\n"), timeout=0.5)
    assert run.outcome == "timeout"
    assert run.exit_code is None
    assert run.ran is True  # a timeout counts for the breaker
    assert 0.5 <= run.duration < 5
    assert "start" in run.log_tail


def test_run_agent_pwd_is_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stale PWD (the folder pytest started in) would send opencode's tools elsewhere.
    monkeypatch.setenv("PWD", str(tmp_path.parent))
    run = _run(tmp_path, _agent(tmp_path, "import os\nprint('pwd=' + os.environ['PWD'])\n"),
               env={"PWD": "/nowhere"})
    assert run.outcome == "ok"
    assert f"pwd={tmp_path}\n" in run.log_path.read_text("utf-8")


def test_run_agent_not_found(tmp_path: Path) -> None:
    run = _run(tmp_path, ["pytest-ralph-no-such-agent", "{prompt_file}"])
    assert run.outcome == "not-found"
    assert run.exit_code is None
    assert run.ran is False
    assert run.duration == 0.0
    assert run.argv[1] == str(tmp_path / "iteration-001" / "prompt.md")
    assert "pytest-ralph-no-such-agent" in run.log_tail
    assert "cannot start the agent" in run.log_path.read_text("utf-8")
    # The prompt was still written, for a human to look at.
    assert (tmp_path / "iteration-001" / "prompt.md").read_text("utf-8") == "do the thing"


@posix_only
def test_run_agent_crash(tmp_path: Path) -> None:
    body = "import os, signal\nprint('dying', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n"
    run = _run(tmp_path, _agent(tmp_path, body))
    assert run.outcome == "crash"
    assert run.exit_code == -9
    assert run.ran is False
    assert "dying" in run.log_tail


def test_run_agent_prompt_on_stdin_and_in_the_file(tmp_path: Path) -> None:
    body = ("import json, sys\n"
            "stdin = sys.stdin.read()\n"
            "with open(sys.argv[1], encoding='utf-8') as f:\n"
            "    from_file = f.read()\n"
            "json.dump({'stdin': stdin, 'file': from_file, 'path': sys.argv[1]},\n"
            "          open('seen.json', 'w', encoding='utf-8'))\n")
    prompt = "# Ralph\nFix US-001::AC1 — ünïcode\n" + "x" * 200_000
    run = _run(tmp_path, [*_agent(tmp_path, body), "{prompt_file}"], prompt=prompt)
    assert run.outcome == "ok", run.log_tail
    seen = json.loads((tmp_path / "seen.json").read_text("utf-8"))
    assert seen["stdin"] == prompt
    assert seen["file"] == prompt
    assert seen["path"] == str(tmp_path / "iteration-001" / "prompt.md")


def test_run_agent_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RALPH_INHERITED", "from-parent")
    monkeypatch.setenv(CONTROLLER_ENV, "0")  # overridden: the agent is always controlled
    body = ("import json, os\n"
            "keys = ['PYTEST_RALPH_CONTROLLER', 'RALPH_INHERITED', 'PYTEST_RALPH_ITERATION']\n"
            "json.dump({k: os.environ.get(k) for k in keys}, open('env.json', 'w'))\n")
    run = _run(tmp_path, _agent(tmp_path, body), env={"PYTEST_RALPH_ITERATION": "4",
                                                      CONTROLLER_ENV: "0"})
    assert run.outcome == "ok", run.log_tail
    env = json.loads((tmp_path / "env.json").read_text("utf-8"))
    assert env == {"PYTEST_RALPH_CONTROLLER": "1", "RALPH_INHERITED": "from-parent",
                   "PYTEST_RALPH_ITERATION": "4"}
    assert CONTROLLER_ENV == "PYTEST_RALPH_CONTROLLER"


def test_run_agent_runs_in_cwd(tmp_path: Path) -> None:
    body = "import os\nprint('CWD=' + os.getcwd())\n"
    run = _run(tmp_path, _agent(tmp_path, body))
    line = next(ln for ln in run.log_tail.splitlines() if ln.startswith("CWD="))
    assert Path(line[4:]).resolve() == tmp_path.resolve()


def test_run_agent_log_tail_is_bounded(tmp_path: Path) -> None:
    body = "for i in range(20000):\n    print(f'line {i:05d}')\n"
    run = _run(tmp_path, _agent(tmp_path, body))
    assert run.outcome == "ok"
    assert len(run.log_tail) < 2100
    assert run.log_tail.rstrip().endswith("line 19999")
    assert "line 00000" in run.log_path.read_text("utf-8")


@posix_only
def test_run_agent_not_executable_is_not_found(tmp_path: Path) -> None:
    _script(tmp_path / "agent.sh", mode=0o644)
    run = _run(tmp_path, [str(tmp_path / "agent.sh")])
    assert run.outcome == "not-found"
    assert run.ran is False


# -- AgentRun.describe -----------------------------------------------------------------------


def _record(outcome: str, exit_code: int | None, duration: float = 212.44,
            argv: tuple[str, ...] = ("/usr/local/bin/claude", "-p")) -> AgentRun:
    return AgentRun(argv, outcome, exit_code, duration, Path("agent.log"), "")


@pytest.mark.parametrize(("run", "text"), [
    (_record("ok", 0), "agent `claude -p` exit 0 in 212.4 s"),
    (_record("exit-nonzero", 3, 1.05), "agent `claude -p` exit 3 in 1.1 s"),
    (_record("timeout", None, 1800.0), "agent `claude -p` timed out (process group killed) in "
                                       "1800.0 s"),
    (_record("not-found", None, 0.0), "agent `claude -p` not found in 0.0 s"),
    (_record("crash", -9, 0.5), "agent `claude -p` killed by signal 9 in 0.5 s"),
    (_record("ok", 0, 2.0, ()), "agent `?` exit 0 in 2.0 s"),
])
def test_describe(run: AgentRun, text: str) -> None:
    assert run.describe() == text


def test_describe_of_a_real_run_shows_the_script_not_only_the_interpreter(
        tmp_path: Path) -> None:
    # `python agent.py` used to be shown as agent `python`.
    script = _agent(tmp_path, "import sys\nsys.exit(5)\n")
    run = _run(tmp_path, script)
    described = run.describe()
    assert re.fullmatch(rf"agent `{re.escape(Path(PYTHON).name)} \S*/agent\.py` exit 5 in "
                        r"\d+\.\d s", described), described
    assert described == f"agent `{shown_argv(script)}` exit 5 in {run.duration:.1f} s"


def test_shown_argv_quotes_like_a_shell_and_names_an_absolute_executable() -> None:
    assert shown_argv(["python", "agent.py", "--fast"]) == "python agent.py --fast"
    assert shown_argv(["/usr/bin/python3", "my agent.py"]) == "python3 'my agent.py'"
    assert shown_argv(["./agent.sh"]) == "./agent.sh"
    assert shown_argv([]) == "?"


def test_shown_argv_shortens_long_arguments_and_a_long_command() -> None:
    prompt_file = "/home/me/proj/.pytest_ralph/runs/20261130-161344-78b56c/iteration-001/prompt.md"
    assert shown_argv(["aider", "--message-file", prompt_file]) == (
        "aider --message-file .../iteration-001/prompt.md")
    prompt = "# Ralph loop: iteration 1 of 5\n\nYou are a coding agent working in `/x`"
    assert shown_argv(["claude", "-p", prompt]) == "claude -p '# Ralph loop: iteration 1 of 5...'"
    long_word = "x" * 200
    assert shown_argv(["agent", long_word]) == "agent " + "x" * (SHOWN_ARG_CHARS - 3) + "..."
    many = ["agent", *(f"--flag-number-{i}" for i in range(20))]
    shown = shown_argv(many)
    assert len(shown) == SHOWN_ARGV_CHARS
    assert shown.startswith("agent --flag-number-0 --flag-number-1 ")
    assert shown.endswith("...")


def test_shown_argv_redacts_before_it_cuts(monkeypatch: pytest.MonkeyPatch) -> None:
    # A secret cut in half would no longer be recognised by the redaction of the whole line.
    secret = "s3cr3t-" + "v" * 60
    monkeypatch.setenv("AGENT_TOKEN", secret)
    shown = shown_argv(["agent", f"--token={secret}", "--then", "more"])
    assert "s3cr3t" not in shown and "vvvv" not in shown
    assert "[redacted $AGENT_TOKEN]" in shown
    assert shown.endswith("--then more")
    # With the loop's redactor given, its secrets are the ones redacted.
    shown = shown_argv(["agent", "--key=abc12345xyz"], Redactor({"abc12345xyz": "MINE"}))
    assert shown == "agent '--key=[redacted $MINE]'"
    run = AgentRun(("agent", f"--token={secret}"), "ok", 0, 1.0, Path("agent.log"), "")
    assert "s3cr3t" not in run.describe()



def test_a_file_that_is_not_executable_is_named_as_such(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text("print('hi')\n")
    script.chmod(0o644)
    with pytest.raises(AgentCommandError, match=r"exists but is not executable.*python \./agent"):
        resolve_executable(["./agent.py"], tmp_path)


def test_usage_and_describe_show_what_the_agent_reported() -> None:
    run = AgentRun(("claude", "-p"), "ok", 0, 12.5, Path("agent.log"), "", cost_usd=0.012,
                   turns=1, input_tokens=300, output_tokens=60)
    assert run.usage() == "$0.0120, 1 turn, 300 in / 60 out tokens"
    assert run.describe() == ("agent `claude -p` exit 0 in 12.5 s ($0.0120, 1 turn, 300 in / "
                              "60 out tokens)")
    bare = AgentRun(("aider",), "api-error", 1, 2.0, Path("agent.log"), "", detail="HTTP 500")
    assert bare.usage() == ""
    assert bare.describe() == "agent `aider` api-error (exit 1: HTTP 500) in 2.0 s"
