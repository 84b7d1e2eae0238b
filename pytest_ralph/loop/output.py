"""What the loop writes as it goes: the terminal blocks (``[ralph baseline]``, ``[ralph
iteration n/max]``, the rate-limited block), the ``progress.txt`` entry of each iteration and
the ``run.json`` summary of a run. The report at the end is :mod:`pytest_ralph.loop.report`'s.

:class:`Printer` prints with secrets redacted; a closed stdout (``| head``) stops the printing,
never the loop.

This module does not import pytest.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import TextIO

from ..checks.results import CheckResults
from ..oracle.snapshot import Change
from ..util.redact import Redactor
from ..util.text import plural
from .gitdiff import COMMITS
from .prompt import pick_story
from .records import IterationRecord, RunRecord
from .report import Progress, progress_of, why
from .settings import Settings


class Printer:
    """Prints lines of text to ``out`` with ``redactor``'s secrets replaced."""

    def __init__(self, out: TextIO, redactor: Redactor) -> None:
        self.out = out
        self.redactor = redactor
        self._out_broken = False
        #: Called before each print: the live view takes its status line off the terminal.
        self.before: Callable[[], None] | None = None

    def __call__(self, text: str) -> None:
        """Print to the terminal; a closed stdout (``| head``) stops the printing, not the loop."""
        if self._out_broken:
            return
        if self.before is not None:
            self.before()
        try:
            self.out.write(self.redactor.text(text) + "\n")
            self.out.flush()
        except (BrokenPipeError, ValueError, OSError):
            self._out_broken = True
            _silence(self.out)


def _silence(stream: TextIO) -> None:
    """Drain a broken stream into the null device: point its file descriptor there and
    flush what is still buffered, so that pytest's own last flush (after its capture has
    put the original descriptor back) has nothing left to write."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
        stream.flush()


def baseline_block(run: RunRecord, selection: str) -> str:
    """The ``[ralph baseline]`` block; ``selection``: the ``-k``/``-m``/``--deselect`` options
    that select criteria (``""``: none)."""
    r = run.last.results
    total = len(r.criteria)
    return (f"[ralph baseline]\n  {len(r.passing)}/{total} criteria passing"
            + (f"; failing: {keys(r)}" if r.failing or r.errors else "")
            + (f"\n  selected by {selection}: {plural(total, 'criterion', 'criteria')}"
               if selection else ""))


def iteration_block(run: RunRecord, rec: IterationRecord, s: Settings,
                    left: float | None) -> str:
    """The ``[ralph iteration n/max]`` block of ``rec``, the last iteration of ``run``;
    ``left``: seconds left of ``--ralph-budget`` (``None``: no budget).

    Its ``Result:`` says how the check compares with the one before (:func:`pytest_ralph.
    loop.report.progress_of`: complete, progress, no change, regression, or the checks could
    not run) and, unless complete, which criteria fail now (``; failing now: ...``); its
    ``State:`` the passing count and, while something fails, the breaker's streaks."""
    r = rec.results
    before = run.iterations[-2] if len(run.iterations) > 1 else None
    prev = before.passing if before is not None else 0
    total = len(r.criteria) or len(run.prd.criteria())
    n_stories = len(r.by_story()) or len(run.prd.stories)
    goal = (f"{plural(total, 'criterion', 'criteria')} of {plural(n_stories, 'story')} "
            f"{'passes' if total == 1 else 'pass'} ({run.prd.path.name})")
    tried = rec.agent.describe() if rec.agent else "baseline check"
    result = result_text(progress_of(before.results if before else None, r), r)
    delta = rec.passing - prev
    state = f"{rec.passing}/{total} passing ({delta:+d})"
    if not r.complete:
        state += f"; identical-failure streak {rec.streak}/{s.breaker}"
        if rec.agent is not None and not rec.agent.ran:
            state += (f" (unchanged: the agent did not run properly); agent-error streak "
                      f"{rec.error_streak}/{s.agent_errors}")
    regress = (f"\n  Regressions: {', '.join(rec.regressions)} passed before and fail now"
               if rec.regressions else "")
    if rec.flaky:
        regress += (f"\n  Flaky: {', '.join(rec.flaky)} failed, then passed on a re-check "
                    "(left out of the breaker's fingerprint)")
    if rec.changes:
        regress += f"\n  Criteria changed: {changes_text(rec.changes)}" + (
            " (allowed by --ralph-allow-criteria-edits)" if s.allow_criteria_edits else
            "; not counted as progress, and no completion until they are restored")
    story = f"  Story: {rec.story}\n" if rec.story else ""
    newly = [sid for sid in rec.blocked if sid not in (
        run.iterations[-2].blocked if len(run.iterations) > 1 else {})]
    held = run.iterations[-2].blocked if len(run.iterations) > 1 else {}
    for sid in held:
        if sid not in rec.blocked:
            regress += f"\n  Unblocked: {sid}: its criteria pass again"
    for sid in newly:
        regress += f"\n  Blocked: {sid}: {rec.blocked[sid]}"
    if newly and not r.complete:
        nxt = pick_story(run.prd, r, rec.blocked)
        regress += (f"; next: {nxt.id}" if nxt is not None else
                    "; no story left to work on")
    for row in (rec.diff or "").splitlines():
        if row.startswith(COMMITS):
            regress += "\n  Commits: " + row[len(COMMITS):]
    if s.budget is not None or s.max_cost is not None:
        regress += "\n  Budget: " + ", ".join(
            ([f"{max(left or 0, 0):.0f} s of {s.budget:g} s left"] if s.budget else [])
            + ([f"${run.cost:.4f} of ${s.max_cost:g} spent"] if s.max_cost else []))
    return (f"[ralph iteration {rec.n}/{s.max_iterations}]\n"
            f"  Goal: {goal}\n{story}  Tried: {tried}\n  Result: {result}\n"
            f"  State: {state}{regress}")


