"""Streaming of a command's output: pytest_ralph.util.process.run_streaming, and
pytest_ralph.agents.run.run_agent on top of it (log file, output reader, stderr tail, redaction).

These run real subprocesses (``sys.executable``).
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_ralph.agents.readers import MAX_LINE_BYTES, Verdict
from pytest_ralph.agents.run import (
    STDERR_LINE_BYTES,
    STDERR_TAIL_LINES,
    AgentRun,
    run_agent,
)
from pytest_ralph.util import process
from pytest_ralph.util.process import CHUNK_BYTES, Finished, run_streaming
from pytest_ralph.util.redact import Redactor
from tests.support.env import PYTHON

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX process groups and signals")
linux_only = pytest.mark.skipif(not Path("/proc/self/status").is_file(),
                                reason="checks process states in /proc (Linux)")


def _script(tmp_path: Path, body: str, name: str = "child.py") -> list[str]:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return [PYTHON, str(path)]


class Collect:
    """Callbacks for run_streaming that keep every chunk, and which thread gave it."""

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self.threads: set[str] = set()

    def on_stdout(self, chunk: bytes) -> None:
        self.threads.add(threading.current_thread().name)
        self.out.append(chunk)

    def on_stderr(self, chunk: bytes) -> None:
        self.threads.add(threading.current_thread().name)
        self.err.append(chunk)


def _stream(tmp_path: Path, argv: list[str], *, timeout: float | None = 30,
            input: bytes | None = None) -> tuple[Finished, Collect]:
    c = Collect()
    finished = run_streaming(argv, cwd=tmp_path, timeout=timeout, on_stdout=c.on_stdout,
                             on_stderr=c.on_stderr, input=input)
    return finished, c


def _dead(pid: int, wait: float = 2.0) -> bool:
    """Whether ``pid`` is gone or a zombie, waiting up to ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
                state = next((ln.split(":", 1)[1].strip() for ln in f
                              if ln.startswith("State:")), "")
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state.startswith(("Z", "X")):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


# --- run_streaming -------------------------------------------------------------------------


def test_chunks_arrive_in_order_per_stream(tmp_path: Path) -> None:
    body = ("import sys\n"
            "o, e = sys.stdout.buffer, sys.stderr.buffer\n"
            "for i in range(20000):\n"
            "    o.write(b'out %06d\\n' % i)\n"
            "    e.write(b'err %06d\\n' % i)\n"
            "    if i % 97 == 0:\n"
            "        o.flush(); e.flush()\n"
            "sys.exit(4)\n")
    finished, c = _stream(tmp_path, _script(tmp_path, body))
    assert finished.returncode == 4
    assert finished.timed_out is False
    assert b"".join(c.out) == b"".join(b"out %06d\n" % i for i in range(20000))
    assert b"".join(c.err) == b"".join(b"err %06d\n" % i for i in range(20000))
    assert len(c.out) > 1 and len(c.err) > 1
    assert all(0 < len(ch) <= CHUNK_BYTES for ch in c.out + c.err)
    assert threading.current_thread().name not in c.threads  # called from reader threads


def test_no_output_and_no_input(tmp_path: Path) -> None:
    finished, c = _stream(tmp_path, _script(tmp_path, "import sys\n"
                                                      "assert sys.stdin.read() == ''\n"))
    assert finished.returncode == 0
    assert c.out == [] and c.err == []


def test_large_stdin_while_the_child_writes_large_stdout(tmp_path: Path) -> None:
    # The child writes 5 MB before it reads anything: with stdin fed from the calling
    # thread and the output read after, both pipes would fill and deadlock.
    size = 5 * 1024 * 1024
    data = os.urandom(size)
    body = ("import sys, hashlib\n"
            f"sys.stdout.buffer.write(b'y' * {size}); sys.stdout.flush()\n"
            "got = sys.stdin.buffer.read()\n"
            "sys.stderr.write(f'{len(got)} {hashlib.sha256(got).hexdigest()}')\n")
    start = time.monotonic()
    finished, c = _stream(tmp_path, _script(tmp_path, body), input=data, timeout=60)
    assert finished.returncode == 0, b"".join(c.err)[-2000:]
    assert time.monotonic() - start < 30
    out = b"".join(c.out)
    assert len(out) == size and out.count(b"y") == size
    assert b"".join(c.err).decode() == f"{size} {hashlib.sha256(data).hexdigest()}"


