"""``pytest --ralph-merge BRANCH...``: the criteria-gated merge queue over pushed lane branches,
run as a user (or the final CI job) runs it: pytest in a subprocess, on a real git repository,
each merge checked by a real gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.git import git, needs_git

pytestmark = needs_git

PRD = {"userStories": [
    {"id": "US-001", "title": "A", "priority": 2, "acceptanceCriteria": [
        {"text": "a.txt says A", "run": "grep -qx A a.txt"}]},
    {"id": "US-002", "title": "B", "priority": 1, "acceptanceCriteria": [
        {"text": "shared.txt says B", "run": "grep -qx B shared.txt"}]},
    {"id": "US-003", "title": "C", "dependsOn": ["US-002"], "acceptanceCriteria": [
        {"text": "shared.txt says C", "run": "grep -qx C shared.txt"}]},
]}


@pytest.fixture
def project(pytester: pytest.Pytester) -> Path:
    root = pytester.path
    git(root, "init", "-q", "-b", "main")
    (root / "prd.json").write_text(json.dumps(PRD, indent=1) + "\n")
    (root / "shared.txt").write_text("old\n")
    (root / ".gitignore").write_text(  # what pytester writes there
        ".pytest_ralph/\nrunpytest-*\nstdout\nstderr\nsummary.md\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


def branch(root: Path, name: str, files: dict[str, str]) -> None:
    """A lane's branch at main with one commit writing ``files`` (the user stays on main)."""
    git(root, "switch", "-q", "-c", name, "main")
    for path, text in files.items():
        (root / path).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"work on {name}")
    git(root, "switch", "-q", "main")


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--ralph-merge", *args)


def test_independent_branches_merge_and_the_integration_branch_is_left(
        pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    branch(project, "ralph/US-001", {"a.txt": "A\n"})
    branch(project, "ralph/US-002", {"shared.txt": "B\n"})
    head = git(project, "rev-parse", "main").strip()
    summary = project / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run(pytester, "ralph/US-001", "ralph/US-002")
    assert result.ret == 0, result.stderr.str()
    out = result.stdout.str()
    # priority order: US-002 (priority 1) first; one wave, so one batch and one check
    assert result.outlines[0] == ("US-002 ralph/US-002: merged (2/3 criteria passed; checked "
                                  "once with 2 merged together)")
    assert result.outlines[1] == ("US-001 ralph/US-001: merged (2/3 criteria passed; checked "
                                  "once with 2 merged together)")
    integration = f"ralph/merge-{head[:12]}/integration"
    assert f"integration branch: {integration}" in out
    assert git(project, "show", f"{integration}:a.txt") == "A\n"
    assert git(project, "show", f"{integration}:shared.txt") == "B\n"
    assert git(project, "rev-parse", "main").strip() == head  # never moved
    assert len(git(project, "worktree", "list").splitlines()) == 1
    text = summary.read_text()
    assert "2 of 2 stories merged" in text and "| US-001 | `ralph/US-001` | merged |" in text
    assert "Traceback" not in result.stderr.str()


def test_conflicts_exit_1_and_lose_nothing(
        pytester: pytest.Pytester, project: Path) -> None:
    branch(project, "ralph/US-002", {"shared.txt": "B\n"})
    branch(project, "ralph/US-003", {"shared.txt": "C\n"})
    branch(project, "lane-a", {"a.txt": "A\n", "shared.txt": "A\n"})
    lane_c = git(project, "rev-parse", "ralph/US-003").strip()
    result = run(pytester, "US-001=lane-a", "ralph/US-002", "ralph/US-003")
    assert result.ret == 1, result.stderr.str()
    lines = result.outlines
    assert lines[0] == "US-002 ralph/US-002: merged (1/3 criteria passed)"
    # the plan's order: wave 0 by priority (US-002, US-001), then US-003 (dependsOn US-002)
    assert lines[1] == "US-001 lane-a: conflict (conflict in 1 file)"
    assert lines[2] == "  merge conflict with the integration branch in shared.txt"
    assert lines[3] == "US-003 ralph/US-003: conflict (conflict in 1 file)"
    assert "not every story was merged" in result.stderr.str()
    assert git(project, "rev-parse", "ralph/US-003").strip() == lane_c


def test_a_story_waiting_on_an_unmerged_one_is_blocked(pytester: pytest.Pytester,
                                                       project: Path) -> None:
    branch(project, "ralph/US-002", {"shared.txt": "not B\n"})
    branch(project, "ralph/US-003", {"shared.txt": "C\n"})
    result = run(pytester, "ralph/US-002", "ralph/US-003")
    assert result.ret == 1
    assert result.outlines[0].startswith("US-002 ralph/US-002: story-failed")
    assert "US-003 ralph/US-003: blocked (waits for US-002, not merged)" in result.outlines


def test_an_unknown_branch_is_a_usage_error(pytester: pytest.Pytester, project: Path) -> None:
    result = run(pytester, "US-001=ralph/nope")
    assert result.ret == 4
    err = result.stderr.str()
    assert "'ralph/nope' is no branch of the repository" in err
    assert "Traceback" not in err
    result = run(pytester, "ralph/US-999")
    assert result.ret == 4
    assert "'ralph/US-999' is the branch of no story of the PRD" in result.stderr.str()


def test_not_a_git_repository_is_a_usage_error(pytester: pytest.Pytester) -> None:
    (pytester.path / "prd.json").write_text(json.dumps(PRD))
    result = run(pytester, "ralph/US-001")
    assert result.ret == 4
    err = result.stderr.str()
    assert "--ralph-merge needs a git repository" in err and "Traceback" not in err


def test_no_branch_is_a_usage_error(pytester: pytest.Pytester, project: Path) -> None:
    result = run(pytester)
    assert result.ret == 4
    assert "expected the lanes' branches to merge" in result.stderr.str()
