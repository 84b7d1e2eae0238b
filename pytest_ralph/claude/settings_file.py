"""Arm and disarm the Claude Code Stop hook in one settings file of a project
(``.claude/settings.json`` or ``.claude/settings.local.json``).

Standard library only; does not import pytest. :mod:`pytest_ralph.claude.install` (for
``pytest --ralph-init --ralph-driver claude``) chooses the file and the command
(:func:`hook_command`, or :func:`project_hook_command` for the shared file) and calls
:func:`merge_stop_hook` and :func:`remove_stop_hook`.

The settings shape, from the Claude Code hooks reference
(https://code.claude.com/docs/en/hooks, formerly https://docs.claude.com/en/docs/claude-code/hooks)::

    {
      "hooks": {
        "Stop": [
          {"hooks": [{"type": "command", "command": "<python> -m pytest_ralph.hook",
                      "timeout": 600}]}
        ]
      }
    }

* ``hooks.<Event>`` is a list of groups; each group has an optional ``matcher`` and a list of
  handlers under ``hooks``. ``Stop`` (like ``UserPromptSubmit`` and ``SubagentStop``) does not
  use matchers, and the reference says the ``matcher`` field can be omitted, so we write none.
* ``timeout`` is optional and in **seconds** (the default for a command hook is 600).
* ``command`` runs through a shell, so the interpreter path is quoted (see :func:`hook_command`).

Every other key of the file, every other event and every other Stop handler is kept. A file
that cannot be understood raises :class:`SettingsFileError` and is never written.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..util.files import NotRegularFile, read_bytes
from .payload import json_kind

#: Largest ``.claude/settings.json`` read, in bytes (a real one is a few KB).
MAX_SETTINGS_BYTES = 16 * 1024 * 1024

#: The module Claude Code runs as the Stop hook.
HOOK_MODULE = "pytest_ralph.hook"
#: Default handler timeout in seconds (Claude Code's own default for command hooks).
DEFAULT_TIMEOUT = 600
#: Characters that a Windows shell (cmd, PowerShell or Git Bash) would still interpret inside
#: double quotes; an interpreter path holding one cannot be quoted safely for all of them.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

_WINDOWS_UNSAFE = '"$`%'
# A command that runs our module, whatever the interpreter: "... -m pytest_ralph.hook [args]".
#: The console script that runs the hook (``[project.scripts]`` in pyproject.toml).
HOOK_SCRIPT = "pytest-ralph-hook"
#: How a portable command names the project folder (Claude Code sets it for every hook).
_PROJECT_DIR_PREFIX = "$CLAUDE_PROJECT_DIR/"

_OURS = re.compile(r"(?:^|\s)-m\s+" + re.escape(HOOK_MODULE) + r"(?=\s|$)"
                   r"|(?:^|[\s/\\'\"])" + re.escape(HOOK_SCRIPT) + r"(?:\.exe)?['\"]?(?=\s|$)")


class SettingsFileError(Exception):
    """``.claude/settings.json`` cannot be read, understood or written.

    The message names the file, the JSON path of the problem (``hooks.Stop[1].hooks``) when
    there is one, what was expected and how to fix it. The file is left as it was.

    Attributes:
        path: the settings file.
        json_path: where in the document the problem is ("" for the whole file).
    """

    def __init__(self, path: Path, message: str, *, json_path: str = "") -> None:
        self.path = path
        self.json_path = json_path
        where = f"{path}: {json_path}: " if json_path else f"{path}: "
        super().__init__(where + message + " The file was not changed.")


@dataclass(frozen=True)
class MergeResult:
    """What :func:`merge_stop_hook` or :func:`remove_stop_hook` did.

    Attributes:
        changed: True when the file was written (created, extended, updated or trimmed).
        path: the settings file.
        message: one line for the user ("added the Stop hook to ...", "already present ...").
    """

    changed: bool
    path: Path
    message: str


#: The interpreter flag that keeps the project folder off ``sys.path``: with plain ``-m`` the
#: current folder comes first, and a project file named ``json.py`` or ``random.py`` would be
#: imported instead of the standard library's. ``-P`` (Python 3.11+) drops just that; on 3.10,
#: ``-I`` (isolated mode: also no ``PYTHON*`` variables or user site-packages).
SAFE_PATH_FLAG = "-P" if sys.version_info >= (3, 11) else "-I"


def hook_command(python: str, *, windows: bool = os.name == "nt") -> str:
    """The command line Claude Code runs for the Stop hook:
    ``<python> -P -m pytest_ralph.hook`` (:data:`SAFE_PATH_FLAG`).

    Args:
        python: the interpreter's path (usually ``sys.executable``), spaces allowed.
        windows: quote for Windows (double quotes, which cmd, PowerShell and Git Bash accept)
            instead of POSIX ``sh`` (:func:`shlex.quote`). Defaults to the running system.

    Returns:
        A single shell command; no bash, jq or other tool is needed beyond the interpreter.

    Raises:
        ValueError: ``python`` is empty, or (Windows) contains ``"``, ``$``, a backtick or ``%``,
            which no quoting protects in every Windows shell.
    """
    if not python:
        raise ValueError("the interpreter path is empty")
    if windows:
        bad = sorted({ch for ch in python if ch in _WINDOWS_UNSAFE})
        if bad:
            raise ValueError(
                f"the interpreter path {python!r} contains {' '.join(bad)}, which a Windows "
                "shell would interpret even inside quotes; use an interpreter (virtual "
                "environment) at a path without these characters"
            )
        return f'"{python}" {SAFE_PATH_FLAG} -m {HOOK_MODULE}'
    return f"{shlex.quote(python)} {SAFE_PATH_FLAG} -m {HOOK_MODULE}"


def project_hook_command(python: str, rootdir: Path, *,
                         windows: bool = os.name == "nt") -> str:
    """The Stop hook command for the committed ``.claude/settings.json``: one that names no
    path of this machine, so that it works for every clone of the project.

    When ``python`` lies inside ``rootdir`` (a virtual environment in the project: its
    folders are compared resolved, the interpreter's own name is not, so a venv's
    ``bin/python`` link stays what it is), the command runs it relative to the project
    folder, which Claude Code gives every hook as ``CLAUDE_PROJECT_DIR``:
    ``"$CLAUDE_PROJECT_DIR"/.venv/bin/python -P -m pytest_ralph.hook`` (the rest of the path
    quoted with :func:`shlex.quote`; on Windows the whole word in double quotes,
    ``"$CLAUDE_PROJECT_DIR/.venv/Scripts/python.exe"``, with forward slashes). Otherwise it
    is the console script :data:`HOOK_SCRIPT`, which each teammate needs on ``PATH``.

    Args:
        python: the interpreter's path (usually ``sys.executable``; not resolved).
        rootdir: the project root (Claude Code's project folder).
        windows: quote for Windows, as :func:`hook_command`.

    Returns:
        The command; :data:`HOOK_SCRIPT` itself when the interpreter is outside the project
        (or, on Windows, its relative path holds a character no quoting protects).
    """
    if not python:
        return HOOK_SCRIPT
    exe = Path(os.path.abspath(python))
    folder = Path(os.path.realpath(exe.parent))
    root = Path(os.path.realpath(rootdir))
    try:
        rel = (folder / exe.name).relative_to(root)
    except ValueError:
        return HOOK_SCRIPT
    if not rel.parts:
        return HOOK_SCRIPT
    if windows:
        if any(ch in rel.as_posix() for ch in _WINDOWS_UNSAFE):
            return HOOK_SCRIPT
        return f'"{_PROJECT_DIR_PREFIX}{rel.as_posix()}" {SAFE_PATH_FLAG} -m {HOOK_MODULE}'
    return (f'"$CLAUDE_PROJECT_DIR"/{shlex.quote(rel.as_posix())} {SAFE_PATH_FLAG} '
            f"-m {HOOK_MODULE}")


def is_machine_command(command: object) -> bool:
    """Whether ``command`` is a plain hook command (:func:`is_plain_hook_command`) that names
    an absolute interpreter path of one machine (``/home/me/proj/.venv/bin/python -P -m
    pytest_ralph.hook``): fine in ``settings.local.json``, wrong in the committed
    ``settings.json``, where every other clone lacks that path."""
    if not is_plain_hook_command(command):
        return False
    assert isinstance(command, str)
    exe = shlex.split(command, posix=True)[0]
    if exe.startswith(_PROJECT_DIR_PREFIX):
        return False
    return (exe.startswith(("/", "\\", "~")) or re.match(r"[A-Za-z]:[\\/]", exe) is not None)


def is_ralph_hook_command(command: object) -> bool:
    """Whether a handler's ``command`` runs ``pytest_ralph.hook`` (``-m`` with any
    interpreter, or the :data:`HOOK_SCRIPT` console script, bare or with a folder)."""
    return isinstance(command, str) and _OURS.search(command) is not None


def is_plain_hook_command(command: object) -> bool:
    """Whether ``command`` is nothing but our hook: ``<interpreter> [-P|-I] -m
    pytest_ralph.hook`` or the :data:`HOOK_SCRIPT` console script, each path quoted or not.
    A command that does more (environment assignments, ``nice``, redirections, ``&&``) is the
    user's own wrapping."""
    if not isinstance(command, str):
        return False
    try:
        argv = shlex.split(command, posix=True)
    except ValueError:
        return False
    if 3 <= len(argv) <= 4 and argv[-2:] == ["-m", HOOK_MODULE] and (
            len(argv) == 3 or argv[1] in ("-P", "-I")):
        # The portable form: the project's own interpreter, under $CLAUDE_PROJECT_DIR.
        exe = argv[0].removeprefix(_PROJECT_DIR_PREFIX)
        if not any(c in exe for c in "<>|&;$`"):
            return True
        # A path holding shell characters is ours only when quoted as we write it
        # (:func:`shlex.quote`), so that the shell reads it as text.
        word = ('"$CLAUDE_PROJECT_DIR"/' + shlex.quote(exe)
                if argv[0].startswith(_PROJECT_DIR_PREFIX) else shlex.quote(argv[0]))
        return command.strip() == " ".join([word, *argv[1:]])
    if len(argv) == 1:
        name = argv[0].replace("\\", "/").rsplit("/", 1)[-1]
        return name in (HOOK_SCRIPT, HOOK_SCRIPT + ".exe")
    return False


