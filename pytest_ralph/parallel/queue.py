"""The merge queue of a parallel run: lanes' branches merged one at a time onto an integration
branch, each merge kept only when the criteria say so.

The integration branch is ``ralph/<run key>/integration`` (:data:`INTEGRATION`), made at the
run's base commit and checked out in its own worktree ``<state folder>/lanes/<run
key>/integration``; the user's branch, index and working tree are not touched until
:meth:`MergeQueue.finish`. Per story, :meth:`MergeQueue.merge`:

1. ``git merge --no-ff`` of the lane's branch into the integration worktree. A conflict is
   aborted (``git merge --abort``) and reported with the conflicting paths: outcome
   ``conflict``;
2. the whole check phase in the integration worktree (the ``check`` callable, for production
   :func:`pytest_ralph.parallel.gate.gate_check`);
3. the merge is kept (``merged``) only when every criterion of the story passes and no
   criterion that passed before the merge fails now; otherwise the integration branch is reset
   (``git reset --hard``) to where it was, outcome ``regressed`` (criteria that passed before
   fail now; they are named) or ``story-failed`` (the story's own criteria fail), with the
   failure lines for the lane's next prompt.

Several lanes ready at the same time go in one batch (:meth:`MergeQueue.merge_batch`): merged one
after another as above, then checked once at the top; all kept when every one of their stories'
criteria pass there and nothing that passed before fails, else undone and merged one at a
time, so that a refusal names its story. The check phase (the project's test suite) is the
costly part of a merge; a batch pays for it once.

The history of results is kept in ``<state folder>/lanes/<run key>/queue.json`` (written
atomically after every step, format :data:`QUEUE_VERSION` in :meth:`MergeQueue.to_json`), and
read back when a queue of the same run is made again (a resume): a merge that a crash left
half done is undone, so that the integration branch is always at the last recorded head.

A lane's branch is only read: nothing here moves, rewrites or deletes it, so a story whose
merge was refused keeps all its work there.

git runs as :mod:`pytest_ralph.parallel.gitcmd` runs it (no prompt, no hook, no signing, a
timeout); a git failure raises :class:`QueueError`. This module does not import pytest.
"""

from __future__ import annotations

import json
import shlex
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..oracle.snapshot import Change, Snapshot, compare, snapshot
from ..prd.errors import PRDError
from ..prd.load import load_prd
from ..util.files import atomic_write_text
from .gitcmd import (
    WorktreeError,
    at_worktree,
    fails,
    git,
    identity,
    list_worktrees,
    restore_gitfile,
    same_path,
    worktree_gitdir,
)
from .names import BRANCH_PREFIX, INTEGRATION, lane_key
from .outcomes import OUTCOMES, CheckOutcome, FinishResult, MergeResult
from .worktrees import LANES, Repo, ensure_ignored, uncommitted

__all__ = ["INTEGRATION", "OUTCOMES", "QUEUE_FILE", "QUEUE_VERSION", "CheckOutcome",
           "FinishResult", "MergeQueue", "MergeResult", "QueueError", "integration_branch"]

#: The file of the queue's history, in ``<state folder>/lanes/<run key>/``::
#:
#:     {"version": 1, "run": "<run id>", "branch": "ralph/<run>/integration",
#:      "base": "<sha>", "head": "<sha>", "check_commit": "<sha>" | null,
#:      "check": CheckOutcome.to_json() | null,
#:      "results": [MergeResult.to_json(), ...],
#:      "watched": {subject: [parameter, ...]} | null,
#:      "gate": {"confined": bool, "strict": bool} | null}
#:
#: ``watched``: what the gate learnt the checks import
#: (:attr:`pytest_ralph.parallel.gate.Gate.watched`); ``gate``: the settings of the gate that
#: made its verdicts (:attr:`pytest_ralph.parallel.gate.Gate.settings`); both absent in files
#: of earlier versions.
QUEUE_FILE = "queue.json"

#: The version of :data:`QUEUE_FILE`'s format.
QUEUE_VERSION = 1


