"""Where ``pytest --ralph-init --ralph-driver claude`` puts the Stop hook, and that it travels.

``--ralph-hook-scope local`` (the default) writes this machine's interpreter into
``.claude/settings.local.json`` and has git ignore that file (``.git/info/exclude``);
``--ralph-hook-scope project`` writes a command with no path of this machine into the shared
``.claude/settings.json``. An existing install is upgraded where it is, moved when another
scope is asked for, and never doubled; a command of the user's own is never touched.
``pytest --ralph-doctor`` is checked on each case.

Real subprocesses in temporary projects, real git repositories, real shells.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.claude.install import exclude_from_git
from pytest_ralph.claude.settings_file import SAFE_PATH_FLAG, hook_command
from tests.support.prd import story
from tests.support.project import Done, Project
from tests.support.venv import linked_venv

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell, symlinked venv")

S1 = "S1"
MACHINE = f"{shlex.quote(sys.executable)} {SAFE_PATH_FLAG} -m pytest_ralph.hook"
OLD = "/old/machine/venv/bin/python -m pytest_ralph.hook"
PORTABLE = f'"$CLAUDE_PROJECT_DIR"/.venv/bin/python {SAFE_PATH_FLAG} -m pytest_ralph.hook'


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          check=False, stdin=subprocess.DEVNULL,
                          env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})


@pytest.fixture
def make_project(tmp_path: Path) -> Callable[..., Project]:
    """make_project(folder="proj", git=False) -> a project (one failing criterion) in
    ``tmp_path/folder``; with ``git``, ``tmp_path`` is a git repository first."""

    def make(folder: str = "proj", *, git: bool = False) -> Project:
        if git:
            assert _git(tmp_path, "init", "-q").returncode == 0
        project = Project(tmp_path / folder, flags=("-p", "no:randomly", "-p",
                                                    "no:cacheprovider"), session=S1)
        project.write_ini("ralph_max_iterations = 3\n")
        project.write_prd(story("US-001", {"text": "done.txt says ok",
                                           "run": "grep -q ok done.txt"}), description="demo")
        return project

    return make


@pytest.fixture
def project(make_project: Callable[..., Project]) -> Project:
    return make_project()


def _init(project: Project, *args: str, python: str | None = None) -> Done:
    return project.pytest("--ralph-init", "--ralph-driver", "claude", *args, python=python)


def _ours(path: Path) -> list[str]:
    """The commands of the Stop handlers in ``path`` that run our hook ([] when missing)."""
    if not path.exists():
        return []
    data = json.loads(path.read_text(encoding="utf-8") or "{}")
    return [h["command"] for g in data.get("hooks", {}).get("Stop", [])
            for h in g.get("hooks", []) if "pytest_ralph.hook" in h.get("command", "")
            or "pytest-ralph-hook" in h.get("command", "")]


def _write(path: Path, data: dict[str, Any] | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2),
                    encoding="utf-8")


def _stop(command: str, **more: Any) -> dict[str, Any]:
    return {**more, "hooks": {"Stop": [{"hooks": [{"type": "command", "command": command,
                                                   "timeout": 600}]}]}}


def _doctor(project: Project, python: str | None = None) -> Done:
    return project.pytest("--ralph-doctor", python=python)


def _venv(project: Project) -> str:
    """A virtual environment inside the project, ``.venv/bin/python``, that has pytest-ralph."""
    python = linked_venv(project.root / ".venv")
    probe = project.run([str(python), "-c", "import sys, pytest_ralph; print(sys.executable)"])
    assert probe.returncode == 0, probe.text
    assert probe.stdout.strip() == str(python)
    return str(python)


# -- 1. the default: local, and git ignores it ---------------------------------------------------


def test_default_install_is_local_and_git_is_told_to_ignore_it(
        make_project: Callable[..., Project], tmp_path: Path) -> None:
    project = make_project("app", git=True)  # the project is a folder of the repository
    done = _init(project)
    assert done.returncode == 0, done.text
    assert _ours(project.settings_file) == [MACHINE]
    assert not project.project_settings.exists()
    exclude = tmp_path / ".git" / "info" / "exclude"
    assert exclude.read_text(encoding="utf-8").splitlines()[-1] == (
        "app/.claude/settings.local.json")
    assert (f"pytest-ralph: added app/.claude/settings.local.json to {exclude}, so that git "
            "ignores this machine's hook settings") in done.stdout
    assert f"added the pytest-ralph Stop hook in {project.settings_file} (local scope" in (
        done.stdout)
    assert _git(tmp_path, "check-ignore", "-q", "app/.claude/settings.local.json").returncode == 0
    status = _git(tmp_path, "status", "--porcelain", "--untracked-files=all").stdout
    assert "settings.local.json" not in status and "app/prd.json" in status
    assert "settings.local.json" not in (project.root / ".gitignore").read_text("utf-8")

    again = _init(project)  # a second init changes nothing and doubles nothing
    assert again.returncode == 0, again.text
    assert _ours(project.settings_file) == [MACHINE]
    assert f"the pytest-ralph Stop hook is already in {project.settings_file}" in again.stdout
    assert "is already armed" in again.stdout
    assert exclude.read_text("utf-8").count("settings.local.json") == 1
    assert "info/exclude" not in again.stdout
    assert not project.project_settings.exists()

    doctor = _doctor(project)
    assert doctor.returncode == 0, doctor.text
    assert (f"ok: pytest-ralph Stop hook in {project.settings_file} at hooks.Stop[0].hooks[0]: "
            f"`{MACHINE}`") in doctor.text
    assert "warning" not in doctor.text


def test_a_local_file_git_already_ignores_is_not_added_again(
        make_project: Callable[..., Project], tmp_path: Path) -> None:
    project = make_project(git=True)
    (tmp_path / ".gitignore").write_text("settings.local.json\n", encoding="utf-8")
    exclude = tmp_path / ".git" / "info" / "exclude"
    before = exclude.read_bytes() if exclude.exists() else b""
    done = _init(project)
    assert done.returncode == 0, done.text
    assert (exclude.read_bytes() if exclude.exists() else b"") == before
    assert "info/exclude" not in done.stdout


def test_outside_a_git_work_tree_nothing_is_said_about_git(project: Project) -> None:
    done = _init(project)
    assert done.returncode == 0, done.text
    assert _ours(project.settings_file) == [MACHINE]
    assert "exclude" not in done.stdout and "warning" not in done.text


def test_exclude_from_git_escapes_the_pattern_and_ends_the_last_line(tmp_path: Path) -> None:
    assert _git(tmp_path, "init", "-q").returncode == 0
    exclude = tmp_path / ".git" / "info" / "exclude"
    exclude.write_text("*.swp", encoding="utf-8")  # no newline at the end
    folder = tmp_path / "a [b]*" / ".claude"
    folder.mkdir(parents=True)
    line = exclude_from_git(tmp_path / "a [b]*", folder / "settings.local.json")
    assert "to " + str(exclude) in line
    assert exclude.read_text("utf-8") == "*.swp\na \\[b]\\*/.claude/settings.local.json\n"
    assert _git(tmp_path, "check-ignore", "-q", "a [b]*/.claude/settings.local.json"
                ).returncode == 0
    assert _git(tmp_path, "check-ignore", "-q", "a b/.claude/settings.local.json"
                ).returncode == 1  # the pattern matches that one path only
    assert exclude_from_git(tmp_path / "a [b]*", folder / "settings.local.json") == ""


@pytest.mark.parametrize(("damage", "says"), [
    ("folder", "`git check-ignore -q -- proj/.claude/settings.local.json` in {top} exited 128: "
               "fatal: cannot use .git/info/exclude as an exclude file, so git may still see "
               ".claude/settings.local.json: add it to .gitignore or .git/info/exclude by hand"),
    ("file", "git still sees {local}: {top}/.git/info/exclude cannot be written (Not a "
             "directory); add the line proj/.claude/settings.local.json to it, or to "
             ".gitignore, by hand"),
])
def test_git_that_cannot_be_told_to_ignore_the_file_is_a_warning(
        make_project: Callable[..., Project], tmp_path: Path, damage: str, says: str) -> None:
    project = make_project(git=True)
    info = tmp_path / ".git" / "info"
    if info.exists():
        shutil.rmtree(info)
    if damage == "folder":  # a folder where the exclude file should be: git refuses it
        (info / "exclude").mkdir(parents=True)
    else:  # a file where the info folder should be: git reads nothing, nothing can be written
        info.write_text("", encoding="utf-8")
    done = _init(project)
    assert done.returncode == 0, done.text
    assert _ours(project.settings_file) == [MACHINE]
    assert ("pytest-ralph: warning: " + says.format(top=tmp_path, local=project.settings_file)
            in done.stdout), done.stdout
    assert "armed run" in done.stdout


# -- 2. the project scope: a command that travels ------------------------------------------------


def test_project_scope_with_a_venv_in_the_project_runs_through_claude_project_dir(
        project: Project, tmp_path: Path) -> None:
    python = _venv(project)
    done = _init(project, "--ralph-hook-scope", "project", python=python)
    assert done.returncode == 0, done.text
    assert _ours(project.project_settings) == [PORTABLE]
    assert not project.settings_file.exists()
    assert "$CLAUDE_PROJECT_DIR" in done.stdout and "(project scope" in done.stdout
    run_id = project.armed()["run"]

    doctor = _doctor(project, python=python)
    assert doctor.returncode == 0, doctor.text
    assert (f"ok: the hook's executable {project.root}/.venv/bin/python exists and is "
            "executable (`$CLAUDE_PROJECT_DIR/.venv/bin/python`, with $CLAUDE_PROJECT_DIR set "
            f"to {project.root} as Claude Code sets it)") in doctor.text
    assert "warning" not in doctor.text

    # Claude Code runs the command through a shell with CLAUDE_PROJECT_DIR set; from another
    # folder, the hook still finds the project's interpreter and drives the run.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    payload = json.dumps({"session_id": S1, "cwd": str(project.root), "hook_event_name": "Stop"})
    proc = subprocess.run(["/bin/sh", "-c", PORTABLE], input=payload, cwd=elsewhere,
                          env={**project.env, "CLAUDE_PROJECT_DIR": str(project.root)},
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["decision"] == "block", proc.stderr
    assert f"Claude Code session {S1} adopted run {run_id}" in proc.stderr


def test_project_scope_with_an_interpreter_outside_uses_the_console_script(
        project: Project) -> None:
    done = _init(project, "--ralph-hook-scope", "project")
    assert done.returncode == 0, done.text
    assert _ours(project.project_settings) == ["pytest-ralph-hook"]
    assert (f"the command is the console script pytest-ralph-hook, because {sys.executable} "
            f"is not inside {project.root}: every teammate needs pytest-ralph installed with "
            "pytest-ralph-hook on the PATH") in done.stdout
    doctor = _doctor(project)
    assert doctor.returncode == 0, doctor.text
    assert "pytest-ralph-hook exists and is executable (found on PATH)" in doctor.text


def test_ini_ralph_hook_scope_chooses_the_scope(project: Project) -> None:
    project.write_ini("ralph_max_iterations = 3\nralph_hook_scope = project\n")
    done = _init(project)
    assert done.returncode == 0, done.text
    assert _ours(project.project_settings) == ["pytest-ralph-hook"]
    assert not project.settings_file.exists()


@pytest.mark.parametrize(("args", "ini", "says"), [
    (("--ralph-init", "--ralph-driver", "claude", "--ralph-hook-scope", "global"), "",
     "argument --ralph-hook-scope: invalid choice: 'global'"),
    (("--ralph-init", "--ralph-driver", "claude"), "ralph_hook_scope = team\n",
     "ralph_hook_scope = team in "),
    (("--ralph-hook-scope", "project"), "",
     "--ralph-hook-scope goes with --ralph-init --ralph-driver claude"),
    (("--ralph-init", "--ralph-hook-scope", "project"), "",
     "--ralph-hook-scope cannot be used with --ralph-init alone"),
    (("--ralph-status", "--ralph-hook-scope", "local"), "",
     "--ralph-hook-scope cannot be used with --ralph-status"),
], ids=["bad-choice", "bad-ini", "without-init", "without-driver", "with-status"])
def test_hook_scope_usage_errors(project: Project, args: tuple[str, ...], ini: str,
                                 says: str) -> None:
    project.write_ini(f"ralph_max_iterations = 3\n{ini}")
    done = project.pytest(*args)
    assert done.returncode == 4, done.text
    assert says in done.text
    assert not project.settings_file.exists() and not project.project_settings.exists()
    assert not project.marker.exists()


# -- 3. an existing install: upgraded, moved, never doubled --------------------------------------


def test_an_old_install_in_settings_json_is_upgraded_to_the_portable_command(
        project: Project) -> None:
    python = _venv(project)
    _write(project.project_settings, _stop(OLD, model="opus"))
    before = _doctor(project, python=python)
    [warning] = [line for line in before.text.splitlines() if line.startswith("warning:")]
    assert f"{project.project_settings} is the project's shared settings file" in warning
    assert f"`{OLD}` names an interpreter path of this machine" in warning
    assert "--ralph-hook-scope project` rewrites it with a portable command" in warning

    done = _init(project, python=python)  # no scope asked for: upgraded where it is
    assert done.returncode == 0, done.text
    assert f"updated the pytest-ralph Stop hook in {project.project_settings}" in done.stdout
    assert _ours(project.project_settings) == [PORTABLE]
    assert json.loads(project.project_settings.read_text("utf-8"))["model"] == "opus"
    assert not project.settings_file.exists()  # not added to the local file

    after = _doctor(project, python=python)
    assert after.returncode == 0, after.text
    assert "warning" not in after.text


@pytest.mark.parametrize("args", [(), ("--ralph-hook-scope", "project")])
def test_a_portable_command_in_settings_json_is_kept_as_the_team_wrote_it(
        project: Project, args: tuple[str, ...]) -> None:
    _write(project.project_settings, _stop(PORTABLE))  # a teammate's, with a venv of theirs
    before = project.project_settings.read_bytes()
    done = _init(project, *args)  # this interpreter is outside the project
    assert done.returncode == 0, done.text
    assert project.project_settings.read_bytes() == before
    assert f"the pytest-ralph Stop hook is already in {project.project_settings}" in done.stdout
    assert "console script" not in done.stdout
    assert not project.settings_file.exists()


def test_the_hook_moves_between_scopes_and_is_never_doubled(project: Project) -> None:
    python = _venv(project)
    assert _init(project, python=python).returncode == 0
    assert _ours(project.settings_file) == [hook_command(python)]

    up = _init(project, "--ralph-hook-scope", "project", python=python)
    assert up.returncode == 0, up.text
    assert _ours(project.project_settings) == [PORTABLE]
    assert _ours(project.settings_file) == []
    assert (f"moved it to the project scope: removed the pytest-ralph Stop hook from "
            f"{project.settings_file}") in up.stdout
    assert "is already armed" in up.stdout  # the armed run is kept, and now driven from there

    same = _init(project, python=python)  # no scope: it stays where it is now
    assert same.returncode == 0, same.text
    assert _ours(project.project_settings) == [PORTABLE] and _ours(project.settings_file) == []

    down = _init(project, "--ralph-hook-scope", "local", python=python)
    assert down.returncode == 0, down.text
    assert _ours(project.settings_file) == [hook_command(python)]
    assert _ours(project.project_settings) == []
    assert (f"moved it to the local scope: removed the pytest-ralph Stop hook from "
            f"{project.project_settings}") in down.stdout
    doctor = _doctor(project, python=python)
    assert doctor.returncode == 0, doctor.text


@pytest.mark.parametrize(("args", "kept"), [((), "project"),
                                             (("--ralph-hook-scope", "local"), "local")])
def test_a_doubled_install_is_reduced_to_one(project: Project, args: tuple[str, ...],
                                             kept: str) -> None:
    _write(project.project_settings, _stop(MACHINE))
    _write(project.settings_file, _stop(MACHINE, model="haiku"))
    doctor = _doctor(project)
    assert doctor.returncode == 1, doctor.text
    [problem] = [line for line in doctor.text.splitlines() if line.startswith("problem:")]
    assert ("2 pytest-ralph Stop hooks are configured (settings.json hooks.Stop[0].hooks[0], "
            "settings.local.json hooks.Stop[0].hooks[0])") in problem
    assert "`pytest --ralph-init --ralph-driver claude` now removes the extra copy" in problem

    done = _init(project, *args)
    assert done.returncode == 0, done.text
    keep, drop = ((project.project_settings, project.settings_file) if kept == "project"
                  else (project.settings_file, project.project_settings))
    assert len(_ours(keep)) == 1 and _ours(drop) == []
    assert ("the hook was in both settings files, and Claude Code runs both copies on every "
            f"stop: removed the pytest-ralph Stop hook from {drop}") in done.stdout
    assert json.loads(project.settings_file.read_text("utf-8"))["model"] == "haiku"
    after = _doctor(project)
    assert after.returncode == 0, after.text
    assert "problem" not in after.text


def test_a_command_of_your_own_is_never_rewritten_or_moved(project: Project) -> None:
    mine = f"env PYTEST_RALPH_DEBUG=1 {MACHINE}"
    _write(project.project_settings, _stop(mine))
    before = project.project_settings.read_bytes()
    done = _init(project, "--ralph-hook-scope", "local")
    assert done.returncode == 0, done.text
    assert project.project_settings.read_bytes() == before
    assert not project.settings_file.exists()
    assert (f"a Stop hook of yours that runs pytest-ralph's hook ({mine!r}) is in "
            f"{project.project_settings}; it is kept as it is") in done.stdout
    assert (f"it is not moved to {project.settings_file} (--ralph-hook-scope local): it is "
            "your own command; move it by hand") in done.stdout
    assert "armed run" in done.stdout


def test_a_plain_copy_next_to_a_command_of_your_own_is_removed(project: Project) -> None:
    mine = f"nice -n 5 {MACHINE}"
    _write(project.settings_file, _stop(mine))
    _write(project.project_settings, _stop(OLD))
    done = _init(project)
    assert done.returncode == 0, done.text
    assert _ours(project.settings_file) == [mine]
    assert _ours(project.project_settings) == []
    assert "it is kept as it is" in done.stdout
    assert f"removed the pytest-ralph Stop hook from {project.project_settings}" in done.stdout


@pytest.mark.parametrize("args", [(), ("--ralph-hook-scope", "project"),
                                  ("--ralph-hook-scope", "local")])
def test_bad_json_in_settings_local_json_exits_4_and_writes_neither_file(
        project: Project, args: tuple[str, ...]) -> None:
    _write(project.project_settings, _stop(OLD))
    _write(project.settings_file, '{"hooks": {"Stop": [}\n')
    before = (project.project_settings.read_bytes(), project.settings_file.read_bytes())
    done = _init(project, *args)
    assert done.returncode == 4, done.text
    assert (f"pytest-ralph: {project.settings_file}: is not valid JSON (Expecting value at "
            "line 1 column 21)") in done.text
    assert "The file was not changed." in done.text
    assert "Traceback" not in done.text
    assert (project.project_settings.read_bytes(), project.settings_file.read_bytes()) == before
    assert not project.marker.exists()

    doctor = _doctor(project)
    assert doctor.returncode == 1, doctor.text
    assert (f"problem: {project.settings_file}: is not valid JSON (Expecting value at line 1 "
            "column 21)") in doctor.text


def test_bad_json_in_settings_json_exits_4_and_writes_neither_file(project: Project) -> None:
    _write(project.project_settings, '{"hooks": 1}')
    before = project.project_settings.read_bytes()
    done = _init(project)
    assert done.returncode == 4, done.text
    assert f"{project.project_settings}: hooks: expected an object" in done.text
    assert project.project_settings.read_bytes() == before
    assert not project.settings_file.exists()


def test_doctor_finds_the_hook_in_settings_local_json_alone(project: Project) -> None:
    _write(project.settings_file, _stop(MACHINE))
    doctor = _doctor(project)
    assert doctor.returncode == 0, doctor.text
    assert f"ok: pytest-ralph Stop hook in {project.settings_file}" in doctor.text
    assert "settings.json does not exist" not in doctor.text


# -- what a red-team run found: shell characters, a tracked local file, a missing venv ----------


def test_a_venv_folder_with_shell_characters_stays_ours_across_inits(
        project: Project) -> None:
    python = str(linked_venv(project.root / "v$x;y"))
    done = _init(project, "--ralph-hook-scope", "project", python=python)
    assert done.returncode == 0, done.text
    expected = (f"\"$CLAUDE_PROJECT_DIR\"/'v$x;y/bin/python' {SAFE_PATH_FLAG} -m "
                "pytest_ralph.hook")
    assert _ours(project.project_settings) == [expected]

    again = _init(project, python=python)  # still recognised as ours: kept, not "yours"
    assert again.returncode == 0, again.text
    assert "of yours" not in again.text
    assert f"the pytest-ralph Stop hook is already in {project.project_settings}" in again.stdout

    doctor = _doctor(project, python=python)
    assert doctor.returncode == 0, doctor.text
    assert f"ok: the hook's executable {project.root}/v$x;y/bin/python exists" in doctor.text

    moved = _init(project, "--ralph-hook-scope", "local", python=python)
    assert moved.returncode == 0, moved.text
    assert _ours(project.project_settings) == []
    assert len(_ours(project.settings_file)) == 1


def test_a_settings_local_json_git_tracks_is_a_warning_not_an_ignore_line(
        make_project: Callable[..., Project], tmp_path: Path) -> None:
    project = make_project("app", git=True)
    _write(project.settings_file, {"permissions": {"allow": ["Read"]}})
    assert _git(tmp_path, "add", "app/.claude/settings.local.json").returncode == 0
    done = _init(project)
    assert done.returncode == 0, done.text
    assert ("pytest-ralph: warning: app/.claude/settings.local.json is tracked by git (it was "
            "committed), so no ignore rule hides it") in done.stdout
    assert "git rm --cached app/.claude/settings.local.json" in done.stdout
    assert "so that git ignores" not in done.stdout
    exclude = tmp_path / ".git" / "info" / "exclude"
    assert "settings.local.json" not in exclude.read_text("utf-8")


def test_a_teammates_portable_command_this_clone_cannot_run_is_said(project: Project) -> None:
    _write(project.project_settings, _stop(PORTABLE))  # no .venv in this clone
    done = _init(project)
    assert done.returncode == 0, done.text
    assert (f"pytest-ralph: warning: the Stop hook in {project.project_settings} runs "
            f"{project.root}/.venv/bin/python, which this clone does not have") in done.stdout
    doctor = _doctor(project)
    assert doctor.returncode != 0, doctor.text
    assert "create the project's virtual environment at that path in this clone" in doctor.text
    assert "it rewrites the command" not in doctor.text

    _venv(project)  # once the venv is there, nothing more is said
    fine = _init(project)
    assert fine.returncode == 0, fine.text
    assert "warning" not in fine.stdout
