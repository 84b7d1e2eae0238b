"""`pytest --ralph-doctor --ralph-agent NAME` against the real pinned CLIs.

Each CLI is the release of :data:`pytest_ralph.agents.proven.PROVEN`, installed by
:func:`tests.support.real_cli.cli_executable` (skipped with the reason where it cannot be
installed, failed under ``CI=true``). The doctor runs as a user runs it: a ``pytest``
subprocess in a project, with a ``PATH`` that holds the CLI (its ``ralph-bin`` folder and
Node.js) or that does not, and a ``HOME`` of its own. Each CLI call of the doctor takes about
a second (gemini's ``--help`` the longest, about 1.5 s).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ralph.agents.presets import PRESETS
from pytest_ralph.agents.proven import PROVEN, UNVERIFIED
from tests.support.env import clean_env
from tests.support.real_cli import CliInstallError, bin_dir, cli_executable

#: Seconds one doctor run (a pytest subprocess with two CLI calls) may take.
DOCTOR_TIMEOUT = 60.0

REAL = ("codex", "gemini", "opencode", "aider")


def _bin(name: str) -> Path:
    """The ``ralph-bin`` folder (which holds only the executable) of the pinned CLI ``name``;
    skips where it cannot be installed, fails under CI or when an install fails."""
    try:
        exe = cli_executable(name)
    except CliInstallError as exc:
        pytest.fail(f"installing the pinned {name} CLI failed:\n{exc}", pytrace=False)
    if exe is None:
        why = f"the {name} CLI is not installed and its installer (npm) is not on PATH"
        if os.environ.get("CI"):
            pytest.fail(f"{why}: CI must run the real-CLI tests", pytrace=False)
        pytest.skip(why)
    return bin_dir(name)


def _base_path(*without: str) -> list[str]:
    """The folders of this ``PATH`` that hold none of the executables ``without``, plus
    those of Python and Node.js."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    keep = [d for d in dirs if not any(os.path.exists(os.path.join(d, w)) for w in without)]
    node = shutil.which("node")
    extra = [os.path.dirname(sys.executable)] + ([os.path.dirname(node)] if node else [])
    return [*[e for e in extra if not any(os.path.exists(os.path.join(e, w))
                                         for w in without)], *keep]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder (a pytest.ini makes it the rootdir) and a home folder beside it."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (tmp_path / "home").mkdir()
    return root


def _doctor(project: Path, path: list[str], *args: str) -> tuple[int, str]:
    """Exit code and output of `pytest --ralph-doctor ARGS` in ``project`` with ``PATH``."""
    env = clean_env(PATH=os.pathsep.join(path), HOME=str(project.parent / "home"),
                    NO_COLOR="1")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly",
                           "--ralph-doctor", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=DOCTOR_TIMEOUT, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def _lines(out: str, kind: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(f"{kind}: ")]


@pytest.mark.parametrize("name", REAL)
def test_a_proven_cli_on_path_shows_its_version_and_every_flag(
        name: str, project: Path) -> None:
    folder = _bin(name)
    code, out = _doctor(project, [str(folder), *_base_path(name)], "--ralph-agent", name)
    assert code == 0, out
    pin = PROVEN[name]
    assert out.splitlines()[0].startswith(f"pytest-ralph doctor: agent preset {name}, argv ")
    assert f"ok: `{name}` is on PATH: {folder / name}" in out
    assert (f"ok: `{name} --version`: {pin.version}, the release the {name} preset was "
            "proven with") in out
    [flags] = [line for line in _lines(out, "ok") if line.startswith("ok: every flag of")]
    for flag in (f.split("=")[0] for f in PRESETS[name].flags if f.startswith("-") and f != "-"):
        assert flag in flags, (flag, out)
    help_cmd = {"codex": "codex exec --help", "opencode": "opencode run --help"}.get(
        name, f"{name} --help")
    assert f"`{help_cmd}`" in flags
    assert not _lines(out, "problem") and not _lines(out, "warning"), out
    assert out.splitlines()[-1] == "pytest-ralph: all 3 checks ok"


def test_gemini_on_path_checks_the_values_its_help_lists(project: Path) -> None:
    code, out = _doctor(project, [str(_bin("gemini")), *_base_path("gemini")],
                        "--ralph-agent", "gemini")
    assert code == 0, out
    assert ("ok: every flag of the gemini preset's argv is in `gemini --help`: "
            "--output-format, --approval-mode, --skip-trust (values among the listed choices: "
            "--output-format stream-json, --approval-mode yolo)") in out, out


