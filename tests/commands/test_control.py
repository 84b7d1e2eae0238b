"""`pytest --ralph-status` and `pytest --ralph-cancel`: liveness by the state folder's lock
(never by a pid that may have been reused), the status wording, other resumable runs,
conflicting flags, and a read-only state folder."""

from __future__ import annotations

import datetime as dt
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_ralph.state.history import History
from tests.support.loop import alive, finish, ralph, wait_for
from tests.support.prd import files_criteria, story
from tests.support.privileges import unprivileged

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="flock, signals and /proc")

# Records each iteration; on the iteration named in ``sleep-at``, writes its pid to
# ``sleeping`` and sleeps.
AGENT = """
import os, pathlib, time
n = os.environ["PYTEST_RALPH_ITERATION"]
stop = pathlib.Path("sleep-at")
if stop.exists() and stop.read_text().strip() == n:
    stop.unlink()
    pathlib.Path("sleeping").write_text(str(os.getpid()))
    time.sleep(120)
"""

# Holds the lock of the state folder given as argv[1] the way a loop does (exclusive flock,
# "pid N, started ..." inside), touches argv[2] when it does, then waits to be killed.
HOLDER = """
import fcntl, os, pathlib, sys, time
f = open(pathlib.Path(sys.argv[1]) / "lock", "a+")
fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
f.seek(0)
f.truncate()
f.write(f"pid {os.getpid()}, started 2026-01-01 00:00:00 UTC\\n")
f.flush()
pathlib.Path(sys.argv[2]).touch()
time.sleep(120)
"""

SETTINGS = {"max_iterations": 5, "breaker": 50, "agent_errors": 3}


def pytest_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]


def run_cmd(pytester: pytest.Pytester, cmd: list[str]) -> tuple[int, str]:
    proc = subprocess.run(cmd, cwd=pytester.path, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=120, check=False)
    return proc.returncode, proc.stdout.decode()


def state(pytester: pytest.Pytester) -> Path:
    return pytester.path / ".pytest_ralph"


def row(pytester: pytest.Pytester, run_id: str) -> tuple[str, str, int]:
    with sqlite3.connect(state(pytester) / "ralph.db") as conn:
        status, reason, cancel = conn.execute(
            "SELECT status, reason, cancel_requested FROM runs WHERE id = ?",
            (run_id,)).fetchone()
    return str(status), str(reason), int(cancel)


