"""The loop controller's extension points, as plain methods.

:class:`LoopHooks` is the built-in behaviour of every point at which a plugin can change
what ``pytest --ralph`` does: the prompt, the agent command, the fingerprint of a failure,
the decision to stop, and notices when a PRD is loaded and around each iteration. The loop
(:mod:`pytest_ralph.loop.engine` and :mod:`pytest_ralph.loop.controller`) calls these
methods and nothing else; the pytest layer
(:mod:`pytest_ralph.plugin.hookimpls`) hands it a subclass that routes every call through the
``pytest_ralph_*`` hooks (:mod:`pytest_ralph.plugin.hookspecs`), where this built-in behaviour is
the ``trylast`` implementation.

This module does not import pytest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..checks.fingerprint import normalize_failure, same_failures
from ..util.text import plural
from .prompt import PromptContext, build_prompt
from .records import EXIT_AGENT_ERROR, EXIT_BREAKER, EXIT_LIMIT

if TYPE_CHECKING:
    from ..agents.run import AgentRun
    from ..checks.results import CheckResults, CriterionResult
    from ..prd.model import PRD, Story

class HookError(Exception):
    """An extension point's implementation failed: it raised, or returned a value of the
    wrong type. The message names the hook and says what happened; the loop ends the run
    (status ``crashed``, exit 3; a later ``pytest --ralph`` resumes it)."""


#: The escalation events a stop may ask for (``""``: none).
ESCALATIONS = ("", "breaker", "all-blocked")

#: Exit code and run status of each way a hook may stop a run (see :class:`StopDecision`).
STOP_STATUSES = {"limit": EXIT_LIMIT, "breaker": EXIT_BREAKER, "agent-error": EXIT_AGENT_ERROR}


@dataclass(frozen=True)
class StopContext:
    """What the stop decision sees after an iteration that left criteria failing.

    Attributes:
        iteration: the iteration just checked (1-based).
        max_iterations: the iteration limit (the loop stops there whatever the decision).
        results: the check results after it.
        agent: the agent run of the iteration.
        story: id of the story the iteration worked on, or ``""``.
        fingerprint: the failure fingerprint of ``results`` the breaker compares (16 hex
            digits; criteria found flaky left out; ``""`` when none of those fails).
        streak: iterations in a row that ended with this fingerprint while working on the
            same story (the identical-failure count).
        breaker: the identical-failure limit (ini ``ralph_breaker``).
        error_streak: agent runs in a row that did not run properly.
        agent_errors: the agent-error limit (ini ``ralph_agent_errors``).
        blocked: every blocked story after the iteration (story id -> why).
        newly_blocked: the stories this iteration blocked.
        all_blocked: every story with failing criteria is blocked.
        failures: (criterion key or ``<check>``, failure fingerprint) of each failure that
            ``fingerprint`` is made of (:func:`pytest_ralph.checks.fingerprint.
            failure_fingerprints`); the fingerprint of a single failure is ``fingerprint``.
    """

    iteration: int
    max_iterations: int
    results: CheckResults
    agent: AgentRun
    story: str
    fingerprint: str
    streak: int
    breaker: int
    error_streak: int
    agent_errors: int
    blocked: dict[str, str] = field(default_factory=dict)
    newly_blocked: tuple[str, ...] = ()
    all_blocked: bool = False
    failures: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class StopDecision:
    """Whether the run stops after an iteration, and how.

    Attributes:
        stop: ``True`` to end the run now; ``False`` to go on to the next iteration.
        reason: one sentence for the terminal, the history and the report (when stopping).
        status: how the run ends: ``"limit"`` (exit 1), ``"breaker"`` (exit 6) or
            ``"agent-error"`` (exit 7).
        escalate: the escalation event to run once the report is written (``"breaker"``,
            ``"all-blocked"``), or ``""`` for none; the failing stories are its subject.

    Raises:
        ValueError: ``status`` is not one of :data:`STOP_STATUSES`, or a stop has no reason.
    """

    stop: bool
    reason: str = ""
    status: str = "limit"
    escalate: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.stop, bool) or not isinstance(self.reason, str):
            raise ValueError(f"StopDecision({self.stop!r}, {self.reason!r}): expected stop to be "
                             "True or False and reason a str")
        if self.status not in STOP_STATUSES:
            raise ValueError(f"StopDecision status {self.status!r}: expected one of "
                             f"{', '.join(STOP_STATUSES)}")
        if self.escalate not in ESCALATIONS:
            raise ValueError(f"StopDecision escalate {self.escalate!r}: expected one of "
                             f"{', '.join(map(repr, ESCALATIONS))}")
        if self.stop and not self.reason.strip():
            raise ValueError("StopDecision(stop=True) needs a reason: one sentence saying why")

    @property
    def exit_code(self) -> int:
        """The loop's exit code for this stop (1, 6 or 7)."""
        return STOP_STATUSES[self.status]


