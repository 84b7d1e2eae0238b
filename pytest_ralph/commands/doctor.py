"""``pytest --ralph-doctor``: check the Claude Code wiring of a project.

Each check prints one line: ``ok: ...``, ``problem: ... (how to fix it)``, or ``warning: ...``
(worth knowing, but nothing is broken) and ``skipped: ...`` (a check that cannot run because
an earlier one failed). The exit code is 1 when any line is a problem, else 0.

The checks, in order:

1. ``<rootdir>/.claude/settings.local.json`` (where ``--ralph-init`` puts the hook by
   default) and ``<rootdir>/.claude/settings.json`` (``--ralph-hook-scope project``), each when
   it exists, is a JSON object whose ``hooks.Stop`` has the shape of the Claude Code hooks
   reference (https://code.claude.com/docs/en/hooks); errors name the file, the line and
   column or the JSON path, as :mod:`pytest_ralph.claude.settings_file` reports them. Claude
   Code merges both (the user's ``~/.claude/settings.json`` is not read).
   ``disableAllHooks: true`` in either file is a problem: Claude Code then runs no hook.
2. One Stop handler, in either file, runs our hook: ``-m pytest_ralph.hook``
   (:func:`pytest_ralph.claude.settings_file.is_ralph_hook_command`) or the ``pytest-ralph-hook``
   console script. None is a problem (other Stop handlers are listed, never run); two or more
   are a problem too, since Claude Code runs every matching handler, in parallel, on every
   stop (``--ralph-init`` removes the extra copy). A command in the shared ``settings.json``
   that names this machine's interpreter path gets a warning: other clones lack that path.
   A project whose settings enable the ``pytest-ralph`` Claude Code plugin
   (``enabledPlugins``, see ``templates/claude-plugin``) has the plugin's Stop hook
   (:data:`PLUGIN_HOOK_COMMAND`): without a settings hook that one is checked; with one, a
   warning says the hook runs twice. (A plugin loaded with ``claude --plugin-dir`` leaves no
   trace in the settings and cannot be seen.)
3. The command's executable (the first word, unquoted with :mod:`shlex`, with
   ``$CLAUDE_PROJECT_DIR`` expanded to the rootdir; looked up on ``PATH`` when it has no
   folder, as ``pytest-ralph-hook``) exists and is executable.
4. The command, run through the shell as Claude Code runs it (``/bin/sh -c <command>`` on
   POSIX, ``cmd`` through ``shell=True`` on Windows) in the rootdir with ``CLAUDE_PROJECT_DIR``
   set and a sample Stop payload on stdin, exits 0 within :data:`HOOK_TIMEOUT` seconds and
   prints nothing or one JSON object; the time it took is reported.
5. The arming file ``<rootdir>/.claude/pytest-ralph.local.json``, when present, reads
   (:func:`pytest_ralph.claude.arming.read_marker`) and names a run of the history that is still
   running: armed (no session yet) or adopted by a session.

The sample payload must never drive a loop: a Stop with a session id adopts a run that no
session has adopted yet (that is how a session takes an armed run). So the payload carries the
session id ``pytest-ralph-doctor-<random hex>`` only when no run is armed or the armed run
already belongs to a session (the hook then ignores this foreign session); for an armed run
that no session adopted yet it carries no session id, which the hook answers without
adopting. Either way the hook answers with no output and never runs the checks.

Imports only the standard library and pytest-ralph modules that do not import pytest.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..claude.arming import CONTROLLER_ENV, MARKER, MarkerError, read_marker
from ..claude.settings_file import (
    SettingsFileError,
    hook_command,
    is_machine_command,
    is_ralph_hook_command,
    read_settings,
    stop_groups,
)
from ..util.text import plural

__all__ = [
    "HOOK_TIMEOUT",
    "PLUGIN_HOOK_COMMAND",
    "SLOW_HOOK_SECONDS",
    "DoctorReport",
    "Executable",
    "HookRun",
    "doctor",
    "find_executable",
    "run_hook_command",
    "sample_payload",
]

#: Seconds the sample run of the hook command may take before it is killed and reported.
HOOK_TIMEOUT = 10.0

#: A sample run slower than this many seconds gets a warning: the hook runs on every reply.
SLOW_HOOK_SECONDS = 2.0

#: The Stop hook command of the Claude Code plugin (``templates/claude-plugin/hooks/hooks.json``).
PLUGIN_HOOK_COMMAND = "pytest-ralph-hook"

#: The fix for a project without the hook.
_INIT = "`pytest --ralph-init --ralph-driver claude` adds it"

# The console script pyproject.toml defines for pytest_ralph.hook:main.
_CONSOLE_SCRIPT = re.compile(r"(?:^|[\s/\\\"'])pytest-ralph-hook(?:\.exe)?(?=[\s\"']|$)")
# A leading `NAME=value` word of a POSIX command line.
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# $NAME and ${NAME} in a command word.
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
# Lines and characters of a failing hook's stderr shown in a problem line.
_TAIL_LINES = 8
_TAIL_CHARS = 800


@dataclass(frozen=True)
class Executable:
    """The program a hook command starts, as :func:`find_executable` found it.

    Attributes:
        word: the command's first word as written, unquoted (``/opt/py 3/bin/python``).
        path: the file it names (looked up on ``PATH`` when the word has no folder), or
            ``None`` when there is none.
        problem: why it cannot run (missing, not a file, not executable, an unset variable);
            ``""`` when ``path`` is a runnable file.
    """

    word: str
    path: Path | None
    problem: str = ""


@dataclass(frozen=True)
class HookRun:
    """The outcome of one :func:`run_hook_command`.

    Attributes:
        returncode: the exit status (negative: killed by that signal on POSIX); ``None`` when
            it timed out and was killed.
        stdout: its standard output, decoded as UTF-8 (bad bytes replaced).
        stderr: its standard error, decoded the same way.
        seconds: wall-clock time from start to exit (or to the kill), in seconds.
        timed_out: it ran longer than the timeout and was killed with its process group.
    """

    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False


@dataclass
class DoctorReport:
    """The lines of a doctor run (this module's and
    :mod:`pytest_ralph.commands.agent_doctor`'s) and how many are problems.

    Attributes:
        lines: the text, one line per finding: ``ok: ...``, ``problem: ... (fix)``,
            ``warning: ...``, ``skipped: ...``, after whatever header the caller added.
        problems: the number of problem lines.
        checks: the number of ok and problem lines.
    """

    lines: list[str] = field(default_factory=list)
    problems: int = 0
    checks: int = 0

    def ok(self, text: str) -> None:
        """An ``ok:`` line (a check that passed)."""
        self.checks += 1
        self.lines.append(f"ok: {text}")

    def problem(self, text: str, fix: str = "") -> None:
        """A ``problem:`` line, with ``(fix)`` after it when given."""
        self.checks += 1
        self.problems += 1
        self.lines.append(f"problem: {text}" + (f" ({fix})" if fix else ""))

    def warning(self, text: str) -> None:
        """A ``warning:`` line (worth knowing; not counted as a check)."""
        self.lines.append(f"warning: {text}")

    def skipped(self, text: str) -> None:
        """A ``skipped:`` line (a check that could not run)."""
        self.lines.append(f"skipped: {text}")


@dataclass(frozen=True)
class _Handler:
    """One Stop handler of ours in a settings file."""

    file: Path
    where: str  # JSON path: hooks.Stop[0].hooks[1]
    handler: dict[str, Any]


def doctor(rootdir: Path, *, timeout: float = HOOK_TIMEOUT) -> tuple[int, str]:
    """Check the Claude Code wiring of the project at ``rootdir`` (see the module docstring).

    Nothing is written; the hook command is run once with a sample Stop payload that cannot
    adopt or drive a run.

    Args:
        rootdir: the project root (pytest's rootdir), where ``.claude/`` lives.
        timeout: seconds the sample run of the hook command may take (default
            :data:`HOOK_TIMEOUT`).

    Returns:
        ``(exit code, text)``: 0 when every check is ok (warnings allowed), 1 when any is a
        problem; the text is a header line, one line per check and a summary line.
        Never raises for a bad project: unreadable files, bad JSON and failing commands all
        become problem lines.
    """
    root = Path(os.path.abspath(rootdir))
    rep = DoctorReport()
    rep.lines.append(f"pytest-ralph doctor: {root}")
    env = _hook_env(root)
    for command in _check_settings(rep, root):
        _check_command(rep, command, root, env, timeout)
    _check_arming(rep, root)
    if rep.problems:
        rep.lines.append(f"pytest-ralph: {plural(rep.problems, 'problem')} found; the Stop "
                         "hook will not drive a loop until they are fixed")
        return 1, "\n".join(rep.lines)
    rep.lines.append(f"pytest-ralph: all {plural(rep.checks, 'check')} ok")
    return 0, "\n".join(rep.lines)


# -- settings ----------------------------------------------------------------------------------


def _check_settings(rep: DoctorReport, root: Path) -> list[str]:
    """Checks 1 and 2; returns the distinct commands of our Stop handlers (from both project
    settings files, or the plugin's when only the plugin provides the hook)."""
    main = root / ".claude" / "settings.json"
    local = root / ".claude" / "settings.local.json"
    ours: list[_Handler] = []
    foreign: list[str] = []
    plugin_on: list[Path] = []
    readable: list[Path] = []
    for path in (main, local):
        try:
            exists = path.is_file()
        except OSError:
            exists = False
        if not exists:
            continue
        try:
            settings = read_settings(path)
            groups = stop_groups(path, settings, create=False)
        except SettingsFileError as exc:
            rep.problem(_settings_error(exc))
            continue
        readable.append(path)
        rep.ok(f"{path} is valid JSON")
        if settings.get("disableAllHooks") is True:
            rep.problem(f"{path} sets disableAllHooks to true: Claude Code runs no hook at all",
                        "remove it, or set it to false")
        enabled = settings.get("enabledPlugins")
        if isinstance(enabled, dict) and any(
                str(k).split("@", 1)[0] == "pytest-ralph" and v is True
                for k, v in enabled.items()):
            plugin_on.append(path)
        for i, group in enumerate(groups or ()):
            for j, handler in enumerate(group.get("hooks") or ()):
                command = handler.get("command") if isinstance(handler, dict) else None
                where = f"hooks.Stop[{i}].hooks[{j}]"
                if isinstance(handler, dict) and _is_ours(command):
                    ours.append(_Handler(path, where, handler))
                elif isinstance(command, str):
                    foreign.append(f"`{command}` ({path.name} {where})")
    if not ours and plugin_on:
        rep.ok(f"{plugin_on[0]} enables the pytest-ralph Claude Code plugin, whose Stop hook "
               f"runs `{PLUGIN_HOOK_COMMAND}`")
        return [PLUGIN_HOOK_COMMAND]
    if not ours:
        if not main.exists() and not local.exists():
            rep.problem(f"{main} does not exist and neither does {local.name}, so Claude Code "
                        "runs no pytest-ralph Stop hook",
                        f"{_INIT} to {local.name}: `{_suggested_command()}`")
        elif readable:
            one = len(foreign) == 1
            others = (f"; found {plural(len(foreign), 'other Stop handler')}: "
                      f"{', '.join(foreign)}, which {'is' if one else 'are'} not pytest-ralph's "
                      f"and {'was' if one else 'were'} not run" if foreign else "")
            names = " or ".join(str(p) for p in readable)
            rep.problem(f"no Stop hook in {names} runs pytest-ralph (a command with "
                        f"`-m pytest_ralph.hook` or `pytest-ralph-hook`){others}",
                        f"{_INIT} to {local.name}: `{_suggested_command()}`")
        return []
    for h in ours:
        _check_handler(rep, h)
    if len(ours) > 1:
        places = ", ".join(f"{h.file.name} {h.where}" for h in ours)
        rep.problem(f"{len(ours)} pytest-ralph Stop hooks are configured ({places}): Claude Code "
                    "runs all of them, in parallel, on every stop, so each stop would check "
                    "the criteria more than once and the copies race for the loop lock",
                    "keep one: `pytest --ralph-init --ralph-driver claude` now removes the "
                    "extra copy (add --ralph-hook-scope local or project to choose the file "
                    "that keeps it; a command of your own is kept, so remove the other copy "
                    "by hand)")
    for h in ours:
        command = h.handler.get("command")
        if h.file == main and is_machine_command(command):
            rep.warning(f"{main} is the project's shared settings file (committed with the "
                        f"code), but its hook command `{command}` names an interpreter path "
                        "of this machine, which other clones do not have, so the hook fails "
                        "for every teammate: `pytest --ralph-init --ralph-driver claude "
                        "--ralph-hook-scope project` rewrites it with a portable command "
                        "(--ralph-hook-scope local moves it to settings.local.json instead)")
    for path in plugin_on:
        rep.warning(f"{path} also enables the pytest-ralph Claude Code plugin, whose own Stop "
                    "hook runs next to the one in the settings: each stop checks the criteria "
                    "twice (one copy finds the loop lock taken and lets the stop go); use the "
                    "plugin or the settings hook, not both")
    return list(dict.fromkeys(str(h.handler.get("command")) for h in ours))


def _check_handler(rep: DoctorReport, h: _Handler) -> None:
    """Type and timeout of one of our handlers."""
    command = h.handler.get("command")
    kind = h.handler.get("type")
    if kind != "command":
        rep.problem(f"the pytest-ralph Stop hook at {h.file} {h.where} has type {kind!r}, so "
                    "Claude Code does not run its command", 'set "type": "command"')
        return
    limit = h.handler.get("timeout")
    if limit is None:
        when = "no timeout, so Claude Code's default applies"
    elif isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0:
        rep.problem(f"the pytest-ralph Stop hook at {h.file} {h.where} has timeout {limit!r}",
                    'use a positive number of seconds, e.g. "timeout": 600')
        return
    else:
        when = f"timeout {limit:g} s"
        if limit < 60:
            rep.warning(f"the Stop hook's timeout is {limit:g} s: Claude Code kills the hook "
                        "(and lets the stop go) when checking the criteria takes longer; "
                        "600 is the default pytest-ralph writes")
    rep.ok(f"pytest-ralph Stop hook in {h.file} at {h.where}: `{command}` ({when})")


def _settings_error(exc: SettingsFileError) -> str:
    """The error without its "The file was not changed." tail (the doctor writes nothing)."""
    return str(exc).removesuffix(" The file was not changed.")


def _is_ours(command: object) -> bool:
    """``-m pytest_ralph.hook`` with any interpreter, or the ``pytest-ralph-hook`` script."""
    return is_ralph_hook_command(command) or (
        isinstance(command, str) and _CONSOLE_SCRIPT.search(command) is not None)


def _suggested_command() -> str:
    """The command ``--ralph-init`` would write for this interpreter."""
    try:
        return hook_command(sys.executable)
    except ValueError:
        return "python -m pytest_ralph.hook"


# -- the command -------------------------------------------------------------------------------


def _check_command(rep: DoctorReport, command: str, root: Path, env: Mapping[str, str],
                   timeout: float) -> None:
    """Checks 3 and 4 for one distinct hook command."""
    try:
        exe = find_executable(command, cwd=root, env=env)
    except ValueError as exc:
        rep.problem(f"cannot read the hook command `{command}`: {exc}",
                    f"{_INIT} with a correctly quoted interpreter path")
        return
    if exe.problem and "CLAUDE_PROJECT_DIR" in exe.word:
        rep.problem(exe.problem, "this is the team's portable command (in the shared "
                                 "settings file): create the project's virtual environment "
                                 "at that path in this clone and install pytest-ralph into "
                                 "it (`--ralph-init` keeps a portable command as it is)")
        rep.skipped(f"running `{command}` (its executable cannot run)")
        return
    if exe.problem:
        rep.problem(exe.problem, "run `pytest --ralph-init --ralph-driver claude` with an "
                                 "interpreter that has pytest-ralph installed: it rewrites "
                                 "the command")
        rep.skipped(f"running `{command}` (its executable cannot run)")
        return
    expanded = (f" (`{exe.word}`, with $CLAUDE_PROJECT_DIR set to {root} as Claude Code "
                "sets it)" if "CLAUDE_PROJECT_DIR" in exe.word else
                " (found on PATH)" if "/" not in exe.word and "\\" not in exe.word else "")
    rep.ok(f"the hook's executable {exe.path} exists and is executable{expanded}")
    session = _payload_session(root)
    payload = json.dumps(sample_payload(root, session_id=session)).encode()
    shown = f"cmd /c {command}" if os.name == "nt" else f"/bin/sh -c {shlex.quote(command)}"
    try:
        run = run_hook_command(command, payload=payload, cwd=root, env=env, timeout=timeout)
    except OSError as exc:
        rep.problem(f"cannot start `{shown}`: {exc}",
                    "check that the shell exists and the project folder is readable")
        return
    took = f"{run.seconds:.2f} s"
    if run.timed_out:
        rep.problem(f"`{command}` did not answer a sample Stop payload within {timeout:g} s "
                    f"and was killed{_tail(run.stderr)}",
                    "run the command by hand with `echo '{}' | <command>` to see where it hangs")
        return
    if run.returncode != 0:
        meaning = {127: " (command not found)", 126: " (found but not executable)"}
        effect = ("exit 2 makes Claude Code block every stop and hand this stderr to Claude"
                  if run.returncode == 2 else "Claude Code shows this as a hook error and "
                  "lets the stop go, so no loop runs")
        rep.problem(f"`{command}` exited with status {run.returncode}"
                    f"{meaning.get(run.returncode or 0, '')} on a sample Stop payload after "
                    f"{took}; {effect}{_tail(run.stderr)}",
                    "fix the error above; a missing module means pytest-ralph is not installed "
                    "in the hook's interpreter")
        return
    out = run.stdout.strip()
    if not out:
        answer = "no output (the stop goes ahead)"
    else:
        try:
            obj = json.loads(out)
        except ValueError as exc:
            obj, why = None, f"not JSON: {exc}"
        else:
            why = f"JSON {type(obj).__name__}, not an object"
        if not isinstance(obj, dict):
            rep.problem(f"`{command}` exited 0 on a sample Stop payload but printed something "
                        f"that is not one JSON object ({why}): {_clip(out)}; Claude Code "
                        "cannot read it as a hook answer",
                        "the hook must print nothing or one JSON object on stdout; send "
                        "other text to stderr")
            return
        answer = f"one JSON object ({', '.join(sorted(map(str, obj))) or 'empty'})"
    how = "with a session id of its own" if session else (
        "without a session id, so that it cannot adopt the armed run")
    rep.ok(f"`{shown}` answered a sample Stop payload ({how}) in {took}: exit 0, "
           f"{answer}")
    if run.seconds > SLOW_HOOK_SECONDS:
        rep.warning(f"the hook took {took} with no loop to drive; it runs every time Claude "
                    "ends a reply, so each reply waits that long (a slow disk or a heavy "
                    "sitecustomize can cause it)")


def find_executable(command: str, *, cwd: Path, env: Mapping[str, str],
                    windows: bool = os.name == "nt") -> Executable:
    """Find the program a hook command starts.

    The command is split like a shell would (:func:`shlex.split`; on Windows non-POSIX
    splitting and the surrounding double quotes removed); leading ``NAME=value`` words and an
    ``exec`` or ``env`` prefix are skipped; ``$NAME`` / ``${NAME}`` and ``~`` in the first word
    are expanded from ``env``. A word with a folder is resolved against ``cwd``; a bare name is
    looked up on ``env["PATH"]``.

    Args:
        command: the hook's command line.
        cwd: the folder the hook runs in (the project root).
        env: the environment the hook gets (``PATH``, ``CLAUDE_PROJECT_DIR``).
        windows: split and check as Windows does (no executable bit).

    Returns:
        An :class:`Executable`; its ``problem`` is set when the program is missing, not a
        file, not executable or names a variable that is not set.

    Raises:
        ValueError: the command is empty or cannot be split (an unclosed quote).
    """
    words = shlex.split(command, posix=not windows)
    if windows:
        words = [w[1:-1] if len(w) >= 2 and w[0] == w[-1] == '"' else w for w in words]
    while words and (_ASSIGNMENT.match(words[0]) or words[0] in ("exec", "env")):
        words = words[1:]
    if not words:
        raise ValueError("it names no program")
    word = words[0]
    literal = Path(word) if Path(word).is_absolute() else cwd / word
    if ("$" in word or word.startswith("~")) and literal.is_file():
        return Executable(word, literal)  # a quoted path that holds `$` or `~` as text
    project = env.get("CLAUDE_PROJECT_DIR")
    if project and word.startswith("$CLAUDE_PROJECT_DIR/"):
        rest = word[len("$CLAUDE_PROJECT_DIR/"):]
        inside = Path(project) / rest
        if "$" in rest and inside.is_file():  # the rest of the path holds `$` as quoted text
            return Executable(word, inside)
    unset = [m.group(1) or m.group(2) for m in _VARIABLE.finditer(word)
             if (m.group(1) or m.group(2)) not in env]
    if unset:
        return Executable(word, None, f"the hook's executable {word} uses "
                                      f"{', '.join('$' + v for v in unset)}, which is not set "
                                      "for project hooks (Claude Code sets CLAUDE_PROJECT_DIR)")
    expanded = os.path.expanduser(_VARIABLE.sub(lambda m: env[m.group(1) or m.group(2)], word))
    seps = ("/", "\\") if windows else ("/",)
    if any(s in expanded for s in seps):
        path = Path(expanded)
        if not path.is_absolute():
            path = cwd / path
        if not path.exists():
            return Executable(word, None, f"the hook's executable {path} does not exist (an "
                                          "interpreter or virtual environment that was moved "
                                          "or deleted?)")
        if not path.is_file():
            return Executable(word, None, f"the hook's executable {path} is not a file")
        if not windows and not os.access(path, os.X_OK):
            return Executable(word, None, f"the hook's executable {path} is not executable "
                                          "(chmod +x, or use an interpreter)")
        return Executable(word, path)
    found = shutil.which(expanded, path=env.get("PATH", os.defpath))
    if found is None:
        return Executable(word, None, f"the hook's executable `{expanded}` is not on PATH "
                                      "(this PATH is pytest's; Claude Code's may differ: an "
                                      "absolute interpreter path avoids the question)")
    return Executable(word, Path(found))


def sample_payload(rootdir: Path, *, session_id: str | None) -> dict[str, object]:
    """A Stop payload like Claude Code's (hooks reference, Stop input), for a test run.

    Args:
        rootdir: the project folder, sent as ``cwd``.
        session_id: the session id to send, or ``None`` to send none (a payload without a
            session id never adopts an armed run).

    Returns:
        A JSON-ready dict with ``hook_event_name`` ``"Stop"``, ``cwd``, ``stop_hook_active``
        false, ``permission_mode`` ``"default"`` and, when given, ``session_id``.
    """
    payload: dict[str, object] = {"hook_event_name": "Stop", "cwd": str(rootdir),
                                  "stop_hook_active": False, "permission_mode": "default"}
    if session_id is not None:
        payload["session_id"] = session_id
    return payload


def run_hook_command(command: str, *, payload: bytes, cwd: Path, env: Mapping[str, str],
                     timeout: float = HOOK_TIMEOUT) -> HookRun:
    """Run a hook command through the shell the way Claude Code does, with ``payload`` on stdin.

    POSIX: ``/bin/sh -c command`` in a new session, so that a timeout kills the whole process
    group. Windows: ``shell=True`` (``%COMSPEC%``) in a new process group, killed with
    ``taskkill /T`` on a timeout.

    Args:
        command: the hook's command line.
        payload: the bytes written to its stdin (then closed).
        cwd: its working folder.
        env: its whole environment.
        timeout: seconds before it is killed.

    Returns:
        A :class:`HookRun` with the exit status, the decoded output and the time taken in
        seconds.

    Raises:
        OSError: the shell cannot be started (missing, or ``cwd`` does not exist).
    """
    start = time.monotonic()
    if sys.platform == "win32":
        proc = subprocess.Popen(command, shell=True, cwd=cwd, env=dict(env),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE,
                                creationflags=subprocess.CREATE_NEW_PROCESS_GROUP)
    else:
        proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=cwd, env=dict(env),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(payload, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_tree(proc)
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a grandchild that left the group holds the pipes
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
            proc.wait()
            out, err = b"", b""
    seconds = time.monotonic() - start
    return HookRun(None if timed_out else proc.returncode,
                   out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), seconds,
                   timed_out)


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """Kill a hook process and everything it started."""
    if sys.platform == "win32":
        with contextlib.suppress(OSError):
            subprocess.run(["taskkill", "/F", "/T", "/PID", str(proc.pid)],
                           capture_output=True, timeout=10, check=False)
    else:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        proc.kill()


def _hook_env(root: Path) -> dict[str, str]:
    """The environment Claude Code gives a project hook: ours, plus ``CLAUDE_PROJECT_DIR``;
    without ``PYTEST_RALPH_CONTROLLER`` (set when the doctor runs inside an agent run of
    ``pytest --ralph``), which would make the hook return before it reads anything."""
    env = {k: v for k, v in os.environ.items() if k != CONTROLLER_ENV}
    env["CLAUDE_PROJECT_DIR"] = str(root)
    return env


def _payload_session(root: Path) -> str | None:
    """The sample payload's session id: a fresh doctor id, or ``None`` when an armed run waits
    for its first session (any session id would adopt it)."""
    # The folders the hook looks in: $CLAUDE_PROJECT_DIR, then the payload's cwd and its
    # parents (both are the rootdir here); the first arming file found counts.
    marker = next((f / MARKER for f in (root, *root.parents) if (f / MARKER).is_file()), None)
    if marker is not None:
        try:
            if not read_marker(marker).session:
                return None
        except MarkerError:
            return None  # cannot tell who owns it: send no session id, which adopts nothing
    return f"pytest-ralph-doctor-{secrets.token_hex(8)}"


def _tail(stderr: str) -> str:
    """The end of a failing command's stderr, indented under the problem line."""
    text = stderr.strip()
    if not text:
        return ""
    lines = text.splitlines()[-_TAIL_LINES:]
    body = "\n".join(lines)[-_TAIL_CHARS:]
    return "; its stderr ends with:\n" + "\n".join(f"    {line}" for line in body.splitlines())


def _clip(text: str, limit: int = 200) -> str:
    """``text`` as a repr, cut to ``limit`` characters."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


# -- the arming file ---------------------------------------------------------------------------


def _check_arming(rep: DoctorReport, root: Path) -> None:
    """Check 5: the arming file, if any, and the run it names."""
    marker = root / MARKER
    if not marker.exists():
        rep.ok(f"no run is armed ({marker} does not exist; `pytest --ralph-init "
               "--ralph-driver claude` arms one)")
        return
    try:
        armed = read_marker(marker)
    except MarkerError as exc:
        rep.problem(str(exc))
        return
    from ..state.folder import DB_NAME
    from ..state.history import History  # sqlite3: only when a run is armed
    from ..state.records import HistoryError

    db = armed.state_dir / DB_NAME
    stale = (f"the next Stop removes {marker} and lets the session stop; delete it now, or "
             "arm a new run with `pytest --ralph-init --ralph-driver claude`")
    if not db.exists():
        rep.problem(f"{marker} names run {armed.run} of the history {db}, which does not "
                    "exist", stale)
        return
    try:
        with History.open(db, readonly=True) as history:
            run = history.run(armed.run)
            drv = history.driver(armed.run)
    except (HistoryError, OSError) as exc:
        rep.problem(f"{marker} names run {armed.run}, but its history cannot be read: {exc}",
                    "see `pytest --ralph-status`")
        return
    if run is None or drv is None:
        rep.problem(f"{marker} names run {armed.run}, which is not a Claude Code run of {db}",
                    stale)
        return
    if run.status != "running":
        rep.problem(f"{marker} names run {armed.run}, which already ended ({run.status})",
                    stale)
        return
    if os.path.normcase(str(armed.rootdir)) != os.path.normcase(str(root)):
        rep.warning(f"{marker} was written for the project {armed.rootdir}, not {root}; the "
                    f"criteria are checked in {run.rootdir}")
    session = armed.session or drv.session_id
    if session:
        rep.ok(f"run {armed.run} of {run.prd} is armed and adopted by Claude Code session "
               f"{session}; only that session's stops drive it")
    else:
        rep.ok(f"run {armed.run} of {run.prd} is armed, waiting for the first Stop of a Claude "
               f"Code session in {root}, which adopts it")

