"""Where the PRD dialect shows: `pytest` and `pytest --collect-only` say which dialect was
applied to which file and what was synthesized; `pytest --ralph` says it at the start, in the
dry run and in the report header; an empty story container is named in the exit-5 message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.loop.report import shown_path
from pytest_ralph.prd.describe import dialect_line, no_stories_message
from pytest_ralph.prd.model import PRD, Criterion, Story
from pytest_ralph.testing import AgentFactory
from tests.support.env import PY

#: `tasks` + `steps` + `status`, no ids: three stories S1..S3.
TASKS = {"project": "Todo", "tasks": [
    {"title": "make a", "steps": [{"text": "a exists", "run": "test -f a.txt"}],
     "status": "open"},
    {"title": "make b", "steps": [{"text": "b exists", "run": "true"}], "status": "done"},
    {"title": "make c", "steps": [{"text": "c exists", "run": "test -f c.txt"}],
     "status": "open"},
]}
TASKS_LINE = ("pytest-ralph: prd.json: dialect tasks+* (stories under $.tasks; ids synthesized "
              "from position: S1..S3; *status 'open' -> passes false (2 stories)*)")
TASKS_RULES = {"tasks", "steps", "status", "position-ids"}

#: A top-level array of stories that have only a title.
ARRAY = [{"title": "first thing"}, {"title": "second thing"}]
ARRAY_LINE = ("pytest-ralph: prd.json: dialect top-level-array+* (stories are the top-level "
              "array; ids synthesized from position: S1..S2; *criteria from titles for 2 "
              "stories*)")
ARRAY_RULES = {"top-level-array", "title-criteria", "position-ids"}

#: Stories under phases, criteria under `acceptance`, priorities as P0..P9.
PHASES = {"project": "Phased", "phases": [
    {"name": "one", "stories": [{"id": "P1", "title": "t", "priority": "P1",
                                 "acceptance": [{"text": "ok", "run": "true"}]}]},
    {"name": "two", "stories": [{"id": "P2", "title": "u", "priority": "P0",
                                 "acceptance": ["claimed text"]}]},
]}
PHASES_LINE = ("pytest-ralph: prd.json: dialect phases+* (stories under $.phases[[]].stories: "
               "2 phases*; criteria from 'acceptance' for 2 stories*)")
PHASES_RULES = {"phases", "acceptance", "P-priority"}

CANONICAL = {"project": "Plain", "userStories": [
    {"id": "US-1", "title": "t", "acceptanceCriteria": [{"text": "ok", "run": "true"}],
     "priority": 1, "passes": False, "notes": ""}]}


def write(pytester: pytest.Pytester, data: Any, name: str = "prd.json") -> Path:
    path = pytester.path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def ralph_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("pytest-ralph:")]


def dialect_rules(text: str) -> set[str]:
    """The rule names of the one dialect line in ``text``."""
    (line,) = [ln for ln in ralph_lines(text) if ": dialect " in ln]
    return set(line.split(": dialect ", 1)[1].split(" ", 1)[0].split("+"))


# --- the helpers, on PRD objects -----------------------------------------------------------


def _prd(tmp_path: Path, n_stories: int = 1, **fields: Any) -> PRD:
    stories = tuple(
        Story(f"S{i}", "t", "", (Criterion(f"S{i}", 1, "AC1", "t", "text", synthesized=True),),
              None, False, "", i - 1) for i in range(1, n_stories + 1))
    return PRD(tmp_path / "prd.json", "json", "", "", "", stories, **fields)


def test_dialect_line_joins_the_notes(tmp_path: Path) -> None:
    prd = _prd(tmp_path, 2, dialect="top-level-array+title-criteria", stories_path="$",
               dialect_notes=("stories are the top-level array",
                              "criteria from titles for 2 stories"))
    assert dialect_line(prd) == ("dialect top-level-array+title-criteria (stories are the "
                                 "top-level array; criteria from titles for 2 stories)")


def test_dialect_line_without_notes_and_for_canonical(tmp_path: Path) -> None:
    assert dialect_line(_prd(tmp_path, dialect="stories")) == "dialect stories"
    assert dialect_line(_prd(tmp_path)) is None
    assert dialect_line(_prd(tmp_path, dialect_notes=("anything",))) is None


def test_dialect_line_of_an_empty_prd_leaves_the_no_stories_note_to_the_message(
        tmp_path: Path) -> None:
    prd = _prd(tmp_path, 0, dialect="tasks", stories_path="$.tasks",
               dialect_notes=("stories under $.tasks", "no stories: $.tasks is empty"))
    assert dialect_line(prd) == "dialect tasks (stories under $.tasks)"


@pytest.mark.parametrize(("stories_path", "what"), [
    ("$.userStories", "$.userStories is empty"),
    ("$.tasks", "$.tasks is empty"),
    ("$", "the top-level array is empty"),
    ("$.phases[].stories", "no phase under $.phases has any story"),
])
def test_no_stories_message_names_the_container(tmp_path: Path, stories_path: str,
                                                what: str) -> None:
    prd = _prd(tmp_path, 0, stories_path=stories_path)
    assert no_stories_message(prd) == (f"no user stories: {what}; expected at least one story "
                                       "with acceptance criteria")


def test_shown_path_is_relative_inside_the_root(tmp_path: Path) -> None:
    assert shown_path(tmp_path / ".ralph" / "prd.json", tmp_path) == ".ralph/prd.json"
    outside = tmp_path.parent / "elsewhere" / "prd.json"
    assert shown_path(outside, tmp_path) == str(outside)


# --- plain pytest and --collect-only -------------------------------------------------------


@pytest.mark.parametrize("args", [("--collect-only",), ("--collect-only", "-q"), ("-q",), ()])
@pytest.mark.parametrize(("data", "expected", "rules"), [
    (TASKS, TASKS_LINE, TASKS_RULES), (ARRAY, ARRAY_LINE, ARRAY_RULES),
    (PHASES, PHASES_LINE, PHASES_RULES)], ids=["tasks-steps-status", "top-level-array", "phases"])
def test_one_line_names_the_dialect_and_what_was_synthesized(
        pytester: pytest.Pytester, data: Any, expected: str, rules: set[str],
        args: tuple[str, ...]) -> None:
    write(pytester, data)
    result = pytester.runpytest(*args)
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    result.stdout.fnmatch_lines([expected])
    assert dialect_rules(result.stdout.str()) >= rules  # exactly one line, naming the rules


def test_the_line_follows_the_collected_count(pytester: pytest.Pytester) -> None:
    write(pytester, TASKS)
    result = pytester.runpytest("--collect-only")
    result.stdout.fnmatch_lines(["collected 3 items", TASKS_LINE, "", "<Dir *>"])


def test_canonical_prd_adds_nothing(pytester: pytest.Pytester) -> None:
    write(pytester, CANONICAL)
    for args in (("--collect-only",), ("--collect-only", "-q"), ("-q",)):
        result = pytester.runpytest(*args)
        assert ": dialect " not in result.stdout.str(), args
    result = pytester.runpytest("--collect-only", "-q")
    assert result.stdout.lines[:2] == ["prd.json::US-1::AC1", ""]


def test_each_dialect_file_gets_its_own_line_with_its_relative_path(
        pytester: pytest.Pytester) -> None:
    write(pytester, TASKS)
    write(pytester, ARRAY, "sub/prd.json")
    write(pytester, CANONICAL, "other/prd.json")
    result = pytester.runpytest("--collect-only", "-q")
    lines = [ln for ln in ralph_lines(result.stdout.str()) if ": dialect " in ln]
    assert sorted(ln.split(": dialect ")[0] for ln in lines) == [
        "pytest-ralph: prd.json", "pytest-ralph: sub/prd.json"]


def test_a_discovered_prd_in_a_hidden_folder_is_named_too(pytester: pytest.Pytester) -> None:
    write(pytester, ARRAY, ".ralph/prd.json")
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines([ARRAY_LINE.replace("prd.json:", ".ralph/prd.json:", 1)])


def test_under_xdist_the_summary_names_the_dialect_once(pytester: pytest.Pytester) -> None:
    write(pytester, TASKS)
    result = pytester.runpytest_subprocess("-n", "2", "-q")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*= pytest-ralph: acceptance criteria =*", TASKS_LINE])
    assert dialect_rules(result.stdout.str()) >= TASKS_RULES  # once, not once per worker


def test_under_xdist_an_empty_container_is_named_once(pytester: pytest.Pytester) -> None:
    path = write(pytester, {"tasks": []})
    result = pytester.runpytest_subprocess("-n", "2", "-q")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(["pytest-ralph: prd.json: dialect tasks (stories under $.tasks)",
                                 f"pytest-ralph: {path}: no user stories: $.tasks is empty; "
                                 "expected at least one story with acceptance criteria"])
    assert result.stdout.str().count("no user stories") == 1


EMPTY = [
    ({"userStories": []}, "$.userStories is empty"),
    ({"tasks": []}, "$.tasks is empty"),
    ([], "the top-level array is empty"),
    ({"phases": [{"name": "one", "stories": []}]}, "no phase under $.phases has any story"),
]
EMPTY_IDS = ["userStories", "tasks", "top-level-array", "phases"]


@pytest.mark.parametrize(("data", "what"), EMPTY, ids=EMPTY_IDS)
def test_an_empty_container_is_exit_5_naming_it(pytester: pytest.Pytester, data: Any,
                                                what: str) -> None:
    path = write(pytester, data)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines([f"pytest-ralph: {path}: no user stories: {what}; expected at "
                                 "least one story with acceptance criteria"])
    assert "userStories is empty:" not in result.stdout.str()  # the old wording


@pytest.mark.parametrize(("data", "what"), EMPTY, ids=EMPTY_IDS)
def test_the_loop_on_an_empty_container_is_exit_5_naming_it(pytester: pytest.Pytester,
                                                            data: Any, what: str) -> None:
    path = write(pytester, data)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", f"{PY} -c pass")
    assert result.ret == 5
    result.stderr.fnmatch_lines([f"pytest-ralph: {path}: no user stories: {what}; expected at "
                                 "least one story with acceptance criteria"])


# --- pytest --ralph ------------------------------------------------------------------------


def test_the_loop_names_the_dialect_at_the_start_and_in_the_report(
        pytester: pytest.Pytester, ralph_agent: AgentFactory) -> None:
    write(pytester, TASKS)
    agent = ralph_agent({"files": {"a.txt": "a\n", "c.txt": "c\n"}})
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["pytest-ralph: loop on *prd.json (3 criteria of 3 stories)*",
                                 TASKS_LINE], consecutive=True)
    (report,) = (pytester.path / ".pytest_ralph" / "reports").glob("ralph-*.md")
    text = report.read_text(encoding="utf-8")
    header = text.split("\n\n## ", 1)[0]
    assert "- PRD dialect: `tasks+" in header
    assert "normalized on load to the canonical shape:\n  - stories under $.tasks\n" in header
    assert "  - ids synthesized from position: S1..S3\n" in header
    assert "  - status 'open' -> passes false (2 stories)" in header


def test_the_loop_on_a_canonical_prd_says_nothing_about_dialects(
        pytester: pytest.Pytester, ralph_agent: AgentFactory) -> None:
    write(pytester, CANONICAL)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", ralph_agent().command)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert ": dialect " not in result.stdout.str()  # (the test's folder has "dialect" in it)
    (report,) = (pytester.path / ".pytest_ralph" / "reports").glob("ralph-*.md")
    assert "PRD dialect" not in report.read_text(encoding="utf-8")


@pytest.mark.parametrize(("data", "expected"), [(TASKS, TASKS_LINE), (ARRAY, ARRAY_LINE)],
                         ids=["tasks-steps-status", "top-level-array"])
def test_the_dry_run_names_the_dialect(pytester: pytest.Pytester, data: Any,
                                       expected: str) -> None:
    write(pytester, data)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-dry-run", "--ralph-agent",
                                           f"{PY} -c pass")
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(["pytest-ralph dry run: PRD *prd.json; nothing is run or "
                                 "written.", expected, "--- agent argv ---"], consecutive=True)


def test_the_dry_run_on_a_canonical_prd_has_no_dialect_line(pytester: pytest.Pytester) -> None:
    write(pytester, CANONICAL)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-dry-run", "--ralph-agent",
                                           f"{PY} -c pass")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["pytest-ralph dry run: PRD *prd.json; nothing is run or "
                                 "written.", "--- agent argv ---"], consecutive=True)
    assert ": dialect " not in result.stdout.str()
