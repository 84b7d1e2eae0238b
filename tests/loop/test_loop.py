"""The loop, end to end: `pytest --ralph` in a subprocess with real agents and child checks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.testing import AgentCall, AgentFactory, Patch, ScriptedAgent
from tests.support.env import PY
from tests.support.loop import agent_runs, report_text, run_json, wait_for
from tests.support.prd import files_criteria, story


def first_failure(call: AgentCall) -> Patch:
    """Fix only the first failing criterion the prompt names: for a check `test -f NAME`,
    create NAME. An agent made of this step converges only if the prompt carries failures."""
    section = call.prompt.split("## Failing acceptance criteria", 1)[-1].split("\n## ", 1)[0]
    m = re.search(r"check: run `test -f (\S+)`", section)
    if m:
        return Patch(files={m.group(1): "fixed\n"}, stdout=f"agent: created {m.group(1)}\n")
    return Patch(stdout="agent: nothing to fix\n")


@pytest.fixture
def fixer(ralph_agent: AgentFactory) -> ScriptedAgent:
    """A scripted agent that runs :func:`first_failure` on each of its first 10 runs."""
    return ralph_agent(*[first_failure] * 10)


COUNTING_NOOP_AGENT = """
with open("agent-runs.txt", "a") as f:
    f.write("run\\n")
