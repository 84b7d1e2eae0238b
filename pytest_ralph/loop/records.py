"""What a run of the Ralph loop is made of, as the engine, its drivers and the report share it.

- the exit codes of ``pytest --ralph`` (``EXIT_*``, PRODUCT.md section 3); the Stop statuses
  of :mod:`pytest_ralph.loop.hooks` map onto them;
- the errors that end a run before it starts (:class:`LoopUsageError`, exit 4;
  :class:`NoCriteria`, exit 5) or during it (:class:`Interrupted`, :class:`Cancelled`);
- :class:`RunRecord` and :class:`IterationRecord`: a run and each of its checks, as the
  report, ``run.json`` and the prompt need them;
- :class:`Turn`: one agent turn handed to :meth:`pytest_ralph.loop.engine.RunEngine.conclude`.

This module does not import pytest.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path

from ..agents.run import AgentRun
from ..checks.fingerprint import failure_fingerprints
from ..checks.results import CheckResults
from ..oracle.snapshot import Change, Snapshot
from ..prd.model import PRD, Story
from ..state.folder import RunDir
from .settings import Settings

# Exit codes of ``pytest --ralph`` (PRODUCT.md section 3).
EXIT_COMPLETE = 0
EXIT_LIMIT = 1
EXIT_INTERRUPTED = 2
EXIT_INTERNAL = 3
EXIT_USAGE = 4
EXIT_NO_CRITERIA = 5
EXIT_BREAKER = 6
EXIT_AGENT_ERROR = 7


class LoopUsageError(Exception):
    """The loop cannot start: bad PRD, bad option, agent not found. Exit code 4."""


class NoCriteria(Exception):
    """Nothing to check: no PRD found, an empty PRD, or every criterion deselected. Exit 5."""


class Interrupted(Exception):
    """Ctrl-C or SIGTERM during a run."""


class Cancelled(Exception):
    """``pytest --ralph-cancel`` asked the run to stop (seen at an iteration boundary)."""


@dataclass
class IterationRecord:
    """What one iteration did and found (iteration 0 is the baseline check).

    Attributes:
        n: iteration number; 0 for the baseline.
        results: the check results after it.
        agent: the agent run, ``None`` for the baseline.
        story: the story the prompt asked for, or ``""``.
        streak: identical-failure streak after it.
        error_streak: agent-error streak after it.
        started: UTC time it started.
        folder: its folder in the state directory.
        regressions: keys of criteria that passed in an earlier check of the run and fail
            in this one.
        fingerprint: the failure fingerprint the breaker compares (flaky criteria left out;
            see :mod:`pytest_ralph.checks.fingerprint`); ``""`` when none of those fails.
        changes: what the agent changed in the oracle since the run started (see
            :mod:`pytest_ralph.oracle.snapshot`); non-empty marks a "criteria changed" iteration.
        flaky: keys of criteria that failed in this check, then passed when re-checked.
        blocked: stories blocked after it (story id -> why); see
            :mod:`pytest_ralph.loop.escalation`.
        diff: ``git diff --stat`` of what the iteration changed ("" when unknown), then
            the ``commits:`` line of :func:`pytest_ralph.loop.gitdiff.commit_moves` when the
            agent committed, amended or reset.
    """

    n: int
    results: CheckResults
    agent: AgentRun | None
    story: str
    streak: int
    error_streak: int
    started: _dt.datetime
    folder: Path
    regressions: tuple[str, ...] = ()
    fingerprint: str = ""
    changes: tuple[Change, ...] = ()
    flaky: tuple[str, ...] = ()
    blocked: dict[str, str] = field(default_factory=dict)
    diff: str = ""
    #: (criterion key, fingerprint text) of each failure, once computed (see
    #: :meth:`pytest_ralph.loop.breaker.Breaker.signature_of`).
    signature: tuple[tuple[str, str], ...] | None = field(default=None, compare=False,
                                                          repr=False)

    @property
    def passing(self) -> int:
        """Criteria passing after this iteration."""
        return len(self.results.passing)

    def failure_fingerprints(self) -> list[tuple[str, str]]:
        """(criterion key or ``<check>``, failure fingerprint) of each failure of this check
        (:func:`pytest_ralph.checks.fingerprint.failure_fingerprints`), from its
        :attr:`signature` once computed (the ``pytest_ralph_fingerprint`` hook's texts), else
        from the built-in text (the normalized message); ``[]`` when nothing fails. The one
        source of every fingerprint shown for a failure (terminal, report, escalation)."""
        if self.signature is not None:
            return failure_fingerprints(self.signature, normalize=False)
        return failure_fingerprints(self.results.failures())


@dataclass
class RunRecord:
    """A whole run, as the report needs it.

    Attributes:
        prd: the PRD (as last loaded).
        settings: the effective settings.
        argv: the agent argv (before ``{prompt_file}`` is replaced).
        run_dir: the run's folder.
        iterations: baseline first, then one record per iteration.
        status: ``running``, ``complete``, ``limit``, ``breaker``, ``agent-error``,
            ``interrupted`` or ``no-criteria``.
        exit_code: the exit code, once stopped.
        reason: the stop reason, one sentence.
        started, finished: UTC times.
        oracle: the oracle snapshot taken when the run started.
        flaky: keys of every criterion found flaky so far; the breaker ignores them.
        resumed_from: the status the run had when this process resumed it, or ``""``.
        warnings: things that went wrong around the run (state folder deleted, say).
        attempts: agent runs that did not spend an iteration (rate limits): (iteration,
            run, seconds paused after it).
        escalations: one line per escalation command run.
        pending_escalation: the escalation (event, story ids) to run once the report of an
            ending run is written.
        error_streak: the agent-error streak when the run stopped on it (it may end with
            rate-limited runs, which record no iteration).
        confinement: how the agent runs and check phases were confined, one line for the
            report (:meth:`pytest_ralph.loop.controller.Loop.confinement_line`, or the Stop
            hook driver's); ``""`` when not known.
    """

    prd: PRD
    settings: Settings
    argv: list[str]
    run_dir: RunDir
    iterations: list[IterationRecord] = field(default_factory=list)
    status: str = "running"
    exit_code: int | None = None
    reason: str = ""
    started: _dt.datetime = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc))
    finished: _dt.datetime | None = None
    oracle: Snapshot | None = None
    flaky: set[str] = field(default_factory=set)
    resumed_from: str = ""
    warnings: list[str] = field(default_factory=list)
    attempts: list[tuple[int, AgentRun, float]] = field(default_factory=list)
    escalations: list[str] = field(default_factory=list)
    pending_escalation: tuple[str, list[str]] | None = None
    error_streak: int = 0
    confinement: str = ""

    @property
    def last(self) -> IterationRecord:
        """The latest iteration (or the baseline)."""
        return self.iterations[-1]

    @property
    def cost(self) -> float:
        """US dollars the agent runs of this run cost, as the agent reported it."""
        runs = [it.agent for it in self.iterations if it.agent is not None]
        runs += [a for _, a, _ in self.attempts]
        return sum(a.cost_usd for a in runs if a.cost_usd is not None)

    @property
    def blocked(self) -> dict[str, str]:
        """Stories blocked so far (story id -> why)."""
        return self.iterations[-1].blocked if self.iterations else {}


@dataclass(frozen=True)
class Turn:
    """One agent turn to conclude: iteration ``n``, the story it was asked for, the agent
    run, when it started, its folder, and the git tree before it (``None``: unknown)."""

    n: int
    story: Story | None
    agent: AgentRun
    started: _dt.datetime
    folder: Path
    tree: str | None

