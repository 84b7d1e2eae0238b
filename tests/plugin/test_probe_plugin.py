"""The tamper probe plugin in process (pytest_ralph/plugin/probe.py) and how a ``pytest`` check
reads its JUnit entries (pytest_ralph/checks/pytest_kind.py): the quick tests;
tests/checks/test_probe.py runs the gate end to end."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from pytest_ralph.checks.pytest_kind import (
    PROBE_FAILURE,
    PytestCheck,
    _junit_counts,
    _without_probes,
    probe_names,
)
from pytest_ralph.util.env import PROBE_TOKEN_ENV
from tests.support.chaos import PATCH_REPORTS, REWRITE_JUNIT, SWALLOW_CALLS, SWALLOW_FUNCTIONS

pytest_plugins = ["pytester"]

TOKEN = "0123456789abcdef"
PREFIX = "pytest_ralph_probe_"
FIRST, LAST = probe_names(TOKEN)


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, str],
                                                           dict[str, int]]:
    xml = pytester.path / "junit.xml"
    # In a process of its own: the code under test of some tests patches pytest in
    # memory.
    result = pytester.runpytest_subprocess("-p", "pytest_ralph.plugin.probe",
                                           "-p", "no:cacheprovider", f"--junitxml={xml}", *args)
    counts, probes = _junit_counts(xml, probe_names(TOKEN))
    return result, probes, counts


def test_the_probes_come_first_and_last_fail_and_stay_out_of_sight(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROBE_TOKEN_ENV, TOKEN)
    pytester.makepyfile(test_a="def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    result, probes, counts = _run(pytester, "-rA")  # (-v names each item as it starts)
    assert probes == {FIRST: "failed", LAST: "failed"}
    assert counts == {"tests": 2, "failures": 0, "errors": 0, "skipped": 0}
    assert result.ret == 1  # pytest's exit status counts them: the parent knows why
    out = result.stdout.str()
    assert TOKEN not in out and PROBE_FAILURE not in out, out
    assert re.search(r"^test_a\.py \.\. +\[100%\]$", out, re.M), out  # no letter
    assert re.search(r"^=+ 2 passed in [\d.]+s =+$", out, re.M), out  # no count
    # -v names each item as it starts; a probe's line gets no word after its name.
    verbose, _probes, _counts = _run(pytester, "-v")
    named = [line for line in verbose.outlines if TOKEN in line]
    assert len(named) == 2 and all(
        re.fullmatch(rf"test_a\.py::{PREFIX}{TOKEN}_(first|last) *", line) for line in named), \
        named
    # The order pytest ran them in: first, the tests, last.
    order = re.findall(r'<testcase [^>]*\bname="([^"]+)"',
                       (pytester.path / "junit.xml").read_text())
    assert order == [FIRST, "test_one", "test_two", LAST]


@pytest.mark.parametrize("token", ["", "0123", "0123456789ABCDEF", "g123456789abcdef"])
def test_no_probe_without_a_well_formed_token(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, token: str) -> None:
    monkeypatch.setenv(PROBE_TOKEN_ENV, token)
    pytester.makepyfile(test_a="def test_one():\n    assert False\n")
    _result, probes, counts = _run(pytester)
    assert probes == {} and counts["tests"] == 1 and counts["failures"] == 1
    xml = (pytester.path / "junit.xml").read_text()
    assert "pytest_ralph_probe" not in xml


def test_no_probe_when_nothing_is_collected(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROBE_TOKEN_ENV, TOKEN)
    pytester.makepyfile(test_a="# nothing\n")
    result, probes, counts = _run(pytester)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert probes == {} and counts["tests"] == 0


def test_a_passed_report_of_a_call_that_raised_is_failed_again(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROBE_TOKEN_ENV, TOKEN)
    pytester.makepyfile(calc=PATCH_REPORTS + "def add(a, b):\n    return a - b\n",
                        test_calc=textwrap.dedent("""\
                            import pytest
                            from calc import add
                            def test_add():
                                assert add(2, 3) == 5
                            def test_fine():
                                assert add(2, 2) == 0
                            @pytest.mark.xfail(reason="known")
                            def test_known():
                                assert False
                        """))
    result, probes, counts = _run(pytester, "-rf")
    # The forced "passed" of the probes is caught too: their calls raised.
    assert probes == {FIRST: "failed", LAST: "failed"}
    assert counts == {"tests": 3, "failures": 1, "errors": 0, "skipped": 1}
    out = result.stdout.str()
    assert ("pytest-ralph: this test raised AssertionError: assert -1 == 5" in out
            and "yet its report said passed: code loaded by the tests changed how pytest "
                "reports outcomes" in out), out
    assert "test_fine" not in out.split("short test summary info")[1]


def test_without_a_token_the_invariant_leaves_reports_alone(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROBE_TOKEN_ENV, raising=False)
    pytester.makepyfile(calc=PATCH_REPORTS + "def add(a, b):\n    return a - b\n",
                        test_calc="from calc import add\n\ndef test_add():\n"
                                  "    assert add(2, 3) == 5\n")
    result, _probes, counts = _run(pytester)
    assert result.ret == 0 and counts["failures"] == 0


def test_junit_counts_leave_out_the_probes_by_outcome(tmp_path: Path) -> None:
    xml = tmp_path / "junit.xml"
    xml.write_text(textwrap.dedent(f"""\
        <testsuites><testsuite tests="6" failures="2" errors="1" skipped="1">
          <testcase classname="" name="{FIRST}"><failure message="x"/></testcase>
          <testcase classname="t" name="test_a"/>
          <testcase classname="t" name="test_b"><failure message="y"/></testcase>
          <testcase classname="t" name="test_c"><error message="e"/></testcase>
          <testcase classname="t" name="test_d"><skipped message="s"/></testcase>
          <testcase classname="" name="{LAST}"/>
        </testsuite></testsuites>
    """))
    counts, probes = _junit_counts(xml, probe_names(TOKEN))
    assert probes == {FIRST: "failed", LAST: "passed"}
    assert counts == {"tests": 4, "failures": 1, "errors": 1, "skipped": 1}
    for tag, outcome in (("error", "error"), ("skipped", "skipped")):
        xml.write_text(f'<testsuite tests="1" {tag}s="1"><testcase name="{FIRST}">'
                       f'<{tag} message="m"/></testcase></testsuite>'.replace("skippeds",
                                                                              "skipped"))
        counts, probes = _junit_counts(xml, probe_names(TOKEN))
        assert probes == {FIRST: outcome}
        assert counts == {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    assert _junit_counts(tmp_path / "missing.xml", probe_names(TOKEN)) == (
        {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}, {})


def test_output_loses_the_probe_lines_only() -> None:
    text = f"a\n____ {FIRST} ____\n{PROBE_FAILURE}\nFAILED tests/test_a.py::test_x - boom\nb"
    assert _without_probes(text, TOKEN) == "a\nFAILED tests/test_a.py::test_x - boom\nb"


def _check(root: Path, calc: str, test: str) -> tuple[bool, str]:
    (root / "calc.py").write_text(calc)
    (root / "test_calc.py").write_text(test)
    (root / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    result = PytestCheck(("test_calc.py",), root, 60.0).run()
    return result.passed, result.message


def test_a_pytest_check_passes_an_honest_pass_and_names_a_faked_one(tmp_path: Path) -> None:
    test = "from calc import add\ndef test_add():\n    assert add(2, 3) == 5\n"
    assert _check(tmp_path, "def add(a, b):\n    return a + b\n", test) == (True, "")
    passed, message = _check(tmp_path, "def add(a, b):\n    return a - b\n", test)
    assert not passed and message.startswith("1 failed, 0 passed (pytest exit 1); expected")
    assert TOKEN not in message and "probe" not in message

    passed, message = _check(tmp_path, SWALLOW_CALLS + "def add(a, b):\n    return a - b\n", test)
    assert not passed
    assert message.startswith("the tamper probe, a test that always fails, passed: code loaded "
                              "by the tests changed how pytest reports outcomes"), message
    # A plugin that drops the probe items from the run: the probes were not reported.
    drop = textwrap.dedent("""\
        import pytest
        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(items):
            items[:] = [i for i in items if "probe" not in i.name]
    """)
    (tmp_path / "conftest.py").write_text("pytest_plugins = ['dropper']\n")
    (tmp_path / "dropper.py").write_text(drop)
    passed, message = _check(tmp_path, "def add(a, b):\n    return a + b\n", test)
    assert not passed and "the tamper probe, a test that always fails, was not reported" in \
        message, message


def test_the_probes_run_whatever_the_projects_plugins_select_or_say(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Added after every other plugin selected the items, outermost around each report, and
    the first to say how a probe is shown."""
    monkeypatch.setenv(PROBE_TOKEN_ENV, TOKEN)
    pytester.makeconftest(textwrap.dedent("""\
        import pytest
        def pytest_collection_modifyitems(items):
            items[:] = [item for item in items if item.name == "test_one"]
        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_makereport(item, call):
            report = yield
            if item.name == "test_one":
                report.outcome, report.longrepr = "passed", None
            return report
        def pytest_report_teststatus(report):
            if report.when == "call":
                return report.outcome, "P", "SAID"
    """))
    pytester.makepyfile(test_a="def test_one():\n    assert 1 == 2\n\ndef test_two():\n"
                               "    pass\n")
    result, probes, counts = _run(pytester)
    assert probes == {FIRST: "failed", LAST: "failed"}
    assert counts["tests"] == 1 and counts["failures"] == 1, counts
    assert "this test raised AssertionError: assert 1 == 2" in result.stdout.str()
    assert re.search(r"^test_a\.py P +\[100%\]$", result.stdout.str(), re.M), \
        result.stdout.str()


