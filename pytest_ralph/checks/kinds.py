"""Check kinds: how one acceptance criterion is decided.

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

Every process a check starts keeps its Python bytecode in a private folder, never in the
project's ``__pycache__`` folders (:func:`pytest_ralph.checks.phase.private_bytecode`): the check
phase's folder in the loop's child, else one made for this process and removed at its exit.

This module does not import pytest; :class:`pytest_ralph.plugin.collect.CriterionItem` calls it.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Protocol

from ..prd.model import CRITERION_KINDS, Criterion, Story, fold_text
from ..prd.model import default_text as _default_text
from ..util.files import NotRegularFile, check_regular, kind_of, open_regular, read_text
from ..util.process import Finished, read_tail, run_in_group
from .phase import (
    CHILD_ENV,
    EMPTY_INI,
    PYCACHE_DIR_PREFIX,
    PYCACHE_PREFIX_ENV,
    private_bytecode,
    pytest_command,
)

#: The environment variable that hands :mod:`pytest_ralph.plugin.probe` (loaded into a ``pytest``
#: criterion's child) its token: 16 hexadecimal digits, new for each child.
PROBE_TOKEN_ENV = "PYTEST_RALPH_PROBE"

#: The failure text of a probe item.
PROBE_FAILURE = "pytest-ralph tamper probe: this test always fails"


def probe_names(token: str) -> tuple[str, str]:
    """The names of the two probe items of ``token`` (first, last): their JUnit ``name``
    and their node id."""
    return f"pytest_ralph_probe_{token}_first", f"pytest_ralph_probe_{token}_last"

#: Default seconds a ``run`` criterion may take before its process group is killed.
DEFAULT_CHECK_TIMEOUT = 600.0

#: Largest file a ``file`` + ``contains`` check reads, in bytes; a larger one fails.
CONTAINS_MAX_BYTES = 64 * 1024 * 1024

#: Largest schema or instance file (or file a ``$ref`` names) a ``schema`` check reads, in
#: bytes; a larger one fails.
SCHEMA_FILE_MAX_BYTES = 64 * 1024 * 1024

#: Bytes of a failing command's output kept in the failure message.
OUTPUT_TAIL_BYTES = 4000

CLAIMED_NOTE = "claimed, not verified"

#: ``kind`` of a result decided by the verifier (ini ``ralph_verifier``).
VERIFIER_KIND = "verifier"

#: Start of the message of a criterion the verifier judged passed (its evidence follows).
VERIFIER_PASSED = "the verifier judged this criterion passed: "

#: Start of the message of a criterion the verifier judged failed (its evidence follows).
VERIFIER_FAILED = "the verifier judged this criterion failed: "

#: Version of the JSON document a verifier reads on stdin (see :func:`verifier_input`).
VERIFIER_INPUT_VERSION = 1

#: The answer a verifier must print on stdout (for messages and documentation).
VERIFIER_ANSWER = '{"verdict": "pass" | "fail", "evidence": "<non-empty string>"}'

#: Largest verifier answer, in bytes of stdout, that is read; a longer one is a failure.
VERIFIER_ANSWER_MAX_BYTES = 1024 * 1024

#: Characters of a verifier's evidence kept in a result message.
EVIDENCE_MAX_CHARS = 4000

#: Seconds each ``git`` command describing the repository for the verifier may take.
GIT_TIMEOUT = 10.0

#: Bytes of ``git status`` / ``git diff --stat`` output kept in the verifier's input.
GIT_OUTPUT_BYTES = 64 * 1024


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one criterion.

    Attributes:
        passed: whether the criterion holds.
        message: for a failure, what was expected and what was found (multi-line);
            for a pass, a short note or ``""``.
        claimed: ``True`` when the verdict rests on the story's claim, not on a check.
        kind: the kind of check that decided when it is not the criterion's own kind
            (:data:`VERIFIER_KIND` for a text criterion judged by the verifier), else ``""``.
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


def _pycache_prefix() -> str:
    """The private bytecode folder for the processes checks start: in the loop's child, the
    check phase's (already in our environment); else a folder made on first use and removed
    when this process exits.

    Raises:
        OSError: the folder cannot be made.
    """
    inherited = os.environ.get(PYCACHE_PREFIX_ENV)
    if os.environ.get(CHILD_ENV) and inherited:
        return inherited
    if not _own_pycache:
        folder = tempfile.mkdtemp(prefix=PYCACHE_DIR_PREFIX)
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _own_pycache.append(folder)
    return _own_pycache[0]


def _command_env() -> dict[str, str]:
    """The environment of a checked command: ours, minus the loop-child marker (a pytest the
    command starts is an ordinary pytest), with Python bytecode kept in a private folder
    (:func:`_pycache_prefix`, :func:`pytest_ralph.checks.phase.private_bytecode`).

    Raises:
        OSError: the private bytecode folder cannot be made.
    """
    env = dict(os.environ)
    env.pop(CHILD_ENV, None)
    private_bytecode(env, _pycache_prefix())
    return env


#: The empty configuration file of this process, once made (see :func:`pin_args`).
_own_empty_ini: list[Path] = []


def pin_args(rootdir: Path, inifile: Path | None) -> tuple[str, ...]:
    """The options that pin a child pytest to the project, as its parent pytest saw it:
    ``--rootdir`` and ``--confcutdir`` (no ``conftest.py`` above the rootdir loads) set to
    ``rootdir``, and ``-c`` naming ``inifile`` or, when the parent had none, an empty one made
    for this process (removed at its exit): a configuration file planted above the project
    can then neither move the rootdir nor add options or plugins.

    Raises:
        OSError: the empty configuration file cannot be made.
    """
    if inifile is None:
        if not _own_empty_ini:
            folder = tempfile.mkdtemp(prefix="pytest-ralph-ini-")
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            path = Path(folder) / "pytest.ini"
            path.write_text(EMPTY_INI, encoding="utf-8")
            _own_empty_ini.append(path)
        inifile = _own_empty_ini[0]
    root = str(rootdir.absolute())
    return ("--rootdir", root, "-c", str(inifile), "--confcutdir", root)


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


def prd_criterion(criterion: Criterion) -> str | dict[str, Any]:
    """``criterion`` as its PRD wrote it: the string of a text criterion; for a check object,
    its fields, with ``id`` only when it is explicit and ``text`` only when it is not the
    default headline."""
    if criterion.kind == "text":
        return criterion.text
    out: dict[str, Any] = {}
    if criterion.id != f"AC{criterion.index}":
        out["id"] = criterion.id
    if criterion.text != _default_text(criterion.kind, criterion.spec):
        out["text"] = criterion.text
    out.update(criterion.spec)
    return out


def git_state(root: Path, *, timeout: float = GIT_TIMEOUT,
              max_bytes: int = GIT_OUTPUT_BYTES) -> dict[str, str | None]:
    """What git says about the repository at ``root``, for the verifier's input.

    Returns:
        ``{"head": ..., "status": ..., "diff_stat": ...}``: the commit id of ``HEAD``
        (``git rev-parse --verify HEAD``), the text of ``git status --porcelain`` (``""``
        for a clean tree) and of ``git diff --stat HEAD`` (``""`` for no change). Each is
        ``None`` when it cannot be known: git is not installed, ``root`` is not in a work
        tree, there is no commit yet (``head``, ``diff_stat``), the command fails or takes
        more than ``timeout`` seconds. ``status`` and ``diff_stat`` texts longer than
        ``max_bytes`` bytes are cut at a line end, with a last line saying so. Never raises.
    """
    head = _git(root, ("rev-parse", "--verify", "--quiet", "HEAD"), timeout, 1024)
    return {
        "head": (head.strip() or None) if head is not None else None,
        "status": _git(root, ("status", "--porcelain"), timeout, max_bytes),
        "diff_stat": _git(root, ("diff", "--stat", "HEAD"), timeout, max_bytes),
    }


def _git(root: Path, args: tuple[str, ...], timeout: float, max_bytes: int) -> str | None:
    """The stdout of ``git <args>`` run in ``root`` (bounded, see :func:`git_state`), or
    ``None`` when git cannot run, exits non-zero or times out."""
    env = _command_env()
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0")  # read only: never lock
    argv = ["git", "-c", "core.quotePath=false", "-c", "core.fsmonitor=false", *args]
    try:
        with tempfile.TemporaryFile() as out:
            done = subprocess.run(argv, cwd=root, stdin=subprocess.DEVNULL, stdout=out,
                                  stderr=subprocess.DEVNULL, env=env, timeout=timeout,
                                  check=False)
            out.seek(0)
            data = out.read(max_bytes + 1)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    if len(data) <= max_bytes:
        return data.decode("utf-8", errors="replace")
    text = data[:max_bytes].decode("utf-8", errors="ignore")
    text = text[:text.rfind("\n") + 1]
    return text + f"[... cut: more than {max_bytes} bytes]\n"


def verifier_input(criterion: Criterion, story: Story, *, prd: Path, rootdir: Path,
                   git: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """The JSON document (format version :data:`VERIFIER_INPUT_VERSION`) a verifier reads on
    stdin::

        {"version": 1,
         "criterion": {"id": "AC2", "text": "...", "index": 2},
         "story": {"id": "US-001", "title": "...", "description": "...",
                   "acceptanceCriteria": [...as in the PRD...], "priority": 1,
                   "passes": false, "notes": ""},
         "prd": "/abs/prd.json",
         "repository": {"root": "/abs/rootdir",
                        "git": {"head": "<sha>" | null, "status": "..." | null,
                                "diff_stat": "..." | null}}}

    ``index`` is the criterion's 1-based position in its story; ``acceptanceCriteria`` is
    empty when the story had none (its title then stands in as the criterion).

    Args:
        criterion: the text criterion to judge.
        story: its story.
        prd: the PRD file (made absolute).
        rootdir: the repository root the verifier runs in (made absolute).
        git: the ``git`` object; ``None`` gathers it now with :func:`git_state`.
    """
    root = rootdir.absolute()
    return {
        "version": VERIFIER_INPUT_VERSION,
        "criterion": {"id": criterion.id, "text": criterion.text, "index": criterion.index},
        "story": {
            "id": story.id, "title": story.title, "description": story.description,
            "acceptanceCriteria": [prd_criterion(c) for c in story.criteria
                                   if not c.synthesized],
            "priority": story.priority, "passes": story.passes, "notes": story.notes,
        },
        "prd": str(prd.absolute()),
        "repository": {"root": str(root),
                       "git": dict(git) if git is not None else git_state(root)},
    }


@dataclass(frozen=True)
class VerifierCheck:
    """A text criterion judged by the verifier command (ini ``ralph_verifier``).

    The command line is split like a shell would (:func:`shlex.split`) and run as argv, never
    through a shell, in ``rootdir``, in its own process group, killed with its whole group
    after ``timeout`` seconds. Its stdin is one UTF-8 JSON object, :func:`verifier_input`.
    Its stdout must be exactly one JSON object (whitespace around it allowed)::

        {"verdict": "pass" | "fail", "evidence": "<non-empty string>"}

    Other keys of the object are ignored. Anything else is a failure that says what was
    expected and shows the end of stdout and of stderr: a non-zero exit, a timeout, an
    executable that cannot be started, empty or non-UTF-8 output, text that is not one
    JSON object, another verdict, missing or empty evidence. The verdict's result has
    kind :data:`VERIFIER_KIND`, is never ``claimed``, and its message carries the evidence.

    Attributes:
        command: the verifier command line.
        source: where it was configured (``"ini ralph_verifier (tox.ini)"``), for messages.
        criterion: the criterion judged.
        story: its story.
        prd: the PRD file (absolute).
        rootdir: the working directory (absolute), also the input's ``repository.root``.
        timeout: seconds before the verifier's process group is killed.
    """

    command: str
    source: str
    criterion: Criterion
    story: Story
    prd: Path
    rootdir: Path
    timeout: float

    def run(self) -> CheckResult:
        """Run the verifier on this criterion and read its verdict."""
        shown = f"the verifier `{self.command}` (from {self.source})"
        try:
            argv = shlex.split(self.command, posix=os.name != "nt")
        except ValueError as exc:
            return self._result(False, f"cannot split {shown}: {exc}; expected a command "
                                       "line with balanced quotes")
        if not argv:
            return self._result(False, f"{shown} is empty; expected a command line")
        data = verifier_input(self.criterion, self.story, prd=self.prd, rootdir=self.rootdir)
        payload = json.dumps(data, ensure_ascii=False, default=str).encode("utf-8")
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                finished = run_in_group(argv, cwd=self.rootdir, output=out, errors=err,
                                        timeout=self.timeout, input=payload, env=_command_env())
            except OSError as exc:
                return self._result(False, _not_started(shown, argv[0], exc, self.rootdir))
            stdout_tail = read_tail(out, OUTPUT_TAIL_BYTES).strip()
            stderr_tail = read_tail(err, OUTPUT_TAIL_BYTES).rstrip()
            size = out.seek(0, os.SEEK_END)
            out.seek(0)
            answer = out.read(VERIFIER_ANSWER_MAX_BYTES) if size <= VERIFIER_ANSWER_MAX_BYTES \
                else b""
        if finished.timed_out:
            found = _timed_out(self.timeout)
        elif finished.returncode is not None and finished.returncode < 0:
            found = f"killed by signal {-finished.returncode}"
        elif finished.returncode != 0:
            found = f"exit status {finished.returncode}"
        elif size > VERIFIER_ANSWER_MAX_BYTES:
            found = f"{size} bytes on stdout (more than {VERIFIER_ANSWER_MAX_BYTES})"
        else:
            verdict = _parse_verdict(answer)
            if isinstance(verdict, tuple):
                passed, evidence = verdict
                prefix = VERIFIER_PASSED if passed else VERIFIER_FAILED
                return self._result(passed, prefix + _bounded(evidence))
            found = verdict
        text = (f"bad answer from {shown}: {found}; expected exit status 0 and exactly one JSON "
                f"object on stdout: {VERIFIER_ANSWER}")
        text += f"\nstdout (last lines):\n{stdout_tail}" if stdout_tail else "\nstdout: (none)"
        text += f"\nstderr (last lines):\n{stderr_tail}" if stderr_tail else "\nstderr: (none)"
        return self._result(False, text)

    @staticmethod
    def _result(passed: bool, message: str) -> CheckResult:
        return CheckResult(passed, message, kind=VERIFIER_KIND)


def _not_started(shown: str, exe: str, exc: OSError, rootdir: Path) -> str:
    """The failure text for a verifier that could not be started."""
    if isinstance(exc, FileNotFoundError):
        if os.sep in exe or (os.altsep and os.altsep in exe):
            return (f"cannot run {shown}: executable {exe!r} not found (relative paths start "
                    f"at the rootdir {rootdir}); expected an executable file there")
        return (f"cannot run {shown}: executable {exe!r} not found on PATH; expected an "
                "installed command (a script in the project needs its path, `./judge.py`, or "
                "its interpreter, `python judge.py`)")
    if isinstance(exc, PermissionError):
        return (f"cannot run {shown}: {exe!r} is not executable; make it executable "
                f"(chmod +x) or run it through its interpreter")
    return f"cannot run {shown}: {exc}; expected an executable"


class _NotStrictJSON(ValueError):
    """Raised while reading a verifier's answer: valid for Python's ``json``, not JSON."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` that refuses a key twice in one object.

    Raises:
        _NotStrictJSON: a duplicate key (the answer would be ambiguous).
    """
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _NotStrictJSON(f"stdout has the key {json.dumps(key)} twice in one object "
                                 "(an ambiguous answer)")
        out[key] = value
    return out


def _no_constant(name: str) -> NoReturn:
    """``parse_constant`` that refuses ``NaN``, ``Infinity`` and ``-Infinity``.

    Raises:
        _NotStrictJSON: always (they are not JSON).
    """
    raise _NotStrictJSON(f"stdout has {name}, which is not JSON")


def _parse_verdict(answer: bytes) -> tuple[bool, str] | str:
    """``(passed, evidence)`` from a verifier's stdout, or what is wrong with it.

    Strict JSON (RFC 8259): a key twice in one object, ``NaN`` and ``Infinity`` are wrong."""
    try:
        text = answer.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"stdout is not UTF-8 ({exc.reason} at byte {exc.start})"
    if not text.strip():
        return "nothing on stdout"
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except RecursionError:
        return "stdout is JSON nested too deeply to read"
    except _NotStrictJSON as exc:
        return str(exc)
    except ValueError as exc:
        extra = isinstance(exc, json.JSONDecodeError) and exc.msg == "Extra data"
        return f"stdout is {'text after the JSON value' if extra else 'not valid JSON'} ({exc})"
    if not isinstance(value, dict):
        return f"stdout is a JSON {type(value).__name__}, not an object"
    verdict = value.get("verdict")
    if verdict not in ("pass", "fail"):
        got = "no \"verdict\"" if "verdict" not in value else \
            f"\"verdict\" is {json.dumps(verdict)}"
        return f"{got} (it must be \"pass\" or \"fail\")"
    evidence = value.get("evidence")
    if not isinstance(evidence, str) or not evidence.strip():
        got = "no \"evidence\"" if "evidence" not in value else \
            f"\"evidence\" is {json.dumps(evidence)[:100]}"
        return f"{got} (it must be a non-empty string)"
    return verdict == "pass", evidence.strip()


def _bounded(text: str, limit: int = EVIDENCE_MAX_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f" [... {len(text) - limit} more characters cut]"


@dataclass(frozen=True)
class PytestCheck:
    """Tests that must pass: node ids or paths run by a child pytest.

    The child is started like ``python -m pytest`` in ``cwd``, by
    :func:`pytest_ralph.checks.phase.pytest_command` (a ``pytest.py`` or ``pytest/`` in ``cwd``
    cannot stand in for pytest), with bytecode in a private folder (``__pycache__`` folders
    are not read). Passes when pytest exits 0 and at least one test ran and passed; no test
    selected (exit 5), all tests skipped, a node id that does not exist, failures and errors
    are failures. The user's ``addopts`` cannot narrow the selection (``-k``/``-m``/``-x`` are
    reset).

    Attributes:
        targets: node ids or paths, relative to ``cwd``.
        cwd: absolute working directory (the rootdir).
        timeout: seconds before the run's process group is killed.
        pin: options that pin the child to the project (:func:`pin_args`), given before the
            targets.
    """

    targets: tuple[str, ...]
    cwd: Path
    timeout: float
    pin: tuple[str, ...] = ()

    def run(self) -> CheckResult:
        """Run the tests and read their JUnit XML."""
        shown = " ".join(self.targets)
        expected = "all selected tests pass and at least one runs"
        env = _command_env()
        token = secrets.token_hex(8)
        env[PROBE_TOKEN_ENV] = token
        with tempfile.TemporaryFile() as out, _JunitPipe() as junit:
            argv = [*pytest_command(sys.executable), "-q", "-p", "no:cacheprovider",
                    "-p", "pytest_ralph.plugin.probe", *self.pin, f"--junitxml={junit.path}", "-k",
                    "", "-m", "", "--maxfail=0", "--", *self.targets]
            finished = run_in_group(argv, cwd=self.cwd, output=out, timeout=self.timeout,
                                    env=env, pass_fds=junit.fds)
            tail = _without_probes(read_tail(out, OUTPUT_TAIL_BYTES), token).rstrip()
            xml = junit.read()
        rewritten = isinstance(xml, bytes) and _written_twice(xml)
        counts, probes = _junit_counts(xml, probe_names(token))
        code = finished.returncode
        ran = counts["tests"] - counts["skipped"]
        passed = ran - counts["failures"] - counts["errors"]
        if probes and code == 1 and not counts["failures"] + counts["errors"]:
            code = 0  # the probes' own failures, and only theirs
        # A probe that errored (a fixture of its module) or was skipped (a skip mark on the
        # module) did not pass: only a probe that passed is a faked verdict.
        faked = sorted(name for name, outcome in probes.items() if outcome == "passed")
        if finished.timed_out:
            found = _timed_out(self.timeout)
        elif rewritten:
            found = ("the JUnit report pytest writes to its parent was written more than once: "
                     "code loaded by the tests rewrote pytest's verdicts (the code under test "
                     "runs in the process that checks it)")
        elif faked or (counts["tests"] and len(probes) != 2 and code in (0, 1)):
            found = ("the tamper probe, a test that always fails, "
                     f"{'passed' if faked else 'was not reported'}: code loaded by the tests "
                     "changed how pytest reports outcomes (the code under test runs in the "
                     "process that checks it)")
        elif code == 0 and passed >= 1:
            return CheckResult(True)
        elif code in (2, 3, 4):
            what = {2: "interrupted or collection errors", 3: "internal error",
                    4: "usage error, e.g. a node id that does not exist"}[code]
            told = _pytest_error_line(tail)  # pytest's own words, when it printed some
            found = f"pytest exit {code} ({what.split(',')[0]}: {told})" if told else \
                f"pytest exit {code} ({what})"
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


def _pytest_error_line(output: str) -> str:
    """The first line of a child pytest's ``output`` that starts with ``ERROR`` (a usage
    error such as ``ERROR: file or directory not found: tests``, or a collection error's
    summary line ``ERROR tests/test_a.py``, then completed with the first ``E   `` line of
    the traceback: ``tests/test_a.py - ModuleNotFoundError: ...``), without the prefix and
    cut to 200 characters; ``""`` when there is none."""
    lines = output.splitlines()
    for line in lines:
        if line.startswith("ERROR"):
            told = line[len("ERROR"):].lstrip(": ").strip()
            why = next((ln[1:].strip() for ln in lines if ln.startswith("E  ")), "")
            if why and " - " not in told:  # -q's summary line names only the file
                told = f"{told} - {why}"
            return told if len(told) <= 200 else told[:199] + "\u2026"
    return ""


#: Bytes of a child pytest's JUnit report read (a larger one reads as unreadable).
JUNIT_MAX_BYTES = 256 * 1024 * 1024


class _JunitPipe:
    """Where a ``pytest`` check's child writes its JUnit report: on POSIX the write end of a
    pipe the child inherits (``--junitxml=/dev/fd/N``), read by a thread of the parent, so
    that what the child wrote cannot be rewritten afterwards (code under test that rewrote the
    report at exit only adds a second document, which :func:`_written_twice` sees); elsewhere
    a file in a temporary folder. A context manager; :meth:`read` after the child ended."""

    def __enter__(self) -> _JunitPipe:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._data = bytearray()
        if os.name != "posix":  # pragma: no cover - Windows
            self._tmp = tempfile.TemporaryDirectory()
            self.path = str(Path(self._tmp.name) / "junit.xml")
            self.fds: tuple[int, ...] = ()
            return self
        self._read_end, write_end = os.pipe()
        self.fds = (write_end,)
        self.path = f"/dev/fd/{write_end}"
        self._thread = threading.Thread(target=self._drain, daemon=True,
                                        name="pytest-ralph-junit")
        self._thread.start()
        return self

    def _drain(self) -> None:
        with contextlib.suppress(OSError):
            while chunk := os.read(self._read_end, 1 << 16):
                if len(self._data) <= JUNIT_MAX_BYTES:
                    self._data += chunk

    def read(self) -> bytes | Path:
        """The report's bytes (the pipe: everything written to it, once every writer closed
        it or 5 seconds after the parent did), or the file's path (not POSIX)."""
        if self._tmp is not None:  # pragma: no cover - Windows
            return Path(self.path)
        os.close(self.fds[0])
        self.fds = ()
        self._thread.join(5.0)
        return bytes(self._data)

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:  # pragma: no cover - Windows
            self._tmp.cleanup()
            return
        for fd in (*self.fds, self._read_end):
            with contextlib.suppress(OSError):
                os.close(fd)


