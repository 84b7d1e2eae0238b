"""Parallel runs and their lanes in the one run history (:mod:`pytest_ralph.state.lanes`):
real SQLite files, a lane's own history copied into the main one."""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
from pathlib import Path

import pytest

from pytest_ralph.agents.run import AgentRun
from pytest_ralph.checks.results import CheckResults, CriterionResult
from pytest_ralph.state.history import History
from pytest_ralph.state.records import HistoryError

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 12, 3, 10, 0, 0, tzinfo=UTC)
PAR = "20261203-100000-ab12"


def _lane_run(state: Path, run_id: str, story: str, iterations: int, *,
              status: str = "complete", started: dt.datetime = T0) -> None:
    """A lane's own history in ``state``: run ``run_id`` with the baseline and
    ``iterations`` iterations (each with its agent run and one criterion result), a
    rate-limited attempt and events."""
    state.mkdir(parents=True, exist_ok=True)
    with History.open(state / "ralph.db") as h:
        h.begin_run(run_id, prd=state / "wt" / "prd.json", rootdir=state / "wt",
                    argv=["agent"], settings={"story": [story]}, started=started, pid=4242,
                    hostname="h")
        for n in range(iterations + 1):
            crit = CriterionResult(nodeid=f"prd.json::{story}::AC1", story=story,
                                   criterion="AC1", text="t", kind="run",
                                   outcome="passed" if n == iterations else "failed")
            agent = None if n == 0 else AgentRun(("agent",), "ok", 0, 1.0, state / "a.log",
                                                 "tail")
            h.record_iteration(run_id, n, story=story if n else "",
                               started=started + dt.timedelta(minutes=n),
                               finished=started + dt.timedelta(minutes=n, seconds=30),
                               results=CheckResults((crit,), (), 0, 1.0), agent=agent,
                               fingerprint="f", streak=0, error_streak=0)
        if iterations:
            h.record_attempt(run_id, 1, started=started, pause=2.0,
                             agent=AgentRun(("agent",), "rate-limited", 1, 1.0,
                                            state / "a.log", ""))
        if status != "running":
            h.finish_run(run_id, status, 0 if status == "complete" else 2, "", started)


def _main(tmp_path: Path) -> History:
    h = History.open(tmp_path / "main" / "ralph.db") if (tmp_path / "main").is_dir() else None
    if h is None:
        (tmp_path / "main").mkdir()
        h = History.open(tmp_path / "main" / "ralph.db")
    return h


def _counts(h: History, run_id: str) -> tuple[int, ...]:
    return tuple(int(h.connection.execute(f"SELECT count(*) FROM {t} WHERE run_id = ?",
                                          (run_id,)).fetchone()[0])
                 for t in ("iterations", "agent_runs", "criterion_results", "agent_attempts",
                           "events", "lanes"))


def test_lanes_are_copied_in_once_however_often(tmp_path: Path) -> None:
    a, b = tmp_path / "par" / "US-001.1.state", tmp_path / "par" / "US-002.1.state"
    _lane_run(a, "run-a", "US-001", 2)
    _lane_run(b, "run-b", "US-002", 1, started=T0 + dt.timedelta(seconds=1))
    with _main(tmp_path) as h:
        h.begin_parallel(PAR, prd=tmp_path / "prd.json", base="c0ffee", branch="main",
                         started=T0, pid=1, hostname="h")
        for _ in range(3):
            assert h.import_lane(PAR, story="US-001", attempt=1, lane="ralph/x/US-001",
                                 state=a) == ["run-a"]
            assert h.import_lane(PAR, story="US-002", attempt=1, lane="ralph/x/US-002",
                                 state=b) == ["run-b"]
        # baseline + 2 iterations, 2 agent runs, 3 criterion results, 1 attempt, 1 lane row
        assert _counts(h, "run-a")[:4] == (3, 2, 3, 1) and _counts(h, "run-a")[5] == 1
        assert _counts(h, "run-b")[:4] == (2, 1, 2, 1)
        events = _counts(h, "run-a")[4]
        h.import_lane(PAR, story="US-001", attempt=1, lane="ralph/x/US-001", state=a)
        assert _counts(h, "run-a")[4] == events  # events not doubled either
        lanes = h.lanes(PAR)
        assert [(x.story, x.attempt, x.run_id, x.status, x.iterations) for x in lanes] == [
            ("US-001", 1, "run-a", "complete", 2), ("US-002", 1, "run-b", "complete", 1)]
        # a single loop's views leave the lanes' runs out
        assert h.last_run() is None and h.runs() == []
        assert h.mark_crashed_if_dead(lambda pid: False) == []
        h.finish_parallel(PAR, "complete")
        run = h.parallel_run()
        assert run is not None and (run.id, run.status, run.branch) == (PAR, "complete", "main")
        assert run.finished is not None