def merge_stop_hook(settings_path: Path, command: str, *,
                    timeout: int = DEFAULT_TIMEOUT) -> MergeResult:
    """Add (or update) our Stop handler in ``settings_path``, keeping everything else.

    The file is created (with its folder) when missing; an empty file counts as ``{}``; a UTF-8
    byte order mark is accepted (and not written back). Our handler is recognised by its
    command running ``-m pytest_ralph.hook``. A handler that wraps it in a command of its own
    (``env X=1 python -m pytest_ralph.hook 2>>log``, see :func:`is_plain_hook_command`) is the
    user's: then nothing is changed at all. A plain one with another interpreter or a lower
    timeout is updated in place (its other keys kept; a higher timeout is kept), further plain
    copies are removed, and when it is already right nothing is written. A new handler goes
    into a new group appended to ``hooks.Stop``:
    ``{"hooks": [{"type": "command", "command": ..., "timeout": ...}]}``.
    Writes are atomic (temporary file and :func:`os.replace`), with a 2-space indent and a
    trailing newline.

    Args:
        settings_path: the settings file, usually ``<project>/.claude/settings.json``.
        command: the handler's command, from :func:`hook_command`.
        timeout: the handler's timeout in seconds (> 0).

    Returns:
        A :class:`MergeResult`; ``changed`` is False when the file already held the handler.

    Raises:
        ValueError: ``command`` does not run ``pytest_ralph.hook``, or ``timeout`` is not a
            positive int.
        SettingsFileError: the file is not UTF-8 JSON, its top level is not an object, or
            ``hooks`` / ``hooks.Stop`` / a Stop group / its ``hooks`` has the wrong type; or
            the file or its folder cannot be written.
    """
    if not is_ralph_hook_command(command):
        raise ValueError(f"{command!r} does not run -m {HOOK_MODULE}; build it with hook_command()")
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    path = Path(settings_path)
    settings = read_settings(path)
    groups = stop_groups(path, settings, create=True)
    assert groups is not None
    wanted = {"type": "command", "command": command, "timeout": timeout}

    for group in groups:
        for handler in group.get("hooks") or []:
            command_text = handler.get("command") if isinstance(handler, dict) else None
            if is_ralph_hook_command(command_text) and not is_plain_hook_command(command_text):
                return MergeResult(False, path, f"a Stop hook of yours that runs pytest-ralph's "
                                   f"hook ({command_text!r}) is already in {path}; it is left "
                                   "as it is (make sure its interpreter has pytest-ralph "
                                   "installed: `pytest --ralph-doctor` checks it)")
    found = False
    changed = False
    touched: list[dict[str, Any]] = []
    for group in groups:
        handlers = group.get("hooks")
        if not isinstance(handlers, list):
            continue
        kept: list[Any] = []
        for handler in handlers:
            if isinstance(handler, dict) and is_ralph_hook_command(handler.get("command")):
                if found:
                    changed = True  # a second copy: drop it, the loop must run once per stop
                    touched.append(group)
                    continue
                found = True
                own = handler.get("timeout")
                if isinstance(own, (int, float)) and not isinstance(own, bool) and own > timeout:
                    wanted = {**wanted, "timeout": own}  # never lower a timeout you set
                for key, value in wanted.items():
                    if handler.get(key) != value or type(handler.get(key)) is not type(value):
                        handler[key] = value
                        changed = True
            kept.append(handler)
        handlers[:] = kept
    groups[:] = [g for g in groups if not _emptied(g, touched)]
    if not found:
        groups.append({"hooks": [wanted]})
        changed = True

    if not changed:
        return MergeResult(False, path, f"the pytest-ralph Stop hook is already in {path}")
    _write(path, settings)
    verb = "updated" if found else "added"
    return MergeResult(True, path, f"{verb} the pytest-ralph Stop hook in {path}")


