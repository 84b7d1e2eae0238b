"""The Claude Code driver: the loop of ``pytest --ralph``, one iteration per Stop event.

Instead of an outer process that runs the agent, a Claude Code session *is* the agent: each
time it ends a reply, its Stop hook (:mod:`pytest_ralph.hook`) calls :func:`on_stop`, which
checks every criterion in a child pytest, records the iteration in the same run history as
``pytest --ralph`` (:mod:`pytest_ralph.state.history`), and answers:

- every criterion passes (and the completion promise, if one was asked for, is the final
  message's own line): allow the stop; the run is ``complete`` and its report written;
- criteria fail within the limits: block the stop with the next prompt as the ``reason``
  (bounded well under Claude Code's 10,000-character cut) and a ``systemMessage``
  ``ralph iteration n/max: k criteria failing``;
- the iteration limit, the identical-failure breaker, every story blocked or the budget
  (``--ralph-max-cost`` is refused at arming: the hook is not told what a session cost):
  allow the stop with a ``systemMessage`` that says why and where the report is.

Arming checks the baseline (iteration 0), as ``pytest --ralph`` does before its first agent
run; the session's first turn (the user's own prompt) is iteration 1, and iteration ``n`` is
its turn after the ``(n-1)``-th block. So every Stop is an iteration that the oracle guard,
the breaker and the completion promise apply to. The loop's own limits bound it;
``stop_hook_active`` is not needed.

Output format: the Claude Code hooks reference, https://code.claude.com/docs/en/hooks
(``Stop`` decision control), as :mod:`pytest_ralph.claude.payload` writes it.

This module does not import pytest (the check phase runs pytest in a child process).
"""

from __future__ import annotations

import contextlib
import io
import re
import socket
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from ..agents.run import AgentRun
from ..loop.engine import RunEngine
from ..loop.gitdiff import work_mark
from ..loop.prompt import pick_story
from ..loop.records import (
    EXIT_COMPLETE,
    EXIT_INTERRUPTED,
    EXIT_NO_CRITERIA,
    EXIT_USAGE,
    LoopUsageError,
    NoCriteria,
    RunRecord,
    Turn,
)
from ..loop.settings import Settings, SettingsError, from_json, to_json
from ..oracle.importguard import guarded
from ..oracle.snapshot import snapshot_from_json, snapshot_to_json
from ..prd.errors import PRDError
from ..prd.load import load_prd
from ..prd.model import PRD
from ..state.folder import DB_NAME, RunDir, StateDir, StateError
from ..state.history import History
from ..state.records import HistoryError, NoHistory
from ..util.redact import Redactor
from ..util.text import now as _now
from ..util.text import plural
from .arming import (
    MARKER,
    SESSION_ARGV,
    Armed,
    MarkerError,
    read_marker,
    remove_marker,
    write_marker,
)
from .install import install_hook
from .payload import (
    StopPayload,
    allow,
    block,
    bound_text,
    find_promise,
    last_message,
)
from .settings_file import DEFAULT_TIMEOUT, SettingsFileError

#: The driver name recorded in the history (``drivers.driver``) and given to
#: ``--ralph-driver``.
DRIVER = "claude"


#: A prompt longer than this (UTF-16 units) is cut in the block ``reason``, which then
#: points at the prompt file for the rest.
REASON_PROMPT_CHARS = 7500

#: Longest check phase of one Stop, in seconds: under the hook's timeout in
#: the settings file (:data:`pytest_ralph.claude.settings_file.DEFAULT_TIMEOUT`, 600 s),
#: with time left for the git snapshot, the history and the answer.
STOP_CHECK_SECONDS = DEFAULT_TIMEOUT - 90.0

#: Name of the per-run log of what the hook printed (in the run's folder).
HOOK_LOG = "hook.log"


@dataclass(frozen=True)
class Answer:
    """What the hook prints.

    Attributes:
        stdout: ``""`` (allow the stop) or one JSON object (see :func:`pytest_ralph.
            stop_payload.block` / :func:`~pytest_ralph.claude.payload.allow`).
        stderr: text for stderr (shown in Claude Code's verbose mode), ``""`` for none.
    """

    stdout: str = ""
    stderr: str = ""


