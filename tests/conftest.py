"""The suite's fixtures: PRD writers and scripted agents for pytester-based tests, the real
Claude Code CLI against a scripted loopback model. The helpers tests import live in
``tests/support/``."""

from __future__ import annotations

import json
import os
import shlex
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.env import PY


def pytest_configure(config: pytest.Config) -> None:
    """Give Ctrl-C back its default meaning when the suite was started with SIGINT ignored
    (a `&` background job of a non-interactive shell): the tests that interrupt a loop with
    SIGINT need their child processes to start with SIGINT at its default, which they only
    inherit from a process that does not ignore it."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # On GitHub Actions, the gates and loops the tests start would append their Markdown
    # summaries to the job's own summary: tests that want one set the variable themselves.
    os.environ.pop("GITHUB_STEP_SUMMARY", None)


@pytest.fixture
def write_prd(pytester: pytest.Pytester) -> Callable[..., Path]:
    """write_prd(*stories, name="prd.json", project="Demo") -> path of a canonical JSON PRD."""

    def write(*stories: dict[str, Any], name: str = "prd.json", project: str = "Demo",
              **top: Any) -> Path:
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"project": project, "branchName": "ralph/demo", "description": "demo",
                **top, "userStories": list(stories)}
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        return path

    return write


@pytest.fixture
def agent(pytester: pytest.Pytester) -> Callable[[str, str], str]:
    """agent(name, body) writes a Python agent script and returns its command line."""

    def make(name: str, body: str) -> str:
        path = pytester.path / name
        path.write_text(body, encoding="utf-8")
        return f"{PY} {shlex.quote(str(path))}"

    return make


# --- The real Claude Code CLI against a scripted loopback model (see tests/support) -----------


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    """The pinned real Claude Code CLI, installed into the cache on first use.

    Fails (with npm's output) when npm is present but the install fails, and under CI
    (``CI`` set) also when npm is missing, so CI never skips these tests; elsewhere a machine
    without npm skips them with that reason.
    """
    from tests.support.claude_cli import ClaudeInstallError, claude_executable

    try:
        exe = claude_executable()
    except ClaudeInstallError as exc:
        pytest.fail(f"installing the pinned Claude Code CLI failed:\n{exc}", pytrace=False)
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("the Claude Code CLI is not installed and npm is not on PATH: CI must "
                        "run the real-client tests (install Node.js and npm)", pytrace=False)
        pytest.skip("the Claude Code CLI is not installed and npm is not on PATH")
    return exe


@pytest.fixture
def model_server() -> Any:
    """A running :class:`tests.support.model_server.ModelServer` with an empty script.

    Script it with ``model_server.add(turn, ...)``; it answers "done" once the script is out.
    """
    from tests.support.model_server import ModelServer

    with ModelServer() as server:
        yield server


@pytest.fixture
def claude_env(claude_bin: Path, model_server: Any,
               tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The variables that run the real CLI offline against ``model_server``.

    ``HOME`` is a fresh folder outside the project; ``PATH`` starts with the pinned CLI's bin
    folder (which holds only ``claude``), so ``claude`` is the real pinned CLI whatever other
    ``claude`` (a fake, a global install) is on ``PATH``. Apply it with ``monkeypatch.setenv``
    for pytester subprocesses or merge it into ``os.environ``.
    """
    import os
    import shutil

    from tests.support.claude_cli import offline_env

    bin_dir = str(claude_bin.parent)
    rest = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d != bin_dir]
    env = offline_env(model_server.url, tmp_path_factory.mktemp("claude-home"))
    env["PATH"] = os.pathsep.join([bin_dir, *rest])
    assert shutil.which("claude", path=env["PATH"]) == str(claude_bin)
    return env
