"""The runs driven from outside (a Claude Code Stop hook) in the history: table ``drivers``
(schema 3).

This module does not import pytest.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..util.text import now as _now
from .records import StoredDriver, StoredRun, from_iso, iso, stored_run, to_json
from .schema import RUN_COLUMNS
from .store import Store


class DriversMixin(Store):
    """The methods of :class:`pytest_ralph.state.history.History` on driven runs."""

    def arm_run(self, run_id: str, *, prd: Path, rootdir: Path, argv: Sequence[str],
                settings: Mapping[str, Any], armed: _dt.datetime, hostname: str,
                oracle: Mapping[str, Any], driver: str, marker: Path,
                inifile: Path | None) -> None:
        """Record a run driven from outside (status ``running``, no pid) and its ``drivers``
        row, in one transaction.

        Args:
            run_id: the run id.
            prd, rootdir, argv, settings, hostname, oracle: as for :meth:`begin_run` (``argv``:
                what stands for the agent, e.g. ``["claude-code-session"]``).
            armed: when it was armed (the run's start).
            driver: ``claude``.
            marker: the arming file the hook looks for.
            inifile: the configuration file of its check phases, or ``None``.

        Raises:
            sqlite3.IntegrityError: a run with this id exists, or an unknown driver.
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
            HistoryError: the history is open read-only.
        """
        when = iso(armed)
        with self._write() as conn:
            conn.execute(
                "INSERT INTO runs (id, prd, rootdir, agent_argv, settings, status, started, "
                "updated, pid, hostname, oracle) VALUES (?, ?, ?, ?, ?, 'running', ?, ?, NULL, "
                "?, ?)",
                (run_id, str(prd), str(rootdir), self._json(list(argv)),
                 self._json(dict(settings)), when, when, hostname, to_json(dict(oracle))))
            conn.execute("INSERT INTO drivers (run_id, driver, marker, inifile, armed) "
                         "VALUES (?, ?, ?, ?, ?)",
                         (run_id, driver, str(marker), "" if inifile is None else str(inifile),
                          when))
            self._event(conn, run_id, None, "armed", f"armed for the {driver} Stop hook "
                        f"({marker})")

    def driver(self, run_id: str) -> StoredDriver | None:
        """The ``drivers`` row of a run, or ``None`` for a run of ``pytest --ralph``."""
        if not self.v3:
            return None
        row = self._conn.execute(
            "SELECT run_id, driver, marker, inifile, session_id, armed, adopted, turn_started, "
            "tree FROM drivers WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            return None
        rid, driver, marker, inifile, session, armed, adopted, turn, tree = row
        return StoredDriver(str(rid), str(driver), Path(marker),
                            Path(inifile) if inifile else None, str(session), from_iso(armed),
                            None if adopted is None else from_iso(adopted),
                            None if turn is None else from_iso(turn), str(tree))

    def driven_runs(self) -> list[StoredRun]:
        """Driven runs still ``running`` (armed, or adopted by a session), newest first."""
        if not self.v3:
            return []
        rows = self._conn.execute(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE status = 'running' AND id IN "
            "(SELECT run_id FROM drivers) ORDER BY started DESC, id DESC").fetchall()
        return [stored_run(r) for r in rows]

    def adopt(self, run_id: str, session_id: str) -> bool:
        """Give an armed run to a session (the first Stop of that session). Only a run no
        session has adopted yet can be adopted.

        Returns:
            ``True`` if ``session_id`` now owns the run (also when it already did).

        Raises:
            ValueError: an empty ``session_id``.
            sqlite3.OperationalError: the database stayed locked for :data:`BUSY_TIMEOUT`.
            HistoryError: the history is open read-only.
        """
        if not session_id:
            raise ValueError("a session with an empty id never adopts a run")
        now = iso(_now())
        with self._write() as conn:
            cur = conn.execute("UPDATE drivers SET session_id = ?, adopted = ? "
                               "WHERE run_id = ? AND session_id = ''", (session_id, now, run_id))
            if cur.rowcount:
                self._event(conn, run_id, None, "adopted",
                            f"adopted by Claude Code session {session_id}")
                return True
            row = conn.execute("SELECT session_id FROM drivers WHERE run_id = ?",
                               (run_id,)).fetchone()
            return row is not None and row[0] == session_id

    def set_turn(self, run_id: str, started: _dt.datetime, tree: str | None) -> None:
        """Record that the hook blocked a stop at ``started`` (the agent's next turn begins)
        with the git tree ``tree`` (``None``: unknown).

        Raises:
            KeyError: no such driven run.
            HistoryError: the history is open read-only.
        """
        with self._write() as conn:
            cur = conn.execute("UPDATE drivers SET turn_started = ?, tree = ? WHERE run_id = ?",
                               (iso(started), tree or "", run_id))
            self._require(cur, run_id)