def test_a_lane_that_went_on_replaces_its_earlier_copy(tmp_path: Path) -> None:
    """After kill -9 and a resume, the lane's run has more iterations: the copy follows."""
    a = tmp_path / "par" / "US-001.1.state"
    _lane_run(a, "run-a", "US-001", 1, status="interrupted")
    with _main(tmp_path) as h:
        h.begin_parallel(PAR, prd=tmp_path / "prd.json", base="c0", branch=None, started=T0,
                         pid=1, hostname="h")
        h.import_lane(PAR, story="US-001", attempt=1, lane="", state=a)
        assert [x.iterations for x in h.lanes(PAR)] == [1]
    with History.open(a / "ralph.db") as lane:  # the resumed lane goes on
        lane.set_status("run-a", "running", pid=5)
        crit = CriterionResult(nodeid="prd.json::US-001::AC1", story="US-001", criterion="AC1",
                               text="t", kind="run", outcome="passed")
        lane.record_iteration("run-a", 2, story="US-001", started=T0, finished=T0,
                              results=CheckResults((crit,), (), 0, 1.0),
                              agent=AgentRun(("agent",), "ok", 0, 1.0, a / "a.log", ""),
                              fingerprint="f", streak=0, error_streak=0)
        lane.finish_run("run-a", "complete", 0, "", T0)
    with _main(tmp_path) as h:
        h.begin_parallel(PAR, prd=tmp_path / "prd.json", base="c0", branch=None, started=T0,
                         pid=2, hostname="h")  # the resumed controller
        h.import_lane(PAR, story="US-001", attempt=1, lane="", state=a)
        [lane_row] = h.lanes(PAR)
        assert (lane_row.status, lane_row.iterations) == ("complete", 2)
        assert [n for (n,) in h.connection.execute(
            "SELECT n FROM iterations WHERE run_id = 'run-a' ORDER BY n")] == [0, 1, 2]
        run = h.parallel_run(PAR)
        assert run is not None and run.pid == 2 and run.status == "running"


def test_a_lane_without_history_copies_nothing(tmp_path: Path) -> None:
    with _main(tmp_path) as h:
        h.begin_parallel(PAR, prd=tmp_path / "p", base="c", branch="main", started=T0, pid=1,
                         hostname="h")
        assert h.import_lane(PAR, story="US-001", attempt=1, lane="",
                             state=tmp_path / "nothing.1.state") == []
        assert h.lanes(PAR) == []


def test_a_damaged_lane_history_is_an_error_naming_it(tmp_path: Path) -> None:
    a = tmp_path / "par" / "US-001.1.state"
    a.mkdir(parents=True)
    (a / "ralph.db").write_bytes(b"not a database at all" * 100)
    with _main(tmp_path) as h:
        h.begin_parallel(PAR, prd=tmp_path / "p", base="c", branch="main", started=T0, pid=1,
                         hostname="h")
        with pytest.raises(HistoryError, match=re.escape(str(a / "ralph.db"))):
            h.import_lane(PAR, story="US-001", attempt=1, lane="", state=a)
        assert h.lanes(PAR) == []
    assert (a / "ralph.db").read_bytes().startswith(b"not a database")  # left as it is


def test_a_run_of_the_main_history_is_never_replaced_by_a_lane(tmp_path: Path) -> None:
    a = tmp_path / "par" / "US-001.1.state"
    _lane_run(a, "same-id", "US-001", 1)
    with _main(tmp_path) as h:
        h.begin_run("same-id", prd=tmp_path / "prd.json", rootdir=tmp_path, argv=["x"],
                    settings={}, started=T0, pid=1, hostname="h")
        h.begin_parallel(PAR, prd=tmp_path / "p", base="c", branch="main", started=T0, pid=1,
                         hostname="h")
        with pytest.raises(HistoryError, match=r"already in .* as another run: it was "
                                               r"not copied; its own history keeps it"):
            h.import_lane(PAR, story="US-001", attempt=1, lane="", state=a)
        [run] = h.runs()
        assert run.id == "same-id" and run.prd == tmp_path / "prd.json"
        assert _counts(h, "same-id")[0] == 0  # nothing of the lane's was written


def test_finish_parallel_refuses_running_and_unknown_runs(tmp_path: Path) -> None:
    with _main(tmp_path) as h:
        with pytest.raises(ValueError, match="expected one of complete, incomplete"):
            h.finish_parallel(PAR, "running")
        with pytest.raises(KeyError, match=PAR):
            h.finish_parallel(PAR, "complete")


def test_the_lanes_table_keeps_its_constraints(tmp_path: Path) -> None:
    with _main(tmp_path) as h, pytest.raises(sqlite3.IntegrityError):
        h.connection.execute("INSERT INTO lanes (run_id, parallel_run, story, attempt, state, "
                             "imported) VALUES ('nope', 'nope', 's', 1, '/s', 'now')")