class QueueError(Exception):
    """The merge queue cannot go on: a branch that is no branch, a git failure, an unreadable
    ``queue.json``; the message says which and what to do."""


def integration_branch(run_id: str) -> str:
    """The integration branch of run ``run_id``: ``ralph/<run key>/integration``."""
    return f"{BRANCH_PREFIX}/{lane_key(run_id)}/{INTEGRATION}"


# -- the queue --------------------------------------------------------------------------------


@dataclass
class _State:
    head: str
    check: CheckOutcome | None = None  # the last check, of check_commit
    check_commit: str | None = None
    results: list[MergeResult] = field(default_factory=list)
    watched: dict[str, tuple[str, ...]] | None = None  # the gate's (Gate.watched)
    gate: dict[str, bool] | None = None  # the gate's settings (Gate.settings)


class MergeQueue:
    """The criteria-gated merge queue of run ``run_id`` (see the module docstring).

    Making one creates the integration branch at ``base_commit`` and its worktree, or, when
    they exist (a resume), reuses them (a missing or broken worktree is made again from the
    branch) and reads ``queue.json``.

    Args:
        repo: the repository (:func:`pytest_ralph.parallel.worktrees.preflight`).
        run_id: the run's id.
        base_commit: the commit the run started from (the lanes' base).
        check: runs the whole check phase in the folder it is given (the project folder inside
            the integration worktree) and returns what it found; for production
            :func:`pytest_ralph.parallel.gate.gate_check`. It must not raise for failing
            criteria. A check with an ``oracle(folder, start)`` method and a ``watched``
            attribute (:class:`pytest_ralph.parallel.gate.Gate`) gives the queue its oracle
            (the names the checks import guarded too), and its ``watched`` is kept in
            ``queue.json`` and given back (``learn``) on a resume.
        prd: the PRD, relative to the project folder. When given, a merge that changes what
            judges the criteria (the oracle of :func:`pytest_ralph.oracle.snapshot.snapshot`:
            the PRD's criteria, the tests and files they name, ``conftest.py`` files, the
            pytest configuration) is undone before any check runs, as the loop refuses an
            agent's change to its judges: a lane's branch cannot fake the gate of the
            integration branch. Production callers always give it.

    Raises:
        QueueError: ``base_commit`` names no commit; ``queue.json`` is unreadable or belongs to
            another base (its path named: move it aside to start the queue again); git failed.
    """

    def __init__(self, repo: Repo, run_id: str, base_commit: str,
                 check: Callable[[Path], CheckOutcome], *, prd: Path | None = None) -> None:
        self.repo = repo
        self.prd = prd
        self.run_id = run_id
        self.check = check
        self.branch = integration_branch(run_id)
        self.run_dir = repo.state_dir / LANES / lane_key(run_id)
        self.path = self.run_dir / INTEGRATION
        self.file = self.run_dir / QUEUE_FILE
        self.base = self._commit(base_commit, f"the base commit {base_commit!r}")
        gate = getattr(check, "settings", None)
        saved = _read_state(self.file, self.base, gate if isinstance(gate, dict) else None)
        self._state = saved if saved is not None else _State(self.base)
        self._state.gate = gate if isinstance(gate, dict) else self._state.gate
        learn = getattr(check, "learn", None)
        if callable(learn):
            learn(self._state.watched)
        self._gitdir: Path | None = None
        self._open_worktree()
        self._save()

    # -- public -------------------------------------------------------------------------

    @property
    def head(self) -> str:
        """The integration branch's head: the last kept merge, or the base commit."""
        return self._state.head

    @property
    def results(self) -> list[MergeResult]:
        """Every turn so far, oldest first (a copy)."""
        return list(self._state.results)

    @property
    def last_check(self) -> CheckOutcome | None:
        """The last check of the integration head, or ``None`` before the first one."""
        if self._state.check_commit == self._state.head:
            return self._state.check
        return None

    @property
    def merged(self) -> list[str]:
        """The ids of the stories merged so far, in merge order."""
        return [r.story for r in self._state.results if r.merged]

    @property
    def project(self) -> Path:
        """The project folder inside the integration worktree (where the check runs)."""
        return self.path / self.repo.project.relative_to(self.repo.top)

    def merge(self, story_id: str, branch: str) -> MergeResult:
        """Merge the lane branch ``branch`` of ``story_id`` onto the integration branch and
        keep it only when the criteria say so (the module docstring says how).

        Why ``git merge --no-ff`` rather than a rebase: the lane's commits are kept as they
        are (the lane's branch is never rewritten, so nothing of its work can be lost, and a
        lane that goes on after a refusal goes on from its own history); each story lands as
        one merge commit, which one ``git revert -m 1`` undoes; and a conflict is one event for
        the whole story, reported once with its paths, not once per replayed commit.

        Returns:
            the :class:`MergeResult`, also added to :attr:`results` and ``queue.json``.

        Raises:
            QueueError: ``branch`` is no branch of the repository (the message names it and
                the branches of the run); git failed.
        """
        lane_commit = self._branch_commit(branch)
        before = self._state.head
        baseline = self._baseline()
        self._clean()
        refused = self._try_merge(story_id, branch, lane_commit, before)
        if refused is not None:
            return self._record(refused)
        try:  # an interrupt, a check that crashed: nothing unchecked is kept
            after = self._head()
            outcome = self._checked()
        except BaseException:
            self._reset(before)
            raise
        regressed = outcome.regressions(baseline)
        if not regressed and outcome.verified(story_id):
            self._state.head = after
            self._state.check, self._state.check_commit = outcome, after
            return self._record(MergeResult(story_id, branch, "merged", lane_commit, before,
                                            after, outcome.summary, at=time.time()))
        self._reset(before)
        return self._record(_refused_result(story_id, branch, lane_commit, before, outcome,
                                            regressed))

    def merge_batch(self, items: Sequence[tuple[str, str]]) -> list[MergeResult]:
        """Merge several lanes' branches, ``(story id, branch)`` each, and check them once.

        The branches are merged one after another, in the order given, each as
        :meth:`merge` would (``git merge --no-ff``; a conflict, or a change to what judges the
        criteria, undoes that one merge and refuses that story; the others go on), and then
        the whole check phase runs once, at the top. All of them are kept when every merged
        story's criteria pass there and no criterion that passed before the batch fails:
        each story is then verified on the integration head exactly as after a merge of its
        own, for one check instead of one per story (the check phase is the costly part of a
        merge: a project's whole test suite). Otherwise the batch is undone and each story
        goes through :meth:`merge`, one at a time, so that a refusal names the story that
        caused it. (Merge queues of code-review systems batch the same way.)

        A crash before the batch's check ends leaves nothing of it recorded: a queue made
        again undoes it, as it undoes a half-done :meth:`merge`.

        Returns:
            one :class:`MergeResult` per item, in the order given, each also in
            :attr:`results` and ``queue.json``; a batch of one is :meth:`merge`.

        Raises:
            QueueError: a branch is no branch of the repository; git failed.
        """
        if len(items) < 2:
            return [self.merge(story_id, branch) for story_id, branch in items]
        commits = [self._branch_commit(branch) for _, branch in items]  # all named first
        before = self._state.head
        baseline = self._baseline()
        self._clean()
        refused: dict[int, MergeResult] = {}
        kept: list[tuple[int, str]] = []  # (index, the integration commit after its merge)
        for n, ((story_id, branch), lane_commit) in enumerate(zip(items, commits, strict=True)):
            try:
                refusal = self._try_merge(story_id, branch, lane_commit, self._head())
            except BaseException:  # nothing unchecked is kept
                self._reset(before)
                raise
            if refusal is not None:
                refused[n] = refusal
                continue
            kept.append((n, self._head()))
        if not kept:
            return [self._record(refused[n]) for n in range(len(items))]
        try:
            outcome = self._checked()
        except BaseException:  # an interrupt, a check that crashed: nothing unchecked is kept
            self._reset(before)
            raise
        if outcome.regressions(baseline) or not all(
                outcome.verified(items[n][0]) for n, _ in kept):
            self._reset(before)
            return [self.merge(story_id, branch) for story_id, branch in items]
        head = self._head()
        self._state.head = head
        self._state.check, self._state.check_commit = outcome, head
        commit_of = dict(kept)
        out: list[MergeResult] = []
        parent = before
        for n, (story_id, branch) in enumerate(items):
            if n in refused:
                out.append(self._record(replace(refused[n], before=parent, commit=parent)))
                continue
            together = outcome.summary if len(kept) == 1 else (
                f"{outcome.summary}; checked once with {len(kept)} merged together")
            out.append(self._record(MergeResult(story_id, branch, "merged", commits[n], parent,
                                                commit_of[n], together, at=time.time())))
            parent = commit_of[n]
        return out

    def _try_merge(self, story_id: str, branch: str, lane_commit: str,
                   at: str) -> MergeResult | None:
        """``git merge --no-ff`` of ``lane_commit`` onto the head ``at``: ``None`` when it
        is made (unchecked), else the refusal, the merge undone: ``conflict``, or
        ``story-failed`` for a change to what judges the criteria (or a write into the state
        folder). Anything raised leaves the integration worktree at ``at``."""
        judges = self._oracle()
        code, _, _ = self._git("merge", "--no-ff", "--no-edit", "-m",
                               f"ralph: merge story {story_id} ({branch})", lane_commit,
                               ok=(0, 1), config=identity(self.repo.top))
        if code != 0:
            paths = self._conflicts()
            self._git("merge", "--abort", ok=(0, 128))
            self._reset(at)
            return _conflict_result(story_id, branch, lane_commit, at, paths)
        try:
            changed = self._judges_changed(judges, at)
        except BaseException:
            self._reset(at)
            raise
        if changed:
            self._reset(at)
            return _judges_result(story_id, branch, lane_commit, at, changed)
        return None

    def _oracle(self, start: Snapshot | None = None) -> Snapshot | None:
        """The oracle of the integration worktree's project now (``None`` without
        :attr:`prd`).

        Raises:
            PRDError: the PRD does not load.
        """
        if self.prd is None:
            return None
        project = self.project
        oracle = getattr(self.check, "oracle", None)
        if callable(oracle):
            taken: Snapshot = oracle(project, start)
            return taken
        return snapshot(load_prd(project / self.prd), project, start=start)

    def _checked(self) -> CheckOutcome:
        """The check of the integration worktree as it is; what the gate learnt of the
        imports is kept for a resume."""
        outcome = self.check(self.project)
        watched = getattr(self.check, "watched", None)
        if isinstance(watched, dict) and watched != self._state.watched:
            self._state.watched = {str(k): tuple(v) for k, v in watched.items()}
        return outcome

    def _judges_changed(self, judges: Snapshot | None, at: str) -> list[str]:
        """What the merge just made (onto ``at``) changed of the oracle ``judges`` (taken
        before it), one line each, and the files it wrote into the state folder (the loop's
        records, reports and locks: a fast-forward would put them into the user's); ``[]``
        when nothing."""
        names = self._git("diff", "--name-only", "--no-renames", "-z", at, "HEAD")[1]
        state = _state_paths(self.repo, [n for n in names.split("\0") if n])
        if state:
            return [f"it writes into the state folder: {', '.join(state[:5])}"
                    + (f", +{len(state) - 5} more" if len(state) > 5 else "")]
        if judges is None:
            return []
        try:
            now = self._oracle(start=judges)
        except PRDError as exc:
            return [f"the PRD no longer loads ({exc})"]
        except (OSError, RuntimeError, ValueError) as exc:  # a symbolic link loop, say
            return [f"what judges the criteria cannot be read ({exc})"]
        assert now is not None
        changes: list[Change] = compare(judges, now)
        return [ch.describe() for ch in changes]

    def block(self, story_id: str, branch: str, reason: str) -> MergeResult:
        """Record that ``story_id`` was not tried (``blocked``): ``reason`` is the summary
        (``waits for US-001, which is not merged``). Nothing of git is touched."""
        return self._record(MergeResult(story_id, branch, "blocked", "", self._state.head,
                                        self._state.head, reason, failures=(reason,),
                                        at=time.time()))

    def verify(self) -> CheckOutcome:
        """The check of the integration head: the last one when it was of this head, else a
        new one (recorded)."""
        last = self.last_check
        if last is not None:
            return last
        self._clean()
        try:
            outcome = self._checked()
        finally:
            self._restore_gitfile()
        self._state.check, self._state.check_commit = outcome, self._state.head
        self._save()
        return outcome

    def finish(self, user_branch: str, start_commit: str) -> FinishResult:
        """Bring the integration branch into ``user_branch``, when that is safe.

        The branch is fast-forwarded to the integration head only when every merged story is
        verified there (:meth:`verify`, the last check of that head) and the branch still
        names ``start_commit``, which the head descends from: with ``git merge --ff-only`` in
        the main worktree when the branch is checked out there and its working tree is clean
        (the state folder aside), or with ``git update-ref`` (which checks the old value)
        when it is checked out nowhere. Otherwise nothing is touched and the result says why
        and gives the command that merges the integration branch by hand.

        Raises:
            QueueError: ``user_branch`` is no branch, ``start_commit`` no commit; git failed.
        """
        ref = f"refs/heads/{user_branch}"
        old = self._commit(ref, f"the branch {user_branch!r}")
        start = self._commit(start_commit, f"the start commit {start_commit!r}")
        head = self._state.head
        top = self.repo.top

        def manual(reason: str) -> FinishResult:
            command = (f"git switch {shlex.quote(user_branch)} && git merge --no-ff "
                       f"{shlex.quote(self.branch)}")
            return FinishResult("manual", user_branch, old, old, self.branch, head, reason,
                                command)

        merged = self.merged
        if not merged or head == old:
            return FinishResult("nothing", user_branch, old, old, self.branch, head)
        check = self.verify()
        unverified = [s for s in merged if not check.verified(s)]
        if unverified:
            return manual(f"not verified on {self.branch}: {', '.join(unverified)} "
                          f"({check.summary})")
        if old != start:
            return manual(f"{user_branch} moved since the run started (from {start[:12]} to "
                          f"{old[:12]})")
        if fails(top, "merge-base", "--is-ancestor", start, head):
            return manual(f"{self.branch} does not descend from {start[:12]}")
        where = [w for w in list_worktrees(top) if w.get("branch") == ref]
        if not where:
            self._git_at(top, "update-ref", "-m", f"pytest-ralph: fast-forward to {self.branch}",
                         ref, head, old)
        elif same_path(where[0]["worktree"], top):
            changes = uncommitted(top, self.repo.state_dir)
            if changes:
                return manual(f"the working tree of {top} has uncommitted changes "
                              f"({', '.join(changes[:3])}{', ...' if len(changes) > 3 else ''})")
            if self._git_at(top, "merge", "--ff-only", "-q", head, ok=(0, 1, 128))[0] != 0:
                return manual(f"git merge --ff-only {self.branch} failed in {top}")
        else:
            return manual(f"{user_branch} is checked out in another worktree, "
                          f"{where[0]['worktree']}")
        return FinishResult("fast-forwarded", user_branch, old, head, self.branch, head)

    def remove_worktree(self) -> None:
        """Remove the integration worktree (the branch and ``queue.json`` stay, for the user
        to push and for the report).

        Raises:
            QueueError: git failed.
        """
        top = self.repo.top
        self._restore_gitfile()
        for w in list_worktrees(top):
            if same_path(w["worktree"], self.path):
                code = self._git_at(top, "worktree", "remove", "--force", "--force",
                                    str(self.path), ok=tuple(range(256)))[0]
                if code != 0 and self.path.is_dir():  # git refused the folder: it goes anyway
                    shutil.rmtree(self.path, ignore_errors=True)
        self._git_at(top, "worktree", "prune")

    def remove_branch(self) -> None:
        """Remove the integration worktree and the integration branch, once the user's branch
        holds its work (after :meth:`finish` fast-forwarded it): nothing of the run is left
        in ``git branch``.

        Raises:
            QueueError: git failed.
        """
        self.remove_worktree()
        self._git_at(self.repo.top, "branch", "-D", self.branch)

    def to_json(self) -> dict[str, Any]:
        """The queue as ``queue.json`` holds it (the format is :data:`QUEUE_FILE`'s)."""
        s = self._state
        return {"version": QUEUE_VERSION, "run": self.run_id, "branch": self.branch,
                "base": self.base, "head": s.head, "check_commit": s.check_commit,
                "check": s.check.to_json() if s.check is not None else None,
                "results": [r.to_json() for r in s.results],
                "watched": None if s.watched is None else {
                    k: list(v) for k, v in s.watched.items()},
                "gate": s.gate}

    # -- private ------------------------------------------------------------------------

    def _git(self, *args: str, ok: tuple[int, ...] = (0,),
             config: tuple[str, ...] = ()) -> tuple[int, str, str]:
        """git in the integration worktree, pointed at its git folder as the repository
        records it (never as its ``.git`` file says: a gate's code could rewrite that file
        to make the next command run a filter of its own, outside any sandbox)."""
        return self._git_at(self.path, *at_worktree(self.path, self._gitdir), *args, ok=ok,
                            config=config)

    def _restore_gitfile(self) -> None:
        if self._gitdir is not None:
            restore_gitfile(self.path, self._gitdir)

    @staticmethod
    def _git_at(cwd: Path, *args: str, ok: tuple[int, ...] = (0,),
                config: tuple[str, ...] = ()) -> tuple[int, str, str]:
        try:
            return git(cwd, *args, ok=ok, config=config)
        except WorktreeError as exc:
            raise QueueError(str(exc)) from None

    def _commit(self, name: str, what: str) -> str:
        code, out, _ = self._git_at(self.repo.top, "rev-parse", "--verify", "-q",
                                    f"{name}^{{commit}}", ok=(0, 1, 128))
        if code != 0:
            raise QueueError(f"{what} names no commit in {self.repo.top}")
        return out.strip()

    def branch_commit(self, branch: str) -> str:
        """The commit ``branch`` names: a local branch (``ralph/US-001``, or
        ``refs/heads/...``) or a remote-tracking one (``origin/ralph/US-001``).

        Raises:
            QueueError: it is neither (the message names the run's branches there are).
        """
        return self._branch_commit(branch)

    def _branch_commit(self, branch: str) -> str:
        name = branch.removeprefix("refs/heads/")
        for ref in (f"refs/heads/{name}", f"refs/remotes/{name}"):  # origin/ralph/US-001 too
            code, out, _ = self._git_at(self.repo.top, "rev-parse", "--verify", "-q",
                                        f"{ref}^{{commit}}", ok=(0, 1, 128))
            if code == 0 and name:
                return out.strip()
        known = self._git_at(self.repo.top, "for-each-ref", "--format=%(refname:short)",
                             f"refs/heads/{BRANCH_PREFIX}/")[1].split()
        known = [b for b in known if b != self.branch]
        raise QueueError(f"{branch!r} is no branch of the repository at {self.repo.top}; "
                         "expected a lane's branch" + (f" (there are: {', '.join(known[:10])})"
                                                       if known else "")
                         + "; fetch it first (git fetch origin " + f"{name}:{name})")

    def _head(self) -> str:
        return self._git("rev-parse", "HEAD")[1].strip()

    def _clean(self) -> None:
        """Drop what a check left in the integration worktree (tracked changes, untracked
        files, ignored ones too: a file an earlier check made must not pass a later story),
        so that the next merge starts from the head itself."""
        self._restore_gitfile()
        self._git("reset", "-q", "--hard", self._state.head)
        self._git("clean", "-q", "-f", "-f", "-d", "-x")

    def _reset(self, commit: str) -> None:
        self._restore_gitfile()
        self._git("reset", "-q", "--hard", commit)
        self._git("clean", "-q", "-f", "-f", "-d", "-x")

    def _conflicts(self) -> list[str]:
        out = self._git("diff", "--name-only", "--diff-filter=U", "-z", ok=(0, 1))[1]
        return [p for p in out.split("\0") if p]

    def _baseline(self) -> CheckOutcome:
        """The check of the integration head before a merge (run once per head)."""
        return self.verify()

    def _record(self, result: MergeResult) -> MergeResult:
        self._state.results.append(result)
        self._save()
        return result

    def _save(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.file, json.dumps(self.to_json(), indent=1, ensure_ascii=False)
                          + "\n")

    def _open_worktree(self) -> None:
        """Make or reuse the integration branch and worktree; put both at the recorded head
        (a merge a crash left unfinished or unchecked is undone)."""
        top = self.repo.top
        ref = f"refs/heads/{self.branch}"
        if fails(top, "show-ref", "--verify", "-q", ref):
            if self._state.results and self._state.head != self.base:
                raise QueueError(f"the integration branch {self.branch} is gone but "
                                 f"{self.file} records merges onto it; move the file aside "
                                 "to start the queue again")
            self._git_at(top, "branch", "--no-track", self.branch, self._state.head)
        registered = [w for w in list_worktrees(top) if same_path(w["worktree"], self.path)]
        self._gitdir = worktree_gitdir(top, self.path) if registered else None
        ready = bool(registered) and "prunable" not in registered[0] and \
            registered[0].get("branch") == ref and self._gitdir is not None
        if not ready:
            self._gitdir = None
            if self.path.exists():
                self.path.rename(self.path.with_name(f"{INTEGRATION}.broken-{int(time.time())}"))
            self._git_at(top, "worktree", "prune")
            for w in list_worktrees(top):
                if w.get("branch") == ref:
                    self._git_at(top, "worktree", "remove", "--force", "--force", w["worktree"])
            ensure_ignored(self.repo.state_dir)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._git_at(top, "worktree", "add", str(self.path), self.branch)
            self._gitdir = worktree_gitdir(top, self.path)
            if self._gitdir is None:
                raise QueueError(f"git made the worktree {self.path} but records no git "
                                 f"folder for it in {top}")
        self._restore_gitfile()
        if self._git("rev-parse", "-q", "--verify", "MERGE_HEAD", ok=tuple(range(256)))[0] == 0:
            self._git("merge", "--abort", ok=(0, 128))
        self._reset(self._state.head)