#: The decision to go on with the next iteration.
GO_ON = StopDecision(False)




def decide_stop(ctx: StopContext) -> StopDecision:
    """The built-in stop decision, in this order: the agent-error streak (``agent-error``),
    every failing story blocked (``breaker``), the identical-failure circuit breaker
    (``breaker``); else go on. A story blocked by this iteration resets the breaker's count
    (the loop changes course) unless every story is blocked."""
    n, streak = ctx.iteration, ctx.streak
    if ctx.error_streak >= ctx.agent_errors:
        return StopDecision(True, f"the agent did not run properly in "
                            f"{plural(ctx.error_streak, 'iteration')} in a row (last: "
                            f"{ctx.agent.describe()}); see {ctx.agent.log_path}",
                            "agent-error")
    span = f"iteration {n}" if streak == 1 else f"iterations {n - streak + 1}-{n}"
    same = (same_failures(ctx.failures) if ctx.failures else
            f"the same failure (fingerprint {ctx.fingerprint})" if ctx.fingerprint else
            "the same failures")
    breaker = f"circuit breaker: {same} in {plural(streak, 'iteration')} in a row ({span})"
    if ctx.all_blocked:
        failing = sorted({c.story for c in ctx.results.failing})
        why = ("every remaining story is blocked (" + "; ".join(
            f"{sid}: {ctx.blocked.get(sid, '')}" for sid in failing) + ")")
        if streak >= ctx.breaker:
            why = f"{breaker}; {why}"
        return StopDecision(True, why, "breaker", escalate="all-blocked")
    if ctx.newly_blocked:
        return GO_ON
    if streak >= ctx.breaker:
        return StopDecision(True, f"{breaker}; the agent is not making progress", "breaker",
                            escalate="breaker")
    return GO_ON


class LoopHooks:
    """The built-in behaviour of the loop's extension points; subclass to change it.

    Each method is called by the loop (:class:`pytest_ralph.loop.engine.RunEngine`;
    :class:`pytest_ralph.loop.controller.Loop` around the agent run) at the point its
    docstring names. The pytest layer's subclass asks the ``pytest_ralph_*`` hooks first.
    """

    def prd_loaded(self, prd: PRD) -> None:
        """The loop has loaded and validated ``prd`` at its start (before the baseline check).

        Raises:
            pytest_ralph.PRDError: the PRD is refused; the loop exits 4 with its message.
        """

    def build_prompt(self, template: str, context: PromptContext) -> str:
        """The prompt text of the iteration ``context.iteration`` (secrets are redacted from
        what this returns)."""
        return build_prompt(template, context)

    def agent_command(self, argv: list[str], iteration: int, story: Story | None) -> list[str]:
        """The agent argv of ``iteration`` (``{prompt_file}`` in it is replaced afterwards)."""
        return argv

    def before_iteration(self, iteration: int, story: Story | None, prompt: str,
                         argv: list[str]) -> None:
        """Iteration ``iteration`` is about to run the agent ``argv`` with ``prompt``."""

    def after_iteration(self, iteration: int, results: CheckResults, agent: AgentRun,
                        story: str) -> None:
        """Iteration ``iteration`` has been checked and recorded (before the stop decision)."""

    def failure_fingerprint(self, result: CriterionResult) -> str:
        """The text that stands for the failing ``result`` in the failure fingerprint:
        failures with equal texts count as the same failure."""
        return normalize_failure(result.message)

    def should_stop(self, context: StopContext) -> StopDecision:
        """Whether to stop after an iteration that left criteria failing (see
        :func:`decide_stop`)."""
        return decide_stop(context)