"""


@pytest.fixture
def three_files_prd(write_prd: Callable[..., Path]) -> Path:
    return write_prd(story("US-001", *files_criteria("a.txt", "b.txt"), priority=2),
                     story("US-002", *files_criteria("c.txt"), priority=1))


def test_converges_one_fix_per_iteration(pytester: pytest.Pytester, three_files_prd: Path,
                                         fixer: ScriptedAgent) -> None:
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", fixer.command)
    assert result.ret == 0, result.stdout.str()
    out = result.stdout.str()
    # Priority 1 story first: c.txt, then a.txt, then b.txt.
    assert [p.name for p in sorted(pytester.path.glob("?.txt"), key=os.path.getmtime)] == [
        "c.txt", "a.txt", "b.txt"]
    assert len(fixer.calls) == 3
    result.stdout.fnmatch_lines([
        "[[]ralph baseline[]]", "  0/3 criteria passing*",
        "[[]ralph iteration 1/5[]]",
        "  Goal: 3 criteria of 2 stories pass (prd.json)",
        "  Tried: agent `python* -P -m pytest_ralph.testing replay *` exit 0 in * s",
        "  Result: progress (+1); failing now: US-001::AC1, US-001::AC2",
        "  State: 1/3 passing (+1); identical-failure streak 1/3",
        "[[]ralph iteration 2/5[]]", "*", "*", "*",
        "  Result: progress (+1); failing now: US-001::AC2",
        "[[]ralph iteration 3/5[]]", "*", "*", "*",
        "  Result: complete (+1): every criterion passes",
        "  State: 3/3 passing (+1)",  # no streak: nothing fails
        "pytest-ralph: complete (exit 0) after 3 iterations*",
    ])
    assert "iteration 4/5" not in out
    assert "Result: failure" not in out  # an iteration that made progress is not a failure
    assert "  State: 3/3 passing (+1);" not in out
    report = report_text(pytester)
    assert "- Outcome: **complete**" in report
    assert "| US-002 | story US-002 | 0/1 | 1/1 ok | 1/1 ok | 1/1 ok |" in report
    assert "| US-001 | story US-001 | 0/2 | 0/2 | 1/2 | 2/2 ok |" in report
    # Write-back: every story now says passes: true.
    prd = json.loads(three_files_prd.read_text())
    assert [s["passes"] for s in prd["userStories"]] == [True, True]


def test_each_result_says_regression_no_change_or_progress(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        ralph_agent: AgentFactory) -> None:
    # "Result: failure" used to be printed for every iteration short of complete, progress
    # or not, and the streak even on success.
    (pytester.path / "a.txt").write_text("x")
    write_prd(story("US-001", *files_criteria("a.txt", "b.txt")))
    agent = ralph_agent({"files": {"a.txt": None}}, {},
                        {"files": {"a.txt": "x", "b.txt": "x"}})
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([
        "[[]ralph iteration 1/5[]]", "*", "*", "*",
        "  Result: regression (-1); failing now: US-001::AC1, US-001::AC2",
        "  State: 0/2 passing (-1); identical-failure streak 1/3",
        "  Regressions: US-001::AC1 passed before and fail now",
        "[[]ralph iteration 2/5[]]", "*", "*", "*",
        "  Result: no change; failing now: US-001::AC1, US-001::AC2",
        "  State: 0/2 passing (+0); identical-failure streak 2/3",
        "[[]ralph iteration 3/5[]]", "*", "*", "*",
        "  Result: complete (+2): every criterion passes",
        "  State: 2/2 passing (+2)",
        "pytest-ralph: complete (exit 0) after 3 iterations*"])
    assert "streak 3/3" not in result.stdout.str()
    data = run_json(pytester)
    assert [it["result"] for it in data["iterations"]] == [  # type: ignore[index]
        None, "regression", "no change", "complete"]
    # Nothing fails after iteration 3: no fingerprint (it was the digest of nothing).
    assert data["iterations"][3]["fingerprint"] is None  # type: ignore[index]
    assert data["iterations"][3]["streak"] == 1  # type: ignore[index]  # the field stays
    progress = (pytester.path / ".pytest_ralph" / "progress.txt").read_text()
    assert ("result: regression (-1): 0/2 passing; failing now: US-001::AC1, US-001::AC2\n"
            in progress)
    assert "result: complete (+2): every criterion passes (2/2)\n" in progress
    last = progress.split(" iteration 3/5\n", 1)[1].split("\n## ", 1)[0]
    assert "streak" not in last  # no streak once every criterion passes
    report = report_text(pytester)
    assert "- Outcome: **complete** (exit 0)\n" in report
    assert "| 1 | US-001 | exit 0 | ok |" in report and " | regression (-1) | " in report
    assert " | 2/2 | complete (+2) | - | - | - |" in report


NOOP_AGENT = "import sys\nsys.stdin.read()\n"


def test_a_failure_has_one_fingerprint_everywhere(pytester: pytest.Pytester,
                                                   write_prd: Callable[..., Path]) -> None:
    # One unchanged failure used to show under three fingerprints across the report (its
    # check's in the table, its own, its story's in the Blocked section); the agent was
    # shown as `python`, without its script.
    write_prd(story("US-1", *files_criteria("never.txt")),
              story("US-2", *files_criteria("nor.txt"), priority=2))
    (pytester.path / "agent.py").write_text(NOOP_AGENT)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} agent.py",
                                           "--ralph-breaker", "2")
    assert result.ret == 6, result.stdout.str()
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["  Tried: agent `python* agent.py` exit 0 in * s"])
    report = report_text(pytester)
    shown: dict[str, set[str]] = {}
    for text in (out, report):
        for key, fp in re.findall(r"(US-\d::AC\d)(?::| \(fingerprint) `?([0-9a-f]{16})", text):
            shown.setdefault(key, set()).add(fp)
        for key, fp in re.findall(r"### (US-\d::AC\d): .*\n\n.*\n- fingerprint: `([0-9a-f]{16})`",
                                  text):
            shown.setdefault(key, set()).add(fp)
    assert set(shown) == {"US-1::AC1", "US-2::AC1"}
    assert all(len(fps) == 1 for fps in shown.values()), shown
    (us1,) = shown["US-1::AC1"]
    table = report[report.index("## Iterations"):report.index("## Failing criteria")]
    assert table.count(f"US-1::AC1: `{us1}`") == 5  # the baseline and every iteration
    blocked = report[report.index("### Blocked: US-1"):report.index("### Blocked: US-2")]
    assert f"- Why: the same failure of US-1::AC1 (fingerprint {us1}) in 2 iterations" in blocked
    assert f"- US-1::AC1 (fingerprint `{us1}`): " in blocked
    assert "agent `python" in blocked and " agent.py` exit 0" in blocked


def test_a_new_run_marks_what_earlier_runs_found_as_earlier(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        fixer: ScriptedAgent) -> None:
    # A new run's prompt quoted the earlier run's "every criterion passes" from progress.txt
    # after the code had been reset (with git), as if it were the state of the code now.
    write_prd(story("US-001", *files_criteria("a.txt")))
    first = pytester.runpytest_subprocess("--ralph", "--ralph-agent", fixer.command)
    assert first.ret == 0, first.stdout.str()
    (pytester.path / "a.txt").unlink()  # the code is reset
    second = pytester.runpytest_subprocess("--ralph", "--ralph-agent", fixer.command)
    assert second.ret == 0, second.stdout.str()
    prompt = fixer.calls[1].prompt
    progress = prompt.split("## Progress so far", 1)[1].split("\n## Rules", 1)[0]
    marker = progress.index("From an earlier run (")
    assert marker < progress.index("every criterion passes")
    assert "the code may have changed since:" in progress
    assert "This run:" not in progress  # the new run has no entry yet
    earlier_id = run_ids(pytester)[0]
    assert f", run {earlier_id}), the code may have changed since:" in progress


def run_ids(pytester: pytest.Pytester) -> list[str]:
    """The ids of the runs in the pytester folder's state folder, oldest first."""
    return sorted(p.name for p in (pytester.path / ".pytest_ralph" / "runs").iterdir())