def test_the_exception_named_in_a_faked_report_is_cut_to_300_characters(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROBE_TOKEN_ENV, TOKEN)
    pytester.makepyfile(calc=PATCH_REPORTS, test_calc=textwrap.dedent("""\
        import calc
        def test_long():
            raise ValueError("v" * 1000)
    """))
    result, _probes, _counts = _run(pytester, "-rf")
    said = "pytest-ralph: this test raised " + ("ValueError: " + "v" * 1000)[:300] + ", yet"
    assert said in result.stdout.str(), result.stdout.str()


def test_the_probes_survive_any_selection_and_sit_in_the_first_and_last_module(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROBE_TOKEN_ENV, TOKEN)
    pytester.makepyfile(test_a="def test_one():\n    pass\n",
                        test_b="def test_two():\n    pass\n\ndef test_three():\n    pass\n")
    _result, probes, counts = _run(pytester, "-k", "test_one or test_two")
    assert probes == {FIRST: "failed", LAST: "failed"} and counts["tests"] == 2
    xml = (pytester.path / "junit.xml").read_text()
    placed = dict(re.findall(r'<testcase classname="([^"]*)" name="(pytest_ralph_probe_[^"]+)"',
                             xml))
    assert {name: module for module, name in placed.items()} == {FIRST: "test_a",
                                                                 LAST: "test_b"}, xml


