"""The loop controller behind ``pytest --ralph``.

One run: a baseline check of every criterion; if all pass, done with zero
iterations. Otherwise each iteration builds the prompt, runs the agent once, and
checks every criterion in a fresh child pytest. Stop conditions are evaluated after
each iteration, in this order: complete (exit 0) > agent-error streak (7) >
identical-failure breaker (6) > iteration limit (1). Ctrl-C or SIGTERM ends the run
with exit 2 after the agent's process group is killed and the report is written.

:class:`Loop` is the driver of this process: it resolves and runs the agent (confined by the
sandbox), pauses on rate limits, turns signals and ``--ralph-cancel`` into an end, and prints
the dry run. The checks, the records and every stop condition are the engine's
(:class:`pytest_ralph.loop.engine.RunEngine`), which it drives through its public steps.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..agents.activity import activity_for
from ..agents.presets import reader_for, resolve_agent
from ..agents.run import AgentCommandError, AgentRun, render_argv, resolve_executable, run_agent
from ..agents.unattended import unattended_flags
from ..checks.results import CheckResults, CriterionResult
from ..checks.verifier import VERIFIER_KIND
from ..oracle.importguard import guarded
from ..prd.describe import dialect_line
from ..prd.model import PRD, fold_text
from ..sandbox.bwrap import (
    Confinement,
    Sandbox,
    agent_confinement,
    cli_state_paths,
    prepare_state_paths,
)
from ..state.folder import StateDir, StateError
from ..util.env import ITERATION_ENV, PAUSE_FILE_ENV, PROMPT_FILE_ENV
from ..util.process import (
    become_subreaper,
    descendant_pids,
    sigterm_raises,
    sweep_descendants,
)
from ..util.redact import Redactor
from ..util.text import now as _now
from ..util.text import plural
from .engine import RunEngine
from .hooks import HookError, LoopHooks
from .live import LiveView, maybe_tty
from .prompt import PROGRESS_CHARS, PromptContext, pick_story
from .records import (
    EXIT_COMPLETE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NO_CRITERIA,
    EXIT_USAGE,
    Cancelled,
    Interrupted,
    LoopUsageError,
    NoCriteria,
    RunRecord,
    Turn,
)
from .report import shown_path
from .settings import Settings

if TYPE_CHECKING:
    from .breaker import Cursor


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
        quiet: no status line and no heartbeat lines (``-q``).
        tty: whether ``out`` is a terminal (the live view's status line), ``None``: ask
            ``out``.
    """

    def __init__(self, settings: Settings, *, rootdir: Path, inifile: Path | None,
                 out: TextIO = sys.stdout, python: str = sys.executable, keyword: str = "",
                 markexpr: str = "", junitxml: Path | None = None,
                 deselect: tuple[str, ...] = (), new_run: bool = False,
                 pythonpath: tuple[Path, ...] = (), child_args: tuple[str, ...] = (),
                 hooks: LoopHooks | None = None, sandbox: Sandbox | None = None,
                 banner: tuple[str, ...] = (), loop_anchors: tuple[Path, ...] = (),
                 quiet: bool = False, tty: bool | None = None) -> None:
        self.settings = settings
        self.banner = banner
        self.hooks = hooks or LoopHooks()
        self.rootdir = rootdir
        self.new_run = new_run
        #: The live view of the agent runs and the check phases (:mod:`pytest_ralph.loop.live`).
        self.live = LiveView(out, Redactor.from_env(),
                             tty=maybe_tty(out) if tty is None else tty,
                             heartbeat=settings.heartbeat, quiet=quiet)
        #: The engine this driver runs (the checks, the records, the stop conditions).
        self.engine = RunEngine(settings, rootdir=rootdir, inifile=inifile, out=out,
                                python=python, keyword=keyword, markexpr=markexpr,
                                junitxml=junitxml, deselect=deselect, pythonpath=pythonpath,
                                child_args=child_args, hooks=self.hooks, sandbox=sandbox,
                                loop_anchors=loop_anchors, live=self.live)
        #: The run of the last :meth:`run` (``None`` before one started), for inspection.
        self.last_run: RunRecord | None = None
        self._preset: str | None = None
        self._notes: list[str] = []  # warnings found before the run exists

    @property
    def report_path(self) -> Path | None:
        """The final report of the last :meth:`run` (``None`` until a run ended)."""
        return self.engine.report_path

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
        self.engine.template()
        _ = self.sandbox  # ralph_sandbox = required without bubblewrap: exit 4 now
        if self.settings.promise:
            self._notes.append(f"promise (from {self.settings.sources.get('promise')}) is "
                               "ignored: `pytest --ralph` completes on the checks alone; the "
                               "completion promise is for the Claude Code driver (`pytest "
                               "--ralph-init --ralph-driver claude --ralph-promise TEXT`)")
        return prd, argv

    def prepare_prd(self) -> PRD:
        """Find and load the PRD and apply the story filter (see
        :meth:`pytest_ralph.loop.engine.RunEngine.prepare_prd`)."""
        return self.engine.prepare_prd()

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox of agent runs and check phases (probed from the settings once).

        Raises:
            LoopUsageError: ``ralph_sandbox = required`` and bubblewrap cannot confine.
        """
        return self.engine.sandbox

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

    def unattended_lines(self, argv: list[str]) -> list[str]:
        """One line per flag of ``argv`` that turns off the agent's own permission prompts or
        sandbox (:func:`pytest_ralph.agents.unattended.unattended_flags`): the flag, what it
        lets the agent do, and whether the loop's sandbox confines it; none for an argv
        without such a flag.

        Raises:
            LoopUsageError: as :attr:`sandbox`.
        """
        sb = self.sandbox
        where = (f"the loop's sandbox ({sb.version or 'bubblewrap'}) confines it to the "
                 "project folder: it writes only there and in the paths listed above"
                 if sb.confined else
                 f"the loop's sandbox is off ({sb.reason}), so nothing confines it to the "
                 "project folder: it can do this anywhere you can (`--ralph-sandbox required` "
                 "refuses to run unconfined)")
        return [f"pytest-ralph: unattended: `{u.flag}` lets {u.cli} {u.grants}; {where}"
                for u in unattended_flags(argv)]

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

    def _text_kind(self, text: str) -> str:
        """How a text criterion is decided: ``text`` (a ``ralph_checks`` command),
        ``verifier`` or ``claimed``."""
        if fold_text(text) in dict(self.settings.checks):
            return "text"
        return VERIFIER_KIND if self.settings.verifier else "claimed"

    # -- dry run -----------------------------------------------------------------------------

    def dry_run(self) -> int:
        """Print the first prompt and the agent's argv; run nothing, write nothing."""
        prd, argv = self.prepare()
        eng = self.engine
        selected = eng.selected(prd)
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
        prompt = eng.redactor.text(self.hooks.build_prompt(eng.template(), ctx))
        argv = self.hooks.agent_command(list(argv), 1, pick_story(prd, fake))
        note = (f"\n{eng.selection()} is applied by the baseline check, which a dry run does "
                "not run: the prompt below covers every criterion of the selected stories."
                if eng.selection() else "")
        eng.say(f"pytest-ralph: {self.confinement_line()}")
        for line in self.unattended_lines(argv):
            eng.say(line)
        for line in self.banner:
            eng.say(line)
        eng.say(f"pytest-ralph dry run: PRD {prd.path}; nothing is run or written.{note}\n"
                f"{self._dialect_text(prd)}"
                f"--- agent argv ---\n"
                f"{eng.redactor.text(json.dumps(render_argv(argv, prompt_file)))}\n"
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
        self.engine.say(f"pytest-ralph: {self.confinement_line()}")
        for line in self.unattended_lines(argv):
            self.engine.say(line)
        for line in self.banner:
            self.engine.say(line)
        state = StateDir(self.settings.dir)
        if not self.sandbox.confined:
            become_subreaper()  # an orphan of the agent comes to the loop, not to init
            self.engine.keep = descendant_pids()
        with guarded(self.rootdir), self.engine.locked(state):
            return self._run_locked(prd, argv, state)

    def _run_locked(self, prd: PRD, argv: list[str], state: StateDir) -> int:
        s = self.settings
        eng = self.engine
        run = eng.open_run(prd, argv, state, new_run=self.new_run)
        self.last_run = run
        self.live.folder = run.run_dir.path
        run.confinement = self.confinement_line()
        for note in dict.fromkeys(self._notes):
            eng.warn(run, note)
        selected = eng.selected(prd)
        n_crit = sum(len(st.criteria) for st in selected)
        eng.say(f"pytest-ralph: loop on {prd.path} ({plural(n_crit, 'criterion', 'criteria')}"
                f" of {plural(len(selected), 'story', 'stories')}); agent "
                f"{eng.redactor.text(json.dumps(argv))}; max iterations {s.max_iterations}; "
                f"breaker "
                f"{s.breaker}; state {run.run_dir.path}")
        dialect = self._dialect_text(prd)
        if dialect:
            eng.say(dialect.rstrip("\n"))
        if run.resumed_from:
            done = max(len(run.iterations) - 1, 0)
            streak = run.last.streak if run.iterations else 0
            eng.say(f"pytest-ralph: resuming run {run.run_dir.id} ({run.resumed_from}) after "
                    f"{plural(done, 'iteration')}; identical-failure streak {streak}/"
                    f"{s.breaker} (--ralph-new starts a fresh run)")
        try:
            with sigterm_raises(Interrupted):
                code = self._iterate(run, state, argv)
        except HookError as exc:  # a plugin's or conftest.py's hook failed
            code = eng.stop(run, "crashed", EXIT_INTERNAL,
                            f"{exc}; fix it, then `pytest --ralph` resumes this run (with "
                            "--ralph-allow-criteria-edits when the fix is in a conftest.py)")
        except (KeyboardInterrupt, Interrupted, Cancelled) as exc:
            n = len(run.iterations)
            where = f"iteration {n}" if n else "the baseline check"
            if isinstance(exc, Cancelled) or eng.cancel_requested(run):
                code = eng.stop(run, "cancelled", EXIT_INTERRUPTED,
                                f"cancelled by `pytest --ralph-cancel` during {where}; the "
                                "processes it had started were stopped; `pytest --ralph` "
                                "resumes it")
            else:
                code = eng.stop(run, "interrupted", EXIT_INTERRUPTED,
                                f"interrupted during {where} (Ctrl-C or SIGTERM); the "
                                "processes it had started were stopped and the state kept; "
                                "`pytest --ralph` resumes it")
        try:
            eng.finish(run, state)
        finally:
            self.live.end()
        return code

    def _iterate(self, run: RunRecord, state: StateDir, argv: list[str]) -> int:
        eng = self.engine
        phase = eng.phase_config(run.prd, run.oracle)
        if not run.iterations:
            stop = eng.baseline(run, state, phase)
            if stop is not None:
                return stop
        phase = eng.expected_phase(run, phase)
        cur = eng.cursor(run)
        template = eng.template()
        n = run.last.n + 1
        while eng.allows(n):
            if eng.cancel_requested(run):
                raise Cancelled()
            spent = eng.stop_if_spent(run)
            if spent is not None:
                return spent
            eng.check_state(run, state)
            started = _now()
            folder = run.run_dir.iteration_dir(n)
            story, prompt = eng.next_prompt(run, state, template, n)
            agent_argv = self.hooks.agent_command(list(argv), n, story)
            self.hooks.before_iteration(n, story, prompt, agent_argv)
            self._shared_pause(run)
            before = eng.tree()
            reader = reader_for(argv)
            activity = activity_for(reader)
            self.live.title = f"[ralph iteration {n}/{self.settings.max_iterations}]"
            with self.live.phase("agent", log_path=folder / "agent.log", activity=activity):
                agent_run = run_agent(
                    agent_argv, prompt=prompt, prompt_file=folder / "prompt.md",
                    cwd=self.rootdir, timeout=eng.agent_timeout(),
                    log_path=folder / "agent.log",
                    env={ITERATION_ENV: str(n), PROMPT_FILE_ENV: str(folder / "prompt.md")},
                    reader=reader, redactor=eng.redactor, sandbox=self.sandbox,
                    confinement=self._agent_confinement(agent_argv)
                    if self.sandbox.confined else None,
                    on_log=self.live.echo if self.settings.echo else None,
                    on_stdout_line=activity.feed)
            eng.note_cost(run, agent_run)
            if not self.sandbox.confined:
                sweep_descendants(keep=eng.keep)  # what the agent left, supervisor or not
            if agent_run.outcome == "rate-limited":
                stop = self._rate_limited(run, cur, n, started, agent_run)
                if stop is not None:
                    return stop
                continue
            stop = eng.conclude(run, state, phase, cur, Turn(n, story, agent_run, started,
                                                             folder, before))
            if stop is not None:
                return stop
            n += 1
        return eng.stop_at_limit(run)

    # -- rate limits ---------------------------------------------------------------------

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

    def _rate_limited(self, run: RunRecord, cur: Cursor, n: int, started: _dt.datetime,
                      agent_run: AgentRun) -> int | None:
        """Record a rate-limited agent run (no iteration spent), then pause; or stop when
        the agent-error streak or the budget says so."""
        k = sum(1 for i, _, _ in run.attempts if i == n) + 1
        log = agent_run.log_path.with_name(f"agent.rate-limited-{k}.log")
        with contextlib.suppress(OSError):
            agent_run.log_path.replace(log)
            agent_run = replace(agent_run, log_path=log)
        wait, source = self._pause_for(agent_run)
        stop, attempt_id = self.engine.rate_limited(run, cur, n, started, agent_run, wait,
                                                    source)
        if stop is not None:
            return stop
        _share_pause(wait, source)
        began = time.monotonic()
        try:
            self._sleep(run, wait)
        finally:  # the pause as it really was (a cancel or Ctrl-C cuts it short)
            self.engine.paused(run, attempt_id, time.monotonic() - began)
        return None

    def _shared_pause(self, run: RunRecord) -> None:
        """In a lane of a parallel run: wait out the rate-limit pause another lane of the
        same agent wrote to the file :data:`PAUSE_FILE_ENV` names (nothing without it)."""
        until, why = _pause_until()
        if until > time.time():
            self.engine.say(f"pytest-ralph: pausing {until - time.time():.0f} s: another "
                            f"lane's agent was rate limited ({why})")
            self._sleep(run, until - time.time())

    def _sleep(self, run: RunRecord, seconds: float) -> None:
        """Pause ``seconds``, waking each second for ``--ralph-cancel`` (Ctrl-C and SIGTERM
        interrupt it at once)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 1.0))
            if self.engine.cancel_requested(run):
                raise Cancelled()


def _pause_until() -> tuple[float, str]:
    """The shared pause of a parallel run's lanes: (its end as a unix time, why); (0, "")
    without one."""
    name = os.environ.get(PAUSE_FILE_ENV)
    if not name:
        return 0.0, ""
    try:
        data = json.loads(Path(name).read_text(encoding="utf-8"))
        return float(data.get("until", 0.0)), str(data.get("why", ""))
    except (OSError, ValueError, TypeError, AttributeError):
        return 0.0, ""


def _share_pause(wait: float, why: str) -> None:
    """Tell the other lanes of a parallel run to pause ``wait`` seconds from now too."""
    name = os.environ.get(PAUSE_FILE_ENV)
    if not name:
        return
    until = max(time.time() + wait, _pause_until()[0])
    with contextlib.suppress(OSError):
        tmp = Path(f"{name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"until": until, "why": why}), encoding="utf-8")
        os.replace(tmp, name)


def _home_short(path: Path, home: Path) -> str:
    """``path`` with the home folder written ``~``."""
    try:
        return "~/" + path.relative_to(home).as_posix()
    except ValueError:
        return str(path)


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
