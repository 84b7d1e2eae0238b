"""Agents that commit (issue 23 item 4): aider commits every edit, and snarktank-style prompts
ask the agent to commit. The loop's diff stat, the oracle guard, the breaker and resume stay
right when the agent commits, amends or resets during its turn.

Real git repositories, ``pytest --ralph`` in a subprocess, and an agent that follows a plan:
``plan.json`` maps an iteration number to the actions of that turn (write a file, run git,
kill the loop's controller once).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import loop
from tests.support.git import git, needs_git
from tests.support.prd import story

pytestmark = needs_git

AGENT = """
import json, os, pathlib, signal, subprocess
n = os.environ["PYTEST_RALPH_ITERATION"]
with open("agent-runs.txt", "a") as f:
    f.write(n + "\\n")
env = dict(os.environ, GIT_AUTHOR_NAME="agent", GIT_AUTHOR_EMAIL="agent@example.com",
           GIT_COMMITTER_NAME="agent", GIT_COMMITTER_EMAIL="agent@example.com")
for action, *args in json.loads(pathlib.Path("plan.json").read_text()).get(n, []):
    if action == "write":
        pathlib.Path(args[0]).write_text(args[1])
    elif action == "git":
        subprocess.run(["git", "-c", "commit.gpgsign=false", *args], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elif action == "kill-once":
        once = pathlib.Path("kill-once")
        if once.exists():
            once.unlink()
            os.kill(int(pathlib.Path("controller.pid").read_text()), signal.SIGKILL)
"""

BUG = "def add(a, b):\n    return a - b\n"
FIX = "def add(a, b):\n    return a + b\n"
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
WEAK = "def test_add():\n    assert True\n"
#: Files the agent writes and commits along the way: not judged by any criterion.
NOTE = "notes.md"


@pytest.fixture
def repo(pytester: pytest.Pytester, write_prd: Callable[..., Path]) -> Path:
    """A project with a failing test under git, one commit, and the planned agent."""
    root = pytester.path
    (root / "calc.py").write_text(BUG)
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(TEST)
    (root / "conftest.py").write_text("# the project's root\n")
    (root / "agent.py").write_text(AGENT)
    (root / ".gitignore").write_text(".pytest_ralph/\nagent-runs.txt\nplan.json\n"
                                     "controller.pid\nkill-once\n__pycache__/\n")
    write_prd(story("US-001", {"text": "the tests pass", "pytest": "tests"}))
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "start")
    return root


def plan(root: Path, turns: dict[int, list[list[str]]]) -> None:
    (root / "plan.json").write_text(json.dumps({str(k): v for k, v in turns.items()}))


def commit(message: str, *extra: str) -> list[str]:
    return ["git", "commit", "-q", "-a", "-m", message, *extra]


def add_all() -> list[str]:
    return ["git", "add", "-A"]


def run(pytester: pytest.Pytester, *args: str, sandbox: str = "off") -> tuple[int, str]:
    proc = loop.ralph(pytester, "--ralph", "--ralph-agent", f"{sys.executable} agent.py",
                      "--ralph-max-iterations", "5", *args, sandbox=sandbox)
    return loop.finish(proc)


def prompt(root: Path, n: int) -> str:
    (path,) = (root / ".pytest_ralph" / "runs").glob(f"*/iteration-{n:03d}/prompt.md")
    return path.read_text()


def last_change(root: Path, n: int) -> str:
    """The "What the last iteration changed" section of iteration ``n``'s prompt."""
    found = re.search(r"## What the last iteration changed\n(.*?)\n\n", prompt(root, n), re.S)
    assert found, prompt(root, n)
    return found.group(1)


def history(root: Path) -> list[tuple[Any, ...]]:
    import sqlite3
    with sqlite3.connect(root / ".pytest_ralph" / "ralph.db") as conn:
        return conn.execute("SELECT run_id, n, diff_stat FROM iterations ORDER BY run_id, n"
                            ).fetchall()


def head(root: Path) -> str:
    return git(root, "rev-parse", "--short", "HEAD").strip()


def subject(root: Path, rev: str = "HEAD") -> str:
    return git(root, "log", "-1", "--format=%h %s", rev).strip()


@pytest.mark.parametrize("sandbox", ["off", "required"])
def test_an_agent_that_commits_each_turn_is_shown_its_changes_and_its_commits(
        pytester: pytest.Pytester, repo: Path, sandbox: str) -> None:
    if sandbox == "required" and (sys.platform != "linux" or not _bwrap()):
        pytest.fail("bubblewrap is not installed: the confined case needs it")
    plan(repo, {1: [["write", NOTE, "plan: fix add\n"], add_all(), commit("notes")],
                2: [["write", "calc.py", FIX], commit("fix add")]})
    code, out = run(pytester, sandbox=sandbox)
    assert code == 0, out
    assert "complete (exit 0) after 2 iterations" in out
    notes = subject(repo, "HEAD~1")
    assert f"  Commits: 1 new: {notes}" in out, out
    assert f"  Commits: 1 new: {subject(repo)}" in out, out
    # What the agent changed, though it committed it: the working tree before and after.
    change = last_change(repo, 2)
    assert change.splitlines() == [f" {NOTE} | 1 +", " 1 file changed, 1 insertion(+)",
                                   f"commits: 1 new: {notes}"], change
    assert f"changed: 1 file changed, 1 insertion(+); commits: 1 new: {notes}" in prompt(repo, 2)
    # Everything the agent did is committed; the loop's write-back of `passes` is not.
    assert git(repo, "status", "--porcelain") == " M prd.json\n"


def test_a_weakened_test_committed_by_the_agent_is_still_a_changed_criterion(
        pytester: pytest.Pytester, repo: Path) -> None:
    """Committing the edit does not make it the reference: the guard compares with the run's
    start, not with ``HEAD``."""
    plan(repo, {1: [["write", "tests/test_calc.py", WEAK], commit("simplify the test")]})
    code, out = run(pytester, "--ralph-max-iterations", "2")
    assert code == 1, out
    assert "Criteria changed: file tests/test_calc.py changed" in out
    assert "complete" not in out.split("[ralph iteration 1/2]", 1)[1].split("\n")[4]
    assert git(repo, "log", "-1", "--format=%s") == "simplify the test\n"
    report = next((repo / ".pytest_ralph" / "reports").glob("*.md")).read_text()
    assert "Outcome: **limit**" in report


def test_an_amended_commit_shows_the_turns_own_change_and_the_rewritten_head(
        pytester: pytest.Pytester, repo: Path) -> None:
    plan(repo, {1: [["write", NOTE, "wip\n"], add_all(), commit("wip")],
                2: [["write", "calc.py", FIX], ["git", "commit", "-q", "-a", "--amend", "-m",
                                                "fix add"]]})
    before = git(repo, "rev-parse", "HEAD").strip()
    code, out = run(pytester)
    assert code == 0, out
    (moved,) = [line for line in out.splitlines() if line.startswith("  Commits: HEAD moved")]
    wip = git(repo, "log", "-1", "--format=%h %s", "HEAD@{1}").strip()
    assert moved == (f"  Commits: HEAD moved from {wip.split()[0]} to {head(repo)} (a reset, "
                     f"amend, rebase or checkout): 1 commit is no longer on it: {wip} (git "
                     f"reflog still has it); 1 new: {subject(repo)}"), out
    assert git(repo, "rev-parse", "HEAD~1").strip() == before
    # Iteration 2's own change is calc.py; the history records it with the move.
    (_, _, diff), = [row for row in history(repo) if row[1] == 2]
    assert diff.splitlines()[0].startswith(" calc.py | 2 +-"), diff
    assert diff.splitlines()[-1].startswith("commits: HEAD moved from"), diff


def test_a_reset_that_undoes_a_committed_fix_is_a_regression_and_says_so(
        pytester: pytest.Pytester, repo: Path, write_prd: Callable[..., Path]) -> None:
    """Two stories: the first is fixed and committed, the agent then resets it away while
    working on the second. The check sees the regression; the prompt shows the revert and the
    commit that left ``HEAD``; the loop goes on and the work comes back."""
    (repo / "other.txt").write_text("")
    write_prd(story("US-001", {"text": "the tests pass", "pytest": "tests"}),
              story("US-002", {"text": "done.txt exists", "exists": "done.txt"}, priority=2))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "two stories")
    plan(repo, {1: [["write", "calc.py", FIX], commit("fix add")],
                2: [["git", "reset", "-q", "--hard", "HEAD~1"]],
                3: [["write", "calc.py", FIX], commit("fix add again")],
                4: [["write", "done.txt", "done\n"], add_all(), commit("done")]})
    code, out = run(pytester)
    assert code == 0, out
    block2 = out.split("[ralph iteration 2/5]", 1)[1].split("[ralph iteration 3/5]", 1)[0]
    assert "Result: regression (-1)" in block2, block2
    assert "Regressions: US-001::AC1 passed before and fail now" in block2
    assert "1 commit is no longer on it:" in block2 and "fix add (git reflog still has it)" \
        in block2, block2
    change = last_change(repo, 3)
    # The reset also put back the PRD's `passes` the loop had written for US-001.
    assert re.match(r" calc\.py +\| 2 \+-$", change.splitlines()[0]), change
    assert "fix add (git reflog still has it)" in change
    assert "complete (exit 0) after 4 iterations" in out
    assert [s.split(" ", 1)[1] for s in git(repo, "log", "--format=%h %s").splitlines()] == [
        "done", "fix add again", "two stories", "start"]


