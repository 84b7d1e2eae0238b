"""The ``pytest`` check kind: node ids or paths run by a child pytest (:class:`PytestCheck`).

The child writes its JUnit report into a pipe the parent reads (:class:`_JunitPipe`, on POSIX),
and runs the tamper probe (:mod:`pytest_ralph.plugin.probe`): two items that always fail, whose
names (:func:`probe_names`) and failure text (:data:`PROBE_FAILURE`) the probe plugin shares
with this module; a probe that passed means the code under test changed how pytest reports.
:func:`pin_args` pins a child pytest to the project as its parent saw it.

This module does not import pytest (the child does).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from ..util.env import PROBE_TOKEN_ENV
from ..util.process import read_tail, run_in_group
from .base import OUTPUT_TAIL_BYTES, CheckResult, command_env, timed_out
from .phase import EMPTY_INI, pytest_command

#: The JUnit user property holding each collected item's node id (set by the probe plugin).
NODEID_PROPERTY = "pytest_ralph_nodeid"

#: The JUnit user property holding each collected item's file path (set by the probe plugin).
PATH_PROPERTY = "pytest_ralph_path"

#: The failure text of a probe item.
PROBE_FAILURE = "pytest-ralph tamper probe: this test always fails"


def probe_names(token: str) -> tuple[str, str]:
    """The names of the two probe items of ``token`` (first, last): their JUnit ``name``
    and their node id."""
    return f"pytest_ralph_probe_{token}_first", f"pytest_ralph_probe_{token}_last"


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
        env = command_env(self.cwd)
        token = secrets.token_hex(8)
        env[PROBE_TOKEN_ENV] = token
        with tempfile.TemporaryFile() as out, _JunitPipe() as junit:
            argv = child_argv(self.pin, junit.path, self.targets)
            finished = run_in_group(argv, cwd=self.cwd, output=out, timeout=self.timeout,
                                    env=env, pass_fds=junit.fds)
            tail = _without_probes(read_tail(out, OUTPUT_TAIL_BYTES), token).rstrip()
            xml = junit.read()
        rewritten = isinstance(xml, bytes) and _written_twice(xml)
        counts, probes = _junit_counts(xml, probe_names(token))
        code = finished.returncode
        ran = counts["tests"] - counts["skipped"]
        passed = ran - counts["failures"] - counts["errors"]
        # pytest exits 1 when a probe fails: 0 with a failed probe reported means the exit
        # status was forced (os._exit(0) at exit, session.exitstatus set by a conftest.py).
        forced = code == 0 and not finished.timed_out and any(
            outcome in ("failed", "error") for outcome in probes.values())
        if probes and code == 1 and not counts["failures"] + counts["errors"]:
            code = 0  # the probes' own failures, and only theirs
        # A probe that errored (a fixture of its module) or was skipped (a skip mark on the
        # module) did not pass: only a probe that passed is a faked verdict.
        faked = sorted(name for name, outcome in probes.items() if outcome == "passed")
        if finished.timed_out:
            found = timed_out(self.timeout)
        elif rewritten:
            found = REWRITTEN
        elif faked or (counts["tests"] and len(probes) != 2 and code in (0, 1)):
            found = tamper_text(bool(faked))
        elif forced:
            found = EXIT_FORCED
        elif code == 0 and passed >= 1 and not counts["failures"] + counts["errors"]:
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


#: The failure text of a check whose JUnit report was written more than once.
REWRITTEN = ("the JUnit report pytest writes to its parent was written more than once: "
             "code loaded by the tests rewrote pytest's verdicts (the code under test "
             "runs in the process that checks it)")


#: The failure text of a child that exited 0 though its tamper probes failed.
EXIT_FORCED = ("pytest exited 0 though its tamper probes failed: code loaded by the tests "
               "changed pytest's exit status")


def tamper_text(passed: bool) -> str:
    """The failure text of a check whose tamper probe ``passed`` (else: was not reported)."""
    return ("the tamper probe, a test that always fails, "
            f"{'passed' if passed else 'was not reported'}: code loaded by the tests "
            "changed how pytest reports outcomes (the code under test runs in the "
            "process that checks it)")


def child_argv(pin: tuple[str, ...], junit_path: str, targets: tuple[str, ...],
               extra: tuple[str, ...] = ()) -> list[str]:
    """The argv of a ``pytest`` check's child: ``-q``, no cache, the tamper probe plugin,
    ``pin`` (:func:`pin_args`), the JUnit report to ``junit_path``, ``-k``/``-m``/``-x``
    reset, ``extra`` options, then ``--`` and the ``targets``."""
    return [*pytest_command(sys.executable), "-q", "-p", "no:cacheprovider",
            "-p", "pytest_ralph.plugin.probe", *pin, f"--junitxml={junit_path}", "-k",
            "", "-m", "", "--maxfail=0", *extra, "--", *targets]


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
