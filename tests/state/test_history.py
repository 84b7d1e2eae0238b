"""Unit tests of pytest_ralph.state.history: the SQLite run history (real database files)."""

from __future__ import annotations

import datetime as dt
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_ralph.agents.run import OUTCOMES as AGENT_OUTCOMES
from pytest_ralph.agents.run import AgentRun
from pytest_ralph.checks.results import CheckResults, CriterionResult
from pytest_ralph.oracle.snapshot import Change
from pytest_ralph.state import schema as history_module
from pytest_ralph.state.history import History
from pytest_ralph.state.records import RESUMABLE, RUN_STATUSES, HistoryError, NoHistory
from pytest_ralph.state.schema import SCHEMA_VERSION

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 29, 23, 57, 28, 834000, tzinfo=UTC)
RUN = "20261129-235728-834fa6"
HOST = "test-host"
HUGE = "E   " + "x" * 1_000_000 + " ✓"


def _crit(story: str, crit: str, outcome: str = "passed", message: str = "",
          **kw: Any) -> CriterionResult:
    return CriterionResult(nodeid=f"prd.json::{story}::{crit}", story=story, criterion=crit,
                           text=f"text of {crit}", kind="run", outcome=outcome, message=message,
                           **kw)


def _results(*criteria: CriterionResult, errors: tuple[str, ...] = (),
             exitstatus: int = 1) -> CheckResults:
    return CheckResults(tuple(criteria), errors, exitstatus, 2.5, extra={"prd": "/p/prd.json"})


def _agent(tmp_path: Path, n: int, outcome: str = "ok", exit_code: int | None = 0
           ) -> AgentRun:
    return AgentRun(("claude", "-p", f"/state/iteration-{n:03d}/prompt.md"), outcome, exit_code,
                    12.25 * n, tmp_path / f"agent-{n}.log", f"tail of run {n} ünïcode")


def _begin(h: History, run_id: str = RUN, *, started: dt.datetime = T0, pid: int | None = 4242,
           hostname: str = HOST, prd: str = "/w/prd.json") -> None:
    h.begin_run(run_id, prd=Path(prd), rootdir=Path("/w"), argv=["claude", "-p"],
                settings={"max_iterations": 10, "dir": Path("/w/.pytest_ralph"),
                          "story": ("US-001",)},
                started=started, pid=pid, hostname=hostname)


def _record(h: History, n: int, results: CheckResults, agent: AgentRun | None = None,
            run_id: str = RUN, **kw: Any) -> None:
    args: dict[str, Any] = {
        "story": "US-001" if n else "", "started": T0 + dt.timedelta(minutes=n),
        "finished": T0 + dt.timedelta(minutes=n, seconds=30), "results": results,
        "agent": agent, "fingerprint": results.fingerprint, "streak": n, "error_streak": 0,
        "regressions": (), "flaky": (), "changes": ()}
    args.update(kw)
    h.record_iteration(run_id, n, **args)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ralph.db"


def _count(conn: sqlite3.Connection, table: str) -> int:
    return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


# -- schema and constraints ------------------------------------------------------------------