def test_breaker_trips_after_exactly_three_agent_runs(
        pytester: pytest.Pytester, write_prd: Callable[..., Path]) -> None:
    """The issue's own example: `pytest --ralph --ralph-prd X --ralph-agent "python -c pass"`."""
    write_prd(story("US-001", *files_criteria("never.txt")), name="plans/X.json")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-prd", "plans/X.json",
                                           "--ralph-agent", f"{PY} -c pass")
    assert result.ret == 6, result.stdout.str()
    result.stdout.fnmatch_lines([
        "*identical-failure streak 1/3", "*identical-failure streak 2/3",
        "*identical-failure streak 3/3",
        "pytest-ralph: breaker (exit 6) after 3 iterations: circuit breaker: the same failure*"])
    data = run_json(pytester)
    agent_iterations = [it for it in data["iterations"] if it["agent"]]  # type: ignore[attr-defined]
    assert len(agent_iterations) == 3
    assert data["status"] == "breaker"
    report = report_text(pytester)
    assert "circuit breaker: the same failure" in report
    assert "## Escalation" in report
    assert "US-001::AC1" in report and "never.txt" in report


def test_breaker_counts_with_a_counting_agent(pytester: pytest.Pytester,
                                              write_prd: Callable[..., Path],
                                              ralph_agent: AgentFactory) -> None:
    write_prd(story("US-001", *files_criteria("never.txt")))
    noop = ralph_agent()  # no steps: every run does nothing, and is counted
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", noop.command,
                                           "--ralph-breaker", "2")
    assert result.ret == 6
    assert len(noop.calls) == 2


def test_success_on_the_last_allowed_iteration(pytester: pytest.Pytester, three_files_prd: Path,
                                               fixer: ScriptedAgent) -> None:
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", fixer.command,
                                           "--ralph-max-iterations", "3")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["[[]ralph iteration 3/3[]]", "*", "*", "*",
                                 "  Result: complete (+1): every criterion passes"])


def test_limit_exit_1(pytester: pytest.Pytester, three_files_prd: Path,
                      fixer: ScriptedAgent) -> None:
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", fixer.command,
                                           "--ralph-max-iterations", "2")
    assert result.ret == 1
    assert len(fixer.calls) == 2
    result.stdout.fnmatch_lines(["*stopped at the iteration limit (2) with 1 criterion still "
                                 "failing*"])
    assert "- Outcome: **limit**" in report_text(pytester)


def test_baseline_complete_runs_no_agent(pytester: pytest.Pytester,
                                         write_prd: Callable[..., Path],
                                         ralph_agent: AgentFactory) -> None:
    (pytester.path / "a.txt").write_text("x")
    write_prd(story("US-001", *files_criteria("a.txt")))
    noop = ralph_agent()
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", noop.command)
    assert result.ret == 0
    assert len(noop.calls) == 0
    result.stdout.fnmatch_lines(["pytest-ralph: complete (exit 0) after 0 iterations: every "
                                 "criterion passed at the baseline check*"])


def test_missing_agent_is_exit_4_before_any_check(pytester: pytest.Pytester,
                                                  write_prd: Callable[..., Path]) -> None:
    write_prd(story("US-001", *files_criteria("a.txt")))
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent",
                                           "no-such-agent-xyz --flag")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*agent executable not found: 'no-such-agent-xyz'*"])
    assert not (pytester.path / ".pytest_ralph").exists()
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_no_agent_configured_is_exit_4(pytester: pytest.Pytester,
                                       write_prd: Callable[..., Path]) -> None:
    write_prd(story("US-001", *files_criteria("a.txt")))
    result = pytester.runpytest_subprocess("--ralph")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*no agent configured*--ralph-agent*"])


def test_no_prd_is_exit_5(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass")
    assert result.ret == 5
    result.stderr.fnmatch_lines(["*no PRD found: looked for prd.json, prd.jsonc, prd.yaml, "
                                 "prd.yml in*--ralph-prd*"])


def test_empty_user_stories_is_exit_5_naming_the_file(pytester: pytest.Pytester,
                                                      write_prd: Callable[..., Path]) -> None:
    path = write_prd()
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass")
    assert result.ret == 5
    result.stderr.fnmatch_lines([f"pytest-ralph: {path}: no user stories: $.userStories is "
                                 "empty; expected at least one story with acceptance criteria"])


def test_story_filter_matching_nothing_is_exit_5(pytester: pytest.Pytester,
                                                 three_files_prd: Path) -> None:
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass",
                                           "--ralph-story", "US-404")
    assert result.ret == 5
    result.stderr.fnmatch_lines(["*story US-404 (from --ralph-story) selects no story*US-001, "
                                 "US-002*"])


