"""Run the coding agent once: argv (never a shell), prompt on stdin and in a file.

The agent command is a command line split with :func:`shlex.split`; the placeholder
``{prompt_file}`` in any argument is replaced by the path of the prompt file. The
agent runs in its own process group; its timeout kills the whole group.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ..sandbox.bwrap import Confinement, Sandbox, exit_status, wrap
from ..util.env import CONTROLLER_ENV
from ..util.process import read_tail, run_streaming, supervised
from ..util.redact import Redactor
from .readers import MAX_LINE_BYTES

if TYPE_CHECKING:
    from .readers import OutputReader, Verdict

#: Outcomes after which the agent is taken to have run properly (the breaker counts them).
RAN_OUTCOMES = ("ok", "timeout")

#: Every outcome class: ``ok`` exit 0; ``exit-nonzero``; ``timeout`` killed at the timeout;
#: ``not-found`` the executable is missing; ``crash`` killed by a signal; ``api-error`` and
#: ``rate-limited`` as the CLI's structured output (or documented stderr format) says.
OUTCOMES = ("ok", "exit-nonzero", "timeout", "not-found", "crash", "api-error", "rate-limited")



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


#: Characters of the agent's command line shown by :func:`shown_argv` (and
#: :meth:`AgentRun.describe`), and of one argument in it.
SHOWN_ARGV_CHARS = 80
SHOWN_ARG_CHARS = 40


def _shown_arg(arg: str, limit: int) -> str:
    """One argument cut to about ``limit`` characters: a path keeps its end (``.../iteration-001/
    prompt.md``), any other text (a prompt given as an argument, say) its first line's head."""
    if len(arg) <= limit and "\n" not in arg:
        return arg
    if "/" in arg and not any(ch.isspace() for ch in arg):
        tail = arg[-(limit - 3):]
        cut = tail.find("/")
        return "..." + (tail[cut:] if 0 <= cut < len(tail) - 1 else tail)
    line = arg.strip().splitlines()[0] if arg.strip() else ""
    return (line[:limit - 3] if len(line) >= limit - 3 else line) + "..."


