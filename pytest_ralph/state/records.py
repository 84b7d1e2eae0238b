"""The records of the run history: what a row of each table is read back as, the run
statuses, the errors, and the conversions between rows and Python values (times as ISO
8601 UTC text, JSON columns).

This module does not import pytest.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..agents.run import AgentRun
from ..checks.results import CheckResults, CriterionResult
from ..oracle.snapshot import Change

#: Every run status. ``running`` while the loop runs; the rest are how a run ended.
RUN_STATUSES = ("running", "complete", "limit", "breaker", "agent-error", "interrupted",
                "cancelled", "crashed", "no-criteria")

#: Statuses after which the next ``pytest --ralph`` continues the run.
RESUMABLE = ("interrupted", "cancelled", "crashed", "agent-error")

#: Criterion outcomes.
CRITERION_OUTCOMES = ("passed", "failed")

_UTC = _dt.timezone.utc


class HistoryError(Exception):
    """The history cannot be used. The message names the file, what was expected or found,
    and how to recover."""


class NoHistory(HistoryError):
    """A read-only open found no history yet (no file, or an empty one); nothing was
    created."""


# -- stored rows -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredRun:
    """One row of ``runs``.

    Attributes:
        id: the run id (``20261129-235728-834fa6``).
        prd: the PRD file.
        rootdir: the project root.
        argv: the agent argv (before ``{prompt_file}`` is replaced).
        settings: the effective settings as a JSON object (values that were not JSON,
            such as paths, as text).
        status: one of :data:`RUN_STATUSES`.
        exit_code: the exit code of ``pytest --ralph`` once finished, else ``None``.
        reason: the stop reason or the reason of the last status change.
        started: UTC time the run started.
        finished: UTC time it finished; ``None`` while running or after a crash.
        updated: UTC time of the last write to the run (status, iteration, cancel).
        pid: the process id of the loop that runs or ran it.
        hostname: the host of that process.
        cancel_requested: ``pytest --ralph-cancel`` asked the run to stop.
        oracle: the oracle snapshot taken when the run started, as
            :func:`pytest_ralph.oracle.snapshot.snapshot_to_json` gives it (``{}`` if none).
    """

    id: str
    prd: Path
    rootdir: Path
    argv: tuple[str, ...]
    settings: dict[str, Any]
    status: str
    exit_code: int | None
    reason: str
    started: _dt.datetime
    finished: _dt.datetime | None
    updated: _dt.datetime
    pid: int | None
    hostname: str
    cancel_requested: bool
    oracle: dict[str, Any] = field(default_factory=dict)

    @property
    def resumable(self) -> bool:
        """Whether the status is one the next ``pytest --ralph`` continues
        (:data:`RESUMABLE`)."""
        return self.status in RESUMABLE


@dataclass(frozen=True)
class StoredDriver:
    """One row of ``drivers``: how a run driven by a Claude Code Stop hook is wired.

    Attributes:
        run_id: the run.
        driver: ``claude``.
        marker: the arming file the hook looks for (see :mod:`pytest_ralph.claude.arming`).
        inifile: the configuration file each check phase uses, or ``None``.
        session_id: the Claude Code session that adopted the run; ``""`` until one does.
        armed: UTC time the run was armed.
        adopted: UTC time a session adopted it, or ``None``.
        turn_started: UTC time the hook last blocked a stop (the agent's turn began), or
            ``None``.
        tree: the git tree id and ``HEAD`` taken at that time (see
            :func:`pytest_ralph.loop.gitdiff.work_mark`; a bare tree id from an older
            version), ``""`` when unknown.
    """

    run_id: str
    driver: str
    marker: Path
    inifile: Path | None
    session_id: str
    armed: _dt.datetime
    adopted: _dt.datetime | None
    turn_started: _dt.datetime | None
    tree: str


@dataclass(frozen=True)
class StoredAgentRun:
    """One row of ``agent_runs``: the agent run of one iteration.

    Attributes:
        argv: the argv that was run.
        exit_code: the exit status; negative for a signal; ``None`` on timeout or not-found.
        duration: wall-clock seconds.
        outcome: one of :data:`pytest_ralph.agents.run.OUTCOMES`.
        log_path: the file holding the agent's output.
        detail: the tail of that log as it was when the iteration was recorded.
        why: what the CLI's structured output said about the outcome, or ``""``.
        cost_usd, input_tokens, output_tokens, turns: as the CLI reported them, or ``None``.
    """

    argv: tuple[str, ...]
    exit_code: int | None
    duration: float
    outcome: str
    log_path: Path
    detail: str
    why: str = ""
    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    turns: int | None = None

    def to_agent_run(self) -> AgentRun:
        """The same run as a :class:`pytest_ralph.agents.run.AgentRun` (``log_tail`` =
        ``detail``)."""
        return AgentRun(self.argv, self.outcome, self.exit_code, self.duration, self.log_path,
                        self.detail, detail=self.why, cost_usd=self.cost_usd,
                        input_tokens=self.input_tokens, output_tokens=self.output_tokens,
                        turns=self.turns)


@dataclass(frozen=True)
class StoredAttempt:
    """One row of ``agent_attempts``: an agent run that did not spend an iteration.

    Attributes:
        n: the iteration it was an attempt at.
        started: UTC time it started.
        agent: the run (``log_tail`` empty).
        pause: seconds the loop paused after it.
    """

    n: int
    started: _dt.datetime
    agent: StoredAgentRun
    pause: float


@dataclass(frozen=True)
class StoredIteration:
    """One row of ``iterations`` with its agent run and criterion results.

    Attributes:
        run_id: the run.
        n: iteration number; 0 is the baseline check.
        story: the story the prompt asked for, or ``""``.
        started, finished: UTC times.
        passing: criteria passing after it.
        total: criteria checked.
        fingerprint: the failure fingerprint the breaker compared.
        streak: identical-failure streak after it.
        error_streak: agent-error streak after it.
        regressions: keys (``US-001::AC1``) that passed before and failed here.
        flaky: keys that failed, then passed on a re-check.
        changes: the oracle changes seen after it.
        blocked: stories blocked after it (story id -> why).
        diff_stat: ``git diff --stat`` of what it changed (``""``: unknown or nothing),
            then the ``commits:`` line of :func:`pytest_ralph.loop.gitdiff.commit_moves`
            when the agent moved ``HEAD``.
        results: the check results, criteria in collection order (empty ``criteria`` when
            read with ``with_criteria=False``; ``passing`` and ``total`` stay right).
        agent: its agent run, ``None`` for the baseline.
    """

    run_id: str
    n: int
    story: str
    started: _dt.datetime
    finished: _dt.datetime
    passing: int
    total: int
    fingerprint: str
    streak: int
    error_streak: int
    regressions: tuple[str, ...]
    flaky: tuple[str, ...]
    changes: tuple[Change, ...]
    results: CheckResults
    agent: StoredAgentRun | None = field(default=None)
    blocked: dict[str, str] = field(default_factory=dict)
    diff_stat: str = ""


@dataclass(frozen=True)
class StoredEvent:
    """One row of ``events``.

    Attributes:
        id: increasing event id.
        run_id: the run.
        n: the iteration it belongs to, or ``None``.
        time: UTC time.
        kind: what happened (``status``, ``cancel-requested``, or the caller's kind).
        message: one line for people.
    """

    id: int
    run_id: str
    n: int | None
    time: _dt.datetime
    kind: str
    message: str


# -- rows and values ---------------------------------------------------------------------------


def stored_run(row: Sequence[Any]) -> StoredRun:
    """A row of ``runs`` (columns :data:`pytest_ralph.state.schema.RUN_COLUMNS`)."""
    (rid, prd, rootdir, argv, settings, status, exit_code, reason, started, finished, updated,
     pid, hostname, cancel, oracle) = row
    return StoredRun(str(rid), Path(prd), Path(rootdir), tuple(json.loads(argv)),
                     dict(json.loads(settings)), str(status),
                     None if exit_code is None else int(exit_code), str(reason), from_iso(started),
                     None if finished is None else from_iso(finished), from_iso(updated),
                     None if pid is None else int(pid), str(hostname), bool(cancel),
                     dict(json.loads(oracle)))


def stored_agent(row: Sequence[Any]) -> StoredAgentRun:
    """A row of ``agent_runs`` (columns :data:`pytest_ralph.state.schema.AGENT_COLUMNS_V2`, or
    of a schema 1 file :data:`pytest_ralph.state.schema.AGENT_COLUMNS`)."""
    argv, exit_code, duration, outcome, log_path, detail = row[:6]
    extra = tuple(row[6:11]) if len(row) >= 11 else ("", None, None, None, None)  # schema v1
    why, cost, tokens_in, tokens_out, turns = extra
    return StoredAgentRun(tuple(json.loads(argv)), None if exit_code is None else int(exit_code),
                          float(duration), str(outcome), Path(log_path), str(detail),
                          str(why or ""), None if cost is None else float(cost),
                          _int(tokens_in), _int(tokens_out), _int(turns))


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def finite(value: float | None) -> float | None:
    """``value`` if it is a finite number, else ``None`` (SQLite has no NaN)."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def criterion_result(row: Sequence[Any]) -> CriterionResult:
    """A row of ``criterion_results`` (columns
    :data:`pytest_ralph.state.schema.CRITERION_COLUMNS`)."""
    nodeid, story, criterion, text, kind, outcome, message, claimed, duration = row
    return CriterionResult(nodeid=nodeid, story=story, criterion=criterion, text=text, kind=kind,
                           outcome=outcome, message=message, claimed=bool(claimed),
                           duration=float(duration))


def stored_iteration(row: Sequence[Any], criteria: list[CriterionResult],
                     agent: StoredAgentRun | None) -> StoredIteration:
    """A row of ``iterations`` (columns :data:`pytest_ralph.state.schema.ITERATION_COLUMNS`,
    plus ``blocked, diff_stat`` from schema 2 on) with its criterion results and agent run."""
    (run_id, n, story, started, finished, passing, total, exitstatus, check_duration,
     fingerprint, streak, error_streak, regressions, flaky, changed, errors, extra) = row[:17]
    blocked = json.loads(row[17]) if len(row) > 17 else {}
    diff_stat = str(row[18]) if len(row) > 18 else ""
    results = CheckResults(tuple(criteria), tuple(json.loads(errors)), int(exitstatus),
                           float(check_duration), extra=dict(json.loads(extra)))
    changes = tuple(Change(str(c["subject"]), str(c["change"]), tuple(c["criteria"]),
                           str(c.get("detail", ""))) for c in json.loads(changed))
    return StoredIteration(str(run_id), int(n), str(story), from_iso(started),
                           from_iso(finished), int(passing), int(total), str(fingerprint),
                           int(streak),
                           int(error_streak), tuple(json.loads(regressions)),
                           tuple(json.loads(flaky)), changes, results, agent,
                           {str(k): str(v) for k, v in dict(blocked).items()}, diff_stat)


def iso(when: _dt.datetime) -> str:
    """ISO 8601 UTC text with microseconds (fixed width, so text order is time order);
    a naive time is taken as UTC."""
    when = when.replace(tzinfo=_UTC) if when.tzinfo is None else when.astimezone(_UTC)
    return when.isoformat(timespec="microseconds")


def from_iso(text: str) -> _dt.datetime:
    """The UTC time of ISO 8601 text as :func:`iso` writes it (a naive time is taken as UTC)."""
    when = _dt.datetime.fromisoformat(text)
    return when.replace(tzinfo=_UTC) if when.tzinfo is None else when.astimezone(_UTC)


def to_json(value: Any) -> str:
    """``value`` as JSON text (non-ASCII kept; what is not JSON as its ``str``)."""
    return json.dumps(value, ensure_ascii=False, default=str)