def test_story_filter_limits_the_loop(pytester: pytest.Pytester, three_files_prd: Path,
                                      fixer: ScriptedAgent) -> None:
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", fixer.command,
                                           "--ralph-story", "US-001")
    assert result.ret == 0, result.stdout.str()
    assert not (pytester.path / "c.txt").exists()
    assert (pytester.path / "a.txt").exists() and (pytester.path / "b.txt").exists()
    result.stdout.fnmatch_lines(["*Goal: 2 criteria of 1 story pass*"])


def test_bad_prd_is_exit_4_with_file_and_line(pytester: pytest.Pytester) -> None:
    (pytester.path / "prd.json").write_text('{"userStories": [\n  {"id": "US-1",}\n]}\n')
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass")
    assert result.ret == 4
    err = result.stderr.str()
    assert "prd.json:2:16:" in err and "invalid JSON" in err and "trailing comma" in err
    assert "Traceback" not in err + result.stdout.str()


HANGING_AGENT = """
import pathlib, subprocess, sys, time
pathlib.Path("beat.py").write_text(
    "import sys, time\\nwhile True:\\n    open(sys.argv[1], 'a').write('.')\\n"
    "    time.sleep(0.05)\\n")
py = sys.executable
subprocess.Popen([py, "beat.py", "child.beat"])
subprocess.Popen(["setsid", py, "beat.py", "setsid.beat"])
subprocess.Popen(["sh", "-c", f"({py} beat.py double.beat &) &"])
time.sleep(300)
"""


def _still_beating(path: Path) -> bool:
    """Whether a heartbeat file still grows (its writer is alive), over half a second."""
    before = path.stat().st_size
    time.sleep(0.5)
    return path.stat().st_size != before


@pytest.mark.skipif(sys.platform != "linux", reason="setsid and the supervisor are Linux's")
@pytest.mark.parametrize("sandbox", ["required", "off"])
def test_hanging_agent_and_its_grandchild_are_killed_at_the_timeout(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str], sandbox: str) -> None:
    """Every descendant of a timed-out agent dies with it: a child, a grandchild that called
    setsid, a double-forked one; confined (a PID namespace) or not (the supervisor)."""
    write_prd(story("US-001", *files_criteria("never.txt")))
    start = time.monotonic()
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent",
                                           agent("hang.py", HANGING_AGENT),
                                           "--ralph-agent-timeout", "2",
                                           "--ralph-max-iterations", "1",
                                           "-o", f"ralph_sandbox={sandbox}")
    elapsed = time.monotonic() - start
    assert result.ret == 1, result.stdout.str()
    assert elapsed < 60
    for name in ("child.beat", "setsid.beat", "double.beat"):
        beat = pytester.path / name
        assert beat.exists(), f"{name} never started: {result.stdout.str()}"
        assert not _still_beating(beat), f"{name}: a descendant survived the agent timeout"
    result.stdout.fnmatch_lines(["  Tried: agent `python*` timed out (process group killed) in *"])
    data = run_json(pytester)
    assert data["iterations"][1]["agent"]["outcome"] == "timeout"  # type: ignore[index]


def test_agent_error_streak_is_exit_7(pytester: pytest.Pytester, write_prd: Callable[..., Path],
                                      ralph_agent: AgentFactory) -> None:
    write_prd(story("US-001", *files_criteria("never.txt")))
    result = pytester.runpytest_subprocess(
        "--ralph", "--ralph-agent", ralph_agent(*[{"exit": 3}] * 3).command)
    assert result.ret == 7, result.stdout.str()
    result.stdout.fnmatch_lines([
        "*identical-failure streak 0/3 (unchanged: the agent did not run properly); "
        "agent-error streak 1/3",
        "*agent-error streak 3/3",
        "pytest-ralph: agent-error (exit 7)*"])


def echo_agent(ralph_agent: AgentFactory) -> tuple[str, dict[str, Any]]:
    """An agent command (with ``{prompt_file}``) and the dict its first run fills in: what
    it saw on stdin and in the prompt file."""
    seen: dict[str, Any] = {}

    def echo(call: AgentCall) -> None:
        from_file = Path(call.args[0]).read_text(encoding="utf-8")
        seen.update(same=call.prompt == from_file, prompt=call.prompt,
                    controller=call.env.get("PYTEST_RALPH_CONTROLLER"), cwd=str(call.cwd))

    return ralph_agent(echo).command + " {prompt_file}", seen


