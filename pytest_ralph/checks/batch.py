"""One child pytest for a group of ``pytest`` criteria (:func:`run_batch`).

Every ``pytest`` criterion (:class:`~pytest_ralph.checks.pytest_kind.PytestCheck`) that shares
its working directory, its pin options and its timeout with others (:func:`batch_key`) runs in
one child pytest with the union of their targets, with every defence of a single check: the
random probe token and the probe items, the JUnit report through a pipe, the written-twice
check, ``-k``/``-m``/``-x`` reset, the private bytecode folder, the pin options; and
``--continue-on-collection-errors``, so that a broken file does not hide the others.

The probe plugin (:mod:`pytest_ralph.plugin.probe`) gives each testcase its node id and path
as JUnit user properties; each criterion's verdict is then read from the testcases its
targets select (a path, a folder, a node id, a node id with parameters), by
:class:`~pytest_ralph.checks.pytest_kind.PytestCheck`'s rules: at least one of its tests runs
and passes, skips and deselection fail it, a collection error fails the criteria whose files it
concerns. A probe that passed or went missing, or a report written twice, fails every
criterion of the batch (the tests of one share the process of all). A node id that does not
exist (pytest exit 4) sends the criteria naming it to a child of their own (pytest's own words),
and the batch runs again without them. Anything else that cannot be attributed safely (a
timeout, an exit status that does not match the outcomes, a testcase no criterion selects, a
property missing or doubled) falls back to one child per criterion: never to a pass.

This module does not import pytest (the child does).
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..util.env import PROBE_TOKEN_ENV
from ..util.process import read_tail, run_in_group
from .base import OUTPUT_TAIL_BYTES, CheckResult, command_env
from .pytest_kind import (
    NODEID_PROPERTY,
    PATH_PROPERTY,
    REWRITTEN,
    PytestCheck,
    _JunitPipe,
    _written_twice,
    child_argv,
    probe_names,
    tamper_text,
)

#: Extra options of a batched child (after the reset of -k/-m/-x).
BATCH_OPTIONS = ("--continue-on-collection-errors",)

#: Words of the probe plugin's outcome invariant (:data:`pytest_ralph.plugin.probe.TAMPERED`)
#: in a testcase's failure: code loaded in the batch forged a pass, which taints every
#: verdict of the batch (its tests share one process).
TAMPER_MARK = "yet its report said passed: code loaded by the tests changed how pytest " \
    "reports outcomes"

#: The failure text of every criterion of a batch in which :data:`TAMPER_MARK` was found.
TAMPERED_FOUND = ("this test raised, yet its report said passed: code loaded by the tests "
                  "changed how pytest reports outcomes (the tests of a batch share one "
                  "process, so no verdict of it can be trusted)")

#: Times a batch runs again without the criteria that named a node id that does not exist.
MAX_RERUNS = 3

#: Characters of one testcase's failure text kept in a criterion's excerpt.
CASE_TEXT_CHARS = 1500


#: The first pytest whose collection a batch's attribution follows: pytest 8 collects
#: overlapping arguments differently (``tests/a.py`` and ``tests/a.py::test_ok`` together
#: gave only ``test_ok``), so under it every criterion keeps its own child.
FIRST_BATCHING_PYTEST = (9, 0)


@functools.lru_cache(maxsize=1)
def batching_supported() -> bool:
    """Whether the installed pytest (the one a check's child runs) is one batches follow
    (:data:`FIRST_BATCHING_PYTEST` or later); ``False`` when its version cannot be read."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        parts = version("pytest").split(".")[:2]
        return tuple(int(p) for p in parts) >= FIRST_BATCHING_PYTEST
    except (PackageNotFoundError, ValueError):
        return False


def batch_key(check: PytestCheck) -> tuple[Path, tuple[str, ...], float]:
    """What criteria must share to run in one child: ``(cwd, pin, timeout)``."""
    return check.cwd, check.pin, check.timeout


def run_batch(checks: Sequence[PytestCheck]) -> list[CheckResult]:
    """The verdict on each of ``checks`` (in order), from as few child pytest runs as can be
    attributed safely (see the module docstring).

    Args:
        checks: ``pytest`` checks that share :func:`batch_key`.

    Raises:
        ValueError: the checks do not share :func:`batch_key`.
        OSError: the private bytecode folder or the empty ini cannot be made.
    """
    if len({batch_key(c) for c in checks}) > 1:
        raise ValueError("run_batch: the checks must share their cwd, pin options and timeout")
    if not batching_supported():
        return [check.run() for check in checks]
    results: dict[int, CheckResult] = {}
    alone: list[int] = []
    groups: dict[frozenset[str] | None, list[int]] = {}
    for i, check in enumerate(checks):
        if not _attributable(check):
            alone.append(i)
        else:
            groups.setdefault(conftests_of(check), []).append(i)
    for conftests, members in groups.items():
        if conftests is None:  # too many files to tell: one child each
            alone += members
            continue
        got = _run_group([checks[i] for i in members])
        results.update(zip(members, got, strict=True))
    for i in alone:
        results[i] = checks[i].run()
    return [results[i] for i in range(len(checks))]


def _attributable(check: PytestCheck) -> bool:
    """Whether ``check``'s testcases can be told apart in a batch by the paths pytest names:
    each target's file exists (else pytest stops at the first, exit 4, and the criterion gets
    pytest's own words from a child of its own) and no symbolic link leads to it (pytest
    names a file by the path it was given, a link's own)."""
    for target in check.targets:
        full = _target_path(check.cwd, target)
        if not os.path.lexists(full) or os.path.realpath(full) != full:
            return False
    return True


#: Files and folders :func:`conftests_of` looks at, at most, under one folder target.
CONFTEST_WALK_LIMIT = 20_000


def conftests_of(check: PytestCheck) -> frozenset[str] | None:
    """The ``conftest.py`` files a child pytest of ``check`` alone may load: those of the
    rootdir and of every folder down to each target, and for a folder target every one under
    it (none is left out, even where pytest would not recurse; a linked folder under it makes
    the set unknown). Criteria batch only with those
    of the same set: a ``conftest.py`` is a plugin of the whole session, so one that a
    criterion alone would not load must not reach its tests.

    Returns:
        Absolute paths, or ``None`` when a folder holds more than
        :data:`CONFTEST_WALK_LIMIT` entries or a symbolic link to a folder (the criterion
        then runs alone).
    """
    root = os.path.normpath(_rootdir(check))
    found: set[str] = set()
    for target in check.targets:
        full = _target_path(check.cwd, target)
        folder = full if os.path.isdir(full) and "::" not in target else os.path.dirname(full)
        here = folder
        while True:
            candidate = os.path.join(here, "conftest.py")
            if os.path.lexists(candidate):
                found.add(candidate)
            if here == root or not here.startswith(root.rstrip(os.sep) + os.sep):
                break
            here = os.path.dirname(here)
        if folder == full:
            seen = 0
            for top, dirs, files in os.walk(full):
                seen += len(dirs) + len(files)
                if seen > CONFTEST_WALK_LIMIT:
                    return None
                if any(os.path.islink(os.path.join(top, d)) for d in dirs):
                    return None  # pytest goes into a linked folder: its conftest.py too
                if "conftest.py" in files:
                    found.add(os.path.join(top, "conftest.py"))
    return frozenset(found)


def _run_group(checks: Sequence[PytestCheck]) -> list[CheckResult]:
    """The verdicts on ``checks`` (same :func:`batch_key`, same :func:`conftests_of`), from a
    batched child, reruns without the criteria naming node ids that do not exist, and one
    child each for the rest."""
    results: dict[int, CheckResult] = {}
    todo = list(range(len(checks)))
    for _ in range(MAX_RERUNS + 1):
        if len(todo) <= 1:
            break
        outcome = _run_once([checks[i] for i in todo])
        if isinstance(outcome, _Missing):
            named = [todo[j] for j in outcome.members]
            for i in named:
                results[i] = checks[i].run()
            todo = [i for i in todo if i not in named]
            continue
        if outcome is not None:
            # A criterion none of whose tests ran (a node id pytest let pass because another
            # target collected its file, a deselection): pytest's own words, from its own child.
            results.update((i, r) for i, r in zip(todo, outcome, strict=True) if r is not None)
            todo = [i for i, r in zip(todo, outcome, strict=True) if r is None]
        break
    for i in todo:  # one child each: a single criterion, or an anomaly
        results[i] = checks[i].run()
    return [results[i] for i in range(len(checks))]


@dataclass
class _Missing:
    """Exit 4 naming node ids that do not exist: the positions of the members naming them."""

    members: list[int]


@dataclass
class _Case:
    """One JUnit testcase: its node id (or, for a collection report, its mangled name), its
    outcome counts and its failure text."""

    nodeid: str
    path: str
    collect: bool
    failures: int = 0
    errors: int = 0
    skipped: bool = False
    text: list[str] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)

    @property
    def bad(self) -> bool:
        return bool(self.failures or self.errors)


