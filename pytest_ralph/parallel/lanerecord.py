"""The records and views of a parallel run (:mod:`pytest_ralph.parallel.scheduler`).

- :class:`Record`: ``<state>/parallel.json``, the run, each story's phase, attempts, lane and
  process group, the lane timeline and the merge queue's history, rewritten after each change;
- :class:`LaneView`: the live view (one status line per running lane on a terminal);
  :func:`lane_phase` reads what a lane does from its log;
- :func:`stop_group`: stop a lane's process group;
- :func:`status_lines` and :func:`cancel_parallel`: what ``--ralph-status`` and
  ``--ralph-cancel`` do about a parallel run; :func:`history_cost`: what a lane's agent runs
  cost.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ..loop.live import LIVE_NAME, read_live
from ..state.folder import DB_NAME
from .names import lane_key

#: The record of the current (or last) parallel run, in the state folder.
RECORD = "parallel.json"

#: Seconds a lane's process group gets between SIGTERM and SIGKILL when the run stops.
STOP_GRACE_SECONDS = 20.0

_PHASE_LINE = re.compile(r"\[ralph (baseline|iteration (\d+)/(\d+))\]")


#: The folder of the state folder that holds each parallel run's lane states and logs.
PARALLEL = "parallel"


def run_folder(state_dir: Path, run_id: str) -> Path:
    """``<state>/parallel/<run>``: the lanes' state folders and logs, the cancel file and the
    shared pause file of a run (the worktrees are elsewhere, in ``<state>/lanes``)."""
    return state_dir / PARALLEL / lane_key(run_id)


def clock(seconds: float) -> str:
    """``12.3s`` or ``4m05s``."""
    s = int(seconds)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{seconds:.1f}s"


#: The width the live view assumes when its output's terminal does not say.
VIEW_WIDTH = 80


@dataclass
class Record:
    """``parallel.json``: the run, each story's phase and the history (JSON-able)."""

    run_id: str
    base: str
    branch: str | None
    prd: str
    started: float
    ended: float | None = None
    controller: int | None = None
    stories: dict[str, dict[str, Any]] = field(default_factory=dict)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    queue: list[dict[str, Any]] = field(default_factory=list)
    result: str = ""

    def save(self, path: Path) -> None:
        """Write the record to ``path`` at once (a temporary file renamed over it)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.__dict__, indent=1, ensure_ascii=False) + "\n",
                       encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> Record | None:
        """The record at ``path``, or ``None`` when there is none or it cannot be read."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pgid}/stat").read_text()
        if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
            return False
    return True