def _written_twice(data: bytes) -> bool:
    """Whether ``data`` holds more than one XML document (a report written again)."""
    from xml.etree import ElementTree

    try:
        ElementTree.fromstring(data)
    except ElementTree.ParseError as exc:
        return "junk after document element" in str(exc)
    return False


def _junit_counts(xml: Path | bytes, probes: tuple[str, ...] = ()
                  ) -> tuple[dict[str, int], dict[str, str]]:
    """Totals of tests, failures, errors and skipped over every ``testsuite`` of a JUnit
    report (a file, or its bytes; all zero when it is missing or unreadable), the
    ``testcase`` elements named in ``probes`` (:mod:`pytest_ralph.plugin.probe`) left out; and the
    outcome of each of those found (``passed``, ``failed``, ``error`` or ``skipped``), by
    name."""
    from xml.etree import ElementTree  # imported when a pytest check runs

    counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    found: dict[str, str] = {}
    try:
        root = (ElementTree.fromstring(xml) if isinstance(xml, bytes)
                else ElementTree.parse(xml).getroot())
    except (OSError, ElementTree.ParseError):
        return counts, found
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    for suite in suites:
        for key in counts:
            with contextlib.suppress(ValueError):
                counts[key] += int(suite.get(key, "0"))
        for case in suite.iter("testcase"):
            name = case.get("name", "")
            if name not in probes:
                continue
            tags = {child.tag for child in case}
            found[name] = next((outcome for tag, outcome in (
                ("failure", "failed"), ("error", "error"), ("skipped", "skipped"))
                if tag in tags), "passed")
    column = {"failed": "failures", "error": "errors", "skipped": "skipped"}
    for outcome in found.values():
        counts["tests"] -= 1
        if outcome in column:
            counts[column[outcome]] -= 1
    return counts, found