def _target_path(cwd: Path, target: str) -> str:
    """The absolute, normalized path part of a target (before its first ``::``), under the
    working directory with its symbolic links resolved (as the child's ``os.getcwd()``)."""
    return os.path.normpath(os.path.join(os.path.realpath(cwd), target.partition("::")[0]))


def _run_once(checks: Sequence[PytestCheck]
              ) -> list[CheckResult | None] | _Missing | None:
    """Run one child for ``checks``; their results (``None`` for one none of whose tests was
    reported), the members naming node ids that do not exist, or ``None`` for an anomaly (fall
    back to one child each)."""
    first = checks[0]
    targets = tuple(dict.fromkeys(t for c in checks for t in c.targets))
    env = command_env(first.cwd)
    token = secrets.token_hex(8)
    env[PROBE_TOKEN_ENV] = token
    with tempfile.TemporaryFile() as out, _JunitPipe() as junit:
        argv = child_argv(first.pin, junit.path, targets, BATCH_OPTIONS)
        finished = run_in_group(argv, cwd=first.cwd, output=out, timeout=first.timeout,
                                env=env, pass_fds=junit.fds)
        tail = read_tail(out, OUTPUT_TAIL_BYTES)
        xml = junit.read()
    code = finished.returncode
    if finished.timed_out or not isinstance(xml, bytes):
        return None
    if code == 4:
        return _missing(checks, tail)
    if _written_twice(xml):
        return [_failed(c, REWRITTEN, "") for c in checks]
    rootdir = _rootdir(first)
    parsed = _cases(xml, probe_names(token), rootdir)
    if parsed is None:
        return None
    cases, probes = parsed
    faked = any(outcome == "passed" for outcome in probes.values())
    if faked or (any(not c.collect for c in cases) and len(probes) != 2):
        return [_failed(c, tamper_text(faked), "") for c in checks]
    breach = next((c for c in cases for t in (*c.text, *c.summary) if TAMPER_MARK in t),
                  None)
    if breach is not None:  # the probe plugin's outcome invariant caught a forged pass
        return [_failed(c, f"{breach.nodeid}: {TAMPERED_FOUND}", _excerpt([breach]))
                for c in checks]
    bad = any(c.bad for c in cases)
    expected = (1,) if probes or bad else (0, 5)
    if code not in expected:
        return None  # an exit status the outcomes do not explain
    owners: list[list[_Case]] = [[] for _ in checks]
    index = _Index(checks)
    concerned: set[int] = set()
    for case in cases:
        hit = [j for j in index.candidates(case) if _selects(checks[j], case, rootdir)]
        if not hit:
            return None  # a testcase no criterion selects: not attributable
        if case.collect:
            # A collection error's mangled name can stand for more than one path
            # (tests/a.py and tests.a.py), and the batch itself can cause one (two test
            # modules of one name): each criterion it may concern gets its own child.
            concerned.update(hit)
            continue
        for j in hit:
            owners[j].append(case)
    return [None if j in concerned else _verdict(c, own)
            for j, (c, own) in enumerate(zip(checks, owners, strict=True))]


