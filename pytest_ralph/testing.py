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

Running the client imports only the standard library (and this package's ``__init__``,
:mod:`pytest_ralph.agents.scripted` and :mod:`pytest_ralph.util.env`), so it starts fast;
pytest is never imported here. The script file, the steps and the client are in
:mod:`pytest_ralph.agents.scripted`; every name users need is importable from here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from .agents.scripted import EXIT_SCRIPT_ERROR as EXIT_SCRIPT_ERROR
from .agents.scripted import EXIT_STEP_RAISED as EXIT_STEP_RAISED
from .agents.scripted import (
    MODULE,
    PREFIX,
    REQUEST_TIMEOUT,
    Patch,
    ScriptError,
    calls_path,
    normalize_step,
    reset_state,
    write_script,
)
from .agents.scripted import SCRIPT_FORMAT as SCRIPT_FORMAT
from .agents.scripted import SCRIPT_VERSION as SCRIPT_VERSION
from .agents.scripted import STEP_KEYS as STEP_KEYS
from .agents.scripted import main as main
from .util.env import PROMPT_FILE_ENV

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

_HOST = "127.0.0.1"
#: The largest request the server reads (a prompt and an environment), in bytes.
_MAX_REQUEST = 256 * 1024 * 1024


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


def read_calls(script: str | os.PathLike[str]) -> list[AgentCall]:
    """The calls recorded for a script file, oldest first (``[]`` before the first call).

    Args:
        script: the script file (of :func:`write_replay`, or :attr:`ScriptedAgent.script`).

    Returns:
        one :class:`AgentCall` per run, read from the calls log next to the script
        (``<stem>.calls.jsonl``); a line being written at that moment is left out.
    """
    path = calls_path(Path(script))
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
        argv = [sys.executable, "-P", "-m", MODULE, "replay", path]
    else:  # pragma: no cover - exercised on Python 3.10 only
        argv = [sys.executable, "-c",
                f"import sys; del sys.path[0]; from {MODULE} import main; sys.exit(main())",
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
        encoded.append(normalize_step(step, f"step {i}"))
    write_script(script, encoded, server=None, env="ralph")
    reset_state(script)
    return replay_command(script)


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
                encoded.append(normalize_step(step, f"step {i}"))
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
        write_script(self.script, encoded, server=server_info, env="all")
        reset_state(self.script)

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
            timeout = REQUEST_TIMEOUT

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
            return {"error": f"{PREFIX}: bad request: {exc!r}\n"}
        fn = self._functions.get(n)
        if fn is None:
            return {"error": f"{PREFIX}: step {n} is not a callable step\n"}
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
                return {"error": f"{PREFIX}: step {n} ({_describe(fn)}) raised:\n{text}"}
            try:
                return _encode_result(result, n)
            except ScriptError as exc:
                self.errors.append(StepError(n, exc, str(exc)))
                return {"error": f"{PREFIX}: {exc}\n"}


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
    return {"step": normalize_step(result, f"step {n}: returned step")}


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

