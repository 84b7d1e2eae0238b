"""The live view (pytest_ralph.loop.live): the status line, heartbeat lines, echo, live.json
and the check phase's progress file read defensively."""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_ralph.agents.activity import Activity
from pytest_ralph.loop.live import (
    CLEAR_LINE,
    LIVE_NAME,
    PROGRESS_LINE_BYTES,
    CheckProgress,
    LiveView,
    read_live,
)
from pytest_ralph.util.redact import Redactor

REDACTOR = Redactor({"SECRET-123": "MY_TOKEN"}, shapes=False)


def _until(predicate: Callable[[], bool], seconds: float = 20.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def _lines(path: Path, *records: object) -> None:
    with path.open("ab") as f:
        for r in records:
            f.write(r if isinstance(r, bytes) else json.dumps(r).encode() + b"\n")


# -- the check phase's progress file --------------------------------------------------------


def test_progress_counts_each_criterion_once_and_its_failures(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    path.touch()
    p = CheckProgress(path)
    _lines(path, {"collected": 3}, {"nodeid": "prd.json::US-1::AC1", "outcome": "passed"})
    p.poll()
    assert (p.collected, p.checked, p.failing) == (3, 1, 0)
    _lines(path, {"nodeid": "prd.json::US-1::AC2", "outcome": "failed"},
           {"nodeid": "prd.json::US-1::AC1", "outcome": "failed"},  # its teardown, say
           b'{"nodeid": "prd.json::US-1::AC3", "outc')  # half a line: waits for its end
    p.poll()
    assert (p.checked, p.failing) == (2, 2)
    _lines(path, b'ome": "skipped"}\n')
    p.poll()
    assert (p.checked, p.failing) == (3, 3)


def test_progress_skips_junk_the_code_under_test_writes(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    _lines(path, b"not json\n", b"[1]\n", b'{"collected": "9"}\n', b'{"collected": -1}\n',
           b'{"collected": 1e30}\n', b'{"collected": 10000000000}\n', b'{"collected": true}\n',
           b'{"nodeid": 5, "outcome": "passed"}\n', b'{"nodeid": "x", "outcome": "won"}\n',
           b"\xff\xfe\n", b"[" * 100000 + b"\n", b"{" + b" " * (PROGRESS_LINE_BYTES * 3) + b"\n",
           b'{"nodeid": "ok", "outcome": "passed"}\n', b"NaN\n")
    p = CheckProgress(path)
    for _ in range(5):
        p.poll()
    assert (p.collected, p.checked, p.failing) == (0, 1, 0)


def test_progress_does_not_follow_a_symlink_nor_block_on_a_fifo(tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere.jsonl"
    _lines(secret, {"collected": 7})
    link = tmp_path / "link.jsonl"
    link.symlink_to(secret)
    p = CheckProgress(link)
    p.poll()
    assert p.collected == 0
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "fifo.jsonl"
        os.mkfifo(fifo)
        q = CheckProgress(fifo)
        q.poll()  # returns at once: opened non-blocking, and not a regular file
        assert q.checked == 0
    CheckProgress(tmp_path / "missing").poll()  # no file yet: nothing


# -- the status line, heartbeat, echo --------------------------------------------------------


def test_terminal_status_line_is_rewritten_in_place_and_cleared(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the line is cut to the terminal's width
    out = io.StringIO()
    view = LiveView(out, REDACTOR, tty=True, heartbeat=30, tick=0.02)
    view.title = "[ralph iteration 1/5]"
    act = Activity("claude")
    with view.phase("agent", activity=act):
        assert _until(lambda: "0 turns, 0 tool calls" in out.getvalue())
        act.feed(json.dumps({"type": "assistant", "message": {"id": "m", "content": [
            {"type": "tool_use", "name": "Bash", "input": {"command": "cat SECRET-123"}}]}}
                            ).encode())
        assert _until(lambda: "last Bash" in out.getvalue())
    text = out.getvalue()
    assert text.endswith(CLEAR_LINE)  # the line is taken off the terminal at the end
    assert "\n" not in text  # rewritten in place, never a new line
    shown = text.split(CLEAR_LINE)
    assert "[ralph iteration 1/5] agent 0 s: 0 turns, 0 tool calls" in shown
    assert any(s.startswith("[ralph iteration 1/5] agent ") and s.endswith(
        "1 turn, 1 tool call, last Bash `cat [redacted $MY_TOKEN]`") for s in shown)
    assert "SECRET-123" not in text


def test_check_phase_line_shows_criteria_checked_and_failing(tmp_path: Path) -> None:
    out = io.StringIO()
    view = LiveView(out, REDACTOR, tty=True, heartbeat=30, tick=0.02)
    path = tmp_path / "progress.jsonl"
    with view.phase("check", total=4) as shown:
        assert _until(lambda: "check 0 s: 0/4 criteria checked" in out.getvalue())
        shown.progress_file(path)
        _lines(path, {"collected": 4}, {"nodeid": "a", "outcome": "passed"},
               {"nodeid": "b", "outcome": "failed"})
        assert _until(lambda: "2/4 criteria checked, 1 failing" in out.getvalue())


def test_heartbeat_lines_without_a_terminal(tmp_path: Path) -> None:
    out = io.StringIO()
    view = LiveView(out, REDACTOR, tty=False, heartbeat=0.05, tick=0.02)
    view.title = "[ralph iteration 2/5]"
    with view.phase("agent", activity=Activity("plain")):
        assert _until(lambda: out.getvalue().count("\n") >= 3)
    lines = out.getvalue().splitlines()
    assert all(line.startswith("pytest-ralph: [ralph iteration 2/5] agent ") and
               line.endswith(" s: 0 lines of output") for line in lines)
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


@pytest.mark.parametrize(("tty", "heartbeat", "quiet"), [(False, 0.0, False),
                                                          (False, 0.02, True),
                                                          (True, 30.0, True)])
def test_heartbeat_off_or_quiet_prints_nothing_but_keeps_live_json(
        tmp_path: Path, tty: bool, heartbeat: float, quiet: bool) -> None:
    out = io.StringIO()
    view = LiveView(out, REDACTOR, tty=tty, heartbeat=heartbeat, quiet=quiet, tick=0.02)
    view.folder = tmp_path
    with view.phase("agent", activity=Activity("plain"), log_path=tmp_path / "agent.log"):
        # ten ticks at least (live.json is rewritten at each)
        assert _until(lambda: (read_live(tmp_path) or {}).get("elapsed", 0) >= 0.2)
    assert out.getvalue() == ""


def test_echo_takes_the_status_line_off_first(tmp_path: Path) -> None:
    out = io.StringIO()
    view = LiveView(out, REDACTOR, tty=True, heartbeat=30, tick=0.02)
    with view.phase("agent", activity=Activity("plain")):
        assert _until(lambda: "agent" in out.getvalue())
        view.echo(b"agent says hi\n")
        view.echo(b"no newline")
    text = out.getvalue()
    assert CLEAR_LINE + "agent says hi\n" in text
    assert "no newline\n" in text


def test_a_closed_console_stops_the_view_not_the_phase(tmp_path: Path) -> None:
    out = io.StringIO()
    view = LiveView(out, REDACTOR, tty=True, heartbeat=30, tick=0.02)
    out.close()
    view.folder = tmp_path
    with view.phase("agent", activity=Activity("plain")):
        view.echo(b"x\n")
        assert _until(lambda: (read_live(tmp_path) or {}).get("elapsed", 0) >= 0.1)


# -- live.json --------------------------------------------------------------------------------


def test_live_json_while_running_between_phases_and_removed_at_the_end(tmp_path: Path) -> None:
    view = LiveView(io.StringIO(), REDACTOR, tty=False, heartbeat=0, tick=0.02)
    view.folder = tmp_path
    view.title = "[ralph iteration 1/3]"
    act = Activity("claude")
    log = tmp_path / "iteration-001" / "agent.log"
    with view.phase("agent", activity=act, log_path=log):
        rec = read_live(tmp_path)
        assert rec is not None and rec["phase"] == "agent" and rec["running"] is True
        act.feed(json.dumps({"type": "assistant", "message": {"id": "m", "content": [
            {"type": "tool_use", "name": "Edit", "input": {"file_path": "src/SECRET-123.py"}}
        ]}}).encode())
        assert _until(lambda: (read_live(tmp_path) or {}).get("last_event") ==
                      "Edit `src/[redacted $MY_TOKEN].py`")
        rec = read_live(tmp_path) or {}
        assert rec["log"] == str(log) and rec["title"] == "[ralph iteration 1/3]"
        assert rec["pid"] == os.getpid() and rec["started"]
    rec = read_live(tmp_path) or {}
    assert rec["phase"] == "between phases" and rec["running"] is False
    assert rec["last_event"] == "Edit `src/[redacted $MY_TOKEN].py`"
    assert "SECRET-123" not in (tmp_path / LIVE_NAME).read_text(encoding="utf-8")
    view.end()
    assert not (tmp_path / LIVE_NAME).exists()


def test_read_live_of_a_missing_or_damaged_record_is_none(tmp_path: Path) -> None:
    assert read_live(tmp_path) is None
    (tmp_path / LIVE_NAME).write_text("[1, 2]", encoding="utf-8")
    assert read_live(tmp_path) is None
    (tmp_path / LIVE_NAME).write_bytes(b"\xff{")
    assert read_live(tmp_path) is None
