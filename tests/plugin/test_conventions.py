"""The pytest conventions: selection and reporting options, configuration files, ``--help``,
the report header, options that do not go with the loop, and which files are PRDs.

Each case runs a real pytest (inline where the process does not matter, ``runpytest_subprocess``
for the loop, pytest-xdist and pytest-randomly) and asserts what it did: outcomes, node ids,
the JUnit XML, exit codes and messages.
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.loop.settings import SPECS
from pytest_ralph.plugin.options import NOT_WITH_LOOP, child_args
from pytest_ralph.testing import AgentFactory
from tests.support.prd import story

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX paths and commands")

#: ``-m`` matches marker keyword arguments from pytest 8.3 on.
MARK_KWARGS = pytest.mark.skipif(pytest.version_tuple < (8, 3),
                                 reason="-m NAME(key=value) needs pytest >= 8.3")


def exists(path: str, text: str | None = None) -> dict[str, str]:
    """A criterion that passes when ``path`` exists."""
    return {"text": text or f"{path} exists", "exists": path}


@pytest.fixture
def demo(write_prd: Callable[..., Path]) -> Path:
    """US-001 (title "Greeting": AC1 passes, AC2 fails), US-002 (title "Billing": AC1 fails)."""
    prd = write_prd(
        story("US-001", exists("here.txt", "the greeting is shown"),
              exists("missing-1.txt", "the logout works"), title="Greeting"),
        story("US-002", exists("missing-2.txt", "an invoice is sent"), title="Billing"))
    (prd.parent / "here.txt").write_text("x\n", encoding="utf-8")
    return prd


def collected(result: pytest.RunResult) -> list[str]:
    """The node ids that ``--collect-only -q`` listed."""
    return [line for line in result.outlines if "::" in line]


# -- 1. the gate: selection and reporting options -----------------------------------------------


@pytest.mark.parametrize(("expr", "ids"), [
    ("US-001", ["US-001::AC1", "US-001::AC2"]),           # story id
    ("AC2", ["US-001::AC2"]),                              # criterion id
    ("greeting", ["US-001::AC1", "US-001::AC2"]),         # story title, any case
    ("invoice", ["US-002::AC1"]),                          # criterion text
    ("logout and not US-002", ["US-001::AC2"]),
])
def test_k_selects_by_story_criterion_text_and_title(pytester: pytest.Pytester, demo: Path,
                                                      expr: str, ids: list[str]) -> None:
    result = pytester.runpytest("--collect-only", "-q", "-k", expr)
    assert collected(result) == [f"prd.json::{i}" for i in ids]


def test_m_selects_criteria_by_the_ralph_marker(pytester: pytest.Pytester, demo: Path) -> None:
    pytester.makepyfile(test_unit="def test_unit():\n    pass\n")
    every = ["prd.json::US-001::AC1", "prd.json::US-001::AC2", "prd.json::US-002::AC1"]
    assert collected(pytester.runpytest("--collect-only", "-q", "-m", "ralph")) == every
    assert collected(pytester.runpytest("--collect-only", "-q", "-m", "not ralph")) == [
        "test_unit.py::test_unit"]
    markers = pytester.runpytest("--markers").stdout.str()
    assert "@pytest.mark.ralph(story, criterion, kind): pytest-ralph:" in markers


@MARK_KWARGS
def test_m_selects_by_story_and_kind(pytester: pytest.Pytester,
                                     write_prd: Callable[..., Path]) -> None:
    write_prd(story("US-001", exists("a.txt"), "the page looks right"),
              story("US-002", exists("b.txt")))
    by_story = pytester.runpytest("--collect-only", "-q", "-m", "ralph(story='US-002')")
    assert collected(by_story) == ["prd.json::US-002::AC1"]
    by_kind = pytester.runpytest("--collect-only", "-q", "-m", "ralph(kind='text')")
    assert collected(by_kind) == ["prd.json::US-001::AC2"]


def test_lf_reruns_only_the_failing_criteria(pytester: pytest.Pytester, demo: Path) -> None:
    first = pytester.runpytest()
    first.assert_outcomes(passed=1, failed=2)
    again = pytester.runpytest("--lf")
    again.assert_outcomes(failed=2, deselected=1)
    (demo.parent / "missing-1.txt").write_text("now\n", encoding="utf-8")
    fixed = pytester.runpytest("--lf", "-v")
    fixed.assert_outcomes(passed=1, failed=1, deselected=1)
    fixed.stdout.fnmatch_lines(["*prd.json::US-001::AC2 PASSED*",
                                "*prd.json::US-002::AC1 FAILED*"])
    pytester.runpytest("--lf").assert_outcomes(failed=1, deselected=2)


@pytest.mark.parametrize(("args", "failed"), [(("-x",), 1), (("--maxfail=2",), 2)])
def test_x_and_maxfail_stop_the_gate(pytester: pytest.Pytester,
                                     write_prd: Callable[..., Path],
                                     args: tuple[str, ...], failed: int) -> None:
    write_prd(story("US-001", *(exists(f"missing-{n}.txt") for n in range(1, 5))))
    result = pytester.runpytest(*args)
    result.assert_outcomes(failed=failed)
    assert result.ret == 1


def _testcases(path: Path) -> list[ET.Element]:
    return list(ET.parse(path).getroot().iter("testcase"))


def _properties(case: ET.Element) -> dict[str, str]:
    return {p.get("name", ""): p.get("value", "") for p in case.iter("property")}


def test_junitxml_has_a_testcase_per_criterion(pytester: pytest.Pytester, demo: Path) -> None:
    result = pytester.runpytest("--junitxml", "out/junit.xml")
    result.assert_outcomes(passed=1, failed=2)
    cases = _testcases(pytester.path / "out" / "junit.xml")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("prd.json.US-001", "AC1"), ("prd.json.US-001", "AC2"), ("prd.json.US-002", "AC1")]
    props = _properties(cases[1])
    assert props["ralph_story"] == "US-001"
    assert props["ralph_criterion"] == "AC2"
    assert props["ralph_kind"] == "exists"
    assert props["ralph_text"] == "the logout works"
    failure = cases[1].find("failure")
    assert failure is not None and cases[0].find("failure") is None
    assert "missing-1.txt" in failure.get("message", "")
    assert props["ralph_message"] in (failure.text or "")



def test_docs_ci_lists_every_junit_property(pytester: pytest.Pytester) -> None:
    """The property table of ``docs/ci.md`` names exactly the properties a criterion's
    ``testcase`` carries, in their order; a claimed text criterion says ``True``."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "ci.md").read_text("utf-8")
    table = doc.split("<!-- junit-properties -->\n", 1)[1].split("\n\n", 1)[0]
    documented = re.findall(r"^\| `(ralph_\w+)` \|", table, re.MULTILINE)
    pytester.makefile(".json", prd=json.dumps({"userStories": [story(
        "US-1", "it reads well", {"text": "prd.json exists", "exists": "prd.json"},
        passes=True)]}))
    pytester.runpytest("--junitxml", "junit.xml").assert_outcomes(passed=2)
    cases = _testcases(pytester.path / "junit.xml")
    assert [list(_properties(c)) for c in cases] == [documented, documented]
    assert [_properties(c)["ralph_claimed"] for c in cases] == ["True", "False"]
    assert [_properties(c)["ralph_kind"] for c in cases] == ["text", "exists"]

