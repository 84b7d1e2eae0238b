"""The gate judges the code, not a database left lying around.

The ``sql`` criteria of ``prd.json`` read ``content.db``, which the pipeline builds. A stale
or hand-copied ``content.db`` would pass them whatever the code does, so at the start of
every session that checks the PRD (plain ``pytest``, ``pytest prd.json``, each check phase
of ``pytest --ralph``) this file removes ``content.db`` and ``content.metrics.md`` and
rebuilds them with ``python -m pipeline all --db content.db``, the code as it is now. When
that fails (before SETUP-1, the command line knows no command) they stay removed, and the
``sql`` criteria fail with "no database".

It runs once per session, in the main process: under pytest-xdist the controller rebuilds
before it starts its workers (xdist starts them in a ``trylast`` ``pytest_sessionstart``),
and the workers skip it. A session that does not check the PRD (``pytest tests``, or
``--collect-only``) leaves the files alone. It prints one line saying what it did.

pytest-ralph guards this file: the loop's agent cannot change how it is judged.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
"""The example folder: the ``pipeline`` package and ``prd.json`` are here."""
PRD = HERE / "prd.json"
DATABASE = "content.db"
"""The database the ``sql`` criteria read (``db`` is relative to the rootdir)."""
PRODUCTS = (DATABASE, f"{DATABASE}-journal", f"{DATABASE}-wal", f"{DATABASE}-shm",
            "content.metrics.md")
"""What a rebuild produces, or an interrupted one leaves: removed before each rebuild."""
TIMEOUT = 300.0


def checks_prd(config: pytest.Config) -> bool:
    """Whether this session collects ``prd.json``: no paths given (pytest-ralph then adds the
    PRD it finds), or a path that is the PRD, a criterion of it or a folder holding it."""
    if getattr(config, "args_source", None) != pytest.Config.ArgsSource.ARGS:
        return True
    here = config.invocation_params.dir
    for arg in config.args:
        path = (here / arg.split("::", 1)[0]).resolve()
        if path == PRD or PRD.is_relative_to(path):
            return True
    return False


def remove_products(rootdir: Path) -> None:
    """Remove what an earlier build left (a folder in their place stays, and the build fails)."""
    for name in PRODUCTS:
        with contextlib.suppress(OSError):
            (rootdir / name).unlink(missing_ok=True)


def rebuild(rootdir: Path) -> str:
    """Remove the database and its report, rebuild them from the code; one line on how it went."""
    remove_products(rootdir)
    database = os.path.relpath(rootdir / DATABASE, HERE)  # "content.db": short messages
    command = [sys.executable, "-m", "pipeline", "all", "--db", database]
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=HERE, capture_output=True, text=True,
                              timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        failure = f"timed out after {TIMEOUT:.0f} s"
    else:
        lines = (done.stderr or done.stdout).strip().splitlines()
        failure = f"exit {done.returncode}: {lines[-1] if lines else 'no output'}"
        if done.returncode == 0:
            return (f"rebuilt {DATABASE} from the code (python -m pipeline all, "
                    f"{time.monotonic() - start:.1f} s)")
    remove_products(rootdir)
    return (f"no {DATABASE}: the code cannot build it (python -m pipeline all: {failure}); "
            "the sql criteria fail")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Rebuild ``content.db`` from the code before any criterion is checked."""
    config = session.config
    if (hasattr(config, "workerinput") or config.getoption("collectonly")
            or not checks_prd(config)):
        return  # a pytest-xdist worker (its controller rebuilt), or nothing is checked
    line = f"content-pipeline: {rebuild(config.rootpath)}"
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
    else:
        print(line, file=sys.stderr, flush=True)