def test_new_database_has_schema_wal_and_foreign_keys(db: Path) -> None:
    with History.open(db) as h:
        conn = h.connection
        assert h.schema_version == SCHEMA_VERSION
        assert h.journal_mode == "wal"
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.execute("PRAGMA application_id").fetchone()[0] == history_module.APPLICATION_ID
        tables = {r[0]: r[1] for r in conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table'")}
        for name in ("meta", "runs", "iterations", "agent_runs", "criterion_results", "events"):
            assert name in tables
            if sqlite3.sqlite_version_info >= (3, 37, 0):
                assert tables[name].rstrip().endswith("STRICT")
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        assert meta["schema_version"] == str(SCHEMA_VERSION)
        assert meta["created_by"].startswith("pytest-ralph ")


def _raw_run(conn: sqlite3.Connection, run_id: str, status: str = "running",
             cancel: int = 0) -> None:
    conn.execute("INSERT INTO runs (id, prd, rootdir, agent_argv, settings, status, started, "
                 "updated, cancel_requested) VALUES (?, 'p', 'r', '[]', '{}', ?, 't', 't', ?)",
                 (run_id, status, cancel))


def _raw_iteration(conn: sqlite3.Connection, run_id: str, n: int) -> None:
    conn.execute("INSERT INTO iterations (run_id, n, started, finished, passing, total, "
                 "exitstatus, check_duration, fingerprint, streak, error_streak) "
                 "VALUES (?, ?, ?, ?, 0, 1, 1, 0.0, 'f', 0, 0)",
                 (run_id, n, T0.isoformat(), T0.isoformat()))


def test_check_constraints_are_enforced_by_sqlite(db: Path) -> None:
    with History.open(db) as h:
        conn = h.connection
        for i, status in enumerate(RUN_STATUSES):  # the frozen SQL matches the tuples
            _raw_run(conn, f"ok-{i}", status)
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            _raw_run(conn, "bad", "finished")
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            _raw_run(conn, "bad", "running", cancel=2)
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            _raw_iteration(conn, "no-such-run", 0)
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            _raw_iteration(conn, "ok-0", -1)
        _raw_iteration(conn, "ok-0", 1)
        for outcome in AGENT_OUTCOMES:
            conn.execute("DELETE FROM agent_runs")
            conn.execute("INSERT INTO agent_runs (run_id, n, argv, duration, outcome) "
                         "VALUES ('ok-0', 1, '[]', 1.0, ?)", (outcome,))
        conn.execute("DELETE FROM agent_runs")
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("INSERT INTO agent_runs (run_id, n, argv, duration, outcome) "
                         "VALUES ('ok-0', 1, '[]', 1.0, 'exploded')")
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            conn.execute("INSERT INTO agent_runs (run_id, n, argv, duration, outcome) "
                         "VALUES ('ok-0', 7, '[]', 1.0, 'ok')")
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("INSERT INTO criterion_results (run_id, n, pos, story, criterion, "
                         "nodeid, text, kind, outcome) "
                         "VALUES ('ok-0', 1, 0, 'S', 'C', 'x', 't', 'run', 'skipped')")
        if sqlite3.sqlite_version_info >= (3, 37, 0):  # STRICT: types are enforced
            with pytest.raises(sqlite3.IntegrityError, match="cannot store TEXT"):
                conn.execute("UPDATE runs SET pid = 'abc' WHERE id = 'ok-0'")
        # ON DELETE CASCADE: a run takes its iterations with it
        conn.execute("DELETE FROM runs WHERE id = 'ok-0'")
        assert _count(conn, "iterations") == 0


def test_api_rejects_unknown_values_before_writing(db: Path, tmp_path: Path) -> None:
    with History.open(db) as h:
        _begin(h)
        with pytest.raises(ValueError, match="unknown run status 'done'"):
            h.set_status(RUN, "done")
        with pytest.raises(ValueError, match="cannot finish a run with status 'running'"):
            h.finish_run(RUN, "running", 0, "", T0)
        with pytest.raises(ValueError, match="unknown agent outcome"):
            _record(h, 1, _results(_crit("S", "C")), _agent(tmp_path, 1, "weird"))
        with pytest.raises(ValueError, match="S::C: unknown outcome 'skipped'"):
            _record(h, 1, _results(_crit("S", "C", "skipped")))
        with pytest.raises(KeyError, match="no run 'nope'"):
            h.finish_run("nope", "complete", 0, "", T0)
        with pytest.raises(KeyError):
            h.set_status("nope", "running")
        with pytest.raises(sqlite3.IntegrityError):  # begin_run twice
            _begin(h)
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            _record(h, 0, _results(_crit("S", "C")), run_id="nope")
        assert _count(h.connection, "iterations") == 0


# -- round trip ------------------------------------------------------------------------------


def test_round_trip_of_a_run_with_three_iterations(db: Path, tmp_path: Path) -> None:
    baseline = _results(_crit("US-001", "AC1", "failed", "E   assert 1 == 2", duration=0.25),
                        _crit("US-001", "login-ok", "failed", "ünïcode ✓ 日本語\n\x1b[31mred"),
                        _crit("US-002", "AC1", "passed", "claimed, not verified", claimed=True),
                        errors=("collection error: boom",))
    first = _results(_crit("US-001", "AC1", "passed", duration=1.5),
                     _crit("US-001", "login-ok", "failed", HUGE),
                     _crit("US-002", "AC1", "failed", "regressed"))
    second = _results(_crit("US-001", "AC1"), _crit("US-001", "login-ok"),
                      _crit("US-002", "AC1", claimed=True), exitstatus=0)
    change = Change("file tests/test_login.py", "changed", ("US-001::AC1", "US-001::login-ok"))
    with History.open(db) as h:
        _begin(h)
        _record(h, 0, baseline)
        _record(h, 1, first, _agent(tmp_path, 1, "exit-nonzero", 3), regressions=("US-002::AC1",),
                flaky=("US-001::AC1",), changes=(change,), error_streak=1)
        _record(h, 2, second, _agent(tmp_path, 2, "timeout", None))
        h.add_event(RUN, "note", "ünïcode note ✓", n=2)
        h.finish_run(RUN, "complete", 0, "every criterion passes", T0 + dt.timedelta(hours=1))

    with History.open(db, readonly=True) as r:
        run = r.run(RUN)
        assert run is not None
        assert run == r.last_run() == r.last_run(Path("/w/prd.json"))
        assert r.last_run(Path("/elsewhere/prd.json")) is None
        assert (run.id, run.prd, run.rootdir, run.argv) == (RUN, Path("/w/prd.json"),
                                                            Path("/w"), ("claude", "-p"))
        assert run.settings == {"max_iterations": 10, "dir": "/w/.pytest_ralph",
                                "story": ["US-001"]}
        assert (run.status, run.exit_code, run.reason) == ("complete", 0,
                                                           "every criterion passes")
        assert run.started == T0 and run.started.tzinfo is not None
        assert run.finished == T0 + dt.timedelta(hours=1)
        assert run.updated.tzinfo is not None
        assert (run.pid, run.hostname, run.cancel_requested) == (4242, HOST, False)
        assert not run.resumable

        its = r.iterations(RUN)
        assert [it.n for it in its] == [0, 1, 2]
        assert [it.results for it in its] == [baseline, first, second]
        assert its[1].results.criteria[1].message == HUGE
        assert its[0].results.criteria[1].message == "ünïcode ✓ 日本語\n\x1b[31mred"
        assert its[0].results.errors == ("collection error: boom",)
        assert its[0].agent is None
        assert [(it.passing, it.total) for it in its] == [(1, 3), (1, 3), (3, 3)]
        assert its[1].agent is not None and its[2].agent is not None
        assert its[1].agent.to_agent_run() == _agent(tmp_path, 1, "exit-nonzero", 3)
        assert its[2].agent.outcome == "timeout" and its[2].agent.exit_code is None
        assert its[2].agent.duration == 24.5
        assert its[1].regressions == ("US-002::AC1",) and its[1].flaky == ("US-001::AC1",)
        assert its[1].changes == (change,)
        assert (its[1].streak, its[1].error_streak, its[1].story) == (1, 1, "US-001")
        assert its[1].fingerprint == first.fingerprint
        assert its[2].started == T0 + dt.timedelta(minutes=2)
        assert its[2].finished == T0 + dt.timedelta(minutes=2, seconds=30)

        assert r.iteration(RUN, 1) == its[1]
        assert r.iteration(RUN, 9) is None
        light = r.iterations(RUN, with_criteria=False)
        assert [it.results.criteria for it in light] == [(), (), ()]
        assert [(it.passing, it.total) for it in light] == [(1, 3), (1, 3), (3, 3)]
        assert r.passed_keys(RUN) == {"US-001::AC1", "US-001::login-ok", "US-002::AC1"}
        assert r.iterations("nope") == [] and r.run("nope") is None

        events = r.events(RUN)
        assert [(e.kind, e.n) for e in events] == [("status", None), ("note", 2),
                                                   ("status", None)]
        assert events[0].message == f"running (pid 4242 on {HOST})"
        assert events[1].message == "ünïcode note ✓"
        assert events[2].message == "complete (exit 0): every criterion passes"
        assert all(e.time.tzinfo is not None for e in events)


def test_last_run_is_the_latest_started(db: Path) -> None:
    with History.open(db) as h:
        _begin(h, "b", started=T0 + dt.timedelta(hours=1), prd="/w/b.json")
        _begin(h, "a", started=T0, prd="/w/a.json")
        _begin(h, "c", started=(T0 - dt.timedelta(days=1)).replace(tzinfo=None))  # naive: UTC
        latest = h.last_run()
        assert latest is not None and latest.id == "b"
        by_prd = h.last_run(Path("/w/a.json"))
        assert by_prd is not None and by_prd.id == "a"
        c = h.run("c")
        assert c is not None and c.started == T0 - dt.timedelta(days=1)
        assert [r.id for r in h.runs()] == ["b", "a", "c"]
        assert [r.id for r in h.runs(limit=1)] == ["b"]


def test_resume_puts_a_run_back_to_running(db: Path) -> None:
    with History.open(db) as h:
        _begin(h)
        h.finish_run(RUN, "interrupted", 2, "Ctrl-C", T0 + dt.timedelta(minutes=5))
        run = h.run(RUN)
        assert run is not None and run.resumable and run.finished is not None
        assert set(RESUMABLE) <= set(RUN_STATUSES)
        h.set_status(RUN, "running", "resumed", pid=777, hostname="other")
        run = h.run(RUN)
        assert run is not None
        assert (run.status, run.finished, run.exit_code, run.pid, run.hostname, run.reason) == (
            "running", None, None, 777, "other", "resumed")
        assert [e.message for e in h.events(RUN)][-1] == "running: resumed"


# -- readers and writers ---------------------------------------------------------------------


def test_reader_never_blocks_and_is_never_blocked(db: Path) -> None:
    with History.open(db) as w:
        _begin(w)
        _record(w, 0, _results(_crit("S", "C", "failed", "boom")))
        # The writer holds an open write transaction with an uncommitted iteration.
        w.connection.execute("BEGIN IMMEDIATE")
        _raw_iteration(w.connection, RUN, 1)
        start = time.perf_counter()
        with History.open(db, readonly=True) as r:
            run = r.last_run()
            its = r.iterations(RUN)
            events = r.events(RUN)
            elapsed = time.perf_counter() - start
            assert run is not None and run.status == "running"
            assert [it.n for it in its] == [0]  # committed data only
            assert events
            assert elapsed < 1.0, elapsed
            w.connection.execute("COMMIT")
            assert [it.n for it in r.iterations(RUN)] == [0, 1]

            # A reader in the middle of a read transaction does not hold up the writer.
            r.connection.execute("BEGIN")
            r.connection.execute("SELECT count(*) FROM iterations").fetchone()
            start = time.perf_counter()
            _record(w, 2, _results(_crit("S", "C")))
            w.set_status(RUN, "running", "still")
            assert time.perf_counter() - start < 1.0
            # ... and keeps its snapshot until it ends.
            assert r.connection.execute("SELECT count(*) FROM iterations").fetchone()[0] == 2
            r.connection.execute("COMMIT")
            assert [it.n for it in r.iterations(RUN)] == [0, 1, 2]

            with pytest.raises(HistoryError, match="open read-only"):
                r.add_event(RUN, "x", "y")
            with pytest.raises(sqlite3.OperationalError, match=r"readonly|read-only"):
                r.connection.execute("DELETE FROM events")


def test_readonly_never_creates(db: Path) -> None:
    with pytest.raises(NoHistory, match="does not exist"):
        History.open(db, readonly=True)
    assert not db.exists()
    db.write_bytes(b"")
    with pytest.raises(NoHistory, match="is empty"):
        History.open(db, readonly=True)
    assert db.read_bytes() == b""


def test_second_writer_from_another_terminal(db: Path) -> None:
    """`--ralph-cancel` opens the history for writing while the loop has it open."""
    with History.open(db) as loop:
        _begin(loop)
        with History.open(db) as other:
            assert other.request_cancel(RUN) is True
            assert other.request_cancel(RUN) is False
        assert loop.cancel_requested(RUN) is True
        _record(loop, 0, _results(_crit("S", "C")))


# -- cancel and crash ------------------------------------------------------------------------


def test_cancel_is_idempotent(db: Path) -> None:
    with History.open(db) as h:
        _begin(h)
        assert h.cancel_requested(RUN) is False
        assert h.request_cancel(RUN) is True
        assert h.request_cancel(RUN) is False
        assert h.request_cancel(RUN) is False
        assert h.cancel_requested(RUN) is True
        # a status change (the loop ending, a resume) does not clear it
        h.finish_run(RUN, "cancelled", 2, "cancelled by --ralph-cancel", T0)
        h.set_status(RUN, "running")
        assert h.cancel_requested(RUN) is True
        assert [e.kind for e in h.events(RUN)].count("cancel-requested") == 1
        assert h.clear_cancel(RUN) is True
        assert h.clear_cancel(RUN) is False
        assert h.cancel_requested(RUN) is False
        run = h.run(RUN)
        assert run is not None and run.cancel_requested is False
        with pytest.raises(KeyError):
            h.request_cancel("nope")
        with pytest.raises(KeyError):
            h.cancel_requested("nope")


def test_mark_crashed_if_dead(db: Path) -> None:
    with History.open(db) as h:
        _begin(h, "alive", pid=100)
        _begin(h, "dead", pid=200)
        _begin(h, "no-pid", pid=None)
        _begin(h, "elsewhere", pid=200, hostname="other-host")
        _begin(h, "done", pid=200)
        h.finish_run("done", "complete", 0, "", T0)
        seen: list[int] = []

        def is_alive(pid: int) -> bool:
            seen.append(pid)
            return pid == 100

        assert sorted(h.mark_crashed_if_dead(is_alive, hostname=HOST)) == ["dead", "no-pid"]
        assert sorted(seen) == [100, 200]
        statuses = {r.id: r.status for r in h.runs()}
        assert statuses == {"alive": "running", "dead": "crashed", "no-pid": "crashed",
                            "elsewhere": "running", "done": "complete"}
        dead = h.run("dead")
        assert dead is not None and dead.resumable
        assert dead.reason == f"the loop process (pid 200 on {HOST}) ended without finishing " \
                              "the run"
        assert h.events("dead")[-1].message.startswith("crashed: the loop process")
        assert h.mark_crashed_if_dead(is_alive, hostname=HOST) == []


def test_killed_writer_loses_only_the_open_transaction(db: Path, tmp_path: Path) -> None:
    """A loop killed in the middle of an iteration's transaction keeps every committed one."""
    script = textwrap.dedent(f"""
        import datetime as dt, os
        from pathlib import Path
        from pytest_ralph.state.history import History
        from pytest_ralph.checks.results import CheckResults, CriterionResult
        t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        h = History.open(Path({str(db)!r}))
        h.begin_run("r", prd=Path("p"), rootdir=Path("."), argv=["a"], settings={{}},
                    started=t, pid=os.getpid(), hostname="h")
        res = CheckResults(tuple(CriterionResult("n", "S", f"C{{i}}", "t", "run", "failed")
                                 for i in range(100)))
        for n in range(2):
            h.record_iteration("r", n, story="", started=t, finished=t, results=res,
                               agent=None, fingerprint="f", streak=n, error_streak=0,
                               regressions=(), flaky=(), changes=())
        h.connection.execute("BEGIN IMMEDIATE")
        h.connection.execute("INSERT INTO iterations (run_id, n, started, finished, passing, "
                             "total, exitstatus, check_duration, fingerprint, streak, "
                             "error_streak) VALUES ('r', 2, 't', 't', 0, 1, 1, 0, 'f', 0, 0)")
        os._exit(9)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 9, proc.stderr
    with History.open(db) as h:
        assert [it.n for it in h.iterations("r")] == [0, 1]
        assert _count(h.connection, "criterion_results") == 200
        assert h.mark_crashed_if_dead(lambda pid: False, hostname="h") == ["r"]


# -- atomicity and speed ---------------------------------------------------------------------


def test_record_iteration_is_atomic(db: Path, tmp_path: Path) -> None:
    dup = _results(*(_crit("S", f"C{i}") for i in range(50)), _crit("S", "C7", "failed"))
    with History.open(db) as h:
        _begin(h)
        before = h.run(RUN)
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            _record(h, 1, dup, _agent(tmp_path, 1))
        conn = h.connection
        assert not conn.in_transaction
        for table in ("iterations", "agent_runs", "criterion_results"):
            assert _count(conn, table) == 0, table
        assert h.run(RUN) == before
        # the same iteration recorded properly afterwards
        _record(h, 1, _results(_crit("S", "C0")), _agent(tmp_path, 1))
        with pytest.raises(sqlite3.IntegrityError):  # never twice
            _record(h, 1, _results(_crit("S", "C0")), _agent(tmp_path, 1))
        assert (_count(conn, "iterations"), _count(conn, "agent_runs"),
                _count(conn, "criterion_results")) == (1, 1, 1)


def test_twenty_thousand_criteria_in_one_iteration(db: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    results = _results(*(_crit(f"US-{i // 20:04d}", f"AC{i % 20}",
                               "failed" if i % 3 else "passed",
                               f"E   assert {i} == 0 ✗" if i % 3 else "",
                               duration=0.01 * (i % 7)) for i in range(20_000)))
    with History.open(db) as h:
        _begin(h)
        start = time.perf_counter()
        _record(h, 1, results, _agent(tmp_path, 1))
        write = time.perf_counter() - start
        start = time.perf_counter()
        it = h.iteration(RUN, 1)
        read = time.perf_counter() - start
    assert it is not None and it.results == results
    with capsys.disabled():
        print(f"\n20,000 criterion results: write {write:.3f} s, read {read:.3f} s")
    assert write < 10 and read < 10


# -- damage ----------------------------------------------------------------------------------


def _aside(db: Path) -> list[Path]:
    """The moved-aside databases (without their -wal / -shm companions)."""
    return sorted(p for p in db.parent.glob(f"{db.name}.damaged-*")
                  if not p.name.endswith(("-wal", "-shm", "-journal")))


def test_garbage_file_is_moved_aside(db: Path) -> None:
    garbage = bytes(range(256)) * 40
    db.write_bytes(garbage)
    with pytest.raises(HistoryError, match="not a SQLite database") as err:
        History.open(db, readonly=True)  # a reader only reports it
    assert "the next `pytest --ralph` moves it aside" in str(err.value)
    assert db.read_bytes() == garbage and not _aside(db)

    with pytest.raises(HistoryError, match="not a SQLite database") as err:
        History.open(db)
    (moved,) = _aside(db)
    assert moved.read_bytes() == garbage
    assert not db.exists()
    assert f"moved to {moved}" in str(err.value)
    assert "the next `pytest --ralph` starts a new history" in str(err.value)
    with History.open(db) as h:  # the next run starts a new history
        _begin(h)
    assert _aside(db) == [moved]


def test_truncated_database_is_moved_aside_with_its_wal(db: Path) -> None:
    with History.open(db) as h:
        _begin(h)
        for n in range(5):
            _record(h, n, _results(*(_crit("S", f"C{i}", "failed", "m" * 500)
                                     for i in range(200))))
    data = db.read_bytes()
    assert len(data) > 100_000
    db.write_bytes(data[:len(data) // 2])
    stale_wal = db.with_name(db.name + "-wal")
    stale_wal.write_bytes(b"stale wal")
    with pytest.raises(HistoryError, match="damaged") as err:
        History.open(db)
    (moved,) = _aside(db)
    assert moved.read_bytes() == data[:len(data) // 2]
    assert moved.with_name(moved.name + "-wal").read_bytes() == b"stale wal"
    assert not db.exists() and not stale_wal.exists()
    assert str(moved) in str(err.value)
    with History.open(db) as h:
        assert h.last_run() is None


def test_damaged_names_do_not_collide(db: Path) -> None:
    for _ in range(3):
        db.write_bytes(b"not a database at all, not even close" * 10)
        with pytest.raises(HistoryError):
            History.open(db)
    assert len(_aside(db)) == 3


def test_zero_byte_file_is_a_new_history(db: Path) -> None:
    db.write_bytes(b"")
    with History.open(db) as h:
        assert h.schema_version == SCHEMA_VERSION
        _begin(h)
    assert not _aside(db)


def test_newer_schema_is_an_error_and_left_alone(db: Path) -> None:
    with History.open(db) as h:
        _begin(h)
        h.connection.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    data = db.read_bytes()
    for readonly in (False, True):
        with pytest.raises(HistoryError) as err:
            History.open(db, readonly=readonly)
        assert str(err.value) == (
            f"{db} was written by a newer pytest-ralph (schema 99, this version reads up to "
            f"{SCHEMA_VERSION}); upgrade pytest-ralph, or move {db} aside to start a new "
            "history")
    assert db.read_bytes() == data and not _aside(db)


def test_another_programs_database_is_an_error_and_left_alone(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.commit()
    conn.close()
    data = db.read_bytes()
    for readonly in (False, True):
        with pytest.raises(HistoryError, match="not a pytest-ralph run history") as err:
            History.open(db, readonly=readonly)
        assert "its tables: users" in str(err.value) and str(db) in str(err.value)
        assert "move it aside" in str(err.value)
    assert db.read_bytes() == data and not _aside(db)


# -- migrations ------------------------------------------------------------------------------


def test_reopening_is_idempotent(db: Path) -> None:
    with History.open(db) as h:
        _begin(h)
        meta = dict(h.connection.execute("SELECT key, value FROM meta"))
    for _ in range(2):
        with History.open(db) as h:
            assert dict(h.connection.execute("SELECT key, value FROM meta")) == meta
            assert h.run(RUN) is not None


def _add_color(conn: sqlite3.Connection, strict: bool) -> None:
    conn.execute("ALTER TABLE runs ADD COLUMN color TEXT NOT NULL DEFAULT 'blue'")


def test_migrations_apply_forward(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with History.open(db) as h:
        _begin(h)
    monkeypatch.setattr(history_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setattr(history_module, "MIGRATIONS", [*history_module.MIGRATIONS, _add_color])
    with History.open(db) as h:
        assert h.schema_version == SCHEMA_VERSION + 1
        assert h.connection.execute("SELECT color FROM runs").fetchall() == [("blue",)]
        assert h.run(RUN) is not None


def test_a_failed_migration_changes_nothing(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with History.open(db) as h:
        _begin(h)

    def half(conn: sqlite3.Connection, strict: bool) -> None:
        _add_color(conn, strict)
        conn.execute("CREATE TABLE broken (")  # syntax error after a first change

    monkeypatch.setattr(history_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setattr(history_module, "MIGRATIONS", [*history_module.MIGRATIONS, half])
    with pytest.raises(HistoryError, match="cannot open"):
        History.open(db)
    monkeypatch.undo()
    with History.open(db) as h:
        assert h.schema_version == SCHEMA_VERSION
        columns = [r[1] for r in h.connection.execute("PRAGMA table_info(runs)")]
        assert "color" not in columns


def _v1_history(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A history written by the schema-1 release: one run, a baseline and one iteration."""
    monkeypatch.setattr(history_module, "SCHEMA_VERSION", 1)
    monkeypatch.setattr(history_module, "MIGRATIONS", history_module.MIGRATIONS[:1])
    with History.open(db) as h:
        _begin(h)
        h.connection.execute("PRAGMA table_info(agent_runs)")
        for n in (0, 1):
            h.connection.execute(
                "INSERT INTO iterations (run_id, n, started, finished, passing, total, "
                "exitstatus, check_duration, fingerprint, streak, error_streak) VALUES "
                "(?, ?, '2026-11-29T00:00:00+00:00', '2026-11-29T00:00:01+00:00', 0, 1, 1, "
                "0.5, 'ff', ?, 0)", (RUN, n, n))
        h.connection.execute(
            "INSERT INTO agent_runs (run_id, n, argv, exit_code, duration, outcome, log_path, "
            "detail) VALUES (?, 1, '[\"claude\"]', 0, 2.5, 'ok', 'agent.log', 'tail')", (RUN,))
        assert h.schema_version == 1
    monkeypatch.undo()


def test_a_schema_1_history_is_read_as_it_is_and_migrated_to_2_on_write(
        db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _v1_history(db, tmp_path, monkeypatch)
    with History.open(db, readonly=True) as h:  # a reader never migrates
        assert not h.v2
        its = h.iterations(RUN)
        assert [it.n for it in its] == [0, 1] and its[1].agent is not None
        assert its[1].agent.outcome == "ok" and its[1].agent.cost_usd is None
        assert its[1].blocked == {} and h.attempts(RUN) == []
    with History.open(db) as h:
        assert h.schema_version == SCHEMA_VERSION and h.v2
        its = h.iterations(RUN)
        assert its[1].agent is not None and its[1].agent.detail == "tail"
        assert its[1].agent.why == "" and its[1].agent.turns is None


def test_cost_tokens_turns_attempts_and_blocked_stories_round_trip(db: Path) -> None:
    def _t(minutes: int) -> dt.datetime:
        return T0 + dt.timedelta(minutes=minutes)

    with History.open(db) as h:
        _begin(h)
        agent = AgentRun(("claude", "-p"), "api-error", 1, 3.0, Path("agent.log"), "tail",
                         detail="result is_error: API Error: 500", cost_usd=0.25,
                         input_tokens=300, output_tokens=60, turns=3)
        h.record_iteration(RUN, 0, story="", started=_t(0), finished=_t(1),
                           results=CheckResults(()), agent=None, fingerprint="f", streak=0,
                           error_streak=0)
        limited = AgentRun(("claude",), "rate-limited", 1, 1.0, Path("a.log"), "",
                           detail="HTTP 429", cost_usd=float("nan"))
        h.record_attempt(RUN, 1, started=_t(2), agent=limited, pause=30.0)
        h.record_iteration(RUN, 1, story="US-002", started=_t(2), finished=_t(3),
                           results=CheckResults(()), agent=agent, fingerprint="f", streak=1,
                           error_streak=1, blocked={"US-002": "same failure 3 times"})
        it = h.iteration(RUN, 1)
        assert it is not None and it.agent is not None
        assert it.blocked == {"US-002": "same failure 3 times"}
        assert it.agent.to_agent_run() == agent
        [attempt] = h.attempts(RUN)
        assert (attempt.n, attempt.pause, attempt.agent.outcome) == (1, 30.0, "rate-limited")
        assert attempt.agent.cost_usd is None  # NaN is not stored
        with pytest.raises(ValueError, match="unknown agent outcome"):
            h.record_attempt(RUN, 1, started=_t(2), pause=0,
                             agent=AgentRun(("x",), "weird", 0, 0, Path("l"), ""))


def test_plain_tables_when_sqlite_is_older_than_3_37(db: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history_module, "strict_supported", lambda: False)
    with History.open(db) as h:
        sql = [r[0] for r in h.connection.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name <> 'sqlite_sequence'")]
        assert sql and not any("STRICT" in s for s in sql)
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            _raw_run(h.connection, "bad", "finished")
        _begin(h)
        _record(h, 0, _results(_crit("S", "C")))
        assert [it.n for it in h.iterations(RUN)] == [0]


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "ralph.db"
    with pytest.raises(HistoryError, match=f"cannot open the run history {path}"):
        History.open(path)
    assert not path.parent.exists()


# -- schema 3: runs driven by a Claude Code Stop hook -----------------------------------------


def _arm(h: History, run_id: str, *, armed: dt.datetime = T0, driver: str = "claude",
         inifile: Path | None = None, hostname: str = HOST) -> None:
    h.arm_run(run_id, prd=Path("/w/prd.json"), rootdir=Path("/w"), argv=["claude-code-session"],
              settings={"max_iterations": 3, "promise": None}, armed=armed, hostname=hostname,
              oracle={"criteria": {}}, driver=driver,
              marker=Path("/w/.claude/pytest-ralph.local.json"), inifile=inifile)


def _v2_history(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A history written by the schema-2 release: one run with a baseline, an iteration with
    its agent run, a rate-limited attempt and a blocked story."""
    monkeypatch.setattr(history_module, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(history_module, "MIGRATIONS", history_module.MIGRATIONS[:2])
    with History.open(db) as h:
        _begin(h)
        _record(h, 0, _results(_crit("US-001", "AC1", "failed", "E   boom")))
        h.record_attempt(RUN, 1, started=T0, pause=5.0,
                         agent=AgentRun(("claude",), "rate-limited", 1, 1.0, Path("a.log"), ""))
        _record(h, 1, _results(_crit("US-001", "AC1")), _agent(tmp_path, 1),
                blocked={"US-002": "same failure 3 times"})
        h.finish_run(RUN, "complete", 0, "every criterion passes (1/1)", T0)
        assert h.schema_version == 2
        assert "drivers" not in _tables(h.connection)
    monkeypatch.undo()


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_a_schema_2_history_migrates_to_the_current_schema_keeping_its_data(
        db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _v2_history(db, tmp_path, monkeypatch)
    with History.open(db, readonly=True) as h:  # a reader never migrates
        assert h.schema_version == 2 and "drivers" not in _tables(h.connection)
    with History.open(db) as h:
        before_runs = h.runs()
        assert h.schema_version == SCHEMA_VERSION == 4
        assert {"drivers", "parallel_runs", "lanes"} <= _tables(h.connection)
        assert _count(h.connection, "drivers") == 0
        [run] = h.runs()
        assert (run.id, run.status, run.exit_code) == (RUN, "complete", 0)
        its = h.iterations(RUN)
        assert [it.n for it in its] == [0, 1]
        assert its[0].results.criteria[0].message == "E   boom"
        assert its[1].agent is not None and its[1].agent.argv[0] == "claude"
        assert its[1].blocked == {"US-002": "same failure 3 times"}
        [attempt] = h.attempts(RUN)
        assert (attempt.n, attempt.pause) == (1, 5.0)
        assert h.driver(RUN) is None and h.driven_runs() == []
        _arm(h, "driven")  # the new table works on the migrated file
        assert [r.id for r in h.driven_runs()] == ["driven"]
    with History.open(db) as h:  # reopening changes nothing
        assert h.schema_version == SCHEMA_VERSION
        assert [r.id for r in h.runs() if r.id == RUN] == [r.id for r in before_runs]


def test_a_schema_2_history_read_only_has_no_driven_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`pytest --ralph-status` reads a history of the previous release without migrating it."""
    from pytest_ralph.commands.status import status

    state = tmp_path / ".pytest_ralph"
    state.mkdir()
    db = state / "ralph.db"
    _v2_history(db, tmp_path, monkeypatch)
    with History.open(db, readonly=True) as h:
        assert h.driver(RUN) is None
        assert h.driven_runs() == []
    code, text = status(state)
    assert code == 0, text
    assert f"run {RUN} of /w/prd.json" in text and "status: complete" in text
    with History.open(db, readonly=True) as h:
        assert h.schema_version == 2


def test_arm_run_records_a_driven_run(db: Path) -> None:
    with History.open(db) as h:
        _arm(h, "r1", inifile=Path("/w/pytest.ini"))
        _arm(h, "r2", armed=T0 + dt.timedelta(minutes=1))
        _begin(h, "plain")
        run = h.run("r1")
        assert run is not None
        assert (run.status, run.pid, run.hostname, run.argv) == ("running", None, HOST,
                                                                  ("claude-code-session",))
        assert run.started == run.updated == T0 and run.finished is None
        assert run.settings == {"max_iterations": 3, "promise": None}
        assert run.oracle == {"criteria": {}}
        drv = h.driver("r1")
        assert drv is not None
        assert (drv.run_id, drv.driver, drv.marker, drv.inifile, drv.session_id) == (
            "r1", "claude", Path("/w/.claude/pytest-ralph.local.json"), Path("/w/pytest.ini"),
            "")
        assert (drv.armed, drv.adopted, drv.turn_started, drv.tree) == (T0, None, None, "")
        r2 = h.driver("r2")
        assert r2 is not None and r2.inifile is None
        assert h.driver("plain") is None and h.driver("nope") is None
        assert [e.kind for e in h.events("r1")] == ["armed"]
        assert "/w/.claude/pytest-ralph.local.json" in h.events("r1")[0].message
        # newest first; plain runs and ended driven runs are not listed
        assert [r.id for r in h.driven_runs()] == ["r2", "r1"]
        h.finish_run("r2", "cancelled", 2, "disarmed", T0)
        assert [r.id for r in h.driven_runs()] == ["r1"]
        h.finish_run("r1", "complete", 0, "done", T0)
        assert h.driven_runs() == []
        assert h.driver("r1") is not None  # the row stays with the ended run


def test_arm_run_is_one_transaction(db: Path) -> None:
    with History.open(db) as h:
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            _arm(h, "r1", driver="cursor")
        assert h.run("r1") is None and h.driver("r1") is None  # the runs row is rolled back
        assert h.events("r1") == []
        _arm(h, "r1")
        with pytest.raises(sqlite3.IntegrityError):
            _arm(h, "r1")
        assert _count(h.connection, "drivers") == 1
    with History.open(db, readonly=True) as h, pytest.raises(HistoryError, match="read-only"):
        _arm(h, "r3")


def test_adopt_gives_a_run_to_one_session(db: Path) -> None:
    with History.open(db) as h:
        _arm(h, "r1")
        with pytest.raises(ValueError, match="empty id"):
            h.adopt("r1", "")
        drv = h.driver("r1")
        assert drv is not None and drv.session_id == "" and drv.adopted is None
        assert h.adopt("r1", "S1") is True
        drv = h.driver("r1")
        assert drv is not None and drv.session_id == "S1" and drv.adopted is not None
        adopted = drv.adopted
        assert h.adopt("r1", "S1") is True  # idempotent for the owner
        assert h.adopt("r1", "S2") is False  # never taken over
        drv = h.driver("r1")
        assert drv is not None and (drv.session_id, drv.adopted) == ("S1", adopted)
        assert [e.kind for e in h.events("r1")] == ["armed", "adopted"]
        assert h.events("r1")[-1].message == "adopted by Claude Code session S1"
        assert h.adopt("nope", "S1") is False
    with History.open(db, readonly=True) as h, pytest.raises(HistoryError, match="read-only"):
        h.adopt("r1", "S1")


def test_set_turn_records_the_turn_and_tree(db: Path) -> None:
    with History.open(db) as h:
        _arm(h, "r1")
        later = T0 + dt.timedelta(seconds=90)
        h.set_turn("r1", later, "4b825dc642cb6eb9a060e54bf8d69288fbee4904")
        drv = h.driver("r1")
        assert drv is not None
        assert (drv.turn_started, drv.tree) == (later,
                                                "4b825dc642cb6eb9a060e54bf8d69288fbee4904")
        h.set_turn("r1", later + dt.timedelta(seconds=1), None)  # no git: unknown tree
        drv = h.driver("r1")
        assert drv is not None and drv.tree == ""
        assert drv.turn_started == later + dt.timedelta(seconds=1)
        with pytest.raises(KeyError):
            h.set_turn("nope", later, None)
        _begin(h, "plain")
        with pytest.raises(KeyError):  # not a driven run
            h.set_turn("plain", later, None)


def test_mark_crashed_if_dead_leaves_driven_runs_alone(db: Path) -> None:
    with History.open(db) as h:
        _arm(h, "driven")
        _arm(h, "adopted")
        h.adopt("adopted", "S1")
        _begin(h, "dead", pid=None)
        assert h.mark_crashed_if_dead(lambda pid: False, hostname=HOST) == ["dead"]
        statuses = {r.id: r.status for r in h.runs()}
        assert statuses == {"driven": "running", "adopted": "running", "dead": "crashed"}
        assert [e.kind for e in h.events("driven")] == ["armed"]
        assert {r.id for r in h.driven_runs()} == {"driven", "adopted"}


# -- secrets are never written -----------------------------------------------------------------


PAT = "ghp_" + "Zq8" * 12
TOKEN = "tok-" + "x9Y" * 8


def _every_text(db: Path) -> str:
    """Every value of every column of every table, and the raw bytes of the files."""
    conn = sqlite3.connect(db)
    try:
        parts = []
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            for row in conn.execute(f"SELECT * FROM {table}"):
                parts += [str(v) for v in row]
    finally:
        conn.close()
    raw = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
    return "\n".join(parts) + raw.decode("utf-8", "replace")


def test_every_text_a_write_stores_is_redacted(tmp_path: Path, db: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GH_TOKEN", TOKEN)
    secret_msg = f"assert {TOKEN!r} == {PAT!r} (postgres://u:hunter2-long@db/x)"
    with History.open(db) as h:
        h.begin_run(RUN, prd=Path("/w/prd.json"), rootdir=Path("/w"),
                    argv=["agent", "--token", TOKEN, "--pat", PAT],
                    settings={"agent": f"agent --token {TOKEN}", "dir": Path("/w/.p"),
                              "checks": [["text", f"curl -H 'Authorization: {PAT}'"]]},
                    started=T0, pid=1, hostname=HOST)
        agent = AgentRun(("agent", "--token", TOKEN), "exit-nonzero", 1, 1.0,
                         tmp_path / "a.log", f"log tail {PAT}", detail=f"why {TOKEN}")
        _record(h, 1, _results(_crit("US-001", "AC1", "failed", secret_msg),
                               errors=(f"child said {TOKEN}",)), agent,
                blocked={"US-001": f"blocked on {PAT}"}, diff_stat=f" {PAT}.txt | 1 +")
        h.record_attempt(RUN, 2, started=T0, agent=agent, pause=1.0)
        h.add_event(RUN, "note", f"event {TOKEN}")
        h.update_run(RUN, argv=["agent", TOKEN], settings={"agent": f"agent {PAT}"})
        h.set_status(RUN, "interrupted", f"reason {TOKEN}")
        h.finish_run(RUN, "limit", 1, f"stopped: {PAT}", T0)
        stored = h.run(RUN)
        (it,) = h.iterations(RUN)
    text = _every_text(db)
    assert TOKEN not in text and PAT not in text and "hunter2-long" not in text
    assert stored is not None
    assert stored.argv == ("agent", "[redacted $GH_TOKEN]")
    assert stored.settings == {"agent": "agent [redacted GitHub token]"}
    assert stored.reason == "stopped: [redacted GitHub token]"
    (c,) = it.results.criteria
    assert c.message == ("assert '[redacted $GH_TOKEN]' == '[redacted GitHub token]' "
                         "(postgres://u:[redacted password]@db/x)")
    assert it.results.errors == ("child said [redacted $GH_TOKEN]",)
    assert it.blocked == {"US-001": "blocked on [redacted GitHub token]"}
    assert it.agent is not None and it.agent.argv == ("agent", "--token", "[redacted $GH_TOKEN]")


def test_the_history_uses_the_redactor_it_is_given(db: Path) -> None:
    from pytest_ralph.util.redact import Redactor

    with History.open(db, redactor=Redactor({"plain-words": "X_KEY"}, shapes=False)) as h:
        h.begin_run(RUN, prd=Path("/w/prd.json"), rootdir=Path("/w"),
                    argv=["plain-words", PAT], settings={}, started=T0, pid=1, hostname=HOST)
        stored = h.run(RUN)
    assert stored is not None and stored.argv == ("[redacted $X_KEY]", PAT)