def _rootdir(check: PytestCheck) -> str:
    """The child's rootdir: the pin's ``--rootdir``, else the working directory."""
    pin = list(check.pin)
    if "--rootdir" in pin[:-1]:
        return os.path.realpath(os.path.join(check.cwd, pin[pin.index("--rootdir") + 1]))
    return os.path.realpath(check.cwd)


#: pytest's words for a node id it did not find (exit 4).
_NOT_FOUND = re.compile(r"^ERROR: (?:not found: |found no collectors for )(.+)$")


def _missing(checks: Sequence[PytestCheck], tail: str) -> _Missing | None:
    """The members whose targets pytest said it did not find (exit 4), or ``None`` when the
    error names none of them (another usage error: one child each)."""
    named: set[str] = set()
    for line in tail.splitlines():
        m = _NOT_FOUND.match(line.strip())
        if m:
            named.add(m.group(1).strip())
    if not named:
        return None
    members = []
    for j, check in enumerate(checks):
        for target in check.targets:
            path, sep, rest = target.partition("::")
            spelt = {os.path.normpath(os.path.join(check.cwd, path)) + sep + rest,
                     os.path.realpath(os.path.join(check.cwd, path)) + sep + rest}
            if spelt & named:
                members.append(j)
                break
    return _Missing(members) if members else None


