"""The loop engine: one run of the Ralph loop as a series of steps a driver calls.

A driver (the ``pytest --ralph`` controller, :class:`pytest_ralph.loop.controller.Loop`; the
Claude Code Stop hook, :mod:`pytest_ralph.claude.driver`) runs the agent its own way and
hands each agent turn to :class:`RunEngine`, through these public steps:

1. :meth:`RunEngine.prepare_prd`: find and load the PRD, apply the story filter;
2. :meth:`RunEngine.locked`: hold the state folder and open the run history for the rest;
3. :meth:`RunEngine.open_run` (resume the last run of the PRD, or start a new one after
   :meth:`RunEngine.check_verified`), or a driver's own start; :meth:`RunEngine.resume`,
   :meth:`RunEngine.load_iterations` rebuild a run from the history;
4. :meth:`RunEngine.baseline`: check every criterion before any agent turn (iteration 0);
5. per turn: :meth:`RunEngine.next_prompt` (the story and its prompt), then, once the agent's
   turn is over, :meth:`RunEngine.conclude`: the check phase, the flaky re-check, the oracle
   guard, the record and the stop decision (complete, the ``pytest_ralph_should_stop``
   decision: agent errors, the breaker, every story blocked);
6. the other stops: :meth:`RunEngine.stop_at_limit` (the iteration limit),
   :meth:`RunEngine.stop_if_spent` (the wall-clock budget, the cost limit),
   :meth:`RunEngine.rate_limited` (a rate-limited agent run);
7. :meth:`RunEngine.finish`: history, ``run.json``, progress.txt, the report.

Every stop condition, streak and budget is decided in one place: the counters, the
fingerprints, blocked stories and the stop decision in :mod:`pytest_ralph.loop.breaker`, the
iteration limit, the wall-clock budget and the cost limit in :mod:`pytest_ralph.loop.budget`.
The run's files are :mod:`pytest_ralph.loop.store`'s, the oracle snapshots
:mod:`pytest_ralph.loop.guard`'s, the terminal blocks :mod:`pytest_ralph.loop.output`'s.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from ..agents.run import AgentRun
from ..checks.phase import CheckPhaseConfig, run_check_phase
from ..checks.results import CheckResults
from ..checks.verdicts import apply
from ..oracle.bytecode import TrustedBytecode
from ..oracle.snapshot import (
    Change,
    Snapshot,
    snapshot_to_json,
    with_imports,
)
from ..prd.model import PRD, Story, slugify
from ..sandbox.bwrap import Sandbox
from ..state.folder import StateDir
from ..state.history import History
from ..util.process import sweep_descendants
from ..util.redact import Redactor
from ..util.text import now as _now
from .breaker import Breaker, Cursor
from .budget import Budget
from .escalation import escalate
from .gitdiff import config_digest, turn_change, work_mark
from .guard import OracleGuard
from .hooks import HookError, LoopHooks
from .live import LiveView
from .output import (
    Printer,
    baseline_block,
    end_entry,
    iteration_block,
    progress_entry,
    rate_limited_block,
)
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
    EXIT_LIMIT,
    EXIT_NO_CRITERIA,
    IterationRecord,
    LoopUsageError,
    RunRecord,
    Turn,
)
from .report import write_report
from .report_html import write_beside
from .scope import Scope
from .settings import Settings
from .store import RunStore


class RunEngine:
    """One run of the Ralph loop, step by step (see the module docstring).

    Args:
        settings: the effective settings.
        rootdir: the project root; the checks run there.
        inifile: the configuration file to pass to each child pytest, or ``None``.
        out: where the progress blocks are printed (secrets redacted).
        python: the interpreter for the child pytest of each check phase.
        keyword: a ``-k`` expression that selects criteria ("" for all).
        markexpr: a ``-m`` expression that selects criteria ("" for all).
        junitxml: where each check phase writes JUnit XML (the last one stays), or ``None``.
        deselect: node id prefixes deselected with ``--deselect``.
        pythonpath: the folders of ini ``pythonpath`` (absolute), for the oracle guard.
        child_args: plugin and ini-override options of the command line (``-p NAME``,
            ``-o KEY=VALUE``) that each check phase's child pytest gets too.
        hooks: the extension points (:class:`pytest_ralph.loop.hooks.LoopHooks`); built-in
            behaviour when ``None``.
        sandbox: the sandbox of the check phases (:func:`pytest_ralph.sandbox.bwrap.probe`);
            ``None``: probed from the settings on first use.
        loop_anchors: where this process's pytest looked for its initial ``conftest.py``
            files (guarded, see :func:`pytest_ralph.oracle.snapshot.loop_conftests`).
        check_cap: the longest one check phase may take, in seconds, whatever the budget
            leaves (``None``: no cap).
        live: the live view each check phase shows itself in (:class:`pytest_ralph.loop.live.
            LiveView`; its ``live.json`` goes to the run's folder), or ``None``: none.
    """

    def __init__(self, settings: Settings, *, rootdir: Path, inifile: Path | None,
                 out: TextIO = sys.stdout, python: str = sys.executable, keyword: str = "",
                 markexpr: str = "", junitxml: Path | None = None,
                 deselect: tuple[str, ...] = (), pythonpath: tuple[Path, ...] = (),
                 child_args: tuple[str, ...] = (), hooks: LoopHooks | None = None,
                 sandbox: Sandbox | None = None, loop_anchors: tuple[Path, ...] = (),
                 check_cap: float | None = None, live: LiveView | None = None) -> None:
        self.settings = settings
        #: The live view (``None``: none).
        self.live = live
        self.rootdir = rootdir
        self.inifile = inifile
        self.hooks = hooks or LoopHooks()
        self._scope = Scope(settings, rootdir=rootdir, inifile=inifile, python=python,
                            keyword=keyword, markexpr=markexpr, junitxml=junitxml,
                            deselect=deselect, child_args=child_args, hooks=self.hooks,
                            sandbox=sandbox)
        #: Replaces secrets in everything the run shows or writes.
        self.redactor = Redactor.from_env()
        #: Prints a line for the user (secrets redacted; a closed stdout stops it, not the run).
        self.say = Printer(out, self.redactor)
        if live is not None:
            self.say.before = live.clear
        #: The final report of the last run :meth:`finish` ended (``None`` until then).
        self.report_path: Path | None = None
        #: Processes this process had before the run (the sweeps after a phase spare them).
        self.keep: frozenset[int] = frozenset()
        #: git's configuration when the run started: git runs only while it is unchanged.
        self.git_trust = config_digest(rootdir)
        self._git = False  # the last iteration's change is known (a git work tree)
        self._bytecode: TrustedBytecode | None = None
        self._budget = Budget(settings, check_cap=check_cap)
        self._breaker = Breaker(settings, self.hooks)
        self._store = RunStore(settings, rootdir, self.redactor, self.say)
        self._guard = OracleGuard(settings, rootdir=rootdir, inifile=inifile,
                                  pythonpath=pythonpath, loop_anchors=loop_anchors,
                                  redactor=self.redactor, say=self.say)

    # -- set-up ------------------------------------------------------------------------------

    def prepare_prd(self) -> PRD:
        """Find and load the PRD and apply the story filter.

        Raises:
            LoopUsageError: bad PRD, unknown story ids mixed with known ones; ``workers`` set
                without pytest-xdist.
            NoCriteria: no PRD found, no stories, or the story filter matches none.
        """
        return self._scope.prepare_prd()

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox of agent runs and check phases (probed from the settings once).

        Raises:
            LoopUsageError: ``ralph_sandbox = required`` and bubblewrap cannot confine.
        """
        return self._scope.sandbox

    def selected(self, prd: PRD) -> list[Story]:
        """The stories of ``prd`` the story filter (``--ralph-story``) selects."""
        return self._scope.selected(prd)

    def selection(self) -> str:
        """``-k 'x' --deselect y``: the options that select criteria, as the user gave them."""
        return self._scope.selection()

    def phase_config(self, prd: PRD, oracle: Snapshot | None = None) -> CheckPhaseConfig:
        """The check-phase settings (:meth:`pytest_ralph.loop.scope.Scope.phase_config`);
        ``oracle``'s files and folders are read-only to a confined phase."""
        return self._scope.phase_config(prd, oracle, bytecode=self._bytecode)

    def template(self) -> str:
        """The prompt template (ini ``ralph_prompt``, or the built-in one).

        Raises:
            LoopUsageError: it cannot be read.
        """
        path = self.settings.prompt or template_path("prompt.md")
        try:
            return read_template(path)  # bounded; never blocks on a FIFO
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise LoopUsageError(f"cannot read the prompt template {path} (from "
                                 f"{self.settings.sources.get('prompt')}): {why}") from None

    @contextmanager
    def locked(self, state: StateDir) -> Iterator[None]:
        """Hold the state folder's loop lock with the run history open (and a private
        bytecode cache for the check phases) for the body; release all on the way out. The
        wall-clock budget starts here.

        Raises:
            LoopUsageError: another loop holds the lock, the folder cannot be used, or the
                history cannot be opened.
        """
        with self._store.locked(state):
            self._bytecode = TrustedBytecode.for_run(self.rootdir,
                                                     confined=self.sandbox.confined)
            self._bytecode.seed_rewritten()
            self._bytecode.prime_in_background(self._bytecode.sources_loaded_here())
            self._budget.start()
            try:
                yield
            finally:
                self._bytecode.close()

    @property
    def history(self) -> History:
        """The open run history (only within :meth:`locked`)."""
        return self._store.history

    def history_written(self) -> None:
        """Call after a driver's own write to :attr:`history`, so that the engine does not
        take it for someone else's (which rebuilds the history from memory)."""
        self._store.written()

    def snapshot_of(self, prd: PRD, start: Snapshot | None = None) -> Snapshot:
        """A snapshot of ``prd``'s oracle as it is now (see :func:`pytest_ralph.oracle.snapshot.
        snapshot`), with this run's settings; ``start``: the run's first snapshot."""
        return self._guard.snapshot(prd, start)

    def check_verified(self, prd: PRD, oracle: Snapshot, state: StateDir) -> list[str]:
        """Compare a new run's ``oracle`` with the last run's verified snapshot (see
        :mod:`pytest_ralph.state.verified`), keep copies of its guarded files for the next run's
        diff stat, and return the warnings for the run. Needs :meth:`locked`.

        Raises:
            LoopUsageError: the criteria or the files that judge them changed since the last
                run of ``prd`` started (or its snapshot cannot be read), and neither
                ``--ralph-accept-changes`` nor ``--ralph-allow-criteria-edits`` is given.
        """
        return self._guard.check_verified(prd, oracle, state, self.history)

    # -- start or resume ---------------------------------------------------------------------

    def open_run(self, prd: PRD, argv: list[str], state: StateDir, *,
                 new_run: bool = False) -> RunRecord:
        """The run of ``prd`` to go on with: the last one, resumed, when it can be (and
        ``new_run`` is false), else a new one (its oracle checked against the last verified
        one). Runs left ``running`` by a dead loop are marked crashed first. Needs
        :meth:`locked`.

        Raises:
            LoopUsageError: a run of the Claude Code Stop hook is armed or running here; the
                last run cannot be resumed as it is; the oracle changed (see
                :meth:`check_verified`).
        """
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
        if last is not None and last.resumable and not new_run:
            return self._store.resume(last, prd, argv, state, snapshot=self.snapshot_of)
        oracle = self.snapshot_of(prd)
        notes = self.check_verified(prd, oracle, state)
        run = RunRecord(prd=prd, settings=self.settings, argv=argv, run_dir=state.new_run(),
                        oracle=oracle, warnings=notes)
        if last is None:
            run.warnings += self._store.lost_runs(state, prd, run.run_dir.id)
        self._store.begin(run)
        return run

    def load_iterations(self, run: RunRecord) -> None:
        """Fill ``run`` with its iterations, flaky criteria and rate-limited attempts from the
        history."""
        self._store.load_iterations(run)

    # -- the checks --------------------------------------------------------------------------

    def check(self, phase: CheckPhaseConfig, folder: Path) -> CheckResults:
        """Run the check phase ``phase`` into ``folder``, bounded by :meth:`bounded` (shown in
        the live view, when there is one)."""
        if self.live is None:
            return run_check_phase(self.bounded(phase), folder)
        with self.live.phase("check", total=len(phase.expected)) as shown:
            return run_check_phase(self.bounded(phase), folder, progress=shown.progress_file)

    def baseline(self, run: RunRecord, state: StateDir, phase: CheckPhaseConfig) -> int | None:
        """Check every criterion before any agent run (iteration 0); the stop code when that
        ends the run (complete, or nothing selected), else ``None``."""
        folder = run.run_dir.iteration_dir(0)
        started = _now()
        if self.live is not None:
            self.live.title = "[ralph baseline]"
        base = self.check(replace(phase, report_imports=True), folder)
        self._learn_imports(run, base)
        if not phase.expected and not base.criteria and not base.errors:
            return self.stop(run, "no-criteria", EXIT_NO_CRITERIA,
                             f"{self.selection()} deselects every criterion of "
                             f"{run.prd.path}")
        self._scope.write_back(run.prd, base, state)
        self._store.record(run, IterationRecord(
            0, base, None, "", 0, 0, started, folder,
            fingerprint=self._breaker.fingerprint(run, base)), state)
        self.say(baseline_block(run, self.selection()))
        if base.complete:
            return self.stop(run, "complete", EXIT_COMPLETE,
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
                                  folders=(self.rootdir, run.prd.path.parent), prd=run.prd)
        with contextlib.suppress(Exception):  # a broken history is handled elsewhere
            self.history.set_oracle(run.run_dir.id, snapshot_to_json(run.oracle))
            self.history_written()
        self._store.point_at(run)

    def expected_phase(self, run: RunRecord, phase: CheckPhaseConfig) -> CheckPhaseConfig:
        """``phase`` expecting the criteria the baseline selected (with ``-k``/``-m`` the
        baseline says which), unless it names them already."""
        if phase.expected:
            return phase
        return replace(phase, expected=tuple((c.story, c.criterion, c.text)
                                             for c in run.iterations[0].results.criteria))

    def cursor(self, run: RunRecord) -> Cursor:
        """The breaker's counters to carry on with, rebuilt from the run's iterations; hand
        them to each :meth:`conclude` (which moves them on)."""
        return self._breaker.cursor(run)

    # -- one turn ----------------------------------------------------------------------------

    def next_prompt(self, run: RunRecord, state: StateDir, template: str,
                    n: int) -> tuple[Story | None, str]:
        """The story iteration ``n`` works on and its prompt (secrets redacted), from the PRD
        as it is now and the last check."""
        s = self.settings
        prd = self._scope.reload(run)
        prev = run.last.results
        held = run.blocked
        story = pick_story(prd, prev, held)
        prompt = self.redactor.text(self.hooks.build_prompt(template, PromptContext(
            prd, prev, n, s.max_iterations, self.rootdir,
            state.read_progress_tail(PROGRESS_CHARS),
            repeats=_repeats(run),
            regressions=run.last.regressions, blocked=held,
            last_change=run.last.diff or (NO_CHANGE if self._git and run.last.agent
                                          is not None else ""), run=run.run_dir.id)))
        return story, prompt

    def tree(self) -> str | None:
        """The project's git tree and ``HEAD`` now, to hand to :meth:`conclude` in a
        :class:`Turn` (see :func:`pytest_ralph.loop.gitdiff.work_mark`; ``None``: unknown)."""
        return work_mark(self.rootdir, self.git_trust)

    def conclude(self, run: RunRecord, state: StateDir, phase: CheckPhaseConfig,
                 cur: Cursor, turn: Turn) -> int | None:
        """Check what the agent's turn left, record iteration ``turn.n``, and decide: the stop
        code (complete, agent errors, all stories blocked, breaker), or ``None`` to go on.
        ``cur`` is updated in place."""
        s = self.settings
        n, story, agent_run, before = turn.n, turn.story, turn.agent, turn.tree
        prev = run.last.results
        held = run.blocked
        if before is not None and config_digest(self.rootdir) != self.git_trust:
            self.warn(run, "git's configuration (.git/config, ~/.gitconfig, info/attributes) "
                      "changed during the agent's turn: the loop does not run git again in "
                      "this run (it could run a command the agent configured), so the next "
                      "prompts show no diff")
            self.git_trust = "changed"
        after = work_mark(self.rootdir, self.git_trust) if before is not None else None
        diff, self._git = turn_change(self.rootdir, before, after, self.git_trust, NO_CHANGE)
        diff = self.redactor.text(diff)
        # The oracle as the agent's turn left it, before anything runs that could put it back
        # (a conftest.py that deletes itself when the check is over, say); and after the phase.
        ahead = self._guard.changes(run, phase)
        results = self.check(phase, turn.folder)
        results, flaky = self._breaker.recheck(run, phase, prev, results, turn.folder,
                                               self.check)
        if not self.sandbox.confined:
            sweep_descendants(keep=self.keep)  # a daemon of the code under test, say
        changes = _merged(ahead, self._guard.changes(run, phase))
        if changes and not s.allow_criteria_edits:
            results = apply(results, changes)
        self._scope.write_back(run.prd, results, state)
        fp = self._breaker.fingerprint(run, results)
        self._breaker.advance(cur, turn, fp, bool(changes))
        rec = IterationRecord(n, results, agent_run, story.id if story else "", cur.streak,
                              cur.error_streak, turn.started, turn.folder,
                              _regressions(run, results), fp, tuple(changes), flaky, diff=diff)
        newly, all_blocked = self._breaker.block(run, rec, held)
        self._store.record(run, rec, state)
        self._breaker.change_course(cur, newly, all_blocked, results.complete)
        self.say(iteration_block(run, rec, s, self._budget.remaining()))
        state.append_progress(self.redactor.text(progress_entry(run, rec, s)))
        self.hooks.after_iteration(n, results, agent_run, rec.story)
        if results.complete:
            return self.stop(run, "complete", EXIT_COMPLETE,
                             f"every criterion passes ({len(results.criteria)}/"
                             f"{len(results.criteria)})")
        decision = self._breaker.decide(run, rec, agent_run, newly, all_blocked)
        if decision.stop:
            if decision.escalate:
                run.pending_escalation = (decision.escalate,
                                          sorted({c.story for c in results.failing}))
            return self.stop(run, decision.status, decision.exit_code,
                             decision.reason + self._guard.tampered(run))
        if newly:
            _escalate(self, run, "story-blocked", newly)
        return None

    # -- limits, budgets, rate limits --------------------------------------------------------

    def allows(self, n: int) -> bool:
        """Whether iteration ``n`` is within the iteration limit."""
        return self._budget.allows(n)

    def bounded(self, phase: CheckPhaseConfig) -> CheckPhaseConfig:
        """``phase`` with its timeout cut to what is left of ``--ralph-budget`` (at least 1 s)
        and to the engine's ``check_cap``."""
        return self._budget.bounded(phase)

    def agent_timeout(self) -> float:
        """The agent's timeout: ``--ralph-agent-timeout``, cut to what is left of the budget."""
        return self._budget.agent_timeout()

    def budget_left(self) -> float | None:
        """Seconds the run's budget leaves (``None``: no budget)."""
        return self._budget.remaining()

    def budget_from(self, started: _dt.datetime) -> None:
        """Count the wall-clock budget from ``started`` (UTC; a run armed earlier, say)
        instead of from :meth:`locked`."""
        self._budget.count_back((_now() - started).total_seconds())

    def note_cost(self, run: RunRecord, agent_run: AgentRun) -> None:
        """Warn, once, when ``--ralph-max-cost`` is set and ``agent_run`` reports no cost."""
        if self._budget.uncounted(agent_run):
            self.warn(run, f"--ralph-max-cost {self.settings.max_cost:g}: the agent reports no "
                      f"cost ({agent_run.describe()}), so the cost limit cannot stop this run; "
                      "use --ralph-budget or --ralph-max-iterations to bound it")

    def stop_at_limit(self, run: RunRecord) -> int:
        """Stop at the iteration limit (exit 1)."""
        return self.stop(run, "limit", EXIT_LIMIT,
                         self._budget.limit_reason(run) + self._guard.tampered(run))

    def stop_if_spent(self, run: RunRecord) -> int | None:
        """Stop (exit 1) when the wall-clock budget or the cost limit is spent; else
        ``None``."""
        reason = self._budget.spent_reason(run)
        if not reason:
            return None
        return self.stop(run, "limit", EXIT_LIMIT, reason + self._guard.tampered(run))

    def rate_limited(self, run: RunRecord, cur: Cursor, n: int, started: _dt.datetime,
                     agent_run: AgentRun, wait: float, source: str) -> tuple[int | None, int]:
        """Record the rate-limited ``agent_run`` of iteration ``n`` (no iteration spent; it
        counts in the agent-error streak of ``cur``) with a pause of ``wait`` seconds
        (``source``: where that figure came from).

        Returns:
            The stop code when the agent-error streak (exit 7) or the budget (exit 1) ends
            the run instead of the pause, else ``None``; and the attempt's id in the
            history (for :meth:`paused`).
        """
        s = self.settings
        error_streak = cur.rate_limited()
        errors = self._breaker.rate_limit_reason(error_streak, agent_run)
        over = self._budget.pause_reason(wait, source)
        stopping = bool(errors or over)
        pause = 0.0 if stopping else wait
        run.attempts.append((n, agent_run, pause))
        attempt_id = self.history.record_attempt(run.run_dir.id, n, started=started,
                                                 agent=agent_run, pause=pause)
        self.history_written()
        self.say(rate_limited_block(n, s, agent_run.describe(), wait, source, error_streak,
                                    stopping))
        self.save(run)
        if errors:
            run.error_streak = error_streak
            return self.stop(run, "agent-error", EXIT_AGENT_ERROR, errors), attempt_id
        if over:
            return self.stop(run, "limit", EXIT_LIMIT, over), attempt_id
        return None, attempt_id

    def paused(self, run: RunRecord, attempt_id: int, seconds: float) -> None:
        """Record that the pause after the last rate-limited attempt lasted ``seconds``."""
        n, agent_run, _ = run.attempts[-1]
        run.attempts[-1] = (n, agent_run, seconds)
        with contextlib.suppress(Exception):
            self.history.set_attempt_pause(attempt_id, seconds)
            self.history_written()
        self.save(run)

    # -- the run's state and its end ---------------------------------------------------------

    def cancel_requested(self, run: RunRecord) -> bool:
        """Whether ``pytest --ralph-cancel`` asked ``run`` to stop."""
        with contextlib.suppress(Exception):  # a broken history is handled elsewhere
            return self.history.cancel_requested(run.run_dir.id)
        return False

    def check_state(self, run: RunRecord, state: StateDir) -> None:
        """Notice a state folder, lock file or history deleted or damaged during the run:
        recreate what is missing, rebuild the history from memory, say what was lost (see
        :meth:`pytest_ralph.loop.store.RunStore.check`).

        Raises:
            LoopUsageError: another loop took the lock, or the history became unusable.
        """
        self._store.check(run, state)

    def save(self, run: RunRecord) -> None:
        """Write the run's ``run.json``."""
        self._store.save(run)

    def stop(self, run: RunRecord, status: str, code: int, reason: str) -> int:
        """Mark ``run`` stopped (``status``, exit ``code``, ``reason``: one sentence); return
        ``code``. :meth:`finish` ends it."""
        run.status, run.exit_code, run.reason = status, code, reason
        return code

    def finish(self, run: RunRecord, state: StateDir) -> Path:
        """End the run: history, ``run.json``, progress.txt, the report (its path is
        returned), a pending escalation."""
        run.finished = _now()
        with contextlib.suppress(LoopUsageError):
            self.check_state(run, state)
        self.history.finish_run(run.run_dir.id, run.status, run.exit_code, run.reason,
                                run.finished)
        self.save(run)
        with contextlib.suppress(OSError):
            state.append_progress(end_entry(run))
        for it in run.iterations:  # the report shows each failure's fingerprint: the hook's
            with contextlib.suppress(HookError):  # texts, as the breaker compared them
                self._breaker.signature_of(it)
        topic = slugify(self.redactor.text(run.prd.project or run.prd.branch_name or
                                           run.prd.path.stem)) or "prd"
        path = write_report(run, state.report_path(topic, run.started.date()),
                            redact=self.redactor.text)
        if run.pending_escalation is not None:  # the run's last word: with its report
            _escalate(self, run, *run.pending_escalation, report=path)
            write_report(run, path, redact=self.redactor.text)
        if html_failed := write_beside(run, path, redact=self.redactor.text):  # the picture
            self.warn(run, html_failed)
        self.report_path = path
        n = len(run.iterations) - 1
        self.say(f"pytest-ralph: {run.status} (exit {run.exit_code}) after {max(n, 0)} "
                 f"iteration{'s' if n != 1 else ''}: {run.reason}\n"
                 f"pytest-ralph: report {path}")
        return path

    def warn(self, run: RunRecord, message: str) -> None:
        """Print a warning and keep it for the report."""
        run.warnings.append(message)
        self.say(f"pytest-ralph: warning: {message}")



def _merged(first: list[Change], then: list[Change]) -> list[Change]:
    """The changes of both lists, each subject once (its first report)."""
    seen = {ch.subject for ch in first}
    return [*first, *(ch for ch in then if ch.subject not in seen)]


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


def _escalate(engine: RunEngine, run: RunRecord, event: str, stories: list[str],
              report: Path | None = None) -> None:
    """Run ini ``ralph_escalate`` of ``engine`` (if set) with ``run``'s state dump on stdin;
    ``report`` is the run's report once written (the run ended)."""
    command = engine.settings.escalate
    if not command:
        return
    line, result = escalate(run, event, stories, command=command, rootdir=engine.rootdir,
                            redactor=engine.redactor, left=engine.budget_left(),
                            report=report)
    run.escalations.append(line)
    engine.say(f"pytest-ralph: {line}")
    with contextlib.suppress(Exception):
        engine.history.add_event(run.run_dir.id, "escalate", line, run.last.n)
        engine.history_written()
    if not result.ok:
        run.warnings.append(result.summary)