def _read_state(file: Path, base: str, gate: dict[str, bool] | None = None) -> _State | None:
    """The queue's state as ``file`` (``queue.json``) holds it; ``None`` when there is none.
    ``gate``: the settings of this run's gate (``{"confined": bool, "strict": bool}``): a
    queue whose verdicts a weaker gate made (unconfined, or without ``--ralph-strict``, when
    this one is confined or strict; unknown counts as weaker) is not taken over.

    Raises:
        QueueError: it is unreadable, of another base commit, or of a weaker gate.
    """
    if not file.exists():
        return None
    aside = f"move it aside (mv {file} {file}.old) to start the queue again"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise QueueError(f"cannot read the merge queue {file}: {exc}; {aside}") from None
    try:
        if not isinstance(data, dict) or data.get("version") != QUEUE_VERSION:
            raise ValueError(f"expected an object with \"version\": {QUEUE_VERSION}")
        if data.get("base") != base:
            raise ValueError(f"it was made from base {data.get('base')!r}, not {base}")
        head = data.get("head")
        commit = data.get("check_commit")
        if not isinstance(head, str) or not (commit is None or isinstance(commit, str)):
            raise ValueError("expected \"head\" (a commit id) and \"check_commit\"")
        check = None if data.get("check") is None else CheckOutcome.from_json(data["check"])
        results = data.get("results")
        if not isinstance(results, list):
            raise ValueError("expected \"results\", a list")
        watched = data.get("watched")
        if watched is not None and not (isinstance(watched, dict) and all(
                isinstance(v, list) and all(isinstance(x, str) for x in v)
                for v in watched.values())):
            raise ValueError("expected \"watched\", subjects naming lists of strings")
        state = _State(head, check, commit, [MergeResult.from_json(r) for r in results],
                       None if watched is None else {
                           str(k): tuple(v) for k, v in watched.items()})
        made = data.get("gate")
        state.gate = made if isinstance(made, dict) else None
    except ValueError as exc:
        raise QueueError(f"the merge queue {file} is not one of this run: {exc}; "
                         f"{aside}") from None
    weaker = [what for key, what in (("confined", "confined by the sandbox"),
                                     ("strict", "with --ralph-strict"))
              if gate and gate.get(key) and (state.gate or {}).get(key) is not True]
    if weaker and (state.results or state.check is not None):
        raise QueueError(f"the merge queue {file} holds verdicts of a gate that did not run "
                         f"{' and '.join(weaker)}, as this one does: they are not taken over; "
                         f"{aside}")
    return state