def test_strict_markers_and_no_cacheprovider(pytester: pytest.Pytester, demo: Path) -> None:
    result = pytester.runpytest("--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    assert not (pytester.path / ".pytest_cache").exists()
    pytester.makeini("[pytest]\naddopts = --strict-markers\n")
    pytester.runpytest("-m", "ralph").assert_outcomes(passed=1, failed=2)


def test_gate_under_xdist(pytester: pytest.Pytester, demo: Path) -> None:
    pytest.importorskip("xdist")
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:randomly", "--junitxml", "j.xml",
                                           "-k", "not AC1 or US-001")
    outcomes = result.parseoutcomes()
    assert (outcomes.get("passed"), outcomes.get("failed")) == (1, 1), result.stdout.str()
    names = sorted(f"{c.get('classname')}::{c.get('name')}"
                   for c in _testcases(pytester.path / "j.xml"))
    assert names == ["prd.json.US-001::AC1", "prd.json.US-001::AC2"]


def need_randomly() -> None:
    """Skip without pytest-randomly, unless ``PYTEST_RALPH_RANDOMLY=required`` (set by
    ``.ci/run``, which installs it), where its absence fails the test."""
    if os.environ.get("PYTEST_RALPH_RANDOMLY") == "required":
        import pytest_randomly  # noqa: F401
    else:
        pytest.importorskip("pytest_randomly")

