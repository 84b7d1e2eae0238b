"""Tests of pytest_ralph.loop.gitdiff: working-tree snapshots and their diff stats, on real git
repositories in tmp_path."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_ralph.loop import gitdiff
from pytest_ralph.loop.gitdiff import diff_stat, tree_snapshot
from pytest_ralph.state.folder import StateDir
from tests.support.git import git, needs_git
from tests.support.privileges import unprivileged

pytestmark = needs_git

TREE_ID = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


def state(root: Path) -> tuple[str, ...]:
    """Everything the user sees of the repository: status, staged diff, HEAD, refs, stash."""
    return (git(root, "status", "--porcelain", "--untracked-files=all"),
            git(root, "diff", "--cached", "--stat"),
            git(root, "diff", "--cached"),
            git(root, "ls-files", "--stage"),
            git(root, "for-each-ref"),
            (root / ".git" / "HEAD").read_text(),
            git(root, "stash", "list"))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "app.py").write_text("print('hello')\n" * 3)
    (root / "lib").mkdir()
    (root / "lib" / "util.py").write_text("X = 1\n")
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


def test_snapshot_is_a_tree_id_and_stable(repo: Path) -> None:
    a = tree_snapshot(repo)
    assert a is not None and TREE_ID.fullmatch(a)
    assert tree_snapshot(repo) == a
    assert a == git(repo, "rev-parse", "HEAD^{tree}").strip()  # clean tree: HEAD's tree
    assert diff_stat(repo, a, a) == ""


def test_modified_added_untracked_and_deleted_files(repo: Path) -> None:
    before = tree_snapshot(repo)
    (repo / "app.py").write_text("print('bye')\n")
    (repo / "new.py").write_text("a = 1\nb = 2\n")
    (repo / "lib" / "util.py").unlink()
    after = tree_snapshot(repo)
    assert after is not None and after != before
    stat = diff_stat(repo, before, after)
    assert re.search(r"^ app\.py +\| +4 \+---$", stat, re.M), stat
    assert re.search(r"^ new\.py +\| +2 \+\+$", stat, re.M), stat
    assert re.search(r"^ lib/util\.py +\| +1 -$", stat, re.M), stat
    assert stat.splitlines()[-1] == " 3 files changed, 3 insertions(+), 4 deletions(-)"
    assert not stat.endswith("\n")


def test_binary_file(repo: Path) -> None:
    before = tree_snapshot(repo)
    (repo / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00" + bytes(range(256)))
    stat = diff_stat(repo, before, tree_snapshot(repo))
    assert re.search(r"^ logo\.png +\| +Bin 0 -> 266 bytes$", stat, re.M), stat
    assert stat.splitlines()[-1] == " 1 file changed, 0 insertions(+), 0 deletions(-)"


def test_ignored_files_and_the_state_folder_do_not_show(repo: Path) -> None:
    before = tree_snapshot(repo)
    (repo / "debug.log").write_text("noise\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.o").write_bytes(b"\0" * 10)
    state_dir = StateDir(repo / ".pytest_ralph")
    state_dir.ensure()
    state_dir.append_progress("iteration 1: tried things")
    (state_dir.root / "runs").mkdir()
    (state_dir.root / "runs" / "prompt.md").write_text("prompt\n")
    assert tree_snapshot(repo) == before
    (repo / "real.py").write_text("x\n")
    stat = diff_stat(repo, before, tree_snapshot(repo))
    assert "real.py" in stat
    assert ".pytest_ralph" not in stat and "debug.log" not in stat and "build" not in stat


def test_the_users_index_head_stash_and_files_are_untouched(repo: Path) -> None:
    # A staged change, an unstaged change on top of it, an untracked file, a stash entry.
    (repo / "stashed.py").write_text("s\n")
    git(repo, "add", "stashed.py")
    git(repo, "stash", "-q")
    (repo / "app.py").write_text("staged\n")
    git(repo, "add", "app.py")
    (repo / "app.py").write_text("staged\nthen edited\n")
    (repo / "lib" / "util.py").write_text("X = 2\n")
    (repo / "untracked.txt").write_text("u\n")
    index = repo / ".git" / "index"
    seen = state(repo)
    index_bytes, index_mtime = index.read_bytes(), index.stat().st_mtime_ns
    files = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts}
    snap = tree_snapshot(repo)
    assert snap is not None
    assert index.read_bytes() == index_bytes and index.stat().st_mtime_ns == index_mtime
    assert state(repo) == seen
    assert not (repo / ".git" / "index.lock").exists()
    assert {p: p.read_bytes() for p in files} == files
    # The snapshot holds the working tree, not the staged version.
    assert git(repo, "show", f"{snap}:app.py") == "staged\nthen edited\n"
    assert git(repo, "show", f"{snap}:untracked.txt") == "u\n"
    stat = diff_stat(repo, git(repo, "rev-parse", "HEAD^{tree}").strip(), snap)
    assert "app.py" in stat and "lib/util.py" in stat and "untracked.txt" in stat
    assert "stashed.py" not in stat
    assert state(repo) == seen


def test_a_loop_started_from_a_git_hook_ignores_git_dir_and_index_variables(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    before = tree_snapshot(repo)
    (repo / "x.py").write_text("x\n")
    assert "x.py" in diff_stat(repo, before, tree_snapshot(repo))
    assert not (other / ".git" / "index").exists()


def test_not_a_repository(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("a\n")
    assert tree_snapshot(tmp_path) is None
    assert tree_snapshot(tmp_path / "missing") is None
    assert diff_stat(tmp_path, None, None) == ""
    assert diff_stat(tmp_path, "a" * 40, "b" * 40) == ""  # git fails: ""


def test_inside_the_git_folder_is_not_a_work_tree(repo: Path) -> None:
    assert tree_snapshot(repo / ".git") is None


def test_git_missing(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(repo / "no-bin-here"))
    assert tree_snapshot(repo) is None


@pytest.mark.skipif(os.name != "posix", reason="a shell script stands in for git")
def test_a_git_that_hangs_is_killed(repo: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "git"
    fake.write_text("#!/bin/sh\nsleep 60 &\nsleep 60\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(gitdiff, "GIT_TIMEOUT", 0.5)
    start = time.monotonic()
    assert tree_snapshot(repo) is None
    assert diff_stat(repo, "a" * 40, "b" * 40) == ""
    assert time.monotonic() - start < 10


def test_repository_without_commits(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    root.mkdir()
    git(root, "init", "-q")
    empty = tree_snapshot(root)
    assert empty is not None and TREE_ID.fullmatch(empty)
    (root / "first.py").write_text("1\n2\n")
    seen = git(root, "status", "--porcelain")
    after = tree_snapshot(root)
    assert git(root, "status", "--porcelain") == seen
    assert not (root / ".git" / "index").exists()  # no index made for the user
    stat = diff_stat(root, empty, after)
    assert re.search(r"^ first\.py +\| +2 \+\+$", stat, re.M), stat


def test_project_in_a_subfolder_of_the_repository(repo: Path) -> None:
    project = repo / "lib"
    before = tree_snapshot(project)
    (repo / "app.py").write_text("outside the project\n")
    (project / "inner.py").write_text("inside\n")
    stat = diff_stat(project, before, tree_snapshot(project))
    assert re.search(r"^ inner\.py +\| +1 \+$", stat, re.M), stat  # relative to the project
    assert "app.py" not in stat


def test_many_files_are_cut_with_a_count(repo: Path) -> None:
    before = tree_snapshot(repo)
    many = repo / "many"
    many.mkdir()
    for i in range(1000):
        (many / f"file_{i:04d}.txt").write_text(f"{i}\n")
    after = tree_snapshot(repo)
    stat = diff_stat(repo, before, after)
    assert len(stat) <= 2000
    lines = stat.splitlines()
    assert lines[-1] == " 1000 files changed, 1000 insertions(+)"
    more = re.fullmatch(r" \.\.\. (\d+) more files", lines[-2])
    assert more, lines[-2]
    assert len(lines) - 2 + int(more.group(1)) == 1000
    assert lines[0].startswith(" many/file_0000.txt")
    short = diff_stat(repo, before, after, max_chars=300)
    assert len(short) <= 300
    assert short.splitlines()[-1] == lines[-1]


def test_max_chars_too_small_for_any_file_line(repo: Path) -> None:
    before = tree_snapshot(repo)
    (repo / "a.py").write_text("a\n")
    stat = diff_stat(repo, before, tree_snapshot(repo), max_chars=10)
    assert stat == " ... 1 more file\n 1 file changed, 1 insertion(+)"


#: Run in a child process (without root's power over permissions, as CI runs as root): the
#: snapshot of a tree with an unreadable file, then of the tree with b.py added.
UNREADABLE = """
import pathlib, sys
from pytest_ralph.loop.gitdiff import diff_stat, tree_snapshot
repo = pathlib.Path(sys.argv[1])
try:
    (repo / "secret.txt").read_bytes()
    print("readable")