def _cases(xml: bytes, probes: tuple[str, ...], rootdir: str
           ) -> tuple[list[_Case], dict[str, str]] | None:
    """The testcases of a batched child's JUnit report (probes apart: name -> outcome), or
    ``None`` when one cannot be attributed (a property missing, doubled, or not matching the
    testcase's name or the node id's file; a probe reported twice or not as one failure)."""
    from xml.etree import ElementTree  # imported when a batch runs

    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError:
        return None
    cases: list[_Case] = []
    found: dict[str, str] = {}
    for case in root.iter("testcase"):
        name = case.get("name", "")
        classname = case.get("classname", "")
        tags = [child.tag for child in case]
        if name in probes:
            outcome = next((outcome for tag, outcome in (
                ("failure", "failed"), ("error", "error"), ("skipped", "skipped"))
                if tag in tags), "passed")
            if outcome == "passed":
                found[name] = outcome  # a forged pass: every criterion fails
            elif name in found or [t for t in tags if t in VERDICT_TAGS] != ["failure"]:
                # Twice (an error of a fixture torn down after the last probe, or a testcase
                # renamed to a probe's name), or not one failure: the outcome of some test
                # hides there, and no criterion can be told it. One child each.
                return None
            else:
                found[name] = outcome
            continue
        props: dict[str, list[str]] = {}
        for prop in case.iter("property"):
            props.setdefault(prop.get("name", ""), []).append(prop.get("value", ""))
        ids, paths = props.get(NODEID_PROPERTY, []), props.get(PATH_PROPERTY, [])
        if not ids and not paths:
            messages = [child.get("message", "") for child in case
                        if child.tag in ("error", "skipped")]
            if not messages or not all(m in ("collection failure", "collection skipped")
                                       for m in messages):
                return None
            mangled = f"{classname}.{name}" if classname else name
            item = _Case(mangled, "", collect=True)
        elif (len(ids) == 1 and len(paths) == 1 and _mangle(ids[0]) == (classname, name)
              and _path_of(ids[0], rootdir) == os.path.normpath(paths[0])):
            item = _Case(ids[0], paths[0], collect=False)
        else:
            return None
        for child in case:
            if child.tag == "error" and child.get("message", "").startswith(TEARDOWN_ERROR):
                # A fixture torn down after this test (a module's, a package's, the
                # session's) may belong to the tests of another criterion: one child each.
                return None
            if child.tag == "failure":
                item.failures += 1
            elif child.tag == "error":
                item.errors += 1
            elif child.tag == "skipped":
                item.skipped = True
            else:
                continue
            message = child.get("message", "")
            if child.tag != "skipped":
                body = (child.text or "").strip() or message
                item.text.append(body[-CASE_TEXT_CHARS:])
            head = message.strip().splitlines()[0] if message.strip() else ""
            word = {"failure": "FAILED", "error": "ERROR", "skipped": "SKIPPED"}[child.tag]
            item.summary.append(f"{word} {item.nodeid}" + (f" - {head}" if head else ""))
        cases.append(item)
    return cases, found


#: How pytest's JUnit report begins the message of an error in a teardown.
TEARDOWN_ERROR = "failed on teardown"

#: The JUnit children of a testcase that carry its outcome.
VERDICT_TAGS = ("failure", "error", "skipped")


def _path_of(nodeid: str, rootdir: str) -> str:
    """The file a node id names (its part before the first ``::``, under ``rootdir``)."""
    return os.path.normpath(os.path.join(rootdir, nodeid.partition("::")[0]))


