"""The oracle-integrity guard: what it hashes, what it ignores, and the loop refusing to end on
an edited oracle (the tampering scenarios), plus flaky criteria re-checks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.oracle import Change, apply, compare, snapshot
from pytest_ralph.prd import load_prd
from pytest_ralph.results import CheckResults, CriterionResult

from .conftest import story
from .test_loop import agent_runs, report_text, run_json


def prd_file(root: Path, *stories: dict[str, Any]) -> Path:
    path = root / "prd.json"
    path.write_text(json.dumps({"project": "Guard", "userStories": list(stories)}, indent=2))
    return path


def subjects(root: Path, path: Path, **kw: Any) -> set[str]:
    return set(snapshot(load_prd(path), root, **kw).digests)


def changes_after(root: Path, path: Path, edit: Callable[[], None], **kw: Any) -> list[str]:
    start = snapshot(load_prd(path), root, **kw)
    edit()
    now = snapshot(load_prd(path), root, start=start, **kw)
    return [ch.describe() for ch in compare(start, now)]


# -- what is guarded -----------------------------------------------------------------------------


def test_guards_definitions_linked_tests_schemas_modules_and_conftests(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_a():\n    assert True\n")
    (tmp_path / "schema.json").write_text("{}")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "checks.py").write_text("def ok():\n    return True\n")
    path = prd_file(tmp_path, story(
        "US-1", {"pytest": "tests/test_a.py::test_a"}, {"schema": "schema.json",
                                                         "instance": "data.json"},
        {"python": "pkg.checks:ok"}, {"run": "make build"}, {"exists": "out.txt"},
        {"file": "notes.md", "contains": "x"},
        {"sql": "select 1", "db": "app.db", "expect": 1}, "Plain text"))
    got = subjects(tmp_path, path, search_path=[])
    assert {f"criterion US-1::AC{i}" for i in range(1, 9)} <= got
    assert {"file tests/test_a.py", "file schema.json", "file pkg/checks.py",
            "file conftest.py", "file tests/conftest.py"} <= got
    # What the agent is meant to change is never hashed.
    for target in ("data.json", "out.txt", "notes.md", "app.db"):
        assert f"file {target}" not in got
    # Without a -c file, every configuration file pytest would find is guarded.
    assert "pytest configuration pytest.ini" in got
    assert "pytest configuration pyproject.toml" in got


def test_each_kind_of_change_is_named(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    test = tmp_path / "tests" / "test_a.py"
    test.write_text("def test_a():\n    assert 1 == 2\n")
    path = prd_file(tmp_path, story("US-1", {"pytest": "tests/test_a.py"}, {"run": "false"}))

    def edit() -> None:
        test.unlink()
        (tmp_path / "conftest.py").write_text("collect_ignore = []\n")
        data = json.loads(path.read_text())
        data["userStories"][0]["acceptanceCriteria"][1] = {"run": "true"}
        data["userStories"][0]["passes"] = True  # not part of any definition
        data["userStories"][0]["notes"] = "done!"
        path.write_text(json.dumps(data))

    assert changes_after(tmp_path, path, edit) == [
        "criterion US-1::AC2 changed", "file conftest.py added", "file tests/test_a.py deleted"]


def test_removed_and_added_criteria(tmp_path: Path) -> None:
    path = prd_file(tmp_path, story("US-1", {"run": "false"}, {"run": "true"}))

    def edit() -> None:
        data = json.loads(path.read_text())
        data["userStories"][0]["acceptanceCriteria"] = [{"run": "false"}]
        data["userStories"].append(story("US-2", {"run": "true"}))
        path.write_text(json.dumps(data))

    assert changes_after(tmp_path, path, edit) == [
        "criterion US-1::AC2 removed", "criterion US-2::AC1 added"]


def test_a_test_file_absent_at_the_start_is_the_agents_to_write(tmp_path: Path) -> None:
    path = prd_file(tmp_path, story("US-1", {"pytest": "tests/test_new.py"}))
    start = snapshot(load_prd(path), tmp_path)
    assert start.unguarded == ("tests/test_new.py",)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_new.py").write_text("def test_x():\n    pass\n")
    now = snapshot(load_prd(path), tmp_path, start=start)
    assert compare(start, now) == []
    # ... but a conftest.py beside it is still guarded.
    (tmp_path / "tests" / "conftest.py").write_text("")
    now = snapshot(load_prd(path), tmp_path, start=start)
    assert [c.describe() for c in compare(start, now)] == ["file tests/conftest.py added"]


def test_a_folder_target_guards_its_files_but_not_new_tests(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    (tests / "unit" / "__pycache__").mkdir(parents=True)
    (tests / "unit" / "test_a.py").write_text("def test_a():\n    pass\n")
    (tests / "unit" / "__pycache__" / "test_a.cpython-311.pyc").write_bytes(b"\0")
    path = prd_file(tmp_path, story("US-1", {"pytest": ["tests"]}))
    start = snapshot(load_prd(path), tmp_path)
    assert "file tests/unit/test_a.py" in start.digests
    assert not any("__pycache__" in s for s in start.digests)
    (tests / "unit" / "test_b.py").write_text("def test_b():\n    pass\n")
    (tests / "unit" / "__pycache__" / "test_a.cpython-311.pyc").write_bytes(b"\1")
    assert compare(start, snapshot(load_prd(path), tmp_path, start=start)) == []
    (tests / "unit" / "conftest.py").write_text("")
    (tests / "unit" / "test_a.py").write_text("import pytest\npytestmark = pytest.mark.skip\n")
    assert [c.describe() for c in compare(start, snapshot(load_prd(path), tmp_path,
                                                           start=start))] == [
        "file tests/unit/test_a.py changed", "file tests/unit/conftest.py added"]


def test_only_the_pytest_section_of_pyproject_is_guarded(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = []\n\n'
                         '[tool.pytest.ini_options]\nralph_checks = ["Docs = make docs"]\n')
    path = prd_file(tmp_path, story("US-1", "Docs"))

    def add_dependency() -> None:
        pyproject.write_text(pyproject.read_text().replace("[]", '["requests"]'))

    def remap_to_true() -> None:
        pyproject.write_text(pyproject.read_text().replace("make docs", "true"))

    assert changes_after(tmp_path, path, add_dependency, inifile=pyproject) == []
    assert changes_after(tmp_path, path, remap_to_true, inifile=pyproject) == [
        "pytest configuration pyproject.toml changed"]


def test_an_ini_files_pytest_section_is_guarded(tmp_path: Path) -> None:
    ini = tmp_path / "tox.ini"
    ini.write_text("[tox]\nenvlist = py311\n\n[pytest]\naddopts = -q\n")
    path = prd_file(tmp_path, story("US-1", {"run": "false"}))

    def edit_tox() -> None:
        ini.write_text(ini.read_text().replace("py311", "py312"))

    def edit_pytest() -> None:
        ini.write_text(ini.read_text().replace("-q", "-q -p evil"))

    assert changes_after(tmp_path, path, edit_tox, inifile=ini) == []
    assert changes_after(tmp_path, path, edit_pytest, inifile=ini) == [
        "pytest configuration tox.ini changed"]


def test_python_check_module_is_found_without_importing(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    module = tmp_path / "pkg" / "boom.py"
    module.write_text("raise SystemExit('imported!')\ndef ok():\n    return True\n")
    path = prd_file(tmp_path, story("US-1", {"python": "pkg.boom:ok"}))

    def weaken() -> None:
        module.write_text("def ok():\n    return True\n")

    assert changes_after(tmp_path, path, weaken, search_path=[]) == [
        "file pkg/boom.py changed"]


def test_apply_fails_the_touched_criteria_only() -> None:
    results = CheckResults((
        CriterionResult("p::US-1::AC1", "US-1", "AC1", "a", "run", "passed"),
        CriterionResult("p::US-1::AC2", "US-1", "AC2", "b", "run", "failed", "exit 1"),
        CriterionResult("p::US-2::AC1", "US-2", "AC1", "c", "text", "passed", claimed=True),
    ))
    out = apply(results, [Change("file tests/test_a.py", "changed", ("US-1::AC1", "US-1::AC2"))])
    a1, a2, b1 = out.criteria
    assert not a1.passed and a1.message.startswith(
        "criteria changed: file tests/test_a.py changed since the run started; expected")
    assert "--ralph-allow-criteria-edits" in a1.message
    assert not a2.passed and a2.message.endswith("the check itself also failed:\nexit 1")
    assert b1 == results.criteria[2]
    assert not out.complete


# -- the loop: tampering never ends in exit 0 ----------------------------------------------------

FAILING_TEST = "def test_feature():\n    import feature\n    assert feature.answer() == 42\n"


def edit_prd_agent(change: str) -> str:
    """An agent body that loads prd.json, runs ``change`` on ``data``, and writes it back."""
    return ("import json, pathlib\np = pathlib.Path('prd.json')\ndata = json.loads(p.read_text())\n"
            f"{change}\np.write_text(json.dumps(data, indent=2))\n"
            "open('agent-runs.txt', 'a').write('run\\n')\n")


def write_agent(agent: Callable[[str, str], str], body: str) -> str:
    """An agent running ``body`` that counts its runs in agent-runs.txt."""
    return agent("agent.py", body + "\nopen('agent-runs.txt', 'a').write('run\\n')\n")


def test_agent_rewrites_a_run_command_to_true(pytester: pytest.Pytester,
                                              write_prd: Callable[..., Path],
                                              agent: Callable[[str, str], str]) -> None:
    prd = write_prd(story("US-001", {"text": "the build exists", "run": "test -f build.txt"}))
    cmd = agent("agent.py", edit_prd_agent(
        "data['userStories'][0]['acceptanceCriteria'][0]['run'] = 'true'\n"
        "data['userStories'][0]['passes'] = True"))
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd)
    out = result.stdout.str()
    assert result.ret == 6, out
    assert agent_runs(pytester) == 3
    result.stdout.fnmatch_lines([
        "[[]ralph iteration 1/5[]]", "*Result: failure: 1 criterion failing (US-001::AC1)",
        "*Criteria changed: criterion US-001::AC1 changed; not counted as progress*"])
    assert "refuses to report completion until they are restored" in out
    assert json.loads(prd.read_text())["userStories"][0]["passes"] is False
    report = report_text(pytester)
    assert "## Criteria changed" in report
    assert "| 1 | criterion US-001::AC1 | changed | US-001::AC1 |" in report
    streaks = [it["streak"] for it in run_json(pytester)["iterations"]]  # type: ignore[index]
    assert streaks == [0, 1, 2, 3]


def test_agent_deletes_a_linked_test_file(pytester: pytest.Pytester,
                                          write_prd: Callable[..., Path],
                                          agent: Callable[[str, str], str]) -> None:
    pytester.makepyfile(test_feature=FAILING_TEST)
    write_prd(story("US-001", {"text": "feature works", "pytest": "test_feature.py"}))
    cmd = write_agent(agent, "import os\nos.remove('test_feature.py')")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "2")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*Criteria changed: file test_feature.py deleted*"])
    assert "| 1 | file test_feature.py | deleted | US-001::AC1 |" in report_text(pytester)


def test_agent_adds_a_skip_marker_to_a_linked_test(pytester: pytest.Pytester,
                                                   write_prd: Callable[..., Path],
                                                   agent: Callable[[str, str], str]) -> None:
    pytester.makepyfile(test_feature=FAILING_TEST)
    write_prd(story("US-001", {"text": "feature works", "pytest": "test_feature.py"}))
    cmd = write_agent(agent,
                      "import pathlib\np = pathlib.Path('test_feature.py')\n"
                      "p.write_text('import pytest\\n@pytest.mark.skip\\n' + p.read_text())")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "2")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*Criteria changed: file test_feature.py changed*"])


def test_agent_weakens_a_linked_test_only_the_guard_catches_it(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str]) -> None:
    pytester.makepyfile(test_feature=FAILING_TEST)
    write_prd(story("US-001", {"text": "feature works", "pytest": "test_feature.py"}))
    cmd = write_agent(agent, "import pathlib\npathlib.Path('test_feature.py')"
                                       ".write_text('def test_feature():\\n    assert True\\n')")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "2")
    assert result.ret == 1, result.stdout.str()
    assert "criteria changed: file test_feature.py changed" in (
        pytester.path / ".pytest_ralph" / "progress.txt").read_text()
    # The same agent with the guard waived: the weakened test passes and the run completes.
    pytester.makepyfile(test_feature=FAILING_TEST)
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-allow-criteria-edits")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([
        "*Criteria changed: file test_feature.py changed (allowed by "
        "--ralph-allow-criteria-edits)"])


def test_agent_prints_the_promise_and_does_nothing(pytester: pytest.Pytester,
                                                   write_prd: Callable[..., Path],
                                                   agent: Callable[[str, str], str]) -> None:
    write_prd(story("US-001", {"text": "done", "run": "test -f done.txt"}))
    cmd = write_agent(agent, "print('All done. <promise>COMPLETE</promise>')")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd)
    assert result.ret == 6, result.stdout.str()
    assert agent_runs(pytester) == 3
    (log,) = (pytester.path / ".pytest_ralph" / "runs").glob("*/iteration-001/agent.log")
    assert "<promise>COMPLETE</promise>" in log.read_text()


def test_agent_adds_a_conftest_that_forces_passes(pytester: pytest.Pytester,
                                                  write_prd: Callable[..., Path],
                                                  agent: Callable[[str, str], str]) -> None:
    write_prd(story("US-001", {"text": "done", "run": "test -f done.txt"}))
    conftest = ("import pytest\n@pytest.hookimpl(hookwrapper=True)\n"
                "def pytest_runtest_makereport(item, call):\n"
                "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n")
    cmd = write_agent(agent,
                      f"import pathlib\npathlib.Path('conftest.py').write_text({conftest!r})")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd)
    assert result.ret == 6, result.stdout.str()
    result.stdout.fnmatch_lines(["*Criteria changed: file conftest.py added*"])


def test_agent_maps_a_text_criterion_to_true_in_a_new_ini(pytester: pytest.Pytester,
                                                          write_prd: Callable[..., Path],
                                                          agent: Callable[[str, str], str]) -> None:
    write_prd(story("US-001", "Docs are written"))
    cmd = write_agent(agent, "import pathlib\npathlib.Path('pytest.ini').write_text("
                                       "'[pytest]\\nralph_checks = Docs are written = true\\n')")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "2")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["*Criteria changed: pytest configuration pytest.ini added*"])


def test_restoring_the_oracle_lets_the_run_complete(pytester: pytest.Pytester,
                                                    write_prd: Callable[..., Path],
                                                    agent: Callable[[str, str], str]) -> None:
    pytester.makepyfile(test_feature=FAILING_TEST)
    write_prd(story("US-001", {"text": "feature works", "pytest": "test_feature.py"}))
    cmd = write_agent(agent, """