def test_prompt_on_stdin_and_in_prompt_file(pytester: pytest.Pytester,
                                            write_prd: Callable[..., Path],
                                            ralph_agent: AgentFactory) -> None:
    write_prd(story("US-001", *files_criteria("never.txt"), title="Make the file"),
              story("US-002", "Docs are written", priority=5))
    cmd, seen = echo_agent(ralph_agent)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "1")
    assert result.ret == 1
    assert seen["same"] is True
    assert seen["controller"] == "1"
    assert Path(seen["cwd"]) == pytester.path
    prompt = seen["prompt"]
    assert "# Ralph loop: iteration 1 of 1" in prompt
    assert "US-001: Make the file" in prompt
    assert "- [US-001::AC1] never.txt exists" in prompt
    assert "exit status 1, expected exit status 0: `test -f never.txt`" in prompt
    assert "- [US-002::AC1] Docs are written" in prompt  # listed among the later failures


def test_prompt_template_from_ini(pytester: pytest.Pytester, write_prd: Callable[..., Path],
                                  ralph_agent: AgentFactory) -> None:
    write_prd(story("US-001", *files_criteria("never.txt")))
    (pytester.path / "my-prompt.md").write_text("CUSTOM $story_id :: $failing")
    pytester.makeini("[pytest]\nralph_prompt = my-prompt.md\n")
    cmd, seen = echo_agent(ralph_agent)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "1")
    assert result.ret == 1
    prompt = seen["prompt"]
    assert prompt.startswith("CUSTOM US-001 :: - [US-001::AC1] never.txt exists")


def test_dry_run_prints_prompt_and_argv_and_runs_nothing(
        pytester: pytest.Pytester, three_files_prd: Path,
        agent: Callable[[str, str], str]) -> None:
    cmd = agent("noop.py", COUNTING_NOOP_AGENT)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-dry-run", "--ralph-agent",
                                           cmd + " --file {prompt_file}")
    assert result.ret == 0
    out = result.stdout.str()
    assert "--- agent argv ---" in out and "noop.py" in out and "--file" in out
    assert "- [US-002::AC1] c.txt exists" in out
    assert agent_runs(pytester) == 0
    assert not (pytester.path / ".pytest_ralph").exists()


@pytest.mark.parametrize(("ini", "env", "cli", "expected"), [
    ("2", None, None, "2"), ("2", "3", None, "3"), ("2", "3", "4", "4"), (None, None, None, "5")])
def test_settings_precedence_cli_env_ini_default(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        ralph_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch, ini: str | None,
        env: str | None, cli: str | None, expected: str) -> None:
    write_prd(story("US-001", *files_criteria("a.txt")))
    if ini:
        pytester.makeini(f"[pytest]\nralph_max_iterations = {ini}\n")
    if env:
        monkeypatch.setenv("PYTEST_RALPH_MAX_ITERATIONS", env)
    args = ["--ralph", "--ralph-agent", ralph_agent({"files": {"a.txt": ""}}).command]
    if cli:
        args += ["--ralph-max-iterations", cli]
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"[[]ralph iteration 1/{expected}[]]"])


@pytest.mark.parametrize(("where", "source"), [
    ("env", "environment variable PYTEST_RALPH_MAX_ITERATIONS"),
    ("ini", "ini ralph_max_iterations (tox.ini)"),
    ("cli", "--ralph-max-iterations")])
@pytest.mark.parametrize("value", ["0", "10001", "many"])
def test_bad_setting_names_its_source(pytester: pytest.Pytester,
                                      write_prd: Callable[..., Path],
                                      monkeypatch: pytest.MonkeyPatch, where: str, source: str,
                                      value: str) -> None:
    write_prd(story("US-001", *files_criteria("a.txt")))
    args = ["--ralph", "--ralph-agent", f"{PY} -c pass"]
    if where == "env":
        monkeypatch.setenv("PYTEST_RALPH_MAX_ITERATIONS", value)
    elif where == "ini":
        pytester.makeini(f"[pytest]\nralph_max_iterations = {value}\n")
    else:
        args += ["--ralph-max-iterations", value]
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"*max_iterations from {source}: expected an integer from 1 "
                                 f"to 10000; got '{value}'*"])


