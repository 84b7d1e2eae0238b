"""The controller of ``pytest --ralph --ralph-parallel N``: up to N stories at once, each in
its lane, merged through the criteria-gated merge queue.

Each lane (:mod:`pytest_ralph.parallel.worktrees`) is worked by a child process ``python -m
pytest --ralph --ralph-story ID`` started in the lane's worktree, in a process group of its
own, with a state folder of its own outside the worktree
(``<state>/parallel/<run>/<key>.<attempt>.state``, its console output beside it in
``<key>.<attempt>.log``; both kept when the lanes' worktrees are gone): the same loop
engine, its own iteration count, streak, agent log and run history, which the controller
copies into the user's ``<state>/ralph.db`` (:mod:`pytest_ralph.parallel.runhistory`). The
controller (:class:`Scheduler`):

0. takes the state folder's lock, the one a single ``pytest --ralph`` loop takes: a second
   controller of the same folder, or a loop, is refused (exit 4) before it touches the run;
1. refuses what a parallel run cannot work on (:class:`ParallelUsageError`, exit 4): not a
   git repository, uncommitted changes, a dependency cycle or unknown id in ``dependsOn``;
2. takes the stories :func:`pytest_ralph.parallel.plan.ready` says may start, in priority
   order, up to N at a time, and starts their lanes;
3. when a lane exits 0 (its story's criteria pass in its worktree), commits what the agent
   left uncommitted on the lane's branch and hands the branch to the merge queue; a result
   other than ``merged`` starts the story again in a new lane at the integration branch's
   head, the queue's words and the diff of the attempt before in its prompt (the lane's
   ``progress.txt``), up to :data:`MERGE_ATTEMPTS` merges; then the story is blocked and its
   last branch kept. A lane that exits otherwise blocks its story. Stories whose
   dependencies are merged start next; those that depend on a blocked story are held back;
4. at the end lets the queue fast-forward the user's branch (``finish``), removes every
   lane but the blocked stories' branches, and writes the report (``parallel-report.md``
   and ``parallel-report.html``, :mod:`pytest_ralph.parallel.report`).

What it shares between the lanes: one wall-clock budget and one cost limit for the run (each
lane starts with what is left), and a rate-limit pause: a lane whose agent is rate limited
writes the pause file named by :data:`pytest_ralph.util.env.PAUSE_FILE_ENV`, which every lane
of the run honours before its next agent run. Ctrl-C, SIGTERM and ``pytest --ralph-cancel``
(:func:`cancel_parallel`) stop every lane's process group; the lanes' runs stay resumable.

The run is recorded in ``<state>/parallel.json`` (run id, base commit, each story's phase,
attempts, lane and process group, the lane timeline and the queue's history), rewritten
after every change: after a kill -9 of the controller, the same command finds the run,
stops the lanes' orphaned process groups (SIGTERM: each lane records its run as
interrupted), rebuilds their worktrees (:func:`pytest_ralph.parallel.worktrees.repair`) and
starts each lane's ``pytest --ralph`` again on its own state folder, which resumes its run:
no iteration is lost or done twice.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol, TextIO

from ..prd.model import PRD, Story
from ..util.env import CHILD_ENV, PAUSE_FILE_ENV
from ..util.process import sigterm_raises
from . import plan
from .lanerecord import (
    RECORD,
    LaneView,
    Record,
    clock,
    group_alive,
    history_cost,
    lane_phase,
    run_folder,
    stop_group,
)
from .names import BRANCH_PREFIX, INTEGRATION, lane_key
from .report import write_reports
from .runhistory import RunHistory
from .worktrees import (
    Lane,
    ParallelUsageError,
    Repo,
    WorktreeError,
    cleanup,
    commit_all,
    create_lane,
    find_lanes,
    preflight,
    remove_lane,
    repair,
)

__all__ = ["MERGE_ATTEMPTS", "Options", "Scheduler"]

#: Merges a story may try before it is blocked.
MERGE_ATTEMPTS = 2

#: Seconds between two looks at the lanes.
POLL_SECONDS = 0.2

#: Exit codes (those of :mod:`pytest_ralph.loop.records`).
EXIT_COMPLETE, EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_USAGE = 0, 1, 2, 4

#: Characters of a failed attempt's diff kept in the next attempt's prompt.
DIFF_CHARS = 6000



class MergeOutcome(Protocol):
    """What the merge queue says of one merge (``outcome``: ``merged``, ``conflict``,
    ``story-failed`` or ``regressed``)."""

    outcome: str


class Queue(Protocol):
    """The merge queue (:class:`pytest_ralph.parallel.queue.MergeQueue`)."""

    def merge(self, story_id: str, branch: str) -> Any: ...

    def merge_batch(self, items: list[tuple[str, str]]) -> list[Any]: ...

    def verify(self) -> Any: ...

    @property
    def last_check(self) -> Any: ...

    def finish(self, user_branch: str, start_commit: str) -> Any: ...

    def remove_branch(self) -> None: ...


#: Makes the queue of a run: ``(repo, run id, base commit) -> queue``.
QueueFactory = Callable[[Repo, str, str], Queue]


class Interrupted(Exception):
    """SIGTERM reached the controller (Ctrl-C is :class:`KeyboardInterrupt`); the message is
    ``"signal 15"`` (:func:`pytest_ralph.util.process.sigterm_raises`) or the reason."""


def interruption(exc: BaseException) -> str:
    """What stopped the run, for the line the controller prints: ``"interrupted by Ctrl-C"``
    for a :class:`KeyboardInterrupt`, ``"stopped by SIGTERM (signal 15)"`` for the
    :class:`Interrupted` of a signal, ``"stopped: <message>"`` for another :class:`Interrupted`
    (``"stopped"`` when it says nothing)."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by Ctrl-C"
    text = str(exc).strip()
    number = text.removeprefix("signal ")
    if number != text and number.isdigit():
        try:
            return f"stopped by {signal.Signals(int(number)).name} ({text})"
        except ValueError:
            return f"stopped by {text}"
    return f"stopped: {text}" if text else "stopped"


