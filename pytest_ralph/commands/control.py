"""``pytest --ralph-status`` and ``pytest --ralph-cancel``: look at or stop a loop from
another terminal, through the run history (:mod:`pytest_ralph.state.history`).

Status opens the history read-only: it never blocks the running loop (SQLite WAL readers
take no lock the writer waits for). Cancel sets the run's ``cancel_requested`` flag and
sends SIGTERM to the loop's process when it runs on this host; the loop stops its agent's
process group, records the run as ``cancelled``, writes its report and exits 2.

Whether a loop runs is decided by the state folder's lock (:meth:`StateDir.holder
<pytest_ralph.state.folder.StateDir.holder>`), not by the pid in the history: after a crash that
pid may belong to an unrelated process. A run marked ``running`` is running only while
the lock is held and the lock file names the run's pid. Without OS file locks (Windows)
the pid test (``os.kill(pid, 0)``) is the fallback.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
import signal
import socket
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from ..claude.arming import MarkerError, read_marker, remove_marker
from ..state.folder import DB_NAME, FILE_LOCKS, StateDir
from ..state.history import History
from ..state.records import HistoryError, NoHistory, StoredDriver, StoredRun

#: Exit code of ``--ralph-status`` / ``--ralph-cancel`` when the history cannot be read.
EXIT_HISTORY_ERROR = 4

#: What a resumable run was cancelled after, by its status (the reason recorded).
_AFTER = {"crashed": "a crash", "interrupted": "an interrupt", "agent-error": "agent errors"}


@dataclass(frozen=True)
class _Lock:
    """What the state folder's lock says.

    Attributes:
        held: a process holds the lock (a loop runs on the folder).
        pid: the pid written in the lock file by its holder, or ``None`` (not held, or
            no pid in the file).
        problem: why the lock could not be asked (``""`` if it could).
    """

    held: bool
    pid: int | None
    problem: str = ""


def _lock(state_root: Path) -> _Lock:
    """Ask the state folder's lock who holds it."""
    try:
        text = StateDir(state_root).holder()
    except OSError as exc:
        return _Lock(False, None, f"cannot read its lock file: {exc}")
    if text is None:
        return _Lock(False, None)
    m = re.match(r"pid (\d+)\b", text)
    return _Lock(True, int(m.group(1)) if m else None)


def _pid_alive(pid: int | None, hostname: str) -> bool:
    """The pid test, for platforms without file locks: a process with this pid exists here
    (it may be another process than the loop, if the loop died and the pid was reused)."""
    if pid is None or hostname != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _running(run: StoredRun, lock: _Lock) -> bool | None:
    """Whether the loop of ``run`` (status ``running``) still runs: ``True`` when the
    folder's lock is held and names the run's pid; ``None`` when the lock could not be
    asked (``lock.problem``); otherwise ``False`` (the loop died: a crash)."""
    if not FILE_LOCKS:  # pragma: no cover - Windows
        return _pid_alive(run.pid, run.hostname)
    if lock.problem:
        return None
    return lock.held and run.pid is not None and lock.pid == run.pid


def _current(history: History, lock: _Lock) -> StoredRun | None:
    """The run whose loop holds the folder's lock, or ``None``."""
    if not lock.held or lock.pid is None:
        return None
    row = history.connection.execute(
        "SELECT id FROM runs WHERE status = 'running' AND pid = ? "
        "ORDER BY updated DESC, id DESC LIMIT 1", (lock.pid,)).fetchone()
    return None if row is None else history.run(str(row[0]))


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return (f"{h} h {m} min" if h else f"{m} min {s} s" if m else f"{s} s")


def _where(run: StoredRun) -> str:
    host = "" if run.hostname == socket.gethostname() else f" on {run.hostname}"
    return f"pid {run.pid}{host}"


