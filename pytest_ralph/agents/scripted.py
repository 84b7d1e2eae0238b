"""The machinery of scripted agents (:mod:`pytest_ralph.testing`): what users do not import.

- the script file: its format (:data:`SCRIPT_FORMAT`, :data:`SCRIPT_VERSION`), written by
  :func:`write_script`; its call counter (``<stem>.state.json``) and calls log
  (``<stem>.calls.jsonl``, :func:`calls_path`) next to it;
- the steps: :class:`Patch` and dict steps, checked by :func:`normalize_step` and applied by
  the client (files written or deleted inside the working folder, ``git apply``, exit code);
- the client, :func:`main`: ``python -m pytest_ralph.testing replay SCRIPT [ARGS...]``, which
  counts the call, then applies its step or asks the test process's server to run a
  callable step.

:class:`ScriptError` and :class:`Patch` are defined here because the steps need them; they
are public in :mod:`pytest_ralph.testing`, which imports them from here (ScriptError keeps
``pytest_ralph.testing`` as its ``__module__``, the name tracebacks show). The client imports
only the standard library and :mod:`pytest_ralph.util.env`, so that it starts fast; pytest is
never imported here.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from ..util.env import ENV_PREFIX, ITERATION_ENV, PROMPT_FILE_ENV

#: The ``format`` value of a script file.
SCRIPT_FORMAT = "pytest-ralph-scripted-agent"
#: The version of the script file format this module reads and writes.
SCRIPT_VERSION = 1
#: The keys a dict step may have.
STEP_KEYS = ("files", "patch", "exit", "stdout", "stderr", "sleep")
#: Exit code of the client when a callable step raised.
EXIT_STEP_RAISED = 1
#: Exit code of the client when the script or a step cannot be used.
EXIT_SCRIPT_ERROR = 2

#: The module the client runs as.
MODULE = "pytest_ralph.testing"
#: Seconds a connection to the server has to send its request (the answer may take longer).
REQUEST_TIMEOUT = 30.0
#: What the messages of the client and of the server start with.
PREFIX = "pytest-ralph scripted agent"


class ScriptError(ValueError):
    """A step or a script file cannot be used: an unknown key, a value of the wrong type, a
    path that is absolute or leaves the working folder (``..``), a patch ``git apply``
    refuses, a callable where only dict steps are allowed. The client exits 2 with the message.
    """

    #: Users import it from :mod:`pytest_ralph.testing`, and tracebacks name it so (as they
    #: did when it was defined there).
    __module__ = "pytest_ralph.testing"


@dataclass(frozen=True)
class Patch:
    """A step the agent applies itself, in this order: print ``stdout``, print ``stderr``,
    write or delete ``files``, apply ``patch``, sleep ``sleep`` seconds, exit with ``exit``.

    Attributes:
        files: relative path (``/``-separated, inside the agent's working folder) -> new text
            (written as UTF-8, parent folders created) or ``None`` to delete the file or folder
            (nothing happens if it does not exist). Absolute paths, ``..`` and paths that
            reach outside through a symlink are refused (exit 2).
        patch: a unified diff as ``git diff`` writes it (``-p1``), applied with ``git apply``
            in the working folder (its paths are relative to that folder even inside a
            subfolder of a git repository); ``git apply`` failing is exit 2.
        exit: the exit code, 0..255; a negative ``-N`` kills the agent with signal ``N``
            (POSIX), which the loop reports as a crash.
        stdout, stderr: text printed (the loop keeps both in ``agent.log``).
        sleep: seconds to wait before exiting (e.g. to run into ``--ralph-agent-timeout``).
    """

    files: Mapping[str, str | None] = field(default_factory=dict)
    patch: str | None = None
    exit: int = 0
    stdout: str = ""
    stderr: str = ""
    sleep: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The equivalent dict step, with only the keys that differ from the defaults."""
        out: dict[str, Any] = {}
        if self.files:
            out["files"] = dict(self.files)
        if self.patch is not None:
            out["patch"] = self.patch
        if self.exit:
            out["exit"] = self.exit
        if self.stdout:
            out["stdout"] = self.stdout
        if self.stderr:
            out["stderr"] = self.stderr
        if self.sleep:
            out["sleep"] = self.sleep
        return out


# --------------------------------------------------------------------------------------------
# Steps


def _check_rel_path(rel: object, where: str) -> str:
    """``rel`` if it is a relative path that stays inside the working folder.

    Raises:
        ScriptError: not a string, empty, absolute (``/x``, ``C:\\x``, ``\\\\host``) or with a
            ``..`` part.
    """
    if not isinstance(rel, str) or not rel.strip():
        raise ScriptError(f"{where}: a file path must be a non-empty string; got {rel!r}")
    if PurePosixPath(rel).is_absolute() or PureWindowsPath(rel).anchor:
        raise ScriptError(f"{where}: {rel!r} is an absolute path; steps may only change files "
                          "inside the agent's working folder: use a relative path")
    if ".." in PurePosixPath(rel.replace("\\", "/")).parts:
        raise ScriptError(f"{where}: {rel!r} leaves the agent's working folder ('..'); steps "
                          "may only change files inside it")
    return rel


def normalize_step(step: Patch | Mapping[str, Any], where: str) -> dict[str, Any]:
    """A validated dict step (only the keys given) from a :class:`Patch` or a dict.

    Raises:
        ScriptError: an unknown key or a value of the wrong type (see :class:`Patch`).
    """
    if isinstance(step, Patch):
        data: Mapping[str, Any] = step.to_dict()
    elif isinstance(step, Mapping):
        data = step
    else:
        raise ScriptError(f"{where}: expected a callable, a Patch or a dict; got "
                          f"{type(step).__name__}")
    unknown = sorted(str(k) for k in data if k not in STEP_KEYS)
    if unknown:
        raise ScriptError(f"{where}: unknown key(s) {', '.join(unknown)}; a step has "
                          f"{', '.join(STEP_KEYS)}")
    out: dict[str, Any] = {}
    files = data.get("files")
    if files is not None:
        if not isinstance(files, Mapping):
            raise ScriptError(f"{where}: 'files' must map relative paths to text or None; got "
                              f"{type(files).__name__}")
        checked: dict[str, str | None] = {}
        for rel, content in files.items():
            _check_rel_path(rel, f"{where}: files")
            if content is not None and not isinstance(content, str):
                raise ScriptError(f"{where}: files[{rel!r}] must be text or None (delete); got "
                                  f"{type(content).__name__}")
            checked[rel] = content
        out["files"] = checked
    patch = data.get("patch")
    if patch is not None:
        if not isinstance(patch, str) or not patch.strip():
            raise ScriptError(f"{where}: 'patch' must be a non-empty unified diff (text)")
        out["patch"] = patch
    code = data.get("exit", 0)
    if isinstance(code, bool) or not isinstance(code, int) or not -64 <= code <= 255:
        raise ScriptError(f"{where}: 'exit' must be an integer from 0 to 255 (or -N for signal "
                          f"N); got {code!r}")
    if code:
        out["exit"] = code
    for key in ("stdout", "stderr"):
        text = data.get(key)
        if text is not None and not isinstance(text, str):
            raise ScriptError(f"{where}: {key!r} must be text; got {type(text).__name__}")
        if text:
            out[key] = text
    sleep = data.get("sleep", 0)
    if isinstance(sleep, bool) or not isinstance(sleep, (int, float)) or not sleep >= 0:
        raise ScriptError(f"{where}: 'sleep' must be a number of seconds >= 0; got {sleep!r}")
    if sleep:
        out["sleep"] = float(sleep)
    return out


def _inside(cwd: Path, rel: str, *, delete: bool) -> Path:
    """The target of ``rel`` under ``cwd``, refusing one that a symlink leads outside.

    Raises:
        ScriptError: the path is absolute, has ``..``, or resolves outside ``cwd``.
    """
    _check_rel_path(rel, "files")
    base = cwd.resolve()
    target = base / rel
    # A symlink may be deleted wherever it points; anything else must resolve inside.
    probe = target.parent if delete else target
    if not probe.resolve().is_relative_to(base):
        raise ScriptError(f"files: {rel!r} leads outside the agent's working folder {base} "
                          "(through a symlink); steps may only change files inside it")
    return target


def _apply_files(cwd: Path, files: Mapping[str, str | None]) -> None:
    import shutil

    for rel, content in files.items():
        target = _inside(cwd, rel, delete=content is None)
        if content is None:
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.is_dir():
                shutil.rmtree(target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content.encode("utf-8"))


def _git_apply(cwd: Path, patch: str) -> None:
    """Apply ``patch`` with ``git apply`` in ``cwd``, paths relative to ``cwd``.

    Raises:
        ScriptError: git is not installed, or ``git apply`` failed (its message included).
    """
    import shutil
    import subprocess

    git = shutil.which("git")
    if git is None:
        raise ScriptError("patch: git is not installed (a 'patch' step is applied with "
                          "`git apply`); install git or use a 'files' step")
    env = {k: v for k, v in os.environ.items()
           if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
    # Never look for a repository above the working folder: inside a subfolder of a
    # repository, `git apply` would take paths as relative to its top and silently skip
    # those outside the subfolder.
    env["GIT_CEILING_DIRECTORIES"] = str(cwd.resolve().parent)
    text = patch if patch.endswith("\n") else patch + "\n"
    done = subprocess.run([git, "apply", "--whitespace=nowarn", "-"], cwd=cwd, env=env,
                          input=text.encode("utf-8"), capture_output=True, check=False)
    if done.returncode != 0:
        message = (done.stderr or done.stdout).decode("utf-8", "replace").strip()
        raise ScriptError(f"patch: `git apply` failed (exit {done.returncode}): {message}")


def _apply_step(step: Mapping[str, Any], cwd: Path) -> int:
    """Do what a dict step says (see :class:`Patch` for the order) and return its exit code.

    Raises:
        ScriptError: a path is refused or the patch does not apply.
        OSError: a file could not be written or deleted.
    """
    for key, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
        if step.get(key):
            stream.write(step[key])
            stream.flush()
    if step.get("files"):
        _apply_files(cwd, step["files"])
    if step.get("patch"):
        _git_apply(cwd, step["patch"])
    if step.get("sleep"):
        time.sleep(float(step["sleep"]))
    code = int(step.get("exit", 0))
    if code < 0 and hasattr(os, "kill"):
        import signal

        sys.stdout.flush()
        sys.stderr.flush()
        with contextlib.suppress(ValueError, OSError):  # SIGKILL cannot be caught
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        time.sleep(5)  # the signal is delivered before this ends; exit in case it was ignored
        return 128 - code
    return code


# --------------------------------------------------------------------------------------------
# Script files, state and calls log


def _state_path(script: Path) -> Path:
    return script.with_name(script.stem + ".state.json")


def calls_path(script: Path) -> Path:
    """The calls log next to ``script``: ``<stem>.calls.jsonl``, one JSON call per line."""
    return script.with_name(script.stem + ".calls.jsonl")


def reset_state(script: Path) -> None:
    """Remove the call counter and the calls log of ``script`` (if any): it starts over."""
    for path in (_state_path(script), calls_path(script)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def write_script(path: Path, steps: list[dict[str, Any]], *, server: dict[str, Any] | None,
                 env: str) -> None:
    """Write a script file (JSON, mode 0600, parent folders created).

    Args:
        path: the script file.
        steps: the steps, each a dict step (:func:`normalize_step`) or ``{"callable": name}``.
        server: ``{"host", "port", "token"}`` of the server that runs callable steps, or
            ``None`` when there is none.
        env: ``"all"`` to record the agent's whole environment with each call, ``"ralph"``
            for its ``PYTEST_RALPH_*`` variables only.
    """
    data = {"format": SCRIPT_FORMAT, "version": SCRIPT_VERSION, "env": env, "server": server,
            "steps": steps}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")


def _read_script(path: Path) -> dict[str, Any]:
    """The script file's data.

    Raises:
        ScriptError: missing, not JSON, or not a scripted-agent script of a known version.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScriptError(f"script {path} does not exist (a ScriptedAgent's script is removed "
                          "when the agent is closed)") from None
    except (OSError, ValueError) as exc:
        raise ScriptError(f"cannot read script {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != SCRIPT_FORMAT:
        raise ScriptError(f"{path} is not a scripted-agent script (expected a JSON object with "
                          f'"format": "{SCRIPT_FORMAT}"; write it with write_replay())')
    if data.get("version") != SCRIPT_VERSION:
        raise ScriptError(f"{path}: script version {data.get('version')!r} is not supported "
                          f"(this pytest-ralph reads version {SCRIPT_VERSION})")
    if not isinstance(data.get("steps"), list):
        raise ScriptError(f'{path}: "steps" must be a list')
    return data


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[int]:
    """Hold an exclusive lock on ``path`` (created if missing); yields its descriptor.

    Without ``fcntl`` (Windows) there is no lock: the loop runs one agent at a time anyway.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            yield fd
            return
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def _next_call(script: Path, call: dict[str, Any]) -> int:
    """Count this call in the state file and append it to the calls log; its number.

    Raises:
        ScriptError: the state file is damaged.
    """
    state = _state_path(script)
    with _locked(state) as fd:
        raw = b""
        while chunk := os.read(fd, 65536):
            raw += chunk
        try:
            done = int(json.loads(raw)["calls"]) if raw.strip() else 0
        except (ValueError, KeyError, TypeError):
            raise ScriptError(f"the state file {state} is damaged; delete it (and "
                              f"{calls_path(script).name}) to start the script again") from None
        n = done + 1
        call["n"] = n
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"calls": n}).encode() + b"\n")
        with calls_path(script).open("a", encoding="utf-8") as log:
            log.write(json.dumps(call) + "\n")
    return n


