"""The fixtures ``ralph_prd``, ``ralph_story`` and ``ralph_loop``, used by tests in a pytester
project (real pytest runs; ``ralph_loop`` runs real agents and check phases)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.prd import story


def write_tests(pytester: pytest.Pytester, body: str) -> None:
    pytester.path.joinpath("tests").mkdir(exist_ok=True)
    pytester.path.joinpath("tests", "test_it.py").write_text(textwrap.dedent(body))


@pytest.fixture
def two_stories(write_prd: Callable[..., Path]) -> Path:
    return write_prd(story("US-001", {"exists": "a.txt"}, priority=2),
                     story("US-002", {"exists": "b.txt"}, "text too", priority=1))


def test_ralph_prd_is_the_discovered_prd(pytester: pytest.Pytester, two_stories: Path) -> None:
    pytester.makeconftest("""
        def pytest_ralph_prd_loaded(prd):
            print("LOADED", prd.path.name)
        """)
    write_tests(pytester, """
        def test_prd(ralph_prd):
            assert [s.id for s in ralph_prd.stories] == ["US-001", "US-002"]
            assert [s.id for s in ralph_prd.ordered_stories()] == ["US-002", "US-001"]
            assert len(ralph_prd.criteria()) == 3

        def test_again(ralph_prd):
            assert ralph_prd.project == "Demo"
        """)
    result = pytester.runpytest_subprocess("tests", "-s")
    result.assert_outcomes(passed=2)
    assert result.stdout.str().count("LOADED prd.json") == 1  # once per session


def test_ralph_prd_follows_the_prd_option(pytester: pytest.Pytester,
                                          write_prd: Callable[..., Path]) -> None:
    write_prd(story("OTHER-1", "x"), name="plans/other.json")
    write_tests(pytester, """
        def test_prd(ralph_prd):
            assert ralph_prd.stories[0].id == "OTHER-1"
        """)
    result = pytester.runpytest_subprocess("tests", "--ralph-prd", "plans/other.json")
    result.assert_outcomes(passed=1)


def test_ralph_prd_without_a_prd_fails_at_setup(pytester: pytest.Pytester) -> None:
    write_tests(pytester, """
        def test_prd(ralph_prd):
            pass
        """)
    result = pytester.runpytest_subprocess("tests")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["ralph_prd: no PRD found: set --ralph-prd PATH or ini "
                                 "ralph_prd, or put one of prd.json, prd.jsonc, prd.yaml, "
                                 "prd.yml in *"])
    assert "Traceback" not in result.stdout.str()


def test_ralph_prd_invalid_fails_at_setup_with_the_problem(pytester: pytest.Pytester) -> None:
    (pytester.path / "prd.json").write_text(json.dumps(
        {"userStories": [{"id": "US 1", "title": "t", "acceptanceCriteria": ["x"]}]}))
    write_tests(pytester, """
        def test_prd(ralph_prd):
            pass
        """)
    result = pytester.runpytest_subprocess("tests")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["ralph_prd: *prd.json*", "*$.userStories[[]0[]].id*invalid id*"])
    assert "Traceback" not in result.stdout.str()


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["sequential", "xdist"])
def test_ralph_story_runs_once_per_story(pytester: pytest.Pytester, two_stories: Path,
                                         workers: list[str]) -> None:
    write_tests(pytester, """
        def test_has_a_title(ralph_story):
            assert ralph_story.title == f"story {ralph_story.id}"

        def test_one_criterion_each(ralph_story):
            assert len(ralph_story.criteria) == 1
        """)
    result = pytester.runpytest_subprocess("tests", "-rA", "-p", "no:randomly", *workers)
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines_random([
        "PASSED tests/test_it.py::test_has_a_title[[]US-001[]]",
        "PASSED tests/test_it.py::test_has_a_title[[]US-002[]]",
        "PASSED tests/test_it.py::test_one_criterion_each[[]US-001[]]",
        "FAILED tests/test_it.py::test_one_criterion_each[[]US-002[]] - *"])


def test_ralph_story_can_be_chosen_by_id(pytester: pytest.Pytester, two_stories: Path) -> None:
    write_tests(pytester, """
        import pytest

        @pytest.mark.parametrize("ralph_story", ["US-002"], indirect=True)
        def test_chosen(ralph_story):
            assert ralph_story.priority == 1

        @pytest.mark.parametrize("ralph_story", ["US-404"], indirect=True)
        def test_unknown(ralph_story):
            pass
        """)
    result = pytester.runpytest_subprocess("tests")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["ralph_story: no story 'US-404' in *prd.json (its stories: "
                                 "US-001, US-002)"])


def test_ralph_story_parametrized_by_a_conftest_hook(pytester: pytest.Pytester,
                                                     two_stories: Path) -> None:
    pytester.makeconftest("""
        def pytest_generate_tests(metafunc):
            if metafunc.function.__name__ == "test_custom":
                metafunc.parametrize("ralph_story", ["US-002"], indirect=True)
        """)
    write_tests(pytester, """
        def test_custom(ralph_story):
            assert ralph_story.id == "US-002"
        """)
    result = pytester.runpytest_subprocess("tests")
    result.assert_outcomes(passed=1)


def test_ralph_story_with_no_stories(pytester: pytest.Pytester) -> None:
    (pytester.path / "prd.json").write_text('{"userStories": []}')
    write_tests(pytester, """
        def test_each(ralph_story):
            pass
        """)
    result = pytester.runpytest_subprocess("tests")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["ralph_story: *prd.json has no user stories"])


AGENT = """
import sys
from pathlib import Path
for name in ("a.txt", "b.txt"):
    if not Path(name).exists():
        Path(name).write_text(" ".join(sys.argv[1:]))
        break