def test_gemini_not_on_path_is_a_problem_with_the_install_command(project: Path) -> None:
    code, out = _doctor(project, _base_path("gemini"), "--ralph-agent", "gemini")
    assert code == 1, out
    [problem] = _lines(out, "problem")
    assert "`gemini` is not on PATH" in problem
    assert "`npm install -g @google/gemini-cli@0.61.0`" in problem
    assert "skipped: its version and flags (gemini is not installed)" in out
    assert "1 problem found" in out.splitlines()[-1]


def test_a_flag_the_cli_lacks_is_caught(project: Path) -> None:
    (project / "pytest.ini").write_text(
        "[pytest]\nralph_agent_flags = --output-format stream-jsonl --approval-mode=yolo "
        "--no-such-flag\n", encoding="utf-8")
    code, out = _doctor(project, [str(_bin("gemini")), *_base_path("gemini")],
                        "--ralph-agent", "gemini")
    assert code == 1, out
    problems = _lines(out, "problem")
    assert len(problems) == 2, out
    assert problems[0].startswith("problem: `--output-format stream-jsonl` is not allowed: "
                                  "`gemini --help` lists only text, json, stream-json")
    assert problems[1].startswith("problem: `--no-such-flag` is not in `gemini --help`: the "
                                  "CLI may have renamed or dropped it")
    assert all("change ralph_agent_flags (from ini ralph_agent_flags (pytest.ini))" in p
               for p in problems)
    assert "ok: in `gemini --help`: --approval-mode (values among the listed choices: " \
           "--approval-mode yolo)" in out
    assert "2 problems found" in out.splitlines()[-1]


def test_a_subcommand_flag_drifted_is_caught_in_the_subcommand_help(
        project: Path) -> None:
    code, out = _doctor(project, [str(_bin("codex")), *_base_path("codex")],
                        "--ralph-agent", "codex", "-o",
                        "ralph_agent_flags=exec --json --full-auto-please -")
    assert code == 1, out
    [problem] = _lines(out, "problem")
    assert problem.startswith("problem: `--full-auto-please` is not in `codex exec --help`")
    assert "(from -o ralph_agent_flags)" in problem


@pytest.mark.parametrize("name", sorted(UNVERIFIED))
def test_an_unverified_preset_says_so(name: str, project: Path) -> None:
    code, out = _doctor(project, _base_path(PRESETS[name].executable), "--ralph-agent", name)
    [warning] = _lines(out, "warning")
    assert warning.startswith(f"warning: the {name} preset is unverified: {UNVERIFIED[name]}")
    assert "Not checked: its output reader, exit codes" in warning
    # Not installable here: the PATH check is a problem that says where to look.
    assert code == 1, out
    [problem] = _lines(out, "problem")
    assert f"`{PRESETS[name].executable}` is not on PATH" in problem
    assert PRESETS[name].docs[0] in problem


@pytest.mark.parametrize("value", ["nope", "mycli --flag"])
def test_no_preset_is_a_usage_message(value: str, project: Path) -> None:
    code, out = _doctor(project, _base_path(), "--ralph-agent", value)
    assert code == 4, out
    assert "Traceback" not in out
    assert out.strip().startswith("pytest-ralph: --ralph-doctor --ralph-agent takes a preset "
                                  "name (claude, codex, aider, gemini, opencode, amp, goose, "
                                  f"cursor-agent); {value!r} is ")


def test_plain_doctor_still_checks_the_claude_wiring(project: Path) -> None:
    (project / "pytest.ini").write_text("[pytest]\nralph_agent = gemini\n", encoding="utf-8")
    code, out = _doctor(project, _base_path())
    assert code == 1, out
    assert out.splitlines()[0] == f"pytest-ralph doctor: {project}"
    assert "settings.json does not exist" in out


@pytest.mark.parametrize(("text", "version"), [
    ("codex-cli 0.171.0\n", "0.171.0"),  # codex-cli 0.171.0
    ("0.61.0\n", "0.61.0"),  # gemini 0.61.0, opencode prints its own the same way
    ("aider 0.86.2\n", "0.86.2"),
    ("2.1.328 (Claude Code)\n", "2.1.328"),
    ("WARNING: proceeding, even though we could not create PATH aliases\ncodex-cli 0.171.0\n",
     "0.171.0"),
    ("v1.18.33-beta.2\n", "1.18.33"),
    ("no version here\n", None),
])
def test_parse_version_reads_what_the_clis_print(text: str, version: str | None) -> None:
    from pytest_ralph.commands.agent_doctor import parse_version

    assert parse_version(text) == version