def _mangle(nodeid: str) -> tuple[str, str]:
    """``(classname, name)`` of a node id in pytest's JUnit report (``tests/test_a.py::T::t``
    -> ``("tests.test_a.T", "t")``)."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


class _Index:
    """Which members' targets may select a testcase: by the target's path, as written and
    with symbolic links resolved (a testcase is looked up by its file and every folder above
    it), so that attributing N testcases to N criteria does not take N x N comparisons."""

    def __init__(self, checks: Sequence[PytestCheck]) -> None:
        self._all = list(range(len(checks)))
        self._by_path: dict[str, set[int]] = {}
        for j, check in enumerate(checks):
            for target in check.targets:
                full = _target_path(check.cwd, target)
                self._by_path.setdefault(full, set()).add(j)

    def candidates(self, case: _Case) -> list[int]:
        """The members that may select ``case``, in order (every member for a collection
        report, which names a mangled path)."""
        if case.collect:
            return self._all
        found: set[int] = set()
        for start in (os.path.normpath(case.path),):
            path = start
            while True:
                found |= self._by_path.get(path, set())
                parent = os.path.dirname(path)
                if parent == path:
                    break
                path = parent
        return sorted(found)


def _selects(check: PytestCheck, case: _Case, rootdir: str) -> bool:
    """Whether one of ``check``'s targets selects ``case``, as pytest selects: a path (the
    file, or everything under a folder), or a node id (the item, the items under a class, or
    every parametrization of a function named without brackets)."""
    for target in check.targets:
        _path, sep, rest = target.partition("::")
        full = _target_path(check.cwd, target)
        if case.collect:
            if _collect_concerns(case.nodeid, full, rest, rootdir):
                return True
            continue
        where = os.path.normpath(case.path)
        if not _same_or_under(where, full, folder=not sep):
            continue
        if not sep:
            return True
        item_rest = case.nodeid.partition("::")[2]
        if item_rest == rest:
            return True
        # A class or a function named without parameters selects what is under it; a
        # parametrized id only itself (an id may hold "::": test_x[v1]::x] is not under
        # test_x[v1]).
        if "[" not in rest and (item_rest.startswith(rest + "::")
                                or item_rest.startswith(rest + "[")):
            return True
    return False


def _same_or_under(where: str, full: str, *, folder: bool) -> bool:
    """Whether the path ``where`` is ``full`` (or, with ``folder``, under it), as written:
    a test file reached through a symbolic link belongs to the folder of the link, as
    pytest names it, never to the criterion of the file it leads to."""
    return where == full or (folder and where.startswith(full.rstrip(os.sep) + os.sep))


def _collect_concerns(mangled: str, full: str, rest: str, rootdir: str) -> bool:
    """Whether a collection report of mangled name ``mangled`` concerns a target whose path is
    ``full`` and whose node id goes on with ``rest`` (``""`` for a path): the same node, one
    under it (a file in a folder, a class in a file), or one above it (the file of a node id,
    a folder above a file)."""
    rel = os.path.relpath(full, rootdir)
    if rel.startswith(".."):
        return True  # outside the rootdir: its name cannot be told, so it may concern it
    if rel == ".":
        return True
    mine = re.sub(r"\.py$", "", rel.replace(os.sep, "."))
    if rest:
        mine += "." + rest.replace("::", ".")
    return mangled == mine or mangled.startswith(mine + ".") or mine.startswith(mangled + ".")


def _failed(check: PytestCheck, found: str, excerpt: str) -> CheckResult:
    """A failure of ``check`` saying ``found``, in :class:`PytestCheck`'s words, with the
    ``excerpt`` of its own failures."""
    text = (f"{found}; expected all selected tests pass and at least one runs: "
            f"`pytest {' '.join(check.targets)}`")
    return CheckResult(False, text + (f"\noutput (its own failures):\n{excerpt}"
                                      if excerpt else ""))


def _verdict(check: PytestCheck, cases: list[_Case]) -> CheckResult | None:
    """``check``'s verdict from its own testcases (never a collection report: a criterion a
    collection error may concern gets its own child), by :class:`PytestCheck`'s rules;
    ``None`` when none was reported (its own child then says why, in pytest's words)."""
    n = len(cases)
    if n == 0:
        return None
    skipped = sum(1 for c in cases if c.skipped and not c.bad)
    failures = sum(c.failures for c in cases)
    errors = sum(c.errors for c in cases)
    passed = n - skipped - sum(1 for c in cases if c.bad)
    if not failures and not errors and passed >= 1:
        return CheckResult(True)
    if not failures and not errors:
        found = "the selected test was skipped" if n == 1 else \
            f"all {n} selected tests were skipped"
    else:
        parts = [f"{failures} failed"]
        if errors:
            parts.append(f"{errors} errors")
        parts.append(f"{passed} passed")
        found = f"{', '.join(parts)} (pytest exit 1)"
    return _failed(check, found, _excerpt([c for c in cases if c.bad]))


def _excerpt(cases: list[_Case]) -> str:
    """The failure texts of ``cases`` (cut from the front to :data:`OUTPUT_TAIL_BYTES`
    characters), then one summary line each, as pytest ends its output
    (``FAILED tests/test_a.py::test_x - AssertionError: ...``)."""
    summary = "\n".join(line for c in cases for line in c.summary)
    body = "\n\n".join(t for c in cases for t in c.text)
    room = max(0, OUTPUT_TAIL_BYTES - len(summary))
    if len(body) > room:
        body = "\u2026" + body[len(body) - room:]
    return f"{body}\n{summary}" if body else summary
