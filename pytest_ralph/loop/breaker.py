"""The circuit breaker: streaks, failure fingerprints, the flaky re-check and per-story
blocking, and the stop decision after each iteration.

- :class:`Cursor` holds the running counters between iterations: the identical-failure
  streak, the agent-error streak, the fingerprint the next check is compared with and the
  story the last agent run worked on;
- :class:`Breaker` computes the fingerprint of a check (the ``pytest_ralph_fingerprint``
  hook's texts, flaky criteria left out), re-checks criteria that passed before and fail now
  (one that passes again is flaky), moves the counters on after a turn, says which stories
  are blocked (:mod:`pytest_ralph.loop.escalation`) and asks the ``pytest_ralph_should_stop``
  hook (:meth:`pytest_ralph.loop.hooks.LoopHooks.should_stop`) whether to stop.

Only the engine (:class:`pytest_ralph.loop.engine.RunEngine`) uses it.

This module does not import pytest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..agents.run import AgentRun
from ..checks.fingerprint import failure_fingerprints, fingerprint, normalize_failure
from ..checks.phase import CheckPhaseConfig
from ..checks.results import CheckResults
from ..util.text import plural
from .escalation import Step, blocked, story_states
from .hooks import LoopHooks, StopContext, StopDecision
from .records import IterationRecord, RunRecord, Turn
from .report import why
from .settings import Settings

#: Runs a check phase into a folder (the engine's, bounded by the budget).
CheckFn = Callable[[CheckPhaseConfig, Path], CheckResults]


@dataclass
class Cursor:
    """The breaker's running counters between iterations: the identical-failure ``streak``,
    the agent-error streak, the fingerprint the next check is compared with, and the story
    the last agent run worked on."""

    streak: int = 0
    error_streak: int = 0
    last_fp: str | None = None
    last_story: str = ""

    def rate_limited(self) -> int:
        """Count a rate-limited agent run as an agent error; the agent-error streak now."""
        self.error_streak += 1
        return self.error_streak


class Breaker:
    """The breaker of one run.

    Args:
        settings: the effective settings (``breaker``, ``agent_errors``,
            ``story_max_iterations``, ``allow_criteria_edits``, ``max_iterations``).
        hooks: the extension points (the fingerprint text and the stop decision).
    """

    def __init__(self, settings: Settings, hooks: LoopHooks) -> None:
        self.settings = settings
        self.hooks = hooks

    # -- fingerprints --------------------------------------------------------------------

    def signature(self, results: CheckResults) -> list[tuple[str, str]]:
        """(criterion key or ``<check>``, fingerprint text) of every failure of ``results``:
        the text is the ``pytest_ralph_fingerprint`` hook's (built in: the normalized
        message)."""
        out = [(r.key, self.hooks.failure_fingerprint(r)) for r in results.failing]
        out += [("<check>", normalize_failure(e)) for e in results.errors]
        return out

    def signature_of(self, it: IterationRecord) -> tuple[tuple[str, str], ...]:
        """:meth:`signature` of an iteration's results, computed once."""
        if it.signature is None:
            it.signature = tuple(self.signature(it.results))
        return it.signature

    def fingerprint(self, run: RunRecord, results: CheckResults) -> str:
        """The breaker's fingerprint of ``results``: criteria found flaky are left out."""
        return fingerprint([(k, t) for k, t in self.signature(results) if k not in run.flaky],
                           normalize=False)

    def last_fingerprint(self, run: RunRecord) -> str | None:
        """The fingerprint the breaker compares the next iteration with."""
        last: str | None = None
        for it in run.iterations[1:]:
            if it.agent is not None and it.agent.ran and not (
                    it.changes and not self.settings.allow_criteria_edits):
                last = it.fingerprint
        return last

    # -- the counters --------------------------------------------------------------------

    def cursor(self, run: RunRecord) -> Cursor:
        """The breaker's counters to carry on with, rebuilt from the run's iterations."""
        # A resumed run carries on: its streak and last fingerprint; the agent-error streak
        # starts again (the user was there to fix the agent).
        cur = Cursor(streak=run.last.streak,
                     error_streak=0 if run.resumed_from else run.last.error_streak,
                     last_fp=self.last_fingerprint(run))
        prior = run.iterations[-2].blocked if len(run.iterations) > 1 else {}
        if set(run.last.blocked) - set(prior):  # it blocked a story: the count starts again
            cur.streak, cur.last_fp = 0, None
        cur.last_story = next((it.story for it in reversed(run.iterations[1:])
                               if it.agent is not None and it.agent.ran), "")
        return cur

    def advance(self, cur: Cursor, turn: Turn, fp: str, changed: bool) -> None:
        """Move the counters on after ``turn`` ended with the fingerprint ``fp``; ``changed``:
        the agent changed the oracle (see :mod:`pytest_ralph.oracle.snapshot`)."""
        story = turn.story
        if turn.agent.ran:
            if changed and not self.settings.allow_criteria_edits:
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

    def change_course(self, cur: Cursor, newly: list[str], all_blocked: bool,
                      complete: bool) -> None:
        """Stories just blocked, others left: the loop changes course (another story,
        another prompt), so the breaker's count starts again."""
        if newly and not all_blocked and not complete:
            cur.streak, cur.last_fp = 0, None

    # -- flaky criteria ------------------------------------------------------------------

    def recheck(self, run: RunRecord, phase: CheckPhaseConfig, prev: CheckResults,
                results: CheckResults, folder: Path,
                check: CheckFn) -> tuple[CheckResults, tuple[str, ...]]:
        """Re-check once (with ``check``), with no change in between, each criterion that
        passed in ``prev`` and fails in ``results``; one that passes now is flaky: its passing
        result stands, and the breaker's fingerprint ignores it for the rest of the run."""
        passed_before = {c.key for c in prev.passing}
        newly = [c for c in results.failing if c.key in passed_before and c.kind != "missing"]
        if not newly or results.errors:
            return results, ()
        # In one process when the phases run on pytest-xdist workers: a few criteria do not
        # pay for starting the workers (and "-n 0" wins over an -n in the addopts).
        again = check(replace(
            phase, junitxml=None, workers="0" if phase.workers else "",
            nodeids=tuple(f"{phase.prd}::{c.story}::{c.criterion}" for c in newly),
            expected=tuple((c.story, c.criterion, c.text) for c in newly)), folder / "recheck")
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

    # -- blocked stories and the stop ----------------------------------------------------

    def blocked_after(self, run: RunRecord, rec: IterationRecord) -> dict[str, str]:
        """Stories blocked once ``rec`` is added to ``run``."""
        its = [*run.iterations[1:], rec]
        steps = [Step(it.n, it.story, it.agent is not None and it.agent.ran,
                      tuple((k, t) for k, t in self.signature_of(it) if k not in run.flaky),
                      bool(it.changes) and not self.settings.allow_criteria_edits,
                      it.agent.outcome if it.agent else "")
                 for it in its]
        return blocked(story_states(steps, breaker=self.settings.breaker, normalize=False,
                                    max_iterations=self.settings.story_max_iterations))

    def block(self, run: RunRecord, rec: IterationRecord,
              held: dict[str, str]) -> tuple[list[str], bool]:
        """Set ``rec.blocked`` (``held``: the stories blocked before it); return the stories
        it blocked and whether every story with failing criteria is blocked now."""
        rec.blocked = self.blocked_after(run, rec)
        newly = [sid for sid in rec.blocked if sid not in held]
        failing_stories = {c.story for c in rec.results.failing}
        all_blocked = bool(failing_stories) and failing_stories <= set(rec.blocked)
        return newly, all_blocked

    def decide(self, run: RunRecord, rec: IterationRecord, agent_run: AgentRun,
               newly: list[str], all_blocked: bool) -> StopDecision:
        """The ``pytest_ralph_should_stop`` decision after ``rec``, an iteration of ``run``
        that left criteria failing (built in: :func:`pytest_ralph.loop.hooks.decide_stop`)."""
        s = self.settings
        compared = [(k, t) for k, t in self.signature_of(rec) if k not in run.flaky]
        return self.hooks.should_stop(StopContext(
            iteration=rec.n, max_iterations=s.max_iterations, results=rec.results,
            agent=agent_run, story=rec.story, fingerprint=rec.fingerprint, streak=rec.streak,
            breaker=s.breaker, error_streak=rec.error_streak, agent_errors=s.agent_errors,
            blocked=dict(rec.blocked), newly_blocked=tuple(newly), all_blocked=all_blocked,
            failures=tuple(failure_fingerprints(compared, normalize=False))))

    def rate_limit_reason(self, error_streak: int, agent_run: AgentRun) -> str:
        """Why the run stops (exit 7) after the rate-limited ``agent_run`` made the
        agent-error streak ``error_streak``; ``""`` when it goes on."""
        if error_streak < self.settings.agent_errors:
            return ""
        return (f"the agent did not run properly in "
                f"{plural(error_streak, 'run')} in a row (last: "
                f"{agent_run.describe()}); see {agent_run.log_path}")
