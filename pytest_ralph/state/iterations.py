"""The iterations of a run in the history: each iteration with its agent run and criterion
results (tables ``iterations``, ``agent_runs``, ``criterion_results``), and the agent runs
that did not spend an iteration (``agent_attempts``).

This module does not import pytest.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence

from ..agents.run import OUTCOMES, AgentRun
from ..checks.results import CheckResults, CriterionResult
from ..oracle.snapshot import Change
from ..util.text import now as _now
from .records import (
    CRITERION_OUTCOMES,
    StoredAttempt,
    StoredIteration,
    criterion_result,
    finite,
    from_iso,
    iso,
    stored_agent,
    stored_iteration,
    to_json,
)
from .schema import CRITERION_COLUMNS
from .store import Store


class IterationsMixin(Store):
    """The methods of :class:`pytest_ralph.state.history.History` on a run's iterations."""

    def record_iteration(self, run_id: str, n: int, *, story: str, started: _dt.datetime,
                         finished: _dt.datetime, results: CheckResults,
                         agent: AgentRun | None, fingerprint: str, streak: int,
                         error_streak: int, regressions: Sequence[str] = (),
                         flaky: Sequence[str] = (), changes: Sequence[Change] = (),
                         blocked: Mapping[str, str] | None = None,
                         diff_stat: str = "") -> None:
        """Record one iteration, its agent run and every criterion result in ONE
        transaction: after a crash either all of it is there or none of it.

        Args:
            run_id: the run (must exist).
            n: the iteration number, 0 for the baseline check.
            story: the story the prompt asked for, or ``""``.
            started, finished: UTC times of the iteration.
            results: the check results after it (criteria kept in this order).
            agent: its agent run, ``None`` for the baseline.
            fingerprint: the failure fingerprint the breaker compared.
            streak: identical-failure streak after it.
            error_streak: agent-error streak after it.
            regressions: keys (``US-001::AC1``) that passed earlier and fail now.
            flaky: keys that failed, then passed on a re-check.
            changes: the oracle changes seen after it.
            blocked: stories blocked after it (story id -> why).
            diff_stat: ``git diff --stat`` of what the iteration changed, or ``""``.

        Raises:
            ValueError: an agent outcome not in :data:`pytest_ralph.agents.run.OUTCOMES` or a
                criterion outcome not ``passed``/``failed`` (nothing written).
            sqlite3.IntegrityError: no such run, iteration ``n`` already recorded, or two
                results for the same criterion (nothing written).
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
            HistoryError: the history is open read-only.
        """
        if agent is not None and agent.outcome not in OUTCOMES:
            raise ValueError(f"unknown agent outcome {agent.outcome!r}; expected one of "
                             f"{', '.join(OUTCOMES)}")
        for c in results.criteria:
            if c.outcome not in CRITERION_OUTCOMES:
                raise ValueError(f"criterion {c.key}: unknown outcome {c.outcome!r}; expected "
                                 "passed or failed")
        end = iso(finished)
        criteria_changed = [{"subject": ch.subject, "change": ch.change,
                             "criteria": list(ch.criteria), "detail": ch.detail}
                            for ch in changes]
        with self._write() as conn:
            conn.execute(
                "INSERT INTO iterations (run_id, n, story, started, finished, passing, total, "
                "exitstatus, check_duration, fingerprint, streak, error_streak, regressions, "
                "flaky, criteria_changed, errors, check_extra, blocked, diff_stat) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, n, story, iso(started), end, len(results.passing),
                 len(results.criteria), results.exitstatus, float(results.duration),
                 fingerprint, streak, error_streak, to_json(list(regressions)),
                 to_json(list(flaky)), self._json(criteria_changed),
                 self._json(list(results.errors)), self._json(dict(results.extra)),
                 self._json(dict(blocked or {})), self._text(diff_stat)))
            if agent is not None:
                conn.execute(
                    "INSERT INTO agent_runs (run_id, n, argv, exit_code, duration, outcome, "
                    "log_path, detail, why, cost_usd, input_tokens, output_tokens, turns) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (run_id, n, self._json(list(agent.argv)), agent.exit_code,
                     float(agent.duration), agent.outcome, str(agent.log_path),
                     self._text(agent.log_tail), self._text(agent.detail),
                     finite(agent.cost_usd),
                     agent.input_tokens, agent.output_tokens, agent.turns))
            conn.executemany(
                "INSERT INTO criterion_results (run_id, n, pos, story, criterion, nodeid, "
                "text, kind, outcome, message, claimed, duration) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ((run_id, n, pos, c.story, c.criterion, c.nodeid, self._text(c.text), c.kind,
                  c.outcome, self._text(c.message), int(c.claimed), float(c.duration))
                 for pos, c in enumerate(results.criteria)))
            conn.execute("UPDATE runs SET updated = ? WHERE id = ?", (end, run_id))

    def record_attempt(self, run_id: str, n: int, *, started: _dt.datetime, agent: AgentRun,
                       pause: float) -> int:
        """Record an agent run that did not spend an iteration (a rate limit) and the
        seconds the loop pauses after it, in one transaction.

        Args:
            run_id: the run (must exist).
            n: the iteration it was an attempt at (>= 1).
            started: UTC time it started.
            agent: the run.
            pause: seconds the loop pauses after it (>= 0); :meth:`set_attempt_pause`
                corrects it once the pause is over (or cut short).

        Returns:
            the attempt's id.

        Raises:
            ValueError: an outcome not in :data:`pytest_ralph.agents.run.OUTCOMES`.
            sqlite3.IntegrityError: no such run.
            HistoryError: the history is open read-only.
        """
        if agent.outcome not in OUTCOMES:
            raise ValueError(f"unknown agent outcome {agent.outcome!r}; expected one of "
                             f"{', '.join(OUTCOMES)}")
        with self._write() as conn:
            conn.execute(
                "INSERT INTO agent_attempts (run_id, n, started, argv, exit_code, duration, "
                "outcome, log_path, why, cost_usd, input_tokens, output_tokens, turns, pause) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, n, iso(started), self._json(list(agent.argv)), agent.exit_code,
                 float(agent.duration), agent.outcome, str(agent.log_path),
                 self._text(agent.detail),
                 finite(agent.cost_usd), agent.input_tokens, agent.output_tokens,
                 agent.turns, float(max(pause, 0.0))))
            attempt_id = int(conn.execute("SELECT last_insert_rowid()").fetchone()[0])
            conn.execute("UPDATE runs SET updated = ? WHERE id = ?", (iso(_now()), run_id))
        return attempt_id

    def set_attempt_pause(self, attempt_id: int, pause: float) -> None:
        """Record how long the pause after attempt ``attempt_id`` really lasted (seconds).

        Raises:
            HistoryError: the history is open read-only.
        """
        with self._write() as conn:
            conn.execute("UPDATE agent_attempts SET pause = ? WHERE id = ?",
                         (float(max(pause, 0.0)), attempt_id))

    def attempts(self, run_id: str) -> list[StoredAttempt]:
        """The agent runs of a run that did not spend an iteration, oldest first."""
        if not self.v2:
            return []
        rows = self._conn.execute(
            "SELECT n, started, pause, argv, exit_code, duration, outcome, log_path, '', why, "
            "cost_usd, input_tokens, output_tokens, turns FROM agent_attempts "
            "WHERE run_id = ? ORDER BY id", (run_id,)).fetchall()
        return [StoredAttempt(int(r[0]), from_iso(r[1]), stored_agent(r[3:]), float(r[2]))
                for r in rows]

    def iterations(self, run_id: str, *, with_criteria: bool = True) -> list[StoredIteration]:
        """The recorded iterations of a run (``[]`` for an unknown run), baseline first.

        Args:
            run_id: the run.
            with_criteria: rebuild each iteration's criterion results; ``False`` reads only
                the summaries (fast for ``--ralph-status``).
        """
        with self._read() as conn:
            rows = conn.execute(f"SELECT {self._iteration_columns} FROM iterations "
                                "WHERE run_id = ? ORDER BY n", (run_id,)).fetchall()
            agents = {int(r[0]): stored_agent(r[1:]) for r in conn.execute(
                f"SELECT n, {self._agent_columns} FROM agent_runs WHERE run_id = ?",
                (run_id,))}
            criteria: dict[int, list[CriterionResult]] = {}
            if with_criteria:
                for r in conn.execute(f"SELECT n, {CRITERION_COLUMNS} FROM criterion_results "
                                      "WHERE run_id = ? ORDER BY n, pos", (run_id,)):
                    criteria.setdefault(int(r[0]), []).append(criterion_result(r[1:]))
        return [stored_iteration(r, criteria.get(int(r[1]), []), agents.get(int(r[1])))
                for r in rows]

    def iteration(self, run_id: str, n: int) -> StoredIteration | None:
        """Iteration ``n`` of a run with its criterion results, or ``None``."""
        with self._read() as conn:
            row = conn.execute(f"SELECT {self._iteration_columns} FROM iterations "
                               "WHERE run_id = ? AND n = ?", (run_id, n)).fetchone()
            if row is None:
                return None
            arow = conn.execute(f"SELECT {self._agent_columns} FROM agent_runs "
                                "WHERE run_id = ? AND n = ?", (run_id, n)).fetchone()
            crows = conn.execute(f"SELECT {CRITERION_COLUMNS} FROM criterion_results "
                                 "WHERE run_id = ? AND n = ? ORDER BY pos",
                                 (run_id, n)).fetchall()
        return stored_iteration(row, [criterion_result(r) for r in crows],
                                None if arow is None else stored_agent(arow))

    def passed_keys(self, run_id: str) -> frozenset[str]:
        """Keys (``US-001::AC1``) of every criterion that passed in any recorded check of
        the run: what a resumed run needs to spot regressions."""
        rows = self._conn.execute("SELECT DISTINCT story, criterion FROM criterion_results "
                                  "WHERE run_id = ? AND outcome = 'passed'", (run_id,))
        return frozenset(f"{s}::{c}" for s, c in rows)