def test_large_stdin_to_a_child_that_exits_without_reading(tmp_path: Path) -> None:
    finished, c = _stream(tmp_path, _script(tmp_path, "print('bye')\n"),
                          input=b"z" * (8 * 1024 * 1024), timeout=30)
    assert finished.returncode == 0
    assert b"".join(c.out).strip() == b"bye"


@linux_only
def test_timeout_kills_the_group_and_returns(tmp_path: Path) -> None:
    body = ("import subprocess, sys, time, pathlib\n"
            "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "pathlib.Path('gc.pid').write_text(str(g.pid))\n"
            "print('started', flush=True)\n"
            "time.sleep(60)\n")
    start = time.monotonic()
    finished, c = _stream(tmp_path, _script(tmp_path, body), timeout=1)
    elapsed = time.monotonic() - start
    assert finished.timed_out is True
    assert finished.returncode is None
    assert 1 <= finished.duration < 6
    assert elapsed < 8
    assert b"".join(c.out) == b"started\n"
    assert _dead(int((tmp_path / "gc.pid").read_text()))


@linux_only
def test_a_grandchild_that_left_the_group_holding_the_pipes_costs_at_most_drain_seconds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # setsid: the grandchild is in a session of its own, so killing the group misses it,
    # and it holds stdout and stderr open: the readers would wait for it forever.
    monkeypatch.setattr(process, "DRAIN_SECONDS", 1.0)
    body = ("import subprocess, sys, pathlib\n"
            "g = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
            "pathlib.Path('gc.pid').write_text(str(g.pid))\n"
            "print('parent done', flush=True)\n")
    argv = _script(tmp_path, body)
    start = time.monotonic()
    try:
        finished, c = _stream(tmp_path, argv, timeout=30)
        elapsed = time.monotonic() - start
    finally:
        gc_pid = int((tmp_path / "gc.pid").read_text())
        os.kill(gc_pid, signal.SIGKILL)  # the grandchild we made escape
    assert finished.returncode == 0
    assert finished.timed_out is False
    assert b"".join(c.out) == b"parent done\n"
    assert 1.0 <= elapsed < 1.0 + 4  # the drain wait, not the grandchild's 60 s
    assert _dead(gc_pid)


def test_missing_executable_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        _stream(tmp_path, ["pytest-ralph-no-such-executable-xyz"])


# --- run_agent with an output reader -------------------------------------------------------


class Reader:
    """A tiny OutputReader: keeps the lines, answers with a fixed verdict."""

    def __init__(self, verdict: Verdict | None = None) -> None:
        self.lines: list[bytes] = []
        self.exit_code: int | None = -999
        self.stderr_tail: list[str] | None = None
        self.answer = verdict or Verdict(None)

    def feed_stdout(self, line: bytes) -> None:
        self.lines.append(line)

    def verdict(self, exit_code: int | None, stderr_tail: Sequence[str]) -> Verdict:
        self.exit_code = exit_code
        self.stderr_tail = list(stderr_tail)
        return self.answer


class Raising(Reader):
    """A reader that fails on everything."""

    def feed_stdout(self, line: bytes) -> None:
        super().feed_stdout(line)
        raise RuntimeError("bad reader")

    def verdict(self, exit_code: int | None, stderr_tail: Sequence[str]) -> Verdict:
        raise ValueError("bad verdict")


def _agent(tmp_path: Path, body: str, *, reader: Reader | None = None,
           redactor: Redactor | None = None, timeout: float = 30,
           prompt: str = "the prompt") -> AgentRun:
    argv = _script(tmp_path, body, "agent.py")
    return run_agent(argv, prompt=prompt, prompt_file=tmp_path / "prompt.md", cwd=tmp_path,
                     timeout=timeout, log_path=tmp_path / "agent.log", reader=reader,
                     redactor=redactor)


