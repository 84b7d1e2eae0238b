"""Install the Claude Code Stop hook in the right one of a project's two settings files.

Claude Code reads hooks from ``.claude/settings.json`` (the project's settings, committed and
shared with the team) and ``.claude/settings.local.json`` (personal, not committed), and runs
every matching handler of both (https://code.claude.com/docs/en/settings,
https://code.claude.com/docs/en/hooks). :func:`install_hook` picks the file (the *scope*),
writes the command that fits it and leaves exactly one copy of our hook:

- ``local`` (the default for a project without the hook): ``settings.local.json``, with this
  machine's interpreter (:func:`~pytest_ralph.claude.settings_file.hook_command`). Like Claude
  Code when it creates that file, git is told to ignore it (:func:`exclude_from_git`: a line
  in the clone's own ``.git/info/exclude``, never the committed ``.gitignore``).
- ``project``: ``settings.json``, with a command that names no path of this machine
  (:func:`~pytest_ralph.claude.settings_file.project_hook_command`).

With no scope asked for, an existing install is upgraded where it is (in ``settings.json`` a
machine-path command becomes the portable one; a portable one already there is kept, so that
a teammate's ``--ralph-init`` does not rewrite the shared file); a scope asked for moves it.
A hook in both files is reduced to one. A command of the user's own (wrapped: see
:func:`~pytest_ralph.claude.settings_file.is_plain_hook_command`) is never rewritten, moved
or removed. Both files are read and checked before either is written: a file that cannot be
understood raises :class:`~pytest_ralph.claude.settings_file.SettingsFileError` and neither is
changed.

Standard library only; does not import pytest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..util.git import git_env
from .settings_file import (
    HOOK_SCRIPT,
    hook_command,
    is_machine_command,
    is_plain_hook_command,
    is_ralph_hook_command,
    merge_stop_hook,
    project_hook_command,
    read_settings,
    remove_stop_hook,
    stop_groups,
)

#: The scopes of ``--ralph-hook-scope`` / ini ``ralph_hook_scope``.
SCOPES = ("local", "project")

#: The settings file of each scope, relative to the project root.
SETTINGS_FILES = {"project": Path(".claude") / "settings.json",
                  "local": Path(".claude") / "settings.local.json"}

#: Seconds each git command may take.
GIT_TIMEOUT = 10.0


@dataclass
class Installed:
    """What :func:`install_hook` did.

    Attributes:
        scope: the scope the hook is in now (``"local"`` or ``"project"``).
        lines: one line per thing done or worth knowing, without the ``pytest-ralph:`` prefix.
        warnings: lines that are warnings (git could not be told to ignore the local file).
    """

    scope: str
    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def settings_path(rootdir: Path, scope: str) -> Path:
    """``<rootdir>/.claude/settings.json`` (``project``) or ``settings.local.json``
    (``local``)."""
    return Path(rootdir) / SETTINGS_FILES[scope]


def our_commands(path: Path) -> list[str]:
    """The commands of the Stop handlers in ``path`` that run our hook, in order (none when the
    file is missing).

    Raises:
        SettingsFileError: the file cannot be read or understood
            (:func:`~pytest_ralph.claude.settings_file.read_settings`, ``stop_groups``).
    """
    settings = read_settings(path)
    out: list[str] = []
    for group in stop_groups(path, settings, create=False) or ():
        for handler in group.get("hooks") or ():
            command = handler.get("command") if isinstance(handler, dict) else None
            if isinstance(command, str) and is_ralph_hook_command(command):
                out.append(command)
    return out


def install_hook(rootdir: Path, *, python: str, scope: str | None = None,
                 windows: bool = os.name == "nt") -> Installed:
    """Install (or upgrade, move or de-duplicate) our Stop hook; see the module docstring.

    Args:
        rootdir: the project root (Claude Code's project folder).
        python: the interpreter the hook runs (``sys.executable``, not resolved).
        scope: ``"local"``, ``"project"``, or ``None``: where the hook already is
            (``settings.json`` when it is in both), else ``local``.
        windows: quote the commands for Windows.

    Returns:
        An :class:`Installed`.

    Raises:
        ValueError: ``scope`` is not one of :data:`SCOPES`, or (Windows) the interpreter path
            cannot be quoted (:func:`~pytest_ralph.claude.settings_file.hook_command`).
        SettingsFileError: either settings file cannot be read, understood or written;
            nothing was written when it is a reading problem.
    """
    if scope is not None and scope not in SCOPES:
        raise ValueError(f"the hook scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    root = Path(rootdir)
    files = {s: settings_path(root, s) for s in SCOPES}
    found = {s: our_commands(files[s]) for s in SCOPES}  # both read before anything is written
    wrapped = [s for s in SCOPES if any(not is_plain_hook_command(c) for c in found[s])]
    if wrapped:
        return _keep_wrapped(root, files, found, wrapped, scope)
    target = scope or ("project" if found["project"] else "local")
    other = "project" if target == "local" else "local"
    if target == "local":
        command = hook_command(python, windows=windows)
    else:  # a portable command already shared with the team is kept: no churn in its file
        shared = [c for c in found["project"] if not is_machine_command(c)]
        command = shared[0] if shared else project_hook_command(python, root, windows=windows)
    done = Installed(target)
    merged = merge_stop_hook(files[target], command)
    done.lines.append(f"{merged.message} ({_describe(target)})")
    changed = merged.changed or bool(found[other])
    if found[other]:
        removed = remove_stop_hook(files[other])
        if found[target]:
            done.lines.append(f"the hook was in both settings files, and Claude Code runs "
                              f"both copies on every stop: {removed.message}")
        else:
            done.lines.append(f"moved it to the {target} scope: {removed.message}")
    if target == "project" and changed:
        if command == HOOK_SCRIPT:
            on_path = "" if shutil.which(HOOK_SCRIPT) else (
                f" (it is not on this PATH either: add the folder of {python}'s scripts)")
            done.lines.append(
                f"the command is the console script {HOOK_SCRIPT}, because {python} is not "
                f"inside {root}: every teammate needs pytest-ralph installed with "
                f"{HOOK_SCRIPT} on the PATH Claude Code runs with{on_path}")
        elif "CLAUDE_PROJECT_DIR" in command:
            done.lines.append("the command names the interpreter inside the project through "
                              "$CLAUDE_PROJECT_DIR, so every clone with that virtual "
                              "environment runs it")
    elif target == "local":
        _exclude(root, files["local"], done)
    return done


def _keep_wrapped(root: Path, files: dict[str, Path], found: dict[str, list[str]],
                  wrapped: list[str], scope: str | None) -> Installed:
    """The user's own command runs our hook: it is kept where it is, and plain copies in the
    other file (which would double it) are removed."""
    keep = scope if scope in wrapped else wrapped[0]
    done = Installed(keep)
    for s in wrapped:
        command = next(c for c in found[s] if not is_plain_hook_command(c))
        done.lines.append(f"a Stop hook of yours that runs pytest-ralph's hook ({command!r}) "
                          f"is in {files[s]}; it is kept as it is (`pytest --ralph-doctor` "
                          "checks that it works)")
    if len(wrapped) == 2:
        done.warnings.append(f"both {files['project']} and {files['local']} hold a Stop hook "
                             "of yours that runs pytest-ralph's hook, and Claude Code runs "
                             "both on every stop: remove one by hand")
    for s in SCOPES:
        if s not in wrapped and found[s]:
            removed = remove_stop_hook(files[s])
            done.lines.append(f"the hook was in both settings files, and Claude Code runs "
                              f"both copies on every stop: {removed.message}")
    if scope is not None and scope not in wrapped:
        done.lines.append(f"it is not moved to {files[scope]} (--ralph-hook-scope {scope}): "
                          "it is your own command; move it by hand")
    if "local" in wrapped:
        _exclude(root, files["local"], done)
    return done


def _describe(scope: str) -> str:
    if scope == "local":
        return "local scope: this machine's interpreter, in the file git does not share"
    return "project scope: a command for every clone, in the file the team shares"


def _exclude(root: Path, local: Path, done: Installed) -> None:
    """Tell git to ignore the local settings file, recording what was done in ``done``."""
    try:
        line = exclude_from_git(root, local)
    except GitExcludeError as exc:
        done.warnings.append(str(exc))
        return
    if line:
        done.lines.append(line)


class GitExcludeError(Exception):
    """git could not be asked, or told, to ignore the local settings file (a warning: the hook
    works either way)."""


def exclude_from_git(root: Path, path: Path) -> str:
    """Make git ignore ``path`` (in the work tree of ``root``) when it does not already: append
    its path, relative to the top of the work tree, to the clone's ``info/exclude`` (which is
    never committed; the ``.gitignore`` files are left alone).

    git runs with a timeout of :data:`GIT_TIMEOUT` seconds, no terminal prompt and no stdin.

    Args:
        root: a folder of the work tree (the project root).
        path: the file to ignore (usually ``<root>/.claude/settings.local.json``).

    Returns:
        One line saying what was added where; ``""`` when there was nothing to do (``root``
        is in no git work tree, git is not installed, or ``path`` is ignored already).

    Raises:
        GitExcludeError: git failed or timed out, or the exclude file cannot be written.
    """
    top = _git(root, "rev-parse", "--show-toplevel", missing_ok=True)
    if top is None:
        return ""
    top_dir = Path(top.strip())
    real = Path(os.path.realpath(path.parent)) / path.name
    try:
        rel = real.relative_to(Path(os.path.realpath(top_dir))).as_posix()
    except ValueError:
        return ""  # not under the work tree git found
    if _git(top_dir, "check-ignore", "-q", "--", rel, ok=(0, 1), want_status=True) == "0":
        return ""
    where = _git(top_dir, "rev-parse", "--git-path", "info/exclude")
    assert where is not None
    exclude = Path(where.strip())
    if not exclude.is_absolute():
        exclude = top_dir / exclude
    entry = _pattern(rel)
    try:
        try:
            before = exclude.read_bytes()
        except FileNotFoundError:
            before = b""
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with exclude.open("ab") as out:
            sep = b"\n" if before and not before.endswith(b"\n") else b""
            out.write(sep + (entry + "\n").encode("utf-8"))
    except OSError as exc:
        raise GitExcludeError(f"git still sees {path}: {exclude} cannot be written "
                              f"({exc.strerror or exc}); add the line {entry} to it, or to "
                              ".gitignore, by hand") from exc
    return (f"added {entry} to {exclude}, so that git ignores this machine's hook settings "
            "(that file belongs to this clone only; .gitignore is unchanged)")


def _pattern(rel: str) -> str:
    """``rel`` as an exclude pattern that matches that one path: wildcard characters, a
    leading ``#`` or ``!`` and trailing spaces escaped; a ``/`` inside anchors it to the top."""
    out = "".join("\\" + ch if ch in "*?[\\" else ch for ch in rel)
    if out.startswith(("#", "!")):
        out = "\\" + out
    stripped = out.rstrip(" ")
    out = stripped + "\\ " * (len(out) - len(stripped))
    return out if "/" in rel else "/" + out