@dataclass
class Options:
    """What a parallel run needs of the command line.

    Attributes:
        rootdir: the project folder.
        state_dir: the user's state folder (absolute).
        prd_path: the PRD file (absolute, inside ``rootdir``).
        parallel: how many lanes run at once (>= 1).
        lane_args: the options every lane's ``pytest --ralph`` gets (the agent, the limits,
            ``-p``/``-o``), never ``--ralph-story``, ``--ralph-dir``, ``--ralph-budget``,
            ``--ralph-max-cost`` or ``--ralph-parallel``, which the controller sets.
        budget: wall-clock seconds for the whole run, or ``None``.
        max_cost: US dollars for the whole run, or ``None``.
        agent: the agent setting (names the shared pause file).
        python: the interpreter of the lanes.
        inifile: the project's configuration file (its copy in each worktree is used).
        max_bytes: the PRD size limit.
        tty: whether ``out`` is a terminal (one redrawn status line per lane).
        gate: what the merge queue's gate could write, one sentence
            (:func:`pytest_ralph.parallel.gate.describe_gate`), said when the run starts and
            in the report; ``""``: nothing said.
    """

    rootdir: Path
    state_dir: Path
    prd_path: Path
    parallel: int
    lane_args: tuple[str, ...] = ()
    budget: float | None = None
    max_cost: float | None = None
    agent: str = ""
    python: str = sys.executable
    inifile: Path | None = None
    max_bytes: int = 10 * 1024 * 1024
    tty: bool = False
    gate: str = ""


@dataclass
class Running:
    """A lane whose ``pytest --ralph`` runs: the lane, its process, its log and state."""

    story: str
    lane: Lane
    proc: subprocess.Popen[bytes] | None
    pgid: int
    log: Path
    state: Path
    started: float
    log_file: IO[bytes] | None = None


