"""The Markdown job summary (``GITHUB_STEP_SUMMARY``), ``--ralph-report``, and the GitHub
Actions workflow template ``templates/github/ralph-gate.yml``."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
import yaml

from pytest_ralph.plugin import stepsummary
from pytest_ralph.plugin.stepsummary import Row, escape, render_gate
from pytest_ralph.testing import AgentFactory
from tests.support.docs import DOCS, parse
from tests.support.prd import story

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "templates" / "github" / "ralph-gate.yml"
GATE_HEAD = "### pytest-ralph gate:"
LOOP_HEAD = "### pytest-ralph loop:"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No summary file, and not inside a loop, unless a test says so."""
    for name in ("GITHUB_STEP_SUMMARY", "PYTEST_RALPH_CONTROLLER", "PYTEST_RALPH_CHILD",
                 "PYTEST_RALPH_GATE", "PYTEST_ADDOPTS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def summary(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A job summary file that already holds an earlier step's text, named by
    ``GITHUB_STEP_SUMMARY``."""
    path = pytester.path.parent / "step_summary.md"
    path.write_text("## An earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))
    return path


def three_stories(write_prd: Callable[..., Path], pytester: pytest.Pytester) -> Path:
    """US-1 verified + claimed and passing, US-2 claimed done and failing, US-3 in progress."""
    (pytester.path / "hello.txt").write_text("hi\n", encoding="utf-8")
    return write_prd(
        story("US-1", {"text": "hello.txt exists", "exists": "hello.txt"},
              "The greeting is friendly", passes=True),
        story("US-2", {"text": "bye.txt exists", "exists": "bye.txt"}, passes=True),
        story("US-3", {"text": "wave.txt exists", "exists": "wave.txt"}))


# -- the Markdown -------------------------------------------------------------------------------


def test_escape_makes_user_text_one_safe_line() -> None:
    assert escape("a | b `c`\nd *e* <br> [x](y) _z_") == \
        r"a \| b \`c\` d \*e\* \<br\> \[x\](y) \_z\_"
    assert escape("tab\there\x1b[31m red") == "tab here red"
    assert escape("x" * 50, 10) == "xxxxxxx..."
    assert escape("back\\slash") == "back\\\\slash"


def test_render_gate_counts_and_lists_failures_escaped() -> None:
    rows = [Row("US|1", "AC1", "works", "verified"),
            Row("US|1", "AC2", "claimed text", "claimed"),
            Row("US|1", "AC3", "pipe | and `tick`", "failed",
                "heading:\nE   assert 1 == 2 | oops\nmore"),
            Row("US-2", "AC1", "later", "unclaimed", "nope")]
    text = render_gate(rows, exit_code=1, prds=["prd.json"])
    assert text.startswith("### pytest-ralph gate: failed\n")
    assert "- Outcome: **exit 1**: criteria (or tests) failing" in text
    assert ("- Criteria: 2 of 4 passing: 1 verified, 1 claimed (not verified); 1 failing; "
            "1 failing in stories not claimed done (not counted)") in text
    assert "| US\\|1 | 1 | 1 | 1 | 0 |" in text
    assert "| US-2 | 0 | 0 | 0 | 1 |" in text
    assert r"- US\|1::AC3: pipe \| and \`tick\` -- E assert 1 == 2 \| oops" in text
    assert "later" not in text  # not-claimed failures are counted, not listed
    for line in text.splitlines():  # every table row has the header's number of cells
        if line.startswith("| "):
            assert len(re.findall(r"(?<!\\)\|", line)) == 6, line


def test_render_gate_bounds_the_failures() -> None:
    rows = [Row("US-1", f"AC{i}", "t", "failed", "m" * 5000) for i in range(120)]
    text = render_gate(rows, exit_code=1)
    assert text.count("\n- US-1::AC") == stepsummary.MOST_FAILING
    assert f"- ... and {120 - stepsummary.MOST_FAILING} more" in text
    assert max(len(line) for line in text.splitlines()) < 400


def test_append_adds_after_a_blank_line_and_never_replaces(tmp_path: Path) -> None:
    path = tmp_path / "summary.md"
    env = {"GITHUB_STEP_SUMMARY": str(path)}
    assert stepsummary.append("# one\n", env) is None
    assert stepsummary.append("# two\n", env) is None
    assert path.read_text(encoding="utf-8") == "# one\n\n# two\n"
    path.write_text("no newline", encoding="utf-8")
    assert stepsummary.append("# three\n", env) is None
    assert path.read_text(encoding="utf-8") == "no newline\n\n# three\n"


def test_append_without_the_variable_writes_nothing(tmp_path: Path) -> None:
    assert stepsummary.append("# one\n", {}) is None
    assert stepsummary.append("# one\n", {"GITHUB_STEP_SUMMARY": " "}) is None
    assert list(tmp_path.iterdir()) == []


def test_append_to_an_unwritable_path_returns_a_warning(tmp_path: Path) -> None:
    warning = stepsummary.append("# one\n", {"GITHUB_STEP_SUMMARY": str(tmp_path)})
    assert warning is not None
    assert warning.startswith(f"cannot write the job summary GITHUB_STEP_SUMMARY={tmp_path}: ")


# -- the gate -----------------------------------------------------------------------------------


def sections(text: str, head: str) -> list[str]:
    """The sections of ``text`` that start with ``head``."""
    return [head + part for part in text.split(head)[1:]]


def test_the_gate_appends_its_summary(pytester: pytest.Pytester, summary: Path,
                                      write_prd: Callable[..., Path]) -> None:
    three_stories(write_prd, pytester)
    result = pytester.runpytest_subprocess("prd.json", "--ralph-gate=claims")
    assert result.ret == 1
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("## An earlier step\n\n### pytest-ralph gate: failed\n")
    assert "- PRD: prd.json" in text
    assert "| story | title | verified | claimed | failed | failing, not claimed |" in text
    assert "| US-1 | story US-1 | 1 | 1 | 0 | 0 |" in text
    assert "| US-2 | story US-2 | 0 | 0 | 1 | 0 |" in text
    assert "| US-3 | story US-3 | 0 | 0 | 0 | 1 |" in text
    assert "- US-2::AC1: bye.txt exists -- nothing at \\`bye.txt\\`; expected a file or " \
           "folder there" in text
    assert "**Failing criteria (1)**" in text
    # A second run appends a second section.
    (pytester.path / "bye.txt").write_text("bye\n", encoding="utf-8")
    assert pytester.runpytest_subprocess("prd.json", "--ralph-gate=claims").ret == 0
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("## An earlier step\n\n### pytest-ralph gate: failed\n")
    parts = sections(text, GATE_HEAD)
    assert len(parts) == 2
    assert parts[1].startswith("### pytest-ralph gate: passed\n")
    assert "- Outcome: **exit 0**: every story that claims to be done passes " \
           "(--ralph-gate=claims); 1 criterion of stories not claimed done fails" in parts[1]
    assert "Failing criteria" not in parts[1]


def test_no_variable_no_summary(pytester: pytest.Pytester,
                                write_prd: Callable[..., Path]) -> None:
    three_stories(write_prd, pytester)
    result = pytester.runpytest_subprocess("prd.json")
    assert result.ret == 1
    assert sorted(p.name for p in pytester.path.iterdir() if p.suffix == ".md") == []
    assert "pytest-ralph: report" not in result.stdout.str()


def test_a_run_without_criteria_adds_nothing(pytester: pytest.Pytester, summary: Path) -> None:
    pytester.makepyfile(test_plain="def test_ok():\n    assert True\n")
    assert pytester.runpytest_subprocess().ret == 0
    assert summary.read_text(encoding="utf-8") == "## An earlier step\n"


def test_an_empty_prd_and_an_invalid_prd_are_summarized(
        pytester: pytest.Pytester, summary: Path, write_prd: Callable[..., Path]) -> None:
    write_prd()
    assert pytester.runpytest_subprocess("prd.json").ret == 5
    (pytester.path / "prd.json").write_text(
        '{"userStories": [{"id": "US-1", "title": "t", "passes": "true"}]}', encoding="utf-8")
    assert pytester.runpytest_subprocess("prd.json").ret == 2
    empty, broken = sections(summary.read_text(encoding="utf-8"), GATE_HEAD)
    assert "- Outcome: **exit 5**: no criteria collected" in empty
    assert "no user stories" in empty
    assert "- Outcome: **exit 2**: interrupted, or a PRD could not be collected" in broken
    assert "- prd.json: invalid PRD" in broken
    assert "passes: expected true or false" in broken  # its first problem


def test_under_xdist_the_summary_is_written_once_and_the_same(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("xdist")
    three_stories(write_prd, pytester)
    texts = []
    for args in (("-n", "0"), ("-n", "2")):
        path = pytester.path.parent / f"summary{args[1]}.md"
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))
        result = pytester.runpytest_subprocess("prd.json", "--ralph-gate=claims", *args)
        assert result.ret == 1
        texts.append(path.read_text(encoding="utf-8"))
    assert len(sections(texts[1], GATE_HEAD)) == 1
    assert texts[0] == texts[1]


@pytest.mark.parametrize("quiet", [(), ("-q",)], ids=["default", "quiet"])
def test_an_unwritable_summary_is_a_warning_and_keeps_the_exit_code(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        monkeypatch: pytest.MonkeyPatch, quiet: tuple[str, ...]) -> None:
    """The warning is a line of its own after the table (with ``-q`` too, where the progress
    line is still open when the session finishes)."""
    three_stories(write_prd, pytester)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "no" / "such" / "folder.md"))
    result = pytester.runpytest_subprocess("prd.json", "--ralph-gate=claims", *quiet)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["US-*", "pytest-ralph: warning: cannot write the job summary "
                                 "GITHUB_STEP_SUMMARY=*folder.md: *"])
    assert all(line.startswith("pytest-ralph: warning: cannot write")
               for line in result.stdout.lines if "cannot write" in line)
    (pytester.path / "bye.txt").write_text("bye\n", encoding="utf-8")
    assert pytester.runpytest_subprocess("prd.json", "--ralph-gate=claims").ret == 0


def test_ralph_report_writes_the_same_markdown(pytester: pytest.Pytester, summary: Path,
                                               write_prd: Callable[..., Path]) -> None:
    three_stories(write_prd, pytester)
    result = pytester.runpytest_subprocess("prd.json", "--ralph-report", "out/gate.md")
    assert result.ret == 1
    report = pytester.path / "out" / "gate.md"
    result.stdout.fnmatch_lines([f"pytest-ralph: report {report}"])
    text = report.read_text(encoding="utf-8")
    assert text.startswith("### pytest-ralph gate: failed\n")
    assert summary.read_text(encoding="utf-8") == "## An earlier step\n\n" + text
    # Replaced, not appended; and written with no GITHUB_STEP_SUMMARY too.
    os.environ.pop("GITHUB_STEP_SUMMARY")
    (pytester.path / "bye.txt").write_text("bye\n", encoding="utf-8")
    (pytester.path / "wave.txt").write_text("~\n", encoding="utf-8")
    assert pytester.runpytest_subprocess("prd.json", "--ralph-report=out/gate.md").ret == 0
    assert report.read_text(encoding="utf-8").count(GATE_HEAD) == 1
    assert "gate: passed" in report.read_text(encoding="utf-8")


def test_escaping_in_the_gate(pytester: pytest.Pytester, summary: Path,
                              write_prd: Callable[..., Path]) -> None:
    write_prd(story("US-1", {"text": "pipe | and `tick` and <b>bold</b>",
                             "run": "echo 'left|right'; exit 3"}))
    assert pytester.runpytest_subprocess("prd.json").ret == 1
    text = summary.read_text(encoding="utf-8")
    assert r"- US-1::AC1: pipe \| and \`tick\` and \<b\>bold\</b\> -- " in text
    assert "<b>" not in text and "`tick`" not in text


# -- the loop -----------------------------------------------------------------------------------


def test_the_loop_appends_its_summary(pytester: pytest.Pytester, summary: Path,
                                      write_prd: Callable[..., Path],
                                      ralph_agent: AgentFactory) -> None:
    write_prd(story("US-1", {"text": "hello.txt exists", "run": "test -f hello.txt"},
                    title="Say | hello"),
              story("US-2", "Docs are clear", passes=True, priority=2))
    agent = ralph_agent({"files": {"hello.txt": "hi\n"}})
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command,
                                           "--ralph-report", "loop-report.md")
    assert result.ret == 0, result.stdout.str()
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("## An earlier step\n\n### pytest-ralph loop: Demo: complete\n")
    (part,) = sections(text, LOOP_HEAD)
    assert "- Outcome: **exit 0**: complete: every criterion passes" in part
    assert "- Iterations: 1 of at most 5" in part
    assert "- Criteria: 2 of 2 passing: 1 verified, 1 claimed (not verified); 0 failing" in part
    assert "| story | title | verified | claimed | failed |" in part
    assert r"| US-1 | Say \| hello | 1 | 0 | 0 |" in part
    assert "| US-2 | story US-2 | 0 | 1 | 0 |" in part
    reports = list((pytester.path / ".pytest_ralph" / "reports").glob("ralph-*.md"))
    assert len(reports) == 1
    assert f"- Report: {escape(str(reports[0]))}" in part
    # --ralph-report with --ralph: a copy of the loop's report.
    copy = pytester.path / "loop-report.md"
    assert copy.read_text(encoding="utf-8") == reports[0].read_text(encoding="utf-8")
    assert GATE_HEAD not in text  # the check phases add nothing


def test_the_loop_summary_lists_what_still_fails(pytester: pytest.Pytester, summary: Path,
                                                 write_prd: Callable[..., Path],
                                                 ralph_agent: AgentFactory) -> None:
    write_prd(story("US-1", {"text": "hello.txt exists", "run": "test -f hello.txt"}))
    agent = ralph_agent({"stdout": "thinking\n"})
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command,
                                           "--ralph-max-iterations", "1")
    assert result.ret == 1
    (part,) = sections(summary.read_text(encoding="utf-8"), LOOP_HEAD)
    assert part.startswith("### pytest-ralph loop: Demo: limit\n")
    assert "- Outcome: **exit 1**: stopped at a limit with criteria still failing" in part
    assert "- Iterations: 1 of at most 1" in part
    assert "- Reason: " in part
    assert "**Failing criteria (last check) (1)**" in part
    assert "- US-1::AC1: hello.txt exists -- " in part


def test_the_loop_that_cannot_start_says_so(pytester: pytest.Pytester, summary: Path,
                                            write_prd: Callable[..., Path]) -> None:
    write_prd(story("US-1", {"text": "hello.txt exists", "run": "test -f hello.txt"}))
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent",
                                           "no-such-agent-anywhere")
    assert result.ret == 4
    (part,) = sections(summary.read_text(encoding="utf-8"), LOOP_HEAD)
    assert part.startswith("### pytest-ralph loop: not run\n")
    assert "- Outcome: **exit 4**: usage error" in part
    assert "no-such-agent-anywhere" in part


def test_the_loop_with_an_unwritable_summary_keeps_its_exit_code(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        ralph_agent: AgentFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path))  # a folder
    write_prd(story("US-1", {"text": "hello.txt exists", "run": "test -f hello.txt"}))
    agent = ralph_agent({"files": {"hello.txt": "hi\n"}})
    result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command)
    assert result.ret == 0
    result.stderr.fnmatch_lines(["pytest-ralph: warning: cannot write the job summary *"])


# -- the workflow template and the docs ---------------------------------------------------------


def load_template() -> dict[Any, Any]:
    data = yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def gate_steps(job: dict[str, Any]) -> list[str]:
    """The ``run:`` scripts of the template's job that call pytest (not pip)."""
    return [step["run"] for step in job["steps"]
            if "run" in step and "-m pytest" in step["run"] and "pip install" not in step["run"]]


def test_the_template_is_a_workflow_that_uploads_always() -> None:
    data = load_template()
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` as true
    assert {"push", "pull_request"} <= set(triggers)
    (job,) = data["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    uses = [step["uses"] for step in job["steps"] if "uses" in step]
    assert [u.split("@")[0] for u in uses] == ["actions/checkout", "actions/setup-python",
                                               "actions/upload-artifact"]
    assert all(re.fullmatch(r"[\w/-]+@v\d+", u) for u in uses), uses
    (upload,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-")]
    assert upload["if"] == "always()"
    assert upload["with"]["path"] == "${{ env.RALPH_OUT }}/"
    (gate,) = gate_steps(job)
    assert "--junitxml=\"$RALPH_OUT/junit.xml\"" in gate
    assert "--ralph-report=\"$RALPH_OUT/report.md\"" in gate
    assert job["env"]["PYTEST_RALPH_GATE"] in ("claims", "all")


def test_the_template_installs_pytest_ralph_from_a_source_the_user_names() -> None:
    """pytest-ralph is not on PyPI: the install step takes its pip requirement from
    ``RALPH_PIP_SPEC``, whose comment says so and shows a git URL, and skips it when empty."""
    text = TEMPLATE.read_text(encoding="utf-8")
    (job,) = load_template()["jobs"].values()
    assert job["env"]["RALPH_PIP_SPEC"] == ""
    (install,) = [s["run"] for s in job["steps"] if "pip install" in s.get("run", "")]
    assert 'if [ -n "$RALPH_PIP_SPEC" ]; then python -m pip install "$RALPH_PIP_SPEC"; fi' \
        in install
    assert "pip install pytest-ralph" not in install
    assert "not on PyPI yet" in text and "git+https://" in text


@pytest.mark.parametrize("installed", [True, False], ids=["installed", "missing"])
def test_the_install_step_stops_with_an_error_when_pytest_ralph_is_missing(
        tmp_path: Path, installed: bool) -> None:
    """The install step, run by bash with pip replaced by a stub that records its arguments:
    a settings-only pyproject.toml is not installed, and without pytest-ralph the step fails
    with a GitHub error annotation that says what to set."""
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    (job,) = load_template()["jobs"].values()
    (install,) = [s["run"] for s in job["steps"] if "pip install" in s.get("run", "")]
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    real = sys.executable if installed else "/nonexistent"
    python.write_text("#!/bin/sh\n"
                      'if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then echo "pip $*" >> pip.log; '
                      "exit 0; fi\n"
                      f'if [ -x "{real}" ]; then exec "{real}" "$@"; fi\nexit 1\n')
    python.chmod(0o755)
    env = {**os.environ, **{str(k): str(v) for k, v in job["env"].items()},
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-e", "-c", install], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    log = (tmp_path / "pip.log").read_text()
    assert "install -e ." not in log  # settings only: not a package
    if installed:
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        assert done.returncode == 1
        assert "::error::pytest-ralph is not installed: set RALPH_PIP_SPEC" in done.stdout


@pytest.mark.parametrize("done", [False, True], ids=["failing", "passing"])
def test_the_templates_gate_commands_work(tmp_path: Path, done: bool) -> None:
    """The template's pytest step, run by bash with the job's environment in a sample
    project, as the runner runs it: exit code, JUnit XML, report, job summary."""
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    job = next(iter(load_template()["jobs"].values()))
    (tmp_path / "prd.json").write_text(json.dumps({"project": "Sample", "userStories": [
        story("US-1", {"text": "app.py exists", "exists": "app.py"}, passes=True),
        story("US-2", {"text": "later.py exists", "exists": "later.py"})]}), encoding="utf-8")
    if done:
        (tmp_path / "app.py").write_text("print('hi')\n", encoding="utf-8")
    summary = tmp_path.parent / f"{tmp_path.name}-summary.md"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_"))}
    env.update({str(k): str(v) for k, v in job["env"].items()})
    env["GITHUB_STEP_SUMMARY"] = str(summary)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    for script in gate_steps(job):
        done_run = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=300)
        assert done_run.returncode == (0 if done else 1), done_run.stdout + done_run.stderr
    out = tmp_path / job["env"]["RALPH_OUT"]
    cases = ElementTree.parse(out / "junit.xml").getroot().iter("testcase")
    assert len(list(cases)) == 2
    report = (out / "report.md").read_text(encoding="utf-8")
    assert report.startswith(f"### pytest-ralph gate: {'passed' if done else 'failed'}\n")
    assert summary.read_text(encoding="utf-8") == report


def test_the_template_ships_in_the_package() -> None:
    from pytest_ralph.loop.prompt import template_path

    assert template_path("github/ralph-gate.yml").read_bytes() == TEMPLATE.read_bytes()
    try:
        import tomllib
    except ImportError:  # Python 3.10
        pytest.skip("needs tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    force = project["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert force["templates"] == "pytest_ralph/templates"  # the whole folder, github/ too


def test_the_summary_shown_in_docs_ci_is_what_the_gate_writes(tmp_path: Path) -> None:
    doc = DOCS / "ci.md"
    lines = doc.read_text(encoding="utf-8").splitlines()
    start = lines.index("<!-- stepsummary: gate -->") + 2
    shown = "\n".join(lines[start:lines.index("```", start)]) + "\n"
    (example,) = [ex for ex in parse(doc) if ex.name == "gate"]
    for name, text in example.files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    command, code = example.commands[0]
    summary = tmp_path.parent / f"{tmp_path.name}-summary.md"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_"))}
    env["GITHUB_STEP_SUMMARY"] = str(summary)
    args = command.split()[1:]
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "-p", "no:randomly", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == code, done.stdout + done.stderr
    assert summary.read_text(encoding="utf-8").rstrip("\n") == shown.rstrip("\n")
    report = tmp_path / "ralph-gate" / "report.md"
    assert report.read_text(encoding="utf-8").rstrip("\n") == shown.rstrip("\n")


def test_a_claims_gate_that_passes_says_what_still_fails() -> None:
    """Under ``--ralph-gate=claims`` a project whose stories are all in progress passes the
    gate: the outcome says so instead of "every selected criterion passes"."""
    rows = [stepsummary.Row("US-1", "AC1", "tests pass", "unclaimed", "1 failed"),
            stepsummary.Row("US-2", "AC1", "docs", "verified")]
    text = stepsummary.render_gate(rows, exit_code=0)
    assert "- Outcome: **exit 0**: every story that claims to be done passes " \
           "(--ralph-gate=claims); 1 criterion of stories not claimed done fails (work in " \
           "progress)" in text
    assert "every selected criterion passes" not in text
    assert "every selected criterion passes" in stepsummary.render_gate(rows[1:], exit_code=0)


def test_the_command_docs_ci_gives_prints_the_templates_path() -> None:
    """``docs/ci.md`` tells how to find the installed template: that command, run as shown
    (with this interpreter as ``python``), prints the path of a file equal to the template."""
    lines = (DOCS / "ci.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("python -c ") and
                 "template_path" in line)
    argv = shlex.split(lines[start])
    assert argv[0] == "python"
    done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True,
                          check=True)
    assert Path(done.stdout.strip()).read_bytes() == TEMPLATE.read_bytes()