def result_text(verdict: Progress, r: CheckResults, counted: bool = False) -> str:
    """What follows ``Result:`` for the check ``r`` (``verdict``: its progress):
    ``complete (+1): every criterion passes``, ``progress (+1); failing now: US-2::AC1``,
    ``no change; failing now: ...``, ``regression (-1); failing now: ...``, ``error: the
    checks could not run (...); failing now: ...``; ``counted``: with the passing count
    (``progress (+1): 1/2 passing; failing now: ...``)."""
    count = f"{len(r.passing)}/{len(r.criteria)}"
    if verdict.word == "complete":
        return f"{verdict.text()}: every criterion passes" + (f" ({count})" if counted else "")
    head = (f"error: the checks could not run ({why(r.errors[0], 300)})"
            if verdict.word == "error" else verdict.text())
    return head + (f": {count} passing" if counted else "") + f"; failing now: {keys(r)}"


def rate_limited_block(n: int, s: Settings, tried: str, wait: float, source: str,
                       error_streak: int, stopping: bool) -> str:
    """The ``[ralph iteration n/max: rate limited]`` block: ``tried`` describes the agent run,
    ``wait`` is the pause in seconds (``source``: where that figure came from), unless the
    run is ``stopping``."""
    return (f"[ralph iteration {n}/{s.max_iterations}: rate limited]\n"
            f"  Tried: {tried}\n"
            + (f"  Pause: {seconds(wait)} ({source}); the iteration is not spent; "
               f"agent-error streak {error_streak}/{s.agent_errors}"
               if not stopping else
               f"  Agent-error streak {error_streak}/{s.agent_errors}"))


def progress_entry(run: RunRecord, rec: IterationRecord, s: Settings) -> str:
    """The ``progress.txt`` entry of ``rec``, the last iteration of ``run`` (not redacted).

    It starts with a ``## <UTC time> run <run id> iteration <n>/<max>`` line, which names the
    run the entry belongs to (:func:`pytest_ralph.loop.prompt.render_progress` tells a new
    run's prompt which entries are of earlier runs by it); its ``result:`` line is the
    terminal's ``Result:`` (:func:`result_text`) with the passing count."""
    r = rec.results
    before = run.iterations[-2].results if len(run.iterations) > 1 else None
    lines = [f"## {rec.started.strftime('%Y-%m-%dT%H:%M:%SZ')} run {run.run_dir.id} "
             f"iteration {rec.n}/{s.max_iterations}",
             f"story: {rec.story or '-'}",
             f"tried: {rec.agent.describe() if rec.agent else 'baseline'}",
             f"result: {result_text(progress_of(before, r), r, counted=True)}"]
    if not r.complete:
        for c in r.failing[:10]:
            lines.append(f"why {c.key}: {why(c.message)}")
        for e in r.errors[:3]:
            lines.append(f"why <check>: {why(e)}")
    if rec.regressions:
        lines.append(f"regressions (passed before, fail now): {', '.join(rec.regressions)}")
    if rec.flaky:
        lines.append(f"flaky (failed, then passed on a re-check): {', '.join(rec.flaky)}")
    if rec.changes:
        lines.append(f"criteria changed: {changes_text(rec.changes)}")
    held = run.iterations[-2].blocked if len(run.iterations) > 1 else {}
    for sid in held:
        if sid not in rec.blocked:
            lines.append(f"unblocked {sid}: its criteria pass again")
    for sid, reason in rec.blocked.items():
        lines.append(f"blocked {sid}: {reason}")
    if rec.diff:
        rows = rec.diff.strip().splitlines()
        moves = [row for row in rows if row.startswith(COMMITS)]
        stat = [row.strip() for row in rows if not row.startswith(COMMITS)]
        lines.append("changed: " + "; ".join(stat[-1:] + moves))
    if not r.complete:
        lines.append(f"streak: {rec.streak}/{s.breaker}; agent-error streak: "
                     f"{rec.error_streak}/{s.agent_errors}")
    return "\n".join(lines) + "\n"


