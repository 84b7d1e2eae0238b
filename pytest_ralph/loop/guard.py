"""The oracle guard of a run: what judges the criteria, as the run started and as it is now.

:class:`OracleGuard` takes the snapshots (:func:`pytest_ralph.oracle.snapshot.snapshot`) with
the run's settings, lists what the agent changed since the run started, and compares a new
run's oracle with the last verified one (:mod:`pytest_ralph.state.verified`). Only the engine
(:class:`pytest_ralph.loop.engine.RunEngine`) uses it.

This module does not import pytest.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..checks.phase import CheckPhaseConfig
from ..oracle.snapshot import Change, Snapshot, compare, snapshot, snapshot_from_json
from ..prd.errors import PRDError
from ..prd.load import load_prd
from ..prd.model import PRD
from ..state.folder import StateDir
from ..state.history import History
from ..state.verified import (
    changes_stat,
    keep_copies,
    pointer_path,
    read_pointer,
    weakening,
)
from ..util.redact import Redactor
from .output import changes_text
from .records import LoopUsageError, RunRecord
from .settings import Settings, from_person


class OracleGuard:
    """The oracle snapshots of one run.

    Args:
        settings: the effective settings (``story``, ``verifier``, ``max_prd_bytes``,
            ``allow_criteria_edits``, ``accept_changes``).
        rootdir: the project root.
        inifile: the configuration file of the check phases, or ``None``.
        pythonpath: the folders of ini ``pythonpath`` (absolute).
        loop_anchors: where this process's pytest looked for its initial ``conftest.py``
            files (see :func:`pytest_ralph.oracle.snapshot.loop_conftests`).
        redactor: replaces secrets in what is shown.
        say: prints a line for the user.
    """

    def __init__(self, settings: Settings, *, rootdir: Path, inifile: Path | None,
                 pythonpath: tuple[Path, ...], loop_anchors: tuple[Path, ...],
                 redactor: Redactor, say: Callable[[str], None]) -> None:
        self.settings = settings
        self.rootdir = rootdir
        self.inifile = inifile
        self.pythonpath = pythonpath
        self.loop_anchors = loop_anchors
        self._redactor = redactor
        self._say = say

    def snapshot(self, prd: PRD, start: Snapshot | None = None) -> Snapshot:
        """A snapshot of ``prd``'s oracle as it is now; ``start``: the run's first one, whose
        guarded files it covers too."""
        return snapshot(prd, self.rootdir, inifile=self.inifile, stories=self.settings.story,
                        verifier=self.settings.verifier, start=start,
                        pythonpath=self.pythonpath, loop_anchors=self.loop_anchors)

    def changes(self, run: RunRecord, phase: CheckPhaseConfig) -> list[Change]:
        """What the agent changed in the oracle since the run started, limited to changes
        that touch a checked criterion."""
        assert run.oracle is not None
        try:
            prd = load_prd(run.prd.path, max_bytes=self.settings.max_prd_bytes)
        except PRDError:  # the check phase already fails on a broken PRD
            return []
        checked = {f"{sid}::{cid}" for sid, cid, _ in phase.expected}
        return [ch for ch in compare(run.oracle, self.snapshot(prd, run.oracle))
                if checked & set(ch.criteria)]

    def tampered(self, run: RunRecord) -> str:
        """A clause for the stop reason when the last iteration changed the criteria."""
        changes = run.last.changes if run.iterations else ()
        if not changes or self.settings.allow_criteria_edits:
            return ""
        return (f"; the agent changed the criteria ({changes_text(changes)}), so the loop "
                "refuses to report completion until they are restored")

    def check_verified(self, prd: PRD, oracle: Snapshot, state: StateDir,
                       history: History) -> list[str]:
        """Compare a new run's oracle with the last run's verified snapshot (in ``history``,
        or the pointer beside the project), keep copies of its guarded files for the next
        run's diff stat, and return the warnings for the run.

        Raises:
            LoopUsageError: the criteria or the files that judge them changed since the last
                run of ``prd`` started (or its snapshot cannot be read), and neither
                ``--ralph-accept-changes`` nor ``--ralph-allow-criteria-edits`` is given.
        """
        s = self.settings
        last = history.last_run(prd.path)
        ref = (last.id, last.status, last.oracle, str(history.path)) if last else None
        pointer = read_pointer(self.rootdir)
        if pointer is not None and pointer.get("prd") == str(prd.path) and (
                ref is None or pointer.get("state") != str(state.root)):
            # No run here, or not the one last verified (ralph_dir moved, the folder deleted).
            ref = (str(pointer.get("run")), str(pointer.get("status")), pointer["oracle"],
                   str(pointer_path(self.rootdir)))
        notes: list[str] = []
        if ref is not None and not from_person(s, "allow_criteria_edits"):
            ref_id, ref_status, ref_oracle, where = ref
            try:
                before = snapshot_from_json(ref_oracle)
                if not any(k.startswith("criterion ") for k in before.digests):
                    raise ValueError("no criterion in it")
            except ValueError as exc:
                why = (f"the verified snapshot of the last run {ref_id} ({ref_status}) "
                       f"cannot be read from {where} ({exc}): the history was "
                       "damaged or edited")
                if not s.accept_changes:
                    raise LoopUsageError(f"{why}; so the criteria cannot be compared with what "
                                         "was last verified; check them (git diff), then start "
                                         "with --ralph-accept-changes") from None
                notes.append(f"{why}; started anyway (--ralph-accept-changes)")
            else:
                changes = weakening(compare(before, self.snapshot(prd, before)))
                if changes:
                    stat = changes_stat(changes, before, self.rootdir, state.root,
                                     self._redactor.text)
                    shown = "\n".join(f"  {line}" for line in stat)
                    head = (f"the criteria or the files that judge them changed since the last "
                            f"run {ref_id} ({ref_status}) started")
                    if not s.accept_changes:
                        raise LoopUsageError(
                            f"{head}:\n{shown}\nA new run does not take a changed oracle as its "
                            "reference on its own: if you made these changes, rerun with "
                            "--ralph-accept-changes; if an agent did, restore them (for "
                            "example `git checkout -- <file>`, and delete added files)")
                    notes.append(f"{head} (accepted with --ralph-accept-changes): "
                                 + "; ".join(stat))
                    self._say(f"pytest-ralph: {head}, accepted (--ralph-accept-changes):\n"
                              f"{shown}")
        keep_copies(oracle, self.rootdir, state.root, self._redactor.text)
        return notes
