"""``pytest --ralph --ralph-parallel N`` end to end: a real git repository, the controller and
its lanes as real subprocesses, agents that are small Python scripts."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.env import clean_env
from tests.support.git import git, needs_git
from tests.support.prd import story
from tests.support.terminal import Screen, run_in_pty

pytestmark = needs_git

#: The agent of the lanes: for each `test -f NAME` criterion the prompt says fails, writes
#: NAME (the story's id in it, so that the test can tell whose work it is) after sleeping
#: AGENT_SLEEP seconds; each run is counted in AGENT_RUNS (one line per file written) and,
#: before it sleeps, in AGENT_RUNS.started.
AGENT = r"""
import os, re, sys, time
prompt = sys.stdin.read()
section = prompt.split("## Failing acceptance criteria", 1)[-1].split("\n## ", 1)[0]
with open(os.environ["AGENT_RUNS"] + ".started", "a") as f:
    f.write(os.getcwd() + "\n")
time.sleep(float(os.environ.get("AGENT_SLEEP", "0")))
story = re.search(r"/(US-\d+)\.\d+\.state/", os.environ["PYTEST_RALPH_PROMPT_FILE"])
for name in dict.fromkeys(re.findall(r"test -f (\S+?)`", section)):
    with open(name, "a") as f:
        f.write(f"work of {story.group(1) if story else '?'}\n")
    with open(os.environ["AGENT_RUNS"], "a") as f:
        f.write(f"{os.getcwd()} {name}\n")
"""

#: An agent that writes the same file with its own story's line (a conflict between lanes).
SAME_LINES_AGENT = r"""
import os, re, sys
prompt = sys.stdin.read()
sid = re.search(r"/(US-\d+)\.\d+\.state/", os.environ["PYTEST_RALPH_PROMPT_FILE"]).group(1)
text = open("shared.txt").read() if os.path.exists("shared.txt") else ""
lines = text.splitlines()
if f"done {sid}" not in lines:
    lines = [l for l in lines if not l.startswith("line")] + [f"done {sid}"]
    open("shared.txt", "w").write("\n".join(sorted(lines)) + "\n")
open(f"{sid}.txt", "w").write("x\n")
with open(os.environ["AGENT_RUNS"], "a") as f:
    f.write(f"{sid}\n")
"""


def criteria(*names: str) -> list[dict[str, str]]:
    return [{"text": f"{n} exists", "run": f"test -f {n}"} for n in names]


def project(tmp_path: Path, stories: list[dict[str, Any]], files: dict[str, str] | None = None
            ) -> Path:
    """A git repository with ``prd.json`` (``stories``), a ``pytest.ini`` and ``files``,
    all committed."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "prd.json").write_text(json.dumps({"project": "Demo", "userStories": stories},
                                              indent=2) + "\n")
    (root / "pytest.ini").write_text("[pytest]\n")
    for name, text in (files or {}).items():
        (root / name).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


def env(tmp_path: Path, **extra: str) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return clean_env(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
                     GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com",
                     GIT_CONFIG_NOSYSTEM="1", HOME=str(home),
                     AGENT_RUNS=str(tmp_path / "agent-runs.txt"), **extra)


def agent(tmp_path: Path, body: str = AGENT) -> str:
    path = tmp_path / "agent.py"
    path.write_text(body)
    return f"{sys.executable} {path}"


def ralph(root: Path, tmp_path: Path, *args: str, timeout: float = 300,
          **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "--ralph", "--ralph-sandbox", "off",
                           *args], cwd=root, env=env(tmp_path, **extra), text=True,
                          capture_output=True, timeout=timeout)


def start(root: Path, tmp_path: Path, *args: str, **extra: str) -> subprocess.Popen[str]:
    log = open(tmp_path / "controller.log", "w")  # noqa: SIM115 - the process owns it
    return subprocess.Popen([sys.executable, "-m", "pytest", "--ralph", "--ralph-sandbox",
                             "off", *args], cwd=root, env=env(tmp_path, **extra), text=True,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def worktrees(root: Path) -> list[str]:
    return [line for line in git(root, "worktree", "list").splitlines() if line.strip()]


def ralph_branches(root: Path) -> list[str]:
    return [b.strip() for b in git(root, "branch", "--list", "ralph/*").splitlines()]


def record(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / ".pytest_ralph" / "parallel.json").read_text())
    return data


