"""Real agent CLIs for tests, at the releases of :data:`pytest_ralph.agents.proven.PROVEN`.

:func:`cli_executable` installs one CLI on demand into ``<cache>/<preset>-<version>`` where
``<cache>`` is ``$PYTEST_RALPH_CACHE`` or ``~/.cache/pytest-ralph``: npm packages with
``npm install --prefix``, PyPI packages into a virtualenv of their own. Installing is safe with
several pytest-xdist workers at once: one worker installs under an exclusive ``fcntl`` lock
into a temporary folder renamed into place only once the install and ``--version`` succeeded;
the others wait on the lock and reuse it. Each install also gets a ``ralph-bin`` folder that
holds only the CLI's executable (a symlink), to put first on ``PATH``.

Bumping a CLI is a one-line change of :data:`~pytest_ralph.agents.proven.PROVEN`.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pytest_ralph.agents.proven import PROVEN, Proven

#: Seconds one install (npm or pip) may take before it counts as failed.
INSTALL_TIMEOUT = 900.0


class CliInstallError(RuntimeError):
    """The installer is present but installing the pinned CLI failed (the message has its
    output)."""


def cache_dir() -> Path:
    """The folder that holds the installs: ``$PYTEST_RALPH_CACHE`` or ``~/.cache/pytest-ralph``.

    Read at call time; ``pytester`` points ``HOME`` at its temporary folder, so call this from a
    session-scoped fixture.
    """
    env = os.environ.get("PYTEST_RALPH_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pytest-ralph"


def install_dir(name: str) -> Path:
    """The install folder of preset ``name``'s pinned CLI: ``<cache>/<name>-<version>``
    (``claude-code-<version>`` for claude, as before)."""
    pin = PROVEN[name]
    stem = "claude-code" if name == "claude" else name
    return cache_dir() / f"{stem}-{pin.version}"


def _binary(pin: Proven, prefix: Path) -> Path:
    if pin.registry == "npm":
        return prefix / "node_modules" / ".bin" / pin.executable
    return prefix / "bin" / pin.executable


def _version_ok(pin: Proven, exe: Path) -> str:
    """Why ``exe --version`` does not show the pinned release ('' when it does)."""
    try:
        out = subprocess.run([str(exe), "--version"], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=120, check=False,
                             env={**os.environ, "NO_COLOR": "1"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{exe} --version could not run: {exc}"
    if out.returncode != 0 or pin.version not in out.stdout + out.stderr:
        return (f"{exe} --version exited {out.returncode} with {out.stdout.strip()!r} "
                f"{out.stderr.strip()[-500:]!r}")
    return ""


def _installed(pin: Proven, prefix: Path) -> Path | None:
    """The CLI under ``prefix`` if it is a finished install (marker written last), else None."""
    exe = _binary(pin, prefix)
    marker = prefix / ".ralph-installed"
    if not (marker.is_file() and exe.exists() and os.access(exe, os.X_OK)):
        return None
    return exe


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode("utf-8", "replace")
    return output or ""


def _run(argv: list[str], env: dict[str, str] | None = None) -> None:
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT, check=False, env=env)
    except subprocess.TimeoutExpired as exc:
        raise CliInstallError(f"{' '.join(argv)} timed out after {INSTALL_TIMEOUT:.0f} s\n"
                              f"{_text(exc.stdout)}{_text(exc.stderr)}") from exc
    if proc.returncode != 0:
        raise CliInstallError(f"{' '.join(argv)} exited {proc.returncode}\n--- stdout ---\n"
                              f"{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}")


def _installer(pin: Proven) -> list[str] | None:
    """The installer's argv prefix, or None when it is missing (npm not on PATH)."""
    if pin.registry == "npm":
        npm = shutil.which("npm")
        return None if npm is None else [npm]
    return [sys.executable]


def installed_executable(name: str) -> Path | None:
    """Preset ``name``'s pinned CLI if it is already installed in the cache; never installs."""
    return _installed(PROVEN[name], install_dir(name))


def bin_dir(name: str) -> Path:
    """``<install>/ralph-bin``: a folder holding only the CLI's executable, for ``PATH``."""
    return install_dir(name) / "ralph-bin"


def cli_executable(name: str) -> Path | None:
    """Path of preset ``name``'s pinned real CLI; installs it if absent.

    Args:
        name: a key of :data:`~pytest_ralph.agents.proven.PROVEN` (``"codex"``, ``"aider"``...).

    Returns:
        The executable (inside the install, not the ``ralph-bin`` symlink), or None when it is
        not installed and its installer is missing (``npm`` not on ``PATH``): the caller skips
        with that reason, or fails under CI.

    Raises:
        CliInstallError: the installer is present but the install failed, timed out (after
            :data:`INSTALL_TIMEOUT` seconds), or left no executable whose ``--version`` shows
            the pinned release; the message carries the installer's output.
        OSError: the cache folder cannot be created or locked.
    """
    pin = PROVEN[name]
    target = install_dir(name)
    exe = _installed(pin, target)
    if exe is not None:
        return exe
    installer = _installer(pin)
    if installer is None:
        return None
    cache = target.parent
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".{target.name}.lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # waits while another worker installs
        exe = _installed(pin, target)
        if exe is not None:
            return exe
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=cache))
        try:
            if pin.registry == "npm":
                _run([*installer, "install", "--no-audit", "--no-fund", "--prefix",
                      str(staging), f"{pin.package}@{pin.version}"])
            else:
                # A virtualenv is not relocatable, so it is built at its final path; the
                # marker file written last keeps a half-finished one invisible.
                shutil.rmtree(staging, ignore_errors=True)
                staging = target
                shutil.rmtree(staging, ignore_errors=True)
                _run([*installer, "-m", "venv", str(staging)])
                _run([str(staging / "bin" / "python"), "-m", "pip", "install", "-q",
                      "--disable-pip-version-check", f"{pin.package}=={pin.version}"])
            problem = _version_ok(pin, _binary(pin, staging))
            if problem:
                raise CliInstallError(f"installing {pin.package}@{pin.version} succeeded but "
                                      f"{problem}")
            links = staging / "ralph-bin"
            links.mkdir(exist_ok=True)
            link = links / pin.executable
            if not link.is_symlink():
                link.symlink_to(_binary(pin, target))
            staging.chmod(0o755)  # mkdtemp made it private
            if staging != target:
                if target.exists() or target.is_symlink():  # a stale or foreign leftover
                    stale = Path(tempfile.mkdtemp(prefix=f".{target.name}-stale-", dir=cache))
                    os.replace(target, stale / "old")
                    shutil.rmtree(stale, ignore_errors=True)
                os.replace(staging, target)
            (target / ".ralph-installed").write_text(pin.version + "\n", encoding="utf-8")
        except BaseException:
            if staging == target:
                shutil.rmtree(target, ignore_errors=True)
            raise
        finally:
            if staging != target and staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    exe = _installed(pin, target)
    if exe is None:  # pragma: no cover - the install above just put it there
        raise CliInstallError(f"{target} has no usable {pin.executable} after installing")
    return exe
