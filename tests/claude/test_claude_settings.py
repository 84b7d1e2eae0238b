"""Unit tests of pytest_ralph.claude.settings_file: arming the Claude Code Stop hook in
settings.json."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.claude.settings_file import (
    SAFE_PATH_FLAG,
    MergeResult,
    SettingsFileError,
    hook_command,
    is_machine_command,
    is_plain_hook_command,
    is_ralph_hook_command,
    merge_stop_hook,
    project_hook_command,
    remove_stop_hook,
)
from tests.support.privileges import unprivileged
from tests.support.venv import linked_venv

CMD = hook_command("/usr/bin/python3", windows=False)
OURS = {"type": "command", "command": CMD, "timeout": 600}
OTHER_STOP = {"type": "command", "command": "other-plugin stop --quiet", "timeout": 5}
EXISTING: dict[str, Any] = {
    "$schema": "https://json.schemastore.org/claude-code-settings.json",
    "permissions": {"allow": ["Bash(pytest:*)"], "deny": ["Read(./.env)"]},
    "env": {"FOO": "bär", "N": "1"},
    "model": "opus",
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh"}]}],
        "Stop": [{"hooks": [OTHER_STOP]}],
    },
    "cleanupPeriodDays": 30,
    "ratio": 0.25,
}


@pytest.fixture
def settings(tmp_path: Path) -> Path:
    """Where .claude/settings.json goes in a fresh project (folder not created)."""
    return tmp_path / ".claude" / "settings.json"


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _ours(path: Path) -> list[dict[str, Any]]:
    return [h for g in _load(path)["hooks"]["Stop"] for h in g["hooks"]
            if is_ralph_hook_command(h.get("command"))]


# --- hook_command -------------------------------------------------------------------------------


def test_posix_command_quotes_a_path_with_spaces() -> None:
    cmd = hook_command("/opt/my python/bin/python3", windows=False)
    assert cmd == f"'/opt/my python/bin/python3' {SAFE_PATH_FLAG} -m pytest_ralph.hook"
    assert shlex.split(cmd) == ["/opt/my python/bin/python3", SAFE_PATH_FLAG, "-m",
                                "pytest_ralph.hook"]
    plain = hook_command("/usr/bin/python3", windows=False)
    assert plain == f"/usr/bin/python3 {SAFE_PATH_FLAG} -m pytest_ralph.hook"
    assert ("-P" if sys.version_info >= (3, 11) else "-I") == SAFE_PATH_FLAG


def test_windows_command_double_quotes_the_path() -> None:
    cmd = hook_command(r"C:\Users\some one\py\python.exe", windows=True)
    assert cmd == rf'"C:\Users\some one\py\python.exe" {SAFE_PATH_FLAG} -m pytest_ralph.hook'
    assert is_ralph_hook_command(cmd)


@pytest.mark.parametrize("bad", ['C:\\a"b\\python.exe', "C:\\$x\\python.exe", "C:\\%P%\\py.exe"])
def test_windows_command_refuses_unquotable_paths(bad: str) -> None:
    with pytest.raises(ValueError, match="Windows shell"):
        hook_command(bad, windows=True)


# --- project_hook_command: a command with no path of this machine ------------------------------


def test_project_command_runs_a_venv_inside_the_project_from_claude_project_dir(
        tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "my env" / "bin").mkdir(parents=True)
    cmd = project_hook_command(str(root / ".venv" / "bin" / "python"), root, windows=False)
    assert cmd == f'"$CLAUDE_PROJECT_DIR"/.venv/bin/python {SAFE_PATH_FLAG} -m pytest_ralph.hook'
    spaced = project_hook_command(str(root / "my env" / "bin" / "python"), root, windows=False)
    assert spaced == (f'"$CLAUDE_PROJECT_DIR"/\'my env/bin/python\' {SAFE_PATH_FLAG} -m '
                      "pytest_ralph.hook")
    for command in (cmd, spaced):
        assert is_ralph_hook_command(command) and is_plain_hook_command(command)
        assert not is_machine_command(command)


@pytest.mark.skipif(os.name == "nt", reason="symlinks")
def test_project_command_compares_folders_resolved_but_keeps_the_interpreter_link(
        tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / ".venv" / "bin").mkdir(parents=True)
    (real / ".venv" / "bin" / "python").symlink_to(sys.executable)  # a venv's link, kept
    alias = tmp_path / "alias"
    alias.symlink_to(real, target_is_directory=True)
    cmd = project_hook_command(str(alias / ".venv" / "bin" / "python"), real, windows=False)
    assert cmd == f'"$CLAUDE_PROJECT_DIR"/.venv/bin/python {SAFE_PATH_FLAG} -m pytest_ralph.hook'


def test_project_command_outside_the_project_is_the_console_script(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    assert project_hook_command("/usr/bin/python3", root, windows=False) == "pytest-ralph-hook"
    assert project_hook_command(str(tmp_path / "projx" / "python"), root,
                                windows=False) == "pytest-ralph-hook"
    assert project_hook_command("", root, windows=False) == "pytest-ralph-hook"


def test_project_command_on_windows_double_quotes_the_word(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    cmd = project_hook_command(str(root / ".venv" / "Scripts" / "python.exe"), root,
                               windows=True)
    assert cmd == (f'"$CLAUDE_PROJECT_DIR/.venv/Scripts/python.exe" {SAFE_PATH_FLAG} -m '
                   "pytest_ralph.hook")
    assert is_plain_hook_command(cmd) and not is_machine_command(cmd)
    assert project_hook_command(str(root / "a%b" / "python.exe"), root,
                                windows=True) == "pytest-ralph-hook"


@pytest.mark.skipif(os.name == "nt", reason="POSIX shell")
def test_project_command_starts_the_interpreter_through_sh(tmp_path: Path) -> None:
    root = tmp_path / "my proj"
    python = linked_venv(root / "v env")
    cmd = project_hook_command(str(python), root, windows=False)
    probe = cmd.replace("-m pytest_ralph.hook", "-c 'import pytest_ralph.hook, sys; "
                                                "print(sys.executable)'")
    proc = subprocess.run(["/bin/sh", "-c", probe], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**os.environ, "CLAUDE_PROJECT_DIR": str(root)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(python)


@pytest.mark.parametrize(("command", "machine"), [
    (CMD, True), ("'/my venv/bin/python' -m pytest_ralph.hook", True),
    (r'"C:\py\python.exe" -P -m pytest_ralph.hook', True),
    ('"$CLAUDE_PROJECT_DIR"/.venv/bin/python -P -m pytest_ralph.hook', False),
    ("pytest-ralph-hook", False), ("python -m pytest_ralph.hook", False),
    ("env X=1 /usr/bin/python3 -m pytest_ralph.hook", False),  # the user's own: not ours to say
    ('"$CLAUDE_PROJECT_DIR"/x;rm -m pytest_ralph.hook', False), (None, False),
])
def test_is_machine_command(command: object, machine: bool) -> None:
    assert is_machine_command(command) is machine


def test_empty_interpreter_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        hook_command("", windows=False)


@pytest.mark.skipif(os.name == "nt", reason="POSIX shell")
def test_posix_command_really_starts_the_interpreter_through_sh(tmp_path: Path) -> None:
    folder = tmp_path / "my python" / "bin"
    folder.mkdir(parents=True)
    link = folder / "python3"
    link.symlink_to(sys.executable)
    cmd = hook_command(str(link), windows=False)
    assert shlex.split(cmd)[0] == str(link)
    # Same command with the module swapped for a probe: sh must start that very interpreter.
    probe = cmd.replace(f"{SAFE_PATH_FLAG} -m pytest_ralph.hook",
                        "-c 'import sys; print(sys.argv[0])'")
    assert probe != cmd
    out = subprocess.run(["sh", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "-c"
    version = cmd.replace(f"{SAFE_PATH_FLAG} -m pytest_ralph.hook",
                          "-c 'import sys; print(sys.version)'")
    out = subprocess.run(["sh", "-c", version], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == sys.version


# --- merge_stop_hook ----------------------------------------------------------------------------


def test_no_file_creates_folder_and_file(settings: Path) -> None:
    result = merge_stop_hook(settings, CMD)
    assert result == MergeResult(True, settings, result.message)
    assert "added" in result.message
    assert _load(settings) == {"hooks": {"Stop": [{"hooks": [OURS]}]}}
    text = settings.read_text(encoding="utf-8")
    assert text.endswith("}\n") and '\n  "hooks": {' in text  # 2-space indent, newline at end
    assert [p.name for p in settings.parent.iterdir()] == ["settings.json"]  # no temp left


@pytest.mark.parametrize("content", ["", "  \n"])
def test_empty_file_counts_as_empty_object(settings: Path, content: str) -> None:
    settings.parent.mkdir()
    settings.write_text(content, encoding="utf-8")
    assert merge_stop_hook(settings, CMD, timeout=120).changed
    assert _load(settings) == {"hooks": {"Stop": [{"hooks": [{**OURS, "timeout": 120}]}]}}


def test_existing_settings_and_hooks_are_all_kept(settings: Path) -> None:
    _write(settings, EXISTING)
    assert merge_stop_hook(settings, CMD).changed
    data = _load(settings)
    expected = json.loads(json.dumps(EXISTING))
    expected["hooks"]["Stop"].append({"hooks": [OURS]})
    assert data == expected
    assert list(data) == list(EXISTING)  # key order kept too
    assert "bär" in settings.read_text(encoding="utf-8")  # not \u-escaped


def test_twice_is_idempotent_byte_for_byte(settings: Path) -> None:
    _write(settings, EXISTING)
    merge_stop_hook(settings, CMD)
    before = settings.read_bytes()
    mtime = settings.stat().st_mtime_ns
    second = merge_stop_hook(settings, CMD)
    assert not second.changed and "already" in second.message
    assert settings.read_bytes() == before
    assert settings.stat().st_mtime_ns == mtime
    assert len(_ours(settings)) == 1


def test_other_interpreter_is_updated_in_place(settings: Path) -> None:
    old = {"type": "command", "command": "/old/venv/bin/python -m pytest_ralph.hook",
           "timeout": 30, "statusMessage": "ralph"}
    _write(settings, {"hooks": {"Stop": [{"hooks": [OTHER_STOP, old]}]}})
    result = merge_stop_hook(settings, CMD)
    assert result.changed and "updated" in result.message
    assert _load(settings) == {"hooks": {"Stop": [{"hooks": [
        OTHER_STOP, {**OURS, "statusMessage": "ralph"}]}]}}


def test_a_higher_timeout_you_set_is_kept(settings: Path) -> None:
    _write(settings, {"hooks": {"Stop": [{"hooks": [{**OURS, "timeout": 1800}]}]}})
    before = settings.read_bytes()
    result = merge_stop_hook(settings, CMD)
    assert not result.changed and "already" in result.message
    assert settings.read_bytes() == before


def test_a_higher_timeout_is_kept_when_the_interpreter_is_updated(settings: Path) -> None:
    old = {"type": "command", "command": "/old/venv/bin/python -m pytest_ralph.hook",
           "timeout": 1800}
    _write(settings, {"hooks": {"Stop": [{"hooks": [old]}]}})
    result = merge_stop_hook(settings, CMD, timeout=600)
    assert result.changed and "updated" in result.message
    assert _load(settings) == {"hooks": {"Stop": [{"hooks": [{**OURS, "timeout": 1800}]}]}}


def test_a_lower_timeout_is_raised(settings: Path) -> None:
    _write(settings, {"hooks": {"Stop": [{"hooks": [{**OURS, "timeout": 30}]}]}})
    assert merge_stop_hook(settings, CMD).changed
    assert _load(settings) == {"hooks": {"Stop": [{"hooks": [OURS]}]}}


WRAPPED = [
    "env PYTEST_RALPH_DEBUG=1 /usr/bin/python3 -m pytest_ralph.hook",
    "PYTHONPATH=src /usr/bin/python3 -m pytest_ralph.hook",
    "nice -n 5 /usr/bin/python3 -m pytest_ralph.hook",
    "/usr/bin/python3 -m pytest_ralph.hook 2>>/tmp/ralph-hook.log",
    "cd \"$CLAUDE_PROJECT_DIR\" && /usr/bin/python3 -m pytest_ralph.hook",
    "/usr/bin/python3 -X utf8 -m pytest_ralph.hook",
    "$HOME/venv/bin/python -m pytest_ralph.hook",
    "pytest-ralph-hook 2>/dev/null",
]


@pytest.mark.parametrize("command", WRAPPED)
def test_is_plain_hook_command_refuses_a_wrapped_command(command: str) -> None:
    assert is_ralph_hook_command(command)
    assert not is_plain_hook_command(command)


@pytest.mark.parametrize("command", [
    CMD, hook_command("/opt/my python/bin/python3", windows=False),
    "/old/venv/bin/python -m pytest_ralph.hook", "pytest-ralph-hook",
    "/venv/bin/pytest-ralph-hook", "'/my venv/bin/pytest-ralph-hook'",
])
def test_is_plain_hook_command_accepts_our_own_command(command: str) -> None:
    assert is_plain_hook_command(command)


@pytest.mark.parametrize("bad", [None, 3, "", "python -m pytest_ralph.hook 'unclosed",
                                 "python -m pytest_ralph.hooks"])
def test_is_plain_hook_command_is_false_for_anything_else(bad: object) -> None:
    assert not is_plain_hook_command(bad)


@pytest.mark.parametrize("command", WRAPPED)
def test_a_stop_handler_that_wraps_our_hook_is_yours_and_nothing_changes(
        settings: Path, command: str) -> None:
    wrapped = {"type": "command", "command": command, "timeout": 30}
    # A plain copy of ours (another interpreter) and a lower timeout would be updated, but not
    # while you have your own wrapped handler: the file is left as it is, byte for byte.
    plain = {"type": "command", "command": "/old/venv/bin/python -m pytest_ralph.hook",
             "timeout": 5}
    _write(settings, {**EXISTING, "hooks": {**EXISTING["hooks"],
                                           "Stop": [{"hooks": [OTHER_STOP, wrapped]},
                                                    {"hooks": [plain]}]}})
    before = settings.read_bytes()
    mtime = settings.stat().st_mtime_ns
    result = merge_stop_hook(settings, CMD)
    assert not result.changed
    assert result.message == (f"a Stop hook of yours that runs pytest-ralph's hook ({command!r}) "
                              f"is already in {settings}; it is left as it is (make sure its "
                              "interpreter has pytest-ralph installed: `pytest --ralph-doctor` "
                              "checks it)")
    assert settings.read_bytes() == before
    assert settings.stat().st_mtime_ns == mtime
    assert [p.name for p in settings.parent.iterdir()] == ["settings.json"]


def test_duplicates_of_ours_collapse_to_one(settings: Path) -> None:
    _write(settings, {"hooks": {"Stop": [{"hooks": [OURS]}, {"matcher": "", "hooks": [OURS]},
                                         {"hooks": []}]}})
    assert merge_stop_hook(settings, CMD).changed
    # the emptied duplicate group goes; the empty group someone else left stays
    assert _load(settings) == {"hooks": {"Stop": [{"hooks": [OURS]}, {"hooks": []}]}}


def test_utf8_bom_is_accepted(settings: Path) -> None:
    settings.parent.mkdir()
    settings.write_bytes(b"\xef\xbb\xbf" + json.dumps({"model": "opus"}).encode())
    assert merge_stop_hook(settings, CMD).changed
    assert _load(settings) == {"model": "opus", "hooks": {"Stop": [{"hooks": [OURS]}]}}
    assert not settings.read_bytes().startswith(b"\xef\xbb\xbf")


def test_invalid_json_is_an_error_and_file_unchanged(settings: Path) -> None:
    settings.parent.mkdir()
    settings.write_bytes(b'{"model": "opus",}\n')
    with pytest.raises(SettingsFileError) as info:
        merge_stop_hook(settings, CMD)
    message = str(info.value)
    assert str(settings) in message and "not valid JSON" in message and "line 1" in message
    assert "not changed" in message
    assert settings.read_bytes() == b'{"model": "opus",}\n'
    assert [p.name for p in settings.parent.iterdir()] == ["settings.json"]


@pytest.mark.parametrize(("data", "json_path", "expected"), [
    ([1, 2], "", "JSON object at the top level"),
    ({"hooks": []}, "hooks", "expected an object"),
    ({"hooks": {"Stop": {"hooks": []}}}, "hooks.Stop", "expected a list of hook groups"),
    ({"hooks": {"Stop": [{"hooks": []}, "x"]}}, "hooks.Stop[1]", "hook group object"),
    ({"hooks": {"Stop": [{"hooks": [OTHER_STOP]}, {"hooks": {"type": "command"}}]}},
     "hooks.Stop[1].hooks", "expected a list of handlers"),
])
def test_wrong_types_are_errors_naming_the_json_path(settings: Path, data: Any, json_path: str,
                                                     expected: str) -> None:
    _write(settings, data)
    before = settings.read_bytes()
    for action in (lambda: merge_stop_hook(settings, CMD), lambda: remove_stop_hook(settings)):
        with pytest.raises(SettingsFileError) as info:
            action()
        assert info.value.json_path == json_path
        assert str(info.value).startswith(f"{settings}: {json_path + ': ' if json_path else ''}")
        assert expected in str(info.value)
        assert settings.read_bytes() == before


@pytest.mark.parametrize("number", ["1e400", "-1e400"])
def test_a_number_json_cannot_write_back_is_an_error_and_file_unchanged(
        settings: Path, number: str) -> None:
    settings.parent.mkdir()
    original = ('{"model": "opus", "cleanupPeriodDays": ' + number + "}\n").encode()
    settings.write_bytes(original)
    with pytest.raises(SettingsFileError) as info:
        merge_stop_hook(settings, CMD)
    message = str(info.value)
    assert message.startswith(f"{settings}: holds a number too large for JSON to write back")
    assert "1e400" in message and "not changed" in message
    assert settings.read_bytes() == original
    assert [p.name for p in settings.parent.iterdir()] == ["settings.json"]  # no temp left


def test_a_lone_surrogate_escape_is_written_back_escaped(settings: Path) -> None:
    settings.parent.mkdir()
    settings.write_bytes(b'{"env": {"ODD": "a\\ud800b", "FOO": "b\xc3\xa4r"}}\n')
    assert merge_stop_hook(settings, CMD).changed
    raw = settings.read_bytes()
    text = raw.decode("utf-8")  # valid UTF-8: no surrogate written out raw
    assert "\\ud800" in text
    assert json.loads(text) == {"env": {"ODD": "a\ud800b", "FOO": "bär"},
                                "hooks": {"Stop": [{"hooks": [OURS]}]}}
    again = merge_stop_hook(settings, CMD)  # and it reads back as it was
    assert not again.changed and settings.read_bytes() == raw


def test_not_utf8_is_an_error(settings: Path) -> None:
    settings.parent.mkdir()
    settings.write_bytes(b'{"env": {"A": "\xff"}}')
    with pytest.raises(SettingsFileError, match="not UTF-8"):
        merge_stop_hook(settings, CMD)


@pytest.mark.parametrize("timeout", [0, -1, True])
def test_bad_timeout_is_refused(settings: Path, timeout: int) -> None:
    with pytest.raises(ValueError, match="timeout"):
        merge_stop_hook(settings, CMD, timeout=timeout)
    assert not settings.exists()


def test_command_must_run_our_module(settings: Path) -> None:
    with pytest.raises(ValueError, match=r"pytest_ralph\.hook"):
        merge_stop_hook(settings, "python -m pytest_ralph.hooks")


#: Run in a child process (without root's power over permissions, as CI runs as root).
MERGE_INTO_READ_ONLY = """
import sys
from pathlib import Path
from pytest_ralph.claude.settings_file import SettingsFileError, merge_stop_hook
try:
    merge_stop_hook(Path(sys.argv[1]), sys.argv[2])