def test_an_agent_that_prunes_the_loops_snapshot_is_not_told_that_nothing_changed(
        pytester: pytest.Pytester, repo: Path) -> None:
    """``git gc --prune=now`` deletes the unreferenced tree the loop took before the turn:
    the diff stat is then unknown, and the prompt says nothing rather than "no file
    changed"; the commit is still shown."""
    plan(repo, {1: [["write", NOTE, "x\n"], add_all(), commit("notes"),
                    ["git", "gc", "-q", "--prune=now"]],
                2: [["write", "calc.py", FIX]]})
    code, out = run(pytester)
    assert code == 0, out
    change = last_change(repo, 2)
    assert "no file changed" not in change
    assert change == f"commits: 1 new: {subject(repo)}", change


def test_a_new_commit_each_turn_does_not_reset_the_breaker(
        pytester: pytest.Pytester, repo: Path) -> None:
    """Commits are not progress: the same failure three times trips the breaker."""
    plan(repo, {n: [["write", NOTE, f"attempt {n}\n"], add_all(), commit(f"attempt {n}")]
                for n in range(1, 6)})
    code, out = run(pytester)
    assert code == 6, out
    assert "breaker (exit 6) after 3 iterations" in out
    assert len(git(repo, "log", "--format=%h").splitlines()) == 4


@pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals")
def test_a_controller_killed_after_the_agent_committed_resumes_without_a_lost_or_doubled_iteration(
        pytester: pytest.Pytester, repo: Path) -> None:
    """The agent commits the fix and the controller dies (kill -9) before it checks; the
    resumed run takes iteration 2 again and finds the committed fix: two iterations, each
    recorded once, and the run completes."""
    plan(repo, {1: [["write", NOTE, "x\n"], add_all(), commit("notes")],
                2: [["write", "calc.py", FIX], commit("fix add"), ["kill-once"]]})
    (repo / "kill-once").write_text("")
    proc = loop.ralph(pytester, "--ralph", "--ralph-agent", f"{sys.executable} agent.py",
                      "--ralph-max-iterations", "5", sandbox="off")
    (repo / "controller.pid").write_text(str(proc.pid))
    code, out = loop.finish(proc)
    assert code == -signal.SIGKILL, out
    assert git(repo, "log", "-1", "--format=%s") == "fix add\n"
    code, out = run(pytester)
    assert code == 0, out
    assert "resuming run" in out and "after 1 iteration" in out, out
    assert "complete (exit 0) after 2 iterations" in out
    assert [row[1] for row in history(repo)] == [0, 1, 2]
    assert (repo / "agent-runs.txt").read_text().split() == ["1", "2", "2"]


def _bwrap() -> bool:
    return subprocess.run(["sh", "-c", "command -v bwrap"], capture_output=True).returncode == 0