# --------------------------------------------------------------------------------------------
# The client: python -m pytest_ralph.testing replay SCRIPT [ARGS...]


def _read_prompt() -> str:
    data = b""
    stdin = sys.stdin
    with contextlib.suppress(OSError, ValueError, AttributeError):
        if stdin is not None and not stdin.isatty():
            data = stdin.buffer.read()
    if not data.strip():
        name = os.environ.get(PROMPT_FILE_ENV)
        if name:
            with contextlib.suppress(OSError):
                data = Path(name).read_bytes()
    return data.decode("utf-8", "replace")


def _iteration() -> int | None:
    try:
        return int(os.environ[ITERATION_ENV])
    except (KeyError, ValueError):
        return None


def _ask_server(server: Mapping[str, Any], n: int, call: dict[str, Any]) -> dict[str, Any]:
    """Send call ``n`` to the test process's server and wait for its answer.

    Raises:
        ScriptError: the server cannot be reached or answered nonsense.
    """
    host, port = str(server["host"]), int(server["port"])
    request = json.dumps({"token": server["token"], "n": n, "call": call}).encode() + b"\n"
    try:
        with socket.create_connection((host, port), timeout=REQUEST_TIMEOUT) as conn:
            conn.sendall(request)
            conn.settimeout(None)  # the callable takes as long as it takes
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
    except OSError as exc:
        raise ScriptError(f"cannot reach the ScriptedAgent at {host}:{port} for call {n}: "
                          f"{exc} (was the agent closed, or has the test that made it "
                          "ended?)") from None
    try:
        answer = json.loads(b"".join(chunks))
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise ScriptError(f"the ScriptedAgent at {host}:{port} gave no answer for call {n} "
                          "(was it closed while the call ran?)")
    return answer