@pytest.mark.parametrize("plugin", ["randomly", "no:randomly"])
def test_gate_with_and_without_pytest_randomly(pytester: pytest.Pytester, demo: Path,
                                               plugin: str) -> None:
    need_randomly()
    result = pytester.runpytest_subprocess("-p", plugin, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    seeded = any(line.startswith("Using --randomly-seed=") for line in result.outlines)
    assert seeded == (plugin == "randomly")
    for line in ("US-001: 1 verified, 0 claimed, 1 failed",
                 "US-002: 0 verified, 0 claimed, 1 failed"):  # in either order
        assert line in result.outlines, result.stdout.str()


# -- 1. the loop: the same options, or a usage error ---------------------------------------------


@pytest.fixture
def two_stories(write_prd: Callable[..., Path]) -> Path:
    """US-1 needs a.txt, US-2 needs b.txt; neither exists."""
    return write_prd(story("US-1", exists("a.txt")), story("US-2", exists("b.txt")))


def _passes(prd: Path) -> dict[str, Any]:
    return {s["id"]: s["passes"] for s in json.loads(prd.read_text("utf-8"))["userStories"]}


@pytest.mark.parametrize("selection", [
    ("-k", "US-1"), ("-k", "a.txt"),
    pytest.param(("-m", "ralph(story='US-1')"), marks=MARK_KWARGS),
])
def test_loop_selects_with_k_and_m(pytester: pytest.Pytester, two_stories: Path,
                                   ralph_agent: AgentFactory,
                                   selection: tuple[str, str]) -> None:
    agent = ralph_agent({"files": {"a.txt": "a\n"}})
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command,
                                           *selection)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["[[]ralph baseline]", "  0/1 criteria passing*"])
    assert len(agent.calls) == 1
    assert _passes(two_stories) == {"US-1": True, "US-2": False}


def test_loop_m_not_ralph_selects_nothing(pytester: pytest.Pytester, two_stories: Path,
                                          ralph_agent: AgentFactory) -> None:
    agent = ralph_agent()
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command,
                                           "-m", "not ralph")
    assert result.ret == 5, result.stdout.str() + result.stderr.str()
    assert agent.calls == []


def test_loop_with_junitxml_strict_markers_and_no_cacheprovider(
        pytester: pytest.Pytester, two_stories: Path, ralph_agent: AgentFactory) -> None:
    agent = ralph_agent({"files": {"a.txt": "a\n", "b.txt": "b\n"}})
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command,
                                           "--junitxml", "out/last.xml", "--strict-markers",
                                           "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    cases = _testcases(pytester.path / "out" / "last.xml")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("prd.json.US-1", "AC1"), ("prd.json.US-2", "AC1")]
    assert _properties(cases[1])["ralph_text"] == "b.txt exists"
    assert not (pytester.path / ".pytest_cache").exists()


def test_strict_flags_reach_the_check_phases() -> None:
    assert child_args(["--ralph", "--strict-markers", "-p", "x", "--strict-config",
                       "--strict-markers", "-x"]) == (
        "-p", "x", "--strict-markers", "--strict-config")


@pytest.mark.parametrize("plugin", ["randomly", "no:randomly"])
def test_loop_with_and_without_pytest_randomly(pytester: pytest.Pytester, two_stories: Path,
                                               ralph_agent: AgentFactory, plugin: str) -> None:
    need_randomly()
    agent = ralph_agent({"files": {"a.txt": "a\n"}}, {"files": {"b.txt": "b\n"}})
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command,
                                           "-p", plugin)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert _passes(two_stories) == {"US-1": True, "US-2": True}


