"""`pytest --ralph-doctor` in real projects, and the Claude Code plugin template."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

import pytest_ralph
from pytest_ralph.commands.doctor import PLUGIN_HOOK_COMMAND, doctor, find_executable
from tests.support.env import PY, clean_env

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "templates" / "claude-plugin"
HOOK = f"{PY} -m pytest_ralph.hook"

posix_only = pytest.mark.skipif(os.name == "nt", reason="runs hook commands through /bin/sh")


def _env(**extra: str) -> dict[str, str]:
    """This environment without what would change how the child pytest or the hook behaves."""
    return clean_env(drop=(), names=("PYTEST_ADDOPTS", "PYTEST_RALPH_CONTROLLER",
                                     "CLAUDE_PROJECT_DIR"), bytecode=True, **extra)


def _pytest(project: Path, *args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:randomly"],
                          cwd=project, env=env or _env(), capture_output=True, text=True,
                          timeout=120, check=False)


def _doctor(project: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Exit code and output (stdout and stderr) of `pytest --ralph-doctor` in ``project``."""
    proc = _pytest(project, "--ralph-doctor", env=env)
    return proc.returncode, proc.stdout + proc.stderr


def _check(project: Path) -> tuple[int, str]:
    """The doctor called in this process (faster than a pytest child; same checks)."""
    return doctor(project)


def _lines(out: str, kind: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(f"{kind}: ")]


def _settings(project: Path, data: Any, name: str = "settings.json") -> Path:
    path = project / ".claude" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2),
                    encoding="utf-8")
    return path


def _stop(*commands: str) -> dict[str, Any]:
    return {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": c, "timeout": 600}]}
                               for c in commands]}}


def _script(project: Path, name: str, body: str) -> str:
    """A Python script in the project; returns the command line that runs it."""
    path = project / name
    path.write_text(body, encoding="utf-8")
    return f"{PY} {shlex.quote(str(path))}"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty project: a folder with a pytest.ini (so that it is the rootdir)."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    return root


@pytest.fixture
def armed(project: Path) -> Path:
    """A project with a PRD whose criterion fails, after `pytest --ralph-init --ralph-driver
    claude` (arming checks the baseline: a PRD whose criteria all pass arms nothing)."""
    prd = {"project": "Demo", "branchName": "ralph/demo", "description": "demo",
           "userStories": [{"id": "US-1", "title": "one", "description": "d",
                            "acceptanceCriteria": [{"text": "x", "run": "false"}],
                            "priority": 1, "passes": False, "notes": ""}]}
    (project / "prd.json").write_text(json.dumps(prd), encoding="utf-8")
    proc = _pytest(project, "--ralph-init", "--ralph-driver", "claude")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (project / ".claude" / "pytest-ralph.local.json").is_file(), proc.stdout
    return project


# -- the doctor on real projects ---------------------------------------------------------------


def test_no_settings_is_a_problem(project: Path) -> None:
    code, out = _doctor(project)
    assert code == 1, out
    assert out.splitlines()[0] == f"pytest-ralph doctor: {project}"
    [problem] = [p for p in _lines(out, "problem") if "settings.json" in p]
    assert f"{project / '.claude' / 'settings.json'} does not exist" in problem
    assert "pytest --ralph-init --ralph-driver claude" in problem
    assert "ok: no run is armed" in out
    assert "1 problem found" in out


@posix_only
def test_settings_without_our_hook_lists_other_handlers_and_never_runs_them(
        project: Path) -> None:
    marker = project / "foreign-ran"
    foreign = f"touch {shlex.quote(str(marker))}"
    _settings(project, {"model": "opus", **_stop(foreign),
                        "permissions": {"allow": ["Bash(pytest:*)"]}})
    code, out = _doctor(project)
    assert code == 1, out
    assert f"ok: {project / '.claude' / 'settings.json'} is valid JSON" in out
    [problem] = _lines(out, "problem")
    assert "no Stop hook in" in problem and "runs pytest-ralph" in problem
    assert f"`{foreign}` (settings.json hooks.Stop[0].hooks[0])" in problem
    assert "not run" in problem and "--ralph-init --ralph-driver claude" in problem
    assert not marker.exists()