except SettingsFileError as exc:
    print(exc)
else:
    print("merged")
"""


@pytest.mark.skipif(os.name == "nt", reason="POSIX permissions")
def test_read_only_folder_is_a_clear_error(settings: Path) -> None:
    _write(settings, {"model": "opus"})
    before = settings.read_bytes()
    settings.parent.chmod(0o555)
    try:
        done = subprocess.run(unprivileged([sys.executable, "-c", MERGE_INTO_READ_ONLY,
                                            str(settings), CMD]),
                              capture_output=True, text=True, timeout=60, check=False)
    finally:
        settings.parent.chmod(0o755)
    assert done.returncode == 0, done.stderr
    message = done.stdout
    assert "cannot be written" in message and "writable" in message and "not changed" in message
    assert settings.read_bytes() == before
    assert sorted(p.name for p in settings.parent.iterdir()) == [settings.name]


def test_claude_is_a_file_is_a_clear_error_even_as_root(tmp_path: Path) -> None:
    (tmp_path / ".claude").write_text("not a folder", encoding="utf-8")
    with pytest.raises(SettingsFileError, match="cannot be read"):
        merge_stop_hook(tmp_path / ".claude" / "settings.json", CMD)
    assert (tmp_path / ".claude").read_text(encoding="utf-8") == "not a folder"


@pytest.mark.skipif(os.name == "nt", reason="POSIX symlinks")
def test_folder_that_cannot_be_created_is_a_clear_error_even_as_root(tmp_path: Path) -> None:
    (tmp_path / ".claude").symlink_to(tmp_path / "missing")  # dangling: mkdir fails
    with pytest.raises(SettingsFileError, match=r"cannot be written .*writable"):
        merge_stop_hook(tmp_path / ".claude" / "settings.json", CMD)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".claude"]


@pytest.mark.skipif(os.name == "nt", reason="POSIX permissions")
def test_file_mode_is_kept(settings: Path) -> None:
    _write(settings, {})
    settings.chmod(0o600)
    merge_stop_hook(settings, CMD)
    assert settings.stat().st_mode & 0o777 == 0o600


# --- remove_stop_hook ---------------------------------------------------------------------------


def test_remove_leaves_everything_else(settings: Path) -> None:
    _write(settings, EXISTING)
    merge_stop_hook(settings, CMD)
    result = remove_stop_hook(settings)
    assert result.changed and "removed" in result.message
    assert _load(settings) == EXISTING
    again = remove_stop_hook(settings)
    assert not again.changed


def test_remove_only_ours_from_a_shared_group(settings: Path) -> None:
    _write(settings, {"hooks": {"Stop": [{"hooks": [OTHER_STOP, OURS]}]}})
    assert remove_stop_hook(settings).changed
    assert _load(settings) == {"hooks": {"Stop": [{"hooks": [OTHER_STOP]}]}}


def test_remove_drops_what_it_emptied(settings: Path) -> None:
    merge_stop_hook(settings, CMD)
    _write(settings, {"env": {}, **_load(settings)})
    assert remove_stop_hook(settings).changed
    assert _load(settings) == {"env": {}}


def test_remove_without_file_or_hook_changes_nothing(settings: Path) -> None:
    assert not remove_stop_hook(settings).changed
    assert not settings.exists()
    _write(settings, EXISTING)
    before = settings.read_bytes()
    assert not remove_stop_hook(settings).changed
    assert settings.read_bytes() == before


@pytest.mark.parametrize("command", [
    "/usr/bin/python3 -P -m pytest_ralph.hook", "'/a b/python' -I -m pytest_ralph.hook",
])
def test_the_safe_path_flags_are_part_of_a_plain_command(command: str) -> None:
    assert is_plain_hook_command(command) and is_ralph_hook_command(command)
    assert not is_plain_hook_command(command.replace(" -m", " -X utf8 -m"))
