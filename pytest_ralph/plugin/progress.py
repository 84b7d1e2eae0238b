"""A check phase child's progress, for the loop's live view: loaded with ``-p`` into the child
pytest of a check phase (:func:`pytest_ralph.checks.phase.run_check_phase`), it appends one
JSON line to the file named by :data:`pytest_ralph.util.env.PROGRESS_ENV` per event:
``{"collected": N}`` once the criteria are collected, then ``{"nodeid": "...", "outcome":
"passed" | "failed" | "skipped"}`` as each criterion is checked (its call, or a setup that did
not pass).

The file is for display only: the loop never reads a verdict from it (the code under test
runs in this process and could write anything there). Without the variable, or when the file
cannot be written, the plugin does nothing; it never fails the session.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import IO

import pytest

from ..util.env import PROGRESS_ENV

_file: IO[str] | None = None


def _emit(record: dict[str, object]) -> None:
    """Append ``record`` as one line, flushed; an error stops the writing, not the session."""
    global _file
    if _file is None:
        return
    try:
        _file.write(json.dumps(record) + "\n")
        _file.flush()
    except (OSError, ValueError):
        _file = None


def pytest_configure(config: pytest.Config) -> None:
    """Open the progress file named by the environment (append)."""
    global _file
    path = os.environ.get(PROGRESS_ENV)
    if path and _file is None:
        with contextlib.suppress(OSError):
            _file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the session


def pytest_collection_finish(session: pytest.Session) -> None:
    """``{"collected": N}``: the criteria this session checks."""
    _emit({"collected": len(session.items)})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """``{"nodeid": ..., "outcome": ...}`` for a criterion's call, or a setup that did not
    pass."""
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _emit({"nodeid": report.nodeid, "outcome": report.outcome})


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close the progress file."""
    global _file
    if _file is not None:
        with contextlib.suppress(OSError):
            _file.close()
        _file = None
