"""The verifier: a text criterion judged by a command of the user's (ini ``ralph_verifier``).

:class:`VerifierCheck` runs the command with one JSON document on its stdin
(:func:`verifier_input`, which carries :func:`git_state`: what git says about the repository)
and reads its verdict, one JSON object, from its stdout (:data:`VERIFIER_ANSWER`). The
verdict's result has kind :data:`VERIFIER_KIND`.

This module does not import pytest.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from ..prd.model import Criterion, Story, default_text
from ..util.process import read_tail, run_in_group
from .base import OUTPUT_TAIL_BYTES, CheckResult, command_env, timed_out

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


def prd_criterion(criterion: Criterion) -> str | dict[str, Any]:
    """``criterion`` as its PRD wrote it: the string of a text criterion; for a check object,
    its fields, with ``id`` only when it is explicit and ``text`` only when it is not the
    default headline."""
    if criterion.kind == "text":
        return criterion.text
    out: dict[str, Any] = {}
    if criterion.id != f"AC{criterion.index}":
        out["id"] = criterion.id
    if criterion.text != default_text(criterion.kind, criterion.spec):
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
    env = command_env(root)
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
                                        timeout=self.timeout, input=payload,
                                        env=command_env(self.rootdir))
            except OSError as exc:
                return self._result(False, _not_started(shown, argv[0], exc, self.rootdir))
            stdout_tail = read_tail(out, OUTPUT_TAIL_BYTES).strip()
            stderr_tail = read_tail(err, OUTPUT_TAIL_BYTES).rstrip()
            size = out.seek(0, os.SEEK_END)
            out.seek(0)
            answer = out.read(VERIFIER_ANSWER_MAX_BYTES) if size <= VERIFIER_ANSWER_MAX_BYTES \
                else b""
        if finished.timed_out:
            found = timed_out(self.timeout)
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