def _run_script(script: Path, args: Sequence[str]) -> int:
    """Serve one call of ``script`` in this process (the client). Returns the exit code.

    Raises:
        ScriptError: the script, a step, or the server cannot be used.
    """
    data = _read_script(script)
    env = dict(os.environ) if data.get("env") == "all" else {
        k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
    cwd = Path.cwd()
    call = {"n": 0, "iteration": _iteration(), "prompt": _read_prompt(), "cwd": str(cwd),
            "env": env, "args": list(args)}
    n = _next_call(script, call)
    steps: list[Any] = data["steps"]
    if n > len(steps):
        sys.stderr.write(f"{PREFIX}: call {n}: the script's {len(steps)} step(s) have run "
                         "out; doing nothing (exit 0)\n")
        return 0
    step = steps[n - 1]
    if isinstance(step, dict) and "callable" in step:
        server = data.get("server")
        if not isinstance(server, dict):
            raise ScriptError(f"step {n} is a callable, but the script has no server (a "
                              "replay script holds dict steps only)")
        answer = _ask_server(server, n, call)
        if "error" in answer:
            sys.stderr.write(str(answer["error"]))
            sys.stderr.flush()
            return EXIT_STEP_RAISED
        if "step" in answer:
            return _apply_step(normalize_step(answer["step"], f"call {n}: returned step"), cwd)
        return int(answer.get("exit", 0))
    return _apply_step(normalize_step(step, f"step {n} of {script}"), cwd)


_USAGE = f"""usage: python -m {MODULE} replay SCRIPT [ARGS...]

Run one step of a scripted agent (see write_replay() and ScriptedAgent in {MODULE}).
The prompt is read from stdin (or the file named by {PROMPT_FILE_ENV}); ARGS are
recorded with the call. Exit: the step's exit code; 1 when a callable step raised; 2 when
the script or a step cannot be used.
"""


def main(argv: Sequence[str] | None = None) -> int:
    """The client's entry point: ``python -m pytest_ralph.testing replay SCRIPT [ARGS...]``.

    Args:
        argv: the arguments after the module name (default ``sys.argv[1:]``).

    Returns:
        the exit code (see :mod:`pytest_ralph.testing`); 2 with a usage message for bad
        arguments.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] != "replay":
        sys.stderr.write(_USAGE)
        return EXIT_SCRIPT_ERROR
    try:
        return _run_script(Path(args[1]), args[2:])
    except (ScriptError, OSError) as exc:
        sys.stdout.flush()
        sys.stderr.write(f"{PREFIX}: {exc}\n")
        return EXIT_SCRIPT_ERROR