def shown_argv(argv: Sequence[str], redactor: Redactor | None = None,
               limit: int = SHOWN_ARGV_CHARS) -> str:
    """The agent's command line as the loop shows it: ``python agent.py --fast``.

    The executable is shown by its name when it is an absolute path
    (``/usr/local/bin/claude`` as ``claude``). Each argument has its secrets redacted first
    (``redactor``, default :meth:`pytest_ralph.util.redact.Redactor.from_env`: a cut never
    leaves part of a secret behind), then is cut to :data:`SHOWN_ARG_CHARS` (a long path
    keeps its end, a long text its head); the arguments are joined with shell quoting
    (:func:`shlex.join`) and the whole cut to ``limit`` characters, ``...`` marking every
    cut. ``?`` for an empty argv."""
    if not argv:
        return "?"
    redact = (redactor or Redactor.from_env()).text
    exe = Path(argv[0]).name if os.path.isabs(argv[0]) else argv[0]
    text = shlex.join(_shown_arg(redact(a), SHOWN_ARG_CHARS) for a in (exe, *argv[1:]))
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


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
        log_path: file holding the agent's stdout and stderr (secrets redacted).
        log_tail: the last lines of that log.
        detail: why the run got its outcome, one line, when the CLI's structured output
            said (``result is_error: API Error: 500 ...``); ``""`` otherwise.
        cost_usd: what the run cost in US dollars, when the CLI reports it.
        input_tokens, output_tokens: tokens used, when the CLI reports them.
        turns: model turns, when the CLI reports them.
        reset_at: for ``rate-limited``: when the limit resets (epoch seconds), when stated.
        retry_after: for ``rate-limited``: seconds to wait, when stated as a duration.
    """

    argv: tuple[str, ...]
    outcome: str
    exit_code: int | None
    duration: float
    log_path: Path
    log_tail: str
    detail: str = ""
    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    turns: int | None = None
    reset_at: float | None = None
    retry_after: float | None = None

    @property
    def ran(self) -> bool:
        """Whether the agent ran properly (its iteration counts for the breaker)."""
        return self.outcome in RAN_OUTCOMES

    def describe(self, redactor: Redactor | None = None) -> str:
        """One line: ``agent `claude -p --verbose` exit 0 in 212.4 s``: the argv as
        :func:`shown_argv` shows it (``redactor`` as there), the outcome, the duration and
        what the agent reported (:meth:`usage`)."""
        name = shown_argv(self.argv, redactor)
        if self.outcome == "timeout":
            what = "timed out (process group killed)"
        elif self.outcome == "not-found":
            what = "not found"
        elif self.outcome == "crash":
            what = f"killed by signal {-(self.exit_code or 0)}"
        elif self.outcome in ("api-error", "rate-limited"):
            said = f": {self.detail}" if self.detail else ""
            what = f"{self.outcome} (exit {self.exit_code}{said})"
        else:
            what = f"exit {self.exit_code}"
        usage = self.usage()
        return f"agent `{name}` {what} in {self.duration:.1f} s" + (
            f" ({usage})" if usage else "")

    def usage(self) -> str:
        """What the agent reported: ``$0.0120, 3 turns, 300 in / 60 out tokens``; ``""`` when
        it reported nothing."""
        parts = []
        if self.cost_usd is not None:
            parts.append(f"${self.cost_usd:.4f}")
        if self.turns is not None:
            parts.append(f"{self.turns} turn{'s' if self.turns != 1 else ''}")
        if self.input_tokens is not None or self.output_tokens is not None:
            parts.append(f"{self.input_tokens or 0} in / {self.output_tokens or 0} out tokens")
        return ", ".join(parts)


#: Lines of stderr kept for the output reader (each cut to :data:`STDERR_LINE_BYTES`).
STDERR_TAIL_LINES = 40

#: Bytes of one stderr line kept for the output reader.
STDERR_LINE_BYTES = 2000


class _Lines:
    """Splits a byte stream into lines, each cut to ``limit`` bytes, handed to ``sink``."""

    def __init__(self, sink: Callable[[bytes], None], limit: int) -> None:
        self.sink = sink
        self.limit = limit
        self.buf = bytearray()
        self.cut = False

    def feed(self, chunk: bytes) -> None:
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            part = chunk[start:] if nl < 0 else chunk[start:nl]
            if not self.cut:
                room = self.limit - len(self.buf)
                self.buf += part[:room]
                self.cut = len(part) > room
            if nl < 0:
                return
            self.end()
            start = nl + 1

    def end(self) -> None:
        line = bytes(self.buf).rstrip(b"\r")
        self.buf.clear()
        self.cut = False
        self.sink(line)

    def close(self) -> None:
        if self.buf:
            self.end()


#: Bytes of a line's start the agent log holds back, waiting for its end (see
#: :meth:`_Output._write`); a longer line is written as it comes.
LOG_PENDING_BYTES = 64 * 1024


class _Output:
    """Where the agent's output goes while it runs: the log file (secrets redacted, stdout
    and stderr interleaved as they come, flushed at each write so that ``tail -f`` shows it),
    stdout lines to the CLI's output reader (and ``on_stdout_line``), what the log gets to
    ``on_log`` too, and the last lines of stderr. Memory stays bounded whatever the output's
    size."""

    def __init__(self, log: IO[bytes], reader: OutputReader | None,
                 redactor: Redactor | None, *,
                 on_log: Callable[[bytes], None] | None = None,
                 on_stdout_line: Callable[[bytes], None] | None = None) -> None:
        self.log = log
        self.lock = threading.Lock()
        self.reader = reader
        self.on_log = on_log
        self.on_stdout_line = on_stdout_line
        self.redact = {name: (redactor.fresh() if redactor else None)
                       for name in ("out", "err")}
        self.pending = {"out": b"", "err": b""}
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self.out_lines = _Lines(self._stdout_line, MAX_LINE_BYTES)
        self.err_lines = _Lines(self._stderr_line, STDERR_LINE_BYTES)

    def _stdout_line(self, line: bytes) -> None:
        if self.reader is not None:
            with contextlib.suppress(Exception):  # a reader must never stop the loop
                self.reader.feed_stdout(line)
        if self.on_stdout_line is not None:
            with contextlib.suppress(Exception):  # nor a live view
                self.on_stdout_line(line)

    def _stderr_line(self, line: bytes) -> None:
        self.stderr_tail.append(line.decode("utf-8", "replace"))

    def _write(self, stream: str, chunk: bytes, *, end: bool = False) -> None:
        """Write ``chunk`` (redacted) to the log in whole lines, so that stdout and stderr
        interleave at line ends only: a line's start waits for its end, up to
        :data:`LOG_PENDING_BYTES` (or ``end``)."""
        r = self.redact[stream]
        data = r.stream(chunk) if r is not None else chunk
        if r is not None:
            data += r.flush() if end else r.line_end()
        data = self.pending[stream] + data
        cut = len(data) if end or len(data) > LOG_PENDING_BYTES else data.rfind(b"\n") + 1
        self.pending[stream] = data[cut:]
        if cut:
            with self.lock, contextlib.suppress(OSError, ValueError):
                self.log.write(data[:cut])
                self.log.flush()  # live: a reader of the log sees each line as it comes
            if self.on_log is not None:
                with contextlib.suppress(Exception):  # a closed console never stops the run
                    self.on_log(data[:cut])

    def stdout(self, chunk: bytes) -> None:
        self._write("out", chunk)
        self.out_lines.feed(chunk)

    def stderr(self, chunk: bytes) -> None:
        self._write("err", chunk)
        self.err_lines.feed(chunk)

    def close(self) -> None:
        self.out_lines.close()
        self.err_lines.close()
        for stream in ("out", "err"):
            self._write(stream, b"", end=True)


def run_agent(
    argv: Sequence[str],
    *,
    prompt: str,
    prompt_file: Path,
    cwd: Path,
    timeout: float,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    reader: OutputReader | None = None,
    redactor: Redactor | None = None,
    sandbox: Sandbox | None = None,
    confinement: Confinement | None = None,
    on_log: Callable[[bytes], None] | None = None,
    on_stdout_line: Callable[[bytes], None] | None = None,
) -> AgentRun:
    """Write ``prompt`` to ``prompt_file``, then run the agent with the prompt on stdin.

    The agent runs confined by ``sandbox`` with ``confinement`` when the sandbox confines
    (:func:`pytest_ralph.sandbox.bwrap.wrap`: its PID namespace ends every process it started);
    otherwise under the :data:`pytest_ralph.util.process.SUPERVISOR` (Linux), which stops every
    process the agent started when it ends, ``setsid`` or not.

    The agent's stdout and stderr are streamed into ``log_path`` while it runs (never held
    whole in memory; each line is flushed as it comes, so ``tail -f`` follows it); stdout
    lines also go to ``reader``, the CLI's structured-output reader
    (:mod:`pytest_ralph.agents.readers`), which classifies the run: an ``api-error`` or
    ``rate-limited`` verdict wins over the exit code (Claude Code reports an API error with
    ``is_error: true``, formerly with exit 0). Otherwise exit 0 is ``ok``, a signal
    ``crash``, any other status ``exit-nonzero``; the timeout gives ``timeout``.

    Args:
        argv: the agent argv; ``{prompt_file}`` placeholders are replaced.
        prompt: the prompt text (UTF-8; already redacted by the caller).
        prompt_file: where the prompt is written.
        cwd: the agent's working directory (also its ``PWD``, whatever ``env`` says).
        timeout: seconds before the agent's process group is killed.
        log_path: file that receives the agent's stdout and stderr.
        env: extra environment variables (on top of ``os.environ`` and
            ``PYTEST_RALPH_CONTROLLER=1``).
        reader: the CLI's output reader, or ``None`` to classify by the exit code alone.
        redactor: replaces secret values in the log, or ``None``.
        sandbox: the loop's sandbox, or ``None`` (unconfined).
        confinement: what the agent may write when ``sandbox`` confines (required then).
        on_log: called with each piece of output the log gets (bytes, redacted, whole lines
            but at the end or for a line over :data:`LOG_PENDING_BYTES`), as it comes, from
            the thread that read it: ``--ralph-echo``. Its errors are ignored.
        on_stdout_line: called with each stdout line (bytes, not redacted, cut to
            :data:`pytest_ralph.agents.readers.MAX_LINE_BYTES`), as it comes, from the
            reading thread: the live view's activity model. Its errors are ignored.

    Raises:
        KeyboardInterrupt: after the agent's process group has been killed.
    """
    prompt_file.write_text(prompt, encoding="utf-8")
    full = render_argv(argv, prompt_file)
    run_env = dict(os.environ)
    run_env.update(env or {})
    run_env[CONTROLLER_ENV] = "1"
    # PWD names the folder the agent runs in, as a shell would set it: opencode 1.18.33 takes
    # its working folder from PWD, not getcwd(), so the loop's own PWD would send its tools
    # into the folder pytest was started from.
    run_env["PWD"] = os.path.abspath(cwd)
    with log_path.open("w+b") as log:
        sink = _Output(log, reader, redactor, on_log=on_log, on_stdout_line=on_stdout_line)
        try:
            if sandbox is not None and sandbox.confined:
                if confinement is None:
                    raise ValueError("run_agent: a confining sandbox needs a confinement")
                exe = (os.path.join(cwd, full[0]) if os.sep in full[0] else
                       shutil.which(full[0]))
                if exe is None or not os.path.isfile(exe):
                    raise FileNotFoundError(2, "No such file or directory", full[0])
                run_argv = wrap(sandbox, [os.path.abspath(exe), *full[1:]], confinement)
            else:
                run_argv = supervised(full, cwd=cwd)
            finished = run_streaming(run_argv, cwd=cwd, timeout=timeout,
                                     on_stdout=sink.stdout, on_stderr=sink.stderr,
                                     input=prompt.encode("utf-8"), env=run_env, watchdog=True)
            if sandbox is not None and sandbox.confined and not finished.timed_out:
                finished = replace(finished, returncode=exit_status(finished.returncode))
        except (FileNotFoundError, PermissionError) as exc:
            log.write(f"pytest-ralph: cannot start the agent: {exc}\n".encode())
            return AgentRun(tuple(full), "not-found", None, 0.0, log_path, str(exc))
        finally:
            sink.close()
        with sink.lock:
            tail = read_tail(log, 2000)
    verdict: Verdict | None = None
    if reader is not None:
        with contextlib.suppress(Exception):  # a reader must never stop the loop
            verdict = reader.verdict(finished.returncode, list(sink.stderr_tail))
    said = verdict.outcome if verdict is not None else None
    if finished.timed_out:
        outcome = "timeout"
    elif said in ("api-error", "rate-limited"):
        outcome = said
    elif finished.returncode == 0:
        outcome = "ok"
    elif finished.returncode is not None and finished.returncode < 0:
        outcome = "crash"
    else:
        outcome = "exit-nonzero"
    run = AgentRun(tuple(full), outcome, finished.returncode, finished.duration, log_path, tail)
    if verdict is None:
        return run
    detail = str(verdict.detail or "") if said else ""
    if redactor is not None:
        detail = redactor.text(detail)
    return replace(run, detail=detail[:500], cost_usd=verdict.cost_usd,
                   input_tokens=verdict.input_tokens, output_tokens=verdict.output_tokens,
                   turns=verdict.turns, reset_at=verdict.reset_at,
                   retry_after=verdict.retry_after)
