"""The merge queue's gate: the whole check phase run over a lane's merged code, which is agent
code, confined as the loop's check phases are.

* :func:`gate_check` makes the production ``check`` of :class:`pytest_ralph.parallel.queue.
  MergeQueue`: a :class:`Gate`, which runs ``pytest <prd> --ralph-results PATH`` in the folder
  it is given as :func:`pytest_ralph.checks.phase.run_check_phase` runs a check phase, and
  learns from its first check what the checks import (:attr:`Gate.watched`), so that a merge
  that adds a file standing in for one of those modules (a ``jsonschema.py``, a ``pytest.py``
  at the root) is refused as a change to the judges, as the loop refuses it.
* :func:`gate_around` names the folders read-only around the integration worktree;
  :func:`describe_gate` says in one sentence what the gate could write.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from ..checks.phase import CheckPhaseConfig, run_check_phase
from ..oracle.bytecode import TrustedBytecode
from ..oracle.snapshot import Snapshot, imports_watch, snapshot, with_subjects
from ..prd.errors import PRDError
from ..prd.load import load_prd
from ..sandbox.bwrap import Sandbox
from ..util.env import CONTROLLER_ENV
from .gitcmd import WorktreeError, git
from .outcomes import CheckOutcome, one_line
from .queue import QueueError
from .worktrees import Repo

__all__ = ["CHECK_TIMEOUT", "Gate", "describe_gate", "gate_around", "gate_check"]

#: Seconds a gate's check phase may take before its process group is killed.
CHECK_TIMEOUT = 3600.0

#: What a gate that is not run from a git worktree's folder guards of git: nothing.
_NO_GITFILE: tuple[Path, ...] = ()


def gate_around(repo: Repo) -> tuple[Path, ...]:
    """The folders a confined gate gets read-only around its integration worktree: the
    user's working tree (``repo.top``) and the repository's ``.git`` folder (its common folder:
    config, hooks, refs, objects, and the ``worktrees/`` entry the integration worktree's
    ``.git`` file points into), wherever it is.

    Raises:
        QueueError: git failed.
    """
    try:
        common = git(repo.top, "rev-parse", "--path-format=absolute",
                     "--git-common-dir")[1].strip()
    except WorktreeError as exc:
        raise QueueError(str(exc)) from None
    return (repo.top, *([Path(common)] if common else []))


def describe_gate(sandbox: Sandbox | None, *, done: bool = True) -> str:
    """One sentence for the merge output, the report and the job summary: what the gate, which
    runs the lanes' code, could write (``done``: in the past tense, else the present)."""
    runs, could, can = ("ran", "could", "could") if done else ("runs", "may", "can")
    if sandbox is not None and sandbox.confined:
        return (f"the gate {runs} the lanes' code {sandbox.describe()}: it {could} write only "
                "the integration worktree (less the PRD, the files that judge it and the "
                "worktree's .git file) and a private results folder; your working tree, .git, "
                "the state folder and your home are read-only to it")
    why = sandbox.reason if sandbox is not None else "no sandbox given"
    return (f"the gate {runs} the lanes' code UNCONFINED ({why}): their checks {can} write "
            "anything you can (your working tree, .git/config and hooks, your home); install "
            "bubblewrap and set ralph_sandbox = required to confine it")


def _gitfile(folder: Path) -> tuple[Path, ...]:
    """The ``.git`` file of the worktree that holds ``folder`` (the first one found going up),
    which a confined gate gets read-only: rewritten, it would point the controller's git at a
    folder the lane's code made."""
    for where in (folder, *folder.parents):
        dotgit = where / ".git"
        if dotgit.is_file() and not dotgit.is_symlink():
            return (dotgit,)
        if dotgit.exists():
            break
    return _NO_GITFILE