def _new_run_id() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)



def cost_spent(record: Record | None) -> float:
    """US dollars the agent runs of ``record``'s lanes have cost so far (their histories
    say); 0 without a record."""
    if record is None:
        return 0.0
    return sum(history_cost(Path(state)) for st in record.stories.values()
               for state in st.get("states", []))


class Scheduler:
    """One parallel run (see the module's docstring).

    Args:
        options: the run's options.
        queue_factory: makes the merge queue of the run.
        out: where the event and status lines go.
    """

    def __init__(self, options: Options, queue_factory: QueueFactory,
                 out: TextIO = sys.stdout) -> None:
        self.o = options
        self.queue_factory = queue_factory
        self.view = LaneView(out, options.tty)
        self.running: dict[str, Running] = {}
        self.record: Record | None = None
        self.repo: Repo | None = None
        self.prd: PRD | None = None
        self._stopping = False
        self.queue: Queue | None = None
        self._base_checked = False
        self.history: RunHistory | None = None

    # -- set-up ------------------------------------------------------------------------

    @property
    def record_path(self) -> Path:
        """``<state>/parallel.json``."""
        return self.o.state_dir / RECORD

    def prepare(self) -> tuple[Repo, PRD]:
        """Preflight and the plan's checks.

        Raises:
            ParallelUsageError: not a git repository, uncommitted changes, a PRD that cannot
                be loaded, a dependency cycle or an unknown id in ``dependsOn``.
        """
        from ..prd.errors import PRDError
        from ..prd.load import load_prd

        repo = preflight(self.o.rootdir, self.o.state_dir)
        try:
            prd = load_prd(self.o.prd_path, max_bytes=self.o.max_bytes)
            plan.check(prd)
        except PRDError as exc:
            raise ParallelUsageError(str(exc)) from None
        if not prd.stories:
            raise ParallelUsageError(f"{self.o.prd_path} has no stories to run in parallel")
        for st in prd.stories:
            if lane_key(st.id) == INTEGRATION:
                raise ParallelUsageError(
                    f"{self.o.prd_path}: story {st.id!r}: a parallel run names its merge queue's "
                    f"branch ralph/<run>/{INTEGRATION}, so no story's lane can have that name: "
                    "rename the story (its id)")
        return repo, prd

    def _open(self, repo: Repo, prd: PRD) -> Record:
        """The record of the run: the unfinished one of the same PRD (resumed), else new."""
        old = Record.load(self.record_path)
        if old is not None and old.ended is None and old.prd == str(self.o.prd_path):
            self.view.say(f"pytest-ralph: resuming parallel run {old.run_id} "
                          f"({sum(1 for s in old.stories.values() if s['phase'] == 'merged')}"
                          f"/{len(old.stories)} stories merged)")
            for sid, st in old.stories.items():
                pgid = st.get("pgid")
                if st["phase"] == "running" and isinstance(pgid, int) and group_alive(pgid):
                    self.view.say(f"pytest-ralph: lane {sid}: stopping its orphaned process "
                                  f"group {pgid} (its run stays resumable)")
                    stop_group(pgid, None)
            old.controller = os.getpid()
            return old
        rec = Record(run_id=_new_run_id(), base=repo.head, branch=repo.branch,
                     prd=str(self.o.prd_path), started=time.time(), controller=os.getpid())
        for story in prd.ordered_stories():
            rec.stories[story.id] = {"phase": "waiting", "attempt": 0, "merges": 0,
                                  "iterations": 0, "branch": None, "why": ""}
        return rec

    def _save(self) -> None:
        assert self.record is not None
        self.record.save(self.record_path)

    # -- the run -----------------------------------------------------------------------

    def run(self) -> int:
        """Run every story to merged or blocked; return the exit code (0 only when every
        story is merged and verified; 2 after Ctrl-C, SIGTERM or a cancel; 4 for a usage
        error, printed)."""
        held = RunHistory(self.o.state_dir, self.view.say)
        with contextlib.ExitStack() as stack:
            try:  # one controller or loop at a time on the state folder (see runhistory),
                # asked first: a loop that runs is why the tree may have changes
                stack.enter_context(held.hold(f"the controller of a parallel run "
                                              f"(--ralph-parallel {self.o.parallel})"))
                repo, prd = self.prepare()
            except ParallelUsageError as exc:
                self.view.say(f"pytest-ralph: {exc}")
                return EXIT_USAGE
            self.repo, self.prd = repo, prd
            self.history = held
            try:
                return self._run(repo, prd)
            finally:
                self.history = None

    def _run(self, repo: Repo, prd: PRD) -> int:
        """The run, with the state folder's lock held and the run history open."""
        rec = self.record = self._open(repo, prd)
        self._save()
        assert self.history is not None
        self.history.start(rec)
        queue = self.queue = self.queue_factory(repo, rec.run_id, rec.base)
        self.view.say(f"pytest-ralph: parallel run {rec.run_id}: "
                      f"{len(prd.stories)} stories, up to {self.o.parallel} lanes at once, "
                      f"from {rec.branch or 'a detached HEAD'} at {rec.base[:12]}; state "
                      f"{self.o.state_dir}")
        if self.o.gate:
            self.view.say(f"pytest-ralph: merge queue: {self.o.gate}")
        self._cancel_file().unlink(missing_ok=True)
        try:
            with sigterm_raises(Interrupted):
                self._resume_lanes(repo)
                self._loop(repo, prd, queue)
        except (KeyboardInterrupt, Interrupted) as exc:
            self._stop_all()
            cancelled = self._cancel_file().exists()
            self.view.end()
            why = "cancelled by --ralph-cancel" if cancelled else interruption(exc)
            self.view.say(f"pytest-ralph: {why}: every lane's processes were stopped; their "
                          "runs and worktrees are kept; the same command resumes the run")
            self._save()
            assert self.history is not None
            self.history.end(rec, "interrupted")
            return EXIT_INTERRUPTED
        self.view.end()
        return self._finish(repo, prd, queue)

    def _loop(self, repo: Repo, prd: PRD, queue: Queue) -> None:
        rec = self.record
        assert rec is not None
        while True:
            if self._cancel_file().exists():
                raise Interrupted("--ralph-cancel")
            ready: list[tuple[str, Lane]] = []
            for sid, lane_run in list(self.running.items()):
                proc = lane_run.proc
                if proc is not None and proc.poll() is not None:
                    lane = self._lane_done(sid, lane_run, proc.returncode)
                    if lane is not None:
                        ready.append((sid, lane))
            if ready:
                self._merge(ready, queue)
            self._start_ready(repo, prd)
            if not self.running:
                break
            self._check_base_early(queue)
            self.view.draw(self._status())
            time.sleep(POLL_SECONDS)

    def _ids(self, *phases: str) -> set[str]:
        assert self.record is not None
        return {sid for sid, st in self.record.stories.items() if st["phase"] in phases}

    def _start_ready(self, repo: Repo, prd: PRD) -> None:
        rec = self.record
        assert rec is not None
        if len(self.running) >= self.o.parallel:
            return
        left = self._budget_left()
        ready = plan.ready(prd, merged=self._ids("merged"), running=set(self.running),
                           blocked=self._ids("blocked"))
        for story in ready:
            if len(self.running) >= self.o.parallel:
                break
            if left is not None and left <= 0:
                self._block(story.id, "the run's budget (--ralph-budget) is spent")
                continue
            self._start(story, repo)

    def _budget_left(self) -> float | None:
        assert self.record is not None
        if self.o.budget is None:
            return None
        return self.o.budget - (time.time() - self.record.started)

    def _start(self, story: Story, repo: Repo, resume: bool = False) -> None:
        """Start (or with ``resume``, start again) the lane of ``story``."""
        rec = self.record
        assert rec is not None
        st = rec.stories[story.id]
        lane: Lane | None = None
        if resume:
            lane = next((x for x in find_lanes(repo, rec.run_id) if x.story_id == story.id),
                        None)
            if lane is not None:
                how = repair(lane)
                self.view.say(f"pytest-ralph: lane {story.id}: worktree {how}; its run "
                              "resumes")
        if lane is None:
            st["attempt"] = st["attempt"] + 1 if not resume or st["attempt"] == 0 else \
                st["attempt"]
            base = st.get("next_base") or rec.base
            lane = create_lane(repo, rec.run_id, story.id, base)
        state = run_folder(self.o.state_dir, rec.run_id) / f"{lane.key}.{st['attempt']}.state"
        state.mkdir(parents=True, exist_ok=True)
        if st.get("prompt_extra") and not (state / "progress.txt").exists():
            (state / "progress.txt").write_text(st["prompt_extra"], encoding="utf-8")
        log = state.with_name(state.name[: -len(".state")] + ".log")
        argv = self._lane_argv(story.id, lane, state)
        env = {k: v for k, v in os.environ.items()
               if k not in (CHILD_ENV, "PYTEST_RALPH_PARALLEL", "PYTEST_RALPH_STORY",
                            "PYTEST_RALPH_DIR", "PYTEST_RALPH_PRD")}
        env[PAUSE_FILE_ENV] = str(self._pause_file())
        env["PYTEST_RALPH_DIR"] = str(state)
        log_file = open(log, "ab")  # noqa: SIM115 - closed when the lane ends
        proc = subprocess.Popen(argv, cwd=lane.project, env=env, stdin=subprocess.DEVNULL,
                                stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True)
        now = time.time()
        self.running[story.id] = Running(story.id, lane, proc, proc.pid, log, state, now,
                                         log_file)
        st.update(phase="running", branch=lane.branch, pgid=proc.pid, log=str(log),
                  state=str(state))
        st.setdefault("states", [])
        if str(state) not in st["states"]:
            st["states"].append(str(state))
        rec.timeline.append({"story": story.id, "attempt": st["attempt"],
                             "event": "resumed" if resume else "started",
                             "at": now - rec.started})
        self._save()
        self.view.say(f"pytest-ralph: lane {story.id}: {'resumed' if resume else 'started'}"
                      f" (attempt {st['attempt']}) on {lane.branch}; log {log}")

    def _lane_argv(self, story_id: str, lane: Lane, state: Path) -> list[str]:
        rel = self.o.prd_path.relative_to(lane.repo.project)
        argv = [self.o.python, *(["-P"] if sys.version_info >= (3, 11) else []), "-m",
                "pytest", "--ralph", "--ralph-story", story_id, "--ralph-parallel", "1",
                "--ralph-prd", str(lane.project / rel),
                "--rootdir", str(lane.project), *self._inifile(lane), *self.o.lane_args]
        left = self._budget_left()
        if left is not None:
            argv += ["--ralph-budget", f"{max(left, 1.0):.0f}"]
        if self.o.max_cost is not None:
            left_cost = max(self.o.max_cost - cost_spent(self.record), 0.0001)
            argv += ["--ralph-max-cost", f"{left_cost:.4f}"]
        return argv

    def _inifile(self, lane: Lane) -> list[str]:
        """``-c <the configuration file in the worktree>`` when the project has one there
        (pytest would otherwise find the project's own, around the worktree)."""
        ini = self.o.inifile
        if ini is None:
            return []
        try:
            inside = lane.path / ini.resolve().relative_to(lane.repo.top)
        except ValueError:
            return ["-c", str(ini)]
        return ["-c", str(inside)] if inside.exists() else []

    def _resume_lanes(self, repo: Repo) -> None:
        """After a crash: start again the lanes the record says were running."""
        rec, prd = self.record, self.prd
        assert rec is not None and prd is not None
        for sid, st in rec.stories.items():
            if st["phase"] in ("running", "merging"):
                story = prd.story(sid)
                if story is None:
                    continue
                self._start(story, repo, resume=True)

    def _check_base_early(self, queue: Queue) -> None:
        """Check the integration head before the first merge needs it, while every running
        lane's agent works (the machine is then idle but for the agents): the first merge
        then waits for its own check only. Once per run; not after a resume that has it."""
        if self._base_checked:
            return
        phases = [lane_phase(r.log)[0] for r in self.running.values()]
        if phases and all(p.startswith("iteration") and p.endswith("agent") for p in phases):
            self._base_checked = True
            if queue.last_check is None:
                self.view.say("pytest-ralph: queue: checking the integration branch's start "
                              "while the agents work (each merge is checked against it)")
                queue.verify()

    def _lane_done(self, sid: str, lane_run: Running, code: int) -> Lane | None:
        """Record the end of ``sid``'s lane; return the lane when its story's criteria pass
        in its worktree and its work is committed (it goes to the merge queue), else block
        the story and return ``None``."""
        rec = self.record
        assert rec is not None
        del self.running[sid]
        if lane_run.log_file is not None:
            lane_run.log_file.close()
        st = rec.stories[sid]
        if self.history is not None:
            self.history.copy(rec, sid, lane_run.state)
        _, n = lane_phase(lane_run.log)
        st["iterations"] = st.get("iterations", 0) + n
        took = time.time() - lane_run.started
        rec.timeline.append({"story": sid, "attempt": st["attempt"], "event": f"exit {code}",
                             "at": time.time() - rec.started, "iterations": n})
        if code != 0:
            self._block(sid, f"its lane's `pytest --ralph` exited {code} after "
                             f"{n} iteration(s) (see {lane_run.log})")
            with contextlib.suppress(WorktreeError):
                remove_lane(lane_run.lane, keep_branch=True)
            return None
        self.view.say(f"pytest-ralph: lane {sid}: criteria pass in its worktree after "
                      f"{n} iteration(s) in {clock(took)}; to the merge queue")
        st["phase"] = "merging"
        self._save()
        lane = lane_run.lane
        try:
            commit_all(lane, f"ralph: story {sid} (run {rec.run_id}, attempt {st['attempt']})")
        except WorktreeError as exc:
            self._block(sid, f"its work could not be committed: {exc}")
            return None
        return lane

    def _merge(self, ready: list[tuple[str, Lane]], queue: Queue) -> None:
        """Hand the lanes whose criteria pass to the queue, in priority order, together as
        one batch when there are several (:meth:`pytest_ralph.parallel.queue.MergeQueue.
        merge_batch`: one check for all when they all pass)."""
        order = {sid: n for n, sid in enumerate(self.record.stories)} if self.record else {}
        ready.sort(key=lambda item: order.get(item[0], len(order)))
        if len(ready) > 1:
            self.view.say(f"pytest-ralph: queue: {', '.join(sid for sid, _ in ready)} are "
                          "ready together: merged one after another, checked once")
        results = queue.merge_batch([(sid, lane.branch) for sid, lane in ready])
        for (sid, lane), result in zip(ready, results, strict=True):
            self._merged(sid, lane, result, queue)

    def _merged(self, sid: str, lane: Lane, result: Any, queue: Queue) -> None:
        """What the queue said of ``sid``'s merge: merged (its lane removed), or back to a
        new lane with the queue's words in its prompt, or blocked after
        :data:`MERGE_ATTEMPTS`."""
        rec = self.record
        assert rec is not None
        st = rec.stories[sid]
        outcome = str(getattr(result, "outcome", result))
        text = _result_text(result)
        st["merges"] = st.get("merges", 0) + 1
        rec.queue.append({"story": sid, "attempt": st["attempt"], "outcome": outcome,
                          "text": text[:2000], "at": time.time() - rec.started})
        if outcome == "merged":
            st["phase"] = "merged"
            self.view.say(f"pytest-ralph: queue: {sid} merged and verified"
                          + (f" ({text.splitlines()[0]})" if text else ""))
            remove_lane(lane)
            self._save()
            return
        self.view.say(f"pytest-ralph: queue: {sid} {outcome}"
                      + (f": {text.splitlines()[0]}" if text else ""))
        if st["merges"] >= MERGE_ATTEMPTS:
            self._block(sid, f"the merge queue said {outcome} {st['merges']} times: {text}")
            remove_lane(lane, keep_branch=True)
            return
        diff = _diff(lane)
        st["prompt_extra"] = _retry_text(sid, outcome, _details(result, text), diff)
        st["next_base"] = str(getattr(queue, "head", "") or _integration_head(queue)
                              or rec.base)
        remove_lane(lane)
        st["phase"] = "waiting"
        rec.timeline.append({"story": sid, "attempt": st["attempt"], "event": "retry",
                             "at": time.time() - rec.started})
        self._save()

    def _block(self, sid: str, why: str) -> None:
        assert self.record is not None
        st = self.record.stories[sid]
        st.update(phase="blocked", why=why)
        self.record.timeline.append({"story": sid, "attempt": st["attempt"],
                                     "event": "blocked", "at": time.time() -
                                     self.record.started})
        self._save()
        self.view.say(f"pytest-ralph: story {sid} blocked: {why}")
        block = getattr(self.queue, "block", None)
        if callable(block) and st.get("branch"):
            with contextlib.suppress(Exception):  # the queue's history only
                block(sid, st["branch"], why)

    def _status(self) -> list[str]:
        now = time.time()
        lines = []
        for sid, r in self.running.items():
            phase, _ = lane_phase(r.log)
            lines.append(f"  lane {sid:<12} {phase:<14} {clock(now - r.started):>8}  "
                         f"{r.lane.branch}")
        return lines

    def _stop_all(self) -> None:
        self._stopping = True
        for r in list(self.running.values()):
            stop_group(r.pgid, r.proc)
            if r.log_file is not None:
                r.log_file.close()

    def _cancel_file(self) -> Path:
        assert self.record is not None
        return run_folder(self.o.state_dir, self.record.run_id) / "cancel"

    def _pause_file(self) -> Path:
        assert self.record is not None
        return (run_folder(self.o.state_dir, self.record.run_id) /
                f"pause-{lane_key(self.o.agent or 'agent')[:40]}.json")

    # -- the end -----------------------------------------------------------------------

    def _finish(self, repo: Repo, prd: PRD, queue: Queue) -> int:
        rec = self.record
        assert rec is not None
        blocked = self._ids("blocked")
        held = plan.stuck(prd, blocked)
        for sid, cause in held.items():
            rec.stories[sid].update(phase="held back", why=f"waits on blocked story {cause}")
        merged = self._ids("merged")
        all_merged = len(merged) == len(rec.stories)
        forwarded = False
        if rec.branch is None:
            fin_text = ("the run started on a detached HEAD: merge the integration branch "
                        f"by hand (git merge --no-ff {integration_of(rec.run_id)})")
        else:
            try:
                finish = queue.finish(rec.branch, rec.base)
            except Exception as exc:  # the queue's own error: say it, keep the branches
                fin_text = f"the merge queue could not finish: {exc}"
            else:
                fin_text = _result_text(finish)
                forwarded = getattr(finish, "outcome", "") == "fast-forwarded"
        keep = set(blocked)
        if merged and not forwarded:
            keep.add(INTEGRATION)  # what the user merges by hand
        kept = cleanup(repo, rec.run_id, keep=frozenset(keep))
        if forwarded:  # the user's branch holds the integration branch's work now
            try:
                queue.remove_branch()
            except Exception as exc:  # the queue's own error: say it, the branch stays
                fin_text += f" (the integration branch could not be removed: {exc})"
        rec.ended = time.time()
        ok = all_merged and forwarded
        rec.result = "complete" if ok else "incomplete"
        self._save()
        if self.history is not None:
            self.history.end(rec, rec.result)
        report, page_path = write_reports(rec, self.o.state_dir, lanes=self.o.parallel,
                                          gate=self.o.gate, fin_text=fin_text, kept=kept)
        self.view.say(f"pytest-ralph: parallel run {rec.run_id}: {len(merged)}/"
                      f"{len(rec.stories)} stories merged and verified"
                      + (f", {len(blocked)} blocked" if blocked else "")
                      + (f", {len(held)} held back" if held else ""))
        for sid in sorted(blocked):
            self.view.say(f"pytest-ralph:   blocked {sid}: {rec.stories[sid]['why']}")
        for sid, cause in held.items():
            self.view.say(f"pytest-ralph:   held back {sid}: waits on blocked story {cause}")
        if fin_text:
            self.view.say(f"pytest-ralph: {fin_text}")
        if kept:
            self.view.say(f"pytest-ralph: branches kept: {', '.join(kept)}")
        self.view.say(f"pytest-ralph: report {report} (and {page_path.name} beside it)")
        self.view.say(f"pytest-ralph: {'complete (exit 0)' if ok else 'incomplete (exit 1)'}")
        return EXIT_COMPLETE if ok else EXIT_INCOMPLETE