LOOP_REFUSALS = [
    (("--pdb",), "--pdb cannot be used with --ralph"),
    (("--trace",), "--trace cannot be used with --ralph"),
    (("-x",), "-x/--exitfirst/--maxfail cannot be used with --ralph"),
    (("--maxfail", "3"), "-x/--exitfirst/--maxfail cannot be used with --ralph"),
    (("--lf",), "--lf/--last-failed cannot be used with --ralph"),
    (("--last-failed",), "--lf/--last-failed cannot be used with --ralph"),
    (("--ff",), "--ff/--failed-first cannot be used with --ralph"),
    (("--nf",), "--nf/--new-first cannot be used with --ralph"),
    (("--sw",), "--sw/--stepwise cannot be used with --ralph"),
    (("--sw-skip",), "--sw-skip/--stepwise-skip cannot be used with --ralph"),
    (("--collect-only",), "--collect-only cannot be used with --ralph"),
    (("--cache-show",), "--cache-show cannot be used with --ralph"),
    (("-n", "2"), "-n cannot be used with --ralph"),
    (("--ralph-status",), "--ralph-status cannot be used with --ralph"),
]


@pytest.mark.parametrize(("args", "message"), LOOP_REFUSALS,
                         ids=[" ".join(a) for a, _ in LOOP_REFUSALS])
def test_loop_refuses_options_it_cannot_honour(pytester: pytest.Pytester, two_stories: Path,
                                               args: tuple[str, ...], message: str) -> None:
    result = pytester.runpytest("--ralph", "--ralph-agent", "true", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*pytest-ralph: {message}*"])
    assert not (pytester.path / ".pytest_ralph").exists()


def test_every_refusal_names_an_alternative() -> None:
    for _, name, hint in NOT_WITH_LOOP:
        assert any(word in hint for word in ("--ralph", "plain `pytest", "without --ralph")), name


def test_dry_run_refuses_them_too_and_ralph_new_needs_ralph(pytester: pytest.Pytester,
                                                            two_stories: Path) -> None:
    dry = pytester.runpytest("--ralph-dry-run", "--ralph-agent", "true", "--lf")
    assert dry.ret == pytest.ExitCode.USAGE_ERROR
    dry.stderr.fnmatch_lines(["*--lf/--last-failed cannot be used with --ralph-dry-run*"])
    new = pytester.runpytest("--ralph-new")
    assert new.ret == pytest.ExitCode.USAGE_ERROR
    new.stderr.fnmatch_lines(["*pytest-ralph: --ralph-new goes with --ralph*"])


def test_addopts_meant_for_the_gate_neither_stop_nor_break_the_checks(
        pytester: pytest.Pytester, two_stories: Path, ralph_agent: AgentFactory) -> None:
    """In ``addopts`` they are the gate's: not refused, and each check phase, which runs
    without pytest's cache, still checks every criterion."""
    pytester.makeini("[pytest]\naddopts = -x --ff --lf --sw\n")
    agent = ralph_agent({"files": {"a.txt": "a\n", "b.txt": "b\n"}})
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["[[]ralph baseline]",
                                 "  0/2 criteria passing; failing: US-1::AC1, US-2::AC1*"])



COMMAND_REFUSALS = [
    ("--ralph-init", ("-k", "US"), "-k cannot be used with --ralph-init: it runs no test"),
    ("--ralph-init", ("-x",), "-x/--exitfirst/--maxfail cannot be used with --ralph-init"),
    ("--ralph-init", ("--pdb",), "--pdb cannot be used with --ralph-init"),
    ("--ralph-init", ("--lf",), "--lf/--last-failed cannot be used with --ralph-init"),
    ("--ralph-init", ("tests",), "--ralph-init takes no path argument (got tests): name the "
                                 "PRD to create with --ralph-prd PATH*"),
    ("--ralph-init", ("-n", "2"), "-n cannot be used with --ralph-init"),
    ("--ralph-status", ("-m", "slow"), "-m cannot be used with --ralph-status"),
    ("--ralph-cancel", ("--collect-only",), "--collect-only cannot be used with --ralph-cancel"),
    ("--ralph-doctor", ("prd.json",), "--ralph-doctor takes no path argument*"),
    ("--ralph-init", ("--ralph-story", "US-1"), "--ralph-story cannot be used with --ralph-init:"
                                                " it chooses the stories of a run*"),
    ("--ralph-status", ("--ralph-story", "US-1"), "--ralph-story cannot be used with "
                                                  "--ralph-status*"),
]


