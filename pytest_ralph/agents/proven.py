"""The agent CLI releases each preset was proven with: one line per CLI, bumped in one place.

A preset is *proven* when its exact argv ran the real CLI, installed from its registry at the
version below, offline against the test suite's scripted model server on 127.0.0.1, for a
success, an HTTP 500 and an HTTP 429, and drove ``pytest --ralph --ralph-agent NAME`` to
completion (``tests/agents/test_real_<name>.py``, ``tests/claude/test_claude_cli.py``). The tests
install exactly these releases; ``pytest --ralph-doctor --ralph-agent NAME`` prints the
installed version beside the proven one; the docs' presets table is checked against this
table. Presets absent here (amp, goose, cursor-agent) are unverified: see :data:`UNVERIFIED`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Proven:
    """One CLI release a preset was proven with.

    Attributes:
        registry: ``"npm"`` (installed with ``npm install PACKAGE@VERSION``) or ``"pypi"``
            (``pip install PACKAGE==VERSION`` into a virtualenv of its own).
        package: the registry's package name, e.g. ``"@openai/codex"``.
        version: the exact release, e.g. ``"0.171.0"``.
        executable: the command the package installs (the preset's executable).
    """

    registry: str
    package: str
    version: str
    executable: str

    @property
    def install_command(self) -> str:
        """The shell command that installs this release for the current user, e.g.
        ``npm install -g @openai/codex@0.171.0`` or ``pipx install aider-chat==0.86.2``."""
        if self.registry == "npm":
            return f"npm install -g {self.package}@{self.version}"
        return f"pipx install {self.package}=={self.version}"


#: The proven release per preset name.
PROVEN: dict[str, Proven] = {
    "claude": Proven("npm", "@anthropic-ai/claude-code", "2.1.328", "claude"),
    "codex": Proven("npm", "@openai/codex", "0.171.0", "codex"),
    "gemini": Proven("npm", "@google/gemini-cli", "0.61.0", "gemini"),
    "opencode": Proven("npm", "opencode-ai", "1.18.33", "opencode"),
    "aider": Proven("pypi", "aider-chat", "0.86.2", "aider"),
}

#: Why each remaining preset is unverified: what is known of it, and what was not checked.
UNVERIFIED: dict[str, str] = {
    "amp": ("npm @sourcegraph/amp (a wrapper for @ampcode/cli) cannot run offline: it talks "
            "to Sourcegraph's own service before any model call, and without a key it starts "
            "an interactive login that reads the piped prompt as the login code; "
            "--dangerously-allow-all works but is not in --help. Its output reader and flags "
            "come from Amp's documentation only."),
    "goose": ("not installable from a registry reachable here (Block ships goose as a binary "
              "download); its flags and stream-json reader come from goose's documentation "
              "and source only."),
    "cursor-agent": ("not installable from a registry (npm's cursor-agent is an unrelated "
                     "package; Cursor ships the CLI from its own site); its flags and reader "
                     "come from Cursor's documentation and integrators only."),
}
