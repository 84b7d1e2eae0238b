"""Scripted agents: test a PRD, its checks and a prompt template without a model.

A *scripted agent* is a command for ``--ralph-agent`` that follows a script of *steps*
instead of asking a model what to do. Step ``k`` is used for the ``k``-th run of the agent
(counted by the agent itself, 1-based, in the order the runs happen; not the loop's
``PYTEST_RALPH_ITERATION``, which repeats when a resumed run retries an iteration). Once the
script has run out, every further run does nothing and exits 0 (it says so on stderr, which
ends up in the iteration's ``agent.log``).

A step is one of:

* a Python callable ``fn(call: AgentCall) -> int | None`` that runs **in the test process**
  (closures, fixtures and monkeypatching work). The agent command is a tiny client,
  ``python -m pytest_ralph.testing replay SCRIPT``, that connects over loopback
  (``127.0.0.1``, a random port, a random token that only the script file holds) to a server
  thread owned by the :class:`ScriptedAgent`, sends the call, waits for the answer and exits
  with it. The return value is the exit code (``None`` is 0); it may also be a
  :class:`Patch` (or dict), which the client then applies as if it were the step. If ``fn``
  raises, the client prints the traceback to stderr and exits 1 (the exception is kept in
  :attr:`ScriptedAgent.errors`); ``raise SystemExit(n)`` exits ``n``.
* a :class:`Patch` or a dict with the same keys, applied by the client itself (no server)::

      {"files": {"rel/path": "new content", "old.txt": None},   # None deletes
       "patch": "<unified diff, applied with `git apply`>",
       "exit": 0, "stdout": "...", "stderr": "...", "sleep": 0.5}

Use :func:`write_replay` for a script of dict steps that runs outside a Python test (an
example, a shell session): its call counter lives in a state file next to the script, so it
carries on across separate ``pytest --ralph`` runs and resumed loops.

In a test, the ``ralph_agent`` fixture (registered by the plugin) makes scripted agents and
closes them at teardown::

    def test_fixes_on_the_second_try(ralph_agent, pytester):
        agent = ralph_agent({"stdout": "thinking"}, {"files": {"a.txt": "x"}})
        result = pytester.runpytest_subprocess("--ralph", "--ralph-agent", agent.command)
        assert result.ret == 0 and len(agent.calls) == 2

Exit codes of the client: the step's exit code; 1 when a callable step raised; 2 when the
script or a step cannot be used (a path outside the working folder, ``git apply`` failed, the
script file is missing or invalid, the test process that owns the server is gone).

Running the client imports only the standard library (and this package's ``__init__``), so
it starts fast; pytest is never imported here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Any, TypeAlias

from .util.env import ENV_PREFIX, ITERATION_ENV, PROMPT_FILE_ENV

if TYPE_CHECKING:
    import socketserver

__all__ = [
    "AgentCall",
    "AgentFactory",
    "Patch",
    "ScriptError",
    "ScriptedAgent",
    "Step",
    "StepError",
    "StepFunction",
    "StepResult",
    "ralph_agent_fixture",
    "read_calls",
    "replay_command",
    "write_replay",
]

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

_MODULE = "pytest_ralph.testing"
_HOST = "127.0.0.1"
#: Seconds a connection to the server has to send its request (the answer may take longer).
_REQUEST_TIMEOUT = 30.0
#: The largest request the server reads (a prompt and an environment), in bytes.
_MAX_REQUEST = 256 * 1024 * 1024
_PREFIX = "pytest-ralph scripted agent"


class ScriptError(ValueError):
    """A step or a script file cannot be used: an unknown key, a value of the wrong type, a
    path that is absolute or leaves the working folder (``..``), a patch ``git apply``
    refuses, a callable where only dict steps are allowed. The client exits 2 with the message.
    """


@dataclass(frozen=True)
class AgentCall:
    """One run of a scripted agent, as the client saw it.

    Attributes:
        n: the call number, 1-based, in the order the agent was run (step ``n`` served it).
        iteration: the loop iteration from ``PYTEST_RALPH_ITERATION``, or ``None`` when the
            variable is unset or not an integer (the agent was not run by the loop).
        prompt: the prompt, read from stdin (UTF-8, undecodable bytes replaced); when stdin
            is a terminal or empty, the text of the file named by
            ``PYTEST_RALPH_PROMPT_FILE``; else ``""``.
        cwd: the agent's working folder (absolute; the loop runs it in the rootdir).
        env: the agent's environment. For a :class:`ScriptedAgent`, all of it; for a replay
            script (:func:`write_replay`), only the ``PYTEST_RALPH_*`` variables, because the
            calls log is kept next to the script.
        args: the arguments after the script path on the command line, e.g. the rendered
            ``{prompt_file}`` of ``agent.command + " {prompt_file}"``.
    """

    n: int
    iteration: int | None
    prompt: str
    cwd: Path
    env: Mapping[str, str]
    args: tuple[str, ...] = ()

    @property
    def prompt_file(self) -> Path | None:
        """The prompt file the loop wrote (``PYTEST_RALPH_PROMPT_FILE``), or ``None``."""
        value = self.env.get(PROMPT_FILE_ENV)
        return Path(value) if value else None

    def to_json(self) -> dict[str, Any]:
        """This call as a JSON-ready dict (the calls log's line format)."""
        return {"n": self.n, "iteration": self.iteration, "prompt": self.prompt,
                "cwd": str(self.cwd), "env": dict(self.env), "args": list(self.args)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AgentCall:
        """The inverse of :meth:`to_json`.

        Raises:
            KeyError, TypeError, ValueError: ``data`` is not such a dict.
        """
        iteration = data["iteration"]
        return cls(n=int(data["n"]), iteration=None if iteration is None else int(iteration),
                   prompt=str(data["prompt"]), cwd=Path(data["cwd"]),
                   env={str(k): str(v) for k, v in dict(data["env"]).items()},
                   args=tuple(str(a) for a in data.get("args", ())))


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


#: What a callable step returns: an exit code, ``None`` (exit 0), or a step to apply.
StepResult: TypeAlias = "int | Patch | Mapping[str, Any] | None"
#: A callable step: runs in the test process with the call, returns a :data:`StepResult`.
StepFunction: TypeAlias = Callable[[AgentCall], StepResult]
#: One step of a script: a callable, a :class:`Patch`, or a dict with the keys of ``Patch``.
Step: TypeAlias = "StepFunction | Patch | Mapping[str, Any]"


@dataclass(frozen=True)
class StepError:
    """A callable step that raised (or returned something that is not a step result).

    Attributes:
        n: the call number.
        error: the exception.
        traceback: the formatted traceback, as the client printed it to the agent's stderr.
    """

    n: int
    error: BaseException
    traceback: str


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


def _normalize_step(step: Patch | Mapping[str, Any], where: str) -> dict[str, Any]:
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


def _calls_path(script: Path) -> Path:
    return script.with_name(script.stem + ".calls.jsonl")


def _reset_state(script: Path) -> None:
    for path in (_state_path(script), _calls_path(script)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _write_script(path: Path, steps: list[dict[str, Any]], *, server: dict[str, Any] | None,
                  env: str) -> None:
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
                              f"{_calls_path(script).name}) to start the script again") from None
        n = done + 1
        call["n"] = n
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"calls": n}).encode() + b"\n")
        with _calls_path(script).open("a", encoding="utf-8") as log:
            log.write(json.dumps(call) + "\n")
    return n