import pathlib
runs = pathlib.Path('agent-runs.txt')
n = len(runs.read_text().splitlines()) if runs.exists() else 0
test, backup = pathlib.Path('test_feature.py'), pathlib.Path('backup.txt')
if n == 0:  # first: weaken the test
    backup.write_bytes(test.read_bytes())
    test.write_text('def test_feature():\\n    assert True\\n')
else:  # then: restore it and do the work
    test.write_bytes(backup.read_bytes())
    pathlib.Path('feature.py').write_text('def answer():\\n    return 42\\n')
""")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd)
    assert result.ret == 0, result.stdout.str()
    assert agent_runs(pytester) == 2
    report = report_text(pytester)
    assert "| 1 | file test_feature.py | changed | US-001::AC1 |" in report
    assert "Outcome: **complete**" in report


# -- flaky criteria ------------------------------------------------------------------------------

# Passes on calls 1, 3, 5, ... and fails on 2, 4, 6, ...: each iteration's first check fails
# and its re-check passes.
FLIP = """
import pathlib, sys
p = pathlib.Path('flip-count.txt')
n = int(p.read_text()) + 1 if p.exists() else 1
p.write_text(str(n))
sys.exit(0 if n % 2 else 1)
"""


def test_a_criterion_that_fails_then_passes_on_a_recheck_is_flaky(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str]) -> None:
    pytester.makepyfile(flip=FLIP)
    write_prd(story("US-001", {"text": "flaky service answers", "run": "python flip.py"},
                    {"text": "never", "run": "test -f never.txt"}))
    cmd = write_agent(agent, "pass")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd)
    assert result.ret == 6, result.stdout.str()
    assert agent_runs(pytester) == 3
    result.stdout.fnmatch_lines([
        "[[]ralph iteration 1/5[]]", "*State: 1/2 passing (+0); identical-failure streak 1/3",
        "  Flaky: US-001::AC1 failed, then passed on a re-check (left out of the breaker's "
        "fingerprint)"])
    iterations = run_json(pytester)["iterations"]
    assert [it["flaky"] for it in iterations] == [[], ["US-001::AC1"], ["US-001::AC1"],  # type: ignore[index]
                                                   ["US-001::AC1"]]
    assert [it["streak"] for it in iterations] == [0, 1, 2, 3]  # type: ignore[index]
    assert "## Flaky criteria" in report_text(pytester)
    assert list((pytester.path / ".pytest_ralph" / "runs").glob(
        "*/iteration-001/recheck/check.json"))


def test_a_real_regression_is_not_flaky(pytester: pytest.Pytester,
                                        write_prd: Callable[..., Path],
                                        agent: Callable[[str, str], str]) -> None:
    pytester.path.joinpath("keep.txt").write_text("x")
    write_prd(story("US-001", {"text": "keep", "run": "test -f keep.txt"},
                    {"text": "never", "run": "test -f never.txt"}))
    cmd = write_agent(agent, "import os\nif os.path.exists('keep.txt'): "
                                       "os.remove('keep.txt')")
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", cmd,
                                           "--ralph-max-iterations", "2")
    assert result.ret == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["  Regressions: US-001::AC1 passed before and fail now"])
    assert "Flaky" not in result.stdout.str()
    iterations = run_json(pytester)["iterations"]
    assert all(it["flaky"] == [] for it in iterations)  # type: ignore[attr-defined]


def test_the_verifier_script_is_guarded_for_text_criteria(tmp_path: Path) -> None:
    judge = tmp_path / "judge.py"
    judge.write_text("print('{\"verdict\": \"fail\", \"evidence\": \"no\"}')\n")
    path = prd_file(tmp_path, story("US-1", "Docs are written", {"run": "true"}))

    def always_pass() -> None:
        judge.write_text("print('{\"verdict\": \"pass\", \"evidence\": \"sure\"}')\n")

    start = snapshot(load_prd(path), tmp_path, verifier="python judge.py --strict")
    always_pass()
    now = snapshot(load_prd(path), tmp_path, verifier="python judge.py --strict", start=start)
    assert compare(start, now) == [Change("file judge.py", "changed", ("US-1::AC1",))]
