"""Unit tests of pytest_ralph.prompt: the template, story choice, failure excerpts and bounds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_ralph.model import PRD, Criterion, Story
from pytest_ralph.prompt import (
    EXCERPT_CHARS,
    MAX_OTHER_FAILURES,
    PromptContext,
    build_prompt,
    excerpt,
    pick_story,
    render_failing,
    template_path,
)
from pytest_ralph.results import CheckResults, CriterionResult

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
    for name in ("$iteration", "$max_iterations", "$goal", "$story", "$failing", "$progress"):
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
    assert "Make all 0 acceptance criteria" in prompt


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
