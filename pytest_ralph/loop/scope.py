"""What a run checks: the PRD (found, loaded, filtered by ``--ralph-story``), the criteria
``-k``/``-m``/``--deselect`` select, the sandbox of the check phases and the check-phase
settings that follow from all of them.

:class:`Scope` is the engine's (:class:`pytest_ralph.loop.engine.RunEngine`); it also reads the
PRD again as the agent leaves it and writes the verdicts back into it.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..checks.phase import CheckPhaseConfig, workers_problem
from ..checks.results import CheckResults
from ..checks.verdicts import story_notes, story_verdicts
from ..oracle.bytecode import TrustedBytecode
from ..oracle.snapshot import Snapshot
from ..prd.describe import no_prd_message, no_stories_message
from ..prd.errors import PRDError
from ..prd.load import discover_prd, load_prd
from ..prd.model import PRD, Story
from ..prd.writeback import write_back
from ..sandbox.bwrap import Sandbox, SandboxError, probe
from ..state.folder import StateDir
from .hooks import LoopHooks
from .records import LoopUsageError, NoCriteria, RunRecord
from .settings import Settings


class Scope:
    """What one run checks, and how.

    Args:
        settings: the effective settings.
        rootdir: the project root; the checks run there.
        inifile: the configuration file to pass to each child pytest, or ``None``.
        python: the interpreter for the child pytest of each check phase.
        keyword: a ``-k`` expression that selects criteria ("" for all).
        markexpr: a ``-m`` expression that selects criteria ("" for all).
        junitxml: where each check phase writes JUnit XML, or ``None``.
        deselect: node id prefixes deselected with ``--deselect``.
        child_args: the options of the command line each check phase's child pytest gets.
        hooks: the extension points (``prd_loaded``).
        sandbox: the sandbox of the check phases; ``None``: probed from the settings.
    """

    def __init__(self, settings: Settings, *, rootdir: Path, inifile: Path | None, python: str,
                 keyword: str, markexpr: str, junitxml: Path | None,
                 deselect: tuple[str, ...], child_args: tuple[str, ...], hooks: LoopHooks,
                 sandbox: Sandbox | None) -> None:
        self.settings = settings
        self.rootdir = rootdir
        self.inifile = inifile
        self.python = python
        self.keyword = keyword
        self.markexpr = markexpr
        self.junitxml = junitxml
        self.deselect = deselect
        self.child_args = child_args
        self.hooks = hooks
        self._sandbox = sandbox

    def prepare_prd(self) -> PRD:
        """Find and load the PRD and apply the story filter.

        Raises:
            LoopUsageError: bad PRD, unknown story ids mixed with known ones; ``workers`` set
                without pytest-xdist.
            NoCriteria: no PRD found, no stories, or the story filter matches none.
        """
        s = self.settings
        problem = workers_problem(self.workers(), self.child_args)
        if problem:
            raise LoopUsageError(f"{problem} (workers = {s.workers} from "
                                 f"{s.sources.get('workers')})")
        path = s.prd
        if path is None:
            path = discover_prd(self.rootdir)
            if path is None:
                raise NoCriteria(no_prd_message(self.rootdir))
        try:
            prd = load_prd(path, max_bytes=s.max_prd_bytes)
        except PRDError as exc:
            raise LoopUsageError(exc.describe()) from None
        if not prd.stories:
            raise NoCriteria(f"{prd.path}: {no_stories_message(prd)}")
        if s.story:
            known = [st.id for st in prd.stories]
            unknown = [sid for sid in s.story if sid not in known]
            if unknown and len(unknown) == len(s.story):
                raise NoCriteria(f"story {' '.join(unknown)} (from {s.sources.get('story')}) "
                                 f"selects no story of {prd.path} (its stories: "
                                 f"{', '.join(known)})")
            if unknown:
                raise LoopUsageError(f"no story {', '.join(unknown)} (from "
                                     f"{s.sources.get('story')}) in {prd.path} (its stories: "
                                     f"{', '.join(known)})")
        try:
            self.hooks.prd_loaded(prd)
        except PRDError as exc:
            raise LoopUsageError(exc.describe()) from None
        return prd

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox of agent runs and check phases (probed from the settings once).

        Raises:
            LoopUsageError: ``ralph_sandbox = required`` and bubblewrap cannot confine.
        """
        if self._sandbox is None:
            s = self.settings
            try:
                self._sandbox = probe(s.sandbox, source=s.sources.get("sandbox", "default"),
                                      writable=s.sandbox_writable)
            except SandboxError as exc:
                raise LoopUsageError(str(exc)) from None
        return self._sandbox

    def selected(self, prd: PRD) -> list[Story]:
        """The stories of ``prd`` the story filter (``--ralph-story``) selects."""
        return [st for st in prd.stories if not self.settings.story or st.id in
                self.settings.story]

    def phase_config(self, prd: PRD, oracle: Snapshot | None = None, *,
                     bytecode: TrustedBytecode | None = None) -> CheckPhaseConfig:
        """The check-phase settings; every selected criterion is expected in every check
        (with ``-k``/``-m`` the baseline decides which are selected). ``oracle``'s files and
        folders are read-only to a confined phase; ``bytecode``: the run's private bytecode
        cache."""
        expected = () if self.selection() else tuple(
            (st.id, c.id, c.text) for st in self.selected(prd) for c in st.criteria)
        return CheckPhaseConfig(prd=prd.path, rootdir=self.rootdir, inifile=self.inifile,
                                sandbox=self.sandbox, state_dir=self.settings.dir,
                                judges=oracle.judges(self.rootdir) if oracle else (),
                                oracle=oracle,
                                stories=self.settings.story, strict=self.settings.strict,
                                python=self.python, keyword=self.keyword,
                                markexpr=self.markexpr, junitxml=self.junitxml,
                                deselect=self.deselect, expected=expected,
                                extra_args=self.child_args, bytecode=bytecode,
                                workers=self.workers())

    def workers(self) -> str:
        """The ``-n`` value of the check phases (``""``: none, the ``addopts`` decide)."""
        workers = self.settings.workers
        return "" if workers is None else str(workers)

    def selection(self) -> str:
        """``-k 'x' --deselect y``: the options that select criteria, as the user gave them."""
        parts = [f"{flag} {expr!r}" for flag, expr in (("-k", self.keyword),
                                                        ("-m", self.markexpr)) if expr]
        parts += [f"--deselect {d}" for d in self.deselect]
        return " ".join(parts)

    def reload(self, run: RunRecord) -> PRD:
        """The PRD as it is now (the agent may edit it); the last good one if it is broken."""
        with contextlib.suppress(PRDError):
            run.prd = load_prd(run.prd.path, max_bytes=self.settings.max_prd_bytes)
        return run.prd

    def write_back(self, prd: PRD, results: CheckResults, state: StateDir) -> None:
        """Write the verdicts of ``results`` back into the PRD file (and ``passes.json``), as
        :func:`pytest_ralph.prd.writeback.write_back` does; nothing after a phase error."""
        if results.errors or not results.criteria:
            return
        try:  # the PRD as it was checked (the agent may have edited it)
            current = load_prd(prd.path, max_bytes=self.settings.max_prd_bytes)
        except PRDError:
            return
        strict = self.settings.strict  # claims refused: they stay as the user set them
        write_back(prd.path, story_verdicts(results, current, strict=strict),
                   state.root / "passes.json", notes=story_notes(results, current, strict=strict))
