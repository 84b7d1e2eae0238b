"""Tests of MergeQueue.merge_batch: several lanes merged one after another and checked once,
on real git repositories in tmp_path, each check a real gate (``python -m pytest prd.json``)
in a subprocess, counted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_ralph.parallel.gate import gate_check
from pytest_ralph.parallel.queue import CheckOutcome, MergeQueue
from pytest_ralph.parallel.worktrees import Lane, Repo, commit_all, create_lane, preflight
from tests.support.git import git, isolate_git, needs_git

pytestmark = needs_git

RUN = "20261203-1400-b1"

#: One criterion per story: a file says a word (``shared.txt`` for the conflicting pair).
PRD = {"userStories": [
    {"id": "US-001", "title": "A", "acceptanceCriteria": [
        {"text": "a.txt says A", "run": "grep -qx A a.txt"}]},
    {"id": "US-002", "title": "B", "acceptanceCriteria": [
        {"text": "b.txt says B", "run": "grep -qx B b.txt"}]},
    {"id": "US-003", "title": "X", "acceptanceCriteria": [
        {"text": "shared.txt says X", "run": "grep -qx X shared.txt"}]},
    {"id": "US-004", "title": "Y", "acceptanceCriteria": [
        {"text": "shared.txt says Y", "run": "grep -qx Y shared.txt"}]},
]}

#: A conftest.py that makes every criterion pass: what judges the criteria, changed.
FAKE_GATE = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


@pytest.fixture(autouse=True)
def _no_user_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolate_git(tmp_path, monkeypatch)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "prd.json").write_text(json.dumps(PRD, indent=1) + "\n")
    (root / "shared.txt").write_text("old\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return preflight(root)


class Counted:
    """The real gate, with the folders it checked."""

    def __init__(self) -> None:
        self.folders: list[Path] = []
        self.gate = gate_check(Path("prd.json"))

    def __call__(self, folder: Path) -> CheckOutcome:
        self.folders.append(folder)
        return self.gate(folder)


def make_queue(repo: Repo, check: Callable[[Path], CheckOutcome]) -> MergeQueue:
    return MergeQueue(repo, RUN, repo.head, check, prd=Path("prd.json"))


def lane(repo: Repo, story: str, files: dict[str, str]) -> Lane:
    made = create_lane(repo, RUN, story, repo.head)
    for name, text in files.items():
        (made.path / name).write_text(text)
    assert commit_all(made, f"work on {story}") is not None
    return made


def test_a_batch_that_passes_is_kept_with_one_check(repo: Repo) -> None:
    a = lane(repo, "US-001", {"a.txt": "A\n"})
    b = lane(repo, "US-002", {"b.txt": "B\n"})
    check = Counted()
    q = make_queue(repo, check)
    first, second = q.merge_batch([("US-001", a.branch), ("US-002", b.branch)])
    assert (first.outcome, second.outcome) == ("merged", "merged"), (first, second)
    assert len(check.folders) == 2  # the base once, then the batch once
    assert first.summary == "2/4 criteria passed; checked once with 2 merged together"
    # one merge commit per story, one after the other, as merges of their own would be
    assert first.before == repo.head and second.before == first.commit
    assert second.commit == q.head
    parents = git(repo.top, "rev-list", "--parents", "-n1", q.head).split()
    assert parents[1:] == [first.commit, second.lane_commit]
    assert q.merged == ["US-001", "US-002"]
    last = q.last_check
    assert last is not None and last.verified("US-001") and last.verified("US-002")
    assert [r.outcome for r in q.results] == ["merged", "merged"]


def test_a_conflict_in_a_batch_refuses_that_story_only(repo: Repo) -> None:
    x = lane(repo, "US-003", {"shared.txt": "X\n"})
    y = lane(repo, "US-004", {"shared.txt": "Y\n"})
    a = lane(repo, "US-001", {"a.txt": "A\n"})
    y_head = git(repo.top, "rev-parse", y.branch).strip()
    check = Counted()
    q = make_queue(repo, check)
    results = q.merge_batch([("US-003", x.branch), ("US-004", y.branch), ("US-001", a.branch)])
    assert [r.outcome for r in results] == ["merged", "conflict", "merged"], results
    assert results[1].conflicts == ("shared.txt",)
    assert results[1].before == results[1].commit == results[0].commit
    assert results[2].before == results[0].commit and results[2].commit == q.head
    assert len(check.folders) == 2
    assert git(repo.top, "show", f"{q.branch}:shared.txt") == "X\n"
    # nothing of the refused story is lost: its branch is as it was
    assert git(repo.top, "rev-parse", y.branch).strip() == y_head
    assert git(repo.top, "show", f"{y.branch}:shared.txt") == "Y\n"
    assert git(q.path, "status", "--porcelain") == ""


def test_a_failing_story_undoes_the_batch_and_each_goes_alone(repo: Repo) -> None:
    a = lane(repo, "US-001", {"a.txt": "A\n"})
    bad = lane(repo, "US-002", {"b.txt": "not B\n"})
    check = Counted()
    q = make_queue(repo, check)
    first, second = q.merge_batch([("US-001", a.branch), ("US-002", bad.branch)])
    assert first.outcome == "merged", first
    assert first.summary == "1/4 criteria passed"  # checked alone, after the batch failed
    assert second.outcome == "story-failed", second
    assert second.failures[0].startswith("US-002::AC1: exit status 1")
    assert len(check.folders) == 4  # base, the batch, then each alone
    assert q.merged == ["US-001"]
    assert git(repo.top, "ls-tree", "--name-only", q.branch, "b.txt") == ""
    # the record holds the one-at-a-time results only, never the undone batch
    assert [(r.story, r.outcome) for r in q.results] == [("US-001", "merged"),
                                                          ("US-002", "story-failed")]


def test_a_batch_that_regresses_a_merged_story_is_undone(repo: Repo) -> None:
    check = Counted()
    q = make_queue(repo, check)
    assert q.merge("US-001", lane(repo, "US-001", {"a.txt": "A\n"}).branch).outcome == "merged"
    kept = q.head
    b = create_lane(repo, RUN, "US-002", kept)
    (b.path / "a.txt").write_text("gone\n")
    (b.path / "b.txt").write_text("B\n")
    commit_all(b, "B, and a.txt broken")
    x = lane(repo, "US-003", {"shared.txt": "X\n"})
    results = q.merge_batch([("US-002", b.branch), ("US-003", x.branch)])
    assert [r.outcome for r in results] == ["regressed", "merged"], results
    assert results[0].regressed == ("US-001::AC1",)
    assert git(repo.top, "show", f"{q.branch}:a.txt") == "A\n"
    assert q.merged == ["US-001", "US-003"]


def test_a_lane_that_changes_the_judges_is_refused_and_the_rest_kept(repo: Repo) -> None:
    cheat = lane(repo, "US-002", {"conftest.py": FAKE_GATE})
    a = lane(repo, "US-001", {"a.txt": "A\n"})
    x = lane(repo, "US-003", {"shared.txt": "X\n"})
    q = make_queue(repo, Counted())
    results = q.merge_batch([("US-001", a.branch), ("US-002", cheat.branch),
                             ("US-003", x.branch)])
    assert [r.outcome for r in results] == ["merged", "story-failed", "merged"], results
    assert results[1].summary == "it changes what judges the criteria"
    assert git(repo.top, "ls-tree", "--name-only", q.branch, "conftest.py") == ""
    assert q.merged == ["US-001", "US-003"]


def test_an_interrupted_batch_check_keeps_nothing(repo: Repo) -> None:
    a = lane(repo, "US-001", {"a.txt": "A\n"})
    b = lane(repo, "US-002", {"b.txt": "B\n"})
    gate = gate_check(Path("prd.json"))
    calls: list[Path] = []

    def interrupted(folder: Path) -> CheckOutcome:
        calls.append(folder)
        if len(calls) == 2:  # the batch's check: Ctrl-C
            raise KeyboardInterrupt
        return gate(folder)

    q = make_queue(repo, interrupted)
    with pytest.raises(KeyboardInterrupt):
        q.merge_batch([("US-001", a.branch), ("US-002", b.branch)])
    assert q.head == repo.head and q.results == []
    assert git(q.path, "rev-parse", "HEAD").strip() == repo.head
    again = make_queue(repo, gate)
    assert again.head == repo.head and again.results == []
    assert [r.outcome for r in again.merge_batch([("US-001", a.branch),
                                                  ("US-002", b.branch)])] == ["merged"] * 2


def test_a_batch_of_one_is_a_merge(repo: Repo) -> None:
    a = lane(repo, "US-001", {"a.txt": "A\n"})
    q = make_queue(repo, Counted())
    (only,) = q.merge_batch([("US-001", a.branch)])
    assert only.outcome == "merged" and only.summary == "1/4 criteria passed"
    assert q.merge_batch([]) == []
