"""The loop against fake agent CLIs named like the real ones (on a temporary PATH) that print
outputs shaped like the real ones: API errors with exit 0, rate limits with a reset time,
crashes, timeouts after useful work, a 2 MB prompt, cost limits, budgets, blocked stories,
the escalation command and secret redaction.

Each test runs ``python -m pytest --ralph`` in a real subprocess; the fake CLI is
``tests/support/fake_cli.py`` behind a shim named ``claude`` / ``aider``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.env import clean_env
from tests.support.git import git
from tests.support.prd import story
from tests.support.project import Project

SECRET = "s3cr3t-Value-0123456789"


def claude_result(*, is_error: bool = False, status: int | None = None,
                  error_type: str | None = None, text: str = "Done.", cost: float = 0.01,
                  turns: int = 2) -> str:
    """One Claude Code ``result`` line (shape of ``claude -p --output-format stream-json``)."""
    return json.dumps({
        "type": "result", "subtype": "success", "is_error": is_error,
        "api_error_status": status, "api_error_type": error_type, "result": text,
        "num_turns": turns, "total_cost_usd": cost, "duration_ms": 420,
        "usage": {"input_tokens": 300, "output_tokens": 60},
        "terminal_reason": "api_error" if is_error else "completed", "session_id": "s-1"})


INIT = json.dumps({"type": "system", "subtype": "init", "session_id": "s-1", "tools": ["Bash"]})


def said(text: str) -> str:
    """An assistant message line of stream-json."""
    return json.dumps({"type": "assistant", "message": {"role": "assistant", "content": [
        {"type": "text", "text": text}]}, "session_id": "s-1"})


def ok(*, write: dict[str, str] | None = None, cost: float = 0.01, **extra: Any
       ) -> dict[str, Any]:
    return {"write": write or {}, "stdout": [INIT, said("working"), claude_result(cost=cost)],
            **extra}


def api_error_exit_0() -> dict[str, Any]:
    return {"stdout": [INIT, claude_result(is_error=True, status=500, error_type="api_error",
                                           text="API Error: 500 mock failure", cost=0)],
            "exit": 0}


def fake_project(tmp_path: Path, stories: list[dict[str, Any]]) -> Project:
    """A project folder under ``tmp_path`` with a PRD of ``stories`` and an empty pytest.ini;
    put a fake CLI on its PATH with :meth:`Project.cli`, script it with :meth:`Project.play`."""
    env = clean_env(drop=("PYTEST_RALPH",), names={"PYTHONUNBUFFERED"}, bytecode=True)
    project = Project(tmp_path / "project", env=env, flags=("-p", "no:cacheprovider"),
                      timeout=240)
    project.write_prd(*stories, project="fake")
    project.write_ini()
    return project


def exists(path: str) -> dict[str, Any]:
    return {"text": f"{path} exists", "exists": path}


@pytest.fixture
def project(tmp_path: Path) -> Project:
    p = fake_project(tmp_path, [story("US-001", exists("done.txt"))])
    p.cli("claude")
    return p


def test_api_error_with_exit_0_is_an_api_error_and_three_end_the_run(project: Project) -> None:
    project.play(api_error_exit_0())
    result = project.ralph("--ralph-agent", "claude")
    assert result.returncode == 7, result.stdout + result.stderr
    rows = project.rows("SELECT n, outcome, exit_code, why FROM agent_runs ORDER BY n")
    assert [r[:3] for r in rows] == [(n, "api-error", 0) for n in (1, 2, 3)]
    assert all("500" in r[3] for r in rows), rows
    assert "agent-error streak 3/3" in result.stdout
    assert "identical-failure streak 0/3 (unchanged: the agent did not run properly)" in (
        result.stdout)
    report = project.report()
    assert "- Outcome: **agent-error** (exit 7" in report
    assert "| exit 0 | api-error: " in report


def test_a_rate_limit_pauses_until_the_stated_reset_without_spending_an_iteration(
        project: Project) -> None:
    project.play({"stdout": [INIT, claude_result(
        is_error=True, text="Claude AI usage limit reached|{reset}", cost=0)],
        "reset_in": 2, "exit": 1}, ok(write={"done.txt": "yes"}))
    start = time.monotonic()
    result = project.ralph("--ralph-agent", "claude", "--ralph-max-iterations", "1")
    took = time.monotonic() - start
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[ralph iteration 1/1: rate limited]" in result.stdout
    assert "until the stated reset at" in result.stdout
    [(n, outcome, pause)] = project.rows("SELECT n, outcome, pause FROM agent_attempts")
    assert (n, outcome) == (1, "rate-limited") and 1.0 <= pause <= 3.5
    assert took >= 1.0
    assert project.rows("SELECT n, outcome FROM agent_runs") == [(1, "ok")]
    assert project.iteration_file(1, "agent.rate-limited-1.log").exists()
    report = project.report()
    assert "## Rate-limited agent runs" in report
    assert "- Rate limits: 1 agent run rate-limited" in report
    status = project.pytest("--ralph-status")
    assert "  rate limited: 1 agent run(s)" in status.stdout, status.stdout


def test_a_rate_limit_with_no_reset_uses_the_backoff_capped_by_max_pause(
        project: Project) -> None:
    project.play({"stdout": [INIT, claude_result(is_error=True, status=429,
                                                 error_type="rate_limit_error",
                                                 text="API Error: Request rejected (429)")],
                  "exit": 1}, ok(write={"done.txt": "yes"}))
    result = project.ralph("--ralph-agent", "claude",
                           ini="ralph_rate_limit_backoff = 600\nralph_max_pause = 1\n")
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("no reset time stated: ralph_rate_limit_backoff 600 s, capped by ralph_max_pause "
            "1 s") in result.stdout
    [(outcome, pause)] = project.rows("SELECT outcome, pause FROM agent_attempts")
    assert outcome == "rate-limited" and 1.0 <= pause < 1.5  # the pause as it really was


def test_a_rate_limit_beyond_the_budget_stops_at_once(project: Project) -> None:
    project.play({"stdout": [INIT, claude_result(
        is_error=True, text="Claude AI usage limit reached|{reset}")], "reset_in": 3000,
        "exit": 1})
    start = time.monotonic()
    result = project.ralph("--ralph-agent", "claude", "--ralph-budget", "120")
    assert time.monotonic() - start < 60
    assert result.returncode == 1, result.stdout + result.stderr
    assert "stopped at the wall-clock budget: the agent is rate limited for" in result.stdout


def test_a_crash_every_other_run_does_not_stop_the_loop(tmp_path: Path) -> None:
    p = fake_project(tmp_path, [story("US-001", exists("a.txt"), exists("b.txt"))])
    p.cli("claude")
    p.play({"kill": True}, ok(write={"a.txt": "a"}), {"kill": True}, ok(write={"b.txt": "b"}))
    result = p.ralph("--ralph-agent", "claude", "--ralph-max-iterations", "6")
    assert result.returncode == 0, result.stdout + result.stderr
    assert p.rows("SELECT n, outcome FROM agent_runs ORDER BY n") == [
        (1, "crash"), (2, "ok"), (3, "crash"), (4, "ok")]
    assert "killed by signal 9" in result.stdout
    assert "| 1 | US-001 | exit -9 | crash |" in p.report()


def test_a_timed_out_run_still_gets_its_criteria_checked(project: Project) -> None:
    project.play({"write": {"done.txt": "useful work"}, "sleep": 60})
    start = time.monotonic()
    result = project.ralph("--ralph-agent", "claude", "--ralph-agent-timeout", "2")
    assert time.monotonic() - start < 50
    assert result.returncode == 0, result.stdout + result.stderr
    assert project.rows("SELECT n, outcome FROM agent_runs") == [(1, "timeout")]
    assert "timed out (process group killed)" in result.stdout
    assert "| 1 | US-001 | - | timeout |" in project.report()


def test_a_2_mb_prompt_travels_on_stdin_and_in_the_file_never_in_argv(project: Project) -> None:
    (project.root / "big.md").write_text("# big\n" + ("lorem ipsum " * 180_000) + "\n$failing\n")
    project.play(ok(write={"done.txt": "yes"}))
    result = project.ralph("--ralph-agent", "claude", ini="ralph_prompt = big.md\n")
    assert result.returncode == 0, result.stdout + result.stderr
    [call] = project.calls()
    assert call["stdin_bytes"] > 2_000_000
    assert call["prompt_file_bytes"] == call["stdin_bytes"]
    assert max(len(a) for a in call["argv"]) < 200
    assert call["argv"][1:] == ["-p", "--output-format", "stream-json", "--verbose",
                                "--dangerously-skip-permissions"]


def test_three_stories_where_story_2_never_passes(tmp_path: Path) -> None:
    """Must-show: stories 1 and 3 complete, story 2 is blocked, exit 6, and the report's
    escalation section names story 2 and its repeated failure; the escalation command gets
    the state dump on stdin."""
    p = fake_project(tmp_path, [story("US-001", exists("one.txt"), priority=1),
                           story("US-002", exists("never.txt"), priority=2),
                           story("US-003", exists("three.txt"), priority=3)])
    p.cli("claude")
    p.play(ok(write={"one.txt": "1"}), ok(write={"src/attempt1.py": "x = 1\n"}),
           ok(write={"src/attempt2.py": "x = 2\n"}), ok(write={"src/attempt3.py": "x = 3\n"}),
           ok(write={"three.txt": "3"}))
    git(p.root, "init", "-q")
    git(p.root, "add", "-A")
    git(p.root, "commit", "-q", "-m", "start")
    (p.root / "esc.py").write_text(
        "import json, sys\nd = json.load(sys.stdin)\n"
        "open('escalations.jsonl', 'a').write(json.dumps(d) + '\\n')\n")
    result = p.ralph("--ralph-agent", "claude", "--ralph-max-iterations", "10",
                     ini=f"ralph_escalate = {sys.executable} esc.py\n")
    out = result.stdout
    assert result.returncode == 6, out + result.stderr
    assert p.rows("SELECT n, story FROM iterations WHERE n > 0 ORDER BY n") == [
        (1, "US-001"), (2, "US-002"), (3, "US-002"), (4, "US-002"), (5, "US-003")]
    assert "  Blocked: US-002: the same failure" in out and "next: US-003" in out
    assert "every remaining story is blocked (US-002: the same failure" in out
    prd = json.loads((p.root / "prd.json").read_text())
    assert [s["passes"] for s in prd["userStories"]] == [True, False, True]
    fifth = p.iteration_file(5, "prompt.md").read_text()
    assert "## Blocked stories" in fifth and "- US-002: story US-002" in fifth
    assert "failed the same way" not in fifth.split("## Blocked stories")[0]  # US-003: untried
    assert "failed the same way in 4 checks in a row" in p.iteration_file(
        4, "prompt.md").read_text()
    report = p.report()
    escalation = report[report.index("## Escalation"):]
    assert "### Blocked: US-002: story US-002" in escalation
    assert "- US-002::AC1 (fingerprint `" in escalation and "never.txt" in escalation
    assert "failed the same way in 6 checks in a row" in escalation  # baseline + 5
    assert "| 4 | agent `claude " in escalation and "` exit 0 in " in escalation
    assert "Last diff on it (`git diff --stat`):" in escalation
    assert "src/attempt3.py" in escalation.split("Last diff on it")[1].split("###")[0]
    events = [json.loads(line) for line in
              (p.root / "escalations.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["story-blocked", "all-blocked"]
    assert events[0]["report"] is None
    assert Path(events[1]["report"]).read_text() == report
    assert "all-blocked (US-002): escalation command" in report
    assert events[0]["stories"][0]["id"] == "US-002"
    assert events[0]["stories"][0]["failing"][0]["criterion"] == "US-002::AC1"
    assert [t["iteration"] for t in events[0]["stories"][0]["tried"]] == [2, 3, 4]
    status = p.pytest("--ralph-status")
    assert "  blocked: US-002: the same failure" in status.stdout, status.stdout
    assert "  agent cost: $0.0500" in status.stdout


def test_story_max_iterations_blocks_a_story_early(tmp_path: Path) -> None:
    p = fake_project(tmp_path, [story("US-001", exists("a.txt"), priority=1),
                           story("US-002", exists("b.txt"), priority=2)])
    p.cli("claude")
    p.play(ok())
    result = p.ralph("--ralph-agent", "claude", ini="ralph_story_max_iterations = 1\n")
    assert result.returncode == 6, result.stdout
    assert "worked on in 1 iteration (ralph_story_max_iterations 1)" in result.stdout
    assert p.rows("SELECT n, story FROM iterations WHERE n > 0 ORDER BY n") == [
        (1, "US-001"), (2, "US-002")]


def test_max_cost_stops_the_run_once_the_reported_cost_is_spent(project: Project) -> None:
    project.play(ok(cost=0.6))
    result = project.ralph("--ralph-agent", "claude", "--ralph-max-cost", "1")
    assert result.returncode == 1, result.stdout
    assert "stopped at the cost limit: the agent runs cost $1.2000" in result.stdout
    assert project.rows("SELECT n, cost_usd, turns, input_tokens FROM agent_runs ORDER BY n") == [
        (1, 0.6, 2, 300), (2, 0.6, 2, 300)]
    assert "- Agent cost: $1.2000" in project.report()


def test_the_wall_clock_budget_cuts_the_agent_and_stops_the_run(project: Project) -> None:
    project.play({"sleep": 120})
    start = time.monotonic()
    result = project.ralph("--ralph-agent", "claude", "--ralph-budget", "15")
    took = time.monotonic() - start
    assert result.returncode == 1, result.stdout
    assert "stopped at the wall-clock budget (15 s, --ralph-budget)" in result.stdout
    assert took < 100
    assert project.rows("SELECT outcome FROM agent_runs") == [("timeout",)]


def test_secrets_are_redacted_from_logs_prompts_progress_and_reports(tmp_path: Path) -> None:
    p = fake_project(tmp_path, [story("US-001", {"text": "leak is fixed",
                                            "run": "cat leak.txt; exit 1"})])
    p.cli("claude")
    p.env["MY_SERVICE_API_KEY"] = SECRET
    p.play({"write": {"leak.txt": f"token={SECRET}\n"},
            "stdout": [INIT, said(f"the key is {SECRET}"), claude_result()],
            "stderr": [f"debug: {SECRET[:7]}", f"{SECRET[7:]} end", f"again {SECRET}"]})
    result = p.ralph("--ralph-agent", "claude", "--ralph-max-iterations", "2")
    assert result.returncode == 1, result.stdout
    state = p.root / ".pytest_ralph"
    texts = {str(f): f.read_text(errors="replace") for f in state.rglob("*")
             if f.is_file() and f.suffix in (".log", ".md", ".txt")
             and f.name not in ("check.log",)}
    assert texts and not [f for f, t in texts.items() if SECRET in t]
    agent_log = p.iteration_file(1, "agent.log").read_text()
    assert "the key is [redacted $MY_SERVICE_API_KEY]" in agent_log
    assert "again [redacted $MY_SERVICE_API_KEY]" in agent_log
    assert "[redacted $MY_SERVICE_API_KEY]" in p.iteration_file(2, "prompt.md").read_text()


def test_a_cli_without_structured_output_is_judged_by_its_exit_code(tmp_path: Path) -> None:
    """aider has no structured output: a result-shaped line it prints (quoting a file, say)
    is not read; its exit code decides."""
    p = fake_project(tmp_path, [story("US-001", exists("done.txt"))])
    p.cli("aider")
    p.play({"stdout": [claude_result(is_error=True, status=500)], "exit": 0,
            "write": {"done.txt": "x"}})
    result = p.ralph("--ralph-agent", "aider")
    assert result.returncode == 0, result.stdout + result.stderr
    assert p.rows("SELECT outcome FROM agent_runs") == [("ok",)]
    [call] = p.calls()
    assert call["argv"][1:4] == ["--yes-always", "--no-pretty", "--message-file"]
    assert call["prompt_file_bytes"] == call["stdin_bytes"] > 100


def test_ini_agent_flags_replace_a_presets_flags(project: Project) -> None:
    project.play(ok(write={"done.txt": "yes"}))
    result = project.ralph("--ralph-agent", "claude",
                           ini="ralph_agent_flags = -p --model sonnet --output-format "
                               "stream-json --verbose\n")
    assert result.returncode == 0, result.stdout + result.stderr
    [call] = project.calls()
    assert call["argv"][1:] == ["-p", "--model", "sonnet", "--output-format", "stream-json",
                                "--verbose"]


def test_a_large_agent_output_is_streamed_to_the_log(project: Project) -> None:
    project.play({"write": {"done.txt": "x"}, "filler": 30 * 1024 * 1024,
                  "stdout": [INIT], "stderr": ["tail line"]})
    result = project.ralph("--ralph-agent", "claude")
    assert result.returncode == 0, result.stdout + result.stderr
    log = project.iteration_file(1, "agent.log")
    assert log.stat().st_size >= 30 * 1024 * 1024
    assert project.rows("SELECT outcome FROM agent_runs") == [("ok",)]


def test_the_budget_also_bounds_a_slow_check(tmp_path: Path) -> None:
    p = fake_project(tmp_path, [story("US-001", {"text": "slow", "run": "sleep 60; exit 1"})])
    p.cli("claude")
    p.play(ok())
    start = time.monotonic()
    result = p.ralph("--ralph-agent", "claude", "--ralph-budget", "4")
    assert time.monotonic() - start < 40
    assert result.returncode == 1, result.stdout
    assert "stopped at the wall-clock budget (4 s, --ralph-budget)" in result.stdout


def test_rate_limits_that_end_the_run_are_in_the_report_and_the_status(
        project: Project) -> None:
    project.play({"stdout": [INIT, claude_result(is_error=True, status=429,
                                                 error_type="rate_limit_error", text="slow down")],
                  "exit": 1})
    result = project.ralph("--ralph-agent", "claude", ini="ralph_rate_limit_backoff = 0.2\n")
    assert result.returncode == 7, result.stdout
    report = project.report()
    assert "The agent did not run properly 3 times in a row" in report
    assert "agent.rate-limited-3.log" in report and "### End of the last agent log" in report
    status = project.pytest("--ralph-status")
    assert "agent-error streak 3/3" in status.stdout, status.stdout
    assert "last agent run: iteration 1, rate-limited: " in status.stdout


def test_max_cost_warns_when_the_agent_reports_no_cost(tmp_path: Path) -> None:
    p = fake_project(tmp_path, [story("US-001", exists("done.txt"))])
    p.cli("aider")
    p.play({}, {"write": {"done.txt": "x"}})
    result = p.ralph("--ralph-agent", "aider", "--ralph-max-cost", "1")
    assert result.returncode == 0, result.stdout
    assert result.stdout.count("the agent reports no cost") == 1
    assert "the agent reports no cost" in p.report()


def test_a_blocked_story_fixed_by_other_work_is_unblocked_and_worked_on_after_a_regression(
        tmp_path: Path) -> None:
    p = fake_project(tmp_path, [story("US-1", exists("a.txt"), priority=1),
                           story("US-2", exists("b.txt"), priority=2),
                           story("US-3", exists("c.txt"), priority=3)])
    p.cli("claude")
    p.play(ok(), ok(write={"a.txt": "a", "b.txt": "b"}),
           {**ok(write={"c.txt": "c"}), "delete": ["a.txt"]}, ok(write={"a.txt": "a"}))
    result = p.ralph("--ralph-agent", "claude", ini="ralph_story_max_iterations = 1\n")
    assert result.returncode == 0, result.stdout
    assert p.rows("SELECT n, story FROM iterations WHERE n > 0 ORDER BY n") == [
        (1, "US-1"), (2, "US-2"), (3, "US-3"), (4, "US-1")]
    assert "  Blocked: US-1: worked on in 1 iteration" in result.stdout
    assert "  Unblocked: US-1: its criteria pass again" in result.stdout
    assert "unblocked US-1: its criteria pass again" in (
        p.root / ".pytest_ralph" / "progress.txt").read_text()


def test_a_rate_limit_writes_the_shared_pause_file_of_a_parallel_run(
        project: Project, tmp_path: Path) -> None:
    # In a lane of `--ralph-parallel N`, the pause is shared: the other lanes read the file.
    pause = tmp_path / "pause.json"
    project.env["PYTEST_RALPH_PAUSE_FILE"] = str(pause)
    project.play({"stdout": [INIT, claude_result(
        is_error=True, text="Claude AI usage limit reached|{reset}", cost=0)],
        "reset_in": 2, "exit": 1}, ok(write={"done.txt": "yes"}))
    before = time.time()
    result = project.ralph("--ralph-agent", "claude", "--ralph-max-iterations", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    shared = json.loads(pause.read_text())
    assert before + 1.0 <= shared["until"] <= time.time() + 1.0
    assert "until the stated reset at" in shared["why"]


def test_a_lane_waits_out_the_pause_another_lane_shared(project: Project,
                                                        tmp_path: Path) -> None:
    pause = tmp_path / "pause.json"
    # Long enough that the pause still holds when the agent is due, after pytest's start-up
    # and the baseline check on a loaded machine (2.5 s was not, under a full -n 2 suite).
    pause.write_text(json.dumps({"until": time.time() + 12, "why": "the stated retry-after"}))
    project.env["PYTEST_RALPH_PAUSE_FILE"] = str(pause)
    project.play(ok(write={"done.txt": "yes"}))
    start = time.monotonic()
    result = project.ralph("--ralph-agent", "claude", "--ralph-max-iterations", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "another lane's agent was rate limited (the stated retry-after)" in result.stdout
    assert time.monotonic() - start >= 2.0
    assert project.rows("SELECT n, outcome FROM agent_runs") == [(1, "ok")]


def test_a_pause_file_that_cannot_be_read_is_no_pause(project: Project,
                                                      tmp_path: Path) -> None:
    pause = tmp_path / "pause.json"
    pause.write_text("{not json")
    project.env["PYTEST_RALPH_PAUSE_FILE"] = str(pause)
    project.play(ok(write={"done.txt": "yes"}))
    result = project.ralph("--ralph-agent", "claude", "--ralph-max-iterations", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pausing" not in result.stdout
