"""Tests of pytest_ralph.parallel.queue: the criteria-gated merge queue, on real git
repositories in tmp_path, each check a real gate (``python -m pytest prd.json``) in a
subprocess."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_ralph.parallel.gate import gate_check
from pytest_ralph.parallel.queue import (
    QUEUE_FILE,
    CheckOutcome,
    MergeQueue,
    MergeResult,
    QueueError,
    integration_branch,
)
from pytest_ralph.parallel.worktrees import Lane, Repo, commit_all, create_lane, preflight
from tests.support.git import git, isolate_git, needs_git

pytestmark = needs_git

RUN = "20261203-1200-q1"

#: Each story's one criterion: a file says a word (``shared.txt`` for the conflicting pair).
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


@pytest.fixture(autouse=True)
def _no_user_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The module's git sees no user or system configuration; the identity comes from env."""
    isolate_git(tmp_path, monkeypatch)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "prd.json").write_text(json.dumps(PRD, indent=1) + "\n")
    (root / "shared.txt").write_text("old\n")
    (root / ".gitignore").write_text("*.log\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


@pytest.fixture
def repo(root: Path) -> Repo:
    return preflight(root)


def queue(repo: Repo) -> MergeQueue:
    return MergeQueue(repo, RUN, repo.head, gate_check(Path("prd.json")), prd=Path("prd.json"))


def lane(repo: Repo, story: str, files: dict[str, str | None]) -> Lane:
    """A lane of ``story`` whose branch holds one commit writing (or, for ``None``, deleting)
    ``files``."""
    made = create_lane(repo, RUN, story, repo.head)
    for name, text in files.items():
        if text is None:
            (made.path / name).unlink()
        else:
            (made.path / name).write_text(text)
    assert commit_all(made, f"work on {story}") is not None
    return made


def show(root: Path, rev: str, path: str) -> str:
    return git(root, "show", f"{rev}:{path}")


# -- merging --------------------------------------------------------------------------------


def test_independent_stories_merge_one_after_another(root: Path, repo: Repo) -> None:
    a = lane(repo, "US-001", {"a.txt": "A\n"})
    b = lane(repo, "US-002", {"b.txt": "B\n"})
    q = queue(repo)
    assert q.branch == integration_branch(RUN) == f"ralph/{RUN}/integration"
    first = q.merge("US-001", a.branch)
    assert first.outcome == "merged", first
    assert first.summary == "1/4 criteria passed"
    second = q.merge("US-002", b.branch)
    assert second.outcome == "merged", second
    assert second.before == first.commit and second.commit == q.head
    assert show(root, q.branch, "a.txt") == "A\n"
    assert show(root, q.branch, "b.txt") == "B\n"
    # one merge commit per story, the lane's commit as its second parent
    parents = git(root, "rev-list", "--parents", "-n1", q.head).split()
    assert parents[1:] == [first.commit, second.lane_commit]
    assert q.merged == ["US-001", "US-002"]
    assert q.last_check is not None and q.last_check.verified("US-002")
    # the user's branch and working tree are untouched until finish
    assert git(root, "rev-parse", "main").strip() == repo.head
    assert not (root / "a.txt").exists()
    assert git(root, "status", "--porcelain") == ""


def test_same_lines_second_is_a_conflict_and_nothing_is_lost(root: Path, repo: Repo) -> None:
    x = lane(repo, "US-003", {"shared.txt": "X\n"})
    y = lane(repo, "US-004", {"shared.txt": "Y\n"})
    y_head = git(root, "rev-parse", y.branch).strip()
    q = queue(repo)
    assert q.merge("US-003", x.branch).outcome == "merged"
    kept = q.head
    second = q.merge("US-004", y.branch)
    assert second.outcome == "conflict"
    assert second.conflicts == ("shared.txt",)
    assert second.summary == "conflict in 1 file"
    assert second.failures == ("merge conflict with the integration branch in shared.txt",)
    assert second.commit == kept == q.head
    assert show(root, q.branch, "shared.txt") == "X\n"
    # the second lane's branch is as it was, its work there
    assert git(root, "rev-parse", y.branch).strip() == y_head
    assert show(root, y.branch, "shared.txt") == "Y\n"
    # the integration worktree is clean, no merge in progress
    assert git(q.path, "status", "--porcelain") == ""
    assert not (Path(git(q.path, "rev-parse", "--git-dir").strip()) / "MERGE_HEAD").exists()


def test_a_merge_that_breaks_a_passing_criterion_is_undone(root: Path, repo: Repo) -> None:
    a = lane(repo, "US-001", {"a.txt": "A\n"})
    q = queue(repo)
    assert q.merge("US-001", a.branch).outcome == "merged"
    kept = q.head
    # US-002's lane satisfies its own criterion but breaks US-001's: it deletes a.txt
    b = create_lane(repo, RUN, "US-002", kept)
    (b.path / "a.txt").unlink()
    (b.path / "b.txt").write_text("B\n")
    commit_all(b, "B, and a.txt gone")
    result = q.merge("US-002", b.branch)
    assert result.outcome == "regressed"
    assert result.regressed == ("US-001::AC1",)
    assert result.failures[0] == "US-001::AC1: passed before this merge, fails after it"
    assert any(f.startswith("US-001::AC1: exit status") for f in result.failures)
    assert q.head == kept == result.commit
    assert show(root, q.branch, "a.txt") == "A\n"
    assert q.merged == ["US-001"]


def test_a_story_whose_criteria_fail_is_not_merged(root: Path, repo: Repo) -> None:
    b = lane(repo, "US-002", {"b.txt": "not B\n"})
    q = queue(repo)
    result = q.merge("US-002", b.branch)
    assert result.outcome == "story-failed"
    assert result.commit == q.head == repo.head
    assert len(result.failures) == 1
    assert result.failures[0].startswith("US-002::AC1: exit status 1, expected exit status 0")
    assert result.line() == f"US-002 {b.branch}: story-failed (0/4 criteria passed)"


def test_blocked_is_recorded_without_touching_git(repo: Repo) -> None:
    q = queue(repo)
    result = q.block("US-002", "ralph/x/US-002", "waits for US-001, which is not merged")
    assert result.outcome == "blocked" and result.commit == repo.head
    assert q.results == [result]


# -- finishing ------------------------------------------------------------------------------


def merged_queue(repo: Repo) -> MergeQueue:
    a = lane(repo, "US-001", {"a.txt": "A\n"})
    q = queue(repo)
    assert q.merge("US-001", a.branch).outcome == "merged"
    return q


def test_finish_fast_forwards_the_checked_out_clean_branch(root: Path, repo: Repo) -> None:
    q = merged_queue(repo)
    done = q.finish("main", repo.head)
    assert done.outcome == "fast-forwarded", done
    assert done.old == repo.head and done.new == q.head
    assert git(root, "rev-parse", "HEAD").strip() == q.head
    assert (root / "a.txt").read_text() == "A\n"
    assert git(root, "status", "--porcelain") == ""


def test_finish_leaves_a_moved_branch_and_says_how_to_merge(root: Path, repo: Repo) -> None:
    q = merged_queue(repo)
    (root / "other.txt").write_text("o\n")
    git(root, "add", "other.txt")
    git(root, "commit", "-q", "-m", "the user went on")
    moved = git(root, "rev-parse", "HEAD").strip()
    done = q.finish("main", repo.head)
    assert done.outcome == "manual"
    assert "moved since the run started" in done.reason
    assert done.command == f"git switch main && git merge --no-ff {q.branch}"
    assert git(root, "rev-parse", "main").strip() == moved


def test_finish_leaves_a_dirty_working_tree_alone(root: Path, repo: Repo) -> None:
    q = merged_queue(repo)
    (root / "shared.txt").write_text("edited by the user\n")
    done = q.finish("main", repo.head)
    assert done.outcome == "manual" and "uncommitted changes" in done.reason
    assert git(root, "rev-parse", "main").strip() == repo.head
    assert (root / "shared.txt").read_text() == "edited by the user\n"


def test_finish_moves_a_branch_checked_out_nowhere_with_update_ref(root: Path,
                                                                   repo: Repo) -> None:
    q = merged_queue(repo)
    git(root, "switch", "-q", "-c", "elsewhere")
    done = q.finish("main", repo.head)
    assert done.outcome == "fast-forwarded"
    assert git(root, "rev-parse", "main").strip() == q.head
    assert git(root, "symbolic-ref", "--short", "HEAD").strip() == "elsewhere"
    assert not (root / "a.txt").exists()


def test_finish_with_nothing_merged_changes_nothing(root: Path, repo: Repo) -> None:
    done = queue(repo).finish("main", repo.head)
    assert done.outcome == "nothing"
    assert git(root, "rev-parse", "main").strip() == repo.head


# -- resume and the history -----------------------------------------------------------------


def test_the_history_is_in_queue_json_and_a_new_queue_resumes_it(root: Path,
                                                                 repo: Repo) -> None:
    q = merged_queue(repo)
    data = json.loads((q.run_dir / QUEUE_FILE).read_text())
    assert data["version"] == 1 and data["head"] == q.head and data["base"] == repo.head
    assert [r["outcome"] for r in data["results"]] == ["merged"]
    assert {"story", "branch", "outcome", "summary", "commit", "at"} <= set(data["results"][0])
    again = queue(repo)
    assert again.results == q.results
    assert again.head == q.head
    assert again.last_check == q.last_check
    assert MergeResult.from_json(q.results[0].to_json()) == q.results[0]


def test_a_merge_a_crash_left_unchecked_is_undone_on_resume(root: Path, repo: Repo) -> None:
    q = merged_queue(repo)
    kept = q.head
    b = lane(repo, "US-002", {"b.txt": "B\n"})
    git(q.path, "merge", "-q", "--no-ff", "--no-edit", b.branch)  # the crash: no check, no record
    assert git(q.path, "rev-parse", "HEAD").strip() != kept
    again = queue(repo)
    assert again.head == kept
    assert git(root, "rev-parse", again.branch).strip() == kept
    assert again.merge("US-002", b.branch).outcome == "merged"


def test_a_missing_integration_worktree_is_rebuilt(root: Path, repo: Repo) -> None:
    q = merged_queue(repo)
    git(root, "worktree", "remove", "--force", str(q.path))
    again = queue(repo)
    assert (again.path / "a.txt").read_text() == "A\n"


def test_check_outcome_round_trips_and_finds_regressions() -> None:
    before = CheckOutcome({"A::AC1": True, "B::AC1": False}, {"A": True, "B": False})
    after = CheckOutcome({"A::AC1": False, "B::AC1": True}, {"A": False, "B": True},
                         failures=("A::AC1: boom",))
    assert after.regressions(before) == ["A::AC1"]
    assert CheckOutcome.from_json(after.to_json()) == after
    assert after.story_failures("A") == ["A::AC1: boom"]
    assert not CheckOutcome({}, {"B": True}, errors=("crash",)).verified("B")


# -- bad input ------------------------------------------------------------------------------


def test_an_unknown_branch_is_a_clear_error(repo: Repo) -> None:
    a = lane(repo, "US-001", {"a.txt": "A\n"})
    q = queue(repo)
    with pytest.raises(QueueError) as info:
        q.merge("US-009", "ralph/nope")
    message = str(info.value)
    assert "'ralph/nope' is no branch of the repository" in message
    assert a.branch in message and q.branch not in message
    assert q.results == []


def test_an_unreadable_queue_file_is_a_clear_error(repo: Repo) -> None:
    q = queue(repo)
    (q.run_dir / QUEUE_FILE).write_text("{not json")
    with pytest.raises(QueueError) as info:
        queue(repo)
    assert str(q.run_dir / QUEUE_FILE) in str(info.value)
    assert "move it aside" in str(info.value)


def test_a_gate_that_cannot_run_verifies_nothing(tmp_path: Path) -> None:
    outcome = gate_check(Path("missing.json"))(tmp_path)
    assert outcome.criteria == {}
    assert len(outcome.errors) == 1
    assert "the gate `pytest missing.json`" in outcome.errors[0]
    assert "exited 4 after checking 0 criteria" in outcome.errors[0]
    assert not outcome.verified("US-001")


def test_the_integration_branch_is_no_lane_and_survives_cleanup(root: Path,
                                                                repo: Repo) -> None:
    from pytest_ralph.parallel.worktrees import WorktreeError, cleanup, find_lanes

    q = merged_queue(repo)
    assert [x.story_id for x in find_lanes(repo, RUN)] == ["US-001"]
    with pytest.raises(WorktreeError, match="name of the run's integration branch"):
        create_lane(repo, RUN, "integration", repo.head)
    cleanup(repo, RUN)
    assert git(root, "rev-parse", q.branch).strip() == q.head
    assert git(root, "branch", "--list", "--format=%(refname:short)", "ralph/*").split() == [
        q.branch]


# -- a lane cannot change what judges the criteria -----------------------------------------

#: A conftest.py that turns every failing test of the gate into a pass.
FAKE_GATE = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


def test_a_lane_that_adds_a_conftest_faking_the_gate_is_not_merged(root: Path,
                                                                   repo: Repo) -> None:
    cheat = lane(repo, "US-001", {"conftest.py": FAKE_GATE})  # no a.txt: the story is not done
    fooled = gate_check(Path("prd.json"))(cheat.project)  # the plain gate is fooled by it
    assert fooled.verified("US-001"), fooled
    q = queue(repo)
    result = q.merge("US-001", cheat.branch)
    assert result.outcome == "story-failed", result
    assert result.summary == "it changes what judges the criteria"
    assert any("conftest.py" in f and "judges the criteria" in f for f in result.failures)
    assert q.head == repo.head and q.merged == []
    assert git(root, "ls-tree", "--name-only", q.branch, "conftest.py") == ""


def test_a_lane_that_weakens_another_storys_criterion_is_not_merged(root: Path,
                                                                    repo: Repo) -> None:
    weaker = json.loads(json.dumps(PRD))
    weaker["userStories"][1]["acceptanceCriteria"][0]["run"] = "true"
    cheat = lane(repo, "US-001", {"a.txt": "A\n", "prd.json": json.dumps(weaker)})
    q = queue(repo)
    result = q.merge("US-001", cheat.branch)
    assert result.outcome == "story-failed", result
    assert any("US-002::AC1" in f for f in result.failures), result.failures
    assert show(root, q.branch, "prd.json") == (root / "prd.json").read_text()
    honest = lane(repo, "US-002", {"b.txt": "B\n"})
    assert q.merge("US-002", honest.branch).outcome == "merged"


def test_a_file_an_earlier_check_left_does_not_pass_a_later_story(tmp_path: Path) -> None:
    root = tmp_path / "stamp"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    # US-002 is checked first in each gate: only a stamp left by an earlier gate could pass it
    (root / "prd.json").write_text(json.dumps({"userStories": [
        {"id": "US-002", "title": "B", "acceptanceCriteria": [
            {"text": "the stamp is there", "run": "test -f ok.stamp"}]},
        {"id": "US-001", "title": "A", "acceptanceCriteria": [
            {"text": "a.txt says A", "run": "grep -qx A a.txt && touch ok.stamp"}]}]}))
    (root / ".gitignore").write_text("*.stamp\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    repo = preflight(root)
    q = queue(repo)
    assert q.merge("US-001", lane(repo, "US-001", {"a.txt": "A\n"}).branch).merged
    idle = lane(repo, "US-002", {"b.txt": "nothing for the stamp\n"})
    result = q.merge("US-002", idle.branch)
    assert result.outcome == "story-failed", result


def test_a_pytest_py_on_the_branch_does_not_replace_the_gates_pytest(root: Path,
                                                                    repo: Repo) -> None:
    fake = ("import os, sys\nopen(os.path.join(os.environ['HOME'], 'SHADOWED'), 'w')"
            ".write('x')\nsys.exit(0)\n")
    cheat = lane(repo, "US-001", {"pytest.py": fake})
    result = queue(repo).merge("US-001", cheat.branch)
    assert result.outcome == "story-failed", result
    assert not (Path(os.environ["HOME"]) / "SHADOWED").exists()  # the branch's pytest.py never ran