class Gate:
    """The production ``check`` of the merge queue (:func:`gate_check` makes it): called with
    a folder (the project inside the integration worktree), it runs the gate there and returns
    a :class:`~pytest_ralph.parallel.outcomes.CheckOutcome`.

    Attributes:
        watched: the subjects the queue's oracle guards besides the PRD's judges: the names
            the checks import and the folders where a file would stand in for one of them
            (:func:`pytest_ralph.oracle.judges.watch`, subject -> parameters), learnt from the
            gate's first check (the run's base commit, before any lane's code is merged: what
            it imports is the user's); ``None`` until then. The queue keeps it in
            ``queue.json`` and gives it back on a resume.
        strict: ``--ralph-strict`` is given to every gate: claimed text criteria fail.
    """

    def __init__(self, prd: Path, *, python: str, timeout: float, args: Sequence[str],
                 sandbox: Sandbox | None, state_dir: Path | None, around: Sequence[Path],
                 inifile: Path | None, bytecode: TrustedBytecode | None,
                 strict: bool = False) -> None:
        self.prd = Path(prd)
        self.python, self.timeout, self.args = python, timeout, tuple(args)
        self.sandbox, self.state_dir, self.around = sandbox, state_dir, tuple(around)
        self.inifile, self.bytecode, self.strict = inifile, bytecode, strict
        self.watched: dict[str, tuple[str, ...]] | None = None

    @property
    def settings(self) -> dict[str, bool]:
        """What the gate's verdicts are worth, kept in ``queue.json`` beside them:
        ``{"confined": it runs under the sandbox, "strict": --ralph-strict}``."""
        return {"confined": bool(self.sandbox is not None and self.sandbox.confined),
                "strict": self.strict}

    def oracle(self, folder: Path, start: Snapshot | None = None) -> Snapshot:
        """The oracle of the project ``folder`` now: the PRD's judges
        (:func:`pytest_ralph.oracle.snapshot.snapshot`) and :attr:`watched`.

        Raises:
            PRDError: the PRD does not load.
            OSError: a judge cannot be read.
        """
        snap = snapshot(load_prd(folder / self.prd), folder, start=start)
        return with_subjects(snap, self.watched, folder) if self.watched else snap

    def learn(self, found: Mapping[str, Sequence[str]] | None) -> None:
        """Take :attr:`watched` from ``found`` (a resumed queue's record) unless the gate has
        learnt it already."""
        if self.watched is None and found is not None:
            self.watched = {k: tuple(v) for k, v in found.items()}

    def __call__(self, folder: Path) -> CheckOutcome:
        """Run the gate in ``folder`` (see :func:`gate_check`)."""
        path = folder / self.prd
        judges: tuple[Path, ...] = _gitfile(folder)
        expected: tuple[tuple[str, str, str], ...] = ()
        oracle: Snapshot | None = None
        loaded = None
        try:
            loaded = load_prd(path)
            oracle = self.oracle(folder)
            judges += oracle.judges(folder)
            expected = tuple((st.id, c.id, c.text) for st in loaded.stories
                             for c in st.criteria)
        except (PRDError, OSError, RuntimeError, ValueError):
            pass  # the gate's pytest says what is wrong with it
        config = CheckPhaseConfig(
            prd=path, rootdir=folder, python=self.python, timeout=self.timeout,
            extra_args=(*self.args, *(["--ralph-strict"] if self.strict else [])),
            inifile=None if self.inifile is None else folder / self.inifile,
            sandbox=self.sandbox, state_dir=self.state_dir, judges=judges, oracle=oracle,
            expected=expected, around=self.around,
            drop_env=("GITHUB_STEP_SUMMARY", CONTROLLER_ENV), bytecode=self.bytecode,
            report_imports=self.watched is None)
        with tempfile.TemporaryDirectory(prefix="pytest-ralph-queue-") as tmp:
            try:
                results = run_check_phase(config, Path(tmp))
            except OSError as exc:
                return CheckOutcome({}, {}, errors=(f"cannot run the gate: {exc}",))
            try:
                tail = (Path(tmp) / "check.log").read_bytes()[-2000:].decode("utf-8", "replace")
            except OSError:
                tail = ""
        if self.watched is None and results.imports and loaded is not None:
            with contextlib.suppress(OSError, RuntimeError, ValueError):
                self.watched = imports_watch(snapshot(loaded, folder), results.imports, folder,
                                             (folder, path.parent), prd=loaded)
        shown = f"the gate `pytest {shlex.quote(str(self.prd))}` in {folder}"
        code = results.exitstatus
        checked = [c for c in results.criteria if c.kind != "missing"]
        if code in (0, 1) and checked:
            return CheckOutcome.from_results(results)
        if not checked:  # one error: what the phase said (a timeout, no results), or the tail
            said = "; ".join(results.errors) or tail
            return CheckOutcome({}, {}, errors=(
                f"{shown} exited {code} after checking 0 criteria: {one_line(said)}",))
        outcome = CheckOutcome.from_results(results)
        return replace(outcome, errors=(*outcome.errors, (
            f"{shown} exited {code} after checking {len(checked)} "
            f"criteria: {one_line(tail)}")))