def end_entry(run: RunRecord) -> str:
    """The ``progress.txt`` entry of an ended run (``run.finished`` set)."""
    assert run.finished is not None
    return (f"## {run.finished.strftime('%Y-%m-%dT%H:%M:%SZ')} run "
            f"{run.run_dir.id} ended: {run.status} (exit {run.exit_code}): "
            f"{run.reason}\n")


def summary(run: RunRecord, s: Settings) -> dict[str, object]:
    """``run.json``: the run, its iterations and its rate-limited attempts, as JSON.

    Each iteration's ``fingerprint`` is the breaker's (``null`` when nothing it compares
    fails) and ``result`` the word of its ``Result:`` (:data:`pytest_ralph.loop.report.
    RESULT_WORDS`; ``null`` for the baseline)."""
    return {
        "run": run.run_dir.id, "prd": str(run.prd.path), "status": run.status,
        "exit_code": run.exit_code, "reason": run.reason, "agent": run.argv,
        "started": run.started.isoformat(),
        "finished": run.finished.isoformat() if run.finished else None,
        "max_iterations": s.max_iterations, "breaker": s.breaker,
        "cost_usd": round(run.cost, 6), "blocked": run.blocked,
        "rate_limited": [{"iteration": n, "outcome": a.outcome, "why": a.detail,
                          "paused": round(p, 3), "log": str(a.log_path)}
                         for n, a, p in run.attempts],
        "escalations": run.escalations,
        "iterations": [{
            "n": it.n, "story": it.story, "passing": it.passing,
            "total": len(it.results.criteria), "failing": [c.key for c in it.results.failing],
            "errors": list(it.results.errors), "fingerprint": it.fingerprint or None,
            "result": (progress_of(run.iterations[i - 1].results, it.results).word
                       if i else None),
            "streak": it.streak, "error_streak": it.error_streak,
            "regressions": list(it.regressions), "flaky": list(it.flaky),
            "criteria_changed": [{"subject": ch.subject, "change": ch.change,
                                  "criteria": list(ch.criteria)} for ch in it.changes],
            "blocked": it.blocked, "diff_stat": it.diff,
            "agent": None if it.agent is None else {
                "argv": list(it.agent.argv), "outcome": it.agent.outcome,
                "exit_code": it.agent.exit_code, "duration": round(it.agent.duration, 3),
                "why": it.agent.detail, "cost_usd": it.agent.cost_usd,
                "input_tokens": it.agent.input_tokens,
                "output_tokens": it.agent.output_tokens, "turns": it.agent.turns},
        } for i, it in enumerate(run.iterations)],
    }


def changes_text(changes: tuple[Change, ...] | list[Change], most: int = 5) -> str:
    """The changes to the oracle, described, at most ``most`` of them (``, +N more``)."""
    shown = ", ".join(ch.describe() for ch in changes[:most])
    return shown + (f", +{len(changes) - most} more" if len(changes) > most else "")


def seconds(value: float) -> str:
    """``"2.5 s"``, ``"60 s"``: seconds with a decimal only when it matters."""
    return f"{value:.1f} s" if value < 10 and value != int(value) else f"{value:.0f} s"


def keys(r: CheckResults, most: int = 8) -> str:
    """The keys of the failing criteria (and ``<check phase>`` for a phase error), at most
    ``most`` of them (``, +N more``)."""
    names = [c.key for c in r.failing] + (["<check phase>"] if r.errors else [])
    shown = ", ".join(names[:most])
    return shown + (f", +{len(names) - most} more" if len(names) > most else "")
