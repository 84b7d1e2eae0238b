"""git for the tests that need a repository: a marker that skips them without git, and
:func:`git`, which runs git with a fixed identity and none of the user's configuration."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.env import clean_env

#: Skips a test (or, as ``pytestmark``, a module) on a machine without git.
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(root: Path, *args: str) -> str:
    """Run ``git -C root *args`` and return its stdout; a failing git fails the test, a missing
    git skips it.

    The author and committer are ``t <t@example.com>``; no ``GIT_*`` variable of this process,
    no system configuration and no user configuration (``HOME`` is ``root``) apply; commits are
    not signed; ``GIT_OPTIONAL_LOCKS=0`` keeps ``git status`` from writing the index.
    """
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    env = clean_env(drop=("GIT_",), names=(), bytecode=True,
                    GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
                    GIT_COMMITTER_EMAIL="t@example.com", GIT_CONFIG_NOSYSTEM="1", HOME=str(root),
                    GIT_OPTIONAL_LOCKS="0")
    done = subprocess.run(["git", "-C", str(root), "-c", "commit.gpgsign=false", *args],
                          capture_output=True, env=env, check=True)
    return done.stdout.decode()


def isolate_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make git see no user or system configuration (``HOME`` and ``XDG_CONFIG_HOME`` under
    ``tmp_path/home``, ``GIT_CONFIG_NOSYSTEM=1``), with the identity ``t <t@example.com>``
    from the environment. ``monkeypatch``: pytest's fixture of the test."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "t")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "t@example.com")