def test_state_folder_progress_and_iteration_folders(
        pytester: pytest.Pytester, three_files_prd: Path, fixer: ScriptedAgent) -> None:
    pytester.makeini("[pytest]\nralph_dir = state/here\n")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", fixer.command)
    assert result.ret == 0
    state = pytester.path / "state" / "here"
    (run,) = (state / "runs").iterdir()
    assert sorted(p.name for p in run.iterdir()) == [
        "iteration-000", "iteration-001", "iteration-002", "iteration-003", "run.json"]
    assert sorted(p.name for p in (run / "iteration-000").iterdir()) == [
        "check.json", "check.log", "check.xml"]
    assert sorted(p.name for p in (run / "iteration-002").iterdir()) == [
        "agent.log", "check.json", "check.log", "check.xml", "prompt.md"]
    xml = (run / "iteration-002" / "check.xml").read_text()
    assert 'tests="3"' in xml and 'failures="1"' in xml
    assert '<property name="ralph_story" value="US-001"' in xml
    assert '<property name="ralph_criterion" value="AC2"' in xml
    assert '<property name="ralph_kind" value="run"' in xml
    assert "agent: created a.txt" in (run / "iteration-002" / "agent.log").read_text()
    progress = (state / "progress.txt").read_text()
    assert progress.count("## ") == 4  # three iterations and the end of the run
    assert "ended: complete (exit 0): every criterion passes (3/3)" in progress
    assert "why US-001::AC1: exit status 1, expected exit status 0: `test -f a.txt`" in progress
    assert (state / ".gitignore").read_text().strip().endswith("*")
    assert list((state / "reports").glob("ralph-demo-*.md"))


def test_write_back_corrects_a_false_claim(pytester: pytest.Pytester,
                                          write_prd: Callable[..., Path]) -> None:
    (pytester.path / "a.txt").write_text("x")
    path = write_prd(story("US-001", *files_criteria("a.txt"), passes=False),
                     story("US-002", *files_criteria("never.txt"), passes=True))
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass",
                                           "--ralph-max-iterations", "1")
    assert result.ret == 1
    data = json.loads(path.read_text())
    assert [s["passes"] for s in data["userStories"]] == [True, False]
    assert data["userStories"][0]["acceptanceCriteria"] == files_criteria("a.txt")


# A step that says it started, then works for two minutes.
SLOW_STEP = {"files": {"agent-started": "1"}, "sleep": 120}


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_is_exit_2_and_writes_the_report(pytester: pytest.Pytester,
                                                write_prd: Callable[..., Path],
                                                ralph_agent: AgentFactory) -> None:
    write_prd(story("US-001", *files_criteria("never.txt")))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "--ralph", "--ralph-agent",
         ralph_agent(SLOW_STEP).command],
        cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    wait_for(pytester.path / "agent-started")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out.decode()
    assert b"pytest-ralph: interrupted (exit 2)" in out
    assert "- Outcome: **interrupted**" in report_text(pytester)


def test_prd_given_as_the_only_path_argument(pytester: pytest.Pytester,
                                             write_prd: Callable[..., Path],
                                             fixer: ScriptedAgent) -> None:
    write_prd(story("US-001", *files_criteria("a.txt")), name="plans/sprint.yaml.json")
    result = pytester.runpytest_subprocess("--ralph", "plans/sprint.yaml.json", "--ralph-agent",
                                           fixer.command)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["pytest-ralph: loop on */plans/sprint.yaml.json*"])


def test_other_path_arguments_are_a_usage_error(pytester: pytest.Pytester,
                                                three_files_prd: Path) -> None:
    result = pytester.runpytest_subprocess("--ralph", "tests/", "--ralph-agent", f"{PY} -c pass")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--ralph takes one PRD file as its only path argument*tests/*"])


def test_agent_that_breaks_the_prd_gets_the_error_and_can_recover(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        ralph_agent: AgentFactory) -> None:
    good = write_prd(story("US-001", *files_criteria("a.txt"))).read_text()
    broken = good.replace('"userStories"', '"userStories",', 1)
    agent = ralph_agent({"files": {"prd.json": broken}},  # run 1 breaks the PRD,
                        {"files": {"prd.json": good, "a.txt": "x"}})  # run 2 restores, fixes
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([
        "[[]ralph iteration 1/5[]]", "*", "*",
        "  Result: error: the checks could not run (invalid PRD */prd.json: 1 problem); failing "
        "now: US-001::AC1, <check phase>",
        "[[]ralph iteration 2/5[]]", "*", "*", "  Result: complete (+1): every criterion passes"])
    prompt = next((pytester.path / ".pytest_ralph" / "runs").glob("*/iteration-002/prompt.md"))
    text = prompt.read_text()
    assert "- [check phase] the checks could not run:" in text
    assert "invalid JSON" in text