@posix_only
def test_after_init_everything_is_ok_and_the_armed_run_is_not_adopted(armed: Path) -> None:
    code, out = _doctor(armed)
    assert code == 0, out
    assert not _lines(out, "problem"), out
    # (a loaded machine may make the hook slow enough for the "took ... s" warning)
    assert not [w for w in _lines(out, "warning") if "the hook took" not in w], out
    ok = _lines(out, "ok")
    assert len(ok) == 5, out
    assert "pytest-ralph Stop hook in" in ok[1] and "hooks.Stop[0].hooks[0]" in ok[1]
    assert "(timeout 600 s)" in ok[1]
    assert f"the hook's executable {sys.executable}" in ok[2]
    assert re.search(r"answered a sample Stop payload \(without a session id, so that it "
                     r"cannot adopt the armed run\) in \d+\.\d\d s: exit 0, no output",
                     ok[3]), ok[3]
    assert re.search(r"run \S+ of .*prd\.json is armed, waiting for the first Stop", ok[4])
    assert out.rstrip().endswith("pytest-ralph: all 5 checks ok")
    marker = json.loads((armed / ".claude" / "pytest-ralph.local.json").read_text())
    assert marker["session"] == ""  # the doctor's payload adopted nothing
    status = _pytest(armed, "--ralph-status")
    assert "armed for the Claude Code Stop hook" in status.stdout, status.stdout


@posix_only
def test_a_run_adopted_by_a_session_gets_a_payload_from_another_session(armed: Path) -> None:
    path = armed / ".claude" / "pytest-ralph.local.json"
    marker = json.loads(path.read_text())
    path.write_text(json.dumps({**marker, "session": "session-A"}), encoding="utf-8")
    code, out = _doctor(armed)
    assert code == 0, out
    assert "(with a session id of its own)" in out
    assert "adopted by Claude Code session session-A" in out
    assert json.loads(path.read_text())["session"] == "session-A"


@posix_only
def test_after_init_with_every_criterion_passing_the_hook_is_in_and_no_run_is_armed(
        project: Path) -> None:
    prd = {"project": "Demo", "description": "demo",
           "userStories": [{"id": "US-1", "title": "one", "description": "d",
                            "acceptanceCriteria": [{"text": "x", "run": "true"}],
                            "priority": 1, "passes": False, "notes": ""}]}
    (project / "prd.json").write_text(json.dumps(prd), encoding="utf-8")
    proc = _pytest(project, "--ralph-init", "--ralph-driver", "claude")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "nothing armed" in proc.stdout, proc.stdout
    code, out = _doctor(project)
    assert code == 0, out
    assert not _lines(out, "problem"), out
    assert "pytest-ralph Stop hook in" in out
    assert "(with a session id of its own)" in out
    assert "ok: no run is armed" in out


@posix_only
def test_interpreter_that_does_not_exist(project: Path) -> None:
    missing = project / "gone env" / "bin" / "python"
    _settings(project, _stop(f"{shlex.quote(str(missing))} -m pytest_ralph.hook"))
    code, out = _doctor(project)
    assert code == 1, out
    [problem] = _lines(out, "problem")
    assert f"the hook's executable {missing} does not exist" in problem
    assert _lines(out, "skipped") == [
        f"skipped: running `{shlex.quote(str(missing))} -m pytest_ralph.hook` (its executable "
        "cannot run)"]


@posix_only
def test_hook_that_prints_garbage(project: Path) -> None:
    cmd = _script(project, "noisy.py", "print('hello from the hook')\n") + " -m pytest_ralph.hook"
    _settings(project, _stop(cmd))
    code, out = _doctor(project)
    assert code == 1, out
    [problem] = _lines(out, "problem")
    assert f"`{cmd}` exited 0 on a sample Stop payload but printed something that is not one " \
           "JSON object (not JSON" in problem
    assert "'hello from the hook'" in problem


@posix_only
def test_hook_that_prints_a_json_list_is_not_an_answer(project: Path) -> None:
    cmd = _script(project, "list.py", "print('[1, 2]')\n") + " -m pytest_ralph.hook"
    _settings(project, _stop(cmd))
    code, out = _check(project)
    assert code == 1, out
    assert "(JSON list, not an object)" in _lines(out, "problem")[0]


@posix_only
def test_hook_that_exits_non_zero_shows_its_stderr(project: Path) -> None:
    cmd = _script(project, "broken.py",
                  "import sys\nsys.stdin.read()\nprint('line 1', file=sys.stderr)\n"
                  "print('ModuleNotFoundError: boom', file=sys.stderr)\nsys.exit(3)\n")
    _settings(project, _stop(cmd + " -m pytest_ralph.hook"))
    code, out = _doctor(project)
    assert code == 1, out
    [problem] = _lines(out, "problem")
    assert "exited with status 3 on a sample Stop payload" in problem
    assert "its stderr ends with:" in problem
    assert "    ModuleNotFoundError: boom" in out


