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

#: Set in a check phase's child pytest (:mod:`pytest_ralph.checks.phase`): the child checks,
#: it never drives a loop.
CHILD_ENV = "PYTEST_RALPH_CHILD"

#: Set by the check phase's launcher for its pytest-xdist workers (and removed by each when it
#: reads it): the ``sys.path`` entry before which the worker puts the working directory ("":
#: first).
WORKER_ROOTDIR_ENV = "PYTEST_RALPH_WORKER_ROOTDIR_BEFORE"

#: Set for a check phase whose imports the loop wants to know (the baseline): each process
#: started by :data:`pytest_ralph.checks.phase.PYTEST_LAUNCHER` (the phase's child pytest, and
#: each ``pytest`` criterion's) appends one JSON line to the file it names when its session
#: ends: ``{"path": [sys.path entries, absolute], "modules": {top-level name: file, or folder
#: ending in "/" for a namespace package}, "sources": [every imported .py file]}``. The guard
#: learns from it which modules a new file could shadow (:mod:`pytest_ralph.oracle.judges`).
IMPORTS_ENV = "PYTEST_RALPH_IMPORTS"

#: The folder the loop's check phases keep bytecode in, shared by runs
#: (:func:`pytest_ralph.checks.phase.shared_bytecode_dir`,
#: :func:`pytest_ralph.oracle.bytecode.shared_folder`); empty gives each run a temporary
#: folder of its own.
PYCACHE_ENV = "PYTEST_RALPH_PYCACHE"

#: Hands :mod:`pytest_ralph.plugin.probe` (loaded into a ``pytest`` criterion's child) its
#: token: 16 hexadecimal digits, new for each child.
PROBE_TOKEN_ENV = "PYTEST_RALPH_PROBE"

#: Set for a check phase's child pytest: the JSON file of its judges (see
#: :func:`pytest_ralph.oracle.phasewatch.write_judges`).
JUDGES_ENV = "PYTEST_RALPH_JUDGES"

#: Set for a check phase's child pytest when the loop shows a live view: the JSON-lines file
#: where :data:`PROGRESS_PLUGIN` (loaded into that child with ``-p``) writes what it checked,
#: ``{"collected": N}`` then ``{"nodeid": "...", "outcome": "passed"}`` per criterion. For
#: display only (:class:`pytest_ralph.loop.live.CheckProgress`), never for a verdict.
PROGRESS_ENV = "PYTEST_RALPH_PROGRESS"

#: The plugin module a check phase's child loads to write its progress (see
#: :data:`PROGRESS_ENV`).
PROGRESS_PLUGIN = "pytest_ralph.plugin.progress"

#: The start of every environment variable pytest-ralph sets or reads.
ENV_PREFIX = "PYTEST_RALPH_"

#: Environment variable ``pytest --ralph`` sets for an agent run: the iteration's number.
ITERATION_ENV = "PYTEST_RALPH_ITERATION"

#: Environment variable ``pytest --ralph`` sets for an agent run: the path of the prompt file.
PROMPT_FILE_ENV = "PYTEST_RALPH_PROMPT_FILE"

#: Set by a parallel run (``--ralph-parallel N``) for each lane's ``pytest --ralph``: the JSON
#: file ``{"until": <unix time>, "why": "..."}`` of the pause every lane of the run that uses
#: the same agent honours before its next agent run; a lane whose agent is rate limited
#: writes it (:mod:`pytest_ralph.parallel.scheduler`).
PAUSE_FILE_ENV = "PYTEST_RALPH_PAUSE_FILE"