@pytest.mark.parametrize(("steps", "args", "code", "status"), [
    # The agent exits non-zero on its run but fixes everything: complete wins (0).
    ([{"files": {"a.txt": ""}, "exit": 1}], [], 0, "complete"),
    # Agent-error streak and limit on the same iteration: 7 wins over 1.
    ([{"exit": 1}] * 3, ["--ralph-max-iterations", "3"], 7, "agent-error"),
    # Breaker and limit on the same iteration: 6 wins over 1.
    ([], ["--ralph-max-iterations", "3"], 6, "breaker"),
    # Neither streak reaches its limit: 1.
    ([], ["--ralph-max-iterations", "2"], 1, "limit"),
], ids=["complete", "agent-error", "breaker", "limit"])
def test_stop_condition_precedence(pytester: pytest.Pytester, write_prd: Callable[..., Path],
                                   ralph_agent: AgentFactory, steps: list[dict[str, Any]],
                                   args: list[str], code: int, status: str) -> None:
    write_prd(story("US-001", *files_criteria("a.txt")))
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent",
                                           ralph_agent(*steps).command, *args)
    assert result.ret == code, result.stdout.str()
    assert run_json(pytester)["status"] == status


def without_story(prd: Path, sid: str) -> str:
    """The text of ``prd`` with story ``sid`` deleted."""
    data = json.loads(prd.read_text())
    data["userStories"] = [s for s in data["userStories"] if s["id"] != sid]
    return json.dumps(data)


def test_a_criterion_that_disappears_fails_instead_of_shrinking_the_goal(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        ralph_agent: AgentFactory) -> None:
    (pytester.path / "a.txt").write_text("x")
    prd = write_prd(story("US-001", *files_criteria("a.txt")),
                    story("US-002", *files_criteria("never.txt")))
    agent = ralph_agent({"files": {"prd.json": without_story(prd, "US-002")}})
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command,
                                           "--ralph-max-iterations", "1")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["  Result: no change; failing now: US-002::AC1",
                                 "  State: 1/2 passing (+0)*"])
    assert "not checked: this criterion was in the PRD when the run started" in report_text(
        pytester)


def test_a_deleted_prd_is_a_failure(pytester: pytest.Pytester, write_prd: Callable[..., Path],
                                    ralph_agent: AgentFactory) -> None:
    (pytester.path / "a.txt").write_text("x")
    write_prd(story("US-001", *files_criteria("a.txt")),
              story("US-002", *files_criteria("never.txt")))
    result = pytester.runpytest_subprocess(
        "--ralph", "--ralph-agent", ralph_agent({"files": {"prd.json": None}}).command,
        "--ralph-max-iterations", "1")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "  Result: error: the checks could not run (*); failing now: US-001::AC1, US-002::AC1, "
        "<check phase>", "  State: 0/2 passing (-1)*",
        "*with 2 criteria still failing and check-phase errors*"])
    assert "does not exist any more (deleted or moved)" in report_text(pytester)


def test_user_addopts_cannot_shrink_the_check(pytester: pytest.Pytester,
                                              write_prd: Callable[..., Path],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """-x (stop at the first failure) in addopts must not hide the other criteria."""
    (pytester.path / "b.txt").write_text("x")
    write_prd(story("US-001", *files_criteria("never.txt", "b.txt")))
    pytester.makeini("[pytest]\naddopts = -x\n")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass",
                                           "--ralph-max-iterations", "1")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["  1/2 criteria passing; failing: US-001::AC1"])


def test_k_selects_criteria_for_the_loop(pytester: pytest.Pytester, three_files_prd: Path,
                                         fixer: ScriptedAgent) -> None:
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", fixer.command,
                                           "-k", "US-002")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["  selected by -k 'US-002': 1 criterion"])
    assert (pytester.path / "c.txt").exists() and not (pytester.path / "a.txt").exists()


def test_k_that_deselects_everything_is_exit_5(pytester: pytest.Pytester,
                                               three_files_prd: Path,
                                               ralph_agent: AgentFactory) -> None:
    noop = ralph_agent()
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", noop.command,
                                           "-k", "NOTHING")
    assert result.ret == 5
    assert len(noop.calls) == 0
    result.stdout.fnmatch_lines(["*-k 'NOTHING' deselects every criterion*"])


@pytest.mark.parametrize("flag", ["--collect-only", "--pdb", "--setup-plan", "--fixtures",
                                  "--markers"])
def test_incompatible_options_are_usage_errors(pytester: pytest.Pytester,
                                               three_files_prd: Path, flag: str) -> None:
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass", flag)
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"*{flag} cannot be used with --ralph*"])
    assert not (pytester.path / ".pytest_ralph").exists()


def test_junitxml_holds_the_last_check(pytester: pytest.Pytester, three_files_prd: Path,
                                       fixer: ScriptedAgent) -> None:
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", fixer.command,
                                           "--junitxml", "out/junit.xml")
    assert result.ret == 0
    xml = (pytester.path / "out" / "junit.xml").read_text()
    assert 'tests="3"' in xml and 'failures="0"' in xml