except PermissionError:
    print("unreadable")
before = tree_snapshot(repo)
(repo / "b.py").write_text("b\\n")
print(before is not None)
print(diff_stat(repo, before, tree_snapshot(repo)))
"""


@pytest.mark.skipif(os.name != "posix", reason="POSIX file permissions")
def test_an_unreadable_file_is_left_out(repo: Path) -> None:
    secret = repo / "secret.txt"
    secret.write_text("s\n")
    secret.chmod(0)
    try:
        done = subprocess.run(unprivileged([sys.executable, "-c", UNREADABLE, str(repo)]),
                              capture_output=True, text=True, timeout=60, check=False)
    finally:
        secret.chmod(0o600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["unreadable", "True"], done.stdout
    stat = "\n".join(lines[2:])
    assert re.search(r"^ b\.py +\| +1 \+$", stat, re.M), stat
    assert "secret.txt" not in stat
    assert stat.splitlines()[-1] == " 1 file changed, 1 insertion(+)"


def test_tracked_files_that_match_gitignore_still_count(repo: Path) -> None:
    (repo / "keep.log").write_text("tracked on purpose\n")
    git(repo, "add", "-f", "keep.log")
    git(repo, "commit", "-q", "-m", "log")
    before = tree_snapshot(repo)
    (repo / "keep.log").write_text("changed\n")
    assert re.search(r"^ keep\.log +\| +2 \+-$", diff_stat(repo, before, tree_snapshot(repo)),
                     re.M)


def test_non_ascii_and_spaced_file_names_are_shown_as_they_are(repo: Path) -> None:
    before = tree_snapshot(repo)
    (repo / "données client.csv").write_text("a\n")
    stat = diff_stat(repo, before, tree_snapshot(repo))
    assert re.search(r"^ données client\.csv +\| +1 \+$", stat, re.M), stat


def test_output_past_the_read_limit_keeps_its_summary(repo: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    before = tree_snapshot(repo)
    for i in range(100):
        (repo / f"f{i:03d}.txt").write_text("x\n")
    after = tree_snapshot(repo)
    monkeypatch.setattr(gitdiff, "GIT_OUTPUT_BYTES", 700)
    lines = diff_stat(repo, before, after).splitlines()
    assert lines[-1] == " 100 files changed, 100 insertions(+)"
    more = re.fullmatch(r" \.\.\. (\d+) more files", lines[-2])
    assert more and len(lines) - 2 + int(more.group(1)) == 100
    assert all(re.fullmatch(r" f\d{3}\.txt +\| +1 \+", line) for line in lines[:-2])


def test_a_filter_in_a_commondir_config_never_runs(repo: Path, tmp_path: Path) -> None:
    """Issue 20 (red team): the agent wrote ``.git/commondir`` pointing at a folder whose
    ``config`` defines a clean filter for every file; git takes its configuration from there,
    the loop's ``git add`` ran the filter unconfined. The commondir's files count in
    :func:`config_digest`, and ``git add`` runs with every filter driver turned off."""
    trust = gitdiff.config_digest(repo)
    ran = tmp_path / "filter-ran"
    common = repo / ".git" / "fc"
    shutil.copytree(repo / ".git", common, ignore=shutil.ignore_patterns("fc"))
    filter_script = tmp_path / "filter.sh"
    filter_script.write_text(f"#!/bin/sh\ntouch {ran}\nexec cat\n")
    filter_script.chmod(0o755)
    with (common / "config").open("a") as f:
        f.write(f"[filter \"rx\"]\n\tclean = {filter_script}\n\trequired = true\n")
    (repo / ".git" / "commondir").write_text("fc\n")
    (repo / ".gitattributes").write_text("* filter=rx\n")
    (repo / "app.py").write_text("print('changed')\n")
    assert "filter.rx.clean" in git(repo, "config", "--name-only", "--get-regexp", "^filter")
    git(repo, "status")  # git itself runs the filter: the trap is real
    assert ran.exists()
    ran.unlink()
    assert gitdiff.config_digest(repo) != trust
    assert tree_snapshot(repo, trust=trust) is None
    assert not ran.exists()
    # Trusted or not, the filter is off: the snapshot holds the file's own bytes.
    tree = tree_snapshot(repo)
    assert tree is not None and not ran.exists()
    blob = git(repo, "rev-parse", f"{tree}:app.py").strip()
    assert git(repo, "cat-file", "-p", blob) == "print('changed')\n"


def _bare_lookalike(folder: Path, ran: Path, driver: str = "rx") -> None:
    """Dress ``folder`` as a bare repository whose config runs a filter that touches ``ran``."""
    (folder / "HEAD").write_text("ref: refs/heads/x\n")
    for name in ("objects", "refs"):
        (folder / name).mkdir(exist_ok=True)
    script = folder / ".evil.sh"
    script.write_text(f"#!/bin/sh\ntouch {ran}\nexec cat\n")
    script.chmod(0o755)
    (folder / "config").write_text(f"[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
                                   f"\tworktree = {folder}\n[filter \"{driver}\"]\n"
                                   f"\tclean = {script}\n")
    (folder / ".gitattributes").write_text(f"* filter={driver}\n")


def test_a_project_dressed_as_a_bare_repository_never_configures_git(
        repo: Path, tmp_path: Path) -> None:
    """Issue 20 (red team): with ``.git/HEAD`` renamed, git no longer takes ``.git`` for a
    repository and finds the project folder itself, dressed as a bare repository whose
    ``config`` (never hashed) defines a filter, named ``a=b`` so that ``-c filter.a=b.clean=``
    sets another key. The loop names git's repository itself (``GIT_DIR``, ``GIT_WORK_TREE``),
    and a driver name it cannot turn off means no snapshot."""
    trust = gitdiff.config_digest(repo)
    ran = tmp_path / "filter-ran"
    (repo / ".git" / "HEAD").rename(repo / ".git" / "HEAD.orig")
    _bare_lookalike(repo, ran, "a=b")
    assert tree_snapshot(repo, trust=trust) is None  # .git is no repository now
    assert tree_snapshot(repo) is None
    assert not ran.exists()
    (repo / ".git" / "HEAD.orig").rename(repo / ".git" / "HEAD")
    assert tree_snapshot(repo, trust=trust) is not None  # .git's config: no such driver
    assert not ran.exists()
    # A driver "a=b" in a configuration git does read: no snapshot, the filter never runs.
    with (repo / ".git" / "config").open("a") as f:
        f.write(f"[filter \"a=b\"]\n\tclean = {repo / '.evil.sh'}\n")
    assert tree_snapshot(repo) is None
    assert not ran.exists()


def test_a_project_inside_a_larger_repository_cannot_stand_in_for_it(
        repo: Path, tmp_path: Path) -> None:
    """A project folder inside a repository (a monorepo): the agent, who may write only the
    project, dresses it as a bare repository; git would have found it before the real
    ``.git`` above."""
    project = repo / "lib"
    trust = gitdiff.config_digest(project)
    ran = tmp_path / "filter-ran"
    _bare_lookalike(project, ran)
    assert gitdiff.config_digest(project) == trust  # nothing git is told to read changed
    tree = tree_snapshot(project, trust=trust)
    assert tree is not None and not ran.exists()
    assert "lib/util.py" in git(repo, "ls-tree", "-r", "--name-only", tree)


# -- work marks and what the agent did to HEAD --------------------------------------------------


def test_a_work_mark_is_the_tree_and_head_and_leaves_the_repository_as_it_was(
        repo: Path) -> None:
    seen = state(repo)
    mark = gitdiff.work_mark(repo)
    assert mark is not None
    tree, commit = mark.split(" ")
    assert tree == tree_snapshot(repo) and commit == git(repo, "rev-parse", "HEAD").strip()
    assert gitdiff.tree_of(mark) == tree and gitdiff.head_of(mark) == commit
    assert gitdiff.head_of(tree) is None and gitdiff.tree_of(tree) == tree  # an older mark
    assert state(repo) == seen


def test_commits_are_named_newest_first_and_counted_past_five(repo: Path) -> None:
    before = gitdiff.work_mark(repo)
    for n in range(7):
        (repo / "app.py").write_text(f"n = {n}\n")
        git(repo, "commit", "-q", "-a", "-m", f"step {n}")
    line = gitdiff.commit_moves(repo, before, gitdiff.work_mark(repo))
    ids = git(repo, "log", "--format=%h", "-7").split()
    assert line == ("commits: 7 new: " + "; ".join(
        f"{ids[k]} step {6 - k}" for k in range(5)) + "; ... 2 more"), line
    # The files' diff is the same whatever the commits: the working tree before and after.
    assert diff_stat(repo, before, gitdiff.work_mark(repo)).splitlines()[0].startswith(" app.py")


def test_a_subject_is_cut_and_loses_its_control_characters(repo: Path) -> None:
    before = gitdiff.work_mark(repo)
    (repo / "app.py").write_text("x\n")
    git(repo, "commit", "-q", "-a", "-m", "fix \x1b[31mred\x1b[0m " + "y" * 100)
    line = gitdiff.commit_moves(repo, before, gitdiff.work_mark(repo))
    subject = line.split(" ", 4)[4]
    assert "\x1b" not in line and subject.startswith("fix [31mred[0m y")
    assert len(subject) == gitdiff.SUBJECT_CHARS and subject.endswith("..."), subject


def test_head_unchanged_unknown_or_untrusted_says_nothing(repo: Path) -> None:
    mark = gitdiff.work_mark(repo)
    (repo / "app.py").write_text("x\n")
    assert gitdiff.commit_moves(repo, mark, gitdiff.work_mark(repo)) == ""  # no commit
    git(repo, "commit", "-q", "-a", "-m", "c")
    after = gitdiff.work_mark(repo)
    assert gitdiff.commit_moves(repo, None, after) == ""
    assert gitdiff.commit_moves(repo, mark, None) == ""
    assert gitdiff.commit_moves(repo, mark, after, trust="not the digest") == ""
    assert gitdiff.commit_moves(repo, mark, after, trust=gitdiff.config_digest(repo)) != ""


def test_the_first_commit_of_a_repository(tmp_path: Path) -> None:
    root = tmp_path / "new"
    root.mkdir()
    git(root, "init", "-q")
    (root / "a.py").write_text("a = 1\n")
    before = gitdiff.work_mark(root)
    assert before is not None and gitdiff.head_of(before) is None
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first")
    line = gitdiff.commit_moves(root, before, gitdiff.work_mark(root))
    assert line == f"commits: the first commit: {git(root, 'log', '--format=%h first').strip()}"
