"""Unit tests of the built-in stop decision (pytest_ralph.loop.hooks.decide_stop) and of
StopDecision: the order of the ways to stop, the limits at their exact values, the reasons
the console, the history and the report show, and the escalation each stop asks for.

The loop tests (tests/loop/test_loop.py, tests/plugin/test_hooks.py) cover the same rules end to
end;
these pin each boundary without a subprocess, so that the mutation tests
(``tox -e mutants``) can tell a changed rule from an unchanged one in a second.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph import GO_ON, StopDecision
from pytest_ralph.agents.run import AgentRun
from pytest_ralph.checks.results import CheckResults, CriterionResult
from pytest_ralph.loop.hooks import (
    ESCALATIONS,
    STOP_STATUSES,
    LoopHooks,
    StopContext,
    decide_stop,
)
from pytest_ralph.loop.prompt import PromptContext
from pytest_ralph.prd.model import PRD, Criterion, Story

FP = "0123456789abcdef"
LOG = Path("/runs/r1/iteration-004/agent.log")


def failing(*stories: str) -> CheckResults:
    """One failing criterion per story id (in that order), one passing criterion."""
    crits = [CriterionResult(f"prd.json::{s}::AC1", s, "AC1", f"{s} works", "run", "failed",
                             f"{s} is broken") for s in stories]
    crits.append(CriterionResult("prd.json::US-9::AC1", "US-9", "AC1", "ok", "run", "passed"))
    return CheckResults(tuple(crits))


def agent(outcome: str = "ok", exit_code: int | None = 0) -> AgentRun:
    return AgentRun(("/usr/bin/claude", "-p"), outcome, exit_code, 12.34, LOG, "")


def ctx(**kw: Any) -> StopContext:
    """An iteration 4 of 10 on US-1 with US-1 failing, streak 1 of 3, no agent errors."""
    base = StopContext(iteration=4, max_iterations=10, results=failing("US-1"), agent=agent(),
                       story="US-1", fingerprint=FP, streak=1, breaker=3, error_streak=0,
                       agent_errors=3)
    return replace(base, **kw)


# --- go on --------------------------------------------------------------------------------


def test_a_first_failure_goes_on() -> None:
    assert decide_stop(ctx()) is GO_ON
    assert StopDecision(False, "", "limit", "") == GO_ON
    assert not GO_ON.stop and GO_ON.exit_code == 1


@pytest.mark.parametrize("streak", [0, 1, 2])
def test_the_breaker_waits_below_its_limit(streak: int) -> None:
    assert decide_stop(ctx(streak=streak)) is GO_ON


@pytest.mark.parametrize("errors", [0, 1, 2])
def test_agent_errors_below_the_limit_go_on(errors: int) -> None:
    assert decide_stop(ctx(error_streak=errors)) is GO_ON


# --- the identical-failure circuit breaker ------------------------------------------------


def test_the_breaker_trips_at_exactly_its_limit() -> None:
    got = decide_stop(ctx(streak=3))
    assert got == StopDecision(
        True, f"circuit breaker: the same failure (fingerprint {FP}) in 3 iterations in a "
              "row (iterations 2-4); the agent is not making progress", "breaker",
        escalate="breaker")
    assert got.exit_code == 6


def test_the_breaker_trips_past_its_limit_too() -> None:
    got = decide_stop(ctx(streak=5, breaker=2, iteration=9))
    assert got.stop and got.status == "breaker" and got.escalate == "breaker"
    assert "in 5 iterations in a row (iterations 5-9)" in got.reason


def test_a_breaker_of_one_names_a_single_iteration() -> None:
    got = decide_stop(ctx(streak=1, breaker=1, iteration=7))
    assert got.reason == (f"circuit breaker: the same failure (fingerprint {FP}) in 1 "
                          "iteration in a row (iteration 7); the agent is not making progress")


def test_the_breaker_names_each_failure_with_its_own_fingerprint() -> None:
    # The fingerprint shown is the failure's, the one the report shows beside it; with
    # several failures, each is named (their set's digest is shown nowhere else).
    one = decide_stop(ctx(streak=3, failures=(("US-1::AC1", FP),)))
    assert one.reason.startswith(f"circuit breaker: the same failure of US-1::AC1 (fingerprint "
                                 f"{FP}) in 3 iterations in a row (iterations 2-4)")
    two = decide_stop(ctx(streak=3, fingerprint="f" * 16,
                          failures=(("US-1::AC1", "a" * 16), ("<check>", "b" * 16))))
    assert two.reason.startswith(
        f"circuit breaker: the same failures of US-1::AC1 (fingerprint {'a' * 16}) and the "
        f"check phase (fingerprint {'b' * 16}) in 3 iterations")
    assert "f" * 16 not in two.reason


def test_a_newly_blocked_story_changes_course_instead_of_tripping() -> None:
    # The breaker's count would trip, but the iteration blocked US-1 and US-2 is left to
    # work on: the loop goes on with US-2 (its count starts again in the loop).
    c = ctx(streak=3, results=failing("US-1", "US-2"), newly_blocked=("US-1",),
            blocked={"US-1": "stuck"})
    assert decide_stop(c) is GO_ON


# --- every failing story blocked ----------------------------------------------------------


def test_all_blocked_stops_naming_each_story_and_why() -> None:
    # Stories named once each, in id order, whatever the order of their failing criteria
    # (six of them: a set's order, which follows the hash seed, is never sorted by chance).
    ids = ["US-6", "US-2", "US-5", "US-1", "US-4", "US-3", "US-2"]
    why = {sid: f"stuck {sid[-1]}" for sid in ids}
    c = ctx(results=failing(*ids), all_blocked=True, blocked=why, newly_blocked=("US-1",))
    got = decide_stop(c)
    assert got == StopDecision(
        True, "every remaining story is blocked (US-1: stuck 1; US-2: stuck 2; US-3: stuck 3; "
              "US-4: stuck 4; US-5: stuck 5; US-6: stuck 6)", "breaker", escalate="all-blocked")
    assert got.exit_code == 6


def test_all_blocked_names_the_breaker_too_when_it_tripped() -> None:
    c = ctx(streak=3, all_blocked=True, blocked={"US-1": "stuck"})
    assert decide_stop(c).reason == (
        f"circuit breaker: the same failure (fingerprint {FP}) in 3 iterations in a row "
        "(iterations 2-4); every remaining story is blocked (US-1: stuck)")
    below = decide_stop(replace(c, streak=2))
    assert below.reason == "every remaining story is blocked (US-1: stuck)"


def test_all_blocked_wins_over_the_breaker_and_the_newly_blocked_rule() -> None:
    c = ctx(streak=3, all_blocked=True, newly_blocked=("US-1",), blocked={"US-1": "stuck"})
    got = decide_stop(c)
    assert got.stop and got.escalate == "all-blocked"


def test_a_story_blocked_without_a_reason_is_still_named() -> None:
    got = decide_stop(ctx(all_blocked=True))
    assert got.reason == "every remaining story is blocked (US-1: )"


# --- the agent-error streak ---------------------------------------------------------------


def test_agent_errors_stop_at_exactly_the_limit() -> None:
    c = ctx(error_streak=3, agent=agent("exit-nonzero", 2))
    got = decide_stop(c)
    assert got == StopDecision(
        True, "the agent did not run properly in 3 iterations in a row (last: agent `claude -p` "
              f"exit 2 in 12.3 s); see {LOG}", "agent-error")
    assert got.exit_code == 7 and got.escalate == ""


def test_one_agent_error_allowed_is_named_in_the_singular() -> None:
    got = decide_stop(ctx(error_streak=1, agent_errors=1, agent=agent("not-found", None)))
    assert got.reason.startswith("the agent did not run properly in 1 iteration in a row "
                                 "(last: agent `claude -p` not found in 12.3 s)")


def test_agent_errors_come_before_blocked_stories_and_the_breaker() -> None:
    c = ctx(error_streak=4, streak=9, all_blocked=True, blocked={"US-1": "stuck"})
    assert decide_stop(c).status == "agent-error"


# --- StopDecision -------------------------------------------------------------------------


def test_the_statuses_and_their_exit_codes() -> None:
    assert STOP_STATUSES == {"limit": 1, "breaker": 6, "agent-error": 7}
    assert ESCALATIONS == ("", "breaker", "all-blocked")
    for status, code in STOP_STATUSES.items():
        assert StopDecision(True, "why", status).exit_code == code
    assert StopDecision(True, "why").status == "limit"
    assert StopDecision(True, "why").escalate == ""
    assert StopDecision(False).reason == ""


@pytest.mark.parametrize("escalate", ESCALATIONS)
def test_every_escalation_is_accepted(escalate: str) -> None:
    assert StopDecision(True, "why", "breaker", escalate).escalate == escalate


def test_going_on_needs_no_reason_but_may_give_one() -> None:
    assert StopDecision(False, " ").reason == " "
    assert StopDecision(False, "not yet").stop is False


@pytest.mark.parametrize(("args", "message"), [
    ((True, "x", "done"), "StopDecision status 'done': expected one of limit, breaker, "
                          "agent-error"),
    ((True, "x", "limit", "bogus"), "StopDecision escalate 'bogus': expected one of '', "
                                    "'breaker', 'all-blocked'"),
    ((True, 42), "StopDecision(True, 42): expected stop to be True or False and reason a str"),
    ((1, "x"), "StopDecision(1, 'x'): expected stop to be True or False and reason a str"),
    ((True, ""), "StopDecision(stop=True) needs a reason: one sentence saying why"),
    ((True, " \t"), "StopDecision(stop=True) needs a reason: one sentence saying why"),
])
def test_bad_decisions_are_refused_with_the_whole_message(args: tuple[Any, ...],
                                                          message: str) -> None:
    with pytest.raises(ValueError) as info:
        StopDecision(*args)
    assert str(info.value) == message


def test_a_hook_cannot_change_the_context_or_a_decision_in_place() -> None:
    # The loop goes on using the context it handed to pytest_ralph_should_stop, and GO_ON is
    # shared by every run: neither may be changed by a plugin.
    c = ctx()
    with pytest.raises(FrozenInstanceError):
        c.streak = 0  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        GO_ON.stop = True  # type: ignore[misc]
    assert c.streak == 1 and GO_ON.stop is False
    assert c.blocked == {} and c.newly_blocked == () and c.all_blocked is False


# --- LoopHooks: the built-in extension points ---------------------------------------------


def test_the_built_in_hooks_decide_and_pass_through() -> None:
    hooks = LoopHooks()
    assert hooks.should_stop(ctx(streak=3)) == decide_stop(ctx(streak=3))
    argv = ["claude", "-p", "{prompt_file}"]
    assert hooks.agent_command(argv, 1, None) is argv
    result = CriterionResult("n", "US-1", "AC1", "t", "run", "failed",
                             "took 0.25s at 0x7f00aa in /tmp/x/y.py")
    assert hooks.failure_fingerprint(result) == "took <n>s at <addr> in <path>"


def test_the_built_in_prompt_hook_fills_the_template() -> None:
    # A Loop built without hooks (the core API) uses LoopHooks: its prompt is the template
    # filled in from the PRD and the latest results.
    crit = Criterion("US-7", 1, "AC1", "the parser accepts empty input", "run",
                     command="python -m parser ''")
    prd = PRD(Path("/work/proj/prd.json"), "json", "Acme", "ralph/x", "",
              (Story("US-7", "Parse empty input", "", (crit,), 1, False, "", 0),))
    results = CheckResults((CriterionResult("prd.json::US-7::AC1", "US-7", "AC1", crit.text,
                                            "run", "failed", "ValueError: empty"),))
    context = PromptContext(prd, results, iteration=3, max_iterations=9,
                            rootdir=Path("/work/proj"), progress="")
    prompt = LoopHooks().build_prompt(
        "Iteration $iteration of $max_iterations on $story_id.\n$failing\n", context)
    assert prompt.startswith("Iteration 3 of 9 on US-7.\n")
    assert "the parser accepts empty input" in prompt and "ValueError: empty" in prompt
