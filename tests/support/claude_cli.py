"""A pinned real Claude Code CLI for tests, installed on demand into a shared cache.

The CLI (``@anthropic-ai/claude-code``, pinned to :data:`VERSION`) is installed with npm into
``<cache>/claude-code-<VERSION>`` where ``<cache>`` is ``$PYTEST_RALPH_CACHE`` or
``~/.cache/pytest-ralph``. Installing is safe with several pytest-xdist workers at once: one
worker installs under an exclusive ``fcntl`` lock into a temporary folder that is renamed into
place only once npm succeeded, the others wait on the lock and then reuse it, and a half-finished
install is never visible under the final name.

:func:`offline_env` gives the environment that points the CLI at a loopback model server (see
:mod:`tests.support.model_server`) so it runs with no network and no real credentials.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from pytest_ralph.agents.proven import PROVEN

#: The npm package and the pinned version the tests were written against (bumped in
#: :data:`pytest_ralph.agents.proven.PROVEN`).
PACKAGE = PROVEN["claude"].package
VERSION = PROVEN["claude"].version

#: Seconds one ``npm install`` may take before it counts as failed.
INSTALL_TIMEOUT = 600.0


class ClaudeInstallError(RuntimeError):
    """``npm install`` of the pinned CLI failed with npm present (the message has its output)."""


def cache_dir() -> Path:
    """The folder that holds the installs: ``$PYTEST_RALPH_CACHE`` or ``~/.cache/pytest-ralph``.

    Read at call time; note that ``pytester`` points ``HOME`` at its temporary folder, so call
    this (or :func:`claude_executable`) from a session-scoped fixture or at import time.
    """
    env = os.environ.get("PYTEST_RALPH_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pytest-ralph"


def install_dir() -> Path:
    """The npm prefix of the pinned install: ``<cache>/claude-code-<VERSION>``."""
    return cache_dir() / f"claude-code-{VERSION}"


def _binary(prefix: Path) -> Path:
    return prefix / "node_modules" / ".bin" / "claude"


def _installed(prefix: Path) -> Path | None:
    """The CLI under ``prefix`` if it is a complete install of :data:`VERSION`, else None."""
    exe = _binary(prefix)
    manifest = prefix / "node_modules" / "@anthropic-ai" / "claude-code" / "package.json"
    if not (exe.exists() and os.access(exe, os.X_OK) and manifest.is_file()):
        return None
    try:
        version = json.loads(manifest.read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError):
        return None
    return exe if version == VERSION else None


def _check_staged(prefix: Path) -> str:
    """Why the fresh install under ``prefix`` is unusable ('' when ``claude --version`` works).

    The package's postinstall copies a per-platform native binary over a placeholder stub and
    only warns when it cannot, so running the binary is the one reliable check.
    """
    exe = _installed(prefix)
    if exe is None:
        return f"left no executable {_binary(prefix)} of version {VERSION}"
    try:
        out = subprocess.run([str(exe), "--version"], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{exe} --version could not run: {exc}"
    if out.returncode != 0 or VERSION not in out.stdout:
        return (f"{exe} --version exited {out.returncode} with {out.stdout.strip()!r} "
                f"{out.stderr.strip()!r} (no native binary for this platform?)")
    return ""


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode("utf-8", "replace")
    return output or ""


def installed_executable() -> Path | None:
    """The pinned CLI if it is already installed in the cache, else None; never installs."""
    return _installed(install_dir())


def claude_executable() -> Path | None:
    """Path of the pinned Claude Code CLI (``.../node_modules/.bin/claude``); installs it if absent.

    Returns:
        The executable, or None when it is not installed and ``npm`` is not on ``PATH`` (the
        caller should skip with a clear reason).

    Raises:
        ClaudeInstallError: npm is present but ``npm install`` failed or timed out (after
            :data:`INSTALL_TIMEOUT` seconds), or left no usable ``claude``; the message carries
            npm's output so CI fails loudly instead of skipping.
        OSError: the cache folder cannot be created or locked.
    """
    target = install_dir()
    exe = _installed(target)
    if exe is not None:
        return exe
    npm = shutil.which("npm")
    if npm is None:
        return None
    cache = target.parent
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".claude-code-{VERSION}.lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # waits while another worker installs
        exe = _installed(target)
        if exe is not None:
            return exe
        staging = Path(tempfile.mkdtemp(prefix=f".claude-code-{VERSION}-", dir=cache))
        try:
            argv = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(staging),
                    f"{PACKAGE}@{VERSION}"]
            try:
                proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                      text=True, timeout=INSTALL_TIMEOUT, check=False)
            except subprocess.TimeoutExpired as exc:
                raise ClaudeInstallError(
                    f"{' '.join(argv)} timed out after {INSTALL_TIMEOUT:.0f} s\n"
                    f"{_text(exc.stdout)}{_text(exc.stderr)}") from exc
            if proc.returncode != 0:
                raise ClaudeInstallError(
                    f"{' '.join(argv)} exited {proc.returncode}\n"
                    f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
            problem = _check_staged(staging)
            if problem:
                raise ClaudeInstallError(
                    f"{' '.join(argv)} succeeded but {problem}\n"
                    f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
            staging.chmod(0o755)  # mkdtemp made it private
            if target.exists() or target.is_symlink():  # a stale or foreign leftover
                stale = Path(tempfile.mkdtemp(prefix=f".claude-code-{VERSION}-stale-", dir=cache))
                os.replace(target, stale / "old")
                shutil.rmtree(stale, ignore_errors=True)
            os.replace(staging, target)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    exe = _installed(target)
    if exe is None:  # pragma: no cover - the rename above just put it there
        raise ClaudeInstallError(f"{target} has no usable claude after installing")
    return exe


def offline_env(base_url: str, home: str | os.PathLike[str]) -> dict[str, str]:
    """Environment variables that make the CLI talk only to a loopback model server.

    Args:
        base_url: the scripted server's root, e.g. ``http://127.0.0.1:40123`` (no ``/v1``).
        home: a temporary folder used as ``HOME`` (the CLI keeps settings, transcripts and
            credentials there).

    Returns:
        The variables to add to (not replace) the process environment: the base URL, a dummy
        API key, non-essential traffic / telemetry / auto-update off, one HTTP attempt per
        request (``CLAUDE_CODE_MAX_RETRIES=1``; the default retries about ten times with
        back-off), and ``IS_SANDBOX=1`` so ``--dangerously-skip-permissions`` works as root.
    """
    return {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "any",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_MAX_RETRIES": "1",
        "HOME": os.fspath(home),
        "IS_SANDBOX": "1",
    }