def _state_paths(repo: Repo, names: Sequence[str]) -> list[str]:
    """The paths of ``names`` (relative to the repository's top, as git gives them) that lie
    in the state folder ``repo.state_dir``."""
    try:
        rel = repo.state_dir.resolve().relative_to(repo.top.resolve()).as_posix()
    except (ValueError, OSError):
        return []
    return [n for n in names if n == rel or n.startswith(rel.rstrip("/") + "/")]


def _refused_result(story_id: str, branch: str, lane_commit: str, at: str,
                    outcome: CheckOutcome, regressed: Sequence[str]) -> MergeResult:
    """The result of a merge at ``at`` that the check ``outcome`` refused: ``regressed`` (the
    criteria ``regressed`` passed before it) or ``story-failed`` (the story's own criteria)."""
    if regressed:
        lines = [f"{k}: passed before this merge, fails after it" for k in regressed]
        failed = tuple(f for f in outcome.failures if f.split(": ", 1)[0] in set(regressed))
        return MergeResult(
            story_id, branch, "regressed", lane_commit, at, at,
            f"{outcome.summary}; {len(regressed)} regressed", regressed=tuple(regressed),
            failures=(*lines, *failed, *outcome.story_failures(story_id)), at=time.time())
    own = outcome.story_failures(story_id) or [
        f"{story_id}: no criterion of this story was checked on the integration branch"]
    return MergeResult(story_id, branch, "story-failed", lane_commit, at, at, outcome.summary,
                       failures=tuple(own), at=time.time())


def _conflict_result(story_id: str, branch: str, lane_commit: str, at: str,
                     paths: Sequence[str]) -> MergeResult:
    """The ``conflict`` result of a merge at ``at`` that git refused on ``paths``."""
    return MergeResult(
        story_id, branch, "conflict", lane_commit, at, at,
        f"conflict in {len(paths)} file{'s' if len(paths) != 1 else ''}"
        if paths else "git could not merge it", conflicts=tuple(paths),
        failures=tuple(f"merge conflict with the integration branch in {p}"
                       for p in paths) or ("git merge failed",), at=time.time())

def _judges_result(story_id: str, branch: str, lane_commit: str, at: str,
                   changed: Sequence[str]) -> MergeResult:
    """The ``story-failed`` result of a merge that changes what judges the criteria."""
    return MergeResult(
        story_id, branch, "story-failed", lane_commit, at, at,
        "it changes what judges the criteria", failures=tuple(
            f"{story_id}: the merge changes what judges the criteria: {line}; a lane "
            "may change the code, not the PRD's criteria, the tests they name, "
            "conftest.py or the pytest configuration" for line in changed),
        at=time.time())