@pytest.mark.parametrize(("command", "args", "message"), COMMAND_REFUSALS,
                         ids=[" ".join((c, *a)) for c, a, _ in COMMAND_REFUSALS])
def test_commands_refuse_test_options_instead_of_ignoring_them(
        pytester: pytest.Pytester, command: str, args: tuple[str, ...], message: str) -> None:
    """``--ralph-init``, ``--ralph-status``, ``--ralph-cancel`` and ``--ralph-doctor`` run no
    test: a selection, a debugging flag or a path typed with them is an error (exit 4), and
    nothing is written."""
    pytester.makefile(".json", prd='{"userStories": []}')
    before = sorted(p.name for p in pytester.path.iterdir())
    result = pytester.runpytest(command, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*pytest-ralph: {message}*"])
    assert sorted(p.name for p in pytester.path.iterdir()) == before


def test_commands_leave_the_addopts_of_test_runs_alone(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\naddopts = -x --lf -k unit\n")
    result = pytester.runpytest("--ralph-init")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    assert (pytester.path / "prd.json").is_file()

# -- 2. configuration files ----------------------------------------------------------------------


CONFIG_FILES = {
    "pyproject.toml": ("pyproject.toml", '[tool.pytest.ini_options]\nralph_story = "US-2"\n'),
    "pytest.ini": ("pytest.ini", "[pytest]\nralph_story = US-2\n"),
    "tox.ini": ("tox.ini", "[pytest]\nralph_story = US-2\n"),
    "setup.cfg": ("setup.cfg", "[tool:pytest]\nralph_story = US-2\n"),
}


@pytest.mark.parametrize("kind", list(CONFIG_FILES))
def test_ralph_ini_keys_in_each_configuration_file(pytester: pytest.Pytester,
                                                    write_prd: Callable[..., Path],
                                                    kind: str) -> None:
    name, text = CONFIG_FILES[kind]
    (pytester.path / name).write_text(text, encoding="utf-8")
    write_prd(story("US-1", exists("never.txt")), story("US-2", "is claimed", passes=True))
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines([f"ralph: story = US-2 (ini ralph_story ({name}))"])


@pytest.mark.skipif(pytest.version_tuple < (9, 0), reason="[tool.pytest] needs pytest >= 9")
def test_ralph_keys_in_the_native_toml_table(pytester: pytest.Pytester,
                                             write_prd: Callable[..., Path]) -> None:
    pytester.makepyprojecttoml('[tool.pytest]\nralph_story = ["US-2"]\n')
    write_prd(story("US-1", exists("never.txt")), story("US-2", "is claimed", passes=True))
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["ralph: story = US-2 (ini ralph_story (pyproject.toml))"])


# -- 3. pytest --help ----------------------------------------------------------------------------


def _help_sections(text: str) -> dict[str, list[str]]:
    """The sections of ``pytest --help`` (heading without its colon -> entries), an entry
    being an option or ini key with its help text joined onto one line."""
    sections: dict[str, list[str]] = {}
    entries: list[str] | None = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.rstrip().endswith(":"):
            entries = sections.setdefault(line.rstrip()[:-1], [])
        elif entries is not None and re.match(r"  \S", line):
            entries.append(" ".join(line.split()))
        elif entries is not None and line.startswith("    ") and entries:
            entries[-1] += " " + " ".join(line.split())
    return sections


def test_help_lists_every_option_in_one_group_with_its_default(
        pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    assert result.ret == 0
    sections = _help_sections(result.stdout.str())
    group = sections.pop("Ralph agent loops (pytest-ralph)")
    options = {entry.split()[0].split("=")[0].rstrip(","): entry for entry in group}
    expected = {"--ralph", "--ralph-dry-run", "--ralph-new", "--ralph-status", "--ralph-cancel",
                "--ralph-init", "--ralph-driver", "--ralph-doctor",
                *(spec.cli for spec in SPECS if spec.cli)}
    assert expected <= set(options), expected - set(options)
    assert "--ralph-results" not in options  # internal: the loop's child only
    for name, entry in options.items():
        assert name.startswith("--ralph"), entry
        assert re.search(r"\(default: [^()]+\)$", entry), entry
    elsewhere = [e for heading, entries in sections.items() if not heading.startswith("[pytest]")
                 for e in entries if e.startswith("--ralph")]
    assert elsewhere == []
    assert "--ralph-max-iterations=N Stop after this many iterations (1..10000); with " \
           "--ralph-parallel, per story (each lane's own count). [ini ralph_max_iterations, " \
           "env PYTEST_RALPH_MAX_ITERATIONS] (default: 5)" in group
    assert "--ralph-parallel=N Work up to N stories at once, each in its own git worktree " \
           "and branch, merged through a queue that runs the criteria (1: one story at a " \
           "time in the project itself). [ini ralph_parallel, env PYTEST_RALPH_PARALLEL] " \
           "(default: 1)" in group


def test_help_shows_the_default_of_every_ini_key(pytester: pytest.Pytester) -> None:
    sections = _help_sections(pytester.runpytest("--help").stdout.str())
    ini = next(entries for heading, entries in sections.items() if heading.startswith("[pytest]"))
    keys = {entry.split()[0]: entry for entry in ini if entry.startswith("ralph_")}
    assert {spec.ini for spec in SPECS if spec.ini_allowed} | {
        "ralph_prd_files", "ralph_db_schema", "ralph_db_seed"} <= set(keys)
    assert not {spec.ini for spec in SPECS if not spec.ini_allowed} & set(keys)
    for entry in keys.values():
        assert re.search(r"\(default: [^()]+\)$", entry), entry
    assert keys["ralph_agent_timeout"].endswith("(default: 1800)")
    assert keys["ralph_prd_files"].endswith("(default: prd.json prd.jsonc prd.yaml prd.yml)")


# -- 4. the report header ------------------------------------------------------------------------


def test_header_shows_nothing_when_every_setting_is_at_its_default(
        pytester: pytest.Pytester, demo: Path) -> None:
    result = pytester.runpytest()
    assert not [line for line in result.outlines if line.startswith("ralph:")]


def test_header_shows_changed_settings_and_their_sources(
        pytester: pytest.Pytester, demo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\nralph_gate = claims\n")
    monkeypatch.setenv("PYTEST_RALPH_BREAKER", "4")
    result = pytester.runpytest("--ralph-max-iterations", "7", "-o", "ralph_check_timeout=30",
                                "--ralph-story", "US-001", "--ralph-story", "US-002")
    result.stdout.fnmatch_lines([
        "ralph: max_iterations = 7 (--ralph-max-iterations); breaker = 4 (environment variable "
        "PYTEST_RALPH_BREAKER); story = US-001 US-002 (--ralph-story); check_timeout = 30 "
        "(-o ralph_check_timeout); gate = claims (ini ralph_gate (tox.ini))"])  # makeini


def test_header_with_v_lists_every_setting(pytester: pytest.Pytester, demo: Path) -> None:
    result = pytester.runpytest("-v", "--ralph-strict")
    start = result.outlines.index("ralph: every setting, with where it came from:")
    lines = result.outlines[start + 1:start + 1 + len(SPECS)]
    assert [line.split()[0] for line in lines] == [spec.name for spec in SPECS]
    assert "  strict = true (--ralph-strict)" in lines
    assert "  max_iterations = 5 (default)" in lines
    assert "  story = all stories (default)" in lines


def test_header_redacts_secrets(pytester: pytest.Pytester, demo: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMO_API_TOKEN", "s3cret-value-42")
    result = pytester.runpytest("--ralph-agent", "tool --token s3cret-value-42")
    assert "s3cret-value-42" not in result.stdout.str()
    result.stdout.fnmatch_lines(["ralph: agent = tool --token [[]redacted $DEMO_API_TOKEN] "
                                 "(--ralph-agent)"])


def test_loop_prints_its_settings(pytester: pytest.Pytester, two_stories: Path) -> None:
    result = pytester.runpytest_subprocess("--ralph-dry-run", "--ralph-agent", "true",
                                           "--ralph-max-iterations", "3")
    assert result.ret == 0, result.stderr.str()
    # First what confines the agent, then the settings.
    assert result.outlines[0].startswith("pytest-ralph: agent and check phases ")
    assert ("pytest-ralph: settings: agent = true (--ralph-agent); max_iterations = 3 "
            "(--ralph-max-iterations)") in result.outlines[1:3]
    verbose = pytester.runpytest_subprocess("--ralph-dry-run", "--ralph-agent", "true", "-v")
    verbose.stdout.fnmatch_lines(["pytest-ralph: settings: every setting, with where it came "
                                  "from:", "  prd = discovered (default)",
                                  "  agent = true (--ralph-agent)"])


# -- 6. which files are PRDs ---------------------------------------------------------------------


YAML_CONFTEST = """
    import pytest
    import yaml


    def pytest_collect_file(parent, file_path):
        if file_path.suffix == ".yaml" and file_path.name.startswith("test"):
            return SpecFile.from_parent(parent, path=file_path)


    class SpecFile(pytest.File):
        def collect(self):
            for name, spec in yaml.safe_load(self.path.read_text()).items():
                yield SpecItem.from_parent(self, name=name, spec=spec)


    class SpecItem(pytest.Item):
        def __init__(self, *, spec, **kwargs):
            super().__init__(**kwargs)
            self.spec = spec

        def runtest(self):
            if self.spec["got"] != self.spec["want"]:
                raise ValueError(f"got {self.spec['got']}, want {self.spec['want']}")

        def repr_failure(self, excinfo):
            return str(excinfo.value)
"""

YAML_TESTS = "sums:\n  got: 4\n  want: 4\nproducts:\n  got: 5\n  want: 6\n"


def test_a_yaml_test_file_of_a_conftest_is_not_a_prd(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(textwrap.dedent(YAML_CONFTEST))
    pytester.makefile(".yaml", test_simple=YAML_TESTS)
    named = pytester.runpytest("test_simple.yaml", "-v")
    named.assert_outcomes(passed=1, failed=1)
    named.stdout.fnmatch_lines(["*test_simple.yaml::sums PASSED*",
                                "*test_simple.yaml::products FAILED*", "*got 5, want 6*"])
    assert "PRD" not in named.stdout.str() + named.stderr.str()
    pytester.runpytest().assert_outcomes(passed=1, failed=1)


def test_named_prd_files_are_collected(pytester: pytest.Pytester,
                                       write_prd: Callable[..., Path]) -> None:
    pytester.makeini("[pytest]\n")  # the rootdir, whatever the paths named
    pytester.makeconftest(textwrap.dedent(YAML_CONFTEST))
    pytester.makefile(".yaml", test_simple=YAML_TESTS)
    crit = story("US-1", "is claimed", passes=True)
    write_prd(crit, name="some/dir/prd.json")
    write_prd(crit, name="custom-name.json")
    (pytester.path / "custom.yaml").write_text(
        "userStories:\n  - id: US-9\n    title: a YAML PRD\n    passes: true\n"
        "    acceptanceCriteria:\n      - is claimed\n", encoding="utf-8")
    for path, node in (("some/dir/prd.json", "some/dir/prd.json::US-1::AC1"),
                       ("custom-name.json", "custom-name.json::US-1::AC1"),
                       ("custom.yaml", "custom.yaml::US-9::AC1")):
        # In subprocesses: pytester's inline runs drop the modules each run imported, and
        # PyYAML's C loader does not survive being imported again into one process.
        result = pytester.runpytest_subprocess(path, "--collect-only", "-q")
        assert collected(result) == [node], result.stdout.str()
    both = pytester.runpytest_subprocess("test_simple.yaml", "custom-name.json",
                                         "--collect-only", "-q")
    assert collected(both) == ["test_simple.yaml::sums", "test_simple.yaml::products",
                               "custom-name.json::US-1::AC1"]


def test_a_json_file_nothing_else_collects_is_read_as_a_prd(pytester: pytest.Pytester) -> None:
    (pytester.path / "data.json").write_text('{"name": "x", "rows": [1]}\n', encoding="utf-8")
    result = pytester.runpytest("data.json")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error, explained
    result.stdout.fnmatch_lines(["*invalid PRD*data.json*"])