def test_reader_gets_whole_lines_however_they_are_written(tmp_path: Path) -> None:
    body = ("import sys, time\n"
            "o = sys.stdout.buffer\n"
            "for piece in [b'{\"type\": ', b'\"a\"}\\n{\"ty', b'pe\": \"b\"}\\r\\n', b'\\n',\n"
            "              b'one\\ntwo\\nthr', b'ee\\n', b'no newline at the end']:\n"
            "    o.write(piece); o.flush(); time.sleep(0.02)\n")
    reader = Reader()
    run = _agent(tmp_path, body, reader=reader)
    assert run.outcome == "ok"
    assert reader.lines == [b'{"type": "a"}', b'{"type": "b"}', b"", b"one", b"two", b"three",
                            b"no newline at the end"]
    assert reader.exit_code == 0


def test_many_lines_reach_the_reader_in_order(tmp_path: Path) -> None:
    body = ("import sys\n"
            "for i in range(50000):\n"
            "    sys.stdout.write(f'line {i}\\n')\n")
    reader = Reader()
    _agent(tmp_path, body, reader=reader)
    assert reader.lines == [b"line %d" % i for i in range(50000)]


def test_lines_over_max_line_bytes_arrive_cut(tmp_path: Path) -> None:
    n = MAX_LINE_BYTES
    body = ("import sys\n"
            "o = sys.stdout.buffer\n"
            f"o.write(b'a' * {n + 100} + b'\\n')\n"  # longer than the limit
            f"o.write(b'b' * {n} + b'\\n')\n"  # exactly the limit
            "o.write(b'after\\n')\n"
            f"o.write(b'c' * {3 * n})\n")  # no newline, at the end
    reader = Reader()
    run = _agent(tmp_path, body, reader=reader)
    assert run.outcome == "ok"
    assert [(ln[:1], len(ln)) for ln in reader.lines] == [(b"a", n), (b"b", n), (b"a", 5),
                                                         (b"c", n)]
    assert reader.lines[2] == b"after"
    # The log keeps everything.
    assert run.log_path.stat().st_size == (n + 101) + (n + 1) + 6 + 3 * n


def test_stderr_tail_of_the_last_lines_reaches_the_verdict(tmp_path: Path) -> None:
    body = ("import sys\n"
            "for i in range(100):\n"
            "    print(f'err line {i} é', file=sys.stderr)\n"
            f"sys.stderr.write('x' * {STDERR_LINE_BYTES + 500} + '\\n')\n"
            "sys.stderr.write('last without newline')\n"
            "print('on stdout')\n"
            "sys.exit(5)\n")
    reader = Reader()
    run = _agent(tmp_path, body, reader=reader)
    assert run.outcome == "exit-nonzero"
    assert reader.exit_code == 5
    tail = reader.stderr_tail
    assert tail is not None and len(tail) == STDERR_TAIL_LINES == 40
    assert tail[:-2] == [f"err line {i} é" for i in range(62, 100)]
    assert tail[-2] == "x" * STDERR_LINE_BYTES
    assert tail[-1] == "last without newline"
    assert reader.lines == [b"on stdout"]


def test_a_reader_that_raises_does_not_break_the_run(tmp_path: Path) -> None:
    body = ("import sys\n"
            # one write, so that the stderr line cannot land between them (PYTHONUNBUFFERED)
            "sys.stdout.write('one\\ntwo\\n'); sys.stdout.flush()\n"
            "print('to stderr', file=sys.stderr)\n"
            "sys.exit(3)\n")
    reader = Raising()
    run = _agent(tmp_path, body, reader=reader)
    assert run.outcome == "exit-nonzero"  # judged by the exit code alone
    assert run.exit_code == 3
    assert reader.lines == [b"one", b"two"]  # still fed after raising
    log = run.log_path.read_text()
    assert "one\ntwo\n" in log and "to stderr" in log
    assert run.detail == ""


def test_api_error_verdict_with_exit_0_is_an_api_error(tmp_path: Path) -> None:
    secret = "sk-verdict-0123456789"
    reader = Reader(Verdict("api-error", f"result is_error: API Error: 500 key {secret}",
                            cost_usd=0.25, turns=3, input_tokens=10, output_tokens=20))
    run = _agent(tmp_path, 'print(\'{"type": "result", "is_error": true}\')\n', reader=reader,
                 redactor=Redactor({secret: "API_KEY"}))
    assert run.exit_code == 0
    assert run.outcome == "api-error"
    assert run.ran is False
    assert run.detail == "result is_error: API Error: 500 key [redacted $API_KEY]"
    assert (run.cost_usd, run.turns, run.input_tokens, run.output_tokens) == (0.25, 3, 10, 20)