# -- arming ----------------------------------------------------------------------------------


def arm(settings: Settings, *, rootdir: Path, inifile: Path | None, python: str,
        pythonpath: tuple[Path, ...] = (), out: TextIO | None = None,
        scope: str | None = None) -> tuple[int, str]:
    """``pytest --ralph-init --ralph-driver claude``: install the Stop hook in
    ``<rootdir>/.claude/settings.local.json`` or ``settings.json``
    (:func:`pytest_ralph.claude.install.install_hook`: merged, idempotent, one copy) and arm
    a run, unless a driven run is already armed or running (the hook is installed then too).

    Args:
        settings: the effective settings; they are stored with the run and used by every
            Stop of it.
        rootdir: the project root (Claude Code's project folder).
        inifile: the configuration file of the check phases, or ``None``.
        python: the interpreter the hook command runs (``sys.executable``).
        pythonpath: ini ``pythonpath`` folders, for the oracle snapshot.
        scope: ``--ralph-hook-scope``: ``"local"``, ``"project"`` or ``None`` (where the hook
            is, else local).

    Returns:
        ``(exit code, text)``: 0 when the hook is installed and a run armed (or already
        armed); :data:`pytest_ralph.loop.records.EXIT_USAGE` (4) with the reason otherwise (a
        settings file that is not JSON, a bad PRD, a loop running on the state folder), or 5
        when there is no PRD or no criterion.
    """
    lines: list[str] = []
    if settings.promise and ("<promise>" in settings.promise or "</promise>" in settings.promise):
        return EXIT_USAGE, (f"pytest-ralph: the completion promise {settings.promise!r} (from "
                            f"{settings.sources.get('promise')}) holds a <promise> tag itself, "
                            "so no final message could ever hold it as <promise>TEXT</promise>; "
                            "give the text alone, e.g. --ralph-promise 'ALL DONE'")
    if settings.max_cost is not None:
        return EXIT_USAGE, (f"pytest-ralph: --ralph-max-cost (from "
                            f"{settings.sources.get('max_cost')}) cannot bound a Claude Code run: "
                            "its Stop hook is not told what the session cost; bound it with "
                            "--ralph-max-iterations or --ralph-budget")
    other = _armed_elsewhere(rootdir / MARKER, settings.dir) or _unstorable_secret(settings)
    if other:
        return EXIT_USAGE, other
    log = io.StringIO()
    driver = _Driver(stop_engine(settings, rootdir=rootdir, inifile=inifile, out=out or log,
                                 python=python, pythonpath=pythonpath))
    engine = driver.engine
    state = StateDir(settings.dir)
    try:
        prd = engine.prepare_prd()
        already = _already_armed(state)  # read-only: a Stop may hold the lock right now
        if already:
            return _with_hook(rootdir, python, scope, already)
        with engine.locked(state):  # the settings change only once arming can go ahead
            history = engine.history
            already = _already_armed(state, history)
            if already:
                return _with_hook(rootdir, python, scope, already)
            # A changed oracle is refused before anything is written (--ralph-accept-changes).
            accepted = engine.check_verified(prd, engine.snapshot_of(prd), state)
            code, hook_lines = _hook(rootdir, python, scope)
            if code:
                return code, "\n".join(hook_lines)
            lines += hook_lines
            lines += [f"pytest-ralph: warning: {note}" for note in accepted]
            run, report = driver.arm(prd, state, rootdir / MARKER)
            if report is not None:
                lines.append(log.getvalue().rstrip("\n"))
                lines.append(f"pytest-ralph: nothing armed: {run.reason}; report {report}")
                return run.exit_code or 0, "\n".join(lines)
    except (LoopUsageError, MarkerError) as exc:
        return EXIT_USAGE, "\n".join([*lines, f"pytest-ralph: {exc}"])
    except NoCriteria as exc:
        return EXIT_NO_CRITERIA, "\n".join([*lines, f"pytest-ralph: {exc}"])
    base = run.last.results
    n = len(base.criteria)
    promise = (f"; it also needs the final message to hold the line <promise>{settings.promise}"
               "</promise>" if settings.promise else "")
    lines.append(
        f"pytest-ralph: armed run {run.run_dir.id} on {prd.path} (baseline: "
        f"{len(base.passing)}/{n} criteria passing; max iterations {settings.max_iterations}, "
        f"breaker {settings.breaker}){promise}.\n"
        f"pytest-ralph: the first Claude Code session in {rootdir} that ends a reply adopts it; "
        "from then on, each time that session stops, its Stop hook checks every criterion and "
        "gives it the next prompt until all pass. Start one with, for example:\n"
        f"  claude \"Work on the user stories of {prd.path.name} until every acceptance "
        "criterion passes.\"\n"
        "pytest-ralph: `pytest --ralph-status` shows the run, `pytest --ralph-cancel` disarms "
        "it, `pytest --ralph-doctor` checks the wiring.")
    return 0, "\n".join(lines)


