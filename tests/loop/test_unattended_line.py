"""The loop says what runs unattended (issue 23 item 5).

``pytest --ralph`` in a subprocess (pytester), with the real pinned Codex CLI on ``PATH``
(:func:`tests.support.real_cli.cli_executable`; skipped where it cannot be installed, failed
under ``CI=true``) and real bubblewrap for the confined case. The PRD's criterion passes at
the baseline, so each loop ends at once (exit 0) without running the agent: the line is
printed before the baseline, from the argv the loop resolved.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.prd import story
from tests.support.real_cli import CliInstallError, bin_dir, cli_executable

LINE = ("pytest-ralph: unattended: `--dangerously-bypass-approvals-and-sandbox` lets codex run "
        "any command and edit any file with no approval and without Codex's own sandbox; ")


@pytest.fixture
def codex_on_path(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The pinned real ``codex`` first on ``PATH`` (its ``ralph-bin`` folder)."""
    try:
        exe = cli_executable("codex")
    except CliInstallError as exc:
        pytest.fail(f"installing the pinned Codex CLI failed:\n{exc}", pytrace=False)
    if exe is None:
        why = "the Codex CLI is not installed and npm is not on PATH"
        if os.environ.get("CI"):
            pytest.fail(f"{why}: CI must run the real-CLI tests", pytrace=False)
        pytest.skip(why)
    folder = bin_dir("codex")
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


@pytest.fixture
def passing(pytester: pytest.Pytester, write_prd: Callable[..., Path]) -> Path:
    """A project whose one criterion already passes."""
    (pytester.path / "done.txt").write_text("done\n", encoding="utf-8")
    return write_prd(story("US-001", {"text": "done.txt exists", "exists": "done.txt"}))


def _loop(pytester: pytest.Pytester, *args: str) -> tuple[int, list[str]]:
    result = pytester.runpytest_subprocess("--ralph", "--ralph-max-iterations", "1", *args)
    lines = result.stdout.lines + result.stderr.lines
    assert result.ret == 0, "\n".join(lines)
    return result.ret, lines


def _unattended(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("pytest-ralph: unattended:")]


def test_sandbox_on_says_the_flag_is_confined_to_the_project(
        pytester: pytest.Pytester, passing: Path, codex_on_path: Path) -> None:
    if sys.platform != "linux" or shutil.which("bwrap") is None:
        if os.environ.get("CI"):
            pytest.fail("bubblewrap is not installed: CI must install it")
        pytest.skip("bubblewrap is not installed")
    _, lines = _loop(pytester, "--ralph-agent", "codex", "-o", "ralph_sandbox=required")
    [line] = _unattended(lines)
    assert line.startswith(LINE), line
    assert line.endswith("confines it to the project folder: it writes only there and in "
                         "the paths listed above"), line
    assert "the loop's sandbox (bubblewrap" in line
    # Printed right after the line that lists what the sandbox lets the agent write.
    at = lines.index(line)
    assert lines[at - 1].startswith("pytest-ralph: agent and check phases confined by"), lines


def test_sandbox_off_says_nothing_confines_it(pytester: pytest.Pytester, passing: Path,
                                              codex_on_path: Path) -> None:
    _, lines = _loop(pytester, "--ralph-agent", "codex", "-o", "ralph_sandbox=off")
    [line] = _unattended(lines)
    assert line == LINE + (
        "the loop's sandbox is off (ralph_sandbox = off from -o ralph_sandbox), so nothing "
        "confines it to the project folder: it can do this anywhere you can "
        "(`--ralph-sandbox required` refuses to run unconfined)"), line


def test_a_flag_in_a_command_line_counts_too(pytester: pytest.Pytester, passing: Path,
                                             codex_on_path: Path) -> None:
    _, lines = _loop(pytester, "--ralph-agent", f"{codex_on_path / 'codex'} exec --json --yolo -",
                     "-o", "ralph_sandbox=off")
    [line] = _unattended(lines)
    assert line.startswith("pytest-ralph: unattended: `--yolo` lets codex run any command"), line


@pytest.mark.parametrize("how", ["flags without the bypass", "a scripted agent"])
def test_no_line_for_an_agent_without_such_a_flag(
        how: str, pytester: pytest.Pytester, passing: Path, codex_on_path: Path) -> None:
    if how == "a scripted agent":
        (pytester.path / "agent.py").write_text("print('hi')\n", encoding="utf-8")
        args = ("--ralph-agent", f"{sys.executable} agent.py")
    else:
        args = ("--ralph-agent", "codex", "-o",
                "ralph_agent_flags=exec --json --sandbox workspace-write -")
    _, lines = _loop(pytester, *args, "-o", "ralph_sandbox=off")
    assert not _unattended(lines), lines
    assert any(line.startswith("pytest-ralph: agent and check phases NOT confined")
               for line in lines), lines