def test_rate_limited_verdict_wins_over_exit_nonzero(tmp_path: Path) -> None:
    reader = Reader(Verdict("rate-limited", "HTTP 429", retry_after=30.0))
    run = _agent(tmp_path, "import sys\nsys.exit(1)\n", reader=reader)
    assert run.outcome == "rate-limited"
    assert run.retry_after == 30.0
    assert run.detail == "HTTP 429"


def test_a_timeout_wins_over_the_verdict(tmp_path: Path) -> None:
    reader = Reader(Verdict("api-error", "late"))
    run = _agent(tmp_path, "import time\nprint('x', flush=True)\ntime.sleep(60)\n",
                 reader=reader, timeout=0.5)
    assert run.outcome == "timeout"
    assert reader.exit_code is None
    assert reader.lines == [b"x"]


def test_a_secret_split_across_chunks_is_redacted_in_the_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "s3cr3t-Value-0123456789"
    # Record the chunks the redactors see, to be sure the secret really came in pieces.
    chunks: list[bytes] = []
    real_stream = Redactor.stream

    def spy(self: Redactor, chunk: bytes) -> bytes:
        chunks.append(chunk)
        return real_stream(self, chunk)

    monkeypatch.setattr(Redactor, "stream", spy)
    body = ("import sys, time\n"
            f"s = {secret.encode()!r}\n"
            "for f in (sys.stdout.buffer, sys.stderr.buffer):\n"
            "    f.write(b'before '); f.flush()\n"
            "    for b in s:\n"
            "        f.write(bytes([b])); f.flush(); time.sleep(0.003)\n"
            "    f.write(b' after\\n'); f.flush()\n"
            "sys.stdout.buffer.write(b'end ' + s); sys.stdout.flush()\n")  # at the very end
    reader = Reader()
    run = _agent(tmp_path, body, reader=reader, redactor=Redactor({secret: "MY_TOKEN"}))
    assert run.outcome == "ok"
    assert len(chunks) >= 2 * 3  # each occurrence came in several chunks
    log = run.log_path.read_bytes()
    assert secret.encode() not in log
    assert secret[:8].encode() not in log  # not even a piece of it
    # Each stream is redacted on its own; a stream's held-back tail may reach the log after
    # a later chunk of the other stream, so only count here.
    assert log.count(b"[redacted $MY_TOKEN]") == 3
    assert log.count(b"before [redacted $MY_TOKEN]") == 2
    assert log.count(b" after\n") == 2
    assert b"end [redacted $MY_TOKEN]" in log
    assert len(log) == 2 * len(b"before [redacted $MY_TOKEN] after\n") + len(
        b"end [redacted $MY_TOKEN]")
    assert secret not in run.log_tail
    # The reader parses the raw output (it needs it); only what is written is redacted.
    assert reader.lines[0] == f"before {secret} after".encode()


def test_without_a_redactor_the_log_is_verbatim(tmp_path: Path) -> None:
    body = ("import sys\n"
            "sys.stdout.buffer.write(bytes(range(256)) * 1000)\n")
    run = _agent(tmp_path, body)
    assert run.log_path.read_bytes() == bytes(range(256)) * 1000


def test_stdout_and_stderr_interleave_in_the_log_at_line_ends_only(tmp_path: Path) -> None:
    body = ("import sys, time\n"
            "sys.stdout.write('par'); sys.stdout.flush(); time.sleep(0.3)\n"
            "sys.stderr.write('ERR line\\n'); sys.stderr.flush(); time.sleep(0.3)\n"
            "print('tial'); sys.stdout.write('no end'); sys.stdout.flush()\n")
    run = _agent(tmp_path, body)
    lines = run.log_path.read_text().splitlines()
    assert "partial" in lines and "ERR line" in lines, lines
    assert "no end" in lines  # a last line without its end is kept