@pytest.mark.parametrize(("cheat", "said"), [
    (REWRITE_JUNIT, "the JUnit report pytest writes to its parent was written more than once: "
                    "code loaded by the tests rewrote pytest's verdicts"),
    (SWALLOW_FUNCTIONS, "the tamper probe, a test that always fails, passed"),
], ids=["rewrite-junit", "swallow-functions"])
def test_forgeries_written_against_the_probe_fail_their_criterion(
        tmp_path: Path, cheat: str, said: str) -> None:
    test = "from calc import add\ndef test_add():\n    assert add(2, 3) == 5\n"
    passed, message = _check(tmp_path, cheat + "def add(a, b):\n    return a - b\n", test)
    assert not passed and message.startswith(said), message


def test_a_report_written_twice_is_seen() -> None:
    from pytest_ralph.checks.pytest_kind import _written_twice

    one = b'<testsuites><testsuite tests="1"/></testsuites>'
    assert not _written_twice(one) and not _written_twice(b"") and not _written_twice(b"<a")
    assert _written_twice(one + one)


def test_a_probe_skipped_with_its_module_is_no_faked_verdict(tmp_path: Path) -> None:
    test = ("import pytest\npytestmark = pytest.mark.skip(reason='later')\n"
            "def test_add():\n    assert False\n")
    passed, message = _check(tmp_path, "def add(a, b):\n    return a + b\n", test)
    assert not passed and message.startswith("the selected test was skipped"), message


def test_tests_outside_python_modules_get_plain_probe_items_beside_them(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin's own test files (here ``*.check`` files of a conftest.py): no module to put a
    test function in, so the probes are plain items of the same file, failing with one line."""
    monkeypatch.setenv(PROBE_TOKEN_ENV, TOKEN)
    pytester.makeconftest(textwrap.dedent("""\
        import pytest
        class CheckFile(pytest.File):
            def collect(self):
                yield CheckItem.from_parent(self, name="holds")
        class CheckItem(pytest.Item):
            def runtest(self):
                assert self.path.read_text().strip() == "ok"
        def pytest_collect_file(file_path, parent):
            if file_path.suffix == ".check":
                return CheckFile.from_parent(parent, path=file_path)
    """))
    (pytester.path / "a.check").write_text("ok\n")
    result, probes, counts = _run(pytester, "-rA")
    assert result.ret == 1 and counts == {"tests": 1, "failures": 0, "errors": 0, "skipped": 0}
    assert probes == {FIRST: "failed", LAST: "failed"}
    from xml.etree import ElementTree

    cases = ElementTree.parse(pytester.path / "junit.xml").getroot().iter("testcase")
    probe_cases = [case for case in cases if TOKEN in case.get("name", "")]
    assert [case.get("classname") for case in probe_cases] == ["a.check", "a.check"]
    assert [case.find("failure").get("message") for case in probe_cases  # type: ignore[union-attr]
            ] == [PROBE_FAILURE, PROBE_FAILURE]
