"""The ground every check kind stands on: the verdict on one criterion (:class:`CheckResult`),
the :class:`Check` protocol, the environment and the timeouts of the processes checks start,
and the two kinds that need nothing more: :class:`RunCheck` (a shell command, kind ``run``
and the commands of ini ``ralph_checks``) and :class:`ClaimedCheck` (a text criterion decided
by its story's claim).

Every process a check starts keeps its Python bytecode in a private folder, never in the
project's ``__pycache__`` folders (:func:`pytest_ralph.checks.phase.private_bytecode`): the check
phase's folder in the loop's child, else one made for this process and removed at its exit
(:func:`command_env`).

This module does not import pytest.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..oracle.bytecode import loaded_rewriter, seed_from_loaded
from ..util.env import CHILD_ENV
from ..util.process import read_tail, run_in_group
from .phase import (
    PYCACHE_DIR_PREFIX,
    PYCACHE_PREFIX_ENV,
    forget_project_bytecode,
    private_bytecode,
)

#: Default seconds a ``run`` criterion may take before its process group is killed.
DEFAULT_CHECK_TIMEOUT = 600.0

#: Bytes of a failing command's output kept in the failure message.
OUTPUT_TAIL_BYTES = 4000

CLAIMED_NOTE = "claimed, not verified"


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one criterion.

    Attributes:
        passed: whether the criterion holds.
        message: for a failure, what was expected and what was found (multi-line);
            for a pass, a short note or ``""``.
        claimed: ``True`` when the verdict rests on the story's claim, not on a check.
        kind: the kind of check that decided when it is not the criterion's own kind
            (:data:`~pytest_ralph.checks.verifier.VERIFIER_KIND` for a text criterion judged by
            the verifier), else ``""``.
    """

    passed: bool
    message: str = ""
    claimed: bool = False
    kind: str = ""


class Check(Protocol):
    """Something that decides a criterion. ``run()`` must not raise for a failing criterion."""

    def run(self) -> CheckResult:
        """Evaluate the criterion now."""
        ...


#: The private bytecode folder of this process, once made (see :func:`_pycache_prefix`).
_own_pycache: list[str] = []

#: The project folders (absolute) the folder was seeded for or cleaned of (see
#: :func:`_pycache_prefix`).
_seen_projects: list[str] = []


def _pycache_prefix(project: Path | None = None) -> str:
    """The private bytecode folder for the processes checks start: in the loop's child, the
    check phase's (already in our environment, kept warm by the loop); else a folder made on
    first use and removed when this process exits.

    That folder is seeded, at the first call naming a ``project``, with the bytecode this
    process loaded from outside it (:func:`pytest_ralph.oracle.bytecode.seed_from_loaded`),
    so that a child pytest does not compile pytest and its plugins again; each call naming a
    ``project`` removes whatever the folder holds under it (its files are compiled afresh
    for each check).

    Args:
        project: the project folder (rootdir) the check runs in; ``None`` (a ``run`` command,
            whose working folder may be anywhere): no seeding.

    Raises:
        OSError: the folder cannot be made.
    """
    inherited = os.environ.get(PYCACHE_PREFIX_ENV)
    if os.environ.get(CHILD_ENV) and inherited:
        return inherited
    if not _own_pycache:
        made = tempfile.mkdtemp(prefix=PYCACHE_DIR_PREFIX)
        atexit.register(shutil.rmtree, made, ignore_errors=True)
        _own_pycache.append(made)
    if project is not None:
        prefix = Path(_own_pycache[0])
        if not _seen_projects:
            rewriter, tail = loaded_rewriter()
            seed_from_loaded(prefix, project, rewriter=rewriter, rewrite_tail=tail)
            _seen_projects.append(os.path.abspath(project))
        # The project's own bytecode never outlives a check: a file rewritten within the
        # second with the same size (or bytecode written by an earlier check's process)
        # would be loaded for the next check.
        forget_project_bytecode(prefix, project)
        shutil.rmtree(prefix / os.path.abspath(project).lstrip(os.sep), ignore_errors=True)
    return _own_pycache[0]


