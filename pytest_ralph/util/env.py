"""The names pytest-ralph shares between its processes: environment variables and files.

One definition each, at the bottom of the package, so that any module may use them (the
Claude Code Stop hook's fast path imports this module, so it holds constants only).
"""

from __future__ import annotations

#: Environment variable ``pytest --ralph`` sets for its agent runs: a Stop hook inside such a
#: run must not drive a second loop (the hook does nothing when it is set).
CONTROLLER_ENV = "PYTEST_RALPH_CONTROLLER"

#: The arming file of a Claude Code run, relative to a project folder (see
#: :mod:`pytest_ralph.claude.arming`).
MARKER_PARTS = (".claude", "pytest-ralph.local.json")

#: The agent argv recorded for the turns of a Claude Code run (the session is the agent).
SESSION_ARGV = ("claude-code-session",)

#: The start of every environment variable pytest-ralph sets or reads.
ENV_PREFIX = "PYTEST_RALPH_"

#: Environment variable ``pytest --ralph`` sets for an agent run: the iteration's number.
ITERATION_ENV = "PYTEST_RALPH_ITERATION"

#: Environment variable ``pytest --ralph`` sets for an agent run: the path of the prompt file.
PROMPT_FILE_ENV = "PYTEST_RALPH_PROMPT_FILE"