def _hook(rootdir: Path, python: str, scope: str | None) -> tuple[int, list[str]]:
    """Install the Stop hook (:func:`pytest_ralph.claude.install.install_hook`): ``(0, lines
    saying what was done)``, or ``(4, [the error])`` when a settings file cannot be read or
    written (then neither was changed by a bad read) or the interpreter path cannot be
    quoted."""
    try:
        done = install_hook(rootdir, python=python, scope=scope)
    except (SettingsFileError, ValueError) as exc:
        return EXIT_USAGE, [f"pytest-ralph: {exc}"]
    return 0, ([f"pytest-ralph: {line}" for line in done.lines]
               + [f"pytest-ralph: warning: {line}" for line in done.warnings])


def _with_hook(rootdir: Path, python: str, scope: str | None,
               already: str) -> tuple[int, str]:
    """A run is armed already: the hook is still installed (upgraded, moved or de-duplicated)
    so that it drives that run."""
    code, lines = _hook(rootdir, python, scope)
    return code, "\n".join(lines if code else [*lines, already])


#: Settings a Claude Code run never uses (there is no agent to start: the session is it).
_UNUSED_BY_THE_HOOK = ("agent", "agent_flags")


def _unstorable_secret(settings: Settings) -> str:
    """The refusal when a setting the Stop hook uses holds a secret that is no environment
    variable's whole value: the run history stores settings redacted, and every Stop rebuilds
    them from there, restoring ``[redacted $NAME]`` from its environment
    (:meth:`pytest_ralph.util.redact.Redactor.restore`); any other secret would be lost. ``""``
    when there is none."""
    redactor = Redactor.from_env()
    for name, value in to_json(settings).items():
        lost = [label for text in _strings(value) if not redactor.restores(text)
                for label in _LABEL.findall(redactor.restore(redactor.text(text)))]
        if name in _UNUSED_BY_THE_HOOK or not lost:
            continue
        return (f"pytest-ralph: {name} (from {settings.sources.get(name)}) holds a secret "
                f"({', '.join(dict.fromkeys(lost))}) that is not the value of an environment "
                "variable: a Claude Code run keeps its settings in the run history, where "
                "secrets are never written, so its Stop hook could not use it; put the secret "
                "in an environment variable and use that ($NAME in a command), or leave it out")
    return ""


#: A redaction label, ``[redacted GitHub token]`` or ``[redacted $NAME]``.
_LABEL = re.compile(r"\[redacted [^\]]*\]")