def command_env(project: Path | None = None) -> dict[str, str]:
    """The environment of a checked command: ours, minus the loop-child marker (a pytest the
    command starts is an ordinary pytest), with Python bytecode kept in a private folder
    (:func:`_pycache_prefix`, :func:`pytest_ralph.checks.phase.private_bytecode`).

    Args:
        project: the project folder (rootdir) the command runs in, ``None`` when it is not
            known: see :func:`_pycache_prefix`.

    Raises:
        OSError: the private bytecode folder cannot be made.
    """
    env = dict(os.environ)
    env.pop(CHILD_ENV, None)
    private_bytecode(env, _pycache_prefix(project))
    return env


def timed_out(timeout: float) -> str:
    """The failure text of a process killed after ``timeout`` seconds."""
    return f"no exit within the timeout of {timeout:g} s (process group killed)"


@dataclass(frozen=True)
class RunCheck:
    """A shell command that must exit 0.

    Attributes:
        command: the command line, run by the system shell.
        cwd: absolute working directory.
        timeout: seconds before the command's whole process group is killed.
    """

    command: str
    cwd: Path
    timeout: float

    def run(self) -> CheckResult:
        """Run the command; a non-zero exit, a timeout or a missing ``cwd`` is a failure."""
        if self.cwd.exists() and not self.cwd.is_dir():
            return CheckResult(False, f"working directory {self.cwd} is a file (expected a "
                                      f"folder): `{self.command}` not run")
        if not self.cwd.is_dir():
            return CheckResult(False, f"working directory {self.cwd} does not exist (expected an "
                                      f"existing folder): `{self.command}` not run")
        env = command_env()
        with tempfile.TemporaryFile() as out:
            finished = run_in_group(self.command, shell=True, cwd=self.cwd, output=out,
                                    timeout=self.timeout, env=env)
            tail = read_tail(out, OUTPUT_TAIL_BYTES).rstrip()
        if finished.returncode == 0:
            return CheckResult(True)
        if finished.timed_out:
            found = timed_out(self.timeout)
        elif finished.returncode is not None and finished.returncode < 0:
            found = f"killed by signal {-finished.returncode}"
        else:
            found = f"exit status {finished.returncode}"
            if finished.returncode == 127:
                found += " (command not found)"
        text = f"{found}, expected exit status 0: `{self.command}`"
        text += f"\noutput (last lines):\n{tail}" if tail else "\noutput: (none)"
        return CheckResult(False, text)


@dataclass(frozen=True)
class ClaimedCheck:
    """A text criterion with no check: decided by the story's own ``passes`` claim.

    Attributes:
        story_passes: the story's ``passes`` value in the PRD at check time (from its
            ``status`` in a PRD dialect that has no ``passes``).
        strict: when ``True`` the criterion fails whatever the claim (``--ralph-strict``).
        done_key: ``"status"`` when the claim comes from the story's ``status``, for the
            failure message; else ``"passes"``.
    """

    story_passes: bool
    strict: bool = False
    done_key: str = "passes"

    def run(self) -> CheckResult:
        """Pass on the claim; fail without a ``passes: true`` claim, or in strict mode."""
        if self.strict:
            return CheckResult(False, f"{CLAIMED_NOTE}: no check is mapped to this text criterion "
                                      "and --ralph-strict refuses claims", claimed=True)
        if self.story_passes:
            return CheckResult(True, CLAIMED_NOTE, claimed=True)
        if self.done_key == "status":
            return CheckResult(False, f"{CLAIMED_NOTE}: the story's `status` does not say done; "
                                      "expected the story to be done and its status set to done "
                                      "(or complete, completed, passed)", claimed=True)
        return CheckResult(False, f"{CLAIMED_NOTE}: the story does not claim `passes: true`; "
                                  "expected the story to be done and marked so", claimed=True)