def wait_until(what: Any, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if what():
            return
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


def started(tmp_path: Path) -> int:
    """How many agent runs have started (the agents write a line before they sleep)."""
    path = tmp_path / "agent-runs.txt.started"
    return len(path.read_text().splitlines()) if path.exists() else 0


def lane_pgids(root: Path) -> list[int]:
    return [st["pgid"] for st in record(root)["stories"].values()
            if st["phase"] == "running" and isinstance(st.get("pgid"), int)]


def alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pgid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[-1].split()[0] == "Z")


FOUR = [story(f"US-00{i}", *criteria(f"f{i}.txt"), priority=i) for i in range(1, 5)]


# -- refusals ------------------------------------------------------------------------------


def test_refuses_a_folder_that_is_not_a_git_repository(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    (root / "prd.json").write_text(json.dumps({"project": "D", "userStories": FOUR}))
    (root / "pytest.ini").write_text("[pytest]\n")
    done = ralph(root, tmp_path, "--ralph-parallel", "2", "--ralph-agent", agent(tmp_path))
    assert done.returncode == 4, done.stdout + done.stderr
    assert "--ralph-parallel needs a git repository" in done.stdout + done.stderr
    assert "git init" in done.stdout + done.stderr
    assert not (root / ".pytest_ralph" / "lanes").exists()


def test_refuses_uncommitted_changes_naming_them(tmp_path: Path) -> None:
    root = project(tmp_path, FOUR)
    (root / "new.py").write_text("x = 1\n")
    done = ralph(root, tmp_path, "--ralph-parallel", "2", "--ralph-agent", agent(tmp_path))
    out = done.stdout + done.stderr
    assert done.returncode == 4, out
    assert "?? new.py" in out and "git stash -u" in out
    assert worktrees(root) == worktrees(root)[:1] and not ralph_branches(root)


@pytest.mark.parametrize(("deps", "said"), [
    ({"US-001": ["US-002"], "US-002": ["US-001"]}, "US-001 -> US-002 -> US-001"),
    ({"US-003": ["US-009"]}, "US-009"),
])
def test_refuses_dependencies_no_run_can_follow(tmp_path: Path, deps: dict[str, list[str]],
                                                said: str) -> None:
    stories = [dict(s, dependsOn=deps[s["id"]]) if s["id"] in deps else s for s in FOUR]
    root = project(tmp_path, stories)
    done = ralph(root, tmp_path, "--ralph-parallel", "2", "--ralph-agent", agent(tmp_path))
    out = done.stdout + done.stderr
    assert done.returncode == 4, out
    assert said in out and "prd.json" in out
    assert not ralph_branches(root)


def test_refuses_a_story_named_like_the_integration_branch(tmp_path: Path) -> None:
    root = project(tmp_path, [story("integration", *criteria("a.txt")),
                              story("US-002", *criteria("b.txt"))])
    done = ralph(root, tmp_path, "--ralph-parallel", "2", "--ralph-agent", agent(tmp_path))
    assert done.returncode == 4, done.stdout + done.stderr
    assert "story 'integration': a parallel run names its merge queue's branch" in (
        done.stdout + done.stderr)
    assert "Traceback" not in done.stdout + done.stderr
    assert len(worktrees(root)) == 1 and ralph_branches(root) == []


def test_refuses_ralph_story_with_parallel(tmp_path: Path) -> None:
    root = project(tmp_path, FOUR)
    done = ralph(root, tmp_path, "--ralph-parallel", "2", "--ralph-story", "US-001",
                 "--ralph-agent", agent(tmp_path))
    assert done.returncode == 4
    assert "--ralph-story cannot be used with --ralph-parallel" in done.stderr


# -- runs ----------------------------------------------------------------------------------


def test_four_independent_stories_on_four_lanes(tmp_path: Path) -> None:
    root = project(tmp_path, FOUR)
    done = ralph(root, tmp_path, "--ralph-parallel", "4", "--ralph-agent", agent(tmp_path),
                 "--ralph-max-iterations", "3", AGENT_SLEEP="2")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    for i in range(1, 5):
        assert f"lane US-00{i}: started (attempt 1)" in out
        assert f"queue: US-00{i} merged" in out
    assert "4/4 stories merged and verified" in out
    # the four agents ran in four worktrees, each once
    runs = (tmp_path / "agent-runs.txt").read_text().splitlines()
    assert len(runs) == 4 and len({r.split()[0] for r in runs}) == 4
    # the user's branch has all four stories' work; nothing is left behind
    for i in range(1, 5):
        assert (root / f"f{i}.txt").read_text() == f"work of US-00{i}\n"
    assert git(root, "status", "--porcelain") == ""
    assert len(worktrees(root)) == 1
    assert ralph_branches(root) == []  # the lanes' and the integration branch are gone
    report = (root / ".pytest_ralph" / "parallel-report.md").read_text()
    assert "## Lane timeline" in report and "## Merge queue" in report
    assert report.count("| merged |") >= 4
    page = (root / ".pytest_ralph" / "parallel-report.html").read_text()
    assert page.count(">merged</td>") >= 8 and "Outcome: complete (exit 0)" in page
    assert "parallel-report.html beside it" in done.stdout
    status = subprocess.run([sys.executable, "-m", "pytest", "--ralph-status"], cwd=root,
                            env=env(tmp_path), text=True, capture_output=True)
    assert "US-004: merged, attempt 1, 1 iteration(s)" in status.stdout, status.stdout


def test_a_dependent_story_starts_once_its_dependency_is_merged(tmp_path: Path) -> None:
    stories = [story("US-001", *criteria("a.txt")),
               dict(story("US-002", *criteria("b.txt")), dependsOn=["US-001"])]
    root = project(tmp_path, stories)
    done = ralph(root, tmp_path, "--ralph-parallel", "2", "--ralph-agent", agent(tmp_path))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert out.index("queue: US-001 merged") < out.index("lane US-002: started")


def test_a_blocked_story_holds_back_its_dependents_and_keeps_its_branch(tmp_path: Path) -> None:
    never = {"text": "never", "run": "false"}
    stories = [story("US-001", never), dict(story("US-002", *criteria("b.txt")),
                                            dependsOn=["US-001"]),
               story("US-003", *criteria("c.txt"))]
    root = project(tmp_path, stories)
    done = ralph(root, tmp_path, "--ralph-parallel", "2", "--ralph-agent", agent(tmp_path),
                 "--ralph-max-iterations", "1")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "story US-001 blocked: its lane's `pytest --ralph` exited 1" in out
    assert "held back US-002: waits on blocked story US-001" in out
    assert "queue: US-003 merged" in out
    assert len(worktrees(root)) == 1
    assert any(b.endswith("/US-001") for b in ralph_branches(root))


def test_kill_9_of_the_controller_then_the_same_command_resumes(tmp_path: Path) -> None:
    stories = [story(f"US-00{i}", *criteria(f"f{i}.txt"), priority=i) for i in range(1, 4)]
    root = project(tmp_path, stories)
    args = ("--ralph-parallel", "3", "--ralph-agent", agent(tmp_path))
    # The orphans' agents must still be running when the resumed controller looks (it stops
    # them, so a long sleep costs nothing): 6 s was not enough for a resume's start-up on a
    # loaded machine (under -n 2, two of three lanes had finished by then).
    proc = start(root, tmp_path, *args, AGENT_SLEEP="60")
    wait_until(lambda: started(tmp_path) == 3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    orphans = lane_pgids(root)
    assert all(alive(p) for p in orphans)  # the lanes outlive their controller
    done = ralph(root, tmp_path, *args, AGENT_SLEEP="0")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "resuming parallel run" in out
    assert out.count("stopping its orphaned process group") == 3
    assert not any(alive(p) for p in orphans)
    assert "3/3 stories merged and verified" in out
    for i in range(1, 4):
        assert (root / f"f{i}.txt").read_text() == f"work of US-00{i}\n"
    # each lane's iteration 1 was interrupted in its agent run (3 runs started), then
    # resumed: its own run went on and did iteration 1 again (3 more runs), which finished
    # once per story; no iteration was counted twice
    assert started(tmp_path) == 6
    assert len((tmp_path / "agent-runs.txt").read_text().splitlines()) == 3
    for st in record(root)["stories"].values():
        assert st["phase"] == "merged" and st["attempt"] == 1 and st["iterations"] == 1
        log = Path(st["log"]).read_text()
        assert "interrupted during iteration 1" in log and "resuming run" in log
    assert len(worktrees(root)) == 1


def history_rows(root: Path) -> list[tuple[str, int, int, int, int]]:
    """What ``.pytest_ralph/ralph.db`` holds of the lanes' iterations (the baseline left out):
    (story, attempt, iteration, agent runs, criteria passing) per iteration."""
    con = sqlite3.connect(root / ".pytest_ralph" / "ralph.db")
    try:
        rows = con.execute(
            "SELECT l.story, l.attempt, i.n, (SELECT count(*) FROM agent_runs a WHERE "
            "a.run_id = i.run_id AND a.n = i.n), (SELECT count(*) FROM criterion_results c "
            "WHERE c.run_id = i.run_id AND c.n = i.n AND c.outcome = 'passed') FROM lanes l "
            "JOIN iterations i ON i.run_id = l.run_id WHERE i.n > 0 ORDER BY l.story, i.n"
        ).fetchall()
    finally:
        con.close()
    return [tuple(r) for r in rows]


def parallel_status(root: Path) -> str:
    con = sqlite3.connect(root / ".pytest_ralph" / "ralph.db")
    try:
        return str(con.execute("SELECT status FROM parallel_runs").fetchone()[0])
    finally:
        con.close()


def test_the_run_history_holds_every_lane_once_after_kill_9_and_resume(tmp_path: Path) -> None:
    stories = [story(f"US-00{i}", *criteria(f"f{i}.txt"), priority=i) for i in (1, 2)]
    root = project(tmp_path, stories)
    args = ("--ralph-parallel", "2", "--ralph-agent", agent(tmp_path))
    proc = start(root, tmp_path, *args, AGENT_SLEEP="30")  # stopped by the resume
    wait_until(lambda: started(tmp_path) == 2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert parallel_status(root) == "running" and history_rows(root) == []
    done = ralph(root, tmp_path, *args, AGENT_SLEEP="0")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "taking over the loop lock" in out and f"pid {proc.pid}" in out
    # each story's one iteration, with its agent run and its passing criterion, once
    assert history_rows(root) == [("US-001", 1, 1, 1, 1), ("US-002", 1, 1, 1, 1)]
    assert parallel_status(root) == "complete"
    status = subprocess.run([sys.executable, "-m", "pytest", "--ralph-status"], cwd=root,
                            env=env(tmp_path), text=True, capture_output=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert "no runs yet" not in status.stdout
    for sid in ("US-001", "US-002"):
        assert f"{sid}: merged, attempt 1, 1 iteration(s)" in status.stdout, status.stdout
    assert status.stdout.count("in ralph.db: attempt 1, run ") == 2
    assert status.stdout.count("(complete), 1 iteration(s)") == 2
    # a second run of the same command starts a new run: the first's rows stay as they were
    (root / "f1.txt").unlink()
    git(root, "commit", "-qam", "drop f1")
    again = ralph(root, tmp_path, *args, AGENT_SLEEP="0")
    assert again.returncode == 0, again.stdout + again.stderr
    assert history_rows(root) == [("US-001", 1, 1, 1, 1), ("US-001", 1, 1, 1, 1),
                                  ("US-002", 1, 1, 1, 1)]


def test_a_second_controller_of_the_run_is_refused(tmp_path: Path) -> None:
    root = project(tmp_path, [story(f"US-00{i}", *criteria(f"f{i}.txt"), priority=i)
                              for i in (1, 2)])
    args = ("--ralph-parallel", "2", "--ralph-agent", agent(tmp_path))
    proc = start(root, tmp_path, *args, AGENT_SLEEP="25")  # outlasts the two refusals
    try:
        wait_until(lambda: started(tmp_path) == 2)
        groups = lane_pgids(root)
        for extra in (args, ("--ralph-agent", agent(tmp_path))):  # a controller, a loop
            second = ralph(root, tmp_path, *extra, timeout=120)
            out = second.stdout + second.stderr
            assert second.returncode == 4, out
            assert (f"another `pytest --ralph` loop is running with the state folder "
                    f"{root / '.pytest_ralph'} (pid {proc.pid}, started ") in out
            assert "the controller of a parallel run (--ralph-parallel 2)" in out
            assert "stop it (`pytest --ralph-cancel`)" in out
            assert "resuming" not in out and "stopping its orphaned" not in out
            assert "Traceback" not in out
            assert all(alive(p) for p in groups)  # the first's lanes go on
        assert proc.wait(timeout=240) == 0, (tmp_path / "controller.log").read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "2/2 stories merged" in (tmp_path / "controller.log").read_text()
    assert len((tmp_path / "agent-runs.txt").read_text().splitlines()) == 2
    assert history_rows(root) == [("US-001", 1, 1, 1, 1), ("US-002", 1, 1, 1, 1)]


def test_a_parallel_run_is_refused_while_a_loop_runs(tmp_path: Path) -> None:
    root = project(tmp_path, [story(f"US-00{i}", *criteria(f"f{i}.txt"), priority=i)
                              for i in (1, 2)])
    loop = start(root, tmp_path, "--ralph-agent", agent(tmp_path), AGENT_SLEEP="60")
    try:
        wait_until(lambda: started(tmp_path) == 1)
        done = ralph(root, tmp_path, "--ralph-parallel", "2", "--ralph-agent",
                     agent(tmp_path), timeout=120)
        out = done.stdout + done.stderr
        assert done.returncode == 4, out
        assert (f"another `pytest --ralph` loop is running with the state folder "
                f"{root / '.pytest_ralph'} (pid {loop.pid}, started ") in out
        assert "`pytest --ralph-cancel`" in out
        assert len(worktrees(root)) == 1 and ralph_branches(root) == []
        assert not (root / ".pytest_ralph" / "parallel.json").exists()
        assert loop.poll() is None  # the loop goes on
    finally:
        os.killpg(loop.pid, signal.SIGINT)
        loop.wait(timeout=120)


def test_cancel_stops_every_lane(tmp_path: Path) -> None:
    root = project(tmp_path, FOUR)
    proc = start(root, tmp_path, "--ralph-parallel", "4", "--ralph-agent", agent(tmp_path),
                 AGENT_SLEEP="60")
    wait_until(lambda: started(tmp_path) == 4)
    groups = lane_pgids(root)
    cancel = subprocess.run([sys.executable, "-m", "pytest", "--ralph-cancel"], cwd=root,
                            env=env(tmp_path), text=True, capture_output=True, timeout=60)
    assert cancel.returncode == 0 and "cancel requested" in cancel.stdout
    assert proc.wait(timeout=60) == 2
    assert not any(alive(p) for p in groups)
    out = (tmp_path / "controller.log").read_text()
    assert "cancelled by --ralph-cancel: every lane's processes were stopped" in out
    status = subprocess.run([sys.executable, "-m", "pytest", "--ralph-status"], cwd=root,
                            env=env(tmp_path), text=True, capture_output=True)
    assert "stopped (the same command resumes it)" in status.stdout


@pytest.mark.parametrize(("signum", "said"), [
    (signal.SIGINT, "interrupted by Ctrl-C"),
    (signal.SIGTERM, "stopped by SIGTERM (signal 15)"),
])
def test_ctrl_c_and_sigterm_say_what_stopped_the_run(tmp_path: Path, signum: int,
                                                     said: str) -> None:
    root = project(tmp_path, FOUR[:2])
    proc = start(root, tmp_path, "--ralph-parallel", "2", "--ralph-agent", agent(tmp_path),
                 AGENT_SLEEP="60")
    wait_until(lambda: started(tmp_path) == 2)
    groups = lane_pgids(root)
    os.killpg(proc.pid, signum)  # as a terminal's Ctrl-C: the controller's process group
    assert proc.wait(timeout=60) == 2
    assert not any(alive(p) for p in groups)
    out = (tmp_path / "controller.log").read_text()
    (line,) = [ln for ln in out.splitlines() if "every lane's processes were stopped" in ln]
    assert line == (f"pytest-ralph: {said}: every lane's processes were stopped; their runs "
                    "and worktrees are kept; the same command resumes the run"), out
    assert "Traceback" not in out


def test_two_stories_editing_the_same_lines(tmp_path: Path) -> None:
    stories = [story("US-001", {"text": "done 1", "run": "grep -qx 'done US-001' shared.txt"},
                     *criteria("US-001.txt"), priority=1),
               story("US-002", {"text": "done 2", "run": "grep -qx 'done US-002' shared.txt"},
                     *criteria("US-002.txt"), priority=2)]
    root = project(tmp_path, stories, files={"shared.txt": "line one\nline two\n"})
    done = ralph(root, tmp_path, "--ralph-parallel", "2", "--ralph-agent",
                 agent(tmp_path, SAME_LINES_AGENT))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "queue: US-001 merged" in out or "queue: US-002 merged" in out
    assert "conflict" in out  # the second merge met the first one's lines
    shared = (root / "shared.txt").read_text().splitlines()
    assert "done US-001" in shared and "done US-002" in shared  # neither story's work lost
    report = (root / ".pytest_ralph" / "parallel-report.md").read_text()
    assert "| conflict |" in report
    assert len(worktrees(root)) == 1


#: A fake ``claude`` (stream-json on stdout) for two lanes. US-001's first run waits until
#: US-002's first run has started, then is rate limited until RESET_IN seconds from now
#: (Claude Code's "usage limit reached|<epoch>"); its second writes f1.txt. US-002's first
#: run waits until the run's shared pause file exists (the rate limit is known), records it
#: and writes f2a.txt; its second writes f2b.txt. Each run appends ``<story> <n> start|end
#: <unix time>`` to AGENT_RUNS.
RATE_LIMITED_CLAUDE = r"""
import glob, json, os, re, sys, time
sys.stdin.read()
sid = re.search(r"/(US-\d+)\.\d+\.state/", os.environ["PYTEST_RALPH_PROMPT_FILE"]).group(1)
count = os.path.join(os.environ["AGENT_DIR"], sid + ".count")
n = int(open(count).read()) + 1 if os.path.exists(count) else 1
open(count, "w").write(str(n))
def note(what):
    with open(os.environ["AGENT_RUNS"], "a") as f:
        f.write(f"{sid} {n} {what} {time.time():.3f}\n")
def result(text, error=False):
    print(json.dumps({"type": "system", "subtype": "init", "session_id": "s", "tools": []}))
    print(json.dumps({"type": "result", "subtype": "success", "is_error": error,
                      "api_error_status": None, "result": text, "num_turns": 1,
                      "total_cost_usd": 0, "duration_ms": 1, "session_id": "s",
                      "usage": {"input_tokens": 1, "output_tokens": 1},
                      "terminal_reason": "api_error" if error else "completed"}), flush=True)
note("start")
if sid == "US-001" and n == 1:
    end = time.time() + 120
    while "US-002 1 start" not in open(os.environ["AGENT_RUNS"]).read() and time.time() < end:
        time.sleep(0.1)
    reset = int(time.time() + float(os.environ["RESET_IN"]))
    result(f"Claude AI usage limit reached|{reset}", error=True)
    note("end")
    sys.exit(1)
if sid == "US-002" and n == 1:
    end = time.time() + 120
    while not (found := glob.glob(os.environ["PAUSE_GLOB"])) and time.time() < end:
        time.sleep(0.1)
    time.sleep(0.5)
    with open(os.path.join(os.environ["AGENT_DIR"], "pause-seen.json"), "w") as f:
        f.write(open(found[0]).read() if found else "{}")
name = {"US-001": "f1.txt", "US-002": "f2a.txt" if n == 1 else "f2b.txt"}[sid]
open(name, "w").write(f"work of {sid}\n")
result("Done.")
note("end")
"""


def test_a_rate_limit_in_one_lane_pauses_the_other_lane_too(tmp_path: Path) -> None:
    stories = [story("US-001", *criteria("f1.txt"), priority=1),
               story("US-002", *criteria("f2a.txt", "f2b.txt"), priority=2)]
    root = project(tmp_path, stories)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    claude = bin_dir / "claude"
    claude.write_text(f"#!{sys.executable}\n" + RATE_LIMITED_CLAUDE)
    claude.chmod(0o755)
    # max-iterations 2: US-002 needs both; a pause counted as an iteration would block it
    done = ralph(root, tmp_path, "--ralph-parallel", "2", "--ralph-agent", "claude",
                 "--ralph-max-iterations", "2",
                 PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                 AGENT_DIR=str(tmp_path), RESET_IN="30",
                 PAUSE_GLOB=str(root / ".pytest_ralph" / "parallel" / "*" / "pause-*.json"))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "2/2 stories merged and verified" in out
    runs: dict[tuple[str, int], dict[str, float]] = {}
    for line in (tmp_path / "agent-runs.txt").read_text().splitlines():
        sid, n, what, when = line.split()
        runs.setdefault((sid, int(n)), {})[what] = float(when)
    assert sorted(runs) == [("US-001", 1), ("US-001", 2), ("US-002", 1), ("US-002", 2)]
    until = json.loads((tmp_path / "pause-seen.json").read_text())["until"]
    limited = runs[("US-001", 1)]["end"]
    assert until - limited >= 25  # the pause A shared: to the stated reset (+1 s)
    # lane B's first run was under way when A was limited; its next one waited for the end
    assert runs[("US-002", 1)]["start"] < limited < runs[("US-002", 1)]["end"] < until - 5
    assert runs[("US-002", 2)]["start"] >= until - 0.5
    assert runs[("US-001", 2)]["start"] >= until - 1.5  # A waited out its own pause
    stories_rec = record(root)["stories"]
    assert stories_rec["US-001"]["iterations"] == 1  # the limited run spent no iteration
    assert stories_rec["US-002"]["iterations"] == 2  # nor did the wait
    b_log = Path(stories_rec["US-002"]["log"]).read_text()
    assert "another lane's agent was rate limited (until the stated reset at" in b_log, b_log
    assert "another lane's agent was rate limited" not in Path(
        stories_rec["US-001"]["log"]).read_text()


# -- the live view and --ralph-status, from real files ---------------------------------------


#: A status line of the live view as drawn: story, phase, elapsed, branch (which may be
#: cut at the terminal's width).
STATUS_LINE = re.compile(r"^  lane (US-00[12]) +(iteration 1/3: agent) +(\d+\.\ds)"
                         r"(?: +ralph/\S*)?$")


def test_the_live_view_on_a_real_terminal(tmp_path: Path) -> None:
    root = project(tmp_path, FOUR[:2])
    cols = 80
    code, out = run_in_pty([sys.executable, "-m", "pytest", "--ralph", "--ralph-sandbox", "off",
                            "--ralph-parallel", "2", "--ralph-agent", agent(tmp_path),
                            "--ralph-max-iterations", "3"], root,
                           env(tmp_path, AGENT_SLEEP="6", TERM="xterm", COLUMNS=""),
                           cols=cols, rows=40)
    assert code == 0, out
    # each redraw: both lanes' lines, each no wider than the terminal, with story, phase
    # and elapsed time
    frames = [[m.groups() for m in map(STATUS_LINE.match, frame.split("\x1b[K")) if m]
              for frame in re.split(r"\x1b\[\d+F\x1b\[J", out.replace("\r\n", ""))]
    drawn = [line for line in out.replace("\x1b[K", "\r\n").split("\r\n")
             if line.startswith("  lane ")]
    assert drawn and all(len(line) < cols for line in drawn), drawn[:4]
    assert any([g[0] for g in f] == ["US-001", "US-002"] for f in frames), out[-3000:]
    elapsed = sorted(float(g[2][:-1]) for f in frames for g in f if g[0] == "US-001")
    assert elapsed[0] < elapsed[-1] and elapsed[-1] >= 3.0  # the clock ran
    # once the run is over, what the terminal shows has no status line left
    screen = Screen(cols=cols, rows=40)
    screen.feed(out)
    shown = screen.text()
    assert not [line for line in shown if line.startswith("  lane ")], "\n".join(shown)
    assert any("2/2 stories merged and verified" in line for line in shown), "\n".join(shown)
    assert any("queue: US-001 merged" in line for line in shown)


def test_lane_phase_reads_the_last_heading_and_the_live_record(tmp_path: Path) -> None:
    from pytest_ralph.parallel.lanerecord import lane_phase

    log = tmp_path / "US-001.1.log"
    assert lane_phase(log) == ("starting", 0)
    log.write_text("[ralph baseline]\n  0/1 criteria passing\n")
    assert lane_phase(log) == ("baseline", 0)
    log.write_text(log.read_text() + "[ralph iteration 1/5]\n  Result: no change\n")
    assert lane_phase(log) == ("iteration 1/5", 1)
    run = tmp_path / "US-001.1.state" / "runs" / "20261203-000000-aaaaaa"
    run.mkdir(parents=True)
    (run / "live.json").write_text(json.dumps({"running": True, "phase": "agent",
                                               "title": "[ralph iteration 2/5]"}))
    assert lane_phase(log) == ("iteration 2/5: agent", 1)
    (run / "live.json").write_text("{damaged")
    assert lane_phase(log) == ("iteration 1/5", 1)


def test_the_lane_view_redraws_one_line_per_lane_on_a_terminal() -> None:
    import io

    from pytest_ralph.parallel.lanerecord import LaneView

    out = io.StringIO()
    view = LaneView(out, tty=True)
    view.draw(["  lane US-001 baseline 1.0s", "  lane US-002 iteration 1/5: agent 2.0s"])
    view.say("pytest-ralph: queue: US-003 merged")
    view.draw(["  lane US-001 iteration 1/5: check 3.0s"])
    view.end()
    text = out.getvalue()
    assert text.count("\x1b[2F\x1b[J") == 1  # the two lines cleared before the event line
    assert "\x1b[1F\x1b[J" in text  # and the one line at the end
    assert text.index("US-002 iteration") < text.index("queue: US-003") < text.index(
        "check 3.0s")
    plain = io.StringIO()
    LaneView(plain, tty=False).draw(["  lane US-001 baseline"])
    assert plain.getvalue() == ""  # no terminal: the event lines only


def test_a_status_line_wider_than_the_terminal_is_cut_so_that_no_row_is_left() -> None:
    import io

    from pytest_ralph.parallel.lanerecord import LaneView

    wide = ["  lane US-001 " + "x" * 60, "  lane US-002 " + "y" * 60]
    shown = {}
    for width in (10_000, 40):  # 10_000: not cut, as before the cut was made
        out = io.StringIO()
        view = LaneView(out, tty=True, width=width)
        view.draw(wide)
        view.draw(wide)
        view.say("pytest-ralph: event")
        view.end()
        screen = Screen(cols=40, rows=24)
        screen.feed(out.getvalue().replace("\n", "\r\n"))  # as the terminal driver does
        shown[width] = screen.text()
    assert shown[40] == ["pytest-ralph: event"]
    assert len(shown[10_000]) > 1 and "xxxx" in shown[10_000][0]  # a wrapped row was left


def test_status_lines_of_a_stopped_run(tmp_path: Path) -> None:
    from pytest_ralph.parallel.lanerecord import Record, status_lines

    assert status_lines(tmp_path) == []
    log = tmp_path / "US-001.1.log"
    log.write_text("[ralph iteration 1/5]\n")
    rec = Record(run_id="r1", base="a" * 40, branch="main", prd="prd.json", started=0.0,
                 controller=2**22 + 12345,  # no such process
                 stories={"US-001": {"phase": "running", "attempt": 1, "iterations": 0,
                                     "branch": "ralph/r1/US-001", "log": str(log)},
                          "US-002": {"phase": "blocked", "attempt": 2, "iterations": 4,
                                     "branch": "ralph/r1/US-002", "why": "conflict twice"}})
    rec.save(tmp_path / "parallel.json")
    assert status_lines(tmp_path) == [
        "parallel run r1 (stopped (the same command resumes it)), from main at aaaaaaaaaaaa:",
        "  US-001: stopped (iteration 1/5), attempt 1, 1 iteration(s), branch ralph/r1/US-001",
        "  US-002: blocked, attempt 2, 4 iteration(s), branch ralph/r1/US-002 "
        "(conflict twice)"]
