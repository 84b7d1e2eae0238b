"""The git worktrees of parallel stories: one lane per story, each a branch and a worktree.

A run of ``--ralph-parallel N`` works each story in a *lane*: the branch
``ralph/<run_id>/<key>`` (``key``: the story id made a valid ref name, :func:`lane_key`) made
at the commit the run starts from, checked out in the worktree
``<state folder>/lanes/<run_id>/<key>``. The state folder ignores itself (its ``.gitignore``
holds ``*``), so the lanes never show in the user's ``git status``; beside each worktree a
small file ``<key>.json`` records the story id and the base commit, so that
:func:`find_lanes` can name the story again after a crash.

* :func:`preflight` refuses a project that parallel stories cannot work on
  (:class:`ParallelUsageError`, whose message says what to do) and returns the :class:`Repo`.
* :func:`create_lane`, :func:`remove_lane`, :func:`find_lanes`, :func:`repair` and
  :func:`cleanup` make, remove, find and rebuild the lanes. The branch is what holds a lane's
  work: a worktree can always be rebuilt from it, and nothing here deletes a branch but
  :func:`remove_lane` (and :func:`cleanup`, through it) when asked to.
* :func:`lane_head` and :func:`commit_all` are what the merge queue needs of a lane.

The user's own worktrees, branches, index and working tree are never touched: only the
branches under ``ralph/<run_id>/`` and the worktrees under ``<state folder>/lanes/<run_id>/``.

git runs through :func:`pytest_ralph.parallel.gitcmd.git` (no prompt, no pager, no hook, no
signing, each command in its own process group, killed after :data:`GIT_TIMEOUT` seconds); a
git failure raises :class:`WorktreeError` with git's own message. :func:`uncommitted` and
:func:`ensure_ignored` are shared with the merge queue.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .gitcmd import GIT_TIMEOUT as GIT_TIMEOUT  # (API: the lanes' git timeout)
from .gitcmd import WorktreeError as WorktreeError  # (API: what the lanes raise)
from .gitcmd import (
    at_worktree,
    fails,
    git,
    identity,
    list_worktrees,
    points_to,
    same_path,
    worktree_gitdir,
)
from .names import BRANCH_PREFIX, INTEGRATION, KEY_LENGTH, lane_key  # noqa: F401  (API)

#: The name of the state folder in the project when none is given.
STATE_DIR = ".pytest_ralph"

#: The folder of the state folder that holds the lanes' worktrees, one folder per run.
LANES = "lanes"

#: How many uncommitted paths :func:`preflight`'s message names before "... N more".
LISTED_PATHS = 10


class ParallelUsageError(Exception):
    """The project cannot run stories in parallel; the message says why and what to do."""


@dataclass(frozen=True)
class Repo:
    """The repository a parallel run works in, as :func:`preflight` found it.

    Attributes:
        top: the top folder of the (main) work tree, resolved.
        project: the project folder (``top`` or a folder below it), resolved.
        state_dir: the state folder, resolved; the lanes live in ``state_dir/lanes``.
        branch: the branch checked out (``main``), or ``None`` on a detached ``HEAD``.
        head: the full commit id ``HEAD`` names.
    """

    top: Path
    project: Path
    state_dir: Path
    branch: str | None
    head: str


@dataclass(frozen=True)
class Lane:
    """One story's lane.

    Attributes:
        repo: the repository.
        run_id: the run it belongs to (as given).
        story_id: the story's id (as given, or as its ``<key>.json`` recorded it).
        key: the story id as a ref name component (:func:`lane_key`).
        branch: the branch, ``ralph/<run key>/<key>`` (without ``refs/heads/``).
        path: the worktree folder, ``<state_dir>/lanes/<run key>/<key>``.
        base: the commit the branch was made at, or ``None`` when no record says.
    """

    repo: Repo
    run_id: str
    story_id: str
    key: str
    branch: str
    path: Path
    base: str | None

    @property
    def project(self) -> Path:
        """The project folder inside the worktree (the worktree itself unless the project
        is a subfolder of the repository)."""
        return self.path / self.repo.project.relative_to(self.repo.top)


# -- preflight --------------------------------------------------------------------------


def preflight(root: Path, state_dir: Path | None = None) -> Repo:
    """Check that the project at ``root`` can run stories in parallel and return its repo.

    Args:
        root: the project folder (the repository's top or a folder below it).
        state_dir: the state folder (default ``root/.pytest_ralph``); what it holds never
            counts as an uncommitted change.

    Returns:
        the :class:`Repo`: top, project, state folder, branch (``None`` when detached),
        ``HEAD``'s commit id.

    Raises:
        ParallelUsageError: ``root`` is not in a git work tree; the repository has no commit
            yet; or there are changes (tracked files modified or staged, untracked files not
            ignored) that the worktrees, made from ``HEAD``'s commit, would not see. The
            message names the case (and up to :data:`LISTED_PATHS` of the changes) and says
            what to run.
    """
    root = Path(root).resolve()
    state = Path(state_dir).resolve() if state_dir is not None else root / STATE_DIR
    inside = root.is_dir() and git(root, "rev-parse", "--is-inside-work-tree",
                                    ok=tuple(range(256)))[1].strip() == "true"
    if not inside:
        raise ParallelUsageError(
            f"--ralph-parallel needs a git repository: {root} is not in a git work tree. "
            "Each story runs in its own git worktree made from a commit; make one with: "
            "git init && git add -A && git commit -m 'start'")
    top = Path(git(root, "rev-parse", "--show-toplevel")[1].strip()).resolve()
    code, out, _ = git(root, "rev-parse", "--verify", "-q", "HEAD^{commit}", ok=(0, 1, 128))
    if code != 0:
        raise ParallelUsageError(
            f"--ralph-parallel needs a commit to start the stories' worktrees from, and the "
            f"repository at {top} has none yet: git add -A && git commit -m 'start'")
    head = out.strip()
    code, out, _ = git(root, "symbolic-ref", "-q", "--short", "HEAD", ok=(0, 1))
    branch = out.strip() if code == 0 and out.strip() else None
    changes = uncommitted(top, state)
    if changes:
        shown = [f"  {line}" for line in changes[:LISTED_PATHS]]
        if len(changes) > LISTED_PATHS:
            shown.append(f"  ... {len(changes) - LISTED_PATHS} more")
        raise ParallelUsageError(
            f"--ralph-parallel runs each story in a git worktree made from the commit HEAD "
            f"names ({head[:12]}), which would not see the uncommitted changes in {top}:\n"
            + "\n".join(shown) + "\nCommit them (git add -A && git commit -m 'before "
            "ralph') or put them aside (git stash -u), then run again.")
    return Repo(top=top, project=root, state_dir=state, branch=branch, head=head)


def uncommitted(top: Path, state: Path) -> list[str]:
    """What ``git status`` shows of the whole repository at ``top``, without what lies in the
    state folder ``state``: tracked changes and untracked files not ignored.

    Args:
        top: the top folder of a work tree.
        state: the state folder (anywhere; only when it is under ``top`` is it left out).

    Returns:
        one line ``XY path`` per change, ``XY`` git's two-letter status, ``path`` relative to
        ``top`` (for a rename, where it went); ``[]`` when the work tree is clean.

    Raises:
        WorktreeError: git failed.
    """
    out = git(top, "status", "--porcelain=v1", "-z", "--untracked-files=all",
               "--ignore-submodules=none")[1]
    try:
        skip = state.relative_to(top).as_posix().rstrip("/") + "/"
    except ValueError:
        skip = None
    fields = out.split("\0")
    lines = []
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":  # a rename or copy: the next field is where it came from
            i += 1
        if skip is not None and (path + "/").startswith(skip):
            continue
        lines.append(f"{code} {path}")
    return lines


# -- names ------------------------------------------------------------------------------


def _names(repo: Repo, run_id: str, story_id: str) -> tuple[str, str, Path]:
    key = lane_key(story_id)
    run = lane_key(run_id)
    branch = f"{BRANCH_PREFIX}/{run}/{key}"
    if key == INTEGRATION:
        raise WorktreeError(f"story {story_id!r} would have the lane {branch}, the name of the "
                            "run's integration branch: rename the story in the PRD")
    if fails(repo.top, "check-ref-format", f"refs/heads/{branch}"):
        raise WorktreeError(f"{branch!r} is not a valid branch name (story {story_id!r}, "
                            f"run {run_id!r})")
    return key, branch, _run_dir(repo, run_id) / key


def _run_dir(repo: Repo, run_id: str) -> Path:
    return repo.state_dir / LANES / lane_key(run_id)


def ensure_ignored(state: Path) -> None:
    """Create the state folder ``state`` (and its parents) and its ``.gitignore`` (``*``) when
    missing, so that the lanes never show up in the user's ``git status``; an existing
    ``.gitignore`` is left as it is.

    Raises:
        OSError: the folder or the file cannot be made.
    """
    state.mkdir(parents=True, exist_ok=True)
    ignore = state / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# Created by pytest-ralph: the loop's state and reports.\n*\n",
                          encoding="utf-8")


# -- lanes ------------------------------------------------------------------------------


def create_lane(repo: Repo, run_id: str, story_id: str, base_commit: str) -> Lane:
    """Make the lane of ``story_id``: the branch ``ralph/<run>/<key>`` at ``base_commit`` and
    its worktree ``<state_dir>/lanes/<run>/<key>``, plus the record ``<key>.json`` beside it.

    Raises:
        WorktreeError: the branch exists already (find it with :func:`find_lanes`), the
            worktree folder exists, ``base_commit`` is no commit, or git failed.
    """
    key, branch, path = _names(repo, run_id, story_id)
    if not fails(repo.top, "show-ref", "--verify", "-q", f"refs/heads/{branch}"):
        raise WorktreeError(f"the lane of story {story_id!r} exists already (branch {branch}):"
                            " use find_lanes and repair to go on with it, or remove it first")
    if path.exists():
        raise WorktreeError(f"the lane folder {path} of story {story_id!r} exists already: "
                            "move it aside or remove it")
    base = git(repo.top, "rev-parse", "--verify", "-q", f"{base_commit}^{{commit}}",
                ok=(0, 1, 128))
    if base[0] != 0:
        raise WorktreeError(f"{base_commit!r} names no commit in {repo.top}")
    commit = base[1].strip()
    ensure_ignored(repo.state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    git(repo.top, "worktree", "add", "--no-track", "-b", branch, str(path), commit)
    lane = Lane(repo, run_id, story_id, key, branch, path, commit)
    _write_record(lane)
    return lane


def _record(lane_path: Path) -> Path:
    return lane_path.with_name(lane_path.name + ".json")


def _write_record(lane: Lane) -> None:
    record = _record(lane.path)
    tmp = record.with_name(record.name + ".tmp")
    tmp.write_text(json.dumps({"story": lane.story_id, "run": lane.run_id, "base": lane.base,
                               "branch": lane.branch}, ensure_ascii=False) + "\n",
                   encoding="utf-8")
    os.replace(tmp, record)


def _read_record(lane_path: Path) -> dict[str, str]:
    try:
        data = json.loads(_record(lane_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def find_lanes(repo: Repo, run_id: str) -> list[Lane]:
    """The lanes of run ``run_id`` that exist now, sorted by key: every branch under
    ``ralph/<run>/``, whether or not its worktree is still there (a lane whose worktree is
    missing or broken comes back from :func:`repair`). The story id and base commit come from
    the lane's ``<key>.json`` (the key and ``None`` when it is gone).

    Raises:
        WorktreeError: git failed.
    """
    run = lane_key(run_id)
    prefix = f"refs/heads/{BRANCH_PREFIX}/{run}/"
    out = git(repo.top, "for-each-ref", "--format=%(refname)", prefix)[1]
    lanes = []
    for ref in sorted(out.split()):
        key = ref[len(prefix):]
        if "/" in key or key == INTEGRATION:  # the merge queue's branch is no lane
            continue
        path = _run_dir(repo, run_id) / key
        record = _read_record(path)
        lanes.append(Lane(repo, run_id, record.get("story", key), key,
                          ref[len("refs/heads/"):], path, record.get("base")))
    return lanes


def lane_state(lane: Lane) -> str:
    """How the lane's worktree is: ``"ready"`` (registered, its folder there, on the lane's
    branch), ``"missing"`` (no folder, or the registration is gone) or ``"broken"`` (a folder
    that is not the lane's worktree, a worktree on another branch, or one whose ``.git`` file
    no longer names its git folder as the repository records it: rewritten by the agent, it
    would point the controller's git at a configuration of the agent's).

    Raises:
        WorktreeError: git failed.
    """
    registered = [w for w in list_worktrees(lane.repo.top) if same_path(w["worktree"], lane.path)]
    if not lane.path.exists():
        return "missing"
    if not registered or "prunable" in registered[0]:
        return "broken"
    gitdir = worktree_gitdir(lane.repo.top, lane.path)
    if gitdir is None or not points_to(lane.path, gitdir):
        return "broken"  # a .git file the agent rewrote would point git at its own config
    at = at_worktree(lane.path, gitdir)
    try:
        top = git(lane.path, *at, "rev-parse", "--show-toplevel")[1].strip()
        head = git(lane.path, *at, "symbolic-ref", "-q", "HEAD", ok=(0, 1))[1].strip()
    except WorktreeError:
        return "broken"
    if not same_path(top, lane.path) or head != f"refs/heads/{lane.branch}":
        return "broken"
    return "ready"


def repair(lane: Lane) -> str:
    """Make the lane's worktree usable again, from its branch: ``"reused"`` when it was intact
    (nothing is done), ``"rebuilt"`` when it was checked out again. A folder in the way that
    is not the lane's worktree (a half-deleted one) is moved aside to
    ``<key>.broken-<unix time>``, never deleted; stale registrations are pruned. The branch
    and its commits are never touched.

    Raises:
        WorktreeError: the branch is gone, or git failed.
    """
    top = lane.repo.top
    if fails(top, "show-ref", "--verify", "-q", f"refs/heads/{lane.branch}"):
        raise WorktreeError(f"the branch {lane.branch} of story {lane.story_id!r} is gone: "
                            "its lane cannot be rebuilt")
    state = lane_state(lane)
    if state == "ready":
        return "reused"
    if lane.path.exists():
        aside = lane.path.with_name(f"{lane.key}.broken-{int(time.time())}")
        lane.path.rename(aside)
    git(top, "worktree", "prune")
    lanes = (lane.repo.state_dir / LANES).resolve()
    for w in list_worktrees(top):  # the branch still checked out in another folder of the lanes
        if w.get("branch") == f"refs/heads/{lane.branch}" and \
                Path(w["worktree"]).resolve().is_relative_to(lanes):
            git(top, "worktree", "remove", "--force", "--force", w["worktree"])
    ensure_ignored(lane.repo.state_dir)
    lane.path.parent.mkdir(parents=True, exist_ok=True)
    git(top, "worktree", "add", str(lane.path), lane.branch)
    _write_record(lane)
    return "rebuilt"


def remove_lane(lane: Lane, keep_branch: bool = False) -> None:
    """Remove the lane's worktree (``git worktree remove --force``: what the agent left
    uncommitted there is lost; :func:`commit_all` first to keep it) and, unless
    ``keep_branch``, its branch and record. A lane already half gone is removed as far as
    it exists.

    Raises:
        WorktreeError: git failed.
    """
    top = lane.repo.top
    for w in list_worktrees(top):  # a worktree whose .git file the agent rewrote: git refuses
        if same_path(w["worktree"], lane.path):  # it ("does not point back"); it goes anyway
            git(top, "worktree", "remove", "--force", "--force", str(lane.path),
                ok=tuple(range(256)))
    if lane.path.exists() and lane.path.is_relative_to(lane.repo.state_dir / LANES):
        shutil.rmtree(lane.path)
    git(top, "worktree", "prune")
    if not keep_branch:
        if not fails(top, "show-ref", "--verify", "-q", f"refs/heads/{lane.branch}"):
            git(top, "branch", "-D", lane.branch)
        _record(lane.path).unlink(missing_ok=True)


def cleanup(repo: Repo, run_id: str, keep: frozenset[str] = frozenset()) -> list[str]:
    """Remove every lane of run ``run_id`` (worktrees, branches, records, folders) but the
    branches of the stories in ``keep`` (story ids or keys: the blocked stories whose work
    the user should see); return the branches kept. Afterwards ``git worktree list`` shows
    none of the run's worktrees and no ``ralph/<run>/`` branch remains but those kept. The
    user's own worktrees and branches are left alone.

    Raises:
        WorktreeError: git failed.
    """
    kept = []
    for lane in find_lanes(repo, run_id):
        hold = lane.story_id in keep or lane.key in keep
        remove_lane(lane, keep_branch=hold)
        if hold:
            kept.append(lane.branch)
    run_dir = _run_dir(repo, run_id)
    for w in list_worktrees(repo.top):  # a worktree left under the run's folder, branch or not
        if Path(w["worktree"]).resolve().is_relative_to(run_dir.resolve()):
            git(repo.top, "worktree", "remove", "--force", "--force", w["worktree"],
                ok=tuple(range(256)))
    git(repo.top, "worktree", "prune")
    if run_dir.is_dir() and not kept:
        shutil.rmtree(run_dir)
    with contextlib.suppress(OSError):
        (repo.state_dir / LANES).rmdir()  # only when empty
    return kept


# -- integration helpers -----------------------------------------------------------------


def lane_head(lane: Lane) -> str:
    """The full commit id the lane's branch names (its worktree need not exist).

    Raises:
        WorktreeError: the branch is gone, or git failed.
    """
    code, out, _ = git(lane.repo.top, "rev-parse", "--verify", "-q",
                        f"refs/heads/{lane.branch}^{{commit}}", ok=(0, 1, 128))
    if code != 0:
        raise WorktreeError(f"the branch {lane.branch} of story {lane.story_id!r} is gone")
    return out.strip()


def commit_all(lane: Lane, message: str) -> str | None:
    """Commit whatever is uncommitted in the lane's worktree (``git add -A``: new, changed
    and deleted files, not the ignored ones) onto its branch, so that the branch holds the
    work; return the new commit id, or ``None`` when nothing had changed (no commit is made).

    The author and committer are git's own (``GIT_AUTHOR_NAME``... or ``user.name`` and
    ``user.email``); only the parts git has none of are given as ``-c user.name=pytest-ralph
    -c user.email=pytest-ralph@localhost``, never written to a configuration. No hook runs,
    the commit is not signed.

    Raises:
        WorktreeError: the worktree is not ready (:func:`lane_state`; :func:`repair` it) —
            checked first, so that git never commits in the repository around a broken lane —
            or git failed.
    """
    state = lane_state(lane)
    if state != "ready":
        raise WorktreeError(f"the lane of story {lane.story_id!r} at {lane.path} is {state}: "
                            "repair it before committing")
    where = lane.path
    at = at_worktree(where, worktree_gitdir(lane.repo.top, where))
    git(where, *at, "add", "-A", "--", ".")
    if git(where, *at, "diff", "--cached", "--quiet", ok=(0, 1))[0] == 0:
        return None
    git(where, *at, "commit", "-q", "--no-verify", "-m", message,
        config=identity(lane.repo.top))
    return lane_head(lane)