def _missing(path: Path) -> bool:
    """Whether nothing is at ``path``: ``False`` when something is there or when it cannot
    be told (a folder this user may not read: opening the history then says why)."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    return False


def status(state_root: Path, *, now: _dt.datetime | None = None) -> tuple[int, str]:
    """The status of the run in the state folder ``state_root``: the run whose loop holds
    the folder's lock, else the run started last; then one line for each other PRD whose
    last run the next ``pytest --ralph`` on that PRD would resume.

    Args:
        state_root: the state folder.
        now: the current time (UTC), for the time spent by a running loop.

    Returns:
        ``(exit code, text)``: 0 and the status text; 0 and "no runs yet" when there is no
        history; :data:`EXIT_HISTORY_ERROR` and the reason when it cannot be read.
    """
    db = state_root / DB_NAME
    try:
        history = History.open(db, readonly=True)
    except NoHistory:
        return 0, (f"pytest-ralph: no runs yet in {state_root} (`pytest --ralph` starts one)")
    except HistoryError as exc:
        return EXIT_HISTORY_ERROR, f"pytest-ralph: {exc}"
    with history:
        lock = _lock(state_root)
        run = _current(history, lock) or history.last_run()
        if run is None:
            return 0, f"pytest-ralph: no runs yet in {state_root}"
        lines = _render(history, run, lock, now or _dt.datetime.now(_dt.timezone.utc))
        lines += _others(history, run, lock)
        return 0, "\n".join(lines)


def _render(history: History, run: StoredRun, lock: _Lock, now: _dt.datetime) -> list[str]:
    settings = run.settings
    max_it = settings.get("max_iterations", "?")
    breaker = settings.get("breaker", "?")
    errors_max = settings.get("agent_errors", "?")
    iterations = history.iterations(run.id, with_criteria=False)
    done = max((it.n for it in iterations), default=0)
    state = run.status
    drv = history.driver(run.id)
    running = _running(run, lock) if run.status == "running" else False
    if drv is not None and run.status == "running":
        running = False
        state = (f"driven by Claude Code session {drv.session_id} through its Stop hook"
                 if drv.session_id else "armed for the Claude Code Stop hook: the first "
                 "Claude Code session that stops in the project adopts it")
        try:
            intact = read_marker(drv.marker).run == run.id
        except MarkerError:
            intact = False
        if not intact:
            state += (f"; but its arming file {drv.marker} is missing or damaged, so the hook "
                      "does not see the run: `pytest --ralph-init --ralph-driver claude` "
                      "restores it, `pytest --ralph-cancel` disarms the run")
    elif drv is not None:
        state += " (a Claude Code run; `pytest --ralph-init --ralph-driver claude` arms a new one)"
    elif running:
        state = f"running ({_where(run)})"
    elif running is None:
        state = (f"running according to the history, but whether its loop ({_where(run)}) "
                 f"still runs cannot be told: {lock.problem}")
    elif run.status == "running":
        state = (f"running according to the history, but its loop (pid {run.pid} on "
                 f"{run.hostname}) is gone: the next `pytest --ralph` resumes it")
    elif run.resumable:
        state += " (the next `pytest --ralph` resumes it; --ralph-new starts a new run)"
    if drv is not None and run.status == "running":
        progress = (f"iteration {done}/{max_it} checked; the next check runs when the "
                    "session stops" if iterations else "no check yet")
        end = now
    elif running is False:  # ended, or crashed: the time up to its last record
        progress = f"iteration {done}/{max_it}"
        end = run.finished or run.updated
    else:
        end = now
        if not iterations:
            progress = "baseline check running"
        elif isinstance(max_it, int) and done >= max_it:
            progress = f"iteration {done}/{max_it} done, the run is ending"
        else:
            progress = f"iteration {done}/{max_it} done, iteration {done + 1} running"
    lines = [f"pytest-ralph: run {run.id} of {run.prd}",
             f"  status: {state}" + (f"; exit {run.exit_code}" if run.exit_code is not None
                                      else ""),
             f"  {progress}; started {run.started.strftime('%Y-%m-%d %H:%M:%S UTC')}; time "
             f"spent {_duration((end - run.started).total_seconds())}"]
    if run.reason:
        lines.append(f"  reason: {run.reason}")
    if run.cancel_requested:
        lines.append("  cancel requested: yes")
    last = history.iteration(run.id, done) if iterations else None
    if last is not None:
        lines.append(f"  criteria: {last.passing}/{last.total} passing after "
                     + ("the baseline check" if last.n == 0 else f"iteration {last.n}"))
        for story, crits in last.results.by_story().items():
            passing = sum(c.passed for c in crits)
            claimed = sum(c.passed and c.claimed for c in crits)
            lines.append(f"    {story}: {passing} passing, {len(crits) - passing} failing, "
                         f"{claimed} claimed")
        failing = [c.key for c in last.results.failing]
        if failing:
            lines.append(f"  failing: {', '.join(failing[:10])}"
                         + (f", +{len(failing) - 10} more" if len(failing) > 10 else ""))
        # Rate-limited runs after the last iteration add to its agent-error streak.
        later = sum(1 for a in history.attempts(run.id) if a.n > last.n)
        lines.append(f"  identical-failure streak {last.streak}/{breaker}; agent-error streak "
                     f"{last.error_streak + later}/{errors_max}")
        for story, why in last.blocked.items():
            lines.append(f"  blocked: {story}: {why}")
    attempts = history.attempts(run.id)
    costs = [it.agent.cost_usd for it in iterations if it.agent is not None]
    costs += [a.agent.cost_usd for a in attempts]
    if any(c is not None for c in costs):
        lines.append(f"  agent cost: ${sum(c for c in costs if c is not None):.4f}")
    if attempts:
        lines.append(f"  rate limited: {len(attempts)} agent run(s), "
                     f"{_duration(sum(a.pause for a in attempts))} paused (not iterations)")
    agent = next((it for it in reversed(iterations) if it.agent is not None), None)
    if attempts and (agent is None or attempts[-1].n > agent.n):  # ended on rate limits
        r = attempts[-1].agent
        lines.append(f"  last agent run: iteration {attempts[-1].n}, {r.outcome}"
                     + (f": {r.why}" if r.why else "") + f" in {r.duration:.1f} s; log "
                     f"{r.log_path}")
    elif agent is not None and agent.agent is not None:
        a = agent.agent
        code = "no exit status" if a.exit_code is None else f"exit {a.exit_code}"
        why = f": {a.why}" if a.why else ""
        lines.append(f"  last agent run: iteration {agent.n}, {a.outcome}{why} ({code}) in "
                     f"{a.duration:.1f} s; log {a.log_path}")
    else:
        lines.append("  last agent run: none yet")
    return lines


def _others(history: History, shown: StoredRun, lock: _Lock) -> list[str]:
    """One line for each PRD other than ``shown``'s whose last run the next ``pytest --ralph``
    on it would resume, newest first."""
    lines = []
    prds = history.connection.execute(
        "SELECT prd FROM runs WHERE prd <> ? GROUP BY prd ORDER BY MAX(started) DESC",
        (str(shown.prd),)).fetchall()
    for (prd,) in prds:
        run = history.last_run(Path(prd))
        if run is None or history.driver(run.id) is not None:
            continue
        if run.status == "running":
            running = _running(run, lock)
            if running:  # not resumable (and the run shown above, unless its pid was reused)
                continue
            label = "crashed" if running is False else "running, or crashed: cannot be told"
        elif run.resumable:
            label = run.status
        else:
            continue
        lines.append(f"  also resumable: run {run.id} of {run.prd} ({label})")
    return lines


def cancel(state_root: Path) -> tuple[int, str]:
    """Cancel the current run in the state folder ``state_root``: see :func:`_cancel`.

    Returns:
        ``(exit code, message)``; :data:`EXIT_HISTORY_ERROR` when the history cannot be
        opened or written (a read-only folder, say).
    """
    try:
        return _cancel(state_root)
    except (sqlite3.Error, OSError) as exc:
        return EXIT_HISTORY_ERROR, (f"pytest-ralph: cannot record the cancel in "
                                    f"{state_root / DB_NAME}: {exc}; check that the state "
                                    "folder and its files are writable by you")


def _cancel(state_root: Path) -> tuple[int, str]:
    """Cancel the current run in the state folder ``state_root`` (idempotent).

    The current run is the one whose loop holds the folder's lock, else the run started
    last. A running loop gets its ``cancel_requested`` flag set and, when it runs on this
    host, SIGTERM; it then ends the run as ``cancelled`` (exit 2). A loop on another host
    sees the flag at its next iteration boundary. A run that stopped without finishing
    (interrupted, crashed, agent-error, or marked ``running`` by a loop that no longer
    holds the lock) is marked ``cancelled``, so that nothing restarts it by itself; only
    an explicit ``pytest --ralph`` resumes it. When the lock cannot be asked, only the
    flag is set and nothing is signalled.

    Returns:
        ``(exit code, message)``: 0 when the run is cancelled (now or before) or there is
        nothing to cancel; :data:`EXIT_HISTORY_ERROR` when the history cannot be opened.
    """
    db = state_root / DB_NAME
    if _missing(db):
        return 0, f"pytest-ralph: nothing to cancel: no runs yet in {state_root}"
    try:
        history = History.open(db)
    except HistoryError as exc:
        return EXIT_HISTORY_ERROR, f"pytest-ralph: {exc}"
    with history:
        lock = _lock(state_root)
        run = _current(history, lock) or history.last_run()
        if run is None:
            return 0, f"pytest-ralph: nothing to cancel: no runs yet in {state_root}"
        drv = history.driver(run.id)
        if drv is not None:
            return _disarm(history, run, drv)
        if run.status == "cancelled":
            return 0, (f"pytest-ralph: run {run.id} is already cancelled; `pytest --ralph` "
                       "resumes it")
        running = _running(run, lock) if run.status == "running" else False
        if running:
            newly = history.request_cancel(run.id)
            again = "requested" if newly else "requested again"
            if run.hostname != socket.gethostname():
                return 0, (f"pytest-ralph: cancel {again}: run {run.id} ({_where(run)}) "
                           "stops at its next iteration boundary, writes its report and "
                           "exits 2")
            assert run.pid is not None
            if _running(run, _lock(state_root)):  # still the same loop, right before the signal
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(run.pid, signal.SIGTERM)
            return 0, (f"pytest-ralph: cancel {again}: run {run.id} (pid {run.pid}) stops its "
                       "agent, writes its report and exits 2")
        if running is None:
            newly = history.request_cancel(run.id)
            return 0, (f"pytest-ralph: cancel {'requested' if newly else 'requested again'} "
                       f"for run {run.id}, without a signal: whether its loop ({_where(run)}) "
                       f"still runs cannot be told ({lock.problem}); a running loop stops at "
                       "its next iteration boundary")
        if run.status == "running" or run.resumable:
            crashed = run.status in ("running", "crashed")
            after = (f"a crash (its loop, pid {run.pid} on {run.hostname}, was gone)"
                     if run.status == "running" else _AFTER.get(run.status, run.status))
            history.request_cancel(run.id)
            history.set_status(run.id, "cancelled", f"cancelled by --ralph-cancel after {after}")
            what = (f"crashed: its loop, pid {run.pid}, is gone" if crashed else
                    f"{run.status}, no loop running")
            return 0, (f"pytest-ralph: run {run.id} ({what}) is now cancelled; `pytest "
                       "--ralph` resumes it")
        return 0, (f"pytest-ralph: nothing to cancel: the last run {run.id} already ended "
                   f"({run.status})")


def _disarm(history: History, run: StoredRun, drv: StoredDriver) -> tuple[int, str]:
    """Cancel a run of the Claude Code Stop hook: mark it ``cancelled`` and remove its arming
    file, so that the hook lets every session stop again (idempotent)."""
    removed = remove_marker(drv.marker, run.id)
    if run.status != "running":
        note = f"; removed its arming file {drv.marker}" if removed else ""
        return 0, (f"pytest-ralph: nothing to cancel: the Claude Code run {run.id} already "
                   f"ended ({run.status}){note}")
    history.request_cancel(run.id)
    who = (f"Claude Code session {drv.session_id}" if drv.session_id else
           "no session had adopted it yet")
    history.finish_run(run.id, "cancelled", 2, f"disarmed by --ralph-cancel ({who})",
                       _dt.datetime.now(_dt.timezone.utc))
    return 0, (f"pytest-ralph: run {run.id} is disarmed ({who}): the Stop hook lets every "
               f"session stop again; `pytest --ralph-init --ralph-driver claude` arms a new run")
