"""``pytest --ralph-status``: look at a loop from another terminal, through the run history
(:mod:`pytest_ralph.state.history`).

Status opens the history read-only: it never blocks the running loop (SQLite WAL readers
take no lock the writer waits for). Whether the loop of a run marked ``running`` still runs is
the state folder's lock's to say (:mod:`pytest_ralph.commands.control`).

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
from pathlib import Path

from ..claude.arming import MarkerError, read_marker
from ..loop.live import read_live
from ..state.folder import DB_NAME, RUNS_DIR
from ..state.history import History
from ..state.records import HistoryError, NoHistory, StoredRun
from .control import EXIT_HISTORY_ERROR, Lock, current_run, folder_lock, loop_runs, where


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return (f"{h} h {m} min" if h else f"{m} min {s} s" if m else f"{s} s")


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
        lock = folder_lock(state_root)
        run = current_run(history, lock) or history.last_run()
        if run is None:
            return 0, f"pytest-ralph: no runs yet in {state_root}"
        lines = _render(history, run, lock, now or _dt.datetime.now(_dt.timezone.utc),
                        state_root)
        lines += _others(history, run, lock)
        return 0, "\n".join(lines)


def has_loop_runs(state_root: Path) -> bool:
    """Whether the run history of ``state_root`` holds a run of a ``pytest --ralph`` loop
    (not only the lanes of a parallel run, which ``--ralph-status`` shows with the parallel
    run); ``True`` when it cannot be read, so that :func:`status` says why."""
    try:
        history = History.open(state_root / DB_NAME, readonly=True)
    except NoHistory:
        return False
    except HistoryError:
        return True
    with history:
        return history.last_run() is not None


def _live(folder: Path, now: _dt.datetime) -> list[str]:
    """The ``live:`` line of a running run, from the live-state record in its ``folder``
    (:func:`pytest_ralph.loop.live.read_live`): the phase running and for how long (up to
    ``now``), what it did so far, the agent's last event and its log; none without a
    record."""
    rec = read_live(folder)
    if rec is None:
        return []

    def text(key: str) -> str:
        value = rec.get(key)
        return " ".join(value.split())[:300] if isinstance(value, str) else ""

    elapsed = rec.get("elapsed")
    seconds = float(elapsed) if isinstance(elapsed, (int, float)) and not isinstance(
        elapsed, bool) and 0 <= elapsed < 1e9 else 0.0
    with contextlib.suppress(ValueError, TypeError, OverflowError):
        updated = _dt.datetime.fromisoformat(text("updated"))
        if rec.get("running") is True:
            seconds += max((now - updated).total_seconds(), 0.0)
    what, event, log = text("what"), text("last_event"), text("log")
    if rec.get("running") is True:
        head = (f"  live: {text('phase') or '?'} running for {_duration(seconds)}"
                + (f" in {text('title')}" if text("title") else "") + (f": {what}" if what
                                                                       else ""))
    else:
        head = (f"  live: between phases (after the {text('last_phase') or '?'} phase"
                + (f" of {text('title')}" if text("title") else "") + ")")
    return [head + (f"; last event: {event}" if event and event != what else "")
            + (f"; log {log}" if log else "")]


def _render(history: History, run: StoredRun, lock: Lock, now: _dt.datetime,
            state_root: Path) -> list[str]:
    """The status lines of ``run``: its id and PRD; its state (running here or elsewhere,
    crashed, ended, resumable, or a Claude Code run: driven by a session, armed, its arming
    file damaged) and exit code; its progress (iterations of ``max_iterations``), start and
    time spent (up to ``now`` while it runs); its reason and a cancel request; after its last
    check, the criteria passing per story, the failing ones (ten at most), the
    identical-failure and agent-error streaks and the blocked stories; the agent's cost, the
    rate-limited runs, and its last agent run. A run whose loop runs here also gets its
    ``live:`` line (:func:`_live`) from the run's folder in ``state_root``.

    ``lock`` is what the state folder's lock says
    (:func:`pytest_ralph.commands.control.folder_lock`); ``now`` is the current time (UTC).
    """
    settings = run.settings
    max_it = settings.get("max_iterations", "?")
    breaker = settings.get("breaker", "?")
    errors_max = settings.get("agent_errors", "?")
    iterations = history.iterations(run.id, with_criteria=False)
    done = max((it.n for it in iterations), default=0)
    state = run.status
    drv = history.driver(run.id)
    running = loop_runs(run, lock) if run.status == "running" else False
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
        state = f"running ({where(run)})"
    elif running is None:
        state = (f"running according to the history, but whether its loop ({where(run)}) "
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
    if running:
        lines += _live(state_root / RUNS_DIR / run.id, now)
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
        if failing or last.results.errors:  # the streaks count failures: none, no streak
            # Rate-limited runs after the last iteration add to its agent-error streak.
            later = sum(1 for a in history.attempts(run.id) if a.n > last.n)
            lines.append(f"  identical-failure streak {last.streak}/{breaker}; agent-error "
                         f"streak {last.error_streak + later}/{errors_max}")
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


def _others(history: History, shown: StoredRun, lock: Lock) -> list[str]:
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
            running = loop_runs(run, lock)
            if running:  # not resumable (and the run shown above, unless its pid was reused)
                continue
            label = "crashed" if running is False else "running, or crashed: cannot be told"
        elif run.resumable:
            label = run.status
        else:
            continue
        lines.append(f"  also resumable: run {run.id} of {run.prd} ({label})")
    return lines