def read_calls(script: str | os.PathLike[str]) -> list[AgentCall]:
    """The calls recorded for a script file, oldest first (``[]`` before the first call).

    Args:
        script: the script file (of :func:`write_replay`, or :attr:`ScriptedAgent.script`).

    Returns:
        one :class:`AgentCall` per run, read from the calls log next to the script
        (``<stem>.calls.jsonl``); a line being written at that moment is left out.
    """
    path = _calls_path(Path(script))
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    calls = []
    for line in lines:
        try:
            calls.append(AgentCall.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            continue
    return calls


def replay_command(script: str | os.PathLike[str]) -> str:
    """The command line (for ``--ralph-agent``) that runs a script file with this Python.

    Returns:
        ``<sys.executable> -P -m pytest_ralph.testing replay <absolute script path>``, quoted
        with :func:`shlex.join`. ``-P`` keeps the project's own modules (a ``json.py`` in the
        rootdir, say) from shadowing the standard library in the client; Python 3.10 has no
        ``-P``, so there a short ``-c`` bootstrap drops the working folder from ``sys.path``.
    """
    path = str(Path(script).resolve())
    if sys.version_info >= (3, 11):
        argv = [sys.executable, "-P", "-m", _MODULE, "replay", path]
    else:  # pragma: no cover - exercised on Python 3.10 only
        argv = [sys.executable, "-c",
                f"import sys; del sys.path[0]; from {_MODULE} import main; sys.exit(main())",
                "replay", path]
    return shlex.join(argv)


def write_replay(path: str | os.PathLike[str], steps: Sequence[Patch | Mapping[str, Any]]
                 ) -> str:
    """Write a replay script of dict steps for a file-based scripted agent; its command line.

    The script runs outside Python tests (an example, a shell session, a CI job) as
    ``python -m pytest_ralph.testing replay PATH``. Its call counter is kept in
    ``<stem>.state.json`` and its calls in ``<stem>.calls.jsonl`` next to it (the calls keep
    only the ``PYTEST_RALPH_*`` environment variables), so the script carries on across
    separate processes: two ``pytest --ralph`` runs, or a resumed loop. Writing the script
    again removes both, starting it over. Keep the script out of the folders the loop guards
    (see the README), e.g. next to the project or in an ignored folder.

    Args:
        path: the script file to write (JSON; parent folders are created).
        steps: :class:`Patch` objects or dicts with the keys of ``Patch``.

    Returns:
        the command line for ``--ralph-agent`` (see :func:`replay_command`).

    Raises:
        ScriptError: a step is a callable (only :class:`ScriptedAgent` serves those), or is
            not a valid step.
    """
    script = Path(path)
    encoded = []
    for i, step in enumerate(steps, 1):
        if callable(step):
            raise ScriptError(f"step {i}: a replay script holds dict steps only; callable "
                              "steps need a ScriptedAgent (the ralph_agent fixture)")
        encoded.append(_normalize_step(step, f"step {i}"))
    _write_script(script, encoded, server=None, env="ralph")
    _reset_state(script)
    return replay_command(script)


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
        with socket.create_connection((host, port), timeout=_REQUEST_TIMEOUT) as conn:
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
        sys.stderr.write(f"{_PREFIX}: call {n}: the script's {len(steps)} step(s) have run "
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
            return _apply_step(_normalize_step(answer["step"], f"call {n}: returned step"), cwd)
        return int(answer.get("exit", 0))
    return _apply_step(_normalize_step(step, f"step {n} of {script}"), cwd)


_USAGE = f"""usage: python -m {_MODULE} replay SCRIPT [ARGS...]

Run one step of a scripted agent (see write_replay() and ScriptedAgent in {_MODULE}).
The prompt is read from stdin (or the file named by {PROMPT_FILE_ENV}); ARGS are
recorded with the call. Exit: the step's exit code; 1 when a callable step raised; 2 when
the script or a step cannot be used.
"""


def main(argv: Sequence[str] | None = None) -> int:
    """The client's entry point: ``python -m pytest_ralph.testing replay SCRIPT [ARGS...]``.

    Args:
        argv: the arguments after the module name (default ``sys.argv[1:]``).

    Returns:
        the exit code (see the module docstring); 2 with a usage message for bad arguments.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] != "replay":
        sys.stderr.write(_USAGE)
        return EXIT_SCRIPT_ERROR
    try:
        return _run_script(Path(args[1]), args[2:])
    except (ScriptError, OSError) as exc:
        sys.stdout.flush()
        sys.stderr.write(f"{_PREFIX}: {exc}\n")
        return EXIT_SCRIPT_ERROR


# --------------------------------------------------------------------------------------------
# The test-process side: ScriptedAgent and its server


def _describe(fn: object) -> str:
    name = getattr(fn, "__qualname__", None) or repr(fn)
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if module else str(name)


class ScriptedAgent:
    """A scripted agent: a command for ``--ralph-agent`` that follows ``steps``.

    Args:
        steps: the script, one step per agent run in call order (see the module docstring):
            callables ``fn(call: AgentCall) -> int | None | Patch | dict`` run in this
            process, :class:`Patch` objects and dicts run in the agent's process. After the
            last step, each further run does nothing and exits 0.
        workdir: the folder for the agent's own files (the script, its state and calls log).
            By default a private temporary folder, removed by :meth:`close`; a folder given
            here is created if needed and kept, files included.

    A server thread (loopback, random port, random token) is started only when a step is a
    callable; callables run one at a time, in that thread. :meth:`close` stops it (a run of
    the agent after that exits 2); use the agent as a context manager or through the
    ``ralph_agent`` fixture. A callable still running when the loop kills the agent at its
    timeout finishes in the background; the next callable waits for it.

    Mind the return value of a callable: it is the exit code, so
    ``lambda call: (call.cwd / "a.txt").write_text("x")`` exits 1 (``write_text`` returns the
    number of characters written). Use a ``def`` that returns nothing, or a dict step.

    Attributes:
        steps: the steps, as given.
        script: the script file (JSON) that the agent's command runs; its state file and calls
            log are next to it.
        errors: the callable steps that raised, in call order (a test that wants every step
            to succeed can ``assert not agent.errors``).

    Raises:
        ScriptError: a step is neither a callable nor a valid :class:`Patch` / dict step.
    """

    def __init__(self, steps: Sequence[Step], *,
                 workdir: str | os.PathLike[str] | None = None) -> None:
        import secrets
        import tempfile

        self.steps: tuple[Step, ...] = tuple(steps)
        self.errors: list[StepError] = []
        self._functions: dict[int, StepFunction] = {}
        encoded: list[dict[str, Any]] = []
        for i, step in enumerate(self.steps, 1):
            if callable(step):
                self._functions[i] = step
                encoded.append({"callable": _describe(step)})
            else:
                encoded.append(_normalize_step(step, f"step {i}"))
        self._token = secrets.token_hex(32)
        self._lock = threading.Lock()
        self._closed = False
        self._final_calls: list[AgentCall] | None = None
        self._server: socketserver.ThreadingTCPServer | None = None
        self._thread: threading.Thread | None = None
        if workdir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="pytest-ralph-agent-"))
            self._owns_dir = True
        else:
            self._dir = Path(workdir).resolve()
            self._dir.mkdir(parents=True, exist_ok=True)
            self._owns_dir = False
        fd, name = tempfile.mkstemp(prefix="scripted-agent-", suffix=".json", dir=self._dir)
        os.close(fd)
        self.script = Path(name)
        server_info = None
        if self._functions:
            self._start_server()
            assert self._server is not None
            server_info = {"host": _HOST, "port": self._server.server_address[1],
                           "token": self._token}
        _write_script(self.script, encoded, server=server_info, env="all")
        _reset_state(self.script)

    @property
    def command(self) -> str:
        """The command line to pass to ``--ralph-agent`` (``sys.executable``, quoted with
        :func:`shlex.join`; see :func:`replay_command`). Append ``" {prompt_file}"`` to have
        the prompt file's path in :attr:`AgentCall.args`."""
        return replay_command(self.script)

    @property
    def argv(self) -> list[str]:
        """:attr:`command` split into an argv list (for :mod:`subprocess`)."""
        return shlex.split(self.command)

    @property
    def calls(self) -> list[AgentCall]:
        """Every run of the agent so far, oldest first, including those after the script ran
        out (read from the calls log; kept when :meth:`close` removes it)."""
        if self._final_calls is not None:
            return list(self._final_calls)
        return read_calls(self.script)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Stop the server and remove the private folder (idempotent). :attr:`calls` and
        :attr:`errors` stay readable."""
        if self._closed:
            return
        self._closed = True
        self._final_calls = read_calls(self.script)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._owns_dir:
            import shutil

            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> ScriptedAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<ScriptedAgent {len(self.steps)} steps, {len(self.calls)} calls, {state}>"

    def _start_server(self) -> None:
        import hmac
        import socketserver

        agent = self

        class Handler(socketserver.StreamRequestHandler):
            timeout = _REQUEST_TIMEOUT

            def handle(self) -> None:
                try:
                    request = json.loads(self.rfile.readline(_MAX_REQUEST))
                except (OSError, ValueError):
                    return
                if not isinstance(request, dict) or not hmac.compare_digest(
                        str(request.get("token", "")).encode(), agent._token.encode()):
                    return  # not our client: no answer
                answer = agent._answer(request)
                with contextlib.suppress(OSError):  # the client was killed meanwhile
                    self.wfile.write(json.dumps(answer).encode() + b"\n")

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = False

        self._server = Server((_HOST, 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name="pytest-ralph-scripted-agent", daemon=True)
        self._thread.start()

    def _answer(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Run the callable step of call ``request["n"]``; the answer for the client."""
        try:
            n = int(request["n"])
            call = AgentCall.from_json(request["call"])
        except (KeyError, TypeError, ValueError) as exc:
            return {"error": f"{_PREFIX}: bad request: {exc!r}\n"}
        fn = self._functions.get(n)
        if fn is None:
            return {"error": f"{_PREFIX}: step {n} is not a callable step\n"}
        with self._lock:
            try:
                result = fn(call)
            except SystemExit as exc:
                if exc.code is None or isinstance(exc.code, int):
                    return {"exit": exc.code or 0}
                return {"error": f"{exc.code}\n"}
            except BaseException as exc:  # pytest.fail() and friends are BaseExceptions
                text = traceback.format_exc()
                self.errors.append(StepError(n, exc, text))
                return {"error": f"{_PREFIX}: step {n} ({_describe(fn)}) raised:\n{text}"}
            try:
                return _encode_result(result, n)
            except ScriptError as exc:
                self.errors.append(StepError(n, exc, str(exc)))
                return {"error": f"{_PREFIX}: {exc}\n"}


def _encode_result(result: object, n: int) -> dict[str, Any]:
    """The answer for a callable's return value.

    Raises:
        ScriptError: the value is not ``None``, an exit code or a step.
    """
    if result is None:
        return {"exit": 0}
    if isinstance(result, bool) or not isinstance(result, (int, Patch, Mapping)):
        raise ScriptError(f"step {n} returned {result!r}; return an exit code (int), None "
                          "(exit 0), or a Patch / dict step for the agent to apply")
    if isinstance(result, int):
        if not -64 <= result <= 255:
            raise ScriptError(f"step {n} returned exit code {result}; use 0..255 (or -N for "
                              "signal N)")
        return {"exit": result}
    return {"step": _normalize_step(result, f"step {n}: returned step")}


class AgentFactory:
    """Makes :class:`ScriptedAgent` objects and closes them all at once (the ``ralph_agent``
    fixture's value).

    ``factory(*steps, workdir=None)`` returns a new agent; :meth:`close` closes every agent
    made so far.
    """

    def __init__(self) -> None:
        #: Every agent made so far, oldest first.
        self.agents: list[ScriptedAgent] = []

    def __call__(self, *steps: Step,
                 workdir: str | os.PathLike[str] | None = None) -> ScriptedAgent:
        """A new :class:`ScriptedAgent` following ``steps`` (see its arguments).

        Raises:
            ScriptError: a step is not valid.
        """
        agent = ScriptedAgent(steps, workdir=workdir)
        self.agents.append(agent)
        return agent

    def close(self) -> None:
        """Close every agent made by this factory."""
        for agent in self.agents:
            agent.close()


def ralph_agent_fixture() -> Iterator[AgentFactory]:
    """The body of the ``ralph_agent`` fixture: yields an :class:`AgentFactory`, then closes
    every agent it made (use ``yield from ralph_agent_fixture()`` in a fixture of your own)."""
    factory = AgentFactory()
    try:
        yield factory
    finally:
        factory.close()


if __name__ == "__main__":
    sys.exit(main())