def _without_probes(output: str, token: str) -> str:
    """``output`` without the lines that name the probe items of ``token``."""
    return "\n".join(line for line in output.splitlines() if token not in line
                     and PROBE_FAILURE not in line)


@dataclass(frozen=True)
class PathCheck:
    """A path that must exist, or a file whose text must match a regular expression.

    Attributes:
        path: absolute path, as text (a gate of thousands of ``exists`` criteria spends its
            time here: ``os.path`` is several times quicker than :mod:`pathlib`).
        shown: the path as the PRD wrote it (for messages).
        file: require a regular file (a ``file`` criterion), not just any path.
        contains: a regular expression (Python syntax, ``re.MULTILINE``) the file's text
            must match, or ``None``.
    """

    path: str
    shown: str
    file: bool = False
    contains: str | None = None

    def run(self) -> CheckResult:
        """Look at the path now. The file of a ``contains`` check is read only when it is a
        regular file of at most :data:`CONTAINS_MAX_BYTES` bytes (never a FIFO, which would
        block, or a device such as ``/dev/zero``, which never ends)."""
        what = "a file" if self.file else "a file or folder"
        if not os.path.exists(self.path):
            return CheckResult(False, f"nothing at `{self.shown}`; expected {what} there")
        if self.file and not os.path.isfile(self.path):
            try:
                kind = kind_of(os.stat(self.path).st_mode)
            except OSError:  # gone meanwhile
                kind = "not there any more"
            return CheckResult(False, f"`{self.shown}` is {kind}; expected a regular file")
        if self.contains is None:
            return CheckResult(True)
        try:
            text = read_text(self.path, CONTAINS_MAX_BYTES, errors="replace")
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
        import sqlite3  # imported when a sql check runs
        import urllib.request

        where = f"`{self.sql}` on `{self.shown}`"
        try:
            check_regular(self.db)  # SQLite would block on a FIFO
        except NotRegularFile as exc:
            return CheckResult(False, f"`{self.shown}` is {exc.kind}; expected a SQLite file "
                                      f"for {where}")
        except (OSError, ValueError):
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
        """Load both files and validate; every error is listed with its JSON path.

        A ``$ref`` to another file (``"$ref": "defs.json#/port"``) is read from the schema's
        folder; nothing is fetched over the network: a remote ``$ref`` (``http:``,
        ``https:``, ...) or one that cannot be read fails the criterion, naming it.
        """
        import jsonschema  # imported when a schema check runs
        import referencing.exceptions

        schema_shown, instance_shown = self.shown
        loaded = []
        for path, shown in ((self.schema, schema_shown), (self.instance, instance_shown)):
            try:
                loaded.append(_load_json_or_yaml(path))
            except (OSError, ValueError) as exc:
                return CheckResult(False, f"cannot load `{shown}`: {_reason(exc)}; expected a "
                                          "JSON or YAML file")
        schema, instance = loaded
        try:
            validator_cls = jsonschema.validators.validator_for(schema)
            validator_cls.check_schema(schema)
            registry = _local_registry(self.schema.parent, validator_cls)
            errors = sorted(validator_cls(schema, registry=registry).iter_errors(instance),
                            key=lambda e: list(map(str, e.absolute_path)))
        except RecursionError:
            return CheckResult(False, f"`{instance_shown}` or `{schema_shown}` is nested too "
                                      "deeply to validate; expected JSON or YAML data of "
                                      "reasonable depth")
        except jsonschema.SchemaError as exc:
            return CheckResult(False, f"`{schema_shown}` is not a valid JSON Schema: "
                                      f"{exc.message}")
        except referencing.exceptions.Unresolvable as exc:
            why: BaseException = exc
            while why.__cause__ is not None:  # down to the retriever's own words
                why = why.__cause__
            return CheckResult(False, f"`{schema_shown}`: cannot resolve the $ref "
                                      f"{getattr(exc, 'ref', '')!r}: {why}; expected a "
                                      "reference inside the schema or to a JSON or YAML file "
                                      "next to it (remote references are not fetched)")
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



