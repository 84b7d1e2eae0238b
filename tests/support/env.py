"""The interpreter and the environment of the child processes the tests start.

:data:`PY` and :data:`PYTHON` are this test run's interpreter (for a shell command line and
for an argv); :func:`clean_env` is this process's environment without the variables that
would steer a child pytest, loop or Stop hook: this test run's own pytest and xdist settings,
an outer Ralph loop's, an outer Claude Code session's (the suite may itself run inside one).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Collection

#: This test run's interpreter as one word of a shell command line (``f"{PY} agent.py"``).
PY = shlex.quote(sys.executable)

#: This test run's interpreter as an argv item (``[PYTHON, "-c", code]``).
PYTHON = sys.executable

#: The starts of the names :func:`clean_env` drops by default.
OUTER_PREFIXES = ("PYTEST_RALPH_", "PYTEST_XDIST", "CLAUDE_")

#: The names :func:`clean_env` drops by default.
OUTER_NAMES = frozenset({"PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_CURRENT_TEST"})


def clean_env(*, drop: tuple[str, ...] = OUTER_PREFIXES, names: Collection[str] = OUTER_NAMES,
              keep: Collection[str] = (), bytecode: bool = False, **extra: str
              ) -> dict[str, str]:
    """This process's environment for a child, as a new dict.

    Leaves out every variable whose name starts with one of ``drop`` or is one of ``names``
    (both compared upper-cased), except those named in ``keep``; sets
    ``PYTHONDONTWRITEBYTECODE=1`` unless ``bytecode`` (so that a child writes no
    ``__pycache__`` into the projects); then adds ``extra`` (which wins over everything).
    """
    drop_names = {n.upper() for n in names}
    env = {k: v for k, v in os.environ.items()
           if k in keep or not (k.upper().startswith(drop) or k.upper() in drop_names)}
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env