def _git(cwd: Path, *args: str, ok: tuple[int, ...] = (0,), missing_ok: bool = False,
         want_status: bool = False) -> str | None:
    """Run ``git -C cwd <args>`` safely; its stdout (or, with ``want_status``, its exit
    status as text).

    Returns:
        ``None`` with ``missing_ok`` when git is not installed or ``cwd`` is in no work tree.

    Raises:
        GitExcludeError: git timed out, could not start, or exited with a status not in ``ok``.
    """
    env = git_env()
    env.update(GIT_ASKPASS="", SSH_ASKPASS="")
    argv = ["git", "-C", str(cwd), *args]
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=GIT_TIMEOUT, env=env, check=False)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise GitExcludeError("git is not installed, so .claude/settings.local.json could "
                              "not be added to .git/info/exclude") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitExcludeError(f"`git {' '.join(args)}` in {cwd} failed ({exc}), so git may "
                              "still see .claude/settings.local.json: add it to "
                              ".gitignore or .git/info/exclude by hand") from exc
    if proc.returncode not in ok:
        stderr = proc.stderr.decode("utf-8", "replace").strip()
        if missing_ok and proc.returncode == 128 and (
                "not a git repository" in stderr or "must be run in a work tree" in stderr):
            return None
        raise GitExcludeError(f"`git {' '.join(args)}` in {cwd} exited {proc.returncode}"
                              f"{': ' + stderr.splitlines()[-1] if stderr else ''}, so git may "
                              "still see .claude/settings.local.json: add it to "
                              ".gitignore or .git/info/exclude by hand")
    if want_status:
        return str(proc.returncode)
    return proc.stdout.decode("utf-8", "surrogateescape")
