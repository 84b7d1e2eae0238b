"""Per-story escalation: when a story is blocked, and the state dump a human (or a stronger
agent) gets.

A story is **blocked** when, counting only the iterations in which it was the story worked
on and the agent ran properly:

- it reached ini ``ralph_story_max_iterations`` such iterations, or
- its own criteria failed with the same fingerprint in ``breaker`` of them in a row (an
  iteration that changed the criteria counts as "the same": an edited oracle is never
  progress).

A blocked story whose criteria all pass after a later iteration (another story's work fixed
it) is no longer blocked: if it fails again, it is worked on again (a story past
``ralph_story_max_iterations`` gets one more iteration before it is blocked again).

The loop then works on the next story; it ends with exit 6 only when every story with
failing criteria is blocked. :func:`story_states` recomputes all of this from the list of
iterations, so a resumed run blocks exactly what the interrupted one had blocked.

The optional escalation command (ini ``ralph_escalate``) runs through the shell when a story
is blocked or the breaker trips, with :func:`state_dump` as JSON on stdin (UTF-8, one
object, ``"version": 1``); its output goes to a log file in the run folder; a failure of the
command is reported, never fatal.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..checks.fingerprint import failure_fingerprints, fingerprint, same_failures
from ..util.env import EVENT_ENV
from ..util.process import run_in_group
from ..util.redact import Redactor, redact_file
from ..util.text import plural
from .report import story_report

if TYPE_CHECKING:
    from .records import RunRecord

#: Seconds the escalation command may run before its process group is killed.
ESCALATE_TIMEOUT = 300.0

#: Seconds the escalation command gets at least, even when ``--ralph-budget`` is spent.
ESCALATE_MIN_SECONDS = 10.0


@dataclass(frozen=True)
class Step:
    """What :func:`story_states` needs of one iteration.

    Attributes:
        n: the iteration number (>= 1).
        story: the story the prompt asked for, or ``""``.
        ran: whether the agent ran properly (ok or timeout).
        failures: (criterion key, failure text) of every failing criterion after it.
        tampered: the agent changed the criteria (and that was not allowed).
        outcome: the agent's outcome class.
    """

    n: int
    story: str
    ran: bool
    failures: tuple[tuple[str, str], ...]
    tampered: bool = False
    outcome: str = "ok"


@dataclass
class StoryState:
    """How the work on one story went.

    Attributes:
        story: the story id.
        worked: iterations with the agent running properly on this story, in order.
        streak: how many of the last of those ended with the same fingerprint of the
            story's failing criteria.
        fingerprint: that fingerprint (``""`` when none of them failed).
        blocked: why the story is blocked, or ``""``.
        blocked_at: the iteration after which it was blocked, or 0.
    """

    story: str
    worked: list[int] = field(default_factory=list)
    streak: int = 0
    fingerprint: str | None = None
    blocked: str = ""
    blocked_at: int = 0


def story_states(steps: Iterable[Step], *, breaker: int, max_iterations: int | None,
                 normalize: bool = True) -> dict[str, StoryState]:
    """Replay ``steps`` (oldest first) and return each worked-on story's state.

    Args:
        steps: the iterations of the run (the baseline left out).
        normalize: normalize the failure texts before fingerprinting them; false when they
            already are fingerprint texts (see :func:`pytest_ralph.checks.fingerprint.fingerprint`).
        breaker: same-fingerprint iterations in a row that block a story.
        max_iterations: iterations on one story that block it, or ``None`` for no limit.
    """
    states: dict[str, StoryState] = {}
    for step in steps:
        failing_stories = {k.split("::", 1)[0] for k, _ in step.failures}
        for st in states.values():  # a blocked story whose criteria pass again is unblocked
            if st.blocked and st.story not in failing_stories:
                st.blocked, st.blocked_at, st.streak, st.fingerprint = "", 0, 0, None
        if not step.story or not step.ran:
            continue
        st = states.setdefault(step.story, StoryState(step.story))
        if st.blocked:
            continue
        prefix = step.story + "::"
        own = [(k, m) for k, m in step.failures if k.startswith(prefix)]
        fp = fingerprint(own, normalize=normalize)
        st.worked.append(step.n)
        st.streak = st.streak + 1 if (step.tampered or fp == st.fingerprint) else 1
        st.fingerprint = fp
        failing = bool(own)
        if failing and st.streak >= breaker:
            same = same_failures(failure_fingerprints(own, normalize=normalize))
            st.blocked = (f"{same} in {st.streak} iterations in a row on this story "
                          f"(iterations {st.worked[-st.streak]}-{step.n})")
            st.blocked_at = step.n
        elif failing and max_iterations is not None and len(st.worked) >= max_iterations:
            st.blocked = (f"worked on in {plural(len(st.worked), 'iteration')} "
                          f"(ralph_story_max_iterations {max_iterations}) and still failing")
            st.blocked_at = step.n
    return states


def blocked(states: Mapping[str, StoryState]) -> dict[str, str]:
    """Story id -> why, for the blocked stories of ``states``."""
    return {sid: st.blocked for sid, st in states.items() if st.blocked}


def state_dump(*, event: str, run_id: str, prd: Path, rootdir: Path, reason: str,
               stories: Sequence[Mapping[str, Any]], report: Path | None,
               redact: Callable[[str], str]) -> str:
    """The escalation command's stdin: one JSON object.

    Shape::

        {"version": 1, "event": "story-blocked" | "breaker" | "all-blocked",
         "run": "<run id>", "prd": "<path>", "rootdir": "<path>", "reason": "<one line>",
         "report": "<path of the report>" | null,   # set when the run ended (all-blocked,
                                                     # breaker): the report is written first
         "stories": [{"id", "title", "blocked": "<why>" | "", "failing": [{"criterion",
                      "text", "why", "repeated", "fingerprint"}], "tried": [{"iteration", "agent",
                      "outcome", "passing", "total"}], "last_diff": "<git diff --stat>"}]}

    Every string value is passed through ``redact`` (secret values of the environment)
    before it is encoded, so that a secret JSON would escape (a ``"``, a ``\\``, a tab) is
    still found, and a replacement cannot break the JSON; keys are the fixed names above.
    """
    payload = {"version": 1, "event": event, "run": run_id, "prd": str(prd),
               "rootdir": str(rootdir), "reason": reason,
               "report": None if report is None else str(report), "stories": list(stories)}
    return json.dumps(_redact_strings(payload, redact), ensure_ascii=False, indent=1)


def _redact_strings(value: Any, redact: Callable[[str], str]) -> Any:
    """``value`` with ``redact`` applied to every string in it (mappings, lists, tuples)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: _redact_strings(v, redact) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact_strings(v, redact) for v in value]
    return value


