"""Unit tests of pytest_ralph.loop.prompt: the template, story choice, failure excerpts and
bounds."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_ralph.checks.results import CheckResults, CriterionResult
from pytest_ralph.loop.prompt import (
    EXCERPT_CHARS,
    FAILING_CHARS,
    LAST_CHANGE_CHARS,
    MAX_OTHER_FAILURES,
    NO_CHANGE,
    PROGRESS_CHARS,
    SECTION_VARIABLES,
    PromptContext,
    build_prompt,
    excerpt,
    pick_story,
    render_failing,
    render_goal,
    render_progress,
    same_failure_counts,
    same_failure_step,
    template_path,
)
from pytest_ralph.prd.model import PRD, Criterion, Story

ROOT = Path("/work/proj")

# -- builders --------------------------------------------------------------------------------


def _story(sid: str, *criteria: str | tuple[str, str], priority: int | None = 1,
           position: int = 0, title: str | None = None, description: str = "") -> Story:
    """A story; each criterion is text, or (text, command) for a ``run`` criterion."""
    crits = []
    for i, c in enumerate(criteria, 1):
        if isinstance(c, tuple):
            crits.append(Criterion(sid, i, f"AC{i}", c[0], "run", command=c[1]))
        else:
            crits.append(Criterion(sid, i, f"AC{i}", c, "text"))
    return Story(sid, title or f"title of {sid}", description, tuple(crits), priority, False, "",
                 position)


def _prd(*stories: Story, project: str = "Acme", branch: str = "ralph/x",
         path: Path = ROOT / "prd.json") -> PRD:
    stories = tuple(Story(s.id, s.title, s.description, s.criteria, s.priority, s.passes,
                          s.notes, i) for i, s in enumerate(stories))
    return PRD(path, "json", project, branch, "", stories)


def _results(prd: PRD, failing: dict[str, str] | None = None,
             errors: tuple[str, ...] = ()) -> CheckResults:
    """Results of every criterion of ``prd``: ``failing`` maps keys to failure messages."""
    failing = failing or {}
    out = []
    for c in prd.criteria():
        failed = c.key in failing
        out.append(CriterionResult(
            nodeid=f"prd.json::{c.key}", story=c.story_id, criterion=c.id, text=c.text,
            kind=c.kind, outcome="failed" if failed else "passed",
            message=failing.get(c.key, ""), claimed=c.kind == "text"))
    return CheckResults(tuple(out), errors)


def _ctx(prd: PRD, results: CheckResults, progress: str = "") -> PromptContext:
    return PromptContext(prd, results, iteration=2, max_iterations=7, rootdir=ROOT,
                         progress=progress)


@pytest.fixture(scope="module")
def template() -> str:
    return template_path("prompt.md").read_text("utf-8")


# -- template_path ---------------------------------------------------------------------------


def test_template_path_finds_prompt_md() -> None:
    path = template_path("prompt.md")
    assert path.name == "prompt.md"
    assert path.is_file()
    text = path.read_text("utf-8")
    for name in ("$iteration", "$max_iterations", "$goal", "$story", "$failing", "$progress",
                 "$regressions", "$last_change", "$blocked", "$rootdir", "$project",
                 "$prd_path"):
        assert name in text


def test_template_path_missing() -> None:
    with pytest.raises(FileNotFoundError, match=r"no-such-template\.md"):
        template_path("no-such-template.md")


# -- build_prompt ----------------------------------------------------------------------------


def test_build_prompt_fills_the_placeholders(template: str) -> None:
    prd = _prd(_story("US-001", ("tests pass", "pytest -q tests/test_login.py"), "docs written",
                      title="Login", description="Users log in with email."),
               _story("US-002", "Logout works", priority=2))
    results = _results(prd, {"US-001::AC1": "E   assert 401 == 200"})
    prompt = build_prompt(template, _ctx(prd, results, progress="## iteration 1\ntried X\n"))
    assert "$" not in re.sub(r"\$\d", "", prompt)  # no placeholder left
    assert "iteration 2 of 7" in prompt
    assert "`/work/proj`" in prompt
    assert '"Acme"' in prompt
    assert "`prd.json`" in prompt
    assert "Make all 3 acceptance criteria of the 2 stories pass. Now 2 of 3 pass." in prompt
    assert "US-001: Login\nUsers log in with email.\nAcceptance criteria:" in prompt
    assert "- [FAIL] AC1: tests pass" in prompt
    assert "- [pass] AC2: docs written" in prompt
    assert "- [US-001::AC1] tests pass\n  check: run `pytest -q tests/test_login.py`" in prompt
    assert "      E   assert 401 == 200" in prompt
    assert "## iteration 1\ntried X" in prompt


def test_build_prompt_story_id_and_progress_placeholders() -> None:
    prd = _prd(_story("US-001", "a"), _story("US-002", "b"))
    results = _results(prd, {"US-002::AC1": "nope"})
    assert build_prompt("[$story_id] $progress", _ctx(prd, results)) == (
        "[US-002] (nothing yet: this is the first iteration)")


def test_unknown_placeholders_are_left_alone() -> None:
    prd = _prd(_story("US-001", "a"))
    results = _results(prd, {"US-001::AC1": "x"})
    out = build_prompt("$iteration $unknown ${other} $ 5$ $story_id", _ctx(prd, results))
    assert out == "2 $unknown ${other} $ 5$ US-001"


def test_values_are_not_substituted_again() -> None:
    prd = _prd(_story("US-001", "costs $iteration dollars"))
    results = _results(prd, {"US-001::AC1": "got $goal and ${story}"})
    out = build_prompt("$failing", _ctx(prd, results))
    assert "costs $iteration dollars" in out
    assert "got $goal and ${story}" in out


@pytest.mark.parametrize(("project", "branch", "expected"), [
    ("Acme", "ralph/x", "Acme"), ("", "ralph/x", "ralph/x"), ("", "", "prd"),
])
def test_project_falls_back_to_branch_then_file(project: str, branch: str, expected: str) -> None:
    prd = _prd(_story("US-001", "a"), project=project, branch=branch)
    assert build_prompt("$project", _ctx(prd, _results(prd, {"US-001::AC1": "x"}))) == expected


def test_prd_path_outside_the_rootdir_is_absolute() -> None:
    prd = _prd(_story("US-001", "a"), path=Path("/elsewhere/prd.json"))
    out = build_prompt("$prd_path", _ctx(prd, _results(prd, {"US-001::AC1": "x"})))
    assert out == "/elsewhere/prd.json"


# -- the story to work on --------------------------------------------------------------------


def test_picks_the_lowest_priority_value_with_failures() -> None:
    prd = _prd(_story("US-001", "a", priority=3), _story("US-002", "b", priority=1),
               _story("US-003", "c", priority=2))
    results = _results(prd, {"US-001::AC1": "x", "US-003::AC1": "y"})
    story = pick_story(prd, results)
    assert story is not None and story.id == "US-003"


def test_priority_ties_go_to_file_order() -> None:
    prd = _prd(_story("US-B", "a", priority=1), _story("US-A", "b", priority=1),
               _story("US-C", "c", priority=1))
    results = _results(prd, {"US-C::AC1": "x", "US-A::AC1": "y"})
    story = pick_story(prd, results)
    assert story is not None and story.id == "US-A"


def test_stories_without_priority_come_last() -> None:
    prd = _prd(_story("US-001", "a", priority=None), _story("US-002", "b", priority=9))
    results = _results(prd, {"US-001::AC1": "x", "US-002::AC1": "y"})
    story = pick_story(prd, results)
    assert story is not None and story.id == "US-002"


def test_no_failures_no_story() -> None:
    prd = _prd(_story("US-001", "a"))
    assert pick_story(prd, _results(prd)) is None


def test_the_chosen_story_comes_first_and_others_are_one_liners(template: str) -> None:
    prd = _prd(_story("US-001", "first story crit", priority=5),
               _story("US-002", "chosen one", "chosen two", "chosen ok", priority=1))
    results = _results(prd, {
        "US-001::AC1": "OTHER-DETAIL " * 20,
        "US-002::AC1": "detail of chosen one",
        "US-002::AC2": "detail of chosen two",
    })
    failing = render_failing(prd, results, pick_story(prd, results))
    first = failing.index("[US-002::AC1] chosen one")
    second = failing.index("[US-002::AC2] chosen two")
    also = failing.index("Also failing, in later stories")
    other = failing.index("- [US-001::AC1] first story crit")
    assert first < second < also < other
    assert "detail of chosen one" in failing
    assert "detail of chosen two" in failing
    assert "OTHER-DETAIL" not in failing  # other stories: one line, no excerpt
    assert "chosen ok" not in failing
    prompt = build_prompt(template, _ctx(prd, results))
    assert "## Work on this story now\nUS-002: title of US-002" in prompt


def test_text_criterion_check_line() -> None:
    prd = _prd(_story("US-001", "Docs are written"))
    results = _results(prd, {"US-001::AC1": "claimed, not verified: not done"})
    failing = render_failing(prd, results, pick_story(prd, results))
    assert "check: none (text criterion, claimed by the story's `passes`)" in failing


def test_empty_failure_message() -> None:
    prd = _prd(_story("US-001", ("t", "false")))
    results = _results(prd, {"US-001::AC1": ""})
    assert "      (no output)" in render_failing(prd, results, pick_story(prd, results))


def test_nothing_failing_renders_none() -> None:
    prd = _prd(_story("US-001", "a"))
    assert render_failing(prd, _results(prd), None) == "(none)"


# -- bounds ----------------------------------------------------------------------------------


def test_excerpt_short_text_is_kept() -> None:
    assert excerpt("  short\n") == "short"


def test_excerpt_keeps_head_and_tail() -> None:
    text = "HEAD-START " + "m" * 50_000 + " TAIL-END"
    out = excerpt(text, 1000)
    assert out.startswith("HEAD-START")
    assert out.endswith("TAIL-END")
    assert "[... cut ...]" in out
    assert len(out) <= 1000 + len("\n[... cut ...]\n")
    head, tail = out.split("\n[... cut ...]\n")
    assert len(tail) > len(head)  # the end of the output (the error) gets more room


def test_huge_failure_message_is_cut_in_the_prompt(template: str) -> None:
    prd = _prd(_story("US-001", ("tests", "pytest -q")))
    message = "FIRST-LINE\n" + "noise line\n" * 20_000 + "E   AssertionError: the real error"
    prompt = build_prompt(template, _ctx(prd, _results(prd, {"US-001::AC1": message})))
    assert "FIRST-LINE" in prompt
    assert "E   AssertionError: the real error" in prompt
    assert "[... cut ...]" in prompt
    assert len(prompt) < len(template) + EXCERPT_CHARS + 2000


@pytest.mark.parametrize("line", [99, 1], ids=["long-lines", "short-lines"])
@pytest.mark.parametrize("per_story", [50, 5, 1], ids=["one-story", "ten-stories", "fifty"])
def test_prompt_stays_bounded_with_many_huge_failures(template: str, per_story: int,
                                                     line: int) -> None:
    stories = [_story(f"US-{s:03d}", *[(f"criterion {s}.{i}", f"check {s} {i}")
                                       for i in range(per_story)])
               for s in range(50 // per_story)]
    prd = _prd(*stories)
    lines = 100_000 // (line + 1) + 1
    failing = {c.key: f"HEAD {c.key}\n" + ("x" * line + "\n") * lines + f"TAIL {c.key}"
               for c in prd.criteria()}
    assert len(failing) == 50
    assert all(len(m) > 100_000 for m in failing.values())
    prompt = build_prompt(template, _ctx(prd, _results(prd, failing)))
    assert len(prompt.encode()) < 20_000
    # The first failing criterion of the chosen story gets a full excerpt, head and tail.
    assert "HEAD US-000::AC1\n" in prompt
    assert "TAIL US-000::AC1" in prompt
    # Every failing criterion is named, or counted in "... and N more".
    named = sum(f"[{key}]" in prompt for key in failing)
    more = re.search(r"- \.\.\. and (\d+) more", prompt)
    assert named + (int(more.group(1)) if more else 0) == len(failing)


def test_failures_beyond_the_prompt_budget_are_listed_without_output() -> None:
    prd = _prd(_story("US-001", *[(f"crit {i}", f"check {i}") for i in range(30)]))
    failing = {c.key: f"start {c.key}\n" + "y" * 5000 for c in prd.criteria()}
    results = _results(prd, failing)
    text = render_failing(prd, results, pick_story(prd, results))
    assert "start US-001::AC1\n" in text  # the first ones get output
    assert text.count("failure (excerpt):") >= 3
    last = text[text.index("[US-001::AC30]"):]
    assert last.startswith("[US-001::AC30] crit 29\n  check: run `check 29`\n  failure: not shown")
    assert "start US-001::AC30" not in text


def test_check_phase_errors_are_shown(template: str) -> None:
    prd = _prd(_story("US-001", "a"))
    results = CheckResults((), ("the check phase (child pytest, exit 3) wrote no results; its "
                                "output ends:\nINTERNALERROR> boom",))
    prompt = build_prompt(template, _ctx(prd, results))
    assert "(no story has failing criteria; fix the check-phase errors below)" in prompt
    assert "- [check phase] the checks could not run:" in prompt
    assert "      INTERNALERROR> boom" in prompt
    assert "## Goal\nMake every acceptance criterion pass.\n" in prompt  # no "all 0 criteria"


def test_check_phase_errors_follow_the_failing_criteria() -> None:
    prd = _prd(_story("US-001", "a"))
    results = _results(prd, {"US-001::AC1": "crit failure"}, errors=("E" * 50_000 + "END",))
    failing = render_failing(prd, results, pick_story(prd, results))
    assert failing.index("crit failure") < failing.index("[check phase]")
    assert failing.rstrip().endswith("END")
    assert len(failing) < 5000


def test_other_failures_are_capped_and_one_line_each() -> None:
    stories = [_story(f"US-{i:03d}", (f"line one\nline two {i}", "true")) for i in range(40)]
    prd = _prd(*stories)
    results = _results(prd, {f"US-{i:03d}::AC1": "boom" for i in range(40)})
    prompt = build_prompt("$failing", _ctx(prd, results))
    assert prompt.count("\n- [US-") == MAX_OTHER_FAILURES
    assert "- ... and 9 more" in prompt
    assert "line one line two 5" in prompt


# -- the default template --------------------------------------------------------------------


def test_every_documented_variable_is_filled() -> None:
    import pytest_ralph.loop.prompt as mod

    documented = set(re.findall(r"^``\$(\w+)``", mod.__doc__ or "", re.M))
    prd = _prd(_story("US-001", "a"))
    template = " ".join(f"<{name}=${{{name}}}>" for name in sorted(documented))
    out = build_prompt(template, _ctx(prd, _results(prd, {"US-001::AC1": "x"})))
    assert documented >= {"iteration", "story", "failing", *SECTION_VARIABLES}
    assert "${" not in out  # each documented name is a real variable


def test_default_template_states_the_rules(template: str) -> None:
    prd = _prd(_story("US-001", "a"))
    prompt = build_prompt(template, _ctx(prd, _results(prd, {"US-001::AC1": "x"})))
    rules = prompt[prompt.index("## Rules"):]
    assert "The loop runs the checks after you stop; only they decide." in rules
    assert "do not edit the PRD's criteria" in rules
    assert '"check: none" is claimed' in rules
    assert "commit" not in prompt.lower()  # committing is the user's choice, not the prompt's


def test_empty_sections_leave_no_trace(template: str) -> None:
    prd = _prd(_story("US-001", "a"))
    prompt = build_prompt(template, _ctx(prd, _results(prd, {"US-001::AC1": "x"})))
    for heading in ("## Regressions", "## What the last iteration changed",
                    "## Blocked stories"):
        assert heading not in prompt
    assert "\n\n\n" not in prompt
    assert "\n\n## Progress so far" in prompt


def test_section_variables_off_their_own_line_and_in_braces() -> None:
    prd = _prd(_story("US-001", "a"))
    ctx = _ctx(prd, _results(prd, {"US-001::AC1": "x"}))
    assert build_prompt("a\n${regressions}\n\nb\n  $blocked  \nc\n", ctx) == "a\nb\nc\n"
    assert build_prompt("[$last_change]\n\nz", ctx) == "[]\n\nz"  # not alone: kept
    assert build_prompt("$$regressions\n", ctx) == "$regressions\n"
    with_change = replace(ctx, last_change=" a.py | 1 +")
    assert build_prompt("${last_change}\n\nz", with_change) == (
        "## What the last iteration changed\n a.py | 1 +\n\nz")


# -- blocked stories -------------------------------------------------------------------------


def test_pick_story_skips_blocked_stories() -> None:
    prd = _prd(_story("US-001", "a", priority=1), _story("US-002", "b", priority=2),
               _story("US-003", "c", priority=3))
    results = _results(prd, {"US-001::AC1": "x", "US-002::AC1": "y", "US-003::AC1": "z"})
    assert pick_story(prd, results, blocked={"US-001"}).id == "US-002"  # type: ignore[union-attr]
    assert pick_story(prd, results, {"US-001": "why", "US-002": "why"}).id == "US-003"  # type: ignore[union-attr]
    assert pick_story(prd, results, ("US-001", "US-002", "US-003")) is None


def test_blocked_stories_are_listed_not_worked_on(template: str) -> None:
    prd = _prd(_story("US-001", "first", priority=1, title="Payments"),
               _story("US-002", "second", priority=2), _story("US-003", "third", priority=3))
    results = _results(prd, {"US-001::AC1": "x", "US-002::AC1": "y", "US-003::AC1": "z"})
    ctx = replace(_ctx(prd, results),
                  blocked={"US-001": "needs the payment\nprovider's sandbox key " + "k" * 500})
    prompt = build_prompt(template, ctx)
    assert "## Work on this story now\nUS-002: title of US-002" in prompt
    section = prompt[prompt.index("## Blocked stories"):prompt.index("## Progress")]
    assert "The loop does not ask for these; do not work on them." in section
    line = section.splitlines()[2]
    assert line.startswith("- US-001: Payments (1 failing). Why: needs the payment provider's ")
    assert len(line) < 300
    also = prompt[prompt.index("Also failing"):prompt.index("## Blocked")]
    assert "[US-003::AC1]" in also and "US-001" not in also


def test_every_failing_story_blocked(template: str) -> None:
    prd = _prd(_story("US-001", "a"))
    ctx = replace(_ctx(prd, _results(prd, {"US-001::AC1": "x"})), blocked={"US-001": "why"})
    prompt = build_prompt(template, ctx)
    assert "every story with failing criteria is blocked" in prompt
    assert "[US-001::AC1]" not in prompt[:prompt.index("## Blocked")]
    assert build_prompt("[$story_id]", ctx) == "[]"


# -- repeats and regressions -----------------------------------------------------------------


def test_same_failure_counts() -> None:
    prd = _prd(_story("US-001", "a", "b", "c", "d", "e"))

    def check(**failing: str) -> CheckResults:
        return _results(prd, {f"US-001::{k}": v for k, v in failing.items()})

    history = [
        check(AC1="boom", AC2="E at /tmp/pytest-1/x.py:10 after 0.51s", AC3="x", AC4="old"),
        check(AC1="boom", AC2="E at /tmp/pytest-2/x.py:12 after 0.73s", AC3="x", AC4="new"),
        check(AC1="boom", AC2="E at /tmp/pytest-3/x.py:14 after 1.02s", AC4="new", AC5="e"),
        check(AC1="boom", AC2="E at /tmp/pytest-4/x.py:16 after 0.66s", AC3="x", AC4="new",
              AC5="e"),
    ]
    assert same_failure_counts(history) == {
        "US-001::AC1": 4,  # always the same
        "US-001::AC2": 4,  # the same once paths and numbers are normalized
        "US-001::AC3": 1,  # passed in the check before
        "US-001::AC4": 3,  # changed three checks ago
        "US-001::AC5": 2,
    }
    assert same_failure_counts([]) == {}
    assert same_failure_counts(history[:1]) == {k: 1 for k in
                                                ("US-001::AC1", "US-001::AC2", "US-001::AC3",
                                                 "US-001::AC4")}
    # A criterion absent from an older check (criteria changed) ends its streak there.
    other = _prd(_story("US-001", "a"))
    assert same_failure_counts([_results(other), check(AC2="z")])["US-001::AC2"] == 1


def test_same_failure_counts_compares_long_messages_quickly() -> None:
    prd = _prd(_story("US-001", "a"))
    big = "start\n" + "line 123 of output\n" * 500_000 + "E   the end"
    history = [_results(prd, {"US-001::AC1": big})] * 20
    assert same_failure_counts(history) == {"US-001::AC1": 20}
    changed = _results(prd, {"US-001::AC1": big.replace("the end", "another end")})
    assert same_failure_counts([*history, changed]) == {"US-001::AC1": 1}


def test_repeats_and_regressions_are_marked(template: str) -> None:
    prd = _prd(_story("US-001", ("a", "t a"), ("b", "t b"), ("c", "t c"), priority=1),
               _story("US-002", "later", priority=2))
    results = _results(prd, {"US-001::AC1": "e1", "US-001::AC2": "e2", "US-001::AC3": "e3",
                             "US-002::AC1": "e4"})
    ctx = replace(_ctx(prd, results), repeats={"US-001::AC1": 4, "US-001::AC2": 1},
                  regressions=("US-001::AC3", "US-002::AC1"))
    prompt = build_prompt(template, ctx)
    failing = prompt[prompt.index("## Failing"):prompt.index("## Regressions")]
    ac1 = failing[failing.index("[US-001::AC1]"):failing.index("[US-001::AC2]")]
    ac2 = failing[failing.index("[US-001::AC2]"):failing.index("[US-001::AC3]")]
    ac3 = failing[failing.index("[US-001::AC3]"):failing.index("Also failing")]
    assert "  failed the same way in 4 checks in a row" in ac1
    assert "REGRESSION" not in ac1
    assert "same way" not in ac2 and "REGRESSION" not in ac2
    assert "  REGRESSION: passed before in this run" in ac3
    assert "- [US-002::AC1] later (REGRESSION: passed before)" in failing
    section = prompt[prompt.index("## Regressions"):prompt.index("## Progress")]
    assert "These passed earlier in this run and fail now" in section
    assert "- [US-001::AC3] c\n- [US-002::AC1] later" in section
    assert "US-001::AC1" not in section


def test_regressions_that_pass_again_are_not_listed() -> None:
    prd = _prd(_story("US-001", "a", "b"))
    ctx = replace(_ctx(prd, _results(prd, {"US-001::AC1": "x"})), regressions=["US-001::AC2"])
    assert build_prompt("$regressions", ctx) == ""


# -- what the last iteration changed ---------------------------------------------------------


def test_last_change_section(template: str) -> None:
    prd = _prd(_story("US-001", "a"))
    stat = (" src/app.py | 4 +---\n new.py     | 2 ++\n"
            " 2 files changed, 3 insertions(+), 3 deletions(-)\n")
    ctx = replace(_ctx(prd, _results(prd, {"US-001::AC1": "x"})), last_change=stat)
    prompt = build_prompt(template, ctx)
    assert "## What the last iteration changed\n" + stat.rstrip("\n") + "\n\n" in prompt
    assert (prompt.index("## Failing") < prompt.index("## What the last")
            < prompt.index("## Progress"))
    no_change = build_prompt(template, replace(ctx, last_change=NO_CHANGE))
    assert "## What the last iteration changed\n" + NO_CHANGE in no_change


def test_last_change_is_bounded() -> None:
    prd = _prd(_story("US-001", "a"))
    stat = "".join(f" file{i}.py | 1 +\n" for i in range(100_000)) + " 100000 files changed\n"
    ctx = replace(_ctx(prd, _results(prd, {"US-001::AC1": "x"})), last_change=stat)
    out = build_prompt("$last_change", ctx)
    assert len(out) < LAST_CHANGE_CHARS + 100
    assert out.endswith("100000 files changed")


# -- redaction -------------------------------------------------------------------------------


def test_redact_applies_to_the_finished_prompt(template: str) -> None:
    prd = _prd(_story("US-001", "token is sk-SECRET1"), project="sk-SECRET2")
    results = _results(prd, {"US-001::AC1": "got sk-SECRET3"})
    ctx = replace(_ctx(prd, results, progress="tried sk-SECRET4"),
                  last_change=" sk-SECRET5.txt | 1 +", redact=lambda t: t.replace("sk-", "[x]-"))
    prompt = build_prompt(template + "\nkey: sk-SECRET6\n", ctx)
    assert "sk-" not in prompt
    assert prompt.count("[x]-SECRET") >= 6


# -- bounds of everything at once ------------------------------------------------------------


@pytest.mark.parametrize("per_story", [500, 1], ids=["one-story", "500-stories"])
def test_prompt_stays_bounded_whatever_the_input(template: str, per_story: int) -> None:
    title, description = "T" * 100_000 + "\ntitle line two", "D" * 1_000_000
    stories = [_story(f"US-{s:03d}", *[(f"criterion {s}.{i} " + "w" * 400,
                                        f"cmd {s} {i} " + "c" * 400) for i in range(per_story)],
                      title=title, description=description)
               for s in range(500 // per_story)]
    prd = _prd(*stories, project="P" * 100_000)
    failing = {c.key: f"HEAD {c.key}\n" + "x" * 20_000 + f"\nTAIL {c.key}"
               for c in prd.criteria()}
    first = next(iter(failing))
    failing[first] = "HEAD\n" + "y\n" * 5_000_000 + "TAIL"  # 10 MB
    assert len(failing) == 500
    errors = tuple("ERR" * 50_000 for _ in range(100))
    results = _results(prd, failing, errors=errors)
    keys = list(failing)
    ctx = replace(_ctx(prd, results, progress="progress line\n" * 150_000),  # 2 MB
                  repeats={k: 7 for k in keys}, regressions=keys,
                  last_change=" f.py | 1 +\n" * 100_000,
                  blocked={s.id: "reason " * 1000 for s in stories[1:][-250:]})
    start = time.monotonic()
    prompt = build_prompt(template, ctx)
    assert time.monotonic() - start < 5
    assert len(prompt.encode()) < 20_000 + len(template)
    assert "HEAD\n" in prompt and "TAIL" in prompt  # the first failure: head and tail
    assert prompt.count("[check phase]") >= 1
    assert "progress line" in prompt


def test_progress_keeps_its_end() -> None:
    prd = _prd(_story("US-001", "a"))
    progress = "".join(f"line {i}\n" for i in range(300_000))
    out = build_prompt("$progress", _ctx(prd, _results(prd, {"US-001::AC1": "x"}), progress))
    assert len(out) <= PROGRESS_CHARS + 10
    assert out.startswith("...\nline ")
    assert out.endswith("line 299999")


def test_long_story_block_is_cut(template: str) -> None:
    prd = _prd(_story("US-001", *[f"criterion number {i}" for i in range(500)],
                      description="first words " + "d" * 100_000))
    results = _results(prd, {f"US-001::AC{i}": "x" for i in range(400, 501)})
    story = build_prompt("$story", _ctx(prd, results))
    assert len(story) < 3000
    assert story.startswith("US-001: title of US-001\nfirst words ")
    assert re.search(r"- \((\d+) more criteria not listed here, 101 of them failing\)$", story)


def test_excerpt_budget_is_shared_by_criteria_and_errors() -> None:
    prd = _prd(_story("US-001", *[(f"c{i}", f"t{i}") for i in range(10)]))
    results = _results(prd, {c.key: "z" * 10_000 for c in prd.criteria()},
                       errors=("E1" * 5000, "E2" * 5000))
    text = render_failing(prd, results, pick_story(prd, results))
    assert "E1E1" in text  # the first error always gets some room
    assert "- ... and 1 more check-phase errors" in text
    assert len(text) < FAILING_CHARS + 3000


def test_same_failure_counts_over_a_long_run_stays_fast() -> None:
    # 100 checks of 50 criteria whose raw text changes every time (a timestamp) while the
    # normalized text stays: the loop asks after every check, with one more each time.
    prd = _prd(_story("US-001", *[f"c{i}" for i in range(50)]))
    body = "E   assert x == y\n" * 200
    history = [_results(prd, {c.key: f"at 12:00:{n % 60:02d} run {n}\n{body}"
                              for c in prd.criteria()}) for n in range(100)]
    start = time.monotonic()
    for n in range(1, len(history) + 1):
        counts = same_failure_counts(history[:n])
    assert counts == {c.key: 100 for c in prd.criteria()}
    assert time.monotonic() - start < 10
    # Kept by the loop one check at a time, the counts cost nothing like that.
    start = time.monotonic()
    step: dict[str, int] = {}
    previous = None
    for check in history:
        step, previous = same_failure_step(step, previous, check), check
    assert step == counts
    assert time.monotonic() - start < 1


def test_same_failure_step_agrees_with_the_whole_history() -> None:
    prd = _prd(_story("US-001", "a", "b", "c"))
    runs = [{"AC1": "x 1", "AC2": "y"}, {"AC1": "x 2", "AC3": "z"}, {"AC1": "x 3", "AC2": "y"},
            {}, {"AC2": "y", "AC3": "z"}, {"AC2": "y", "AC3": "z!"}, {"AC2": "y", "AC3": "z!"}]
    history = [_results(prd, {f"US-001::{k}": v for k, v in run.items()}) for run in runs]
    step: dict[str, int] = {}
    previous = None
    for n, check in enumerate(history, 1):
        step, previous = same_failure_step(step, previous, check), check
        assert step == same_failure_counts(history[:n])
    assert step == {"US-001::AC2": 3, "US-001::AC3": 2}


# -- $goal -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("total", "passing", "stories", "goal"), [
    # It used to read "Make all 1 acceptance criterion of 1 story pass. Now 0 of 1 pass."
    (1, 0, 1, "Make the acceptance criterion pass. Now it fails."),
    (1, 1, 1, "Make the acceptance criterion pass. Now it passes."),
    (3, 0, 1, "Make all 3 acceptance criteria of the story pass. Now none of them passes."),
    (3, 1, 2, "Make all 3 acceptance criteria of the 2 stories pass. Now 1 of 3 passes."),
    (11, 9, 5, "Make all 11 acceptance criteria of the 5 stories pass. Now 9 of 11 pass."),
    (0, 0, 1, "Make every acceptance criterion pass."),
])
def test_goal_reads_as_english(total: int, passing: int, stories: int, goal: str) -> None:
    assert render_goal(total, passing, stories) == goal


def test_goal_of_a_one_criterion_prd_in_the_prompt() -> None:
    prd = _prd(_story("US-001", "a"))
    prompt = build_prompt("$goal", _ctx(prd, _results(prd, {"US-001::AC1": "x"})))
    assert prompt == "Make the acceptance criterion pass. Now it fails."


# -- $progress: earlier runs ---------------------------------------------------------------------

EARLIER = ("## 2026-11-29T10:00:00Z run 20261129-100000-aaaaaa iteration 3/5\n"
           "story: US-001\n"
           "result: complete (+1): every criterion passes (2/2)\n"
           "## 2026-11-29T10:00:05Z run 20261129-100000-aaaaaa ended: complete (exit 0): every "
           "criterion passes (2/2)\n")
NOW = ("## 2026-11-30T16:13:45Z run 20261130-161344-78b56c iteration 1/5\n"
       "story: US-001\n"
       "result: no change: 0/2 passing; failing now: US-001::AC1, US-001::AC2\n")


def test_progress_of_an_earlier_run_is_marked_as_such() -> None:
    # A new run's prompt quoted an earlier run's "every criterion passes" after the code had
    # been reset with git, as if it were the state of the code now.
    out = render_progress(EARLIER + NOW, "20261130-161344-78b56c")
    assert out == (
        "From an earlier run (2026-11-29 10:00 UTC, run 20261129-100000-aaaaaa), the code may "
        "have changed since:\n" + EARLIER + "This run:\n" + NOW.rstrip("\n"))


def test_progress_of_this_run_alone_is_not_marked() -> None:
    assert render_progress(NOW, "20261130-161344-78b56c") == NOW.rstrip("\n")


def test_the_first_prompt_of_a_new_run_marks_every_entry_as_earlier() -> None:
    prd = _prd(_story("US-001", "a", "b"))
    ctx = replace(_ctx(prd, _results(prd, {"US-001::AC1": "x", "US-001::AC2": "y"}),
                       progress=EARLIER + NOW), run="20261201-090000-cccccc")
    prompt = build_prompt("$progress", ctx)
    assert prompt.count("From an earlier run (") == 2
    assert "This run:" not in prompt
    # Every entry comes after its run's marker: none reads as the state of the code now.
    first_entry = prompt.index("## 2026-11-29T10:00:00Z")
    assert prompt.index("From an earlier run (2026-11-29 10:00 UTC") < first_entry
    assert prompt.index("From an earlier run (2026-11-30 16:13 UTC") < prompt.index(
        "## 2026-11-30T16:13:45Z")


def test_without_a_run_id_every_entry_is_an_earlier_runs() -> None:
    # The dry run, or a PromptContext a plugin builds without naming its run.
    out = render_progress(EARLIER, "")
    assert out.startswith("From an earlier run (2026-11-29 10:00 UTC, run 20261129-100000-aaaaaa)")


def test_the_cut_start_of_an_entry_is_dropped_and_the_rest_kept_bounded() -> None:
    progress = "why US-001::AC1: every criterion passes\n" * 200 + EARLIER * 40 + NOW
    out = render_progress(progress, "20261130-161344-78b56c")
    assert out.startswith("...\nFrom an earlier run (")
    assert "why US-001::AC1" not in out  # the cut part of an entry whose run is not known
    assert out.endswith(NOW.rstrip("\n"))
    assert len(out) <= PROGRESS_CHARS + 200


def test_progress_without_entries_is_kept_as_it_is() -> None:
    assert render_progress("notes of my own\n", "r1") == "notes of my own"
    assert render_progress("", "r1") == ""
