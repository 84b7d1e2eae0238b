"""The agent's output is live: ``agent.log`` holds each line while the agent still runs, and
``run_agent``'s callbacks get the output as it comes (real subprocesses)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from pytest_ralph.agents.run import AgentRun, run_agent
from pytest_ralph.util.redact import Redactor
from tests.support.env import PYTHON

#: An agent that prints a flushed line, then waits (at most 60 s) for the file ``go``.
WAITING_AGENT = """
import os, sys, time
print("first line from the agent SECRET-123", flush=True)
end = time.monotonic() + 60
while not os.path.exists("go") and time.monotonic() < end:
    time.sleep(0.05)
print("last line", flush=True)
"""


def _start(tmp_path: Path, **kwargs: object) -> tuple[threading.Thread, list[AgentRun]]:
    script = tmp_path / "agent.py"
    script.write_text(WAITING_AGENT, encoding="utf-8")
    done: list[AgentRun] = []

    def go() -> None:
        done.append(run_agent([PYTHON, str(script)], prompt="p", prompt_file=tmp_path / "p.md",
                              cwd=tmp_path, timeout=120, log_path=tmp_path / "agent.log",
                              **kwargs))  # type: ignore[arg-type]

    thread = threading.Thread(target=go)
    thread.start()
    return thread, done


def _wait_for(predicate: object, seconds: float = 30.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_agent_log_holds_the_first_line_while_the_agent_runs(tmp_path: Path) -> None:
    redactor = Redactor({"SECRET-123": "MY_TOKEN"}, shapes=False)
    thread, done = _start(tmp_path, redactor=redactor)
    log = tmp_path / "agent.log"
    try:
        seen = _wait_for(lambda: log.is_file() and b"first line" in log.read_bytes())
        still_running = not done and thread.is_alive()
        text = log.read_bytes()
    finally:
        (tmp_path / "go").write_text("", encoding="utf-8")
        thread.join(90)
    assert seen, "agent.log never showed the agent's first line"
    assert still_running, "the agent had ended before its line was seen"
    assert b"SECRET-123" not in text  # redacted as it is written
    assert done and done[0].outcome == "ok"
    assert b"last line" in log.read_bytes()


def test_on_log_gets_redacted_lines_and_on_stdout_line_raw_lines_as_they_come(
        tmp_path: Path) -> None:
    echoed: list[bytes] = []
    lines: list[bytes] = []
    thread, done = _start(tmp_path, redactor=Redactor({"SECRET-123": "MY_TOKEN"}, shapes=False),
                          on_log=echoed.append, on_stdout_line=lines.append)
    try:
        seen = _wait_for(lambda: any(b"first line" in e for e in echoed))
        early = (list(echoed), list(lines), thread.is_alive())
    finally:
        (tmp_path / "go").write_text("", encoding="utf-8")
        thread.join(90)
    assert seen and early[2]
    assert b"".join(early[0]).startswith(b"first line from the agent ")
    assert b"SECRET-123" not in b"".join(echoed)
    assert early[1] == [b"first line from the agent SECRET-123"]
    assert lines[-1] == b"last line"
    assert done[0].outcome == "ok"


def test_callbacks_that_raise_do_not_stop_the_run(tmp_path: Path) -> None:
    def broken(_data: bytes) -> None:
        raise RuntimeError("boom")

    (tmp_path / "go").write_text("", encoding="utf-8")
    thread, done = _start(tmp_path, on_log=broken, on_stdout_line=broken)
    thread.join(90)
    assert done[0].outcome == "ok"
    assert b"last line" in (tmp_path / "agent.log").read_bytes()


def test_redactor_line_end_releases_a_whole_line_unless_a_secret_spans_lines() -> None:
    r = Redactor({"SECRET-123": "MY_TOKEN"}).fresh()
    held = r.stream(b"token SECRET-123 here\n")
    assert held + r.line_end() == b"token [redacted $MY_TOKEN] here\n"
    # a line not ended yet stays held back
    first = r.stream(b"half SECRET") + r.line_end()
    assert b"SECRET" not in first
    assert first + r.stream(b"-123\n") + r.line_end() == b"half [redacted $MY_TOKEN]\n"
    multi = Redactor({"line one\nline two": "PEM"}).fresh()
    out = multi.stream(b"key: line one\n") + multi.line_end()
    out += multi.stream(b"line two\n") + multi.flush()
    assert b"line one" not in out and b"[redacted $PEM]" in out
