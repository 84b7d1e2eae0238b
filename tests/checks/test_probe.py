"""The tamper probe of a ``pytest`` criterion's child (pytest_ralph/plugin/probe.py): code under
test
that rewrites pytest's reports in memory fails its criterion, saying why; honest tests are
judged as before and never see the probe."""

from __future__ import annotations

import json

import pytest

from tests.support.chaos import PATCH_REPORTS, SWALLOW_CALLS

pytest_plugins = ["pytester"]

BROKEN = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"

def _project(pytester: pytest.Pytester, calc: str, test: str = "") -> None:
    pytester.makefile(".json", prd=json.dumps({"userStories": [{
        "id": "US-1", "title": "add", "description": "d", "priority": 1, "passes": False,
        "notes": "", "acceptanceCriteria": [{"text": "add works",
                                             "pytest": "tests/test_calc.py"}]}]}))
    pytester.makeini("[pytest]\n")
    (pytester.path / "calc.py").write_text(calc)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_calc.py").write_text(test or (
        "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n"))


def _gate(pytester: pytest.Pytester) -> tuple[int, str]:
    result = pytester.runpytest_subprocess("prd.json", "-p", "no:cacheprovider")
    return result.ret, result.stdout.str() + result.stderr.str()


def test_an_honest_pass_passes_and_an_honest_failure_counts_only_its_tests(
        pytester: pytest.Pytester) -> None:
    _project(pytester, FIXED)
    code, out = _gate(pytester)
    assert code == 0 and "US-1: 1 verified" in out, out
    (pytester.path / "calc.py").write_text(BROKEN)
    code, out = _gate(pytester)
    assert code == 1, out
    assert "1 failed, 0 passed (pytest exit 1)" in out
    assert "assert -1 == 5" in out
    assert "probe" not in out  # the agent's prompt shows the test, not the probe


def test_code_under_test_that_forces_reports_to_passed_fails_its_criterion(
        pytester: pytest.Pytester) -> None:
    _project(pytester, PATCH_REPORTS + BROKEN)
    code, out = _gate(pytester)
    assert code == 1, out
    assert ("this test raised AssertionError: assert -1 == 5" in out
            and "yet its report said passed: code loaded by the tests changed how pytest "
                "reports outcomes" in out), out


def test_code_under_test_that_hides_every_exception_is_caught_by_the_probe(
        pytester: pytest.Pytester) -> None:
    _project(pytester, SWALLOW_CALLS + BROKEN)
    code, out = _gate(pytester)
    assert code == 1, out
    assert ("the tamper probe, a test that always fails, passed: code loaded by the tests "
            "changed how pytest reports outcomes") in out, out
    # Without the probe the same code passes pytest: the probe is what catches it.
    result = pytester.runpytest_subprocess("tests/test_calc.py", "-p", "no:cacheprovider",
                                           "-p", "no:ralph")
    assert result.ret == 0, result.stdout.str()


@pytest.mark.parametrize(("test", "code", "said"), [
    ("import pytest\n@pytest.mark.xfail(reason='known')\ndef test_add():\n    assert False\n",
     1, "the selected test was skipped"),
    ("import pytest\n@pytest.mark.xfail(reason='fixed now')\ndef test_add():\n    assert True\n",
     0, "US-1: 1 verified"),
    ("import pytest\ndef test_add():\n    pytest.skip('later')\n", 1,
     "the selected test was skipped"),
    ("# no test yet\n", 1, "no test ran (pytest exit 5"),
], ids=["xfail", "xpass", "skip", "none"])
def test_outcomes_other_than_pass_and_fail_are_judged_as_without_the_probe(
        pytester: pytest.Pytester, test: str, code: int, said: str) -> None:
    _project(pytester, FIXED, test)
    ret, out = _gate(pytester)
    assert ret == code and said in out, out


def test_the_probe_holds_under_pytest_xdist_from_the_projects_addopts(
        pytester: pytest.Pytester) -> None:
    _project(pytester, FIXED)
    pytester.makeini("[pytest]\naddopts = -n 2\n")
    code, out = _gate(pytester)
    assert code == 0, out
    (pytester.path / "calc.py").write_text(SWALLOW_CALLS + BROKEN)
    code, out = _gate(pytester)
    assert code == 1 and "the tamper probe, a test that always fails, passed" in out, out
