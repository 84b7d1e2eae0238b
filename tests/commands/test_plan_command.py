"""``pytest --ralph-plan [PRD]``: the plan of a parallel run as JSON on stdout, for a GitHub
Actions matrix; a PRD error on stderr (exit 4) with nothing on stdout; no PRD as the loop
says it (exit 5). Run as a user runs it: pytest in a subprocess."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "prds"


def story(sid: str, *deps: str, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": sid, "title": f"Story {sid}", "acceptanceCriteria": ["done"]}
    return {**out, **({"dependsOn": list(deps)} if deps else {}), **extra}


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--ralph-plan", *args)


def test_the_plan_is_one_json_object_for_a_matrix(pytester: pytest.Pytester,
                                                  write_prd: Callable[..., Path]) -> None:
    path = write_prd(story("US-001", priority=2), story("US-002", priority=1),
              story("US:3", "US-001", "US-002", passes=True), story("US-004", "US:3"))
    before = path.read_bytes()
    result = run(pytester)
    assert result.ret == 0, result.stderr.str()
    assert len(result.outlines) == 1
    plan = json.loads(result.stdout.str())
    assert plan["prd"] == "prd.json"
    assert plan["waves"] == [["US-002", "US-001"], ["US:3"], ["US-004"]]
    assert [e["story"] for e in plan["include"]] == ["US-002", "US-001", "US:3", "US-004"]
    third = plan["include"][2]
    assert set(third) == {"story", "title", "branch", "wave", "dependsOn"}
    assert third["title"] == "Story US:3"
    assert third["wave"] == 1
    assert third["dependsOn"] == ["US-001", "US-002"]
    assert third["branch"].startswith("ralph/US-3-") and ":" not in third["branch"]
    assert plan["include"][0]["branch"] == "ralph/US-002"
    assert result.errlines == []
    assert path.read_bytes() == before
    assert not (pytester.path / ".pytest_ralph").exists()


def test_the_prd_may_be_named(pytester: pytest.Pytester,
                              write_prd: Callable[..., Path]) -> None:
    write_prd(story("A"), story("B", "A"), name="plans/web.json")
    result = run(pytester, "plans/web.json")
    assert result.ret == 0, result.stderr.str()
    assert json.loads(result.stdout.str())["prd"] == "plans/web.json"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--ralph-plan",
                                           "--ralph-prd", "plans/web.json")
    assert result.ret == 0, result.stderr.str()
    assert json.loads(result.stdout.str())["waves"] == [["A"], ["B"]]


def test_a_dependency_error_is_exit_4_on_stderr_only(pytester: pytest.Pytester,
                                                     write_prd: Callable[..., Path]) -> None:
    write_prd(story("US-001", "US-003"), story("US-002", "US-404"), story("US-003", "US-001"))
    result = run(pytester)
    assert result.ret == 4
    assert result.outlines == []
    err = result.stderr.str()
    assert err.startswith("pytest-ralph: --ralph-plan: invalid PRD ")
    assert "prd.json: 2 problems" in err
    result.stderr.fnmatch_lines([
        "*prd.json:*: $.userStories?0?.dependsOn: dependency cycle: US-001 -> US-003 -> US-001;*",
        "*hint: remove one of these dependencies",
        "*prd.json:*: $.userStories?1?.dependsOn: story 'US-002' depends on 'US-404', which is "
        "no story of this PRD; expected one of its story ids (US-001, US-002, US-003)",
        "    hint: fix the id, or remove it (a parallel run waits only for stories of its own "
        "PRD)",
    ])
    assert "Traceback" not in err


def test_a_prd_that_does_not_load_is_exit_4(pytester: pytest.Pytester,
                                            write_prd: Callable[..., Path]) -> None:
    write_prd(story("US-001", dependsOn={"x": 1}))
    result = run(pytester)
    assert result.ret == 4
    assert result.outlines == []
    result.stderr.fnmatch_lines(["pytest-ralph: --ralph-plan: invalid PRD *prd.json: 1 problem",
                                 "*$.userStories?0?.dependsOn: expected an array*",
                                 "*hint: list the ids of the stories it depends on*"])


def test_a_missing_named_prd_is_exit_4(pytester: pytest.Pytester) -> None:
    result = run(pytester, "nope.json")
    assert result.ret == 4
    assert result.outlines == []
    result.stderr.fnmatch_lines(["*invalid PRD *nope.json: 1 problem", "*$: file not found"])


def test_no_prd_is_what_the_loop_says(pytester: pytest.Pytester) -> None:
    result = run(pytester)
    assert result.ret == 5
    assert result.outlines == []
    result.stderr.fnmatch_lines([f"pytest-ralph: --ralph-plan: no PRD found: looked for "
                                 f"prd.json, prd.jsonc, prd.yaml, prd.yml in {pytester.path} "
                                 "and its .ralph, scripts/ralph folders; name one with "
                                 "--ralph-prd PATH (or ini ralph_prd)"])
    pytester.makefile(".json", prd='{"userStories": []}')
    result = run(pytester)
    assert result.ret == 5
    result.stderr.fnmatch_lines(["*prd.json: no user stories: $.userStories is empty*"])


def test_the_gate_still_runs_a_prd_whose_dependencies_the_plan_refuses(
        pytester: pytest.Pytester, write_prd: Callable[..., Path]) -> None:
    write_prd(story("US-001", "US-001"), story("US-002", "US-404"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 1, result.stdout.str()  # two text criteria, unclaimed: failed
    result.assert_outcomes(failed=2)


@pytest.mark.parametrize(("args", "message"), [
    (("a.json", "b.json"), "--ralph-plan takes one PRD file as its only path argument, or none "
                           "*got a.json b.json"),
    (("tests",), "--ralph-plan takes one PRD file as its only path argument*"),
    (("--ralph-status",), "--ralph-status cannot be used with --ralph-plan*"),
    (("--ralph",), "--ralph-plan cannot be used with --ralph*"),
    (("-k", "x"), "-k cannot be used with --ralph-plan*"),
    (("--ralph-prd", "prd.json", "other.json"), "--ralph-plan was given the PRD other.json and "
                                                "*prd.json (from --ralph-prd); name one of them"),
])
def test_refusals(pytester: pytest.Pytester, write_prd: Callable[..., Path],
                  args: tuple[str, ...], message: str) -> None:
    write_prd(story("A"))
    result = run(pytester, *args)
    assert result.ret == 4
    assert result.outlines == []
    result.stderr.fnmatch_lines([f"*pytest-ralph: {message}"])


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS}")
def test_the_large_corpus_prd(pytester: pytest.Pytester) -> None:
    result = run(pytester, str(CORPUS / "large-71-stories.json"))
    assert result.ret == 0, result.stderr.str()
    plan = json.loads(result.stdout.str())
    assert len(plan["include"]) == 71
    assert len(plan["waves"]) == 9
