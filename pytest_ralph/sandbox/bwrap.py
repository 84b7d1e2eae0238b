"""The sandbox: confine each agent run and each check phase with bubblewrap (Linux).

``ralph_sandbox`` (ini; environment ``PYTEST_RALPH_SANDBOX``; ``--ralph-sandbox``) says
whether the loop confines the processes that may run code the agent wrote:

- ``auto`` (the default): confine them where bubblewrap works (:func:`probe` tries it once),
  run them unconfined elsewhere, and say which in the loop's first line and the report;
- ``required``: bubblewrap must work; its absence is a usage error (exit 4);
- ``off``: never confine.

A confined command runs under ``bwrap`` (Debian's ``bubblewrap`` package, 0.8.0 and later)
with the whole file system read-only (``--ro-bind / /``), a private home folder (your files in
it read-only, new ones gone after the run: :attr:`Confinement.home`), except what
:class:`Confinement` lists as writable (bound read-write over it, in order), then read-only
again what it lists as read-only inside those (the state folder, a virtualenv inside the
project, the files that judge the agent's work), a private ``/tmp`` and ``/var/tmp``
(``--tmpfs``; ``TMPDIR`` points there), a fresh ``/dev`` and ``/proc``, and an empty ``/run``
(no socket of systemd, D-Bus, Docker or the desktop session: each could start a program
outside the sandbox). It keeps the network (no ``--unshare-net``: agent CLIs talk to their
model). It runs in a PID namespace of its own (``--unshare-pid``): every process it starts
dies with it, ``setsid`` or not, and it cannot see or signal the loop's processes. It drops
every capability and cannot make user namespaces (``--cap-drop ALL --unshare-user
--disable-userns``): as root, bubblewrap keeps root's capabilities otherwise (``mknod`` of a
block device, ``mount``). ``--die-with-parent`` ends it if the loop dies.

Two confinements use it (built by the loop, see :func:`agent_confinement` and
:func:`check_confinement`):

- an **agent run** may write the project folder and the agent CLI's own config and cache
  folders (:data:`CLI_STATE_PATHS`, found per preset), plus ``ralph_sandbox_writable``;
- a **check phase** (the child pytest and everything it starts, the code under test
  included) may write the project folder less the files that judge it (the PRD, the guarded
  tests, conftest and configuration files), its private results folder, and
  ``ralph_sandbox_writable``; the bytecode folder it reads is read-only to it.

This module does not import pytest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Values of ``ralph_sandbox``.
SANDBOX_MODES = ("auto", "required", "off")

#: The bubblewrap executable looked up on PATH.
BWRAP = "bwrap"

#: Seconds the probe (``bwrap ... true``) may take.
PROBE_TIMEOUT = 20.0

#: How to install bubblewrap, for messages.
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"

#: The folders and files (relative to the home folder) each agent CLI writes its own
#: configuration, credentials, sessions and caches to, by preset name; an environment
#: variable that moves them (``CLAUDE_CONFIG_DIR``, ``CODEX_HOME``...) is honoured by
#: :func:`cli_state_paths`. Read from each CLI's documentation (2026-11): Claude Code
#: (code.claude.com/docs "Claude Code settings": ``~/.claude``, ``~/.claude.json``), Codex
#: (developers.openai.com/codex config: ``$CODEX_HOME``, default ``~/.codex``), Gemini CLI
#: (``~/.gemini``), opencode (XDG: ``~/.local/share/opencode``, ``~/.config/opencode``,
#: ``~/.cache/opencode``, ``~/.local/state/opencode``), aider (``~/.aider``: caches and
#: analytics; its chat history is in the project), amp, goose and cursor-agent (their XDG
#: folders and ``~/.cursor``).
CLI_STATE_PATHS: dict[str, tuple[str, ...]] = {
    "claude": (".claude", ".claude.json", ".claude.json.backup", ".cache/claude",
               ".local/state/claude", ".local/share/claude"),
    "codex": (".codex",),
    "gemini": (".gemini",),
    "opencode": (".local/share/opencode", ".config/opencode", ".cache/opencode",
                 ".local/state/opencode"),
    "aider": (".aider", ".cache/aider"),
    "amp": (".config/amp", ".local/share/amp", ".cache/amp", ".local/state/amp"),
    "goose": (".config/goose", ".local/share/goose", ".local/state/goose", ".cache/goose"),
    "cursor-agent": (".cursor", ".config/cursor", ".local/share/cursor-agent",
                     ".cache/cursor-agent"),
}

#: Environment variables that move a CLI's whole state folder: preset -> (variable, the
#: entry of :data:`CLI_STATE_PATHS` it replaces).
CLI_STATE_ENV: dict[str, tuple[str, str]] = {
    "claude": ("CLAUDE_CONFIG_DIR", ".claude"),
    "codex": ("CODEX_HOME", ".codex"),
    "gemini": ("GEMINI_CLI_HOME", ".gemini"),
}

#: The folder inside a moving variable's folder that holds the state, where the variable
#: names a home rather than the state folder itself: ``GEMINI_CLI_HOME`` replaces the home
#: folder and the state is ``$GEMINI_CLI_HOME/.gemini`` (Gemini CLI's configuration docs;
#: seen with 0.61.0), so only that sub-folder is made writable, never the whole home.
CLI_STATE_ENV_INSIDE: dict[str, str] = {"gemini": ".gemini"}


class SandboxError(Exception):
    """``ralph_sandbox = required`` and bubblewrap cannot confine a command here. The message
    says why and how to fix it."""


@dataclass(frozen=True)
class Sandbox:
    """The loop's sandbox, as :func:`probe` found it.

    Attributes:
        mode: the ``ralph_sandbox`` value (one of :data:`SANDBOX_MODES`).
        source: where the mode came from (``"default"``, ``"ini ralph_sandbox (tox.ini)"``).
        bwrap: the absolute path of ``bwrap`` when commands are confined, else ``None``.
        version: what ``bwrap --version`` printed (``"bubblewrap 0.8.0"``), or ``""``.
        reason: when not confined, why (one clause, e.g. ``"ralph_sandbox = off (default)"``);
            ``""`` when confined.
        writable: the extra writable paths of ``ralph_sandbox_writable`` (absolute).
    """

    mode: str
    source: str = "default"
    bwrap: str | None = None
    version: str = ""
    reason: str = ""
    writable: tuple[Path, ...] = ()

    @property
    def confined(self) -> bool:
        """Whether agent runs and check phases run under bubblewrap."""
        return self.bwrap is not None

    def describe(self) -> str:
        """One clause for the loop's first line and the report: ``confined by bubblewrap
        0.8.0`` or ``NOT confined (ralph_sandbox = off from --ralph-sandbox)``."""
        if self.confined:
            return f"confined by {self.version or 'bubblewrap'}"
        return f"NOT confined ({self.reason})"


#: What :func:`probe` found per bwrap path, so that a process probes once.
_probed: dict[str, tuple[str, str]] = {}


#: Environment variables a confined command does not get: they point at sockets of the
#: desktop session (a D-Bus session bus can start programs outside the sandbox; an X11 or
#: Wayland display can type into your terminal) or of an ssh or gpg agent.
HIDDEN_ENV = ("DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY",
              "SSH_AUTH_SOCK", "GPG_AGENT_INFO", "DOCKER_HOST")


def base_args(bwrap: str) -> list[str]:
    """The options every confined command gets (before its binds): see the module docstring.

    ``/run`` (where the sockets of systemd, D-Bus, Docker and the user's session live: any of
    them could start a program outside the sandbox) is an empty private folder too, but for
    the folder ``/etc/resolv.conf`` points into, if it does (systemd-resolved), bound back
    read-only so that names still resolve."""
    args = [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-user",
            "--disable-userns", "--cap-drop", "ALL", "--ro-bind", "/", "/", "--dev", "/dev",
            "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
    if os.path.isdir("/run"):
        args += ["--tmpfs", "/run"]
        resolv = os.path.realpath("/etc/resolv.conf")
        if resolv.startswith("/run/") and os.path.exists(resolv):
            folder = os.path.dirname(resolv)
            args += ["--ro-bind", folder, folder]
    home = os.path.expanduser("~")
    xauth = os.path.join(home, ".Xauthority")
    if os.path.isfile(xauth):
        args += ["--ro-bind", "/dev/null", xauth]
    for name in HIDDEN_ENV:
        args += ["--unsetenv", name]
    return args


def probe(mode: str, *, source: str = "default", writable: Sequence[Path] = (),
          env: Mapping[str, str] | None = None, what: str = "the agent") -> Sandbox:
    """Whether commands can be confined here, for the setting ``mode``.

    ``off`` confines nothing. Otherwise bubblewrap must be on ``PATH`` (of ``env``, default
    ``os.environ``) and must run ``true`` with :func:`base_args` (the kernel may refuse user
    or PID namespaces, as in some containers). The answer is cached per ``bwrap`` path.

    Args:
        mode: one of :data:`SANDBOX_MODES`.
        source: where ``mode`` came from, for messages.
        writable: ``ralph_sandbox_writable`` (absolute paths).
        env: the environment whose ``PATH`` finds ``bwrap``.
        what: who would be confined, for the message of ``required`` (``"the agent"``; the
            merge queue's gate: ``"the gate (the lanes' code)"``).

    Raises:
        SandboxError: ``mode`` is ``required`` and bubblewrap cannot confine a command.
    """
    shown = f"ralph_sandbox = {mode} from {source}" if source != "default" else \
        f"ralph_sandbox = {mode} (default)"
    if mode == "off":
        return Sandbox(mode, source, reason=shown, writable=tuple(writable))
    why = ""
    found: str | None = None
    version = ""
    if not sys.platform.startswith("linux"):
        why = f"bubblewrap confines commands on Linux only, not on {sys.platform}"
    else:
        path = (env if env is not None else os.environ).get("PATH")
        found = shutil.which(BWRAP, path=path)
        if found is None:
            why = f"bwrap is not installed ({INSTALL_HINT})"
        else:
            found = os.path.realpath(found)
            if found not in _probed:
                _probed[found] = _try(found)
            version, why = _probed[found]
    if why:
        if mode == "required":
            raise SandboxError(f"{shown}, but {what} cannot be confined: {why}; install or "
                               "repair bubblewrap, or set ralph_sandbox = auto (or off) to run "
                               f"{what} unconfined")
        return Sandbox(mode, source, reason=f"{why}; {shown}", writable=tuple(writable))
    return Sandbox(mode, source, bwrap=found, version=version, writable=tuple(writable))


def _try(bwrap: str) -> tuple[str, str]:
    """(version, why it does not work) of ``bwrap``; ``why`` is ``""`` when it works."""
    try:
        done = subprocess.run([*base_args(bwrap), "--", "true"], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=PROBE_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return "", f"bwrap ({bwrap}) cannot run: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return "", (f"bwrap ({bwrap}) cannot make a sandbox here (exit {done.returncode}: "
                    f"{said[-1] if said else 'no message'}); the kernel may forbid user "
                    "namespaces (kernel.unprivileged_userns_clone, or a container's seccomp "
                    "profile)")
    try:
        out = subprocess.run([bwrap, "--version"], stdin=subprocess.DEVNULL,
                             capture_output=True, timeout=PROBE_TIMEOUT, check=False)
        version = out.stdout.decode("utf-8", "replace").strip()
    except (OSError, subprocess.SubprocessError):
        version = ""
    return version or "bubblewrap", ""


@dataclass(frozen=True)
class Confinement:
    """What one confined command may write.

    Attributes:
        chdir: the working directory inside the sandbox.
        writable: paths bound read-write, in this order (a path that does not exist is
            skipped).
        readonly: paths bound read-only again after the writable ones (the ones inside a
            writable path are what matter; a path that does not exist is skipped).
        env: environment variables set inside (``TMPDIR=/tmp`` always).
        what: who is confined, for messages: ``"the agent"``, ``"the check phase"``.
        enclosing: paths bound read-only in the same pass as the writable ones, parents before
            children, so that a writable path inside one stays writable (the state folder
            around the merge queue's integration worktree; the user's working tree and the
            repository's ``.git`` around it); a path that does not exist is skipped.
        home: the home folder, made private: an empty folder of its own at the same path
            (``--tmpfs``), in which each entry of the real one is bound back read-only (a
            symbolic link as a link), before the writable paths. A program may then create
            files there (a lock folder and a temporary file beside ``~/.claude.json``, which
            Claude Code needs to save it), and they are gone after the run; it can change
            none of yours. ``None``: the home folder is read-only like the rest.
    """

    chdir: Path
    writable: tuple[Path, ...] = ()
    readonly: tuple[Path, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    what: str = "the agent"
    home: Path | None = None
    enclosing: tuple[Path, ...] = ()


def wrap(sandbox: Sandbox, argv: Sequence[str], confinement: Confinement) -> list[str]:
    """``argv`` run under bubblewrap with ``confinement``; ``argv`` unchanged when the
    sandbox does not confine.

    Paths are bound at their resolved location (symbolic links in the way are read-only
    links to it). A writable path nested in another is bound after it, and so is one nested
    in an enclosing read-only path (:attr:`Confinement.enclosing`, bound in the same pass,
    read-only first for the same path); read-only paths come last, so a read-only path
    inside a writable one stays read-only.
    """
    if sandbox.bwrap is None:
        return list(argv)
    args = base_args(sandbox.bwrap)
    if confinement.home is not None:
        args += _private_home(confinement.home)
    writable = _ordered(confinement.writable)
    enclosing = set(_ordered(confinement.enclosing))
    for path in sorted(enclosing | set(writable),
                       key=lambda s: (s.count(os.sep), s not in enclosing, s)):
        args += ["--ro-bind-try" if path in enclosing and path not in writable else
                 "--bind-try", path, path]
    for path in _outermost(_ordered(confinement.readonly), writable):
        args += ["--ro-bind-try", path, path]
    # pytest's own temporary folders (tmp_path) go to a folder of the private /tmp: a pytest
    # run inside sees none of the real /tmp/pytest-of-<user> locks, and would take a real
    # folder bound in there (a project kept under a pytest temporary folder) for an old one
    # of its own to delete.
    args += ["--setenv", "TMPDIR", "/tmp", "--dir", PYTEST_TEMPROOT,
             "--setenv", "PYTEST_DEBUG_TEMPROOT", PYTEST_TEMPROOT]
    for name, value in confinement.env:
        args += ["--setenv", name, value]
    args += ["--chdir", str(confinement.chdir), "--", *argv]
    return args


def _private_home(home: Path) -> list[str]:
    """The options that make ``home`` private (see :attr:`Confinement.home`); none when it
    is not an absolute folder other than ``/``."""
    real = os.path.realpath(home)
    if real == os.sep or not os.path.isabs(real) or not os.path.isdir(real):
        return []
    args = ["--tmpfs", real]
    try:
        entries = sorted(os.listdir(real))
    except OSError:
        return args
    for name in entries:
        path = os.path.join(real, name)
        if os.path.islink(path):
            try:
                args += ["--symlink", os.readlink(path), path]
            except OSError:
                continue
        else:
            args += ["--ro-bind-try", path, path]
    return args


def _outermost(readonly: list[str], writable: list[str]) -> list[str]:
    """``readonly`` (ordered, see :func:`_ordered`) less the paths already read-only through
    a folder of the list, with no writable path between them: a guarded test folder stands
    for its thousand files."""
    out: list[str] = []
    for path in readonly:
        ancestors = [ro for ro in out if path.startswith(ro.rstrip(os.sep) + os.sep)]
        if ancestors and not any(path.startswith(w.rstrip(os.sep) + os.sep) and
                                 w.startswith(max(ancestors, key=len).rstrip(os.sep) + os.sep)
                                 for w in writable):
            continue
        out.append(path)
    return out


def exit_status(code: int | None) -> int | None:
    """The exit status of a command bubblewrap ran, as :mod:`subprocess` gives one: bwrap
    exits ``128 + N`` for a command killed by signal ``N`` (its own PID 1 reports it so), so
    ``129..159`` becomes ``-N``. (A command that exits 137 by itself reads as killed: a
    shell reports a signal the same way.)"""
    if code is not None and 128 < code < 160:
        return -(code - 128)
    return code


def _ordered(paths: Iterable[Path]) -> list[str]:
    """Resolved paths, parents before children, without duplicates."""
    out: dict[str, None] = {}
    for p in paths:
        try:
            out[os.path.realpath(p)] = None
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda s: (s.count(os.sep), s))


def cli_state_paths(preset: str | None, env: Mapping[str, str] | None = None,
                    home: Path | None = None) -> list[Path]:
    """The folders and files the agent CLI of ``preset`` writes its own state to (see
    :data:`CLI_STATE_PATHS`), absolute; empty for a command line that is not a preset.

    Args:
        preset: the preset name, or ``None``.
        env: the agent's environment (``CLAUDE_CONFIG_DIR``, ``CODEX_HOME``, ``HOME``...);
            default ``os.environ``.
        home: the home folder; default ``$HOME`` of ``env``, else ``~``.
    """
    if preset is None or preset not in CLI_STATE_PATHS:
        return []
    env = os.environ if env is None else env
    base = home or Path(env.get("HOME") or os.path.expanduser("~"))
    moved = CLI_STATE_ENV.get(preset)
    out: list[Path] = []
    for rel in CLI_STATE_PATHS[preset]:
        if moved is not None and rel == moved[1] and env.get(moved[0], "").strip():
            inside = CLI_STATE_ENV_INSIDE.get(preset, "")
            out.append(Path(env[moved[0]]).expanduser() / inside)
        else:
            out.append(base / rel)
    return out


def prepare_state_paths(paths: Iterable[Path]) -> None:
    """Make the folders among ``paths`` that do not exist yet (mode 0700), so that they can
    be bound writable: a path whose last part has a dot-suffix (``.claude.json``) is taken
    for a file and left alone (bound only when it exists). Errors are ignored: such a path is
    then not writable inside."""
    for path in paths:
        if path.exists() or "." in path.name.lstrip("."):
            continue
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            continue


#: Folders a confined command gets a private, empty copy of (``--tmpfs``).
PRIVATE_FOLDERS = ("/tmp", "/var/tmp")

#: The root of pytest's temporary folders inside a confined command
#: (``PYTEST_DEBUG_TEMPROOT``), in its private ``/tmp``.
PYTEST_TEMPROOT = "/tmp/pytest-ralph-temproot"


def command_paths(argv: Sequence[str], project: Path) -> tuple[list[Path], list[Path]]:
    """(writable, read-only) paths that keep the agent command's own files reachable under
    the private ``/tmp``: for each word of ``argv`` that is an existing absolute path in
    :data:`PRIVATE_FOLDERS`, its folder of its own (``/tmp/agent-x1/``, the word itself when
    it is a folder, else the file's folder) is writable, unless that folder is a private
    folder itself or holds the project (its parent must stay read-only: a configuration file
    there would configure the checks), in which case only the path itself is bound,
    read-only (so is a path in or around this Python environment's folders). A scripted
    agent's script and call log (:mod:`pytest_ralph.testing`) live there."""
    root = os.path.realpath(project)
    writable: list[Path] = []
    readonly: list[Path] = []
    environment = [os.path.realpath(p) for p in _environment_folders()]
    for word in argv:
        for part in word.split("="):
            if not part.startswith(tuple(f"{p}/" for p in PRIVATE_FOLDERS)):
                continue
            real = os.path.realpath(part)
            if not os.path.exists(real):
                continue
            folder = real if os.path.isdir(real) else os.path.dirname(real)
            if folder in PRIVATE_FOLDERS or root == folder or root.startswith(
                    folder.rstrip(os.sep) + os.sep) or any(
                    folder == e or folder.startswith(e.rstrip(os.sep) + os.sep) or
                    e.startswith(folder.rstrip(os.sep) + os.sep) for e in environment):
                readonly.append(Path(real))
            else:
                writable.append(Path(folder))
    return writable, readonly


def agent_confinement(sandbox: Sandbox, *, project: Path, state_dir: Path,
                      cli_paths: Sequence[Path] = (), readonly: Sequence[Path] = (),
                      argv: Sequence[str] = ()) -> Confinement:
    """The confinement of an agent run: it may write ``project``, the CLI's own state
    (``cli_paths``), the folder of its own command files under ``/tmp`` (:func:`command_paths`
    of ``argv``) and ``ralph_sandbox_writable``; ``state_dir`` (the loop's state folder), a
    virtualenv inside the project and ``readonly`` stay read-only."""
    own_rw, own_ro = command_paths(argv, project)
    ro = [*own_ro, state_dir, *_environment_inside(project), *_environment_hidden(project),
          *readonly]
    return Confinement(chdir=project, writable=(project, *cli_paths, *own_rw,
                                                *sandbox.writable),
                       readonly=tuple(ro), what="the agent", home=_home())


def check_confinement(sandbox: Sandbox, *, project: Path, state_dir: Path,
                      results: Path, judges: Sequence[Path], pycache: Path | None,
                      around: Sequence[Path] = ()) -> Confinement:
    """The confinement of a check phase: it may write ``project`` less ``judges`` (the PRD,
    the guarded files and folders), its private ``results`` folder and
    ``ralph_sandbox_writable``; the state folder, the bytecode folder ``pycache``, a
    virtualenv inside the project and ``around`` stay read-only.

    A ``project`` inside the state folder (the merge queue's integration worktree) stays
    writable: the state folder is then bound read-only around it
    (:attr:`Confinement.enclosing`), as ``around`` is (the user's working tree and the
    repository's ``.git`` folder, around or beside the worktree)."""
    root = os.path.realpath(project)
    state = os.path.realpath(state_dir)
    inside_state = root.startswith(state.rstrip(os.sep) + os.sep)
    ro = [*([] if inside_state else [state_dir]), *_environment_inside(project),
          *_environment_hidden(project), *judges]
    if pycache is not None:
        ro.append(pycache)
    return Confinement(chdir=project, writable=(project, results, *sandbox.writable),
                       readonly=tuple(ro), what="the check phase", home=_home(),
                       enclosing=(*around, *([state_dir] if inside_state else [])))


def _home() -> Path | None:
    """``$HOME``, when it is an absolute folder."""
    home = os.environ.get("HOME", "")
    return Path(home) if os.path.isabs(home) and os.path.isdir(home) else None


def _environment_folders() -> list[str]:
    """This Python environment's folders: its prefixes, the interpreter's folder,
    site-packages and the folders of ``sys.path`` (existing ones, absolute)."""
    import sysconfig

    from ..oracle.judges import site_folders

    found = [sys.prefix, sys.exec_prefix, sys.base_prefix, os.path.dirname(sys.executable),
             os.path.dirname(os.path.realpath(sys.executable)),
             sysconfig.get_paths().get("scripts", ""), *site_folders(),
             *(p for p in sys.path if isinstance(p, str) and os.path.isabs(p))]
    return [f for f in dict.fromkeys(found) if f and os.path.isdir(f)]


def _environment_hidden(project: Path) -> list[Path]:
    """The folders of this Python environment that the private ``/tmp`` would hide (a
    virtualenv or tox environment made in ``/tmp``), outside the project: bound back,
    read-only, so that the interpreter and its packages are there."""
    root = os.path.realpath(project)
    out = []
    for folder in _environment_folders():
        real = os.path.realpath(folder)
        if not real.startswith(tuple(f"{p}/" for p in PRIVATE_FOLDERS)):
            continue
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep) or \
                root.startswith(real.rstrip(os.sep) + os.sep):
            continue  # the project's own folder, or one holding it: never read-only here
        out.append(Path(real))
    return out


def _environment_inside(project: Path) -> list[Path]:
    """The folders of this Python environment that lie inside ``project`` (a ``.venv`` in
    the project, site-packages, the user site, and pytest-ralph's own package folder when it
    is installed from a folder of the project): an agent must not plant ``.pth`` files or
    plugins there, nor edit the loop's own code."""
    import sysconfig

    from ..oracle.judges import site_folders

    root = os.path.realpath(project)
    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # pytest_ralph/
    candidates = {sys.prefix, sys.exec_prefix, sysconfig.get_paths().get("scripts", ""),
                  *site_folders(), own}
    out = []
    for c in sorted(x for x in candidates if x):
        real = os.path.realpath(c)
        if real != root and real.startswith(root.rstrip(os.sep) + os.sep):
            out.append(Path(real))
    return out