@dataclass(frozen=True)
class EscalateResult:
    """How the escalation command went.

    Attributes:
        ok: it exited 0 in time.
        summary: one line for the progress output and the report.
        log_path: its output.
    """

    ok: bool
    summary: str
    log_path: Path


def run_escalate(command: str, dump: str, *, cwd: Path, log_path: Path,
                 env: Mapping[str, str] | None = None,
                 timeout: float = ESCALATE_TIMEOUT,
                 redact: Redactor | None = None) -> EscalateResult:
    """Run the escalation ``command`` through the shell with ``dump`` on stdin.

    Args:
        command: ini ``ralph_escalate``.
        dump: :func:`state_dump`'s JSON.
        cwd: the project root.
        log_path: receives the command's stdout and stderr.
        env: extra environment variables.
        timeout: seconds before its process group is killed.
        redact: replaces secrets in its log, or ``None`` (kept as printed). The command
            writes into a private temporary folder; ``log_path`` gets the redacted copy once
            it has ended (or the loop is interrupted).

    Never raises for a failing command: the result says what happened.
    """
    run_env = dict(os.environ)
    run_env.update(env or {})
    # "replace": a lone surrogate (a non-UTF-8 path, say) must not make this raise.
    data = dump.encode("utf-8", "replace")
    # The command writes into a private folder (mode 0700, removed after); only the redacted
    # copy is kept at log_path, also when the loop is interrupted meanwhile.
    with tempfile.TemporaryDirectory(prefix="pytest-ralph-escalate-",
                                     ignore_cleanup_errors=True) as private:
        raw = Path(private) / "escalate.log"
        try:
            log_path.open("wb").close()  # a log that cannot be written stops it here
            with raw.open("wb") as log:
                finished = run_in_group(command, cwd=cwd, output=log, timeout=timeout,
                                        input=data, env=run_env, shell=True)
        except OSError as exc:
            return EscalateResult(False, f"escalation command `{command}` could not start: "
                                  f"{exc}", log_path)
        finally:
            if raw.is_file():
                with contextlib.suppress(OSError):
                    redact_file(raw, log_path, redact or Redactor({}, shapes=False))
    if finished.timed_out:
        return EscalateResult(False, f"escalation command `{command}` timed out after "
                              f"{timeout:g} s (log {log_path})", log_path)
    if finished.returncode != 0:
        return EscalateResult(False, f"escalation command `{command}` failed with exit "
                              f"{finished.returncode} (log {log_path})", log_path)
    return EscalateResult(True, f"escalation command `{command}` ran (log {log_path})",
                          log_path)


def escalate(run: RunRecord, event: str, stories: list[str], *, command: str, rootdir: Path,
             redactor: Redactor, left: float | None,
             report: Path | None = None) -> tuple[str, EscalateResult]:
    """Run the escalation ``command`` (ini ``ralph_escalate``) for ``event`` about
    ``stories`` of ``run``, with :func:`state_dump` on stdin and its log in the run's folder.

    Args:
        left: seconds left of ``--ralph-budget`` (``None``: no budget); the command gets at
            most :data:`ESCALATE_TIMEOUT`, at least :data:`ESCALATE_MIN_SECONDS`.
        report: the run's report once written (the run ended), else ``None``.

    Returns:
        One line for the progress output and the report, and the command's result.
    """
    dump = state_dump(event=event, run_id=run.run_dir.id, prd=run.prd.path,
                      rootdir=rootdir, reason=run.reason or "; ".join(
                          f"{sid}: {run.blocked.get(sid, '')}" for sid in stories),
                      stories=[story_report(run, sid) for sid in stories],
                      report=report, redact=redactor.text)
    log = run.run_dir.path / f"escalate-{run.last.n:03d}-{event}.log"
    result = run_escalate(command, dump, cwd=rootdir, log_path=log,
                          env={EVENT_ENV: event},
                          timeout=ESCALATE_TIMEOUT if left is None else min(
                              ESCALATE_TIMEOUT, max(left, ESCALATE_MIN_SECONDS)),
                          redact=redactor)
    line = f"iteration {run.last.n}, {event} ({', '.join(stories)}): {result.summary}"
    return line, result
