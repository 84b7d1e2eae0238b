"""Tests of pytest_ralph.parallel.worktrees: preflight refusals, lanes made, found after a
crash, rebuilt and removed, on real git repositories in tmp_path."""

from __future__ import annotations

import gc
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_ralph.parallel import worktrees as wt
from pytest_ralph.parallel.worktrees import (
    ParallelUsageError,
    Repo,
    WorktreeError,
    cleanup,
    commit_all,
    create_lane,
    find_lanes,
    lane_head,
    lane_key,
    lane_state,
    preflight,
    remove_lane,
    repair,
)
from tests.support.git import git, isolate_git, needs_git

pytestmark = needs_git

RUN = "20261203-0700-ab12"


@pytest.fixture(autouse=True)
def _no_user_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The module's git sees no user or system configuration; the identity comes from env."""
    isolate_git(tmp_path, monkeypatch)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "app.py").write_text("print('hello')\n")
    (root / ".gitignore").write_text("*.log\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


@pytest.fixture
def repo(root: Path) -> Repo:
    return preflight(root)


def worktree_paths(root: Path) -> list[Path]:
    out = git(root, "worktree", "list", "--porcelain")
    return [Path(line.split(" ", 1)[1]).resolve() for line in out.splitlines()
            if line.startswith("worktree ")]


def branches(root: Path, pattern: str = "ralph/*") -> list[str]:
    return git(root, "branch", "--list", "--format=%(refname:short)", pattern).split()


# -- preflight ---------------------------------------------------------------------------


def test_preflight_returns_top_branch_and_head(root: Path) -> None:
    repo = preflight(root)
    assert repo.top == root.resolve() and repo.project == root.resolve()
    assert repo.branch == "main"
    assert repo.head == git(root, "rev-parse", "HEAD").strip()
    assert repo.state_dir == root.resolve() / ".pytest_ralph"


def test_preflight_refuses_a_folder_outside_git(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ParallelUsageError) as info:
        preflight(plain)
    msg = str(info.value)
    assert "--ralph-parallel needs a git repository" in msg
    assert str(plain.resolve()) in msg
    assert "git init && git add -A && git commit" in msg


def test_preflight_refuses_a_repository_without_commit(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    (empty / "a.py").write_text("x = 1\n")
    with pytest.raises(ParallelUsageError) as info:
        preflight(empty)
    msg = str(info.value)
    assert "has none yet" in msg and "git add -A && git commit" in msg


def test_preflight_refuses_modified_staged_and_untracked_files(root: Path) -> None:
    (root / "app.py").write_text("print('changed')\n")
    (root / "staged.py").write_text("s = 1\n")
    git(root, "add", "staged.py")
    (root / "new.py").write_text("n = 1\n")
    (root / "debug.log").write_text("ignored\n")
    with pytest.raises(ParallelUsageError) as info:
        preflight(root)
    msg = str(info.value)
    assert "would not see the uncommitted changes" in msg
    assert " M app.py" in msg and "A  staged.py" in msg and "?? new.py" in msg
    assert "debug.log" not in msg  # ignored: the worktrees need not see it
    assert "git add -A && git commit -m" in msg and "git stash -u" in msg
    assert "more" not in msg


def test_preflight_names_ten_changes_then_the_count(root: Path) -> None:
    for i in range(13):
        (root / f"new{i:02}.py").write_text("n = 1\n")
    with pytest.raises(ParallelUsageError) as info:
        preflight(root)
    msg = str(info.value)
    assert "new09.py" in msg and "new10.py" not in msg
    assert "  ... 3 more" in msg


def test_preflight_ignores_the_state_folder(root: Path) -> None:
    state = root / ".pytest_ralph"
    state.mkdir()
    (state / "history.sqlite").write_text("x")  # no .gitignore of its own yet
    assert preflight(root).head
    (state / ".gitignore").write_text("*\n")
    assert git(root, "status", "--porcelain") == ""  # it ignores itself
    assert preflight(root).branch == "main"


def test_preflight_on_a_detached_head(root: Path) -> None:
    git(root, "checkout", "-q", "--detach")
    repo = preflight(root)
    assert repo.branch is None and repo.head == git(root, "rev-parse", "HEAD").strip()


# -- names -------------------------------------------------------------------------------


@pytest.mark.parametrize("story", ["US 1", "a..b", "café/ünïcode", ".hidden.lock", "x~^:?*[\\",
                                   "@", "-", "日本語", "a" * 200, "US-001"])
def test_lane_keys_are_valid_ref_names(root: Path, story: str) -> None:
    key = lane_key(story)
    assert key and len(key) <= wt.KEY_LENGTH
    done = subprocess.run(["git", "check-ref-format", f"refs/heads/ralph/run/{key}"],
                          check=False)
    assert done.returncode == 0, key


def test_lane_keys_keep_plain_ids_and_separate_similar_ones() -> None:
    assert lane_key("US-001") == "US-001"
    assert lane_key("story_2.b") == "story_2.b"
    assert lane_key("US 1") != lane_key("US-1")
    assert lane_key("café").startswith("cafe-")
    assert lane_key("a..b") != lane_key("a.b")


# -- lanes -------------------------------------------------------------------------------


def test_create_and_remove_a_lane(repo: Repo, root: Path) -> None:
    lane = create_lane(repo, RUN, "US-001", repo.head)
    assert lane.branch == f"ralph/{RUN}/US-001"
    assert lane.path == root.resolve() / ".pytest_ralph" / "lanes" / RUN / "US-001"
    assert (lane.path / "app.py").read_text() == "print('hello')\n"
    porcelain = git(root, "worktree", "list", "--porcelain")
    assert f"worktree {lane.path}\n" in porcelain
    assert f"branch refs/heads/{lane.branch}\n" in porcelain
    assert branches(root) == [lane.branch]
    assert lane_head(lane) == repo.head and lane.base == repo.head
    assert lane_state(lane) == "ready"
    assert git(root, "status", "--porcelain") == ""  # the user sees nothing of it

    remove_lane(lane)
    assert worktree_paths(root) == [root.resolve()]
    assert branches(root) == []
    assert not lane.path.exists()
    assert git(root, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"


def test_remove_a_lane_keeping_its_branch(repo: Repo, root: Path) -> None:
    lane = create_lane(repo, RUN, "US-001", repo.head)
    (lane.path / "feature.py").write_text("f = 1\n")
    work = commit_all(lane, "US-001: feature")
    remove_lane(lane, keep_branch=True)
    assert worktree_paths(root) == [root.resolve()]
    assert branches(root) == [lane.branch]
    assert git(root, "rev-parse", lane.branch).strip() == work
    assert git(root, "show", f"{lane.branch}:feature.py") == "f = 1\n"


def test_a_lane_that_exists_is_not_made_twice(repo: Repo) -> None:
    create_lane(repo, RUN, "US-001", repo.head)
    with pytest.raises(WorktreeError, match="exists already"):
        create_lane(repo, RUN, "US-001", repo.head)
    with pytest.raises(WorktreeError, match="names no commit"):
        create_lane(repo, RUN, "US-002", "no-such-commit")


def test_two_lanes_at_once_work_apart(repo: Repo, root: Path) -> None:
    a = create_lane(repo, RUN, "US-001", repo.head)
    b = create_lane(repo, RUN, "US-002", repo.head)
    (a.path / "app.py").write_text("print('a')\n")
    (b.path / "b.py").write_text("b = 1\n")
    ca = commit_all(a, "US-001")
    cb = commit_all(b, "US-002")
    assert ca and cb and ca != cb
    assert git(root, "show", f"{a.branch}:app.py") == "print('a')\n"
    assert git(root, "show", f"{b.branch}:app.py") == "print('hello')\n"
    assert "b.py" not in git(root, "ls-tree", "--name-only", a.branch)
    assert (root / "app.py").read_text() == "print('hello')\n"  # the user's tree: untouched
    assert git(root, "rev-parse", "HEAD").strip() == repo.head
    assert sorted(worktree_paths(root)) == sorted([root.resolve(), a.path, b.path])
    assert branches(root) == [a.branch, b.branch]


def test_lanes_are_found_after_a_crash(repo: Repo, root: Path) -> None:
    for story in ("US-001", "US 2", "café"):
        create_lane(repo, RUN, story, repo.head)
    create_lane(repo, "other-run", "US-001", repo.head)
    gc.collect()  # the controller is gone: only git and the folders remain
    again = preflight(root)
    found = find_lanes(again, RUN)
    assert sorted(lane.story_id for lane in found) == sorted(["US-001", "US 2", "café"])
    assert all(lane_state(lane) == "ready" and lane.base == repo.head for lane in found)
    assert all(repair(lane) == "reused" for lane in found)
    assert [lane.story_id for lane in find_lanes(again, "other-run")] == ["US-001"]
    assert find_lanes(again, "no-such-run") == []


def test_repair_rebuilds_a_deleted_worktree_from_its_branch(repo: Repo, root: Path) -> None:
    lane = create_lane(repo, RUN, "US-001", repo.head)
    (lane.path / "feature.py").write_text("f = 1\n")
    work = commit_all(lane, "US-001: feature")
    shutil.rmtree(lane.path)
    (found,) = find_lanes(preflight(root), RUN)
    assert lane_state(found) == "missing"
    assert repair(found) == "rebuilt"
    assert lane_state(found) == "ready"
    assert (found.path / "feature.py").read_text() == "f = 1\n"
    assert lane_head(found) == work
    assert sorted(worktree_paths(root)) == sorted([root.resolve(), found.path])


def test_repair_after_the_registration_was_pruned(repo: Repo, root: Path) -> None:
    lane = create_lane(repo, RUN, "US-001", repo.head)
    shutil.rmtree(lane.path)
    git(root, "worktree", "prune")
    assert worktree_paths(root) == [root.resolve()]
    assert repair(lane) == "rebuilt"
    assert (lane.path / "app.py").exists() and lane_state(lane) == "ready"


def test_repair_moves_a_broken_folder_aside_never_deletes_it(repo: Repo, root: Path) -> None:
    lane = create_lane(repo, RUN, "US-001", repo.head)
    (lane.path / "unsaved.py").write_text("u = 1\n")
    (lane.path / ".git").unlink()  # the folder is no longer a worktree
    assert lane_state(lane) == "broken"
    with pytest.raises(WorktreeError, match="broken"):
        commit_all(lane, "must not commit in the main repository")
    assert git(root, "rev-parse", "HEAD").strip() == repo.head
    assert repair(lane) == "rebuilt"
    aside = [p for p in lane.path.parent.iterdir() if p.name.startswith("US-001.broken-")]
    assert len(aside) == 1 and (aside[0] / "unsaved.py").read_text() == "u = 1\n"
    assert lane_state(lane) == "ready"


def test_repair_refuses_a_lane_whose_branch_is_gone(repo: Repo, root: Path) -> None:
    lane = create_lane(repo, RUN, "US-001", repo.head)
    remove_lane(lane)
    with pytest.raises(WorktreeError, match="is gone"):
        repair(lane)


def test_cleanup_leaves_only_the_main_worktree(repo: Repo, root: Path) -> None:
    lanes = [create_lane(repo, RUN, s, repo.head) for s in ("US-001", "US-002", "US-003")]
    shutil.rmtree(lanes[1].path)  # one half gone already
    cleanup(repo, RUN)
    assert worktree_paths(root) == [root.resolve()]
    assert branches(root) == []
    assert not (repo.state_dir / "lanes").exists()
    assert git(root, "status", "--porcelain") == ""


def test_cleanup_keeps_the_branches_of_blocked_stories(repo: Repo, root: Path) -> None:
    blocked = create_lane(repo, RUN, "US 2", repo.head)
    (blocked.path / "try.py").write_text("t = 1\n")
    commit_all(blocked, "US 2: attempt")
    create_lane(repo, RUN, "US-001", repo.head)
    kept = cleanup(repo, RUN, keep=frozenset({"US 2"}))
    assert kept == [blocked.branch]
    assert worktree_paths(root) == [root.resolve()]
    assert branches(root) == [blocked.branch]
    assert "try.py" in git(root, "ls-tree", "--name-only", blocked.branch)


def test_cleanup_leaves_the_users_own_worktree_and_branches(repo: Repo, root: Path,
                                                           tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    git(root, "worktree", "add", "-q", "-b", "feature", str(mine))
    git(root, "branch", "ralph-notes")
    create_lane(repo, "other", "US-001", repo.head)
    create_lane(repo, RUN, "US-001", repo.head)
    cleanup(repo, RUN)
    assert sorted(worktree_paths(root)) == sorted(
        [root.resolve(), mine.resolve(), repo.state_dir / "lanes" / "other" / "US-001"])
    assert branches(root, "*") == ["feature", "main", "ralph-notes", "ralph/other/US-001"]
    assert (mine / "app.py").exists()


def test_a_project_in_a_subfolder(tmp_path: Path) -> None:
    top = tmp_path / "mono"
    (top / "services" / "api").mkdir(parents=True)
    git(top, "init", "-q", "-b", "main")
    (top / "README").write_text("r\n")
    (top / "services" / "api" / "api.py").write_text("a = 1\n")
    git(top, "add", "-A")
    git(top, "commit", "-q", "-m", "init")
    project = top / "services" / "api"
    repo = preflight(project)
    assert repo.top == top.resolve() and repo.project == project.resolve()
    assert repo.state_dir == project.resolve() / ".pytest_ralph"
    lane = create_lane(repo, RUN, "US-001", repo.head)
    assert lane.path == project.resolve() / ".pytest_ralph" / "lanes" / RUN / "US-001"
    assert lane.project == lane.path / "services" / "api"
    assert (lane.project / "api.py").read_text() == "a = 1\n"
    assert git(top, "status", "--porcelain") == ""
    (lane.project / "api.py").write_text("a = 2\n")
    assert commit_all(lane, "US-001")
    assert git(top, "show", f"{lane.branch}:services/api/api.py") == "a = 2\n"
    cleanup(repo, RUN)
    assert worktree_paths(top) == [top.resolve()]


def test_a_state_folder_given_elsewhere(root: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    repo = preflight(root, state_dir=state)
    lane = create_lane(repo, RUN, "US-001", repo.head)
    assert lane.path == state.resolve() / "lanes" / RUN / "US-001"
    assert (state / ".gitignore").read_text().splitlines()[-1] == "*"
    assert [x.story_id for x in find_lanes(repo, RUN)] == ["US-001"]
    cleanup(repo, RUN)
    assert worktree_paths(root) == [root.resolve()] and branches(root) == []


# -- integration helpers -----------------------------------------------------------------


def test_commit_all_commits_new_changed_and_deleted_files(repo: Repo, root: Path) -> None:
    lane = create_lane(repo, RUN, "US-001", repo.head)
    assert commit_all(lane, "nothing") is None
    assert lane_head(lane) == repo.head  # no empty commit
    (lane.path / "app.py").unlink()
    (lane.path / "new.py").write_text("n = 1\n")
    (lane.path / "trace.log").write_text("ignored\n")
    head = commit_all(lane, "US-001: the agent's work")
    assert head and head == lane_head(lane) != repo.head
    files = git(root, "ls-tree", "--name-only", head).split()
    assert files == [".gitignore", "new.py"]
    assert git(root, "log", "-1", "--format=%an <%ae>|%s", head).strip() == \
        "t <t@example.com>|US-001: the agent's work"
    assert git(lane.path, "status", "--porcelain") == ""  # trace.log: ignored, left alone
    assert (lane.path / "trace.log").exists()


def test_commit_all_falls_back_to_its_own_identity_without_writing_it(
        repo: Repo, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.delenv(f"GIT_{role}_NAME")
        monkeypatch.delenv(f"GIT_{role}_EMAIL")
    monkeypatch.setenv("EMAIL", "")
    lane = create_lane(repo, RUN, "US-001", repo.head)
    (lane.path / "new.py").write_text("n = 1\n")
    head = commit_all(lane, "US-001")
    assert head
    assert git(root, "log", "-1", "--format=%an <%ae>|%cn <%ce>", head).strip() == \
        "pytest-ralph <pytest-ralph@localhost>|pytest-ralph <pytest-ralph@localhost>"
    config = (root / ".git" / "config").read_text()
    assert "pytest-ralph" not in config and "[user]" not in config


def test_commit_all_uses_the_configured_identity(repo: Repo, root: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.delenv(f"GIT_{role}_NAME")
        monkeypatch.delenv(f"GIT_{role}_EMAIL")
    git(root, "config", "user.name", "Ada")
    git(root, "config", "user.email", "ada@example.com")
    lane = create_lane(repo, RUN, "US-001", repo.head)
    (lane.path / "new.py").write_text("n = 1\n")
    head = commit_all(lane, "US-001")
    assert head
    assert git(root, "log", "-1", "--format=%an <%ae>", head).strip() == "Ada <ada@example.com>"


def test_hooks_never_run(repo: Repo, root: Path) -> None:
    hooks = root / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    marker = root.parent / "hook-ran"
    for name in ("post-checkout", "pre-commit", "post-commit"):
        hook = hooks / name
        hook.write_text(f"#!/bin/sh\necho {name} >> '{marker}'\nexit 1\n")
        hook.chmod(0o755)
    lane = create_lane(repo, RUN, "US-001", repo.head)
    (lane.path / "new.py").write_text("n = 1\n")
    assert commit_all(lane, "US-001")
    assert not marker.exists()


def test_git_variables_of_the_caller_do_not_redirect_the_lanes(
        repo: Repo, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    lane = create_lane(repo, RUN, "US-001", repo.head)
    assert lane.branch in branches(root)
    assert git(other, "branch", "--list") == ""
