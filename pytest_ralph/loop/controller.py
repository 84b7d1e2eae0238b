"""The loop controller behind ``pytest --ralph``.

One run: a baseline check of every criterion; if all pass, done with zero
iterations. Otherwise each iteration builds the prompt, runs the agent once, and
checks every criterion in a fresh child pytest. Stop conditions are evaluated after
each iteration, in this order: complete (exit 0) > agent-error streak (7) >
identical-failure breaker (6) > iteration limit (1). Ctrl-C or SIGTERM ends the run
with exit 2 after the agent's process group is killed and the report is written.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import IO, TextIO

from ..agents.presets import reader_for, resolve_agent
from ..agents.run import (
    AgentCommandError,
    AgentRun,
    render_argv,
    resolve_executable,
    run_agent,
)
from ..checks.fingerprint import fingerprint, normalize_failure
from ..checks.kinds import VERIFIER_KIND
from ..checks.phase import (
    CheckPhaseConfig,
    run_check_phase,
    workers_problem,
)
from ..checks.results import CheckResults, CriterionResult
from ..checks.verdicts import apply, story_notes, story_verdicts
from ..oracle.bytecode import TrustedBytecode
from ..oracle.importguard import guarded
from ..oracle.snapshot import (
    Change,
    Snapshot,
    compare,
    snapshot,
    snapshot_from_json,
    snapshot_to_json,
    with_imports,
)
from ..prd.load import PRD_FILE_NAMES, PRD_SEARCH_DIRS, PRDError, discover_prd, load_prd
from ..prd.model import PRD, Story, fold_text, slugify
from ..prd.writeback import write_back
from ..sandbox.bwrap import (
    Confinement,
    Sandbox,
    SandboxError,
    agent_confinement,
    cli_state_paths,
    prepare_state_paths,
    probe,
)
from ..state.folder import LockedError, RunDir, StateDir, StateError
from ..state.history import DB_NAME, History, HistoryError, StoredIteration, StoredRun
from ..state.verified import (
    changes_stat,
    keep_copies,
    pointer_path,
    read_pointer,
    weakening,
    write_pointer,
)
from ..util.files import read_text
from ..util.process import become_subreaper, descendant_pids, sweep_descendants
from ..util.redact import Redactor
from ..util.text import now as _now
from ..util.text import plural
from .escalation import (
    ESCALATE_MIN_SECONDS,
    ESCALATE_TIMEOUT,
    Step,
    blocked,
    run_escalate,
    state_dump,
    story_states,
)
from .gitdiff import config_digest, diff_stat, tree_snapshot
from .hooks import HookError, LoopHooks, StopContext
from .prompt import (
    NO_CHANGE,
    PROGRESS_CHARS,
    PromptContext,
    pick_story,
    read_template,
    same_failure_counts,
    template_path,
)
from .records import (
    EXIT_AGENT_ERROR,
    EXIT_COMPLETE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_LIMIT,
    EXIT_NO_CRITERIA,
    EXIT_USAGE,
    Cancelled,
    Interrupted,
    IterationRecord,
    LoopUsageError,
    NoCriteria,
    RunRecord,
    Turn,
)
from .report import dialect_line, no_stories_message, shown_path, story_report, why, write_report
from .settings import Settings, from_person, to_json

#: Largest ``run.json`` of another run read when looking for lost runs, in bytes.
RUN_JSON_MAX_BYTES = 64 * 1024 * 1024


@dataclass
class _Cursor:
    """The breaker's running counters between iterations: the identical-failure ``streak``,
    the agent-error streak, the fingerprint the next check is compared with, and the story
    the last agent run worked on."""

    streak: int = 0
    error_streak: int = 0
    last_fp: str | None = None
    last_story: str = ""


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Loop:
    """Drives one run of the Ralph loop.

    Args:
        settings: the effective settings.
        rootdir: the project root; the agent and the checks run there.
        inifile: the configuration file to pass to each child pytest, or ``None``.
        out: where the progress blocks are printed.
        python: the interpreter for the child pytest of each check phase.
        keyword: a ``-k`` expression that selects criteria ("" for all).
        markexpr: a ``-m`` expression that selects criteria ("" for all).
        junitxml: where each check phase writes JUnit XML (the last one stays), or ``None``.
        deselect: node id prefixes deselected with ``--deselect``.
        new_run: start a new run even when the last one can be resumed (``--ralph-new``).
        pythonpath: the folders of ini ``pythonpath`` (absolute), for the oracle guard.
        child_args: plugin and ini-override options of the command line (``-p NAME``,
            ``-o KEY=VALUE``) that each check phase's child pytest gets too.
        hooks: the extension points (:class:`pytest_ralph.loop.hooks.LoopHooks`; the pytest
            layer passes one that asks the ``pytest_ralph_*`` hooks); built-in behaviour when
            ``None``.
        sandbox: the sandbox agent runs and check phases use (:func:`pytest_ralph.sandbox.bwrap.
            probe`); ``None``: probed from the settings on first use.
        banner: lines printed right after the first line (which says how the agent is
            confined): the effective settings, say.
        loop_anchors: where this process's pytest looked for its initial ``conftest.py``
            files (guarded, see :func:`pytest_ralph.oracle.snapshot.loop_conftests`).
    """

    def __init__(self, settings: Settings, *, rootdir: Path, inifile: Path | None,
                 out: TextIO = sys.stdout, python: str = sys.executable, keyword: str = "",
                 markexpr: str = "", junitxml: Path | None = None,
                 deselect: tuple[str, ...] = (), new_run: bool = False,
                 pythonpath: tuple[Path, ...] = (), child_args: tuple[str, ...] = (),
                 hooks: LoopHooks | None = None, sandbox: Sandbox | None = None,
                 banner: tuple[str, ...] = (), loop_anchors: tuple[Path, ...] = ()) -> None:
        self.settings = settings
        self.banner = banner
        self.loop_anchors = loop_anchors
        self._sandbox = sandbox
        self._preset: str | None = None
        self.child_args = child_args
        self.hooks = hooks or LoopHooks()
        #: The run of the last :meth:`run` (``None`` before one started), for inspection.
        self.last_run: RunRecord | None = None
        #: The final report of the last :meth:`run` (``None`` until a run ended).
        self.report_path: Path | None = None
        self.rootdir = rootdir
        self.inifile = inifile
        self.out = out
        self.python = python
        self.keyword = keyword
        self.markexpr = markexpr
        self.junitxml = junitxml
        self.deselect = deselect
        self.new_run = new_run
        self.pythonpath = pythonpath
        self._out_broken = False
        self._history: History | None = None
        self._lock: IO[str] | None = None
        self._db_sig: tuple[object, ...] = ()
        self._bytecode: TrustedBytecode | None = None
        #: Processes this process had before the run (sweeps spare them).
        self._keep: frozenset[int] = frozenset()
        #: git's configuration when the run started: git runs only while it is unchanged.
        self._git_trust = config_digest(rootdir)
        self._t0 = time.monotonic()
        self._redactor = Redactor.from_env()
        self._git = False  # the last iteration's change is known (a git work tree)
        self._cost_warned = False
        self._notes: list[str] = []  # warnings found before the run exists

    # -- set-up ------------------------------------------------------------------------------

    def prepare(self) -> tuple[PRD, list[str]]:
        """Find and load the PRD, apply the story filter, and resolve the agent.

        Raises:
            LoopUsageError: bad PRD, unknown story ids mixed with known ones, no agent,
                agent not found, unreadable prompt template.
            NoCriteria: no PRD found, no stories, or the story filter matches none.
        """
        prd = self.prepare_prd()
        argv = self._resolve_agent()
        self._template()
        _ = self.sandbox  # ralph_sandbox = required without bubblewrap: exit 4 now
        if self.settings.promise:
            self._notes.append(f"promise (from {self.settings.sources.get('promise')}) is "
                               "ignored: `pytest --ralph` completes on the checks alone; the "
                               "completion promise is for the Claude Code driver (`pytest "
                               "--ralph-init --ralph-driver claude --ralph-promise TEXT`)")
        return prd, argv

    def prepare_prd(self) -> PRD:
        """Find and load the PRD and apply the story filter.

        Raises:
            LoopUsageError: bad PRD, unknown story ids mixed with known ones; ``workers`` set
                without pytest-xdist.
            NoCriteria: no PRD found, no stories, or the story filter matches none.
        """
        s = self.settings
        problem = workers_problem(self._workers(), self.child_args)
        if problem:
            raise LoopUsageError(f"{problem} (workers = {s.workers} from "
                                 f"{s.sources.get('workers')})")
        path = s.prd
        if path is None:
            path = discover_prd(self.rootdir)
            if path is None:
                raise NoCriteria(
                    f"no PRD found: looked for {', '.join(PRD_FILE_NAMES)} in {self.rootdir} "
                    f"and its {', '.join(d for d in PRD_SEARCH_DIRS if d != '.')} folders; "
                    "name one with --ralph-prd PATH (or ini ralph_prd)")
        try:
            prd = load_prd(path, max_bytes=s.max_prd_bytes)
        except PRDError as exc:
            raise LoopUsageError(exc.describe()) from None
        if not prd.stories:
            raise NoCriteria(f"{prd.path}: {no_stories_message(prd)}")
        if s.story:
            known = [st.id for st in prd.stories]
            unknown = [sid for sid in s.story if sid not in known]
            if unknown and len(unknown) == len(s.story):
                raise NoCriteria(f"story {' '.join(unknown)} (from {s.sources.get('story')}) "
                                 f"selects no story of {prd.path} (its stories: "
                                 f"{', '.join(known)})")
            if unknown:
                raise LoopUsageError(f"no story {', '.join(unknown)} (from "
                                     f"{s.sources.get('story')}) in {prd.path} (its stories: "
                                     f"{', '.join(known)})")
        try:
            self.hooks.prd_loaded(prd)
        except PRDError as exc:
            raise LoopUsageError(exc.describe()) from None
        return prd

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox of agent runs and check phases (probed from the settings once).

        Raises:
            LoopUsageError: ``ralph_sandbox = required`` and bubblewrap cannot confine.
        """
        if self._sandbox is None:
            s = self.settings
            try:
                self._sandbox = probe(s.sandbox, source=s.sources.get("sandbox", "default"),
                                      writable=s.sandbox_writable)
            except SandboxError as exc:
                raise LoopUsageError(str(exc)) from None
        return self._sandbox

    def confinement_line(self) -> str:
        """What the sandbox does, one sentence: ``agent and check phases confined by
        bubblewrap 0.8.0 (the agent writes the project, a private /tmp, ~/.claude;
        read-only: the rest, the state folder)`` or ``agent and check phases NOT confined
        (why)``.

        Raises:
            LoopUsageError: as :attr:`sandbox`.
        """
        sb = self.sandbox
        if not sb.confined:
            return (f"agent and check phases NOT confined ({sb.reason}): the agent can write "
                    "anywhere you can")
        home = Path(os.path.expanduser("~"))
        # A CLI's folders are made at its first run; its files are bound when they exist.
        extra = [_home_short(p, home) for p in (*cli_state_paths(self._preset), *sb.writable)
                 if os.path.lexists(p) or "." not in p.name.lstrip(".")]
        return (f"agent and check phases {sb.describe()} (the agent writes: the project, a "
                f"private /tmp" + "".join(f", {x}" for x in extra) + f"; read-only: the rest, "
                f"the state folder {shown_path(self.settings.dir, self.rootdir)}; network on)")

    def _agent_confinement(self, argv: list[str]) -> Confinement:
        """What an agent run of ``argv`` may write (see
        :func:`pytest_ralph.sandbox.bwrap.agent_confinement`)."""
        paths = cli_state_paths(self._preset)
        prepare_state_paths(paths)
        exe = shutil.which(argv[0]) if argv and os.sep not in argv[0] else None
        return agent_confinement(self.sandbox, project=self.rootdir,
                                 state_dir=self.settings.dir, cli_paths=paths,
                                 argv=[exe, *argv[1:]] if exe else argv)

    def _resolve_agent(self) -> list[str]:
        """The agent argv from the settings.

        Raises:
            LoopUsageError: no agent configured, or its executable is not found.
        """
        s = self.settings
        if not s.agent:
            raise LoopUsageError("no agent configured: pass --ralph-agent CMD, or set ini "
                                 "ralph_agent or the environment variable PYTEST_RALPH_AGENT")
        try:
            argv, preset = resolve_agent(s.agent, s.agent_flags)
            self._preset = preset.name if preset is not None else None
            resolve_executable(argv, self.rootdir)
            if s.agent_flags and preset is None:
                self._notes.append(f"agent_flags (from {s.sources.get('agent_flags')}) is "
                                   f"ignored: the agent {s.agent!r} is a command line, not a "
                                   "preset name; put the flags in the command")
        except AgentCommandError as exc:
            source = s.sources.get("agent", "default")
            raise LoopUsageError(f"{exc} (agent from {source})") from None
        return argv

    def _template(self) -> str:
        path = self.settings.prompt or template_path("prompt.md")
        try:
            return read_template(path)  # bounded; never blocks on a FIFO
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise LoopUsageError(f"cannot read the prompt template {path} (from "
                                 f"{self.settings.sources.get('prompt')}): {why}") from None

    def _text_kind(self, text: str) -> str:
        """How a text criterion is decided: ``text`` (a ``ralph_checks`` command),
        ``verifier`` or ``claimed``."""
        if fold_text(text) in dict(self.settings.checks):
            return "text"
        return VERIFIER_KIND if self.settings.verifier else "claimed"

    def _selected(self, prd: PRD) -> list[Story]:
        return [st for st in prd.stories if not self.settings.story or st.id in
                self.settings.story]

    def _phase_config(self, prd: PRD, oracle: Snapshot | None = None) -> CheckPhaseConfig:
        """The check-phase settings; every selected criterion is expected in every check
        (with ``-k``/``-m`` the baseline decides which are selected). ``oracle``'s files and
        folders are read-only to a confined phase."""
        expected = () if self._selection() else tuple(
            (st.id, c.id, c.text) for st in self._selected(prd) for c in st.criteria)
        return CheckPhaseConfig(prd=prd.path, rootdir=self.rootdir, inifile=self.inifile,
                                sandbox=self.sandbox, state_dir=self.settings.dir,
                                judges=oracle.judges(self.rootdir) if oracle else (),
                                oracle=oracle,
                                stories=self.settings.story, strict=self.settings.strict,
                                python=self.python, keyword=self.keyword,
                                markexpr=self.markexpr, junitxml=self.junitxml,
                                deselect=self.deselect, expected=expected,
                                extra_args=self.child_args, bytecode=self._bytecode,
                                workers=self._workers())

    def _workers(self) -> str:
        """The ``-n`` value of the check phases (``""``: none, the ``addopts`` decide)."""
        workers = self.settings.workers
        return "" if workers is None else str(workers)

    def _selection(self) -> str:
        """``-k 'x' --deselect y``: the options that select criteria, as the user gave them."""
        parts = [f"{flag} {expr!r}" for flag, expr in (("-k", self.keyword),
                                                        ("-m", self.markexpr)) if expr]
        parts += [f"--deselect {d}" for d in self.deselect]
        return " ".join(parts)

    # -- dry run -----------------------------------------------------------------------------

    def dry_run(self) -> int:
        """Print the first prompt and the agent's argv; run nothing, write nothing."""
        prd, argv = self.prepare()
        selected = self._selected(prd)
        fake = CheckResults(tuple(
            CriterionResult(nodeid="", story=st.id, criterion=c.id, text=c.text,
                            kind=("text" if self._text_kind(c.text) == "claimed" else
                                  self._text_kind(c.text)) if c.kind == "text" else c.kind,
                            claimed=c.kind == "text" and self._text_kind(c.text) == "claimed",
                            outcome="failed", message="not checked (dry run): the real loop "
                            "checks every criterion before the first agent run and shows the "
                            "failures here")
            for st in selected for c in st.criteria))
        prompt_file = self.settings.dir / "runs" / "<run id>" / "iteration-001" / "prompt.md"
        ctx = PromptContext(prd, fake, 1, self.settings.max_iterations, self.rootdir,
                            StateDir(self.settings.dir).read_progress_tail(PROGRESS_CHARS))
        prompt = self._redactor.text(self.hooks.build_prompt(self._template(), ctx))
        argv = self.hooks.agent_command(list(argv), 1, pick_story(prd, fake))
        note = (f"\n{self._selection()} is applied by the baseline check, which a dry run does "
                "not run: the prompt below covers every criterion of the selected stories."
                if self._selection() else "")
        self._print(f"pytest-ralph: {self.confinement_line()}")
        for line in self.banner:
            self._print(line)
        self._print(f"pytest-ralph dry run: PRD {prd.path}; nothing is run or written.{note}\n"
                    f"{self._dialect_text(prd)}"
                    f"--- agent argv ---\n"
                    f"{self._redactor.text(json.dumps(render_argv(argv, prompt_file)))}\n"
                    f"--- prompt for iteration 1 (on stdin and in {{prompt_file}}) ---\n"
                    f"{prompt}\n--- end of prompt ---")
        return EXIT_COMPLETE

    def _dialect_text(self, prd: PRD) -> str:
        """``pytest-ralph: prd.json: dialect tasks+steps (...)`` and a line break, for a PRD
        that is not in the canonical shape; ``""`` for a canonical one."""
        line = dialect_line(prd)
        return f"pytest-ralph: {shown_path(prd.path, self.rootdir)}: {line}\n" if line else ""

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> int:
        """Run the loop to a stop condition; return the exit code.

        Raises:
            LoopUsageError, NoCriteria: from :meth:`prepare`.
        """
        prd, argv = self.prepare()
        self._print(f"pytest-ralph: {self.confinement_line()}")
        for line in self.banner:
            self._print(line)
        state = StateDir(self.settings.dir)
        if not self.sandbox.confined:
            become_subreaper()  # an orphan of the agent comes to the loop, not to init
            self._keep = descendant_pids()
        with guarded(self.rootdir), self.locked(state):
            return self._run_locked(prd, argv, state)

    @contextmanager
    def locked(self, state: StateDir) -> Iterator[None]:
        """Hold the state folder's loop lock with the run history open (and a private
        bytecode cache for the check phases) for the body; release all on the way out.

        Raises:
            LoopUsageError: another loop holds the lock, the folder cannot be used, or the
                history cannot be opened.
        """
        try:
            state.ensure()
            lock = state.lock()
        except LockedError as exc:
            raise LoopUsageError(str(exc)) from None
        except OSError as exc:
            raise LoopUsageError(f"cannot use the state folder {state.root}: {exc}") from None
        self._lock = lock
        try:
            if state.stale_lock:
                self._print(f"pytest-ralph: warning: taking over the loop lock of {state.root} "
                            f"left by a loop that is not running any more ({state.stale_lock})")
            try:
                self._history = History.open(state.root / DB_NAME)
            except HistoryError as exc:
                raise LoopUsageError(str(exc)) from None
            self._db_sig = _db_signature(self.history.path)
            self._bytecode = TrustedBytecode.for_run(self.rootdir,
                                                     confined=self.sandbox.confined)
            self._bytecode.prime_in_background(self._bytecode.sources_loaded_here())
            self._t0 = time.monotonic()
            try:
                yield
            finally:
                self.history.close()
                self._history = None
                self._bytecode.close()
        finally:  # a clean exit leaves no holder behind
            for held in {id(lock): lock, id(self._lock): self._lock}.values():
                with contextlib.suppress(OSError, ValueError):
                    held.seek(0)
                    held.truncate()
                    held.flush()
                    held.close()

    @property
    def history(self) -> History:
        """The open run history (only while :meth:`run` runs)."""
        assert self._history is not None
        return self._history

    def _run_locked(self, prd: PRD, argv: list[str], state: StateDir) -> int:
        s = self.settings
        # We hold the folder's lock: a run still marked running was left by a dead loop.
        for rid in self.history.mark_crashed_if_dead(lambda pid: False):
            self.history.add_event(rid, "crash", "found running without its loop: the loop "
                                   "process died (killed, power loss) before it ended the run")
        for driven in self.history.driven_runs():
            drv = self.history.driver(driven.id)
            owner = (f"adopted by Claude Code session {drv.session_id}" if drv and
                     drv.session_id else "waiting for a Claude Code session to adopt it")
            raise LoopUsageError(f"run {driven.id} of {driven.prd} is armed for the Claude Code "
                                 f"Stop hook ({owner}); let it finish in Claude Code, or "
                                 "disarm it with `pytest --ralph-cancel` first")
        last = self.history.last_run(prd.path)
        if last is not None and self.history.driver(last.id) is not None:
            last = None  # a run of the Stop hook is never resumed by an outer loop
        if last is not None and last.resumable and not self.new_run:
            run = self._resume(last, prd, argv, state)
        else:
            oracle = self._snapshot(prd)
            notes = self.check_verified(prd, oracle, state)
            run = RunRecord(prd=prd, settings=s, argv=argv, run_dir=state.new_run(),
                            oracle=oracle, warnings=notes)
            if last is None:
                run.warnings += self._lost_runs(state, prd, run.run_dir.id)
            self._begin(run)
        self.last_run = run
        run.confinement = self.confinement_line()
        for note in dict.fromkeys(self._notes):
            self._warn(run, note)
        selected = self._selected(prd)
        n_crit = sum(len(st.criteria) for st in selected)
        self._print(f"pytest-ralph: loop on {prd.path} ({plural(n_crit, 'criterion', 'criteria')}"
                    f" of {plural(len(selected), 'story', 'stories')}); agent "
                    f"{self._redactor.text(json.dumps(argv))}; max iterations {s.max_iterations}; "
                    f"breaker "
                    f"{s.breaker}; state {run.run_dir.path}")
        dialect = self._dialect_text(prd)
        if dialect:
            self._print(dialect.rstrip("\n"))
        if run.resumed_from:
            done = max(len(run.iterations) - 1, 0)
            streak = run.last.streak if run.iterations else 0
            self._print(f"pytest-ralph: resuming run {run.run_dir.id} ({run.resumed_from}) after "
                        f"{plural(done, 'iteration')}; identical-failure streak {streak}/"
                        f"{s.breaker} (--ralph-new starts a fresh run)")
        try:
            with _sigterm_as_interrupt():
                code = self._iterate(run, state, argv)
        except HookError as exc:  # a plugin's or conftest.py's hook failed
            code = self._stop(run, "crashed", EXIT_INTERNAL,
                              f"{exc}; fix it, then `pytest --ralph` resumes this run (with "
                              "--ralph-allow-criteria-edits when the fix is in a conftest.py)")
        except (KeyboardInterrupt, Interrupted, Cancelled) as exc:
            n = len(run.iterations)
            where = f"iteration {n}" if n else "the baseline check"
            if isinstance(exc, Cancelled) or self._cancel_requested(run):
                code = self._stop(run, "cancelled", EXIT_INTERRUPTED,
                                  f"cancelled by `pytest --ralph-cancel` during {where}; the "
                                  "processes it had started were stopped; `pytest --ralph` "
                                  "resumes it")
            else:
                code = self._stop(run, "interrupted", EXIT_INTERRUPTED,
                                  f"interrupted during {where} (Ctrl-C or SIGTERM); the "
                                  "processes it had started were stopped and the state kept; "
                                  "`pytest --ralph` resumes it")
        self._finish(run, state)
        return code

    def _begin(self, run: RunRecord) -> None:
        assert run.oracle is not None
        self.history.begin_run(run.run_dir.id, prd=run.prd.path, rootdir=self.rootdir,
                               argv=run.argv, settings=to_json(self.settings),
                               started=run.started, pid=os.getpid(),
                               hostname=socket.gethostname(),
                               oracle=snapshot_to_json(run.oracle))
        self._db_sig = _db_signature(self.history.path)
        self._point_at(run)

    def _point_at(self, run: RunRecord) -> None:
        """Record ``run``'s snapshot as the last verified one apart from the state folder
        (:func:`pytest_ralph.state.verified.write_pointer`)."""
        if run.oracle is not None:
            write_pointer(self.rootdir, {"run": run.run_dir.id, "status": run.status,
                                         "prd": str(run.prd.path),
                                         "state": str(self.settings.dir),
                                         "oracle": snapshot_to_json(run.oracle)})

    def _resume(self, stored: StoredRun, prd: PRD, argv: list[str], state: StateDir) -> RunRecord:
        """Rebuild the run ``stored`` from the history and mark it running again."""
        run_dir = RunDir(state.root / "runs" / stored.id)
        run_dir.path.mkdir(parents=True, exist_ok=True)
        run = RunRecord(prd=prd, settings=self.settings, argv=argv, run_dir=run_dir,
                        started=stored.started, resumed_from=stored.status)
        try:
            run.oracle = snapshot_from_json(stored.oracle)
            if not any(k.startswith("criterion ") for k in run.oracle.digests):
                raise ValueError("no criterion in it")
        except ValueError:  # fail closed: never take the tree as it is now as the reference
            raise LoopUsageError(
                f"run {stored.id} ({stored.status}) cannot be resumed: the snapshot of its "
                f"criteria taken when it started is unreadable in {self.history.path} (the "
                "history was damaged or edited); `pytest --ralph --ralph-new "
                "--ralph-accept-changes` starts a new run, whose start becomes the reference"
            ) from None
        # A waiver in the configuration file (which the agent can write) does not count here.
        changes = [] if from_person(self.settings, "allow_criteria_edits") else compare(
            run.oracle, self._snapshot(prd, run.oracle))
        if changes:
            raise LoopUsageError(
                f"run {stored.id} ({stored.status}) cannot be resumed as it is: its criteria "
                f"changed since it started ({_changes_text(changes)}), and a resumed run would "
                "count that against the agent; restore them (if an agent made these changes), "
                "or start a new run with the criteria as they are now: `pytest --ralph "
                "--ralph-new --ralph-accept-changes` (or pass --ralph-allow-criteria-edits)")
        # The history keeps them redacted: compare them redacted.
        new_settings = self._redactor.json(json.loads(json.dumps(to_json(self.settings),
                                                                 default=str)))
        differ = [f"{k} {stored.settings.get(k)!r} -> {v!r}" for k, v in new_settings.items()
                  if k in stored.settings and stored.settings[k] != v]
        if list(stored.argv) != self._redactor.json(argv):
            differ.append(f"agent {list(stored.argv)} -> {self._redactor.json(argv)}")
        if differ:
            self._print("pytest-ralph: the resumed run goes on with changed settings: "
                        + "; ".join(differ))
            self.history.update_run(stored.id, argv=argv, settings=new_settings)
        self._load_iterations(run)
        self.history.clear_cancel(stored.id)
        self.history.set_status(stored.id, "running", f"resumed after {stored.status}",
                                pid=os.getpid(), hostname=socket.gethostname())
        return run

    def _load_iterations(self, run: RunRecord) -> None:
        """Fill ``run`` with its iterations, flaky criteria and rate-limited attempts from the
        history."""
        for it in self.history.iterations(run.run_dir.id):
            run.iterations.append(_record(it, run.run_dir))
            run.flaky.update(it.flaky)
        run.attempts = [(a.n, a.agent.to_agent_run(), a.pause)
                        for a in self.history.attempts(run.run_dir.id)]

    def _lost_runs(self, state: StateDir, prd: PRD, new_id: str) -> list[str]:
        """A warning when run folders of this PRD exist that the history does not know (the
        database or its WAL file was deleted or replaced)."""
        lost = []
        for summary in sorted((state.root / "runs").glob("*/run.json")):
            rid = summary.parent.name
            if rid == new_id or self.history.run(rid) is not None:
                continue
            with contextlib.suppress(OSError, ValueError, RecursionError, AttributeError):
                # read_text: a FIFO or a device planted as run.json is never read
                if json.loads(read_text(summary, RUN_JSON_MAX_BYTES)).get("prd") == str(prd.path):
                    lost.append(rid)
        if not lost:
            return []
        message = (f"the run history {self.history.path} does not know {plural(len(lost), 'run')}"
                   f" of this PRD found in {state.root / 'runs'} ({', '.join(lost[-3:])}): the "
                   "database or its -wal file was deleted or replaced; their iterations do not "
                   "count for this new run")
        self._print(f"pytest-ralph: warning: {message}")
        return [message]

    def check_verified(self, prd: PRD, oracle: Snapshot, state: StateDir) -> list[str]:
        """Compare a new run's oracle with the last run's verified snapshot (see
        :mod:`pytest_ralph.state.verified`), keep copies of its guarded files for the next run's
        diff stat, and return the warnings for the run.

        Raises:
            LoopUsageError: the criteria or the files that judge them changed since the last
                run of ``prd`` started (or its snapshot cannot be read), and neither
                ``--ralph-accept-changes`` nor ``--ralph-allow-criteria-edits`` is given.
        """
        s = self.settings
        last = self.history.last_run(prd.path)
        ref = (last.id, last.status, last.oracle, str(self.history.path)) if last else None
        pointer = read_pointer(self.rootdir)
        if pointer is not None and pointer.get("prd") == str(prd.path) and (
                ref is None or pointer.get("state") != str(state.root)):
            # No run here, or not the one last verified (ralph_dir moved, the folder deleted).
            ref = (str(pointer.get("run")), str(pointer.get("status")), pointer["oracle"],
                   str(pointer_path(self.rootdir)))
        notes: list[str] = []
        if ref is not None and not from_person(s, "allow_criteria_edits"):
            ref_id, ref_status, ref_oracle, where = ref
            try:
                before = snapshot_from_json(ref_oracle)
                if not any(k.startswith("criterion ") for k in before.digests):
                    raise ValueError("no criterion in it")
            except ValueError as exc:
                why = (f"the verified snapshot of the last run {ref_id} ({ref_status}) "
                       f"cannot be read from {where} ({exc}): the history was "
                       "damaged or edited")
                if not s.accept_changes:
                    raise LoopUsageError(f"{why}; so the criteria cannot be compared with what "
                                         "was last verified; check them (git diff), then start "
                                         "with --ralph-accept-changes") from None
                notes.append(f"{why}; started anyway (--ralph-accept-changes)")
            else:
                changes = weakening(compare(before, self._snapshot(prd, before)))
                if changes:
                    stat = changes_stat(changes, before, self.rootdir, state.root,
                                     self._redactor.text)
                    shown = "\n".join(f"  {line}" for line in stat)
                    head = (f"the criteria or the files that judge them changed since the last "
                            f"run {ref_id} ({ref_status}) started")
                    if not s.accept_changes:
                        raise LoopUsageError(
                            f"{head}:\n{shown}\nA new run does not take a changed oracle as its "
                            "reference on its own: if you made these changes, rerun with "
                            "--ralph-accept-changes; if an agent did, restore them (for "
                            "example `git checkout -- <file>`, and delete added files)")
                    notes.append(f"{head} (accepted with --ralph-accept-changes): "
                                 + "; ".join(stat))
                    self._print(f"pytest-ralph: {head}, accepted (--ralph-accept-changes):\n"
                                f"{shown}")
        keep_copies(oracle, self.rootdir, state.root, self._redactor.text)
        return notes

    def _cancel_requested(self, run: RunRecord) -> bool:
        with contextlib.suppress(Exception):  # a broken history is handled elsewhere
            return self.history.cancel_requested(run.run_dir.id)
        return False

    def _iterate(self, run: RunRecord, state: StateDir, argv: list[str]) -> int:
        s = self.settings
        phase = self._phase_config(run.prd, run.oracle)
        if not run.iterations:
            stop = self._baseline(run, state, phase)
            if stop is not None:
                return stop
        phase = self._expected(run, phase)
        cur = self._cursor(run)
        template = self._template()
        n = run.last.n + 1
        while n <= s.max_iterations:
            if self._cancel_requested(run):
                raise Cancelled()
            spent = self._spent(run)
            if spent is not None:
                return spent
            self._check_state(run, state)
            started = _now()
            folder = run.run_dir.iteration_dir(n)
            story, prompt = self._next_prompt(run, state, template, n)
            agent_argv = self.hooks.agent_command(list(argv), n, story)
            self.hooks.before_iteration(n, story, prompt, agent_argv)
            before = tree_snapshot(self.rootdir, self._git_trust)
            agent_run = run_agent(agent_argv, prompt=prompt, prompt_file=folder / "prompt.md",
                                  cwd=self.rootdir, timeout=self._agent_timeout(),
                                  log_path=folder / "agent.log",
                                  env={"PYTEST_RALPH_ITERATION": str(n),
                                       "PYTEST_RALPH_PROMPT_FILE": str(folder / "prompt.md")},
                                  reader=reader_for(argv), redactor=self._redactor,
                                  sandbox=self.sandbox,
                                  confinement=self._agent_confinement(agent_argv)
                                  if self.sandbox.confined else None)
            if (s.max_cost is not None and agent_run.cost_usd is None and agent_run.ran
                    and not self._cost_warned):
                self._cost_warned = True
                self._warn(run, f"--ralph-max-cost {s.max_cost:g}: the agent reports no cost "
                           f"({agent_run.describe()}), so the cost limit cannot stop this run; "
                           "use --ralph-budget or --ralph-max-iterations to bound it")
            if not self.sandbox.confined:
                sweep_descendants(keep=self._keep)  # what the agent left, supervisor or not
            if agent_run.outcome == "rate-limited":
                cur.error_streak += 1
                stop = self._rate_limited(run, n, started, agent_run, cur.error_streak)
                if stop is not None:
                    return stop
                continue
            stop = self._conclude(run, state, phase, cur, Turn(n, story, agent_run, started,
                                                                 folder, before))
            if stop is not None:
                return stop
            n += 1
        return self._at_limit(run)

    def _baseline(self, run: RunRecord, state: StateDir, phase: CheckPhaseConfig) -> int | None:
        """Check every criterion before any agent run (iteration 0); the stop code when that
        ends the run (complete, or nothing selected), else ``None``."""
        folder = run.run_dir.iteration_dir(0)
        started = _now()
        base = run_check_phase(self._bounded(replace(phase, report_imports=True)), folder)
        self._learn_imports(run, base)
        if not phase.expected and not base.criteria and not base.errors:
            return self._stop(run, "no-criteria", EXIT_NO_CRITERIA,
                              f"{self._selection()} deselects every criterion of "
                              f"{run.prd.path}")
        self._write_back(run.prd, base, state)
        self._record(run, IterationRecord(0, base, None, "", 0, 0, started, folder,
                                          fingerprint=self._fingerprint(run, base)), state)
        self._print_baseline(run)
        if base.complete:
            return self._stop(run, "complete", EXIT_COMPLETE,
                              f"every criterion passed at the baseline check "
                              f"({len(base.criteria)}/{len(base.criteria)}); no agent run "
                              "was needed")
        return None

    def _learn_imports(self, run: RunRecord, base: CheckResults) -> None:
        """Guard what the baseline's processes imported (:func:`pytest_ralph.oracle.snapshot.
        with_imports`: files that would shadow those modules, the installed environment) and
        compile their bytecode for the next phases. The baseline ran before any agent: what
        it imported is the user's, not the agent's."""
        if self._bytecode is not None:
            self._bytecode.prime_in_background(
                src for proc in base.imports for src in proc.get("sources", ())
                if isinstance(src, str))
        if run.oracle is None or not base.imports:
            return
        run.oracle = with_imports(run.oracle, base.imports, self.rootdir,
                                  folders=(self.rootdir, run.prd.path.parent))
        with contextlib.suppress(Exception):  # a broken history is handled elsewhere
            self.history.set_oracle(run.run_dir.id, snapshot_to_json(run.oracle))
            self._db_sig = _db_signature(self.history.path)
        self._point_at(run)

    def _expected(self, run: RunRecord, phase: CheckPhaseConfig) -> CheckPhaseConfig:
        """``phase`` expecting the criteria the baseline selected (with ``-k``/``-m`` the
        baseline says which)."""
        if phase.expected:
            return phase
        return replace(phase, expected=tuple((c.story, c.criterion, c.text)
                                             for c in run.iterations[0].results.criteria))

    def _cursor(self, run: RunRecord) -> _Cursor:
        """The breaker's counters to carry on with, rebuilt from the run's iterations."""
        # A resumed run carries on: its streak and last fingerprint; the agent-error streak
        # starts again (the user was there to fix the agent).
        cur = _Cursor(streak=run.last.streak,
                      error_streak=0 if run.resumed_from else run.last.error_streak,
                      last_fp=self._last_fingerprint(run))
        prior = run.iterations[-2].blocked if len(run.iterations) > 1 else {}
        if set(run.last.blocked) - set(prior):  # it blocked a story: the count starts again
            cur.streak, cur.last_fp = 0, None
        cur.last_story = next((it.story for it in reversed(run.iterations[1:])
                               if it.agent is not None and it.agent.ran), "")
        return cur

    def _next_prompt(self, run: RunRecord, state: StateDir, template: str,
                     n: int) -> tuple[Story | None, str]:
        """The story iteration ``n`` works on and its prompt (secrets redacted), from the PRD
        as it is now and the last check."""
        s = self.settings
        prd = self._reload(run)
        prev = run.last.results
        held = run.blocked
        story = pick_story(prd, prev, held)
        prompt = self._redactor.text(self.hooks.build_prompt(template, PromptContext(
            prd, prev, n, s.max_iterations, self.rootdir,
            state.read_progress_tail(PROGRESS_CHARS),
            repeats=_repeats(run),
            regressions=run.last.regressions, blocked=held,
            last_change=run.last.diff or (NO_CHANGE if self._git and run.last.agent
                                          is not None else ""))))
        return story, prompt

    def _conclude(self, run: RunRecord, state: StateDir, phase: CheckPhaseConfig,
                  cur: _Cursor, turn: Turn) -> int | None:
        """Check what the agent's turn left, record iteration ``turn.n``, and decide: the stop
        code (complete, agent errors, all stories blocked, breaker), or ``None`` to go on.
        ``cur`` is updated in place."""
        s = self.settings
        n, story, agent_run, before = turn.n, turn.story, turn.agent, turn.tree
        prev = run.last.results
        held = run.blocked
        if before is not None and config_digest(self.rootdir) != self._git_trust:
            self._warn(run, "git's configuration (.git/config, ~/.gitconfig, info/attributes) "
                       "changed during the agent's turn: the loop does not run git again in "
                       "this run (it could run a command the agent configured), so the next "
                       "prompts show no diff")
            self._git_trust = "changed"
        after = tree_snapshot(self.rootdir, self._git_trust) if before is not None else None
        self._git = after is not None
        diff = diff_stat(self.rootdir, before, after, trust=self._git_trust) \
            if before and after else ""
        # The oracle as the agent's turn left it, before anything runs that could put it back
        # (a conftest.py that deletes itself when the check is over, say); and after the phase.
        ahead = self._changes(run, phase)
        results = run_check_phase(self._bounded(phase), turn.folder)
        results, flaky = self._recheck(run, phase, prev, results, turn.folder)
        if not self.sandbox.confined:
            sweep_descendants(keep=self._keep)  # a daemon of the code under test, say
        changes = _merged(ahead, self._changes(run, phase))
        if changes and not s.allow_criteria_edits:
            results = apply(results, changes)
        self._write_back(run.prd, results, state)
        fp = self._fingerprint(run, results)
        if agent_run.ran:
            if changes and not s.allow_criteria_edits:
                cur.streak += 1  # an edited oracle is never progress
            else:
                # The same failure while working on the same story: a story whose turn
                # comes starts its own count (it is blocked, not the run, at the limit).
                same = fp == cur.last_fp and (story.id if story else "") == cur.last_story
                cur.streak = cur.streak + 1 if same else 1
                cur.last_fp = fp
            cur.last_story = story.id if story else ""
            cur.error_streak = 0
        else:
            cur.error_streak += 1
        streak, error_streak = cur.streak, cur.error_streak
        rec = IterationRecord(n, results, agent_run, story.id if story else "", streak,
                              error_streak, turn.started, turn.folder,
                              _regressions(run, results), fp, tuple(changes), flaky, diff=diff)
        rec.blocked = self._blocked_after(run, rec)
        newly = [sid for sid in rec.blocked if sid not in held]
        failing_stories = {c.story for c in results.failing}
        all_blocked = bool(failing_stories) and failing_stories <= set(rec.blocked)
        self._record(run, rec, state)
        if newly and not all_blocked and not results.complete:
            # The loop changes course (another story, another prompt): the breaker's
            # count starts again.
            cur.streak, cur.last_fp = 0, None
        self._print_block(run, rec)
        state.append_progress(self._redactor.text(self._progress_entry(run, rec)))
        self.hooks.after_iteration(n, results, agent_run, rec.story)
        if results.complete:
            return self._stop(run, "complete", EXIT_COMPLETE,
                              f"every criterion passes ({len(results.criteria)}/"
                              f"{len(results.criteria)})")
        decision = self.hooks.should_stop(StopContext(
            iteration=n, max_iterations=s.max_iterations, results=results, agent=agent_run,
            story=rec.story, fingerprint=fp, streak=streak, breaker=s.breaker,
            error_streak=error_streak, agent_errors=s.agent_errors, blocked=dict(rec.blocked),
            newly_blocked=tuple(newly), all_blocked=all_blocked))
        if decision.stop:
            if decision.escalate:
                run.pending_escalation = (decision.escalate,
                                          sorted({c.story for c in results.failing}))
            return self._stop(run, decision.status, decision.exit_code,
                              decision.reason + self._tampered(run))
        if newly:
            self._escalate(run, "story-blocked", newly)
        return None

    def _at_limit(self, run: RunRecord) -> int:
        """Stop at the iteration limit (exit 1)."""
        last = run.last.results
        failing = plural(len(last.failing), "criterion", "criteria")
        held = sorted(run.blocked)
        blocked_note = (f"; {plural(len(held), 'story', 'stories')} blocked "
                        f"({', '.join(held[:8])}{', ...' if len(held) > 8 else ''}), see the "
                        "report" if held else "")
        return self._stop(run, "limit", EXIT_LIMIT,
                          f"stopped at the iteration limit ({self.settings.max_iterations}) "
                          f"with {failing} still failing"
                          + (" and check-phase errors" if last.errors else "")
                          + blocked_note + self._tampered(run))

    # -- budgets, rate limits, blocked stories, escalation -------------------------------

    def _remaining(self) -> float | None:
        """Seconds left of ``--ralph-budget``, or ``None`` without a budget."""
        if self.settings.budget is None:
            return None
        return self.settings.budget - (time.monotonic() - self._t0)

    def _bounded(self, phase: CheckPhaseConfig) -> CheckPhaseConfig:
        """``phase`` with its timeout cut to what is left of ``--ralph-budget`` (at least 1 s,
        so that a spent budget still ends the phase cleanly)."""
        left = self._remaining()
        if left is None:
            return phase
        return replace(phase, timeout=max(min(phase.timeout, left), 1.0))

    def _agent_timeout(self) -> float:
        """The agent's timeout: ``--ralph-agent-timeout``, cut to what is left of the budget."""
        left = self._remaining()
        timeout = self.settings.agent_timeout
        return timeout if left is None else max(min(timeout, left), 0.001)

    def _spent(self, run: RunRecord) -> int | None:
        """Stop (exit 1) when the wall-clock budget or the cost limit is spent."""
        s = self.settings
        last = run.last.results
        failing = plural(len(last.failing), "criterion", "criteria")
        left = self._remaining()
        if left is not None and left <= 0:
            return self._stop(run, "limit", EXIT_LIMIT,
                              f"stopped at the wall-clock budget ({s.budget:g} s, "
                              f"--ralph-budget) with {failing} still failing"
                              + self._tampered(run))
        if s.max_cost is not None and run.cost >= s.max_cost:
            return self._stop(run, "limit", EXIT_LIMIT,
                              f"stopped at the cost limit: the agent runs cost "
                              f"${run.cost:.4f} (--ralph-max-cost {s.max_cost:g}) with "
                              f"{failing} still failing" + self._tampered(run))
        return None

    def _pause_for(self, agent_run: AgentRun) -> tuple[float, str]:
        """Seconds to pause after a rate-limited run, and where that figure came from."""
        s = self.settings
        if agent_run.reset_at is not None and agent_run.reset_at > time.time():
            wait = agent_run.reset_at - time.time() + 1.0
            when = _dt.datetime.fromtimestamp(agent_run.reset_at, _dt.timezone.utc)
            source = f"until the stated reset at {when.strftime('%Y-%m-%d %H:%M:%S')} UTC"
        elif agent_run.retry_after is not None:
            wait = agent_run.retry_after
            source = f"the stated retry-after of {agent_run.retry_after:g} s"
        else:
            wait = s.rate_limit_backoff
            why = ("the stated reset time has passed" if agent_run.reset_at is not None else
                   "no reset time stated")
            source = f"{why}: ralph_rate_limit_backoff {wait:g} s"
        wait = max(wait, 0.0)
        if wait > s.max_pause:
            source += f", capped by ralph_max_pause {s.max_pause:g} s"
            wait = s.max_pause
        return wait, source

    def _rate_limited(self, run: RunRecord, n: int, started: _dt.datetime,
                      agent_run: AgentRun, error_streak: int) -> int | None:
        """Record a rate-limited agent run (no iteration spent), then pause; or stop when
        the agent-error streak or the budget says so."""
        s = self.settings
        k = sum(1 for i, _, _ in run.attempts if i == n) + 1
        log = agent_run.log_path.with_name(f"agent.rate-limited-{k}.log")
        with contextlib.suppress(OSError):
            agent_run.log_path.replace(log)
            agent_run = replace(agent_run, log_path=log)
        wait, source = self._pause_for(agent_run)
        left = self._remaining()
        over = left is not None and wait >= left
        stopping = error_streak >= s.agent_errors or over
        pause = 0.0 if stopping else wait
        run.attempts.append((n, agent_run, pause))
        attempt_id = self.history.record_attempt(run.run_dir.id, n, started=started,
                                                 agent=agent_run, pause=pause)
        self._db_sig = _db_signature(self.history.path)
        self._print(f"[ralph iteration {n}/{s.max_iterations}: rate limited]\n"
                    f"  Tried: {agent_run.describe()}\n"
                    + (f"  Pause: {_seconds(wait)} ({source}); the iteration is not spent; "
                       f"agent-error streak {error_streak}/{s.agent_errors}"
                       if not stopping else
                       f"  Agent-error streak {error_streak}/{s.agent_errors}"))
        self._save(run)
        if error_streak >= s.agent_errors:
            run.error_streak = error_streak
            return self._stop(run, "agent-error", EXIT_AGENT_ERROR,
                              f"the agent did not run properly in "
                              f"{plural(error_streak, 'run')} in a row (last: "
                              f"{agent_run.describe()}); see {agent_run.log_path}")
        if over:
            return self._stop(run, "limit", EXIT_LIMIT,
                              f"stopped at the wall-clock budget: the agent is rate limited "
                              f"for {wait:.0f} s ({source}), more than the {max(left or 0, 0):.0f}"
                              f" s left of --ralph-budget {s.budget:g}")
        began = time.monotonic()
        try:
            self._sleep(run, wait)
        finally:  # the pause as it really was (a cancel or Ctrl-C cuts it short)
            actual = time.monotonic() - began
            run.attempts[-1] = (n, agent_run, actual)
            with contextlib.suppress(Exception):
                self.history.set_attempt_pause(attempt_id, actual)
                self._db_sig = _db_signature(self.history.path)
            self._save(run)
        return None

    def _sleep(self, run: RunRecord, seconds: float) -> None:
        """Pause ``seconds``, waking each second for ``--ralph-cancel`` (Ctrl-C and SIGTERM
        interrupt it at once)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 1.0))
            if self._cancel_requested(run):
                raise Cancelled()

    def _blocked_after(self, run: RunRecord, rec: IterationRecord) -> dict[str, str]:
        """Stories blocked once ``rec`` is added to ``run``."""
        its = [*run.iterations[1:], rec]
        steps = [Step(it.n, it.story, it.agent is not None and it.agent.ran,
                      tuple((k, t) for k, t in self._signature_of(it) if k not in run.flaky),
                      bool(it.changes) and not self.settings.allow_criteria_edits,
                      it.agent.outcome if it.agent else "")
                 for it in its]
        return blocked(story_states(steps, breaker=self.settings.breaker, normalize=False,
                                    max_iterations=self.settings.story_max_iterations))

    def _escalate(self, run: RunRecord, event: str, stories: list[str],
                  report: Path | None = None) -> None:
        """Run ini ``ralph_escalate`` (if set) with the state dump on stdin; ``report`` is the
        run's report once written (the run ended)."""
        command = self.settings.escalate
        if not command:
            return
        dump = state_dump(event=event, run_id=run.run_dir.id, prd=run.prd.path,
                          rootdir=self.rootdir, reason=run.reason or "; ".join(
                              f"{sid}: {run.blocked.get(sid, '')}" for sid in stories),
                          stories=[story_report(run, sid) for sid in stories],
                          report=report, redact=self._redactor.text)
        log = run.run_dir.path / f"escalate-{run.last.n:03d}-{event}.log"
        left = self._remaining()
        result = run_escalate(command, dump, cwd=self.rootdir, log_path=log,
                              env={"PYTEST_RALPH_EVENT": event},
                              timeout=ESCALATE_TIMEOUT if left is None else min(
                                  ESCALATE_TIMEOUT, max(left, ESCALATE_MIN_SECONDS)),
                              redact=self._redactor)
        line = f"iteration {run.last.n}, {event} ({', '.join(stories)}): {result.summary}"
        run.escalations.append(line)
        self._print(f"pytest-ralph: {line}")
        with contextlib.suppress(Exception):
            self.history.add_event(run.run_dir.id, "escalate", line, run.last.n)
            self._db_sig = _db_signature(self.history.path)
        if not result.ok:
            run.warnings.append(result.summary)

    def _record(self, run: RunRecord, rec: IterationRecord, state: StateDir) -> None:
        """Add ``rec`` to the run: one history transaction, then ``run.json``."""
        self._check_state(run, state)
        run.iterations.append(rec)
        self._store(run.run_dir.id, rec)
        self._save(run)

    def _store(self, run_id: str, rec: IterationRecord) -> None:
        self.history.record_iteration(
            run_id, rec.n, story=rec.story, started=rec.started, finished=_now(),
            results=rec.results, agent=rec.agent, fingerprint=rec.fingerprint,
            streak=rec.streak, error_streak=rec.error_streak, regressions=rec.regressions,
            flaky=rec.flaky, changes=rec.changes, blocked=rec.blocked, diff_stat=rec.diff)
        self._db_sig = _db_signature(self.history.path)

    def _last_fingerprint(self, run: RunRecord) -> str | None:
        """The fingerprint the breaker compares the next iteration with."""
        last: str | None = None
        for it in run.iterations[1:]:
            if it.agent is not None and it.agent.ran and not (
                    it.changes and not self.settings.allow_criteria_edits):
                last = it.fingerprint
        return last

    def _check_state(self, run: RunRecord, state: StateDir) -> None:
        """Notice a state folder, lock file or history deleted or damaged during the run (by
        the agent, say): recreate what is missing, rebuild the history from memory, and say
        what was lost.

        Raises:
            LoopUsageError: another loop took the lock after its file was deleted, or the
                history became unusable (a newer schema, say).
        """
        db = state.root / DB_NAME
        problems: list[str] = []
        if not (state.root / ".gitignore").exists():  # the check phase recreates folders
            problems.append(f"the state folder {state.root} was deleted")
        with contextlib.suppress(OSError):
            state.ensure()
        if not self._lock_intact(state):
            try:
                new = state.lock()
            except LockedError as exc:
                raise LoopUsageError(f"the loop lock of {state.root} was deleted during the run, "
                                     f"and another loop took it: {exc}") from None
            except OSError as exc:
                raise LoopUsageError(f"cannot recreate the loop lock in {state.root}: "
                                     f"{exc}") from None
            self._lock = new
            if not problems:
                problems.append(f"the loop lock {state.root / 'lock'} was deleted")
        run.run_dir.path.mkdir(parents=True, exist_ok=True)
        if _db_signature(db) != self._db_sig:
            if not problems:
                problems.append(f"the run history {db} was "
                                + ("deleted" if not db.exists() else "changed by someone else"))
            self.history.close()
            try:
                self._history = History.open(db)  # a damaged file is moved aside first
            except HistoryError as exc:
                if db.exists():  # not ours (another program's, a newer schema): set aside
                    stamp = _now().strftime("%Y%m%dT%H%M%SZ")
                    aside = db.with_name(f"{db.name}.foreign-{stamp}")
                    try:
                        db.rename(aside)
                        for suffix in ("-wal", "-shm"):
                            side = db.with_name(db.name + suffix)
                            if side.exists():
                                side.rename(aside.with_name(aside.name + suffix))
                    except OSError:
                        raise LoopUsageError(str(exc)) from None
                    exc = HistoryError(f"{exc}; it was moved to {aside}")
                problems.append(str(exc))
                try:
                    self._history = History.open(db)
                except HistoryError as exc2:
                    raise LoopUsageError(str(exc2)) from None
            self._db_sig = _db_signature(db)
            stored = self.history.run(run.run_dir.id)
            if stored is None:
                self._begin(run)
            have = {it.n for it in self.history.iterations(run.run_dir.id, with_criteria=False)}
            for rec in run.iterations:
                if rec.n not in have:
                    self._store(run.run_dir.id, rec)
            if stored is not None and have >= {rec.n for rec in run.iterations}:
                problems = [p for p in problems if "changed by someone else" not in p]
        if not problems:
            return
        rebuilt = any("history" in p or "state folder" in p for p in problems)
        message = ("; ".join(problems) + f" during the run (noticed at iteration "
                   f"{len(run.iterations)}); " + (
                       "recreated what was missing and rebuilt the run history from memory; "
                       "lost: earlier prompts, agent logs and check logs of this run if they "
                       "were deleted, progress.txt, and earlier runs' history" if rebuilt else
                       "recreated it; nothing else was lost"))
        run.warnings.append(message)
        self.history.add_event(run.run_dir.id, "state-lost", message)
        self._print(f"pytest-ralph: warning: {message}")

    def _lock_intact(self, state: StateDir) -> bool:
        """Whether the lock file we hold is still the one at ``<state>/lock``."""
        if self._lock is None:
            return True
        try:
            return os.fstat(self._lock.fileno()).st_ino == (state.root / "lock").stat().st_ino
        except (OSError, ValueError):
            return False

    def snapshot_of(self, prd: PRD) -> Snapshot:
        """A snapshot of ``prd``'s oracle as it is now (see :func:`pytest_ralph.oracle.snapshot.
        snapshot`), with this loop's settings."""
        return self._snapshot(prd)

    def _snapshot(self, prd: PRD, start: Snapshot | None = None) -> Snapshot:
        return snapshot(prd, self.rootdir, inifile=self.inifile, stories=self.settings.story,
                        verifier=self.settings.verifier, start=start,
                        pythonpath=self.pythonpath, loop_anchors=self.loop_anchors)

    def _changes(self, run: RunRecord, phase: CheckPhaseConfig) -> list[Change]:
        """What the agent changed in the oracle since the run started, limited to changes
        that touch a checked criterion."""
        assert run.oracle is not None
        try:
            prd = load_prd(run.prd.path, max_bytes=self.settings.max_prd_bytes)
        except PRDError:  # the check phase already fails on a broken PRD
            return []
        checked = {f"{sid}::{cid}" for sid, cid, _ in phase.expected}
        return [ch for ch in compare(run.oracle, self._snapshot(prd, run.oracle))
                if checked & set(ch.criteria)]

    def _tampered(self, run: RunRecord) -> str:
        """A clause for the stop reason when the last iteration changed the criteria."""
        changes = run.last.changes if run.iterations else ()
        if not changes or self.settings.allow_criteria_edits:
            return ""
        return (f"; the agent changed the criteria ({_changes_text(changes)}), so the loop "
                "refuses to report completion until they are restored")

    def _recheck(self, run: RunRecord, phase: CheckPhaseConfig, prev: CheckResults,
                 results: CheckResults, folder: Path) -> tuple[CheckResults, tuple[str, ...]]:
        """Re-check once, with no change in between, each criterion that passed in ``prev``
        and fails in ``results``; one that passes now is flaky: its passing result stands,
        and the breaker's fingerprint ignores it for the rest of the run."""
        passed_before = {c.key for c in prev.passing}
        newly = [c for c in results.failing if c.key in passed_before and c.kind != "missing"]
        if not newly or results.errors:
            return results, ()
        # In one process when the phases run on pytest-xdist workers: a few criteria do not
        # pay for starting the workers (and "-n 0" wins over an -n in the addopts).
        again = run_check_phase(self._bounded(replace(
            phase, junitxml=None, workers="0" if phase.workers else "",
            nodeids=tuple(f"{phase.prd}::{c.story}::{c.criterion}" for c in newly),
            expected=tuple((c.story, c.criterion, c.text) for c in newly))), folder / "recheck")
        asked = {c.key for c in newly}
        if again.exitstatus != 0 or {c.key for c in again.criteria} != asked:
            return results, ()  # a failed re-check, or one that reports more than was asked
        passed = {c.key: c for c in again.criteria if c.passed}
        flaky = tuple(c.key for c in newly if c.key in passed)
        if not flaky:
            return results, ()
        run.flaky.update(flaky)
        first = {c.key: c for c in newly}
        criteria = tuple(
            replace(c, outcome="passed", claimed=passed[c.key].claimed,
                    message=f"flaky: failed, then passed when re-checked with no change in "
                            f"between; the first check said: {why(first[c.key].message)}")
            if c.key in passed and c.key in first else c for c in results.criteria)
        return replace(results, criteria=criteria), flaky

    def _signature(self, results: CheckResults) -> list[tuple[str, str]]:
        """(criterion key or ``<check>``, fingerprint text) of every failure of ``results``:
        the text is the ``pytest_ralph_fingerprint`` hook's (built in: the normalized
        message)."""
        out = [(r.key, self.hooks.failure_fingerprint(r)) for r in results.failing]
        out += [("<check>", normalize_failure(e)) for e in results.errors]
        return out

    def _signature_of(self, it: IterationRecord) -> tuple[tuple[str, str], ...]:
        """:meth:`_signature` of an iteration's results, computed once."""
        if it.signature is None:
            it.signature = tuple(self._signature(it.results))
        return it.signature

    def _fingerprint(self, run: RunRecord, results: CheckResults) -> str:
        """The breaker's fingerprint of ``results``: criteria found flaky are left out."""
        return fingerprint([(k, t) for k, t in self._signature(results) if k not in run.flaky],
                           normalize=False)

    def _reload(self, run: RunRecord) -> PRD:
        """The PRD as it is now (the agent may edit it); the last good one if it is broken."""
        with contextlib.suppress(PRDError):
            run.prd = load_prd(run.prd.path, max_bytes=self.settings.max_prd_bytes)
        return run.prd

    def _write_back(self, prd: PRD, results: CheckResults, state: StateDir) -> None:
        if results.errors or not results.criteria:
            return
        try:  # the PRD as it was checked (the agent may have edited it)
            current = load_prd(prd.path, max_bytes=self.settings.max_prd_bytes)
        except PRDError:
            return
        write_back(prd.path, story_verdicts(results, current), state.root / "passes.json",
                   notes=story_notes(results, current))

    def _stop(self, run: RunRecord, status: str, code: int, reason: str) -> int:
        run.status, run.exit_code, run.reason = status, code, reason
        return code

    def _finish(self, run: RunRecord, state: StateDir) -> Path:
        """End the run: history, ``run.json``, progress.txt, the report (its path is
        returned), a pending escalation."""
        run.finished = _now()
        with contextlib.suppress(LoopUsageError):
            self._check_state(run, state)
        self.history.finish_run(run.run_dir.id, run.status, run.exit_code, run.reason,
                                run.finished)
        self._save(run)
        with contextlib.suppress(OSError):
            state.append_progress(f"## {run.finished.strftime('%Y-%m-%dT%H:%M:%SZ')} run "
                                  f"{run.run_dir.id} ended: {run.status} (exit {run.exit_code}): "
                                  f"{run.reason}\n")
        topic = slugify(self._redactor.text(run.prd.project or run.prd.branch_name or
                                            run.prd.path.stem)) or "prd"
        path = write_report(run, state.report_path(topic, run.started.date()),
                            redact=self._redactor.text)
        if run.pending_escalation is not None:  # the run's last word: with its report
            self._escalate(run, *run.pending_escalation, report=path)
            write_report(run, path, redact=self._redactor.text)
        self.report_path = path
        n = len(run.iterations) - 1
        self._print(f"pytest-ralph: {run.status} (exit {run.exit_code}) after {max(n, 0)} "
                    f"iteration{'s' if n != 1 else ''}: {run.reason}\n"
                    f"pytest-ralph: report {path}")
        return path

    # -- output ------------------------------------------------------------------------------

    def _warn(self, run: RunRecord, message: str) -> None:
        """Print a warning and keep it for the report."""
        run.warnings.append(message)
        self._print(f"pytest-ralph: warning: {message}")

    def _print(self, text: str) -> None:
        """Print to the terminal; a closed stdout (``| head``) stops the printing, not the loop."""
        if self._out_broken:
            return
        try:
            self.out.write(self._redactor.text(text) + "\n")
            self.out.flush()
        except (BrokenPipeError, ValueError, OSError):
            self._out_broken = True
            _silence(self.out)

    def _print_baseline(self, run: RunRecord) -> None:
        r = run.last.results
        total = len(r.criteria)
        selection = self._selection()
        self._print(f"[ralph baseline]\n  {len(r.passing)}/{total} criteria passing"
                    + (f"; failing: {_keys(r)}" if r.failing or r.errors else "")
                    + (f"\n  selected by {selection}: {plural(total, 'criterion', 'criteria')}"
                       if selection else ""))

    def _print_block(self, run: RunRecord, rec: IterationRecord) -> None:
        s = self.settings
        r = rec.results
        prev = run.iterations[-2].passing if len(run.iterations) > 1 else 0
        total = len(r.criteria) or len(run.prd.criteria())
        n_stories = len(r.by_story()) or len(run.prd.stories)
        goal = (f"{total} criteri{'a' if total != 1 else 'on'} of {n_stories} "
                f"stor{'ies' if n_stories != 1 else 'y'} pass ({run.prd.path.name})")
        tried = rec.agent.describe() if rec.agent else "baseline check"
        nfail = len(r.failing)
        if r.complete:
            result = "success: every criterion passes"
        elif r.errors and all(c.kind == "missing" for c in r.failing):
            result = f"failure: the checks could not run ({why(r.errors[0], 300)})"
        else:
            result = f"failure: {nfail} criteri{'a' if nfail != 1 else 'on'} failing ({_keys(r)})"
        delta = rec.passing - prev
        streak = f"identical-failure streak {rec.streak}/{s.breaker}"
        if rec.agent is not None and not rec.agent.ran:
            streak += (f" (unchanged: the agent did not run properly); agent-error streak "
                       f"{rec.error_streak}/{s.agent_errors}")
        regress = (f"\n  Regressions: {', '.join(rec.regressions)} passed before and fail now"
                   if rec.regressions else "")
        if rec.flaky:
            regress += (f"\n  Flaky: {', '.join(rec.flaky)} failed, then passed on a re-check "
                        "(left out of the breaker's fingerprint)")
        if rec.changes:
            regress += f"\n  Criteria changed: {_changes_text(rec.changes)}" + (
                " (allowed by --ralph-allow-criteria-edits)" if s.allow_criteria_edits else
                "; not counted as progress, and no completion until they are restored")
        story = f"  Story: {rec.story}\n" if rec.story else ""
        newly = [sid for sid in rec.blocked if sid not in (
            run.iterations[-2].blocked if len(run.iterations) > 1 else {})]
        before = run.iterations[-2].blocked if len(run.iterations) > 1 else {}
        for sid in before:
            if sid not in rec.blocked:
                regress += f"\n  Unblocked: {sid}: its criteria pass again"
        for sid in newly:
            regress += f"\n  Blocked: {sid}: {rec.blocked[sid]}"
        if newly and not r.complete:
            nxt = pick_story(run.prd, r, rec.blocked)
            regress += (f"; next: {nxt.id}" if nxt is not None else
                        "; no story left to work on")
        if s.budget is not None or s.max_cost is not None:
            left = self._remaining()
            regress += "\n  Budget: " + ", ".join(
                ([f"{max(left or 0, 0):.0f} s of {s.budget:g} s left"] if s.budget else [])
                + ([f"${run.cost:.4f} of ${s.max_cost:g} spent"] if s.max_cost else []))
        self._print(f"[ralph iteration {rec.n}/{s.max_iterations}]\n"
                    f"  Goal: {goal}\n{story}  Tried: {tried}\n  Result: {result}\n"
                    f"  State: {rec.passing}/{total} passing ({delta:+d}); {streak}{regress}")

    def _progress_entry(self, run: RunRecord, rec: IterationRecord) -> str:
        r = rec.results
        lines = [f"## {rec.started.strftime('%Y-%m-%dT%H:%M:%SZ')} run {run.run_dir.id} "
                 f"iteration {rec.n}/{self.settings.max_iterations}",
                 f"story: {rec.story or '-'}",
                 f"tried: {rec.agent.describe() if rec.agent else 'baseline'}"]
        if r.complete:
            lines.append(f"result: every criterion passes ({len(r.criteria)})")
        else:
            lines.append(f"result: {len(r.passing)}/{len(r.criteria)} passing; failing: "
                         f"{_keys(r)}")
            for c in r.failing[:10]:
                lines.append(f"why {c.key}: {why(c.message)}")
            for e in r.errors[:3]:
                lines.append(f"why <check>: {why(e)}")
        if rec.regressions:
            lines.append(f"regressions (passed before, fail now): {', '.join(rec.regressions)}")
        if rec.flaky:
            lines.append(f"flaky (failed, then passed on a re-check): {', '.join(rec.flaky)}")
        if rec.changes:
            lines.append(f"criteria changed: {_changes_text(rec.changes)}")
        before = run.iterations[-2].blocked if len(run.iterations) > 1 else {}
        for sid in before:
            if sid not in rec.blocked:
                lines.append(f"unblocked {sid}: its criteria pass again")
        for sid, reason in rec.blocked.items():
            lines.append(f"blocked {sid}: {reason}")
        if rec.diff:
            lines.append("changed: " + "; ".join(rec.diff.strip().splitlines()[-1:]))
        lines.append(f"streak: {rec.streak}/{self.settings.breaker}; agent-error streak: "
                     f"{rec.error_streak}/{self.settings.agent_errors}")
        return "\n".join(lines) + "\n"

    def _save(self, run: RunRecord) -> None:
        run.run_dir.write_summary({
            "run": run.run_dir.id, "prd": str(run.prd.path), "status": run.status,
            "exit_code": run.exit_code, "reason": run.reason, "agent": run.argv,
            "started": run.started.isoformat(),
            "finished": run.finished.isoformat() if run.finished else None,
            "max_iterations": self.settings.max_iterations, "breaker": self.settings.breaker,
            "cost_usd": round(run.cost, 6), "blocked": run.blocked,
            "rate_limited": [{"iteration": n, "outcome": a.outcome, "why": a.detail,
                              "paused": round(p, 3), "log": str(a.log_path)}
                             for n, a, p in run.attempts],
            "escalations": run.escalations,
            "iterations": [{
                "n": it.n, "story": it.story, "passing": it.passing,
                "total": len(it.results.criteria), "failing": [c.key for c in it.results.failing],
                "errors": list(it.results.errors), "fingerprint": it.fingerprint,
                "streak": it.streak, "error_streak": it.error_streak,
                "regressions": list(it.regressions), "flaky": list(it.flaky),
                "criteria_changed": [{"subject": ch.subject, "change": ch.change,
                                      "criteria": list(ch.criteria)} for ch in it.changes],
                "blocked": it.blocked, "diff_stat": it.diff,
                "agent": None if it.agent is None else {
                    "argv": list(it.agent.argv), "outcome": it.agent.outcome,
                    "exit_code": it.agent.exit_code, "duration": round(it.agent.duration, 3),
                    "why": it.agent.detail, "cost_usd": it.agent.cost_usd,
                    "input_tokens": it.agent.input_tokens,
                    "output_tokens": it.agent.output_tokens, "turns": it.agent.turns},
            } for it in run.iterations],
        })