def gate_check(prd: Path, *, python: str = sys.executable, timeout: float = CHECK_TIMEOUT,
               args: Sequence[str] = (), sandbox: Sandbox | None = None,
               state_dir: Path | None = None, around: Sequence[Path] = (),
               inifile: Path | None = None, bytecode: TrustedBytecode | None = None,
               strict: bool = False) -> Gate:
    """A ``check`` for :class:`~pytest_ralph.parallel.queue.MergeQueue`: the gate,
    ``pytest <prd> --ralph-results PATH [args]`` run in the folder it is given as a check
    phase of the loop runs (:func:`pytest_ralph.checks.phase.run_check_phase`: the launcher
    that a ``pytest.py`` of the branch cannot stand in for, private bytecode, results in a
    private folder outside the project, distrusted when they disagree with how the child
    ended, redacted; the judges watched while it runs).

    The code on a lane's branch is agent code: with a ``sandbox`` that confines, the gate runs
    under bubblewrap and may write only the folder it is given (less the PRD, the files that
    judge its criteria and the worktree's ``.git`` file, read-only) and its private results
    folder; ``state_dir``, the paths ``around`` (:func:`gate_around`: the user's working
    tree, the repository's ``.git``), the home folder and the rest stay read-only. Otherwise it
    runs unconfined, under the supervisor (every process it starts dies with it); ``None``:
    unconfined, unsupervised.

    Args:
        prd: the PRD, relative to the project folder (the same place in every worktree).
        python: the interpreter that runs pytest (one with pytest-ralph installed).
        timeout: seconds before the gate's process group is killed.
        args: more arguments for the gate.
        sandbox: the run's sandbox (:func:`pytest_ralph.sandbox.bwrap.probe`).
        state_dir: the run's state folder (read-only to a confined gate).
        around: more read-only paths that hold the folder (see above).
        inifile: the pytest configuration file, relative to the project folder (the copy in
            the folder it is given is used) or absolute; ``None``: none (pytest's defaults,
            never a file above the project).
        bytecode: the bytecode folder the gates of the run share
            (:meth:`pytest_ralph.oracle.bytecode.TrustedBytecode.for_run`: only the controller
            compiles into it, read-only to a confined gate), so that each gate does not
            compile pytest again (about a second); ``None``: a fresh folder per gate.
        strict: give every gate ``--ralph-strict`` (claimed text criteria fail).

    Returns:
        the :class:`Gate`. A gate that writes no results (a crash, a timeout), checks no
        criterion or exits with another status than 0 or 1 (a usage error: no such PRD) gives
        an outcome with that as an error (nothing verified), with the end of its output.
    """
    return Gate(prd, python=python, timeout=timeout, args=args, sandbox=sandbox,
                state_dir=state_dir, around=around, inifile=inifile, bytecode=bytecode,
                strict=strict)