def stop_group(pgid: int, proc: subprocess.Popen[bytes] | None,
               grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM the process group ``pgid`` (a lane's ``pytest --ralph`` ends its run as
    interrupted, resumable), SIGKILL after ``grace`` seconds; waits for ``proc``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None and not group_alive(pgid):
            break
        if proc is None and not group_alive(pgid):
            break
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    if proc is not None:
        proc.wait()


class LaneView:
    """The live view: on a terminal one status line per running lane (phase, story,
    elapsed), redrawn in place under the event lines; otherwise the event lines only.

    A status line is cut to one column less than the terminal is wide (``width``, else the
    width of ``out``'s terminal at each redraw, else :data:`VIEW_WIDTH`): a line the terminal
    wrapped would take two rows, and the redraw, which moves up one row per line, would
    leave the first row of it on the screen."""

    def __init__(self, out: TextIO, tty: bool, width: int | None = None) -> None:
        self.out = out
        self.tty = tty
        self.width = width
        self._drawn = 0

    def _columns(self) -> int:
        if self.width is not None:
            return max(self.width, 2)
        try:
            return max(os.get_terminal_size(self.out.fileno()).columns, 2)
        except (OSError, ValueError, AttributeError):  # no terminal, no file descriptor
            return VIEW_WIDTH

    def _clear(self) -> None:
        if self._drawn:
            self.out.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def say(self, line: str) -> None:
        """Print one event line (above the status lines on a terminal)."""
        if self.tty:
            self._clear()
        self.out.write(line + "\n")
        self.out.flush()

    def draw(self, lines: list[str]) -> None:
        """Redraw the status lines (a terminal only)."""
        if not self.tty:
            return
        self._clear()
        fits = self._columns() - 1
        for line in lines:
            self.out.write(f"\x1b[K{line[:fits]}\n")
        self._drawn = len(lines)
        self.out.flush()

    def end(self) -> None:
        """Remove the status lines."""
        if self.tty:
            self._clear()
            self.out.flush()


def lane_phase(log: Path) -> tuple[str, int]:
    """What a lane does and how many iterations it finished: ``("iteration 2/5: agent",
    1)``. The phase comes from the live-state record of the lane's run (``live.json`` in its
    state folder ``<key>.<attempt>.state`` beside the log), else from the last phase heading
    in the log (``"baseline"``, ``"iteration 2/5"``; ``"starting"`` before any); the count
    from the log's last iteration heading (each printed when its iteration ends)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.path.getsize(log) - 20000))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        text = ""
    found = _PHASE_LINE.findall(text)
    phase, n = ("starting", 0) if not found else (found[-1][0], int(found[-1][1] or 0))
    runs = log.with_name(log.name.removesuffix(".log") + ".state") / "runs"
    with contextlib.suppress(OSError):
        folders = sorted((p for p in runs.iterdir() if (p / LIVE_NAME).exists()),
                         key=lambda p: p.name)
        live = read_live(folders[-1]) if folders else None
        if live is not None and live.get("running") is True:
            title = str(live.get("title") or "").strip("[]").removeprefix("ralph ")
            phase = f"{title}: {live.get('phase') or '?'}" if title else str(
                live.get("phase") or phase)
    return phase, n


def history_cost(state: Path) -> float:
    """The cost, in US dollars, of every agent run recorded in the history of the state
    folder ``state`` (0 when there is none or it cannot be read)."""
    db = state / DB_NAME
    if not db.exists():
        return 0.0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0)
        try:
            tables = {r[0] for r in con.execute("select name from sqlite_master")}
            total = 0.0
            for table in tables:
                cols = {r[1] for r in con.execute(f"pragma table_info({table})")}
                if "cost_usd" in cols:
                    row = con.execute(f"select sum(cost_usd) from {table}").fetchone()
                    total += float(row[0] or 0.0)
            return total
        finally:
            con.close()
    except sqlite3.Error:
        return 0.0


# -- the one-shot commands ------------------------------------------------------------------


def status_lines(state_dir: Path) -> list[str]:
    """``--ralph-status``'s lines of the current or last parallel run: one per story (phase,
    attempt, iterations, branch), each followed by the lane runs the run history holds of it
    (:func:`_recorded`), or none when the state folder has no parallel run."""
    rec = Record.load(Path(state_dir) / RECORD)
    if rec is None:
        return []
    alive = rec.ended is None and rec.controller is not None and _pid_alive(rec.controller)
    how = ("running" if alive else f"ended: {rec.result}" if rec.ended is not None else
           "stopped (the same command resumes it)")
    lines = [f"parallel run {rec.run_id} ({how}), from {rec.branch or 'detached HEAD'} at "
             f"{rec.base[:12]}:"]
    recorded = _recorded(Path(state_dir), rec.run_id)
    for sid, st in rec.stories.items():
        phase, n = st["phase"], st.get("iterations", 0)
        if phase == "running" and st.get("log"):
            now, at = lane_phase(Path(st["log"]))
            n += at
            phase = f"{'running' if alive else 'stopped'} ({now})"
        lines.append(f"  {sid}: {phase}, attempt {st['attempt']}, {n} iteration(s)"
                     + (f", branch {st['branch']}" if st.get("branch") else "")
                     + (f" ({st['why']})" if st.get("why") else ""))
        lines += recorded.get(sid, [])
    return lines


def _recorded(state_dir: Path, run_id: str) -> dict[str, list[str]]:
    """What the run history (``<state>/ralph.db``) holds of the lanes of ``run_id``: story ->
    one line per lane run copied in (attempt, run id, status, iterations); ``{}`` when there
    is no history or it cannot be read (``--ralph-status`` says so for the loop's runs)."""
    from ..state.history import History
    from ..state.records import HistoryError

    try:
        history = History.open(state_dir / DB_NAME, readonly=True)
    except HistoryError:
        return {}
    out: dict[str, list[str]] = {}
    with history:
        try:
            lanes = history.lanes(run_id)
        except sqlite3.Error:
            return {}
        for lane in lanes:
            out.setdefault(lane.story, []).append(
                f"    in {DB_NAME}: attempt {lane.attempt}, run {lane.run_id} ({lane.status}), "
                f"{lane.iterations} iteration(s)")
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cancel_parallel(state_dir: Path) -> str | None:
    """``--ralph-cancel`` of a parallel run that runs: leave the cancel file for its
    controller and SIGTERM it (it stops every lane's process group, exit 2); the message, or
    ``None`` when no parallel run runs in ``state_dir``."""
    rec = Record.load(Path(state_dir) / RECORD)
    if rec is None or rec.ended is not None or rec.controller is None or \
            not _pid_alive(rec.controller):
        return None
    folder = run_folder(Path(state_dir), rec.run_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "cancel").write_text("cancel\n", encoding="utf-8")
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(rec.controller, signal.SIGTERM)
    return (f"pytest-ralph: cancel requested: parallel run {rec.run_id} (pid "
            f"{rec.controller}) stops every lane and exits 2; the same command resumes it")
