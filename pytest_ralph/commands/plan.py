"""``pytest --ralph-plan [PRD]``: the lanes of a parallel run as JSON, for a CI matrix.

It loads the PRD (the one named, else ``--ralph-prd`` / ini ``ralph_prd``, else discovery),
checks its dependencies (:func:`pytest_ralph.parallel.plan.check`) and prints
:func:`pytest_ralph.parallel.plan.matrix` as one line of JSON on stdout, for a GitHub Actions
workflow to read with ``fromJSON``. Nothing is written and no agent runs.

This module does not import pytest.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..loop.records import EXIT_NO_CRITERIA, EXIT_USAGE
from ..parallel.plan import check, matrix
from ..prd.describe import no_prd_message, no_stories_message
from ..prd.errors import PRDError
from ..prd.load import MAX_PRD_BYTES, discover_prd, load_prd

#: The prefix of every message of the command.
PREFIX = "pytest-ralph: --ralph-plan: "


def plan(rootdir: Path, prd: Path | None, *, max_bytes: int = MAX_PRD_BYTES) -> tuple[int, str]:
    """The plan of the PRD of ``rootdir`` and what to print.

    Args:
        rootdir: the pytest rootdir; PRD discovery looks there, and the plan names the PRD
            relative to it.
        prd: the PRD file, or ``None`` to discover it (:func:`pytest_ralph.prd.load.discover_prd`).
        max_bytes: the PRD size limit (ini ``ralph_max_prd_bytes``).

    Returns:
        ``(0, JSON)`` for stdout; ``(4, message)`` for stderr when the PRD cannot be loaded or
        its dependencies cannot be followed (the PRD error: file, line, JSON path, what was
        expected, hint); ``(5, message)`` when there is no PRD or it has no stories, as the
        loop says.
    """
    path = prd if prd is not None else discover_prd(rootdir)
    if path is None:
        return EXIT_NO_CRITERIA, PREFIX + no_prd_message(rootdir)
    try:
        loaded = load_prd(path, max_bytes=max_bytes)
        if not loaded.stories:
            return EXIT_NO_CRITERIA, f"{PREFIX}{loaded.path}: {no_stories_message(loaded)}"
        check(loaded)
    except PRDError as exc:
        return EXIT_USAGE, PREFIX + exc.describe()
    return 0, json.dumps(matrix(loaded, rootdir), ensure_ascii=False)
