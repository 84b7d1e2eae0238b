"""``pytest --ralph-status`` and ``pytest --ralph-cancel``: look at or stop a loop from
another terminal, through the run history (:mod:`pytest_ralph.history`).

Status opens the history read-only: it never blocks the running loop (SQLite WAL readers
take no lock the writer waits for). Cancel sets the run's ``cancel_requested`` flag and
sends SIGTERM to the loop's process when it runs on this host; the loop stops its agent's
process group, records the run as ``cancelled``, writes its report and exits 2.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import signal
import socket
from pathlib import Path

from .history import DB_NAME, History, HistoryError, NoHistory, StoredRun

#: Exit code of ``--ralph-status`` / ``--ralph-cancel`` when the history cannot be read.
EXIT_HISTORY_ERROR = 4


def _alive(pid: int | None, hostname: str) -> bool:
    if pid is None or hostname != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return (f"{h} h {m} min" if h else f"{m} min {s} s" if m else f"{s} s")


def status(state_root: Path, *, now: _dt.datetime | None = None) -> tuple[int, str]:
    """The status of the current or last run in the state folder ``state_root``.

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
        run = history.last_run()
        if run is None:
            return 0, f"pytest-ralph: no runs yet in {state_root}"
        return 0, _render(history, run, now or _dt.datetime.now(_dt.timezone.utc))


def _render(history: History, run: StoredRun, now: _dt.datetime) -> str:
    settings = run.settings
    max_it = settings.get("max_iterations", "?")
    breaker = settings.get("breaker", "?")
    errors_max = settings.get("agent_errors", "?")
    iterations = history.iterations(run.id, with_criteria=False)
    done = max((it.n for it in iterations), default=0)
    state = run.status
    if run.status == "running":
        alive = _alive(run.pid, run.hostname)
        state = (f"running (pid {run.pid})" if alive else
                 f"running according to the history, but its loop (pid {run.pid} on "
                 f"{run.hostname}) is gone: the next `pytest --ralph` resumes it")
    elif run.resumable:
        state += " (the next `pytest --ralph` resumes it; --ralph-new starts a new run)"
    end = run.finished or now
    lines = [f"pytest-ralph: run {run.id} of {run.prd}",
             f"  status: {state}" + (f"; exit {run.exit_code}" if run.exit_code is not None
                                      else ""),
             f"  iteration {done}/{max_it}; started "
             f"{run.started.strftime('%Y-%m-%d %H:%M:%S UTC')}; time spent "
             f"{_duration((end - run.started).total_seconds())}"]
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
        lines.append(f"  identical-failure streak {last.streak}/{breaker}; agent-error streak "
                     f"{last.error_streak}/{errors_max}")
    agent = next((it for it in reversed(iterations) if it.agent is not None), None)
    if agent is not None and agent.agent is not None:
        a = agent.agent
        code = "no exit status" if a.exit_code is None else f"exit {a.exit_code}"
        lines.append(f"  last agent run: iteration {agent.n}, {a.outcome} ({code}) in "
                     f"{a.duration:.1f} s; log {a.log_path}")
    else:
        lines.append("  last agent run: none yet")
    return "\n".join(lines)


def cancel(state_root: Path) -> tuple[int, str]:
    """Cancel the current run in the state folder ``state_root`` (idempotent).

    A running loop gets its ``cancel_requested`` flag set and, when its process runs on
    this host, SIGTERM; it then ends the run as ``cancelled`` (exit 2). A run that stopped
    without finishing (interrupted, crashed, agent-error) is marked ``cancelled``, so that
    nothing restarts it by itself; only an explicit ``pytest --ralph`` resumes it.

    Returns:
        ``(exit code, message)``: 0 when the run is cancelled (now or before) or there is
        nothing to cancel; :data:`EXIT_HISTORY_ERROR` when the history cannot be opened.
    """
    db = state_root / DB_NAME
    if not db.exists():
        return 0, f"pytest-ralph: nothing to cancel: no runs yet in {state_root}"
    try:
        history = History.open(db)
    except HistoryError as exc:
        return EXIT_HISTORY_ERROR, f"pytest-ralph: {exc}"
    with history:
        run = history.last_run()
        if run is None:
            return 0, f"pytest-ralph: nothing to cancel: no runs yet in {state_root}"
        if run.status == "cancelled":
            return 0, (f"pytest-ralph: run {run.id} is already cancelled; `pytest --ralph` "
                       "resumes it")
        if run.status == "running" and _alive(run.pid, run.hostname):
            newly = history.request_cancel(run.id)
            assert run.pid is not None
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(run.pid, signal.SIGTERM)
            return 0, (f"pytest-ralph: cancel {'requested' if newly else 'requested again'}: "
                       f"run {run.id} (pid {run.pid}) stops its agent, writes its report and "
                       "exits 2")
        if run.status == "running" or run.resumable:
            history.request_cancel(run.id)
            history.set_status(run.id, "cancelled", f"cancelled by --ralph-cancel after "
                                                    f"{run.status}")
            return 0, (f"pytest-ralph: run {run.id} ({run.status}, no loop running) is now "
                       "cancelled; `pytest --ralph` resumes it")
        return 0, (f"pytest-ralph: nothing to cancel: the last run {run.id} already ended "
                   f"({run.status})")