def remove_stop_hook(settings_path: Path) -> MergeResult:
    """Remove our Stop handler(s) from ``settings_path``, leaving everything else.

    A group left with no handlers is dropped, then ``hooks.Stop`` and ``hooks`` when this
    emptied them. A missing file, or one without our handler, is not written.

    Args:
        settings_path: the settings file, usually ``<project>/.claude/settings.json``.

    Returns:
        A :class:`MergeResult`; ``changed`` is False when there was nothing to remove.

    Raises:
        SettingsFileError: as for :func:`merge_stop_hook`.
    """
    path = Path(settings_path)
    if not path.exists():
        return MergeResult(False, path, f"{path} does not exist: no Stop hook to remove")
    settings = read_settings(path)
    groups = stop_groups(path, settings, create=False)
    touched: list[dict[str, Any]] = []
    if groups is not None:
        for group in groups:
            handlers = group.get("hooks")
            if not isinstance(handlers, list):
                continue
            kept = [h for h in handlers
                    if not (isinstance(h, dict) and is_ralph_hook_command(h.get("command")))]
            if len(kept) != len(handlers):
                handlers[:] = kept
                touched.append(group)
    if not touched:
        return MergeResult(False, path, f"no pytest-ralph Stop hook in {path}")
    assert groups is not None
    groups[:] = [g for g in groups if not _emptied(g, touched)]
    hooks = settings["hooks"]
    if not groups:
        del hooks["Stop"]
        if not hooks:
            del settings["hooks"]
    _write(path, settings)
    return MergeResult(True, path, f"removed the pytest-ralph Stop hook from {path}")