@posix_only
def test_hook_that_exits_2_would_block_every_stop(project: Path) -> None:
    cmd = _script(project, "two.py", "import sys\nsys.exit(2)\n") + " -m pytest_ralph.hook"
    _settings(project, _stop(cmd))
    code, out = _check(project)
    assert code == 1, out
    assert "exit 2 makes Claude Code block every stop" in out


@posix_only
def test_hook_that_answers_one_json_object_is_fine(project: Path) -> None:
    body = ("import json, sys\npayload = json.load(sys.stdin)\n"
            "assert payload['hook_event_name'] == 'Stop', payload\n"
            "assert payload['cwd'] == sys.argv[1], payload\n"
            "assert payload['session_id'].startswith('pytest-ralph-doctor-'), payload\n"
            "import os\nassert os.environ['CLAUDE_PROJECT_DIR'] == os.getcwd()\n"
            "print(json.dumps({'systemMessage': 'hi'}))\n")
    cmd = (_script(project, "answer.py", body) + f" {shlex.quote(str(project))}"
           " -m pytest_ralph.hook")
    _settings(project, _stop(cmd))
    code, out = _check(project)
    assert code == 0, out
    assert "(with a session id of its own)" in out
    assert "exit 0, one JSON object (systemMessage)" in out


@posix_only
def test_a_foreign_command_is_not_ours_even_when_it_prints_garbage(project: Path) -> None:
    ran = project / "ran"
    cmd = _script(project, "other.py",
                  f"open({str(ran)!r}, 'w').close()\nprint('garbage')\n")
    _settings(project, _stop(cmd))
    code, out = _check(project)
    assert code == 1, out
    [problem] = _lines(out, "problem")
    assert "no Stop hook in" in problem and f"`{cmd}`" in problem
    assert not ran.exists()


def test_settings_that_are_not_json(project: Path) -> None:
    path = _settings(project, '{\n  "hooks": {\n    "Stop": [,]\n  }\n}\n')
    code, out = _doctor(project)
    assert code == 1, out
    [problem] = _lines(out, "problem")
    assert problem.startswith(f"problem: {path}: is not valid JSON (")
    assert "at line 3 column 14" in problem
    assert "The file was not changed" not in problem
    assert "no Stop hook" not in out  # one problem for one broken file


def test_settings_with_a_wrong_shape_name_the_json_path(project: Path) -> None:
    _settings(project, {"hooks": {"Stop": {"hooks": []}}})
    code, out = _check(project)
    assert code == 1, out
    assert "hooks.Stop: expected a list of hook groups, found an object" in out


@posix_only
def test_two_of_our_hooks_are_a_problem(project: Path) -> None:
    _settings(project, _stop(HOOK))
    _settings(project, _stop(HOOK), name="settings.local.json")
    code, out = _check(project)
    assert code == 1, out
    [problem] = _lines(out, "problem")
    assert ("2 pytest-ralph Stop hooks are configured (settings.json hooks.Stop[0].hooks[0], "
            "settings.local.json hooks.Stop[0].hooks[0])") in problem
    assert out.count("answered a sample Stop payload") == 1  # the same command runs once


@posix_only
def test_disable_all_hooks_is_a_problem(project: Path) -> None:
    _settings(project, {**_stop(HOOK), "disableAllHooks": True})
    code, out = _check(project)
    assert code == 1, out
    assert "sets disableAllHooks to true: Claude Code runs no hook at all" in out


