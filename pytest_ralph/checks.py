"""Check kinds: how one acceptance criterion is decided.

Kinds in this version:

* ``run`` (alias ``testCommand``): a shell command; passes on exit status 0.
* text: a plain-string criterion with no check. It is *claimed*: it passes when its
  story says ``passes: true`` in the PRD at check time, fails otherwise, and is
  reported as "claimed, not verified". In strict mode every claimed criterion fails.

This module does not import pytest; :class:`pytest_ralph.collect.CriterionItem` calls it.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .model import Criterion, Story
from .process import read_tail, run_in_group

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
    """

    passed: bool
    message: str = ""
    claimed: bool = False


class Check(Protocol):
    """Something that decides a criterion. ``run()`` must not raise for a failing criterion."""

    def run(self) -> CheckResult:
        """Evaluate the criterion now."""
        ...


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
        env = dict(os.environ)
        env.pop("PYTEST_RALPH_CHILD", None)
        with tempfile.TemporaryFile() as out:
            finished = run_in_group(self.command, shell=True, cwd=self.cwd, output=out,
                                    timeout=self.timeout, env=env)
            tail = read_tail(out, OUTPUT_TAIL_BYTES).rstrip()
        if finished.returncode == 0:
            return CheckResult(True)
        if finished.timed_out:
            found = f"no exit within the timeout of {self.timeout:g} s (process group killed)"
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
        story_passes: the story's ``passes`` value in the PRD at check time.
        strict: when ``True`` the criterion fails whatever the claim (``--ralph-strict``).
    """

    story_passes: bool
    strict: bool = False

    def run(self) -> CheckResult:
        """Pass on the claim; fail without a ``passes: true`` claim, or in strict mode."""
        if self.strict:
            return CheckResult(False, f"{CLAIMED_NOTE}: no check is mapped to this text criterion "
                                      "and --ralph-strict refuses claims", claimed=True)
        if self.story_passes:
            return CheckResult(True, CLAIMED_NOTE, claimed=True)
        return CheckResult(False, f"{CLAIMED_NOTE}: the story does not claim `passes: true`; "
                                  "expected the story to be done and marked so", claimed=True)


def make_check(criterion: Criterion, story: Story, *, rootdir: Path, strict: bool = False,
               default_timeout: float = DEFAULT_CHECK_TIMEOUT) -> Check:
    """The check for ``criterion`` of ``story``.

    Args:
        criterion: the criterion.
        story: its story (for the claim of a text criterion).
        rootdir: the directory ``run`` commands run in, and relative ``cwd`` values start from.
        strict: make text criteria fail instead of passing on the claim.
        default_timeout: seconds for ``run`` criteria without their own ``timeout``.
    """
    if criterion.kind == "run":
        assert criterion.command is not None
        cwd = (rootdir / criterion.cwd) if criterion.cwd else rootdir
        return RunCheck(criterion.command, cwd.absolute(), criterion.timeout or default_timeout)
    return ClaimedCheck(story.passes, strict)