"""


def test_ralph_loop_runs_and_can_be_inspected(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        def pytest_ralph_build_prompt(context):
            return f"make the files; iteration {context.iteration}"
        """)
    write_tests(pytester, f"""
        import sys
        from pathlib import Path

        AGENT = {AGENT!r}

        def test_loop(ralph_loop, tmp_path):
            project = Path.cwd()
            (project / "agent.py").write_text(AGENT)
            prd = {{"project": "files", "userStories": [
                {{"id": "A", "title": "a", "priority": 1,
                  "acceptanceCriteria": [{{"exists": "a.txt"}}]}},
                {{"id": "B", "title": "b", "priority": 2,
                  "acceptanceCriteria": [{{"exists": "b.txt"}}]}}]}}
            result = ralph_loop(prd=prd, agent=[sys.executable, "agent.py"],
                                max_iterations=4).run()
            assert result.complete, result.output
            assert (result.exit_code, result.status, result.iterations) == (0, "complete", 2)
            assert result.stories == ["A", "B"]
            assert result.passing == ["A::AC1", "B::AC1"] and result.failing == []
            assert result.prompts() == ["make the files; iteration 1",
                                        "make the files; iteration 2"]
            assert "- Outcome: **complete**" in result.report.read_text()
            assert result.state_dir == tmp_path / "ralph-state"
            assert "[ralph iteration 2/4]" in result.output

        def test_limit(ralph_loop):
            result = ralph_loop(prd={{"userStories": [{{"id": "N", "title": "n",
                                "acceptanceCriteria": [{{"exists": "never.txt"}}]}}]}},
                                agent=[sys.executable, "-c", "pass"], max_iterations=2,
                                breaker=5).run()
            assert (result.exit_code, result.status, result.iterations) == (1, "limit", 2)
            assert result.failing == ["N::AC1"]
            assert "iteration limit (2)" in result.reason

        def test_dry_run(ralph_loop):
            text = ralph_loop(prd={{"userStories": [{{"id": "N", "title": "n",
                              "acceptanceCriteria": [{{"exists": "never.txt"}}]}}]}},
                              agent="echo hi").dry_run()
            assert "make the files; iteration 1" in text

        def test_no_agent_is_reported(ralph_loop):
            result = ralph_loop(prd={{"userStories": [{{"id": "N", "title": "n",
                                "acceptanceCriteria": ["x"]}}]}}).run()
            assert (result.exit_code, result.status, result.run) == (4, "", None)
            assert "no agent configured" in result.reason
        """)
    result = pytester.runpytest_subprocess("tests", "-p", "no:randomly")
    result.assert_outcomes(passed=4)


def test_ralph_loop_until_fixes_a_test(pytester: pytest.Pytester) -> None:
    write_tests(pytester, """
        import sys

        def test_until(ralph_loop, tmp_path):
            project = tmp_path / "project"
            project.mkdir()
            (project / "calc.py").write_text("def add(a, b):\\n    return a - b\\n")
            (project / "test_calc.py").write_text(
                "from calc import add\\n\\ndef test_add():\\n    assert add(2, 3) == 5\\n")
            (project / "fix.py").write_text(
                "from pathlib import Path\\n"
                "p = Path('calc.py'); p.write_text(p.read_text().replace('a - b', 'a + b'))\\n")
            result = ralph_loop(rootdir=project).until(
                "test_calc.py::test_add", agent=[sys.executable, "fix.py"], max_iterations=3)
            assert (result.exit_code, result.iterations) == (0, 1), result.output
            assert "a + b" in (project / "calc.py").read_text()

        def test_bad_setting(ralph_loop):
            ralph_loop(max_iteratons=3)

        def test_bad_value(ralph_loop):
            ralph_loop(max_iterations=0, agent=None).run()

        def test_bad_prd(ralph_loop):
            ralph_loop(prd=["x"])
        """)
    result = pytester.runpytest_subprocess("tests", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines_random([
        "*ralph_loop: unknown setting 'max_iteratons'; expected one of *max_iterations*",
        "*ralph_loop: max_iterations from ralph_loop(max_iterations=...): expected *; got '0'",
        "*ralph_loop: prd: expected a path or a dict (the PRD itself); got [[]'x'[]]"])