def _strings(value: object) -> list[str]:
    """Every string in a JSON value (lists nested)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [t for item in value for t in _strings(item)]
    return []


def _already_armed(state: StateDir, history: History | None = None) -> str:
    """The message for a driven run already armed or running in ``state`` (its arming file
    rewritten when it is missing or does not name it), or ``""`` when there is none."""
    if history is None:
        try:
            with History.open(state.root / DB_NAME, readonly=True) as ro:
                return _already_armed(state, ro)
        except HistoryError:  # none yet, or damaged: the locked open says what is wrong
            return ""
    for run in history.driven_runs():
        drv = history.driver(run.id)
        if drv is None:
            continue
        owner = (f"adopted by Claude Code session {drv.session_id}" if drv.session_id else
                 "waiting for the first Stop of a Claude Code session")
        note = ""
        try:
            intact = read_marker(drv.marker).run == run.id
        except MarkerError:
            intact = False
        if not intact:
            with contextlib.suppress(MarkerError):
                write_marker(Armed(drv.marker, run.id, state.root, run.rootdir, drv.session_id))
                note = f"; its arming file {drv.marker} was missing or damaged and is restored"
        return (f"pytest-ralph: run {run.id} of {run.prd} is already armed ({owner}){note}; "
                "nothing else to do (`pytest --ralph-cancel` disarms it)")
    return ""


def _armed_elsewhere(marker: Path, state_root: Path) -> str:
    """The refusal when the project's arming file names a run of *another* state folder that
    has not ended (arming here would take the hook away from it), else ``""``."""
    try:
        armed = read_marker(marker)
    except MarkerError:
        return ""  # none, or damaged: arming writes a new one
    if armed.state_dir.resolve() == state_root.resolve():
        return ""
    try:
        with History.open(armed.state_dir / DB_NAME, readonly=True) as other:
            run = other.run(armed.run)
    except HistoryError:
        return ""  # that history is gone: the arming file is stale
    if run is None or run.status != "running":
        return ""
    return (f"pytest-ralph: the arming file {marker} names run {armed.run} of the state folder "
            f"{armed.state_dir}, which has not ended; one Claude Code run per project: let it "
            f"finish, or disarm it first (`pytest --ralph-cancel` with ralph_dir "
            f"{armed.state_dir})")


def _good_prd_copy(run: RunRecord) -> Path:
    """Where the last PRD that loaded is kept for the run (a PRD broken between two Stops is
    then checked, and fails, instead of ending the loop)."""
    return run.run_dir.path / f"prd.last-good{run.prd.path.suffix}"


def _keep_good_prd(run: RunRecord) -> None:
    with contextlib.suppress(OSError):
        _good_prd_copy(run).write_bytes(run.prd.path.read_bytes())


# -- one Stop --------------------------------------------------------------------------------


def on_stop(armed: Armed, payload: StopPayload, *, python: str = sys.executable) -> Answer:
    """Answer one Stop event of the session that owns (or now adopts) the armed run.

    Args:
        armed: the arming file, as read by :func:`pytest_ralph.claude.arming.read_marker`.
        payload: the Stop payload; its ``session_id`` must be non-empty.
        python: the interpreter of the check phase's child pytest.

    Returns:
        The :class:`Answer`. Never raises for a bad state: an unreadable history, a run that
        is gone or ended, a loop holding the state folder, or a PRD that no longer loads all
        allow the stop and say why on stderr.
    """
    state = StateDir(armed.state_dir)
    db = state.root / DB_NAME
    try:
        db.stat()
        gone = False
    except FileNotFoundError:
        gone = True
    except OSError:  # cannot be told: History.open says why, and the arming file stays
        gone = False
    if gone:
        remove_marker(armed.path, armed.run)
        return Answer(stderr=f"pytest-ralph: the run history {db} named by {armed.path} does "
                             "not exist; the arming file was removed and the stop allowed")
    try:
        history = History.open(db, readonly=True)
    except NoHistory:
        remove_marker(armed.path, armed.run)
        return Answer(stderr=f"pytest-ralph: no run history in {db}; the stop is allowed")
    except HistoryError as exc:
        return Answer(stderr=f"pytest-ralph: {exc}; the stop is allowed")
    with history:
        stored = history.run(armed.run)
        drv = history.driver(armed.run)
    if stored is None or drv is None:
        remove_marker(armed.path, armed.run)
        return Answer(stderr=f"pytest-ralph: run {armed.run} (named by {armed.path}) is not a "
                             f"Claude Code run of {db}; the arming file was removed and the "
                             "stop allowed")
    if stored.status != "running":
        remove_marker(armed.path, armed.run)
        return Answer(stderr=f"pytest-ralph: run {armed.run} already ended ({stored.status}); "
                             "the arming file was removed and the stop allowed")
    if drv.session_id and drv.session_id != payload.session_id:
        return Answer()  # another session's run: never block it
    try:
        # Stored redacted: a secret that was an environment variable's comes back from it.
        settings = from_json(Redactor.from_env().restore_json(stored.settings),
                             f"run {stored.id} (settings stored when armed)")
    except SettingsError as exc:
        return Answer(stderr=f"pytest-ralph: {exc}; the stop is allowed")
    out = io.StringIO()
    driver = _Driver(stop_engine(settings, rootdir=stored.rootdir, inifile=drv.inifile,
                                 out=out, python=python))
    try:
        with guarded(stored.rootdir), driver.engine.locked(state):
            answer = driver.answer(stored.id, armed, payload)
    except (LoopUsageError, StateError) as exc:
        answer = Answer(stderr=f"pytest-ralph: {exc}; the stop is allowed")
    log = out.getvalue()
    if log:
        path = state.root / "runs" / stored.id / HOOK_LOG
        with contextlib.suppress(OSError), path.open("a", encoding="utf-8") as f:
            f.write(log)
    stderr = "\n".join(t for t in (log.rstrip("\n"), answer.stderr) if t)
    return Answer(answer.stdout, stderr)


def stop_engine(settings: Settings, *, rootdir: Path, inifile: Path | None,
                out: TextIO = sys.stdout, python: str = sys.executable,
                pythonpath: tuple[Path, ...] = ()) -> RunEngine:
    """The engine of a Claude Code run (:class:`pytest_ralph.loop.engine.RunEngine`): each
    check phase is cut to :data:`STOP_CHECK_SECONDS`, so that it ends (and a slow criterion
    fails as timed out) before Claude Code kills the hook at its timeout.

    Args:
        settings: the run's settings.
        rootdir: the project root.
        inifile: the configuration file of the check phases, or ``None``.
        out: where the engine prints (the hook keeps it in :data:`HOOK_LOG`).
        python: the interpreter of the check phases' child pytest.
        pythonpath: ini ``pythonpath`` folders, for the oracle snapshot.
    """
    return RunEngine(settings, rootdir=rootdir, inifile=inifile, out=out, python=python,
                     pythonpath=pythonpath, check_cap=STOP_CHECK_SECONDS)


class _Driver:
    """One Stop event = one turn of the run, on ``engine`` (:func:`stop_engine`), which it
    drives through its public steps."""

    def __init__(self, engine: RunEngine) -> None:
        self.engine = engine
        self.settings = engine.settings
        self.rootdir = engine.rootdir

    def confinement_line(self) -> str:
        """What is confined under this driver: the check phases, never the session."""
        sb = self.engine.sandbox
        return (f"the Claude Code session is not confined by pytest-ralph (it is the session "
                f"you started); its check phases are {sb.describe()}")

    def arm(self, prd: PRD, state: StateDir, marker: Path) -> tuple[RunRecord, Path | None]:
        """Record a new driven run of ``prd``, check its baseline now (so that every Stop of
        the session is an iteration the oracle guard and the completion promise apply to)
        and, unless that ends the run, write the arming file ``marker``. Needs
        :meth:`pytest_ralph.loop.engine.RunEngine.locked`.

        Returns:
            The run, and the report's path when the baseline ended it (every criterion
            passes, or none is selected), else ``None``.

        Raises:
            MarkerError: the arming file cannot be written (the run is then cancelled).
        """
        history = self.engine.history
        run_dir = state.new_run()
        oracle = self.engine.snapshot_of(prd)
        started = _now()
        history.arm_run(run_dir.id, prd=prd.path.resolve(), rootdir=self.rootdir,
                        argv=SESSION_ARGV, settings=to_json(self.settings), armed=started,
                        hostname=socket.gethostname(), oracle=snapshot_to_json(oracle),
                        driver=DRIVER, marker=marker, inifile=self.engine.inifile)
        self.engine.history_written()
        run = RunRecord(prd=prd, settings=self.settings, argv=list(SESSION_ARGV),
                        run_dir=run_dir, started=started, oracle=oracle,
                        confinement=self.confinement_line())
        if self.engine.baseline(run, state, self.engine.phase_config(prd, oracle)) is not None:
            return run, self.engine.finish(run, state)
        _keep_good_prd(run)  # after the baseline wrote its notes back
        try:
            write_marker(Armed(marker, run_dir.id, state.root, self.rootdir))
        except MarkerError:
            history.finish_run(run_dir.id, "cancelled", EXIT_INTERRUPTED, "the arming file "
                               "could not be written", _now())
            raise
        self._set_turn(run)  # the session's first turn starts here, after the arming file
        return run, None

    def answer(self, run_id: str, armed: Armed, payload: StopPayload) -> Answer:
        """One Stop, with the state folder locked and the history open."""
        history = self.engine.history
        stored = history.run(run_id)
        drv = history.driver(run_id)
        if stored is None or drv is None or stored.status != "running":
            return Answer(stderr=f"pytest-ralph: run {run_id} ended meanwhile; the stop is "
                                 "allowed")
        session = payload.session_id or ""
        if not drv.session_id:
            adopted = history.adopt(run_id, session)
            self.engine.history_written()
            if not adopted:  # another session was first
                return Answer()
            with contextlib.suppress(MarkerError):
                write_marker(Armed(armed.path, run_id, armed.state_dir, armed.rootdir, session))
            self.engine.say(f"pytest-ralph: Claude Code session {session} adopted run {run_id}")
        elif drv.session_id != session:
            return Answer()
        state = StateDir(self.settings.dir)
        run_dir = RunDir(state.root / "runs" / run_id)
        run_dir.path.mkdir(parents=True, exist_ok=True)
        try:
            prd = load_prd(stored.prd, max_bytes=self.settings.max_prd_bytes)
            broken = False
        except PRDError as exc:
            # Checked anyway with the last PRD that loaded: the check phase fails on the broken
            # file, so the iteration counts and the next prompt says what is wrong.
            copy = run_dir.path / f"prd.last-good{stored.prd.suffix}"
            try:
                prd = replace(load_prd(copy, max_bytes=self.settings.max_prd_bytes),
                              path=stored.prd)
            except PRDError:
                text = (f"pytest-ralph: the PRD of run {run_id} does not load, so the criteria "
                        f"cannot be checked: {exc.describe()}")
                return Answer(allow(text), text + "; the stop is allowed and the run stays "
                                                  "armed")
            broken = True
        run = RunRecord(prd=prd, settings=self.settings, argv=list(SESSION_ARGV),
                        run_dir=run_dir, started=stored.started,
                        confinement=self.confinement_line())
        if not broken:
            _keep_good_prd(run)
        try:
            run.oracle = snapshot_from_json(stored.oracle)
        except ValueError:
            run.oracle = self.engine.snapshot_of(prd)
        self.engine.load_iterations(run)
        # The budget counts from when the run was armed.
        self.engine.budget_from(stored.started)
        phase = self.engine.phase_config(prd, run.oracle)
        message: str | None = ""
        promise_missing = False
        if not run.iterations:
            code = self.engine.baseline(run, state, phase)
        else:
            # The criteria of the baseline (taken when the run was armed) are the ones checked:
            # one removed from the PRD since then fails as missing.
            phase = self.engine.expected_phase(run, replace(phase, expected=()))
            cur = self.engine.cursor(run)
            n = run.last.n + 1
            started = drv.turn_started or _now()
            story = pick_story(run.prd, run.last.results, run.blocked)
            if self.settings.promise:
                message = last_message(payload)
            agent = AgentRun(argv=(*SESSION_ARGV, session), outcome="ok", exit_code=0,
                             duration=max((_now() - started).total_seconds(), 0.0),
                             log_path=(Path(payload.transcript_path) if payload.transcript_path
                                       else run.run_dir.path / HOOK_LOG),
                             log_tail="", detail=f"Claude Code session {session}")
            code = self.engine.conclude(run, state, phase, cur, Turn(
                n, story, agent, started, run.run_dir.iteration_dir(n), drv.tree or None))
            unreadable = ""
            if code == EXIT_COMPLETE and self.settings.promise:
                if message is None:
                    # The criteria pass; the promise cannot be looked for: never wedge.
                    self._unstop(run)
                    code, promise_missing = None, True
                    unreadable = ("every criterion passes, but the final message cannot be "
                                  "read (no last_assistant_message, and "
                                  + (f"the transcript {payload.transcript_path!r} is missing "
                                     "or unreadable" if payload.transcript_path else
                                     "no transcript_path")
                                  + ") to look for the completion promise")
                elif not find_promise(message, self.settings.promise):
                    self._unstop(run)
                    code, promise_missing = None, True
            if code is None and n >= self.settings.max_iterations:
                code = self.engine.stop_at_limit(run)
                if promise_missing:
                    run.reason += "; " + (unreadable or "every criterion passes, but the final "
                                          "message never held the completion promise line")
            if code is None and unreadable:
                self._set_turn(run)
                self.engine.save(run)
                return Answer(allow(f"pytest-ralph: {unreadable}; the run stays armed"),
                              f"pytest-ralph: {unreadable}; the stop is allowed and the run "
                              "stays armed")
        if code is None:
            code = self.engine.stop_if_spent(run)
        if code is not None:
            now = history.run(run_id)
            if now is None or now.status != "running":  # cancelled while this Stop was checked
                return Answer(stderr=f"pytest-ralph: run {run_id} was "
                                     f"{now.status if now else 'removed'} while this Stop was "
                                     "being checked; the stop is allowed")
            report = self.engine.finish(run, state)
            remove_marker(armed.path, run_id)
            n_done = max(len(run.iterations) - 1, 0)
            text = (f"pytest-ralph: run {run_id} {run.status} after "
                    f"{plural(n_done, 'iteration')}: {run.reason}; report {report}")
            return Answer(allow(text), "")
        return self._block(run, state, promise_missing)

    def _set_turn(self, run: RunRecord) -> None:
        """Record that the session's next turn starts now, with the git tree and ``HEAD`` as
        they are (:func:`pytest_ralph.loop.gitdiff.work_mark`)."""
        self.engine.history.set_turn(run.run_dir.id, _now(), work_mark(self.rootdir))
        self.engine.history_written()

    def _unstop(self, run: RunRecord) -> None:
        """Take back a ``complete`` stop: the completion promise is still missing."""
        run.status, run.exit_code, run.reason = "running", None, ""

    def _block(self, run: RunRecord, state: StateDir, promise_missing: bool) -> Answer:
        """Block the stop with the next iteration's prompt (unless the run was cancelled
        while its criteria were being checked)."""
        s = self.settings
        now = self.engine.history.run(run.run_dir.id)
        if now is None or now.status != "running":
            status = now.status if now else "gone"
            return Answer(stderr=f"pytest-ralph: run {run.run_dir.id} was {status} while this "
                                 "Stop was being checked; the stop is allowed")
        n = run.last.n + 1
        folder = run.run_dir.iteration_dir(n)
        failing = len(run.last.results.failing)
        if promise_missing:
            total = len(run.last.results.criteria)
            prompt = (f"Every acceptance criterion of {run.prd.path.name} passes ({total}/"
                      f"{total}), as the checks say. This loop also asks for a completion "
                      "promise. If the work is really done, end your reply with this line, "
                      "exactly, on its own:\n\n"
                      f"<promise>{s.promise}</promise>\n\n"
                      "If it is not done, keep working; the checks run again when you stop.")
            system = (f"ralph iteration {n}/{s.max_iterations}: 0 criteria failing; waiting "
                      "for the completion promise")
        else:
            _, prompt = self.engine.next_prompt(run, state, self.engine.template(), n)
            if s.promise:
                prompt += ("\n\n## Completion promise\n\nWhen every acceptance criterion "
                           "passes, and only then, end your final message with this line, "
                           f"exactly, on its own:\n\n<promise>{s.promise}</promise>\n\nThe "
                           "promise alone completes nothing: the checks decide.")
            system = (f"ralph iteration {n}/{s.max_iterations}: "
                      f"{plural(failing, 'criterion', 'criteria')} failing")
        prompt_file = folder / "prompt.md"
        with contextlib.suppress(OSError):
            prompt_file.write_text(prompt, encoding="utf-8")
        reason = prompt
        if bound_text(prompt, REASON_PROMPT_CHARS) != prompt:  # UTF-16 units, as Claude Code
            reason = (bound_text(prompt, REASON_PROMPT_CHARS) + f"\n\nThe whole prompt of "
                      f"iteration {n} ({len(prompt)} characters) is in {prompt_file}: read "
                      "it before you go on.")
        self._set_turn(run)
        self.engine.save(run)
        return Answer(block(reason, system), "")

