"""Where a run is kept while it runs: the state folder's loop lock, the run history
(:mod:`pytest_ralph.state.history`), ``run.json`` and the pointer to the last verified oracle
snapshot (:mod:`pytest_ralph.state.verified`).

:class:`RunStore` holds the lock and the open history, records each iteration in one history
transaction, and notices (:meth:`RunStore.check`) a state folder, lock file or history
deleted or changed by someone else during the run: it recreates what is missing and rebuilds
the history from memory. Only the engine (:class:`pytest_ralph.loop.engine.RunEngine`) uses
it.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from ..checks.fingerprint import stored_fingerprint
from ..oracle.snapshot import Snapshot, compare, snapshot_from_json, snapshot_to_json
from ..prd.model import PRD
from ..state.folder import DB_NAME, LockedError, RunDir, StateDir
from ..state.history import History
from ..state.records import HistoryError, StoredIteration, StoredRun
from ..state.signature import db_signature
from ..state.verified import write_pointer
from ..util.files import read_text
from ..util.redact import Redactor
from ..util.text import now as _now
from ..util.text import plural
from .output import changes_text, summary
from .records import IterationRecord, LoopUsageError, RunRecord
from .settings import Settings, from_person, to_json

#: Largest ``run.json`` of another run read when looking for lost runs, in bytes.
RUN_JSON_MAX_BYTES = 64 * 1024 * 1024


class RunStore:
    """The lock, the history and the files of the runs of one state folder.

    Args:
        settings: the effective settings (stored with a new run; ``dir`` is the state folder).
        rootdir: the project root.
        redactor: replaces secrets (the history keeps settings and argv redacted).
        say: prints a line for the user.
    """

    def __init__(self, settings: Settings, rootdir: Path, redactor: Redactor,
                 say: Callable[[str], None]) -> None:
        self.settings = settings
        self.rootdir = rootdir
        self._redactor = redactor
        self._say = say
        self._history: History | None = None
        self._lock: IO[str] | None = None
        self._db_sig: tuple[object, ...] = ()

    @contextmanager
    def locked(self, state: StateDir) -> Iterator[None]:
        """Hold the state folder's loop lock with the run history open for the body; release
        both on the way out.

        Raises:
            LoopUsageError: another loop holds the lock, the folder cannot be used, or the
                history cannot be opened.
        """
        try:
            state.ensure()
            lock = state.lock()
        except LockedError as exc:
            raise LoopUsageError(str(exc)) from None
        except OSError as exc:
            raise LoopUsageError(f"cannot use the state folder {state.root}: {exc}") from None
        self._lock = lock
        try:
            if state.stale_lock:
                self._say(f"pytest-ralph: warning: taking over the loop lock of {state.root} "
                          f"left by a loop that is not running any more ({state.stale_lock})")
            try:
                self._history = History.open(state.root / DB_NAME)
            except HistoryError as exc:
                raise LoopUsageError(str(exc)) from None
            self.written()
            try:
                yield
            finally:
                self.history.close()
                self._history = None
        finally:  # a clean exit leaves no holder behind
            for held in {id(lock): lock, id(self._lock): self._lock}.values():
                with contextlib.suppress(OSError, ValueError):
                    held.seek(0)
                    held.truncate()
                    held.flush()
                    held.close()

    @property
    def history(self) -> History:
        """The open run history (only within :meth:`locked`)."""
        assert self._history is not None
        return self._history

    def written(self) -> None:
        """Note the history's files as our last write left them (see
        :func:`pytest_ralph.state.signature.db_signature`): call it after each write of ours,
        so that :meth:`check` takes only other writes for someone else's."""
        self._db_sig = db_signature(self.history.path)

    def begin(self, run: RunRecord) -> None:
        """Record the new run ``run`` in the history and point at its oracle snapshot."""
        assert run.oracle is not None
        self.history.begin_run(run.run_dir.id, prd=run.prd.path, rootdir=self.rootdir,
                               argv=run.argv, settings=to_json(self.settings),
                               started=run.started, pid=os.getpid(),
                               hostname=socket.gethostname(),
                               oracle=snapshot_to_json(run.oracle))
        self.written()
        self.point_at(run)

    def point_at(self, run: RunRecord) -> None:
        """Record ``run``'s snapshot as the last verified one apart from the state folder
        (:func:`pytest_ralph.state.verified.write_pointer`)."""
        if run.oracle is not None:
            write_pointer(self.rootdir, {"run": run.run_dir.id, "status": run.status,
                                         "prd": str(run.prd.path),
                                         "state": str(self.settings.dir),
                                         "oracle": snapshot_to_json(run.oracle)})

    def record(self, run: RunRecord, rec: IterationRecord, state: StateDir) -> None:
        """Add ``rec`` to the run: one history transaction, then ``run.json``."""
        self.check(run, state)
        run.iterations.append(rec)
        self._store(run.run_dir.id, rec)
        self.save(run)

    def _store(self, run_id: str, rec: IterationRecord) -> None:
        self.history.record_iteration(
            run_id, rec.n, story=rec.story, started=rec.started, finished=_now(),
            results=rec.results, agent=rec.agent, fingerprint=rec.fingerprint,
            streak=rec.streak, error_streak=rec.error_streak, regressions=rec.regressions,
            flaky=rec.flaky, changes=rec.changes, blocked=rec.blocked, diff_stat=rec.diff)
        self.written()

    def save(self, run: RunRecord) -> None:
        """Write ``run.json`` (:func:`pytest_ralph.loop.output.summary`)."""
        run.run_dir.write_summary(summary(run, self.settings))

    def resume(self, stored: StoredRun, prd: PRD, argv: list[str], state: StateDir, *,
               snapshot: Callable[[PRD, Snapshot], Snapshot]) -> RunRecord:
        """Rebuild the run ``stored`` from the history and mark it running again; ``snapshot``
        takes the oracle of the PRD as it is now, given the run's first snapshot.

        Raises:
            LoopUsageError: its oracle snapshot cannot be read, or its criteria changed since
                it started (unless ``--ralph-allow-criteria-edits``, from a person).
        """
        run_dir = RunDir(state.root / "runs" / stored.id)
        run_dir.path.mkdir(parents=True, exist_ok=True)
        run = RunRecord(prd=prd, settings=self.settings, argv=argv, run_dir=run_dir,
                        started=stored.started, resumed_from=stored.status)
        try:
            run.oracle = snapshot_from_json(stored.oracle)
            if not any(k.startswith("criterion ") for k in run.oracle.digests):
                raise ValueError("no criterion in it")
        except ValueError:  # fail closed: never take the tree as it is now as the reference
            raise LoopUsageError(
                f"run {stored.id} ({stored.status}) cannot be resumed: the snapshot of its "
                f"criteria taken when it started is unreadable in {self.history.path} (the "
                "history was damaged or edited); `pytest --ralph --ralph-new "
                "--ralph-accept-changes` starts a new run, whose start becomes the reference"
            ) from None
        # A waiver in the configuration file (which the agent can write) does not count here.
        changes = [] if from_person(self.settings, "allow_criteria_edits") else compare(
            run.oracle, snapshot(prd, run.oracle))
        if changes:
            raise LoopUsageError(
                f"run {stored.id} ({stored.status}) cannot be resumed as it is: its criteria "
                f"changed since it started ({changes_text(changes)}), and a resumed run would "
                "count that against the agent; restore them (if an agent made these changes), "
                "or start a new run with the criteria as they are now: `pytest --ralph "
                "--ralph-new --ralph-accept-changes` (or pass --ralph-allow-criteria-edits)")
        # The history keeps them redacted: compare them redacted.
        new_settings = self._redactor.json(json.loads(json.dumps(to_json(self.settings),
                                                                default=str)))
        differ = [f"{k} {stored.settings.get(k)!r} -> {v!r}" for k, v in new_settings.items()
                  if k in stored.settings and stored.settings[k] != v]
        if list(stored.argv) != self._redactor.json(argv):
            differ.append(f"agent {list(stored.argv)} -> {self._redactor.json(argv)}")
        if differ:
            self._say("pytest-ralph: the resumed run goes on with changed settings: "
                      + "; ".join(differ))
            self.history.update_run(stored.id, argv=argv, settings=new_settings)
        self.load_iterations(run)
        self.history.clear_cancel(stored.id)
        self.history.set_status(stored.id, "running", f"resumed after {stored.status}",
                                pid=os.getpid(), hostname=socket.gethostname())
        return run

    def load_iterations(self, run: RunRecord) -> None:
        """Fill ``run`` with its iterations, flaky criteria and rate-limited attempts from the
        history."""
        for it in self.history.iterations(run.run_dir.id):
            run.iterations.append(_record(it, run.run_dir))
            run.flaky.update(it.flaky)
        run.attempts = [(a.n, a.agent.to_agent_run(), a.pause)
                        for a in self.history.attempts(run.run_dir.id)]

    def lost_runs(self, state: StateDir, prd: PRD, new_id: str) -> list[str]:
        """A warning when run folders of this PRD exist that the history does not know (the
        database or its WAL file was deleted or replaced)."""
        lost = []
        for summary_file in sorted((state.root / "runs").glob("*/run.json")):
            rid = summary_file.parent.name
            if rid == new_id or self.history.run(rid) is not None:
                continue
            with contextlib.suppress(OSError, ValueError, RecursionError, AttributeError):
                # read_text: a FIFO or a device planted as run.json is never read
                if json.loads(read_text(summary_file, RUN_JSON_MAX_BYTES)).get("prd") == str(
                        prd.path):
                    lost.append(rid)
        if not lost:
            return []
        message = (f"the run history {self.history.path} does not know {plural(len(lost), 'run')}"
                   f" of this PRD found in {state.root / 'runs'} ({', '.join(lost[-3:])}): the "
                   "database or its -wal file was deleted or replaced; their iterations do not "
                   "count for this new run")
        self._say(f"pytest-ralph: warning: {message}")
        return [message]

    def check(self, run: RunRecord, state: StateDir) -> None:
        """Notice a state folder, lock file or history deleted or damaged during the run (by
        the agent, say): recreate what is missing, rebuild the history from memory, and say
        what was lost.

        Raises:
            LoopUsageError: another loop took the lock after its file was deleted, or the
                history became unusable (a newer schema, say).
        """
        db = state.root / DB_NAME
        problems: list[str] = []
        if not (state.root / ".gitignore").exists():  # the check phase recreates folders
            problems.append(f"the state folder {state.root} was deleted")
        with contextlib.suppress(OSError):
            state.ensure()
        if not self._lock_intact(state):
            try:
                new = state.lock()
            except LockedError as exc:
                raise LoopUsageError(f"the loop lock of {state.root} was deleted during the run, "
                                     f"and another loop took it: {exc}") from None
            except OSError as exc:
                raise LoopUsageError(f"cannot recreate the loop lock in {state.root}: "
                                     f"{exc}") from None
            self._lock = new
            if not problems:
                problems.append(f"the loop lock {state.root / 'lock'} was deleted")
        run.run_dir.path.mkdir(parents=True, exist_ok=True)
        if db_signature(db) != self._db_sig:
            if not problems:
                problems.append(f"the run history {db} was "
                                + ("deleted" if not db.exists() else "changed by someone else"))
            self.history.close()
            try:
                self._history = History.open(db)  # a damaged file is moved aside first
            except HistoryError as exc:
                if db.exists():  # not ours (another program's, a newer schema): set aside
                    stamp = _now().strftime("%Y%m%dT%H%M%SZ")
                    aside = db.with_name(f"{db.name}.foreign-{stamp}")
                    try:
                        db.rename(aside)
                        for suffix in ("-wal", "-shm"):
                            side = db.with_name(db.name + suffix)
                            if side.exists():
                                side.rename(aside.with_name(aside.name + suffix))
                    except OSError:
                        raise LoopUsageError(str(exc)) from None
                    exc = HistoryError(f"{exc}; it was moved to {aside}")
                problems.append(str(exc))
                try:
                    self._history = History.open(db)
                except HistoryError as exc2:
                    raise LoopUsageError(str(exc2)) from None
            self._db_sig = db_signature(db)
            stored = self.history.run(run.run_dir.id)
            if stored is None:
                self.begin(run)
            have = {it.n for it in self.history.iterations(run.run_dir.id, with_criteria=False)}
            for rec in run.iterations:
                if rec.n not in have:
                    self._store(run.run_dir.id, rec)
            if stored is not None and have >= {rec.n for rec in run.iterations}:
                problems = [p for p in problems if "changed by someone else" not in p]
        if not problems:
            return
        rebuilt = any("history" in p or "state folder" in p for p in problems)
        message = ("; ".join(problems) + f" during the run (noticed at iteration "
                   f"{len(run.iterations)}); " + (
                       "recreated what was missing and rebuilt the run history from memory; "
                       "lost: earlier prompts, agent logs and check logs of this run if they "
                       "were deleted, progress.txt, and earlier runs' history" if rebuilt else
                       "recreated it; nothing else was lost"))
        run.warnings.append(message)
        self.history.add_event(run.run_dir.id, "state-lost", message)
        self._say(f"pytest-ralph: warning: {message}")

    def _lock_intact(self, state: StateDir) -> bool:
        """Whether the lock file we hold is still the one at ``<state>/lock``."""
        if self._lock is None:
            return True
        try:
            return os.fstat(self._lock.fileno()).st_ino == (state.root / "lock").stat().st_ino
        except (OSError, ValueError):
            return False


def _record(it: StoredIteration, run_dir: RunDir) -> IterationRecord:
    """An iteration of the history as the loop keeps it in memory."""
    return IterationRecord(it.n, it.results, it.agent.to_agent_run() if it.agent else None,
                           it.story, it.streak, it.error_streak, it.started,
                           run_dir.path / f"iteration-{it.n:03d}", it.regressions,
                           stored_fingerprint(it.fingerprint), it.changes, it.flaky,
                           dict(it.blocked), it.diff_stat)