def _emptied(group: dict[str, Any], touched: list[dict[str, Any]]) -> bool:
    """A group we removed handlers from, now empty and holding nothing but a matcher."""
    return (any(group is t for t in touched) and group.get("hooks") == []
            and set(group) <= {"hooks", "matcher"})


def read_settings(path: Path) -> dict[str, Any]:
    """The parsed settings object; ``{}`` for a missing or blank file.

    Raises:
        SettingsFileError: unreadable, not a regular file (a FIFO, a device), over
            :data:`MAX_SETTINGS_BYTES`, not UTF-8, not JSON, or not a JSON object.
    """
    try:
        data = read_bytes(path, MAX_SETTINGS_BYTES)  # never blocks on a FIFO
    except FileNotFoundError:
        return {}
    except NotRegularFile as exc:
        raise SettingsFileError(path, f"is {exc.kind}, not a regular file; expected Claude "
                                      "Code's JSON settings file there: move it aside.") from exc
    except OSError as exc:
        raise SettingsFileError(path, f"cannot be read ({exc.strerror or exc}); check that the "
                                      "path is a readable file in a folder.") from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SettingsFileError(path, f"is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                                      "save it as UTF-8.") from exc
    if not text.strip():
        return {}
    try:
        settings = json.loads(text)
    except RecursionError as exc:
        raise SettingsFileError(path, "is JSON nested too deeply to read; fix the file.") from exc
    except json.JSONDecodeError as exc:
        raise SettingsFileError(
            path, f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                  "fix the syntax (settings.json allows no comments or trailing commas).",
        ) from exc
    if not isinstance(settings, dict):
        raise SettingsFileError(path, f"expected a JSON object at the top level, found "
                                      f"{json_kind(settings)}; wrap the settings in {{...}}.")
    return settings


def stop_groups(path: Path, settings: dict[str, Any], *,
                 create: bool) -> list[dict[str, Any]] | None:
    """``settings["hooks"]["Stop"]``, checked (and created when ``create``).

    Returns:
        The list of Stop groups, or None when absent and ``create`` is False.

    Raises:
        SettingsFileError: ``hooks`` is not an object, ``hooks.Stop`` not a list, a group not
            an object, or a group's ``hooks`` not a list.
    """
    hooks = settings.get("hooks")
    if hooks is None and "hooks" not in settings:
        if not create:
            return None
        hooks = settings["hooks"] = {}
    if not isinstance(hooks, dict):
        raise SettingsFileError(
            path, f"expected an object mapping event names to lists of hook groups, found "
                  f"{json_kind(hooks)}; write it as {{\"Stop\": [...], ...}}.", json_path="hooks")
    groups = hooks.get("Stop")
    if groups is None and "Stop" not in hooks:
        if not create:
            return None
        groups = hooks["Stop"] = []
    if not isinstance(groups, list):
        raise SettingsFileError(
            path, f"expected a list of hook groups, found {json_kind(groups)}; write it as "
                  "[{\"hooks\": [{\"type\": \"command\", \"command\": \"...\"}]}].",
            json_path="hooks.Stop")
    for i, group in enumerate(groups):
        if not isinstance(group, dict):
            raise SettingsFileError(
                path, f"expected a hook group object, found {json_kind(group)}; write it as "
                      "{\"hooks\": [...]} or remove it.", json_path=f"hooks.Stop[{i}]")
        if "hooks" in group and not isinstance(group["hooks"], list):
            raise SettingsFileError(
                path, f"expected a list of handlers, found {json_kind(group['hooks'])}; write it "
                      "as [{\"type\": \"command\", \"command\": \"...\"}].",
                json_path=f"hooks.Stop[{i}].hooks")
    return groups


def _write(path: Path, settings: dict[str, Any]) -> None:
    """Write ``settings`` to ``path`` atomically (through a symlink to its target).

    Keeps an existing file's permission bits; a new file gets 0o644. Creates the folder.

    Raises:
        SettingsFileError: the folder or file cannot be written; nothing is left behind.
    """
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        text = json.dumps(settings, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    except ValueError:  # 1e400 read as infinity: JSON has no way to write it back
        raise SettingsFileError(
            path, "holds a number too large for JSON to write back (such as 1e400, read as "
                  "infinity): write it as a string or a smaller number, or add the hook by "
                  "hand.") from None
    # A lone surrogate escape read from the file ("\ud800") cannot be written as UTF-8: keep
    # it escaped, and only it.
    text = _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    tmp: str | None = None
    try:
        try:
            mode = target.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise SettingsFileError(
            path, f"cannot be written ({exc.strerror or exc}: {exc.filename or target.parent}); "
                  "check that the folder exists and is writable, or add the hook by hand.",
        ) from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