def integration_of(run_id: str) -> str:
    """The integration branch of run ``run_id``: ``ralph/<run key>/integration``."""
    return f"{BRANCH_PREFIX}/{lane_key(run_id)}/{INTEGRATION}"


def _result_text(result: Any) -> str:
    """The words of a queue result: its ``line()``, else its ``summary``, ``message`` or
    ``text``, else ``str``."""
    line = getattr(result, "line", None)
    if callable(line):
        value = line()
        if isinstance(value, str) and value:
            return value
    for name in ("summary", "message", "text"):
        value = getattr(result, name, None)
        if isinstance(value, str) and value:
            return value
    return "" if result is None or isinstance(result, str) else str(result)


def _details(result: Any, text: str) -> str:
    """``text`` and the lines a queue result names: the conflicting paths, the criteria that
    regressed, the failures."""
    out = [text]
    for name, head in (("conflicts", "Conflicting paths (both this story and one merged "
                                     "before it changed them):"),
                       ("regressed", "Criteria that passed before the merge and fail after:"),
                       ("failures", "Failures on the integration branch:")):
        items = getattr(result, name, ())
        if isinstance(items, (tuple, list)) and items:
            out += ["", head, *(f"- {item}" for item in items)]
    return "\n".join(out)


def _integration_head(queue: Queue) -> str:
    for name in ("integration_head", "tip"):
        value = getattr(queue, name, None)
        if callable(value):
            value = value()
        if isinstance(value, str) and value:
            return value
    return ""


def _diff(lane: Lane) -> str:
    """The diff of the lane's branch since its base (what an attempt did), cut to
    :data:`DIFF_CHARS`."""
    if lane.base is None:
        return ""
    done = subprocess.run(["git", "-C", str(lane.repo.top), "diff", f"{lane.base}",
                           f"refs/heads/{lane.branch}"], capture_output=True, check=False,
                          timeout=60)
    text = done.stdout.decode("utf-8", "replace")
    return text if len(text) <= DIFF_CHARS else text[:DIFF_CHARS] + "\n... (cut)\n"


def _retry_text(sid: str, outcome: str, text: str, diff: str) -> str:
    """What a new attempt's prompt gets (its lane's ``progress.txt``): why the merge was
    undone and the diff of the attempt before."""
    out = [f"Story {sid}: your previous attempt's criteria passed in its own worktree, but "
           f"the merge queue undid its merge onto the integration branch ({outcome}). This "
           "attempt starts from the integration branch as it is now (the other stories' work "
           "merged); redo the story on top of it.", "", "What the merge queue said:", text]
    if diff:
        out += ["", "The diff of the previous attempt (against its own base):", "```diff",
                diff, "```"]
    return "\n".join(out) + "\n"


