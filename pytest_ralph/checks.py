"""Check kinds: how one acceptance criterion is decided.

Kinds in this version:

* ``run`` (alias ``testCommand``): a shell command; passes on exit status 0.
* ``pytest``: node ids or paths run in a child pytest; passes when they all pass and at
  least one test ran.
* ``exists``: a path that must exist; ``file`` (+ ``contains``): a file that must exist
  (and whose text must match a regular expression).
* ``sql`` + ``db`` + ``expect``: a query on a SQLite database opened read-only.
* ``schema`` + ``instance``: a JSON or YAML file valid against a JSON Schema.
* ``python``: ``module:function``, passes unless it raises or returns False.
* text: a plain-string criterion with no check. It is *claimed*: it passes when its
  story says ``passes: true`` in the PRD at check time, fails otherwise, and is
  reported as "claimed, not verified". In strict mode every claimed criterion fails.

This module does not import pytest; :class:`pytest_ralph.collect.CriterionItem` calls it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import sqlite3
import sys
import tempfile
import traceback
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from xml.etree import ElementTree

import jsonschema
import yaml

from .checkrun import CHILD_ENV
from .model import Criterion, Story, fold_text
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


def _command_env() -> dict[str, str]:
    """The environment of a checked command: ours, minus the loop-child marker (a pytest the
    command starts is an ordinary pytest)."""
    env = dict(os.environ)
    env.pop(CHILD_ENV, None)
    return env


def _timed_out(timeout: float) -> str:
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
        env = _command_env()
        with tempfile.TemporaryFile() as out:
            finished = run_in_group(self.command, shell=True, cwd=self.cwd, output=out,
                                    timeout=self.timeout, env=env)
            tail = read_tail(out, OUTPUT_TAIL_BYTES).rstrip()
        if finished.returncode == 0:
            return CheckResult(True)
        if finished.timed_out:
            found = _timed_out(self.timeout)
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


@dataclass(frozen=True)
class PytestCheck:
    """Tests that must pass: node ids or paths run by a child ``python -m pytest``.

    Passes when pytest exits 0 and at least one test ran and passed; no test selected
    (exit 5), all tests skipped, a node id that does not exist, failures and errors are
    failures. The user's ``addopts`` cannot narrow the selection (``-k``/``-m``/``-x`` are
    reset).

    Attributes:
        targets: node ids or paths, relative to ``cwd``.
        cwd: absolute working directory (the rootdir).
        timeout: seconds before the run's process group is killed.
    """

    targets: tuple[str, ...]
    cwd: Path
    timeout: float

    def run(self) -> CheckResult:
        """Run the tests and read their JUnit XML."""
        shown = " ".join(self.targets)
        expected = "all selected tests pass and at least one runs"
        env = _command_env()
        with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryFile() as out:
            xml = Path(tmp) / "junit.xml"
            argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={xml}", "-k", "", "-m", "", "--maxfail=0", "--", *self.targets]
            finished = run_in_group(argv, cwd=self.cwd, output=out, timeout=self.timeout, env=env)
            tail = read_tail(out, OUTPUT_TAIL_BYTES).rstrip()
            counts = _junit_counts(xml)
        code = finished.returncode
        ran = counts["tests"] - counts["skipped"]
        passed = ran - counts["failures"] - counts["errors"]
        if finished.timed_out:
            found = _timed_out(self.timeout)
        elif code == 0 and passed >= 1:
            return CheckResult(True)
        elif code in (2, 3, 4):
            what = {2: "interrupted or collection errors", 3: "internal error",
                    4: "usage error, e.g. a node id that does not exist"}[code]
            found = f"pytest exit {code} ({what})"
        elif code == 5 or counts["tests"] == 0:
            found = f"no test ran (pytest exit {code}: nothing selected or collected)"
        elif code == 0:
            n = counts["tests"]
            found = "the selected test was skipped" if n == 1 else f"all {n} selected tests " \
                                                                   "were skipped"
        else:
            parts = [f"{counts['failures']} failed"]
            if counts["errors"]:
                parts.append(f"{counts['errors']} errors")
            parts.append(f"{passed} passed")
            found = f"{', '.join(parts)} (pytest exit {code})"
        text = f"{found}; expected {expected}: `pytest {shown}`"
        text += f"\noutput (last lines):\n{tail}" if tail else ""
        return CheckResult(False, text)


def _junit_counts(path: Path) -> dict[str, int]:
    """Totals of tests, failures, errors and skipped over every ``testsuite`` of a JUnit
    XML file (all zero when the file is missing or unreadable)."""
    counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):
        return counts
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    for suite in suites:
        for key in counts:
            with contextlib.suppress(ValueError):
                counts[key] += int(suite.get(key, "0"))
    return counts


@dataclass(frozen=True)
class PathCheck:
    """A path that must exist, or a file whose text must match a regular expression.

    Attributes:
        path: absolute path.
        shown: the path as the PRD wrote it (for messages).
        file: require a regular file (a ``file`` criterion), not just any path.
        contains: a regular expression (Python syntax, ``re.MULTILINE``) the file's text
            must match, or ``None``.
    """

    path: Path
    shown: str
    file: bool = False
    contains: str | None = None

    def run(self) -> CheckResult:
        """Look at the path now."""
        what = "a file" if self.file else "a file or folder"
        if not self.path.exists():
            return CheckResult(False, f"nothing at `{self.shown}`; expected {what} there")
        if self.file and not self.path.is_file():
            return CheckResult(False, f"`{self.shown}` is a folder; expected a file")
        if self.contains is None:
            return CheckResult(True)
        try:
            text = self.path.read_text("utf-8", errors="replace")
        except OSError as exc:
            return CheckResult(False, f"cannot read `{self.shown}`: {exc.strerror}; expected "
                                      f"its text to match /{self.contains}/")
        if re.search(self.contains, text, re.MULTILINE):
            return CheckResult(True)
        lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
        return CheckResult(False, f"no match for /{self.contains}/ in `{self.shown}` "
                                  f"({lines} lines); expected the text to match it")


@dataclass(frozen=True)
class SqlCheck:
    """A query on a SQLite database, opened read-only, whose result must equal ``expect``.

    ``expect`` is compared with the single value of a one-row, one-column result when it is
    a scalar (number, string, boolean, null), and with the list of rows (each a list of
    values) when it is a list.

    Attributes:
        sql: the query.
        db: absolute path of the database file.
        shown: the database path as the PRD wrote it.
        expect: the expected result (JSON value).
    """

    sql: str
    db: Path
    shown: str
    expect: Any

    def run(self) -> CheckResult:
        """Run the query (read-only) and compare."""
        where = f"`{self.sql}` on `{self.shown}`"
        if not self.db.is_file():
            return CheckResult(False, f"no database at `{self.shown}`; expected a SQLite file "
                                      f"for {where}")
        try:
            uri = "file:" + urllib.request.pathname2url(str(self.db)) + "?mode=ro"
            with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=10)) as conn:
                rows = [list(r) for r in conn.execute(self.sql).fetchall()]
        except sqlite3.Error as exc:
            return CheckResult(False, f"{where} failed: {exc}; expected a result equal to "
                                      f"{json.dumps(self.expect)}")
        if isinstance(self.expect, list):
            found: Any = rows
            if rows and all(len(r) == 1 for r in rows) and not any(
                    isinstance(e, list) for e in self.expect):
                found = [r[0] for r in rows]  # a list of scalars: compare one column
        elif len(rows) == 1 and len(rows[0]) == 1:
            found = rows[0][0]
        else:
            found = rows
        if found == self.expect:  # SQLite has no booleans: true == 1, as in SQL
            return CheckResult(True)
        return CheckResult(False, f"{where} gave {json.dumps(found, default=str)}; expected "
                                  f"{json.dumps(self.expect)}")


@dataclass(frozen=True)
class SchemaCheck:
    """A JSON or YAML file (``instance``) that must be valid against a JSON Schema file.

    Attributes:
        schema: absolute path of the schema (JSON or YAML).
        instance: absolute path of the file checked.
        shown: (schema, instance) as the PRD wrote them.
    """

    schema: Path
    instance: Path
    shown: tuple[str, str]

    def run(self) -> CheckResult:
        """Load both files and validate; every error is listed with its JSON path."""
        schema_shown, instance_shown = self.shown
        loaded = []
        for path, shown in ((self.schema, schema_shown), (self.instance, instance_shown)):
            try:
                text = path.read_text("utf-8")
                loaded.append(yaml.safe_load(text) if path.suffix.lower() in (".yaml", ".yml")
                              else json.loads(text))
            except (OSError, ValueError, yaml.YAMLError) as exc:
                return CheckResult(False, f"cannot load `{shown}`: {exc}; expected a JSON or "
                                          "YAML file")
        schema, instance = loaded
        try:
            validator_cls = jsonschema.validators.validator_for(schema)
            validator_cls.check_schema(schema)
            errors = sorted(validator_cls(schema).iter_errors(instance),
                            key=lambda e: list(map(str, e.absolute_path)))
        except jsonschema.SchemaError as exc:
            return CheckResult(False, f"`{schema_shown}` is not a valid JSON Schema: "
                                      f"{exc.message}")
        if not errors:
            return CheckResult(True)
        lines = [f"`{instance_shown}` does not match `{schema_shown}`: {len(errors)} "
                 f"problem{'s' if len(errors) != 1 else ''}; expected none"]
        for e in errors[:10]:
            jp = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}"
                               for p in e.absolute_path)
            lines.append(f"  {jp}: {e.message}")
        if len(errors) > 10:
            lines.append(f"  ... and {len(errors) - 10} more")
        return CheckResult(False, "\n".join(lines))


@dataclass(frozen=True)
class PythonCheck:
    """``module:function`` called with no arguments; passes unless it raises or returns False.

    Attributes:
        target: ``module:function`` (``function`` may be dotted: ``Class.method``).
        rootdir: put first on ``sys.path`` so that project modules import.
    """

    target: str
    rootdir: Path

    def run(self) -> CheckResult:
        """Import and call the function (in the check's own process)."""
        module_name, _, attr = self.target.partition(":")
        root = str(self.rootdir)
        if root not in sys.path:
            sys.path.insert(0, root)
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except Exception as exc:
            return CheckResult(False, f"cannot import `{self.target}`: {type(exc).__name__}: "
                                      f"{exc}; expected a function to call")
        if not callable(obj):
            return CheckResult(False, f"`{self.target}` is a {type(obj).__name__}; expected a "
                                      "function")
        try:
            value = obj()
        except Exception as exc:
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
            return CheckResult(False, f"`{self.target}()` raised {type(exc).__name__}: {exc}; "
                                      f"expected it to return without raising\n{tb.rstrip()}")
        if value is False:
            return CheckResult(False, f"`{self.target}()` returned False; expected anything "
                                      "else")
        return CheckResult(True)


def make_check(criterion: Criterion, story: Story, *, rootdir: Path, strict: bool = False,
               default_timeout: float = DEFAULT_CHECK_TIMEOUT,
               text_checks: Mapping[str, str] | None = None) -> Check:
    """The check for ``criterion`` of ``story``.

    Args:
        criterion: the criterion.
        story: its story (for the claim of a text criterion).
        rootdir: the directory ``run`` commands run in, and relative ``cwd`` values start from.
        strict: make text criteria fail instead of passing on the claim.
        default_timeout: seconds for ``run`` criteria without their own ``timeout``.
        text_checks: folded criterion text -> shell command (ini ``ralph_checks``): a text
            criterion found there is checked by its command instead of being claimed.
    """
    spec = criterion.spec
    if criterion.kind == "run":
        assert criterion.command is not None
        cwd = (rootdir / criterion.cwd) if criterion.cwd else rootdir
        return RunCheck(criterion.command, cwd.absolute(), criterion.timeout or default_timeout)
    if criterion.kind == "pytest":
        targets = spec["pytest"] if isinstance(spec["pytest"], list) else [spec["pytest"]]
        return PytestCheck(tuple(targets), rootdir.absolute(),
                           criterion.timeout or default_timeout)
    if criterion.kind in ("exists", "file"):
        shown = str(spec[criterion.kind])
        return PathCheck((rootdir / shown).absolute(), shown, file=criterion.kind == "file",
                         contains=spec.get("contains"))
    if criterion.kind == "sql":
        return SqlCheck(spec["sql"], (rootdir / spec["db"]).absolute(), spec["db"],
                        spec["expect"])
    if criterion.kind == "schema":
        return SchemaCheck((rootdir / spec["schema"]).absolute(),
                           (rootdir / spec["instance"]).absolute(),
                           (spec["schema"], spec["instance"]))
    if criterion.kind == "python":
        return PythonCheck(spec["python"], rootdir.absolute())
    command = (text_checks or {}).get(fold_text(criterion.text))
    if command is not None:
        return RunCheck(command, rootdir.absolute(), default_timeout)
    return ClaimedCheck(story.passes, strict)
