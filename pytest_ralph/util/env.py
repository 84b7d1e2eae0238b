"""The names pytest-ralph shares between its processes: environment variables and files.

One definition each, at the bottom of the package, so that any module may use them (the
Claude Code Stop hook's fast path imports this module, so it holds constants only).
"""

from __future__ import annotations

#: Environment variable ``pytest --ralph`` sets for its agent runs: a Stop hook inside such a
#: run must not drive a second loop (the hook does nothing when it is set).
CONTROLLER_ENV = "PYTEST_RALPH_CONTROLLER"

#: Environment variables the loop sets for each agent run: the iteration number, and the
#: prompt file (the prompt is on stdin too).
ITERATION_ENV = "PYTEST_RALPH_ITERATION"
PROMPT_FILE_ENV = "PYTEST_RALPH_PROMPT_FILE"

#: Environment variable the loop sets for the escalation command (ini ``ralph_escalate``):
#: the event, ``story-blocked``, ``breaker`` or ``all-blocked``.
EVENT_ENV = "PYTEST_RALPH_EVENT"

#: The arming file of a Claude Code run, relative to a project folder (see
#: :mod:`pytest_ralph.claude.arming`).
MARKER_PARTS = (".claude", "pytest-ralph.local.json")

#: The agent argv recorded for the turns of a Claude Code run (the session is the agent).
SESSION_ARGV = ("claude-code-session",)
