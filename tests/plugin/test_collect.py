"""Plain `pytest` on a PRD: collection, node ids, check kinds, the gate summary, bad input."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.prd import story

Writer = Callable[..., Path]


def test_node_ids_and_explicit_criterion_ids(pytester: pytest.Pytester, write_prd: Writer) -> None:
    write_prd(story("US-001", "Typecheck passes",
                    {"id": "login-ok", "text": "login", "run": "true"},
                    {"text": "logout", "run": "true"}),
              story("US-002", "Docs"))
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines([
        "prd.json::US-001::AC1", "prd.json::US-001::login-ok", "prd.json::US-001::AC3",
        "prd.json::US-002::AC1", "", "4 tests collected*"])


def test_headline_is_the_criterion_text(pytester: pytest.Pytester, write_prd: Writer) -> None:
    write_prd(story("US-001", {"text": "the flag file exists", "run": "test -f flag"}))
    result = pytester.runpytest()
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*_ US-001::AC1: the flag file exists _*"])


def test_k_selects_a_story(pytester: pytest.Pytester, write_prd: Writer) -> None:
    write_prd(story("US-001", {"text": "a", "run": "true"}, {"text": "b", "run": "true"}),
              story("US-002", {"text": "c", "run": "false"}))
    result = pytester.runpytest("-k", "US-001", "-v")
    assert result.ret == 0
    result.assert_outcomes(passed=2, deselected=1)


def test_ralph_story_deselects_other_stories(pytester: pytest.Pytester,
                                             write_prd: Writer) -> None:
    write_prd(story("US-001", {"text": "a", "run": "true"}),
              story("US-002", {"text": "c", "run": "false"}))
    result = pytester.runpytest("--ralph-story", "US-001")
    assert result.ret == 0
    result.assert_outcomes(passed=1, deselected=1)


def test_failing_run_shows_command_exit_code_and_output_tail(pytester: pytest.Pytester,
                                                             write_prd: Writer) -> None:
    cmd = "for i in $(seq 1 3000); do echo line-$i; done; echo boom >&2; exit 3"
    write_prd(story("US-001", {"text": "noisy", "run": cmd}))
    result = pytester.runpytest()
    assert result.ret == 1
    out = result.stdout.str()
    assert f"exit status 3, expected exit status 0: `{cmd}`" in out
    assert "line-3000" in out and "boom" in out
    assert "line-1\n" not in out  # only the tail is kept
    # Newer pytest versions show the first line of a plain-text failure in the short summary.
    (short,) = [ln for ln in result.outlines if ln.startswith("FAILED prd.json::US-001::AC1")]
    assert short == "FAILED prd.json::US-001::AC1" or short.startswith(
        "FAILED prd.json::US-001::AC1 - exit status 3, expected exit status 0")


@pytest.mark.parametrize(("criterion", "expected"), [
    ({"text": "tool", "run": "definitely-not-a-command-xyz"},
     "exit status 127 (command not found)"),
    ({"text": "file", "run": "test -f deleted.txt"}, "exit status 1"),
    ({"text": "cwd", "run": "true", "cwd": "no/such/dir"}, "working directory * does not exist"),
    ({"text": "slow", "run": "sleep 30", "timeout": 0.5}, "no exit within the timeout of 0.5 s"),
    ({"text": "alias", "testCommand": "exit 4"}, "exit status 4"),
])
def test_run_failures_are_failures(pytester: pytest.Pytester, write_prd: Writer,
                                   criterion: dict[str, object], expected: str) -> None:
    write_prd(story("US-001", criterion))
    result = pytester.runpytest()
    assert result.ret == 1
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{expected}*"])


def test_run_cwd_is_relative_to_the_rootdir(pytester: pytest.Pytester, write_prd: Writer) -> None:
    (pytester.path / "sub").mkdir()
    (pytester.path / "sub" / "here.txt").write_text("x")
    write_prd(story("US-001", {"text": "in sub", "run": "test -f here.txt", "cwd": "sub"}),
              name="plans/prd.json")
    result = pytester.runpytest("plans/prd.json")
    result.assert_outcomes(passed=1)


def test_text_criteria_are_claimed(pytester: pytest.Pytester, write_prd: Writer) -> None:
    write_prd(story("US-001", "Typecheck passes", passes=True),
              story("US-002", "Docs are written", passes=False))
    result = pytester.runpytest()
    assert result.ret == 1
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*claimed, not verified: the story does not claim `passes: true`*",
        "*pytest-ralph: acceptance criteria*",
        "US-001: 0 verified, 1 claimed, 0 failed",
        "US-002: 0 verified, 0 claimed, 1 failed",
        "claimed, not verified (1):*",
        "  US-001::AC1: Typecheck passes"])


@pytest.mark.parametrize("how", ["cli", "env", "ini"])
def test_strict_fails_claimed_criteria(pytester: pytest.Pytester, write_prd: Writer,
                                       monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    write_prd(story("US-001", "Typecheck passes", {"text": "ok", "run": "true"}, passes=True))
    args = []
    if how == "cli":
        args.append("--ralph-strict")
    elif how == "env":
        monkeypatch.setenv("PYTEST_RALPH_STRICT", "1")
    else:
        pytester.makeini("[pytest]\nralph_strict = true\n")
    result = pytester.runpytest(*args)
    assert result.ret == 1
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*--ralph-strict refuses claims*"])


def test_story_without_criteria_gets_its_title(pytester: pytest.Pytester,
                                               write_prd: Writer) -> None:
    write_prd(story("US-001", title="Ship the login page", passes=True))
    result = pytester.runpytest("-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*US-001::AC1: Ship the login page*"])


@pytest.mark.parametrize(("content", "expected"), [
    ('{"userStories": [\n  {"id": "US-1", "title": "t", "acceptanceCriteria": [],}\n]}\n',
     ["*invalid PRD *prd.json: 1 problem",
      "*prd.json:2:*: $: invalid JSON: *",
      "*hint: remove the comma, or rename the file to .jsonc*"]),
    (json.dumps({"userStories": [
        {"id": "US-1", "title": "a", "acceptanceCriteria": ["x"]},
        {"id": "US-1", "title": "b", "acceptanceCriteria": ["y"]}]}, indent=1),
     ["*prd.json:*: $.userStories[[]1[]].id: duplicate story id 'US-1'*"]),
    (json.dumps({"userStories": [
        {"id": "US-1", "title": "a", "acceptanceCriteria": [42, {"cmd": "x"}]}]}, indent=1),
     ["*invalid PRD *prd.json: 2 problems",
      "*$.userStories[[]0[]].acceptanceCriteria[[]0[]]: expected a criterion*found number 42",
      "*$.userStories[[]0[]].acceptanceCriteria[[]1[]]: expected a criterion*found an object "
      "with keys 'cmd'"]),
])
def test_bad_prd_is_a_collection_error_without_traceback(pytester: pytest.Pytester, content: str,
                                                         expected: list[str]) -> None:
    (pytester.path / "prd.json").write_text(content)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED  # collection errors stop the run
    result.stdout.fnmatch_lines(expected, consecutive=False)
    out = result.stdout.str()
    assert "Traceback" not in out and "prd/load.py" not in out


def test_empty_user_stories_is_exit_5_naming_the_file(pytester: pytest.Pytester,
                                                      write_prd: Writer) -> None:
    path = write_prd()
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines([f"pytest-ralph: {path}: no user stories: $.userStories is "
                                 "empty; expected at least one story with acceptance criteria"])
    assert ": dialect " not in result.stdout.str()  # a canonical file: no dialect line


@pytest.mark.parametrize("where", [".ralph/prd.json", "scripts/ralph/prd.yaml", "prd.json"])
def test_discovered_prd_is_collected_once_even_in_hidden_folders(
        pytester: pytest.Pytester, where: str) -> None:
    path = pytester.path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"userStories": [{"id": "US-1", "title": "t",
                             "acceptanceCriteria": [{"text": "ok", "run": "true"}]}]}
    path.write_text(json.dumps(data))
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines([f"{where}::US-1::AC1", "", "1 test collected*"])


def test_discovered_prd_is_not_added_when_paths_are_given(pytester: pytest.Pytester,
                                                          write_prd: Writer) -> None:
    write_prd(story("US-1", {"text": "ok", "run": "true"}), name=".ralph/prd.json")
    pytester.makepyfile(test_a="def test_a(): pass")
    result = pytester.runpytest("test_a.py")
    result.assert_outcomes(passed=1)



@pytest.mark.parametrize(("where", "ignore"), [
    ("prd.json", "--ignore=prd.json"), (".ralph/prd.json", "--ignore=.ralph"),
    ("prd.json", "--ignore-glob=*.json"), ("prd.json", "conftest")])
def test_ignore_keeps_a_bare_pytest_to_the_tests(pytester: pytest.Pytester, write_prd: Writer,
                                                 where: str, ignore: str) -> None:
    """``--ignore``, ``--ignore-glob`` and ``collect_ignore`` exclude the discovered PRD from a
    bare ``pytest`` (a broken PRD then no longer stops the unit tests); named on the command
    line, the PRD is still the gate, as pytest does for any ignored path named there."""
    write_prd(story("US-1", {"text": "ok", "run": "true"}), name=where)
    pytester.makepyfile(test_a="def test_a(): pass")
    if ignore == "conftest":
        pytester.makeconftest(f"collect_ignore = [{where!r}]")
    else:
        pytester.makeini(f"[pytest]\naddopts = {ignore}\n")
    pytester.runpytest().assert_outcomes(passed=1)
    named = pytester.runpytest(where, "--collect-only", "-q")
    named.stdout.fnmatch_lines([f"{where}::US-1::AC1"])

def test_ralph_prd_names_a_file_with_any_name(pytester: pytest.Pytester,
                                              write_prd: Writer) -> None:
    write_prd(story("US-1", {"text": "ok", "run": "true"}), name="plans/sprint-4.json")
    pytester.makeini("[pytest]\nralph_prd = plans/sprint-4.json\n")
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(["plans/sprint-4.json::US-1::AC1"])


def test_prd_file_patterns_from_ini(pytester: pytest.Pytester, write_prd: Writer) -> None:
    write_prd(story("US-1", {"text": "ok", "run": "true"}), name="login.prd.json")
    write_prd(story("US-2", {"text": "ok", "run": "true"}), name="prd.json")
    pytester.makeini("[pytest]\nralph_prd_files = *.prd.json\n")
    result = pytester.runpytest("--collect-only", "-q", ".")
    result.stdout.fnmatch_lines(["login.prd.json::US-1::AC1", "", "1 test collected*"])


def test_prd_named_on_the_command_line(pytester: pytest.Pytester) -> None:
    (pytester.path / "plan.yaml").write_text(
        "userStories:\n  - id: US-1\n    title: t\n    acceptanceCriteria:\n"
        "      - text: ok\n        run: 'true'\n")
    result = pytester.runpytest("plan.yaml")
    result.assert_outcomes(passed=1)


def test_jsonc_prd(pytester: pytest.Pytester) -> None:
    (pytester.path / "prd.jsonc").write_text(
        '// plan\n{"userStories": [ /* one */ {"id": "US-1", "title": "t",\n'
        ' "acceptanceCriteria": [{"text": "ok", "run": "true"},],},]}\n')
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)


def test_gate_under_xdist(pytester: pytest.Pytester, write_prd: Writer) -> None:
    write_prd(story("US-001", {"text": "a", "run": "true"}, "Typecheck passes", passes=True),
              story("US-002", {"text": "c", "run": "false"}, {"text": "d", "run": "true"}))
    result = pytester.runpytest_subprocess("-n", "2", "-p", "xdist")
    assert result.ret == 1
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines_random([
        "US-001: 1 verified, 1 claimed, 0 failed", "US-002: 1 verified, 0 claimed, 1 failed"])


def test_bad_ini_value_is_a_usage_error(pytester: pytest.Pytester, write_prd: Writer) -> None:
    write_prd(story("US-1", {"text": "ok", "run": "true"}))
    pytester.makeini("[pytest]\nralph_check_timeout = soon\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*check_timeout from ini ralph_check_timeout (tox.ini): "
                                 "expected a number of seconds*got 'soon'*"])


def test_header_shows_non_default_settings(pytester: pytest.Pytester, write_prd: Writer) -> None:
    write_prd(story("US-1", {"text": "ok", "run": "true"}))
    pytester.makeini("[pytest]\nralph_strict = true\n")
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(["ralph: strict = true (ini ralph_strict (tox.ini))"])


@pytest.mark.parametrize("how", ["ini", "env"])
def test_a_configured_prd_that_does_not_exist_is_a_usage_error(
        pytester: pytest.Pytester, write_prd: Writer, monkeypatch: pytest.MonkeyPatch,
        how: str) -> None:
    write_prd(story("US-1", {"text": "ok", "run": "true"}), name="scripts/ralph/prd.json")
    if how == "ini":
        pytester.makeini("[pytest]\nralph_prd = missing/prd.json\n")
        source = "ini ralph_prd (tox.ini)"
    else:
        monkeypatch.setenv("PYTEST_RALPH_PRD", "missing/prd.json")
        source = "environment variable PYTEST_RALPH_PRD"
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*the PRD */missing/prd.json (from {source}) does not exist*"])


@pytest.mark.skipif(pytest.version_tuple < (9, 2), reason="[tool.pytest] native types: 9.2+")
def test_native_toml_values_in_tool_pytest(pytester: pytest.Pytester, write_prd: Writer) -> None:
    write_prd(story("US-1", "Typecheck passes", passes=True))
    pytester.makepyprojecttoml("[tool.pytest]\nralph_strict = true\nralph_check_timeout = 2.5\n"
                               "ralph_max_iterations = 7\n")
    result = pytester.runpytest()
    assert result.ret == 1  # strict: the claimed criterion fails
    result.stdout.fnmatch_lines(["ralph: max_iterations = 7 (*); strict = true (*); "
                                 "check_timeout = 2.5 (*)"])


def test_claims_gate_only_counts_stories_that_claim_done(pytester: pytest.Pytester,
                                                         write_prd: Writer) -> None:
    write_prd(story("US-1", {"text": "ok", "run": "true"}, passes=True),
              story("US-2", {"text": "wip", "run": "false"}, "Docs written", passes=False))
    result = pytester.runpytest("--ralph-gate=claims", "-rA")
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1, xfailed=2)
    result.stdout.fnmatch_lines_random([
        "US-2: 0 verified, 0 claimed, 0 failed, 2 failing in a story not claimed done (not "
        "counted: --ralph-gate=claims)"])


def test_claims_gate_fails_a_claimed_story_naming_both(pytester: pytest.Pytester,
                                                       write_prd: Writer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    write_prd(story("US-1", {"text": "ok", "run": "true"}, {"text": "bad", "run": "false"},
                    passes=True),
              story("US-2", {"text": "wip", "run": "false"}, passes=False))
    monkeypatch.setenv("PYTEST_RALPH_GATE", "claims")
    result = pytester.runpytest()
    assert result.ret == 1
    result.assert_outcomes(passed=1, failed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*story US-1 claims passes: true, but criterion US-1::AC2 "
                                 "fails: exit status 1*"])


def test_bad_gate_value_names_the_source(pytester: pytest.Pytester, write_prd: Writer) -> None:
    write_prd(story("US-1", {"text": "ok", "run": "true"}))
    result = pytester.runpytest("--ralph-gate", "some")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*gate from --ralph-gate: expected 'all' or 'claims'; got "
                                 "'some'*"])


def test_many_failing_criteria_get_one_line_each(pytester: pytest.Pytester,
                                                 write_prd: Writer) -> None:
    """Past 50 failing criteria pytest's quadratic failure sections are replaced."""
    write_prd(story("US-1", *[{"exists": f"missing-{i}.txt"} for i in range(60)],
                    {"text": "ok", "run": "true"}))
    pytester.makepyfile(test_other="def test_other():\n    assert 1 == 2\n")
    result = pytester.runpytest("-p", "no:randomly")
    assert result.ret == 1
    result.assert_outcomes(passed=1, failed=61)
    out = result.stdout.str()
    assert "pytest-ralph: 60 failing criteria, one line each" in out
    assert "FAILED prd.json::US-1::AC60 - nothing at `missing-59.txt`" in out
    # Ordinary tests keep their full failure section.
    assert "_ test_other _" in out and "assert 1 == 2" in out
    assert "_ US-1::AC1" not in out


def test_few_failing_criteria_keep_pytest_failure_sections(pytester: pytest.Pytester,
                                                           write_prd: Writer) -> None:
    write_prd(story("US-1", *[{"exists": f"missing-{i}.txt"} for i in range(3)]))
    result = pytester.runpytest()
    result.assert_outcomes(failed=3)
    assert "one line each" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*_ US-1::AC1: missing-0.txt exists _*"])


def test_ralph_story_naming_no_story_says_so(pytester: pytest.Pytester, write_prd: Writer) -> None:
    """The loop names a missing story; the gate used to say only "1 deselected"."""
    write_prd(story("US-1", {"text": "ok", "run": "true"}))
    result = pytester.runpytest("prd.json", "--ralph-story", "US-9", "--ralph-story", "US-1")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["pytest-ralph: no story 'US-9' in the collected PRDs (from "
                                 "--ralph-story); their stories: US-1"])
    quiet = pytester.runpytest("prd.json", "--ralph-story", "US-1")
    assert "no story" not in quiet.stdout.str()