def spawn(*argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process that happens to have the pid a dead loop had."""
    proc = spawn("sleep", "60")
    yield proc
    stop(proc)


@pytest.fixture
def crashed(pytester: pytest.Pytester, write_prd: Callable[..., Path],
            agent: Callable[[str, str], str]) -> str:
    """A run killed (kill -9) while its agent ran iteration 2; checks the status of the
    running loop first. Returns the run id."""
    write_prd(story("US-001", *files_criteria("never.txt")))
    (pytester.path / "sleep-at").write_text("2")
    proc = ralph(pytester, "--ralph", "--ralph-agent", agent("agent.py", AGENT),
                 "--ralph-breaker", "50")
    try:
        wait_for(pytester.path / "sleeping")
        code, out = finish(ralph(pytester, "--ralph-status"))
        assert code == 0, out
        assert f"status: running (pid {proc.pid})" in out
        assert "iteration 1/5 done, iteration 2 running; started" in out
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with sqlite3.connect(state(pytester) / "ralph.db") as conn:
        [(run_id, status)] = conn.execute("SELECT id, status FROM runs").fetchall()
    assert status == "running"  # as the dead loop left it
    return str(run_id)


def test_cancel_never_signals_a_process_that_reused_the_dead_loops_pid(
        pytester: pytest.Pytester, crashed: str, sleeper: subprocess.Popen[bytes]) -> None:
    # The worst case: the history and the (unheld) lock file both name the reused pid.
    with sqlite3.connect(state(pytester) / "ralph.db") as conn:
        conn.execute("UPDATE runs SET pid = ?", (sleeper.pid,))
    (state(pytester) / "lock").write_text(f"pid {sleeper.pid}, started 2026-01-01 00:00:00 UTC\n")
    code, out = finish(ralph(pytester, "--ralph-status"))
    assert code == 0, out
    assert "status: running (" not in out
    assert f"its loop (pid {sleeper.pid} on {socket.gethostname()}) is gone" in out
    code, out = finish(ralph(pytester, "--ralph-cancel"))
    assert code == 0, out
    assert f"run {crashed} (crashed: its loop, pid {sleeper.pid}, is gone) is now cancelled" in out
    time.sleep(0.5)
    assert sleeper.poll() is None and alive(sleeper.pid), "cancel killed an unrelated process"
    status, reason, cancel = row(pytester, crashed)
    assert (status, cancel) == ("cancelled", 1)
    assert reason.startswith("cancelled by --ralph-cancel after a crash (its loop, pid ")
    code, out = finish(ralph(pytester, "--ralph-status"))
    assert "status: cancelled (the next `pytest --ralph` resumes it" in out, out
    assert "reason: cancelled by --ralph-cancel after a crash" in out


def test_status_of_a_crashed_run_measures_time_to_its_last_record(
        pytester: pytest.Pytester, crashed: str) -> None:
    first = finish(ralph(pytester, "--ralph-status"))
    time.sleep(1.5)
    second = finish(ralph(pytester, "--ralph-status"))
    assert first == second, (first, second)  # "time spent" does not grow after the crash
    code, out = first
    assert code == 0, out
    assert "is gone: the next `pytest --ralph` resumes it" in out
    line = next(ln for ln in out.splitlines() if "time spent" in ln)
    assert line.startswith("  iteration 1/5; started "), line
    assert "running" not in line


def test_status_and_cancel_follow_the_lock_holder(
        pytester: pytest.Pytester, sleeper: subprocess.Popen[bytes]) -> None:
    root = state(pytester)
    root.mkdir()
    ready = pytester.path / "holding"
    holder = spawn(sys.executable, "-c", HOLDER, str(root), str(ready))
    try:
        wait_for(ready, 30)
        t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        host = socket.gethostname()
        prds = {name: pytester.path / f"{name}.json" for name in ("a", "b", "c", "d")}
        def begin(h: History, run_id: str, prd: str, minutes: int, pid: int) -> None:
            h.begin_run(run_id, prd=prds[prd], rootdir=pytester.path, argv=["agent"],
                        settings=SETTINGS, started=t0 + dt.timedelta(minutes=minutes),
                        pid=pid, hostname=host)

        with History.open(root / "ralph.db") as h:
            begin(h, "r-done", "d", 0, sleeper.pid)
            h.finish_run("r-done", "limit", 1, "limit", t0 + dt.timedelta(seconds=30))
            # A dead loop's run whose pid was reused, while another loop holds the lock.
            begin(h, "r-old", "a", 1, sleeper.pid)
        code, out = run_cmd(pytester, pytest_cmd("--ralph-status"))
        assert code == 0, out
        assert out.startswith("pytest-ralph: run r-old of"), out
        assert "is gone" in out and "status: running (" not in out
        with History.open(root / "ralph.db") as h:
            begin(h, "r-run", "b", 10, holder.pid)  # the lock holder's run: no iteration yet
            begin(h, "r-int", "c", 20, sleeper.pid)  # started last, but not the running one
            h.set_status("r-int", "interrupted", "interrupted")
        code, out = run_cmd(pytester, pytest_cmd("--ralph-status"))
        assert code == 0, out
        lines = out.splitlines()
        assert lines[0] == f"pytest-ralph: run r-run of {prds['b']}", out
        assert f"status: running (pid {holder.pid})" in out
        assert "  baseline check running; started 2026-01-01 00:10:00 UTC" in out
        others = [ln for ln in lines if "also resumable" in ln]
        assert others == [f"  also resumable: run r-int of {prds['c']} (interrupted)",
                          f"  also resumable: run r-old of {prds['a']} (crashed)"], out
        code, out = run_cmd(pytester, pytest_cmd("--ralph-cancel"))
        assert code == 0 and "cancel requested: run r-run" in out, out
        assert holder.wait(10) == -signal.SIGTERM
        assert sleeper.poll() is None
        assert row(pytester, "r-run")[2] == 1
        # No loop holds the lock now: cancel takes the last run, which just stopped.
        code, out = run_cmd(pytester, pytest_cmd("--ralph-cancel"))
        assert code == 0 and "run r-int (interrupted, no loop running) is now cancelled" in out
        assert row(pytester, "r-int")[:2] == ("cancelled",
                                              "cancelled by --ralph-cancel after an interrupt")
        assert sleeper.poll() is None
    finally:
        stop(holder)


@pytest.mark.parametrize("flags", [("--ralph-status", "--ralph-cancel"),
                                   ("--ralph-status", "--ralph"),
                                   ("--ralph-cancel", "--ralph-dry-run"),
                                   ("--ralph", "--ralph-cancel", "--ralph-status")])
def test_status_and_cancel_go_alone(pytester: pytest.Pytester, flags: tuple[str, ...]) -> None:
    code, out = run_cmd(pytester, pytest_cmd(*flags))
    assert code == 4, out
    first = "--ralph-status" if "--ralph-status" in flags else "--ralph-cancel"
    rest = " or ".join(f for f in ("--ralph-cancel", "--ralph", "--ralph-dry-run")
                       if f in flags and f != first)
    assert f"ERROR: pytest-ralph: {first} cannot be used with {rest} (" in out, out
    assert "run each on its own" in out and "Traceback" not in out
    assert not state(pytester).exists()


def test_status_of_a_read_only_state_folder(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str]) -> None:
    write_prd(story("US-001", *files_criteria("never.txt")))
    code, out = finish(ralph(pytester, "--ralph", "--ralph-agent", agent("agent.py", AGENT),
                             "--ralph-max-iterations", "1"))
    assert code == 1, out
    root = state(pytester)
    files = sorted(p.name for p in root.iterdir())
    assert "ralph.db" in files and "ralph.db-shm" not in files  # the loop closed cleanly
    cmd = unprivileged(pytest_cmd("--ralph-status"))  # as root (CI): where the mode applies
    root.chmod(0o555)
    try:
        code, out = run_cmd(pytester, cmd)
        assert sorted(p.name for p in root.iterdir()) == files  # nothing created
    finally:
        root.chmod(0o755)
    assert code == 0, out
    assert "status: limit; exit 1" in out and "iteration 1/1; started" in out
    assert "unable to open" not in out


def test_an_unreadable_history_says_how_to_recover(
        pytester: pytest.Pytester, write_prd: Callable[..., Path],
        agent: Callable[[str, str], str]) -> None:
    write_prd(story("US-001", *files_criteria("never.txt")))
    code, out = finish(ralph(pytester, "--ralph", "--ralph-agent", agent("agent.py", AGENT),
                             "--ralph-max-iterations", "1"))
    assert code == 1, out
    cmd = unprivileged(pytest_cmd("--ralph-status"))  # as root (CI): where the mode applies
    root = state(pytester)
    db = root / "ralph.db"
    db.chmod(0o000)
    root.chmod(0o555)
    try:
        code, out = run_cmd(pytester, cmd)
    finally:
        root.chmod(0o755)
        db.chmod(0o644)
    assert code == 4, out
    assert f"cannot read the run history {db}" in out
    assert "check the permissions of" in out and "Traceback" not in out
