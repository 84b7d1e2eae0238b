"""Check kinds: how one acceptance criterion is decided (:func:`make_check`).

Kinds in this version:

* ``run`` (alias ``testCommand``): a shell command; passes on exit status 0.
* ``pytest``: node ids or paths run in a child pytest; passes when they all pass and at
  least one test ran.
* ``exists``: a path that must exist; ``file`` (+ ``contains``): a file that must exist
  (and whose text must match a regular expression).
* ``sql`` + ``db`` + ``expect``: a query on a SQLite database opened read-only.
* ``schema`` + ``instance``: a JSON or YAML file valid against a JSON Schema.
* ``python``: ``module:function``, called in a Python process of its own; passes unless it
  raises, returns False, ends its process or runs past the timeout.
* text: a plain-string criterion. In this order: a command mapped to its text by ini
  ``ralph_checks`` decides it (:class:`RunCheck`); else the judge command of ini
  ``ralph_verifier`` decides it (:class:`VerifierCheck`, reported as kind ``verifier``);
  else it is *claimed* (:class:`ClaimedCheck`): it passes when its story says
  ``passes: true`` in the PRD at check time, fails otherwise, and is reported as
  "claimed, not verified". In strict mode every claimed criterion fails; strict mode does
  not touch criteria that a command or the verifier decides.

One module holds each kind: :mod:`~pytest_ralph.checks.base` (``run``, claimed text criteria,
and what every kind shares), :mod:`~pytest_ralph.checks.pytest_kind`,
:mod:`~pytest_ralph.checks.files` (``exists``, ``file``, ``sql``, ``schema``),
:mod:`~pytest_ralph.checks.python` and :mod:`~pytest_ralph.checks.verifier`. A kind no plugin
provides gets :class:`UnknownKindCheck`.

This module does not import pytest; :class:`pytest_ralph.plugin.collect.CriterionItem` calls it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ..prd.model import CRITERION_KINDS, Criterion, Story, fold_text
from .base import DEFAULT_CHECK_TIMEOUT, Check, CheckResult, ClaimedCheck, RunCheck
from .files import PathCheck, SchemaCheck, SqlCheck
from .pytest_kind import PytestCheck
from .python import PythonCheck
from .verifier import VerifierCheck


class UnknownKindCheck:
    """A criterion of a kind that no plugin provides (``{"kind": "wordcount", ...}`` with no
    ``pytest_ralph_make_check`` implementation for it): it always fails, naming the kind.

    Args:
        criterion: the criterion.
    """

    def __init__(self, criterion: Criterion) -> None:
        self.criterion = criterion

    def run(self) -> CheckResult:
        """Fail with what is missing and how to provide it."""
        c = self.criterion
        return CheckResult(False, (
            f"no check for the kind {c.kind!r} of {c.key} ({c.json_path}): no installed plugin "
            "or conftest.py returns a check for it from the pytest_ralph_make_check hook; "
            f"expected a built-in kind ({', '.join(k for k in CRITERION_KINDS if k != 'text')}) "
            "or a plugin's. Install the plugin that provides it, or implement "
            "pytest_ralph_make_check in the conftest.py of the PRD's folder or a parent"))


def make_check(criterion: Criterion, story: Story, *, rootdir: Path, strict: bool = False,
               default_timeout: float = DEFAULT_CHECK_TIMEOUT,
               text_checks: Mapping[str, str] | None = None, verifier: str | None = None,
               verifier_source: str = "ini ralph_verifier", prd: Path | None = None,
               pin: tuple[str, ...] = ()) -> Check:
    """The check for ``criterion`` of ``story``.

    A text criterion is decided by its ``text_checks`` command if it has one, else by the
    ``verifier`` if one is configured, else by its story's claim.

    Args:
        criterion: the criterion.
        story: its story (for the claim of a text criterion, and the verifier's input).
        rootdir: the directory ``run`` commands and the verifier run in, and relative ``cwd``
            values start from.
        strict: make claimed text criteria fail instead of passing on the claim (criteria
            decided by a command or the verifier are not affected).
        default_timeout: seconds for ``run`` criteria without their own ``timeout``, for
            ``ralph_checks`` commands and for the verifier.
        text_checks: folded criterion text -> shell command (ini ``ralph_checks``): a text
            criterion found there is checked by its command instead of being claimed.
        verifier: the verifier command line (ini ``ralph_verifier``), or ``None``.
        verifier_source: where ``verifier`` was configured, for messages
            (e.g. ``"ini ralph_verifier (tox.ini)"``).
        prd: the PRD file, given to the verifier; required with ``verifier``.
        pin: options that pin a ``pytest`` criterion's child pytest to the project
            (:func:`~pytest_ralph.checks.pytest_kind.pin_args`).

    Raises:
        ValueError: ``verifier`` is given without ``prd``.
    """
    spec = criterion.spec
    if criterion.kind == "run":
        assert criterion.command is not None
        cwd = (rootdir / criterion.cwd) if criterion.cwd else rootdir
        return RunCheck(criterion.command, cwd.absolute(), criterion.timeout or default_timeout)
    if criterion.kind == "pytest":
        targets = spec["pytest"] if isinstance(spec["pytest"], list) else [spec["pytest"]]
        return PytestCheck(tuple(targets), rootdir.absolute(),
                           criterion.timeout or default_timeout, pin)
    if criterion.kind in ("exists", "file"):
        shown = str(spec[criterion.kind])
        path = os.path.join(rootdir, shown)
        if not os.path.isabs(path) or path.endswith(("/", "/.")) or "/./" in path or "//" in path:
            path = str(Path(path).absolute())  # as pathlib reads it: no trailing / or ./
        return PathCheck(path, shown, file=criterion.kind == "file",
                         contains=spec.get("contains"))
    if criterion.kind == "sql":
        return SqlCheck(spec["sql"], (rootdir / spec["db"]).absolute(), spec["db"],
                        spec["expect"])
    if criterion.kind == "schema":
        return SchemaCheck((rootdir / spec["schema"]).absolute(),
                           (rootdir / spec["instance"]).absolute(),
                           (spec["schema"], spec["instance"]))
    if criterion.kind == "python":
        return PythonCheck(spec["python"], rootdir.absolute(),
                           criterion.timeout or default_timeout)
    if criterion.kind != "text":
        return UnknownKindCheck(criterion)
    command = (text_checks or {}).get(fold_text(criterion.text))
    if command is not None:
        return RunCheck(command, rootdir.absolute(), default_timeout)
    if verifier is not None:
        if prd is None:
            raise ValueError("make_check: a verifier needs the PRD path (prd=...)")
        return VerifierCheck(verifier, verifier_source, criterion, story, prd.absolute(),
                             rootdir.absolute(), default_timeout)
    return ClaimedCheck(story.passes, strict, story.done_key)