def _load_json_or_yaml(path: Path) -> Any:
    """The data of a JSON file, or of a YAML one (``.yaml``/``.yml``, read with
    ``yaml.safe_load``), read only when it is a regular file of at most
    :data:`SCHEMA_FILE_MAX_BYTES` bytes.

    Raises:
        OSError: the file cannot be read, is not a regular file (a FIFO, a device, a
            folder: :class:`~pytest_ralph.util.files.NotRegularFile`) or is over the limit.
        ValueError: it is not UTF-8, JSON or YAML (a ``yaml.YAMLError`` is re-raised as one),
            or it is nested too deeply to read.
    """
    import yaml

    text = read_text(path, SCHEMA_FILE_MAX_BYTES)
    try:
        if path.suffix.lower() not in (".yaml", ".yml"):
            return json.loads(text)
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(str(exc)) from None
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def _reason(exc: BaseException) -> str:
    """What an error says, without ``[Errno N]`` and the repeated path of an
    :class:`OSError`."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _local_registry(folder: Path, validator_cls: Any) -> Any:
    """A :class:`referencing.Registry` that reads a ``$ref`` to another schema from a file
    (a relative reference from ``folder``, or a ``file:`` URI) and fetches nothing remote.
    Its resources default to the dialect of ``validator_cls``."""
    from urllib.parse import unquote, urlsplit

    import referencing
    import referencing.exceptions

    def retrieve(uri: str) -> referencing.Resource[Any]:
        parts = urlsplit(uri)
        if parts.scheme not in ("", "file") or parts.netloc not in ("", "localhost"):
            raise ValueError(f"{uri} is not a local file")
        path = folder / unquote(parts.path)
        try:
            contents = _load_json_or_yaml(path)
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot load {path}: {_reason(exc)}") from None
        return referencing.Resource.from_contents(
            contents, default_specification=referencing.jsonschema.specification_with(
                validator_cls.META_SCHEMA.get("$schema", ""),
                default=referencing.jsonschema.DRAFT202012))

    return referencing.Registry(retrieve=retrieve)  # type: ignore[call-arg]

#: Characters of an exception's text (and of its traceback) a ``python`` check reports.
PYTHON_TEXT_MAX_CHARS = 4000

#: Bytes of a ``python`` check's verdict file that are read.
VERDICT_MAX_BYTES = 256 * 1024

# The process of a `python` check: `python -c _PYTHON_RUNNER`, in the rootdir, with on stdin
# the NUL-separated UTF-8 fields target, rootdir, verdict file, nonce, text limit, then our
# sys.path entries. It reads stdin before any checked code runs (stdin then reads /dev/null),
# so the verdict file's path and the nonce are in no environment variable, argument or open
# file. It imports no more than it must (each import costs start-up time). Each record it appends
# to the verdict file is one line, the repr() of a tuple that starts with the nonce:
# ("called",) before the call, then one of ("import", type, text),
# ("not-callable", type), ("raised", type, text, traceback), ("returned", is_false); then it
# ends at once with os._exit(0) (no atexit handlers of the checked code). Names it uses after
# the checked code is imported are bound first, so replacing os.write, repr, getattr... does
# not reach it. The working directory is off sys.path until the runner's own imports are done.
_PYTHON_RUNNER = r'''
import os, sys


def _run():
    fs_open, fs_write, fs_close, fs_dup2, hard_exit = os.open, os.write, os.close, os.dup2, os._exit
    as_repr, as_str, as_type, is_callable, get_attr = repr, str, type, callable, getattr
    join, realpath = "".join, os.path.realpath
    here = realpath(os.getcwd())
    sys.path[:] = [p for p in sys.path if realpath(p or os.curdir) != here]
    import importlib
    import_module = importlib.import_module
    spec = sys.stdin.buffer.read().decode("utf-8", "surrogateescape").split("\0")
    null = fs_open(os.devnull, os.O_RDONLY)
    fs_dup2(null, 0)
    fs_close(null)
    target, rootdir, where, nonce, limit = spec[0], spec[1], spec[2], spec[3], int(spec[4])
    first = [rootdir] + [p for p in spec[5:] if p != rootdir]
    sys.path[:] = first + [p for p in sys.path if p not in first]
    sys.argv[:] = ["-c"]
    append = os.O_WRONLY | os.O_APPEND
    del spec

    def plain(value):
        try:
            return join((value,))
        except BaseException:
            return "?"

    def text(exc):
        try:
            return plain(as_str(exc))[:limit]
        except BaseException:
            return "<str() of the exception failed>"

    def say(*fields):
        line = as_repr((nonce,) + fields) + "\n"
        fd = fs_open(where, append)
        try:
            fs_write(fd, line.encode("utf-8", "backslashreplace"))
        finally:
            fs_close(fd)

    def done():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        hard_exit(0)

    module_name, _, attr = target.partition(":")
    try:
        obj = import_module(module_name)
        for part in attr.split("."):
            obj = get_attr(obj, part)
    except SystemExit:
        raise
    except BaseException as exc:
        say("import", plain(as_type(exc).__name__), text(exc))
        done()
    if not is_callable(obj):
        say("not-callable", plain(as_type(obj).__name__))
        done()
    say("called")
    try:
        value = obj()
    except SystemExit:
        raise
    except BaseException as exc:
        try:
            import traceback
            tb = exc.__traceback__  # its first frame is this runner's call: leave it out
            lines = traceback.format_exception(as_type(exc), exc,
                                               tb.tb_next if tb is not None else None)
            trace = plain(join(lines[-3:]))
        except BaseException:
            trace = ""
        say("raised", plain(as_type(exc).__name__), text(exc), trace[-limit:])
    else:
        say("returned", value is False)
    done()


_run()
'''

#: Fields after the kind of each record of a verdict file, by kind (see :class:`PythonCheck`).
_RECORD_FIELDS: dict[str, tuple[type, ...]] = {
    "called": (), "import": (str, str), "not-callable": (str,), "raised": (str, str, str),
    "returned": (bool,)}


def _verdict_records(path: Path, nonce: str) -> list[tuple[Any, ...]]:
    """The records of a ``python`` check's verdict file (kind first, nonce dropped), in file
    order. Only lines that are a Python tuple literal starting with ``nonce`` and shaped as
    :data:`_RECORD_FIELDS` says count; anything else in the file is ignored. The first
    :data:`VERDICT_MAX_BYTES` bytes are read; a missing file has no records."""
    try:  # the checked code may have put a FIFO there: never block on it
        with os.fdopen(open_regular(path), "rb") as f:
            data = f.read(VERDICT_MAX_BYTES)
    except OSError:
        return []
    records = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            value = ast.literal_eval(line)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        if not (isinstance(value, tuple) and len(value) >= 2 and value[0] == nonce
                and isinstance(value[1], str)):
            continue
        shape = _RECORD_FIELDS.get(value[1])
        fields = value[2:]
        if shape is not None and len(fields) == len(shape) and all(
                type(v) is t for v, t in zip(fields, shape, strict=True)):
            records.append(value[1:])
    return records


@dataclass(frozen=True)
class PythonCheck:
    """``module:function`` called with no arguments in a Python process of its own; passes
    unless it raises or returns False.

    The process is ``sys.executable``, run in ``rootdir``, in its own process group (killed
    with the group after ``timeout`` seconds), with the environment of a checked command
    (bytecode in a private folder). Its ``sys.path`` is ``rootdir``, then this process's
    ``sys.path`` (so ini ``pythonpath`` entries and test folders that pytest added still
    import), then its own. The process reads the path of a verdict file and a random nonce
    from its stdin before it imports the checked code, and reports the outcome there; only
    records that carry the nonce count. So the checked code cannot report a pass by printing
    or by exiting, and it cannot reach other criteria or pytest-ralph's results file: it runs
    in a process that ends with its check. Code that digs the nonce out of the runner's own
    frames can still forge the verdict of its own criterion, and only that one.

    Failures: the import fails, the attribute is not callable, the call raises (any
    exception but ``SystemExit``) or returns ``False``, the process ends before a verdict
    (``os._exit``, ``sys.exit``, a crash or a signal), or the timeout expires. The end of the
    process's output follows the failure text.

    Attributes:
        target: ``module:function`` (``function`` may be dotted: ``Class.method``).
        rootdir: the working directory, put first on ``sys.path`` so that project modules
            import (absolute).
        timeout: seconds before the process group is killed.
    """

    target: str
    rootdir: Path
    timeout: float = DEFAULT_CHECK_TIMEOUT

    def run(self) -> CheckResult:
        """Start the process, wait for it, and read its verdict."""
        nonce = secrets.token_hex(16)
        search = [os.path.abspath(p) for p in sys.path if isinstance(p, str) and "\0" not in p]
        with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryFile() as out:
            verdict = Path(tmp) / "verdict"
            verdict.touch(mode=0o600)
            spec = "\0".join([self.target, str(self.rootdir), str(verdict), nonce,
                              str(PYTHON_TEXT_MAX_CHARS), *search])
            try:
                finished = run_in_group([sys.executable, "-c", _PYTHON_RUNNER], cwd=self.rootdir,
                                        output=out, timeout=self.timeout,
                                        input=spec.encode("utf-8", "surrogateescape"),
                                        env=_command_env())
            except OSError as exc:
                return CheckResult(False, f"cannot start a Python process ({sys.executable}) in "
                                          f"{self.rootdir} for `{self.target}()`: {exc}; "
                                          "expected to run it")
            tail = read_tail(out, OUTPUT_TAIL_BYTES).rstrip()
            records = _verdict_records(verdict, nonce)
        text = self._failure(finished, records)
        if text is None:
            return CheckResult(True)
        text += f"\noutput (last lines):\n{tail}" if tail else ""
        return CheckResult(False, text)

    def _failure(self, finished: Finished, records: list[tuple[Any, ...]]) -> str | None:
        """The failure text for how the process ended and what it reported, or ``None`` for
        a pass."""
        t = self.target
        final = [r for r in records if r[0] != "called"]
        if final:
            kind, *fields = final[-1]
            if kind == "import":
                return f"cannot import `{t}`: {fields[0]}: {fields[1]}; expected a function to call"
            if kind == "not-callable":
                article = "an" if fields[0][:1].lower() in "aeiou" else "a"
                return f"`{t}` is {article} {fields[0]}; expected a function"
            if kind == "raised":
                return (f"`{t}()` raised {fields[0]}: {fields[1]}; expected it to return without "
                        f"raising\n{fields[2].rstrip()}")
            if fields[0]:
                return f"`{t}()` returned False; expected anything else"
            return None
        called = ("called",) in records
        if finished.timed_out:
            if called:
                return (f"`{t}()` did not return within the timeout of {self.timeout:g} s "
                        "(process group killed); expected it to return")
            return (f"cannot import `{t}`: the import did not finish within the timeout of "
                    f"{self.timeout:g} s (process group killed); expected a function to call")
        code = finished.returncode if finished.returncode is not None else -1
        how = f"killed by signal {-code}" if code < 0 else f"exit {code}"
        if called:
            return f"`{t}()` ended the process ({how}) before returning; expected it to return"
        return (f"cannot import `{t}`: the process ended ({how}) before the import finished; "
                "expected a function to call")


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
            (:func:`pin_args`).

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
