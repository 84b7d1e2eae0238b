"""Durable state: the SQLite history of `pytest --ralph`, resume after a crash or an interrupt,
`--ralph-status`, `--ralph-cancel`, the loop lock, damage, and kill -9 fault injection.

The loops here run with the sandbox off: their agents damage the state folder on purpose
(which a sandboxed agent cannot write, see tests/sandbox/test_sandbox.py) and report their pids for
the
test to watch (a sandboxed agent has pids of its own namespace)."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import loop
from tests.support.loop import agent_runs, alive, finish, wait_for
from tests.support.prd import files_criteria, story

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="POSIX signals and /proc")

# Records each iteration it is run for; on the iteration named in ``sleep-at`` (if present),
# writes its pid to ``sleeping`` and sleeps.
AGENT = """
import os, pathlib, time
n = os.environ["PYTEST_RALPH_ITERATION"]
with open("agent-runs.txt", "a") as f:
    f.write(n + "\\n")
stop = pathlib.Path("sleep-at")
if stop.exists() and stop.read_text().strip() == n:
    stop.unlink()
    pathlib.Path("sleeping").write_text(str(os.getpid()))
    time.sleep(120)
"""


def ralph(pytester: pytest.Pytester, *args: str) -> subprocess.Popen[bytes]:
    """:func:`tests.support.loop.ralph` with the sandbox off (see the module docstring)."""
    return loop.ralph(pytester, *args, sandbox="off")


def db(pytester: pytest.Pytester) -> sqlite3.Connection:
    return sqlite3.connect(pytester.path / ".pytest_ralph" / "ralph.db")


def runs(pytester: pytest.Pytester) -> list[tuple[str, str, int | None]]:
    with db(pytester) as conn:
        return conn.execute("SELECT id, status, exit_code FROM runs ORDER BY started").fetchall()


def iterations(pytester: pytest.Pytester, run_id: str) -> list[int]:
    with db(pytester) as conn:
        return [n for (n,) in conn.execute("SELECT n FROM iterations WHERE run_id = ? ORDER BY n",
                                           (run_id,))]


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def never_prd(write_prd: Callable[..., Path]) -> Path:
    return write_prd(story("US-001", *files_criteria("never.txt")))


def loop_args(agent: Callable[[str, str], str], *more: str) -> list[str]:
    return ["--ralph", "--ralph-agent", agent("agent.py", AGENT), "--ralph-breaker", "50", *more]


def test_killed_in_iteration_3_resumes_and_counts_every_iteration(
        pytester: pytest.Pytester, never_prd: Path, agent: Callable[[str, str], str]) -> None:
    (pytester.path / "sleep-at").write_text("3")
    proc = ralph(pytester, *loop_args(agent))
    wait_for(pytester.path / "sleeping")
    agent_pid = int((pytester.path / "sleeping").read_text())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # The watchdog stops the agent of a dead controller: no orphan waits for its timeout.
    assert gone_within(agent_pid, 5), "the agent outlived its killed controller"
    [(run_id, status, _)] = runs(pytester)
    assert status == "running"  # as the dead loop left it
    assert iterations(pytester, run_id) == [0, 1, 2]
    status_out = ralph(pytester, "--ralph-status")
    code, out = finish(status_out)
    assert code == 0 and "its loop (pid" in out and "is gone" in out, out
    code, out = finish(ralph(pytester, *loop_args(agent)))
    assert code == 1, out  # the limit of 5, counting the iterations before the crash
    assert f"resuming run {run_id} (crashed) after 2 iterations" in out
    assert "[ralph iteration 3/5]" in out and "[ralph iteration 1/5]" not in out
    assert (pytester.path / "agent-runs.txt").read_text().split() == ["1", "2", "3", "3", "4",
                                                                       "5"]
    assert runs(pytester) == [(run_id, "limit", 1)]
    assert iterations(pytester, run_id) == [0, 1, 2, 3, 4, 5]
    with db(pytester) as conn:
        kinds = [k for (k,) in conn.execute("SELECT kind FROM events WHERE run_id = ?",
                                            (run_id,))]
    assert "crash" in kinds
    report = next((pytester.path / ".pytest_ralph" / "reports").glob("*.md")).read_text()
    assert "- Resumed: this run was resumed after it was crashed" in report


def test_status_while_running_and_cancel_ends_with_exit_2(
        pytester: pytest.Pytester, never_prd: Path, agent: Callable[[str, str], str]) -> None:
    (pytester.path / "sleep-at").write_text("2")
    proc = ralph(pytester, *loop_args(agent))
    wait_for(pytester.path / "sleeping")
    agent_pid = int((pytester.path / "sleeping").read_text())
    started = time.monotonic()
    code, out = finish(ralph(pytester, "--ralph-status"))
    assert time.monotonic() - started < 10
    assert code == 0, out
    assert f"status: running (pid {proc.pid})" in out
    assert "iteration 1/5" in out and "US-001: 0 passing, 1 failing, 0 claimed" in out
    assert "identical-failure streak 1/50" in out and "last agent run: iteration 1, ok" in out
    code, out = finish(ralph(pytester, "--ralph-cancel"))
    assert code == 0 and "cancel requested" in out, out
    code, out = finish(proc)
    assert code == 2, out
    assert "pytest-ralph: cancelled (exit 2)" in out
    assert gone_within(agent_pid, 5)
    # Idempotent, and status says how to go on.
    code, out = finish(ralph(pytester, "--ralph-cancel"))
    assert code == 0 and "already cancelled" in out
    code, out = finish(ralph(pytester, "--ralph-status"))
    assert "status: cancelled (the next `pytest --ralph` resumes it" in out
    # Only an explicit `pytest --ralph` resumes it.
    code, out = finish(ralph(pytester, *loop_args(agent)))
    assert code == 1 and "(cancelled) after 1 iteration" in out, out
    assert [s for _, s, _ in runs(pytester)] == ["limit"]


def test_cancel_with_nothing_running(pytester: pytest.Pytester) -> None:
    code, out = finish(ralph(pytester, "--ralph-cancel"))
    assert code == 0 and "nothing to cancel: no runs yet" in out
    code, out = finish(ralph(pytester, "--ralph-status"))
    assert code == 0 and "no runs yet" in out


def test_sigint_and_sigterm_during_the_agent_are_resumable(
        pytester: pytest.Pytester, never_prd: Path, agent: Callable[[str, str], str]) -> None:
    for n, sig in (("1", signal.SIGINT), ("2", signal.SIGTERM)):
        (pytester.path / "sleep-at").write_text(n)
        (pytester.path / "sleeping").unlink(missing_ok=True)
        proc = ralph(pytester, *loop_args(agent))
        wait_for(pytester.path / "sleeping")
        agent_pid = int((pytester.path / "sleeping").read_text())
        proc.send_signal(sig)
        code, out = finish(proc)
        assert code == 2, out
        assert gone_within(agent_pid, 5), f"agent survived {sig!r}"
        assert [s for _, s, _ in runs(pytester)] == ["interrupted"]
    code, out = finish(ralph(pytester, *loop_args(agent, "--ralph-max-iterations", "3")))
    assert code == 1 and "(interrupted) after 1 iteration" in out, out
    [(run_id, _, _)] = runs(pytester)
    assert iterations(pytester, run_id) == [0, 1, 2, 3]


def test_finished_runs_are_not_resumed_and_new_keeps_the_old_one(
        pytester: pytest.Pytester, never_prd: Path, agent: Callable[[str, str], str]) -> None:
    args = loop_args(agent, "--ralph-max-iterations", "1")
    assert finish(ralph(pytester, *args))[0] == 1
    assert finish(ralph(pytester, *args))[0] == 1  # a finished run (limit) starts a new one
    (pytester.path / "sleep-at").write_text("1")
    proc = ralph(pytester, *args)
    wait_for(pytester.path / "sleeping")
    proc.send_signal(signal.SIGINT)
    assert finish(proc)[0] == 2
    code, out = finish(ralph(pytester, *args, "--ralph-new"))
    assert code == 1 and "resuming" not in out, out
    assert [s for _, s, _ in runs(pytester)] == ["limit", "limit", "interrupted", "limit"]


def test_a_second_loop_is_refused_and_a_dead_loops_lock_is_taken_over(
        pytester: pytest.Pytester, never_prd: Path, agent: Callable[[str, str], str]) -> None:
    state = pytester.path / ".pytest_ralph"
    state.mkdir()
    (state / "lock").write_text("pid 999999, started 2026-01-01 00:00:00 UTC\n")
    (pytester.path / "sleep-at").write_text("1")
    proc = ralph(pytester, *loop_args(agent))
    wait_for(pytester.path / "sleeping")
    code, out = finish(ralph(pytester, *loop_args(agent)))
    assert code == 4 and f"pid {proc.pid}" in out, out
    proc.send_signal(signal.SIGINT)
    code, out = finish(proc)
    assert "warning: taking over the loop lock" in out and "pid 999999" in out, out
    # A clean exit leaves no holder behind: no warning next time.
    code, out = finish(ralph(pytester, *loop_args(agent, "--ralph-max-iterations", "1")))
    assert "taking over" not in out, out


@pytest.mark.parametrize("damage", ["garbage", "truncated", "newer"])
def test_a_damaged_history_is_a_clear_error_and_never_deleted(
        pytester: pytest.Pytester, never_prd: Path, agent: Callable[[str, str], str],
        damage: str) -> None:
    args = loop_args(agent, "--ralph-max-iterations", "1")
    assert finish(ralph(pytester, *args))[0] == 1
    path = pytester.path / ".pytest_ralph" / "ralph.db"
    if damage == "garbage":
        path.write_bytes(b"this is not a database\n" * 100)
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])
    else:
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    before = never_prd.read_bytes()
    damaged = path.read_bytes()
    code, out = finish(ralph(pytester, *args))
    assert code == 4, out
    assert str(path) in out and "Traceback" not in out
    assert never_prd.read_bytes() == before
    aside = [p for p in path.parent.glob("ralph.db.damaged-*")
             if not p.name.endswith(("-wal", "-shm"))]
    if damage == "newer":
        assert "newer pytest-ralph" in out and not aside and path.read_bytes() == damaged
    else:
        assert len(aside) == 1 and aside[0].read_bytes() == damaged
        assert str(aside[0]) in out
        assert finish(ralph(pytester, *args))[0] == 1  # then a new history starts


def test_the_agent_deleting_the_state_folder_is_reported_and_survived(
        pytester: pytest.Pytester, never_prd: Path, agent: Callable[[str, str], str]) -> None:
    cmd = agent("agent.py", "import os, shutil\n"
                "if os.environ['PYTEST_RALPH_ITERATION'] == '2':\n"
                "    shutil.rmtree('.pytest_ralph')\n")
    code, out = finish(ralph(pytester, "--ralph", "--ralph-agent", cmd, "--ralph-breaker", "9",
                             "--ralph-max-iterations", "3"))
    assert code == 1, out
    assert "warning: the state folder" in out and "rebuilt the run history from memory" in out
    [(run_id, status, _)] = runs(pytester)
    assert status == "limit"
    assert iterations(pytester, run_id) == [0, 1, 2, 3]
    report = next((pytester.path / ".pytest_ralph" / "reports").glob("*.md")).read_text()
    assert "## Warnings" in report and "was deleted during the run" in report


def test_history_tables_and_constraints(pytester: pytest.Pytester, never_prd: Path,
                                        agent: Callable[[str, str], str]) -> None:
    assert finish(ralph(pytester, *loop_args(agent, "--ralph-max-iterations", "2")))[0] == 1
    with db(pytester) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        [(argv,)] = conn.execute("SELECT agent_argv FROM runs").fetchall()
        assert json.loads(argv)[-1].endswith("agent.py")
        rows = conn.execute("SELECT n, outcome, exit_code FROM agent_runs ORDER BY n").fetchall()
        assert rows == [(1, "ok", 0), (2, "ok", 0)]
        crits = conn.execute("SELECT n, story, criterion, outcome FROM criterion_results "
                             "ORDER BY n").fetchall()
        assert crits == [(n, "US-001", "AC1", "failed") for n in (0, 1, 2)]
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("UPDATE runs SET status = 'finished-ish'")


def test_kill_9_at_random_moments_loses_no_committed_iteration(
        pytester: pytest.Pytester, never_prd: Path, agent: Callable[[str, str], str]) -> None:
    cmd = agent("agent.py", "import os, random, time\n"
                "with open('agent-runs.txt', 'a') as f:\n"
                "    f.write(os.environ['PYTEST_RALPH_ITERATION'] + chr(10))\n"
                "with open('agent-pids.txt', 'a') as f:\n"
                "    f.write(str(os.getpid()) + chr(10))\n"
                "time.sleep(random.random() * 0.6)\n")
    args = ["--ralph", "--ralph-agent", cmd, "--ralph-breaker", "99",
            "--ralph-max-iterations", "12"]
    rng = random.Random(1234)
    committed: list[int] = []
    pids = pytester.path / "agent-pids.txt"
    for round_ in range(6):
        proc = ralph(pytester, *args)
        if round_ % 2:  # at a random moment: starting up, checking, recording, agent
            time.sleep(rng.uniform(0.3, 2.5))
        else:  # surely while an agent runs
            seen = len(pids.read_text().split()) if pids.exists() else 0
            deadline = time.monotonic() + 60
            while (len(pids.read_text().split()) if pids.exists() else 0) == seen:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if not (pytester.path / ".pytest_ralph" / "ralph.db").exists():
            continue
        rs = runs(pytester)
        assert len(rs) == 1, rs  # always the same run, resumed
        now = iterations(pytester, rs[0][0])
        assert now[:len(committed)] == committed, (committed, now)  # nothing committed is lost
        assert now == list(range(len(now)))  # no gaps
        committed = now
    assert all(gone_within(int(pid), 5) for pid in pids.read_text().split()), (
        "an agent outlived its controller")
    code, out = finish(ralph(pytester, *args))
    assert code == 1, out
    [(run_id, status, _)] = runs(pytester)
    assert status == "limit"
    assert iterations(pytester, run_id) == list(range(13))
    # Every committed iteration had its agent run; an iteration cut short is run again.
    assert agent_runs(pytester) >= 12


def test_a_run_whose_snapshot_was_edited_is_not_resumed(
        pytester: pytest.Pytester, never_prd: Path, agent: Callable[[str, str], str]) -> None:
    (pytester.path / "sleep-at").write_text("1")
    proc = ralph(pytester, *loop_args(agent))
    wait_for(pytester.path / "sleeping")
    proc.send_signal(signal.SIGINT)
    assert finish(proc)[0] == 2
    with db(pytester) as conn:
        conn.execute("UPDATE runs SET oracle = '{}'")
    code, out = finish(ralph(pytester, *loop_args(agent)))
    assert code == 4, out
    assert "cannot be resumed: the snapshot of its criteria" in out and "--ralph-new" in out
    assert "Traceback" not in out
    # Nor is it taken as verified by a new run: a person says so.
    code, out = finish(ralph(pytester, *loop_args(agent, "--ralph-new",
                                                  "--ralph-max-iterations", "1")))
    assert code == 4, out
    assert "the verified snapshot of the last run" in out and "cannot be read" in out
    assert "--ralph-accept-changes" in out
    code, out = finish(ralph(pytester, *loop_args(agent, "--ralph-new", "--ralph-accept-changes",
                                                  "--ralph-max-iterations", "1")))
    assert code == 1, out


def test_a_lock_file_deleted_mid_run_is_recreated(
        pytester: pytest.Pytester, never_prd: Path, agent: Callable[[str, str], str]) -> None:
    cmd = agent("agent.py", AGENT + "\nif n == '1':\n    os.remove('.pytest_ralph/lock')\n")
    (pytester.path / "sleep-at").write_text("2")
    proc = ralph(pytester, "--ralph", "--ralph-agent", cmd, "--ralph-breaker", "50")
    wait_for(pytester.path / "sleeping")
    code, out = finish(ralph(pytester, "--ralph", "--ralph-agent", cmd))
    assert code == 4 and f"pid {proc.pid}" in out, out
    proc.send_signal(signal.SIGINT)
    code, out = finish(proc)
    assert code == 2, out
    assert "warning: the loop lock" in out and "was deleted" in out, out


def test_the_agent_garbling_the_history_mid_run_is_survived(
        pytester: pytest.Pytester, never_prd: Path, agent: Callable[[str, str], str]) -> None:
    cmd = agent("agent.py", "import os\n"
                "if os.environ['PYTEST_RALPH_ITERATION'] == '2':\n"
                "    for name in ('ralph.db', 'ralph.db-wal'):\n"
                "        path = os.path.join('.pytest_ralph', name)\n"
                "        if os.path.exists(path):\n"
                "            size = os.path.getsize(path)\n"
                "            open(path, 'wb').write(os.urandom(size))\n")
    code, out = finish(ralph(pytester, "--ralph", "--ralph-agent", cmd, "--ralph-breaker", "9",
                             "--ralph-max-iterations", "3"))
    assert code == 1, out
    assert "warning: the run history" in out and "rebuilt the run history from memory" in out
    assert "Traceback" not in out
    assert list((pytester.path / ".pytest_ralph").glob("ralph.db.damaged-*"))
    [(run_id, status, _)] = runs(pytester)
    assert status == "limit"
    assert iterations(pytester, run_id) == [0, 1, 2, 3]


def test_criteria_edited_between_crash_and_resume_are_not_blamed_on_the_agent(
        pytester: pytest.Pytester, never_prd: Path, agent: Callable[[str, str], str]) -> None:
    (pytester.path / "sleep-at").write_text("2")
    proc = ralph(pytester, *loop_args(agent))
    wait_for(pytester.path / "sleeping")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    data = json.loads(never_prd.read_text())
    data["userStories"].append(story("US-002", *files_criteria("extra.txt")))
    never_prd.write_text(json.dumps(data, indent=2))
    code, out = finish(ralph(pytester, *loop_args(agent)))
    assert code == 4, out
    assert "cannot be resumed as it is: its criteria changed since it started " \
           "(criterion US-002::AC1 added)" in out
    code, out = finish(ralph(pytester, *loop_args(agent, "--ralph-new",
                                                  "--ralph-max-iterations", "1")))
    assert code == 1, out
    assert [s for _, s, _ in runs(pytester)] == ["crashed", "limit"]


def test_a_resumed_run_goes_on_with_the_new_settings(
        pytester: pytest.Pytester, never_prd: Path, agent: Callable[[str, str], str]) -> None:
    (pytester.path / "sleep-at").write_text("1")
    proc = ralph(pytester, *loop_args(agent, "--ralph-max-iterations", "2"))
    wait_for(pytester.path / "sleeping")
    proc.send_signal(signal.SIGINT)
    assert finish(proc)[0] == 2
    code, out = finish(ralph(pytester, *loop_args(agent, "--ralph-max-iterations", "3")))
    assert code == 1, out
    assert "goes on with changed settings: max_iterations 2 -> 3" in out
    with db(pytester) as conn:
        (settings,) = conn.execute("SELECT settings FROM runs").fetchone()
    assert json.loads(settings)["max_iterations"] == 3
    [(run_id, _, _)] = runs(pytester)
    assert iterations(pytester, run_id) == [0, 1, 2, 3]


def test_three_ctrl_c_during_a_check_leave_no_process(
        pytester: pytest.Pytester, write_prd: Callable[..., Path]) -> None:
    write_prd(story("US-001", {"text": "slow", "run": "trap '' TERM; echo $$ > check.pid; "
                                                      "sleep 300"}))
    proc = ralph(pytester, "--ralph", "--ralph-agent", f"{sys.executable} -c pass")
    wait_for(pytester.path / "check.pid")
    time.sleep(0.3)
    pid = int((pytester.path / "check.pid").read_text())
    for _ in range(3):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
    code, out = finish(proc)
    assert code in (2, 1, -2), out
    assert gone_within(pid, 8), "the check's shell outlived three Ctrl-C"


def test_a_lost_history_is_reported(pytester: pytest.Pytester, never_prd: Path,
                                    agent: Callable[[str, str], str]) -> None:
    args = loop_args(agent, "--ralph-max-iterations", "1")
    assert finish(ralph(pytester, *args))[0] == 1
    for path in (pytester.path / ".pytest_ralph").glob("ralph.db*"):
        path.unlink()
    code, out = finish(ralph(pytester, *args))
    assert code == 1, out
    assert "does not know 1 run of this PRD" in out


def test_a_lock_file_replaced_by_a_symlink_is_never_written_through(
        pytester: pytest.Pytester, never_prd: Path, agent: Callable[[str, str], str],
        tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("IMPORTANT DATA\n")
    cmd = agent("agent.py", "import os\n"
                "if os.environ['PYTEST_RALPH_ITERATION'] == '1':\n"
                "    os.remove('.pytest_ralph/lock')\n"
                f"    os.symlink({str(victim)!r}, '.pytest_ralph/lock')\n")
    code, out = finish(ralph(pytester, "--ralph", "--ralph-agent", cmd,
                             "--ralph-max-iterations", "2"))
    assert code == 1, out
    assert victim.read_text() == "IMPORTANT DATA\n"
    assert "the loop lock" in out and "recreated it; nothing else was lost" in out


def test_another_programs_database_put_in_place_mid_run_is_set_aside(
        pytester: pytest.Pytester, never_prd: Path, agent: Callable[[str, str], str]) -> None:
    cmd = agent("agent.py", "import glob, os, sqlite3\n"
                "if os.environ['PYTEST_RALPH_ITERATION'] == '1':\n"
                "    for path in glob.glob('.pytest_ralph/ralph.db*'):\n"
                "        os.remove(path)\n"
                "    con = sqlite3.connect('.pytest_ralph/ralph.db')\n"
                "    con.execute('create table other (x)')\n"
                "    con.commit()\n"
                "    con.close()\n")
    code, out = finish(ralph(pytester, "--ralph", "--ralph-agent", cmd, "--ralph-breaker", "9",
                             "--ralph-max-iterations", "2"))
    assert code == 1, out
    assert "it was moved to" in out and "rebuilt the run history from memory" in out
    assert list((pytester.path / ".pytest_ralph").glob("ralph.db.foreign-*"))
    [(run_id, status, _)] = runs(pytester)
    assert status == "limit" and iterations(pytester, run_id) == [0, 1, 2]


def test_cancel_signals_the_real_lock_holder_not_the_pid_written_in_files(
        pytester: pytest.Pytester, never_prd: Path, agent: Callable[[str, str], str]) -> None:
    (pytester.path / "sleep-at").write_text("1")
    proc = ralph(pytester, *loop_args(agent))
    wait_for(pytester.path / "sleeping")
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        lock = pytester.path / ".pytest_ralph" / "lock"
        lock.write_text(f"pid {bystander.pid}, started 2026-01-01 00:00:00 UTC\n")
        with db(pytester) as conn:
            conn.execute("UPDATE runs SET pid = ?", (bystander.pid,))
        code, out = finish(ralph(pytester, "--ralph-cancel"))
        assert code == 0, out
        time.sleep(1)
        assert bystander.poll() is None, "cancel signalled a pid written in a file"
    finally:
        bystander.kill()
        bystander.wait()
    proc.send_signal(signal.SIGINT)
    finish(proc)