def _home_short(path: Path, home: Path) -> str:
    """``path`` with the home folder written ``~``."""
    try:
        return "~/" + path.relative_to(home).as_posix()
    except ValueError:
        return str(path)


def _db_signature(db: Path) -> tuple[object, ...]:
    """Identity, size and modification time of the database and its WAL file: what our own
    commits change, so that a change between two of them was made by someone else."""
    out: list[object] = []
    for path in (db, db.with_name(db.name + "-wal")):
        try:
            st = path.stat()
        except OSError:
            out.append(None)
            continue
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _record(it: StoredIteration, run_dir: RunDir) -> IterationRecord:
    """An iteration of the history as the loop keeps it in memory."""
    return IterationRecord(it.n, it.results, it.agent.to_agent_run() if it.agent else None,
                           it.story, it.streak, it.error_streak, it.started,
                           run_dir.path / f"iteration-{it.n:03d}", it.regressions,
                           it.fingerprint, it.changes, it.flaky, dict(it.blocked), it.diff_stat)


def _silence(stream: TextIO) -> None:
    """Drain a broken stream into the null device: point its file descriptor there and
    flush what is still buffered, so that pytest's own last flush (after its capture has
    put the original descriptor back) has nothing left to write."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
        stream.flush()


def _merged(first: list[Change], then: list[Change]) -> list[Change]:
    """The changes of both lists, each subject once (its first report)."""
    seen = {ch.subject for ch in first}
    return [*first, *(ch for ch in then if ch.subject not in seen)]


def _changes_text(changes: tuple[Change, ...] | list[Change], most: int = 5) -> str:
    shown = ", ".join(ch.describe() for ch in changes[:most])
    return shown + (f", +{len(changes) - most} more" if len(changes) > most else "")


def _seconds(value: float) -> str:
    """``"2.5 s"``, ``"60 s"``: seconds with a decimal only when it matters."""
    return f"{value:.1f} s" if value < 10 and value != int(value) else f"{value:.0f} s"


def _repeats(run: RunRecord) -> dict[str, int]:
    """For the prompt: criteria that failed the same way in N checks in a row, N >= 2, kept
    only when an agent run worked on their story in between (for a story not tried yet, "the
    attempts so far did not change it" would not be true)."""
    out = {}
    for key, n in same_failure_counts([it.results for it in run.iterations]).items():
        sid = key.split("::", 1)[0]
        if any(it.story == sid and it.agent is not None for it in run.iterations[-n:][1:]):
            out[key] = n
    return out


def _regressions(run: RunRecord, results: CheckResults) -> tuple[str, ...]:
    """Keys failing in ``results`` that passed in an earlier check of ``run``."""
    passed_before = {c.key for it in run.iterations for c in it.results.passing}
    return tuple(c.key for c in results.failing if c.key in passed_before)




def _keys(r: CheckResults, most: int = 8) -> str:
    keys = [c.key for c in r.failing] + (["<check phase>"] if r.errors else [])
    shown = ", ".join(keys[:most])
    return shown + (f", +{len(keys) - most} more" if len(keys) > most else "")


def run_loop(loop: Loop, *, dry_run: bool, err: Callable[[str], None]) -> int:
    """Run ``loop`` (or its dry run) and map set-up errors to exit codes 4 and 5.

    Args:
        loop: the configured loop.
        dry_run: print the first prompt and argv only.
        err: prints an error message for the user.
    """
    try:
        return loop.dry_run() if dry_run else loop.run()
    except (LoopUsageError, StateError) as exc:  # StateError: progress.txt a folder, say
        err(f"pytest-ralph: {exc}")
        return EXIT_USAGE
    except NoCriteria as exc:
        err(f"pytest-ralph: {exc}")
        return EXIT_NO_CRITERIA
    except HookError as exc:
        err(f"pytest-ralph: {exc}")
        return EXIT_INTERNAL
