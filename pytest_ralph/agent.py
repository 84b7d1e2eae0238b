"""Run the coding agent once: argv (never a shell), prompt on stdin and in a file.

The agent command is a command line split with :func:`shlex.split`; the placeholder
``{prompt_file}`` in any argument is replaced by the path of the prompt file. The
agent runs in its own process group; its timeout kills the whole group.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .process import read_tail, run_in_group

#: Outcomes after which the agent is taken to have run properly (the breaker counts them).
RAN_OUTCOMES = ("ok", "timeout")

#: Every outcome class: ``ok`` exit 0; ``exit-nonzero``; ``timeout`` killed at the timeout;
#: ``not-found`` the executable is missing; ``crash`` killed by a signal.
OUTCOMES = ("ok", "exit-nonzero", "timeout", "not-found", "crash")

#: Environment variable set for the agent: a Stop hook inside it must not drive a second loop.
CONTROLLER_ENV = "PYTEST_RALPH_CONTROLLER"


class AgentCommandError(ValueError):
    """The agent command is empty, cannot be split, or names an executable that does not exist."""


def split_command(command: str) -> list[str]:
    """Split an agent command line into argv with POSIX shell quoting rules.

    Raises:
        AgentCommandError: the command is empty or has unbalanced quotes.
    """
    try:
        argv = shlex.split(command, posix=os.name != "nt")
    except ValueError as exc:
        raise AgentCommandError(f"cannot split agent command {command!r}: {exc}") from None
    if not argv:
        raise AgentCommandError("the agent command is empty")
    return argv


def resolve_executable(argv: Sequence[str], cwd: Path) -> str:
    """The full path of ``argv[0]``, looked up on PATH (or relative to ``cwd`` if it has a slash).

    Raises:
        AgentCommandError: no such executable, or a file that is not executable.
    """
    exe = argv[0]
    if os.sep in exe or (os.altsep and os.altsep in exe):
        candidate = (cwd / exe) if not os.path.isabs(exe) else Path(exe)
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
        if candidate.is_file():
            raise AgentCommandError(
                f"agent {exe!r} exists but is not executable (argv {list(argv)!r}); make it "
                f"executable (chmod +x {exe}) or run it through its interpreter, e.g. "
                f"`python {exe}`")
    else:
        found = shutil.which(exe)
        if found:
            return found
    raise AgentCommandError(f"agent executable not found: {exe!r} (argv {list(argv)!r}); "
                            "install it, or set --ralph-agent to a command that exists")


def render_argv(argv: Sequence[str], prompt_file: Path) -> list[str]:
    """``argv`` with ``{prompt_file}`` replaced by ``prompt_file`` in every argument."""
    return [a.replace("{prompt_file}", str(prompt_file)) for a in argv]


@dataclass(frozen=True)
class AgentRun:
    """One run of the agent.

    Attributes:
        argv: the argv that was run.
        outcome: one of :data:`OUTCOMES`.
        exit_code: the exit status, negative for a signal, ``None`` on timeout or not-found.
        duration: wall-clock seconds.
        log_path: file holding the agent's stdout and stderr.
        log_tail: the last lines of that log.
    """

    argv: tuple[str, ...]
    outcome: str
    exit_code: int | None
    duration: float
    log_path: Path
    log_tail: str

    @property
    def ran(self) -> bool:
        """Whether the agent ran properly (its iteration counts for the breaker)."""
        return self.outcome in RAN_OUTCOMES

    def describe(self) -> str:
        """One line: ``agent `claude` exit 0 in 212.4 s``."""
        name = Path(self.argv[0]).name if self.argv else "?"
        if self.outcome == "timeout":
            what = "timed out (process group killed)"
        elif self.outcome == "not-found":
            what = "not found"
        elif self.outcome == "crash":
            what = f"killed by signal {-(self.exit_code or 0)}"
        else:
            what = f"exit {self.exit_code}"
        return f"agent `{name}` {what} in {self.duration:.1f} s"


def run_agent(
    argv: Sequence[str],
    *,
    prompt: str,
    prompt_file: Path,
    cwd: Path,
    timeout: float,
    log_path: Path,
    env: Mapping[str, str] | None = None,
) -> AgentRun:
    """Write ``prompt`` to ``prompt_file``, then run the agent with the prompt on stdin.

    Args:
        argv: the agent argv; ``{prompt_file}`` placeholders are replaced.
        prompt: the prompt text (UTF-8).
        prompt_file: where the prompt is written.
        cwd: the agent's working directory.
        timeout: seconds before the agent's process group is killed.
        log_path: file that receives the agent's stdout and stderr.
        env: extra environment variables (on top of ``os.environ`` and
            ``PYTEST_RALPH_CONTROLLER=1``).

    Raises:
        KeyboardInterrupt: after the agent's process group has been killed.
    """
    prompt_file.write_text(prompt, encoding="utf-8")
    full = render_argv(argv, prompt_file)
    run_env = dict(os.environ)
    run_env.update(env or {})
    run_env[CONTROLLER_ENV] = "1"
    with log_path.open("w+b") as log:
        try:
            finished = run_in_group(full, cwd=cwd, output=log, timeout=timeout,
                                    input=prompt.encode("utf-8"), env=run_env,
                                    watchdog=True)
        except (FileNotFoundError, PermissionError) as exc:
            log.write(f"pytest-ralph: cannot start the agent: {exc}\n".encode())
            return AgentRun(tuple(full), "not-found", None, 0.0, log_path, str(exc))
        tail = read_tail(log, 2000)
    if finished.timed_out:
        outcome = "timeout"
    elif finished.returncode == 0:
        outcome = "ok"
    elif finished.returncode is not None and finished.returncode < 0:
        outcome = "crash"
    else:
        outcome = "exit-nonzero"
    return AgentRun(tuple(full), outcome, finished.returncode, finished.duration, log_path, tail)