@posix_only
def test_console_script_and_the_plugin_hook(project: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`pytest-ralph-hook` counts as ours and is looked up on PATH; a project that enables the
    plugin without a settings hook has the plugin's command checked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "pytest-ralph-hook"
    script.write_text(f"#!/bin/sh\nexec {PY} -m pytest_ralph.hook \"$@\"\n", encoding="utf-8")
    script.chmod(0o755)
    path = os.environ.get("PATH", "")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{path}")
    _settings(project, {"enabledPlugins": {"pytest-ralph@local": True}})
    code, out = _check(project)
    assert code == 0, out
    assert "enables the pytest-ralph Claude Code plugin, whose Stop hook runs " \
           f"`{PLUGIN_HOOK_COMMAND}`" in out
    assert f"ok: the hook's executable {script} exists and is executable" in out
    assert "answered a sample Stop payload" in out
    # Without the script on PATH (an activated virtualenv would put one there), the plugin's
    # hook cannot run.
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    code, out = _check(project)
    assert code == 1, out
    assert "the hook's executable `pytest-ralph-hook` is not on PATH" in out
    monkeypatch.setenv("PATH", path)
    # The plugin and a settings hook: both run on every stop.
    _settings(project, {"enabledPlugins": {"pytest-ralph@local": True}, **_stop(HOOK)})
    code, out = _check(project)
    assert code == 0, out
    [warning] = [w for w in _lines(out, "warning") if "plugin" in w]
    assert "also enables the pytest-ralph Claude Code plugin" in warning
    # HOOK names this machine's interpreter, in the shared settings.json: a warning too.
    assert any("names an interpreter path of this machine" in w for w in _lines(out, "warning"))


def test_stale_arming_file(project: Path) -> None:
    _settings(project, _stop(HOOK))
    marker = project / ".claude" / "pytest-ralph.local.json"
    marker.write_text(json.dumps({"version": 1, "run": "r1", "state_dir": str(project / "gone"),
                                  "rootdir": str(project), "session": ""}), encoding="utf-8")
    code, out = _check(project)
    assert code == 1, out
    assert f"{marker} names run r1 of the history {project / 'gone' / 'ralph.db'}, which does " \
           "not exist" in out
    marker.write_text("{not json", encoding="utf-8")
    code, out = _check(project)
    assert code == 1, out
    assert f"the arming file {marker} is not UTF-8 JSON" in out


@posix_only
def test_a_hook_that_hangs_is_killed_after_the_timeout(project: Path) -> None:
    cmd = _script(project, "hang.py", "import time\ntime.sleep(60)\n") + " -m pytest_ralph.hook"
    _settings(project, _stop(f"{cmd} & {cmd}; wait"))  # a child of the shell hangs too
    start = time.monotonic()
    code, out = doctor(project, timeout=1)
    assert time.monotonic() - start < 15
    assert code == 1, out
    assert "did not answer a sample Stop payload within 1 s and was killed" in out


def test_find_executable_parses_quotes_variables_and_prefixes(tmp_path: Path) -> None:
    exe = tmp_path / "my env" / "python"
    exe.parent.mkdir()
    exe.write_text("", encoding="utf-8")
    exe.chmod(0o755)
    env = {"PATH": "", "CLAUDE_PROJECT_DIR": str(tmp_path)}
    found = find_executable(f"FOO=1 exec {shlex.quote(str(exe))} -m pytest_ralph.hook",
                            cwd=tmp_path, env=env, windows=False)
    assert (found.path, found.problem) == (exe, "")
    found = find_executable('"$CLAUDE_PROJECT_DIR/my env/python" -m x', cwd=tmp_path, env=env,
                            windows=False)
    assert found.path == exe
    found = find_executable("${CLAUDE_PLUGIN_ROOT}/hook", cwd=tmp_path, env=env, windows=False)
    assert found.path is None and "$CLAUDE_PLUGIN_ROOT, which is not set" in found.problem
    found = find_executable('"C:\\Program Files\\Py\\python.exe" -m pytest_ralph.hook',
                            cwd=tmp_path, env=env, windows=True)
    assert found.word == "C:\\Program Files\\Py\\python.exe"
    with pytest.raises(ValueError):
        find_executable("'unclosed -m pytest_ralph.hook", cwd=tmp_path, env=env, windows=False)
    with pytest.raises(ValueError, match="no program"):
        find_executable("FOO=1", cwd=tmp_path, env=env, windows=False)


def test_the_doctor_does_not_import_pytest() -> None:
    code = ("import sys; import pytest_ralph.commands.doctor as d; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('pytest', '_pytest')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- the Claude Code plugin template -----------------------------------------------------------

COMMANDS = {
    "ralph-init": ["pytest --ralph-init --ralph-driver claude"],
    "ralph-run": ["pytest --ralph-status", "pytest --ralph-init --ralph-driver claude",
                  "pytest prd.json"],
    "ralph-status": ["pytest --ralph-status"],
    "ralph-cancel": ["pytest --ralph-cancel"],
}


def _pyproject() -> dict[str, Any]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    data: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    return data


def _frontmatter(path: Path) -> tuple[dict[str, Any], str]:
    text = path.read_text(encoding="utf-8")
    match = re.match(r"---\n(.*?)\n---\n(.*)", text, re.DOTALL)
    assert match, f"{path} has no frontmatter"
    meta = yaml.safe_load(match.group(1))
    assert isinstance(meta, dict), path
    return meta, match.group(2)


def test_plugin_json_files_parse() -> None:
    found = sorted(p.relative_to(PLUGIN).as_posix() for p in PLUGIN.rglob("*.json"))
    assert found == [".claude-plugin/plugin.json", "hooks/hooks.json"]
    for name in found:
        json.loads((PLUGIN / name).read_text(encoding="utf-8"))


def test_plugin_manifest() -> None:
    manifest = json.loads((PLUGIN / ".claude-plugin" / "plugin.json").read_text("utf-8"))
    pyproject = _pyproject()
    assert manifest["name"] == "pytest-ralph"
    assert manifest["version"] == "0.1.0" == pytest_ralph.__version__
    assert manifest["version"] == pyproject["project"]["version"]
    assert isinstance(manifest["description"], str) and manifest["description"]
    # hooks/hooks.json and commands/ are default locations: naming them again loads them twice.
    assert not {"hooks", "commands"} & set(manifest)


def test_hooks_json_runs_our_hook_on_stop() -> None:
    hooks = json.loads((PLUGIN / "hooks" / "hooks.json").read_text("utf-8"))
    assert set(hooks) == {"description", "hooks"}
    assert set(hooks["hooks"]) == {"Stop"}
    [group] = hooks["hooks"]["Stop"]
    [handler] = group["hooks"]
    assert handler == {"type": "command", "command": PLUGIN_HOOK_COMMAND, "timeout": 600}
    scripts = _pyproject()["project"]["scripts"]
    assert scripts[shlex.split(handler["command"])[0]] == "pytest_ralph.hook:main"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_slash_commands_have_frontmatter_and_call_pytest(name: str) -> None:
    meta, body = _frontmatter(PLUGIN / "commands" / f"{name}.md")
    assert isinstance(meta["description"], str) and meta["description"].strip()
    tools = meta["allowed-tools"]
    rules = [t.strip() for t in tools.split(",")] if isinstance(tools, str) else tools
    assert rules and all(re.fullmatch(r"Bash\([^()]+:\*\)", r) for r in rules), rules
    for command in COMMANDS[name]:
        assert command in body, (name, command)
    assert "pytest --ralph " not in body and "--ralph-dry-run" not in body
    flag = {"ralph-init": "--ralph-init", "ralph-status": "--ralph-status",
            "ralph-cancel": "--ralph-cancel", "ralph-run": ""}[name]
    assert all(r.startswith(("Bash(pytest ", "Bash(python -m pytest ", "Bash(python3 -m pytest "))
               or r in ("Bash(pytest:*)", "Bash(python -m pytest:*)", "Bash(python3 -m pytest:*)")
               for r in rules), rules
    assert all(flag in r for r in rules), rules


def test_plugin_readme_explains_install_and_the_hook_command() -> None:
    text = (PLUGIN / "README.md").read_text("utf-8")
    for needle in ("claude --plugin-dir templates/claude-plugin", "pytest-ralph-hook",
                   "python3 -m pytest_ralph.hook", "https://code.claude.com/docs/en/hooks",
                   "https://code.claude.com/docs/en/plugins-reference", "--ralph-doctor",
                   *(f"commands/{name}.md" for name in COMMANDS)):
        assert needle in text, needle


@posix_only
def test_hooks_json_command_answers_a_sample_payload_with_nothing(tmp_path: Path) -> None:
    hooks = json.loads((PLUGIN / "hooks" / "hooks.json").read_text("utf-8"))
    command = hooks["hooks"]["Stop"][0]["hooks"][0]["command"]
    script = Path(sys.executable).parent / PLUGIN_HOOK_COMMAND
    runnable = shlex.quote(str(script)) if script.is_file() else HOOK
    command = command.replace(PLUGIN_HOOK_COMMAND, runnable, 1)
    payload = {"session_id": str(uuid.uuid4()), "transcript_path": str(tmp_path / "t.jsonl"),
               "cwd": str(tmp_path), "hook_event_name": "Stop", "stop_hook_active": False}
    proc = subprocess.run(["/bin/sh", "-c", command], input=json.dumps(payload).encode(),
                          cwd=tmp_path, env=_env(), capture_output=True, timeout=60,
                          check=False)
    assert (proc.returncode, proc.stdout) == (0, b""), proc.stderr
