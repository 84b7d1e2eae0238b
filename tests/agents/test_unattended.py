"""pytest_ralph.agents.unattended: the flags that turn off an agent's own prompts or sandbox."""

from __future__ import annotations

import pytest

from pytest_ralph.agents.presets import PRESETS
from pytest_ralph.agents.unattended import UNATTENDED, unattended_flags

#: The flag each preset's own argv carries (goose has none: it is autonomous by default).
PRESET_FLAG = {"claude": "--dangerously-skip-permissions",
               "codex": "--dangerously-bypass-approvals-and-sandbox",
               "gemini": "--approval-mode=yolo", "opencode": "--auto", "aider": "--yes-always",
               "amp": "--dangerously-allow-all", "cursor-agent": "--force", "goose": None}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_presets_own_flag_is_found(name: str) -> None:
    found = unattended_flags(PRESETS[name].argv())
    expected = PRESET_FLAG[name]
    assert [u.flag for u in found] == ([expected] if expected else [])
    assert all(u.cli == name and u.grants for u in found)


@pytest.mark.parametrize(("argv", "flags"), [
    (["claude", "-p", "--permission-mode", "bypassPermissions"],
     ["--permission-mode bypassPermissions"]),
    (["/usr/local/bin/claude", "--permission-mode=bypassPermissions"],
     ["--permission-mode=bypassPermissions"]),
    (["claude.exe", "-p", "--permission-mode", "acceptEdits"], []),
    (["codex", "exec", "--yolo", "-"], ["--yolo"]),
    (["codex", "exec", "--sandbox", "workspace-write", "-"], []),
    (["gemini", "--approval-mode", "yolo", "-y"], ["--approval-mode yolo", "-y"]),
    (["gemini", "--approval-mode=auto_edit"], []),
    (["cursor-agent", "-p", "--yolo", "--yolo"], ["--yolo"]),
    (["python", "agent.py", "--dangerously-skip-permissions"], []),
    ([], []),
])
def test_flags_in_an_argv(argv: list[str], flags: list[str]) -> None:
    assert [u.flag for u in unattended_flags(argv)] == flags


def test_every_cli_of_the_table_is_a_preset_executable() -> None:
    assert set(UNATTENDED) <= {p.executable for p in PRESETS.values()}
