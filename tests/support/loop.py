"""Helpers of the tests that run ``pytest --ralph`` (and ``--ralph-status`` / ``--ralph-cancel``)
in a ``pytester`` folder: start a child pytest and wait for it, watch the processes and the
marker files of its agents, read what a run left in the state folder."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest


def ralph(pytester: pytest.Pytester, *args: str, sandbox: str | None = None
          ) -> subprocess.Popen[bytes]:
    """Start ``python -m pytest -p no:cacheprovider *args`` in the pytester folder, stdout and
    stderr into one pipe (read it with :func:`finish`); ``--ralph-sandbox <sandbox>`` is added
    to a command with ``--ralph`` when ``sandbox`` is given."""
    if sandbox is not None and "--ralph" in args:
        args = (*args, "--ralph-sandbox", sandbox)
    return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                            cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    """Wait (up to 120 s) for a process :func:`ralph` started: its exit code and output."""
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out.decode()


def wait_for(path: Path, seconds: float = 60) -> None:
    """Wait until ``path`` exists (a marker a subprocess writes), failing after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.1)


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (exists and is not a zombie), by ``/proc`` (Linux)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


def agent_runs(pytester: pytest.Pytester) -> int:
    """How many times an agent that appends a line to ``agent-runs.txt`` per run has run."""
    path = pytester.path / "agent-runs.txt"
    return len(path.read_text().splitlines()) if path.exists() else 0


def run_json(pytester: pytest.Pytester) -> dict[str, Any]:
    """The ``run.json`` of the one run in the pytester folder's state folder."""
    (path,) = (pytester.path / ".pytest_ralph" / "runs").glob("*/run.json")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def report_text(folder: pytest.Pytester | Path) -> str:
    """The text of the one Markdown report in the state folder of ``folder`` (a project
    folder, or a pytester's); asserts there is exactly one."""
    root = folder.path if isinstance(folder, pytest.Pytester) else folder
    reports = sorted((root / ".pytest_ralph" / "reports").glob("ralph-*.md"))
    assert len(reports) == 1, reports
    return reports[0].read_text(encoding="utf-8")


def check_records(folder: pytest.Pytester | Path) -> str:
    """Every ``check.json`` and ``check.log`` of the state folder under ``folder``, for an
    assertion's message (what each check phase reported, when a run ended unexpectedly)."""
    root = folder.path if isinstance(folder, pytest.Pytester) else folder
    parts = []
    for path in sorted((root / ".pytest_ralph").rglob("check.*")):
        if path.suffix in (".json", ".log"):
            with contextlib.suppress(OSError):
                parts.append(f"--- {path.relative_to(root)}\n"
                             f"{path.read_text(encoding='utf-8', errors='replace')[-3000:]}")
    return "\n".join(parts)
