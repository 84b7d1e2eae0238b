"""The agent-CLI flags that turn off the agent's own permission prompts or sandbox.

One table, :data:`UNATTENDED`, per CLI executable: each flag, in the spellings the CLI
accepts, and what it lets the agent do. :func:`unattended_flags` finds them in an agent argv;
the loop prints one line per flag found when it starts (:mod:`pytest_ralph.loop.controller`)
and ``--ralph-init`` names the ``claude`` preset's in its "next:" line.

Where each fact comes from:

- claude: ``--dangerously-skip-permissions`` is ``--permission-mode bypassPermissions``
  (Claude Code CLI reference, https://docs.anthropic.com/claude/docs/claude-code/cli-usage).
- codex: ``--dangerously-bypass-approvals-and-sandbox`` (alias ``--yolo``): ``codex exec
  --help`` of codex-cli 0.171.0, "Skip all confirmation prompts and execute commands without
  sandboxing".
- gemini: ``--approval-mode yolo`` and ``-y``/``--yolo``: ``gemini --help`` of 0.61.0,
  "yolo (auto-approve all tools)".
- opencode: ``--auto``: ``opencode run --help`` of 1.18.33, "auto-approve permissions that are
  not explicitly denied (dangerous!)".
- aider: ``--yes-always``: ``aider --help`` of 0.86.2, "Always say yes to every
  confirmation"; its source (``aider/io.py`` ``confirm_ask``, ``coders/base_coder.py``) still
  answers no to "Run shell command?", which asks for an explicit yes.
- amp: ``--dangerously-allow-all`` (Amp's manual, https://ampcode.com/manual/appendix; it
  works on the CLI but is not in its ``--help``).
- cursor-agent: ``-f``/``--force`` (``--yolo``): Cursor CLI's flags
  (https://www.developersdigest.tech/reference/cursor-cli/cli-flags), "run every action
  without approval except what permissions.deny blocks".
- goose runs autonomously by default (no flag: nothing to find in its argv).

This module does not import pytest.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["UNATTENDED", "Unattended", "UnattendedFlag", "unattended_flags"]


@dataclass(frozen=True)
class UnattendedFlag:
    """One flag that turns off a CLI's permission prompts or sandbox.

    Attributes:
        names: its spellings, e.g. ``("--dangerously-bypass-approvals-and-sandbox",
            "--yolo")``.
        value: the value that makes an option unattended (``"bypassPermissions"`` for
            claude's ``--permission-mode``, given as ``--name VALUE`` or ``--name=VALUE``);
            ``None`` for a flag that takes none.
        grants: what it lets the agent do, a clause that follows "lets the agent", e.g.
            ``"approve every tool (edit any file, run any command) without asking"``.
    """

    names: tuple[str, ...]
    value: str | None
    grants: str


@dataclass(frozen=True)
class Unattended:
    """A flag of :data:`UNATTENDED` found in an argv by :func:`unattended_flags`.

    Attributes:
        cli: the CLI's executable name (``"claude"``).
        flag: the flag as written in the argv (``"--permission-mode bypassPermissions"``).
        grants: :attr:`UnattendedFlag.grants`.
    """

    cli: str
    flag: str
    grants: str


#: Per CLI executable name: the flags that disable its own permission prompts or sandbox.
UNATTENDED: dict[str, tuple[UnattendedFlag, ...]] = {
    "claude": (
        UnattendedFlag(("--dangerously-skip-permissions",), None,
                       "approve every tool (edit any file, run any command) without asking"),
        UnattendedFlag(("--permission-mode",), "bypassPermissions",
                       "approve every tool (edit any file, run any command) without asking"),
    ),
    "codex": (
        UnattendedFlag(("--dangerously-bypass-approvals-and-sandbox", "--yolo"), None,
                       "run any command and edit any file with no approval and without "
                       "Codex's own sandbox"),
    ),
    "gemini": (
        UnattendedFlag(("--approval-mode",), "yolo",
                       "approve every tool call (edits, shell commands) without asking"),
        UnattendedFlag(("--yolo", "-y"), None,
                       "approve every tool call (edits, shell commands) without asking"),
    ),
    "opencode": (
        UnattendedFlag(("--auto",), None,
                       "approve every permission request (edits, shell commands) that is "
                       "not explicitly denied"),
    ),
    "aider": (
        UnattendedFlag(("--yes-always",), None,
                       "say yes to every confirmation (adding, creating and editing files; "
                       "a suggested shell command still needs an explicit yes, so it is "
                       "not run)"),
    ),
    "amp": (
        UnattendedFlag(("--dangerously-allow-all",), None,
                       "run every tool and command without asking"),
    ),
    "cursor-agent": (
        UnattendedFlag(("--force", "-f", "--yolo"), None,
                       "run every action (edits, shell commands) without approval, except "
                       "what its permissions.deny blocks"),
    ),
}


def _cli_name(command: str) -> str:
    """The executable's name: last path part, lower-cased, without ``.exe``/``.cmd``."""
    name = re.split(r"[\\/]", command)[-1].lower()
    for suffix in (".exe", ".cmd"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def unattended_flags(argv: Sequence[str]) -> list[Unattended]:
    """The flags of :data:`UNATTENDED` in an agent argv, in argv order, each once.

    The CLI is told by ``argv[0]``'s name (``/usr/bin/claude``, ``claude.exe`` count as
    ``claude``); a flag counts anywhere after it, as ``--flag``, ``--option VALUE`` or
    ``--option=VALUE``.

    Args:
        argv: the agent's argv (a preset's, or a command line split), unrendered
            (``{prompt_file}`` may remain).

    Returns:
        The flags found; empty for an argv of another program or without such a flag.
    """
    if not argv:
        return []
    cli = _cli_name(argv[0])
    table = UNATTENDED.get(cli, ())
    found: list[Unattended] = []
    args = list(argv[1:])
    for i, arg in enumerate(args):
        name, eq, inline = arg.partition("=")
        for entry in table:
            if entry.value is None:
                hit = arg if arg in entry.names else None
            elif eq and name in entry.names and name.startswith("--"):
                hit = arg if inline == entry.value else None
            elif arg in entry.names and i + 1 < len(args) and args[i + 1] == entry.value:
                hit = f"{arg} {entry.value}"
            else:
                hit = None
            if hit is not None and all(f.flag != hit for f in found):
                found.append(Unattended(cli, hit, entry.grants))
    return found