def test_a_second_loop_in_the_same_folder_is_refused(pytester: pytest.Pytester,
                                                     write_prd: Callable[..., Path],
                                                     ralph_agent: AgentFactory) -> None:
    write_prd(story("US-001", *files_criteria("never.txt")))
    first = subprocess.Popen(
        [sys.executable, "-m", "pytest", "--ralph", "--ralph-agent",
         ralph_agent(SLOW_STEP).command],
        cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(pytester.path / "agent-started")
        second = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass")
        assert second.ret == 4
        second.stderr.fnmatch_lines([f"*another `pytest --ralph` loop is running*(pid {first.pid}"
                                     ", started *"])
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    assert first.returncode == 2


def test_a_closed_stdout_does_not_stop_the_loop(pytester: pytest.Pytester,
                                                three_files_prd: Path,
                                                fixer: ScriptedAgent) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "--ralph", "--ralph-agent", fixer.command],
        cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        # Block-buffered stdout, as when piped into `head` by a user.
        env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"})
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    assert proc.wait(timeout=120) == 0
    assert "- Outcome: **complete**" in report_text(pytester)


SLOW_CHECK = {"text": "slow", "run": "while true; do echo . >> check.beat; sleep 0.05; done"}


@pytest.mark.skipif(sys.platform != "linux", reason="setsid and the supervisor are Linux's")
@pytest.mark.parametrize("sandbox", ["required", "off"])
def test_ctrl_c_during_a_check_leaves_no_process(pytester: pytest.Pytester,
                                                 write_prd: Callable[..., Path],
                                                 sandbox: str) -> None:
    write_prd(story("US-001", SLOW_CHECK))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "--ralph", "--ralph-agent",
                             f"{PY} -c pass", "-o", f"ralph_sandbox={sandbox}"],
                            cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    wait_for(pytester.path / "check.beat")
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out.decode()
    assert b"interrupted during the baseline check" in out
    assert not _still_beating(pytester.path / "check.beat"), \
        "the check's shell survived the interrupt"


def test_deselect_selects_criteria_for_the_loop(pytester: pytest.Pytester,
                                                three_files_prd: Path,
                                                fixer: ScriptedAgent) -> None:
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", fixer.command,
                                           "--deselect", "prd.json::US-001")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["  selected by --deselect prd.json::US-001: 1 criterion"])
    assert not (pytester.path / "a.txt").exists()


def test_k_that_checks_part_of_a_story_writes_no_verdict_for_it(
        pytester: pytest.Pytester, write_prd: Callable[..., Path]) -> None:
    """Passing the criteria -k selected says nothing about the story's other criteria."""
    path = write_prd(story("US-001", {"text": "builds", "run": "true"},
                           {"text": "tests", "run": "false"}, "Verify in browser"))
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass",
                                           "-k", "AC1")
    assert result.ret == 0
    assert json.loads(path.read_text())["userStories"][0]["passes"] is False


def test_a_project_path_with_a_dollar_sign(pytester: pytest.Pytester, fixer: ScriptedAgent,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest expands $VARS in --rootdir: the child must not be given the path."""
    monkeypatch.setenv("RALPH_TEST_VAR", "elsewhere")
    project = pytester.path / "p$RALPH_TEST_VAR"
    project.mkdir()
    (project / "prd.json").write_text(json.dumps({"userStories": [
        {"id": "US-001", "title": "t", "acceptanceCriteria": files_criteria("a.txt")}]}))
    monkeypatch.chdir(project)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", fixer.command)
    assert result.ret == 0, result.stdout.str()
    assert (project / "a.txt").exists()


def test_a_criterion_that_passed_and_fails_again_is_a_regression(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        ralph_agent: AgentFactory) -> None:
    write_prd(story("US-001", *files_criteria("a.txt", "never.txt")))
    flip_flop = ralph_agent({"files": {"a.txt": "x"}}, {"files": {"a.txt": None}})
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", flip_flop.command,
                                           "--ralph-max-iterations", "2")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["[[]ralph iteration 2/2[]]", "*", "*", "*", "*",
                                 "  Regressions: US-001::AC1 passed before and fail now"])
    assert "iteration 1/2]\n" in result.stdout.str()
    assert result.stdout.str().count("Regressions:") == 1
    report = report_text(pytester)
    assert "## Regressions" in report and "- 2: US-001::AC1" in report
    progress = (pytester.path / ".pytest_ralph" / "progress.txt").read_text()
    assert "regressions (passed before, fail now): US-001::AC1" in progress
